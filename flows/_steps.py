"""Durable steps: a function's result journaled once, replayed on resume instead of called again.

A step is keyed by its name and its *call position*. The position says where in the body the call
was made, in a way that does not depend on timing, so the same call gets the same key on every
execution of the body:

* Every task of the body has a path. The body's own task has the empty path; the k-th task that a
  body task creates (``asyncio.gather`` of coroutines, ``create_task``, a ``TaskGroup``) has its
  creator's path followed by ``k``. Tasks are counted in the order the creating task creates them,
  which is program order, never completion order.
* Within one task, the n-th call of ``f.step`` with a given name has position ``path + (n,)``.
* The key is ``name#`` followed by the position's numbers joined by dots: ``fetch#3`` is the third
  ``fetch`` of the body itself, ``fetch#2.1`` the first ``fetch`` of the second task it created.

The runtime learns of each task's creation through the event loop's task factory, which it wraps
while a body runs (chaining to any factory already set). The runtime's own tasks (a learn's, a
step's) are not counted, so a replayed step starts exactly the tasks a first run did.

What is recorded, in the root run's ``steps`` stream: one record per attempt. A failed attempt
that will be retried is keyed ``<key>~<attempt>``; the last attempt (success, or the failure that
used up the retries) is keyed ``<key>`` and is the step's outcome. A step whose outcome is
recorded is never called again in that run; one whose process died before its outcome was
recorded runs again (at least once until recorded, never after).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import sys
import threading
import time
import weakref
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

import orjson

import journal
from flows._errors import StepFailed, StepInvalid, StepResultInvalid
from journal import JournalBackend, JournalCorrupt, Lease, Record

T = TypeVar("T")

STEPS_STREAM = "steps"
MAX_JSON_BYTES = 8 * 1024 * 1024  # a step result, a flow's input or output, encoded
MAX_RETRIES = 1000
MAX_NAME = 128
_MAX_DEPTH = 200
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1


# -- JSON values ------------------------------------------------------------------------------


class NotJson(ValueError):
    """A value that cannot be journaled as JSON; ``where`` is its path (``$.items[2]``)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


def _check_scalar(value: Any, where: str) -> bool:
    """Check a JSON scalar; False when ``value`` is not a scalar at all."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int):
        if not _INT_MIN <= int.__int__(value) <= _INT_MAX:  # its own number, as orjson writes it
            raise NotJson(where, "an integer outside the signed 64-bit range")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise NotJson(where, f"{value!r} is not a JSON number")
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise NotJson(where, "a string that is not valid Unicode (a lone surrogate)") from None
    else:
        return False
    return True


_KEY_SHOWN = 256  # the most characters of a key a path quotes


def _shown_key(key: str) -> str:
    escaped = journal.recordable_text(key, sys.maxsize)
    return escaped if len(escaped) <= _KEY_SHOWN else f"{escaped[:_KEY_SHOWN]}…"


def _check(value: Any, where: str, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise NotJson(where, f"nested deeper than {_MAX_DEPTH} levels")
    if _check_scalar(value, where):
        return
    # A container is read as orjson reads it, from its own storage, not through methods a subclass
    # may override (an ``items`` or ``__iter__`` that leaves a part out would hide a NaN that orjson
    # then writes as null, or an integer past 64 bits)
    if isinstance(value, list | tuple):
        items = list.__iter__(value) if isinstance(value, list) else tuple.__iter__(value)
        for i, item in enumerate(items):
            _check(item, f"{where}[{i}]", depth + 1)
    elif isinstance(value, dict):
        for k, item in dict.items(value):
            if not isinstance(k, str):
                raise NotJson(where, f"an object key {k!r} that is not a string")
            # the path quotes the key recordable (a lone surrogate escaped, a long key cut): the
            # error that names it is recorded as the run's failure
            path = f"{where}.{k}" if k.isascii() and len(k) <= _KEY_SHOWN else f"{where}.{_shown_key(k)}"
            _check_scalar(k, path)
            _check(item, path, depth + 1)
    else:
        raise NotJson(where, f"a {type(value).__name__}, which is not a JSON value")


def _plain_float(value: Any) -> float:
    """A float of a subclass (``numpy.float64``, say), checked finite already, as a plain float."""
    if isinstance(value, float):
        return float.__float__(value)  # its own number, not what a __float__ of the subclass says
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def json_value(value: Any) -> Any:
    """``value`` as the journal will give it back: JSON types only, tuples as lists, object keys
    sorted, a float of a subclass (``numpy.float64``) as a plain float. So a first run sees exactly
    what a replay will.

    Raises:
        NotJson: a value that is not null, a boolean, a 64-bit integer, a finite float, a string,
            a list/tuple or a string-keyed dict of those; or encodes to more than 8 MiB.
    """
    _check(value, "$", 0)
    try:
        data = orjson.dumps(value, default=_plain_float, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as exc:  # a container subclass that hid a part from the check
        raise NotJson("$", f"a part that is not a JSON value ({exc})") from None
    if len(data) > MAX_JSON_BYTES:
        raise NotJson("$", f"{len(data)} bytes encoded, over the {MAX_JSON_BYTES}-byte limit")
    return orjson.loads(data)


# -- the awaitable handle ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Escaped:
    """A ``BaseException`` out of a step's function (``SystemExit``, say), carried to the awaiter:
    raised inside the step's own task it would stop the whole event loop."""

    exc: BaseException


