"""A user's own training script, unmodified, under observation: python -m reprokit.kits.probe --spec run.json ...

    python -m reprokit.kits.probe --spec run.json --out result.json --data-dir DIR --script-dir DIR

Runs ``python SCRIPT ARGS`` (the spec's script, in a writable copy of its folder) in this process after
installing the framework's observation hooks (reprokit/kits/<framework>_kit/probe.py), which change nothing the
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
import sys
import time
import traceback
from pathlib import Path

from reprokit.kits.contract import result_header, work_folder
from reprokit.kits.contract.files import write_json_atomic
from reprokit.kits.contract.spec import ScriptSpec
from reprokit.kits.devices import stand_ins
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.framework_free.measure import process_age_s
from reprokit.kits.launchers import run as launcher
from reprokit.kits.measurement.phases import WARMUP
from reprokit.kits.observation import bounds
from reprokit.kits.observation.observe import StopScript
from reprokit.kits.ranks import certified, follow, gather, hang, identity, process, watch
from reprokit.kits.training_loop import notebook_script


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m reprokit.kits.probe", description=__doc__.splitlines()[0])
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
    p.add_argument("--requirements", type=Path,
                   help="the script's extra requirements, installed once on this machine by the host (read-only)")
    return p.parse_args(argv)


def _workdir(spec: ScriptSpec, script_dir: Path, out: Path) -> Path:
    """The run's writable copy of the script's folder (reprokit/kits/contract/work_folder.py), checked against the files
    the spec hashed."""
    work = out.parent / "work"
    work_folder.make(script_dir, work, spec.script.left_out)
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
        weights_from: Path | None = None, mounts: list[tuple[str, Path]] | None = None,
        requirements: Path | None = None) -> dict:
    spec = ScriptSpec.from_dict(raw)
    copied_at = time.time()
    work = _workdir(spec, script_dir, out)
    before = stand_ins.before_import(spec.framework, spec.devices, spec.device)     # before the framework starts
    w = watch.start(raw, data_dir, work, requirements, started, work_folder.mount(work, mounts or []) + before)
    probe, observer, shims, tried = w.probe, w.observer, w.shims, w.tried
    shims += stand_ins.after_import(spec.framework, spec.device, work)
    at = hang.deadline(time.time() - (time.perf_counter() - started), spec.limits.timeout_s)
    to_certify = {"folder": str(out.parent), "weights_from": str(weights_from) if weights_from else None}
    shims += follow.follow(w, data_dir, work, requirements, out.parent, at, to_certify if certify else None)
    hang.watchdog(at, lambda: _hung(w, out, work))
    if certify:             # each process that trains stops after its first step; the first one's model certified
        certified.arm(w, out.parent, weights_from)
    if spec.script.shim:
        shims.append(f"the declared shim {spec.script.shim} runs first, in the script's namespace")
    # the shim runs where the script does: its relative paths (a dataset root "./") land in the work folder
    script, said = notebook_script.script_file(spec, work)     # a notebook: the script its code cells make
    shims += said + _as_launched(spec)
    sys.argv = [str(script), *map(str, spec.script.args)]
    # the path python gives: the root for python -m MODULE, the script's own folder for python SCRIPT
    sys.path.insert(0, str(work if spec.script.module else (work / spec.script.path).parent))
    os.chdir(work)
    w.phases.start(WARMUP)
    late, failure, running = None, None, f"the declared shim {spec.script.shim}"
    try:
        globals_ = runpy.run_path(str(work / spec.script.shim)) if spec.script.shim else {}
        running = "the script"
        if spec.script.launcher:     # torchrun, accelerate launch, fabric run: it starts the script's ranks
            launcher.run(spec, shims)
        elif spec.script.module:     # python -m MODULE: its package imported first, sys.argv[0] its file
            runpy.run_module(spec.script.module, init_globals=globals_, run_name="__main__", alter_sys=True)
        else:
            notebook_script.run(spec, script, globals_, shims)     # a notebook's cells one at a time, declared
    except certified.Certified:
        return result_header.header(raw, "certified", None) | {"probe": {"shims": shims, "models": probe.models}}
    except StopScript:
        pass                         # the probe's bound: observer.stopped says so
    except watch.NoGpu as exc:
        return watch.failed(spec, str(exc), [], kind="no-gpu")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            failure = watch.failed(spec, f"{running} exited with status {exc.code}", tried)
    except BaseException as exc:     # noqa: BLE001 - whatever the script raises is its result
        # after training: the run keeps its figures, noted; a missing module is never the bounds' doing
        late = None if isinstance(exc, ModuleNotFoundError) else bounds.after_training(observer, exc, work)
        spawned = process.spawned_error(exc, out.parent / follow.FOLDER, str(work))     # a rank mp.spawn started
        failure = None if late else watch.failed(spec, spawned or f"{running} raised {type(exc).__name__}: {exc}",
                                                 tried)
        if failure and isinstance(exc, ModuleNotFoundError) and exc.name and not tried:
            failure["failure"]["missing_module"] = _missing(exc)     # the host names the flag that adds it
    finally:
        w.named.put_back()             # the published files served outside the run's folders end with the script
    result = _gathered(w, failure or watch.outcome(w, late), out.parent)
    if result["status"] == "ok":
        result["probe"]["figures"] = _keep_figures(work, out, copied_at)
    return result


def _hung(w: watch.Watch, out: Path, work: Path) -> None:
    """The run's deadline passed with the script still running: the failure names who hangs and where, every
    process of the run ends, and so does this one (the runner reads the result it leaves)."""
    failure = hang.explain(out.parent / follow.FOLDER, str(work), w.spec.limits.timeout_s) or {
        "kind": "timeout", "message": f"the script had not ended after {w.spec.limits.timeout_s:.0f} s",
        "log_tail": []}
    write_json_atomic(out, result_header.header(w.raw, "failed", failure))
    follow.end(out.parent)
    sys.stdout.flush()
    os._exit(1)


def _gathered(w: watch.Watch, own: dict, out_dir: Path) -> dict:
    """The run's result from this process's own (``own``) and those of the processes the script started: a
    process that raised fails the run with its own error; where none trained, why (reprokit/kits/ranks/gather.py)."""
    followed, attached = follow.gathered(out_dir)
    stopped = follow.end(out_dir)
    failure = gather.failed(followed)
    if failure:
        return result_header.header(w.raw, "failed", failure)
    trained = own["status"] == "ok"
    if not trained and (own["failure"] or {}).get("kind") != "invalid-output":
        return own                    # the script's own process failed, and nothing it started did first
    if trained:
        own["process"] = identity.who(w)
    result = gather.gather(own if trained else None, followed, w.spec.device == "cpu")
    if result is None:
        message = (f"no training step observed in the script's process or the {attached} it started (no optimizer "
                   f"step ran)" if attached else own["failure"]["message"])
        return own | {"failure": {**own["failure"], "message": message}}
    result["probe"]["shims"] = gather.declarations(w.shims, result["probe"]["shims"])
    if stopped:
        result["probe"]["notes"].append(f"{len(stopped)} process(es) the script started still ran once it ended: "
                                        f"stopped (pids {', '.join(map(str, stopped))})")
    return result


def _as_launched(spec: ScriptSpec) -> list[str]:
    """How the script is launched, where it is not ``python SCRIPT`` in a copy of its folder: declared."""
    said = [f"runs as python -m {spec.script.module} from its root (the script imports its own package)"
            ] if spec.script.module else []
    return said + [f"{folder}/ is left out of the run's copy: a package named like a module of the framework's lock, "
                   f"which the script would import instead of the installed one" for folder in spec.script.left_out]


def _missing(exc: ModuleNotFoundError) -> dict:
    """The module a failed import named, and the file and line that imported it (a dependency's, or the script's)."""
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return {"name": exc.name, "file": frame.filename, "line": frame.lineno}


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter() - process_age_s()
    args = _parse(argv)
    raw = json.loads(args.spec.read_text())
    out = args.out.resolve()
    try:
        result = run(raw, args.data_dir.resolve(), args.script_dir.resolve(), out, started, args.certify,
                     args.weights_from.resolve() if args.weights_from else None,
                     [(at, Path(folder).resolve()) for at, folder in args.mount],
                     args.requirements.resolve() if args.requirements else None)
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
