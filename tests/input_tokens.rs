//! `total_input_tokens` on a model whose tokenizer adds a BOS (Llama 3.1), as each `vllm bench
//! serve` release prints it, end to end through the binary (docs/benchmark.md §1.5): the random
//! dataset draws `random_input_len − 1` tokens and the server adds the BOS back, so 0.11–0.19,
//! which sum the dataset's lengths, print N × (L − 1), and 0.20 on, which sum the server's
//! `usage.prompt_tokens`, N × L. A model without a BOS (Qwen3) prints N × L for both.

use crate::common::{run_cli, scratch, stdout_json};

/// The report's `total_input_tokens` and its printed line for the long-prefill Llama scenario at
/// `version`, 4 fixed prompts of 8,000 tokens (its pool pinned, as the shipped scenario pins it).
fn total_input(version: &str, model: &str) -> (u64, String) {
    let base = [
        "simulate",
        "scenarios/long-prefill-itl-llama3.1-8b-h100-vllm.json",
        "--set",
        "workload.num_prompts=4",
        "--set",
        "workload.random_range_ratio=0",
    ];
    let v = format!("engine.version={version}");
    let m = format!("model={model}");
    let mut args: Vec<&str> = base.to_vec();
    args.extend(["--set", &v, "--set", &m, "--set", "engine.kv_cache_tokens=400000"]);
    let json = run_cli(&[args.as_slice(), &["--json"]].concat());
    assert!(json.status.success(), "{}", String::from_utf8_lossy(&json.stderr));
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let text = run_cli(&args);
    assert!(text.status.success(), "{}", String::from_utf8_lossy(&text.stderr));
    let line = String::from_utf8_lossy(&text.stdout)
        .lines()
        .find(|l| l.starts_with("Total input tokens:"))
        .expect("the report prints the line")
        .trim_end()
        .to_string();
    (report["total_input_tokens"].as_u64().unwrap(), line)
}

#[test]
fn total_input_tokens_on_a_bos_tokenizer_are_what_each_release_prints() {
    for (version, want) in [("0.11.0", 31_996), ("0.19.0", 31_996), ("0.20.0", 32_000), ("0.33.0", 32_000)] {
        let (total, line) = total_input(version, "llama-3.1-8b-instruct");
        assert_eq!(total, want, "vLLM {version}");
        assert_eq!(line, format!("{:<40} {want}", "Total input tokens:"), "vLLM {version}");
        assert_eq!(total_input(version, "qwen3-8b").0, 32_000, "qwen3-8b, vLLM {version}");
    }
}

