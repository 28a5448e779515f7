//! `--goodput` (`vllm bench serve --goodput KEY:VALUE ...`): `request_goodput` is the completed
//! requests that meet every objective over the benchmark's duration, decided per request as
//! vLLM's `calculate_metrics` decides it; `null` without the flag. `simulate --json` has no
//! per-request lists, so its run's requests are read from the same run through the library (the
//! same scenario resolved and simulated: the byte-identical contract), checked to be the binary's
//! run by its completed count and mean TTFT. `bench`'s are its own `--save-result` lists.

use serde_json::Value;
use sim::simulation::RunOptions;

use crate::common::*;

/// The default scenario at concurrency 8 with lengths that vary, so that TTFT and TPOT vary.
fn scenario() -> Value {
    let text = std::fs::read_to_string(root().join("scenarios/rtx5090-qwen2.5-7b-vllm.json")).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    let w = v["workload"].as_object_mut().unwrap();
    w.insert("num_prompts".into(), 40.into());
    w.insert("max_concurrency".into(), 8.into());
    w.insert("random_range_ratio".into(), 0.5.into());
    v
}

/// Each completed request's (TTFT s, E2EL s, output tokens), as the client times them.
fn per_request(v: &Value) -> Vec<(f64, f64, u32)> {
    let spec = spec(v.clone());
    let out = sim::simulate(&spec, RunOptions::default());
    out.run
        .records
        .iter()
        .filter(|r| r.completed)
        .map(|r| {
            let first = out.run.first_token_ns(r).unwrap() - r.dispatch_ns;
            let last = out.run.last_token_ns(r).unwrap() - r.dispatch_ns;
            (first as f64 / 1e9, last as f64 / 1e9, r.output_len)
        })
        .collect()
}

/// vLLM's rule, written out again: a request is good when `slo_ms / 1000 >= value_s` for every
/// objective given, its TPOT `(latency - ttft) / (output - 1)`, 0 for one token.
fn good(reqs: &[(f64, f64, u32)], ttft: Option<f64>, tpot: Option<f64>, e2el: Option<f64>) -> u64 {
    reqs.iter()
        .filter(|&&(t, e, n)| {
            let tp = if n > 1 { (e - t) / f64::from(n - 1) } else { 0.0 };
            [(ttft, t), (tpot, tp), (e2el, e)].iter().all(|&(slo, x)| slo.is_none_or(|s| s / 1000.0 >= x))
        })
        .count() as u64
}

/// `j`'s `request_goodput` is `good` requests over its `duration`: the count exactly, the rate
/// to the last bits (serde_json reads a float back to within an ulp, so `good / duration` of the
/// value read may differ from the binary's in the last bit).
pub fn assert_goodput(j: &Value, good: u64, what: &str) {
    let (g, d) = (j["request_goodput"].as_f64().unwrap(), j["duration"].as_f64().unwrap());
    assert_eq!((g * d).round(), good as f64, "{what}: {g} req/s over {d} s is not {good} requests");
    assert!((g - good as f64 / d).abs() <= 1e-12 * g.abs(), "{what}: {g} against {good} / {d}");
}

