#!/usr/bin/env bash
# The live end-to-end check, against the real engines on this machine's CPUs
# (see README "Live check"): installs vLLM and SGLang (cached in $LIVE_DIR),
# makes a tiny random model, starts each engine with a small KV pool so that
# a sweep passes the KV-limited concurrency, calibrates servesim on probes,
# and checks a sweep measured against predicted.
#
# Outputs go OUTSIDE the repository: $OUT, by default
# ${SERVESIM_RUNS:-$HOME/servesim-runs}/live-<UTC stamp> (profiles, check reports, per-request
# results, server logs: tens of MB a run). The venvs and the model go to $LIVE_DIR
# (default ~/.cache/servesim-live). The source tree keeps what judges a run, not the run: to add one
# to validation/, copy its *-check.json, *-profile.json, *-calibrate.txt and summary.txt, and list the
# rest in a SHA256SUMS file (see validation/README.md).
# CPU: vLLM needs AVX2 (uses AVX-512 / AVX-512 BF16 / AMX when present); SGLang nothing beyond
# x86-64. Checked against /proc/cpuinfo first (cpu_features.sh); LIVE_SKIP_CPU_CHECK=1 to go on anyway.
#
#   bash scripts/live/check_live.sh            # both engines
#   ENGINES=vllm bash scripts/live/check_live.sh
#   REPEAT=3 bash scripts/live/check_live.sh   # run the probe plan and each check point 3 times (default 2)
#   WARMUP_S=60 bash scripts/live/check_live.sh  # seconds of load before calibrating (default 180)
#   OUT=/tmp/run1 bash scripts/live/check_live.sh  # results somewhere else
#
# Bounded: every wait has a limit; the servers are stopped on exit.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export LIVE_DIR=${LIVE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/servesim-live}
OUT=${OUT:-${SERVESIM_RUNS:-$HOME/servesim-runs}/live-$(date -u +%Y%m%d-%H%M%S)}
ENGINES=${ENGINES:-"vllm sglang serve"}
. "$HERE/cpu_features.sh"
for e in $ENGINES; do
  case $e in
    vllm|serve) live_cpu_check vllm ;;   # serve: `vllm bench serve` is the client
    sglang) live_cpu_check sglang ;;
    *) echo "unknown engine '$e' in ENGINES (vllm, sglang, serve)" >&2; exit 2 ;;
  esac
done
mkdir -p "$LIVE_DIR/logs" "$OUT"
echo "Results go to $OUT"

for e in $ENGINES; do
  case $e in
    vllm|sglang) [ -x "$LIVE_DIR/venv-$e/bin/python" ] || bash "$HERE/setup_$e.sh" ;;
    serve) [ -x "$LIVE_DIR/venv-vllm/bin/python" ] || bash "$HERE/setup_vllm.sh" ;;
  esac
done
[ -f "$LIVE_DIR/models/tiny-llama/config.json" ] || "$LIVE_DIR/venv-vllm/bin/python" "$HERE/make_model.py" 2>/dev/null || "$LIVE_DIR/venv-sglang/bin/python" "$HERE/make_model.py"
(cd "$ROOT" && cargo build --release --locked)
SERVESIM="$ROOT/target/release/servesim"
# How steady the host itself is, first (see host_speed.py).
PY_ANY="$LIVE_DIR/venv-vllm/bin/python"; [ -x "$PY_ANY" ] || PY_ANY="$LIVE_DIR/venv-sglang/bin/python"
"$PY_ANY" "$HERE/host_speed.py" "${HOST_SPEED_S:-30}" | tee -a "$OUT/summary.txt" || true

PID=""
stop() { if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; PID=""; fi; }
trap stop EXIT

wait_health() {
  local url=$1
  for _ in $(seq 1 240); do
    if curl -sf "$url/health" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$PID" 2>/dev/null; then echo "the server exited; see its log" >&2; return 1; fi
    sleep 1
  done
  echo "the server did not become healthy in 240 s" >&2
  return 1
}

# The check's workload: 256-token prompts, 64 output tokens, past the KV-limited concurrency.
WORKLOAD=(--random-input-len 256 --random-output-len 64 --ignore-eos --concurrency 1,2,4,8,16 --num-prompts-per-point 8,12,16,32,48)

