"""The cost before the run: `reproduce --dry-run --gpu-model NAME [--price-per-hour P]` on a GPU this host lacks."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from reprokit import cli
from reprokit.errors import UserError
from reprokit.execute import data_step
from reprokit.plan import cost, matrix


@pytest.mark.parametrize("asked, key", [("H100-SXM", "h100-sxm"), ("A100-40GB", "a100"), ("L4", "l4"),
                                        ("H100 80GB HBM3", "h100-sxm"), ("a100-sxm4-80gb", "a100")])
def test_a_gpu_model_is_named_as_people_name_it(asked: str, key: str) -> None:
    assert cost.gpu_model(asked).key == key


def test_an_unknown_gpu_model_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(UserError, match=r"--gpu-model B200: .*known models: a10, a100, .*h100-sxm.*l4"):
        cost.gpu_model("B200")
    with pytest.raises(UserError, match="L40SX"):
        cost.gpu_model("L40SX")                  # a name matches only as a whole


def _specs(tmp_path: Path) -> list:
    req = cli.parse(["--dry-run", "--gpu-model", "L4", "--only", "simplecnn_cifar10_memory", "--variants", "fixed",
                     "--state-dir", str(tmp_path), "--data-dir", str(tmp_path / "data")])
    return matrix.on_gpu_elsewhere(req, data_step.LookedUp(req.how.data_dir))[0]


def test_the_default_on_a_gpu_runs_resnet50_and_tuned_only_where_a_claim_reads_it(tmp_path: Path) -> None:
    """On a GPU NVIDIA's ResNet-50 claims are in play: ResNet-50 runs, with tuned (its claims read it), as VGG16's
    does (s000-nvidia-similar); no claim reads SimpleCNN's tuned, so it is left out, and --all adds it back."""
    def planned(*extra: str) -> set[tuple[str, str]]:
        req = cli.parse(["--dry-run", "--gpu-model", "H100-SXM", "--state-dir", str(tmp_path),
                         "--data-dir", str(tmp_path / "data"), *extra])
        specs = matrix.on_gpu_elsewhere(req, data_step.LookedUp(req.how.data_dir))[0]
        return {(s.experiment, s.variant) for s in specs}
    default, everything = planned(), planned("--all")
    assert {("resnet50_imagenet_speed", "tuned"), ("vgg16_cifar10_speed", "tuned"),
            ("resnet50_imagenet_speed", "+tuned_compile")} <= default
    assert not {v for e, v in default if e == "simplecnn_cifar10_memory" and v.startswith(("tuned", "+tuned"))}
    assert everything - default == {("simplecnn_cifar10_memory", v) for v in (
        "tuned", "+tuned_precision", "+tuned_cudnn_autotune", "+tuned_compile", "+tuned_channels_last")}


def test_finished_runs_on_the_model_are_measured_and_others_are_not(tmp_path: Path) -> None:
    spec = _specs(tmp_path)[0]
    finished = {"status": "ok", "launcher": {"wall_s": 123.0}, "experiment": spec.experiment,
                "framework": spec.framework, "variant": spec.variant, "profile": spec.profile,
                "environment": {"device": "gpu", "device_name": "NVIDIA H100 80GB HBM3"}}
    on_h100 = cost.of_plan([spec], [finished], cost.gpu_model("H100-SXM"))
    assert (on_h100.measured_s, on_h100.flops_s) == (123.0, 0.0)
    on_l4 = cost.of_plan([spec], [finished], cost.gpu_model("L4"))       # an H100's time says nothing of an L4
    assert on_l4.measured_s == 0.0 and on_l4.flops_s > 0


def test_the_dry_run_prints_hours_and_cost_and_a_faster_gpu_costs_fewer_hours(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def hours(model: str) -> tuple[float, float]:
        code = cli.reproduce(["--dry-run", "--gpu-model", model, "--price-per-hour", "2.5",
                              "--state-dir", str(tmp_path), "--data-dir", str(tmp_path / "data")])
        out = capsys.readouterr().out
        # the least: 3 repeats (each of tuned's settings alone once, but XLA alone in TensorFlow on ResNet-50, which
        # a claim reads: 3), tuned only where a claim reads it (not SimpleCNN's); then the most, at the cap
        assert code == 0 and "plan: 64 runs, profile standard on a GPU, 3 experiment(s), --repeats auto (3 " \
            "repeats each, up to 4)" in out
        assert "at most, if every configuration a ratio claim reads needed the cap of 4 repeats (14 more runs)" in out
        assert ("left out (no claim reads them here): tuned of simplecnn_cifar10_memory; the ablation: add them "
                "with --all, --ablation") in out
        assert "100% from training FLOPs alone" in out            # nothing finished on it here
        h = float(re.search(r"([\d.]+) GPU-hours", out).group(1))
        return h, float(re.search(r"at 2.50 per GPU-hour: ([\d.]+)", out).group(1))
    l4, l4_price = hours("L4")
    h100, _ = hours("H100-SXM")
    assert h100 < l4 and l4_price == pytest.approx(l4 * 2.5, abs=0.02)      # hours are printed rounded


@pytest.mark.parametrize("argv, words", [
    (["--gpu-model", "L4"], "add --dry-run"),
    (["--dry-run", "--price-per-hour", "2"], "prices a --gpu-model estimate"),
    (["--dry-run", "--gpu-model", "L4", "--price-per-hour", "-1"], "give a positive price"),
])
def test_cost_flags_out_of_place_get_one_sentence(argv: list[str], words: str) -> None:
    with pytest.raises(UserError, match=words):
        cli.parse(argv)
