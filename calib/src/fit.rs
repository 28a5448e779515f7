//! Fitting the cost model to measurements.
//!
//! The fit is a nonlinear least squares on log errors: find the cost
//! coefficients θ that minimise Σ over measured points and metrics of
//! `ln(predicted(θ) / measured)²`, where `predicted` runs the simulator on
//! the very workload that was measured. Simulations are fast (milliseconds
//! for a probe), so the minimiser (Nelder–Mead in log space, started from
//! the roofline prior) can afford hundreds of them, and the fit sees
//! queueing, chunking and preemption exactly as the simulator models them.
//!
//! Each free parameter multiplies one coefficient, or a group of them (so
//! that a single load point, which cannot separate every term, keeps the
//! prior's shape and fits only what it determines). Coefficients that are
//! not free keep their prior value, and the profile says which is which.
//!
//! Fit statistics: R² of predicted against measured values per metric
//! (statrs), and every point's relative residuals. Each fitted coefficient
//! is checked against the roofline floor of the hardware card: a fit that
//! implies more than the card's peak FLOP/s or bandwidth is reported.

use sim::config::SimSpec;
use sim::cost::{CostCoefficients, CostModel, COEFFICIENT_NAMES};
use sim::report::Metric;
use sim::simulation::RunOptions;
use statrs::statistics::Statistics;

/// The metrics a fit matches, by their report keys: the five means first (a live probe
/// measures all of them), then the medians and p99s, which a fit uses only where a source
/// publishes no mean of that family (`procedure::measured_targets`), each against the
/// simulated statistic of the same name, never as a mean.
pub const TARGETS: [Metric; 13] = [
    Metric::MeanTtftMs,
    Metric::MeanTpotMs,
    Metric::MeanItlMs,
    Metric::MeanE2elMs,
    Metric::OutputThroughput,
    Metric::MedianTtftMs,
    Metric::P99TtftMs,
    Metric::MedianTpotMs,
    Metric::P99TpotMs,
    Metric::MedianItlMs,
    Metric::P99ItlMs,
    Metric::MedianE2elMs,
    Metric::P99E2elMs,
];

/// The number of means at the head of [`TARGETS`].
pub const MEAN_TARGETS: usize = 5;

/// The metric family of each of [`TARGETS`] (`ttft`, `tpot`, `itl`, `e2el`, `throughput`).
pub fn family(target: Metric) -> &'static str {
    let target = target.key();
    if target.contains("ttft") {
        "ttft"
    } else if target.contains("tpot") {
        "tpot"
    } else if target.contains("itl") {
        "itl"
    } else if target.contains("e2el") {
        "e2el"
    } else {
        "throughput"
    }
}

/// How far a measured mean of each target can be off the engine's true value for reasons
/// the simulator does not model (relative; the fit divides each log error by it). TTFT is
/// the loosest: it is a few steps long, so the HTTP path and, in a closed loop, the phase
/// at which the client's arrivals meet the engine's steps move it by several per cent;
/// TPOT and ITL average hundreds of steps. Equal weights let the fit buy a few per cent of
/// TTFT at high concurrency with the per-token decode cost.
/// A median is as steady as the mean of its family; a p99 rests on the tail's few requests
/// and is given twice the noise of its mean.
pub const TARGET_NOISE: [f64; 13] = [0.05, 0.01, 0.01, 0.02, 0.02, 0.05, 0.10, 0.01, 0.02, 0.01, 0.02, 0.02, 0.04];

/// Half a unit of the last decimal place `v` is printed with: the rounding a published value
/// carries. The decimals are those of `v`'s shortest decimal representation (the one that reads
/// back as the same `f64`), so `8` and `8.0` (a JSON float) both have none (0.5), `181.3` one
/// (0.05), `0.0123` four (0.00005). A value a program computed and wrote in full
/// (`181.29999999999998`) has many decimals and a negligible half-unit; an integer written with
/// trailing zeros (`3700`) counts as exact to the unit (0.5), the least it can be rounded to.
/// 0 for a value that is not finite.
pub fn rounding_half_unit(v: f64) -> f64 {
    if !v.is_finite() {
        return 0.0;
    }
    // `Display` of an f64 is its shortest round-trip representation, never in exponent form.
    let s = format!("{}", v.abs());
    let decimals = s.split_once('.').map_or(0, |(_, f)| f.len());
    0.5 * 10f64.powi(-(decimals.min(400) as i32))
}

/// The noise of each of [`TARGETS`] for values read from a result file (`measured`, as
/// [`FitPoint::measured`]): [`TARGET_NOISE`], raised to the value's rounding where that is
/// larger (half a unit of its last printed decimal, [`rounding_half_unit`], relative to the
/// value): a TPOT published as `8` ms says 7.5–8.5 ms, ±6%, and no fit should trust it to 1%.
/// Live measurements are not rounded and keep [`TARGET_NOISE`].
pub fn published_noise(measured: &[Option<f64>]) -> Vec<f64> {
    TARGET_NOISE
        .iter()
        .enumerate()
        .map(|(t, &n)| match measured.get(t).copied().flatten() {
            Some(v) if v.is_finite() && v > 0.0 => n.max(rounding_half_unit(v) / v),
            _ => n,
        })
        .collect()
}

