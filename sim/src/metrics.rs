//! Metrics exactly as `vllm bench serve` computes them
//! (`benchmarks/serve.py:calculate_metrics`), plus what the engine's
//! `/metrics` would show.
//!
//! * TTFT: first token received − request sent (after the concurrency slot).
//! * TPOT: `(E2EL − TTFT) / (output − 1)`, only for outputs longer than 1.
//! * ITL: every gap between consecutive tokens of a request, all requests
//!   concatenated (one chunk per token: `stream_interval` 1).
//! * E2EL: last token received − request sent.
//! * Mean, median, std (population, `np.std`) and percentiles with numpy's
//!   default linear interpolation; an empty list gives 0 (`np.mean(x or 0)`).
//! * Throughputs over the duration from the first dispatch of the timed phase
//!   to its last completion.

use crate::simulation::{RequestRecord, RunResult};

/// The percentiles every report carries ([`Stats::p50`] to [`Stats::p99`]).
pub const PERCENTILES: [f64; 4] = [50.0, 90.0, 95.0, 99.0];

/// Summary statistics of one metric, in milliseconds. A report writes them as
/// `mean_{m}_ms`, `median_{m}_ms`, `std_{m}_ms`, `p50_{m}_ms` … `p99_{m}_ms`,
/// `max_{m}_ms` (`crate::report::Metric`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    pub mean: f64,
    pub median: f64,
    pub std: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    /// The largest value (`sglang.bench_serving` reports `max_itl_ms`).
    pub max: f64,
    /// Other percentiles asked for (`--metric-percentiles`, which `vllm bench serve` takes as
    /// any list): `(p, value)`, computed as the fixed ones are ([`bench_metrics_at`]). Empty
    /// unless asked; not a report key (the documented keys are the fixed ones).
    pub extra: Vec<(f64, f64)>,
}

/// numpy's `_lerp`, including its switch for `t ≥ 0.5`, so results match to the bit.
fn lerp(a: f64, b: f64, t: f64) -> f64 {
    let d = b - a;
    if t >= 0.5 {
        b - d * (1.0 - t)
    } else {
        a + d * t
    }
}

/// `np.percentile(sorted, p)` with linear interpolation (only the two ranks
/// around `p` need to be in sorted position).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let pos = p / 100.0 * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    lerp(sorted[lo], sorted[hi], pos - lo as f64)
}

/// Every rank the median and the percentiles of `n > 0` values read, sorted and distinct.
fn stat_ranks(n: usize, extra: &[f64]) -> Vec<usize> {
    let mut ranks = vec![(n - 1) / 2, n / 2];
    for &p in PERCENTILES.iter().chain(extra) {
        let pos = p / 100.0 * (n - 1) as f64;
        ranks.push(pos.floor() as usize);
        ranks.push((pos.floor() as usize + 1).min(n - 1));
    }
    ranks.sort_unstable();
    ranks.dedup();
    ranks
}

/// Puts the order statistics at the (sorted, distinct) `ranks` in place, as
/// a full sort would, in O(n) per rank instead of sorting everything.
fn select_ranks(values: &mut [f64], ranks: &[usize]) {
    let mut lo = 0;
    for &r in ranks {
        if r < lo || r >= values.len() {
            continue;
        }
        values[lo..].select_nth_unstable_by(r - lo, |a, b| a.total_cmp(b));
        lo = r + 1;
    }
}

/// [`select_ranks`] for integers.
fn select_ranks_int<T: Ord>(values: &mut [T], ranks: &[usize]) {
    let mut lo = 0;
    for &r in ranks {
        if r < lo || r >= values.len() {
            continue;
        }
        values[lo..].select_nth_unstable(r - lo);
        lo = r + 1;
    }
}

