"""Record the evidence each rank of a two-rank DDP run leaves, planted pitfall by pitfall, for the tests of the
detectors of many devices (tests/test_rank_detectors.py reads tests/fixtures/rank_evidence/<case>.json).

    PYTHONPATH=. .nox/tests/bin/python scripts/record_rank_evidence.py [CASE ...]

Each case runs tests/bound_scripts/ddp_ranks.py (two gloo ranks, mp.spawn) under the probe through the local
runner, bounded to 6 steps in each of 2 epochs, with PITFALL set to the case ("fixed": none), and keeps of every
rank's result what the detectors read: who it was, its evidence, its batches and evaluation, its step times and
device. The run's own result (with the detectors' findings) is printed.
"""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import tempfile
from pathlib import Path

from reprokit import cli
from reprokit.environments.envs import ENVS
from reprokit.execute import compose
from reprokit.runners.base import RESULT_NAME, spec_call
from reprokit.runners.local import LocalRunner

CASES = ("fixed", "no-sampler", "no-set-epoch", "straggler", "eval-on-rank-0")
REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "bound_scripts" / "ddp_ranks.py"
FIXTURES = REPO / "tests" / "fixtures" / "rank_evidence"
KEPT = {"process": None, "effective": ("batch_size", "test_samples"), "timing": ("epochs", "step_s"),
        "environment": ("device",), "probe": ("evidence",)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kept(result: dict) -> dict:
    return {key: (result[key] if fields is None else {f: result[key].get(f) for f in fields})
            for key, fields in KEPT.items() if key in result}


def record(case: str, root: Path) -> list[dict]:
    data_dir, folder = root / "data", root / case
    parsed = cli.parse(["--script", f"pytorch={SCRIPT} {_free_port()}", "--frameworks", "pytorch", "--backend",
                        "local", "--profile", "quick", "--data-dir", str(data_dir), "--state-dir", str(root / "state")])
    (planned,) = compose.build(parsed).specs
    spec = planned.to_dict() | {"bounds": {"max_steps": 6, "epochs": 2, "eval_steps": 3}}
    folder.mkdir(parents=True)
    (folder / "spec.json").write_text(json.dumps(spec))
    call = spec_call(spec, folder / "spec.json", folder / "out", data_dir)
    os.environ.update(REPROKIT_BOUND_LOG=str(folder / "records.jsonl"), OMP_NUM_THREADS="1")
    if case != "fixed":
        os.environ["PITFALL"] = case
    try:
        LocalRunner(ENVS, data_dir, "cpu").run(dataclasses.replace(call, timeout_s=600), lambda event: None)
    finally:
        os.environ.pop("PITFALL", None)
    result = json.loads((call.output / RESULT_NAME).read_text())
    print(f"{case}: {result['status']}; findings: {[f['code'] for f in result.get('findings', [])]}")
    ranks = [json.loads(p.read_text()) for p in sorted((call.output / "processes").glob("*.json"))
             if p.name != "session.json"]
    return [_kept(r) for r in ranks]


def main(cases: list[str]) -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases or CASES:
            (FIXTURES / f"{case}.json").write_text(json.dumps(record(case, Path(tmp)), indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
