"""Named failpoints in the durable write paths, for fault-injection tests only.

A failpoint does nothing unless ``$FLOWS_FAILPOINTS`` names it. The variable is a comma-separated
list of ``name=action[:mode]``. The action is ``kill`` (SIGKILL this process), ``sigint`` (SIGINT this
process: a Ctrl-C at exactly that point), an errno name
(``ENOSPC``, ``EIO``, ``EACCES``, ``EROFS``: raise that ``OSError``) or ``sleep<ms>`` (pause, to widen
a race). The mode says when it fires: always (no mode), ``once`` (the first time the point is
reached in this process), or ``nth<N>`` (only the N-th time, counting from 1: to fail one caller
among several that reach the point). A name may be given several times; its actions then run in the
order given, each by its own mode (``p=sleep20,p=EIO:nth3``: every pass waits, the third fails).
The variable is read once per process; tests set it in the child's environment, or call ``reset``.
"""

from __future__ import annotations

import errno as errno_mod
import os
import signal
import threading
import time

_ENV = "FLOWS_FAILPOINTS"
_plan: dict[str, list[tuple[str, str]]] | None = None
_hits: dict[str, int] = {}
_fired: set[str] = set()  # names reached while armed (the reliability harness reads it)
_once_done: set[tuple[str, int]] = set()
_mutex = threading.Lock()


def _load() -> dict[str, list[tuple[str, str]]]:
    plan: dict[str, list[tuple[str, str]]] = {}
    for item in os.environ.get(_ENV, "").split(","):
        name, sep, action = item.strip().partition("=")
        if not sep:
            continue
        action, _, mode = action.partition(":")
        plan.setdefault(name.strip(), []).append((action.strip(), mode.strip()))
    return plan


def _due(name: str, index: int, mode: str, hit_no: int) -> bool:
    """Whether the ``index``-th action of ``name``, with ``mode``, fires on pass ``hit_no``."""
    if mode == "once":
        if (name, index) in _once_done:
            return False
        _once_done.add((name, index))
        return True
    if mode.startswith("nth"):
        return hit_no == int(mode[3:] or "1")
    return True


def hit(name: str) -> None:
    """Fire failpoint ``name`` if the environment enables it; a no-op otherwise.

    Raises:
        OSError: with the configured errno, when a due action is an errno name.
    """
    global _plan  # noqa: PLW0603 - parsed once per process, on first use
    if _plan is None:
        _plan = _load()
    if not _plan or name not in _plan:
        return
    with _mutex:  # threads of one process count their passes exactly
        hit_no = _hits[name] = _hits.get(name, 0) + 1
        _fired.add(name)
        due = [action for i, (action, mode) in enumerate(_plan[name]) if _due(name, i, mode, hit_no)]
    for action in due:
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "sigint":
            os.kill(os.getpid(), signal.SIGINT)
        elif action.startswith("sleep"):
            time.sleep(int(action[5:] or "100") / 1000)
        else:
            code = getattr(errno_mod, action)
            raise OSError(code, f"{os.strerror(code)} (failpoint {name})")


def reset() -> None:
    """Forget the parsed plan and what has fired (tests that change the variable in-process)."""
    global _plan  # noqa: PLW0603
    with _mutex:
        _plan = None
        _fired.clear()
        _once_done.clear()
        _hits.clear()
