//! The fitter against data whose truth is known: measurements made by the
//! simulator itself with known coefficients. The fit must find them again,
//! and predict points it did not see.

use calib::fit::{self, FitPoint, Free};
use serde_json::json;
use sim::cost::{CoefficientSource, CostCoefficients};
use sim::simulation::RunOptions;

use crate::common::*;

fn point(input: u32, output: u32, conc: u32, prompts: u32, truth: &sim::cost::CostModel) -> FitPoint {
    let v = json!({
        "version": 1,
        "engine": {"kind": "vllm", "version": "0.32.0", "max_num_seqs": 32, "max_num_batched_tokens": 2048,
                   "num_gpu_blocks_override": 20, "block_size": 128, "max_model_len": 2048},
        "model": "qwen2.5-7b-instruct", "hardware": "cpu-host",
        "workload": {"dataset_name": "random", "random_input_len": input, "random_output_len": output,
                     "num_prompts": prompts, "max_concurrency": conc, "ignore_eos": true, "initial_test_request": false}
    });
    let s = spec(v);
    let measured = fit::predict(&s, truth);
    FitPoint { name: format!("{input}x{output}@{conc}"), spec: s, measured, replay: None }
}

/// The prior cost model of a small vLLM engine on the CPU host card.
fn cpu_prior() -> sim::cost::CostModel {
    spec(json!({
        "version": 1, "engine": {"kind": "vllm", "max_model_len": 2048, "num_gpu_blocks_override": 20, "block_size": 128},
        "model": "qwen2.5-7b-instruct", "hardware": "cpu-host",
        "workload": {"dataset_name": "random", "ignore_eos": true}
    }))
    .cost
}

/// A calibration's probes measured on `truth`: prefill at four lengths (concurrency 1),
/// decode at three batch sizes and two context lengths.
fn probe_plan_points(truth: &sim::cost::CostModel) -> Vec<FitPoint> {
    let prefill = [16, 256, 768, 1536].into_iter().map(|l| point(l, 4, 1, 3, truth));
    let decode =
        [(1, 64), (4, 64), (16, 64), (1, 512), (4, 512)].into_iter().map(|(c, l)| point(l, 32, c, 2 * c, truth));
    prefill.chain(decode).collect()
}

#[test]
fn the_fit_recovers_known_coefficients_and_predicts_unseen_points() {
    let prior = cpu_prior();
    // The truth: far from the prior (the prior is only a starting point).
    let mut truth = prior.clone();
    truth.overlay(
        &CostCoefficients {
            step_us: Some(9000.0),
            prefill_token_us: Some(300.0),
            decode_token_us: Some(450.0),
            decode_kv_us: Some(2.0),
            request_ingress_us: Some(5000.0),
            ..Default::default()
        },
        CoefficientSource::Scenario,
    );
    let fit_points = probe_plan_points(&truth);
    let free: Vec<Free> = ["step_us", "prefill_token_us", "decode_token_us", "decode_kv_us", "request_ingress_us"]
        .into_iter()
        .map(Free::one)
        .collect();
    let r = fit::fit(&fit_points, &prior, &free, None, 3000);
    let got = r.cost.coefficients();
    for (name, want) in
        [("step_us", 9000.0), ("prefill_token_us", 300.0), ("decode_token_us", 450.0), ("request_ingress_us", 5000.0)]
    {
        let v = got.get(name).unwrap();
        assert!((v - want).abs() / want < 0.05, "{name}: fitted {v}, truth {want}");
    }
    // A sweep the fit never saw, past the KV-limited concurrency (preemption included).
    for c in [2, 8, 24] {
        let p = point(256, 64, c, 3 * c, &truth);
        let pred = fit::predict(&p.spec, &r.cost);
        for (i, (m, q)) in p.measured.iter().zip(&pred).enumerate() {
            let (m, q) = (m.unwrap(), q.unwrap());
            assert!(
                (q - m).abs() / m < 0.03,
                "concurrency {c}, target {}: predicted {q}, measured {m}",
                fit::TARGETS[i]
            );
        }
    }
}

