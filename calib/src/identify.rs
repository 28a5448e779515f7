//! What the data determine, a fit that moves only that, and the fit's uncertainty.
//!
//! The fit works on log-factors `x_k = ln(c_k / prior_k)` of the eight cost coefficients,
//! with a Gaussian prior `x_k ~ N(0, σ_k²)`: σ of the prior actually used ([`prior_sigmas`]:
//! [`PRIOR_SIGMA`] for the linear roofline prior, the same rules on the composed cost's corpus
//! errors for a fit that corrects the composed cost), each with where it comes from.
//!
//! 1. **Sensitivity** ([`jacobian`]): how each coefficient moves each measured target at each
//!    point: central finite differences of `ln(simulated target)` in `x_k` (±[`STEP`]) through
//!    the simulator, divided by the target's noise. Whitened by the prior
//!    (`J_w = J · diag(σ)`), a unit move along a column is one prior σ.
//! 2. **Identifiability**: the SVD `J_w = U S Vᵀ`. A right-singular direction whose singular
//!    value is at least [`DETERMINED`] is one the data constrain more tightly than the prior
//!    does; the others are undetermined. Per coefficient, the share of its prior variance the
//!    data remove (`1 − posterior var / prior var`, posterior `(J_wᵀJ_w + I)⁻¹`) says whether
//!    it came from the data (a share of at least one half) or from the prior; a coefficient
//!    determined only in combination with another (posterior correlation beyond ±0.7) is
//!    named with it.
//! 3. **Fit** ([`fit_with_prior`]): Levenberg–Marquardt on the squared residuals plus the
//!    prior term `Σ (x_k/σ_k)²`, searching only the determined directions (the rest stay at
//!    the prior). A single TTFT moved by both the per-token prefill and the per-request
//!    ingress is then split as the prior weighs them: each coefficient moves in proportion
//!    to its prior variance times its effect on the target.
//! 4. **Uncertainty** (Laplace / Gauss–Newton): at the fit, the covariance of `x` is
//!    `diag(σ) (J_wᵀJ_w / s² + I)⁻¹ diag(σ)`, with `J` recomputed there and `s²` the
//!    residuals' χ² per degree of freedom when above 1 (the data disagree with the model by
//!    more than the target noise says). Intervals on predictions come from sampling this
//!    covariance through the simulator ([`crate::uncertainty`]).

use nalgebra::{DMatrix, DVector};
use sim::cost::{CostModel, COEFFICIENT_NAMES};

use crate::fit::{apply, FitPoint, Free, TARGETS, TARGET_NOISE};

/// The prior's uncertainty per coefficient, for a fit whose prior is the **linear roofline
/// prior** of `sim::cost` ([`PriorKind::Linear`]: live fits, and fits on results without a
/// composed cost, whose coefficients replace the step cost): σ of `ln(true / prior)`, and
/// where it comes from. `servesim validate --set 'cost.prior={}'` measures that prior on the
/// published corpus (VALIDATION.md §5, "before"): TPOT p90 |error| 50%, TTFT p90 306%
/// ([`LINEAR_PRIOR_P90`]). A fit that corrects the composed kernel cost
/// ([`PriorKind::Composed`]) takes the same rules ([`sigma_from_ttft_p90`],
/// [`sigma_from_tpot_p90`]) from the composed cost's own corpus errors ([`prior_sigmas`]).
pub const PRIOR_SIGMA: [(&str, f64, &str); 8] = [
    ("step_us", 0.5, "the linear prior's decode step: TPOT p90 |error| 50% on the validate corpus (σ 0.25 of the whole step), doubled for one term of it"),
    ("per_seq_us", 1.4, "an order of magnitude (90% within ×10): BLIS's per-request CPU time on vLLM 0.15, another engine release and host"),
    ("prefill_token_us", 0.85, "the linear prior's TTFT: p90 |error| 306% on the validate corpus (ln 4.06 / 1.645)"),
    ("decode_token_us", 0.5, "the linear prior's decode step: TPOT p90 |error| 50% on the validate corpus (σ 0.25 of the whole step), doubled for one term of it"),
    ("prefill_attention_us", 0.85, "the linear prior's TTFT: p90 |error| 306% on the validate corpus (ln 4.06 / 1.645)"),
    ("decode_kv_us", 0.5, "the linear prior's decode step: TPOT p90 |error| 50% on the validate corpus (σ 0.25 of the whole step), doubled for one term of it"),
    ("request_ingress_us", 2.8, "two orders of magnitude (90% within ×100): published per-request overheads range from BLIS's 4 µs (vLLM 0.15) to the 100 ms and more a single-request TTFT on A100-40GB implied (issue #13)"),
    ("output_token_us", 1.4, "an order of magnitude (90% within ×10): BLIS's per-output-token front-end time on vLLM 0.15"),
];

/// The linear roofline prior's p90 |error| on the validate corpus, TTFT and TPOT (VALIDATION.md
/// §5, "before"), which [`PRIOR_SIGMA`]'s decode-step and prefill σ were set from (rounded:
/// the rule gives 0.49 and 0.85).
pub const LINEAR_PRIOR_P90: (f64, f64) = (3.06, 0.50);

/// The coefficients of the decode step, whose σ the prior's TPOT error states.
pub const DECODE_STEP_TERMS: [&str; 3] = ["step_us", "decode_token_us", "decode_kv_us"];

