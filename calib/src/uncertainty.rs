//! Intervals on predictions.
//!
//! **With a profile** that carries an `uncertainty` block ([`ProfileUncertainty`]): the
//! coefficients are sampled ([`SAMPLES`] sets, seeded, from the log-normal whose covariance
//! the fit left, `crate::identify`), each set is simulated (the caller runs them, in parallel
//! if it likes, results in input order), and each metric's interval is the 5th and 95th
//! percentile of the samples ([`intervals_from_samples`]).
//!
//! **Without a profile**: the uncalibrated model's measured error on the validation corpus
//! ([`uncalibrated_intervals`]): `validation/baseline.json` (embedded at compile time) gives
//! each published group's median |error| per metric family; the corpus' p90 of each family
//! ([`corpus_errors`]) is scaled by the scenario's GPU and engine's groups' median in that
//! family over the corpus', to the power of their credibility ([`uncalibrated_errors`]); with
//! no group of that GPU and engine, the corpus-wide p90 of the family.

use rand::Rng as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sim::cost::{CostCoefficients, COEFFICIENT_NAMES};

use sim::report::{Metric, Metrics, PointReport};

use crate::named::Named;

/// Coefficient sets sampled per prediction.
pub const SAMPLES: usize = 32;

/// The seed of the samples (one stream, so a prediction's interval is the same every run).
pub const SEED: u64 = 0x5eed_0013;

/// The metrics that get an interval, by report key.
pub const METRICS: [Metric; 16] = [
    Metric::RequestThroughput,
    Metric::OutputThroughput,
    Metric::TotalTokenThroughput,
    Metric::MeanTtftMs,
    Metric::MedianTtftMs,
    Metric::P99TtftMs,
    Metric::MeanTpotMs,
    Metric::MedianTpotMs,
    Metric::P99TpotMs,
    Metric::MeanItlMs,
    Metric::MedianItlMs,
    Metric::P99ItlMs,
    Metric::MeanE2elMs,
    Metric::MedianE2elMs,
    Metric::P99E2elMs,
    Metric::NumPreemptions,
];

/// The largest variance of ln(coefficient) an uncertainty block may state: a standard deviation
/// of 10 in log, a factor of 22,000 at one σ. A bound, not a model: it keeps a mistyped matrix
/// from sampling coefficients past any finite time.
pub const MAX_LOG_VARIANCE: f64 = 100.0;

/// The largest model error (90% |error| as a fraction) a block may state: 100 is 10,000%.
pub const MAX_MODEL_ERROR: f64 = 100.0;

/// A 90% interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub p05: f64,
    pub p95: f64,
}

impl Interval {
    pub fn contains(&self, v: f64) -> bool {
        v >= self.p05 && v <= self.p95
    }
}

/// What a profile stores about its coefficients' uncertainty.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProfileUncertainty {
    pub method: String,
    /// The coefficients of the covariance, in order.
    pub coefficients: Vec<String>,
    /// Covariance of ln(coefficient) about the profile's values.
    pub log_covariance: Vec<Vec<f64>>,
    /// The residuals' χ² per degree of freedom that inflated it (at least 1).
    pub chi2_per_dof: f64,
    /// Per coefficient, its 90% interval (µs).
    pub intervals: std::collections::BTreeMap<String, Interval>,
    /// The coefficient sets (µs, in `coefficients` order) a prediction is sampled over; when
    /// absent, sets are drawn from `log_covariance`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ensemble: Vec<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ensemble_method: Option<String>,
    /// The model's own error a fit does not remove, per metric family or per metric key (a key's
    /// entry first; 90% |error|), added to the ensemble's spread in quadrature (in log): for fits
    /// on published results, whose setups are partly unstated, the uncalibrated corpus error; for
    /// live fits, a later run's own deviation (`live_model_error`); and where it comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_error_p90: Option<std::collections::BTreeMap<String, f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_error_source: Option<String>,
    /// The coefficients fitted to exactly 0 (on their bound), where a log-space interval is
    /// `[0, 0]`: each one's σ in linear space (µs), which its interval and its samples use
    /// instead ([`ProfileUncertainty::bound_zero_coefficients`], [`AT_ZERO_METHOD`]).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub at_zero_sigma_us: std::collections::BTreeMap<String, f64>,
    /// How those intervals were made (set with `at_zero_sigma_us`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_zero_method: Option<String>,
}

/// How a coefficient fitted to exactly 0 gets its interval and its samples
/// ([`ProfileUncertainty::bound_zero_coefficients`]).
pub const AT_ZERO_METHOD: &str = "a coefficient fitted to exactly 0 sits on its bound, where value × exp(±1.645 σ_ln) is [0, 0] however weakly the data determine it: it gets a half-normal from 0 in linear space, σ_lin = prior value × σ_ln (the log σ at the fit, which at 0 the data do not narrow: the prior's, taken to linear space at the prior's value, the delta method); its interval is one-sided, [0, 1.645 σ_lin] (90% of a half-normal lies below 1.645 σ); a prediction's samples take σ_lin × |x / σ_ln| from the same draw x of the log covariance";

impl ProfileUncertainty {
    /// The block for coefficients `values` (µs, [`COEFFICIENT_NAMES`] order) and a log covariance.
    pub fn new(method: &str, values: &[f64], log_covariance: Vec<Vec<f64>>, chi2_per_dof: f64) -> ProfileUncertainty {
        let intervals = COEFFICIENT_NAMES
            .iter()
            .enumerate()
            .map(|(k, n)| {
                let sd = log_covariance[k][k].max(0.0).sqrt();
                (n.to_string(), Interval { p05: values[k] * (-1.645 * sd).exp(), p95: values[k] * (1.645 * sd).exp() })
            })
            .collect();
        ProfileUncertainty {
            method: method.to_string(),
            coefficients: COEFFICIENT_NAMES.iter().map(|s| s.to_string()).collect(),
            log_covariance,
            chi2_per_dof,
            intervals,
            ensemble: Vec::new(),
            ensemble_method: None,
            model_error_p90: None,
            model_error_source: None,
            at_zero_sigma_us: std::collections::BTreeMap::new(),
            at_zero_method: None,
        }
    }

    /// The block with an honest interval for each coefficient fitted to exactly 0 ([`AT_ZERO_METHOD`]):
    /// `values` are the fitted coefficients (µs, [`COEFFICIENT_NAMES`] order, as for
    /// [`ProfileUncertainty::new`]), `prior` the coefficients the fit started from. A coefficient at
    /// 0 whose prior is 0 too, or whose log σ is 0, keeps `[0, 0]`: nothing says it moves. A block
    /// sampled from an ensemble is left as it is (its members are the samples).
    pub fn bound_zero_coefficients(mut self, values: &[f64], prior: &CostCoefficients) -> ProfileUncertainty {
        if !self.ensemble.is_empty() || self.log_covariance.is_empty() {
            return self;
        }
        for (i, name) in self.coefficients.iter().enumerate() {
            let Some(k) = COEFFICIENT_NAMES.iter().position(|n| n == name) else { continue };
            let sd_ln = self.log_covariance[i][i].max(0.0).sqrt();
            let Some(p) = prior.get(name).filter(|p| p.is_finite() && *p > 0.0) else { continue };
            if values.get(k) != Some(&0.0) || sd_ln == 0.0 {
                continue;
            }
            let sigma = p * sd_ln;
            self.at_zero_sigma_us.insert(name.clone(), sigma);
            self.intervals.insert(name.clone(), Interval { p05: 0.0, p95: 1.645 * sigma });
        }
        if !self.at_zero_sigma_us.is_empty() {
            self.at_zero_method = Some(AT_ZERO_METHOD.to_string());
        }
        self
    }

    /// With an ensemble (µs per member): the coefficient intervals become the members' 5th–95th
    /// percentiles, widened to hold the fitted value `values[k]` ([`COEFFICIENT_NAMES`] order, as
    /// for [`ProfileUncertainty::new`]), as [`intervals_from_samples`] widens a prediction's
    /// to hold the central prediction: 32 members' percentiles are themselves noisy, and a
    /// nonlinear model's members need not straddle its fit. A profile's interval then always
    /// holds its coefficient (one that printed `step_us 3985.2` beside `784.7 – 3897.8` did not;
    /// an audit, 2026-12-07), which [`ProfileUncertainty::holds`] checks where it is used.
    pub fn with_ensemble(mut self, members: Vec<Vec<f64>>, method: &str, values: &[f64]) -> ProfileUncertainty {
        for (k, n) in self.coefficients.iter().enumerate() {
            let xs: Vec<f64> = members.iter().map(|m| m[k]).collect();
            let mut i = Interval { p05: quantile(&xs, 0.05), p95: quantile(&xs, 0.95) };
            if let Some(&v) = COEFFICIENT_NAMES.iter().position(|c| c == n).and_then(|c| values.get(c)) {
                i = Interval { p05: i.p05.min(v), p95: i.p95.max(v) };
            }
            self.intervals.insert(n.clone(), i);
        }
        self.ensemble = members;
        self.ensemble_method = Some(method.to_string());
        self
    }

    /// Reads the block from a profile file's JSON: None when it has none (or `null`); an error
    /// naming the field when it has one that cannot be used ([`ProfileUncertainty::check`]): a
    /// block that cannot be read must not quietly drop every interval, nor yield NaN or zero-cost
    /// members.
    pub fn from_profile_json(v: &Value) -> Result<Option<ProfileUncertainty>, String> {
        let Some(block) = v.get("uncertainty").filter(|b| !b.is_null()) else { return Ok(None) };
        // Read strictly, naming the path of the first bad field inside the block
        // (`uncertainty.ensemble[0]: invalid type: map, expected a sequence`): serde alone named
        // none, and an interval given as an array was read by position.
        let u: ProfileUncertainty = sim::config::from_value(block.clone(), "uncertainty").map_err(|e| {
            let path = if e.path.is_empty() { "uncertainty".to_string() } else { e.path.clone() };
            format!("{path}: not a valid uncertainty block: {}", e.message)
        })?;
        u.check()?;
        Ok(Some(u))
    }

