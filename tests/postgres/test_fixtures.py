"""Without a reachable server, PostgreSQL tests skip locally and fail in CI, saying how to start it."""

from __future__ import annotations

import re

import pytest

from tests.pg_fixtures import admin_connection

_HINT = re.escape("pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start")


def test_an_unreachable_server_skips_locally_saying_how_to_start_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWS_TEST_PG", "postgresql://postgres@127.0.0.1:1/test")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=rf"127\.0\.0\.1:1/test is unreachable .*{_HINT}"):
        admin_connection()


def test_an_unreachable_server_fails_in_ci_saying_how_to_start_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWS_TEST_PG", "postgresql://postgres@127.0.0.1:1/test")
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match=rf"127\.0\.0\.1:1/test is unreachable .*{_HINT}"):
        admin_connection()
