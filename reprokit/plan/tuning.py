"""The tuned variant: each framework's documented fast path on the device at hand, every part a named setting.

``tuned`` is ``fixed`` with each setting below that applies to its framework and device. Each setting also
runs alone against fixed ("+tuned_<name>", once as a pitfall alone does, or every repeat where a claim reads
it), and one that slows the device
alone (its throughput below 1 - SLOWER of fixed's median) is left out of ``tuned`` there and said. So tuned is
planned in two steps: the settings alone first (with everything else), then tuned from what they showed
(``compose``); a dry run shows tuned with every setting. What a setting changes is a numerics field of the
spec, so the run's own readback (its settings: execution, data layout, precision, threads) shows it applied.

Mixed precision is bf16 where every assigned GPU has it (compute capability 8.0), else fp16 with dynamic loss
scaling (7.0; below, tuned is refused). Left out by design, and said in the report: torch.compile on a CPU (it
needs a C++ compiler, which the kit's environments and images do not carry); the loader's workers and prefetch
(the kit feeds batches from arrays in memory, sliced in the training loop and copied from pinned memory without
blocking: there is no decoding for workers to overlap).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from reprokit.kits.contract.names import label
from reprokit.kits.contract.spec import FRAMEWORK_DEFAULT, RunSpec, Spec
from reprokit.kits.contract.split_limits import not_at_n
from reprokit.plan import plan as planning
from reprokit.results import metrics, runs
from reprokit.results.runs import FIXED, TUNED_ALONE

TUNED = planning.TUNED
SLOWER = 0.03           # a setting whose throughput alone is more than 3% below fixed's slows this device
DEFAULT_MIXED = "bf16_mixed"
PRECISION_ALONE = f"{TUNED_ALONE}precision"


@dataclass(frozen=True)
class Setting:
    name: str
    what: str                                   # in words, for the report
    frameworks: tuple[str, ...]
    devices: tuple[str, ...]
    key: str                                    # the settings readback key that shows it (docs/settings.md)

    @property
    def variant(self) -> str:
        return f"{TUNED_ALONE}{self.name}"

    def numerics(self, spec: RunSpec, mixed: str) -> dict[str, Any]:
        """The numerics fields this setting sets on ``spec``; ``mixed``: the device's mixed precision."""
        n = spec.numerics
        table: dict[str, dict[str, Any]] = {
                "precision": {"precision": mixed},
                "cudnn_autotune": {"cudnn_autotune": True},
                "compile": {"compile": True},
                "channels_last": {"channels_last": True},
                "inter_op": {"cpu_threads": dataclasses.replace(n.cpu_threads, inter_op=FRAMEWORK_DEFAULT)}}
        return table[self.name]


SETTINGS = (
    Setting("precision", "mixed precision: bf16 from compute capability 8.0, else fp16 with dynamic loss scaling",
            ("pytorch", "tensorflow", "jax"), ("gpu",), "precision"),
    Setting("cudnn_autotune", "cuDNN autotuning (torch.backends.cudnn.benchmark, TF_CUDNN_USE_AUTOTUNE)",
            ("pytorch", "tensorflow"), ("gpu",), "cudnn_autotune"),
    Setting("compile", "a compiled training step (torch.compile; tf.function with jit_compile, XLA)",
            ("pytorch", "tensorflow"), ("gpu",), "execution"),
    Setting("compile", "a compiled training step (tf.function with jit_compile, XLA)", ("tensorflow",), ("cpu",),
            "execution"),
    Setting("channels_last", "channels_last (NHWC) memory format for the model and its batches",
            ("pytorch",), ("gpu", "cpu"), "data_layout"),
    Setting("inter_op", "the framework's own inter-op thread pool instead of the spec's one thread",
            ("pytorch", "tensorflow"), ("cpu",), "threads.inter_op"),
)
# Why a framework has no such setting on a device, where that is not obvious.
NOT_HERE = {
    ("compile", "pytorch", "cpu"): "torch.compile on a CPU needs a C++ compiler, which the kit's CPU environments "
                                   "and images do not carry",
    ("compile", "jax", "gpu"): "JAX compiles every step already (jax.jit)",
    ("compile", "jax", "cpu"): "JAX compiles every step already (jax.jit)",
    ("channels_last", "tensorflow", "gpu"): "Keras convolutions run channels_last already",
    ("channels_last", "tensorflow", "cpu"): "Keras convolutions run channels_last already",
    ("channels_last", "jax", "gpu"): "Flax convolutions run NHWC already",
    ("channels_last", "jax", "cpu"): "Flax convolutions run NHWC already",
    ("precision", "pytorch", "cpu"): "fp32 on a CPU",
    ("precision", "tensorflow", "cpu"): "fp32 on a CPU",
    ("precision", "jax", "cpu"): "fp32 on a CPU",
}
# A numerics field that, where it differs, makes a framework draw a model's dropout masks otherwise: tuned and
# fixed then train on other masks (the report says so beside their first losses).
DROPOUT_DRAWS = {("pytorch", "channels_last"): "channels_last draws PyTorch's dropout masks in memory order"}


