"""Every setting side by side: what each framework reported at run time, framework against framework.

A run's ``environment.settings`` (reprokit/kits/contract/settings.py, docs/settings.md) holds each setting as the
framework reported it. Each framework is held against the reference, setting by setting; a difference is
declared where a ``[[differences]]`` entry's ``key`` names the setting (or a group of settings: "tf32"),
or where a pitfall the run reproduces changes it, and **undeclared** otherwise. An entry without a key is
shown in the report but declares no setting.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reprokit.kits.contract.names import REFERENCE, compared, label
from reprokit.kits.contract.settings import KEYS, PITFALL_SETTINGS, declares
from reprokit.report.markdown import md, short, table
from reprokit.results import runs

NOT_REPORTED = "not reported"


def settings_of(env: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A result's settings by key; a result written before ``environment.settings`` gives what its top-level keys
    said (TF32 per op or one flag, cuDNN autotuning, threads, the compute dtype)."""
    if "settings" in env:
        return dict(env["settings"])
    old: dict[str, Any] = {}
    ops = env.get("tf32_ops") or ({"matmul": env["tf32"], "convolution": env["tf32"]} if "tf32" in env else {})
    old.update({f"tf32.{op}": on for op, on in ops.items()})
    old["cudnn_autotune"] = env.get("cudnn_autotune")
    old.update({f"threads.{k}": v for k, v in (env.get("cpu_threads") or {}).items()})
    old["precision"] = (env.get("precision") or {}).get("compute_dtype")
    old["data_layout"], old["execution"] = env.get("data_layout"), env.get("execution")
    return {k: {"value": v, "source": "the result's top-level environment (written before environment.settings)"}
            for k, v in old.items() if v is not None}


# A result written before keys declared a setting by the field the kit then gave it (matched whole, not in part).
BEFORE_KEYS = {"tf32": "tf32", "cudnn_autotune": "cudnn autotuning", "threads": "cpu threads",
               "data_layout": "data layout", "execution": "execution"}


def declaration(spec: dict[str, Any], key: str, before_keys: bool = False) -> str | None:
    """What in a run's spec declares a setting: a keyed [[differences]] entry, or a pitfall that changes it; for a
    result written before keys (``before_keys``), also an entry whose field names the setting as the kit did."""
    for d in spec.get("differences", []):
        if d.get("key") and declares(d["key"], key):
            return f"[[differences]] {d['field']}"
    field = next((f for k, f in BEFORE_KEYS.items() if declares(k, key)), None)
    for d in spec.get("differences", []) if before_keys and field else []:
        if not d.get("key") and d["field"].lower() == field:
            return f"[[differences]] {d['field']} (by its field: a result written before keys)"
    for pitfall in spec.get("pitfalls", []):
        if any(declares(k, key) for k in PITFALL_SETTINGS.get(pitfall, ())):
            return f"pitfall {pitfall}"
    return None


@dataclass(frozen=True)
class Difference:
    key: str
    values: tuple[Any, Any]          # the reference's, the other's
    declared_by: str | None
    no_effect: bool                  # a GPU-only setting of two CPU runs

    def message(self, a: str, b: str) -> str:
        what = f"{KEYS.get(self.key, (self.key, False))[0]} ({self.key}): {a} {shown(self.values[0])}, " \
               f"{b} {shown(self.values[1])}"
        cpu = "; it acts only on a GPU, and these runs are on a CPU" if self.no_effect else ""
        if self.declared_by:
            return f"{what} (declared: {self.declared_by}{cpu})"
        return f"{what} (undeclared: a [[differences]] entry with key = \"{self.key}\" declares it{cpu})"


def _keys(*seen: dict[str, Any]) -> list[str]:
    """The known keys in their order, then any other a kit reported."""
    return [*KEYS, *sorted({k for s in seen for k in s} - set(KEYS))]


