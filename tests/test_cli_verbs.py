"""The CLI's verbs around a run: the dry run, report names, atomic publishing, --from. No training here."""
from __future__ import annotations

import copy
import datetime
import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import REPO

from reprokit import report
from reprokit.environments import datasets, downloads
from reprokit.errors import UserError
from reprokit.execute.from_report import specs_from
from reprokit.kits.contract.spec import RunSpec
from reprokit.plan.experiments import BUILTIN_DIR, discover
from reprokit.report import publish
from reprokit.results.provenance import code
from reprokit.results.store import Store

REFERENCE = REPO / "reports" / "quick-cpu"


def test_a_dry_run_prints_the_plan_and_starts_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "reprokit", "reproduce", "--dry-run", "--backend", "local",
                           "--state-dir", str(tmp_path / "state"), "--data-dir", str(tmp_path / "data"),
                           "--reports-dir", str(tmp_path / "reports"), "--dataset", "cifar10"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # The default: both seeds, fixed and as posted in both frameworks, plus the pitfalls a claim names alone, and
    # tuned (each of its settings alone once) where a claim reads it: VGG16's. No claim reads SimpleCNN's tuned, and
    # ResNet-50's claims are NVIDIA's GPU figures: both left out, and one line says so.
    # tuned's two runs are composed from its settings alone: they run after them, where not finished before
    assert ("plan: 16 runs, profile quick on cpu, backend local; 0 already finished, 14 to run, then 2 tuned, run "
            "where not finished before, estimated ") in out
    for line in ("vgg16_cifar10_speed        pytorch    as_posted", "simplecnn_cifar10_memory   pytorch    +pt_val_grad",
                 "vgg16_cifar10_speed        tensorflow fixed", "vgg16_cifar10_speed        tensorflow +tuned_compile",
                 "vgg16_cifar10_speed        tensorflow tuned"):
        assert line in out
    assert "resnet50_imagenet_speed    " not in out and "simplecnn_cifar10_memory   tensorflow tuned" not in out
    assert ("\nleft out (no claim reads them here): tuned of simplecnn_cifar10_memory; resnet50_imagenet_speed (its "
            "claims are comparable only on a gpu and on the standard or full profile); the ablation: add them with "
            "--all, --only resnet50_imagenet_speed, --ablation\n") in out
    assert "(id once data is prepared)" in out and "~30s (first-run guess)" in out
    assert "dry run: nothing was started" in out
    # No dataset written or downloaded (CIFAR-10 is not there), no environment built, no report.
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())
    assert not (tmp_path / "reports").exists() and not (tmp_path / "state" / "results").exists()


@pytest.mark.parametrize("extra, resnet50, simplecnn_tuned, left_out", [
    ([], False, False, "tuned of simplecnn_cifar10_memory; resnet50_imagenet_speed (its claims are comparable only on "
                       "a gpu and on the standard or full profile); the ablation: add them with --all, --only "
                       "resnet50_imagenet_speed, --ablation"),
    (["--all"], True, True, "the ablation: add it with --ablation"),
    (["--all", "--ablation"], True, True, None),
    (["--claims", "none"], True, True, "the ablation: add it with --ablation"),      # no claim: everything asked
    (["--variants", "fixed,as_posted,tuned"], False, True,
     "resnet50_imagenet_speed (its claims are comparable only on a gpu and on the standard or full profile); the "
     "ablation: add them with --all, --only resnet50_imagenet_speed, --ablation"),
    (["--only", "resnet50_imagenet_speed"], True, None, "tuned of resnet50_imagenet_speed: add it with --all"),
    (["--only", "simplecnn_cifar10_memory", "--variants", "fixed", "--ablation"], False, False, None),
])
def test_the_plan_runs_what_a_claim_in_play_reads_and_names_what_it_left_out(
        tmp_path, extra, resnet50, simplecnn_tuned, left_out):
    """On a CPU: ResNet-50 only with --all or --only; tuned of SimpleCNN only with --all or a named --variants;
    VGG16's tuned always (s000-nvidia-similar reads it); without claims, all that is asked; the line names exactly
    what was left out."""
    from reprokit import cli
    from reprokit.execute import compose
    m = compose.build(cli.parse(["--dry-run", "--backend", "local", "--gpus", "none", "--state-dir",
                                str(tmp_path / "state"), "--data-dir", str(tmp_path / "data"), *extra]))
    planned = {(s.experiment, s.variant) for s in m.specs}
    assert any(e == "resnet50_imagenet_speed" for e, _ in planned) == resnet50
    if simplecnn_tuned is not None:
        assert (("simplecnn_cifar10_memory", "tuned") in planned) == simplecnn_tuned
    if ("vgg16_cifar10_speed", "fixed") in planned:
        assert {("vgg16_cifar10_speed", "tuned"), ("vgg16_cifar10_speed", "+tuned_inter_op")} <= planned
    assert m.left_out == (left_out and f"left out (no claim reads them here): {left_out}")
    if resnet50 and m.claims:       # run, its claims judge its runs (and say why they are not comparable here)
        assert "resnet50_imagenet_speed" in {c.experiment for c in m.claims}


