"""Verdicts, the ablation table, plots and the report's sections, from the real quick-cpu result files.

Variants other than `fixed` are derived from the real files (copy, change variant, pitfalls and
figures), and each test checks that the verdict or the section follows the figures: it flips when
a figure crosses the tolerance, and its numbers are recomputed here from the files.
"""
from __future__ import annotations

import copy
import hashlib
import json
import re
import statistics
import textwrap
from pathlib import Path

import pytest

from kits.common.pitfalls import PITFALLS
from reprokit import claims as claims_mod
from reprokit import report, verdicts
from reprokit import results as results_mod
from reprokit.experiments import BUILTIN_DIR, discover

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "reports" / "quick-cpu" / "results"
SPEED, MEMORY = "vgg16_cifar10_speed", "simplecnn_cifar10_memory"


@pytest.fixture(scope="module")
def real() -> list[dict]:
    found = [json.loads(p.read_text()) for p in sorted(REAL.glob("*.json"))]
    assert {(r["experiment"], r["framework"]) for r in found} == {
        (e, f) for e in (SPEED, MEMORY) for f in ("pytorch", "tensorflow")}
    return found


@pytest.fixture(scope="module")
def seeds():
    return {c.id: c for c in claims_mod.load("seeds")}


@pytest.fixture(scope="module")
def experiments():
    return discover([BUILTIN_DIR])


def pick(runs: list[dict], experiment: str, framework: str, variant: str = "fixed") -> dict:
    return next(r for r in runs if (r["experiment"], r["framework"], r["variant"]) == (experiment, framework, variant))


def derive(base: dict, variant: str, pitfalls: list[str] | None = None, edit=None, **top) -> dict:
    """A copy of a real result as another variant (or profile/device), with its figures edited."""
    r = copy.deepcopy(base)
    pitfalls = pitfalls if pitfalls is not None else ([variant[1:]] if variant.startswith("+") else [])
    r["variant"] = r["spec"]["variant"] = variant
    r["spec"]["pitfalls"] = pitfalls
    r["spec"]["pitfall_summaries"] = {p: PITFALLS[p]["summary"] for p in pitfalls}
    for key, value in top.items():
        if key == "device":
            r["spec"]["device"] = r["environment"]["device"] = value
        elif key == "device_name":
            r["environment"]["device_name"] = value
        else:
            r[key] = r["spec"][key] = value
    if edit:
        edit(r)
    r["run_id"] = hashlib.sha256(json.dumps(r, sort_keys=True).encode()).hexdigest()[:16]
    r["spec"]["run_id"] = r["run_id"]
    return r


def scale_time(factor: float):
    def edit(r):
        for e in r["timing"]["epochs"]:
            e["train_s"] *= factor
            e["eval_s"] *= factor
        r["timing"]["samples_per_s"] /= factor
    return edit


def verdict(claim, runs) -> verdicts.Verdict:
    found = verdicts.evaluate([claim], runs)
    assert len(found) == 1, found
    return found[0]


def custom(tmp_path: Path, body: str) -> list:
    path = tmp_path / "custom.toml"
    path.write_text('schema = "reprokit.claims/1"\n\n' + textwrap.dedent(body))
    return claims_mod.load(path)


# --- quantities from real files ----------------------------------------------------------------

def test_quantities_are_computed_from_the_real_files(real):
    pt = pick(real, SPEED, "pytorch")
    epochs = pt["timing"]["epochs"]
    assert verdicts.quantity(pt, "total_time_s") == pytest.approx(sum(e["train_s"] + e["eval_s"] for e in epochs))
    assert verdicts.quantity(pt, "steps_per_s") == pytest.approx(
        sum(pt["effective"]["train_steps_per_epoch"]) / sum(e["train_s"] for e in epochs))
    assert verdicts.quantity(pt, "effective_batch_size") == 32
    assert verdicts.quantity(pt, "final_test_accuracy") == pt["metrics"]["epochs"][-1]["test_accuracy"]
    assert verdicts.quantity(pt, "peak_memory_bytes") == pt["memory"]["peak_bytes"]
    # the real runs' memory is flat over steps: well under the 5% the growth claim asks for
    for r in real:
        assert abs(verdicts.quantity(r, "memory_growth")) < 0.02
    with pytest.raises(verdicts.Unavailable) as info:
        verdicts.quantity(pt, "peak_memory_bytes", "allocated")
    assert info.value.hardware and "GPU" in info.value.reason


