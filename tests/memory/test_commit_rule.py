"""Which commit of a finding is published: the first within a run, the newest across runs.

Sync, materialize, resume's republish and ``flows check`` all decide through one rule; these pin it.
"""

from __future__ import annotations

from journal import Record
from memory import STREAM
from memory._finding import commit_to_publish


def _commit(run_id: str, seq: int, learned_ms: int) -> Record:
    payload = {"id": "f" * 64, "scope": "s", "flow": "f", "learnedMs": learned_ms}
    return Record(run_id, STREAM, seq, f"{run_id}-{seq}", "f" * 64, learned_ms, payload)


def test_the_first_commit_is_chosen_when_there_is_no_other() -> None:
    first = _commit("run-a", 1, 5)
    assert commit_to_publish(None, first) is first


def test_within_one_run_the_first_commit_wins_even_against_a_later_time() -> None:
    first, again = _commit("run-a", 1, 5), _commit("run-a", 2, 9)
    assert commit_to_publish(first, again) is first


def test_across_runs_the_newest_commit_wins_whichever_is_read_first() -> None:
    old, new = _commit("run-b", 1, 5), _commit("run-a", 1, 9)
    assert commit_to_publish(old, new) is new
    assert commit_to_publish(new, old) is new


def test_across_runs_equal_times_go_to_the_larger_run_id() -> None:
    low, high = _commit("run-a", 1, 7), _commit("run-b", 1, 7)
    assert commit_to_publish(low, high) is high
    assert commit_to_publish(high, low) is high
