//! How `check` judges: per point the relative error of each metric, per metric
//! the median absolute error over the points not used for fitting against its
//! target, the knee measured against predicted, and the speed reference's move.
//! **To change how a check judges a point, change this file.** The report's
//! JSON keys are a contract (`tests::check_report_keys` pins them).

use serde::Serialize;
use serde_json::Value;
use sim::report::{Metric, Metrics, PointReport};
use sim::sweep::{find_knee, KneePoint};

use crate::measure::{Point, RepeatedPoint};
use crate::named::Named;
use crate::plan::SPEED_REFERENCE_TOLERANCE;
use crate::server_info::ServerInfo;

/// The metrics `check` compares, with their targets (median relative error on points not used
/// for fitting); None: shown, not judged. Mean and p99 TTFT are judged, median TTFT is shown
/// only: in a closed loop a wave of requests splits across the engine's first steps (some get
/// the first prefill step, the rest the next), so TTFT is bimodal and its median jumps between
/// the modes on a shift of the split; the mean moves with the split smoothly.
pub const CHECK_METRICS: [(Metric, Option<f64>); 10] = [
    (Metric::OutputThroughput, Some(0.05)),
    (Metric::MeanTtftMs, Some(0.10)),
    (Metric::MedianTtftMs, None),
    (Metric::P99TtftMs, Some(0.10)),
    (Metric::MeanTpotMs, Some(0.05)),
    (Metric::MeanItlMs, Some(0.05)),
    (Metric::MeanE2elMs, Some(0.05)),
    (Metric::NumPreemptions, None),
    (Metric::PrefixCacheHitRate, None),
    (Metric::KvCacheUsagePeak, None),
];

/// A check report.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    pub engine: &'static str,
    pub engine_version: Option<String>,
    pub model: Option<String>,
    pub kv_capacity_tokens: Option<u64>,
    /// The profile's coefficients (null without a profile).
    pub profile: Option<Value>,
    pub points: Vec<CheckPoint>,
    pub knee: Knee,
    pub verdict: Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeats: Option<u32>,
    /// Where what the server says of itself contradicts the scenario the predictions ran
    /// (`server_info::differences`: warnings only, an error stops the check before it measures):
    /// part of every error below, said before the verdict. Absent where they agree.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub server_differs: Vec<crate::server_info::SetupDifference>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CheckPoint {
    pub max_concurrency: u32,
    pub used_for_fit: bool,
    /// The measured run (the mean of the repeats, with `--repeat`).
    pub measured: RepeatedPoint,
    /// The simulated run with the same requests.
    pub predicted: PointReport,
    /// (predicted − measured) / measured, per metric of [`CHECK_METRICS`].
    pub error: Named<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speed_reference: Option<PointSpeedReference>,
    /// (max − min) / mean over the repeats, per metric.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_spread: Option<Named<f64>>,
    /// The prediction's 90% interval per metric (with a profile that carries an uncertainty
    /// block), and where it came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uncertainty: Option<crate::uncertainty::ReportIntervals>,
    /// Per metric: the measured value lies inside the predicted 90% interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inside_interval: Option<Named<bool>>,
    /// Per metric: |error| is no larger than the measurement's own spread across repeats (the
    /// model is as close as the engine is to itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub within_spread: Option<Named<bool>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PointSpeedReference {
    pub mean_itl_ms: f64,
    /// Relative to the calibration's median (positive: slower).
    pub vs_calibration: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Knee {
    pub measured: Option<u32>,
    pub predicted: Option<u32>,
    pub same: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_per_repeat: Option<Vec<Option<u32>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_stable: Option<bool>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub per_metric: Named<MetricVerdict>,
    pub knee_same_point: bool,
    pub pass: bool,
    pub points_judged: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speed_reference: Option<SpeedReferenceVerdict>,
    /// With intervals: how many measured values of the judged points lie inside their
    /// predicted 90% interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_coverage: Option<IntervalCoverage>,
}

/// Over the points not used for fitting, every timed metric with an interval (the preemption
/// count, the prefix-cache hit rate and the KV peak are left out: counts and shares, exact or
/// not, not timings): how many measured values lie inside their predicted 90% interval. Issue
/// #13 asks for at least [`COVERAGE_TARGET`]; reported, not part of `pass`.
#[derive(Clone, Debug, Serialize)]
pub struct IntervalCoverage {
    pub inside: usize,
    pub values: usize,
    pub fraction: Option<f64>,
    pub target: f64,
}

