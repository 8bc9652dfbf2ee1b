"""Resume: republishing N committed findings after their learned files are deleted.

A flow learns N findings (one flow, every learn started before any is awaited) and then fails, so
its root run is failed with N commits in its ``memory-learn`` stream. The learned files are deleted,
then republished two ways, each timed:

* ``materialize``: ``MemoryStore.materialize()`` (what ``sync`` does first): read the journal, publish
  each commit that neither the DB nor the disk holds (one thread);
* ``flow_resume``: ``flows.resume(run_id)``: the body runs again, every learn finds its commit and
  publishes it without a second record (the store's 8 executor threads).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TextIO

import flows
import memory
from benchmarks._common import Sheet, Sizes, say

_FLOW = """
import os
import flows

@flows.flow(name="bench-resume", scope="bench-resume")
async def body(f):
    n = int(os.environ["BENCH_RESUME_N"])
    steps = [f.memory.learn({"text": f"resume finding {i}", "tags": ["resume"]}) for i in range(n)]
    for step in steps:
        await step
    if not os.environ.get("BENCH_RESUME_OK"):
        raise RuntimeError("the first run fails after its learns, leaving a resumable root")
"""


def _delete_files(db: Path) -> int:
    directory = memory.learned_dir(db, "bench-resume")
    names = [n for n in os.listdir(directory) if n.endswith(".json")]
    for name in names:
        os.unlink(directory / name)
    # The deletions are the setup, not the work measured: commit them (and, on a disk mounted with
    # `discard`, the trims of the freed blocks) before the clock starts, so the first sync of the
    # republish does not pay for them.
    os.sync()
    return len(names)


def bench_resume(base: Path, sizes: Sizes, sheet: Sheet, out: TextIO | None) -> None:
    """Put ``resume.materialize_per_s`` and ``resume.flow_resume_per_s`` on ``sheet``."""
    n = sizes.resume_n
    source = base / "resume" / "resume_flow.py"
    source.parent.mkdir(parents=True)
    source.write_text(_FLOW)
    db = base / "resume" / "history.db"
    os.environ["BENCH_RESUME_N"] = str(n)
    os.environ.pop("BENCH_RESUME_OK", None)
    try:
        t0 = time.perf_counter()
        failed = flows.run(source, db=db)
        learned = time.perf_counter() - t0
        assert not failed.ok, "the first run was meant to fail"
        say(out, f"resume: {n:,} findings learned in one flow in {learned:.1f} s ({n / learned:,.0f}/s)")
        sheet.put(
            "resume.first_run_learn_per_s",
            n / learned,
            "the first run: N learns in one flow (8 threads), for reference",
        )

        assert _delete_files(db) == n
        # recover=False: the open-time check would republish the failed run's files itself, and
        # materialize is what this figure measures
        with memory.MemoryStore(db, recover=False) as store:
            t0 = time.perf_counter()
            published = store.materialize()
            took = time.perf_counter() - t0
        assert published == n, f"materialize published {published}, not {n}"
        sheet.put(
            "resume.materialize_per_s", n / took, "MemoryStore.materialize() after the files were deleted"
        )

        assert _delete_files(db) == n
        os.environ["BENCH_RESUME_OK"] = "1"
        t0 = time.perf_counter()
        result = flows.resume(failed.run_id, db=db)
        took = time.perf_counter() - t0
        assert result.ok, f"the resume failed: {result.error}"
        assert len(os.listdir(memory.learned_dir(db, "bench-resume"))) == n
        sheet.put(
            "resume.flow_resume_per_s",
            n / took,
            "flows.resume of the failed root: the body re-learns, commits found",
        )
        sheet.meta["resume_n"] = n
    finally:
        os.environ.pop("BENCH_RESUME_N", None)
        os.environ.pop("BENCH_RESUME_OK", None)
