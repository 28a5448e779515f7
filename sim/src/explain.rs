//! `explain`'s computation: why the metrics are what they are, in numbers and
//! sentences, as a typed, serializable [`Explanation`]. The command line
//! renders it as text or JSON; a browser build can call [`explain`] directly.
//!
//! It runs the scenario at the concurrency to explain, and a small sweep
//! around the limit that binds first (the KV pool, or `max_num_seqs` /
//! `max_running_requests`) to find the knee with [`crate::sweep::find_knee`],
//! the same definition `sweep` uses. [`plan`] says which runs to make,
//! [`assemble`] reads their outputs (so a caller may run them in parallel);
//! [`explain`] does both, one run after the other.

use serde::Serialize;

use crate::config::{Deployment, MemoryAccount, SimSpec};
use crate::simulation::RunOptions;
use crate::sweep::{kv_limited_concurrency, open_loop, KvLimit};
use crate::workload::Dataset;
use crate::SimOutput;

/// The explained run gets `4 × concurrency` prompts (enough waves to reach its
/// steady state), at most this many (and at least the scenario's own count).
pub const MAX_EXPLAIN_PROMPTS: u32 = 50_000;
/// The largest concurrency `explain` accepts.
pub const MAX_EXPLAIN_CONCURRENCY: u32 = 1_000_000;

/// The runs an explanation needs.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The concurrency explained; `None`: the scenario's own open-loop load (a request rate
    /// or a trace's arrivals) with no cap on requests in flight.
    pub concurrency: Option<u32>,
    /// The run at that concurrency.
    pub point: SimSpec,
    /// Concurrencies of the sweep around the limit, increasing.
    pub grid: Vec<u32>,
    /// The run at each of them; where [`Plan::wider_pool`] is given, followed by the same
    /// sweep with that pool.
    pub grid_specs: Vec<SimSpec>,
    /// Where the KV pool binds first (a single engine): a pool at least [`WIDER_POOL`] times as
    /// large and holding more requests than the pool, in tokens, and the KV-limited concurrency
    /// it gives; or why none was tried. The same sweep is run with it, to tell whether the knee
    /// moves with the pool or the engine is out of compute first.
    pub wider_pool: Option<WiderPool>,
    /// Where the running cap binds first (`max_num_seqs` / `max_running_requests`): the
    /// requests the engines run at once with every cap raised [`WIDER_CAP`] times. The same
    /// sweep is run with it, after the grid's, to tell whether the knee moves with the cap or the
    /// engine is out of compute first.
    pub wider_cap: Option<u64>,
    /// A trace's (or request list's) number of requests, where the sweep's grid was cut at it: a
    /// closed loop over the trace never has more in flight.
    pub trace_requests: Option<u32>,
    /// Notes on how the runs were sized (a capped prompt count).
    pub notes: Vec<String>,
    /// The KV-limited concurrency of the prompts the knee's sweep runs (its largest point's, as
    /// `sweep` reports it over the same grid).
    pub limit: KvLimit,
}

/// The knee is a closed loop's (`vllm bench serve --max-concurrency N --request-rate inf`): the
/// arrivals set aside, every request sent as soon as one of the N slots is free, the request
/// mix kept. Under an offered rate, throughput stops growing where the rate is met, not where
/// the engine saturates: a knee found there would be the load's, not the engine's.
fn closed_loop(s: &mut SimSpec) {
    s.workload.request_rate = None;
    match &mut s.workload.dataset {
        Dataset::Trace { rows } => rows.iter_mut().for_each(|r| r.arrival_time = 0.0),
        Dataset::Requests { requests } => std::sync::Arc::make_mut(requests).iter_mut().for_each(|r| r.arrival_ns = 0),
        _ => {}
    }
}

/// The explained run's load in words: "concurrency N", or its rate or trace and any cap.
fn load_phrase(s: &SimSpec, open: bool) -> String {
    if !open {
        return format!("concurrency {}", s.workload.max_concurrency.unwrap_or(1));
    }
    let arrivals = match (&s.workload.dataset, s.workload.request_rate) {
        (Dataset::Trace { .. } | Dataset::Requests { .. }, _) => "the trace's arrivals".to_string(),
        (_, Some(r)) => format!("a request rate of {r} requests/s"),
        (_, None) => "requests sent at once".to_string(),
    };
    match s.workload.max_concurrency {
        Some(c) => format!("{arrivals}, at most {c} in flight"),
        None => arrivals,
    }
}

fn with_load(base: &SimSpec, concurrency: u32, prompts: Option<u32>) -> SimSpec {
    let mut s = base.clone();
    s.workload.max_concurrency = Some(concurrency);
    if let Some(mut p) = prompts {
        if let Dataset::PrefixRepetition { num_prefixes, .. } = &s.workload.dataset {
            p = p.max(*num_prefixes);
        }
        s.workload.num_prompts = p;
    }
    s
}

/// Which limit binds first: (`"kv_pool"` or the running-requests knob, the concurrency it binds at).
fn binding(base: &SimSpec, kv_concurrency: u64) -> (&'static str, u64) {
    let max_running = base.max_running_total();
    if max_running < kv_concurrency {
        (running_knob(base), max_running)
    } else {
        ("kv_pool", kv_concurrency)
    }
}

fn running_knob(s: &SimSpec) -> &'static str {
    s.engine.engine_kind().running_cap_flag()
}

/// How much larger the pool of the what-if sweep is ([`Plan::wider_pool`]).
pub const WIDER_POOL: f64 = 1.5;

/// `base` with its KV pool set to about `tokens` (whole blocks or pages; a single engine).
fn with_pool(base: &SimSpec, tokens: u64) -> SimSpec {
    let mut s = base.clone();
    match &mut s.engine {
        crate::config::EngineSpec::Vllm(c) => {
            let bs = u64::from(c.block_size.max(1));
            c.num_gpu_blocks = u32::try_from(tokens / bs + 1).unwrap_or(u32::MAX - 1);
        }
        crate::config::EngineSpec::Sglang(c) => c.max_total_tokens = tokens,
    }
    s
}

/// How much higher the running caps of the what-if sweep are ([`Plan::wider_cap`]).
pub const WIDER_CAP: u32 = 2;

/// `base` with the running cap of every engine that holds requests raised [`WIDER_CAP`] times
/// (vLLM's at most its token budget, as vLLM requires): the cap alone, the pool and the CUDA
/// graphs as they are.
fn with_cap(base: &SimSpec) -> SimSpec {
    let mut s = base.clone();
    let raise = |e: &mut crate::config::EngineSpec| match e {
        crate::config::EngineSpec::Vllm(c) => {
            c.max_num_seqs = c.max_num_seqs.saturating_mul(WIDER_CAP).min(c.max_num_batched_tokens.max(c.max_num_seqs))
        }
        crate::config::EngineSpec::Sglang(c) => {
            c.max_running_requests = c.max_running_requests.saturating_mul(WIDER_CAP)
        }
    };
    match &mut s.fleet {
        Some(f) => f
            .replicas
            .iter_mut()
            .filter(|r| r.role != crate::config::ReplicaRole::Prefill)
            .for_each(|r| raise(&mut r.engine)),
        None => raise(&mut s.engine),
    }
    s
}

/// Prompts a concurrency slot at each point of the knee's sweep.
pub const EXPLAIN_PROMPTS_PER_SLOT: u32 = 8;

/// The workload `s` runs (its first `MAX_EXPLAIN_PROMPTS` prompts at most; no warm-ups).
fn workload_of(s: &SimSpec) -> crate::workload::Workload {
    crate::workload::generate(&crate::workload::WorkloadParams {
        num_prompts: s.workload.num_prompts.min(MAX_EXPLAIN_PROMPTS),
        num_warmups: 0,
        prior_run_prompts: 0,
        prior_run_prefixes: 0,
        ..s.workload.clone()
    })
}

/// The concurrencies of the knee's sweep around `limit_c` (cut at a trace's length).
fn grid_around(limit_c: u64, trace_len: Option<u32>) -> (Vec<u32>, Option<u32>) {
    let limit_c = limit_c.clamp(1, u64::from(MAX_EXPLAIN_CONCURRENCY));
    let mut grid: Vec<u32> = [
        1,
        limit_c / 4,
        limit_c / 2,
        limit_c * 3 / 4,
        limit_c,
        limit_c * 5 / 4,
        limit_c * 3 / 2,
        limit_c * 2,
        limit_c * 3,
    ]
    .into_iter()
    .map(|c| c.clamp(1, u64::from(MAX_EXPLAIN_CONCURRENCY)) as u32)
    .collect();
    // A trace (or request list) has as many requests as it has, whatever the prompt count asked:
    // a closed loop over it never has more in flight, and a point past that repeats the last.
    let trace_requests = trace_len.filter(|&n| grid.iter().any(|&c| c > n));
    if let Some(n) = trace_requests {
        for c in &mut grid {
            *c = (*c).min(n);
        }
    }
    grid.sort_unstable();
    grid.dedup();
    (grid, trace_requests)
}

