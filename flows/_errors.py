"""Errors of the flows runtime.

The tree::

    FlowsError              base (a staging.CodedError): run_id, path
    ├── FlowLoadFailed      flow_load_failed: the flow file cannot be imported, or holds no single flow
    ├── UnawaitedStep       unawaited_step: the body returned with a learn or step it never awaited
    ├── FlowFailed          flow_failed: the body raised an exception that has no code of its own
    ├── FlowAborted         flow_aborted: the body ended by SystemExit, GeneratorExit or its own cancel
    ├── StepFailed          step_failed: a step's function failed on its last attempt (recorded)
    ├── StepResultInvalid   step_result_invalid: a step returned a value that is not JSON (not recorded)
    ├── FlowOutputInvalid   flow_output_invalid: the body returned a value that is not JSON
    ├── FlowChanged         flow_changed: resume found the flow file changed since the run recorded it
    ├── SessionNotResumable flow_session_not_resumable: resume was asked for a session's root run
    ├── LangGraphRunNotResumable  flow_langgraph_not_resumable: resume was asked for a LangGraph
    │                       adapter's run (a thread's, the catalog's, the store's)
    └── FlowUsage           flow_usage: the runtime was called the wrong way
        ├── StepInvalid     step_invalid: a bad ``f.step`` call
        └── FlowInputInvalid  flow_input_invalid: the input is not a JSON value

    staging.CodedInterrupt  (a KeyboardInterrupt with a code: ``except Exception`` never takes it)
    └── RunInterrupted      flow_interrupted: Ctrl-C stopped the run; the root is left interrupted

Memory and journal errors keep their own codes when they fail a run.
"""

from __future__ import annotations

from pathlib import Path

from staging import CodedError, CodedInterrupt


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


class SessionNotResumable(FlowsError):
    """``resume`` was asked for the root run of a memory session (an MCP session's, or a script's
    ``MemoryStore.session``): it has no body to run again. What it committed is durable already;
    ``flows sync`` or ``flows check --repair`` publish any file it left unpublished."""

    code = "flow_session_not_resumable"


class LangGraphRunNotResumable(FlowsError):
    """``resume`` was asked for a run the LangGraph adapters keep (a thread's, flow
    ``langgraph-thread``; the threads' catalog, ``langgraph-catalog``; ``JournalStore``'s,
    ``langgraph-store``): no flow file ran it, so there is no body to run again, and a flow run in
    it would finish the run its adapter writes to. LangGraph resumes a thread by invoking the graph
    on the thread's id; the catalog and the store's run are written on by the next process that uses
    them. Refused whatever ``flow_file`` and ``allow_changed`` say."""

    code = "flow_langgraph_not_resumable"


class UnawaitedStep(FlowsError):
    """The body finished while a learn or step it started was never awaited (pending or settled)."""

    code = "unawaited_step"

    def __init__(self, message: str, *, steps: tuple[str, ...], run_id: str | None = None) -> None:
        super().__init__(message, run_id=run_id)
        self.steps = steps


class FlowFailed(FlowsError):
    """The body raised an exception without a code; ``__cause__`` is that exception."""

    code = "flow_failed"


class FlowUsage(FlowsError):
    """The runtime was called the wrong way (``flows.run`` inside a running event loop, say)."""

    code = "flow_usage"


class StepInvalid(FlowUsage):
    """``f.step`` was called with a bad name, function, ``retries`` or ``backoff``, or from a place
    that has no call position (inside another step's function, or outside the body's tasks)."""

    code = "step_invalid"

    def __init__(self, message: str, *, step: str | None = None, run_id: str | None = None) -> None:
        super().__init__(message, run_id=run_id)
        self.step = step


class FlowInputInvalid(FlowUsage):
    """The flow's input is not a JSON value (or is too large); nothing was begun or journaled."""

    code = "flow_input_invalid"


class StepFailed(FlowsError):
    """A step's function failed on its last attempt. The failure is recorded, so a resumed body
    gets this same error again without the function being called.

    ``step`` is the step's key (``name#position``), ``attempt`` the attempt that failed last,
    ``error_code``/``error_message`` the recorded failure, ``replayed`` whether it came from the
    journal. On the first run ``__cause__`` is the function's exception.
    """

    code = "step_failed"

    def __init__(
        self,
        message: str,
        *,
        step: str,
        attempt: int,
        error_code: str,
        error_message: str,
        replayed: bool,
        run_id: str | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id)
        self.step = step
        self.attempt = attempt
        self.error_code = error_code
        self.error_message = error_message
        self.replayed = replayed


class StepResultInvalid(FlowsError):
    """A step's function returned something that is not a JSON value; nothing was journaled, so
    a resumed body calls the function again."""

    code = "step_result_invalid"

    def __init__(self, message: str, *, step: str, run_id: str | None = None) -> None:
        super().__init__(message, run_id=run_id)
        self.step = step


class FlowOutputInvalid(FlowsError):
    """The body returned something that is not a JSON value; the run failed, no output recorded."""

    code = "flow_output_invalid"


class FlowChanged(FlowsError):
    """``resume`` found the flow file changed since the run recorded it; nothing was changed.

    ``recorded`` and ``current`` are the SHA-256 hex digests of the file's bytes.
    """

    code = "flow_changed"

    def __init__(
        self, message: str, *, recorded: str, current: str, run_id: str, path: str | Path | None
    ) -> None:
        super().__init__(message, run_id=run_id, path=path)
        self.recorded = recorded
        self.current = current


class FlowAborted(FlowsError):
    """The body ended by a ``BaseException`` that is not an error (``SystemExit``,
    ``GeneratorExit``, a ``CancelledError`` it raised itself); ``__cause__`` is that exception."""

    code = "flow_aborted"


class RunInterrupted(CodedInterrupt):
    """A run stopped by Ctrl-C (or a ``KeyboardInterrupt`` out of its body), after its in-flight
    learns and steps settled. The root is left ``interrupted`` (resumable) with the interruption
    recorded in its ``flow`` stream. A ``KeyboardInterrupt``, so a caller's Ctrl-C handling holds.
    """

    code = "flow_interrupted"

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id
