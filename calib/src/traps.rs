//! Traps in measured data, flagged before a fit (docs/calibration-lessons.md).
//!
//! * **Below the physical floor**: a TTFT shorter than the prompt's linear layers and
//!   attention take at the GPU's peak FLOP/s, at the deployment's TP size (the shortest
//!   prompt of the point, so the floor is a lower bound for every statistic). It cannot
//!   have been computed: the prompt was in the prefix cache (the benchmark's initial test
//!   request, an earlier run with the same seed) or the setup is not the one described.
//!   The point's TTFTs below the floor are excluded from the fit, and its E2EL and
//!   throughput, which contain them; its TPOT and ITL stay.
//! * **A decode faster than its weights can be read** ([`decode_floor_ms`]): a TPOT (or mean
//!   ITL) shorter than reading the model's linear-layer weights once at the GPU's peak memory
//!   bandwidth, at the deployment's TP size (embeddings and a MoE card's experts left out, so
//!   the floor is a lower bound for any batch). No step of a servesim engine can be that fast:
//!   speculative decoding (not modelled), another model, GPU or TP size, or a unit error. The
//!   point's TPOT and ITL are excluded, and its E2EL and throughput, which contain them.
//! * **Orderings that cannot be physical**: among points of one workload at increasing
//!   load, a TPOT that falls, or an output throughput that falls, by more than
//!   [`ORDER_TOLERANCE`]: the higher-load point's value of that family is excluded. Each point
//!   is compared with the nearest lower-load point that has a value of the family (a point
//!   between them that publishes none, or had it excluded, is passed over).
//! * **A throughput its own TPOT cannot give** ([`flag_throughput_beyond_tpot`]): an output
//!   throughput above what the point's requests in flight can emit at its mean TPOT. The
//!   point's decode figures and throughput contradict each other and the point cannot say
//!   which is wrong (a TPOT in µs, a throughput of another run): its TPOT, ITL, E2EL and
//!   throughput are excluded, as for a decode below its floor; its TTFT stays.
//! * **Percentiles offered for means**: where a point has no mean of a family, its median
//!   or p99 is fitted against the simulated median or p99 (`procedure::measured_targets`);
//!   reported, not excluded.
//! * **Missing metrics**: the fit uses what is there; reported.
//! * **A mean that carries a tail** ([`flag_mean_tails`]): a mean TTFT far above its median,
//!   beyond the simulated point's ratio: the median is fitted instead.
//! * **A cold vLLM server** ([`flag_cold_server`]): vLLM does not warm itself up after start-up
//!   (SGLang sends itself a request before it reports ready), and its first requests pay
//!   one-off costs: lazy initialisation in the front end and the engine, first-use kernel
//!   compilation. A point whose every request is in its first wave, with no warm-up before it
//!   (no initial test request, no warm-ups, no earlier run's prompts), may be measuring them in
//!   every TTFT: its TTFTs are excluded; E2EL, throughput, TPOT and ITL stay (the one-off cost
//!   is a small part of an E2EL of any length).
//! * **Output lengths that are not the run's** ([`flag_lengths`]): a point's E2EL, TTFT and
//!   TPOT of one statistic imply how many tokens a request generated
//!   (`(E2EL − TTFT) ÷ TPOT + 1`); the same identity on the simulated point gives the
//!   scenario's. Where they differ by more than [`LENGTH_TOLERANCE`] (and the values' own
//!   noise), the scenario's output lengths are not the measured run's: the point's E2EL and
//!   throughput, which scale with the lengths, are excluded; its TTFT, TPOT and ITL stay.

use serde::Serialize;
use sim::config::SimSpec;

use crate::fit::{family, FitPoint, MEAN_TARGETS, TARGETS};

/// How far a TPOT or throughput may move the wrong way with load before it is flagged.
pub const ORDER_TOLERANCE: f64 = 0.15;

/// A measured TTFT below this fraction of the floor is flagged (the floor is at 100% of peak;
/// the margin covers a card's peak being quoted low).
pub const FLOOR_MARGIN: f64 = 0.95;

/// One flagged value or point.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Trap {
    pub point: String,
    /// The report keys concerned.
    pub metrics: Vec<String>,
    /// `below_physical_floor`, `below_decode_floor`, `cold_server`, `ordering`, `percentile_for_mean`, `missing`, `tail`,
    /// `output_lengths`, `inconsistent`, `throughput_beyond_tpot`, `statistic_set_aside`
    /// (`crate::procedure::set_aside_statistics`); a live
    /// calibration's `unsteady_engine` (`crate::procedure::UNSTEADY_SPEED_RATIO`).
    pub kind: &'static str,
    /// `excluded` (not fitted), `used` (fitted as stated).
    pub action: &'static str,
    pub why: String,
}

/// The fastest a cold prefill of `prompt_len` tokens can be on the deployment, ms: the
/// linear layers (2 FLOPs per parameter per token, embedding excluded) and causal attention
/// (4 · layers · heads · head_dim FLOPs per (query, key) pair) at 100% of the GPU's peak,
/// each GPU doing 1/TP of it; divided by the scenario's `cost.time_scale`.
pub fn ttft_floor_ms(spec: &SimSpec, prompt_len: u32) -> f64 {
    ttft_floor_after_ms(spec, 0, prompt_len)
}