def test_accuracy_reported_per_batch_is_turned_back_into_per_sample(real):
    base = pick(real, SPEED, "pytorch")
    steps, samples = base["effective"]["train_steps_per_epoch"][-1], base["effective"]["train_samples_per_epoch"][-1]

    def per_batch(r):
        r["metrics"]["averaged_over"] = "batches"
        last = r["metrics"]["epochs"][-1]
        last["train_accuracy"] = 0.25 * samples / steps          # 0.25 per sample, summed and divided by batches
        last["test_accuracy"] = 3.2                              # as the post printed it
    r = derive(base, "as_posted", ["pt_metrics_per_batch"], per_batch)
    train, _ = verdicts.accuracy(r, "train")
    assert train == pytest.approx(0.25)
    test, note = verdicts.accuracy(r, "test")
    n, b = r["effective"]["test_samples"], r["spec"]["train"]["eval_batch_size"]
    assert test == pytest.approx(3.2 * -(-n // b) / n) and "per batch" in note


# --- verdicts flip with the measurement --------------------------------------------------------

def test_a_ratio_verdict_flips_where_the_measured_ratio_crosses_the_tolerance(real, seeds):
    claim = seeds["s004-memory-ratio"]                   # published 12 GB / 4 GB = 3.0, +-30%
    pt, tf = pick(real, MEMORY, "pytorch"), pick(real, MEMORY, "tensorflow")
    tf_posted = derive(tf, "as_posted", ["tf_posted_model"])
    tf_peak = tf_posted["memory"]["peak_bytes"]

    def pt_at(ratio):
        def edit(r):
            r["memory"]["peak_bytes"] = int(tf_peak * ratio)
        return derive(pt, "as_posted", ["pt_val_grad"], edit)
    inside, outside, below = (verdict(claim, [pt_at(x), tf_posted]) for x in (3.0 * 1.29, 3.0 * 1.31, 2.0))
    assert inside.status == verdicts.REPRODUCED and inside.value == pytest.approx(3.87, abs=0.01)
    assert outside.status == verdicts.NOT_REPRODUCED and "outside" in outside.why
    assert below.status == verdicts.NOT_REPRODUCED and "2.00x" in below.ours
    assert inside.indicative and inside.label == "reproduced (indicative)"
    # the real quick runs, as they are: a ratio of process memory near 1, so not reproduced
    real_ratio = pt["memory"]["peak_bytes"] / tf["memory"]["peak_bytes"]
    v = verdict(claim, [derive(pt, "as_posted", []), derive(tf, "as_posted", [])])
    assert v.status == verdicts.NOT_REPRODUCED and f"{real_ratio:.2f}x" in v.ours
    assert set(v.run_ids) and all(re.fullmatch(r"[0-9a-f]{16}", i) for i in v.run_ids)


def test_a_value_verdict_follows_the_observed_batch(real, seeds):
    tf = pick(real, SPEED, "tensorflow")

    def batch(mean):
        def edit(r):
            r["effective"]["batch_size"].update(mean=mean, min=int(mean), max=int(mean))
        return derive(tf, "as_posted", ["tf_batch_of_one"], edit)
    one, thirty_two = batch(1.0), batch(32.0)
    assert verdict(seeds["s000-answer-batch-of-one"], [one]).status == verdicts.REPRODUCED
    assert verdict(seeds["s000-answer-batch-of-one"], [thirty_two]).status == verdicts.NOT_REPRODUCED
    # the question's own claim (batch 32) is tested by the same measurement, the other way round
    assert verdict(seeds["s000-question-batch-32"], [one]).status == verdicts.NOT_REPRODUCED
    assert verdict(seeds["s000-question-batch-32"], [thirty_two]).status == verdicts.REPRODUCED


def test_memory_growth_over_steps_decides_the_accumulating_history_explanation(real, seeds):
    claim = seeds["s004-running-accuracy-accumulates"]   # grows by at least 5% over the measured steps
    pt = pick(real, MEMORY, "pytorch")
    flat = derive(pt, "+pt_running_acc_tensor")

    def leaking(per_step_fraction):
        def edit(r):
            level = r["memory"]["over_steps"][0][1]
            r["memory"]["over_steps"] = [[s, int(level * (1 + per_step_fraction * s))] for s, _ in r["memory"]["over_steps"]]
        return derive(pt, "+pt_running_acc_tensor", None, edit)
    v_flat = verdict(claim, [flat])
    assert v_flat.status == verdicts.NOT_REPRODUCED and "does not grow" in v_flat.why
    v_leak = verdict(claim, [leaking(0.002)])            # ~ +0.2% a step: ~17% over the fitted steps
    assert v_leak.status == verdicts.REPRODUCED and "grows" in v_leak.why
    assert v_leak.value == pytest.approx(verdicts.memory_growth(leaking(0.002))[1])
    assert verdict(claim, [leaking(0.0002)]).status == verdicts.NOT_REPRODUCED   # ~2%: below the threshold


def test_validation_without_no_grad_is_judged_on_the_evaluation_peak(real, seeds):
    claim = seeds["s004-validation-without-no-grad"]     # eval peak +pt_val_grad / fixed >= 1.1
    pt = pick(real, MEMORY, "pytorch")

    def with_peaks(variant, train, evaluation):
        def edit(r):
            r["memory"]["train_peak_bytes"], r["memory"]["eval_peak_bytes"] = train, evaluation
        return derive(pt, variant, None, edit)
    fixed = with_peaks("fixed", 800 << 20, 780 << 20)
    assert verdict(claim, [fixed, with_peaks("+pt_val_grad", 800 << 20, 900 << 20)]).status == verdicts.REPRODUCED
    v = verdict(claim, [fixed, with_peaks("+pt_val_grad", 800 << 20, 800 << 20)])
    assert v.status == verdicts.NOT_REPRODUCED and "is below the threshold of 1.10x" in v.why
    assert "process's resident memory" in v.why          # on a CPU the verdict says what its reading cannot show
    # a result file without the field (written before it existed) is not measured, not a verdict
    def older(r):
        r["memory"].pop("eval_peak_bytes", None)
    missing = verdict(claim, [derive(pt, "fixed", None, older), derive(pt, "+pt_val_grad", None, older)])
    assert missing.status == verdicts.NOT_MEASURED and "eval_peak_bytes" in missing.why
    # and a claim whose runs are absent says which run is missing
    absent = verdict(claim, [fixed])
    assert absent.status == verdicts.NOT_MEASURED and "+pt_val_grad" in absent.why


def test_accuracy_against_chance_says_whether_a_framework_learned(real, seeds):
    claim = seeds["s000-tensorflow-at-chance"]
    tf = pick(real, SPEED, "tensorflow")

    def final(acc):
        def edit(r):
            r["metrics"]["epochs"][-1]["test_accuracy"] = acc
        return derive(tf, "as_posted", ["tf_batch_of_one"], edit)
    at_chance = verdict(claim, [final(0.10)])
    assert at_chance.status == verdicts.REPRODUCED and at_chance.why.startswith("it did not learn")
    learned = verdict(claim, [final(0.16)])
    assert learned.status == verdicts.NOT_REPRODUCED and learned.why.startswith("it learned")
    assert "below chance" in verdict(claim, [final(0.02)]).why
    # the real quick run learned (0.914): the kit does not confirm the post on faith
    real_acc = tf["metrics"]["epochs"][-1]["test_accuracy"]
    assert verdict(claim, [derive(tf, "as_posted", [])]).status == (
        verdicts.REPRODUCED if real_acc <= 0.15 else verdicts.NOT_REPRODUCED)


def test_an_effect_must_be_there_as_posted_and_gone_when_fixed(real, seeds):
    claim = seeds["s000-gap-disappears-with-fix"]        # similar band 0.75-1.333
    pt, tf = pick(real, SPEED, "pytorch"), pick(real, SPEED, "tensorflow")
    real_fixed = verdicts.quantity(pt, "epoch_time_s") / verdicts.quantity(tf, "epoch_time_s")
    assert 0.75 <= real_fixed <= 1.333                   # what the real files say

    def case(pt_posted, tf_posted, pt_fixed=1.0):
        return [derive(pt, "as_posted", ["pt_head_1000"], scale_time(pt_posted)),
                derive(tf, "as_posted", ["tf_batch_of_one"], scale_time(tf_posted)),
                derive(pt, "fixed", [], scale_time(pt_fixed)), tf]
    gone = verdict(claim, case(4.0, 1.0))
    assert gone.status == verdicts.REPRODUCED and "the gap comes from what the fix removes" in gone.why
    assert gone.value == pytest.approx(4.0 * real_fixed)
    no_gap = verdict(claim, case(1.0, 1.0))
    assert no_gap.status == verdicts.NOT_REPRODUCED and "no gap to remove" in no_gap.why
    stays = verdict(claim, case(4.0, 1.0, pt_fixed=2.0))
    assert stays.status == verdicts.NOT_REPRODUCED and "does not close the gap" in stays.why


def test_absolute_figures_are_not_comparable_off_the_published_setting(real, seeds, tmp_path):
    claim = seeds["s000-pytorch-total-time"]
    pt = pick(real, SPEED, "pytorch")
    quick = verdict(claim, [derive(pt, "as_posted")])
    assert quick.status == verdicts.NOT_COMPARABLE
    assert "quick profile" in quick.why and "cpu" in quick.why and "not the published setting" in quick.ours
    # the full experiment on a GPU the post does not name is still not comparable, and says why
    gpu = derive(pt, "as_posted", [], profile="full", device="gpu", device_name="NVIDIA H200")
    v = verdict(claim, [gpu])
    assert v.status == verdicts.NOT_COMPARABLE and "Colab Pro+" in v.why and "NVIDIA H200" in v.why
    assert not v.indicative
    # a claim published on a named GPU gets a verdict on that GPU, by the same evaluator
    [named] = custom(tmp_path, f"""
        [[claim]]
        id = "h200-time"
        experiment = "{SPEED}"
        role = "figure"
        title = "t"
        source = {{ seed = "x", where = "y" }}
        statement = "s"
        published = [ {{ label = "PyTorch", value = {verdicts.quantity(gpu, "total_time_s") / 60 * 1.1}, unit = "min" }} ]
        metric = {{ kind = "value", quantity = "total_time_s", framework = "pytorch", variant = "as_posted" }}
        tolerance = {{ relative = 0.15 }}
        transfers = "t"
        comparable = {{ profiles = ["full"], devices = ["gpu"], hardware = "an H200", hardware_match = ["H200"] }}
        """)
    assert verdict(named, [gpu]).status == verdicts.REPRODUCED
    assert verdict(named, [derive(gpu, "as_posted", [], scale_time(1.3))]).status == verdicts.NOT_REPRODUCED
    assert verdict(named, [derive(gpu, "as_posted", [], device_name="NVIDIA A100")]).status == verdicts.NOT_COMPARABLE


def test_the_memory_verdict_names_the_reading_that_could_give_the_posted_figure(real, seeds):
    claim = seeds["s004-pytorch-12gb"]                   # 12 GB, reading not stated: every reading compared
    pt = pick(real, MEMORY, "pytorch")

    def on_gpu(allocated, reserved):
        def edit(r):
            r["memory"].update(peak_bytes=allocated, source="torch.cuda.max_memory_allocated",
                               framework={"peak_allocated": allocated, "peak_reserved": reserved})
        return derive(pt, "as_posted", ["pt_val_grad"], edit, profile="standard", device="gpu",
                      device_name="NVIDIA H200")
    hit = verdict(claim, [on_gpu(3_000_000_000, 11_500_000_000)])
    assert hit.status == verdicts.REPRODUCED and "by the reserved reading" in hit.why
    assert "allocated 3 GB" in hit.ours and "reserved 11.5 GB" in hit.ours   # in the published unit
    assert "Not recorded: device" in hit.why              # the NVML reading is named as missing
    assert "resident memory" not in hit.why
    # the NVML device-level reading, where the kit recorded one, is compared like the others
    def with_device(r):
        r["memory"]["framework"].update(device_peak_bytes=12_400_000_000, device_source="NVML device memory used")
    nvml = verdict(claim, [derive(on_gpu(3_000_000_000, 6_000_000_000), "as_posted", ["pt_val_grad"], with_device)])
    assert nvml.status == verdicts.REPRODUCED and "by the device reading" in nvml.why
    assert "device = NVML device memory used" in nvml.why and "Not recorded" not in nvml.why
    miss = verdict(claim, [on_gpu(3_000_000_000, 6_000_000_000)])
    assert miss.status == verdicts.NOT_REPRODUCED and "the nearest, reserved, is 0.50x" in miss.why
    # on the CPU the quick run's process memory is not comparable with GPU memory
    assert verdict(claim, [derive(pt, "as_posted")]).status == verdicts.NOT_COMPARABLE


def test_a_ratio_of_an_allocator_reading_is_not_comparable_on_a_cpu(real, tmp_path):
    [claim] = custom(tmp_path, f"""
        [[claim]]
        id = "allocated-ratio"
        experiment = "{MEMORY}"
        role = "figure"
        title = "t"
        source = {{ seed = "x", where = "y" }}
        statement = "s"
        published = [ {{ label = "r", value = 3, unit = "x" }} ]
        metric = {{ kind = "ratio", quantity = "peak_memory_bytes", reading = "allocated", variant = "fixed", numerator = {{ framework = "pytorch" }}, denominator = {{ framework = "tensorflow" }} }}
        tolerance = {{ relative = 0.3 }}
        transfers = "t"
        """)
    v = verdict(claim, real)
    assert v.status == verdicts.NOT_COMPARABLE and "only on a GPU" in v.why


# --- the report ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def matrix(real) -> list[dict]:
    """The real fixed runs plus as-posted and single-pitfall runs derived from them."""
    out = list(real)
    pt_s, tf_s = pick(real, SPEED, "pytorch"), pick(real, SPEED, "tensorflow")

    def batch_of_one(r):
        r["effective"]["batch_size"].update(mean=1.0, min=1, max=1)
        r["effective"]["train_samples_per_epoch"] = r["effective"]["train_steps_per_epoch"][:]
        r["timing"]["samples_per_s"] /= 3
        for e in r["timing"]["epochs"]:
            e["train_s"] /= 10
        for e in r["metrics"]["epochs"]:
            e["test_accuracy"] = 0.1
    speed_tf = [p for p in PITFALLS if PITFALLS[p]["framework"] == "tensorflow" and p.startswith("tf_")][:5]
    out += [derive(tf_s, "as_posted", speed_tf, batch_of_one), derive(tf_s, "+tf_batch_of_one", None, batch_of_one),
            derive(pt_s, "as_posted", ["pt_head_1000", "pt_cpu_resize_dataloader"], scale_time(1.5)),
            derive(pt_s, "+pt_cpu_resize_dataloader", None, scale_time(1.5))]
    pt_m, tf_m = pick(real, MEMORY, "pytorch"), pick(real, MEMORY, "tensorflow")
    out += [derive(pt_m, "as_posted", ["pt_val_grad", "pt_running_acc_tensor"]), derive(pt_m, "+pt_val_grad"),
            derive(tf_m, "as_posted", ["tf_posted_model"])]
    for r in out:
        assert results_mod.problems(r) is None, results_mod.problems(r)
    return out


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    nxt = text.find("\n## ", start + len(heading))
    return text[start: nxt if nxt >= 0 else None]


def test_the_first_section_says_what_the_posted_comparison_measured(matrix, experiments, seeds):
    text = report.render("t", matrix, experiments, claims=list(seeds.values()))
    headings = re.findall(r"^## .*$", text, flags=re.M)
    assert headings[0] == "## What the posted comparison really measured"
    assert headings[1] == "## Claims"
    body = _section(text, "## What the posted comparison really measured")
    speed = next(p for p in body.split("\n\n") if "VGG16" in p)
    assert "TensorFlow fed batches of 1 sample(s) where 32 were configured" in speed
    # the ratios in the sentence are the result files' figures, recomputed here
    by = {(r["framework"], r["variant"]): r for r in matrix if r["experiment"] == SPEED}
    posted = verdicts.quantity(by[("pytorch", "as_posted")], "epoch_time_s") / verdicts.quantity(
        by[("tensorflow", "as_posted")], "epoch_time_s")
    fixed = verdicts.quantity(by[("pytorch", "fixed")], "epoch_time_s") / verdicts.quantity(
        by[("tensorflow", "fixed")], "epoch_time_s")
    assert f"time per epoch is {posted:.2f}x as posted and {fixed:.2f}x fixed" in speed
    assert "as posted PyTorch" in speed and "TensorFlow 0.100 (at chance)" in speed
    pt_acc = by[("pytorch", "as_posted")]["metrics"]["epochs"][-1]["test_accuracy"]
    assert f"PyTorch {pt_acc:.3f} ({verdicts.learned(pt_acc, 10)})" in speed
    memory = next(p for p in body.split("\n\n") if "SimpleCNN" in p)
    assert "did the same work" in memory and "The answers' explanations, tested:" in memory


def test_the_claims_table_shows_published_ours_and_computed_verdicts(matrix, experiments, seeds):
    text = report.render("t", matrix, experiments, claims=list(seeds.values()))
    table = _section(text, "## Claims")
    assert "Indicative (quick profile)" in table
    found = {v.claim.id: v for v in verdicts.evaluate(list(seeds.values()), matrix)}
    for cid, v in found.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| **{report.md(cid)}**"))
        assert f"**{v.label}**" in row
        for run_id in v.run_ids:
            assert f"(results/{run_id}.json)" in row
    assert found["s000-answer-batch-of-one"].status == verdicts.REPRODUCED
    assert found["s000-pytorch-total-time"].status == verdicts.NOT_COMPARABLE
    assert "“42m 22s” (2542 s)" in table and "seed `000`" in table


def test_the_ablation_table_sets_each_pitfall_against_fixed(matrix, experiments):
    text = report.render("t", matrix, experiments)
    section = _section(text, "## VGG16")
    ablation = section[section.index("### Ablation"):]
    ablation = ablation[:ablation.index("\n###", 5)]
    rows = [line for line in ablation.splitlines() if line.startswith("| ")][1:]
    variants = [(cells[1].strip(), cells[2].strip()) for cells in (row.split("|") for row in rows)]
    assert variants == [("PyTorch", "fixed"), ("PyTorch", "+pt\\_cpu\\_resize\\_dataloader"), ("PyTorch", "as\\_posted"),
                        ("TensorFlow", "fixed"), ("TensorFlow", "+tf\\_batch\\_of\\_one"), ("TensorFlow", "as\\_posted")]
    by = {(r["framework"], r["variant"]): r for r in matrix if r["experiment"] == SPEED}
    alone = by[("tensorflow", "+tf_batch_of_one")]
    ratio = alone["timing"]["samples_per_s"] / by[("tensorflow", "fixed")]["timing"]["samples_per_s"]
    row = next(r for r in rows if "+tf\\_batch\\_of\\_one" in r)
    assert f"{alone['timing']['samples_per_s']:,.1f} ({ratio:.2f}x)" in row
    assert PITFALLS["tf_batch_of_one"]["summary"].split(";")[0].replace("_", "\\_") in row
    assert "(-0.814)" in row                             # 0.100 against the fixed run's 0.914
    # the like-for-like table stays, for the fixed runs only
    side = section[section.index("### PyTorch and TensorFlow, `fixed` variant"):section.index("### Ablation")]
    throughput = next(line for line in side.splitlines() if line.startswith("| throughput"))
    cells = [c.strip() for c in throughput.split("|")[2:4]]
    assert cells == [f"{by[(fw, 'fixed')]['timing']['samples_per_s']:,.1f}" for fw in ("pytorch", "tensorflow")]


def test_run_time_findings_are_listed_per_variant(matrix, experiments):
    def finding(r):
        r["findings"] = [{"code": "effective-batch-size", "severity": "error",
                          "message": "configured batch size 32, but the model received at most 1 sample(s) per step"}]
    tf = pick(matrix, SPEED, "tensorflow", "as_posted")
    runs = [r for r in matrix if r is not tf] + [derive(tf, "as_posted", tf["spec"]["pitfalls"], finding)]
    section = _section(report.render("t", runs, experiments), "## VGG16")
    found = section[section.index("### Findings at run time"):]
    row = next(line for line in found.splitlines() if "effective-batch-size" in line)
    assert "TensorFlow" in row and "as\\_posted" in row and "at most 1 sample(s) per step" in row
    # the pair of fixed runs: declared differences are info
    assert any(line.startswith("| both") and "fixed" in line and "declared" in line for line in found.splitlines())


def test_write_puts_linked_plots_beside_the_report(matrix, experiments, seeds, tmp_path):
    stale = tmp_path / "gone_experiment-throughput.png"
    stale.write_bytes(b"old")
    path = report.write(tmp_path, "t", matrix, experiments, claims=list(seeds.values()))
    text = path.read_text()
    assert not stale.exists()
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == sorted(f"{e}-{kind}.png" for e in (SPEED, MEMORY) for kind in ("throughput", "memory"))
    for name in pngs:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({name})" in text
    for r in matrix:
        assert f"(results/{r['run_id']}.json)" in text


def test_the_report_without_claims_or_variants_still_renders(real, experiments):
    text = report.render("plain", real, experiments)
    assert "## Claims" not in text
    # the seed experiments define as_posted, so the first section says it did not run
    first = _section(text, "## What the posted comparison really measured")
    assert first.count("the as-posted variant did not run") == 2
    assert "| throughput (samples/s, after warmup)" in text
    pt = pick(real, MEMORY, "pytorch")
    assert f"{pt['timing']['samples_per_s']:,.1f}" in text


def test_a_failed_run_is_listed_and_the_rest_still_reported(real, experiments, seeds):
    failed = {**copy.deepcopy(pick(real, SPEED, "tensorflow")), "status": "failed", "run_id": "f" * 16,
              "variant": "as_posted",
              "failure": {"kind": "oom", "message": "killed", "log_tail": ["x"]}}
    text = report.render("t", [*real, failed], experiments, claims=list(seeds.values()))
    assert "## Failed runs" in text and "**oom**" in text
    v = {v.claim.id: v for v in verdicts.evaluate(list(seeds.values()), [*real, failed])}
    assert v["s000-answer-batch-of-one"].status == verdicts.NOT_MEASURED


def test_a_pitfall_run_once_under_another_name_still_answers_for_it(real, tmp_path):
    [claim] = custom(tmp_path, f"""
        [[claim]]
        id = "tf-model-alone"
        experiment = "{MEMORY}"
        role = "explanation"
        title = "t"
        source = {{ seed = "x", where = "y" }}
        statement = "s"
        published = [ {{ label = "a", text = "more memory", unit = "qualitative" }} ]
        metric = {{ kind = "ratio", quantity = "peak_memory_bytes", framework = "tensorflow", numerator = {{ variant = "+tf_posted_model" }}, denominator = {{ variant = "fixed" }} }}
        tolerance = {{ at_least = 1.1 }}
        transfers = "t"
        """)
    tf = pick(real, MEMORY, "tensorflow")
    # the planner runs as_posted's only TensorFlow pitfall once, as "as_posted", not again as "+tf_posted_model"
    posted = derive(tf, "as_posted", ["tf_posted_model"])
    v = verdict(claim, [tf, posted])
    assert v.status == verdicts.NOT_REPRODUCED and posted["run_id"] in v.run_ids
    # a run with other pitfalls does not stand in for it
    other = derive(tf, "as_posted", ["tf_posted_model", "tf_inputs_0_255"])
    assert verdict(claim, [tf, other]).status == verdicts.NOT_MEASURED


def test_repeats_are_summarised_by_their_median(real, seeds):
    tf = pick(real, SPEED, "tensorflow")
    runs = []
    for i, mean in enumerate((1.0, 1.0, 32.0)):
        def edit(r, mean=mean):
            r["effective"]["batch_size"]["mean"] = mean
        runs.append(derive(tf, "as_posted", ["tf_batch_of_one"], edit, repeat=i))
    v = verdict(seeds["s000-answer-batch-of-one"], runs)
    assert v.status == verdicts.REPRODUCED and len(v.run_ids) == 3
    assert statistics.median([1.0, 1.0, 32.0]) == v.value
