#!/usr/bin/env bash
# Provokes RequestOutputCollector merging in vLLM's API server by making its loop late on purpose,
# and records how many tokens each SSE chunk carries. A microbenchmark on the CPU test bed, not the
# validation corpus. On this CPU box the engine step is always much longer than the API loop's work
# (api_merge_probe.sh finds no merging), so here the API server process alone (not its EngineCore
# child) is stopped with SIGSTOP for PAUSE_MS every PERIOD_MS while `servesim bench` runs: the
# engine keeps stepping (nothing back-pressures it), its outputs pile up in ZMQ, and after SIGCONT
# the loop drains them. Prediction (docs/output-streaming.md §A4): at concurrency <= 128 the output handler processes
# the queued steps back to back and each request's tokens leave as one merged chunk; above 128 it
# yields after every 128-output slice of a step, so the generators run between steps and chunks
# stay one token each (except requests whose position crosses the slice boundary).
#
# Per concurrency c (one `vllm serve` run, --stream-interval 1): N = 2c prompts of 64 tokens, LONG
# output tokens, ignore_eos; records the client's chunks (len(itls)+1 per request), tokens, engine
# steps (vllm:iteration_tokens_total_count from /metrics, before/after), the API process's CPU
# (whole process and main thread), TPOT and ITL from `servesim bench`.
#
#   $LIVE_DIR/venv-vllm/bin/python scripts/live/make_model.py --name micro-llama --layers 1 \
#       --hidden 128 --inter 256 --heads 2 --kv-heads 1 --tokenizer-from $LIVE_DIR/models/tiny-llama
#   bash validation/front_end/api_merge_pause.sh [target/release/servesim]
#
# Env: CONCS ("64 128 192 256"), LONG (256), MODEL ($LIVE_DIR/models/micro-llama), ENDPOINT
# (/v1/completions), CHUNK (VLLM_V1_OUTPUT_PROC_CHUNK_SIZE, default unset = 128), PAUSE_MS (300),
# PERIOD_MS (600). Writes under $LIVE_DIR and $OUT (default /tmp/api-merge-pause) only.
set -euo pipefail
BIN=${1:-target/release/servesim}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
LIVE_DIR=${LIVE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/servesim-live}
OUT=${OUT:-/tmp/api-merge-pause}
PAUSE_MS=${PAUSE_MS:-300}
PERIOD_MS=${PERIOD_MS:-600}
PORT=${PORT:-8013}
CONCS=${CONCS:-"64 128 192 256"}
LONG=${LONG:-256}
ENDPOINT=${ENDPOINT:-/v1/completions}
export MODEL=${MODEL:-$LIVE_DIR/models/micro-llama}
[ -n "${CHUNK:-}" ] && export VLLM_V1_OUTPUT_PROC_CHUNK_SIZE=$CHUNK
mkdir -p "$OUT"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TICK=$(getconf CLK_TCK)
maxc=0; for c in $CONCS; do [ "$c" -gt "$maxc" ] && maxc=$c; done
PORT=$PORT MAX_NUM_SEQS=$maxc bash "$HERE/scripts/live/serve_vllm.sh" > "$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for i in $(seq 1 150); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 2; done
curl -sf "http://127.0.0.1:$PORT/health" > /dev/null || { echo "server did not start: $OUT/server.log"; exit 1; }
steps() { curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^vllm:iteration_tokens_total_count/ {s += $2} END {printf "%d\n", s}'; }
cpu_proc() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }
cpu_main() { awk '{print $14 + $15}' "/proc/$SERVER/task/$SERVER/stat"; }
bench() { # conc n out tag
  "$BIN" bench --base-url "http://127.0.0.1:$PORT" --endpoint "$ENDPOINT" --tokenizer "$LIVE_DIR/models/tiny-llama" \
    --dataset-name random --random-input-len 64 --random-output-len "$3" --random-range-ratio 0 \
    --num-prompts "$2" --max-concurrency "$1" --ignore-eos --no-initial-test --seed 1 --json \
    --save-result --result-dir "$OUT" --result-filename "$4.json" > "$OUT/$4.out"
}
bench 16 16 16 warm
pauser() { # SIGSTOP/SIGCONT the API server process (not its children) until killed
  trap 'kill -CONT $SERVER 2>/dev/null; exit 0' TERM
  while true; do
    kill -STOP "$SERVER"; sleep "$(echo "$PAUSE_MS/1000" | bc -l)"
    kill -CONT "$SERVER"; sleep "$(echo "($PERIOD_MS-$PAUSE_MS)/1000" | bc -l)"
  done
}
echo "conc,prompts,tokens,chunks,steps,proc_cpu_s,main_cpu_s,duration_s,median_tpot_ms,median_itl_ms,mean_itl_ms,p99_itl_ms,max_tokens_per_chunk" | tee "$OUT/probe.csv"
for c in $CONCS; do
  n=$((2 * c))
  s0=$(steps); a=$(cpu_proc); am=$(cpu_main)
  pauser & P=$!
  bench "$c" "$n" "$LONG" "c$c"
  kill -TERM $P; wait $P 2>/dev/null || true; kill -CONT "$SERVER"
  s1=$(steps); b=$(cpu_proc); bm=$(cpu_main)
  python3 - "$OUT/c$c.json" "$OUT/c$c.out" "$c" "$n" "$((s1 - s0))" "$(echo "($b-$a)/$TICK" | bc -l)" "$(echo "($bm-$am)/$TICK" | bc -l)" <<'PY' | tee -a "$OUT/probe.csv"
import json, sys
res, rep = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
c, n, steps, pc, mc = sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6]), float(sys.argv[7])
chunks = sum(len(x) + 1 for x in res["itls"])
tokens = sum(res["output_lens"]) if "output_lens" in res else rep.get("total_output_tokens")
# the largest gap relative to the median gap, as a crude "tokens in one chunk" marker is not
# available from ITLs alone; report max over requests of tokens/chunks instead
per_req = [l / (len(x) + 1) for l, x in zip(res.get("output_lens", []), res["itls"])] or [0]
print(f"{c},{n},{tokens},{chunks},{steps},{pc:.2f},{mc:.2f},{rep['duration']:.2f},"
      f"{rep['median_tpot_ms']:.2f},{rep['median_itl_ms']:.2f},{rep['mean_itl_ms']:.2f},"
      f"{rep['p99_itl_ms']:.2f},{max(per_req):.2f}")
PY
done
