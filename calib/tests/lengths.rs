//! A result point whose E2EL, TTFT and TPOT imply output lengths other than the scenario's
//! (a stand-in dataset, EOS, a cap): its E2EL and throughput are not the step costs' to fit
//! (`calib::traps::flag_lengths`). Issue #13, "traps in the data, flagged before the fit".

mod common;

use calib::fit::{predict, FitPoint, TARGETS};
use calib::identify::linear_prior;
use calib::traps::{flag_lengths, LENGTH_TOLERANCE};
use sim::config::SimSpec;

fn spec() -> SimSpec {
    common::spec(128)
}

fn idx(t: &str) -> usize {
    TARGETS.iter().position(|x| x.key() == t).unwrap()
}

/// The simulated point's mean TTFT, TPOT and throughput, and an E2EL whose implied output
/// length is `scale` times the scenario's.
fn point(scale: f64) -> FitPoint {
    let s = spec();
    let full = predict(&s, &linear_prior(&s.cost));
    let mut measured = vec![None; TARGETS.len()];
    let (ttft, tpot, e2el) =
        (full[idx("mean_ttft_ms")].unwrap(), full[idx("mean_tpot_ms")].unwrap(), full[idx("mean_e2el_ms")].unwrap());
    let len = (e2el - ttft) / tpot + 1.0;
    measured[idx("mean_ttft_ms")] = Some(ttft);
    measured[idx("mean_tpot_ms")] = Some(tpot);
    measured[idx("mean_e2el_ms")] = Some(ttft + (scale * len - 1.0) * tpot);
    measured[idx("output_throughput")] = full[idx("output_throughput")];
    FitPoint { name: "r.json#0".into(), spec: s, measured, replay: None }
}

#[test]
fn lengths_that_match_are_left_alone_and_lengths_that_do_not_take_e2el_and_throughput_out() {
    let prior = linear_prior(&spec().cost);
    // The scenario's own lengths, and lengths within the tolerance: nothing flagged.
    for scale in [1.0, 0.9, 1.1] {
        let mut pts = vec![point(scale)];
        assert!(flag_lengths(&mut pts, &prior).is_empty(), "scale {scale}");
        assert!(pts[0].measured[idx("mean_e2el_ms")].is_some());
    }
    // 0.6 of the scenario's lengths (a ShareGPT median against a stand-in's mean): flagged.
    const { assert!(0.6 < 1.0 / LENGTH_TOLERANCE) };
    let mut pts = vec![point(0.6)];
    let traps = flag_lengths(&mut pts, &prior);
    assert_eq!(traps.len(), 1, "{traps:?}");
    assert_eq!(traps[0].kind, "output_lengths");
    assert_eq!(traps[0].action, "excluded");
    assert!(traps[0].why.contains("-40%"), "{}", traps[0].why);
    let m = &pts[0].measured;
    assert!(m[idx("mean_e2el_ms")].is_none() && m[idx("output_throughput")].is_none());
    assert!(m[idx("mean_ttft_ms")].is_some() && m[idx("mean_tpot_ms")].is_some());
}

/// Through `calibrate --from-results`: the profile names the trap, and the fit leaves the
/// excluded values out.
#[test]
fn the_profile_reports_the_length_trap() {
    let profile =
        calib::procedure::calibrate_from_results(&[point(0.6)], 200, vec!["r.json".into()], "s.json".into()).unwrap();
    let v = serde_json::to_value(&profile).unwrap();
    let traps = v["traps"].as_array().expect("traps");
    assert!(traps.iter().any(|t| t["kind"] == "output_lengths"), "{traps:?}");
}
