"""``JournalStore``: LangGraph's long-term memory store on the flows findings memory.

Mapping (docs/LANGGRAPH.md has the whole story):

* a namespace ``("users", "u1")`` is the scope ``langgraph:users.u1`` (LangGraph forbids ``.`` in a
  label, so the join is unambiguous, and a prefix of the namespace is a prefix of the scope);
* an item is a finding in that scope: ``text`` is the value's text (what ``why`` ranks),
  ``source`` is ``LangGraphStore``, and ``metadata`` is ``{"key", "value", "createdMs", "rev"}``
  (plus ``"ttlMinutes"`` for an item with a TTL, whose ``expiresMs`` then says when it lapses);
  ``rev`` is random per put, so every version is a finding of its own (the memory refuses to learn
  again a finding it retired, and a value may well come back after an update);
* ``put`` is a journal-first learn; an update supersedes the item's live finding, a delete forgets
  it, so every version stays in the journal with its history and citation;
* ``search(query=…)`` is the memory's ranked ``why`` (hybrid, by meaning and words, when ``index`` has
  an ``embed``; by words otherwise); without a query, items newest first.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import re
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from functools import partial, wraps
from typing import Any, ParamSpec, TypeVar

import orjson
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)
from langgraph.store.base.embed import ensure_embeddings

from flows.langgraph._background import BackgroundSync
from flows.langgraph._conn import Opening
from flows.langgraph._errors import (
    ConfigInvalid,
    ItemContended,
    LangGraphAdapterError,
    ValueTooLarge,
    ValueUnserializable,
    checked_count,
)
from flows.langgraph._filters import at_path, check_filter, matches
from flows.langgraph._lifetime import Lifetime
from flows.langgraph._lookup import WriteLookup
from journal import FileJournal, JournalBackend, Lease, RunState, now_ms, shown_location
from memory import (
    ArgumentInvalid,
    Embedder,
    FindingRetired,
    Forgotten,
    MemoryStore,
    Recalled,
    RootRun,
    embedder_of,
)

T = TypeVar("T")

SCOPE_PREFIX = "langgraph:"
"""Every store namespace is the scope ``langgraph:<label>.<label>…``."""
SOURCE = "LangGraphStore"
"""The ``source`` of every item's finding (one word, so ``why`` does not match it by accident)."""
FLOW = "langgraph-store"
"""The flow name of the root run each ``JournalStore`` journals its writes into (begun by its first
write, ``done`` when it closes)."""
SCOPE_MAX = 256
"""The longest scope the memory takes, and so the longest joined namespace (with its prefix)."""
VALUE_MAX_BYTES = 15 * 1024
"""The largest value with its key, as JSON: what fits a finding's metadata with the item's own
fields."""
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_CONTROL = re.compile("[\x00-\x1f\x7f]")
"""A control character, which no key of a value holds."""
_INDEXED = "v."
"""A value's short top-level strings are also metadata keys ``v.<field>``, so an equality filter on
them is answered by the memory's metadata index rather than by reading every item."""
_INDEXED_MAX = 256
KEY_MAX = 1024
"""The longest item key, in characters."""
CREATED_MAX_MS = 253_402_300_799_999
"""The latest creation time an item read back may carry (the last millisecond of the year 9999):
past it no date can be made of it, so an item claiming one is not the store's."""
TTL_MAX_MINUTES = 100 * 365 * 24 * 60
"""The longest TTL, in minutes (a hundred years; an expiry must be a date the journal can write)."""


class NamespaceInvalid(LangGraphAdapterError, InvalidNamespaceError):
    """A namespace the store cannot hold: LangGraph's own ``InvalidNamespaceError``, with a code.

    Defined beside the store rather than in ``_errors`` because it derives from a LangGraph class,
    and ``_errors`` must import without LangGraph installed.
    """

    code = "langgraph_namespace_invalid"


def _indexed(value: Mapping[str, Any]) -> dict[str, str]:
    return {
        _INDEXED + k: v
        for k, v in value.items()
        if isinstance(v, str) and len(v) <= _INDEXED_MAX and len(k) <= 120
    }


def scope_of(namespace: tuple[str, ...]) -> str:
    """The scope of ``namespace``; ``NamespaceInvalid`` (a LangGraph ``InvalidNamespaceError``)
    when it cannot be one."""
    if not isinstance(namespace, tuple) or not namespace:
        raise NamespaceInvalid(f"a namespace is a non-empty tuple of labels, not {namespace!r:.80}")
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label or not _utf8(label):
            raise NamespaceInvalid(
                f"invalid namespace label {label!r:.80} in {namespace!r:.120}: labels are non-empty "
                "strings of valid Unicode (no lone surrogate) without '.' or NUL"
            )
    if namespace[0] == "langgraph":
        raise NamespaceInvalid(f'the root label of a namespace cannot be "langgraph": {namespace!r:.120}')
    scope = SCOPE_PREFIX + ".".join(namespace)
    if len(scope) > SCOPE_MAX:
        raise NamespaceInvalid(
            f"namespace {namespace!r:.80} is {len(scope) - len(SCOPE_PREFIX)} characters joined; "
            f"at most {SCOPE_MAX - len(SCOPE_PREFIX)}"
        )
    return scope


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _key_ok(key: Any) -> bool:
    """Whether ``key`` can name an item: a non-empty string of valid Unicode, at most KEY_MAX long."""
    return isinstance(key, str) and 0 < len(key) <= KEY_MAX and _utf8(key)


