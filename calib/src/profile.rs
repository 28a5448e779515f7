//! The fitted cost profile (`servesim calibrate --out`), typed. Its JSON keys
//! are a contract (`cost.profile` reads `coefficients`; `check` reads
//! `speed_reference.median_mean_itl_ms`): `tests::profile_keys` pins them.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sim::config::EngineKind;
use sim::cost::{CostCoefficients, CostModel, COEFFICIENT_NAMES};

use crate::fit::{roofline_floors, FitPoint, FitResult, TARGETS, TARGET_NOISE};
use crate::named::Named;

/// A profile's `format` ([`Profile::format`]), which a scenario's `cost.profile` must have.
pub const PROFILE_FORMAT: &str = "servesim-profile";
/// The profile format's `version` this build writes and reads.
pub const PROFILE_VERSION: u32 = 1;

/// A profile file.
#[derive(Clone, Debug, Serialize)]
pub struct Profile {
    /// [`PROFILE_FORMAT`].
    pub format: &'static str,
    pub version: u32,
    pub created_by: String,
    /// `live` (probes) or `results` (existing result files).
    pub source: &'static str,
    pub engine: ProfileEngine,
    /// Every coefficient, fitted or prior, in µs.
    pub coefficients: Named<f64>,
    /// Per coefficient: `data` (fitted) or `prior`.
    pub coefficient_sources: Named<&'static str>,
    pub prior: CostCoefficients,
    /// How the coefficients time steps: `linear` (they replace the step cost) or
    /// `corrects_composed` (on a GPU with measured kernels: the composed cost, its decode
    /// part and its prefill part each × how much the linear terms of that part moved from
    /// the prior, `sim::cost::CostModel::correct`; a coefficient
    /// at its prior changes nothing).
    pub cost_mode: &'static str,
    /// The composed cost the fit corrected (the `cost_source` of its runs without the
    /// profile), for `corrects_composed`: where servesim composes the cost otherwise today, a
    /// run with the profile says so (the profile's moves may hold what changed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub composed_cost_source: Option<String>,
    pub fit: FitSummary,
    pub roofline_check: Vec<RooflineCheck>,
    /// Per coefficient: whether the data determined it, and why (`crate::identify`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identifiability: Option<Vec<crate::identify::Identifiability>>,
    /// What was flagged in the data before the fit, and what was done with it (`crate::traps`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traps: Option<Vec<crate::traps::Trap>>,
    /// The coefficients' covariance and intervals (`crate::uncertainty`): `simulate`, `sweep`
    /// and `check` with this profile put an interval on every prediction from it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uncertainty: Option<crate::uncertainty::ProfileUncertainty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_log_fit: Option<StepLogFit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lone_request_fit: Option<LoneRequestFit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speed_reference: Option<SpeedReference>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fit_workloads: Option<Vec<FitWorkload>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_results: Option<Vec<String>>,
    /// The scenario the results were measured with: the first, where `calibrate` was given
    /// several (`--scenario A.json B.json`, one per results file); `scenarios` lists them all.
    /// Kept as it was so that a reader of profiles before 2026-12-07 still finds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// Every scenario the results were measured with, in the order given (one for all the
    /// `from_results` files, or one per file, paired in order). Profiles before 2026-12-07
    /// recorded only the first, as `scenario`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scenarios: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The run record of the live calibration that fitted it (a file name beside the profile;
    /// `servesim calibrate` writes both).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_record: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProfileEngine {
    pub kind: EngineKind,
    pub version: Option<String>,
    /// The model as the engine named it (live: the served model; from results: the card).
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_capacity_tokens: Option<u64>,
    /// The deployment the coefficients were fitted on: servesim's model card and GPU card and
    /// the TP size. A scenario that applies the profile (`cost.profile`) must run the same
    /// (`cli/load.rs`); profiles written before these keys existed are checked on `kind` and,
    /// from results, `model`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_card: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor_parallel_size: Option<u32>,
    /// The KV cache's element type, the linear layers' bytes per weight and whether CUDA graphs
    /// ran (profiles from 2026-12-06 on): each moves the step cost as the GPU does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache_dtype: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub linear_weight_bytes: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_graphs: Option<bool>,
    /// Fitted against `servesim serve --time-scale k` (k ≠ 1), with the scenario at
    /// `cost.time_scale` k: every coefficient, fitted or prior, and `prior` are the µs of an
    /// engine k times faster than the GPU named (a test's shortcut); a scenario applying it runs
    /// at that scale (docs/calibration.md) and is warned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub servesim_time_scale: Option<f64>,
}

