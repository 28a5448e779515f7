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
//! * With a measured window (`workload.window_start_s`, `window_duration_s`; not a
//!   `vllm bench serve` option, a steady-state client's): every statistic over the
//!   requests whose last token arrived in the window, the throughputs over its
//!   length, the output tokens those streamed in it (any request's; the client's
//!   count, so an EOS token no chunk carried is not one), the input tokens those
//!   of the requests completed in it.
//! * Goodput (`--goodput`, [`GoodputSlos`]): the completed requests that meet every objective
//!   given, over the duration; decided per request in seconds as `calculate_metrics` decides it
//!   ([`GoodputSlos::met_by`]).

#[cfg(test)]
use crate::simulation::TokenRuns;
use crate::simulation::{RequestRecord, RunResult, TokenLog};

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

/// A count of values: u32 where every count of a computation fits, else u64.
trait Count: Copy + Default + std::fmt::Debug + std::ops::AddAssign + Into<u64> {
    /// `x`, which the caller knows fits.
    fn of(x: u64) -> Self;
}

impl Count for u32 {
    fn of(x: u64) -> u32 {
        debug_assert!(x <= u64::from(u32::MAX));
        x as u32
    }
}

impl Count for u64 {
    fn of(x: u64) -> u64 {
        x
    }
}

