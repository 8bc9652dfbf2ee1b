"""The repository speaks for itself: no text cites requirement ids, source documents or issue numbers
that a reader of this repository cannot open (every rule is stated in the docs in their own words)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# What it forbids, in words: a requirement id (the letter R, a dash, one or two capitals and an
# optional number, or R and a number of two or more digits), the contract's name in capitals, the
# source documents (by the word or by their numbered hexadecimal file names), an issue number (the
# word "issue" before a number, or a hash sign before one), and prose that leans on "the issue" or
# "the spec" for a rule it should state itself.
FORBIDDEN = re.compile(
    r"\bR-[A-Z]{1,2}[0-9]*\b"
    r"|\bR-?[0-9]{2,}\b"
    r"|\bSPEC\b"
    r"|\bseeds?\b(?! *=)|\bseed's\b"
    r"|\b00[0-9]_[0-9a-f]{16}\b"
    r"|\b[Ii]ssues? #?[0-9]+"
    r"|(?<![\w&])#[0-9]+\b"
    r"|\b[Tt]he (?:issue|spec)(?:'s)?\b"
)
# A random generator's seed is an ordinary word in code; only prose about "the seed" is a citation.
RANDOM_SEED = re.compile(
    r"random|Random|seed\s*[=:)]|seed: int|, seed\b|\bseed\b\)|derandomize|settings"
    r"|\{seed\}|\"seed\"|fixed-seed"
)


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    skip = (".json", ".png", ".lock", ".sol", ".css")  # a stylesheet's #123456 is a colour
    return [REPO / p for p in out.splitlines() if not p.endswith(skip) and p != Path(__file__).name]


def test_no_file_cites_requirement_ids_source_documents_or_issue_numbers() -> None:
    found = []
    for path in _tracked_text_files():
        if path == Path(__file__).resolve():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if FORBIDDEN.search(line) and not RANDOM_SEED.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:100]}")
    assert found == []