/// `family=value` pairs separated by commas (`ttft=0.40,e2el=0.08`), each family one of
/// [`crate::uncertainty::FAMILIES`] (a later pair replaces an earlier one of the same family) and
/// each value finite and ≥ 0; `what` names the value in the error, `example` shows a spec.
pub fn parse_family_values(spec: &str, what: &str, example: &str) -> Result<Vec<(&'static str, f64)>, String> {
    let mut out: Vec<(&'static str, f64)> = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (f, v) = part.split_once('=').ok_or_else(|| format!("`{part}`: expected family=value"))?;
        let family = crate::uncertainty::FAMILIES.iter().copied().find(|x| *x == f.trim()).ok_or_else(|| {
            format!("`{}`: not a metric family (expected one of {})", f.trim(), crate::uncertainty::FAMILIES.join(", "))
        })?;
        let x: f64 = v.trim().parse().map_err(|_| format!("`{part}`: `{}` is not a number", v.trim()))?;
        // 100 (in ln, or 10,000% as a fraction) is beyond any error or spread a model has: past
        // it the value is a slip (a percentage for a fraction), and the band would print as
        // hundreds of digits.
        if !(x.is_finite() && (0.0..=100.0).contains(&x)) {
            return Err(format!("`{part}`: expected a finite {what}, at most 100"));
        }
        // A family given twice is a mistake in the spec, not "the last one wins".
        if out.iter().any(|(g, _)| *g == family) {
            return Err(format!("`{family}` is given twice in `{spec}`: give each family once"));
        }
        out.push((family, x));
    }
    if out.is_empty() {
        return Err(format!("`{spec}`: expected family=value pairs, e.g. {example}"));
    }
    Ok(out)
}

/// The model's discrepancy at a point of a published setup, per metric family (ln, in
/// [`crate::uncertainty::FAMILIES`] order): by default the validate corpus' within-group sd
/// ([`crate::uncertainty::corpus_discrepancy`]); `calibrate --discrepancy` replaces any of them
/// (a user's own corpus, or a validation that leaves the judged set out of the estimate).
#[derive(Clone, Debug, PartialEq)]
pub struct Discrepancy {
    pub sd: [f64; 5],
    /// Where the values come from, for the profile's note.
    pub source: String,
}

impl Discrepancy {
    /// The validate corpus' within-group sd (`validation/baseline.json`).
    pub fn corpus() -> Discrepancy {
        Discrepancy {
            sd: crate::uncertainty::FAMILIES.map(crate::uncertainty::corpus_discrepancy),
            source: "the validate corpus' within-group sd".into(),
        }
    }

    /// The corpus' values with the families `spec` names replaced: `family=value` pairs
    /// separated by commas (`ttft=0.40,e2el=0.08`), each value a finite, non-negative sd in ln.
    pub fn parse(spec: &str) -> Result<Discrepancy, String> {
        let mut d = Discrepancy::corpus();
        let given = parse_family_values(spec, "sd ≥ 0 in ln", "ttft=0.4,tpot=0.08")?;
        for &(f, x) in &given {
            d.sd[crate::uncertainty::FAMILIES.iter().position(|x| *x == f).expect("a family")] = x;
        }
        let named: Vec<&str> = given.iter().map(|(f, _)| *f).collect();
        d.source =
            format!("given for {} (--discrepancy), the validate corpus' within-group sd otherwise", named.join(", "));
        Ok(d)
    }

    /// The sd of a family (NaN for one that is not).
    pub fn of(&self, family: &str) -> f64 {
        crate::uncertainty::FAMILIES.iter().position(|f| *f == family).map_or(f64::NAN, |i| self.sd[i])
    }

    /// For each of [`TARGETS`]: its family's sd, twice for a p99, as [`TARGET_NOISE`] gives a
    /// p99 twice the noise of its mean (on the corpus the p99s' within-group sd is 1.9 times the
    /// centres' for TTFT and 1.4 times for TPOT).
    pub fn at(&self, t: usize) -> f64 {
        let tail = if TARGETS[t].key().starts_with("p99") { 2.0 } else { 1.0 };
        tail * self.of(family(TARGETS[t]))
    }

    /// A published point's noise per target: the measurement's (`noise`, e.g. [`published_noise`])
    /// and the model's discrepancy at that point in quadrature. A value that the model cannot
    /// meet at one point for reasons no coefficient holds (the harness, the lengths, a cold first
    /// run) then moves the coefficients only as far as the corpus says such a value tells about
    /// them.
    pub fn with(&self, noise: &[f64]) -> Vec<f64> {
        noise.iter().enumerate().map(|(t, n)| n.hypot(self.at(t))).collect()
    }
}

/// One measured load point.
#[derive(Clone, Debug)]
pub struct FitPoint {
    pub name: String,
    /// The scenario that reproduces the measured run (same workload and seed).
    pub spec: SimSpec,
    /// Measured values of [`TARGETS`] (missing ones are None).
    pub measured: Vec<Option<f64>>,
    /// The measured run's own requests at the times the client sent them, replayed open
    /// loop instead of `spec`'s workload (teacher forcing of arrivals): a real client's
    /// closed loop sends a wave of requests over a millisecond or two, not at one instant,
    /// and how a wave splits across the engine's first steps shapes the whole run.
    pub replay: Option<sim::workload::Workload>,
}

impl FitPoint {
    /// Predicted target values under `cost`, replaying the measured arrivals when known.
    pub fn predict(&self, cost: &CostModel) -> Vec<Option<f64>> {
        match &self.replay {
            // Replayed on the one engine: a fleet's requests go through its router instead.
            Some(_) if self.spec.fleet.is_some() => predict(&self.spec, cost),
            None => predict(&self.spec, cost),
            Some(w) => {
                let run = sim::run_workload(&self.spec.engine, cost, w, RunOptions::default());
                completed_targets(&run, &sim::metrics::bench_metrics(&run))
            }
        }
    }
}

/// `w` with its timed requests sent at `send_s` (seconds from the run's start, in request
/// order) and no concurrency limit: the measured arrivals, replayed.
pub fn replay_workload(w: &sim::workload::Workload, send_s: &[f64]) -> Option<sim::workload::Workload> {
    if send_s.len() != w.requests.len() || send_s.iter().any(|s| !s.is_finite() || *s < 0.0) {
        return None;
    }
    let mut r = w.clone();
    for (q, s) in r.requests.iter_mut().zip(send_s) {
        q.arrival_ns = (s * 1e9).round() as u64;
    }
    r.max_concurrency = None;
    r.request_rate = None;
    Some(r)
}