#[test]
fn simulate_goodput_is_the_good_requests_over_the_duration() {
    let v = scenario();
    let path = write_temp("goodput-scenario.json", &v.to_string());
    let path = path.to_str().unwrap();
    let reqs = per_request(&v);
    let plain = stdout_json(&run_cli(&["simulate", path, "--json"]));
    assert!(plain["request_goodput"].is_null(), "no --goodput: null, as vLLM writes it");
    // The library's run is the binary's.
    assert_eq!(plain["completed"].as_u64(), Some(reqs.len() as u64));
    let mean_ttft_ms = reqs.iter().map(|r| r.0 * 1000.0).sum::<f64>() / reqs.len() as f64;
    assert!((plain["mean_ttft_ms"].as_f64().unwrap() - mean_ttft_ms).abs() < 1e-6 * mean_ttft_ms);
    let duration = plain["duration"].as_f64().unwrap();

    // Objectives at one request's own TTFT (met at equality) and at the median TPOT, with the
    // SLOs written as the shortest decimal of each value in ms.
    let mut ttfts: Vec<f64> = reqs.iter().map(|r| r.0 * 1000.0).collect();
    ttfts.sort_by(f64::total_cmp);
    let mut tpots: Vec<f64> =
        reqs.iter().filter(|r| r.2 > 1).map(|r| (r.1 - r.0) / f64::from(r.2 - 1) * 1000.0).collect();
    tpots.sort_by(f64::total_cmp);
    let (ttft_slo, tpot_slo) = (ttfts[ttfts.len() / 2], tpots[tpots.len() / 2]);
    let cases: [(Vec<String>, Option<f64>, Option<f64>, Option<f64>); 4] = [
        (vec!["e2el:1e12".into()], None, None, Some(1e12)),
        (vec!["ttft:0".into(), "tpot:1e9".into()], Some(0.0), Some(1e9), None),
        (vec![format!("ttft:{ttft_slo}")], Some(ttft_slo), None, None),
        (vec![format!("ttft:{ttft_slo}"), format!("tpot:{tpot_slo}")], Some(ttft_slo), Some(tpot_slo), None),
    ];
    let mut counts = Vec::new();
    for (slos, ttft, tpot, e2el) in &cases {
        let mut args = vec!["simulate", path, "--json", "--goodput"];
        args.extend(slos.iter().map(String::as_str));
        let j = stdout_json(&run_cli(&args));
        let n = good(&reqs, *ttft, *tpot, *e2el);
        assert_goodput(&j, n, &format!("{slos:?}"));
        // Nothing else moves.
        let mut rest = j.clone();
        rest["request_goodput"] = Value::Null;
        assert_eq!(rest, plain, "{slos:?}");
        counts.push(n);
    }
    let completed = reqs.len() as u64;
    assert_eq!(counts[0], completed, "all: every completed request");
    assert_eq!(counts[1], 0, "none: every TTFT is above 0");
    assert!(counts[2] > 0 && counts[2] < completed, "some: {counts:?}");
    assert!(counts[3] < counts[2], "both objectives must hold: {counts:?}");

    // The text line, right after the request throughput, only with the flag.
    let text = |extra: &[&str]| {
        let mut args = vec!["simulate", path];
        args.extend_from_slice(extra);
        let o = run_cli(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    assert!(!text(&[]).contains("goodput"));
    let t = text(&["--goodput", "e2el:1e12"]);
    let want = format!(
        "Request throughput (req/s):              {:<10.2}\nRequest goodput (req/s):                 {:<10.2}\n",
        plain["request_throughput"].as_f64().unwrap(),
        completed as f64 / duration
    );
    assert!(t.contains(&want), "{t}");
}

#[test]
fn goodput_objectives_are_checked_as_vllm_checks_them() {
    for (args, want) in [
        (&["--goodput", "ttft"][..], "--goodput: invalid format found for service level objectives, \"ttft\""),
        (&["--goodput", "ttft:fast"], "\"fast\" is not a number"),
        (&["--goodput", "ttft:100", "itl:5"], "--goodput: invalid metric name found, \"itl\": 5: the service level objective name should be one of ttft, tpot, e2el"),
        (&["--goodput", "e2el:-1"], "--goodput: invalid value found, e2el: -1: the service level objective value should be non-negative"),
        (&["--goodput", "tpot:NaN"], "--goodput: invalid value found, tpot: NaN"),
        (&["--goodput", "ttft:1", "ttft:2"], "--goodput: ttft given twice"),
        // A scenario after the flag is read as one of its values, as vLLM's `nargs="+"` reads it.
        (&["--goodput", "ttft:1", "scenarios/rtx5090-qwen2.5-7b-vllm.json"], "the flag takes every value after it"),
    ] {
        for cmd in ["simulate", "explain"] {
            let mut a = vec![cmd];
            a.extend_from_slice(args);
            let o = run_cli(&a);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{a:?}: {err}");
            assert!(err.contains(want), "{a:?}: {err}");
        }
    }
    // `check` computes no goodput: refused before any server is asked, never ignored.
    let o = run_cli(&["check", "--base-url", "http://127.0.0.1:9", "--goodput", "ttft:100"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--goodput: check judges predicted metrics") && !err.contains("--base-url"), "{err}");
    // ...and its help does not offer it, while bench's does.
    let help = |cmd: &str| String::from_utf8_lossy(&run_cli(&[cmd, "--help"]).stdout).to_string();
    assert!(!help("check").contains("--goodput") && help("bench").contains("--goodput"));
}

#[test]
fn explain_reports_the_explained_runs_goodput() {
    let v = scenario();
    let path = write_temp("goodput-explain.json", &v.to_string());
    let path = path.to_str().unwrap();
    let j = stdout_json(&run_cli(&["explain", path, "--json", "--goodput", "e2el:1e12"]));
    let p = &j["point"];
    let thr = p["request_throughput"].as_f64().unwrap();
    assert_eq!(p["request_goodput"].as_f64(), Some(thr), "every completed request meets e2el:1e12");
    let j = stdout_json(&run_cli(&["explain", path, "--json"]));
    assert!(j["point"]["request_goodput"].is_null());
}
