"""Retrieval quality: does ``why`` find the finding a paraphrased question asks about?

The data set (``benchmarks/data/retrieval.txt``, written for this project) holds 312 findings about
ten people, an office and a billing service, each with two questions worded apart from it. Twelve
findings are new versions of another (the question of either version must be answered by the new
one: the old key is superseded and never returned), and twelve are learned then forgotten (their
questions must never return them). Every finding goes through the real write path (a session's
``learn``, a supersede, a ``forget``) into one scope of a fresh store, which is then synced, so the
questions are answered from the history DB as a long-lived store answers them.

For each ``why`` mode the store offers (``keyword`` always; ``semantic`` and ``hybrid`` once an
embedder is configured) it reports recall@1, recall@5 and the mean reciprocal rank over the top 10,
and how many times a forgotten or superseded finding was returned (the goal is none, ever).
Then the scale of a search by meaning: a store of ``sizes.synced + sizes.unsynced`` synthetic findings
(100,000 in the quick and full runs, a tenth of them unsynced), its vectors derived once (per second),
a fresh store's first semantic ``why`` and a warm one's (median of 7), a warm hybrid ``why``, and beside
them the bare floor: numpy's top 10 over the same vectors already in one float32 matrix.
``python -m benchmarks --only retrieval``.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import memory
from benchmarks._common import Sheet, Sizes, say

DATA = Path(__file__).resolve().parent / "data" / "retrieval.txt"
MODES = ("keyword", "semantic", "hybrid")
TOP = 10

NAMES = (
    *(f"retrieval.{mode}_{what}" for mode in MODES for what in ("recall_at_1", "recall_at_5", "mrr")),
    "retrieval.hybrid_gain_at_5",
    "retrieval.forgotten_returned",
    "retrieval.superseded_returned",
    "retrieval.findings",
    "retrieval.questions",
    "retrieval.scale_findings",
    "retrieval.derive_per_s",
    "retrieval.semantic_fresh_ms",
    "retrieval.semantic_warm_ms",
    "retrieval.hybrid_warm_ms",
    "retrieval.numpy_topk_ms",
    "retrieval.semantic_warm_over_numpy",
)

MAY_BE_ZERO = frozenset(
    {"retrieval.forgotten_returned", "retrieval.superseded_returned", "retrieval.hybrid_gain_at_5"}
)
"""Figures whose right value may be zero (counts of what must never happen, a difference)."""


@dataclass
class Item:
    """One line of the data set: its kind (F, U or X), the finding's text and its questions."""

    block: str
    kind: str
    text: str
    questions: list[str]
    key: str = ""
    answered_by: Item | None = None  # the item whose key answers these questions (U for an old F)


@dataclass
class DataSet:
    items: list[Item] = field(default_factory=list)

    @property
    def asked(self) -> list[tuple[str, Item]]:
        """(question, the item whose key is the right answer) for every question with an answer."""
        return [(q, i.answered_by or i) for i in self.items if i.kind != "X" for q in i.questions]

    @property
    def forgotten(self) -> list[tuple[str, Item]]:
        return [(q, i) for i in self.items if i.kind == "X" for q in i.questions]


def load(path: Path = DATA) -> DataSet:
    """Parse the data set; a malformed line is a ``ValueError`` naming it."""
    data = DataSet()
    block = ""
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("%"):
            continue
        if line.startswith("== "):
            block = line[3:].strip()
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 3 or parts[0] not in ("F", "U", "X") or not block or not all(parts):
            raise ValueError(f"{path}:{n}: not KIND | finding | question [| question]: {raw!r}")
        item = Item(block, parts[0], parts[1], parts[2:])
        if item.kind == "U":
            previous = data.items[-1] if data.items else None
            if previous is None or previous.kind != "F" or previous.block != block:
                raise ValueError(f"{path}:{n}: a U line must follow an F line of its block")
            previous.answered_by = item
        data.items.append(item)
    return data