class Step(Generic[T]):
    """A learn or a durable step in flight: started at once, awaited by the body for its outcome.

    Awaiting it returns the result or raises the error. Cancelling the awaiter (``asyncio.gather``
    cancelled by Ctrl-C, say) does not cancel the work: the run waits for it to settle. A step
    the body never awaits fails the run with ``unawaited_step``, even if its work succeeded.
    """

    def __init__(self, name: str, task: asyncio.Task[Any]) -> None:
        self.name = name
        self._task = task
        self.consumed = False

    def __await__(self) -> Generator[Any, None, T]:
        self.consumed = True
        value = yield from asyncio.shield(self._task).__await__()
        if isinstance(value, _Escaped):
            raise value.exc
        result: T = value
        return result

    @property
    def task(self) -> asyncio.Task[Any]:
        """The task doing the work."""
        return self._task

    def __repr__(self) -> str:
        return f"<{self.name}>"


async def settle(
    handles: Sequence[Step[Any]], *, waiting: Callable[[int], None] | None = None, every_s: float = 5.0
) -> None:
    """Wait until every handle's work has finished, retrieving each outcome so none is left
    unobserved; a cancel of the waiter does not stop the wait (the work goes on regardless).

    ``waiting``, when given, is told how many are still unfinished: at once (when any is), then
    every ``every_s`` seconds while some are."""
    pending = [h.task for h in handles if not h.task.done()]
    tell = waiting is not None
    while pending:
        if waiting is not None and tell:
            waiting(len(pending))
        try:
            await asyncio.wait(pending, timeout=every_s if waiting is not None else None)
        except asyncio.CancelledError:  # a second cancel: the work still settles
            tell = False  # what is left is being cancelled, not worked on: nothing more to tell
        pending = [t for t in pending if not t.done()]
    for h in handles:
        if not h.task.cancelled():
            h.task.exception()


# -- call positions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Place:
    """Where a task stands in a run: its path, or None inside a step's function."""

    steps: StepRunner
    path: tuple[int, ...] | None


_PLACES: weakref.WeakKeyDictionary[asyncio.Task[Any], _Place] = weakref.WeakKeyDictionary()
_creating = threading.local()  # .kind: "learn" / "step" while the runtime creates its own task

TaskFactory = Callable[..., Any]


@dataclass
class _Hook:
    factory: TaskFactory
    previous: TaskFactory | None
    users: int


_HOOKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Hook] = weakref.WeakKeyDictionary()


def _chained(previous: TaskFactory | None) -> TaskFactory:
    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        parent = asyncio.current_task(loop)
        task: asyncio.Task[Any]
        if previous is not None:
            task = previous(loop, coro, **kwargs)
        else:
            task = asyncio.Task(coro, loop=loop, **kwargs)
        place = _PLACES.get(parent) if parent is not None else None
        if place is None:
            return task
        kind = getattr(_creating, "kind", None)
        if kind == "step" or place.path is None:
            _PLACES[task] = _Place(place.steps, None)
        elif kind is None:
            _PLACES[task] = _Place(place.steps, place.steps.child_path(place.path))
        return task

    return factory


