"""A local anvil node on loopback: found (or installed with npm), started, waited for, stopped.

anvil comes from the npm registry as ``@foundry-rs/anvil``, pinned in the repo's ``package.json``:
that package's command (``node_modules/.bin/anvil``) is a Node.js wrapper that runs the binary its
platform package carries (``@foundry-rs/anvil-linux-amd64/bin/anvil``, …). Lookup order:
``$SAIL_ANVIL``, ``node_modules/.bin/anvil`` in the current directory or the repo this package sits
in, then ``anvil`` on PATH; whichever is found, npm's wrapper is followed to that binary, and any
other script is refused (``find_anvil``). ``ensure_anvil`` runs ``npm ci`` in the repo when none is
found and npm is there.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import logging
import os
import platform as platform_module
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import portalocker
import requests

from memory.ledger import require_regular
from sail._errors import SailNodeUnavailable
from staging import ensure_dir

log = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parent.parent
#: anvil's default dev accounts 0 and 1 (public, well-known test keys; never use them on a live chain)
ANVIL_KEYS = (
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
)


_PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent (the forking thread) ends
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _ended_with_parent(parent: int) -> None:
    """In the child, before anvil runs: SIGTERM when the process that started it ends, however it
    ends (SIGKILL included), so anvil dumps its chain and exits rather than run on unseen; and an
    exit at once when that process has ended already (before the ``prctl``)."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def find_anvil() -> Path | None:
    """The anvil binary to run, or None when none is installed.

    The binary itself, never a script that starts it: sail sends the process it starts SIGTERM and
    waits for it to exit (the node dumps the chain's state then), has the kernel send it SIGTERM
    when its starter ends, and hands it the embedded chain's lock; a wrapper receives all three, and
    npm's (``@foundry-rs/anvil``'s ``bin.mjs``) forwards SIGTERM and exits at once, while the anvil
    it spawned is still dumping and holds no lock. So npm's wrapper is followed to the binary its
    platform package carries, beside it.

    Raises:
        SailNodeUnavailable: what was found is a script other than npm's wrapper, or npm's wrapper
            whose platform package holds no binary.
    """
    env = os.environ.get("SAIL_ANVIL")
    if env:
        return _the_binary(Path(env))
    for root in (Path.cwd(), REPO_ROOT):
        candidate = root / "node_modules" / ".bin" / "anvil"
        if candidate.exists():
            return _the_binary(candidate)
    found = shutil.which("anvil")
    return None if found is None else _the_binary(Path(found))


_NPM_PLATFORMS = {"linux": "linux", "darwin": "darwin", "win32": "win32"}
_NPM_ARCHS = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def _the_binary(found: Path) -> Path:
    """``found`` when it is a program; the binary npm's wrapper runs when it is that wrapper."""
    try:
        with found.open("rb") as file:
            head = file.read(2)
    except OSError:
        return found  # starting it says what is wrong (a missing file, no permission)
    if head != b"#!":
        return found
    script = found.resolve()
    package = script.parent
    try:
        name = json.loads((package / "package.json").read_text(encoding="utf-8")).get("name")
    except (OSError, ValueError, AttributeError):
        name = None
    if name == "@foundry-rs/anvil":
        platform = _NPM_PLATFORMS.get(sys.platform)
        arch = _NPM_ARCHS.get(platform_module.machine().lower())
        binary = "anvil.exe" if sys.platform == "win32" else "anvil"
        candidates = []
        if platform is not None and arch is not None:
            # where the wrapper finds ``@foundry-rs/anvil-<platform>-<arch>/bin/anvil``: nested, or beside it
            own = f"anvil-{platform}-{arch}"
            candidates += [
                package / "node_modules" / "@foundry-rs" / own / "bin" / binary,
                package.parent / own / "bin" / binary,
            ]
        candidates.append(package.parent / "dist" / binary)  # the wrapper's fallback: postinstall's download
        for candidate in candidates:
            if candidate.is_file():
                return candidate
        raise SailNodeUnavailable(
            f"{found} is npm's anvil wrapper, and its platform package holds no anvil binary "
            f"(looked for {', '.join(str(c) for c in candidates)}); run `npm ci` again, or set "
            "SAIL_ANVIL to the anvil binary"
        )
    raise SailNodeUnavailable(
        f"{found} is a script, not the anvil binary: sail stops the node it starts with SIGTERM and "
        "waits for it to dump the chain, which a script that runs anvil as its child does not pass on; "
        "set SAIL_ANVIL to the anvil binary itself"
    )


