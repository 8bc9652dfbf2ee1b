"""What a journal can record of an error, whatever the error: its code and a message both backends
store.

An exception's text is data from anywhere: a file name decoded with ``surrogateescape`` puts a lone
surrogate in it (which no backend stores), a dump of a response makes it megabytes long, and a
``__str__`` may itself raise. The runtime, a memory session and a step record their failures
through ``error_record``, so that recording a failure never fails on its text, and a run is never
left running, or read ``interrupted``, because its error could not be written down.
"""

from __future__ import annotations

import hashlib

MESSAGE_MAX = 64 * 1024
"""The most characters of an error's message a record keeps: a longer one keeps its first three
quarters and last quarter of that, with a note between saying how much was cut and the SHA-256 of
the whole message (the same bound for the error's ``type``)."""

CODE_MAX = 128
"""The longest code recorded as an error's own; a longer (or unprintable) one is not taken as a code."""


def recordable_text(text: str, limit: int = MESSAGE_MAX) -> str:
    """``text`` as every backend can store it: each lone surrogate written as its escape
    (``\\udcff``, as Python's ``backslashreplace`` writes it), and when the result is longer than
    ``limit`` characters, its head and tail around a note of what was cut with the SHA-256 (hex)
    of the whole escaped text as UTF-8. ``limit`` must be at least 256."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    note = f" … [{len(text):,} characters; those here were cut; sha256 of the whole: {digest}] … "
    room = limit - len(note) - 16  # the count in the note may be wider than written here
    head, tail = room * 3 // 4, room - room * 3 // 4
    cut = len(text) - head - tail
    note = f" … [{cut:,} of {len(text):,} characters cut here; sha256 of the whole: {digest}] … "
    return f"{text[:head]}{note}{text[len(text) - tail :]}"


def error_text(exc: BaseException) -> str:
    """``str(exc)``; when that raises (a ``__str__`` reading an attribute some code paths never
    set), a note saying so, naming what it raised."""
    try:
        text = str(exc)
    except Exception as failure:  # the error's own text failed: say so instead
        try:
            why = f"{type(failure).__name__}: {failure}"
        except Exception:
            why = type(failure).__name__
        return f"<str() of the exception failed with {why}>"
    return text


def is_code(value: object) -> bool:
    """Whether ``value`` can be recorded as an error's code: printable text of 1 to ``CODE_MAX``
    characters, valid UTF-8."""
    if not isinstance(value, str) or not 0 < len(value) <= CODE_MAX or not value.isprintable():
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def error_record(exc: BaseException, uncoded: str, *, own_code: bool = True) -> dict[str, str]:
    """``{"code", "message"}`` describing ``exc``, recordable whatever it is.

    The code is the exception's own ``code`` when it has one that ``is_code`` (with ``own_code``
    False, only a ``staging.CodedError`` or ``CodedInterrupt`` has one), and its message is its
    text; otherwise the code is ``uncoded`` and the message ``<Type>: <text>``. The message goes
    through ``recordable_text`` (``error_text`` when ``str`` raises)."""
    code: object = None
    if own_code:
        try:
            code = getattr(exc, "code", None)
        except Exception:  # a property that raises: no code of its own
            code = None
    else:
        from staging import CodedError, CodedInterrupt

        if isinstance(exc, CodedError | CodedInterrupt):
            code = exc.code
    if isinstance(code, str) and is_code(code):
        return {"code": code, "message": recordable_text(error_text(exc))}
    return {"code": uncoded, "message": recordable_text(f"{type(exc).__name__}: {error_text(exc)}")}
