"""Memory identity and retirement under several processes (and two hosts), some SIGKILLed at a
failpoint, judged against what each process had acknowledged (``tests/reliability/identity.py``;
run it long with ``python -m tests.reliability.identity --rounds 0-50 [--pg]``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability import identity


@pytest.mark.parametrize("seed", [7])
def test_processes_on_one_file_journal_lose_double_fabricate_resurrect_and_keep_nothing(
    tmp_path: Path, seed: int
) -> None:
    verdict = identity.run_round(tmp_path, seed, pg=None, workers=3, ops=12, kill_share=0.7)
    assert verdict.acked > 0
    assert verdict.clean, verdict.summary()


@pytest.mark.parametrize("seed", [8])
def test_processes_on_two_hosts_sharing_postgres_lose_double_fabricate_resurrect_and_keep_nothing(
    tmp_path: Path, postgres_dsn: str, seed: int
) -> None:
    verdict = identity.run_round(tmp_path, seed, pg=postgres_dsn, workers=4, ops=8, kill_share=0.5)
    assert verdict.acked > 0
    assert verdict.clean, verdict.summary()


def test_the_oracle_sees_a_resurrection_a_doubled_memory_and_a_text_nobody_wrote() -> None:
    """The judge itself: a read after an acknowledged forget that still answers the key, two
    versions of one memory in one read, and a text no process meant to write are each reported."""
    events = [
        {"pre": "learn", "text": "zqa one", "scope": "alpha", "host": "a"},
        {"ack": "learn", "t0": 1, "t1": 2, "key": "k1", "mid": "k1", "text": "zqa one", "host": "a"},
        {"pre": "update", "text": "zqa two", "mid": "k1", "host": "a"},
        {"ack": "forget", "t0": 3, "t1": 4, "key": "k1", "by": None, "host": "a"},
        {"read": "recall", "t0": 5, "t1": 6, "host": "b", "items": [["k1", "k1", "zqa one"]]},
        {
            "read": "recall",
            "t0": 5,
            "t1": 6,
            "host": "b",
            "items": [["k1", "k1", "zqa one"], ["k2", "k1", "zqa two"]],
        },
        {"read": "why", "t0": 0, "t1": 1, "host": "a", "items": [["k3", "k3", "made up"]]},
    ]
    verdict = identity.Verdict(number=0)
    oracle = identity._Oracle(events, {"a": []}, {}, verdict)
    for e in events:
        if "read" in e:
            oracle.read(e)
    assert len(verdict.resurrected) == 2 and len(verdict.doubled) == 1 and len(verdict.fabricated) == 1
    assert not verdict.clean