def build(db: Path, data: DataSet, *, embedder: Any = None) -> memory.MemoryStore:
    """Learn, supersede and forget the data set into a fresh store at ``db``, then sync it."""
    kwargs = {"embedder": embedder} if embedder is not None else {}
    store = memory.MemoryStore(db, **kwargs)
    with store.session(scope="bench", flow="retrieval") as s:
        previous: Item | None = None
        for item in data.items:
            finding = {"text": item.text, "tags": [item.block]}
            if item.kind == "U":
                assert previous is not None
                item.key = s.learn(finding, supersedes=previous.key).key
            else:
                item.key = s.learn(finding).key
            if item.kind == "X":
                s.forget(item.key, reason="the person asked for it to be forgotten")
            previous = item
    store.sync()
    return store


def _why_modes(store: memory.MemoryStore) -> list[str]:
    """The ``why`` modes this store answers: keyword always; the others when ``why`` takes a mode
    and the store has an embedder."""
    if "mode" not in inspect.signature(store.why).parameters:
        return ["keyword"]
    if getattr(store, "embedder", None) is None:
        return ["keyword"]
    return list(MODES)


def score(
    ask: Callable[[str], Sequence[str]], data: DataSet, superseded: set[str], forgotten: set[str]
) -> dict[str, float]:
    """recall@1, recall@5, MRR (top 10) for ``ask`` (a question to the keys it returns, best first),
    and how often any question's top 10 held a superseded or a forgotten key."""
    at1 = at5 = 0
    rr = 0.0
    hits = {"superseded_returned": 0.0, "forgotten_returned": 0.0}
    asked = data.asked
    for question, answer in [*asked, *data.forgotten]:
        keys = list(ask(question))[:TOP]
        hits["superseded_returned"] += sum(1 for k in keys if k in superseded)
        hits["forgotten_returned"] += sum(1 for k in keys if k in forgotten)
        if answer.kind != "X" and answer.key in keys:
            rank = keys.index(answer.key) + 1
            at1 += rank == 1
            at5 += rank <= 5
            rr += 1.0 / rank
    n = len(asked)
    return {"recall_at_1": at1 / n, "recall_at_5": at5 / n, "mrr": rr / n, **hits}


_SCALE = (
    "scale_findings",
    "derive_per_s",
    "semantic_fresh_ms",
    "semantic_warm_ms",
    "hybrid_warm_ms",
    "numpy_topk_ms",
    "semantic_warm_over_numpy",
)


def _bench_scale(base: Path, embedder: Any, sizes: Sizes, sheet: Sheet, out: TextIO | None) -> None:
    import statistics

    import numpy as np

    from benchmarks.reads import build_dataset

    n = sizes.synced + sizes.unsynced
    db = base / "history.db"
    build_dataset(db, sizes.synced, sizes.unsynced)
    question = "which ledger entries paid the highest gas fees"
    with memory.MemoryStore(db, embedder=embedder) as store:
        t0 = time.perf_counter()
        store.derive_vectors()
        derive_s = time.perf_counter() - t0
    with memory.MemoryStore(db, embedder=embedder) as store:
        t0 = time.perf_counter()
        store.why(question, mode="semantic")
        fresh_ms = (time.perf_counter() - t0) * 1000
        warm, hybrid = [], []
        for _ in range(7):
            t0 = time.perf_counter()
            store.why(question, mode="semantic")
            warm.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            store.why(question, mode="hybrid")
            hybrid.append((time.perf_counter() - t0) * 1000)
    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((n, embedder.dims)).astype(np.float32)
    floor = []
    for _ in range(7):
        t0 = time.perf_counter()
        q = np.asarray(embedder.embed([question]), dtype=np.float32)[0]
        sims = matrix @ q
        top = np.argpartition(-sims, 9)[:10]
        sorted(top.tolist(), key=lambda i: -float(sims[i]))
        floor.append((time.perf_counter() - t0) * 1000)
    sheet.put("retrieval.scale_findings", float(n), "findings of the scale store (a tenth unsynced)")
    sheet.put("retrieval.derive_per_s", n / derive_s, "vectors derived per second (default embedder)")
    sheet.put("retrieval.semantic_fresh_ms", fresh_ms, "a fresh store's first semantic why (ms)")
    sheet.put("retrieval.semantic_warm_ms", statistics.median(warm), "a warm semantic why (ms, median)")
    sheet.put("retrieval.hybrid_warm_ms", statistics.median(hybrid), "a warm hybrid why (ms, median)")
    sheet.put("retrieval.numpy_topk_ms", statistics.median(floor), "numpy top 10 over a float32 matrix (ms)")
    sheet.put(
        "retrieval.semantic_warm_over_numpy",
        statistics.median(warm) / statistics.median(floor),
        "warm semantic why / the bare numpy floor",
    )


