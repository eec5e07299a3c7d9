"""Each factor's share of the gap, on synthetic experiments whose step times are planted per pitfall.

The runs are the plan's own: `--ablation` specs of seed 000 and of a user's own experiment folder, each turned into
a result file (a real result's fields, through the result schema) whose training time per step is planted: each
pitfall, and as_posted's numerics, multiplies its framework's step time by its own factor, and one pair of
pitfalls multiplies it again when both are on (the planted interaction). The decomposition must give each factor
its planted share within its interval, and the verdict may say "explained by" only where the shares support it.
"""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest

from reprokit.certify import certify_plan
from reprokit.claims import claims as claims_mod
from reprokit.claims import verdicts
from reprokit.execute import data_step
from reprokit.kits.contract.pitfalls import PITFALLS
from reprokit.plan import plan
from reprokit.plan.experiments import BUILTIN_DIR, discover, load
from reprokit.report import decomposition, plots
from reprokit.results import results as results_mod
from reprokit.results import runs, shares
from reprokit.results.provenance import code

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "reports" / "quick-cpu" / "results"
USER = REPO / "tests" / "user_pitfalls" / "planted.toml"
SPEED = "vgg16_cifar10_speed"
NONE = {"lock": None, "lock_sha256": None, "image": None}
FWS = ("pytorch", "tensorflow")


def _specs(experiment, repeats: int, tmp_path: Path) -> list[dict]:
    opts = plan.Options(profile="quick", device="cpu", repeats=repeats, frameworks=FWS,
                        data=data_step.LookedUp(tmp_path), variants=("fixed", "as_posted"), ablation=True)
    return [s.to_dict() for s in plan.specs_for(experiment, opts, lambda fw: NONE, code())]


@pytest.fixture(scope="module")
def base() -> dict[str, dict]:
    """A real finished run of each framework, whose fields the synthetic results keep."""
    found = [json.loads(p.read_text()) for p in sorted(REAL.glob("*.json"))]
    return {fw: next(r for r in found if r["experiment"] == SPEED and r["framework"] == fw) for fw in FWS}


def planted(specs: list[dict], base: dict[str, dict], factor: dict[str, float], joint: dict[frozenset, float],
            delta: float = 0.01) -> list[dict]:
    """A result per spec: training time per step = 0.05 s x the factor of each pitfall the run has (and of
    "numerics:<framework>" where it runs as_posted's numerics) x each joint factor whose pitfalls are all on.
    Repeats (or, for a single repeat, epochs) scatter by +-delta around it, symmetrically, in a seeded order."""
    rng = np.random.default_rng(0)
    order = {cell: rng.permutation([-1.0, 0.0, 1.0]) for cell in sorted({(s["variant"], s["framework"]) for s in specs})}
    out = []
    for spec in specs:
        r = copy.deepcopy(base[spec["framework"]])
        fw, on = spec["framework"], set(spec["pitfalls"])
        step = 0.05 * math.prod(factor.get(p, 1.0) for p in on)
        if spec["numerics"] != _fixed_numerics(specs, fw):
            step *= factor.get(f"numerics:{fw}", 1.0)
        step *= math.prod(m for pits, m in joint.items() if pits <= on)
        single = not any(s["repeat"] for s in specs)
        jitter = 1.0 if single else 1 + delta * order[spec["variant"], fw][spec["repeat"] % 3]
        per_epoch = [1 - delta, 1 + delta, 1 - delta, 1 + delta] if single else [1.0] * 4
        steps = r["effective"]["train_steps_per_epoch"][0]
        r["timing"]["epochs"] = [{**e, "train_s": steps * step * jitter * k, "eval_s": 0.0}
                                 for e, k in zip(r["timing"]["epochs"], per_epoch, strict=True)]
        r.update(spec=spec, experiment=spec["experiment"], variant=spec["variant"], repeat=spec["repeat"],
                 run_id=spec["run_id"], profile=spec["profile"])
        assert results_mod.problems(r) is None, results_mod.problems(r)
        out.append(r)
    return out


