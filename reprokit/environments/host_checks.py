"""The engine and the GPU host: is a Docker engine there, can it hand out GPUs, do the GPUs fit the builds.

Used by every runner and by ``gpu_state``. What each framework's CUDA build needs (driver,
kernels per compute capability) is data in ``docker/bases.toml``; the host's GPUs come from
``nvidia-smi`` through ``reprokit.kits.framework_free.nvidia_smi``, the one module that parses it.
"""
from __future__ import annotations

import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.environments import base_images, docker_client
from reprokit.errors import UserError
from reprokit.kits.framework_free import nvidia_smi

if TYPE_CHECKING:
    from docker.client import DockerClient
    from docker.types import DeviceRequest

TOOLKIT_FIX = ("install nvidia-container-toolkit and restart Docker "
               "(https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html), "
               "or run with --gpus none")
GPU_ID = re.compile(r"[0-9]+|GPU-[0-9a-fA-F-]+|MIG-[0-9a-zA-Z/-]+")

# The driver's cache of PTX compiled just in time, mounted writable where a GPU needs it (see jit_cache).
JIT_CACHE_TARGET = "/cuda-jit-cache"
# CUDA_CACHE_MAXSIZE's ceiling, 4 GiB (CUDA C++ Programming Guide, "CUDA Environment Variables"):
# TensorFlow's kernels compiled for a new GPU outgrow the 256 MiB default.
JIT_CACHE_MAXSIZE = str(4 * 2**30)


# ---------------------------------------------------------------------------
# The engine

def engine_status() -> tuple[bool, str]:
    """Whether a Docker engine answers, and why (not)."""
    try:
        import docker
    except ImportError:
        return False, "the Docker SDK for Python is not installed (pip install docker)"
    import requests
    try:
        client = docker.from_env(timeout=10)
        version = client.version()
        where = client.api.base_url.replace("http+docker://localhost", "the local socket")
        return True, f"Docker engine {version.get('Version', '?')} answers at {where}"
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        return False, (f"no Docker engine answers ({docker_client.short_reason(exc)}); start it with "
                       f"`sudo systemctl start docker` (or scripts/start-dockerd)")


def engine_is_local(client: DockerClient) -> bool:
    url = client.api.base_url
    return url.startswith("http+docker://localhost") or "localhost" in url or "127.0.0.1" in url


def nvidia_runtime_available(client: DockerClient) -> bool:
    """Whether the engine can hand GPUs to a container (NVIDIA container toolkit installed).

    Yes when the engine lists an ``nvidia`` runtime (what `nvidia-ctk runtime
    configure` registers), or when, on a local engine, the toolkit's
    ``nvidia-container-runtime-hook`` is on the PATH (dockerd then serves
    `--gpus` requests with it).
    """
    import docker.errors
    import requests
    try:
        info = client.info()
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return False
    if "nvidia" in (info.get("Runtimes") or {}):
        return True
    return engine_is_local(client) and shutil.which("nvidia-container-runtime-hook") is not None


# ---------------------------------------------------------------------------
# Which GPUs

def parse_gpus(value: str | Sequence[str] | None) -> str | list[str]:
    """'none' | 'all' | ['0', 'GPU-…', 'MIG-…'] from what a user typed (--gpus none|all|0,1)."""
    if value is None:
        return "none"
    if not isinstance(value, str):
        ids = [str(v).strip() for v in value if str(v).strip()]
        return ids or "none"
    text = value.strip().lower()
    if text in ("none", "all"):
        return text
    ids = [part.strip() for part in value.split(",") if part.strip()]
    if not ids or not all(GPU_ID.fullmatch(i) for i in ids):
        raise UserError(f"--gpus {value!r} is not understood; use none, all, or GPU ids such as 0,1 "
                        f"(indexes, GPU-… or MIG-… UUIDs from `nvidia-smi -L`).")
    return ids


