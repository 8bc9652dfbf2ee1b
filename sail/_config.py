"""The agent's config, ``<home>/.sail/config.toml``, written by ``sail init``.

Amounts are decimal strings of base units (TOML integers stop at 2**63, an 18-decimal token
passes that at 9.2 tokens). The signing key is never in the config: only the name of the env var
that holds it, or the path of an encrypted keystore.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tomllib
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from memory.ledger import MAX_TEXT_CHARS
from sail._errors import SailConfigInvalid, SailConfigMissing
from staging import ensure_dir, stage

#: ``rpc_url = "embedded"``: each sail process runs anvil on loopback over ``.sail/chain/`` (see _node)
EMBEDDED = "embedded"
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}\Z")
_AMOUNT_KEYS = ("amount_in", "min_balance")
_MAX_INT = 2**63 - 1  # what the logs' JSON integers carry
_MAX_AMOUNT = 2**256 - 1  # an ERC-20 amount
_MAX_SECONDS = 10**9
_ADDRESS_KEYS = ("router", "token_in", "token_out")
#: text keys: an empty permission would be sent with a swap the ledger's schema then refuses to record
_TEXT_KEYS = ("rpc_url", "permission", "key_env", "keystore")
_OPTIONAL_TEXT_KEYS = ("permission", "keystore")
_INT_KEYS = ("amount_in", "interval_s", "min_balance", "slippage_bps", "deadline_s", "gas", "confirmations")
_SECONDS_KEYS = (
    "receipt_timeout_s", "reconcile_wait_s", "unsent_after_s", "lock_timeout_s", "rpc_timeout_s",
    "tick_timeout_s",
)  # fmt: skip
#: seconds keys that must leave some time: a request, or a tick, cannot be done in none
_SOME_TIME_KEYS = ("rpc_timeout_s", "tick_timeout_s")


@dataclass(frozen=True)
class SailConfig:
    """Everything a tick needs to know that is not on the chain or in the ledger."""

    rpc_url: str
    router: str
    token_in: str
    token_out: str
    amount_in: int
    interval_s: int
    min_balance: int
    slippage_bps: int = 50
    deadline_s: int = 300
    permission: str | None = None
    key_env: str = "SAIL_PRIVATE_KEY"
    keystore: str | None = None
    gas: int = 300_000
    receipt_timeout_s: float = 30.0
    reconcile_wait_s: float = 5.0
    unsent_after_s: float = 600.0
    lock_timeout_s: float = 120.0
    rpc_timeout_s: float = 10.0
    tick_timeout_s: float = 300.0
    confirmations: int = 1

    def __post_init__(self) -> None:
        for name in _ADDRESS_KEYS:
            value = getattr(self, name)
            if not isinstance(value, str) or not _ADDRESS.match(value):
                raise SailConfigInvalid(f"config key {name!r} must be a 0x address, got {_echo(value)}")
        for name in _INT_KEYS:
            value = getattr(self, name)
            bound = _MAX_AMOUNT if name in _AMOUNT_KEYS else _MAX_INT
            low = 1 if name == "confirmations" else 0  # a receipt's own block is its first confirmation
            if type(value) is not int or not low <= value <= bound:
                raise SailConfigInvalid(
                    f"config key {name!r} must be an integer in [{low}, {bound}], got {_echo(value)}"
                )
        for name in _SECONDS_KEYS:
            value = getattr(self, name)
            least = 1e-3 if name in _SOME_TIME_KEYS else 0.0
            if type(value) not in (int, float) or not least <= value <= _MAX_SECONDS:
                raise SailConfigInvalid(
                    f"config key {name!r} must be seconds in [{least}, {_MAX_SECONDS}], got {_echo(value)}"
                )
        for name in _TEXT_KEYS:
            _check_text(name, getattr(self, name))
        if self.amount_in == 0 or not 0 <= self.slippage_bps < 10_000:
            raise SailConfigInvalid("amount_in must be > 0 and slippage_bps in [0, 10000)")
        embedded = self.rpc_url == EMBEDDED
        if not isinstance(self.rpc_url, str) or not (
            embedded or self.rpc_url.startswith(("http://", "https://"))
        ):
            raise SailConfigInvalid(
                f'rpc_url must be an http(s) URL or "{EMBEDDED}", got {_echo(self.rpc_url)}'
            )

    def to_toml(self) -> str:
        """The config as TOML text (None values are left out)."""
        lines = ["# sail agent config, written by `sail init`; amounts are base units"]
        for key, value in asdict(self).items():
            if value is None:
                continue
            text = _toml_value(str(value) if key in _AMOUNT_KEYS else value)
            lines.append(f"{key} = {text}")
        return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    # a TOML basic string: the quote, the backslash and every control character escaped (a raw
    # newline or DEL there would leave a config that no later command can read)
    text = "".join(
        f"\\u{ord(c):04x}" if c in '"\\' or ord(c) < 0x20 or ord(c) == 0x7F else c for c in str(value)
    )
    return f'"{text}"'


def _check_text(name: str, value: object) -> None:
    """Refuse a text key of the config that is not non-empty UTF-8 text of at most ``MAX_TEXT_CHARS``
    (a path, ``keystore``, as long as the OS takes)."""
    if value is None and name in _OPTIONAL_TEXT_KEYS:
        return
    if not isinstance(value, str) or not value:
        kind = "a non-empty string" + (" (or left out)" if name in _OPTIONAL_TEXT_KEYS else "")
        raise SailConfigInvalid(f"config key {name!r} must be {kind}, got {_echo(value)}")
    if len(value) > MAX_TEXT_CHARS and name != "keystore":
        raise SailConfigInvalid(
            f"config key {name!r} holds {len(value)} characters, more than the {MAX_TEXT_CHARS} a "
            "text of the config may hold (the activity log would refuse it with every swap): make it shorter"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise SailConfigInvalid(
            f"config key {name!r} must be UTF-8 text (the config is a TOML file), got {_echo(value)}"
        ) from None


def _echo(value: object) -> str:
    """A config value as an error quotes it: its ``repr``, cut past 80 characters (a crafted config's
    value of megabytes, or of thousands of digits, is named, never printed whole)."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:80]}… ({len(text)} characters)"


