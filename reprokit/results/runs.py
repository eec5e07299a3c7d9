"""Results the way the report reads them: grouped by experiment, variant and framework, in a fixed
order, and what each experiment ran against its published setting."""
from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from reprokit.kits.contract.pitfalls import PITFALLS

FIXED, POSTED = "fixed", "as_posted"
SCRIPT, VERBATIM = "script", "verbatim"      # a script experiment's runs; a seed's posted code itself
# An ablation's single changes: "+<factor>" is fixed with that factor added alone, "-<factor>" as_posted with it
# removed alone; a factor is a pitfall or, as "numerics", as_posted's numerics (its frameworks' own TF32 and cuDNN).
ADDED, REMOVED, NUMERICS = "+", "-", "numerics"
# Each framework's fast path (reprokit/plan/tuning.py), and one of its settings alone on fixed: "+tuned_<setting>".
TUNED = "tuned"
TUNED_ALONE = f"{ADDED}{TUNED}_"
TUNED_SETTINGS = ("precision", "cudnn_autotune", "compile", "channels_last", "inter_op")   # tuning.SETTINGS' names
MODELS = {"vgg16": "VGG16", "simplecnn": "SimpleCNN", "resnet50": "ResNet-50", "custom": "the experiment's own model"}
DATASETS = {"cifar10": "CIFAR-10", "synthetic": "synthetic random data", "learnable": "generated `learnable` gratings"}

Grouped = dict[str, dict[str, dict[str, list[dict[str, Any]]]]]
T = TypeVar("T")


def _rank(variant: str) -> int:
    return 0 if variant == FIXED else 1 if variant.startswith(ADDED) else 3 if variant.startswith(REMOVED) else 2


def variant_order(variants: Iterable[str]) -> list[str]:
    """fixed first, then each "+factor" (alphabetically), the named variants such as as_posted, then each
    "-factor": the order of a walk from fixed to as_posted and back."""
    return sorted(set(variants), key=lambda v: (_rank(v), v))


def order(r: dict[str, Any]) -> tuple[Any, ...]:
    """experiment, framework, then fixed, each +factor, the named variants, each -factor, then the repeat."""
    return r["experiment"], r["framework"], _rank(r["variant"]), r["variant"], r["repeat"]


Configuration = tuple[frozenset[str], str]


def configuration(spec: dict[str, Any]) -> Configuration:
    """What a run changed against the experiment: its pitfalls and its numerics."""
    return frozenset(spec.get("pitfalls", [])), json.dumps(spec.get("numerics", {}), sort_keys=True)


def _meant(variant: str, framework: str, fixed: Configuration, posted: Configuration) -> Configuration:
    """The configuration ``variant`` stands for in ``framework`` (a pitfall of another framework changes nothing)."""
    sign, factor = variant[:1], variant[1:]
    if sign not in (ADDED, REMOVED):
        return fixed            # a named variant with nothing of this framework's
    base, other = (fixed, posted) if sign == ADDED else (posted, fixed)
    if factor == NUMERICS:
        return base[0], other[1]
    if factor not in PITFALLS or PITFALLS[factor]["framework"] != framework:
        return base
    return (base[0] | {factor} if sign == ADDED else base[0] - {factor}), base[1]


def stand_in(variant: str, framework: str, by_variant: Mapping[str, Mapping[str, T]],
             spec_of: Callable[[T], dict[str, Any]]) -> str | None:
    """The variant whose runs of ``framework`` are ``variant``'s: itself where it ran, else the one the plan ran
    the same configuration under (it runs each once, under the first name: fixed for a "+p" of another
    framework, as_posted for its "-p"), or None. ``spec_of``: a spec from a by_variant entry (a spec, runs)."""
    def spec(v: str) -> dict[str, Any] | None:
        got = by_variant.get(v, {}).get(framework)
        return spec_of(got) if got else None
    if spec(variant) is not None:
        return variant
    fixed = spec(FIXED)
    if fixed is None:
        return None
    posted = spec(POSTED)
    wanted = _meant(variant, framework, configuration(fixed), configuration(posted or fixed))
    return next((v for v in variant_order(by_variant) if (s := spec(v)) is not None and configuration(s) == wanted),
                None)