/// A free parameter: a factor on one coefficient or on a group.
#[derive(Clone, Debug, PartialEq)]
pub struct Free {
    pub name: String,
    pub coefficients: Vec<&'static str>,
}

impl Free {
    pub fn one(c: &'static str) -> Free {
        Free { name: c.to_string(), coefficients: vec![c] }
    }
}

/// The result of a fit.
#[derive(Clone, Debug)]
pub struct FitResult {
    pub cost: CostModel,
    pub factors: Vec<f64>,
    pub free: Vec<Free>,
    /// Per point: predicted values of [`TARGETS`].
    pub predicted: Vec<Vec<Option<f64>>>,
    pub objective: f64,
    pub evaluations: usize,
    /// R² of predicted vs measured, per target (None with < 2 points).
    pub r2: Vec<Option<f64>>,
}

/// Predicted target values of one point under `cost`.
pub fn predict(spec: &SimSpec, cost: &CostModel) -> Vec<Option<f64>> {
    let mut s = spec.clone();
    // A fleet's replicas each hold their own cost: all of them take it.
    s.set_cost(cost);
    let out = sim::simulate(&s, RunOptions::default());
    completed_targets(&out.run, &out.metrics)
}

/// [`targets_of`] a run that completed; none of them for a run that did not (the modelled
/// engine raised, or the run stalled): its metrics cover only the requests that finished,
/// so a fit must not match them. [`objective`] and the identifiability's residuals treat the
/// missing predictions as a failed evaluation, never as a perfect one.
fn completed_targets(run: &sim::simulation::RunResult, m: &sim::metrics::BenchMetrics) -> Vec<Option<f64>> {
    if run.stop == sim::simulation::StopReason::Completed {
        targets_of(m)
    } else {
        vec![None; TARGETS.len()]
    }
}

/// The values of [`TARGETS`] in a run's metrics, in that order.
pub fn targets_of(m: &sim::metrics::BenchMetrics) -> Vec<Option<f64>> {
    let p99 = |s: &sim::metrics::Stats| Some(s.p99);
    vec![
        Some(m.ttft.mean),
        Some(m.tpot.mean),
        Some(m.itl.mean),
        Some(m.e2el.mean),
        Some(m.output_throughput),
        Some(m.ttft.median),
        p99(&m.ttft),
        Some(m.tpot.median),
        p99(&m.tpot),
        Some(m.itl.median),
        p99(&m.itl),
        Some(m.e2el.median),
        p99(&m.e2el),
    ]
}

/// R² of `predicted` against `measured` (pairs (measured, predicted)): 1 − SS_res / SS_tot
/// around the measured mean (statrs). None with fewer than two pairs or no spread.
pub fn r_squared(pairs: &[(f64, f64)]) -> Option<f64> {
    if pairs.len() < 2 {
        return None;
    }
    let mean = pairs.iter().map(|p| p.0).mean();
    let ss_tot: f64 = pairs.iter().map(|(m, _)| (m - mean).powi(2)).sum();
    let ss_res: f64 = pairs.iter().map(|(m, q)| (m - q).powi(2)).sum();
    (ss_tot > 0.0).then(|| 1.0 - ss_res / ss_tot)
}

pub fn apply(start: &CostModel, free: &[Free], x: &[f64]) -> CostModel {
    let base = start.coefficients();
    let scaled = free.iter().zip(x).flat_map(|(f, &xi)| {
        let base = &base;
        f.coefficients.iter().map(move |&n| (n, base.get(n).unwrap_or(0.0) * xi.exp()))
    });
    overlaid(start, scaled.collect::<Vec<_>>())
}

fn objective(points: &[FitPoint], cost: &CostModel) -> (f64, Vec<Vec<Option<f64>>>) {
    let mut total = 0.0;
    let mut preds = Vec::with_capacity(points.len());
    for p in points {
        let pred = p.predict(cost);
        for ((m, q), scale) in p.measured.iter().zip(&pred).zip(TARGET_NOISE) {
            match (m, q) {
                (Some(m), Some(q)) if *m > 0.0 && *q > 0.0 => total += ((q / m).ln() / scale).powi(2),
                // A measured value the simulation could not predict: its run did not complete.
                (Some(m), None) if *m > 0.0 => total = f64::INFINITY,
                _ => {}
            }
        }
        preds.push(pred);
    }
    (total, preds)
}

/// Fits the `free` factors, starting from `start`.
///
/// With a `projection`, its coefficients are not searched but solved at every step of the
/// search (see [`Projection`]); they must not be among `free`.
pub fn fit(
    points: &[FitPoint],
    start: &CostModel,
    free: &[Free],
    projection: Option<&Projection>,
    max_evals: usize,
) -> FitResult {
    let d = free.len();
    let mut evals = 0usize;
    let cost_at = |x: &[f64]| {
        let c = apply(start, free, x);
        match projection {
            Some(p) => p.apply(points, &c),
            None => c,
        }
    };
    let mut f = |x: &[f64]| {
        evals += 1;
        objective(points, &cost_at(x)).0
    };
    let x = nelder_mead(&mut f, d, max_evals);
    let x = pattern_search(&mut f, x, 0.1, 1e-3, max_evals / 2);
    let cost = cost_at(&x);
    let (obj, predicted) = objective(points, &cost);
    let r2 = (0..TARGETS.len())
        .map(|t| {
            let pairs: Vec<(f64, f64)> = points
                .iter()
                .zip(&predicted)
                .filter_map(|(p, q)| Some((p.measured[t]?, q[t]?)))
                .filter(|(m, _)| *m > 0.0)
                .collect();
            r_squared(&pairs)
        })
        .collect();
    FitResult {
        cost,
        factors: x.iter().map(|v| v.exp()).collect(),
        free: free.to_vec(),
        predicted,
        objective: obj,
        evaluations: evals,
        r2,
    }
}