/// The order statistics at `ranks` (sorted, distinct, each below the total weight) of the
/// weighted values `pairs` (each `(value, weight)`, a value counted `weight` times, in any
/// order), given
/// `high`, the total weight by the values' high 16 bits: the values a full sort of every copy
/// would put at those ranks, in the order of `ranks`. `high` names the high half of each
/// rank's value and its rank among the values sharing it; the pairs of those few high halves
/// are gathered, and each such group is resolved exactly, by sorting if it is small, else by
/// the weights of its low halves. Linear in the pairs, without moving them. `high` is then
/// scratch (it maps high halves to groups), so that a run's metrics zero one such array, not
/// two.
fn weighted_order_statistics_u32<C: Count>(pairs: &impl WeightedValues, high: &mut [C], ranks: &[usize]) -> Vec<u32> {
    debug_assert_eq!(high.len(), 1 << 16);
    let mut out = vec![0u32; ranks.len()];
    // Each rank's group (a high half holding it) and its rank within the group.
    let mut groups: Vec<usize> = Vec::with_capacity(ranks.len());
    let mut rank_in: Vec<(usize, u64)> = Vec::with_capacity(ranks.len()); // (group, rank within)
    let (mut h, mut below) = (0usize, 0u64);
    for &r in ranks {
        let r = r as u64;
        while below + high[h].into() <= r {
            below += high[h].into();
            h += 1;
        }
        if groups.last() != Some(&h) {
            groups.push(h);
        }
        rank_in.push((groups.len() - 1, r - below));
    }
    // A group of little weight gathers its pairs (room for as many as its weight, each weight
    // below it); a crowded one counts its low halves. `high` now maps a high half to its group
    // (1-based; 0: none).
    const CROWDED: u64 = 1 << 13;
    let weight: Vec<u64> = groups.iter().map(|&g| high[g].into()).collect();
    let mut gathered: Vec<Vec<(u32, u32)>> =
        weight.iter().map(|&w| if w < CROWDED { Vec::with_capacity(w as usize) } else { Vec::new() }).collect();
    let mut lows: Vec<Vec<C>> =
        weight.iter().map(|&w| if w < CROWDED { Vec::new() } else { vec![C::default(); 1 << 16] }).collect();
    high.fill(C::default());
    for (k, &g) in groups.iter().enumerate() {
        high[g] = C::of(k as u64 + 1);
    }
    pairs.for_each(|v, w| {
        let k: u64 = high[(v >> 16) as usize].into();
        if k != 0 {
            let k = k as usize - 1;
            if weight[k] < CROWDED {
                gathered[k].push((v, w as u32));
            } else {
                lows[k][(v & 0xffff) as usize] += C::of(w);
            }
        }
    });
    for (k, pairs) in gathered.iter_mut().enumerate() {
        let base = (groups[k] as u32) << 16;
        // This group's ranks, ascending (as `ranks` are).
        let want = rank_in.iter().enumerate().filter(|(_, &(g, _))| g == k).map(|(i, &(_, w))| (i, w));
        if weight[k] < CROWDED {
            pairs.sort_unstable_by_key(|&(v, _)| v);
            let (mut j, mut below) = (0usize, 0u64);
            for (i, w) in want {
                while below + u64::from(pairs[j].1) <= w {
                    below += u64::from(pairs[j].1);
                    j += 1;
                }
                out[i] = pairs[j].0;
            }
        } else {
            let low = &lows[k];
            let (mut x, mut below) = (0usize, 0u64);
            for (i, w) in want {
                while below + low[x].into() <= w {
                    below += low[x].into();
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

    /// Statistics of the gaps between consecutive token times of every record, in
    /// milliseconds: [`Stats::of`] the concatenated gaps, whose order statistics (median,
    /// percentiles, max) they are to the bit; the mean and the variance come from the exact
    /// integer sums of the gaps (ns) and of their squares, rounded once, so these two may
    /// differ from numpy's float sums in the last bits.
    fn of_token_gaps(gaps: &TokenTally, extra: &[f64]) -> Stats {
        // The counts by high half in 32 bits where every count fits (their arrays are half
        // the size, and a small run's metrics are mostly their zeroing).
        if gaps.n_gaps <= u64::from(u32::MAX) {
            Stats::of_token_gaps_counted::<u32>(gaps, extra)
        } else {
            Stats::of_token_gaps_counted::<u64>(gaps, extra)
        }
    }

    /// [`Stats::of_token_gaps`], counting in `C` (which holds the number of gaps).
    fn of_token_gaps_counted<C: Count>(gaps: &TokenTally, extra: &[f64]) -> Stats {
        let n = gaps.n_gaps;
        if n == 0 {
            return Stats::default();
        }
        // One pass: the exact sums of the gaps and of their squares, the largest, and the
        // weights by high 16 bits of the gaps below `u32::MAX` ns (4.3 s); the longer ones
        // ("long", few) kept aside with their counts: every long gap is at least every other,
        // so the ranks past the others are the long ones' order statistics.
        let mut long: Vec<(u64, u64)> = Vec::new();
        // A fixed-size array: indexed by a u32's high half, with no bounds check.
        let mut high: Box<[C; 1 << 16]> =
            vec![C::default(); 1 << 16].into_boxed_slice().try_into().expect("2^16 counts");
        let (sum, sum_sq, max) = gaps.moments(&mut high, &mut long);
        let mean = sum as f64 / n as f64 / 1e6;
        // The variance: exact, n² var = n Σg² − (Σg)², where that fits in 128 bits; else the
        // squared deviations from the mean, summed in f64 (gaps of days).
        let exact = sum_sq.and_then(|sq| sq.checked_mul(u128::from(n))?.checked_sub(sum.checked_mul(sum)?));
        let var = match exact {
            Some(d) => d as f64 / (n as f64 * n as f64) / 1e12,
            None => {
                let mut sq = 0.0f64;
                gaps.for_each_gap(|g, m| {
                    let x = ns_to_ms(g) - mean;
                    sq += m as f64 * (x * x);
                });
                sq / n as f64
            }
        };
        let n = n as usize;
        let ranks = stat_ranks(n, extra);
        let short = n - long.iter().map(|&(_, m)| m as usize).sum::<usize>();
        let split = ranks.partition_point(|&r| r < short);
        let mut at: Vec<u64> = Vec::with_capacity(ranks.len());
        if split > 0 {
            at.extend(
                weighted_order_statistics_u32(&ShortGaps(gaps), &mut high[..], &ranks[..split])
                    .into_iter()
                    .map(u64::from),
            );
        }
        if split < ranks.len() {
            long.sort_unstable();
            let (mut j, mut below) = (0usize, 0usize);
            for &r in &ranks[split..] {
                let r = r - short;
                while below + long[j].1 as usize <= r {
                    below += long[j].1 as usize;
                    j += 1;
                }
                at.push(long[j].0);
            }
        }
        let value = |i: usize| at[ranks.binary_search(&i).expect("a rank of stat_ranks")];
        Stats::from_selected(mean, var, ns_to_ms(max), n, |i| ns_to_ms(value(i)), extra)
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

/// What a run's records received, by delivery of the [`TokenLog`]: how many of their tokens
/// each delivery brought, and how many of those began a run, so that the gap between
/// consecutive deliveries `d − 1` and `d` is counted once with the number of records that
/// received a token at both (those at `d` less those whose run starts at `d`); the gaps
/// between two runs of one record are kept one by one. The counts come from where runs start
/// and end: sorted lists of both where runs are few against deliveries (a run at concurrency 1
/// has one run a request and a delivery a token), else a difference array over the deliveries.
struct TokenTally<'a> {
    times: &'a [u64],
    cover: Cover,
    /// The gaps between a record's runs, one each.
    between: Vec<u64>,
    /// The number of gaps.
    n_gaps: u64,
    /// Each record's first delivery brought one more chunk the client counted as a token (the
    /// chat role chunk: [`TokenTally::of_run`]); its gap is in `between`.
    role_chunks: bool,
}

/// How [`TokenTally`] counts the runs holding a delivery.
enum Cover {
    /// `at[d]`: the change, at `d`, of the count of runs holding delivery `d`; `starts`: the
    /// first delivery of every run, sorted.
    Dense { at: Vec<i32>, starts: Vec<u32> },
    /// Where the count changes, in order: `(d, runs holding d, runs starting at d)`; the
    /// count holds until the next change.
    Sparse(Vec<(u32, i64, i64)>),
}

impl<'a> TokenTally<'a> {
    fn new(log: &'a TokenLog, recs: &[&RequestRecord]) -> TokenTally<'a> {
        let runs: usize = recs.iter().map(|r| r.tokens.runs().count()).sum();
        TokenTally::with_cover(log, recs, runs.saturating_mul(4) > log.len())
    }

    /// [`TokenTally::new`] with, where `role_chunk_gaps`, one more gap of 0 for each record that
    /// has a token ([`RunResult::role_chunk_gaps`]: the client timed the chat role chunk, sent
    /// with the first token, as its first; the first token's own chunk then came a gap of ~0
    /// later).
    fn of_run(run: &'a RunResult, recs: &[&RequestRecord]) -> TokenTally<'a> {
        let mut t = TokenTally::new(&run.token_log, recs);
        if run.role_chunk_gaps {
            let with_tokens = recs.iter().filter(|r| r.tokens.first_delivery().is_some()).count();
            t.between.extend(std::iter::repeat_n(0, with_tokens));
            t.n_gaps += with_tokens as u64;
            t.role_chunks = true;
        }
        t
    }

    /// [`TokenTally::new`] with the difference array (`dense`) or the sorted ends.
    fn with_cover(log: &'a TokenLog, recs: &[&RequestRecord], dense: bool) -> TokenTally<'a> {
        let times = log.times_ns();
        let mut at = if dense { vec![0i32; times.len() + 1] } else { Vec::new() };
        let mut ends = Vec::new();
        let mut starts = Vec::with_capacity(recs.len());
        let mut between = Vec::new();
        let mut n_gaps = 0u64;
        for r in recs {
            let mut prev_last: Option<u32> = None;
            for (s, k) in r.tokens.runs() {
                if let Some(p) = prev_last {
                    between.push(times[s as usize] - times[p as usize]);
                    n_gaps += 1;
                }
                if dense {
                    at[s as usize] += 1;
                    at[(s + k) as usize] -= 1;
                } else {
                    ends.push(s + k);
                }
                starts.push(s);
                n_gaps += u64::from(k - 1);
                prev_last = Some(s + k - 1);
            }
        }
        starts.sort_unstable();
        let cover = if dense {
            Cover::Dense { at, starts }
        } else {
            ends.sort_unstable();
            // Merge the starts and the ends into the points where the count changes.
            let mut changes: Vec<(u32, i64, i64)> = Vec::new();
            let (mut i, mut j, mut c) = (0usize, 0usize, 0i64);
            while i < starts.len() || j < ends.len() {
                let d = match (starts.get(i), ends.get(j)) {
                    (Some(&a), Some(&b)) => a.min(b),
                    (Some(&a), None) => a,
                    (None, Some(&b)) => b,
                    (None, None) => unreachable!(),
                };
                let mut starting = 0i64;
                while i < starts.len() && starts[i] == d {
                    starting += 1;
                    i += 1;
                }
                c += starting;
                while j < ends.len() && ends[j] == d {
                    c -= 1;
                    j += 1;
                }
                changes.push((d, c, starting));
            }
            Cover::Sparse(changes)
        };
        TokenTally { times, cover, between, n_gaps, role_chunks: false }
    }

    /// Calls `f(first, end, runs holding them, runs starting at the first)` for the
    /// deliveries in spans of one count, in order, covering every delivery.
    #[inline]
    fn for_each_span(&self, mut f: impl FnMut(usize, usize, i64, i64)) {
        let n = self.times.len();
        match &self.cover {
            Cover::Sparse(changes) => {
                let first = changes.first().map_or(n, |c| (c.0 as usize).min(n));
                if first > 0 {
                    f(0, first, 0, 0);
                }
                for (k, &(d, c, starting)) in changes.iter().enumerate() {
                    if d as usize >= n {
                        break;
                    }
                    let end = changes.get(k + 1).map_or(n, |x| (x.0 as usize).min(n));
                    f(d as usize, end, c, starting);
                }
            }
            Cover::Dense { at, starts } => {
                let (mut c, mut s) = (0i64, 0usize);
                for (d, &delta) in at[..n].iter().enumerate() {
                    let mut starting = 0i64;
                    while s < starts.len() && starts[s] as usize == d {
                        starting += 1;
                        s += 1;
                    }
                    c += i64::from(delta);
                    f(d, d + 1, c, starting);
                }
            }
        }
    }

    /// The exact sum of the gaps, of their squares (None past 128 bits) and the largest; the
    /// counts of the gaps below `u32::MAX` ns by their high 16 bits added to `high`, and the
    /// others pushed to `long` with their counts. What [`TokenTally::for_each_gap`] would give,
    /// a span at a time: a span's gaps telescope to its last time less its first.
    fn moments<C: Count>(&self, high: &mut [C; 1 << 16], long: &mut Vec<(u64, u64)>) -> (u128, Option<u128>, u64) {
        let t = self.times;
        let (mut sum, mut sum_sq, mut max) = (0u128, Some(0u128), 0u64);
        // One gap `g`, `m` times.
        fn one<C: Count>(
            g: u64,
            m: u64,
            sum_sq: &mut Option<u128>,
            high: &mut [C; 1 << 16],
            long: &mut Vec<(u64, u64)>,
            max: &mut u64,
        ) {
            let (g2, m2) = (u128::from(g), u128::from(m));
            *sum_sq = sum_sq.and_then(|s| s.checked_add((g2 * g2).checked_mul(m2)?));
            if g < u64::from(u32::MAX) {
                high[(g >> 16) as usize] += C::of(m);
            } else {
                long.push((g, m));
            }
            *max = (*max).max(g);
        }
        self.for_each_span(|a, b, c, starting| {
            if c > starting {
                let g = t[a] - t[a - 1];
                sum += u128::from(g) * (c - starting) as u128;
                one(g, (c - starting) as u64, &mut sum_sq, high, long, &mut max);
            }
            if c > 0 && b > a + 1 {
                let m = c as u64;
                sum += u128::from(t[b - 1] - t[a]) * u128::from(m);
                let mut sq = 0u128;
                for d in a + 1..b {
                    let g = t[d] - t[d - 1];
                    if g < u64::from(u32::MAX) {
                        sq += u128::from(g * g);
                        high[(g >> 16) as usize] += C::of(m);
                        max = max.max(g);
                    } else {
                        one(g, m, &mut sum_sq, high, long, &mut max);
                    }
                }
                sum_sq = sum_sq.and_then(|s| s.checked_add(sq.checked_mul(u128::from(m))?));
            }
        });
        for &g in &self.between {
            sum += u128::from(g);
            one(g, 1, &mut sum_sq, high, long, &mut max);
        }
        (sum, sum_sq, max)
    }

    /// Calls `f(gap_ns, count)` for each delivery gap some record has (in delivery order),
    /// then `f(gap_ns, 1)` for each gap between runs (in record order).
    #[inline]
    fn for_each_gap(&self, mut f: impl FnMut(u64, u64)) {
        let t = self.times;
        self.for_each_span(|a, b, c, starting| {
            // At `a`, the runs starting there have no gap; after it, every run has one.
            if c > starting {
                f(t[a] - t[a - 1], (c - starting) as u64);
            }
            if c > 0 {
                for d in a + 1..b {
                    f(t[d] - t[d - 1], c as u64);
                }
            }
        });
        for &g in &self.between {
            f(g, 1);
        }
    }

    /// Calls `f(time_ns, tokens)` for each delivery that brought the records tokens, in order.
    #[inline]
    fn for_each_delivery(&self, mut f: impl FnMut(u64, u64)) {
        self.for_each_span(|a, b, c, _| {
            if c > 0 {
                for &t in &self.times[a..b] {
                    f(t, c as u64);
                }
            }
        });
    }
}

/// The gaps of a [`TokenTally`] below `u32::MAX` ns, as weighted values.
struct ShortGaps<'a, 'b>(&'a TokenTally<'b>);

impl WeightedValues for ShortGaps<'_, '_> {
    fn for_each(&self, mut f: impl FnMut(u32, u64)) {
        self.0.for_each_gap(|g, m| {
            if g < u64::from(u32::MAX) {
                f(g as u32, m)
            }
        })
    }
}

/// Values with weights (a value counted `weight` times), given in the same order each time.
trait WeightedValues {
    fn for_each(&self, f: impl FnMut(u32, u64));
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

/// `MILLISECONDS_TO_SECONDS_CONVERSION` of `vllm/benchmarks/serve.py`: an objective in
/// milliseconds is divided by it and compared with a request's times in seconds.
pub const MILLISECONDS_TO_SECONDS_CONVERSION: f64 = 1000.0;

/// The metrics an objective may name, in `check_goodput_args`' order (its `VALID_NAMES`).
pub const GOODPUT_METRICS: [&str; 3] = ["ttft", "tpot", "e2el"];

/// `vllm bench serve --goodput KEY:VALUE ...`: service-level objectives in milliseconds, each
/// on one request's TTFT, TPOT or E2EL (`parse_goodput` and `check_goodput_args` in
/// `vllm/benchmarks/serve.py`, the same from 0.11.0 to 0.34.0). A request is good when it
/// completed and meets every objective given ([`GoodputSlos::met_by`]); the run's
/// `request_goodput` is the good requests over the duration ([`bench_metrics_with`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GoodputSlos {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2el_ms: Option<f64>,
}

impl GoodputSlos {
    /// The objectives of `KEY:VALUE` pairs, checked as vLLM checks them: every pair split at
    /// its one `:` with a number after it (`parse_goodput`: "Invalid format found for service
    /// level objectives"), then each name one of [`GOODPUT_METRICS`] ("Invalid metric name
    /// found") and each value at least 0 ("Invalid value found"). Stricter than vLLM where it
    /// would go on silently: a metric given twice (vLLM's dict keeps the last value) and a NaN
    /// (which meets no objective, so vLLM counts no request good) are refused. The messages
    /// name no flag: the caller says which one it read.
    pub fn parse<S: AsRef<str>>(pairs: &[S]) -> Result<GoodputSlos, String> {
        const FORMAT: &str = "expected service level objectives as KEY:VALUE pairs, where the key is a metric \
             name (ttft, tpot or e2el) and the value a number in milliseconds, as in `ttft:500 tpot:50`";
        if pairs.is_empty() {
            return Err(format!("no objective given: {FORMAT}"));
        }
        let mut parsed: Vec<(&str, f64)> = Vec::with_capacity(pairs.len());
        for pair in pairs {
            let pair = pair.as_ref();
            let mut parts = pair.split(':');
            let (Some(name), Some(value), None) = (parts.next(), parts.next(), parts.next()) else {
                // A value after the flag that is no pair (a scenario file given after it is read
                // as one, as vLLM's `nargs="+"` reads it).
                let hint = if pair.contains(':') {
                    ""
                } else {
                    " (the flag takes every value after it: give other arguments before it or after another flag)"
                };
                return Err(format!("invalid format found for service level objectives, {pair:?}: {FORMAT}{hint}"));
            };
            // Python's `float` allows blanks around the number.
            let v: f64 = value.trim().parse().map_err(|_| {
                format!(
                    "invalid format found for service level objectives, {pair:?}: {value:?} is not a number; {FORMAT}"
                )
            })?;
            parsed.push((name, v));
        }
        let mut slos = GoodputSlos::default();
        for &(name, v) in &parsed {
            let slot = match name {
                "ttft" => &mut slos.ttft_ms,
                "tpot" => &mut slos.tpot_ms,
                "e2el" => &mut slos.e2el_ms,
                _ => {
                    return Err(format!(
                    "invalid metric name found, {name:?}: {v}: the service level objective name should be one of {}",
                    GOODPUT_METRICS.join(", ")
                ))
                }
            };
            if v.is_nan() {
                return Err(format!(
                    "invalid value found, {name}: NaN: expected a number of milliseconds, 0 or more (no request meets NaN)"
                ));
            }
            if v < 0.0 {
                return Err(format!(
                    "invalid value found, {name}: {v}: the service level objective value should be non-negative (milliseconds)"
                ));
            }
            if let Some(before) = *slot {
                return Err(format!("{name} given twice ({name}:{before} and {name}:{v}): give each metric once"));
            }
            *slot = Some(v);
        }
        Ok(slos)
    }

    /// Whether one completed request (first token `ttft_ns` and last `e2el_ns` after its send,
    /// `output_tokens` generated) meets every objective given, as `calculate_metrics` decides it
    /// (`vllm/benchmarks/serve.py`, 0.11.0 to 0.34.0): in seconds, each time a float of seconds,
    /// the TPOT `(latency − ttft) / (output − 1)` computed from those floats, and 0 for an
    /// output of one token ("if output_len <= 1, we regard tpot as 0 for goodput"); a request
    /// meets an objective when `slo_ms / MILLISECONDS_TO_SECONDS_CONVERSION >= value`, so a time
    /// equal to the objective meets it. The floats decide the ties as vLLM's do: a TPOT of
    /// exactly 13 ms in whole nanoseconds (1 ms to the first token, 14 ms to the second) is
    /// 0.014 − 0.001 = 0.013000000000000001 s, which misses `tpot:13`.
    pub fn met_by(&self, ttft_ns: u64, e2el_ns: u64, output_tokens: u32) -> bool {
        let ttft = ttft_ns as f64 / 1e9;
        let latency = e2el_ns as f64 / 1e9;
        let tpot = if output_tokens > 1 { (latency - ttft) / f64::from(output_tokens - 1) } else { 0.0 };
        [(self.ttft_ms, ttft), (self.tpot_ms, tpot), (self.e2el_ms, latency)]
            .into_iter()
            .all(|(slo, value)| slo.is_none_or(|s| s / MILLISECONDS_TO_SECONDS_CONVERSION >= value))
    }
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
    /// Requests per second that met every objective of [`GoodputSlos`]; `None` without
    /// objectives (`vllm bench serve` writes `null` without `--goodput`).
    pub request_goodput: Option<f64>,
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
    bench_metrics_with(run, extra, None)
}

/// [`bench_metrics_at`] with the goodput of `goodput`'s objectives
/// ([`BenchMetrics::request_goodput`]): the requests the statistics cover (completed, in the
/// measured window if any) that meet them ([`GoodputSlos::met_by`], with the TTFT, E2EL and
/// output length the TPOT statistics read), over the same duration as the throughputs.
pub fn bench_metrics_with(run: &RunResult, extra: &[f64], goodput: Option<&GoodputSlos>) -> BenchMetrics {
    // The records as the client saw them. One whose EOS step streamed no chunk the client times
    // ([`RequestRecord::eos_unstreamed`]: SGLang's chat stream, `vllm bench serve` from 0.33)
    // ends at its token before EOS: its ITLs lose the last gap, its E2EL ends a step earlier
    // (`latency` is the last chunk with output), its TPOT divides that by the generated count
    // less one (`usage.completion_tokens` counts the EOS token), the peak buckets lose the EOS
    // token; one whose only token was EOS gave the client no chunk with output, and failed
    // (`config::client_misses_eos_step`).
    let seen: Vec<RequestRecord> = run
        .records
        .iter()
        .filter(|r| r.eos_unstreamed)
        .map(|r| {
            let tokens = r.tokens.without_last();
            RequestRecord { completed: r.completed && !tokens.is_empty(), tokens, ..r.clone() }
        })
        .collect();
    let mut seen_at = 0;
    let recs: Vec<&RequestRecord> = run
        .records
        .iter()
        .map(|r| {
            if r.eos_unstreamed {
                seen_at += 1;
                &seen[seen_at - 1]
            } else {
                r
            }
        })
        .filter(|r| r.completed)
        .collect();
    let failed = run.records.len() as u64 - recs.len() as u64;
    // A measured window: the requests completed in it, the output tokens streamed in it (the
    // client's count over the window, whoever's they are), over its length.
    let window_tokens = run.measure_window_ns.map(|(a, b)| {
        recs.iter().map(|r| run.token_times(r).iter().filter(|&&t| (a..=b).contains(&t)).count() as u64).sum::<u64>()
    });
    let recs: Vec<&RequestRecord> = match run.measure_window_ns {
        Some((a, b)) => {
            recs.into_iter().filter(|r| run.last_token_ns(r).is_some_and(|t| (a..=b).contains(&t))).collect()
        }
        None => recs,
    };
    let completed = recs.len() as u64;
    let duration_ns = match run.measure_window_ns {
        Some((a, b)) => b - a,
        None => run.bench_end_ns.saturating_sub(run.bench_start_ns),
    };
    let duration_s = duration_ns as f64 / 1e9;
    // As the client counts them: `vllm bench serve` before 0.20 sums its dataset's lengths, which
    // leave out the BOS the server adds to a generated prompt (`RunResult::uncounted_prompt_tokens`).
    let total_input_tokens: u64 =
        recs.iter().map(|r| u64::from(r.prompt_len.saturating_sub(run.uncounted_prompt_tokens))).sum();
    // `usage.completion_tokens` live; the generated count in simulation.
    let total_output_tokens: u64 = window_tokens.unwrap_or_else(|| recs.iter().map(|r| u64::from(r.output_len)).sum());
    let per_s = |x: f64| if duration_s > 0.0 { x / duration_s } else { 0.0 };

    let mut ttft = Vec::with_capacity(recs.len());
    let mut tpot = Vec::with_capacity(recs.len());
    let mut e2el = Vec::with_capacity(recs.len());
    let mut bd = TtftBreakdown::default();
    let mut good = 0u64;
    for r in &recs {
        let first = run.first_token_ns(r).expect("completed requests have tokens");
        let last = run.last_token_ns(r).expect("completed requests have tokens");
        let t = ns_to_ms(first - r.dispatch_ns);
        let e = ns_to_ms(last - r.dispatch_ns);
        ttft.push(t);
        e2el.push(e);
        let n = r.output_len as usize;
        if n > 1 {
            tpot.push((e - t) / (n - 1) as f64);
        }
        if goodput.is_some_and(|g| g.met_by(first - r.dispatch_ns, last - r.dispatch_ns, r.output_len)) {
            good += 1;
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
    // The buckets count from the first completed request's send (`min_start_time`), not from
    // the benchmark's start: under a finite rate the first request waits a gap too, and the
    // bucket edges move with it. They run to the last completed request's end.
    let tally = TokenTally::of_run(run, &recs);
    let first_send = recs.iter().map(|r| r.dispatch_ns).min().unwrap_or(run.bench_start_ns);
    let last_end = recs
        .iter()
        .map(|r| r.tokens.last_delivery().map_or(r.dispatch_ns, |d| tally.times[d as usize]))
        .max()
        .unwrap_or(first_send);
    let (max_output_tokens_per_s, max_concurrent_requests) =
        peaks_per_second(&tally, &recs, first_send, last_end.saturating_sub(first_send));

    BenchMetrics {
        completed,
        failed,
        duration_s,
        total_input_tokens,
        total_output_tokens,
        request_throughput: per_s(completed as f64),
        request_goodput: goodput.map(|_| per_s(good as f64)),
        output_throughput: per_s(total_output_tokens as f64),
        total_token_throughput: per_s((total_input_tokens + total_output_tokens) as f64),
        max_output_tokens_per_s: max_output_tokens_per_s as f64,
        max_concurrent_requests,
        ttft: Stats::of_at(&mut ttft, extra),
        tpot: Stats::of_at(&mut tpot, extra),
        itl: Stats::of_token_gaps(&tally, extra),
        e2el: Stats::of_at(&mut e2el, extra),
        ttft_breakdown: bd,
    }
}

/// The largest count of tokens received in one 1-second bucket (from `start`), and of
/// requests in flight during one bucket, over `duration_ns`; as a dense array of
/// buckets would give, in O(deliveries + runs + requests · log requests) time and
/// O(deliveries + requests) memory.
fn peaks_per_second(tally: &TokenTally, recs: &[&RequestRecord], start: u64, duration_ns: u64) -> (u64, u64) {
    peaks_per_second_dense_below(tally, recs, start, duration_ns, 1 << 16)
}

/// [`peaks_per_second`], the token counts summed in a dense array of buckets where there are
/// fewer than `dense_below` buckets (or than runs of deliveries in one bucket), else by
/// sorting those runs, and the requests in flight likewise (dense where the buckets are fewer
/// than `dense_below` or than twice the records, else by sorting their edges); always by
/// sorting with `dense_below` 0.
fn peaks_per_second_dense_below(
    tally: &TokenTally,
    recs: &[&RequestRecord],
    start: u64,
    duration_ns: u64,
    dense_below: u64,
) -> (u64, u64) {
    const SEC: u64 = 1_000_000_000;
    let last = duration_ns / SEC; // the last bucket's index
    let bucket = |t: u64| (t.saturating_sub(start) / SEC).min(last);
    // The times `[lo, hi]` that fall in bucket `b`, so that a delivery in the current
    // bucket's span is counted without a division.
    let span = |b: u64| {
        let lo = if b == 0 { 0 } else { start.saturating_add(b * SEC) };
        let hi = if b == last { u64::MAX } else { start.saturating_add((b + 1) * SEC) - 1 };
        (lo, hi)
    };
    // Deliveries come (mostly) in time order, so they come in runs of one bucket.
    let mut per_bucket: Vec<(u64, u64)> = Vec::new();
    let mut cur: Option<(u64, u64)> = None;
    let (mut lo, mut hi) = (1, 0);
    tally.for_each_delivery(|t, m| {
        if lo <= t && t <= hi {
            if let Some((_, n)) = &mut cur {
                *n += m;
            }
            return;
        }
        let b = bucket(t);
        (lo, hi) = span(b);
        match &mut cur {
            Some((cb, n)) if *cb == b => *n += m,
            _ => {
                if let Some(c) = cur.take() {
                    per_bucket.push(c);
                }
                cur = Some((b, m));
            }
        }
    });
    per_bucket.extend(cur);
    if tally.role_chunks {
        // vLLM's buckets rebuild each request's chunk times from its TTFT and ITLs, the role
        // chunk's among them: one more "token" at each first delivery.
        per_bucket.extend(
            recs.iter().filter_map(|r| r.tokens.first_delivery()).map(|d| (bucket(tally.times[d as usize]), 1)),
        );
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
    // Within a bucket the −1s come before the +1s (sorted edges), so the sum peaks at a
    // bucket's end: the same peak as the sums of a dense array of buckets, where the buckets
    // are fewer than `dense_below` (or than twice the records).
    let (mut cur, mut max_conc) = (0i64, 0i64);
    if dense_below > 0 && last < dense_below.max(2 * recs.len() as u64) {
        let mut delta = vec![0i64; last as usize + 2];
        for r in recs {
            let b0 = bucket(r.dispatch_ns);
            let end = r.tokens.last_delivery().map_or(r.dispatch_ns, |d| tally.times[d as usize]);
            let b1 = bucket(end).max(b0);
            delta[b0 as usize] += 1;
            delta[b1 as usize + 1] -= 1;
        }
        for d in delta {
            cur += d;
            max_conc = max_conc.max(cur);
        }
        return (max_tokens, max_conc as u64);
    }
    let mut edges: Vec<(u64, i64)> = Vec::with_capacity(2 * recs.len());
    for r in recs {
        let b0 = bucket(r.dispatch_ns);
        let end = r.tokens.last_delivery().map_or(r.dispatch_ns, |d| tally.times[d as usize]);
        let b1 = bucket(end).max(b0);
        edges.push((b0, 1));
        edges.push((b1 + 1, -1));
    }
    edges.sort_unstable();
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

    /// One record per list of token gaps (ns), its first token at 1 µs, each token a delivery
    /// of its own (as a live run's records are).
    fn records_of_gaps(reqs: &[Vec<u64>]) -> (TokenLog, Vec<RequestRecord>) {
        let mut log = TokenLog::default();
        let records = reqs
            .iter()
            .map(|gaps| {
                let mut t = 1_000u64;
                let times: Vec<u64> = gaps
                    .iter()
                    .map(|g| {
                        t += g;
                        t
                    })
                    .collect();
                RequestRecord { tokens: log.append(&times), ..Default::default() }
            })
            .collect();
        (log, records)
    }

    /// Records sharing deliveries, as a simulated run's do: a log of `gaps` (ns, from 1 µs),
    /// and per request a first delivery and the steps between its tokens' deliveries (1: the
    /// next delivery; more: it skipped some; 0: a second token in the same delivery, as
    /// SGLang's overlap sends a request's held and last tokens), its dispatch `lead` ns before
    /// its first token.
    fn records_sharing(gaps: &[u64], reqs: &[(usize, u64, Vec<usize>)]) -> (TokenLog, Vec<RequestRecord>) {
        let mut log = TokenLog::default();
        let mut t = 1_000u64;
        for g in gaps {
            t += g;
            log.push(t).unwrap();
        }
        let records = reqs
            .iter()
            .filter_map(|(first, lead, steps)| {
                let mut d = *first % log.len().max(1);
                if log.is_empty() {
                    return None;
                }
                let mut tokens = TokenRuns::default();
                tokens.push(d as u32);
                for s in steps {
                    if d + s >= log.len() {
                        break;
                    }
                    d += s;
                    tokens.push(d as u32);
                }
                let dispatch_ns = log.time(tokens.first_delivery().unwrap()).saturating_sub(*lead);
                Some(RequestRecord { tokens, dispatch_ns, ..Default::default() })
            })
            .collect();
        (log, records)
    }

    /// The concatenated gaps of the records, materialised, in milliseconds.
    fn concatenated_gaps_ms(log: &TokenLog, recs: &[&RequestRecord]) -> Vec<f64> {
        let mut itl = Vec::new();
        for r in recs {
            let t: Vec<u64> = log.times(&r.tokens).collect();
            itl.extend(t.windows(2).map(|w| ns_to_ms(w[1] - w[0])));
        }
        itl
    }

    /// The gap statistics from the log equal [`Stats::of`] the materialised gaps: the order
    /// statistics and the max to the bit, the mean to the exact sum's, the std to 1e-9.
    fn assert_gap_stats(log: &TokenLog, records: &[RequestRecord], extra: &[f64]) -> Result<(), TestCaseError> {
        let recs: Vec<&RequestRecord> = records.iter().collect();
        let mut itl = concatenated_gaps_ms(log, &recs);
        let exact_ns: u128 = recs
            .iter()
            .map(|r| {
                let t: Vec<u64> = log.times(&r.tokens).collect();
                t.windows(2).map(|w| u128::from(w[1] - w[0])).sum::<u128>()
            })
            .sum();
        let n = itl.len();
        let a = Stats::of_at(&mut itl, extra);
        let b = Stats::of_token_gaps(&TokenTally::new(log, &recs), extra);
        for dense in [false, true] {
            let c = Stats::of_token_gaps(&TokenTally::with_cover(log, &recs, dense), extra);
            prop_assert_eq!(format!("{b:?}"), format!("{c:?}"));
            // Counted in 64 bits, as past 2^32 gaps.
            let c = Stats::of_token_gaps_counted::<u64>(&TokenTally::with_cover(log, &recs, dense), extra);
            prop_assert_eq!(format!("{b:?}"), format!("{c:?}"));
        }
        if n == 0 {
            prop_assert_eq!(b, Stats::default());
            return Ok(());
        }
        for (x, y) in
            [(a.median, b.median), (a.p50, b.p50), (a.p90, b.p90), (a.p95, b.p95), (a.p99, b.p99), (a.max, b.max)]
        {
            prop_assert_eq!(x.to_bits(), y.to_bits());
        }
        prop_assert_eq!(a.extra.len(), b.extra.len());
        for (x, y) in a.extra.iter().zip(&b.extra) {
            prop_assert_eq!(x.0, y.0);
            prop_assert_eq!(x.1.to_bits(), y.1.to_bits());
        }
        prop_assert_eq!(b.mean.to_bits(), (exact_ns as f64 / n as f64 / 1e6).to_bits());
        prop_assert!((a.mean - b.mean).abs() <= 1e-9 * a.max.max(1e-9), "mean {} vs {}", a.mean, b.mean);
        prop_assert!((a.std - b.std).abs() <= 1e-9 * a.max.max(1e-9), "std {} vs {}", a.std, b.std);
        Ok(())
    }

    fn dense_peaks(log: &TokenLog, recs: &[&RequestRecord], start: u64, duration_ns: u64) -> (u64, u64) {
        let buckets = (duration_ns / 1_000_000_000 + 1) as usize;
        let mut tokens = vec![0u64; buckets];
        let mut conc = vec![0u64; buckets];
        for r in recs {
            let times: Vec<u64> = log.times(&r.tokens).collect();
            for &t in &times {
                let b = ((t.saturating_sub(start)) / 1_000_000_000) as usize;
                tokens[b.min(buckets - 1)] += 1;
            }
            let b0 = (r.dispatch_ns.saturating_sub(start) / 1_000_000_000) as usize;
            let b1 = (times.last().copied().unwrap_or(r.dispatch_ns).saturating_sub(start) / 1_000_000_000) as usize;
            for c in conc.iter_mut().take(b1.min(buckets - 1) + 1).skip(b0.min(buckets - 1)) {
                *c += 1;
            }
        }
        (tokens.iter().copied().max().unwrap_or(0), conc.iter().copied().max().unwrap_or(0))
    }

    fn assert_peaks(log: &TokenLog, records: &[RequestRecord], start: u64) -> Result<(), TestCaseError> {
        let recs: Vec<&RequestRecord> = records.iter().collect();
        let Some(end) = recs.iter().map(|r| log.times(&r.tokens).last().unwrap_or(r.dispatch_ns)).max() else {
            return Ok(());
        };
        let want = dense_peaks(log, &recs, start, end - start);
        for dense in [false, true] {
            let tally = TokenTally::with_cover(log, &recs, dense);
            prop_assert_eq!(peaks_per_second(&tally, &recs, start, end - start), want);
            // The sorted runs (where the buckets are many).
            prop_assert_eq!(peaks_per_second_dense_below(&tally, &recs, start, end - start, 0), want);
        }
        Ok(())
    }

    /// Gaps so long that the exact sums leave 128 bits take the float pass, with the same
    /// order statistics and a mean and std within rounding of numpy's.
    #[test]
    fn gap_stats_of_gaps_past_the_exact_sums() {
        let huge = 1u64 << 62;
        let (log, records) = records_of_gaps(&[vec![huge, huge, 7, huge], vec![huge, 3, 5], vec![1, 2]]);
        assert_gap_stats(&log, &records, &[25.0]).unwrap();
    }

    proptest! {
        /// Sparse peaks equal the dense buckets' (vllm bench serve's `calculate_metrics`), for
        /// records each with deliveries of its own and for records sharing deliveries.
        #[test]
        fn sparse_peaks_equal_dense_buckets(
            reqs in prop::collection::vec((0u64..20_000_000_000, prop::collection::vec(1u64..3_000_000_000, 0..20)), 1..30),
            gaps in prop::collection::vec(0u64..1_500_000_000, 0..200),
            shared in prop::collection::vec((any::<usize>(), 0u64..5_000_000_000, prop::collection::vec(0usize..4, 0..40)), 1..30),
        ) {
            let start = 1_000;
            let mut log = TokenLog::default();
            let records: Vec<RequestRecord> = reqs
                .iter()
                .map(|(d, gaps)| {
                    let mut t = start + d;
                    let dispatch = t;
                    let times: Vec<u64> = gaps.iter().map(|g| { t += g; t }).collect();
                    RequestRecord { dispatch_ns: dispatch, tokens: log.append(&times), ..Default::default() }
                })
                .collect();
            assert_peaks(&log, &records, start)?;
            let (log, records) = records_sharing(&gaps, &shared);
            assert_peaks(&log, &records, start)?;
        }
    }

    proptest! {
        /// The token gaps' statistics from the log are those of the concatenated gaps in
        /// milliseconds (small gaps, gaps past `u32::MAX` ns, and gaps at and around it), for
        /// records with deliveries of their own and records sharing deliveries (the counted
        /// gaps), with the extra percentiles `--metric-percentiles` asks for.
        #[test]
        fn token_gap_stats_equal_stats_of_the_concatenated_gaps(
            reqs in prop::collection::vec(prop::collection::vec(prop_oneof![0u64..50_000_000, 0u64..9_000_000_000, 4_294_967_290u64..4_294_967_300], 0..40), 0..20),
            gaps in prop::collection::vec(prop_oneof![0u64..50_000_000, 20_000_000u64..20_000_100, 0u64..9_000_000_000, 4_294_967_290u64..4_294_967_300], 0..300),
            shared in prop::collection::vec((any::<usize>(), 0u64..5_000_000, prop::collection::vec(prop_oneof![Just(1usize), 0usize..5], 0..60)), 0..40),
            extra in prop::collection::vec(0.0f64..=100.0, 0..4),
        ) {
            let (log, records) = records_of_gaps(&reqs);
            assert_gap_stats(&log, &records, &[])?;
            assert_gap_stats(&log, &records, &extra)?;
            let (log, records) = records_sharing(&gaps, &shared);
            assert_gap_stats(&log, &records, &[])?;
            assert_gap_stats(&log, &records, &extra)?;
        }
    }

    proptest! {
        /// Percentiles asked for beyond the fixed ones (`--metric-percentiles 25,99.9`) are
        /// numpy's linear-interpolation percentiles of the sorted values, and ask nothing of the
        /// others.
        #[test]
        fn extra_percentiles_are_numpys_of_the_sorted_values(
            mut values in prop::collection::vec(0.0f64..9_000.0, 1..300),
            extra in prop::collection::vec(0.0f64..=100.0, 0..4),
        ) {
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            let mut same = values.clone();
            let st = Stats::of_at(&mut values, &extra);
            prop_assert_eq!(st.extra.len(), extra.len());
            for (&p, &(q, v)) in extra.iter().zip(&st.extra) {
                prop_assert_eq!(p, q);
                prop_assert_eq!(v.to_bits(), percentile(&sorted, p).to_bits(), "p{}", p);
                prop_assert_eq!(st.at(p), Some(v));
            }
            // The fixed ones are as without extras.
            let plain = Stats::of(&mut same);
            prop_assert_eq!((st.p50, st.p90, st.p99, st.mean), (plain.p50, plain.p90, plain.p99, plain.mean));
        }
    }

    proptest! {
        /// The weighted order statistics equal a full sort of every copy, for spread, clustered
        /// (a crowded high half) and constant values, with weights.
        #[test]
        fn weighted_order_statistics_equal_a_sort(
            spread in prop::collection::vec((any::<u32>(), 1u64..4), 0..200),
            cluster in prop::collection::vec((0u32..3_000, 1u64..3), 0..12_000),
            base in 0u32..4_000_000_000,
            outlier in prop::option::of((any::<u32>(), 1u64..1000)),
            constant in prop::collection::vec((Just(7u32), 1u64..9), 0..50),
        ) {
            let mut v: Vec<(u32, u64)> = spread;
            v.extend(cluster.iter().map(|&(c, w)| (base.saturating_add(c), w)));
            v.extend(outlier);
            v.extend(constant);
            let total: u64 = v.iter().map(|p| p.1).sum();
            if total > 0 {
                let mut high = vec![0u64; 1 << 16];
                for &(x, w) in &v {
                    high[(x >> 16) as usize] += w;
                }
                let mut sorted: Vec<u32> = v.iter().flat_map(|&(x, w)| std::iter::repeat_n(x, w as usize)).collect();
                sorted.sort_unstable();
                struct Pairs<'a>(&'a [(u32, u64)]);
                impl WeightedValues for Pairs<'_> {
                    fn for_each(&self, mut f: impl FnMut(u32, u64)) {
                        self.0.iter().for_each(|&(x, w)| f(x, w))
                    }
                }
                let visit = Pairs(&v);
                let ranks = stat_ranks(total as usize, &[]);
                let want: Vec<u32> = ranks.iter().map(|&r| sorted[r]).collect();
                prop_assert_eq!(weighted_order_statistics_u32(&visit, &mut high.clone(), &ranks), want);
                let all: Vec<usize> = (0..total as usize).step_by(7).collect();
                let want: Vec<u32> = all.iter().map(|&r| sorted[r]).collect();
                prop_assert_eq!(weighted_order_statistics_u32(&visit, &mut high.clone(), &all), want);
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

#[cfg(test)]
mod goodput_tests {
    use super::*;
    use crate::engine::EngineCounters;
    use crate::simulation::{GaugeStats, StopReason};

    fn slos(ttft: Option<f64>, tpot: Option<f64>, e2el: Option<f64>) -> GoodputSlos {
        GoodputSlos { ttft_ms: ttft, tpot_ms: tpot, e2el_ms: e2el }
    }

    /// Each verdict as Python gives it for vLLM's `calculate_metrics` on the same times in seconds
    /// (`slo / 1000 >= value`, TPOT `(latency - ttft) / (output_len - 1)`).
    #[test]
    fn an_objective_is_met_at_equality_as_vllm_compares_floats_of_seconds() {
        let ttft100 = slos(Some(100.0), None, None);
        // 0.1 s against 100 / 1000 = 0.1: equal, met; a nanosecond more is not.
        assert!(ttft100.met_by(100_000_000, 500_000_000, 10));
        assert!(!ttft100.met_by(100_000_001, 500_000_000, 10));
        // E2EL likewise: 0.2 s against 200 ms.
        let e2el200 = slos(None, None, Some(200.0));
        assert!(e2el200.met_by(50_000_000, 200_000_000, 7));
        assert!(!e2el200.met_by(50_000_000, 200_000_001, 7));
        // TPOT (0.11 - 0.01) / 10 = 0.009999999999999998 s: met by tpot:10.
        assert!(slos(None, Some(10.0), None).met_by(10_000_000, 110_000_000, 11));
        // TPOT of exactly 13 ms in whole nanoseconds (first token at 1 ms, the second at 14 ms):
        // vLLM's floats make it 0.014 - 0.001 = 0.013000000000000001 s, above 13 / 1000 = 0.013,
        // so tpot:13 is missed (a computation in milliseconds, 14 - 1 = 13, would meet it), and
        // the next float of milliseconds up meets it.
        assert!(!slos(None, Some(13.0), None).met_by(1_000_000, 14_000_000, 2));
        assert!(slos(None, Some(13.000000000000002), None).met_by(1_000_000, 14_000_000, 2));
    }

    #[test]
    fn a_one_token_output_has_a_tpot_of_zero_for_goodput() {
        // "if output_len <= 1, we regard tpot as 0 for goodput": tpot:0 is met by one token
        // whatever its latency, and missed by two tokens a nanosecond apart.
        let tpot0 = slos(None, Some(0.0), None);
        assert!(tpot0.met_by(5_000_000_000, 9_000_000_000, 1));
        assert!(!tpot0.met_by(5_000_000, 5_000_001, 2));
        // Its other objectives still apply: E2EL 9 s against e2el:9000, then a nanosecond over.
        assert!(slos(None, Some(0.0), Some(9000.0)).met_by(5_000_000_000, 9_000_000_000, 1));
        assert!(!slos(None, Some(0.0), Some(9000.0)).met_by(5_000_000_000, 9_000_000_001, 1));
    }

    #[test]
    fn a_request_is_good_only_when_it_meets_every_objective_given() {
        // TTFT 50 ms, E2EL 150 ms, 11 tokens: TPOT 10 ms.
        let (t, e, n) = (50_000_000, 150_000_000, 11);
        assert!(slos(Some(50.0), Some(10.0), Some(150.0)).met_by(t, e, n));
        assert!(!slos(Some(49.0), Some(10.0), Some(150.0)).met_by(t, e, n));
        assert!(!slos(Some(50.0), Some(9.0), Some(150.0)).met_by(t, e, n));
        assert!(!slos(Some(50.0), Some(10.0), Some(149.0)).met_by(t, e, n));
        assert!(slos(None, None, None).met_by(t, e, n), "no objective: nothing to miss");
    }

    #[test]
    fn objectives_are_parsed_and_refused_as_vllm_checks_them() {
        assert_eq!(GoodputSlos::parse(&["ttft:500", "tpot:50"]), Ok(slos(Some(500.0), Some(50.0), None)));
        assert_eq!(GoodputSlos::parse(&["e2el:1e3", "ttft: 0 "]), Ok(slos(Some(0.0), None, Some(1000.0))));
        assert_eq!(GoodputSlos::parse(&["tpot:inf"]), Ok(slos(None, Some(f64::INFINITY), None)));
        let err = |pairs: &[&str]| GoodputSlos::parse(pairs).unwrap_err();
        // vLLM's messages: "Invalid format found for service level objectives", "Invalid metric
        // name found, {name}: {value}. The service level objective name should be one of
        // ['ttft', 'tpot', 'e2el']", "Invalid value found ... should be non-negative".
        for bad in ["ttft", "ttft:1:2", "ttft:", "ttft:fast"] {
            assert!(
                err(&[bad]).starts_with("invalid format found for service level objectives"),
                "{bad}: {}",
                err(&[bad])
            );
        }
        assert!(err(&["scenario.json"]).contains("the flag takes every value after it"));
        let e = err(&["ttft:5", "itl:5"]);
        assert!(e.contains("invalid metric name found, \"itl\": 5") && e.contains("one of ttft, tpot, e2el"), "{e}");
        assert!(err(&["TTFT:5"]).contains("invalid metric name found, \"TTFT\""));
        let e = err(&["tpot:-1"]);
        assert!(e.contains("invalid value found, tpot: -1") && e.contains("non-negative"), "{e}");
        // Stricter than vLLM where it goes on silently.
        assert!(err(&["ttft:nan"]).contains("ttft: NaN"));
        assert!(err(&["ttft:100", "ttft:200"]).contains("ttft given twice"));
        assert!(err(&[]).starts_with("no objective given"));
        // A format error is found before a name or a value, as `parse_goodput` runs first.
        assert!(err(&["itl:-1", "ttft"]).starts_with("invalid format found"));
    }

    /// A run of records dispatched at 0 whose tokens arrive at the given times (ns), `completed`
    /// as given, over a benchmark of `duration_ns`.
    fn run_of(reqs: &[(&[u64], bool)], duration_ns: u64) -> RunResult {
        let mut log = TokenLog::default();
        let records = reqs
            .iter()
            .map(|&(times, completed)| RequestRecord {
                output_len: times.len() as u32,
                tokens: log.append(times),
                completed,
                ..Default::default()
            })
            .collect();
        RunResult {
            records,
            bench_start_ns: 0,
            bench_end_ns: duration_ns,
            counters: EngineCounters::default(),
            gauges: GaugeStats::default(),
            timeseries: Vec::new(),
            kv_capacity_tokens: 0,
            stop: StopReason::Completed,
            num_steps: 0,
            end_ns: duration_ns,
            ingress_ns: 0,
            fast_forwarded_steps: 0,
            lazy_decoded_tokens: 0,
            token_log: log,
            role_chunk_gaps: false,
            uncounted_prompt_tokens: 0,
            measure_window_ns: None,
        }
    }

    #[test]
    fn request_goodput_is_the_good_completed_requests_over_the_duration() {
        let run = run_of(
            &[
                (&[100_000_000, 110_000_000, 120_000_000], true), // TTFT 100 ms, TPOT 10 ms: good
                (&[100_000_000, 130_000_000], true),              // TPOT 30 ms: misses tpot:20
                (&[150_000_000], true),                           // TTFT 150 ms: misses ttft:100
                (&[40_000_000], true),                            // one token, TPOT 0: good
                (&[10_000_000, 20_000_000], false),               // failed: never good
            ],
            4_000_000_000,
        );
        let m = bench_metrics_with(&run, &[], Some(&slos(Some(100.0), Some(20.0), None)));
        assert_eq!(m.completed, 4);
        assert_eq!(m.request_goodput, Some(2.0 / 4.0));
        // No objective met by anyone, and every one met.
        assert_eq!(bench_metrics_with(&run, &[], Some(&slos(Some(0.0), None, None))).request_goodput, Some(0.0));
        let all = bench_metrics_with(&run, &[], Some(&slos(None, None, Some(1e9)))).request_goodput;
        assert_eq!(all, Some(m.request_throughput));
        // Without objectives, none (`null`), and nothing else moves.
        let plain = bench_metrics_at(&run, &[]);
        assert_eq!(plain.request_goodput, None);
        assert_eq!(BenchMetrics { request_goodput: None, ..m }, plain);
    }
}
