"""The flows runtime: drive a flow body under a durable root run (SPEC R-F)."""

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