/// The same for `n` prompt tokens computed after `cached` tokens a prefix cache held: the
/// linear layers on the `n`, attention from each of them over everything before it.
pub fn ttft_floor_after_ms(spec: &SimSpec, cached: u32, n: u32) -> f64 {
    let m = &spec.model;
    let g = &spec.gpu;
    let d = &spec.deployment;
    let tp = f64::from(d.tensor_parallel_size.max(1));
    let flops = linear_peak_flops(spec);
    let (c, l) = (f64::from(cached), f64::from(n));
    let linear = (m.num_parameters - m.embedding_parameters().min(m.num_parameters)) as f64 / tp;
    let linear_s = 2.0 * linear * l / flops;
    let pairs = l * c + l * (l + 1.0) / 2.0;
    let attn_s = 4.0 * f64::from(m.num_layers) * f64::from(m.num_attention_heads) * f64::from(m.head_dim) / tp * pairs
        / g.bf16_peak_flops();
    // A time-scaled engine (`cost.time_scale`, servesim serve at `--time-scale k`) is k times faster.
    (linear_s + attn_s) * 1e3 / spec.cost.time_scale
}

/// The peak FLOP/s the linear layers can run at on the run's GPU: FP8 with quantized weights on a
/// card with FP8 tensor cores, else BF16 at the card's highest known rate
/// ([`sim::cards::GpuCard::bf16_peak_flops`]).
pub fn linear_peak_flops(spec: &SimSpec) -> f64 {
    match (&spec.deployment.quantization, spec.gpu.dense_fp8_flops) {
        (Some(_), Some(f8)) => f8,
        _ => spec.gpu.bf16_peak_flops(),
    }
}

/// The least time a decode step can take, ms: the linear layers' weights (the embeddings and a
/// MoE card's experts left out: at batch 1 only a few experts are read) read once per GPU at
/// the GPU's peak memory bandwidth, at the deployment's TP size and weight bytes; divided by the
/// scenario's `cost.time_scale`.
pub fn decode_floor_ms(spec: &SimSpec) -> f64 {
    let m = &spec.model;
    let tp = f64::from(spec.deployment.tensor_parallel_size.max(1));
    let linear_bytes = f64::from(spec.deployment.linear_weight_bytes);
    let params = m.num_parameters.saturating_sub(m.embedding_parameters()).saturating_sub(m.expert_parameters());
    params as f64 * linear_bytes / tp / spec.gpu.memory_bandwidth_bytes_per_s * 1e3 / spec.cost.time_scale
}

/// The load of a point, for ordering among points of one kind of load (`flag`'s key): the
/// concurrency of a closed loop (unlimited: all at once), else the request rate (capped by a
/// concurrency: among points of the same cap).
fn load_of(p: &FitPoint) -> f64 {
    match (p.spec.workload.max_concurrency, p.spec.workload.request_rate) {
        (Some(_), Some(r)) => r,
        (Some(c), None) => f64::from(c),
        (None, Some(r)) => r,
        (None, None) => f64::INFINITY,
    }
}

