//! Memory accounting, tensor parallelism and dtypes, through `resolve` as a
//! user's scenario would go.

use serde_json::{json, Value};
use sim::config::{self, EngineSpec, MemoryAccount, SimSpec};

fn scenario(engine: Value, model: &str, gpu: &str, count: u32) -> Value {
    json!({
        "version": 1,
        "engine": engine,
        "model": model,
        "hardware": {"gpu": gpu, "count": count},
        "workload": {"dataset_name": "random", "random_input_len": 512, "random_output_len": 64,
                     "num_prompts": 4, "ignore_eos": true}
    })
}

fn resolve(v: Value) -> Result<SimSpec, config::ConfigError> {
    let s = config::from_value(v, "")?;
    config::resolve(&s, &sim::builtin::resources().unwrap())
}

/// `base`'s engine fields with `extra`'s set over them.
fn with(mut base: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().expect("an object") {
        base[k] = v.clone();
    }
    base
}

fn pool(spec: &SimSpec) -> u64 {
    match &spec.engine {
        EngineSpec::Vllm(c) => u64::from(c.num_gpu_blocks) * u64::from(c.block_size),
        EngineSpec::Sglang(c) => c.max_total_tokens,
    }
}

#[test]
fn qwen3_32b_on_h100_at_tp_1_2_4_8_has_per_gpu_accounts_that_add_up() {
    for kind in ["vllm", "sglang"] {
        let mut last_pool = 0;
        for tp in [1u32, 2, 4, 8] {
            let tp_key = if kind == "vllm" { "tensor_parallel_size" } else { "tp_size" };
            // vLLM 0.33 at TP 1 has no room for one 40,960-token request once its V2 runner's
            // CUDA-graph estimate (from 0.29) and its sampler's fp32 warmup pass (from 0.33) are
            // charged, nor for a 32k one (31,904 tokens): a 24k context.
            let spec = resolve(scenario(
                json!({"kind": kind, tp_key: tp, "max_model_len": 24576, "context_length": 24576})
                    .as_object()
                    .unwrap()
                    .iter()
                    .filter(|(k, _)| kind == "vllm" || *k != "max_model_len")
                    .filter(|(k, _)| kind == "sglang" || *k != "context_length")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                "qwen3-32b",
                "h100-80gb",
                tp,
            ))
            .unwrap_or_else(|e| panic!("{kind} tp {tp}: {e}"));
            assert_eq!(spec.deployment.tensor_parallel_size, tp);
            let a = spec.kv_sizing.memory.as_ref().unwrap();
            // Everything the fraction hands the engine is accounted for, on one GPU.
            assert_eq!(
                a.requested,
                a.weights + a.activation_peak + a.non_torch + a.cuda_graphs + a.sampler_state + a.context + a.kv,
                "{kind} tp {tp}: {a:?}"
            );
            assert_eq!(a.requested + a.reserve, a.total);
            // Weights are sharded: about a TP-th of the bf16 checkpoint each.
            let full = 32_762_123_264u64 * 2;
            assert!(a.weights.abs_diff(full / u64::from(tp)) <= u64::from(tp), "{kind} tp {tp}: {}", a.weights);
            // The pool in tokens is what the KV bytes hold at this GPU's share of the KV heads.
            let cell = spec.kv_sizing.kv_bytes_per_token;
            assert_eq!(cell, 2 * 64 * u64::from(8 / tp) * 128 * 2);
            assert!(pool(&spec) * cell <= a.kv && a.kv - pool(&spec) * cell < cell * 16, "{kind} tp {tp}");
            // More GPUs: more memory left for KV, and fewer KV heads per GPU.
            assert!(pool(&spec) > last_pool, "{kind} tp {tp}: {} after {last_pool}", pool(&spec));
            last_pool = pool(&spec);
        }
    }
}

#[test]
fn an_fp8_kv_cache_doubles_the_pool() {
    for (kind, frac) in [("vllm", "gpu_memory_utilization"), ("sglang", "mem_fraction_static")] {
        let base =
            resolve(scenario(json!({"kind": kind, frac: 0.9}), "llama-3.1-8b-instruct", "h100-80gb", 1)).unwrap();
        let name = if kind == "vllm" { "fp8" } else { "fp8_e4m3" };
        let fp8 = resolve(scenario(
            json!({"kind": kind, frac: 0.9, "kv_cache_dtype": name}),
            "llama-3.1-8b-instruct",
            "h100-80gb",
            1,
        ))
        .unwrap();
        assert_eq!(fp8.deployment.kv_dtype_bytes, 1);
        let (b, f) = (pool(&base), pool(&fp8));
        // Twice the tokens in the same bytes, up to a block's rounding.
        assert!(f.abs_diff(2 * b) <= 32, "{kind}: {b} → {f}");
    }
}

#[test]
fn fp8_weights_leave_more_room_for_kv() {
    // bf16 70B at TP 2 on vLLM 0.33 leaves a 4,704-token pool (the V2 runner's 0.52 GiB of
    // sampler state at 1,024 sequences included; 4,048 with the V2 non-torch constant's former
    // 514 MiB): a 2k context.
    let bf16 = resolve(scenario(
        json!({"kind": "vllm", "tensor_parallel_size": 2, "max_model_len": 2048}),
        "llama-3.3-70b-instruct",
        "h100-80gb",
        2,
    ))
    .unwrap();
    let fp8 = resolve(scenario(
        json!({"kind": "vllm", "tensor_parallel_size": 2, "max_model_len": 4096}),
        "llama-3.3-70b-instruct-fp8",
        "h100-80gb",
        2,
    ))
    .unwrap();
    let online = resolve(scenario(
        json!({"kind": "vllm", "tensor_parallel_size": 2, "quantization": "fp8", "max_model_len": 4096}),
        "llama-3.3-70b-instruct",
        "h100-80gb",
        2,
    ))
    .unwrap();
    let (wb, wf) = (bf16.kv_sizing.memory.as_ref().unwrap().weights, fp8.kv_sizing.memory.as_ref().unwrap().weights);
    assert!(wf < wb * 55 / 100 && wf > wb * 45 / 100, "{wb} {wf}");
    assert_eq!(online.kv_sizing.memory.as_ref().unwrap().weights, wf);
    assert_eq!(pool(&bf16), 4_704);
    assert!(pool(&fp8) > 4 * pool(&bf16));
}

fn graphs(spec: &SimSpec) -> u64 {
    spec.kv_sizing.memory.as_ref().unwrap().cuda_graphs
}

#[test]
fn the_cuda_graph_estimate_is_charged_from_vllm_0_20_on_v1_and_from_0_29_on_v2() {
    let vllm = |extra: Value, model: &str| {
        // At its 131,072 positions Llama-3.1-8B's one request would not fit an RTX 5090's pool.
        let mut e = json!({"kind": "vllm", "max_model_len": 8192});
        e.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        resolve(scenario(e, model, "rtx-5090", 1)).unwrap()
    };
    // 0.20–0.24 run Qwen2 on the V1 runner: its estimate is subtracted, and eager mode has none.
    for v in ["0.20.0", "0.21.0", "0.24.0"] {
        let with = vllm(json!({"version": v}), "qwen2.5-7b-instruct");
        let eager = vllm(json!({"version": v, "enforce_eager": true}), "qwen2.5-7b-instruct");
        assert!(graphs(&with) > 0, "{v}");
        assert_eq!(graphs(&eager), 0, "{v}");
        assert!(pool(&eager) > pool(&with), "{v}");
    }
    // Before 0.20 the estimate is off by default (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`
    // "0" in 0.19.0, "1" from 0.20.0): the graphs come out of the headroom.
    assert_eq!(graphs(&vllm(json!({"version": "0.19.0"}), "qwen2.5-7b-instruct")), 0);
    // The V2 runner's estimate is 0: Llama from 0.23 (unquantized; quantized from 0.24),
    // every dense model from 0.25.
    assert_eq!(graphs(&vllm(json!({"version": "0.23.0"}), "llama-3.1-8b-instruct")), 0);
    assert!(graphs(&vllm(json!({"version": "0.23.0", "quantization": "fp8"}), "llama-3.1-8b-instruct")) > 0);
    assert_eq!(graphs(&vllm(json!({"version": "0.24.0", "quantization": "fp8"}), "llama-3.1-8b-instruct")), 0);
    assert_eq!(graphs(&vllm(json!({"version": "0.25.0"}), "qwen2.5-7b-instruct")), 0);
    assert_eq!(graphs(&vllm(json!({"version": "0.28.0"}), "qwen2.5-7b-instruct")), 0);
    // From 0.29 the V2 runner measures and subtracts its own (`cudagraph_utils.profile_cudagraph_memory`;
    // servesim charged none through 0.33, the KV pool 1.9% high on a 0.31.0 A100 log): the V1 figure.
    for v in ["0.29.0", "0.33.0"] {
        let with = vllm(json!({"version": v}), "qwen2.5-7b-instruct");
        let eager = vllm(json!({"version": v, "enforce_eager": true}), "qwen2.5-7b-instruct");
        assert!(graphs(&with) > 0, "{v}");
        assert_eq!(graphs(&eager), 0, "{v}");
        assert!(pool(&eager) > pool(&with), "{v}");
    }
}