/// The order statistics of `values` at `ranks` (sorted, distinct, each below `values.len()`),
/// given `high`, the count of values by their high 16 bits: the values a full sort would
/// put at those ranks, in the order of `ranks`. `high` names the high half of each rank's
/// value and its rank among the values sharing it; the values of those few high halves are
/// gathered, and each such group is resolved exactly, by selection if it is small, else by
/// a count of its low halves. Linear in `values`, without moving them. `values` may also
/// hold `u32::MAX` placeholders that `high` does not count (none of them a genuine value):
/// they sort after every counted value, so no rank below the count reaches them.
fn order_statistics_u32(values: &[u32], high: &[u32], ranks: &[usize]) -> Vec<u32> {
    debug_assert_eq!(high.len(), 1 << 16);
    let mut out = vec![0u32; ranks.len()];
    // Each rank's group (a high half holding it) and its rank within the group.
    let mut groups: Vec<usize> = Vec::with_capacity(ranks.len());
    let mut rank_in: Vec<(usize, usize)> = Vec::with_capacity(ranks.len()); // (group, rank within)
    let (mut h, mut below) = (0usize, 0usize);
    for &r in ranks {
        while below + high[h] as usize <= r {
            below += high[h] as usize;
            h += 1;
        }
        if groups.last() != Some(&h) {
            groups.push(h);
        }
        rank_in.push((groups.len() - 1, r - below));
    }
    // Gather each group's values (`slot`: high half → its group, 1-based).
    let mut slot: Box<[u32; 1 << 16]> = vec![0u32; 1 << 16].into_boxed_slice().try_into().expect("2^16 slots");
    for (k, &g) in groups.iter().enumerate() {
        slot[g] = k as u32 + 1;
    }
    let mut gathered: Vec<Vec<u32>> = groups.iter().map(|&g| Vec::with_capacity(high[g] as usize)).collect();
    for &v in values {
        let k = slot[(v >> 16) as usize];
        if k != 0 {
            gathered[k as usize - 1].push(v);
        }
    }
    let mut low: Vec<u32> = Vec::new();
    for (k, vals) in gathered.iter_mut().enumerate() {
        let base = (groups[k] as u32) << 16;
        let mut want = rank_in.iter().enumerate().filter(|(_, &(g, _))| g == k).map(|(i, &(_, w))| (i, w));
        if vals.len() < 1 << 13 {
            let mut from = 0;
            for (i, w) in want {
                vals[from..].select_nth_unstable(w - from);
                out[i] = vals[w];
                from = w + 1;
            }
        } else {
            // Crowded: count the low halves.
            low.clear();
            low.resize(1 << 16, 0);
            for &v in vals.iter() {
                low[(v & 0xffff) as usize] += 1;
            }
            let (mut x, mut below) = (0usize, 0usize);
            for (i, w) in want.by_ref() {
                while below + low[x] as usize <= w {
                    below += low[x] as usize;
                    x += 1;
                }
                out[i] = base + x as u32;
            }
        }
    }
    out
}

impl Stats {
    /// Statistics of `values` (reordered in place).
    pub fn of(values: &mut [f64]) -> Stats {
        Stats::of_at(values, &[])
    }

    /// [`Stats::of`] with the percentiles `extra` (each in [0, 100]) as well.
    pub fn of_at(values: &mut [f64], extra: &[f64]) -> Stats {
        if values.is_empty() {
            return Stats::default();
        }
        let n = values.len();
        let mean = values.iter().sum::<f64>() / n as f64;
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        let ranks = stat_ranks(n, extra);
        select_ranks(values, &ranks);
        Stats::from_selected(mean, var, max, n, |i| values[i], extra)
    }

    /// The statistics of `n` values of mean `mean`, population variance `var` and maximum
    /// `max`, whose order statistic of rank `i` (for the ranks of [`stat_ranks`]) is `at(i)`.
    fn from_selected(mean: f64, var: f64, max: f64, n: usize, at: impl Fn(usize) -> f64, extra: &[f64]) -> Stats {
        let m = n / 2;
        let median = if n % 2 == 1 { at(m) } else { (at(m - 1) + at(m)) / 2.0 };
        let pct = |p: f64| {
            // `percentile` on the sorted values.
            let pos = p / 100.0 * (n - 1) as f64;
            let lo = pos.floor() as usize;
            let hi = (lo + 1).min(n - 1);
            lerp(at(lo), at(hi), pos - lo as f64)
        };
        Stats {
            mean,
            median,
            std: var.sqrt(),
            p50: pct(50.0),
            p90: pct(90.0),
            p95: pct(95.0),
            p99: pct(99.0),
            max,
            extra: extra.iter().map(|&p| (p, pct(p))).collect(),
        }
    }

