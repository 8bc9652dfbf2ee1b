"""What ``flows runs``, ``flows show`` and the dashboard say about the LangGraph adapters' runs.

The adapters (``flows.langgraph``) write three kinds of root run: a *thread* run per generation of
a LangGraph thread (its ``checkpoints`` stream), the *catalog* (its ``threads`` stream registers
the generations) and a *store* run per open ``JournalStore`` (its learns and forgets are the items'
puts and deletes). This module reads them without importing LangGraph (``flows`` never does): the
records are JSON, and the few values shown (a checkpoint's metadata, the values a task wrote) are
msgpack read with ``ormsgpack`` when it is installed, every extension shown as the type it names,
never imported or called.

A thread run's journal state says whether a process holds its lease, which is not what a reader
asks: a thread that can take more checkpoints is ``open`` whether or not a process is writing it
now; it is ``closed`` once deleted or compacted into a newer generation (its run is then ``done``).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from journal import Record, RunInfo, RunState

# The adapters' names, repeated here so that reading them never imports LangGraph; a test checks
# they agree with ``flows.langgraph``.
THREAD_FLOW = "langgraph-thread"
CATALOG_FLOW = "langgraph-catalog"
STORE_FLOW = "langgraph-store"
CHECKPOINTS_STREAM = "checkpoints"
THREADS_STREAM = "threads"
STORE_SCOPE_PREFIX = "langgraph:"
STORE_SOURCE = "LangGraphStore"
_INTERNAL_METADATA = ("rev", "createdMs", "value", "key", "ttlMinutes")
_VALUE_CHARS = 2000  # a value shown is cut past this many characters of JSON


def describe(info: RunInfo) -> dict[str, Any] | None:
    """``{"role", "state", "threadId", "generation"}`` for a run the adapters wrote, else None.

    ``state`` is what a reader should see: ``open`` for a thread or the catalog still in use,
    ``closed`` for a thread deleted or compacted; the store's run keeps the journal's state.
    """
    if info.flow == THREAD_FLOW:
        meta = info.meta.get("langgraph")
        meta = meta if isinstance(meta, Mapping) else {}
        thread, gen = meta.get("thread"), meta.get("generation")
        return {
            "role": "thread",
            "state": _usable_state(info.state, "closed"),
            "threadId": thread if isinstance(thread, str) else None,
            "generation": gen if type(gen) is int else None,
        }
    if info.flow == CATALOG_FLOW:
        return {"role": "catalog", "state": _usable_state(info.state, "superseded")}
    if info.flow == STORE_FLOW:
        return {"role": "store", "state": info.state.value}
    return None


def _usable_state(state: RunState, finished: str) -> str:
    if state in (RunState.RUNNING, RunState.INTERRUPTED):
        return "open"
    return finished if state is RunState.DONE else state.value


def label(info: RunInfo, described: Mapping[str, Any] | None) -> str:
    """One short phrase naming what a LangGraph run holds, for a table's THREAD column."""
    if described is None:
        return ""
    if described["role"] == "thread":
        thread = described.get("threadId")
        return f"{thread if thread is not None else '?'} (gen {described.get('generation') or '?'})"
    return f"({described['role']})"


# -- values ---------------------------------------------------------------------------------------


def _ext(code: int, data: bytes) -> Any:
    """An extension as the type it names and its arguments; nothing is imported."""
    try:
        import ormsgpack
    except ImportError:  # only reached from ormsgpack's own decoder, but the view never requires it
        return {"$ext": code}

    try:
        inner = ormsgpack.unpackb(data, ext_hook=_ext, option=ormsgpack.OPT_NON_STR_KEYS)
    except Exception:
        return {"$ext": code}
    if isinstance(inner, list | tuple) and len(inner) >= 3 and all(isinstance(p, str) for p in inner[:2]):
        return {"$type": f"{inner[0]}.{inner[1]}", "value": inner[2]}
    return {"$ext": code, "value": inner}


def _plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON: bytes and other types by their name, keys as strings, depth bounded."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if depth > 20:
        return "…"
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    if isinstance(value, Mapping):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, depth + 1) for v in value]
    return f"<{type(value).__name__}>"


