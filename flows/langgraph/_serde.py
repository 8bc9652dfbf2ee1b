"""Decoding a checkpoint's bytes without letting the bytes choose code.

LangGraph's msgpack values name Python types in extension records (``module``, ``name``, args),
and its default serializer imports whatever module such a record names and calls what it finds
there. A journal is read back from disk or a server that someone else may write to, so the saver
never hands it that choice: every extension is checked against an allow-list *before* LangGraph's
hook sees it, and a record that names anything else is refused.

The allow-list is LangGraph's own strict-mode list (``SAFE_MSGPACK_TYPES``: datetimes, UUIDs,
decimals, sets, LangChain messages and documents, ``Send``/``Command``/``Interrupt`` …) plus the
types a ``JournalSaver`` was given in ``allowed_types``. Method calls are limited to LangGraph's
``SAFE_MSGPACK_METHODS``. A NumPy array is decoded only when NumPy is already imported (a program
that keeps arrays in its state has imported it; a crafted record never makes anyone import it).
The only value kinds read are those the saver writes: ``null``, ``bytes``, ``bytearray`` and
``msgpack`` (never ``pickle``, never LangGraph's older ``json`` with its constructor reviver), unless
a custom serde was passed, which then decides those other kinds itself.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde import _msgpack as lg_msgpack
from langgraph.checkpoint.serde import jsonplus
from langgraph.checkpoint.serde.base import SerializerProtocol

_CONSTRUCTORS = (
    jsonplus.EXT_CONSTRUCTOR_SINGLE_ARG,
    jsonplus.EXT_CONSTRUCTOR_POS_ARGS,
    jsonplus.EXT_CONSTRUCTOR_KW_ARGS,
    jsonplus.EXT_PYDANTIC_V1,
    jsonplus.EXT_PYDANTIC_V2,
)
_KINDS = ("null", "bytes", "bytearray", "msgpack")
"""The value kinds the saver writes, and so the only ones its own decoder reads."""


class Refused(Exception):
    """Bytes that name a type, method or kind outside the allow-list; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _type_key(entry: tuple[str, ...] | type) -> tuple[str, str]:
    if isinstance(entry, type):
        return (entry.__module__, entry.__qualname__)
    if not (isinstance(entry, tuple) and len(entry) == 2 and all(isinstance(p, str) for p in entry)):
        raise TypeError(f"an allowed type is a class or a (module, name) pair, not {entry!r}")
    return (entry[0], entry[1])


class StrictDecoder:
    """Decodes ``(kind, bytes)`` pairs, checking every msgpack extension against the allow-list.

    Args:
        allowed_types: classes or ``(module, name)`` pairs allowed beside LangGraph's safe list.
        serde: a serializer to hand checked bytes to (default: none; this class decodes itself).

    ``loads`` raises ``Refused`` for bytes that name anything outside the list, and whatever the
    msgpack decoder raises for damaged bytes (the saver turns both into ``RecordInvalid``).
    """

    def __init__(
        self, allowed_types: Iterable[tuple[str, ...] | type] = (), serde: SerializerProtocol | None = None
    ) -> None:
        extra = {_type_key(t) for t in allowed_types}
        self._allowed: frozenset[tuple[str, ...]] = frozenset(lg_msgpack.SAFE_MSGPACK_TYPES | extra)
        # LangGraph's strict hook builds what the check let through (with the same list).
        self._build = jsonplus._create_msgpack_ext_hook(set(extra) or None)
        self._serde = serde

    def extended(self, extra: Iterable[tuple[str, ...] | type]) -> StrictDecoder:
        """A decoder that also allows ``extra`` (classes or ``(module, name)`` pairs)."""
        wider = StrictDecoder((), self._serde)
        more = {_type_key(t) for t in extra}
        wider._allowed = self._allowed | more
        base = {k for k in self._allowed if k not in lg_msgpack.SAFE_MSGPACK_TYPES} | more
        wider._build = jsonplus._create_msgpack_ext_hook(base or None)
        return wider

    def loads(self, typed: tuple[str, bytes]) -> Any:
        """The value ``typed`` holds; ``Refused`` when its bytes name anything not allowed."""
        kind, data = typed
        if kind == "msgpack" and self._serde is None:
            try:  # no hook: an extension fails this decode (nothing is built), as damage does
                return ormsgpack.unpackb(data, option=ormsgpack.OPT_NON_STR_KEYS)
            except Exception:
                return self._unpack(data)  # checks every extension, or raises what damage raises
        if self._serde is not None:
            if kind == "msgpack":
                self._unpack(data)  # the check alone; the custom serde decodes
            return self._serde.loads_typed(typed)
        if kind == "null":
            return None
        if kind == "bytes":
            return bytes(data)
        if kind == "bytearray":
            return bytearray(data)
        raise Refused(f"the value kind {kind[:40]!r} is not one the saver writes ({', '.join(_KINDS)})")

    def _unpack(self, data: bytes) -> Any:
        """Check every extension ``data`` holds, then build the value once.

        The check is a pass of its own in which an extension stands for nothing (None): each
        extension's bytes are read once by its check, never rebuilt by the checks of those that
        hold it. (Building within the check made every level rebuild all it holds with LangGraph's
        hook: a crafted value of 50 nested extensions around 7 MB took half a minute to read.)
        Without any extension the check's pass is the value; with one, LangGraph's hook builds it
        from the same bytes, which the check has let through."""
        refused: list[str] = []
        seen: list[int] = []
        hook = self._hook(refused, seen)
        try:
            value = ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        except Exception:
            if refused:  # the decoder wraps what the hook raised in its own ValueError
                raise Refused(refused[0]) from None
            raise
        if not seen:
            return value
        return ormsgpack.unpackb(data, ext_hook=self._build, option=ormsgpack.OPT_NON_STR_KEYS)

    def _hook(self, refused: list[str], seen: list[int]) -> Callable[[int, bytes], Any]:
        """An extension hook that checks (recording a refusal in ``refused``, an extension met in
        ``seen``) and builds nothing."""

        def hook(code: int, data: bytes) -> Any:
            if not seen:
                seen.append(code)
            try:
                self._check(code, data, hook)
            except Refused as exc:
                refused.append(exc.reason)
                raise
            return None

        return hook

    def _check(self, code: int, data: bytes, hook: Callable[[int, bytes], Any]) -> None:
        if code == jsonplus.EXT_NUMPY_ARRAY:
            if "numpy" not in sys.modules:
                raise Refused("a NumPy array, and NumPy is not imported by this program")
            ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
            return
        if code == jsonplus.EXT_DELTA_SNAPSHOT:
            ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
            return
        if code not in (*_CONSTRUCTORS, jsonplus.EXT_METHOD_SINGLE_ARG):
            raise Refused(f"msgpack extension type {code}, which LangGraph does not write")
        tup = ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        if not isinstance(tup, list | tuple) or len(tup) < 3 or not all(isinstance(p, str) for p in tup[:2]):
            raise Refused(f"msgpack extension type {code} without a (module, name, …) tuple")
        name = f"{tup[0][:80]}.{tup[1][:80]}"
        if code == jsonplus.EXT_METHOD_SINGLE_ARG:
            method = tup[3] if len(tup) > 3 else None
            if not isinstance(method, str) or (tup[0], tup[1], method) not in lg_msgpack.SAFE_MSGPACK_METHODS:
                raise Refused(f"a call of {name}.{str(method)[:80]}, which is not an allowed method")
        elif (tup[0], tup[1]) not in self._allowed:
            raise Refused(
                f"the type {name}, which is not allowed (pass it in JournalSaver(allowed_types=…) "
                "if this program wrote it)"
            )
