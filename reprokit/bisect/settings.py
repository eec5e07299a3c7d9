"""The declared settings of a bisect's two sides, what differs between them, and one configuration's variant.

A side's declared settings are its pitfalls and its numerics (the experiment's, with the variant's own
over them). A change flips one differing setting from B's value to A's: a pitfall on or off, a numerics
key to A's value. A configuration (B with some changes flipped) runs as a variant of the experiment:
under the name of a variant that already has the same settings for that framework (so its finished
runs count), or under a name made from its settings, so a repeated configuration is never run twice.
"""
from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprokit.errors import UserError
from reprokit.kits.contract.names import label
from reprokit.kits.contract.pitfalls import PITFALLS, for_framework
from reprokit.plan.experiments import Experiment
from reprokit.report import compare

NUMERICS = "numerics."           # a change's prefix for a numerics key; a pitfall's change is its name


@dataclass(frozen=True)
class Side:
    name: str                        # as the command gave it
    variant: str                     # the experiment's variant it is, or the variant its results ran
    pitfalls: tuple[str, ...]
    numerics: dict[str, Any]         # effective: the experiment's with the variant's over them


@dataclass(frozen=True)
class Origin:
    """What result sets fix about the runs: the profile and the step cap they ran at."""
    profile: str | None = None
    max_steps: int | None = None


def _base_numerics(exp: Experiment, profile: str) -> dict[str, Any]:
    numerics: dict[str, Any] = exp.resolved(profile)["numerics"]
    return numerics


def from_variant(exp: Experiment, variant: str, profile: str) -> Side:
    """A side named by a variant of the experiment: fixed, or one of its variants with pitfalls."""
    if variant == "fixed":
        return Side(variant, variant, (), _base_numerics(exp, profile))
    if variant not in exp.variants:
        other = " (it runs the posted scripts, which declare no settings to flip)" \
            if variant in exp.script_variants else ""
        raise UserError(f"experiment {exp.name!r} has no variant {variant!r} with declared settings{other}; "
                        f"give two of: fixed, {', '.join(exp.variants) or '(no others)'}")
    v = exp.variants[variant]
    return Side(variant, variant, tuple(v["pitfalls"]), {**_base_numerics(exp, profile), **v.get("numerics", {})})


def from_results(given: str) -> tuple[str, Side, Origin]:
    """(experiment, side, origin) of a result set given as PATH or PATH@VARIANT: a report folder, its results/,
    or a folder of result files, holding one variant of one experiment (or naming the one meant)."""
    path, _, variant = given.rpartition("@") if "@" in given and not Path(given).exists() else (given, "", "")
    runs = [r for r in compare.load(Path(path)) if r["status"] == "ok"]
    experiments = sorted({r["experiment"] for r in runs})
    if len(experiments) != 1:
        raise UserError(f"{path}: a bisect side is the runs of one experiment, and its finished runs are of "
                        f"{', '.join(experiments) or 'none'}; give a result set of one experiment")
    variants = sorted({r["variant"] for r in runs})
    if not variant and len(variants) > 1:
        raise UserError(f"{path} holds the variants {', '.join(variants)}; name the one meant as {path}@VARIANT")
    variant = variant or variants[0]
    mine = [r for r in runs if r["variant"] == variant]
    if not mine:
        raise UserError(f"{path}: no finished run of the variant {variant!r}; it holds {', '.join(variants)}")
    numerics = {json.dumps(r["spec"]["numerics"], sort_keys=True) for r in mine}
    shapes = {(r["profile"], r["spec"]["train"].get("max_steps_per_epoch")) for r in mine}
    if len(numerics) > 1 or len(shapes) > 1:
        raise UserError(f"{path}@{variant}: its runs differ among themselves in numerics, profile or step cap; "
                        f"give a result set of one configuration")
    pitfalls = tuple(dict.fromkeys(p for r in mine for p in r["spec"]["pitfalls"]))
    (profile, max_steps), = shapes
    return experiments[0], Side(given, variant, pitfalls, json.loads(numerics.pop())), Origin(profile, max_steps)


