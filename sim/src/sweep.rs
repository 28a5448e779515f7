//! Reading a sweep: the throughput knee and the KV-limited concurrency, and
//! the typed result of a sweep ([`SweepSeries`]), which the command line
//! renders as text or JSON (and a browser build can call directly).
//!
//! # The knee: one definition
//!
//! `sweep`, `explain`, `check` (measured and predicted), `tune` and the plots
//! all call [`find_knee`]. The definition, from first principles:
//!
//! A benchmark client at concurrency `N` keeps `N` requests in flight; by
//! Little's law its latency is `R = N / X` for output throughput `X` (in
//! requests). Raising `N` by a factor `n` and seeing throughput rise by a
//! factor `x` therefore raises latency by `n / x`: the share of the added
//! concurrency that came back as throughput is the elasticity
//! `e = ln x / ln n` (1: all of it, as when the engine batches more requests
//! per step at no cost; 0: none, every added request only queues). Once the
//! engine holds all it can (the KV pool, or `max_num_seqs` /
//! `max_running_requests`, binds) throughput stops at a plateau and `e` falls
//! to about 0 while TTFT grows with the queue.
//!
//! The knee is the **last point before throughput gains stop paying for
//! queueing**: the first point `i` (points in increasing concurrency) such
//! that no later point `j` *pays*, where `j` pays when both
//!
//! * its throughput gain over `i` is above noise: `X_j > (1 + 2%) · X_i`
//!   ([`KNEE_THROUGHPUT_NOISE`]), and
//! * at least a tenth of the added concurrency came back as throughput:
//!   `ln(X_j / X_i) / ln(N_j / N_i) ≥ 0.1` ([`KNEE_MIN_ELASTICITY`]); below
//!   that, over 90% of the extra requests in flight only wait;
//!
//! and queueing does grow past `i`: some later point's mean TTFT exceeds
//! `i`'s by more than 5% ([`KNEE_TTFT_NOISE`]; a plateau whose latency does not
//! grow, such as a sweep past its prompt count, is not a knee). If no point
//! qualifies (throughput still pays at the sweep's end), the knee is *not
//! reached*.
//!
//! The tolerances are the noise levels the calibration assumes for these
//! metrics (`target_noise`: 2% for throughput, 5% for TTFT), so differences of
//! that size are not evidence and cannot move the knee, and the elasticity
//! threshold sits far from both the batching regime (`e` ≈ 0.2–1) and the
//! saturated one (`e` ≤ 0). The rule it replaces ("the first point past which
//! throughput grows less than 5%") compared gains with a threshold as large
//! as real ones: on the default scenario with the linear cost model, 556.6 →
//! 584.2 tok/s from concurrency 32 to 42 (+4.96%, `e` = 0.18) put the knee at
//! 32 although the pool holds 42 requests and TTFT explodes only past 42; here
//! 32 → 42 pays, nothing past 42 does, and the knee is 42, the KV-limited
//! concurrency (with the measured-kernel costs too: 820.8 → 871.4, +6.2%).

use serde::Serialize;
use serde_json::Value;

use crate::config::SimSpec;
use crate::explain::thousands;
use crate::workload::Workload;
use crate::SimOutput;

/// Throughput within this fraction of the sweep's largest is on the plateau.
pub const KNEE_THROUGHPUT_NOISE: f64 = 0.02;
/// Mean TTFT must grow by more than this fraction past the knee.
pub const KNEE_TTFT_NOISE: f64 = 0.05;
/// A later point pays for its extra concurrency when at least this share of it
/// came back as throughput (`ln(X_j / X_i) / ln(N_j / N_i)`).
pub const KNEE_MIN_ELASTICITY: f64 = 0.1;

/// How many requests the KV pool holds at once.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KvLimit {
    /// Mean prompt + output tokens of the workload's requests (less the shared prefix held
    /// once, where the prefix cache is on and prompts share one).
    pub mean_request_tokens: f64,
    /// That, rounded up to whole blocks (pages).
    pub footprint_tokens: u64,
    pub kv_capacity_tokens: u64,
    /// Shared prefixes held once for the requests in flight at `concurrency` that share them
    /// (whole blocks of a first prompt segment two or more requests have; the expected tokens of
    /// the distinct prefixes that many requests use, [`kv_limit`]; 0 without a prefix cache).
    pub shared_prefix_tokens: u64,
    /// Distinct shared prefixes in the workload (0 without a prefix cache or sharing).
    pub shared_prefixes: u64,
    /// The most requests whose footprints and the shared prefixes they use fit in the pool:
    /// `(kv_capacity_tokens − shared_prefix_tokens) / footprint_tokens`, rounded down, where
    /// nothing is shared.
    pub concurrency: u64,
    /// A fleet whose replicas' limits differ: where a router splitting requests evenly fills
    /// the replicas with the smallest limit ([`crate::fleet::FleetLimits::even_split_concurrency`]).
    pub even_split_concurrency: Option<u64>,
}