/// The coefficients of the prefill, whose σ the prior's TTFT error states.
pub const PREFILL_TERMS: [&str; 2] = ["prefill_token_us", "prefill_attention_us"];

/// z of a normal's 95th percentile: a p90 |error| is 1.645 σ.
const Z90: f64 = 1.645;

/// σ of a prefill term from the prior's TTFT p90 |error| `p90` (a fraction): `ln(1 + p90) / 1.645`.
pub fn sigma_from_ttft_p90(p90: f64) -> f64 {
    (1.0 + p90).ln() / Z90
}

/// σ of one decode-step term from the prior's TPOT p90 |error| `p90`: the whole step's
/// `ln(1 + p90) / 1.645`, doubled for one term of it.
pub fn sigma_from_tpot_p90(p90: f64) -> f64 {
    2.0 * (1.0 + p90).ln() / Z90
}

/// Which prior a fit shrinks toward, and so whose corpus errors state its σ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PriorKind {
    /// The linear roofline prior: [`PRIOR_SIGMA`] as written.
    Linear,
    /// The composed measured-kernel cost, linearised ([`linear_prior`]), which the fit corrects
    /// (`cost_mode: corrects_composed`): the decode-step and prefill σ from the composed cost's
    /// corpus p90s (`crate::uncertainty::corpus_errors`, from `validation/baseline.json`, `servesim validate`).
    Composed,
}

impl PriorKind {
    /// The kind of a fit's prior: composed when it corrects a composed cost (it has a reference,
    /// as the profile's `cost_mode` says), else linear.
    pub fn of(prior: &CostModel) -> PriorKind {
        if prior.reference.is_some() {
            PriorKind::Composed
        } else {
            PriorKind::Linear
        }
    }
}

/// One coefficient's prior σ (of `ln(true / prior)`) and its derivation.
#[derive(Clone, Debug, PartialEq)]
pub struct PriorSigma {
    pub coefficient: &'static str,
    pub sigma: f64,
    pub source: String,
}

/// The composed cost's p90 |error| of a metric family on the validate corpus (`uncertainty::corpus_errors`).
fn composed_p90(family: &str) -> f64 {
    crate::uncertainty::corpus_errors().iter().find(|f| f.0 == family).map_or(f64::NAN, |f| f.2)
}

/// The prior σ of each of [`COEFFICIENT_NAMES`], with where it comes from, for a prior of `kind`.
///
/// Linear: [`PRIOR_SIGMA`]. Composed: the same rules on the composed cost's corpus errors: the
/// decode-step terms ([`DECODE_STEP_TERMS`]) `2 ln(1 + TPOT p90) / 1.645`, the prefill terms
/// ([`PREFILL_TERMS`]) `ln(1 + TTFT p90) / 1.645`; the per-request and per-output-token terms,
/// whose σ come from other sources than the corpus, as in [`PRIOR_SIGMA`].
pub fn prior_sigmas(kind: PriorKind) -> Vec<PriorSigma> {
    let (ttft, tpot) = (composed_p90("ttft"), composed_p90("tpot"));
    COEFFICIENT_NAMES
        .iter()
        .map(|n| {
            let (_, s, src) = PRIOR_SIGMA.iter().find(|p| p.0 == *n).copied().unwrap_or((n, 1.0, "no stated prior: σ 1"));
            let (sigma, source) = match kind {
                PriorKind::Composed if DECODE_STEP_TERMS.contains(n) => (
                    sigma_from_tpot_p90(tpot),
                    format!(
                        "the composed kernel cost's decode step (the prior this fit corrects): TPOT p90 |error| {:.1}% on the validate corpus (validation/baseline.json's corpus block, servesim validate; σ ln {:.3} / 1.645 = {:.3} of the whole step), doubled for one term of it",
                        100.0 * tpot,
                        1.0 + tpot,
                        sigma_from_tpot_p90(tpot) / 2.0
                    ),
                ),
                PriorKind::Composed if PREFILL_TERMS.contains(n) => (
                    sigma_from_ttft_p90(ttft),
                    format!(
                        "the composed kernel cost's TTFT (the prior this fit corrects): p90 |error| {:.1}% on the validate corpus (validation/baseline.json's corpus block, servesim validate; ln {:.3} / 1.645)",
                        100.0 * ttft,
                        1.0 + ttft
                    ),
                ),
                _ => (s, src.to_string()),
            };
            PriorSigma { coefficient: n, sigma, source }
        })
        .collect()
}

/// The finite-difference step in log-coefficient (±10%).
pub const STEP: f64 = 0.1;

/// A whitened singular value at least this large: the data constrain the direction at least as
/// tightly as the prior does.
pub const DETERMINED: f64 = 1.0;

/// The share of a coefficient's prior variance the data must remove for it to count as fitted.
pub const DATA_SHARE: f64 = 0.5;

/// The method behind every interval of a fit.
pub const INTERVAL_METHOD: &str = "Laplace (Gauss-Newton) covariance of the log-coefficients at the fit: diag(σ_prior) (J_wᵀJ_w/s² + I)⁻¹ diag(σ_prior), J by central finite differences (±10%) of ln(simulated target)/target_noise through the simulator, s² = max(1, χ²/dof) of the residuals; intervals on predictions by sampling it (seeded) through the simulator";

