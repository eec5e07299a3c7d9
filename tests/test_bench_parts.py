"""Fast checks of the bench's own parts (no framework, no training)."""
from __future__ import annotations

import dataclasses
import itertools
import json
import random
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from checkout import REPO

from reprokit.results import results
from reprokit.results.store import Store
from reprokit.runners import kit_bench

sys.path.insert(0, str(REPO / "benchmarks"))

import bench_kit_overhead
import bench_probe

from reprokit.kits import bench
from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.framework_free import cpu_peak
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.training_loop import bare, feeding

REFERENCE = sorted((REPO / "reports" / "quick-cpu" / "results").glob("*.json"))


def test_fan_out_writes_valid_distinct_result_files(tmp_path):
    sources = [json.loads(p.read_text()) for p in REFERENCE]
    bench_kit_overhead.fan_out(sources, 10, tmp_path)
    copies = Store(tmp_path).all()                   # raises on any invalid file
    assert len(copies) == 10 and len({r["run_id"] for r in copies}) == 10
    assert all(results.problems(r) is None and r["spec"]["run_id"] == r["run_id"] for r in copies)
    assert {r["repeat"] for r in copies} == {0, 1, 2}


def test_kit_spec_is_warmup_plus_steps_in_the_fewest_equal_epochs():
    spec = RunSpec.from_dict(json.loads(REFERENCE[0].read_text())["spec"])
    full = spec.data.train_samples // spec.train.batch_size
    cut = bench.kit_spec(spec, warmup=5, steps=full - 5)
    assert cut.train.epochs == 1 and cut.train.warmup_steps == 5
    assert cut.train.max_steps_per_epoch == full
    assert cut.data.test_samples <= 2 * cut.train.eval_batch_size
    assert spec.train.epochs != 1                 # the original is left alone
    longer = bench.kit_spec(spec, warmup=5, steps=2 * full)
    assert longer.train.epochs == 3 and 3 * longer.train.max_steps_per_epoch >= 2 * full + 5
    assert longer.train.max_steps_per_epoch <= full


@pytest.mark.parametrize("full, total", [(16, 45), (31, 45), (62, 45), (7, 7), (5, 51), (3, 100)])
def test_epochs_of_holds_the_steps_in_the_fewest_epochs_of_one_length(full, total):
    epochs, length = bare.epochs_of(full, total)
    assert length <= full and epochs * length >= total
    assert (epochs - 1) * full < total            # one epoch fewer would not hold them
    assert epochs * length - total < epochs       # at most one step per epoch more than asked
    assert bare.epochs_of(full, epochs * length) == (epochs, length)     # the bench's own count reads back the same


def test_the_bare_schedule_is_the_kits_batches_epoch_after_epoch(tmp_path):
    """The bare loops' batches over several epochs are those the kit's feeder gives each epoch, cut alike."""
    spec = RunSpec.from_dict(json.loads(REFERENCE[0].read_text())["spec"])
    n = 10 * spec.train.batch_size + 3
    arrays = datalib.Arrays(np.zeros((n, 2, 2, 3), np.uint8), np.arange(n) % 10, np.zeros((1, 2, 2, 3), np.uint8),
                            np.zeros(1, np.int64), "")
    got = bare.schedule(spec, arrays, warmup=5, steps=20)
    epochs, length = bare.epochs_of(10, 25)
    assert (epochs, length) == (3, 9) and len(got) == 27
    cut = dataclasses.replace(spec, train=dataclasses.replace(spec.train, max_steps_per_epoch=length))
    feeder = feeding.NumpyFeeder(arrays, cut, to_device=lambda x, y: y)
    kit = [y for epoch in (1, 2, 3) for y in itertools.islice(feeder.train(epoch), length)]
    assert all(np.array_equal(arrays.y_train[i], y) for i, y in zip(got, kit, strict=True))
    assert len({tuple(i) for i in got}) > length          # the epochs' orders differ: not one epoch thrice


