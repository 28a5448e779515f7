//! Issue #13's promise, held by CI: on the published sets in the repository, calibrating on each
//! set's lowest load point and predicting the others (`calib/held_out.py`) is judged against the
//! committed `validation/held_out_baseline.json`, as `servesim validate` is against
//! `validation/baseline.json`. A group's calibrated median |error| may not grow by more than a
//! point, a group the calibration did not make worse may not become worse, every group of the
//! baseline is still judged, and the calibrated 90% intervals hold at least 80% of the held-out
//! published values (#13's "done when"). A change that improves them rewrites the baseline:
//! `HELD_OUT_JSON=validation/held_out_baseline.json python3 calib/held_out.py target/release/servesim`.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

/// Points a group's calibrated median |error| may grow by before the gate fails (as `validate
/// --tolerance 1`).
const TOLERANCE_POINTS: f64 = 1.0;

fn groups(v: &Value) -> BTreeMap<String, Value> {
    v["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| (g["group"].as_str().unwrap().to_string(), g.clone()))
        .collect()
}

#[test]
fn calibrating_on_the_lowest_load_is_no_worse_than_the_baseline() {
    let out_path = scratch().join("held-out.json");
    let mut cmd = Command::new("python3");
    cmd.current_dir(root())
        .arg("calib/held_out.py")
        .arg(env!("CARGO_BIN_EXE_servesim"))
        .env("HELD_OUT_JSON", &out_path)
        .env_remove("HELD_OUT_ONLY")
        .env_remove("HELD_OUT_POOLED_BAND")
        .env_remove("HELD_OUT_CORPUS_DISCREPANCY")
        .env_remove("HELD_OUT_DISCREPANCY_SCALE");
    let out = run_bounded(cmd, Duration::from_secs(1800));
    assert!(out.status.success(), "calib/held_out.py failed: {}", String::from_utf8_lossy(&out.stderr));
    let now: Value = serde_json::from_str(&std::fs::read_to_string(&out_path).expect("HELD_OUT_JSON written"))
        .expect("HELD_OUT_JSON is JSON");
    let _ = std::fs::remove_file(&out_path);
    let base: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("validation/held_out_baseline.json")).unwrap())
            .expect("validation/held_out_baseline.json is JSON");

    let not_judged = now["not_judged"].as_array().unwrap();
    assert!(not_judged.is_empty(), "groups that could not be judged: {not_judged:#?}");
    let (now_g, base_g) = (groups(&now), groups(&base));
    let missing: Vec<&String> = base_g.keys().filter(|k| !now_g.contains_key(*k)).collect();
    assert!(missing.is_empty(), "groups of the baseline no longer judged: {missing:?}");
    let mut failures = Vec::new();
    for (k, b) in &base_g {
        let n = &now_g[k];
        let (cal, was) = (
            n["calibrated_median_abs_error_pct"].as_f64().unwrap(),
            b["calibrated_median_abs_error_pct"].as_f64().unwrap(),
        );
        if cal > was + TOLERANCE_POINTS {
            failures.push(format!("{k}: calibrated median |error| {was}% -> {cal}%"));
        }
        if n["verdict"] == "worse" && b["verdict"] != "worse" {
            failures.push(format!(
                "{k}: calibrating now makes it worse ({}% uncalibrated, {cal}% calibrated; the baseline: {})",
                n["uncalibrated_median_abs_error_pct"], b["verdict"]
            ));
        }
    }
    assert!(failures.is_empty(), "held-out calibration worse than validation/held_out_baseline.json: {failures:#?}");
    let (inside, values) = (now["calibrated_inside"].as_u64().unwrap(), now["values"].as_u64().unwrap());
    assert!(
        values > 0 && inside * 5 >= values * 4,
        "calibrated 90% intervals hold {inside} of {values} held-out values (< 80%)"
    );
}
