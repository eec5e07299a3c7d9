"""Claims as data: the seed file loads, what it needs, and every bad claim refused before a run."""
from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from checkout import REPO

from reprokit.claims import claims
from reprokit.errors import UserError
from reprokit.kits.contract.pitfalls import PITFALLS
from reprokit.plan.experiments import BUILTIN_DIR, discover

SCHEMA = json.loads((Path(claims.__file__).parents[1] / "schemas" / "claims.schema.json").read_text())

GOOD = textwrap.dedent("""\
    schema = "reprokit.claims/1"

    [[claim]]
    id = "c-ratio"
    experiment = "vgg16_cifar10_speed"
    role = "figure"
    title = "a ratio"
    source = { seed = "000_c2ccd97f5d7c02f8", where = "question" }
    statement = "A took 40 min, B 10 min"
    published = [
      { label = "A", value = 40, unit = "min", framework = "pytorch", variant = "as_posted" },
      { label = "B", value = 10, unit = "min", framework = "tensorflow", variant = "as_posted" },
    ]
    metric = { kind = "ratio", quantity = "total_time_s", variant = "as_posted", direction = "greater", numerator = { framework = "pytorch" }, denominator = { framework = "tensorflow" } }
    tolerance = { relative = 0.25 }
    transfers = "the ratio"

    [[claim]]
    id = "c-growth"
    experiment = "simplecnn_cifar10_memory"
    role = "explanation"
    title = "memory grows"
    source = { seed = "004_f3e40c77869401a0", where = "answer" }
    statement = "it accumulates history"
    published = [ { label = "the answer", text = "grows", unit = "qualitative" } ]
    metric = { kind = "value", quantity = "memory_growth", framework = "pytorch", variant = "+pt_val_grad" }
    tolerance = { at_least = 0.05 }
    transfers = "growth"
    """)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mine.toml"
    path.write_text(text)
    return path


def _edit(tmp_path: Path, old: str, new: str) -> Path:
    assert old in GOOD, old
    return _write(tmp_path, GOOD.replace(old, new, 1))


# --- the seed claims ---------------------------------------------------------------------------

def test_seed_claims_load_and_match_the_experiments():
    seeds = claims.load("seeds")
    experiments = discover([BUILTIN_DIR])
    claims.check_against(seeds, experiments)
    ids = [c.id for c in seeds]
    assert len(ids) == len(set(ids)) >= 15
    assert {c.experiment for c in seeds} == {"vgg16_cifar10_speed", "simplecnn_cifar10_memory",
                                             "resnet50_imagenet_speed"}
    for c in seeds:
        assert c.published and all(f["unit"] in claims.UNITS for f in c.published)
        assert c.transfers and c.source["seed"] in ("000_c2ccd97f5d7c02f8", "004_f3e40c77869401a0")
        # every seed the claims cite is a real post, and the quoted words are in it (or in the document the
        # answer cites, which the claim names: NVIDIA's READMEs)
        seed = REPO.parent / "shared" / "seeds" / f"{c.source['seed']}.txt"   # the steering repo's copy
        if seed.exists() and not c.source.get("document"):
            text = seed.read_text()
            for fragment in re.split(r"\s*\.\.\.\s*", c.statement):
                assert fragment.strip().rstrip("！") in text, (c.id, fragment)


def test_the_published_numbers_are_data_with_units_and_their_references_are_derived():
    by_id = {c.id: c for c in claims.load("seeds")}
    # 42m22s vs 11m23s: the ratio the claim tests is derived from the two figures, not typed in
    lo, hi = claims.reference(by_id["s000-time-ratio-as-posted"])
    assert lo == hi == pytest.approx(2542 / 683)
    assert claims.reference(by_id["s000-fixed-similar"])[0] == pytest.approx(27 / 24)
    assert claims.reference(by_id["s004-memory-ratio"])[0] == pytest.approx(3.0)
    lo, hi = claims.reference(by_id["s000-tensorflow-step-time"])
    assert (lo, hi) == pytest.approx((0.069, 0.083))
    assert claims.reference(by_id["s004-pytorch-12gb"])[0] == pytest.approx(12e9)
    # what only transfers as a ratio is declared comparable on the published setting only
    assert by_id["s000-pytorch-total-time"].comparable["devices"] == ["gpu"]
    assert by_id["s000-time-ratio-as-posted"].comparable == {}      # a ratio gets a verdict on every profile


