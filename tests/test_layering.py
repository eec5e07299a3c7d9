"""The house's arrows, read from the imports themselves (ast), so a shortcut fails here, not in review."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

from reprokit.kits.contract.names import BUILTIN, REGISTRY

REPO = Path(__file__).resolve().parents[1]
KITS = "reprokit.kits"          # the kit side, reprokit/kits/; the host is the rest of reprokit/


def _modules(root: str) -> dict[str, Path]:
    out = {}
    for path in sorted((REPO / root).rglob("*.py")):
        if "experiments" in path.parts or "__pycache__" in path.parts:
            continue
        parts = path.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _in_kits(module: str) -> bool:
    return module == KITS or module.startswith(KITS + ".")


def _host_modules() -> dict[str, Path]:
    """The host's modules: reprokit/ less its kits."""
    return {name: path for name, path in _modules("reprokit").items() if not _in_kits(name)}


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
    """The kits run inside the images, where only reprokit/kits/ is mounted (in the namespace package reprokit):
    not even reprokit/__init__.py is there."""
    kits = _modules("reprokit/kits")
    for name, path in kits.items():
        host = {m for m in _imports(path, modules=kits) if m.split(".")[0] == "reprokit" and not _in_kits(m)}
        assert not host, f"{name} imports {sorted(host)}"


