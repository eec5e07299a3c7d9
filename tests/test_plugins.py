"""Frameworks plug in through the reprokit.frameworks entry-point group (reprokit/kits/contract/plugins.py): the host reads
the group, a kit process in an environment without the plugin gets each one from the host, and a plugin that fails
to load is named in one sentence while the other frameworks work. The numpy stub (tests/stub_plugin/) is the
installed plugin; the broken ones are distributions written here, as pip leaves them."""
from __future__ import annotations

import json
import subprocess
import sys

import plugin_site
import pytest
from checkout import REPO

from reprokit.kits.contract import plugins

SHOW = ("import json; from reprokit.kits.contract import names; "
        "print(json.dumps({'frameworks': names.FRAMEWORKS, 'broken': names.BROKEN}))")


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def test_a_kit_process_without_the_plugin_installed_gets_it_from_the_host():
    """The environment the runners give a kit process (names.plugin_environment): a process whose path holds the
    kits alone, as in a locked environment or an image, registers the stub from its folder and imports its kit,
    and the host's folder of installed packages stays off its path."""
    host = _python("import json; from reprokit.kits.contract import names; print(json.dumps(names.plugin_environment()))",
                   plugin_site.env())
    assert host.returncode == 0, host.stderr
    passed = json.loads(host.stdout)
    entries = json.loads(passed[plugins.PLUGINS_ENV])
    assert [(e["name"], e["value"], e["dist"]) for e in entries] == [
        ("stub", "reprokit_stub_kit:FRAMEWORK", "reprokit-stub-kit 0.1.0"),
        ("stub2", "reprokit_stub_kit:TWIN", "reprokit-stub-kit 0.1.0")]
    assert {e["path"] for e in entries} == {str(plugin_site.SITE / "reprokit_stub_kit")}
    kit = _python("import importlib, sys; from reprokit.kits.contract import names; "
                  "print(names.FRAMEWORKS, importlib.import_module(names.kit_module('stub', 'backend')).Backend.name, "
                  f"any({str(plugin_site.SITE)!r} in p for p in sys.path))",
                  {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **passed})
    assert kit.returncode == 0, kit.stderr
    assert kit.stdout.split() == ["('pytorch',", "'tensorflow',", "'jax',", "'stub',", "'stub2')", "stub", "False"]


BROKEN = {
    "import": ("broken_entry:FRAMEWORK", "import numpyy\n", "ModuleNotFoundError: No module named 'numpyy'"),
    "form": ("broken_entry", "", "ValueError: 'broken_entry' is not module:attr"),
    "kind": ("broken_entry:FRAMEWORK", "FRAMEWORK = 3\n",
             "TypeError: it holds 3, not a reprokit.kits.contract.names.Framework"),
    "again": ("broken_entry:FRAMEWORK", "from reprokit.kits.contract.names import Framework\n"
              "FRAMEWORK = Framework('pytorch', 'Torch again', 'broken_kit', '#000000')\n",
              "ValueError: it registers 'pytorch' again"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_plugin_that_fails_to_load_is_one_sentence_and_the_others_work(case, tmp_path):
    value, module, why = BROKEN[case]
    (tmp_path / "broken_entry.py").write_text(module)
    plugin_site.register(tmp_path, "broken-kit", {"broken": value})
    got = _python(SHOW, plugin_site.env(tmp_path))
    assert got.returncode == 0, got.stderr
    shown = json.loads(got.stdout)
    assert shown["frameworks"] == ["pytorch", "tensorflow", "jax", "stub", "stub2"]
    assert shown["broken"] == [f"the framework plugin 'broken' ({value}, from broken-kit 0.1) did not load ({why}), "
                               f"so its frameworks are left out; fix it or uninstall it (pip uninstall broken-kit)."]


def test_the_cli_names_a_broken_plugin_once_and_plans_the_other_frameworks(tmp_path):
    (tmp_path / "broken_entry.py").write_text("import numpyy\n")
    plugin_site.register(tmp_path, "broken-kit", {"broken": "broken_entry:FRAMEWORK"})
    proc = subprocess.run([sys.executable, "-m", "reprokit", "reproduce", "--dry-run", "--backend", "local", "--only",
                           "simplecnn_cifar10_memory", "--variants", "fixed", "--claims", "none", "--state-dir",
                           str(tmp_path / "state"), "--reports-dir", str(tmp_path / "reports")],
                          cwd=tmp_path, env=plugin_site.env(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [
        "warning: the framework plugin 'broken' (broken_entry:FRAMEWORK, from broken-kit 0.1) did not load "
        "(ModuleNotFoundError: No module named 'numpyy'), so its frameworks are left out; fix it or uninstall it "
        "(pip uninstall broken-kit)."]
    planned = {line.split("simplecnn_cifar10_memory")[1].split()[0] for line in proc.stdout.splitlines()
               if " simplecnn_cifar10_memory " in line}
    assert planned == {"pytorch", "tensorflow"}


def test_a_kit_process_is_given_the_hosts_list_and_never_scans_its_own_environment():
    """Without plugins the host still passes its list, empty: reading the entry points of an environment that has
    torch costs a kit process a quarter of a second at every start."""
    host = _python("import json; from reprokit.kits.contract import names; print(json.dumps(names.plugin_environment()))",
                   {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert json.loads(host.stdout) == {plugins.PLUGINS_ENV: "[]"}
    kit = _python("import sys; from reprokit.kits.contract import names; print(names.FRAMEWORKS, 'importlib.metadata' in "
                  "sys.modules)", {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), plugins.PLUGINS_ENV: "[]"})
    assert kit.stdout.split() == ["('pytorch',", "'tensorflow',", "'jax')", "False"], kit.stderr


CONTAINER = """
import json, sys
from pathlib import Path
from reprokit.runners.base import KitCall
from reprokit.runners.make import make
folder = Path(sys.argv[1])
runner = make("docker", data_dir=folder, device="cpu", pinned_images={"stub": "reprokit/stub:test"})
config = runner.container_config(KitCall("stub", "reprokit.kits.run", (), output=folder / "out"), "label")
print(json.dumps({"mounts": [(m["Source"], m["Target"], m["ReadOnly"]) for m in config["mounts"]],
                  "environment": config["environment"]}))
"""


def test_a_container_sees_each_plugin_read_only_and_loads_it_from_there(tmp_path):
    """The Docker runner mounts each plugin's package folder read-only under /opt/reprokit/plugins/ and names it there
    in the environment the container's kit reads (no engine is asked: the image is pinned)."""
    proc = subprocess.run([sys.executable, "-c", CONTAINER, str(tmp_path)], cwd=REPO, env=plugin_site.env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = json.loads(proc.stdout)
    package = str(plugin_site.SITE / "reprokit_stub_kit")
    assert [package, "/opt/reprokit/plugins/0/reprokit_stub_kit", True] in config["mounts"]
    passed = json.loads(config["environment"][plugins.PLUGINS_ENV])
    assert {p["path"] for p in passed} == {"/opt/reprokit/plugins/0/reprokit_stub_kit"}
