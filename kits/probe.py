"""A user's own training script, unmodified, under observation: python -m kits.probe --spec run.json ...

    python -m kits.probe --spec run.json --out result.json --data-dir DIR --script-dir DIR

Runs ``python SCRIPT ARGS`` (the spec's script, in a writable copy of its folder) in this process after
installing the framework's observation hooks (kits/<framework>_kit/probe.py), which change nothing the
script computes. What does change its behaviour is a shim, each one declared in the result
(``probe.shims``): the bounds, the network it does not get, the data it finds where it looks, and a
post's missing definitions (``script.shim``). The result file has a kit run's schema, with
``source: "script"``, so every detector, verdict and report works on it. A script that raises, or
trains nothing, still leaves a result: failed, with the reason and its traceback's tail.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from kits import parts
from kits.certify import certify_captured, guarded
from kits.contract import result_header, work_folder
from kits.contract.files import write_json_atomic
from kits.contract.spec import ScriptSpec
from kits.framework_free import certificate as cert
from kits.framework_free import data as datalib
from kits.framework_free import environment
from kits.framework_free.measure import ResidentPeak, process_age_s
from kits.framework_free.nvml import DeviceSampler
from kits.measurement.energy import Energy
from kits.measurement.phases import WARMUP, PhaseMemory
from kits.observation import bounds, detectors
from kits.observation.observe import HookClock, Observer, StopScript
from kits.training_loop import notebook_script, report
from kits.training_loop.network_guard import NO_NETWORK, block_network, sockets_fit
from kits.training_loop.progress import Progress
from kits.training_loop.staged_data import StagedData


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kits.probe", description=__doc__.splitlines()[0])
    p.add_argument("--spec", required=True, type=Path, help="the ScriptSpec (JSON)")
    p.add_argument("--out", required=True, type=Path, help="where to write the result file")
    p.add_argument("--data-dir", required=True, type=Path, help="folder with the prepared dataset")
    p.add_argument("--script-dir", required=True, type=Path, help="the script's folder (read-only)")
    p.add_argument("--certify", action="store_true",
                   help="write the certificate's side of the model the script trains (beside --out) at its first "
                        "optimizer step, and stop there")
    p.add_argument("--weights-from", type=Path,
                   help="with --certify: the PyTorch side's folder, whose initial weights and batch to start from")
    p.add_argument("--mount", nargs=2, action="append", default=[], metavar=("WHERE", "FOLDER"),
                   help="a folder of the user's own data (read-only) shown where the script reads WHERE (repeatable)")
    return p.parse_args(argv)


def _workdir(spec: ScriptSpec, script_dir: Path, out: Path) -> Path:
    """The run's writable copy of the script's folder (kits/contract/work_folder.py), checked against the files
    the spec hashed."""
    work = out.parent / "work"
    work_folder.make(script_dir, work)
    for name, sha256 in spec.script.files.items():
        if datalib._sha256(work / name) != sha256:
            raise datalib.DataError(f"{name} changed since the run was planned; plan it again")
    return work


def _keep_figures(work: Path, out: Path, since: float) -> list[dict]:
    """The images the script saved (its plots), copied beside the result file and listed in it."""
    kept = []
    for path in work_folder.figures(work, since):
        name = path.relative_to(work).as_posix()
        target = out.parent / "figures" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        kept.append({"name": name, "bytes": path.stat().st_size, "sha256": datalib._sha256(path)})
    return kept


def run(raw: dict, data_dir: Path, script_dir: Path, out: Path, started: float, certify: bool = False,
        weights_from: Path | None = None, mounts: list[tuple[str, Path]] | None = None) -> dict:
    spec = ScriptSpec.from_dict(raw)
    tried: list[str] = []
    shims = [block_network(tried), *sockets_fit()]
    copied_at = time.time()
    work = _workdir(spec, script_dir, out)
    shims += work_folder.mount(work, mounts or [])
    named = StagedData(spec.data, data_dir, work, shims)     # the named datasets, each declared once the script asks
    probe = parts.probe(spec.framework, work)
    shims += _requirements(spec, data_dir, work)     # first: a package they bring (TFDS) may be staged data's reader
    tfds = spec.data.tfds                     # TFDS's own cifar10, where the data step prepared it: checked
    tfds_root = data_dir / datalib.TFDS_ROOT if tfds and datalib.verified_folder(data_dir / tfds.dir, tfds.sha256) \
        else None
    shims += probe.stage_data(named, tfds_root)
    # on a GPU: the framework's allocator and the device through NVML (its baseline before the framework starts)
    sampler = DeviceSampler() if spec.device == "gpu" else None
    counters = [*probe.gpu_counters(), sampler] if sampler else [ResidentPeak()]
    phases = PhaseMemory(counters)
    observer = Observer(spec, probe.sync, phases, probe.memory_now, Progress(), Energy(sampler))
    observer.at_first_step.append(lambda: _on_its_device(spec.framework, probe, sampler, observer))
    probe.install(observer)
    if certify:
        probe.at_first_update(lambda: certify_side(spec, probe, named.classes, out.parent, weights_from))
    shims += _bounds(spec) + getattr(probe, "bound_shims", list)()
    if spec.script.shim:
        shims.append(f"the declared shim {spec.script.shim} runs first, in the script's namespace")
    # the shim runs where the script does: its relative paths (a dataset root "./") land in the work folder
    script, said = notebook_script.script_file(spec, work)     # a notebook: the script its code cells make
    shims += said
    sys.argv = [str(script), *map(str, spec.script.args)]
    sys.path.insert(0, str(work))
    os.chdir(work)
    phases.start(WARMUP)
    late, failure, running = None, None, f"the declared shim {spec.script.shim}"
    try:
        globals_ = runpy.run_path(str(work / spec.script.shim)) if spec.script.shim else {}
        running = "the script"
        runpy.run_path(str(script), init_globals=globals_, run_name="__main__")
    except Certified:
        return result_header.header(raw, "certified", None) | {"probe": {"shims": shims, "models": probe.models}}
    except StopScript:
        pass                         # the probe's bound: observer.stopped says so
    except NoGpu as exc:
        return _failed(spec, str(exc), [], kind="no-gpu")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            failure = _failed(spec, f"{running} exited with status {exc.code}", tried)
    except BaseException as exc:     # noqa: BLE001 - whatever the script raises is its result
        late = bounds.after_training(observer, exc, work)      # after training: the run keeps its figures, noted
        failure = None if late else _failed(spec, f"{running} raised {type(exc).__name__}: {exc}", tried)
    if failure:
        return failure
    probe.finish()
    observer.finish(probe.as_float, stopped=observer.stopped)
    if not observer.steps:
        return _failed(spec, "no training step observed (no optimizer step ran)", tried, kind="invalid-output")
    device = sampler.stop() if sampler else None
    if sampler and not probe.on_gpu():        # measured on the CPU: NVML's device memory is the idle GPU's
        device = None
    ended = late["ended"] if late else bounds.ended(observer, observer.stopped)
    result = _result(raw, spec, observer, probe, phases, time.perf_counter() - started, ended, shims, device, sampler)
    if late:
        result["probe"]["notes"].append(late["note"])
        result["probe"]["error_after_training"] = late["error"]
    result["probe"]["figures"] = _keep_figures(work, out, copied_at)
    return result


class Certified(StopScript):
    """The certificate's side of the captured model is written: the script stops before its first update."""