    /// Statistics of the gaps between consecutive token times of every record, the records
    /// in order and each one's gaps in order, in milliseconds: exactly [`Stats::of`] the
    /// concatenated gaps (the same f64 sums in the same order), without materialising them
    /// as f64. The order statistics are selected among the integer gaps, which `ns_to_ms`
    /// maps monotonically, so they are the same values.
    fn of_token_gaps(recs: &[&RequestRecord], extra: &[f64]) -> Stats {
        let n: usize = recs.iter().map(|r| r.token_times_ns.len().saturating_sub(1)).sum();
        if n == 0 {
            return Stats::default();
        }
        // One walk over the records: the sequential sum in the concatenated order, as
        // `Stats::of` sums (its terms are never negative, so the sum's start, 0 or -0, gives
        // the same bits), the gaps as u32 counted by their high 16 bits, and the largest. A gap
        // of `u32::MAX` ns (4.3 s) or more is "long": its copy is a `u32::MAX` placeholder,
        // not counted in `high`, and its value is kept aside, in order, in `long` (c=128 and
        // KV-starved runs have some among millions). Every long gap is at least every other,
        // so the ranks past the others are the long ones' order statistics. (`f64::from` of a
        // u32 is `ns_to_ms`'s conversion of the same value.)
        let (mut sum, mut max32, mut above) = (0.0f64, 0u32, 0u64);
        let mut v: Vec<u32> = Vec::with_capacity(n);
        // The long gaps: (position in `v`, gap).
        let mut long: Vec<(usize, u64)> = Vec::new();
        // A fixed-size array: indexed by a u32's high half, with no bounds check.
        let mut high: Box<[u32; 1 << 16]> = vec![0u32; 1 << 16].into_boxed_slice().try_into().expect("2^16 counts");
        // Each record's gaps first as if none were long; the first record holding a long gap (a
        // high word, or a gap of exactly `u32::MAX`) is taken back and walked again, and from
        // it on every gap is tested (where one gap is long, others most likely are).
        let mut tested = false;
        for r in recs {
            if !tested {
                let (from, sum0, max0) = (v.len(), sum, max32);
                v.extend(r.token_times_ns.windows(2).map(|w| {
                    let g = w[1] - w[0];
                    above |= g >> 32;
                    let g32 = g as u32;
                    max32 = max32.max(g32);
                    sum += f64::from(g32) / 1e6;
                    high[(g32 >> 16) as usize] += 1;
                    g32
                }));
                if above == 0 && max32 != u32::MAX {
                    continue;
                }
                for &g in &v[from..] {
                    high[(g >> 16) as usize] -= 1;
                }
                v.truncate(from);
                (sum, max32, tested) = (sum0, max0, true);
            }
            let base = v.len();
            v.extend(r.token_times_ns.windows(2).enumerate().map(|(i, w)| {
                let g = w[1] - w[0];
                if g < u64::from(u32::MAX) {
                    let g32 = g as u32;
                    max32 = max32.max(g32);
                    sum += f64::from(g32) / 1e6;
                    high[(g32 >> 16) as usize] += 1;
                    g32
                } else {
                    sum += ns_to_ms(g);
                    long.push((base + i, g));
                    u32::MAX
                }
            }));
        }
        let max_gap = long.iter().map(|&(_, g)| g).max().unwrap_or(u64::from(max32));
        let mean = sum / n as f64;
        let max = ns_to_ms(max_gap);
        // The variance's pass over the copy, in the same order: the runs of other gaps between
        // the long ones.
        let (mut sq, mut from) = (0.0f64, 0);
        for &(at, g) in &long {
            sq = add_squared_deviations_ms(sq, &v[from..at], mean);
            let x = ns_to_ms(g);
            sq += (x - mean) * (x - mean);
            from = at + 1;
        }
        let sq = add_squared_deviations_ms(sq, &v[from..], mean);
        let var = sq / n as f64;
        let ranks = stat_ranks(n, extra);
        let short = n - long.len();
        let split = ranks.partition_point(|&r| r < short);
        let mut at: Vec<u64> = Vec::with_capacity(ranks.len());
        if split > 0 {
            at.extend(order_statistics_u32(&v, &high[..], &ranks[..split]).into_iter().map(u64::from));
        }
        if split < ranks.len() {
            let long_ranks: Vec<usize> = ranks[split..].iter().map(|&r| r - short).collect();
            let mut long: Vec<u64> = long.iter().map(|&(_, g)| g).collect();
            select_ranks_int(&mut long, &long_ranks);
            at.extend(long_ranks.iter().map(|&r| long[r]));
        }
        let value = |i: usize| at[ranks.binary_search(&i).expect("a rank of stat_ranks")];
        Stats::from_selected(mean, var, max, n, |i| ns_to_ms(value(i)), extra)
    }

