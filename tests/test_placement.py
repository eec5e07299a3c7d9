"""Placement of runs that hold several GPUs, as pure functions of a described host or cluster (docs/cluster.md,
"Rounds"): no two runs of a round share a GPU, a sweep of 1, 2, 4 and 8 is packed in as few rounds as it can be
(held against the fewest an exhaustive search finds), repeat by repeat; the scheduler starts them in that order; a
Ray cluster's run holds N GPUs of one node; a sweep on GPUs of different models is refused unless --mixed-gpus.
None of it has run on real GPUs: the hosts are described (a stand-in nvidia-smi, tests/gpu_host.py).
"""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from reprokit import cli
from reprokit.environments import topology
from reprokit.errors import UserError
from reprokit.execute import cluster, compose, device_placement, node_tasks
from reprokit.execute.device_placement import Pool, held, placed_rounds, start_order
from reprokit.plan import device_counts
from reprokit.report import gpu_models

H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"


def _fewest_by_search(counts: list[int], hosts: list[int]) -> int:
    """The fewest rounds of any packing: every assignment of the runs to a round and a host, tried."""
    order = sorted(counts, reverse=True)
    best = len(counts) + 1

    def place(i: int, rounds: list[list[int]]) -> None:
        nonlocal best
        if len(rounds) >= best:
            return
        if i == len(order):
            best = len(rounds)
            return
        for free in [*rounds, None]:
            if free is None:
                free = list(hosts)
                rounds.append(free)
            for h, left in enumerate(free):
                if left >= order[i]:
                    free[h] -= order[i]
                    place(i + 1, rounds)
                    free[h] += order[i]
            if free is rounds[-1] and sum(free) == sum(hosts):
                rounds.pop()            # the round opened for this run
    place(0, [])
    return best


def _valid(packed: list[list[tuple[int, int]]], counts: list[int], hosts: list[int], at_once: int | None = None):
    """Every run once, no host holding more than it has in a round, no round over at_once."""
    assert sorted(k for r in packed for k, _ in r) == list(range(len(counts)))
    for r in packed:
        assert at_once is None or len(r) <= at_once
        for h, size in enumerate(hosts):
            assert sum(counts[k] for k, on in r if on == h) <= size


def _multisets(values: tuple[int, ...], most: int):
    for size in range(1, most + 1):
        yield from (list(c) for c in itertools.combinations_with_replacement(values, size))


@pytest.mark.parametrize("values, hosts, most", [
    ((1, 2, 4, 8), [8], 7),              # one host of 8 GPUs
    ((1, 2, 4, 8), [8, 4], 5),           # a cluster of an 8-GPU node and a 4-GPU node
    ((1, 2, 4), [4, 4], 6),              # two 4-GPU nodes
])
def test_counts_that_divide_are_packed_in_the_fewest_rounds_an_exhaustive_search_finds(values, hosts, most):
    for counts in _multisets(values, most):
        packed = device_counts.rounds(counts, hosts)
        _valid(packed, counts, hosts)
        fewest = _fewest_by_search(counts, hosts)
        assert len(packed) == fewest == device_counts.fewest_rounds(counts, hosts), counts


def test_other_counts_are_packed_validly_and_the_bound_says_how_far_from_the_fewest():
    """3 on 8 GPUs does not divide: first fit decreasing may take a round more than the fewest, and the bound the
    dry run prints never exceeds the fewest."""
    for counts in _multisets((1, 2, 3, 5), 5):
        packed = device_counts.rounds(counts, [8])
        _valid(packed, counts, [8])
        fewest = _fewest_by_search(counts, [8])
        assert device_counts.fewest_rounds(counts, [8]) <= fewest <= len(packed) <= fewest + 1, counts
    counts = [4, 3, 3, 2, 2, 2]                      # {4, 2, 2} and {3, 3, 2}: two rounds; first fit takes three
    assert (len(device_counts.rounds(counts, [8])), _fewest_by_search(counts, [8])) == (3, 2)


