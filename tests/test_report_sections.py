"""Verdicts, the first screen, the tables, plots, details.md and summary.csv, from real result files.

Variants other than `fixed` are derived from the real files (copy, change variant, pitfalls and
figures), and each test checks that the verdict or the section follows the figures: it flips when
a figure crosses the tolerance, and its numbers are recomputed here from the files.
"""
from __future__ import annotations

import copy
import csv
import hashlib
import json
import re
import statistics
import textwrap
from pathlib import Path

import pytest

from reprokit import report
from reprokit.claims import claims as claims_mod
from reprokit.claims import verdicts
from reprokit.kits.contract.pitfalls import PITFALLS
from reprokit.plan.experiments import BUILTIN_DIR, discover
from reprokit.report import certificate_section, decomposition, explanations, plots, sections
from reprokit.report.markdown import anchor
from reprokit.results import metrics, runs
from reprokit.results import results as results_mod

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "reports" / "quick-cpu" / "results"
SEEDS_REPORT = REPO / "reports" / "seeds-quick-cpu"
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


def older(r: dict) -> dict:
    """A result as kits wrote them before memory by phase and FLOPs in every run (such files still render)."""
    r = copy.deepcopy(r)
    r["memory"].pop("phases", None)
    r["model"].pop("flops_per_sample", None)
    return r


def phases(train: int, evaluation: int):
    """Per-phase peaks as a kit that resets its counters at each phase records them (metrics reads these)."""
    def edit(r):
        r["memory"]["phases"] = [{"epoch": 1, "phase": "train", "peak_bytes": train, "source": "VmHWM per phase"},
                                 {"epoch": 1, "phase": "eval", "peak_bytes": evaluation, "source": "VmHWM per phase"}]
    return edit


CLAIM = """
    [[claim]]
    id = "{id}"
    experiment = "{experiment}"
    role = "figure"
    title = "t"
    source = {{ seed = "x", where = "y" }}
    statement = "s"
    published = [ {published} ]
    metric = {{ {metric} }}
    tolerance = {{ {tolerance} }}
    transfers = "t"
    {extra}
    """


def one_claim(tmp_path: Path, experiment: str, published: str, metric: str, tolerance: str, extra: str = ""):
    [claim] = custom(tmp_path, CLAIM.format(id="c", experiment=experiment, published=published, metric=metric,
                                            tolerance=tolerance, extra=extra))
    return claim


# --- verdicts follow the measurement, both ways --------------------------------------------------