    /// Whether the block can give intervals: known, distinct coefficients; a square, finite,
    /// symmetric log covariance of their size with variances in [0, [`MAX_LOG_VARIANCE`]] (empty
    /// only beside an ensemble); ensemble members of one value per coefficient, each finite in
    /// [0, `MAX_COEFFICIENT_US`], and none whose decode step or prefill token costs nothing;
    /// model errors keyed by a metric family or report key, each a finite fraction ≥ 0; finite
    /// intervals and χ². Errors name the field (`uncertainty.<field>`).
    pub fn check(&self) -> Result<(), String> {
        let k = self.coefficients.len();
        if k == 0 {
            return Err(
                "uncertainty.coefficients: empty; expected the names of the coefficients the block covers".into()
            );
        }
        for (i, n) in self.coefficients.iter().enumerate() {
            if !COEFFICIENT_NAMES.contains(&n.as_str()) {
                return Err(format!(
                    "uncertainty.coefficients[{i}]: unknown coefficient {n:?}; expected one of {}",
                    COEFFICIENT_NAMES.join(", ")
                ));
            }
            if self.coefficients[..i].contains(n) {
                return Err(format!("uncertainty.coefficients[{i}]: {n:?} given twice"));
            }
        }
        if !(self.chi2_per_dof.is_finite() && self.chi2_per_dof >= 0.0) {
            return Err(format!("uncertainty.chi2_per_dof: expected a finite number ≥ 0, got {}", self.chi2_per_dof));
        }
        if self.log_covariance.is_empty() {
            if self.ensemble.is_empty() {
                return Err(format!(
                    "uncertainty: neither an ensemble nor a log_covariance; expected one of them ({k}×{k} for the covariance)"
                ));
            }
        } else {
            if self.log_covariance.len() != k || self.log_covariance.iter().any(|r| r.len() != k) {
                return Err(format!(
                    "uncertainty.log_covariance: expected a {k}×{k} matrix (one row and column per uncertainty.coefficients entry)"
                ));
            }
            for i in 0..k {
                for j in 0..k {
                    let (a, b) = (self.log_covariance[i][j], self.log_covariance[j][i]);
                    if !a.is_finite() || (a - b).abs() > 1e-9 * a.abs().max(b.abs()).max(1e-12) {
                        return Err(format!(
                            "uncertainty.log_covariance[{i}][{j}]: expected a finite, symmetric matrix, got {a} (and {b} at [{j}][{i}])"
                        ));
                    }
                }
                let d = self.log_covariance[i][i];
                if !(0.0..=MAX_LOG_VARIANCE).contains(&d) {
                    return Err(format!(
                        "uncertainty.log_covariance[{i}][{i}]: a variance of ln({}) must be from 0 to {MAX_LOG_VARIANCE}, got {d}",
                        self.coefficients[i]
                    ));
                }
            }
        }
        for (m, row) in self.ensemble.iter().enumerate() {
            if row.len() != k {
                return Err(format!(
                    "uncertainty.ensemble[{m}]: {} values, expected {k} (one per uncertainty.coefficients entry)",
                    row.len()
                ));
            }
            let mut c = CostCoefficients::default();
            for (name, &v) in self.coefficients.iter().zip(row) {
                c.set(name, v);
            }
            sim::config::check_coefficients(&c, &format!("uncertainty.ensemble[{m}]")).map_err(|e| e.to_string())?;
            let at = |n: &str| c.get(n);
            let sum = |ns: &[&str]| -> Option<f64> {
                let vs: Vec<f64> = ns.iter().filter_map(|n| at(n)).collect();
                (vs.len() == ns.len()).then(|| vs.iter().sum())
            };
            let min = sim::config::MIN_STEP_US;
            if sum(&["step_us", "per_seq_us", "decode_token_us"]).is_some_and(|v| v < min)
                || sum(&["step_us", "prefill_token_us"]).is_some_and(|v| v < min)
            {
                return Err(format!(
                    "uncertainty.ensemble[{m}]: a decode step (step_us + per_seq_us + decode_token_us) and a prefill token \
                     (step_us + prefill_token_us) must cost at least {min} µs"
                ));
            }
        }
        for (n, i) in &self.intervals {
            if !(i.p05.is_finite() && i.p95.is_finite() && 0.0 <= i.p05 && i.p05 <= i.p95) {
                return Err(format!(
                    "uncertainty.intervals.{n}: expected finite 0 ≤ p05 ≤ p95, got p05 {} and p95 {}",
                    i.p05, i.p95
                ));
            }
        }
        for (name, &s) in &self.at_zero_sigma_us {
            if !self.coefficients.contains(name) {
                return Err(format!(
                    "uncertainty.at_zero_sigma_us.{name}: not one of uncertainty.coefficients ({})",
                    self.coefficients.join(", ")
                ));
            }
            if !(s.is_finite() && (0.0..=sim::config::MAX_COEFFICIENT_US).contains(&s)) {
                return Err(format!(
                    "uncertainty.at_zero_sigma_us.{name}: expected a finite σ from 0 to {} µs, got {s}",
                    sim::config::MAX_COEFFICIENT_US
                ));
            }
        }
        for (key, &e) in self.model_error_p90.iter().flatten() {
            if !(FAMILIES.contains(&key.as_str()) || Metric::parse(key).is_some()) {
                return Err(format!(
                    "uncertainty.model_error_p90.{key}: unknown; expected a metric family ({}) or a report key such as p99_ttft_ms",
                    FAMILIES.join(", ")
                ));
            }
            if !(e.is_finite() && (0.0..=MAX_MODEL_ERROR).contains(&e)) {
                return Err(format!(
                    "uncertainty.model_error_p90.{key}: expected a finite 90% |error| from 0 to {MAX_MODEL_ERROR} (a fraction), got {e}"
                ));
            }
        }
        Ok(())
    }

    /// Whether each coefficient `values` sets lies inside its own interval in the block (to a
    /// relative 1e-9, JSON's round trip): a fit's interval always holds its estimate
    /// ([`ProfileUncertainty::with_ensemble`] widens the members' percentiles to it), so one
    /// outside was edited after the fit, or written by a calibrate before 2026-12-07, whose
    /// ensemble's percentiles could leave it out. An error names the coefficient, its value and
    /// its interval.
    pub fn holds(&self, values: &CostCoefficients) -> Result<(), String> {
        for (n, i) in &self.intervals {
            let Some(c) = values.get(n) else { continue };
            let slack = 1e-9 * c.abs().max(i.p95.abs()) + 1e-12;
            if c < i.p05 - slack || c > i.p95 + slack {
                return Err(format!(
                    "coefficients.{n}: {c} lies outside its own 90% interval, uncertainty.intervals.{n} {}–{}: a fit's \
                     interval holds its estimate, so the profile was edited after its fit (or written by a calibrate \
                     before 2026-12-07, whose ensemble could leave it out), and the intervals drawn from the block are \
                     another profile's; refit it (servesim calibrate), or drop its uncertainty block to run the \
                     coefficients without intervals",
                    i.p05, i.p95
                ));
            }
        }
        Ok(())
    }

    /// [`SAMPLES`] coefficient sets about `center` (µs): ln c ~ N(ln center, Σ), by the
    /// Cholesky factor of Σ (eigen-clipped when Σ is not positive definite), from one
    /// seeded ChaCha stream.
    pub fn sample(&self, center: &CostCoefficients, n: usize) -> Vec<CostCoefficients> {
        let k = self.coefficients.len();
        if !self.ensemble.is_empty() {
            return self
                .ensemble
                .iter()
                .take(n)
                .map(|m| {
                    let mut c = CostCoefficients::default();
                    for (i, name) in self.coefficients.iter().enumerate() {
                        if center.get(name).is_some() {
                            c.set(name, m[i]);
                        }
                    }
                    c
                })
                .collect();
        }
        let cov = nalgebra::DMatrix::from_fn(k, k, |i, j| self.log_covariance[i][j]);
        let l = match cov.clone().cholesky() {
            Some(c) => c.l(),
            None => {
                let e = cov.symmetric_eigen();
                let d = e.eigenvalues.map(|v| v.max(0.0).sqrt());
                &e.eigenvectors * nalgebra::DMatrix::from_diagonal(&d)
            }
        };
        let mut rng = sim::rng::stream(SEED, "calibration uncertainty");
        (0..n)
            .map(|_| {
                let z = nalgebra::DVector::from_fn(k, |_, _| normal(&mut rng));
                let x = &l * z;
                let mut c = CostCoefficients::default();
                for (i, name) in self.coefficients.iter().enumerate() {
                    let Some(v) = center.get(name) else { continue };
                    // A coefficient at 0 on its bound: half-normal in linear space, from the same
                    // draw (no other coefficient's samples move).
                    let sd_ln = self.log_covariance[i][i].max(0.0).sqrt();
                    match self.at_zero_sigma_us.get(name) {
                        Some(&sigma) if v == 0.0 && sd_ln > 0.0 => c.set(name, sigma * (x[i] / sd_ln).abs()),
                        _ => c.set(name, v * x[i].exp()),
                    }
                }
                c
            })
            .collect()
    }
}

/// A standard normal draw (Box–Muller).
pub fn normal(rng: &mut sim::rng::Rng) -> f64 {
    let u1: f64 = rng.random::<f64>().max(1e-300);
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// numpy's linear-interpolation quantile of `v` (sorted here).
pub fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    let x = (s.len() - 1) as f64 * q;
    let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
    s[lo] + (x - lo as f64) * (s[hi] - s[lo])
}

/// Each metric's 5th–95th percentile over the sampled predictions, widened to hold the
/// central prediction (with 32 samples the band's edges are themselves noisy).
pub fn intervals_from_samples<P: Metrics>(center: &P, samples: &[P]) -> Named<Interval> {
    let mut out = Named::new();
    for k in METRICS {
        let Some(c) = center.metric(k) else { continue };
        // A sample whose run did not complete has no comparable metrics (its caller says so).
        let xs: Vec<f64> = samples.iter().filter(|p| p.completed()).filter_map(|p| p.metric(k)).collect();
        if xs.is_empty() {
            continue;
        }
        out.push(k.key(), Interval { p05: quantile(&xs, 0.05).min(c), p95: quantile(&xs, 0.95).max(c) });
    }
    out
}

impl ProfileUncertainty {
    /// The intervals of a prediction `center` from its sampled predictions, with the model's
    /// own error added where the profile carries one: each side's log-width and the family's
    /// `ln(1 + e90)` combined in quadrature.
    pub fn intervals<P: Metrics>(&self, center: &P, samples: &[P]) -> Named<Interval> {
        let base = intervals_from_samples(center, samples);
        let Some(me) = &self.model_error_p90 else { return base };
        let mut out = Named::new();
        for (k, i) in base.iter() {
            let c = Metric::parse(k).and_then(|k| center.metric(k)).unwrap_or(0.0);
            let e = me.get(k).or_else(|| me.get(metric_family(k))).copied().unwrap_or(0.0);
            if c <= 0.0 || i.p05 <= 0.0 {
                out.push(k, *i);
                continue;
            }
            let m = (1.0 + e).ln();
            let lo = ((c / i.p05).ln().powi(2) + m * m).sqrt();
            let hi = ((i.p95 / c).ln().powi(2) + m * m).sqrt();
            out.push(k, Interval { p05: c * (-lo).exp(), p95: c * hi.exp() });
        }
        out
    }
}

