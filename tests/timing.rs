//! Timing-sensitive tests of `servesim serve`, in a test binary of their own:
//! cargo runs test binaries one after the other, so nothing else competes
//! for the two cores while a server's steps sleep on the wall clock, and a
//! mutex keeps the two tests here from overlapping.

#[path = "common.rs"]
#[allow(dead_code)]
mod common;

use common::*;

fn num(j: &serde_json::Value, k: &str) -> f64 {
    j[k].as_f64().unwrap_or_else(|| panic!("no {k}"))
}

static TIMING: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_client_against_serve_measures_what_simulate_predicts() {
    let _serial = TIMING.lock().unwrap_or_else(|e| e.into_inner());
    let s = start_server("scenarios/serve-small-vllm.json", &[]);
    // Open-loop Poisson arrivals, the same send times on both sides. (In a closed loop the
    // client's own HTTP delay puts every arrival at the same phase of the engine's steps,
    // which moves TTFT by a fraction of a step; random arrivals average that out.)
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("scenarios/serve-small-vllm.json")).unwrap())
            .unwrap();
    let w = v["workload"].as_object_mut().unwrap();
    w.remove("max_concurrency");
    w.insert("request_rate".into(), 16.into());
    w.insert("num_prompts".into(), 96.into());
    w.insert("initial_test_request".into(), false.into());
    let scen = write_temp("serve-open-loop.json", &v.to_string());
    let scen = scen.to_str().unwrap();
    let measured =
        stdout_json(&run_cli(&["bench", "--base-url", &s.url, "--scenario", scen, "--vocab-size", "32000", "--json"]));
    let predicted = stdout_json(&run_cli(&["simulate", scen, "--json"]));
    assert_eq!(measured["completed"], 96);
    for k in ["output_throughput", "mean_tpot_ms", "mean_e2el_ms"] {
        let (m, p) = (num(&measured, k), num(&predicted, k));
        assert!((m - p).abs() / p < 0.05, "{k}: measured {m}, simulated {p}");
    }
    // TTFT also carries the real HTTP path on loopback (request, parsing, the first chunk;
    // a few ms in a debug build), which the scenario's 1.5 ms ingress does not model.
    let (m, p) = (num(&measured, "mean_ttft_ms"), num(&predicted, "mean_ttft_ms"));
    assert!((m - p).abs() < (0.05 * p).max(4.0), "mean_ttft_ms: measured {m}, simulated {p}");
}

#[test]
fn calibrating_against_serve_recovers_the_scenarios_coefficients_and_check_passes() {
    let _serial = TIMING.lock().unwrap_or_else(|e| e.into_inner());
    // At 0.35 of its speed the engine's true coefficients are the scenario's / 0.35; the real
    // HTTP path of a test (debug) build, part of which grows with the prompt's JSON, is then
    // that much smaller next to them (at 0.5, fitted/true reached 1.04 on prefill and decode).
    let time_scale = 0.35;
    let s = start_server("scenarios/serve-small-vllm.json", &["--time-scale", "0.35"]);
    let dir = std::env::temp_dir().join(format!("servesim-serve-cal-{}", std::process::id()));
    let profile = dir.join("profile.json");
    let derive = [
        "--model-card",
        "qwen2.5-7b-instruct",
        "--hardware",
        "a100-80gb",
        "--set",
        "engine.max_num_seqs=32",
        "--set",
        "engine.max_num_batched_tokens=2048",
    ];
    let mut args = vec![
        "calibrate",
        "--base-url",
        &s.url,
        "--engine",
        "vllm",
        "--out",
        profile.to_str().unwrap(),
        "--result-dir",
        dir.to_str().unwrap(),
        "--max-probe-concurrency",
        "32",
        // The emulator has no start-up slowness; a short warm-up still exercises the path.
        "--warmup-s",
        "2",
    ];
    args.extend(derive);
    let o = run_cli(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&profile).unwrap()).unwrap();
    let scen: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("scenarios/serve-small-vllm.json")).unwrap())
            .unwrap();
    let fitted = |k: &str| p["coefficients"][k].as_f64().unwrap();
    let truth = |k: &str| scen["cost"]["coefficients"][k].as_f64().unwrap() / time_scale;
    // The engine's coefficients come back within 5%. Probes cannot tell per_seq_us from
    // decode_token_us (every decoding sequence has one token): calibration keeps per_seq_us
    // at the prior and fits their sum through decode_token_us, so that sum is what is judged.
    for k in ["step_us", "prefill_token_us", "decode_token_us"] {
        let (f, t) = match k {
            "decode_token_us" => (fitted(k) + fitted("per_seq_us"), truth(k) + truth("per_seq_us")),
            _ => (fitted(k), truth(k)),
        };
        eprintln!("{k}: fitted/true {:.4}", f / t);
        assert!((f - t).abs() / t < 0.05, "{k}: fitted {f}, the engine's {t}");
    }
    // Ingress as measured includes the real HTTP path on loopback (connection, JSON, both
    // processes' scheduling) on top of the modelled one: it can only come out larger.
    let ingress = fitted("request_ingress_us");
    assert!(ingress >= 0.95 * truth("request_ingress_us") && ingress < 20_000.0, "request_ingress_us fitted {ingress}");
    let mut args = vec![
        "check",
        "--base-url",
        &s.url,
        "--engine",
        "vllm",
        "--profile",
        profile.to_str().unwrap(),
        "--random-input-len",
        "256",
        "--random-output-len",
        "32",
        "--ignore-eos",
        "--concurrency",
        "1,4,16,48",
        "--num-prompts-per-point",
        "6,12,32,96",
        "--result-dir",
        dir.to_str().unwrap(),
        "--json",
    ];
    args.extend(derive);
    let o = run_cli(&args);
    let r: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(r["verdict"]["pass"], true, "{}", serde_json::to_string_pretty(&r["verdict"]).unwrap());
    // The speed reference: measured between the probes and before every point; the emulator
    // runs at one speed, so it must not have moved.
    let refs = p["speed_reference"]["mean_itl_ms"].as_array().expect("the profile's speed reference");
    assert_eq!(refs.len(), p["fit"]["points"].as_array().unwrap().len());
    eprintln!("speed reference while calibrating: {refs:?}");
    for pt in r["points"].as_array().unwrap() {
        let d = pt["speed_reference"]["vs_calibration"].as_f64().expect("a speed reference before each point");
        assert!(d.abs() < 0.05, "the speed reference moved {d} at {}", pt["max_concurrency"]);
    }
    assert_eq!(r["verdict"]["speed_reference"]["engine_held_still"], true);
    assert_eq!(o.status.code(), Some(0));
}
