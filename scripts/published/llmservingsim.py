#!/usr/bin/env python3
"""Derive servesim's replay and the published summary of LLMServingSim's vLLM runs.

LLMServingSim (github.com/casys-kaist/LLMServingSim, Apache-2.0) commits, per bundle
`bench/examples/<GPU>/<model>/vllm/`, the per-request timings of one real vLLM run:
`requests.jsonl` (vLLM's own RequestStateStats: `queued_ts`, `first_token_ts`,
`last_token_ts`, engine-core monotonic seconds) and `meta.json` (the engine's flags), driven
by the ShareGPT workload `workloads/sharegpt-<model>-300-sps10.jsonl` (token ids, lengths,
arrival offsets). The runner (`bench/core/runner.py`) builds `vllm.v1.engine.async_llm.AsyncLLM`
in-process (no HTTP server, no tokenizer: `TokensPrompt` of the ids) and sends each request
at its arrival offset with `min_tokens = max_tokens = output_toks`, `ignore_eos`.

This script reads one bundle and its workload from a checkout of that repository and writes:

* the trace servesim replays (`arrival_time,input_len,output_len,prefix_group,prefix_len`):
  each request at its `queued_ts` (the engine's queue, the measurements' anchor) from the
  first request's; its lengths; the prompts that begin with an earlier prompt (ShareGPT
  multi-turn sessions: 32 of 300) as one prefix group per session, `prefix_len` such that two
  prompts of a group share `min(prefix_len)` tokens, which is checked against the true longest
  common prefix of every pair at vLLM's block granularity (16 tokens);
* one summary row in the published-CSV format (`data/published/README.md`): TTFT =
  first_token_ts - queued_ts, TPOT = (last_token_ts - first_token_ts) / (output_toks - 1),
  E2EL = last_token_ts - queued_ts (LLMServingSim's own `bench/core/validate.py`, which falls
  back to `queued_ts` because `arrival_time` is in another clock), means and numpy-linear
  percentiles (p50, p90, p99) over the 300 requests, and the throughputs over the run (first
  queue entry to last token).

    python3 scripts/published/llmservingsim.py CHECKOUT BUNDLE WORKLOAD TRACE_OUT ENGINE_LABEL [LOAD_KIND LOAD]

e.g. `... /path/LLMServingSim bench/examples/RTXPRO6000/Llama-3.1-8B
workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl validation/published/x.trace.csv vllm-0.19.0`;
the CSV row goes to stdout with the raw files' sha256 on stderr. LOAD_KIND and LOAD fill the
row's `load_kind` and `concurrency_or_rate` (default `trace`); the committed rows were written
with `'poisson_trace(10 req/s offered)' 10`.
"""
import hashlib, json, statistics, sys
from pathlib import Path

BLOCK = 16


def pct(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def lcp(a, b):
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def main():
    root, bundle, workload, trace_out, label = sys.argv[1:6]
    load_kind, load = (sys.argv[6], sys.argv[7]) if len(sys.argv) > 7 else ("trace", "trace")
    root = Path(root)
    req_path = root / bundle / "vllm" / "requests.jsonl"
    wl_path = root / workload
    for p in (req_path, wl_path, root / bundle / "vllm" / "meta.json"):
        print(f"sha256 {hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(root)}", file=sys.stderr)
    req_sha = hashlib.sha256(req_path.read_bytes()).hexdigest()
    R = [json.loads(l) for l in open(req_path)]
    W = [json.loads(l) for l in open(wl_path)]
    if len(R) != len(W):
        sys.exit(f"{req_path}: {len(R)} requests against {len(W)} workload rows")
    for i, (r, w) in enumerate(zip(R, W)):
        if r["request_id"] != f"bench-{i}" or r["input_toks"] != len(w["input_tok_ids"]) or r["output_toks"] != w["output_toks"]:
            sys.exit(f"{req_path}: row {i} does not match {wl_path}'s row {i}")
    ids = [w["input_tok_ids"] for w in W]
    n = len(ids)
    # Each prompt's parent: the earlier prompt it shares the longest prefix with (a block at least).
    parent, shared = [None] * n, [0] * n
    for i in range(n):
        best, bj = 0, None
        for j in range(i):
            l = lcp(ids[i], ids[j])
            if l > best:
                best, bj = l, j
        if best >= BLOCK:
            parent[i], shared[i] = bj, best
    group = list(range(n))
    for i in range(n):
        if parent[i] is not None:
            group[i] = group[parent[i]]
    plen = shared[:]
    for i in range(n):
        if parent[i] is not None:
            plen[parent[i]] = max(plen[parent[i]], shared[i])
    # The replay's sharing, min(plen) within a group, against the truth, in whole blocks.
    members = {}
    for i in range(n):
        if plen[i] > 0:
            members.setdefault(group[i], []).append(i)
    for g, ms in members.items():
        for a in ms:
            for b in ms:
                if a < b:
                    want = lcp(ids[a], ids[b]) // BLOCK
                    got = min(plen[a], plen[b]) // BLOCK
                    if want != got:
                        sys.exit(f"prefix groups cannot express prompts {a} and {b}: {got} blocks against {want}")
    q0 = min(r["queued_ts"] for r in R)
    gid = {g: k for k, g in enumerate(sorted(members))}
    with open(trace_out, "w") as f:
        f.write(f"# LLMServingSim {bundle} (vLLM's own per-request stats, requests.jsonl sha256 {req_sha[:16]}...) and {workload}: each request at its\n"
                f"# queued_ts from the first's, its lengths, ShareGPT sessions' shared prompt starts as prefix groups\n"
                f"# ({len([i for i in range(n) if parent[i] is not None])} prompts begin with an earlier one). "
                f"Written by scripts/published/llmservingsim.py.\n")
        f.write("arrival_time,input_len,output_len,prefix_group,prefix_len\n")
        for i, r in enumerate(R):
            g = f"{gid[group[i]]},{plen[i]}" if plen[i] > 0 else ","
            f.write(f"{r['queued_ts'] - q0:.6f},{r['input_toks']},{r['output_toks']},{g}\n")
    ttft = [(r["first_token_ts"] - r["queued_ts"]) * 1e3 for r in R]
    tpot = [(r["last_token_ts"] - r["first_token_ts"]) / max(1, r["output_toks"] - 1) * 1e3 for r in R]
    e2el = [(r["last_token_ts"] - r["queued_ts"]) * 1e3 for r in R]
    dur = max(r["last_token_ts"] for r in R) - q0
    tin = sum(r["input_toks"] for r in R)
    tout = sum(r["output_toks"] for r in R)
    f3 = lambda x: f"{x:.3f}"
    row = [label, load_kind, load, str(n), "sharegpt", "trace", f3(dur), str(n), str(tin), str(tout), f3(n / dur),
           f3(tout / dur), f3((tin + tout) / dur)]
    for xs in (ttft, tpot):
        row += [f3(statistics.mean(xs)), f3(pct(xs, 50)), f3(pct(xs, 99))]
    row += ["", "", ""]  # ITL: not recorded per token
    row += [f3(statistics.mean(e2el)), f3(pct(e2el, 50)), f3(pct(e2el, 99))]
    row.append(f"p90 TTFT {pct(ttft, 90):.3f}; p90 TPOT {pct(tpot, 90):.3f}; p90 E2EL {pct(e2el, 90):.3f}")
    print(",".join(row))


if __name__ == "__main__":
    main()