def certify_side(spec: ScriptSpec, probe: parts.Probe, classes: int, folder: Path, weights_from: Path | None) -> None:
    """The certificate's checks on the model the script trains, captured before its first update, into
    folder/side.json: the PyTorch side also writes its initial weights and its batch, which the TensorFlow
    side (``weights_from``) starts from. A script that trains two models is refused, naming them."""
    out = {"schema": cert.SIDE_SCHEMA, "framework": spec.framework, "experiment": spec.experiment,
           "variant": spec.variant, "profile": spec.profile, "run_id": spec.run_id, "status": "ok",
           "message": None, "captured": list(probe.models), "source": "script"}

    def work() -> None:
        if probe.others:
            raise cert.UnmappableModel(f"the script's optimizer steps more than one model ({', '.join(probe.models)}); "
                                       f"the certificate compares one model per script and stops here")
        other = np.load(weights_from / cert.INPUT_NAME) if weights_from else None
        side = probe.captured(other)
        out["input"] = ("its own standard normal numbers: the model does not take the PyTorch side's batch of shape "
                        f"{tuple(other.shape)}" if weights_from and getattr(probe, "own_input", False)
                        else "the PyTorch script's first batch")
        weights_in = (weights_from / cert.WEIGHTS_NAME if weights_from and not getattr(probe, "own_input", False)
                      else None)
        certify_captured(side, out, classes, spec.device, weights_in,
                         None if weights_from else folder / cert.WEIGHTS_NAME, folder)
        if not weights_from:
            np.save(folder / cert.INPUT_NAME, side.x_first)
    probe.certifying = True
    try:
        guarded(out, work)
    finally:
        probe.certifying = False
    write_json_atomic(folder / cert.SIDE_NAME, out)
    raise Certified


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


