"""The house's arrows, read from the imports themselves (ast), so a shortcut fails here, not in review."""
from __future__ import annotations

import ast
from pathlib import Path

from kits.common.names import REGISTRY

REPO = Path(__file__).resolve().parents[1]


def _modules(root: str) -> dict[str, Path]:
    out = {}
    for path in sorted((REPO / root).rglob("*.py")):
        if "experiments" in path.parts or "__pycache__" in path.parts:
            continue
        parts = path.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(path: Path, modules: dict | None = None) -> set[str]:
    """Every module a file imports, at module level or anywhere (in a function, under TYPE_CHECKING). ``from a
    import b`` counts a.b where that is one of ``modules``, else a."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            subs = {f"{node.module}.{a.name}" for a in node.names}
            known = {m for m in subs if modules is not None and m in modules}
            out |= known if known == subs else {node.module, *subs}
    return out


def test_the_kits_import_nothing_of_the_host():
    """The kits run inside the images, where only kits/ is mounted."""
    for name, path in _modules("kits").items():
        host = {m for m in _imports(path) if m.split(".")[0] == "reprokit"}
        assert not host, f"{name} imports {sorted(host)}"


def test_a_frameworks_kit_is_reached_only_through_the_registry():
    """kits/*.py and kits/common name no framework's package: they look it up (names.kit_module), so a new
    framework is its folder and its registry entry."""
    packages = {fw.package for fw in REGISTRY.values()}
    for name, path in _modules("kits").items():
        own = next((p for p in packages if name.startswith(p)), None)
        reached = {m for m in _imports(path) if any(m.startswith(p) for p in packages - {own})}
        assert not reached, f"{name} imports {sorted(reached)}"


def test_the_host_modules_import_no_cycle():
    """Imports inside functions count: a lazy import hides a cycle from Python, not from the reader."""
    modules = _modules("reprokit")
    graph = {name: {m for m in _imports(path, modules=modules) if m in modules and m != name}
             for name, path in modules.items()}
    done: set[str] = set()

    def visit(node: str, trail: list[str]) -> None:
        assert node not in trail, "import cycle: " + " -> ".join([*trail[trail.index(node):], node])
        if node in done:
            return
        for nxt in graph[node]:
            visit(nxt, [*trail, node])
        done.add(node)

    for name in graph:
        visit(name, [])


MAX_LINES = 450


def test_no_module_is_over_the_size_a_reader_holds():
    """A module does one job; past 450 lines it has begun another (split by the jobs, not the count)."""
    paths = [p for root in ("reprokit", "kits", "scripts", "faults") for p in (REPO / root).rglob("*")
             if p.is_file() and "__pycache__" not in p.parts
             and (p.suffix == ".py" or (not p.suffix and p.read_bytes().startswith(b"#!/usr/bin/env python")))]
    long = {str(p.relative_to(REPO)): n for p in paths if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert len(paths) > 100 and not long, long


def test_only_the_door_reads_the_command_line():
    """The CLI turns argparse's namespace into a typed Request (reprokit/plan/request.py); nothing below reads it.
    images.py keeps its own small command (`python -m reprokit.environments.images`)."""
    allowed = {"reprokit.cli", "reprokit.plan.request", "reprokit.environments.images"}
    for name, path in _modules("reprokit").items():
        if "argparse" in _imports(path):
            assert name in allowed, f"{name} imports argparse"


def test_one_factory_builds_the_runners():
    for name, path in _modules("reprokit").items():
        if name in ("reprokit.runners.make", "reprokit.runners.docker", "reprokit.runners.local"):
            continue
        built = [n.func.id if isinstance(n.func, ast.Name) else n.func.attr for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))
                 and (n.func.id if isinstance(n.func, ast.Name) else n.func.attr) in ("DockerRunner", "LocalRunner")]
        assert not built, f"{name} builds {built} itself; use reprokit.runners.make"


# The host's packages from the bottom up: each imports only from those before it (and itself), so data flows
# one way: results are read by everything; a plan is pure (no runner, no executor, no data step: it reads the data
# through a port, reprokit/plan/inputs.py); execute wires the plan to the runners and runs it
# (reprokit/execute/compose.py); the report only reads. locking (a lock between processes) is at the bottom: the
# environments' builds and the executors' devices use it. gpu_check (scripts/gpu_check's check) runs the CLI's own
# commands, so it sits above cli.
LAYERS = ("locking", "errors", "console", "results", "claims", "environments", "plan", "runners", "execute", "certify",
          "report", "bisect", "cli", "gpu_check", "__main__")


def test_the_host_packages_import_only_downwards():
    modules = _modules("reprokit")
    for name, path in modules.items():
        parts = name.split(".")
        if len(parts) == 1:
            continue                            # reprokit/__init__.py
        mine = LAYERS.index(parts[1])
        for target in _imports(path, modules=modules):
            tparts = target.split(".")
            if tparts[0] != "reprokit" or len(tparts) < 2 or tparts[1] == parts[1]:
                continue
            assert LAYERS.index(tparts[1]) < mine, f"{name} imports {target}: {tparts[1]} is not below {parts[1]}"


def test_every_host_module_is_in_a_layer():
    for name in _modules("reprokit"):
        parts = name.split(".")
        assert len(parts) == 1 or parts[1] in LAYERS, f"{name} belongs to no layer of LAYERS"
