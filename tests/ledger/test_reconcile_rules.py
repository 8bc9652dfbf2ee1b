"""Reconcile's rules that need no chain: which Transfer logs count as the agent receiving tokenOut."""

from __future__ import annotations

from memory.ledger import TRANSFER_TOPIC, LogRecord, transferred_to

TOKEN = "0x" + "Ab" * 20
AGENT = "0x" + "Cd" * 20
OTHER = "0x" + "01" * 20


def topic(address: str) -> str:
    return "0x" + address.lower().removeprefix("0x").rjust(64, "0")


def transfer(
    emitter: str, to: str, value: int, *, sig: str = TRANSFER_TOPIC, extra: bool = False
) -> LogRecord:
    topics = (sig, topic(OTHER), topic(to)) + ((topic(OTHER),) if extra else ())
    return LogRecord(address=emitter, topics=topics, data=value.to_bytes(32, "big"))


def test_only_transfers_emitted_by_the_token_to_the_agent_count() -> None:
    logs = [
        transfer(TOKEN, AGENT, 7),  # counts
        transfer(TOKEN.lower(), AGENT.upper().replace("0X", "0x"), 5),  # counts: addresses compare by value
        transfer(OTHER, AGENT, 1000),  # a look-alike contract at another address
        transfer(TOKEN, OTHER, 300),  # the token, but to someone else
        transfer(TOKEN, AGENT, 90, sig="0x" + "ee" * 32),  # another event from the token
        transfer(TOKEN, AGENT, 4000, extra=True),  # ERC-721-shaped: the value is indexed, not data
    ]
    assert transferred_to(logs, token=TOKEN, recipient=AGENT) == 12


def test_a_transfer_whose_value_is_not_one_uint256_does_not_count() -> None:
    """Data of 2,000 bytes read as one number had thousands of digits: no amount can be written from
    it (the tick failed as ``internal_error``, every tick after it alike)."""
    topics = (TRANSFER_TOPIC, topic(OTHER), topic(AGENT))
    longer = LogRecord(address=TOKEN, topics=topics, data=b"\xff" * 2000)
    shorter = LogRecord(address=TOKEN, topics=topics, data=b"\x05")
    logs = [transfer(TOKEN, AGENT, 7), longer, shorter]
    assert transferred_to(logs, token=TOKEN, recipient=AGENT) == 7


def test_no_matching_transfer_is_zero() -> None:
    assert transferred_to([transfer(OTHER, AGENT, 5)], token=TOKEN, recipient=AGENT) == 0
