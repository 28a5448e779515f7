//! Helpers shared by the simulator's own suites. Each file in `sim/tests/` is a
//! test binary of its own and takes these in with `mod common;`; the cards are
//! the binary's (`sim::builtin`), so a scenario resolves here exactly as
//! `servesim simulate` resolves it.

#![allow(dead_code)] // each suite uses some of these, none uses all

use std::path::PathBuf;

use serde_json::Value;
use sim::config::{self, Resources, SimSpec};

/// The repository's root: the shipped scenarios are in `scenarios/` under it.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("sim/ sits in the repository").to_path_buf()
}

/// The built-in cards (`sim::builtin`, the binary's own).
pub fn resources() -> Resources {
    sim::builtin::resources().expect("built-in cards parse")
}

/// Resolves scenario JSON against the built-in cards.
pub fn spec(v: Value) -> SimSpec {
    let s = config::from_value(v, "").unwrap_or_else(|e| panic!("scenario does not parse: {e}"));
    config::resolve(&s, &resources()).unwrap_or_else(|e| panic!("scenario does not resolve: {e}"))
}

/// A small vLLM scenario: Qwen2.5-7B on an A100, fixed lengths.
pub fn small_vllm(input: u32, output: u32, prompts: u32, concurrency: u32) -> Value {
    serde_json::json!({
        "version": 1,
        "engine": {"kind": "vllm", "version": "0.33.0", "max_num_seqs": 256, "max_num_batched_tokens": 2048,
                   "kv_cache_tokens": 200000, "max_model_len": 8192},
        "model": "qwen2.5-7b-instruct",
        "hardware": "a100-80gb",
        "workload": {"dataset_name": "random", "random_input_len": input, "random_output_len": output,
                     "num_prompts": prompts, "max_concurrency": concurrency, "ignore_eos": true,
                     "initial_test_request": false, "seed": 1}
    })
}

/// `--set PATH=VALUE` on scenario JSON, as the command line applies it.
pub fn set(v: &mut Value, assignment: &str) {
    config::apply_set(v, assignment).unwrap();
}
