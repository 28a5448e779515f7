//! 90% intervals in `sweep` and `tune` (issue #13): with a profile that carries an
//! uncertainty block, or `--uncertainty` without one, each sweep point and each reported
//! tune configuration gets `simulate --json`'s `uncertainty` object; without either,
//! the outputs are as before (byte for byte: the golden tests).

use serde_json::Value;

use crate::common::*;

const SCENARIO: &str = "scenarios/rtx5090-qwen2.5-7b-vllm.json";

/// The metrics the text tables show with their interval.
const KEY_METRICS: [&str; 5] = ["output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_e2el_ms"];

/// A profile with an ensemble, as `calibrate --from-results` writes it: fitted on one run
/// "measured" by the simulator with a slower prior (as `tests/calibration.rs` does).
fn profile(name: &str) -> String {
    let dir = scratch().join(format!("intervals-{name}"));
    let out = profile_from_slowed_run(SCENARIO, &dir);
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(p["uncertainty"]["ensemble"].as_array().map(Vec::len), Some(32), "the profile has an ensemble");
    out.to_str().unwrap().to_string()
}

fn sweep_args(extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> =
        ["sweep", SCENARIO, "--concurrency", "1,16,42,64", "--num-prompts", "8,48,126,192"].map(String::from).to_vec();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn run(args: &[String]) -> std::process::Output {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = run_cli(&a);
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    o
}

/// The keys of `simulate --json --uncertainty`'s `uncertainty` object.
fn simulate_uncertainty_keys() -> Vec<String> {
    let s = stdout_json(&run_cli(&["simulate", SCENARIO, "--json", "--uncertainty"]));
    s["uncertainty"].as_object().unwrap().keys().cloned().collect()
}

/// Every key metric's interval holds the point estimate and has a width.
fn assert_intervals_hold(report: &Value, what: &str) {
    let u = &report["uncertainty"];
    for k in KEY_METRICS {
        let v = report[k].as_f64().unwrap_or_else(|| panic!("{what}: no {k}"));
        let (lo, hi) = (u[k]["p05"].as_f64().unwrap(), u[k]["p95"].as_f64().unwrap());
        assert!(lo <= v && v <= hi, "{what}: {k} = {v} outside [{lo}, {hi}]");
        assert!(hi > lo, "{what}: {k}: zero width [{lo}, {hi}]");
    }
}

#[test]
fn a_sweep_with_a_profile_has_an_interval_per_point_and_a_knee_range() {
    let p = profile("sweep");
    let set = format!("cost.profile={p}");
    let args = sweep_args(&["--set", &set, "--json"]);
    let first = run(&args);
    // Deterministic: the same bytes twice, and whatever the number of threads.
    assert_eq!(first.stdout, run(&args).stdout, "two runs differ");
    let mut one_thread = args.clone();
    one_thread.extend(["--jobs".to_string(), "1".to_string()]);
    assert_eq!(first.stdout, run(&one_thread).stdout, "--jobs 1 differs");

    let j = stdout_json(&first);
    let keys = simulate_uncertainty_keys();
    let points = j["points"].as_array().unwrap();
    assert_eq!(points.len(), 4);
    for (i, pt) in points.iter().enumerate() {
        let u = pt["uncertainty"].as_object().unwrap_or_else(|| panic!("point {i} has no uncertainty"));
        let got: Vec<String> = u.keys().cloned().collect();
        assert_eq!(got, keys, "point {i}: the same keys as simulate --json");
        assert!(u["source"].as_str().unwrap().contains("ensemble"), "{}", u["source"]);
        assert_intervals_hold(pt, &format!("point {i}"));
    }
    // The same method as simulate: a point's interval is simulate's at that concurrency.
    let s = stdout_json(&run_cli(&[
        "simulate",
        SCENARIO,
        "--json",
        "--set",
        &set,
        "--set",
        "workload.max_concurrency=16",
        "--set",
        "workload.num_prompts=48",
    ]));
    assert_eq!(points[1]["uncertainty"], s["uncertainty"]);
    assert_eq!(points[1]["mean_ttft_ms"], s["mean_ttft_ms"]);
    // The knee's range over the 32 coefficient sets, beside the knee.
    let keys: Vec<&String> = j.as_object().unwrap().keys().collect();
    let at = keys.iter().position(|k| *k == "knee").unwrap();
    assert_eq!(keys[at + 1], "knee_range");
    let kr = &j["knee_range"];
    assert_eq!(kr["members"], 32);
    let (lo, hi) = (kr["min"].as_u64(), kr["max"].as_u64());
    if let (Some(lo), Some(hi)) = (lo, hi) {
        assert!(lo <= hi);
        assert!([1, 16, 42, 64].contains(&lo) && [1, 16, 42, 64].contains(&hi));
    }
    assert!(kr["reached"].as_u64().unwrap() <= 32);

    // The text: the table, then each point's headline metrics with their interval.
    let text = String::from_utf8(run(&sweep_args(&["--set", &set])).stdout).unwrap();
    assert!(text.contains("90% intervals (the profile's coefficient ensemble: 32 sets simulated"), "{text}");
    assert!(text.contains("Knee over the 32 coefficient sets"), "{text}");
    let ttft = points[2]["mean_ttft_ms"].as_f64().unwrap();
    let u = &points[2]["uncertainty"]["mean_ttft_ms"];
    let cell = format!("{ttft:.1} [{:.1}–{:.1}]", u["p05"].as_f64().unwrap(), u["p95"].as_f64().unwrap());
    assert!(text.contains(&cell), "{cell} not in\n{text}");
}

#[test]
fn a_sweep_with_the_flag_and_no_profile_gives_the_uncalibrated_band() {
    let j = stdout_json(&run(&sweep_args(&["--uncertainty", "--json"])));
    for (i, pt) in j["points"].as_array().unwrap().iter().enumerate() {
        assert!(pt["uncertainty"]["source"].as_str().unwrap().starts_with("uncalibrated"), "{}", pt["uncertainty"]);
        assert_intervals_hold(pt, &format!("point {i}"));
    }
    assert!(j.get("knee_range").is_none(), "the uncalibrated band has no members to sweep");
    // Side by side: every series' points carry theirs.
    let j = stdout_json(&run(&sweep_args(&["--set", "engine.kind=vllm,sglang", "--uncertainty", "--json"])));
    for s in j["scenarios"].as_array().unwrap() {
        assert!(s["points"].as_array().unwrap().iter().all(|p| p["uncertainty"].is_object()));
    }
}

#[test]
fn tune_with_a_profile_puts_intervals_and_slo_verdicts_on_the_best_and_the_front() {
    let p = profile("tune");
    let set = format!("cost.profile={p}");
    let args: Vec<String> = [
        "tune",
        SCENARIO,
        "--vary",
        "engine.max_num_seqs=16,32,64",
        "--vary",
        "workload.max_concurrency=16,32,64",
        "--set",
        "workload.num_prompts=64",
        "--set",
        &set,
        "--slo",
        "p99_ttft_ms<=20000",
        "--slo",
        "mean_tpot_ms<=45",
        "--json",
    ]
    .map(String::from)
    .to_vec();
    let first = run(&args);
    assert_eq!(first.stdout, run(&args).stdout, "two runs differ");
    let j = stdout_json(&first);
    let best = &j["best"];
    assert!(best.is_object(), "{j}");
    let keys: Vec<&String> = best.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["config", "metrics", "uncertainty", "slo_checks", "slo_verdict"]);
    let keys = simulate_uncertainty_keys();
    let got: Vec<String> = best["uncertainty"].as_object().unwrap().keys().cloned().collect();
    assert_eq!(got, keys);
    let mut m = best["metrics"].clone();
    m["uncertainty"] = best["uncertainty"].clone();
    assert_intervals_hold(&m, "best");
    // The same method as simulate: the best's interval is simulate's for that configuration.
    let mut sim_args: Vec<String> =
        ["simulate", SCENARIO, "--json", "--set", "workload.num_prompts=64", "--set", &set].map(String::from).to_vec();
    for (k, v) in best["config"].as_object().unwrap() {
        sim_args.extend(["--set".to_string(), format!("{k}={v}")]);
    }
    let s = stdout_json(&run(&sim_args));
    assert_eq!(best["uncertainty"], s["uncertainty"]);
    // Each SLO with its value, interval and verdict; the verdict reads the interval's edge.
    let checks = best["slo_checks"].as_array().unwrap();
    assert_eq!(checks.len(), 2);
    for c in checks {
        let (v, hi) = (c["value"].as_f64().unwrap(), c["interval"]["p95"].as_f64().unwrap());
        let bound: f64 = c["slo"].as_str().unwrap().split("<=").nth(1).unwrap().parse().unwrap();
        assert!(v <= bound, "the best meets every SLO at its estimate");
        let want = if hi <= bound { "meets" } else { "meets_at_estimate_only" };
        assert_eq!(c["verdict"], want, "{c}");
    }
    let all_meet = checks.iter().all(|c| c["verdict"] == "meets");
    assert_eq!(best["slo_verdict"], if all_meet { "meets" } else { "meets_at_estimate_only" });
    if all_meet {
        assert!(j["robust_best"].is_null());
    }
    assert!(j["robust_note"].as_str().is_some_and(|s| !s.is_empty()));
    // The Pareto front: every row has its intervals; rejected rows are not given any (the cost
    // is bounded by what is reported).
    for p in j["pareto"].as_array().unwrap() {
        assert!(p["uncertainty"]["output_throughput"]["p95"].as_f64().is_some(), "{p}");
        assert!(p["slo_verdict"].is_string());
    }
    assert!(j["rejected"].as_array().unwrap().iter().all(|r| r.get("uncertainty").is_none()));
    // The text: the best's interval line and a verdict per SLO.
    let mut text_args = args.clone();
    text_args.pop();
    let text = String::from_utf8(run(&text_args).stdout).unwrap();
    assert!(text.contains("  90% interval: output_throughput "), "{text}");
    assert!(text.contains("  SLO p99_ttft_ms<=20000: "), "{text}");
    assert!(text.contains("SLOs: meets"), "{text}");
}

