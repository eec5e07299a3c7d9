"""Delta debugging (Zeller and Hildebrandt's ddmin) over a set of changes, with undecided tests.

A test applies a subset of the changes to the base side and says whether the result lands on the
target side (MOVES), stays on the base side (STAYS), or cannot be told apart (UNDECIDED). ddmin
narrows the changes to a 1-minimal subset that MOVES: one whose every single removal was tested and
STAYS. An undecided test counts as not moving, as in ddmin with unresolved outcomes, and the
result says whether one stands in the way of 1-minimality.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass


class Outcome(enum.Enum):
    MOVES = "moves"
    STAYS = "stays"
    UNDECIDED = "undecided"


class OutOfBudget(Exception):
    """Raised by a test whose runs would go past the budget; ddmin stops with what it has."""


@dataclass(frozen=True)
class Found:
    changes: tuple[str, ...]        # the smallest subset found to move, in the order given
    one_minimal: bool               # every single removal was tested and stays
    undecided_removals: tuple[str, ...] = ()     # removals whose test was undecided
    out_of_budget: bool = False


def worst_case_tests(n: int) -> int:
    """An upper bound on the distinct subsets ddmin tests for n changes, the empty and the full set aside:
    Zeller and Hildebrandt's (n^2 + 7n) / 2, and never more than the 2^n - 2 other subsets there are."""
    return 0 if n < 2 else min((n * n + 7 * n) // 2, 2 ** n - 2)


def _split(changes: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """n chunks as equal as may be, in order."""
    size, extra = divmod(len(changes), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(tuple(changes[start:end]))
        start = end
    return out


def ddmin(changes: Sequence[str], test: Callable[[tuple[str, ...]], Outcome]) -> Found:
    """A 1-minimal subset of ``changes`` that moves, given that all of them move and none stays (the caller
    has measured both ends). ``test`` is called once per distinct subset; it may raise OutOfBudget."""
    seen: dict[frozenset[str], Outcome] = {frozenset(): Outcome.STAYS, frozenset(changes): Outcome.MOVES}

    def outcome(subset: tuple[str, ...]) -> Outcome:
        key = frozenset(subset)
        if key not in seen:
            seen[key] = test(subset)
        return seen[key]

    current, n = tuple(changes), 2
    try:
        while len(current) >= 2:
            chunks = _split(current, n)
            moved = next((c for c in chunks if outcome(c) is Outcome.MOVES), None)
            if moved is not None:
                current, n = moved, 2
                continue
            if n > 2:       # with two chunks each complement is the other chunk, already tested
                rest = next((r for c in chunks if outcome(r := tuple(x for x in current if x not in c))
                             is Outcome.MOVES), None)
                if rest is not None:
                    current, n = rest, max(n - 1, 2)
                    continue
            if n >= len(current):
                break
            n = min(len(current), 2 * n)
    except OutOfBudget:
        return Found(current, False, out_of_budget=True)
    removals = {x: seen.get(frozenset(current) - {x}) for x in current}
    undecided = tuple(x for x, o in removals.items() if o is not Outcome.STAYS)
    return Found(current, not undecided, undecided)
