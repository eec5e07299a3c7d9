"""A seed's posted scripts run beside the kit's rebuild of them (the `verbatim` variant): planned on the same
data file and bounds as the kit's runs of the same profile, so the report can set the two side by side
(reprokit/plan/script_plan.py, reprokit/report/reconstruction.py). Planned, not run: matrix.build on a dry run."""
from __future__ import annotations

import pytest

from reprokit import cli
from reprokit.execute import compose


@pytest.mark.parametrize(("profile", "extra"), [("quick", []), ("standard", ["--max-steps", "5"])])
def test_the_posted_scripts_get_the_kits_data_and_bounds(tmp_path, profile, extra):
    args = cli.parse(["--only", "simplecnn_cifar10_memory", "--only", "vgg16_cifar10_speed",
                                     "--variants", "as_posted,verbatim", "--profile", profile, "--backend", "local",
                                     "--state-dir", str(tmp_path / "state"), "--data-dir", str(tmp_path / "data"),
                                     "--dry-run", *extra])
    specs = [s.to_dict() for s in compose.build(args).specs]
    for experiment, folder in (("simplecnn_cifar10_memory", "seed004"), ("vgg16_cifar10_speed", "seed000")):
        by = {(s["framework"], s["variant"]): s for s in specs if s["experiment"] == experiment}
        assert set(by) >= {(fw, v) for fw in ("pytorch", "tensorflow") for v in ("as_posted", "verbatim")}
        for fw in ("pytorch", "tensorflow"):
            kit, script = by[(fw, "as_posted")], by[(fw, "verbatim")]
            assert script["source"] == "script" and script["script"]["folder"].endswith(f"/{folder}")
            assert {k: script["data"][k] for k in ("dataset", "train_samples", "test_samples")} == {
                k: kit["data"][k] for k in ("dataset", "train_samples", "test_samples")}
            assert script["bounds"] == {"max_steps": kit["train"]["max_steps_per_epoch"],
                                        "epochs": kit["train"]["epochs"], "eval_steps": None}
            assert script["warmup_steps"] == kit["train"]["warmup_steps"]
    if extra:
        assert {s["bounds"]["max_steps"] for s in specs if s.get("source") == "script"} == {5}
