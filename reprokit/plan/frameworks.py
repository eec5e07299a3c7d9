"""Which frameworks run an experiment, and whether their kits can, decided before any run.

An experiment's own ``frameworks`` is its default; ``--frameworks`` may name any registered framework whose kit
can run it: every kit builds the built-in models, a custom model only where the spec gives that framework a
builder. A kit may also declare the spec options it cannot honour, as data: a ``limits`` module in its package,
standard library only, whose ``refusals(spec_json) -> list[str]`` gives one sentence per limit a planned RunSpec
runs into; the host reads it without the framework (reprokit/kits/jax_kit/limits.py).
"""
from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from reprokit.errors import UserError
from reprokit.kits.contract.names import FRAMEWORKS, REGISTRY, kit_module, label
from reprokit.kits.contract.spec import RunSpec
from reprokit.plan.experiments import Experiment

LIMITS_PART = "limits"


def chosen(asked: tuple[str, ...], exp: Experiment) -> tuple[str, ...]:
    """The frameworks that run ``exp``, in the registry's order: those asked for, or (none asked) its own."""
    wanted = set(asked or exp.frameworks)
    return tuple(fw for fw in FRAMEWORKS if fw in wanted)


def refusals(spec: RunSpec) -> list[str]:
    """What ``spec``'s framework's kit declares it cannot honour in it, one sentence each ([] where its kit has no
    limits module, or can run it)."""
    name = kit_module(spec.framework, LIMITS_PART)
    try:
        found = importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:         # its package is not on this host's path
        found = False
    if not found:
        return []
    said: list[str] = importlib.import_module(name).refusals(spec.to_dict())
    return said


def check(exp: Experiment, frameworks: tuple[str, ...], profile: str) -> None:
    """Refuse, in one sentence, a framework asked for that has no builder for ``exp``'s custom model."""
    model = exp.resolved(profile).get("model", {})
    for fw in frameworks:
        if model.get("name") == "custom" and fw not in model:
            given = [label(f) for f in REGISTRY if f in model]
            raise UserError(f"{exp.path}: experiment {exp.name!r} has a custom model with no {label(fw)} builder "
                            f"(it gives {', '.join(given) or 'none'}); add model.{fw} = \"module:function\" or "
                            f"leave {fw} out of --frameworks")


def check_specs(specs: list[RunSpec], path: Path) -> None:
    """Refuse, in one sentence, the first planned spec its framework's kit declares it cannot honour."""
    for spec in specs:
        said = refusals(spec)
        if said:
            raise UserError(f"{path}: {said[0].rstrip('.')} (the {label(spec.framework)} kit's limits, variant "
                            f"{spec.variant}); change it, or leave {spec.framework} out of --frameworks")