/// The metric families, in the order [`corpus_errors`] gives them.
pub const FAMILIES: [&str; 5] = ["ttft", "tpot", "itl", "e2el", "throughput"];

/// The uncalibrated model's error on the published corpus, per metric family: (family, median,
/// p90) of |simulated / published − 1| over every compared value, as fractions. Read from the
/// `corpus` block of `validation/baseline.json` (embedded at compile time), which
/// `servesim validate --write-baseline` writes from the same run as the groups' medians, so
/// these move with the model instead of being copied by hand. Besides the uncalibrated
/// intervals, the TTFT and TPOT p90s state the prior σ of a fit that corrects the composed cost
/// (`crate::identify::prior_sigmas`).
pub fn corpus_errors() -> &'static [(&'static str, f64, f64); 5] {
    &corpus().errors
}

/// The model's discrepancy at one load point of a published setup, per metric family: the
/// validate corpus' pooled within-group standard deviation of ln(simulated / published) over the
/// family's means and medians (`within_group_sd_ln` in the `corpus` block of
/// `validation/baseline.json`, written by `servesim validate --write-baseline`). It is the part
/// of the uncalibrated error that changes from one load point of a setup to the next (the part a
/// setup's rows share is the between-group sd), so no coefficient can absorb it from one point:
/// a fit on published results adds it to each value's noise (`crate::fit::Discrepancy`).
pub fn corpus_discrepancy(family: &str) -> f64 {
    FAMILIES.iter().position(|f| *f == family).map_or(f64::NAN, |i| corpus().within_sd[i])
}

/// The baseline's `corpus` block, read once: [`corpus_errors`] and [`corpus_discrepancy`].
struct Corpus {
    errors: [(&'static str, f64, f64); 5],
    within_sd: [f64; 5],
}

fn corpus() -> &'static Corpus {
    static C: std::sync::OnceLock<Corpus> = std::sync::OnceLock::new();
    C.get_or_init(|| {
        let v: Value = serde_json::from_str(BASELINE).expect("validation/baseline.json (embedded) is JSON");
        let get = |f: &str, k: &str| {
            v["corpus"][f][k].as_f64().unwrap_or_else(|| {
                panic!("validation/baseline.json (embedded): corpus.{f}.{k} missing; rewrite it with `servesim validate --write-baseline validation/baseline.json`")
            })
        };
        Corpus {
            errors: FAMILIES.map(|f| {
                (f, get(f, "median_abs_error_pct") / 100.0, get(f, "p90_abs_error_pct") / 100.0)
            }),
            within_sd: FAMILIES.map(|f| get(f, "within_group_sd_ln")),
        }
    })
}

/// The root mean square of `v` (0 for none).
fn rms(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    (v.iter().map(|x| x * x).sum::<f64>() / v.len() as f64).sqrt()
}

/// The sample standard deviation of ln(x) over a calibration's speed references (ms, one
/// per probe): how much the engine's own speed moved while it was calibrated. None with fewer
/// than three values or a value that is not positive and finite.
pub fn speed_reference_sd_ln(values: &[f64]) -> Option<f64> {
    if values.len() < 3 || values.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
        return None;
    }
    let l: Vec<f64> = values.iter().map(|x| x.ln()).collect();
    let m = l.iter().sum::<f64>() / l.len() as f64;
    Some((l.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (l.len() - 1) as f64).sqrt())
}

/// Per metric family, the fit's residual standard deviation in ln: the root mean square of
/// ln(1 + relative residual) over the family's fitted values, times √(N / (N − p)) for the
/// `fitted` coefficients the N values of every family determined. Families without values are
/// left out.
pub fn residual_sd_ln(points: &[crate::profile::FitPointSummary], fitted: usize) -> Named<f64> {
    let mut by: std::collections::BTreeMap<&'static str, Vec<f64>> = std::collections::BTreeMap::new();
    for p in points {
        for (k, r) in p.relative_residual.iter() {
            if r.is_finite() && *r > -1.0 {
                by.entry(metric_family(k)).or_default().push((1.0 + r).ln());
            }
        }
    }
    let n: usize = by.values().map(Vec::len).sum();
    let dof = if n > fitted { (n as f64 / (n - fitted) as f64).sqrt() } else { 1.0 };
    let mut out = Named::new();
    for f in FAMILIES {
        if let Some(v) = by.get(f) {
            out.push(f, dof * rms(v));
        }
    }
    out
}

/// Per p99 target (its key), the root mean square of ln(predicted / measured) over the probes
/// that measured it: `measured` and `predicted` are per probe, in `crate::fit::TARGETS` order
/// (None where not measured). The p99s are not fitted, so no degrees of freedom are taken off.
pub fn tail_sd_ln(measured: &[Vec<Option<f64>>], predicted: &[Vec<Option<f64>>]) -> Named<f64> {
    let mut out = Named::new();
    for (t, target) in crate::fit::TARGETS.iter().enumerate() {
        if !target.key().starts_with("p99") {
            continue;
        }
        let l: Vec<f64> = measured
            .iter()
            .zip(predicted)
            .filter_map(|(m, p)| match (m.get(t).copied().flatten(), p.get(t).copied().flatten()) {
                (Some(m), Some(p)) if m > 0.0 && p > 0.0 => Some((p / m).ln()),
                _ => None,
            })
            .collect();
        if !l.is_empty() {
            out.push(target.key(), rms(&l));
        }
    }
    out
}

/// The model error of a live profile's intervals (90% |error| per family and per p99 key), and
/// where it comes from. Per family, the larger of the fit's residual σ (`resid`) and the speed
/// references' σ (`speed`, over `n_ref` runs): the two are not independent (the residuals hold
/// the engine's noise while it was probed), so the larger, not their sum. Per p99 key, the
/// larger of the speed σ and that p99's own σ at the probes (`tail`, [`tail_sd_ln`]: the
/// simulated tail against the engine's, which a mean's residuals do not see); where no probe
/// measured it, twice its family's σ (as `crate::fit::TARGET_NOISE` gives a p99 twice its
/// mean's noise).
pub fn live_model_error(
    resid: &Named<f64>,
    tail: &Named<f64>,
    speed: Option<f64>,
    n_ref: usize,
) -> (std::collections::BTreeMap<String, f64>, String) {
    let mut out = std::collections::BTreeMap::new();
    let mut parts = Vec::new();
    for f in FAMILIES {
        let r = resid.iter().find(|(k, _)| *k == f).map(|(_, v)| *v);
        let sigma = match (r, speed) {
            (Some(r), Some(s)) => r.max(s),
            (Some(r), None) => r,
            (None, Some(s)) => s,
            (None, None) => continue,
        };
        out.insert(f.to_string(), (1.645 * sigma).exp() - 1.0);
        parts.push(format!("{f} {sigma:.3}"));
        if f != "throughput" {
            let key = format!("p99_{f}_ms");
            let s99 = match tail.iter().find(|(k, _)| *k == key).map(|(_, v)| *v) {
                Some(t) => t.max(speed.unwrap_or(0.0)),
                None => 2.0 * sigma,
            };
            out.insert(key.clone(), (1.645 * s99).exp() - 1.0);
            parts.push(format!("{key} {s99:.3}"));
        }
    }
    let speed_text = speed.map_or_else(
        || "no speed reference".to_string(),
        |s| format!("the speed reference (mean ITL of one request at a fixed shape, before each probe) varied by σ {s:.3} over {n_ref} runs"),
    );
    let tail_text = if tail.is_empty() {
        "none measured".to_string()
    } else {
        tail.iter().map(|(k, v)| format!("{k} {v:.3}")).collect::<Vec<_>>().join(", ")
    };
    let resid_text = FAMILIES
        .iter()
        .filter_map(|f| resid.iter().find(|(k, _)| k == f).map(|(_, v)| format!("{f} {v:.3}")))
        .collect::<Vec<_>>()
        .join(", ");
    (
        out,
        format!(
            "a later run's own deviation, added in quadrature to the ensemble's spread: per family the larger of the fit's residual σ in ln ({resid_text}; root mean square over the probes, dof-corrected) and the engine's speed σ ({speed_text}); per p99 the larger of its own σ at the probes ({tail_text}) and the speed σ, or twice its family's where no probe measured it; i.e. {}; ±1.645 σ",
            parts.join(", ")
        ),
    )
}

/// `validation/baseline.json`: each published group's median |error| (the uncalibrated model).
pub const BASELINE: &str = include_str!("../../validation/baseline.json");

/// The metric family of a report key.
pub fn metric_family(key: &str) -> &'static str {
    if key.contains("ttft") {
        "ttft"
    } else if key.contains("tpot") {
        "tpot"
    } else if key.contains("itl") {
        "itl"
    } else if key.contains("e2el") {
        "e2el"
    } else {
        "throughput"
    }
}

/// Where an uncalibrated interval came from, and the 90% |error| per family it used.
#[derive(Clone, Debug, Serialize)]
pub struct UncalibratedSource {
    pub source: String,
    pub p90_abs_error: Named<f64>,
}

impl UncalibratedSource {
    /// The same band with the 90% |error| of the families `given` names replaced (`simulate
    /// --model-error`: a validation that leaves the judged set out of the estimate); the
    /// source says which were given.
    pub fn with_given(mut self, given: &[(&str, f64)]) -> UncalibratedSource {
        if given.is_empty() {
            return self;
        }
        for (name, v) in self.p90_abs_error.0.iter_mut() {
            if let Some((_, x)) = given.iter().find(|(f, _)| *f == name.as_str()) {
                *v = *x;
            }
        }
        let named: Vec<&str> = given.iter().map(|(f, _)| *f).collect();
        self.source = format!("{}; the 90% |error| of {} given (--model-error)", self.source, named.join(", "));
        self
    }
}

/// The engine kind a baseline group's engine label names (`vllm`, `sglang`), if either.
fn engine_kind_of(label: &str) -> Option<&'static str> {
    let l = label.to_ascii_lowercase();
    ["vllm", "sglang"].into_iter().find(|k| l.contains(k))
}

