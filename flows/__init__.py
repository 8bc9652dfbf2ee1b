"""The flows runtime: drive a flow body under a durable root run, with journaled learns and steps.

Every public name is imported on first use, so ``import flows`` (and the ``flows`` CLI, whose
commands need only a few of them) does not pay for the runtime, asyncio or the version metadata.
"""

import importlib as _importlib
import typing

if typing.TYPE_CHECKING:
    from flows._errors import (
        FlowAborted,
        FlowChanged,
        FlowFailed,
        FlowInputInvalid,
        FlowLoadFailed,
        FlowOutputInvalid,
        FlowsError,
        FlowUsage,
        LangGraphRunNotResumable,
        RunInterrupted,
        SessionNotResumable,
        StepFailed,
        StepInvalid,
        StepResultInvalid,
        UnawaitedStep,
    )
    from flows._flow import Flow, Header, flow, load_flow, source_digest
    from flows._runtime import (
        RUN_STREAM,
        TRACEBACK_MAX,
        FlowContext,
        FlowMemory,
        RunResult,
        accepted_digest,
        aresume,
        arun,
        error_fields,
        resume,
        run,
    )
    from flows._steps import STEPS_STREAM, Backoff, Outcome, Step, json_value, parse_step_record

__all__ = [
    "RUN_STREAM",
    "STEPS_STREAM",
    "TRACEBACK_MAX",
    "Backoff",
    "Flow",
    "FlowAborted",
    "FlowChanged",
    "FlowContext",
    "FlowFailed",
    "FlowInputInvalid",
    "FlowLoadFailed",
    "FlowMemory",
    "FlowOutputInvalid",
    "FlowUsage",
    "FlowsError",
    "Header",
    "LangGraphRunNotResumable",
    "Outcome",
    "RunInterrupted",
    "RunResult",
    "SessionNotResumable",
    "Step",
    "StepFailed",
    "StepInvalid",
    "StepResultInvalid",
    "UnawaitedStep",
    "accepted_digest",
    "aresume",
    "arun",
    "error_fields",
    "flow",
    "json_value",
    "load_flow",
    "parse_step_record",
    "resume",
    "run",
    "source_digest",
]

_LAZY: dict[str, str] = {
    "Backoff": "flows._steps",
    "Flow": "flows._flow",
    "FlowAborted": "flows._errors",
    "FlowChanged": "flows._errors",
    "FlowContext": "flows._runtime",
    "FlowFailed": "flows._errors",
    "FlowInputInvalid": "flows._errors",
    "FlowLoadFailed": "flows._errors",
    "FlowMemory": "flows._runtime",
    "FlowOutputInvalid": "flows._errors",
    "FlowUsage": "flows._errors",
    "FlowsError": "flows._errors",
    "Header": "flows._flow",
    "LangGraphRunNotResumable": "flows._errors",
    "Outcome": "flows._steps",
    "RUN_STREAM": "flows._runtime",
    "RunInterrupted": "flows._errors",
    "RunResult": "flows._runtime",
    "STEPS_STREAM": "flows._steps",
    "SessionNotResumable": "flows._errors",
    "Step": "flows._steps",
    "StepFailed": "flows._errors",
    "StepInvalid": "flows._errors",
    "StepResultInvalid": "flows._errors",
    "TRACEBACK_MAX": "flows._runtime",
    "UnawaitedStep": "flows._errors",
    "accepted_digest": "flows._runtime",
    "aresume": "flows._runtime",
    "arun": "flows._runtime",
    "error_fields": "flows._runtime",
    "flow": "flows._flow",
    "json_value": "flows._steps",
    "load_flow": "flows._flow",
    "parse_step_record": "flows._steps",
    "resume": "flows._runtime",
    "run": "flows._runtime",
    "source_digest": "flows._flow",
}


def __getattr__(name: str) -> typing.Any:
    """Import a public name (or read the version) on first use."""
    if name == "__version__":  # importlib.metadata costs tens of milliseconds: only when asked
        import importlib.metadata

        try:  # the installed distribution's version (one for every package of flows-memory)
            value: typing.Any = importlib.metadata.version("flows-memory")
        except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
            value = "0+unknown"
    elif name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'flows' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
