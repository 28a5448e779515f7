//! Mixture-of-experts cards (docs/moe.md): the cards read and write back, what is not modelled
//! is refused with an error naming it, and the weights count every expert.

use serde_json::{json, Value};
use sim::cards::ModelCard;

fn res() -> sim::config::Resources {
    sim::builtin::resources().expect("built-in cards")
}

fn card(id: &str) -> ModelCard {
    res().models.into_iter().find(|m| m.id == id).unwrap_or_else(|| panic!("no card {id}"))
}

/// A Qwen3-235B-A22B-FP8 scenario on H200 at TP 4 under vLLM 0.17.0 (Triton's fused MoE, which
/// the table times), with `edit` applied to its JSON.
fn resolve(edit: impl FnOnce(&mut Value)) -> Result<sim::config::SimSpec, sim::config::ConfigError> {
    let mut v = json!({"version": 1,
        "engine": {"kind": "vllm", "version": "0.17.0", "tensor_parallel_size": 4, "max_model_len": 16384},
        "model": "qwen3-235b-a22b-fp8", "hardware": {"gpu": "h200", "count": 4},
        "workload": {"dataset_name": "random", "random_input_len": 1000, "random_output_len": 100,
                     "num_prompts": 40, "max_concurrency": 4, "ignore_eos": true}});
    edit(&mut v);
    let s = sim::config::from_value(v, "")?;
    sim::config::resolve(&s, &res())
}

fn refused(edit: impl FnOnce(&mut Value)) -> (String, String) {
    match resolve(edit) {
        Ok(_) => panic!("a MoE scenario that should be refused resolved"),
        Err(e) => (e.path.clone(), e.to_string()),
    }
}

#[test]
fn moe_cards_round_trip() {
    for id in ["qwen3-30b-a3b", "qwen3-235b-a22b-fp8"] {
        let c = card(id);
        assert!(c.moe.is_some(), "{id} is a MoE card");
        let text = serde_json::to_string(&c).unwrap();
        let back: ModelCard = sim::config::from_value(serde_json::from_str(&text).unwrap(), "model").unwrap();
        assert_eq!(back, c, "{id}");
    }
    // The numbers of the checkpoints' config.json.
    let m = card("qwen3-235b-a22b-fp8");
    let e = m.moe.as_ref().unwrap();
    assert_eq!((e.num_experts, e.experts_per_token, e.moe_intermediate_size), (128, 8, 1536));
    assert_eq!((m.num_layers, m.hidden_size, m.num_attention_heads, m.num_kv_heads), (94, 4096, 64, 4));
    assert_eq!(m.weight_block_size.as_deref(), Some(&[128u32, 128][..]));
    let m = card("qwen3-30b-a3b");
    let e = m.moe.as_ref().unwrap();
    assert_eq!((e.num_experts, e.experts_per_token, e.moe_intermediate_size), (128, 8, 768));
    assert_eq!((m.num_layers, m.hidden_size, m.num_attention_heads, m.num_kv_heads), (48, 2048, 32, 4));
}

#[test]
fn an_unknown_moe_field_is_refused_by_name() {
    let mut v = serde_json::to_value(card("qwen3-30b-a3b")).unwrap();
    v["moe"]["num_shared_experts"] = json!(1);
    let err = sim::config::from_value::<ModelCard>(v.clone(), "model").unwrap_err().to_string();
    assert!(err.contains("num_shared_experts"), "{err}");
    // Inline in a scenario too.
    let (_, msg) = refused(|s| s["model"] = v);
    assert!(msg.contains("num_shared_experts"), "{msg}");
    // A dense MLP beside the experts.
    let mut v = serde_json::to_value(card("qwen3-30b-a3b")).unwrap();
    v["intermediate_size"] = json!(6144);
    let (path, msg) = refused(|s| {
        s["model"] = v;
        s["engine"]["version"] = json!("0.12.0");
    });
    assert_eq!(path, "model.intermediate_size", "{msg}");
}

