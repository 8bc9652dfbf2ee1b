"""`flows why` by meaning: --mode, --embedder and $FLOWS_EMBEDDER, the filters it shares with
`recall`, what each answer says about how it matched, and `flows check --repair` deriving vectors."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from memory._vectors import vectors_path
from tests.conftest import ROOT
from tests.flows.helpers import flows, json_of

ALLERGY = "The user is allergic to peanuts"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    db = tmp_path / "store" / "history.db"
    db.parent.mkdir()
    for text, tag in (
        (ALLERGY, "health"),
        ("The user lives in Berlin", "home"),
        ("Deploys happen on Fridays", "ops"),
    ):
        assert flows(db, "learn", text, "--scope", "u", "--tag", tag).returncode == 0
    return db


def test_why_by_meaning_from_the_command_line(db: Path) -> None:
    assert json_of(flows(db, "why", "nuts", "--json")) == []  # keyword by default: no shared word
    answer = json_of(flows(db, "why", "nuts", "--mode", "hybrid", "--json"))[0]
    assert (answer["text"], answer["matchedBy"]) == (ALLERGY, "meaning")
    assert answer["similarity"] > 0.1 and answer["citation"]["stream"] == "memory-learn"
    table = flows(db, "why", "what food should this user avoid", "--mode", "semantic", "--limit", "1")
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith(f"1. {ALLERGY}\n") and "matched: meaning 0." in table.stdout
    hybrid = flows(db, "why", "does the user have allergies", env={"FLOWS_EMBEDDER": "default"})
    assert hybrid.stdout.startswith(f"1. {ALLERGY}\n") and "matched: words user; meaning 0." in hybrid.stdout


def test_why_filters_apply_before_meaning(db: Path) -> None:
    got = json_of(flows(db, "why", "nuts", "--mode", "semantic", "--tag", "home", "--json"))
    assert [a["text"] for a in got] == []  # the allergy is not tagged home; nothing else is like nuts
    got = json_of(
        flows(db, "why", "where does the user live", "--mode", "semantic", "--tag", "home", "--json")
    )
    assert [a["text"] for a in got] == ["The user lives in Berlin"]
    assert json_of(flows(db, "why", "nuts", "--mode", "hybrid", "--source", "elsewhere", "--json")) == []
    assert json_of(flows(db, "why", "nuts", "--mode", "hybrid", "--before", "2000-01-01", "--json")) == []


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        ("nope", "memory_argument_invalid"),
        ("no_such_module_here:make", "memory_embedder_unavailable"),
        ("os:getcwd", "memory_argument_invalid"),  # a function that returns no embedder
    ],
)
def test_a_bad_embedder_name_is_a_coded_error(db: Path, spec: str, code: str) -> None:
    done = flows(db, "why", "nuts", "--embedder", spec, "--json")
    assert done.returncode != 0 and f'"code":"{code}"' in done.stderr.replace(" ", "")
    assert not vectors_path(db).exists()


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("user_embedders:make", "no GPU on this host"),  # the function that makes it raises
        ("user_embedders_broken:toy", "broken at import"),  # its module raises as it is imported
    ],
)
def test_a_named_embedder_whose_own_code_raises_is_unavailable_not_a_bug(
    db: Path, tmp_path: Path, spec: str, said: str
) -> None:
    made = 'def make():\n    raise RuntimeError("no GPU on this host")\n'
    (tmp_path / "user_embedders.py").write_text(made)
    (tmp_path / "user_embedders_broken.py").write_text('raise ValueError("broken at import")\n')
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
    for done in (
        flows(db, "why", "nuts", "--embedder", spec, "--json", env=env),
        flows(db, "why", "nuts", "--mode", "semantic", "--json", env={**env, "FLOWS_EMBEDDER": spec}),
    ):
        assert done.returncode == 1 and "Traceback" not in done.stderr
        error = orjson.loads(done.stderr)
        assert error["code"] == "memory_embedder_unavailable" and said in error["message"], done.stderr
    assert not vectors_path(db).exists()


_EXITING = """
import sys

class Exiting:
    name = "exiting@1"
    dims = 4

    def embed(self, texts):
        sys.exit(0)  # as a model library may, on a fatal error

def make():
    sys.exit(0)

exiting = Exiting()
"""


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        ("exiting_embedders:exiting", "memory_embedder_failed"),
        ("exiting_embedders:make", "memory_embedder_unavailable"),
    ],
)
def test_an_embedder_that_exits_is_a_coded_failure_never_a_silent_exit_0(
    db: Path, tmp_path: Path, spec: str, code: str
) -> None:
    """An embedder whose code calls ``sys.exit(0)`` made ``flows why`` print nothing and exit 0, as
    if it had answered."""
    (tmp_path / "exiting_embedders.py").write_text(_EXITING)
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
    done = flows(db, "why", "nuts", "--mode", "semantic", "--embedder", spec, "--json", env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    error = orjson.loads(done.stderr)
    assert error["code"] == code and "SystemExit" in error["message"], done.stderr


def test_check_repair_derives_the_vectors_again(db: Path) -> None:
    assert flows(db, "why", "nuts", "--mode", "semantic").returncode == 0
    vectors_path(db).write_bytes(b"garbage" * 500)
    for suffix in ("-wal", "-shm"):
        Path(f"{vectors_path(db)}{suffix}").unlink(missing_ok=True)
    checked = flows(db, "check", "--json")
    assert checked.returncode != 0 and "vectors_damaged" in checked.stdout
    repaired = flows(db, "check", "--repair", "--embedder", "default")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "derived the vectors of 3 live finding(s)" in repaired.stdout
    assert flows(db, "check").returncode == 0


HUNG_EMBEDDER = """
import threading
import time


class Hung:
    name = "hung-1"
    dims = 4

    def embed(self, texts):
        threading.Event().wait()  # never answers


def make():
    return Hung()


def slow_load():
    time.sleep(3600)
"""


@pytest.mark.parametrize("spec", ["hung_embedder:make", "hung_embedder:slow_load"])
def test_a_hung_embedder_is_a_coded_error_after_flows_embed_timeout(
    db: Path, tmp_path: Path, spec: str
) -> None:
    """An embedder that never answers (or never finishes loading) fails `why --mode hybrid` with its
    code once $FLOWS_EMBED_TIMEOUT has passed, naming the way out; it never hangs the command."""
    (tmp_path / "hung_embedder.py").write_text(HUNG_EMBEDDER)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "FLOWS_EMBED_TIMEOUT": "0.5"}
    result = flows(db, "why", "nuts", "--mode", "hybrid", "--embedder", spec, "--json", env=env, timeout=40)
    assert result.returncode == 1 and result.stdout == "", result.stderr
    error = orjson.loads(result.stderr)
    loading = spec.endswith("slow_load")
    assert error["code"] == ("memory_embedder_unavailable" if loading else "memory_embedder_failed"), error
    assert "0.5 s" in error["message"] and "--mode keyword" in error["message"], error
    assert "FLOWS_EMBED_TIMEOUT" in error["message"], error


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon", "1e9"])
def test_a_bad_flows_embed_timeout_is_a_usage_error(db: Path, value: str) -> None:
    result = flows(db, "why", "nuts", "--mode", "hybrid", env={"FLOWS_EMBED_TIMEOUT": value})
    assert result.returncode == 2 and "error[memory_argument_invalid]" in result.stderr, result.stderr
    assert "FLOWS_EMBED_TIMEOUT" in result.stderr