/// The run of the knee's sweep at concurrency `c`: eight prompts a slot, a closed loop.
fn sweep_point(base: &SimSpec, c: u32) -> SimSpec {
    let mut s = with_load(base, c, Some(c.saturating_mul(EXPLAIN_PROMPTS_PER_SLOT).min(MAX_EXPLAIN_PROMPTS.max(c))));
    closed_loop(&mut s);
    s
}

/// The what-if pool: why it was not run, or what it is.
#[derive(Clone, Debug)]
pub enum WiderPool {
    /// The pool of the what-if sweep, in tokens, the KV-limited concurrency it gives (more than
    /// the pool's), and, where this GPU cannot hold it, why (the check `simulate` and `sweep`
    /// make on a pool given in tokens).
    Run { tokens: u64, holds: u64, beyond_gpu: Option<String> },
    /// Why no larger pool was tried (one that would hold no more requests tests nothing).
    NotTested(String),
}

/// Where a pool of `tokens` does not fit on the GPU beside the weights (the bound `simulate`
/// and `sweep` enforce on a pool given in tokens, `config::check_pinned_pool`): the GiB it
/// needs per GPU against what there is.
fn beyond_gpu(base: &SimSpec, tokens: u64) -> Option<String> {
    let d = &base.deployment;
    let per_token = base.kv_sizing.kv_bytes_per_token;
    let kv = u128::from(tokens) * u128::from(per_token);
    let weights = base.model.weight_bytes_per_gpu(d.tensor_parallel_size, d.linear_weight_bytes);
    let total = base.gpu.memory_bytes;
    (kv + u128::from(weights) > u128::from(total)).then(|| {
        let g = |b: f64| b / (1u64 << 30) as f64;
        format!(
            "{} tokens of KV cache take {:.2} GiB per GPU, and with the weights' {:.2} GiB that is more than the {:.2} GiB of one {} (simulate and sweep refuse such a pool); beside the weights it holds at most about {} tokens",
            thousands(tokens),
            g(kv as f64),
            g(weights as f64),
            g(total as f64),
            base.gpu.id,
            thousands(total.saturating_sub(weights) / per_token.max(1))
        )
    })
}

/// `n` with thousands separators, as the README writes numbers (1,050,912).
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// The runs to explain `base` at `concurrency` (default: the scenario's, or
/// twice the concurrency at which the first limit binds).
pub fn plan(base: &SimSpec, concurrency: Option<u32>) -> Result<Plan, String> {
    let trace_len = match &base.workload.dataset {
        Dataset::Trace { rows } => Some(rows.len()),
        Dataset::Requests { requests } => Some(requests.len()),
        _ => None,
    }
    .map(|n| u32::try_from(n).unwrap_or(u32::MAX).max(1));
    // The KV-limited concurrency is that of the prompts the knee's sweep runs (its largest
    // point's, as `sweep` reports it over the same grid): the scenario's own prompts (20, say)
    // are a smaller sample whose mean can differ. The grid is placed around a first estimate
    // from the scenario's prompts, then around the limit of its own prompts until the two agree.
    let w0 = crate::workload::generate(&crate::workload::WorkloadParams {
        num_prompts: base.workload.num_prompts.min(10_000),
        num_warmups: 0,
        prior_run_prompts: 0,
        prior_run_prefixes: 0,
        ..base.workload.clone()
    });
    let mut estimate = kv_limited_concurrency(base, &w0);
    let mut notes = Vec::new();
    let (limit, grid, trace_requests, wk) = {
        let mut tries = 0;
        loop {
            let (grid, trace_requests) = grid_around(binding(base, estimate.concurrency).1, trace_len);
            let top = sweep_point(base, grid.last().copied().unwrap_or(1));
            let w = workload_of(&top);
            let l = kv_limited_concurrency(&top, &w);
            tries += 1;
            if l.concurrency == estimate.concurrency || tries == 4 {
                if l.concurrency != estimate.concurrency {
                    notes.push(format!(
                        "the sweep's grid is placed around a KV-limited concurrency of {}; the prompts it runs give {} (their mean request differs from the estimate's sample)",
                        estimate.concurrency, l.concurrency
                    ));
                }
                break (l, grid, trace_requests, w);
            }
            estimate = l;
        }
    };
    let (_, binding_at) = binding(base, limit.concurrency);
    let limit_c = binding_at.clamp(1, u64::from(MAX_EXPLAIN_CONCURRENCY));
    let open = open_loop(base);
    // An open-loop scenario is explained at its own load unless a concurrency is asked for.
    let conc = match concurrency.or(base.workload.max_concurrency) {
        Some(c) => Some(c),
        None if open => None,
        None => Some((2 * limit_c).max(2) as u32),
    };
    if let Some(conc) = conc {
        if conc == 0 || conc > MAX_EXPLAIN_CONCURRENCY {
            return Err(format!("--concurrency: must be from 1 to {MAX_EXPLAIN_CONCURRENCY}, got {conc}"));
        }
    }
    if open {
        notes.push(
            "the scenario's arrivals are its own (a request rate or a trace): the explained run keeps them; \
             the sweep that finds the knee is a closed loop (each concurrency's requests sent back to back, \
             the same request mix), as an offered rate would cap throughput before the engine does"
                .to_string(),
        );
    }
    let own = base.workload.num_prompts;
    // Enough requests that the explained run reaches its steady state. The scenario's own
    // concurrency keeps its own prompts (the run is `simulate`'s); a concurrency asked for
    // (`--concurrency` or `--max-concurrency`) gets 4 × it.
    let prompts = match conc {
        Some(c) if concurrency.is_none() && conc == base.workload.max_concurrency => {
            if own < c && trace_len.is_none() {
                notes.push(format!(
                    "the run at the scenario's concurrency {c} has its {own} prompts: all {own} are in flight at once (one wave), so concurrency {c} is never reached; give --concurrency {c} for a run of 4 × {c} prompts"
                ));
            }
            None
        }
        None => None,
        Some(conc) => {
            let want = 4u64 * u64::from(conc);
            let capped = want.min(u64::from(MAX_EXPLAIN_PROMPTS)) as u32;
            let n = capped.max(own);
            if want > u64::from(n) {
                // Fewer prompts than the concurrency are one wave, all in flight at once.
                let shows = if n <= conc {
                    format!("all {n} are in flight at once (one wave), not a steady state")
                } else {
                    "it shows the first waves, not a steady state".to_string()
                };
                notes.push(format!(
                    "the run at concurrency {conc} has {n} prompts, not 4 × {conc} (explain runs at most {MAX_EXPLAIN_PROMPTS}): {shows}"
                ));
            } else if n != own && trace_len.is_none() {
                notes.push(format!(
                    "the run at concurrency {conc} has {n} prompts (4 × {conc}, enough waves for a steady state), not the {own} that workload.num_prompts (--num-prompts) gives"
                ));
            }
            Some(n)
        }
    };
    let point = match conc {
        Some(c) => with_load(base, c, prompts),
        None => base.clone(),
    };
    // Eight prompts a slot at every point: enough for a steady throughput, and the same
    // whatever the scenario's own max_concurrency (which the knee must not depend on).
    let sweep_of = |base: &SimSpec| -> Vec<SimSpec> { grid.iter().map(|&c| sweep_point(base, c)).collect() };
    let mut grid_specs = sweep_of(base);
    // Where the pool binds first, the same sweep with a larger pool says whether the knee is the
    // pool's: a knee that stays put is the engine's compute (a fleet's pools are its replicas').
    // The larger pool must hold more requests than the pool, or it tests nothing: WIDER_POOL
    // times the pool, grown a request's footprint at a time until it does.
    let mut wider_pool = None;
    let pool = base.engine.kv_capacity_tokens();
    let max_running = u64::from(base.max_running_total());
    if base.fleet.is_some() && max_running > limit.concurrency && pool > 0 {
        // Said, not skipped in silence (until 2026-12-07 a fleet's knee advice dropped the test
        // without a word, where the single engine it was ran it).
        wider_pool = Some(WiderPool::NotTested(
            "explain grows a single engine's pool only, and this is a fleet (each replica's pool is its own: sweep the \
             fleet with larger pools to see)"
                .to_string(),
        ));
    } else if base.fleet.is_none() && max_running >= limit.concurrency && pool > 0 {
        if max_running <= limit.concurrency {
            wider_pool = Some(WiderPool::NotTested(format!(
                "{} lets no more than {max_running} run at once, as many as the pool holds: a larger pool alone would run no more",
                base.running_cap_words()
            )));
        } else {
            let step = limit.footprint_tokens.max(1);
            let mut tokens = (pool as f64 * WIDER_POOL) as u64;
            let mut found = None;
            for _ in 0..64 {
                let wider = with_pool(base, tokens);
                let holds = kv_limited_concurrency(&wider, &wk).concurrency;
                if holds > limit.concurrency {
                    found = Some((wider, holds));
                    break;
                }
                tokens = tokens.saturating_add(step);
            }
            match found {
                Some((wider, holds)) => {
                    let tokens = wider.engine.kv_capacity_tokens();
                    wider_pool = Some(WiderPool::Run { tokens, holds, beyond_gpu: beyond_gpu(base, tokens) });
                    grid_specs.extend(sweep_of(&wider));
                }
                None => {
                    wider_pool = Some(WiderPool::NotTested(format!(
                        "no pool up to {} tokens held more than {} requests of this workload",
                        thousands(tokens),
                        limit.concurrency
                    )))
                }
            }
        }
    }
    // Where the running cap binds first, the same sweep with the caps raised says whether the
    // knee is the cap's, as the wider pool's does for the pool.
    let mut wider_cap = None;
    if base.max_running_total() < limit.concurrency {
        let raised = with_cap(base);
        if raised.max_running_total() > base.max_running_total() {
            wider_cap = Some(raised.max_running_total());
            grid_specs.extend(sweep_of(&raised));
        }
    }
    Ok(Plan { concurrency: conc, point, grid, grid_specs, notes, limit, wider_pool, wider_cap, trace_requests })
}

