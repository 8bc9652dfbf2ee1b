"""Driving a flow body under a durable root run: learns, steps, input and output, failure, resume.

The body runs in its own task on the caller's event loop (``arun``/``aresume``) or on a loop of its
own (``run``/``resume``). Journal calls, which block, run on worker threads so the loop stays free.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import journal
from flows._errors import (
    FlowAborted,
    FlowChanged,
    FlowFailed,
    FlowInputInvalid,
    FlowLoadFailed,
    FlowOutputInvalid,
    FlowUsage,
    LangGraphRunNotResumable,
    RunInterrupted,
    SessionNotResumable,
    UnawaitedStep,
)
from flows._flow import Flow, Header, load_flow
from flows._steps import (
    DEFAULT_BACKOFF,
    STEPS_STREAM,
    Backoff,
    NotJson,
    Step,
    StepRunner,
    create_task,
    json_value,
    settle,
)
from journal import JournalBackend, JournalCorrupt, Lease, Record, RunState
from memory import Explained, Forgotten, Learned, MemoryStore, Recalled, RootRun, Unwritable

T = TypeVar("T")
Progress = Callable[[int, int], None]
Notice = Callable[[str], None]
"""Told a line for the user while a run waits on something that may take long (``notice=``)."""
log = logging.getLogger(__name__)

RUN_STREAM = "run"  # the run's own events: each resume, failure and interruption, the output

IMPORT_NOTICE_S = 5.0
"""How long a flow file may take to import before ``notice`` is told that it is still importing."""

SETTLING_NOTICE_S = 5.0
"""How often ``notice`` is told how many writes an interrupted run still waits for."""
_SHA256 = re.compile(r"[0-9a-f]{64}")


async def _settle(future: asyncio.Future[T]) -> T:
    """The outcome of a write already begun (a step's task awaits it)."""
    return await future


class FlowMemory:
    """``f.memory``: learn, forget, recall and why for the running flow's scope."""

    def __init__(self, store: MemoryStore, root: RootRun, progress: Progress | None = None) -> None:
        self._store = store
        self._root = root
        self._progress = progress
        self.settled = 0
        self.steps: list[Step[Any]] = []
        self.closed = False  # the body has returned: nothing more is started under its root
        try:  # the body's loop: a FlowMemory is made on it, by the run that drives the body
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    def _startable(self, what: str) -> None:
        """Refuse a write the run could not wait for: after the body returned (a task it left
        running), or off the body's event loop (a thread)."""
        if self.closed:
            raise FlowUsage(
                f"f.memory.{what}(...) after the flow body returned (from a task it left running); "
                "the run no longer waits for it: await the work before the body returns",
                run_id=self._root.run_id,
            )
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or loop is not self._loop:
            raise FlowUsage(
                f"f.memory.{what}(...) must be called on the flow body's event loop, not from a thread "
                "(use asyncio.run_coroutine_threadsafe there, or learn in the body)",
                run_id=self._root.run_id,
            ) from None

    def learn(self, finding: Mapping[str, Any], *, supersedes: str | None = None) -> Step[Learned]:
        """Start learning ``finding`` now; await the returned step to consume its outcome.

        ``supersedes`` names the key of a finding the new one replaces (see ``MemoryStore.learn``).

        Raises (at once):
            FlowUsage: called after the body returned, or off the body's event loop (a thread).
        """
        self._startable("learn")
        text = finding.get("text") if isinstance(finding, Mapping) else None
        label = text[:40] if isinstance(text, str) else repr(finding)[:40]
        # begun now, on the store's executor: the write does not wait for the body's next await
        task = create_task(
            "learn", _settle(self._store.start_learn(finding, self._root, supersedes=supersedes))
        )
        step: Step[Learned] = Step(f"learn#{len(self.steps) + 1} {label!r}", task)
        self.steps.append(step)
        task.add_done_callback(self._on_settled)
        return step

    def forget(self, key: str, *, reason: str) -> Step[Forgotten]:
        """Start forgetting the finding ``key`` now (see ``MemoryStore.forget``); await the returned
        step to consume its outcome. Like a learn, a forget the body never awaits fails the run."""
        self._startable("forget")
        task = create_task("learn", _settle(self._store.start_forget(key, self._root, reason=reason)))
        step: Step[Forgotten] = Step(f"forget#{len(self.steps) + 1} {str(key)[:40]!r}", task)
        self.steps.append(step)
        task.add_done_callback(self._on_settled)
        return step

    def _on_settled(self, _: object) -> None:
        self.settled += 1
        if self._progress is not None:
            self._progress(self.settled, len(self.steps))

    async def recall(
        self,
        *,
        source: str | None = None,
        tag: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        before_ms: int | None = None,
        limit: int | None = 20,
        scope: str | None = None,
    ) -> list[Recalled]:
        """Findings matching every filter, newest first; ``scope`` defaults to this flow's scope.

        ``tags`` must all be on a finding (``tag`` is one more); ``meta`` keeps findings whose
        metadata has each key with that value; ``before_ms`` keeps findings learned strictly before
        it (epoch ms); ``limit`` caps the list (None: no cap).

        Raises:
            memory.ArgumentInvalid: a filter has the wrong type.
            memory.Unreachable: a learned file is damaged (named), or the DB cannot be read.
        """
        return await self._store.arecall(
            source=source,
            tag=tag,
            tags=tags,
            meta=meta,
            before_ms=before_ms,
            limit=limit,
            scope=self._root.scope if scope is None else scope,
        )

    async def why(
        self,
        subject: str,
        *,
        limit: int | None = 10,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> list[Explained]:
        """Findings of this flow's scope that answer ``subject``, best match first (``tags`` and
        ``meta`` filter as in ``recall``)."""
        return await self._store.awhy(subject, limit=limit, scope=self._root.scope, tags=tags, meta=meta)


class FlowContext:
    """``f``, the argument of a flow body: its run, its input, its memory and its steps."""

    def __init__(
        self,
        store: MemoryStore,
        root: RootRun,
        steps: StepRunner,
        input: Any = None,
        progress: Progress | None = None,
    ) -> None:
        self.run_id = root.run_id
        self.name = root.flow
        self.scope = root.scope
        self.input = input
        self.memory = FlowMemory(store, root, progress)
        self._steps = steps

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        retries: int = 0,
        backoff: Backoff | float = DEFAULT_BACKOFF,
        **kwargs: Any,
    ) -> Step[Any]:
        """Start a durable step now: ``fn(*args, **kwargs)``, its result journaled once.

        ``fn`` may be a coroutine function (awaited on the loop) or a plain function (called on a
        worker thread). The first time, its JSON result is recorded in the ``steps`` stream under
        ``name#position`` (see ``flows._steps`` for the position rule); on a resumed run that step
        returns the recorded result without calling ``fn``. A failure is retried ``retries``
        times, waiting ``backoff`` (seconds, or a ``flows.Backoff``) with exponential growth and a
        cap, each attempt recorded; the last failure is recorded and raised as ``StepFailed``,
        again on every resume. Await the returned step; one never awaited fails the run with
        ``unawaited_step``.

        Raises (when awaited):
            StepFailed: ``fn`` failed on its last attempt (now or, recorded, on an earlier run).
            StepResultInvalid: ``fn`` returned something that is not JSON; nothing was recorded.
            JournalError: the outcome could not be recorded (the step runs again on resume).
        Raises (at once):
            StepInvalid: a bad name, ``fn``, ``retries`` or ``backoff``, or a call inside a step.
        """
        return self._steps.start(name, fn, args, kwargs, retries=retries, backoff=backoff)


@dataclass(frozen=True)
class RunResult:
    """How a run ended: its id, its state (``done`` or ``failed``), the error that failed it, and
    the body's return value as journaled (``output``; None unless the run is done)."""

    run_id: str
    state: RunState
    error: BaseException | None = None
    output: Any = None

    @property
    def ok(self) -> bool:
        """True when the run is done."""
        return self.state is RunState.DONE

    def unwrap(self) -> Any:
        """The output of a done run; raises the error of a failed one."""
        if self.error is not None:
            raise self.error
        return self.output


TRACEBACK_MAX = 16 * 1024
"""The most characters of a failure's traceback a run records (its last frames are kept)."""


def error_fields(exc: BaseException) -> dict[str, Any]:
    """The code and message that describe ``exc`` (``flow_failed`` and ``<Type>: <text>`` when it
    is not a coded error), always recordable: see ``journal.error_record`` (a lone surrogate
    escaped, a message over ``journal.MESSAGE_MAX`` characters cut with the digest of the whole, a
    ``__str__`` that raises named in its place)."""
    return journal.error_record(exc, FlowFailed.code, own_code=False)


def traceback_text(exc: BaseException, limit: int = TRACEBACK_MAX) -> str:
    """``exc``'s traceback as Python prints it, at most ``limit`` characters: when longer, its first
    line, a note of how much was cut, and the last frames (where the failure happened). A lone
    surrogate in it (a message's) is written as its escape, so it can be recorded."""
    import traceback

    text = journal.recordable_text("".join(traceback.format_exception(exc)).rstrip("\n"), sys.maxsize)
    if len(text) <= limit:
        return text
    head, _, rest = text.partition("\n")
    tail = rest[-(limit - len(head) - 80) :]
    tail = tail[tail.find("\n") + 1 :]  # whole lines only
    return f"{head}\n  … {len(text) - len(head) - len(tail)} characters of earlier frames cut …\n{tail}"


# -- blocking calls off the loop --------------------------------------------------------------


async def _blocking(
    fn: Callable[..., T], *args: Any, undo: Callable[[T], object] | None = None, **kwargs: Any
) -> T:
    """``fn(*args)`` on a worker thread. A cancel of the caller does not abandon the call: it is
    waited for (and, if it succeeded, ``undo`` is applied to its result) before the cancel goes on,
    so a lease is never taken or left behind by a call nobody is waiting for."""
    future = asyncio.get_running_loop().run_in_executor(None, partial(fn, *args, **kwargs))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        while not future.done():
            try:
                await asyncio.wait([future])
            except asyncio.CancelledError:
                continue
        if undo is not None and not future.cancelled() and future.exception() is None:
            undo(future.result())
        raise


def _checked_input(value: Any) -> Any:
    try:
        return json_value(value)
    except NotJson as exc:
        raise FlowInputInvalid(
            f"the flow's input cannot be journaled: {exc}; pass JSON (null, booleans, numbers, "
            "strings, lists, string-keyed dicts)"
        ) from None


# -- driving the body -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Ending:
    error: BaseException | None
    output: Any = None
    interrupted: bool = False  # Ctrl-C, a KeyboardInterrupt, or a cancel from outside the body
    cancelled: bool = False  # the cancel came from outside: it goes on once the run is settled
    abandoned: int = 0  # learns and steps a second Ctrl-C stopped waiting for


def _aborted(exc: BaseException, run_id: str) -> FlowAborted:
    what = type(exc).__name__ + (f"({', '.join(repr(a) for a in exc.args)})" if exc.args else "")
    aborted = FlowAborted(
        f"the body ended by {what}; a body ends by returning (done) or by raising an exception "
        "(failed), so the run is marked failed; `flows resume` runs it again",
        run_id=run_id,
    )
    aborted.__cause__ = exc
    return aborted


def _tell(notice: Notice, line: str) -> None:
    """``notice(line)``; what it raises is logged, never let through: a notice that fails must not
    keep a run from settling or a flow file from loading."""
    try:
        notice(line)
    except Exception:
        log.warning("the run's notice failed", exc_info=True)


def _settling(notice: Notice, run_id: str) -> Callable[[int], None]:
    """What ``notice`` is told while an interrupted run waits for its writes in flight: at once,
    what it waits for and what a second Ctrl-C does; then how many are left."""
    told = False

    def waiting(left: int) -> None:
        nonlocal told
        if told:
            _tell(notice, f"root run {run_id}: still finishing {left:,} learn(s) and step(s) in flight")
            return
        told = True
        _tell(
            notice,
            f"interrupted: finishing the {left:,} learn(s) and step(s) of root run {run_id} already in "
            "flight (each is committed to the journal whole or not at all), then the run is marked "
            "interrupted; Ctrl-C again to stop at once: what was committed stays, and `flows resume "
            f"{run_id}` does the rest",
        )

    return waiting


async def _drive(flow: Flow, f: FlowContext, steps: StepRunner, notice: Notice | None = None) -> _Ending:
    try:
        output = await flow.body(f)
    except BaseException as exc:  # the body failed: in-flight learns and steps settle first
        task = asyncio.current_task()
        cancelled = isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling() > 0
        interrupted = cancelled or isinstance(exc, KeyboardInterrupt)
        waiting = _settling(notice, f.run_id) if interrupted and notice is not None else None
        handles = [*f.memory.steps, *steps.handles]
        await settle(handles, waiting=waiting, every_s=SETTLING_NOTICE_S)
        if isinstance(exc, Exception):
            return _Ending(exc)
        if interrupted:  # a second Ctrl-C cancels what was still awaited: it was not waited for
            dropped = sum(1 for h in handles if h.task.cancelled())
            return _Ending(exc, interrupted=True, cancelled=cancelled, abandoned=dropped)
        return _Ending(_aborted(exc, f.run_id))
    # Nothing more starts under the root now: a task the body left running gets flow_usage (or
    # step_invalid) rather than a write the run would not wait for before it reads done.
    f.memory.closed = steps.closed = True
    await settle([*f.memory.steps, *steps.handles])
    unawaited = tuple(s.name for s in [*f.memory.steps, *steps.handles] if not s.consumed)
    if unawaited:
        return _Ending(
            UnawaitedStep(
                f"the body returned without awaiting {', '.join(unawaited)}; await every "
                "f.memory.learn(...), f.memory.forget(...) and f.step(...)",
                steps=unawaited,
                run_id=f.run_id,
            )
        )
    return _Ending(None, output)


async def _finish_failed(backend: JournalBackend, lease: Lease, error: BaseException) -> RunResult:
    # recorded with its traceback (bounded), which `flows run -v`, `flows show` and the dashboard's
    # run page show. Whatever the error: one of the contention family out of the body may be about
    # another run (a resume it made of a run a live process drives), so only the journal tells
    # whether this run was taken over: its fence refuses the state change then.
    fields = error_fields(error)
    if error.__traceback__ is not None:  # raised somewhere (not an ending the runtime judged)
        fields["traceback"] = traceback_text(error)
    event = {"event": "failed", "epoch": lease.epoch, "error": fields}
    with contextlib.suppress(journal.JournalError):  # the state change below still records it
        await _blocking(backend.append, lease, RUN_STREAM, event, key=f"failed-{lease.epoch}")
    try:
        await _blocking(backend.finish, lease, RunState.FAILED, fields)
    except journal.JournalContention:  # the run was taken over: it is no longer ours to mark
        await _blocking(backend.release, lease)
    if getattr(error, "run_id", None) is None:
        with contextlib.suppress(AttributeError):  # an exception type that refuses attributes
            error.run_id = lease.run_id  # type: ignore[attr-defined]
    return RunResult(lease.run_id, RunState.FAILED, error)


def _interrupted(run_id: str, how: str, abandoned: int | None = 0, *, began: bool = True) -> RunInterrupted:
    """``abandoned``: how many learns and steps a second Ctrl-C stopped waiting for (None: some, how
    many unknown, as when it came before the settling could count them); ``began``: False when the
    body never began (a resume stopped while republishing), so nothing was in flight."""
    count = "" if abandoned is None else f"{abandoned:,} "
    when = (
        "before its body began, with nothing in flight"
        if not began
        else "once its in-flight learns and steps had settled"
        if abandoned == 0
        else f"without waiting for {count}learn(s) and step(s) still in flight (each is committed whole "
        "or not at all)"
    )
    return RunInterrupted(
        f"the run was {how} {when}; it is left interrupted: `flows resume {run_id}` goes on from its "
        "recorded steps",
        run_id=run_id,
    )


async def _interrupt(
    backend: JournalBackend, lease: Lease, ending: _Ending, own_loop: bool
) -> RunInterrupted:
    # on a loop of ``run``'s own, only its Ctrl-C handler cancels the run
    how = "cancelled" if ending.cancelled and not own_loop else "interrupted (Ctrl-C)"
    stopped = _interrupted(lease.run_id, how, ending.abandoned)
    event = {"event": "interrupted", "epoch": lease.epoch, "error": error_fields(stopped)}
    try:
        await _blocking(backend.append, lease, RUN_STREAM, event, key=f"interrupted-{lease.epoch}")
    finally:
        await _blocking(backend.release, lease)
    return stopped


async def _complete(store: MemoryStore, backend: JournalBackend, lease: Lease, output: Any) -> RunResult:
    try:
        value = json_value(output)
    except NotJson as exc:
        error = FlowOutputInvalid(
            f"the body returned a value that cannot be journaled as the run's output: {exc}; "
            "return JSON (null, booleans, numbers, strings, lists, string-keyed dicts)",
            run_id=lease.run_id,
        )
        return await _finish_failed(backend, lease, error)
    try:
        # Every name the run's learns published is made durable before the run reads done: a store
        # open recovers the names of runs not done only.
        await _blocking(store.flush)
        event = {"event": "output", "output": value}
        rec = await _blocking(backend.append, lease, RUN_STREAM, event, key="output")
        await _blocking(backend.finish, lease, RunState.DONE)
    except (journal.JournalError, Unwritable) as exc:
        return await _finish_failed(backend, lease, exc)
    return RunResult(lease.run_id, RunState.DONE, output=rec.payload.get("output"))


async def _drive_root(
    flow: Flow,
    store: MemoryStore,
    backend: JournalBackend,
    lease: Lease,
    *,
    input: Any,
    recorded: Sequence[Record] = (),
    progress: Progress | None = None,
    started: _Started,
) -> RunResult:
    try:
        steps = StepRunner(backend, lease, recorded)
    except BaseException:
        await _blocking(backend.release, lease)
        raise
    root = RootRun(backend, lease, flow.header.name, flow.header.scope, script=flow.header.script)
    log.info("root run %s: driving flow %r (scope %r)", lease.run_id, flow.header.name, flow.header.scope)
    f = FlowContext(store, root, steps, input, progress)
    loop = asyncio.get_running_loop()
    body = loop.create_task(_drive(flow, f, steps, started.notice))
    started.began = True
    steps.enter(loop, body)
    try:
        ending = await body  # a cancel of this caller cancels the body, which settles and returns
    finally:
        steps.leave(loop)
    started.settled = True
    if ending.interrupted:
        started.abandoned = ending.abandoned
        stopped = await _interrupt(backend, lease, ending, started.own_loop)
        log.info("root run %s: stopped before the body ended; it reads interrupted", lease.run_id)
        if ending.cancelled:
            raise asyncio.CancelledError
        raise stopped from ending.error
    if ending.error is not None:
        result = await _finish_failed(backend, lease, ending.error)
    else:
        result = await _complete(store, backend, lease, ending.output)
    log.info("root run %s: %s", lease.run_id, result.state.value)
    return result


# -- run and resume ---------------------------------------------------------------------------


@dataclass
class _Started:
    """One run or resume: its root run once begun, and how it tells its user what it waits on."""

    run_id: str | None = None
    notice: Notice | None = None
    own_loop: bool = False  # ``run``/``resume``: the loop and its Ctrl-C handler are this call's
    began: bool = False  # the body's task was created (before it, a resume republishes)
    settled: bool = False  # the body's task ended (its writes in flight settled, or were let go)
    abandoned: int = 0


@contextlib.contextmanager
def _importing(path: str | os.PathLike[str], started: _Started) -> Iterator[None]:
    """While the flow file ``path`` is imported (its top-level code runs): after ``IMPORT_NOTICE_S``
    the notice names it, and on a loop of ``run``'s own a Ctrl-C stops it at once. The Ctrl-C
    handler of ``asyncio.run`` only cancels the loop's task, which code blocked in an import (a
    sleep, a read of a pipe, a lock) never sees: the process waited for it without a word."""
    timer = None
    if started.notice is not None:
        line = (
            f"the flow file {path} is still being imported after {IMPORT_NOTICE_S:g} s (its top-level "
            "code has not finished); Ctrl-C stops it"
        )
        timer = threading.Timer(IMPORT_NOTICE_S, _tell, (started.notice, line))
        timer.daemon = True
        timer.start()
    previous = None
    if started.own_loop and threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGINT)
    # asyncio's handler, a callable: a SIGINT ignored from the start (nohup) stays ignored
    swapped = callable(previous) and previous is not signal.default_int_handler
    if swapped:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
        if swapped and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous)  # unless the file set a handler of its own


