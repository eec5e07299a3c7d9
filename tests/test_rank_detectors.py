"""The pitfalls of many devices, found from the evidence a run's ranks recorded, and silent on their fixed twin;
the certificate's checks at N devices, from each process's evidence at its first step.

The recorded evidence is real: tests/fixtures/rank_evidence/<case>.json holds, for each case, what every rank of
a two-rank DDP run of tests/bound_scripts/ddp_ranks.py left (scripts/record_rank_evidence.py makes them again):
"fixed" (a DistributedSampler reshuffled each epoch, each rank testing its own shard), and one planted pitfall
each: no DistributedSampler, no set_epoch, a straggler (rank 1 sleeps in its step), evaluation on rank 0 alone.
The collectives' backend and the loss's scale are judged on recorded evidence changed where this host cannot
show them (GPUs with gloo; a MirroredStrategy loop's per-replica loss).
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from reprokit.kits.framework_free import rank_checks
from reprokit.kits.observation import rank_detectors

RECORDED = Path(__file__).parent / "fixtures" / "rank_evidence"
PITFALLS = {"no-sampler": "ranks-same-samples", "no-set-epoch": "same-order-every-epoch", "straggler": "straggler",
            "eval-on-rank-0": "evaluation-on-one-rank"}


def _ranks(case: str) -> list[dict]:
    return json.loads((RECORDED / f"{case}.json").read_text())


def _codes(ranks: list[dict]) -> list[str]:
    return [f["code"] for f in rank_detectors.findings(ranks)]


def test_the_fixed_twin_shows_no_pitfall():
    assert _codes(_ranks("fixed")) == []


@pytest.mark.parametrize(("case", "code"), list(PITFALLS.items()))
def test_each_planted_pitfall_is_found_from_its_evidence(case, code):
    found = {f["code"]: f["message"] for f in rank_detectors.findings(_ranks(case))}
    print(f"\n{case}: {found}")
    assert list(found) == [code]


def test_the_same_samples_are_named_with_the_share_of_the_work_they_repeat():
    (finding,) = rank_detectors.findings(_ranks("no-sampler"))
    assert finding["message"].startswith("rank 0 and rank 1 trained on the same samples: 100% of the first ")
    assert "so 50% of the run's samples repeat another rank's" in finding["message"]


def test_the_straggler_is_the_rank_the_others_wait_for():
    (finding,) = rank_detectors.findings(_ranks("straggler"))
    assert finding["message"].startswith("rank 1 is the slowest rank: the last to reach the gradients' all-reduce")
    assert "rank 0 spent" in finding["message"]


def test_collectives_on_gloo_beside_gpus_are_found_and_nccl_is_silent():
    ranks = _ranks("fixed")
    on_gpus = copy.deepcopy(ranks)
    for r in on_gpus:
        r["environment"]["device"] = "gpu"
    assert _codes(on_gpus) == ["collectives-on-gloo"]
    with_nccl = copy.deepcopy(on_gpus)
    for r in with_nccl:
        r["process"]["backend"] = "nccl"
    assert _codes(with_nccl) == []


def test_a_loss_scaled_per_replica_is_found_and_the_global_scale_is_silent():
    one = _ranks("fixed")[0] | {"process": {"role": "process", "index": 0}}
    per_replica = copy.deepcopy(one)
    per_replica["probe"]["evidence"]["loss_scale"] = {"per_replica": 1.0, "replicas_summed": 2, "factor": 2.0}
    (finding,) = rank_detectors.findings([per_replica])
    assert finding["code"] == "loss-scaled-per-replica"
    assert finding["message"].startswith("the script's process's step takes 2.00 times the gradient one device ")
    global_scale = copy.deepcopy(one)
    global_scale["probe"]["evidence"]["loss_scale"] = {"per_replica": 0.5, "replicas_summed": 2, "factor": 1.0}
    assert rank_detectors.findings([global_scale]) == []


# -- the certificate at N ------------------------------------------------------------------------------------------

def _evidence(role: str, index: int, batch: int, samples: list[float], factor: float = 1.0, replicas: int = 1,
              batchnorm: str | None = "per device") -> dict:
    return {"who": {"role": role, "index": index}, "batch": batch, "replicas": replicas, "samples": samples,
            "loss_scale": {"factor": factor, "per_replica": factor / replicas, "replicas_summed": replicas},
            "batchnorm": batchnorm}


def _checks(pt: list[dict], tf: list[dict]) -> dict[str, dict]:
    found = rank_checks.checks({"pytorch": pt, "tensorflow": tf}, {"pytorch": 2, "tensorflow": 2}, {})
    return {c["name"]: c for c in found}


DDP = [_evidence("rank", 0, 32, [1.0, 2.0, 3.0]), _evidence("rank", 1, 32, [4.0, 5.0, 6.0])]
MIRRORED = [_evidence("process", 0, 64, [1.0, 2.0], replicas=2)]


def test_the_same_work_at_n_passes_every_check():
    checks = _checks(DDP, MIRRORED)
    assert [c["passed"] for c in checks.values()] == [True, True, True, True], checks
    assert checks["batches"]["numbers"] == {"pytorch": {"global": 64, "per_device": 32.0},
                                            "tensorflow": {"global": 64, "per_device": 32.0}}


def test_different_global_batches_fail_naming_both():
    checks = _checks(DDP, [_evidence("process", 0, 128, [1.0], replicas=2)])
    assert checks["batches"]["passed"] is False
    assert checks["batches"]["evidence"] == (
        "PyTorch global batch 64, 32 per device over 2 (not known how it scaled with N (no run of it at 1 device)); "
        "TensorFlow global batch 128, 64 per device over 2 (not known how it scaled with N (no run of it at 1 "
        "device))")


def test_a_per_replica_loss_twice_the_gradient_fails():
    checks = _checks(DDP, [_evidence("process", 0, 64, [1.0], factor=2.0, replicas=2)])
    assert checks["gradient_reduction"]["passed"] is False
    assert "TensorFlow 2 times the gradient one device takes" in checks["gradient_reduction"]["evidence"]


def test_ranks_on_the_same_samples_fail_the_shards():
    same = [_evidence("rank", 0, 32, [1.0, 2.0]), _evidence("rank", 1, 32, [1.0, 2.0])]
    assert _checks(same, MIRRORED)["data_shards"]["passed"] is False


def test_batchnorm_synchronised_on_one_side_only_fails():
    synced = [_evidence("process", 0, 64, [1.0], replicas=2, batchnorm="synchronized")]
    assert _checks(DDP, synced)["batchnorm_sync"]["passed"] is False


def test_a_result_without_evidence_at_n_is_never_a_pass():
    checks = _checks([], MIRRORED)
    assert [c["passed"] for c in checks.values()] == [None] * 4
    assert all(c["evidence"].startswith("not measured: ") for c in checks.values())
