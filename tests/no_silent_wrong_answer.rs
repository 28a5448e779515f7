//! Issue #15, "no silent wrong answer": every case the issue lists, one row
//! each (a clear error with exit 2 naming the field, or a correct result
//! within bounded time), the knee where the README says it is, the README's
//! examples run as written, and random result files for
//! `calibrate --from-results`.

use std::time::Duration;

use proptest::prelude::*;
use serde_json::Value;

use crate::common::*;

/// Runs `servesim ARGS` (bounded in time); returns (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let mut c = servesim();
    c.args(args);
    let o = run_bounded(c, Duration::from_secs(60));
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The issue's cases that must be refused: (arguments, exit code, text the error must contain).
#[test]
fn bad_inputs_are_refused_naming_the_cause() {
    let trace = "validation/llmd-exp0/scenario-1.json";
    let cases: &[(&[&str], i32, &str)] = &[
        // Time that cannot overflow: ranges checked at the boundary, limits stated.
        (&["simulate", "--set", "cost.coefficients.step_us=1e14"], 2, "cost.coefficients.step_us"),
        (&["simulate", "--set", "cost.coefficients.step_us=1e12"], 2, "from 0 to 10000000"),
        (&["simulate", "--set", "workload.num_prompts=1000000000"], 2, "limit of 10000000"),
        (&["simulate", "--set", "workload.request_rate=1e-9"], 2, "workload.request_rate"),
        (&["simulate", "--set", "workload.num_warmups=1000000"], 2, "workload.num_warmups"),
        (&["simulate", "--set", "workload.max_concurrency=100000000"], 2, "workload.max_concurrency"),
        // A burstiness whose gamma gaps underflow (it panicked).
        (
            &["simulate", "--set", "workload.request_rate=10", "--set", "workload.burstiness=1e308"],
            2,
            "workload.burstiness: 1e308 at request_rate 10.0",
        ),
        (&["explain", "--concurrency", "0"], 2, "--concurrency"),
        // An unknown KV dtype names the engine's own choices (SGLang's had listed vLLM's).
        (&["simulate", "--set", "engine.kv_cache_dtype=fp9"], 2, "expected auto, bfloat16, float16, fp8"),
        (
            &["simulate", "scenarios/rtx5090-qwen2.5-7b-sglang.json", "--set", "engine.kv_cache_dtype=fp9"],
            2,
            "SGLang's --kv-cache-dtype takes auto, fp8_e4m3 or fp8_e5m2",
        ),
        // Exit codes and messages that tell the truth.
        (&["tune", "--vary", "engine.nope=1,2"], 2, "engine.nope"),
        (&["tune", "--vary", "engine.max_num_seqs=16,32", "--vary", "engine.max_num_seqs=64"], 2, "given twice"),
        (&["tune", "--vary", "engine.max_num_seqs=16,32", "--max-configs", "0"], 2, "--max-configs"),
        (&["tune", "--vary", "engine.max_num_seqs=16,32", "--slo", "p99_ttft_ms<=nan"], 2, "finite"),
        (&["tune", "--vary", "engine.max_num_seqs=16,32", "--slo", "p99_ttft_ms<=inf"], 2, "finite"),
        (&["tune", "--vary", "engine.max_num_seqs=16,,32"], 2, "empty"),
        (&["sweep", "--concurrency", "1,,2"], 2, "empty item"),
        (&["sweep", "--concurrency", "1,2,"], 2, "empty item"),
        (&["sweep", "--concurrency", "1,2", "--jobs", "0"], 2, "--jobs"),
        (&["sweep", "--concurrency", "1,2", "--plot", "x.png"], 2, ".svg"),
        (&["simulate", "--plot", "x.png"], 2, ".svg"),
        // What the engines refuse on the GPU asked for (docs/vllm.md §7b, §10).
        (
            &[
                "simulate",
                "--set",
                r#"hardware={"gpu":"a100-80gb","count":4}"#,
                "--set",
                "engine.tensor_parallel_size=4",
                "--set",
                "model=llama-3.1-70b-instruct-fp8",
                "--set",
                "engine.version=0.26.0",
            ],
            2,
            "model.quantization_method",
        ),
        (
            &[
                "simulate",
                "--set",
                r#"hardware={"gpu":"a100-80gb","count":1}"#,
                "--set",
                "engine.kv_cache_dtype=fp8",
                "--set",
                "engine.attention_backend=FLASH_ATTN",
            ],
            2,
            "FlashAttention 3",
        ),
        (
            &[
                "simulate",
                "--set",
                r#"hardware={"gpu":"h100-80gb","count":1}"#,
                "--set",
                "engine.kv_cache_dtype=fp8_e5m2",
                "--set",
                "engine.version=0.14.0",
            ],
            2,
            "Unrecognized FP8 dtype",
        ),
        // Fields a trace does not use.
        (&["simulate", trace, "--set", "workload.random_input_len=100"], 2, "workload.random_input_len"),
        (&["simulate", trace, "--set", "workload.num_prompts=100000"], 2, "workload.num_prompts"),
        (&["simulate", trace, "--set", "workload.burstiness=0.5"], 2, "workload.burstiness"),
        (&["simulate", "--set", "workload.trace=x.csv"], 2, "workload.trace"),
        // An earlier run's prompts are the run's own first ones.
        (&["simulate", "--set", "workload.prior_run_prompts=21"], 2, "workload.prior_run_prompts"),
        (&["simulate", trace, "--set", "workload.prior_run_prompts=9999999"], 2, "workload.prior_run_prompts"),
        // `prefix_repetition` sends num_prompts rounded down to its prefixes: 16 of 20 over 8.
        (
            &[
                "simulate",
                "scenarios/shared-prefix-llama3.1-8b-h100-vllm.json",
                "--set",
                "workload.num_prompts=20",
                "--set",
                "workload.prefix_repetition_num_prefixes=8",
                "--set",
                "workload.prior_run_prompts=20",
            ],
            2,
            "20, but the run sends 16 prompts",
        ),
        // A profile holds for the deployment it was fitted on.
        (
            &["simulate", "--set", "cost.profile=validation/llmd-exp0/profile-fit-0.5-0.67.json"],
            2,
            "fitted on model llama-3.1-70b-instruct (this scenario: qwen2.5-7b-instruct), GPU a100-80gb",
        ),
        // A validation gate that cannot pass by accident.
        (&["validate", "--only", "no-such-set"], 2, "--only \"no-such-set\""),
        (&["validate", "--only", "rtx5090", "--baseline", "scenarios/serve-small-vllm.json"], 2, "no \"groups\""),
        (&["validate", "--only", "rtx5090", "--write-baseline", "target/never-written.json"], 2, "--write-baseline"),
        (&["validate", "--only", "rtx5090", "--baseline", "validation/baseline.json"], 0, ""),
        // Data parallelism: count is engines x TP.
        (
            &["simulate", "--set", "engine.data_parallel_size=2", "--set", r#"hardware={"gpu":"rtx-5090","count":4}"#],
            2,
            "count must be 2 (data_parallel_size × tensor_parallel_size)",
        ),
        // A fleet's error names the field the user wrote, not a path under `fleet`.
        (
            &["simulate", "data/plan/mooncake-fleet-llama3.1-8b-h100-vllm.json", "--set", "engine.max_num_seqs=0"],
            2,
            ": engine.max_num_seqs: must be at least 1",
        ),
        (&["simulate", "--seed", "5", "--set", "workload.seed=7"], 2, "--seed and --set workload.seed"),
        // TP past one node would cross the network, which nothing models.
        (
            &["simulate", "--set", "engine.tensor_parallel_size=16"],
            2,
            "engine.tensor_parallel_size: 16: tensor parallelism past one node",
        ),
        // plan's own flags.
        (
            &[
                "plan",
                "data/plan/mooncake-fleet-llama3.1-8b-h100-vllm.json",
                "--candidates",
                "data/plan/example-candidates.json",
                "--num-prompts",
                "0",
            ],
            2,
            "--num-prompts",
        ),
        (
            &[
                "plan",
                "data/plan/mooncake-fleet-llama3.1-8b-h100-vllm.json",
                "--candidates",
                "data/plan/example-candidates.json",
                "--request-rate",
                "0",
            ],
            2,
            "--request-rate",
        ),
    ];
    let mut failures = Vec::new();
    for (args, code, needle) in cases {
        let (c, _, err) = run(args);
        if c != *code || !err.contains(needle) {
            failures.push(format!(
                "servesim {}: exit {c}, stderr {err:?} (want exit {code} naming {needle:?})",
                args.join(" ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A trace whose row has prefix_len > input_len, and a trace arrival too far away.
#[test]
fn bad_trace_rows_are_refused() {
    let dir = scratch().join("issue15");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, body, needle) in [
        ("prefix.csv", "arrival_time,input_len,output_len,prefix_group,prefix_len\n0,10,5,1,20\n", "prefix_len"),
        ("far.csv", "arrival_time,input_len,output_len\n0,10,5\n1e9,10,5\n", "arrival_time"),
        ("far15.csv", "arrival_time,input_len,output_len\n1e15,10,5\n", "arrival_time"),
        // The row's own file and line, not an index.
        ("zero.csv", "arrival_time,input_len,output_len\n0,10,5\n0.5,0,5\n", "zero.csv:3: input_len and output_len"),
        ("neg.csv", "arrival_time,input_len,output_len\n-1,10,5\n", "neg.csv:2: arrival_time"),
        (
            "prefix2.csv",
            "arrival_time,input_len,output_len,prefix_group,prefix_len\n0,10,5,1,20\n",
            "prefix2.csv:2: prefix_len",
        ),
    ] {
        let t = dir.join(name);
        std::fs::write(&t, body).unwrap();
        let (c, _, err) = run(&[
            "simulate",
            "--set",
            "workload={\"dataset_name\":\"trace\",\"ignore_eos\":true}",
            "--set",
            &format!("workload.trace={}", t.display()),
        ]);
        assert_eq!(c, 2, "{name}: {err}");
        assert!(err.contains(needle), "{name}: {err}");
    }
}

/// Cases that run: overflow stops with its reason (exit 1), an ignored rate is said and
/// not reported as used, long inputs finish in bounded time and memory.
#[test]
fn overflows_stop_with_a_reason_and_ignored_fields_are_not_reported_as_used() {
    // An efficiency of 1e-300 once overflowed simulated time into a fast-looking run; it is now
    // refused at the boundary (an efficiency below 1e-4 is no GPU's). Overflow inside the loop
    // remains a stop reason (sim's own tests), but the bounded inputs cannot reach it.
    let (c, _, err) = run(&["simulate", "--set", "cost.prior.decode_mfu=1e-300", "--json"]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("cost.prior.decode_mfu"), "{err}");

    let (c, out, err) =
        run(&["simulate", "validation/llmd-exp0/scenario-1.json", "--set", "workload.request_rate=1000"]);
    assert_eq!(c, 0, "{err}");
    // Naming the flag, and the field that does rescale a trace (it named neither until 2026-12-07).
    assert!(
        err.contains("workload.request_rate (--request-rate) is ignored") && err.contains("workload.trace_rate"),
        "{err}"
    );
    assert!(!out.contains("1000.00"), "{out}");
    assert!(out.contains("Request rate configured (RPS):           trace"), "{out}");

    // explain at a huge concurrency is bounded (at most 50,000 prompts), and says so.
    let (c, out, err) = run(&[
        "explain",
        "--concurrency",
        "100000",
        "--json",
        "--set",
        "workload.random_input_len=64",
        "--set",
        "workload.random_output_len=8",
    ]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["max_concurrency"], 100000);
    assert!(j["notes"][0].as_str().unwrap().contains("50000"), "{}", j["notes"]);
}

/// A sweep past its prompt count warns (text and JSON).
#[test]
fn sweeps_past_the_prompt_count_warn() {
    let (c, out, _) = run(&["sweep", "--concurrency", "1,64", "--num-prompts", "20"]);
    assert_eq!(c, 0);
    assert!(out.contains("WARNING: concurrency 64 exceeds the 20 prompts"), "{out}");
    let (c, out, err) = run(&["sweep", "--concurrency", "1,64", "--num-prompts", "20", "--json"]);
    assert_eq!(c, 0);
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["warnings"].as_array().unwrap().len(), 1);
    assert!(err.contains("exceeds the 20 prompts"), "{err}");
}

/// One knee: the default scenario's knee is 42, the KV-limited concurrency, in `sweep`
/// (the README's command) and in `explain`.
#[test]
fn the_default_knee_is_42_in_sweep_and_explain() {
    let (c, out, err) =
        run(&["sweep", "--concurrency", "1,16,32,42,64,128", "--num-prompts", "20,64,128,168,256,512", "--json"]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["knee"]["max_concurrency"], 42, "{}", j["knee"]);
    assert_eq!(j["kv_limited_concurrency"], 42);
    let (c, out, err) = run(&["explain", "--concurrency", "64", "--json"]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["knee"]["max_concurrency"], 42, "{}", j["knee"]);
    // explain carries the deployment and the KV sizing; the memory account when derived.
    assert_eq!(j["deployment"]["tensor_parallel_size"], 1);
    assert_eq!(j["kv_sizing_source"], "kv_cache_tokens");
    assert!(j["memory"].is_null());
    let (c, out, err) = run(&["explain", "validation/llmd-exp0/scenario-1.json", "--json"]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert!(j["memory"]["kv"].as_u64().unwrap() > 0, "{}", j["memory"]);
    assert!(j["memory"]["derivation"].as_str().unwrap().contains("fitted"));
    let (c, out, _) = run(&["explain", "validation/llmd-exp0/scenario-1.json"]);
    assert_eq!(c, 0);
    assert!(out.contains("KV pool derived from gpu_memory_utilization") && out.contains("CUDA graphs"), "{out}");
    // It says what timed the steps (issue #12: `explain` names the cost source).
    assert!(out.contains("Step cost source: aiconfigurator-core"), "{out}");
    assert!(out.contains("\nDeployment: tensor parallel"), "{out}");
    // A data-parallel engine's deployment line is one replica's, and says so (it read
    // "tensor parallel 1 on 1 GPU" for two engines on two GPUs).
    let (c, out, err) =
        run(&["explain", "--set", "engine.data_parallel_size=2", "--set", r#"hardware={"gpu":"rtx-5090","count":2}"#]);
    assert_eq!(c, 0, "{err}");
    assert!(
        out.contains("Deployment of each replica (2 replicas, 2 GPUs in all): tensor parallel 1 on 1 GPU"),
        "{out}"
    );
    // A sweep that never saturates says so.
    let (c, out, _) = run(&["sweep", "--concurrency", "1,2,4", "--num-prompts", "8"]);
    assert_eq!(c, 0);
    assert!(out.contains("Knee: not reached"), "{out}");
}

/// Under an offered rate throughput stops growing where the rate is met: a knee drawn there
/// (concurrency 1, before 2026-12-04's fuzzing) is the load's, not the engine's. `sweep` and
/// `tune` draw none and say why; a closed loop of the same scenario still has its knee.
#[test]
fn an_open_loop_sweep_draws_no_knee_and_says_why() {
    let base = ["scenarios/serve-small-vllm.json", "--set", "workload.num_prompts=200"];
    let conc = ["--concurrency", "1,8,16,32,64"];
    let (c, out, err) = run(&[&["sweep"], &base[..], &["--set", "workload.request_rate=2"], &conc[..]].concat());
    assert_eq!(c, 0, "{err}");
    assert!(out.contains("Knee: not searched: the scenario's arrivals are its own"), "{out}");
    let (c, out, err) =
        run(&[&["sweep", "--json"], &base[..], &["--set", "workload.request_rate=2"], &conc[..]].concat());
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert!(j["knee"].is_null(), "{}", j["knee"]);
    assert!(j["knee_note"].as_str().unwrap().contains("servesim explain"));
    let (c, out, err) = run(&[&["sweep", "--json"], &base[..], &conc[..]].concat());
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["knee"]["max_concurrency"], 32, "{}", j["knee"]);
    assert!(j.get("knee_note").is_none());
    // A --set of the swept key would be overwritten at every point.
    let (c, _, err) = run(&[&["sweep"], &base[..], &["--set", "workload.max_concurrency=5"], &conc[..]].concat());
    assert_eq!(c, 2);
    assert!(err.contains("--set workload.max_concurrency=5") && err.contains("--concurrency"), "{err}");
    let tune = ["tune", "--json", "--vary", "workload.max_concurrency=1,8,16,32,64", "--slo", "p99_ttft_ms<=100000"];
    let (c, out, err) = run(&[&tune[..], &base[..], &["--set", "workload.request_rate=2"]].concat());
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert!(j["knee"].is_null(), "{}", j["knee"]);
    assert!(j["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("knee along workload.max_concurrency: not searched")));
}

/// A concurrency that early stopping cut short has no throughput to weigh: tune drew the knee
/// over the rest of the line (where its last point can never be one) and reported none, with
/// nothing said (the second invariant hunt of 2026-12-04). Now it says why; without early
/// stopping the same grid has its knee.
#[test]
fn tunes_knee_is_not_drawn_through_a_line_early_stopping_cut_short() {
    let args = [
        "tune",
        "--json",
        "--vary",
        "engine.max_num_seqs=16,32,64",
        "--vary",
        "workload.max_concurrency=16,32,64",
        "--set",
        "workload.num_prompts=64",
        "--slo",
        "p99_ttft_ms<=20000",
    ];
    let (c, out, err) = run(&args);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert!(!j["stopped_early"].as_array().unwrap().is_empty(), "the grid should stop some configurations early");
    assert!(j["knee"].is_null());
    let notes = j["notes"].as_array().unwrap();
    assert!(notes.iter().any(|n| n.as_str().unwrap().contains("early stopping cut concurrency")), "{notes:?}");
    let (c, out, err) = run(&[&args[..], &["--no-early-stop"]].concat());
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["knee"]["max_concurrency"], 32, "{}", j["knee"]);
}

/// The first command's report says what ran and explains its puzzling numbers.
#[test]
fn the_first_report_says_what_ran() {
    let (c, out, _) = run(&["simulate"]);
    assert_eq!(c, 0);
    let first = out.lines().next().unwrap();
    for w in ["rtx5090-qwen2.5-7b-vllm", "qwen2.5-7b-instruct", "rtx-5090", "vllm 0.28.0"] {
        assert!(first.contains(w), "{first}");
    }
    assert!(out.contains("null block (194896 tokens)"), "{out}");
    assert!(out.contains("1-second bucket"), "{out}");
    let (c, out, _) = run(&["simulate", "--set", "workload.initial_test_request=true"]);
    assert_eq!(c, 0);
    assert!(out.contains("initial test request"), "{out}");
}

/// Splits a shell command line into words (single and double quotes, no expansions).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for ch in line.chars() {
        match (quote, ch) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(ch);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// The `servesim ...` and `cargo run --release -- ...` lines of README.md's fenced
/// blocks, as argument lists (without the program).
fn readme_examples() -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut in_block = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            continue;
        }
        let cmd = line.split(" #").next().unwrap().trim();
        let rest = cmd.strip_prefix("servesim ").or_else(|| cmd.strip_prefix("cargo run --release -- "));
        if let Some(r) = rest {
            out.push(shell_words(r));
        }
    }
    out
}

/// The README's examples run as written (against live engines excepted: they need a server).
#[test]
fn readme_examples_run() {
    let examples = readme_examples();
    assert!(examples.len() >= 5, "expected the README's examples, found {examples:?}");
    let dir = scratch().join("readme");
    std::fs::create_dir_all(&dir).unwrap();
    let mut failures = Vec::new();
    for args in &examples {
        if ["bench", "calibrate", "check", "serve", "diff"].contains(&args[0].as_str()) {
            continue;
        }
        // Plots go to a temporary folder.
        let args: Vec<String> = args
            .iter()
            .map(|a| if a.ends_with(".svg") { dir.join(a).display().to_string() } else { a.clone() })
            .collect();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (c, _, err) = run(&refs);
        if c != 0 {
            failures.push(format!("servesim {}: exit {c}: {err}", args.join(" ")));
        }
    }
    assert!(failures.is_empty(), "README examples fail:\n{}", failures.join("\n"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random result files for `calibrate --from-results`: a clear error (exit 2) or a fit
    /// (exit 0), never a panic, within a time bound.
    #[test]
    fn random_result_files_error_clearly(
        keys in prop::collection::vec(
            (
                prop::sample::select(vec![
                    "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2el_ms", "output_throughput",
                    "completed", "num_prompts", "max_concurrency", "request_rate", "duration", "backend",
                ]),
                prop_oneof![
                    Just(Value::Null),
                    Just(serde_json::json!(-1)),
                    Just(serde_json::json!(0)),
                    Just(serde_json::json!(1e300)),
                    Just(serde_json::json!("inf")),
                    Just(serde_json::json!("x")),
                    (0.5f64..5000.0).prop_map(|x| serde_json::json!(x)),
                    (1u32..64).prop_map(|x| serde_json::json!(x)),
                ],
            ),
            0..10,
        ),
    ) {
        let dir = scratch().join("results");
        std::fs::create_dir_all(&dir).unwrap();
        let mut m = serde_json::Map::new();
        for (k, v) in keys {
            m.insert(k.to_string(), v);
        }
        let f = dir.join("result.json");
        std::fs::write(&f, Value::Object(m).to_string()).unwrap();
        let out = dir.join("profile.json");
        let mut c = servesim();
        c.args([
            "calibrate", "--from-results", f.to_str().unwrap(),
            "--scenario", "scenarios/serve-small-vllm.json", "--out", out.to_str().unwrap(),
        ]);
        let o = run_bounded(c, Duration::from_secs(120));
        let code = o.status.code().unwrap_or(-1);
        let err = String::from_utf8_lossy(&o.stderr);
        prop_assert!(code == 0 || code == 2 || code == 1, "exit {code}: {err}");
        prop_assert!(!err.contains("panicked"), "{err}");
        if code == 2 {
            prop_assert!(err.contains("error:"), "{err}");
        }
    }
}

/// A KV pool no GPU holds is an error naming the field that gave it, not an allocation that
/// exhausts the host (the fuzzer's `num_gpu_blocks_override` of 2^32 − 1 asked for 137 GB).
#[test]
fn a_kv_pool_past_any_gpu_is_an_error_naming_its_field() {
    let (c, _, err) = run(&["simulate", "--set", "engine.num_gpu_blocks_override=4294967295"]);
    assert_eq!(c, 2, "{err}");
    // The pool is checked against the GPU's memory beside the weights (`memory::check_pinned_pool`)
    // before the bound on any pool (`MAX_KV_POOL_TOKENS`) is reached.
    assert!(err.contains("engine.num_gpu_blocks_override") && err.contains("a pool that cannot exist"), "{err}");
}

/// Where the modelled engine itself stops (SGLang 0.4.10's "Decode out of memory": eight
/// one-page prompts whose first decode step its retraction rule cannot cover, with pages of
/// 32 tokens), no command passes the partial metrics off as an answer: `simulate` exits 1
/// and says why, a sweep marks the point and searches no knee through it, and `tune` lists
/// the configuration as invalid instead of ranking it.
#[test]
fn an_engine_error_is_an_error_in_simulate_sweep_and_tune() {
    let f = "tests/fixtures/sglang-0.4.10-decode-oom.json";
    let (c, out, err) = run(&["simulate", f, "--json"]);
    assert_eq!(c, 1, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    let stop = j["stop_reason"].as_str().unwrap();
    assert!(stop.starts_with("engine error: ") && stop.contains("Decode out of memory"), "{stop}");
    assert!(err.contains("did not complete"), "{err}");
    // The risk is named before the run, from the configuration alone.
    assert!(err.contains("engine.page_size 32: SGLang 0.4.10 retracts until 20 tokens"), "{err}");
    let (c, out, _) = run(&["simulate", f]);
    assert_eq!(c, 1);
    assert!(out.contains("WARNING: the run did not complete: engine error"), "{out}");

    // Concurrency 8 stops; 1–4 complete.
    let (c, out, _) = run(&["sweep", f, "--concurrency", "1,2,4,8"]);
    assert_eq!(c, 1);
    assert!(out.contains("<- did not complete"), "{out}");
    assert!(out.contains("WARNING: concurrency 8 did not complete (engine error"), "{out}");
    let (_, out, _) = run(&["sweep", f, "--concurrency", "1,2,4,8", "--json"]);
    let j: Value = serde_json::from_str(&out).unwrap();
    assert!(j["knee"].is_null(), "{}", j["knee"]);
    assert!(j["warnings"][0].as_str().unwrap().contains("concurrency 8 did not complete"), "{}", j["warnings"]);

    // explain at concurrency 8: exits 1, the notes say why; no knee through the stopped run.
    let (c, out, err) = run(&["explain", f, "--json"]);
    assert_eq!(c, 1, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    let notes = j["notes"].to_string();
    assert!(notes.contains("the explained run did not complete (engine error"), "{notes}");

    // A larger pool completes; the one that stops is invalid, not ranked.
    let (c, out, err) = run(&["tune", f, "--vary", "engine.max_total_tokens=640,768", "--json"]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["best"]["config"]["engine.max_total_tokens"], 768, "{}", j["best"]);
    let inv = j["invalid"].as_array().unwrap();
    assert_eq!(inv.len(), 1, "{inv:?}");
    assert_eq!(inv[0]["config"]["engine.max_total_tokens"], 640);
    assert!(inv[0]["error"].as_str().unwrap().contains("the run did not complete: engine error"), "{inv:?}");
}

/// A memory fraction given on the command line sizes the KV pool: the scenario's pinned pool (a
/// start-up log's figure) moves by what the pool derived from memory moves (the log's offset from
/// servesim's memory account kept; until 2026-12-07 it was dropped and derived) and the run says
/// so, instead of the fraction being silently ignored; pinned on the same command line, the pin
/// stays.
#[test]
fn a_memory_fraction_set_on_the_command_line_moves_a_pinned_pool() {
    let kv = |out: &str| serde_json::from_str::<Value>(out).unwrap()["kv_cache_tokens"].as_u64().unwrap();
    let (c0, pinned, _) = run(&["simulate", "--json"]);
    let (c1, moved, err) = run(&["simulate", "--set", "engine.gpu_memory_utilization=0.95", "--json"]);
    assert_eq!((c0, c1), (0, 0), "{err}");
    assert!(kv(&moved) > kv(&pinned), "the fraction moves the pool");
    assert!(err.contains("engine.kv_cache_tokens moved from 194,896 to"), "{err}");
    // The move is the derived pools' difference: the same fraction on the unpinned scenario.
    let (_, derived_at, _) = run(&[
        "simulate",
        "--set",
        "engine.kv_cache_tokens=null",
        "--set",
        "engine.gpu_memory_utilization=0.95",
        "--json",
    ]);
    let (_, derived_base, _) = run(&["simulate", "--set", "engine.kv_cache_tokens=null", "--json"]);
    assert_eq!(kv(&moved) - kv(&pinned), kv(&derived_at) - kv(&derived_base));
    let (c2, both, err2) = run(&[
        "simulate",
        "--set",
        "engine.gpu_memory_utilization=0.95",
        "--set",
        "engine.kv_cache_tokens=100000",
        "--json",
    ]);
    assert_eq!(c2, 0, "{err2}");
    assert!(kv(&both) < 100_000 && !err2.contains("moved from") && !err2.contains("was dropped"), "{err2}");
    let (c3, sg, err3) = run(&[
        "simulate",
        "scenarios/rtx5090-qwen2.5-7b-sglang.json",
        "--set",
        "engine.mem_fraction_static=0.5",
        "--json",
    ]);
    assert_eq!(c3, 0, "{err3}");
    assert!(kv(&sg) < 150_000 && err3.contains("engine.max_total_num_tokens moved from 210,714 to"), "{err3}");
}

/// A model, GPU, TP size or KV format set on the command line (or varied by `tune`) makes the
/// scenario's pinned pool another setup's: it is dropped and derived, with a warning; a pinned
/// pool that cannot fit beside the weights is an error naming the field.
#[test]
fn a_pinned_pool_does_not_follow_the_setup_it_was_logged_for() {
    let kv = |out: &str| serde_json::from_str::<Value>(out).unwrap()["kv_cache_tokens"].as_u64().unwrap();
    let (_, pinned, _) = run(&["simulate", "--json"]);
    for set in ["model=llama-3.1-8b-instruct", "hardware=h100-80gb", "engine.kv_cache_dtype=fp8"] {
        let (c, out, err) = run(&["simulate", "--set", set, "--json"]);
        assert_eq!(c, 0, "{set}: {err}");
        assert_ne!(kv(&out), kv(&pinned), "{set}: the pool follows the setup");
        assert!(
            err.contains("engine.kv_cache_tokens was dropped") && err.contains(set.split('=').next().unwrap()),
            "{err}"
        );
    }
    // An engine flag the derived pool depends on moves the pin where it changes that pool (the
    // running cap sizes vLLM's sampler peak and CUDA graphs: the audit of 2026-12-07) by what the
    // derived pool moves, and keeps it where it does not (max_model_len, with chunked prefill on).
    let (_, other, err) = run(&["simulate", "--set", "engine.max_num_seqs=8", "--json"]);
    assert_ne!(kv(&other), kv(&pinned));
    assert!(err.contains("engine.kv_cache_tokens moved from") && err.contains("--set engine.max_num_seqs"), "{err}");
    let (_, same, err) = run(&["simulate", "--set", "engine.max_model_len=8192", "--json"]);
    assert_eq!(kv(&same), kv(&pinned));
    assert!(!err.contains("was dropped"), "{err}");
    let (c, out, err) = run(&[
        "tune",
        "--vary",
        "hardware=rtx-5090,h100-80gb",
        "--set",
        "workload.num_prompts=4",
        "--slo",
        "p99_ttft_ms<=1e9",
        "--json",
    ]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    // Per configuration, as simulate --set: the default's own GPU keeps its logged pool, the H100
    // derives one, and the note says so.
    assert!(
        j["notes"].to_string().contains("engine.kv_cache_tokens (the scenario's KV pool, a start-up log's figure) holds in the configurations that leave hardware as the scenario has it"),
        "{j}"
    );
    let pool = |gpu: &str| {
        j["pareto"]
            .as_array()
            .unwrap()
            .iter()
            .chain(j["rejected"].as_array().unwrap())
            .chain(Some(&j["best"]))
            .find(|e| e["config"]["hardware"] == gpu)
            .map(|e| e["metrics"]["kv_cache_tokens"].as_u64().unwrap())
    };
    if let Some(p) = pool("rtx-5090") {
        assert_eq!(p, kv(&pinned), "the scenario's own GPU keeps its pool");
    }
    assert!(pool("h100-80gb").is_some_and(|p| p != kv(&pinned)), "{j}");
    // A pool no card can hold.
    let (c, _, err) = run(&["simulate", "--set", "engine.kv_cache_tokens=2000000"]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("engine.kv_cache_tokens") && err.contains("cannot exist"), "{err}");
}

/// Figures no model or accelerator has (a typo in units) are errors naming the field, not a
/// report of nonsense: a zero-cost engine, a 1 B/s GPU, a model without weights or with more KV
/// heads than query heads.
#[test]
fn impossible_cards_and_costs_are_refused() {
    let card = |dir: &str, id: &str, field: &str, v: Value| {
        let mut c: Value =
            serde_json::from_str(&std::fs::read_to_string(root().join(format!("models/{dir}/{id}.json"))).unwrap())
                .unwrap();
        c[field] = v;
        c.to_string()
    };
    let zero = r#"cost.coefficients={"step_us":0,"per_seq_us":0,"prefill_token_us":0,"decode_token_us":0,"prefill_attention_us":0,"decode_kv_us":0,"request_ingress_us":0,"output_token_us":0}"#;
    // A picosecond a token is not zero, but every latency of the report would print as 0.00 ms.
    let tiny = r#"cost.coefficients={"step_us":0,"per_seq_us":0,"prefill_token_us":0.000001,"decode_token_us":0.000001,"prefill_attention_us":0,"decode_kv_us":0,"request_ingress_us":0,"output_token_us":0}"#;
    let cases = [
        (zero.to_string(), "cost.coefficients"),
        (tiny.to_string(), "cost.coefficients"),
        (
            format!("hardware={}", card("gpu", "rtx-5090", "memory_bandwidth_bytes_per_s", 1.0.into())),
            "hardware.memory_bandwidth_bytes_per_s",
        ),
        (format!("hardware={}", card("gpu", "rtx-5090", "dense_bf16_flops", 5.0.into())), "hardware.dense_bf16_flops"),
        (
            format!("hardware={}", card("gpu", "b200", "compute_capability", "sm100".into())),
            "hardware.compute_capability",
        ),
        (format!("model={}", card("model", "qwen2.5-7b-instruct", "num_parameters", 0.into())), "model.num_parameters"),
        (format!("model={}", card("model", "qwen2.5-7b-instruct", "vocab_size", 0.into())), "model.vocab_size"),
        (format!("model={}", card("model", "qwen2.5-7b-instruct", "num_kv_heads", 64.into())), "model.num_kv_heads"),
        // A parameter count far from what the card's own layers hold (a unit slip, a layer count
        // cut): the weights in memory and the steps timed were two different models.
        (format!("model={}", card("model", "qwen2.5-7b-instruct", "num_parameters", 7.into())), "model.num_parameters"),
        (format!("model={}", card("model", "qwen2.5-7b-instruct", "num_layers", 1.into())), "model.num_parameters"),
        (
            format!("model={}", card("model", "qwen2.5-7b-instruct", "intermediate_size", 0.into())),
            "model.intermediate_size",
        ),
    ];
    let mut failures = Vec::new();
    for (set, field) in &cases {
        let (c, _, err) = run(&["simulate", "--set", set]);
        if c != 2 || !err.contains(field) {
            failures.push(format!("--set {set}: exit {c}, stderr {err:?} (want exit 2 naming {field})"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The roofline prior's time terms are bounded as the coefficients they become: a negative
/// step overhead or ingress took time off every step (the run "completed", faster than the
/// roofline), a huge one overflowed simulated time mid-run. And a prior whose steps cost next to
/// nothing is named as the prior, not as a profile the scenario does not have.
#[test]
fn the_priors_time_terms_are_bounded_and_named() {
    let s = "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json";
    let mut failures = Vec::new();
    for (set, field) in [
        ("cost.prior.step_overhead_us=-1", "cost.prior.step_overhead_us"),
        ("cost.prior.per_seq_us=-1", "cost.prior.per_seq_us"),
        ("cost.prior.request_ingress_us=-100000", "cost.prior.request_ingress_us"),
        ("cost.prior.output_token_us=1e30", "cost.prior.output_token_us"),
        ("cost.prior.allreduce_latency_us=1e30", "cost.prior.allreduce_latency_us"),
    ] {
        let (c, _, err) = run(&["simulate", s, "--set", "workload.num_prompts=4", "--set", set]);
        if c != 2 || !err.contains(field) || !err.contains("from 0 to 10000000") {
            failures.push(format!("--set {set}: exit {c}, stderr {err:?} (want exit 2 naming {field})"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let tiny = r#"model={"id":"tiny","num_parameters":1000,"num_layers":1,"hidden_size":8,"intermediate_size":8,"num_attention_heads":1,"num_kv_heads":1,"head_dim":8,"vocab_size":16,"tie_word_embeddings":true,"dtype":"bfloat16","max_position_embeddings":4096,"add_bos_token":false}"#;
    let (c, _, err) = run(&[
        "simulate",
        s,
        "--set",
        tiny,
        "--set",
        "engine.kv_cache_tokens=100000",
        "--set",
        r#"cost.prior={"step_overhead_us":0,"per_seq_us":0}"#,
        "--set",
        "workload.num_prompts=4",
    ]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("cost.prior: a decode step") && !err.contains("cost.profile"), "{err}");
}

/// `tune --objective` minimises what is better lower (the run's duration, preemptions) and
/// refuses a key with no better direction; a sampled search spends its whole budget, and
/// when it finds nothing feasible it does not claim the grid has nothing.
#[test]
fn tune_objectives_have_a_direction_and_a_sample_spends_its_budget() {
    let tune = |extra: &[&str]| {
        let mut args = vec!["tune", "--vary", "engine.max_num_seqs=8,64", "--set", "workload.max_concurrency=64"];
        args.extend_from_slice(&["--set", "workload.num_prompts=64", "--slo", "p99_ttft_ms<=1e9", "--json"]);
        args.extend_from_slice(extra);
        let (c, out, err) = run(&args);
        assert_eq!(c, 0, "{err}");
        serde_json::from_str::<Value>(&out).unwrap()
    };
    let fast = tune(&[]);
    let short = tune(&["--objective", "duration"]);
    assert_eq!(fast["best"]["config"], short["best"]["config"], "the fastest run is the shortest");
    let dur = |j: &Value| j["best"]["metrics"]["duration"].as_f64().unwrap();
    let other = tune(&["--objective", "output_throughput", "--slo", "duration>=0"]);
    assert!(dur(&short) <= dur(&other) + 1e-9);
    let (c, _, err) = run(&["tune", "--vary", "engine.max_num_seqs=8,64", "--objective", "num_prompts"]);
    assert!(c == 2 && err.contains("--objective") && err.contains("no better direction"), "{err}");
    let (c, _, err) = run(&["tune", "--vary", "engine.max_num_seqs=8,64", "--pareto-latency", "output_throughput"]);
    assert!(c == 2 && err.contains("--pareto-latency"), "{err}");
    // A 25-configuration grid on a budget of 1, 3 and 24: exactly that many searched.
    for m in ["1", "3", "24"] {
        let (c, out, err) = run(&[
            "tune",
            "--vary",
            "engine.max_num_seqs=8,16,32,64,128",
            "--vary",
            "workload.max_concurrency=1,8,16,32,64",
            "--set",
            "workload.num_prompts=16",
            "--slo",
            "p99_ttft_ms<=1",
            "--max-configs",
            m,
        ]);
        assert_eq!(c, 0, "{err}");
        assert!(out.contains(&format!("Searched {m} of the grid's 25")), "{out}");
        assert!(out.contains("the rest of the grid was not searched"), "{out}");
    }
}

/// `tune` varying the concurrency carries the caveat of the varied shape (the base scenario at
/// concurrency 1 has none) and says when a concurrency exceeds the prompts.
#[test]
fn tune_varying_the_concurrency_carries_its_caveats() {
    let (c, out, err) =
        run(&["tune", "--vary", "workload.max_concurrency=16,64", "--slo", "p99_ttft_ms<=1e9", "--json"]);
    assert_eq!(c, 0, "{err}");
    let notes = serde_json::from_str::<Value>(&out).unwrap()["notes"].to_string();
    assert!(notes.contains("caveat (lockstep_waves)"), "{notes}");
    assert!(notes.contains("workload.max_concurrency 64 exceeds workload.num_prompts 20"), "{notes}");
}

/// `simulate --json` of the SGLang RTX 5090 scenario moved to one B200, four prompts.
const SGLANG_ON_B200: [&str; 7] = [
    "simulate",
    "scenarios/rtx5090-qwen2.5-7b-sglang.json",
    "--set",
    "hardware=\"b200\"",
    "--set",
    "workload.num_prompts=4",
    "--json",
];

/// SGLang changes a page size its default attention backend does not take (from 0.5.7 on the
/// SM100 family: `trtllm_mha`, pages of 16, 32 or 64) and logs it; servesim runs the size the
/// engine would and says so, instead of running another size than the one asked for silently.
#[test]
fn a_page_size_sglang_would_change_is_changed_with_a_warning() {
    let args = SGLANG_ON_B200;
    let with = |p: &str| {
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        a.extend(["--set".to_string(), format!("engine.page_size={p}")]);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        run(&a)
    };
    let (c, out, err) = with("1");
    assert_eq!(c, 0, "{err}");
    assert!(err.contains("engine.page_size 1 runs as 64") && err.contains("trtllm_mha"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["completed"], 4, "{out}");
    let (c, _, err) = with("32");
    assert_eq!(c, 0, "{err}");
    assert!(!err.contains("runs as"), "a size the backend takes is kept silently: {err}");
}

/// `engine.attention_backend`, in each engine's words: another SGLang backend keeps the page
/// size a defaulted `trtllm_mha` would change and picks its own lane of the kernel tables; a
/// backend the engine refuses on the GPU is refused with the engine's reason; one the tables
/// did not measure is timed by the kernels they did, and the cost source says so.
#[test]
fn an_attention_backend_is_checked_and_says_what_timed_it() {
    let sg = |backend: &str, extra: &[&str]| {
        let mut a = SGLANG_ON_B200.to_vec();
        // Other hardware given replaces the B200 alone (a path given twice is refused).
        if extra.iter().any(|x| x.starts_with("hardware=")) {
            let i = a.iter().position(|x| x.starts_with("hardware=")).unwrap();
            a.drain(i - 1..=i);
        }
        a.extend(["--set", "engine.page_size=1"]);
        let b = format!("engine.attention_backend=\"{backend}\"");
        if !backend.is_empty() {
            a.extend(["--set", b.as_str()]);
        }
        a.extend_from_slice(extra);
        let (c, out, err) = run(&a);
        (c, out, err)
    };
    // flashinfer on B200: page size 1 kept, no warning, a measured lane.
    let (c, out, err) = sg("flashinfer", &[]);
    assert_eq!(c, 0, "{err}");
    assert!(!err.contains("runs as"), "{err}");
    let fi: Value = serde_json::from_str(&out).unwrap();
    assert!(!fi["cost_source"].as_str().unwrap().contains("no measured"), "{}", fi["cost_source"]);
    // Where the tables' lanes differ (Llama-3.1-70B at TP 4), the backend picks its own.
    let tp4 = [
        "--set",
        "hardware={\"gpu\":\"b200\",\"count\":4}",
        "--set",
        "model=llama-3.1-70b-instruct",
        "--set",
        "engine.tp_size=4",
    ];
    let ttft = |b: &str| {
        let (c, out, err) = sg(b, &tp4);
        assert_eq!(c, 0, "{err}");
        serde_json::from_str::<Value>(&out).unwrap()["mean_ttft_ms"].as_f64().unwrap()
    };
    assert_ne!(ttft("flashinfer"), ttft(""), "the flashinfer lane is not the default trtllm_mha lane");
    assert_eq!(ttft("trtllm_mha"), ttft(""), "trtllm_mha given is the default");
    // fa3 on Blackwell: SGLang's own refusal.
    let (c, _, err) = sg("fa3", &[]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("engine.attention_backend") && err.contains("SM>=80 and SM<=90"), "{err}");
    // A backend without a measured lane here: timed by the tables' kernels, said in the source.
    let (c, out, err) = sg("triton", &[]);
    assert_eq!(c, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["cost_source"].as_str().unwrap().contains("no measured triton attention"), "{}", v["cost_source"]);
    // vLLM: names in any case; an unmodelled one refused naming the modelled ones.
    let vl = |b: &str| {
        run(&[
            "simulate",
            "scenarios/b200-llama3.1-70b-fp8-vllm.json",
            "--set",
            &format!("engine.attention_backend=\"{b}\""),
            "--set",
            "workload.num_prompts=4",
            "--json",
        ])
    };
    let (c, _, err) = vl("flashinfer");
    assert_eq!(c, 0, "{err}");
    let (c, _, err) = vl("XFORMERS");
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("FLASH_ATTN, FLASHINFER"), "{err}");
}

/// explain's figures follow the run they explain (the invariant hunt of 2026-12-04): the
/// recompute time is priced by the step cost that timed the run (it read the linear prior's
/// per-token figure whatever timed the steps); the advice names the field that pins the pool
/// (kv_cache_tokens, which num_gpu_blocks_override overrides, moved nothing); and the knee does
/// not depend on the scenario's own max_concurrency when --concurrency is given.
#[test]
fn explain_prices_recompute_by_the_cost_in_use_and_names_the_pinning_field() {
    let s = "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json";
    let json = |args: &[&str]| -> Value {
        let (c, out, err) = run(args);
        assert_eq!(c, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    };
    let composed = json(&["explain", s, "--json"]);
    let linear = json(&["explain", s, "--json", "--set", "cost.prior={}"]);
    let (a, b) = (composed["recompute_seconds"].as_f64().unwrap(), linear["recompute_seconds"].as_f64().unwrap());
    assert!(a > 0.0 && b > 0.0 && (a / b - 1.0).abs() > 0.05, "recompute priced alike under two costs: {a} vs {b}");
    let text = composed["explanation"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect::<String>();
    assert!(text.contains("raise num_gpu_blocks_override (pinned here"), "{text}");
    let knee = |mc: &str| {
        json(&["explain", s, "--json", "--concurrency", "64", "--set", &format!("workload.max_concurrency={mc}")])
            ["knee"]["max_concurrency"]
            .clone()
    };
    assert_eq!(knee("64"), knee("25"));
}

/// Inline coefficients win over a profile's; a scenario whose inline coefficients override every
/// coefficient of the profile it names ran the inline model under the profile's name, its
/// intervals labelled the profile's (the third hunt of 2026-12-04). It is an error saying how to
/// use the profile, and dropping the inline coefficients does use it.
#[test]
fn a_profile_every_inline_coefficient_overrides_is_an_error() {
    let coefficients = r#"{"step_us": 9900, "per_seq_us": 4, "prefill_token_us": 28, "decode_token_us": 150,
        "prefill_attention_us": 0.001, "decode_kv_us": 0.5, "request_ingress_us": 1500, "output_token_us": 40}"#;
    let profile = write_temp(
        "overridden-profile.json",
        &format!(
            r#"{{"format": "servesim-profile", "version": 1, "source": "results", "engine": {{"kind": "vllm", "model": "qwen2.5-7b-instruct"}}, "coefficients": {coefficients}}}"#
        ),
    );
    let set = format!("cost.profile={}", profile.display());
    let (c, _, err) = run(&["simulate", "scenarios/serve-small-vllm.json", "--set", &set]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("cost.profile") && err.contains("would change nothing"), "{err}");
    let (c, out, err) = run(&[
        "simulate",
        "scenarios/serve-small-vllm.json",
        "--json",
        "--set",
        &set,
        "--set",
        "cost.coefficients=null",
    ]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["cost_source"], "linear (fitted profile)", "{}", j["cost_source"]);
}

/// A profile says how it is applied: a misspelt `cost_mode`, or a `corrects_composed` profile
/// without the prior its correction is measured from, ran the linear model in its place (a
/// different answer, labelled "linear (fitted profile)"); a profile setting no coefficient
/// changed nothing yet labelled the run "corrected by a fitted profile"; an `engine` that is not
/// an object skipped the deployment checks; a coefficient missing from (or null in) a profile
/// `calibrate` wrote, which writes all of them, took the scenario's own value under the
/// profile's name. Each is an error naming the profile and the field (the fuzzing of 2026-12-05
/// and 2026-12-06).
#[test]
fn a_malformed_profile_is_refused_naming_the_field() {
    let coefficients = r#"{"step_us": 9900, "per_seq_us": 4, "prefill_token_us": 28, "decode_token_us": 150,
        "prefill_attention_us": 0.001, "decode_kv_us": 0.5, "request_ingress_us": 1500, "output_token_us": 40}"#;
    let profile = |name: &str, engine: &str, mode: &str, coefficients: &str, prior: &str| {
        let p = write_temp(
            name,
            &format!(
                r#"{{"format": "servesim-profile", "version": 1, "source": "results", "engine": {engine}{mode},
                    "coefficients": {coefficients}{prior}}}"#
            ),
        );
        let set = format!("cost.profile={}", p.display());
        run(&[
            "simulate",
            "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json",
            "--set",
            "workload.num_prompts=8",
            "--set",
            &set,
        ])
    };
    let engine = r#"{"kind": "vllm", "model": "qwen2.5-7b-instruct"}"#;
    let prior = format!(r#", "prior": {coefficients}"#);
    let cases = [
        (
            profile("mode-typo.json", engine, r#", "cost_mode": "corrects-composed""#, coefficients, &prior),
            "cost_mode: expected \"corrects_composed\" or \"linear\"",
        ),
        (
            profile("no-prior.json", engine, r#", "cost_mode": "corrects_composed""#, coefficients, ""),
            "prior: missing, and cost_mode is \"corrects_composed\"",
        ),
        (profile("no-coefficients.json", engine, "", "{}", ""), "coefficients: sets none of step_us"),
        (profile("engine-string.json", r#""vllm""#, "", coefficients, ""), "engine: expected an object"),
        (
            profile("one-missing.json", engine, "", &coefficients.replace(r#""decode_kv_us": 0.5, "#, ""), ""),
            "coefficients.decode_kv_us: missing",
        ),
        (
            profile("one-null.json", engine, "", &coefficients.replace("\"step_us\": 9900", "\"step_us\": null"), ""),
            "coefficients.step_us: missing",
        ),
        (
            profile(
                "prior-missing.json",
                engine,
                r#", "cost_mode": "corrects_composed""#,
                coefficients,
                &prior.replace(r#""output_token_us": 40"#, r#""output_token_us": null"#),
            ),
            "prior.output_token_us: missing",
        ),
        // A coefficient out of range is said as such, before its ratio to the prior (it read "the
        // profile's prior was edited", the value printed to 300 digits).
        (
            profile(
                "huge.json",
                engine,
                r#", "cost_mode": "corrects_composed""#,
                &coefficients.replace("\"step_us\": 9900", "\"step_us\": 1e300"),
                &prior,
            ),
            "coefficients.step_us: must be a finite number from 0",
        ),
        (
            profile(
                "negative.json",
                engine,
                r#", "cost_mode": "corrects_composed""#,
                &coefficients.replace("\"step_us\": 9900", "\"step_us\": -1"),
                &prior,
            ),
            "coefficients.step_us: must be a finite number from 0",
        ),
        // A corrects_composed profile whose mode was edited to linear (it ran its coefficients
        // as the linear model's, every prediction moved, with no word until 2026-12-08).
        (
            profile(
                "mode-edited.json",
                engine,
                r#", "cost_mode": "linear", "composed_cost_source": "measured kernels (a100-80gb, vllm 0.11)""#,
                coefficients,
                &prior,
            ),
            "cost_mode: \"linear\" beside a composed_cost_source",
        ),
    ];
    for ((c, _, err), want) in cases {
        assert_eq!(c, 2, "{err}");
        assert!(err.contains("cost.profile") && err.contains(want), "want {want:?} in: {err}");
    }
    // The same profile with its prior, and an older one that says no mode (linear), run.
    let (c, _, err) = profile("with-prior.json", engine, r#", "cost_mode": "corrects_composed""#, coefficients, &prior);
    assert_eq!(c, 0, "{err}");
    let (c, _, err) = profile("no-mode.json", engine, "", coefficients, "");
    assert_eq!(c, 0, "{err}");
}

/// A hand-edited profile's deployment field of the wrong type is an error naming the file, the
/// field and what was expected: each was read as absent, and the profile then skipped the check
/// the field makes (`engine.kind: 1` applied to SGLang, `engine.gpu: 5` to another GPU with a
/// warning that it was too old to say; `servesim_time_scale: "fast"` ignored). A profile that
/// names no model (neither `engine.model_card` nor the `engine.model` every profile has had)
/// was edited, and is refused; one without the card alone (before 2026-12-03) is warned about
/// where nothing else names its model (an audit, 2026-12-07).
#[test]
fn a_profile_field_of_the_wrong_type_is_refused_naming_it() {
    let coefficients = r#"{"step_us": 9900, "per_seq_us": 4, "prefill_token_us": 28, "decode_token_us": 150,
        "prefill_attention_us": 0.001, "decode_kv_us": 0.5, "request_ingress_us": 1500, "output_token_us": 40}"#;
    let profile = |name: &str, source: &str, engine: &str| {
        let p = write_temp(
            name,
            &format!(
                r#"{{"format": "servesim-profile", "version": 1, "source": {source}, "engine": {engine}, "coefficients": {coefficients}}}"#
            ),
        );
        let set = format!("cost.profile={}", p.display());
        run(&["simulate", "scenarios/serve-small-vllm.json", "--set", "cost.coefficients=null", "--set", &set])
    };
    let full =
        r#""kind": "vllm", "version": "0.33.0", "model": "qwen2.5-7b-instruct", "model_card": "qwen2.5-7b-instruct""#;
    let cases = [
        (
            "kind-int.json",
            r#""results""#,
            r#"{"kind": 1, "model": "qwen2.5-7b-instruct"}"#.to_string(),
            "engine.kind: expected a string",
        ),
        (
            "kind-other.json",
            r#""results""#,
            r#"{"kind": "trt", "model": "qwen2.5-7b-instruct"}"#.to_string(),
            "engine.kind: expected \"vllm\" or \"sglang\"",
        ),
        ("gpu-int.json", r#""results""#, format!(r#"{{{full}, "gpu": 5}}"#), "engine.gpu: expected a string"),
        (
            "tp-str.json",
            r#""results""#,
            format!(r#"{{{full}, "tensor_parallel_size": "2"}}"#),
            "engine.tensor_parallel_size: expected a whole number",
        ),
        (
            "tp-zero.json",
            r#""results""#,
            format!(r#"{{{full}, "tensor_parallel_size": 0}}"#),
            "engine.tensor_parallel_size: expected a whole number",
        ),
        (
            "ts-str.json",
            r#""results""#,
            format!(r#"{{{full}, "servesim_time_scale": "fast"}}"#),
            "engine.servesim_time_scale: expected a finite number > 0",
        ),
        (
            "graphs-str.json",
            r#""results""#,
            format!(r#"{{{full}, "cuda_graphs": "yes"}}"#),
            "engine.cuda_graphs: expected true or false",
        ),
        (
            "card-int.json",
            r#""results""#,
            r#"{"kind": "vllm", "model_card": 7}"#.to_string(),
            "engine.model_card: expected a string",
        ),
        (
            "version-int.json",
            r#""results""#,
            format!(r#"{{{full}, "version": 28}}"#).replace(r#""version": "0.33.0", "#, ""),
            "engine.version: expected a string",
        ),
        ("source-int.json", "5", format!(r#"{{{full}}}"#), "source: expected a string"),
        ("no-kind.json", r#""results""#, r#"{"model": "qwen2.5-7b-instruct"}"#.to_string(), "engine.kind: missing"),
        (
            "no-model.json",
            r#""results""#,
            r#"{"kind": "vllm", "version": "0.28.0", "gpu": "rtx-5090"}"#.to_string(),
            "engine.model: missing, and no engine.model_card",
        ),
    ];
    for (name, source, engine, want) in cases {
        let (c, _, err) = profile(name, source, &engine);
        assert_eq!(c, 2, "{name}: {err}");
        assert!(err.contains(name) && err.contains(want), "{name}: want {want:?} in: {err}");
    }
    // Before 2026-12-03 a live profile named no card; one whose server named no model says so.
    let (c, _, err) = profile("old-live.json", r#""live""#, r#"{"kind": "vllm", "version": "0.28.0", "model": null}"#);
    assert_eq!(c, 0, "{err}");
    assert!(err.contains("does not say its model (engine.model_card missing"), "{err}");
    assert!(err.contains("(engine.gpu, engine.tensor_parallel_size missing"), "{err}");
    // Complete, it runs without either warning.
    let (c, _, err) = profile(
        "complete.json",
        r#""results""#,
        &format!(r#"{{{full}, "gpu": "a100-80gb", "tensor_parallel_size": 1}}"#),
    );
    assert_eq!(c, 0, "{err}");
    assert!(!err.contains("does not say its"), "{err}");
}

/// `trace_rate` is the rate of the rows the run replays: with `num_prompts` keeping the first
/// two rows of a trace whose later rows are far apart, the rate was measured over the whole
/// file and the two rows went 3.7 times faster than asked (the fleet and trace hunt of
/// 2026-12-04).
#[test]
fn trace_rate_is_the_replayed_rows_rate() {
    let trace =
        write_temp("rate-rows.csv", "arrival_time,input_len,output_len\n0,100,5\n1,200,5\n10,300,5\n11,400,5\n");
    let scenario = write_temp(
        "rate-rows.json",
        &format!(
            r#"{{"version": 1, "engine": {{"kind": "vllm", "version": "0.33.0", "max_model_len": 16384}},
                "model": "llama-3.1-8b-instruct", "hardware": "h100-80gb",
                "workload": {{"dataset_name": "trace", "trace": "{}", "ignore_eos": true, "seed": 0}}}}"#,
            trace.display()
        ),
    );
    let (c, out, err) = run(&[
        "simulate",
        scenario.to_str().unwrap(),
        "--json",
        "--set",
        "workload.num_prompts=2",
        "--set",
        "workload.trace_rate=1",
    ]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    // The second request is sent a second after the first: the run lasts a second and its E2EL.
    let d = j["duration"].as_f64().unwrap();
    assert!((1.0..1.5).contains(&d), "duration {d}");
}

/// A key given twice in a scenario: JSON parsers keep the last, so the run silently used one of
/// two values (the CLI fuzz of 2026-12-04). It is an error naming the key's path and line.
#[test]
fn a_key_given_twice_in_a_scenario_is_an_error() {
    let text = std::fs::read_to_string(root().join("scenarios/serve-small-vllm.json")).unwrap();
    let dup = text.replacen("\"num_prompts\"", "\"num_prompts\": 5, \"num_prompts\"", 1);
    assert_ne!(dup, text, "the scenario has a num_prompts to repeat");
    let p = write_temp("duplicate-key.json", &dup);
    let (c, _, err) = run(&["simulate", p.to_str().unwrap()]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("workload.num_prompts: given twice") && err.contains("line"), "{err}");
}

/// A key given twice in a profile, a result file or a trace row: JSON keeps the last, so one of
/// two values was used without a word. Each is an error naming the file (and line) and the key.
#[test]
fn a_key_given_twice_in_a_profile_a_result_or_a_trace_row_is_an_error() {
    // A profile: a coefficient twice (the file is read before its deployment is compared).
    let text = std::fs::read_to_string(root().join("validation/llmd-exp0/profile-fit-0.5-0.67.json")).unwrap();
    let dup = text.replacen("\"step_us\"", "\"step_us\": 1.0, \"step_us\"", 1);
    assert_ne!(dup, text);
    let p = write_temp("dup-profile.json", &dup);
    let (c, _, err) = run(&["simulate", "--set", &format!("cost.profile={}", p.display())]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("dup-profile.json") && err.contains("coefficients.step_us: given twice"), "{err}");

    // A result file (whole JSON, and a JSONL line).
    let scenario = "validation/llmd-exp0/scenario-0.84.json";
    for (name, body, needle) in [
        ("dup-result.json", "{\"mean_ttft_ms\": 100, \"mean_ttft_ms\": 50, \"max_concurrency\": 1}", "dup-result.json: mean_ttft_ms: given twice"),
        (
            "dup-result.jsonl",
            "{\"mean_ttft_ms\": 100, \"max_concurrency\": 1}\n{\"mean_tpot_ms\": 10, \"mean_tpot_ms\": 20, \"max_concurrency\": 2}\n",
            "dup-result.jsonl:2: mean_tpot_ms: given twice",
        ),
    ] {
        let f = write_temp(name, body);
        let out = scratch().join(format!("dup-{name}.profile.json"));
        let (c, _, err) = run(&[
            "calibrate",
            "--from-results",
            f.to_str().unwrap(),
            "--scenario",
            scenario,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(c, 2, "{name}: {err}");
        assert!(err.contains(needle), "{name}: {err}");
        assert!(!out.exists(), "{name}: no profile is written");
    }

    // Trace rows: Mooncake JSONL and servesim's own JSONL.
    for (name, format, body, needle) in [
        (
            "dup-mooncake.jsonl",
            "mooncake",
            "{\"timestamp\": 0, \"input_length\": 20, \"output_length\": 5, \"hash_ids\": [1, 2]}\n{\"timestamp\": 10, \"input_length\": 20, \"input_length\": 900, \"output_length\": 5, \"hash_ids\": [1]}\n",
            "dup-mooncake.jsonl: line 2, column 52: `input_length`",
        ),
        (
            "dup-rows.jsonl",
            "jsonl",
            "{\"arrival_time\": 0, \"input_len\": 20, \"output_len\": 5}\n{\"arrival_time\": 1, \"input_len\": 20, \"output_len\": 5, \"output_len\": 50}\n",
            "dup-rows.jsonl:2: output_len: given twice",
        ),
    ] {
        let t = write_temp(name, body);
        let (c, _, err) = run(&[
            "simulate",
            "--set",
            "workload={\"dataset_name\":\"trace\",\"ignore_eos\":true}",
            "--set",
            &format!("workload.trace={}", t.display()),
            "--set",
            &format!("workload.trace_format={format}"),
        ]);
        assert_eq!(c, 2, "{name}: {err}");
        assert!(err.contains(needle) && err.contains("given twice"), "{name}: {err}");
    }
    // A Mooncake row's key present as null is named as a wrong value, not as missing.
    let t = write_temp(
        "null-mooncake.jsonl",
        "{\"timestamp\": null, \"input_length\": 20, \"output_length\": 5, \"hash_ids\": []}\n",
    );
    let (c, _, err) = run(&[
        "simulate",
        "--set",
        "workload={\"dataset_name\":\"trace\",\"ignore_eos\":true,\"trace_format\":\"mooncake\"}",
        "--set",
        &format!("workload.trace={}", t.display()),
    ]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("`timestamp` must be a number of milliseconds, got null"), "{err}");
}

/// Found by the cross-command hunt (2026-12-04): two fields pinning one vLLM pool (the override
/// won and the other was ignored, so a `tune --vary engine.kv_cache_tokens` drew three equal
/// rows); a `--set` that repeats the scenario's own GPU dropped its pinned pool; the pool check
/// counted a slot for the last sampled token, which vLLM never computes.
#[test]
fn pool_pins_are_one_and_kept_unless_changed() {
    let s = "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json";
    // Both in one scenario file: an error.
    let text = std::fs::read_to_string(root().join(s)).unwrap();
    let both =
        text.replacen("\"num_gpu_blocks_override\"", "\"kv_cache_tokens\": 80000, \"num_gpu_blocks_override\"", 1);
    assert_ne!(both, text);
    let p = write_temp("both-pins.json", &both);
    let (c, _, err) = run(&["simulate", p.to_str().unwrap()]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("engine.kv_cache_tokens: and engine.num_gpu_blocks_override both pin the KV pool"), "{err}");
    // One block of 16 is the null block alone (it was raised to two silently).
    let (c, _, err) = run(&["simulate", "--set", "engine.kv_cache_tokens=16"]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("engine.kv_cache_tokens: 16 tokens is 1 block(s) of 16, the null block included"), "{err}");
    // One set on the command line replaces the file's: the pool is the one set.
    let (c, out, err) = run(&["simulate", s, "--json", "--set", "engine.kv_cache_tokens=80000"]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["kv_cache_tokens"], 80000 - 16, "the pool set, less the null block");
    // The file's own GPU, model and engine set again: the pinned pool stands, without a warning.
    let base = run(&["simulate", s, "--json"]);
    for set in ["hardware=a100-80gb", "model=qwen2.5-7b-instruct", "engine.kind=vllm"] {
        let (c, out, err) = run(&["simulate", s, "--json", "--set", set]);
        assert_eq!(c, 0, "{set}: {err}");
        assert_eq!(out, base.1, "{set}");
        assert!(!err.contains("was dropped"), "{set}: {err}");
    }
    // Another GPU: vLLM's override holds there too (vLLM uses it in place of its memory
    // profile), and the run says so; a start-up log's figure is dropped (another setup's).
    let (c, out, err) = run(&["simulate", s, "--json", "--set", "hardware=h100-80gb"]);
    assert_eq!(c, 0, "{err}");
    assert!(err.contains("engine.num_gpu_blocks_override holds"), "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["kv_cache_tokens"], 640 * 16);
    // 513 + 512 tokens compute 1,024: 64 blocks of 16, which 65 blocks (64 usable) hold. (vLLM
    // 0.20: from 0.21 a pinned pool must also hold one max_model_len request, 1,025 tokens here,
    // and 65 blocks do not, so vLLM would refuse to start.)
    let one = [
        "--set",
        "engine.version=0.20.0",
        "--set",
        "workload.random_input_len=513",
        "--set",
        "workload.max_concurrency=1",
        "--set",
        "workload.num_prompts=2",
    ];
    let mut a = vec!["simulate", s, "--json", "--set", "engine.num_gpu_blocks_override=65"];
    a.extend(one);
    let (c, out, err) = run(&a);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["completed"], 2);
    assert_eq!(j["kv_cache_usage_peak"], 1.0, "the request fills the pool exactly");
    let mut a = vec!["simulate", s, "--json", "--set", "engine.num_gpu_blocks_override=64"];
    a.extend(one);
    let (c, _, err) = run(&a);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("needs 64 KV blocks") && err.contains("63 usable"), "{err}");
}

/// Found by the live-loop hunt (2026-12-04): `calibrate --from-results` fitted a run whose
/// prompts were four times the scenario's (prefill cost +86%, nothing said) and a run where most
/// requests failed (fitted as if all had run); `check` passed with every point fitted on, and
/// dropped extra prompt counts; `bench` ran a NaN as the flag's default and sent to a base URL
/// or endpoint it could not form.
#[test]
fn live_loop_inputs_that_cannot_hold_are_refused() {
    let s = "scenarios/serve-small-vllm.json";
    let out = scratch().join("live-refused.json");
    let metrics = "\"mean_ttft_ms\": 40, \"mean_tpot_ms\": 9, \"mean_e2el_ms\": 320, \"output_throughput\": 700, \"max_concurrency\": 4, \"request_rate\": \"inf\"";
    for (name, body, needle) in [
        (
            "long-prompts.json",
            format!("{{{metrics}, \"num_prompts\": 24, \"completed\": 24, \"total_input_tokens\": 24576}}"),
            "the result's prompts average 1024 tokens (total_input_tokens ÷ completed), the scenario's 256",
        ),
        // Without `completed` the check had been skipped, silently (the calibrate-traps audit,
        // 2026-12-06): the totals are over `num_prompts`, or without it the scenario's count.
        (
            "long-prompts-no-completed.json",
            format!("{{{metrics}, \"num_prompts\": 24, \"total_input_tokens\": 24576, \"total_output_tokens\": 768}}"),
            "the result's prompts average 1024 tokens (total_input_tokens ÷ num_prompts), the scenario's 256",
        ),
        // 17% longer: under the 25% that passed silently until 2026-12-06; the totals are exact,
        // and fixed 256-token prompts leave room for 32 tokens a request (12.5%), no more.
        (
            "slightly-long-prompts.json",
            format!("{{{metrics}, \"num_prompts\": 24, \"completed\": 24, \"total_input_tokens\": 7200}}"),
            "the result's prompts average 300 tokens (total_input_tokens ÷ completed), the scenario's 256 (12.5% allowed",
        ),
        (
            "long-outputs-no-count.json",
            format!("{{{metrics}, \"total_output_tokens\": 20480}}"),
            "total_output_tokens ÷ the scenario's 40 requests: the result gives neither completed nor num_prompts), the scenario's 32",
        ),
        (
            "failed.json",
            format!("{{{metrics}, \"num_prompts\": 80, \"completed\": 17, \"failed\": 63}}"),
            "failed: 63 requests of 80 failed",
        ),
    ] {
        let f = write_temp(name, &body);
        let (c, _, err) =
            run(&["calibrate", "--from-results", f.to_str().unwrap(), "--scenario", s, "--out", out.to_str().unwrap()]);
        assert_eq!(c, 2, "{name}: {err}");
        assert!(err.contains(needle), "{name}: {err}");
        assert!(!out.exists(), "{name}: no profile written");
    }
    // Within the room (a BOS or a chat template's tokens a request): fitted.
    let f = write_temp(
        "near-prompts.json",
        &format!("{{{metrics}, \"num_prompts\": 24, \"completed\": 24, \"total_input_tokens\": 6600, \"total_output_tokens\": 768}}"),
    );
    let (c, _, err) =
        run(&["calibrate", "--from-results", f.to_str().unwrap(), "--scenario", s, "--out", out.to_str().unwrap()]);
    assert_eq!(c, 0, "{err}");
    std::fs::remove_file(&out).unwrap();
    // A load the scenario refuses names the point that gave it (a burstiness whose gamma gaps
    // underflow at its rate); one no run can have is the result file's field.
    let f = write_temp(
        "huge-burst.json",
        "{\"mean_ttft_ms\": 40, \"request_rate\": 5, \"burstiness\": 1e308, \"num_prompts\": 10}",
    );
    let (c, _, err) =
        run(&["calibrate", "--from-results", f.to_str().unwrap(), "--scenario", s, "--out", out.to_str().unwrap()]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("huge-burst.json#0 (its load:") && err.contains("workload.burstiness: 1e308"), "{err}");
    let f = write_temp(
        "zero-burst.json",
        "{\"mean_ttft_ms\": 40, \"request_rate\": 5, \"burstiness\": 0, \"num_prompts\": 10}",
    );
    let (c, _, err) =
        run(&["calibrate", "--from-results", f.to_str().unwrap(), "--scenario", s, "--out", out.to_str().unwrap()]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("zero-burst.json: burstiness: expected a positive number"), "{err}");
    // The same result with the scenario's prompt length is fitted.
    let f = write_temp(
        "right-prompts.json",
        &format!("{{{metrics}, \"num_prompts\": 24, \"completed\": 24, \"total_input_tokens\": 6144}}"),
    );
    let (c, _, err) =
        run(&["calibrate", "--from-results", f.to_str().unwrap(), "--scenario", s, "--out", out.to_str().unwrap()]);
    assert_eq!(c, 0, "{err}");
    let _ = std::fs::remove_file(&out);

    let profile = "validation/llmd-exp0/profile-fit-0.5-0.67.json";
    let url = "http://127.0.0.1:1";
    for (args, needle) in [
        (
            vec![
                "check",
                "--base-url",
                url,
                "--engine",
                "vllm",
                "--profile",
                profile,
                "--concurrency",
                "1,4",
                "--fit-on",
                "1,4",
            ],
            "no point is left to judge",
        ),
        (
            vec![
                "check",
                "--base-url",
                url,
                "--engine",
                "vllm",
                "--profile",
                profile,
                "--concurrency",
                "1,4",
                "--num-prompts-per-point",
                "4,8,16",
            ],
            "one per --concurrency point (2), got 3",
        ),
        (
            vec!["bench", "--base-url", url, "--request-rate", "5", "--burstiness", "nan"],
            "--burstiness: expected a number, got NaN",
        ),
        (vec!["bench", "--base-url", url, "--request-rate", "nan"], "--request-rate: expected a number, got NaN"),
        (vec!["bench", "--base-url", url, "--random-range-ratio", "NaN"], "--random-range-ratio: expected a number"),
        (vec!["bench", "--base-url", "127.0.0.1:1"], "--base-url: expected a URL starting with http://"),
        (
            vec!["bench", "--base-url", url, "--endpoint", "v1/completions"],
            "--endpoint: expected a path starting with /",
        ),
    ] {
        let (c, _, err) = run(&args);
        assert_eq!(c, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// With the prefix cache on, a prefix every prompt shares is held once: the KV-limited
/// concurrency counted it in every request (10 here, while 18 ran without a preemption and
/// `explain` said the pool binds past 10; found by the cross-command hunt).
#[test]
fn the_kv_limited_concurrency_holds_a_shared_prefix_once() {
    let sweep = |extra: &[&str]| -> Value {
        let mut a = vec![
            "sweep",
            "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json",
            "--set",
            "workload.random_prefix_len=496",
            "--set",
            "workload.random_input_len=16",
            "--concurrency",
            "18,20",
            "--num-prompts",
            "200",
            "--json",
        ];
        a.extend(extra);
        let (c, out, err) = run(&a);
        assert_eq!(c, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    };
    let on = sweep(&[]);
    // 640 usable blocks: the 31-block prefix once, then 33 blocks a request (16 + 512 tokens).
    assert_eq!(on["kv_limited_concurrency"], 18);
    assert_eq!(on["points"][0]["num_preemptions"], 0, "18 fit");
    assert!(on["points"][1]["num_preemptions"].as_u64().unwrap() > 0, "20 do not");
    let off = sweep(&["--set", "engine.enable_prefix_caching=false"]);
    assert_eq!(off["kv_limited_concurrency"], 10, "without the cache each request holds its own copy");
    // A fleet of one replica is the engine: the same limit (it counted the prefix in full).
    let (c, out, err) = run(&[
        "simulate",
        "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json",
        "--set",
        "workload.random_prefix_len=496",
        "--set",
        "workload.random_input_len=16",
        "--set",
        "fleet.count=1",
        "--json",
    ]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["kv_limited_concurrency"], 18);
}

/// `tune`'s shared-work line counts configurations by equality, not by which thread ran what:
/// two equal configurations run at once on two threads were both counted as simulated (three
/// equal ones read "2 simulated, 1 answered"; found by the cross-command hunt), so the text
/// varied from run to run. Here 3 distinct configurations, each given 2 equal spellings (prefix
/// caching on, and left to vLLM V1's default, on). (`kv_cache_dtype` auto against bfloat16 served
/// here until 2026-12-06, when `tune` began to size each configuration's pool as `simulate --set`
/// does: a dtype set to another value than the scenario's drops its pinned pool.)
#[test]
fn tunes_shared_work_counts_by_equality() {
    for _ in 0..3 {
        let (c, out, err) = run(&[
            "tune",
            "scenarios/serve-small-vllm.json",
            "--vary",
            "engine.enable_prefix_caching=true,null",
            "--vary",
            "engine.max_num_seqs=8,16,32",
            "--slo",
            "mean_ttft_ms<=1e9",
        ]);
        assert_eq!(c, 0, "{err}");
        assert!(out.contains("(3 simulated, 3 answered by an identical configuration; 1 distinct workloads;"), "{out}");
    }
}

/// The KV-limited concurrency counts what a request holds: its prompt and output less the last
/// token, which is sampled and never stored. 500 + 13 tokens fill exactly 32 blocks of 16, so
/// the kv-starved pool (640 usable blocks) holds 20 of them, as the run beside it does with no
/// preemption; counting 513 tokens (33 blocks) said 19, and explain then told a user that
/// max_num_seqs = 20 was above the pool's limit (the hunt of 2026-12-05).
#[test]
fn the_kv_limit_leaves_out_the_last_sampled_token() {
    let (c, out, err) = run(&[
        "simulate",
        "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json",
        "--set",
        "workload.random_input_len=500",
        "--set",
        "workload.random_output_len=13",
        "--set",
        "workload.max_concurrency=20",
        "--set",
        "workload.num_prompts=400",
        "--json",
    ]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["kv_request_footprint_tokens"], 512);
    assert_eq!(j["kv_limited_concurrency"], 20);
    assert_eq!(j["peak_running"], 20);
    assert_eq!(j["num_preemptions"], 0);
    assert_eq!(j["kv_cache_usage_peak"], 1.0);
}

/// The lock-step caveat says what the run did: a run that preempted has partly broken waves,
/// and where the out-of-step replay gives the higher TTFT the caveat no longer calls this
/// run's TTFT an upper bound (it did, beside 824 ms lock-step and 846 ms out of step; the hunt
/// of 2026-12-05).
#[test]
fn the_lockstep_caveat_follows_the_run() {
    let (c, out, err) = run(&[
        "simulate",
        "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json",
        "--set",
        "workload.max_concurrency=16",
        "--json",
    ]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    let cav = &j["caveats"][0];
    assert_eq!(cav["id"], "lockstep_waves");
    let msg = cav["message"].as_str().unwrap();
    assert!(j["num_preemptions"].as_u64().unwrap() > 0);
    assert!(msg.contains(&format!("This run preempted {} times", j["num_preemptions"])), "{msg}");
    assert!(cav["desynchronised_mean_ttft_ms"].as_f64().unwrap() > j["mean_ttft_ms"].as_f64().unwrap());
    assert!(msg.ends_with("this run's TTFT is not an upper bound."), "{msg}");
    // The default scenario at its own concurrency 1 has no waves at all, and past its KV limit
    // the out-of-step figure is the lower one: no such sentence.
    let (_, out, _) =
        run(&["simulate", "--set", "workload.max_concurrency=48", "--set", "workload.num_prompts=192", "--json"]);
    let j: Value = serde_json::from_str(&out).unwrap();
    let msg = j["caveats"][0]["message"].as_str().unwrap();
    assert!(!msg.contains("not an upper bound"), "{msg}");
}

/// vllm bench serve's peak output tokens per second and peak concurrency count 1-second
/// buckets from the first request's send (`min_start_time`), not from the benchmark's start:
/// at a finite rate the first request is sent after a gap too. Two requests sent at 1.17 s
/// and 2.00 s fall in one bucket: 4 tokens and 2 requests (servesim said 2 and 1).
#[test]
fn peak_buckets_count_from_the_first_send() {
    let s = write_temp(
        "peaks.json",
        r#"{"version":1,"engine":{"kind":"vllm","version":"0.28.0","max_model_len":8192},"model":"qwen2.5-7b-instruct",
  "hardware":"h100-80gb","workload":{"dataset_name":"random","random_input_len":16,"random_output_len":2,"num_prompts":2,
  "request_rate":1,"ignore_eos":true,"seed":2}}"#,
    );
    let (c, out, err) = run(&["simulate", s.to_str().unwrap(), "--json"]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["max_output_tokens_per_s"], 4.0);
    assert_eq!(j["max_concurrent_requests"], 2);
}

/// vllm bench serve from 0.11.1 sends ignore_eos with every random request (vLLM PR #28227):
/// unset, the field follows it; false is what that client cannot send, an error naming the
/// field; 0.11.0 honours the flag (simulate refused the unset field, and ran an explicit false
/// with a length distribution, outputs that client never cuts; the hunt of 2026-12-05).
#[test]
fn the_random_datasets_ignore_eos_follows_the_modelled_client() {
    let s = write_temp(
        "eos.json",
        r#"{"version":1,"engine":{"kind":"vllm","version":"0.28.0","max_model_len":8192},"model":"qwen2.5-7b-instruct",
  "hardware":"h100-80gb","workload":{"dataset_name":"random","random_input_len":256,"random_output_len":32,"num_prompts":8,
  "max_concurrency":4,"seed":0}}"#,
    );
    let s = s.to_str().unwrap();
    let (c, out, err) = run(&["simulate", s, "--json"]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["total_output_tokens"], 8 * 32);
    let (c, _, err) = run(&[
        "simulate",
        s,
        "--set",
        "workload.ignore_eos=false",
        "--set",
        r#"workload.output_len_dist={"kind":"geometric","mean":8}"#,
    ]);
    assert_eq!(c, 2);
    assert!(err.contains("workload.ignore_eos: false with the random dataset: vllm bench serve from 0.11.1"), "{err}");
    // A length distribution alone is the field to drop, not a call for ignore_eos false (the
    // hint went round in a circle).
    let (c, _, err) = run(&["simulate", s, "--set", r#"workload.output_len_dist={"kind":"geometric","mean":8}"#]);
    assert_eq!(c, 2);
    assert!(err.contains("workload.output_len_dist: with the random dataset"), "{err}");
    // 0.11.0: the flag as given (unset is false, which needs a length distribution).
    let (c, _, err) = run(&["simulate", s, "--set", "engine.version=0.11.0"]);
    assert_eq!(c, 2);
    assert!(err.contains("workload.ignore_eos: is false"), "{err}");
}

/// The client a scenario models decides its send times at a finite rate, not its engine:
/// `sglang.bench_serving` (`workload.client`) sends its first request at once and sleeps an
/// unscaled exponential gap after each (`get_request`, 0.4.10–0.5.23), where `vllm bench serve`
/// (the default, an SGLang server's too) delays even the first and rescales the gaps so the last
/// is due at N / rate. One request at 0.1 per second: vLLM's client sends it 10 s in, and the
/// benchmark's duration counts the wait; SGLang's sends it at once.
#[test]
fn an_sglang_bench_serving_scenario_sends_its_first_request_at_once() {
    let s = write_temp(
        "sglang-client.json",
        r#"{"version":1,"engine":{"kind":"sglang","version":"0.5.6"},"model":"qwen2.5-7b-instruct",
  "hardware":"h100-80gb","workload":{"dataset_name":"random","random_input_len":64,"random_output_len":8,"num_prompts":1,
  "request_rate":0.1,"ignore_eos":true,"initial_test_request":false,"seed":0}}"#,
    );
    let s = s.to_str().unwrap();
    let duration = |sets: &[&str]| {
        let mut args = vec!["simulate", s, "--json"];
        for set in sets {
            args.extend(["--set", set]);
        }
        let (c, out, err) = run(&args);
        assert_eq!(c, 0, "{sets:?}: {err}");
        serde_json::from_str::<Value>(&out).unwrap()["duration"].as_f64().unwrap()
    };
    let vllm_client = duration(&[]);
    assert!(vllm_client >= 10.0, "vllm bench serve sends the one request at N / rate = 10 s: {vllm_client}");
    assert_eq!(duration(&["workload.client=vllm_bench_serve"]), vllm_client);
    let sglang_client = duration(&["workload.client=sglang_bench_serving"]);
    assert!(sglang_client < 1.0, "sglang.bench_serving sends it at once: {sglang_client}");
    assert!((vllm_client - sglang_client - 10.0).abs() < 1e-6, "{vllm_client} vs {sglang_client}");
    // That client has no burstiness, and no other client is known.
    let (c, _, err) =
        run(&["simulate", s, "--set", "workload.client=sglang_bench_serving", "--set", "workload.burstiness=2"]);
    assert_eq!(c, 2);
    assert!(err.contains("workload.burstiness: 2.0 with workload.client \"sglang_bench_serving\""), "{err}");
    let (c, _, err) = run(&["simulate", s, "--set", "workload.client=sglang"]);
    assert_eq!(c, 2);
    assert!(err.contains("workload.client") && err.contains("sglang_bench_serving"), "{err}");
}

/// `vllm bench serve` 0.11.0 has no fixed gaps: `--burstiness inf` draws NaN gaps
/// (`np.random.gamma(inf, 0)`) and sends every request at once. A 0.11.0 scenario asking for it
/// is refused naming the field; from 0.11.1 it runs with gaps of 1 / rate.
#[test]
fn fixed_gaps_are_refused_for_vllm_0_11_0s_client() {
    let s = write_temp(
        "fixed-gaps.json",
        r#"{"version":1,"engine":{"kind":"vllm","version":"0.11.0"},"model":"qwen2.5-7b-instruct",
  "hardware":"h100-80gb","workload":{"dataset_name":"random","random_input_len":64,"random_output_len":8,"num_prompts":4,
  "request_rate":4,"burstiness":"inf","ignore_eos":true,"initial_test_request":false,"seed":0}}"#,
    );
    let s = s.to_str().unwrap();
    let (c, _, err) = run(&["simulate", s]);
    assert_eq!(c, 2);
    assert!(err.contains("workload.burstiness: \"inf\" with vLLM 0.11.0"), "{err}");
    let (c, _, err) = run(&["simulate", s, "--set", "engine.version=0.11.1"]);
    assert_eq!(c, 0, "{err}");
    // At an infinite rate the burstiness says nothing: not refused.
    let (c, _, err) = run(&["simulate", s, "--set", "workload.request_rate=inf"]);
    assert_eq!(c, 0, "{err}");
}

/// SGLang 0.4.10 and 0.5.1 evict the radix tree after each retraction (`retract_decode`: "use
/// the newly evictable memory instantly", `len(sorted) × retract_decode_steps` when less is
/// free), so the loop's test sees the freed cache and retracts fewer requests; servesim evicted
/// only from 0.5.3 (the SGLang source read of 2026-12-05): this run retracted 53 times, 45
/// with the eviction, and its prefix cache keeps more (hit rate 0.50 → 0.53). Since Llama's BOS
/// is prefilled before each prompt (2026-12-08: one more token a prompt, its prefix shifted by
/// one) the run with the eviction retracts 49 times, hit rate 0.521.
#[test]
fn old_sglang_evicts_the_tree_after_each_retraction() {
    let (c, out, err) = run(&[
        "simulate",
        "scenarios/shared-prefix-lpm-llama3.1-8b-h100-sglang.json",
        "--set",
        "engine.version=0.4.10",
        "--set",
        "workload.prefix_repetition_output_len=1024",
        "--set",
        "engine.max_total_tokens=60000",
        "--set",
        "workload.num_prompts=400",
        "--json",
    ]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["num_preemptions"], 49, "{}", j["num_preemptions"]);
    assert!(j["prefix_cache_hit_rate"].as_f64().unwrap() > 0.52, "{}", j["prefix_cache_hit_rate"]);
}

/// A profile given relative to the working directory is found for the intervals as for the
/// run (the run read it, then its intervals looked in the scenario's folder: "No such file"),
/// and a profile that does not say its GPU or TP size is said to be applied unchecked (the
/// KV-sizing hunt's notes, 2026-12-05).
#[test]
fn an_old_profile_is_found_and_said_to_be_unchecked() {
    let (c, out, err) = run(&[
        "simulate",
        "scenarios/serve-small-vllm.json",
        "--set",
        "cost.coefficients=null",
        "--set",
        "cost.profile=validation/live-20261130/vllm-profile.json",
        "--json",
    ]);
    assert_eq!(c, 0, "{err}");
    assert!(out.contains("mean_ttft_ms"), "{out}");
    assert!(err.contains("does not say its GPU or tensor parallel size"), "{err}");
}

/// A profile corrects the step cost servesim composed when it was fitted. Where servesim now
/// composes that setup's steps otherwise (here: vLLM's FlashAttention 2 times the decodes beside
/// a prefill chunk unpacked, 2026-12-05), its corrections may count the change twice: the run
/// says so, for a profile that records the cost it corrected and for one too old to record it;
/// the committed profile, refitted on today's cost, runs without a word.
#[test]
fn a_profile_fitted_on_another_step_cost_says_so() {
    let scenario = "validation/llmd-exp0/scenario-1.json";
    let path = "validation/llmd-exp0/profile-fit-0.5-0.67.json";
    let text = std::fs::read_to_string(root().join(path)).unwrap();
    let (c, _, err) = run(&["simulate", scenario, "--set", &format!("cost.profile={}", root().join(path).display())]);
    assert_eq!(c, 0, "{err}");
    assert!(!err.contains("count that change twice"), "{err}");
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let now = v["composed_cost_source"].as_str().expect("a profile records the cost it corrected").to_string();
    assert!(now.contains("unpacked"), "{now}");
    // Recorded, and not today's.
    v["composed_cost_source"] = serde_json::Value::String(
        now.replace("; decodes beside prefill chunks unpacked", "")
            .replace(" (FlashAttention 2: 8 query heads per KV head)", ""),
    );
    let p = write_temp("other-cost-profile.json", &v.to_string());
    let (c, _, err) = run(&["simulate", scenario, "--set", &format!("cost.profile={}", p.display())]);
    assert_eq!(c, 0, "{err}");
    assert!(
        err.contains("other-cost-profile.json") && err.contains("composes this setup's steps otherwise today"),
        "{err}"
    );
    // Not recorded (a profile written before 2026-12-05), on a setup whose decodes now run unpacked.
    v.as_object_mut().unwrap().remove("composed_cost_source");
    let p = write_temp("unrecorded-cost-profile.json", &v.to_string());
    let (c, _, err) = run(&["simulate", scenario, "--set", &format!("cost.profile={}", p.display())]);
    assert_eq!(c, 0, "{err}");
    assert!(err.contains("does not record the step cost it corrected"), "{err}");
    // Given, but not as a string: an error naming the field, not a profile read as unrecorded.
    v["composed_cost_source"] = serde_json::json!(5);
    let p = write_temp("bad-cost-source-profile.json", &v.to_string());
    let (c, _, err) = run(&["simulate", scenario, "--set", &format!("cost.profile={}", p.display())]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("composed_cost_source: expected a string"), "{err}");
}

/// A profile correcting the composed cost is judged against the card's roofline by what the
/// corrected cost takes per unit of each term's work, not by its coefficients, which are only
/// the references its corrections are ratios to: a linearised composed cost below the floor
/// warned on a profile that changed nothing (every Llama-3.1-8B H100 vLLM fit; the audit of
/// 2026-12-06), and a file's stale `beats_physics` is not repeated. A correction that takes
/// prefill faster than the card can is still said.
#[test]
fn a_corrected_profile_is_judged_by_its_corrected_cost() {
    let scenario = "validation/llmd-exp0/scenario-1.json";
    let text = std::fs::read_to_string(root().join("validation/llmd-exp0/profile-fit-0.5-0.67.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let simulate = |v: &serde_json::Value, name: &str| {
        let p = write_temp(name, &v.to_string());
        run(&[
            "simulate",
            scenario,
            "--set",
            "workload.num_prompts=8",
            "--set",
            &format!("cost.profile={}", p.display()),
        ])
    };
    let (c, _, err) = simulate(&v, "corrected-as-fitted.json");
    assert_eq!(c, 0, "{err}");
    assert!(!err.contains("roofline floor"), "{err}");
    // Flagged by an older judgement of the coefficient: nothing physical to say.
    v["roofline_check"][0]["beats_physics"] = true.into();
    let (c, _, err) = simulate(&v, "corrected-stale-flag.json");
    assert_eq!(c, 0, "{err}");
    assert!(!err.contains("roofline floor"), "{err}");
    // Prefill corrected to a fifth: faster than the card's peak.
    let k = v["coefficients"]["prefill_token_us"].as_f64().unwrap();
    v["coefficients"]["prefill_token_us"] = (k / 5.0).into();
    // (An edited coefficient outside the fit's own interval is refused since 2026-12-07: the
    // edit drops the intervals, as that error says to.)
    v["uncertainty"] = Value::Null;
    let (c, _, err) = simulate(&v, "corrected-too-fast.json");
    assert_eq!(c, 0, "{err}");
    assert!(err.contains("per unit of prefill_token_us's work, below the hardware card's roofline floor"), "{err}");
}

/// A profile records the formats its steps ran in (KV dtype, linear weight bytes, CUDA graphs):
/// a linear profile's coefficients are that format's times, so a scenario in another format is
/// refused (fp8 weights ran at the bf16 fit's TPOT, unchanged, where the uncalibrated model gives
/// 30% less; the audit of 2026-12-06); a profile correcting the composed cost scales the other
/// format's composed cost, which is said.
#[test]
fn a_profile_is_checked_against_the_formats_it_was_fitted_in() {
    let profile = |mode: &str| {
        let prior = if mode == "corrects_composed" {
            r#", "prior": {"step_us": 6000, "per_seq_us": 4, "prefill_token_us": 70, "decode_token_us": 80,
                            "prefill_attention_us": 0.01, "decode_kv_us": 0.2, "request_ingress_us": 2000,
                            "output_token_us": 40}"#
        } else {
            ""
        };
        write_temp(
            &format!("format-profile-{mode}.json"),
            &format!(
                r#"{{"format": "servesim-profile", "version": 1, "source": "results",
                    "engine": {{"kind": "vllm", "version": "0.33.0", "model_card": "llama-3.1-8b-instruct",
                               "gpu": "h100-80gb", "tensor_parallel_size": 1, "kv_cache_dtype": "bfloat16",
                               "linear_weight_bytes": 2, "cuda_graphs": true}},
                    "coefficients": {{"step_us": 6000, "per_seq_us": 4, "prefill_token_us": 70, "decode_token_us": 80,
                                     "prefill_attention_us": 0.01, "decode_kv_us": 0.2, "request_ingress_us": 2000,
                                     "output_token_us": 40}},
                    "cost_mode": "{mode}"{prior}}}"#
            ),
        )
    };
    let scenario = "scenarios/long-prefill-itl-llama3.1-8b-h100-vllm.json";
    let run_with = |p: &std::path::Path, set: &[&str]| {
        let profile = format!("cost.profile={}", p.display());
        let mut a = vec!["simulate", scenario, "--set", "workload.num_prompts=4", "--set", &profile];
        for s in set {
            a.extend(["--set", s]);
        }
        run(&a)
    };
    let linear = profile("linear");
    let (c, _, err) = run_with(&linear, &[]);
    assert_eq!(c, 0, "{err}");
    for (set, want) in [
        ("engine.quantization=fp8", "fitted on 2-byte linear weights (this scenario: 1-byte, fp8)"),
        ("engine.kv_cache_dtype=fp8", "fitted on KV cache dtype bfloat16 (this scenario: fp8)"),
        ("engine.enforce_eager=true", "fitted on CUDA graphs on (this scenario: off)"),
    ] {
        let (c, _, err) = run_with(&linear, &[set]);
        assert_eq!(c, 2, "{set}: {err}");
        assert!(err.contains(want), "{set}: want {want:?} in: {err}");
    }
    // Fitted against a time-scaled emulator: another engine's speed, said.
    let scaled = write_temp(
        "format-profile-scaled.json",
        &std::fs::read_to_string(&linear)
            .unwrap()
            .replace("\"cuda_graphs\": true", "\"cuda_graphs\": true, \"servesim_time_scale\": 4"),
    );
    let (c, _, err) = run_with(&scaled, &[]);
    assert_eq!(c, 0, "{err}");
    assert!(err.contains("fitted against servesim serve at --time-scale 4"), "{err}");
    let corrected = profile("corrects_composed");
    let (c, _, err) = run_with(&corrected, &["engine.kv_cache_dtype=fp8"]);
    assert_eq!(c, 0, "{err}");
    assert!(
        err.contains("fitted with KV cache dtype bfloat16 (this scenario: fp8)") && err.contains("extrapolation"),
        "{err}"
    );
}

/// SGLang decode batches above a `--cuda-graph-max-bs` set below the release's default run
/// eagerly, as with `--disable-cuda-graph`: their steps pay the same launches (a capture of 1 at
/// batch 32 cost nothing, so a smaller setting looked free, its KV pool larger; the audit of
/// 2026-12-06). Within the capture, nothing changes.
#[test]
fn a_smaller_sglang_graph_capture_runs_the_larger_batches_eagerly() {
    let tpot = |set: &[&str]| {
        let mut a = vec![
            "simulate",
            "scenarios/long-prefill-itl-llama3.1-8b-h100-sglang.json",
            "--json",
            "--set",
            "workload.num_prompts=64",
            "--set",
            "workload.request_rate=inf",
            "--set",
            "workload.max_concurrency=32",
            "--set",
            "workload.random_input_len=1000",
            "--set",
            "workload.random_output_len=300",
            "--set",
            "workload.random_range_ratio=0",
            "--set",
            "engine.max_total_num_tokens=null",
        ];
        for s in set {
            a.extend(["--set", s]);
        }
        let (c, out, err) = run(&a);
        assert_eq!(c, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["mean_tpot_ms"].as_f64().unwrap()
    };
    let default = tpot(&[]);
    let eager = tpot(&["engine.disable_cuda_graph=true"]);
    let one = tpot(&["engine.cuda_graph_max_bs=1"]);
    let all = tpot(&["engine.cuda_graph_max_bs=32"]);
    assert!(eager > default * 1.05, "{eager} vs {default}");
    assert!((one / eager - 1.0).abs() < 0.01, "capture 1 at batch 32: {one}, eager {eager}");
    assert!((all / default - 1.0).abs() < 0.001, "capture 32 covers batch 32: {all}, default {default}");
}

/// Turning SGLang's overlap scheduler off on a GPU comes with a caveat: servesim does not model
/// the CPU work it hides, so the run without it is not slower (it came out faster at
/// concurrency 16, its one-step lag gone, a confident answer of the wrong sign; the audit of
/// 2026-12-06). With the overlap on, no caveat.
#[test]
fn sglang_without_the_overlap_scheduler_says_what_is_not_modelled() {
    let ids = |set: &str| {
        let (c, out, err) = run(&[
            "simulate",
            "scenarios/long-prefill-itl-llama3.1-8b-h100-sglang.json",
            "--json",
            "--set",
            "workload.num_prompts=8",
            "--set",
            set,
        ]);
        assert_eq!(c, 0, "{err}");
        let j: serde_json::Value = serde_json::from_str(&out).unwrap();
        j["caveats"].as_array().map_or(vec![], |a| a.iter().map(|c| c["id"].as_str().unwrap().to_string()).collect())
    };
    assert!(ids("engine.disable_overlap_schedule=true").contains(&"sglang_overlap_off".to_string()));
    assert!(!ids("engine.disable_overlap_schedule=false").contains(&"sglang_overlap_off".to_string()));
}

/// A production trace's replayed rows are timed from the first of them, as a servesim trace's
/// are: the times were taken from the earliest row of the whole file, so the first row of an
/// unsorted file, replayed alone, was sent 4 s late (a 4 s run of a 45 ms request; the audit of
/// 2026-12-06).
#[test]
fn a_production_traces_replayed_rows_start_at_the_first_of_them() {
    let trace = write_temp(
        "unsorted-mooncake.jsonl",
        "{\"timestamp\": 5000, \"input_length\": 100, \"output_length\": 5, \"hash_ids\": [0]}\n\
         {\"timestamp\": 1000, \"input_length\": 100, \"output_length\": 5, \"hash_ids\": [1]}\n",
    );
    let scenario = write_temp(
        "unsorted-mooncake.json",
        &format!(
            r#"{{"version": 1, "engine": {{"kind": "vllm", "version": "0.33.0", "max_model_len": 8192}},
                "model": "llama-3.1-8b-instruct", "hardware": "h100-80gb",
                "workload": {{"dataset_name": "trace", "trace": {:?}, "trace_format": "mooncake",
                              "ignore_eos": true, "seed": 0}}}}"#,
            trace.display().to_string()
        ),
    );
    let (c, out, err) = run(&["simulate", scenario.to_str().unwrap(), "--json", "--set", "workload.num_prompts=1"]);
    assert_eq!(c, 0, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let d = j["duration"].as_f64().unwrap();
    assert!(d < 1.0, "one request replayed alone ran {d} s");
}

/// An inline GPU card under a tabled GPU's id with other figures is timed as the GPU it
/// describes (scaled from the nearest tables, and says so), not by the id's own tables: twice the
/// H100's bandwidth had moved the default workload's TPOT by 0.02% and named the H100's table
/// (the cost audit of 2026-12-06).
#[test]
fn an_edited_gpu_card_under_a_tabled_id_is_not_timed_by_that_ids_tables() {
    let mut card: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("models/gpu/h100-80gb.json")).unwrap()).unwrap();
    let bw = card["memory_bandwidth_bytes_per_s"].as_f64().unwrap();
    card["memory_bandwidth_bytes_per_s"] = (2.0 * bw).into();
    let sim = |hw: &str| -> Value {
        let set = format!("hardware={hw}");
        let (code, out, err) = run(&["simulate", "--set", &set, "--set", "workload.num_prompts=4", "--json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    };
    let stock = sim("\"h100-80gb\"");
    let edited = sim(&serde_json::json!({"gpu": card, "count": 1}).to_string());
    let source = edited["cost_source"].as_str().unwrap();
    assert!(source.contains("scaled"), "{source}");
    let (a, b) = (stock["mean_tpot_ms"].as_f64().unwrap(), edited["mean_tpot_ms"].as_f64().unwrap());
    assert!(b < 0.8 * a, "twice the bandwidth: TPOT {a} -> {b} ms");
}

/// `tune` sizes each configuration's KV pool as `simulate --set` with the same assignments does:
/// the scenario's pinned pool holds in the configuration that is the scenario itself and is
/// derived in the others, and a pool pinned with `--set` holds in all of them. Until 2026-12-06
/// the pins were dropped once for the whole grid: the KV-starved scenario's own configuration ran
/// on a derived pool of 1,080,608 tokens instead of its 10,240 (and was called the best), and a
/// `--set engine.kv_cache_tokens=50000` was ignored.
#[test]
fn tune_sizes_each_configurations_pool_as_simulate_does() {
    let starved = "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json";
    let (c, out, err) = run(&[
        "tune",
        starved,
        "--vary",
        "engine.version=0.33.0,0.28.0",
        "--slo",
        "p99_ttft_ms<=10000",
        "--no-early-stop",
        "--json",
    ]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    let entries: Vec<&Value> = j["pareto"]
        .as_array()
        .unwrap()
        .iter()
        .chain(j["best"].as_object().map(|_| &j["best"]))
        .chain(j["rejected"].as_array().unwrap())
        .collect();
    let pool_of = |version: &str| {
        entries
            .iter()
            .find(|e| e["config"]["engine.version"] == version)
            .map(|e| e["metrics"]["kv_cache_tokens"].as_u64().unwrap())
            .unwrap_or_else(|| panic!("{version} not reported: {j:#}"))
    };
    let sim_pool = |sets: &[&str]| {
        let mut args = vec!["simulate", starved, "--json"];
        for s in sets {
            args.extend(["--set", s]);
        }
        let (c, out, err) = run(&args);
        assert_eq!(c, 0, "{err}");
        serde_json::from_str::<Value>(&out).unwrap()["kv_cache_tokens"].as_u64().unwrap()
    };
    assert_eq!(pool_of("0.33.0"), sim_pool(&[]), "the scenario's own configuration keeps its pool");
    assert_eq!(pool_of("0.33.0"), 10240);
    assert_eq!(pool_of("0.28.0"), sim_pool(&["engine.version=0.28.0"]), "another release derives it");
    // A pool pinned with --set holds in every configuration.
    let (c, out, err) = run(&[
        "tune",
        starved,
        "--set",
        "engine.kv_cache_tokens=50000",
        "--vary",
        "engine.gpu_memory_utilization=0.8,0.9",
        "--slo",
        "mean_tpot_ms<=100000",
        "--json",
    ]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    let want = sim_pool(&["engine.kv_cache_tokens=50000", "engine.gpu_memory_utilization=0.8"]);
    assert!(want < 50_000, "{want}");
    for e in j["pareto"].as_array().unwrap() {
        assert_eq!(e["metrics"]["kv_cache_tokens"].as_u64(), Some(want), "{e:#}");
    }
    assert!(j["notes"].to_string().contains("pinned by --set"), "{:#}", j["notes"]);
    // A --set on a varied path is refused, not overwritten unsaid.
    let (c, _, err) = run(&["tune", starved, "--vary", "engine.max_num_seqs=8,16", "--set", "engine.max_num_seqs=4"]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("also varied"), "{err}");
}

/// A configuration `tune` lists as invalid (its report lacks a figure an SLO needs: SGLang's
/// retraction count of a vLLM run) is not on the Pareto front; a violated bound of 0 states no
/// relative excess (`by` null; it was 1.48e14).
#[test]
fn tunes_invalid_configurations_stay_off_the_front() {
    let s = write_temp(
        "tune-mix.json",
        r#"{"version":1,"name":"mix","engine":{"kind":"sglang"},"model":"qwen2.5-7b-instruct","hardware":"a100-80gb",
            "workload":{"dataset_name":"random","random_input_len":512,"random_output_len":128,"num_prompts":64,
                        "max_concurrency":16,"ignore_eos":true,"seed":0}}"#,
    );
    let s = s.to_str().unwrap();
    let (c, out, err) = run(&["tune", s, "--vary", "engine.kind=sglang,vllm", "--slo", "num_retractions<=0", "--json"]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["invalid"].as_array().unwrap().len(), 1, "{:#}", j["invalid"]);
    for e in j["pareto"].as_array().unwrap() {
        assert_eq!(e["config"]["engine.kind"], "sglang", "{e:#}");
    }
    let starved = "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json";
    let (c, out, err) =
        run(&["tune", starved, "--vary", "workload.max_concurrency=8,64", "--slo", "num_preemptions<=0", "--json"]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    let v = &j["rejected"][0]["violations"][0];
    assert_eq!(v["bound"], 0.0, "{v:#}");
    assert!(v["by"].is_null(), "{v:#}");
}

/// A request past `max_model_len`: vLLM through 0.31 answers HTTP 400 (`max_input_tokens` =
/// max_model_len − max_tokens), which servesim does not model, so the run is refused saying so;
/// from 0.32 the server shortens the output to fit (`get_max_tokens`; read in the 0.31.0, 0.32.0
/// and 0.34.0 wheels), and so does the run, with a caveat (it was refused until 2026-12-06). A
/// prompt that fills the context is refused in every release.
#[test]
fn a_request_past_max_model_len_is_what_the_release_does_with_it() {
    let s = "scenarios/serve-small-vllm.json";
    let (c, _, err) = run(&["simulate", s, "--set", "engine.version=0.31.0", "--set", "engine.max_model_len=270"]);
    assert_eq!(c, 2, "{err}");
    assert!(
        err.contains("exceeds engine.max_model_len 270")
            && err.contains("through 0.31 answers such a request with HTTP 400"),
        "{err}"
    );
    for version in ["0.32.0", "0.33.0"] {
        let v = format!("engine.version={version}");
        let args = [
            "simulate",
            s,
            "--set",
            &v,
            "--set",
            "engine.max_model_len=270",
            "--set",
            "workload.num_prompts=100",
            "--json",
        ];
        let (c, out, err) = run(&args);
        assert_eq!(c, 0, "{version}: {err}");
        let j: Value = serde_json::from_str(&out).unwrap();
        // 256-token prompts asking for 32: each gets the 14 its context leaves.
        assert_eq!((j["completed"].as_u64(), j["total_output_tokens"].as_u64()), (Some(100), Some(1400)), "{version}");
        let caveat = j["caveats"].as_array().unwrap().iter().find(|c| c["id"] == "max_tokens_clamped").unwrap();
        assert!(caveat["message"].as_str().unwrap().starts_with("100 of the 100 requests"), "{caveat}");
    }
    let (c, _, err) = run(&["simulate", s, "--set", "engine.version=0.33.0", "--set", "engine.max_model_len=256"]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("HTTP 400"), "{err}");
    // Within the context nothing is shortened, and nothing is said.
    let (c, out, err) = run(&["simulate", s, "--set", "engine.version=0.33.0", "--json"]);
    assert_eq!(c, 0, "{err}");
    assert!(!out.contains("max_tokens_clamped"));
}

/// A prefix-repetition `num_prompts` that is not a multiple of its prefixes runs
/// `num_prompts // num_prefixes` prompts a prefix, as vLLM's dataset does: the run says so
/// (63 over 32 prefixes ran 32 requests, unsaid, until 2026-12-06).
#[test]
fn a_rounded_prefix_repetition_run_says_so() {
    let s = "scenarios/shared-prefix-lpm-llama3.1-8b-h100-sglang.json";
    let ids = |n: &str| {
        let (c, out, err) = run(&["simulate", s, "--set", &format!("workload.num_prompts={n}"), "--json"]);
        assert_eq!(c, 0, "{err}");
        let j: Value = serde_json::from_str(&out).unwrap();
        // (The key is left out when a run has no caveat.)
        let caveat = j["caveats"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["id"] == "prefix_repetition_rounded")
            .map(|c| c["message"].as_str().unwrap().to_string());
        (j["completed"].as_u64().unwrap(), caveat)
    };
    let (done, caveat) = ids("63");
    assert_eq!(done, 32);
    assert!(caveat.is_some_and(|m| m.contains("the run has 32 requests, not 63")));
    assert_eq!(ids("64"), (64, None));
}

/// A scenario saved with a UTF-8 byte-order mark reads as the same scenario (it was "not valid
/// JSON: expected value at line 1 column 1"), and a negative number after a flag reaches that
/// flag's check (clap had told the user to write `-- -1`, which makes it a scenario path).
#[test]
fn a_bom_and_a_negative_flag_value_get_their_own_answers() {
    let plain = std::fs::read_to_string("scenarios/serve-small-vllm.json").unwrap();
    let bom = write_temp("bom-scenario.json", &format!("\u{feff}{plain}"));
    let (c, with_bom, err) = run(&["simulate", bom.to_str().unwrap(), "--json"]);
    assert_eq!(c, 0, "{err}");
    let (_, without, _) = run(&["simulate", "scenarios/serve-small-vllm.json", "--json"]);
    assert_eq!(with_bom, without);
    for args in [
        &["sweep", "scenarios/serve-small-vllm.json", "--concurrency", "-1"][..],
        &["explain", "scenarios/serve-small-vllm.json", "--concurrency", "-3"][..],
        &["validate", "--tolerance", "-1"][..],
    ] {
        let (c, _, err) = run(args);
        assert_eq!(c, 2, "{args:?}: {err}");
        let flag = args.iter().find(|a| a.starts_with("--")).unwrap();
        assert!(err.contains(flag) && !err.contains("use '--"), "{args:?}: {err}");
    }
}

/// Errors say what JSON a field expects, not the Rust type it is read into ("untagged enum B",
/// "expected struct EngineSection", "internally tagged enum RouterSpec": the fuzzing of
/// 2026-12-06).
#[test]
fn errors_name_the_json_expected_not_a_rust_type() {
    let s = "scenarios/serve-small-vllm.json";
    for (set, want) in [
        ("workload.burstiness=[1]", "workload.burstiness: expected a number or \"inf\", got [1]"),
        ("engine=5", "engine: invalid type: integer `5`, expected an object"),
        ("cost=5", "cost: invalid type: integer `5`, expected an object"),
    ] {
        let (c, _, err) = run(&["simulate", s, "--set", set]);
        assert_eq!(c, 2, "{set}: {err}");
        assert!(err.contains(want), "{set}: {err}");
        assert!(!err.contains("enum") && !err.contains("struct"), "{set}: {err}");
    }
    // `cost: null` is the section left out, as `fleet: null` is no fleet.
    let (c, with_null, err) = run(&["simulate", s, "--set", "cost=null", "--json"]);
    assert_eq!(c, 0, "{err}");
    let (_, without, _) = run(&["simulate", s, "--set", "cost={}", "--json"]);
    assert_eq!(with_null, without);
    let (c, _, err) = run(&["simulate", s, "--set", r#"fleet={"count": 2}"#, "--set", r#"fleet.router="round_robin""#]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("fleet.router") && err.contains("expected an object") && !err.contains("enum"), "{err}");
}

/// SGLang through 0.5.10 answers HTTP 400 to a request whose prompt and max_new_tokens fill the
/// context exactly (`_validate_one_request`: `>=`; `>` from 0.5.11): such a run is refused
/// there, as one past the context is in every release (it ran until 2026-12-06).
#[test]
fn sglang_before_0_5_11_refuses_a_request_that_fills_the_context() {
    let s = "scenarios/rtx5090-qwen2.5-7b-sglang.json";
    let run_at = |version: &str, ctx: &str| {
        run(&[
            "simulate",
            s,
            "--set",
            &format!("engine.version={version}"),
            "--set",
            &format!("engine.context_length={ctx}"),
            "--set",
            "engine.max_total_num_tokens=100000",
            "--set",
            "workload.num_prompts=2",
        ])
    };
    // 4,096 prompt tokens and 512 output: 4,608 in all.
    let (c, _, err) = run_at("0.5.10", "4608");
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("fills engine.context_length 4608") && err.contains("SGLang 0.5.10"), "{err}");
    let (c, _, err) = run_at("0.5.11", "4608");
    assert_eq!(c, 0, "{err}");
    let (c, _, err) = run_at("0.5.23", "4607");
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("exceeds engine.context_length 4607"), "{err}");
}

/// One-token outputs have no time between tokens: the keys read 0, as `vllm bench serve` prints
/// them, but the run says why (the `one_token_outputs` caveat), and `tune` does not count a TPOT
/// SLO met at "0.00 ms" (an audit, 2026-12-07: it picked a best configuration on it).
#[test]
fn one_token_outputs_have_no_tpot_to_judge() {
    let (c, out, err) = run(&["simulate", "--random-output-len", "1", "--num-prompts", "4", "--json"]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["mean_tpot_ms"], 0.0, "vllm bench serve's key as it prints it");
    assert!(j["caveats"].to_string().contains("one_token_outputs"), "{}", j["caveats"]);
    let (_, out, _) = run(&["simulate", "--random-output-len", "2", "--num-prompts", "4", "--json"]);
    let j: Value = serde_json::from_str(&out).unwrap();
    assert!(!j["caveats"].to_string().contains("one_token_outputs"), "{}", j["caveats"]);
    let (c, out, err) = run(&[
        "tune",
        "--vary",
        "engine.max_num_seqs=8,16",
        "--slo",
        "mean_tpot_ms<=5",
        "--set",
        "workload.random_output_len=1",
        "--set",
        "workload.num_prompts=8",
        "--set",
        "workload.max_concurrency=4",
        "--json",
    ]);
    assert_ne!(c, 0, "no configuration meets an SLO it cannot judge: {out}");
    assert!(!out.contains("\"best\":{"), "{out}");
    assert!(err.contains("none of the configurations"), "{err}");
}

/// A RoPE scaling type servesim does not know is refused, naming the field (an audit,
/// 2026-12-07: `"bogus"` with factor 4 extended an inline card's context fourfold).
#[test]
fn an_unknown_rope_scaling_type_is_refused() {
    let card = |rope: &str| {
        format!(
            r#"model={{"id": "m", "hf_repo": "x/y", "num_parameters": 8030261248, "num_layers": 32, "hidden_size": 4096,
            "intermediate_size": 14336, "num_attention_heads": 32, "num_kv_heads": 8, "head_dim": 128,
            "vocab_size": 128256, "dtype": "bfloat16", "max_position_embeddings": 8192, "add_bos_token": true, "rope_scaling": {rope}}}"#
        )
    };
    let (c, _, err) = run(&["simulate", "--set", &card(r#"{"rope_type": "bogus", "factor": 4}"#)]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("model.rope_scaling.rope_type") && err.contains("\"bogus\""), "{err}");
    let (c, _, err) = run(&["simulate", "--set", &card(r#"{"rope_type": "linear", "factor": 0.5}"#)]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("model.rope_scaling.factor"), "{err}");
    let (c, _, err) = run(&[
        "simulate",
        "--set",
        &card(r#"{"rope_type": "llama3", "factor": 8}"#),
        "--set",
        "engine.max_model_len=8192",
        "--random-input-len",
        "1024",
        "--num-prompts",
        "2",
    ]);
    assert_eq!(c, 0, "{err}");
}

/// A profile fitted on the uncalibrated model's own predictions reproduces it, and using it says
/// nothing of the roofline: the RTX 5090's measured decode attention reads 1.85 TB/s at the
/// margin between one token of context and 32k (its fixed latency hidden under the transfer; 1.5
/// TB/s on average), above the card's 1.79, and every such profile warned (an audit,
/// 2026-12-07). A correction that takes the term faster still is said.
#[test]
fn a_profile_that_reproduces_the_uncalibrated_model_is_not_below_the_roofline() {
    let dir = scratch().join("roofline-identity");
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for c in [1, 4, 16] {
        let (code, out, err) =
            run(&["simulate", "--json", "--max-concurrency", &c.to_string(), "--num-prompts", &(2 * c).to_string()]);
        assert_eq!(code, 0, "{err}");
        let f = dir.join(format!("r{c}.json"));
        std::fs::write(&f, out).unwrap();
        files.push(f.display().to_string());
    }
    let profile = dir.join("p.json");
    let mut args = vec!["calibrate", "--from-results"];
    args.extend(files.iter().map(String::as_str));
    let p = profile.display().to_string();
    args.extend(["--scenario", "scenarios/rtx5090-qwen2.5-7b-vllm.json", "--out", &p]);
    let (code, _, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    let use_it = |path: &std::path::Path| {
        run(&["simulate", "--num-prompts", "2", "--set", &format!("cost.profile={}", path.display())])
    };
    let (code, _, err) = use_it(&profile);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("roofline floor"), "{err}");
    // decode_kv corrected to a fifth: below the uncorrected model's own margin, said.
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&profile).unwrap()).unwrap();
    let k = v["coefficients"]["decode_kv_us"].as_f64().unwrap();
    v["coefficients"]["decode_kv_us"] = (k / 5.0).into();
    v["uncertainty"] = Value::Null;
    let fast = write_temp("roofline-identity-fast.json", &v.to_string());
    let (code, _, err) = use_it(&fast);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("per unit of decode_kv_us's work, below the uncorrected measured-kernel cost's own"), "{err}");
}

/// Fixed step coefficients (`cost.coefficients`) are one deployment's costs: `--set` or `tune
/// --vary` of the GPU, TP size, weight format or engine is refused, naming them, unless the
/// same assignments give the cost (the robustness audit of 2026-12-07: `tune --vary
/// hardware=a100-80gb,h100-80gb,rtx-4090,l40s` on `serve-small-vllm` drew four identical rows,
/// all on the Pareto front); an engine flag still runs on them.
#[test]
fn fixed_step_coefficients_are_not_carried_to_another_deployment() {
    let s = "scenarios/serve-small-vllm.json";
    for set in ["hardware=h100-80gb", "engine.tensor_parallel_size=2", "engine.quantization=fp8"] {
        let (c, _, err) = run(&["simulate", s, "--set", set]);
        assert_eq!(c, 2, "{set}: {err}");
        let path = set.split('=').next().unwrap();
        assert!(err.contains(&format!("--set {path}: the scenario's step costs are fixed coefficients")), "{err}");
    }
    let (c, _, err) = run(&["simulate", s, "--set", "hardware=h100-80gb", "--set", "cost.coefficients=null"]);
    assert_eq!(c, 0, "{err}");
    let (c, _, err) = run(&["simulate", s, "--set", "engine.max_num_seqs=16"]);
    assert_eq!(c, 0, "{err}");
    let (c, out, err) = run(&["tune", s, "--vary", "hardware=a100-80gb,h100-80gb", "--json"]);
    assert_eq!(c, 0, "{err}");
    let j: Value = serde_json::from_str(&out).unwrap();
    let inv = j["invalid"].as_array().unwrap();
    assert_eq!(inv.len(), 1, "{j}");
    assert_eq!(inv[0]["config"]["hardware"], "h100-80gb");
    assert!(inv[0]["error"].as_str().unwrap().contains("fixed coefficients"), "{inv:?}");
}

/// `tune` sizes each configuration's pool as `simulate --set` does: vLLM's
/// `num_gpu_blocks_override` holds in every configuration (it was dropped, so varying the running
/// cap on the KV-starved scenario compared 10,240 tokens with 1,070,256), and a start-up log's
/// pool moves with a flag by what the derived pool moves. (`tune --json` lists the Pareto front,
/// the rejected and the invalid configurations; each listed one is checked against `simulate`.)
#[test]
fn tune_holds_vllms_override_and_moves_a_logs_pool() {
    let check = |scenario: &str, values: &str, want_note: &str| {
        let (c, out, err) = run(&[
            "tune",
            scenario,
            "--vary",
            &format!("engine.max_num_seqs={values}"),
            "--set",
            "workload.num_prompts=8",
            "--slo",
            "p99_ttft_ms<=1e9",
            "--json",
        ]);
        assert_eq!(c, 0, "{err}");
        let j: Value = serde_json::from_str(&out).unwrap();
        assert!(j["notes"].to_string().contains(want_note), "{j}");
        let listed: Vec<&Value> =
            j["pareto"].as_array().unwrap().iter().chain(j["rejected"].as_array().unwrap()).collect();
        assert!(!listed.is_empty(), "{j}");
        let mut pools = Vec::new();
        for e in listed {
            let seqs = e["config"]["engine.max_num_seqs"].to_string();
            let (_, own, _) = run(&[
                "simulate",
                scenario,
                "--set",
                &format!("engine.max_num_seqs={seqs}"),
                "--set",
                "workload.num_prompts=8",
                "--json",
            ]);
            let own = serde_json::from_str::<Value>(&own).unwrap()["kv_cache_tokens"].as_u64().unwrap();
            assert_eq!(e["metrics"]["kv_cache_tokens"].as_u64(), Some(own), "max_num_seqs {seqs}");
            pools.push((seqs, own));
        }
        pools
    };
    let starved = "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json";
    let pools = check(starved, "16,64", "engine.num_gpu_blocks_override holds its block count in every configuration");
    assert!(pools.iter().all(|(_, kv)| *kv == 10240), "{pools:?}");
    let default = "scenarios/rtx5090-qwen2.5-7b-vllm.json";
    let pools = check(default, "64,128", "it moves by what the pool derived from memory moves");
    assert!(pools.iter().all(|(s, kv)| (s == "128") == (*kv == 194880)), "{pools:?}");
}

/// A burstiness with no finite rate to shape is said (vllm bench serve ignores it there too: its
/// gaps are drawn only for a finite rate), and the run is the one without it; with a rate it is
/// used and not said. (`--set` of a path twice is refused, naming both: it kept the last unsaid.)
#[test]
fn a_burstiness_without_a_rate_is_said_and_a_path_set_twice_is_refused() {
    let (c, out, err) = run(&["simulate", "--burstiness", "0.5", "--num-prompts", "4", "--json"]);
    assert_eq!(c, 0, "{err}");
    assert!(err.contains("workload.burstiness 0.5 has no effect: the request rate is infinite"), "{err}");
    let (_, plain, _) = run(&["simulate", "--num-prompts", "4", "--json"]);
    let strip = |s: &str| {
        let mut v: serde_json::Value = serde_json::from_str(s).unwrap();
        v.as_object_mut().unwrap().remove("burstiness");
        v
    };
    assert_eq!(strip(&out), strip(&plain), "the burstiness changed a run it has no effect on");
    let (c, _, err) = run(&["simulate", "--burstiness", "0.5", "--request-rate", "2", "--num-prompts", "4", "--json"]);
    assert_eq!(c, 0, "{err}");
    assert!(!err.contains("burstiness"), "{err}");
    // The live client says it of the workload its flags make: a scenario's burstiness with the
    // command line's rate is used, the flag without a rate is said.
    let burst = write_temp(
        "burst.json",
        r#"{"version": 1, "engine": {"kind": "vllm"}, "model": "llama-3.1-8b-instruct", "hardware": "h100-80gb",
            "workload": {"dataset_name": "random", "random_input_len": 64, "random_output_len": 8, "num_prompts": 4,
                         "burstiness": 0.5}}"#,
    );
    let dead = ["--base-url", "http://127.0.0.1:9", "--model", "x"];
    let (_, _, err) =
        run(&[&["bench", "--scenario", burst.to_str().unwrap(), "--request-rate", "2"][..], &dead].concat());
    assert!(!err.contains("has no effect"), "{err}");
    let (_, _, err) = run(&[&["bench", "--burstiness", "0.5"][..], &dead].concat());
    assert!(err.contains("workload.burstiness 0.5 has no effect"), "{err}");

    let (c, _, err) =
        run(&["simulate", "--set", "engine.max_num_seqs=8", "--set", "engine.max_num_seqs=16", "--num-prompts", "2"]);
    assert_eq!(c, 2, "{err}");
    assert!(
        err.contains(
            "engine.max_num_seqs: the path is given twice (engine.max_num_seqs=8, then engine.max_num_seqs=16)"
        ),
        "{err}"
    );
}

/// Some step coefficients without the rest, where measured kernels would time the steps, are
/// refused naming both lists (the docs audit: `{"step_us": 900}` on the default scenario ran the
/// linear roofline prior's other terms, a TPOT of 1.28 ms under the weights' read time); all six,
/// the two front-end terms alone, or a partial set over a scenario's full one still run.
#[test]
fn some_step_coefficients_do_not_silently_take_the_roofline_priors_others() {
    let (c, _, err) = run(&["simulate", "--set", r#"cost.coefficients={"step_us":900}"#, "--num-prompts", "2"]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("cost.coefficients: gives step_us but not per_seq_us, prefill_token_us"), "{err}");
    assert!(err.contains("cost.coefficients=null"), "{err}");
    let all = r#"cost.coefficients={"step_us":9000,"per_seq_us":4,"prefill_token_us":60,"decode_token_us":100,"prefill_attention_us":0.001,"decode_kv_us":0.5}"#;
    let (c, _, err) = run(&["simulate", "--set", all, "--num-prompts", "2"]);
    assert_eq!(c, 0, "{err}");
    let (c, _, err) = run(&[
        "simulate",
        "--set",
        r#"cost.coefficients={"request_ingress_us":0,"output_token_us":0}"#,
        "--num-prompts",
        "2",
    ]);
    assert_eq!(c, 0, "{err}");
    // A scenario that gives all of them, adjusted by one: still all six.
    let (c, _, err) = run(&[
        "simulate",
        "scenarios/serve-small-vllm.json",
        "--set",
        "cost.coefficients.step_us=900",
        "--num-prompts",
        "2",
    ]);
    assert_eq!(c, 0, "{err}");
    // A roofline prior given on purpose: the linear model is what was asked for.
    let (c, _, err) =
        run(&["simulate", "--set", "cost.prior={}", "--set", "cost.coefficients.step_us=900", "--num-prompts", "2"]);
    assert_eq!(c, 0, "{err}");
}

/// Engine flags that change nothing in the run are said, and the run is the one without them:
/// SGLang's `num_reserved_decode_tokens` outside a disaggregated decode server,
/// `load_balance_method` without data parallelism, the expert-parallel and MoE-kernel flags on a
/// dense model. Where they act (an SGLang decode replica, dp_size 2, a MoE card) nothing is said.
/// Until 2026-12-07 every one of them was taken silently.
#[test]
fn engine_flags_without_effect_are_said() {
    let sgl = "scenarios/rtx5090-qwen2.5-7b-sglang.json";
    let sim = |s: &str, sets: &[&str]| {
        let mut a = vec!["simulate", s, "--num-prompts", "4", "--json"];
        for x in sets {
            a.extend(["--set", x]);
        }
        let (c, out, err) = run(&a);
        assert_eq!(c, 0, "{err}");
        (out, err)
    };
    let strip = |s: &str| {
        let mut v: serde_json::Value = serde_json::from_str(s).unwrap();
        v.as_object_mut().unwrap().remove("engine");
        v
    };
    let (plain, err) = sim(sgl, &[]);
    assert!(!err.contains("has no effect"), "{err}");
    for (set, said) in [
        ("engine.num_reserved_decode_tokens=100", "engine.num_reserved_decode_tokens has no effect"),
        ("engine.load_balance_method=shortest_queue", "engine.load_balance_method has no effect"),
        ("engine.ep_size=2", "engine.ep_size has no effect: the model has no mixture-of-experts layers"),
        ("engine.moe_runner_backend=triton", "engine.moe_runner_backend has no effect"),
    ] {
        let (out, err) = sim(sgl, &[set]);
        assert!(err.contains(said), "{set}: {err}");
        assert_eq!(strip(&out), strip(&plain), "{set} changed a run it has no effect on");
    }
    let (_, err) = sim("scenarios/rtx5090-qwen2.5-7b-vllm.json", &["engine.enable_expert_parallel=true"]);
    assert!(err.contains("engine.enable_expert_parallel has no effect"), "{err}");
    // Where they act: not said.
    let (_, err) = sim(sgl, &["engine.dp_size=2", "engine.load_balance_method=shortest_queue"]);
    assert!(!err.contains("has no effect"), "{err}");
    let (_, err) = sim(sgl, &["model=qwen3-30b-a3b", "hardware=h100-80gb", "engine.moe_runner_backend=triton"]);
    assert!(!err.contains("has no effect"), "{err}");
    let pd = write_temp(
        "pd-reserve.json",
        r#"{"version": 1, "engine": {"kind": "sglang", "num_reserved_decode_tokens": 256},
            "model": "llama-3.1-8b-instruct", "hardware": "h100-80gb", "fleet": {"prefill_count": 1, "decode_count": 1},
            "workload": {"dataset_name": "random", "random_input_len": 256, "random_output_len": 8, "num_prompts": 4,
                         "ignore_eos": true}}"#,
    );
    let (_, err) = sim(&pd.display().to_string(), &[]);
    assert!(!err.contains("has no effect"), "{err}");
    // The engines' defaults change nothing wherever given: not said (a review, 2026-12-07).
    let (_, err) = sim(
        sgl,
        &[
            "engine.num_reserved_decode_tokens=512",
            "engine.load_balance_method=round_robin",
            "engine.moe_runner_backend=auto",
        ],
    );
    assert!(!err.contains("has no effect"), "{err}");
    // Given on a P/D fleet's prefill group only: no decode server reads it.
    let groups = write_temp(
        "pd-reserve-groups.json",
        r#"{"version": 1, "engine": {"kind": "sglang"}, "model": "llama-3.1-8b-instruct", "hardware": "h100-80gb",
            "fleet": {"replicas": [{"role": "prefill", "engine": {"num_reserved_decode_tokens": 200000}},
                                   {"role": "decode"}]},
            "workload": {"dataset_name": "random", "random_input_len": 256, "random_output_len": 8, "num_prompts": 4,
                         "ignore_eos": true}}"#,
    );
    let (_, err) = sim(&groups.display().to_string(), &[]);
    assert!(err.contains("fleet.replicas[0].engine.num_reserved_decode_tokens has no effect"), "{err}");
    // A fleet of mixed replicas: the router picks, and the flag is said.
    let (_, err) = sim(sgl, &["fleet={\"count\": 2}", "engine.load_balance_method=shortest_queue"]);
    assert!(err.contains("the fleet's router (fleet.router) picks"), "{err}");
}

/// SGLang before 0.5.8 defaults to fa3 on Hopper only for the architectures of its
/// `is_fa3_default_architecture` (Llama, Qwen2, Qwen3, ...): Mistral ran flashinfer there. Until
/// 2026-12-07 servesim gave every model fa3, and refused Mistral with an fp8_e5m2 KV cache under
/// 0.5.3 as "fp8_e5m2 with SGLang's fa3 attention (its default on Hopper)", which SGLang runs.
#[test]
fn sglang_defaults_to_fa3_on_hopper_only_for_its_listed_architectures_before_0_5_8() {
    let scenario = |model: &str, version: &str| {
        write_temp(
            &format!("attn-default-{model}-{version}.json"),
            &format!(
                r#"{{"version": 1, "engine": {{"kind": "sglang", "version": "{version}", "kv_cache_dtype": "fp8_e5m2"}},
                    "model": "{model}", "hardware": "h100-80gb",
                    "workload": {{"dataset_name": "random", "random_input_len": 256, "random_output_len": 8,
                                 "num_prompts": 4, "ignore_eos": true}}}}"#
            ),
        )
        .display()
        .to_string()
    };
    let (c, _, err) = run(&["simulate", &scenario("mistral-7b-instruct-v0.3", "0.5.3")]);
    assert_eq!(c, 0, "{err}");
    let (c, _, err) = run(&["simulate", &scenario("llama-3.1-8b-instruct", "0.5.3")]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("fp8_e5m2 with SGLang's fa3 attention"), "{err}");
    // From 0.5.8 Mistral gets fa3 too, and fp8_e5m2 falls back to triton (0.5.5 on).
    let (_, out, err) = run(&["explain", &scenario("mistral-7b-instruct-v0.3", "0.5.8")]);
    assert!(out.contains("triton"), "{out}{err}");
    let (_, out, err) = run(&["explain", &scenario("mistral-7b-instruct-v0.3", "0.5.3")]);
    assert!(out.contains("flashinfer") && !out.contains("fa3"), "{out}{err}");
}

/// A tune grid over fleet knobs counts its workloads (it reported "0 distinct workloads" after
/// running every configuration until 2026-12-07).
#[test]
fn a_tune_grid_of_fleets_counts_its_workloads() {
    let (c, out, err) = run(&[
        "tune",
        "scenarios/shared-prefix-llama3.1-8b-h100-vllm.json",
        "--vary",
        "fleet.count=1,2",
        "--set",
        "workload.num_prompts=40",
    ]);
    assert_eq!(c, 0, "{err}");
    assert!(out.contains("(2 simulated, 0 answered by an identical configuration; 1 distinct workloads;"), "{out}");
}

/// vLLM on the `cpu-host` card runs vLLM's CPU-platform defaults: the API server's 128
/// sequences and 2,048 tokens a rank, and KV blocks of 128 tokens (until 2026-12-07 the GPU
/// defaults: 256 sequences, blocks of 16); a block size given is kept.
#[test]
fn vllm_on_the_cpu_host_takes_the_cpu_platforms_defaults() {
    let s = write_temp(
        "cpu-host-defaults.json",
        r#"{"version": 1, "engine": {"kind": "vllm", "version": "0.32.0", "max_model_len": 2048},
            "model": "qwen2.5-3b-instruct", "hardware": "cpu-host",
            "workload": {"dataset_name": "random", "random_input_len": 64, "random_output_len": 4, "num_prompts": 2,
                         "ignore_eos": true}}"#,
    )
    .display()
    .to_string();
    let pin = ["--set", "engine.kv_cache_tokens=116480"];
    let (c, out, err) = run(&[&["explain", &s][..], &pin].concat());
    assert_eq!(c, 0, "{err}");
    assert!(out.contains("max_num_seqs = 128 ") && out.contains("blocks of 128"), "{out}");
    let (c, out, err) = run(&[&["explain", &s, "--set", "engine.block_size=32"][..], &pin].concat());
    assert_eq!(c, 0, "{err}");
    assert!(out.contains("blocks of 32") && !out.contains("blocks of 128"), "{out}");
}

/// The CPU backends on the `cpu-host` card size their KV pools from the host's state (vLLM:
/// `VLLM_CPU_KVCACHE_SPACE`, else 4 GiB in 0.11, half the host's memory in 0.14–0.19, the
/// memory fraction less the worker's resident memory from 0.20; SGLang: its fraction of the
/// memory free at start), not from a GPU's memory account: an unpinned pool is refused naming
/// the pin and, for vLLM, giving the 4 GiB pool (910 blocks of 128 for Qwen2.5-3B: 4 GiB over
/// 36 layers × 2 × 2 KV heads × 128 × 2 bytes × 128 tokens). Also refused there: TP 2 (one
/// NUMA node), an fp8 KV cache before vLLM 0.21. `explain` runs with no CUDA graphs and
/// advises neither TP nor fp8 KV where the backend cannot run it. Until 2026-12-07 the pool
/// was derived as on a 24 GiB GPU (CUDA graphs, a CUDA context) and TP 2 as two such GPUs.
#[test]
fn the_cpu_hosts_pools_are_pinned_not_derived_as_a_gpus() {
    let s = write_temp(
        "cpu-host-pools.json",
        r#"{"version": 1, "engine": {"kind": "vllm", "version": "0.11.0", "max_model_len": 2048},
            "model": "qwen2.5-3b-instruct", "hardware": "cpu-host",
            "workload": {"dataset_name": "random", "random_input_len": 1500, "random_output_len": 400, "num_prompts": 2,
                         "ignore_eos": true}}"#,
    )
    .display()
    .to_string();
    let (c, _, err) = run(&["simulate", &s]);
    assert_eq!(c, 2, "{err}");
    assert!(
        err.contains("engine.kv_cache_tokens: not given on the cpu-host card")
            && err.contains("a fixed 4 GiB")
            && err.contains("910 blocks of 128 tokens")
            && err.contains("engine.kv_cache_tokens=116480"),
        "{err}"
    );
    for (v, rule) in [("0.14.1", "half the host's memory"), ("0.32.0", "resident memory")] {
        let (c, _, err) = run(&["simulate", &s, "--set", &format!("engine.version={v}")]);
        assert!(c == 2 && err.contains(rule), "{v}: {err}");
    }
    let pin = "engine.kv_cache_tokens=116480";
    let (c, out, err) = run(&["explain", &s, "--set", pin]);
    assert_eq!(c, 0, "{err}");
    assert!(out.contains("CUDA graphs off"), "{out}");
    assert!(!out.contains("TP 2") && !out.contains("kv_cache_dtype=fp8"), "{out}");
    // It runs on the host's CPU: no "1 GPU", no nvidia-smi (until 2026-12-08 it said both).
    assert!(
        out.contains("tensor parallel 1 on the host's CPU (the engine's CPU backend)")
            && !out.contains("on 1 GPU")
            && !out.contains("nvidia-smi")
            && out.contains("measure them with perf"),
        "{out}"
    );
    // Its pin is the pool (no fraction moves it, null derives nothing), TP is no knob there,
    // and the KV bytes are the host's (the review of 2026-12-08).
    assert!(
        out.contains("kv_cache_tokens (pinned here: the cpu-host card derives no pool, the pin is the pool)")
            && !out.contains("gpu_memory_utilization given with --set")
            && !out.contains("tensor_parallel_size")
            && out.contains("KV bytes per token in the host's memory"),
        "{out}"
    );
    let (c, out, err) = run(&["explain", &s, "--set", pin, "--json"]);
    assert_eq!(c, 0, "{err}");
    assert!(out.contains("measure CPU utilisation with perf") && !out.contains("nvidia-smi"), "{out}");
    let (c, _, err) = run(&["simulate", &s, "--set", pin, "--set", "engine.tensor_parallel_size=2"]);
    assert!(c == 2 && err.contains("engine.tensor_parallel_size: 2 on the cpu-host card"), "{err}");
    let (c, _, err) = run(&["simulate", &s, "--set", pin, "--set", "engine.kv_cache_dtype=fp8"]);
    assert!(c == 2 && err.contains("engine.kv_cache_dtype: an fp8 KV cache on vLLM 0.11.0's CPU backend"), "{err}");
    let (c, _, err) =
        run(&["simulate", &s, "--set", pin, "--set", "engine.kv_cache_dtype=fp8", "--set", "engine.version=0.21.0"]);
    assert_eq!(c, 0, "from 0.21 the CPU attention runs fp8: {err}");
    // SGLang: its fraction of the host's free memory at start.
    let sgl = ["--set", "engine={\"kind\": \"sglang\", \"version\": \"0.5.6\", \"context_length\": 2048}"];
    let (c, _, err) = run(&[&["simulate", &s][..], &sgl].concat());
    assert!(
        c == 2
            && err.contains("engine.max_total_num_tokens: not given on the cpu-host card")
            && err.contains("free memory"),
        "{err}"
    );
    let (c, _, err) = run(&[&["simulate", &s][..], &sgl, &["--set", "engine.max_total_tokens=65536"]].concat());
    assert_eq!(c, 0, "the test bed's bound binds: {err}");
    let (c, out, err) = run(&[&["explain", &s][..], &sgl, &["--set", "engine.max_total_num_tokens=65536"]].concat());
    assert_eq!(c, 0, "{err}");
    assert!(!out.contains("TP 2") && !out.contains("kv_cache_dtype=fp8"), "{out}");
    // SGLang's CPU attention backends run there (the test bed's torch_native was refused), a
    // GPU kernel does not (fa3 was accepted).
    let pinned = [&["simulate", &s][..], &sgl, &["--set", "engine.max_total_num_tokens=65536"]].concat();
    for b in ["torch_native", "intel_amx"] {
        let set = format!("engine.attention_backend={b}");
        let (c, _, err) = run(&[&pinned[..], &["--set", &set]].concat());
        assert_eq!(c, 0, "{b}: {err}");
    }
    let (c, _, err) = run(&[&pinned[..], &["--set", "engine.attention_backend=fa3"]].concat());
    assert!(c == 2 && err.contains("\"fa3\" on the cpu-host card") && err.contains("torch_native"), "{err}");
    // CPU_ATTN's kernel block sizes: multiples of 16 from 0.21, of 32 from 0.29 (a block of 16
    // or 48 was accepted there, citing GPU kernels; vLLM refuses to start).
    for (v, b, ok) in
        [("0.28.0", 16, true), ("0.28.0", 48, true), ("0.29.0", 16, false), ("0.32.0", 48, false), ("0.32.0", 64, true)]
    {
        let (c, _, err) = run(&[
            "simulate",
            &s,
            "--set",
            pin,
            "--set",
            &format!("engine.version={v}"),
            "--set",
            &format!("engine.block_size={b}"),
        ]);
        if ok {
            assert_eq!(c, 0, "{v} block {b}: {err}");
        } else {
            assert!(
                c == 2
                    && err.contains("CPU attention (CPU_ATTN) pages the KV cache by multiples of 32")
                    && !err.contains("FlashAttention"),
                "{v} block {b}: {err}"
            );
        }
    }
    // vLLM's CPU platform turns async scheduling off whatever the flag from 0.14.
    let (c, _, err) =
        run(&["simulate", &s, "--set", pin, "--set", "engine.version=0.14.1", "--set", "engine.async_scheduling=true"]);
    assert!(c == 2 && err.contains("engine.async_scheduling: true on the cpu-host card"), "{err}");
    // An engine out of compute there: more engines or a faster host, not more GPUs or TP.
    let (c, out, err) = run(&[
        "explain",
        "--set",
        "hardware=cpu-host",
        "--set",
        "model=qwen2.5-3b-instruct",
        "--set",
        "engine.kv_cache_tokens=500000",
    ]);
    assert_eq!(c, 0, "{err}");
    assert!(out.contains("more engines (more replicas) or a faster host do") && !out.contains("GPUs do"), "{out}");
}

/// `explain`'s advice names each engine's own fp8 KV cache value: SGLang's `fp8_e4m3`, which
/// its run takes, not vLLM's `fp8`, which SGLang refuses (until 2026-12-07 the advice named a
/// value its own run refused).
#[test]
fn explains_fp8_kv_advice_names_the_engines_own_value() {
    let (c, out, err) = run(&["explain", "scenarios/rtx5090-qwen2.5-7b-sglang.json"]);
    assert_eq!(c, 0, "{err}");
    assert!(out.contains("--set engine.kv_cache_dtype=fp8_e4m3") && !out.contains("kv_cache_dtype=fp8:"), "{out}");
    let (c, _, err) =
        run(&["simulate", "scenarios/rtx5090-qwen2.5-7b-sglang.json", "--set", "engine.kv_cache_dtype=fp8_e4m3"]);
    assert_eq!(c, 0, "the advised value runs: {err}");
}

/// SGLang's chunk tier reads the device memory its other tiers read (nvidia-smi's MiB figure):
/// a card of 59 GiB CUDA total and 61,500 MiB in nvidia-smi is past the 60 GB tier (8,192
/// tokens under 0.5.10); until 2026-12-07 the chunk tier read the CUDA total (4,096) while the
/// cuda-graph tier read nvidia-smi's.
#[test]
fn sglangs_chunk_tier_reads_nvidia_smis_memory_figure() {
    let mut card: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string("models/gpu/h100-80gb.json").unwrap()).unwrap();
    card["id"] = "odd-gpu".into();
    card["memory_bytes"] = (59u64 << 30).into();
    card["nvidia_smi_memory_mib"] = 61500.into();
    let s = write_temp(
        "odd-gpu.json",
        &format!(
            r#"{{"version": 1, "engine": {{"kind": "sglang", "version": "0.5.10"}}, "model": "llama-3.1-8b-instruct",
                "hardware": {card}, "workload": {{"dataset_name": "random", "random_input_len": 64,
                "random_output_len": 4, "num_prompts": 2, "ignore_eos": true}}}}"#
        ),
    );
    let (c, out, err) = run(&["explain", &s.display().to_string()]);
    assert_eq!(c, 0, "{err}");
    assert!(out.contains("chunked_prefill_size = 8,192 tokens"), "{out}");
}

/// Linked knobs varied together are tried together: a GPU count of 2 with a TP size of 2
/// resolves only as a pair, and tune refused it, advising to set the TP size the other --vary
/// set (an audit, 2026-12-07). An unknown path is still an error.
#[test]
fn tune_tries_linked_knobs_first_values_together() {
    let s = "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json";
    let (c, out, err) = run(&[
        "tune",
        s,
        "--vary",
        r#"hardware={"gpu":"a100-80gb","count":2}"#,
        "--vary",
        "engine.tensor_parallel_size=2",
        "--slo",
        "p99_ttft_ms<=100000",
        "--set",
        "workload.num_prompts=20",
    ]);
    assert_eq!(c, 0, "{err}");
    assert!(out.contains("(1 simulated"), "{out}");
    let (c, _, err) = run(&["tune", s, "--vary", "engine.no_such_field=1,2", "--slo", "p99_ttft_ms<=100000"]);
    assert_eq!(c, 2);
    assert!(err.contains("--vary engine.no_such_field"), "{err}");
}
