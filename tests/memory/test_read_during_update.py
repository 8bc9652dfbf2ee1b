"""A read made while another process updates a memory answers with the old version or the new one,
never with neither.

An update retires the version it replaces, then renames the new one into place. A read lists the
scope's folder, then reads its retired files: one that listed the folder just before the rename and
read the retired files just after the retirement found the old version retired and no new one, and
answered with nothing, though the memory was live at every instant. (A LangGraph store's delete
that looked then saw no item and returned, and the item, refreshed by another process meanwhile,
stayed.) Such a read now starts again and finds the new version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import memory

OLD = {"text": "the ferry leaves at seven", "tags": ["ferry"], "metadata": {"item": "ferry"}}
NEW = {
    "text": "the ferry leaves at eight from the north pier",
    "tags": ["ferry"],
    "metadata": {"item": "ferry"},
}


@pytest.mark.parametrize("read", ["recall", "recall by metadata", "recall of every scope", "why", "current"])
def test_a_read_between_an_updates_retirement_and_its_rename_finds_the_new_version(
    tmp_path: Path, read: str
) -> None:
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as writer, writer.session(scope="harbour") as s:
        old = s.learn(OLD)
    with memory.MemoryStore(db) as reader, memory.MemoryStore(db) as writer:
        assert [e.key for e in reader.recall(scope="harbour")] == [old.key]  # warm: listed, indexed
        disk = reader._search._disk
        real = disk.retired
        updated: list[Any] = []

        def retired_after_the_update(directory: Path) -> Any:
            # the listing is taken; now another process's update runs to its end (retire, rename,
            # remove the old file) before this read looks at the retired files
            if not updated:
                with writer.session(scope="harbour") as w:
                    updated.append(w.update(old.memory_id, NEW))
            return real(directory)

        disk.retired = retired_after_the_update  # type: ignore[method-assign]
        if read == "recall":
            found = [e.text for e in reader.recall(scope="harbour")]
        elif read == "recall by metadata":
            found = [e.text for e in reader.recall(scope="harbour", meta={"item": "ferry"}, limit=None)]
        elif read == "recall of every scope":
            found = [e.text for e in reader.recall(limit=None)]
        elif read == "why":
            found = [x.finding.text for x in reader.why("ferry leaves", scope="harbour")]
        else:
            current = reader.current(old.memory_id)
            found = [] if current is None else [current.text]
        assert updated, "the update did not run inside the read"
        assert found == [NEW["text"]]
