"""Python port of the parts of aiconfigurator's perf-table resolver that the
extractor needs (aiconfigurator-core 0.12.0, Apache-2.0, NVIDIA).

The wheel only ships the compiled engine. The logic below follows the Rust
sources of the same project (github.com/ai-dynamo/aiconfigurator,
aic-core/rust/aiconfigurator-core/src/perf_database/{perf_interp,gemm,
attention}.rs): speed-of-light (SOL) rooflines, the GEMM "scattered sites"
resolver (an (n, k) shape that was not measured borrows the achieved
utilisation SOL/latency of up to 4 measured neighbour shapes), and the
one-sided bracket correction of the attention grids.

All latencies are milliseconds, all rates are the system YAML's
(FLOP/s, byte/s).
"""

from __future__ import annotations

import math
from bisect import bisect_left

# Bytes per element of the operands, per GEMM dtype (aiconfigurator
# GEMMQuantMode.memory) and the tensor-core rate each dtype runs at.
GEMM_DTYPES = {
    "bfloat16": {"bytes": 2.0, "flops_key": "bfloat16_tc_flops"},
    "fp8": {"bytes": 1.0, "flops_key": "fp8_tc_flops"},
}
KV_BYTES = {"bfloat16": 2.0, "fp8": 1.0}

# GEMM resolver constants (gemm.rs::gemm_engine_config).
NN_SITES = 4
MAX_SITE_DISTANCE = 2.0  # log2 units in the joint (n, k) space
K_TAIL = 3


def gemm_sol_ms(spec: dict, dtype: str, m: float, n: float, k: float) -> float:
    """max(compute, memory) roofline of one GEMM, ms (gemm.rs::gemm_sol_with_flops)."""
    gpu = spec["gpu"]
    flops = float(gpu[GEMM_DTYPES[dtype]["flops_key"]])
    math_ms = 2.0 * m * n * k / flops * 1000.0
    mem_ms = GEMM_DTYPES[dtype]["bytes"] * (m * n + m * k + n * k) / float(gpu["mem_bw"]) * 1000.0
    return max(math_ms, mem_ms)


def context_attn_sol_ms(spec, kv_dtype, n_kv_lookup, head_dim, n, s, b, attn_dtype="bfloat16"):
    """Causal prefill attention roofline at prefix 0 (attention.rs::context_attention_sol)."""
    gpu = spec["gpu"]
    h = float(head_dim)
    n_kv = n if n_kv_lookup == 0 else float(n_kv_lookup)
    ops = 2.0 * b * (s * s) * n * h * 2.0 / 2.0
    mem = 2.0 * b * (n * s * h + n * s * h) + KV_BYTES[kv_dtype] * b * (2.0 * n_kv * s * h)
    flops = float(gpu["fp8_tc_flops"] if attn_dtype == "fp8" and "fp8_tc_flops" in gpu else gpu["bfloat16_tc_flops"])
    return max(ops / flops * 1000.0, mem / float(gpu["mem_bw"]) * 1000.0)


def generation_attn_sol_ms(spec, kv_dtype, n_kv_lookup, head_dim, n, b, s):
    """Decode attention roofline, s = context length incl. the new token
    (attention.rs::generation_attention_sol)."""
    gpu = spec["gpu"]
    n_kv = n if n_kv_lookup == 0 else float(n_kv_lookup)
    kv_len = s - 1.0
    h = float(head_dim)
    ops = 2.0 * b * n * h * 2.0 * kv_len
    mem = b * (n * h * 2.0 + 2.0 * n_kv * kv_len * h * KV_BYTES[kv_dtype] + n * h * 2.0)
    flops_key = "fp8_tc_flops" if kv_dtype == "fp8" and "fp8_tc_flops" in gpu else "bfloat16_tc_flops"
    return max(ops / float(gpu[flops_key]) * 1000.0, mem / float(gpu["mem_bw"]) * 1000.0)


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2.0


