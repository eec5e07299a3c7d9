"""The local runner: the kit in a virtualenv built from the framework's lock file.

The default where Docker or a GPU is missing. With ``python=`` it uses an
existing interpreter instead (a GPU box with the framework preinstalled and
no network); the result then records the versions that interpreter had.

A kit process runs in a session of its own (a timeout or Ctrl-C kills its
group) and dies with the process that started it, however that one dies
(``kill -9`` included), so it never trains on unowned. Its own children are
not reached: PyTorch's DataLoader workers end as they find it gone, a helper
process of a user's script would not. Its temporary files (TensorFlow's
autograph modules, multiprocessing's folders) go to a folder of its own beside
its output folder, removed once it has ended, never to /tmp.

A kit process imports the kits (``reprokit.kits``) from, and starts in, the folder ``kit_path()`` gives: in a
clone its top, as always; from an installed wheel a copy of reprokit/__init__.py and reprokit/kits/ alone, since the
folder that holds them there is the host's site-packages, whose numpy and the rest would shadow the locked
environment's. The frameworks that plugins add reach it in its environment (reprokit/kits/contract/plugins.py).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from reprokit import resources
from reprokit.environments import cache, envs
from reprokit.environments.host_checks import Flavor, build_facts
from reprokit.environments.topology import parse_cpulist
from reprokit.kits.contract.names import plugin_environment
from reprokit.results.provenance import kit_code_sha256, sha256_file
from reprokit.runners import live
from reprokit.runners.base import KitCall, Outcome, ProgressFn, fresh_folder, split_line


class LocalRunner:
    name = "local"

    def __init__(self, envs_root: Path, data_dir: Path, device: str, python: Path | None = None,
                 extra_paths: tuple[Path, ...] = (), *, flavors: dict[str, Flavor] | None = None,
                 visible_gpus: str | None = None) -> None:
        self.envs_root = envs_root
        self.data_dir = data_dir
        self.device = device
        self.python = python
        self.extra_paths = extra_paths
        self.flavors = dict(flavors or {})      # the GPU build each framework runs (host_checks.gpu_flavors)
        # CUDA_VISIBLE_DEVICES of every run without a placement: the assigned GPUs' UUIDs, "" for none;
        # None leaves the caller's as it is. Without it CUDA would number the host's GPUs from 0, whatever --gpus said.
        self.visible_gpus = visible_gpus
        self._pythons: dict[str, Path] = {}

    def flavor(self, framework: str) -> str:
        if framework in self.flavors:
            return self.flavors[framework].name
        return "cuda" if self.device == "gpu" else "cpu"

    def missing(self, frameworks: set[str]) -> list[str]:
        """Lock files whose environment still has to be built (for the time estimate)."""
        if self.python:
            return []
        return [n for n in {envs.lock_name(f, self.flavor(f)) for f in frameworks}
                if not envs.ready(self.envs_root, n)]

    def prepare(self, frameworks: set[str], log: Callable[[str], object] = print) -> None:
        for framework in sorted(frameworks):
            if self.python:                # a given interpreter: no lock is looked up (a framework may have none)
                self._pythons[framework] = self.python
                continue
            name = envs.lock_name(framework, self.flavor(framework))
            self._pythons[framework] = envs.build(self.envs_root, name, log)

    def python_of(self, framework: str) -> Path:
        """The interpreter prepare() chose for a framework."""
        return self._pythons[framework]

    def describe(self, framework: str) -> dict[str, Any]:
        if self.python:
            return {"lock": None, "lock_sha256": None, "image": None, "interpreter": str(self.python)}
        lock = envs.lock_path(envs.lock_name(framework, self.flavor(framework)))
        return {"lock": resources.named(lock), "lock_sha256": sha256_file(lock), "image": None,
                **build_facts(framework, self.flavor(framework), self.flavors.get(framework))}

    def run(self, call: KitCall, on_progress: ProgressFn) -> Outcome:
        if call.framework not in self._pythons:
            self.prepare({call.framework})
        fresh_folder(call.output)
        tmp = fresh_folder(_temp_folder(call))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (kit_path(), *self.extra_paths))),
               "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp), **plugin_environment()}
        cpus = ""
        if self.visible_gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.visible_gpus
        if call.placement is not None:
            # Its GPUs (one, or N at --devices N) and a CPU set of its own (the memory node needs a container's
            # cpuset_mems).
            if call.placement.device_id is not None:
                env["CUDA_VISIBLE_DEVICES"] = call.placement.device_id
            cpus = ",".join(map(str, sorted(parse_cpulist(call.placement.cpus))))
        # reprokit/kits/launch.py takes the CPU set and arms the kit's death with this process, then runs the kit:
        # set-up a preexec_fn would do, which would make subprocess fork this whole process where it now uses vfork.
        cmd = [str(self._pythons[call.framework]), "-m", "reprokit.kits.launch", str(os.getpid()), cpus, call.module,
               *map(str, call.args)]
        tail: list[str] = []
        t0 = time.perf_counter()
        try:
            # A process group of its own, so a timeout or Ctrl-C stops the kit and anything it started. This
            # thread waits for the kit below, so it outlives it: the parent-death signal follows the thread.
            proc = subprocess.Popen(cmd, cwd=kit_path(), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, start_new_session=True)
            # A second Ctrl-C, which does not wait for the clean-up below, still ends the kit's process group.
            with live.process_group(proc.pid):
                return self._wait(proc, call, cmd, tail, on_progress, t0)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @staticmethod
    def _wait(proc: subprocess.Popen[str], call: KitCall, cmd: list[str], tail: list[str], on_progress: ProgressFn,
              t0: float) -> Outcome:
        def read() -> None:
            assert proc.stdout is not None          # stdout=PIPE
            for line in proc.stdout:
                split_line(line, on_progress, tail)

        reader = threading.Thread(target=read, daemon=True)
        python = Path(cmd[0])
        top = resources.checkout()
        launcher = {"backend": "local",
                    "python": str(python.relative_to(top)) if top and python.is_relative_to(top) else str(python)}
        try:
            reader.start()
            code = proc.wait(timeout=call.timeout_s)
        except subprocess.TimeoutExpired:
            _kill(proc)
            reader.join(5)
            return Outcome(None, time.perf_counter() - t0, tail, timed_out=True, launcher=launcher)
        except KeyboardInterrupt:
            _kill(proc)
            reader.join(5)
            return Outcome(None, time.perf_counter() - t0, tail, interrupted=True, launcher=launcher)
        _end_group(proc.pid)          # what the kit left running in its group ends with the run
        reader.join(5)
        # SIGKILL from outside the kit is, on Linux, almost always the kernel's OOM killer.
        return Outcome(code, time.perf_counter() - t0, tail, oom_killed=code == -signal.SIGKILL,
                       launcher=launcher)


@lru_cache(maxsize=1)
def kit_path() -> Path:
    """The folder a kit process imports ``reprokit.kits`` from: the clone's top, or from a wheel a copy of what a kit
    process imports (resources.kit_code) in the per-user cache, one per content of that code (made once, whole or not
    at all)."""
    top = resources.checkout()
    if top is not None:
        return top
    folder = cache.root() / "kit-code" / kit_code_sha256()[:16]
    if not folder.is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=folder.parent))
        for path in resources.kit_code():                     # reprokit/__init__.py and reprokit/kits/
            copy = partial / path.relative_to(resources.kit_import_root())
            copy.parent.mkdir(parents=True, exist_ok=True)
            if path.is_dir():
                shutil.copytree(path, copy, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copyfile(path, copy)
        try:
            partial.rename(folder)
        except OSError:             # another command made it meanwhile: the same content
            shutil.rmtree(partial, ignore_errors=True)
    return folder


def _temp_folder(call: KitCall) -> Path:
    """The kit process's TMPDIR: beside its output folder, inside its run's work folder (so an orchestrator
    killed before removing it leaves it where the run's next attempt starts afresh, never in /tmp)."""
    return call.output.with_name(call.output.name + ".tmp")


def _kill(proc: subprocess.Popen[str]) -> None:
    _end_group(proc.pid)
    proc.wait()


def _end_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:        # the group is empty: nothing was left
        pass
