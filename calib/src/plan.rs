//! What a calibration runs: the probe plan, the free coefficients of each
//! fit, the speed reference, and the seed spaces that keep every run's
//! prompts apart.
//!
//! # Seed spaces
//!
//! Two runs with the same workload seed draw the same leading tokens, which a
//! live server's prefix cache then serves to the second: every kind of run has
//! a seed space of its own, and `tests::seed_spaces_are_disjoint` checks that
//! they do not meet within the bounds the procedures use.

use serde_json::{json, Value};

use crate::fit::Free;

/// Probe `i` of the plan, round `k` of `--repeat`.
pub fn probe_seed(i: usize, k: u32) -> u64 {
    PROBE_SEED_BASE + i as u64 + PROBE_REPEAT_STRIDE * u64::from(k)
}
pub const PROBE_SEED_BASE: u64 = 1000;
pub const PROBE_REPEAT_STRIDE: u64 = 100;

/// The `k`-th warm-up run before the probes.
pub fn warmup_seed(k: u64) -> u64 {
    WARMUP_SEED_BASE + k
}
pub const WARMUP_SEED_BASE: u64 = 7_000_000;

/// The `k`-th speed reference of a calibration (`k` counts from 0 in each procedure;
/// a check's start at [`CHECK_SPEED_REFERENCE_OFFSET`]).
pub fn speed_reference_seed(k: u64) -> u64 {
    SPEED_REFERENCE_SEED_BASE + k
}
pub const SPEED_REFERENCE_SEED_BASE: u64 = 500_000_000;
pub const CHECK_SPEED_REFERENCE_OFFSET: u64 = 1_000;

/// Point `i` of a check whose workload seed is `base`, run `k` of `--repeat`.
pub fn check_seed(base: u64, i: usize, k: u32) -> u64 {
    base.wrapping_add(i as u64).wrapping_add(CHECK_REPEAT_STRIDE * u64::from(k))
}
pub const CHECK_REPEAT_STRIDE: u64 = 1_000_003;

/// One probe: a name and its workload section.
#[derive(Clone, Debug)]
pub struct Probe {
    pub name: String,
    pub workload: Value,
}

/// The probe plan sized to the server: prefill probes at one request, decode probes at
/// batch sizes up to `cap` and two context lengths, one mixed probe.
pub fn probe_plan(max_len: u32, kv_tokens: u64, max_running: u32, cap: u32) -> Vec<Probe> {
    let mut plan = Vec::new();
    let out = 4u32;
    for l in [16u32, 256, 768, 1536] {
        if u64::from(l + out) * 2 > kv_tokens || l + out > max_len {
            continue;
        }
        plan.push(Probe {
            name: format!("prefill-{l}"),
            workload: json!({"dataset_name": "random", "random_input_len": l, "random_output_len": out, "num_prompts": 4, "max_concurrency": 1, "ignore_eos": true, "initial_test_request": false}),
        });
    }
    // Decode probes at two context lengths, so that per-token and per-context costs separate.
    for inp in [64u32, 512] {
        let o = 32u32;
        let per = u64::from(inp + o);
        // The per-sequence cost shows in the slope over batch sizes: the largest batch the cap allows too.
        let mut sizes = vec![1u32, 4, 16];
        if cap > 16 {
            sizes.push(cap);
        }
        for c in sizes {
            if c > cap || c > max_running || u64::from(c) * per.div_ceil(128) * 128 > kv_tokens || inp + o > max_len {
                continue;
            }
            plan.push(Probe {
                name: format!("decode-{c}x{inp}"),
                workload: json!({"dataset_name": "random", "random_input_len": inp, "random_output_len": o, "num_prompts": 2 * c, "max_concurrency": c, "ignore_eos": true, "initial_test_request": false}),
            });
        }
    }
    let mixed_c = (cap / 2).clamp(2, 8).min(max_running);
    plan.push(Probe {
        name: format!("mixed-{mixed_c}"),
        workload: json!({"dataset_name": "random", "random_input_len": 384, "random_output_len": 24, "random_range_ratio": 0.5, "num_prompts": 4 * mixed_c, "max_concurrency": mixed_c, "ignore_eos": true, "initial_test_request": false}),
    });
    // Fresh prompts for every probe: a probe must not hit the prefix cache
    // that an earlier probe filled (the simulator runs each probe cold).
    for (i, p) in plan.iter_mut().enumerate() {
        p.workload["seed"] = probe_seed(i, 0).into();
    }
    plan
}

/// The plan run `repeat` times round (every probe, then every probe again, fresh prompts).
pub fn repeated(plan: &[Probe], repeat: u32) -> Vec<Probe> {
    (0..repeat.max(1))
        .flat_map(|k| {
            plan.iter().enumerate().map(move |(i, p)| {
                let mut w = p.workload.clone();
                if k == 0 {
                    return p.clone();
                }
                w["seed"] = probe_seed(i, k).into();
                Probe { name: format!("{}#{}", p.name, k + 1), workload: w }
            })
        })
        .collect()
}

