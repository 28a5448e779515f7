//! Fuzzing through the library (issue #15): random mutations of the shipped
//! scenarios, random `--set` paths and values, random traces. The property:
//! a clear error (a `ConfigError` naming a field) or a sane result, within a
//! time bound. Runs are capped in prompts and steps so the whole file stays
//! well under a minute in the debug test profile.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{json, Value};
use sim::config::{self, ConfigError, Resources, SimSpec};
use sim::simulation::{RunOptions, StopReason};
use sim::workload::TraceRow;

const SCENARIOS: [&str; 9] = [
    include_str!("../../scenarios/rtx5090-qwen2.5-7b-vllm.json"),
    include_str!("../../scenarios/rtx5090-qwen2.5-7b-sglang.json"),
    include_str!("../../scenarios/kv-starved-qwen2.5-7b-a100-vllm.json"),
    include_str!("../../scenarios/kv-starved-qwen2.5-7b-a100-sglang.json"),
    include_str!("../../scenarios/long-prefill-itl-llama3.1-8b-h100-vllm.json"),
    include_str!("../../scenarios/long-prefill-itl-llama3.1-8b-h100-sglang.json"),
    include_str!("../../scenarios/serve-small-vllm.json"),
    include_str!("../../scenarios/shared-prefix-llama3.1-8b-h100-vllm.json"),
    include_str!("../../scenarios/shared-prefix-lpm-llama3.1-8b-h100-sglang.json"),
];

/// Fields a mutation touches: every scenario section's numbers and switches.
const PATHS: &[&str] = &[
    "engine.max_num_seqs",
    "engine.max_num_batched_tokens",
    "engine.block_size",
    "engine.gpu_memory_utilization",
    "engine.kv_cache_tokens",
    "engine.num_gpu_blocks_override",
    "engine.max_model_len",
    "engine.enable_prefix_caching",
    "engine.long_prefill_token_threshold",
    "engine.max_running_requests",
    "engine.chunked_prefill_size",
    "engine.page_size",
    "engine.mem_fraction_static",
    "engine.max_total_tokens",
    "engine.schedule_conservativeness",
    "engine.tensor_parallel_size",
    "engine.kv_cache_dtype",
    "engine.version",
    "engine.kind",
    "engine.nope",
    "workload.random_input_len",
    "workload.random_output_len",
    "workload.random_range_ratio",
    "workload.random_prefix_len",
    "workload.num_prompts",
    "workload.num_warmups",
    "workload.prior_run_prompts",
    "workload.max_concurrency",
    "workload.request_rate",
    "workload.burstiness",
    "workload.ignore_eos",
    "workload.seed",
    "workload.dataset_name",
    "workload.prefix_repetition_num_prefixes",
    "cost.coefficients.step_us",
    "cost.coefficients.decode_token_us",
    "cost.coefficients.prefill_token_us",
    "cost.coefficients.request_ingress_us",
    "cost.coefficients.output_token_us",
    "cost.prior.decode_mfu",
    "cost.prior.prefill_mfu",
    "cost.prior.kv_bandwidth_eff",
    "version",
    "model",
    "hardware",
];

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (1u32..5000).prop_map(|n| json!(n)),
        2 => (0.05f64..1.0).prop_map(|x| json!(x)),
        2 => wild(),
    ]
}

fn wild() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(0)),
        Just(json!(1)),
        Just(json!(-1)),
        Just(json!(7)),
        Just(json!(64)),
        Just(json!(4097)),
        Just(json!(10_000_001u64)),
        Just(json!(u32::MAX)),
        Just(json!(u64::MAX)),
        Just(json!(1e-300)),
        Just(json!(1e300)),
        Just(json!(1e14)),
        Just(json!(0.5)),
        Just(json!(-0.5)),
        Just(json!(1e-9)),
        Just(json!("inf")),
        Just(json!("nan")),
        Just(json!("sglang")),
        Just(json!("trace")),
        Just(json!("")),
        Just(json!(null)),
        Just(json!(true)),
        Just(json!([1, 2])),
        Just(json!({"x": 1})),
    ]
}

/// At most this many prompts and steps per fuzzed run: the time bound.
const MAX_PROMPTS: u32 = 16;
const MAX_STEPS: u64 = 20_000;

fn resources() -> Resources {
    sim::builtin::resources().expect("built-in cards")
}

fn resolve(v: Value, res: &Resources) -> Result<SimSpec, ConfigError> {
    let s = config::from_value(v, "")?;
    config::resolve(&s, res)
}

/// A clear error names a field (or is about the whole file) and says something.
fn check_error(e: &ConfigError) -> Result<(), TestCaseError> {
    prop_assert!(!e.message.trim().is_empty(), "an error without a message: {e:?}");
    prop_assert!(!e.path.contains(".."), "a malformed path: {e:?}");
    Ok(())
}