/// Compass search from `x`: tries ±`step` on each coordinate, moves on any improvement,
/// halves the step when none helps, until it is below `min_step` or `max_evals` are spent.
/// It polishes Nelder–Mead's answer: on a simulator's piecewise-smooth objective a simplex
/// can collapse along a valley short of its floor (seen on `serve` probes: a fit at 8× the
/// reachable objective, every TPOT residual of one sign), which a search along the axes,
/// needing no simplex shape, walks out of.
pub fn pattern_search(
    f: &mut impl FnMut(&[f64]) -> f64,
    mut x: Vec<f64>,
    mut step: f64,
    min_step: f64,
    max_evals: usize,
) -> Vec<f64> {
    if x.is_empty() {
        return x;
    }
    let mut fx = f(&x);
    let mut used = 1;
    while step >= min_step && used < max_evals {
        let mut improved = false;
        for i in 0..x.len() {
            for dir in [1.0, -1.0] {
                let mut y = x.clone();
                y[i] += dir * step;
                let fy = f(&y);
                used += 1;
                if fy < fx {
                    (x, fx) = (y, fy);
                    improved = true;
                    break;
                }
            }
        }
        if !improved {
            step /= 2.0;
        }
    }
    x
}

/// Nelder–Mead minimisation from 0 in `d` dimensions (log factors).
pub fn nelder_mead(f: &mut impl FnMut(&[f64]) -> f64, d: usize, max_evals: usize) -> Vec<f64> {
    if d == 0 {
        return Vec::new();
    }
    let mut best = vec![0.0; d];
    let mut budget = max_evals;
    // Two starts: the second restarts from the first's best with a fresh simplex.
    for round in 0..2 {
        let step = if round == 0 { 0.7 } else { 0.2 };
        let mut simplex: Vec<(Vec<f64>, f64)> = Vec::with_capacity(d + 1);
        let x0 = best.clone();
        let v0 = f(&x0);
        simplex.push((x0.clone(), v0));
        for i in 0..d {
            let mut x = x0.clone();
            x[i] += step;
            let v = f(&x);
            simplex.push((x, v));
        }
        let mut used = d + 1;
        while used < budget / 2 + if round == 1 { budget / 2 } else { 0 } {
            simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
            let spread = simplex.last().unwrap().1 - simplex[0].1;
            let size: f64 = simplex
                .iter()
                .skip(1)
                .map(|(x, _)| x.iter().zip(&simplex[0].0).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max))
                .fold(0.0, f64::max);
            if spread < 1e-10 && size < 1e-4 {
                break;
            }
            let centroid: Vec<f64> =
                (0..d).map(|j| simplex[..d].iter().map(|(x, _)| x[j]).sum::<f64>() / d as f64).collect();
            let worst = simplex[d].clone();
            let point = |t: f64| -> Vec<f64> { (0..d).map(|j| centroid[j] + t * (worst.0[j] - centroid[j])).collect() };
            let xr = point(-1.0);
            let vr = f(&xr);
            used += 1;
            if vr < simplex[0].1 {
                let xe = point(-2.0);
                let ve = f(&xe);
                used += 1;
                simplex[d] = if ve < vr { (xe, ve) } else { (xr, vr) };
            } else if vr < simplex[d - 1].1 {
                simplex[d] = (xr, vr);
            } else {
                let (xc, vc) = if vr < worst.1 {
                    let x = point(-0.5);
                    let v = f(&x);
                    (x, v)
                } else {
                    let x = point(0.5);
                    let v = f(&x);
                    (x, v)
                };
                used += 1;
                if vc < worst.1.min(vr) {
                    simplex[d] = (xc, vc);
                } else {
                    // Shrink towards the best.
                    let b = simplex[0].0.clone();
                    for k in 1..=d {
                        let x: Vec<f64> = (0..d).map(|j| b[j] + 0.5 * (simplex[k].0[j] - b[j])).collect();
                        let v = f(&x);
                        simplex[k] = (x, v);
                        used += 1;
                    }
                }
            }
        }
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        best = simplex[0].0.clone();
        budget = budget.saturating_sub(used);
    }
    best
}