for e in $ENGINES; do
  if [ "$e" = serve ]; then
    # A real third-party client, vLLM's own `vllm bench serve`, against `servesim serve`,
    # compared with `servesim simulate` of the same scenario and workload.
    PORT=8012
    "$SERVESIM" serve "$ROOT/scenarios/serve-small-vllm.json" --port $PORT --model tiny-llama \
      --tokenizer "$LIVE_DIR/models/tiny-llama" --max-lifetime 600 2> "$OUT/serve.log" &
    PID=$!
    wait_health "http://127.0.0.1:$PORT"
    VLLM_TARGET_DEVICE=cpu "$LIVE_DIR/venv-vllm/bin/vllm" bench serve --backend openai --base-url "http://127.0.0.1:$PORT" \
      --endpoint /v1/completions --model tiny-llama --tokenizer "$LIVE_DIR/models/tiny-llama" --dataset-name random \
      --random-input-len 256 --random-output-len 32 --num-prompts 40 --max-concurrency 8 --ignore-eos \
      --percentile-metrics ttft,tpot,itl,e2el --save-result --result-dir "$OUT/serve" --result-filename vllm-bench-serve.json > "$OUT/serve-vllm-bench.txt" 2>&1
    "$SERVESIM" simulate "$ROOT/scenarios/serve-small-vllm.json" --json > "$OUT/serve-simulate.json"
    python3 - "$OUT/serve/vllm-bench-serve.json" "$OUT/serve-simulate.json" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
m, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print("vllm bench serve against servesim serve, measured / simulated:")
for k in ["output_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms"]:
    print(f"  {k:<20} {m[k]:10.2f} {p[k]:10.2f}  {100*(p[k]-m[k])/m[k]:+5.1f}%")
PY
    stop
    continue
  fi
  case $e in
    vllm)
      PORT=8011
      # 20 blocks of 128 tokens: 2,432 usable KV tokens, 6 requests of 320 tokens.
      PORT=$PORT KV_GIB=1 bash "$HERE/serve_vllm.sh" --num-gpu-blocks-override 20 --enable-logging-iteration-details > "$OUT/vllm_server.log" 2>&1 &
      PID=$!
      LOGARGS=(--server-log "$OUT/vllm_server.log")
      ;;
    sglang)
      PORT=30011
      # 4,096 KV tokens, 16 running requests at most.
      PORT=$PORT MAX_RUNNING=16 MAX_TOTAL_TOKENS=4096 bash "$HERE/serve_sglang.sh" > "$OUT/sglang_server.log" 2>&1 &
      PID=$!
      LOGARGS=()
      ;;
  esac
  wait_health "http://127.0.0.1:$PORT"
  "$SERVESIM" calibrate --base-url "http://127.0.0.1:$PORT" --engine "$e" "${LOGARGS[@]}" \
    --repeat "${REPEAT:-2}" --warmup-s "${WARMUP_S:-180}" --out "$OUT/$e-profile.json" --result-dir "$OUT/$e-calibrate" | tee "$OUT/$e-calibrate.txt"
  set +e
  "$SERVESIM" check --base-url "http://127.0.0.1:$PORT" --engine "$e" "${LOGARGS[@]}" --profile "$OUT/$e-profile.json" \
    "${WORKLOAD[@]}" --repeat "${REPEAT:-2}" --result-dir "$OUT/$e-check" --json > "$OUT/$e-check.json"
  echo "$e check exit status: $?" | tee -a "$OUT/summary.txt"
  set -e
  python3 - "$OUT/$e-check.json" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['engine']} {r['engine_version']}: knee measured {r['knee']['measured']}, predicted {r['knee']['predicted']}")
for k, v in r["verdict"]["per_metric"].items():
    if v["median_abs_error"] is not None:
        t = v["target"]
        print(f"  {k:<22} median |error| {100*v['median_abs_error']:5.1f}%" + (f"  (target {100*t:.0f}%: {'ok' if v['ok'] else 'missed'})" if t else ""))
c = r["verdict"].get("interval_coverage")
if c and c.get("fraction") is not None:
    print(f"  inside the 90% interval: {c['inside']}/{c['values']} ({100*c['fraction']:.0f}%; target {100*c['target']:.0f}%)")
print("  overall:", "PASS" if r["verdict"]["pass"] else "FAIL")
PY
  stop
done
echo "Results in $OUT"
