"""The probe's watch over one process of a user's script: its hooks, its observer, and the result it leaves.

``start`` installs everything a process of the script is observed and bounded with, and runs nothing: the network
guard, the named datasets where each API looks, the script's extra requirements, the framework's hooks
(reprokit/kits/<fw>_kit/probe.py) reporting to an ``Observer``, the memory counters and the bounds, each declared.
The script's own process starts one (reprokit/kits/probe.py), and so does every process it starts that the probe
follows (reprokit/kits/ranks/process.py). ``outcome`` is what the process leaves once the script is done with it: its
result, in the kit's schema, or why it has none.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprokit.kits import parts
from reprokit.kits.contract import result_header
from reprokit.kits.contract.spec import ScriptSpec
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.framework_free import environment
from reprokit.kits.framework_free.measure import ResidentPeak
from reprokit.kits.framework_free.nvml import DeviceSampler
from reprokit.kits.measurement.energy import Energy
from reprokit.kits.measurement.phases import WARMUP, PhaseMemory
from reprokit.kits.observation import bounds, detectors
from reprokit.kits.observation.observe import HookClock, Observer
from reprokit.kits.training_loop import report
from reprokit.kits.training_loop.network_guard import NO_NETWORK, block_network, sockets_fit
from reprokit.kits.training_loop.progress import Progress
from reprokit.kits.training_loop.staged_data import StagedData


@dataclass
class Watch:
    """One process's watch: what it was started with, and what observes it."""
    raw: dict[str, Any]
    spec: ScriptSpec
    probe: parts.Probe
    named: StagedData
    sampler: DeviceSampler | None
    phases: PhaseMemory
    observer: Observer
    shims: list[str]
    tried: list[str]                   # the addresses the network guard refused
    started: float                     # perf_counter at the process's start


def start(raw: dict[str, Any], data_dir: Path, work: Path, requirements: Path | None, started: float,
          shims: list[str] | None = None) -> Watch:
    """Everything a process of the script is watched with, installed, the script not run: ``work`` is the run's
    copy of its folder, ``shims`` the declarations made before (the work folder's mounts)."""
    spec = ScriptSpec.from_dict(raw)
    tried: list[str] = []
    shims = [block_network(tried), *sockets_fit(), *(shims or [])]
    named = StagedData(spec.data, data_dir, work, shims)     # the named datasets, each declared once the script asks
    probe = parts.probe(spec.framework, work)
    shims += _requirements(spec, requirements)     # first: a package they bring (TFDS) may be staged data's reader
    tfds = spec.data.tfds                     # TFDS's own cifar10, where the data step prepared it: checked
    tfds_root = data_dir / datalib.TFDS_ROOT if tfds and datalib.verified_folder(data_dir / tfds.dir, tfds.sha256) \
        else None
    shims += probe.stage_data(named, tfds_root)
    # on a GPU: the framework's allocator and the device through NVML (its baseline before the framework starts)
    sampler = DeviceSampler() if spec.device == "gpu" else None
    watch = Watch(raw, spec, probe, named, sampler, *_observing(spec, probe, sampler), shims, tried, started)
    probe.install(watch.observer)
    shims += _bounds(spec) + getattr(probe, "bound_shims", list)()
    return watch


def _observing(spec: ScriptSpec, probe: parts.Probe, sampler: DeviceSampler | None) -> tuple[PhaseMemory, Observer]:
    """A new observer of the process, with its memory counters: each process reads its own."""
    counters = [*probe.gpu_counters(), sampler] if sampler else [ResidentPeak()]
    phases = PhaseMemory(counters)
    observer = Observer(spec, probe.sync, phases, probe.memory_now, Progress(), Energy(sampler))
    observer.at_first_step.append(lambda: _on_its_device(spec.framework, probe, sampler, observer))
    return phases, observer