#[test]
fn weights_per_gpu_count_every_expert() {
    let m = card("qwen3-235b-a22b-fp8");
    let experts = m.expert_parameters();
    assert_eq!(experts, 94 * 128 * 3 * 4096 * 1536);
    for tp in [2u32, 4] {
        let w = m.weight_bytes_per_gpu(tp, 1);
        // Every expert at one byte, sharded by TP (moe_tp = TP), plus the rest.
        let emb = m.embedding_parameters();
        assert_eq!(w, ((m.num_parameters - emb) + 2 * emb).div_ceil(u64::from(tp)));
        assert!(
            w >= experts / u64::from(tp),
            "TP {tp}: {w} bytes hold fewer than the experts' {}",
            experts / u64::from(tp)
        );
        // The 235 GB checkpoint: about 59 GB a GPU at TP 4.
        assert!((w as f64 / 1e9 - 236.3 / f64::from(tp)).abs() < 1.0, "TP {tp}: {w}");
    }
    let m = card("qwen3-30b-a3b");
    assert_eq!(m.weight_bytes_per_gpu(1, 2), 2 * m.num_parameters);
    assert!(m.num_parameters > m.expert_parameters());
    // The resolved deployment's memory account holds them too.
    let spec = resolve(|_| {}).unwrap();
    let acct = sim::config::vllm_memory_account(
        &spec.model,
        &spec.gpu,
        &spec.deployment,
        sim::engine::Version::new(0, 12, 0),
        0.9,
        8192,
        256,
    );
    assert_eq!(acct.weights, spec.model.weight_bytes_per_gpu(4, 1));
}

#[test]
fn moe_runs_and_its_cost_source_names_the_moe_table() {
    let spec = resolve(|_| {}).unwrap();
    let src = spec.cost.source();
    assert!(src.contains("moe_perf (fp8_block, power_law_1.2, moe_tp 4, moe_ep 1"), "{src}");
    assert!(src.contains("router GEMM (n = 128, k = 4096, bf16)"), "{src}");
    let spec = resolve(|s| {
        s["engine"] = json!({"kind": "sglang", "version": "0.5.6", "tp_size": 2, "context_length": 16384});
        s["hardware"]["count"] = json!(2);
    })
    .unwrap();
    assert!(spec.cost.source().contains("h200_sxm sglang 0.5.14 moe_perf (fp8_block"), "{}", spec.cost.source());
}

#[test]
fn moe_on_a_gpu_without_tables_is_refused() {
    let (path, msg) = refused(|s| s["hardware"]["gpu"] = json!("h100-pcie"));
    assert_eq!(path, "model.moe");
    for w in ["qwen3-235b-a22b-fp8", "h100-pcie", "vllm", "moe"] {
        assert!(msg.contains(w), "{w}: {msg}");
    }
    // A GPU card that opts out of tables (the linear prior).
    let mut gpu = serde_json::to_value(res().gpus.into_iter().find(|g| g.id == "h200").unwrap()).unwrap();
    gpu["kernel_tables"] = json!("none");
    let (path, _) = refused(|s| s["hardware"]["gpu"] = gpu);
    assert_eq!(path, "hardware.kernel_tables");
}

#[test]
fn moe_without_a_table_for_the_layout_or_engine_is_refused() {
    // fp8_block at TP 8: 1536 / 8 = 192 is not a multiple of the 128 block: vLLM 0.17.0 refuses
    // it (`Fp8MoEMethod.create_weights`), before any table is read.
    let (path, msg) = refused(|s| {
        s["engine"]["tensor_parallel_size"] = json!(8);
        s["hardware"]["count"] = json!(8);
    });
    assert_eq!(path, "engine.tensor_parallel_size");
    for w in ["vLLM 0.17.0 refuses", "1536 / 8 = 192", "block_n 128", "Fp8MoEMethod.create_weights"] {
        assert!(msg.contains(w), "{w}: {msg}");
    }
    // The A100's SGLang table has no bf16 Qwen3-30B curve at TP 8: refused naming the engine.
    let (path, msg) = refused(|s| {
        s["model"] = json!("qwen3-30b-a3b");
        s["engine"] = json!({"kind": "sglang", "version": "0.5.6", "tp_size": 8, "context_length": 16384});
        s["hardware"] = json!({"gpu": "a100-80gb", "count": 8});
    });
    assert_eq!(path, "model.moe");
    assert!(msg.contains("sglang") && msg.contains("a100-80gb") && msg.contains("moe_tp 8"), "{msg}");
    // Per-tensor fp8 experts.
    let (path, msg) = refused(|s| {
        s["model"] = json!("qwen3-30b-a3b");
        s["engine"]["quantization"] = json!("fp8");
    });
    assert_eq!(path, "model.moe");
    assert!(msg.contains("per-tensor fp8"), "{msg}");
}

