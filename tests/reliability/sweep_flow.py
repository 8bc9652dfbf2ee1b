"""The flow the failpoint sweep and the kill soak run: it learns ``$RELIABILITY_FINDINGS`` findings.

Outside the harness its hooks do nothing. Inside it, the environment says:

* ``RELIABILITY_FAILPOINTS``: a failpoint plan armed when the body starts (so ``begin`` and
  ``acquire`` run clean and the faults land in the learns);
* ``RELIABILITY_ACKS``: a file to which each acknowledged learn appends its finding's number;
* ``RELIABILITY_STOP_AFTER``: fail the body after that many learns (a resumable first attempt).
"""

from __future__ import annotations

import os

import flows
from staging import _failpoints


def arm() -> None:
    """Arm ``$RELIABILITY_FAILPOINTS`` in this process, if set."""
    plan = os.environ.get("RELIABILITY_FAILPOINTS")
    if plan:
        os.environ["FLOWS_FAILPOINTS"] = plan
        _failpoints.reset()


def ack(what: str) -> None:
    """Record that ``what`` was acknowledged (one unbuffered append: it survives a SIGKILL)."""
    path = os.environ.get("RELIABILITY_ACKS")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{what}\n".encode())
        finally:
            os.close(fd)


def text(n: int) -> str:
    """The text of finding number ``n``."""
    return f"reliability finding number {n}"


@flows.flow(name="sweep", scope="sweep")
async def body(f: flows.FlowContext) -> None:
    """Learn the findings one by one, acknowledging each as its learn returns."""
    arm()
    stop = int(os.environ.get("RELIABILITY_STOP_AFTER", "-1"))
    for n in range(int(os.environ.get("RELIABILITY_FINDINGS", "3"))):
        await f.memory.learn({"text": text(n), "tags": ["sweep"]})
        ack(f"{f.run_id} {n}")
        if n + 1 == stop:
            raise RuntimeError("the first attempt stops here, to be resumed")