def renew(watch: Watch) -> None:
    """A forked process's own observer in place of the one it inherited (its parent's steps are not its own)."""
    watch.phases, watch.observer = _observing(watch.spec, watch.probe, watch.sampler)
    watch.probe.observer = watch.observer          # type: ignore[attr-defined]
    watch.phases.start(WARMUP)


def outcome(watch: Watch, late: dict[str, Any] | None, ended_by_bound: bool = False) -> dict[str, Any]:
    """The process's result once the script is done with it, or a failed one where it trained nothing: ``late``
    an error after training (bounds.after_training)."""
    spec, probe, observer, sampler = watch.spec, watch.probe, watch.observer, watch.sampler
    probe.finish()
    observer.finish(probe.as_float, stopped=observer.stopped or ended_by_bound)
    if not observer.steps:
        return failed(spec, "no training step observed (no optimizer step ran)", watch.tried, kind="invalid-output")
    device = sampler.stop() if sampler else None
    if sampler and not probe.on_gpu():        # measured on the CPU: NVML's device memory is the idle GPU's
        device = None
    ended = late["ended"] if late else bounds.ended(observer, observer.stopped or ended_by_bound)
    result = _result(watch.raw, spec, observer, probe, watch.phases, time.perf_counter() - watch.started, ended,
                     watch.shims, device, sampler)
    if late:
        result["probe"]["notes"].append(late["note"])
        result["probe"]["error_after_training"] = late["error"]
    return result


class NoGpu(RuntimeError):
    """The spec asks for a GPU and the run sees none."""


def _on_its_device(framework: str, probe: parts.Probe, sampler: DeviceSampler | None, observer: Observer) -> None:
    """At the first step, the model is known and NVML watches its device. A GPU run whose model stayed on the CPU
    is measured on the CPU, as the script chose (model-not-on-gpu): the process's resident memory and the CPU's
    energy are its own, and NVML watches the first visible GPU, whose idle time is the finding's evidence. Where
    the run sees no GPU at all, it stops here."""
    if not sampler:
        return
    if probe.on_gpu():
        sampler.watch(*probe.device_ids())
        return
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not sampler.listed() or (visible is not None and visible.split(",")[0].strip() in ("", "-1")):
        raise NoGpu(f"the spec asks for a GPU but the script's {framework} model trains on the CPU and the run sees "
                    f"no GPU (CUDA_VISIBLE_DEVICES={visible!r}; {sampler.unavailable or 'NVML lists no GPU'})")
    sampler.watch_first_visible(visible)
    observer.phases.counters = [ResidentPeak(), sampler]
    observer.phases.start(WARMUP)
    observer.energy = Energy()


def _requirements(spec: ScriptSpec, installed: Path | None) -> list[str]:
    """The script's extra requirements, which the host installed once on this machine into a read-only folder of
    its per-user cache (reprokit/environments/requirement_sets.py), given here as ``installed``: checked to hold
    the spec's lines, then searched by the script's imports after the lock's packages (this run installs
    nothing); and matplotlib, where the script has it, drawing off screen: a run has no display."""
    import importlib.util
    req, shims = spec.script.requirements, []
    if req and not req.install:
        shims.append(f"its requirements {req.file}: all already in the framework's lock ({', '.join(req.in_lock)})")
    elif req:
        marker = installed / datalib.REQUIREMENTS_INSTALLED if installed else None
        try:
            lines = json.loads(marker.read_text())["install"] if marker else None
        except (OSError, ValueError, KeyError, TypeError):
            lines = None
        if installed is None or lines != req.install:
            where = f" in {installed}" if installed else ""
            raise datalib.DataError(f"the requirements of {spec.script.path} are not installed{where}: the host "
                                    f"installs them once, before any run; run the command again")
        sys.path.append(str(installed))
        names = ", ".join(line.split()[0] for line in req.install)
        in_lock = f" (already in the lock: {', '.join(req.in_lock)})" if req.in_lock else ""
        shims.append(f"its requirements {req.file} from hash-checked wheels, installed once on this machine "
                     f"(read-only, {installed.name}), after the lock's packages: {names}{in_lock}")
    if importlib.util.find_spec("matplotlib"):
        os.environ["MPLBACKEND"] = "Agg"
        shims.append("matplotlib draws off screen (MPLBACKEND=Agg): plt.show() shows nothing and returns")
    return shims


