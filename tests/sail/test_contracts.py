"""The contracts: Solidity sources in the repo, compiled by the pinned npm ``solc``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sail._contracts import CONTRACT_NAMES, artifact
from tests.conftest import ROOT

CONTRACTS = ROOT / "contracts"


@pytest.mark.parametrize("name", CONTRACT_NAMES)
def test_the_shipped_artifacts_were_compiled_from_the_sources_in_the_repo(name: str) -> None:
    art = artifact(name)
    source = (CONTRACTS / art["sourceName"]).read_bytes()
    assert art["sourceSha256"] == hashlib.sha256(source).hexdigest()
    assert art["compiler"].startswith("solc 0.8.37")
    assert json.loads((CONTRACTS / "artifacts" / f"{name}.json").read_text()) == art
    assert art["bytecode"].startswith("0x60") and art["abi"]


@pytest.mark.slow
def test_compiling_again_with_npm_solc_reproduces_the_committed_artifacts(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None or not (ROOT / "node_modules" / "solc").exists():
        pytest.skip("node or the npm solc package is not installed (run `npm ci`)")
    done = subprocess.run(
        [node, str(CONTRACTS / "compile.mjs")],
        env={**os.environ, "SOLC_OUT_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for name in CONTRACT_NAMES:
        assert json.loads((tmp_path / f"{name}.json").read_text()) == artifact(name)
