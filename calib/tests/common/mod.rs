//! What the calib integration tests share.

use serde_json::json;
use sim::config::{self, SimSpec};

/// vLLM 0.11.0, Qwen2.5-7B on an A100-80GB: 8 random prompts of 512 tokens with `output_len`
/// outputs each (`ignore_eos`), 4 in flight, no initial test request, seed 3.
pub fn spec(output_len: u32) -> SimSpec {
    let v = json!({
        "version": 1,
        "engine": {"kind": "vllm", "version": "0.11.0", "max_model_len": 8192},
        "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
        "workload": {"dataset_name": "random", "random_input_len": 512, "random_output_len": output_len,
                     "num_prompts": 8, "max_concurrency": 4, "ignore_eos": true,
                     "initial_test_request": false, "seed": 3}
    });
    let s = config::from_value(v, "").unwrap();
    config::resolve(&s, &sim::builtin::resources().unwrap()).unwrap()
}
