"""Which build of each framework a GPU host gets, by its driver, and what a local GPU run may see.

PyTorch's default build is CUDA 13 (driver 580 or newer); hosts on drivers 550-575 get its CUDA 12
flavour (torch 2.10.0, docker/bases.toml). The host is a stand-in nvidia-smi (tests/gpu_host.py)
printing what a real driver prints; the kit process of the last test is real.
"""
from __future__ import annotations

import json
import subprocess
import sys

import gpu_host
import pytest
from checkout import REPO

from reprokit import cli
from reprokit.claims import sequential
from reprokit.environments import host_checks
from reprokit.execute import compose
from reprokit.report import pair_findings

H100 = {"index": "0", "uuid": "GPU-aaaa", "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}


def _argv(tiny_dir, tmp_path, *extra: str) -> list[str]:
    return ["reproduce", "--experiments", str(tiny_dir), "--only", "tiny", "--backend", "local", "--claims", "none",
            "--state-dir", str(tmp_path / "state"), "--data-dir", str(tmp_path / "data"),
            "--reports-dir", str(tmp_path / "reports"), *extra]


@pytest.mark.parametrize("driver, flavor, lock", [
    ("550.144.03", "cuda12", "locks/pytorch-cuda12.txt"),
    ("570.133.20", "cuda12", "locks/pytorch-cuda12.txt"),
    ("580.95.05", "cuda", "locks/pytorch.txt"),
])
def test_the_hosts_driver_chooses_pytorchs_build_and_the_plan_says_why(driver, flavor, lock, stand_in_gpu_host,
                                                                       tiny_dir, tmp_path, capsys):
    stand_in_gpu_host(driver)
    assert cli.main(_argv(tiny_dir, tmp_path, "--dry-run")) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("GPU build: pytorch"))
    print(line)                         # the host check's own words, for the record (pytest -s)
    assert line.startswith(f"GPU build: pytorch {flavor} (CUDA {'12.8' if flavor == 'cuda12' else '13'}): ")
    if flavor == "cuda12":
        assert (f"The NVIDIA driver {driver} is older than the 580.65.06 that the pytorch image's CUDA 13 build "
                f"needs, so it runs its cuda12 build (CUDA 12.8, driver 525.60.13 or newer)") in line
    assert "GPU build: tensorflow cuda (CUDA 12): its default build runs on the assigned GPUs" in out
    m = compose.build(cli.parse(_argv(tiny_dir, tmp_path, "--dry-run")[1:]))
    specs = {s.framework: s.to_dict() for s in m.specs}
    assert specs["pytorch"]["provenance"]["lock"] == lock and specs["pytorch"]["provenance"]["flavor"] == flavor
    assert specs["tensorflow"]["provenance"]["lock"] == "locks/tensorflow-cuda.txt"


def test_a_driver_too_old_for_every_build_is_one_sentence(stand_in_gpu_host, tiny_dir, tmp_path, capsys):
    stand_in_gpu_host("470.256.02")
    assert cli.main(_argv(tiny_dir, tmp_path, "--dry-run", "--frameworks", "pytorch")) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == 1
    assert "older than the 580.65.06 that the pytorch image's CUDA 13 build needs" in err
    assert "older than the 525.60.13 that the pytorch image's CUDA 12.8 build needs" in err
    assert "upgrade the driver" in err


def test_a_gpu_only_the_cuda_12_build_has_kernels_for_gets_it_whatever_the_driver():
    v100 = dict(H100, name="Tesla V100-SXM2-16GB", compute_capability="7.0", driver="580.95.05")
    chosen = host_checks.gpu_flavors({"pytorch"}, "all", host_gpus=[v100])["pytorch"]
    assert (chosen.name, chosen.cuda, chosen.min_driver) == ("cuda12", "12.8", "525.60.13")
    assert "is not among the GPUs the pytorch image's CUDA 13 build has kernels for" in chosen.why
    # the checks that the Docker runner makes before a run hold the chosen build, not the default
    host_checks.check_gpu_host({"pytorch"}, "all", host_gpus=[v100], flavors={"pytorch": "cuda12"})
    with pytest.raises(host_checks.UserError, match="CUDA 13 build has kernels for"):
        host_checks.check_gpu_host({"pytorch"}, "all", host_gpus=[v100])


