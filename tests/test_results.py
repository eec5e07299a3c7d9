"""Result-file validation: the compiled fast path says what the reference validator says."""
from __future__ import annotations

import copy
import json

import jsonschema
from checkout import REPO

from reprokit.results import results

FILES = sorted((REPO / "reports").glob("*/results/*.json"))


def _slow(result) -> str | None:
    error = jsonschema.exceptions.best_match(results._validator().iter_errors(result))
    return None if error is None else error.message


def test_every_published_result_is_valid_by_both():
    assert FILES
    for path in FILES:
        result = json.loads(path.read_text())
        assert results.problems(result) is None and _slow(result) is None, path


def test_a_broken_result_is_refused_with_the_reference_validators_words():
    base = json.loads(FILES[0].read_text())
    breaks = [
        lambda r: r.pop("timing"),
        lambda r: r.update(status="finished"),
        lambda r: r["timing"].update(samples_per_s="fast"),
        lambda r: r["effective"]["batch_size"].pop("configured"),
        lambda r: r.update(schema="reprokit.result/0"),
    ]
    for brk in breaks:
        broken = copy.deepcopy(base)
        brk(broken)
        message = results.problems(broken)
        assert message is not None and _slow(broken) is not None
        assert message.endswith(_slow(broken))