def bench_retrieval(base: Path, sheet: Sheet, out: TextIO | None, sizes: Sizes) -> None:
    """Build the data set's store and score every ``why`` mode it offers."""
    data = load()
    base.mkdir(parents=True, exist_ok=True)
    embedder = None
    try:
        from memory import default_embedder

        embedder = default_embedder()
    except (ImportError, AttributeError) as exc:
        why_not = f"no embedder: {exc}"
    else:
        why_not = ""
    t0 = time.perf_counter()
    store = build(base / "retrieval" / "history.db", data, embedder=embedder)
    say(out, f"retrieval: {len(data.items)} findings learned and synced in {time.perf_counter() - t0:.1f} s")
    superseded = {i.key for i in data.items if i.answered_by is not None}
    forgotten = {i.key for i in data.items if i.kind == "X"}
    modes = _why_modes(store)
    totals = {"forgotten": 0.0, "superseded": 0.0}
    with store:
        for mode in MODES:
            if mode not in modes:
                for what in ("recall_at_1", "recall_at_5", "mrr"):
                    sheet.skip(f"retrieval.{mode}_{what}", why_not or "this store's why has no mode")
                continue
            kwargs: dict[str, Any] = {} if mode == "keyword" and len(modes) == 1 else {"mode": mode}

            def ask(question: str, kwargs: dict[str, Any] = kwargs) -> list[str]:
                return [e.finding.key for e in store.why(question, limit=TOP, scope="bench", **kwargs)]

            got = score(ask, data, superseded, forgotten)
            for what in ("recall_at_1", "recall_at_5", "mrr"):
                sheet.put(f"retrieval.{mode}_{what}", got[what], f"why, {mode}: {what.replace('_', ' ')}")
            totals["forgotten"] += got["forgotten_returned"]
            totals["superseded"] += got["superseded_returned"]
    sheet.put("retrieval.findings", float(len(data.items)), "findings learned (12 superseded, 12 forgotten)")
    sheet.put("retrieval.questions", float(len(data.asked)), "questions with one right answer")
    sheet.put("retrieval.forgotten_returned", totals["forgotten"], "a forgotten finding in any top 10")
    sheet.put("retrieval.superseded_returned", totals["superseded"], "a superseded finding in any top 10")
    if embedder is not None:
        _bench_scale(base / "retrieval-scale", embedder, sizes, sheet, out)
    else:
        for name in NAMES:
            if name.split(".")[1] in _SCALE:
                sheet.skip(name, why_not)
    if "retrieval.hybrid_recall_at_5" in sheet.figures:
        gain = sheet.figures["retrieval.hybrid_recall_at_5"] - sheet.figures["retrieval.keyword_recall_at_5"]
        sheet.put("retrieval.hybrid_gain_at_5", gain, "hybrid recall@5 minus keyword recall@5")
    else:
        sheet.skip("retrieval.hybrid_gain_at_5", why_not or "no hybrid mode")