def test_a_plan_whose_every_claim_is_for_other_hardware_is_refused_in_one_sentence(tmp_path, capsys):
    """The seeds' claims, each made GPU-only: on a CPU no experiment is left to run, and the command says what it
    left out and how to add it, before anything runs."""
    from reprokit import cli
    text = (REPO / "claims" / "seeds.toml").read_text()
    blocks = text.split("[[claim]]")
    gpu_only = [b if "comparable =" in b else b.rstrip("\n") + '\ncomparable = { devices = ["gpu"] }\n\n'
                for b in blocks[1:]]
    (tmp_path / "gpu.toml").write_text("[[claim]]".join([blocks[0], *gpu_only]))
    status = cli.main(["reproduce", "--dry-run", "--backend", "local", "--gpus", "none", "--claims",
                       str(tmp_path / "gpu.toml"), "--state-dir", str(tmp_path / "state")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and err.startswith("error: nothing to run: ")
    assert ("add them with --all, --only resnet50_imagenet_speed, --only simplecnn_cifar10_memory, --only "
            "vgg16_cifar10_speed\n") in err
    assert not (tmp_path / "state").exists()


def test_a_dataset_that_cannot_feed_an_experiment_as_it_is_leaves_it_on_its_own(tmp_path):
    """--dataset cifar10 for ResNet-50 at 224x224, fed as it is: its own synthetic data, and the plan says why."""
    proc = subprocess.run([sys.executable, "-m", "reprokit", "reproduce", "--dry-run", "--backend", "local",
                           "--gpus", "none", "--profile", "standard", "--only", "resnet50_imagenet_speed",
                           "--variants", "fixed", "--dataset", "cifar10", "--state-dir", str(tmp_path / "state"),
                           "--data-dir", str(tmp_path / "data")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert ("resnet50_imagenet_speed: --dataset cifar10 not applied: it feeds 224x224 images as they are (data.resize "
            "none), and cifar10's are 32x32; it keeps its synthetic data") in proc.stdout


def test_a_dry_run_of_the_docker_runner_needs_no_engine(tmp_path):
    """--backend docker --dry-run where no engine answers (DOCKER_HOST at a socket nobody serves): the plan of
    the images' runs, described from their recipes, and the reason; a real run still refuses in one sentence."""
    argv = [sys.executable, "-m", "reprokit", "reproduce", "--backend", "docker", "--only", "vgg16_cifar10_speed",
            "--state-dir", str(tmp_path / "state"), "--data-dir", str(tmp_path / "data"),
            "--reports-dir", str(tmp_path / "reports"), "--dataset", "cifar10"]
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path / 'nobody.sock'}"}
    planned = subprocess.run([*argv, "--dry-run"], cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    assert planned.returncode == 0, planned.stderr
    assert "backend: docker (asked for; a dry run, so the engine was not needed" in planned.stdout
    assert "plan: 10 runs, profile quick on cpu, backend docker;" in planned.stdout     # tuned: 6 of them
    assert "including building reprokit/pytorch" in planned.stdout
    refused = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    assert refused.returncode == 2 and refused.stderr.count("error: ") == 1 and "Traceback" not in refused.stderr


def test_the_default_report_name_is_git_ignored_and_never_a_published_report():
    name = publish.default_name("quick", "cpu", datetime.date(2026, 11, 30))
    assert name == "runs/2026-11-30-quick-cpu"
    published = {p.name for p in (REPO / "reports").iterdir() if p.is_dir()} - {"runs"}
    assert name not in published and published
    ignored = subprocess.run(["git", "check-ignore", "-q", f"reports/{name}/report.md"], cwd=REPO)
    assert ignored.returncode == 0, "reports/runs/ must be git-ignored"


def _reference_results() -> list[dict]:
    return [r for r in Store(REFERENCE / "results").readable()[0] if r["status"] == "ok"]


def test_publishing_keeps_other_experiments_and_leaves_the_old_report_whole_on_failure(tmp_path, monkeypatch):
    results = _reference_results()
    experiments = discover([BUILTIN_DIR])
    names = sorted({r["experiment"] for r in results})
    assert len(names) == 2
    target = tmp_path / "reports" / "mine"
    publish.publish(target, "mine", results, experiments, None, {})
    # --only the first experiment: the second's results stay in the report of the same name.
    only = [r for r in results if r["experiment"] == names[0]]
    kept, _ = publish.earlier(target, {names[0]})
    assert {r["experiment"] for r in kept} == {names[1]}
    publish.publish(target, "mine", [*kept, *only], experiments, None, {})
    assert {r["experiment"] for r in Store(target / "results").all()} == set(names)
    before = (target / "report.md").read_text()

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")
    monkeypatch.setattr(report, "write", broken)
    with pytest.raises(RuntimeError):
        publish.publish(target, "mine", only, experiments, None, {})
    assert (target / "report.md").read_text() == before
    assert sorted(p.name for p in target.parent.iterdir()) == ["mine"]      # no half-written sibling left


class _Runner:
    """Only what --from asks of a runner: what it would record about the environment."""
    def describe(self, framework: str) -> dict:
        return {"lock": "here.txt", "lock_sha256": "0" * 64, "image": None}


def _report_from(tmp_path: Path, results: list[dict]) -> Path:
    folder = tmp_path / "published"
    store = Store(folder / "results")
    for r in results:
        store.put(r)
    return folder


def test_from_reruns_a_reports_exact_specs_with_this_machines_environment(tmp_path):
    results = copy.deepcopy(_reference_results())
    data = tmp_path / "data"
    first = results[0]["spec"]["data"]
    here = datasets.prepare({"dataset": first["dataset"], "train_samples": first["train_samples"],
                             "test_samples": first["test_samples"], "seed": results[0]["spec"]["train"]["seed"]}, data)
    for r in results:                      # as if the report had been made on another machine with this data
        r["spec"]["data"]["sha256"] = here.sha256
    specs = [s.to_dict() for s in specs_from(_report_from(tmp_path, results), _Runner(), "cpu", data, code(),
                                             offline=True)]
    assert len(specs) == len(results)
    for spec, r in zip(specs, results):
        drop = ("provenance", "run_id")
        same = RunSpec.from_dict(r["spec"]).to_dict()          # the report's spec, every field explicit
        assert {k: v for k, v in spec.items() if k not in drop} == {k: v for k, v in same.items() if k not in drop}
        assert spec["provenance"]["lock"] == "here.txt" and spec["run_id"] != r["run_id"]


def test_from_refuses_other_data_and_a_gpu_report_on_a_cpu(tmp_path):
    results = copy.deepcopy(_reference_results())
    results[0]["spec"]["data"]["sha256"] = "f" * 64
    with pytest.raises(UserError, match="is not the data the report ran on"):
        specs_from(_report_from(tmp_path / "a", results[:1]), _Runner(), "cpu", tmp_path / "data", code(), True)
    results[0]["spec"]["device"] = "gpu"
    with pytest.raises(UserError, match="the report ran on a GPU"):
        specs_from(_report_from(tmp_path / "b", results[:1]), _Runner(), "cpu", tmp_path / "data", code(), True)
    with pytest.raises(UserError, match="no result files"):
        (tmp_path / "empty" / "results").mkdir(parents=True)
        specs_from(tmp_path / "empty", _Runner(), "cpu", tmp_path / "data", code(), True)


def test_compare_holds_one_result_set_against_another(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "reprokit", "compare", *args], cwd=REPO, capture_output=True,
                              text=True, timeout=120)
    same = run("reports/quick-cpu", "reports/seeds-quick-cpu", "--out", str(tmp_path / "c.md"))
    assert same.returncode == 0, same.stderr
    assert "| vgg16\\_cifar10\\_speed / fixed / PyTorch / quick " in same.stdout and "1.00x" in same.stdout
    where, _, text = same.stdout.partition("\n")          # every command's first line names its folders
    assert where.startswith("state: ") and (tmp_path / "c.md").read_text().strip() == text.strip()
    missing = run("reports/quick-cpu", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and missing.stderr.startswith("error: ") and "no result files" in missing.stderr


def test_a_download_shows_its_progress(tmp_path):
    """A real HTTP download on this machine's loopback: the file arrives whole and the progress is told."""
    import functools
    import http.server
    import threading

    (tmp_path / "served").mkdir()
    payload = bytes(range(256)) * (12 * 2**12)                   # 12 MiB
    (tmp_path / "served" / "archive.tar.gz").write_bytes(payload)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "served"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    lines: list[str] = []
    try:
        downloads.download(f"http://127.0.0.1:{server.server_port}/archive.tar.gz", tmp_path / "got.tar.gz",
                           log=lines.append)
    finally:
        server.shutdown()
    assert (tmp_path / "got.tar.gz").read_bytes() == payload
    assert lines[0].endswith("(12 MiB)") and lines[0].startswith("downloading http://127.0.0.1:")
    assert any("(100%)" in line and "MiB/s" in line for line in lines[1:]), lines