async def _close(store: MemoryStore) -> None:
    await _blocking(store.close)


async def _arun(
    target: Flow | str | os.PathLike[str],
    *,
    db: str | os.PathLike[str] | None,
    journal_location: str | os.PathLike[str] | None,
    store: MemoryStore | None,
    input: Any,
    started: _Started,
) -> RunResult:
    if isinstance(target, Flow):
        flow = target
    else:
        with _importing(target, started):
            flow = load_flow(target)
    value = _checked_input(input)
    own = store is None
    store = store or MemoryStore(db, journal=journal_location)
    try:
        backend = await _blocking(store.open_journal)
        meta = {
            "source": str(flow.source) if flow.source else None,
            "header": flow.header.as_json(),
            "sourceSha256": flow.digest(),
            "input": value,
        }
        _, lease = await _blocking(
            backend.begin, flow.header.name, flow.header.scope, meta, undo=lambda r: backend.release(r[1])
        )
        started.run_id = lease.run_id
        return await _drive_root(flow, store, backend, lease, input=value, started=started)
    finally:
        if own:
            await _close(store)


async def arun(
    target: Flow | str | os.PathLike[str],
    *,
    db: str | os.PathLike[str] | None = None,
    journal_location: str | os.PathLike[str] | None = None,
    store: MemoryStore | None = None,
    input: Any = None,
    notice: Notice | None = None,
) -> RunResult:
    """Run a flow under a new root run on the running event loop (``run`` for callers without one).

    ``target`` is a ``Flow`` or the path of a file defining one; ``input`` (any JSON value) is
    recorded in the root and given to the body as ``f.input``. The root records the flow's header,
    its file and that file's SHA-256, so ``resume`` can re-run it and notice a change. Returns how
    the run ended: ``output`` is the body's return value, journaled in the ``run`` stream; a failed
    run's error is in ``RunResult.error`` (the root is marked failed, resumable).

    ``notice``, when given, is called with a line for the user (from another thread, for the first)
    while the run waits on what may take long: a flow file still importing after
    ``IMPORT_NOTICE_S``; and once the body is interrupted, the learns and steps in flight it
    finishes first, at once and then every ``SETTLING_NOTICE_S`` while any is left.

    Raises:
        FlowLoadFailed: the file cannot be loaded.
        FlowInputInvalid: ``input`` is not JSON; nothing was begun.
        JournalError: the root run could not be begun.
        RunInterrupted: a ``KeyboardInterrupt`` stopped the body (the root is left interrupted).
        asyncio.CancelledError: the caller was cancelled; in-flight work settled first and the
            root is left interrupted.
    """
    return await _arun(
        target,
        db=db,
        journal_location=journal_location,
        store=store,
        input=input,
        started=_Started(notice=notice),
    )