def test_a_measured_cpu_peak_is_kept_and_read_back_by_the_next_run(tmp_path):
    env = {"framework": "pytorch", "framework_version": "2.14.1", "cpu_threads": {"intra_op": 2, "inter_op": 1}}
    first = cpu_peak.for_run(env, tmp_path, lambda: 1.5e11)
    assert first["matmul_peak_flops"] == 1.5e11 and first["matmul_peak_source"] == cpu_peak.MEASURED
    cpu_peak.remember(tmp_path, {"status": "failed", "run_id": "x", "environment": {**env, **first}})
    assert not (tmp_path / cpu_peak.CACHE_NAME).exists()           # only a finished run's figure is kept
    cpu_peak.remember(tmp_path, {"status": "ok", "run_id": "r1", "environment": {**env, **first}})
    again = cpu_peak.for_run(env, tmp_path, lambda: 9.9e11)
    assert again["matmul_peak_flops"] == 1.5e11 and "cached" in again["matmul_peak_source"]
    assert "r1" in again["matmul_peak_source"]
    other = cpu_peak.for_run({**env, "cpu_threads": {"intra_op": 1, "inter_op": 1}}, tmp_path, lambda: 9.9e11)
    assert other["matmul_peak_flops"] == 9.9e11                    # other threads: measured again


def test_round_orders_come_in_balanced_shuffled_blocks():
    n = len(bench.SIDES)
    draw = bench.orders(random.Random(3))
    blocks = [[next(draw) for _ in range(n)] for _ in range(6)]
    for block in blocks:
        assert all(sorted(order) == sorted(bench.SIDES) for order in block)
        for side in bench.SIDES:           # every side in every place once, and after each other side once
            assert all(sum(order[place] == side for order in block) == 1 for place in range(n))
            for before in set(bench.SIDES) - {side}:
                assert sum(order.index(before) + 1 == order.index(side) for order in block) == 1
    assert len({tuple(b) for b in blocks}) > 1                       # shuffled, not one fixed sequence
    assert len({b[0][0] for b in blocks}) > 1                        # and no side always first
    assert next(bench.orders(random.Random(3))) == blocks[0][0]        # a seed replays its draws


def test_a_processs_step_is_the_middle_half_of_its_steps_or_its_whole_loop():
    # eight steps of 10 ms, two of them slowed by another process's burst, and one cut short by the clock's edge
    starts = [0.0]
    for seconds in (0.010, 0.010, 0.090, 0.010, 0.010, 0.002, 0.010, 0.250):
        starts.append(starts[-1] + seconds)
    line = "BENCH " + json.dumps({"steps": 8, "starts": starts, "cpu": [1.0, 1.16]})
    wall, cpu = bench_probe.step_seconds(line)
    assert wall == pytest.approx(0.010) and cpu == pytest.approx(0.02)     # the bursts drop out; CPU: the loop's
    # JAX's loop has no per-step times (it dispatches ahead): its whole loop's mean
    whole = "BENCH " + json.dumps({"steps": 8, "starts": [5.0, 5.4], "cpu": [0.0, 0.8]})
    assert bench_probe.step_seconds(whole) == (pytest.approx(0.05), pytest.approx(0.1))
    # a cost every step pays stays in the figure
    assert bench_probe.middle_mean([x + 0.001 for x in (0.010,) * 8]) == pytest.approx(0.011)


def _rounds(shares: list[float], own_shares: list[float]) -> dict:
    n = len(shares)
    return {"framework": "tensorflow", "script": "keras_fit_timed.py", "loop": "Keras fit", "shares": shares,
            "costs_us": [s * 9000 for s in shares], "plain_ms": [9.0] * n, "cpu_shares": [0.002] * n,
            "own_us": [s * 9000 for s in own_shares], "own_shares": own_shares, "load": [1.5] * n}


def test_the_whole_step_is_gated_on_its_median_and_the_own_code_on_its_brackets_top():
    shares = [0.004, -0.02, 0.03, 0.008, 0.002, 0.006, -0.001, 0.05, 0.009, 0.001]      # median 0.5%
    lines, ok = bench_probe.summary(_rounds(shares, [0.004] * 10))
    assert ok and "whole step, probed against plain: +0.50% (" in lines[0] and lines[0].endswith("<= 1%: ok")
    assert "its CPU time, probed against plain: +0.20%" in lines[1] and "load average 1.5-1.5" in lines[1]
    lines, ok = bench_probe.summary(_rounds([s + 0.01 for s in shares], [0.004] * 10))      # median 1.5%
    assert not ok and lines[0].endswith("<= 1%: MISSED")
    lines, ok = bench_probe.summary(_rounds(shares, [0.004] * 8 + [0.012, 0.013]))     # its bracket tops 1%
    assert not ok and lines[0].endswith(": ok") and lines[2].endswith("<= 1%: MISSED")
    (head, rule, row) = bench_probe.table([_rounds(shares, [0.004] * 10)])
    assert head.startswith("| framework | loop | plain step | whole step, probed against plain |")
    assert row.startswith("| tensorflow | Keras fit (keras_fit_timed.py) | 9.00 ms | +0.50% (")