/// Flags the traps of `points` and excludes the flagged values from `points[i].measured`.
pub fn flag(points: &mut [FitPoint]) -> Vec<Trap> {
    let mut traps = Vec::new();
    // Missing metrics and percentiles standing for means.
    for p in points.iter() {
        let mut missing = Vec::new();
        let mut pct = Vec::new();
        for fam in ["ttft", "tpot", "itl", "e2el", "throughput"] {
            let mean_i = (0..MEAN_TARGETS).find(|&t| family(TARGETS[t]) == fam).unwrap();
            if p.measured[mean_i].is_some() {
                continue;
            }
            let used: Vec<&str> = (MEAN_TARGETS..TARGETS.len())
                .filter(|&t| family(TARGETS[t]) == fam && p.measured[t].is_some())
                .map(|t| TARGETS[t].key())
                .collect();
            if used.is_empty() {
                missing.push(TARGETS[mean_i].to_string());
            } else {
                pct.extend(used.iter().map(|s| s.to_string()));
            }
        }
        if !pct.is_empty() {
            traps.push(Trap {
                point: p.name.clone(),
                metrics: pct.clone(),
                kind: "percentile_for_mean",
                action: "used",
                why: format!("no mean of these families: {} fitted against the simulated statistics of the same names, not as means", pct.join(", ")),
            });
        }
        if !missing.is_empty() {
            traps.push(Trap {
                point: p.name.clone(),
                metrics: missing.clone(),
                kind: "missing",
                action: "used",
                why: format!("not published: fitted on the other metrics ({} absent)", missing.join(", ")),
            });
        }
    }
    // TTFT below the physical floor: of the part of each prompt the scenario's own prefix
    // cache cannot hold, a first segment that two or more requests share being held (a
    // shared-prefix workload's TTFT is of its suffix: it was flagged against the whole prompt).
    for p in points.iter_mut() {
        let w = sim::workload::generate(&p.spec.workload);
        let shareable = p.spec.engine.prefix_caching();
        let mut firsts: std::collections::BTreeMap<u64, u32> = std::collections::BTreeMap::new();
        // Leading segments with a BOS before them counted in (`RequestSpec::lead_segment`).
        for r in &w.requests {
            if let Some(seg) = r.lead_segment() {
                *firsts.entry(seg.key).or_insert(0) += 1;
            }
        }
        let split = |r: &sim::request::RequestSpec| -> (u32, u32) {
            let shared = match r.lead_segment() {
                Some(seg) if shareable && firsts.get(&seg.key).is_some_and(|&n| n >= 2) => {
                    seg.len.min(r.prompt_len.saturating_sub(1))
                }
                _ => 0,
            };
            (shared, r.prompt_len - shared)
        };
        let Some((cached, shortest)) =
            w.requests.iter().map(split).min_by(|a, b| {
                ttft_floor_after_ms(&p.spec, a.0, a.1).total_cmp(&ttft_floor_after_ms(&p.spec, b.0, b.1))
            })
        else {
            continue;
        };
        let floor = ttft_floor_after_ms(&p.spec, cached, shortest);
        let mut below = Vec::new();
        for t in 0..TARGETS.len() {
            if family(TARGETS[t]) != "ttft" {
                continue;
            }
            if let Some(v) = p.measured[t].filter(|v| *v < FLOOR_MARGIN * floor) {
                below.push(format!("{} {v:.1} ms", TARGETS[t]));
                p.measured[t] = None;
            }
        }
        if !below.is_empty() {
            // The same cache hit shortened the requests' E2EL and so raised the throughput:
            // only the decode metrics (TPOT, ITL) of the point are clean.
            let mut also = Vec::new();
            for t in 0..TARGETS.len() {
                if matches!(family(TARGETS[t]), "ttft" | "e2el" | "throughput") && p.measured[t].is_some() {
                    also.push(TARGETS[t].key());
                    p.measured[t] = None;
                }
            }
            if !also.is_empty() {
                below.push(format!("and with them {} (they contain the same TTFTs)", also.join(", ")));
            }
            let tp = p.spec.deployment.tensor_parallel_size.max(1);
            traps.push(Trap {
                point: p.name.clone(),
                metrics: below.iter().filter(|s| !s.starts_with("and ")).map(|s| s.split(' ').next().unwrap_or("").to_string()).collect(),
                kind: "below_physical_floor",
                action: "excluded",
                why: format!(
                    "{} below the physical floor of a cold {shortest}-token prefill{}: {floor:.1} ms on {} at TP {tp} at 100% of peak FLOP/s. It cannot have been computed: the prompt was in the prefix cache (the benchmark's initial test request, or an earlier run with the same seed), or the setup is not the one described. Excluded from the fit; the point's TPOT and ITL are kept.",
                    below.join(", "),
                    if cached > 0 { format!(" after a cached {cached}-token shared prefix") } else { String::new() },
                    p.spec.gpu.id
                ),
            });
        }
    }
    // A decode faster than its weights can be read.
    for p in points.iter_mut() {
        let floor = decode_floor_ms(&p.spec);
        let below: Vec<String> = (0..TARGETS.len())
            .filter(|&t| {
                let k = TARGETS[t].key();
                (family(TARGETS[t]) == "tpot" || k == "mean_itl_ms")
                    && p.measured[t].is_some_and(|v| v < FLOOR_MARGIN * floor)
            })
            .map(|t| format!("{} {:.3} ms", TARGETS[t], p.measured[t].unwrap_or(0.0)))
            .collect();
        if below.is_empty() {
            continue;
        }
        let mut excluded = Vec::new();
        for t in 0..TARGETS.len() {
            if matches!(family(TARGETS[t]), "tpot" | "itl" | "e2el" | "throughput") && p.measured[t].is_some() {
                excluded.push(TARGETS[t].to_string());
                p.measured[t] = None;
            }
        }
        let tp = p.spec.deployment.tensor_parallel_size.max(1);
        traps.push(Trap {
            point: p.name.clone(),
            metrics: excluded.clone(),
            kind: "below_decode_floor",
            action: "excluded",
            why: format!(
                "{} below the least a decode step takes, {floor:.3} ms: {}'s linear-layer weights read once at {}'s peak \
                 memory bandwidth at TP {tp}. No step servesim models can be that fast: speculative decoding (not \
                 modelled), another model, GPU or TP size than the scenario's, or a unit error. Excluded from the fit: {} \
                 (the E2EL and throughput contain the same decode times).",
                below.join(", "),
                p.spec.model.id,
                p.spec.gpu.id,
                excluded.join(", ")
            ),
        });
    }
    traps.extend(flag_cold_server(points));
    traps.extend(flag_inconsistent(points));
    traps.extend(flag_throughput_beyond_tpot(points));
    // Orderings across load points of one workload and one kind of load: a concurrency and a
    // request rate are not one scale (a rate of 0.9 is not "more" than concurrency 1), nor is a
    // rate capped by a concurrency either.
    let key = |p: &FitPoint| {
        let mut w = p.spec.workload.clone();
        let kind = match (w.max_concurrency, w.request_rate) {
            (_, None) => "closed".to_string(),
            (None, Some(_)) => "rate".to_string(),
            (Some(c), Some(_)) => format!("rate capped at {c}"),
        };
        w.max_concurrency = None;
        w.request_rate = None;
        w.num_prompts = 0;
        format!("{}|{}|{kind}|{:?}|{:?}", p.spec.model.id, p.spec.gpu.id, w.dataset, w.seed)
    };
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by(|&a, &b| {
        key(&points[a]).cmp(&key(&points[b])).then(load_of(&points[a]).total_cmp(&load_of(&points[b])))
    });
    for (j, &b) in order.iter().enumerate() {
        for (fam, wrong_way) in [("tpot", -1.0), ("throughput", -1.0)] {
            // The nearest lower-load point of the same workload that measured a target of the
            // family this point measured (a point between them without it, or with it excluded,
            // is passed over: the fall from c1 to c16 across a c4 without TPOT had gone unflagged),
            // and the first such target.
            let shared = |a: usize| {
                (0..TARGETS.len()).find(|&t| {
                    family(TARGETS[t]) == fam && points[a].measured[t].is_some() && points[b].measured[t].is_some()
                })
            };
            let Some((a, t)) = order[..j].iter().rev().find_map(|&a| {
                (key(&points[a]) == key(&points[b]) && load_of(&points[a]) < load_of(&points[b]))
                    .then(|| shared(a).map(|t| (a, t)))
                    .flatten()
            }) else {
                continue;
            };
            let (va, vb) = (points[a].measured[t].unwrap(), points[b].measured[t].unwrap());
            if wrong_way * (vb / va - 1.0) > ORDER_TOLERANCE {
                let excluded: Vec<String> = (0..TARGETS.len())
                    .filter(|&u| family(TARGETS[u]) == fam && points[b].measured[u].is_some())
                    .map(|u| TARGETS[u].to_string())
                    .collect();
                for u in 0..TARGETS.len() {
                    if family(TARGETS[u]) == fam {
                        points[b].measured[u] = None;
                    }
                }
                traps.push(Trap {
                    point: points[b].name.clone(),
                    metrics: excluded,
                    kind: "ordering",
                    action: "excluded",
                    why: format!(
                        "{} falls from {va:.2} at {} to {vb:.2} at the higher load of {} ({:+.0}%): more load cannot make it {}. Excluded at the higher load.",
                        TARGETS[t],
                        points[a].name,
                        points[b].name,
                        100.0 * (vb / va - 1.0),
                        if fam == "tpot" { "faster per token" } else { "lower" }
                    ),
                });
            }
        }
    }
    traps
}