def _sync(make: Callable[[_Started], Any], verb: str, notice: Notice | None) -> RunResult:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise FlowUsage(
            f"flows.{verb}() cannot be called from a running event loop; use `await flows.a{verb}(...)`"
        )
    started = _Started(notice=notice, own_loop=True)
    try:
        result: RunResult = asyncio.run(make(started))
    except RunInterrupted:
        raise
    except KeyboardInterrupt as exc:  # Ctrl-C arrives as a cancel of the loop's main task
        if started.run_id is None:
            raise
        # a second Ctrl-C the body's task met itself ended it before it could count what it left;
        # before the body began (a resume republishing), nothing was in flight to leave
        abandoned = started.abandoned if started.settled else None
        raise _interrupted(started.run_id, "interrupted (Ctrl-C)", abandoned, began=started.began) from exc
    return result


def run(
    target: Flow | str | os.PathLike[str],
    *,
    db: str | os.PathLike[str] | None = None,
    journal_location: str | os.PathLike[str] | None = None,
    store: MemoryStore | None = None,
    input: Any = None,
    notice: Notice | None = None,
) -> RunResult:
    """Run a flow under a new root run, on an event loop of its own; see ``arun``.

    Raises what ``arun`` raises; ``FlowUsage`` when called from a running event loop, and
    ``RunInterrupted`` (a ``KeyboardInterrupt``) on Ctrl-C, once the run has settled (a second
    Ctrl-C stops waiting for the writes in flight; its message says how many). While the flow file
    is imported, a Ctrl-C raises ``KeyboardInterrupt`` at once (nothing was begun).
    """
    return _sync(
        lambda started: _arun(
            target, db=db, journal_location=journal_location, store=store, input=input, started=started
        ),
        "run",
        notice,
    )


