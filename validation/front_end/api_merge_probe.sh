#!/usr/bin/env bash
# Provokes RequestOutputCollector merging in vLLM's API server and records it. A microbenchmark on
# the CPU test bed, not the validation corpus. A very small model (1 layer, hidden 128) makes the
# engine step short, so the API loop's per-token work (~70-100 us a token on this VM) can exceed a
# step at high concurrency; then the loop processes several queued steps before the per-request
# generators run, and a chunk carries several tokens. vLLM's output handler yields after every
# VLLM_V1_OUTPUT_PROC_CHUNK_SIZE (128) outputs of a step, so the prediction is: merging at
# concurrency <= 128 when the loop is behind, none above 128 (docs/output-streaming.md §A4).
#
# Per concurrency c (one `vllm serve` run, --stream-interval 1): N = 2c prompts of 64 tokens, LONG
# output tokens, ignore_eos; records the client's chunks (len(itls)+1 per request), tokens, engine
# steps (vllm:iteration_tokens_total_count from /metrics, before/after), the API process's CPU
# (whole process and main thread), TPOT and ITL from `servesim bench`. First, on the idle server,
# the API process's CPU per /metrics scrape and per idle second (scrape.csv), which the fit of
# api_chunk_split.sh subtracts. Result on this VM: no merging at any c (the CPU engine step is
# always longer than the loop's work); 4.5 ms a scrape, 2 ms/s idle.
#
#   $LIVE_DIR/venv-vllm/bin/python scripts/live/make_model.py --name micro-llama --layers 1 \
#       --hidden 128 --inter 256 --heads 2 --kv-heads 1 --tokenizer-from $LIVE_DIR/models/tiny-llama
#   bash validation/front_end/api_merge_probe.sh [target/release/servesim]
#
# Env: CONCS ("64 128 192 256"), LONG (256), MODEL ($LIVE_DIR/models/micro-llama), ENDPOINT
# (/v1/completions), CHUNK (VLLM_V1_OUTPUT_PROC_CHUNK_SIZE, default unset = 128).
# Writes under $LIVE_DIR and $OUT (default /tmp/api-merge-probe) only.
set -euo pipefail
BIN=${1:-target/release/servesim}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
LIVE_DIR=${LIVE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/servesim-live}
OUT=${OUT:-/tmp/api-merge-probe}
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
# The API process's CPU per /metrics scrape (servesim bench polls it every 500 ms during a run),
# and per second of idling, to correct the per-token figures of api_chunk_split.sh.
a=$(cpu_proc); for i in $(seq 1 40); do curl -s "http://127.0.0.1:$PORT/metrics" > /dev/null; done; b=$(cpu_proc)
echo "metrics_scrape_cpu_ms,$(echo "1000*($b-$a)/$TICK/40" | bc -l)" | tee "$OUT/scrape.csv"
a=$(cpu_proc); sleep 10; b=$(cpu_proc)
echo "idle_cpu_ms_per_s,$(echo "1000*($b-$a)/$TICK/10" | bc -l)" | tee -a "$OUT/scrape.csv"
echo "conc,prompts,tokens,chunks,steps,proc_cpu_s,main_cpu_s,duration_s,median_tpot_ms,median_itl_ms,mean_itl_ms,p99_itl_ms,max_tokens_per_chunk" | tee "$OUT/probe.csv"
for c in $CONCS; do
  n=$((2 * c))
  s0=$(steps); a=$(cpu_proc); am=$(cpu_main)
  bench "$c" "$n" "$LONG" "c$c"
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