/// A point that may be a fresh vLLM server's first requests: the engine is vLLM, nothing
/// warmed the server before the point (`initial_test_request` false, no `num_warmups`, no
/// `prior_run_prompts` or `prior_run_prefixes`), and every request of the point is in its first wave (no request rate,
/// no trace whose rows arrive at different times, and a concurrency limit of at least
/// `num_prompts`, so all were sent at once). Its TTFT
/// values are excluded; the rest of the point stays. The server may have been warm (the
/// results do not say); excluding costs only what the TTFT would have told the fit about
/// prefill, which then stays at the prior.
pub fn flag_cold_server(points: &mut [FitPoint]) -> Vec<Trap> {
    let mut traps = Vec::new();
    for p in points.iter_mut() {
        let w = &p.spec.workload;
        let warmed = w.initial_test_request || w.num_warmups > 0 || w.prior_run_prompts > 0 || w.prior_run_prefixes > 0;
        // A trace times its own arrivals: one wave only if every row arrives at once.
        let spread = match &w.dataset {
            sim::workload::Dataset::Trace { rows } => rows.iter().any(|r| r.arrival_time != rows[0].arrival_time),
            sim::workload::Dataset::Requests { requests } => requests.iter().any(|r| r.arrival_ns > 0),
            _ => false,
        };
        let one_wave = !spread && w.request_rate.is_none() && w.max_concurrency.is_none_or(|c| c >= w.num_prompts);
        if p.spec.engine.engine_kind() != sim::config::EngineKind::Vllm || warmed || !one_wave {
            continue;
        }
        let excluded: Vec<String> = (0..TARGETS.len())
            .filter(|&t| family(TARGETS[t]) == "ttft" && p.measured[t].is_some())
            .map(|t| TARGETS[t].to_string())
            .collect();
        if excluded.is_empty() {
            continue;
        }
        for t in 0..TARGETS.len() {
            if family(TARGETS[t]) == "ttft" {
                p.measured[t] = None;
            }
        }
        traps.push(Trap {
            point: p.name.clone(),
            metrics: excluded,
            kind: "cold_server",
            action: "excluded",
            why: format!(
                "all {} requests were sent at once with nothing before them (no initial test request, no warm-ups, \
                 no earlier run's prompts): on a freshly started vLLM server, which does not warm itself up, every \
                 one of these TTFTs may carry the server's one-off first-request costs. Excluded; the prefill cost \
                 stays at the prior. If the server had served requests before, say so in the scenario \
                 (workload.initial_test_request, num_warmups or prior_run_prompts) and the TTFTs are fitted",
                w.num_prompts
            ),
        });
    }
    traps
}

