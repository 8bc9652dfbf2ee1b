"""Ctrl-C (SIGINT) at the command line: run ``flows`` or ``sail`` in a fresh process whose SIGINT
comes at a known point (a stub module on ``PYTHONPATH`` that interrupts its own process as it is
imported, or a ``sigint`` failpoint), or read a running one's output up to the line to interrupt it
after; then judge what it said (one line, status 130, never a traceback)."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]

SIGINT_ON_IMPORT = "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\nimport time\ntime.sleep(30)\n"
"""A module whose import interrupts its own process (and would then wait, were it not stopped)."""


def sigint_stubs(folder: Path, *modules: str) -> Path:
    """``folder`` (made) holding a stub of each module in ``modules`` that interrupts on import."""
    folder.mkdir()
    for name in modules:
        (folder / f"{name}.py").write_text(SIGINT_ON_IMPORT)
    return folder


def cli_env(
    strip: tuple[str, ...] = ("FLOWS_", "_ARGCOMPLETE"), stubs: Path | None = None, **extra: str
) -> dict[str, str]:
    """This environment without the variables whose names start with ``strip`` (the test run's own
    settings), the repository importable (after ``stubs``, when given), and ``extra`` set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(strip)}
    path = os.pathsep.join([*([str(stubs)] if stubs else []), str(ROOT)])
    return {**env, "PYTHONPATH": path, **extra}


def run_cli(
    prog: str,
    *args: str,
    stubs: Path | None = None,
    strip: tuple[str, ...] = ("FLOWS_", "_ARGCOMPLETE"),
    timeout: float = 60,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """``python -m prog args`` to its end, its output captured (environment as :func:`cli_env`)."""
    return subprocess.run(
        [sys.executable, "-m", prog, *args],
        capture_output=True,
        text=True,
        env=cli_env(strip, stubs, **env),
        timeout=timeout,
        check=False,
    )


def one_line_130(result: subprocess.CompletedProcess[str], prog: str, *, as_json: bool) -> dict[str, object]:
    """Assert the command stopped as a Ctrl-C stops it: status 130, no traceback, one line on stderr
    (the JSON object of code ``interrupted``, or ``PROG: error[interrupted]: interrupted (Ctrl-C)…``).
    Returns the object, or ``{"message": line}``."""
    assert result.returncode == 130, result.stderr
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    if as_json:
        shown: dict[str, object] = orjson.loads(lines[0])
        assert shown["code"] == "interrupted", shown
        return shown
    assert lines[0].startswith(f"{prog}: error[interrupted]: interrupted (Ctrl-C)"), lines
    return {"message": lines[0]}


def read_until(
    proc: subprocess.Popen[bytes], text: bytes, seen: bytes = b"", *, stream: int | None = None
) -> bytes:
    """What ``stream`` (the process's stderr unless given) says after ``seen`` until ``text`` shows
    up, the process running all along, for at most a generous minute."""
    if stream is None:
        assert proc.stderr is not None
        stream = proc.stderr.fileno()
    deadline = time.monotonic() + 60
    with selectors.DefaultSelector() as selector:  # not select(): a descriptor past 1023 is fine here
        selector.register(stream, selectors.EVENT_READ)
        while text not in seen:
            assert proc.poll() is None, seen
            if time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"{text!r} never came; read so far: {seen!r}")
            if selector.select(1.0):
                chunk = os.read(stream, 4096)
                assert chunk, seen
                seen += chunk
    return seen


def finish(proc: subprocess.Popen[bytes], seen: bytes = b"") -> tuple[int, list[str], bytes]:
    """Wait (a minute at most) for an interrupted process to stop: its status, its stderr's lines
    (after ``seen``, which it prefixes) with no traceback among them, and its stdout."""
    assert proc.stderr is not None and proc.stdout is not None
    try:
        status = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:  # it did not stop: a failure, not a test left hanging
        proc.kill()
        proc.wait()
        raise AssertionError(f"still running a minute after its Ctrl-C: {proc.args!r}") from None
    err = (seen + proc.stderr.read()).decode()
    assert "Traceback" not in err and "Exception ignored" not in err, err
    return status, err.splitlines(), proc.stdout.read()
