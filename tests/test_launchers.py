"""Launchers, as users type them: torchrun, python -m torch.distributed.run, accelerate launch and fabric run.

The host reads a launcher from the script value (``FRAMEWORK=[LAUNCHER] (PATH | -m MODULE) [ARGS]``) or from an
experiment file's ``launcher = "..."``, counts the processes it starts and refuses, before any run and in one
sentence each, what no run could do (reprokit/plan/launchers.py); those tests start no framework. The kit runs the
launcher in the probe's own process, with its rendezvous port free on this machine (reprokit/kits/launchers/run.py): the
port rule is tested on real sockets, and a real torchrun runs the torchrun corpus script's two ranks from the
launcher's code alone (tests/launcher_driver.py). Each launcher's corpus script (tests/corpus/launchers/) then runs
end to end through the CLI at --devices 2, on gloo on this CPU: slow, and alone (each is a multi-rank run).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from checkout import REPO

from reprokit import cli
from reprokit.errors import UserError
from reprokit.execute import compose
from reprokit.kits.contract.spec import Launcher, ScriptSpec
from reprokit.kits.framework_free import dataset_formats, stand_ins
from reprokit.kits.framework_free.data import Arrays
from reprokit.kits.launchers import run as kit_launcher
from reprokit.plan import experiments, launchers

CORPUS = REPO / "tests" / "corpus" / "launchers"
TORCHRUN = CORPUS / "torchrun_ddp" / "ddp_torchrun.py"
FABRIC = CORPUS / "fabric_mnist" / "train_fabric.py"
ACCELERATE = CORPUS / "accelerate_cifar10" / "cv_example.py"


def _scripts(value: str):
    return cli.parse(["--script", value]).what.scripts["pytorch"]


@pytest.mark.parametrize(("value", "launcher", "path", "module", "args"), [
    (f"pytorch=torchrun --nproc-per-node 2 {TORCHRUN} 1 1", ("torchrun", "--nproc-per-node", "2"), TORCHRUN, None,
     ("1", "1")),
    ("pytorch=python -m torch.distributed.run --standalone --nproc_per_node=2 -m pkg.train --lr 0.1",
     ("python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"), None, "pkg.train",
     ("--lr", "0.1")),
    (f"pytorch=accelerate launch --multi_gpu --num_processes 2 {ACCELERATE} --cpu",
     ("accelerate", "launch", "--multi_gpu", "--num_processes", "2"), ACCELERATE, None, ("--cpu",)),
    # fabric run's options may follow the script, as Lightning's docs write them: they are the launcher's
    (f"pytorch=fabric run {FABRIC} --accelerator=cpu --devices 2 --epochs 1 -- --devices 3",
     ("fabric", "run", "--accelerator=cpu", "--devices", "2"), FABRIC, None, ("--epochs", "1", "--", "--devices", "3")),
    (f"pytorch={FABRIC} --devices 2", (), FABRIC, None, ("--devices", "2")),
])
def test_a_script_value_names_its_launcher_before_the_script(value, launcher, path, module, args):
    command = _scripts(value)
    assert (command.launcher, command.path, command.module, command.args) == (launcher, path, module, args)


@pytest.mark.parametrize(("value", "words"), [(f"pytorch=deepspeed --num_gpus 2 {TORCHRUN}", "deepspeed --num_gpus 2"),
                                              (f"pytorch=python {TORCHRUN}", "python")])
def test_a_word_before_the_script_that_is_no_launcher_is_refused(value, words):
    with pytest.raises(UserError) as refused:
        _scripts(value)
    assert str(refused.value) == (
        f"--script {value!r}: {words} is not a launcher the kit runs; give torchrun, python -m torch.distributed.run, "
        f"accelerate launch or fabric run before the script, or the script alone (the kit runs it with the "
        f"framework's Python)")


@pytest.mark.parametrize(("typed", "option", "address"), [
    ("torchrun --master-addr 10.0.0.2", "--master-addr", "10.0.0.2"),
    ("torchrun --master_addr=node1", "--master_addr", "node1"),
    ("python -m torch.distributed.run --rdzv-endpoint node1:29400", "--rdzv-endpoint", "node1:29400"),
    ("torchrun --rdzv_endpoint=192.168.1.5", "--rdzv_endpoint", "192.168.1.5"),
    ("accelerate launch --main_process_ip 10.1.1.1", "--main_process_ip", "10.1.1.1"),
    ("fabric run --main-address 172.16.0.9", "--main-address", "172.16.0.9"),
])
def test_a_rendezvous_address_off_this_machine_is_refused(typed, option, address):
    value = f"pytorch={typed} {TORCHRUN}"
    with pytest.raises(UserError) as refused:
        _scripts(value)
    host = address.rpartition(":")[0] if option.startswith("--rdzv") and ":" in address else address
    name = typed.split(" --")[0]
    way = "127.0.0.1:PORT" if option.startswith("--rdzv") else "127.0.0.1"
    assert str(refused.value) == (
        f"--script {value!r}: {name} {option} {address} puts the rendezvous on {host}, off this machine, and a run "
        f"keeps all its processes on one machine; leave {option} out (the rendezvous is then on 127.0.0.1) or give "
        f"{way}")


@pytest.mark.parametrize("typed", ["torchrun --master-addr localhost", "torchrun --rdzv-endpoint [::1]:29400",
                                   "torchrun --master_addr=127.0.0.2", "fabric run --main_address 127.0.0.1"])
def test_a_loopback_rendezvous_is_the_users_own(typed):
    assert _scripts(f"pytorch={typed} {TORCHRUN}").launcher == tuple(typed.split())


@pytest.mark.parametrize(("value", "says"), [
    (f"pytorch=torchrun --nnodes 2 {TORCHRUN}", "torchrun --nnodes 2 asks for more than one node"),
    (f"pytorch=torchrun --nnodes=1:4 {TORCHRUN}", "torchrun --nnodes 1:4 asks for more than one node"),
    (f"pytorch=accelerate launch --num_machines 2 {ACCELERATE}", "--num_machines 2 asks for more than one node"),
    ("pytorch=fabric run -m pkg.train", "fabric run runs a script's path, not -m MODULE"),
    (f"pytorch=accelerate launch --config_file cfg.yaml {ACCELERATE}",
     "--config_file keeps the launch's settings in a file the kit does not read"),
    ("pytorch=torchrun --nproc-per-node 2", "torchrun is given no script"),
])
def test_what_no_run_could_do_is_refused_at_the_door(value, says):
    with pytest.raises(UserError, match=says.replace("(", r"\(")):
        _scripts(value)


def test_an_experiment_file_gives_the_launcher_beside_the_script(tmp_path):
    def load(entry: str, framework: str = "pytorch"):
        path = tmp_path / "launched.toml"
        path.write_text(f'[experiment]\nname = "launched"\ntitle = "t"\nframeworks = ["{framework}"]\n\n'
                        f'[scripts.{framework}]\n{entry}\nfolder = "{TORCHRUN.parent}"\n')
        return experiments.load(path).scripts[framework]
    entry = load('path = "ddp_torchrun.py"\nargs = ["1", "1"]\nlauncher = "torchrun --nproc-per-node {devices}"')
    assert entry["launcher"] == {"name": "torchrun", "options": ["--nproc-per-node", "{devices}"]}
    assert entry["args"] == ["1", "1"]
    fabric = load('path = "ddp_torchrun.py"\nargs = ["--devices", "2", "--epochs", "1"]\nlauncher = "fabric run"')
    assert (fabric["launcher"]["options"], fabric["args"]) == (["--devices", "2"], ["--epochs", "1"])
    with pytest.raises(UserError, match="names a script; the launcher holds its own options only"):
        load('path = "ddp_torchrun.py"\nlauncher = "torchrun --nproc-per-node 2 ddp_torchrun.py"')
    with pytest.raises(UserError, match="starts PyTorch's ranks; a TensorFlow script runs without one"):
        load('path = "ddp_torchrun.py"\nlauncher = "torchrun"', "tensorflow")
    with pytest.raises(UserError, match="is not a launcher the kit runs"):
        load('path = "ddp_torchrun.py"\nlauncher = "horovodrun -np 2"')


@pytest.mark.parametrize(("typed", "device", "devices", "processes"), [
    ("torchrun", "cpu", 1, 1),
    ("torchrun --nproc-per-node {devices}", "cpu", 4, 4),
    ("torchrun --nproc_per_node=gpu", "gpu", 8, 8),
    ("accelerate launch --multi_gpu --num-processes 2", "cpu", 2, 2),
    ("accelerate launch --num_processes 2", "gpu", 2, 2),        # accelerate turns --multi_gpu on with 2 GPUs
    ("accelerate launch --cpu", "cpu", 1, 1),
    ("fabric run --devices=-1 --accelerator cuda", "gpu", 4, 4),
    ("fabric run --devices 0,1", "gpu", 2, 2),
    ("fabric run --strategy dp --devices 2", "gpu", 1, 1),
])
def test_the_processes_are_counted_as_each_launcher_counts_them(typed, device, devices, processes):
    name, options = launchers.parse(typed, "here")
    assert launchers.planned(name, options, device, devices, "here")["processes"] == processes


@pytest.mark.parametrize(("typed", "devices", "sentence"), [
    ("torchrun --nproc-per-node 4", 2, "torchrun --nproc-per-node 4 starts 4 processes, and the run holds 2 devices "
     "(--devices 2); give the launcher --nproc-per-node 2 (or {devices}), or --devices 4"),
    ("accelerate launch --num_processes 2", 2, "accelerate launch --num_processes 2 starts 1 process (without "
     "--multi_gpu accelerate launch starts one process here; more need MPI), and the run holds 2 devices (--devices "
     "2); give the launcher --multi_gpu --num_processes 2 (or {devices}), or --devices 1"),
    ("fabric run --devices 2", 1, "fabric run --devices 2 starts 2 processes, and the run holds 1 device (--devices "
     "1); give the launcher --devices 1 (or {devices}), or --devices 2"),
    ("torchrun --nproc-per-node auto", 2, "torchrun --nproc-per-node auto is not a process count the kit can read "
     "for a CPU run; give a number, or {devices} for the run's device count"),
])
def test_a_launcher_count_that_differs_from_the_devices_is_refused(typed, devices, sentence):
    name, options = launchers.parse(typed, "the PyTorch script train.py")
    with pytest.raises(UserError) as refused:
        launchers.planned(name, options, "cpu", devices, "the PyTorch script train.py")
    assert str(refused.value) == f"the PyTorch script train.py: {sentence}"


def test_the_kit_declares_what_it_changes_of_the_options():
    name, options = launchers.parse("torchrun --nproc-per-node={devices}", "here")
    planned = launchers.planned(name, options, "cpu", 2, "here")
    assert planned == {"name": "torchrun", "options": ["--nproc-per-node=2", "--master-addr", "127.0.0.1"],
                       "processes": 2, "declared": [
                           "{devices} in torchrun's options is the run's device count, 2",
                           "torchrun's rendezvous stays on this machine: --master-addr 127.0.0.1 given (none was)"]}
    standalone = launchers.planned("torchrun", ["--standalone"], "cpu", 1, "here")   # its own free port on localhost
    assert standalone["options"] == ["--standalone"] and standalone["declared"] == []


def _entry(folder: Path, code: str, launcher: dict | None = None, own: dict[str, str] | None = None) -> dict:
    (folder / "train.py").write_text(code)
    for name, text in (own or {}).items():
        (folder / name).write_text(text)
    return {"folder": folder, "path": "train.py", "module": None, "launcher": launcher}


@pytest.mark.parametrize(("code", "own"), [
    ("import torch.multiprocessing as mp\nmp.spawn(print, nprocs=2)\n", None),
    ("from torch.multiprocessing import start_processes\nstart_processes(print, nprocs=2)\n", None),
    ("import lightning as L\ntrainer = L.Trainer(accelerator='cpu', devices=2)\n", None),
    ("from lightning.fabric import Fabric\nfabric = Fabric(devices=2)\n", None),
    ("import helpers\nhelpers.main()\n", {"helpers.py": "from torch import multiprocessing\n"
                                                        "def main():\n    multiprocessing.spawn(print, nprocs=2)\n"}),
])
def test_a_script_that_starts_its_ranks_itself_needs_no_launcher(tmp_path, code, own):
    assert launchers.for_spec("pytorch", _entry(tmp_path, code, own=own), None, "cpu", 2) is None


@pytest.mark.parametrize("code", ["import torch\nprint(torch.ones(2))\n",
                                  "import lightning as L\ntrainer = L.Trainer(accelerator='cpu')\n",
                                  "import multiprocessing as mp\nmp.get_context('spawn').Process(target=print).start()\n"])
def test_a_pytorch_script_given_more_devices_without_a_launcher_is_refused(tmp_path, code):
    with pytest.raises(UserError) as refused:
        launchers.for_spec("pytorch", _entry(tmp_path, code), None, "cpu", 2)
    assert str(refused.value) == (
        "the PyTorch script train.py runs as one process, and --devices 2 asks for 2 ranks: the script starts them "
        "through a launcher, torch.multiprocessing.spawn or a trainer's devices=, and the kit never adds one; give "
        "its launcher before it (--script \"pytorch=torchrun --nproc-per-node 2 train.py\") or --devices 1")
    assert launchers.for_spec("pytorch", _entry(tmp_path, code), None, "cpu", 1) is None
    assert launchers.for_spec("jax", _entry(tmp_path, code), None, "cpu", 2) is None    # its devices are its own


def test_a_launcher_comes_with_the_packages_it_needs(tmp_path):
    fabric = {"name": "fabric run", "options": ["--devices", "1"]}
    with pytest.raises(UserError) as refused:
        launchers.for_spec("pytorch", _entry(tmp_path, "print(1)\n", fabric), None, "cpu", 1)
    assert str(refused.value) == (
        "the PyTorch script train.py: fabric run comes from lightning, click, which neither the PyTorch lock nor the "
        "script's requirements have; add --require pytorch=lightning,click (or list them in a requirements.txt "
        "beside the script)")
    installed = {"install": ["Lightning==2.6.6 --hash=sha256:00", "click==8.3.1 --hash=sha256:00"], "in_lock": []}
    assert launchers.for_spec("pytorch", _entry(tmp_path, "print(1)\n", fabric), installed, "cpu", 1)["processes"] == 1
    torchrun = {"name": "torchrun", "options": []}         # torch's own: in the lock
    assert launchers.for_spec("pytorch", _entry(tmp_path, "print(1)\n", torchrun), None, "cpu", 1)["name"] == "torchrun"


def test_the_spec_carries_the_launcher_in_its_id_and_older_specs_still_load(tmp_path):
    args = cli.parse(["--script", f"pytorch=torchrun --nproc-per-node {{devices}} {TORCHRUN} 1 1", "--devices", "2",
                      "--profile", "quick", "--backend", "local", "--state-dir", str(tmp_path / "state"),
                      "--data-dir", str(tmp_path / "data"), "--dry-run"])
    (spec,) = compose.build(args).specs
    assert spec.script.launcher == Launcher("torchrun", ["--nproc-per-node", "2", "--master-addr", "127.0.0.1"], 2, [
        "{devices} in torchrun's options is the run's device count, 2",
        "torchrun's rendezvous stays on this machine: --master-addr 127.0.0.1 given (none was)"])
    raw = spec.to_dict()
    assert ScriptSpec.from_dict(raw) == spec and spec.computed_run_id() == spec.run_id
    other = json.loads(json.dumps(raw))
    other["script"]["launcher"]["options"][1] = "3"
    assert ScriptSpec.from_dict(other).computed_run_id() != spec.run_id
    older = json.loads(json.dumps(raw))
    del older["script"]["launcher"]
    plain = ScriptSpec.from_dict(older)
    assert plain.script.launcher is None and "launcher" not in plain.to_dict()["script"]


@pytest.fixture
def listening():
    """A port in use on this machine: a socket listening on it (on every address), closed at the end."""
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        yield held.getsockname()[1]


@pytest.mark.parametrize(("name", "options", "option"), [
    ("torchrun", ["--master-port", "{port}"], "--master-port"),
    ("python -m torch.distributed.run", ["--master_port={port}"], "--master_port"),
    ("torchrun", ["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:{port}"], "--rdzv-endpoint"),
    ("accelerate launch", ["--main_process_port", "{port}"], "--main_process_port"),
    ("fabric run", ["--main-port={port}"], "--main-port"),
])
def test_a_rendezvous_port_in_use_is_replaced_by_a_free_one_and_declared(listening, name, options, option):
    launcher = Launcher(name, [o.replace("{port}", str(listening)) for o in options], 2)
    given, said = kit_launcher.with_free_port(launcher)
    new = launchers.value(given, (option,))
    port = int(new.rpartition(":")[2])
    assert port != listening and not kit_launcher.in_use(port) and new.startswith("127.0.0.1:") == ("rdzv" in option)
    assert said == f"port {listening} on this machine is in use: {name}'s rendezvous takes a free one ({option} {new})"
    assert len(given) == len(launcher.options)         # the user's option, its value replaced
    free = Launcher(name, [o.replace("{port}", str(port)) for o in options], 2)
    assert kit_launcher.with_free_port(free) == (free.options, None)


def test_a_launcher_that_finds_its_own_port_is_left_alone():
    for torchrun in (Launcher("torchrun", ["--nproc-per-node", "2"], 2), Launcher("torchrun", ["--standalone"], 1)):
        assert kit_launcher.with_free_port(torchrun) == (torchrun.options, None)


def _left_in(folder: Path) -> list[str]:
    """The processes still running whose working folder is ``folder`` (a launcher's workers start there)."""
    left = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")) == folder:
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                left.append(f"{proc.name}: {command}")
        except OSError:
            continue                       # gone, or not ours to read
    return left


@pytest.mark.slow
def test_torchrun_starts_the_ranks_with_a_free_port(kit_python, tmp_path, listening):
    """python -m torch.distributed.run from the kit's launcher code alone: two gloo ranks of the torchrun corpus
    script, their rendezvous on a free port in place of the one in use; both train, rank 0 saves its snapshot."""
    work = tmp_path / "work"
    work.mkdir()
    (work / TORCHRUN.name).write_bytes(TORCHRUN.read_bytes())
    dataset_formats.write_idx(Arrays(*stand_ins.generate("mnist", 128, 32, seed=0), sha256=""),
                             work / "data" / "MNIST" / "raw")
    spec = {"launcher": Launcher("python -m torch.distributed.run", ["--nproc-per-node", "2", "--master-port",
                                                                      str(listening)], 2), "args": ["1", "1"]}
    raw = _spec_with(tmp_path, spec)
    started = time.perf_counter()
    done = subprocess.run([str(kit_python("pytorch")), str(REPO / "tests" / "launcher_driver.py"), str(raw),
                           str(work), str(tmp_path / "shims.json")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads((tmp_path / "shims.json").read_text())
    assert said[0].startswith("runs through python -m torch.distributed.run (2 processes), as python -m "
                              "torch.distributed.run --nproc-per-node 2 --master-port ")
    assert said[-1].startswith(f"port {listening} on this machine is in use: python -m torch.distributed.run's "
                               f"rendezvous takes a free one (--master-port ")
    ranks = {line.split("]")[0] for line in done.stdout.splitlines() if line.startswith("[rank ")}
    assert ranks == {"[rank 0", "[rank 1"}, done.stdout
    assert "MODEL_STATE" in subprocess.run([str(kit_python("pytorch")), "-c", "import torch; print(list(torch.load("
                                            "'snapshot.pt')))"], cwd=work, capture_output=True, text=True).stdout
    assert not _left_in(work)
    print(f"\n| python -m torch.distributed.run (driver) | 2 ranks | exit 0 | {wall:.1f} s |")


def _spec_with(tmp_path: Path, script: dict) -> Path:
    """A planned spec of the torchrun corpus script (a dry run), its launcher and arguments replaced."""
    args = cli.parse(["--script", f"pytorch=torchrun --nproc-per-node 2 {TORCHRUN}", "--devices", "2", "--profile",
                      "quick", "--backend", "local", "--state-dir", str(tmp_path / "state"), "--data-dir",
                      str(tmp_path / "data"), "--dry-run"])
    (planned,) = compose.build(args).specs
    raw = planned.to_dict()
    raw["script"] |= {"launcher": script["launcher"].__dict__, "args": script["args"]}
    (tmp_path / "spec.json").write_text(json.dumps(raw))
    return tmp_path / "spec.json"


# The other launchers' corpus scripts, one process each through their launcher (the suite's runs of two ranks end
# to end are tests/test_processes_e2e.py's and tests/test_devices.py's; the torchrun corpus script runs its two
# ranks there): (script value, --require)
E2E = {"accelerate launch": (f"pytorch=accelerate launch --num_processes {{devices}} {ACCELERATE} --cpu "
                             f"--num_epochs 1", ("--require", "pytorch=accelerate")),
       "fabric run": (f"pytorch=fabric run {FABRIC} --accelerator=cpu --devices={{devices}} --epochs 1 --save-model",
                      ("--require", "pytorch=lightning,click"))}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(E2E))
def test_each_launchers_corpus_script_runs_through_it_to_the_end(tmp_path, data_dir, name):
    value, require = E2E[name]
    command = [sys.executable, "-m", "reprokit", "reproduce", "--script", value, *require, "--devices", "1",
               "--backend", "local", "--profile", "quick", "--state-dir", str(tmp_path / "state"), "--data-dir",
               str(data_dir), "--reports-dir", str(tmp_path / "reports"), "--name", "launched"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - started
    (path,) = (tmp_path / "reports" / "launched" / "results").glob("*.json")
    result = json.loads(path.read_text())
    assert result["status"] == "ok", (result.get("failure"), done.stdout[-3000:])
    assert not _left_in_state(tmp_path / "state")
    assert sum(result["effective"]["train_steps_per_epoch"]) == 3       # the quick profile's bound
    launcher = result["spec"]["script"]["launcher"]
    assert (launcher["name"], launcher["processes"]) == (name, 1)
    shims = result["probe"]["shims"]
    assert any(s.startswith(f"runs through {name} (1 process") for s in shims), shims
    assert set(launcher["declared"]) <= set(shims)
    print(f"\n| {name} | 1 process | {result['effective']['train_steps_per_epoch']} steps | exit "
          f"{done.returncode} | {wall:.0f} s |")


def _left_in_state(state: Path) -> list[str]:
    """The processes still running from any run's work folder under the state folder."""
    return [line for work in state.glob("work/*/out/work") for line in _left_in(work.resolve())]

