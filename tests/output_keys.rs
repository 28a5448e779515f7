//! The JSON keys of servesim's outputs are a contract: scripts, the notebooks,
//! the page and VALIDATION.md read them. This snapshot pins every nested key
//! path of `simulate --json` (vLLM, SGLang, and with `--uncertainty`'s
//! intervals), `sweep --json` (one scenario and side by side), `tune --json`,
//! `explain --json`, `sweep` and `tune` with intervals, the fitted profile and the
//! check report, in the order
//! they are written, against `tests/output_keys.txt`.
//!
//! A path is the keys from the top joined by `.`; `[]` stands for every
//! element of an array (their keys are united); a key holding a `.` (a `--vary`
//! path) is written `["engine.max_num_seqs"]`. Adding a key is allowed and
//! shows up here: regenerate the file with
//! `SERVESIM_BLESS=1 cargo test --test e2e output_keys` and commit it with the
//! change. Renaming or removing a key breaks its readers: don't.
//!
//! The profile and the check report come from the calibration procedures run
//! against the simulator as the measured engine (`calib::SimMeasure`), as
//! `calib/tests/procedures.rs` runs them: the same typed structs `servesim
//! calibrate` and `servesim check` write.

use calib::derive::{derive_scenario, DeriveOptions, ModelChoice};
use calib::procedure::{self, CalibrateOptions, CheckOptions};
use calib::{ServerInfo, SimMeasure};
use serde_json::{json, Value};
use sim::config::{self, EngineKind, SimSpec};
use sim::cost::{CoefficientSource, CostCoefficients};

use crate::common::*;