def settings(framework: str, device: str) -> list[Setting]:
    return [s for s in SETTINGS if framework in s.frameworks and device in s.devices]


def not_here(framework: str, device: str) -> list[str]:
    """Each setting this framework does not get on this device, and why."""
    return [f"{name}: {why}" for (name, fw, dev), why in NOT_HERE.items() if fw == framework and dev == device]


def _with(spec: RunSpec, variant: str, chosen: list[Setting], declared: list[dict[str, Any]], mixed: str) -> RunSpec:
    numerics = spec.numerics
    for s in chosen:
        numerics = dataclasses.replace(numerics, **s.numerics(spec, mixed))
    return planning.identified(dataclasses.replace(spec, variant=variant, numerics=numerics, run_id="",
                                                   differences=[*spec.differences, *declared]))


MIXED_SAID = {"bf16_mixed": "bf16 mixed precision (torch.autocast, Keras mixed_bfloat16, Flax bf16 layers)",
              "fp16_mixed": "fp16 mixed precision with dynamic loss scaling (torch.amp.GradScaler, Keras "
                            "LossScaleOptimizer): this GPU has no bf16"}


def _declared(choices: dict[str, Choice], device: str, mixed: str) -> list[dict[str, Any]]:
    """Each tuned setting as a declared difference: what every framework of the experiment got, and why not."""
    names = dict.fromkeys(s.name for c in choices.values() for s in (*c.kept, *(d for d, _ in c.dropped)))
    out = []
    for name in names:
        entry: dict[str, Any] = {"field": f"tuned: {name}", "why": "the tuned variant: each framework's own fast "
                                                                   "path, set by the spec (reprokit/plan/tuning.py)"}
        for fw, c in choices.items():
            kept = next((s for s in c.kept if s.name == name), None)
            left = next((why for d, why in c.dropped if d.name == name), None)
            here = dict(e.split(": ", 1) for e in not_here(fw, device))
            said = MIXED_SAID[mixed] if kept and name == "precision" else kept.what if kept else None
            entry[fw] = said or (f"left out: {left}" if left else here.get(name, "not a setting of it"))
            entry.setdefault("key", (kept or next((d for d, _ in c.dropped if d.name == name), None) or
                                     next(x for x in SETTINGS if x.name == name)).key)
        out.append(entry)
    return out


def _fixed(specs: list[Spec]) -> dict[tuple[str, int], dict[str, RunSpec]]:
    """The fixed run specs of each experiment and device count, by framework (the first repeat's): each count's
    tuned is chosen from the runs at that count."""
    out: dict[tuple[str, int], dict[str, RunSpec]] = {}
    for spec in specs:
        if isinstance(spec, RunSpec) and spec.variant == FIXED:
            out.setdefault((spec.experiment, spec.devices), {}).setdefault(spec.framework, spec)
    return out


def _specs(specs: list[Spec], choices_of: dict[tuple[str, int], dict[str, Choice]], alone: bool, mixed: str,
           read: frozenset[tuple[str, str, str]] = frozenset()) -> list[RunSpec]:
    out: list[RunSpec] = []
    for spec in specs:
        if not isinstance(spec, RunSpec) or spec.variant != FIXED:
            continue
        choices = choices_of[(spec.experiment, spec.devices)]
        declared = _declared(choices, spec.device, mixed)
        if alone:       # one run of each setting alone (against fixed's median it decides only a slowing beyond
            out += [_with(spec, s.variant, [s], [d for d in declared if d["field"] == f"tuned: {s.name}"], mixed)
                    for s in choices[spec.framework].kept                   # SLOWER), every repeat of one a
                    if spec.repeat == 0 or (spec.experiment, spec.framework, s.variant) in read]    # claim reads
        out.append(_with(spec, TUNED, list(choices[spec.framework].kept), declared, mixed))
    return out