def decode_value(typed: Any) -> Any:
    """A ``[kind, base64]`` value of a checkpoint record as JSON (see the module docstring);
    ``{"$unreadable": kind}`` when it cannot be read here."""
    if not (
        isinstance(typed, list | tuple) and len(typed) >= 2 and all(isinstance(p, str) for p in typed[:2])
    ):
        return {"$unreadable": "shape"}
    kind = typed[0]
    if kind not in ("null", "empty", "bytes", "bytearray", "msgpack"):
        return {"$unreadable": kind[:40]}
    try:
        data = base64.b64decode(typed[1], validate=True)
        if kind != "msgpack":
            return f"<{len(data)} bytes>" if data else None
        import ormsgpack

        return _plain(ormsgpack.unpackb(data, ext_hook=_ext, option=ormsgpack.OPT_NON_STR_KEYS))
    except ImportError:
        return {"$unreadable": "msgpack, and ormsgpack is not installed"}
    except Exception:  # damaged base64 or msgpack: shown as such, the view goes on
        return {"$unreadable": kind[:40]}


def _short(value: Any) -> Any:
    import orjson

    text = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    return value if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 1] + "…"


# -- timeline entries -----------------------------------------------------------------------------


def node_of(task_path: Any) -> str | None:
    """The node a task ran, from LangGraph's task path (``"~__pregel_pull, agent"``), if it says."""
    if not isinstance(task_path, str):
        return None
    parts = task_path.split(", ")
    return parts[1] if len(parts) >= 2 and parts[0] == "~__pregel_pull" else None


def _user_channel(channel: Any) -> bool:
    return isinstance(channel, str) and not channel.startswith(("branch:", "__"))


def _name(value: Any) -> str | None:
    """A checkpoint's id, its parent's or its namespace as the record gives it: a string, else None
    (a record read back is untrusted: a crafted list there made the entries unlinkable)."""
    return value if isinstance(value, str) else None


def _writes_entry(p: Mapping[str, Any]) -> dict[str, Any]:
    writes = p.get("writes")
    writes = writes if isinstance(writes, list) else []
    values: dict[str, Any] = {}
    for w in writes:
        if isinstance(w, list) and len(w) == 4 and _user_channel(w[1]):
            values[w[1]] = _short(decode_value(w[2:]))
    return {
        "kind": "writes",
        "node": node_of(p.get("path")),
        "task": p.get("task"),
        "checkpoint": _name(p.get("checkpoint")),
        "namespace": _name(p.get("ns")),
        "writes": values,
    }


def _checkpoint_entry(p: Mapping[str, Any]) -> dict[str, Any]:
    metadata = decode_value(p.get("metadata"))
    metadata = metadata if isinstance(metadata, Mapping) else {}
    step = metadata.get("step")
    return {
        "kind": "checkpoint",
        "checkpoint": _name(p.get("id")),
        "parent": _name(p.get("parent")),
        "namespace": _name(p.get("ns")),
        "step": step if type(step) is int else None,
        "source": metadata.get("source") if isinstance(metadata.get("source"), str) else None,
        "nodes": [],
        "writes": {},
    }


def _thread_entry(rec: Record) -> dict[str, Any]:
    p = rec.payload
    kind = p.get("kind")
    if kind == "checkpoint":
        return _checkpoint_entry(p)
    if kind == "writes":
        return _writes_entry(p)
    if kind == "delete-thread":
        return {"kind": "delete-thread"}
    if kind == "delete-runs":
        return {"kind": "delete-runs", "runIds": p.get("runIds")}
    if kind == "compacted":
        return {"kind": "compacted", "into": p.get("into")}
    return {"kind": "unknown", "payload": _short(dict(p))}


