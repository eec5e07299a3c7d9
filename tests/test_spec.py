"""The typed RunSpec both sides load: every planned spec round-trips, and a malformed one is refused."""
from __future__ import annotations

import copy
import dataclasses

import pytest

from reprokit.execute import data_step
from reprokit.kits.contract.pitfalls import Pitfall, Pitfalls
from reprokit.kits.contract.spec import RunSpec, SpecError
from reprokit.plan.experiments import BUILTIN_DIR, discover
from reprokit.plan.plan import Options, not_run, specs_for
from reprokit.results.provenance import code


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> list[dict]:
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=("pytorch", "tensorflow"),
                   data=data_step.Preparing(tmp_path_factory.mktemp("data"), allow_download=False),
                   variants=("fixed", "as_posted"), ablation=True)
    return [s for e in discover([BUILTIN_DIR]).values()
            for s in (t.to_dict() for t in specs_for(e, opts, lambda fw: {"lock": None, "lock_sha256": None,
                                                                          "image": None}, code()))]


def test_every_planned_spec_loads_typed_and_round_trips(planned):
    assert len(planned) > 10
    for raw in planned:
        spec = RunSpec.from_dict(raw)
        assert spec.to_dict() == raw
        assert spec.train.optimizer.lr == raw["train"]["optimizer"]["lr"]
        assert spec.pitfalls.names() == raw["pitfalls"]
        assert all(spec.pitfalls.has(Pitfall(p)) for p in raw["pitfalls"])


def test_a_malformed_spec_is_refused_with_the_field(planned):
    raw = copy.deepcopy(planned[0])
    del raw["train"]["optimizer"]["lr"]
    with pytest.raises(SpecError, match=r"spec\.train\.optimizer\.lr is missing"):
        RunSpec.from_dict(raw)
    raw = copy.deepcopy(planned[0])
    raw["data"]["colour"] = "blue"
    with pytest.raises(SpecError, match=r"spec\.data: unknown field\(s\) colour"):
        RunSpec.from_dict(raw)
    raw = copy.deepcopy(planned[0])
    raw["pitfalls"] = ["pt_no_such_thing"]
    with pytest.raises(ValueError, match="unknown pitfall.*pt_no_such_thing"):
        RunSpec.from_dict(raw)


def test_pitfalls_are_a_typed_set_in_the_specs_order():
    p = Pitfalls.of(["pt_val_grad", "pt_head_1000"])
    assert p.has(Pitfall.PT_HEAD_1000) and not p.has(Pitfall.TF_BATCH_OF_ONE)
    assert p.names() == ["pt_val_grad", "pt_head_1000"] and len(p) == 2
    assert Pitfall.PT_VAL_GRAD.framework == "pytorch" and Pitfall.PT_VAL_GRAD.part == "evaluation"


def test_planning_only_reads_the_data_and_the_data_step_prepares_it(tmp_path):
    """A plan through a dry run's data step writes nothing and leaves the checksum to come; through a run's data
    step the arrays the runs read are written first, and the plan names them by their checksum."""
    exp = discover([BUILTIN_DIR])["simplecnn_cifar10_memory"]
    data_dir = tmp_path / "data"
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=("pytorch",), data=data_step.LookedUp(data_dir))
    describe = lambda fw: {"lock": None, "lock_sha256": None, "image": None}      # noqa: E731
    (before,) = specs_for(exp, opts, describe, code())
    assert before.data.sha256 is None and before.data.file is None and not data_dir.exists()
    running = dataclasses.replace(opts, data=data_step.Preparing(data_dir, allow_download=False))
    (after,) = specs_for(exp, running, describe, code())
    assert after.data.file and (data_dir / after.data.file).is_file() and after.data.sha256
    assert {p.name for p in data_dir.iterdir()} == {after.data.file, f"{after.data.file}.sha256"}
    assert specs_for(exp, opts, describe, code()) == [after]        # the dry run now reads what was prepared


def test_a_framework_added_to_the_seeds_runs_what_it_has_code_for(planned, tmp_path_factory):
    """JAX added to the seeds (the experiments name PyTorch and TensorFlow): it runs fixed, and none of the posted
    variants or their single changes, which the plan says once per experiment; the others' specs (and so their
    run ids) are the same as without it."""
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=("pytorch", "tensorflow", "jax"),
                   data=data_step.Preparing(tmp_path_factory.mktemp("data"), allow_download=False),
                   variants=("fixed", "as_posted", "verbatim"), ablation=True)     # verbatim: the posted scripts
    experiments = [e for e in discover([BUILTIN_DIR]).values() if "as_posted" in e.variants]   # the posted cases
    three = [s.to_dict() for e in experiments
             for s in specs_for(e, opts, lambda fw: {"lock": None, "lock_sha256": None, "image": None}, code())]
    assert [s for s in three if s["framework"] != "jax"] == [s for s in planned if s["experiment"] in
                                                             {e.name for e in experiments}]
    jax = [s for s in three if s["framework"] == "jax"]
    assert sorted((s["experiment"], s["variant"], s["pitfalls"] == []) for s in jax) == [
        ("simplecnn_cifar10_memory", "fixed", True), ("vgg16_cifar10_speed", "fixed", True)]
    assert [s["differences"][0]["jax"] for s in jax] == ["NHWC", "NHWC"]      # the seeds declare JAX's side
    assert [line for e in experiments for line in not_run(e, opts)] == [
        "simplecnn_cifar10_memory: JAX runs no as_posted, verbatim (not run: no posted code in JAX)",
        "vgg16_cifar10_speed: JAX runs no as_posted, verbatim (not run: no posted code in JAX)"]
