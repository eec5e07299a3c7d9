"""--devices N[,N...]: the devices one script run holds, on a GPU host and on a CPU (docs/scripts.md, "Devices").

- The host: the flag's counts and each bad input in one sentence before any run; a sweep's specs (each count a run
  of its own, its count in the run id, one device the id it always had); the placement of a described host of eight
  GPUs, four per NUMA node, as a pure function (N = 1, 2, 4: which GPUs each run holds, how many go at once, none
  shared), and the same through the dry run's lines on a stand-in nvidia-smi; the local runner's
  CUDA_VISIBLE_DEVICES and the Docker runner's one container of N GPUs.
- The kit, in each framework's real environment: N stand-in devices before the script's first line (TensorFlow's
  logical CPUs, which MirroredStrategy() mirrors; JAX's host devices); a script that asks for CUDA or NCCL (or a GPU
  device) on a run without a GPU stopped at that call, in one sentence naming its file and line.
- The corpus (slow, alone): Keras fit under MirroredStrategy and a JAX mesh, each at --devices 2 through the CLI.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import gpu_host
import pytest
from checkout import REPO

from reprokit import cli
from reprokit.environments import host_checks, topology
from reprokit.execute import compose
from reprokit.execute.device_placement import Pool
from reprokit.kits.contract.spec import ScriptSpec
from reprokit.kits.devices import no_gpu
from reprokit.results import results
from reprokit.runners.base import KitCall
from reprokit.runners.docker import DockerRunner
from reprokit.runners.make import make

CORPUS = REPO / "tests" / "corpus" / "devices"
USABLE = len(os.sched_getaffinity(0))
two_cpus = pytest.mark.skipif(USABLE < 2, reason="two stand-in devices need two usable CPUs")


def _script(tmp_path: Path, text: str = "import tensorflow as tf\n", name: str = "train.py") -> Path:
    path = tmp_path / "scripts" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def _argv(tmp_path: Path, *more: str) -> list[str]:
    return ["--backend", "local", "--dry-run", "--state-dir", str(tmp_path / "state"), "--data-dir",
            str(tmp_path / "data"), "--reports-dir", str(tmp_path / "reports"), *more]


@pytest.mark.parametrize("more, fragment", [
    (["--devices", "2,x"], "--devices '2,x' is not understood; give the devices one run holds, or several counts "
                           "separated by commas for a sweep, such as --devices 2 or --devices 1,2,4."),
    (["--devices", "0"], "--devices 0: a run holds at least one device"),
    (["--devices", "1,2,2"], "--devices 1,2,2 names 2 more than once; give each count once, such as --devices 1,2."),
    (["--devices", str(USABLE + 1)], f"--devices {USABLE + 1} asks for {USABLE + 1} stand-in devices per run, and "
                                     f"this host lets the kit use {USABLE} CPU"),
])
def test_bad_counts_are_one_sentence_before_any_run(more, fragment, tmp_path, capsys):
    code = cli.main(["reproduce", "--script", f"tensorflow={_script(tmp_path)}", *_argv(tmp_path, *more)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error: ") == 1 and fragment in err, err
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("more, fragment", [
    (["--devices", "5"], "--devices 5 asks for 5 GPUs per run, and --gpus all assigns 4; give --devices 4 or less, "
                         "or assign more GPUs with --gpus."),
    (["--devices", "1,3", "--gpus", "0,1"], "--devices 3 asks for 3 GPUs per run, and --gpus 0,1 assigns 2"),
    (["--devices", "2", "--parallel", "3"], "--parallel 3 with --devices 2 needs 6 GPUs at once, and --gpus all "
                                            "assigns 4; give --parallel 2 or less, or --parallel auto."),
])
def test_more_gpus_than_the_host_assigns_are_refused(more, fragment, stand_in_gpu_host, tmp_path, capsys):
    stand_in_gpu_host()
    code = cli.main(["reproduce", "--script", f"tensorflow={_script(tmp_path)}", *_argv(tmp_path, *more)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error: ") == 1 and fragment in err, err


@two_cpus
def test_a_sweep_is_a_run_per_count_in_one_matrix_and_one_device_keeps_its_run_id(tmp_path):
    script = f"tensorflow={_script(tmp_path)}"
    plain = compose.build(cli.parse(["--script", script, *_argv(tmp_path)])).specs
    swept = compose.build(cli.parse(["--script", script, "--repeats", "2", *_argv(tmp_path, "--devices", "1,2")]))
    assert [(s.devices, s.repeat) for s in swept.specs] == [(1, 0), (2, 0), (1, 1), (2, 1)]
    assert len({s.run_id for s in swept.specs}) == 4 and all(s.computed_run_id() == s.run_id for s in swept.specs)
    (one,) = plain
    assert swept.specs[0].run_id == one.run_id and "devices" not in one.to_dict()      # a spec written before
    assert swept.specs[1].to_dict()["devices"] == 2
    assert ScriptSpec.from_dict(one.to_dict()).devices == 1                              # an older spec loads as 1


def _described_host(gpus: int = 8) -> list[topology.Placement]:
    """A host of ``gpus`` GPUs, half on each of two NUMA nodes, as topology.gpu_slots gives its slots."""
    half = gpus // 2
    return [topology.Placement(str(i), gpu_host.uuid(i), str(i), "0" if i < half else "1") for i in range(gpus)]


@pytest.mark.parametrize("n, rounds", [
    (1, [["0"], ["1"], ["2"], ["3"], ["4"], ["5"], ["6"], ["7"]]),
    (2, [["0", "1"], ["2", "3"], ["4", "5"], ["6", "7"]]),
    (4, [["0", "1", "2", "3"], ["4", "5", "6", "7"]]),
])
def test_eight_gpus_hold_floor_of_eight_over_n_runs_at_once_on_distinct_gpus(n, rounds):
    pool = Pool(_described_host(), at_once=8)
    first = pool.first_round(n)
    assert [[index for index, _ in p.gpus] for p in first] == rounds        # floor(8 / N) at once, near each other
    assert all(p.mems in ("0", "1") for p in first)                        # each run on one memory node
    held = [uuid for p in first for _, uuid in p.gpus]
    assert len(held) == len(set(held)) == len(rounds) * n                    # no GPU held twice
    assert pool.free == pool.slots                                           # the pool left as it was


@pytest.fixture
def eight_gpus(stand_in_gpu_host, monkeypatch):
    """A stand-in nvidia-smi of eight GPUs, four per NUMA node with four CPUs each (all of them usable here)."""
    stand_in_gpu_host(gpus=8)
    monkeypatch.setattr(topology, "usable_cpus", lambda: set(range(8)))


def test_the_dry_run_places_each_count_on_a_described_host(eight_gpus, tmp_path, capsys):
    argv = ["reproduce", "--script", f"tensorflow={_script(tmp_path)}",
            *_argv(tmp_path, "--devices", "1,2,4", "--parallel", "auto", "--repeats", "1")]
    m = compose.build(cli.parse(argv[1:]))
    assert m.executor.at_once == 2                            # an estimate's floor: the widest runs, 8 // 4
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert ("devices 1: 8 run(s) at once, each on 1 GPU: GPU 0 (CPUs 0) | GPU 1 (CPUs 1) | GPU 2 (CPUs 2) | "
            "GPU 3 (CPUs 3) | GPU 4 (CPUs 4) | GPU 5 (CPUs 5) | GPU 6 (CPUs 6) | GPU 7 (CPUs 7)") in out
    assert ("devices 2: 4 run(s) at once, each on 2 GPUs: GPU 0,1 (CPUs 0-1) | GPU 2,3 (CPUs 2-3) | "
            "GPU 4,5 (CPUs 4-5) | GPU 6,7 (CPUs 6-7)") in out
    assert "devices 4: 2 run(s) at once, each on 4 GPUs: GPU 0,1,2,3 (CPUs 0-3) | GPU 4,5,6,7 (CPUs 4-7)" in out
    assert out.count("tensorflow script") == 3 and " r0 2 devices " in out and " r0 4 devices " in out


def test_one_run_at_a_time_holds_its_n_gpus_only(eight_gpus, tmp_path):
    """--parallel 1 with --devices 2: one run at a time, on two GPUs (not every assigned one)."""
    m = compose.build(cli.parse(["--script", f"tensorflow={_script(tmp_path)}", *_argv(tmp_path, "--devices", "2")]))
    assert m.executor.at_once == 1 and m.devices == [
        "devices 2: 1 run(s) at once, each on 2 GPUs: GPU 0,1 (CPUs 0-1)"]


@two_cpus
def test_a_cpu_plan_says_its_stand_ins_share_the_cpus(tmp_path, capsys):
    assert cli.main(["reproduce", "--script", f"tensorflow={_script(tmp_path)}",
                     *_argv(tmp_path, "--devices", "1,2")]) == 0
    out = capsys.readouterr().out
    assert ("devices: each run at N > 1 holds N stand-in devices, each framework's own, declared in its result; they "
            f"share this host's {USABLE} CPU") in out and "so their scaling says nothing about GPUs" in out


@pytest.mark.docker             # the Docker runner's container config asks the engine for the host's memory
def test_the_runners_give_a_run_its_n_gpus(tmp_path):
    """The local runner's CUDA_VISIBLE_DEVICES (seen by a real process) and one container of N GPUs."""
    pool = Pool(_described_host(), at_once=4)
    placement = pool.take(2)
    assert placement is not None
    (tmp_path / "show_gpus.py").write_text("import os, sys\nopen(sys.argv[1], 'w').write("
                                           "os.environ['CUDA_VISIBLE_DEVICES'])\n")
    runner = make("local", data_dir=tmp_path, device="gpu", python=Path(sys.executable), extra_dirs=(tmp_path,),
                  visible_gpus="every-assigned-gpu")
    call = KitCall("pytorch", "show_gpus", (tmp_path / "out" / "seen.txt",), output=tmp_path / "out",
                   placement=placement)
    assert runner.run(call, lambda event: None).exit_code == 0
    assert (tmp_path / "out" / "seen.txt").read_text() == f"{gpu_host.uuid(0)},{gpu_host.uuid(1)}"
    config = DockerRunner(REPO, tmp_path, "all", pinned_images={"pytorch": "reprokit/pytorch:test"}).container_config(
        call, "label")
    (request,) = config["device_requests"]
    assert request["DeviceIDs"] == [gpu_host.uuid(0), gpu_host.uuid(1)] and config["cpuset_cpus"] == "0-1"
    assert placement.record()["more"] == (("1", gpu_host.uuid(1)),)
    assert "more" not in _described_host()[0].record()                 # one GPU: recorded as before
    assert host_checks.parse_gpus(placement.device_id) == [gpu_host.uuid(0), gpu_host.uuid(1)]


