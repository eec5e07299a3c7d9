"""reprokit doctor: what this host offers and what a run would choose, in one screen, before anything is built or
started; the first command to run on a rented cloud GPU.

It asks what `reprokit reproduce` asks on its way to the first run, with the same code and no run: the Docker
engine and its NVIDIA runtime, the GPUs and their driver, the CUDA build of each framework that fits them
(docker/bases.toml), the per-user cache and what is built in it, the frameworks (plugins among them), the backend
and the profile a plain `reprokit reproduce` would pick, and why, and whether the state and reports folders can be
written. It exits 1 where a run could not start (each reason one sentence), 0 otherwise.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import reprokit
from reprokit import places, resources
from reprokit.environments import cache, envs, host_checks
from reprokit.errors import UserError
from reprokit.kits.contract.names import BROKEN, PLUGINS, REGISTRY
from reprokit.plan.experiments import BUILTIN_DIR, discover
from reprokit.results import provenance
from reprokit.runners.choose import choose


def version_line() -> str:
    """`reprokit --version`: the version, its code hash, the commit where there is one, and where it runs from."""
    info = provenance.code_info()
    commit = "" if info["code_commit"] == provenance.NO_COMMIT else \
        f", commit {info['code_commit'][:12]}{' with changes' if info['code_dirty'] else ''}"
    top = resources.checkout()
    where = f"the clone at {top}" if top else f"installed in {resources.folder_of('reprokit').parent}"
    return f"reprokit {reprokit.__version__} (code {info['code_sha256'][:12]}{commit}; {where})"


def _gpus() -> tuple[list[str], str]:
    """(the lines of the GPUs and their driver, --gpus as a plain run takes it)."""
    try:
        rows = host_checks.query_gpus()
    except UserError as exc:
        return [f"GPUs: none ({str(exc).split(';')[0].removeprefix('GPUs were requested but ')})"], "none"
    if not rows:
        return ["GPUs: none (nvidia-smi lists none)"], "none"
    kinds = {r["name"]: r.get("compute_capability") or "unknown" for r in rows}
    shown = ", ".join(f"{sum(r['name'] == name for r in rows)} x {name} (compute capability {cc})"
                      for name, cc in kinds.items())
    return [f"GPUs: {shown}; driver {rows[0].get('driver') or 'unknown'}"], "all"


def _builds(frameworks: set[str], gpus: str) -> tuple[list[str], dict[str, host_checks.Flavor], list[str]]:
    """(the lines of each framework's build, the GPU builds chosen, what stops a run)."""
    if gpus == "none":
        return ["CUDA builds: none needed (no GPU): each framework's cpu build"], {}, []
    try:
        chosen = host_checks.gpu_flavors(frameworks, gpus)
    except UserError as exc:
        return [f"CUDA builds: none fits: {exc}"], {}, [str(exc)]
    return ["CUDA builds: " + "; ".join(f"{fw} {f.name} (CUDA {f.cuda}, driver {f.min_driver} or newer): {f.why}"
                                        for fw, f in sorted(chosen.items()))], chosen, []


def _cache() -> list[str]:
    root = cache.root()
    size = envs.shown_size(envs.size_bytes(root)) if root.is_dir() else "empty"
    built = sorted(p.name for p in envs.ENVS.glob("*") if isinstance(envs.read_marker(p), dict)) \
        if envs.ENVS.is_dir() else []
    return [f"cache: {root}, {size}; environments built: {', '.join(built) or 'none yet'}"]


def _frameworks() -> list[str]:
    plugins = ", ".join(f"{p.name} (from {p.dist or p.path})" for p in PLUGINS)
    lines = [f"frameworks: {', '.join(REGISTRY)}" + (f"; plugins: {plugins}" if plugins else "")]
    return lines + [f"  broken plugin: {sentence}" for sentence in BROKEN]


def _run(frameworks: set[str], gpus: str, flavors: dict[str, host_checks.Flavor]) -> tuple[list[str], list[str]]:
    """(the lines of what a plain run would pick and why, what stops it)."""
    device = "cpu" if gpus == "none" else "gpu"
    profile = "standard (a GPU is assigned)" if device == "gpu" else "quick (no GPU: the CPU-sized profile)"
    try:
        runner, why = choose(backend="auto", python=None, gpus=gpus, gpus_explicit=False, device=device,
                             repo_root=resources.root(), envs_root=envs.ENVS, data_dir=places.DATA, extra_dirs=(),
                             frameworks=frameworks, flavors=flavors, dry_run=True)
    except UserError as exc:
        return [f"a run here: none: {exc}"], [str(exc)]
    lines = [f"a run here: backend {runner.name} ({why}); profile {profile}; "
             f"frameworks {', '.join(sorted(frameworks))}"]
    stops = []
    if runner.name == "local":
        missing = runner.missing(frameworks)
        if missing:
            lines.append(f"  its first run builds {', '.join(sorted(missing))} in {envs.ENVS}")
        try:
            envs.writable(envs.ENVS)
            for name in missing:
                envs.check_room(envs.ENVS, name, shutil.disk_usage(envs.ENVS).free)
        except UserError as exc:
            stops.append(str(exc))
    return lines, stops


def run(state_dir: Path, reports_dir: Path) -> int:
    """Print the screen; 1 where a run with these folders could not start, else 0."""
    print(places.first_line(state_dir, reports_dir))
    print(version_line())
    print(f"python: {sys.version.split()[0]} ({sys.executable})")
    engine, why = host_checks.engine_status()
    print(f"Docker engine: {'yes' if engine else 'no'}: {why}")
    if engine:
        import docker
        runtime = host_checks.nvidia_runtime_available(docker.from_env(timeout=10))
        print(f"NVIDIA container runtime: {'yes' if runtime else 'no (a GPU run uses the local backend)'}")
    else:
        print("NVIDIA container runtime: not asked (no engine)")
    frameworks = {fw for e in discover([BUILTIN_DIR]).values() for fw in e.doc["experiment"]["frameworks"]}
    gpu_lines, gpus = _gpus()
    build_lines, flavors, stops = _builds(frameworks, gpus)
    run_lines, more = ([], []) if stops else _run(frameworks, gpus, flavors)
    stops += more
    try:
        places.check_writable(state_dir, reports_dir)
    except UserError as exc:
        stops.append(str(exc))
    for line in [*gpu_lines, *build_lines, *_cache(), *_frameworks(), *run_lines]:
        print(line)
    if stops:
        print("a run could not start here: " + " ".join(stops))
        return 1
    print("a run can start here: `reprokit reproduce --dry-run` prints its plan")
    return 0