#[test]
fn the_lone_requests_ttft_gives_the_prefill_terms_and_the_ingress_exactly() {
    let prior = cpu_prior();
    let mut truth = prior.clone();
    truth.overlay(
        &CostCoefficients {
            step_us: Some(7000.0),
            prefill_token_us: Some(120.0),
            prefill_attention_us: Some(0.02),
            request_ingress_us: Some(3000.0),
            ..Default::default()
        },
        CoefficientSource::Scenario,
    );
    // 1900 tokens pass the 2048 budget only with the decode of nothing else: one chunk; the
    // design columns come from the simulator, so chunking would be counted all the same.
    let mut points: Vec<FitPoint> = [16, 256, 768, 1900].into_iter().map(|l| point(l, 4, 1, 3, &truth)).collect();
    // A concurrency-4 point is not a row: its TTFT is not linear in these.
    points.push(point(64, 16, 4, 8, &truth));
    let names = ["prefill_token_us", "request_ingress_us", "prefill_attention_us"];
    let proj = fit::Projection::new(&points, &names, &prior).expect("a projection");
    // The other coefficients at their true values: the solution is exact, whatever the
    // projected ones were before.
    let mut others = truth.clone();
    others.overlay(
        &CostCoefficients {
            prefill_token_us: Some(1.0),
            prefill_attention_us: Some(5.0),
            request_ingress_us: Some(0.0),
            ..Default::default()
        },
        CoefficientSource::Scenario,
    );
    let l = proj.solve(&points, &others).expect("a solution");
    assert_eq!(l.points, 4);
    for (got, want) in l.values.iter().zip([120.0, 3000.0, 0.02]) {
        assert!((got - want).abs() / want < 1e-4, "solved {:?}", l.values);
    }
    assert!(l.r2 > 0.999_999);
    // Three unknowns need more than three lone requests.
    assert!(fit::Projection::new(&points[1..], &names, &prior).is_none());
    // Only these coefficients are linear in a lone request's TTFT.
    assert!(fit::Projection::new(&points, &["step_us"], &prior).is_none());
}

#[test]
fn a_fit_with_the_projection_finds_an_ingress_far_above_its_prior() {
    // Seen live on SGLang: with the ingress as a searched log-factor, the search took it
    // to 0.0005 µs while every lone request's TTFT was 10 ms short, and could not come back.
    let prior = cpu_prior();
    let mut truth = prior.clone();
    truth.overlay(
        &CostCoefficients {
            step_us: Some(10_500.0),
            prefill_token_us: Some(186.0),
            decode_token_us: Some(900.0),
            decode_kv_us: Some(2.3),
            request_ingress_us: Some(11_000.0),
            ..Default::default()
        },
        CoefficientSource::Scenario,
    );
    let pts = probe_plan_points(&truth);
    let names = ["prefill_token_us", "request_ingress_us", "prefill_attention_us"];
    let proj = fit::Projection::new(&pts, &names, &prior).expect("a projection");
    let free: Vec<Free> = ["step_us", "decode_token_us", "decode_kv_us"].into_iter().map(Free::one).collect();
    let r = fit::fit(&pts, &prior, &free, Some(&proj), 1500);
    let got = r.cost.coefficients();
    for (name, want) in [
        ("step_us", 10_500.0),
        ("prefill_token_us", 186.0),
        ("decode_token_us", 900.0),
        ("request_ingress_us", 11_000.0),
    ] {
        let v = got.get(name).unwrap();
        assert!((v - want).abs() / want < 0.05, "{name}: fitted {v}, truth {want}");
    }
}

#[test]
fn replaying_the_measured_send_times_reproduces_a_closed_loop_run() {
    // Send times taken from a simulated closed-loop run, replayed open loop: the same run.
    let truth = spec(json!({
        "version": 1, "engine": {"kind": "vllm", "max_model_len": 2048, "num_gpu_blocks_override": 20, "block_size": 128},
        "model": "qwen2.5-7b-instruct", "hardware": "cpu-host",
        "workload": {"dataset_name": "random", "random_input_len": 200, "random_output_len": 16,
                     "num_prompts": 12, "max_concurrency": 4, "ignore_eos": true, "initial_test_request": false}
    }));
    let out = sim::simulate(&truth, RunOptions::default());
    let send: Vec<f64> = out.run.records.iter().map(|r| r.dispatch_ns as f64 / 1e9).collect();
    let w = fit::replay_workload(&out.workload, &send).expect("a replay");
    assert_eq!(w.max_concurrency, None);
    let p = FitPoint { name: "replay".into(), spec: truth.clone(), measured: vec![None; 5], replay: Some(w) };
    let (a, b) = (p.predict(&truth.cost), fit::predict(&truth, &truth.cost));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let (x, y) = (x.unwrap(), y.unwrap());
        assert!((x - y).abs() / y < 1e-6, "{}: replayed {x}, closed loop {y}", fit::TARGETS[i]);
    }
    // A length mismatch or a bad time is refused.
    assert!(fit::replay_workload(&out.workload, &send[1..]).is_none());
    assert!(fit::replay_workload(&out.workload, &vec![f64::NAN; send.len()]).is_none());
}

#[test]
fn pattern_search_walks_out_of_a_valley_along_the_axes() {
    // A narrow diagonal valley with its floor at (1, 2).
    let mut f = |x: &[f64]| (x[0] - 1.0).powi(2) + 50.0 * (x[1] - 2.0 * x[0]).powi(2);
    let x = fit::pattern_search(&mut f, vec![0.0, 0.0], 0.5, 1e-4, 100_000);
    // From f = 1 to near the floor: compass steps zig-zag down a diagonal valley, so it ends
    // close, not exact (it polishes a simplex's answer; it does not replace it).
    assert!(f(&x) < 1e-3 && (x[0] - 1.0).abs() < 0.03 && (x[1] - 2.0).abs() < 0.06, "{x:?}");
}