/// The TTFT split of the explained run (means, ms).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TtftSplit {
    pub mean_ttft_ms: f64,
    pub mean_queue_wait_ms: f64,
    pub mean_prefill_ms: f64,
    pub mean_interleave_ms: f64,
    pub mean_overhead_ms: f64,
}

/// One point of the sweep around the limit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GridPoint {
    pub max_concurrency: u32,
    /// The requests the point ran (eight a concurrency slot, [`EXPLAIN_PROMPTS_PER_SLOT`]; a
    /// trace's length at most): `servesim sweep --num-prompts` with these reproduces the knee.
    pub num_prompts: u64,
    pub output_throughput: f64,
    pub mean_ttft_ms: f64,
    pub num_preemptions: u64,
}

/// The knee of the sweep around the limit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KneeFinding {
    /// `None`: not reached within the sweep.
    pub max_concurrency: Option<u32>,
    pub sweep: Vec<GridPoint>,
}

/// Which numbers are knobs, which are results, which lie outside the engine.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricKinds {
    pub knobs: Vec<String>,
    pub results: Vec<String>,
    pub outside_the_engine: OutsideTheEngine,
}

/// What servesim does not model, and where to measure it instead (keys are the quantities).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutsideTheEngine {
    #[serde(rename = "GPU utilisation, SM occupancy, power")]
    pub gpu_counters: &'static str,
    #[serde(rename = "network and client time")]
    pub network_and_client: &'static str,
}

/// Why the metrics are what they are. JSON keys are a contract (`explain --json`).
#[derive(Clone, Debug, Serialize)]
pub struct Explanation {
    pub scenario: String,
    pub engine: String,
    /// The explained run's cap on requests in flight; `null`: the scenario's open-loop load
    /// (`request_rate` or a trace's arrivals) with no cap.
    pub max_concurrency: Option<u32>,
    /// The explained run's load in words ("concurrency 8", "a request rate of 4 requests/s").
    pub load: String,
    pub kv_cache_tokens: u64,
    pub kv_request_footprint_tokens: u64,
    pub kv_limited_concurrency: u64,
    pub max_running: u64,
    pub binding_limit: String,
    pub ttft_breakdown: TtftSplit,
    pub num_preemptions: u64,
    pub recomputed_tokens: u64,
    pub recompute_seconds: f64,
    pub knee: KneeFinding,
    pub knob: String,
    pub metric_kinds: MetricKinds,
    /// The explanation, sentence by sentence.
    pub explanation: Vec<String>,
    /// The explained run's report.
    pub point: crate::report::PointReport,
    pub engine_version: String,
    pub model_id: String,
    pub hardware: String,
    /// Tensor parallelism, GPUs, KV dtype, quantization, CUDA graphs.
    pub deployment: Deployment,
    /// The largest step a CUDA graph runs (vLLM: tokens; SGLang: a decode-only batch); steps
    /// up to it are padded to the next captured size, larger ones run eagerly
    /// (`sim::cost::GraphRule`). `None` without graphs or without the measured-kernel cost.
    pub cuda_graph_max: Option<u64>,
    /// The host CPU time of an engine step and whether the engine hides it under the GPU's
    /// (`docs/engine-cpu.md`); `None` without the measured-kernel cost.
    pub step_cpu: Option<String>,
    /// How the KV pool was sized (`kv_cache_tokens`, `gpu_memory_utilization`, ...).
    pub kv_sizing_source: String,
    pub kv_bytes_per_token: u64,
    /// The per-GPU memory account, when the pool was derived from memory (a fleet: its
    /// first group's; every group's is in `replica_limits`).
    pub memory: Option<MemoryAccount>,
    pub notes: Vec<String>,
    /// A fleet's replica groups: each group's pool, footprint, limit and memory account,
    /// and the fleet's sum ([`crate::fleet::FleetLimits`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_limits: Option<crate::fleet::FleetLimits>,
}

/// What more GPUs do for an engine out of compute: more replicas (or faster GPUs) always; a
/// higher TP size only where its all-reduces cost less than the compute it splits. At TP > 1 the
/// all-reduces' share of a prefill step of the workload's mean prompt (at most the token budget)
/// says which: at a third or more, a higher TP size slows the steps it was to speed up (L40S,
/// Llama-3.2-3B: TP 4 ran at a third of TP 2's throughput, the audit of 2026-12-06).
fn more_gpus_sentence(base: &SimSpec, w: &crate::workload::Workload, disaggregated: bool) -> String {
    let replicas = if disaggregated { "more replicas, more prefill replicas" } else { "more replicas" };
    let tp = base.deployment.tensor_parallel_size;
    // The CPU test bed's card runs one rank (`config::cpu_host_deployment`): more engines or a
    // faster host, never TP.
    if crate::config::is_cpu_host(&base.gpu) {
        return format!("more engines ({replicas}) or a faster host do; TP is not modelled on the cpu-host card.");
    }
    let Some(c) = base.cost.composed.as_ref() else {
        return format!("more or faster GPUs ({replicas}, or a higher TP size where its all-reduces cost less than the compute it splits) do.");
    };
    let (mean_in, _) = w.mean_lengths();
    let budget = match &base.engine {
        crate::config::EngineSpec::Vllm(c) => c.max_num_batched_tokens,
        crate::config::EngineSpec::Sglang(c) => c.chunked_prefill_size.unwrap_or(u32::MAX),
    };
    let m = (mean_in.round() as u64).clamp(1, u64::from(budget.max(1)));
    if tp <= 1 {
        return format!(
            "more or faster GPUs do: {replicas}; a higher TP size where its all-reduces cost less than the compute it \
             splits ({}--set {}=2)",
            if base.gpu.interconnect.as_deref() == Some("pcie") {
                "on PCIe cards often not past TP 2: try it, "
            } else {
                "try it: "
            },
            tp_field(base)
        ) + ".";
    }
    let mut shape = crate::cost::StepShape::default();
    shape.add_prefill(0, m);
    let step_us = base.cost.step_ns(&shape) as f64 / 1e3;
    let share = if step_us > 0.0 { c.step_allreduce_us(m) / step_us } else { 0.0 };
    if share >= 1.0 / 3.0 {
        format!(
            "{replicas} or faster GPUs do; a higher TP size does not: at TP {tp} the all-reduces already take {:.0}% of a \
             prefill step of {m} tokens, and more GPUs per replica add to them.",
            100.0 * share
        )
    } else {
        format!(
            "more or faster GPUs ({replicas}, or a higher TP size: at TP {tp} the all-reduces take {:.0}% of a prefill \
             step of {m} tokens) do.",
            100.0 * share
        )
    }
}

fn tp_field(base: &SimSpec) -> &'static str {
    match base.engine.engine_kind() {
        crate::config::EngineKind::Vllm => "engine.tensor_parallel_size",
        crate::config::EngineKind::Sglang => "engine.tp_size",
    }
}