/// KV tokens ÷ per-request footprint in whole blocks, for the workload's mean request. A
/// request holds its prompt and output less the last token: that one is sampled and the
/// request finishes without computing it, so it never takes a KV slot (vLLM's
/// `allocate_slots` covers `num_computed_tokens + num_new_tokens`; SGLang writes a token's KV
/// when it is the input of a decode).
///
/// A fleet's is the sum over its replica groups that hold requests to their end (mixed and
/// decode) of each replica's whole-request limit ([`crate::fleet::replica_limits`]), with
/// the fleet's total pool; the footprint is the first such group's.
pub fn kv_limited_concurrency(spec: &SimSpec, workload: &Workload) -> KvLimit {
    if spec.fleet.is_some() {
        let l = crate::fleet::replica_limits(spec, workload);
        let first = l.groups.iter().find(|g| g.role != crate::config::ReplicaRole::Prefill).or(l.groups.first());
        if let Some(g) = first {
            return KvLimit {
                mean_request_tokens: g.mean_request_tokens,
                footprint_tokens: g.request_footprint_tokens,
                kv_capacity_tokens: l.kv_cache_tokens,
                // Held once per replica (`fleet::replica_limits`), not once for the fleet.
                shared_prefix_tokens: 0,
                shared_prefixes: 0,
                concurrency: l.kv_limited_concurrency,
                even_split_concurrency: l.even_split_concurrency(),
            };
        }
    }
    kv_limit(spec.engine.kv_capacity_tokens(), spec.engine.kv_granularity(), spec.engine.prefix_caching(), workload)
}

/// The same from a capacity, a block (page) size and whether the prefix cache is on. With it
/// on, a first prompt segment that two or more requests share (`random_prefix_len`, a
/// `prefix_repetition` prefix, a trace's `prefix_group`) is held once for the requests in
/// flight that share it: its whole blocks (at most the prompt less one token, which is always
/// computed) leave each request's footprint, and the pool holds `n` requests when `n`
/// footprints and the distinct shared prefixes those `n` requests use fit in it. Which
/// prefixes `n` requests in flight use is taken in expectation over the workload's prefix mix
/// (group `k` a share `p_k` of the requests: `Σ_k len_k · (1 − (1 − p_k)^n)` tokens), as if
/// the requests in flight were drawn from the workload at random; a prefix no request in
/// flight uses is not held (its blocks stay cached only while the pool has room: both engines
/// evict them first). Sharing further into a prompt (a Mooncake trace's later hash ids) is not
/// counted.
pub fn kv_limit(capacity_tokens: u64, granularity: u32, prefix_caching: bool, workload: &Workload) -> KvLimit {
    let (i, o) = workload.mean_lengths();
    if prefix_caching && !workload.requests.is_empty() {
        let g = u64::from(granularity.max(1));
        let mut firsts: std::collections::BTreeMap<u64, (u32, u64)> = std::collections::BTreeMap::new();
        // A prompt's leading segment, with the BOS before it counted in (the BOS alone, which
        // every prompt of a BOS tokenizer shares, is no shared prefix: `RequestSpec::lead_segment`).
        for r in &workload.requests {
            if let Some(s) = r.lead_segment() {
                let e = firsts.entry(s.key).or_insert((0, u64::from(s.len)));
                e.0 += 1;
            }
        }
        let held = |r: &crate::request::RequestSpec| -> u64 {
            match r.lead_segment().and_then(|s| firsts.get(&s.key).filter(|e| e.0 >= 2).map(|_| s.len)) {
                Some(len) => u64::from(len.min(r.prompt_len.saturating_sub(1))) / g * g,
                None => 0,
            }
        };
        let per_request: u64 = workload.requests.iter().map(held).sum();
        if per_request > 0 {
            let n_req = workload.requests.len() as f64;
            // (share of the requests, whole-block length) of each shared prefix.
            let groups: Vec<(f64, u64)> =
                firsts.values().filter(|e| e.0 >= 2).map(|e| (f64::from(e.0) / n_req, e.1 / g * g)).collect();
            let mean_shared = per_request as f64 / n_req;
            let mut l = kv_limit_of_mean(capacity_tokens, granularity, (i + o - 1.0 - mean_shared).max(1.0));
            // Expected tokens of the distinct shared prefixes `n` requests in flight use.
            let prefixes = |n: u64| -> f64 {
                let n = i32::try_from(n).unwrap_or(i32::MAX);
                groups.iter().map(|&(p, len)| len as f64 * (1.0 - (1.0 - p).powi(n))).sum()
            };
            let fits = |n: u64| (n * l.footprint_tokens) as f64 + prefixes(n) <= capacity_tokens as f64;
            // The largest `n` that fits (the left side grows with `n`): at most `capacity /
            // footprint`, which holds the footprints alone.
            let (mut lo, mut hi) = (0u64, capacity_tokens / l.footprint_tokens);
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if fits(mid) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            l.concurrency = lo;
            l.shared_prefix_tokens = prefixes(lo.max(1)).round() as u64;
            l.shared_prefixes = groups.len() as u64;
            return l;
        }
    }
    kv_limit_of_mean(capacity_tokens, granularity, (i + o - 1.0).max(1.0))
}

