#!/usr/bin/env python3
"""Fits the API server's streaming CPU cost to a per-token and a per-chunk part.

Input: the runs.csv of validation/front_end/api_chunk_split.sh (one row per short/long pair).
For each row, d_cpu = cpu(long) - cpu(short), d_tok = tokens(long) - tokens(short) and
d_chunk = chunks(long) - chunks(short) (chunks counted by the client). Least squares without an
intercept, per endpoint and CPU clock (whole `vllm serve` process; its main thread):

    d_cpu = a * d_tok + b * d_chunk

a: microseconds per output token (paid whether or not merged), b: per SSE chunk. A second fit
adds a per-engine-step term s * d_steps, with d_steps estimated as (N / c) * (LONG - SHORT) (closed
loop, equal lengths, ignore_eos: N/c waves of LONG steps each; prefill steps cancel). Rows can be
restricted by concurrency (--conc) so that the fit rests on the stream-interval runs only and the
merging runs can be predicted from it (printed as predicted vs measured).

  python3 validation/front_end/api_chunk_split_fit.py /tmp/api-chunk-split/runs.csv [--conc 32] \
      [--bg-ms-per-s 11]

--bg-ms-per-s: background API CPU per second of run time to subtract first (servesim bench's
/metrics poll every 500 ms plus idle wakeups; api_merge_probe.sh measures both: 4.5 ms a scrape and
2 ms/s idle on this VM, so 11); the run durations come from the `.out` reports next to runs.csv.
"""
import argparse
import csv
import math

p = argparse.ArgumentParser()
p.add_argument("runs")
p.add_argument("--conc", type=int, default=None, help="fit on rows of this concurrency only")
p.add_argument("--bg-ms-per-s", type=float, default=0.0)
a = p.parse_args()
rows = list(csv.DictReader(open(a.runs)))
import json, os
d = os.path.dirname(os.path.abspath(a.runs))
for r in rows:
    tag = f"k{r['k']}-{os.path.basename(r['endpoint'])}-c{r['conc']}-r{r['round']}"
    durs = [json.load(open(os.path.join(d, f"{tag}-{x}.out")))["duration"] for x in ("short", "long")]
    bg = a.bg_ms_per_s / 1e3
    for clock in ("proc", "main"):
        r[f"{clock}_short_s"] = str(float(r[f"{clock}_short_s"]) - bg * durs[0])
        r[f"{clock}_long_s"] = str(float(r[f"{clock}_long_s"]) - bg * durs[1])


def fit(rs, clock):
    # normal equations for y = a x1 + b x2
    s11 = s12 = s22 = s1y = s2y = 0.0
    pts = []
    for r in rs:
        x1 = float(r["tokens_long"]) - float(r["tokens_short"])
        x2 = float(r["chunks_long"]) - float(r["chunks_short"])
        y = 1e6 * (float(r[f"{clock}_long_s"]) - float(r[f"{clock}_short_s"]))
        pts.append((x1, x2, y, r))
        s11 += x1 * x1; s12 += x1 * x2; s22 += x2 * x2; s1y += x1 * y; s2y += x2 * y
    det = s11 * s22 - s12 * s12
    if abs(det) < 1e-9 * max(s11 * s22, 1.0):
        return None
    ca = (s1y * s22 - s2y * s12) / det
    cb = (s2y * s11 - s1y * s12) / det
    res = [y - ca * x1 - cb * x2 for x1, x2, y, _ in pts]
    rms = math.sqrt(sum(e * e for e in res) / max(len(res) - 2, 1))
    return ca, cb, rms, pts


def steps(r):
    n = float(r["tokens_long"]) / float(r["out_long"])
    return math.ceil(n / float(r["conc"])) * (float(r["out_long"]) - float(r["out_short"]))


def fit3(rs, clock):
    # y = a x1 + b x2 + s x3, normal equations solved by Cramer's rule
    X = []
    for r in rs:
        x1 = float(r["tokens_long"]) - float(r["tokens_short"])
        x2 = float(r["chunks_long"]) - float(r["chunks_short"])
        y = 1e6 * (float(r[f"{clock}_long_s"]) - float(r[f"{clock}_short_s"]))
        X.append((x1, x2, steps(r), y))
    m = [[sum(u[i] * u[j] for u in X) for j in range(3)] for i in range(3)]
    v = [sum(u[i] * u[3] for u in X) for i in range(3)]

    def det(q):
        return (q[0][0] * (q[1][1] * q[2][2] - q[1][2] * q[2][1])
                - q[0][1] * (q[1][0] * q[2][2] - q[1][2] * q[2][0])
                + q[0][2] * (q[1][0] * q[2][1] - q[1][1] * q[2][0]))
    d = det(m)
    if abs(d) < 1e-12:
        return None
    sol = []
    for k in range(3):
        q = [row[:] for row in m]
        for i in range(3):
            q[i][k] = v[i]
        sol.append(det(q) / d)
    res = [u[3] - sum(sol[i] * u[i] for i in range(3)) for u in X]
    return sol, math.sqrt(sum(e * e for e in res) / max(len(res) - 3, 1))


for ep in sorted({r["endpoint"] for r in rows}):
    for clock in ("proc", "main"):
        f3 = fit3([r for r in rows if r["endpoint"] == ep], clock)
        if f3:
            (ca, cb, cs), rms = f3
            print(f"{ep} clock={clock} 3-term (all rows): per token {ca:.1f} us, per chunk {cb:.1f} us,"
                  f" per step {cs:.0f} us (residual rms {rms / 1e3:.1f} ms)")
for ep in sorted({r["endpoint"] for r in rows}):
    for clock in ("proc", "main"):
        rs = [r for r in rows if r["endpoint"] == ep]
        train = [r for r in rs if a.conc is None or int(r["conc"]) == a.conc]
        f = fit(train, clock)
        if f is None:
            print(f"{ep} {clock}: degenerate (tokens and chunks collinear)")
            continue
        ca, cb, rms, _ = f
        print(f"{ep} clock={clock}: per token {ca:.1f} us, per chunk {cb:.1f} us "
              f"(rows {len(train)}, residual rms {rms / 1e3:.1f} ms)")
        for r in rs:
            x1 = float(r["tokens_long"]) - float(r["tokens_short"])
            x2 = float(r["chunks_long"]) - float(r["chunks_short"])
            y = 1e6 * (float(r[f"{clock}_long_s"]) - float(r[f"{clock}_short_s"]))
            print(f"   k={r['k']:>2} c={r['conc']:>3} r={r['round']} tokens/chunk={x1 / x2:5.2f} "
                  f"us/token measured {y / x1:6.1f} fitted {(ca * x1 + cb * x2) / x1:6.1f}"
                  f"{'' if r in train else '  (not in fit)'}")
