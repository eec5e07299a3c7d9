"""reprokit bisect: ddmin on planted oracles, the refusals before any run, and one real bisect of a user's own
experiment (PyTorch against the numpy stub framework) whose planted pitfall decides the ratio."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import plugin_site
import pytest
from checkout import REPO

from reprokit import cli
from reprokit.bisect import search, sides
from reprokit.bisect.ddmin import Outcome, OutOfBudget, ddmin, worst_case_tests
from reprokit.errors import UserError

CHANGES = [f"c{i}" for i in range(10)]


def _oracle(rule):
    calls: list[frozenset[str]] = []

    def test(subset):
        calls.append(frozenset(subset))
        return rule(set(subset))
    return test, calls


@pytest.mark.parametrize("planted", [{"c3"}, {"c3", "c7"}, {"c0", "c4", "c9"}])
def test_ddmin_finds_the_planted_minimal_set_within_its_worst_case(planted):
    test, calls = _oracle(lambda s: Outcome.MOVES if planted <= s else Outcome.STAYS)
    found = ddmin(CHANGES, test)
    assert set(found.changes) == planted and found.one_minimal and not found.out_of_budget
    assert len(calls) == len(set(calls)) <= worst_case_tests(len(CHANGES))     # each subset measured once


def test_an_undecided_removal_keeps_the_set_from_being_called_1_minimal():
    """c5 alone matters only within noise: without it the ratio cannot be told from the threshold."""
    def rule(s):
        if "c1" not in s:
            return Outcome.STAYS
        return Outcome.MOVES if "c5" in s else Outcome.UNDECIDED
    found = ddmin(CHANGES, _oracle(rule)[0])
    assert set(found.changes) == {"c1", "c5"} and not found.one_minimal and found.undecided_removals == ("c5",)


def test_a_spent_budget_stops_ddmin_with_the_smallest_set_so_far():
    test, calls = _oracle(lambda s: Outcome.MOVES if "c3" in s else Outcome.STAYS)

    def limited(subset):
        if len(calls) == 2:
            raise OutOfBudget
        return test(subset)
    found = ddmin(CHANGES, limited)
    assert found.out_of_budget and not found.one_minimal and "c3" in found.changes and len(found.changes) < 10


def _prepare(*argv):
    """What bisect decides before any run, from a command line."""
    args = cli._bisect_parser().parse_args(list(argv))
    req = cli.request.from_args(cli._parser().parse_args(["--claims", "none"]))
    return sides.prepare(req, args.a, args.b, args.experiment, args.claims, args.claim, args.quantity,
                         args.threshold, sides.limits(args.budget, args.repeats, args.max_repeats))


def test_the_seed_bisect_asks_for_the_budget_its_worst_case_needs(capsys):
    """as_posted against fixed of the speed seed differ in 12 pitfalls and 2 numerics keys; the default budget
    cannot cover ddmin's worst case, so the command asks for --budget with that number, before any run."""
    exp = ["--experiment", "vgg16_cifar10_speed", "as_posted", "fixed", "--profile", "quick"]
    assert cli.main(["bisect", *exp]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "give --budget" in err
    need = int(err.split("give --budget ")[1].split()[0])
    prepared = _prepare(*exp, "--budget", str(need))           # the number asked for is enough ...
    assert len(prepared.changes) == 14 and "numerics.tf32" in prepared.changes
    assert prepared.target.threshold == pytest.approx(1.333)   # the similar band of s000-gap-disappears-with-fix
    with pytest.raises(UserError, match=f"give --budget {need}"):     # ... and one less is not
        _prepare(*exp, "--budget", str(need - 1))


def test_sides_that_differ_in_nothing_declared_say_so_in_one_sentence(capsys):
    assert cli.main(["bisect", "--experiment", "vgg16_cifar10_speed", "as_posted", "as_posted"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "differ in no declared setting" in err


PLANTED = textwrap.dedent("""\
    [variants.as_posted]
    description = "softmax before the cross-entropy (slows learning: the loss stays high) and loss.item() each step"
    pitfalls = ["pt_softmax_before_ce", "pt_item_per_step"]
    """)
CLAIM = textwrap.dedent("""\
    schema = "reprokit.claims/1"

    [[claim]]
    id = "tiny-loss-ratio"
    experiment = "tiny"
    role = "figure"
    title = "As posted, PyTorch's final training loss is at least 0.17 of the stub's"
    source = { seed = "stub", where = "tests/test_bisect.py" }
    statement = "planted"
    published = [{ label = "PyTorch over the stub", value = 0.2, unit = "x" }]
    metric = { kind = "ratio", quantity = "final_train_loss", variant = "as_posted", numerator = { framework = "pytorch" }, denominator = { framework = "stub" } }
    tolerance = { at_least = 0.17 }
    transfers = "a test"
    """)


def test_a_real_bisect_of_a_users_experiment_finds_its_planted_pitfall(kit_python, tiny_dir, data_dir, tmp_path):
    """The tiny experiment in a user's folder, PyTorch against the stub, with two pitfalls of which only
    pt_softmax_before_ce moves the loss ratio across the claim's threshold. Run for real, the bisect names it;
    run again from the two result sets it wrote, every step's runs are found finished and none starts."""
    toml = tiny_dir / "tiny.toml"
    toml.write_text(toml.read_text().replace('frameworks = ["pytorch", "tensorflow"]',
                                             'seed_case = "stub"\nframeworks = ["pytorch", "stub"]') + PLANTED)
    (tmp_path / "claims.toml").write_text(CLAIM)
    state = tmp_path / "state"
    common = ["--experiments", str(tiny_dir), "--python", str(kit_python("pytorch")), "--backend", "local",
              "--claims", str(tmp_path / "claims.toml"), "--state-dir", str(state), "--data-dir", str(data_dir),
              "--repeats", "2"]
    env = plugin_site.env()

    def bisect(*sides_given):
        proc = subprocess.run([sys.executable, "-m", "reprokit", "bisect", *sides_given, *common], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    out = bisect("--experiment", "tiny", "as_posted", "fixed")
    assert "threshold 0.17 (claim tiny-loss-ratio: the least ratio that reproduces it" in out
    steps = [line for line in out.splitlines() if line.startswith("        PyTorch / Stub final train loss")]
    assert len(steps) == 3 and "below 0.17: decided" in steps[0] and all("above 0.17: decided" in s
                                                                          for s in steps[1:])
    assert "step 3: flipped 1 of 2: pt_softmax_before_ce\n" in out
    assert "result: 1-minimal set: {pt_softmax_before_ce}" in out
    assert "runs: 8 started" in out      # B: 2 + 2 stub; A and pt_softmax_before_ce: 2 each, the stub's reused

    again = bisect(f"{state / 'results'}@as_posted", f"{state / 'results'}@fixed")
    assert "result: 1-minimal set: {pt_softmax_before_ce}" in again and "runs: 0 started" in again


def test_the_worst_case_counts_only_the_frameworks_a_change_alters():
    limits = search.Limits(budget=10, repeats=2, max_repeats=2)
    # one PyTorch pitfall: B and A in PyTorch, the stub's one configuration
    assert search.worst_case_runs(["pt_item_per_step"], ("pytorch", "stub"), limits) == (2 * 1 + 1) * 2
    assert search.worst_case_runs(["numerics.tf32"], ("pytorch", "tensorflow"), limits) == 2 * 2 * 2