/// The same for a request of `mean` tokens: its footprint in whole blocks (pages) of
/// `granularity`, and how many such requests `capacity_tokens` hold.
pub fn kv_limit_of_mean(capacity_tokens: u64, granularity: u32, mean: f64) -> KvLimit {
    let g = u64::from(granularity.max(1));
    let footprint = ((mean.ceil() as u64).div_ceil(g) * g).max(g);
    KvLimit {
        mean_request_tokens: mean,
        footprint_tokens: footprint,
        kv_capacity_tokens: capacity_tokens,
        shared_prefix_tokens: 0,
        shared_prefixes: 0,
        concurrency: capacity_tokens / footprint,
        even_split_concurrency: None,
    }
}

/// One point of a sweep as the knee finder sees it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct KneePoint {
    pub concurrency: f64,
    pub output_throughput: f64,
    pub mean_ttft_ms: f64,
}

/// The knee (see the module docs): the first point past which no later point's
/// throughput gain pays for its added concurrency, provided mean TTFT grows past
/// it. Points must be in increasing concurrency; points at the same concurrency (repeats of
/// one load, as a published set may hold) say nothing of what added concurrency buys, so
/// only the points at a higher concurrency are compared with a point. `None` if the sweep
/// never reaches it.
pub fn find_knee(points: &[KneePoint]) -> Option<usize> {
    let pays = |i: &KneePoint, j: &KneePoint| {
        let x = j.output_throughput / i.output_throughput;
        let n = j.concurrency / i.concurrency;
        x > 1.0 + KNEE_THROUGHPUT_NOISE && n > 1.0 && x.ln() / n.ln() >= KNEE_MIN_ELASTICITY
    };
    (0..points.len().saturating_sub(1)).find(|&i| {
        let p = &points[i];
        if !(p.output_throughput > 0.0 && p.concurrency > 0.0) {
            return false;
        }
        let later: Vec<&KneePoint> = points[i + 1..].iter().filter(|q| q.concurrency > p.concurrency).collect();
        let queue_grows = later.iter().any(|q| q.mean_ttft_ms > p.mean_ttft_ms * (1.0 + KNEE_TTFT_NOISE));
        queue_grows && !later.iter().any(|q| pays(p, q))
    })
}

/// The knee of a sweep, as reports carry it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Knee {
    pub max_concurrency: u64,
    /// Its index in the sweep's points.
    pub index: usize,
    pub output_throughput: f64,
    pub mean_ttft_ms: f64,
}

/// [`find_knee`] as a [`Knee`].
pub fn knee(points: &[KneePoint]) -> Option<Knee> {
    find_knee(points).map(|i| Knee {
        max_concurrency: points[i].concurrency as u64,
        index: i,
        output_throughput: points[i].output_throughput,
        mean_ttft_ms: points[i].mean_ttft_ms,
    })
}

/// The knee points of simulated runs at the given concurrencies.
pub fn knee_points(concurrency: &[u32], outs: &[SimOutput]) -> Vec<KneePoint> {
    concurrency
        .iter()
        .zip(outs)
        .map(|(&c, o)| KneePoint {
            concurrency: f64::from(c),
            output_throughput: o.metrics.output_throughput,
            mean_ttft_ms: o.metrics.ttft.mean,
        })
        .collect()
}

