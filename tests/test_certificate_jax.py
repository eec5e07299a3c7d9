"""The JAX side of the certificate in pieces: the jaxpr trace's canonical records (a small NNX model with
every layer kind the trace reads, in the real JAX environment), the optimizer read back from optax
objects, the x64 refusal, and the host's table of a pair built from what its sides declare."""
from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

from conftest import tiny_specs

from reprokit.certify import differences
from reprokit.kits.framework_free import arithmetic
from reprokit.kits.jax_kit import conventions

REPO = Path(__file__).resolve().parents[1]

_IN_JAX = textwrap.dedent("""\
    import json
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import nnx
    from reprokit.kits.framework_free import certificate as cert
    from reprokit.kits.jax_kit import certify, trace
    from reprokit.kits.jax_kit.canonical import read_optimizer

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.c1 = nnx.Conv(3, 4, (3, 3), padding="VALID", rngs=rngs)
            self.drop = nnx.Dropout(0.5, broadcast_dims=(1, 2), rngs=rngs)
            self.bn = nnx.BatchNorm(4, rngs=rngs)
            self.c2 = nnx.Conv(4, 6, (3, 3), strides=2, padding="SAME", rngs=rngs)
            self.fc = nnx.Linear(6, 5, rngs=rngs)

        def __call__(self, x):
            x = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
            x = self.bn(self.drop(nnx.relu(self.c1(x))))
            x = nnx.max_pool(self.c2(x), (2, 2), (2, 2))
            return self.fc(x.mean(axis=(1, 2)))

    net = Net(nnx.Rngs(0))
    x = jnp.zeros((2, 8, 8, 3))
    try:
        certify.require_float64(np.zeros(1, np.float32), "cpu")
        refusal = None
    except cert.InputError as exc:
        refusal = str(exc)
    print(json.dumps({"train": trace.trace(net, x, training=True).ops,
                      "eval": trace.trace(net, x, training=False).ops,
                      "flops": trace.training_flops(net, 8),
                      "adam": read_optimizer(optax.adam(1e-3, b1=0.8, b2=0.99, eps=1e-6)),
                      "sgd": read_optimizer(optax.sgd(0.05, momentum=0.9, nesterov=True)),
                      "refusal": refusal}))
    """)


def test_jax_trace_records_optimizer_and_x64_refusal(kit_python):
    out = subprocess.run([str(kit_python("jax")), "-c", _IN_JAX], cwd=REPO, capture_output=True, text=True,
                         timeout=300, env={"PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.splitlines()[-1])
    conv1 = arithmetic.conv([3, 3], 3, 4, 1, [1, 1], [1, 1], [8, 8], [8, 8], [1, 1], 2, ["weight"])
    conv2 = arithmetic.conv([3, 3], 4, 6, 1, [2, 2], [1, 1], [8, 8], [4, 4], [0, 0], 2, ["input", "weight"])
    pool = arithmetic.pool("max", [2, 2], [2, 2], [4, 4], [2, 2], [0, 0])
    dense = arithmetic.matmul(2, 6, 5, 2, ["input", "weight"])
    # the explicit pad folded into the first conv; the image needs no gradient; SAME at stride 2 pads after
    assert got["train"] == [conv1, arithmetic.activation("relu"),
                            {"op": "dropout", "rate": 0.5, "shared_over": ["H", "W"]},
                            {"op": "norm", "axes": ["N", "H", "W"]}, conv2, pool,
                            {"op": "reduce", "kind": "mean", "axes": ["H", "W"]}, dense]
    assert conv2["padding"] == [0, 1, 0, 1]
    assert got["eval"] == [conv1, arithmetic.activation("relu"), conv2, pool,
                           {"op": "reduce", "kind": "mean", "axes": ["H", "W"]}, dense]
    assert {k: v for k, v in got["flops"].items() if k != "how"} == arithmetic.flops(got["eval"])
    assert got["adam"] | {"eps_root": None} == {"class": "optax.adam", "name": "adam", "lr": 1e-3, "beta1": 0.8,
                                                "beta2": 0.99, "epsilon": 1e-6, "eps_root": None, "amsgrad": False,
                                                "weight_decay": 0.0}
    assert (got["sgd"]["lr"], got["sgd"]["momentum"], got["sgd"]["nesterov"]) == (0.05, 0.9, True)
    assert got["refusal"].startswith("JAX gives back float32 arrays where float64 was asked for")


def test_a_pair_without_a_table_is_declared_by_its_sides(tiny_dir, data_dir):
    pt = tiny_specs(tiny_dir, data_dir)["pytorch"]
    jax_spec = {**pt, "framework": "jax"}
    sides = {"pytorch": {"environment": {}}, "jax": {"environment": {"conventions": conventions.declared(jax_spec)}}}
    table = {d["field"]: d for d in differences.declared_differences({"pytorch": pt, "jax": jax_spec}, sides)}
    assert (table["data layout"]["pytorch"], table["data layout"]["jax"]) == ("NCHW", "NHWC")
    # PyTorch's column from the PyTorch/TensorFlow table; a form both share is declared, and marked
    assert table["SGD momentum form"]["pytorch"] == "v = m*v + g; p -= lr*v"
    assert table["SGD momentum form"].get("same_as_reference") is True
    assert table["BatchNorm running variance"]["jax"] == "updated with the biased batch variance"
    assert all(d["source"] == "certificate" for d in table.values())
    # before the sides have run, such a pair declares nothing of its own
    assert differences.declared_differences({"pytorch": pt, "jax": jax_spec}) == []
