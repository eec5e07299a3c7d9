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


def test_a_setting_needs_its_source_or_why_not_and_a_failure_its_fields():
    """The rules the schema writes without a oneOf (a compiled validator pays for each failed branch of one): a
    value read names its source, a null value says why it was not reported, a failure is null or whole."""
    base = json.loads(sorted((REPO / "tests" / "fixtures" / "sweep").glob("*.json"))[0].read_text())
    name = next(iter(base["environment"]["settings"]))
    settings = {
        "value and source": ({"value": 4, "source": "torch.get_num_threads()"}, None),
        "null and why": ({"value": None, "not_reported": "no such reading on the CPU"}, None),
        "value without source": ({"value": 4}, "'source' is a required property"),
        "null without why": ({"value": None, "source": "torch"}, "'not_reported' is a required property"),
    }
    for case, (setting, words) in settings.items():
        r = copy.deepcopy(base)
        r["environment"]["settings"][name] = setting
        _both_say(r, words, case)
    for failure, words in ((None, None), ({"kind": "oom", "message": "m", "log_tail": []}, None),
                           ({"kind": "oom"}, "'message' is a required property"),
                           ("oom", "'oom' is not of type 'null', 'object'")):
        r = copy.deepcopy(base)
        r["failure"] = failure
        _both_say(r, words, failure)


def _both_say(result, words, case) -> None:
    fast = results.problems(result)
    assert _slow(result) == words and (fast is None if words is None else fast.endswith(words)), (case, fast)