def test_each_rank_of_a_script_is_read_from_its_own_bench_line():
    line = {"steps": 4, "starts": [0.0, 0.1, 0.2, 0.3, 0.9], "cpu": [1.0, 1.6]}     # a burst in its last step
    lines = ["rank 1 says hello", "BENCH " + json.dumps({**line, "rank": 1}),
             "BENCH " + json.dumps({**line, "rank": 0, "starts": [0.0, 0.2, 0.4, 0.6, 0.8]})]
    steps = bench_probe.rank_steps(lines)
    assert sorted(steps) == [0, 1]
    assert steps[0][0] == pytest.approx(0.2) and steps[1][0] == pytest.approx(0.1)   # middle mean, each its own
    assert steps[1][1] == pytest.approx(0.15)                                       # CPU: the loop's mean
    assert bench_probe.rank_steps(["BENCH " + json.dumps(line)]).keys() == {0}      # one process: rank 0
    with pytest.raises(RuntimeError, match="no BENCH line"):
        bench_probe.rank_steps(["Traceback (most recent call last):"])


def _pooled(ratios: list[float], nulls: list[float]) -> dict:
    return {"rounds": [{"ratio": r, "null_ratio": n} for r, n in zip(ratios, nulls, strict=True)]}


def test_rounds_go_on_past_max_rounds_only_while_kit_bare_interval_holds_the_gate():
    args = SimpleNamespace(min_rounds=6, max_rounds=15, undecided_rounds=30, target=0.02)
    spread = [1 + 0.01 * (i % 5 - 2) for i in range(15)]               # the null check: within +-2%, not settled
    wide = [0.90 + 0.01 * i for i in range(15)]                        # 0.90-1.04: its interval holds 0.97
    assert not kit_bench._settled(_pooled(wide, [1 + 0.03 * (i % 3 - 1) for i in range(15)]), args)
    assert kit_bench._settled(_pooled(wide * 2, spread * 2), args)     # 30 rounds: the most it takes
    above = [0.985 + 0.002 * (i % 5) for i in range(15)]
    below = [0.90 + 0.003 * (i % 5) for i in range(15)]
    noisy_null = [1 + 0.05 * (i % 3 - 1) for i in range(15)]
    assert kit_bench._settled(_pooled(above, noisy_null), args)        # shown above the gate at 15
    assert kit_bench._settled(_pooled(below, noisy_null), args)        # shown below it at 15: a miss, settled
    assert not kit_bench._settled(_pooled(above[:14], noisy_null[:14]), args)
    assert kit_bench._settled(_pooled([1.0] * 6, [1.0] * 6), args)    # both intervals tight at 6
    early = SimpleNamespace(min_rounds=6, max_rounds=15, undecided_rounds=6, target=0.02)
    assert not kit_bench._settled(_pooled(wide[:10], noisy_null[:10]), early)   # never fewer than max_rounds


def _summed(ratios: list[float]) -> dict:
    rows = [{"ratio": r, "outer_ratio": r, "cpu_ratio": r, "timing_ratio": 1.0, "null_ratio": 1.0 + 0.001 * (i % 3 - 1),
             "kit_sps": 100 * r, "untimed_sps": 100 * r, "bare_sps": 100.0, "again_sps": 100.0}
            for i, r in enumerate(ratios)]
    return kit_bench.summary({"framework": "tensorflow", "experiment": "vgg16_cifar10_speed", "rounds": rows,
                              "seeds": [1, 2, 3], "steps": 40, "batch_size": 32, "epochs": 1})


def test_a_pair_is_judged_on_its_median_and_says_when_its_interval_leaves_it_undecided(capsys):
    tight_above = [0.985 + 0.002 * (i % 5) for i in range(15)]
    assert kit_bench.pair_summary(_summed(tight_above)) == []
    assert "neither way" not in capsys.readouterr().out
    wide_above = [0.93 + 0.01 * i for i in range(15)]                  # median 1.00, interval holds 0.97
    assert kit_bench.pair_summary(_summed(wide_above)) == []
    assert "holds 0.97: this host showed it neither way" in capsys.readouterr().out
    wide_below = [0.90 + 0.01 * i for i in range(15)]                  # less 0.005: median 0.965, up to 1.035
    missed = kit_bench.pair_summary(_summed([r - 0.005 for r in wide_below]))
    assert len(missed) == 1 and missed[0].endswith("this host showed it neither way)")
    tight_below = [0.90 + 0.003 * (i % 5) for i in range(15)]
    missed = kit_bench.pair_summary(_summed(tight_below))
    assert len(missed) == 1 and missed[0].endswith("< 0.97")