/// Figures of one point that cannot all be true, whatever the engine: a mean TTFT longer than
/// the mean E2EL it is part of (both excluded), and under a closed loop an output throughput
/// above what its clients can receive, concurrency × mean output ÷ mean E2EL (Little's law;
/// with [`LENGTH_TOLERANCE`] of room for the lengths and the run's ends), or under
/// 1/[`LITTLE_BELOW`] of it over at least [`LITTLE_MIN_WAVES`] prompts a client, excluded; under
/// a finite rate, a request throughput the rate cannot give ([`RATE_Z`]), the whole point excluded.
pub fn flag_inconsistent(points: &mut [FitPoint]) -> Vec<Trap> {
    let mut traps = Vec::new();
    let at = |k: &str| TARGETS.iter().position(|t| t.key() == k).expect("a target");
    let (ttft, e2el, thr) = (at("mean_ttft_ms"), at("mean_e2el_ms"), at("output_throughput"));
    for p in points.iter_mut() {
        if let (Some(f), Some(e)) = (p.measured[ttft], p.measured[e2el]) {
            if f > e {
                p.measured[ttft] = None;
                p.measured[e2el] = None;
                traps.push(Trap {
                    point: p.name.clone(),
                    metrics: vec!["mean_ttft_ms".into(), "mean_e2el_ms".into()],
                    kind: "inconsistent",
                    action: "excluded",
                    why: format!(
                        "mean TTFT {f:.1} ms is longer than the mean E2EL {e:.1} ms it is part of: one of them is not this run's (or not a mean). Both excluded"
                    ),
                });
            }
        }
        // Little's law on a closed loop: its clients receive concurrency × mean output ÷ mean
        // E2EL; above that is impossible, and far below it over a run long enough that the
        // client kept its concurrency in flight most of the time (its first and last waves ramp).
        let w = &p.spec.workload;
        if let (Some(c), Some(e), Some(x), None) =
            (w.max_concurrency, p.measured[e2el], p.measured[thr], w.request_rate)
        {
            let (_, out) = sim::workload::generate(w).mean_lengths();
            let clients = c.min(w.num_prompts);
            let bound = f64::from(clients) * out / (e / 1e3);
            let law = format!(
                "what {clients} client(s) receive with a mean E2EL of {e:.1} ms and {out:.0}-token outputs ({bound:.1} tok/s, Little's law)"
            );
            let why = if x > LENGTH_TOLERANCE * bound {
                Some(format!("output throughput {x:.1} tok/s is above {law}: it is not this run's. Excluded"))
            } else if u64::from(w.num_prompts) >= LITTLE_MIN_WAVES * u64::from(c) && x * LITTLE_BELOW < bound {
                Some(format!(
                    "output throughput {x:.1} tok/s is under 1/{LITTLE_BELOW} of {law} over {} prompts: it is not this run's. Excluded",
                    w.num_prompts
                ))
            } else {
                None
            };
            if let Some(why) = why {
                p.measured[thr] = None;
                traps.push(Trap {
                    point: p.name.clone(),
                    metrics: vec!["output_throughput".into()],
                    kind: "inconsistent",
                    action: "excluded",
                    why,
                });
            }
        }
        // Under a finite rate the client sends no faster than the rate: N requests' arrivals span
        // (N − 1) gaps of mean 1/rate (gamma with shape `burstiness`), and the run at least that.
        // A request throughput (the output throughput ÷ the mean output) above N over the
        // shortest span [`RATE_Z`] standard deviations allow is another load's run (the
        // robustness audit of 2026-12-07: a concurrency-8 burst labelled 5 req/s, 19.2 req/s
        // over 100 prompts, fitted a prefill cost 2.9× the true one without a word). Every
        // figure of the point is that other run's: all are excluded.
        if let (Some(r), Some(x), None) = (w.request_rate, p.measured[thr], w.measure_window_ns) {
            let workload = sim::workload::generate(w);
            let (_, out) = workload.mean_lengths();
            let gaps = f64::from(w.num_prompts.saturating_sub(1));
            let shortest = (gaps - RATE_Z * (gaps / w.burstiness.max(1e-9)).sqrt()) / r;
            let req = x / out.max(1.0);
            let most = f64::from(w.num_prompts) / shortest;
            if r.is_finite() && r > 0.0 && !workload.trace_arrivals && shortest > 0.0 && req > LENGTH_TOLERANCE * most {
                let excluded: Vec<String> = (0..TARGETS.len())
                    .filter(|&t| p.measured[t].take().is_some())
                    .map(|t| TARGETS[t].to_string())
                    .collect();
                traps.push(Trap {
                    point: p.name.clone(),
                    metrics: excluded,
                    kind: "inconsistent",
                    action: "excluded",
                    why: format!(
                        "output throughput {x:.1} tok/s is {req:.2} requests/s at the scenario's {out:.0}-token outputs, above \
                         what a client sending {} prompts at {r} req/s (burstiness {}) can complete, at most {most:.2} requests/s \
                         (their arrivals span at least {shortest:.1} s): the run was not at this rate (another rate, a burst, a \
                         closed loop at a concurrency), or its lengths are not the scenario's. Every figure of the point is excluded",
                        w.num_prompts, w.burstiness
                    ),
                });
            }
        }
    }
    traps
}