/// The prior σ of each of [`COEFFICIENT_NAMES`] for a prior of `kind` ([`prior_sigmas`]).
pub fn prior_sigma(kind: PriorKind) -> Vec<f64> {
    prior_sigmas(kind).into_iter().map(|p| p.sigma).collect()
}

/// One measured value a fit uses: (point index, target index in [`TARGETS`], measured value,
/// its noise: the relative error the fit divides its log error by).
pub type Row = (usize, usize, f64, f64);

/// The measured (point, target) pairs a fit uses, each with [`TARGET_NOISE`] (live measurements).
pub fn rows(points: &[FitPoint]) -> Vec<Row> {
    rows_with_noise(points, &[])
}

/// The measured (point, target) pairs a fit uses, each with its noise `noise[point][target]`
/// (for values read from result files, `crate::fit::published_noise`); a point or target
/// `noise` does not cover takes [`TARGET_NOISE`].
pub fn rows_with_noise(points: &[FitPoint], noise: &[Vec<f64>]) -> Vec<Row> {
    let mut r = Vec::new();
    for (i, p) in points.iter().enumerate() {
        for (t, m) in p.measured.iter().enumerate() {
            if let Some(m) = m.filter(|m| *m > 0.0 && m.is_finite()) {
                let s = noise.get(i).and_then(|n| n.get(t)).copied().filter(|s| *s > 0.0 && s.is_finite());
                r.push((i, t, m, s.unwrap_or(TARGET_NOISE[t])));
            }
        }
    }
    r
}

/// `prior` with the coefficients at log-factors `x` (in [`COEFFICIENT_NAMES`] order).
pub fn cost_at(prior: &CostModel, x: &[f64]) -> CostModel {
    let free: Vec<Free> = COEFFICIENT_NAMES.iter().map(|c| Free::one(c)).collect();
    apply(prior, &free, x)
}

/// `ln(pred / measured) / noise` per row (None where the simulation gave no positive value).
fn residuals(points: &[FitPoint], rows: &[Row], cost: &CostModel, evals: &mut usize) -> Option<DVector<f64>> {
    let mut preds: Vec<Option<Vec<Option<f64>>>> = vec![None; points.len()];
    let mut out = Vec::with_capacity(rows.len());
    for &(i, t, m, noise) in rows {
        if preds[i].is_none() {
            *evals += 1;
            preds[i] = Some(points[i].predict(cost));
        }
        let q = preds[i].as_ref().unwrap()[t].filter(|q| *q > 0.0 && q.is_finite())?;
        out.push((q / m).ln() / noise);
    }
    Some(DVector::from_vec(out))
}

/// The whitened Jacobian (rows × directions) of the residuals at `x` along `dirs` (each a
/// move of the log-factors per unit).
fn jacobian_along(
    points: &[FitPoint],
    rows: &[Row],
    prior: &CostModel,
    x: &[f64],
    dirs: &[Vec<f64>],
    evals: &mut usize,
) -> DMatrix<f64> {
    let mut j = DMatrix::zeros(rows.len(), dirs.len());
    for (k, d) in dirs.iter().enumerate() {
        let at = |s: f64| -> Vec<f64> { x.iter().zip(d).map(|(a, b)| a + s * b).collect() };
        let plus = residuals(points, rows, &cost_at(prior, &at(STEP)), evals);
        let minus = residuals(points, rows, &cost_at(prior, &at(-STEP)), evals);
        if let (Some(p), Some(m)) = (plus, minus) {
            j.set_column(k, &((p - m) / (2.0 * STEP)));
        }
    }
    j
}

/// The whitened Jacobian at `x`: one column per coefficient, a unit move being one prior σ
/// (`sigma`, in [`COEFFICIENT_NAMES`] order).
pub fn jacobian(
    points: &[FitPoint],
    rows: &[Row],
    prior: &CostModel,
    sigma: &[f64],
    x: &[f64],
    evals: &mut usize,
) -> DMatrix<f64> {
    let dirs: Vec<Vec<f64>> =
        (0..sigma.len()).map(|k| (0..sigma.len()).map(|i| if i == k { sigma[k] } else { 0.0 }).collect()).collect();
    jacobian_along(points, rows, prior, x, &dirs, evals)
}

/// Whether one coefficient came from the data, and why.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Identifiability {
    pub coefficient: &'static str,
    /// The data determine it (they remove at least half its prior variance).
    pub determined: bool,
    /// The share of its prior variance the data remove (0: prior only, 1: data only).
    pub data_share: f64,
    /// σ of ln(true / prior) before the data, and where it comes from (for the prior the fit
    /// uses: [`prior_sigmas`]).
    pub prior_sigma_log: f64,
    pub prior_sigma_source: String,
    pub why: String,
    /// The fitted coefficient ÷ its prior value. An undetermined coefficient moves when it
    /// shares a determined direction with one the data do determine (the fit searches
    /// directions, not coefficients): then it is [`PARTLY_DATA`], not the prior.
    pub fitted_over_prior: f64,
}

/// How far (in ln) an undetermined coefficient may move in the fit and still be reported as
/// the prior's value: 1%.
pub const PRIOR_MOVE_LN: f64 = 0.01;