/// Roofline floors (µs) of the GPU-side coefficients: the fastest one GPU of
/// the deployment could possibly be (100% of peak FLOP/s or bandwidth, its
/// share of the work at the scenario's TP size). The per-token floors count
/// the linear layers only: the embedding is a lookup and the LM head runs on
/// sampled positions, so counting them would raise the floor past what is
/// physical. An engine the scenario runs `cost.time_scale` k times faster than its cards
/// (`servesim serve --time-scale k`) has floors k times lower: they are divided by it.
pub fn roofline_floors(spec: &SimSpec) -> Vec<(&'static str, f64)> {
    let m = &spec.model;
    let g = &spec.gpu;
    let d = &spec.deployment;
    let tp = f64::from(d.tensor_parallel_size.max(1));
    let flops = crate::traps::linear_peak_flops(spec);
    let linear = (m.num_parameters - m.embedding_parameters().min(m.num_parameters)) as f64 / tp;
    let weights = m.weight_bytes_per_gpu(d.tensor_parallel_size, d.linear_weight_bytes) as f64;
    let k = spec.cost.time_scale;
    let floors = vec![
        ("prefill_token_us", 2.0 * linear / flops * 1e6),
        ("decode_token_us", 2.0 * linear / flops * 1e6),
        ("step_us", weights / g.memory_bandwidth_bytes_per_s * 1e6),
        (
            "prefill_attention_us",
            4.0 * f64::from(m.num_layers) * f64::from(m.num_attention_heads) * f64::from(m.head_dim)
                / tp
                / g.bf16_peak_flops()
                * 1e6,
        ),
        (
            "decode_kv_us",
            m.kv_bytes_per_token_per_gpu(d.tensor_parallel_size, d.kv_dtype_bytes) as f64
                / g.memory_bandwidth_bytes_per_s
                * 1e6,
        ),
    ];
    // At 1 (every scenario but a time-scaled one) the figures as they are, bit for bit.
    if k == 1.0 {
        floors
    } else {
        floors.into_iter().map(|(n, f)| (n, f / k)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cost under which the modelled engine stops (SGLang 0.4.10's decode out of memory)
    /// predicts nothing, and the objective calls it a failed evaluation, not a perfect fit.
    #[test]
    fn a_run_that_does_not_complete_predicts_nothing_and_costs_infinitely() {
        let v: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/fixtures/sglang-0.4.10-decode-oom.json")).unwrap();
        let res = sim::builtin::resources().unwrap();
        let spec = sim::config::resolve(&sim::config::from_value(v, "").unwrap(), &res).unwrap();
        let pred = predict(&spec, &spec.cost);
        assert!(pred.iter().all(Option::is_none), "{pred:?}");
        let point =
            FitPoint { name: "c8".into(), spec: spec.clone(), measured: vec![Some(50.0); TARGETS.len()], replay: None };
        assert_eq!(objective(std::slice::from_ref(&point), &spec.cost).0, f64::INFINITY);
    }

    #[test]
    fn the_rounding_half_unit_is_read_from_the_shortest_decimal_form() {
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1e-300);
        for (v, h) in [
            (8.0, 0.5),
            (8f64, 0.5),
            (3700.0, 0.5),
            (181.3, 0.05),
            (0.0123, 0.00005),
            (18.25, 0.005),
            (0.5, 0.05),
            (-2.75, 0.005),
        ] {
            assert!(close(rounding_half_unit(v), h), "{v}: {} against {h}", rounding_half_unit(v));
        }
        // A JSON float as a result file holds it: `8.0` and `8` read the same.
        for text in ["8", "8.0", "8.00"] {
            let v: f64 = serde_json::from_str(text).unwrap();
            assert!(close(rounding_half_unit(v), 0.5), "{text}");
        }
        // What a program computed and wrote in full is not rounded to speak of.
        for v in [181.29999999999998, 2.0 / 3.0, 1234.567891234, 0.1 + 0.2] {
            assert!(rounding_half_unit(v) / v < 1e-9, "{v}: {}", rounding_half_unit(v));
        }
        assert_eq!(rounding_half_unit(f64::NAN), 0.0);
        assert_eq!(rounding_half_unit(f64::INFINITY), 0.0);
    }

    /// A point whose value is an integer gets at least its half-unit as noise: an 8 ms TPOT
    /// 0.5/8 = 6.25% (not TARGET_NOISE's 1%); elsewhere the noise is at least TARGET_NOISE's.
    #[test]
    fn an_integer_value_gets_at_least_its_half_unit_as_noise() {
        let tpot = TARGETS.iter().position(|t| *t == Metric::MeanTpotMs).unwrap();
        let ttft = TARGETS.iter().position(|t| *t == Metric::MeanTtftMs).unwrap();
        let thr = TARGETS.iter().position(|t| *t == Metric::OutputThroughput).unwrap();
        let mut m = vec![None; TARGETS.len()];
        m[tpot] = Some(8.0);
        m[ttft] = Some(181.3);
        m[thr] = Some(3701.0);
        let n = published_noise(&m);
        assert_eq!(n.len(), TARGETS.len());
        assert!(n[tpot] >= 0.5 / 8.0 && (n[tpot] - 0.0625).abs() < 1e-12, "{n:?}");
        // 0.05/181.3 and 0.5/3701 are below the floors: TARGET_NOISE as it is.
        assert_eq!(n[ttft], TARGET_NOISE[ttft]);
        assert_eq!(n[thr], TARGET_NOISE[thr]);
        for (t, (a, b)) in n.iter().zip(TARGET_NOISE).enumerate() {
            assert!(*a >= b, "{}: {a} < {b}", TARGETS[t]);
            if let Some(v) = m[t] {
                assert!(*a >= rounding_half_unit(v) / v, "{}", TARGETS[t]);
            }
        }
        // Any integer value: at least its half-unit.
        for v in [1.0, 3.0, 8.0, 12.0, 49.0, 250.0] {
            let mut m = vec![None; TARGETS.len()];
            m[tpot] = Some(v);
            assert!(published_noise(&m)[tpot] >= 0.5 / v, "{v}");
        }
    }

    #[test]
    fn nelder_mead_finds_a_quadratic_minimum() {
        let mut f = |x: &[f64]| (x[0] - 1.0).powi(2) + 3.0 * (x[1] + 0.5).powi(2) + 0.5 * (x[2] - 0.2).powi(2);
        let x = nelder_mead(&mut f, 3, 2000);
        assert!((x[0] - 1.0).abs() < 1e-3 && (x[1] + 0.5).abs() < 1e-3 && (x[2] - 0.2).abs() < 1e-3, "{x:?}");
    }
}

/// One engine step from vLLM's `--enable-logging-iteration-details` log.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepRow {
    pub context_requests: f64,
    pub context_tokens: f64,
    pub generation_requests: f64,
    pub generation_tokens: f64,
    pub elapsed_ms: f64,
}

fn number_before(line: &str, label: &str) -> Option<f64> {
    let i = line.find(label)?;
    line[..i].trim_end().rsplit([' ', ',', ':']).next()?.parse().ok()
}

/// Parses the `Iteration(N): ... iteration elapsed time: X ms` lines of a vLLM log.
pub fn parse_step_log(text: &str) -> Vec<StepRow> {
    text.lines()
        .filter(|l| l.contains("Iteration(") && l.contains("iteration elapsed time:"))
        .filter_map(|l| {
            let el = l.split("iteration elapsed time:").nth(1)?.split_whitespace().next()?.parse().ok()?;
            Some(StepRow {
                context_requests: number_before(l, "context requests")?,
                context_tokens: number_before(l, "context tokens")?,
                generation_requests: number_before(l, "generation requests")?,
                generation_tokens: number_before(l, "generation tokens")?,
                elapsed_ms: el,
            })
        })
        .collect()
}

/// A linear least-squares fit of step time on step composition.
#[derive(Clone, Debug)]
pub struct StepFit {
    pub coefficients: StepCoefficients,
    pub r2: f64,
    pub residual_std_ms: f64,
    pub rows: usize,
}

/// The cost coefficients a step log determines (µs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepCoefficients {
    pub step_us: f64,
    pub per_seq_us: f64,
    pub prefill_token_us: f64,
    pub decode_token_us: f64,
}