/// How far a GPU × engine's own published groups may move its uncalibrated band away from the
/// corpus': the **credibility** `Z = n / (n + k)` of `n` groups (Bühlmann's), with
/// `k = σ²_within / σ²_between` estimated on the corpus itself by one-way random-effects
/// ANOVA (method of moments, unbalanced) over ln(group median |error|), the groups keyed by
/// GPU and engine kind: `σ²_within` the pooled variance of the groups sharing a key,
/// `σ²_between` the variance of the keys' own levels. One group of a setup says less about
/// the next setup on that GPU than nine do; where the keys' levels do not differ beyond what
/// their groups' scatter explains (`σ²_between ≤ 0`), `Z = 0` and every key takes the
/// corpus' band. `keys`: one (key, ln median) per group. Returns `k` (infinite when the
/// between-key variance is not positive).
pub fn credibility_k(keys: &[(String, f64)]) -> f64 {
    let mut by: std::collections::BTreeMap<&str, Vec<f64>> = std::collections::BTreeMap::new();
    for (k, x) in keys {
        by.entry(k.as_str()).or_default().push(*x);
    }
    let n_total = keys.len() as f64;
    let n_keys = by.len() as f64;
    if n_keys < 2.0 || n_total <= n_keys {
        return f64::INFINITY;
    }
    let grand = keys.iter().map(|(_, x)| x).sum::<f64>() / n_total;
    let (mut ssw, mut ssb, mut sum_sq_n) = (0.0, 0.0, 0.0);
    for v in by.values() {
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        ssw += v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>();
        ssb += n * (mean - grand) * (mean - grand);
        sum_sq_n += n * n;
    }
    let msw = ssw / (n_total - n_keys);
    let msb = ssb / (n_keys - 1.0);
    let n0 = (n_total - sum_sq_n / n_total) / (n_keys - 1.0);
    let between = (msb - msw) / n0;
    if between > 0.0 && msw.is_finite() {
        msw / between
    } else {
        f64::INFINITY
    }
}

/// The uncalibrated 90% |error| per family for a GPU card id and an engine kind (`vllm`,
/// `sglang`): each family's corpus p90 scaled by `(m / a)^Z`, `m` the n-weighted median of this
/// GPU and engine's group medians |error| **of that family** (`validation/baseline.json`,
/// `groups[*].families`), `a` the corpus', `Z = n / (n + k)` the credibility of its `n` groups
/// with values of the family, `k` estimated on that family's group medians
/// ([`credibility_k`]): a GPU judged on one group (the RTX 5090 of the default scenario: one
/// point at concurrency 1) keeps most of the corpus' band, one judged on nine moves most of the
/// way to its own record. Each family on its own record: a GPU and engine whose TPOT is well
/// modelled and whose TTFT is not gets a narrow TPOT band and a wide TTFT one, where one scale
/// from every metric pooled would give both the middle. A family none of its groups has values
/// of takes the pooled scale (the same over the groups' medians of every metric).
pub fn uncalibrated_errors(gpu: &str, engine: &str) -> UncalibratedSource {
    let v: Value = serde_json::from_str(BASELINE).unwrap_or(Value::Null);
    uncalibrated_errors_in(&v, corpus_errors(), gpu, engine)
}

