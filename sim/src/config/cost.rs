//! The `cost` section: the roofline prior, a profile and inline coefficients.

use super::*;
use crate::cost::{provider_for, ComposedCost, GraphRule, FALLBACK};

/// Resolves the `cost` section. The step clock is, in order: inline step
/// coefficients (the linear model, [`CostModel::overlay`]: each one named replaces the
/// profile's or the prior's; where measured kernels would time the steps and no profile is
/// given, all six step coefficients or none); a profile (on a GPU with measured kernels, the
/// composed cost corrected by the profile's change from its prior,
/// [`CostModel::correct`]; else the linear model); `prior` given (the linear roofline
/// prior with those efficiencies); else the kernel-composed cost
/// ([`crate::cost::ComposedCost`]) from the GPU's measured kernel tables, or
/// the fallback for a GPU without them; a card with `kernel_tables: "none"`
/// keeps the linear roofline prior.
///
/// `time_scale` k (default 1): an engine k times faster than the rest of the section says
/// ([`CostModel::scale_time`]): the prior (linear or composed) and the inline coefficients are
/// divided by k; a profile's coefficients are taken as they are (fitted on the faster engine
/// itself, at its own scale: docs/calibration.md).
pub(super) fn resolve_cost(
    c: &CostSection,
    model: &ModelCard,
    gpu: &GpuCard,
    dep: &Deployment,
    res: &Resources,
    engine: &str,
    graphs: GraphRule,
    attention_lane: Option<&str>,
    engine_kernels: crate::cost::EngineKernels,
) -> Result<CostModel> {
    let prior = c.prior.clone().unwrap_or_default();
    let scale = c.time_scale.unwrap_or(1.0);
    if !(TIME_SCALE_RANGE.0..=TIME_SCALE_RANGE.1).contains(&scale) {
        return Err(ConfigError::new(
            "cost.time_scale",
            format!(
                "the engine's speed against its cards, from {} to {} (the range of servesim serve --time-scale; 1: as \
                 the cards say), got {k:?}",
                TIME_SCALE_RANGE.0,
                TIME_SCALE_RANGE.1,
                k = scale
            ),
        ));
    }
    for (name, v) in [
        ("prefill_mfu", prior.prefill_mfu),
        ("decode_mfu", prior.decode_mfu),
        ("attention_mfu", prior.attention_mfu),
        ("weight_bandwidth_eff", prior.weight_bandwidth_eff),
        ("kv_bandwidth_eff", prior.kv_bandwidth_eff),
        ("interconnect_bandwidth_eff", prior.interconnect_bandwidth_eff),
    ] {
        // Below 1e-4 a step would take ten thousand times its roofline: not an efficiency
        // any GPU has, and the way to overflow simulated time.
        if !(1e-4..=1.0).contains(&v) {
            return Err(ConfigError::new(
                format!("cost.prior.{name}"),
                format!("an efficiency must be in [0.0001, 1], got {v:?}"),
            ));
        }
    }
    // The prior's CPU-side and all-reduce terms are times, bounded as the coefficients they
    // become are ([`check_coefficients`]): a negative one took time off every step (a run that
    // "completed" faster than the roofline), a huge one overflowed simulated time mid-run.
    for (name, v) in [
        ("step_overhead_us", prior.step_overhead_us),
        ("per_seq_us", prior.per_seq_us),
        ("request_ingress_us", prior.request_ingress_us),
        ("output_token_us", prior.output_token_us),
        ("allreduce_latency_us", prior.allreduce_latency_us),
    ] {
        if !(v.is_finite() && (0.0..=MAX_COEFFICIENT_US).contains(&v)) {
            return Err(ConfigError::new(
                format!("cost.prior.{name}"),
                format!("must be a finite number from 0 to {MAX_COEFFICIENT_US} (µs), got {v:?}"),
            ));
        }
    }
    // A MoE card is timed only by the composed cost from the GPU's own measured MoE table
    // (`cost::composed`, docs/moe.md): the linear model (the prior, inline coefficients) has no
    // expert term and would time it as the dense model of its parameter count.
    if model.moe.is_some() {
        let what = format!("MoE model {} on {} under {engine}", model.id, gpu.id);
        if c.prior.is_some() {
            return Err(ConfigError::new(
                "cost.prior",
                format!(
                    "{what}: the linear roofline prior has no term for the experts (it would time the model as dense): \
                     not modelled; leave cost.prior out for the composed cost from the measured MoE tables"
                ),
            ));
        }
        if c.coefficients.is_some() {
            return Err(ConfigError::new(
                "cost.coefficients",
                format!("{what}: the linear step model has no term for the experts: not modelled for a MoE card"),
            ));
        }
        if gpu.kernel_tables.as_deref() == Some("none") {
            return Err(ConfigError::new(
                "hardware.kernel_tables",
                format!(
                    "{what}: \"none\" times steps with the linear roofline prior, which has no term for the experts: \
                     not modelled for a MoE card"
                ),
            ));
        }
    }
    let mut cost = CostModel::roofline(model, gpu, dep, &prior);
    if c.prior.is_none() {
        if let Some((provider, source)) = provider_for(gpu, engine, FALLBACK, None) {
            let mut composed = ComposedCost::build(
                model,
                gpu,
                dep,
                graphs,
                &provider,
                source,
                prior.allreduce_latency_us,
                prior.interconnect_bandwidth_eff,
                crate::cost::sync_cpu(engine, dep.tensor_parallel_size),
                attention_lane,
            )
            .map_err(|e| ConfigError::new("model.moe", e))?;
            composed.apply_engine_kernels(engine_kernels);
            // vLLM (`_can_p2p`) and SGLang (their IPC copy test) find no peer access on such a card
            // and run NCCL, with or without vLLM's flag: the card says so, and that NCCL copies
            // through host memory (the `no_peer_to_peer` caveat).
            let why = if gpu.peer_to_peer == Some(false) {
                Some(crate::cost::NcclWhy::NoPeerToPeer)
            } else if engine_kernels.nccl_all_reduce {
                Some(crate::cost::NcclWhy::Flag)
            } else {
                None
            };
            if let Some(why) = why {
                composed.use_nccl_all_reduce(gpu, &provider, dep.tensor_parallel_size, why).map_err(|e| {
                    // The field to fix: the card's link where it gives none, else the flag or the card.
                    if gpu.interconnect.is_none() || gpu.interconnect_bandwidth_bytes_per_s.is_none() {
                        let hint =
                            "give the card's interconnect (pcie or nvlink) and interconnect_bandwidth_bytes_per_s";
                        ConfigError::new("hardware.gpu.interconnect", format!("{e}; {hint}"))
                    } else if why == crate::cost::NcclWhy::Flag {
                        ConfigError::new("engine.disable_custom_all_reduce", e)
                    } else {
                        ConfigError::new("hardware.gpu", e)
                    }
                })?;
            }
            cost.composed = Some(std::sync::Arc::new(composed));
        }
    }
    // vLLM's --disable-custom-all-reduce switches a measured table; the linear prior times every
    // all-reduce by one roofline of the link, the same for either kernel, so the flag would be
    // dropped without a word.
    if engine_kernels.nccl_all_reduce && dep.tensor_parallel_size > 1 && cost.composed.is_none() {
        return Err(ConfigError::new(
            "engine.disable_custom_all_reduce",
            "the linear roofline prior (cost.prior, or a card with kernel_tables \"none\") times every all-reduce \
             by one roofline of the link, whichever kernel runs: the flag would change nothing. Drop cost.prior for \
             the composed cost from measured tables, or drop the flag",
        ));
    }
    // The prior, linear and composed, as the time-scaled engine runs it (nothing at 1).
    cost.scale_time(scale);
    if model.moe.is_some() && cost.composed.is_none() {
        return Err(ConfigError::new(
            "model.moe",
            format!(
                "MoE model {} on {} under {engine}: no measured kernel tables time it: not modelled",
                model.id, gpu.id
            ),
        ));
    }
    if c.profile.is_some() {
        let p = res.profile.as_ref().ok_or_else(|| ConfigError::new("cost.profile", "the profile was not loaded"))?;
        check_coefficients(p, "cost.profile")?;
        match &res.profile_prior {
            // Measured kernels time the steps: the profile corrects them by its change
            // from the prior its fit started from (a coefficient at its prior changes nothing).
            Some(prior) if cost.composed.is_some() => cost.correct(p, prior, CoefficientSource::Profile),
            _ if model.moe.is_some() => {
                return Err(ConfigError::new(
                    "cost.profile",
                    format!(
                        "MoE model {}: a profile without its fit's prior would replace the composed cost with the \
                         linear step model, which has no term for the experts: not modelled",
                        model.id
                    ),
                ))
            }
            _ => cost.overlay(p, CoefficientSource::Profile),
        }
    }
    if let Some(co) = &c.coefficients {
        check_coefficients(co, "cost.coefficients")?;
        // Inline coefficients win over a profile's: one that overrides every coefficient the
        // profile sets leaves the profile nothing to do, and a run "with the profile" would be
        // the inline model with the profile's name on it.
        if let Some(p) = c.profile.as_ref().and(res.profile.as_ref()) {
            let set: Vec<&str> = COEFFICIENT_NAMES.iter().copied().filter(|n| p.get(n).is_some()).collect();
            if !set.is_empty() && set.iter().all(|n| co.get(n).is_some()) {
                return Err(ConfigError::new(
                    "cost.profile",
                    "every coefficient the profile sets is also set in cost.coefficients, which win over a profile's: \
                     the profile would change nothing. Drop cost.coefficients (--set cost.coefficients=null) to run \
                     with the profile, or drop the profile",
                ));
            }
        }
        // Naming a step coefficient (the first six) times the steps by the linear model in place of
        // the measured kernels; the step coefficients left out would then be the linear roofline
        // prior's, unsaid (the docs audit of 2026-12-07: `{"step_us": 900}` on the default
        // scenario gave a TPOT of 1.28 ms, under the time to read the weights once). A partial set
        // is a deliberate adjustment of a profile's or of a prior given, not of the kernels.
        let step_terms = &COEFFICIENT_NAMES[..6];
        let missing: Vec<&str> = step_terms.iter().copied().filter(|n| co.get(n).is_none()).collect();
        if cost.composed.is_some() && c.profile.is_none() && missing.len() < step_terms.len() && !missing.is_empty() {
            let given: Vec<&str> = step_terms.iter().copied().filter(|n| co.get(n).is_some()).collect();
            return Err(ConfigError::new(
                "cost.coefficients",
                format!(
                    "gives {} but not {}: a step coefficient replaces the step cost composed from measured kernel \
                     tables (on {}) with the linear step model, whose other step terms would be the linear roofline \
                     prior's (far from measured ones: README \"Accuracy\"); give all six step coefficients (by \
                     hand, or a profile's: cost.profile, which inline ones then adjust), or drop them \
                     (--set cost.coefficients=null) to keep the measured-kernel cost",
                    given.join(", "),
                    missing.join(", "),
                    gpu.id
                ),
            ));
        }
        // The inline coefficients describe the engine at the cards' speed, as the prior does.
        let mut scaled = co.clone();
        if scale != 1.0 {
            for name in COEFFICIENT_NAMES {
                if let Some(v) = co.get(name) {
                    scaled.set(name, v / scale);
                }
            }
        }
        cost.overlay(&scaled, CoefficientSource::Scenario);
    }
    // Where the linear coefficients time the steps (inline ones, a live profile), a decode step
    // and a prefill must cost something: all-zero terms would run the engine in no time and
    // report a throughput of a billion tokens a second as if it were an answer.
    let k = cost.coefficients();
    let at = |n: &str| k.get(n).unwrap_or(0.0);
    let drives = cost.composed.is_none() || c.coefficients.is_some();
    if drives
        && (at("step_us") + at("per_seq_us") + at("decode_token_us") < MIN_STEP_US
            || at("step_us") + at("prefill_token_us") < MIN_STEP_US)
    {
        // The terms came from the inline coefficients, else the profile, else the prior given.
        let path = if c.coefficients.is_some() {
            "cost.coefficients"
        } else if c.profile.is_some() {
            "cost.profile"
        } else {
            "cost.prior"
        };
        let scaled =
            if scale != 1.0 { format!(" (after cost.time_scale {scale} divided them)") } else { String::new() };
        return Err(ConfigError::new(
            path,
            format!(
                "a decode step (step_us + per_seq_us + decode_token_us) and a prefill token (step_us + prefill_token_us) \
                 must cost at least {MIN_STEP_US} µs{scaled}: with these coefficients the engine would run in next to no time"
            ),
        ));
    }
    Ok(cost)
}

