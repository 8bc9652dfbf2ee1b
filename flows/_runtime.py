"""Driving a flow body under a durable root run: steps, failure, resume (SPEC R-F1..R-F3, R-F6)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import journal
from flows._errors import FlowFailed, FlowLoadFailed, UnawaitedStep
from flows._flow import Flow, Header, load_flow
from journal import JournalBackend, Lease, RunState
from memory import Explained, MemoryStore, Recalled, RootRun

Progress = Callable[[int, int], None]


class Step:
    """A learn in flight: started at once, awaited by the body to consume its outcome.

    Awaiting it returns the ``Learned`` result or raises the learn's error. A step the body never
    awaits fails the run with ``unawaited_step``, even if the write itself succeeded.
    """

    def __init__(self, number: int, label: str, task: asyncio.Task[Any], verb: str = "learn") -> None:
        self.number = number
        self.label = label
        self.verb = verb
        self._task = task
        self.consumed = False

    def __await__(self) -> Generator[Any, None, Any]:
        self.consumed = True
        return self._task.__await__()

    @property
    def task(self) -> asyncio.Task[Any]:
        """The task doing the write."""
        return self._task

    def __repr__(self) -> str:
        return f"<{self.verb} step {self.name}>"

    @property
    def name(self) -> str:
        """How diagnostics name the step: ``learn#<n> '<text>'`` (``forget#<n> '<key>'``)."""
        return f"{self.verb}#{self.number} {self.label!r}"


class FlowMemory:
    """``f.memory``: learn, forget, recall and why for the running flow's scope."""

    def __init__(self, store: MemoryStore, root: RootRun, progress: Progress | None = None) -> None:
        self._store = store
        self._root = root
        self._progress = progress
        self.settled = 0
        self.steps: list[Step] = []

    def learn(self, finding: Mapping[str, Any], *, supersedes: str | None = None) -> Step:
        """Start learning ``finding`` now; await the returned step to consume its outcome.

        ``supersedes`` names the key of a finding the new one replaces (see ``MemoryStore.learn``).
        """
        text = finding.get("text") if isinstance(finding, Mapping) else None
        label = text[:40] if isinstance(text, str) else repr(finding)[:40]
        return self._start(self._store.alearn(finding, self._root, supersedes=supersedes), label, "learn")

    def forget(self, key: str, *, reason: str) -> Step:
        """Start forgetting the finding ``key`` now (see ``MemoryStore.forget``); await the returned
        step to consume its outcome, a ``Forgotten``. Like a learn, a forget never awaited fails the run."""
        return self._start(self._store.aforget(key, self._root, reason=reason), str(key)[:40], "forget")

    def _start(self, work: Coroutine[Any, Any, Any], label: str, verb: str) -> Step:
        task = asyncio.get_running_loop().create_task(work)
        step = Step(len(self.steps) + 1, label, task, verb)
        self.steps.append(step)
        task.add_done_callback(self._on_settled)
        return step

    def _on_settled(self, _: object) -> None:
        self.settled += 1
        if self._progress is not None:
            self._progress(self.settled, len(self.steps))

    async def recall(self, **filters: Any) -> list[Recalled]:
        """Findings of this flow's scope (``source=``, ``tags=``, ``tag=``, ``meta=``,
        ``before_ms=``, ``limit=``; see ``MemoryStore.recall``)."""
        filters.setdefault("scope", self._root.scope)
        return await self._store.arecall(**filters)

    async def why(self, subject: str, *, limit: int = 10, **filters: Any) -> list[Explained]:
        """Findings of this flow's scope that answer ``subject``, best match first (``tags=``,
        ``meta=`` filter as in ``recall``)."""
        return await self._store.awhy(subject, limit=limit, scope=self._root.scope, **filters)


class FlowContext:
    """``f``, the argument of a flow body."""

    def __init__(self, store: MemoryStore, root: RootRun, progress: Progress | None = None) -> None:
        self.run_id = root.run_id
        self.name = root.flow
        self.scope = root.scope
        self.memory = FlowMemory(store, root, progress)


@dataclass(frozen=True)
class RunResult:
    """How a run ended: its id, state (``done`` or ``failed``) and the error that failed it."""

    run_id: str
    state: RunState
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        """True when the run is done."""
        return self.state is RunState.DONE


def error_fields(exc: BaseException) -> dict[str, Any]:
    """The code and message that describe ``exc`` (``flow_failed`` when it has no code)."""
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        return {"code": code, "message": str(exc)}
    return {"code": FlowFailed.code, "message": f"{type(exc).__name__}: {exc}"}


async def _settle(steps: list[Step]) -> None:
    """Wait for every step's task to finish, retrieving outcomes so none is left unobserved."""
    await asyncio.gather(*(s.task for s in steps), return_exceptions=True)