/// [`uncalibrated_errors`] from a baseline's groups and the corpus' (family, median, p90).
fn uncalibrated_errors_in(
    baseline: &Value,
    corpus: &[(&'static str, f64, f64)],
    gpu: &str,
    engine: &str,
) -> UncalibratedSource {
    let mut p90 = Named::new();
    let pooled = band_parts(baseline, gpu, engine, None);
    let Some(pooled) = pooled else {
        for &(f, _, p) in corpus {
            p90.push(f, p);
        }
        return UncalibratedSource {
            source: format!("uncalibrated: no published group of {gpu} with {engine}; servesim validate's corpus-wide p90 |error| per metric (VALIDATION.md §5)"),
            p90_abs_error: p90,
        };
    };
    let mut parts = Vec::new();
    for &(f, _, p) in corpus {
        let (b, own) = match band_parts(baseline, gpu, engine, Some(f)) {
            Some(b) => (b, true),
            None => (pooled.clone(), false),
        };
        let z = credibility(b.groups, b.k);
        p90.push(f, p * b.scale());
        parts.push(format!(
            "{f} {:.1}% against {:.1}%, Z {z:.2} ({} group(s), k = {:.2}{})",
            100.0 * b.own,
            100.0 * b.corpus,
            b.groups,
            b.k,
            if own { "" } else { "; none of its groups has this family: every metric pooled" }
        ));
    }
    UncalibratedSource {
        source: format!(
            "uncalibrated: servesim validate's error on {} published group(s) of {gpu} with {engine} (validation/baseline.json), each family's corpus p90 scaled by its median |error| on them over the corpus' to the power Z, the credibility of its groups (Z = n / (n + k), k from one-way random effects over the corpus' GPU and engine groups of that family): {}",
            pooled.groups,
            parts.join("; ")
        ),
        p90_abs_error: p90,
    }
}

/// `n / (n + k)`: 0 where `k` is infinite.
fn credibility(n: usize, k: f64) -> f64 {
    if k.is_finite() {
        n as f64 / (n as f64 + k)
    } else {
        0.0
    }
}

/// What an uncalibrated band is made of ([`uncalibrated_errors`]).
#[derive(Clone, Debug)]
struct BandParts {
    /// The n-weighted median of this GPU and engine's group medians |error| (a fraction).
    own: f64,
    /// The same over every group of the corpus.
    corpus: f64,
    /// This GPU and engine's groups.
    groups: usize,
    /// [`credibility_k`] of the corpus.
    k: f64,
}

impl BandParts {
    /// `(own / corpus)^Z`: what the corpus' p90 is multiplied by.
    fn scale(&self) -> f64 {
        (self.own / self.corpus).powf(credibility(self.groups, self.k))
    }
}

/// [`BandParts`] from a baseline (the embedded one: [`BASELINE`]), over the groups' medians of
/// every metric (`family` None) or of one family (`groups[*].families`, only the groups with
/// values of it); `None` where the GPU and engine have no such group (or a median is 0).
fn band_parts(baseline: &Value, gpu: &str, engine: &str, family: Option<&str>) -> Option<BandParts> {
    let groups = baseline["groups"].as_object().cloned().unwrap_or_default();
    let mut all: Vec<(f64, u64)> = Vec::new();
    let mut mine: Vec<(f64, u64)> = Vec::new();
    let mut keyed: Vec<(String, f64)> = Vec::new();
    for (k, g) in &groups {
        let g = match family {
            Some(f) => &g["families"][f],
            None => g,
        };
        let (Some(m), Some(n)) = (g["median_abs_error_pct"].as_f64(), g["n"].as_u64()) else { continue };
        all.push((m / 100.0, n));
        let parts: Vec<&str> = k.split(" | ").collect();
        let (g_gpu, g_engine) = (parts.get(1).copied().unwrap_or(""), parts.get(2).copied().unwrap_or(""));
        let g_gpu = g_gpu.split_whitespace().last().unwrap_or("");
        let kind = engine_kind_of(g_engine);
        if let Some(kind) = kind.filter(|_| m > 0.0) {
            keyed.push((format!("{g_gpu} {kind}"), (m / 100.0).ln()));
        }
        if g_gpu == gpu && kind == Some(engine) {
            mine.push((m / 100.0, n));
        }
    }
    let weighted_median = |v: &[(f64, u64)]| -> Option<f64> {
        let mut s = v.to_vec();
        s.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total: u64 = s.iter().map(|x| x.1).sum();
        let mut acc = 0;
        s.iter()
            .find(|x| {
                acc += x.1;
                2 * acc >= total
            })
            .map(|x| x.0)
    };
    let (own, corpus) = (weighted_median(&mine)?, weighted_median(&all)?);
    (own > 0.0 && corpus > 0.0).then(|| BandParts { own, corpus, groups: mine.len(), k: credibility_k(&keyed) })
}

/// Intervals for an uncalibrated prediction: the measured value lies within
/// `[pred / (1 + e), pred · (1 + e)]` for the family's 90% |error| `e`. `throughput_ceiling`:
/// the most a run's throughputs could grow by (an open loop: its duration over the span of its
/// arrivals, since no engine finishes before the last request arrives); an interval never
/// reaches above what the load offers. `None`: a closed loop, no such bound.
pub fn uncalibrated_intervals(
    center: &impl Metrics,
    src: &UncalibratedSource,
    throughput_ceiling: Option<f64>,
) -> Named<Interval> {
    let mut out = Named::new();
    for k in METRICS {
        let Some(c) = center.metric(k) else { continue };
        let e = src.p90_abs_error.get(metric_family(k.key())).copied().unwrap_or(1.0);
        let mut p95 = c * (1.0 + e);
        if let (Some(f), Metric::RequestThroughput | Metric::OutputThroughput | Metric::TotalTokenThroughput) =
            (throughput_ceiling, k)
        {
            p95 = p95.min(c * f.max(1.0));
        }
        out.push(k.key(), Interval { p05: c / (1.0 + e), p95 });
    }
    out
}

/// The `uncertainty` object of a report (`simulate --json`, each point of a check report):
/// each metric's interval, then where they came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReportIntervals {
    #[serde(flatten)]
    pub intervals: Named<Interval>,
    pub source: String,
}

impl ReportIntervals {
    pub fn new(intervals: &Named<Interval>, source: &str) -> ReportIntervals {
        ReportIntervals { intervals: intervals.clone(), source: source.to_string() }
    }
}

/// One line of text: the headline metrics' intervals.
pub fn report_line(intervals: &Named<Interval>, source: &str) -> String {
    let parts: Vec<String> = ["output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_e2el_ms"]
        .iter()
        .filter_map(|k| intervals.get(k).map(|i| format!("{k} {:.2}–{:.2}", i.p05, i.p95)))
        .collect();
    format!("90% interval: {} ({source})", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report with one metric, complete or not.
    struct R(f64, bool);
    impl Metrics for R {
        fn metric(&self, m: Metric) -> Option<f64> {
            (m == Metric::MeanTtftMs).then_some(self.0)
        }
        fn completed(&self) -> bool {
            self.1
        }
    }

    /// An open loop's throughput band stops at what its arrivals offer; its latency bands and a
    /// closed loop's throughput band are the error's.
    #[test]
    fn an_uncalibrated_throughput_band_stays_below_the_offered_load() {
        struct T;
        impl Metrics for T {
            fn metric(&self, m: Metric) -> Option<f64> {
                match m {
                    Metric::OutputThroughput => Some(1000.0),
                    Metric::MeanTtftMs => Some(50.0),
                    _ => None,
                }
            }
        }
        let mut p90 = Named::new();
        p90.push("throughput", 0.3);
        p90.push("ttft", 0.5);
        let src = UncalibratedSource { source: "test".into(), p90_abs_error: p90 };
        let open = uncalibrated_intervals(&T, &src, Some(1.05));
        let o = open.get("output_throughput").unwrap();
        assert!((o.p95 - 1050.0).abs() < 1e-9 && (o.p05 - 1000.0 / 1.3).abs() < 1e-9, "{o:?}");
        assert!((open.get("mean_ttft_ms").unwrap().p95 - 75.0).abs() < 1e-9);
        let closed = uncalibrated_intervals(&T, &src, None);
        assert!((closed.get("output_throughput").unwrap().p95 - 1300.0).abs() < 1e-9);
    }

    #[test]
    fn samples_whose_run_did_not_complete_are_left_out_of_the_interval() {
        let samples = [R(90.0, true), R(110.0, true), R(1.0, false), R(5000.0, false)];
        let i = intervals_from_samples(&R(100.0, true), &samples);
        let t = i.get("mean_ttft_ms").unwrap();
        assert!(t.p05 >= 90.0 && t.p95 <= 110.0, "{t:?}");
        // None complete: no interval, rather than one from partial metrics.
        let i = intervals_from_samples(&R(100.0, true), &[R(1.0, false)]);
        assert!(i.get("mean_ttft_ms").is_none());
    }

    #[test]
    fn the_baseline_table_is_embedded_and_falls_back() {
        let a = uncalibrated_errors("a100-80gb", "vllm");
        assert!(a.source.contains("published group"), "{}", a.source);
        let none = uncalibrated_errors("l40s", "sglang");
        assert!(none.source.contains("corpus-wide"), "{}", none.source);
        let tpot = corpus_errors().iter().find(|f| f.0 == "tpot").unwrap().2;
        assert_eq!(none.p90_abs_error.get("tpot"), Some(&tpot));
    }

    /// The credibility of a GPU × engine's own groups: a key whose groups differ from the
    /// others' beyond their own scatter gets a finite `k`; one group moves its band less
    /// than nine; keys that do not differ (between-key variance not positive) get none.
    #[test]
    fn a_band_moves_with_the_evidence_of_its_groups() {
        let key = |k: &str, xs: &[f64]| xs.iter().map(|&x| (k.to_string(), x)).collect::<Vec<_>>();
        let mut keys = key("a", &[0.0, 0.2, -0.2, 0.1]);
        keys.extend(key("b", &[2.0, 2.2, 1.8]));
        keys.extend(key("c", &[-1.0, -1.2]));
        let k = credibility_k(&keys);
        assert!(k.is_finite() && k > 0.0, "{k}");
        // The one-way random-effects estimate, written out for these nine values: k = σ²_w / σ²_b,
        // σ²_w the within-key mean square, σ²_b = (MSB − MSW) / n0.
        let groups: [&[f64]; 3] = [&[0.0, 0.2, -0.2, 0.1], &[2.0, 2.2, 1.8], &[-1.0, -1.2]];
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let grand = groups.iter().flat_map(|g| g.iter()).sum::<f64>() / 9.0;
        let ssw: f64 = groups.iter().map(|g| g.iter().map(|x| (x - mean(g)).powi(2)).sum::<f64>()).sum();
        let ssb: f64 = groups.iter().map(|g| g.len() as f64 * (mean(g) - grand).powi(2)).sum();
        let (msw, msb) = (ssw / (9.0 - 3.0), ssb / (3.0 - 1.0));
        let n0 = (9.0 - (16.0 + 9.0 + 4.0) / 9.0) / (3.0 - 1.0);
        let between = (msb - msw) / n0;
        assert!((k - msw / between).abs() < 1e-12, "{k} against {}", msw / between);
        // Within-key scatter as large as the keys' spread: no key earns its own band.
        let mut flat = key("a", &[0.0, 2.0]);
        flat.extend(key("b", &[0.1, 1.9]));
        assert!(credibility_k(&flat).is_infinite());
        // One key, or one group per key: nothing to estimate σ² within from.
        assert!(credibility_k(&key("a", &[0.0, 1.0])).is_infinite());
        assert!(credibility_k(&[("a".into(), 0.0), ("b".into(), 1.0)]).is_infinite());
        // On the committed corpus: the default scenario's GPU (three groups) keeps part of the
        // corpus' band, and a GPU judged on more groups moves further toward its record (TTFT,
        // whose classes differ: its k is finite).
        let corpus = corpus_errors().iter().find(|f| f.0 == "ttft").unwrap().2;
        let scale = |gpu: &str| uncalibrated_errors(gpu, "vllm").p90_abs_error.get("ttft").unwrap() / corpus;
        let embedded: Value = serde_json::from_str(BASELINE).unwrap();
        let (rtx, h200) = (
            band_parts(&embedded, "rtx-5090", "vllm", Some("ttft")).unwrap(),
            band_parts(&embedded, "h200", "vllm", Some("ttft")).unwrap(),
        );
        assert_eq!((rtx.groups, rtx.k), (3, h200.k));
        assert!(h200.groups >= 5 && rtx.k.is_finite());
        let src = uncalibrated_errors("rtx-5090", "vllm").source;
        assert!(src.contains("on 3 published group(s) of rtx-5090") && src.contains("ttft "), "{src}");
        for (parts, gpu) in [(&rtx, "rtx-5090"), (&h200, "h200")] {
            let own = parts.own / parts.corpus;
            let r = scale(gpu);
            // Strictly between its own record and the corpus', nearer its own with more groups.
            assert!((r - own) * (r - 1.0) < 0.0, "{gpu}: {r} against {own}");
            let z = (r.ln() / own.ln()).abs();
            assert!((z - credibility(parts.groups, parts.k)).abs() < 1e-9, "{gpu}: {z}");
        }
    }

    /// Each family's band follows its GPU and engine's record in that family: a class whose
    /// TTFT is modelled worse than the corpus' but whose other metrics (most of its values) are
    /// modelled better gets a TTFT band wider than the corpus', where the scale of every metric
    /// pooled (the rule before 2026-12-05) narrowed it; its TPOT band narrows; a family none of
    /// its groups has takes the pooled scale.
    #[test]
    fn each_family_band_follows_its_own_record() {
        // Groups "set | 1x gpu | engine": TTFT median, TPOT median, throughput median (%), with
        // TTFT on 2 values a group and the others on 5 each, so the pooled median is TPOT's.
        let rows = [
            ("a", "x", 60.0, 2.0, 2.0),
            ("b", "x", 70.0, 3.0, 3.0),
            ("c", "x", 50.0, 2.5, 2.5),
            ("d", "y", 20.0, 8.0, 8.0),
            ("e", "y", 25.0, 9.0, 9.0),
            ("f", "y", 30.0, 7.0, 7.0),
            ("g", "w", 35.0, 5.0, 5.0),
            ("h", "w", 40.0, 6.0, 6.0),
        ];
        let mut groups = serde_json::Map::new();
        for (set, gpu, ttft, tpot, thr) in rows {
            let mut all = vec![ttft; 2];
            all.extend([tpot; 5]);
            all.extend([thr; 5]);
            all.sort_by(f64::total_cmp);
            let mut fams = serde_json::json!({
                "ttft": {"median_abs_error_pct": ttft, "n": 2},
                "tpot": {"median_abs_error_pct": tpot, "n": 5},
            });
            // Class x has no throughput values.
            if gpu != "x" {
                fams["throughput"] = serde_json::json!({"median_abs_error_pct": thr, "n": 5});
            }
            let n = if gpu == "x" { 7 } else { 12 };
            let pooled = if gpu == "x" { tpot } else { (all[5] + all[6]) / 2.0 };
            groups.insert(
                format!("{set} | 1x {gpu} | vllm-0.11.0"),
                serde_json::json!({"median_abs_error_pct": pooled, "n": n, "families": fams}),
            );
        }
        let base = serde_json::json!({ "groups": groups });
        let corpus = [("ttft", 0.35, 2.0), ("tpot", 0.05, 0.2), ("throughput", 0.05, 0.15)];
        let x = uncalibrated_errors_in(&base, &corpus, "x", "vllm");
        let e = |f: &str| *x.p90_abs_error.get(f).unwrap();
        let pooled = band_parts(&base, "x", "vllm", None).unwrap();
        // The old rule, every family at the pooled scale, put TTFT's band below the corpus'.
        assert!(pooled.scale() < 1.0, "pooled: {pooled:?}");
        // Per family: TTFT's own record (60% against the corpus' 35%) widens its band.
        let ttft = band_parts(&base, "x", "vllm", Some("ttft")).unwrap();
        assert!(ttft.own > ttft.corpus && ttft.scale() > 1.0, "{ttft:?}");
        assert!(e("ttft") > 2.0, "{}", x.source);
        assert!((e("ttft") - 2.0 * ttft.scale()).abs() < 1e-12);
        assert!(e("tpot") < 0.2, "{}", x.source);
        // No throughput group of its own: the pooled scale.
        assert!((e("throughput") - 0.15 * pooled.scale()).abs() < 1e-12);
        assert!(x.source.contains("throughput") && x.source.contains("every metric pooled"), "{}", x.source);
    }

    /// The corpus block of the embedded baseline is read whole: every family, medians below
    /// p90s, as fractions.
    #[test]
    fn the_corpus_errors_come_from_the_embedded_baseline() {
        let c = corpus_errors();
        let v: Value = serde_json::from_str(BASELINE).unwrap();
        for (i, f) in FAMILIES.iter().enumerate() {
            assert_eq!(c[i].0, *f);
            assert!(c[i].1 > 0.0 && c[i].1 <= c[i].2, "{f}: {:?}", c[i]);
            assert_eq!(c[i].2, v["corpus"][f]["p90_abs_error_pct"].as_f64().unwrap() / 100.0);
            let d = corpus_discrepancy(f);
            assert_eq!(d, v["corpus"][f]["within_group_sd_ln"].as_f64().unwrap());
            assert!(d > 0.0 && d < 1.0, "{f}: {d}");
        }
        assert!(corpus_discrepancy("no such family").is_nan());
        // --discrepancy: the families named replaced, the others the corpus'; bad input refused
        // with what was expected.
        let d = crate::fit::Discrepancy::parse("ttft=0.25, e2el=0").unwrap();
        assert_eq!((d.of("ttft"), d.of("e2el"), d.of("tpot")), (0.25, 0.0, corpus_discrepancy("tpot")));
        assert!(d.source.contains("ttft, e2el"), "{}", d.source);
        for bad in ["", "ttft", "ttfx=0.1", "ttft=abc", "ttft=-0.1", "ttft=inf"] {
            let e = crate::fit::Discrepancy::parse(bad).unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
        assert!(crate::fit::Discrepancy::parse("ttfx=0.1").unwrap_err().contains("ttft, tpot, itl, e2el, throughput"));
        // The speed references' spread: ln 10, ln 10, ln(10 e^0.3) has mean 0.1 above ln 10 and
        // sample sd sqrt((0.01 + 0.01 + 0.04) / 2) = sqrt(0.03).
        let sd = speed_reference_sd_ln(&[10.0, 10.0, 10.0 * 0.3f64.exp()]).unwrap();
        assert!((sd - 0.03f64.sqrt()).abs() < 1e-12, "{sd}");
        assert_eq!(speed_reference_sd_ln(&[10.0, 11.0]), None);
        assert_eq!(speed_reference_sd_ln(&[10.0, 11.0, 0.0]), None);
        // Residuals: TTFT e^0.1 − 1 and e^−0.1 − 1 (RMS 0.1), TPOT e^0.2 − 1 (0.2); four values,
        // two coefficients fitted: √(4 / 2) times.
        let pt = |ttft: f64, tpot: f64| crate::profile::FitPointSummary {
            name: "p".into(),
            max_concurrency: None,
            measured: Named::new(),
            predicted: Named::new(),
            relative_residual: {
                let mut n = Named::new();
                n.push("mean_ttft_ms", ttft.exp() - 1.0);
                n.push("mean_tpot_ms", tpot.exp() - 1.0);
                n
            },
            target_noise: None,
            load: None,
        };
        let r = residual_sd_ln(&[pt(0.1, 0.2), pt(-0.1, 0.2)], 2);
        let get = |f: &str| r.iter().find(|(k, _)| *k == f).unwrap().1;
        assert!((get("ttft") - 0.1 * 2f64.sqrt()).abs() < 1e-12);
        assert!((get("tpot") - 0.2 * 2f64.sqrt()).abs() < 1e-12);
        assert!(r.iter().all(|(k, _)| k == "ttft" || k == "tpot"));
        // The larger of residual and speed σ per family; a p99 at twice the σ; a family with
        // neither is absent.
        // A p99 measured at the probes: its own σ against the speed σ; not measured: twice its family's.
        let mut tail = Named::new();
        tail.push("p99_itl_ms", 0.5);
        tail.push("p99_ttft_ms", 0.05);
        let (e, src) = live_model_error(&r, &tail, Some(0.2), 5);
        assert!((e["ttft"] - ((1.645 * 0.2f64).exp() - 1.0)).abs() < 1e-12);
        assert!((e["tpot"] - ((1.645 * 0.2 * 2f64.sqrt()).exp() - 1.0)).abs() < 1e-12);
        assert!((e["p99_ttft_ms"] - ((1.645 * 0.2f64).exp() - 1.0)).abs() < 1e-12, "speed wins: {e:?}");
        assert!((e["p99_itl_ms"] - ((1.645 * 0.5f64).exp() - 1.0)).abs() < 1e-12, "its own σ: {e:?}");
        assert!((e["p99_tpot_ms"] - ((3.29 * 0.2 * 2f64.sqrt()).exp() - 1.0)).abs() < 1e-12, "twice: {e:?}");
        assert!((e["itl"] - ((1.645 * 0.2f64).exp() - 1.0)).abs() < 1e-12, "speed only: {e:?}");
        assert!(!e.contains_key("p99_throughput_ms"));
        assert!(src.contains("over 5 runs") && src.contains("p99_itl_ms 0.500"), "{src}");
        let (e, _) = live_model_error(&r, &Named::new(), None, 0);
        assert!(!e.contains_key("itl") && e.contains_key("ttft"), "{e:?}");
        // tail_sd_ln: the p99s only, over the probes that measured them.
        let n = crate::fit::TARGETS.len();
        let at = |k: &str| crate::fit::TARGETS.iter().position(|t| t.key() == k).unwrap();
        let (mut m1, mut p1, mut m2, mut p2) = (vec![None; n], vec![None; n], vec![None; n], vec![None; n]);
        m1[at("p99_itl_ms")] = Some(10.0);
        p1[at("p99_itl_ms")] = Some(10.0 * 0.3f64.exp());
        m2[at("p99_itl_ms")] = Some(20.0);
        p2[at("p99_itl_ms")] = Some(20.0 * (-0.1f64).exp());
        m1[at("mean_itl_ms")] = Some(5.0);
        p1[at("mean_itl_ms")] = Some(50.0);
        let t = tail_sd_ln(&[m1, m2], &[p1, p2]);
        assert_eq!(t.iter().count(), 1, "only the measured p99: {t:?}");
        let v = t.iter().next().unwrap();
        assert_eq!(v.0, "p99_itl_ms");
        assert!((v.1 - (0.05f64).sqrt()).abs() < 1e-12, "{t:?}");
        // A p99 carries twice its family's discrepancy; a mean and a median once.
        let at = |k: &str| {
            crate::fit::Discrepancy::corpus().at(crate::fit::TARGETS.iter().position(|t| t.key() == k).unwrap())
        };
        assert_eq!(at("p99_ttft_ms"), 2.0 * corpus_discrepancy("ttft"));
        assert_eq!(at("median_ttft_ms"), corpus_discrepancy("ttft"));
        assert_eq!(at("mean_tpot_ms"), corpus_discrepancy("tpot"));
        assert_eq!(at("output_throughput"), corpus_discrepancy("throughput"));
    }

    /// A coefficient fitted to exactly 0 got the interval [0, 0] and samples of 0 however
    /// weakly the data determined it (the audit of 2026-12-06: `prefill_attention_us` in the
    /// native live profiles): it gets a one-sided interval from its prior's σ in linear space,
    /// and its samples spread over it; the other coefficients' samples do not move.
    #[test]
    fn a_coefficient_fitted_to_zero_gets_an_interval_and_spreads_its_samples() {
        let k = COEFFICIENT_NAMES.iter().position(|n| *n == "prefill_attention_us").unwrap();
        let mut cov = vec![vec![0.0; 8]; 8];
        for (i, row) in cov.iter_mut().enumerate() {
            row[i] = 0.04;
        }
        cov[k][k] = 0.72; // the prior's σ² in ln: the data say nothing of it at 0
        let mut values = [1.0; 8];
        values[k] = 0.0;
        let prior = CostCoefficients { prefill_attention_us: Some(0.01), ..Default::default() };
        let plain = ProfileUncertainty::new("test", &values, cov.clone(), 1.0);
        assert_eq!(plain.intervals["prefill_attention_us"], Interval { p05: 0.0, p95: 0.0 }, "the gap this closes");
        let u = plain.clone().bound_zero_coefficients(&values, &prior);
        let sigma = 0.01 * 0.72f64.sqrt();
        assert_eq!(u.at_zero_sigma_us.get("prefill_attention_us"), Some(&sigma));
        assert_eq!(u.intervals["prefill_attention_us"], Interval { p05: 0.0, p95: 1.645 * sigma });
        assert_eq!(u.at_zero_method.as_deref(), Some(AT_ZERO_METHOD));
        // The others keep their log-space intervals.
        assert_eq!(u.intervals["step_us"], plain.intervals["step_us"]);
        assert!(u.check().is_ok());
        // Sampling: the zero coefficient spreads as a half-normal of σ_lin (90% below 1.645 σ_lin),
        // the others are drawn exactly as before.
        let mut center = CostCoefficients::default();
        for (n, v) in COEFFICIENT_NAMES.iter().zip(values) {
            center.set(n, v);
        }
        let (a, b) = (u.sample(&center, 2000), plain.sample(&center, 2000));
        assert!(b.iter().all(|s| s.prefill_attention_us == Some(0.0)));
        let z: Vec<f64> = a.iter().map(|s| s.prefill_attention_us.unwrap()).collect();
        assert!(z.iter().all(|v| *v >= 0.0));
        let below = z.iter().filter(|v| **v <= 1.645 * sigma).count() as f64 / z.len() as f64;
        assert!((below - 0.90).abs() < 0.03, "{below}");
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((x.step_us, x.decode_token_us), (y.step_us, y.decode_token_us));
        }
        // Read back from JSON as a profile holds it, and checked.
        let v = serde_json::json!({"uncertainty": serde_json::to_value(&u).unwrap()});
        let back = ProfileUncertainty::from_profile_json(&v).unwrap().unwrap();
        assert_eq!(back.at_zero_sigma_us, u.at_zero_sigma_us);
        // A zero whose prior is 0 too stays at [0, 0]: nothing says it moves.
        let none = plain.clone().bound_zero_coefficients(&values, &CostCoefficients::default());
        assert!(none.at_zero_sigma_us.is_empty() && none.at_zero_method.is_none());
        // A σ for a coefficient the block does not cover, or a negative one, is refused by name.
        let mut bad = u.clone();
        bad.at_zero_sigma_us.insert("prefill_attention_us".into(), -1.0);
        assert!(bad.check().unwrap_err().contains("uncertainty.at_zero_sigma_us.prefill_attention_us"));
    }

    #[test]
    fn samples_are_seeded_and_follow_the_covariance() {
        let mut cov = vec![vec![0.0; 8]; 8];
        cov[2][2] = 0.04;
        let u = ProfileUncertainty::new("test", &[1.0; 8], cov, 1.0);
        let c = CostCoefficients { prefill_token_us: Some(100.0), step_us: Some(5.0), ..Default::default() };
        let a = u.sample(&c, 400);
        assert_eq!(a, u.sample(&c, 400));
        assert!(a.iter().all(|s| s.step_us == Some(5.0)));
        let logs: Vec<f64> = a.iter().map(|s| (s.prefill_token_us.unwrap() / 100.0).ln()).collect();
        let sd = (logs.iter().map(|x| x * x).sum::<f64>() / logs.len() as f64).sqrt();
        assert!((sd - 0.2).abs() < 0.03, "{sd}");
    }
}

/// The specs to simulate for an interval: `spec` with each of [`SAMPLES`] coefficient sets
/// drawn about `center` (the caller simulates them, in parallel if it likes, in this order).
pub fn sampled_specs(
    spec: &sim::config::SimSpec,
    u: &ProfileUncertainty,
    center: &CostCoefficients,
) -> Vec<sim::config::SimSpec> {
    u.sample(center, SAMPLES)
        .into_iter()
        .map(|c| {
            let mut s = spec.clone();
            // Every replica of a fleet runs the profile's deployment (checked where it is
            // loaded): each takes the drawn coefficients.
            s.overlay_cost(&c, sim::cost::CoefficientSource::Profile);
            s
        })
        .collect()
}

/// A spec's predicted report point.
pub fn predict_point(spec: &sim::config::SimSpec) -> PointReport {
    PointReport::of(spec, &sim::simulate(spec, sim::simulation::RunOptions::default()))
}

/// The prediction and its intervals, sequentially (the binary runs the samples in parallel).
pub fn predict_with_intervals(
    spec: &sim::config::SimSpec,
    u: &ProfileUncertainty,
    center: &CostCoefficients,
) -> (PointReport, Named<Interval>) {
    let c = predict_point(spec);
    let samples: Vec<PointReport> = sampled_specs(spec, u, center).iter().map(predict_point).collect();
    let i = u.intervals(&c, &samples);
    (c, i)
}

/// The coefficients of `spec` that its profile set (`CoefficientSource::Profile`): the ones
/// an interval varies; coefficients given inline in the scenario stay as they are.
pub fn profile_center(spec: &sim::config::SimSpec) -> CostCoefficients {
    let mut c = CostCoefficients::default();
    let all = spec.cost.coefficients();
    for (i, n) in COEFFICIENT_NAMES.iter().enumerate() {
        if spec.cost.sources[i] == sim::cost::CoefficientSource::Profile {
            c.set(n, all.get(n).unwrap_or(0.0));
        }
    }
    c
}

/// Where a profile's intervals came from, in `simulate`'s words: `members` coefficient sets
/// of the profile at `profile` (a path, as given), and its model-error term when it has one.
pub fn profile_source(u: &ProfileUncertainty, members: usize, profile: &str) -> String {
    let how = if u.ensemble.is_empty() { "covariance" } else { "ensemble" };
    let source = format!("the profile's coefficient {how}: {members} sets simulated ({profile})");
    match &u.model_error_source {
        Some(m) => format!("{source}; model error {m}"),
        None => source,
    }
}

/// The uncalibrated band of a spec: [`uncalibrated_errors`] for its GPU and engine.
pub fn uncalibrated_for(spec: &sim::config::SimSpec) -> UncalibratedSource {
    let kind = match spec.engine.engine_kind() {
        sim::config::EngineKind::Vllm => "vllm",
        sim::config::EngineKind::Sglang => "sglang",
    };
    // An inline card under a built-in id with other figures is another GPU (the `unjudged_gpu`
    // caveat says so): the corpus-wide band, not the record of the card whose id it reuses.
    let gpu = if sim::report::gpu_card_is_builtin(spec) { spec.gpu.id.as_str() } else { "(an inline GPU card)" };
    uncalibrated_errors(gpu, kind)
}

/// The knee of each member's own sweep (`sweep` with a profile's ensemble): the range of
/// the knee over the coefficient sets.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KneeRange {
    /// The lowest and highest knee concurrency among the members that reach one.
    pub min: Option<u64>,
    pub max: Option<u64>,
    /// Members simulated, and how many of them reach a knee within the sweep.
    pub members: usize,
    pub reached: usize,
    pub method: String,
}

impl KneeRange {
    /// The range in words, for a sweep whose last concurrency is `last`. Where only some sets
    /// reach a knee, their range is not the knee's range: it says how many did and that the
    /// others reached none up to `last` (1 of 32 at 16 read "Knee over the 32 coefficient sets:
    /// concurrency 16" beside a central sweep with no knee; an audit, 2026-12-07).
    pub fn words(&self, last: u32) -> String {
        let at =
            |lo: u64, hi: u64| if lo == hi { format!("concurrency {lo}") } else { format!("concurrency {lo}–{hi}") };
        match (self.min, self.max) {
            (Some(lo), Some(hi)) if self.reached == self.members => format!(
                "Knee over the {} coefficient sets: {} (each set's own sweep, the same rule; every set reaches a knee in this sweep).",
                self.members,
                at(lo, hi)
            ),
            (Some(lo), Some(hi)) => format!(
                "Knee over the {} coefficient sets: {} of them reach a knee in this sweep, at {}; the other {} reach none up to concurrency {last} (each set's own sweep, the same rule): {}; extend --concurrency to place it.",
                self.members,
                self.reached,
                at(lo, hi),
                self.members - self.reached,
                if 2 * self.reached < self.members {
                    "most sets put the knee past this sweep"
                } else {
                    "the knee may lie past this sweep"
                }
            ),
            _ => format!("Knee over the {} coefficient sets: none reaches a knee in this sweep.", self.members),
        }
    }
}

/// [`KneeRange`] of `members[m][i]`, member `m`'s report at `concurrency[i]`: the knee of
/// each member's series by the one rule (`sim::sweep::find_knee`), then its min and max.
pub fn knee_range<P: Metrics>(concurrency: &[u32], members: &[Vec<P>]) -> KneeRange {
    let knees: Vec<u64> = members
        .iter()
        .filter_map(|series| {
            let pts: Vec<sim::sweep::KneePoint> = concurrency
                .iter()
                .zip(series)
                .map(|(&c, p)| sim::sweep::KneePoint {
                    concurrency: f64::from(c),
                    output_throughput: p.metric(Metric::OutputThroughput).unwrap_or(0.0),
                    mean_ttft_ms: p.metric(Metric::MeanTtftMs).unwrap_or(0.0),
                })
                .collect();
            sim::sweep::find_knee(&pts).map(|i| u64::from(concurrency[i]))
        })
        .collect();
    KneeRange {
        min: knees.iter().min().copied(),
        max: knees.iter().max().copied(),
        members: members.len(),
        reached: knees.len(),
        method: "the knee of each coefficient set's own sweep (the same points, sim::sweep::find_knee), then the lowest and highest".into(),
    }
}

/// How an SLO fares against a prediction's 90% interval. For `metric <= X` the unfavourable
/// edge is the interval's upper one (`p95`), for `metric >= X` its lower one (`p05`); each
/// edge is a one-sided 95% bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SloVerdict {
    /// Met at the estimate and at the unfavourable edge: met across the interval.
    Meets,
    /// Met at the estimate, broken at the unfavourable edge: not robust.
    MeetsAtEstimateOnly,
    /// Broken at the estimate, met at the favourable edge.
    MissesAtEstimateOnly,
    /// Broken across the interval.
    Misses,
    /// The metric has no interval (not one of [`METRICS`]): met at the estimate, its
    /// robustness not judged.
    NoInterval,
    /// The metric has no interval: broken at the estimate.
    MissesNoInterval,
}

