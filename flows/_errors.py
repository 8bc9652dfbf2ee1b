"""Errors of the flows runtime.

The tree::

    FlowsError              base (a staging.CodedError): run_id, path
    ├── FlowLoadFailed      flow_load_failed: the flow file cannot be imported, or holds no single flow
    ├── UnawaitedStep       unawaited_step: the body returned with a learn it never awaited
    └── FlowFailed          flow_failed: the body raised an exception that has no code of its own

Memory and journal errors keep their own codes when they fail a run.
"""

from __future__ import annotations

from pathlib import Path

from staging import CodedError


class FlowsError(CodedError):
    """Base of the runtime's errors; ``code`` is stable and listed in docs/SURFACE.md."""

    code = "flows_error"

    def __init__(self, message: str, *, run_id: str | None = None, path: str | Path | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.path = None if path is None else Path(path)


class FlowLoadFailed(FlowsError):
    """The flow file could not be loaded, or it does not define exactly one flow."""

    code = "flow_load_failed"


class UnawaitedStep(FlowsError):
    """The body finished while a learn it started was never awaited (pending or settled)."""

    code = "unawaited_step"

    def __init__(self, message: str, *, steps: tuple[str, ...], run_id: str | None = None) -> None:
        super().__init__(message, run_id=run_id)
        self.steps = steps


class FlowFailed(FlowsError):
    """The body raised an exception without a code; ``__cause__`` is that exception."""

    code = "flow_failed"