/// An output throughput above what the point's own mean TPOT allows: flagged `throughput_beyond_tpot`,
/// its TPOT, ITL, E2EL and throughput excluded (the decode figures and the throughput contradict
/// each other, and one point cannot say which is wrong: a TPOT written in µs, a throughput of
/// another run; the TTFT stays).
///
/// The bound, from what a run is. Every request's E2EL lies within the run's duration D (from
/// the first dispatch to the last completion) and at most C requests are in flight at once (the
/// concurrency limit, or all N requests where there is none): Σ E2EL_i ≤ C·D. A request of n_i > 1
/// tokens has E2EL_i ≥ (n_i − 1)·TPOT_i (TPOT is (E2EL − TTFT) ÷ (n − 1)), and with m the fewest
/// tokens of such a request, Σ (n_i − 1)·TPOT_i ≥ (m − 1)·N′·mean TPOT over the N′ requests the
/// mean is taken over. So the output throughput Σ n_i ÷ D ≤ C · (Σ n_i ÷ N′) ÷ ((m − 1) · mean
/// TPOT): for fixed lengths n, C × 1000 ÷ mean TPOT (ms) × n ÷ (n − 1). It holds whatever the
/// spread of the requests' TPOTs (only the mean enters, weighted by m, the least length) and
/// however the tokens were chunked (TPOT counts tokens, not chunks; the mean ITL, over chunks,
/// gives no such bound and is not used). The lengths are the scenario's, which the file's token
/// totals were checked against: where they are all one length, m is it ÷ [`LENGTH_TOLERANCE`];
/// where they vary (the run drew its own), m is 2, the least a multi-token output can be; the
/// mean length is taken × [`LENGTH_TOLERANCE`], and the TPOT at its rounding's lower end. A
/// steady closed loop of fixed lengths runs at about 0.9 of the exact bound; the margins put it
/// near 0.6 (and far lower where lengths vary), so a physical run is not flagged, while a TPOT
/// in the wrong unit is 1,000 times over. A measured
/// window (`measure_window_ns`: requests cut at its edges) is not checked.
pub fn flag_throughput_beyond_tpot(points: &mut [FitPoint]) -> Vec<Trap> {
    let at = |k: &str| TARGETS.iter().position(|t| t.key() == k).expect("a target");
    let (tpot, thr) = (at("mean_tpot_ms"), at("output_throughput"));
    let mut traps = Vec::new();
    for p in points.iter_mut() {
        let w = &p.spec.workload;
        let (Some(t), Some(x), None) = (p.measured[tpot], p.measured[thr], w.measure_window_ns) else { continue };
        let reqs = sim::workload::generate(w);
        let multi: Vec<f64> = reqs.requests.iter().map(|r| f64::from(r.output_len)).filter(|&n| n > 1.0).collect();
        let Some(least) = multi.iter().copied().reduce(f64::min) else { continue };
        // Lengths that vary (a random range, EOS, a trace) were the run's own draw: its shortest
        // may be any, so the least a multi-token output can be, 2.
        let least = if multi.iter().all(|&n| n == least) { least } else { 2.0 * LENGTH_TOLERANCE };
        let mean_len = multi.iter().sum::<f64>() / multi.len() as f64 * LENGTH_TOLERANCE;
        let steps = least / LENGTH_TOLERANCE - 1.0;
        let t_low = t - crate::fit::rounding_half_unit(t);
        let n = reqs.requests.len() as u32;
        let c = w.max_concurrency.map_or(n, |c| c.min(n)).max(1);
        if steps <= 0.0 || t_low <= 0.0 {
            continue;
        }
        let bound = f64::from(c) * 1000.0 * mean_len / (steps * t_low);
        if x <= bound {
            continue;
        }
        let mut excluded = Vec::new();
        for u in 0..TARGETS.len() {
            if matches!(family(TARGETS[u]), "tpot" | "itl" | "e2el" | "throughput") && p.measured[u].take().is_some() {
                excluded.push(TARGETS[u].to_string());
            }
        }
        traps.push(Trap {
            point: p.name.clone(),
            metrics: excluded.clone(),
            kind: "throughput_beyond_tpot",
            action: "excluded",
            why: format!(
                "output throughput {x:.1} tok/s is above what {c} request(s) in flight can emit at the mean TPOT of \
                 {t} ms, at most {bound:.1} tok/s (concurrency × 1000 ÷ TPOT × the outputs' length over their decode \
                 steps, with room for the lengths and the rounding): the decode figures and the throughput are not of \
                 one run (a TPOT in µs, another run's throughput). Excluded: {} (the point cannot say which is wrong); \
                 the TTFT is kept",
                excluded.join(", ")
            ),
        });
    }
    traps
}

/// Standard deviations below the mean span of a finite-rate point's arrivals that the run may
/// have taken ([`flag_inconsistent`]): 5 leaves a true run's throughput flagged about once in
/// 3.5 million, before [`LENGTH_TOLERANCE`]'s room for the lengths.
pub const RATE_Z: f64 = 5.0;

/// Prompts per client a closed-loop point needs before its throughput is checked against Little's
/// law from below (shorter runs spend much of their time ramping up and down).
pub const LITTLE_MIN_WAVES: u64 = 4;

/// How far below Little's law (concurrency × mean output ÷ mean E2EL) a long closed-loop
/// point's throughput may be before it is flagged: the ramps of its first and last waves take
/// less (the cost audit of 2026-12-06's case: 450 tok/s where TPOT and E2EL imply 968).
pub const LITTLE_BELOW: f64 = 1.6;

/// A tail much longer than the simulator's, at the prior: a p99 (TTFT, TPOT, ITL or E2EL)
/// whose ratio to the point's median (or mean) is more than [`TAIL_RATIO`] times the
/// simulated ratio. Queueing as the simulator models it does not make it; a cold engine's
/// first requests, or one outlier run, do (docs/calibration-lessons.md §4). The p99 is
/// excluded; the median and mean stay.
pub fn flag_tails(points: &mut [FitPoint], prior: &sim::cost::CostModel) -> Vec<Trap> {
    let mut traps = Vec::new();
    for p in points.iter_mut() {
        let p99s: Vec<usize> =
            (0..TARGETS.len()).filter(|&t| TARGETS[t].key().starts_with("p99_") && p.measured[t].is_some()).collect();
        if p99s.is_empty() {
            continue;
        }
        let sim = p.predict(prior);
        for t in p99s {
            let fam = family(TARGETS[t]);
            // The point's central value of the family: its median, else its mean.
            let Some(c) = (0..TARGETS.len())
                .filter(|&u| family(TARGETS[u]) == fam && !TARGETS[u].key().starts_with("p99_"))
                .find(|&u| p.measured[u].is_some() && sim[u].is_some())
            else {
                continue;
            };
            let (m99, mc) = (p.measured[t].unwrap(), p.measured[c].unwrap());
            let (s99, sc) = (sim[t].unwrap_or(0.0), sim[c].unwrap_or(0.0));
            if mc <= 0.0 || sc <= 0.0 || s99 <= 0.0 {
                continue;
            }
            let (rm, rs) = (m99 / mc, s99 / sc);
            if rm > TAIL_RATIO * rs {
                p.measured[t] = None;
                traps.push(Trap {
                    point: p.name.clone(),
                    metrics: vec![TARGETS[t].to_string()],
                    kind: "tail",
                    action: "excluded",
                    why: format!(
                        "{} is {rm:.1}× the {} while the simulated engine's is {rs:.1}× at the prior: a tail queueing does not make (a cold engine's first requests, an outlier run). Excluded; the {} is kept.",
                        TARGETS[t], TARGETS[c], TARGETS[c]
                    ),
                });
            }
        }
    }
    traps
}

