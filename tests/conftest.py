"""Shared fixtures: the kits' real environments and a tiny experiment that trains in seconds."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from checkout import REPO

from reprokit.environments import envs
from reprokit.environments.envs import ENVS
from reprokit.execute import data_step
from reprokit.kits.contract.names import FRAMEWORKS
from reprokit.plan.experiments import load
from reprokit.plan.plan import Options, specs_for
from reprokit.results.provenance import code

TINY = textwrap.dedent("""\
    [experiment]
    name = "tiny"
    title = "A tiny SimpleCNN that trains in seconds"
    frameworks = ["pytorch", "tensorflow"]

    [model]
    name = "simplecnn"
    num_classes = 10
    width_multiplier = 0.125
    dropout = [0.1, 0.1, 0.1]
    dropout_kind = "element"
    batchnorm = { momentum_keep = 0.9, epsilon = 1e-5 }
    init = { conv = "he_uniform", dense = "glorot_uniform", bias = "zeros" }

    [data]
    dataset = "learnable"
    input_size = 32
    resize = "none"
    scale = "unit"
    shuffle = true
    drop_last = true
    train_samples = 256
    test_samples = 64

    [train]
    batch_size = 32
    epochs = 2
    optimizer = { name = "sgd", lr = 0.05, momentum = 0.9, nesterov = false }
    loss = "cross_entropy_from_logits"
    seed = 0
    warmup_steps = 2

    [numerics]
    precision = "fp32"
    tf32 = false
    cudnn_autotune = false
    compile = false
    cpu_threads = { intra_op = 1, inter_op = 1 }
    """)


@pytest.fixture(scope="session", autouse=True)
def host_locks(tmp_path_factory):
    """The host-wide device locks of every command the suite starts, in a folder of the suite's own: a test's
    runs wait for no one else's on this host (reprokit/execute/locks.py)."""
    from reprokit.execute import locks
    folder = tmp_path_factory.mktemp("host-locks")
    before = os.environ.get(locks.LOCK_DIR_ENV)
    os.environ[locks.LOCK_DIR_ENV] = str(folder)
    yield folder
    if before is None:
        os.environ.pop(locks.LOCK_DIR_ENV, None)
    else:
        os.environ[locks.LOCK_DIR_ENV] = before


def pytest_collection_modifyitems(session, config, items):
    """Where any test collected needs the kits' environments, start building them now (see _env_builds), and
    run the modules that need none first, so that a fresh clone's builds overlap them, and those that read the
    suite's certificates last, so that their batches (_certificates_ahead) overlap the rest. A module stays
    whole (its module-scoped fixtures are set up once) and keeps its place within its group (the sort is
    stable)."""
    needs_env = {item.nodeid.split("::")[0] for item in items if "kit_python" in item.fixturenames}
    if needs_env:
        config.stash[_BUILDS] = {fw: _POOL.submit(envs.build, ENVS, envs.lock_name(fw, "cpu"), lambda _line: None)
                                 for fw in FRAMEWORKS}
    config.stash[_CERTIFICATES] = {name for item in items for name in ("certified", "certified_jax")
                                   if name in item.fixturenames}
    reads = {item.nodeid.split("::")[0] for item in items if {"certified", "certified_jax"} & set(item.fixturenames)}
    # last: the modules that read the background certificates (_certificates_ahead), which take a while
    items.sort(key=lambda item: (item.nodeid.split("::")[0] in needs_env, item.nodeid.split("::")[0] in reads))


