"""The one place a quantity is defined and read from a result file: by name, in its base unit, with its source.

Each ``Quantity`` in ``QUANTITIES`` says how it is read, which readings it has, how it is written,
and where it appears: its summary.csv column and its row in the report's side-by-side table.
The claims schema's quantity enum is written from it (``claims.write_schema``). The report's
tables, the verdicts, the plots, ``summary.csv`` and ``compare`` all read figures through
``read``/``value``. A field a result does not have (a kit older than the field, a CPU
run without GPU readings) raises ``NotMeasured`` with the reason; nothing here returns a default
or swallows a KeyError, so a drift between the result schema and this module shows as an
explicit "not measured", and an older result file still renders.

Per-phase memory peaks are read from ``memory.phases``: a list of records, one per phase and
epoch, ``{"epoch": int, "phase": "warmup" | "train" | "eval", "steps": int, "peak_bytes": int,
"source": str, "readings": {reading: {"peak_bytes": int | None, "source": str, ...}}}``, each the
peak of counters reset at the phase's start and read at its end (issue 10). ``peak_bytes`` and
``source`` are the phase's reported reading (the framework allocator's peak allocated on a GPU,
the process's resident high-water mark on a CPU); ``readings`` holds every counter's: ``allocated``
and ``reserved`` (the framework's allocator), ``device`` (NVML), ``process`` (VmHWM). Warmup has
phases of its own, so autotuning stays out of the training peak. Results without ``memory.phases``
have only ``memory.train_peak_bytes``/``eval_peak_bytes``, current memory sampled after steps
returned: not a peak of the phase, so not read as one.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reprokit.results import units, utilisation

# Memory readings a claim or a table may name: the result's own peak (its source says what it
# is), the framework allocator's peak allocated and reserved, the device-level (NVML) peak, and
# the process's resident high-water mark (a CPU run's).
READINGS = ("reported", "allocated", "reserved", "device", "process")
PHASES = ("warmup", "train", "eval")
# Why a result has no such reading: what each exists on.
_READING_EXISTS = {"allocated": "an allocator reading exists only on a GPU",
                   "reserved": "a reserved-memory reading exists only for PyTorch's caching allocator on a GPU",
                   "device": "a device-level (NVML) reading exists only on a GPU",
                   "process": "the process's resident high-water mark is read on a CPU run"}


class NotMeasured(Exception):
    """A quantity a result does not have. ``hardware``: it cannot exist on that device at all.
    ``short`` is what a table cell says."""

    def __init__(self, reason: str, hardware: bool = False, short: str = "not measured"):
        super().__init__(reason)
        self.reason = reason
        self.hardware = hardware
        self.short = short


@dataclass(frozen=True)
class Reading:
    value: float
    source: str = ""        # what the figure is, where that is not obvious from its name


@dataclass(frozen=True)
class Row:
    """A quantity's row in the report's side-by-side table: the label carries the unit, a cell only the number."""
    label: str
    cell: Callable[[float], str]
    ratio: bool = True              # a PyTorch / TensorFlow ratio column
    test: bool = False              # and a rank test beside it: the headline figures


@dataclass(frozen=True)
class Quantity:
    """One quantity, defined once: how it is read, written and named wherever it appears."""
    name: str
    dimension: str                  # a unit's dimension (units.UNITS), its value in that base unit; or "loss", "count"
    short: str                      # its name in a table row or a sentence
    what: str
    better: str | None              # "higher", "lower", or None where neither is better
    read: Callable[[dict[str, Any], str], Reading]
    readings: tuple[str, ...] = ("reported",)      # the readings a claim or a table may name (READINGS)
    show: Callable[[float], str] | None = None     # a value in a sentence; None: by its dimension (units.fmt)
    column: str | None = None       # its summary.csv column (a name of its own: the CSV is read by scripts)
    source_column: str | None = None               # summary.csv's column for what its reading is
    row: Row | None = None          # its row in the report's side-by-side table (sections.SIDE_BY_SIDE orders them)


def field(r: dict[str, Any], path: str) -> Any:
    """A result's field by dotted path; missing or null is NotMeasured, never a default."""
    node = r
    for key in path.split("."):
        if not isinstance(node, dict) or node.get(key) is None:
            raise NotMeasured(f"this result has no {path}")
        node = node[key]
    return node


