//! A published value is rounded to the digits it is printed with: `calibrate --from-results`
//! gives each value at least that rounding as noise (`calib::fit::published_noise`), and the
//! noise reaches the fit (issue #13: a TPOT published as `8` ms is 7.5–8.5 ms, not 8 ± 1%).

mod common;

use calib::fit::{predict, published_noise, rounding_half_unit, FitPoint, TARGETS, TARGET_NOISE};
use calib::identify::{fit_with_prior_noise, linear_prior};
use calib::procedure::calibrate_from_results;
use sim::config::SimSpec;
use sim::cost::{CoefficientSource, CostCoefficients};

fn spec() -> SimSpec {
    common::spec(64)
}

fn idx(t: &str) -> usize {
    TARGETS.iter().position(|x| x.key() == t).unwrap()
}

/// A result point as a source publishes it: mean TTFT to 0.1 ms, mean TPOT in whole ms,
/// throughput as the program wrote it; measured on an engine whose decode is 10% slower.
fn published_point() -> FitPoint {
    let s = spec();
    let mut truth = linear_prior(&s.cost);
    let base = truth.coefficients();
    let mut o = CostCoefficients::default();
    o.set("step_us", base.get("step_us").unwrap() * 1.1);
    truth.overlay(&o, CoefficientSource::Scenario);
    let full = predict(&s, &truth);
    let mut measured = vec![None; TARGETS.len()];
    measured[idx("mean_ttft_ms")] = full[idx("mean_ttft_ms")].map(|v| (v * 10.0).round() / 10.0);
    measured[idx("mean_tpot_ms")] = full[idx("mean_tpot_ms")].map(f64::round);
    measured[idx("output_throughput")] = full[idx("output_throughput")];
    FitPoint { name: "r.json#0".into(), spec: s, measured, replay: None }
}

/// The profile says per point what noise each value was given: an integer TPOT at least its
/// half-unit (0.5 / value), the others TARGET_NOISE where their rounding is smaller.
#[test]
fn an_integer_published_value_is_fitted_with_at_least_its_half_unit() {
    let p = published_point();
    let tpot = p.measured[idx("mean_tpot_ms")].unwrap();
    assert_eq!(tpot.fract(), 0.0);
    let profile = calibrate_from_results(&[p], 200, vec!["r.json".into()], "s.json".into()).unwrap();
    let v = serde_json::to_value(&profile).unwrap();
    let noise = &v["fit"]["points"][0]["target_noise"];
    let n = noise["mean_tpot_ms"].as_f64().unwrap();
    assert!(n >= 0.5 / tpot && n >= TARGET_NOISE[idx("mean_tpot_ms")], "{noise}");
    // The rounding and the model's discrepancy at a point, in quadrature.
    let d = |k: &str| calib::fit::Discrepancy::corpus().at(idx(k));
    assert!(d("mean_tpot_ms") > 0.0 && d("output_throughput") > 0.0);
    assert!((n - (0.5 / tpot).max(0.01).hypot(d("mean_tpot_ms"))).abs() < 1e-12, "{noise}");
    let thr = noise["output_throughput"].as_f64().unwrap();
    assert!((thr - TARGET_NOISE[idx("output_throughput")].hypot(d("output_throughput"))).abs() < 1e-12, "{noise}");
    // Only the fitted values are listed, and the base table is unchanged.
    assert_eq!(noise.as_object().unwrap().len(), 3, "{noise}");
    assert_eq!(v["fit"]["target_noise"]["mean_tpot_ms"].as_f64(), Some(TARGET_NOISE[idx("mean_tpot_ms")]));
    assert!(v["note"].as_str().unwrap().contains("mean_tpot_ms"), "{}", v["note"]);
}

/// The noise reaches the identifiability and the covariance: the same point fitted with its
/// rounding as the TPOT's noise leaves more of the step constant's prior variance than with 1%.
#[test]
fn the_rounding_noise_reaches_identifiability_and_the_covariance() {
    let p = published_point();
    let tpot = p.measured[idx("mean_tpot_ms")].unwrap();
    assert!(rounding_half_unit(tpot) / tpot > 2.0 * TARGET_NOISE[idx("mean_tpot_ms")], "{tpot}");
    let prior = linear_prior(&p.spec.cost);
    let points = vec![p];
    let flat: Vec<Vec<f64>> = vec![TARGET_NOISE.to_vec()];
    let rounded: Vec<Vec<f64>> = points.iter().map(|p| published_noise(&p.measured)).collect();
    let a = fit_with_prior_noise(&points, &flat, &prior, 6);
    let b = fit_with_prior_noise(&points, &rounded, &prior, 6);
    let share = |f: &calib::identify::PriorFit, c: &str| {
        f.identifiability.iter().find(|i| i.coefficient == c).unwrap().data_share
    };
    let k = sim::cost::COEFFICIENT_NAMES.iter().position(|c| *c == "step_us").unwrap();
    eprintln!(
        "step_us: share {:.3} → {:.3}, log var {:.4} → {:.4}",
        share(&a, "step_us"),
        share(&b, "step_us"),
        a.log_covariance[k][k],
        b.log_covariance[k][k]
    );
    assert!(share(&b, "step_us") < share(&a, "step_us"));
    assert!(b.log_covariance[k][k] > a.log_covariance[k][k]);
    // The ensemble's members spread wider along the step constant.
    let spread = |f: &calib::identify::PriorFit| {
        let xs: Vec<f64> = f.ensemble.iter().map(|m| m[k]).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64).sqrt()
    };
    assert!(spread(&b) > spread(&a), "{} {}", spread(&a), spread(&b));
}
