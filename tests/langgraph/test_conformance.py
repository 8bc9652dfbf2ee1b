"""LangGraph's own conformance suite for checkpointers, run against ``JournalSaver``.

The suite (PyPI ``langgraph-checkpoint-conformance``) is used as a library: its ``validate`` runs
every capability's tests against a registered saver factory and returns a report. Each capability
gets a fresh saver on the same journal, as a deployment would open one per process.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import (
    ALL_CAPABILITIES,
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
)

from flows.langgraph import JournalSaver


def _validate(location: str, name: str):  # type: ignore[no-untyped-def]
    @checkpointer_test(name=name)
    async def factory() -> AsyncIterator[JournalSaver]:
        saver = JournalSaver(journal=location)
        try:
            yield saver
        finally:
            saver.close()

    return asyncio.run(validate(factory))


def test_langgraphs_conformance_suite_passes_every_capability(
    journal_location: str, backend_name: str
) -> None:
    report = _validate(journal_location, f"JournalSaver[{backend_name}]")

    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert failures == {}
    detected = {name for name, r in report.results.items() if r.detected}
    assert detected == {c.value for c in ALL_CAPABILITIES}
    for cap in BASE_CAPABILITIES | EXTENDED_CAPABILITIES:
        result = report.results[cap.value]
        assert result.passed is True, cap.value
        assert result.tests_passed > 0 and result.tests_failed == 0, cap.value
    assert report.passed_all_base()
    assert report.conformance_level() == "FULL"