def _flow_of(
    meta: Mapping[str, Any],
    run_id: str,
    recorded: str | None,
    *,
    allow_changed: bool,
    flow_file: str | os.PathLike[str] | None,
    started: _Started,
) -> Flow:
    """The flow a resume runs: from ``flow_file`` when given, else from the file the run's record
    names, its bytes checked against the digest the run ``recorded`` before any of them runs (a
    changed file, or a run that recorded no digest, is ``FlowChanged`` unless ``allow_changed``):
    the journal names the file, so it must not be able to make a resume import another one."""
    source = meta.get("source")
    header = meta.get("header") or {}
    if not isinstance(header, Mapping):
        raise FlowLoadFailed(f"root run {run_id} records a flow header that is not an object", run_id=run_id)
    memory_of = header.get("memory") or {}
    script = memory_of.get("script", True) if isinstance(memory_of, Mapping) else None
    damaged = [
        what
        for what, ok in (
            ("name", isinstance(header.get("name", ""), str)),
            ("scope", isinstance(header.get("scope", ""), str)),
            ("memory.script", isinstance(script, bool)),
        )
        if not ok
    ]
    if damaged:  # read back from the journal, so untrusted: it names the scope learns go to
        raise FlowLoadFailed(
            f"root run {run_id} records a flow header whose {', '.join(damaged)} is not what a flow "
            "header holds (a string name and scope, memory.script true or false); the journal was "
            "damaged or written by something else, so the run is not resumed",
            run_id=run_id,
        )
    if flow_file is None and (not source or not isinstance(source, str)):
        raise FlowLoadFailed(
            f"root run {run_id} records no flow source: name its flow file with --file FILE "
            "(flow_file=) to resume it",
            run_id=run_id,
        )
    path = Path(flow_file) if flow_file is not None else Path(str(source))

    def check(current: str) -> None:
        if allow_changed or current == recorded:
            return
        if recorded is None:
            raise FlowChanged(
                f"root run {run_id} records no digest of its flow file, so nothing shows that "
                f"{path} is the file it ran; none of it was run: resume with --allow-changed "
                "(allow_changed=True) to run the file as it is now",
                recorded="",
                current=current,
                run_id=run_id,
                path=path,
            )
        raise FlowChanged(
            f"the flow file {path} is not the one root run {run_id} recorded (recorded sha256 "
            f"{recorded}, now {current}); none of it was run: resume with --allow-changed "
            "(allow_changed=True) to replay its recorded steps by key and run new ones",
            recorded=recorded,
            current=current,
            run_id=run_id,
            path=path,
        )

    try:
        with _importing(path, started):
            flow = load_flow(path, header.get("name"), check=check)
    except FlowLoadFailed as exc:
        exc.run_id = run_id
        if flow_file is None and not _exists(path):  # moved or deleted since the run began
            exc.message = (
                f"no flow file at {path}, where root run {run_id} recorded it"
                if exc.message.startswith("no flow file at")
                else exc.message
            ) + f"; if it moved, name it: `flows resume {run_id} --file FILE` (flow_file=)"
        raise
    recorded_header = Header(
        name=header.get("name", flow.header.name),
        scope=header.get("scope", flow.header.scope),
        script=bool(script),
    )
    return Flow(recorded_header, flow.body, flow.source, flow.source_sha256)


