//! The kernel-composed step cost (issue #12): the fallback for GPUs without
//! tables is the one with the smaller leave-one-GPU-out error, and the
//! composed cost behaves as a step clock should.
//!
//! `cargo test -p sim --release --test kernel_cost -- --nocapture` prints the
//! leave-one-out table that `VALIDATION.md` quotes.

use sim::cost::{leave_one_gpu_out, Fallback, StepShape, FALLBACK};

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i]
}

#[test]
fn fallback_is_chosen_by_leave_one_gpu_out_error() {
    let rows = leave_one_gpu_out();
    assert!(rows.len() >= 10, "{} rows", rows.len());
    println!("| held-out GPU | engine | nearest | scaled median | scaled p90 | roofline median | roofline p90 |");
    println!("|---|---|---|---:|---:|---:|---:|");
    let (mut all_s, mut all_r) = (Vec::new(), Vec::new());
    let (mut med_s, mut med_r) = (Vec::new(), Vec::new());
    for r in &rows {
        let (mut s, mut f) = (r.scaled_errors.clone(), r.roofline_errors.clone());
        all_s.extend_from_slice(&s);
        all_r.extend_from_slice(&f);
        let (sm, rm) = (quantile(&mut s, 0.5), quantile(&mut f, 0.5));
        med_s.push(sm);
        med_r.push(rm);
        println!(
            "| {} | {} | {} | {:.1}% | {:.1}% | {:.1}% | {:.1}% |",
            r.system,
            r.engine,
            r.nearest,
            100.0 * sm,
            100.0 * quantile(&mut s, 0.9),
            100.0 * rm,
            100.0 * quantile(&mut f, 0.9)
        );
    }
    let (s50, r50) = (quantile(&mut all_s, 0.5), quantile(&mut all_r, 0.5));
    println!(
        "| all | | | {:.1}% | {:.1}% | {:.1}% | {:.1}% |",
        100.0 * s50,
        100.0 * quantile(&mut all_s, 0.9),
        100.0 * r50,
        100.0 * quantile(&mut all_r, 0.9)
    );
    let better = if s50 <= r50 { Fallback::NearestScaled } else { Fallback::FittedRoofline };
    assert_eq!(FALLBACK, better, "the fallback must be the one with the smaller leave-one-out median error");
}

#[test]
fn composed_step_grows_with_tokens_and_context() {
    let spec = sim::config::resolve(
        &sim::config::from_value(
            serde_json::json!({"version": 1, "engine": {"kind": "vllm", "kv_cache_tokens": 100000, "max_model_len": 8192},
                "model": "llama-3.1-8b-instruct", "hardware": "h100-80gb",
                "workload": {"dataset_name": "random", "random_input_len": 1024, "random_output_len": 128, "ignore_eos": true}}),
            "",
        )
        .unwrap(),
        &sim::builtin::resources().unwrap(),
    )
    .unwrap();
    let c = &spec.cost;
    assert!(c.source().starts_with("aiconfigurator-core 0.12.0 h100_sxm vllm"), "{}", c.source());
    let step = |s: &StepShape| c.step_ns(s);
    let mut last = 0;
    for n in [1u64, 64, 512, 2048, 8192, 20000] {
        let mut s = StepShape::default();
        s.add_prefill(0, n);
        let t = step(&s);
        assert!(t > last, "prefill {n}: {t} ns not above {last}");
        last = t;
    }
    let d1 = step(&StepShape::decodes(32, 32 * 1024));
    let d2 = step(&StepShape::decodes(32, 32 * 8192));
    assert!(d2 > d1);
    // A cached prefix makes a chunk cheaper than the same tokens from scratch... but dearer than a
    // chunk of the same length without the prefix.
    let mut a = StepShape::default();
    a.add_prefill(0, 2048);
    let mut b = StepShape::default();
    b.add_prefill(6144, 2048);
    let mut full = StepShape::default();
    full.add_prefill(0, 8192);
    assert!(step(&a) < step(&b) && step(&b) < step(&full));
    // Memoised values are the computed ones.
    assert_eq!(step(&a), step(&a));
}
