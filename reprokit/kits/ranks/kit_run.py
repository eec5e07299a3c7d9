"""A PyTorch kit run at N devices: torchrun starts its N ranks, and their results are gathered into the run's.

The run's process (``python -m reprokit.kits.run`` with a spec at N devices) starts
``python -m torch.distributed.run --standalone --nproc-per-node N -m reprokit.kits.run ...`` with the same
arguments, waits, and writes one result from the ranks' (reprokit/kits/ranks/gather.py): rank 0's figures, each
rank's in ``processes``, and every rank's first-step evidence in ``distributed``. Each rank writes its own result
beside the run's (``<out>.rank<r>.json``). torchrun dies with this process, and each rank with torchrun
(reprokit/kits/framework_free/parent_death.py), so no rank outlives the run. Standard library only.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from reprokit.kits.contract import result_header
from reprokit.kits.contract.files import write_json_atomic
from reprokit.kits.framework_free.parent_death import arm
from reprokit.kits.ranks import gather


def rank_out(out: Path, rank: int) -> Path:
    """Where rank ``rank`` writes its own result."""
    return out.with_name(f"{out.stem}.rank{rank}{out.suffix}")


def torchrun(n: int, module: str, argv: list[str]) -> list[str]:
    """The command that starts ``python -m module argv`` as N ranks of one node under torchrun."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc-per-node",
            str(n), "-m", module, *argv]


def launch(spec: dict[str, Any], argv: list[str], out: Path) -> int:
    """Run the spec's N ranks under torchrun and write the run's result to ``out``; the exit status."""
    n = int(spec["devices"])
    parent = os.getpid()
    code = subprocess.call(torchrun(n, "reprokit.kits.run", argv),
                           preexec_fn=lambda: arm(parent))    # noqa: PLW1509 - a single-threaded parent
    found = [json.loads(p.read_text()) for r in range(n) if (p := rank_out(out, r)).is_file()]
    result = gathered(spec, found, n, code)
    write_json_atomic(out, result)
    return 0 if result["status"] == "ok" else 1


def gathered(spec: dict[str, Any], found: list[dict[str, Any]], n: int, code: int) -> dict[str, Any]:
    """The run's result from its ranks' (a rank that failed fails the run with its own error, naming it)."""
    failure = gather.failed(found)
    ok = [r for r in found if r.get("status") == "ok"]
    if failure is None and len(ok) < n:
        missing = sorted(set(range(n)) - {(r.get("process") or {}).get("index") for r in ok})
        failure = {"kind": "error", "message": f"rank {', '.join(map(str, missing))} left no result (torchrun exited "
                                               f"with status {code})", "log_tail": []}
    if failure is not None:
        return result_header.header(spec, "failed", failure)
    result = gather.gather(None, ok, stand_in=spec.get("device") != "gpu")
    assert result is not None        # every rank trained
    result["distributed"]["evidence"] = [e for r in sorted(ok, key=lambda r: r["process"]["index"])
                                         for e in r["distributed"]["evidence"]]
    return result
