//! Mixture-of-experts runs from the command line (docs/moe.md): a block-fp8 layout the engines
//! refuse exits 2 naming the field and the engines' rule, `plan` lists it as invalid rather than
//! picking it, and the L40S's small-batch expert times are floored at their weight reads.

use crate::common::*;

/// The audit's scenario: Qwen3-235B-A22B-FP8 on 8 B200s under SGLang 0.5.14 (1536 / 8 = 192 per
/// rank, not a whole number of 128-wide weight blocks; the SGLang B200 table has a curve there).
const B200_235B_SGLANG: &str = r#"{"version": 1, "engine": {"kind": "sglang", "version": "0.5.14"},
  "model": "qwen3-235b-a22b-fp8", "hardware": "b200",
  "workload": {"dataset_name": "random", "random_input_len": 1024, "random_output_len": 64, "num_prompts": 16,
               "max_concurrency": 4, "ignore_eos": true}}"#;

#[test]
fn a_block_fp8_layout_the_engines_refuse_exits_2_and_plan_leaves_it_out() {
    let with_tp = B200_235B_SGLANG.replace(r#""version": "0.5.14""#, r#""version": "0.5.14", "tp_size": 8"#);
    let p = write_temp("moe-b200-235b-sglang-tp8.json", &with_tp);
    let o = run_cli(&["simulate", p.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    for w in ["engine.tp_size", "SGLang 0.5.14 refuses", "1536 / 8 = 192", "check_quantized_moe_compatibility"] {
        assert!(err.contains(w), "{w}: {err}");
    }
    // `plan` over TP 2, 4 and 8: TP 8 is invalid, with the same words; a valid TP is picked.
    let scenario = write_temp("moe-b200-235b-sglang.json", B200_235B_SGLANG);
    let cands = write_temp(
        "moe-b200-cands.json",
        r#"{"prices_per_gpu_hour": {"b200": 6.0}, "gpus": ["b200"], "tensor_parallel_size": [2, 4, 8], "replicas": [1]}"#,
    );
    let o = run_cli(&[
        "plan",
        scenario.to_str().unwrap(),
        "--candidates",
        cands.to_str().unwrap(),
        "--slo",
        "mean_tpot_ms<=200",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = stdout_json(&o);
    let invalid = r["invalid"].as_array().unwrap();
    assert_eq!(invalid.len(), 1, "{r:#}");
    assert_eq!(invalid[0]["plan"]["tensor_parallel_size"], 8, "{r:#}");
    assert!(invalid[0]["error"].as_str().unwrap().contains("check_quantized_moe_compatibility"), "{r:#}");
    assert_ne!(r["best"]["plan"]["tensor_parallel_size"], 8, "{r:#}");
}

/// The audit's L40S case: Qwen3-30B-A3B at TP 2 under vLLM 0.17.0, one request. The table's
/// 1-token expert time (23.8 us a layer) is below the 43.7 us its 8 experts' 37.7 MB take at
/// 864 GB/s; the run says it floored the curve, and its TPOT carries the floor.
#[test]
fn small_batch_expert_times_are_floored_at_their_weight_reads() {
    let p = write_temp(
        "moe-l40s-tp2-b1.json",
        r#"{"version": 1, "engine": {"kind": "vllm", "version": "0.17.0", "tensor_parallel_size": 2},
  "model": "qwen3-30b-a3b", "hardware": "l40s",
  "workload": {"dataset_name": "random", "random_input_len": 16, "random_output_len": 128, "num_prompts": 1,
               "max_concurrency": 1, "ignore_eos": true, "initial_test_request": false}}"#,
    );
    let o = run_cli(&["simulate", p.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = stdout_json(&o);
    let src = r["cost_source"].as_str().unwrap();
    assert!(src.contains("floored there") && src.contains("864 GB/s"), "{src}");
    // 48 layers of at least 43.7 us of expert weights each: over 2.1 ms of the TPOT.
    assert!(r["mean_tpot_ms"].as_f64().unwrap() > 48.0 * 0.0437, "{r:#}");
}