#[test]
fn moe_under_the_linear_models_is_refused() {
    let (path, msg) = refused(|s| s["cost"] = json!({"prior": {}}));
    assert_eq!(path, "cost.prior");
    assert!(msg.contains("qwen3-235b-a22b-fp8") && msg.contains("h200"), "{msg}");
    let (path, _) = refused(|s| {
        s["cost"] = json!({"coefficients": {"step_us": 1000, "decode_token_us": 10, "prefill_token_us": 10}})
    });
    assert_eq!(path, "cost.coefficients");
}

#[test]
fn moe_with_data_parallelism_is_refused() {
    let (path, _) = refused(|s| s["engine"]["data_parallel_size"] = json!(2));
    assert_eq!(path, "engine.data_parallel_size");
}

/// Every MoE run carries the `moe_timing` caveat (its figures are checked against `servesim
/// validate` in tests/validate.rs); a dense run does not.
#[test]
fn a_moe_run_says_how_far_its_timing_was_judged() {
    let spec = resolve(|_| {}).expect("the MoE scenario resolves");
    let c = sim::report::moe_timing(&spec).expect("a caveat for a MoE card");
    assert_eq!(c.id, sim::report::MOE_TIMING);
    assert!(c.message.contains("qwen3-235b-a22b-fp8") && c.message.contains("optimistic"), "{}", c.message);
    let dense = resolve(|v| {
        v["model"] = json!("qwen3-32b");
    })
    .expect("a dense scenario resolves");
    assert!(sim::report::moe_timing(&dense).is_none());
}

/// vLLM's fused-MoE kernel for block-fp8 experts (`config::vllm::vllm_moe_kernel`, docs/moe.md
/// section 7): where it turns on whether `deep_gemm` is installed, the run asks which; a kernel
/// that no table times is refused naming `engine.moe_backend`; what the tables time runs.
#[test]
fn vllm_moe_kernel_is_the_tables_or_a_clear_error() {
    let at = |v: &'static str, tp: u32| {
        move |s: &mut Value| {
            s["engine"]["version"] = json!(v);
            s["engine"]["tensor_parallel_size"] = json!(tp);
            s["hardware"]["count"] = json!(tp);
        }
    };
    // 0.11.1-0.14.1 on SM90: DeepGEMM at every batch where installed, Triton where not.
    for v in ["0.11.1", "0.12.0", "0.13.0", "0.14.1"] {
        let (path, msg) = refused(at(v, 4));
        assert_eq!(path, "engine.moe_backend", "{v}: {msg}");
        for w in ["deep_gemm", "DeepGEMM", "engine.moe_backend = \"triton\"", "VLLM_MOE_USE_DEEP_GEMM=0", v] {
            assert!(msg.contains(w), "{v} {w}: {msg}");
        }
    }
    // Said: Triton runs (no deep_gemm); DeepGEMM is not modelled; a name vLLM lacks is an error.
    let e = at("0.12.0", 4);
    resolve(|s| {
        e(s);
        s["engine"]["moe_backend"] = json!("triton");
    })
    .expect("0.12.0 with Triton's fused MoE");
    let (path, msg) = refused(|s| {
        e(s);
        s["engine"]["moe_backend"] = json!("deep_gemm");
    });
    assert_eq!(path, "engine.moe_backend");
    assert!(msg.contains("deep_gemm") && msg.contains("triton") && msg.contains("not modelled"), "{msg}");
    let (path, msg) = refused(|s| s["engine"]["moe_backend"] = json!("tritonn"));
    assert_eq!(path, "engine.moe_backend");
    assert!(msg.contains("flashinfer_trtllm"), "{msg}");
    // 0.11.0: Triton at decode; DeepGEMM for prefill chunks only where the per-rank
    // intermediate size is over 512 (TP 2: 768), Triton throughout at TP 4 (384).
    resolve(at("0.11.0", 4)).expect("0.11.0 at TP 4 runs Triton");
    let (path, msg) = refused(at("0.11.0", 2));
    assert_eq!(path, "engine.moe_backend");
    assert!(msg.contains("prefill chunks") && msg.contains("768 > 512"), "{msg}");
    // 0.15.0-0.16.0: FlashInfer CUTLASS, which no table times; from 0.17.0 Triton again.
    for v in ["0.15.0", "0.16.0"] {
        let (path, msg) = refused(at(v, 4));
        assert_eq!(path, "engine.moe_backend", "{v}: {msg}");
        assert!(msg.contains("flashinfer_cutlass") && msg.contains("0.17.0"), "{v}: {msg}");
    }
    for v in ["0.17.0", "0.24.0", "0.33.0"] {
        let spec = resolve(at(v, 4)).unwrap_or_else(|e| panic!("{v}: {e}"));
        assert!(spec.cost.source().contains("vllm_fp8moe_triton_tritonexperts"), "{v}: {}", spec.cost.source());
    }
    // B200: FlashInfer TRT-LLM from 0.15.0 (its table's kernel); DeepGEMM or CUTLASS before.
    let b200 = |v: &'static str| {
        move |s: &mut Value| {
            at(v, 4)(s);
            s["hardware"]["gpu"] = json!("b200");
        }
    };
    let spec = resolve(b200("0.17.0")).expect("B200 under 0.17.0");
    assert!(spec.cost.source().contains("flashinfer_trtllm"), "{}", spec.cost.source());
    let (path, msg) = refused(b200("0.14.1"));
    assert_eq!(path, "engine.moe_backend");
    assert!(msg.contains("FlashInfer TRT-LLM") && msg.contains("0.15.0"), "{msg}");
    // Triton said on the B200, whose table times FlashInfer TRT-LLM: refused.
    let (path, msg) = refused(|s| {
        b200("0.17.0")(s);
        s["engine"]["moe_backend"] = json!("triton");
    });
    assert_eq!(path, "engine.moe_backend");
    assert!(msg.contains("flashinfer_trtllm"), "{msg}");
    // An SGLang scenario has no such flag.
    let (path, msg) = refused(|s| {
        s["engine"] = json!({"kind": "sglang", "version": "0.5.6", "tp_size": 4, "context_length": 16384,
                             "moe_backend": "triton"});
    });
    assert!(path.contains("moe_backend"), "{path}: {msg}");
}