    /// The value at one of [`PERCENTILES`], or at one of [`Stats::extra`]; None for another.
    pub fn at(&self, p: f64) -> Option<f64> {
        match p {
            50.0 => Some(self.p50),
            90.0 => Some(self.p90),
            95.0 => Some(self.p95),
            99.0 => Some(self.p99),
            _ => self.extra.iter().find(|(q, _)| *q == p).map(|&(_, v)| v),
        }
    }
}

/// `sq` plus the squared deviations from `mean` of `gaps` (ns) in milliseconds, summed in order.
#[inline(never)]
fn add_squared_deviations_ms(mut sq: f64, gaps: &[u32], mean: f64) -> f64 {
    let dev = |g: u32| {
        let x = f64::from(g) / 1e6;
        (x - mean) * (x - mean)
    };
    // Two at a time, added one after the other: the same sum.
    let mut pairs = gaps.chunks_exact(2);
    for p in &mut pairs {
        sq += dev(p[0]);
        sq += dev(p[1]);
    }
    for &g in pairs.remainder() {
        sq += dev(g);
    }
    sq
}

fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Means of the TTFT breakdown, in ms. They add up to the mean TTFT.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TtftBreakdown {
    /// Engine arrival → first scheduled.
    pub queue_wait_ms: f64,
    /// Steps that ran the request's prompt.
    pub prefill_ms: f64,
    /// First scheduled → first token, minus the prefill steps: waiting
    /// between chunks, and for recompute after preemption.
    pub interleave_ms: f64,
    /// Outside the engine: ingress (HTTP, tokenisation) and streaming of the first token.
    pub overhead_ms: f64,
}

/// The benchmark-level metrics of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchMetrics {
    pub completed: u64,
    pub failed: u64,
    pub duration_s: f64,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub max_output_tokens_per_s: f64,
    pub max_concurrent_requests: u64,
    pub ttft: Stats,
    pub tpot: Stats,
    pub itl: Stats,
    pub e2el: Stats,
    pub ttft_breakdown: TtftBreakdown,
}

/// Computes the `vllm bench serve` metrics of a run's timed requests.
pub fn bench_metrics(run: &RunResult) -> BenchMetrics {
    bench_metrics_at(run, &[])
}

