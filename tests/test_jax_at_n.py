"""The JAX kit's own runs at N devices (reprokit/kits/jax_kit/sharded.py), on two stand-in CPU devices.

A tiny run at 2 devices (a user's small model with BatchNorm and dropout) trains and leaves its first step's
evidence; without dropout and BatchNorm, 2 devices change nothing but the split (the same losses and weights as one
device); each device draws its own dropout masks; and a run at 2 devices that sees one is refused in one sentence.
One JAX process with two stand-in devices for the runs, one with a single device for the refusals, side by side.
"""
from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from checkout import REPO
from conftest import TINY

from reprokit.execute import data_step
from reprokit.plan.experiments import load
from reprokit.plan.plan import Options, specs_for
from reprokit.results import results
from reprokit.results.provenance import code

pytestmark = pytest.mark.slow

# One epoch of 256 samples in global batches of 32: 8 steps, 16 samples a device.
JAX_TINY = TINY.replace('frameworks = ["pytorch", "tensorflow"]', 'frameworks = ["jax"]').replace("epochs = 2",
                                                                                                    "epochs = 1")

MODELS = textwrap.dedent("""\
    import jax.numpy as jnp
    from flax import nnx


    class Plain(nnx.Module):
        \"\"\"No dropout, no BatchNorm: a step at N devices is the step at one, split.\"\"\"

        def __init__(self, num_classes, rngs):
            self.conv = nnx.Conv(3, 8, (3, 3), rngs=rngs)
            self.dense = nnx.Linear(8, num_classes, rngs=rngs)

        def __call__(self, x):
            return self.dense(jnp.mean(nnx.relu(self.conv(x)), axis=(1, 2)))


    class Normed(nnx.Module):
        \"\"\"BatchNorm and dropout, small enough to build and compile in seconds.\"\"\"

        def __init__(self, num_classes, rngs):
            self.conv = nnx.Conv(3, 8, (3, 3), rngs=rngs)
            self.norm = nnx.BatchNorm(8, rngs=rngs)
            self.drop = nnx.Dropout(0.1, rngs=rngs)
            self.dense = nnx.Linear(8, num_classes, rngs=rngs)

        def __call__(self, x):
            return self.dense(jnp.mean(self.drop(nnx.relu(self.norm(self.conv(x)))), axis=(1, 2)))


    class Dropped(nnx.Module):
        def __init__(self, num_classes, rngs):
            self.drop = nnx.Dropout(0.5, rngs=rngs)
            self.dense = nnx.Linear(3, num_classes, rngs=rngs)

        def __call__(self, x):
            return self.dense(jnp.mean(self.drop(x), axis=(1, 2)))


    class Kept(nnx.Module):
        \"\"\"Keeps a figure of each batch it sees: a variable the devices' steps would leave different.\"\"\"

        def __init__(self, num_classes, rngs):
            self.dense = nnx.Linear(3, num_classes, rngs=rngs)
            self.seen = nnx.Variable(jnp.zeros(()))

        def __call__(self, x):
            pooled = jnp.mean(x, axis=(1, 2))
            self.seen.value = jnp.mean(pooled)
            return self.dense(pooled)


    def plain(options, input_size, num_classes):
        return Plain(num_classes, nnx.Rngs(0))


    def normed(options, input_size, num_classes):
        return Normed(num_classes, nnx.Rngs(0))


    def dropped(options, input_size, num_classes):
        return Dropped(num_classes, nnx.Rngs(0))


    def kept(options, input_size, num_classes):
        return Kept(num_classes, nnx.Rngs(0))
    """)

