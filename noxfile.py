"""The project's verbs: `nox -l` lists them, `nox -s NAME` runs one."""
from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]
# Sessions run on the interpreter nox itself runs on (3.11 or newer): the
# lock files carry every platform's hashes, so no particular minor version is needed.


def _host(session: nox.Session, *extra: str, ray: bool = False, test: bool = False) -> None:
    # Ray goes in the host environment only (the [ray] extra), never in the kit images.
    extras = ",".join(name for name, wanted in (("ray", ray), ("test", test)) if wanted)
    session.install("-e", f".[{extras}]" if extras else ".", *extra)


@nox.session
def reproduce(session: nox.Session) -> None:
    """Run both seed experiments in PyTorch and TensorFlow and write reports/<name>/report.md.

    Uses Docker with the pinned images where an engine answers, else local
    virtualenvs built from locks/. Pass options after --, e.g.
    `nox -s reproduce -- --profile quick --backend local` (see `-- --help`).
    `--backend ray --ray-address HOST:PORT` runs on a Ray cluster (Ray is installed for it).
    The clone's reports go to reports/ (an installed `reprokit` writes ./reprokit-reports/); a --reports-dir after
    -- still wins.
    """
    _host(session, ray="ray" in session.posargs)
    session.run("python", "-m", "reprokit", "reproduce", "--reports-dir", "reports", *session.posargs)


@nox.session
def data(session: nox.Session) -> None:
    """The separate data step (may use the network): CIFAR-10, and TFDS's cifar10 for the posted TensorFlow input;
    or, named (`nox -s data -- mnist fashion_mnist cifar100`), the datasets a script loads by name, checked against
    their published md5s."""
    _host(session)
    session.run("python", "-m", "reprokit", "data", *session.posargs)


@nox.session
def bisect(session: nox.Session) -> None:
    """The smallest set of declared settings that moves a ratio across its threshold: `nox -s bisect -- --help`."""
    _host(session)
    session.run("python", "-m", "reprokit", "bisect", *session.posargs)