/// The knee of simulated runs at the given concurrencies; `None` when a run did not
/// complete (its metrics cover only the requests that finished before it stopped, so no
/// knee drawn through it would mean anything; [`sweep_warnings`] says which).
pub fn sweep_knee(concurrency: &[u32], outs: &[SimOutput]) -> Option<Knee> {
    if any_incomplete(outs) {
        return None;
    }
    knee(&knee_points(concurrency, outs))
}

/// One scenario's sweep, resolved and run: what `servesim sweep --json` prints for it.
#[derive(Clone, Debug, Serialize)]
pub struct SweepSeries {
    pub scenario: String,
    pub engine: String,
    /// Each point's report.
    pub points: Vec<crate::report::PointReport>,
    pub knee: Option<Knee>,
    /// Why no knee was searched (an open-loop scenario, [`OPEN_LOOP_KNEE_NOTE`]; a point that did
    /// not complete, [`INCOMPLETE_KNEE_NOTE`]); absent when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub knee_note: Option<String>,
    /// The KV-limited concurrency and request footprint of the point with the largest request
    /// sample (each point's own are in its report).
    pub kv_limited_concurrency: u64,
    pub kv_request_footprint_tokens: u64,
    pub kv_cache_tokens: u64,
    pub kv_limit_explanation: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub translation_notes: Vec<String>,
    /// Points that cannot say what they seem to (a concurrency above the prompt count).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Warnings on a sweep's points: a run that did not complete; a concurrency above the
/// number of prompts, which never has that many requests in flight, so the point repeats
/// the one before.
pub fn sweep_warnings(concurrency: &[u32], outs: &[SimOutput]) -> Vec<String> {
    let mut w = Vec::new();
    for (&c, o) in concurrency.iter().zip(outs) {
        if o.run.stop != crate::simulation::StopReason::Completed {
            w.push(format!(
                "concurrency {c} did not complete ({}): {}, and the knee is not searched",
                o.run.stop.as_str(),
                o.run.stop.figures_cover()
            ));
        }
        let n = o.workload.requests.len() as u64;
        if u64::from(c) > n {
            w.push(format!(
                "concurrency {c} exceeds the {n} prompts of its point: at most {n} requests are ever in flight, so this point measures concurrency {n}; raise --num-prompts (at least {c}, better several times {c})"
            ));
        }
    }
    w
}

/// Whether a spec's arrivals are its own (a request rate, or a trace's or a request list's
/// timestamps): an open loop, whose throughput is what the load offers until the engine
/// saturates.
pub fn open_loop(s: &SimSpec) -> bool {
    s.workload.request_rate.is_some() || s.workload.dataset.is_trace()
}

/// Why a sweep (or `tune` along `workload.max_concurrency`) of an open-loop scenario draws no
/// knee: under an offered load, throughput stops growing where the load is met, so the knee
/// found there would be the load's, not the engine's.
pub const OPEN_LOOP_KNEE_NOTE: &str = "the scenario's arrivals are its own (a request rate or a trace's timestamps): \
    throughput is what the load offers until the engine saturates, so a knee drawn along concurrency would be the \
    load's, not the engine's; no knee is searched. `servesim explain` finds the engine's (a closed loop with the same \
    request mix), or sweep with workload.request_rate unset (vllm bench serve's --request-rate inf)";

/// Whether a run of `outs` did not complete: no knee is searched over them ([`sweep_knee`]).
pub fn any_incomplete(outs: &[SimOutput]) -> bool {
    outs.iter().any(|o| o.run.stop != crate::simulation::StopReason::Completed)
}

/// [`SweepSeries::knee_note`] of a sweep a point of which did not complete.
pub const INCOMPLETE_KNEE_NOTE: &str =
    "a point of the sweep did not complete (the warnings say which and why): no knee is searched over it";

/// Assembles a sweep's result: every point's report, the knee, the KV limit.
/// `specs[i]` ran at `concurrency[i]` and gave `outs[i]`.
pub fn sweep_series(
    label: &str,
    concurrency: &[u32],
    specs: &[SimSpec],
    outs: &[SimOutput],
    translation_notes: Vec<String>,
) -> SweepSeries {
    // The headline limit from the point with the largest request sample (the first such): the
    // points' `--num-prompts` may differ, and each point's own limit is in its report.
    let at = (0..outs.len()).rev().max_by_key(|&i| outs[i].workload.requests.len()).unwrap_or(0);
    let limit = kv_limited_concurrency(&specs[at], &outs[at].workload);
    let sentence = kv_limit_sentence_with_peak(&limit, &specs[at], peak_running(outs.iter()));
    let open = specs.iter().any(open_loop);
    SweepSeries {
        scenario: label.to_string(),
        engine: specs[0].engine.kind().to_string(),
        points: specs
            .iter()
            .zip(outs)
            .map(|(sp, o)| crate::report::PointReport::of(sp, o).with_caveat_runs(sp, o))
            .collect(),
        knee: if open { None } else { sweep_knee(concurrency, outs) },
        knee_note: if open {
            Some(OPEN_LOOP_KNEE_NOTE.to_string())
        } else if any_incomplete(outs) {
            Some(INCOMPLETE_KNEE_NOTE.to_string())
        } else {
            None
        },
        kv_limited_concurrency: limit.concurrency,
        kv_request_footprint_tokens: limit.footprint_tokens,
        kv_cache_tokens: limit.kv_capacity_tokens,
        kv_limit_explanation: sentence,
        translation_notes,
        warnings: sweep_warnings(concurrency, outs),
    }
}

/// A configuration of `tune`: each varied path (`--vary`) and its value, in the order
/// the knobs were given; written as a JSON object of path → value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TuneConfig(pub Vec<(String, Value)>);

impl Serialize for TuneConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// The configuration as compact JSON (`{"engine.max_num_seqs":16}`), as the text output shows it.
impl std::fmt::Display for TuneConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&serde_json::to_string(self).map_err(|_| std::fmt::Error)?)
    }
}