def _exists(path: Path) -> bool:
    """Whether anything is at ``path`` (a link's target included); False also for a path the OS
    cannot look at (a loop of links, a name too long): the run's recorded file is not there."""
    try:
        return path.exists()
    except OSError:
        return False


def _digest_field(value: object, backend: JournalBackend, run_id: str, where: str, line: int) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and _SHA256.fullmatch(value):
        return value
    raise JournalCorrupt(
        f"root run {run_id} records a flow file digest that is not SHA-256 hex in {where}; the journal "
        f"at {backend.location} was damaged or written by something else",
        path=backend.location,
        line=line,
        reason="bad flow file digest",
        run_id=run_id,
    )


def accepted_digest(backend: JournalBackend, info: journal.RunInfo, events: Sequence[Record]) -> str | None:
    """The flow file digest a run last ran with: the one recorded at its start, or by its latest
    resume (a resume with ``allow_changed`` accepts the new file). None for runs that recorded none.

    Raises:
        JournalCorrupt: a recorded digest is not SHA-256 hex.
    """
    digest = _digest_field(info.meta.get("sourceSha256"), backend, info.run_id, "its metadata", 0)
    for rec in events:
        if rec.payload.get("event") == "resumed":
            found = _digest_field(rec.payload.get("sourceSha256"), backend, info.run_id, RUN_STREAM, rec.seq)
            digest = found or digest
    return digest