/// A vLLM MoE run whose fused-MoE Triton config is not the one its table ran says so
/// (`sim::report::moe_default_config`, docs/moe.md section 8): Qwen3-30B-A3B on an H100, for which
/// vLLM ships no tuned config, before 0.17.0's batch-aware default (optimistic: the published run);
/// the H200, whose tuned file every release ships, and the H100 from 0.17.0 (the table's default) do
/// not; the A100, whose table (vLLM 0.14.0) ran the old default, from 0.17.0 (pessimistic).
#[test]
fn a_moe_config_the_table_did_not_run_is_said() {
    let run = |gpu: &str, v: &str| {
        let (gpu, v) = (gpu.to_string(), v.to_string());
        let spec = resolve(move |s| {
            s["model"] = json!("qwen3-30b-a3b");
            s["engine"] = json!({"kind": "vllm", "version": v, "tensor_parallel_size": 1});
            s["hardware"] = json!(gpu);
        })
        .unwrap();
        sim::report::moe_default_config(&spec)
    };
    let c = run("h100-80gb", "0.12.0").expect("H100 under 0.12.0 runs the old default");
    assert_eq!(c.id, sim::report::MOE_DEFAULT_CONFIG);
    for w in ["0.12.0", "E=128,N=768", "BLOCK_SIZE_M 64", "0.24.0", "optimistic", "33%"] {
        assert!(c.message.contains(w), "{w}: {}", c.message);
    }
    assert!(run("h100-80gb", "0.17.0").is_none());
    assert!(run("h200", "0.12.0").is_none());
    let c = run("a100-80gb", "0.24.0").expect("A100 under 0.24.0 runs the new default, its table the old");
    assert!(c.message.contains("pessimistic") && c.message.contains("0.14.0"), "{}", c.message);
    assert!(run("a100-80gb", "0.12.0").is_none());
}