/// The bounds of `cost.time_scale` and of `servesim serve --time-scale` (which
/// `emulator::TIME_SCALE_RANGE` names): beyond 100, the host's scheduling jitter (tens of
/// microseconds a sleep) becomes milliseconds of a served engine's time; below 0.001 a 10 ms
/// step takes 10 s. A bound, not a model.
pub const TIME_SCALE_RANGE: (f64, f64) = (1e-3, 100.0);

/// The least a decode step of one request, and a one-token prefill, may cost under the linear
/// model, µs. No engine steps faster than a kernel launch (a few µs); below this, every
/// latency of a report rounds to 0.00 ms and reads as an answer. A bound, not a model.
pub const MIN_STEP_US: f64 = 1.0;

/// The largest coefficient accepted, µs: ten seconds per step, sequence, token or
/// pair. No GPU term is near it; the slowest engine calibrated so far, vLLM on an
/// AVX2 CPU emulated by qemu-user (VALIDATION.md, "Live check on an AVX2-only
/// CPU"), fitted 2.7 s of request ingress and 0.35 s per decode token. A bound,
/// not a model: it keeps a mistyped coefficient from passing as an answer, and
/// simulated time far from overflow (which stops a run with its cause anyway).
pub const MAX_COEFFICIENT_US: f64 = 1e7;

/// Every coefficient `c` sets is finite and within [0, [`MAX_COEFFICIENT_US`]]; an error names
/// `path.<coefficient>`. What a scenario's profile or inline coefficients must pass, and what
/// `calibrate` checks a profile against before it writes one.
pub fn check_coefficients(c: &CostCoefficients, path: &str) -> Result<()> {
    for name in COEFFICIENT_NAMES {
        if let Some(v) = c.get(name) {
            if !(v.is_finite() && (0.0..=MAX_COEFFICIENT_US).contains(&v)) {
                return Err(ConfigError::new(
                    format!("{path}.{name}"),
                    format!("must be a finite number from 0 to {MAX_COEFFICIENT_US} (µs), got {v:?}"),
                ));
            }
        }
    }
    Ok(())
}