/// "1 request", "42 requests" (thousands separated).
fn requests(n: u64) -> String {
    format!("{} request{}", thousands(n), if n == 1 { "" } else { "s" })
}

/// An expected number of tokens, rounded to three significant figures (it is an expectation):
/// 35,900.
fn about_tokens(n: u64) -> String {
    if n < 1000 {
        return n.to_string();
    }
    let digits = n.ilog10();
    let unit = 10u64.pow(digits - 2);
    thousands((n + unit / 2) / unit * unit)
}

/// A time of `ms` milliseconds, in a unit fit for `scale` (a sum it is part of): seconds past 10 s.
fn duration(ms: f64, scale: f64) -> String {
    if scale >= 10_000.0 && ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else {
        format!("{ms:.1} ms")
    }
}

fn pct(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

/// What each way of growing the KV pool can add to it, largest first, in words: the advice
/// where the pool binds. Each gain is an upper bound from the memory account (or, without one,
/// from the GPU's memory less the weights): the fraction's headroom (none where vLLM 0.34 already
/// takes all that is free), an fp8 KV cache (not where the KV is fp8 already), twice the TP, fp8
/// weights (not where they are fp8 already) or a smaller model, and shorter requests.
fn pool_advice(base: &SimSpec, limit: &KvLimit, running_knob: &str) -> String {
    let sglang = base.engine.engine_kind() == crate::config::EngineKind::Sglang;
    let d = &base.deployment;
    let tp = d.tensor_parallel_size.max(1);
    let per_token = base.kv_sizing.kv_bytes_per_token.max(1);
    let pool_tokens = base.engine.kv_capacity_tokens().max(1);
    let weights = base.model.weight_bytes_per_gpu(tp, d.linear_weight_bytes);
    let total = base.gpu.memory_bytes;
    let pinned = crate::config::PINNED_POOL.contains(&base.kv_sizing.source);
    // SGLang's max_total_tokens where it binds caps the profiled pool.
    let bounded = base.kv_sizing.source == "max_total_tokens";
    // A pinned (or bounded) pool moves only with its pin: the other ways raise what the pin can
    // be, so they are weighed against the most this GPU holds beside the weights (the profiled
    // pool under a bound), not the pinned figure.
    let (pool_tokens, pool_bytes) = match base.kv_sizing.memory.as_ref() {
        Some(m) if bounded => ((m.kv / per_token).max(1), m.kv.max(1)),
        _ if pinned || bounded => {
            let most = (total.saturating_sub(weights) / per_token).max(1);
            (most, most * per_token)
        }
        _ => (pool_tokens, pool_tokens.saturating_mul(per_token).max(1)),
    };
    let gib = |b: u64| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64);
    let times = |f: f64| if f >= 1.95 { format!("×{f:.1}") } else { format!("+{:.0}%", 100.0 * (f - 1.0)) };
    let fraction = if sglang { "mem_fraction_static" } else { "gpu_memory_utilization" };
    // (what it can multiply the pool by, in words).
    let mut ways: Vec<(f64, String)> = Vec::new();
    let mut no_fraction = None;
    match (base.kv_sizing.source, base.kv_sizing.memory.as_ref()) {
        (src, _) if crate::config::PINNED_POOL.contains(&src) => {
            let most = total.saturating_sub(weights) / per_token;
            let pin = base.engine.kv_capacity_tokens().max(1);
            if most > pin {
                let f = most as f64 / pin as f64;
                // First: the others move a pinned pool only through it.
                // vLLM's override holds whatever the fraction (as vLLM holds it); a log's figure
                // moves with the fraction by what the derived pool moves (`config::PinChange`).
                let fraction_does = if crate::config::is_cpu_host(&base.gpu) {
                    "the cpu-host card derives no pool: the pin is the pool".to_string()
                } else if crate::config::HELD_POOL.contains(&src) {
                    format!("vLLM holds it whatever the {fraction}; set it to null to derive the pool")
                } else if base.memory_fraction_only_caps() {
                    format!("a {fraction} given with --set replaces it with a derived pool: vLLM 0.34's fraction only caps a pool sized after warm-up")
                } else {
                    format!("a {fraction} given with --set moves it by what the derived pool moves")
                };
                // A pin in bytes is said in bytes too (the tokens alone read as a value to set).
                let bytes = if src == "kv_cache_memory_bytes" {
                    format!(" ({} bytes a GPU)", thousands(most.saturating_mul(per_token)))
                } else {
                    String::new()
                };
                ways.push((
                    f64::INFINITY,
                    format!(
                        "raise {src} (pinned here: at most about {} tokens{bytes} fit beside the weights, {}, less what the activations and the runtime need; {fraction_does})",
                        thousands(most),
                        times(f)
                    ),
                ));
            }
        }
        ("max_total_tokens", Some(m)) => {
            let profiled = m.kv / per_token;
            let bound = base.engine.kv_capacity_tokens().max(1);
            if profiled > bound {
                let f = profiled as f64 / bound as f64;
                ways.push((
                    f64::INFINITY,
                    format!(
                        "raise or remove max_total_tokens (it bounds the pool here; {fraction} gives {} tokens, {})",
                        thousands(profiled),
                        times(f)
                    ),
                ));
            }
        }
        // vLLM 0.34's default sizes the pool from the device's headroom after warm-up (the
        // utilization reads 1.0): no fraction to raise.
        (_, Some(m)) if !sglang && m.margin > 0 && m.requested >= m.total => {
            no_fraction = Some(
                "gpu_memory_utilization is already 1.0 in effect: vLLM 0.34 gives the pool what is free after warm-up",
            );
        }
        (_, Some(m)) if m.total > 0 => {
            let f0 = m.requested as f64 / m.total as f64;
            let headroom = m.total.saturating_sub(m.requested);
            if headroom > 0 {
                let f = (m.kv.max(1) + headroom) as f64 / m.kv.max(1) as f64;
                ways.push((
                    f,
                    format!(
                        "a higher {fraction} (at {f0:.3}, raising it to 1.0 adds at most the remaining {:.0}% of the GPU, {}: up to {} the pool, less what must stay outside the fraction{})",
                        100.0 * (1.0 - f0),
                        gib(headroom),
                        times(f),
                        if sglang { ": the activations and CUDA graphs" } else { ": the CUDA context" }
                    ),
                ));
            } else {
                no_fraction = Some("the memory fraction is already 1.0");
            }
        }
        _ => {}
    }
    // On the CPU test bed's card: vLLM's CPU attention runs an fp8 KV cache from 0.21 (refused
    // before); SGLang's CPU backends were not read for it; TP is refused there
    // (`config::cpu_host_deployment`).
    let cpu = crate::config::is_cpu_host(&base.gpu);
    let fp8_kv_runs = !cpu
        || match &base.engine {
            crate::config::EngineSpec::Vllm(v) => v.version >= crate::config::VLLM_CPU_FP8_KV_CACHE,
            crate::config::EngineSpec::Sglang(_) => false,
        };
    if d.kv_dtype_bytes >= 2 && fp8_kv_runs {
        let f = f64::from(d.kv_dtype_bytes);
        ways.push((
            f,
            // Each engine's own name: SGLang refuses vLLM's `fp8` (the SGLang audit of 2026-12-07:
            // the advice named a value its own run refused).
            format!(
                "an fp8 KV cache (--set engine.kv_cache_dtype={}: {} the tokens in the same memory)",
                if sglang { "fp8_e4m3" } else { "fp8" },
                times(f)
            ),
        ));
    }
    {
        let tp2 = tp * 2;
        let per2 = base.model.kv_bytes_per_token_per_gpu(tp2, d.kv_dtype_bytes).max(1);
        let freed = weights.saturating_sub(base.model.weight_bytes_per_gpu(tp2, d.linear_weight_bytes));
        let f = (pool_bytes + freed) as f64 / per2 as f64 / pool_tokens as f64;
        if f > 1.0 && !cpu {
            ways.push((
                f,
                format!(
                    "TP {tp2} (--set {}={tp2}: the weights{} split over twice the GPUs, about {} the tokens)",
                    tp_field(base),
                    if per2 < per_token { " and KV heads" } else { "" },
                    times(f)
                ),
            ));
        }
    }
    if d.quantization.is_none() && d.linear_weight_bytes >= 2 {
        let freed = weights.saturating_sub(base.model.weight_bytes_per_gpu(tp, 1));
        let f = (pool_bytes + freed) as f64 / pool_bytes as f64;
        ways.push((
            f,
            format!(
                "fp8 weights or a smaller model (fp8 frees about {} a GPU: up to {} the pool)",
                gib(freed),
                times(f)
            ),
        ));
    } else {
        ways.push((1.0, "a smaller model (the weights are fp8 already)".to_string()));
    }
    ways.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut s = format!(
        "in order of what each can add to the pool{}: {}; or shorter requests (one holds {} tokens here)",
        if pinned {
            " (past the first, each with the pin raised to match: measured against the most this GPU holds)"
        } else if bounded {
            " (past the first, each with the bound raised to match: measured against the profiled pool)"
        } else {
            ""
        },
        ways.into_iter().map(|(_, w)| w).collect::<Vec<_>>().join("; "),
        thousands(limit.footprint_tokens)
    );
    if let Some(n) = no_fraction {
        s.push_str(&format!("; not a higher memory fraction: {n}"));
    }
    s.push_str(&format!("; raising {running_knob} does not help while the pool binds"));
    s
}

