//! The procedures: `calibrate` (probes → a fitted profile), `calibrate
//! --from-results` (result files → a profile) and `check` (a sweep measured
//! and predicted with the same requests → a verdict). Each measures through
//! a [`Measure`] and builds scenarios through a caller's function (the binary
//! resolves them against the cards on disk), so the procedure itself is pure.

use serde_json::{json, Value};
use sim::config::SimSpec;
use sim::cost::{CoefficientSource, CostCoefficients, CostModel};
use sim::report::{Metric, Metrics, PointReport};

use crate::check::{judge, mean_of_runs, median, CheckReport};
use crate::error::{CalibError, Result};
use crate::fit::{self, FitPoint, Free, TARGETS};
use crate::measure::{Measure, RepeatedPoint, Run};
use crate::named::Named;
use crate::plan::{self, speed_reference_workload};
use crate::profile::{FitWorkload, LoneRequestFit, Profile, ProfileEngine, SpeedReference, StepLogFit};

/// Builds and resolves the scenario that describes the measured engine with a given
/// `workload` section.
pub type Scenario<'a> = dyn Fn(&Value) -> std::result::Result<SimSpec, String> + 'a;

fn resolve(scenario: &Scenario<'_>, w: &Value) -> Result<SimSpec> {
    scenario(w).map_err(CalibError::Scenario)
}

/// The values of [`TARGETS`] a point gives (finite and positive; None otherwise).
pub fn given_targets(point: &impl Metrics) -> Vec<Option<f64>> {
    TARGETS.iter().map(|&t| point.metric(t).filter(|v| v.is_finite() && *v > 0.0)).collect()
}

/// The measured values of [`TARGETS`] of a point (missing or non-positive ones are None).
/// A median or p99 is kept only where the point has no mean of its family: it then stands
/// for that family, fitted against the simulated statistic of the same name.
pub fn measured_targets(point: &impl Metrics) -> Vec<Option<f64>> {
    let got = given_targets(point);
    let has_mean = |fam: &str| (0..fit::MEAN_TARGETS).any(|i| fit::family(TARGETS[i]) == fam && got[i].is_some());
    got.iter()
        .enumerate()
        .map(|(i, v)| if i >= fit::MEAN_TARGETS && has_mean(fit::family(TARGETS[i])) { None } else { *v })
        .collect()
}

/// The medians and p99s `point` gives that [`measured_targets`] leaves out (a mean of their
/// family is given, and the fit matches it), as a trap naming them (`statistic_set_aside`,
/// excluded); `None` when there are none. The profile lists it with the other traps, so that a
/// source's percentiles are never dropped unsaid.
pub fn set_aside_statistics(name: &str, point: &impl Metrics) -> Option<crate::traps::Trap> {
    let given = given_targets(point);
    let kept = measured_targets(point);
    let set_aside: Vec<String> = (0..TARGETS.len())
        .filter(|&i| given[i].is_some() && kept[i].is_none())
        .map(|i| TARGETS[i].to_string())
        .collect();
    (!set_aside.is_empty()).then(|| crate::traps::Trap {
        point: name.to_string(),
        why: format!(
            "given, not fitted: the point gives the mean of their families, which the fit matches ({}); a median or p99 is fitted only where a source gives no mean of its family",
            set_aside.join(", ")
        ),
        metrics: set_aside,
        kind: "statistic_set_aside",
        action: "excluded",
    })
}

/// Options of a live calibration.
#[derive(Clone, Debug)]
pub struct CalibrateOptions {
    /// Largest concurrency of the decode probes.
    pub max_probe_concurrency: u32,
    /// Seconds of load before the probes (0: none).
    pub warmup_s: f64,
    /// Rounds of the probe plan.
    pub repeat: u32,
    /// Simulator evaluations the fit may use.
    pub max_evals: usize,
    /// Measure the speed reference before each probe.
    pub speed_reference: bool,
    /// vLLM's per-step log: (its name, its text).
    pub step_log: Option<(String, String)>,
}

/// Measures the speed reference (the `k`-th: fresh prompts each time); its mean ITL in ms,
/// or None when a request failed.
pub fn speed_reference<M: Measure + ?Sized>(m: &mut M, scenario: &Scenario<'_>, k: u64) -> Result<Option<f64>> {
    let mut wl = speed_reference_workload();
    wl["seed"] = plan::speed_reference_seed(k).into();
    let spec = resolve(scenario, &wl)?;
    let w = sim::workload::generate(&spec.workload);
    let got = m.measure(&w, Run::SpeedReference)?;
    if got.failed > 0 {
        return Ok(None);
    }
    Ok(got.point.metric(Metric::MeanItlMs).filter(|v| v.is_finite() && *v > 0.0))
}