#[test]
fn vllm_releases_resolve_the_model_runner_and_the_accounting_read_in_their_source() {
    let res = sim::builtin::resources().unwrap();
    let card = |id: &str| res.models.iter().find(|m| m.id == id).unwrap().clone();
    let b = |v: &str, id: &str, q: bool| {
        config::VllmMemoryBehaviour::of_release(sim::engine::Version::parse(v).unwrap(), &card(id), q, true)
    };
    // `DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES` in config/vllm.py, per release.
    assert!(!b("0.21.0", "qwen3-8b", false).model_runner_v2);
    assert!(b("0.22.0", "qwen3-8b", false).model_runner_v2);
    assert!(!b("0.22.0", "llama-3.1-8b-instruct", false).model_runner_v2);
    assert!(!b("0.22.0", "qwen3-8b", true).model_runner_v2);
    assert!(b("0.23.0", "llama-3.1-8b-instruct", false).model_runner_v2);
    assert!(!b("0.24.0", "qwen2.5-7b-instruct", false).model_runner_v2);
    assert!(b("0.24.0", "llama-3.1-8b-instruct", true).model_runner_v2);
    assert!(b("0.25.0", "qwen2.5-7b-instruct", true).model_runner_v2);
    // The estimate goes with the V1 runner; 0.27 measures consumed memory by free memory.
    assert!(b("0.24.0", "qwen2.5-7b-instruct", false).cudagraph_estimate);
    assert!(!b("0.26.0", "qwen2.5-7b-instruct", false).consumed_from_free_memory);
    assert!(b("0.27.0", "qwen2.5-7b-instruct", false).consumed_from_free_memory);
    // 0.27's free-memory accounting charges the V2 runner's persistent sampler state
    // (allocated after the start-up snapshot, before profiling: ≤ 0.26 charges none of it),
    // nothing else measurable on a Linux host, and a share of the weights on a Windows/WSL2
    // (WDDM) one.
    let acct = |v: &str, hw: Value| {
        let mut sc = scenario(json!({"kind": "vllm", "version": v}), "qwen2.5-7b-instruct", "rtx-5090", 1);
        sc["hardware"] = hw;
        resolve(sc).unwrap().kv_sizing.memory.unwrap()
    };
    let linux = json!("rtx-5090");
    let (a26, a27) = (acct("0.26.0", linux.clone()), acct("0.27.0", linux));
    assert_eq!(a26.sampler_state, 0);
    // 256 sequences (a 32 GB card's default) × (152,064 int32 counts + two 4,752-word masks).
    assert_eq!(a27.sampler_state, 256 * (152_064 * 4 + 2 * 4_752 * 4));
    assert_eq!(a27.kv + a27.sampler_state, a26.kv);
    assert_eq!(MemoryAccount { kv: a26.kv, sampler_state: 0, ..a27.clone() }, a26);
    let mut wsl2 = serde_json::to_value(res.gpus.iter().find(|g| g.id == "rtx-5090").unwrap()).unwrap();
    wsl2["memory_bytes"] = json!(32_607u64 << 20);
    let (w26, w27) = (acct("0.26.0", wsl2.clone()), acct("0.27.0", wsl2));
    assert_eq!(w26.non_torch, a26.non_torch);
    assert_eq!(w27.sampler_state, a27.sampler_state);
    let extra = (config::VLLM_WDDM_CONSUMED_PER_WEIGHT_BYTE * w27.weights as f64) as u64;
    assert!(w27.non_torch.abs_diff(w26.non_torch + extra) <= 1, "{w26:?} {w27:?}");
    assert_eq!(a26.cuda_graphs + a27.cuda_graphs, 0);
}

#[test]
fn vllm_v2_profiling_peak_counts_the_sampler_tensors_each_release_allocates() {
    let res = sim::builtin::resources().unwrap();
    let model = |id: &str| res.models.iter().find(|m| m.id == id).unwrap().clone();
    let gpu = |id: &str| res.gpus.iter().find(|g| g.id == id).unwrap().clone();
    let v = |s: &str| sim::engine::Version::parse(s).unwrap();
    let (llama8, llama70) = (model("llama-3.1-8b-instruct"), model("llama-3.1-70b-instruct"));
    let h100 = gpu("h100-80gb");
    // Llama-3.1-8B (hidden 4,096, MLP 14,336, vocabulary 128,256, bf16) on an H100 at vLLM 0.33's
    // H100 defaults (8,192 batched tokens, 1,024 sequences). The forward: 8,192 × (2 × 4,096 +
    // 3 × 14,336) × 2 = 838,860,800 bytes. The sampler's peak, in 0.33's second
    // `_dummy_sampler_run` pass (`SamplingParams.for_sampler_warmup()`): the forward's hidden
    // states 8,192 × 4,096 × 2 = 67,108,864, the 1,024 rows sampled from them 1,024 × 4,096 × 2 =
    // 8,388,608, and per logit (1,024 × 128,256 of them) the bf16 logits (2), their fp32 copy (4)
    // and FlashInfer's top-k-masked logits and softmax (4 + 4): 1,838,678,016. In all
    // 1,914,175,488 bytes (1,825.5 MiB), above the forward.
    // The profiled tensors (`vllm_v2_activation_peak_tensors`); the cold-compile transient of
    // the embedding table's size is checked at the end.
    let peak = |version: &str, g: &sim::cards::GpuCard| {
        config::vllm_v2_activation_peak_tensors(&llama8, g, v(version), 1, 8192, 1024)
    };
    assert_eq!(peak("0.33.0", &h100), 67_108_864 + 8_388_608 + 1024 * 128_256 * 14);
    assert_eq!(peak("0.33.0", &h100), 1_914_175_488);
    assert_eq!(peak("0.34.0", &h100), 1_914_175_488);
    // 0.22–0.25: one pass, its logits copied to fp32 all the same (2 + 4 bytes a logit):
    // 67,108,864 + 8,388,608 + 788,004,864 = 863,502,336, just above the forward.
    assert_eq!(peak("0.25.0", &h100), 863_502_336);
    // 0.26–0.32: the bf16 logits alone, 338,165,760 bytes: the forward binds.
    assert_eq!(peak("0.31.0", &h100), 838_860_800);
    // Off FlashInfer's range (compute capability below 8.0) the Triton top-k/top-p masks the
    // fp32 copy in place (6 bytes a logit); the CPU backend skips the second pass (2).
    let mut sm75 = h100.clone();
    sm75.compute_capability = Some("7.5".into());
    assert_eq!(peak("0.33.0", &sm75), 863_502_336);
    assert_eq!(peak("0.33.0", &gpu("cpu-host")), 838_860_800);
    // TP 4, Llama-3.1-70B (hidden 8,192, MLP 28,672 / 4, the same vocabulary): in 0.26–0.32 the
    // all-gather of the logits binds, its 1,024 × 128,256 × 2 buffer and the copy `reshape`
    // makes (525,336,576 both), beside the local shard (1,024 × 32,064 × 2 = 65,667,072), with
    // the hidden states (134,217,728) and the sampled rows (16,777,216): 741,998,592 bytes,
    // above the forward's 8,192 × (2 × 8,192 + 3 × 7,168) × 2 = 620,756,992.
    assert_eq!(config::vllm_v2_activation_peak_tensors(&llama70, &h100, v("0.31.0"), 4, 8192, 1024), 741_998_592);
    // The peak servesim charges adds the transient a cold torch.compile leaves in the profiling
    // run, the size of one GPU's embedding table (`vllm_compile_embedding_transient`: 128,256 ×
    // 4,096 × 2 = 1,050,673,152 bytes for Llama-3.1-8B), where it is larger: in 0.31 it binds
    // over the forward's 838,860,800; at TP 4 the 70B's shard (128,256 / 4 × 8,192 × 2 =
    // 525,336,576) does not.
    assert_eq!(config::vllm_compile_embedding_transient(&llama8, 1), 1_050_673_152);
    assert_eq!(config::vllm_v2_activation_peak(&llama8, &h100, v("0.31.0"), 1, 8192, 1024), 1_050_673_152);
    assert_eq!(config::vllm_v2_activation_peak(&llama8, &h100, v("0.33.0"), 1, 8192, 1024), 1_914_175_488);
    assert_eq!(config::vllm_compile_embedding_transient(&llama70, 4), 525_336_576);
    assert_eq!(config::vllm_v2_activation_peak(&llama70, &h100, v("0.31.0"), 4, 8192, 1024), 741_998_592);
    // The account charges it: a default Llama-3.1-8B scenario on an H100 at 0.33.0.
    let spec = resolve(scenario(json!({"kind": "vllm", "version": "0.33.0"}), "llama-3.1-8b-instruct", "h100-80gb", 1))
        .unwrap();
    assert_eq!(spec.kv_sizing.memory.unwrap().activation_peak, 1_914_175_488);
}