/// Every key path of `v`, first-seen order, each once.
fn key_paths(v: &Value) -> Vec<String> {
    fn walk(v: &Value, prefix: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    let path = if k.contains('.') {
                        format!("{prefix}[\"{k}\"]")
                    } else if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    if !out.contains(&path) {
                        out.push(path.clone());
                    }
                    walk(child, &path, out);
                }
            }
            Value::Array(a) => {
                for child in a {
                    walk(child, &format!("{prefix}[]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, "", &mut out);
    out
}

fn cli_json(args: &[&str]) -> Value {
    stdout_json(&run_cli(args))
}

/// The live server the procedures measure: the simulator with known coefficients.
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

fn derived(w: &Value) -> Result<SimSpec, String> {
    let d = DeriveOptions {
        hardware: Some("a100-80gb".into()),
        model: ModelChoice::Card("qwen2.5-7b-instruct".into()),
        log_args: Default::default(),
        sets: vec!["engine.max_num_seqs=32".into(), "engine.max_num_batched_tokens=2048".into()],
    };
    let v = derive_scenario(&info(), &d, w).map_err(|e| e.to_string())?;
    let s = config::from_value(v, "").map_err(|e| e.to_string())?;
    config::resolve(&s, &resources()).map_err(|e| e.to_string())
}

/// A profile and a check report, as `calibrate` and `check` write them.
fn profile_and_check() -> (Value, Value) {
    let base = derived(&json!({"dataset_name": "random", "ignore_eos": true})).unwrap();
    let mut truth = base.cost.clone();
    truth.overlay(
        &CostCoefficients { step_us: Some(9000.0), decode_token_us: Some(150.0), ..Default::default() },
        CoefficientSource::Scenario,
    );
    let mut m = SimMeasure {
        info: info(),
        engine: base.engine.clone(),
        truth,
        meta: sim::report::PointMeta::of(&base),
        log: Vec::new(),
    };
    let opts = CalibrateOptions {
        max_probe_concurrency: 4,
        warmup_s: 0.0,
        repeat: 1,
        max_evals: 12,
        speed_reference: true,
        step_log: Some(("steps.log".into(), String::new())),
    };
    let profile = procedure::calibrate(&mut m, &derived, &opts).unwrap();
    let fitted: Value = serde_json::to_value(&profile.coefficients).unwrap();
    let overlay: CostCoefficients = serde_json::from_value(fitted.clone()).unwrap();
    let point = |w: &Value| -> Result<SimSpec, String> {
        let mut s = derived(w)?;
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
        max_evals: 20,
        speed_reference_ms: Some(profile.speed_reference.as_ref().unwrap().median_mean_itl_ms),
        profile_coefficients: Some(fitted),
        uncertainty: profile.uncertainty.clone(),
        prompt_salt: 0,
    };
    let (report, _, _) = procedure::check(&mut m, &point, &derived, &o).unwrap();
    (serde_json::to_value(&profile).unwrap(), serde_json::to_value(&report).unwrap())
}

#[test]
fn output_keys_match_the_snapshot() {
    let sections: Vec<(&str, Vec<Value>)> = vec![
        ("simulate --json (vLLM, the default scenario)", vec![cli_json(&["simulate", "--json"])]),
        ("simulate --json --uncertainty", vec![cli_json(&["simulate", "--json", "--uncertainty"])]),
        (
            "simulate --json (SGLang)",
            vec![cli_json(&["simulate", "scenarios/rtx5090-qwen2.5-7b-sglang.json", "--json"])],
        ),
        (
            "sweep --json",
            vec![cli_json(&["sweep", "--concurrency", "1,16,42,64", "--num-prompts", "20,64,168,256", "--json"])],
        ),
        (
            "sweep --json, side by side",
            vec![cli_json(&[
                "sweep",
                "--concurrency",
                "1,16,42,64",
                "--num-prompts",
                "20,64,168,256",
                "--set",
                "engine.kind=vllm,sglang",
                "--json",
            ])],
        ),
        (
            "tune --json (best, Pareto front, rejected, stopped early, invalid, knee)",
            // Run out (every rejected configuration with its metrics), then with the early stop.
            [&["--no-early-stop"][..], &[][..]]
                .iter()
                .map(|extra| {
                    let mut args = vec![
                        "tune",
                        "--vary",
                        "engine.max_num_seqs=16,32",
                        "--vary",
                        "workload.max_concurrency=16,64",
                        "--vary",
                        "workload.random_input_len=4096,300000",
                        "--set",
                        "workload.num_prompts=64",
                        "--slo",
                        "p99_ttft_ms<=20000",
                        "--slo",
                        "mean_tpot_ms<=30",
                        "--json",
                    ];
                    args.extend_from_slice(extra);
                    cli_json(&args)
                })
                .collect(),
        ),
        (
            "explain --json (KV pool from the start-up log, and derived from memory)",
            vec![
                cli_json(&["explain", "--concurrency", "64", "--json"]),
                cli_json(&["explain", "--concurrency", "64", "--set", "engine.kv_cache_tokens=null", "--json"]),
            ],
        ),
    ];
    let (profile, check) = profile_and_check();
    // Intervals in sweep and tune: with the profile's uncertainty block (the knee's range over
    // its coefficient sets), and with --uncertainty (the uncalibrated band, SLO verdicts).
    let file = write_temp("output-keys-profile.json", &serde_json::to_string(&profile).unwrap());
    let set = format!("cost.profile={}", file.display());
    let intervals = [
        (
            "sweep --json with a profile's uncertainty block",
            vec![cli_json(&[
                "sweep",
                "--concurrency",
                "1,16,42,64",
                "--num-prompts",
                "20,64,168,256",
                "--set",
                &set,
                // The profile was fitted on an A100 (a profile holds for its own deployment);
                // the pool pinned again (a new GPU drops the scenario's logged one) so that the
                // sweep has its knee.
                "--set",
                "hardware=a100-80gb",
                "--set",
                "engine.kv_cache_tokens=194896",
                "--json",
            ])],
        ),
        (
            "tune --json --uncertainty",
            vec![cli_json(&[
                "tune",
                "--vary",
                "engine.max_num_seqs=16,32",
                "--vary",
                "workload.max_concurrency=16,64",
                "--set",
                "workload.num_prompts=64",
                "--slo",
                "p99_ttft_ms<=20000",
                "--slo",
                "mean_tpot_ms<=30",
                "--uncertainty",
                "--json",
            ])],
        ),
    ];
    let mut text = String::new();
    let all = sections
        .into_iter()
        .chain(intervals)
        .chain([("profile (calibrate --out)", vec![profile]), ("check report (check --json)", vec![check])]);
    for (title, values) in all {
        text.push_str(&format!("# {title}\n"));
        let mut paths: Vec<String> = Vec::new();
        for v in &values {
            for p in key_paths(v) {
                if !paths.contains(&p) {
                    paths.push(p);
                }
            }
        }
        for p in paths {
            text.push_str(&p);
            text.push('\n');
        }
    }
    let file = root().join("tests/output_keys.txt");
    if std::env::var_os("SERVESIM_BLESS").is_some() {
        std::fs::write(&file, &text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&file).unwrap_or_default();
    if want != text {
        let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), text.lines().collect());
        let gone: Vec<&&str> = w.iter().filter(|l| !g.contains(l)).collect();
        let new: Vec<&&str> = g.iter().filter(|l| !w.contains(l)).collect();
        panic!(
            "output keys differ from tests/output_keys.txt (removed or renamed: {gone:?}; added: {new:?}; \
             or their order moved). A key added on purpose: SERVESIM_BLESS=1 cargo test --test e2e output_keys, \
             and commit the file."
        );
    }
}
