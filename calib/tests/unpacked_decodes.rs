//! A fit's prior and its corrections where the engine runs a step's decodes unpacked beside
//! its prefill chunks (vLLM's FlashAttention 2 on an A100: `cost::vllm_fa2_unpacked_mixed_decodes`).

use calib::identify::linear_prior;
use serde_json::json;
use sim::config::{self, SimSpec};
use sim::cost::{CoefficientSource, StepShape};

fn a100_qwen3_14b() -> SimSpec {
    spec("qwen3-14b", "a100-80gb", "0.11.0")
}

fn spec(model: &str, gpu: &str, version: &str) -> SimSpec {
    let v = json!({
        "version": 1,
        "engine": {"kind": "vllm", "version": version, "max_model_len": 8192},
        "model": model, "hardware": gpu,
        "workload": {"dataset_name": "random", "random_input_len": 2000, "random_output_len": 100,
                     "num_prompts": 8, "max_concurrency": 4, "ignore_eos": true}
    });
    config::resolve(&config::from_value(v, "").unwrap(), &sim::builtin::resources().unwrap()).unwrap()
}

fn mixed(decodes: u64, context: u64, prefill: u64) -> StepShape {
    let mut s = StepShape::decodes(decodes, decodes * context);
    s.add_prefill(0, prefill);
    s
}

/// The linearised prior is fitted on the packed kernel's times: the linear model has no term
/// for the unpacked decodes' surcharge, and fitting it on them drove the prefill attention
/// pairs' coefficient to zero (a prior a fit cannot scale, reported as moved by NaN).
#[test]
fn the_linear_prior_keeps_its_prefill_attention_term() {
    for s in [a100_qwen3_14b(), spec("qwen2.5-7b-instruct", "rtx-5090", "0.28.0")] {
        let c = s.cost.composed.as_ref().expect("a composed cost");
        assert!(c.unpacks_mixed_decodes(), "{}", c.source);
        let m = mixed(89, 2050, 1959);
        assert!(c.unpacked_decode_surcharge_us(&m) > 0.0);
        assert_eq!(c.unpacked_decode_surcharge_us(&StepShape::decodes(89, 89 * 2050)), 0.0);
        let p = linear_prior(&s.cost).coefficients();
        for k in ["step_us", "prefill_token_us", "prefill_attention_us", "decode_kv_us"] {
            assert!(p.get(k).unwrap() > 0.0, "{}: {k}: {p:?}", c.source);
        }
    }
}

/// A correction counts the surcharge with the decodes (it is their KV re-read): with the
/// decode terms moved and the prefill terms not, a mixed step moves by its decodes' part,
/// the surcharge included, times the decodes' ratio.
#[test]
fn a_correction_scales_the_surcharge_with_the_decodes() {
    let s = a100_qwen3_14b();
    let c = s.cost.composed.as_ref().unwrap().clone();
    let prior = linear_prior(&s.cost);
    let r = prior.coefficients();
    let mut moved = r.clone();
    for k in ["step_us", "decode_token_us", "decode_kv_us"] {
        moved.set(k, r.get(k).unwrap() * 1.5);
    }
    let mut fitted = s.cost.clone();
    fitted.correct(&moved, &r, CoefficientSource::Profile);
    let m = mixed(89, 2050, 1959);
    let mut only = StepShape::decodes(89, 89 * 2050);
    only.num_seqs = 89;
    let ratio = fitted.step_ns(&only) as f64 / c.step_ns(&only) as f64;
    assert!(ratio > 1.2, "{ratio}");
    let decode_part = c.step_us(&only) + c.unpacked_decode_surcharge_us(&m);
    let want = c.step_us(&m) + decode_part * (ratio - 1.0);
    let got = fitted.step_ns(&m) as f64 / 1e3;
    assert!((got / want - 1.0).abs() < 1e-4, "got {got} µs, want {want}");
    // Without the surcharge in the decodes' part the step would move less.
    let without = c.step_us(&m) + c.step_us(&only) * (ratio - 1.0);
    assert!(got > without * 1.01, "{got} {without}");
}