def differences(ref: dict[str, Any], other: dict[str, Any]) -> list[Difference]:
    """The settings two runs (the reference's, another framework's) both reported and reported differently."""
    a, b = settings_of(ref["environment"]), settings_of(other["environment"])
    on_cpu = ref["environment"].get("device") == other["environment"].get("device") == "cpu"
    out = []
    for key in _keys(a, b):
        x, y = (s.get(key, {}).get("value") for s in (a, b))
        if x is None or y is None or x == y:
            continue
        before = "settings" not in ref["environment"] or "settings" not in other["environment"]
        by = declaration(ref["spec"], key, before) or declaration(other["spec"], key, before)
        out.append(Difference(key, (x, y), by, on_cpu and KEYS.get(key, ("", False))[1]))
    return out


def shown(value: Any) -> str:
    if value is None:
        return NOT_REPORTED
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _cell(entry: dict[str, Any] | None) -> str:
    if not entry:
        return NOT_REPORTED
    if entry.get("value") is None:
        return f"{NOT_REPORTED}: {short(entry.get('not_reported') or 'absent', 50)}"
    return shown(entry["value"])


def _mark(diffs: dict[str, dict[str, Difference]], key: str, values: dict[str, Any]) -> str:
    """Per framework held against the reference: same, declared (by what), **undeclared**, or not comparable."""
    parts = []
    for fw, value in values.items():
        if fw == REFERENCE:
            continue
        d = diffs[fw].get(key)
        who = f"{label(fw)}: " if len(values) > 2 else ""
        if d is None:
            ref = values.get(REFERENCE)
            parts.append(who + ("not reported" if value is ref is None else
                                "not comparable" if None in (value, ref) else "same"))
        elif d.declared_by:
            parts.append(f"{who}declared ({md(d.declared_by)})")
        else:
            parts.append(f"{who}**undeclared**" + (" (GPU only: no effect on a CPU)" if d.no_effect else ""))
    return "; ".join(parts)


def _variant_rows(by_fw: dict[str, list[dict[str, Any]]], fws: list[str]) -> dict[str, list[str]]:
    """One variant's row per setting: its cell per framework (of ``fws``) and the mark."""
    first = {fw: by_fw[fw][0] for fw in fws if by_fw.get(fw)}
    seen = {fw: settings_of(r["environment"]) for fw, r in first.items()}
    diffs = {fw: {d.key: d for d in differences(first[REFERENCE], first[fw])} for fw in first if fw != REFERENCE}
    rows = {}
    for key in _keys(*seen.values()):
        values = {fw: seen[fw].get(key, {}).get("value") for fw in first}
        cells = [md(_cell(seen[fw].get(key))) if fw in seen else "not run" for fw in fws]
        rows[key] = [*cells, _mark(diffs, key, values)]
    return rows


def section(by_variant: dict[str, dict[str, list[dict[str, Any]]]]) -> str | None:
    """One experiment's settings table: a row per setting, a column per framework; a setting whose cells differ
    between variants gets a row per variant. Each difference from the reference is marked declared (by the
    [[differences]] entry or pitfall that declares it) or **undeclared**. None where no variant has the reference
    and another framework."""
    main = runs.main_variant(by_variant)
    ordered = sorted(by_variant.items(), key=lambda item: item[0] != main)      # the main variant first
    pairs = {v: by_fw for v, by_fw in ordered if by_fw.get(REFERENCE) and len(by_fw) > 1}
    if not pairs:
        return None
    fws = [fw for fw in compared(next(iter(pairs.values()))) if any(by_fw.get(fw) for by_fw in pairs.values())]
    per_variant = {v: _variant_rows(by_fw, fws) for v, by_fw in pairs.items()}
    keys = list(dict.fromkeys(k for rows in per_variant.values() for k in rows))
    out = []
    for key in keys:
        cells = {v: rows[key] for v, rows in per_variant.items() if key in rows}
        name = f"{md(KEYS.get(key, (key, False))[0])} (`{key}`)"
        if len({tuple(c) for c in cells.values()}) == 1:
            out.append([name, "all", *next(iter(cells.values()))])
        else:
            out += [[name, f"`{md(v)}`", *c] for v, c in cells.items()]
    undeclared = sum("**undeclared**" in row[-1] for row in out)
    lead = (f"Each setting as each framework reported it at run time; {undeclared} undeclared "
            f"difference{'s' if undeclared != 1 else ''} (docs/settings.md says where each is read).")
    return lead + "\n\n" + table(out, ["setting", "variant", *(label(fw) for fw in fws), "difference"])
