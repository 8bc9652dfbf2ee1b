"""Values of subclasses of the JSON types (``numpy.float64`` is a float) as step results, a flow's
input and its output: a float subclass is its plain float; a container that hides a part from the
check is refused with the coded error, never a bare ``TypeError`` that leaves the root running."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest

import flows
import journal
import memory
from journal import RunState


class Score(float):
    """A float of a subclass, as ``numpy.float64`` is."""


class Hiding(dict):  # type: ignore[type-arg]
    """A dict whose ``items`` hides what it holds."""

    def items(self) -> Any:
        return []


def test_a_float_subclass_is_journaled_as_its_plain_float(tmp_path: Path) -> None:
    seen: list[Any] = []

    async def body(f: flows.FlowContext) -> Any:
        seen.append(await f.step("score", lambda: {"score": Score(0.25)}))
        seen.append(f.input)
        return [Score(1.5)]

    db = tmp_path / "h.db"
    result = flows.run(flows.flow(name="scores")(body), db=db, input={"w": Score(2.0)})
    assert result.ok, result.error
    assert result.output == [1.5] and type(result.output[0]) is float
    assert seen == [{"score": 0.25}, {"w": 2.0}]
    assert type(seen[0]["score"]) is float
    jr = journal.FileJournal(db.parent / "flows-journal")
    (rec,) = jr.read(result.run_id, flows.STEPS_STREAM)
    assert rec.payload["result"] == {"score": 0.25}


def test_a_container_hiding_a_value_is_refused_with_its_code_and_the_root_is_failed(tmp_path: Path) -> None:
    caught: list[BaseException] = []

    async def body(f: flows.FlowContext) -> Any:
        try:
            await f.step("hidden", lambda: Hiding(x=object()))
        except flows.StepResultInvalid as exc:
            caught.append(exc)
        return Hiding(y=object())

    db = tmp_path / "h.db"
    store = memory.MemoryStore(db)
    try:  # a store the caller keeps open: a root left running would hold its lease until exit
        result = asyncio.run(flows.arun(flows.flow(name="hiding")(body), store=store))
        assert isinstance(result.error, flows.FlowOutputInvalid), result.error
        assert result.state is RunState.FAILED
        assert store.open_journal().run(result.run_id).state is RunState.FAILED
        (exc,) = caught
        assert exc.code == "step_result_invalid"
        assert store.open_journal().read(result.run_id, flows.STEPS_STREAM) == []
        with pytest.raises(flows.FlowInputInvalid):
            flows.run(flows.flow(name="hiding")(body), db=db, input=Hiding(z=object()))
    finally:
        store.close()


class Visible(dict):  # type: ignore[type-arg]
    """A dict whose ``items`` lists only the keys meant to be shown (a filtered view)."""

    def items(self) -> Any:
        return iter([(k, v) for k, v in dict.items(self) if not k.startswith("_")])


class Head(list):  # type: ignore[type-arg]
    """A list whose iteration shows only its first item."""

    def __iter__(self) -> Any:
        return iter(list.__getitem__(self, slice(0, 1)))


def test_a_hidden_nan_infinity_or_wide_integer_is_refused_naming_it_never_written_as_null(
    tmp_path: Path,
) -> None:
    """orjson reads a container's own storage, not the methods a subclass overrides: a NaN it hides
    from the check was written as null (the value silently changed), a hidden integer past 64 bits
    was the journal's payload error. The check reads what orjson reads."""
    caught: dict[str, str] = {}
    cases = {
        "nan": (lambda: Visible(ok=1, _raw=math.nan), "$._raw"),
        "inf": (lambda: Head([1.0, math.inf]), "$[1]"),
        "wide": (lambda: Visible(ok=1, _id=2**63), "$._id"),
    }

    async def body(f: flows.FlowContext) -> Any:
        for name, (make, _) in cases.items():
            try:
                await f.step(name, make)
            except flows.StepResultInvalid as exc:
                caught[name] = str(exc)
        return Visible(ok=1, _raw=-math.inf)

    db = tmp_path / "h.db"
    result = flows.run(flows.flow(name="hidden")(body), db=db)
    assert isinstance(result.error, flows.FlowOutputInvalid), result.error
    assert "$._raw" in str(result.error)
    assert sorted(caught) == ["inf", "nan", "wide"]
    for name, (_, path) in cases.items():
        assert f"returned a value that cannot be journaled: {path}: " in caught[name], caught[name]
    jr = journal.FileJournal(db.parent / "flows-journal")
    assert jr.read(result.run_id, flows.STEPS_STREAM) == []
    assert jr.run(result.run_id).state is RunState.FAILED