/// [`bench_metrics`] with the percentiles `extra` (each in [0, 100]) of TTFT, TPOT, ITL and
/// E2EL as well ([`Stats::extra`]), as `--metric-percentiles` asks for them.
pub fn bench_metrics_at(run: &RunResult, extra: &[f64]) -> BenchMetrics {
    let recs: Vec<&RequestRecord> = run.records.iter().filter(|r| r.completed).collect();
    let completed = recs.len() as u64;
    let failed = run.records.len() as u64 - completed;
    let duration_ns = run.bench_end_ns.saturating_sub(run.bench_start_ns);
    let duration_s = duration_ns as f64 / 1e9;
    let total_input_tokens: u64 = recs.iter().map(|r| u64::from(r.prompt_len)).sum();
    // `usage.completion_tokens` live; the generated count in simulation.
    let total_output_tokens: u64 = recs.iter().map(|r| u64::from(r.output_len)).sum();
    let per_s = |x: f64| if duration_s > 0.0 { x / duration_s } else { 0.0 };

    let mut ttft = Vec::with_capacity(recs.len());
    let mut tpot = Vec::with_capacity(recs.len());
    let mut e2el = Vec::with_capacity(recs.len());
    let mut bd = TtftBreakdown::default();
    for r in &recs {
        let first = r.token_times_ns[0];
        let last = *r.token_times_ns.last().expect("completed requests have tokens");
        let t = ns_to_ms(first - r.dispatch_ns);
        let e = ns_to_ms(last - r.dispatch_ns);
        ttft.push(t);
        e2el.push(e);
        let n = r.output_len as usize;
        if n > 1 {
            tpot.push((e - t) / (n - 1) as f64);
        }
        let sched = r.first_scheduled_ns.unwrap_or(r.engine_arrival_ns);
        let step_end = r.first_token_step_end_ns.unwrap_or(first);
        bd.queue_wait_ms += ns_to_ms(sched - r.engine_arrival_ns);
        bd.prefill_ms += ns_to_ms(r.prefill_compute_ns);
        bd.interleave_ms += ns_to_ms((step_end - sched).saturating_sub(r.prefill_compute_ns));
        bd.overhead_ms += ns_to_ms((r.engine_arrival_ns - r.dispatch_ns) + (first - step_end));
    }
    if completed > 0 {
        let n = completed as f64;
        bd.queue_wait_ms /= n;
        bd.prefill_ms /= n;
        bd.interleave_ms /= n;
        bd.overhead_ms /= n;
    }

    // Peak output tokens per second and peak concurrency, over 1-second buckets
    // (`calculate_metrics`): a bucket counts the tokens received in it and every request
    // in flight at any time within it, so at concurrency 1 a request that ends in a
    // second and the next, sent in the same second, both count (a peak of 2). Sparse:
    // memory and time follow the requests, not the duration (a run of a year is 3e7
    // buckets, a trace's far arrival would be more).
    let (max_output_tokens_per_s, max_concurrent_requests) = peaks_per_second(&recs, run.bench_start_ns, duration_ns);

    BenchMetrics {
        completed,
        failed,
        duration_s,
        total_input_tokens,
        total_output_tokens,
        request_throughput: per_s(completed as f64),
        output_throughput: per_s(total_output_tokens as f64),
        total_token_throughput: per_s((total_input_tokens + total_output_tokens) as f64),
        max_output_tokens_per_s: max_output_tokens_per_s as f64,
        max_concurrent_requests,
        ttft: Stats::of_at(&mut ttft, extra),
        tpot: Stats::of_at(&mut tpot, extra),
        itl: Stats::of_token_gaps(&recs, extra),
        e2el: Stats::of_at(&mut e2el, extra),
        ttft_breakdown: bd,
    }
}

/// The largest count of tokens received in one 1-second bucket (from `start`), and of
/// requests in flight during one bucket, over `duration_ns`; as a dense array of
/// buckets would give, in O(tokens + requests · log requests) time and O(requests) memory.
fn peaks_per_second(recs: &[&RequestRecord], start: u64, duration_ns: u64) -> (u64, u64) {
    peaks_per_second_dense_below(recs, start, duration_ns, 1 << 16)
}