/// One configuration of `tune` and its report.
#[derive(Clone, Debug, Serialize)]
pub struct TuneEntry {
    /// Each varied path and its value.
    pub config: TuneConfig,
    pub metrics: crate::report::PointReport,
}

/// An SLO a configuration broke: `by` is `(value − bound) / |bound|`, `null` against a bound of
/// 0 (no relative excess to state).
#[derive(Clone, Debug, Serialize)]
pub struct SloViolation {
    pub slo: String,
    pub value: f64,
    pub bound: f64,
    pub by: Option<f64>,
}

/// A configuration that broke at least one SLO.
#[derive(Clone, Debug, Serialize)]
pub struct TuneRejected {
    pub config: TuneConfig,
    pub violations: Vec<SloViolation>,
    pub metrics: crate::report::PointReport,
}

/// A configuration that does not resolve (the scenario's validation rejects it).
#[derive(Clone, Debug, Serialize)]
pub struct TuneInvalid {
    pub config: TuneConfig,
    pub error: String,
}

/// A configuration `tune` stopped before its run ended, because an SLO was already
/// certain to break (`RunOptions::stop_after_slow_ttft`); it has no metrics.
#[derive(Clone, Debug, Serialize)]
pub struct TuneStoppedEarly {
    pub config: TuneConfig,
    /// The SLO certain to break.
    pub slo: String,
    /// Why, in words: `"stopped early: p99_ttft_ms > 2000 already certain (7 of 512 requests ...)"`.
    pub reason: String,
    /// Timed requests completed when it stopped.
    pub completed: usize,
}

/// What `servesim tune --json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct TuneResult {
    /// The best configuration meeting every SLO, by the objective.
    pub best: Option<TuneEntry>,
    /// Throughput against latency, by increasing throughput.
    pub pareto: Vec<TuneEntry>,
    pub rejected: Vec<TuneRejected>,
    pub invalid: Vec<TuneInvalid>,
    pub searched: String,
    pub objective: String,
    pub slos: Vec<String>,
    pub notes: Vec<String>,
    /// With `workload.max_concurrency` varied: the knee ([`find_knee`]) along it, the
    /// other knobs as in the best configuration (or the first valid one).
    pub knee: Option<Knee>,
    /// Configurations stopped early, each certain to break an SLO (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stopped_early: Vec<TuneStoppedEarly>,
    /// Work shared between configurations (the text output's last line; not in the JSON).
    #[serde(skip)]
    pub shared: Option<TuneShared>,
}

impl TuneResult {
    /// No configuration ran to completion: none is best, on the front, rejected by an SLO or
    /// stopped early by one (every one searched is invalid).
    pub fn nothing_completed(&self) -> bool {
        self.best.is_none() && self.pareto.is_empty() && self.rejected.is_empty() && self.stopped_early.is_empty()
    }
}

/// What `tune` shared between configurations.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TuneShared {
    /// Distinct configurations simulated (to the end or stopped early).
    pub simulated: usize,
    /// Configurations equal to one of those: its report reused.
    pub identical: usize,
    /// Distinct workloads of the single-engine configurations (configurations differing only in
    /// engine knobs or `max_concurrency` share one; each thread generates it once).
    pub distinct_workloads: usize,
    /// Distinct kernel-composed step costs (equal ones share their memos).
    pub distinct_costs: usize,
}