def _requirements(spec: ScriptSpec, data_dir: Path, work: Path) -> list[str]:
    """The script's extra requirements, installed from the wheels the host fetched (no index, each wheel's hash
    checked) into a folder beside the work folder (not in it: the script's own files and figures are there),
    which the script's imports then search after the lock's packages; and matplotlib, where the script has it,
    drawing off screen: a run has no display."""
    import importlib.util
    req, shims = spec.script.requirements, []
    if req and not req.install:
        shims.append(f"its requirements {req.file}: all already in the framework's lock ({', '.join(req.in_lock)})")
    elif req:
        wheels = data_dir / datalib.SCRIPT_WHEELS / datalib.wheels_key(req.install)
        target = work.with_name("requirements")
        listed = target.with_suffix(".txt")
        listed.write_text("\n".join(req.install) + "\n")
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(wheels),
                               "--require-hashes", "--no-deps", "--no-compile", "--no-cache-dir",
                               "--disable-pip-version-check", "--target", str(target), "-r", str(listed)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise datalib.DataError(f"the requirements of {spec.script.path} did not install from {wheels}: "
                                    f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        sys.path.append(str(target))
        names = ", ".join(line.split()[0] for line in req.install)
        in_lock = f" (already in the lock: {', '.join(req.in_lock)})" if req.in_lock else ""
        shims.append(f"its requirements {req.file} installed from hash-checked wheels, after the lock's packages: "
                     f"{names}{in_lock}")
    if importlib.util.find_spec("matplotlib"):
        os.environ["MPLBACKEND"] = "Agg"
        shims.append("matplotlib draws off screen (MPLBACKEND=Agg): plt.show() shows nothing and returns")
    return shims


def _bounds(spec: ScriptSpec) -> list[str]:
    """The bounds as declared shims (kits/observation/bounds.py): each loader's pass ends at its bound, so the script's
    evaluation after training runs; evaluation passes take at least Bounds.eval_samples samples."""
    return bounds.declared(spec.bounds)


def _failed(spec: ScriptSpec, message: str, tried: list[str], kind: str = "error") -> dict:
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
    footprint = 16 * parameters["total"]      # parameters, gradients and an optimizer's two moments, fp32
    result["findings"] = detectors.script_findings(m, configured, observer.seen, spec.warmup_steps,
                                                   probe.memory_series(), footprint,
                                                   loader.workers if loader else None, probe.eager_loop())
    if sampler and not probe.on_gpu():
        result["findings"] += detectors.model_not_on_gpu(spec.framework, sampler.name, sampler.utilization(),
                                                         sampler.unavailable)
    return result


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter() - process_age_s()
    args = _parse(argv)
    raw = json.loads(args.spec.read_text())
    out = args.out.resolve()
    try:
        result = run(raw, args.data_dir.resolve(), args.script_dir.resolve(), out, started, args.certify,
                     args.weights_from.resolve() if args.weights_from else None,
                     [(at, Path(folder).resolve()) for at, folder in args.mount])
    except Exception as exc:     # noqa: BLE001 - the probe itself failed: still a result
        tail = traceback.format_exc().splitlines()[-40:]
        result = result_header.header(raw, "failed", {"kind": "error", "message": f"{type(exc).__name__}: {exc}",
                                               "log_tail": tail})
    write_json_atomic(out, result)
    return 0 if result["status"] in ("ok", "certified") else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
