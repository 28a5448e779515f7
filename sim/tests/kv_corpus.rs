//! The KV-pool sizing against the start-up log corpus
//! (`data/published/kv-logs.csv`): every row servesim can run is derived
//! from its setup exactly as a user's scenario would be (the fraction, the
//! model card, the GPU card, TP, dtypes, eager mode), without the logged
//! pool, and compared with the pool the engine logged.
//!
//! The memory terms that cannot be derived from first principles are
//! constants in `sim::config::memory`, fitted on this corpus. This test
//! refits them here (closed form: the median, per group, of the memory the
//! derived terms leave unexplained; the groups are vLLM's V1 and V2 model
//! runners at TP 1 and TP > 1 (TP > 1 on PCIe cards is judged against the TP 1 constant, the
//! TP > 1 extra being charged on NVLink cards only), vLLM ≥ 0.27's free-memory accounting, and
//! SGLang; the CUDA-graph constant by least squares on the capture memory
//! the V1 runner's rows log), checks the code's constants are that fit,
//! checks the runner `VllmMemoryBehaviour` resolves against the one each row
//! states, reports each row's error both in-sample and leave-one-out (the
//! row's own log left out of the fit), and judges the targets on the
//! leave-one-out errors (in sample for a group of one row).
//!
//! vLLM rows from a Windows/WSL2 host are derived on the device as the
//! Windows (WDDM) driver shows it: CUDA's total is the `nvidia-smi` total
//! (logged by an RTX 4090 under WSL2: 23.99 GiB = 24,564 MiB), and from 0.27
//! the free-memory accounting adds a host term per byte of weights
//! (`sim::config::wddm_host`). SGLang rows keep the cards' Linux totals.
//!
//! `cargo test -p sim --test kv_corpus -- --nocapture` prints the table.

use serde_json::{json, Value};
use sim::config::{self, memory_constants as mc, EngineSpec};
use sim::engine::Version;

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

use sim::traces::csv_records as read_csv;

/// The leading number of a cell ("0.9 (default)" → 0.9), if any.
fn lead_num(s: &str) -> Option<f64> {
    let t: String = s.trim().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    t.trim_end_matches('.').parse().ok()
}

fn lead_version(s: &str) -> Option<Version> {
    let t: String = s.trim().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    let parts: Vec<u32> = t.split('.').filter(|p| !p.is_empty()).take(3).map(|p| p.parse().unwrap()).collect();
    (parts.len() == 3).then(|| Version::new(parts[0], parts[1], parts[2]))
}

struct Row {
    line: usize,
    label: String,
    engine: String,
    version: Version,
    tp: u32,
    scenario: Value,
    logged_tokens: f64,
    /// The logged CUDA-graph capture memory, GiB.
    logged_graph_gib: Option<f64>,
    /// The model runner the row states (`V1` / `V2`), if any.
    runner: Option<bool>,
    /// The host is Windows/WSL2 (the `host` column).
    wsl2: bool,
    /// The GPU card's `interconnect` is `pcie` (vLLM's extra non-torch memory at TP > 1 is
    /// charged on NVLink cards only: `sim::config::vllm_tp_non_torch_applies`).
    pcie: bool,
    /// The fraction is stated, the GPU is printed (not inferred), and the KV figure is a
    /// verbatim start-up log line (not a report table or a value parsed by someone's script): only
    /// such rows fit the constants and judge the targets; the others are
    /// derived (with the engine's default fraction where none is stated) and
    /// reported.
    complete: bool,
}

/// A card as the Windows (WDDM) driver shows it under WSL2: CUDA's total is
/// the `nvidia-smi` total (inferred for the RTX 5090 from the RTX 4090's
/// WSL2 log, where the two are the same).
fn wddm_view(id: &str) -> Value {
    let res = sim::builtin::resources().unwrap();
    let card = res.gpus.iter().find(|c| c.id == id).unwrap_or_else(|| panic!("card {id}"));
    let mut v = serde_json::to_value(card).unwrap();
    let mib = card.nvidia_smi_memory_mib.unwrap_or_else(|| panic!("{id}: no nvidia-smi total"));
    v["memory_bytes"] = json!(u64::from(mib) << 20);
    v["id"] = json!(format!("{id} (WSL2 view, test only)"));
    v
}

