"""The flows runtime: drive a flow body under a durable root run (SPEC R-F)."""

import importlib.metadata as _metadata

from flows._errors import FlowFailed, FlowLoadFailed, FlowsError, UnawaitedStep
from flows._flow import Flow, Header, flow, load_flow
from flows._runtime import FlowContext, FlowMemory, RunResult, Step, error_fields, resume, run

__all__ = [
    "Flow",
    "FlowContext",
    "FlowFailed",
    "FlowLoadFailed",
    "FlowMemory",
    "FlowsError",
    "Header",
    "RunResult",
    "Step",
    "UnawaitedStep",
    "error_fields",
    "flow",
    "load_flow",
    "resume",
    "run",
]

try:  # the installed distribution's version (one for every package of flows-memory)
    __version__: str = _metadata.version("flows-memory")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
