"""An erasure's rewrite of a file stream against crafted and racing on-disk state.

``rewrite_payloads`` must leave none of an erased payload anywhere in the stream: not in the
records it rewrites, and not in a torn tail a power loss left after them (stale bytes that copy an
earlier line).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from journal import FileJournal, JournalCorrupt, RunState

STREAM = "memory-learn"
SECRET = "zqx: the vault code is 4471"


def _failed_run(root: Path, texts: list[str]) -> tuple[FileJournal, str, Path]:
    jr = FileJournal(root)
    info, lease = jr.begin("f", "s", {})
    for i, text in enumerate(texts):
        jr.append(lease, STREAM, {"text": text}, key=f"k{i}")
    jr.finish(lease, RunState.FAILED, {"code": "x", "message": "stopped"})
    return jr, info.run_id, jr.stream_path(info.run_id, STREAM)


@pytest.mark.parametrize("held", [3, 12, len(SECRET) + 20])
def test_an_erasure_leaves_no_erased_bytes_in_a_torn_tail(tmp_path: Path, held: int) -> None:
    jr, run_id, path = _failed_run(tmp_path, ["first", SECRET, "third"])
    lines = path.read_bytes().splitlines(keepends=True)
    # A power loss left, past the watermark, stale bytes: part of a copy of the line to erase.
    stale = lines[1][: lines[1].index(SECRET.encode()) + held]
    assert SECRET.encode()[:3] in stale and stale != lines[1]
    with path.open("ab") as fh:
        fh.write(stale)
    assert [r.payload["text"] for r in jr.read(run_id, STREAM)] == ["first", SECRET, "third"]

    assert jr.rewrite_payloads(run_id, STREAM, {2: {"erased": "yes"}}, pad="pad") == 1

    data = path.read_bytes()
    assert SECRET.encode()[:3] not in data, "the erased text survives in the torn tail"
    again = FileJournal(tmp_path)
    got = [r.payload for r in again.read(run_id, STREAM)]
    assert got[0] == {"text": "first"} and got[2] == {"text": "third"}
    assert got[1]["erased"] == "yes" and set(got[1]) == {"erased", "pad"}


def test_an_erasure_still_refuses_damage_below_the_watermark(tmp_path: Path) -> None:
    jr, run_id, path = _failed_run(tmp_path, ["first", SECRET, "third"])
    data = bytearray(path.read_bytes())
    data[data.index(b"first")] ^= 1  # an acknowledged line, flipped in place
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupt) as exc:
        jr.rewrite_payloads(run_id, STREAM, {2: {"erased": "yes"}}, pad="pad")
    assert exc.value.code == "journal_corrupt" and exc.value.line == 1
    assert (exc.value.run_id, exc.value.stream) == (run_id, STREAM)
    assert path.read_bytes() == bytes(data)  # nothing rewritten
