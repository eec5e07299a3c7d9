"""The equivalence certificates of a matrix, made before any timing and cached in the state folder by
what they certify (reprokit/certify/certify_plan.py decides the pairs and their keys)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kits.common.files import write_json_atomic
from reprokit.certify import certify_plan
from reprokit.certify.certificate import certify_many
from reprokit.certify.script_certificate import certify_scripts
from reprokit.runners.base import Runner


def for_matrix(specs: list[dict[str, Any]], runner: Runner, state: Path, enabled: bool, budget: float,
               budget_why: str) -> dict[str, list[dict[str, Any]]]:
    """Each experiment's equivalence certificates, checked before any timing: one per variant pair
    that runs, on the specs that are timed (their profile, sizes, image or lock), cached by what
    they certify and the trajectory budget (FLOPs, made as ``budget_why`` says), the missing ones made
    together (one process per framework). One that cannot run is recorded with its reason, never left out."""
    entries: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = []     # (experiment, pair, certificate)
    pairs_of: dict[int, dict[str, Any]] = {}                            # entry -> its pair, where one is certified
    for experiment, pairs in certify_plan.pairs(specs).items():
        for pair in pairs:
            if pair.get("status") == "not-run" or not enabled:
                entries.append((experiment, None, certify_plan.not_run(pair, "skipped with --no-certify")))
                continue
            pairs_of[len(entries)] = pair
            cached = state / "certificates" / f"{certify_plan.cache_key(pair, budget)}.json"
            entries.append((experiment, pair, json.loads(cached.read_text()) if cached.exists() else None))
    missing = [i for i, (_, _, cert) in enumerate(entries) if cert is None]
    todo = {key: [missing[j] for j in ids]
            for key, ids in certify_plan.by_key([pairs_of[i] for i in missing], budget).items()}
    if todo:
        print(f"certificates: {len(todo)} to make for {sum(map(len, todo.values()))} variant pair(s) (same initial "
              f"weights, logits, steps, arithmetic); {len(entries) - sum(map(len, todo.values()))} cached or not run",
              flush=True)
        log = lambda line: print(line, flush=True)      # noqa: E731
        kits = {k: ids for k, ids in todo.items() if not certify_plan.is_script(pairs_of[ids[0]])}
        made = dict(zip(kits, certify_many([pairs_of[ids[0]] for ids in kits.values()], runner,
                                           [state / "work" / f"cert-{k}" for k in kits], trajectory_budget=budget,
                                           trajectory_budget_why=budget_why, log=log)))
        made |= {k: certify_scripts(pairs_of[ids[0]], runner, state / "work" / f"cert-{k}", log=log)
                 for k, ids in todo.items() if k not in kits}
        for key, ids in todo.items():
            cert = made[key]
            write_json_atomic(state / "certificates" / f"{key}.json", cert)
            for i in ids:
                entries[i] = (entries[i][0], entries[i][1], cert)
            print(f"certificate: {cert['experiment']} {' / '.join(cert['variant'].values())}"
                  f"{f' (and {len(ids) - 1} pair(s) it stands for)' if len(ids) > 1 else ''}: {cert['status']}: "
                  f"{cert['summary']}", flush=True)
    out: dict[str, list[dict[str, Any]]] = {}
    for experiment, certified, entry in entries:
        assert entry is not None                # each missing one was made above
        if certified:
            # A cached certificate may be of the same model, data and step under another variant name.
            entry = {**entry, "variant": {fw: spec["variant"] for fw, spec in certified.items()},
                     "pitfalls": {fw: spec["pitfalls"] for fw, spec in certified.items()}}
        out.setdefault(experiment, []).append(entry)
    return out