def test_a_ratio_whose_runs_mix_builds_is_flagged(tmp_path):
    runs = [json.loads(p.read_text()) for p in sorted((REPO / "reports" / "quick-cpu" / "results").glob("*.json"))]
    pt = [r for r in runs if r["framework"] == "pytorch"][:1]
    tf = [r for r in runs if r["framework"] == "tensorflow"][:1]
    cu13 = {**pt[0], "provenance": {**pt[0]["provenance"], "flavor": "cuda"}}
    cu12 = {**pt[0], "provenance": {**pt[0]["provenance"], "flavor": "cuda12"}}
    assert pair_findings.flavors([cu13, cu13], tf) == []
    (found,) = pair_findings.flavors([cu13, cu12], tf)
    assert found["code"] == "ratio-across-flavors" and "2 builds (cuda, cuda12)" in found["message"]


@pytest.mark.slow
def test_a_local_gpu_run_sees_only_the_gpu_named_and_says_why_it_found_none(kit_python, stand_in_gpu_host,
                                                                            tiny_dir, tmp_path):
    """--gpus 1 without --parallel: CUDA_VISIBLE_DEVICES is GPU 1's UUID in the kit process, and the kit's
    no-GPU failure names the build's CUDA version, the driver it needs and the host's."""
    kit_python("pytorch")
    stand_in_gpu_host("580.95.05")
    proc = subprocess.run([sys.executable, "-m", "reprokit", *_argv(tiny_dir, tmp_path, "--gpus", "1",
                                                                    "--frameworks", "pytorch", "--no-certify", "--repeats", "1",
                                                                    "--variants", "fixed",
                                                                    "--name", "t")],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "profile standard on gpu (NVIDIA H200)" in proc.stdout
    (result,) = [json.loads(p.read_text()) for p in (tmp_path / "state" / "results").glob("*.json")]
    assert result["failure"]["kind"] == "no-gpu"
    message = result["failure"]["message"]
    assert f"CUDA_VISIBLE_DEVICES='{gpu_host.uuid(1)}'" in message
    assert "is a CUDA 13.0 build, which needs NVIDIA driver 580.65.06 or newer" in message
    assert "the host's driver is 580.95.05 (nvidia-smi)" in message and "PyTorch says: " in message
    assert {k: result["spec"]["provenance"][k] for k in ("flavor", "cuda", "min_driver")} == {
        "flavor": "cuda", "cuda": "13", "min_driver": "580.65.06"}


def test_the_cuda_12_build_is_an_image_of_its_own_made_on_demand():
    """Its own lock, so its own content tag (CI builds only the CPU images); the Docker runner asks for it by
    flavor and records it in every spec it describes."""
    from reprokit.environments import images
    from reprokit.runners.docker import DockerRunner

    cu12, cu13 = images.recipe("pytorch", "cuda12"), images.recipe("pytorch", "cuda")
    assert cu12.lock.name == "pytorch-cuda12.txt" and cu12.tag.startswith("reprokit/pytorch-cuda12:")
    assert cu13.lock.name == "pytorch.txt" and cu12.tag != cu13.tag
    with pytest.raises(host_checks.UserError, match="tensorflow has no image flavor 'cuda12'"):
        images.recipe("tensorflow", "cuda12")
    chosen = host_checks.gpu_flavors({"pytorch"}, "all", host_gpus=[dict(H100, driver="570.133.20")])
    runner = DockerRunner(REPO, REPO / ".reprokit" / "data", "all", flavors=chosen)
    assert runner.flavor_of("pytorch") == "cuda12" and runner.flavor_of("tensorflow") == "cuda"


def test_on_a_gpu_host_repeats_are_auto_by_default_and_a_number_overrides_it(stand_in_gpu_host, tmp_path, capsys):
    """The seed matrix on a GPU host: 3 repeats of each configuration and the rule's cap, unless --repeats N."""
    stand_in_gpu_host("580.95.05")
    argv = ["--backend", "local", "--dry-run", "--state-dir", str(tmp_path / "state"), "--data-dir",
            str(tmp_path / "data")]
    auto = compose.build(cli.parse(argv))
    assert auto.rule is not None and auto.rule.cap == sequential.DEFAULT_CAP and {s.repeat for s in auto.specs} == {0, 1, 2}
    assert cli.main(["reproduce", *argv]) == 0
    assert "repeats auto: 3 of each configuration, then one more at a time" in capsys.readouterr().out
    fixed = compose.build(cli.parse([*argv, "--repeats", "4"]))
    assert fixed.rule is None and {s.repeat for s in fixed.specs} == {0, 1, 2, 3}
