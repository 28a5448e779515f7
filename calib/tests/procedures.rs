//! The procedures against the simulator as the measured engine (`SimMeasure`):
//! a calibration finds the engine's coefficients again, a check with the
//! fitted profile passes, and the profile's keys are those of the contract.

use calib::derive::{derive_scenario, DeriveOptions, ModelChoice};
use calib::procedure::{self, CalibrateOptions, CheckOptions};
use calib::{ServerInfo, SimMeasure};
use serde_json::{json, Value};
use sim::config::{self, EngineKind, SimSpec};
use sim::cost::{CoefficientSource, CostCoefficients, CostModel};

fn info() -> ServerInfo {
    ServerInfo {
        base_url: "sim://engine".into(),
        kind: Some(EngineKind::Vllm),
        version: Some("0.33.0".into()),
        model: Some("qwen2.5-7b-instruct".into()),
        max_model_len: Some(2048),
        kv_capacity_tokens: Some(4000 * 16),
        num_gpu_blocks: Some(4001),
        kv_granularity: Some(16),
        prefix_caching: Some(true),
        ..Default::default()
    }
}

fn derive() -> DeriveOptions {
    DeriveOptions {
        hardware: Some("a100-80gb".into()),
        model: ModelChoice::Card("qwen2.5-7b-instruct".into()),
        log_args: Default::default(),
        sets: vec!["engine.max_num_seqs=32".into(), "engine.max_num_batched_tokens=2048".into()],
    }
}

fn resolve(v: Value) -> Result<SimSpec, String> {
    let s = config::from_value(v, "").map_err(|e| e.to_string())?;
    config::resolve(&s, &sim::builtin::resources()?).map_err(|e| e.to_string())
}

fn scenario(w: &Value) -> Result<SimSpec, String> {
    resolve(derive_scenario(&info(), &derive(), w).map_err(|e| e.to_string())?)
}

/// The engine measured: the derived scenario's engine with coefficients far from the prior.
fn truth() -> (SimMeasure, CostModel) {
    let base = scenario(&json!({"dataset_name": "random", "ignore_eos": true})).unwrap();
    let mut cost = base.cost.clone();
    cost.overlay(
        &CostCoefficients {
            step_us: Some(9000.0),
            prefill_token_us: Some(60.0),
            decode_token_us: Some(150.0),
            request_ingress_us: Some(3000.0),
            ..Default::default()
        },
        CoefficientSource::Scenario,
    );
    let m = SimMeasure {
        info: info(),
        engine: base.engine.clone(),
        truth: cost.clone(),
        meta: sim::report::PointMeta::of(&base),
        log: Vec::new(),
    };
    (m, cost)
}