/// Reads the runs of `plan` (`point`: the explained run; `grid[i]`: the run at `plan.grid[i]`).
pub fn assemble(scenario: &str, base: &SimSpec, plan: &Plan, point: &SimOutput, grid: &[SimOutput]) -> Explanation {
    let spec = &plan.point;
    let limit = &plan.limit;
    let engine = base.engine.kind();
    let sglang = base.engine.engine_kind() == crate::config::EngineKind::Sglang;
    let running_knob = running_knob(base);
    // A pool pinned to a figure (a start-up log's) moves only with that figure or with a memory
    // fraction given on the command line (by what the derived pool moves: the CLI says so);
    // vLLM's `num_gpu_blocks_override` holds whatever the fraction, as vLLM holds it.
    let pinned = crate::config::PINNED_POOL.contains(&base.kv_sizing.source);
    // The pinning field by name: raising another one (kv_cache_tokens where
    // num_gpu_blocks_override wins) would change nothing.
    let memory_knob = match (sglang, pinned) {
        (true, false) if base.kv_sizing.source == "max_total_tokens" => {
            "max_total_tokens (it bounds the pool here: raise or remove it, up to what mem_fraction_static gives)"
                .to_string()
        }
        (true, false) => "mem_fraction_static (max_total_tokens only bounds the pool from above)".to_string(),
        // vLLM 0.34's default sizes the pool from the device's headroom after warm-up (the
        // utilization reads 1.0): no fraction to raise.
        (false, false) if base.kv_sizing.memory.as_ref().is_some_and(|m| m.margin > 0 && m.requested >= m.total) => {
            "the GPU's memory (the pool already takes what is free after warm-up: a larger GPU or more tensor parallelism)".to_string()
        }
        (false, false) => "gpu_memory_utilization (or kv_cache_tokens / num_gpu_blocks_override)".to_string(),
        (_, true) if crate::config::is_cpu_host(&base.gpu) => {
            format!("{} (pinned here: the cpu-host card derives no pool, the pin is the pool)", base.kv_sizing.source)
        }
        (true, true) => format!(
            "{} (pinned here; a mem_fraction_static given with --set moves it by what the derived pool moves)",
            base.kv_sizing.source
        ),
        (false, true) if crate::config::HELD_POOL.contains(&base.kv_sizing.source) => format!(
            "{} (pinned here: vLLM holds it whatever gpu_memory_utilization is; set it to null to derive the pool)",
            base.kv_sizing.source
        ),
        (false, true) if base.memory_fraction_only_caps() => format!(
            "{} (pinned here; a gpu_memory_utilization given with --set replaces it with a derived pool: vLLM 0.34's fraction only caps a pool sized after warm-up)",
            base.kv_sizing.source
        ),
        (false, true) => format!(
            "{} (pinned here; a gpu_memory_utilization given with --set moves it by what the derived pool moves)",
            base.kv_sizing.source
        ),
    };
    let max_running = base.max_running_total();
    let running_cap = base.running_cap_words();
    let (binding_limit, binding_at) = binding(base, limit.concurrency);
    let conc = plan.concurrency;
    let open = open_loop(base);
    let mut load = load_phrase(spec, open);
    // Fewer prompts than the concurrency: all in flight at once, the concurrency never reached.
    let sent = point.workload.requests.len() as u64;
    if let Some(c) = conc.filter(|&c| !open && sent < u64::from(c)) {
        load = format!("concurrency {c}, never reached: all {sent} prompts in flight at once (one wave)");
    }
    let closed = if open { " of a closed loop (the sweep's requests sent back to back)" } else { "" };

    // The wider pool's sweep follows the grid's runs.
    let (grid, wider_grid) = grid.split_at(plan.grid.len().min(grid.len()));
    // No knee through a run that did not complete (`crate::sweep::sweep_knee`); the notes say which.
    let knee = crate::sweep::sweep_knee(&plan.grid, grid).map(|k| plan.grid[k.index]);
    // A what-if run that did not complete answers nothing: no knee of it is read (the note says so).
    let wider_incomplete = crate::sweep::any_incomplete(wider_grid);
    let wider_knee = (wider_grid.len() == plan.grid.len() && !wider_incomplete)
        .then(|| crate::sweep::sweep_knee(&plan.grid, wider_grid).map(|k| plan.grid[k.index]));
    let mut notes = plan.notes.clone();
    notes.extend(base.kv_sizing.bound_note(base.engine.kv_capacity_tokens()));
    notes.extend(base.engine.running_cap_note());
    notes.extend(crate::sweep::sweep_warnings(&plan.grid, grid).into_iter().map(|w| format!("the sweep's run at {w}")));
    notes.extend(
        crate::sweep::sweep_warnings(&plan.grid, wider_grid)
            .into_iter()
            .filter(|_| wider_incomplete)
            .map(|w| format!("the what-if sweep's run at {w}; what the what-if would change is not said")),
    );
    if point.run.stop != crate::simulation::StopReason::Completed {
        notes.push(format!(
            "the explained run did not complete ({}): {}",
            point.run.stop.as_str(),
            point.run.stop.figures_cover()
        ));
    }
    // Where the explained run's shape is one the published data show the model far off on.
    let report = crate::report::PointReport::of(spec, point).with_caveat_runs(spec, point);
    for c in &report.caveats {
        notes.push(format!("caveat ({}): {}", c.id, c.message));
        if let Some(d) = c.desynchronised_mean_ttft_ms {
            notes.push(crate::report::desynchronised_sentence(&[format!("{d:.2} ms")]));
        }
    }
    let sweep: Vec<GridPoint> = plan
        .grid
        .iter()
        .zip(grid)
        .map(|(&c, o)| GridPoint {
            max_concurrency: c,
            num_prompts: o.workload.requests.len() as u64,
            output_throughput: o.metrics.output_throughput,
            mean_ttft_ms: o.metrics.ttft.mean,
            num_preemptions: o.run.counters.num_preemptions,
        })
        .collect();

    let m = &point.metrics;
    let b = &m.ttft_breakdown;
    let c = &point.run.counters;
    // The engine's own count: what a preemption or retraction discarded and was computed
    // again (a difference of prompt tokens and prefix hits misread vLLM before 0.27, whose hit
    // counter adds every lookup of a blocked head of queue).
    let recomputed = c.recomputed_tokens;
    // Priced by the step cost that timed the run (measured kernels, a profile or the linear
    // model): a lone prefill of the mean recomputed length, at most 8,192 tokens, per token.
    let recompute_s = if recomputed == 0 {
        0.0
    } else {
        let n = (recomputed / c.num_preemptions.max(1)).clamp(1, 8192);
        let mut shape = crate::cost::StepShape::default();
        shape.add_prefill(0, n);
        recomputed as f64 * spec.cost.step_ns(&shape) as f64 / n as f64 / 1e9
    };

    let mut why = Vec::new();
    // SGLang admits against new_token_ratio's estimates of the outputs: in 10 of 37 SGLang
    // configurations of the audit the sweep point at exactly the limit already retracted.
    let holds_words = if sglang {
        format!("about {} at once (SGLang begins retracting as the pool fills)", requests(limit.concurrency))
    } else {
        format!("{} at once", requests(limit.concurrency))
    };
    // A fleet: every replica group's pool and limit, then the fleet's sum.
    let replica_limits = base.fleet.as_ref().map(|_| crate::fleet::replica_limits(base, &point.workload));
    match &replica_limits {
        Some(l) if l.num_replicas > 1 => why.extend(l.sentences()),
        _ if limit.shared_prefix_tokens > 0 => why.push(format!(
            "The KV pool holds {} tokens; a request of this workload needs {} beyond its shared prefix (mean prompt + output less that prefix and the last token, which is never stored, {:.0} tokens, in whole {}s of {}), and the shared prefixes the requests in flight use are held once each (the prefix cache holds a prefix for every request that shares it): {}, with about {} tokens of the prompts' {} shared prefix{} they are expected to use, fill it. That is the KV-limited concurrency.",
            thousands(limit.kv_capacity_tokens), thousands(limit.footprint_tokens), limit.mean_request_tokens, if sglang { "page" } else { "block" }, base.engine.kv_granularity(), holds_words, about_tokens(limit.shared_prefix_tokens), limit.shared_prefixes, if limit.shared_prefixes == 1 { "" } else { "es" }
        )),
        _ => why.push(format!(
            "The KV pool holds {} tokens; a request of this workload needs {} (mean prompt + output less the last token, which is never stored, {:.0} tokens, in whole {}s of {}), so the pool holds {}: the KV-limited concurrency.",
            thousands(limit.kv_capacity_tokens), thousands(limit.footprint_tokens), limit.mean_request_tokens, if sglang { "page" } else { "block" }, base.engine.kv_granularity(), holds_words
        )),
    }
    // Whether any run had more requests in flight than the limit: a closed loop over a trace
    // shorter than the limit never fills the pool, nor does a run of fewer requests.
    let in_flight_most = plan
        .grid
        .last()
        .copied()
        .map_or(0, u64::from)
        .max((point.workload.requests.len() as u64).min(conc.map_or(u64::MAX, u64::from)));
    let reaches = in_flight_most > binding_at;
    if binding_limit == "kv_pool" && !reaches {
        why.push(format!(
            "{running_cap} is {} that, so the KV pool would bind first; at this load it never does: at most {} requests are ever in flight, where the pool has room for {}.",
            if max_running > limit.concurrency { "above" } else { "as high as" },
            thousands(in_flight_most),
            thousands(limit.concurrency)
        ));
    } else if binding_limit == "kv_pool" {
        // Admission does not stop at the figure: vLLM admits on the prompt's KV alone, SGLang
        // counts the running requests' remaining outputs at new_token_ratio. The runs' own peak
        // says how far past it they went.
        let peak = crate::sweep::peak_running(std::iter::once(point).chain(grid.iter()));
        let peak_phrase = match peak {
            Some(p) if u64::from(p) > limit.concurrency => format!(
                " (in explain's runs up to {p} ran at once, {:.0}% past it)",
                100.0 * (f64::from(p) / limit.concurrency.max(1) as f64 - 1.0)
            ),
            Some(p) => format!(" (in explain's runs at most {p} ran at once: none past it)"),
            None => String::new(),
        };
        let past = peak.is_some_and(|p| u64::from(p) > limit.concurrency);
        let above = if max_running > limit.concurrency { "above" } else { "as high as" };
        let more_than = |can: &str, could: &str| {
            if max_running <= limit.concurrency {
                // The running cap stops admission at the limit itself.
                format!("though here the running cap lets no more than {max_running} run{peak_phrase}")
            } else {
                format!("so more than {} {}{peak_phrase}", limit.concurrency, if past { can } else { could })
            }
        };
        // An SGLang P/D fleet's decode servers admit what their pre-allocation queue let through
        // (docs/fleets.md), not by new_token_ratio.
        let sglang_decode_servers = base.fleet.as_ref().is_some_and(|f| f.sglang_decode_reserve().is_some());
        why.push(if sglang_decode_servers {
            format!(
                "{running_cap} is {above} that, so the KV pool binds first. SGLang's decode server pre-allocates a request's prompt before its prefill may start, and only while num_reserved_decode_tokens stay free for every request it holds{peak_phrase}; the outputs grow into that reserve, running ones are retracted (to be recomputed) if the pool runs out, and new requests wait for pre-allocation, so TTFT grows with that queue."
            )
        } else if sglang {
            format!(
                "{running_cap} is {above} that, so the KV pool binds first. SGLang reserves KV for a new request's output at admission, but counts the running requests' remaining outputs at new_token_ratio (which can fall below 1), {}; when their outputs outgrow the pool, running ones are retracted (to be recomputed) and new ones wait, and TTFT grows with the queue.",
                more_than("can be admitted", "could be admitted")
            )
        } else {
            format!(
                "{running_cap} is {above} that, so the KV pool binds first. vLLM admits a request on its prompt's KV alone, {}; as their outputs grow, running ones are preempted (to be recomputed) when the pool runs out, and new ones wait, and TTFT grows with the queue.",
                more_than("can run at once", "could run at once")
            )
        });
    } else {
        let even = base.even_split_running().map_or(String::new(), |e| {
            format!(
                " The replicas' caps differ: a router that splits requests evenly (round_robin, least_outstanding, power_of_two) fills the one with the smallest cap from {} concurrent requests, and requests queue there.",
                thousands(e)
            )
        });
        why.push(format!(
            "{running_cap} binds before the KV pool does: past {max_running} concurrent requests, new ones queue in the engine.{even}"
        ));
    }
    // In a disaggregated fleet the time from the prefill replica to the first token (the KV
    // transfer, the wait for the decode replica's KV and its first step) falls in this part too.
    let preemption = if sglang { "a retraction" } else { "a preemption" };
    let interleave_is = if base.fleet.as_ref().is_some_and(|f| f.disaggregated()) {
        format!("of interleaving (waiting between chunks, recompute after {preemption} before the first token, and the KV transfer and the decode replica's queue and first step)")
    } else {
        format!("of interleaving (waiting between chunks, and recompute after {preemption} before the first token: later ones add to TPOT and ITL, not here)")
    };
    why.push(format!(
        "At {load}, mean TTFT is {}: {} ({:.0}%) queue wait before the first step, {} ({:.0}%) of prefill steps, {} ({:.0}%) {interleave_is}, {} ({:.0}%) outside the engine (HTTP, tokenisation, streaming).",
        duration(m.ttft.mean, m.ttft.mean),
        duration(b.queue_wait_ms, m.ttft.mean), pct(b.queue_wait_ms, m.ttft.mean),
        duration(b.prefill_ms, m.ttft.mean), pct(b.prefill_ms, m.ttft.mean),
        duration(b.interleave_ms, m.ttft.mean), pct(b.interleave_ms, m.ttft.mean),
        duration(b.overhead_ms, m.ttft.mean), pct(b.overhead_ms, m.ttft.mean)
    ));
    // In a disaggregated fleet, the wait from the KV's landing to the decode replica first
    // scheduling the request (its decode engine's queue, where a full decode pool or running cap
    // shows) is in the interleaving above: said where it is most of the TTFT.
    // Only where a decode replica had requests waiting: at light load the same wait is the decode
    // step already in flight, and nothing binds (a review, 2026-12-07).
    let decode_queued = point.fleet.as_ref().is_some_and(|f| {
        f.replicas.iter().any(|r| r.role == crate::config::ReplicaRole::Decode && r.gauges.waiting_peak > 0)
    });
    if let Some(w) = point
        .fleet
        .as_ref()
        .filter(|f| f.decode_router.is_some() && decode_queued)
        .map(|f| f.mean_kv_landed_to_scheduled_ms)
    {
        if w > 0.25 * m.ttft.mean && w > 0.0 {
            why.push(format!(
                "Of the interleaving, {} ({:.0}% of the TTFT) on average is the wait on a decode replica after the request's KV landed, before it is first scheduled there: the decode replicas' KV pools or running caps bind, not the prefill replicas.",
                duration(w, m.ttft.mean),
                pct(w, m.ttft.mean)
            ));
        }
    }
    // SGLang's decode servers pre-allocate a request's KV before its prefill may start: that wait
    // is in the queue wait above (docs/fleets.md).
    if let Some(w) = point.fleet.as_ref().and_then(|f| f.mean_kv_prealloc_wait_ms).filter(|&w| w > 0.0) {
        why.push(format!(
            "Of the queue wait, {} on average is the wait for an SGLang decode server to pre-allocate the request's KV before its prefill may start (it keeps num_reserved_decode_tokens = {} for each request it holds): there the decode replicas' KV pools bind, not the prefill replicas.",
            duration(w, m.ttft.mean),
            base.fleet.as_ref().and_then(|f| f.sglang_decode_reserve()).unwrap_or_default()
        ));
    }
    if c.num_preemptions > 0 {
        why.push(format!(
            "{} {} recomputed {} prompt and output tokens, about {:.1} s of prefill compute.",
            thousands(c.num_preemptions),
            if sglang { "retractions" } else { "preemptions" },
            thousands(recomputed),
            recompute_s
        ));
    } else {
        why.push(format!("No request was {} at this load.", if sglang { "retracted" } else { "preempted" }));
    }
    // A knee well below the limit that binds is not that limit's: the steps themselves slow as
    // the batch grows (compute, or in a disaggregated fleet its prefill replicas), and neither a
    // larger pool nor a higher running cap moves it.
    let below_limits = knee.is_some_and(|k| u64::from(k) * 2 < binding_at);
    // Where the what-if sweep (a larger pool, or higher running caps that hold more requests)
    // found the knee moving, that measurement stands over the rule of thumb above; where it found
    // the knee staying, the limit is cleared of it.
    let what_if_ran = match (&plan.wider_pool, plan.wider_cap) {
        (Some(WiderPool::Run { .. }), _) | (_, Some(_)) => true,
        _ => false,
    };
    let what_if_moves_it = what_if_ran && matches!((knee, wider_knee), (Some(k), Some(wk)) if wk.is_none_or(|w| w > k));
    let what_if_clears_it = what_if_ran && matches!((knee, wider_knee), (Some(k), Some(Some(w))) if w <= k);
    match knee {
        Some(k) => why.push(format!(
            "The throughput knee{closed} is at concurrency {k}: past it, added concurrency no longer comes back as throughput (under a tenth of it does, or less than 2% more) and TTFT keeps rising{}. (Its sweep ran {} prompts a concurrency slot at each point{}, whatever the scenario's prompt count, as a closed loop: servesim sweep with the same scenario and --set flags{} --concurrency {} --num-prompts {} reproduces it.)",
            if !below_limits && !what_if_clears_it && u64::from(k) <= binding_at * 2 { ", close to the limit above" } else { "" },
            EXPLAIN_PROMPTS_PER_SLOT,
            if sweep.iter().any(|p| p.num_prompts < u64::from(p.max_concurrency) * u64::from(EXPLAIN_PROMPTS_PER_SLOT)) {
                format!(" (at most {}, or the trace's length)", thousands(u64::from(MAX_EXPLAIN_PROMPTS)))
            } else {
                String::new()
            },
            if crate::sweep::open_loop(base) { " and --set workload.request_rate=inf" } else { "" },
            sweep.iter().map(|p| p.max_concurrency.to_string()).collect::<Vec<_>>().join(","),
            sweep.iter().map(|p| p.num_prompts.to_string()).collect::<Vec<_>>().join(",")
        )),
        // The sweep was cut at the trace's length: no knee because there is no more load to add.
        None if plan.trace_requests.is_some() => {
            let n = plan.trace_requests.unwrap_or(1);
            why.push(format!(
                "No knee{closed} up to concurrency {n}: the trace has {n} requests, so a closed loop over it never has more in flight and the sweep stops there, below the limit that binds ({binding_at} concurrent requests). To find where throughput levels off, replay a trace of more requests (--set workload.trace=FILE) or a synthetic workload of like lengths (--dataset-name random, --random-input-len, --random-output-len)."
            ))
        }
        // A run of the grid that did not complete: no knee was searched (the notes say which).
        None if crate::sweep::any_incomplete(grid) => why.push(format!(
            "No knee{closed} was searched: a run of the sweep did not complete (the notes say which and why)."
        )),
        None => why.push(format!(
            "No knee{closed} up to concurrency {}: throughput still grows.",
            plan.grid.last().copied().unwrap_or(1)
        )),
    }
    let disaggregated = base.fleet.as_ref().is_some_and(|f| f.disaggregated());
    let knob = if below_limits && !what_if_moves_it {
        format!(
            "The knee sits well below the limit that binds ({binding_at} concurrent requests): there the engine is out of \
             compute, its steps growing with the batch{}; a larger KV pool or a higher {running_knob} does not move it, \
             {}",
            if disaggregated { " (or its prefill replicas are, feeding the decode ones)" } else { "" },
            more_gpus_sentence(base, &point.workload, disaggregated)
        )
    } else if binding_limit == "kv_pool" {
        let raise = pool_advice(base, limit, running_knob);
        // Preemptions (retractions) are said to happen where a run here had them.
        let preempted =
            match (sglang, grid.iter().chain(std::iter::once(point)).any(|o| o.run.counters.num_preemptions > 0)) {
                (true, true) => "retracted",
                (false, true) => "preempted",
                (true, false) => "retracted (none was in these runs)",
                (false, false) => "preempted (none was in these runs)",
            };
        // A what-if pool this GPU cannot hold answers what the pool does, not what this GPU can do.
        let cannot_hold = |b: &Option<String>| {
            b.as_ref().map_or(String::new(), |b| format!(" That pool is larger than this GPU can hold: {b}."))
        };
        match (knee, wider_knee, &plan.wider_pool) {
            _ if !reaches => format!(
                "The KV pool does not shape these metrics: no run here has more requests in flight than it holds ({}). With more in flight, past that limit TTFT would grow with the queue and requests would be {preempted}.",
                thousands(limit.concurrency)
            ),
            // The same sweep with a larger pool: the knee moves with it, or it is the engine's.
            (Some(k), Some(wk), Some(WiderPool::Run { tokens, holds, beyond_gpu })) if wk.is_none_or(|w| w > k) => format!(
                "The knee moves with the KV pool: with a pool of {} tokens (room for {}) it is {}.{} To move it: {raise}.",
                thousands(*tokens),
                requests(*holds),
                wk.map_or_else(
                    || format!("not reached up to concurrency {}", plan.grid.last().copied().unwrap_or(1)),
                    |w| format!("at concurrency {w}")
                ),
                cannot_hold(beyond_gpu),
            ),
            (Some(_), Some(Some(w)), Some(WiderPool::Run { tokens, holds, beyond_gpu })) => format!(
                "A larger KV pool does not move the knee (with {} tokens, room for {}, it is at concurrency {w}): \
                 throughput levels off because the engine is out of compute, its steps growing with the batch; {}{} \
                 The pool sets where TTFT takes off and requests are {preempted}: to push that point out: {raise}.",
                thousands(*tokens),
                requests(*holds),
                more_gpus_sentence(base, &point.workload, disaggregated),
                cannot_hold(beyond_gpu),
            ),
            (_, _, Some(WiderPool::NotTested(why))) => format!(
                "Past the KV limit TTFT grows with the queue and requests are {preempted}. Whether a larger pool would move the knee was not tested: {why}. To push that point out: {raise}."
            ),
            _ => format!(
                "Past the KV limit TTFT grows with the queue and requests are {preempted}: to push that point out: {raise}."
            ),
        }
    } else {
        // The running cap binds: the same sweep with the caps raised says whether the knee is
        // the cap's (it moves) or the engine's compute (it stays).
        let raised = |total: u64| {
            if base.fleet.is_some() {
                format!("{running_knob} {WIDER_CAP} times as high ({total} across the replicas)")
            } else {
                format!("{running_knob} = {total}")
            }
        };
        match (knee, wider_knee, plan.wider_cap) {
            (Some(k), Some(wk), Some(total)) if wk.is_none_or(|w| w > k) => format!(
                "The knee moves with {running_knob}: with {} it is {}. To move it, raise {running_knob} (the pool has room for {} requests; past that, the KV pool binds).",
                raised(total),
                wk.map_or_else(
                    || format!("not reached up to concurrency {}", plan.grid.last().copied().unwrap_or(1)),
                    |w| format!("at concurrency {w}")
                ),
                limit.concurrency
            ),
            (Some(_), Some(Some(w)), Some(total)) => format!(
                "A higher {running_knob} does not move the knee (with {}, it is at concurrency {w}): throughput levels off because the engine is out of compute, its steps growing with the batch; {} {running_knob} sets where new requests queue in the engine instead of running, not the throughput.",
                raised(total),
                more_gpus_sentence(base, &point.workload, disaggregated)
            ),
            _ => format!(
                "Past {max_running} concurrent requests new ones queue in the engine: a higher {running_knob} lets more run at once (the pool has room for {} requests; past that, the KV pool binds), which the sweep has not shown to raise throughput.",
                limit.concurrency
            ),
        }
    };
    why.push(knob.clone());

    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let outside = OutsideTheEngine {
        gpu_counters: if crate::config::is_cpu_host(&base.gpu) {
            "the cpu-host card runs on the host's CPU: measure CPU utilisation with perf or top; servesim models time, not hardware counters"
        } else {
            "measure with nvidia-smi dmon, DCGM (dcgm-exporter) or Nsight Systems; servesim models time, not hardware counters"
        },
        network_and_client: "measured by the client (servesim bench reports its own CPU time)",
    };
    // The cpu-host card runs one engine on one NUMA node: its TP is refused, not a knob.
    let tp_knob = if crate::config::is_cpu_host(&base.gpu) {
        None
    } else {
        Some(if sglang { "tp_size" } else { "tensor_parallel_size" })
    };
    let metric_kinds = MetricKinds {
        knobs: strings(
            &[
                Some(running_knob),
                Some(if sglang { "chunked_prefill_size" } else { "max_num_batched_tokens" }),
                Some(memory_knob.as_str()),
                Some(if sglang { "page_size" } else { "block_size" }),
                Some(if sglang { "disable_radix_cache" } else { "enable_prefix_caching" }),
                Some(if sglang { "schedule_policy" } else { "policy" }),
                tp_knob,
                Some("kv_cache_dtype"),
                Some("attention_backend"),
                Some(if sglang { "disable_overlap_schedule" } else { "async_scheduling" }),
                Some("max_concurrency / request_rate (the load)"),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>(),
        ),
        results: strings(&[
            "TTFT",
            "TPOT",
            "ITL",
            "E2EL",
            "throughput",
            "preemptions / retractions",
            "prefix cache hit rate",
            "KV cache usage",
            "running / waiting requests",
        ]),
        outside_the_engine: outside,
    };
    Explanation {
        scenario: scenario.to_string(),
        engine: engine.to_string(),
        max_concurrency: conc,
        load,
        kv_cache_tokens: limit.kv_capacity_tokens,
        kv_request_footprint_tokens: limit.footprint_tokens,
        kv_limited_concurrency: limit.concurrency,
        max_running,
        binding_limit: binding_limit.to_string(),
        ttft_breakdown: TtftSplit {
            mean_ttft_ms: m.ttft.mean,
            mean_queue_wait_ms: b.queue_wait_ms,
            mean_prefill_ms: b.prefill_ms,
            mean_interleave_ms: b.interleave_ms,
            mean_overhead_ms: b.overhead_ms,
        },
        num_preemptions: c.num_preemptions,
        recomputed_tokens: recomputed,
        recompute_seconds: recompute_s,
        knee: KneeFinding { max_concurrency: knee, sweep },
        knob,
        metric_kinds,
        explanation: why,
        point: report,
        engine_version: base.engine.version().to_string(),
        model_id: base.model.id.clone(),
        hardware: base.gpu.id.clone(),
        deployment: base.deployment.clone(),
        cuda_graph_max: base.cost.composed.as_ref().and_then(|c| c.graphs().max()),
        step_cpu: step_cpu(base),
        kv_sizing_source: base.kv_sizing.source.to_string(),
        kv_bytes_per_token: base.kv_sizing.kv_bytes_per_token,
        memory: base.kv_sizing.memory.clone(),
        notes,
        replica_limits,
    }
}

/// The step's host CPU time as the composed cost prices it, in words.
fn step_cpu(spec: &SimSpec) -> Option<String> {
    let c = spec.cost.composed.as_ref()?;
    let (overlapped, why) = match &spec.engine {
        crate::config::EngineSpec::Vllm(v) => (
            v.behaviour.async_scheduling,
            if v.behaviour.async_scheduling {
                "vLLM's async scheduling schedules the next step while this one runs"
            } else {
                "async scheduling is off (vLLM's default before 0.14), so the GPU waits for the scheduler, the input preparation and the output processing of every step"
            },
        ),
        crate::config::EngineSpec::Sglang(g) => {
            (g.behaviour.cpu_overlapped(), "SGLang's overlap scheduler is modelled off (VALIDATION.md section 5)")
        }
    };
    // The step cost divides every time by `cost.time_scale` (`ComposedCost::step_us_with`), the
    // CPU part too: the figures shown are the scaled ones, in µs for both engines.
    let k = c.time_scale();
    let (step_us, per_seq_us) = if overlapped {
        (crate::cost::STEP_CPU_US / k, crate::cost::PER_SEQ_CPU_US / k)
    } else {
        let s = c.sync_cpu();
        (s.step_us, s.per_seq_us)
    };
    // Three significant figures, no trailing zeros: 126, 12.6, 0.4.
    let us = |v: f64| {
        let decimals = if v > 0.0 { (2 - v.log10().floor() as i32).clamp(0, 6) as usize } else { 0 };
        let t = format!("{v:.decimals$}");
        let t = if t.contains('.') { t.trim_end_matches('0').trim_end_matches('.').to_string() } else { t };
        format!("{t} µs")
    };
    let scaled = if k == 1.0 { String::new() } else { format!(", time scale {k} applied") };
    // In corrected mode a fitted profile scales each step's decode and prefill parts
    // (`CostModel::corrected_us`), the CPU part with them: these figures are before it.
    let corrected = if spec.cost.reference.is_some() {
        "; before the fitted profile's correction, which scales the whole step"
    } else {
        ""
    };
    Some(if overlapped {
        format!(
            "hidden under the GPU's time, a step lasting the longer of the two (the CPU part {} + {} a running request{scaled}{corrected}): {why}",
            us(step_us),
            us(per_seq_us)
        )
    } else {
        format!(
            "{} + {} a running request{scaled}{corrected}, added to every step's GPU time: {why}",
            us(step_us),
            us(per_seq_us)
        )
    })
}

/// Plans, runs (one after the other) and reads an explanation.
pub fn explain(scenario: &str, base: &SimSpec, concurrency: Option<u32>) -> Result<Explanation, String> {
    let p = plan(base, concurrency)?;
    let grid: Vec<SimOutput> = p.grid_specs.iter().map(|s| crate::simulate(s, RunOptions::default())).collect();
    let point = crate::simulate(&p.point, RunOptions::default());
    Ok(assemble(scenario, base, &p, &point, &grid))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama-3.1-8B on one H100, vLLM 0.33, 1,024 + 128-token prefix-repetition prompts (the
    /// shared-prefix scenario), with `seqs` as max_num_seqs.
    fn shared_prefix(seqs: u32) -> SimSpec {
        let v = serde_json::json!({
            "version": 1,
            "engine": {"kind": "vllm", "version": "0.33.0", "max_model_len": 8192, "max_num_seqs": seqs},
            "model": "llama-3.1-8b-instruct", "hardware": "h100-80gb",
            "workload": {"dataset_name": "prefix_repetition", "prefix_repetition_prefix_len": 1024,
                         "prefix_repetition_suffix_len": 128, "prefix_repetition_num_prefixes": 8,
                         "prefix_repetition_output_len": 128, "num_prompts": 400, "max_concurrency": 32,
                         "ignore_eos": true, "seed": 0}
        });
        let s = crate::config::from_value(v, "").unwrap();
        crate::config::resolve(&s, &crate::builtin::resources().unwrap()).unwrap()
    }

    /// Where the running cap binds first, explain sweeps again with it doubled (as it does with a
    /// larger pool where the pool binds) and says the knee moves with it only where it did: at
    /// 1,024 the knee (512) stays with 2,048 (the engine is out of compute; it said "the knee moves
    /// with max_num_seqs: raise it"), at 256 it moves.
    #[test]
    fn the_running_cap_is_tested_before_the_knee_is_blamed_on_it() {
        let base = shared_prefix(1024);
        let p = plan(&base, None).unwrap();
        assert_eq!(p.wider_cap, Some(2048));
        assert!(p.wider_pool.is_none());
        assert_eq!(p.grid_specs.len(), 2 * p.grid.len());
        let e = explain("shared-prefix", &base, None).unwrap();
        assert_eq!(e.binding_limit, "max_num_seqs");
        assert!(e.knob.starts_with("A higher max_num_seqs does not move the knee"), "{}", e.knob);
        assert!(!e.knob.contains("The knee moves with"), "{}", e.knob);
        let e = explain("shared-prefix", &shared_prefix(256), None).unwrap();
        assert!(e.knob.starts_with("The knee moves with max_num_seqs: with max_num_seqs = 512"), "{}", e.knob);
    }

    /// The capped run's note counts its waves: fewer prompts than the concurrency are one wave, all
    /// in flight at once (it said "the first waves" of a single one).
    #[test]
    fn a_run_with_fewer_prompts_than_its_concurrency_is_one_wave() {
        let base = shared_prefix(1024);
        let p = plan(&base, Some(MAX_EXPLAIN_CONCURRENCY)).unwrap();
        let note = p.notes.iter().find(|n| n.starts_with("the run at concurrency 1000000")).expect("a note");
        assert!(note.ends_with("all 50000 are in flight at once (one wave), not a steady state"), "{note}");
        let p = plan(&base, Some(20_000)).unwrap();
        let note = p.notes.iter().find(|n| n.starts_with("the run at concurrency 20000")).expect("a note");
        assert!(note.ends_with("it shows the first waves, not a steady state"), "{note}");
    }
}