def runs_of(by_variant: Mapping[str, Mapping[str, list[dict[str, Any]]]], variant: str,
            framework: str) -> list[dict[str, Any]]:
    """The finished runs of ``framework`` that stand for ``variant`` (stand_in), or none."""
    found = stand_in(variant, framework, by_variant, lambda rs: rs[0]["spec"])
    return list(by_variant[found][framework]) if found else []


def devices(r: dict[str, Any]) -> int:
    """The devices one run held (--devices; one before the flag existed)."""
    return int(r["spec"].get("devices", 1))


def group(results: list[dict[str, Any]]) -> Grouped:
    """experiment -> variant -> framework -> finished repeats, at the fewest devices the experiment ran on: a
    sweep's other counts are its scaling section's (reprokit/report/scaling_section.py), never repeats of these."""
    ok = [r for r in results if r["status"] == "ok"]
    fewest: dict[str, int] = {}
    for r in ok:
        fewest[r["experiment"]] = min(fewest.get(r["experiment"], devices(r)), devices(r))
    out: Grouped = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in ok:
        if devices(r) == fewest[r["experiment"]]:
            out[r["experiment"]][r["variant"]][r["framework"]].append(r)
    return out


def main_variant(by_variant: dict[str, Any]) -> str:
    """The variant a report holds the frameworks side by side on: fixed, or a script experiment's scripts."""
    return SCRIPT if FIXED not in by_variant and SCRIPT in by_variant else FIXED


def first(variants: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Any finished run of the experiment (for what all its runs share: spec, profile, device)."""
    return next(rs[0] for fws in variants.values() for rs in fws.values() if rs)


def is_script(spec: dict[str, Any]) -> bool:
    """A probed script's run (reprokit/kits/probe.py), whose spec names the script instead of a model and a loop."""
    return spec.get("source") == "script"


def classes(spec: dict[str, Any]) -> int:
    """The classes of the task: the model's; a script's data is CIFAR-10 or its 10-class stand-in."""
    return 10 if is_script(spec) else spec["model"]["num_classes"]


def _setting(doc: dict[str, Any]) -> tuple[Any, ...]:
    if is_script(doc):
        return doc["data"]["dataset"], None, None
    model, data = doc["model"], doc["data"]
    return data["dataset"], data["input_size"], model.get("width_multiplier", 1.0)


def _script(spec: dict[str, Any]) -> str:
    """'the users' own scripts on generated `learnable` gratings, at most 3 steps per epoch, 1 epoch'."""
    b = spec["bounds"]
    bounds = [f"at most {b['max_steps']} training steps per epoch" if b.get("max_steps") else None,
              f"{b['epochs']} epoch(s)" if b.get("epochs") else None]
    data = DATASETS.get(spec["data"]["dataset"], spec["data"]["dataset"])
    return "the users' own scripts, unmodified, on " + ", ".join([data, *(x for x in bounds if x)])


def describe(doc: dict[str, Any]) -> str:
    """'VGG16 at width 0.125x on generated `learnable` gratings at 48x48, batch 32'."""
    if is_script(doc):
        return _script(doc)
    model, data = doc["model"], doc["data"]
    width = model.get("width_multiplier", 1.0)
    size = data["input_size"]
    return (f"{MODELS.get(model['name'], model['name'])}" + (f" at width {width:g}x" if width != 1 else "") +
            f" on {DATASETS.get(data['dataset'], data['dataset'])} at {size}x{size},"
            f" batch {doc['train']['batch_size']}")


def as_run(spec: dict[str, Any], published: dict[str, Any] | None) -> tuple[str, bool]:
    """What ran, and whether that differs from the published setting (dataset, input size, width)."""
    ran = describe(spec)
    if is_script(spec):             # its published setting is the script as written: unbounded
        return ran, any(spec["bounds"].values())
    return ran, published is not None and _setting(spec) != _setting(published)
