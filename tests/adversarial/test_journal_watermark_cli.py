"""Damage below the watermark of a learn stream, through the CLI: every command fails closed.

A flow learns three findings and fails. Then line 2 of its ``memory-learn`` stream is deleted, or
its last (acknowledged) line is zeroed in place. ``flows journal``, ``flows check``, ``flows check
--repair`` and ``flows resume`` each exit 1 with a diagnostic naming the stream file and the line;
none cuts the intact records after the damage, none says the store is clean, and no learned file
is quarantined for want of a record the journal cannot read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adversarial.memory_support import error_code, flows

FLOW = """import flows


@flows.flow(scope="adv")
async def body(f):
    for i in range(3):
        await f.memory.learn({"text": f"finding {i}"})
    raise RuntimeError("fail after learning")
"""


def _delete_line_2(data: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    return b"".join(lines[:1] + lines[2:])


def _zero_last_line(data: bytes) -> bytes:
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    return data[:last] + b"\0" * (len(data) - last)


@pytest.mark.parametrize(("damage", "line"), [(_delete_line_2, 2), (_zero_last_line, 3)])
def test_damage_below_the_watermark_fails_every_command_closed_naming_stream_and_line(
    tmp_path: Path, damage: object, line: int
) -> None:
    db = tmp_path / "history.db"
    (tmp_path / "three.py").write_text(FLOW)
    ran = flows(db, "run", str(tmp_path / "three.py"))
    assert ran.returncode == 1 and error_code(ran) == "flow_failed", ran.stderr
    (run_dir,) = (tmp_path / "flows-journal" / "runs").iterdir()
    stream = run_dir / "streams" / "memory-learn.jsonl"
    assert callable(damage)
    stream.write_bytes(damage(stream.read_bytes()))
    before = stream.read_bytes()
    named = f"{stream} line {line} "
    for args in (("journal", run_dir.name, "--stream", "memory-learn"), ("resume", run_dir.name)):
        result = flows(db, *args)
        assert result.returncode == 1, (args, result.stdout)
        assert error_code(result) == "journal_corrupt", args
        assert named in result.stderr, (args, result.stderr)
    for args in (("check",), ("check", "--repair")):
        result = flows(db, *args)
        assert result.returncode == 1, (args, result.stdout)
        assert f"stream_corrupt: {stream}" in result.stdout and named in result.stdout, result.stdout
        assert "clean" not in result.stdout, result.stdout
    assert stream.read_bytes() == before  # nothing cut: the intact records after the damage stay
    assert not (tmp_path / "flows-quarantine").exists()