def _bounds(spec: ScriptSpec) -> list[str]:
    """The bounds as declared shims (reprokit/kits/observation/bounds.py): each loader's pass ends at its bound, so the
    script's evaluation after training runs; evaluation passes take at least Bounds.eval_samples samples."""
    return bounds.declared(spec.bounds)


def failed(spec: ScriptSpec, message: str, tried: list[str], kind: str = "error") -> dict[str, Any]:
    if tried:
        message, kind = f"{NO_NETWORK} (it tried to reach {tried[0]})", "error"
    tail = traceback.format_exc().splitlines()[-40:]
    return result_header.header(spec.to_dict() | {"run_id": spec.run_id}, "failed",
                         {"kind": kind, "message": message, "log_tail": tail})


def _training_loader(observer: Observer):
    return next((p for p in reversed(observer.loaders) if p.loader_id == observer.training_loader), None)


def _result(raw: dict, spec: ScriptSpec, observer: Observer, probe: parts.Probe, phases: PhaseMemory, wall_s: float,
            ended: str, shims: list[str], device: dict | None, sampler) -> dict:
    m = observer.m
    loader = _training_loader(observer)
    sizes = m.observed_batch_sizes
    configured = (loader.batch_size if loader and loader.batch_size else max(set(sizes), key=sizes.count))
    reader = probe.input_reader() or (
        (f"the script's own DataLoader (batch_size {loader.batch_size}, num_workers {loader.workers})"
         if loader.batch_size is not None else "the script's own tf.data dataset, iterated by its loop") if loader
        else "the script's own loop (no loader)")
    result = result_header.header(raw, "ok", None)
    result.update(report.script_sections(spec, m, wall_s, reader, configured))
    result["memory"] = report.memory_section(phases, m, probe.memory_series(), device)
    parameters = probe.parameters()
    result["model"] = {"parameters": parameters, "layers": probe.layers()}
    result["environment"] = {**probe.environment(), "host": environment.host()}
    if sampler:
        result["environment"]["nvml"] = sampler.report()
    result["provenance"] = {**spec.provenance, "data_sha256": spec.data.sha256}
    result["probe"] = {"ended": ended, "hooks": list(probe.HOOKS), "shims": shims, "models": probe.models,
                       "host_syncs": {"train": observer.syncs["train"], "eval": observer.syncs["eval"],
                                      "per_training_step": observer.syncs["train"] / observer.steps,
                                      "meaning": probe.sync_meaning()},
                       "bounded": sorted(observer.bounded),
                       "own_seconds_per_step": observer.own_s / max(1, len(observer.m.observed_batch_sizes)
                                                                     - spec.warmup_steps),
                       "own_seconds": HookClock.seconds,
                       "notes": [n for n in (getattr(probe, "pipeline_note", None), *getattr(probe, "notes", ())) if n]}
    if hasattr(probe, "compilations"):       # a probe that sees each compilation (JAX's jitted functions)
        result["probe"]["compilations"] = probe.compilations
    if hasattr(probe, "evidence"):     # its samples and waits: the pitfalls of many devices (reprokit/kits/ranks/)
        result["probe"]["evidence"] = probe.evidence.report()
    footprint = 16 * parameters["total"]      # parameters, gradients and an optimizer's two moments, fp32
    result["findings"] = detectors.script_findings(m, configured, observer.seen, spec.warmup_steps,
                                                   probe.memory_series(), footprint,
                                                   loader.workers if loader else None, probe.eager_loop())
    if sampler and not probe.on_gpu():
        result["findings"] += detectors.model_not_on_gpu(spec.framework, sampler.name, sampler.utilization(),
                                                         sampler.unavailable)
    return result