/// The profile's `coefficient_sources` label of a coefficient the data do not determine
/// alone, moved by the fit along a direction they do determine (split as the prior weighs it).
pub const PARTLY_DATA: &str = "partly data";

impl Identifiability {
    /// `data` (determined), [`PARTLY_DATA`] (moved more than [`PRIOR_MOVE_LN`] along a
    /// determined direction) or `prior`.
    pub fn source(&self) -> &'static str {
        if self.determined {
            "data"
        } else if self.fitted_over_prior.ln().abs() > PRIOR_MOVE_LN {
            PARTLY_DATA
        } else {
            "prior"
        }
    }
}

/// The posterior (whitened) covariance `(J_wᵀJ_w / s² + I)⁻¹`.
fn posterior_whitened(jw: &DMatrix<f64>, s2: f64) -> DMatrix<f64> {
    let n = jw.ncols();
    let info = jw.transpose() * jw / s2 + DMatrix::identity(n, n);
    info.try_inverse().unwrap_or_else(|| DMatrix::identity(n, n))
}

/// What the data determine, coefficient by coefficient, from the Jacobian whitened by `sigma`.
pub fn identifiability(
    points: &[FitPoint],
    rows: &[Row],
    jw: &DMatrix<f64>,
    sigma: &[PriorSigma],
) -> Vec<Identifiability> {
    let post = posterior_whitened(jw, 1.0);
    let n = COEFFICIENT_NAMES.len();
    let label = |r: usize| {
        let (i, t, _, _) = rows[r];
        format!("{} at {}", TARGETS[t], points[i].name)
    };
    (0..n)
        .map(|k| {
            let share = (1.0 - post[(k, k)]).clamp(0.0, 1.0);
            let determined = share >= DATA_SHARE;
            // What moves it: the rows it moves most.
            let mut moved: Vec<(usize, f64)> = (0..rows.len()).map(|r| (r, jw[(r, k)].abs())).filter(|(_, v)| *v > 0.05).collect();
            moved.sort_by(|a, b| b.1.total_cmp(&a.1));
            // Partners: coefficients whose effects on the measured values are (nearly) parallel to
            // this one's, so the data see only their combination (a property of the data alone:
            // a cosine between Jacobian columns does not depend on the prior's σ, while the
            // posterior correlation vanishes when a wide prior lets one of them absorb it all),
            // or that the posterior ties to it while the data inform both.
            let col = |l: usize| jw.column(l).clone_owned();
            let moves = |l: usize| (0..rows.len()).any(|r| jw[(r, l)].abs() > 0.05);
            let partners: Vec<&str> = (0..n)
                .filter(|&l| l != k && moves(k) && moves(l))
                .filter(|&l| {
                    let (a, b) = (col(k), col(l));
                    let cos = a.dot(&b) / (a.norm() * b.norm());
                    let rho = post[(k, l)] / (post[(k, k)] * post[(l, l)]).sqrt();
                    cos.abs() > 0.95 || (rho.abs() > 0.7 && (1.0 - post[(l, l)]) > 0.05)
                })
                .map(|l| COEFFICIENT_NAMES[l])
                .collect();
            let why = if moved.is_empty() {
                "no measured target moves it: kept at the prior".to_string()
            } else {
                let what = moved.iter().take(3).map(|(r, _)| label(*r)).collect::<Vec<_>>().join(", ");
                let mut w = if determined {
                    format!("determined by {what}")
                } else {
                    format!("moves {what}, but too little against the prior's σ to be fitted: stays near the prior")
                };
                if !partners.is_empty() {
                    w.push_str(&format!(
                        "; the data determine it only together with {} (one combination of them): split between them as the prior weighs them (prior variance × effect)",
                        partners.join(", ")
                    ));
                }
                w
            };
            Identifiability {
                coefficient: COEFFICIENT_NAMES[k],
                determined,
                data_share: share,
                prior_sigma_log: sigma[k].sigma,
                prior_sigma_source: sigma[k].source.clone(),
                why,
                fitted_over_prior: 1.0,
            }
        })
        .collect()
}

/// A fit with the prior.
#[derive(Clone, Debug)]
pub struct PriorFit {
    pub cost: CostModel,
    /// Log-factors on the prior, per coefficient.
    pub x: Vec<f64>,
    /// Singular values of the whitened Jacobian at the prior, and how many directions were fitted.
    pub singular_values: Vec<f64>,
    pub directions: usize,
    pub identifiability: Vec<Identifiability>,
    /// Covariance of the log-factors at the fit ([`INTERVAL_METHOD`]).
    pub log_covariance: Vec<Vec<f64>>,
    /// Residuals' χ² per degree of freedom (the inflation s², at least 1).
    pub s2: f64,
    /// The objective: residuals² + prior term.
    pub objective: f64,
    pub evaluations: usize,
    pub predicted: Vec<Vec<Option<f64>>>,
    /// R² per target (None with < 2 points).
    pub r2: Vec<Option<f64>>,
    /// The ensemble ([`ENSEMBLE`] members): log-factors per member ([`ENSEMBLE_METHOD`]).
    pub ensemble: Vec<Vec<f64>>,
}

/// Members of the ensemble a fit leaves for intervals.
pub const ENSEMBLE: usize = 32;