#[test]
fn without_a_profile_or_the_flag_sweep_and_tune_carry_no_intervals() {
    let j = stdout_json(&run(&sweep_args(&["--json"])));
    assert!(j["points"].as_array().unwrap().iter().all(|p| p.get("uncertainty").is_none()));
    assert!(j.get("knee_range").is_none());
    let text = String::from_utf8(run(&sweep_args(&[])).stdout).unwrap();
    assert!(!text.contains("90% interval"), "{text}");
    let tune = [
        "tune",
        "--vary",
        "engine.max_num_seqs=16,32",
        "--set",
        "workload.num_prompts=32",
        "--slo",
        "p99_ttft_ms<=20000",
    ];
    let mut a = tune.to_vec();
    a.push("--json");
    let j = stdout_json(&run_cli(&a));
    assert!(j["best"].get("uncertainty").is_none());
    assert!(j.get("robust_best").is_none() && j.get("robust_note").is_none());
    let text = String::from_utf8(run_cli(&tune).stdout).unwrap();
    assert!(!text.contains("90% interval"), "{text}");
}

/// `simulate --model-error` replaces the uncalibrated band's 90% |error| of the families it
/// names (and implies `--uncertainty`): the TTFT interval is `[x / 1.5, x · 1.5]` for 0.5;
/// the families not named keep the corpus'; a family that is not one is an error.
#[test]
fn simulate_model_error_sets_the_uncalibrated_band_of_the_families_named() {
    let base = stdout_json(&run_cli(&["simulate", "--uncertainty", "--json"]));
    let given = stdout_json(&run_cli(&["simulate", "--model-error", "ttft=0.5", "--json"]));
    let x = given["mean_ttft_ms"].as_f64().unwrap();
    let iv = &given["uncertainty"]["mean_ttft_ms"];
    let close = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-9;
    assert!(close(iv["p05"].as_f64().unwrap(), x / 1.5) && close(iv["p95"].as_f64().unwrap(), x * 1.5), "{iv}");
    assert_eq!(given["uncertainty"]["mean_tpot_ms"], base["uncertainty"]["mean_tpot_ms"]);
    assert!(
        given["uncertainty"]["source"].as_str().unwrap_or_default().contains("given (--model-error)"),
        "{}",
        given["uncertainty"]
    );
    let bad = run_cli(&["simulate", "--model-error", "speed=0.5"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--model-error: `speed`: not a metric family"));
}

/// An SLO on a metric without an interval (a p95) is judged at the estimate: a configuration
/// that breaks it misses it, and says there is no interval (it read "meets at the estimate
/// only", the interval's edge blamed, on configurations listed as rejected; the audit of
/// 2026-12-06). One that meets it is not called robust, nor said to be broken by an interval.
#[test]
fn an_slo_on_a_metric_without_an_interval_is_judged_at_the_estimate() {
    let o = run_cli(&[
        "tune",
        SCENARIO,
        "--set",
        "workload.num_prompts=64",
        "--vary",
        "workload.max_concurrency=8,16,32",
        "--slo",
        "p95_ttft_ms<=3000",
        "--uncertainty",
        "--no-early-stop",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j = stdout_json(&o);
    let rejected: Vec<String> = j["rejected"].as_array().unwrap().iter().map(|r| r["config"].to_string()).collect();
    assert!(!rejected.is_empty(), "{j}");
    for p in j["pareto"].as_array().unwrap() {
        let verdict = p["slo_verdict"].as_str().unwrap();
        if rejected.contains(&p["config"].to_string()) {
            assert_eq!(verdict, "misses_no_interval", "{p}");
        } else {
            assert_eq!(verdict, "no_interval", "{p}");
        }
    }
    assert!(j["robust_note"].as_str().unwrap().contains("not judged"), "{}", j["robust_note"]);
}

/// A configuration whose report has no figure for an SLO (SGLang's retractions asked of a vLLM
/// configuration) cannot meet it: it is invalid, saying why, and never the best (it was, the
/// SLO silently dropped; the audit of 2026-12-06).
#[test]
fn tune_does_not_drop_an_slo_a_configuration_cannot_report() {
    let o = run_cli(&[
        "tune",
        "scenarios/rtx5090-qwen2.5-7b-sglang.json",
        "--set",
        "workload.num_prompts=8",
        "--vary",
        r#"engine={"kind":"sglang","version":"0.5.21","max_running_requests":128,"context_length":32768,"mem_fraction_static":0.85},{"kind":"vllm","version":"0.28.0","max_num_seqs":128,"max_model_len":32768,"gpu_memory_utilization":0.85}"#,
        "--slo",
        "num_retractions<=0",
        "--objective",
        "mean_tpot_ms",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j = stdout_json(&o);
    assert_eq!(j["best"]["config"]["engine"]["kind"], "sglang", "{}", j["best"]);
    let invalid = j["invalid"].as_array().unwrap();
    assert_eq!(invalid.len(), 1, "{j}");
    assert_eq!(invalid[0]["config"]["engine"]["kind"], "vllm");
    assert!(invalid[0]["error"].as_str().unwrap().contains("its report has no num_retractions"), "{}", invalid[0]);
}

/// An inline GPU card that reuses a judged card's id with other figures is another GPU: its
/// uncalibrated band is the corpus-wide one, as its `unjudged_gpu` caveat says (it was the H100
/// record's, the caveat saying otherwise; the audit of 2026-12-06).
#[test]
fn an_inline_gpu_card_under_a_judged_id_gets_the_corpus_wide_band() {
    let card = r#"hardware={"gpu": {"id":"h100-80gb","name":"x","memory_bytes":85045477376,"nvidia_smi_memory_mib":81559,"memory_bandwidth_bytes_per_s":1e12,"dense_bf16_flops":2e14,"dense_fp8_flops":1.9789e15,"interconnect":"nvlink","interconnect_bandwidth_bytes_per_s":4.5e11,"compute_capability":"9.0"}}"#;
    let source = |set: &[&str]| {
        let mut a = vec!["simulate", "scenarios/long-prefill-itl-llama3.1-8b-h100-vllm.json", "--num-prompts", "4"];
        for s in set {
            a.extend(["--set", s]);
        }
        a.extend(["--uncertainty", "--json"]);
        let j = stdout_json(&run_cli(&a));
        (j["uncertainty"]["source"].as_str().unwrap().to_string(), j["caveats"].to_string())
    };
    let (builtin, _) = source(&[]);
    assert!(builtin.contains("group(s) of h100-80gb"), "{builtin}");
    let (inline, caveats) = source(&[card]);
    assert!(inline.contains("corpus-wide"), "{inline}");
    assert!(caveats.contains("unjudged_gpu"), "{caveats}");
}