/// SGLang's fused-MoE kernel (`config::sglang::sglang_moe_kernel`, docs/moe.md section 7.6):
/// Triton everywhere but the SM100 family, where its Qwen3-MoE rule takes FlashInfer TRT-LLM
/// (block fp8 from 0.5.6, 16-bit from 0.5.8), the B200 table's kernel; a kernel the table did
/// not run is refused naming `engine.moe_runner_backend`.
#[test]
fn sglang_moe_kernel_is_the_tables_or_a_clear_error() {
    let at = |v: &'static str, gpu: &'static str, model: &'static str| {
        move |s: &mut Value| {
            s["engine"] = json!({"kind": "sglang", "version": v, "tp_size": 2, "context_length": 16384});
            s["hardware"] = json!({"gpu": gpu, "count": 2});
            s["model"] = json!(model);
        }
    };
    resolve(at("0.5.6", "h200", "qwen3-235b-a22b-fp8")).expect("Triton on H200");
    let spec = resolve(at("0.5.6", "b200", "qwen3-235b-a22b-fp8")).expect("FlashInfer TRT-LLM on B200 from 0.5.6");
    assert!(spec.cost.source().contains("sglang_flashinfer_trtllm_moe"), "{}", spec.cost.source());
    for (v, model) in [("0.5.5", "qwen3-235b-a22b-fp8"), ("0.5.7", "qwen3-30b-a3b")] {
        let (path, msg) = refused(at(v, "b200", model));
        assert_eq!(path, "engine.moe_runner_backend", "{v}: {msg}");
        assert!(msg.contains("triton") && msg.contains("flashinfer_trtllm") && msg.contains(v), "{v}: {msg}");
    }
    resolve(at("0.5.8", "b200", "qwen3-30b-a3b")).expect("16-bit experts on B200 from 0.5.8");
    let (path, msg) = refused(|s| {
        at("0.5.23", "h200", "qwen3-30b-a3b")(s);
        s["engine"]["moe_runner_backend"] = json!("deep_gemm");
    });
    assert_eq!(path, "engine.moe_runner_backend");
    assert!(msg.contains("deep_gemm") && msg.contains("not modelled"), "{msg}");
    let (path, _) = refused(|s| {
        at("0.5.23", "h200", "qwen3-30b-a3b")(s);
        s["engine"]["moe_runner_backend"] = json!("tritonn");
    });
    assert_eq!(path, "engine.moe_runner_backend");
}

/// An inline Qwen3-30B-A3B-FP8 card (block-128 fp8 experts, as the checkpoint's config.json).
fn qwen3_30b_fp8() -> Value {
    let mut v = serde_json::to_value(card("qwen3-30b-a3b")).unwrap();
    v["id"] = json!("qwen3-30b-a3b-fp8");
    v["quantization"] = json!("fp8");
    v["quantization_method"] = json!("fp8");
    v["weight_block_size"] = json!([128, 128]);
    v
}

