"""What the certificate is asked to certify: pairs from the seeds' own default matrix."""
from __future__ import annotations

from reprokit import certify_plan, plan
from reprokit.experiments import BUILTIN_DIR, discover
from reprokit.provenance import code
from reprokit.report import claims
from reprokit.runners.local import LocalRunner


def test_pairs_that_differ_only_in_a_loop_pitfall_share_one_certificate(tmp_path):
    """The seed 004 default matrix: fixed, as posted and two loop pitfalls alone (the claims name them).
    Only the as-posted pair changes the model, so two certificates stand for four pairs."""
    experiment = discover([BUILTIN_DIR])["simplecnn_cifar10_memory"]
    named = {v[1:] for c in claims.load("seeds")
             if c.experiment == experiment.name for v in c.variants() if v.startswith("+")}
    opts = plan.Options(profile="quick", device="cpu", repeats=1, frameworks=("pytorch", "tensorflow"),
                        data_dir=tmp_path, allow_download=False, variants=("fixed", "as_posted"),
                        alone=frozenset(named), prepare_data=False)
    runner = LocalRunner(tmp_path / "envs", tmp_path, "cpu")        # describe() reads the lock files only
    pairs = certify_plan.pairs(plan.specs_for(experiment, opts, runner.describe, code()))[experiment.name]
    runnable = [p for p in pairs if p.get("status") != "not-run"]
    names = [(p["pytorch"]["variant"], p["tensorflow"]["variant"]) for p in runnable]
    assert len(runnable) == 4 and ("as_posted", "as_posted") in names, names
    groups = sorted(certify_plan.by_key(runnable).values(), key=len)
    assert [len(g) for g in groups] == [1, 3]
    assert names[groups[0][0]] == ("as_posted", "as_posted")
    assert {names[i][0] for i in groups[1]} == {"fixed", *(f"+{n}" for n in named)}