#[test]
fn calibrating_the_simulator_recovers_its_coefficients_and_check_passes() {
    let (mut m, truth) = truth();
    let opts = CalibrateOptions {
        max_probe_concurrency: 16,
        warmup_s: 1.0,
        repeat: 1,
        max_evals: 300,
        speed_reference: true,
        step_log: None,
    };
    let profile = procedure::calibrate(&mut m, &scenario, &opts).unwrap();
    let t = truth.coefficients();
    for k in ["step_us", "prefill_token_us"] {
        let (f, t) = (profile.coefficient(k).unwrap(), t.get(k).unwrap());
        assert!((f - t).abs() / t < 0.02, "{k}: fitted {f}, true {t}");
    }
    // Probes cannot tell per_seq_us from decode_token_us: their sum is what is fitted.
    let sum = |c: &dyn Fn(&str) -> f64| c("decode_token_us") + c("per_seq_us");
    let (f, tr) = (sum(&|k| profile.coefficient(k).unwrap()), sum(&|k| t.get(k).unwrap()));
    assert!((f - tr).abs() / tr < 0.02, "decode_token_us + per_seq_us: fitted {f}, true {tr}");
    // The simulated engine holds one speed: every speed reference is the same, and the
    // intervals carry no spread of the engine's own; what they add is the fit's residuals (the
    // model measured by itself: small).
    let refs = &profile.speed_reference.as_ref().unwrap().mean_itl_ms;
    assert!(refs.iter().all(|r| *r == refs[0] && r.is_some()), "{refs:?}");
    let me = profile.uncertainty.as_ref().unwrap().model_error_p90.as_ref().unwrap();
    assert!(me.values().all(|e| *e >= 0.0 && *e < 0.1), "{me:?}");

    // The check, with the fitted coefficients on every point.
    let fitted: Value = serde_json::to_value(&profile.coefficients).unwrap();
    let overlay: CostCoefficients = serde_json::from_value(fitted.clone()).unwrap();
    let point = |w: &Value| -> Result<SimSpec, String> {
        let mut s = scenario(w)?;
        s.cost.overlay(&overlay, CoefficientSource::Profile);
        Ok(s)
    };
    let o = CheckOptions {
        concurrency: vec![1, 4, 16],
        num_prompts_per_point: Some(vec![4, 12, 32]),
        fit_on: vec![],
        profile_fitted_loads: Vec::new(),
        workload: json!({"dataset_name": "random", "random_input_len": 256, "random_output_len": 32, "ignore_eos": true, "initial_test_request": false}),
        repeat: 2,
        max_evals: 100,
        speed_reference_ms: Some(profile.speed_reference.as_ref().unwrap().median_mean_itl_ms),
        profile_coefficients: Some(fitted),
        uncertainty: profile.uncertainty.clone(),
        prompt_salt: 0,
    };
    let (report, _, _) = procedure::check(&mut m, &point, &scenario, &o).unwrap();
    assert!(report.verdict.pass, "{}", serde_json::to_string_pretty(&report.verdict).unwrap());
    assert_eq!(report.verdict.speed_reference.as_ref().unwrap().engine_held_still, Some(true));
    assert_eq!(report.repeats, Some(2));
    // Every point carries its interval, and the simulated engine lies inside it.
    for p in &report.points {
        let inside = p.inside_interval.as_ref().unwrap();
        assert!(inside.iter().all(|(_, v)| *v), "{inside:?}");
    }
    // The verdict counts them: every timed value of the three judged points (the preemption
    // count, prefix hits and KV peak left out).
    let c = report.verdict.interval_coverage.as_ref().unwrap();
    let timed = |p: &calib::check::CheckPoint| {
        p.inside_interval
            .as_ref()
            .unwrap()
            .iter()
            .filter(|(k, _)| !["num_preemptions", "prefix_cache_hit_rate", "kv_cache_usage_peak"].contains(k))
            .count()
    };
    assert_eq!(c.values, report.points.iter().map(timed).sum::<usize>());
    assert!(c.values > 3 * 10, "{c:?}");
    assert_eq!((c.inside, c.fraction, c.target), (c.values, Some(1.0), 0.8));
}

/// An engine whose own speed moves while it is calibrated (every third run 15% slower, as a
/// host that is busy a third of the time): the speed references show it, and the profile carries
/// that spread as the error every prediction's interval adds to the coefficients' spread.
struct Drifting {
    steady: SimMeasure,
    slow: SimMeasure,
    runs: usize,
}

impl calib::Measure for Drifting {
    fn info(&self) -> &ServerInfo {
        self.steady.info()
    }
    fn measure(
        &mut self,
        w: &sim::workload::Workload,
        run: calib::Run<'_>,
    ) -> Result<calib::Measurement, calib::MeasureError> {
        self.runs += 1;
        if self.runs % 3 == 0 {
            self.slow.measure(w, run)
        } else {
            self.steady.measure(w, run)
        }
    }
    fn warm_up(
        &mut self,
        seconds: f64,
        next: &mut dyn FnMut(u64) -> sim::workload::Workload,
    ) -> Result<(), calib::MeasureError> {
        self.steady.warm_up(seconds, next)
    }
}

/// [`Drifting`] with every third run `factor` times slower, calibrated.
fn calibrate_drifting(factor: f64) -> calib::profile::Profile {
    let (steady, base) = truth();
    let (mut slow, _) = truth();
    let mut slower = base.clone();
    let t = base.coefficients();
    slower.overlay(
        &CostCoefficients {
            step_us: t.get("step_us").map(|v| factor * v),
            per_seq_us: t.get("per_seq_us").map(|v| factor * v),
            prefill_token_us: t.get("prefill_token_us").map(|v| factor * v),
            decode_token_us: t.get("decode_token_us").map(|v| factor * v),
            ..Default::default()
        },
        CoefficientSource::Scenario,
    );
    slow.truth = slower;
    let mut m = Drifting { steady, slow, runs: 0 };
    let opts = CalibrateOptions {
        max_probe_concurrency: 4,
        warmup_s: 0.0,
        repeat: 1,
        max_evals: 40,
        speed_reference: true,
        step_log: None,
    };
    procedure::calibrate(&mut m, &scenario, &opts).unwrap()
}