#[test]
fn sglang_0_5_default_fraction_follows_its_reserve_formula() {
    // RTX 5090 (nvidia-smi 32,607 MiB), chunk 4096, decode graphs to 48, and from 0.5.10 the
    // prefill graphs' 50 token sizes up to 4096 at 8 MiB: reserve 512 + 6144 + 128 + 96 + 400 =
    // 7280 MiB → 0.777.
    let s = resolve(scenario(json!({"kind": "sglang", "version": "0.5.23"}), "qwen2.5-7b-instruct", "rtx-5090", 1))
        .unwrap();
    let a = s.kv_sizing.memory.as_ref().unwrap();
    let mfs = a.requested as f64 / a.total as f64;
    assert!((mfs - 0.777).abs() < 0.001, "{mfs}");
    // 80 GB cards hit the 10 GiB floor... or the formula, whichever is larger: 512 + 12288 + 128 +
    // 512 + 464 MiB (58 prefill-graph sizes up to 8192).
    let h = resolve(scenario(json!({"kind": "sglang", "version": "0.5.23"}), "llama-3.1-8b-instruct", "h100-80gb", 1))
        .unwrap();
    let a = h.kv_sizing.memory.as_ref().unwrap();
    let mfs = a.requested as f64 / a.total as f64;
    let want = ((81559.0 - 13904.0) / 81559.0 * 1000.0_f64).round() / 1000.0;
    assert!((mfs - want).abs() < 0.001, "{mfs} vs {want}");
}

#[test]
fn bad_parallelism_and_dtypes_are_errors_naming_the_field_and_the_numbers() {
    let e =
        resolve(scenario(json!({"kind": "vllm", "tensor_parallel_size": 3}), "qwen3-32b", "h100-80gb", 3)).unwrap_err();
    assert_eq!(e.path, "engine.tensor_parallel_size");
    assert!(e.message.contains("64 attention heads"), "{e}");
    let e = resolve(scenario(json!({"kind": "sglang", "pp_size": 2}), "qwen3-32b", "h100-80gb", 1)).unwrap_err();
    assert_eq!(e.path, "engine.pp_size");
    let e =
        resolve(scenario(json!({"kind": "vllm", "kv_cache_dtype": "int4"}), "qwen3-32b", "h100-80gb", 1)).unwrap_err();
    assert_eq!(e.path, "engine.kv_cache_dtype");
    let e = resolve(scenario(
        json!({"kind": "vllm", "tensor_parallel_size": 2, "max_model_len": 8192}),
        "qwen3-32b",
        "h100-80gb",
        4,
    ))
    .unwrap_err();
    assert_eq!(e.path, "hardware.count");
    // 70B in bf16 does not fit one 80 GB GPU: an error with the numbers, never a zero pool.
    let e = resolve(scenario(json!({"kind": "vllm"}), "llama-3.1-70b-instruct", "h100-80gb", 1)).unwrap_err();
    assert_eq!(e.path, "engine.gpu_memory_utilization");
    assert!(e.message.contains("131.") && e.message.contains("GiB"), "{e}");
    let e = resolve(scenario(json!({"kind": "sglang"}), "llama-3.1-70b-instruct", "h100-80gb", 1)).unwrap_err();
    assert_eq!(e.path, "engine.mem_fraction_static");
    let e = resolve(scenario(json!({"kind": "vllm", "quantization": "awq"}), "qwen3-32b", "h100-80gb", 1)).unwrap_err();
    assert_eq!(e.path, "engine.quantization");
}

/// The default scenario's published log (RTX 5090 under Windows + WSL2, vLLM
/// 0.28.0, 0.85: `GPU KV cache size: 194,896 tokens`), derived without its
/// logged pool: the shipped scenario says `hardware.host: wsl2`, so the
/// device total is the `nvidia-smi` total as WSL2 shows it; within 2%. On a
/// Linux host the same card is another device total, without the WSL2 term.
#[test]
fn the_default_scenarios_pool_derived_on_its_wsl2_host_is_within_2_percent_of_its_log() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/rtx5090-qwen2.5-7b-vllm.json");
    let mut sc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(sc["hardware"], json!({"gpu": "rtx-5090", "host": "wsl2"}));
    sc["engine"].as_object_mut().unwrap().remove("kv_cache_tokens");
    let spec = resolve(sc.clone()).unwrap();
    assert!(config::wddm_host(&spec.gpu));
    // The log prints num_blocks × block_size.
    let logged = 194_896.0;
    let err = (pool(&spec) as f64 - logged) / logged;
    assert!(err.abs() <= 0.02, "{} tokens: {:+.2}%", pool(&spec), err * 100.0);
    // The same setup on a Linux host: CUDA's total, no WSL2 term.
    sc["hardware"] = json!({"gpu": "rtx-5090", "host": "linux"});
    let linux = resolve(sc.clone()).unwrap();
    assert!(!config::wddm_host(&linux.gpu));
    assert!(pool(&linux) > pool(&spec));
    // A host servesim does not know, and a card without an nvidia-smi total under WSL2: errors.
    sc["hardware"] = json!({"gpu": "rtx-5090", "host": "windows"});
    assert_eq!(resolve(sc.clone()).unwrap_err().path, "hardware.host");
    let res = sim::builtin::resources().unwrap();
    let mut card = serde_json::to_value(res.gpus.iter().find(|g| g.id == "rtx-5090").unwrap()).unwrap();
    card.as_object_mut().unwrap().remove("nvidia_smi_memory_mib");
    sc["hardware"] = json!({"gpu": card, "host": "wsl2"});
    let e = resolve(sc).unwrap_err();
    assert_eq!(e.path, "hardware.host");
    assert!(e.message.contains("nvidia_smi_memory_mib"), "{}", e.message);
}