/// Qwen2.5-0.5B-Instruct inline (servesim has no card for it), from its
/// Hugging Face config.json: only the memory terms use it here.
fn qwen25_05b() -> Value {
    json!({
        "id": "qwen2.5-0.5b-instruct (test only)",
        "hf_repo": "Qwen/Qwen2.5-0.5B-Instruct",
        "num_parameters": 494_032_768u64,
        "num_layers": 24,
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_attention_heads": 14,
        "num_kv_heads": 2,
        "head_dim": 64,
        "vocab_size": 151_936,
        "tie_word_embeddings": true,
        "dtype": "bfloat16",
        "max_position_embeddings": 32768,
        "add_bos_token": false,
        "sources": ["https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct/blob/main/config.json"]
    })
}

fn gpu_card(s: &str) -> Option<&'static str> {
    let s = s.to_ascii_uppercase();
    [
        ("H100", "h100-80gb"),
        ("H200", "h200"),
        ("A100 80GB", "a100-80gb"),
        ("A100 40GB", "a100-40gb"),
        ("RTX 5090", "rtx-5090"),
        ("L40S", "l40s"),
        ("RTX PRO 6000", "rtx-pro-6000"),
        ("RTX 4090", "rtx-4090"),
    ]
    .iter()
    .find(|(k, _)| s.contains(k))
    .map(|(_, v)| *v)
}

fn model_card(hf: &str) -> Option<(&'static str, bool)> {
    let h = hf.to_ascii_lowercase().replace(' ', "-");
    let fp8 = h.contains("fp8");
    let table = [
        ("llama-3.1-8b-instruct", "llama-3.1-8b-instruct"),
        // The base checkpoint: the same architecture and weights' shapes as the Instruct card.
        ("llama-3.1-8b", "llama-3.1-8b-instruct"),
        ("llama-3.1-70b", "llama-3.1-70b-instruct"),
        ("llama-3.3-70b", "llama-3.3-70b-instruct"),
        ("qwen2.5-7b-instruct", "qwen2.5-7b-instruct"),
        ("qwen2-7b-instruct", "qwen2-7b-instruct"),
        ("qwen2.5-72b-instruct", "qwen2.5-72b-instruct"),
        ("qwen3-8b", "qwen3-8b"),
        ("qwen3-14b", "qwen3-14b"),
        ("qwen3-32b", "qwen3-32b"),
        ("llama-3.2-3b", "llama-3.2-3b-instruct"),
        ("qwen3-4b", "qwen3-4b"),
    ];
    table.iter().find(|(k, _)| h.contains(k)).map(|(_, v)| (*v, fp8))
}

/// Qwen3-30B-A3B-FP8 inline, for SGLang rows only: servesim's `qwen3-30b-a3b` card (bf16) with
/// the checkpoint's block-wise fp8 (the log: "Detected fp8 checkpoint.", `quant=fp8, fmt=e4m3`,
/// `Fp8` block kernels with `block_shape=[128, 128]`), as the `qwen3-235b-a22b-fp8` card carries
/// Qwen's block-fp8 MoE checkpoints (embeddings and LM head in bf16). SGLang's pool is the fraction less the weights and the
/// context (no profiled activation term), so a MoE model enters it through its weights alone;
/// vLLM's profiled peak of a fused-MoE forward is not derived, and its MoE rows stay out.
fn qwen3_30b_a3b_fp8() -> Value {
    let res = sim::builtin::resources().unwrap();
    let card = res.models.iter().find(|m| m.id == "qwen3-30b-a3b").expect("card qwen3-30b-a3b");
    let mut v = serde_json::to_value(card).unwrap();
    v["id"] = json!("qwen3-30b-a3b-fp8 (test only)");
    v["hf_repo"] = json!("Qwen/Qwen3-30B-A3B-FP8");
    v["quantization"] = json!("fp8");
    v["quantization_method"] = json!("fp8");
    v["weight_block_size"] = json!([128, 128]);
    v
}

