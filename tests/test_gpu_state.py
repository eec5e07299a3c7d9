"""The host's view of the GPU, read through a stand-in nvidia-smi that prints what the real one prints."""
from __future__ import annotations

import os
import stat

from reprokit import gpu_state

FAKE = """#!/bin/sh
case "$1" in
  --query-gpu=*) echo "0, NVIDIA H200, 1980, 1980, 41, 0x0000000000000000, 1024"
                 echo "1, NVIDIA H200, 1305, 1980, 88, 0x0000000000000040, 70000" ;;
  --query-compute-apps=*) echo "4242, 69000" ;;
esac
"""


def test_throttled_and_shared_gpus_become_findings(tmp_path, monkeypatch):
    exe = tmp_path / "nvidia-smi"
    exe.write_text(FAKE)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    state = gpu_state.snapshot()
    assert [g["name"] for g in state["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert state["processes"] == [{"pid": 4242, "used_memory_mib": "69000"}]
    found = gpu_state.findings(state, state)
    codes = [f["code"] for f in found]
    assert codes == ["gpu-throttled", "gpu-throttled", "gpu-shared"]
    assert "hardware thermal slowdown" in found[0]["message"] and "GPU 1" in found[0]["message"]
    assert "4242" in found[2]["message"]


def test_no_driver_means_no_state(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_state.snapshot() is None and gpu_state.findings(None, None) == []
