"""Frameworks other packages add, through the ``reprokit.frameworks`` entry-point group, as pytest's plugins register
through ``pytest11``: each entry names a ``Framework`` of reprokit/kits/contract/names.py, or a sequence of them
(``name = "package.module:attr"`` in the plugin's ``[project.entry-points."reprokit.frameworks"]``).

The host reads the group from its own installation. A kit process runs in a locked environment or an image that
does not have the plugin installed, so the host passes each entry that loaded, with the folder of the plugin's
top-level package, in PLUGINS_ENV; the kit process loads that package from its folder (it never puts the folder
that holds it, the host's site-packages, on its path, where the host's own numpy would shadow the locked one). A
plugin that fails to load is named in one sentence and left out; the other frameworks work. Standard library only:
both sides import it.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypeVar

GROUP = "reprokit.frameworks"
PLUGINS_ENV = "REPROKIT_FRAMEWORK_PLUGINS"      # the host's plugins, as a kit process gets them (JSON)


class Named(Protocol):
    @property
    def name(self) -> str: ...


Entry = TypeVar("Entry", bound=Named)


@dataclass(frozen=True)
class Plugin:
    """One entry of the group: its name, its ``module:attr``, the distribution that registers it, and (once its
    module imported) the folder of its top-level package, or its top-level module's file."""
    name: str
    value: str
    dist: str
    path: str = ""

    @property
    def top(self) -> str:
        return self.value.partition(":")[0].split(".")[0]

    def said(self) -> str:
        return f"the framework plugin {self.name!r} ({self.value}{f', from {self.dist}' if self.dist else ''})"


def listed() -> list[Plugin]:
    """The plugins of this process: those the host passed (a kit process), else the group's entry points."""
    passed = os.environ.get(PLUGINS_ENV)
    if passed is not None:
        return [Plugin(**entry) for entry in json.loads(passed)]
    # imported here: a kit process, always given the host's list, never pays for it
    import importlib.metadata
    found = []
    for entry in importlib.metadata.entry_points(group=GROUP):
        dist = f"{entry.dist.name} {entry.dist.version}" if entry.dist is not None else ""
        found.append(Plugin(entry.name, entry.value, dist))
    return sorted(set(found), key=lambda p: p.name)


def _import_top(plugin: Plugin) -> None:
    """The plugin's top-level package (or module) from the folder the host gave, where this process has none."""
    if not plugin.path or plugin.top in sys.modules:
        return
    folder = plugin.path if os.path.isdir(plugin.path) else None
    origin = os.path.join(folder, "__init__.py") if folder else plugin.path
    spec = importlib.util.spec_from_file_location(plugin.top, origin,
                                                  submodule_search_locations=[folder] if folder else None)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module at {origin}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[plugin.top] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[plugin.top]
        raise


def _where(top: str) -> str:
    module = sys.modules[top]
    paths = list(getattr(module, "__path__", []))
    return paths[0] if paths else str(module.__file__)


def load(plugins: list[Plugin], kind: type[Entry], taken: set[str]) -> tuple[list[Entry], list[Plugin], list[str]]:
    """(the entries of ``kind`` the plugins give, the plugins that gave them with their paths, one sentence for each
    plugin that failed). ``taken``: the names registered already (a plugin may not register one again)."""
    entries: list[Entry] = []
    loaded: list[Plugin] = []
    broken: list[str] = []
    names = set(taken)
    for plugin in plugins:
        module, sep, attr = plugin.value.partition(":")
        try:
            if not (sep and module and attr):
                raise ValueError(f"{plugin.value!r} is not module:attr")
            _import_top(plugin)
            got: Any = getattr(importlib.import_module(module), attr)
            given = tuple(got) if isinstance(got, (list, tuple)) else (got,)
            wrong = [g for g in given if not isinstance(g, kind)]
            if wrong:
                raise TypeError(f"it holds {wrong[0]!r}, not a {kind.__module__}.{kind.__name__}")
            again = [g.name for g in given if g.name in names]
            if again:
                raise ValueError(f"it registers {again[0]!r} again")
        except Exception as exc:            # a plugin's own bug: named, and the other frameworks go on
            text = str(exc).splitlines()[0] if str(exc) else ""
            broken.append(f"{plugin.said()} did not load ({type(exc).__name__}{': ' + text if text else ''}), so "
                          f"its frameworks are left out; fix it or uninstall it"
                          f"{f' (pip uninstall {plugin.dist.split()[0]})' if plugin.dist else ''}.")
            continue
        names |= {g.name for g in given}
        entries += given
        loaded.append(Plugin(plugin.name, plugin.value, plugin.dist, plugin.path or _where(plugin.top)))
    return entries, loaded, broken


def environment(plugins: list[Plugin], where: Callable[[str], str] = str) -> dict[str, str]:
    """A kit process's environment for ``plugins`` (``where``: a path as the process sees it, e.g. inside a
    container): the host's list, an empty one too, so a kit process never scans its own environment's entry points
    (a quarter of a second where it has torch)."""
    return {PLUGINS_ENV: json.dumps([{**asdict(p), "path": where(p.path)} for p in plugins])}
