"""`as_posted` runs each framework's own numerics defaults, as the posts did: read back, recorded, declared.

The pinned frameworks' defaults differ: PyTorch computes cuDNN convolutions in TF32 but matmuls in fp32
and does not autotune; TensorFlow does both in TF32 and autotunes. The kits leave them alone and report
what the framework says, matmul and convolution apart; the plan declares the difference, and the report
names where the posts' framework versions behaved otherwise.
"""
from __future__ import annotations

import json
import os
import subprocess

from checkout import REPO
from conftest import tiny_specs, write_spec

from reprokit.execute import data_step
from reprokit.plan.experiments import BUILTIN_DIR, discover
from reprokit.plan.plan import Options, specs_for
from reprokit.report import pair_findings, sections, settings_table
from reprokit.results.provenance import code

NONE = {"lock": None, "lock_sha256": None, "image": None}


def test_the_seeds_as_posted_variant_leaves_the_numerics_to_the_frameworks_and_declares_it(data_dir):
    experiments = discover([BUILTIN_DIR])
    opts = Options(profile="quick", device="gpu", repeats=1, frameworks=("pytorch", "tensorflow"),
                   data=data_step.LookedUp(data_dir), variants=("fixed", "as_posted"),
                   alone=frozenset({"pt_item_per_step"}))
    for name in ("vgg16_cifar10_speed", "simplecnn_cifar10_memory"):
        specs = {(s.framework, s.variant): s.to_dict() for s in specs_for(experiments[name], opts, lambda fw: NONE, code())}
        for fw in ("pytorch", "tensorflow"):
            posted, fixed = specs[(fw, "as_posted")]["numerics"], specs[(fw, "fixed")]["numerics"]
            assert posted["tf32"] == posted["cudnn_autotune"] == "framework_default"
            assert (fixed["tf32"], fixed["cudnn_autotune"]) == (False, True)
            declared = {d["key"] for d in specs[(fw, "as_posted")]["differences"] if "key" in d}
            assert {"tf32", "cudnn_autotune", "data_layout", "execution"} <= declared
            assert not {"tf32", "cudnn_autotune"} & {d.get("key") for d in specs[(fw, "fixed")]["differences"]}
        if ("pytorch", "+pt_item_per_step") in specs:       # a pitfall alone keeps the fixed numerics
            assert specs[("pytorch", "+pt_item_per_step")]["numerics"] == specs[("pytorch", "fixed")]["numerics"]
        assert experiments[name].variants["as_posted"]["era"]


def _run(kit_python, tmp_path, spec, data_dir, env: dict | None = None) -> dict:
    out = tmp_path / f"{spec['framework']}.json"
    proc = subprocess.run([str(kit_python(spec["framework"])), "-m", "reprokit.kits.run", "--spec",
                           str(write_spec(tmp_path, spec)), "--out", str(out), "--data-dir", str(data_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


# Settings of the process the kit never touches: the result must show them, read back from the framework.
OUTSIDE = {"pytorch": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, "tensorflow": {"TF_DETERMINISTIC_OPS": "1"}}


def test_the_frameworks_defaults_are_read_back_apart_and_the_report_declares_them(kit_python, tmp_path, tiny_dir,
                                                                                   data_dir):
    def posted(spec):
        spec["numerics"].update(tf32="framework_default", cudnn_autotune="framework_default")
        spec["differences"] = [{"field": "TF32", "key": "tf32", "pytorch": "default", "tensorflow": "default",
                                "why": "as posted"},
                               {"field": "cuDNN autotuning", "key": "cudnn_autotune", "pytorch": "default",
                                "tensorflow": "default", "why": "as posted"},
                               {"field": "data layout", "pytorch": "NCHW", "tensorflow": "NHWC", "why": "no key"}]
    specs = tiny_specs(tiny_dir, data_dir, edit=posted)
    pt, tf = (_run(kit_python, tmp_path, specs[fw], data_dir, OUTSIDE[fw]) for fw in ("pytorch", "tensorflow"))
    # torch 2.14's defaults, read back from torch.backends; TensorFlow's from tf.config and its environment
    assert pt["environment"]["tf32_ops"] == {"matmul": False, "convolution": True}
    assert pt["environment"]["cudnn_autotune"] is False
    assert tf["environment"]["tf32_ops"] == {"matmul": True, "convolution": True}
    assert tf["environment"]["cudnn_autotune"] is True
    settings = {fw: {k: v["value"] for k, v in r["environment"]["settings"].items()} for fw, r in
                (("pytorch", pt), ("tensorflow", tf))}
    assert {k: settings["pytorch"][k] for k in ("tf32.matmul", "tf32.convolution", "cudnn_autotune")} == \
        {"tf32.matmul": False, "tf32.convolution": True, "cudnn_autotune": False}
    for fw, layout, execution in (("pytorch", "NCHW", "eager"), ("tensorflow", "NHWC", "tf.function graph")):
        seen = settings[fw]
        assert (seen["data_layout"], seen["execution"]) == (layout, execution)
        assert seen["precision"] == "float32 compute, float32 variables"
        assert (seen["threads.intra_op"], seen["threads.inter_op"]) == (1, 1)     # the tiny spec's
        assert (seen["loader.workers"], seen["loader.prefetch"]) == (0, 0)          # the kit's feeder
    assert settings["pytorch"]["allocator.config"] == "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    assert settings["tensorflow"]["determinism.ops"] is settings["tensorflow"]["determinism.cudnn"] is True
    assert settings["pytorch"]["determinism.ops"] is False
    found = {f["message"].split(":")[0]: f for f in pair_findings.findings(pt, tf) if f["code"] == "settings-differ"}
    assert found["TF32 for matmuls (tf32.matmul)"]["severity"] == "info"
    assert "(declared: [[differences]] cuDNN autotuning" in found["cuDNN autotuning (cudnn_autotune)"]["message"]
    # the environment's determinism no spec declares; an entry without a key declares nothing
    for key in ("deterministic algorithms (determinism.ops)", "data layout (data_layout)"):
        assert found[key]["severity"] == "warning" and "(undeclared: " in found[key]["message"]
    table = settings_table.section({"as_posted": {"pytorch": [pt], "tensorflow": [tf]}})
    rows = {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")]
                                              for line in table.splitlines() if line.startswith("|"))}
    assert rows["deterministic algorithms (`determinism.ops`)"] == ["all", "off", "on", "**undeclared**"]
    assert rows["TF32 for matmuls (`tf32.matmul`)"] == ["all", "off", "on", r"declared (\[\[differences\]\] TF32)"]
    assert rows["intra-op threads (`threads.intra_op`)"] == ["all", "1", "1", "same"]

    class Exp:
        variants = {"as_posted": {"numerics": {"tf32": "framework_default", "cudnn_autotune": "framework_default"},
                                  "era": ["PyTorch: before 1.12 matmuls ran in TF32 by default"]}}
    text = sections.posted_numerics(Exp(), {"as_posted": {"pytorch": [pt], "tensorflow": [tf]}})
    assert "PyTorch: TF32 matmul off, convolution on, cuDNN autotuning off" in text
    assert "TensorFlow: TF32 matmul on, convolution on, cuDNN autotuning on" in text
    assert "- PyTorch: before 1.12 matmuls ran in TF32 by default" in text