# With two stand-in devices, as reprokit/kits/run.py sets them on a CPU: the tiny run through the kit's entry point;
# one epoch of the plain model at 1 and at 2 devices (each step's sums, the weights after); and one step on a global
# batch whose two shares are the same samples, each device's own loss, with and without dropout; and the first step
# of a model whose own variable would differ between the devices.
AT_TWO = textwrap.dedent("""\
    import json, sys
    from pathlib import Path
    from reprokit.kits.devices import stand_ins
    stand_ins.before_import("jax", 2, "cpu")
    import jax
    import numpy as np
    from flax import nnx
    from reprokit.kits import run
    from reprokit.kits.contract.spec import RunSpec
    from reprokit.kits.framework_free import data as datalib
    from reprokit.kits.jax_kit import sharded
    from reprokit.kits.jax_kit.backend import Backend

    specs, data_dir, out = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]), Path(sys.argv[3])
    sys.path.insert(0, sys.argv[4])

    def built(raw):
        spec = RunSpec.from_dict(raw)
        d = spec.data
        backend = Backend(spec)
        backend.build(datalib.load(data_dir / d.file, d.sha256, d.train_samples, d.test_samples))
        return backend

    def weights(backend):
        model, _ = nnx.merge(backend.graphdef, backend.state)
        return [np.asarray(p) for p in jax.tree.leaves(nnx.state(model, nnx.Param))]

    def first_epoch(raw):
        backend = built(raw)
        start = [np.asarray(p) for p in jax.tree.leaves(nnx.state(backend.model, nnx.Param))]
        backend.set_mode(training=True)
        sums = []
        for batch in backend.train_batches(1):
            backend.train_step(batch)
            sums.append(backend.take_sums())
        return sums, start, weights(backend)

    def own_losses(raw):
        backend = built(raw)
        x, y = backend.feeder.arrays.x_train[:16], backend.feeder.arrays.y_train[:16]
        step = sharded.train_step(backend.graphdef, backend.scale, backend.resize, backend.mesh.mesh)
        got = step(backend.state, backend.sums, *backend.mesh.train_put(np.concatenate([x, x]), np.concatenate([y, y])))
        return np.asarray(got[4]).tolist()

    def refused(raw):
        backend = built(raw)
        backend.set_mode(training=True)
        try:
            backend.train_step(next(iter(backend.train_batches(1))))
        except RuntimeError as exc:
            return str(exc)

    result = run.run(specs["tiny"], data_dir)
    (out / "result.json").write_text(json.dumps(result))
    one, two = first_epoch(specs["plain1"]), first_epoch(specs["plain2"])
    print(json.dumps({
        "visible": len(jax.devices()), "sums": [one[0], two[0]],
        "weights_apart": max(float(np.abs(a - b).max()) for a, b in zip(one[2], two[2])),
        "weights_moved": max(float(np.abs(a - b).max()) for a, b in zip(one[2], one[1])),
        "plain_losses": own_losses(specs["plain2"]), "dropped_losses": own_losses(specs["dropped2"]),
        "kept": refused(specs["kept2"])}))
    """)

# One device visible (no stand-ins): the run at 2 devices is refused; so are a partial batch that does not divide
# and a user's input hook.
AT_ONE = textwrap.dedent("""\
    import json, sys
    from reprokit.kits.contract.spec import RunSpec
    from reprokit.kits.jax_kit import sharded
    from reprokit.kits.jax_kit.backend import Backend

    class Hook:
        ref = "mine:batches"

    spec = RunSpec.from_dict(json.loads(sys.argv[1]))
    said = []
    for attempt in (lambda: Backend(spec), lambda: sharded.refused(spec, None, [32, 15]),
                    lambda: sharded.refused(spec, Hook(), [])):
        try:
            attempt()
            said.append(None)
        except RuntimeError as exc:
            said.append(str(exc))
    print(json.dumps(said))
    """)


def _plan(folder: Path, name: str, text: str, data_dir: Path, devices: int) -> dict:
    (folder / f"{name}.toml").write_text(text.replace('name = "tiny"', f'name = "{name}"'))
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=("jax",),
                   data=data_step.Preparing(data_dir, allow_download=False))
    planned = specs_for(load(folder / f"{name}.toml"), opts,
                        lambda fw: {"lock": None, "lock_sha256": None, "image": None}, code())
    spec = next(p.to_dict() for p in planned)
    spec["devices"] = devices
    return spec


def _custom(builder: str) -> str:
    """The tiny experiment with the user's model of tests' at_n_models.py in place of its SimpleCNN."""
    start, end = JAX_TINY.index("[model]"), JAX_TINY.index("[data]")
    model = f'[model]\nname = "custom"\nnum_classes = 10\nwidth_multiplier = 1.0\njax = "at_n_models:{builder}"\n\n'
    return JAX_TINY[:start] + model + JAX_TINY[end:]


