"""Tuned against fixed, per framework, from the result files: the same model and arithmetic, the same work, and the
training loss within a tolerance declared for the precision tuned ran in.

The op-by-op certificate compares frameworks; this compares one framework's two variants as they ran: the
parameters (counted as Keras counts them) and training FLOPs per sample (the certificate's arithmetic, counted
once before training) must be equal, the samples per epoch too, and the first epoch's mean training loss, which
bf16 rounding and a compiled kernel's other reduction order move a little, within LOSS_TOLERANCE of fixed's.
The first epoch, not the last: two runs whose steps differ in rounding drift apart as they train on. Where the
two runs draw different random numbers the loss is shown and not judged: PyTorch's dropout draws its mask in the
activations' memory order, so channels_last trains on other masks than fixed (the same distribution, another sample).
"""
from __future__ import annotations

from typing import Any

from reprokit.kits.contract.names import LABELS, compared
from reprokit.plan import tuning
from reprokit.report.markdown import md, table
from reprokit.results import metrics
from reprokit.results.metrics import NotMeasured
from reprokit.results.runs import FIXED, TUNED

# Relative difference of the first epoch's mean training loss allowed against fixed, by the precision tuned used.
LOSS_TOLERANCE = {"fp32": 0.05, "bf16_mixed": 0.15, "fp16_mixed": 0.15}


def _first_loss(r: dict[str, Any]) -> float:
    epochs = metrics.field(r, "metrics.epochs")
    if not epochs or epochs[0].get("train_loss") is None:
        raise NotMeasured("no first-epoch training loss")
    return float(epochs[0]["train_loss"])


def _other_draws(t: dict[str, Any], f: dict[str, Any]) -> str | None:
    """Why the two runs train on different random draws, or None where they draw alike."""
    dropout = t["spec"]["model"].get("dropout") or 0            # one rate, or one per block
    rates = dropout if isinstance(dropout, list) else [dropout]
    for (framework, numeric), why in tuning.DROPOUT_DRAWS.items():
        differs = len({bool(r["spec"]["numerics"].get(numeric)) for r in (t, f)}) > 1
        if t["framework"] == framework and differs and any(p > 0 for p in rates):
            return f"{why}, so the two train on other masks"
    return None


def _same(a: Any, b: Any, shown: str) -> tuple[str, bool]:
    return (f"{shown.format(a)} both" if a == b else f"**{shown.format(a)} against {shown.format(b)}**"), a == b


def rows(by_variant: dict[str, dict[str, list[dict[str, Any]]]]) -> list[list[str]]:
    """One row per framework that ran both: its checks, each with the figures it turns on."""
    out = []
    tuned, fixed = by_variant.get(TUNED, {}), by_variant.get(FIXED, {})
    for fw in compared(tuned):
        if not tuned.get(fw) or not fixed.get(fw):
            continue
        t, f = tuned[fw][0], fixed[fw][0]
        try:
            params, p_ok = _same(t["model"]["parameters"]["total"], f["model"]["parameters"]["total"], "{:,}")
            flops, f_ok = _same(t["model"].get("flops_per_sample"), f["model"].get("flops_per_sample"), "{:,}")
            work, w_ok = _same(t["effective"]["train_samples_per_epoch"], f["effective"]["train_samples_per_epoch"],
                               "{}")
            precision = t["spec"]["numerics"]["precision"]
            allowed = LOSS_TOLERANCE[precision]
            lt, lf = _first_loss(t), _first_loss(f)
        except (NotMeasured, KeyError, TypeError) as exc:
            out.append([LABELS[fw], "not measured", md(str(exc)), "", "", "", ""])
            continue
        warm = [r["timing"].get("warmup_s") for r in (t, f)]
        warmup = (f"{warm[0]:.1f} s against {warm[1]:.1f} s" if None not in warm else "not measured (a result "
                  "written before warmup_s)")
        off = abs(lt / lf - 1) if lf else float("inf")
        if why := _other_draws(t, f):
            loss, l_ok = f"{lt:.4g} against {lf:.4g} ({off:.1%}): not judged, {why}", True
        else:
            l_ok = off <= allowed
            shown = f"{lt:.4g} against {lf:.4g} ({off:.1%}; {precision}: within {allowed:.0%})"
            loss = shown if l_ok else f"**{shown}**"
        ok = p_ok and f_ok and w_ok and l_ok
        out.append([LABELS[fw], ("pass" + (" (loss not judged)" if why else "")) if ok else "**FAIL**", params, flops,
                    work, loss, warmup])
    return out


def section(by_variant: dict[str, dict[str, list[dict[str, Any]]]]) -> str | None:
    found = rows(by_variant)
    if not found:
        return None
    return ("Each framework's tuned run against its fixed run (first repeats), from the result files: the same model "
            "and arithmetic (parameters, training FLOPs per sample), the same work (samples per epoch), and the first "
            "epoch's mean training loss within the tolerance declared for tuned's precision. Beside them, apart from "
            "the timed throughput: the warmup's seconds, where a compiled step's compilation falls.\n\n" +
            table(found, ["", "tuned against fixed", "parameters", "training FLOPs per sample", "samples per epoch",
                          "first-epoch training loss", "warmup, compilation included"]))
