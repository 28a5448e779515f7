//! `cost.time_scale` k: an engine k times faster than the rest of its scenario says
//! (`sim::cost::CostModel::scale_time`), as `servesim serve --time-scale k` runs one.
//!
//! The rounding: every time is computed in µs (f64), divided by k and rounded to whole ns once
//! (`sim::cost::us_to_ns`), so a scaled time is within half a nanosecond of the unscaled one ÷ k,
//! and exactly it where k is a power of two and the unscaled time in ns a whole multiple of k
//! (dividing by a power of two is exact in binary floating point). The first test builds a run
//! where that holds for every time, so the whole run is the unscaled one ÷ 4, metric for metric;
//! the others hold each time within its rounding.

mod common;

use common::*;
use serde_json::{json, Value};
use sim::cost::{CostCoefficients, StepShape};

/// A linear scenario whose every time is a whole multiple of 4 ns: step 8,000 µs, 4 µs a
/// sequence, 32 µs a prefill token, 152 µs a decode token, 4 ns a prefill pair, 500 ns a KV
/// token read, ingress 1,500 µs, 40 µs an output token.
fn linear(k: Option<f64>) -> Value {
    let mut v = small_vllm(200, 24, 24, 6);
    v["cost"] = json!({"coefficients": {"step_us": 8000, "per_seq_us": 4, "prefill_token_us": 32,
        "decode_token_us": 152, "prefill_attention_us": 0.004, "decode_kv_us": 0.5,
        "request_ingress_us": 1500, "output_token_us": 40}});
    if let Some(k) = k {
        v["cost"]["time_scale"] = json!(k);
    }
    v
}

#[test]
fn at_a_power_of_two_every_time_of_the_run_is_exactly_divided() {
    let (one, four) = (spec(linear(None)), spec(linear(Some(4.0))));
    let (a, b) = (sim::simulate(&one, Default::default()), sim::simulate(&four, Default::default()));
    assert_eq!(a.run.records.len(), b.run.records.len());
    let mut checked = 0;
    for (x, y) in a.run.records.iter().zip(&b.run.records) {
        assert!(x.completed && y.completed);
        assert_eq!(x.dispatch_ns, 4 * y.dispatch_ns);
        assert_eq!(x.engine_arrival_ns, 4 * y.engine_arrival_ns);
        assert_eq!(x.first_scheduled_ns.map(|t| t / 4), y.first_scheduled_ns);
        assert_eq!(x.first_scheduled_ns.unwrap() % 4, 0);
        assert_eq!(x.prefill_compute_ns, 4 * y.prefill_compute_ns);
        let (tx, ty) = (a.run.token_times(x), b.run.token_times(y));
        assert_eq!(tx.len(), ty.len());
        for (p, q) in tx.iter().zip(&ty) {
            assert_eq!(*p, 4 * q);
            checked += 1;
        }
    }
    assert!(checked > 500, "{checked} token times");
    // The metrics too, to the last bit: every one is a sum, mean or ratio of those times, and
    // scaling by a power of two commutes with the floating-point rounding.
    let (m, n) = (&a.metrics, &b.metrics);
    for (s, t) in [(&m.ttft, &n.ttft), (&m.tpot, &n.tpot), (&m.itl, &n.itl), (&m.e2el, &n.e2el)] {
        assert_eq!(s.mean, 4.0 * t.mean);
        assert_eq!(s.median, 4.0 * t.median);
        assert_eq!(s.p99, 4.0 * t.p99);
    }
    assert_eq!(m.duration_s, 4.0 * n.duration_s);
    assert_eq!(4.0 * m.output_throughput, n.output_throughput);
    // The coefficients as the engine runs them, and the report says it is time-scaled.
    assert_eq!(four.cost.step_us, 2000.0);
    assert_eq!(four.cost.output_token_us, 10.0);
    assert_eq!(four.cost.time_scale, 4.0);
    assert!(four.cost.source().contains("time scale 4"), "{}", four.cost.source());
    assert_eq!(one.cost.source(), "linear (scenario coefficients)");
}

