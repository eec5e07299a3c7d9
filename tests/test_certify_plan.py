"""What the certificate is asked to certify: pairs from the seeds' own default matrix, and the width
its costly checks run at on each device."""
from __future__ import annotations

import copy

import pytest

from reprokit.certify import certify_plan
from reprokit.claims import claims
from reprokit.execute import data_step
from reprokit.plan import plan
from reprokit.plan.experiments import BUILTIN_DIR, discover, load
from reprokit.results.provenance import code
from reprokit.runners.local import LocalRunner


def test_pairs_that_differ_only_in_a_loop_pitfall_share_one_certificate(tmp_path):
    """The seed 004 default matrix: fixed, as posted and two loop pitfalls alone (the claims name them).
    Only the as-posted pair changes the model, so two certificates stand for four pairs."""
    experiment = discover([BUILTIN_DIR])["simplecnn_cifar10_memory"]
    named = {v[1:] for c in claims.load("seeds")
             if c.experiment == experiment.name for v in c.variants() if v.startswith("+")}
    opts = plan.Options(profile="quick", device="cpu", repeats=1, frameworks=("pytorch", "tensorflow"),
                        data=data_step.LookedUp(tmp_path), variants=("fixed", "as_posted"),
                        alone=frozenset(named))
    runner = LocalRunner(tmp_path / "envs", tmp_path, "cpu")        # describe() reads the lock files only
    pairs = certify_plan.pairs([s.to_dict() for s in plan.specs_for(experiment, opts, runner.describe, code())])[
        experiment.name]
    runnable = [p for p in pairs if p.get("status") != "not-run"]
    names = [(p["pytorch"]["variant"], p["tensorflow"]["variant"]) for p in runnable]
    assert len(runnable) == 4 and ("as_posted", "as_posted") in names, names
    groups = sorted(certify_plan.by_key(runnable, certify_plan.CPU_BUDGET_FLOPS).values(), key=len)
    assert [len(g) for g in groups] == [1, 3]
    assert names[groups[0][0]] == ("as_posted", "as_posted")
    assert {names[i][0] for i in groups[1]} == {"fixed", *(f"+{n}" for n in named)}


def test_a_sweep_certifies_each_pair_once_at_one_device(tmp_path):
    """The kit's certificate is of its model, data and step, the same at every count: a sweep of 1 and 2 devices
    gives one pair per variant, its specs at one device (a kit's certify process trains on one)."""
    experiment = discover([BUILTIN_DIR])["simplecnn_cifar10_memory"]
    opts = plan.Options(profile="quick", device="cpu", repeats=1, frameworks=("pytorch", "tensorflow"),
                        data=data_step.LookedUp(tmp_path), variants=("fixed",), devices=(1, 2))
    runner = LocalRunner(tmp_path / "envs", tmp_path, "cpu")
    specs = [s.to_dict() for s in plan.specs_for(experiment, opts, runner.describe, code())]
    assert sorted(s.get("devices", 1) for s in specs) == [1, 1, 2, 2]
    (pair,) = certify_plan.pairs(specs)[experiment.name]
    assert all("devices" not in spec for spec in pair.values())


H100, L4, A10 = "NVIDIA H100 80GB HBM3", "NVIDIA L4", "NVIDIA A10"


@pytest.fixture
def vgg16_224(tmp_path) -> dict[str, dict]:
    """The seed's VGG16 at 224x224, batch 32, as the standard profile plans it on a GPU."""
    opts = plan.Options(profile="standard", device="gpu", repeats=1, frameworks=("pytorch", "tensorflow"),
                        data=data_step.LookedUp(tmp_path))
    none = {"lock": None, "lock_sha256": None, "image": None}
    specs = plan.specs_for(load(BUILTIN_DIR / "vgg16_cifar10_speed.toml"), opts, lambda fw: none, code())
    pair = {s.framework: s.to_dict() for s in specs}
    assert all(s["data"]["input_size"] == 224 and s["train"]["batch_size"] == 32 for s in pair.values())
    assert all(s["model"]["width_multiplier"] == 1.0 for s in pair.values())
    return pair


def _cost(pair: dict) -> float:
    return max(certify_plan.trajectory_cost(s) for s in pair.values())


def _at_width(pair: dict, factor: float) -> dict:
    wider = copy.deepcopy(pair)
    for spec in wider.values():
        spec["model"]["width_multiplier"] *= factor
        spec["model"]["classifier_width"] = round(spec["model"]["classifier_width"] * factor)
    return wider


def test_vgg16_at_224_runs_its_trajectories_at_full_width_on_an_h100(vgg16_224):
    budget, why = certify_plan.trajectory_budget("gpu", H100)
    assert budget == 6 * 34e12 and 1.9e14 < budget < 2.1e14       # about the 2e14 of one budget for every GPU
    assert why.startswith("6 s at the NVIDIA H100 80GB HBM3's fp64 peak of 3.4e+13 FLOP/s (NVIDIA H100")
    assert 1.5e14 < _cost(vgg16_224) <= budget
    assert certify_plan.reduced(vgg16_224, budget, why) is None


