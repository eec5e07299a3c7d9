"""`as_posted` runs each framework's own numerics defaults, as the posts did: read back, recorded, declared.

The pinned frameworks' defaults differ: PyTorch computes cuDNN convolutions in TF32 but matmuls in fp32
and does not autotune; TensorFlow does both in TF32 and autotunes. The kits leave them alone and report
what the framework says, matmul and convolution apart; the plan declares the difference, and the report
names where the posts' framework versions behaved otherwise.
"""
from __future__ import annotations

import json
import subprocess

from conftest import tiny_specs, write_spec

from reprokit.plan.experiments import BUILTIN_DIR, discover
from reprokit.plan.plan import Options, specs_for
from reprokit.report import pair_findings, sections
from reprokit.results.provenance import REPO, code

NONE = {"lock": None, "lock_sha256": None, "image": None}


def test_the_seeds_as_posted_variant_leaves_the_numerics_to_the_frameworks_and_declares_it(data_dir):
    experiments = discover([BUILTIN_DIR])
    opts = Options(profile="quick", device="gpu", repeats=1, frameworks=("pytorch", "tensorflow"), data_dir=data_dir,
                   allow_download=False, variants=("fixed", "as_posted"), alone=frozenset({"pt_item_per_step"}),
                   prepare_data=False)
    for name in ("vgg16_cifar10_speed", "simplecnn_cifar10_memory"):
        specs = {(s.framework, s.variant): s.to_dict() for s in specs_for(experiments[name], opts, lambda fw: NONE, code())}
        for fw in ("pytorch", "tensorflow"):
            posted, fixed = specs[(fw, "as_posted")]["numerics"], specs[(fw, "fixed")]["numerics"]
            assert posted["tf32"] == posted["cudnn_autotune"] == "framework_default"
            assert (fixed["tf32"], fixed["cudnn_autotune"]) == (False, True)
            declared = {d["field"] for d in specs[(fw, "as_posted")]["differences"]}
            assert {"TF32", "cuDNN autotuning"} <= declared
            assert not {"TF32", "cuDNN autotuning"} & {d["field"] for d in specs[(fw, "fixed")]["differences"]}
        if ("pytorch", "+pt_item_per_step") in specs:       # a pitfall alone keeps the fixed numerics
            assert specs[("pytorch", "+pt_item_per_step")]["numerics"] == specs[("pytorch", "fixed")]["numerics"]
        assert experiments[name].variants["as_posted"]["era"]


def _run(kit_python, tmp_path, spec, data_dir) -> dict:
    out = tmp_path / f"{spec['framework']}.json"
    proc = subprocess.run([str(kit_python(spec["framework"])), "-m", "kits.run", "--spec",
                           str(write_spec(tmp_path, spec)), "--out", str(out), "--data-dir", str(data_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_the_frameworks_defaults_are_read_back_apart_and_the_report_declares_them(kit_python, tmp_path, tiny_dir,
                                                                                   data_dir):
    def posted(spec):
        spec["numerics"].update(tf32="framework_default", cudnn_autotune="framework_default")
        spec["differences"] = [{"field": "TF32", "pytorch": "default", "tensorflow": "default", "why": "as posted"},
                               {"field": "cuDNN autotuning", "pytorch": "default", "tensorflow": "default",
                                "why": "as posted"}]
    specs = tiny_specs(tiny_dir, data_dir, edit=posted)
    pt, tf = (_run(kit_python, tmp_path, specs[fw], data_dir) for fw in ("pytorch", "tensorflow"))
    # torch 2.14's defaults, read back from torch.backends; TensorFlow's from tf.config and its environment
    assert pt["environment"]["tf32_ops"] == {"matmul": False, "convolution": True}
    assert pt["environment"]["cudnn_autotune"] is False
    assert tf["environment"]["tf32_ops"] == {"matmul": True, "convolution": True}
    assert tf["environment"]["cudnn_autotune"] is True
    found = [f for f in pair_findings.findings(pt, tf) if f["code"] == "settings-differ"]
    by_setting = {f["message"].split(":")[0]: f for f in found}
    assert by_setting["TF32 (matmul, convolution)"]["severity"] == "info"
    assert "(declared in the spec)" in by_setting["cuDNN autotuning"]["message"]

    class Exp:
        variants = {"as_posted": {"numerics": {"tf32": "framework_default", "cudnn_autotune": "framework_default"},
                                  "era": ["PyTorch: before 1.12 matmuls ran in TF32 by default"]}}
    text = sections.posted_numerics(Exp(), {"as_posted": {"pytorch": [pt], "tensorflow": [tf]}})
    assert "PyTorch: TF32 matmul off, convolution on, cuDNN autotuning off" in text
    assert "TensorFlow: TF32 matmul on, convolution on, cuDNN autotuning on" in text
    assert "- PyTorch: before 1.12 matmuls ran in TF32 by default" in text
