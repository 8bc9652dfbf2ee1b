"""Declaring a flow: ``@flows.flow(name=, scope=, memory={"script": True})`` on ``async def body(f)``."""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, overload

from flows._errors import FlowLoadFailed

Body = Callable[[Any], Awaitable[Any]]


@dataclass(frozen=True)
class Header:
    """What a flow declares; recorded in its root run so ``resume`` re-runs the same body."""

    name: str
    scope: str
    script: bool = True

    def as_json(self) -> dict[str, Any]:
        """The header as stored in the root run's metadata."""
        return {"name": self.name, "scope": self.scope, "memory": {"script": self.script}}


def source_digest(data: bytes) -> str:
    """The SHA-256 hex digest a root run records for its flow file's bytes."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Flow:
    """A flow: its header, its body, the file that defines it and, when it was loaded from that
    file by ``load_flow``, the digest of the very bytes that were executed."""

    header: Header
    body: Body
    source: Path | None
    source_sha256: str | None = None

    async def __call__(self, f: Any) -> Any:
        """Run the body with the flow context ``f``; returns what the body returns."""
        return await self.body(f)

    def digest(self) -> str | None:
        """The SHA-256 of the flow file: of the bytes executed when loaded by ``load_flow``, else of
        the file as it is now; None when the flow has no file or it cannot be read."""
        if self.source_sha256 is not None:
            return self.source_sha256
        if self.source is None:
            return None
        try:
            return source_digest(self.source.read_bytes())
        except OSError:
            return None


def _source_of(fn: Body) -> Path | None:
    try:
        src = inspect.getsourcefile(fn)
    except TypeError:
        return None
    return Path(src).resolve() if src else None


def _make(fn: Body, name: str | None, scope: str | None, memory: Mapping[str, Any] | None) -> Flow:
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"a flow body must be `async def body(f)`, not {fn!r}")
    source = _source_of(fn)
    flow_name = name or (source.stem if source else fn.__name__)
    script = (memory or {}).get("script", True)
    if not isinstance(script, bool):
        raise TypeError("memory={'script': ...} takes True or False")
    return Flow(Header(name=flow_name, scope=scope or flow_name, script=script), fn, source)


@overload
def flow(fn: Body, /) -> Flow: ...
@overload
def flow(
    *, name: str | None = None, scope: str | None = None, memory: Mapping[str, Any] | None = None
) -> Callable[[Body], Flow]: ...


def flow(
    fn: Body | None = None,
    /,
    *,
    name: str | None = None,
    scope: str | None = None,
    memory: Mapping[str, Any] | None = None,
) -> Flow | Callable[[Body], Flow]:
    """Declare ``async def body(f)`` a flow. Every argument is optional.

    Args:
        name: the flow's name (default: the stem of the file that defines it).
        scope: the memory scope its findings live in (default: the name).
        memory: ``{"script": False}`` makes every ``f.memory.learn`` fail with ``unsupported_header``.

    Raises:
        TypeError: the body is not an ``async def``, or ``memory["script"]`` is not a bool: a
            programming error of the flow's author. A flow file run from the CLI that does this
            fails to load, as ``flow_load_failed`` naming the file.
    """
    if fn is not None:
        return _make(fn, name, scope, memory)
    return lambda body: _make(body, name, scope, memory)


def _import_failure(path: Path, exc: BaseException) -> str:
    """What a failed import of the flow file says: an exit at import is named as one, so nobody
    reads ``sys.exit(0)`` in a flow file as a run that succeeded."""
    if isinstance(exc, SystemExit):
        code = f"sys.exit({exc.code!r})"
        return f"{path} exited while it was imported ({code}); a flow file must only define its flow"
    return f"{path} failed to import: {type(exc).__name__}: {exc}"


def _missing(given: Path, path: Path) -> str:
    """What a flow file that is not there says: a link to nothing is named as one (its target is
    what is missing), not as a missing file at a path the user never gave."""
    try:
        target = os.readlink(given)
    except OSError:
        return f"no flow file at {path}: check the path"
    return (
        f"the flow file {given} is a link to {target}, which does not exist: make it lead to the "
        "flow's .py file"
    )


def load_flow(
    path: str | os.PathLike[str], name: str | None = None, *, check: Callable[[str], None] | None = None
) -> Flow:
    """Import the file at ``path`` and return its flow (the one named ``name`` if it has several).

    ``check``, when given, is called with the SHA-256 of the bytes read before any of them runs: what
    it raises (a resume's ``FlowChanged``) propagates, and nothing of the file has run.

    Raises:
        FlowLoadFailed: the file is missing or fails to import (any exception, ``SystemExit`` and
            ``GeneratorExit`` too), or does not hold exactly one flow (or none named ``name``).
        KeyboardInterrupt: Ctrl-C (or the file raising it) while the file was imported.
    """
    given = Path(path)
    try:
        path = given.resolve()
        found_file = path.is_file()
    except (OSError, RuntimeError) as exc:  # a name too long, a folder this user may not search
        # a loop of links: RuntimeError before Python 3.13, ELOOP after
        if isinstance(exc, RuntimeError) or exc.errno == errno.ELOOP:
            why = "is a symbolic link that leads back to itself (a loop of links): name the flow's .py file"
            raise FlowLoadFailed(f"the flow file {given} {why}", path=given) from exc
        raise FlowLoadFailed(
            f"cannot look at the flow file {given}: {exc.strerror or exc}", path=given
        ) from exc
    if not found_file:
        if path.is_dir():
            raise FlowLoadFailed(f"{path} is a folder, not a flow file: name the flow's .py file", path=path)
        if os.path.lexists(path):  # a FIFO, a socket, a device: never opened (a FIFO would block)
            raise FlowLoadFailed(
                f"{path} is not a regular file (a FIFO, a socket or a device): name the flow's .py file",
                path=path,
            )
        raise FlowLoadFailed(_missing(given, path), path=path)
    module_name = f"_flows_user_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise FlowLoadFailed(
            f"{path} is not a Python file (its name does not end in .py): a flow is imported from a "
            ".py file; give it such a name",
            path=path,
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FlowLoadFailed(f"cannot read {path}: {exc.strerror or exc}", path=path) from exc
    if check is not None:
        check(source_digest(data))
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:  # execute the bytes that were hashed, so the recorded digest names the code that ran
        exec(compile(data, str(path), "exec"), module.__dict__)  # noqa: S102 - loading the user's flow
    except KeyboardInterrupt:  # Ctrl-C while importing: an interruption, not the file's verdict
        sys.modules.pop(module_name, None)
        raise
    except BaseException as exc:  # an exit at import (SystemExit, GeneratorExit) is a failed load too
        sys.modules.pop(module_name, None)
        raise FlowLoadFailed(_import_failure(path, exc), path=path) from exc
    found = [v for v in vars(module).values() if isinstance(v, Flow)]
    if name is not None:
        named = [f for f in found if f.header.name == name]
        # a flow without a name of its own is named after its file: the same flow in a renamed
        # file (``flows resume --file moved.py``) has its new name, and is the one asked for
        renamed = [f for f in found if f.header.name == path.stem]
        found = named or (renamed if len(found) == 1 else [])
    if len(found) != 1:
        what = "no flow" if not found else f"{len(found)} flows"
        raise FlowLoadFailed(
            f"{path} defines {what}{f' named {name!r}' if name else ''}; decorate exactly one "
            "`async def body(f)` with @flows.flow",
            path=path,
        )
    return replace(found[0], source_sha256=source_digest(data))
