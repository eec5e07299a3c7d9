"""The GPU's state around a run, read on the host (a container cannot see other processes).

Only the run's own GPU counts: the kit's NVML sampler records the UUID it watched, and
compute processes are matched to it by their ``gpu_uuid``. A MIG device's clocks are its GPU's;
nvidia-smi lists the processes of every MIG device under the GPU's UUID, so for a MIG run the
processes on its GPU are reported as such. Slowdowns (heat, hardware) warn; the driver's power
management (the software power cap, routine under load) is reported as information.
"""
from __future__ import annotations

from typing import Any

from reprokit.kits.framework_free import nvidia_smi
from reprokit.kits.framework_free.nvml import POWER_MANAGEMENT, SLOWDOWNS

# each group of clock-event reasons: its bits, its key in the sampler's clock_events, its finding, and a note
GROUPS = ((SLOWDOWNS, "slowdown_samples", "gpu-throttled", "warning", ""),
          (POWER_MANAGEMENT, "power_samples", "gpu-power-capped", "info",
           ", the driver's power management (routine under load, not a slowdown)"))


def snapshot() -> dict[str, Any] | None:
    """Clocks, temperature, clock-event reasons, MIG devices and compute processes of every GPU; None without a
    driver."""
    gpus = nvidia_smi.query("gpu", nvidia_smi.STATE)
    if gpus is None:
        return None
    migs = {d["uuid"]: [m["uuid"] for m in d["mig"]] for d in nvidia_smi.devices() or []}
    apps = nvidia_smi.query("compute-apps", nvidia_smi.APPS) or []
    return {"gpus": [{**g, "mig": migs.get(g["uuid"], [])} for g in gpus],
            "processes": [{"pid": int(a["pid"]), "gpu_uuid": a["gpu_uuid"],
                           "used_memory_mib": nvidia_smi.number(a["used_memory_mib"])}
                          for a in apps if (a["pid"] or "").isdigit()]}


def watched(result: dict[str, Any] | None) -> str | None:
    """The UUID of the device the run's sampler watched (None when it recorded none)."""
    return (((result or {}).get("environment") or {}).get("nvml") or {}).get("uuid")


def _run_gpus(state: dict[str, Any], uuid: str | None) -> tuple[list[dict[str, Any]], bool]:
    """(the run's GPU rows, whether the run was on a MIG device of them); every GPU when uuid is unknown."""
    if uuid is None:
        return state["gpus"], False
    for gpu in state["gpus"]:
        if uuid == gpu["uuid"]:
            return [gpu], False
        if uuid in gpu.get("mig", []):
            return [gpu], True
    return [], False


def findings(before: dict[str, Any] | None, after: dict[str, Any] | None,
             result: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """gpu-throttled, gpu-power-capped and gpu-shared, about the run's own GPU only."""
    uuid = watched(result)
    scope = "" if uuid else " (the run recorded no GPU UUID, so every GPU is considered)"
    out = []
    for when, state in (("before", before), ("after", after)):
        if not state:
            continue
        for gpu in _run_gpus(state, uuid)[0]:
            out += _held(gpu, when, scope)
    out += _during(result)
    if before and before["processes"]:
        gpus, mig = _run_gpus(before, uuid)
        mine = {g["uuid"] for g in gpus}
        others = [p for p in before["processes"] if p["gpu_uuid"] in mine]
        if others:
            pids = ", ".join(str(p["pid"]) for p in others)
            where = ("on the GPU that holds this run's MIG device (nvidia-smi does not say which MIG device "
                     "they use)" if mig else "on the run's GPU")
            out.append({"code": "gpu-shared", "severity": "warning",
                        "message": f"other processes were using the GPU {where} when the run started (pids {pids}); "
                                   f"their work competes with the measured run{scope}"})
    return out


def _held(gpu: dict[str, Any], when: str, scope: str) -> list[dict[str, Any]]:
    """gpu-throttled and gpu-power-capped from one GPU's clock-event reasons in a snapshot."""
    active = nvidia_smi.bitmask(gpu.get("event_reasons")) or 0
    out = []
    for bits, _, code, severity, note in GROUPS:
        reasons = [text for bit, text in bits.items() if active & bit]
        if reasons:
            out.append({"code": code, "severity": severity,
                        "message": f"GPU {gpu['index']} ({gpu['name']}) {when} the run: {', '.join(reasons)} "
                                   f"(SM clock {gpu.get('clocks_sm_mhz')} of {gpu.get('clocks_max_sm_mhz')} MHz, "
                                   f"{gpu.get('temperature_c')} C){note}{scope}"})
    return out


def _during(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    """gpu-throttled and gpu-power-capped from the clock-event reasons the kit's sampler read while the run trained."""
    nvml = ((result or {}).get("environment") or {}).get("nvml") or {}
    events = nvml.get("clock_events") or {}
    n = events.get("samples") or 0
    out = []
    for _, key, code, severity, note in GROUPS:
        seen = {text: k for text, k in (events.get(key) or {}).items() if k}
        if n and seen:
            parts = ", ".join(f"{text} in {k / n:.0%}" for text, k in sorted(seen.items(), key=lambda kv: -kv[1]))
            out.append({"code": code, "severity": severity, "message": f"GPU {nvml.get('name')} ({nvml.get('uuid')}) "
                                                                       f"during the run: {parts} of {n} samples{note}"})
    return out