/// [`peaks_per_second`], the token counts summed in a dense array of buckets where there are
/// fewer than `dense_below` buckets (or than runs), else by sorting the runs (always, with
/// `dense_below` 0).
fn peaks_per_second_dense_below(recs: &[&RequestRecord], start: u64, duration_ns: u64, dense_below: u64) -> (u64, u64) {
    const SEC: u64 = 1_000_000_000;
    let last = duration_ns / SEC; // the last bucket's index
    let bucket = |t: u64| (t.saturating_sub(start) / SEC).min(last);
    // Token times of a request increase, so each request's tokens come in runs of one bucket.
    // The times `[lo, hi]` that fall in bucket `b`, so that a token in the current
    // bucket's span is counted without a division.
    let span = |b: u64| {
        let lo = if b == 0 { 0 } else { start.saturating_add(b * SEC) };
        let hi = if b == last { u64::MAX } else { start.saturating_add((b + 1) * SEC) - 1 };
        (lo, hi)
    };
    let mut per_bucket: Vec<(u64, u64)> = Vec::new();
    for r in recs {
        let mut cur: Option<(u64, u64)> = None;
        let (mut lo, mut hi) = (1, 0);
        for &t in &r.token_times_ns {
            if lo <= t && t <= hi {
                if let Some((_, n)) = &mut cur {
                    *n += 1;
                }
                continue;
            }
            let b = bucket(t);
            (lo, hi) = span(b);
            match &mut cur {
                Some((cb, n)) if *cb == b => *n += 1,
                _ => {
                    if let Some(c) = cur.take() {
                        per_bucket.push(c);
                    }
                    cur = Some((b, 1));
                }
            }
        }
        per_bucket.extend(cur);
    }
    let mut max_tokens = 0u64;
    if dense_below > 0 && last < dense_below.max(per_bucket.len() as u64) {
        // Few buckets: summed in place, without sorting the runs.
        let mut dense = vec![0u64; last as usize + 1];
        for &(b, n) in &per_bucket {
            dense[b as usize] += n;
        }
        max_tokens = dense.iter().copied().max().unwrap_or(0);
        per_bucket.clear();
    }
    per_bucket.sort_unstable_by_key(|&(b, _)| b);
    let mut i = 0;
    while i < per_bucket.len() {
        let b = per_bucket[i].0;
        let mut n = 0;
        while i < per_bucket.len() && per_bucket[i].0 == b {
            n += per_bucket[i].1;
            i += 1;
        }
        max_tokens = max_tokens.max(n);
    }
    // Requests in flight: +1 at the first bucket, −1 after the last; the peak of the running sum.
    let mut edges: Vec<(u64, i64)> = Vec::with_capacity(2 * recs.len());
    for r in recs {
        let b0 = bucket(r.dispatch_ns);
        let b1 = bucket(r.token_times_ns.last().copied().unwrap_or(r.dispatch_ns)).max(b0);
        edges.push((b0, 1));
        edges.push((b1 + 1, -1));
    }
    edges.sort_unstable();
    let (mut cur, mut max_conc) = (0i64, 0i64);
    for (_, d) in edges {
        cur += d;
        max_conc = max_conc.max(cur);
    }
    (max_tokens, max_conc as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_match_numpy_linear_interpolation() {
        // np.percentile([1, 2, 3, 4], [50, 90, 95, 99]) = [2.5, 3.7, 3.85, 3.97]
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0), 2.5);
        assert!((percentile(&v, 90.0) - 3.7).abs() < 1e-12);
        assert!((percentile(&v, 95.0) - 3.85).abs() < 1e-12);
        assert!((percentile(&v, 99.0) - 3.97).abs() < 1e-12);
        assert_eq!(percentile(&[5.0], 99.0), 5.0);
    }

    #[test]
    fn stats_use_population_std_and_numpy_median() {
        let mut v = vec![4.0, 1.0, 3.0, 2.0];
        let s = Stats::of(&mut v);
        assert_eq!(s.mean, 2.5);
        assert_eq!(s.median, 2.5);
        assert!((s.std - 1.118_033_988_749_895).abs() < 1e-12);
        assert_eq!(Stats::of(&mut []), Stats::default());
    }
}

#[cfg(test)]
mod select_tests {
    use super::*;
    use proptest::prelude::*;