def _epochs(r: dict[str, Any]) -> list[dict[str, Any]]:
    epochs: list[dict[str, Any]] = field(r, "timing.epochs")
    if not epochs:
        raise NotMeasured("no finished epoch")
    return epochs


def _per_epoch(*parts: str) -> Callable[[dict[str, Any], str], Reading]:
    def read(r: dict[str, Any], _: str) -> Reading:
        epochs = _epochs(r)
        return Reading(sum(e[p] for e in epochs for p in parts) / len(epochs))
    return read


def _mean(xs: list[float]) -> float:
    if not xs:
        raise NotMeasured("no epoch recorded")
    return sum(xs) / len(xs)


def _steps(r: dict[str, Any]) -> tuple[int, float]:
    steps, train_s = sum(field(r, "effective.train_steps_per_epoch")), sum(e["train_s"] for e in _epochs(r))
    if not steps or not train_s:
        raise NotMeasured("no training step timed")
    return steps, train_s


def _step_percentile(p: str) -> Callable[[dict[str, Any], str], Reading]:
    def read(r: dict[str, Any], _: str) -> Reading:
        try:
            return Reading(field(r, f"timing.step_s.{p}"))
        except NotMeasured:
            raise NotMeasured("no step timed after warmup") from None
    return read


def accuracy(r: dict[str, Any], split: str) -> Reading:
    """Final accuracy per sample; a run that reported it per batch (as the post did) is converted back."""
    epochs = field(r, "metrics.epochs")
    acc = epochs[-1].get(f"{split}_accuracy") if epochs else None
    if acc is None:
        raise NotMeasured(f"no final {split} accuracy recorded")
    if field(r, "metrics.averaged_over") != "batches":
        return Reading(acc)
    if split == "train":
        steps = field(r, "effective.train_steps_per_epoch")[-1]
        samples = field(r, "effective.train_samples_per_epoch")[-1]
    else:
        samples = field(r, "effective.test_samples")
        steps = math.ceil(samples / field(r, "spec.train.eval_batch_size"))
    return Reading(acc * steps / samples, f"per sample from the run's {acc:.4g} correct per batch (computed as "
                                          f"the post did) x {steps} batches / {samples} samples")


def _loss(split: str) -> Callable[[dict[str, Any], str], Reading]:
    def read(r: dict[str, Any], _: str) -> Reading:
        epochs = field(r, "metrics.epochs")
        if not epochs or epochs[-1].get(f"{split}_loss") is None:
            raise NotMeasured(f"no final {split} loss recorded")
        return Reading(epochs[-1][f"{split}_loss"])
    return read


def memory_readings(r: dict[str, Any]) -> dict[str, Reading]:
    """Every peak-memory reading a result has, by reading name."""
    mem = field(r, "memory")
    out: dict[str, Reading] = {}
    if mem.get("peak_bytes") is not None:
        out["reported"] = Reading(mem["peak_bytes"], mem.get("source") or "source not stated")
    fw = mem.get("framework") or {}
    if fw.get("peak_allocated") is not None:
        out["allocated"] = Reading(fw["peak_allocated"], "the framework allocator's peak allocated")
    if fw.get("peak_reserved") is not None:
        out["reserved"] = Reading(fw["peak_reserved"], "the framework allocator's peak reserved")
    if mem.get("process_peak_bytes") is not None:
        out["process"] = Reading(mem["process_peak_bytes"], "the process's resident high-water mark (VmHWM) "
                                                            "over the training and evaluation phases")
    device = fw.get("device_peak_bytes", mem.get("device_peak_bytes"))
    if device is not None:
        out["device"] = Reading(device, fw.get("device_source") or "device-level peak (NVML)")
    return out


def _peak(r: dict[str, Any], reading: str) -> Reading:
    readings = memory_readings(r)
    if reading in readings:
        return readings[reading]
    on_gpu = field(r, "spec.device") == "gpu"
    why = _READING_EXISTS.get(reading, "no peak memory recorded")
    if reading == "process" and not on_gpu:
        raise NotMeasured(f"this result records no process reading ({why})")
    if on_gpu:
        why = f"this result records no {reading!r} memory reading ({why})"
        device_source = (r["memory"].get("framework") or {}).get("device_source")
        if reading == "device" and device_source:
            why = f"this result records no device reading: {device_source}"
    raise NotMeasured(why, hardware=not on_gpu, short="GPU only" if not on_gpu else "not measured")


