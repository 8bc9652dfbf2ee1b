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
A second set, ``benchmarks/data/retrieval_heldout.txt`` (80 findings about four other people, a
warehouse and a search service; 154 questions), is scored the same way (``retrieval.heldout_*``): a
change to the ranking is kept only when it does not make either set worse, so nothing is fitted to
one set's questions. ``python -m benchmarks --only retrieval``; the quality alone, both sets, with no
scale store: ``python -m benchmarks.retrieval``.
"""

from __future__ import annotations

import inspect
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import memory
from benchmarks._common import Sheet, Sizes, say

DATA = Path(__file__).resolve().parent / "data" / "retrieval.txt"
HELDOUT = DATA.with_name("retrieval_heldout.txt")
MODES = ("keyword", "semantic", "hybrid")
TOP = 10

NAMES = (
    *(f"retrieval.{mode}_{what}" for mode in MODES for what in ("recall_at_1", "recall_at_5", "mrr")),
    "retrieval.hybrid_gain_at_5",
    *(f"retrieval.heldout_{mode}_{what}" for mode in MODES for what in ("recall_at_1", "recall_at_5", "mrr")),
    "retrieval.heldout_hybrid_gain_at_5",
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
    {
        "retrieval.forgotten_returned",
        "retrieval.superseded_returned",
        "retrieval.hybrid_gain_at_5",
        "retrieval.heldout_hybrid_gain_at_5",
    }
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
    """Learn, supersede and forget the data set into a fresh store at ``db``, then sync it. The
    store's clock moves on by a millisecond at each reading, so no two findings are learned in the
    same millisecond: keyword ties (broken newest first) fall the same way on every run."""
    kwargs: dict[str, Any] = {"embedder": embedder} if embedder is not None else {}
    store = memory.MemoryStore(db, clock=itertools.count(time.time_ns() // 1_000_000).__next__, **kwargs)
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


def _embedder() -> tuple[Any, str]:
    """The default embedder, or None and why there is none."""
    try:
        from memory import default_embedder

        return default_embedder(), ""
    except (ImportError, AttributeError) as exc:
        return None, f"no embedder: {exc}"


def quality(db: Path, data: DataSet, embedder: Any) -> tuple[dict[str, dict[str, float]], float]:
    """Build ``data``'s store at ``db`` and score every ``why`` mode it offers: the scores by mode,
    and the seconds the build took."""
    t0 = time.perf_counter()
    store = build(db, data, embedder=embedder)
    took = time.perf_counter() - t0
    superseded = {i.key for i in data.items if i.answered_by is not None}
    forgotten = {i.key for i in data.items if i.kind == "X"}
    modes = _why_modes(store)
    scores: dict[str, dict[str, float]] = {}
    with store:
        for mode in modes:
            kwargs: dict[str, Any] = {} if mode == "keyword" and len(modes) == 1 else {"mode": mode}

            def ask(question: str, kwargs: dict[str, Any] = kwargs) -> list[str]:
                return [e.finding.key for e in store.why(question, limit=TOP, scope="bench", **kwargs)]

            scores[mode] = score(ask, data, superseded, forgotten)
    return scores, took


def _put_scores(
    sheet: Sheet, prefix: str, path: Path, scores: dict[str, dict[str, float]], why_not: str
) -> None:
    """One data set's figures: each mode's recall@1, recall@5 and MRR, and hybrid's gain at 5."""
    for mode in MODES:
        for what in ("recall_at_1", "recall_at_5", "mrr"):
            name = f"retrieval.{prefix}{mode}_{what}"
            if mode in scores:
                sheet.put(name, scores[mode][what], f"why, {mode} ({path.name}): {what.replace('_', ' ')}")
            else:
                sheet.skip(name, why_not or "this store's why has no mode")
    if "hybrid" in scores:
        gain = scores["hybrid"]["recall_at_5"] - scores["keyword"]["recall_at_5"]
        sheet.put(f"retrieval.{prefix}hybrid_gain_at_5", gain, f"hybrid recall@5 minus keyword ({path.name})")
    else:
        sheet.skip(f"retrieval.{prefix}hybrid_gain_at_5", why_not or "no hybrid mode")


def bench_retrieval(base: Path, sheet: Sheet, out: TextIO | None, sizes: Sizes) -> None:
    """Build each data set's store and score every ``why`` mode it offers; then the scale."""
    base.mkdir(parents=True, exist_ok=True)
    embedder, why_not = _embedder()
    totals = {"forgotten": 0.0, "superseded": 0.0}
    for prefix, path, folder in (("", DATA, "retrieval"), ("heldout_", HELDOUT, "retrieval-heldout")):
        data = load(path)
        scores, took = quality(base / folder / "history.db", data, embedder)
        say(out, f"retrieval: {path.name}: {len(data.items)} findings learned and synced in {took:.1f} s")
        _put_scores(sheet, prefix, path, scores, why_not)
        for got in scores.values():
            totals["forgotten"] += got["forgotten_returned"]
            totals["superseded"] += got["superseded_returned"]
        if not prefix:
            sheet.put(
                "retrieval.findings", float(len(data.items)), "findings learned (12 superseded, 12 forgotten)"
            )
            sheet.put("retrieval.questions", float(len(data.asked)), "questions with one right answer")
    sheet.put(
        "retrieval.forgotten_returned", totals["forgotten"], "a forgotten finding in any top 10 (both sets)"
    )
    sheet.put(
        "retrieval.superseded_returned",
        totals["superseded"],
        "a superseded finding in any top 10 (both sets)",
    )
    if embedder is not None:
        _bench_scale(base / "retrieval-scale", embedder, sizes, sheet, out)
    else:
        for name in NAMES:
            if name.split(".")[1] in _SCALE:
                sheet.skip(name, why_not)


def main(argv: Sequence[str] | None = None) -> None:
    """Print both sets' scores by mode (no scale store): ``python -m benchmarks.retrieval [--dir D]``."""
    import argparse
    import json
    import tempfile

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--dir", type=Path, default=None, help="where the stores are built (a temp folder)")
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")
    args = parser.parse_args(argv)
    embedder, why_not = _embedder()
    if why_not:
        print(why_not)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        found = {}
        for path in (DATA, HELDOUT):
            scores, _ = quality(Path(tmp) / path.stem / "history.db", load(path), embedder)
            found[path.stem] = scores
    if args.json:
        print(json.dumps(found, indent=1))
        return
    for name, scores in found.items():
        for mode, got in scores.items():
            retired = got["forgotten_returned"] + got["superseded_returned"]
            print(
                f"{name:18} {mode:8} @1 {got['recall_at_1']:.3f}  @5 {got['recall_at_5']:.3f}  "
                f"mrr {got['mrr']:.3f}  retired returned {retired:.0f}"
            )
        if "hybrid" in scores:
            print(
                f"{name:18} gain@5 {scores['hybrid']['recall_at_5'] - scores['keyword']['recall_at_5']:.3f}"
            )


if __name__ == "__main__":
    main()