/// A mean TTFT that carries a tail the simulator does not make: where a point gives a mean and a
/// median of TTFT, and the mean over the median is more than [`MEAN_TAIL_RATIO`] times the
/// simulated point's at the prior, a few requests of the run (a cold engine's first, an outlier)
/// took far longer than the rest, and the mean is theirs as much as the engine's. The median is
/// fitted instead, against the simulated median (`given` holds each point's values as the source
/// gives them, medians included: `procedure::given_targets`). A mean carrying such a tail had
/// passed every trap, its median and p99 set aside before the tail check (the calibration audit
/// of 2026-12-06: a mean of 140 ms over a median of 87 at concurrency 1 fitted prefill 1.4x).
pub fn flag_mean_tails(points: &mut [FitPoint], given: &[Vec<Option<f64>>], prior: &sim::cost::CostModel) -> Vec<Trap> {
    let at = |k: &str| TARGETS.iter().position(|t| t.key() == k).expect("a target");
    let (mean, median) = (at("mean_ttft_ms"), at("median_ttft_ms"));
    let mut traps = Vec::new();
    for (p, g) in points.iter_mut().zip(given) {
        let (Some(mm), Some(md)) = (p.measured[mean], g[median]) else { continue };
        let sim = p.predict(prior);
        let (Some(sm), Some(sd)) = (sim[mean], sim[median]) else { continue };
        if md <= 0.0 || sm <= 0.0 || sd <= 0.0 {
            continue;
        }
        let (rm, rs) = (mm / md, sm / sd);
        if rm > MEAN_TAIL_RATIO * rs {
            p.measured[mean] = None;
            p.measured[median] = Some(md);
            traps.push(Trap {
                point: p.name.clone(),
                metrics: vec!["mean_ttft_ms".into(), "median_ttft_ms".into()],
                kind: "tail",
                action: "median fitted instead",
                why: format!(
                    "mean TTFT {mm:.1} ms is {rm:.2}× the median {md:.1} ms while the simulated engine's is {rs:.2}× at the prior: a few requests took far longer than the rest (a cold engine's first requests, an outlier) and carry the mean. The median is fitted instead, against the simulated median"
                ),
            });
        }
    }
    traps
}

/// How far the mean TTFT over the median may exceed the simulated ratio before the mean is
/// taken to carry a tail ([`flag_mean_tails`]).
pub const MEAN_TAIL_RATIO: f64 = 1.3;

/// How much longer than the simulated tail a measured p99 may be before it is flagged.
pub const TAIL_RATIO: f64 = 4.0;

/// How far the output length a point's E2EL, TTFT and TPOT imply may lie from the scenario's
/// (as a ratio) before the point's E2EL and throughput are flagged. On the published corpus's
/// lowest-load points (`python3 calib/held_out.py`'s fitted points, 2026-12-02) the sets whose
/// lengths are known give ratios of 0.97–1.06 (evalscope, whose TPOT is printed in whole ms;
/// llm-d exp-0's trace, 1.00), the sets that servesim replays with stand-in ShareGPT lengths
/// 0.61–0.63 (the 2024 SGLang-vs-vLLM sets, whose median output is well below the mean):
/// 1.25 lies between, with room on both sides.
pub const LENGTH_TOLERANCE: f64 = 1.25;

/// How far a result file's exact mean length (`total_input_tokens` or `total_output_tokens`
/// over its requests) may lie from the scenario's before the scenario is refused as not the
/// measured run, as a ratio above 1; `lengths` are the scenario's requests' lengths.
///
/// The totals are exact, so the room is only for what a right scenario still differs by:
/// * the two runs' length draws, when the lengths are random (the measured run drew its own:
///   `vllm bench serve` with numpy, servesim with its own streams): two means of `n` draws
///   from one distribution differ by a standard deviation of `sd · √(2 / n)`; allowed
///   [`LENGTH_DRAW_Z`] of them;
/// * a few tokens a request that the client counts and the scenario does not (a BOS token,
///   a chat template's ~30 tokens where the client counts the server's `usage`; re-tokenised
///   output text): [`LENGTH_SLACK_TOKENS`] a request;
/// * and [`LENGTH_SLACK`] of the mean.
///
/// Whichever is largest, and never more than [`LENGTH_TOLERANCE`] (refused above it before
/// 2026-12-06, when any difference under 25% passed silently: a result whose prompts were 15%
/// longer than the scenario's had its prefill fitted about 15% slow).
pub fn mean_length_tolerance(lengths: &[u32]) -> f64 {
    let n = lengths.len();
    if n == 0 {
        return LENGTH_TOLERANCE;
    }
    let nf = n as f64;
    let mean = lengths.iter().map(|&l| f64::from(l)).sum::<f64>() / nf;
    if mean <= 0.0 {
        return LENGTH_TOLERANCE;
    }
    let var =
        if n > 1 { lengths.iter().map(|&l| (f64::from(l) - mean).powi(2)).sum::<f64>() / (nf - 1.0) } else { 0.0 };
    let draws = LENGTH_DRAW_Z * (var * 2.0 / nf).sqrt();
    let room = draws.max(LENGTH_SLACK_TOKENS).max(LENGTH_SLACK * mean);
    (1.0 + room / mean).min(LENGTH_TOLERANCE)
}