def phase_peaks(r: dict[str, Any], phase: str, reading: str = "reported") -> list[tuple[int, int, str]]:
    """(epoch, peak bytes, source) of every recorded phase of that kind, by reading, in epoch order."""
    phases = field(r, "memory").get("phases")
    if not phases:
        raise NotMeasured("this result has no per-phase memory peaks (memory.phases); its sampled "
                          "memory.train/eval_peak_bytes were read after steps returned, not as a phase's peak")
    found, why_not = [], ""
    for p in phases:
        if p.get("phase") != phase:
            continue
        got = p if reading == "reported" else (p.get("readings") or {}).get(reading)
        if got and got.get("peak_bytes") is not None:
            found.append((p["epoch"], got["peak_bytes"], got.get("source") or "source not stated"))
        elif got:
            why_not = got.get("source") or ""
    if found:
        return sorted(found)
    if reading == "reported" or not any(p.get("phase") == phase for p in phases):
        raise NotMeasured(f"this result records no {phase} phase peak")
    on_gpu = field(r, "spec.device") == "gpu"
    if why_not:
        raise NotMeasured(f"this result records no {reading} reading of its {phase} phases: {why_not}")
    hardware = (reading == "process") == on_gpu
    raise NotMeasured(f"this result records no {reading} reading of its {phase} phases ({_READING_EXISTS[reading]})",
                      hardware=hardware, short=("CPU only" if on_gpu else "GPU only") if hardware else "not measured")


def _phase_peak(phase: str) -> Callable[[dict[str, Any], str], Reading]:
    def read(r: dict[str, Any], reading: str) -> Reading:
        epoch, peak, source = max(phase_peaks(r, phase, reading), key=lambda p: p[1])
        return Reading(peak, f"{source}, highest in epoch {epoch}")
    return read