def _langgraph_refusal(info: journal.RunInfo) -> str:
    """Why ``flows resume`` refuses a run the LangGraph adapters keep, and what to do instead. Such
    a run records no flow file, but ``--file FILE --allow-changed`` would have run any flow in it
    and finished it, and the thread (or the store) could then never be written again."""
    role = info.meta.get("langgraph")
    head = (
        f"root run {info.run_id} (flow {info.flow!r}) is kept by flows' LangGraph adapter, not run by "
        "a flow file"
    )
    why = (
        "it has no body for `flows resume` to run, and a flow run in it would end the run the adapter "
        "writes to; nothing was written"
    )
    if isinstance(role, Mapping) and "thread" in role:
        thread = repr(role.get("thread"))
        thread = thread if len(thread) <= 200 else thread[:200] + "…"
        return (
            f"{head}: it holds the checkpoints of LangGraph thread {thread}; {why}. LangGraph resumes a "
            "thread by invoking the graph on its thread id: graph.invoke(None, {'configurable': "
            f"{{'thread_id': {thread}}}}}), the graph compiled with a JournalSaver over this journal"
        )
    what = {"catalog": "the LangGraph threads' catalog", "store": "a JournalStore's items"}
    which = what.get(role, "LangGraph's records") if isinstance(role, str) else "LangGraph's records"
    return (
        f"{head}: it holds {which}; {why}. It needs no resume: a JournalSaver or JournalStore over this "
        "journal goes on writing where it left off, and a thread resumes by invoking the graph on its "
        "thread id"
    )


