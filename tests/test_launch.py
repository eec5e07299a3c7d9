"""reprokit/kits/launch.py, which starts every local kit process without a preexec_fn: the kit runs as `python -m` would run
it, on the CPU set it is given, and dies with the process that started it, even one killed with SIGKILL."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import stub_matrix as sm
from checkout import REPO

SEEN = textwrap.dedent("""\
    import json, os, pickle, sys

    def step():
        pass

    print(json.dumps({"argv": sys.argv, "name": __name__, "spec": __spec__.name, "path0": sys.path[0],
                      "pickled": pickle.loads(pickle.dumps(step)) is step, "cpus": sorted(os.sched_getaffinity(0)),
                      "own_session": os.getsid(0) == os.getpid()}))
    sys.exit(int(sys.argv[1]))
    """)


def _env(folder: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join((str(REPO), str(folder)))}


def _seen(folder: Path, *launch: str) -> tuple[int, dict]:
    (folder / "seen.py").write_text(SEEN)
    proc = subprocess.run([sys.executable, "-m", *launch, "seen", "3"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env=_env(folder), start_new_session=True)
    assert not proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_the_kit_runs_as_under_python_dash_m_on_the_cpus_it_is_given(tmp_path):
    code, seen = _seen(tmp_path, "reprokit.kits.launch", str(os.getpid()), "")
    assert (code, seen) == _seen(tmp_path)
    assert code == 3 and seen["name"] == "__main__" and seen["spec"] == "seen" and seen["pickled"]
    assert seen["argv"] == [str(tmp_path / "seen.py"), "3"] and seen["own_session"]
    first = min(os.sched_getaffinity(0))
    assert _seen(tmp_path, "reprokit.kits.launch", str(os.getpid()), str(first))[1]["cpus"] == [first]


def test_the_kit_dies_with_the_process_that_started_it(tmp_path):
    (tmp_path / "sleeper.py").write_text("import time\ntime.sleep(120)\n")
    starter = ("import os, subprocess, sys, time\n"
               "kit = subprocess.Popen([sys.executable, '-m', 'reprokit.kits.launch', str(os.getpid()), '', 'sleeper'])\n"
               "print(kit.pid, flush=True)\n"
               "time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", starter], cwd=REPO, stdout=subprocess.PIPE, text=True,
                              env=_env(tmp_path))
    assert parent.stdout is not None
    kit = int(parent.stdout.readline())
    try:
        sm.wait_for(lambda: "sleeper" in Path(f"/proc/{kit}/cmdline").read_text(), timeout=30)
        parent.kill()                       # armed already, or arming finds its parent gone: either way it ends
        parent.wait()
        sm.wait_for(lambda: sm.gone(kit), timeout=5)
    finally:
        if not sm.gone(kit):
            os.kill(kit, 9)