def test_accuracy_reported_per_batch_is_turned_back_into_per_sample(real):
    base = pick(real, SPEED, "pytorch")
    steps, samples = base["effective"]["train_steps_per_epoch"][-1], base["effective"]["train_samples_per_epoch"][-1]

    def per_batch(r):
        r["metrics"]["averaged_over"] = "batches"
        last = r["metrics"]["epochs"][-1]
        last["train_accuracy"] = 0.25 * samples / steps          # 0.25 per sample, summed and divided by batches
        last["test_accuracy"] = 3.2                              # as the post printed it
    r = derive(base, "as_posted", ["pt_metrics_per_batch"], per_batch)
    assert metrics.value(r, "final_train_accuracy") == pytest.approx(0.25)
    test = metrics.read(r, "final_test_accuracy")
    n, b = r["effective"]["test_samples"], r["spec"]["train"]["eval_batch_size"]
    assert test.value == pytest.approx(3.2 * -(-n // b) / n) and "per batch" in test.source


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
    assert below.status == verdicts.NOT_REPRODUCED and below.ours.startswith("2.00x")
    assert inside.indicative and inside.label == "reproduced (indicative)"
    # the real quick runs, as they are: a ratio of process memory near 1, so not reproduced
    real_ratio = pt["memory"]["peak_bytes"] / tf["memory"]["peak_bytes"]
    v = verdict(claim, [derive(pt, "as_posted", []), derive(tf, "as_posted", [])])
    assert v.status == verdicts.NOT_REPRODUCED and v.ours.startswith(f"{real_ratio:.2f}x")
    assert "MiB" in v.ours and "GB" not in v.ours.replace("GiB", "")          # ours in MiB or GiB
    assert set(v.run_ids) and all(re.fullmatch(r"[0-9a-f]{16}", i) for i in v.run_ids)


def test_a_ratio_pointing_the_other_way_is_not_reproduced(real, tmp_path):
    """A band that straddles 1 still needs the published direction: 0.5x is not 'PyTorch takes longer'."""
    claim = one_claim(tmp_path, SPEED, '{ label = "r", value = 1.5, unit = "x" }',
                      'kind = "ratio", quantity = "total_time_s", variant = "fixed", direction = "greater", '
                      'numerator = { framework = "pytorch" }, denominator = { framework = "tensorflow" }',
                      "relative = 0.9")                  # band 0.15x-2.85x
    pt, tf = pick(real, SPEED, "pytorch"), pick(real, SPEED, "tensorflow")
    base = metrics.value(pt, "total_time_s") / metrics.value(tf, "total_time_s")
    slower = verdict(claim, [derive(pt, "fixed", [], scale_time(1.5 / base)), tf])
    faster = verdict(claim, [derive(pt, "fixed", [], scale_time(0.5 / base)), tf])
    assert slower.status == verdicts.REPRODUCED and slower.value == pytest.approx(1.5)
    assert faster.status == verdicts.NOT_REPRODUCED and faster.value == pytest.approx(0.5)
    assert "points the other way" in faster.why and "inside" in faster.why


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
    assert v_leak.value == pytest.approx(metrics.memory_growth(leaking(0.002))[1])
    assert verdict(claim, [leaking(0.0002)]).status == verdicts.NOT_REPRODUCED   # ~2%: below the threshold


def test_validation_without_no_grad_is_judged_on_the_evaluation_phase_peak(real, seeds):
    claim = seeds["s004-validation-without-no-grad"]     # eval peak +pt_val_grad / fixed >= 1.1
    pt = pick(real, MEMORY, "pytorch")
    fixed = derive(pt, "fixed", None, phases(800 << 20, 780 << 20))
    grew = verdict(claim, [fixed, derive(pt, "+pt_val_grad", None, phases(800 << 20, 900 << 20))])
    assert grew.status == verdicts.REPRODUCED and grew.value == pytest.approx(900 / 780)
    v = verdict(claim, [fixed, derive(pt, "+pt_val_grad", None, phases(800 << 20, 800 << 20))])
    assert v.status == verdicts.NOT_REPRODUCED and "is below the threshold of 1.10x" in v.why
    assert "process's resident memory" in v.why          # on a CPU the verdict says what its reading cannot show
    # files from before memory by phase hold only memory sampled after steps: not measured, not a verdict
    old = verdict(claim, [older(pt), derive(older(pt), "+pt_val_grad")])
    assert old.status == verdicts.NOT_MEASURED and "memory.phases" in old.why
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


def test_an_effect_must_be_there_as_posted_point_the_published_way_and_be_gone_when_fixed(real, seeds):
    claim = seeds["s000-gap-disappears-with-fix"]        # similar band 0.75-1.333, PyTorch slower as posted
    pt, tf = pick(real, SPEED, "pytorch"), pick(real, SPEED, "tensorflow")
    real_fixed = metrics.value(pt, "epoch_time_s") / metrics.value(tf, "epoch_time_s")
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
    # PyTorch four times faster as posted is a gap, but not the published one
    backwards = verdict(claim, case(0.25, 1.0))
    assert backwards.status == verdicts.NOT_REPRODUCED and "other side" in backwards.why


def test_absolute_figures_are_not_comparable_off_the_published_setting(real, seeds, tmp_path):
    claim = seeds["s000-pytorch-total-time"]
    pt = pick(real, SPEED, "pytorch")
    quick = verdict(claim, [derive(pt, "as_posted")])
    assert quick.status == verdicts.NOT_COMPARABLE
    assert "quick profile" in quick.why and "cpu" in quick.why and "(quick, cpu)" in quick.ours
    # the full experiment on a GPU the post does not name is still not comparable, and says why
    gpu = derive(pt, "as_posted", [], profile="full", device="gpu", device_name="NVIDIA H200")
    v = verdict(claim, [gpu])
    assert v.status == verdicts.NOT_COMPARABLE and "Colab Pro+" in v.why and "NVIDIA H200" in v.why
    assert not v.indicative
    # a claim published on a named GPU gets a verdict on that GPU, by the same evaluator
    named = one_claim(tmp_path, SPEED,
                      f'{{ label = "PyTorch", value = {metrics.value(gpu, "total_time_s") / 60 * 1.1}, unit = "min" }}',
                      'kind = "value", quantity = "total_time_s", framework = "pytorch", variant = "as_posted"',
                      "relative = 0.15",
                      'comparable = { profiles = ["full"], devices = ["gpu"], hardware = "an H200", '
                      'hardware_match = ["H200"] }')
    assert verdict(named, [gpu]).status == verdicts.REPRODUCED
    assert verdict(named, [derive(gpu, "as_posted", [], scale_time(1.3))]).status == verdicts.NOT_REPRODUCED
    assert verdict(named, [derive(gpu, "as_posted", [], device_name="NVIDIA A100")]).status == verdicts.NOT_COMPARABLE


def test_a_memory_claim_is_judged_on_the_one_reading_it_names(real, seeds):
    claim = seeds["s004-pytorch-12gb"]                   # 12 GB, judged on the device-level (NVML) peak
    assert claim.operands["value"].reading == "device"
    pt = pick(real, MEMORY, "pytorch")

    def on_gpu(allocated, reserved, device=None):
        def edit(r):
            fw = {"peak_allocated": allocated, "peak_reserved": reserved}
            if device is not None:
                fw.update(device_peak_bytes=device, device_source="NVML device memory used")
            r["memory"].update(peak_bytes=allocated, source="torch.cuda.max_memory_allocated", framework=fw)
        return derive(pt, "as_posted", ["pt_val_grad"], edit, profile="standard", device="gpu",
                      device_name="NVIDIA H200")
    hit = verdict(claim, [on_gpu(3_000_000_000, 6_000_000_000, device=11_900_000_000)])
    assert hit.status == verdicts.REPRODUCED and "NVML device memory used" in hit.why
    assert hit.ours == "11.08 GiB"                       # ours in GiB, whatever unit the post used
    # another reading that happens to match is not a second chance: the claim named its reading in advance
    reserved_only = verdict(claim, [on_gpu(3_000_000_000, 12_000_000_000, device=6_000_000_000)])
    assert reserved_only.status == verdicts.NOT_REPRODUCED
    # a GPU result without the named reading is not measured; on a CPU it is not comparable
    missing = verdict(claim, [on_gpu(3_000_000_000, 12_000_000_000)])
    assert missing.status == verdicts.NOT_MEASURED and "device" in missing.why
    assert verdict(claim, [derive(pt, "as_posted")]).status == verdicts.NOT_COMPARABLE


def test_a_ratio_of_an_allocator_reading_is_not_comparable_on_a_cpu(real, tmp_path):
    claim = one_claim(tmp_path, MEMORY, '{ label = "r", value = 3, unit = "x" }',
                      'kind = "ratio", quantity = "peak_memory_bytes", reading = "allocated", variant = "fixed", '
                      'numerator = { framework = "pytorch" }, denominator = { framework = "tensorflow" }',
                      "relative = 0.3")
    v = verdict(claim, real)
    assert v.status == verdicts.NOT_COMPARABLE and "only on a GPU" in v.why


def test_a_pitfall_run_once_under_another_name_still_answers_for_it(real, tmp_path):
    claim = one_claim(tmp_path, MEMORY, '{ label = "a", text = "more memory", unit = "qualitative" }',
                      'kind = "ratio", quantity = "peak_memory_bytes", reading = "reported", framework = "tensorflow", '
                      'numerator = { variant = "+tf_posted_model" }, denominator = { variant = "fixed" }',
                      "at_least = 1.1")
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


@pytest.fixture(scope="module")
def certificates() -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for path in sorted(SEEDS_REPORT.glob("certificate-*.json")):
        cert = json.loads(path.read_text())
        out.setdefault(cert["experiment"], []).append(cert)
    assert set(out) == {SPEED, MEMORY}
    return out


def _section(text: str, heading: str) -> str:
    start = re.search("^" + re.escape(heading), text, flags=re.MULTILINE).start()
    nxt = text.find("\n## ", start + len(heading))
    return text[start: nxt if nxt >= 0 else None]


def _cells(text: str) -> list[str]:
    return [c.strip() for line in text.splitlines() if line.startswith("|")
            for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def test_the_first_screen_answers_each_seed(matrix, experiments, seeds, certificates):
    text = report.render("t", matrix, experiments, claims=list(seeds.values()), certificates=certificates)
    first = "\n".join(text.splitlines()[:40])
    for exp_name in (SPEED, MEMORY):
        meta = experiments[exp_name].doc["experiment"]
        assert f"Seed {meta['seed_case'][:3]}: {meta['question']}" in first
    assert first.count("**The posted comparison really measured:**") == 2
    assert first.count("**Verdicts (indicative: quick profile):**") == 2
    speed = first[first.index("Seed 000"):first.index("Seed 004")]
    assert "TensorFlow fed batches of 1 sample(s) where 32 were configured" in speed
    # our ratio, PyTorch / TensorFlow, of the quantity the seed's ratio claim names, recomputed from the files
    by = {(r["framework"], r["variant"]): r for r in matrix if r["experiment"] == SPEED}
    posted, fixed = (metrics.value(by[("pytorch", v)], "total_time_s") / metrics.value(by[("tensorflow", v)],
                                                                                        "total_time_s")
                     for v in ("as_posted", "fixed"))
    assert "**PyTorch / TensorFlow, total time (train + eval)** (lower is better" in speed
    assert f"  - as posted {posted:.2f}x. A single repeat: no test.\n  - fixed {fixed:.2f}x. A single repeat: no test." \
        in speed
    found = {v.claim.id: v for v in verdicts.evaluate(list(seeds.values()), matrix)}
    reproduced = [cid for cid, v in found.items() if v.status == verdicts.REPRODUCED and cid.startswith("s000")]
    assert reproduced and all(f"`{cid}`" in speed for cid in reproduced)
    assert "## Claims" not in first or text.index("## Claims") > text.index("Seed 004")


def test_no_table_cell_is_longer_than_about_120_characters(matrix, experiments, seeds, certificates, tmp_path):
    report.write(tmp_path, "t", matrix, experiments, claims=list(seeds.values()), certificates=certificates)
    text = (tmp_path / "report.md").read_text()
    cells = _cells(text)
    assert len(cells) > 300 and max(map(len, cells)) <= 125, max(cells, key=len)
    assert not _cells((tmp_path / "details.md").read_text())          # the long evidence is prose, not cells
    # the certificates' evidence is in details.md, not in report.md
    flops = next(c for c in certificates[SPEED][0]["checks"] if c["name"] == "flops")["evidence"]
    assert report.md(flops) not in text and report.md(flops) in (tmp_path / "details.md").read_text()
    # and every claim's reasons too
    found = verdicts.evaluate(list(seeds.values()), matrix)
    for v in found:
        assert report.md(v.why) in (tmp_path / "details.md").read_text()


def test_one_convention_ratios_pytorch_over_tensorflow_memory_in_mib_titles_say_what_ran(matrix, experiments):
    text = report.render("t", matrix, experiments)
    section = _section(text, "## Seed 000, as run:")
    heading = section.splitlines()[0]
    # the run was generated data at 48x48 and a narrower model: the title says so, not "CIFAR-10 224x224"
    spec = pick(matrix, SPEED, "pytorch")["spec"]
    assert f"at {spec['data']['input_size']}x{spec['data']['input_size']}" in heading and "learnable" in heading
    assert f"width {spec['model']['width_multiplier']:g}x" in heading and "224" not in heading
    assert "*Published setting:* VGG16 on CIFAR-10 resized to 224x224" in section
    side = section[section.index("| "):section.index("Peak memory sources")]
    header = side.splitlines()[0]
    assert "| PyTorch / TensorFlow" in header and "| better" in header
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in side.splitlines()[2:] if line.startswith("|")}
    for label, q in (("throughput (samples/s, after warmup)", "samples_per_s"), ("step time p50 (ms)", "step_time_p50_s"),
                     ("peak memory (the run's own reading)", "peak_memory_bytes")):
        pt, tf = (metrics.value(pick(matrix, SPEED, fw), q) for fw in ("pytorch", "tensorflow"))
        assert rows[label][2].startswith(f"{pt / tf:.2f}x") and rows[label][3] == metrics.QUANTITIES[q].better
    assert re.fullmatch(r"[\d,]+ MiB", rows["peak memory (the run's own reading)"][0])
    assert re.fullmatch(r"[\d,]+ MiB", rows["evaluation phase peak memory"][0])
    assert not re.search(r"\d (GB|MB)\b", section)
    old = report.render("t", [older(r) for r in matrix], experiments)
    assert "| evaluation phase peak memory | not measured" in re.sub(r" +", " ", old)   # older results: said, not hidden


def _repeats(base: dict, n: int, spread: float, scale: float = 1.0) -> list[dict]:
    def edit(i):
        def apply(r):
            r["timing"]["samples_per_s"] *= scale * (1 + spread * (i - (n - 1) / 2) / n)
        return apply
    return [derive(base, "fixed", [], edit(i), repeat=i) for i in range(n)]


def test_brackets_and_tests_say_what_the_repeats_allow(real, experiments):
    pt, tf = pick(real, SPEED, "pytorch"), pick(real, SPEED, "tensorflow")

    def throughput_row(runs):
        text = report.render("t", runs, experiments)
        return next(line for line in text.splitlines() if line.startswith("| throughput"))
    three = throughput_row(_repeats(pt, 3, 0.1) + _repeats(tf, 3, 0.1))
    assert "range" in three and "3 repeats" in three and "pairwise range" in three and "≥56%" in three
    assert "3 vs 3 repeats: no test can reach p < 0.05" in three
    six = throughput_row(_repeats(pt, 6, 0.1) + _repeats(tf, 6, 0.1, scale=2.0))
    assert "97% interval" in six and "Mann-Whitney U p = 0.0022: significant at 0.05" in six
    assert "≥94% interval" in six


def test_the_ablation_table_sets_each_pitfall_against_fixed(matrix, experiments):
    text = report.render("t", matrix, experiments)
    section = _section(text, "## Seed 000")
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
    assert ("- `as\\_posted` (PyTorch), 2 pitfall(s) together: pt\\_head\\_1000, pt\\_cpu\\_resize\\_dataloader."
            in ablation)
    assert "[the ablation](details.md#the-ablation)" in ablation          # its explanation is in details.md, once


def test_the_ablation_notes_name_the_phase_peaks_source_and_the_posted_readers(matrix, experiments):
    phases = [{"epoch": 1, "phase": "train", "steps": 8, "peak_bytes": 800 << 20, "source": "VmHWM of the phase",
               "readings": {"process": {"peak_bytes": 800 << 20, "source": "VmHWM of the phase"}}}]
    edited = []
    for r in matrix:
        r = copy.deepcopy(r)
        r["memory"]["phases"] = phases
        if r["experiment"] == SPEED and r["variant"] == "+pt_cpu_resize_dataloader":
            r["effective"]["input"] = "torchvision.datasets.CIFAR10 as posted"
        edited.append(r)
    section = _section(report.render("t", edited, experiments), "## Seed 000")
    assert ("- Inputs other than the kit's own batches: `+pt\\_cpu\\_resize\\_dataloader` (PyTorch): "
            "torchvision.datasets.CIFAR10 as posted.") in section
    # the phase peaks' source, and the variants in full, are in details.md
    details = _section(report.document.details("t", edited, experiments, [], {}), "## The ablation")
    assert "Phase peaks, the reported reading of each phase (warmup apart): VmHWM of the phase." in details
    assert "Phase peaks, the reported" not in section


def test_run_time_findings_are_listed_per_variant(matrix, experiments):
    def finding(r):
        r["findings"] = [{"code": "effective-batch-size", "severity": "error",
                          "message": "configured batch size 32, but the model received at most 1 sample(s) per step"}]
    tf = pick(matrix, SPEED, "tensorflow", "as_posted")
    runs = [r for r in matrix if r is not tf] + [derive(tf, "as_posted", tf["spec"]["pitfalls"], finding)]
    section = _section(report.render("t", runs, experiments), "## Seed 000")
    found = section[section.index("### Findings at run time"):]
    line = next(line for line in found.splitlines() if "effective-batch-size" in line)
    assert "TensorFlow" in line and "as\\_posted" in line and "at most 1 sample(s) per step" in line
    assert "Declared reproduction" not in line
    # a finding no user hook can cause says so where it is listed
    pt = pick(matrix, MEMORY, "pytorch", "as_posted")
    declared = derive(pt, "as_posted", pt["spec"]["pitfalls"], lambda r: r.update(findings=[
        {"code": "eval-mode-in-train", "severity": "error", "message": "the model was in evaluation mode",
         "declared": "only the kit's reproduction of a post's model.eval() called once can cause it"}]))
    section = _section(report.render("t", [r for r in matrix if r is not pt] + [declared], experiments),
                       "## Seed 004")
    line = next(line for line in section.splitlines() if "eval-mode-in-train" in line)
    assert line.endswith("*Declared reproduction:* only the kit's reproduction of a post's model.eval() called "
                         "once can cause it.")
    # the pair of fixed runs: declared differences are info
    assert any(line.startswith("- both, `fixed`") and "declared" in line for line in found.splitlines())


def test_write_puts_plots_details_and_summary_csv_beside_the_report(matrix, experiments, seeds, tmp_path):
    stale = tmp_path / "gone_experiment-throughput.png"
    stale.write_bytes(b"old")
    path = report.write(tmp_path, "t", matrix, experiments, claims=list(seeds.values()))
    text = path.read_text()
    assert not stale.exists()
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    found = verdicts.evaluate(list(seeds.values()), matrix)
    decomposed = [e for e, by_variant in runs.group(matrix).items() if decomposition.decompositions(e, by_variant, found)]
    # seed 004's TensorFlow has one pitfall: its as_posted and fixed runs are that factor added and removed alone
    assert decomposed == [MEMORY]
    assert pngs == sorted([*(f"{e}-{kind}.png" for e in (SPEED, MEMORY) for kind in ("throughput", "memory")),
                           f"{MEMORY}{decomposition.SUFFIX}"])
    for name in pngs:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        # the caption is the text under the image, not inside the figure
        assert re.search(rf"^!\[[^\n]*\]\({re.escape(name)}\)\n\n\*Figure: [^\n]+\*", text, re.M), name
    assert "*Figure: Seed 000, as run: VGG16" in text           # the caption says what ran
    for r in matrix:
        assert f"(results/{r['run_id']}.json)" in text
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert len(rows) == len(matrix)
    by_id = {r["run_id"]: r for r in matrix}
    for row in rows:
        r = by_id[row["run_id"]]
        assert float(row["samples_per_s"]) == pytest.approx(r["timing"]["samples_per_s"])
        assert int(row["peak_memory_bytes"]) == r["memory"]["peak_bytes"]
        assert int(row["eval_peak_memory_bytes"]) == metrics.value(r, "eval_peak_memory_bytes")
        assert float(row["mfu"]) == pytest.approx(metrics.value(r, "mfu"))
    assert "## How the figures are computed" in (tmp_path / "details.md").read_text()
    report.write(tmp_path / "older", "t", [older(r) for r in matrix], experiments)
    for row in csv.DictReader((tmp_path / "older" / "summary.csv").open()):
        assert row["eval_peak_memory_bytes"] == "" and row["mfu"] == ""          # not measured: empty, never 0


# --- a report a person can read: short paragraphs, each explanation once, readable plots ----------------------

PARAGRAPH_LIMIT = 400
REFERENCE_REPORTS = sorted(p.parent.name for p in (REPO / "reports").glob("*/results"))


def paragraphs(text: str) -> list[str]:
    """The paragraphs a reader meets in markdown: blocks between blank lines, each list item and heading its own;
    tables, code and collapsed <details> (the result files, log tails) left out."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.S | re.M)
    text = re.sub(r"<details>.*?</details>", "", text, flags=re.S)
    found = []
    for block in re.split(r"\n\s*\n", text):
        current: list[str] = []
        for line in (line for line in block.splitlines() if line.strip() and not line.startswith("|")):
            if line.startswith("#") or re.match(r"\s*([-*]|\d+\.) ", line):
                found += [" ".join(current)] if current else []
                current = [] if line.startswith("#") else [line]
                found += [line] if line.startswith("#") else []
            else:
                current.append(line)
        found += [" ".join(current)] if current else []
    return found


def reference(folder: str) -> tuple[list[dict], dict[str, list[dict]], bool]:
    """A committed reference report's own results and certificates, and whether it gave verdicts."""
    where = REPO / "reports" / folder
    results = [json.loads(p.read_text()) for p in sorted((where / "results").glob("*.json"))]
    certs: dict[str, list[dict]] = {}
    for path in sorted(where.glob("certificate-*.json")):
        cert = json.loads(path.read_text())
        certs.setdefault(cert["experiment"], []).append(cert)
    return results, certs, "## Claims" in (where / "report.md").read_text()


def test_the_paragraph_counter_sees_what_a_reader_sees():
    text = "# T\n\n" + "a " * 250 + "\n\n| a table " + "x" * 500 + " |\n\n- one\n- two\n\n```\n" + "y" * 500 + \
        "\n```\n\n<details><summary>s</summary>\n\n" + "z" * 500 + "\n\n</details>\n"
    assert [len(p) for p in paragraphs(text)] == [3, 500, 5, 5]


@pytest.mark.parametrize("folder", REFERENCE_REPORTS)
def test_every_reference_report_renders_with_short_paragraphs_and_each_explanation_once_in_details(
        folder, experiments, seeds):
    """Each committed reference report, rendered now from its own result files and certificates (the default
    run's, seeds-quick-cpu, among them): every section renders, no paragraph of report.md is longer than 400
    characters, and each explanation is in details.md once, linked from report.md, never in it."""
    results, certs, judged = reference(folder)
    claims = list(seeds.values()) if judged else None
    text = report.render(folder, results, experiments, claims=claims, certificates=certs)
    assert "## Environment and provenance" in text and text.count("\n## Seed ") == len(runs.group(results))
    long = [p for p in paragraphs(text) if len(p) > PARAGRAPH_LIMIT]
    assert not long, [f"{len(p)}: {p[:120]}" for p in long]
    found = verdicts.evaluate(claims, results) if claims else []
    details = report.document.details(folder, results, experiments, found, certs)
    anchors = {anchor(h) for h in re.findall(r"^#+ (.+)$", details.replace("\\", ""), flags=re.M)}
    for title, explanation in explanations.TEXT.items():
        first = explanation.split("\n\n")[0]
        assert details.count(first) == 1 and first not in text, title
        assert anchor(title) in anchors
    links = set(re.findall(r"\]\(details\.md#([^)]+)\)", text))
    assert links and links <= anchors, links - anchors
    # the certificate in report.md: one short line per check; its evidence, in full, in details.md
    for cert in (c for cs in certs.values() for c in cs if c["status"] != "not-run" and
                 set(c["variant"].values()) <= {"fixed", "script"}):
        for check in cert["checks"]:
            line = f"- {certificate_section.check_line(check)}"
            assert line in text.splitlines() and len(line) <= 240, line
            assert report.md(check["evidence"]) in details
            assert len(check["evidence"]) <= 90 or report.md(check["evidence"]) not in text


def test_a_check_line_gives_the_figure_the_check_turns_on():
    results, certs, _ = reference("seeds-quick-cpu")
    fixed = next(c for c in certs[MEMORY] if set(c["variant"].values()) == {"fixed"})
    checks = {c["name"]: c for c in fixed["checks"]}
    per_sample = checks["flops"]["numbers"]["per_sample"]["pytorch"]
    assert certificate_section.check_line(checks["flops"]) == f"flops pass: {per_sample:,} training FLOPs per sample"
    worst = max(m["relative"] for m in checks["logits"]["numbers"].values())
    assert certificate_section.check_line(checks["logits"]) == f"logits pass: worst mode {worst:.1e} of the largest logit"
    # a failing pair names each framework's figure, the reference first
    posted = next(c for c in certs[SPEED] if c["variant"] == {"pytorch": "+pt_head_1000", "tensorflow": "fixed"})
    layers = next(c for c in posted["checks"] if c["name"] == "layers")
    counts = layers["numbers"]["parameters"]
    assert certificate_section.check_line(layers) == (f"layers **FAIL**: {counts['pytorch']:,} vs {counts['tensorflow']:,} "
                                           f"parameters (PyTorch / TensorFlow)")
    # a failing check without a figure of its own says where it differs
    vgg16 = next(c for c in certs[SPEED] if c["variant"] == {"pytorch": "fixed", "tensorflow": "+tf_posted_vgg16"})
    parting = next(c for c in vgg16["checks"] if c["name"] == "layers_without_parameters")
    assert certificate_section.check_line(parting).startswith("layers\\_without\\_parameters **FAIL**: a layer without parameters "
                                                   "differs: after product 14: PyTorch has dropout rate 0.5")


def _figures(folder: str, claims: list) -> list[tuple[str, object]]:
    """Every figure the report draws from a reference report's results, named experiment-kind: the throughput
    and memory plots, and the waterfall of each gap's decomposition where the results hold one."""
    results, _, _ = reference(folder)
    found = verdicts.evaluate(claims, results)
    drawn = []
    for experiment, by_variant in runs.group(results).items():
        drawn += [(f"{experiment}-{d.suffix}", plots.styled(d.draw, by_variant)) for d in plots.DRAWN
                  if d.shows(by_variant)]
        waterfall = decomposition.figure(decomposition.decompositions(experiment, by_variant, found))
        drawn += [(f"{experiment}-waterfall", waterfall)] if waterfall is not None else []
    return drawn


def test_the_readability_check_finds_overlapping_text_and_too_many_series():
    """The check itself, on a figure drawn wrong the way the old memory plot was: two long titles running into
    each other, and one line per variant in one panel."""
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(11.0, 4.0))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    source = ("(peak source: process resident high-water mark of the phase (VmHWM, reset at the phase's start by "
              "writing 5 to /proc/self/clear_refs; before an evaluation, malloc_trim first returns the allocator's "
              "free memory); the highest over the training and evaluation phases, warmup left out)")
    left.set_title(f"PyTorch: memory sampled over training steps\n{source}")
    right.set_title(f"TensorFlow: memory sampled over training steps\n{source}")
    for i in range(plots.MAX_SERIES + 1):
        left.plot([0, 1], [i, i + 1], label=f"+pitfall_{i}")
    found = plots.problems(fig)
    assert any(re.fullmatch(r"text 'PyTorch: memory sampled.*' overlaps 'TensorFlow: memory sampled.*'", f)
               for f in found), found
    assert any(re.fullmatch(rf"panel 'PyTorch: memory sampled.*' has {plots.MAX_SERIES + 1} series, more than "
                            rf"{plots.MAX_SERIES}", f) for f in found), found
    for line in left.lines[plots.MAX_SERIES:]:       # the same lines, grey behind the highlighted few; short titles
        line.set_gid(plots.CONTEXT)
    left.set_title("PyTorch")
    right.set_title("TensorFlow")
    assert plots.problems(fig) == []


@pytest.mark.parametrize("folder", ["seeds-quick-cpu", "verbatim-standard-cpu-bounded"])
def test_every_plot_of_a_reference_report_is_readable(folder, seeds):
    """Each figure the report draws, from the reference results: the default run's 15 variants of seed 004 (13
    pitfalls alone) and the posted scripts beside their rebuild. No text overlaps, none leaves the canvas, at
    most six series in a panel, and no caption inside a figure (the report prints it under the image)."""
    pytest.importorskip("matplotlib")
    drawn = _figures(folder, list(seeds.values()))
    kinds = {"throughput", "memory", "waterfall"} if folder == "seeds-quick-cpu" else {"throughput", "memory"}
    assert {name.rsplit("-", 1)[1] for name, _ in drawn} == kinds
    for name, fig in drawn:
        assert plots.problems(fig) == [], name
        assert not fig.texts and not (fig._suptitle and fig._suptitle.get_text()), name     # no caption inside
        assert all(len(ax.get_title(loc="left")) <= 60 for ax in fig.axes), name
    many = next(fig for name, fig in drawn if name == f"{MEMORY}-memory")
    pytorch_steps = next(ax for ax in many.axes if ax.get_title(loc="left") == "PyTorch: memory sampled over "
                                                                             "training steps")
    context = [line for line in pytorch_steps.lines if line.get_gid() == plots.CONTEXT]
    if folder == "seeds-quick-cpu":                   # 15 variants: 6 in colour, 9 in grey behind them
        assert plots.series(pytorch_steps) == plots.MAX_SERIES and len(context) == 9
        legend = [t.get_text() for t in pytorch_steps.get_legend().get_texts()]
        assert legend[:2] == ["fixed", "as_posted"] and legend[-1] == "9 other variants"


def test_the_report_without_claims_or_variants_still_renders(real, experiments):
    text = report.render("plain", real, experiments)
    assert "## Claims" not in text
    # the seed experiments define as_posted, so the first screen says it did not run
    assert text.count("its `as_posted` variant is not in these results") == 2
    assert "| throughput (samples/s, after warmup)" in text
    pt = pick(real, MEMORY, "pytorch")
    assert f"{pt['timing']['samples_per_s']:,.1f}" in text


def test_gpu_only_claims_of_an_experiment_not_run_on_a_cpu_are_not_comparable_and_say_why(real, experiments, seeds):
    """The default plan leaves ResNet-50 out on a CPU: NVIDIA's claims on it, the two ratios among them, are not
    comparable there, each with its own why, never "not measured"; a claim that could be compared here but has no run
    is not measured."""
    found = {v.claim.id: v for v in verdicts.evaluate(list(seeds.values()), real)}
    nvidia = [i for i in found if i.startswith("s000-nvidia-resnet50-")]
    assert len(nvidia) == 6 and all(found[i].status == verdicts.NOT_COMPARABLE for i in nvidia)
    for claim_id, why in (("s000-nvidia-resnet50-tf32-ratio", "NVIDIA's figures are TF32 and XLA on an A100 GPU"),
                          ("s000-nvidia-resnet50-similar", "NVIDIA's figures are mixed precision (AMP) and XLA")):
        v = found[claim_id]
        assert seeds[claim_id].comparable["devices"] == ["gpu"] and v.why.startswith(why)
        assert "not a gpu" in v.why and "--only resnet50_imagenet_speed runs it" in v.why
        assert (v.profile, v.device, v.ours) == ("quick", "cpu", "not run (quick, cpu)")
    text = report.render("cpu", real, experiments, claims=list(seeds.values()))
    row = next(line for line in text.splitlines() if line.startswith("| [s000-nvidia-resnet50-similar]"))
    assert "**not comparable**" in row
    on_a_gpu = [derive(r, "fixed", device="gpu", device_name="NVIDIA H100 80GB HBM3", profile="standard")
                for r in real]
    gpu = {v.claim.id: v for v in verdicts.evaluate(list(seeds.values()), on_a_gpu)}
    assert gpu["s000-nvidia-resnet50-similar"].status == verdicts.NOT_MEASURED      # comparable there: not run


def test_a_failed_run_is_listed_and_the_rest_still_reported(real, experiments, seeds):
    failed = {**copy.deepcopy(pick(real, SPEED, "tensorflow")), "status": "failed", "run_id": "f" * 16,
              "variant": "as_posted",
              "failure": {"kind": "oom", "message": "killed", "log_tail": ["x"]}}
    text = report.render("t", [*real, failed], experiments, claims=list(seeds.values()))
    assert "## Failed runs" in text and "**oom**" in text and "1 failed" in text
    v = {v.claim.id: v for v in verdicts.evaluate(list(seeds.values()), [*real, failed])}
    assert v["s000-answer-batch-of-one"].status == verdicts.NOT_MEASURED


def test_a_report_off_the_published_setting_says_how_from_its_results(real, experiments):
    """Not only quick: a standard run on a CPU with bounded steps on generated data says each of those;
    a full-length CIFAR-10 run on a GPU gets no such banner."""
    def setting(r, profile, device, dataset, max_steps):
        r = copy.deepcopy(r)
        r["profile"], r["spec"]["profile"], r["spec"]["device"] = profile, profile, device
        r["spec"]["data"]["dataset"] = dataset
        r["spec"]["train"]["max_steps_per_epoch"] = max_steps
        return r

    bounded = [setting(r, "standard", "cpu", "learnable", 10) for r in real]
    text = report.render("b", bounded, experiments)
    assert "Quick profile on CPU" not in text
    assert ("> **Not the published setting:** it ran on a CPU; at most 10 training steps per epoch; on generated "
            "`learnable` data, not CIFAR-10; the standard profile's length, not the posts' epochs.") in text
    published = [setting(r, "full", "gpu", "cifar10", None) for r in real]
    assert "published setting" not in report.render("p", published, experiments).split("## ")[0]


def test_the_posted_code_beside_its_reconstruction_agrees_differs_or_is_not_comparable(real, experiments,
                                                                                        certificates):
    """The rule, fixed before the run, comes out each way: the same setting with each PyTorch / TensorFlow ratio
    within 10% agrees; a ratio beyond it differs; another setting (one parameter more) is not comparable and
    judges no ratio; a missing run is not measured."""
    base = [r for r in real if r["experiment"] == MEMORY]
    fixed = next(c for c in certificates[MEMORY] if set(c["variant"].values()) == {"fixed"})
    certs = {MEMORY: [{**copy.deepcopy(fixed), "variant": {fw: v for fw in fixed["variant"]}}
                      for v in ("verbatim", "as_posted")]}

    def section(edit=None, drop=None):
        runs = [derive(r, v, [], edit if (v, r["framework"]) == ("verbatim", "pytorch") else None)
                for r in base for v in ("verbatim", "as_posted") if (v, r["framework"]) != drop]
        text = report.render("t", runs, experiments, certificates=certs)
        first = [line for line in text.splitlines() if line.startswith("- **The posted code itself")]
        return text[text.index("### The posted code beside its reconstruction"):], first

    same, first = section()
    assert "**Reconstruction:** **agrees**: the same setting, and each PyTorch / TensorFlow ratio within 10%" in same
    assert len(first) == 1 and "**agrees**" in first[0] and "(#the-posted-code-beside-its-reconstruction-" in first[0]
    flops = fixed["checks"][[c["name"] for c in fixed["checks"]].index("flops")]["numbers"]["per_sample"]["pytorch"]
    assert f"| PyTorch: training FLOPs per sample    | {flops:,}" in same
    pt, tf = (pick(base, MEMORY, fw) for fw in ("pytorch", "tensorflow"))
    ratio = metrics.value(pt, "samples_per_s") / metrics.value(tf, "samples_per_s")
    assert f"| PyTorch / TensorFlow throughput       | {ratio:.2f}x" in same
    slower, _ = section(scale_time(1.5))
    assert "| PyTorch / TensorFlow throughput       | " + f"{ratio / 1.5:.2f}x" in slower
    assert "**Reconstruction:** **differs** on the same setting: throughput differs (+50%)" in slower
    wider, _ = section(lambda r: r["model"]["parameters"].update(total=r["model"]["parameters"]["total"] + 1))
    assert "**Reconstruction:** **not comparable** on this setting: the parameters differ" in wider
    assert "| not comparable |" in wider and "agrees" not in wider and "(+50%)" not in wider
    warmup_only, _ = section(lambda r: r["timing"].update(samples_per_s=0.0))     # every step a warmup step
    assert ("**Reconstruction:** **not measured**: throughput (PyTorch, `verbatim`): no training step after the "
            f"{pt['timing']['warmup_steps']} warmup steps") in warmup_only
    missing, _ = section(drop=("verbatim", "tensorflow"))
    assert "**Reconstruction:** **not measured**: no finished TensorFlow run of `verbatim`" in missing


def test_the_reference_report_of_the_posted_code_renders_its_table_from_its_files(experiments):
    """reports/verbatim-standard-cpu-bounded: seed 004's posted scripts and the as_posted rebuild, run at the
    same standard setting with 5 steps per epoch on this CPU. Each ratio cell and verdict is recomputed here."""
    folder = REPO / "reports" / "verbatim-standard-cpu-bounded"
    found = [json.loads(p.read_text()) for p in sorted((folder / "results").glob("*.json"))]
    certs = {MEMORY: [json.loads(p.read_text()) for p in sorted(folder.glob("certificate-*.json"))]}
    assert {r["spec"].get("source", "kit") for r in found} == {"script", "kit"}
    text = report.render("r", found, experiments, certificates=certs)
    assert "at most 5 training steps per epoch" in text.split("## ")[0]
    section = text[text.index("### The posted code beside its reconstruction"):]
    rows = {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")]
                                              for line in section.splitlines() if line.startswith("| "))}
    for name, short in (("samples_per_s", "throughput"), ("peak_memory_bytes", "peak memory")):
        ratio = {v: statistics.median(metrics.value(r, name) for r in found if r["variant"] == v and
                                      r["framework"] == "pytorch") /
                 statistics.median(metrics.value(r, name) for r in found if r["variant"] == v and
                                   r["framework"] == "tensorflow") for v in ("verbatim", "as_posted")}
        off = ratio["as_posted"] / ratio["verbatim"] - 1
        verdict = f"agrees ({off:+.0%})" if abs(off) <= 0.10 else f"**differs** ({off:+.0%})"
        assert rows[f"PyTorch / TensorFlow {short}"] == [f"{ratio['verbatim']:.2f}x", f"{ratio['as_posted']:.2f}x",
                                                         "within 10%", verdict], rows
    assert [cells[-1] for label, cells in rows.items() if ": " in label] == ["same"] * 8
    # with repeats each variant gets its own test, said with its name where their outcomes differ
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("- **PyTorch / TensorFlow, peak memory**"))
    memory = "\n".join(lines[head + 1:head + 3])            # one line per variant, each with its own test
    assert re.search(r"  - as posted .*Mann-Whitney U p = [0-9.]+: .*\n  - verbatim .*Mann-Whitney U p = [0-9.]+: ",
                     memory), memory