/// z of two runs' mean lengths' difference allowed by [`mean_length_tolerance`] (4: one in
/// about 16,000 right scenarios refused).
pub const LENGTH_DRAW_Z: f64 = 4.0;

/// Tokens a request that a client may count beyond the scenario's ([`mean_length_tolerance`]).
pub const LENGTH_SLACK_TOKENS: f64 = 32.0;

/// The share of the mean always allowed by [`mean_length_tolerance`].
pub const LENGTH_SLACK: f64 = 0.03;

/// z of the values' own noise the length ratio must also exceed (the ratio rests on three
/// measured values, each rounded or noisy: `crate::fit::published_noise`).
pub const LENGTH_Z: f64 = 3.0;

/// Flags, per point and statistic (mean, median), output lengths that are not the measured
/// run's (see the module docs), using the simulated point at `prior`; excludes the point's E2EL
/// and throughput from `points[i].measured`.
pub fn flag_lengths(points: &mut [FitPoint], prior: &sim::cost::CostModel) -> Vec<Trap> {
    let mut traps = Vec::new();
    let at = |k: &str| TARGETS.iter().position(|t| t.key() == k).expect("a target");
    for p in points.iter_mut() {
        let noise = crate::fit::published_noise(&p.measured);
        let mut sim: Option<Vec<Option<f64>>> = None;
        for stat in ["mean", "median"] {
            let (e, f, t) =
                (at(&format!("{stat}_e2el_ms")), at(&format!("{stat}_ttft_ms")), at(&format!("{stat}_tpot_ms")));
            let (Some(me), Some(mf), Some(mt)) = (p.measured[e], p.measured[f], p.measured[t]) else { continue };
            if mt <= 0.0 || me <= mf {
                continue;
            }
            let s = sim.get_or_insert_with(|| p.predict(prior));
            let (Some(se), Some(sf), Some(st)) = (s[e], s[f], s[t]) else { continue };
            if st <= 0.0 || se <= sf {
                continue;
            }
            let (lm, ls) = ((me - mf) / mt + 1.0, (se - sf) / st + 1.0);
            let r = lm / ls;
            // The measured length's relative noise: E2EL − TTFT and TPOT's, in quadrature.
            let sigma = (noise[e] * me / (me - mf)).hypot(noise[f] * mf / (me - mf)).hypot(noise[t]);
            if r.ln().abs() <= LENGTH_TOLERANCE.ln().max(LENGTH_Z * sigma) {
                continue;
            }
            // E2EL and throughput, as measured (the E2EL above is among them, so never empty).
            let mut excluded = Vec::new();
            for u in 0..TARGETS.len() {
                if matches!(family(TARGETS[u]), "e2el" | "throughput") && p.measured[u].take().is_some() {
                    excluded.push(TARGETS[u].to_string());
                }
            }
            traps.push(Trap {
                point: p.name.clone(),
                metrics: excluded.clone(),
                kind: "output_lengths",
                action: "excluded",
                why: format!(
                    "the {stat} E2EL, TTFT and TPOT imply {lm:.0} output tokens a request, the scenario's {ls:.0} ({:+.0}%): the scenario's output lengths are not the measured run's (a stand-in dataset, EOS, a max_tokens cap). {} scale with the lengths: excluded; the TTFT, TPOT and ITL are kept. Give the run's lengths (a trace) to fit them.",
                    100.0 * (r - 1.0),
                    excluded.join(", ")
                ),
            });
            break;
        }
    }
    traps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_lengths_get_the_slack_and_random_ones_their_draws() {
        // 1,024 tokens each: 32 tokens (3.1%) beat 3% (30.7).
        let fixed = vec![1024u32; 500];
        assert!((mean_length_tolerance(&fixed) - (1.0 + 32.0 / 1024.0)).abs() < 1e-12);
        // 4,096 each: 3% (122.9 tokens) beats 32.
        assert!((mean_length_tolerance(&vec![4096u32; 10]) - 1.03).abs() < 1e-12);
        // Uniform over [512, 1536] (sd about 296), 100 prompts: 4·296·√(2/100) ≈ 167 tokens,
        // about 16% of the mean: the draws decide.
        let spread: Vec<u32> = (0..100).map(|i| 512 + (i * 1024 / 99) as u32).collect();
        let t = mean_length_tolerance(&spread);
        let m = spread.iter().map(|&l| f64::from(l)).sum::<f64>() / 100.0;
        let sd = (spread.iter().map(|&l| (f64::from(l) - m).powi(2)).sum::<f64>() / 99.0).sqrt();
        assert!((t - (1.0 + 4.0 * sd * (0.02f64).sqrt() / m)).abs() < 1e-9, "{t}");
        assert!(t > 1.15 && t < 1.17, "{t}");
        // The same spread over 10,000 prompts: 17 tokens of draws, so the 32 tokens decide.
        let many: Vec<u32> = (0..10_000).map(|i| spread[i % 100]).collect();
        assert!((mean_length_tolerance(&many) - (1.0 + 32.0 / m)).abs() < 1e-9);
    }

    #[test]
    fn the_tolerance_never_exceeds_the_old_bound() {
        // Two wildly different prompts, or 64-token ones (32 tokens is 50%): capped at 25%.
        assert_eq!(mean_length_tolerance(&[10, 5000]), LENGTH_TOLERANCE);
        assert_eq!(mean_length_tolerance(&[64; 20]), LENGTH_TOLERANCE);
        assert_eq!(mean_length_tolerance(&[]), LENGTH_TOLERANCE);
        assert_eq!(mean_length_tolerance(&[0, 0]), LENGTH_TOLERANCE);
    }
}