def _attach(loop: asyncio.AbstractEventLoop) -> None:
    hook = _HOOKS.get(loop)
    if hook is not None and loop.get_task_factory() is hook.factory:
        hook.users += 1
        return
    previous = loop.get_task_factory()
    hook = _HOOKS[loop] = _Hook(_chained(previous), previous, 1)
    loop.set_task_factory(hook.factory)


def _detach(loop: asyncio.AbstractEventLoop) -> None:
    hook = _HOOKS.get(loop)
    if hook is None:
        return
    hook.users -= 1
    if hook.users <= 0:
        del _HOOKS[loop]
        if loop.get_task_factory() is hook.factory:
            loop.set_task_factory(hook.previous)


def create_task(kind: str, coro: Any) -> asyncio.Task[Any]:
    """Create one of the runtime's own tasks (``kind`` "learn" or "step"): not counted in any
    position, and a step's task marks everything it starts as inside a step."""
    _creating.kind = kind
    try:
        return asyncio.get_running_loop().create_task(coro)
    finally:
        _creating.kind = None


# -- retries ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Backoff:
    """How long to wait before each retry: ``initial`` seconds, times ``factor`` per retry, at most
    ``cap`` seconds. The wait before retry ``k`` (k from 1) is ``min(cap, initial * factor**(k-1))``.
    """

    initial: float = 1.0
    factor: float = 2.0
    cap: float = 60.0

    def __post_init__(self) -> None:
        for name in ("initial", "factor", "cap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise StepInvalid(f"Backoff({name}=...) takes a finite number of seconds, not {value!r:.80}")
        if self.initial < 0 or self.cap < 0 or self.factor < 1:
            raise StepInvalid(
                f"Backoff needs initial >= 0, cap >= 0 and factor >= 1 (got {self.initial}, "
                f"{self.cap}, {self.factor})"
            )

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        exponent = min(retry - 1, 1024)
        try:
            return float(min(self.cap, self.initial * self.factor**exponent))
        except OverflowError:
            return float(self.cap)


DEFAULT_BACKOFF = Backoff()


def _backoff_of(value: Backoff | float) -> Backoff:
    if isinstance(value, Backoff):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise StepInvalid(f"backoff= takes seconds or a flows.Backoff, not {value!r:.80}")
    return Backoff(initial=float(value), cap=max(DEFAULT_BACKOFF.cap, float(value)))


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise StepInvalid(f"a step's name is a string of 1-{MAX_NAME} characters, not {name!r:.80}")
    if not all(ch.isprintable() for ch in name):
        raise StepInvalid(f"a step's name must be printable text (no control characters): {name!r}")
    return name


# -- recorded outcomes ------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """A step's recorded outcome, as read back from its record."""

    key: str
    attempt: int
    ok: bool
    result: Any
    error: Mapping[str, Any] | None


def _corrupt(backend: JournalBackend, rec: Record, reason: str) -> JournalCorrupt:
    return JournalCorrupt(
        f"record {rec.seq} of stream {STEPS_STREAM} in root run {rec.run_id} is not a step record "
        f"({reason}); the journal at {backend.location} was damaged or written by something else",
        path=backend.location,
        line=rec.seq,
        reason=reason,
        run_id=rec.run_id,
        stream=STEPS_STREAM,
    )


def parse_step_record(backend: JournalBackend, rec: Record) -> tuple[str, Outcome]:
    """The step key and outcome a ``steps`` record holds, checked in full (a record is untrusted).

    Raises:
        JournalCorrupt: the record does not have a step record's exact shape and key.
    """
    p = rec.payload
    step, position, attempt = p.get("step"), p.get("position"), p.get("attempt")
    final, ok = p.get("final"), p.get("ok")
    if not (isinstance(step, str) and isinstance(position, str) and isinstance(final, bool)):
        raise _corrupt(backend, rec, "missing step, position or final")
    if not isinstance(ok, bool) or isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise _corrupt(backend, rec, "missing ok or a positive attempt")
    # a step retries at most MAX_RETRIES times: an attempt to be retried is at most MAX_RETRIES, the
    # last one at most one more; the runtime never wrote a larger count
    top = MAX_RETRIES + 1 if final else MAX_RETRIES
    if attempt > top:
        raise _corrupt(backend, rec, f"attempt {attempt} is past the {top} a step can reach")
    key = f"{step}#{position}"
    if rec.key != (key if final else f"{key}~{attempt}"):
        raise _corrupt(backend, rec, f"its key {rec.key!r} does not match step {key!r}")
    error = p.get("error")
    if ok and (not final or "result" not in p):
        raise _corrupt(backend, rec, "a success without a final result")
    if not ok and not (
        isinstance(error, Mapping)
        and isinstance(error.get("code"), str)
        and isinstance(error.get("message"), str)
    ):
        raise _corrupt(backend, rec, "a failure without an error code and message")
    return key, Outcome(key, attempt, ok, p.get("result"), None if ok else error)


# -- running steps ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    """One step call: its key and parts, the function with its arguments bound, its retry plan."""

    key: str
    name: str
    position: str
    fn: partial[Any]
    retries: int
    backoff: Backoff


def _error_fields(exc: BaseException) -> dict[str, Any]:
    """A failed attempt's ``error``: always recordable, whatever the exception's text (see
    ``journal.error_record``), so the attempt is recorded and its retries and ``StepFailed`` hold."""
    fields: dict[str, Any] = journal.error_record(exc, "flow_failed")
    fields["type"] = journal.recordable_text(f"{type(exc).__module__}.{type(exc).__qualname__}")
    return fields


class StepRunner:
    """The steps of one execution of a body under one lease: positions, the recorded outcomes it
    replays, and the journaling of new ones."""

    def __init__(self, backend: JournalBackend, lease: Lease, recorded: Sequence[Record] = ()) -> None:
        self._backend = backend
        self._lease = lease
        self._outcomes: dict[str, Outcome] = {}
        self._attempts: dict[str, int] = {}  # key -> attempts recorded (resuming a retry)
        for rec in recorded:
            key, outcome = parse_step_record(backend, rec)
            self._attempts[key] = max(self._attempts.get(key, 0), outcome.attempt)
            if rec.key == key:
                self._outcomes.setdefault(key, outcome)
        self._children: dict[tuple[int, ...], int] = {}
        self._calls: dict[tuple[tuple[int, ...], str], int] = {}
        self.handles: list[Step[Any]] = []
        self.closed = False

    @property
    def run_id(self) -> str:
        """The root run's id."""
        return self._lease.run_id

    # positions

    def child_path(self, parent: tuple[int, ...]) -> tuple[int, ...]:
        """The path of the next task that the task at ``parent`` creates."""
        n = self._children[parent] = self._children.get(parent, 0) + 1
        return (*parent, n)

    def enter(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        """Make ``task`` the body's task (the empty path) and start counting the tasks it creates."""
        _attach(loop)
        _PLACES[task] = _Place(self, ())

    def leave(self, loop: asyncio.AbstractEventLoop) -> None:
        """Stop counting (the body has ended and every step has settled)."""
        self.closed = True
        _detach(loop)

    def _position(self, name: str) -> tuple[int, ...]:
        task = asyncio.current_task()
        place = _PLACES.get(task) if task is not None else None
        if place is None or place.steps is not self:
            raise StepInvalid(
                f"f.step({name!r}, ...) was called outside the flow body's tasks, so it has no call "
                "position; call it from the body or a task the body created",
                step=name,
                run_id=self.run_id,
            )
        if place.path is None:
            raise StepInvalid(
                f"f.step({name!r}, ...) was called inside another step's function; call the inner "
                "work directly there, or make it a step of the body",
                step=name,
                run_id=self.run_id,
            )
        call = (place.path, name)
        n = self._calls[call] = self._calls.get(call, 0) + 1
        return (*place.path, n)

    # starting a step

    def start(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        retries: int,
        backoff: Backoff | float,
    ) -> Step[Any]:
        """Start a step now (see ``FlowContext.step``) and return its handle.

        Raises:
            StepInvalid: a bad name, function, ``retries`` or ``backoff``, or no call position.
        """
        if self.closed:
            raise StepInvalid(f"f.step({name!r}, ...) after the run ended", step=name, run_id=self.run_id)
        _check_name(name)
        if not callable(fn):
            raise StepInvalid(f"step {name!r}: {fn!r} is not callable", step=name, run_id=self.run_id)
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRIES:
            raise StepInvalid(
                f"step {name!r}: retries= takes an integer from 0 to {MAX_RETRIES}, not {retries!r:.80}",
                step=name,
                run_id=self.run_id,
            )
        plan = _backoff_of(backoff)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise StepInvalid(
                f"f.step({name!r}, ...) must be called on the flow body's event loop", step=name
            ) from None
        position = ".".join(str(n) for n in self._position(name))
        key = f"{name}#{position}"
        call = _Call(key, name, position, partial(fn, *args, **kwargs), retries, plan)
        task = create_task("step", self._execute(call))
        handle: Step[Any] = Step(f"step {key}", task)
        self.handles.append(handle)
        return handle

    async def _execute(self, call: _Call) -> Any:
        try:
            return await self._attempts_of(call)
        except (Exception, asyncio.CancelledError):
            raise
        except BaseException as exc:  # SystemExit and the like: hand it to the awaiter, unrecorded
            return _Escaped(exc)

    async def _attempts_of(self, call: _Call) -> Any:
        key = call.key
        recorded = self._outcomes.get(key)
        if recorded is not None:
            return self._replay(recorded, replayed=True)
        attempt = self._attempts.get(key, 0)
        while True:
            attempt += 1
            final = attempt > call.retries
            started_ms, t0 = int(time.time() * 1000), time.monotonic()
            base = {"step": call.name, "position": call.position, "attempt": attempt}
            base["epoch"] = self._lease.epoch
            try:
                value = await _call(call.fn)
            except Exception as exc:
                payload: dict[str, Any] = {
                    **base,
                    "final": final,
                    "ok": False,
                    "error": _error_fields(exc),
                    "startedMs": started_ms,
                    "durationMs": _elapsed_ms(t0),
                }
                wait = 0.0 if final else call.backoff.delay(attempt)
                if not final:
                    payload["retryInMs"] = round(wait * 1000)
                outcome = await self._record(payload, key if final else f"{key}~{attempt}")
                if final:
                    if outcome.ok:  # an earlier commit of this step won: it stands
                        return outcome.result
                    raise self._failure(outcome, replayed=False) from exc
                await asyncio.sleep(wait)
                continue
            try:
                result = json_value(value)
            except NotJson as exc:
                raise StepResultInvalid(
                    f"step {key} returned a value that cannot be journaled: {exc} "
                    "(a step must return JSON: null, booleans, numbers, strings, lists, string-keyed "
                    "dicts); nothing was recorded, so a resumed run calls it again",
                    step=key,
                    run_id=self.run_id,
                ) from None
            payload = {
                **base,
                "final": True,
                "ok": True,
                "result": result,
                "startedMs": started_ms,
                "durationMs": _elapsed_ms(t0),
            }
            return self._replay(await self._record(payload, key), replayed=False)

    async def _record(self, payload: dict[str, Any], record_key: str) -> Outcome:
        append = self._backend.append
        rec = await asyncio.to_thread(append, self._lease, STEPS_STREAM, payload, key=record_key)
        key, outcome = parse_step_record(self._backend, rec)
        if rec.key == key:
            self._outcomes.setdefault(key, outcome)
        return outcome

    def _replay(self, outcome: Outcome, *, replayed: bool) -> Any:
        if outcome.ok:
            return outcome.result
        raise self._failure(outcome, replayed=replayed)

    def _failure(self, outcome: Outcome, *, replayed: bool) -> StepFailed:
        error = outcome.error or {}
        code, message = str(error.get("code")), str(error.get("message"))
        how = "as recorded" if replayed else "and this is recorded"
        return StepFailed(
            f"step {outcome.key} failed on attempt {outcome.attempt} {how}: [{code}] {message}; a "
            "resumed run raises this again without calling the function (catch flows.StepFailed "
            "in the body to go on without it)",
            step=outcome.key,
            attempt=outcome.attempt,
            error_code=code,
            error_message=message,
            replayed=replayed,
            run_id=self.run_id,
        )


async def _call(fn: partial[Any]) -> Any:
    """Call ``fn``: a coroutine function on the loop, anything else on a worker thread (awaiting
    what it returns when that is awaitable: ``lambda: client.get(url)``, say)."""
    if inspect.iscoroutinefunction(fn):
        return await fn()
    value = await asyncio.to_thread(fn)
    if inspect.isawaitable(value):
        value = await value
    return value


def _elapsed_ms(t0: float) -> int:
    return round((time.monotonic() - t0) * 1000)
