"""The benchmark's one entry point runs, on tiny sizes, and reports every stable name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import retrieval
from benchmarks.__main__ import FIGURES, GOALS, RATIOS, SECTIONS
from benchmarks.writes import WRITE_NAMES

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".bench-venv" / "bin" / "python"


def _smoke(tmp_path: Path, *extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--json", "--dir", str(tmp_path), *extra],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)  # stdout is the JSON document alone; progress went to stderr
    assert list(tmp_path.iterdir()) == [], "the temporary directory was left behind"
    return doc


def _check_names(doc: dict) -> None:
    for section in SECTIONS:
        for name in FIGURES[section]:
            if name in doc["skipped"]:
                assert doc["skipped"][name].strip(), f"{name} skipped without a reason"
            else:
                assert isinstance(doc["figures"].get(name), float), f"{name} neither measured nor skipped"
                assert doc["figures"][name] > 0 or name in retrieval.MAY_BE_ZERO, name
    for name in RATIOS:
        assert name in doc["ratios"] or doc["skipped"].get(name), f"{name} neither computed nor skipped"
    for name in GOALS:
        assert name in doc["goals"], name
        goal = doc["goals"][name]
        assert goal["met"] in (True, False, None) and goal["target"], goal
    assert doc["meta"]["sizes"] == "smoke" and doc["meta"]["sections"] == list(SECTIONS)


def test_smoke_run_reports_every_stable_name_and_peers_as_skipped(tmp_path: Path) -> None:
    doc = _smoke(tmp_path, "--no-peers")
    _check_names(doc)
    for name in ("write.eventsourcing_1w_per_s", "write.langgraph_put_1w_per_s", "write.dbos_step_1w_per_s"):
        assert "--no-peers" in doc["skipped"][name]
    assert "needs write.langgraph_put_1w_per_s" in doc["skipped"]["ratio.learn_1w_vs_langgraph"]
    assert doc["goals"]["goal.learn_1w_ahead_of_langgraph"]["met"] is None
    for name in (
        "write.learn_file_1w_per_s",
        "write.learn_file_8p_per_s",
        "read.recall_ms",
        "resume.flow_resume_per_s",
    ):
        assert name in doc["figures"], doc["skipped"].get(name)
    # CPU per learn beside the rate (user and system µs per operation, from the workers' rusage)
    # (reported, as numbers: a smoke run's few learns may fall within one tick of CPU accounting)
    assert doc["figures"]["write.learn_file_1w_cpu_user_us"] >= 0
    assert doc["figures"]["write.learn_file_1w_cpu_sys_us"] >= 0
    assert doc["figures"]["write.floor_append_1w_cpu_sys_us"] >= 0
    _check_cpu(doc)
    for name in ("learn_file_1w", "learn_file_8t", "learn_file_8p", "update_file_1w", "sqlite3_full_1w"):
        assert f"write.{name}_cpu_user_us" in doc["figures"], name


def _check_cpu(doc: dict) -> None:
    """Every write contender measured has its user and system CPU µs per operation beside its rate,
    described; one skipped has neither."""
    for name in WRITE_NAMES:
        rate = f"write.{name}_per_s"
        for kind in ("user", "sys"):
            cpu = f"write.{name}_cpu_{kind}_us"
            if rate in doc["figures"]:
                assert isinstance(doc["figures"].get(cpu), float) and doc["figures"][cpu] >= 0, cpu
                assert doc["notes"][cpu].endswith(f"{'user' if kind == 'user' else 'system'} CPU µs/op"), cpu
            else:
                assert cpu not in doc["figures"], cpu


@pytest.mark.slow
@pytest.mark.skipif(not VENV.exists(), reason="the peers' venv is absent: bash benchmarks/setup_peers.sh")
def test_smoke_run_with_the_peers_installed(tmp_path: Path) -> None:
    doc = _smoke(tmp_path, "--only", "writes")
    for name in ("write.eventsourcing_1w_per_s", "write.langgraph_put_1w_per_s", "write.dbos_step_1w_per_s"):
        assert name in doc["figures"], doc["skipped"].get(name)
    _check_cpu(doc)  # the peers' workers report their CPU too


def test_the_peers_venv_absent_is_a_skip_with_the_setup_command(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "BENCH_VENV": str(tmp_path / "no-venv")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--smoke",
            "--json",
            "--only",
            "ledger,reads",
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
        check=True,
    )
    doc = json.loads(proc.stdout)
    assert "benchmarks/setup_peers.sh" in doc["skipped"]["read.langgraph_tag_ms"]
    assert "ledger.lookup_snapshot_ms" in doc["figures"]
    for name in ("ledger.journal_large_ms", "ledger.journal_small_ms", "ledger.journal_day_alone_ms"):
        assert name in doc["figures"], name
    assert "ratio.ledger_journal_large_vs_small" in doc["ratios"]


def test_the_retrieval_data_set_is_large_enough_and_every_question_has_one_answer() -> None:
    data = retrieval.load()
    assert len(data.items) >= 300
    assert len({i.block for i in data.items}) >= 10
    assert all(2 <= len(i.questions) <= 3 for i in data.items)
    assert sum(i.kind == "U" for i in data.items) >= 10 and sum(i.kind == "X" for i in data.items) >= 10
    texts = [i.text for i in data.items]
    assert len(set(texts)) == len(texts)
    for question, answer in data.asked:
        assert answer.kind in ("F", "U") and answer.answered_by is None, question


def test_the_held_out_retrieval_set_is_apart_from_the_benchmarks_own() -> None:
    """The second set that a change to the ranking is also judged on: at least 60 questions with one
    answer, its own people and topics, and no finding or question of the first set."""
    heldout, own = retrieval.load(retrieval.HELDOUT), retrieval.load()
    assert len(heldout.asked) >= 60 and len({i.block for i in heldout.items}) >= 5
    assert any(i.kind == "U" for i in heldout.items) and any(i.kind == "X" for i in heldout.items)
    assert not {i.block for i in heldout.items} & {i.block for i in own.items}
    assert not {i.text for i in heldout.items} & {i.text for i in own.items}
    assert not {q for i in heldout.items for q in i.questions} & {q for i in own.items for q in i.questions}
    for question, answer in heldout.asked:
        assert answer.kind in ("F", "U") and answer.answered_by is None, question


def test_the_retrieval_score_counts_ranks_and_every_retired_key_returned(tmp_path: Path) -> None:
    data = retrieval.load()
    retrieval.build(tmp_path / "history.db", data).close()
    superseded = {i.key for i in data.items if i.answered_by is not None}
    forgotten = {i.key for i in data.items if i.kind == "X"}
    answers = dict(data.asked)
    leak = sorted(forgotten)[0]
    # the right key second for every question, and one forgotten key third: recall@1 0, @5 1, MRR 1/2
    got = retrieval.score(
        lambda q: ["x", answers[q].key if q in answers else "y", leak], data, superseded, forgotten
    )
    assert (got["recall_at_1"], got["recall_at_5"], got["mrr"]) == (0.0, 1.0, 0.5)
    assert got["forgotten_returned"] == len(data.asked) + len(data.forgotten)
    assert got["superseded_returned"] == 0
    with pytest.raises(ValueError, match="a U line must follow an F line"):
        bad = tmp_path / "bad.txt"
        bad.write_text("== x\nU | new | q1 | q2\n", encoding="utf-8")
        retrieval.load(bad)


def test_concurrent_cpu_reports_each_mode_s_sleeps_and_preemptions_per_learn(tmp_path: Path) -> None:
    """``benchmarks.concurrent_cpu`` counts, beside CPU per learn, how often the workers slept (a lock,
    a flush, a pipe) and were preempted (``getrusage``'s context switches): on this machine a sleep
    costs a learn CPU after it (docs/PERFORMANCE.md), so the counts explain the CPU figures."""
    from benchmarks import concurrent_cpu

    got = concurrent_cpu._measure(REPO, "sqlite8p", tmp_path / "m", writers=2, learns=5)
    assert got["vcs"] >= 0 and got["ics"] >= 0, got
    assert got["vcs"] > 0, "a worker whose commits each wait for a flush never slept"


@pytest.mark.parametrize("where", ["missing", "a-file"])
def test_a_dir_that_cannot_hold_the_run_is_a_usage_error_not_a_traceback(tmp_path: Path, where: str) -> None:
    target = tmp_path / where
    if where == "a-file":
        target.write_text("not a directory\n")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--dir", str(target)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"--dir {target}" in proc.stderr and "existing, writable directory" in proc.stderr
