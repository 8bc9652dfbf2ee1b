"""Errors of the ``sail`` agent: config, keys, submission, the local node.

Every error carries a stable ``code`` (docs/SURFACE.md) and a message that says what to do.
The tree::

    SailError                     base (a staging.CodedError): path
    ├── SailConfigMissing         sail_config_missing: no .sail/config.toml (run `sail init`)
    ├── SailConfigInvalid         sail_config_invalid: the config has a missing or ill-typed key
    ├── SailKeyUnavailable        sail_key_unavailable: no signing key (env var or keystore)
    ├── SailSubmitFailed          sail_submit_failed: the node refused the signed transaction
    ├── SailSubmitUncertain       sail_submit_uncertain: the connection failed while sending; the
    │                             next tick resolves the dispatch from the chain before trading
    ├── SailNodeUnavailable       sail_node_unavailable: the local anvil node cannot be had
    ├── SailChainMismatch         sail_chain_mismatch: the node serves another chain than the agent's
    │                             unresolved dispatches were signed for
    └── SailChainMissing          sail_chain_missing: the `chain` extra (web3) is not installed

Chain reads that fail raise ``memory.ledger.ChainUnavailable`` (``chain_unavailable``); ledger and
journal errors propagate unchanged.
"""

from __future__ import annotations

from pathlib import Path

from staging import CodedError


class SailError(CodedError):
    """Base of every sail error; ``code`` is stable."""

    code = "sail_error"

    def __init__(self, message: str, *, path: str | Path | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else Path(path)


class SailConfigMissing(SailError):
    """The agent home has no ``.sail/config.toml``."""

    code = "sail_config_missing"


class SailConfigInvalid(SailError):
    """The config is not valid TOML, or a key is missing or of the wrong type."""

    code = "sail_config_invalid"


class SailKeyUnavailable(SailError):
    """No signing key: the env var is unset or the keystore cannot be read or decrypted."""

    code = "sail_key_unavailable"


class SailSubmitFailed(SailError):
    """The node refused the signed transaction (nonce, funds, gas); nothing was dispatched.

    The write-ahead record is resolved at once as never sent (``dispatch_unsent``).
    """

    code = "sail_submit_failed"


class SailSubmitUncertain(SailError):
    """The connection failed while the signed transaction was being sent: it may have reached the node.

    The dispatch was written ahead to the activity log, so the next tick resolves it from the chain
    (by its hash, and by the account's nonce) before it trades again.
    """

    code = "sail_submit_uncertain"


class SailNodeUnavailable(SailError):
    """The local anvil node could not be installed, started or reached."""

    code = "sail_node_unavailable"


class SailChainMismatch(SailError):
    """The node at ``rpc_url`` serves another chain than a dispatch still being resolved was signed for.

    Resolving it there would read another chain's nonces and transactions (a swap mined on its own
    chain judged never sent or dropped), so nothing is resolved, ledgered or sent until the node is
    the dispatch's chain's again.
    """

    code = "sail_chain_mismatch"


class SailTickTimeout(SailError):
    """A ``sail tick`` ran past ``tick_timeout_s`` in all (a node slow on every request, yet within
    ``rpc_timeout_s`` each): it stopped where it was, nothing more was signed or ledgered, and the
    next tick starts over."""

    code = "sail_tick_timeout"


class SailSetupFailed(SailError):
    """A transaction setting up the shipped demo market (deploy, fund, approve, the demo's owner
    moves) reverted on the local chain."""

    code = "sail_setup_failed"


class SailChainMissing(SailError):
    """A command that reads or writes the chain, without the ``chain`` extra (web3) installed."""

    code = "sail_chain_missing"