    /// The dense 1-second buckets the sparse count replaces.
    /// One record per list of token gaps (ns), its first token at 1 µs.
    fn records_of_gaps(reqs: &[Vec<u64>]) -> Vec<RequestRecord> {
        reqs.iter()
            .map(|gaps| {
                let mut t = 1_000u64;
                let token_times_ns = gaps.iter().map(|g| {
                    t += g;
                    t
                });
                RequestRecord { token_times_ns: token_times_ns.collect(), ..Default::default() }
            })
            .collect()
    }

    fn dense_peaks(recs: &[&RequestRecord], start: u64, duration_ns: u64) -> (u64, u64) {
        let buckets = (duration_ns / 1_000_000_000 + 1) as usize;
        let mut tokens = vec![0u64; buckets];
        let mut conc = vec![0u64; buckets];
        for r in recs {
            for &t in &r.token_times_ns {
                let b = ((t.saturating_sub(start)) / 1_000_000_000) as usize;
                tokens[b.min(buckets - 1)] += 1;
            }
            let b0 = (r.dispatch_ns.saturating_sub(start) / 1_000_000_000) as usize;
            let b1 = (r.token_times_ns.last().copied().unwrap_or(r.dispatch_ns).saturating_sub(start) / 1_000_000_000)
                as usize;
            for c in conc.iter_mut().take(b1.min(buckets - 1) + 1).skip(b0.min(buckets - 1)) {
                *c += 1;
            }
        }
        (tokens.iter().copied().max().unwrap_or(0), conc.iter().copied().max().unwrap_or(0))
    }

    proptest! {
        /// Sparse peaks equal the dense buckets' (vllm bench serve's `calculate_metrics`).
        #[test]
        fn sparse_peaks_equal_dense_buckets(
            reqs in prop::collection::vec((0u64..20_000_000_000, prop::collection::vec(1u64..3_000_000_000, 0..20)), 1..30),
        ) {
            let start = 1_000;
            let records: Vec<RequestRecord> = reqs
                .iter()
                .map(|(d, gaps)| {
                    let mut t = start + d;
                    let dispatch = t;
                    let token_times_ns = gaps.iter().map(|g| { t += g; t }).collect();
                    RequestRecord { dispatch_ns: dispatch, token_times_ns, ..Default::default() }
                })
                .collect();
            let recs: Vec<&RequestRecord> = records.iter().collect();
            let end = records.iter().map(|r| r.token_times_ns.last().copied().unwrap_or(r.dispatch_ns)).max().unwrap();
            prop_assert_eq!(peaks_per_second(&recs, start, end - start), dense_peaks(&recs, start, end - start));
            // The sorted runs (where the buckets are many).
            prop_assert_eq!(peaks_per_second_dense_below(&recs, start, end - start, 0), dense_peaks(&recs, start, end - start));
        }
    }

    proptest! {
        /// The token gaps' statistics, computed from the records, are bit for bit those of the
        /// concatenated gaps in milliseconds (small gaps, gaps past `u32::MAX` ns, and gaps at
        /// and around it).
        #[test]
        fn token_gap_stats_equal_stats_of_the_concatenated_gaps(
            reqs in prop::collection::vec(prop::collection::vec(prop_oneof![0u64..50_000_000, 0u64..9_000_000_000, 4_294_967_290u64..4_294_967_300], 0..40), 0..20),
        ) {
            let records = records_of_gaps(&reqs);
            let recs: Vec<&RequestRecord> = records.iter().collect();
            let mut itl: Vec<f64> = Vec::new();
            for r in &recs {
                for w in r.token_times_ns.windows(2) {
                    itl.push(ns_to_ms(w[1] - w[0]));
                }
            }
            let a = Stats::of(&mut itl);
            let b = Stats::of_token_gaps(&recs, &[]);
            prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
            for (x, y) in [(a.mean, b.mean), (a.std, b.std), (a.median, b.median), (a.p99, b.p99), (a.max, b.max)] {
                prop_assert_eq!(x.to_bits(), y.to_bits());
            }
        }
    }

