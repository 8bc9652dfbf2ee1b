"""Damage below the watermark of a stream, through the CLI: every command fails closed.

A flow learns three findings and fails. Then line 2 of its ``memory-learn`` stream is deleted, or
its last (acknowledged) line is zeroed in place. ``flows journal``, ``flows check``, ``flows check
--repair`` and ``flows resume`` each exit 1 with a diagnostic naming the stream file and the line;
none cuts the intact records after the damage, none says the store is clean, and no learned file
is quarantined for want of a record the journal cannot read. A flow's ``steps`` or ``run`` stream
file emptied or removed under its mark is damage alike to ``flows check`` and ``flows journal``.
"""

from __future__ import annotations

import json
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


STEP_FLOW = """import flows


def work(x):
    return {"x": x}


@flows.flow(scope="adv")
async def body(f):
    return await f.step("work", work, 1)
"""


@pytest.mark.parametrize("how", ["emptied", "removed"])
@pytest.mark.parametrize("name", ["steps", "run"])
def test_a_stream_file_emptied_or_removed_under_its_mark_is_damage_to_check_and_journal(
    tmp_path: Path, how: str, name: str
) -> None:
    """A stream file cut to 0 bytes, or deleted, while its durable mark counts acknowledged bytes
    lost them: ``flows check`` reports ``stream_corrupt`` naming run, stream and file, and ``flows
    journal RUN`` fails closed on it, as ``flows show`` does; neither passes over the stream."""
    db = tmp_path / "history.db"
    (tmp_path / "step.py").write_text(STEP_FLOW)
    ran = flows(db, "run", str(tmp_path / "step.py"))
    assert ran.returncode == 0, ran.stderr
    (run_dir,) = (tmp_path / "flows-journal" / "runs").iterdir()
    stream = run_dir / "streams" / f"{name}.jsonl"
    assert stream.stat().st_size > 0
    if how == "emptied":
        stream.write_bytes(b"")
    else:
        stream.unlink()
    checked = flows(db, "--json", "check")
    assert checked.returncode == 1, checked.stdout
    (problem,) = json.loads(checked.stdout)["problems"]
    assert (problem["kind"], problem["runId"], problem["stream"], problem["path"]) == (
        "stream_corrupt",
        run_dir.name,
        name,
        str(stream),
    )
    for args in (("journal", run_dir.name), ("show", run_dir.name)):
        result = flows(db, *args)
        assert result.returncode == 1, (args, result.stdout)
        assert error_code(result) == "journal_corrupt", args
        assert f"{stream} line 1 is missing" in result.stderr, (args, result.stderr)
