"""The PostgreSQL backend: one journal shared by flows on several hosts.

Tables, in the schema the DSN's ``search_path`` selects (created and migrated by the backend)::

    journal_schema   (version)                          one row: the schema version applied
    journal_runs     (run_id PK, flow, scope, state, epoch, created_ms, updated_ms, meta, error,
                      lease_key, lease_expires_ms)      a root run; its row lock is the run lock
    journal_records  (run_id, stream, seq, id, key, ts_ms, payload)
                     PK (run_id, stream, seq); UNIQUE (run_id, id); UNIQUE (run_id, stream, key)

The lease. ``begin``/``acquire`` draw a random 63-bit ``lease_key``, take the session advisory lock
on it from a connection that stays open while the lease is held, and store key and epoch in the run's
row. A holder is *live* while its advisory lock is held (so it dies with its session: a crashed or
SIGKILLed holder frees the run at once) and its ``lease_expires_ms`` lies in the future (a
heartbeat thread renews it every ``lease_ttl_s / 3``; a holder stalled past it may be taken over).
Fencing is the epoch: ``append`` locks the run row, checks epoch and state, and only then inserts.

What the lease does *not* promise: that the holder is alive at the moment you look; that a stalled
holder notices it lost the run before its next append (that append is refused); that two hosts'
clocks agree (expiry compares ``clock()`` readings of different hosts, so their skew must stay well
under ``lease_ttl_s``; a skew larger than that lets a resumer break a live lease early, and the
fencing epoch still keeps every record consistent).

Every driver failure is translated in one place, ``_translated``: a lost or refused connection is
``journal_unavailable`` and the connection is dropped, so the next call reconnects.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import orjson
import psycopg
import psycopg.conninfo
import psycopg.errors
from psycopg import sql

from journal._backend import JournalBackend
from journal._dsn import POSTGRES_SCHEMES, location_secrets, scrubbed, shown_location
from journal._errors import (
    JournalCorrupt,
    JournalError,
    JournalLeaseHeld,
    JournalLocationInvalid,
    JournalReadInterrupted,
    JournalRunNotFound,
    JournalUnavailable,
    JournalUnwritable,
)
from journal._model import (
    MAX_MS,
    MAX_PAYLOAD_BYTES,
    MAX_RUN_BYTES,
    Lease,
    Record,
    RunInfo,
    RunState,
    check_fence,
    check_key,
    check_label,
    check_name,
    check_not_held,
    check_open,
    check_record_id,
    check_resumable,
    check_run_size,
    check_sync,
    finish_state,
    lease_lost,
    new_record_id,
    new_run_id,
    now_ms,
    payload_json,
    read_clock,
    record_problem,
    releases,
    run_record_size,
    shown,
    valid_name,
    whole,
)

SCHEMA_VERSION = 10
DEFAULT_LEASE_TTL_S = 30.0
_CONNECT_TIMEOUT_S = 5
T = TypeVar("T")
_MAX_IDLE = 8  # pooled connections kept open between calls
_MIGRATE_LOCK = 0x666C6F77  # 'flow': advisory-lock namespace that serialises schema migrations
_TURN_LOCK = 0x7475726E  # 'turn': advisory-lock namespace of ``turn``
# 'tgat': the gate of a turn, held shared by each commit its holder makes (in the commit's own
# transaction) and passed (taken and let go at once) by whoever takes the turn next
_TURN_GATE = 0x74676174
# Whether this session's role may vacuum ``journal_records`` (the server skips, with a warning
# only, a table whose owner it is not), and the role's name; ``_MAY_VACUUM_OF`` closes it
_MAY_VACUUM = (
    "select (select rolsuper from pg_roles where rolname = current_user)"
    " or pg_has_role(current_user, c.relowner, 'USAGE')"
    " or pg_has_role(current_user,"
    " (select datdba from pg_database where datname = current_database()), 'USAGE')"
)
_MAY_VACUUM_OF = ", current_user::text from pg_class c where c.oid = 'journal_records'::regclass"
# In a commit made in a turn, after the gate is held: whether the turn's session holds it still
_TURN_HELD = (
    "select exists(select 1 from pg_locks where locktype = 'advisory' and granted and pid = %s"
    " and objsubid = 2 and mode = %s and classid = %s::oid"
    " and objid = (hashtext(current_schema() || ':' || %s))::oid)"
)
_ELSEWHERE_READ = 8  # other runs' records of a key an append unless elsewhere reads, at most
# A session that holds a lease's or a turn's advisory lock sits idle, in a transaction (a turn) or
# not (the lease connection), while its holder works; a server timeout on idle sessions would end
# it and hand the lock to another host while the holder goes on. Both are switched off there (any
# role may; the setting is skipped where the server has no such parameter). %s: is_local.
_TURN_OF = "pg_advisory_xact_lock{0}(%s, hashtext(current_schema() || ':' || %s))"  # {0}: '' or '_shared'
# What may still see a row version that the transaction numbered %s (32 bits) replaced: a session
# of this database whose snapshot or own transaction is that old, a prepared transaction or a
# replication slot; each described for a person.
_OLDER_SNAPSHOTS = (
    "select 'session ' || pid || ' of ' || coalesce(usename, '?') || ' from '"
    " || coalesce(client_addr::text, 'a local socket') || ', in a transaction since '"
    " || coalesce(xact_start::text, '?') from pg_stat_activity"
    " where pid <> pg_backend_pid() and datname = current_database()"
    " and (age(backend_xmin) >= age(%s::xid) or age(backend_xid) >= age(%s::xid))"
    " union all select 'prepared transaction ' || gid from pg_prepared_xacts"
    " where age(transaction) >= age(%s::xid)"
    " union all select 'replication slot ' || slot_name from pg_replication_slots"
    " where age(xmin) >= age(%s::xid)"
)
_REWRITE_PRUNE_WAIT_S = 2.0  # a rewrite's own prune waits this long for older snapshots to end
_NO_IDLE_TIMEOUTS = (
    "select set_config(name, '0', %s) from pg_settings"
    " where name in ('idle_in_transaction_session_timeout', 'idle_session_timeout')"
)

_TABLES = ("journal_schema", "journal_runs", "journal_records", "journal_heads", "journal_heads_deletes")
# The derived tables, each with the schema version to set so that the next open makes it again (the
# steps after that version run again, and every one that touches it may).
_DERIVED = {"journal_heads": 3, "journal_heads_deletes": 4}

# Each step brings the schema from version n-1 to n; applied in order, in one transaction.
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            """create table journal_runs (
                run_id text primary key,
                flow text not null,
                scope text not null,
                state text not null check (state in ('running', 'done', 'failed')),
                epoch integer not null,
                created_ms bigint not null,
                updated_ms bigint not null,
                meta text not null,
                error text,
                lease_key bigint,
                lease_expires_ms bigint
            )""",
            "create index journal_runs_newest on journal_runs (created_ms desc, run_id desc)",
            """create table journal_records (
                run_id text not null references journal_runs (run_id),
                stream text not null,
                seq bigint not null,
                id text not null,
                key text,
                ts_ms bigint not null,
                payload text not null,
                primary key (run_id, stream, seq),
                unique (run_id, id)
            )""",
            """create unique index journal_records_key on journal_records (run_id, stream, key)
                where key is not null""",
        ),
    ),
    (
        2,
        # One round trip per append: lock the run row (the run lock), fence, return the record that
        # already has this key (or, unkeyed, this id: so a retried call never appends twice), else
        # insert the next sequence number. Run as one statement, it is one transaction.
        (
            """create function journal_append(
                p_run text, p_epoch integer, p_stream text, p_key text, p_id text, p_ts bigint,
                p_payload text
            ) returns table (
                o_status text, o_epoch integer, o_state text, o_seq bigint, o_id text, o_key text,
                o_ts bigint, o_payload text
            ) language plpgsql as $$
            declare
                v_epoch integer;
                v_state text;
            begin
                select r.epoch, r.state into v_epoch, v_state
                    from journal_runs r where r.run_id = p_run for update;
                if not found then
                    return query select 'missing', null::integer, null::text, null::bigint,
                        null::text, null::text, null::bigint, null::text;
                    return;
                end if;
                if v_epoch <> p_epoch or v_state <> 'running' then
                    return query select 'fenced', v_epoch, v_state, null::bigint,
                        null::text, null::text, null::bigint, null::text;
                    return;
                end if;
                return query select 'found', v_epoch, v_state, x.seq, x.id, x.key, x.ts_ms, x.payload
                    from journal_records x
                    where x.run_id = p_run and x.stream = p_stream
                      and (x.key = p_key or (p_key is null and x.id = p_id));
                if found then
                    return;
                end if;
                return query insert into journal_records as x (run_id, stream, seq, id, key, ts_ms, payload)
                    select p_run, p_stream, coalesce(max(y.seq), 0) + 1, p_id, p_key, p_ts, p_payload
                    from journal_records y where y.run_id = p_run and y.stream = p_stream
                    returning 'appended', v_epoch, v_state, x.seq, x.id, x.key, x.ts_ms, x.payload;
            end
            $$""",
        ),
    ),
    (
        3,
        # A stream's newest record in every run, in one index-only walk (``stream_heads``): what a
        # store sharing this journal asks before each read, to learn of other hosts' forgets.
        ("create index journal_records_by_stream on journal_records (stream, run_id, seq)",),
    ),
    (
        4,
        # Each stream's newest record per run, kept by the append in its own transaction, with the
        # id of the transaction that last moved it (``heads_changed``): a store asking before each
        # read which runs forgot or committed something since its last look reads only the heads
        # that moved, not an index entry per record of the stream (a walk that grew with the journal).
        (
            """create table journal_heads (
                stream text not null,
                run_id text not null references journal_runs (run_id),
                head bigint not null,
                changed xid8 not null,
                primary key (stream, run_id)
            )""",
            "create index journal_heads_changed on journal_heads (changed)",
            """insert into journal_heads (stream, run_id, head, changed)
                select stream, run_id, max(seq), pg_current_xact_id() from journal_records
                group by stream, run_id""",
            """create or replace function journal_append(
                p_run text, p_epoch integer, p_stream text, p_key text, p_id text, p_ts bigint,
                p_payload text
            ) returns table (
                o_status text, o_epoch integer, o_state text, o_seq bigint, o_id text, o_key text,
                o_ts bigint, o_payload text
            ) language plpgsql as $$
            declare
                v_epoch integer;
                v_state text;
                v_seq bigint;
            begin
                select r.epoch, r.state into v_epoch, v_state
                    from journal_runs r where r.run_id = p_run for update;
                if not found then
                    return query select 'missing', null::integer, null::text, null::bigint,
                        null::text, null::text, null::bigint, null::text;
                    return;
                end if;
                if v_epoch <> p_epoch or v_state <> 'running' then
                    return query select 'fenced', v_epoch, v_state, null::bigint,
                        null::text, null::text, null::bigint, null::text;
                    return;
                end if;
                return query select 'found', v_epoch, v_state, x.seq, x.id, x.key, x.ts_ms, x.payload
                    from journal_records x
                    where x.run_id = p_run and x.stream = p_stream
                      and (x.key = p_key or (p_key is null and x.id = p_id));
                if found then
                    return;
                end if;
                insert into journal_records as x (run_id, stream, seq, id, key, ts_ms, payload)
                    select p_run, p_stream, coalesce(max(y.seq), 0) + 1, p_id, p_key, p_ts, p_payload
                    from journal_records y where y.run_id = p_run and y.stream = p_stream
                    returning x.seq into v_seq;
                insert into journal_heads as h (stream, run_id, head, changed)
                    values (p_stream, p_run, v_seq, pg_current_xact_id())
                    on conflict (stream, run_id)
                    do update set head = excluded.head, changed = excluded.changed;
                return query select 'appended', v_epoch, v_state, v_seq, p_id, p_key, p_ts, p_payload;
            end
            $$""",
        ),
    ),
    (
        5,
        # The id of the newest transaction that deleted rows of ``journal_heads`` (a delete or a
        # truncate: an administrator, a partial restore, another tool; the journal itself never
        # deletes there), kept by a statement trigger in the deleting transaction: a look from a
        # mark at or below it is whole (``heads_changed``), since a deleted row may have been the
        # only word of an append made since the mark. Every statement may run again: a journal
        # restored without ``journal_heads`` is mended by running steps 4, 5 and 6 again.
        (
            "create table if not exists journal_heads_deletes (deleted xid8 not null)",
            """insert into journal_heads_deletes (deleted) select '0'::xid8
                where not exists (select 1 from journal_heads_deletes)""",
            # The table is named in the heads table's own schema: whoever deletes may have another
            # search_path. ``greatest``: deleting transactions write the row in turn, and a later
            # writer's id may be the smaller one; the row never goes back.
            """create or replace function journal_heads_note_delete() returns trigger
            language plpgsql as $$
            declare
                v_done integer;
            begin
                execute format('update %I.journal_heads_deletes'
                    ' set deleted = greatest(deleted, pg_current_xact_id())', tg_table_schema);
                get diagnostics v_done = row_count;
                if v_done = 0 then
                    execute format('insert into %I.journal_heads_deletes (deleted)'
                        ' values (pg_current_xact_id())', tg_table_schema);
                end if;
                return null;
            end
            $$""",
            "drop trigger if exists journal_heads_deleted on journal_heads",
            """create trigger journal_heads_deleted after delete or truncate on journal_heads
                for each statement execute function journal_heads_note_delete()""",
        ),
    ),
    (
        6,
        # The trigger fires for every session, those with ``session_replication_role = replica``
        # too (a logical-replication apply worker, ``pg_restore --disable-triggers``), for which an
        # enabled trigger (state 'O') does not fire: their deletes went unnoticed. May run again
        # (after step 5 made the trigger again, in state 'O').
        ("alter table journal_heads enable always trigger journal_heads_deleted",),
    ),
    (
        7,
        # Every run's records of one key, in one index probe (``keyed_anywhere``): what an update on
        # one host asks before it gives its new version a key, so that a key another host's learn
        # took stays that memory's. And an append that holds a turn shared while it commits
        # (``append(turn=)``): a host's learn is then either committed before another host's
        # update looks at the key, or waits until that update has committed. Both may run again.
        (
            """create index if not exists journal_records_by_key on journal_records (key, stream)
                where key is not null""",
            f"""create or replace function journal_append_in_turn(
                p_turn text, p_run text, p_epoch integer, p_stream text, p_key text, p_id text,
                p_ts bigint, p_payload text
            ) returns table (
                o_status text, o_epoch integer, o_state text, o_seq bigint, o_id text, o_key text,
                o_ts bigint, o_payload text
            ) language plpgsql as $$
            begin
                -- the turn first, before the run row: a holder of the turn never waits for this run
                perform pg_advisory_xact_lock_shared(
                    {_TURN_LOCK}, hashtext(current_schema() || ':' || p_turn));
                return query select * from journal_append(
                    p_run, p_epoch, p_stream, p_key, p_id, p_ts, p_payload);
            end
            $$""",
        ),
    ),
    (
        8,
        # An update of a head row that is not an append's move (which stamps the row with its own
        # transaction's id, for the same stream and run) is noted as a deletion: a row whose stamp
        # was set back below a reader's mark, or made another stream's or run's, was the only word
        # of an append as much as a deleted one. The condition is the trigger's own ``when``, so an
        # append's move calls no function. Enabled ``always``, as step 6 made the delete trigger.
        # Every statement may run again.
        (
            "drop trigger if exists journal_heads_rewritten on journal_heads",
            """create trigger journal_heads_rewritten after update on journal_heads for each row
                when (new.changed is distinct from pg_current_xact_id()
                    or new.stream is distinct from old.stream or new.run_id is distinct from old.run_id)
                execute function journal_heads_note_delete()""",
            "alter table journal_heads enable always trigger journal_heads_rewritten",
        ),
    ),
    (
        9,
        # ``append(turn=, unless_elsewhere=)``: the append in its turn, unless another run holds a
        # record of the key that holds a token (or a ``\u`` escape, which may spell it otherwise),
        # which it returns instead, with its run: a learn on one host then commits as a version of
        # the memory another host's update made of that key, as it does on one host. An own record
        # of the key is answered as ``journal_append`` answers it. May run again.
        (
            f"""create or replace function journal_append_in_turn_unless(
                p_turn text, p_unless text, p_run text, p_epoch integer, p_stream text, p_key text,
                p_id text, p_ts bigint, p_payload text
            ) returns table (
                o_status text, o_epoch integer, o_state text, o_seq bigint, o_id text, o_key text,
                o_ts bigint, o_payload text, o_run text
            ) language plpgsql as $$
            begin
                perform pg_advisory_xact_lock_shared(
                    {_TURN_LOCK}, hashtext(current_schema() || ':' || p_turn));
                -- one probe of the index of keys when no other run holds the key (the usual case)
                return query select 'elsewhere', null::integer, null::text, x.seq, x.id, x.key,
                        x.ts_ms, x.payload, x.run_id
                    from journal_records x
                    where x.key = p_key and x.stream = p_stream and x.run_id <> p_run
                      and (strpos(x.payload, p_unless) > 0 or strpos(x.payload, '\\u') > 0)
                      and not exists (select 1 from journal_records y
                          where y.run_id = p_run and y.stream = p_stream and y.key = p_key)
                    order by x.run_id, x.seq limit 1;
                if found then
                    return;
                end if;
                return query select a.*, p_run from journal_append(
                    p_run, p_epoch, p_stream, p_key, p_id, p_ts, p_payload) a;
            end
            $$""",
        ),
    ),
    (
        10,
        # Step 9's look, bounded: at most 8 other runs' records of the key are read (one probe of
        # the index of keys), in no set order, and no look at this run's own (``journal_append``
        # answers that). A key committed by many runs (a finding an agent learns again on every
        # tick, each tick a root run of its own) no longer makes each learn of it read every one.
        # Every other run's commit of a key names the same memory, or none does, so any of them
        # answers. May run again.
        (
            f"""create or replace function journal_append_in_turn_unless(
                p_turn text, p_unless text, p_run text, p_epoch integer, p_stream text, p_key text,
                p_id text, p_ts bigint, p_payload text
            ) returns table (
                o_status text, o_epoch integer, o_state text, o_seq bigint, o_id text, o_key text,
                o_ts bigint, o_payload text, o_run text
            ) language plpgsql as $$
            begin
                perform pg_advisory_xact_lock_shared(
                    {_TURN_LOCK}, hashtext(current_schema() || ':' || p_turn));
                return query select 'elsewhere', null::integer, null::text, x.seq, x.id, x.key,
                        x.ts_ms, x.payload, x.run_id
                    from (select * from journal_records z
                        where z.key = p_key and z.stream = p_stream and z.run_id <> p_run
                        limit {_ELSEWHERE_READ}) x
                    where strpos(x.payload, p_unless) > 0 or strpos(x.payload, '\\u') > 0
                    limit 1;
                if found then
                    return;
                end if;
                return query select a.*, p_run from journal_append(
                    p_run, p_epoch, p_stream, p_key, p_id, p_ts, p_payload) a;
            end
            $$""",
        ),
    ),
)

# A run's holder is live while the advisory lock on its lease key is granted to some session and
# its lease has not expired. ``pg_advisory_lock(bigint)`` shows in pg_locks as classid = high 32
# bits, objid = low 32 bits, objsubid = 1. The lock table is read once per query (``held``).
_HELD = """with held as materialized (
    select l.classid::bigint << 32 | l.objid::bigint as lease_key from pg_locks l
    where l.locktype = 'advisory' and l.granted and l.objsubid = 1
      and l.database = (select oid from pg_database where datname = current_database()))
