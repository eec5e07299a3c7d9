"""Pair findings: what one run of the reference framework and one of another (PyTorch and TensorFlow, PyTorch and
JAX), about to be compared, differ in.

Settings that change speed or numerics must be equal by declaration; a setting
the two report differently that no keyed [[differences]] entry or pitfall
declares is a finding, and so is a ratio across different hosts, devices or
images, or across different co-load (runs that went side by side with other runs).
"""
from __future__ import annotations

from typing import Any

from reprokit.kits.contract.names import label
from reprokit.report import settings_table


def findings(pt: dict[str, Any], tf: dict[str, Any]) -> list[dict[str, Any]]:
    """Compare one result of the reference framework and one of another, of the same experiment and variant: each
    setting they reported differently (reprokit/report/settings_table.py: a warning where nothing declares it and
    it acts on their device), and a ratio across machines."""
    la, lb = label(pt["framework"]), label(tf["framework"])
    out = [{"code": "settings-differ", "severity": "warning" if not (d.declared_by or d.no_effect) else "info",
            "message": d.message(la, lb)} for d in settings_table.differences(pt, tf)]
    a, b = pt["environment"], tf["environment"]
    where_a = (a["host"]["hostname"], a["device_name"], _image(pt))
    where_b = (b["host"]["hostname"], b["device_name"], _image(tf))
    for part, x, y in zip(("host", "device", "image base"), where_a, where_b):
        if x != y and None not in (x, y):
            out.append({"code": "ratio-across-machines", "severity": "warning",
                        "message": f"the two runs come from different {part}s ({x} vs {y}): their ratio "
                                   f"mixes framework and machine"})
    return out


def tf32_apart(env: dict[str, Any]) -> dict[str, Any]:
    """The environment with TF32 per op; a result from before the kits read them apart has one flag for both."""
    if "tf32_ops" in env or "tf32" not in env:
        return env
    return {**env, "tf32_ops": dict.fromkeys(("matmul", "convolution"), env["tf32"])}


# Layer kinds the frameworks name differently, by what they are (a script's model as its optimizer stepped it;
# Flax NNX's are Conv, Linear, BatchNorm, Dropout).
LAYER_KINDS = {"conv": ("conv", "conv1d", "conv2d", "conv3d"), "dense": ("linear", "dense"),
               "dropout": ("dropout", "dropout2d", "spatialdropout2d"),
               "batch norm": ("batchnorm", "batchnorm1d", "batchnorm2d", "batchnormalization"),
               "max pool": ("maxpool2d", "maxpooling2d"), "average pool": ("avgpool2d", "averagepooling2d",
                                                                          "adaptiveavgpool2d",
                                                                          "globalaveragepooling2d")}


POOLING = ("max pool", "average pool")


def _kinds(layers: list[str]) -> dict[str, int]:
    names = [n.lower() for n in layers]
    return {kind: sum(n in aliases for n in names) for kind, aliases in LAYER_KINDS.items()}


def scripts(pt: dict[str, Any], tf: dict[str, Any]) -> list[dict[str, Any]]:
    """Two probed scripts of one experiment: where their work differs, from what the probe saw of each (the
    batches their models received, their epochs' steps, their models' layers, how each framework ran)."""
    if not (pt["spec"].get("source") == tf["spec"].get("source") == "script"):
        return []
    out = []
    seen = [(r["effective"]["batch_size"]["mean"], r["effective"]["train_steps_per_epoch"],
             _kinds(r["model"].get("layers", []))) for r in (pt, tf)]
    (b_pt, s_pt, k_pt), (b_tf, s_tf, k_tf) = seen
    la, lb = label(pt["framework"]), label(tf["framework"])
    if b_pt != b_tf:
        out.append(f"the models received {b_pt:g} samples per training step in {la} and {b_tf:g} in {lb}")
    if s_pt != s_tf:
        out.append(f"training steps per epoch: {la} {s_pt}, {lb} {s_tf}")
    # Pooling may be a function rather than a layer (in Flax it always is): compared only where both models show it.
    layers = [f"{kind} {la} {k_pt[kind]}, {lb} {k_tf[kind]}" for kind in LAYER_KINDS
              if k_pt[kind] != k_tf[kind] and (kind not in POOLING or 0 not in (k_pt[kind], k_tf[kind]))]
    if layers:
        out.append("the trained models' layers differ: " + "; ".join(layers))
    return [{"code": "scripts-differ", "severity": "warning", "message": m} for m in out]


