"""reprokit doctor: one screen of what the host offers and what a run would pick, and why; exit 1 where a run could
not start. The GPU hosts are a stand-in nvidia-smi (tests/gpu_host.py); the rest is this host as it is."""
from __future__ import annotations

import re

from reprokit import cli
from reprokit.environments import cache


def _doctor(capsys, tmp_path, monkeypatch) -> tuple[int, list[str]]:
    monkeypatch.chdir(tmp_path)
    code = cli.main(["doctor"])
    return code, capsys.readouterr().out.splitlines()


def test_this_host_in_one_screen(tmp_path, monkeypatch, capsys):
    code, lines = _doctor(capsys, tmp_path, monkeypatch)
    print("\n".join(lines))                          # the screen itself, for the record (pytest -s)
    assert code == 0 and len(lines) <= 24
    assert lines[0] == f"state: {tmp_path}/.reprokit  reports: {tmp_path}/reprokit-reports"
    assert re.match(r"reprokit \d+\.\d+\.\d+ \(code [0-9a-f]{12}", lines[1])
    starts = [line.split(":")[0] for line in lines[2:]]
    for part in ("python", "Docker engine", "NVIDIA container runtime", "GPUs", "CUDA builds", "cache", "frameworks",
                 "a run here"):
        assert part in starts, lines
    assert next(x for x in lines if x.startswith("cache: ")).startswith(f"cache: {cache.root()}, ")
    run = next(x for x in lines if x.startswith("a run here: backend "))
    if any(x.startswith("GPUs: none") for x in lines):          # a CPU host, as CI's
        assert "profile quick (no GPU: the CPU-sized profile)" in run
    assert lines[-1] == "a run can start here: `reprokit reproduce --dry-run` prints its plan"


def test_a_gpu_host_gets_its_cuda_builds_and_the_standard_profile(stand_in_gpu_host, tmp_path, monkeypatch, capsys):
    stand_in_gpu_host("570.133.20", gpus=2)
    code, lines = _doctor(capsys, tmp_path, monkeypatch)
    text = "\n".join(lines)
    assert code == 0, text
    assert re.search(r"^GPUs: 2 x NVIDIA H200 \(compute capability 9\.0\); driver 570\.133\.20$", text, re.M), text
    assert "CUDA builds: pytorch cuda12 (CUDA 12.8, driver 525.60.13 or newer): The NVIDIA driver 570.133.20 is " \
           "older than the 580.65.06 that the pytorch image's CUDA 13 build needs" in text
    assert "profile standard (a GPU is assigned)" in text


def test_a_driver_no_build_runs_on_means_a_run_could_not_start(stand_in_gpu_host, tmp_path, monkeypatch, capsys):
    stand_in_gpu_host("470.256.02")
    code, lines = _doctor(capsys, tmp_path, monkeypatch)
    assert code == 1
    assert lines[-1].startswith("a run could not start here: ") and "upgrade the driver" in lines[-1]
    assert "older than the 525.60.13 that the pytorch image's CUDA 12.8 build needs" in lines[-1]