def _fixed_numerics(specs: list[dict], fw: str) -> dict:
    return next(s["numerics"] for s in specs if s["variant"] == "fixed" and s["framework"] == fw)


def _planted_share(name: str, factor: dict[str, float], joint: dict[frozenset, float]) -> float:
    """A factor's planted share of log(PyTorch / TensorFlow): its own log factor, signed by its framework, plus
    half of each planted pairwise interaction it takes part in (the two-order Shapley value)."""
    if name == runs.NUMERICS:
        return math.log(factor.get("numerics:pytorch", 1.0)) - math.log(factor.get("numerics:tensorflow", 1.0))
    sign = 1 if PITFALLS[name]["framework"] == "pytorch" else -1
    pairs = sum(math.log(m) / 2 for pits, m in joint.items() if name in pits and len(pits) == 2)
    return sign * (math.log(factor.get(name, 1.0)) + pairs)


# Seed 000's 12 pitfalls and its numerics: the posted CPU resize dominates; two TensorFlow pitfalls interact.
SEED000 = {"pt_cpu_resize_dataloader": 3.0, "pt_head_1000": 1.08, "pt_blocking_copy": 1.04, "pt_item_per_step": 1.06,
           "pt_metrics_per_batch": 1.02, "pt_outputs_kept_alive": 1.03, "tf_batch_of_one": 0.9,
           "tf_shuffle_ignored": 1.05, "tf_epochs_resume": 1.1, "tf_inputs_0_255": 1.01,
           "tf_validation_single_examples": 1.02, "tf_posted_vgg16": 0.95,
           "numerics:pytorch": 1.04, "numerics:tensorflow": 0.97}
PAIR = {frozenset({"tf_shuffle_ignored", "tf_epochs_resume"}): 1.25}


@pytest.fixture(scope="module")
def seed000(tmp_path_factory) -> list[dict]:
    return _specs(discover([BUILTIN_DIR])[SPEED], 3, tmp_path_factory.mktemp("plan"))


def _by_variant(results: list[dict]) -> dict:
    return runs.group(results)[results[0]["experiment"]]


def test_the_ablation_plans_each_factor_added_and_removed_alone(seed000):
    """28 configurations: fixed, as_posted, and each of 13 factors (12 pitfalls, the numerics) added alone to
    fixed and removed alone from as_posted; a one-framework change runs in its framework only."""
    configs = {(s["variant"], s["framework"]) for s in seed000}
    assert len({v for v, _ in configs}) == 28 and len(configs) == 32 and len(seed000) == 96
    walk = runs.variant_order(v for v, _ in configs)      # fixed, each +factor, as_posted, each -factor
    assert walk[0] == "fixed" and walk[14] == "as_posted" and {v[0] for v in walk[15:]} == {"-"}
    assert {fw for v, fw in configs if v == "-pt_head_1000"} == {"pytorch"}
    assert {fw for v, fw in configs if v in ("+numerics", "-numerics")} == {"pytorch", "tensorflow"}
    posted = next(s for s in seed000 if s["variant"] == "as_posted" and s["framework"] == "tensorflow")
    minus = next(s for s in seed000 if s["variant"] == "-tf_batch_of_one")
    assert set(posted["pitfalls"]) - set(minus["pitfalls"]) == {"tf_batch_of_one"}
    assert minus["numerics"] == posted["numerics"] and minus["numerics"]["tf32"] == "framework_default"
    pairs = certify_plan.pairs(seed000)[SPEED]
    held = {tuple(p[fw]["variant"] for fw in FWS) for p in pairs if p.get("status") != "not-run"}
    assert ("as_posted", "-tf_batch_of_one") in held and ("-pt_head_1000", "as_posted") in held
    assert ("+pt_head_1000", "fixed") in held
    certs = [certify_plan.not_run(p, "a test") for p in pairs]
    assert len({certify_plan.file_name(c) for c in certs}) == len(pairs)


