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
# The page (web/, README "In the browser"): the wasm target, and headless
# Chromium for its browser test (tests/web.rs), installed when missing; the
# test is then required to run, not skipped.
if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown
fi
if [ -z "${SERVESIM_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
fi
bash scripts/build_web.sh
export SERVESIM_WEB_TEST=require
cargo test --workspace --locked "$@"
