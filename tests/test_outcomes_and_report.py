"""How any outcome becomes exactly one result, and how the report treats text from a run."""
from __future__ import annotations

import json

import pytest

from reprokit.report import fenced, md
from reprokit.results import results
from reprokit.runners.base import Outcome, collect

SPEC = {"run_id": "0123456789abcdef", "experiment": "tiny", "variant": "fixed", "framework": "pytorch",
        "profile": "quick", "repeat": 0, "device": "cpu", "model": {}, "data": {}, "train": {}, "numerics": {},
        "limits": {"timeout_s": 30}}


def _kind(outcome: Outcome, out_path, content: str | None = None) -> dict:
    if content is not None:
        out_path.write_text(content)
    result = collect(SPEC, outcome, out_path)
    assert results.problems(result) is None
    return result


@pytest.mark.parametrize("outcome,content,kind,words", [
    (Outcome(None, 31.0, ["..."], timed_out=True), None, "timeout", "30 s limit"),
    (Outcome(-9, 3.0, ["Killed"], oom_killed=True), None, "oom", "host memory"),
    (Outcome(1, 3.0, ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"]), None,
     "gpu-oom", "GPU memory"),
    (Outcome(3, 1.0, ["Traceback ...", "ValueError: boom"]), None, "exit-code", "status 3"),
    (Outcome(0, 1.0, []), None, "invalid-output", "no result file"),
    (Outcome(0, 1.0, []), "{not json", "invalid-output", "not JSON"),
    (Outcome(0, 1.0, []), json.dumps({"schema": "reprokit.result/1"}), "invalid-output", "does not match"),
], ids=["timeout", "oom", "gpu-oom", "exit-code", "missing", "garbage", "schema"])
def test_every_outcome_maps_to_one_failed_result(tmp_path, outcome, content, kind, words):
    result = _kind(outcome, tmp_path / "result.json", content)
    assert result["status"] == "failed"
    assert result["failure"]["kind"] == kind
    assert words in result["failure"]["message"]
    assert result["failure"]["log_tail"] == outcome.log_tail
    assert result["spec"] is SPEC


def test_a_result_of_another_run_is_refused(tmp_path):
    other = results.failure({**SPEC, "run_id": "f" * 16}, "error", "x", [], 1.0, {})
    result = _kind(Outcome(0, 1.0, []), tmp_path / "r.json", json.dumps(other))
    assert result["failure"]["kind"] == "invalid-output" and "another run" in result["failure"]["message"]


def test_a_kit_written_failure_is_kept_with_its_own_kind(tmp_path):
    own = results.failure(SPEC, "no-gpu", "the spec asks for a GPU but pytorch sees none", ["..."], 2.0, {})
    result = _kind(Outcome(1, 2.5, ["tail"]), tmp_path / "r.json", json.dumps(own))
    assert result["failure"]["kind"] == "no-gpu" and result["launcher"]["wall_s"] == 2.5


def test_markdown_escaping_of_text_from_a_run():
    hostile = "NVIDIA | H200 <script>alert(1)</script> `rm` *bold* [x](y)\nnext"
    cell = md(hostile)
    assert "|" not in cell.replace("\\|", "")
    assert "<" not in cell.replace("\\<", "") and "\n" not in cell
    assert "`" not in cell.replace("\\`", "")


def test_fenced_log_tail_cannot_close_its_own_block():
    block = fenced(["ok", "```", "sneaky ````` fence"])
    fence = block.splitlines()[0].removesuffix("text")
    assert len(fence) == 6 and block.endswith("\n" + fence)
