"""The kit's own experiments at N devices, the plan's side (docs/experiments.md, "Devices"): each kit run at each
count (--devices, else the file's device_counts), its global batch held (strong scaling) or N times the file's
(weak), each bad count refused in one sentence before any run, a run at one device with the id it always had, and
the dry run's lines and cost at N. Host only: nothing here trains."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import TINY

from reprokit import cli
from reprokit.console import run_label
from reprokit.errors import UserError
from reprokit.execute import data_step
from reprokit.kits.contract.spec import RunSpec
from reprokit.plan import matrix, tuning
from reprokit.plan import plan as planning
from reprokit.plan.experiments import BUILTIN_DIR, discover, load

USABLE = len(os.sched_getaffinity(0))


def _tiny(tmp_path: Path, experiment: str = "", data: str = "") -> Path:
    """The tiny experiment in a folder of its own, with more keys in its [experiment] (and [data]) table."""
    folder = tmp_path / "exps"
    folder.mkdir(exist_ok=True)
    text = TINY.replace('frameworks = ["pytorch", "tensorflow"]\n',
                        f'frameworks = ["pytorch", "tensorflow"]\n{experiment}\n')
    (folder / "tiny.toml").write_text(text.replace("train_samples = 256\n", data or "train_samples = 256\n"))
    return folder / "tiny.toml"


def _argv(tmp_path: Path, *more: str) -> list[str]:
    return ["--dry-run", "--variants", "fixed", "--state-dir", str(tmp_path / "state"), "--data-dir",
            str(tmp_path / "data"), *more]


def _plan(tmp_path: Path, *more: str) -> list:
    """The specs a dry run plans on this CPU host, at the quick profile."""
    req = cli.parse(_argv(tmp_path, *more))
    exps = matrix.selected(req.what, matrix.known(req.what))
    return matrix.planned(req, exps, "quick", "cpu", lambda framework: {}, data_step.LookedUp(req.how.data_dir))[0]


def _tiny_plan(tmp_path: Path, *more: str) -> list[RunSpec]:
    return _plan(tmp_path, "--experiments", str(tmp_path / "exps"), "--only", "tiny", *more)


def test_devices_1_2_plans_each_kit_experiment_at_both_counts_its_batch_held(tmp_path: Path) -> None:
    specs = _plan(tmp_path, "--devices", "1,2", "--repeats", "2")
    builtin = discover([BUILTIN_DIR])
    assert {s.experiment for s in specs} == {"simplecnn_cifar10_memory", "vgg16_cifar10_speed"}
    for name in {s.experiment for s in specs}:
        batch = builtin[name].resolved("quick")["train"]["batch_size"]
        for framework in {s.framework for s in specs if s.experiment == name}:
            mine = [s for s in specs if (s.experiment, s.framework) == (name, framework)]
            assert sorted((s.devices, s.repeat) for s in mine) == [(1, 0), (1, 1), (2, 0), (2, 1)]
            assert {s.train.batch_size for s in mine} == {batch}         # strong scaling: the global batch held
    # repeat by repeat, every count of every configuration's first repeat before any second one
    assert [s.repeat for s in specs] == sorted(s.repeat for s in specs)
    assert len({s.run_id for s in specs}) == len(specs)


def test_an_experiment_files_counts_and_weak_scaling_multiply_its_batch(tmp_path: Path) -> None:
    """device_counts = [1, 2] and scaling = "weak": its batch (32) is each device's, so the global batch at 2 is 64;
    the evaluation batch stays 32; --devices overrides the file's counts."""
    _tiny(tmp_path, 'device_counts = [1, 2]\nscaling = "weak"')
    specs = _tiny_plan(tmp_path)
    assert sorted((s.framework, s.devices, s.train.batch_size, s.train.eval_batch_size) for s in specs) == [
        ("pytorch", 1, 32, 32), ("pytorch", 2, 64, 32), ("tensorflow", 1, 32, 32), ("tensorflow", 2, 64, 32)]
    assert {(s.devices, s.train.batch_size) for s in _tiny_plan(tmp_path, "--devices", "4")} == {(4, 128)}


def test_strong_scaling_is_the_default_and_holds_the_batch(tmp_path: Path) -> None:
    exp = load(_tiny(tmp_path, "device_counts = [2, 4]"))
    assert (exp.device_counts, exp.scaling) == ((2, 4), "strong")
    assert {(s.devices, s.train.batch_size) for s in _tiny_plan(tmp_path)} == {(2, 32), (4, 32)}
    assert load(_tiny(tmp_path)).device_counts == (1,)