impl StepCoefficients {
    /// Each coefficient with its name (`sim::cost::COEFFICIENT_NAMES`).
    pub fn named(&self) -> [(&'static str, f64); 4] {
        [
            ("step_us", self.step_us),
            ("per_seq_us", self.per_seq_us),
            ("prefill_token_us", self.prefill_token_us),
            ("decode_token_us", self.decode_token_us),
        ]
    }
}

/// Solves the normal equations of `x β = y` over the columns in `active`.
fn least_squares(x: &[[f64; 4]], y: &[f64], active: &[bool; 4]) -> Option<[f64; 4]> {
    let idx: Vec<usize> = (0..4).filter(|&i| active[i]).collect();
    let k = idx.len();
    let mut a = vec![vec![0.0; k + 1]; k];
    for (row, &yy) in x.iter().zip(y) {
        for (p, &i) in idx.iter().enumerate() {
            for (q, &j) in idx.iter().enumerate() {
                a[p][q] += row[i] * row[j];
            }
            a[p][k] += row[i] * yy;
        }
    }
    // Gaussian elimination with partial pivoting.
    for c in 0..k {
        let piv = (c..k).max_by(|&r1, &r2| a[r1][c].abs().total_cmp(&a[r2][c].abs()))?;
        if a[piv][c].abs() < 1e-12 {
            return None;
        }
        a.swap(c, piv);
        for r in 0..k {
            if r != c {
                let f = a[r][c] / a[c][c];
                for cc in c..=k {
                    a[r][cc] -= f * a[c][cc];
                }
            }
        }
    }
    let mut beta = [0.0; 4];
    for (p, &i) in idx.iter().enumerate() {
        beta[i] = a[p][k] / a[p][p];
    }
    Some(beta)
}

/// Fits `elapsed = step + per_seq·(requests) + prefill_token·(context tokens) + decode_token·(generation tokens)`,
/// non-negative (a negative coefficient is dropped and the rest refitted). Teacher forcing: each
/// row is one real step's exact composition.
pub fn fit_step_log(rows: &[StepRow]) -> Option<StepFit> {
    if rows.len() < 8 {
        return None;
    }
    let x: Vec<[f64; 4]> = rows
        .iter()
        .map(|r| [1.0, r.context_requests + r.generation_requests, r.context_tokens, r.generation_tokens])
        .collect();
    let y: Vec<f64> = rows.iter().map(|r| r.elapsed_ms).collect();
    let mut active = [true; 4];
    let beta = loop {
        let b = least_squares(&x, &y, &active)?;
        match (0..4).find(|&i| active[i] && b[i] < 0.0) {
            Some(i) => active[i] = false,
            None => break b,
        }
    };
    let pred: Vec<f64> = x.iter().map(|r| (0..4).map(|i| r[i] * beta[i]).sum()).collect();
    let resid: Vec<f64> = y.iter().zip(&pred).map(|(a, b)| a - b).collect();
    let pairs: Vec<(f64, f64)> = y.iter().copied().zip(pred).collect();
    Some(StepFit {
        // The columns: steps, sequences, context tokens, generation tokens (ms → µs).
        coefficients: StepCoefficients {
            step_us: beta[0] * 1e3,
            per_seq_us: beta[1] * 1e3,
            prefill_token_us: beta[2] * 1e3,
            decode_token_us: beta[3] * 1e3,
        },
        r2: r_squared(&pairs).unwrap_or(0.0),
        residual_std_ms: resid.iter().std_dev(),
        rows: rows.len(),
    })
}

/// The coefficients a lone request's TTFT is exactly linear in, solved inside the fit.
///
/// With one request in flight (a concurrency-1 probe, not replayed) the schedule does not
/// depend on timing, so its mean TTFT is `rest + Σ c_k · u_k`: `u_k` is what coefficient
/// `k` at 1 µs (every other at 0) adds to the simulator's TTFT (chunking included), `rest` the
/// TTFT with these coefficients at 0 and the others as they are. The fit is then separable
/// (variable projection): for each value of the other coefficients that the minimiser
/// tries, these are solved by least squares on the TTFTs. Doing so matters twice:
/// (1) the global fit weighs every probe's TTFT alike, and at higher concurrency a closed
/// loop's TTFT carries the client's phase against the engine's steps, which it pays for by
/// trading the linear prefill term for the quadratic one, which a probe plan's prompt
/// lengths barely separate; (2) a log-factor on an additive term such as the ingress can
/// wander towards 0, where the objective is flat in it, and never come back (seen on a live
/// SGLang fit: ingress 0.0005 µs while every probe's TTFT was 10 ms short).
#[derive(Clone, Debug)]
pub struct Projection {
    /// The coefficients solved, among [`PROJECTABLE`].
    pub names: Vec<&'static str>,
    /// (point index, measured mean TTFT, the unit columns in `names` order).
    rows: Vec<(usize, f64, Vec<f64>)>,
}

/// The coefficients a [`Projection`] may solve: a lone request's TTFT is linear in them.
pub const PROJECTABLE: [&str; 3] = ["request_ingress_us", "prefill_token_us", "prefill_attention_us"];

/// A [`Projection`]'s solution at one value of the other coefficients.
#[derive(Clone, Debug)]
pub struct LinearFit {
    /// The solved coefficients (µs), in the projection's `names` order; a coefficient that
    /// came out negative is set to 0 and the rest solved again.
    pub values: Vec<f64>,
    /// R² of the predicted against the measured TTFTs of the rows.
    pub r2: f64,
    pub points: usize,
    /// For each coefficient, how far the rows' simulated TTFTs move with it at the solution, as
    /// a share of how far they move with it alone (its unit column): 1 where a lone request's
    /// TTFT is linear in it; well below 1 where a step in flight hides it (SGLang before 0.5.22:
    /// the ingress behind the extra decode of the request before), and the data then barely
    /// determine it.
    pub sensitivity: Vec<f64>,
}

/// `base` with the coefficients of `values` set.
pub fn overlaid<'a>(base: &CostModel, values: impl IntoIterator<Item = (&'a str, f64)>) -> CostModel {
    let mut c = base.clone();
    let mut o = CostCoefficients::default();
    for (n, v) in values {
        o.set(n, v);
    }
    c.overlay(&o, sim::cost::CoefficientSource::Profile);
    c
}