def pytest_configure(config):
    """A per-user cache of the suite's own, so that what a test makes (certificates) it makes here, whatever an
    earlier run left in the user's cache; its envs/ is the user's, shared: an env is a pure function of its lock."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return                                  # xdist's workers share the one their controller made
    folder = Path(tempfile.mkdtemp(prefix="suite-cache-"))
    ENVS.mkdir(parents=True, exist_ok=True)
    (folder / "envs").symlink_to(ENVS, target_is_directory=True)
    config.stash[_CACHE] = folder, os.environ.get("REPROKIT_CACHE")
    os.environ["REPROKIT_CACHE"] = str(folder)


def pytest_unconfigure(config):
    _AHEAD.shutdown(wait=True, cancel_futures=True)
    _POOL.shutdown(wait=True)
    if _CACHE not in config.stash:
        return
    folder, before = config.stash[_CACHE]
    shutil.rmtree(folder, ignore_errors=True)
    if before is None:
        os.environ.pop("REPROKIT_CACHE", None)
    else:
        os.environ["REPROKIT_CACHE"] = before


_CACHE = pytest.StashKey[tuple]()


# Every kit's environment, built from its lock file once, side by side and from the session's start:
# a fresh clone's pip installs (mostly disk and network) overlap each other and the first tests.
_POOL = ThreadPoolExecutor(max_workers=len(FRAMEWORKS), thread_name_prefix="env-build")
_BUILDS = pytest.StashKey[dict]()


@pytest.fixture(scope="session")
def _env_builds(request):
    return request.config.stash[_BUILDS]


@pytest.fixture(scope="session")
def kit_python(_env_builds):
    """The interpreter of each framework's real environment (a build that failed fails the test that needs it)."""
    def get(framework: str) -> Path:
        return _env_builds[framework].result()
    return get


@pytest.fixture
def tiny_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "experiments"
    folder.mkdir()
    (folder / "tiny.toml").write_text(TINY)
    return folder


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("data")


def tiny_specs(folder: Path, data_dir: Path, profile: str = "quick", edit=None) -> dict[str, dict]:
    """RunSpecs of the tiny experiment by framework; edit(spec) may change a spec before its id is set."""
    exp = load(folder / "tiny.toml")
    opts = Options(profile=profile, device="cpu", repeats=1, frameworks=("pytorch", "tensorflow"),
                   data=data_step.Preparing(data_dir, allow_download=False))
    out = {}
    for planned in specs_for(exp, opts, lambda fw: {"lock": None, "lock_sha256": None, "image": None}, code()):
        spec = planned.to_dict()                 # as a runner writes it for the kit
        if edit:
            edit(spec)
        out[spec["framework"]] = spec
    return out


def write_spec(tmp_path: Path, spec: dict) -> Path:
    path = tmp_path / f"{spec['framework']}-spec.json"
    path.write_text(json.dumps(spec))
    return path


@pytest.fixture(scope="session")
def posted_data(kit_python, tmp_path_factory) -> Path:
    """A data dir holding small CIFAR-10 archives in both official formats (the same generated images),
    the kit's .npz, the batches torchvision reads and TFDS's cifar10 made by the kit's data step."""
    import cifar10_files

    from reprokit.environments import datasets
    folder = tmp_path_factory.mktemp("posted-data")
    batches = cifar10_files.images(per_batch=16)
    archive = cifar10_files.write_python_archive(folder, batches)
    cifar10_files.write_binary_archive(folder, batches)
    with pytest.MonkeyPatch.context() as patch:        # the small archive stands in for the official one
        patch.setattr(datasets, "CIFAR10_MD5", cifar10_files.md5(archive))
        datasets.prepare({"dataset": "cifar10", "train_samples": None, "test_samples": None, "seed": 0}, folder,
                         allow_download=False)
        datasets.cifar10_batches(folder, allow_download=False)
    cifar10_files.prepare_tfds(kit_python("tensorflow"), folder)
    return folder


NVIDIA_SMI_CAPTURES = Path(__file__).parent / "fixtures" / "nvidia_smi"


@pytest.fixture
def nvidia_smi_replay(tmp_path, monkeypatch):
    """Put a stand-in nvidia-smi on PATH that answers from one recorded capture (see its SOURCES.md)."""
    from reprokit.kits.framework_free import nvidia_smi

    bin_dir = tmp_path / "replay-bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(NVIDIA_SMI_CAPTURES / "replay")

    def use(capture: str) -> Path:
        monkeypatch.setenv("NVIDIA_SMI_REPLAY", str(NVIDIA_SMI_CAPTURES / capture))
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
        nvidia_smi._known.cache_clear()         # each capture is another driver
        return NVIDIA_SMI_CAPTURES / capture

    yield use
    nvidia_smi._known.cache_clear()