/// The warm-up's workload section: short requests at concurrency 4, not measured.
pub fn warmup_workload() -> Value {
    json!({"dataset_name": "random", "random_input_len": 64, "random_output_len": 16, "num_prompts": 8,
           "max_concurrency": 4, "ignore_eos": true, "initial_test_request": false})
}

/// The speed reference: one fixed shape (one request at a time, 64-token prompts, 32 output
/// tokens, 2 requests), measured before every probe of a calibration and before every run of
/// a check point. Its mean ITL is the engine's own decode step at that shape: its spread while
/// calibrating, and its move between calibration and check, say whether the engine (or the
/// host under it) held one speed. A short run, it is an indicator, not a correction: on the
/// 2-core development machines it ranged over ±30% within one calibration, and scaling runs
/// by it made their errors worse (VALIDATION.md, third round).
pub const SPEED_REFERENCE: (u32, u32, u32) = (64, 32, 2);

/// The largest move of the speed reference between calibration and check that still lets a
/// check's verdict be told from the machine: the tightest of the targets.
pub const SPEED_REFERENCE_TOLERANCE: f64 = 0.05;

pub fn speed_reference_workload() -> Value {
    let (input, output, n) = SPEED_REFERENCE;
    json!({"dataset_name": "random", "random_input_len": input, "random_output_len": output, "num_prompts": n,
           "max_concurrency": 1, "ignore_eos": true, "initial_test_request": false})
}

/// The free coefficients of a check's `--fit-on` fit with three or more points.
pub fn live_free() -> Vec<Free> {
    ["step_us", "prefill_token_us", "decode_token_us", "prefill_attention_us", "decode_kv_us", "request_ingress_us"]
        .into_iter()
        .map(Free::one)
        .collect()
}

/// The free parameters for `n_points` distinct load points: groups that keep the prior's
/// shape when the points cannot separate every term.
pub fn group_free(n_points: usize) -> Vec<Free> {
    let prefill = Free { name: "prefill scale".into(), coefficients: vec!["prefill_token_us", "prefill_attention_us"] };
    let decode = Free {
        name: "decode scale".into(),
        coefficients: vec!["step_us", "per_seq_us", "decode_token_us", "decode_kv_us"],
    };
    match n_points {
        0 | 1 => vec![prefill, decode],
        2 => vec![prefill, decode, Free::one("request_ingress_us")],
        _ => ["step_us", "prefill_token_us", "decode_token_us", "decode_kv_us", "request_ingress_us"]
            .into_iter()
            .map(Free::one)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every seed space within the bounds the procedures reach: probe plans of up to 50
    /// probes, `--repeat` up to 99, warm-ups of up to a million runs, a million speed
    /// references, checks of up to 100 points from workload seeds 0 to 99 with `--repeat`
    /// up to 7. (A check's 8th repeat, seeds 7,000,021 and up, meets the warm-ups' space.)
    #[test]
    fn seed_spaces_are_disjoint() {
        let mut spaces: Vec<(&str, std::ops::RangeInclusive<u64>)> = Vec::new();
        spaces.push(("probes", probe_seed(0, 0)..=probe_seed(49, 98)));
        spaces.push(("warm-ups", warmup_seed(0)..=warmup_seed(999_999)));
        spaces.push(("speed references", speed_reference_seed(0)..=speed_reference_seed(999_999)));
        // A check's points: seed + i for each repeat k, one range per repeat.
        for k in 0..7 {
            spaces.push(("check points", check_seed(0, 0, k)..=check_seed(99, 99, k)));
        }
        for (i, (a, ra)) in spaces.iter().enumerate() {
            for (b, rb) in &spaces[i + 1..] {
                let meet = ra.start() <= rb.end() && rb.start() <= ra.end();
                assert!(!meet, "{a} {ra:?} and {b} {rb:?} share seeds");
            }
        }
        // A check's speed references sit after the calibration's.
        assert!(speed_reference_seed(CHECK_SPEED_REFERENCE_OFFSET) > speed_reference_seed(999));
    }

    #[test]
    fn the_plan_fits_the_server() {
        let plan = probe_plan(2048, 200_000, 32, 32);
        let names: Vec<&str> = plan.iter().map(|p| p.name.as_str()).collect();
        assert!(names.contains(&"prefill-1536") && names.contains(&"decode-32x512") && names.contains(&"mixed-8"));
        let small = probe_plan(600, 2_000, 4, 16);
        assert!(small.iter().all(|p| p.workload["max_concurrency"].as_u64().unwrap() <= 4), "{small:?}");
        assert!(small.iter().all(|p| !p.name.starts_with("prefill-768")));
    }
}