# -- the kit, in each framework's real environment -----------------------------------------------------------------

ASKING = {
    "pytorch": {
        "model_cuda.py": ("import torch\nmodel = torch.nn.Linear(4, 2)\nmodel.cuda()\n", 3, "model.cuda()", "CUDA"),
        "to_cuda.py": ("import torch\nx = torch.ones(2)\ny = x.to('cuda')\n", 3, "y = x.to('cuda')", "CUDA"),
        "device_tensor.py": ("import torch\ndevice = torch.device('cuda')\nx = torch.zeros(3, device=device)\n", 3,
                             "x = torch.zeros(3, device=device)", "CUDA"),
        "nccl.py": ("import os\nimport torch.distributed as dist\nos.environ.update(MASTER_ADDR='127.0.0.1', "
                    "MASTER_PORT='29533')\ndist.init_process_group('nccl', rank=0, world_size=1)\n", 4,
                    "dist.init_process_group('nccl', rank=0, world_size=1)", "the NCCL backend"),
    },
    "tensorflow": {
        "gpu_block.py": ("import tensorflow as tf\nwith tf.device('/CPU:0'):\n    a = tf.ones(2)\n"
                         "with tf.device('/GPU:0'):\n    b = tf.ones(2)\n", 4, "with tf.device('/GPU:0'):",
                         "the device '/GPU:0'"),
        "nccl_strategy.py": ("import tensorflow as tf\n\nstrategy = tf.distribute.MirroredStrategy(\n"
                             "    cross_device_ops=tf.distribute.NcclAllReduce())\n", 4,
                             "cross_device_ops=tf.distribute.NcclAllReduce())", "NCCL"),
    },
    "jax": {
        "gpu_backend.py": ("import jax\nprint(jax.devices())\ngpu = jax.devices('gpu')[0]\n", 3,
                           "gpu = jax.devices('gpu')[0]", "the 'gpu' backend"),
    },
}
# What a script may do on a CPU run: choose its device by what is there, seed CUDA (queued until CUDA starts), form
# a process group on gloo.
ALLOWED = {
    "pytorch": ("import tempfile\nimport torch\nimport torch.distributed as dist\n"
                "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
                "x = torch.zeros(3, device=device).to(device)\ntorch.cuda.manual_seed_all(0)\n"
                "dist.init_process_group('gloo', init_method=f'file://{tempfile.mktemp()}', rank=0, world_size=1)\n"
                "dist.destroy_process_group()\n"),
    "tensorflow": "import tensorflow as tf\nwith tf.device('/CPU:0'):\n    a = tf.ones(2)\n",
    "jax": "import jax\nassert jax.devices('cpu') == jax.devices()\n",
}


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "jax"])
def test_a_script_that_asks_for_a_gpu_on_a_cpu_run_stops_there_naming_its_file_and_line(framework, kit_python,
                                                                                       tmp_path):
    for name, (text, *_) in ASKING[framework].items():
        _script(tmp_path, text, name)
    _script(tmp_path, ALLOWED[framework], "allowed.py")
    proc = subprocess.run([str(kit_python(framework)), str(REPO / "tests" / "no_gpu_driver.py"), framework,
                           str(tmp_path / "scripts"), *ASKING[framework], "allowed.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["outcome"].pop("allowed.py") == "ran"
    for name, (_, line, code, asks) in ASKING[framework].items():
        sentence = seen["outcome"][name]
        assert sentence.startswith(f"{name}, line {line} (`{code}`), asks for {asks}"), sentence
        assert "and this run has no GPU (its device is the CPU: --gpus none, or a host without one); run it on a " \
               "GPU host, or " in sentence and sentence.count(". ") == 0 and sentence.endswith("."), sentence
    assert "naming its file and line" in seen["declared"][0]


def test_nccl_is_asked_for_by_name_or_for_the_cpu():
    assert no_gpu.asks_nccl("nccl") == no_gpu.asks_nccl(backend="NCCL") == no_gpu.asks_nccl("cpu:nccl,cuda:nccl") \
        == "the NCCL backend"
    assert no_gpu.asks_nccl("cpu:gloo,cuda:nccl") is no_gpu.asks_nccl("gloo") is no_gpu.asks_nccl() is None


def _probe_run(kit_python, tmp_path: Path, data_dir: Path, framework: str, script: Path, *more: str) -> dict:
    """The script planned as the CLI plans it (quick, local) and run under the probe in its framework's
    environment, as the local runner runs it; its result."""
    parsed = cli.parse(["--script", f"{framework}={script} {tmp_path / 'seen.json'}", "--backend", "local",
                        "--profile", "quick", "--data-dir", str(data_dir), "--state-dir", str(tmp_path / "state"),
                        *more])
    (spec,) = compose.build(parsed).specs
    (tmp_path / "spec.json").write_text(json.dumps(spec.to_dict()))
    out = tmp_path / "out" / "result.json"
    proc = subprocess.run([str(kit_python(framework)), "-m", "reprokit.kits.probe", "--spec", str(tmp_path / "spec.json"),
                           "--out", str(out), "--data-dir", str(data_dir), "--script-dir", str(script.parent)],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    result = json.loads(out.read_text())
    assert results.problems(result) is None, proc.stderr[-3000:]
    return result


@pytest.mark.slow
@two_cpus
def test_tensorflow_has_n_logical_cpus_before_the_first_line_and_mirrored_strategy_mirrors_them(kit_python, tmp_path,
                                                                                              data_dir):
    script = _script(tmp_path, """import json, sys
import numpy as np
import tensorflow as tf
seen = {"logical_cpus": len(tf.config.list_logical_devices("CPU"))}
strategy = tf.distribute.MirroredStrategy()
seen["replicas"] = strategy.num_replicas_in_sync
with open(sys.argv[1], "w") as f:
    json.dump(seen, f)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((4,)), tf.keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(np.zeros((8, 4), "float32"), np.zeros(8, "int64"), batch_size=4, epochs=1)
""")
    result = _probe_run(kit_python, tmp_path, data_dir, "tensorflow", script, "--devices", "2")
    assert result["status"] == "ok", result.get("failure")
    assert json.loads((tmp_path / "seen.json").read_text()) == {"logical_cpus": 2, "replicas": 2}
    (declared,) = [s for s in result["probe"]["shims"] if "stand-in devices" in s]
    assert declared.startswith("2 stand-in devices: 2 logical CPU devices (tf.config.set_logical_device_"
                               "configuration), set before the script's first line; tf.distribute.MirroredStrategy() "
                               "without devices mirrors them")
    assert f"share this process's {USABLE} CPU" in declared and "their scaling says nothing about GPUs" in declared


@pytest.mark.slow
@two_cpus
def test_jax_has_n_host_devices_before_the_first_line(kit_python, tmp_path, data_dir):
    script = _script(tmp_path, """import json, sys
import jax
import jax.numpy as jnp
import optax
with open(sys.argv[1], "w") as f:
    json.dump({"devices": jax.device_count(), "platforms": sorted({d.platform for d in jax.devices()})}, f)
opt = optax.sgd(0.1)
params = jnp.zeros(4)
state = opt.init(params)


@jax.jit
def step(params, state, x):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean((x @ p - 1.0) ** 2))(params)
    updates, state = opt.update(grads, state)
    return optax.apply_updates(params, updates), state, loss


for _ in range(5):
    params, state, loss = step(params, state, jnp.ones((8, 4)))
""", "jax_devices.py")
    result = _probe_run(kit_python, tmp_path, data_dir, "jax", script, "--devices", "2")
    assert result["status"] == "ok", result.get("failure")
    assert json.loads((tmp_path / "seen.json").read_text()) == {"devices": 2, "platforms": ["cpu"]}
    (declared,) = [s for s in result["probe"]["shims"] if "stand-in devices" in s]
    assert declared.startswith("2 stand-in devices: the host platform's 2 CPU devices (XLA_FLAGS=--xla_force_host_"
                               "platform_device_count=2, set before JAX starts)")


@pytest.mark.slow
def test_a_cuda_call_before_the_first_step_fails_the_run_naming_its_line(kit_python, tmp_path, data_dir):
    script = _script(tmp_path, "import torch\n\nmodel = torch.nn.Linear(4, 2)\nmodel = model.to('cuda')\n",
                     "cuda_first.py")
    result = _probe_run(kit_python, tmp_path, data_dir, "pytorch", script)
    assert result["status"] == "failed" and result["failure"]["kind"] == "error"
    assert result["failure"]["message"] == (
        "the script raised NoGpuOnThisRun: cuda_first.py, line 4 (`model = model.to('cuda')`), asks for CUDA, and "
        "this run has no GPU (its device is the CPU: --gpus none, or a host without one); run it on a GPU host, or "
        "let it choose its device: torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\").")


# -- the corpus, through the CLI -------------------------------------------------------------------------------------

def _corpus_run(tmp_path: Path, data_dir: Path, script: str) -> tuple[dict, str]:
    """One corpus script at --devices 2 through the CLI on the quick profile, as a user runs it: its result, and
    the command."""
    argv = ["reproduce", "--script", script, "--devices", "2", "--backend", "local", "--profile", "quick",
            "--no-certify", "--state-dir", str(tmp_path / "state"), "--data-dir", str(data_dir), "--reports-dir",
            str(tmp_path / "reports"), "--name", "devices"]
    proc = subprocess.run([sys.executable, "-m", "reprokit", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (result,) = [json.loads(p.read_text()) for p in (tmp_path / "state" / "results").glob("*.json")]
    assert results.problems(result) is None and result["status"] == "ok", result.get("failure")
    return result, "reprokit " + " ".join(shlex.quote(a) for a in argv[:10])


def _trained_and_evaluated(r: dict, framework_says: str) -> str:
    """The run trained past its first step, evaluated, and declared its two stand-in devices; its table row."""
    e = r["effective"]
    assert r["spec"]["devices"] == 2 and sum(e["train_steps_per_epoch"]) > 1, e
    assert any(p["phase"] == "eval" and p["steps"] for p in r["memory"]["phases"]) and e["test_samples"] > 0, e
    (declared,) = [s for s in r["probe"]["shims"] if "stand-in devices" in s]
    assert declared.startswith(f"2 stand-in devices: {framework_says}") and "share this process's" in declared
    return (f"| {Path(r['spec']['script']['path']).name} | 2 stand-in devices | batch {e['batch_size']['configured']} "
            f"per step as the probe sees it | {sum(e['train_steps_per_epoch'])} steps, {e['test_samples']} test "
            f"samples | {r['timing']['wall_s']:.1f} s |")


@pytest.mark.slow
@pytest.mark.alone
@two_cpus
def test_a_jax_mesh_at_two_devices(kit_python, tmp_path, data_dir):
    """The mesh spans the run's two host devices; the jitted step gets the global batch, 32 per device."""
    kit_python("jax")
    r, command = _corpus_run(tmp_path, data_dir, f"jax={CORPUS / 'mesh_jax.py'} --eval-every 1")
    row = _trained_and_evaluated(r, "the host platform's 2 CPU devices")
    assert r["effective"]["batch_size"]["configured"] == 64       # the global batch: 32 per device on two
    print(f"\n{command}\n{row}")