/// Block-fp8 layouts whose TP shards are not whole 128-wide weight blocks (docs/moe.md section
/// 1.4): every SGLang release refuses them (`ModelRunner.check_quantized_moe_compatibility`,
/// `Fp8MoEMethod.create_weights`), and so does vLLM before 0.29.0; from 0.29.0 vLLM serves the
/// experts with refined scale blocks on Triton, which no table times. Refused either way, before
/// the SGLang B200 table's curves at moe_tp 4 and 8 (shards of 192 and 96) could time them.
#[test]
fn fp8_block_layouts_the_engines_refuse_are_refused_by_release() {
    let sglang = |v: &'static str, gpu: &'static str, model: Value, tp: u32| {
        move |s: &mut Value| {
            s["engine"] = json!({"kind": "sglang", "version": v, "tp_size": tp, "context_length": 16384});
            s["hardware"] = json!({"gpu": gpu, "count": tp});
            s["model"] = model;
        }
    };
    // The audit's scenario: the 235B at TP 8 on B200 under SGLang 0.5.14 (it ran, TPOT 12.6 ms).
    let (path, msg) = refused(sglang("0.5.14", "b200", json!("qwen3-235b-a22b-fp8"), 8));
    assert_eq!(path, "engine.tp_size", "{msg}");
    for w in ["SGLang 0.5.14 refuses", "1536 / 8 = 192", "check_quantized_moe_compatibility", "--ep-size"] {
        assert!(msg.contains(w), "{w}: {msg}");
    }
    for v in ["0.4.10", "0.5.6", "0.5.23"] {
        let (path, msg) = refused(sglang(v, "h200", json!("qwen3-235b-a22b-fp8"), 8));
        assert_eq!(path, "engine.tp_size", "{v}: {msg}");
    }
    // Qwen3-30B-A3B-FP8 on B200: TP 4 (192) and 8 (96) refused, TP 2 (384) timed from the table.
    for tp in [4, 8] {
        let (path, msg) = refused(sglang("0.5.14", "b200", qwen3_30b_fp8(), tp));
        assert_eq!(path, "engine.tp_size", "TP {tp}: {msg}");
        assert!(msg.contains(&format!("768 / {tp} = {}", 768 / tp)), "{msg}");
    }
    let spec = resolve(sglang("0.5.14", "b200", qwen3_30b_fp8(), 2)).expect("768 / 2 = 384: three whole blocks");
    assert!(spec.cost.source().contains("moe_perf (fp8_block"), "{}", spec.cost.source());
    // vLLM: refused by create_weights to 0.28.0; from 0.29.0 served with 64 x 64 blocks, not modelled.
    let vllm = |v: &'static str| {
        move |s: &mut Value| {
            s["engine"]["version"] = json!(v);
            s["engine"]["tensor_parallel_size"] = json!(8);
            s["hardware"]["count"] = json!(8);
        }
    };
    for v in ["0.11.0", "0.24.0", "0.28.0"] {
        let (path, msg) = refused(vllm(v));
        assert_eq!(path, "engine.tensor_parallel_size", "{v}: {msg}");
        assert!(msg.contains(&format!("vLLM {v} refuses")) && msg.contains("create_weights"), "{v}: {msg}");
    }
    for v in ["0.29.0", "0.34.0"] {
        let (path, msg) = refused(vllm(v));
        assert_eq!(path, "engine.tensor_parallel_size", "{v}: {msg}");
        for w in ["serves", "64 x 64", "refine_fp8_moe_block_shape", "Triton", "not modelled"] {
            assert!(msg.contains(w), "{v} {w}: {msg}");
        }
    }
    // A given --moe-backend does not get past it.
    let (path, _) = refused(|s| {
        vllm("0.24.0")(s);
        s["engine"]["moe_backend"] = json!("triton");
    });
    assert_eq!(path, "engine.tensor_parallel_size");
    // The attention's shards too: with 64-wide heads one KV head a GPU is 64 wide at TP 4, which
    // vLLM's validate_fp8_block_shape and SGLang's Fp8LinearMethod refuse in every release.
    let mut narrow = serde_json::to_value(card("qwen3-235b-a22b-fp8")).unwrap();
    narrow["id"] = json!("qwen3-235b-a22b-fp8-d64");
    narrow["head_dim"] = json!(64);
    for v in ["0.17.0", "0.34.0"] {
        let n = narrow.clone();
        let (path, msg) = refused(move |s| {
            s["model"] = n;
            s["engine"]["version"] = json!(v);
        });
        assert_eq!(path, "engine.tensor_parallel_size", "{v}: {msg}");
        assert!(msg.contains("QKV's key and value outputs") && msg.contains("validate_fp8_block_shape"), "{msg}");
    }
    let (path, msg) = refused(sglang("0.5.14", "h200", narrow, 4));
    assert_eq!(path, "engine.tp_size", "{msg}");
    assert!(msg.contains("Fp8LinearMethod"), "{msg}");
}