/// How the ensemble is made.
pub const ENSEMBLE_METHOD: &str = "randomised maximum likelihood (Kitanidis 1995, Oliver 1996): each of 32 members (seeded) draws its prior centre from N(0, σ_prior²) in log-coefficient and each measured target from its noise (× s), then refits the determined directions by Gauss-Newton with the Jacobian at the fit, starting at the fit; each coefficient's interval is the members' 5th–95th percentile widened to hold the fitted value (as a prediction's interval is widened to hold the central prediction: with 32 members the percentiles are themselves noisy, and a nonlinear model's members need not straddle the fit); the members are the coefficient sets sampled through the simulator. A linear covariance alone misses the ridge of a nonlinear model (one TTFT explained by a large per-request overhead with a smaller prefill, or the reverse); the members follow it";

impl PriorFit {
    /// As a [`crate::fit::FitResult`] for the profile: one free parameter per determined direction's coefficients.
    pub fn as_fit_result(&self) -> crate::fit::FitResult {
        let free: Vec<Free> =
            self.identifiability.iter().filter(|i| i.determined).map(|i| Free::one(i.coefficient)).collect();
        let factors = free
            .iter()
            .map(|f| COEFFICIENT_NAMES.iter().position(|n| *n == f.coefficients[0]).map_or(1.0, |k| self.x[k].exp()))
            .collect();
        crate::fit::FitResult {
            cost: self.cost.clone(),
            factors,
            free,
            predicted: self.predicted.clone(),
            objective: self.objective,
            evaluations: self.evaluations,
            r2: self.r2.clone(),
        }
    }
}

/// Fits the determined directions with the prior term (Levenberg–Marquardt), then the
/// covariance at the fit. `max_iters` bounds the LM iterations. The prior's σ are those of
/// the prior's kind ([`PriorKind::of`], [`prior_sigmas`]). Every value's noise is
/// [`TARGET_NOISE`]'s; [`fit_with_prior_noise`] takes them per point.
pub fn fit_with_prior(points: &[FitPoint], prior: &CostModel, max_iters: usize) -> PriorFit {
    fit_with_prior_noise(points, &[], prior, max_iters)
}

