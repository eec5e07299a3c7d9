"""The TensorFlow kit's own runs at N devices, for real on 2 stand-in CPU devices: MirroredStrategy trains and leaves
its first step's evidence; N changes nothing but the split (a model without dropout and BatchNorm takes the same
steps at 2 devices as at 1); a spec at 2 devices where TensorFlow sees 1 is refused in one sentence."""
from __future__ import annotations

import json
import subprocess
import textwrap

import numpy as np
import pytest
from checkout import REPO
from conftest import tiny_specs, write_spec

pytestmark = pytest.mark.slow

# The first epoch of one spec, step by step through the kit's Backend, at 1 and at 2 devices in one process (its 2
# stand-in devices set before TensorFlow starts, as reprokit/kits/run.py sets them): the kit's loss sum of each
# step, and the weights before and after.
SAME_STEPS = textwrap.dedent("""\
    import json, sys
    from reprokit.kits.devices import stand_ins
    stand_ins.before_import("tensorflow", 2, "cpu")
    from pathlib import Path
    from reprokit.kits.contract.spec import RunSpec
    from reprokit.kits.framework_free import data as datalib
    from reprokit.kits.tensorflow_kit.backend import Backend

    raw, data_dir = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
    d = raw["data"]
    arrays = datalib.load(data_dir / d["file"], d["sha256"], d["train_samples"], d["test_samples"])
    out = {}
    for devices in (1, 2):
        backend = Backend(RunSpec.from_dict({**raw, "devices": devices}))
        backend.build(arrays)
        before = [w.numpy().ravel().tolist() for w in backend.model.weights]
        backend.set_mode(training=True)
        losses = []
        for batch in backend.train_batches(1):
            backend.train_step(batch)
            losses.append(backend.take_sums()[0])
        out[devices] = {"before": before, "losses": losses, "at_n": backend.at_n(),
                        "after": [w.numpy().ravel().tolist() for w in backend.model.weights]}
    print(json.dumps(out))
    """)

# A spec at 2 devices in a process whose TensorFlow sees one CPU device (no stand-ins set).
ONE_DEVICE = textwrap.dedent("""\
    import json, sys
    from pathlib import Path
    from reprokit.kits.contract.spec import RunSpec
    from reprokit.kits.tensorflow_kit.backend import Backend

    try:
        Backend(RunSpec.from_dict({**json.loads(Path(sys.argv[1]).read_text()), "devices": 2}))
    except RuntimeError as exc:
        print(exc)
    """)


def _at(devices: int):
    def edit(spec: dict) -> None:
        spec["devices"] = devices
    return edit


def _python(kit_python, code: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(kit_python("tensorflow")), "-c", code, *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_a_tiny_run_at_two_devices_trains_and_leaves_its_evidence(kit_python, tmp_path, tiny_dir, data_dir):
    """The kit's own entry point at 2 stand-in devices: MirroredStrategy over both, each step's 32 samples the
    global batch, each replica's loss scaled by it (1/2 a replica, the 2 replicas' gradients summed: 1 in all)."""
    spec = tiny_specs(tiny_dir, data_dir, edit=_at(2))["tensorflow"]
    proc = subprocess.run([str(kit_python("tensorflow")), "-m", "reprokit.kits.run", "--spec",
                           str(write_spec(tmp_path, spec)), "--out", str(tmp_path / "r.json"), "--data-dir",
                           str(data_dir)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["status"] == "ok"
    losses = [epoch["train_loss"] for epoch in result["metrics"]["epochs"]]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert result["effective"]["batch_size"]["min"] == result["effective"]["batch_size"]["max"] == 32
    shown = result["distributed"]
    assert shown["how"].startswith("tf.distribute.MirroredStrategy over 2 replicas (2 logical CPU devices)")
    (evidence,) = shown["evidence"]
    assert evidence["replicas"] == 2 and evidence["batch"] == 32 and len(evidence["samples"]) == 32
    assert evidence["loss_scale"]["per_replica"] == pytest.approx(0.5, abs=1e-4)
    assert evidence["loss_scale"]["replicas_summed"] == 2
    assert evidence["loss_scale"]["factor"] == pytest.approx(1.0, abs=1e-4)
    assert evidence["batchnorm"] == "per device"


def test_two_devices_change_nothing_but_the_split(kit_python, tmp_path, tiny_dir, data_dir):
    """Without dropout and BatchNorm (whose batch statistics are each device's own) the first epoch at 2 devices
    takes the steps it takes at 1: the same losses and weights, up to the order of fp32 sums."""
    def vgg(spec: dict) -> None:
        spec["model"].update(name="vgg16", width_multiplier=0.0625, classifier_width=16, dropout=0.0,
                             head="flatten", batchnorm=None)
    spec = tiny_specs(tiny_dir, data_dir, edit=vgg)["tensorflow"]
    proc = _python(kit_python, SAME_STEPS, write_spec(tmp_path, spec), data_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    one, two = runs["1"], runs["2"]
    assert one["at_n"] is None
    assert two["at_n"]["evidence"][0]["batchnorm"] is None
    assert two["at_n"]["evidence"][0]["loss_scale"]["factor"] == pytest.approx(1.0, abs=1e-4)
    assert all(np.array_equal(a, b) for a, b in zip(one["before"], two["before"]))
    assert len(one["losses"]) == len(two["losses"]) == 8
    assert two["losses"] == pytest.approx(one["losses"], rel=1e-4)
    # the largest change of any weight over the epoch, and the largest difference between the two counts' weights
    moved = max(float(np.abs(np.subtract(a, b)).max()) for a, b in zip(one["after"], one["before"]))
    apart = max(float(np.abs(np.subtract(a, b)).max()) for a, b in zip(one["after"], two["after"]))
    assert moved > 1e-3 and apart < 1e-3 * moved


def test_two_devices_where_tensorflow_sees_one_are_refused(kit_python, tmp_path, tiny_dir, data_dir):
    spec = tiny_specs(tiny_dir, data_dir)["tensorflow"]
    proc = _python(kit_python, ONE_DEVICE, write_spec(tmp_path, spec))
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = proc.stdout.strip().splitlines()[-1]
    assert said.startswith("the spec asks for 2 devices but tf.distribute.MirroredStrategy() mirrors 1 (CPU:0)")
    assert said.count(". ") == 0
