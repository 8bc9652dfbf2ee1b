"""Failpoints for tests: armed in this process for a block, or in a child process (which a ``kill``
action SIGKILLs at the point: its return code is then ``-9``).

``$FLOWS_FAILPOINTS`` is read once per process, so arming in-process re-reads it at once, and
disarming re-reads it again.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from staging import _failpoints

ENV = "FLOWS_FAILPOINTS"
ROOT = Path(__file__).resolve().parents[2]


def arm(monkeypatch: pytest.MonkeyPatch, plan: str) -> None:
    """Arm ``plan`` (``name=ACTION[:mode][,...]``) in this process; an empty plan disarms every point."""
    monkeypatch.setenv(ENV, plan)
    _failpoints.reset()


def disarm(monkeypatch: pytest.MonkeyPatch) -> None:
    """No failpoint armed in this process from here on."""
    monkeypatch.delenv(ENV, raising=False)
    _failpoints.reset()


@contextlib.contextmanager
def armed(monkeypatch: pytest.MonkeyPatch, plan: str) -> Iterator[None]:
    """``$FLOWS_FAILPOINTS`` = ``plan`` for the block, re-read before and after."""
    arm(monkeypatch, plan)
    try:
        yield
    finally:
        disarm(monkeypatch)


def child_env(plan: str | None = None, drop: Iterable[str] = (), **extra: str) -> dict[str, str]:
    """A child's environment: this one with the repository importable, ``plan`` armed (when given),
    the variables named in ``drop`` removed and ``extra`` set."""
    env = {k: v for k, v in os.environ.items() if k not in set(drop)}
    env["PYTHONPATH"] = str(ROOT)
    if plan is not None:
        env[ENV] = plan
    env.update(extra)
    return env


def run_armed(
    plan: str,
    code: str,
    *args: str,
    timeout: float = 120,
    drop: Iterable[str] = (),
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -c code args`` in a fresh interpreter with ``plan`` armed, its output captured."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=child_env(plan, drop),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