/// [`fit_with_prior`] with each value's noise `noise[point][target]` (relative; [`TARGETS`]
/// order): it divides the value's log error in the residuals, so it weighs the value in the
/// whitened Jacobian (identifiability), the fit, the Laplace covariance and the ensemble's
/// draws of the targets alike.
pub fn fit_with_prior_noise(points: &[FitPoint], noise: &[Vec<f64>], prior: &CostModel, max_iters: usize) -> PriorFit {
    let n = COEFFICIENT_NAMES.len();
    let sigmas = prior_sigmas(PriorKind::of(prior));
    let sigma: Vec<f64> = sigmas.iter().map(|p| p.sigma).collect();
    let rows = rows_with_noise(points, noise);
    let mut evals = 0usize;
    let x0 = vec![0.0; n];
    let jw0 = jacobian(points, &rows, prior, &sigma, &x0, &mut evals);
    let identifiability = identifiability(points, &rows, &jw0, &sigmas);
    // The determined directions (whitened), as moves of the log-factors.
    let (svals, dirs) = if rows.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        let svd = jw0.clone().svd(false, true);
        let vt = svd.v_t.expect("v_t");
        let mut order: Vec<usize> = (0..svd.singular_values.len()).collect();
        order.sort_by(|&a, &b| svd.singular_values[b].total_cmp(&svd.singular_values[a]));
        let sv: Vec<f64> = order.iter().map(|&i| svd.singular_values[i]).collect();
        let dirs: Vec<Vec<f64>> = order
            .iter()
            .filter(|&&i| svd.singular_values[i] >= DETERMINED)
            .map(|&i| (0..n).map(|k| vt[(i, k)] * sigma[k]).collect())
            .collect();
        (sv, dirs)
    };
    let d = dirs.len();
    let x_of = |a: &[f64]| -> Vec<f64> { (0..n).map(|k| dirs.iter().zip(a).map(|(v, ai)| v[k] * ai).sum()).collect() };
    // Objective: residuals² + ‖a‖² (the directions are orthonormal in whitened space, so ‖a‖² is the prior term).
    let mut a = vec![0.0; d];
    let obj_at = |a: &[f64], evals: &mut usize| -> Option<(f64, DVector<f64>)> {
        let r = residuals(points, &rows, &cost_at(prior, &x_of(a)), evals)?;
        Some((r.norm_squared() + a.iter().map(|v| v * v).sum::<f64>(), r))
    };
    let (mut f, mut r) = obj_at(&a, &mut evals).unwrap_or((f64::INFINITY, DVector::zeros(rows.len())));
    let mut lambda = 1e-2;
    for _ in 0..max_iters {
        if d == 0 || !f.is_finite() {
            break;
        }
        // Jacobian along the directions at the current point, and the prior rows (identity).
        let jr = jacobian_along(points, &rows, prior, &x_of(&a), &dirs, &mut evals);
        let av = DVector::from_vec(a.clone());
        let g = jr.transpose() * &r + &av;
        let h = jr.transpose() * &jr + DMatrix::identity(d, d);
        let mut improved = false;
        for _ in 0..6 {
            let damped = &h + DMatrix::from_diagonal(&h.diagonal()) * lambda;
            let Some(step) = damped.lu().solve(&(-&g)) else { break };
            let trial: Vec<f64> = a.iter().zip(step.iter()).map(|(x, s)| x + s).collect();
            if let Some((ft, rt)) = obj_at(&trial, &mut evals) {
                if ft < f {
                    let small = step.norm() < 1e-3;
                    (a, f, r) = (trial, ft, rt);
                    lambda = (lambda / 3.0).max(1e-6);
                    improved = !small;
                    break;
                }
            }
            lambda *= 4.0;
        }
        if !improved {
            break;
        }
    }
    let x = x_of(&a);
    let cost = cost_at(prior, &x);
    let mut identifiability = identifiability;
    for (i, xk) in identifiability.iter_mut().zip(&x) {
        i.fitted_over_prior = xk.exp();
        if i.source() == PARTLY_DATA {
            i.why = i.why.replace(" to be fitted: stays near the prior", " to be fitted alone").replace(
                "no measured target moves it: kept at the prior",
                "no measured target moves it by much on its own",
            );
            i.why.push_str(&format!(
                "; the fit moved it ×{:.3} from the prior, along a direction the data determine that it is part of: partly data",
                i.fitted_over_prior
            ));
        }
    }
    // Covariance at the fit.
    let jw =
        if rows.is_empty() { DMatrix::zeros(0, n) } else { jacobian(points, &rows, prior, &sigma, &x, &mut evals) };
    let chi2 = r.norm_squared();
    let dof = rows.len().saturating_sub(d);
    let s2 = if dof > 0 { (chi2 / dof as f64).max(1.0) } else { 1.0 };
    let post = posterior_whitened(&jw, s2);
    let log_covariance: Vec<Vec<f64>> =
        (0..n).map(|i| (0..n).map(|j| post[(i, j)] * sigma[i] * sigma[j]).collect()).collect();
    let predicted: Vec<Vec<Option<f64>>> = points.iter().map(|p| p.predict(&cost)).collect();
    evals += points.len();
    // The ensemble: randomised maximum likelihood about the fit.
    let jr =
        if d > 0 { jacobian_along(points, &rows, prior, &x, &dirs, &mut evals) } else { DMatrix::zeros(rows.len(), 0) };
    let mut rng = sim::rng::stream(crate::uncertainty::SEED, "calibration ensemble");
    let s = s2.sqrt();
    let mut ensemble = Vec::with_capacity(ENSEMBLE);
    for _ in 0..ENSEMBLE {
        // The member's prior centre δ is drawn from the prior, N(0, σ²) in log-factor (until
        // 2026-12-07 from N(x_fit, σ²): centred on the fit, the prior term pulled every member
        // past the fit, away from the prior, by (JᵀJ + I)⁻¹ a_fit in whitened terms, most along a
        // weakly determined direction, and the members' percentiles could leave the fit out).
        let delta: Vec<f64> = (0..n).map(|k| sigma[k] * crate::uncertainty::normal(&mut rng)).collect();
        let eps = DVector::from_fn(rows.len(), |_, _| s * crate::uncertainty::normal(&mut rng));
        let member = |b: &[f64]| -> Vec<f64> {
            (0..n).map(|k| delta[k] + dirs.iter().zip(b).map(|(v, bi)| v[k] * bi).sum::<f64>()).collect()
        };
        // The member's prior term is measured from its own centre: with x = δ + D b,
        // (x − δ)/σ = V b, so the term is ‖b‖². Its refit starts at the fit along the determined
        // directions (b = a_fit − Vᵀ δ/σ, the directions orthonormal in whitened space), not at δ:
        // Gauss-Newton with the Jacobian at the fit is exact there for a linear model, and a
        // member started at its prior draw, a whole σ away, stopped short of the data after its
        // few steps.
        let mut b: Vec<f64> = dirs
            .iter()
            .zip(&a)
            .map(|(v, ai)| {
                let along: f64 =
                    (0..n).filter(|&k| sigma[k] > 0.0).map(|k| v[k] / sigma[k] * delta[k] / sigma[k]).sum();
                ai - along
            })
            .collect();
        let obj = |b: &[f64], evals: &mut usize| -> Option<(f64, DVector<f64>)> {
            let r = residuals(points, &rows, &cost_at(prior, &member(b)), evals)? - &eps;
            Some((r.norm_squared() + b.iter().map(|v| v * v).sum::<f64>(), r))
        };
        if d > 0 {
            if let Some((mut fb, mut rb)) = obj(&b, &mut evals) {
                let h = jr.transpose() * &jr + DMatrix::identity(d, d);
                for _ in 0..4 {
                    let g = jr.transpose() * &rb + DVector::from_vec(b.clone());
                    let Some(step) = h.clone().lu().solve(&(-g)) else { break };
                    let mut t = 1.0;
                    let mut moved = false;
                    for _ in 0..3 {
                        let trial: Vec<f64> = b.iter().zip(step.iter()).map(|(v, s)| v + t * s).collect();
                        if let Some((ft, rt)) = obj(&trial, &mut evals) {
                            if ft < fb {
                                (b, fb, rb) = (trial, ft, rt);
                                moved = true;
                                break;
                            }
                        }
                        t /= 2.0;
                    }
                    if !moved {
                        break;
                    }
                }
            }
        }
        ensemble.push(member(&b));
    }
    let r2 = (0..TARGETS.len())
        .map(|t| {
            let pairs: Vec<(f64, f64)> =
                points.iter().zip(&predicted).filter_map(|(p, q)| Some((p.measured[t]?, q[t]?))).collect();
            crate::fit::r_squared(&pairs)
        })
        .collect();
    PriorFit {
        cost,
        x,
        singular_values: svals,
        directions: d,
        identifiability,
        log_covariance,
        s2,
        objective: f,
        evaluations: evals,
        predicted,
        r2,
        ensemble,
    }
}