/// The share of held-out measured values a 90% interval should hold at least (issue #13).
pub const COVERAGE_TARGET: f64 = 0.8;

/// The metrics [`IntervalCoverage`] leaves out.
const NOT_TIMED: [Metric; 3] = [Metric::NumPreemptions, Metric::PrefixCacheHitRate, Metric::KvCacheUsagePeak];

#[derive(Clone, Debug, Serialize)]
pub struct MetricVerdict {
    /// Over the judged points whose relative error is defined.
    pub median_abs_error: Option<f64>,
    /// Judged points measured at 0 against a nonzero prediction: no relative error, so not in
    /// the median; a judged metric with one fails.
    #[serde(skip_serializing_if = "is_zero")]
    pub measured_zero_predicted_not: usize,
    pub target: Option<f64>,
    /// Null for metrics that are shown, not judged.
    pub ok: Option<bool>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SpeedReferenceVerdict {
    pub calibration_mean_itl_ms: f64,
    pub median_vs_calibration: Option<f64>,
    pub largest_abs_vs_calibration: Option<f64>,
    pub tolerance: f64,
    pub engine_held_still: Option<bool>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

pub fn rel_err(m: Option<f64>, p: Option<f64>) -> Option<f64> {
    match (m, p) {
        (Some(m), Some(p)) if m.abs() > 1e-12 => Some((p - m) / m),
        (Some(m), Some(p)) if m.abs() <= 1e-12 && p.abs() <= 1e-12 => Some(0.0),
        _ => None,
    }
}

pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// The knee of a sweep's points.
pub fn knee_at<P: Metrics>(conc: &[u32], pts: &[P]) -> Option<u32> {
    let kp: Vec<KneePoint> = conc
        .iter()
        .zip(pts)
        .map(|(&c, p)| KneePoint {
            concurrency: f64::from(c),
            output_throughput: p.metric(Metric::OutputThroughput).unwrap_or(0.0),
            mean_ttft_ms: p.metric(Metric::MeanTtftMs).unwrap_or(0.0),
        })
        .collect();
    find_knee(&kp).map(|i| conc[i])
}

/// The knee of each repeat on its own (`runs_of[i][k]`: the k-th run of point i).
pub fn knee_per_repeat(conc: &[u32], runs_of: &[Vec<Point>]) -> Vec<Option<u32>> {
    let n = runs_of.iter().map(Vec::len).min().unwrap_or(0);
    (0..n).map(|k| knee_at(conc, &runs_of.iter().map(|r| &r[k]).collect::<Vec<_>>())).collect()
}

/// The mean of repeated measurements of a point ([`RepeatedPoint`]), and each judged
/// metric's relative spread ((max − min) / mean) across them, in report order.
pub fn mean_of_runs(runs: &[Point]) -> (RepeatedPoint, Named<f64>) {
    let mean = RepeatedPoint { runs: runs.to_vec() };
    let mut spread = Named::new();
    if runs.len() < 2 {
        return (mean, spread);
    }
    for &k in Metric::ALL {
        if runs[0].metric(k).is_none() || !CHECK_METRICS.iter().any(|(c, _)| *c == k) {
            continue;
        }
        let xs: Vec<f64> = runs.iter().filter_map(|r| r.metric(k)).collect();
        let m = xs.iter().sum::<f64>() / xs.len() as f64;
        if m.abs() > 1e-12 {
            let (lo, hi) = xs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
            spread.push(k.key(), (hi - lo) / m);
        }
    }
    (mean, spread)
}

/// The check report: per point, measured, predicted and relative error; the verdict on the
/// points not used for fitting.
pub fn judge(
    conc: &[u32],
    measured: &[RepeatedPoint],
    predicted: &[PointReport],
    used: &[bool],
    info: &ServerInfo,
    profile_coefficients: Option<Value>,
) -> CheckReport {
    let mut points = Vec::new();
    for i in 0..conc.len() {
        let mut error = Named::new();
        for (k, _) in CHECK_METRICS {
            if let Some(e) = rel_err(measured[i].metric(k), predicted[i].metric(k)) {
                error.push(k.key(), e);
            }
        }
        points.push(CheckPoint {
            max_concurrency: conc[i],
            used_for_fit: used[i],
            measured: measured[i].clone(),
            predicted: predicted[i].clone(),
            error,
            speed_reference: None,
            measured_spread: None,
            uncertainty: None,
            inside_interval: None,
            within_spread: None,
        });
    }
    let mut per_metric = Named::new();
    let mut pass = true;
    for (k, target) in CHECK_METRICS {
        let judged: Vec<usize> = (0..conc.len()).filter(|&i| !used[i]).collect();
        let errs: Vec<f64> = judged
            .iter()
            .filter_map(|&i| rel_err(measured[i].metric(k), predicted[i].metric(k)))
            .map(f64::abs)
            .collect();
        // A point measured at 0 with a nonzero prediction has no relative error; it was
        // skipped, so that 0 measured against 5 predicted preemptions read "0.0%".
        let zero = judged
            .iter()
            .filter(|&&i| {
                matches!((measured[i].metric(k), predicted[i].metric(k)), (Some(m), Some(p)) if m.abs() <= 1e-12 && p.abs() > 1e-12)
            })
            .count();
        let med = median(errs);
        // Judged only where an error is defined; a metric with no judged value is not passed.
        let ok = target.and_then(|t| match (med, zero) {
            (_, z) if z > 0 => Some(false),
            (Some(m), _) => Some(m <= t),
            (None, _) => None,
        });
        if ok == Some(false) {
            pass = false;
        }
        per_metric
            .push(k.key(), MetricVerdict { median_abs_error: med, measured_zero_predicted_not: zero, target, ok });
    }
    let km = knee_at(conc, measured);
    let kp = knee_at(conc, predicted);
    let same = km == kp;
    CheckReport {
        engine: info.kind_name(),
        engine_version: info.version.clone(),
        model: info.model.clone(),
        kv_capacity_tokens: info.kv_capacity_tokens,
        profile: profile_coefficients,
        points,
        knee: Knee { measured: km, predicted: kp, same, measured_per_repeat: None, measured_stable: None },
        verdict: Verdict {
            per_metric,
            knee_same_point: same,
            pass: pass && same,
            points_judged: used.iter().filter(|u| !**u).count(),
            speed_reference: None,
            interval_coverage: None,
        },
        repeats: None,
        server_differs: Vec::new(),
    }
}

impl CheckReport {
    /// Adds each point's predicted 90% intervals and whether the measured value lies inside.
    pub fn add_intervals(&mut self, intervals: &[Named<crate::uncertainty::Interval>], source: &str) {
        for (p, iv) in self.points.iter_mut().zip(intervals) {
            let mut inside = Named::new();
            for (k, i) in iv.iter() {
                if let Some(m) = Metric::parse(k).and_then(|k| p.measured.metric(k)) {
                    inside.push(k, i.contains(m));
                }
            }
            p.inside_interval = Some(inside);
            p.uncertainty = Some(crate::uncertainty::ReportIntervals::new(iv, source));
        }
        let (mut inside, mut values) = (0, 0);
        for p in self.points.iter().filter(|p| !p.used_for_fit) {
            for (k, ok) in p.inside_interval.iter().flat_map(|n| n.iter()) {
                if Metric::parse(k).is_some_and(|m| !NOT_TIMED.contains(&m)) {
                    values += 1;
                    inside += usize::from(*ok);
                }
            }
        }
        self.verdict.interval_coverage = Some(IntervalCoverage {
            inside,
            values,
            fraction: (values > 0).then(|| inside as f64 / values as f64),
            target: COVERAGE_TARGET,
        });
    }

    /// Adds the speed reference: per point, the mean of the references measured before its
    /// runs and how far that is from the calibration's median (positive: the engine was
    /// slower); in the verdict, whether every point's stayed within
    /// [`SPEED_REFERENCE_TOLERANCE`]. It is reported, not used: scaling each run by its
    /// reference made the live errors worse, not better (VALIDATION.md, third round).
    pub fn add_speed_reference(&mut self, calib: f64, reference_of: &[Vec<Option<f64>>]) {
        let mut moves = Vec::new();
        for (p, r) in self.points.iter_mut().zip(reference_of) {
            let got: Vec<f64> = r.iter().flatten().copied().collect();
            if got.is_empty() {
                continue;
            }
            let m = got.iter().sum::<f64>() / got.len() as f64;
            let d = m / calib - 1.0;
            moves.push(d);
            p.speed_reference = Some(PointSpeedReference { mean_itl_ms: m, vs_calibration: d });
        }
        let largest = moves.iter().map(|d| d.abs()).fold(None, |a: Option<f64>, d| Some(a.map_or(d, |a| a.max(d))));
        self.verdict.speed_reference = Some(SpeedReferenceVerdict {
            calibration_mean_itl_ms: calib,
            median_vs_calibration: median(moves),
            largest_abs_vs_calibration: largest,
            tolerance: SPEED_REFERENCE_TOLERANCE,
            engine_held_still: largest.map(|l| l <= SPEED_REFERENCE_TOLERANCE),
        });
    }

    /// Adds the repeats: each point's spread, and the knee of each repeat on its own (where
    /// they differ, the knee rule is within the measurement's noise at this sweep).
    pub fn add_repeats(&mut self, conc: &[u32], runs_of: &[Vec<Point>], spreads: Vec<Named<f64>>) {
        for (p, sp) in self.points.iter_mut().zip(spreads) {
            let mut within = Named::new();
            for (k, e) in p.error.iter() {
                if let Some(s) = sp.get(k) {
                    within.push(k, e.abs() <= *s);
                }
            }
            p.within_spread = Some(within);
            p.measured_spread = Some(sp);
        }
        let per = knee_per_repeat(conc, runs_of);
        self.knee.measured_stable = Some(per.windows(2).all(|w| w[0] == w[1]));
        self.knee.measured_per_repeat = Some(per);
        self.repeats = Some(runs_of.iter().map(Vec::len).min().unwrap_or(0) as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(thr: f64, ttft: f64) -> sim::report::BenchReport {
        sim::report::BenchReport {
            output_throughput: thr,
            ttft: sim::metrics::Stats { mean: ttft, ..Default::default() },
            ..Default::default()
        }
    }

    fn run(thr: f64, ttft: f64) -> Point {
        Point::of(bench(thr, ttft))
    }

    /// A point measured at 0 against a nonzero prediction has no relative error: it was left
    /// out of the median, so that 0 measured against 5 predicted read "0.0%", and a judged
    /// metric with no defined error passed (the live-loop hunt of 2026-12-05).
    #[test]
    fn a_measured_zero_against_a_prediction_is_said_and_fails_a_judged_metric() {
        let measured =
            vec![RepeatedPoint { runs: vec![run(100.0, 0.0)] }, RepeatedPoint { runs: vec![run(100.0, 10.0)] }];
        let predicted: Vec<PointReport> = [10.0, 10.0]
            .iter()
            .map(|&t| PointReport {
                bench: bench(100.0, t),
                cost_source: String::new(),
                fleet: None,
                replicas: None,
                caveats: Vec::new(),
            })
            .collect();
        let r = judge(&[1, 2], &measured, &predicted, &[false, false], &ServerInfo::default(), None);
        let v = r.verdict.per_metric.get("mean_ttft_ms").unwrap();
        assert_eq!(v.measured_zero_predicted_not, 1);
        assert_eq!(v.median_abs_error, Some(0.0));
        assert_eq!(v.ok, Some(false));
        assert!(!r.verdict.pass);
        // The throughput, defined at both points and right, passes.
        assert_eq!(r.verdict.per_metric.get("output_throughput").unwrap().ok, Some(true));
    }

    #[test]
    fn each_repeat_has_its_own_knee() {
        let conc = [1, 2, 4, 8];
        // Repeat 1 flattens after 4; repeat 2 still gains 6% from 4 to 8. Each repeat's knee
        // is the knee rule (`sim::sweep::find_knee`) on that repeat's points alone.
        let thr = [[100.0, 100.0], [180.0, 180.0], [200.0, 188.0], [205.0, 200.0]];
        let runs_of: Vec<Vec<Point>> =
            thr.iter().enumerate().map(|(i, t)| t.iter().map(|&x| run(x, 100.0 * (i + 1) as f64)).collect()).collect();
        let alone = |k: usize| knee_at(&conc, &runs_of.iter().map(|r| r[k].clone()).collect::<Vec<_>>());
        assert_eq!(knee_per_repeat(&conc, &runs_of), vec![alone(0), alone(1)]);
        assert_eq!(alone(0), Some(4));
    }

    fn report(n: usize) -> CheckReport {
        let measured: Vec<RepeatedPoint> =
            (0..n).map(|i| RepeatedPoint { runs: vec![run(100.0 + i as f64, 10.0)] }).collect();
        let predicted: Vec<PointReport> = (0..n)
            .map(|i| PointReport {
                bench: bench(100.0 + i as f64, 10.0),
                cost_source: String::new(),
                fleet: None,
                replicas: None,
                caveats: Vec::new(),
            })
            .collect();
        judge(
            &vec![1; n].iter().enumerate().map(|(i, _)| i as u32 + 1).collect::<Vec<_>>(),
            &measured,
            &predicted,
            &vec![false; n],
            &ServerInfo::default(),
            None,
        )
    }

    #[test]
    fn the_speed_reference_says_how_far_the_engine_moved() {
        let mut r = report(3);
        let refs = vec![vec![Some(10.2), Some(10.4)], vec![None], vec![Some(12.0)]];
        r.add_speed_reference(10.0, &refs);
        let d0 = r.points[0].speed_reference.as_ref().unwrap().vs_calibration;
        assert!((d0 - 0.03).abs() < 1e-9, "{d0}");
        // A point whose reference failed has none, and does not count.
        assert!(r.points[1].speed_reference.is_none());
        let v = r.verdict.speed_reference.as_ref().unwrap();
        assert!((v.largest_abs_vs_calibration.unwrap() - 0.2).abs() < 1e-9);
        assert_eq!(v.engine_held_still, Some(false));
        let mut steady = report(1);
        steady.add_speed_reference(10.0, &[vec![Some(10.3)]]);
        assert_eq!(steady.verdict.speed_reference.unwrap().engine_held_still, Some(true));
    }

    /// The report's keys are a contract: scripts and VALIDATION.md read them.
    #[test]
    fn check_report_keys() {
        let mut r = report(2);
        r.add_speed_reference(10.0, &[vec![Some(10.0)], vec![Some(10.0)]]);
        r.add_repeats(
            &[1, 2],
            &[vec![run(1.0, 1.0), run(1.0, 1.0)], vec![run(2.0, 2.0), run(2.0, 2.0)]],
            vec![Named::new(), Named::new()],
        );
        let v = serde_json::to_value(&r).unwrap();
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>().join(",");
        assert_eq!(keys(&v), "engine,engine_version,model,kv_capacity_tokens,profile,points,knee,verdict,repeats");
        assert_eq!(
            keys(&v["points"][0]),
            "max_concurrency,used_for_fit,measured,predicted,error,speed_reference,measured_spread,within_spread"
        );
        assert_eq!(keys(&v["points"][0]["speed_reference"]), "mean_itl_ms,vs_calibration");
        assert_eq!(keys(&v["knee"]), "measured,predicted,same,measured_per_repeat,measured_stable");
        assert_eq!(keys(&v["verdict"]), "per_metric,knee_same_point,pass,points_judged,speed_reference");
        assert_eq!(keys(&v["verdict"]["per_metric"]["mean_ttft_ms"]), "median_abs_error,target,ok");
        assert_eq!(
            keys(&v["verdict"]["per_metric"]),
            "output_throughput,mean_ttft_ms,median_ttft_ms,p99_ttft_ms,mean_tpot_ms,mean_itl_ms,mean_e2el_ms,num_preemptions,prefix_cache_hit_rate,kv_cache_usage_peak"
        );
        assert_eq!(
            keys(&v["verdict"]["speed_reference"]),
            "calibration_mean_itl_ms,median_vs_calibration,largest_abs_vs_calibration,tolerance,engine_held_still"
        );
        // Without repeats or a speed reference those keys are absent, as before.
        let plain = serde_json::to_value(report(1)).unwrap();
        assert_eq!(keys(&plain), "engine,engine_version,model,kv_capacity_tokens,profile,points,knee,verdict");
        assert_eq!(keys(&plain["knee"]), "measured,predicted,same");
        assert_eq!(keys(&plain["verdict"]), "per_metric,knee_same_point,pass,points_judged");
        assert_eq!(plain["verdict"]["per_metric"]["median_ttft_ms"]["target"], Value::Null);
        assert_eq!(plain["verdict"]["per_metric"]["median_ttft_ms"]["ok"], Value::Null);
    }
}
