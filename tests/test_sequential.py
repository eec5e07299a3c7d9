"""--repeats auto (reprokit/claims/sequential.py): its interval against scipy's own, its error rate over repeated
looks by simulation (and the naive rule's, which does not keep it), and a real run whose claim's threshold lies
inside the 3-repeat interval, which must get more repeats, beside a clear claim that stops at 3."""
from __future__ import annotations

import json
import math
import textwrap

import numpy as np
import pytest
import stub_matrix
from scipy import stats as scipy_stats

from reprokit.claims import sequential
from reprokit.errors import UserError
from reprokit.plan import request
from reprokit.results import metrics


def test_the_interval_is_scipys_welch_interval_of_the_log_figures():
    rng = np.random.default_rng(1)
    a, b = np.exp(rng.normal(0.1, 0.05, 4)), np.exp(rng.normal(0.0, 0.08, 3))
    low, high = sequential.interval(a, b, 0.99)
    theirs = scipy_stats.ttest_ind(np.log(a), np.log(b), equal_var=False).confidence_interval(0.99)
    assert math.log(low) == pytest.approx(theirs.low) and math.log(high) == pytest.approx(theirs.high)
    assert sequential.interval([2.0] * 3, [1.0] * 3, 0.99) == (2.0, 2.0)       # no spread: the ratio itself


def _error_rate(level_of_look, cap: int, sims: int = 2000) -> float:
    """The share of simulated claims decided at any look, where the true ratio sits on the band's edge (so that
    every decision is a wrong one): log-normal repeats, 5% spread, both sides alike."""
    rng = np.random.default_rng(7)
    accept = (0.9, 1.1)
    wrong = 0
    for _ in range(sims):
        a = np.exp(rng.normal(math.log(1.1), 0.05, cap))
        b = np.exp(rng.normal(0.0, 0.05, cap))
        for n in range(sequential.MIN_REPEATS, cap + 1):
            low, high = sequential.interval(a[:n], b[:n], level_of_look)
            if sequential.side(low, high, accept) is not None:
                wrong += 1
                break
    return wrong / sims


def test_the_rule_keeps_its_error_rate_over_its_looks_and_the_naive_rule_does_not():
    rule = sequential.Rule(cap=10)
    ours = _error_rate(rule.level(1), rule.cap)
    naive = _error_rate(1 - sequential.ALPHA, rule.cap)
    slack = 3 * math.sqrt(sequential.ALPHA * (1 - sequential.ALPHA) / 2000)     # three standard errors
    assert ours <= sequential.ALPHA + slack, ours
    assert naive > sequential.ALPHA + slack, naive          # 8 unadjusted looks miss the truth far more often


@pytest.mark.parametrize(("args", "said"), [
    (["--repeats", "auto", "--repeats-cap", "2"], "--repeats-cap 2 is below the 3 repeats"),
    (["--repeats-cap", "4"], "--repeats-cap 4 bounds --repeats auto"),
    (["--repeats", "5", "--repeats-cap", "4"], "--repeats-cap 4 bounds --repeats auto, not --repeats 5"),
    (["--repeats", "auto", "--claims", "none"], "--claims none gives it no claim"),
    (["--repeats", "some"], "--repeats 'some' is not a number of repeats"),
    (["--repeats", "0"], "--repeats must be at least 1"),
])
def test_bad_repeats_are_one_sentence_before_anything_runs(args, said, tmp_path, capsys):
    from reprokit import cli
    status = cli.main(["reproduce", "--dry-run", "--backend", "local", "--state-dir", str(tmp_path / "s"), *args])
    err = capsys.readouterr().err
    assert status == 2 and said in err and err.count("\n") == 1, err
    assert not (tmp_path / "s").exists()
    with pytest.raises(UserError):
        request.from_args(cli._parser().parse_args(args))


CLAIMS = textwrap.dedent("""\
    [[claim]]
    id = "tiny-{id}"
    experiment = "tiny"
    role = "figure"
    title = "the stub's epoch time over its twin's, against {threshold}"
    source = {{ seed = "stub", where = "tests/test_sequential.py" }}
    statement = "a test"
    published = [{{ label = "stub over its twin", value = 1.0, unit = "x" }}]
    metric = {{ kind = "ratio", quantity = "epoch_time_s", variant = "fixed", numerator = {{ framework = "stub" }}, denominator = {{ framework = "stub2" }} }}
    tolerance = {{ at_most = {threshold} }}
    transfers = "a test"
    """)


def test_a_claim_whose_threshold_lies_inside_the_3_repeat_interval_gets_more_repeats(tmp_path):
    """The stub and its twin (the same work under two names) run 3 times each; a claim whose threshold is the
    middle of that 3-repeat interval cannot be decided there, so --repeats auto adds a repeat of both (to its cap
    of 4); a claim at 1e15x is decided at 3 and says so (runs of milliseconds on a loaded machine: the interval of
    three is wide)."""
    exp = stub_matrix.experiment(tmp_path / "exp", frameworks='"stub", "stub2"')
    toml = exp / "tiny.toml"
    toml.write_text(toml.read_text().replace('frameworks = [', 'seed_case = "stub"\nframeworks = [', 1))
    state = tmp_path / "state"
    three = stub_matrix.run(stub_matrix.command(tmp_path, exp, state, frameworks="stub,stub2"))
    assert three.returncode == 0, three.stdout[-2000:] + three.stderr[-2000:]
    results = [json.loads(p.read_text()) for p in (state / "results").glob("*.json")]

    def times(framework):
        return metrics.collect([r for r in results if r["framework"] == framework], "epoch_time_s").values
    rule = sequential.Rule(cap=4)
    low, high = sequential.interval(times("stub"), times("stub2"), rule.level(1))
    claims = tmp_path / "claims.toml"
    claims.write_text('schema = "reprokit.claims/1"\n\n' + CLAIMS.format(id="unclear", threshold=math.sqrt(low * high))
                      + "\n" + CLAIMS.format(id="clear", threshold="1e15"))      # clear through any load's noise
    cmd = stub_matrix.command(tmp_path, exp, state, "--claims", str(claims), "--repeats-cap", "4",
                              frameworks="stub,stub2")
    del cmd[cmd.index("--claims"):cmd.index("--claims") + 2]          # the command's --claims none goes
    cmd[cmd.index("--repeats") + 1] = "auto"
    auto = stub_matrix.run(cmd)
    assert auto.returncode == 0, auto.stdout[-2000:] + auto.stderr[-2000:]
    assert "repeats auto: 1 claim(s) undecided (tiny-unclear); one more repeat of 2 configuration(s)" in auto.stdout
    repeats = sorted((r["framework"], r["repeat"]) for p in (state / "results").glob("*.json")
                     for r in [json.loads(p.read_text())])
    assert repeats == sorted((f, i) for f in ("stub", "stub2") for i in range(4))
    report = (tmp_path / "reports" / "t" / "report.md").read_text().split("## Repeats: until each claim is decided")[1]
    unclear = next(line for line in report.splitlines() if line.startswith("| [tiny-unclear]"))
    clear = next(line for line in report.splitlines() if line.startswith("| [tiny-clear]"))
    assert unclear.split("|")[2].strip() == "4" and ("decided after 4 repeats" in unclear or "undecided at the cap of 4" in unclear)
    assert clear.split("|")[2].strip() == "3" and "decided after 3 repeats" in clear and "lies inside the band ≤ 1e+15" in clear
    assert json.loads((tmp_path / "reports" / "t" / sequential.FILE).read_text())["cap"] == 4