def test_a_docker_result_whose_image_recorded_no_base_digest_reads_as_unpinned():
    # image_facts records base_digest null for an image without the kit's labels (one built or tagged by hand).
    docker = json.loads(next((REPO / "reports" / "docker-quick-cpu" / "results").glob("*.json")).read_text())
    docker["launcher"]["image"]["base_digest"] = None
    row = sections.environment([docker])
    assert "base unpinned, no digest" in row and docker["launcher"]["image"]["ref"] in row


def test_a_third_framework_gets_a_column_a_ratio_and_not_run_where_it_has_no_posted_code(matrix, experiments,
                                                                                            tmp_path):
    """A JAX fixed run beside the seed's PyTorch and TensorFlow (the real PyTorch result relabelled: the report reads
    the framework from the result, so this is what it renders for a third one): a column and a ratio each, and
    as_posted, which JAX has no posted code for, shown as not run, never as a figure."""
    def relabel(r):
        r["framework"] = r["spec"]["framework"] = "jax"
        r["environment"]["framework"] = "jax"
    three = [*matrix, derive(pick(matrix, SPEED, "pytorch"), "fixed", [], relabel)]
    text = report.render("t", three, experiments)
    section = _section(text, "## Seed 000")
    header = next(line for line in section.splitlines() if line.startswith("|") and "PyTorch / JAX" in line)
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "", "PyTorch", "TensorFlow", "JAX", "PyTorch / TensorFlow", "PyTorch / JAX", "better"]
    ablation = section[section.index("### Ablation"):]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in ablation[:ablation.index("\n###", 5)]
            .splitlines() if line.startswith("| JAX")]
    assert [row[:3] for row in rows] == [["JAX", "fixed", "nothing: the experiment as declared"],
                                         ["JAX", "as\\_posted", "not run: no posted code in JAX"]]
    assert set(rows[1][3:]) == {"not run"}
    declared = section[section.index("### What differs between the runs"):]
    row = next(line for line in declared.splitlines() if line.startswith("| data layout"))
    assert [c.strip() for c in row.strip("|").split("|")][1:4] == ["NCHW", "NHWC", "not declared"]   # an older spec
    report.write(tmp_path / "r", "t", three, experiments)
    with open(tmp_path / "r" / "summary.csv") as f:
        assert sorted({row["framework"] for row in csv.DictReader(f)}) == ["jax", "pytorch", "tensorflow"]