/// An engine that runs twice as slow every third run (a host that slows down under it, as in
/// `validation/live-20261202-native4`): the calibration says, in its traps and on the terminal,
/// that the host rather than the engine was measured. At 15% (the test below) it does not.
#[test]
fn an_engine_whose_speed_doubles_while_calibrated_is_a_trap() {
    let unsteady = |p: &calib::profile::Profile| {
        p.traps.as_ref().is_some_and(|t| t.iter().any(|t| t.kind == "unsteady_engine" && t.why.contains("factor of")))
    };
    assert!(unsteady(&calibrate_drifting(2.0)));
    assert!(!unsteady(&calibrate_drifting(1.15)));
}

#[test]
fn an_engine_whose_speed_moves_while_calibrated_widens_every_interval_by_that_spread() {
    let profile = calibrate_drifting(1.15);
    let refs: Vec<f64> = profile.speed_reference.as_ref().unwrap().mean_itl_ms.iter().flatten().copied().collect();
    let (lo, hi) = refs.iter().fold((f64::INFINITY, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
    assert!(hi / lo > 1.1, "the references see the drift: {refs:?}");
    let sd = calib::uncertainty::speed_reference_sd_ln(&refs).unwrap();
    let u = profile.uncertainty.as_ref().unwrap();
    let me = u.model_error_p90.as_ref().unwrap();
    // Per family the larger of the speed σ and the fit's residual σ.
    let resid = calib::uncertainty::residual_sd_ln(
        &profile.fit.points,
        profile.coefficient_sources.0.iter().filter(|(_, s)| *s == "data").count(),
    );
    for f in calib::uncertainty::FAMILIES {
        let r = resid.iter().find(|(k, _)| *k == f).map_or(0.0, |(_, v)| *v);
        let sigma = sd.max(r);
        assert!((me[f] - ((1.645 * sigma).exp() - 1.0)).abs() < 1e-12, "{f}: {me:?}");
        assert!(me[f] >= (1.645 * sd).exp() - 1.0 - 1e-12);
        if f != "throughput" {
            // A p99 the probes measured: its own σ there, at least the speed σ.
            let p99 = &format!("p99_{f}_ms");
            assert!(me[p99] >= (1.645 * sd).exp() - 1.0 - 1e-12, "{p99}: {me:?}");
        }
    }
    assert!(u.model_error_source.as_ref().unwrap().contains("speed reference"));
    // A prediction's interval is that spread wide (the ensemble's spread is nil here: one
    // sample, the centre): the family's for a mean, the key's own for a p99.
    let c = calib::uncertainty::predict_point(&scenario(&json!({"dataset_name": "random", "random_input_len": 128, "random_output_len": 16, "num_prompts": 4, "max_concurrency": 1, "ignore_eos": true})).unwrap());
    let i = u.intervals(&c, std::slice::from_ref(&c));
    for (key, metric, entry) in [
        ("mean_tpot_ms", sim::report::Metric::MeanTpotMs, "tpot"),
        ("p99_tpot_ms", sim::report::Metric::P99TpotMs, "p99_tpot_ms"),
    ] {
        let iv = i.iter().find(|(n, _)| *n == key).unwrap().1;
        let center = sim::report::Metrics::metric(&c, metric).unwrap();
        assert!(((iv.p95 / center).ln() - (1.0 + me[entry]).ln()).abs() < 1e-9, "{key}: {iv:?} about {center}");
    }
}

/// The profile's keys are a contract (`cost.profile` reads `coefficients`, `check` reads
/// `speed_reference`): pinned, with the order they are written in.
#[test]
fn profile_keys() {
    let (mut m, _) = truth();
    let opts = CalibrateOptions {
        max_probe_concurrency: 4,
        warmup_s: 0.0,
        repeat: 1,
        max_evals: 12,
        speed_reference: true,
        step_log: Some(("steps.log".into(), String::new())),
    };
    let p = serde_json::to_value(procedure::calibrate(&mut m, &scenario, &opts).unwrap()).unwrap();
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>().join(",");
    assert_eq!(
        keys(&p),
        "format,version,created_by,source,engine,coefficients,coefficient_sources,prior,cost_mode,fit,roofline_check,uncertainty,lone_request_fit,speed_reference,fit_workloads"
    );
    assert_eq!(
        keys(&p["engine"]),
        "kind,version,model,kv_capacity_tokens,model_card,gpu,tensor_parallel_size,kv_cache_dtype,linear_weight_bytes,cuda_graphs"
    );
    assert_eq!(p["engine"]["kind"], "vllm");
    assert_eq!(keys(&p["fit"]), "method,target_noise,targets,free,factors,objective,evaluations,r2,points");
    assert_eq!(keys(&p["fit"]["points"][0]), "name,max_concurrency,measured,predicted,relative_residual,load");
    assert_eq!(keys(&p["fit"]["r2"]), calib::fit::TARGETS.map(sim::report::Metric::key).join(","));
    assert_eq!(
        keys(&p["uncertainty"]),
        "method,coefficients,log_covariance,chi2_per_dof,intervals,model_error_p90,model_error_source"
    );
    assert_eq!(keys(&p["lone_request_fit"]), "method,points,r2,coefficients");
    assert_eq!(keys(&p["speed_reference"]), "workload,mean_itl_ms,median_mean_itl_ms");
    assert_eq!(keys(&p["fit_workloads"][0]), "name,workload");
    assert_eq!(keys(&p["coefficients"]), sim::cost::COEFFICIENT_NAMES.join(","));
    assert_eq!(keys(&p["coefficient_sources"]), sim::cost::COEFFICIENT_NAMES.join(","));
    if let Some(r) = p["roofline_check"].as_array().and_then(|a| a.first()) {
        assert_eq!(keys(r), "coefficient,fitted_us,roofline_floor_us,beats_physics");
    }
    // From results: the inputs are named instead.
    let spec = scenario(&json!({"dataset_name": "random", "random_input_len": 64, "random_output_len": 8, "num_prompts": 4, "max_concurrency": 1, "ignore_eos": true})).unwrap();
    let pt = calib::fit::FitPoint {
        name: "r#0".into(),
        measured: calib::fit::predict(&spec, &spec.cost),
        spec,
        replay: None,
    };
    let r = serde_json::to_value(
        procedure::calibrate_from_results(&[pt], 10, vec!["r.json".into()], "s.json".into()).unwrap(),
    )
    .unwrap();
    assert_eq!(
        keys(&r),
        "format,version,created_by,source,engine,coefficients,coefficient_sources,prior,cost_mode,composed_cost_source,fit,roofline_check,identifiability,traps,uncertainty,from_results,scenario,note"
    );
    assert_eq!(
        keys(&r["engine"]),
        "kind,version,model,model_card,gpu,tensor_parallel_size,kv_cache_dtype,linear_weight_bytes,cuda_graphs"
    );
    assert_eq!(
        keys(&r["identifiability"][0]),
        "coefficient,determined,data_share,prior_sigma_log,prior_sigma_source,why,fitted_over_prior"
    );
    assert_eq!(keys(&r["uncertainty"]), "method,coefficients,log_covariance,chi2_per_dof,intervals,ensemble,ensemble_method,model_error_p90,model_error_source");
}

/// A scenario derived from `servesim serve` takes the emulated vLLM's scheduler limits from
/// `/v1/models` (`servesim_engine_args`): without them it ran vLLM's defaults (256 running
/// requests where the emulator ran 32) and nothing said so; against a server that does not
/// say them, the caller is told which were left at the defaults (the live-loop hunt).
#[test]
fn a_derived_scenario_takes_the_emulators_limits_and_names_the_unknown_ones() {
    let bare = DeriveOptions { sets: Vec::new(), ..derive() };
    assert_eq!(calib::derive::unknown_scheduler_flags(&info(), &bare), vec!["max_num_seqs", "max_num_batched_tokens"]);
    assert!(calib::derive::unknown_scheduler_flags(&info(), &derive()).is_empty(), "--set gives them");
    let mut emulated = info();
    emulated.servesim_engine_args =
        Some(json!({"max_num_seqs": 32, "max_num_batched_tokens": 2048}).as_object().unwrap().clone());
    assert!(calib::derive::unknown_scheduler_flags(&emulated, &bare).is_empty());
    let v = derive_scenario(&emulated, &bare, &json!({"dataset_name": "random", "num_prompts": 2})).unwrap();
    assert_eq!(v["engine"]["max_num_seqs"], 32);
    assert_eq!(v["engine"]["max_num_batched_tokens"], 2048);
    // The start-up log's arguments win over the emulator's.
    let mut logged = bare.clone();
    logged.log_args.insert("max_num_seqs".into(), 8.into());
    let v = derive_scenario(&emulated, &logged, &json!({"dataset_name": "random", "num_prompts": 2})).unwrap();
    assert_eq!(v["engine"]["max_num_seqs"], 8);
    // SGLang reports its own.
    let sg = ServerInfo { kind: Some(EngineKind::Sglang), ..info() };
    assert!(calib::derive::unknown_scheduler_flags(&sg, &bare).is_empty());
}