impl SloVerdict {
    /// The verdict of `value` (an interval `i`) against `metric <= bound` (`le`) or `>=`.
    pub fn of(value: f64, i: Option<&Interval>, le: bool, bound: f64) -> SloVerdict {
        let ok = |v: f64| if le { v <= bound } else { v >= bound };
        let Some(i) = i else {
            // Broken at the estimate is broken, interval or none (it was "meets at the estimate
            // only" on a rejected configuration; the audit of 2026-12-06).
            return if ok(value) { SloVerdict::NoInterval } else { SloVerdict::MissesNoInterval };
        };
        let (bad, good) = if le { (i.p95, i.p05) } else { (i.p05, i.p95) };
        match (ok(value), ok(bad), ok(good)) {
            (true, true, _) => SloVerdict::Meets,
            (true, false, _) => SloVerdict::MeetsAtEstimateOnly,
            (false, _, true) => SloVerdict::MissesAtEstimateOnly,
            (false, _, false) => SloVerdict::Misses,
        }
    }

    /// In words, for the text reports.
    pub fn words(self) -> &'static str {
        match self {
            SloVerdict::Meets => "meets across the 90% interval",
            SloVerdict::MeetsAtEstimateOnly => {
                "meets at the estimate only (the interval's unfavourable edge breaks it)"
            }
            SloVerdict::MissesAtEstimateOnly => "misses at the estimate (the interval's favourable edge meets it)",
            SloVerdict::Misses => "misses across the 90% interval",
            SloVerdict::NoInterval => "meets at the estimate; no interval for this metric (its robustness not judged)",
            SloVerdict::MissesNoInterval => "misses at the estimate; no interval for this metric",
        }
    }

    /// A configuration's verdict from its SLOs': the weakest of them (a missing interval ranks
    /// below an interval that meets and above one that breaks; no SLOs: met).
    pub fn overall(vs: &[SloVerdict]) -> SloVerdict {
        // The weakest, itself: a missing interval is not an interval that breaks the SLO.
        let rank = |v: &SloVerdict| match v {
            SloVerdict::Meets => 0,
            SloVerdict::NoInterval => 1,
            SloVerdict::MeetsAtEstimateOnly => 2,
            SloVerdict::MissesAtEstimateOnly => 3,
            SloVerdict::MissesNoInterval => 4,
            SloVerdict::Misses => 5,
        };
        vs.iter().copied().fold(SloVerdict::Meets, |w, v| if rank(&v) > rank(&w) { v } else { w })
    }
}

