"""Shared fixtures: journal backends for the conformance suite, subprocess helpers."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import journal

ROOT = Path(__file__).resolve().parent.parent

# PostgreSQL fixtures (``postgres_dsn``) live in their own module, owned with the backend.
pytest_plugins = ["tests.pg_fixtures"]


def run_python(
    code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code`` in a fresh interpreter with the repo importable."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        check=False,
    )


def _backends() -> list[str]:
    # Every backend whose driver is installed joins the conformance suite.
    has_pg = importlib.util.find_spec("journal.postgres") is not None
    return ["file", "postgres"] if has_pg else ["file"]


@pytest.fixture(params=_backends())
def backend_name(request: pytest.FixtureRequest) -> str:
    """The name of the journal backend under test."""
    return str(request.param)


@pytest.fixture
def journal_location(backend_name: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, empty journal location for ``backend_name`` (a directory, or a PostgreSQL DSN)."""
    if backend_name == "file":
        yield str(tmp_path / "journal")
        return
    yield str(request.getfixturevalue("postgres_dsn"))


@pytest.fixture
def jr(journal_location: str) -> Iterator[journal.JournalBackend]:
    """An open journal backend of each kind."""
    backend = journal.open_journal(journal_location)
    yield backend
    backend.close()