def test_at_once_bounds_a_round():
    packed = device_counts.rounds([1] * 5, [8], at_once=2)
    _valid(packed, [1] * 5, [8], at_once=2)
    assert len(packed) == 3 == device_counts.fewest_rounds([1] * 5, [8], at_once=2)
    with pytest.raises(ValueError, match="a run of 8 devices fits on no host of 4"):
        device_counts.rounds([8], [4, 4])


def test_repeats_are_packed_one_by_one_at_most_a_round_in_eight_above_the_fewest():
    """One script's sweep of 1, 2, 4 and 8, R repeats, on 8 GPUs: 2 rounds a repeat, so the repeats stay in the
    plan's order; packed all together the fewest are R + ceil(7R/8), the same up to 7 repeats."""
    one_repeat = [1, 2, 4, 8]
    assert len(device_counts.rounds(one_repeat, [8])) == _fewest_by_search(one_repeat, [8]) == 2
    for r in range(1, 17):
        together = device_counts.fewest_rounds(one_repeat * r, [8])
        assert together == r + -(-7 * r // 8)
        assert 2 * r - together == (r >= 8) + (r >= 16)


# -- on a described host of eight GPUs, four per NUMA node ----------------------------------------------------------

@pytest.fixture
def eight_gpus(stand_in_gpu_host, monkeypatch):
    stand_in_gpu_host(gpus=8)
    monkeypatch.setattr(topology, "usable_cpus", lambda: set(range(8)))


def _argv(tmp_path: Path, *more: str) -> list[str]:
    script = tmp_path / "scripts" / "train.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text("import tensorflow as tf\n")
    return ["--script", f"tensorflow={script}", "--backend", "local", "--dry-run", "--state-dir",
            str(tmp_path / "state"), "--data-dir", str(tmp_path / "data"), "--reports-dir", str(tmp_path / "reports"),
            *more]


def _gpus(placement: topology.Placement) -> list[str]:
    return [index or "?" for index, _ in placement.gpus]


def test_a_sweep_of_1_2_4_8_on_eight_gpus_takes_two_rounds_a_repeat_and_shares_no_gpu(eight_gpus, tmp_path):
    m = compose.build(cli.parse(_argv(tmp_path, "--devices", "1,2,4,8", "--parallel", "auto", "--repeats", "2")))
    specs, slots = list(m.specs), [s for s in m.executor.slots if s is not None]
    placed = placed_rounds(specs, [slots], m.executor.at_most)
    shown = [[(held(specs[k]), specs[k].repeat, _gpus(p)) for k, _, p in r] for r in placed]
    assert shown == [
        [(8, 0, ["0", "1", "2", "3", "4", "5", "6", "7"])],
        [(4, 0, ["0", "1", "2", "3"]), (2, 0, ["4", "5"]), (1, 0, ["6"])],       # the 4 on one NUMA node
        [(8, 1, ["0", "1", "2", "3", "4", "5", "6", "7"])],
        [(4, 1, ["0", "1", "2", "3"]), (2, 1, ["4", "5"]), (1, 1, ["6"])]]
    for r in placed:
        gpus = [g for _, _, p in r for g in p.device_ids]
        assert len(gpus) == len(set(gpus)) <= 8                                  # no GPU twice in a round
    four = placed[1][0][2]
    assert four.mems == "0" and four.cpus == "0-3"


def test_the_dry_run_prints_the_rounds(eight_gpus, tmp_path, capsys):
    assert cli.main(["reproduce", *_argv(tmp_path, "--devices", "1,2,4,8", "--parallel", "auto", "--repeats", "1")]) == 0
    out = capsys.readouterr().out
    print(out)
    assert ("rounds (the runs of a round hold their GPUs at the same time, none shares one; placed from this host's "
            "description, untested on real GPUs): 4 runs in 2 rounds, the fewest they fit in, repeat by repeat\n"
            "    round 1: run 4 (8) on GPU 0,1,2,3,4,5,6,7\n"
            "    round 2: run 3 (4) on GPU 0,1,2,3 · run 2 (2) on GPU 4,5 · run 1 (1) on GPU 6\n") in out


def test_the_scheduler_starts_them_round_by_round_and_no_run_overtakes(eight_gpus, tmp_path):
    """As _side_by_side starts them (start_order, then each once its GPUs are free, none overtaking), with runs of
    equal length: the rounds the dry run printed, and never a GPU held twice."""
    m = compose.build(cli.parse(_argv(tmp_path, "--devices", "1,2,4,8", "--parallel", "auto", "--repeats", "3")))
    specs, slots = list(m.specs), [s for s in m.executor.slots if s is not None]
    pool = Pool(slots, m.executor.at_most)
    queue = [(k, specs[k]) for k in start_order(specs, slots, pool.at_once)]
    started: list[list[int]] = []
    while queue:
        running = []
        while queue and (slot := pool.take(held(queue[0][1]))) is not None:
            running.append((queue.pop(0)[0], slot))
        gpus = [g for _, p in running for g in p.device_ids]
        assert running and len(gpus) == len(set(gpus))
        started.append([k for k, _ in running])
        for _, p in running:                   # equal lengths: they end together
            pool.give_back(p)
    assert started == [[k for k, _, _ in r] for r in placed_rounds(specs, [slots], m.executor.at_most)]
    assert [held(specs[r[0]]) for r in started] == [8, 4] * 3 and pool.free == pool.slots


# -- a Ray cluster: each run on N GPUs of one node ------------------------------------------------------------------

def _node(gpus: int) -> list[topology.Placement]:
    return [topology.Placement(str(i), None, "", None) for i in range(gpus)]


def test_on_a_cluster_each_run_holds_n_gpus_of_one_node(eight_gpus, tmp_path):
    m = compose.build(cli.parse(_argv(tmp_path, "--devices", "1,2,4,8", "--repeats", "1")))
    specs = list(m.specs)
    placed = placed_rounds(specs, [_node(8), _node(4)])
    assert [[(held(specs[k]), node, _gpus(p)) for k, node, p in r] for r in placed] == [
        [(8, 0, ["0", "1", "2", "3", "4", "5", "6", "7"]), (4, 1, ["0", "1", "2", "3"])],
        [(2, 1, ["0", "1"]), (1, 1, ["2"])]]
    lines = device_placement.round_lines(specs, [_node(8), _node(4)], 12, ["gpu-a (1a2b3c4d)", "gpu-b (5e6f7a8b)"])
    assert lines[1:] == ["  round 1: run 4 (8) on node gpu-a (1a2b3c4d) GPU 0,1,2,3,4,5,6,7 · run 3 (4) on node "
                         "gpu-b (5e6f7a8b) GPU 0,1,2,3",
                         "  round 2: run 2 (2) on node gpu-b (5e6f7a8b) GPU 0,1 · run 1 (1) on node gpu-b "
                         "(5e6f7a8b) GPU 2"]
    assert [cluster._slot_request("gpu", s) for s in specs] == [{"num_gpus": n} for n in (1, 2, 4, 8)]
    with pytest.raises(UserError) as refused:
        cluster.widest_fit(8, {"gpu-b (5e6f7a8b)": 4}, "10.0.0.5:6379")
    assert str(refused.value) == (
        "--devices 8 places each run on 8 GPUs of one node, and the largest node of the Ray cluster at 10.0.0.5:6379 "
        "that can serve a run has 4; give --devices 4 or less, or start a node with 8 GPUs with `ray start "
        "--address 10.0.0.5:6379`.")


def test_a_nodes_fake_slots_are_held_n_at_a_time(tmp_path, monkeypatch):
    """The test-only switch on a node: a run at 2 takes two free slots, each held by its lock file while it runs."""
    monkeypatch.setenv(topology.FAKE_SLOTS_ENV, "cpus:0;0;0")
    with node_tasks._fake_slots(tmp_path, 2) as two:
        assert [p.gpu_uuid for p in two] == ["fake-gpu-0", "fake-gpu-1"]
        with node_tasks._fake_slots(tmp_path, 2) as none_free, node_tasks._fake_slots(tmp_path, 1) as last:
            assert none_free == [] and [p.gpu_uuid for p in last] == ["fake-gpu-2"]
    with node_tasks._fake_slots(tmp_path, 3) as every:
        assert len(every) == 3 and topology.joined(every).name == "fake-gpu-0,fake-gpu-1,fake-gpu-2"


# -- GPUs that differ in model --------------------------------------------------------------------------------------

@pytest.fixture
def mixed_host(stand_in_gpu_host, monkeypatch):
    stand_in_gpu_host(gpus=8, models=(H100,) * 4 + (A100,) * 4)
    monkeypatch.setattr(topology, "usable_cpus", lambda: set(range(8)))


def test_a_sweep_on_gpus_of_two_models_is_refused_unless_mixed_gpus(mixed_host, tmp_path, capsys):
    assert cli.main(["reproduce", *_argv(tmp_path, "--devices", "1,2,4", "--parallel", "auto")]) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == 1 and (
        "--devices 1,2,4 compares runs at each count, and the GPUs --gpus all assigns differ in model (GPU 0,1,2,3: "
        f"{H100}; GPU 4,5,6,7: {A100}), so the runs at one count could time other GPUs than those at another; "
        "assign GPUs of one model with --gpus (such as --gpus 0,1,2,3), or give --mixed-gpus to run the sweep "
        "anyway, declared in each result and in the report.") in err, err
    assert not (tmp_path / "state").exists()
    assert cli.main(["reproduce", *_argv(tmp_path, "--devices", "2", "--parallel", "auto")]) == 0   # not a sweep
    assert cli.main(["reproduce", *_argv(tmp_path, "--devices", "1,2,4", "--gpus", "0,1,2,3")]) == 0  # one model
    capsys.readouterr()
    assert cli.main(["reproduce", *_argv(tmp_path, "--devices", "1,2,4", "--parallel", "auto", "--mixed-gpus")]) == 0
    assert f"{device_placement.MIXED_GPUS}; each result declares it, with the models of its GPUs" in \
        capsys.readouterr().out


def test_mixed_gpus_is_declared_in_each_result_and_said_in_the_report(mixed_host, tmp_path):
    m = compose.build(cli.parse(_argv(tmp_path, "--devices", "1,2", "--parallel", "auto", "--mixed-gpus")))
    models = m.executor.models
    assert models is not None and sorted(set(models.values())) == [A100, H100]
    slots = [s for s in m.executor.slots if s is not None]
    results = []
    for spec, where in zip(m.specs, (slots[6], topology.joined(slots[:2]))):     # 1 on an A100, 2 on two H100s
        result = {"spec": spec.to_dict(), "status": "ok", "environment": {"device": "gpu", "device_name": "?"},
                  "launcher": {"placement": where.record()}}
        device_placement.declare_models(result, models)
        results.append(result)
    assert [r["environment"]["gpu_models"] for r in results] == [[A100], [H100, H100]]
    assert results[0]["environment"]["mixed_gpus"] == device_placement.MIXED_GPUS
    failed = {"spec": m.specs[0].to_dict(), "status": "failed", "launcher": {}}
    device_placement.declare_models(failed, models)                  # no facts of its kit: nothing to declare
    assert "environment" not in failed
    assert gpu_models.mixed_line({"tensorflow": {1: results[:1], 2: results[1:]}}) == (
        f"**Mixed GPUs (--mixed-gpus):** these runs held GPUs of more than one model (1 device: {A100}; 2 devices: "
        f"{H100}), so a count's throughput against another's compares different GPUs as well as different counts.")
    assert gpu_models.lines({"tensorflow": {1: results[:1], 2: results[1:]}}) == [
        gpu_models.PLACEMENT_UNTESTED, gpu_models.mixed_line({"tensorflow": {1: results[:1], 2: results[1:]}})]
    same = {"spec": m.specs[0].to_dict(), "environment": {"device_name": H100}}
    assert gpu_models.lines({"tensorflow": {1: [same], 2: [same]}}) == [gpu_models.PLACEMENT_UNTESTED]
    on_cpu = {"spec": {**same["spec"], "device": "cpu"}, "environment": {"device_name": "x86_64"}}
    assert gpu_models.lines({"tensorflow": {1: [on_cpu], 2: [on_cpu]}}) == []
