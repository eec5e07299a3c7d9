"""Whether a JAX script's BatchNorm statistics span its devices, as the probe reads it for the certificate at N.

Under ``jax.jit`` alone over a batch split on a mesh, XLA computes each BatchNorm mean over the whole global batch:
the statistics are synchronized, with no ``axis_name`` (Flax's "Scale up on multiple devices" pattern). In a step
mapped per device (``jax.shard_map``, ``jax.pmap``), each device averages its own share unless the layer names the
mapped axis. A script that trains so, under the probe with --certify at 2 stand-in devices, leaves that reading in
its first step's evidence; the trace that decides it is read for shard_map at any depth.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from checkout import REPO

from reprokit import cli
from reprokit.execute import compose
from reprokit.kits.framework_free.certificate import EVIDENCE_FOLDER

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two stand-in devices need two usable CPUs")

# A small CIFAR-shaped CNN with BatchNorm, data-parallel over a mesh of every device as Flax's guide writes it: the
# batch split along 'batch', the model and optimizer state replicated, one nnx.jit step.
MESH_SCRIPT = """import jax
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

mesh = Mesh(np.array(jax.devices()), ('batch',))     # automatic sharding: XLA decides each op's
data_sharding = NamedSharding(mesh, P('batch'))


class CNN(nnx.Module):
  def __init__(self, *, rngs: nnx.Rngs):
    self.conv = nnx.Conv(3, 8, kernel_size=(3, 3), rngs=rngs)
    self.norm = nnx.BatchNorm(8, rngs=rngs)
    self.linear = nnx.Linear(8 * 16 * 16, 10, rngs=rngs)

  def __call__(self, x):
    x = nnx.max_pool(nnx.relu(self.norm(self.conv(x))), window_shape=(2, 2), strides=(2, 2))
    return self.linear(x.reshape(x.shape[0], -1))


model = CNN(rngs=nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
state = jax.device_put(nnx.state((model, optimizer)), NamedSharding(mesh, P()))
nnx.update((model, optimizer), state)


def loss_fn(model, images, labels):
  logits = model(images)
  return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


@nnx.jit
def train_step(model, optimizer, images, labels):
  loss, grads = nnx.value_and_grad(loss_fn)(model, images, labels)
  optimizer.update(model, grads)
  return loss


rng = np.random.default_rng(0)
for step in range(4):
  images = rng.random((16 * jax.device_count(), 32, 32, 3), dtype=np.float32)
  labels = rng.integers(0, 10, 16 * jax.device_count()).astype(np.int32)
  loss = train_step(model, optimizer, *jax.device_put((images, labels), data_sharding))
  print(f'step {step}: loss {float(loss):.4f}')
"""


def _evidence(kit_python, tmp_path: Path, data_dir: Path, devices: int) -> dict:
    """The script planned as the CLI plans it (quick, local), run under the probe with --certify in JAX's
    environment as the local runner runs it: its one process's evidence from its first step."""
    script = tmp_path / "scripts" / "mesh_batchnorm.py"
    script.parent.mkdir(parents=True)
    script.write_text(MESH_SCRIPT)
    parsed = cli.parse(["--script", f"jax={script}", "--backend", "local", "--profile", "quick", "--devices",
                        str(devices), "--data-dir", str(data_dir), "--state-dir", str(tmp_path / "state")])
    (spec,) = compose.build(parsed).specs
    (tmp_path / "spec.json").write_text(json.dumps(spec.to_dict()))
    out = tmp_path / "out" / "result.json"
    proc = subprocess.run([str(kit_python("jax")), "-m", "reprokit.kits.probe", "--spec", str(tmp_path / "spec.json"),
                           "--out", str(out), "--data-dir", str(data_dir), "--script-dir", str(script.parent),
                           "--certify"], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    found = list((out.parent / EVIDENCE_FOLDER).glob("*.json"))
    assert len(found) == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(found[0].read_text())


@pytest.mark.slow
def test_batchnorm_under_jit_over_a_mesh_is_synchronized_at_two_devices(kit_python, tmp_path, data_dir):
    evidence = _evidence(kit_python, tmp_path, data_dir, 2)
    assert evidence["replicas"] == 2 and evidence["batch"] == 32
    assert evidence["batchnorm"] == "synchronized"


# The same BatchNorm step traced three ways, each trace read as the probe reads a watched step's.
TRACES = """import json
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P
from reprokit.kits.jax_kit.probe_steps import _maps_per_device

mesh = Mesh(np.array(jax.devices()), ('batch',))
norm = nnx.BatchNorm(4, rngs=nnx.Rngs(0))
graphdef, state = nnx.split(norm)


def step(state, x):
  return nnx.merge(graphdef, state)(x)


per_device = jax.shard_map(step, mesh=mesh, in_specs=(P(), P('batch')), out_specs=P('batch'), check_vma=False)
scanned = lambda state, xs: jax.lax.scan(lambda c, x: (c + per_device(state, x).sum(), None), 0.0, xs)[0]
x = jnp.ones((8, 4))
read = {name: _maps_per_device(jax.jit(fn).trace(state, arg).jaxpr.jaxpr)
        for name, fn, arg in (("jit", step, x), ("shard_map", per_device, x), ("shard_map in a scan", scanned, x[None]))}
print(json.dumps(read))
"""


def test_a_trace_maps_per_device_where_it_runs_shard_map_at_any_depth(kit_python, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    proc = subprocess.run([str(kit_python("jax")), "-c", TRACES], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == {"jit": False, "shard_map": True, "shard_map in a scan": True}