/// fp8 weights on a GPU without FP8 tensor cores (the A100, compute capability 8.0) as the
/// engines' wheels handle them: a ModelOpt checkpoint is refused by both engines; vLLM's `fp8`
/// method and compressed-tensors FP8 run weight-only (FP8 Marlin), and so does SGLang from
/// 0.5.1; SGLang's `fp8` method before 0.5.1 is not modelled. Cards with FP8 tensor cores are
/// untouched.
#[test]
fn fp8_weights_below_compute_capability_8_9_follow_the_engines() {
    let tp4 = |kind: &str, version: &str| {
        if kind == "vllm" {
            json!({"kind": kind, "version": version, "tensor_parallel_size": 4})
        } else {
            json!({"kind": kind, "version": version, "tp_size": 4})
        }
    };
    // vLLM runs it weight-only from 0.27.0 (its ModelOpt config's minimum capability 89 → 80).
    let s = resolve(scenario(tp4("vllm", "0.28.0"), "llama-3.1-70b-instruct-fp8", "a100-80gb", 4)).unwrap();
    assert!(s.cost.source().contains("weight-only"), "{}", s.cost.source());
    for (kind, version) in [("vllm", "0.11.0"), ("vllm", "0.26.0"), ("sglang", "0.5.6")] {
        let e = resolve(scenario(tp4(kind, version), "llama-3.1-70b-instruct-fp8", "a100-80gb", 4)).unwrap_err();
        assert_eq!(e.path, "model.quantization_method", "{kind}");
        assert!(e.message.contains("ModelOpt") && e.message.contains("8.0"), "{e}");
        // The same checkpoint where the GPU has FP8 tensor cores.
        resolve(scenario(tp4(kind, version), "llama-3.1-70b-instruct-fp8", "h100-80gb", 4)).unwrap();
        // compressed-tensors FP8 on the A100: weight-only.
        resolve(scenario(tp4(kind, version), "llama-3.3-70b-instruct-fp8", "a100-80gb", 4)).unwrap();
    }
    // `--quantization fp8` on a bf16 checkpoint: vLLM's fp8 method (Marlin below 8.9).
    let mut v = tp4("vllm", "0.11.0");
    v["quantization"] = json!("fp8");
    resolve(scenario(v, "llama-3.1-70b-instruct", "a100-80gb", 4)).unwrap();
    let mut v = tp4("sglang", "0.5.1");
    v["quantization"] = json!("fp8");
    resolve(scenario(v.clone(), "llama-3.1-70b-instruct", "a100-80gb", 4)).unwrap();
    v["version"] = json!("0.4.10");
    let e = resolve(scenario(v.clone(), "llama-3.1-70b-instruct", "a100-80gb", 4)).unwrap_err();
    assert_eq!(e.path, "engine.version");
    assert!(e.message.contains("0.5.1") && e.message.contains("SGLANG_FORCE_FP8_MARLIN"), "{e}");
    resolve(scenario(v, "llama-3.1-70b-instruct", "h100-80gb", 4)).unwrap();
    // A method servesim does not know is an error naming the card field.
    let mut card: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../models/model/llama-3.1-70b-instruct-fp8.json"
        ))
        .unwrap(),
    )
    .unwrap();
    card["quantization_method"] = json!("gptq");
    let mut s = scenario(tp4("vllm", "0.28.0"), "llama-3.1-70b-instruct-fp8", "h100-80gb", 4);
    s["model"] = card;
    let e = resolve(s).unwrap_err();
    assert_eq!(e.path, "model.quantization_method");
}

/// vLLM's attention backend with an fp8 KV cache: FlashAttention reads one only on Hopper
/// (FlashAttention 3), so elsewhere 0.11.0 defaults to Triton and 0.12 on to FlashInfer, the
/// cost source names the backend the tables do not hold and the KV dtype they did not measure,
/// and FLASH_ATTN asked for off Hopper is refused.
#[test]
fn fp8_kv_cache_off_hopper_takes_vllm_s_other_attention_backends() {
    let one = |version: &str, gpu: &str, extra: Value| {
        let mut e = json!({"kind": "vllm", "version": version, "kv_cache_dtype": "fp8"});
        for (k, v) in extra.as_object().unwrap() {
            e[k] = v.clone();
        }
        resolve(scenario(e, "llama-3.1-8b-instruct", gpu, 1))
    };
    let src = |s: SimSpec| s.cost.source();
    let a100_011 = src(one("0.11.0", "a100-80gb", json!({})).unwrap());
    assert!(a100_011.contains("no measured triton attention"), "{a100_011}");
    assert!(a100_011.contains("no measured attention over an fp8 KV cache"), "{a100_011}");
    let a100_014 = src(one("0.14.0", "a100-80gb", json!({})).unwrap());
    assert!(a100_014.contains("no measured flashinfer attention"), "{a100_014}");
    // L40S: the tables measured FlashInfer over an fp8 KV cache (what 0.12 on runs); 0.11 ran Triton.
    let l40s_014 = src(one("0.14.0", "l40s", json!({})).unwrap());
    assert!(!l40s_014.contains("no measured"), "{l40s_014}");
    assert!(src(one("0.11.0", "l40s", json!({})).unwrap()).contains("no measured triton attention"));
    // Hopper keeps FlashAttention 3, whose tables have the fp8 KV cache.
    assert!(!src(one("0.11.0", "h100-80gb", json!({})).unwrap()).contains("no measured"));
    let e = one("0.14.0", "a100-80gb", json!({"attention_backend": "FLASH_ATTN"})).unwrap_err();
    assert_eq!(e.path, "engine.attention_backend");
    assert!(e.message.contains("FlashAttention 3"), "{e}");
    one("0.14.0", "h100-80gb", json!({"attention_backend": "FLASH_ATTN"})).unwrap();
    // From 0.27.0 FlashAttention 4 reads an fp8 cache on the SM100 family too.
    assert!(one("0.24.0", "b200", json!({"attention_backend": "FLASH_ATTN"})).is_err());
    one("0.28.0", "b200", json!({"attention_backend": "FLASH_ATTN"})).unwrap();
    // FlashAttention 3 reads e4m3 only: fp8_e5m2 on Hopper fails unless another backend is asked for.
    for version in ["0.11.0", "0.14.0"] {
        let e = one(version, "h100-80gb", json!({"kv_cache_dtype": "fp8_e5m2"})).unwrap_err();
        assert_eq!(e.path, "engine.kv_cache_dtype");
        assert!(e.message.contains("Unrecognized FP8 dtype"), "{e}");
    }
    one("0.14.0", "h100-80gb", json!({"kv_cache_dtype": "fp8_e5m2", "attention_backend": "FLASHINFER"})).unwrap();
    // From 0.22.0 FlashAttention declines e5m2 and the selector takes FlashInfer, which the H100
    // tables did not measure; asking for FLASH_ATTN stays an error.
    let s = src(one("0.24.0", "h100-80gb", json!({"kv_cache_dtype": "fp8_e5m2"})).unwrap());
    assert!(s.contains("no measured flashinfer attention"), "{s}");
    let e = one("0.24.0", "h100-80gb", json!({"kv_cache_dtype": "fp8_e5m2", "attention_backend": "FLASH_ATTN"}))
        .unwrap_err();
    assert_eq!(e.path, "engine.kv_cache_dtype");
    one("0.14.0", "a100-80gb", json!({"kv_cache_dtype": "fp8_e5m2"})).unwrap();
}

/// vLLM refuses a bfloat16 model below compute capability 8.0 (a V100 given inline): an error
/// naming the field, as vLLM's own start-up error; a float16 card runs. SGLang refuses any model
/// below SM75 and runs one in float16 from SM75.
#[test]
fn gpus_below_what_the_engines_run_on_are_refused() {
    let v100 = json!({"id": "v100-32gb", "memory_bytes": 34089730048u64, "memory_bandwidth_bytes_per_s": 9e11,
                      "dense_bf16_flops": 1.25e14, "compute_capability": "7.0"});
    let mut v = scenario(json!({"kind": "vllm", "max_model_len": 8192}), "llama-3.1-8b-instruct", "h100-80gb", 1);
    v["hardware"]["gpu"] = v100;
    let e = resolve(v.clone()).unwrap_err();
    assert_eq!(e.path, "model.dtype");
    assert!(e.message.contains("compute capability 7.0") && e.message.contains("float16"), "{e}");
    let mut card: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../models/model/llama-3.1-8b-instruct.json"))
            .unwrap(),
    )
    .unwrap();
    card["dtype"] = json!("float16");
    v["model"] = card;
    // FlashAttention needs 8.0: 0.11.0 runs FlexAttention there, 0.12 on Triton below 7.5; no
    // table measured either, and the cost source says so.
    let s = resolve(v.clone()).unwrap().cost.source();
    assert!(s.contains("no measured triton attention"), "{s}");
    let mut old = v.clone();
    old["engine"]["version"] = json!("0.11.0");
    let s = resolve(old).unwrap().cost.source();
    assert!(s.contains("no measured flex attention"), "{s}");
    // SGLang stops below SM75 ("SGLang only supports sm75 and above.") and runs float16 above it.
    v["engine"] = json!({"kind": "sglang", "context_length": 8192});
    let e = resolve(v.clone()).unwrap_err();
    assert_eq!(e.path, "hardware.compute_capability");
    assert!(e.message.contains("sm75"), "{e}");
    v["hardware"]["gpu"]["compute_capability"] = json!("7.5");
    resolve(v).unwrap();
}