/// `servesim card` reads whether the tokenizer adds a BOS from the files beside the config:
/// Llama 3's `tokenizer.json` post-processor (its `tokenizer_config.json` has no `add_bos_token`)
/// gives true; `--add-bos-token` that contradicts them, and neither files nor the flag, are
/// refused naming the field (exit 2).
#[test]
fn card_reads_whether_the_tokenizer_adds_a_bos() {
    let dir = scratch().join("card-bos-llama");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        r#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
            "max_position_embeddings": 131072, "num_attention_heads": 32, "num_hidden_layers": 32,
            "num_key_value_heads": 8, "torch_dtype": "bfloat16", "vocab_size": 128256}"#,
    )
    .unwrap();
    let card = |extra: &[&str]| {
        let mut args = vec!["card", config.to_str().unwrap(), "--id", "acme-llama"];
        args.extend(extra);
        run_cli(&args)
    };
    // Neither the files nor the flag: refused, naming the field.
    let o = card(&[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("config.json: add_bos_token: not known"), "{err}");
    assert_eq!(stdout_json(&card(&["--add-bos-token", "true"]))["add_bos_token"], true);
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "tokenizer_class": "PreTrainedTokenizerFast"}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("tokenizer.json"),
        r#"{"version": "1.0", "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
            {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
             {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {}}]}}"#,
    )
    .unwrap();
    assert_eq!(stdout_json(&card(&[]))["add_bos_token"], true);
    let o = card(&["--add-bos-token", "false"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--add-bos-token false: the tokenizer files in") && err.contains("say true"), "{err}");
}

/// A `random` range whose shortest prompt would be empty: `vllm bench serve` refuses it from
/// 0.11.1 ("--random-input-len is too small", `RandomDataset.sample`), counting the tokenizer's
/// special tokens; servesim ran it with the bound raised to one token (until 2026-12-08). 0.11.0
/// and `sglang.bench_serving` run it.
#[test]
fn a_random_range_with_an_empty_shortest_prompt_is_refused_as_vllm_refuses_it() {
    let run = |extra: &[&str]| {
        let base =
            ["simulate", "scenarios/long-prefill-itl-llama3.1-8b-h100-vllm.json", "--set", "workload.num_prompts=4"];
        let o = run_cli(&[&base[..], extra].concat());
        (o.status.code(), String::from_utf8_lossy(&o.stderr).to_string())
    };
    // Llama (a BOS): 1 token less the BOS is none, whatever the ratio.
    let (c, err) = run(&["--set", "workload.random_input_len=1", "--set", "workload.random_range_ratio=0"]);
    assert_eq!(c, Some(2), "{err}");
    assert!(err.contains("workload.random_input_len: 1 is too small") && err.contains("1 special token(s)"), "{err}");
    // Qwen (no BOS): 3 × (1 − 0.8) floors to 0, and so does 5 × (1 − 0.8): in binary floating
    // point, Python's as ours, 1 − 0.8 is 0.19999999999999996 and the product 0.9999999999999998.
    // 6 runs.
    let qwen = ["--set", "model=qwen3-8b", "--set", "workload.random_range_ratio=0.8"];
    let (c, err) = run(&[&qwen[..], &["--set", "workload.random_input_len=3"]].concat());
    assert!(
        c == Some(2) && err.contains("the shortest prompt vllm bench serve could draw (prefix + sampled) is 0"),
        "{err}"
    );
    let (c, err) = run(&[&qwen[..], &["--set", "workload.random_input_len=5"]].concat());
    assert!(c == Some(2) && err.contains("workload.random_input_len: 5 is too small"), "{err}");
    let (c, err) = run(&[&qwen[..], &["--set", "workload.random_input_len=6"]].concat());
    assert_eq!(c, Some(0), "{err}");
    // A prefix makes every prompt at least that long.
    let (c, err) =
        run(&[&qwen[..], &["--set", "workload.random_input_len=3", "--set", "workload.random_prefix_len=1"]].concat());
    assert_eq!(c, Some(0), "{err}");
    // 0.11.0's client has no such check.
    let (c, err) =
        run(&[&qwen[..], &["--set", "workload.random_input_len=3", "--set", "engine.version=0.11.0"]].concat());
    assert_eq!(c, Some(0), "{err}");
}

/// `sglang.bench_serving` sends `ignore_eos` true unless `--disable-ignore-eos`: a scenario that
/// states that client and leaves the field unset runs its outputs to their length (it was false,
/// and a random vLLM scenario was refused as vllm bench serve's, the review of 2026-12-08).
#[test]
fn the_sglang_clients_ignore_eos_defaults_to_true() {
    let base = [
        "simulate",
        "scenarios/rtx5090-qwen2.5-7b-vllm.json",
        "--set",
        "workload.client=sglang_bench_serving",
        "--set",
        "workload.num_prompts=4",
        "--set",
        "workload.request_rate=4",
        "--json",
    ];
    let o = run_cli(&base);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["total_output_tokens"].as_u64(), Some(4 * 512), "{j}");
    // Set false, as --disable-ignore-eos sends it, the client's choice stands.
    let o = run_cli(
        &[
            &base[..],
            &[
                "--set",
                "workload.ignore_eos=false",
                "--set",
                "workload.output_len_dist={\"kind\": \"uniform\", \"min\": 1, \"max\": 512}",
            ],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
