#!/usr/bin/env bash
# The test command (README "Run the tests"; CI runs exactly this): installs
# what the teaching notebooks need into .venv (once), then runs every test,
# the notebooks included.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV=${SERVESIM_VENV:-$ROOT/.venv}
if ! "$VENV/bin/python" -c "import nbclient, nbformat, ipykernel, matplotlib" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -r notebooks/requirements.txt
fi
export SERVESIM_PYTHON="$VENV/bin/python"
cargo test --workspace --locked "$@"