class GemmSites:
    """One GEMM dtype table: (n, k) site -> sorted [(m, latency_ms)].

    `order` is the first-encounter order of the sites in the parquet rows;
    aiconfigurator breaks exact distance ties by it.
    """

    def __init__(self, rows, spec, dtype):
        self.spec = spec
        self.dtype = dtype
        self.sites: dict[tuple[int, int], dict[int, float]] = {}
        self.order: list[tuple[int, int]] = []
        self.clamped = 0
        for m, n, k, lat in rows:
            key = (n, k)
            if key not in self.sites:
                self.sites[key] = {}
                self.order.append(key)
            curve = self.sites[key]
            if m in curve:  # first row wins, like the loader
                continue
            sol = gemm_sol_ms(spec, dtype, m, n, k)
            if sol > lat:  # load-time SOL clamp (gemm.rs::clamp_gemm_grids_to_sol)
                lat = sol
                self.clamped += 1
            curve[m] = lat
        self.curves = {key: sorted(c.items()) for key, c in self.sites.items()}
        self.logs = {key: (math.log2(max(key[0], 1e-12)), math.log2(max(key[1], 1e-12))) for key in self.order}

    def m_grid(self):
        return sorted({m for c in self.curves.values() for m, _ in c})

    def eval_curve(self, key, q):
        curve = self.curves[key]
        ms = [m for m, _ in curve]
        i = bisect_left(ms, q)
        if i < len(ms) and ms[i] == q:
            return curve[i][1]
        n, k = key
        if q < ms[0] or q > ms[-1] or len(ms) < 2:
            tail = curve[:K_TAIL] if q < ms[0] else curve[-K_TAIL:]
            utils = [gemm_sol_ms(self.spec, self.dtype, m, n, k) / lat for m, lat in tail if lat > 0]
            return gemm_sol_ms(self.spec, self.dtype, q, n, k) / _median(utils)
        (m0, l0), (m1, l1) = curve[i - 1], curve[i]
        return l0 + (l1 - l0) * (q - m0) / (m1 - m0)

    def resolve(self, m, n, k):
        """(latency_ms, method, neighbour sites) for one query."""
        key = (n, k)
        if key in self.curves:
            ms = [x for x, _ in self.curves[key]]
            method = "measured" if m in ms else ("interp_m" if ms[0] <= m <= ms[-1] else "util_hold_m")
            return self.eval_curve(key, m), method, []
        qn, qk = math.log2(n), math.log2(k)
        ranked = []
        for idx, site in enumerate(self.order):
            ms = self.curves[site]
            if ms[0][0] <= m <= ms[-1][0]:
                ln, lk = self.logs[site]
                ranked.append((math.hypot(ln - qn, lk - qk), idx, site))
        if not ranked:
            for idx, site in enumerate(self.order):
                ln, lk = self.logs[site]
                ranked.append((math.hypot(ln - qn, lk - qk), idx, site))
        gated = [r for r in ranked if r[0] <= MAX_SITE_DISTANCE]
        if not gated:
            gated = self._frontier_waiver(ranked, (n, k), (qn, qk))
            if not gated:
                return None, "miss", []
        gated.sort(key=lambda r: (r[0], r[1]))
        chosen = gated[:NN_SITES]
        wsum = uacc = 0.0
        used = []
        for d, _, site in chosen:
            lat = self.eval_curve(site, m)
            sol = gemm_sol_ms(self.spec, self.dtype, m, site[0], site[1])
            if not (lat > 0 and sol > 0):
                continue
            w = 1.0 / (d * d + 1e-12)
            uacc += w * sol / lat
            wsum += w
            used.append(site)
        if wsum <= 0:
            return None, "miss", []
        return gemm_sol_ms(self.spec, self.dtype, m, n, k) / (uacc / wsum), "site_transfer", used

    def _frontier_waiver(self, ranked, q_site, q_log):
        """Scale-up beyond the collected frontier along exactly one axis
        (perf_interp.rs::frontier_waiver_anchors)."""
        overflow = []
        for a in range(2):
            vals = [r[2][a] for r in ranked]
            if q_site[a] < min(vals):
                return []
            if q_site[a] > max(vals):
                overflow.append(a)
        if len(overflow) != 1:
            return []
        keep = [a for a in range(2) if a not in overflow]
        out = []
        for r in ranked:
            resid = math.sqrt(sum((self.logs[r[2]][a] - q_log[a]) ** 2 for a in keep))
            if resid <= MAX_SITE_DISTANCE:
                out.append(r)
        return out