/// SGLang's fa3 (its Hopper default) reads fp8 KV as e4m3 only: from 0.5.5 an fp8_e5m2 cache
/// moves it to triton (which no table measured: the cost source says so), before that it is not
/// modelled; e4m3 stays on fa3, whose tables hold fp8-KV attention.
#[test]
fn sglang_fa3_with_an_fp8_e5m2_cache_falls_back_to_triton_from_0_5_5() {
    let one = |version: &str, kv: &str| {
        resolve(scenario(
            json!({"kind": "sglang", "version": version, "kv_cache_dtype": kv}),
            "llama-3.1-8b-instruct",
            "h100-80gb",
            1,
        ))
    };
    let s = one("0.5.6", "fp8_e5m2").unwrap().cost.source();
    assert!(s.contains("no measured triton attention"), "{s}");
    let s = one("0.5.6", "fp8_e4m3").unwrap().cost.source();
    assert!(!s.contains("no measured"), "{s}");
    let e = one("0.5.4", "fp8_e5m2").unwrap_err();
    assert_eq!(e.path, "engine.kv_cache_dtype");
    assert!(e.message.contains("0.5.5"), "{e}");
}

/// `kv_cache_dtype` takes what each engine's `--kv-cache-dtype` takes: vLLM's bfloat16 runs under
/// 0.11.0's selector, is not modelled in 0.11.1–0.14.x (no dense backend takes it) and runs again
/// from 0.15.0; float16 is vLLM's from 0.18.0 and never SGLang's; SGLang's bf16 / bfloat16 from
/// 0.5.4.
#[test]
fn kv_cache_dtype_values_are_the_engines_choices() {
    let one = |kind: &str, version: &str, kv: &str| {
        resolve(scenario(
            json!({"kind": kind, "version": version, "kv_cache_dtype": kv}),
            "llama-3.1-8b-instruct",
            "h100-80gb",
            1,
        ))
    };
    for (kind, version) in [("vllm", "0.14.0"), ("sglang", "0.5.6")] {
        let e = one(kind, version, "float16").unwrap_err();
        assert_eq!(e.path, "engine.kv_cache_dtype", "{kind}");
        assert!(e.message.contains("choices"), "{e}");
        for kv in ["auto", "fp8_e4m3"] {
            one(kind, version, kv).unwrap();
        }
    }
    one("vllm", "0.11.0", "bfloat16").unwrap();
    for version in ["0.11.2", "0.14.0"] {
        let e = one("vllm", version, "bfloat16").unwrap_err();
        assert!(e.message.contains("not modelled"), "{e}");
    }
    one("vllm", "0.15.0", "bfloat16").unwrap();
    let e = one("vllm", "0.17.0", "float16").unwrap_err();
    assert!(e.message.contains("float16 from 0.18.0"), "{e}");
    for kv in ["bfloat16", "float16"] {
        one("vllm", "0.28.0", kv).unwrap();
    }
    assert!(one("vllm", "0.14.0", "bf16").is_err());
    one("sglang", "0.5.4", "bf16").unwrap();
    let e = one("sglang", "0.5.6", "fp8").unwrap_err();
    assert!(e.message.contains("fp8_e4m3"), "{e}");
    let e = one("sglang", "0.5.3", "bfloat16").unwrap_err();
    assert!(e.message.contains("from 0.5.4"), "{e}");
}

/// SGLang's `--max-total-tokens` bounds the pool it profiles from the memory fraction
/// (`min(profiled, max_total_tokens)`, page-aligned; a larger value is logged and ignored),
/// read in the 0.4.10, 0.5.10, 0.5.21 and 0.5.23 wheels; servesim took it as the pool, so
/// 480,000 gave an H100 holding Llama-3.1-8B 18% more KV than SGLang profiles (2.45× with a
/// fraction of 0.5). The start-up log's pool pins it as `max_total_num_tokens`.
#[test]
fn sglang_max_total_tokens_bounds_the_profiled_pool_and_max_total_num_tokens_pins_it() {
    let sg = |extra: Value| {
        let base = json!({"kind": "sglang", "version": "0.5.10", "page_size": 16});
        resolve(scenario(with(base, extra), "llama-3.1-8b-instruct", "h100-80gb", 1))
    };
    let derived = sg(json!({})).unwrap();
    let profiled = pool(&derived);
    assert!(profiled > 300_000 && profiled < 480_000, "{profiled}");
    // Above the profiled pool: SGLang uses the profiled value, and the report says so.
    let above = sg(json!({"max_total_tokens": 480_000})).unwrap();
    assert_eq!(pool(&above), profiled);
    assert_eq!(above.kv_sizing.source, "mem_fraction_static");
    let note = above.kv_sizing.bound_note(pool(&above)).expect("a note");
    assert!(note.contains("larger than the profiled value") && note.contains("480000"), "{note}");
    // With a smaller fraction the bound is further above: the fraction's pool.
    let half = sg(json!({"max_total_tokens": 480_000, "mem_fraction_static": 0.5})).unwrap();
    let half_alone = sg(json!({"mem_fraction_static": 0.5})).unwrap();
    assert_eq!(pool(&half), pool(&half_alone));
    assert!(pool(&half) < 250_000, "{}", pool(&half));
    // Below it: the bound, page-aligned, with the memory account kept.
    let below = sg(json!({"max_total_tokens": 48_007})).unwrap();
    assert_eq!(pool(&below), 48_000);
    assert_eq!(below.kv_sizing.source, "max_total_tokens");
    assert!(below.kv_sizing.memory.is_some() && below.kv_sizing.bound_note(48_000).is_none());
    // The log's pool pins it, above what servesim's estimate profiles too.
    let pinned = sg(json!({"max_total_num_tokens": profiled + 16_000})).unwrap();
    assert_eq!(pool(&pinned), profiled + 16_000);
    assert_eq!(pinned.kv_sizing.source, "max_total_num_tokens");
    // Both: the logged pool holds the bound; one above it cannot have been logged.
    let e = sg(json!({"max_total_num_tokens": 100_000, "max_total_tokens": 50_000})).unwrap_err();
    assert!(e.to_string().contains("engine.max_total_num_tokens") && e.to_string().contains("above"), "{e}");
    assert_eq!(pool(&sg(json!({"max_total_num_tokens": 48_000, "max_total_tokens": 50_000})).unwrap()), 48_000);
}

/// Through 0.5.9 SGLang estimates its request pool from the pool as profiled, before
/// `--max-total-tokens` bounds it (`init_memory_pool` sets `max_num_reqs`, then applies the
/// bound; read in the 0.4.10, 0.5.3 and 0.5.6–0.5.9 wheels), and from 0.5.10 from the bounded
/// pool (`_resolve_max_num_reqs` after `_resolve_token_capacity`): a 20,000-token bound at a
/// 4,096 context runs min(10,000, 4,096) requests on 0.5.6 and min(10,000, 2,500) on 0.5.10
/// (servesim gave 2,500 to both until the defaults audit of 2026-12-06).
#[test]
fn sglang_s_request_pool_is_estimated_before_the_token_bound_through_0_5_9() {
    let running = |version: &str, extra: Value| {
        let base = json!({"kind": "sglang", "version": version, "context_length": 4096});
        match resolve(scenario(with(base, extra), "llama-3.1-8b-instruct", "h100-80gb", 1)).unwrap().engine {
            EngineSpec::Sglang(c) => (c.max_total_tokens, c.max_running_requests),
            _ => unreachable!(),
        }
    };
    for version in ["0.4.10", "0.5.6"] {
        assert_eq!(running(version, json!({"max_total_tokens": 20_000})), (20_000, 4096), "{version}");
    }
    for version in ["0.5.10", "0.5.23"] {
        assert_eq!(running(version, json!({"max_total_tokens": 20_000})), (20_000, 2500), "{version}");
    }
    // Without a bound the two rules agree: a pool of 8 × 4,096 or more gives 4,096.
    assert_eq!(running("0.5.6", json!({})).1, 4096);
    assert_eq!(running("0.5.10", json!({})).1, 4096);
}

/// SGLang charges the CUDA context at `mem_fraction_static` in 0.4.10 as in 0.5.x: its
/// `init_torch_distributed` measures the free memory once the context and NCCL exist, and that
/// is the "memory before" of `profile_max_num_token` (read in the 0.4.10 wheel; servesim charged
/// 0.4.x the context in full until 2026-12-06).
#[test]
fn sglang_0_4_10_charges_the_cuda_context_at_the_fraction() {
    let account = |version: &str| {
        let base = json!({"kind": "sglang", "version": version, "mem_fraction_static": 0.8});
        let spec = resolve(scenario(base, "llama-3.1-8b-instruct", "h100-80gb", 1)).unwrap();
        spec.kv_sizing.memory.expect("a derived pool's account")
    };
    let (old, new) = (account("0.4.10"), account("0.5.6"));
    assert_eq!(old.context, new.context);
    assert_eq!(old.kv, new.kv);
    let full = (sim::config::memory_constants::SGLANG_CONTEXT_MIB * (1u64 << 20) as f64) as u64;
    assert_eq!(old.context, (full as f64 * 0.8) as u64);
}