def test_needs_names_the_variants_and_the_ablation_each_experiment_needs():
    seeds = claims.load("seeds")
    needed = claims.needs(seeds)
    assert needed["vgg16_cifar10_speed"] == {"variants": {"fixed", "as_posted", "tuned"}, "ablation": False}
    assert needed["simplecnn_cifar10_memory"]["ablation"] is True
    # only what a claim uses: a claims list without "+pitfall" operands needs no ablation
    only_speed = [c for c in seeds if c.experiment == "vgg16_cifar10_speed"]
    assert set(claims.needs(only_speed)) == {"vgg16_cifar10_speed"}


def test_needs_adds_the_variant_that_holds_an_ablated_pitfall(tmp_path):
    mine = claims.load(_write(tmp_path, GOOD))
    assert claims.needs(mine)["simplecnn_cifar10_memory"] == {"variants": {"fixed"}, "ablation": True}
    experiments = discover([BUILTIN_DIR])
    holders = [v for v, d in experiments["simplecnn_cifar10_memory"].variants.items() if "pt_val_grad" in d["pitfalls"]]
    got = claims.needs(mine, experiments)["simplecnn_cifar10_memory"]
    assert got["ablation"] and got["variants"] == {"fixed", holders[0]}


def test_the_schema_vocabulary_is_the_evaluators():
    defs = SCHEMA["$defs"]
    assert set(defs["quantity"]["enum"]) == set(claims.QUANTITIES)
    assert set(defs["unit"]["enum"]) == set(claims.UNITS)
    assert set(defs["reading"]["enum"]) == set(claims.READINGS)
    assert set(defs["metric"]["properties"]["kind"]["enum"]) == set(claims.KINDS)
    assert SCHEMA["$id"] == claims.SCHEMA_ID


# --- bad input: one sentence naming the file, the claim, the key and what is allowed --------------