/// `base` with coefficient `name` at 1 µs and every other at 0.
fn unit_cost(base: &CostModel, name: &str) -> CostModel {
    overlaid(base, COEFFICIENT_NAMES.iter().map(|&n| (n, if n == name { 1.0 } else { 0.0 })))
}

impl Projection {
    /// The projection of `names` on the concurrency-1, not replayed points of `points` that
    /// measured TTFT. None with no more rows than unknowns, or a name outside [`PROJECTABLE`].
    pub fn new(points: &[FitPoint], names: &[&'static str], base: &CostModel) -> Option<Projection> {
        if names.is_empty() || names.iter().any(|n| !PROJECTABLE.contains(n)) {
            return None;
        }
        let units: Vec<CostModel> = names.iter().map(|n| unit_cost(base, n)).collect();
        // What an all-zero cost still takes (steps last at least a nanosecond), taken off each column.
        let zero = unit_cost(base, "");
        let rows: Vec<(usize, f64, Vec<f64>)> = points
            .iter()
            .enumerate()
            .filter(|(_, p)| p.replay.is_none() && p.spec.workload.max_concurrency.unwrap_or(0) == 1)
            .filter_map(|(i, p)| {
                let m = p.measured[0].filter(|m| *m > 0.0)?;
                let z = predict(&p.spec, &zero)[0]?;
                let cols = units.iter().map(|u| predict(&p.spec, u)[0].map(|v| v - z)).collect::<Option<Vec<f64>>>()?;
                Some((i, m, cols))
            })
            .collect();
        (rows.len() > names.len()).then(|| Projection { names: names.to_vec(), rows })
    }

    /// Solves the projected coefficients given the others in `cost`. None when the system is
    /// singular.
    pub fn solve(&self, points: &[FitPoint], cost: &CostModel) -> Option<LinearFit> {
        let k = self.names.len();
        let zeroed = overlaid(cost, self.names.iter().map(|&n| (n, 0.0)));
        // Absolute errors (ms), not relative: a lone request's TTFT carries the HTTP path's
        // jitter, a few ms whatever the prompt, and weighing the short prompts up by 1/TTFT
        // let that jitter trade the per-token term against the ingress (against `serve`, the
        // fitted prefill_token_us came out 0.96–1.04 of the truth relative, 1.00–1.04 in ms).
        let mut x = Vec::with_capacity(self.rows.len());
        let mut y = Vec::with_capacity(self.rows.len());
        for (i, m, cols) in &self.rows {
            let r = predict(&points[*i].spec, &zeroed)[0]?;
            let mut row = [0.0; 4];
            for (j, c) in cols.iter().enumerate() {
                row[j] = *c;
            }
            x.push(row);
            y.push(m - r);
        }
        // Columns scaled to unit norm, so the solver's pivots do not depend on units.
        let norm: Vec<f64> = (0..k).map(|j| x.iter().map(|r| r[j] * r[j]).sum::<f64>().sqrt()).collect();
        if norm.iter().any(|n| *n <= 0.0 || !n.is_finite()) {
            return None;
        }
        for r in &mut x {
            for j in 0..k {
                r[j] /= norm[j];
            }
        }
        let mut active = [false; 4];
        active[..k].iter_mut().for_each(|a| *a = true);
        // A coefficient that comes out negative is held at 0 and the rest solved again, the
        // last named first (attention before the per-token term).
        let beta = loop {
            let b = least_squares(&x, &y, &active)?;
            match (0..k).rev().find(|&j| active[j] && b[j] < 0.0) {
                Some(j) => active[j] = false,
                None => break b,
            }
            if !active.iter().any(|a| *a) {
                break [0.0; 4];
            }
        };
        let values: Vec<f64> = (0..k).map(|j| if active[j] { beta[j] / norm[j] } else { 0.0 }).collect();
        let (values, pred, sensitivity) = self.refine(points, cost, values)?;
        let meas: Vec<f64> = self.rows.iter().map(|r| r.1).collect();
        let pairs: Vec<(f64, f64)> = meas.into_iter().zip(pred).collect();
        Some(LinearFit { values, r2: r_squared(&pairs).unwrap_or(0.0), points: self.rows.len(), sensitivity })
    }

    /// The unit columns hold only where a lone request never waits behind a step: with the
    /// other coefficients at 0 nothing is in flight when it arrives. Where the engine still
    /// runs a step when the next request of the closed loop comes (SGLang before 0.5.22 with
    /// the overlap scheduler decodes a finished request once more), that wait hides the
    /// ingress: the mean TTFT of `n` requests moves by 1/n of it, not by all of it, and the
    /// unit solve took ingress at a third of the truth. Gauss–Newton on the simulated TTFTs
    /// themselves, from the unit solve, with columns taken by finite differences at the
    /// current values: where the TTFT is linear, the first step changes nothing.
    /// Also returns each coefficient's [`LinearFit::sensitivity`] from the last Jacobian taken.
    fn refine(&self, points: &[FitPoint], cost: &CostModel, start: Vec<f64>) -> Option<(Vec<f64>, Vec<f64>, Vec<f64>)> {
        let k = self.names.len();
        let ttfts = |v: &[f64]| -> Option<Vec<f64>> {
            let c = overlaid(cost, self.names.iter().copied().zip(v.iter().copied()));
            self.rows.iter().map(|(i, _, _)| predict(&points[*i].spec, &c)[0]).collect()
        };
        let sse = |pred: &[f64]| self.rows.iter().zip(pred).map(|(r, p)| (r.1 - p) * (r.1 - p)).sum::<f64>();
        let mut values = start;
        let mut pred = ttfts(&values)?;
        let unit: Vec<f64> = (0..k).map(|j| self.rows.iter().map(|(_, _, cols)| cols[j]).sum::<f64>()).collect();
        let mut sensitivity = vec![1.0; k];
        for _ in 0..12 {
            let mut x = vec![[0.0; 4]; self.rows.len()];
            let y: Vec<f64> = self.rows.iter().zip(&pred).map(|(r, p)| r.1 - p).collect();
            let mut active = [false; 4];
            for j in 0..k {
                // A step of a few percent of the value (or of the unit solve's scale).
                let h = (0.02 * values[j]).max(1e-6 * (1.0 + values.iter().copied().fold(0.0, f64::max)));
                let mut v = values.clone();
                v[j] += h;
                let p = ttfts(&v)?;
                for (row, (a, b)) in x.iter_mut().zip(p.iter().zip(&pred)) {
                    row[j] = (a - b) / h;
                }
                active[j] = x.iter().any(|r| r[j] != 0.0);
                let moved: f64 = x.iter().map(|r| r[j]).sum();
                sensitivity[j] = if unit[j] > 0.0 { moved / unit[j] } else { 1.0 };
            }
            let norm: Vec<f64> =
                (0..4).map(|j| x.iter().map(|r| r[j] * r[j]).sum::<f64>().sqrt().max(1e-300)).collect();
            for r in &mut x {
                for j in 0..k {
                    r[j] /= norm[j];
                }
            }
            let Some(step) = least_squares(&x, &y, &active) else { break };
            // Halve the step until it does not make the fit worse (the TTFT has kinks).
            let before = sse(&pred);
            let mut t = 1.0;
            let mut moved = false;
            while t > 1e-3 {
                let cand: Vec<f64> = (0..k)
                    .map(|j| if active[j] { (values[j] + t * step[j] / norm[j]).max(0.0) } else { values[j] })
                    .collect();
                let p = ttfts(&cand)?;
                if sse(&p) < before {
                    let change =
                        (0..k).map(|j| (cand[j] - values[j]).abs() / values[j].abs().max(1e-9)).fold(0.0, f64::max);
                    values = cand;
                    pred = p;
                    moved = change > 1e-7;
                    break;
                }
                t *= 0.5;
            }
            if !moved {
                break;
            }
        }
        Some((values, pred, sensitivity))
    }

    /// `cost` with the projected coefficients solved (unchanged when they cannot be).
    pub fn apply(&self, points: &[FitPoint], cost: &CostModel) -> CostModel {
        match self.solve(points, cost) {
            Some(l) => overlaid(cost, self.names.iter().copied().zip(l.values)),
            None => cost.clone(),
        }
    }
}

#[cfg(test)]
mod step_tests {
    use super::*;

