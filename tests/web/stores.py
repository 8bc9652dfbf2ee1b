"""Stores for the dashboard's tests, built with the project's own write paths.

``demo_store`` is what ``flows demo`` leaves, and a little more: a done run that learned the demo's
weather findings and took a step (synced into the history DB), a later done run whose findings are
still unsynced files (one of them holds ``<script>``), a failed run, an interrupted one, and a
session (a done run of flow ``revise``) that supersedes one weather finding with a better one and
forgets another (its reason holds ``<script>``).
``agent_home`` is the ledger ``sail demo`` leaves, appended through the ledger's own writer: a
confirmed swap, a cadence skip, a reverted swap, a confirmed swap, a cadence skip, a balance skip;
with the runner's activity log (each tick's start and outcome, as ``sail tick`` records them, then
two ticks that failed: the node was down) and a config like the demo's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import flows
import journal
import memory
from memory.ledger import (
    Acted,
    ActivityCodec,
    ActivityLog,
    ActivityRecord,
    Amount,
    DispatchSettled,
    DispatchSubmitted,
    Ledger,
    LedgerCodec,
    Outcome,
    Skipped,
    TickFinished,
    TickStarted,
    balance_reason,
    cadence_reason,
)

SCRIPT_TEXT = '<script>alert("owned")</script> storms & <b>gales</b>'

_WEATHER = """\
import flows

OBSERVATIONS = [
    ("rain follows a falling barometer", ["weather", "pressure"]),
    ("fog forms when the air cools to its dew point", ["weather", "fog"]),
    ("a red sky at night often means fair weather next day", ["weather", "sky"]),
    ("thunder follows lightning because sound is slower than light", ["storm", "physics"]),
    ("snow needs the air near the ground below about 2 C", ["weather", "snow"]),
    ("wind flows from high pressure toward low pressure", ["wind", "pressure"]),
]


def read_barometer():
    return {"hPa": 1003}


@flows.flow(name="weather-notes", scope="weather")
async def body(f):
    reading = await f.step("barometer", read_barometer)
    for text, tags in OBSERVATIONS:
        await f.memory.learn({"text": text, "tags": tags, "source": "observation"})
    return {"learned": len(OBSERVATIONS), "hPa": reading["hPa"]}
"""

_LATER = f"""\
import flows


@flows.flow(name="storm-watch", scope="weather")
async def body(f):
    await f.memory.learn({{"text": {SCRIPT_TEXT!r}, "tags": ["storm"], "source": "observation"}})
    await f.memory.learn({{"text": "pressure drops fast before a storm", "tags": ["storm", "pressure"],
                           "metadata": {{"station": "EGLL", "hPa": 990}}}})
"""

_FAILING = """\
import flows


@flows.flow(name="flaky-sensor", scope="sensors")
async def body(f):
    raise RuntimeError("the sensor did not answer")
"""


@dataclass(frozen=True)
class DemoStore:
    """A populated store: where it is and what is in it."""

    db: Path
    journal: Path
    done_run: str
    later_run: str
    failed_run: str
    interrupted_run: str
    revise_run: str
    superseded: str  # the key of the finding the session superseded …
    replacement: str  # … the key of the one that replaced it …
    forgotten: str  # … and of the one it forgot


FORGET_REASON = "<script>alert('gone')</script> wrong in the tropics"
SCRIPT_TAG = "<script>tag</script>"
SCRIPT_META_KEY = "<b>key</b>"


def demo_store(home: Path) -> DemoStore:
    """Populate a store under ``home`` (see the module docstring)."""
    home.mkdir(parents=True, exist_ok=True)
    db = home / "history.db"
    files = {"weather_notes.py": _WEATHER, "storm_watch.py": _LATER, "flaky_sensor.py": _FAILING}
    for name, text in files.items():
        (home / name).write_text(text)
    done = flows.run(home / "weather_notes.py", db=db)
    assert done.ok, done.error
    with memory.MemoryStore(db) as store:
        store.sync()
    later = flows.run(home / "storm_watch.py", db=db)
    assert later.ok, later.error
    failed = flows.run(home / "flaky_sensor.py", db=db)
    assert not failed.ok
    backend = journal.open_journal(home / "flows-journal")
    try:
        info, lease = backend.begin("night-shift", "weather", {"source": str(home / "night.py")})
        backend.release(lease)  # the holder let go without finishing: interrupted
    finally:
        backend.close()
    with memory.MemoryStore(db) as store:
        every = {f.text: f.key for f in store.recall(limit=None)}
        red = every["a red sky at night often means fair weather next day"]
        snow = every["snow needs the air near the ground below about 2 C"]
        with store.session(scope="weather", flow="revise") as session:
            better = session.learn(
                {"text": "a red sky at night means fair weather when the weather comes from the west",
                 "tags": ["weather", "sky"], "source": "observation"},
                supersedes=red,
            )  # fmt: skip
            session.forget(snow, reason=FORGET_REASON)
            session.learn({"text": "markup in a tag and in metadata", "tags": [SCRIPT_TAG],
                           "metadata": {SCRIPT_META_KEY: SCRIPT_TEXT}})  # fmt: skip
        revise = better.citation.run_id
    return DemoStore(
        db, home / "flows-journal", done.run_id, later.run_id, failed.run_id, info.run_id, revise, red,
        better.key, snow,
    )  # fmt: skip


USDC = "0x" + "1a" * 20
WETH = "0x" + "2b" * 20
ROUTER = "0x" + "3c" * 20
AGENT = "0x" + "4d" * 20
CHAIN = 31337
T0 = 1_767_225_600  # 2026-01-01 00:00 UTC


def _tx(n: int) -> str:
    return f"0x{n:064x}"


def _swap(ts: int, block: int, n: int, outcome: Outcome, *balances: int) -> Acted:
    confirmed = outcome is Outcome.CONFIRMED
    return Acted(
        ts=ts,
        block=block,
        chain_id=CHAIN,
        action="swap",
        permission="demo-dca-permission",
        outcome=outcome,
        tx_hash=_tx(n),
        gas_used=142_013,
        token_in=USDC,
        token_out=WETH,
        amount_in=Amount.of(25_000_000, 6, "USDC"),
        amount_out=Amount.of(9_821_340_000_000_000, 18, "WETH") if confirmed else None,
        balances_after=dict(zip((USDC, WETH), balances, strict=True)) if confirmed else None,
    )


def agent_entries() -> list[Acted | Skipped]:
    """The six ticks of ``sail demo``, as its ledger records them."""
    hour = 3600
    return [
        _swap(T0 + 12, 5, 1, Outcome.CONFIRMED, 35_000_000, 9_821_340_000_000_000),
        Skipped(ts=T0 + 60, block=6, chain_id=CHAIN, reason=cadence_reason(48, hour)),
        _swap(T0 + 60 + hour + 12, 9, 2, Outcome.REVERTED, 0, 0),
        _swap(T0 + 120 + hour + 12, 11, 3, Outcome.CONFIRMED, 10_000_000, 19_642_680_000_000_000),
        Skipped(ts=T0 + 180 + hour, block=12, chain_id=CHAIN, reason=cadence_reason(48, hour)),
        Skipped(
            ts=T0 + 180 + 2 * hour, block=14, chain_id=CHAIN, reason=balance_reason(10_000_000, 25_000_000)
        ),
    ]


#: why the demo's second swap reverted (the owner had pulled the router's WETH)
REVERT_REASON = "INSUFFICIENT_BALANCE"

#: the message of the agent's last tick, which failed (it holds markup, shown as text)
FAILED_TICK_MESSAGE = "cannot reach the node at http://127.0.0.1:8545 <script>alert(1)</script>"


def failed_ticks() -> list[tuple[int, str]]:
    """The two ticks that failed after the demo's six: their time and code."""
    return [(T0 + 180 + 3 * 3600, "chain_unavailable"), (T0 + 180 + 4 * 3600, "chain_unavailable")]