def flavors(pts: list[dict[str, Any]], tfs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A ratio whose runs of one framework come from more than one of its builds (provenance.flavor: PyTorch's
    CUDA 13 and CUDA 12 builds are different torch releases)."""
    out = []
    for runs in (pts, tfs):
        found = sorted({r["provenance"].get("flavor") or "unrecorded" for r in runs})
        if len(found) > 1:
            out.append({"code": "ratio-across-flavors", "severity": "warning",
                        "message": f"the {runs[0]['framework']} runs come from {len(found)} builds "
                                   f"({', '.join(found)}): their ratio mixes framework releases"})
    return out


# Cores other processes may keep busy beside a timed run before its ratio is flagged: an idle host's daemons and
# the orchestrator reading the kit's progress use a few hundredths of a core, another job's busy thread a whole one.
# A reading counts beyond its own blur (resolution_cores: /proc/stat's clock ticks over a short window).
OTHER_CORES_THRESHOLD = 0.5


def co_load(pts: list[dict[str, Any]], tfs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A ratio whose runs were timed beside other work (``beside``), and one whose two sides ran beside different
    numbers of other runs (``launcher.co_load``, per repeat)."""
    out = beside(pts, tfs)
    def loads(runs: list[dict[str, Any]]) -> list[int] | None:
        found = [r.get("launcher", {}).get("co_load") for r in runs]
        return None if None in found else sorted(len(c) for c in found)
    a, b = loads(pts), loads(tfs)
    if a is None or b is None or a == b:
        return out
    def text(x: list[int]) -> str:
        return ", ".join(map(str, x))
    return [*out, {"code": "ratio-across-co-load", "severity": "warning",
                   "message": f"the two sides ran beside different numbers of other runs "
                              f"({label(pts[0]['framework'])} {text(a)}, {label(tfs[0]['framework'])} {text(b)}, "
                              f"per repeat): their ratio mixes framework and contention"}]


def beside(pts: list[dict[str, Any]], tfs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A ratio any of whose runs, either side, any repeat, was timed while other processes kept more than
    OTHER_CORES_THRESHOLD cores busy, while another process used its GPU, or beside another run of the ledger on
    its own device (runs of --parallel on GPUs of their own are the sanctioned exception)."""
    seen = [f"{label(r['framework'])} r{r['repeat']}: {why}" for r in (*pts, *tfs) for why in _beside(r)]
    if not seen:
        return []
    return [{"code": "ratio-beside-load", "severity": "warning",
             "message": f"runs of this ratio were timed beside other work ({'; '.join(seen)}): their ratio mixes "
                        f"framework and contention; run it again on a quiet host"}]


def _beside(r: dict[str, Any]) -> list[str]:
    """What ran beside one run, in words."""
    out = []
    reading = (r.get("timing") or {}).get("co_load") or {}
    cores, blur = reading.get("other_cores"), reading.get("resolution_cores") or 0.0
    if cores is not None and cores - blur > OTHER_CORES_THRESHOLD:      # more than the clock ticks could blur
        out.append(f"other processes kept {cores:.2f} cores busy (more than {OTHER_CORES_THRESHOLD:g})")
    if any(f.get("code") == "gpu-shared" for f in r.get("findings", [])):
        out.append("another process used its GPU")
    launcher = r.get("launcher") or {}
    mine = (launcher.get("placement") or {}).get("gpu_uuid")
    same = [c for c in launcher.get("co_load") or [] if c.get("slot") == mine]
    if same:
        out.append(f"{len(same)} other run(s) on its device ({', '.join(c['run_id'] for c in same)})")
    return out


def _image(result: dict[str, Any]) -> str | None:
    return (result.get("launcher", {}).get("image") or {}).get("base_digest")
