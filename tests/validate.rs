//! `servesim validate` against the committed baseline (`validation/baseline.json`):
//! every published measurement in the repository runs uncalibrated, and no
//! group's median |error| may get worse than the baseline's by more than a
//! point. A change that improves a group rewrites the baseline with
//! `servesim validate --write-baseline validation/baseline.json`, so accuracy
//! can only ratchet.

use std::time::Duration;

use crate::common::*;

#[test]
fn no_group_is_worse_than_the_baseline() {
    let mut cmd = servesim();
    cmd.args(["validate", "--json", "--baseline", "validation/baseline.json", "--tolerance", "1"]);
    let out = run_bounded(cmd, Duration::from_secs(1800));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("validate --json: {e}\n{}", String::from_utf8_lossy(&out.stderr)));
    let failures = v["baseline_failures"].as_array().cloned().unwrap_or_default();
    assert!(failures.is_empty(), "groups worse than validation/baseline.json: {failures:#?}");
    assert!(out.status.success(), "validate failed: {}", String::from_utf8_lossy(&out.stderr));
    // Every row either ran or says why not.
    for r in v["rows"].as_array().unwrap() {
        assert!(r.get("metrics").is_some() || r["skipped"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
    }
    // The default scenario's published point is in the corpus and timed by the kernel fallback.
    let g =
        v["groups"].as_array().unwrap().iter().find(|g| g["group"].as_str().unwrap().starts_with("rtx5090_")).unwrap();
    assert!(g["cost_source"].as_str().unwrap().contains("scaled"), "{g}");
}

/// A tolerance that is not a finite number of points ≥ 0 would pass any regression (NaN, inf)
/// or fail every group (negative); a run in which no row could run judged nothing. Both exit
/// 2 with the reason, never 0 (the fuzzing of 2026-12-04).
#[test]
fn a_gate_that_cannot_judge_is_an_error() {
    for t in ["NaN", "inf", "-1"] {
        let out = servesim().args(["validate", "--only", "rtx5090", &format!("--tolerance={t}")]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "--tolerance {t}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--tolerance: expected a finite number"), "{t}");
    }
    let out = servesim().args(["validate", "--only", "rtx5090", "--set", "engine.max_num_seqs=0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing was judged") && err.contains("engine.max_num_seqs"), "{err}");
}