async def _drive(
    flow: Flow, store: MemoryStore, root: RootRun, progress: Progress | None
) -> BaseException | None:
    f = FlowContext(store, root, progress)
    try:
        await flow.body(f)
    except Exception as exc:  # the body failed: settle in-flight learns first (R-F3)
        await _settle(f.memory.steps)
        return exc
    await _settle(f.memory.steps)
    unawaited = tuple(s.name for s in f.memory.steps if not s.consumed)
    if unawaited:
        return UnawaitedStep(
            f"the body returned without awaiting {', '.join(unawaited)}; await every f.memory.learn(...) "
            "and f.memory.forget(...)",
            steps=unawaited,
            run_id=root.run_id,
        )
    return None


def _finish(backend: JournalBackend, lease: Lease, error: BaseException | None) -> RunResult:
    if error is None:
        backend.finish(lease, RunState.DONE)
        return RunResult(lease.run_id, RunState.DONE)
    if not isinstance(error, journal.JournalContention):
        backend.finish(lease, RunState.FAILED, error_fields(error))
    else:  # the run was taken over: it is no longer ours to mark
        backend.release(lease)
    if getattr(error, "run_id", None) is None:
        with contextlib.suppress(AttributeError):
            error.run_id = lease.run_id  # type: ignore[attr-defined]
    return RunResult(lease.run_id, RunState.FAILED, error)


def _drive_root(
    flow: Flow, store: MemoryStore, backend: JournalBackend, lease: Lease, progress: Progress | None = None
) -> RunResult:
    root = RootRun(backend, lease, flow.header.name, flow.header.scope, script=flow.header.script)
    try:
        error = asyncio.run(_drive(flow, store, root, progress))
    except BaseException:
        backend.release(lease)  # KeyboardInterrupt and the like: the run reads interrupted
        raise
    return _finish(backend, lease, error)


def run(
    target: Flow | str | os.PathLike[str],
    *,
    db: str | os.PathLike[str] | None = None,
    journal_location: str | os.PathLike[str] | None = None,
    store: MemoryStore | None = None,
) -> RunResult:
    """Run a flow (a ``Flow`` or the path of a file defining one) under a new root run.

    The root records the flow's header and source so ``resume`` can re-run it. Returns how the run
    ended; a failed run's error is in ``RunResult.error`` (the root is marked failed, resumable).

    Raises:
        FlowLoadFailed: the file cannot be loaded.
        JournalError: the root run could not be begun or finished.
    """
    flow = target if isinstance(target, Flow) else load_flow(target)
    own = store is None
    store = store or MemoryStore(db, journal=journal_location)
    try:
        backend = store.open_journal()
        meta = {"source": str(flow.source) if flow.source else None, "header": flow.header.as_json()}
        _, lease = backend.begin(flow.header.name, flow.header.scope, meta)
        return _drive_root(flow, store, backend, lease)
    finally:
        if own:
            store.close()


def _flow_of(meta: Mapping[str, Any], run_id: str) -> Flow:
    source = meta.get("source")
    header = meta.get("header") or {}
    if not source:
        raise FlowLoadFailed(
            f"root run {run_id} records no flow source, so it cannot be resumed", run_id=run_id
        )
    try:
        flow = load_flow(Path(source), header.get("name"))
    except FlowLoadFailed as exc:
        exc.run_id = run_id
        raise
    recorded = Header(
        name=header.get("name", flow.header.name),
        scope=header.get("scope", flow.header.scope),
        script=bool((header.get("memory") or {}).get("script", True)),
    )
    return Flow(recorded, flow.body, flow.source)


def resume(
    run_id: str,
    *,
    db: str | os.PathLike[str] | None = None,
    journal_location: str | os.PathLike[str] | None = None,
    store: MemoryStore | None = None,
    progress: Progress | None = None,
) -> RunResult:
    """Take a new lease on a failed or interrupted root run and re-run its body.

    Learns already committed republish their files without journaling again. ``progress``, if
    given, is called with (learns settled, learns started) as each learn settles.

    Raises:
        JournalRunNotFound, JournalNotResumable (done), JournalLeaseHeld (a live holder).
        FlowLoadFailed: the recorded flow file cannot be loaded.
    """
    own = store is None
    store = store or MemoryStore(db, journal=journal_location)
    try:
        backend = store.open_journal()
        info = backend.run(run_id)
        if info.state is RunState.DONE:
            raise journal.JournalNotResumable(
                f"root run {run_id} is done; there is nothing to resume", run_id=run_id
            )
        flow = _flow_of(info.meta, run_id)
        lease = backend.acquire(run_id)
        try:  # committed learns' files in batches, so the body's re-learns find them in place
            store.republish_run(backend, run_id)
        except BaseException:
            backend.release(lease)
            raise
        return _drive_root(flow, store, backend, lease, progress)
    finally:
        if own:
            store.close()