/// Start-up rules of recent vLLM releases, read in the 0.20–0.33 wheels (the vLLM memory and
/// source reads of 2026-12-05; the caps' releases in the 0.11.0–0.19.0 wheels, 2026-12-06): the
/// defaults follow each other, a pinned pool is checked
/// against max_model_len from 0.21 (the null block left out from 0.29), a fraction that leaves
/// no room for what a GPU already uses is refused, and blocks are multiples of 16 for the dense
/// kernels (any size from 0.18).
#[test]
fn vllm_start_up_rules_of_recent_releases() {
    let v = |extra: Value| {
        let base = json!({"kind": "vllm", "version": "0.33.0", "max_model_len": 8192});
        resolve(scenario(with(base, extra), "llama-3.1-8b-instruct", "h100-80gb", 1))
    };
    let cfg = |s: &SimSpec| match &s.engine {
        EngineSpec::Vllm(c) => (c.max_num_seqs, c.max_num_batched_tokens),
        _ => unreachable!(),
    };
    // A budget of 512 given: the defaulted max_num_seqs follows it, in every modelled release
    // (0.11.0's `_set_default_args` already: min(default, budget)); both given, refused.
    for version in ["0.33.0", "0.19.0", "0.11.1", "0.11.0"] {
        let got = cfg(&v(json!({"max_num_batched_tokens": 512, "version": version})).unwrap());
        assert_eq!(got, (512, 512), "{version}");
    }
    assert!(v(json!({"max_num_batched_tokens": 512, "max_num_seqs": 1024})).is_err());
    // The defaulted budget is capped at max_num_seqs × max_model_len from 0.11.1 (0.11.0 keeps
    // its 8,192).
    for version in ["0.33.0", "0.14.0", "0.11.1"] {
        let got = cfg(&v(json!({"max_num_seqs": 1, "max_model_len": 4096, "version": version})).unwrap());
        assert_eq!(got, (1, 4096), "{version}");
    }
    assert_eq!(cfg(&v(json!({"max_num_seqs": 1, "max_model_len": 4096, "version": "0.11.0"})).unwrap()), (1, 8192));
    // A pinned pool that cannot hold one max_model_len request: refused from 0.21.
    let small = json!({"num_gpu_blocks_override": 100, "max_model_len": 1600});
    assert!(v(small.clone()).unwrap_err().to_string().contains("engine.max_model_len"));
    assert!(v(json!({"num_gpu_blocks_override": 100, "max_model_len": 1600, "version": "0.20.0"})).is_ok());
    // 100 blocks hold 1,600 tokens with the null block (0.28), 1,584 without it (0.29 on).
    let exact = |version: &str| v(json!({"num_gpu_blocks_override": 100, "max_model_len": 1600, "version": version}));
    assert!(exact("0.28.0").is_ok());
    assert!(exact("0.29.0").is_err());
    // A logged pool is the pool of an engine that started: checked with a block's slack (its
    // figure can be a block short of what vLLM's check saw); one that cannot hold a
    // max_model_len request by more is another setup's (a pool `--set` moved there, since
    // 2026-12-07).
    assert!(v(json!({"kv_cache_tokens": 1600, "max_model_len": 1600})).is_ok());
    let e = v(json!({"kv_cache_tokens": 1600, "max_model_len": 1632})).unwrap_err();
    assert!(e.path == "engine.max_model_len" && e.message.contains("refuses to start"), "{e}");
    // All the memory asked for: refused; 0.99 of an 80 GB card runs.
    assert!(v(json!({"gpu_memory_utilization": 1.0})).unwrap_err().to_string().contains("Free memory on device"));
    assert!(v(json!({"gpu_memory_utilization": 0.99})).is_ok());
    // Blocks: 8 finds no dense kernel (FlexAttention takes it); 48 from 0.18, not before.
    assert!(v(json!({"block_size": 8})).is_err());
    assert!(v(json!({"block_size": 8, "attention_backend": "FLEX_ATTENTION"})).is_ok());
    assert!(v(json!({"block_size": 48})).is_ok());
    assert!(v(json!({"block_size": 48, "version": "0.17.0"})).is_err());
    // Online fp8 of a bf16 70B on one H100: before 0.16 the bf16 weights (131 GiB) load first.
    let fp8 = |version: &str| {
        resolve(scenario(
            json!({"kind": "vllm", "version": version, "quantization": "fp8", "max_model_len": 2048}),
            "llama-3.1-70b-instruct",
            "h100-80gb",
            1,
        ))
    };
    assert!(fp8("0.15.0").unwrap_err().to_string().contains("unquantized first"));
    assert!(fp8("0.16.0").is_ok());
}

fn vllm_blocks(spec: &SimSpec) -> (u32, u32) {
    match &spec.engine {
        EngineSpec::Vllm(c) => (c.num_gpu_blocks, c.block_size),
        _ => unreachable!(),
    }
}