#[test]
fn offline_calibration_from_saved_results_keeps_the_prior_shape_with_one_point() {
    // A `--save-result` file "measured" by the simulator at concurrency 1, with a known slowdown.
    let dir = scratch().join("offline");
    let scen = root().join("scenarios/rtx5090-qwen2.5-7b-vllm.json");
    let out = profile_from_slowed_run(scen.to_str().unwrap(), &dir);
    let slow: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("result.json")).unwrap()).unwrap();
    let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(p["format"], "servesim-profile");
    assert_eq!(p["coefficient_sources"]["prefill_token_us"], "data");
    // The fit searches the directions the data determine, and the ingress has a small part in
    // the prefill's: it moved (by about 1%), and the profile says so.
    assert_eq!(p["coefficient_sources"]["request_ingress_us"], "partly data");
    let ingress = p["identifiability"].as_array().unwrap().iter().find(|i| i["coefficient"] == "request_ingress_us");
    let why = ingress.unwrap()["why"].as_str().unwrap();
    assert!(why.contains("the fit moved it") && why.contains("partly data"), "{why}");
    assert!(p["note"].as_str().unwrap().contains("fitted direction"), "{}", p["note"]);
    // A coefficient labelled "prior" is the prior's value (within 1%); one the fit moved along a
    // direction the data determine says so ("partly data"), as README promises.
    for (k, src) in p["coefficient_sources"].as_object().unwrap() {
        let moved = (p["coefficients"][k].as_f64().unwrap() / p["prior"][k].as_f64().unwrap()).ln().abs();
        match src.as_str().unwrap() {
            "prior" => assert!(moved <= 0.01, "{k} labelled prior moved {moved} in ln"),
            "partly data" => assert!(moved > 0.01, "{k} labelled partly data moved {moved} in ln"),
            "data" => {}
            other => panic!("{k}: unknown source {other}"),
        }
    }
    // The medians and p99s the file gives beside its means are named as set aside, not dropped unsaid.
    let aside = p["traps"].as_array().unwrap().iter().find(|t| t["kind"] == "statistic_set_aside");
    let aside = aside.expect("a statistic_set_aside trap");
    assert_eq!(aside["action"], "excluded");
    let names: Vec<&str> = aside["metrics"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    assert!(names.contains(&"median_ttft_ms") && names.contains(&"p99_tpot_ms"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("mean_")), "{names:?}");
    // Each coefficient says whether the data determined it, and why; each has an interval.
    let ids = p["identifiability"].as_array().unwrap();
    assert_eq!(ids.len(), 8);
    assert!(ids.iter().all(|i| i["why"].as_str().is_some_and(|w| !w.is_empty())));
    assert!(p["uncertainty"]["intervals"]["prefill_token_us"]["p05"].as_f64().unwrap() > 0.0);
    // With the profile, the simulator moves most of the way to the point it was fitted on: a
    // published point carries the model's discrepancy at a point (the corpus' within-group
    // spread) as noise, so the fit is pooled toward the prior, not forced through the point;
    // the point lies inside the 90% interval.
    let fitted = stdout_json(&run_cli(&[
        "simulate",
        scen.to_str().unwrap(),
        "--json",
        "--set",
        &format!("cost.profile={}", out.display()),
    ]));
    let plain = stdout_json(&run_cli(&["simulate", scen.to_str().unwrap(), "--json"]));
    for k in ["mean_ttft_ms", "mean_tpot_ms"] {
        let (m, q, u) = (slow[k].as_f64().unwrap(), fitted[k].as_f64().unwrap(), plain[k].as_f64().unwrap());
        assert!((u - m).abs() / m > 0.1, "{k}: the slowdown moves it ({u} vs {m})");
        assert!((q - m).abs() < 0.5 * (u - m).abs(), "{k}: calibrated {q}, uncalibrated {u}, measured {m}");
        // A profile with an uncertainty block puts a 90% interval on every prediction.
        let i = &fitted["uncertainty"][k];
        assert!(i["p05"].as_f64().unwrap() <= q && q <= i["p95"].as_f64().unwrap(), "{k}: {i}");
        assert!(i["p05"].as_f64().unwrap() <= m && m <= i["p95"].as_f64().unwrap(), "{k}: {m} outside {i}");
    }
    assert!(fitted["uncertainty"]["source"].as_str().unwrap().contains("ensemble"));
    // Without a profile, no interval unless asked; asked, it comes from the validation corpus.
    assert!(plain.get("uncertainty").is_none());
    let asked = stdout_json(&run_cli(&["simulate", scen.to_str().unwrap(), "--json", "--uncertainty"]));
    assert!(asked["uncertainty"]["source"].as_str().unwrap().starts_with("uncalibrated"), "{}", asked["uncertainty"]);
    // A source that publishes throughput and p99s only is read and fitted on what it has.
    let p99_only = serde_json::json!({
        "output_throughput": slow["output_throughput"], "p99_ttft_ms": slow["p99_ttft_ms"], "p99_tpot_ms": slow["p99_tpot_ms"],
    });
    let f2 = dir.join("p99-only.json");
    std::fs::write(&f2, p99_only.to_string()).unwrap();
    let o = calibrate_from_results(&f2, scen.to_str().unwrap(), &out, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("percentile_for_mean"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn offline_calibration_reads_sglang_bench_serving_jsonl() {
    // sglang.bench_serving appends one JSON object per run, with its own key names.
    let dir = scratch().join("sgl-jsonl");
    std::fs::create_dir_all(&dir).unwrap();
    let scen = root().join("scenarios/rtx5090-qwen2.5-7b-sglang.json");
    let mut lines = String::new();
    for c in [1, 4] {
        let j = stdout_json(&run_cli(&[
            "simulate",
            scen.to_str().unwrap(),
            "--json",
            "--set",
            &format!("workload.max_concurrency={c}"),
            "--set",
            "workload.num_prompts=8",
        ]));
        // The uncalibrated model's own results, under SGLang's key names: the fit reproduces
        // every metric only if each key is read as its metric (a truth of another model's
        // shape, e.g. the linear prior, would leave residuals that depend on the GPU's tables).
        let line = serde_json::json!({
            "backend": "sglang", "max_concurrency": c, "request_rate": "inf", "completed": 8,
            "mean_ttft_ms": j["mean_ttft_ms"], "mean_tpot_ms": j["mean_tpot_ms"], "mean_itl_ms": j["mean_itl_ms"],
            "mean_e2e_latency_ms": j["mean_e2el_ms"], "output_throughput": j["output_throughput"],
        });
        lines.push_str(&format!("{line}\n"));
    }
    let f = dir.join("sglang.jsonl");
    std::fs::write(&f, lines).unwrap();
    let out = dir.join("profile.json");
    let o = calibrate_from_results(&f, scen.to_str().unwrap(), &out, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let pts = p["fit"]["points"].as_array().unwrap();
    assert_eq!(pts.len(), 2);
    assert!(pts[0]["measured"]["mean_e2el_ms"].as_f64().is_some(), "mean_e2e_latency_ms is read as E2EL");
    for pt in pts {
        for (k, r) in pt["relative_residual"].as_object().unwrap() {
            assert!(r.as_f64().unwrap().abs() < 0.05, "{k}: residual {r}");
        }
    }
    // A file that is not a result is a clear error.
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"hello\": 1}").unwrap();
    let o = calibrate_from_results(&bad, scen.to_str().unwrap(), &out, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("mean_ttft_ms"));
}

/// `calibrate --from-results`: the live calibration's flags are refused (they used to be read by
/// nothing), `--set` edits the scenario, an empty results file is named, a metric past a year
/// is refused; and `check --fit-on` must name a measured point.
#[test]
fn offline_calibration_refuses_what_it_cannot_use() {
    let dir = scratch().join("offline-flags");
    std::fs::create_dir_all(&dir).unwrap();
    let scen = root().join("scenarios/rtx5090-qwen2.5-7b-vllm.json");
    let scen = scen.to_str().unwrap();
    let j = stdout_json(&run_cli(&["simulate", scen, "--json", "--set", "workload.num_prompts=8"]));
    let good = dir.join("r.json");
    std::fs::write(
        &good,
        serde_json::json!({"max_concurrency": 1, "num_prompts": 8, "completed": 8, "request_rate": "inf",
            "mean_ttft_ms": j["mean_ttft_ms"], "mean_tpot_ms": j["mean_tpot_ms"], "output_throughput": j["output_throughput"]})
        .to_string(),
    )
    .unwrap();
    let out = dir.join("p.json");
    let err = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).to_string();
    let files = |fs: &[&std::path::Path]| {
        let mut a = vec!["calibrate", "--from-results"];
        a.extend(fs.iter().map(|f| f.to_str().unwrap()));
        a.extend(["--scenario", scen, "--out", out.to_str().unwrap()]);
        run_cli(&a)
    };
    let o = calibrate_from_results(&good, scen, &out, &["--hardware", "a100-80gb"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("--hardware") && err(&o).contains("live calibration"), "{}", err(&o));
    // The probe plan's flags have no probes to act on offline (accepted and ignored before 2026-12-04).
    for flag in [["--warmup-s", "5"], ["--repeat", "2"], ["--max-probe-concurrency", "4"]] {
        let o = calibrate_from_results(&good, scen, &out, &flag);
        assert_eq!(o.status.code(), Some(2), "{flag:?}: {}", err(&o));
        assert!(err(&o).contains(flag[0]) && err(&o).contains("live calibration"), "{}", err(&o));
    }
    let o = calibrate_from_results(&good, scen, &out, &["--set", "engine.max_num_seqs=0"]);
    assert_eq!(o.status.code(), Some(2), "--set is applied: {}", err(&o));
    assert!(err(&o).contains("engine.max_num_seqs"), "{}", err(&o));
    let o = files(&[&good, &good]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("given twice"), "{}", err(&o));
    // Under another spelling of its path too (it was fitted twice, its interval narrowed).
    let again = dir.join(".").join("r.json");
    let o = files(&[&good, &again]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("given twice"), "{}", err(&o));
    // The same point copied into a second file (until 2026-12-08 fitted twice across files,
    // refused only within one).
    let copy = dir.join("copy.json");
    std::fs::copy(&good, &copy).unwrap();
    let o = files(&[&good, &copy]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("copy.json#0: the same point as") && err(&o).contains("r.json#0"), "{}", err(&o));
    // A point measured on another deployment (here TP 2) cannot share the first one's fit: it
    // was simulated with the first's step costs and the profile named the first's deployment.
    let tp2 = dir.join("tp2.json");
    std::fs::write(
        &tp2,
        serde_json::json!({"max_concurrency": 1, "num_prompts": 8, "completed": 8, "request_rate": "inf",
        "mean_ttft_ms": 238.0, "mean_tpot_ms": 6.1, "output_throughput": 150.0})
        .to_string(),
    )
    .unwrap();
    let scen2 = dir.join("tp2-scenario.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(scen).unwrap()).unwrap();
    v["engine"]["tensor_parallel_size"] = 2.into();
    v["engine"].as_object_mut().unwrap().remove("kv_cache_tokens");
    std::fs::write(&scen2, v.to_string()).unwrap();
    let o = run_cli(&[
        "calibrate",
        "--from-results",
        good.to_str().unwrap(),
        tp2.to_str().unwrap(),
        "--scenario",
        scen,
        scen2.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("measured on another deployment") && err(&o).contains("tensor parallel size 1 / 2"),
        "{}",
        err(&o)
    );
    let o = calibrate_from_results(&good, scen, &out, &["--max-evals", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let empty = dir.join("empty.json");
    std::fs::write(&empty, "").unwrap();
    let o = files(&[&good, &empty]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("empty.json") && err(&o).contains("no result"), "{}", err(&o));
    let huge = dir.join("huge.json");
    std::fs::write(&huge, serde_json::json!({"max_concurrency": 1, "mean_ttft_ms": 1e300}).to_string()).unwrap();
    let o = calibrate_from_results(&huge, scen, &out, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("mean_ttft_ms") && err(&o).contains("a year"), "{}", err(&o));
    // Results the scenario cannot be (the calibration hunt of 2026-12-05), each refused naming
    // the field: outputs of another length, requests lost before vLLM 0.33 wrote `failed`, a
    // ramped rate, a replayed trace against a scenario without one, a fractional `failed`.
    for (name, extra, needle) in [
        (
            "out64.json",
            r#""total_output_tokens": 512, "completed": 8"#,
            "total_output_tokens: the result's outputs average 64",
        ),
        ("lost.json", r#""num_prompts": 8, "completed": 6"#, "completed: 2 requests of 8 failed"),
        ("ramp.json", r#""ramp_up_strategy": "linear", "ramp_up_start_rps": 0.1"#, "ramp_up_strategy: the run ramped"),
        ("trace.json", r#""request_rate": "trace""#, "request_rate: \"trace\": the result replayed a trace"),
        ("failed.json", r#""failed": 2.5"#, "failed: expected a whole number"),
        ("tpot0.json", r#""mean_tpot_ms": 0"#, "mean_tpot_ms: 0 with outputs of 512 tokens"),
    ] {
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&good).unwrap()).unwrap();
        let extra: serde_json::Value = serde_json::from_str(&format!("{{{extra}}}")).unwrap();
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        let f = dir.join(name);
        std::fs::write(&f, v.to_string()).unwrap();
        let o = calibrate_from_results(&f, scen, &out, &[]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", err(&o));
        assert!(err(&o).contains(needle), "{name}: {}", err(&o));
    }
    // Figures that cannot all be true are flagged and left out of the fit: a TTFT above the
    // E2EL it is part of, a throughput above what the clients can receive (Little's law).
    for (name, key, value, needle) in [
        ("ttft-above-e2el.json", "mean_ttft_ms", 1e6, "is longer than the mean E2EL"),
        ("above-little.json", "output_throughput", 1e4, "Little's law"),
        // And far below it, over a run of several waves (the calibration audit of 2026-12-06:
        // 450 tok/s where TPOT and E2EL implied 968 had fitted prefill 1.77x).
        (
            "below-little.json",
            "output_throughput",
            j["output_throughput"].as_f64().unwrap() / 3.0,
            "is under 1/1.6 of what 1 client(s) receive",
        ),
    ] {
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&good).unwrap()).unwrap();
        v["mean_e2el_ms"] = j["mean_e2el_ms"].clone();
        v[key] = value.into();
        let f = dir.join(name);
        std::fs::write(&f, v.to_string()).unwrap();
        let o = calibrate_from_results(&f, scen, &out, &[]);
        assert!(o.status.success(), "{name}: {}", err(&o));
        let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        let traps = p["traps"].to_string();
        assert!(traps.contains("inconsistent") && traps.contains(needle), "{name}: {traps}");
    }
    // A mean TTFT carrying a tail the simulator does not make (one request 40 times the rest's,
    // at concurrency 1): the median is fitted instead, and the fit stays at the truth (the
    // calibration audit of 2026-12-06: prefill had come out 1.4x, every TTFT 40% high).
    let full = stdout_json(&run_cli(&["simulate", scen, "--json", "--set", "workload.num_prompts=8"]));
    let med = full["median_ttft_ms"].as_f64().unwrap();
    let mut cold = full.clone();
    cold["mean_ttft_ms"] = (med + 39.0 * med / 8.0).into();
    cold["p99_ttft_ms"] = (40.0 * med).into();
    // (The slowest request is the cold one: a maximum below the p99 is refused since 2026-12-06.)
    cold["max_ttft_ms"] = (40.0 * med).into();
    let f = dir.join("cold-mean.json");
    std::fs::write(&f, cold.to_string()).unwrap();
    let o = calibrate_from_results(&f, scen, &out, &[]);
    assert!(o.status.success(), "{}", err(&o));
    let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let traps = p["traps"].to_string();
    assert!(traps.contains("median fitted instead"), "{traps}");
    let set = format!("cost.profile={}", out.display());
    let pred = stdout_json(&run_cli(&["simulate", scen, "--json", "--set", "workload.num_prompts=8", "--set", &set]));
    let (p_ttft, t_ttft) = (pred["mean_ttft_ms"].as_f64().unwrap(), full["mean_ttft_ms"].as_f64().unwrap());
    assert!((p_ttft / t_ttft - 1.0).abs() < 0.05, "predicted {p_ttft} against {t_ttft}");
    // A point no engine can produce leaves the fit unbounded: its profile is not written (one
    // was, whose ensemble every command then refused).
    let huge = dir.join("huge-throughput.json");
    std::fs::write(&huge, r#"{"max_concurrency": 1, "num_prompts": 8, "output_throughput": 1e8}"#).unwrap();
    let gone = dir.join("not-written.json");
    let o = calibrate_from_results(&huge, scen, &gone, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("no coefficient set fits it") && !gone.exists(), "{}", err(&o));
    // A concurrency and a request rate are not one scale: concurrency 1 and 0.9 req/s, both
    // the scenario's own predictions, raised two false `ordering` traps (0.9 "above" 1).
    let at_rate = stdout_json(&run_cli(&[
        "simulate",
        scen,
        "--json",
        "--set",
        "workload.max_concurrency=null",
        "--set",
        "workload.request_rate=0.9",
        "--set",
        "workload.num_prompts=16",
    ]));
    let keys = [
        "mean_ttft_ms",
        "mean_tpot_ms",
        "mean_e2el_ms",
        "output_throughput",
        "max_concurrency",
        "request_rate",
        "num_prompts",
        "completed",
        "total_input_tokens",
        "total_output_tokens",
        "burstiness",
    ];
    let line = |j: &serde_json::Value| {
        serde_json::Value::Object(keys.iter().map(|k| (k.to_string(), j[*k].clone())).collect()).to_string()
    };
    let mix = dir.join("mix.jsonl");
    std::fs::write(&mix, format!("{}\n{}\n", line(&j), line(&at_rate))).unwrap();
    let o = calibrate_from_results(&mix, scen, &out, &[]);
    assert!(o.status.success(), "{}", err(&o));
    let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(!p["traps"].to_string().contains("ordering"), "{}", p["traps"]);
    // A point without its token totals cannot be checked against the scenario's lengths: it is
    // fitted, and the run says so (an audit, 2026-12-07: a 1,024-token run was fitted silently
    // as the scenario's 4,096 once its totals were deleted).
    let bare = dir.join("bare.jsonl");
    let no_totals = |j: &serde_json::Value| {
        serde_json::Value::Object(
            keys.iter().filter(|k| !k.starts_with("total_")).map(|k| (k.to_string(), j[*k].clone())).collect(),
        )
        .to_string()
    };
    std::fs::write(&bare, format!("{}\n{}\n", no_totals(&j), line(&at_rate))).unwrap();
    let o = calibrate_from_results(&bare, scen, &out, &[]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        err(&o).contains("#0: no total_input_tokens") && err(&o).contains("#0: no total_output_tokens"),
        "{}",
        err(&o)
    );
    assert!(!err(&o).contains("#1: no total_"), "{}", err(&o));
    // A profile whose prior was edited a thousandfold away from its fit is refused where used.
    let o = calibrate_from_results(&good, scen, &out, &[]);
    assert!(o.status.success(), "{}", err(&o));
    let mut p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    p["prior"]["step_us"] = 1e-3.into();
    let edited = dir.join("edited.json");
    std::fs::write(&edited, p.to_string()).unwrap();
    let o = run_cli(&[
        "simulate",
        scen,
        "--set",
        &format!("cost.profile={}", edited.display()),
        "--set",
        "workload.num_prompts=2",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("prior.step_us: 0.001 against the fitted"), "{}", err(&o));
    let o = run_cli(&["check", "--fit-on", "7", "--concurrency", "1,2", "--hardware", "h100-80gb"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("--fit-on 7"), "{}", err(&o));
}

/// The physical floor of a TTFT is of the part of the prompt the scenario's prefix cache cannot
/// hold: a shared 4,096-token prefix with 16-token suffixes has a TTFT of about 10 ms, the
/// scenario's own prediction, which was flagged against the floor of a cold 4,112-token prefill
/// (62.5 ms) and excluded with its E2EL and throughput (the calibration hunt of 2026-12-05).
#[test]
fn a_shared_prefix_ttft_is_not_below_the_floor() {
    let dir = scratch().join("floor");
    std::fs::create_dir_all(&dir).unwrap();
    let scen = root().join("scenarios/shared-prefix-llama3.1-8b-h100-vllm.json");
    let scen = scen.to_str().unwrap();
    let sets = [
        "workload.max_concurrency=1",
        "workload.prefix_repetition_prefix_len=4096",
        "workload.prefix_repetition_suffix_len=16",
        "workload.prefix_repetition_num_prefixes=1",
    ];
    let mut args = vec!["simulate", scen, "--json", "--set", "workload.num_prompts=32"];
    for s in &sets {
        args.extend(["--set", s]);
    }
    let j = stdout_json(&run_cli(&args));
    assert!(j["mean_ttft_ms"].as_f64().unwrap() < 20.0, "{}", j["mean_ttft_ms"]);
    let keys = [
        "mean_ttft_ms",
        "mean_tpot_ms",
        "mean_e2el_ms",
        "output_throughput",
        "max_concurrency",
        "request_rate",
        "num_prompts",
        "completed",
        "total_input_tokens",
        "total_output_tokens",
    ];
    let r = dir.join("r.json");
    std::fs::write(
        &r,
        serde_json::Value::Object(keys.iter().map(|k| (k.to_string(), j[*k].clone())).collect()).to_string(),
    )
    .unwrap();
    let out = dir.join("p.json");
    let mut args =
        vec!["calibrate", "--from-results", r.to_str().unwrap(), "--scenario", scen, "--out", out.to_str().unwrap()];
    for s in &sets {
        args.extend(["--set", s]);
    }
    let o = run_cli(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(!p["traps"].to_string().contains("below_physical_floor"), "{}", p["traps"]);
}

/// A fleet of identical replicas is calibrated as one deployment: each replica holds its own
/// copy of the step cost, and the fit (and a profile's sampled intervals) set only the first
/// one's, so the fit moved nothing (0 fitted directions, TPOT 23% off the data it was fitted on)
/// and the intervals collapsed to a hundredth of the single engine's (the audit of 2026-12-06).
/// A result stating another deployment than the scenario's (another replica count, GPU or
/// engine) is refused.
#[test]
fn a_fleet_is_calibrated_as_its_replicas_deployment() {
    let dir = scratch().join("fleet-calibration");
    std::fs::create_dir_all(&dir).unwrap();
    let scen = root().join("scenarios/kv-starved-qwen2.5-7b-a100-vllm.json");
    let scen = scen.to_str().unwrap();
    let fleet = dir.join("fleet.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(scen).unwrap()).unwrap();
    v["fleet"] = serde_json::json!({"count": 2});
    std::fs::write(&fleet, v.to_string()).unwrap();
    // The fleet's own runs at three loads, every latency 1.3 times slower: a slower engine.
    let mut files = Vec::new();
    for c in [2, 8, 32] {
        let mut j = stdout_json(&run_cli(&[
            "simulate",
            fleet.to_str().unwrap(),
            "--json",
            "--max-concurrency",
            &c.to_string(),
            "--num-prompts",
            &(4 * c).max(32).to_string(),
        ]));
        let o = j.as_object_mut().unwrap();
        for (k, x) in o.iter_mut() {
            let latency = ["ttft", "tpot", "itl", "e2el"].iter().any(|m| k.contains(m)) && !k.starts_with("std");
            if let (true, Some(f)) = (latency, x.as_f64()) {
                *x = (f * 1.3).into();
            }
            if let (true, Some(f)) = (k.ends_with("_throughput"), x.as_f64()) {
                *x = (f / 1.3).into();
            }
            // The same tokens over a run 1.3 times longer: a throughput is its counts over the
            // duration (`calib::results` checks it).
            if let (true, Some(f)) = (k == "duration", x.as_f64()) {
                *x = (f * 1.3).into();
            }
        }
        let f = dir.join(format!("c{c}.json"));
        std::fs::write(&f, serde_json::to_string(&j).unwrap()).unwrap();
        files.push(f);
    }
    let out = dir.join("profile.json");
    let mut a = vec!["calibrate", "--from-results"];
    a.extend(files.iter().map(|f| f.to_str().unwrap()));
    a.extend(["--scenario", fleet.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    let o = run_cli(&a);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A slower engine beats no roofline (the corrected cost is judged, not its references).
    assert!(!String::from_utf8_lossy(&o.stdout).contains("roofline floor"), "{}", String::from_utf8_lossy(&o.stdout));
    let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(
        p["roofline_check"].as_array().unwrap().iter().all(|r| r["implied_us"].is_number()),
        "{}",
        p["roofline_check"]
    );
    // The fitted points reproduce the slower TPOT (within 5%), which the prior misses by 23%.
    for pt in p["fit"]["points"].as_array().unwrap() {
        let r = pt["relative_residual"]["mean_tpot_ms"].as_f64().unwrap();
        assert!(r.abs() < 0.05, "{pt}");
    }
    // The profile's intervals on a fleet of one are the single engine's.
    let set = format!("cost.profile={}", out.display());
    let interval = |extra: &[&str]| {
        let mut a = vec!["simulate", scen, "--json", "--set", &set, "--max-concurrency", "8", "--num-prompts", "32"];
        a.extend_from_slice(extra);
        let j = stdout_json(&run_cli(&a));
        (j["mean_tpot_ms"].clone(), j["uncertainty"]["mean_tpot_ms"].clone())
    };
    let one = interval(&[]);
    assert!(one.1["p95"].as_f64().unwrap() > one.1["p05"].as_f64().unwrap() * 1.02, "{one:?}");
    assert_eq!(interval(&["--set", "fleet.count=1"]), one);
    // The two-replica results against the one-engine scenario: another deployment.
    let mut a = vec!["calibrate", "--from-results"];
    a.extend(files.iter().map(|f| f.to_str().unwrap()));
    a.extend(["--scenario", scen, "--out", out.to_str().unwrap()]);
    let o = run_cli(&a);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("fleet.num_replicas: 2 (the scenario: 1)"), "{err}");
    let o = run_cli(&[
        "calibrate",
        "--from-results",
        files[0].to_str().unwrap(),
        "--scenario",
        fleet.to_str().unwrap(),
        "--set",
        "hardware=h100-80gb",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("hardware: a100-80gb (the scenario: h100-80gb)"), "{err}");
}

/// A finite-rate point whose throughput the rate cannot give is another load's run: every
/// figure is excluded, and a fit left with nothing is an error that says why (the robustness
/// audit of 2026-12-07: a concurrency-8 burst labelled 5 req/s, 19.2 req/s over 100 prompts, was
/// fitted with no flag into a prefill cost 2.9× the true one, TTFT predictions +133%). Labelled
/// with a rate that can give it, the point is used.
#[test]
fn a_rate_the_throughput_exceeds_is_flagged_and_excluded() {
    let dir = scratch().join("rate-inconsistent");
    std::fs::create_dir_all(&dir).unwrap();
    let scen = "scenarios/serve-small-vllm.json";
    let o = run_cli(&["simulate", scen, "--set", "workload.num_prompts=100", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let keys = ["mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "output_throughput", "max_concurrency", "num_prompts"];
    let fit = |rate: f64| {
        let mut r: serde_json::Map<String, serde_json::Value> =
            keys.iter().map(|k| (k.to_string(), j[*k].clone())).collect();
        r.insert("request_rate".into(), rate.into());
        let path = dir.join(format!("r{rate}.json"));
        std::fs::write(&path, serde_json::Value::Object(r).to_string()).unwrap();
        let out = dir.join(format!("p{rate}.json"));
        run_cli(&[
            "calibrate",
            "--from-results",
            path.to_str().unwrap(),
            "--scenario",
            scen,
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let o = fit(5.0);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no value left to fit")
            && err.contains("above what a client sending 100 prompts at 5 req/s (burstiness 1) can complete"),
        "{err}"
    );
    // 19.2 requests/s is what 100 prompts at 40 req/s can give: used.
    let o = fit(40.0);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("can complete"));
}