def memory_growth(r: dict[str, Any]) -> tuple[float, float, tuple[int, int]]:
    """(slope in bytes per step, growth over the fitted steps relative to the level at their start, steps).

    A least-squares line through the sampled memory, leaving out the first quarter of the samples
    (allocator and graph warm-up)."""
    pts = sorted(tuple(p) for p in field(r, "memory.over_steps"))
    if len(pts) < 4:
        raise NotMeasured(f"only {len(pts)} memory samples over steps; a trend needs 4 or more")
    pts = pts[len(pts) // 4:]
    n = len(pts)
    mx, my = sum(p[0] for p in pts) / n, sum(p[1] for p in pts) / n
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx else 0.0      # least squares
    first, last = pts[0][0], pts[-1][0]
    start = my + slope * (first - mx)
    return slope, slope * (last - first) / start if start > 0 else 0.0, (first, last)


def _growth(r: dict[str, Any], _: str) -> Reading:
    slope, rel, (a, b) = memory_growth(r)
    return Reading(rel, f"{rel:+.1%} over steps {a}–{b} ({slope / 2**10:+,.1f} KiB/step)")


def _mfu(r: dict[str, Any], _: str) -> Reading:
    flops = field(r, "model.flops_per_sample")
    field(r, "environment.device"), field(r, "environment.device_name")    # what utilisation.peak reads
    top, where = utilisation.peak(r)
    if not top:
        raise NotMeasured(where)
    return Reading(flops * field(r, "timing.samples_per_s") / top, f"peak: {where}")


def _throughput(r: dict[str, Any]) -> Reading:
    """A run whose every step was a warmup step timed none: its 0.0 is no throughput."""
    rate = field(r, "timing.samples_per_s")
    if not rate:
        raise NotMeasured(f"no training step after the {field(r, 'timing.warmup_steps')} warmup steps: run more "
                          f"steps than the warmup", short="no step after warmup")
    return Reading(rate)


def _energy(r: dict[str, Any], _: str) -> Reading:
    """Joules per training sample over the timed window, or the kit's reason it has none."""
    energy = field(r, "timing.energy")
    if energy.get("joules_per_sample") is None:
        raise NotMeasured(f"no energy reading: {energy.get('why_not') or 'not recorded'}")
    return Reading(energy["joules_per_sample"], f"{energy['method']}; {energy['scope']}")


def _time_to_target(r: dict[str, Any], _: str) -> Reading:
    target = field(r, "timing.target_accuracy")
    if r["timing"].get("time_to_target_s") is None:
        raise NotMeasured(f"test accuracy {target:.2f} not reached", short="not reached")
    return Reading(r["timing"]["time_to_target_s"], f"to test accuracy {target:.2f}")


def _ms(v: float) -> str:
    return f"{v * 1e3:.1f}"


_SHARE = "{:.1%}".format
# In summary.csv's column order, which the claims schema's quantity enum follows too.
_ALL = (
    Quantity("samples_per_s", "sample_rate", "throughput", "training samples per second after warmup", "higher",
             lambda r, _: _throughput(r), column="samples_per_s",
             row=Row("throughput (samples/s, after warmup)", "{:,.1f}".format, test=True)),
    Quantity("steps_per_s", "step_rate", "step rate", "training steps per second of training time", "higher",
             lambda r, _: Reading(_steps(r)[0] / _steps(r)[1])),
    Quantity("step_time_s", "time", "time per step", "training time per step (epoch time / steps)", "lower",
             lambda r, _: Reading(_steps(r)[1] / _steps(r)[0])),
    Quantity("step_time_p50_s", "time", "median step time", "median synchronised step time after warmup", "lower",
             _step_percentile("p50"), column="step_time_p50_s", row=Row("step time p50 (ms)", _ms)),
    Quantity("step_time_p95_s", "time", "step time p95", "95th percentile of the step time after warmup", "lower",
             _step_percentile("p95"), column="step_time_p95_s", row=Row("step time p95 (ms)", _ms)),
    Quantity("train_time_per_epoch_s", "time", "training time per epoch", "training time per epoch", "lower",
             _per_epoch("train_s"), column="train_time_per_epoch_s",
             row=Row("training time per epoch (s)", "{:.1f}".format)),
    Quantity("eval_time_per_epoch_s", "time", "evaluation time per epoch", "evaluation time per epoch", "lower",
             _per_epoch("eval_s"), column="eval_time_per_epoch_s",
             row=Row("evaluation time per epoch (s)", "{:.1f}".format)),
    Quantity("epoch_time_s", "time", "time per epoch (train + eval)", "training plus evaluation time per epoch",
             "lower", _per_epoch("train_s", "eval_s")),
    Quantity("total_time_s", "time", "total time (train + eval)", "training plus evaluation time over all epochs",
             "lower", lambda r, _: Reading(sum(e["train_s"] + e["eval_s"] for e in _epochs(r))),
             column="total_time_s"),
    Quantity("data_wait_fraction", "fraction", "data-wait share", "share of training time spent waiting for data",
             "lower", lambda r, _: Reading(field(r, "timing.data_wait_fraction")), show=_SHARE,
             column="data_wait_fraction", row=Row("data-wait share of training time", _SHARE, ratio=False)),
    Quantity("mfu", "fraction", "model FLOPs utilisation",
             "training FLOPs per sample x samples/s / the device's peak", "higher", _mfu, show=_SHARE, column="mfu",
             row=Row("model FLOPs utilisation (of the device's peak)", _SHARE, ratio=False)),
    Quantity("time_to_target_s", "time", "time to target accuracy",
             "training time until the target test accuracy", "lower", _time_to_target, column="time_to_target_s",
             row=Row("time to target test accuracy (training s)", "{:.1f}".format)),
    Quantity("peak_memory_bytes", "bytes", "peak memory", "peak memory, by reading", "lower", _peak,
             readings=READINGS, column="peak_memory_bytes", source_column="peak_memory_source",
             row=Row("peak memory (the run's own reading)", units.memory, test=True)),
    Quantity("warmup_peak_memory_bytes", "bytes", "warmup memory peak",
             "peak memory of the warmup steps (autotuning and one-off workspaces)", "lower", _phase_peak("warmup"),
             readings=READINGS),
    Quantity("train_peak_memory_bytes", "bytes", "training memory peak",
             "peak memory of the training phase (counter reset at its start)", "lower", _phase_peak("train"),
             readings=READINGS, column="train_peak_memory_bytes", row=Row("training phase peak memory", units.memory)),
    Quantity("eval_peak_memory_bytes", "bytes", "evaluation memory peak",
             "peak memory of the evaluation phase (counter reset at its start)", "lower", _phase_peak("eval"),
             readings=READINGS, column="eval_peak_memory_bytes",
             row=Row("evaluation phase peak memory", units.memory)),
    Quantity("memory_growth", "fraction", "memory growth over steps",
             "growth of sampled memory over training steps, relative to its level", "lower", _growth,
             show="{:+.1%}".format, column="memory_growth"),
    Quantity("memory_growth_bytes_per_step", "bytes_per_step", "memory slope",
             "slope of sampled memory over training steps", "lower", lambda r, _: Reading(memory_growth(r)[0])),
    Quantity("effective_batch_size", "batch", "samples per step", "samples per training step, as observed in the "
             "tensors", None, lambda r, _: Reading(field(r, "effective.batch_size.mean")),
             column="effective_batch_size"),
    Quantity("train_steps_per_epoch", "count", "steps per epoch", "training steps per epoch, as observed", None,
             lambda r, _: Reading(_mean(field(r, "effective.train_steps_per_epoch")))),
    Quantity("train_samples_per_epoch", "samples", "samples per epoch", "training samples per epoch, as observed",
             None, lambda r, _: Reading(_mean(field(r, "effective.train_samples_per_epoch"))),
             column="train_samples_per_epoch"),
    Quantity("final_train_accuracy", "fraction", "final train accuracy", "training accuracy of the last epoch, per "
             "sample", "higher", lambda r, _: accuracy(r, "train"), column="final_train_accuracy",
             row=Row("final train accuracy", "{:.3f}".format, ratio=False)),
    Quantity("final_test_accuracy", "fraction", "final test accuracy", "test accuracy after the last epoch, per "
             "sample", "higher", lambda r, _: accuracy(r, "test"), column="final_test_accuracy",
             row=Row("final test accuracy", "{:.3f}".format, ratio=False)),
    Quantity("final_train_loss", "loss", "final train loss", "training loss of the last epoch", "lower",
             _loss("train"), column="final_train_loss", row=Row("final train loss", "{:.3f}".format, ratio=False)),
    Quantity("final_test_loss", "loss", "final test loss", "test loss after the last epoch", "lower", _loss("test"),
             column="final_test_loss", row=Row("final test loss", "{:.3f}".format, ratio=False)),
    Quantity("energy_per_sample_j", "energy_per_sample", "energy per sample",
             "energy per training sample over the timed window (NVML on a GPU, RAPL on a CPU)", "lower", _energy,
             column="energy_per_sample_j", row=Row("energy per training sample (J, timed window)", "{:.3g}".format)),
    Quantity("parameters", "count", "parameters", "parameters, total (BatchNorm statistics included, as Keras "
             "counts them)", None, lambda r, _: Reading(field(r, "model.parameters.total")), column="parameters"),
)
QUANTITIES: dict[str, Quantity] = {q.name: q for q in _ALL}


def read(r: dict[str, Any], name: str, reading: str = "reported") -> Reading:
    """One quantity of one result, in its dimension's base unit, or NotMeasured."""
    q = QUANTITIES[name]
    if reading not in q.readings:
        raise ValueError(f"{name} has no {reading!r} reading; it has: {', '.join(q.readings)}")
    if r.get("status") != "ok":
        raise NotMeasured(f"run {r.get('run_id', '?')} did not finish ({r.get('status')})")
    return q.read(r, reading)


def value(r: dict[str, Any], name: str, reading: str = "reported") -> float:
    return read(r, name, reading).value


@dataclass(frozen=True)
class Collected:
    """A quantity over the repeats of one configuration: the values, and why the others have none."""
    name: str
    values: tuple[float, ...]
    run_ids: tuple[str, ...]
    sources: tuple[str, ...]
    missing: tuple[NotMeasured, ...]    # why, for each run without the quantity

    def median(self) -> float:
        if not self.values:
            raise self.missing[0] if self.missing else NotMeasured("no finished run")
        return statistics.median(self.values)


def collect(runs: list[dict[str, Any]], name: str, reading: str = "reported") -> Collected:
    values, ids, sources, missing = [], [], [], []
    for r in runs:
        try:
            got = read(r, name, reading)
        except NotMeasured as exc:
            missing.append(exc)
            continue
        values.append(got.value)
        ids.append(r["run_id"])
        sources.append(got.source)
    return Collected(name, tuple(values), tuple(ids), tuple(sources), tuple(missing))


def median(runs: list[dict[str, Any]], name: str, reading: str = "reported") -> float:
    return collect(runs, name, reading).median()


def show(name: str, v: float) -> str:
    """A value of a quantity for people, in its dimension's unit (memory in MiB or GiB)."""
    q = QUANTITIES[name]
    return q.show(v) if q.show else units.fmt(v, q.dimension)