# The suite's real-kit certificates (tests/certified.py) are made in the background from the session's first
# test, both batches at once, each in a process of its own (one kit process at a time), at the lowest CPU
# priority: they take what the tests in front leave idle, and are read last. A batch whose reads are unchanged
# since a run kept it is taken from the per-user cache (tests/batch_cache.py).
_AHEAD = ThreadPoolExecutor(max_workers=2, thread_name_prefix="certificates")
_CERTIFICATES = pytest.StashKey[set]()


def _make_batch(batch: str, builds: dict, root: Path, data_dir: Path) -> Path:
    for build in builds.values():
        build.result()                          # the kits' environments first
    import batch_cache
    out, log = root / "made.json", root / "batch.log"
    with (root / "batch.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # under xdist the first worker makes it; the others wait, then read it
        if not out.exists() and not batch_cache.lookup(batch, root, out, data_dir):
            _run_batch(batch, root, data_dir, out, log)
            batch_cache.store(batch, root, out, root / "read", data_dir)
    return out


def _run_batch(batch: str, root: Path, data_dir: Path, out: Path, log: Path) -> None:
    import batch_cache
    (root / "read").mkdir()
    with log.open("w") as sink:
        done = subprocess.run(["nice", "-n", "19", sys.executable, str(Path(__file__).with_name("certified.py")),
                               batch, str(root), str(data_dir), str(out)], cwd=REPO, stdout=sink,
                              stderr=subprocess.STDOUT, env={
                                  **os.environ, batch_cache.RECORD_ENV: str(root / "read"),
                                  "PYTHONPATH": os.pathsep.join([str(batch_cache.RECORDER), str(Path(__file__).parent),
                                                                 str(REPO)])})
    if done.returncode != 0:
        raise RuntimeError(f"the {batch} batch failed (exit {done.returncode}): {log.read_text()[-3000:]}")


def _shared_folder(tmp_path_factory, name: str) -> Path:
    """A folder every xdist worker of this run finds (their base folders share a parent), else the session's own."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / f"shared-{name}"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session", autouse=True)
def _certificates_ahead(request, tmp_path_factory, data_dir) -> dict:
    """The certificate batches some collected test needs, started now; their futures by fixture name."""
    wanted = request.config.stash.get(_CERTIFICATES, set())
    if not wanted:
        return {}
    builds = request.getfixturevalue("_env_builds")
    return {name: _AHEAD.submit(_make_batch, name, builds, _shared_folder(tmp_path_factory, name), data_dir)
            for name in sorted(wanted)}


@pytest.fixture(scope="session")
def certified(_certificates_ahead, kit_python):
    """Every real-kit certificate of the suite (tests/certified.py), made once, in one process per framework."""
    import certified as batch
    return batch.read_made(_certificates_ahead["certified"].result(), "certified")


@pytest.fixture(scope="session")
def certified_jax(_certificates_ahead, kit_python):
    """The JAX_CONTROLS pairs, PyTorch against JAX, certified once, one PyTorch and one JAX process for all."""
    import certified as batch
    return batch.read_made(_certificates_ahead["certified_jax"].result(), "certified_jax")


@pytest.fixture
def stand_in_gpu_host(tmp_path, monkeypatch):
    """stand_in_gpu_host(driver="580.95.05", gpus=4, models=()): a stand-in nvidia-smi on PATH for a host with four
    H200s (or ``gpus``, half per NUMA node, each named by ``models`` where given: tests/gpu_host.py), fake GPU slots
    off."""
    import gpu_host

    from reprokit.environments import topology
    from reprokit.kits.framework_free import nvidia_smi

    def use(driver: str = "580.95.05", gpus: int = 4, models: tuple[str, ...] = ()) -> None:
        folder = tmp_path / "gpu-host"
        folder.mkdir(exist_ok=True)
        gpu_host.install(folder, monkeypatch, driver, gpus, models)
        monkeypatch.delenv(topology.FAKE_SLOTS_ENV, raising=False)
        nvidia_smi._known.cache_clear()          # this stand-in lists no fields: the first names are asked for

    yield use
    nvidia_smi._known.cache_clear()