@pytest.fixture(scope="module")
def at_n(kit_python, tmp_path_factory, data_dir):
    work = tmp_path_factory.mktemp("jax-at-n")
    (work / "at_n_models.py").write_text(MODELS)
    specs = {"tiny": _plan(work, "normed", _custom("normed"), data_dir, 2),
             **{f"plain{n}": _plan(work, "plain", _custom("plain"), data_dir, n) for n in (1, 2)},
             **{f"{name}2": _plan(work, name, _custom(name), data_dir, 2) for name in ("dropped", "kept")}}
    (work / "specs.json").write_text(json.dumps(specs))
    jax = kit_python("jax")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    one = subprocess.Popen([str(jax), "-c", AT_ONE, json.dumps(specs["tiny"])], cwd=REPO, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    two = subprocess.run([str(jax), "-c", AT_TWO, str(work / "specs.json"), str(data_dir), str(work), str(work)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    said, err = one.communicate(timeout=600)
    assert one.returncode == 0, err[-3000:]
    assert two.returncode == 0, two.stdout[-2000:] + two.stderr[-3000:]
    return {**json.loads(two.stdout.splitlines()[-1]), "result": json.loads((work / "result.json").read_text()),
            "refused": json.loads(said.splitlines()[-1])}


def test_a_tiny_run_at_two_devices_trains_and_shows_its_split(at_n):
    result = at_n["result"]
    assert at_n["visible"] == 2
    assert result["status"] == "ok" and results.problems(result) is None
    epoch = result["metrics"]["epochs"][0]
    assert epoch["train_loss"] > 0 and 0 <= epoch["test_accuracy"] <= 1
    assert result["processes"]["replicas"] == 2 and result["processes"]["total"]["per_replica_batch"] == 16
    (evidence,) = result["distributed"]["evidence"]
    assert evidence["who"] == {"role": "process", "index": 0} and evidence["batch"] == 32
    assert evidence["replicas"] == 2 and len(evidence["samples"]) == 32
    scale = evidence["loss_scale"]
    assert abs(scale["factor"] - 1) <= 1e-4 and scale["replicas_summed"] == 1, scale
    assert evidence["batchnorm"] == "per device"
    assert "jax.shard_map" in result["distributed"]["how"] and "axis_index" in result["distributed"]["how"]


def test_two_devices_change_nothing_but_the_split(at_n):
    one, two = at_n["sums"]
    assert len(one) == len(two) == 8
    for (loss1, correct1), (loss2, correct2) in zip(one, two):
        assert loss2 == pytest.approx(loss1, rel=1e-5) and correct2 == correct1
    assert at_n["weights_moved"] > 1e-3                   # it trained
    assert at_n["weights_apart"] < 1e-5, at_n["weights_apart"]


def test_each_device_draws_its_own_dropout_masks(at_n):
    same, dropped = at_n["plain_losses"], at_n["dropped_losses"]
    assert len(same) == len(dropped) == 2
    assert same[0] == pytest.approx(same[1], abs=1e-6)     # the same samples on both devices: the same loss
    assert abs(dropped[0] - dropped[1]) > 1e-4            # unless each device drops its own


def test_a_run_at_two_devices_that_sees_one_is_refused_in_one_sentence(at_n):
    devices, uneven, hook = at_n["refused"]
    assert devices is not None and devices.startswith("the run at 2 devices sees 1 JAX CPU device (")
    assert devices.endswith("fewer than the 2 its mesh needs") and "\n" not in devices
    assert uneven is not None and "a batch of 15 samples does not divide by 2" in uneven
    assert hook is not None and "the user's input hook mine:batches feeds batches of its own" in hook


def test_a_variable_the_devices_would_leave_different_is_refused(at_n):
    said = at_n["kept"]
    assert said is not None and said.startswith("the model's Variable seen differs between the 2 devices "), said
    assert said.endswith("run it at one device") and "\n" not in said, said