/// Parses the corpus; rows servesim cannot run come back as `Err(reason)`.
fn corpus() -> Vec<Result<Row, (usize, String, String)>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../data/published/kv-logs.csv");
    let rows = read_csv(&std::fs::read_to_string(path).expect("data/published/kv-logs.csv"));
    let head = &rows[0];
    let col = |name: &str| head.iter().position(|h| h == name).unwrap_or_else(|| panic!("column {name}"));
    let mut out = Vec::new();
    for (i, r) in rows.iter().enumerate().skip(1) {
        if r.len() < head.len() {
            continue;
        }
        let get = |name: &str| r[col(name)].as_str();
        let line = i + 1;
        let label = format!(
            "{} {} {} tp{} {}",
            get("engine"),
            get("engine_version").split(' ').next().unwrap_or(""),
            get("model"),
            get("tensor_parallel_size"),
            get("gpu").split('(').next().unwrap_or("").trim()
        );
        let skip = |why: &str| Err((line, label.clone(), why.to_string()));
        let engine = get("engine").to_string();
        let Some(version) = lead_version(get("engine_version")) else {
            out.push(skip("engine release not printed"));
            continue;
        };
        let (lo, hi) = if engine == "vllm" {
            (config::VLLM_MIN, config::VLLM_MAX)
        } else {
            (config::SGLANG_MIN, config::SGLANG_MAX)
        };
        if version < lo || version > hi {
            out.push(skip(&format!("release {version} is outside the modelled range {lo}–{hi}")));
            continue;
        }
        let wsl2 = get("host").starts_with("WSL2");
        let pcie = gpu_card(get("gpu")).is_none_or(|id| {
            let res = sim::builtin::resources().unwrap();
            res.gpus.iter().find(|c| c.id == id).and_then(|c| c.interconnect.clone()).as_deref() == Some("pcie")
        });
        let gpu = match gpu_card(get("gpu")) {
            Some(id) if wsl2 && engine == "vllm" => wddm_view(id),
            Some(id) => json!(id),
            None => {
                out.push(skip("no GPU card"));
                continue;
            }
        };
        let model_inline = if get("model").contains("Qwen2.5-0.5B") {
            Some(qwen25_05b())
        } else if engine == "sglang" && get("model").contains("Qwen3-30B-A3B-FP8") {
            Some(qwen3_30b_a3b_fp8())
        } else {
            None
        };
        let Some((model, fp8_ckpt)) = model_card(get("model")).or(model_inline.as_ref().map(|_| ("", false))) else {
            out.push(skip("no model card (or a MoE model)"));
            continue;
        };
        let Some(logged) = lead_num(get("logged_kv_tokens")) else {
            out.push(skip("no logged token count"));
            continue;
        };
        let tp = lead_num(get("tensor_parallel_size")).unwrap_or(1.0) as u32;
        if lead_num(get("pipeline_parallel_size")).unwrap_or(1.0) as u32 != 1 {
            out.push(skip("pipeline parallelism is not modelled"));
            continue;
        }
        let mut e = serde_json::Map::new();
        e.insert("kind".into(), json!(engine));
        e.insert("version".into(), json!(version.to_string()));
        let vllm = engine == "vllm";
        e.insert((if vllm { "tensor_parallel_size" } else { "tp_size" }).into(), json!(tp));
        if let Some(f) = lead_num(get("gpu_memory_utilization_or_mem_fraction_static")) {
            e.insert((if vllm { "gpu_memory_utilization" } else { "mem_fraction_static" }).into(), json!(f));
        }
        if let Some(m) = lead_num(get("max_model_len_or_context_length")) {
            e.insert((if vllm { "max_model_len" } else { "context_length" }).into(), json!(m as u64));
        }
        let seqs = get("max_num_seqs_or_max_running_requests");
        if !seqs.contains("derived") {
            if let Some(n) = lead_num(seqs) {
                e.insert((if vllm { "max_num_seqs" } else { "max_running_requests" }).into(), json!(n as u64));
            }
        }
        if let Some(n) = lead_num(get("max_num_batched_tokens_or_chunked_prefill_size")) {
            e.insert((if vllm { "max_num_batched_tokens" } else { "chunked_prefill_size" }).into(), json!(n as u64));
        }
        if get("enforce_eager_or_disable_cuda_graph").starts_with("True") {
            e.insert((if vllm { "enforce_eager" } else { "disable_cuda_graph" }).into(), json!(true));
        }
        let kvd = get("kv_cache_dtype");
        if kvd.starts_with("fp8") {
            e.insert("kv_cache_dtype".into(), json!(kvd.split(' ').next().unwrap()));
        }
        // An inline card carries its checkpoint's quantization itself.
        if model_inline.is_none() && (fp8_ckpt || get("quantization").starts_with("fp8")) {
            e.insert("quantization".into(), json!("fp8"));
        }
        let scenario = json!({
            "version": 1,
            "engine": Value::Object(e),
            "model": model_inline.clone().unwrap_or_else(|| json!(model)),
            "hardware": {"gpu": gpu, "count": tp},
            "workload": {"dataset_name": "random", "random_input_len": 16, "random_output_len": 16,
                         "num_prompts": 1, "ignore_eos": true}
        });
        let logged_graph_gib = lead_num(get("logged_cuda_graph_gib"));
        let runner = match get("vllm_model_runner").get(..2) {
            Some("V2") => Some(true),
            Some("V1") => Some(false),
            _ => None,
        };
        let fraction = get("gpu_memory_utilization_or_mem_fraction_static");
        let quote = get("source_quote");
        // A row whose GPU is not printed (inferred from free memory) is reported only: SGLang's
        // constant is the card's total less the free memory it starts from, so an inferred total
        // moves it directly (by 1/fraction: fivefold at a fraction of 0.2).
        let complete = lead_num(fraction).is_some()
            && !get("gpu").contains("not printed")
            && ["GPU KV cache size", "#tokens", "max_total_num_tokens", "# GPU blocks"]
                .iter()
                .any(|k| quote.contains(k));
        out.push(Ok(Row {
            line,
            label,
            engine,
            version,
            tp,
            scenario,
            logged_tokens: logged,
            logged_graph_gib,
            runner,
            wsl2,
            pcie,
            complete,
        }));
    }
    out
}