def differences(a: Side, b: Side) -> list[str]:
    """The declared settings that differ, as changes from B to A: pitfalls (A's order, then B's), then numerics."""
    flips = [p for p in a.pitfalls if p not in b.pitfalls] + [p for p in b.pitfalls if p not in a.pitfalls]
    keys = sorted(k for k in {*a.numerics, *b.numerics} if a.numerics.get(k) != b.numerics.get(k))
    return flips + [NUMERICS + k for k in keys]


def describe(change: str, a: Side, b: Side) -> str:
    """'tf_batch_of_one (TensorFlow; on in A, off in B)', 'numerics.tf32 (A framework_default, B False)'."""
    if change.startswith(NUMERICS):
        key = change[len(NUMERICS):]
        return f"{change} (A {a.numerics.get(key)!r}, B {b.numerics.get(key)!r})"
    where = "on in A, off in B" if change in a.pitfalls else "off in A, on in B"
    return f"{change} ({label(PITFALLS[change]['framework'])}; {where})"


def touched(changes: list[str], frameworks: tuple[str, ...]) -> tuple[str, ...]:
    """The frameworks whose runs a change can alter: a pitfall's own, every one for a numerics key."""
    return tuple(f for f in frameworks if any(c.startswith(NUMERICS) or PITFALLS[c]["framework"] == f
                                              for c in changes))


@dataclass(frozen=True)
class Configuration:
    """B with some changes flipped to A's values."""
    pitfalls: tuple[str, ...]
    own_numerics: dict[str, Any]     # the numerics that differ from the experiment's

    def for_framework(self, framework: str) -> tuple[tuple[str, ...], dict[str, Any]]:
        return tuple(for_framework(list(self.pitfalls), framework)), self.own_numerics


def configuration(flipped: tuple[str, ...] | list[str], a: Side, b: Side, base: dict[str, Any]) -> Configuration:
    pitfalls = [p for p in (*a.pitfalls, *b.pitfalls) if (p in b.pitfalls) != (p in flipped)]
    numerics = {**b.numerics, **{k: a.numerics[k] for c in flipped if c.startswith(NUMERICS)
                                 if (k := c[len(NUMERICS):]) in a.numerics}}
    for c in flipped:                 # a key only B sets goes back to the experiment's (or away)
        if c.startswith(NUMERICS) and c[len(NUMERICS):] not in a.numerics:
            numerics.pop(c[len(NUMERICS):], None)
    return Configuration(tuple(dict.fromkeys(pitfalls)), {k: v for k, v in numerics.items() if base.get(k) != v})


def variant_for(exp: Experiment, config: Configuration, framework: str, profile: str,
                prefer: tuple[str, ...]) -> tuple[str, Experiment]:
    """The variant that runs a configuration in one framework, and the experiment that defines it: a named
    variant with the same settings there (fixed first, then ``prefer``, then the others, then each pitfall
    alone as the ablation names it), or a new one named for its settings."""
    base = _base_numerics(exp, profile)
    wanted = config.for_framework(framework)
    named: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {"fixed": ((), {})}
    for name in (*prefer, *exp.variants):
        if name in exp.variants:
            v = exp.variants[name]
            own = {k: val for k, val in {**base, **v.get("numerics", {})}.items() if base.get(k) != val}
            named.setdefault(name, (tuple(for_framework(v["pitfalls"], framework)), own))
    for p in for_framework(list(PITFALLS), framework):
        named.setdefault(f"+{p}", ((p,), {}))
    for name, settings in named.items():
        if settings == wanted:
            return name, _with(exp, name, [*settings[0]], {}) if name.startswith("+") else exp
    digest = hashlib.sha256(json.dumps([wanted[0], wanted[1]], sort_keys=True, default=str).encode()).hexdigest()
    name = f"bisect-{digest[:10]}"
    return name, _with(exp, name, list(wanted[0]), wanted[1])


def _with(exp: Experiment, name: str, pitfalls: list[str], numerics: dict[str, Any]) -> Experiment:
    """The experiment with one more variant, for planning only: its file is not touched."""
    doc = copy.deepcopy(exp.doc)
    doc.setdefault("variants", {})[name] = {"description": "a bisect configuration", "pitfalls": pitfalls,
                                            **({"numerics": numerics} if numerics else {})}
    return Experiment(path=exp.path, doc=doc)