def sail_dir(home: str | os.PathLike[str]) -> Path:
    """The ``.sail`` directory of an agent home."""
    return Path(home) / ".sail"


def config_path(home: str | os.PathLike[str]) -> Path:
    """Where the config of an agent home lives."""
    return sail_dir(home) / "config.toml"


def load_config(home: str | os.PathLike[str]) -> SailConfig:
    """Read ``<home>/.sail/config.toml``.

    Raises:
        SailConfigMissing: there is no config (run ``sail init``).
        SailConfigInvalid: it is not TOML, or a key is unknown, missing or ill-typed.
    """
    path = config_path(home)
    try:
        raw = tomllib.loads(_read_regular(path).decode("utf-8"))
    except FileNotFoundError:
        if not Path(home).is_dir():  # a mistyped --home: say which folder is not there
            raise SailConfigMissing(
                f"no agent home at {home} (no such folder, so no config at {path}); check --home or "
                "$SAIL_HOME, or run `sail init` there",
                path=path,
            ) from None
        raise SailConfigMissing(f"no agent config at {path}; run `sail init` first", path=path) from None
    except (OSError, ValueError) as exc:  # not TOML, not UTF-8, or a number Python will not read:
        # tomllib reads an integer with int(), which refuses one of more than 4,300 digits
        why = exc.strerror or exc if isinstance(exc, OSError) else exc  # an OSError names the path again
        raise SailConfigInvalid(f"cannot read {path}: {why}", path=path) from exc
    known = {f.name for f in fields(SailConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise SailConfigInvalid(f"{path}: unknown key {_echo(unknown[0])}", path=path)
    try:
        for key in _AMOUNT_KEYS:
            if key in raw:
                raw[key] = int(str(raw[key]))
        return SailConfig(**raw)
    except (TypeError, ValueError) as exc:
        raise SailConfigInvalid(f"{path}: {exc}", path=path) from exc
    except SailConfigInvalid as exc:
        raise SailConfigInvalid(f"{path}: {exc.message}", path=path) from None


def _read_regular(path: Path) -> bytes:
    """The bytes of ``path``, opened without following a link or blocking (a FIFO would hang).

    Raises:
        FileNotFoundError: it does not exist.
        OSError: it is a link, a directory, a FIFO or a device, or cannot be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "it is a symbolic link, not a regular file") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "it is not a regular file (a directory, FIFO, socket or device)")
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
            if sum(map(len, chunks)) > 1 << 20:
                raise OSError(errno.EFBIG, "it is over 1 MiB, which no config is")
        return b"".join(chunks)
    finally:
        os.close(fd)


def save_config(home: str | os.PathLike[str], config: SailConfig) -> Path:
    """Write the config atomically (stage, fsync, rename) and return its path."""
    path = config_path(home)
    ensure_dir(path.parent)
    stage(path.parent, config.to_toml().encode(), mode=0o600, hint=path.name).publish(path)
    return path