"""
_LIVE = """(r.state = 'running' and r.lease_expires_ms > %(now)s
    and exists (select 1 from held where held.lease_key = r.lease_key))"""
# Rows read back are bounded as files are (``MAX_RUN_BYTES``, ``MAX_PAYLOAD_BYTES``): the server
# measures the unbounded columns (``octet_length`` reads a stored value's size, not the value) and
# sends a value only when its row is within the bound, so an oversized row costs a number, and its
# size is returned beside it for the reader to refuse. The indexed columns (run id, stream, id,
# key) are bounded by the index's row size.
_RUN_SIZE = (
    "(octet_length(r.flow)::bigint + octet_length(r.scope) + octet_length(r.meta)"
    " + coalesce(octet_length(r.error), 0))"
)
_RUN_KEPT = f"{_RUN_SIZE} <= {MAX_RUN_BYTES}"
_RUN_COLUMNS = (
    f"r.run_id, case when {_RUN_KEPT} then r.flow end, case when {_RUN_KEPT} then r.scope end, r.state,"
    f" r.epoch, r.created_ms, r.updated_ms, case when {_RUN_KEPT} then r.meta end,"
    f" case when {_RUN_KEPT} then r.error end, {_RUN_SIZE}"
)
_PAYLOAD_SIZE = "octet_length({0})::bigint"
_PAYLOAD = f"case when octet_length({{0}}) <= {MAX_PAYLOAD_BYTES} then {{0}} end, {_PAYLOAD_SIZE}"
_APPEND = (
    "select o_status, o_epoch, o_state, o_seq, o_id, o_key, o_ts, "
    + _PAYLOAD.format("o_payload")
    + " from journal_append(%s, %s, %s, %s, %s, %s, %s)"
)
_APPEND_IN_TURN = _APPEND.replace("journal_append(", "journal_append_in_turn(%s, ")
_APPEND_UNLESS = _APPEND.replace(
    " from journal_append(", ", o_run from journal_append_in_turn_unless(%s, %s, "
)


# The id of the newest transaction that deleted heads (``journal_heads_deletes``, schema step 5; or
# rewrote one otherwise than an append moves it, step 8), and whether both triggers that keep it
# fire for every session (state 'A', schema steps 6 and 8): a trigger
# dropped or disabled ("alter table ... disable trigger") notices no delete, one enabled only for
# origin sessions ('O': "enable trigger") none of a replica-role session's, one enabled only for
# replica sessions ('R') none of the others', and while it misses some no mark holds.
_LAST_DELETE = "(select d.deleted::text from journal_heads_deletes d order by d.deleted desc limit 1)"
_DELETES_NOTICED = (
    "(select count(*) from pg_trigger t where t.tgrelid = to_regclass('journal_heads')"
    " and t.tgname in ('journal_heads_deleted', 'journal_heads_rewritten') and t.tgenabled = 'A') = 2"
)


def _mark_holds(since: int, row: Sequence[Any]) -> bool:
    """Whether a look from the mark whose transaction id is ``since`` may read only the heads
    stamped since it, by the first row of ``_heads_rows`` (taken on the mark's own server, database
    and heads table): not when the mark is ahead of the server's oldest running transaction (its ids
    went back), nor when a transaction with an id at or above it deleted heads, which may have taken
    the row of an append made since (a delete of that row runs after the append commits, so after the
    look that made the mark: the deleting transaction was running then or began later, and its id is
    at or above the mark), nor when deletes go unnoticed."""
    _identity, mark, deleted, noticed = row[:4]
    return since <= int(mark) and bool(noticed) and deleted is not None and int(deleted) < since


_STORED_STATES = frozenset({RunState.RUNNING.value, RunState.DONE.value, RunState.FAILED.value})


def _size(value: object) -> str:
    """A size the server measured, for a message."""
    return f"{value:,}" if type(value) is int else shown(value)


def _json_or_none(text: object) -> Any:
    """``text`` (a column read back) parsed as JSON, or None when it is not JSON text."""
    if not isinstance(text, str | bytes):
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def redact_dsn(dsn: str) -> str:
    """Return ``dsn`` without its password (URL or ``key=value`` form), for messages."""
    if dsn.startswith(POSTGRES_SCHEMES):
        return shown_location(dsn)  # cut by hand: see there why not by urlsplit
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    params.pop("password", None)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


_KV_PASSWORD = re.compile(r"password\s*=\s*('(?:\\.|[^'])*'|[^\s&]*)", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _secrets_in(dsn: str) -> list[str]:
    """Every spelling of a password that ``dsn`` may hold, longest first, to scrub from messages."""
    found = location_secrets(dsn)
    found += [m.group(1).strip("'") for m in _KV_PASSWORD.finditer(dsn)]
    with contextlib.suppress(psycopg.Error):
        found.append(str(psycopg.conninfo.conninfo_to_dict(dsn).get("password") or ""))
    found += [urllib.parse.unquote(f) for f in found]
    return sorted({f for f in found if f}, key=len, reverse=True)


def check_dsn(dsn: str) -> str:
    """Return ``dsn`` when libpq can parse it; raise ``JournalLocationInvalid`` otherwise.

    The error is one line and never holds the password: libpq quotes the offending part of a DSN
    in its message, so every spelling of the password is scrubbed from it first.
    """
    problem: str | None = None
    if _CONTROL.search(dsn):
        problem = "it holds a control character"
    else:
        try:
            params = psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            problem = _first_line(exc)
        else:
            if not params.get("dbname"):
                # libpq would fall back to $PGDATABASE or the user's name, and the journal would
                # make its tables wherever that lands: a location names its database, always
                shown = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", redact_dsn(dsn))
                raise JournalLocationInvalid(
                    f"the PostgreSQL journal location {shown} names no database; name it in the "
                    "location, e.g. postgresql://user@host:5432/db (or ?dbname=db)"
                )
    if problem is None:
        return dsn
    problem = scrubbed(problem.replace(dsn, "<the DSN>"), _secrets_in(dsn))
    shown = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", redact_dsn(dsn))
    raise JournalLocationInvalid(
        f"the PostgreSQL journal location {shown} is not a valid DSN ({problem}); fix "
        "$FLOWS_JOURNAL (or the location given), e.g. postgresql://user@host:5432/db"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextlib.contextmanager
def _committed(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Cursor[Any]]:
    """Finish the transaction already begun on ``conn``: commit after the body, roll back on an exception.

    Driver errors propagate; the caller then closes the connection.
    """
    try:
        with conn.cursor() as cur:
            yield cur
    except psycopg.Error:
        raise
    except BaseException:
        conn.execute("rollback")
        raise
    conn.execute("commit")


class _TurnSession:
    """The session a thread takes its turns on (``PostgresJournal._turn_held``): a pooled connection
    in one transaction, which holds every turn taken on it until the last of them ends (``count``);
    ``lost`` says why its transaction failed while turns were held on it (they were let go)."""

    def __init__(self, cur: psycopg.Cursor[Any], stack: contextlib.ExitStack) -> None:
        self.cur = cur
        self.stack = stack
        self.count = 0
        self.lost: str | None = None


class _Pool:
    """A small, lock-protected pool of autocommit connections; a broken one is never reused.

    ``transaction`` sends ``BEGIN`` itself: when that fails on a connection taken from the pool, the
    server never saw the transaction, so it is retried once on a fresh connection. That is how a
    journal reconnects after a server restart without failing a call that started afterwards.
    """

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]]) -> None:
        self._connect = connect
        self._idle: list[psycopg.Connection[Any]] = []
        self._mutex = threading.Lock()

    def _begin(self) -> psycopg.Connection[Any]:
        with self._mutex:
            conn = self._idle.pop() if self._idle else None
        if conn is not None:
            try:
                conn.execute("begin")
                return conn
            except (psycopg.OperationalError, psycopg.InterfaceError):
                self._discard(conn)  # dead since it was last used: nothing was sent, start afresh
        conn = self._connect()
        try:
            conn.execute("begin")
        except BaseException:
            conn.close()
            raise
        return conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg.Cursor[Any]]:
        """Yield a cursor in a new transaction; commit on success, roll back on an exception."""
        conn = self._begin()
        try:
            with _committed(conn) as cur:
                yield cur
        except psycopg.Error:
            self._discard(conn)
            raise
        except BaseException:
            self._give_back(conn)  # rolled back cleanly
            raise
        self._give_back(conn)

    def call(self, fn: Callable[[psycopg.Cursor[Any]], T]) -> T:
        """Run ``fn`` (single autocommit statements, each safe to repeat) on a pooled connection.

        When the connection turns out dead (it died while idle in the pool, or it broke while the
        statement ran: its answer, and whether the server committed it, are lost), ``fn`` runs once
        more on a fresh one. Repeating is what makes a lost answer exact: an append is found again
        by its key or record id, never made twice.
        """
        for fresh in (False, True):
            with self._mutex:
                conn = None if fresh or not self._idle else self._idle.pop()
            if conn is None:
                conn = self._connect()
            try:
                with conn.cursor() as cur:
                    result = fn(cur)
            except (psycopg.OperationalError, psycopg.InterfaceError):
                dead = conn.broken or conn.closed  # not a statement the server cancelled on a live one
                self._discard(conn)
                if dead and not fresh:
                    continue  # start afresh (a server that is down refuses the new connection)
                raise
            except psycopg.Error:
                self._discard(conn)
                raise
            except BaseException:
                if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                    self._give_back(conn)
                else:
                    conn.close()
                raise
            self._give_back(conn)
            return result
        raise AssertionError("unreachable: the second attempt runs on a fresh connection")

    def _discard(self, conn: psycopg.Connection[Any]) -> None:
        conn.close()
        self.clear()  # the server likely restarted or dropped us: the idle ones are dead too

    def _give_back(self, conn: psycopg.Connection[Any]) -> None:
        with self._mutex:
            if len(self._idle) < _MAX_IDLE and not conn.closed:
                self._idle.append(conn)
                return
        conn.close()

    def clear(self) -> None:
        """Close every idle connection."""
        with self._mutex:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class PostgresJournal:
    """The journal in a PostgreSQL schema, shared by every host that opens the same DSN.

    Args:
        dsn: a ``postgresql://`` URL (or libpq ``key=value`` string); its ``search_path`` picks the
            schema (e.g. ``?options=-csearch_path%3Dflows``), which must exist.
        clock: returns milliseconds since the epoch; stamps runs and records and times leases.
        lease_ttl_s: how long a lease outlives its holder's last renewal before a resumer may break it.

    Raises:
        ValueError: ``lease_ttl_s`` is not positive (a programming error: no command or file sets it).
        JournalLocationInvalid: ``dsn`` is malformed.

    Thread-safe: calls may come from many threads; each takes a pooled connection.
    """

    def __init__(
        self,
        dsn: str,
        *,
        clock: Callable[[], int] = now_ms,
        lease_ttl_s: float = DEFAULT_LEASE_TTL_S,
    ) -> None:
        if lease_ttl_s <= 0:
            raise ValueError(f"lease_ttl_s must be positive, not {lease_ttl_s}")
        self._dsn = check_dsn(dsn)
        self._location = redact_dsn(dsn)
        self._secrets = _secrets_in(dsn)  # scrubbed from every driver message quoted back
        self._clock = clock
        self._ttl_ms = int(lease_ttl_s * 1000)
        self._pool = _Pool(self._connect)
        self._migrated = False
        self._migrate_mutex = threading.Lock()
        # The lease connection holds the session advisory locks of every lease this object holds.
        self._lease_conn: psycopg.Connection[Any] | None = None
        self._held: dict[str, tuple[int, int]] = {}  # run_id -> (epoch, lease_key)
        self._lease_mutex = threading.RLock()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._closed = False
        # the newest transaction whose rewrite's old row versions no vacuum is known to have pruned
        self._unpruned: int | None = None
        self._prune_mutex = threading.Lock()
        # per thread: the turns it holds (``turn``: name, the pid of the session holding it, the
        # lock's mode) and whether its rewrites leave their pruning to the caller (``deferred_prune``)
        self._per_thread = threading.local()
        # each thread's session for its turns (``_turn_held``), by thread id, with the thread
        self._turn_sessions: dict[int, tuple[threading.Thread, _TurnSession]] = {}
        self._turn_sessions_mutex = threading.Lock()

    # -- connections and errors --------------------------------------------------------------

    @property
    def location(self) -> str:
        """The DSN without its password."""
        return self._location

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S)
        try:
            self._migrate(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    @contextlib.contextmanager
    def _translated(
        self, doing: str, *, run_id: str | None = None, stream: str | None = None, reading: bool = False
    ) -> Iterator[None]:
        """Map every driver error raised inside to a journal error; the one place that does."""
        try:
            yield
        except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as exc:
            raise JournalUnavailable(
                f"the PostgreSQL journal at {self._location} had a statement cancelled by the server "
                f"while {doing}: {scrubbed(_first_line(exc), self._secrets)}; a statement_timeout or "
                "lock_timeout (set on the server, the database, the role or in the DSN's options) is "
                "shorter than the journal's work, or an administrator cancelled it: raise or unset it "
                "for the journal's connections, then retry or resume the run",
                run_id=run_id,
                stream=stream,
            ) from exc
        except psycopg.errors.DeadlockDetected as exc:
            raise JournalUnavailable(
                f"the PostgreSQL journal at {self._location} ended a deadlock while {doing}: two "
                "holders (on this host or others) each waited for a lock the other held, and the "
                "server failed this one: do it again",
                run_id=run_id,
                stream=stream,
            ) from exc
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise JournalUnavailable(
                f"the PostgreSQL journal at {self._location} is unavailable while {doing}: "
                f"{scrubbed(_first_line(exc), self._secrets)}; check that the server is running and "
                "reachable ($FLOWS_JOURNAL), then retry or resume the run",
                run_id=run_id,
                stream=stream,
            ) from exc
        except psycopg.Error as exc:
            kind = JournalReadInterrupted if reading else JournalUnwritable
            hint = ""
            if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
                hint = (
                    "; the database takes no writes here (read-only, a standby): point $FLOWS_JOURNAL "
                    "at a writable server to record runs; reads work as they are"
                )
            raise kind(
                f"the PostgreSQL journal at {self._location} failed while {doing}: "
                f"{scrubbed(_first_line(exc), self._secrets)}{hint}",
                run_id=run_id,
                stream=stream,
            ) from exc

    @contextlib.contextmanager
    def _transaction(
        self, doing: str, *, run_id: str | None = None, stream: str | None = None, reading: bool = False
    ) -> Iterator[psycopg.Cursor[Any]]:
        """A pooled connection's transaction, with driver errors translated."""
        self._check_open()
        with (
            self._translated(doing, run_id=run_id, stream=stream, reading=reading),
            self._pool.transaction() as cur,
        ):
            yield cur

    def _call(
        self,
        doing: str,
        fn: Callable[[psycopg.Cursor[Any]], T],
        *,
        run_id: str | None = None,
        stream: str | None = None,
        reading: bool = False,
    ) -> T:
        """Run ``fn`` (statements each safe to repeat) on a pooled connection, errors translated."""
        self._check_open()
        with self._translated(doing, run_id=run_id, stream=stream, reading=reading):
            return self._pool.call(fn)

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        """Create or upgrade the schema to ``SCHEMA_VERSION`` (once per object, serialised per schema).

        A schema already at this version is only read (no lock, no DDL), so a read-only database,
        standby or role reads the journal; only a missing or older schema is written.
        """
        if self._migrated:
            return
        with self._migrate_mutex, conn.transaction(), conn.cursor() as cur:
            schema = cur.execute("select current_schema()").fetchone()
            if schema is None or schema[0] is None:
                raise JournalUnavailable(
                    f"the PostgreSQL journal at {self._location} has no schema to live in: create the "
                    "schema named by the DSN's search_path (or public), then retry"
                )
            current = self._schema_version(cur)
            if current < SCHEMA_VERSION:
                self._check_migratable(cur, current)
            if current != SCHEMA_VERSION:
                cur.execute("select pg_advisory_xact_lock(%s, hashtext(current_schema()))", (_MIGRATE_LOCK,))
                cur.execute("create table if not exists journal_schema (version integer not null)")
                current = self._schema_version(cur)
            self._check_one_schema(cur, whole=current == SCHEMA_VERSION)
            if current > SCHEMA_VERSION:
                raise JournalUnavailable(
                    f"the PostgreSQL journal at {self._location} has schema version {current}, newer "
                    f"than this flows-memory understands ({SCHEMA_VERSION}): upgrade flows-memory"
                )
            for version, statements in MIGRATIONS:
                if version > current:
                    for statement in statements:
                        cur.execute(statement)
            if current < SCHEMA_VERSION:
                cur.execute("delete from journal_schema")
                cur.execute("insert into journal_schema (version) values (%s)", (SCHEMA_VERSION,))
        self._migrated = True

    def _check_one_schema(self, cur: psycopg.Cursor[Any], *, whole: bool) -> None:
        """Refuse a ``search_path`` whose names resolve the journal's tables or append function to a
        schema other than the current one (the first existing schema of the path, where the journal
        makes its tables and which names its turns' locks): a table there shadowing the journal's
        (an empty ``journal_records`` before the one holding the records would hide every record),
        or the journal's tables found behind an empty schema, whose turns would not be the turns
        of the hosts that name the journal's schema."""
        rows = cur.execute(
            "select t, n.nspname from unnest(%s::text[]) t"
            " join pg_class c on c.oid = to_regclass(t) join pg_namespace n on n.oid = c.relnamespace"
            " where n.nspname <> current_schema()"
            " union all select p.proname, n.nspname from pg_proc p"
            " join pg_namespace n on n.oid = p.pronamespace"
            " where p.oid in ("
            " to_regprocedure('journal_append(text, integer, text, text, text, bigint, text)'),"
            " to_regprocedure('journal_append_in_turn(text, text, integer, text, text, text, bigint, text)'),"
            " to_regprocedure("
            "'journal_append_in_turn_unless(text, text, text, integer, text, text, text, bigint, text)'))"
            " and n.nspname <> current_schema()",
            (list(_TABLES),),
        ).fetchall()
        missing = [t for t in _TABLES if whole and not self._exists(cur, t)]
        if missing:  # a dump restored without them: every read of them would fail, appends too
            raise JournalUnavailable(
                f"the PostgreSQL journal at {self._location} is at schema version {SCHEMA_VERSION} but "
                f"has no table {', '.join(missing)}: {self._remaking(missing)}"
            )
        if rows:
            found = ", ".join(f"{name} in schema {shown(schema)}" for name, schema in rows)
            raise JournalUnavailable(
                f"the PostgreSQL journal at {self._location} finds {found}, not in its own schema (the "
                "first existing schema of the search_path, where it keeps its tables): set the "
                "location's search_path to the one schema that holds the journal "
                "(?options=-csearch_path%3D<schema>), and drop any table of the journal's names "
                "shadowing it"
            )

    @staticmethod
    def _remaking(missing: Sequence[str]) -> str:
        """What to do about the journal's tables ``missing``: the derived ones alone are made again
        by the next open once the schema version is set back below the step that makes them."""
        if any(table not in _DERIVED for table in missing):
            return (
                "restore it from the backup; journal_heads and journal_heads_deletes alone are "
                "derived, and are made again by the next open after `update journal_schema set "
                "version = 3` in the journal's schema"
            )
        return (
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} derived, and made again by the "
            f"next open after `update journal_schema set version = {min(_DERIVED[t] for t in missing)}` in "
            "the journal's schema"
        )

    @staticmethod
    def _exists(cur: psycopg.Cursor[Any], table: str) -> bool:
        row = cur.execute("select to_regclass(%s) is not null", (table,)).fetchone()
        return bool(row and row[0])

    def _check_migratable(self, cur: psycopg.Cursor[Any], current: int) -> None:
        """Refuse, before any write is tried, a schema older than this code on a database that takes
        no writes (read-only, a standby): it cannot be migrated there, and nothing can be read until
        it is (the driver's refusal of the first DDL said that reads work)."""
        row = cur.execute("select current_setting('transaction_read_only')").fetchone()
        if row is None or row[0] != "on":
            return
        found = (
            f"schema version {current}, older than this flows-memory's ({SCHEMA_VERSION})"
            if current
            else "no journal tables yet"
        )
        raise JournalUnavailable(
            f"the PostgreSQL journal at {self._location} has {found}, and the database takes no "
            "writes here (read-only, a standby), so its schema cannot be brought up to date: open it "
            "once with this flows-memory from a writable connection (the primary), or read it with "
            "the flows-memory that wrote it"
        )

    @staticmethod
    def _schema_version(cur: psycopg.Cursor[Any]) -> int:
        """The schema version applied in the current schema (0: none yet), read without writing."""
        row = cur.execute("select to_regclass('journal_schema') is not null").fetchone()
        if not (row and row[0]):
            return 0
        row = cur.execute("select max(version) from journal_schema").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    # -- rows ----------------------------------------------------------------------------------

    def _info(self, row: Sequence[Any]) -> RunInfo:
        """A run's row as ``RunInfo``; a row whose fields are not what this journal writes is
        ``JournalCorrupt`` naming the run (rows read back are untrusted, as lines of a file are)."""
        run_id, flow, scope, state, epoch, created, updated, meta, error, size, live = row
        if not whole(size, 0, MAX_RUN_BYTES):  # its flow, scope, meta and error were never sent
            raise self._oversized_run(run_id, size)
        meta_obj = _json_or_none(meta)
        error_obj = None if error is None else _json_or_none(error)
        checks = (
            (valid_name(run_id), f"an id {shown(run_id)} that is not a run id"),
            (isinstance(flow, str) and isinstance(scope, str), "a flow or scope that is not text"),
            (state in _STORED_STATES, f"state {shown(state)} is not a stored state"),
            (whole(epoch, 1), f"epoch {shown(epoch)}, not a whole number from 1"),
            (whole(created, 0, MAX_MS), f"created_ms {shown(created)}, which is not a time"),
            (whole(updated, 0, MAX_MS), f"updated_ms {shown(updated)}, which is not a time"),
            (type(meta_obj) is dict, "meta that is not a JSON object"),
            (error is None or type(error_obj) is dict, "an error that is not a JSON object or null"),
        )
        problem = next((why for ok, why in checks if not ok), None)
        if problem is not None:
            raise self._run_corrupt(run_id, problem)
        stored = RunState(state)
        if stored is RunState.RUNNING and not live:
            stored = RunState.INTERRUPTED
        return RunInfo(
            run_id=run_id,
            flow=flow,
            scope=scope,
            state=stored,
            epoch=int(epoch),
            created_ms=int(created),
            updated_ms=int(updated),
            meta=meta_obj,
            error=error_obj,
        )

    def _record(self, run_id: str, stream: str, row: Sequence[Any]) -> Record:
        """A record's row as ``Record``, after the checks a file's line gets (a sequence number from
        1, an id of a record id's shape, a key ``check_key`` takes, a time, a payload that is a JSON
        object); anything else is ``JournalCorrupt`` naming run, stream and sequence number."""
        seq, rid, key, ts_ms, payload, size = row
        if whole(size, 0, MAX_PAYLOAD_BYTES):
            obj = _json_or_none(payload)
            problem = record_problem(seq, rid, key, ts_ms, obj)
        else:  # the server never sent it
            problem = (
                f"a payload of {_size(size)} bytes, over the {MAX_PAYLOAD_BYTES:,} a record may hold "
                "(not read)"
            )
        if problem is not None:
            raise JournalCorrupt(
                f"the PostgreSQL journal at {self._location}: record {seq} of stream {stream} of root "
                f"run {run_id} has {problem}; the stream fails closed: restore it from a backup or "
                "inspect it with `flows check`",
                path=self._location,
                line=seq if type(seq) is int else 0,
                reason=problem,
                run_id=run_id,
                stream=stream,
            )
        return Record(run_id=run_id, stream=stream, seq=seq, id=rid, key=key, ts_ms=ts_ms, payload=obj)

    def _run_corrupt(self, run_id: object, problem: str, *, stream: str | None = None) -> JournalCorrupt:
        """The error for a run's row (or, with ``stream``, a stream name of its records) that is not
        what this journal writes: the run fails closed."""
        shown_run = str(run_id)[:80] if valid_name(run_id) else repr(str(run_id)[:80])
        return JournalCorrupt(
            f"the PostgreSQL journal at {self._location}: the row of root run {shown_run} has "
            f"{problem}; the run fails closed: restore it from a backup or inspect it with "
            "`flows check`",
            path=self._location,
            line=0,
            reason=problem,
            run_id=str(run_id)[:128],
            stream=stream,
        )

    def _oversized_run(self, run_id: object, size: object) -> JournalCorrupt:
        """The error for a run row whose flow, scope, meta and error the server measured at ``size``
        bytes together, over ``MAX_RUN_BYTES``: none of them was sent."""
        return self._run_corrupt(
            run_id,
            f"a flow, scope, meta and error of {_size(size)} bytes together, over the "
            f"{MAX_RUN_BYTES:,} bytes a run record may hold (not read)",
        )

    def _not_found(self, run_id: str) -> JournalRunNotFound:
        return JournalRunNotFound(f"no root run {run_id} in {self._location}", run_id=run_id)

    def _lock_run(self, cur: psycopg.Cursor[Any], run_id: str) -> tuple[int, str, int | None]:
        """Take the run lock (the run's row lock) for this transaction; return epoch, state, lease key."""
        row = cur.execute(
            "select epoch, state, lease_key from journal_runs where run_id = %s for update", (run_id,)
        ).fetchone()
        if row is None:
            raise self._not_found(run_id)
        return int(row[0]), str(row[1]), row[2]

    # -- the lease connection and its heartbeat ------------------------------------------------

    def _lease_connection(self) -> psycopg.Connection[Any]:
        """The open connection that holds this object's advisory locks (reconnecting if it died)."""
        conn = self._lease_conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        self._lease_conn = None
        conn = self._connect()
        try:
            conn.execute(_NO_IDLE_TIMEOUTS, (False,))  # for the session: it holds the leases
        except BaseException:
            conn.close()
            raise
        self._lease_conn = conn
        if self._held:
            self._relock(conn)
        return conn

    def _relock(self, conn: psycopg.Connection[Any]) -> None:
        """After a reconnect, take back the locks of leases still current; forget the others."""
        for run_id, (epoch, key) in list(self._held.items()):
            with conn.transaction(), conn.cursor() as cur:
                row = cur.execute(
                    "select epoch, state, lease_key from journal_runs where run_id = %s for update",
                    (run_id,),
                ).fetchone()
                current = row is not None and (int(row[0]), row[1], row[2]) == (epoch, "running", key)
                if current:
                    locked = cur.execute("select pg_try_advisory_lock(%s)", (key,)).fetchone()
                    current = bool(locked and locked[0])
            if not current:
                del self._held[run_id]

    def _drop_lease_connection(self, *, unlock: bool = False) -> None:
        conn, self._lease_conn = self._lease_conn, None
        if conn is None:
            return
        if unlock and not conn.broken:
            # Closing ends the session, and its locks with it, but the server notices a moment
            # later; unlocking first means a lease is free once close() returns.
            with contextlib.suppress(psycopg.Error):
                conn.execute("select pg_advisory_unlock_all()")
        conn.close()

    @contextlib.contextmanager
    def _leasing(self, doing: str, run_id: str | None) -> Iterator[psycopg.Cursor[Any]]:
        """A transaction on the lease connection, under the lease mutex, with errors translated.

        Like the pool, a ``BEGIN`` refused by a connection that died since its last use is retried
        once on a fresh one (which first takes back the locks of the leases still held).
        """
        self._check_open()
        with self._lease_mutex, self._translated(doing, run_id=run_id):
            try:
                conn = self._lease_connection()
                try:
                    conn.execute("begin")
                except (psycopg.OperationalError, psycopg.InterfaceError):
                    self._drop_lease_connection()
                    conn = self._lease_connection()
                    conn.execute("begin")
                with _committed(conn) as cur:
                    yield cur
            except psycopg.Error:
                self._drop_lease_connection()
                raise

    def _hold(self, run_id: str, epoch: int, key: int) -> None:
        self._held[run_id] = (epoch, key)
        if self._heartbeat is None:
            self._heartbeat = threading.Thread(
                target=self._beat, name=f"flows-journal-lease-heartbeat-{id(self):x}", daemon=True
            )
            self._heartbeat.start()

    def _beat(self) -> None:
        interval = self._ttl_ms / 3000
        while not self._stop.wait(interval):
            with contextlib.suppress(JournalError, psycopg.Error, RuntimeError):
                self.renew()

    def renew(self) -> None:
        """Push the expiry of every lease this object holds ``lease_ttl_s`` into the future.

        The heartbeat thread calls this every third of the TTL. A lease found taken over or ended
        is forgotten and its advisory lock let go. Raises JournalUnavailable when the server is down.
        """
        with self._lease_mutex:
            if not self._held or self._closed:
                return
            with self._leasing("renewing leases", None) as cur:
                expires = self._clock() + self._ttl_ms
                for run_id, (epoch, key) in list(self._held.items()):
                    cur.execute(
                        "update journal_runs set lease_expires_ms = %s where run_id = %s and epoch = %s"
                        " and lease_key = %s and state = 'running'",
                        (expires, run_id, epoch, key),
                    )
                    if cur.rowcount == 0:
                        del self._held[run_id]
                        cur.execute("select pg_advisory_unlock(%s)", (key,))

    # -- runs and leases -----------------------------------------------------------------------

    def begin(self, flow: str, scope: str, meta: Mapping[str, Any]) -> tuple[RunInfo, Lease]:
        """Create a running root run and return it with its first lease (epoch 1), held by this object.

        Raises JournalUnavailable (the server), JournalUnwritable (it refused the write).
        """
        self._check_open()
        check_label("flow", flow)
        check_label("scope", scope)
        now = read_clock(self._clock)
        run_id = new_run_id(now)
        key = secrets.randbits(63)
        meta_json = payload_json(meta, what="run record (its flow, scope and metadata)", limit=None)
        fields: dict[str, object] = {"runId": run_id, "flow": flow, "scope": scope, "state": "running"}
        fields.update(epoch=1, createdMs=now, updatedMs=now)
        check_run_size(run_record_size(fields, len(meta_json), None))
        meta_text = meta_json.decode()
        with self._lease_mutex:
            with self._leasing("beginning a run", run_id) as cur:
                cur.execute(
                    "insert into journal_runs (run_id, flow, scope, state, epoch, created_ms, updated_ms,"
                    " meta, error, lease_key, lease_expires_ms)"
                    " values (%s, %s, %s, 'running', 1, %s, %s, %s, null, %s, %s)",
                    (run_id, flow, scope, now, now, meta_text, key, now + self._ttl_ms),
                )
                # A fresh key, so this never waits. Should the commit fail, the lease connection is
                # dropped, and the session lock with it.
                cur.execute("select pg_advisory_lock(%s)", (key,))
            self._hold(run_id, 1, key)
        info = RunInfo(run_id, flow, scope, RunState.RUNNING, 1, now, now, orjson.loads(meta_text), None)
        return info, Lease(run_id, 1)

    def acquire(self, run_id: str) -> Lease:
        """Take over a failed or interrupted run: return a lease with the next epoch; state running.

        Raises JournalNameInvalid, JournalRunNotFound, JournalNotResumable (done), JournalLeaseHeld
        (a live holder: its session holds the lock and its lease has not expired), JournalUnavailable.
        """
        self._check_open()
        check_name("run id", run_id)
        key = secrets.randbits(63)
        with self._lease_mutex:
            check_not_held(run_id, run_id in self._held)
            with self._leasing("acquiring a run's lease", run_id) as cur:
                now = read_clock(self._clock, run_id=run_id)
                row = cur.execute(
                    f"{_HELD} select r.epoch, r.state, {_LIVE} from journal_runs r"
                    " where r.run_id = %(run)s for update",
                    {"run": run_id, "now": now},
                ).fetchone()
                if row is None:
                    raise self._not_found(run_id)
                epoch, state, live = row[0], row[1], bool(row[2])
                if not whole(epoch, 1):  # resuming would hand out a lease no begin ever could
                    raise self._run_corrupt(run_id, f"epoch {shown(epoch)}, not a whole number from 1")
                check_resumable(run_id, state)
                if live:
                    raise JournalLeaseHeld(
                        f"root run {run_id} is driven by a live holder; wait for it to finish or stop it",
                        run_id=run_id,
                    )
                cur.execute(
                    "update journal_runs set state = 'running', epoch = %s, updated_ms = %s, error = null,"
                    " lease_key = %s, lease_expires_ms = %s where run_id = %s",
                    (epoch + 1, now, key, now + self._ttl_ms, run_id),
                )
                cur.execute("select pg_advisory_lock(%s)", (key,))
            self._hold(run_id, epoch + 1, key)
        return Lease(run_id, epoch + 1)

    def finish(self, lease: Lease, state: RunState, error: Mapping[str, Any] | None = None) -> RunInfo:
        """Record ``done`` or ``failed`` (with ``error``), release the lease, and return the run.

        Raises JournalStateInvalid for another state, JournalLeaseLost (stale epoch, or already
        ended), JournalRunNotFound, JournalUnavailable.
        """
        self._check_open()
        ended = finish_state(state)
        check_name("run id", lease.run_id)
        error_json = None if not error else payload_json(error, what="error")
        error_text = None if error_json is None else error_json.decode()
        now = read_clock(self._clock, run_id=lease.run_id)
        try:
            with self._transaction("finishing a run", run_id=lease.run_id) as cur:
                epoch, stored, _ = self._lock_run(cur, lease.run_id)
                check_fence(lease, epoch, stored)
                self._check_finished_size(cur, lease, ended, now, error_json)
                row = cur.execute(
                    f"update journal_runs r set state = %(state)s, updated_ms = %(now)s, error = %(error)s"
                    f" where r.run_id = %(run)s returning {_RUN_COLUMNS}, false",
                    {"state": ended.value, "now": now, "error": error_text, "run": lease.run_id},
                ).fetchone()
        except JournalUnavailable:
            # The connection broke: if it broke after the server committed (the answer to COMMIT
            # lost), the run row already holds this very ending; answer it, and let the lease go.
            row = self._finished_as(lease, ended, now, error_text)
            if row is None:
                raise
        self.release(lease)
        assert row is not None  # the row is locked: it cannot have gone
        return self._info(row)

    def _finished_as(
        self, lease: Lease, ended: RunState, now: int, error: str | None
    ) -> Sequence[Any] | None:
        """The run's row when it holds exactly the ending ``finish`` wrote (its state, the lease's
        epoch, ``now`` and ``error``), else None (also when the server cannot be asked)."""

        def call(cur: psycopg.Cursor[Any]) -> Sequence[Any] | None:
            return cur.execute(
                f"select {_RUN_COLUMNS}, false from journal_runs r where r.run_id = %s and r.epoch = %s"
                " and r.state = %s and r.updated_ms = %s and r.error is not distinct from %s",
                (lease.run_id, lease.epoch, ended.value, now, error),
            ).fetchone()

        try:
            return self._call("checking how a run was finished", call, run_id=lease.run_id, reading=True)
        except JournalError:
            return None

    def _check_finished_size(
        self, cur: psycopg.Cursor[Any], lease: Lease, ended: RunState, now: int, error: bytes | None
    ) -> None:
        """Refuse to finish a run whose record, with ``error``, would be over ``MAX_RUN_BYTES`` as
        ``run.json`` measures it (so both backends refuse the same errors); a stored row already
        over it is ``JournalCorrupt`` before anything is written."""
        row = cur.execute(
            f"select case when {_RUN_KEPT} then r.flow end, case when {_RUN_KEPT} then r.scope end,"
            f" r.created_ms, octet_length(r.meta), {_RUN_SIZE} from journal_runs r where r.run_id = %s",
            (lease.run_id,),
        ).fetchone()
        assert row is not None  # the row is locked: it cannot have gone
        flow, scope, created, meta_bytes, size = row
        if not whole(size, 0, MAX_RUN_BYTES):  # refused as a read refuses it, before any write
            raise self._oversized_run(lease.run_id, size)
        fields: dict[str, object] = {"runId": lease.run_id, "flow": flow, "scope": scope}
        fields.update(state=ended.value, epoch=lease.epoch, createdMs=created, updatedMs=now)
        check_run_size(run_record_size(fields, int(meta_bytes), error), run_id=lease.run_id)

    def release(self, lease: Lease) -> None:
        """Let go of the lease's advisory lock (the run then reads interrupted if still running).

        Never raises for an unreachable server: a dead session has already let go of its locks. A
        no-op for a lease this object does not hold (see ``JournalBackend``), closed or not.
        """
        with self._lease_mutex:
            held = self._held.get(lease.run_id)
            if held is None or not releases(held[0], lease):
                return
            del self._held[lease.run_id]
            conn = self._lease_conn
            if conn is None or conn.closed or conn.broken:
                return
            try:
                conn.execute("select pg_advisory_unlock(%s)", (held[1],))
            except psycopg.Error:
                self._drop_lease_connection()

    # -- streams -------------------------------------------------------------------------------

    def shares_filesystem(self, path: str) -> bool:
        """Always False: a commit here makes nothing on the local disk durable."""
        self._check_open()
        return False

    def append(
        self,
        lease: Lease,
        stream: str,
        payload: Mapping[str, Any],
        *,
        key: str | None = None,
        sync_filesystem: bool = False,
        turn: str | None = None,
        unless_elsewhere: str | None = None,
    ) -> Record:
        """Append in one transaction under the run lock, idempotent by ``key`` (see ``JournalBackend``).

        One statement (``journal_append``) locks the run row, checks the epoch and state, returns
        the record already holding ``key``, or inserts the next sequence number; it is committed
        before this returns. ``turn``: the name of a turn (``turn``) that the statement holds
        shared, taken first, until the record is committed: it waits while a holder of that turn
        holds it, and that holder waits for it (``journal_append_in_turn``). ``unless_elsewhere``
        (with ``key`` and ``turn``; a JSON string token, its quotes included): when this run holds
        no record of ``key`` in ``stream`` and another run holds one whose stored payload holds the
        token (or a ``\\u`` escape, which may spell it otherwise), nothing is appended and the first
        such record is returned (its ``run_id`` is not the lease's): the caller decides what to
        append instead (``journal_append_in_turn_unless``).

        Raises JournalLeaseLost (stale epoch, or the run has ended), JournalRunNotFound,
        JournalNameInvalid (a bad run id, stream name or key), JournalUnavailable, JournalUnwritable;
        JournalPayloadInvalid (also a TypeError) for a payload that is not JSON; JournalSyncUnsupported
        (also a ValueError) for ``sync_filesystem``; JournalClockInvalid (also a ValueError).
        """
        self._check_open()
        if sync_filesystem:
            check_sync(False, "PostgreSQL shares no file system with this process", self._location)
        run_id = check_name("run id", lease.run_id)
        check_name("stream name", stream)
        if key is not None:
            check_key(key)
        if turn is not None and (not isinstance(turn, str) or not 0 < len(turn) <= 1024):
            raise ValueError(f"a turn's name must be a string of 1 to 1024 characters, not {turn!r:.60}")
        if unless_elsewhere is not None and (
            type(unless_elsewhere) is not str or not unless_elsewhere or key is None or turn is None
        ):
            raise ValueError("unless_elsewhere must be a non-empty str, given with a key and a turn")
        body = payload_json(payload).decode()
        args: tuple[Any, ...] = (
            run_id,
            lease.epoch,
            stream,
            key,
            new_record_id(run_id, stream, key),
            read_clock(self._clock, run_id=run_id),
            body,
        )

        if unless_elsewhere is not None:
            query, args = _APPEND_UNLESS, (turn, unless_elsewhere, *args)
        elif turn is not None:
            query, args = _APPEND_IN_TURN, (turn, *args)
        else:
            query = _APPEND

        held = tuple(self._held_turns())

        def call(cur: psycopg.Cursor[Any]) -> Sequence[Any] | None:
            if not held:
                return cur.execute(query, args).fetchone()
            with cur.connection.transaction():  # the check and the append, one transaction
                self._in_turns(cur, held)
                return cur.execute(query, args).fetchone()

        row = self._call("appending", call, run_id=run_id, stream=stream)
        assert row is not None  # the function always returns one row
        if unless_elsewhere is not None:
            *row, holder = row
            if row[0] == "elsewhere":  # another run's record of the key, read back untrusted
                if not valid_name(holder):
                    raise self._run_corrupt(holder, "an id that is not a run id", stream=stream)
                return self._record(str(holder), stream, row[3:])
        status, epoch, state, *record = row
        if status == "missing":
            raise self._not_found(run_id)
        if status == "fenced":  # the SQL fenced it: its verdict stands, in the fence's words and code
            raise lease_lost(lease, int(epoch), str(state))
        return self._record(run_id, stream, record)

    def _records(
        self, doing: str, run_id: str, stream: str, where: str, params: Sequence[Any]
    ) -> list[Record]:
        """The stream's records matching ``where``, in order; raise JournalRunNotFound for no run."""
        check_name("run id", run_id)
        check_name("stream name", stream)
        # A left join from the run's row: no row means no run; one null record, an empty result.
        query = (
            "select x.seq, x.id, x.key, x.ts_ms, " + _PAYLOAD.format("x.payload") + " from journal_runs r"
            " left join journal_records x on x.run_id = r.run_id and x.stream = %s"
            + where
            + " where r.run_id = %s order by x.seq"
        )

        def call(cur: psycopg.Cursor[Any]) -> list[Any]:
            return cur.execute(query, (stream, *params, run_id)).fetchall()

        rows = self._call(doing, call, run_id=run_id, stream=stream, reading=True)
        if not rows:
            raise self._not_found(run_id)
        return [self._record(run_id, stream, row) for row in rows if row[0] is not None]

    def read(self, run_id: str, stream: str) -> Sequence[Record]:
        """Return the stream's records in order (empty for a stream never written).

        Raises JournalRunNotFound, JournalNameInvalid, JournalUnavailable, JournalCorrupt (the
        rows' numbers are not 1, 2, 3 … in order); nothing is cached, so
        the next read asks the server again.
        """
        records = self._records("reading a stream", run_id, stream, "", ())
        self._check_sequence(run_id, stream, records)
        return records

    def _check_sequence(self, run_id: str, stream: str, records: Sequence[Record], *, first: int = 1) -> None:
        """Rows read back are untrusted too: a stream's numbers run 1, 2, 3 … (from ``first``) with
        none missing, as on files. A gap or a crafted number is ``JournalCorrupt`` naming the
        record's place."""
        for place, rec in enumerate(records, first):
            if rec.seq != place:
                reason = f"sequence {rec.seq}, expected {place}"
                raise JournalCorrupt(
                    f"the PostgreSQL journal at {self._location}: record {place} of stream {stream} of "
                    f"root run {run_id} is damaged ({reason}); the stream fails closed: restore it "
                    "from a backup or inspect it with `flows check`",
                    path=self._location,
                    line=place,
                    reason=reason,
                    run_id=run_id,
                    stream=stream,
                )

    def rewrite_payloads(
        self,
        run_id: str,
        stream: str,
        payloads: Mapping[int, Mapping[str, Any]],
        *,
        pad: str,
        lease: Lease | None = None,
    ) -> int:
        """Replace the payloads of the stream's records numbered in ``payloads`` (an erasure), each
        row rewritten in one transaction (its id, number, key and time kept; ``pad`` set to an empty
        string, as on files where it keeps a line's length), then the table vacuumed so the old row
        versions are pruned. Returns how many rows were rewritten.

        ``lease``: the run's current lease, whose holder may rewrite its own records while it runs
        (checked under the run's row lock, as an append is).

        Raises:
            JournalLeaseHeld: the run is running (its holder may still be appending), and ``lease``
                is not its lease.
            JournalLeaseLost: ``lease`` is stale (another holder took the run over, or it ended).
            JournalRunNotFound, JournalUnavailable, JournalUnwritable.
        """
        check_name("run id", run_id)
        check_name("stream name", stream)
        own = lease is not None and lease.run_id == run_id
        if not own and self.run(run_id).state is RunState.RUNNING:
            raise JournalLeaseHeld(
                f"root run {run_id} is running: its records are rewritten once it has ended", run_id=run_id
            )
        rows = [
            (payload_json({**p, pad: ""}).decode(), run_id, stream, int(seq)) for seq, p in payloads.items()
        ]

        def call(cur: psycopg.Cursor[Any]) -> int:
            done = 0
            for row in rows:
                cur.execute(
                    "update journal_records set payload = %s where run_id = %s and stream = %s and seq = %s",
                    row,
                )
                done += cur.rowcount
            return done

        held = tuple(self._held_turns())
        with self._transaction("rewriting records", run_id=run_id, stream=stream) as cur:
            self._in_turns(cur, held)
            if own:
                assert lease is not None
                epoch, stored, _ = self._lock_run(cur, run_id)
                if stored == RunState.RUNNING.value:
                    check_fence(lease, epoch, stored)
            done = call(cur)
            row = cur.execute("select pg_current_xact_id()::text").fetchone() if done else None
        if row is not None:
            with self._prune_mutex:
                self._unpruned = max(self._unpruned or 0, int(row[0]))
        if not getattr(self._per_thread, "deferring", False):
            self.prune(wait_s=_REWRITE_PRUNE_WAIT_S)
        return done

    @contextlib.contextmanager
    def deferred_prune(self) -> Iterator[None]:
        """Within the block, this thread's ``rewrite_payloads`` leave their pruning to the caller's
        one ``prune()`` after it: the vacuum is a full one, the table written anew, and an erase
        rewrites records of several runs (each was a rewrite of the whole table)."""
        before = getattr(self._per_thread, "deferring", False)
        self._per_thread.deferring = True
        try:
            yield
        finally:
            self._per_thread.deferring = before

    def prune(self, *, every: bool = False, wait_s: float = 0.0) -> str | None:
        """Vacuum ``journal_records`` so the old versions of the rows this object rewrote (whose
        payloads held what an erasure took) leave the table's pages, and say whether they did: None
        when no rewrite is left unpruned, else who keeps them. A vacuum removes only the versions no
        open snapshot may still see: a session of the server whose transaction (or snapshot) began
        before a rewrite committed, a prepared transaction or a replication slot that old keeps them
        until it ends, and the next ``prune`` (an erase's, ``flows check --repair``'s) takes them.
        A vacuum needs the table's owner: without it the versions stay for the server's autovacuum,
        and this says so. ``every``: every rewrite committed so far, by any process or host (what
        finishes an erasure another process left pending; any snapshot open now may count).
        ``wait_s``: how long to wait for such snapshots to end (most are a moment's: another host's
        statement in flight).

        The look comes first and the vacuum after it: no snapshot older than the rewrite can begin
        once none is open, so a vacuum begun after a look that found none prunes them (a vacuum
        first and a look after would miss a snapshot that ended in between, and say pruned). With
        none open, the vacuum is a full one (the table written anew, its old files removed): a
        plain vacuum leaves a pruned version's bytes in its page's free space. Its lock is asked
        for a second at a time until ``wait_s`` ends; a session keeping a lock on the table past it
        is reported as keeping them."""
        if every:
            now = self._call(
                "reading the server's transaction ids",
                lambda cur: cur.execute("select pg_snapshot_xmax(pg_current_snapshot())::text").fetchone(),
            )
            with self._prune_mutex:  # every transaction numbered below the next to begin
                self._unpruned = max(self._unpruned or 0, int(now[0]) - 1 if now else 0)
        with self._prune_mutex:
            xid = self._unpruned
        if xid is None:
            return None
        short = str(xid % 2**32)  # the 32-bit id the server's views show, compared by age

        def look(cur: psycopg.Cursor[Any]) -> list[Any]:
            return cur.execute(_OLDER_SNAPSHOTS, (short, short, short, short)).fetchall()

        def vacuum(cur: psycopg.Cursor[Any]) -> None:
            cur.execute("vacuum journal_records")

        def rewrite(cur: psycopg.Cursor[Any]) -> bool:
            # waits at most a second for the table's lock: every other session's statement on the
            # table queues behind the request meanwhile
            cur.execute("set lock_timeout = '1s'")
            try:
                cur.execute("vacuum full journal_records")
                return True
            except psycopg.errors.LockNotAvailable:
                return False
            finally:
                cur.execute("reset lock_timeout")

        def may_vacuum(cur: psycopg.Cursor[Any]) -> Any:
            recent = cur.connection.info.server_version >= 170000  # a privilege of its own there
            maintain = " or has_table_privilege(c.oid, 'MAINTAIN')" if recent else ""
            return cur.execute(_MAY_VACUUM + maintain + _MAY_VACUUM_OF).fetchone()

        deadline, pause = time.monotonic() + wait_s, 0.01
        try:
            allowed = self._call("looking at who may vacuum the records", may_vacuum)
            if allowed is None or not allowed[0]:
                # the server skips the vacuum of a table whose owner it is not, with a warning and
                # no error: the erase answered as done with the old versions in the pages
                who = "this role" if allowed is None else f"role {allowed[1]!r:.80}"
                return (
                    f"{who}, which may not vacuum journal_records (its owner, the database's owner or "
                    "a superuser may): its old row versions stay in the table's pages until `flows "
                    "check --repair` is run as one of them"
                )
            held = self._call("looking for older snapshots", look)
            while held and time.monotonic() < deadline:
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(pause * 2, 0.5)
                held = self._call("looking for older snapshots", look)
            if held:
                self._call("vacuuming the records", vacuum)  # what it may prune, even while held
                return "; ".join(str(what) for (what,) in held[:5])
            # A plain vacuum prunes the old versions, but leaves their bytes in the free space of
            # the pages it compacts (it moves the live rows, and zeroes nothing): an erased
            # commit's text stayed there, on disk after a checkpoint. A full vacuum writes the
            # table's live rows (and its TOAST table's) to new files, and the old ones are removed.
            while not self._call("rewriting the records' table", rewrite):
                if time.monotonic() >= deadline:
                    return (
                        "a session holding a lock on journal_records (the table could not be rewritten "
                        "within the wait)"
                    )
                time.sleep(0.2)
        except JournalError as exc:
            return f"the vacuum failed ({exc}); the server's autovacuum prunes them later"
        with self._prune_mutex:
            if self._unpruned == xid:
                self._unpruned = None
        return None

    @contextlib.contextmanager
    def turn(self, name: str, *, under: str | None = None) -> Iterator[None]:
        """Hold the turn named ``name`` among every process on every host sharing this journal's
        schema: an advisory lock taken in a transaction of its own, held open until the block ends
        (a killed holder's session ends, and its turn with it). Callers take several turns in one
        order. Not re-entrant: a second ``turn`` of one name in one process waits for the first.

        ``under`` names a wider turn that this one is part of, held shared (by many at once) and
        taken first, in the same statement: whoever holds the wider turn itself (``turn(under)``)
        waits until no turn under it is held, and holds every one of them at once; a turn under it
        asked for meanwhile waits for that holder. A thread that holds the wider turn already (a
        turn under it, or the wider turn itself) takes a further turn under it without asking for
        the wider turn again.

        Raises:
            ValueError: ``name`` or ``under`` is not a string of 1 to 1024 characters.
            JournalUnavailable, JournalUnwritable: the lock could not be taken.
        """
        for value in (name,) if under is None else (name, under):
            if not isinstance(value, str) or not 0 < len(value) <= 1024:
                raise ValueError(f"a turn's name must be a string of 1 to 1024 characters, not {value!r:.60}")
        if under is not None and any(held == under for held, _, _ in self._held_turns()):
            # This thread holds the wider turn already, through an earlier turn under it (or the
            # wider turn itself): asking for it again, shared, on this turn's own session would
            # queue behind a waiting request for the whole wider turn, which waits for this
            # thread's first hold of it: two hosts waiting on each other for good, in a ring the
            # server cannot see (its links are two sessions of one client). Not asked again.
            under = None
        failed: list[BaseException] = []  # what the block raised, if it raised
        try:
            with self._turn_held(name, under, failed):
                yield
        except JournalError as exc:
            # A turn whose session ended fails at its end too (its transaction cannot finish). The
            # block's own error, say a commit refused because the turn was lost, is the one that
            # says what happened: it stands, not the end's.
            if failed and failed[0] is not exc and isinstance(failed[0], JournalError):
                failed[0].add_note(f"(and the turn's end failed: {exc})")
                raise failed[0] from None
            raise

    @contextlib.contextmanager
    def _turn_held(self, name: str, under: str | None, failed: list[BaseException]) -> Iterator[None]:
        """The turn itself (see ``turn``); what the block raises is put in ``failed``.

        A thread takes every turn it holds at once on one session (``_TurnSession``): its first
        turn's, in one transaction. A turn taken inside another (a forget by filter's wider turn
        inside a scope's turn, an update's second scope) is then the same session's lock again,
        which never waits for the session itself: before, it was asked on a session of its own, and
        waited for good for the thread's first turn (whose name it was, or whose lock number its
        name shared), and every host asking for either turn behind it. And the server sees each wait
        of the thread's turns as one session's: two holders that each wait for a turn the other
        holds are a deadlock it breaks (one of them fails, ``JournalUnavailable``), not a ring it
        cannot see. The session's transaction ends when the last of its turns ends, in whatever
        order and thread they end (two coroutines of one thread interleaving their turns, a turn
        entered in one thread and left in another): until then every turn taken on it is held."""
        thread = threading.current_thread()
        session: _TurnSession | None = None
        with self._turn_sessions_mutex:
            found = self._turn_sessions.get(thread.ident or 0)
            if found is not None and found[0] is thread and found[1].count:
                session = found[1]
                if session.lost is not None:
                    raise JournalUnavailable(session.lost)
                session.count += 1  # joined: held until its last turn ends, this one included
        joined = session is not None
        if session is None:
            session = self._turn_session(name)
            with self._turn_sessions_mutex:
                self._turn_sessions[thread.ident or 0] = (thread, session)
        try:
            try:
                with self._translated(f"taking the turn {name!r}"):
                    mine = self._take_turn(session.cur, name, under)
            except JournalError as exc:
                # the session's transaction failed: every turn held on it is let go
                session.lost = (
                    f"{exc} (the turns this thread held on the PostgreSQL journal at {self._location} "
                    "were let go with it: leave every turn block and do the work again from its start)"
                )
                if joined:
                    raise JournalUnavailable(session.lost, run_id=exc.run_id, stream=exc.stream) from exc
                raise
            with self._holding(mine, failed):
                yield
        finally:
            self._leave_turn(thread, session)

    def _turn_session(self, name: str) -> _TurnSession:
        """A new session for this thread's turns: a pooled connection, in a transaction."""
        stack = contextlib.ExitStack()
        cur = stack.enter_context(self._transaction(f"taking or holding the turn {name!r}"))
        try:
            cur.execute(_NO_IDLE_TIMEOUTS, (True,))  # for this transaction only
        except BaseException:
            stack.__exit__(*sys.exc_info())
            raise
        session = _TurnSession(cur, stack)
        session.count = 1
        return session

    def _leave_turn(self, thread: threading.Thread, session: _TurnSession) -> None:
        """One of ``session``'s turns ended: when it was the last, end its transaction (its turns'
        locks go with it; a session that ended meanwhile raises here, as a turn's end), and forget
        it as the thread's."""
        with self._turn_sessions_mutex:
            session.count -= 1
            if session.count:
                return
            if self._turn_sessions.get(thread.ident or 0, (None, None))[1] is session:
                del self._turn_sessions[thread.ident or 0]
        if session.lost is not None:
            with contextlib.suppress(JournalError):  # its transaction failed: only a rollback is left
                session.stack.__exit__(JournalUnavailable, JournalUnavailable(session.lost), None)
            return
        session.stack.close()

    @contextlib.contextmanager
    def _holding(self, mine: list[tuple[str, int, str]], failed: list[BaseException]) -> Iterator[None]:
        """``mine`` listed among this thread's held turns while the block runs (``_in_turns``)."""
        held = self._held_turns()
        held.extend(mine)
        try:
            yield
        except BaseException as exc:
            failed.append(exc)
            raise
        finally:
            for item in mine:  # each by its value: turns of interleaved coroutines end in any order
                with contextlib.suppress(ValueError):
                    held.remove(item)

    def _take_turn(
        self, cur: psycopg.Cursor[Any], name: str, under: str | None
    ) -> list[tuple[str, int, str]]:
        """Take the turn ``name`` (under ``under``, shared, first) on ``cur``'s session and pass its
        gate; what ``_in_turns`` checks of it."""
        # The lock is taken by a statement with no parameters (its values written in as
        # literals). A statement with parameters leaves its portal, and the snapshot that portal
        # took, open until the session's next statement: a turn held idle would then hold the
        # server's cleanup horizon (``backend_xmin``) back for as long as it is held, and the
        # vacuum after an erase's rewrite, made while this or another host holds a turn, would
        # leave the rewritten rows' old versions (the erased content) in the table's pages. A
        # statement without parameters takes the simple protocol, whose portal ends with it.
        if under is None:
            query = sql.SQL(f"select {_TURN_OF.format('')}" % ("{}", "{}")).format(
                sql.Literal(_TURN_LOCK), sql.Literal(name)
            )
        else:
            # ``offset 0`` keeps the subquery a step of its own, run first: every holder takes
            # the wider turn before its own, so no two wait for each other
            inner = _TURN_OF.format("_shared")
            wider = f"select {_TURN_OF.format('')} from (select {inner} offset 0) wider"
            query = sql.SQL(wider % ("{}", "{}", "{}", "{}")).format(
                sql.Literal(_TURN_LOCK), sql.Literal(name), sql.Literal(_TURN_LOCK), sql.Literal(under)
            )
        cur.execute(query)
        # Pass the turn's gate: wait for every commit still being made in the turn by its last
        # holder, whose session may have ended (killed, its connection lost) while that holder
        # went on (``_in_turns``); what it commits is then there for this holder to read.
        # (the wider turn's gate too: a commit made in a turn under it holds that gate as well,
        # so one who takes the wider turn itself waits for it, as for a commit in the turn)
        pid = cur.connection.info.backend_pid
        mine = [(name, pid, "ExclusiveLock")] + ([] if under is None else [(under, pid, "ShareLock")])
        for gated, _, _ in reversed(mine):
            for verb in ("lock", "unlock"):
                gate = sql.SQL("select pg_advisory_{}({}, hashtext(current_schema() || ':' || {}))")
                cur.execute(gate.format(sql.SQL(verb), sql.Literal(_TURN_GATE), sql.Literal(gated)))
        return mine

    def _lost_turns(self) -> str | None:
        """Why this thread's turns were let go while it held them (its turn session's transaction
        failed: a deadlock the server broke), or None."""
        thread = threading.current_thread()
        with self._turn_sessions_mutex:
            found = self._turn_sessions.get(thread.ident or 0)
        return found[1].lost if found is not None and found[0] is thread else None

    def _held_turns(self) -> list[tuple[str, int, str]]:
        held: list[tuple[str, int, str]] | None = getattr(self._per_thread, "turns", None)
        if held is None:
            held = self._per_thread.turns = []
        return held

    def _in_turns(self, cur: psycopg.Cursor[Any], held: Sequence[tuple[str, int, str]]) -> None:
        """In a commit's transaction, made by a thread holding ``held`` turns: hold each turn's gate
        shared until the commit ends, then check that the turn's session holds the turn still.

        A turn is an advisory lock of another session than the commit's. When that session ends
        (killed by an administrator, its connection lost), the lock goes with it and another host
        may take the turn while this holder goes on, unaware: before, its commit then went in beside
        the other host's, and an update or a forget the other host had acknowledged was overridden,
        one memory left with two live versions. Now such a commit is refused, and nothing is
        committed; and a session ending after the check is harmless, as the next holder passes the
        gate only once this commit has ended (``turn``), and reads what it committed.

        Raises:
            JournalUnavailable: a turn is no longer held.
        """
        for name, pid, mode in held:  # a turn held, or a wider one held shared under which it is
            gate = "select pg_advisory_xact_lock_shared(%s, hashtext(current_schema() || ':' || %s))"
            cur.execute(gate, (_TURN_GATE, name))
            row = cur.execute(_TURN_HELD, (pid, mode, _TURN_LOCK, name)).fetchone()
            if row is None or not row[0]:
                lost = self._lost_turns()
                if lost is not None:
                    raise JournalUnavailable(f"nothing was committed: {lost}")
                raise JournalUnavailable(
                    f"the PostgreSQL journal at {self._location} no longer holds the turn {name!r} for "
                    "this process (the session that held it ended: killed, or its connection lost), "
                    "so another host may have taken it: nothing was committed; retry"
                )

    def stream_heads(self, stream: str) -> dict[str, int]:
        """For every run with records in ``stream``: the sequence number of its last one (one
        query on an index of (stream, run, seq)). With ``read_after``, what a reader needs to see
        every record of a stream appended by any host since it last looked, exactly once: a run's
        numbers are given under its lock, so a record below a run's head is never added later."""
        check_name("stream name", stream)

        def call(cur: psycopg.Cursor[Any]) -> list[Any]:
            return cur.execute(
                "select run_id, max(seq) from journal_records where stream = %s group by run_id", (stream,)
            ).fetchall()

        rows = self._call("listing the heads of a stream", call, stream=stream, reading=True)
        for run, _ in rows:
            if not valid_name(run):
                raise self._run_corrupt(run, "an id that is not a run id", stream=stream)
        return {str(run): int(seq) for run, seq in rows}

    def read_after(self, run_id: str, stream: str, seq: int) -> Sequence[Record]:
        """The stream's records after number ``seq``, in order (checked as ``read`` checks them:
        their numbers must run on from ``seq`` with none missing)."""
        if type(seq) is not int or seq < 0:
            raise ValueError(f"seq must be an int of 0 or more, not {seq!r:.40}")
        records = self._records("reading a stream", run_id, stream, " and x.seq > %s", (seq,))
        self._check_sequence(run_id, stream, records, first=seq + 1)
        return records

    def heads_changed(
        self, streams: Sequence[str], since: str | None
    ) -> tuple[dict[str, dict[str, int]], str, bool]:
        """The heads of ``streams`` (stream -> run id -> the number of its last record) that moved
        since the look that returned ``since`` (every head when ``since`` is None), the mark to pass
        next time, and whether this look listed every head (``whole``).

        The mark is the oldest transaction still running when this look was taken (its snapshot's
        ``xmin``): an append is a transaction that moves its head and stamps it with its own id, and
        one that was running then, or began after, has an id at or above it; so a look from the mark
        misses no append committed since the last look, whatever the order the server gave ids and
        commits in. A head may come back unmoved (seen again, harmless): readers compare it with the
        number they hold.

        ``journal_heads`` is derived and only says *which* heads moved: each head returned is the
        number of the stream's last record, read from the records (one index probe per head), so a
        stale or crafted number there never makes a reader skip a record. A whole look lists the
        heads from the records themselves (an index-only walk of their entries), never from
        ``journal_heads``, so a row deleted there, or a restored dump without them, hides no run
        from a reader's first look. The mark names the server, database and heads table it was
        taken on; a mark from another one (another database, a dump restored, a server replaced),
        or one ahead of the server's oldest running transaction (a server restored from a backup or
        failed over to a replica, whose transaction ids went back), or one that a delete of rows of
        ``journal_heads`` has followed (``journal_heads_deletes``: a deleted row may have been the
        only word of an append since the mark), does not hold: the look is whole and says so, and
        the reader must take what it holds as unknown (``whole`` True although ``since`` was given).

        Raises:
            JournalCorrupt: a row that is not a head this journal writes (a run id that is not one, a
                number that is not a whole number from 1).
            JournalUnavailable: the server cannot answer.
        """
        for stream in streams:
            check_name("stream name", stream)
        if since is not None and not (type(since) is str and len(since) <= 100):
            raise ValueError(f"since must be a mark heads_changed returned, not {since!r:.40}")
        identity, _, since_xid = (since or "").rpartition(".")
        names = list(streams)
        given = since is not None and since_xid.isdigit() and len(since_xid) <= 20
        rows = self._heads_rows(names, since_xid if given else None)
        mark_identity, mark_xid = str(rows[0][0]), str(rows[0][1])
        holds = given and identity == mark_identity and _mark_holds(int(since_xid), rows[0])
        if given and not holds:  # another journal's mark, the server's ids went back, or heads deleted
            rows = self._heads_rows(names, None)  # since it: look again, whole
            mark_identity, mark_xid = str(rows[0][0]), str(rows[0][1])
        found: dict[str, dict[str, int]] = {stream: {} for stream in streams}
        for *_mark, stream, run, head in rows:
            if stream is None or head is None:
                continue  # the mark's own row (no head moved), or a head whose records are gone
            if not valid_name(run):
                raise self._run_corrupt(run, "an id that is not a run id", stream=str(stream)[:80])
            if not whole(head, 1) or stream not in found:
                raise self._run_corrupt(run, f"a head {shown(head)} of stream {shown(stream)}", stream=None)
            found[stream][run] = head
        return found, f"{mark_identity}.{mark_xid}", not holds

    def _heads_rows(self, streams: list[str], since: str | None) -> list[Any]:
        """``heads_changed``'s one query: the mark's identity and ``xmin``, then (stream, run, head)
        rows, every head read from the records. ``since`` None: every run with records in the
        streams, from the (stream, run, seq) index of the records (an index-only walk, cheaper than
        the scan of every commit a first look makes anyway); else the runs whose ``journal_heads``
        row was stamped at or after it."""
        ident = (
            # the server's identifier where the role may read it (a hardened server may revoke it)
            "coalesce(case when has_function_privilege('pg_control_system()', 'execute') then"
            " (select s.system_identifier::text from pg_control_system() s) end, '0') || '.'"
            " || (select d.oid::text from pg_database d where d.datname = current_database()) || '.'"
            " || coalesce(to_regclass('journal_heads')::oid::text, '0')"
        )
        head = "(select max(x.seq) from journal_records x where x.run_id = h.run_id and x.stream = h.stream)"
        if since is None:
            moved = (
                "select x.stream, x.run_id, max(x.seq) as head from journal_records x"
                " where x.stream = any(%s) group by x.stream, x.run_id"
            )
            params: tuple[Any, ...] = (streams,)
        else:
            moved = (
                "select h.stream, h.run_id, " + head + " as head from journal_heads h"
                " where h.stream = any(%s) and h.changed >= %s::xid8"
            )
            params = (streams, since)
        query = (
            f"select s.identity, s.mark::text, s.deleted, s.noticed, m.stream, m.run_id, m.head from"
            f" (select {ident} as identity, pg_snapshot_xmin(pg_current_snapshot()) as mark,"
            f" {_LAST_DELETE} as deleted, {_DELETES_NOTICED} as noticed) s"
            f" left join ({moved}) m on true"
        )

        def call(cur: psycopg.Cursor[Any]) -> list[Any]:
            return cur.execute(query, params).fetchall()

        return self._call("listing the heads that moved", call, reading=True)

    def read_streams_after(
        self, stream: str, after: Mapping[str, int], *, containing: str | None = None
    ) -> dict[str, list[Record]]:
        """For each run of ``after`` (run id -> a sequence number), the stream's records after that
        number, in order, in one query however many runs there are (``read_after`` asks once per
        run). With ``containing`` (a JSON string token, its quotes included: ``'"name"'``), only the
        records whose stored payload text holds it, or holds a ``\\u`` escape (which may spell it
        otherwise; whitespace never falls inside a token, so no JSON spelling of it escapes, though
        the journal writes only compact canonical JSON): the server skips the rest, so a reader
        looking for one kind of record among many (the commits that retire a version, among every
        commit) is sent and checks only those. Each record returned is
        checked as ``read`` checks one; the numbers of an unfiltered read must run on from the
        run's number with none missing (a filtered read has gaps by design). A run with no record
        after its number is absent from the answer."""
        check_name("stream name", stream)
        if containing is not None and (type(containing) is not str or not containing):
            raise ValueError("containing must be a non-empty str or None")
        runs: list[str] = []
        seqs: list[int] = []
        for run_id, seq in after.items():
            check_name("run id", run_id)
            if type(seq) is not int or seq < 0:
                raise ValueError(f"seq must be an int of 0 or more, not {seq!r:.40}")
            runs.append(run_id)
            seqs.append(seq)
        if not runs:
            return {}
        query = (
            "select x.run_id, x.seq, x.id, x.key, x.ts_ms, "
            + _PAYLOAD.format("x.payload")
            + " from unnest(%s::text[], %s::bigint[]) as a(run_id, seq)"
            " join journal_records x on x.stream = %s and x.run_id = a.run_id and x.seq > a.seq"
            + (
                ""
                if containing is None
                else " where (strpos(x.payload, %s) > 0 or strpos(x.payload, %s) > 0)"
            )
            + " order by x.run_id, x.seq"
        )
        params: tuple[Any, ...] = (runs, seqs, stream) + (() if containing is None else (containing, "\\u"))

        def call(cur: psycopg.Cursor[Any]) -> list[Any]:
            return cur.execute(query, params).fetchall()

        rows = self._call("reading a stream of several runs", call, stream=stream, reading=True)
        found: dict[str, list[Record]] = {}
        for row in rows:
            found.setdefault(str(row[0]), []).append(self._record(str(row[0]), stream, row[1:]))
        if containing is None:
            for run_id, records in found.items():
                self._check_sequence(run_id, stream, records, first=after[run_id] + 1)
        return found

    def find(self, run_id: str, stream: str, key: str) -> Record | None:
        """Return the record appended with ``key``, or None (see ``JournalBackend``)."""
        check_key(key)
        found = self._records("finding a record", run_id, stream, " and x.key = %s", (key,))
        return found[0] if found else None

    def keyed_anywhere(self, stream: str, key: str, *, limit: int = 16) -> list[Record]:
        """The records appended with ``key`` to ``stream`` by any run (at most ``limit`` of them, in
        no set order: a key many runs committed costs no more than ``limit`` reads): one probe of an
        index of keys (schema step 7), where ``find`` looks in one run. Each is checked as ``read``
        checks one (a row whose run id is not one is ``JournalCorrupt``).

        Raises JournalNameInvalid (a bad stream name or key), JournalUnavailable, JournalCorrupt.
        """
        check_name("stream name", stream)
        check_key(key)
        if type(limit) is not int or limit < 1:
            raise ValueError(f"limit must be an int of 1 or more, not {limit!r:.40}")
        query = (
            "select x.run_id, x.seq, x.id, x.key, x.ts_ms, "
            + _PAYLOAD.format("x.payload")
            + " from journal_records x where x.key = %s and x.stream = %s limit %s"
        )

        def call(cur: psycopg.Cursor[Any]) -> list[Any]:
            return cur.execute(query, (key, stream, limit)).fetchall()

        rows = self._call("finding a key in every run", call, stream=stream, reading=True)
        found = []
        for row in rows:
            if not valid_name(row[0]):
                raise self._run_corrupt(row[0], "an id that is not a run id", stream=stream)
            found.append(self._record(str(row[0]), stream, row[1:]))
        return found

    def stamp(self, run_id: str, stream: str) -> object | None:
        """None: a table tells nothing cheaper than a query (see ``JournalBackend``)."""
        self._check_open()
        return None

    def lookup(self, run_id: str, stream: str, record_id: str, *, hint: int | None = None) -> Record | None:
        """Return the record ``record_id`` of the stream, or None: one query on the run's unique
        index of record ids (``hint`` is not needed here and is ignored; see ``JournalBackend``)."""
        check_record_id(record_id)
        found = self._records("looking up a record", run_id, stream, " and x.id = %s", (record_id,))
        return found[0] if found else None

    def hints(self, run_id: str, stream: str) -> dict[str, int]:
        """Return no hints: a lookup is one indexed query already (see ``JournalBackend``); raise
        JournalRunNotFound for no run, as the file backend does."""
        check_name("stream name", stream)
        self.run(run_id)
        return {}

    def streams(self, run_id: str) -> list[str]:
        """Return the run's non-empty stream names, sorted; raise JournalRunNotFound for no run."""
        check_name("run id", run_id)

        def call(cur: psycopg.Cursor[Any]) -> list[Any]:
            return cur.execute(
                "select x.stream from journal_runs r left join lateral ("
                " select distinct stream from journal_records where run_id = r.run_id) x on true"
                " where r.run_id = %s",
                (run_id,),
            ).fetchall()

        rows = self._call("listing streams", call, run_id=run_id, reading=True)
        if not rows:
            raise self._not_found(run_id)
        names = [r[0] for r in rows if r[0] is not None]
        for name in names:
            if not valid_name(name):  # records no reader can reach: fail closed, never hide them
                raise self._run_corrupt(
                    run_id, f"records in a stream named {shown(name)}, which is not a stream name"
                )
        return sorted(names)

    def run(self, run_id: str) -> RunInfo:
        """Return the run; ``interrupted`` when running with no live holder (see ``JournalBackend``)."""
        check_name("run id", run_id)

        def call(cur: psycopg.Cursor[Any]) -> Sequence[Any] | None:
            return cur.execute(
                f"{_HELD} select {_RUN_COLUMNS}, {_LIVE} from journal_runs r where r.run_id = %(run)s",
                {"run": run_id, "now": self._clock()},
            ).fetchone()

        row = self._call("reading a run", call, run_id=run_id, reading=True)
        if row is None:
            raise self._not_found(run_id)
        return self._info(row)

    def runs(self) -> list[RunInfo]:
        """Return every run, newest first (``interrupted`` derived as in ``run``)."""

        def call(cur: psycopg.Cursor[Any]) -> list[Any]:
            return cur.execute(
                f"{_HELD} select {_RUN_COLUMNS}, {_LIVE} from journal_runs r"
                " order by r.created_ms desc, r.run_id desc",
                {"now": self._clock()},
            ).fetchall()

        return [self._info(row) for row in self._call("listing runs", call, reading=True)]

    # -- lifecycle -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        check_open(self._closed, self._location)

    def close(self) -> None:
        """Release every lease this object holds and close its connections; safe to call twice."""
        self._closed = True
        self._stop.set()
        beat = self._heartbeat
        if beat is not None and beat is not threading.current_thread():
            beat.join(timeout=5)
        with self._lease_mutex:
            self._held.clear()
            self._drop_lease_connection(unlock=True)
        self._pool.clear()

    def __enter__(self) -> PostgresJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_IMPLEMENTS: type[JournalBackend] = PostgresJournal  # mypy checks that the class implements the interface
