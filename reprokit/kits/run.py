"""The one entry point of every kit: python -m reprokit.kits.run --spec run.json --out result.json.

Reads a fully resolved RunSpec (never TOML, never a default of its own),
trains with the framework the spec names, and writes one result file. A run
that fails inside the kit still writes a result, marked failed, with the
reason and the traceback's tail.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

from reprokit.kits import parts
from reprokit.kits.contract import result_header
from reprokit.kits.contract.files import write_json_atomic
from reprokit.kits.contract.names import label
from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.devices import stand_ins
from reprokit.kits.framework_free import cpu_peak, environment, nvidia_smi
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.framework_free.measure import ResidentPeak, process_age_s
from reprokit.kits.framework_free.nvml import DeviceSampler
from reprokit.kits.framework_free.parent_death import arm
from reprokit.kits.measurement.energy import Energy
from reprokit.kits.measurement.phases import PhaseMemory
from reprokit.kits.observation import detectors
from reprokit.kits.ranks import gather, kit_run
from reprokit.kits.training_loop import report
from reprokit.kits.training_loop.progress import Progress
from reprokit.kits.training_loop.training import train


class NoGpuError(RuntimeError):
    """A GPU was asked for and the framework does not see one."""


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m reprokit.kits.run", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, type=Path, help="resolved RunSpec (JSON)")
    parser.add_argument("--out", required=True, type=Path, help="where to write the result file")
    parser.add_argument("--data-dir", required=True, type=Path, help="folder with the prepared dataset")
    return parser.parse_args(argv)


def run(raw: dict, data_dir: Path, started: float | None = None) -> dict:
    """Train as the spec says; ``raw`` is the spec's JSON, copied into the result as written.

    ``started``: the perf_counter reading timing.wall_s counts from (main passes the process's start,
    so the interpreter's start and the imports are in it); by default, this call's start.
    """
    t0 = time.perf_counter() if started is None else started
    spec = RunSpec.from_dict(raw)
    # At N devices on a CPU: N stand-in devices, set before the framework starts (a GPU run's are its GPUs)
    stand_in = stand_ins.before_import(spec.framework, spec.devices, spec.device)
    # CUDA numbers devices fastest-first by default, NVML by PCI bus: make index 0 the same device.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    # Every device's baseline before the framework touches one; then the framework names its own.
    sampler = DeviceSampler() if spec.device == "gpu" else None
    backend = parts.backend(spec)
    env = backend.environment()
    if spec.device == "gpu" and env["device"] != "gpu":
        raise NoGpuError(_no_gpu(spec, env, backend.no_gpu_reason()))
    if sampler:
        sampler.watch(env.get("device_uuid"), env.get("device_pci_bus_id"), mig=" MIG " in env["device_name"])
    d = spec.data
    arrays = datalib.load(data_dir / d.file, d.sha256, d.train_samples, d.test_samples)
    # On a CPU the process's resident memory is the reading; its level before the model exists is kept too.
    counters = ((backend.memory_counters() + ([sampler] if sampler else [])) if env["device"] == "gpu"
                else [ResidentPeak()])
    model = backend.build(arrays)
    # Once, before and outside the timed region: the training FLOPs of the model that runs. A model the
    # count cannot read still trains; the result says why it has no count (and MFU is not measured).
    try:
        flops = backend.training_flops()
        model.update(flops_per_sample=flops["training"],
                     flops_counted={k: v for k, v in flops.items() if k != "training"})
    except Exception as exc:      # noqa: BLE001 - any failure of the count is recorded, not fatal
        model["flops_not_counted"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    phases = PhaseMemory(counters)
    # a run's ranks train in step: rank 0's progress lines are the run's
    progress = Progress(silent=spec.devices > 1 and os.environ.get("RANK", "0") != "0")
    m = train(backend, spec, len(arrays.x_train), progress, phases, Energy(sampler))
    at_n = backend.at_n() if hasattr(backend, "at_n") else None
    result = result_header.header(raw, "ok", None)
    result.update(report.sections(spec, m, time.perf_counter() - t0, backend.input_reader, backend.metrics_source,
                                  configured=spec.train.batch_size // (at_n or {}).get("ranks", 1)))
    result["memory"] = report.memory_section(phases, m, backend.memory_series, sampler.stop() if sampler else None)
    result["model"] = model
    result["environment"] = {**env, "host": environment.host()}
    observed = backend.observed()
    result["environment"]["precision"]["loss_dtype"] = observed.get("loss_dtype")     # as the first step computed it
    # the loss scale the framework's scaler held at the end; None where no loss was scaled
    result["environment"]["precision"]["loss_scale"] = observed.get("loss_scale")
    if observed.get("backward_span_s") is not None:     # a step the kit can time inside (PyTorch's, at every count)
        result["timing"]["backward_span_s"] = observed["backward_span_s"]
    if sampler:
        result["environment"]["nvml"] = sampler.report()
    if env["device"] == "cpu":
        # The CPU's peak for utilisation: measured after training, so it cannot disturb the run, once per
        # CPU, threads and framework (reprokit/kits/framework_free/cpu_peak.py), then read from the data folder's cache.
        result["environment"].update(cpu_peak.for_run(env, data_dir, backend.matmul_flops_per_s))
    result["provenance"] = {**spec.provenance, "data_sha256": arrays.sha256}
    footprint = detectors.training_footprint(spec, model["parameters"]["total"])
    result["findings"] = detectors.all_findings(spec, m, observed, backend.memory_series, footprint)
    return _at_n(result, at_n, stand_in, spec.device) if at_n else result


def _at_n(result: dict, at_n: dict, stand_in: list[str], device: str) -> dict:
    """A run at N devices: who this process was, how the run split its batches, every process's first-step
    evidence (reprokit/kits/training_loop/distributed.py); one process's replicas gathered here, a rank's by the
    launcher (reprokit/kits/ranks/kit_run.py)."""
    ranks = at_n.get("ranks")
    result["process"] = {"role": "rank" if ranks else "process", "index": at_n.get("rank", 0), "pid": os.getpid(),
                         "backend": at_n.get("backend"), "replicas": at_n["replicas"]}
    result["distributed"] = {"how": at_n["how"], "stand_ins": stand_in, "evidence": at_n["evidence"]}
    if ranks:
        return result
    out = gather.gather(result, [], stand_in=device != "gpu")
    assert out is not None           # the process trained
    return out


def _no_gpu(spec: RunSpec, env: dict, framework_says: str) -> str:
    """Why the framework sees no GPU, as far as the kit can tell: its CUDA build and the driver it needs
    (recorded in the spec by the host), the host's driver, the devices it was allowed to see."""
    cuda, needs, name = env.get("build", {}).get("cuda"), spec.provenance.get("min_driver"), label(spec.framework)
    build = (f"{name} {env['framework_version']} is a CUDA {cuda} build"
             + (f", which needs NVIDIA driver {needs} or newer" if needs else "") if cuda else
             f"{name} {env['framework_version']} is a build without CUDA")
    drivers = sorted({g["driver"] for g in nvidia_smi.gpus() or [] if g.get("driver")})
    host = (f"the host's driver is {', '.join(drivers)} (nvidia-smi)" if drivers
            else "nvidia-smi answers with no driver here")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    shown = f"; CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else ""
    return (f"the spec asks for a GPU but {name} sees none; refusing to run on the CPU instead. "
            f"{build}; {host}{shown}; {name} says: {framework_says}")


def _failure_kind(exc: BaseException, device: str) -> str:
    if isinstance(exc, NoGpuError):
        return "no-gpu"
    text = f"{type(exc).__name__}: {exc}"
    if "out of memory" in text.lower() or "ResourceExhausted" in text:
        return "gpu-oom" if device == "gpu" else "oom"
    return "error"


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter() - process_age_s()
    args = _parse(argv)
    spec = json.loads(args.spec.read_text())
    rank = None                             # this process's rank, where it is one of a PyTorch run's at N
    if spec.get("framework") == "pytorch" and int(spec.get("devices", 1)) > 1:
        if "RANK" not in os.environ:        # the run's process: torchrun starts its ranks
            return kit_run.launch(spec, sys.argv[1:] if argv is None else argv, args.out)
        rank = int(os.environ["RANK"])
        arm(os.getppid())                   # a rank dies with torchrun
        args.out = kit_run.rank_out(args.out, rank)
    try:
        result = run(spec, args.data_dir, started)
    except (Exception, SystemExit) as exc:   # a failed run must still leave a result
        tail = traceback.format_exc().splitlines()[-40:]
        failure = {"kind": _failure_kind(exc, spec.get("device", "cpu")), "message": f"{type(exc).__name__}: {exc}",
                   "log_tail": tail}
        failed = result_header.header(spec, "failed", failure)
        if rank is not None:                 # which rank failed and when, for the run's message (kit_run.py)
            failed["process"] = {"role": "rank", "index": rank}
            failure["at"] = time.time()
        write_json_atomic(args.out, failed)
        print("\n".join(tail), file=sys.stderr)
        return 1
    write_json_atomic(args.out, result)
    return 0


if __name__ == "__main__":
    code = main()
    # The result is on disk: skip the frameworks' slow interpreter teardown (about a second).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
