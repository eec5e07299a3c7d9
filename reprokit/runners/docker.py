"""The Docker runner: one container per kit process, from the framework's pinned image.

Started through the Docker SDK, never the CLI. Each container gets least
privilege: a non-root user, a read-only root filesystem (a tmpfs at /tmp),
all capabilities dropped, no new privileges, no network, the kit code, the
dataset and the call's inputs (a spec, weights) mounted read-only and exactly
one writable mount (the call's fresh, empty output folder; on a GPU whose
framework build has only PTX, also a cache of the kernels compiled from it, so
each container does not compile them again). The Docker socket is never mounted
(reprokit/runners/container_mounts.py).
GPUs reach the container through ``device_requests`` (the `--gpus` flag of the
CLI), with the shared memory and ulimits NVIDIA recommends for training
containers ("--shm-size=1g --ulimit memlock=-1 --ulimit stack=67108864", NVIDIA
Deep Learning Frameworks documentation, "Running A Container" /
"Setting The Shared Memory Flag",
https://docs.nvidia.com/deeplearning/frameworks/user-guide/index.html).
Each container also has a process-count limit and, by default, a memory limit
of a share of the engine host's memory (reprokit/runners/container_limits.py),
so a user's fork bomb or leak ends as that run's failure.

An engine that stops answering mid-run (dockerd restarts or dies) makes that
run a failure of kind engine-lost; the next run waits a bounded time for the
engine to come back, removes the container lost with it, and goes on, or the
command stops in one sentence. Finished results are stored as each run ends.

Containers carry the labels ``reprokit=1`` and ``reprokit.run_id=<call label>``, so
leftovers can be found (``docker ps -a --filter label=reprokit=1``); the runner
removes its container in every case, Ctrl-C included, and registers it with
``reprokit.runners.live`` while it runs, so a second Ctrl-C removes it at once.
An orchestrator killed with ``kill -9`` cannot: its container trains on, then
stays. So each container is also labelled with its owner (reprokit/runners/owners.py),
and prepare() removes, by name, those of this host whose owner has ended.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit import resources
from reprokit.environments import docker_client, host_checks, images
from reprokit.environments.host_checks import (
    TOOLKIT_FIX,
    check_gpu_host,
    device_requests,
    engine_is_local,
    nvidia_runtime_available,
    parse_gpus,
)
from reprokit.errors import UserError
from reprokit.kits.contract.names import CONTAINER_LABEL, PLUGINS, plugin_environment
from reprokit.runners import (
    container_devices,
    container_limits,
    container_mounts,
    container_output,
    container_start,
    engine,
    live,
    owners,
)
from reprokit.runners.base import KitCall, Outcome, ProgressFn

if TYPE_CHECKING:
    from docker.client import DockerClient
    from docker.models.images import Image

PYTHONPATH_ROOT = "/opt/reprokit"
PLUGINS_ROOT = "/opt/reprokit/plugins"     # each plugin's package, read-only (reprokit/kits/contract/plugins.py)

SHM_SIZE = "1g"                     # NVIDIA: --shm-size=1g, per device of the run (container_devices.py)
ULIMITS = (("memlock", -1, -1), ("stack", 67108864, 67108864))  # NVIDIA: memlock=-1, stack=64 MiB
LABEL = CONTAINER_LABEL
LABEL_RUN = "reprokit.run_id"
LABEL_FRAMEWORK = "reprokit.framework"
ENGINE_WAIT_S = 60.0        # how long a run waits for an engine that stopped answering (a restart takes seconds)
# A stopping dockerd first stops its containers (SIGTERM, SIGKILL after 10 s), then closes its API about a
# second later: a run killed so is told from one a person or the kernel killed by the engine going away.
KILLED_EXITS = (128 + 9, 128 + 15)
# base.spec_call's modules: each such call that ends is a result the executor stores at once
TRAINING_MODULES = ("reprokit.kits.run", "reprokit.kits.probe")
ENGINE_START = "`sudo systemctl start docker`, or scripts/start-dockerd"

Log = Callable[[str], None]


# ---------------------------------------------------------------------------
# The runner

class DockerRunner:
    """Runs one kit process per container; satisfies ``reprokit.runners.base.Runner``."""

    name = "docker"

    def __init__(self, repo_root: Path, data_dir: Path, gpus: str | list[str] = "none",
                 extra_mounts: Sequence[tuple[Path | str, str]] = (), *, flavor: str | None = None,
                 flavors: dict[str, host_checks.Flavor] | None = None,
                 base_override: str | None = None, build_missing: bool = True, extra_ca: str | Path | None = None,
                 lock_overrides: dict[str, Path] | None = None, mem_limit: str | int | None = "auto",
                 shm_size: str = SHM_SIZE, kits_dir: Path | None = None, cache_root: Path | None = None,
                 client: DockerClient | None = None, log: Log = print,
                 pinned_images: dict[str, str] | None = None, engine_wait_s: float = ENGINE_WAIT_S) -> None:
        self.repo_root = Path(repo_root).resolve()
        self.kits_dir = Path(kits_dir).resolve() if kits_dir else resources.kits()   # the installed kits
        self.data_dir = Path(data_dir).resolve()
        self.gpus = parse_gpus(gpus)
        self.extra_mounts = [(Path(h).resolve(), str(c)) for h, c in extra_mounts]
        self.flavor = flavor or ("cpu" if self.gpus == "none" else "cuda")
        self.flavors = dict(flavors or {})      # a framework's other GPU build, where the host's driver needs it
        self.base_override = base_override or os.environ.get(images.BASE_OVERRIDE_ENV) or None
        self.build_missing = build_missing
        self.extra_ca = extra_ca
        self.lock_overrides = dict(lock_overrides or {})
        self.memory = container_limits.memory_option(mem_limit)     # --memory-limit: auto, SIZE or none
        self._host_memory: int | None = None                         # the engine host's, for auto
        self.pids_limit = container_limits.PIDS_LIMIT
        self.engine_wait_s = engine_wait_s
        self._lost: list[str] = []          # containers of runs lost with the engine, removed when it answers
        self._finished = 0                  # training runs that ended with a result (stored as each ends)
        self.shm_size = shm_size
        self.ulimits = list(ULIMITS)
        self.log = log
        self.cache_root = Path(cache_root).resolve() if cache_root else self.data_dir.parent / "cache"
        self._jit: dict[str, host_checks.JitCache] = {}     # per framework, where its GPU compiles PTX
        self._client = client
        self._recipes: dict[str, images.Recipe] = {}
        self._images: dict[str, Image] = {}
        # framework -> image ref to run as it is (a cluster node runs exactly what the head staged)
        self.pinned_images = dict(pinned_images or {})
        self._engine_version: str | None = None
        container_mounts.check_extra_mounts(self.extra_mounts)

    def __getstate__(self) -> dict[str, Any]:
        # To a run's own process: without the engine connection and image handles (prepare() remakes them).
        return {**self.__dict__, "_client": None, "_images": {}, "log": print}

    # -- set-up ------------------------------------------------------------

    @property
    def client(self) -> DockerClient:
        if self._client is None:
            self._client = docker_client.client_or_error()
        return self._client

    def flavor_of(self, framework: str) -> str:
        return self.flavors[framework].name if framework in self.flavors else self.flavor

    def recipe(self, framework: str) -> images.Recipe:
        if framework not in self._recipes:
            self._recipes[framework] = images.recipe(
                framework, self.flavor_of(framework), base_override=self.base_override,
                lock_override=self.lock_overrides.get(framework), repo_root=self.repo_root,
                client=self.client if self.base_override else None)     # only an override is looked up
        return self._recipes[framework]

    def prepare(self, frameworks: set[str], log: Log | None = None) -> None:
        """Everything a run needs, checked before any run: UserError names what is missing and the fix."""
        log = log or self.log
        client = self.client
        self._engine_version = client.version().get("Version")
        self.memory_bytes()
        if self.gpus != "none":
            if not nvidia_runtime_available(client):
                raise UserError(f"GPUs were requested (--gpus {self.gpus_text()}) but this Docker engine has no "
                                f"NVIDIA container runtime; {TOOLKIT_FIX}.")
            if engine_is_local(client):
                check_gpu_host(frameworks, self.gpus, repo_root=self.repo_root,
                               flavors={fw: self.flavor_of(fw) for fw in frameworks})
                gpus = host_checks.resolve_gpus(self.gpus)
                for fw in frameworks:
                    cache = host_checks.jit_cache(fw, gpus, self.cache_root, repo_root=self.repo_root)
                    if cache:
                        self._jit[fw] = cache
                        log(f"note: {fw}'s build has only PTX for this GPU: its kernels are compiled once, during "
                            f"the first run's warmup, and kept in {cache.host} for the runs after it.")
        self.data_dir.mkdir(parents=True, exist_ok=True)     # the plan fills it after prepare()
        container_mounts.readable_by_others(self.data_dir)   # its files are shared as each call starts
        uid = container_mounts.container_user()[0]
        for what, path in (("kit code", self.kits_dir), ("data cache", self.data_dir),
                           *((f"extra mount {t}", h) for h, t in self.extra_mounts)):
            if not path.exists():
                raise UserError(f"the {what} folder {path} does not exist; create it or fix the path.")
            if uid == os.getuid():
                continue
            # the data cache's files are shared one by one, as each run needs its file (run())
            bad = container_mounts.unreadable(path, uid, recursive=what != "data cache")
            if bad is not None:
                raise UserError(f"{bad} is not readable by the container's user (uid {uid}); make the {what} "
                                f"readable with `chmod -R a+rX {path}`.")
        left = engine.leftovers(client)
        orphans = engine.remove_orphans(client, left)
        if orphans:
            named = ", ".join(f"{c.name} ({owners.describe(c.labels)}, {c.status})" for c in orphans)
            log(f"note: removed {len(orphans)} reprokit container(s) whose command is gone (killed before it could "
                f"remove them): {named}.")
        # Those of commands alive, or of other hosts sharing this engine, are theirs to remove.
        old = [c for c in left if c not in orphans and c.status != "running"]
        if old:
            log(f"note: {len(old)} stopped reprokit container(s) are left over from earlier runs; remove them "
                f"with `docker rm $(docker ps -aq --filter label={LABEL}=1 --filter status=exited)`.")
        extra_ca = images.read_extra_ca(self.extra_ca) if self.build_missing else None
        for fw in sorted(frameworks):
            if fw in self.pinned_images:
                self._images[fw] = images.pinned(self.pinned_images[fw], client)
                continue
            r = self.recipe(fw)
            self._images[fw] = images.ensure(r, client, build_missing=self.build_missing, extra_ca=extra_ca,
                                             repo_root=self.repo_root, log=log)

    def missing(self, frameworks: set[str]) -> list[str]:
        """Image tags that prepare() will have to build (for the time estimate); all of them where no engine
        answers (a dry run plans without one)."""
        try:
            client = self.client
        except UserError:
            return [self.recipe(fw).tag for fw in sorted(frameworks)]
        return [self.recipe(fw).tag for fw in sorted(frameworks) if images.find(self.recipe(fw), client) is None]

    def describe(self, framework: str) -> dict[str, Any]:
        r = self.recipe(framework)
        lock = r.lock.relative_to(self.repo_root) if r.lock.is_relative_to(self.repo_root) else r.lock
        return {"lock": str(lock), "lock_sha256": r.lock_sha256, "image": r.tag,
                **host_checks.build_facts(framework, self.flavor_of(framework), self.flavors.get(framework))}

    def memory_bytes(self) -> int | None:
        """Each container's memory limit in bytes, None for none; auto asks the engine for its host's memory once."""
        if self.memory.auto and self._host_memory is None:
            self._host_memory = int(self.client.info()["MemTotal"])
        return self.memory.bytes_for(self._host_memory or 0)

    def limits(self) -> dict[str, Any]:
        """The limits every container gets, as a result records them."""
        return {"pids_limit": self.pids_limit, "memory_bytes": self.memory_bytes(),
                "memory_limit": self.memory.describe(self._host_memory)}

    def gpus_text(self) -> str:
        return self.gpus if isinstance(self.gpus, str) else ",".join(self.gpus)

    def image_id(self, framework: str) -> str:
        """The id of the image a framework's runs use, prepared if it is not yet."""
        if framework not in self._images:
            self.prepare({framework})
        image_id = self._images[framework].id
        assert image_id is not None, "an image in the engine has an id"
        return image_id

    # -- one run -----------------------------------------------------------

    def container_config(self, call: KitCall, label: str, name: str | None = None) -> dict[str, Any]:
        """The keyword arguments of ``client.containers.create`` for one call."""
        import docker.types
        uid, gid = container_mounts.container_user()
        plugins = {path: f"{PLUGINS_ROOT}/{i}/{Path(path).name}"          # a package once, however many entries
                   for i, path in enumerate(dict.fromkeys(p.path for p in PLUGINS))}
        mounts = container_mounts.call_mounts(call, self.kits_dir,
                                              [*self.extra_mounts, *((Path(h), t) for h, t in plugins.items())],
                                              self.data_dir, self._jit.get(call.framework))
        args = [container_mounts.container_path(a, mounts) if isinstance(a, Path) else a for a in call.args]
        pythonpath = ":".join([PYTHONPATH_ROOT, *(t for _, t in self.extra_mounts)])
        config = {
            "image": self.pinned_images.get(call.framework) or self.recipe(call.framework).tag,
            "command": ["python", "-m", call.module, *args],
            "name": name or f"reprokit-{label}-{secrets.token_hex(3)}",
            "labels": {LABEL: "1", LABEL_RUN: label, LABEL_FRAMEWORK: call.framework, **owners.labels()},
            "user": f"{uid}:{gid}",
            "environment": {"PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
                            **plugin_environment(plugins.__getitem__), **container_devices.environment(call.devices),
                            **(self._jit[call.framework].environment if call.framework in self._jit else {})},
            "working_dir": "/tmp",
            "mounts": [docker.types.Mount(target, str(host), type="bind", read_only=not writable)
                       for host, target, writable in mounts],
            "network_mode": "none",
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "read_only": True,
            "tmpfs": {"/tmp": "rw,exec,nosuid,nodev,mode=1777"},
            "shm_size": container_devices.shm_bytes(call.devices, container_limits.size_bytes(self.shm_size) or 0),
            "pids_limit": self.pids_limit,
            "ulimits": [docker.types.Ulimit(name=n, soft=s, hard=h) for n, s, h in self.ulimits],
            "device_requests": device_requests(self.gpus),
            "stdin_open": False,
            "tty": False,
        }
        if call.placement is not None:
            # Its GPUs (by UUID where known: N of them at --devices N, in one container), and CPUs and memory near them.
            config.update(cpuset_cpus=call.placement.cpus)
            if call.placement.mems is not None:
                config.update(cpuset_mems=call.placement.mems)
            if call.placement.device_ids:
                config.update(device_requests=device_requests(call.placement.device_ids))
        memory = self.memory_bytes()
        if memory is not None:
            config.update(mem_limit=memory, memswap_limit=memory)  # no swap: OOM is OOM
        return config

    def run(self, call: KitCall, on_progress: ProgressFn) -> Outcome:
        import docker.errors
        try:
            self._await_engine()
        except KeyboardInterrupt:
            return Outcome(None, 0.0, [], interrupted=True)
        if call.framework not in self._images:
            self.prepare({call.framework})
        image = self._images[call.framework]
        container_mounts.share(call, self.data_dir, self._jit.get(call.framework))
        client = self.client
        config = self.container_config(call, call.label)
        name = config["name"]
        launcher = {"backend": "docker", "image": images.image_facts(image),
                    "container": {"name": name, "user": config["user"], "gpus": self.gpus_text(),
                                  "network": "none", "engine": self._engine_version, **self.limits(),
                                  **container_devices.facts(call.devices, config["shm_size"])}}
        tail: list[str] = []
        container = None
        exit_code = None
        timed_out = oom = interrupted = False
        start_error = lost = None
        timing: dict[str, Any] = {}
        launcher["timing"] = timing
        t0 = time.perf_counter()
        stopped = threading.Event()         # by a second Ctrl-C (live.stop_all), which removes the container

        def stop() -> None:
            stopped.set()
            engine.remove_now(client, name)

        with live.running(name, stop):
            try:
                container = container_start.start(client, config, launcher, self._without_memlock)
                t_started = time.perf_counter()
                pump = threading.Thread(target=container_output.pump, args=(container, on_progress, tail), daemon=True)
                pump.start()
                try:
                    exit_code = container.wait(timeout=max(float(call.timeout_s), 0.001))["StatusCode"]
                except Exception as exc:          # the engine's read timed out: the run did
                    if not engine.is_timeout(exc):
                        raise
                    timed_out = True
                    engine.kill(container)
                pump.join(10)
                with contextlib.suppress(docker.errors.NotFound):     # removed by a second Ctrl-C
                    container.reload()
                state = container.attrs.get("State", {})
                oom = bool(state.get("OOMKilled"))
                timing.update(start_s=t_started - t0, process_s=container_output.lifetime(state))
                if not timed_out and exit_code is None:
                    exit_code = state.get("ExitCode")
                if exit_code in KILLED_EXITS and not (oom or stopped.is_set()) and engine.going_away(client):
                    lost = f"the Docker engine stopped the run as it shut down (exit status {exit_code})"
            except container_start.StartFailed as exc:
                start_error = f"the engine could not start the container: {exc}"
                tail.append(f"docker: {start_error}")
                exit_code = 125              # what `docker run` returns when the engine fails
            except KeyboardInterrupt:
                interrupted = True
            except Exception as exc:
                if not engine.connection_broken(exc):
                    raise
                lost = f"the Docker engine stopped answering during the run ({engine.broken_because(exc)})"
            finally:
                wall = time.perf_counter() - t0
                if not engine.remove(client, container, name):
                    self._lost.append(name)
        # The orchestrator's own cost is total_s minus process_s (the kit process's lifetime).
        timing["total_s"] = time.perf_counter() - t0
        if interrupted:
            return Outcome(None, wall, tail, interrupted=True, launcher=launcher)
        if lost is not None:
            left = (f"; its container {name} is left over until the engine answers again, when the next run removes "
                    f"it (or `docker rm -f {name}`)" if name in self._lost else "")
            tail.append(f"docker: {lost}")
            return Outcome(None, wall, tail, engine_lost=lost + left, launcher=launcher)
        self._finished += call.module in TRAINING_MODULES
        return Outcome(None if timed_out else exit_code, wall, tail, timed_out=timed_out,
                       oom_killed=oom and not timed_out, launcher=launcher, start_error=start_error)

    def _await_engine(self) -> None:
        """Before each run: an engine that does not answer gets engine_wait_s to come back (said once), and the
        containers lost with it are removed then; else the command stops in one sentence."""
        client = self.client
        if not engine.answers(client):
            self.log(f"the Docker engine does not answer; waiting up to {self.engine_wait_s:.0f} s for it to come "
                     f"back ...")
            deadline = time.monotonic() + self.engine_wait_s
            while not engine.answers(client):
                if time.monotonic() >= deadline:
                    raise UserError(self._gone())
                time.sleep(1)
            self.log("the Docker engine answers again; the runs go on.")
        self._lost = [name for name in self._lost if not engine.remove(client, None, name)]

    def _gone(self) -> str:
        n = self._finished
        kept = (f"the results of the {n} run(s) this command finished are kept" if n
                else "no run of this command had finished")
        left = f", then remove what it lost with `docker rm -f {' '.join(self._lost)}`" if self._lost else ""
        return (f"the Docker engine stopped answering and did not come back within {self.engine_wait_s:.0f} s; "
                f"{kept}; start it ({ENGINE_START}) and run the same command again{left}.")

    def _without_memlock(self) -> None:
        """This engine may not raise the memlock ulimit: this run and the ones after it go without it."""
        self.ulimits = [u for u in self.ulimits if u[0] != "memlock"]
        self.log("warning: this Docker engine may not raise the memlock ulimit (NVIDIA recommends "
                 "unlimited); running with the engine's default, recorded in each result.")

