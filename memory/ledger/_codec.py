"""The ledger's line codec: one entry per line, the entry schema exactly, no envelope."""

from __future__ import annotations

import orjson

from journal import LineDamaged
from memory.ledger._entries import Entry, entry_from_wire
from memory.ledger._errors import LedgerInvalidEntry


class LedgerCodec:
    """Encodes entries with orjson and validates every decoded line against the schema.

    A line that is not JSON may be what a torn append leaves (``LineDamaged(torn=True)``); a line
    that is a well-formed JSON object but breaks the schema is damage wherever it is
    (``torn=False``), so the line log fails closed on it even as the last line.
    """

    def encode(self, record: Entry, /) -> bytes:
        """Return ``record`` as one JSON line (keys in the schema's order, no newline)."""
        return orjson.dumps(record.to_wire())

    def decode(self, line: bytes, /) -> Entry:
        """Return the entry a line holds.

        Raises:
            LineDamaged: the bytes are not JSON, or the JSON breaks the schema.
        """
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise LineDamaged(f"not JSON: {exc}") from None
        try:
            return entry_from_wire(obj)
        except LedgerInvalidEntry as exc:
            raise LineDamaged(f"not a ledger entry: {exc.field}: {exc.reason}", torn=False) from None
