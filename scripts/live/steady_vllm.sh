#!/usr/bin/env bash
# How steady is a real engine at one fixed shape? Starts vLLM (CPU) as the live
# check does, holds a constant load of one request at a time (256 in / 64 out)
# for NUM_PROMPTS requests, and prints the median of the engine's own step
# time (`--enable-logging-iteration-details`) for one-request decode steps,
# per 10-second window. Any live accuracy figure is bounded by this spread.
#
#   bash scripts/live/steady_vllm.sh            # 200 requests, about 2.5 minutes
#   NUM_PROMPTS=400 OUT=/tmp/steady bash scripts/live/steady_vllm.sh
#
# Outputs go OUTSIDE the repository: $OUT, by default
# ${SERVESIM_RUNS:-$HOME/servesim-runs}/steady-<UTC stamp> (server log, per-request results,
# bench.txt, steady.txt). The venv and the model go to $LIVE_DIR (default ~/.cache/servesim-live).
# CPU: vLLM needs AVX2; uses AVX-512 / AVX-512 BF16 / AMX when present (checked first, cpu_features.sh).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export LIVE_DIR=${LIVE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/servesim-live}
OUT=${OUT:-${SERVESIM_RUNS:-$HOME/servesim-runs}/steady-$(date -u +%Y%m%d-%H%M%S)}
PORT=${PORT:-8019}
. "$HERE/cpu_features.sh"
live_cpu_check vllm
mkdir -p "$OUT"
echo "Results go to $OUT"
[ -x "$LIVE_DIR/venv-vllm/bin/python" ] || bash "$HERE/setup_vllm.sh"
[ -f "$LIVE_DIR/models/tiny-llama/config.json" ] || "$LIVE_DIR/venv-vllm/bin/python" "$HERE/make_model.py"
(cd "$ROOT" && cargo build --release --locked)
PORT=$PORT KV_GIB=1 bash "$HERE/serve_vllm.sh" --num-gpu-blocks-override 20 --enable-logging-iteration-details > "$OUT/vllm_server.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 240); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 1; done
"$ROOT/target/release/servesim" bench --base-url "http://127.0.0.1:$PORT" --dataset-name random \
  --random-input-len 256 --random-output-len 64 --ignore-eos --num-prompts "${NUM_PROMPTS:-200}" --max-concurrency 1 \
  --vocab-size 32000 --result-dir "$OUT" > "$OUT/bench.txt"
python3 - "$OUT/vllm_server.log" <<'PY' | tee "$OUT/steady.txt"
import re, statistics, sys
from collections import defaultdict
win = defaultdict(list)
pat = re.compile(r"(\d\d:\d\d:\d\d) \[loggers.py.*Iteration\(\d+\): (\d+) context requests, \d+ context tokens, "
                 r"(\d+) generation requests, \d+ generation tokens, iteration elapsed time: ([\d.]+) ms")
for line in open(sys.argv[1]):
    m = pat.search(line)
    if m and m.group(2) == "0" and m.group(3) == "1":
        win[m.group(1)[:7]].append(float(m.group(4)))
meds = []
print("window   steps  median one-request decode step (ms)")
for k in sorted(win):
    if len(win[k]) >= 10:
        meds.append(statistics.median(win[k]))
        print(f"{k}x  {len(win[k]):5d}  {meds[-1]:.2f}")
if meds:
    print(f"slowest window {100 * (max(meds) / min(meds) - 1):.0f}% slower than the fastest")
PY