def ensure_anvil() -> Path:
    """The anvil binary, installing the repo's pinned npm packages (``npm ci``) when it is missing.

    Raises:
        SailNodeUnavailable: npm is not on PATH, or ``npm ci`` failed.
    """
    found = find_anvil()
    if found is not None:
        return found
    npm = shutil.which("npm")
    if npm is None:
        raise SailNodeUnavailable("anvil is not installed and npm is not on PATH; install Node.js and npm")
    if not (REPO_ROOT / "package-lock.json").exists():
        raise SailNodeUnavailable(f"anvil is not installed and {REPO_ROOT} has no package-lock.json")
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    found = find_anvil()
    if done.returncode != 0 or found is None:
        raise SailNodeUnavailable(f"`npm ci` did not install anvil: {done.stderr.strip()[-400:]}")
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class AnvilNode:
    """An anvil process serving JSON-RPC on ``127.0.0.1``; a context manager that always stops it.

    Args:
        binary: the anvil binary (default: ``ensure_anvil()``); npm's script is followed to it, and
            any other script refused, as ``find_anvil`` does.
        chain_id: the chain id to serve.
        startup_timeout: seconds to wait for the node to answer.
        state: a file to load the chain from and dump it to when the node stops (SIGTERM).
        genesis_ts: the genesis block's time (unix seconds) of a new chain; its clock runs on from
            there at the machine's pace (ignored by a chain loaded from ``state``).
        prune_history: keep only this many recent blocks' states (``--prune-history``), as most
            hosted nodes do: a read at an older block fails.
        keep_fds: descriptors the node inherits and holds until it exits (the embedded chain's
            lock: held by the node as well, so another process cannot load the chain while this
            node, its starter gone, is still dumping it).

    On Linux the node is sent SIGTERM when the process (the thread) that started it ends, however
    it ends: a starter killed with SIGKILL, or ended by SIGTERM with no handler, leaves no node
    running on its own, and a node given ``state`` dumps the chain on its way out.
    """

    def __init__(
        self,
        binary: Path | None = None,
        *,
        chain_id: int = 31337,
        startup_timeout: float = 30.0,
        state: Path | None = None,
        genesis_ts: int | None = None,
        prune_history: int | None = None,
        keep_fds: tuple[int, ...] = (),
    ) -> None:
        self.binary = binary
        self.keep_fds = keep_fds
        self.state = state
        self.genesis_ts = genesis_ts
        self.prune_history = prune_history
        self.chain_id = chain_id
        self.startup_timeout = startup_timeout
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The node's JSON-RPC URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> AnvilNode:
        """Start anvil on a free port and wait until it answers ``eth_chainId``.

        Raises:
            SailNodeUnavailable: it could not be installed, started, or did not answer in time.
        """
        binary = ensure_anvil() if self.binary is None else _the_binary(self.binary)
        self.port = free_port()
        argv = [
            str(binary),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--chain-id",
            str(self.chain_id),
        ]
        if self.prune_history is not None:
            argv += ["--prune-history", str(self.prune_history)]
        if self.genesis_ts is not None and (self.state is None or not self.state.exists()):
            argv += ["--timestamp", str(self.genesis_ts)]
        if self.state is not None:
            # load the chain from the file and dump it back on exit, with past blocks' states, so
            # a revert's reason can still be replayed on the state before its block after a restart
            argv += ["--state", str(self.state), "--preserve-historical-states"]
        try:
            self._proc = subprocess.Popen(
                argv,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,  # a Ctrl-C at the terminal stops the tick first, then the node
                pass_fds=self.keep_fds,
                preexec_fn=functools.partial(_ended_with_parent, os.getpid()),  # noqa: PLW1509
            )
        except OSError as exc:
            raise SailNodeUnavailable(f"cannot run {binary}: {exc}") from exc
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                raise SailNodeUnavailable(f"anvil exited at start ({self._proc.returncode}): {err[-400:]}")
            if self._answers():
                return self._started()
            time.sleep(0.05)
        self.stop()
        raise SailNodeUnavailable(f"anvil did not answer on {self.url} within {self.startup_timeout}s")

    def _started(self) -> AnvilNode:
        log.info("anvil answers on %s", self.url)
        return self

    def _answers(self) -> bool:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}
        try:
            return requests.post(self.url, json=body, timeout=1).ok
        except requests.RequestException:
            return False

    def rpc(self, method: str, *params: object) -> object:
        """Call a JSON-RPC method (e.g. ``evm_increaseTime``) and return its result."""
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
        answer = requests.post(self.url, json=body, timeout=10).json()
        if "error" in answer:
            raise SailNodeUnavailable(f"anvil {method} failed: {answer['error']}")
        return answer.get("result")

    def stop(self) -> None:
        """Stop the node (SIGTERM, then SIGKILL after 5 s, or 60 s to dump a state). Safe twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        log.info("stopping anvil on %s", self.url)
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            proc.wait(timeout=5 if self.state is None else 60)  # SIGTERM makes anvil dump its state
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()

    def __enter__(self) -> AnvilNode:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@contextlib.contextmanager
def embedded_chain(sail_dir: Path, *, genesis_ts: int | None = None) -> Iterator[AnvilNode]:
    """The agent's embedded chain: anvil over ``<sail_dir>/chain/anvil-state.json``, for one process.

    An in-process EVM dies with its process, and every tick is a fresh process; so the embedded
    chain is anvil on loopback whose state is loaded at start and dumped at stop. One process at a
    time holds it (``chain/anvil.lock``): two nodes over one state file would lose each other's
    blocks. ``genesis_ts`` dates a chain created here (see ``AnvilNode``).

    Raises:
        SailNodeUnavailable: anvil cannot be had, or the chain is held by another process for 120 s.
        LedgerNotAFile: the chain's lock or state file is a link, FIFO, directory or device: anvil
            would load and dump the chain through a link (outside the home), or block on a FIFO.
    """
    directory = ensure_dir(sail_dir / "chain")
    require_regular(directory / "anvil.lock", directory / "anvil-state.json")
    log.info("taking the embedded chain's lock %s (one sail process at a time)", directory / "anvil.lock")
    try:
        lock = portalocker.Lock(str(directory / "anvil.lock"), mode="a", timeout=120)
        held = lock.acquire()
    except (portalocker.exceptions.LockException, OSError) as exc:
        raise SailNodeUnavailable(f"the embedded chain in {directory} is busy or unusable: {exc}") from exc
    try:
        # the node holds the lock too (one ``flock`` of one open file, shared by both): when this
        # process is killed, its node, sent SIGTERM, dumps the chain, and only its exit lets the
        # next process load it; before, the next tick loaded the chain as it was before the killed
        # one's blocks (a mined swap gone), and the node, left running, dumped its chain over the
        # file whenever it was stopped
        node = AnvilNode(
            state=directory / "anvil-state.json", genesis_ts=genesis_ts, keep_fds=(held.fileno(),)
        )
        with node:
            yield node
    finally:
        lock.release()