/// The covariance of the log-factors about a fit made elsewhere (the live fit): the same
/// Laplace form, at `cost`, with `prior` the prior the log-factors are measured from and `kind`
/// the prior the fit shrank toward (a live fit's coefficients replace the step cost: linear).
pub fn covariance_at(
    points: &[FitPoint],
    prior: &CostModel,
    cost: &CostModel,
    kind: PriorKind,
) -> (Vec<f64>, Vec<Vec<f64>>, f64) {
    let n = COEFFICIENT_NAMES.len();
    let sigma = prior_sigma(kind);
    let (pc, fc) = (prior.coefficients(), cost.coefficients());
    let x: Vec<f64> = COEFFICIENT_NAMES
        .iter()
        .map(|c| {
            let (p, f) = (pc.get(c).unwrap_or(0.0), fc.get(c).unwrap_or(0.0));
            if p > 0.0 && f > 0.0 {
                (f / p).ln()
            } else {
                0.0
            }
        })
        .collect();
    let rows = rows(points);
    let mut evals = 0;
    let jw = jacobian(points, &rows, prior, &sigma, &x, &mut evals);
    let chi2 = residuals(points, &rows, cost, &mut evals).map_or(0.0, |r| r.norm_squared());
    let dof = rows.len().saturating_sub(n);
    let s2 = if dof > 0 { (chi2 / dof as f64).max(1.0) } else { 1.0 };
    let post = posterior_whitened(&jw, s2);
    (x, (0..n).map(|i| (0..n).map(|j| post[(i, j)] * sigma[i] * sigma[j]).collect()).collect(), s2)
}