/// One SLO against a configuration's prediction and its interval (`tune`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SloCheck {
    pub slo: String,
    pub value: f64,
    /// The metric's 90% interval (absent when the metric has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<Interval>,
    pub verdict: SloVerdict,
}

#[cfg(test)]
mod interval_tests {
    use super::*;

    /// A coefficient interval from an ensemble holds the fitted value even where the members'
    /// percentiles do not (`step_us 3985.2` printed beside `784.7 – 3897.8`; an audit,
    /// 2026-12-07), and a profile whose coefficient lies outside its own interval (edited after
    /// its fit: step_us ×3) is refused naming the coefficient, its value and its interval.
    #[test]
    fn a_coefficient_interval_holds_its_estimate_and_an_edited_one_is_refused() {
        let n = COEFFICIENT_NAMES.len();
        let values: Vec<f64> = (0..n).map(|k| 100.0 * (k + 1) as f64).collect();
        // Every member below the fit on step_us.
        let members: Vec<Vec<f64>> =
            (0..32).map(|m| values.iter().map(|v| v * (0.2 + 0.02 * m as f64)).collect()).collect();
        let plain = ProfileUncertainty::new("t", &values, vec![vec![0.01; n]; n], 1.0);
        let u = plain.clone().with_ensemble(members.clone(), "m", &values);
        let i = u.intervals["step_us"];
        assert!(quantile(&members.iter().map(|m| m[0]).collect::<Vec<_>>(), 0.95) < values[0], "the gap this closes");
        assert_eq!(i.p95, values[0], "{i:?}");
        let mut c = CostCoefficients::default();
        for (k, name) in COEFFICIENT_NAMES.iter().enumerate() {
            c.set(name, values[k]);
        }
        u.holds(&c).unwrap();
        c.set("step_us", 3.0 * values[0]);
        let err = u.holds(&c).unwrap_err();
        assert!(
            err.starts_with(
                "coefficients.step_us: 300 lies outside its own 90% interval, uncertainty.intervals.step_us"
            ),
            "{err}"
        );
        assert!(err.contains("refit it") && err.contains("drop its uncertainty block"), "{err}");
    }