def agent_home(home: Path) -> Path:
    """An agent home like ``sail demo`` leaves (see the module docstring); returns ``home``."""
    sail = home / ".sail"
    (sail / "memory").mkdir(parents=True, exist_ok=True)
    (sail / "config.toml").write_text(
        "# sail agent config, written by `sail init`; amounts are base units\n"
        f'rpc_url = "http://127.0.0.1:8545"\nrouter = "{ROUTER}"\ntoken_in = "{USDC}"\n'
        f'token_out = "{WETH}"\namount_in = "25000000"\ninterval_s = 3600\nmin_balance = "25000000"\n'
        'permission = "demo-dca-permission"\n'
    )
    activity = ActivityLog(sail)
    entries = agent_entries()
    for pid, e in enumerate(entries, start=100):
        activity.append(TickStarted(e.ts - 11, pid))
        if isinstance(e, Acted):
            activity.append(
                DispatchSubmitted(
                    e.ts - 10, CHAIN, e.tx_hash, AGENT, ROUTER, "0x38ed1739", "swap", e.permission
                )
            )
            event = "dispatch_executed" if e.outcome is Outcome.CONFIRMED else "dispatch_reverted"
            reason = None if e.outcome is Outcome.CONFIRMED else REVERT_REASON
            activity.append(DispatchSettled(e.ts - 9, event, e.tx_hash, e.block or 0, 142_013, reason))
            activity.append(TickFinished(e.ts + 1, pid, "submitted", tx_hash=e.tx_hash))
        else:
            activity.append(TickFinished(e.ts + 1, pid, "skipped", reason=e.reason))
    for pid, (ts, code) in enumerate(failed_ticks(), start=200):
        activity.append(TickStarted(ts, pid))
        activity.append(TickFinished(ts + 2, pid, "failed", code=code, message=FAILED_TICK_MESSAGE))
    with Ledger(sail).writer() as writer:
        for e in entries:
            writer.append(e)
    return home


def legacy_skips(home: Path, reasons: list[str], ts: int) -> None:
    """Append a skip per reason (one a second from ``ts``, blocks from 20), each with its tick's
    ``tick_finished``, as a ledger written before the agent's texts were bounded: through the line
    logs' own append, which the ledger's writer now refuses for a reason past ``MAX_TEXT_CHARS``."""
    sail = home / ".sail"
    ticks: list[ActivityRecord] = []
    with journal.LineLog(Ledger(sail).path, LedgerCodec()).locked() as log:
        for n, reason in enumerate(reasons):
            log.append(Skipped(ts=ts + n, block=20 + n, chain_id=CHAIN, reason=reason))
            ticks.append(TickFinished(ts + n, 300 + n, "skipped", reason=reason))
    with journal.LineLog(ActivityLog(sail).path, ActivityCodec()).locked() as activity:
        for record in ticks:
            activity.append(record)