/// vLLM 0.34 sizes a derived pool after warmup and CUDA-graph capture from the memory then free
/// (the extensible KV cache: 0.34.0 `v1/worker/extensible_kv_cache.py:measure_kv_cache_bytes`,
/// :592), with `gpu_memory_utilization` unset read as 1.0 (`config/cache.py:495`). Llama-3.1-8B
/// bf16 on one H100 (85,045,477,376 bytes), the defaults (1,024 sequences, 8,192 tokens), worked
/// by hand from servesim's terms:
///
/// * weights 8,030,261,248 × 2 = 16,060,522,496; V2 non-torch 411 MiB = 430,964,736; CUDA graphs
///   0.45 MiB × 32 layers × 51 sizes (1, 2, 4, 8…248, 256…512) = 770,074,214;
/// * the profiling run's peak: its sampler's second pass (`vllm_v2_sampler_bytes_per_logit`),
///   8,192 × 4,096 × 2 + 1,024 × 4,096 × 2 + 1,024 × 128,256 × 14 = 1,914,175,488, above the
///   forward's 8,192 × (2 × 4,096 + 3 × 14,336) × 2 = 838,860,800; the sizing step's logits
///   phase, 8,192 × 4,096 × 2 + 1,024 × 128,256 × 2 = 329,777,152, is smaller: T =
///   1,914,175,488 (the embedding table's cold-compile transient, 1,050,673,152, is smaller);
/// * 0.33: 0.92 × total = 78,241,839,185, less the five terms (the sampler state's 558,170,112
///   too): KV 58,507,932,139 bytes, 27,898 blocks of 16 tokens (2,097,152 bytes);
/// * 0.34: the margin max(1 GiB, 0.75 × T) = 1,435,631,616; in use at the start-up snapshot 481
///   MiB = 504,365,056; total − both = 83,105,480,704, less the five terms: KV 63,371,573,658
///   bytes, 7,554 blocks of 64 tokens (8,388,608 bytes).
///
/// Qwen2.5-7B on an A100 80GB (2,048 tokens) at 64 sequences: the profiling run's peak is the
/// embedding table's cold-compile transient, 152,064 × 3,584 × 2 = 1,089,994,752, above its
/// forward, 2,048 × (2 × 3,584 + 3 × 18,944) × 2 = 262,144,000, its sampler (2,048 × 3,584 × 2 +
/// 64 × 3,584 × 2 + 64 × 152,064 × 14 = 151,388,160; 561,512,448 at the A100's default 256
/// sequences) and the sizing step's logits phase, 2,048 × 3,584 × 2 + 1,024 × 152,064 × 2 =
/// 326,107,136; it is the transient kept free, and its margin, 0.75 × T, is still below 1 GiB.
#[test]
fn vllm_0_34_sizes_the_pool_after_warmup_from_the_memory_then_free() {
    let v = |model: &str, gpu: &str, extra: Value| {
        resolve(scenario(with(json!({"kind": "vllm"}), extra), model, gpu, 1)).unwrap()
    };
    let llama = |extra: Value| v("llama-3.1-8b-instruct", "h100-80gb", extra);
    let (s33, s34) = (llama(json!({"version": "0.33.0"})), llama(json!({"version": "0.34.0"})));
    let (a33, a34) = (s33.kv_sizing.memory.clone().unwrap(), s34.kv_sizing.memory.clone().unwrap());
    for a in [&a33, &a34] {
        assert_eq!(a.weights, 16_060_522_496);
        assert_eq!(a.non_torch, 430_964_736);
        assert_eq!(a.cuda_graphs, 770_074_214);
        assert_eq!(a.activation_peak, 1_914_175_488);
        // The V2 runner's sampler state: 1,024 sequences × (128,256 int32 counts + two
        // 4,008-word masks).
        assert_eq!(a.sampler_state, 1_024 * (128_256 * 4 + 2 * 4_008 * 4));
        assert_eq!(a.sampler_state, 558_170_112);
        // Everything the request hands the engine is accounted for.
        assert_eq!(
            a.requested,
            a.weights + a.activation_peak + a.non_torch + a.cuda_graphs + a.sampler_state + a.context + a.margin + a.kv
        );
        assert_eq!(a.requested + a.reserve, a.total);
    }
    assert_eq!((a33.requested, a33.kv, a33.context, a33.margin), (78_241_839_185, 58_507_932_139, 0, 0));
    assert_eq!(vllm_blocks(&s33), (27_898, 16));
    assert_eq!((a34.requested, a34.reserve), (85_045_477_376, 0));
    assert_eq!((a34.context, a34.margin, a34.kv), (504_365_056, 1_435_631_616, 63_371_573_658));
    assert_eq!(vllm_blocks(&s34), (7_554, 64));
    assert!(a34.derivation.contains("not checked against a 0.34 start-up log"), "{}", a34.derivation);

    // At 2,048 tokens the cold-compile transient binds over the sizing step's prompt logprobs.
    let qwen = |version: &str| v("qwen2.5-7b-instruct", "a100-80gb", json!({"version": version, "max_num_seqs": 64}));
    let (q33, q34) = (qwen("0.33.0"), qwen("0.34.0"));
    assert_eq!(q33.kv_sizing.memory.as_ref().unwrap().activation_peak, 1_089_994_752);
    let q256 = v("qwen2.5-7b-instruct", "a100-80gb", json!({"version": "0.34.0"}));
    assert_eq!(q256.kv_sizing.memory.as_ref().unwrap().activation_peak, 1_089_994_752);
    let q = q34.kv_sizing.memory.clone().unwrap();
    assert_eq!(q.activation_peak, 1_089_994_752);
    assert_eq!(q.margin, 1 << 30, "0.75 × 1.02 GiB is below the 1 GiB floor");
    assert!(pool(&q34) > pool(&q33));

    // Eager: no graphs, and the sizing still runs.
    let eager = llama(json!({"version": "0.34.0", "enforce_eager": true}));
    let e = eager.kv_sizing.memory.unwrap();
    assert_eq!(e.cuda_graphs, 0);
    assert_eq!(e.kv, a34.kv + a34.cuda_graphs);
}

/// An explicit `gpu_memory_utilization` under 0.34 caps the pool at u × total − non-KV use (the
/// `min(requested − non_kv_used, …)` of `measure_kv_cache_bytes`); where the device's headroom
/// less the margin is the smaller, that binds. 1.0 is accepted: `request_memory` skips its
/// free-memory refusal with the extensible KV cache (0.34.0 `v1/worker/utils.py:783`).
#[test]
fn vllm_0_34_an_explicit_utilization_caps_the_pool() {
    let llama = |extra: Value| {
        resolve(scenario(
            with(json!({"kind": "vllm", "version": "0.34.0"}), extra),
            "llama-3.1-8b-instruct",
            "h100-80gb",
            1,
        ))
    };
    let acct = |extra: Value| llama(extra).unwrap().kv_sizing.memory.unwrap();
    let default = acct(json!({}));
    // 0.92 × total less the same non-KV terms as 0.33 (the peak is the profiling run's here):
    // 0.33's bytes, in blocks of 64.
    let capped = acct(json!({"gpu_memory_utilization": 0.92}));
    assert_eq!((capped.requested, capped.kv, capped.context, capped.margin), (78_241_839_185, 58_507_932_139, 0, 0));
    assert_eq!(vllm_blocks(&llama(json!({"gpu_memory_utilization": 0.92})).unwrap()), (6_974, 64));
    // 0.99 × total (84.2 GB) is above the headroom cap (83.1 GB): the default's pool.
    assert_eq!(acct(json!({"gpu_memory_utilization": 0.99})).kv, default.kv);
    assert_eq!(acct(json!({"gpu_memory_utilization": 1.0})).kv, default.kv);
    // 0.33 refuses 1.0 (less than 400 MiB left), 0.34 runs it.
    let e = llama(json!({"gpu_memory_utilization": 1.0, "version": "0.33.0"})).unwrap_err().to_string();
    assert!(e.contains("Free memory on device"), "{e}");
    // Still a fraction in (0, 1].
    assert!(llama(json!({"gpu_memory_utilization": 1.1})).is_err());
}

/// 0.34's default block is 64 tokens (`CacheConfig.DEFAULT_BLOCK_SIZE`, 0.34.0 `config/cache.py:185`;
/// 16 through 0.33), which every dense backend servesim models accepts; a block given is kept. A
/// pinned pool takes the old path (the extensible KV cache is off with `num_gpu_blocks_override`,
/// `config/vllm.py:_resolve_extensible_kv_cache`): no memory account, the blocks as given.
#[test]
fn vllm_0_34_defaults_to_64_token_blocks_and_keeps_pinned_pools() {
    let v = |extra: Value| {
        resolve(scenario(
            with(json!({"kind": "vllm", "max_model_len": 8192}), extra),
            "llama-3.1-8b-instruct",
            "h100-80gb",
            1,
        ))
        .unwrap()
    };
    assert_eq!(vllm_blocks(&v(json!({"version": "0.33.0"}))).1, 16);
    assert_eq!(vllm_blocks(&v(json!({"version": "0.34.0"}))).1, 64);
    for backend in ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"] {
        assert_eq!(vllm_blocks(&v(json!({"version": "0.34.0", "attention_backend": backend}))).1, 64, "{backend}");
    }
    assert_eq!(vllm_blocks(&v(json!({"version": "0.34.0", "block_size": 16}))).1, 16);
    for version in ["0.33.0", "0.34.0"] {
        let s = v(json!({"version": version, "num_gpu_blocks_override": 1000, "block_size": 16}));
        assert!(s.kv_sizing.memory.is_none());
        assert_eq!(vllm_blocks(&s), (1000, 16), "{version}");
        let t = v(json!({"version": version, "kv_cache_tokens": 400_000, "block_size": 16}));
        assert!(t.kv_sizing.memory.is_none());
        assert_eq!(pool(&t), 400_000, "{version}");
    }
    // In 64-token blocks the override counts 64-token blocks.
    assert_eq!(pool(&v(json!({"version": "0.34.0", "num_gpu_blocks_override": 1000}))), 64_000);
}

/// 0.34 captures separate prefill and decode CUDA-graph grids on the SM100 family (0.34.0
/// `config/vllm.py:2604`), which servesim's step cost does not model: a B200 at 0.34 is refused,
/// naming why; 0.33 runs.
#[test]
fn vllm_0_34_on_b200_is_refused() {
    let b200 = |version: &str| {
        resolve(scenario(
            json!({"kind": "vllm", "version": version, "max_model_len": 8192}),
            "llama-3.1-8b-instruct",
            "b200",
            1,
        ))
    };
    assert!(b200("0.33.0").is_ok());
    let e = b200("0.34.0").unwrap_err();
    assert_eq!(e.path, "engine.version");
    assert!(e.message.contains("SM100") && e.message.contains("prefill"), "{e}");
}