def test_each_share_recovers_its_planted_value(seed000, base):
    results = planted(seed000, base, SEED000, PAIR)
    d = shares.decompose(_by_variant(results), SPEED, "epoch_time_s", "reported", "pytorch", "tensorflow")
    assert d is not None and d.complete and d.method == shares.REPEATS
    assert {s.factor for s in d.shares} == {p for p in SEED000 if ":" not in p} | {runs.NUMERICS}
    for s in d.shares:
        want = _planted_share(s.factor, SEED000, PAIR)
        assert s.share.value == pytest.approx(want, abs=1e-9), s.factor
        assert s.share.low < want < s.share.high, (s.factor, s.share)
        planted_joint = -math.log(PAIR[next(iter(PAIR))]) if s.factor in next(iter(PAIR)) else 0.0
        assert s.depends.low <= planted_joint <= s.depends.high, (s.factor, s.depends)
    gap = sum(_planted_share(s.factor, SEED000, PAIR) for s in d.shares)
    assert d.gap.value == pytest.approx(gap, abs=1e-9)
    assert d.interaction is not None and d.interaction.holds(0.0)
    assert d.shares[0].factor == "pt_cpu_resize_dataloader"
    assert shares.explaining(d) is d.shares[0]


CLAIM = """schema = "reprokit.claims/1"

[[claim]]
id = "planted-gap"
experiment = "{experiment}"
role = "figure"
title = "As posted, PyTorch takes longer per epoch"
source = {{ seed = "planted", where = "tests/test_decomposition.py" }}
statement = "PyTorch is slower"
published = [{{ label = "PyTorch / TensorFlow as posted", value = 3.0, unit = "x", variant = "as_posted" }}]
metric = {{ kind = "ratio", quantity = "epoch_time_s", variant = "as_posted", direction = "greater", numerator = {{ framework = "pytorch" }}, denominator = {{ framework = "tensorflow" }} }}
tolerance = {{ at_least = 1.2 }}
transfers = "a test"
"""


def _verdict(tmp_path: Path, results: list[dict]) -> verdicts.Verdict:
    path = tmp_path / "claims.toml"
    path.write_text(CLAIM.format(experiment=results[0]["experiment"]))
    [found] = verdicts.evaluate(claims_mod.load(path), results)
    return found


def test_a_reproduced_gap_is_explained_by_its_dominant_pitfall(seed000, base, tmp_path):
    found = _verdict(tmp_path, planted(seed000, base, SEED000, PAIR))
    assert found.status == verdicts.REPRODUCED and found.explained_by == "pt_cpu_resize_dataloader"
    assert found.label == "reproduced as posted, explained by pt_cpu_resize_dataloader (indicative)"
    assert "explained by pt_cpu_resize_dataloader: its share 3." in found.why


# The same dominant pitfall, but three of PyTorch's pitfalls cost more together than their single changes show;
# and a gap spread over several pitfalls, none of them half of it.
TRIPLE = {frozenset({"pt_item_per_step", "pt_metrics_per_batch", "pt_outputs_kept_alive"}): 2.0}
SPREAD = {**SEED000, "pt_cpu_resize_dataloader": 1.3, "pt_head_1000": 1.25, "pt_item_per_step": 1.25,
          "tf_batch_of_one": 0.8}


@pytest.mark.parametrize(("factor", "joint", "why"), [(SEED000, TRIPLE, "interaction"), (SPREAD, PAIR, "spread")],
                         ids=["three-way interaction", "spread gap"])