def _scope_if_any(namespace: tuple[str, ...]) -> str | None:
    """The scope of ``namespace``, or None for one that can hold no item (reads find nothing)."""
    try:
        return scope_of(namespace)
    except InvalidNamespaceError:
        return None


def namespace_of(scope: str) -> tuple[str, ...] | None:
    """The namespace a scope holds, or None for a scope that is not the store's."""
    if not scope.startswith(SCOPE_PREFIX) or len(scope) == len(SCOPE_PREFIX):
        return None
    return tuple(scope[len(SCOPE_PREFIX) :].split("."))


def _check_value_key(k: object, path: str) -> None:
    """Refuse an object's key ``k`` (at ``path`` of a value) that is no non-empty string of at most
    128 characters of valid Unicode without control characters (``ValueUnserializable``)."""
    if not isinstance(k, str) or not k or len(k) > 128 or _CONTROL.search(k) is not None:
        raise ValueUnserializable(
            f"`{path}` has the key {k!r:.40}: keys are non-empty strings of at most 128 "
            "characters without control characters"
        )
    if not k.isascii() and not _utf8(k):
        raise ValueUnserializable(
            f"`{path}` has the key {k!r:.40}, which holds a lone surrogate, not valid UTF-8"
        )


def _plain(value: Any, path: str, depth: int = 0) -> Any:
    """``value`` as plain JSON, or ValueUnserializable naming the path of the first bad part."""
    if value is None or isinstance(value, bool | str):
        if isinstance(value, str):
            try:
                value.encode()
            except UnicodeEncodeError:
                raise ValueUnserializable(
                    f"`{path}` holds a lone surrogate, which is not valid UTF-8"
                ) from None
        return value
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise ValueUnserializable(f"`{path}` is an integer outside the signed 64-bit range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueUnserializable(f"`{path}` is not a finite number (JSON has no NaN or infinity)")
        return value
    if depth >= 15:
        raise ValueUnserializable(f"`{path}` nests deeper than 15 levels")
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            _check_value_key(k, path)
            # an ASCII string is taken as is, without the path named only in an error
            out[k] = v if type(v) is str and v.isascii() else _plain(v, f"{path}.{k}", depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [_plain(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    raise ValueUnserializable(
        f"`{path}` is a {type(value).__name__}; a store value holds only JSON (strings, numbers, "
        "booleans, null, lists and objects)"
    )


def embedder_of_index(index: IndexConfig | Mapping[str, Any] | None) -> Embedder | None:
    """The memory's embedder for LangGraph's ``index`` (None without ``embed``); ``ConfigInvalid``
    when ``embed`` and ``dims`` do not come together or ``embed`` cannot be loaded."""
    if not index:
        return None
    embed, dims = index.get("embed"), index.get("dims")
    if embed is None and dims is None:
        return None
    if embed is None or type(dims) is not int or dims < 1:
        raise ConfigInvalid(
            f"index needs both 'embed' and 'dims' (a positive int) for a search by meaning, not {dims!r:.40}"
        )
    name = index.get("name")
    if inspect.iscoroutinefunction(embed):
        fn: Callable[[list[str]], Any] = partial(_run_async, embed)
    else:
        try:
            fn = ensure_embeddings(embed).embed_documents
        except (ImportError, ValueError, TypeError) as exc:
            raise ConfigInvalid(f"index 'embed' cannot be used: {exc}") from exc
    if name is None:
        what = (
            embed
            if isinstance(embed, str)
            else getattr(embed, "model", None) or getattr(embed, "__qualname__", type(embed).__qualname__)
        )
        name = f"langgraph:{getattr(embed, '__module__', '') or type(embed).__module__}.{what}/{dims}"
    try:
        return embedder_of(fn, name=str(name), dims=dims)
    except ArgumentInvalid as exc:
        raise ConfigInvalid(f"index: {exc}") from exc


def _run_async(embed: Callable[[list[str]], Awaitable[Any]], texts: list[str]) -> Any:
    """An async embedding function called from the store's worker thread (which runs no loop)."""
    return asyncio.run(embed(texts))  # type: ignore[arg-type]


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


# A search's match: score, learned_ms, the version, its namespace, its scope, and what is known of
# that scope's newest live versions (item key -> the newest version's key), filled as it is asked.
_Match = tuple[float | None, int, Recalled, tuple[str, ...], str, dict[str, str | None]]


def _pushed(filter: Mapping[str, Any] | None) -> dict[str, str]:
    """The part of a filter the memory's metadata index answers: equality on a top-level string
    short enough to be indexed (``_indexed``); the rest is checked item by item."""
    return {
        _INDEXED + k: v
        for k, v in (filter or {}).items()
        # a value that is not valid UTF-8 matches no item, and the index cannot be asked for it
        if "." not in k and isinstance(v, str) and len(v) <= _INDEXED_MAX and len(k) <= 120 and _utf8(v)
    }


def _check_labels(labels: Any, what: str) -> None:
    """Refuse a namespace (prefix, or path of a condition) that is not a tuple or list of strings:
    a string would be read as its characters, ``search("users")`` as the namespace ``("u", "s",
    "e", "r", "s")``, whose items it would return."""
    if not isinstance(labels, tuple | list) or not all(isinstance(label, str) for label in labels):
        raise ConfigInvalid(
            f"{what} is a tuple of labels, not {type(labels).__name__} {labels!r:.80}"
            + (f": pass ({labels!r:.80},)" if isinstance(labels, str) else "")
        )


def _check_op(op: Op) -> None:
    """Refuse what ``_check_read`` refuses, and a put or delete whose namespace is not a tuple or
    whose key is not a string (``NamespaceInvalid``, ``ConfigInvalid``), before anything runs."""
    if isinstance(op, PutOp):
        if not isinstance(op.namespace, tuple):
            raise NamespaceInvalid(f"a namespace is a non-empty tuple of labels, not {op.namespace!r:.80}")
        if not isinstance(op.key, str):
            raise ConfigInvalid(f"an item's key is a string, not {type(op.key).__name__} {op.key!r:.40}")
    _check_read(op)


def _check_read(op: Op) -> None:
    """Refuse a search's filter that ``check_filter`` refuses, a namespace prefix or condition that
    is not one (``_check_labels``), and a page of a search or listing that
    is not two non-negative integers (or a ``max_depth`` that is not positive): a negative one would
    slice from the end (another page than asked for), and anything else fail with a bare TypeError."""
    if isinstance(op, SearchOp):
        check_filter(op.filter)
        _check_labels(op.namespace_prefix, "a search's namespace prefix")
    if isinstance(op, ListNamespacesOp):
        for condition in op.match_conditions or ():
            if not isinstance(condition, MatchCondition) or condition.match_type not in ("prefix", "suffix"):
                raise ConfigInvalid(
                    "a listing's match condition is a MatchCondition of 'prefix' or 'suffix', "
                    f"not {condition!r:.80}"
                )
            _check_labels(condition.path, f"a listing's {condition.match_type}")
    if not isinstance(op, SearchOp | ListNamespacesOp):
        return
    for name, n in (("offset", op.offset), ("limit", op.limit)):
        if type(n) is not int or n < 0:
            raise ConfigInvalid(f"a search's or listing's {name} is a non-negative integer, not {n!r:.40}")
    depth = op.max_depth if isinstance(op, ListNamespacesOp) else None
    if depth is not None and (type(depth) is not int or depth < 1):
        raise ConfigInvalid(f"max_depth is None or a positive integer, not {depth!r:.40}")


def _matches(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    path = condition.path
    if len(namespace) < len(path):
        return False
    pairs = (
        zip(namespace, path, strict=False)
        if condition.match_type == "prefix"
        else zip(reversed(namespace), reversed(path), strict=False)
    )
    return all(p in ("*", n) for n, p in pairs)


@contextlib.contextmanager
def _namespace_coded() -> Iterator[None]:
    """LangGraph's own ``InvalidNamespaceError`` raised within, as ``NamespaceInvalid`` (its subclass,
    with a code)."""
    try:
        yield
    except NamespaceInvalid:
        raise
    except InvalidNamespaceError as exc:
        raise NamespaceInvalid(str(exc)) from None


_DELETE_ROUNDS = 8
_READ_ROUNDS = 8  # a batch's reads, made again while a catch up after them publishes (``_read_all``)
"""Looks a delete makes at its item's live versions (each followed by forgets) before it gives up."""
_DELETE_FOLLOWS = 64
"""Supersedes a delete's forget follows, one after another, within one round."""

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _coded(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """One of LangGraph's ``BaseStore`` methods whose own look at the namespace (before ``batch``)
    raises its ``InvalidNamespaceError``: raised here as ``NamespaceInvalid`` (a subclass, with a
    code), as every error this store raises has one."""
    if inspect.iscoroutinefunction(method):

        @wraps(method)
        async def coded_async(*args: _P.args, **kwargs: _P.kwargs) -> Any:
            with _namespace_coded():
                return await method(*args, **kwargs)

        return coded_async  # type: ignore[return-value]

    @wraps(method)
    def coded(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with _namespace_coded():
            return method(*args, **kwargs)

    return coded


class JournalStore(BaseStore):
    """LangGraph's ``BaseStore`` on the findings memory, every write journal-first.

    ``builder.compile(checkpointer=JournalSaver(), store=JournalStore())`` is the whole switch.

    Args:
        db: the history DB (default: ``$FLOWS_DB``, else ``$XDG_DATA_HOME/flows/history.db``).
        journal: the journal location (default: ``$FLOWS_JOURNAL``, else ``<db-dir>/flows-journal``).
        ttl: LangGraph's ``TTLConfig``: ``default_ttl`` (minutes) for items put without one, and
            ``refresh_on_read`` (a read of an item with a TTL re-learns it with a new expiry).
        index: LangGraph's ``IndexConfig``: ``fields`` (which parts of a value are the text
            ``search(query=…)`` ranks) and, for a search by meaning, ``embed`` (a LangChain
            ``Embeddings``, or a sync or async function of a list of texts) with ``dims``; an
            optional ``name`` keys the vectors (default: the embedder's class or function and
            ``dims``; give a new name when the model behind it changes). With ``embed``,
            ``search(query=…)`` is the memory's hybrid ``why`` (meaning and words); without, words.
        sync_every: after this many writes the store syncs the memory (learned files into the
            history DB), which keeps reads from parsing ever more unsynced files; 0: never. The
            sync runs on a thread of the store's own while the writes go on (no durability step:
            a put is durable when it returns); ``close`` waits for it, and a sync that failed is
            raised, with its code, by the store's next call or by ``close``.

    Raises (every method): LangGraph's ``InvalidNamespaceError`` for a bad namespace;
    ``ValueUnserializable`` for a value that is not plain JSON; ``ValueTooLarge`` past
    ``VALUE_MAX_BYTES``; ``ConfigInvalid`` for an unknown filter operator; the memory's and the
    journal's own errors unchanged. Nothing is written when a call raises before its learn.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        db: str | None = None,
        journal: str | None = None,
        *,
        ttl: TTLConfig | None = None,
        index: IndexConfig | None = None,
        clock: Callable[[], int] | None = None,
        max_workers: int = 8,
        sync_every: int = 16,
    ) -> None:
        checked_count("max_workers", max_workers, 1)
        checked_count("sync_every", sync_every, 0)
        self.ttl_config = ttl
        self._fields = [(f, tokenize_path(f)) for f in (index or {}).get("fields") or [] if f != "$"]
        self._memory = MemoryStore(db, journal=journal, embedder=embedder_of_index(index))
        self._root: tuple[JournalBackend, Lease] | None = None
        self._lookup: WriteLookup | None = None  # a write's look at its item, on a file journal
        self._mutex = threading.Lock()
        self._key_locks: dict[tuple[str, str], threading.Lock] = {}
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._sync_every = sync_every
        self._writes = 0
        self._life = Lifetime("JournalStore", max_workers, "langgraph-store")
        # the sync every ``sync_every`` writes runs on a thread of its own (``_wrote``)
        self._background = BackgroundSync(
            partial(self._memory.sync, materialize=False), self._memory.db.close, "langgraph-store-sync"
        )

    @property
    def memory(self) -> MemoryStore:
        """The findings memory the items live in."""
        return self._memory

    # -- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> Opening[JournalStore]:
        """A context manager (``with`` or ``async with``) giving a ``JournalStore`` on ``conn_string``,
        closed when the context ends: LangGraph's ``from_conn_string``, so switching from its
        SQLite or PostgreSQL classes is a change of class name.

        Args:
            conn_string: ``postgresql://…`` (the journal), ``:memory:`` (a temporary store removed
                at the end), or a path: the history DB, with the journal beside it.
            kwargs: the constructor's other keyword arguments (``db=`` names the history DB
                for a ``postgresql://`` string, which names only the journal).

        Raises:
            ConfigInvalid: an empty or non-string ``conn_string``; and what the constructor raises.
        """
        history = kwargs.pop("db", None)  # the history DB beside a postgresql:// journal
        return Opening(conn_string, lambda db, journal: cls(db or history, journal, **kwargs))

    def setup(self) -> None:
        """Nothing to set up: the journal and the memory are made as they are first used. Kept so
        code written for LangGraph's SQL classes runs unchanged; raises JournalClosed after close."""
        self._check_open()

    async def asetup(self) -> None:
        """``setup`` (nothing to do), for code written for LangGraph's async classes."""
        self.setup()

    def close(self) -> None:
        """Wait for the background sync (``sync_every``), end the store's root run (``done``) and
        close the memory; safe twice. A background sync's failure not yet raised is raised here,
        once everything is closed."""
        if not self._life.close():
            return
        background = self._background
        try:
            background.stop()  # the sync under way, and one asked for, finish first
            if self._root is not None:
                backend, lease = self._root
                backend.finish(lease, RunState.DONE)
        finally:
            try:
                self._memory.close()
            finally:
                background.end()  # the thread ends, its DB connections closed on it
        background.raise_failure()

    def __enter__(self) -> JournalStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> JournalStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        """Raises JournalClosed once closed, and a background sync's failure not yet raised."""
        self._life.check_open()
        self._background.raise_failure()

    def _root_for(self, scope: str) -> RootRun:
        """The store's root run (begun now if need be), seen as a root run of ``scope``."""
        with self._mutex:
            if self._root is None:
                backend = self._memory.open_journal()
                _, lease = backend.begin(FLOW, "langgraph", {"langgraph": "store"})
                self._root = (backend, lease)
                if isinstance(backend, FileJournal):
                    self._lookup = WriteLookup(self._memory)
            backend, lease = self._root
        return RootRun(journal=backend, lease=lease, flow=FLOW, scope=scope, source=SOURCE)

    def _wrote(self) -> None:
        """Count a write; every ``sync_every`` writes, have the learned files moved into the DB, by
        the store's sync thread (``BackgroundSync``), while this caller goes on."""
        with self._mutex:
            self._writes += 1
            due = self._sync_every > 0 and self._writes % self._sync_every == 0
        if due:
            self._background.ask()

    def _key_lock(self, scope: str, key: str) -> threading.Lock:
        with self._mutex:
            return self._key_locks.setdefault((scope, key), threading.Lock())

    # -- LangGraph's own checks, coded ----------------------------------------------------------

    get = _coded(BaseStore.get)
    aget = _coded(BaseStore.aget)
    search = _coded(BaseStore.search)
    asearch = _coded(BaseStore.asearch)
    put = _coded(BaseStore.put)
    aput = _coded(BaseStore.aput)
    delete = _coded(BaseStore.delete)
    adelete = _coded(BaseStore.adelete)
    list_namespaces = _coded(BaseStore.list_namespaces)
    alist_namespaces = _coded(BaseStore.alist_namespaces)

    # -- batch ---------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order of kind as LangGraph's stores do: reads (get, search, list) first,
        answered from the state before the batch; then the puts, the last one per item winning."""
        self._check_open()
        ops = list(ops)
        results: list[Result] = [None] * len(ops)
        puts: dict[tuple[tuple[str, ...], str], tuple[PutOp, tuple[dict[str, Any], float | None] | None]] = {}
        for op in ops:
            _check_op(op)
            with _namespace_coded():
                validate_op_namespace(op)  # LangGraph's own check of every label
        # on a journal hosts share, what other hosts put since the last batch is read first
        self._memory.catch_up()
        self._read_all(ops, results)
        for op in ops:
            if isinstance(op, GetOp | SearchOp | ListNamespacesOp):
                continue
            if isinstance(op, PutOp):
                prepared = None
                if op.value is not None:
                    scope_of(op.namespace)
                    prepared = self._prepare(op)  # bad values fail the batch before anything is written
                puts.pop((op.namespace, op.key), None)
                puts[(op.namespace, op.key)] = (op, prepared)
            else:
                raise ConfigInvalid(f"unknown store operation {type(op).__name__}")
        for op, prepared in puts.values():
            self._put(op, prepared)
            self._wrote()
        return results

    def _read_all(self, ops: list[Op], results: list[Result]) -> None:
        """Answer the batch's reads into ``results``. A read learns of another host's update from
        its retirement, read as the read runs, and of the version it put only by catching up: an
        update committed between the batch's catch up and a read answered with neither version (a
        live item read as None). Catching up again publishes what it put; when that published
        anything, the reads are made again (at most ``_READ_ROUNDS`` times)."""
        reads = [(i, op) for i, op in enumerate(ops) if isinstance(op, GetOp | SearchOp | ListNamespacesOp)]
        for _ in range(_READ_ROUNDS):
            for i, op in reads:
                if isinstance(op, GetOp):
                    results[i] = self._get(op)
                elif isinstance(op, SearchOp):
                    results[i] = self._search(op)
                else:
                    results[i] = self._list_namespaces(op)
            if not reads or not self._memory.catch_up():
                return

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` on the store's executor."""
        executor = self._life.executor()
        ops = list(ops)
        return await asyncio.get_running_loop().run_in_executor(executor, partial(self.batch, ops))

    # -- reads ---------------------------------------------------------------------------------

    def _live(self, scope: str, key: str) -> list[Recalled]:
        """The live findings of item ``key`` (newest first; more than one only after a race); none
        for a key no item can have."""
        if not _key_ok(key):
            return []
        found = [r for r in self._memory.recall(scope=scope, meta={"key": key}, limit=None) if self._ours(r)]
        # newest first by commit time, then version key: the same order in every process and on
        # every host (the memory's own ties go by row id, which differs between hosts), so puts
        # that settle a race (``_put``) all keep the same version
        return sorted(found, key=lambda r: (r.learned_ms, r.key), reverse=True) if len(found) > 1 else found

    def _live_for_write(self, scope: str, key: str) -> list[Recalled]:
        """``_live`` as a write reads it: from this store's own look at the scope (``WriteLookup``)
        once it has written on a file journal, else (and whenever that cannot tell) from the memory."""
        lookup = self._lookup
        found = lookup.live(scope, key, now_ms()) if lookup is not None and _key_ok(key) else None
        if found is None:
            return self._live(scope, key)
        found = [r for r in found if self._ours(r)]
        return sorted(found, key=lambda r: (r.learned_ms, r.key), reverse=True) if len(found) > 1 else found

    def _alone(self, scope: str, key: str, version: str) -> bool:
        """Whether ``version``, just learned, is the only live version of item ``key``, as
        ``WriteLookup`` sees it (False when it cannot tell: then ``_live`` is read)."""
        lookup = self._lookup
        return lookup is not None and lookup.alone(scope, key, version, now_ms())

    def _learn(self, finding: Mapping[str, Any], root: RootRun, supersedes: str | None = None) -> str:
        """The memory's learn of ``finding`` (the key of the version learned), noted for
        ``WriteLookup``."""
        learned = self._memory.learn(finding, root, supersedes=supersedes)
        if self._lookup is not None:
            self._lookup.published(learned.id, finding["metadata"]["key"])
            if supersedes is not None:
                self._lookup.retired(supersedes)
        return learned.id

    def _forget(self, key: str, root: RootRun, reason: str) -> Forgotten:
        """The memory's forget of ``key``, noted for ``WriteLookup``."""
        forgotten = self._memory.forget(key, root, reason=reason)
        if self._lookup is not None:
            self._lookup.retired(key)
        return forgotten

    @staticmethod
    def _ours(found: Recalled) -> bool:
        """Whether ``found`` has the shape of an item this store writes. The memory is read back
        from disk like the journal: an item of any other shape is skipped, never half-read."""
        meta = found.metadata
        created, ttl = meta.get("createdMs"), meta.get("ttlMinutes")
        return (
            isinstance(meta.get("key"), str)
            and isinstance(meta.get("value"), dict)
            and (created is None or (type(created) is int and 0 <= created <= CREATED_MAX_MS))
            and (ttl is None or (type(ttl) in (int, float) and 0 < ttl <= TTL_MAX_MINUTES))
        )

    def _item(self, found: Recalled, namespace: tuple[str, ...], score: float | None = None) -> SearchItem:
        meta = found.metadata
        created = meta.get("createdMs")
        return SearchItem(
            namespace=namespace,
            key=meta["key"],
            value=orjson.loads(orjson.dumps(meta["value"])),  # a copy: results are shared
            created_at=_utc(created if isinstance(created, int) else found.learned_ms),
            updated_at=_utc(found.learned_ms),
            score=score,
        )

    def _get(self, op: GetOp) -> Item | None:
        scope = _scope_if_any(op.namespace)
        live = self._live(scope, op.key) if scope else []
        if scope is None or not live:
            return None
        found = live[0]
        if self._refreshing(op.refresh_ttl) and found.metadata.get("ttlMinutes") is not None:
            fresh = self._refresh(scope, op.key, found)
            if fresh is None:
                return None  # deleted (by another process) between the read and its refresh
            found = fresh
        item = self._item(found, op.namespace)
        return Item(
            value=item.value,
            key=item.key,
            namespace=item.namespace,
            created_at=item.created_at,
            updated_at=item.updated_at,
        )

    def finding(self, namespace: tuple[str, ...], key: str) -> Recalled | None:
        """The live finding that holds item ``key`` of ``namespace``: its ``key`` (for
        ``MemoryStore.history``), ``citation`` (the journal record: run, stream, record id) and
        ``learned_ms``. None when the item does not exist."""
        self._check_open()
        scope = _scope_if_any(namespace)
        live = self._live(scope, key) if scope else []
        return live[0] if live else None

    def _scopes_under(self, prefix: tuple[str, ...]) -> list[tuple[str, tuple[str, ...]]]:
        out = []
        for scope in self._memory.scopes():
            ns = namespace_of(scope)
            if ns is not None and ns[: len(prefix)] == prefix:
                out.append((scope, ns))
        return out

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        found: list[_Match] = []
        for scope, ns in self._scopes_under(prefix):
            # Each item once, as its newest live version: puts racing on several hosts can leave two
            # versions of one item live until its next put settles them (``_put``); ``get`` reads
            # the newest, and so does this, never an older version that a query or filter matched.
            newest: dict[str, str | None] = {}  # item key -> its newest live version's key
            if op.query:
                for hit in self._memory.why(op.query, limit=2**31 - 1, scope=scope):
                    if self._ours(hit.finding):
                        found.append((hit.score, hit.finding.learned_ms, hit.finding, ns, scope, newest))
            else:
                pushed = _pushed(op.filter)
                listed = self._memory.recall(scope=scope, meta=pushed or None, limit=None)
                every = [r for r in listed if self._ours(r)]
                if not pushed:  # every version of every item, newest first: its first is its newest
                    for r in every:
                        newest.setdefault(r.metadata["key"], r.key)
                found += [(None, r.learned_ms, r, ns, scope, newest) for r in every]
        if op.filter:
            found = [
                f
                for f in found
                if all(matches(at_path(f[2].metadata["value"], k), v) for k, v in op.filter.items())
            ]
        if op.query:
            found.sort(key=lambda f: (-(f[0] or 0.0), -f[1]))
        else:
            found.sort(key=lambda f: -f[1])
        page = self._page(found, op.offset, op.limit)
        refresh = self._refreshing(op.refresh_ttl)
        out = []
        for score, _, r, ns, scope, _ in page:
            fresh = (
                self._refresh(scope, r.metadata["key"], r) if refresh and r.metadata.get("ttlMinutes") else r
            )
            if fresh is not None:  # None: deleted meanwhile, by another process
                out.append(self._item(fresh, ns, score))
        return out

    def _page(self, found: list[_Match], offset: int, limit: int) -> list[_Match]:
        """``found[offset : offset + limit]`` counting only each item's newest live version: whether
        a match is its item's newest is asked only of what the page needs, in order (a look-up
        each, ``_is_newest``), so a page costs its size, not the number of matches."""
        page: list[_Match] = []
        skipped = 0
        for f in found:
            if len(page) == limit:
                break
            if not self._is_newest(f[4], f[2], f[5]):
                continue
            if skipped < offset:
                skipped += 1
            else:
                page.append(f)
        return page

    def _is_newest(self, scope: str, found: Recalled, newest: dict[str, str | None]) -> bool:
        """Whether ``found`` is the newest live version of its item (``newest``: what is known of
        that already, by item key; filled here from ``_live`` for an item not in it)."""
        item = found.metadata["key"]
        if item not in newest:
            live = self._live(scope, item)
            newest[item] = live[0].key if live else None
        return newest[item] == found.key

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces = [ns for _, ns in self._scopes_under(())]
        if op.match_conditions:
            namespaces = [ns for ns in namespaces if all(_matches(ns, c) for c in op.match_conditions)]
        if op.max_depth is not None:
            namespaces = sorted({ns[: op.max_depth] for ns in namespaces})
        else:
            namespaces = sorted(set(namespaces))
        return namespaces[op.offset : op.offset + op.limit]

    # -- writes --------------------------------------------------------------------------------

    def _refreshing(self, asked: bool | None) -> bool:
        if self.ttl_config is None:
            return False
        return bool(asked) and self.ttl_config.get("refresh_on_read", True)

    def _text(self, key: str, value: Mapping[str, Any], index: Any) -> str:
        """What ``why`` ranks the item by: the value's strings (or the indexed fields'), else its
        key; a key of whitespace alone as JSON (quoted), since the memory refuses blank text."""
        named = key if key.strip() else orjson.dumps(key).decode()
        if index is False:
            return named
        if isinstance(index, list):
            fields = [(f, tokenize_path(f)) for f in index if f != "$"]
        else:
            fields = self._fields
        if fields:
            texts = [t for _, path in fields for t in get_text_at_path(value, path)]
        else:
            texts = []
            stack: list[Any] = [value]
            while stack:
                v = stack.pop()
                if isinstance(v, str):
                    texts.append(v)
                elif isinstance(v, dict):
                    stack.extend(reversed(list(v.values())))
                elif isinstance(v, list):
                    stack.extend(reversed(v))
        text = "\n".join(t for t in texts if t.strip())
        return text or named

    def _prepare(self, op: PutOp) -> tuple[dict[str, Any], float | None]:
        """The value as plain JSON (checked and bounded) and the item's TTL in minutes."""
        if not _key_ok(op.key):
            raise ConfigInvalid(
                f"an item's key is a non-empty string of valid Unicode (no lone surrogate), at most "
                f"{KEY_MAX} characters, not {op.key!r:.40}"
            )
        if not isinstance(op.value, Mapping):
            raise ValueUnserializable(
                f"a store value is a mapping of string keys, not {type(op.value).__name__}"
            )
        value = _plain(op.value, "value")
        # the key shares the finding's metadata with the value (and its indexed copies): counted
        # too, as JSON writes it (a control character takes six bytes), so a long key with a value
        # just under the bound is refused here rather than by the memory with a code of its own
        size = len(orjson.dumps(value)) + len(orjson.dumps(_indexed(value))) + len(orjson.dumps(op.key))
        if size > VALUE_MAX_BYTES:
            raise ValueTooLarge(
                f"the value of item {op.key!r:.60}, with its key, is {size:,} bytes as JSON, over "
                f"the store's {VALUE_MAX_BYTES:,}-byte bound; keep large data elsewhere and store a "
                "reference",
                size=size,
                limit=VALUE_MAX_BYTES,
            )
        ttl = op.ttl  # ``put`` has already applied the TTL config's default (None: no TTL)
        if ttl is not None and (
            isinstance(ttl, bool)
            or not isinstance(ttl, int | float)
            or not 0 < ttl <= TTL_MAX_MINUTES  # NaN fails this too
        ):
            raise ConfigInvalid(
                f"a TTL is a positive, finite number of minutes up to {TTL_MAX_MINUTES:,} (a hundred "
                f"years), not {ttl!r:.40}"
            )
        return value, ttl

    def _finding(
        self, op: PutOp, value: dict[str, Any], ttl: float | None, created_ms: int
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "key": op.key,
            "value": value,
            "createdMs": created_ms,
            "rev": secrets.token_hex(8),
            **_indexed(value),
        }
        finding: dict[str, Any] = {
            "text": self._text(op.key, value, op.index),
            "source": SOURCE,
            "metadata": meta,
        }
        if ttl is not None:
            meta["ttlMinutes"] = ttl
            finding["expiresMs"] = self._clock() + int(ttl * 60_000)
        return finding

    def _put(self, op: PutOp, prepared: tuple[dict[str, Any], float | None] | None) -> None:
        """Write ``op``: a delete when its value is None, else a learn of ``prepared`` (what
        ``_prepare`` made of ``op``) that supersedes the item's live version."""
        if op.value is None:
            self._delete(op)
            return
        assert prepared is not None  # ``batch`` prepares every put of a value
        scope = scope_of(op.namespace)
        value, ttl = prepared
        with self._key_lock(scope, op.key):
            live = self._live_for_write(scope, op.key)
            created = live[0].metadata.get("createdMs") if live else None
            created_ms = created if isinstance(created, int) else self._clock()
            finding = self._finding(op, value, ttl, created_ms)
            if live and ttl is None and self._same(live[0], finding):
                return  # the item already holds exactly this: nothing to journal
            root = self._root_for(scope)
            for _ in range(8):
                try:
                    version = self._learn(finding, root, live[0].key if live else None)
                    break
                except FindingRetired as exc:
                    if not live or exc.key != live[0].key:
                        raise
                # replaced by another process's or host's put since it was read: supersede that
                # version (a second item for the key otherwise); deleted: a new item
                self._memory.catch_up()
                live = self._live_for_write(scope, op.key)
                if not live:
                    version = self._learn(finding, root)
                    break
            else:
                # overtaken every time (other processes keep writing the item): learned beside the
                # versions they wrote, and the newest is kept, as when two puts land at once; the
                # put is written either way, never dropped while it reports success
                version = self._learn(finding, root)
            # Two puts that each found no item both learn one: each looks again once its own is
            # committed and in place, and keeps the newest of what it sees, forgetting the rest.
            # Whichever looks last sees both, so the key is one item again when the later put
            # returns. A put that replaced a version looks again too: its supersede retires that
            # version a moment before its own is in place (the retired file, or on a journal hosts
            # share the commit, comes first), and a creating put that looked in that moment saw
            # neither and kept its own; the replacing put's look is the later one, and sees it.
            # Newest is one order for every process (``_live``), so two that both look forget the
            # same versions. The look is the memory's unless this store's own shows its version
            # alone (``_alone``).
            self._memory.catch_up()
            live = [] if self._alone(scope, op.key, version) else self._live(scope, op.key)
            self._keep_newest(scope, op.key, live, root)

    def _keep_newest(self, scope: str, key: str, live: list[Recalled], root: RootRun) -> None:
        """Forget every version in ``live`` but its first (the newest): two processes put the item
        at once. A version that another put superseded since the look answers its forget with that
        supersede (``by``), and the version that replaced it is live, unseen: look again and settle
        that too. (Without it, a put that found the item and replaced it, committing after this put
        looked, left its version beside the one kept.)"""
        reason = "superseded by a concurrent put of the same item"
        for _ in range(8):
            overtaken = False
            for stale in live[1:]:
                overtaken = self._forget(stale.key, root, reason).by is not None or overtaken
            if not overtaken:
                return
            self._memory.catch_up()
            live = self._live(scope, key)

    def _delete(self, op: PutOp) -> None:
        scope = _scope_if_any(op.namespace)
        if scope is None:
            return
        reason = "deleted through the LangGraph store"
        # In the scope's turn, which every update (a put over the item, a read refreshing its TTL)
        # holds from its look to its last write, in every process: the look sees the item whole.
        # (A look made while another process's update had retired the old version and not yet
        # renamed the new one into place found neither, and the delete returned, the item live.)
        with self._key_lock(scope, op.key), self._memory.turn(scope):
            # Again while a version is live: an update of this thread made meanwhile (the turn is
            # this thread's own) answers a forget of the version it replaced with that supersede,
            # which is followed to the version that replaced it; a round's look finds what is
            # live after the last.
            for _ in range(_DELETE_ROUNDS):
                live = self._live_for_write(scope, op.key)
                if not live:
                    return
                root = self._root_for(scope)
                for found in live:
                    forgotten = self._forget(found.key, root, reason)
                    for _ in range(_DELETE_FOLLOWS):
                        if forgotten.by is None:
                            break
                        forgotten = self._forget(forgotten.by, root, reason)
            if self._live_for_write(scope, op.key):
                raise ItemContended(
                    f"item {op.key[:80]!r} of namespace {op.namespace!r:.120} was written again by "
                    f"another process (a put, or a read refreshing its TTL) under every one of "
                    f"{_DELETE_ROUNDS} attempts to delete it, and is live still: retry the delete, or "
                    "stop the process that keeps writing it first"
                )

    @staticmethod
    def _same(found: Recalled, finding: Mapping[str, Any]) -> bool:
        """Whether ``found`` already holds what ``finding`` would (all but its ``rev``)."""
        had = {k: v for k, v in found.metadata.items() if k != "rev"}
        new = {k: v for k, v in finding["metadata"].items() if k != "rev"}
        return found.text == finding["text"] and had == new and found.expires_ms is None and not found.tags

    def _refresh(self, scope: str, key: str, found: Recalled) -> Recalled | None:
        """Re-learn an item with a TTL so its expiry starts again (a read that refreshes); None when
        the version read was deleted (or replaced) meanwhile, by any process: a refresh never brings
        back what a delete took away (the memory refuses to supersede a retired finding)."""
        ttl = found.metadata["ttlMinutes"]
        op = PutOp(namespace=namespace_of(scope) or (), key=key, value=found.metadata["value"], ttl=ttl)
        with self._key_lock(scope, key):
            finding = self._finding(
                op, dict(found.metadata["value"]), ttl, found.metadata.get("createdMs", 0)
            )
            finding["text"] = found.text
            try:
                self._learn(finding, self._root_for(scope), found.key)
            except FindingRetired as exc:
                if exc.key != found.key:
                    raise
        live = self._live(scope, key)
        return live[0] if live else None

    def __repr__(self) -> str:
        shown = shown_location(self._memory.journal_location)  # a DSN's password is never shown
        return f"JournalStore(db={str(self._memory.db_path)!r}, journal={shown!r})"