/// From 0.33 the V2 runner's profiled sampler peak depends on the GPU's compute capability
/// (FlashInfer's sampler on 8.0–12.1: `config::vllm_v2_sampler_bytes_per_logit`): a card without
/// one cannot size a derived pool and says so, naming the field; a pinned pool, an earlier
/// release or a card that gives it runs.
#[test]
fn a_card_without_a_compute_capability_cannot_size_a_vllm_0_33_pool() {
    let res = sim::builtin::resources().unwrap();
    let mut card = serde_json::to_value(res.gpus.iter().find(|g| g.id == "h100-80gb").unwrap()).unwrap();
    card.as_object_mut().unwrap().remove("compute_capability");
    card["id"] = json!("my-h100");
    let run = |engine: Value, card: &Value| {
        let mut sc = scenario(engine, "llama-3.1-8b-instruct", "h100-80gb", 1);
        sc["hardware"] = json!({"gpu": card, "count": 1});
        resolve(sc)
    };
    let e = run(json!({"kind": "vllm", "version": "0.33.0"}), &card).unwrap_err();
    assert_eq!(e.path, "hardware.compute_capability");
    assert!(e.message.contains("my-h100") && e.message.contains("kv_cache_tokens"), "{}", e.message);
    // 1,024 rows × 128,256 entries × the 8 bytes between the two samplers.
    assert!(e.message.contains("0.98 GiB apart at max_num_seqs 1024"), "{}", e.message);
    run(json!({"kind": "vllm", "version": "0.33.0", "kv_cache_tokens": 100_000, "max_model_len": 65536}), &card)
        .unwrap();
    // At 8 sequences the forward's peak (8,192 tokens) dominates both samplers: one answer, so it
    // runs, and it is the shipped card's.
    let few = json!({"kind": "vllm", "version": "0.33.0", "max_num_seqs": 8});
    let shipped_few = resolve(scenario(few.clone(), "llama-3.1-8b-instruct", "h100-80gb", 1)).unwrap();
    assert_eq!(pool(&run(few, &card).unwrap()), pool(&shipped_few));
    run(json!({"kind": "vllm", "version": "0.32.0"}), &card).unwrap();
    card["compute_capability"] = json!("9.0");
    let given = run(json!({"kind": "vllm", "version": "0.33.0"}), &card).unwrap();
    let shipped =
        resolve(scenario(json!({"kind": "vllm", "version": "0.33.0"}), "llama-3.1-8b-instruct", "h100-80gb", 1))
            .unwrap();
    assert_eq!(pool(&given), pool(&shipped));
}

/// The Qwen3-8B card under a fine-tune's name (`acme/chat-8b`), as a user writes it inline.
fn renamed_qwen3_8b(architecture: Option<&str>) -> Value {
    let text = sim::builtin::MODELS.iter().find(|(id, _)| *id == "qwen3-8b").unwrap().1;
    let mut card: Value = serde_json::from_str(text).unwrap();
    card["id"] = json!("acme-chat-8b");
    card["hf_repo"] = json!("acme/chat-8b");
    match architecture {
        Some(a) => card["architecture"] = json!(a),
        None => {
            card.as_object_mut().unwrap().remove("architecture");
        }
    }
    card
}

#[test]
fn a_cards_architecture_decides_what_its_name_cannot() {
    let res = sim::builtin::resources().unwrap();
    let card = |v: Value| -> sim::cards::ModelCard { serde_json::from_value(v).unwrap() };
    let v2 = |c: &sim::cards::ModelCard, v: &str| {
        config::VllmMemoryBehaviour::of_release(sim::engine::Version::parse(v).unwrap(), c, false, true).model_runner_v2
    };
    // By name alone a Qwen3 fine-tune is another dense model: vLLM 0.22 keeps the V1 runner and
    // SGLang's layer has no q/k norm. Its architecture says what it is.
    let unnamed = card(renamed_qwen3_8b(None));
    let named = card(renamed_qwen3_8b(Some("Qwen3ForCausalLM")));
    let builtin = res.models.iter().find(|m| m.id == "qwen3-8b").unwrap();
    assert!(!v2(&unnamed, "0.22.0"));
    assert!(v2(&named, "0.22.0") && v2(builtin, "0.22.0"));
    assert_eq!(config::sglang_layer_small_kernels(&unnamed), (4.0, 1.0));
    assert_eq!(config::sglang_layer_small_kernels(&named), config::sglang_layer_small_kernels(builtin));
    assert_eq!(config::sglang_layer_small_kernels(&named), (5.0, 1.0));
    // Through a scenario, the named card derives the built-in card's pool at 0.22 (same weights,
    // same runner), the unnamed one another (the V1 runner's accounting).
    let run = |model: Value| resolve(with_model(model)).unwrap();
    assert_eq!(pool(&run(renamed_qwen3_8b(Some("Qwen3ForCausalLM")))), pool(&run(json!("qwen3-8b"))));
    assert_ne!(pool(&run(renamed_qwen3_8b(None))), pool(&run(json!("qwen3-8b"))));
    // Another causal-LM architecture runs by the rules for other dense models.
    let phi = card(renamed_qwen3_8b(Some("Phi3ForCausalLM")));
    assert!(!v2(&phi, "0.24.0") && v2(&phi, "0.25.0"));
    assert!(resolve(with_model(renamed_qwen3_8b(Some("Phi3ForCausalLM")))).is_ok());
    // What cannot be a card's architecture is refused, naming the field.
    for (a, says) in [
        ("Qwen3ForCausalLm", "did you mean \"Qwen3ForCausalLM\""),
        ("LlavaForConditionalGeneration", "causal-LM architecture"),
        ("ForCausalLM", "causal-LM architecture"),
        ("MixtralForCausalLM", "needs its `moe` object"),
        ("Qwen3MoeForCausalLM", "needs its `moe` object"),
    ] {
        let e = resolve(with_model(renamed_qwen3_8b(Some(a)))).unwrap_err();
        assert_eq!(e.path, "model.architecture", "{a}: {e}");
        assert!(e.message.contains(says), "{a}: {e}");
    }
    // A mixture-of-experts card must name the MoE architecture, the one modelled.
    let moe = |a: &str| {
        let text = sim::builtin::MODELS.iter().find(|(id, _)| *id == "qwen3-30b-a3b").unwrap().1;
        let mut c: Value = serde_json::from_str(text).unwrap();
        c["architecture"] = json!(a);
        resolve(json!({"version": 1, "engine": {"kind": "vllm", "version": "0.17.0"}, "model": c,
            "hardware": "h200", "workload": {"dataset_name": "random", "random_input_len": 512,
            "random_output_len": 64, "num_prompts": 4, "ignore_eos": true}}))
    };
    assert!(moe("Qwen3MoeForCausalLM").is_ok());
    for (a, says) in [("Qwen3ForCausalLM", "with a `moe` object"), ("MixtralForCausalLM", "only mixture-of-experts")] {
        let e = moe(a).unwrap_err();
        assert_eq!(e.path, "model.architecture", "{a}: {e}");
        assert!(e.message.contains(says), "{a}: {e}");
    }
}

/// A vLLM 0.22.0 scenario on one H100 with `model` (a card id or an inline card).
fn with_model(model: Value) -> Value {
    json!({"version": 1, "engine": {"kind": "vllm", "version": "0.22.0"}, "model": model,
        "hardware": "h100-80gb", "workload": {"dataset_name": "random", "random_input_len": 512,
        "random_output_len": 64, "num_prompts": 4, "ignore_eos": true}})
}

/// SGLang's capture list stops at the request pool (`get_batch_sizes_to_capture`:
/// `req_to_token_pool.size`). Without `--max-running-requests` that pool is the estimate
/// `clamp(tokens / context × 512, 2048, 4096)`, which from 0.5.10 is also capped at half the
/// token pool (`_resolve_max_num_reqs`); through 0.5.9 only the running batch is (read in the
/// 0.5.9 and 0.5.10 wheels). A 400-token pool: 200 requests run in both, graphs to 256 in 0.5.9
/// and to 200 from 0.5.10.
#[test]
fn sglang_captures_decode_graphs_up_to_half_a_small_pool_from_0_5_10() {
    let captured = |version: &str| {
        let mut v = scenario(
            json!({"kind": "sglang", "version": version, "max_total_tokens": 400, "cuda_graph_max_bs": 256}),
            "llama-3.1-8b-instruct",
            "h100-80gb",
            1,
        );
        v["workload"]["random_input_len"] = json!(100);
        v["workload"]["random_output_len"] = json!(16);
        match resolve(v).unwrap().engine {
            EngineSpec::Sglang(c) => (c.max_running_requests, c.cuda_graph_max_bs),
            _ => unreachable!(),
        }
    };
    assert_eq!(captured("0.5.9"), (200, Some(256)));
    assert_eq!(captured("0.5.10"), (200, Some(200)));
}
