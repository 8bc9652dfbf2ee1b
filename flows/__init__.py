"""The flows runtime: drive a flow body under a durable root run, with journaled learns and steps."""

import importlib.metadata as _metadata

from flows._errors import (
    FlowAborted,
    FlowChanged,
    FlowFailed,
    FlowInputInvalid,
    FlowLoadFailed,
    FlowOutputInvalid,
    FlowsError,
    FlowUsage,
    RunInterrupted,
    StepFailed,
    StepInvalid,
    StepResultInvalid,
    UnawaitedStep,
)
from flows._flow import Flow, Header, flow, load_flow, source_digest
from flows._runtime import (
    RUN_STREAM,
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
    "Outcome",
    "RunInterrupted",
    "RunResult",
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

try:  # the installed distribution's version (one for every package of flows-memory)
    __version__: str = _metadata.version("flows-memory")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