    /// A fitted value further from its measurement than 3 times the noise the fit gave it is a
    /// misfit; a point without its own noise (a live fit's) is not judged.
    #[test]
    fn values_off_by_more_than_their_noise_are_misfits() {
        let point =
            |name: &str, resid: &[(&str, f64)], noise: Option<&[(&str, f64)]>| crate::profile::FitPointSummary {
                name: name.into(),
                max_concurrency: Some(1),
                measured: Named::new(),
                predicted: Named::new(),
                relative_residual: Named(resid.iter().map(|(k, v)| (k.to_string(), *v)).collect()),
                target_noise: noise.map(|n| Named(n.iter().map(|(k, v)| (k.to_string(), *v)).collect())),
                load: None,
            };
        let pts = [
            point(
                "a",
                &[("mean_ttft_ms", 54.28), ("mean_tpot_ms", 0.02)],
                Some(&[("mean_ttft_ms", 0.3), ("mean_tpot_ms", 0.05)]),
            ),
            point("b", &[("output_throughput", 0.2)], Some(&[("output_throughput", 0.05)])),
            point("live", &[("mean_ttft_ms", 5.0)], None),
        ];
        let m = crate::profile::misfits(&pts);
        let got: Vec<(&str, &str)> = m.iter().map(|x| (x.point.as_str(), x.metric.as_str())).collect();
        assert_eq!(got, [("a", "mean_ttft_ms"), ("b", "output_throughput")]);
        assert!((m[0].sigmas - (55.28f64).ln() / 0.3).abs() < 1e-9);
    }

    #[test]
    fn a_knee_only_some_sets_reach_is_said_so_not_given_as_the_range() {
        let kr = |min: Option<u64>, max: Option<u64>, reached: usize| KneeRange {
            min,
            max,
            members: 32,
            reached,
            method: String::new(),
        };
        let one = kr(Some(16), Some(16), 1).words(64);
        assert!(one.contains("1 of them reach a knee in this sweep, at concurrency 16"), "{one}");
        assert!(one.contains("the other 31 reach none up to concurrency 64"), "{one}");
        assert!(one.contains("most sets put the knee past this sweep"), "{one}");
        let most = kr(Some(16), Some(64), 20).words(64);
        assert!(
            most.contains("20 of them") && most.contains("concurrency 16–64") && most.contains("may lie past"),
            "{most}"
        );
        let all = kr(Some(16), Some(64), 32).words(64);
        assert!(all.starts_with("Knee over the 32 coefficient sets: concurrency 16–64"), "{all}");
        assert!(all.contains("every set reaches a knee"), "{all}");
        assert!(kr(None, None, 0).words(64).contains("none reaches a knee"));
    }

    #[test]
    fn slo_verdicts_read_the_unfavourable_edge() {
        let i = Interval { p05: 80.0, p95: 120.0 };
        assert_eq!(SloVerdict::of(100.0, Some(&i), true, 130.0), SloVerdict::Meets);
        assert_eq!(SloVerdict::of(100.0, Some(&i), true, 110.0), SloVerdict::MeetsAtEstimateOnly);
        assert_eq!(SloVerdict::of(100.0, Some(&i), true, 90.0), SloVerdict::MissesAtEstimateOnly);
        assert_eq!(SloVerdict::of(100.0, Some(&i), true, 70.0), SloVerdict::Misses);
        assert_eq!(SloVerdict::of(100.0, Some(&i), false, 70.0), SloVerdict::Meets);
        assert_eq!(SloVerdict::of(100.0, Some(&i), false, 90.0), SloVerdict::MeetsAtEstimateOnly);
        assert_eq!(SloVerdict::of(100.0, Some(&i), false, 110.0), SloVerdict::MissesAtEstimateOnly);
        assert_eq!(SloVerdict::of(100.0, Some(&i), false, 130.0), SloVerdict::Misses);
        assert_eq!(SloVerdict::of(100.0, None, true, 130.0), SloVerdict::NoInterval);
        use SloVerdict::*;
        assert_eq!(SloVerdict::overall(&[Meets, Meets]), Meets);
        assert_eq!(SloVerdict::overall(&[Meets, NoInterval]), NoInterval);
        assert_eq!(SloVerdict::overall(&[NoInterval, MeetsAtEstimateOnly]), MeetsAtEstimateOnly);
        assert_eq!(SloVerdict::of(100.0, None, true, 90.0), MissesNoInterval);
        assert_eq!(SloVerdict::overall(&[MeetsAtEstimateOnly, MissesNoInterval]), MissesNoInterval);
        assert_eq!(SloVerdict::overall(&[MeetsAtEstimateOnly, Misses]), Misses);
        assert_eq!(SloVerdict::overall(&[]), Meets);
    }
}

#[cfg(test)]
mod block_tests {
    use super::*;
    use serde_json::json;

    fn block(edit: impl FnOnce(&mut Value)) -> Result<Option<ProfileUncertainty>, String> {
        let mut u = json!({
            "method": "m",
            "coefficients": COEFFICIENT_NAMES,
            "log_covariance": [],
            "chi2_per_dof": 1.0,
            "intervals": {},
            "ensemble": [[8000.0, 4.0, 30.0, 150.0, 0.001, 0.5, 1500.0, 40.0], [9000.0, 4.0, 30.0, 160.0, 0.001, 0.5, 1500.0, 40.0]],
            "model_error_p90": {"ttft": 0.3, "p99_tpot_ms": 0.5}
        });
        edit(&mut u);
        ProfileUncertainty::from_profile_json(&json!({ "uncertainty": u }))
    }

    fn err(edit: impl FnOnce(&mut Value)) -> String {
        block(edit).expect_err("the block should be refused")
    }

    /// A block that cannot give intervals is an error naming its field, never a panic when
    /// sampled, an interval of NaN, or no interval at all (the fuzzing of 2026-12-04).
    #[test]
    fn an_unusable_uncertainty_block_is_an_error_naming_its_field() {
        assert!(block(|_| {}).unwrap().is_some());
        assert!(ProfileUncertainty::from_profile_json(&json!({"uncertainty": null})).unwrap().is_none());
        assert!(ProfileUncertainty::from_profile_json(&json!({})).unwrap().is_none());
        let cases: Vec<(Box<dyn FnOnce(&mut Value)>, &str)> = vec![
            (Box::new(|u| u["ensemble"][0] = json!([8000.0, 4.0])), "uncertainty.ensemble[0]: 2 values, expected 8"),
            (Box::new(|u| u["ensemble"] = json!([])), "neither an ensemble nor a log_covariance"),
            (
                Box::new(|u| {
                    u["ensemble"] = json!([]);
                    u["log_covariance"] = json!([[1.0]]);
                }),
                "uncertainty.log_covariance: expected a 8×8 matrix",
            ),
            (
                Box::new(|u| {
                    let mut m = vec![vec![0.0; 8]; 8];
                    m[2][2] = -0.1;
                    u["log_covariance"] = json!(m);
                }),
                "uncertainty.log_covariance[2][2]",
            ),
            (
                Box::new(|u| {
                    let mut m = vec![vec![0.0; 8]; 8];
                    m[0][1] = 0.1;
                    u["log_covariance"] = json!(m);
                }),
                "symmetric",
            ),
            (Box::new(|u| u["model_error_p90"]["ttft"] = json!(-5.0)), "uncertainty.model_error_p90.ttft"),
            (Box::new(|u| u["model_error_p90"] = json!({"foo": 0.5})), "uncertainty.model_error_p90.foo: unknown"),
            (Box::new(|u| u["ensemble"][0] = json!(vec![0.0; 8])), "must cost at least 1 µs"),
            (Box::new(|u| u["ensemble"][1][3] = json!(-1.0)), "uncertainty.ensemble[1].decode_token_us"),
            (Box::new(|u| u["ensemble"][1][6] = json!(1e9)), "uncertainty.ensemble[1].request_ingress_us"),
            (Box::new(|u| u["coefficients"][3] = json!("nope")), "uncertainty.coefficients[3]: unknown coefficient"),
            (
                Box::new(|u| u["intervals"] = json!({"step_us": {"p05": 2.0, "p95": 1.0}})),
                "uncertainty.intervals.step_us",
            ),
            (
                Box::new(|u| u.as_object_mut().unwrap().clear()),
                "uncertainty: not a valid uncertainty block: missing field `method`",
            ),
            // A field of the wrong shape is named by its path inside the block, with what was
            // expected (they had all said "not a valid uncertainty block" and serde's words alone).
            (
                Box::new(|u| u["ensemble"][0] = json!({"step_us": 8000.0})),
                "uncertainty.ensemble[0]: not a valid uncertainty block: invalid type: map, expected a sequence",
            ),
            (
                Box::new(|u| u["ensemble"][1][2] = json!("30")),
                "uncertainty.ensemble[1][2]: not a valid uncertainty block: invalid type: string \"30\", expected f64",
            ),
            (
                Box::new(|u| u["log_covariance"] = json!({})),
                "uncertainty.log_covariance: not a valid uncertainty block",
            ),
            (
                Box::new(|u| u["intervals"] = json!({"step_us": [1.0, 2.0]})),
                "uncertainty.intervals.step_us: not a valid uncertainty block: expected an object of named fields",
            ),
            (
                Box::new(|u| u["intervals"] = json!({"step_us": {"p05": 1.0}})),
                "uncertainty.intervals.step_us: not a valid uncertainty block: missing field `p95`",
            ),
            (
                Box::new(|u| u["model_error_p90"]["ttft"] = json!("0.3")),
                "uncertainty.model_error_p90.ttft: not a valid uncertainty block: invalid type: string",
            ),
            (Box::new(|u| u["chi2_per_dof"] = json!(null)), "uncertainty.chi2_per_dof: not a valid uncertainty block"),
            (
                Box::new(|u| u["coefficients"][0] = json!(5)),
                "uncertainty.coefficients[0]: not a valid uncertainty block",
            ),
        ];
        for (edit, want) in cases {
            let e = err(edit);
            assert!(e.contains(want), "{e:?} does not say {want:?}");
        }
    }

    /// Every profile committed under validation/ reads and passes the check.
    #[test]
    fn the_committed_profiles_uncertainty_blocks_pass() {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "json") {
                    out.push(p);
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../validation");
        let mut files = Vec::new();
        walk(&root, &mut files);
        files.sort();
        let mut n = 0;
        for f in files {
            let Ok(v) = serde_json::from_str::<Value>(&std::fs::read_to_string(&f).unwrap()) else { continue };
            if v.get("format").and_then(Value::as_str) != Some("servesim-profile") || v.get("uncertainty").is_none() {
                continue;
            }
            ProfileUncertainty::from_profile_json(&v).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            n += 1;
        }
        assert!(n >= 3, "found {n} committed profiles with an uncertainty block");
    }
}