/// The kernel-composed cost (Qwen2.5-7B on an A100: measured tables) at 10: each step's time is
/// the unscaled step's µs ÷ 10, rounded once; so is every front-end time; a whole run's
/// metrics are ÷ 10 within the rounding's nanoseconds.
#[test]
fn the_composed_cost_and_the_front_end_are_divided_within_their_rounding() {
    let base = small_vllm(300, 40, 48, 12);
    let mut scaled = base.clone();
    scaled["cost"] = json!({"time_scale": 10});
    let (one, ten) = (spec(base), spec(scaled));
    let (c1, c10) = (one.cost.composed.as_ref().unwrap(), ten.cost.composed.as_ref().unwrap());
    assert_eq!(c10.time_scale(), 10.0);
    let mut shapes = Vec::new();
    for n in [1u64, 7, 64, 500, 2048] {
        for ctx in [0u64, 700, 4000] {
            let mut s = StepShape::default();
            s.add_prefill(ctx, n);
            shapes.push(s);
            let mut m = StepShape::decodes(n.min(256), n.min(256) * (ctx + 1));
            m.add_prefill(ctx, 64);
            shapes.push(m);
            for overlapped in [false, true] {
                let mut d = StepShape::decodes(n.min(256), n.min(256) * (ctx + 1));
                d.cpu_overlapped = overlapped;
                shapes.push(d);
            }
        }
    }
    for s in &shapes {
        let (u1, u10) = (c1.step_us(s), c10.step_us(s));
        assert!((u10 - u1 / 10.0).abs() <= 1e-12 * u1, "{s:?}: {u10} µs against {u1} µs");
        // The model's step time (twice: the decode memo holds scaled steps).
        for _ in 0..2 {
            let (n1, n10) = (one.cost.step_ns(s), ten.cost.step_ns(s));
            assert_eq!(n10, sim::cost::us_to_ns(u1 / 10.0).max(1), "{s:?}");
            assert!((10 * n10).abs_diff(n1) <= 6, "{s:?}: {n10} ns against {n1} ns");
        }
        assert!((c10.gpu_us(s) - c1.gpu_us(s) / 10.0).abs() <= 1e-12 * c1.gpu_us(s));
    }
    assert_eq!(c10.sync_cpu().step_us, c1.sync_cpu().step_us / 10.0);
    assert_eq!(c10.sync_cpu().per_seq_us, c1.sync_cpu().per_seq_us / 10.0);
    // The linear prior beside it (a calibration's starting point), and the front end.
    let (k1, k10) = (one.cost.coefficients(), ten.cost.coefficients());
    for n in sim::cost::COEFFICIENT_NAMES {
        assert_eq!(k10.get(n).unwrap(), k1.get(n).unwrap() / 10.0, "{n}");
    }
    assert_eq!(ten.cost.ingress_ns(), one.cost.ingress_ns() / 10);
    assert_eq!(ten.cost.output_token_ns(), one.cost.output_token_ns() / 10);
    assert_eq!(ten.cost.scaled_ns(1234), 123);
    assert_eq!(one.cost.scaled_ns(1234), 1234);
    // A whole run: each step within its rounding, the metrics ÷ 10 to a few parts in a million.
    let (a, b) = (sim::simulate(&one, Default::default()), sim::simulate(&ten, Default::default()));
    let close = |x: f64, y: f64, what: &str| assert!((x / 10.0 - y).abs() <= 1e-5 * y, "{what}: {x} ÷ 10 against {y}");
    close(a.metrics.ttft.mean, b.metrics.ttft.mean, "mean TTFT");
    close(a.metrics.tpot.mean, b.metrics.tpot.mean, "mean TPOT");
    close(a.metrics.e2el.p99, b.metrics.e2el.p99, "p99 E2EL");
    close(a.metrics.duration_s, b.metrics.duration_s, "duration");
    assert!(one.cost.source() != ten.cost.source() && ten.cost.source().starts_with(&one.cost.source()));
}

/// A profile's coefficients are its own scale's (fitted on the faster engine itself): a
/// time-scaled scenario takes them as they are and divides only what it gives itself.
#[test]
fn a_profiles_coefficients_are_not_divided_but_the_prior_they_leave_is() {
    let mut res = resources();
    res.profile = Some(CostCoefficients { step_us: Some(800.0), decode_token_us: Some(15.0), ..Default::default() });
    let mut v = small_vllm(100, 10, 4, 2);
    v["cost"] = json!({"profile": "p.json", "time_scale": 10, "coefficients": {"output_token_us": 50}});
    let s = sim::config::resolve(&sim::config::from_value(v.clone(), "").unwrap(), &res).unwrap();
    v["cost"] = json!({});
    let prior = spec(v).cost;
    assert_eq!(s.cost.step_us, 800.0);
    assert_eq!(s.cost.decode_token_us, 15.0);
    assert_eq!(s.cost.output_token_us, 5.0);
    assert_eq!(s.cost.per_seq_us, prior.per_seq_us / 10.0);
    assert_eq!(s.cost.prefill_token_us, prior.prefill_token_us / 10.0);
    assert_eq!(s.cost.request_ingress_us, prior.request_ingress_us / 10.0);
}

/// At 1, or left out, nothing changes; out of range or not a number, an error naming the field.
#[test]
fn a_time_scale_out_of_range_is_refused_naming_the_field() {
    let (plain, one) = (spec(linear(None)), spec(linear(Some(1.0))));
    assert_eq!(plain.cost, one.cost);
    for bad in [json!(0), json!(-2), json!(1000), json!(1e-4), json!("fast")] {
        let mut v = linear(None);
        v["cost"]["time_scale"] = bad.clone();
        let err = sim::config::from_value::<sim::config::Scenario>(v, "")
            .and_then(|s| sim::config::resolve(&s, &resources()))
            .expect_err("refused");
        assert_eq!(err.path, "cost.time_scale", "{bad}: {err}");
    }
    // The least a decode step may cost applies to the scaled engine, and says the scale did it.
    let mut v = linear(Some(100.0));
    v["cost"]["coefficients"] = json!({"step_us": 50, "per_seq_us": 0, "decode_token_us": 0, "prefill_token_us": 0,
        "prefill_attention_us": 0, "decode_kv_us": 0});
    let err = sim::config::resolve(&sim::config::from_value(v, "").unwrap(), &resources()).expect_err("refused");
    assert!(err.path == "cost.coefficients" && err.message.contains("cost.time_scale 100"), "{err}");
}