@pytest.mark.parametrize("name, architecture", [(L4, "Ada Lovelace"), (A10, "Ampere GA102")])
def test_vgg16_at_224_runs_its_trajectories_at_a_declared_reduced_width_on_an_l4_or_a10(vgg16_224, name,
                                                                                        architecture):
    budget, why = certify_plan.trajectory_budget("gpu", name)
    assert 2.5e12 < budget < 3e12 and f"{name}'s fp64 peak" in why
    assert f"FP64 not on the datasheet: 1/64 of FP32, the NVIDIA {architecture}" in why
    small, reason = certify_plan.reduced(vgg16_224, budget, why)
    widths = {s["model"]["width_multiplier"] for s in small.values()}
    assert widths == {0.0625}            # five trajectories: fp32, perturbed, reference, fp64, fp64 one ulp apart
    assert _cost(small) <= budget < _cost(_at_width(vgg16_224, 0.125))     # the widest width that fits
    assert all(s["data"]["input_size"] == 224 and s["train"]["batch_size"] == 32 for s in small.values())
    assert f"over the {budget:.2g} budget on a gpu ({why}): they ran at width 0.0625" in reason


@pytest.mark.parametrize("name", ["NVIDIA B200", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", None])
def test_a_gpu_without_a_known_fp64_peak_gets_the_slowest_known_fp64_gpus_budget(vgg16_224, name):
    """An unknown model, a MIG slice, or no name at all (a Ray cluster's GPUs are named on the nodes)."""
    budget, why = certify_plan.trajectory_budget("gpu", name)
    assert budget == 6 * 8.1e12 / 32                                # the T4's fp64, 1/32 of its fp32
    unknown = f"no peak known for {name}" if name else "the GPU's name is not known"
    assert why.startswith(f"{unknown}: 6 s at the fp64 peak of the slowest known fp64 GPU, the T4's 2.53e+11 FLOP/s")
    small, reason = certify_plan.reduced(vgg16_224, budget, why)
    assert _cost(small) <= budget and why in reason


def test_a_gpu_pair_without_a_budget_gets_the_unnamed_gpus(vgg16_224):
    assert certify_plan.reduced(vgg16_224) == certify_plan.reduced(vgg16_224,
                                                                  *certify_plan.trajectory_budget("gpu", None))


def test_the_cpu_budget_is_unchanged(vgg16_224):
    budget, why = certify_plan.trajectory_budget("cpu", H100)      # a CPU matrix on a GPU host: the CPU's
    assert (budget, why) == certify_plan.trajectory_budget("cpu", None)
    assert budget == 1e12 and why.startswith("the CPU budget")
    on_cpu = copy.deepcopy(vgg16_224)
    for spec in on_cpu.values():
        spec["device"] = "cpu"
    small, reason = certify_plan.reduced(on_cpu)
    assert (small, reason) == certify_plan.reduced(on_cpu, budget, why)
    assert f"over the 1e+12 budget on a cpu ({why}): they ran at width" in reason
    assert "over the 1.5e+11 budget on a cpu (given by the caller): " in certify_plan.reduced(on_cpu, 1.5e11)[1]


def test_the_cache_key_holds_the_budget_the_certificate_ran_under(vgg16_224):
    """A certificate made on an H100 (full width) is not an L4's (width 0.125) from the same state folder."""
    h100, l4, h200 = (certify_plan.trajectory_budget("gpu", n)[0] for n in (H100, L4, "NVIDIA H200"))
    assert certify_plan.cache_key(vgg16_224, h100) != certify_plan.cache_key(vgg16_224, l4)
    assert certify_plan.cache_key(vgg16_224, h100) == certify_plan.cache_key(copy.deepcopy(vgg16_224), h200)
    keys = [certify_plan.by_key([vgg16_224], b) for b in (h100, l4)]
    assert [list(k.values()) for k in keys] == [[[0]], [[0]]] and keys[0].keys() != keys[1].keys()
    assert list(keys[1]) == [certify_plan.cache_key(vgg16_224, l4)]


def test_each_pair_of_a_variant_has_its_own_certificate_file():
    """With three frameworks, PyTorch / TensorFlow and PyTorch / JAX of one variant are two files; the pair the
    registry's first two make keeps the name it always had."""
    def cert(other: str, variant: str = "fixed") -> dict:
        return {"experiment": "tiny", "variant": {"pytorch": variant, other: variant}}
    assert certify_plan.file_name(cert("tensorflow")) == "certificate-tiny-fixed.json"
    assert certify_plan.file_name(cert("jax")) == "certificate-tiny-fixed-jax.json"
    assert certify_plan.file_name(cert("jax", "-pt_val_grad")) == "certificate-tiny--pt_val_grad-jax.json"