/// vLLM's kernel for 16-bit experts (`config::vllm::vllm_bf16_moe_kernel`, docs/moe.md section
/// 7.7): Triton's fused MoE before 0.20.0 everywhere, so the B200's table (FlashInfer TRT-LLM)
/// and the RTX PRO 6000's (FlashInfer CUTLASS) do not time it; FlashInfer CUTLASS on H100 and
/// H200 in 0.20.0-0.22.1, which their Triton tables do not time.
#[test]
fn vllm_bf16_moe_kernel_by_release_is_the_tables_or_a_clear_error() {
    let at = |v: &'static str, gpu: &'static str| {
        move |s: &mut Value| {
            s["model"] = json!("qwen3-30b-a3b");
            s["engine"] = json!({"kind": "vllm", "version": v, "tensor_parallel_size": 1, "max_model_len": 16384});
            s["hardware"] = json!(gpu);
        }
    };
    for (v, gpu, table) in [
        ("0.11.0", "b200", "flashinfer_trtllm"),
        ("0.19.0", "b200", "flashinfer_trtllm"),
        ("0.17.0", "rtx-pro-6000", "flashinfer_cutlass"),
    ] {
        let (path, msg) = refused(at(v, gpu));
        assert_eq!(path, "engine.moe_backend", "{v} {gpu}: {msg}");
        for w in ["triton", table, "0.20.0", "not modelled"] {
            assert!(msg.contains(w), "{v} {gpu} {w}: {msg}");
        }
    }
    // From 0.16.0 VLLM_USE_FLASHINFER_MOE_FP16=1 runs FlashInfer TRT-LLM on B200: said, it is timed.
    resolve(|s| {
        at("0.19.0", "b200")(s);
        s["engine"]["moe_backend"] = json!("flashinfer_trtllm");
    })
    .expect("B200 under 0.19.0 with FlashInfer TRT-LLM said");
    for (v, gpu) in [("0.20.0", "b200"), ("0.33.0", "b200"), ("0.24.0", "rtx-pro-6000"), ("0.17.0", "h200")] {
        resolve(at(v, gpu)).unwrap_or_else(|e| panic!("{v} {gpu}: {e}"));
    }
    let (path, msg) = refused(at("0.21.0", "h200"));
    assert_eq!(path, "engine.moe_backend", "{msg}");
    assert!(msg.contains("flashinfer_cutlass") && msg.contains("0.23.0"), "{msg}");
    resolve(|s| {
        at("0.21.0", "h200")(s);
        s["engine"]["moe_backend"] = json!("triton");
    })
    .expect("0.21.0 on H200 with --moe-backend triton");
    resolve(at("0.23.0", "h200")).expect("0.23.0 on H200: Triton again");
    resolve(|s| {
        at("0.24.0", "l40s")(s);
        s["engine"]["tensor_parallel_size"] = json!(2);
        s["hardware"] = json!({"gpu": "l40s", "count": 2});
    })
    .expect("Triton on L40S in every release");
}

/// A MoE card must name its architecture (field `model.architecture`): without it a `moe` object
/// under Mixtral's repo name ran as Qwen3-MoE.
#[test]
fn a_moe_card_without_architecture_is_refused() {
    let mut v = serde_json::to_value(card("qwen3-30b-a3b")).unwrap();
    v.as_object_mut().unwrap().remove("architecture");
    v["hf_repo"] = json!("mistralai/Mixtral-8x7B");
    let (path, msg) = refused(|s| {
        s["model"] = v;
        s["engine"]["tensor_parallel_size"] = json!(1);
        s["hardware"]["count"] = json!(1);
    });
    assert_eq!(path, "model.architecture", "{msg}");
    assert!(msg.contains("missing") && msg.contains("Qwen3MoeForCausalLM"), "{msg}");
}

/// Expert parallelism is refused as not modelled, naming the engine's flag, not as an unknown
/// field; its off state (the engines' default) is the modelled run, and a dense model has no
/// experts for it to spread.
#[test]
fn expert_parallelism_is_refused_as_not_modelled() {
    let (path, msg) = refused(|s| s["engine"]["enable_expert_parallel"] = json!(true));
    assert_eq!(path, "engine.enable_expert_parallel", "{msg}");
    for w in ["--enable-expert-parallel", "expert parallelism is not modelled"] {
        assert!(msg.contains(w), "{w}: {msg}");
    }
    resolve(|s| s["engine"]["enable_expert_parallel"] = json!(false)).expect("EP off: the modelled run");
    resolve(|s| {
        s["model"] = json!("qwen3-32b");
        s["engine"]["enable_expert_parallel"] = json!(true);
    })
    .expect("a dense model: vLLM ignores the flag");
    let sglang = |ep: u32| {
        move |s: &mut Value| {
            s["engine"] =
                json!({"kind": "sglang", "version": "0.5.6", "tp_size": 4, "ep_size": ep, "context_length": 16384});
        }
    };
    let (path, msg) = refused(sglang(4));
    assert_eq!(path, "engine.ep_size", "{msg}");
    assert!(msg.contains("--ep-size") && msg.contains("expert parallelism is not modelled"), "{msg}");
    resolve(sglang(1)).expect("ep_size 1: SGLang's default");
    let (path, _) = refused(sglang(0));
    assert_eq!(path, "engine.ep_size");
    // The other engine's flag is still named as such.
    let (path, msg) = refused(|s| s["engine"]["ep_size"] = json!(2));
    assert_eq!(path, "engine.ep_size", "{msg}");
    assert!(msg.contains("SGLang flag"), "{msg}");
}
