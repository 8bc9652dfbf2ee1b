"""The embedded demo: a root run, a stream, a child process killed mid-append, the tail recovered."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import journal

_CHILD = """
import os, signal, sys, journal
jr = journal.FileJournal(sys.argv[1])
lease = journal.Lease(sys.argv[2], int(sys.argv[3]))
log = jr._stream(lease.run_id, "notes").log
line = journal.RecordCodec(lease.run_id, "notes").encode(
    journal.Record(lease.run_id, "notes", 4, "torn", None, 0, {"text": "never acknowledged"}))
fd = os.open(log.path, os.O_WRONLY | os.O_APPEND)
os.write(fd, line[: len(line) // 2])   # half a line reaches the disk...
os.kill(os.getpid(), signal.SIGKILL)    # ...and the writer dies before the append returns
"""


def run_demo() -> int:
    """Print a short walk through crash recovery in a temporary journal; returns 0."""
    with tempfile.TemporaryDirectory(prefix="flows-demo-") as tmp:
        root = Path(tmp) / "flows-journal"
        jr = journal.FileJournal(root)
        info, lease = jr.begin("demo", "demo", {})
        print(f"began root run {info.run_id} in {root}")
        for text in ("the sky is blue", "water is wet", "fire is hot"):
            rec = jr.append(lease, "notes", {"text": text}, key=text)
            print(f"  appended #{rec.seq} {text!r} (record {rec.id})")
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, str(root), info.run_id, str(lease.epoch)],
            env={**os.environ},
            check=False,
        )
        path = jr.stream_path(info.run_id, "notes")
        torn = len(path.read_bytes().rsplit(b"\n", 1)[-1])
        print(
            f"a child process was killed mid-append (signal {-child.returncode}); "
            f"the stream file now ends with {torn} torn bytes"
        )
        rec = jr.append(lease, "notes", {"text": "ice is cold"}, key="ice is cold")
        print(f"the next append cut the torn tail and wrote #{rec.seq} on its own line:")
        for r in jr.read(info.run_id, "notes"):
            print(f"  #{r.seq} {r.payload['text']}")
        jr.finish(lease, journal.RunState.DONE)
        print(f"root run {info.run_id} is {jr.run(info.run_id).state}")
        jr.close()
        assert child.returncode == -signal.SIGKILL
    return 0