impl ProfileEngine {
    /// The deployment keys from the spec the profile was fitted with.
    pub fn with_deployment(mut self, spec: &sim::config::SimSpec) -> ProfileEngine {
        self.model_card = Some(spec.model.id.clone());
        self.gpu = Some(spec.gpu.id.clone());
        self.tensor_parallel_size = Some(spec.deployment.tensor_parallel_size);
        self.kv_cache_dtype = Some(spec.deployment.kv_cache_dtype.clone());
        self.linear_weight_bytes = Some(spec.deployment.linear_weight_bytes);
        self.cuda_graphs = Some(spec.deployment.cuda_graphs);
        self
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct FitSummary {
    pub method: &'static str,
    pub target_noise: Named<f64>,
    pub targets: [sim::report::Metric; 13],
    pub free: Vec<FreeParameter>,
    pub factors: Vec<f64>,
    pub objective: f64,
    pub evaluations: usize,
    /// R² of predicted against measured, per target (null with fewer than 2 points).
    pub r2: Named<Option<f64>>,
    pub points: Vec<FitPointSummary>,
    /// The fitted values the fit leaves further from their measurement than its own noise
    /// model allows ([`misfits`]): a fit on result files that does not describe its data.
    /// `calibrate` prints them as a WARNING, and every run with the profile says so again.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub misfit: Vec<Misfit>,
}

/// A fitted value whose residual exceeds [`MISFIT_SIGMAS`] times its noise.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Misfit {
    pub point: String,
    pub metric: String,
    /// (predicted − measured) / measured.
    pub relative_residual: f64,
    /// |ln(predicted / measured)| ÷ the value's noise (`fit.points[].target_noise`).
    pub sigmas: f64,
}

/// How many of its own noise's σ a fitted value's log residual may lie off before the fit is
/// said not to describe the data: the fit's noise model (`fit.points[].target_noise`: the
/// measurement's, the printed rounding and the model's discrepancy at one point, in quadrature)
/// takes each log residual as Gaussian with that σ, and past 3σ lies 0.27% of such residuals,
/// about one in 8 fits of 13 targets at 3 points (39 values) even where the model holds; a fit
/// with several, or with one far past, does not describe its data.
pub const MISFIT_SIGMAS: f64 = 3.0;

/// Past this many σ a misfit is no chance of the noise (a Gaussian log residual lies there with
/// probability about 1.5e-23, never in any fit): the data contradict every coefficient set the
/// model allows, and `calibrate --from-results` writes no profile (an output throughput of 10^8
/// tokens a second at concurrency 1, 143σ off, was written with a warning: a profile whose
/// figures stand for nothing measured). The model's discrepancy is already in the noise
/// (`fit.points[].target_noise`), so 10σ is a factor e^(10 × 0.07) ≈ 2 on a throughput, e^4 on a
/// TTFT: a miss no deployment or model error of the corpus comes near.
pub const MISFIT_REFUSE_SIGMAS: f64 = 10.0;

/// The values of `points` whose log residual exceeds [`MISFIT_SIGMAS`] times the noise the fit
/// gave them (points without their own noise, live ones, are not judged: their `fit.target_noise`
/// has no model discrepancy in it).
pub fn misfits(points: &[FitPointSummary]) -> Vec<Misfit> {
    let mut out = Vec::new();
    for p in points {
        let Some(noise) = &p.target_noise else { continue };
        for (k, &r) in p.relative_residual.iter() {
            let Some(&n) = noise.get(k).filter(|n| **n > 0.0) else { continue };
            let z = (1.0 + r).ln().abs() / n;
            if (1.0 + r) > 0.0 && z > MISFIT_SIGMAS {
                out.push(Misfit { point: p.name.clone(), metric: k.to_string(), relative_residual: r, sigmas: z });
            }
        }
    }
    out
}

#[derive(Clone, Debug, Serialize)]
pub struct FreeParameter {
    pub name: String,
    pub coefficients: Vec<&'static str>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FitPointSummary {
    pub name: String,
    pub max_concurrency: Option<u32>,
    pub measured: Named<f64>,
    pub predicted: Named<f64>,
    /// (predicted − measured) / measured, per target.
    pub relative_residual: Named<f64>,
    /// The noise each fitted value of this point was given (relative), for a fit on result
    /// files: `fit.target_noise`, raised to the value's printed rounding where that is larger
    /// (`crate::fit::published_noise`), and the model's discrepancy at a point in quadrature
    /// (`crate::fit::Discrepancy::with`). Absent for live measurements, which take
    /// `fit.target_noise` as it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_noise: Option<Named<f64>>,
    /// The point's load and request shape ([`fit_load`]; profiles from 2026-12-07 on): `check`
    /// marks a point at the same one as used for fitting, not held out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load: Option<Value>,
}

/// A point's load and request shape, as `check` compares it with a profile's fit points: the
/// concurrency cap, the request rate (none where infinite), and the dataset's lengths (a trace
/// as its name alone). Two runs with the same are the same measurement but for their seed.
pub fn fit_load(spec: &sim::config::SimSpec) -> Value {
    use sim::workload::Dataset;
    let w = &spec.workload;
    let dataset = match &w.dataset {
        Dataset::Random { input_len, output_len, range_ratio, prefix_len } => serde_json::json!({
            "dataset": "random", "input_len": input_len, "output_len": output_len,
            "range_ratio": range_ratio, "prefix_len": prefix_len,
        }),
        Dataset::PrefixRepetition { prefix_len, suffix_len, num_prefixes, output_len } => serde_json::json!({
            "dataset": "prefix_repetition", "prefix_len": prefix_len, "suffix_len": suffix_len,
            "num_prefixes": num_prefixes, "output_len": output_len,
        }),
        Dataset::Trace { .. } | Dataset::Requests { .. } => serde_json::json!({"dataset": "trace"}),
    };
    serde_json::json!({
        "max_concurrency": w.max_concurrency,
        "request_rate": w.request_rate.filter(|r| r.is_finite()),
        "requests": dataset,
    })
}

#[derive(Clone, Debug, Serialize)]
pub struct RooflineCheck {
    pub coefficient: &'static str,
    pub fitted_us: f64,
    /// Where the fit corrects the composed (measured-kernel) cost, the coefficient is only the
    /// reference its correction is a ratio to, not a time: what the corrected cost takes per unit
    /// of the term's work ([`implied_per_unit_us`]), judged against the floor instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub implied_us: Option<f64>,
    pub roofline_floor_us: f64,
    /// The fit implies more than the card's peak.
    pub beats_physics: bool,
}

/// The floor a corrected composed cost is judged against for `name`: the card's roofline `floor`,
/// or the uncorrected measured-kernel cost's own figure ([`implied_per_unit_us`] with no
/// correction) where that is lower, returned beside it. A measured kernel's marginal time per
/// unit can lie under the roofline while its whole time does not (decode attention's fixed
/// latency at one token of context is hidden under the transfer at 32k: the RTX 5090's table
/// reads 1.5 TB/s on average and 1.85 at the margin, on a 1.79 TB/s card), so a correction is
/// said to beat physics only where it takes the term below both (an audit, 2026-12-07: a profile
/// reproducing the uncalibrated model exactly warned). Without a correction, `floor`.
pub fn roofline_bound(cost: &sim::cost::CostModel, name: &str, floor: f64) -> (f64, Option<f64>) {
    if cost.composed.is_none() || cost.reference.is_none() {
        return (floor, None);
    }
    let mut uncorrected = cost.clone();
    uncorrected.reference = None;
    match implied_per_unit_us(&uncorrected, name) {
        Some(own) if own < floor => (own * (1.0 - 1e-9), Some(own)),
        _ => (floor, None),
    }
}

/// What the step cost `cost` takes per unit of a coefficient's work, in µs, from whole steps it
/// times (so everything else in them counts too, and the figure is at least the term's own):
/// per prompt token of a lone 8,192-token prefill (`prefill_token_us`); per decode of a batch
/// of 256 (`decode_token_us`); a lone one-token decode (`step_us`); per context token read, the
/// difference of a lone decode at 32,769 and 1 (`decode_kv_us`); per query-key pair, the
/// difference of a 1,024-token chunk after 16,384 cached tokens and at the start
/// (`prefill_attention_us`). `None` for another name.
pub fn implied_per_unit_us(cost: &sim::cost::CostModel, name: &str) -> Option<f64> {
    use sim::cost::StepShape;
    let us = |shape: &StepShape| cost.step_ns(shape) as f64 / 1e3;
    let prefill = |context: u64, n: u64| {
        let mut s = StepShape::default();
        s.add_prefill(context, n);
        s
    };
    let decodes = |batch: u64, context: u64| {
        let mut s = StepShape::default();
        for _ in 0..batch {
            s.add_decode(context);
        }
        s
    };
    match name {
        "prefill_token_us" => Some(us(&prefill(0, 8192)) / 8192.0),
        "decode_token_us" => Some(us(&decodes(256, 1)) / 256.0),
        "step_us" => Some(us(&decodes(1, 1))),
        "decode_kv_us" => Some(((us(&decodes(1, 32_769)) - us(&decodes(1, 1))) / 32_768.0).max(0.0)),
        "prefill_attention_us" => {
            Some(((us(&prefill(16_384, 1024)) - us(&prefill(0, 1024))) / (1024.0 * 16_384.0)).max(0.0))
        }
        _ => None,
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct StepLogFit {
    pub file: Option<String>,
    pub rows: usize,
    pub r2: f64,
    pub residual_std_ms: f64,
    pub step_us: f64,
    pub per_seq_us: f64,
    pub prefill_token_us: f64,
    pub decode_token_us: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LoneRequestFit {
    pub method: &'static str,
    pub points: usize,
    pub r2: f64,
    pub coefficients: Named<f64>,
    /// Coefficients the concurrency-1 TTFTs barely move with at the solution (under half of
    /// what they would alone: a step in flight hides them), each with that share: the data
    /// determine them weakly, and their intervals say how weakly.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub weakly_determined: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SpeedReference {
    /// Its workload section.
    pub workload: Value,
    /// Before each probe (null where it failed).
    pub mean_itl_ms: Vec<Option<f64>>,
    pub median_mean_itl_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct FitWorkload {
    pub name: String,
    pub workload: Value,
}

impl Profile {
    /// The profile of a fit: coefficients with their sources, fit statistics, the roofline check.
    pub fn new(
        r: &FitResult,
        points: &[FitPoint],
        source: &'static str,
        engine: ProfileEngine,
        prior: &CostModel,
    ) -> Profile {
        let fitted: std::collections::BTreeSet<&str> =
            r.free.iter().flat_map(|f| f.coefficients.iter().copied()).collect();
        let coeffs = r.cost.coefficients();
        let mut coefficients = Named::new();
        let mut coefficient_sources = Named::new();
        for name in COEFFICIENT_NAMES {
            coefficients.push(name, coeffs.get(name).unwrap_or(0.0));
            coefficient_sources.push(name, if fitted.contains(name) { "data" } else { "prior" });
        }
        let roofline_check = points
            .first()
            .map(|p| {
                roofline_floors(&p.spec)
                    .into_iter()
                    .filter(|(n, _)| fitted.contains(n))
                    .map(|(n, floor)| {
                        let v = coeffs.get(n).unwrap_or(0.0);
                        // Correcting the composed cost, the coefficient is a ratio's reference
                        // (a linearised composed cost can sit below the floor while every step
                        // it times is above it: it warned on unchanged priors).
                        let implied = (r.cost.composed.is_some() && r.cost.reference.is_some())
                            .then(|| implied_per_unit_us(&r.cost, n))
                            .flatten();
                        let (bound, _) = roofline_bound(&r.cost, n, floor);
                        RooflineCheck {
                            coefficient: n,
                            fitted_us: v,
                            implied_us: implied,
                            roofline_floor_us: floor,
                            beats_physics: implied.map_or(v < floor, |i| i < bound),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let pts = points
            .iter()
            .zip(&r.predicted)
            .map(|(p, q)| {
                let (mut measured, mut predicted, mut relative_residual) = (Named::new(), Named::new(), Named::new());
                for (i, t) in TARGETS.iter().enumerate() {
                    if let Some(m) = p.measured[i] {
                        measured.push(t.key(), m);
                        if let Some(v) = q[i] {
                            predicted.push(t.key(), v);
                            if m > 0.0 {
                                relative_residual.push(t.key(), (v - m) / m);
                            }
                        }
                    }
                }
                FitPointSummary {
                    name: p.name.clone(),
                    max_concurrency: p.spec.workload.max_concurrency,
                    measured,
                    predicted,
                    relative_residual,
                    target_noise: None,
                    load: Some(fit_load(&p.spec)),
                }
            })
            .collect();
        Profile {
            format: PROFILE_FORMAT,
            version: PROFILE_VERSION,
            created_by: format!("servesim {}", env!("CARGO_PKG_VERSION")),
            source,
            engine,
            coefficients,
            coefficient_sources,
            prior: prior.coefficients(),
            cost_mode: if prior.reference.is_some() { "corrects_composed" } else { "linear" },
            composed_cost_source: prior.composed.as_ref().filter(|_| prior.reference.is_some()).map(|c| c.source.clone()),
            fit: FitSummary {
                method: "Nelder-Mead on squared log errors of simulated vs measured metrics, each divided by its target_noise",
                target_noise: Named(TARGETS.iter().zip(TARGET_NOISE).map(|(t, n)| (t.to_string(), n)).collect()),
                targets: TARGETS,
                free: r.free.iter().map(|f| FreeParameter { name: f.name.clone(), coefficients: f.coefficients.clone() }).collect(),
                factors: r.factors.clone(),
                objective: r.objective,
                evaluations: r.evaluations,
                r2: Named(TARGETS.iter().zip(&r.r2).map(|(t, v)| (t.to_string(), *v)).collect()),
                points: pts,
                misfit: Vec::new(),
            },
            roofline_check,
            identifiability: None,
            traps: None,
            uncertainty: None,
            step_log_fit: None,
            lone_request_fit: None,
            speed_reference: None,
            fit_workloads: None,
            from_results: None,
            scenario: None,
            scenarios: None,
            note: None,
            run_record: None,
        }
    }

    /// A fitted coefficient, µs.
    pub fn coefficient(&self, name: &str) -> Option<f64> {
        self.coefficients.get(name).copied()
    }

    /// The coefficients in [`COEFFICIENT_NAMES`] order.
    pub fn values(&self) -> Vec<f64> {
        COEFFICIENT_NAMES.iter().map(|n| self.coefficient(n).unwrap_or(0.0)).collect()
    }
}

/// What `check` reads back from a profile file.
#[derive(Clone, Debug, Deserialize)]
pub struct ProfileFile {
    /// The coefficients, as the file lists them (echoed in the check report).
    pub coefficients: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    pub speed_reference: Option<SpeedReferenceFile>,
    /// The coefficients' covariance (profiles written since issue #13).
    #[serde(default)]
    pub uncertainty: Option<crate::uncertainty::ProfileUncertainty>,
    /// What it was fitted on: `check` reads the emulator's time scale from it.
    #[serde(default)]
    pub engine: Option<ProfileFileEngine>,
    /// `live` or `results`.
    #[serde(default)]
    pub source: Option<String>,
    /// The fit's points: `check` marks its points at their loads as used for fitting.
    #[serde(default)]
    pub fit: Option<ProfileFileFit>,
}

/// The part of a profile's `fit` object `check` reads.
#[derive(Clone, Debug, Deserialize)]
pub struct ProfileFileFit {
    #[serde(default)]
    pub points: Vec<ProfileFilePoint>,
}

/// A fit point as `check` reads it: its concurrency and, from 2026-12-07, its load ([`fit_load`]).
#[derive(Clone, Debug, Deserialize)]
pub struct ProfileFilePoint {
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    #[serde(default)]
    pub load: Option<Value>,
}

/// The part of a profile's `engine` object `check` reads.
#[derive(Clone, Debug, Deserialize)]
pub struct ProfileFileEngine {
    #[serde(default)]
    pub servesim_time_scale: Option<f64>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct SpeedReferenceFile {
    pub median_mean_itl_ms: Option<f64>,
}

impl ProfileFile {
    pub fn parse(text: &str) -> Result<ProfileFile, String> {
        let profile = serde_json::from_str(text).map_err(|e| format!("not a profile: {e}"))?;
        // A coefficient given twice: JSON keeps the last, silently.
        sim::config::no_duplicate_keys(text)?;
        Ok(profile)
    }

    /// The `servesim serve --time-scale` the profile was fitted against (1: an engine at its own
    /// speed).
    pub fn servesim_time_scale(&self) -> f64 {
        self.engine.as_ref().and_then(|e| e.servesim_time_scale).unwrap_or(1.0)
    }

    /// The fit points `check` must not judge as held out: for each, the load it was fitted at
    /// ([`fit_load`]), or for a profile from results before 2026-12-07, which recorded the
    /// concurrency alone, `{"max_concurrency": c}` (compared on the concurrency alone). A live
    /// profile's probes without a recorded load are left out (their workloads are the probe
    /// plan's, not a check's).
    pub fn fitted_loads(&self) -> Vec<Value> {
        let results = self.source.as_deref() == Some("results");
        self.fit
            .iter()
            .flat_map(|f| &f.points)
            .filter_map(|p| match (&p.load, p.max_concurrency) {
                (Some(l), _) => Some(l.clone()),
                (None, Some(c)) if results => Some(serde_json::json!({ "max_concurrency": c })),
                _ => None,
            })
            .collect()
    }

    /// The calibration's speed reference (median mean ITL, ms), if it measured one.
    pub fn speed_reference_ms(&self) -> Option<f64> {
        self.speed_reference.as_ref().and_then(|s| s.median_mean_itl_ms)
    }
}