def test_a_count_that_does_not_divide_the_global_batch_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(UserError) as info:
        _plan(tmp_path, "--devices", "1,3", "--only", "simplecnn_cifar10_memory")
    assert str(info.value) == (
        "--devices 1,3 asks for 3 devices, which do not divide simplecnn_cifar10_memory's global batch of 64 (strong "
        "scaling keeps it at every count); give counts that divide 64, such as 1,2,4,8.")
    path = _tiny(tmp_path, "device_counts = [1, 3]")             # the file's own counts: it names the file
    with pytest.raises(UserError, match=rf"^{path}: experiment.device_counts \[1, 3\] asks for 3 devices, which do "
                                        r"not divide tiny's global batch of 32 .*such as 1,2,4,8\.$"):
        _tiny_plan(tmp_path)


def test_a_weak_global_batch_above_the_training_samples_is_one_sentence(tmp_path: Path) -> None:
    """The quick profile's samples (here 256) at weak scaling: 8 devices of 32 would need 256, 16 need 512."""
    _tiny(tmp_path, 'scaling = "weak"')
    assert {s.train.batch_size for s in _tiny_plan(tmp_path, "--devices", "8")} == {256}
    with pytest.raises(UserError) as info:
        _tiny_plan(tmp_path, "--devices", "1,16")
    assert str(info.value) == (
        "--devices 1,16 asks for 16 devices, and tiny scales weakly: its global batch at 16 is 16 x 32 = 512, more "
        "than its 256 training samples (profile quick); give counts up to 8, or more training samples "
        "(data.train_samples).")


def test_bad_input_in_the_cli_is_one_sentence_before_any_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    argv = ["reproduce", "--backend", "local", *_argv(tmp_path, "--reports-dir", str(tmp_path / "reports")),
            "--experiments", str(tmp_path / "exps"), "--only", "tiny"]
    path = _tiny(tmp_path, "device_counts = [1, 2]")         # within any host's CPUs (the suite needs 2)
    path.write_text(path.read_text().replace("batch_size = 32\n", "batch_size = 33\n"))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == 1 and f"{path}: experiment.device_counts [1, 2] asks for 2 devices, which do " \
        "not divide tiny's global batch of 33" in err, err
    # the kit's runs at N take part in the host's limit: stand-in devices, at most its usable CPUs
    wide = USABLE + 1
    _tiny(tmp_path, f'device_counts = [1, {wide}]\nscaling = "weak"', data=f"train_samples = {32 * wide}\n")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == 1 and f"asks for {wide} stand-in devices per run" in err, err
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("line, words", [
    ("device_counts = [0, 2]", "experiment.device_counts.0: must be >= 1, got 0"),
    ("device_counts = []", "experiment.device_counts: [] should be non-empty"),
    ("device_counts = [2, 2]", "experiment.device_counts: [2, 2] has non-unique elements"),
    ("device_counts = 2", "experiment.device_counts: expected array, got int 2"),
    ('scaling = "both"', "experiment.scaling: 'both' is not allowed; allowed: strong, weak"),
])
def test_bad_values_in_the_file_are_one_sentence(tmp_path: Path, line: str, words: str) -> None:
    path = _tiny(tmp_path, line)
    with pytest.raises(UserError) as info:
        load(path)
    assert str(info.value) == f"{path}: {words}"


def test_a_script_experiment_takes_counts_but_no_scaling(tmp_path: Path) -> None:
    """A script experiment's device_counts are its counts too (its scripts hold the devices); scaling is refused."""
    folder = tmp_path / "exps"
    folder.mkdir()
    (folder / "train.py").write_text("import tensorflow as tf\n")
    head = '[experiment]\nname = "mine"\ntitle = "t"\nframeworks = ["tensorflow"]\ndevice_counts = [1, 2]\n'
    (folder / "mine.toml").write_text(f'{head}\n[scripts]\ntensorflow = "train.py"\n')
    specs = _plan(tmp_path, "--experiments", str(folder), "--only", "mine")
    assert sorted(s.devices for s in specs) == [1, 2]
    (folder / "mine.toml").write_text(f'{head}scaling = "weak"\n\n[scripts]\ntensorflow = "train.py"\n')
    with pytest.raises(UserError, match=r"experiment.scaling: a script experiment's scripts choose their own batch"):
        load(folder / "mine.toml")


def test_a_run_at_one_device_keeps_its_run_id(tmp_path: Path) -> None:
    """The count is written only above one: the run at 1 of a sweep is the run planned without the flag, and its
    JSON, without the field, reads back as the same spec with the same id."""
    _tiny(tmp_path)
    plain = _tiny_plan(tmp_path)
    swept = _tiny_plan(tmp_path, "--devices", "1,2")
    at_one = [s for s in swept if s.devices == 1]
    assert [s.run_id for s in at_one] == [s.run_id for s in plain] and len(swept) == 2 * len(plain)
    for spec in plain:
        written = spec.to_dict()
        assert "devices" not in written and RunSpec.from_dict(written).computed_run_id() == spec.run_id
    assert all(s.to_dict()["devices"] == 2 and s.run_id not in {p.run_id for p in plain}
               for s in swept if s.devices == 2)
    # the progress lines tell the two apart
    assert {run_label(s) for s in swept if s.framework == "pytorch"} == {"tiny / pytorch / fixed r0",
                                                                         "tiny / pytorch / fixed r0 at 2 devices"}