def test_the_verdict_says_explained_by_only_where_the_shares_support_it(seed000, base, tmp_path, factor, joint,
                                                                        why):
    results = planted(seed000, base, factor, joint)
    d = shares.decompose(_by_variant(results), SPEED, "epoch_time_s", "reported", "pytorch", "tensorflow")
    assert d is not None and d.interaction is not None
    if why == "interaction":        # the three-way term: each of the three carries half, so -1/2 of it is left
        assert d.interaction.value == pytest.approx(-math.log(2.0) / 2, abs=1e-9)
        assert not d.interaction.holds(0.0) and d.shares[0].factor == "pt_cpu_resize_dataloader"
    else:
        assert d.shares[0].beyond_half.value < 0
    assert shares.explaining(d) is None
    found = _verdict(tmp_path, results)
    assert found.status == verdicts.REPRODUCED and found.explained_by is None
    assert "explained by" not in found.why and found.label == "reproduced (indicative)"


USER_POSTED = """
[variants.as_posted]
description = "the user's posted loop: a sync per step and a blocking copy in PyTorch, batches of one in TensorFlow"
pitfalls = ["pt_item_per_step", "pt_blocking_copy", "tf_batch_of_one"]
"""
USER_FACTORS = {"pt_item_per_step": 1.3, "pt_blocking_copy": 1.1, "tf_batch_of_one": 2.0}
USER_PAIR = {frozenset({"pt_item_per_step", "pt_blocking_copy"}): 1.2}


def test_a_users_own_experiment_with_single_repeats_decomposes_over_epochs(tmp_path, base):
    """A user's folder whose as_posted has one TensorFlow pitfall: its +p and -p are as_posted's and fixed's own
    TensorFlow runs (planned once), and one repeat each resamples epochs."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "planted.toml").write_text(USER.read_text() + USER_POSTED)
    for helper in ("planted_models.py", "planted_hooks.py"):
        (folder / helper).write_text((USER.parent / helper).read_text())
    specs = _specs(load(folder / "planted.toml"), 1, tmp_path)
    planned = {(s["variant"], s["framework"]) for s in specs}
    assert ("+tf_batch_of_one", "tensorflow") not in planned and ("-tf_batch_of_one", "tensorflow") not in planned
    results = planted(specs, base, USER_FACTORS, USER_PAIR)
    d = shares.decompose(_by_variant(results), "planted", "epoch_time_s", "reported", "pytorch", "tensorflow")
    assert d is not None and d.complete and d.method == shares.EPOCHS
    for s in d.shares:
        want = _planted_share(s.factor, USER_FACTORS, USER_PAIR)
        assert s.share.value == pytest.approx(want, abs=1e-9) and s.share.low < want < s.share.high, s.factor
    assert d.interaction is not None and d.interaction.holds(0.0)


def test_the_table_the_waterfall_and_the_first_screen_line(seed000, base, tmp_path):
    results = planted(seed000, base, SEED000, PAIR)
    by_variant = _by_variant(results)
    decs = decomposition.decompositions(SPEED, by_variant, [])
    assert [d.quantity for d in decs] == ["epoch_time_s", "peak_memory_bytes"][:len(decs)]
    text = decomposition.section(decs)
    assert text is not None and "| `pt_cpu_resize_dataloader`" in text and "| interaction" in text
    assert all(len(p) <= 400 for p in text.split("\n\n") if not p.startswith("|"))
    line = decomposition.first_screen_line(decs)
    assert line is not None and line.startswith(f"- **Of the {decs[0].posted.ratio:.2f}x as posted**")
    assert "`pt_cpu_resize_dataloader` accounts for 3.00x (" in line and len(line) <= 400
    fig = decomposition.figure(decs)
    assert fig is not None and not plots.problems(fig), plots.problems(fig)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[0] == "as posted" and labels[-1] == "fixed" and "- the other 8" in labels
    assert len([t for t in labels if t.startswith("- ") and t not in ("- interaction", "- the other 8")]) == 5
    got = decomposition.write_plot(tmp_path, SPEED, decs, "VGG16 on gratings")
    assert got is not None and (tmp_path / got[1]).stat().st_size > 0 and len(got[0]) <= 400
    assert got[0] not in {t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))}