/// Runs a resolved spec (capped) and checks the result is sane.
fn check_run(mut spec: SimSpec) -> Result<(), TestCaseError> {
    spec.workload.num_prompts = spec.workload.num_prompts.min(MAX_PROMPTS);
    spec.workload.num_warmups = spec.workload.num_warmups.min(2);
    spec.workload.prior_run_prompts = spec.workload.prior_run_prompts.min(spec.workload.num_prompts);
    let t = Instant::now();
    let out = sim::simulate(&spec, RunOptions { max_steps: MAX_STEPS, ..Default::default() });
    prop_assert!(t.elapsed() < Duration::from_secs(20), "a capped run took {:?}", t.elapsed());
    let m = &out.metrics;
    match &out.run.stop {
        StopReason::Completed => {
            prop_assert_eq!(m.completed as usize, out.workload.requests.len());
            prop_assert_eq!(m.failed, 0);
        }
        StopReason::Stalled { .. } | StopReason::StepLimit { .. } | StopReason::TimeOverflow { .. } => {}
        // The one place a modelled engine raises: SGLang's decode out of memory, reachable
        // only where 0.4.10's retraction rule under-reserves (pages over 20 tokens) or when
        // a lone request does not fit.
        StopReason::EngineError(e) => {
            let sim::config::EngineSpec::Sglang(c) = &spec.engine else {
                return Err(TestCaseError::fail(format!("an engine error from vLLM: {e}")));
            };
            prop_assert!(e.starts_with("SGLang's next decode step"), "{e}");
            let under_reserves = !c.behaviour.retract_until_decode_fits && c.page_size > 20;
            prop_assert!(under_reserves || e.contains(" of 1 request(s)"), "{e}");
        }
        other => prop_assert!(false, "unexpected stop: {other:?}"),
    }
    for (name, v) in [
        ("duration", m.duration_s),
        ("output_throughput", m.output_throughput),
        ("mean_ttft", m.ttft.mean),
        ("mean_tpot", m.tpot.mean),
        ("mean_itl", m.itl.mean),
        ("mean_e2el", m.e2el.mean),
    ] {
        prop_assert!(v.is_finite() && v >= 0.0, "{name} = {v}");
    }
    prop_assert!(m.ttft.mean <= m.e2el.mean + 1e-6, "TTFT {} above E2EL {}", m.ttft.mean, m.e2el.mean);
    // The reports render.
    let j = sim::report::PointReport::of(&spec, &out);
    prop_assert!(serde_json::to_string(&j).is_ok());
    let _ = sim::report::text(&spec, &out, &Default::default());
    Ok(())
}

fn apply(v: &mut Value, path: &str, val: &Value) -> Result<(), ConfigError> {
    config::apply_set(v, &format!("{path}={val}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random mutations (one to three fields) of a shipped scenario.
    #[test]
    fn mutated_scenarios_error_clearly_or_run_sanely(
        which in 0..SCENARIOS.len(),
        edits in prop::collection::vec((prop::sample::select(PATHS), value()), 1..3),
    ) {
        let res = resources();
        let mut v: Value = serde_json::from_str(SCENARIOS[which]).unwrap();
        for (p, val) in &edits {
            if let Err(e) = apply(&mut v, p, val) {
                check_error(&e)?;
                return Ok(());
            }
        }
        match resolve(v, &res) {
            Err(e) => check_error(&e)?,
            Ok(spec) => check_run(spec)?,
        }
    }

    /// `--set` with arbitrary paths and values: never a panic.
    #[test]
    fn arbitrary_set_paths_error_clearly(
        path in "[a-z_.]{0,24}",
        val in "[a-z0-9.,\\-\"\\[\\]{}]{0,12}",
    ) {
        let res = resources();
        let mut v: Value = serde_json::from_str(SCENARIOS[0]).unwrap();
        match config::apply_set(&mut v, &format!("{path}={val}")) {
            Err(e) => check_error(&e)?,
            Ok(()) => match resolve(v, &res) {
                Err(e) => check_error(&e)?,
                Ok(spec) => check_run(spec)?,
            },
        }
    }

    /// Random traces, far arrivals and bad rows included.
    #[test]
    fn random_traces_error_clearly_or_run_sanely(
        rows in prop::collection::vec(
            (
                prop_oneof![
                    1 => Just(0.0),
                    8 => 0.0f64..5.0,
                    1 => prop::sample::select(vec![1e9, 1e15, -1.0, f64::NAN, 3.2e7]),
                ],
                prop_oneof![1 => Just(0u32), 8 => 1u32..600, 1 => Just(40_000u32)],
                prop_oneof![1 => Just(0u32), 8 => 1u32..40],
                prop::option::of(0u64..3),
                prop::option::of(prop_oneof![8 => 0u32..700, 1 => Just(u32::MAX)]),
            ),
            0..6,
        ),
        num_prompts in prop::option::of(0u32..20),
        rate in prop::option::of(prop_oneof![Just(json!(1000)), Just(json!("inf"))]),
    ) {
        let mut res = resources();
        res.trace = Some(
            rows.iter()
                .map(|&(t, i, o, g, p)| TraceRow { arrival_time: t, input_len: i, output_len: o, prefix_group: g, prefix_len: p, priority: None })
                .collect(),
        );
        let mut v: Value = serde_json::from_str(SCENARIOS[0]).unwrap();
        v["workload"] = json!({"dataset_name": "trace", "trace": "t.csv", "ignore_eos": true});
        if let Some(n) = num_prompts {
            v["workload"]["num_prompts"] = json!(n);
        }
        if let Some(r) = rate {
            v["workload"]["request_rate"] = r;
        }
        match resolve(v, &res) {
            Err(e) => check_error(&e)?,
            Ok(spec) => {
                // A trace's rate is ignored, never reported as used.
                prop_assert_eq!(spec.workload.request_rate, None);
                check_run(spec)?
            }
        }
    }
}
