"""Results the way the report reads them: grouped by experiment, variant and framework, in a fixed
order, and what each experiment ran against its published setting."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

FIXED, POSTED = "fixed", "as_posted"
SCRIPT, VERBATIM = "script", "verbatim"      # a script experiment's runs; a seed's posted code itself
MODELS = {"vgg16": "VGG16", "simplecnn": "SimpleCNN", "custom": "the experiment's own model"}
DATASETS = {"cifar10": "CIFAR-10", "synthetic": "synthetic random data", "learnable": "generated `learnable` gratings"}

Grouped = dict[str, dict[str, dict[str, list[dict[str, Any]]]]]


def variant_order(variants: Iterable[str]) -> list[str]:
    """fixed first, then each "+pitfall" (alphabetically), then named variants such as as_posted."""
    vs = set(variants)
    return ([FIXED] if FIXED in vs else []) + sorted(v for v in vs if v.startswith("+")) + \
        sorted(v for v in vs if v != FIXED and not v.startswith("+"))


def order(r: dict[str, Any]) -> tuple[Any, ...]:
    """experiment, framework, then fixed, each +pitfall, the named variants, then the repeat."""
    rank = 0 if r["variant"] == FIXED else 1 if r["variant"].startswith("+") else 2
    return r["experiment"], r["framework"], rank, r["variant"], r["repeat"]


def group(results: list[dict[str, Any]]) -> Grouped:
    """experiment -> variant -> framework -> finished repeats."""
    out: Grouped = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in results:
        if r["status"] == "ok":
            out[r["experiment"]][r["variant"]][r["framework"]].append(r)
    return out


def main_variant(by_variant: dict[str, Any]) -> str:
    """The variant a report holds the frameworks side by side on: fixed, or a script experiment's scripts."""
    return SCRIPT if FIXED not in by_variant and SCRIPT in by_variant else FIXED


def first(variants: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Any finished run of the experiment (for what all its runs share: spec, profile, device)."""
    return next(rs[0] for fws in variants.values() for rs in fws.values() if rs)


def is_script(spec: dict[str, Any]) -> bool:
    """A probed script's run (kits/probe.py), whose spec names the script instead of a model and a loop."""
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
