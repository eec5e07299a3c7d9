"""The certificate at N between the kit's own runs (reprokit/report/certified_at_n.py), read from a real sweep's
result files (tests/fixtures/kit_sweep/: the tiny experiment's PyTorch and TensorFlow kit runs at --devices 1,2 on
this CPU's stand-in devices: DDP's two ranks, MirroredStrategy's two replicas): its four checks pass on what the runs
showed, and each fails where one side's first-step evidence is planted wrong."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from reprokit.report import certified_at_n, scaling_section

SWEEP = Path(__file__).parent / "fixtures" / "kit_sweep"


@pytest.fixture
def sweep() -> dict:
    results = [json.loads(p.read_text()) for p in sorted(SWEEP.glob("*.json"))]
    (found,) = scaling_section.sweeps(results).values()
    return found


def _verdicts(sweep: dict) -> dict[str, bool | None]:
    return {c["name"]: c["passed"] for c in certified_at_n.checks(sweep, 2)}


def _evidence(sweep: dict, fw: str) -> list[dict]:
    return sweep[fw][2][0]["distributed"]["evidence"]


def test_the_kits_runs_at_two_devices_pass_all_four_checks(sweep):
    assert set(sweep) == {"pytorch", "tensorflow"} and all(set(counts) == {1, 2} for counts in sweep.values())
    assert _verdicts(sweep) == dict.fromkeys(("batches", "gradient_reduction", "data_shards", "batchnorm_sync"), True)
    assert [e["who"]["role"] for e in _evidence(sweep, "pytorch")] == ["rank", "rank"]
    assert [e["who"]["role"] for e in _evidence(sweep, "tensorflow")] == ["process"]
    (text,) = certified_at_n.lines(sweep)
    assert text.startswith("The certificate at 2 devices between the kit's own runs") and "**FAIL**" not in text
    assert text.index("| PyTorch global batch 32") < text.index("TensorFlow global batch 32")     # the reference first


def _planted(sweep: dict, plant) -> dict:
    out = copy.deepcopy(sweep)
    plant(out)
    return out


def _same_samples(s: dict) -> None:
    first, second = _evidence(s, "pytorch")
    second["samples"] = list(first["samples"])              # both ranks took rank 0's share


def _summed_loss(s: dict) -> None:
    scale = _evidence(s, "tensorflow")[0]["loss_scale"]
    scale["factor"] = scale["per_replica"] * 2 * scale["replicas_summed"]    # each replica's own mean, summed


def _synced_norm(s: dict) -> None:
    for e in _evidence(s, "pytorch"):
        e["batchnorm"] = "synchronized"                     # SyncBatchNorm on one side only


def _other_batch(s: dict) -> None:
    _evidence(s, "tensorflow")[0]["batch"] *= 2            # TensorFlow's global batch grew with N, PyTorch's held


@pytest.mark.parametrize("plant, failed", [(_same_samples, "data_shards"), (_summed_loss, "gradient_reduction"),
                                           (_synced_norm, "batchnorm_sync"), (_other_batch, "batches")])
def test_each_check_fails_on_its_planted_evidence(sweep, plant, failed):
    verdicts = _verdicts(_planted(sweep, plant))
    assert verdicts[failed] is False
    assert all(passed for name, passed in verdicts.items() if name != failed)
    (text,) = certified_at_n.lines(_planted(sweep, plant))
    assert f"| {failed} " in text and "**FAIL**" in text
