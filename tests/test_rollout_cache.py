"""The rollout cache shared by processes: each reads what the others wrote since."""

from __future__ import annotations

import json

import pytest

from trajval_ops.rollout.cache import RolloutCache


def test_a_second_process_reads_rows_written_after_it_opened_the_cache(tmp_path, monkeypatch):
    first = RolloutCache(tmp_path, {"k": 1})
    second = RolloutCache(tmp_path, {"k": 1})
    first.put_many([("a", {"rewards": [1.0]})])
    assert second.get("a") is None
    second.reload()
    assert second.get("a") == {"row": "a", "rewards": [1.0]}
    # a line being written (no newline yet) is left for a later read, then read once complete
    log = next(tmp_path.rglob("results-*.jsonl"))
    line = json.dumps({"row": "b", "rewards": [0.0]})
    with open(log, "a") as handle:
        handle.write(line[:10])
    second.reload()
    assert second.get("b") is None
    with open(log, "a") as handle:
        handle.write(line[10:] + "\n")
    second.reload()
    assert second.get("b") == {"row": "b", "rewards": [0.0]}
    assert len(second) == 2


def test_a_record_cut_short_by_a_kill_is_ignored_and_reported(tmp_path, caplog_loguru):
    cache = RolloutCache(tmp_path, {"k": 2})
    cache.put_many([("a", {"rewards": [1.0]})])
    cache.close()
    log = next(tmp_path.rglob("results-*.jsonl"))
    with open(log, "a") as handle:
        handle.write('{"row": "b", "sco')
    again = RolloutCache(tmp_path, {"k": 2})
    assert again.get("a") is not None and again.get("b") is None
    assert "ignored 1 incomplete record" in caplog_loguru.text


def test_a_record_of_an_earlier_release_names_its_rewards_scores_and_still_resumes(tmp_path):
    cache = RolloutCache(tmp_path, {"k": 1})
    (cache.directory / "results-old-1.jsonl").write_text(json.dumps({"row": "a", "scores": [1.0, 0.0]}) + "\n")
    assert RolloutCache(tmp_path, {"k": 1}).get("a") == {"row": "a", "rewards": [1.0, 0.0]}


def test_a_content_hash_refuses_values_whose_text_is_not_exact():
    """A key's hash reads each value's JSON text; ``str`` of an array elides its middle, of a set
    follows its hash order, of an object holds its address: such a value is an error, not a key
    that a different value could share (a path, a date, a decimal, a numpy scalar keep their text)."""
    import datetime
    import decimal
    import pathlib

    import numpy as np

    from trajval_ops.canonical import canonical_json, stable_hash

    assert canonical_json([pathlib.Path("/m"), datetime.date(2026, 1, 2), decimal.Decimal("1.50"), np.int64(3)]) == \
        '["/m","2026-01-02","1.50","3"]'
    big, other = np.zeros(2000), np.zeros(2000)
    other[1000] = 1.0
    assert str(big) == str(other)  # what the hash read before
    for value in (big, {1, 2}, object()):
        with pytest.raises(TypeError, match="cannot write .* as JSON exactly"):
            stable_hash({"settings": value})