BAD = [
    # a missing unit
    ('{ label = "A", value = 40, unit = "min", framework = "pytorch", variant = "as_posted" }',
     '{ label = "A", value = 40, framework = "pytorch", variant = "as_posted" }',
     "c-ratio", r"published\.0\.unit: missing.*units allowed: s, ms, min"),
    ('unit = "min", framework = "tensorflow"', 'unit = "minutes", framework = "tensorflow"',
     "c-ratio", r"published\.1\.unit: 'minutes' is not allowed; allowed: s, ms, min"),
    ('{ label = "the answer", text = "grows", unit = "qualitative" }', '{ label = "the answer", value = 3, unit = "qualitative" }',
     "c-growth", r"published\[0\]\.unit: a numeric figure needs a measurement unit; allowed: s, ms"),
    # an unknown metric
    ('kind = "ratio"', 'kind = "speedup"', "c-ratio", r"metric\.kind: 'speedup' is not allowed; allowed: value, ratio"),
    ('quantity = "memory_growth"', 'quantity = "leakiness"', "c-growth",
     r"metric\.quantity: 'leakiness' is not allowed; allowed: samples_per_s"),
    ('metric = { kind = "value", quantity = "memory_growth", framework = "pytorch", variant = "+pt_val_grad" }',
     'metric = { kind = "value", quantity = "memory_growth", framework = "pytorch", variant = "+pt_nonsense" }',
     "c-growth", r"metric\.variant: unknown pitfall 'pt_nonsense'.*known: pt_blocking_copy, pt_cpu_resize_dataloader"),
    ('framework = "pytorch", variant = "+pt_val_grad"', 'framework = "tensorflow", variant = "+pt_val_grad"',
     "c-growth", r"metric\.variant: '\+pt_val_grad' is a pytorch pitfall"),
    ('numerator = { framework = "pytorch" }, ', '', "c-ratio", r"metric\.numerator: missing"),
    ('quantity = "total_time_s", ', '', "c-ratio", r"metric\.numerator\.quantity: missing"),
    ('metric = { kind = "value", quantity = "memory_growth",', 'metric = { kind = "value", quantity = "memory_growth", reading = "device",',
     "c-growth", r"metric\.reading: a reading applies to the memory peaks \(peak_memory_bytes, .*\) only"),
    # each claim names in advance the one reading that judges it
    ('metric = { kind = "value", quantity = "memory_growth",', 'metric = { kind = "value", quantity = "memory_growth", reading = "any",',
     "c-growth", r"metric\.reading: 'any' is not allowed; allowed: reported, allocated, reserved, device"),
    ('quantity = "memory_growth", framework', 'quantity = "peak_memory_bytes", framework', "c-growth",
     r"metric\.reading: missing; a peak-memory claim names in advance the one reading that judges it"),
    # an effect states which way it points, and only where that means something
    ('direction = "greater", ', 'direction = "sideways", ', "c-ratio", r"metric\.direction: 'sideways' is not allowed"),
    ('framework = "pytorch", variant = "+pt_val_grad" }', 'framework = "pytorch", variant = "+pt_val_grad", direction = "greater" }',
     "c-growth", r"metric\.direction: used by ratio and effect_disappears_with_fix only"),
    ("tolerance = { relative = 0.25 }", "tolerance = { at_most = 0.8 }", "c-ratio",
     r"metric\.direction: 'greater' contradicts the tolerance, which accepts only ratios at or below 1"),
    ('kind = "ratio", quantity = "total_time_s", variant = "as_posted", direction = "greater", ',
     'kind = "effect_disappears_with_fix", quantity = "total_time_s", variant = "as_posted", ', "c-ratio",
     r"metric\.direction: missing; an effect that disappears with the fix states which way it points"),
    # negative times, memory or counts
    ('{ label = "A", value = 40, unit = "min"', '{ label = "A", value = -40, unit = "min"', "c-ratio",
     r"published\[0\]\.value: -40 min is negative, and a time cannot be"),
    ('{ label = "B", value = 10, unit = "min"', '{ label = "B", range = [-1, 10], unit = "min"', "c-ratio",
     r"published\[1\]\.range: \[-1, 10\] min is negative, and a time cannot be"),
    ('{ label = "the answer", text = "grows", unit = "qualitative" }', '{ label = "m", at_most = -3, unit = "GB" }',
     "c-growth", r"published\[0\]\.at_most: -3 GB is negative, and memory cannot be"),
    ("tolerance = { relative = 0.25 }", "tolerance = { range = [-2.0, 3.0] }", "c-ratio",
     r"tolerance\.range: \[-2\.0, 3\.0\] x is negative, and a ratio of them cannot be"),
    ('metric = { kind = "value", quantity = "memory_growth", framework = "pytorch", variant = "+pt_val_grad" }\n'
     'tolerance = { at_least = 0.05 }',
     'metric = { kind = "value", quantity = "effective_batch_size", framework = "pytorch", variant = "+pt_val_grad" }\n'
     'tolerance = { at_least = -1 }', "c-growth", r"tolerance\.at_least: -1 samples/step is negative, and a batch "
                                                    r"size cannot be"),
    # a malformed tolerance
    ("tolerance = { relative = 0.25 }", "tolerance = { relativ = 0.25 }", "c-ratio",
     r"tolerance\.relativ: unknown key; allowed here: absolute, at_least, at_most, range, relative, unit"),
    ("tolerance = { relative = 0.25 }", 'tolerance = "25%"', "c-ratio", r"tolerance: expected object, got str"),
    ("tolerance = { relative = 0.25 }", "tolerance = { relative = -0.25 }", "c-ratio", r"tolerance\.relative: must be > 0"),
    ("tolerance = { relative = 0.25 }", "tolerance = { relative = 0.25, absolute = 1 }", "c-ratio",
     r"tolerance: state exactly one of relative, absolute, range, at_least, at_most"),
    ("tolerance = { relative = 0.25 }", "tolerance = {}", "c-ratio", r"tolerance: state exactly one of .* got none"),
    ("tolerance = { relative = 0.25 }", "tolerance = { range = [2.0] }", "c-ratio", r"tolerance\.range: must be a pair \[low, high\]"),
    ("tolerance = { relative = 0.25 }", "tolerance = { range = [4.0, 2.0] }", "c-ratio", r"tolerance\.range: must be \[low, high\] with low < high"),
    ("tolerance = { at_least = 0.05 }", 'tolerance = { at_least = 5, unit = "MiB" }', "c-growth",
     r"tolerance\.unit: 'MiB' does not measure fraction; allowed: fraction, %"),
    ("tolerance = { relative = 0.25 }", 'tolerance = { relative = 0.25, unit = "x" }', "c-ratio",
     r"tolerance\.unit: a relative tolerance has no unit"),
    # a tolerance around a figure the claim does not publish, or one of the wrong dimension
    ('{ label = "B", value = 10, unit = "min", framework = "tensorflow", variant = "as_posted" },', '', "c-ratio",
     r"published: a relative tolerance needs exactly one numeric figure for the denominator \(tensorflow, as_posted"),
    ('{ label = "B", value = 10, unit = "min"', '{ label = "B", value = 10, unit = "GB"', "c-ratio",
     r"published: figure 'B' has unit 'GB', which does not measure total_time_s; allowed: s, ms, min, h"),
    # figures and ids
    ('{ label = "the answer", text = "grows", unit = "qualitative" }', '{ label = "the answer", text = "grows", value = 1, unit = "qualitative" }',
     "c-growth", r"published\[0\]: a figure states exactly one of value, range, at_least, at_most, text; this one states value, text"),
    ('id = "c-growth"', 'id = "c-ratio"', "c-ratio", r"id: defined twice"),
    ('id = "c-growth"', 'id = "Bad Id"', "Bad Id", r"id: 'Bad Id' must match"),
    ('id = "c-growth"', 'id = 7', None, r"claim #2: id: expected string"),
    ('schema = "reprokit.claims/1"', 'schema = "reprokit.claims/0"', None, r"schema: must be 'reprokit.claims/1'"),
]


