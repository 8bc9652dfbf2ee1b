"""Named failpoints in the durable write paths, for fault-injection tests only.

A failpoint does nothing unless ``$FLOWS_FAILPOINTS`` names it. The variable is a comma-separated
list of ``name=action`` where action is ``kill`` (SIGKILL this process), an errno name (``ENOSPC``,
``EIO``, ``EACCES``, ``EROFS``: raise that ``OSError``), optionally followed by ``:once`` (fire only
the first time in this process; otherwise every time), or ``sleep<ms>`` (pause, to widen a race).
The variable is read once per process; tests set it in the child's environment.
"""

from __future__ import annotations

import errno as errno_mod
import os
import signal
import time

_ENV = "FLOWS_FAILPOINTS"
_plan: dict[str, tuple[str, bool]] | None = None
_fired: set[str] = set()


def _load() -> dict[str, tuple[str, bool]]:
    plan: dict[str, tuple[str, bool]] = {}
    for item in os.environ.get(_ENV, "").split(","):
        name, sep, action = item.strip().partition("=")
        if not sep:
            continue
        action, _, once = action.partition(":")
        plan[name.strip()] = (action.strip(), once.strip() == "once")
    return plan


def hit(name: str) -> None:
    """Fire failpoint ``name`` if the environment enables it; a no-op otherwise.

    Raises:
        OSError: with the configured errno, when the failpoint's action is an errno name.
    """
    global _plan  # noqa: PLW0603 - parsed once per process, on first use
    if _plan is None:
        _plan = _load()
    if not _plan or name not in _plan:
        return
    action, once = _plan[name]
    if once and name in _fired:
        return
    _fired.add(name)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action.startswith("sleep"):
        time.sleep(int(action[5:] or "100") / 1000)
    else:
        code = getattr(errno_mod, action)
        raise OSError(code, f"{os.strerror(code)} (failpoint {name})")


def reset() -> None:
    """Forget the parsed plan and what has fired (tests that change the variable in-process)."""
    global _plan  # noqa: PLW0603
    _plan = None
    _fired.clear()