/// One sentence on what the KV-limited concurrency means for `spec` (a fleet: its running
/// caps and pools summed over the replicas that hold requests to their end).
pub fn kv_limit_sentence(limit: &KvLimit, spec: &SimSpec) -> String {
    kv_limit_sentence_with_peak(limit, spec, None)
}

/// The most requests any of the runs had running at once where the KV limit applies: a
/// disaggregated fleet's decode replicas together (its limit is theirs; the fleet's own peak
/// adds the prefill replicas' requests; until 2026-12-07 that sum was set against the decode
/// limit), every replica otherwise. `None` where no run measured it.
pub fn peak_running<'a>(runs: impl Iterator<Item = &'a SimOutput>) -> Option<u32> {
    runs.filter(|o| !o.run.gauges.unmeasured)
        .map(|o| o.fleet.as_ref().and_then(|f| f.decode_running_peak).unwrap_or(o.run.gauges.running_peak))
        .max()
}

/// [`kv_limit_sentence`], saying how far past the limit admission went where the runs' peak of
/// running requests (`peak`) is known.
pub fn kv_limit_sentence_with_peak(limit: &KvLimit, spec: &SimSpec, peak: Option<u32>) -> String {
    let mut s = kv_limit_sentence_alone(limit, spec, peak);
    if let Some(even) = limit.even_split_concurrency.filter(|&e| e < limit.concurrency.min(spec.max_running_total())) {
        s.push_str(&format!(
            " The replicas' limits differ: a router that splits requests evenly (round_robin, least_outstanding, power_of_two) fills those with the smallest limit from {} concurrent requests.",
            thousands(even)
        ));
    }
    s
}

/// What happens past the KV-limited concurrency: admission does not stop there (vLLM admits on
/// the prompt's KV alone; SGLang counts the running requests' remaining outputs at
/// `new_token_ratio`), so more run at once until the outputs outgrow the pool; then running ones
/// are preempted (retracted) and new ones wait. Throughput may keep growing past the figure
/// (the KV-starved Qwen2.5-7B on an A100: +19% from 10 to 16, peak running 19), or level off
/// before it: the knee says which.
fn past_the_limit(limit: &KvLimit, spec: &SimSpec, peak: Option<u32>) -> String {
    let sglang = spec.engine.engine_kind() == crate::config::EngineKind::Sglang;
    let admits = if sglang {
        "SGLang reserves KV for a new request's output but counts the running requests' remaining outputs at new_token_ratio (which can fall below 1), so it can admit more than that"
    } else {
        "vLLM admits a request on its prompt's KV alone, so more than that can run at once"
    };
    let peak = match peak {
        Some(p) if u64::from(p) > limit.concurrency => format!(
            " (up to {} ran at once in these runs, {:.0}% more)",
            thousands(u64::from(p)),
            100.0 * (f64::from(p) / limit.concurrency.max(1) as f64 - 1.0)
        ),
        Some(p) => format!(" (at most {} ran at once in these runs)", thousands(u64::from(p))),
        None => String::new(),
    };
    format!(
        "{admits}{peak}; as their outputs grow past the pool, running ones are {} (to be recomputed) and new ones wait, and TTFT grows with the queue. Throughput may still grow past this figure, or level off before it where the engine runs out of compute: see the knee.",
        if sglang { "retracted" } else { "preempted" }
    )
}

