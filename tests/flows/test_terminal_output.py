"""What the CLI prints for a person is data read back from the store: a finding's text, tags, source
and metadata, a forget's reason, a run's error, traceback, output and file name. Control characters
in them (an escape sequence that recolours, retitles or clears the terminal, a bell, a C1 CSI) are
written as escapes, never raw, by every command that shows them."""

from __future__ import annotations

from pathlib import Path

import memory
from tests.flows.helpers import flows as flows_cli
from tests.flows.helpers import json_of, write_flow

HOSTILE = "\x1b[31m\x1b]0;title\x07\x9b2J"
RAW = ("\x1b", "\x07", "\x9b")


def _hostile_store(db: Path, hostile: str, *, scope: str) -> tuple[memory.Learned, memory.Learned]:
    """A finding with ``hostile`` in its text, tag, source and metadata, and one forgotten for a
    reason that holds it."""
    with memory.MemoryStore(db) as store, store.session(scope=scope, flow="f") as sess:
        live = sess.learn(
            {
                "text": f"pressure falls {hostile} before rain",
                "tags": [f"t{hostile}"],
                "source": f"src{hostile}",
                "metadata": {"k": f"v{hostile}"},
            }
        )
        gone = sess.learn({"text": "forgotten fact about pressure"})
        sess.forget(gone.key, reason=f"because {hostile}")
    return live, gone


def test_no_command_writes_a_findings_control_characters_raw(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    live, gone = _hostile_store(db, HOSTILE, scope="s")
    run_id = live.citation.run_id
    commands = [
        ["recall"],
        ["why", "pressure"],
        ["history", live.key],
        ["history", gone.key],
        ["show", run_id],
        ["journal", run_id, "--stream", memory.STREAM],
        ["forget", gone.key],  # already forgotten: answered with the stored reason
    ]
    for args in commands:
        done = flows_cli(db, *args)
        assert done.returncode == 0, (args, done.stderr)
        assert "pressure" in done.stdout or "because" in done.stdout, (args, done.stdout)
        for raw in RAW:
            assert raw not in done.stdout and raw not in done.stderr, (args, raw, done.stdout)


def test_a_file_name_with_control_characters_is_escaped_in_check_and_in_errors(tmp_path: Path) -> None:
    """A name anyone could give a file in the store reaches the terminal in ``flows check``'s report
    and in the one-line error of a read that meets it: escaped in both, the error still one line."""
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="s") as sess:
        sess.learn({"text": "a fact"})
    (folder,) = (db.parent / "flows-memory").glob("*/.trajectories/compacted")
    (folder / f"x{HOSTILE}\n.json").write_bytes(b"not json")
    check = flows_cli(db, "check")
    assert check.returncode == 1 and "learned_damaged" in check.stdout
    read = flows_cli(db, "recall")
    assert read.returncode == 1 and read.stderr.startswith("flows: error[memory_unreachable]: ")
    assert read.stderr.count("\n") == 1, read.stderr
    for done in (check, read):
        for raw in RAW:
            assert raw not in done.stdout and raw not in done.stderr, (raw, done.stdout, done.stderr)


def test_what_a_run_recorded_never_drives_the_terminal(tmp_path: Path) -> None:
    # An exception's message, its traceback, the body's output and the flow file's name are data:
    # `flows run` (-v), `flows show` print each control character as an escape, C1 included.
    db = tmp_path / "history.db"
    bad = write_flow(
        tmp_path / "evil\x1b[2J.py", 'raise RuntimeError("boom \\x1b]0;pwned\\x07 \\u009b2J")', 'name="evil"'
    )
    failed = flows_cli(db, "run", "-v", str(bad))
    assert failed.returncode == 1 and "Traceback" in failed.stderr
    good = write_flow(tmp_path / "good.py", 'return {"x": "\\u009b2J \\x1b[31m"}')
    done = flows_cli(db, "run", str(good))
    assert done.returncode == 0 and "output:" in done.stdout
    runs = json_of(flows_cli(db, "runs", "--json"))
    shows = [flows_cli(db, "show", r["runId"]) for r in runs]
    assert all(s.returncode == 0 for s in shows)
    assert "boom \\x1b]0;pwned\\x07 \\x9b2J" in shows[1].stdout and "evil\\x1b[2J.py" in shows[1].stdout
    for out in [failed.stderr, done.stdout, *(s.stdout for s in shows)]:
        assert not any(c in out for c in RAW), out


# every bidirectional control: the embeddings and overrides, the isolates, the marks
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"


def test_bidi_controls_in_a_finding_are_escaped_for_a_person_and_exact_in_json(tmp_path: Path) -> None:
    """A right-to-left override in a tag would make the terminal draw the key and source after it
    backwards: every command writes each bidirectional control as ``\\u202e``; ``--json`` keeps the
    data exact."""
    db = tmp_path / "store" / "history.db"
    live, gone = _hostile_store(db, BIDI, scope=f"s{BIDI}")
    run_id = live.citation.run_id
    reads = [["recall"], ["why", "pressure"], ["history", live.key], ["history", gone.key], ["show", run_id]]
    for args in reads:
        done = flows_cli(db, *args)
        assert done.returncode == 0, (args, done.stderr)
        out = done.stdout + done.stderr
        assert not any(c in out for c in BIDI), (args, out)
        if args[0] in ("recall", "why"):
            for escaped in ("\\u202e", "\\u2066", "\\u200f", "\\u061c"):
                assert escaped in out, (args, escaped, out)
    found = json_of(flows_cli(db, "recall", "--json"))
    assert [f["tags"] for f in found if f["key"] == live.key] == [[f"t{BIDI}"]]


def test_a_file_name_with_newlines_never_forges_a_line_of_checks_report(tmp_path: Path) -> None:
    """``flows check`` prints each problem's path, message and repair on lines of their own: a name
    holding newlines is escaped on its line, so it can never print a line of the report itself."""
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="s") as sess:
        sess.learn({"text": "a fact"})
    (folder,) = (db.parent / "flows-memory").glob("*/.trajectories/compacted")
    forged = "no problem: the store is clean"  # a name holds no slash: the rest of a line it can
    (folder / f"x\n{forged}\n.json").write_bytes(b"not json")
    check = flows_cli(db, "check")
    assert check.returncode == 1
    lines = check.stdout.splitlines()
    assert forged not in lines and len(lines) == 4, lines  # kind and path, message, repair, summary
    assert lines[0].startswith("learned_damaged: ") and f"x\\n{forged}\\n.json" in lines[0], lines
    repaired = flows_cli(db, "check", "--repair")
    assert repaired.returncode == 0, repaired.stderr
    lines = repaired.stdout.splitlines()
    assert forged not in lines and len(lines) == 5, lines
    assert lines[3].startswith("repair: quarantined ")
    assert lines[4] == f"store {db.parent} is clean after repair"
