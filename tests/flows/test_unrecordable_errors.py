"""A failure is recorded whatever its text: a message with a lone surrogate (a file name decoded
with ``surrogateescape``), one over the journal's 16 MiB, or an exception whose ``__str__`` raises.
The body's failure marks the root failed with its code and message; a step's failed attempt is
recorded, so its retries and its final ``StepFailed`` hold, now and on every resume; the runtime's
own messages (a path quoting a bad key) are recorded too. The message kept is escaped and bounded
(``journal.MESSAGE_MAX``, with the SHA-256 of the whole)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

import flows
import journal
from journal import RunState
from tests.flows.helpers import flows as flows_cli

NAME = b"report-\xff.txt".decode("utf-8", "surrogateescape")  # as os.listdir gives it
HUGE = "x" * 17_000_000  # over the 16 MiB a journal record holds


class Unprintable(Exception):
    """An exception whose ``__str__`` reads an attribute only some code paths set."""

    def __str__(self) -> str:
        return self.detail  # type: ignore[attr-defined,no-any-return]


def _journal(db: Path) -> journal.FileJournal:
    return journal.FileJournal(db.parent / "flows-journal")


def _failed_events(db: Path, run_id: str) -> list[dict[str, Any]]:
    return [dict(r.payload) for r in _journal(db).read(run_id, "run") if r.payload.get("event") == "failed"]


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: ValueError(f"cannot read {NAME}"), "ValueError: cannot read report-\\udcff.txt"),
        (Unprintable, "Unprintable: <str() of the exception failed with AttributeError: "),
    ],
    ids=["surrogate", "unprintable"],
)
def test_a_body_error_the_journal_cannot_hold_as_is_fails_the_root_with_it(
    tmp_path: Path, make: Any, expected: str
) -> None:
    async def body(f: flows.FlowContext) -> None:
        raise make()

    db = tmp_path / "m.db"
    result = flows.run(flows.flow(name="bad-text")(body), db=db)
    assert result.state is RunState.FAILED
    info = _journal(db).run(result.run_id)
    assert info.state is RunState.FAILED
    assert info.error is not None
    assert info.error["code"] == "flow_failed"
    assert info.error["message"].startswith(expected)
    (event,) = _failed_events(db, result.run_id)
    assert event["error"]["message"] == info.error["message"]


def test_a_body_error_over_the_record_limit_is_recorded_cut_with_the_digest_of_the_whole(
    tmp_path: Path,
) -> None:
    async def body(f: flows.FlowContext) -> None:
        raise ValueError(HUGE)

    db = tmp_path / "m.db"
    result = flows.run(flows.flow(name="huge")(body), db=db)
    assert result.state is RunState.FAILED
    info = _journal(db).run(result.run_id)
    assert info.state is RunState.FAILED and info.error is not None
    message = info.error["message"]
    assert len(message) <= journal.MESSAGE_MAX
    whole = f"ValueError: {HUGE}"
    digest = hashlib.sha256(whole.encode()).hexdigest()
    assert message.startswith("ValueError: xxx") and message.endswith("xxx")
    assert f" of {len(whole):,} characters cut here; sha256 of the whole: {digest}]" in message
    assert len(_failed_events(db, result.run_id)) == 1


def test_the_command_line_names_the_run_and_the_body_error_never_a_payload_or_internal_error(
    tmp_path: Path,
) -> None:
    src = tmp_path / "flow.py"
    src.write_text(
        "import flows\n"
        "class ApiError(Exception):\n"
        "    def __str__(self):\n"
        "        return self.detail\n"
        "@flows.flow(scope='s')\n"
        "async def body(f):\n"
        "    raise ApiError()\n"
    )
    db = tmp_path / "m.db"
    done = flows_cli(db, "run", str(src))
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("flows: error[flow_failed]: ApiError: <str() of the exception failed"), last
    (info,) = _journal(db).runs()
    assert last.endswith(f"(root run {info.run_id})")
    assert info.state is RunState.FAILED


STEP_FLOW = """\
import flows

class Unprintable(Exception):
    def __str__(self):
        return self.detail

def call(counter, how):
    with open(counter, "a") as fh:
        fh.write("call\\n")
    if how == "surrogate":
        raise ValueError("cannot parse " + b"report-\\xff.txt".decode("utf-8", "surrogateescape"))
    if how == "huge":
        raise ValueError("x" * 17_000_000)
    raise Unprintable()

@flows.flow(name="steps", scope="s")
async def body(f):
    await f.step("call", call, f.input["counter"], f.input["how"], retries=2, backoff=0)
"""


@pytest.mark.parametrize("how", ["surrogate", "huge", "unprintable"])
def test_a_step_error_the_journal_cannot_hold_as_is_is_recorded_retried_and_final(
    tmp_path: Path, how: str
) -> None:
    src = tmp_path / "flow.py"
    src.write_text(STEP_FLOW)
    counter = tmp_path / "calls"
    db = tmp_path / "m.db"
    result = flows.run(src, db=db, input={"counter": str(counter), "how": how})
    assert isinstance(result.error, flows.StepFailed), result.error
    assert not result.error.replayed
    assert counter.read_text().count("call") == 3  # one attempt and two retries
    records = _journal(db).read(result.run_id, flows.STEPS_STREAM)
    assert [r.key for r in records] == ["call#1~1", "call#1~2", "call#1"]
    message = records[-1].payload["error"]["message"]
    assert records[-1].payload["error"]["code"] == "flow_failed"
    assert len(message) <= journal.MESSAGE_MAX
    assert result.error.error_message == message
    if how == "surrogate":
        assert message == "ValueError: cannot parse report-\\udcff.txt"
    elif how == "unprintable":
        assert message.startswith("Unprintable: <str() of the exception failed with AttributeError")
    info = _journal(db).run(result.run_id)
    assert info.state is RunState.FAILED and info.error is not None
    assert info.error["code"] == "step_failed"
    again = flows.resume(result.run_id, db=db)  # the recorded failure, without calling fn again
    assert isinstance(again.error, flows.StepFailed) and again.error.replayed
    assert again.error.error_message == message
    assert counter.read_text().count("call") == 3


def test_the_runtimes_own_message_quoting_a_bad_key_is_recorded(tmp_path: Path) -> None:
    async def body(f: flows.FlowContext) -> Any:
        if f.input == "step":
            return await f.step("sizes", lambda: {NAME: 1024})
        return {NAME: 1024}

    for where, code in (("step", "step_result_invalid"), ("output", "flow_output_invalid")):
        db = tmp_path / where / "m.db"
        result = flows.run(flows.flow(name="sizes")(body), db=db, input=where)
        assert result.error is not None and getattr(result.error, "code", None) == code
        assert "$.report-\\udcff.txt" in str(result.error)  # escaped in the error itself too
        info = _journal(db).run(result.run_id)
        assert info.state is RunState.FAILED and info.error is not None
        assert info.error["code"] == code
        assert "$.report-\\udcff.txt" in info.error["message"]


def test_an_error_record_is_always_recordable() -> None:
    class Odd(Exception):
        code = "not a\ncode"

    assert journal.error_record(Odd("x"), "flow_failed") == {"code": "flow_failed", "message": "Odd: x"}
    assert journal.error_record(flows.FlowUsage(f"bad {NAME}"), "flow_failed") == {
        "code": "flow_usage",
        "message": "bad report-\\udcff.txt",
    }
    text = journal.recordable_text("é" * 100_000)
    assert len(text) <= journal.MESSAGE_MAX
    journal.payload_json({"m": text})  # stores