/// The median (least absolute deviations): robust to the corpus's weak rows
/// (a fraction or flags not stated), which a mean would let pull every other row.
fn median(mut xs: Vec<f64>) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    Some(if n % 2 == 1 { xs[n / 2] } else { (xs[n / 2 - 1] + xs[n / 2]) / 2.0 })
}

struct Derived {
    tokens: f64,
    /// The release's memory behaviour (vLLM rows).
    behaviour: Option<config::VllmMemoryBehaviour>,
    /// The bytes the fitted constant of this row's group explains: what the
    /// log implies minus what the derived terms give.
    unexplained: f64,
    /// Bytes of KV per token per GPU.
    cell: f64,
    /// d(pool bytes)/d(constant bytes): 1 for vLLM, mfs for SGLang 0.5.x, 1 for 0.4.x.
    slope: f64,
}

fn derive(row: &Row) -> Derived {
    let g = group_of(row);
    let res = sim::builtin::resources().unwrap();
    let s = config::from_value(row.scenario.clone(), "").unwrap_or_else(|e| panic!("line {}: {e}", row.line));
    let spec = config::resolve(&s, &res).unwrap_or_else(|e| panic!("line {} ({}): {e}", row.line, row.label));
    let acct = spec.kv_sizing.memory.clone().expect("derived from memory");
    let cell = spec.kv_sizing.kv_bytes_per_token as f64;
    let (tokens, granule) = match &spec.engine {
        // The log prints num_gpu_blocks × block_size.
        EngineSpec::Vllm(c) => (f64::from(c.num_gpu_blocks) * f64::from(c.block_size), f64::from(c.block_size)),
        EngineSpec::Sglang(c) => (c.max_total_tokens as f64, f64::from(c.page_size)),
    };
    let _ = granule;
    let logged_bytes = row.logged_tokens * cell;
    let behaviour = match &spec.engine {
        EngineSpec::Vllm(_) => Some(config::VllmMemoryBehaviour::for_card(
            row.version,
            &spec.model,
            &spec.gpu,
            spec.deployment.quantization.is_some(),
            spec.deployment.cuda_graphs,
        )),
        EngineSpec::Sglang(_) => None,
    };
    let (unexplained, slope) = match &spec.engine {
        EngineSpec::Vllm(_) if g == "vllm >=0.27 WSL2" => {
            // kv = … − ratio × weights  ⇒  ratio = (kv + ratio·weights − logged)/weights
            let w = acct.weights as f64;
            ((acct.kv as f64 + current(g) * w - logged_bytes) / w, w)
        }
        EngineSpec::Vllm(_) => {
            let constant = current(g);
            (acct.kv as f64 + constant - logged_bytes, 1.0)
        }
        EngineSpec::Sglang(_) => {
            let constant = acct.context as f64;
            let mfs_slope = if acct.context == (mc::SGLANG_CONTEXT_MIB * MIB) as u64 {
                1.0
            } else {
                acct.requested as f64 / acct.total as f64
            };
            // kv = requested − weights − context·slope  ⇒  constant = (requested − weights − logged)/slope
            ((acct.kv as f64 + constant - logged_bytes) / mfs_slope, mfs_slope)
        }
    };
    Derived { tokens, behaviour, unexplained, cell, slope }
}