def _link_nodes(entries: Sequence[dict[str, Any]]) -> None:
    """Give each checkpoint the nodes (and their writes) that made it: the tasks that wrote to its
    parent checkpoint."""
    by_parent: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in entries:
        if e["kind"] == "writes":
            by_parent.setdefault((e["namespace"], e["checkpoint"]), []).append(e)
    for e in entries:
        if e["kind"] == "checkpoint" and e["parent"] is not None:
            for w in by_parent.get((e["namespace"], e["parent"]), []):
                if w["node"] is not None and w["node"] not in e["nodes"]:
                    e["nodes"].append(w["node"])
                e["writes"].update(w["writes"])


def _catalog_entry(rec: Record) -> dict[str, Any]:
    p = rec.payload
    return {
        "kind": "registration",
        "threadId": p.get("thread"),
        "generation": p.get("gen"),
        "run": p.get("run"),
        "reason": p.get("reason"),
    }


def store_item(finding: Mapping[str, Any], scope: Any) -> dict[str, Any] | None:
    """A store item as a reader wants it: ``{"namespace", "key", "value", "createdMs"}`` (plus
    ``ttlMinutes`` when it has one) from a finding the store wrote; None for any other finding."""
    meta = finding.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("key"), str):
        return None
    if not isinstance(meta.get("value"), dict):
        return None
    if not (isinstance(scope, str) and scope.startswith(STORE_SCOPE_PREFIX)):
        return None
    item: dict[str, Any] = {
        "namespace": scope[len(STORE_SCOPE_PREFIX) :].split("."),
        "key": meta["key"],
        "value": meta["value"],
    }
    if type(meta.get("createdMs")) is int:
        item["createdMs"] = meta["createdMs"]
    if meta.get("ttlMinutes") is not None:
        item["ttlMinutes"] = meta["ttlMinutes"]
    return item


def store_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A store item's finding metadata without the store's own bookkeeping (``rev``, the indexed
    ``v.*`` copies, ``createdMs`` …): what is left is the user's."""
    return {k: v for k, v in metadata.items() if k not in _INTERNAL_METADATA and not k.startswith("v.")}


def _store_entry(learned: dict[str, dict[str, Any]]) -> Callable[[Record], dict[str, Any]]:
    def make(rec: Record) -> dict[str, Any]:
        p = rec.payload
        if "finding" in p:
            finding = p.get("finding")
            item = store_item(finding, p.get("scope")) if isinstance(finding, Mapping) else None
            if item is not None:
                learned[str(p.get("id"))] = item
                return {
                    "kind": "store-put",
                    "key": p.get("id"),
                    "namespace": item["namespace"],
                    "itemKey": item["key"],
                    "value": _short(item["value"]),
                    **({"ttlMinutes": item["ttlMinutes"]} if "ttlMinutes" in item else {}),
                }
            return {"kind": "learn", "key": p.get("id")}
        known = learned.get(str(p.get("id")), {})
        scope = p.get("scope")
        namespace = scope[len(STORE_SCOPE_PREFIX) :].split(".") if isinstance(scope, str) else None
        return {
            "kind": "store-delete" if not p.get("by") else "store-replaced",
            "key": p.get("id"),
            "namespace": known.get("namespace", namespace),
            "itemKey": known.get("key"),
            "by": p.get("by"),
            "reason": p.get("reason"),
        }

    return make


def timeline_sources(
    info: RunInfo, memory_streams: tuple[str, str]
) -> list[tuple[int, str, Callable[[Record], dict[str, Any]]]]:
    """The streams of a LangGraph run to show, each with its rank and entry maker (empty for a
    run the adapters did not write). ``memory_streams`` names the learn and forget streams."""
    if info.flow == THREAD_FLOW:
        return [(4, CHECKPOINTS_STREAM, _thread_entry)]
    if info.flow == CATALOG_FLOW:
        return [(5, THREADS_STREAM, _catalog_entry)]
    if info.flow == STORE_FLOW:
        make = _store_entry({})
        return [(1, memory_streams[0], make), (2, memory_streams[1], make)]
    return []


def finish(info: RunInfo, entries: list[dict[str, Any]]) -> None:
    """Complete the entries of a LangGraph run once all are read (a checkpoint's nodes)."""
    if info.flow == THREAD_FLOW:
        _link_nodes(entries)
