#!/usr/bin/env bash
# Splits the vLLM API server's CPU cost of streaming into a per-token part (paid for every output
# token, also when several tokens leave in one SSE chunk) and a per-chunk part (saved when tokens
# are merged into one chunk). A microbenchmark on the CPU test bed, not the validation corpus.
#
# How: the real vLLM (CPU wheel 0.32.0, scripts/live/setup_vllm.sh) serves the tiny model with
# `--stream-interval K` for several K; `servesim bench` sends the same N prompts with short and long
# outputs; the difference of the API server's CPU time (long minus short) is regressed on the
# difference of tokens streamed and of SSE chunks the client received (from `--save-result`'s
# `itls`: chunks = len(itls) + 1 per request). Two CPU clocks: the whole `vllm serve` process
# (its threads: the asyncio loop, libzmq's I/O thread, ...) and its main thread alone (the loop).
# The EngineCore child process is not counted. Also one run per K at a higher concurrency, where
# the loop may fall behind and RequestOutputCollector merges outputs (chunks < tokens at K=1).
#
#   bash scripts/live/setup_vllm.sh && $LIVE_DIR/venv-vllm/bin/python scripts/live/make_model.py
#   bash validation/front_end/api_chunk_split.sh [target/release/servesim]
#   python3 validation/front_end/api_chunk_split_fit.py $OUT/runs.csv
#
# Env: KS (stream intervals, default "1 4 16"), CONC (32), N (64), SHORT (16), LONG (272),
# ROUNDS (2), ENDPOINTS ("/v1/completions"), HIGHC (extra concurrencies run at K=1 only, where the
# loop may fall behind and merge: default "128 256"; N is raised to the concurrency there; " " (a
# space) runs none).
# Results (2026-12-05, this VM): docs/output-streaming.md §C2; per token ~33 us and per chunk ~49 us
# (completions, whole process, after removing ~11 ms/s of /metrics polling and idle wakeups; the
# two-term fit: with a per-step term, §C6, ~14 us a token, ~45 us a chunk and ~0.45 ms a step).
# EXTRA_ARGS: more `vllm serve` arguments (e.g. --disable-log-stats).
# Writes under $LIVE_DIR and $OUT (default /tmp/api-chunk-split) only.
set -euo pipefail
BIN=${1:-target/release/servesim}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
LIVE_DIR=${LIVE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/servesim-live}
OUT=${OUT:-/tmp/api-chunk-split}
PORT=${PORT:-8012}
KS=${KS:-"1 4 16"}
CONC=${CONC:-32}
N=${N:-64}
SHORT=${SHORT:-16}
LONG=${LONG:-272}
ROUNDS=${ROUNDS:-2}
ENDPOINTS=${ENDPOINTS:-/v1/completions}
HIGHC=${HIGHC:-"128 256"}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TICK=$(getconf CLK_TCK)
SERVER=
stop() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true; SERVER=; }
trap stop EXIT
cpu_proc() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }
cpu_main() { awk '{print $14 + $15}' "/proc/$SERVER/task/$SERVER/stat"; }
bench() { # endpoint output_len conc tag
  local n=$(( $3 > N ? $3 : N ))
  "$BIN" bench --base-url "http://127.0.0.1:$PORT" --endpoint "$1" --tokenizer "$LIVE_DIR/models/tiny-llama" \
    --dataset-name random --random-input-len 64 --random-output-len "$2" --random-range-ratio 0 \
    --num-prompts "$n" --max-concurrency "$3" --ignore-eos --no-initial-test --seed 1 --json \
    --save-result --result-dir "$OUT" --result-filename "$4.json" > "$OUT/$4.out"
}
chunks() { # result json -> total chunks received (sum over requests of len(itls)+1)
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sum(len(x)+1 for x in d["itls"]))' "$1"
}
echo "k,endpoint,conc,round,out_short,out_long,proc_short_s,proc_long_s,main_short_s,main_long_s,chunks_short,chunks_long,tokens_short,tokens_long" > "$OUT/runs.csv"
for k in $KS; do
  maxc=$CONC; for c in $HIGHC; do [ "$c" -gt "$maxc" ] && maxc=$c; done
  PORT=$PORT MAX_NUM_SEQS=$maxc bash "$HERE/scripts/live/serve_vllm.sh" --stream-interval "$k" ${EXTRA_ARGS:-} > "$OUT/server-k$k.log" 2>&1 &
  SERVER=$!
  for i in $(seq 1 150); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 2; done
  curl -sf "http://127.0.0.1:$PORT/health" > /dev/null || { echo "server did not start: $OUT/server-k$k.log"; exit 1; }
  for ep in $ENDPOINTS; do
    e=$(basename "$ep")
    bench "$ep" "$SHORT" "$CONC" "warm-k$k-$e"
    concs=$CONC; [ "$k" = 1 ] && concs="$CONC $HIGHC"
    for c in $concs; do
      for r in $(seq 1 "$ROUNDS"); do
        a=$(cpu_proc); am=$(cpu_main); bench "$ep" "$SHORT" "$c" "k$k-$e-c$c-r$r-short"; b=$(cpu_proc); bm=$(cpu_main)
        x=$(cpu_proc); xm=$(cpu_main); bench "$ep" "$LONG" "$c" "k$k-$e-c$c-r$r-long"; y=$(cpu_proc); ym=$(cpu_main)
        cs=$(chunks "$OUT/k$k-$e-c$c-r$r-short.json"); cl=$(chunks "$OUT/k$k-$e-c$c-r$r-long.json")
        echo "$k,$ep,$c,$r,$SHORT,$LONG,$(echo "($b-$a)/$TICK" | bc -l),$(echo "($y-$x)/$TICK" | bc -l),$(echo "($bm-$am)/$TICK" | bc -l),$(echo "($ym-$xm)/$TICK" | bc -l),$cs,$cl,$(( (c > N ? c : N) * SHORT)),$(( (c > N ? c : N) * LONG))" | tee -a "$OUT/runs.csv"
      done
    done
  done
  stop
done