/// Each fitted constant's group: the rows whose pool it moves.
fn group_of(row: &Row) -> &'static str {
    if row.engine != "vllm" {
        return "sglang";
    }
    if row.version >= Version::new(0, 27, 0) && row.wsl2 {
        return "vllm >=0.27 WSL2";
    }
    // The runner as the release resolves it (checked against the row's own statement in the test).
    let v2 = row.runner == Some(true) || (row.runner.is_none() && row.version >= Version::new(0, 25, 0));
    match (v2, row.tp > 1, row.pcie) {
        (true, false, _) => "vllm V2 tp1",
        (true, true, false) => "vllm V2 tp>1",
        (true, true, true) => "vllm V2 tp>1 PCIe",
        (false, false, _) => "vllm V1 tp1",
        (false, true, false) => "vllm V1 tp>1",
        (false, true, true) => "vllm V1 tp>1 PCIe",
    }
}

/// The code's value, in bytes, of the constant (or sum of constants) a group fits.
fn current(g: &str) -> f64 {
    match g {
        "vllm V1 tp1" => mc::VLLM_NON_TORCH_MIB * MIB,
        "vllm V1 tp>1" => (mc::VLLM_NON_TORCH_MIB + mc::VLLM_NON_TORCH_TP_MIB) * MIB,
        "vllm V2 tp1" => config::VLLM_V2_NON_TORCH_MIB * MIB,
        "vllm V2 tp>1" => (config::VLLM_V2_NON_TORCH_MIB + mc::VLLM_NON_TORCH_TP_MIB) * MIB,
        // No constant of their own: the TP 1 constant, the TP > 1 extra not charged over PCIe.
        "vllm V1 tp>1 PCIe" => mc::VLLM_NON_TORCH_MIB * MIB,
        "vllm V2 tp>1 PCIe" => config::VLLM_V2_NON_TORCH_MIB * MIB,
        // A ratio: bytes per byte of weights.
        "vllm >=0.27 WSL2" => config::VLLM_WDDM_CONSUMED_PER_WEIGHT_BYTE,
        _ => mc::SGLANG_CONTEXT_MIB * MIB,
    }
}