    #[test]
    fn parses_vllm_iteration_lines_and_recovers_a_linear_step_model() {
        let mut text = String::new();
        for i in 0..40u32 {
            let (cr, ct, gr, gt) = (i % 2, (i % 2) * (64 + 8 * i), 1 + i % 5, 1 + i % 5);
            let el = 9.0 + 0.3 * f64::from(cr + gr) + 0.2 * f64::from(ct) + 0.5 * f64::from(gt);
            text.push_str(&format!("(APIServer pid=1) INFO 11-30 04:50:44 [loggers.py:199] Engine 000: Iteration({i}): {cr} context requests, {ct} context tokens, {gr} generation requests, {gt} generation tokens, iteration elapsed time: {el:.4} ms, CPU KV cache usage: 5.3%\n"));
        }
        text.push_str("unrelated line\n");
        let rows = parse_step_log(&text);
        assert_eq!(rows.len(), 40);
        let f = fit_step_log(&rows).unwrap();
        // per_seq and decode_token are collinear here except through context requests; the sum is identified.
        assert!((f.coefficients.step_us - 9000.0).abs() < 50.0, "{:?}", f.coefficients);
        assert!((f.coefficients.prefill_token_us - 200.0).abs() < 1.0, "{:?}", f.coefficients);
        assert!(f.r2 > 0.999);
    }
}
