"""A state folder that fills up mid-matrix, on a real small file system (a tmpfs mounted for the test): the run that
could not be written is named lost (disk-full), no finished result is damaged, the command stops in one sentence with
how much the rest needs, and once there is room the same command finishes the matrix."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import stub_matrix as sm

RUNS = 8

pytestmark = pytest.mark.alone


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs, unmounted at the end whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    folder = tmp_path / "small"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def _fill(folder: Path, leave: int) -> Path:
    """A file that takes all but ``leave`` bytes of the file system."""
    stat = os.statvfs(folder)
    filler = folder / "filler"
    filler.write_bytes(b"\0" * max(0, stat.f_bavail * stat.f_frsize - leave))
    return filler


def test_a_full_state_folder_loses_one_run_and_stops_in_one_sentence(tmp_path, small_disk):
    exp = sm.experiment(tmp_path / "exp")
    state = small_disk / "state"
    cmd = sm.command(tmp_path, exp, state, repeats=RUNS)
    filler = _fill(small_disk, leave=160 * 1024)         # room for a few runs (each about 40 KB with its folders)
    full = sm.run(cmd)
    kept = sm.stored(state)                              # every result on the full disk parses and passes its schema
    assert full.returncode == 2, full.stdout[-2000:] + full.stderr[-2000:]
    lost = re.findall(r"run ([0-9a-f]{16}) \(tiny / stub / fixed r\d\): lost \(disk-full: ", full.stderr)
    assert len(lost) == 1, full.stderr
    assert lost[0] not in kept or kept[lost[0]]["failure"]["kind"] == "disk-full"
    finished = [r for r in kept.values() if r["status"] == "ok"]
    assert 1 <= len(finished) < RUNS
    sentence = [line for line in full.stderr.splitlines() if line.startswith("error: ")]
    assert len(sentence) == 1 and "Traceback" not in full.stderr, full.stderr
    left = RUNS - len(finished)
    assert re.fullmatch(rf"error: {re.escape(str(state))} is full: the {left} run\(s\) left need about (\d+ kB|\d+\.\d MB) "
                        r"more \(from the sizes of the finished results and their work folders\); free space there "
                        r"and run the same command again\.", sentence[0]), sentence[0]
    filler.unlink()                                      # room again: the same command finishes the matrix
    again = sm.run(cmd)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert f"{len(finished)} already finished, {left} to run" in again.stdout
    assert sum(r["status"] == "ok" for r in sm.stored(state).values()) == RUNS


def test_a_full_report_folder_keeps_the_results_and_says_what_the_report_needs(tmp_path, small_disk):
    exp = sm.experiment(tmp_path / "exp")
    state = tmp_path / "state"
    cmd = [*sm.command(tmp_path, exp, state, repeats=2), "--reports-dir", str(small_disk)]   # the last one counts
    _fill(small_disk, leave=4 * 1024)
    full = sm.run(cmd)
    assert full.returncode == 2 and "Traceback" not in full.stderr, full.stdout[-2000:] + full.stderr[-2000:]
    assert re.search(rf"^error: {re.escape(str(small_disk))} is full: the report t needs at least \d+ kB .*free space "
                     rf"there and run the same command again \(the finished runs are kept in {re.escape(str(state))}"
                     r"/results\)\.$", full.stderr, re.M), full.stderr
    assert [r["status"] for r in sm.stored(state).values()] == ["ok", "ok"]
