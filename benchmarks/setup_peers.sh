#!/usr/bin/env bash
# Create the benchmark's own venv (.bench-venv/ at the repository root, gitignored) and install the
# peers of benchmarks/requirements-peers.txt into it. The project's own environment is not touched:
# `python -m benchmarks` drives the peers by running benchmarks/peers.py under .bench-venv/bin/python.
#
#   bash benchmarks/setup_peers.sh            # create (or update) .bench-venv
#   BENCH_VENV=/elsewhere bash benchmarks/setup_peers.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
venv="${BENCH_VENV:-$repo/.bench-venv}"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
# Each peer on its own, so one that does not install here does not keep the others out.
status=0
while read -r req; do
    case "$req" in ''|'#'*) continue ;; esac
    if ! "$venv/bin/python" -m pip install --quiet "$req" 2> >(grep -v "is ignored: it is neither" >&2); then
        echo "setup_peers: could not install $req (its benchmark will be reported as skipped)" >&2
        status=1
    fi
done < "$here/requirements-peers.txt"
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
for name in ("eventsourcing", "langgraph", "langgraph-checkpoint-sqlite", "dbos"):
    try:
        print(f"  {name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name}: not installed")
PY
echo "peers installed in $venv"
exit $status