async def _aresume(
    run_id: str,
    *,
    db: str | os.PathLike[str] | None,
    journal_location: str | os.PathLike[str] | None,
    store: MemoryStore | None,
    progress: Progress | None,
    allow_changed: bool,
    flow_file: str | os.PathLike[str] | None,
    started: _Started,
) -> RunResult:
    own = store is None
    store = store or MemoryStore(db, journal=journal_location)
    try:
        backend = await _blocking(store.open_journal)
        info = await _blocking(backend.run, run_id)
        if info.state is RunState.DONE:
            raise journal.JournalNotResumable(
                f"root run {run_id} is done; there is nothing to resume", run_id=run_id
            )
        if info.meta.get("session") is True:
            raise SessionNotResumable(
                f"root run {run_id} is a memory session's (flow {info.flow!r}), which has no body to run "
                "again; what it committed is durable already (`flows sync` or `flows check --repair` "
                "publish any file it left unpublished)",
                run_id=run_id,
            )
        if "langgraph" in info.meta:
            raise LangGraphRunNotResumable(_langgraph_refusal(info), run_id=run_id)
        if info.state is RunState.RUNNING:
            # a live process drives it: refused before the flow file is imported, so none of the
            # file's code runs here (``acquire`` below refuses it too, should one start meanwhile)
            raise journal.JournalLeaseHeld(
                f"root run {run_id} is driven by a live process; wait for it to finish or stop it",
                run_id=run_id,
            )
        recorded_digest = accepted_digest(backend, info, await _blocking(backend.read, run_id, RUN_STREAM))
        flow = _flow_of(
            info.meta,
            run_id,
            recorded_digest,
            allow_changed=allow_changed,
            flow_file=flow_file,
            started=started,
        )
        current = flow.digest()
        changed = recorded_digest is not None and current != recorded_digest
        lease = await _blocking(backend.acquire, run_id, undo=backend.release)
        started.run_id = run_id
        try:  # committed learns' files in batches, so the body's re-learns find them in place
            await _blocking(store.republish_run, backend, run_id)
            event = {
                "event": "resumed",
                "epoch": lease.epoch,
                "sourceSha256": current,
                "recordedSha256": recorded_digest,
                "changed": changed,
            }
            if flow_file is not None:
                event["source"] = str(flow.source)
            await _blocking(backend.append, lease, RUN_STREAM, event, key=f"resumed-{lease.epoch}")
            recorded = await _blocking(backend.read, run_id, STEPS_STREAM)
        except BaseException:
            await _blocking(backend.release, lease)
            raise
        return await _drive_root(
            flow,
            store,
            backend,
            lease,
            input=info.meta.get("input"),
            recorded=recorded,
            progress=progress,
            started=started,
        )
    finally:
        if own:
            await _close(store)