@nox.session
def compare(session: nox.Session) -> None:
    """Compare two result sets (report folders), B against A: `nox -s compare -- reports/A reports/B`."""
    _host(session)
    session.run("python", "-m", "reprokit", "compare", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite: real frameworks, real files, a real Docker engine and a local Ray cluster.

    With no options: the tests that share the host run on every core (pytest-xdist, up to 4 workers, a module
    per worker at a time), then those marked `alone` or `docker` one at a time (they send signals, watch /tmp
    and the mounts, kill the engine or run a Ray cluster). Options after -- go to one plain pytest run.
    """
    _host(session, ray=True, test=True)
    # The numpy stub framework, a plugin package, into a folder of this environment that is not on its path: only the
    # tests that put it there see it registered (tests/plugin_site.py).
    session.install("--no-deps", "--no-build-isolation", "--upgrade", "--target",
                    f"{session.virtualenv.location}/reprokit-test-plugins", "./tests/stub_plugin")
    if session.posargs:
        session.run("python", "-m", "pytest", *session.posargs)
        return
    workers = str(min(4, len(os.sched_getaffinity(0))))
    session.run("python", "-m", "pytest", "-n", workers, "--dist", "loadfile", "-m", "not (alone or docker)")
    session.run("python", "-m", "pytest", "-m", "alone or docker")


@nox.session
def faults(session: nox.Session) -> None:
    """Inject each fault into a real matrix from outside and print what survived (faults/run.py).

    Signals to the orchestrator, damaged files, two commands at once, a full disk (a tmpfs: needs root),
    users' scripts that fail or fork without end, a container out of memory, an engine that refuses or
    is killed (needs Docker), a lost Ray node. One line per fault, then
    `faults survived: N of N, results lost: L`. Options after --: `--fast` (only the faults no test proves: CI),
    `--only NAME`, `--keep`.
    """
    _host(session, ray="--fast" not in session.posargs)          # Ray for the lost node only
    session.run("python", "faults/run.py", *session.posargs, env={"PYTHONPATH": "."})


@nox.session
def lint(session: nox.Session) -> None:
    """Lint and type-check: `ruff check .` over the project, then mypy on reprokit/ and kits' shared packages.

    Both take their settings from pyproject.toml ([tool.ruff], [tool.mypy]: strict module by module).
    Options after -- go to ruff, e.g. `nox -s lint -- --statistics`.
    """
    _host(session, "ruff>=0.17,<0.18", "mypy>=2.4,<2.5",
          "types-docker", "types-jsonschema", "types-requests", "types-tabulate")
    session.run("ruff", "check", ".", *session.posargs)
    # mypy's cache in the per-user cache: a fresh clone (CI's, every time) checks in seconds what did not change.
    root = session.run("python", "-c", "from reprokit.environments import cache; print(cache.root())", silent=True)
    session.run("mypy", env={"MYPY_CACHE_DIR": f"{str(root).strip()}/mypy"})


@nox.session
def images(session: nox.Session) -> None:
    """Build the pinned Docker image of each framework (only those missing); options after --."""
    _host(session)
    session.run("python", "-m", "reprokit.environments.images", "build", *session.posargs)


@nox.session
def pin(session: nox.Session) -> None:
    """Resolve the base images' digests, rewrite docker/*.Dockerfile, then the lock files (needs Docker Hub, PyPI)."""
    _host(session)
    session.run("python", "-m", "reprokit.environments.images", "pin", *session.posargs)
    session.notify("lock")


@nox.session
def lock(session: nox.Session) -> None:
    """Rewrite the hash-pinned lock files in locks/ from locks/versions.toml (needs PyPI)."""
    session.install("pip-tools>=7.4")
    session.run("python", "scripts/lock.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Measure what the kit costs on this CPU, each gate per model and framework.

    benchmarks/bench_kit_overhead.py: per framework, the kit, the kit without
    step timing and twice the fastest bare loop of the same quick-profile model take
    turns in balanced orders, in fresh processes of 5 rounds, until the
    interval of each gated median ratio over the pooled rounds is within +-2% (15
    rounds at most, 30 while kit/bare's interval holds its gate; 10-60 minutes on 2 cores). Gates: kit/bare >= 0.97
    (goal 0.99), the kit not ahead of its bare loop beyond the interval, bare/bare again (the null check) with an
    interval that covers 1; step timing on/off, what the step clock costs, printed. Then the local
    runner's per-run overhead (< 0.3 s) and a report from 1,000 result files
    (< 2 s). Then the kits at 2 stand-in devices against bare loops at 2 (a bare DDP loop under torchrun, a bare
    MirroredStrategy loop, a bare sharded JAX step), 6 rounds each: a reading, not a gate (the devices share the
    CPU's cores; options in $REPROKIT_BENCH_AT_N_ARGS). Then the probe's cost (benchmarks/bench_probe.py): per
    framework and loop kind (PyTorch's DataLoader loop, with and without workers; TensorFlow's
    tf.function loop and Keras fit; JAX's jitted loop) a script that times its own
    steps, plain and under the probe in fresh processes, 12 rounds (options in
    $REPROKIT_BENCH_PROBE_ARGS); gate: the whole step, probed against plain, its
    median at most 1% (printed with its interval, in microseconds and %, and its
    CPU time beside it), and the probe's own code, its bracket's top at most 1%. Options after --, e.g.
    `nox -s bench -- --max-rounds 9 --frameworks pytorch`. Where a Docker engine
    answers it also runs benchmarks/bench_docker_overhead.py (its options in
    $REPROKIT_BENCH_DOCKER_ARGS, default `--runs 5`). Every (experiment,
    framework) pair a kit can run is measured; each it cannot is named, with why.

    `nox -s bench -- --small`: the form the test suite runs (tests/test_bench_small.py), in
    under a minute: each part of bench_kit_overhead.py once, on the first framework's cheapest
    model, a round of 3 steps; printed, not judged. The probe's and Docker's benches stay out.

    `nox -s bench -- --ray [options]` measures the Ray backend instead, on a
    local cluster (benchmarks/bench_ray.py): the scheduling overhead per run
    (target < 0.5 s) and the speed-up of 12 quick runs on 2 slots (target >= 1.7).
    """
    import os
    import shlex

    env = {"PYTHONPATH": "."}
    if session.posargs[:1] == ["--ray"]:
        _host(session, ray=True, test=True)        # the bench uses the tests' cluster and experiment
        session.run("python", "benchmarks/bench_ray.py", *session.posargs[1:], env=env)
        return
    _host(session)
    if "--small" in session.posargs:
        session.run("python", "benchmarks/bench_kit_overhead.py", *session.posargs, env=env)
        return
    try:
        session.run("python", "benchmarks/bench_kit_overhead.py", *session.posargs, env=env)
        session.run("python", "benchmarks/bench_kit_overhead.py", "--skip", "overhead,render", *shlex.split(
            os.environ.get("REPROKIT_BENCH_AT_N_ARGS", "--devices 2 --min-rounds 6 --max-rounds 6")), env=env)
        session.run("python", "benchmarks/bench_probe.py",
                    *shlex.split(os.environ.get("REPROKIT_BENCH_PROBE_ARGS", "--rounds 12")), env=env)
    finally:
        answer = session.run("python", "-c", "from reprokit.environments.host_checks import engine_status as s; "
                             "ok, why = s(); print(('yes: ' if ok else 'no: ') + why)", silent=True, env=env)
        if str(answer).strip().startswith("yes"):
            docker_args = shlex.split(os.environ.get("REPROKIT_BENCH_DOCKER_ARGS", "--runs 5"))
            session.run("python", "benchmarks/bench_docker_overhead.py", *docker_args, env=env)
        else:
            session.log(f"docker overhead bench skipped: {str(answer).strip()}")


@nox.session
def wheelhouse(session: nox.Session) -> None:
    """Wheels for an offline GPU box's host side.

    There: `pip install --no-index --find-links DIR jsonschema fastjsonschema tabulate packaging jupytext`.

    scripts/gpu_check runs the kit with the box's own Python and PyTorch (numpy comes with it); the
    host side (planning, result validation, the report) also imports jsonschema, fastjsonschema,
    tabulate, packaging and jupytext. This downloads them and their dependencies, within pyproject.toml's ranges,
    as binary wheels for the box's Python and platform, so it runs on any machine with network. matplotlib and
    scipy (about 50 MB) stay out: without them the report leaves out its plots and significance tests
    and says so; the docker SDK is not needed there (--backend local). The seeds' scripts' extra
    requirements (reprokit/kits/experiments/*/requirements-*.txt) come too. Options after --, e.g.
    `nox -s wheelhouse -- --python-version 3.12 --platform manylinux2014_x86_64 --dest DIR`
    (those are the defaults, with DIR .reprokit/wheelhouse-cp312); copy DIR to the box.
    """
    import argparse
    import re
    import tomllib

    names = ("jsonschema", "fastjsonschema", "tabulate", "packaging", "jupytext")   # jupytext: notebooks as scripts
    p = argparse.ArgumentParser(prog="nox -s wheelhouse --")
    p.add_argument("--python-version", default="3.12", help="the box's Python, X.Y (default %(default)s)")
    p.add_argument("--platform", default="manylinux2014_x86_64", help="its wheel platform (default %(default)s)")
    p.add_argument("--dest", help="the output folder (default .reprokit/wheelhouse-cpXY)")
    args = p.parse_args(session.posargs)
    dest = args.dest or f".reprokit/wheelhouse-cp{args.python_version.replace('.', '')}"
    # pyproject.toml's ranges, so the box runs the versions the host side is tested with.
    with open("pyproject.toml", "rb") as f:
        wanted = [d for d in tomllib.load(f)["project"]["dependencies"]
                  if re.match(r"[A-Za-z0-9._-]+", d).group() in names]
    if len(wanted) != len(names):
        session.error(f"pyproject.toml should declare each of {', '.join(names)}; found {wanted}")
    session.run("python", "-m", "pip", "download", "--only-binary=:all:", "--python-version", args.python_version,
                "--platform", args.platform, "--implementation", "cp", "-d", dest, *wanted)
    # and what the seeds' posted scripts import beyond their locks (seed 000's tqdm), hash-checked: gpu_check
    # points the scripts' requirements at this folder, where the box has no network
    for extra in sorted(Path("reprokit/kits/experiments").glob("*/requirements-*.txt")):
        session.run("python", "-m", "pip", "download", "--only-binary=:all:", "--no-deps", "--require-hashes",
                    "--python-version", args.python_version, "--platform", args.platform, "--implementation", "cp",
                    "-d", dest, "-r", str(extra))


@nox.session
def docs(session: nox.Session) -> None:
    """Regenerate docs/options.md from the parsers and build docs/ into site/ (git-ignored); a broken link fails.

    mkdocs.yml sets strict mode and link validation, so a warning (a missing page or anchor, a page left
    out of the nav) is an error. Options after -- go to `mkdocs build`.
    """
    _host(session, "mkdocs>=1.6,<2")
    session.run("python", "scripts/gen_options_doc.py")
    session.run("mkdocs", "build", "--strict", "--site-dir", "site", *session.posargs)