#[test]
fn kv_pools_derived_from_memory_match_the_start_up_log_corpus() {
    let all = corpus();
    let rows: Vec<&Row> = all.iter().filter_map(|r| r.as_ref().ok()).collect();
    let derived: Vec<Derived> = rows.iter().map(|r| derive(r)).collect();
    println!("skipped (cannot be run as logged):");
    for (line, label, why) in all.iter().filter_map(|r| r.as_ref().err()) {
        println!("  line {line:>2} {label}: {why}");
    }
    // Each row's model runner, where the row states it, is the one the
    // release resolves for its model (`VllmMemoryBehaviour`).
    for (r, d) in rows.iter().zip(&derived) {
        if let (Some(stated), Some(b)) = (r.runner, d.behaviour) {
            assert_eq!(b.model_runner_v2, stated, "line {} ({}): the runner the release resolves", r.line, r.label);
        }
    }
    // Refit: each group's constant is the median of what its rows leave
    // unexplained by the derived terms.
    let groups = [
        "vllm V1 tp1",
        "vllm V1 tp>1",
        "vllm V2 tp1",
        "vllm V2 tp>1",
        "vllm V1 tp>1 PCIe",
        "vllm V2 tp>1 PCIe",
        "vllm >=0.27 WSL2",
        "sglang",
    ];
    // Groups judged against another group's constant (no constant of their own to refit).
    let shared = ["vllm V1 tp>1 PCIe", "vllm V2 tp>1 PCIe"];
    let fit = |g: &str, leave_out: Option<usize>| -> Option<f64> {
        let xs: Vec<f64> = rows
            .iter()
            .zip(&derived)
            .enumerate()
            .filter(|(i, (r, _))| r.complete && group_of(r) == g && Some(*i) != leave_out)
            .map(|(_, (_, d))| d.unexplained)
            .collect();
        median(xs)
    };
    let mut refit = Vec::new();
    for g in groups {
        let n = rows.iter().filter(|r| r.complete && group_of(r) == g).count();
        if let Some(f) = fit(g, None) {
            if g == "vllm >=0.27 WSL2" {
                println!("fit {g}: {f:.4} bytes per byte of weights over {n} judged row(s) (code: {})", current(g));
                if (f - current(g)).abs() > 0.002 {
                    refit.push(format!(
                        "{g}: the code's ratio ({}) is not the corpus fit ({f:.4}): refit sim::config::memory",
                        current(g)
                    ));
                }
                continue;
            }
            println!("fit {g}: constant {:.0} MiB over {n} judged row(s) (code: {:.0} MiB)", f / MIB, current(g) / MIB);
            if shared.contains(&g) {
                continue;
            }
            if (f / MIB - current(g) / MIB).abs() > 25.0 {
                refit.push(format!(
                    "{g}: the code's constant ({:.0} MiB) is not the corpus fit ({:.0} MiB): refit sim::config::memory",
                    current(g) / MIB,
                    f / MIB
                ));
            }
        }
    }
    // The CUDA-graph constant: least squares through the origin of the
    // logged capture memory on layers × capture sizes (the V1 runner's rows:
    // its estimate is what the constant stands for).
    let mut num = 0.0;
    let mut den = 0.0;
    for r in &rows {
        if let (Some(g), true) = (r.logged_graph_gib, r.engine == "vllm" && group_of(r).starts_with("vllm V1")) {
            let spec = config::resolve(
                &config::from_value(r.scenario.clone(), "").unwrap(),
                &sim::builtin::resources().unwrap(),
            )
            .unwrap();
            let (seqs, batched) = match &spec.engine {
                EngineSpec::Vllm(c) => (c.max_num_seqs, c.max_num_batched_tokens),
                _ => unreachable!(),
            };
            let x = f64::from(spec.model.num_layers)
                * f64::from(config::vllm_capture_sizes(r.version, &spec.gpu, seqs, batched));
            num += g * 1024.0 * x;
            den += x * x;
        }
    }
    if den > 0.0 {
        println!(
            "fit CUDA graphs: {:.3} MiB per layer per capture size (code: {})",
            num / den,
            mc::VLLM_GRAPH_MIB_PER_LAYER_SIZE
        );
        if (num / den - mc::VLLM_GRAPH_MIB_PER_LAYER_SIZE).abs() >= 0.05 {
            refit.push("the CUDA-graph constant is not the corpus fit".into());
        }
    }

    println!(
        "{:>4}  {:<70} {:>10} {:>10} {:>8} {:>8}",
        "line",
        "row (* = reported only: fraction not stated, no verbatim log line, or no GPU card)",
        "logged",
        "derived",
        "err %",
        "LOO %"
    );
    let mut loo_errs = Vec::new();
    for (i, (r, d)) in rows.iter().zip(&derived).enumerate() {
        let err = (d.tokens - r.logged_tokens) / r.logged_tokens * 100.0;
        let g = group_of(r);
        // A shared group's rows are out of the fit of the constant they use: in sample is left out.
        let loo = fit(g, Some(i)).filter(|_| !shared.contains(&g)).map(|f| {
            // Moving the constant by δ bytes moves the pool by −δ·slope bytes.
            let delta = f - current(g);
            let tokens = d.tokens - delta * d.slope / d.cell;
            (tokens - r.logged_tokens) / r.logged_tokens * 100.0
        });
        println!(
            "{:>4}{} {:<70} {:>10.0} {:>10.0} {:>8.2} {:>8}",
            r.line,
            if r.complete { " " } else { "*" },
            r.label.chars().take(70).collect::<String>(),
            r.logged_tokens,
            d.tokens,
            err,
            loo.map_or("n/a".to_string(), |l| format!("{l:.2}"))
        );
        if r.complete {
            loo_errs.push(loo.unwrap_or(err).abs());
        }
    }

    let mut sorted = loo_errs.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let worst = *sorted.last().unwrap();
    println!(
        "{} rows judged ({} reported only); leave-one-out |error| (in-sample where a group has one row): median {median:.2}%, worst {worst:.2}%",
        sorted.len(),
        rows.len() - sorted.len()
    );
    assert!(refit.is_empty(), "{}", refit.join("\n"));
    assert!(sorted.len() >= 15, "the corpus must have at least 15 judged rows, has {}", sorted.len());
    // Targets (issue #11): median ≤ 2%, worst ≤ 5%, judged leave-one-out
    // (in sample for a group with one judged row: SGLang today).
    assert!(median <= 2.0, "median |error| {median:.2}% > 2%");
    assert!(worst <= 5.0, "worst |error| {worst:.2}% > 5%");
    let _ = GIB;
}