def test_the_package_itself_imports_nothing():
    """A kit process imports reprokit.kits, and so reprokit/__init__.py, in a framework's environment, which has
    none of the host's dependencies."""
    tree = ast.parse((REPO / "reprokit" / "__init__.py").read_text())
    imports = [node.lineno for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert not imports, f"reprokit/__init__.py imports on line(s) {imports}"


def test_a_frameworks_kit_is_reached_only_through_the_registry():
    """reprokit/kits/*.py and the shared packages name no framework's package: they look it up (names.kit_module),
    so a new framework is its folder and its registry entry."""
    packages = {fw.package for fw in REGISTRY.values()}
    for name, path in _modules("reprokit/kits").items():
        own = next((p for p in packages if name.startswith(p)), None)
        reached = {m for m in _imports(path) if any(m.startswith(p) for p in packages - {own})}
        assert not reached, f"{name} imports {sorted(reached)}"


# What the host may import of reprokit/kits/: the contract (spec types, names, pitfalls, settings keys, the result's
# head) and the framework-free code both sides run (arithmetic, parting, the certificate's checks, datasets' files).
HOST_SIDE_OF_KITS = (f"{KITS}.contract", f"{KITS}.framework_free")


def _kits_imported(path: Path) -> set[str]:
    return {m for m in _imports(path) if _in_kits(m)}


def test_the_host_reaches_the_kits_through_the_contract_and_the_framework_free_code():
    """Imports in functions and under TYPE_CHECKING count: a type is an arrow too. The host's scripts, the fault
    suite and the benchmarks are host code as well."""
    paths = [*_host_modules().values(), *_modules("faults").values(), *_modules("benchmarks").values(),
             *(p for p in (REPO / "scripts").iterdir() if p.suffix == ".py"
               or (p.is_file() and not p.suffix and p.read_bytes().startswith(b"#!/usr/bin/env python")))]
    assert len(paths) > 100
    for path in paths:
        beyond = {m for m in _kits_imported(path) if not m.startswith(HOST_SIDE_OF_KITS)}
        assert not beyond, f"{path.relative_to(REPO)} imports {sorted(beyond)}: the host's side is {HOST_SIDE_OF_KITS}"


# The kits' shared packages from the bottom up, each reading only those before it: the contract stands alone, the
# framework-free code reads the contract, so the host loads no kit's training loop or measurement through them.
KIT_LAYERS = tuple(f"{KITS}.{package}" for package in ("contract", "framework_free", "measurement", "training_loop",
                                                         "served_data", "observation"))


def test_the_kits_shared_packages_import_only_downwards():
    for i, package in enumerate(KIT_LAYERS):
        modules = _modules(package.replace(".", "/"))
        assert modules
        for name, path in modules.items():
            beyond = {m for m in _kits_imported(path) if not m.startswith(KIT_LAYERS[:i + 1])}
            assert not beyond, f"{name} imports {sorted(beyond)}: above {package}"


def test_a_data_layer_imports_its_library_only_where_it_serves_it():
    """reprokit/kits/served_data serves each library's datasets wherever the library is importable, whatever the
    framework (torchvision in a JAX run): so, unlike a framework's kit, its modules name other frameworks' libraries, and
    only inside their functions, which run once the script has imported the library. At module level they read
    the standard library, numpy and the kits' own packages alone: the package is imported in every environment."""
    modules = _modules("reprokit/kits/served_data")
    assert modules
    for name, path in modules.items():
        top = [node for node in ast.parse(path.read_text()).body if isinstance(node, (ast.Import, ast.ImportFrom))]
        named = {a.name if isinstance(node, ast.Import) else node.module or "" for node in top for a in node.names}
        beyond = {m for m in named if m.split(".")[0] not in (*sys.stdlib_module_names, "numpy", "__future__")
                  and not _in_kits(m)}
        assert not beyond, f"{name} imports {sorted(beyond)} at module level: import a library inside the function " \
                           f"that serves it"


def test_the_host_modules_import_no_cycle():
    """Imports inside functions count: a lazy import hides a cycle from Python, not from the reader."""
    modules = _host_modules()
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


# The host files that may name a framework: those that map each framework's own settings (tuned's, and the
# settings a certificate declares apart), and the GPU check, which drives PyTorch's posted scripts (and JAX where
# the device has it) on a device that carries them. Elsewhere the host reaches a framework through the registry.
NAMING_FRAMEWORKS = ("reprokit/plan/tuning.py", "reprokit/certify/differences.py", "reprokit/gpu_check/")


def test_outside_the_registry_the_host_names_no_framework():
    """A string that is a built-in framework's name, docstrings aside: a fourth framework then touches no host file."""
    named = {fw.name for fw in BUILTIN}
    for path in _host_modules().values():
        rel = str(path.relative_to(REPO))
        if rel.startswith(NAMING_FRAMEWORKS):
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        found = sorted({n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in named
                        and id(n) not in docs})
        assert not found, f"{rel} names a framework on line(s) {found}; read it from the registry"


MAX_LINES = 450


def test_no_module_is_over_the_size_a_reader_holds():
    """A module does one job; past 450 lines it has begun another (split by the jobs, not the count)."""
    paths = [p for root in ("reprokit", "scripts", "faults") for p in (REPO / root).rglob("*")
             if p.is_file() and "__pycache__" not in p.parts
             and (p.suffix == ".py" or (not p.suffix and p.read_bytes().startswith(b"#!/usr/bin/env python")))]
    long = {str(p.relative_to(REPO)): n for p in paths if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert len(paths) > 100 and not long, long


def test_only_the_door_reads_the_command_line():
    """The CLI turns argparse's namespace into a typed Request (reprokit/plan/request.py); nothing below reads it.
    images.py keeps its own small command (`python -m reprokit.environments.images`)."""
    allowed = {"reprokit.cli", "reprokit.plan.request", "reprokit.environments.images"}
    for name, path in _host_modules().items():
        if "argparse" in _imports(path):
            assert name in allowed, f"{name} imports argparse"


def test_one_factory_builds_the_runners():
    for name, path in _host_modules().items():
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
# environments' builds and the executors' devices use it; resources (where the kit's own files are) is read by all. gpu_check (scripts/gpu_check's check) runs the CLI's own
# commands, so it sits above cli.
LAYERS = ("locking", "errors", "resources", "console", "results", "claims", "environments", "places", "plan", "runners",
          "execute", "certify", "report", "bisect", "doctor", "cli", "gpu_check", "__main__")


def test_the_host_packages_import_only_downwards():
    """Of the kits, the host reads only what HOST_SIDE_OF_KITS allows, whatever its layer."""
    modules = _host_modules()
    for name, path in modules.items():
        parts = name.split(".")
        if len(parts) == 1:
            continue                            # reprokit/__init__.py
        mine = LAYERS.index(parts[1])
        for target in _imports(path, modules=modules):
            tparts = target.split(".")
            if tparts[0] != "reprokit" or len(tparts) < 2 or tparts[1] == parts[1] or _in_kits(target):
                continue
            assert LAYERS.index(tparts[1]) < mine, f"{name} imports {target}: {tparts[1]} is not below {parts[1]}"


def test_every_host_module_is_in_a_layer():
    for name in _host_modules():
        parts = name.split(".")
        assert len(parts) == 1 or parts[1] in LAYERS, f"{name} belongs to no layer of LAYERS"
