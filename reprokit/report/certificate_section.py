"""The equivalence certificates of one experiment: the main pair's verdict and checks, then the other pairs.

Its own module because it reads the certificates (reprokit/certify), not the runs' results: each check in one
short line with the figure it turns on; every check's evidence in full is details.md's.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reprokit.certify import certify_plan
from reprokit.kits.contract.names import compared, label
from reprokit.report.markdown import md, short, table
from reprokit.results.runs import FIXED


def certificates(certs: list[dict[str, Any]], details_link: str, main: str = FIXED) -> str:
    """Is it the same experiment in both frameworks? The main pair's verdict and checks (``fixed``, or a script
    experiment's scripts), then one row per other variant pair; the evidence of every check is in details.md."""
    if not certs:
        return "**Equivalence certificate:** none was given to this report for this experiment."
    mains: list[dict[str, Any]] = []                  # the first main pair's of each pair of frameworks
    for c in certs:
        if set(v for v in c["variant"].values() if v) == {main} and tuple(c["variant"]) not in (
                tuple(m["variant"]) for m in mains):
            mains.append(c)
    several = len({tuple(c["variant"]) for c in certs}) > 1       # certificates of more than one framework pair
    parts = []
    if not mains:
        parts.append(f"**Equivalence certificate:** the `{main}` pair has none.")
    for fixed in mains:
        who = f" ({pair_label(fixed)})" if several else ""
        if fixed["status"] == "not-run":
            parts.append(f"**Equivalence certificate{who}: not run**: {md(fixed['message'])}.")
            continue
        file = certify_plan.file_name(fixed)
        parts.append(f"**Equivalence certificate{who}: {fixed['status']}**, checked before any timing on the "
                     f"`{fixed['profile']}` specs; its evidence: [details.md]({details_link}), [`{file}`]({file})."
                     + "".join(f"\n- {check_line(c)}" for c in fixed["checks"]) + calls_line(fixed))
    others = [c for c in certs if not any(c is m for m in mains)]
    if others:
        rows = [[variant_pair(c, several), f"**{c['status']}**",
                 md(short(c["summary"] or "", 110)), f"[json]({certify_plan.file_name(c)})"] for c in others]
        head = "frameworks: variants" if several else f"{pair_label(others[0])} variant"
        parts.append("Other variant pairs (an as-posted pair is expected to fail where the posts' code differs):\n\n"
                     + table(rows, [head, "certificate", "what it found", "file"]))
    return "\n\n".join(parts)


CHECK_MARK = {True: "pass", False: "**FAIL**", None: "info"}


def calls_line(cert: dict[str, Any]) -> str:
    """A script certificate's models, each called as its script called it, and the output's part compared."""
    calls = {fw: c for fw, c in (cert.get("calls") or {}).items() if c}
    if not calls:
        return ""
    def code(text: str) -> str:
        return "`" + text.replace("`", "'") + "`"
    return "\n- called as the scripts called them: " + "; ".join(
        f"{label(fw)} {code(c['call'])}, compared at {code(c['compared'])} ({md(c['compared_why'])})"
        for fw, c in calls.items())


def check_line(check: dict[str, Any]) -> str:
    """One certificate check in one short line: its name, pass or fail, and its figure."""
    return f"{md(check['name'])} {CHECK_MARK[check['passed']]}: {md(check_figure(check))}"


def check_figure(check: dict[str, Any]) -> str:
    """The one figure a check turns on, from its numbers; else the start of its evidence, longer where it failed
    (what differs is what a reader of a failing check needs first)."""
    n, read = check.get("numbers"), _FIGURES.get(check["name"])
    figure = read(n) if read and isinstance(n, dict) else None
    return figure or short(str(check["evidence"]), 200 if check["passed"] is False else 90)


def _per_framework(values: dict[str, Any], unit: str) -> str:
    """"482,010 parameters" where every framework has the same count, else each framework's, the reference first."""
    fws = [fw for fw in compared(values) if fw in values]
    got = [values[fw] for fw in fws]
    if len(set(got)) == 1:
        return f"{got[0]:,} {unit}"
    return " vs ".join(f"{v:,}" for v in got) + f" {unit} ({' / '.join(label(fw) for fw in fws)})"


def _worst(values: dict[str, Any], key: str) -> float | None:
    found = [v[key] for v in values.values() if isinstance(v, dict) and isinstance(v.get(key), (int, float))]
    return max(found) if found else None


def _maybe(template: str, value: float | None) -> str | None:
    return None if value is None else template.format(value)


def _optimizer(n: dict[str, Any]) -> str | None:
    """"torch.optim.SGD / keras.optimizers.SGD, lr 0.1": the classes read back, and the learning rate where it is
    one (fp32 rounding apart)."""
    built = [n[fw] for fw in compared(n) if isinstance(n.get(fw), dict) and "class" in n[fw]]
    if not built:
        return None
    rates = [b.get("lr") for b in built]
    rate = f", lr {rates[0]:.6g}" if None not in rates and len({f"{r:.6g}" for r in rates}) == 1 else ""
    return " / ".join(b["class"] for b in built) + rate


def _fp32_bound(n: dict[str, Any]) -> str | None:
    """The worst step's divergence as a share of its bound (the same-framework baseline times the factor)."""
    pairs = [(d, b) for d, b in zip(n.get("relative_difference") or [], n.get("bound") or [], strict=False) if b]
    if not pairs:
        return None
    return f"worst step at {max(d / b for d, b in pairs):.2g} of its bound ({n.get('factor', 0):g}x the baseline)"


_FIGURES: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "optimizer": _optimizer,
    "loss_trajectory_fp32": _fp32_bound,
    "layers": lambda n: _per_framework(n["parameters"], "parameters") if "parameters" in n else None,
    "flops": lambda n: _per_framework(n["per_sample"], "training FLOPs per sample") if "per_sample" in n else None,
    "logits": lambda n: _maybe("worst mode {:.1e} of the largest logit", _worst(n, "relative")),
    "dropout": lambda n: _maybe("permutation test p = {:.4g}", n.get("p_value")),
    "loss_trajectory": lambda n: _maybe("max relative difference {:.1e}", n.get("max_relative_difference")),
    "weights_after_steps": lambda n: _maybe("worst tensor {:.1e} of its largest value", _worst(n, "relative_to_max")),
}


def pair_label(cert: dict[str, Any]) -> str:
    """A certificate's frameworks, the reference first: "PyTorch / TensorFlow"."""
    return " / ".join(label(fw) for fw in cert["variant"])


def variant_pair(cert: dict[str, Any], named: bool = False) -> str:
    """A certificate's variants, the reference's first ("fixed / +tf_batch_of_one"); ``named``: after its
    frameworks ("PyTorch / Stub: fixed / fixed")."""
    variants = " / ".join(md(v) for v in cert["variant"].values())
    return f"{pair_label(cert)}: {variants}" if named else variants