/// The prior a fit starts from and shrinks toward: the scenario's cost as the linear model.
///
/// Uncalibrated, servesim times steps with the cost composed from measured kernels
/// (`sim::cost::ComposedCost`). A fit corrects that cost rather than replacing it: each step
/// costs the composed time, its decodes' part and what its prefill chunks add each × how much
/// the linear terms of that part moved from the prior (`CostModel::correct`), so a
/// coefficient left at its prior changes nothing and the uncalibrated model is recovered
/// exactly where the data determine nothing. The prior (the reference of that ratio) is the
/// composed cost **linearised**: the five step coefficients by non-negative
/// least squares, in relative error, on the composed step times of a grid of step shapes
/// (lone prefills of 64–8192 tokens after 0–4096 cached ones, decode batches of 1–256 at
/// contexts of 256–8192 tokens, mixed steps); `per_seq_us` is the composed cost's CPU time
/// per sequence. Without a composed cost, the scenario's linear coefficients as they are.
/// A time-scaled scenario's (`cost.time_scale` k) composed cost gives its times ÷ k
/// (`ComposedCost::set_time_scale`), so this prior, and the coefficients fitted against it, are
/// the k-times-faster engine's, as are the linear prior's (`CostModel::scale_time`).
pub fn linear_prior(base: &CostModel) -> CostModel {
    let Some(c) = base.composed.clone() else { return base.clone() };
    use sim::cost::StepShape;
    let mut shapes = Vec::new();
    for n in [64u64, 256, 1024, 2048, 4096, 8192] {
        for ctx in [0u64, 1024, 4096] {
            let mut s = StepShape::default();
            s.add_prefill(ctx, n);
            shapes.push(s);
        }
    }
    for b in [1u64, 2, 4, 8, 16, 32, 64, 128, 256] {
        for ctx in [256u64, 1024, 2048, 4096, 8192] {
            shapes.push(StepShape::decodes(b, b * ctx));
            let mut m = StepShape::decodes(b, b * ctx);
            m.add_prefill(0, 512);
            shapes.push(m);
        }
    }
    let per_seq = c.sync_cpu().per_seq_us;
    // Columns: step, prefill token, decode token, prefill attention pair, decode KV token.
    let cols = |s: &StepShape| {
        [
            1.0,
            s.prefill_tokens as f64,
            s.decode_tokens as f64,
            s.prefill_attention_pairs as f64,
            s.decode_context_tokens as f64,
        ]
    };
    // The packed kernel's times: the linear model has no term for decodes that run unpacked
    // beside a prefill chunk (`ComposedCost::unpacked_decode_surcharge_us`, which a correction
    // counts with the decodes), and fitting it on them bent the pairs' coefficient to zero.
    let y: Vec<f64> = shapes.iter().map(|s| c.step_us_packed(s) - per_seq * f64::from(s.num_seqs)).collect();
    let mut active = [true; 5];
    let beta = loop {
        let idx: Vec<usize> = (0..5).filter(|&i| active[i]).collect();
        if idx.is_empty() {
            break [0.0; 5];
        }
        // Relative error: each row divided by its target; columns scaled to unit norm.
        let a = DMatrix::from_fn(shapes.len(), idx.len(), |r, j| cols(&shapes[r])[idx[j]] / y[r].max(1e-9));
        let norms: Vec<f64> = (0..idx.len()).map(|j| a.column(j).norm().max(1e-300)).collect();
        let an = DMatrix::from_fn(a.nrows(), a.ncols(), |r, j| a[(r, j)] / norms[j]);
        let b = DVector::from_element(shapes.len(), 1.0);
        let Ok(sol) = an.clone().svd(true, true).solve(&b, 1e-12) else { break [0.0; 5] };
        let mut full = [0.0; 5];
        for (j, &i) in idx.iter().enumerate() {
            full[i] = sol[j] / norms[j];
        }
        match idx.iter().copied().filter(|&i| full[i] < 0.0).min_by(|&p, &q| full[p].total_cmp(&full[q])) {
            Some(i) => active[i] = false,
            None => break full,
        }
    };
    let mut out = base.clone();
    let mut o = sim::cost::CostCoefficients::default();
    for (n, v) in
        ["step_us", "prefill_token_us", "decode_token_us", "prefill_attention_us", "decode_kv_us"].iter().zip(beta)
    {
        o.set(n, v);
    }
    o.set("per_seq_us", per_seq);
    // Corrected mode with these values as the reference: at the prior the steps are the
    // composed cost exactly, and a fit's moves scale it (`CostModel::correct`).
    out.correct(&o, &o, sim::cost::CoefficientSource::Prior);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An undetermined coefficient the fit moved along a determined direction is labelled
    /// partly data, not prior (a one-point fit moved `request_ingress_us` ×1.39 labelled prior).
    #[test]
    fn an_undetermined_coefficient_that_moved_is_partly_data() {
        let id = |determined: bool, f: f64| Identifiability {
            coefficient: "request_ingress_us",
            determined,
            data_share: 0.3,
            prior_sigma_log: 0.5,
            prior_sigma_source: String::new(),
            why: String::new(),
            fitted_over_prior: f,
        };
        assert_eq!(id(true, 1.0).source(), "data");
        assert_eq!(id(false, 1.005).source(), "prior");
        assert_eq!(id(false, 0.995).source(), "prior");
        assert_eq!(id(false, 1.393).source(), PARTLY_DATA);
        assert_eq!(id(false, 0.9).source(), PARTLY_DATA);
    }

    fn sigma(kind: PriorKind, c: &str) -> PriorSigma {
        prior_sigmas(kind).into_iter().find(|p| p.coefficient == c).unwrap()
    }

    /// A corrects_composed fit's σ are PRIOR_SIGMA's rules applied to the composed cost's
    /// corpus p90s (`uncertainty::corpus_errors`); the per-request terms keep theirs.
    #[test]
    fn the_composed_prior_sigma_is_the_rule_on_the_composed_corpus() {
        let p90 = |f: &str| crate::uncertainty::corpus_errors().iter().find(|x| x.0 == f).unwrap().2;
        for c in DECODE_STEP_TERMS {
            let s = sigma(PriorKind::Composed, c);
            assert!((s.sigma - 2.0 * (1.0 + p90("tpot")).ln() / 1.645).abs() < 1e-12, "{s:?}");
            assert!(s.source.contains("composed") && s.source.contains("doubled"), "{s:?}");
        }
        for c in PREFILL_TERMS {
            let s = sigma(PriorKind::Composed, c);
            assert!((s.sigma - (1.0 + p90("ttft")).ln() / 1.645).abs() < 1e-12, "{s:?}");
            assert!(s.source.contains(&format!("{:.1}%", 100.0 * p90("ttft"))), "{s:?}");
        }
        for c in ["per_seq_us", "request_ingress_us", "output_token_us"] {
            let (l, k) = (sigma(PriorKind::Linear, c), sigma(PriorKind::Composed, c));
            assert_eq!(l, k);
        }
        // The corpus the committed baseline holds gives σ of a sensible size (2026-12-01, TTFT
        // p90 241.5% and TPOT p90 21.0%: 0.747 and 0.232).
        let (pre, step) =
            (sigma(PriorKind::Composed, "prefill_token_us").sigma, sigma(PriorKind::Composed, "step_us").sigma);
        assert!((0.1..1.5).contains(&pre) && (0.05..1.0).contains(&step), "{pre} {step}");
    }

    /// The linear prior's σ as written are the same rules on its own corpus p90s, rounded.
    #[test]
    fn the_linear_prior_sigma_is_the_rule_on_the_linear_corpus() {
        let (ttft, tpot) = LINEAR_PRIOR_P90;
        for c in DECODE_STEP_TERMS {
            assert!((sigma(PriorKind::Linear, c).sigma - sigma_from_tpot_p90(tpot)).abs() < 0.01);
        }
        for c in PREFILL_TERMS {
            assert!((sigma(PriorKind::Linear, c).sigma - sigma_from_ttft_p90(ttft)).abs() < 0.01);
        }
        let table: Vec<f64> = PRIOR_SIGMA.iter().map(|p| p.1).collect();
        assert_eq!(prior_sigma(PriorKind::Linear), table);
    }
}