    proptest! {
        /// Percentiles asked for beyond the fixed ones (`--metric-percentiles 25,99.9`) are
        /// numpy's linear-interpolation percentiles of the sorted values, on both paths (any
        /// values; the token gaps with long ones among them), and ask nothing of the others.
        #[test]
        fn extra_percentiles_are_numpys_of_the_sorted_values(
            reqs in prop::collection::vec(prop::collection::vec(prop_oneof![0u64..50_000_000, 0u64..9_000_000_000], 0..30), 1..12),
            extra in prop::collection::vec(0.0f64..=100.0, 0..4),
        ) {
            let records = records_of_gaps(&reqs);
            let recs: Vec<&RequestRecord> = records.iter().collect();
            let mut itl: Vec<f64> = recs.iter().flat_map(|r| r.token_times_ns.windows(2).map(|w| ns_to_ms(w[1] - w[0]))).collect();
            let mut sorted = itl.clone();
            sorted.sort_by(f64::total_cmp);
            let a = Stats::of_at(&mut itl, &extra);
            let b = Stats::of_token_gaps(&recs, &extra);
            for st in [&a, &b] {
                if sorted.is_empty() {
                    prop_assert!(st.extra.is_empty());
                    continue;
                }
                prop_assert_eq!(st.extra.len(), extra.len());
                for (&p, &(q, v)) in extra.iter().zip(&st.extra) {
                    prop_assert_eq!(p, q);
                    prop_assert_eq!(v.to_bits(), percentile(&sorted, p).to_bits(), "p{}", p);
                    prop_assert_eq!(st.at(p), Some(v));
                }
                // The fixed ones are as without extras.
                let plain = Stats::of_token_gaps(&recs, &[]);
                prop_assert_eq!((st.p50, st.p90, st.p99, st.mean), (plain.p50, plain.p90, plain.p99, plain.mean));
            }
        }
    }

    proptest! {
        /// The counted order statistics equal a full sort's, for spread, clustered (a crowded
        /// high half) and constant values.
        #[test]
        fn counted_order_statistics_equal_a_sort(
            spread in prop::collection::vec(any::<u32>(), 0..200),
            cluster in prop::collection::vec(0u32..3_000, 0..12_000),
            base in 0u32..4_000_000_000,
            outlier in prop::option::of(any::<u32>()),
            constant in prop::collection::vec(Just(7u32), 0..50),
        ) {
            let mut v: Vec<u32> = spread;
            v.extend(cluster.iter().map(|c| base.saturating_add(*c)));
            v.extend(outlier);
            v.extend(constant);
            if !v.is_empty() {
                let mut high = vec![0u32; 1 << 16];
                for &x in &v {
                    high[(x >> 16) as usize] += 1;
                }
                let mut sorted = v.clone();
                sorted.sort_unstable();
                let ranks = stat_ranks(v.len(), &[]);
                let want: Vec<u32> = ranks.iter().map(|&r| sorted[r]).collect();
                prop_assert_eq!(order_statistics_u32(&v, &high, &ranks), want);
                let all: Vec<usize> = (0..v.len()).step_by(7).collect();
                let want: Vec<u32> = all.iter().map(|&r| sorted[r]).collect();
                prop_assert_eq!(order_statistics_u32(&v, &high, &all), want);
            }
        }
    }

    proptest! {
        /// Selecting the needed ranks gives exactly what a full sort gives.
        #[test]
        fn stats_by_selection_equal_stats_of_the_sorted_values(mut v in prop::collection::vec(0.0f64..1000.0, 1..300)) {
            let mut sorted = v.clone();
            sorted.sort_by(|a, b| a.total_cmp(b));
            let s = Stats::of(&mut v);
            let n = sorted.len();
            let median = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
            prop_assert_eq!(s.median, median);
            for p in PERCENTILES {
                prop_assert_eq!(s.at(p), Some(percentile(&sorted, p)));
            }
        }
    }
}