async def aresume(
    run_id: str,
    *,
    db: str | os.PathLike[str] | None = None,
    journal_location: str | os.PathLike[str] | None = None,
    store: MemoryStore | None = None,
    progress: Progress | None = None,
    allow_changed: bool = False,
    flow_file: str | os.PathLike[str] | None = None,
    notice: Notice | None = None,
) -> RunResult:
    """Take a new lease on a failed or interrupted root run and re-run its body on the running loop.

    Learns already committed republish their files without journaling again; steps already
    recorded return their recorded outcome without running; ``f.input`` is the recorded input.
    ``progress``, if given, is called with (learns settled, learns started) as each learn settles.
    The flow file (the one the run recorded, or ``flow_file``: the same file moved, or named by you
    rather than by the journal) must hash as the run recorded it, checked before any of it runs,
    unless ``allow_changed`` (then recorded steps are still replayed by key, new ones run, and the
    new digest is recorded). ``notice`` is told what the resume waits on, as for ``arun``.

    Raises:
        JournalRunNotFound, JournalNotResumable (done), JournalLeaseHeld (a live holder).
        FlowLoadFailed: the recorded flow file cannot be loaded.
        FlowChanged: the flow file changed (or the run recorded no digest of it) and
            ``allow_changed`` is False; none of the file ran and nothing was written.
        RunInterrupted, asyncio.CancelledError: as for ``arun``.
    """
    return await _aresume(
        run_id,
        db=db,
        journal_location=journal_location,
        store=store,
        progress=progress,
        allow_changed=allow_changed,
        flow_file=flow_file,
        started=_Started(notice=notice),
    )


def resume(
    run_id: str,
    *,
    db: str | os.PathLike[str] | None = None,
    journal_location: str | os.PathLike[str] | None = None,
    store: MemoryStore | None = None,
    progress: Progress | None = None,
    allow_changed: bool = False,
    flow_file: str | os.PathLike[str] | None = None,
    notice: Notice | None = None,
) -> RunResult:
    """Resume a failed or interrupted root run on an event loop of its own; see ``aresume``.

    Raises what ``aresume`` raises; ``FlowUsage`` when called from a running event loop, and
    ``RunInterrupted`` on Ctrl-C, once the run has settled.
    """
    return _sync(
        lambda started: _aresume(
            run_id,
            db=db,
            journal_location=journal_location,
            store=store,
            progress=progress,
            allow_changed=allow_changed,
            flow_file=flow_file,
            started=started,
        ),
        "resume",
        notice,
    )