fn kv_limit_sentence_alone(limit: &KvLimit, spec: &SimSpec, peak: Option<u32>) -> String {
    let max_running = spec.max_running_total();
    let cap = spec.running_cap_words();
    let units = format!("{}s", spec.engine.engine_kind().kv_unit());
    let past = past_the_limit(limit, spec, peak);
    if max_running < limit.concurrency {
        format!(
            "{cap} binds before the KV pool does (the pool holds {} requests of {} tokens): past {} concurrent requests, new ones queue in the engine and TTFT grows with the queue.",
            thousands(limit.concurrency),
            thousands(limit.footprint_tokens),
            thousands(max_running)
        )
    } else if spec.fleet.as_ref().is_some_and(|f| f.disaggregated()) {
        let sglang_reserve = spec.fleet.as_ref().and_then(|f| f.sglang_decode_reserve());
        let units = match sglang_reserve {
            Some(r) if r > 0 => format!(
                "{units}, and the {} tokens SGLang's decode server keeps free for each request's decode",
                thousands(u64::from(r))
            ),
            _ => units,
        };
        format!(
            "The decode replicas' KV pools of {} tokens hold {} requests of {} tokens (mean prompt + output less the last token, which is never stored, in whole {units}) at once (the prefill replicas' {} tokens hold a prompt only until its KV is transferred): that is the KV-limited concurrency. {past}",
            thousands(spec.holding_kv_tokens()),
            thousands(limit.concurrency),
            thousands(limit.footprint_tokens),
            thousands(limit.kv_capacity_tokens - spec.holding_kv_tokens().min(limit.kv_capacity_tokens))
        )
    } else if limit.shared_prefix_tokens > 0 {
        format!(
            "The KV pool of {} tokens holds {} requests at once: the shared prefixes they use take about {} of them, each once (of the prompts' {} shared prefix{}), and a request needs {} tokens beyond its shared prefix (mean prompt + output less that prefix and the last token, which is never stored, in whole {units}): that is the KV-limited concurrency. {past}",
            thousands(limit.kv_capacity_tokens),
            thousands(limit.concurrency),
            thousands(limit.shared_prefix_tokens),
            limit.shared_prefixes,
            if limit.shared_prefixes == 1 { "" } else { "es" },
            thousands(limit.footprint_tokens)
        )
    } else {
        format!(
            "The KV pool of {} tokens holds {} requests of {} tokens (mean prompt + output less the last token, which is never stored, in whole {units}) at once: that is the KV-limited concurrency. {past}",
            thousands(limit.kv_capacity_tokens),
            thousands(limit.concurrency),
            thousands(limit.footprint_tokens)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The KV-limited concurrency is not where throughput stops (vLLM admits on the prompt alone,
    /// SGLang counts the running requests' outputs at new_token_ratio): the sentence says admission
    /// goes past it, by the runs' own peak where given, and what happens then (it said
    /// "throughput gains nothing past it", where the KV-starved scenario gained 19% from 10 to 16).
    #[test]
    fn the_kv_limit_sentence_says_admission_goes_past_it() {
        for (kind, version, len, word) in
            [("vllm", "0.33.0", "max_model_len", "preempted"), ("sglang", "0.5.10", "context_length", "retracted")]
        {
            let v = serde_json::json!({
                "version": 1, "engine": {"kind": kind, "version": version, len: 4096},
                "model": "llama-3.1-8b-instruct", "hardware": "h100-80gb",
                "workload": {"dataset_name": "random", "random_input_len": 1000, "random_output_len": 24,
                             "num_prompts": 20, "ignore_eos": true, "seed": 0}
            });
            let s = crate::config::from_value(v, "").unwrap();
            let spec = crate::config::resolve(&s, &crate::builtin::resources().unwrap()).unwrap();
            let w = crate::workload::generate(&spec.workload);
            let mut limit = kv_limited_concurrency(&spec, &w);
            // The pool binds (a cap far above it).
            limit.concurrency = 10;
            let s = kv_limit_sentence_with_peak(&limit, &spec, Some(19));
            assert!(!s.contains("gains nothing"), "{s}");
            assert!(s.contains("up to 19 ran at once in these runs, 90% more"), "{s}");
            assert!(s.contains(&format!("running ones are {word}")), "{s}");
            let s = kv_limit_sentence(&limit, &spec);
            assert!(!s.contains("ran at once") && s.contains("Throughput may still grow past this figure"), "{s}");
        }
    }

    fn pts(v: &[(f64, f64, f64)]) -> Vec<KneePoint> {
        v.iter().map(|&(c, t, f)| KneePoint { concurrency: c, output_throughput: t, mean_ttft_ms: f }).collect()
    }

    #[test]
    fn knee_is_where_throughput_flattens_and_ttft_rises() {
        let p = pts(&[
            (1.0, 100.0, 50.0),
            (16.0, 1200.0, 60.0),
            (64.0, 2000.0, 90.0),
            (128.0, 2050.0, 900.0),
            (256.0, 2060.0, 3000.0),
        ]);
        // 64 → 128 gains 2.5% for twice the concurrency (elasticity 0.036): it does not pay.
        assert_eq!(find_knee(&p), Some(2));
        let rising = pts(&[(1.0, 100.0, 50.0), (2.0, 200.0, 51.0)]);
        assert_eq!(find_knee(&rising), None);
        // Flat throughput but falling TTFT is not a knee.
        let flat = pts(&[(1.0, 100.0, 50.0), (2.0, 101.0, 40.0)]);
        assert_eq!(find_knee(&flat), None);
    }

    /// Repeats of one load (a published set's seeds) are not a sweep: a repeat's longer TTFT
    /// at the same throughput made the first of them a knee.
    #[test]
    fn repeats_of_one_load_are_no_knee() {
        let seeds = pts(&[(1.0, 214.9, 127.7), (1.0, 214.9, 142.1), (1.0, 214.8, 137.6)]);
        assert_eq!(find_knee(&seeds), None);
        // Beside a real sweep, the repeats change nothing: 64 is still the knee.
        let p = pts(&[
            (1.0, 100.0, 50.0),
            (1.0, 100.0, 55.0),
            (16.0, 1200.0, 60.0),
            (64.0, 2000.0, 90.0),
            (64.0, 2001.0, 95.0),
            (128.0, 2050.0, 900.0),
        ]);
        assert_eq!(find_knee(&p), Some(3));
    }

    /// The default scenario's sweep (README): 32 → 42 gains 4.96% for 31% more concurrency
    /// (elasticity 0.18): it pays, and nothing past 42 does. The knee is 42, the KV limit.
    #[test]
    fn default_scenario_knee_is_the_kv_limited_concurrency() {
        let p = pts(&[
            (1.0, 76.8, 534.5),
            (16.0, 464.4, 1921.7),
            (32.0, 556.6, 3101.8),
            (42.0, 584.2, 3855.8),
            (64.0, 566.9, 19923.3),
            (128.0, 564.7, 70622.1),
        ]);
        assert_eq!(find_knee(&p), Some(3));
        // Noise-sized moves of any point (±1.5% throughput) do not move it.
        for k in 0..p.len() {
            for f in [0.985, 1.015] {
                let mut q = p.clone();
                q[k].output_throughput *= f;
                assert_eq!(find_knee(&q), Some(3), "point {k} scaled by {f}");
            }
        }
    }

    #[test]
    fn a_sweep_that_never_saturates_has_no_knee() {
        // Throughput ∝ N/(N+16): still paying at every step.
        let p: Vec<KneePoint> = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
            .iter()
            .map(|&n| KneePoint { concurrency: n, output_throughput: 1000.0 * n / (n + 16.0), mean_ttft_ms: 10.0 * n })
            .collect();
        assert_eq!(find_knee(&p), None);
        assert_eq!(find_knee(&[]), None);
        assert_eq!(find_knee(&p[..1]), None);
    }

    /// With shared prefixes the KV-limited concurrency grows with the pool, one step at a time,
    /// and is never below the figure without sharing: a pool just large enough for every
    /// distinct prefix gave 0 (all of them charged at once, the rest divided among the
    /// suffixes) where a slightly smaller one gave 6 (the audit of 2026-12-06). One prefix
    /// shared by all is held once: `(capacity − prefix) / suffix`.
    #[test]
    fn shared_prefixes_kv_limit_grows_with_the_pool() {
        use crate::workload::{generate, Dataset};
        let params =
            |dataset| crate::workload::WorkloadParams { num_prompts: 400, ..crate::workload::test_params(dataset) };
        let w = generate(&params(Dataset::PrefixRepetition {
            prefix_len: 1024,
            suffix_len: 128,
            num_prefixes: 8,
            output_len: 128,
        }));
        let mut last = 0;
        for capacity in (2048..40_000).step_by(16) {
            let l = kv_limit(capacity, 16, true, &w);
            let alone = kv_limit(capacity, 16, false, &w);
            assert!(l.concurrency >= last, "{capacity}: {} after {last}", l.concurrency);
            assert!(l.concurrency >= alone.concurrency, "{capacity}: {} below {}", l.concurrency, alone.concurrency);
            assert!(l.concurrency <= last + 1, "{capacity}: {} after {last}", l.concurrency);
            assert_eq!((l.footprint_tokens, l.shared_prefixes), (256, 8));
            last = l.concurrency;
        }
        // A large pool holds every prefix once: what is left, in suffixes.
        let l = kv_limit(100_000, 16, true, &w);
        assert_eq!(l.concurrency, (100_000 - 8 * 1024) / 256);
        let one =
            generate(&params(Dataset::Random { input_len: 1100, output_len: 100, range_ratio: 0.0, prefix_len: 1000 }));
        let l = kv_limit(50_000, 16, true, &one);
        assert_eq!((l.shared_prefixes, l.shared_prefix_tokens, l.footprint_tokens), (1, 992, 1216));
        // The prefix comes on top of the random input, as in `vllm bench serve`: 2,100 + 100 − 1 − 992.
        assert_eq!(l.concurrency, (50_000 - 992) / 1216);
    }
}