@pytest.mark.parametrize("old,new,claim_id,pattern", BAD, ids=[f"{i}-{b[3][:30]}" for i, b in enumerate(BAD)])
def test_a_bad_claim_is_refused_with_one_sentence_naming_file_claim_and_key(tmp_path, old, new, claim_id, pattern):
    path = _edit(tmp_path, old, new)
    with pytest.raises(UserError) as info:
        claims.load(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    if claim_id:
        assert f"claim {claim_id!r}" in message, message
    assert re.search(pattern, message), message
    assert "\n" not in message and "Traceback" not in message


def test_the_good_file_itself_loads(tmp_path):
    loaded = claims.load(_write(tmp_path, GOOD))
    assert [c.id for c in loaded] == ["c-ratio", "c-growth"]
    assert loaded[0].direction == "greater" and loaded[1].direction is None
    # a ratio may leave its direction unstated ("similar" claims point no way)
    undirected = claims.load(_edit(tmp_path, 'direction = "greater", ', ''))
    assert undirected[0].direction is None
    assert claims.reference(loaded[0])[0] == pytest.approx(4.0)
    assert loaded[1].bounds() == (0.05, float("inf"))


def test_unknown_names_files_and_toml_are_refused(tmp_path):
    with pytest.raises(UserError, match=r"no claims file named 'nope'; known: .*seeds"):
        claims.load("nope")
    with pytest.raises(UserError, match=r"no such claims file"):
        claims.load(tmp_path / "missing.toml")
    with pytest.raises(UserError, match=r"not valid TOML"):
        claims.load(_write(tmp_path, "schema = "))


def test_claims_are_checked_against_the_experiments(tmp_path):
    experiments = discover([BUILTIN_DIR])
    wrong_exp = claims.load(_edit(tmp_path, 'experiment = "vgg16_cifar10_speed"', 'experiment = "vgg19_nowhere"'))
    with pytest.raises(UserError, match=r"claim 'c-ratio': experiment: no experiment named 'vgg19_nowhere'; known: "):
        claims.check_against(wrong_exp, experiments)
    wrong_variant = claims.load(_write(tmp_path, GOOD.replace('variant = "as_posted"', 'variant = "as_written"')))
    with pytest.raises(UserError, match=r"claim 'c-ratio': variant: 'vgg16_cifar10_speed' has no variant 'as_written'; "
                                        r"it has: fixed"):
        claims.check_against(wrong_variant, experiments)
    wrong_seed = claims.load(_write(tmp_path, GOOD.replace('seed = "000_c2ccd97f5d7c02f8"', 'seed = "004_f3e40c77869401a0"')))
    with pytest.raises(UserError, match=r"claim 'c-ratio': source\.seed: '004_f3e40c77869401a0' is not the seed of "
                                        r"experiment 'vgg16_cifar10_speed', which carries '000_c2ccd97f5d7c02f8'$"):
        claims.check_against(wrong_seed, experiments)
    speed_pitfall = next(p for p, d in PITFALLS.items() if d["framework"] == "pytorch" and p.startswith("pt_head"))
    ablated = claims.load(_write(tmp_path, GOOD.replace('"+pt_val_grad"', f'"+{speed_pitfall}"')))
    with pytest.raises(UserError, match=rf"'\+{speed_pitfall}' needs a variant of 'simplecnn_cifar10_memory' "
                                        rf"that contains '{speed_pitfall}'"):
        claims.check_against(ablated, experiments)
    # one of tuned's settings alone is a variant every experiment has, once tuned runs; a setting tuned lacks is not
    alone = claims.load(_write(tmp_path, GOOD.replace('"+pt_val_grad"', '"+tuned_compile"')))
    claims.check_against(alone, experiments)
    unknown = claims.load(_write(tmp_path, GOOD.replace('"+pt_val_grad"', '"+tuned_xla"')))
    with pytest.raises(UserError, match=r"variant: '\+tuned_xla' names no setting of tuned; they are: "
                                        r"\+tuned_precision, \+tuned_cudnn_autotune, \+tuned_compile"):
        claims.check_against(unknown, experiments)