def test_the_dry_run_prices_the_kits_runs_at_their_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    """--gpu-model: the file's counts without --devices, each run priced as N GPUs; nothing said of one device."""
    _tiny(tmp_path, "device_counts = [1, 2]")
    assert cli.reproduce(["--gpu-model", "H100-SXM", "--repeats", "1", "--experiments", str(tmp_path / "exps"),
                          "--only", "tiny", *_argv(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "plan: 4 runs (2 at 1, 2 at 2 devices), profile standard on a GPU, 1 experiment(s)" in out, out
    assert "GPU-hours by count: 1 GPU " in out and ", 2 GPUs " in out and "for now" not in out


def test_a_run_at_n_a_kit_cannot_split_is_left_out_before_any_run_saying_why(tmp_path: Path) -> None:
    """The seeds' as-posted VGG16 feeds its own batches (PyTorch's posted DataLoader, TensorFlow's batches of one),
    and TensorFlow's XLA compile cannot compile a mirrored step: at 2 devices they are left out, each with why; at
    one device they run."""
    kept, said = planning.runnable_at_n(_plan(tmp_path, "--devices", "1,2", "--only", "vgg16_cifar10_speed",
                                                 "--variants", "fixed,as_posted,tuned"))
    assert said == [
        "vgg16_cifar10_speed: PyTorch as_posted at 2 devices (not run: the posted DataLoader feeds batches of its "
        "own, which DDP would not split among the ranks; it runs at one device)",
        "vgg16_cifar10_speed: TensorFlow as_posted at 2 devices (not run: the posted batches of one cannot be split "
        "among devices; it runs at one device)"]
    posted = {(s.framework, s.devices) for s in kept if s.variant == "as_posted"}
    assert posted == {("pytorch", 1), ("tensorflow", 1)}
    tensorflow = [s for s in kept if s.framework == "tensorflow"]
    assert {s.devices for s in tensorflow if s.numerics.compile} == {1}       # alone and in tuned, at one device
    assert {s.variant for s in tensorflow if s.devices == 2} >= {"fixed", "tuned"}
    compile_said = next(d for d in next(s for s in tensorflow if s.devices == 2 and s.variant == "tuned").differences
                        if d["field"] == "tuned: compile")
    assert compile_said["tensorflow"] == ("left out: not at 2 devices: XLA cannot compile a MirroredStrategy step "
                                          "whose mirrored variables sit on several devices")


def test_tuned_at_each_count_is_chosen_from_the_runs_at_that_count(tmp_path: Path) -> None:
    """inter_op alone slowed TensorFlow at 2 devices and not at one: tuned leaves it out at 2 only (a choice read
    from both counts pooled would keep it at both or drop it at both)."""
    _tiny(tmp_path)
    specs = [s for s in _tiny_plan(tmp_path, "--devices", "1,2", "--variants", "fixed,tuned")
             if isinstance(s, RunSpec) and s.framework == "tensorflow"]
    rates = {(1, "fixed"): 100.0, (1, "+tuned_inter_op"): 101.0, (1, "+tuned_compile"): 120.0,
             (2, "fixed"): 180.0, (2, "+tuned_inter_op"): 120.0}
    results = [{"run_id": s.run_id, "experiment": s.experiment, "framework": s.framework, "variant": s.variant,
                "status": "ok", "spec": s.to_dict(), "timing": {"samples_per_s": rates[s.devices, s.variant]}}
               for s in specs if s.variant != "tuned"]
    assert {(s.devices, s.variant) for s in specs if s.variant != "tuned"} == set(rates)
    tuned = {s.devices: s for s in tuning.compose(specs, results)}
    assert tuned[1].numerics.cpu_threads.inter_op == "framework_default" and tuned[1].numerics.compile
    assert tuned[2].numerics.cpu_threads.inter_op == 1 and not tuned[2].numerics.compile
    said = tuning.choices_said(specs, results)
    assert said == ["tiny / TensorFlow: compile, inter_op",
                    "tiny / TensorFlow at 2 devices: no setting; left out compile: not at 2 devices: XLA cannot "
                    "compile a MirroredStrategy step whose mirrored variables sit on several devices; left out "
                    "inter_op: alone it slowed TensorFlow here: 0.67x fixed's throughput"]
