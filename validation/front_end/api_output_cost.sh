#!/usr/bin/env bash
# The CPU time vLLM's API server process spends per streamed output token: its detokenisation
# (OutputProcessor, in the API process), the per-request generator's chunk (pydantic, JSON) and the
# SSE write, all on one asyncio loop (docs/front-end.md, `t_out`). A microbenchmark, not the
# validation corpus: the real vLLM (CPU wheel, scripts/live/setup_vllm.sh) serves the tiny model,
# `servesim bench` sends the same prompts twice with short and long outputs, and the difference of
# the API server's CPU time (utime + stime of the `vllm serve` process, its threads included, not the
# EngineCore child) over the difference of tokens streamed is the cost of one more output token.
#
#   bash scripts/live/setup_vllm.sh && $LIVE_DIR/venv-vllm/bin/python scripts/live/make_model.py
#   bash validation/front_end/api_output_cost.sh [target/release/servesim]
#
# Writes under $LIVE_DIR and $OUT (default /tmp/api-output-cost) only.
set -euo pipefail
BIN=${1:-target/release/servesim}
LIVE_DIR=${LIVE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/servesim-live}
OUT=${OUT:-/tmp/api-output-cost}
PORT=${PORT:-8011}
CONC=${CONC:-32}
N=${N:-64}
SHORT=${SHORT:-16}
LONG=${LONG:-272}
ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PORT=$PORT MAX_NUM_SEQS=64 bash "$HERE/scripts/live/serve_vllm.sh" > "$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for i in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break
  sleep 2
done
curl -sf "http://127.0.0.1:$PORT/health" > /dev/null || { echo "server did not start: $OUT/server.log"; exit 1; }
TICK=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }
bench() { # endpoint output_len
  "$BIN" bench --base-url "http://127.0.0.1:$PORT" --endpoint "$1" --tokenizer "$LIVE_DIR/models/tiny-llama" \
    --dataset-name random --random-input-len 64 --random-output-len "$2" --random-range-ratio 0 \
    --num-prompts "$N" --max-concurrency "$CONC" --ignore-eos --no-initial-test --seed 1 --json > "$OUT/bench-$(basename "$1")-$2.json"
}
echo "endpoint,round,short_cpu_s,long_cpu_s,tokens_added,us_per_token"
for ep in /v1/completions /v1/chat/completions; do
  bench "$ep" "$SHORT"   # warm-up of this endpoint's path
  for r in $(seq 1 "$ROUNDS"); do
    a=$(cpu); bench "$ep" "$SHORT"; b=$(cpu)
    c=$(cpu); bench "$ep" "$LONG"; d=$(cpu)
    python3 - "$ep" "$r" "$a" "$b" "$c" "$d" "$TICK" "$N" "$SHORT" "$LONG" <<'PY'
import sys
ep, r, a, b, c, d, tick, n, s, l = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:])
short, long_ = (b - a) / tick, (d - c) / tick
added = n * (l - s)
print(f"{ep},{r},{short:.2f},{long_:.2f},{added:.0f},{1e6 * (long_ - short) / added:.1f}")
PY
  done
done