def planned(specs: list[Spec], read: frozenset[tuple[str, str, str]] = frozenset(),
            mixed: str = DEFAULT_MIXED) -> list[RunSpec]:
    """For each fixed run spec: each setting alone, and tuned with every setting (a dry run's, until ``compose``).
    ``read``: the (experiment, framework, variant) a claim reads, whose settings alone run at every repeat;
    ``mixed``: the mixed precision the GPUs have (reprokit/environments/host_checks.py mixed_precision)."""
    every = {key: {fw: choose(None, s, mixed) for fw, s in by_fw.items()} for key, by_fw in _fixed(specs).items()}
    return _specs(specs, every, alone=True, mixed=mixed, read=read)


@dataclass(frozen=True)
class Choice:
    """Which settings tuned keeps for one experiment and framework, and each left out with its reading."""
    kept: tuple[Setting, ...]
    dropped: tuple[tuple[Setting, str], ...]


def choose(results: list[dict[str, Any]] | None, fixed: RunSpec, mixed: str = DEFAULT_MIXED) -> Choice:
    """The settings tuned keeps at ``fixed``'s device count: each its kit can take there (at N devices a kit cannot
    split some: reprokit/kits/contract/split_limits.py) unless its runs alone at that count slowed this device (or
    failed), from the finished ``results``; every one it can take where there are none yet (the dry run's)."""
    mine = [r for r in results or [] if r["experiment"] == fixed.experiment and r["framework"] == fixed.framework
            and runs.devices(r) == fixed.devices]

    def rate(variant: str) -> float | None:
        got = metrics.collect([r for r in mine if r["variant"] == variant and r["status"] == "ok"], "samples_per_s")
        return got.median() if got.values else None
    base = rate(FIXED)
    kept, dropped = [], []
    for s in settings(fixed.framework, fixed.device):
        cannot = not_at_n(_with(fixed, s.variant, [s], [], mixed).to_dict()) if fixed.devices > 1 else None
        alone = None if cannot or results is None else rate(s.variant)
        if cannot:
            dropped.append((s, f"not at {fixed.devices} devices: {cannot}"))
        elif results is None:
            kept.append(s)
        elif alone is None:
            dropped.append((s, f"its run alone did not finish ({s.variant})"))
        elif base and alone < (1 - SLOWER) * base:
            dropped.append((s, f"alone it slowed {label(fixed.framework)} here: {alone / base:.2f}x fixed's "
                               f"throughput"))
        else:
            kept.append(s)
    return Choice(tuple(kept), tuple(dropped))


def compose(specs: list[Spec], results: list[dict[str, Any]]) -> list[RunSpec]:
    """The tuned specs, one per fixed one, from what each setting alone showed in ``results``, in the mixed
    precision the plan chose (its precision setting's run alone holds it)."""
    mixed = next((s.numerics.precision for s in specs if isinstance(s, RunSpec) and s.variant == PRECISION_ALONE),
                 DEFAULT_MIXED)
    choices = {key: {fw: choose(results, s, mixed) for fw, s in by_fw.items()} for key, by_fw in _fixed(specs).items()}
    return _specs(specs, choices, alone=False, mixed=mixed)


def choices_said(specs: list[Spec], results: list[dict[str, Any]]) -> list[str]:
    """Per experiment and framework: the settings tuned keeps, and each left out with why."""
    out = []
    for (exp, devices), by_fw in _fixed(specs).items():
        at = f" at {devices} devices" if devices > 1 else ""
        for fw, spec in by_fw.items():
            c = choose(results, spec)
            out.append(f"{exp} / {label(fw)}{at}: " + (", ".join(s.name for s in c.kept) or "no setting") +
                       "".join(f"; left out {s.name}: {why}" for s, why in c.dropped))
    return out