def device_requests(gpus: str | list[str]) -> list[DeviceRequest] | None:
    """The engine's DeviceRequests for `--gpus all` or `--gpus device=0,1`; None for no GPU."""
    import docker.types
    gpus = parse_gpus(gpus)
    if gpus == "none":
        return None
    if gpus == "all":
        return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return [docker.types.DeviceRequest(device_ids=list(gpus), capabilities=[["gpu"]])]


def query_gpus() -> list[dict[str, Any]]:
    """The host's GPUs: index, uuid, name, driver, compute capability (None if the driver predates it)
    and their MIG devices (``mig``: profile, device, uuid)."""
    if shutil.which("nvidia-smi") is None:
        raise UserError("GPUs were requested but this host has no nvidia-smi, so no NVIDIA driver was found; "
                        "install the NVIDIA driver, or run with --gpus none.")
    rows = nvidia_smi.gpus()
    if rows is None:
        raise UserError("GPUs were requested but nvidia-smi failed; check the NVIDIA driver with `nvidia-smi`, "
                        "or run with --gpus none.")
    migs = {d["uuid"]: d["mig"] for d in nvidia_smi.devices() or []}
    return [{**r, "mig": migs.get(r["uuid"], [])} for r in rows]


def resolve_gpus(gpus: str | list[str], host_gpus: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The host GPUs (or MIG devices) that --gpus names, each with its UUID; [] for 'none'.

    A MIG device comes back as its parent's row with the MIG UUID in ``uuid`` and the GPU's in
    ``gpu_uuid``, so a run on it can be pinned (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES and
    NVML all take MIG UUIDs) and checked against its GPU's driver and compute capability.
    """
    gpus = parse_gpus(gpus)
    if gpus == "none":
        return []
    rows = query_gpus() if host_gpus is None else host_gpus
    if not rows:
        raise UserError("GPUs were requested but nvidia-smi lists none; check the driver with `nvidia-smi`, "
                        "or run with --gpus none.")
    known = {}
    for r in rows:
        whole = {**r, "gpu_uuid": r.get("uuid")}
        known[str(r["index"])] = known[r.get("uuid") or f"#{r['index']}"] = whole
        for m in r.get("mig") or []:
            known[m["uuid"]] = {**whole, "uuid": m["uuid"], "name": f"{r['name']} {m['profile']}"}
    if gpus == "all":
        return [known[str(r["index"])] for r in rows]
    missing = [g for g in gpus if g not in known]
    if missing:
        raise UserError(f"GPU id {', '.join(missing)} is not on this host (it has "
                        f"{', '.join(str(r['index']) for r in rows)}); choose ids from `nvidia-smi -L`.")
    return [known[g] for g in gpus]


# ---------------------------------------------------------------------------
# Do they fit each framework's CUDA build (docker/bases.toml)

def version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)) or (0,)


def kernels_for(need: dict[str, Any], cc: str) -> str | None:
    """'sass' where the build ships machine code this GPU runs, 'ptx' where the driver must compile
    the build's PTX for it, None where it has neither.

    SASS for X.y runs on X.z with z >= y (CUDA C++ Programming Guide, "Binary Compatibility");
    PTX for X.y is compiled for any GPU of compute capability X.y or higher ("Application Compatibility").
    """
    have = version(cc)
    if any(version(s)[0] == have[0] and version(s) <= have for s in need.get("sass", [])):
        return "sass"
    if any(version(p) <= have for p in need.get("ptx", [])):
        return "ptx"
    return None


def min_driver_for(need: dict[str, Any], cc: str | None) -> str:
    """The oldest driver that runs this build on a GPU of this compute capability."""
    if not cc or kernels_for(need, cc) != "ptx":
        floor: str = need["min_driver"]
        return floor
    candidates: list[str] = [need["min_driver"], need.get("ptx_min_driver", need["min_driver"]),
                             (need.get("jit_min_driver") or {}).get(cc, need["min_driver"])]
    return max(candidates, key=version)


def builds(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A framework's GPU builds by flavor, the default ("cuda") first: each is the framework's entry in
    docker/bases.toml with the flavor's own requirements over it."""
    flavors = entry.get("flavors", {})
    return {"cuda": entry, **{name: {**entry, **need} for name, need in flavors.items()}}


def _misfits(fw: str, need: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """Why this build of a framework cannot run on these GPUs: one sentence per mismatch; [] where it can."""
    problems = []
    for r in rows:
        cc, driver = r.get("compute_capability"), r["driver"]
        where = f"GPU {r['index']} ({r['name']}" + (f", compute capability {cc})" if cc else ")")
        if cc and kernels_for(need, cc) is None:
            problems.append(f"{where} is not among the GPUs the {fw} image's CUDA {need['cuda']} build has "
                            f"kernels for (compute capability {', '.join(need['sass'])})")
            continue
        floor = min_driver_for(need, cc)
        if version(driver) < version(floor):
            jit = cc and kernels_for(need, cc) == "ptx"
            problems.append(f"The NVIDIA driver {driver} is older than the {floor} that the {fw} image's CUDA "
                            f"{need['cuda']} build needs" + (f" on {where}, where it compiles the build's PTX"
                                                              if jit else ""))
    return list(dict.fromkeys(problems))


@dataclass(frozen=True)
class Flavor:
    """The GPU build of one framework that runs on the assigned GPUs, and why it was chosen."""
    name: str               # a key of the framework's locks in docker/bases.toml: cuda, cuda12, ...
    cuda: str
    min_driver: str
    why: str


def gpu_flavors(frameworks: Iterable[str], gpus: str | list[str] = "all", *,
                host_gpus: list[dict[str, Any]] | None = None,
                repo_root: Path = base_images.REPO_ROOT) -> dict[str, Flavor]:
    """For each framework, the first of its GPU builds (the default first) whose kernels and driver fit every
    assigned GPU. Raises UserError, one sentence per mismatch and the way out, where none fits, before any
    GPU run; {} for --gpus none. ``host_gpus`` replaces the nvidia-smi query (tests)."""
    if parse_gpus(gpus) == "none":
        return {}
    bases = base_images.load_bases(repo_root)
    rows = resolve_gpus(gpus, host_gpus)
    chosen, problems = {}, []
    for fw in sorted(set(frameworks)):
        tried = {name: _misfits(fw, need, rows) for name, need in builds(bases[fw]).items()}
        fits = next((name for name, misfit in tried.items() if not misfit), None)
        if fits is None:
            problems += [m for misfit in tried.values() for m in misfit]
            continue
        need = builds(bases[fw])[fits]
        why = ("its default build runs on the assigned GPUs" if fits == "cuda" else
               f"{tried['cuda'][0]}, so it runs its {fits} build (CUDA {need['cuda']}, driver "
               f"{need['min_driver']} or newer)")
        floor = max((min_driver_for(need, r.get("compute_capability")) for r in rows), key=version)
        chosen[fw] = Flavor(fits, need["cuda"], floor, why)
    _refuse(problems)
    return chosen


def build_facts(framework: str, flavor: str, chosen: Flavor | None = None) -> dict[str, Any]:
    """What a run's spec records of the build it runs on (part of its id): the flavor, and for a GPU build
    its CUDA version and the oldest driver that runs it, which the kit names when it finds no GPU."""
    if flavor == "cpu":
        return {"flavor": "cpu"}
    if chosen is None:
        need = builds(base_images.load_bases()[framework])[flavor]
        return {"flavor": flavor, "cuda": need["cuda"], "min_driver": need["min_driver"]}
    return {"flavor": chosen.name, "cuda": chosen.cuda, "min_driver": chosen.min_driver}


def check_gpu_host(frameworks: Iterable[str], gpus: str | list[str] = "all", *,
                   host_gpus: list[dict[str, Any]] | None = None, repo_root: Path = base_images.REPO_ROOT,
                   flavors: dict[str, str] | None = None) -> None:
    """Check the host's driver and GPU generation against each framework's CUDA build (``flavors``: the one
    gpu_flavors chose; the default build where none is named). Raises UserError with one sentence per
    mismatch, and the way out, before any GPU run."""
    if parse_gpus(gpus) == "none":
        return
    flavors = flavors or {}
    bases = base_images.load_bases(repo_root)
    rows = resolve_gpus(gpus, host_gpus)
    problems = [m for fw in sorted(set(frameworks))
                for m in _misfits(fw, builds(bases[fw])[flavors.get(fw, "cuda")], rows)]
    _refuse(problems)


def _refuse(problems: list[str]) -> None:
    if problems:
        raise UserError("; ".join(dict.fromkeys(problems)) + "; upgrade the driver or use another GPU (choose it "
                        "with --gpus), or run with --gpus none.")


# Mixed precision needs tensor cores of its type (CUDA C++ Programming Guide, "Compute Capabilities"; both
# frameworks emulate it slowly, or fail, on older GPUs): bfloat16 from Ampere (8.0), float16 from Volta (7.0).
MIN_CC = {"bf16_mixed": (8, 0), "fp16_mixed": (7, 0)}


def _older(precision: str, gpus: str | list[str], host_gpus: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    if precision not in MIN_CC or parse_gpus(gpus) == "none":
        return []
    return [r for r in resolve_gpus(gpus, host_gpus)
            if r.get("compute_capability") and version(r["compute_capability"]) < MIN_CC[precision]]


def mixed_precision(gpus: str | list[str] = "all", host_gpus: list[dict[str, Any]] | None = None) -> str:
    """The mixed precision every assigned GPU has: bf16 from compute capability 8.0, else fp16 (with loss
    scaling), which check_precision refuses below 7.0."""
    return "fp16_mixed" if _older("bf16_mixed", gpus, host_gpus) else "bf16_mixed"


def check_precision(precisions: Iterable[str], gpus: str | list[str] = "all", *,
                    host_gpus: list[dict[str, Any]] | None = None, asked_by: str | None = None,
                    way_out: str = "set numerics.precision = \"fp32\" for this GPU, or choose a newer one with "
                                   "--gpus") -> None:
    """Refuse a mixed precision on a GPU without its tensor cores, in one sentence, before any run;
    ``asked_by`` names what asks for it (default: the precision itself), ``way_out`` what to do instead."""
    for precision in sorted(set(precisions) & set(MIN_CC)):
        old = _older(precision, gpus, host_gpus)
        if old:
            names = ", ".join(f"GPU {r['index']} ({r['name']}, compute capability {r['compute_capability']})"
                              for r in old)
            need = ".".join(map(str, MIN_CC[precision]))
            raise UserError(f"{asked_by or f'precision {precision}'} needs compute capability {need} or newer, "
                            f"and {names} is older; {way_out}.")


def host_has_gpu() -> bool:
    """Whether nvidia-smi answers here and lists a GPU: the default --gpus is all where it does."""
    try:
        return bool(query_gpus())
    except UserError:
        return False


# ---------------------------------------------------------------------------
# PTX compiled just in time: keep the driver's cache between runs

@dataclass(frozen=True)
class JitCache:
    host: Path              # a folder on the host, mounted writable at JIT_CACHE_TARGET
    target: str
    environment: dict[str, str]


def jit_cache(framework: str, run_gpus: list[dict[str, Any]], cache_root: Path, *,
              repo_root: Path = base_images.REPO_ROOT) -> JitCache | None:
    """Where a run's GPU has only PTX in the framework's build: a persistent cache for the compiled kernels.

    Without it every container compiles the kernels again (TensorFlow warns this "could take 30 minutes
    or longer"). The kit's warmup steps run the training kernels first, so compiling stays out of the
    timed steps; the cache makes later runs skip it. None where every GPU has SASS.
    """
    need = base_images.load_bases(repo_root)[framework]
    if not any(r.get("compute_capability") and kernels_for(need, r["compute_capability"]) == "ptx"
               for r in run_gpus):
        return None
    host = Path(cache_root) / "cuda-jit" / framework
    host.mkdir(parents=True, exist_ok=True)
    return JitCache(host, JIT_CACHE_TARGET, {"CUDA_CACHE_PATH": JIT_CACHE_TARGET,
                                             "CUDA_CACHE_MAXSIZE": JIT_CACHE_MAXSIZE})