/// A live calibration: warm-up, the probe plan (with a speed reference before each
/// probe), then the fit. `scenario` describes the measured engine.
pub fn calibrate<M: Measure + ?Sized>(m: &mut M, scenario: &Scenario<'_>, o: &CalibrateOptions) -> Result<Profile> {
    if !o.warmup_s.is_finite() || o.warmup_s < 0.0 {
        return Err(CalibError::Input {
            flag: "--warmup-s",
            message: format!("expected seconds, 0 or more, got {}", o.warmup_s),
        });
    }
    let info = m.info().clone();
    let kind = info.kind.ok_or(CalibError::Server {
        flag: "--base-url",
        message: "the server is neither vLLM nor SGLang (no vllm:* or sglang:* metrics)".into(),
    })?;
    let kv = info.kv_capacity_tokens.ok_or(CalibError::Server {
        flag: "--base-url",
        message: "the server does not expose its KV capacity".into(),
    })?;
    let max_len = info.max_model_len.unwrap_or(2048);
    let base_spec = resolve(scenario, &json!({"dataset_name": "random", "ignore_eos": true}))?;
    let probes = plan::probe_plan(max_len, kv, base_spec.engine.max_running(), o.max_probe_concurrency);
    if o.warmup_s > 0.0 {
        let spec = resolve(scenario, &plan::warmup_workload())?;
        m.say(&format!("warming the engine up for {:.0} s", o.warmup_s));
        m.warm_up(o.warmup_s, &mut |k| {
            let mut ws = spec.workload.clone();
            ws.seed = plan::warmup_seed(k);
            sim::workload::generate(&ws)
        })?;
    }
    let mut points = Vec::new();
    // Each probe's measured p99s (not fitted: they judge the fitted model's tails afterwards).
    let mut tails: Vec<Vec<Option<f64>>> = Vec::new();
    // The speed reference measured before each probe (None where it failed or is off).
    let mut reference: Vec<Option<f64>> = Vec::new();
    for probe in plan::repeated(&probes, o.repeat) {
        let spec = resolve(scenario, &probe.workload)?;
        let w = sim::workload::generate(&spec.workload);
        reference.push(if o.speed_reference { speed_reference(m, scenario, reference.len() as u64)? } else { None });
        let got = m.measure(&w, Run::Probe { name: &probe.name })?;
        m.say(&format!(
            "probe {}: mean TTFT {:.1} ms, mean ITL {:.2} ms, {} failed",
            probe.name,
            got.point.metric(Metric::MeanTtftMs).unwrap_or(f64::NAN),
            got.point.metric(Metric::MeanItlMs).unwrap_or(f64::NAN),
            got.failed
        ));
        if got.failed > 0 {
            return Err(CalibError::ProbeFailed {
                name: probe.name.clone(),
                failed: got.failed,
                requests: got.requests_file.clone().unwrap_or_else(|| "the run's log".into()),
            });
        }
        let mut measured = measured_targets(&got.point);
        let concurrent = probe.workload["max_concurrency"].as_u64().is_some_and(|c| c > 1);
        // The p99s, but a concurrent probe's TTFT (the phase of its waves, as below).
        tails.push(
            TARGETS
                .iter()
                .map(|&t| {
                    let tail = t.key().starts_with("p99") && !(concurrent && t == Metric::P99TtftMs);
                    got.point.metric(t).filter(|v| tail && v.is_finite() && *v > 0.0)
                })
                .collect(),
        );
        if concurrent {
            // A decode probe's TTFT is the phase at which the client's closed-loop arrivals
            // meet the engine's steps (when a wave of requests reaches the server decides
            // how many share the first prefill step), which the simulator replays only on
            // average; its TPOT, ITL and E2EL are what it measures. The c=1 probes fit TTFT.
            measured[0] = None;
        }
        // At c=1 the closed loop is exact; replaying would only add the client's gaps.
        let replay = if concurrent { fit::replay_workload(&w, &got.send_s) } else { None };
        points.push(FitPoint { name: probe.name.clone(), spec, measured, replay });
    }
    let ref_values: Vec<f64> = reference.iter().flatten().copied().collect();
    let ref_median = median(ref_values.clone());
    // Live probes fit the linear model (the lone-request solve and the step-log fit are linear
    // in the step coefficients); offline fits correct the composed cost (`calibrate_from_results`).
    let prior = points[0].spec.cost.clone();
    // Teacher forcing on the engine's own step log, when there is one.
    let step_fit = o.step_log.as_ref().and_then(|(_, text)| fit::fit_step_log(&fit::parse_step_log(text)));
    let (start, free, projected): (CostModel, Vec<Free>, &[&'static str]) = match &step_fit {
        Some(sf) => {
            let mut c = prior.clone();
            let mut ov = CostCoefficients::default();
            for (k, v) in sf.coefficients.named() {
                ov.set(k, v);
            }
            c.overlay(&ov, CoefficientSource::Profile);
            m.say(&format!("step log: {} steps, R² {:.4}, residual std {:.2} ms", sf.rows, sf.r2, sf.residual_std_ms));
            // The log times the model only and does not give context lengths: the step constant
            // (scheduler, output handling), the context terms and ingress come from the requests.
            (c, vec![Free::one("step_us"), Free::one("decode_kv_us")], &["request_ingress_us", "prefill_attention_us"])
        }
        // Without a step log, the prefill terms and the ingress come from the lone requests' TTFT.
        None => (
            prior.clone(),
            vec![Free::one("step_us"), Free::one("decode_token_us"), Free::one("decode_kv_us")],
            &["prefill_token_us", "request_ingress_us", "prefill_attention_us"],
        ),
    };
    let projection = fit::Projection::new(&points, projected, &prior);
    // Too few lone requests to solve them: searched with the rest.
    let free = match &projection {
        Some(_) => free,
        None => {
            let mut f = free;
            f.extend(projected.iter().map(|c| Free::one(c)));
            f
        }
    };
    // First the decode terms as one scale, so that the coefficient-by-coefficient fit starts
    // near the engine rather than at the prior, which can be off several-fold per term (a
    // rugged objective lets Nelder–Mead wander off in a far start).
    let start = if step_fit.is_none() {
        let coarse = vec![Free {
            name: "decode scale".into(),
            coefficients: vec!["step_us", "decode_token_us", "decode_kv_us"],
        }];
        fit::fit(&points, &start, &coarse, projection.as_ref(), o.max_evals / 3).cost
    } else {
        start
    };
    let mut r = fit::fit(&points, &start, &free, projection.as_ref(), o.max_evals);
    if step_fit.is_some() {
        // The step log determined these too.
        for c in ["per_seq_us", "prefill_token_us", "decode_token_us"] {
            r.free.push(Free { name: format!("{c} (step log)"), coefficients: vec![c] });
        }
        r.factors.extend([1.0, 1.0, 1.0]);
    }
    let linear = projection.as_ref().and_then(|p| p.solve(&points, &r.cost));
    if let (Some(p), Some(l)) = (&projection, &linear) {
        for c in &p.names {
            r.free.push(Free { name: format!("{c} (solved on the lone requests' TTFT)"), coefficients: vec![*c] });
            r.factors.push(1.0);
        }
        m.say(&format!(
            "lone requests' TTFT: {} probes, R² {:.4}: {}",
            l.points,
            l.r2,
            p.names.iter().zip(&l.values).map(|(n, v)| format!("{n} {v:.3}")).collect::<Vec<_>>().join(", ")
        ));
    }
    let engine = ProfileEngine {
        kind,
        version: info.version.clone(),
        model: info.model.clone(),
        kv_capacity_tokens: Some(kv),
        model_card: None,
        gpu: None,
        tensor_parallel_size: None,
        kv_cache_dtype: None,
        linear_weight_bytes: None,
        cuda_graphs: None,
        // The scale the fit's scenarios ran at (`cost.time_scale`, which the derived scenario
        // takes from the server's `servesim_time_scale`): the coefficients are that engine's µs.
        servesim_time_scale: Some(prior.time_scale).filter(|k| *k != 1.0),
    };
    let server_scale = info.servesim_time_scale.unwrap_or(1.0);
    if (prior.time_scale / server_scale - 1.0).abs() > 1e-9 {
        m.say(&format!(
            "warning: the server runs at time scale {server_scale} and the scenario fitted to it at cost.time_scale {}: \
             the coefficients the probes do not determine are those of an engine at the scenario's scale",
            prior.time_scale
        ));
    }
    let engine = match points.first() {
        Some(p) => engine.with_deployment(&p.spec),
        None => engine,
    };
    let mut profile = Profile::new(&r, &points, "live", engine, &prior);
    // The coefficients' covariance at the fit (Laplace, with the prior's σ as a floor of information).
    let (_, cov, s2) = crate::identify::covariance_at(
        &points,
        &crate::identify::linear_prior(&prior),
        &r.cost,
        crate::identify::PriorKind::of(&prior),
    );
    // A coefficient fitted to exactly 0 gets an honest interval (its log-space one is [0, 0]).
    profile.uncertainty = Some(
        crate::uncertainty::ProfileUncertainty::new(crate::identify::INTERVAL_METHOD, &profile.values(), cov, s2)
            .bound_zero_coefficients(&profile.values(), &profile.prior),
    );
    // A later run lies off the fitted model by what the fit could not explain (its residuals:
    // the model's discrepancy at a probe and the engine's noise then) or by how far the engine's
    // own speed moved while it was calibrated (the speed reference, one request at a fixed shape
    // before each probe), whichever is larger: every prediction's interval carries that too.
    if let Some(u) = profile.uncertainty.as_mut() {
        let fitted = profile.coefficient_sources.0.iter().filter(|(_, s)| *s == "data").count();
        let resid = crate::uncertainty::residual_sd_ln(&profile.fit.points, fitted);
        let speed = crate::uncertainty::speed_reference_sd_ln(&ref_values);
        // The fitted model's p99s at the probes (the fit's own last predictions), against the
        // measured ones.
        let tail_sd = crate::uncertainty::tail_sd_ln(&tails, &r.predicted);
        let (errors, source) = crate::uncertainty::live_model_error(&resid, &tail_sd, speed, ref_values.len());
        u.model_error_p90 = Some(errors);
        u.model_error_source = Some(source);
    }
    if let Some(sf) = &step_fit {
        profile.step_log_fit = Some(StepLogFit {
            file: o.step_log.as_ref().map(|(n, _)| n.clone()),
            rows: sf.rows,
            r2: sf.r2,
            residual_std_ms: sf.residual_std_ms,
            step_us: sf.coefficients.step_us,
            per_seq_us: sf.coefficients.per_seq_us,
            prefill_token_us: sf.coefficients.prefill_token_us,
            decode_token_us: sf.coefficients.decode_token_us,
        });
    }
    if let (Some(p), Some(l)) = (&projection, &linear) {
        let weak = weakly_determined(&p.names, &l.sensitivity);
        for w in &weak {
            m.say(&format!(
                "warning: {w}: a step still running when the next lone request arrives hides it (SGLang before 0.5.22 decodes a finished request once more), so the probes determine it weakly"
            ));
        }
        profile.lone_request_fit = Some(LoneRequestFit {
            method: "solved at each step of the search by least squares on the concurrency-1 probes' mean TTFT in ms (variable projection), refined by Gauss-Newton on the simulated TTFTs",
            points: l.points,
            r2: l.r2,
            coefficients: Named(p.names.iter().zip(&l.values).map(|(n, v)| (n.to_string(), *v)).collect()),
            weakly_determined: weak,
        });
    }
    if let Some(med) = ref_median {
        let (lo, hi) = ref_values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        m.say(&format!(
            "speed reference (mean ITL at one request, {} runs, one before each probe): median {med:.2} ms, {lo:.2} to {hi:.2}",
            ref_values.len()
        ));
        if let Some(t) = unsteady_engine_trap(lo, hi, ref_values.len()) {
            m.say(&format!("WARNING: {}", t.why));
            profile.traps.get_or_insert_with(Vec::new).push(t);
        }
        profile.speed_reference = Some(SpeedReference {
            workload: speed_reference_workload(),
            mean_itl_ms: reference,
            median_mean_itl_ms: med,
        });
    }
    profile.fit_workloads =
        Some(probes.iter().map(|p| FitWorkload { name: p.name.clone(), workload: p.workload.clone() }).collect());
    Ok(profile)
}

/// The largest spread of the speed reference (its max / min while calibrating) at which a live
/// calibration is taken to have measured the engine rather than the host. On this project's host
/// the native rounds that judged the live intervals had 1.19–1.27 (validation/live-20261201-native*),
/// the round on a host that had slowed and swung had 1.97 and 2.73 (live-20261202-native4), and
/// its fits took the host's slow stretch in as cost. A warning threshold between the two, not a
/// model parameter: nothing is fitted or predicted differently past it.
pub const UNSTEADY_SPEED_RATIO: f64 = 1.5;

/// The `unsteady_engine` trap of a live calibration: the engine's own speed (the speed reference,
/// a fixed workload run before each probe) moved by more than [`UNSTEADY_SPEED_RATIO`] while it
/// was calibrated, so the fitted coefficients carry the host's state as well as the engine's.
fn unsteady_engine_trap(lo: f64, hi: f64, runs: usize) -> Option<crate::traps::Trap> {
    (lo > 0.0 && hi / lo > UNSTEADY_SPEED_RATIO).then(|| crate::traps::Trap {
        point: "speed reference".into(),
        metrics: vec!["mean_itl_ms".into()],
        kind: "unsteady_engine",
        action: "used",
        why: format!(
            "the engine's own speed moved by a factor of {:.2} while it was calibrated (speed reference {lo:.2} to \
             {hi:.2} ms over {runs} runs; above {UNSTEADY_SPEED_RATIO} the host, not the engine, is being measured): the \
             fitted coefficients carry the host's state; calibrate again when it is steady",
            hi / lo
        ),
    })
}

/// A fit on existing results: `points` are the results' load points with the scenarios
/// that reproduce them. `files` and `scenario` name the inputs in the profile.
///
/// Before the fit, the traps in the data are flagged and the values they concern excluded
/// (`crate::traps`); the fit moves only what the remaining data determine, shrunk toward the
/// prior (`crate::identify`), and the profile says which coefficient came from where and
/// carries their covariance (`crate::uncertainty`).
pub fn calibrate_from_results(
    points: &[FitPoint],
    max_evals: usize,
    files: Vec<String>,
    scenario: String,
) -> Result<Profile> {
    calibrate_from_results_with(points, max_evals, files, scenario, &fit::Discrepancy::corpus(), &[], &[])
}

/// [`calibrate_from_results`] with the model's discrepancy at a point given (`calibrate
/// --discrepancy`) instead of the corpus', and the intervals' model-error term (the uncalibrated
/// 90% |error|) given for the families in `model_error` (`calibrate --model-error`) instead of
/// `validation/baseline.json`'s for the GPU and engine. `given` holds each point's values as its
/// source gives them, the medians and p99s `measured_targets` sets aside included
/// ([`given_targets`]), for the traps that read them ([`crate::traps::flag_mean_tails`]); empty:
/// none but `measured`.
pub fn calibrate_from_results_with(
    points: &[FitPoint],
    max_evals: usize,
    files: Vec<String>,
    scenario: String,
    discrepancy: &fit::Discrepancy,
    model_error: &[(&str, f64)],
    given: &[Vec<Option<f64>>],
) -> Result<Profile> {
    let first =
        points.first().ok_or(CalibError::Input { flag: "--from-results", message: "no load point found".into() })?;
    let mut points = points.to_vec();
    let prior = crate::identify::linear_prior(&first.spec.cost);
    // A mean TTFT carrying a tail: its median stands for it before the other traps read it.
    let mean_tails = crate::traps::flag_mean_tails(&mut points, given, &prior);
    let mut traps = crate::traps::flag(&mut points);
    traps.extend(crate::traps::flag_tails(&mut points, &prior));
    traps.extend(crate::traps::flag_lengths(&mut points, &prior));
    traps.extend(mean_tails);
    if crate::identify::rows(&points).is_empty() {
        return Err(CalibError::Input {
            flag: "--from-results",
            message: format!(
                "no value left to fit: {}",
                traps.iter().map(|t| format!("{}: {}", t.point, t.why)).collect::<Vec<_>>().join("; ")
            ),
        });
    }
    // A published value is rounded to the digits it is printed with: each value's noise is at
    // least half a unit of its last decimal, relative to it (`fit::published_noise`).
    let rounding: Vec<Vec<f64>> = points.iter().map(|p| fit::published_noise(&p.measured)).collect();
    // And one point of a published setup differs from the model by more than any coefficient
    // explains (the corpus' within-group spread): that discrepancy joins each value's noise.
    let noise: Vec<Vec<f64>> = rounding.iter().map(|n| discrepancy.with(n)).collect();
    // Each LM iteration costs about two simulations per point per fitted direction.
    let iters = (max_evals / (16 * points.len()).max(1)).clamp(4, 30);
    let pf = crate::identify::fit_with_prior_noise(&points, &noise, &prior, iters);
    let r = pf.as_fit_result();
    let engine = ProfileEngine {
        kind: first.spec.engine.engine_kind(),
        version: Some(first.spec.engine.version().to_string()),
        model: Some(first.spec.model.id.clone()),
        kv_capacity_tokens: None,
        model_card: None,
        gpu: None,
        tensor_parallel_size: None,
        kv_cache_dtype: None,
        linear_weight_bytes: None,
        cuda_graphs: None,
        // Results measured against `servesim serve --time-scale k`, fitted with a scenario at
        // `cost.time_scale` k: the profile's coefficients are that engine's.
        servesim_time_scale: Some(first.spec.cost.time_scale).filter(|k| *k != 1.0),
    }
    .with_deployment(&first.spec);
    let mut profile = Profile::new(&r, &points, "results", engine, &prior);
    profile.fit.method = FIT_METHOD_WITH_PRIOR;
    // Per point, the noise each fitted value was given; which ones the rounding raised.
    let mut raised = Vec::new();
    for (((summary, p), n), r) in profile.fit.points.iter_mut().zip(&points).zip(&noise).zip(&rounding) {
        let mut used = Named::new();
        for (t, m) in p.measured.iter().enumerate() {
            let Some(m) = m.filter(|m| *m > 0.0 && m.is_finite()) else { continue };
            used.push(TARGETS[t].key(), n[t]);
            if r[t] > fit::TARGET_NOISE[t] {
                raised.push(format!(
                    "{} {} at {} ({:.1}% for ±{})",
                    TARGETS[t],
                    m,
                    p.name,
                    100.0 * r[t],
                    fit::rounding_half_unit(m)
                ));
            }
        }
        summary.target_noise = Some(used);
    }
    // Values the fit leaves further off than its own noise allows: said, and kept in the profile.
    profile.fit.misfit = crate::profile::misfits(&profile.fit.points);
    if let Some(m) = profile
        .fit
        .misfit
        .iter()
        .filter(|m| m.sigmas > crate::profile::MISFIT_REFUSE_SIGMAS)
        .max_by(|a, b| a.sigmas.total_cmp(&b.sigmas))
    {
        return Err(CalibError::Input {
            flag: "--from-results",
            message: format!(
                "{} at {}: no coefficient set fits it (the fit leaves it {:+.0}% off, {:.0} times its noise, past the {} \
                 at which no noise or model error explains it): the result cannot be this scenario's engine and \
                 workload (another deployment or workload, a unit or key mixed up, a failed run); no profile written",
                m.metric,
                m.point,
                100.0 * m.relative_residual,
                m.sigmas,
                crate::profile::MISFIT_REFUSE_SIGMAS
            ),
        });
    }
    for id in &pf.identifiability {
        if let Some(s) = profile.coefficient_sources.0.iter_mut().find(|(n, _)| n == id.coefficient) {
            s.1 = id.source();
        }
    }
    let values = profile.values();
    profile.uncertainty = Some(
        crate::uncertainty::ProfileUncertainty::new(
            crate::identify::INTERVAL_METHOD,
            &values,
            pf.log_covariance.clone(),
            pf.s2,
        )
        .with_ensemble(
            pf.ensemble
                .iter()
                .map(|x| crate::identify::cost_at(&prior, x).coefficients())
                .map(|c| sim::cost::COEFFICIENT_NAMES.iter().map(|n| c.get(n).unwrap_or(0.0)).collect())
                .collect(),
            crate::identify::ENSEMBLE_METHOD,
            &values,
        ),
    );
    // Published results' setups are partly unstated: the model's own error at other points
    // is that of the uncalibrated model on the published corpus for this GPU and engine.
    if let Some(u) = profile.uncertainty.as_mut() {
        let kind = match first.spec.engine.engine_kind() {
            sim::config::EngineKind::Vllm => "vllm",
            sim::config::EngineKind::Sglang => "sglang",
        };
        let src = crate::uncertainty::uncalibrated_errors(&first.spec.gpu.id, kind);
        let mut errors: std::collections::BTreeMap<String, f64> =
            src.p90_abs_error.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        errors.extend(model_error.iter().map(|&(f, v)| (f.to_string(), v)));
        u.model_error_p90 = Some(errors);
        u.model_error_source = Some(if model_error.is_empty() {
            format!("added in quadrature to the ensemble's spread: {}", src.source)
        } else {
            let named: Vec<&str> = model_error.iter().map(|(f, _)| *f).collect();
            format!(
                "added in quadrature to the ensemble's spread: given for {} (--model-error); otherwise {}",
                named.join(", "),
                src.source
            )
        });
    }
    let of_source = |src: &str| -> String {
        let names: Vec<&str> = pf.identifiability.iter().filter(|i| i.source() == src).map(|i| i.coefficient).collect();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    let sigma_of =
        |c: &str| pf.identifiability.iter().find(|i| i.coefficient == c).map_or(f64::NAN, |i| i.prior_sigma_log);
    profile.note = Some(format!(
        "prior σ (ln) for the {} prior: prefill terms {:.3}, decode-step terms {:.3} (each coefficient's identifiability says where from); the model's discrepancy at a point (ln, {}, twice for a p99) added to each value's noise: {}; {} fitted direction(s) of {} (whitened singular values {}); from the data: {}; partly from the data (moved along a determined direction they share): {}; from the prior: {}; noise raised to the printed rounding: {}",
        match crate::identify::PriorKind::of(&prior) {
            crate::identify::PriorKind::Composed => "composed kernel cost's linearised",
            crate::identify::PriorKind::Linear => "linear roofline",
        },
        sigma_of("prefill_token_us"),
        sigma_of("step_us"),
        discrepancy.source,
        crate::uncertainty::FAMILIES
            .iter()
            .map(|f| format!("{f} {:.3}", discrepancy.of(f)))
            .collect::<Vec<_>>()
            .join(", "),
        pf.directions,
        sim::cost::COEFFICIENT_NAMES.len(),
        pf.singular_values.iter().map(|s| format!("{s:.2}")).collect::<Vec<_>>().join(", "),
        of_source("data"),
        of_source(crate::identify::PARTLY_DATA),
        of_source("prior"),
        if raised.is_empty() {
            "none".to_string()
        } else {
            raised.join(", ")
        },
    ));
    profile.identifiability = Some(pf.identifiability);
    profile.traps = Some(traps);
    profile.from_results = Some(files);
    profile.scenario = Some(scenario);
    Ok(profile)
}

/// The method of a fit on existing results.
pub const FIT_METHOD_WITH_PRIOR: &str = "Levenberg-Marquardt on squared log errors of simulated vs measured metrics, each divided by its noise (fit.points[].target_noise: the measurement's, target_noise or the value's printed rounding, half a unit of its last decimal relative to it, where larger, and the model's discrepancy at one point of a setup, the validate corpus' within-group sd of ln(simulated / published) for the metric's family, twice for a p99, in quadrature), plus the prior term Σ(ln(c/prior)/σ_prior)², over the directions the data determine (SVD of the prior-whitened Jacobian); the prior is the composed kernel cost linearised";

/// Options of a check.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// The sweep, increasing.
    pub concurrency: Vec<u32>,
    /// Prompts per point: one value, or one per concurrency.
    pub num_prompts_per_point: Option<Vec<u32>>,
    /// Fit on the points at these concurrencies (the verdict is on the others).
    pub fit_on: Vec<u32>,
    /// The loads the profile was fitted at (`ProfileFile::fitted_loads`): a point at one of
    /// them was used for fitting, and is marked so rather than judged as held out.
    pub profile_fitted_loads: Vec<Value>,
    /// The workload section of every point (concurrency, seed and prompt count are set per point).
    pub workload: Value,
    pub repeat: u32,
    pub max_evals: usize,
    /// The calibration's speed reference (median mean ITL, ms): measured again before each point.
    pub speed_reference_ms: Option<f64>,
    /// The profile's coefficients, echoed in the report.
    pub profile_coefficients: Option<Value>,
    /// The profile's uncertainty: every prediction then gets a 90% interval.
    pub uncertainty: Option<crate::uncertainty::ProfileUncertainty>,
    /// XORed into every prompt's content keys on the measured side (0: none): fresh prompts for
    /// this invocation, so that a server's prefix cache warmed by an earlier check with the same
    /// seed cannot hit, while the prediction starts cold. Lengths, arrivals and the sharing
    /// between prompts stay as the seed makes them (see [`salt_prompts`]). `servesim check` draws
    /// one per invocation and writes it in each point's run record (`setup.prompt_salt`).
    pub prompt_salt: u64,
}

/// New prompt contents for `w`, the same shape: every segment key of every prompt (initial test,
/// warm-ups, timed) XORed with `salt`. XOR with one value is a bijection, so prompts that shared
/// a prefix still share it and distinct ones stay distinct: the prefix-cache behaviour within the
/// run is the one the simulator predicts; only what an earlier run left cached no longer matches.
pub fn salt_prompts(w: &mut sim::workload::Workload, salt: u64) {
    if salt == 0 {
        return;
    }
    for r in w.initial_test.iter_mut().chain(w.warmups.iter_mut()).chain(w.requests.iter_mut()) {
        for s in &mut r.prompt {
            s.key ^= salt;
        }
        r.prompt_hashes = None;
    }
}

/// A check: every point measured (`--repeat` times, round the sweep) after a speed
/// reference, predicted with the same requests by `point_scenario`'s spec, judged.
/// `derived` describes the server itself (for the speed reference).
pub fn check<M: Measure + ?Sized>(
    m: &mut M,
    point_scenario: &Scenario<'_>,
    derived: &Scenario<'_>,
    o: &CheckOptions,
) -> Result<(CheckReport, Vec<RepeatedPoint>, Vec<PointReport>)> {
    let conc = &o.concurrency;
    if conc.is_empty() || conc.contains(&0) || conc.windows(2).any(|w| w[0] >= w[1]) {
        return Err(CalibError::Input {
            flag: "--concurrency",
            message: format!("give increasing values >= 1, got {conc:?}"),
        });
    }
    // The scenario of each point.
    let mut specs: Vec<SimSpec> = Vec::new();
    let mut sections = Vec::new();
    for (i, &c) in conc.iter().enumerate() {
        let mut w = o.workload.clone();
        w["max_concurrency"] = c.into();
        // Fresh prompts at every point: the live server's cache still holds the
        // previous points' prompts, the simulator starts each point cold.
        let seed = w.get("seed").and_then(Value::as_u64).unwrap_or(0);
        w["seed"] = plan::check_seed(seed, i, 0).into();
        if let Some(p) = &o.num_prompts_per_point {
            let n = if p.len() == 1 {
                p[0]
            } else {
                *p.get(i).ok_or(CalibError::Input {
                    flag: "--num-prompts-per-point",
                    message: "one value per concurrency".into(),
                })?
            };
            w["num_prompts"] = n.into();
        }
        specs.push(resolve(point_scenario, &w)?);
        sections.push(w);
    }
    // A point at a load the profile was fitted on is no held-out point (the same measurement
    // but for its seed): marked as used. A load recorded by concurrency alone (profiles from
    // results before 2026-12-07) is matched on it.
    let by_profile: Vec<bool> = specs
        .iter()
        .map(|s| {
            let load = crate::profile::fit_load(s);
            o.profile_fitted_loads.iter().any(|l| match l.get("requests") {
                Some(_) => *l == load,
                None => l.get("max_concurrency") == load.get("max_concurrency"),
            })
        })
        .collect();
    if conc.iter().zip(&by_profile).all(|(c, b)| *b || o.fit_on.contains(c)) {
        return Err(CalibError::Input {
            flag: "--concurrency",
            message: format!(
                "every point ({}) is at a load the profile was fitted on{}: none is held out, so the verdict would judge nothing; add a point at another concurrency",
                conc.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","),
                if o.fit_on.is_empty() { "" } else { " or is fitted on (--fit-on)" }
            ),
        });
    }
    // Measure every point `repeat` times with fresh prompts each time; the point's value is
    // the mean of the repeats. Repeats go round the sweep (all points, then all points
    // again), not point by point: a host whose speed drifts over tens of seconds then spreads
    // its slow spells over every point instead of loading them onto one.
    let repeats = o.repeat.max(1);
    let mut runs_of: Vec<Vec<crate::measure::Point>> = vec![Vec::new(); specs.len()];
    let mut reference_of: Vec<Vec<Option<f64>>> = vec![Vec::new(); specs.len()];
    let mut n_refs = 0u64;
    for k in 0..repeats {
        for (i, s) in specs.iter().enumerate() {
            let mut sk = s.clone();
            sk.workload.seed = plan::check_seed(s.workload.seed, 0, k);
            let mut w = sim::workload::generate(&sk.workload);
            salt_prompts(&mut w, o.prompt_salt);
            if o.speed_reference_ms.is_some() {
                let v = speed_reference(m, derived, plan::CHECK_SPEED_REFERENCE_OFFSET + n_refs)?;
                n_refs += 1;
                reference_of[i].push(v);
            }
            let run =
                Run::CheckPoint { concurrency: conc[i], repeat: k, workload: &sections[i], prompt_salt: o.prompt_salt };
            let got = m.measure(&w, run)?;
            m.say(&format!(
                "measured concurrency {} (run {}/{repeats}): {:.1} tok/s, mean TTFT {:.1} ms",
                conc[i],
                k + 1,
                got.point.metric(Metric::OutputThroughput).unwrap_or(0.0),
                got.point.metric(Metric::MeanTtftMs).unwrap_or(0.0)
            ));
            runs_of[i].push(got.point);
        }
    }
    let mut measured = Vec::new();
    let mut spreads = Vec::new();
    for runs in &runs_of {
        let (point, spread) = mean_of_runs(runs);
        measured.push(point);
        spreads.push(spread);
    }
    // Fit on the chosen points, if asked.
    let refit: Vec<bool> = conc.iter().map(|c| o.fit_on.contains(c)).collect();
    let used: Vec<bool> = refit.iter().zip(&by_profile).map(|(a, b)| *a || *b).collect();
    if !o.fit_on.is_empty() {
        let points: Vec<FitPoint> = specs
            .iter()
            .zip(&measured)
            .zip(&refit)
            .filter(|(_, u)| **u)
            .map(|((s, mp), _)| FitPoint {
                name: format!("c{}", s.workload.max_concurrency.unwrap_or(0)),
                spec: s.clone(),
                measured: measured_targets(mp),
                replay: None,
            })
            .collect();
        let free = if points.len() >= 3 { plan::live_free() } else { plan::group_free(points.len()) };
        let r = fit::fit(&points, &specs[0].cost, &free, None, o.max_evals);
        for s in &mut specs {
            s.set_cost(&r.cost);
        }
    }
    // Predict every point with the same requests.
    let predicted: Vec<PointReport> = specs.iter().map(crate::uncertainty::predict_point).collect();
    // A prediction whose run did not complete (the modelled engine raised) is no prediction:
    // its metrics cover only the requests that finished.
    if let Some((c, p)) = conc.iter().zip(&predicted).find(|(_, p)| !sim::report::Metrics::completed(*p)) {
        return Err(CalibError::Scenario(format!(
            "the model predicts no result at concurrency {c}: its run did not complete ({})",
            p.bench.stop_reason
        )));
    }
    let mut report = judge(conc, &measured, &predicted, &used, m.info(), o.profile_coefficients.clone());
    if let Some(u) = &o.uncertainty {
        // Only the coefficients the profile set vary.
        let intervals: Vec<_> = specs
            .iter()
            .zip(&predicted)
            .map(|(s, c)| {
                let mut center = CostCoefficients::default();
                let all = s.cost.coefficients();
                for (i, n) in sim::cost::COEFFICIENT_NAMES.iter().enumerate() {
                    if s.cost.sources[i] == CoefficientSource::Profile {
                        center.set(n, all.get(n).unwrap_or(0.0));
                    }
                }
                let samples: Vec<PointReport> = crate::uncertainty::sampled_specs(s, u, &center)
                    .iter()
                    .map(crate::uncertainty::predict_point)
                    .collect();
                u.intervals(c, &samples)
            })
            .collect();
        report.add_intervals(&intervals, "the profile's coefficient ensemble, simulated with each point's requests");
    }
    if let Some(calib) = o.speed_reference_ms {
        report.add_speed_reference(calib, &reference_of);
    }
    if repeats > 1 {
        report.add_repeats(conc, &runs_of, spreads);
    }
    Ok((report, measured, predicted))
}

/// The lone-request coefficients whose TTFTs move under half of what they would alone
/// ([`crate::fit::LinearFit::sensitivity`]), each as "name: the concurrency-1 TTFTs move by N%
/// of it".
fn weakly_determined(names: &[&'static str], sensitivity: &[f64]) -> Vec<String> {
    names
        .iter()
        .zip(sensitivity)
        .filter(|(_, s)| s.is_finite() && **s < 0.5)
        .map(|(n, s)| format!("{n}: the concurrency-1 TTFTs move by {:.0}% of it", 100.0 * s.max(0.0)))
        .collect()
}
