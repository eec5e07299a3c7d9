"""The one owner of the run loop, in the manner of pyperf's manager: each next batch of runs comes from a policy
over the results so far, the loop runs it through the executor, and it stops at the first interruption.

A policy never changes a plan: it answers with the specs the matrix holds after its batch (what the report reads)
and the runs of them still to do (reprokit/execute/policies.py: the plain matrix, tuned's round, --repeats auto's
rounds; bisect's steps, reprokit/bisect/search.py, each one batch).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from reprokit.execute.executors import Executor, ProgressFor
from reprokit.kits.contract.spec import Spec
from reprokit.results.store import Store
from reprokit.runners.base import Runner


@dataclass(frozen=True)
class Batch:
    specs: tuple[Spec, ...]         # the matrix once this batch has run: what the report reads
    todo: tuple[Spec, ...]          # of them, the runs to start now (a finished one is not run again)
    progress_for: ProgressFor       # each run's progress line
    said: tuple[str, ...] = ()      # what the policy says before its batch


class Policy(Protocol):
    def next(self, specs: tuple[Spec, ...], store: Store) -> Batch | None:
        """The next batch over the matrix so far and the results in ``store``; None once the policy is done."""


@dataclass(frozen=True)
class Ran:
    specs: tuple[Spec, ...]         # every spec the matrix came to hold
    failures: int                   # runs that ended other than ok
    interrupted: bool               # a signal stopped the loop: what finished is stored, the rest resumes


def unfinished(specs: Sequence[Spec], store: Store) -> tuple[Spec, ...]:
    """The specs without an ok result in the store: what a batch still runs."""
    return tuple(s for s in specs if not ((r := store.get(s.run_id)) and r["status"] == "ok"))


def run(executor: Executor, runner: Runner, store: Store, specs: Sequence[Spec], policies: Sequence[Policy]) -> Ran:
    """Each policy in turn, batch by batch, until it is done; each result stored as its run ends."""
    held, failures = tuple(specs), 0
    for policy in policies:
        while (batch := policy.next(held, store)) is not None:
            held = batch.specs
            for line in batch.said:
                print(line, flush=True)
            if not batch.todo:
                continue
            failed, interrupted = executor.run(runner, batch.todo, store, batch.progress_for)
            failures += failed
            if interrupted:
                return Ran(held, failures, True)
    return Ran(held, failures, False)
