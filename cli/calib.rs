//! `servesim calibrate` (live probes or existing results → a fitted profile)
//! and `servesim check` (the same sweep measured and predicted, side by side).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use calibrate::bench;
use calibrate::fit::{self, FitPoint, Free, TARGETS};
use calibrate::server::{Kind, ServerInfo};
use clap::Args;
use serde_json::{json, Map, Value};
use sim::cards::ModelCard;
use sim::config::SimSpec;
use sim::sweep::{find_knee, KneePoint};

use crate::live::{self, ServerArgs, WorkloadArgs};
use crate::load::{self, RawScenario};

/// A model card from a Hugging Face `config.json` in `dir` (the server's model folder).
pub fn model_card_from_dir(dir: &Path, id: &str) -> Result<ModelCard, String> {
    let p = dir.join("config.json");
    let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: cannot read: {e}", p.display()))?;
    let c: Value = serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", p.display()))?;
    let u = |k: &str| c.get(k).and_then(Value::as_u64).map(|v| v as u32);
    let field = |k: &str| u(k).ok_or_else(|| format!("{}: no {k}", p.display()));
    let hidden = field("hidden_size")?;
    let layers = field("num_hidden_layers")?;
    let heads = field("num_attention_heads")?;
    let kv = u("num_key_value_heads").unwrap_or(heads);
    let head_dim = u("head_dim").unwrap_or(hidden / heads.max(1));
    let inter = u("intermediate_size").unwrap_or(4 * hidden);
    let vocab = field("vocab_size")?;
    let tied = c.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false);
    let dtype = c.get("torch_dtype").or(c.get("dtype")).and_then(Value::as_str).unwrap_or("bfloat16").to_string();
    let (h, l, hd, kvh, hh, i, v) =
        (hidden as u64, layers as u64, head_dim as u64, kv as u64, heads as u64, inter as u64, vocab as u64);
    // Llama-style: embeddings (+ untied head) + per layer q, k, v, o, gated MLP, 2 norms; final norm.
    let per_layer = h * hh * hd + 2 * h * kvh * hd + hh * hd * h + 3 * h * i + 2 * h;
    let params = v * h * if tied { 1 } else { 2 } + l * per_layer + h;
    Ok(ModelCard {
        id: id.to_string(),
        hf_repo: None,
        num_parameters: params,
        num_layers: layers,
        hidden_size: hidden,
        intermediate_size: Some(inter),
        num_attention_heads: heads,
        num_kv_heads: kv,
        head_dim,
        vocab_size: vocab,
        tie_word_embeddings: Some(tied),
        dtype,
        quantization: None,
        max_position_embeddings: u("max_position_embeddings"),
        sources: vec![p.display().to_string()],
        notes: Some("read from the served model's config.json; parameters counted with the Llama formula".into()),
    })
}

/// vLLM prints its non-default arguments at start-up; pull the scheduler's from a log.
pub fn vllm_args_from_log(path: &Path) -> Result<Map<String, Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("--server-log {}: {e}", path.display()))?;
    let mut out = Map::new();
    let line = text.lines().find(|l| l.contains("non-default args:")).unwrap_or("");
    for key in ["max_num_seqs", "max_num_batched_tokens", "long_prefill_token_threshold", "block_size", "max_model_len"]
    {
        let pat = format!("'{key}': ");
        if let Some(i) = line.find(&pat) {
            let num: String = line[i + pat.len()..].chars().take_while(|c| c.is_ascii_digit()).collect();
            if let Ok(n) = num.parse::<u64>() {
                out.insert(key.into(), n.into());
            }
        }
    }
    Ok(out)
}

/// How to describe the live server as a scenario.
#[derive(Args, Debug, Clone)]
pub struct DeriveArgs {
    /// Hardware card id (models/gpu/); default `cpu-host` (the development machines).
    #[arg(long)]
    pub hardware: Option<String>,
    /// A model card id (models/model/) instead of the served model's config.json.
    #[arg(long)]
    pub model_card: Option<String>,
    /// The server's start-up log: vLLM's non-default arguments (max_num_seqs, ...) are read from it.
    #[arg(long)]
    pub server_log: Option<PathBuf>,
    /// Override a field of the derived scenario (repeatable), e.g. `--set engine.max_num_seqs=32`.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub sets: Vec<String>,
}

/// The scenario that describes the live server, with the given workload.
pub fn derive_scenario(info: &ServerInfo, d: &DeriveArgs, workload: &Value) -> Result<RawScenario, String> {
    let mut engine = Map::new();
    match info.kind {
        Kind::Vllm => {
            engine.insert("kind".into(), "vllm".into());
            if let Some(v) = &info.version {
                engine.insert("version".into(), v.split('+').next().unwrap_or(v).into());
            }
            if let Some(n) = info.num_gpu_blocks {
                engine.insert("num_gpu_blocks_override".into(), n.into());
            }
            if let Some(b) = info.kv_granularity {
                engine.insert("block_size".into(), b.into());
            }
            if let Some(p) = info.prefix_caching {
                engine.insert("enable_prefix_caching".into(), p.into());
            }
            if let Some(m) = info.max_model_len {
                engine.insert("max_model_len".into(), m.into());
            }
            if let Some(log) = &d.server_log {
                for (k, v) in vllm_args_from_log(log)? {
                    engine.insert(k, v);
                }
            }
        }
        Kind::Sglang => {
            engine.insert("kind".into(), "sglang".into());
            if let Some(v) = &info.version {
                engine.insert("version".into(), v.clone().into());
            }
            if let Some(t) = info.kv_capacity_tokens {
                engine.insert("max_total_tokens".into(), t.into());
            }
            if let Some(args) = &info.server_args {
                for k in [
                    "max_running_requests",
                    "chunked_prefill_size",
                    "max_prefill_tokens",
                    "page_size",
                    "schedule_policy",
                    "disable_radix_cache",
                    "enable_mixed_chunk",
                    "disable_overlap_schedule",
                    "context_length",
                    "schedule_conservativeness",
                ] {
                    if let Some(v) = args.get(k).filter(|v| !v.is_null()) {
                        engine.insert(k.into(), v.clone());
                    }
                }
            }
            if !engine.contains_key("context_length") {
                if let Some(m) = info.max_model_len {
                    engine.insert("context_length".into(), m.into());
                }
            }
        }
        Kind::Unknown => {
            return Err("--base-url: the server is neither vLLM nor SGLang (no vllm:* or sglang:* metrics)".into())
        }
    }
    let model = match (&d.model_card, &info.model_root) {
        (Some(id), _) => Value::from(id.clone()),
        (None, Some(root)) if Path::new(root).join("config.json").exists() => {
            serde_json::to_value(model_card_from_dir(Path::new(root), info.model.as_deref().unwrap_or("served-model"))?)
                .expect("card")
        }
        _ => {
            return Err(
                "--model-card: the server's model folder is not readable here; name a card from models/model/".into()
            )
        }
    };
    let mut json = json!({
        "version": 1,
        "name": format!("live {}", info.base_url),
        "engine": engine,
        "model": model,
        "hardware": d.hardware.clone().unwrap_or_else(|| "cpu-host".into()),
        "workload": workload,
    });
    for s in &d.sets {
        sim::config::apply_set(&mut json, s).map_err(|e| format!("--set {s}: {e}"))?;
    }
    Ok(RawScenario {
        origin: format!("the scenario derived from {}", info.base_url),
        base_dir: std::env::current_dir().unwrap_or_default(),
        json,
    })
}

fn measured_targets(point: &Map<String, Value>) -> Vec<Option<f64>> {
    TARGETS.iter().map(|t| point.get(*t).and_then(Value::as_f64).filter(|v| v.is_finite() && *v > 0.0)).collect()
}

#[derive(Args, Debug)]
pub struct CalibrateArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// The engine you expect (`vllm` or `sglang`); checked against what the server says.
    #[arg(long)]
    pub engine: Option<String>,
    #[command(flatten)]
    pub derive: DeriveArgs,
    /// Fit from existing `vllm bench serve --save-result` JSON or `sglang.bench_serving` JSONL files instead of probing.
    #[arg(long, num_args = 1..)]
    pub from_results: Vec<PathBuf>,
    /// The scenario those results were measured with (offline): one for all files, or one per
    /// file (paired in order; for traces, whose arrivals differ per run).
    #[arg(long, num_args = 1..)]
    pub scenario: Vec<PathBuf>,
    /// Where to write the profile (JSON).
    #[arg(long)]
    pub out: PathBuf,
    /// Where the probes' per-request results go.
    #[arg(long)]
    pub result_dir: Option<PathBuf>,
    /// Largest concurrency of the decode probes.
    #[arg(long, default_value_t = 16)]
    pub max_probe_concurrency: u32,
    /// Seconds of load (short requests at concurrency 4, not measured) before the probes: an
    /// engine that just started runs its first minutes slower (live CPU runs in VALIDATION.md:
    /// SGLang's one-request decode steps 18.6 ms while calibrating after a 30 s warm-up, 13.9 ms
    /// in the check minutes later; after 180 s, the check met its TPOT and throughput targets),
    /// and probes taken then fit a slower engine than the one a later check meets. 0: none.
    #[arg(long, default_value_t = 180.0)]
    pub warmup_s: f64,
    /// Run the probe plan this many times, round the plan (every probe, then every probe
    /// again, with fresh prompts), and fit on all the runs: a host whose speed drifts then
    /// weighs on every probe alike.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Simulator evaluations the fit may use.
    #[arg(long, default_value_t = 1500)]
    pub max_evals: usize,
    /// Skip the speed reference (one request at a fixed shape, well under a second on a GPU)
    /// before each probe.
    #[arg(long)]
    pub no_speed_reference: bool,
    /// vLLM's per-step log (`--enable-logging-iteration-details`): step costs are then fitted by
    /// linear least squares on each real step's composition. Default: the --server-log, if it has such lines.
    #[arg(long)]
    pub step_log: Option<PathBuf>,
}

/// The probe plan: (name, workload section) pairs sized to the server.
fn probe_plan(max_len: u32, kv_tokens: u64, max_running: u32, cap: u32) -> Vec<(String, Value)> {
    let mut plan = Vec::new();
    let out = 4u32;
    for l in [16u32, 256, 768, 1536] {
        if u64::from(l + out) * 2 > kv_tokens || l + out > max_len {
            continue;
        }
        plan.push((
            format!("prefill-{l}"),
            json!({"dataset_name": "random", "random_input_len": l, "random_output_len": out, "num_prompts": 4, "max_concurrency": 1, "ignore_eos": true, "initial_test_request": false}),
        ));
    }
    // Decode probes at two context lengths, so that per-token and per-context costs separate.
    for inp in [64u32, 512] {
        let o = 32u32;
        let per = u64::from(inp + o);
        // The per-sequence cost shows in the slope over batch sizes: the largest batch the cap allows too.
        let mut sizes = vec![1u32, 4, 16];
        if cap > 16 {
            sizes.push(cap);
        }
        for c in sizes {
            if c > cap || c > max_running || u64::from(c) * per.div_ceil(128) * 128 > kv_tokens || inp + o > max_len {
                continue;
            }
            plan.push((
                format!("decode-{c}x{inp}"),
                json!({"dataset_name": "random", "random_input_len": inp, "random_output_len": o, "num_prompts": 2 * c, "max_concurrency": c, "ignore_eos": true, "initial_test_request": false}),
            ));
        }
    }
    let mixed_c = (cap / 2).clamp(2, 8).min(max_running);
    plan.push((
        format!("mixed-{mixed_c}"),
        json!({"dataset_name": "random", "random_input_len": 384, "random_output_len": 24, "random_range_ratio": 0.5, "num_prompts": 4 * mixed_c, "max_concurrency": mixed_c, "ignore_eos": true, "initial_test_request": false}),
    ));
    // Fresh prompts for every probe: a probe must not hit the prefix cache
    // that an earlier probe filled (the simulator runs each probe cold).
    for (i, (_, w)) in plan.iter_mut().enumerate() {
        w["seed"] = (1000 + i as u64).into();
    }
    plan
}

fn live_free() -> Vec<Free> {
    ["step_us", "prefill_token_us", "decode_token_us", "prefill_attention_us", "decode_kv_us", "request_ingress_us"]
        .into_iter()
        .map(Free::one)
        .collect()
}

fn group_free(n_points: usize) -> Vec<Free> {
    let prefill = Free { name: "prefill scale".into(), coefficients: vec!["prefill_token_us", "prefill_attention_us"] };
    let decode = Free {
        name: "decode scale".into(),
        coefficients: vec!["step_us", "per_seq_us", "decode_token_us", "decode_kv_us"],
    };
    match n_points {
        0 | 1 => vec![prefill, decode],
        2 => vec![prefill, decode, Free::one("request_ingress_us")],
        _ => ["step_us", "prefill_token_us", "decode_token_us", "decode_kv_us", "request_ingress_us"]
            .into_iter()
            .map(Free::one)
            .collect(),
    }
}

/// `opts` for a run whose requests are not recorded: a warm-up or a speed reference.
fn unrecorded(opts: &bench::BenchOptions) -> bench::BenchOptions {
    let mut o = opts.clone();
    o.jsonl = None;
    o.poll_interval = None;
    o.on_done = None;
    o
}

/// Measures a workload against the server after a short warm-up of the same shape.
async fn measure(
    opts: &bench::BenchOptions,
    info: &ServerInfo,
    w: &sim::workload::Workload,
    warm: bool,
) -> (Map<String, Value>, bench::BenchRun) {
    if warm {
        // Warm up at this shape: SGLang (and, less, vLLM) is slow on the first batches of a new shape.
        let mut wu = w.clone();
        let n = wu.max_concurrency.unwrap_or(1).max(1) as usize;
        wu.requests.truncate(n.min(wu.requests.len()));
        for (i, r) in wu.requests.iter_mut().enumerate() {
            r.output_key ^= 0x5eed;
            r.prompt[0].key ^= 0xa11ce + i as u64;
            r.arrival_ns = 0;
        }
        wu.initial_test = None;
        wu.warmups.clear();
        let _ = bench::run(&unrecorded(opts), &wu).await;
    }
    let pb = crate::plot::progress(w.requests.len() as u64, "requests");
    let pb2 = pb.clone();
    let mut o = opts.clone();
    o.on_done = Some(bench::OnDone(std::sync::Arc::new(move || pb2.inc(1))));
    let run = bench::run(&o, w).await;
    pb.finish_and_clear();
    (live::measured_json(info, w, &run), run)
}

/// The speed reference: one fixed shape (one request at a time, 64-token prompts, 32 output
/// tokens, 2 requests), measured before every probe of a calibration and before every run of
/// a check point. Its mean ITL is the engine's own decode step at that shape: its spread while
/// calibrating, and its move between calibration and check, say whether the engine (or the
/// host under it) held one speed. A short run, it is an indicator, not a correction: on the
/// 2-core development machines it ranged over ±30% within one calibration, and scaling runs
/// by it made their errors worse (VALIDATION.md, third round).
pub const SPEED_REFERENCE: (u32, u32, u32) = (64, 32, 2);

/// The largest move of the speed reference between calibration and check that still lets a
/// check's verdict be told from the machine: the tightest of the targets.
pub const SPEED_REFERENCE_TOLERANCE: f64 = 0.05;

fn speed_reference_workload() -> Value {
    let (input, output, n) = SPEED_REFERENCE;
    json!({"dataset_name": "random", "random_input_len": input, "random_output_len": output, "num_prompts": n,
           "max_concurrency": 1, "ignore_eos": true, "initial_test_request": false})
}

/// Measures the speed reference (the `k`-th of a run: fresh prompts each time); its mean ITL
/// in ms, or None when a request failed.
async fn speed_reference(
    opts: &bench::BenchOptions,
    info: &ServerInfo,
    derive: &DeriveArgs,
    k: u64,
) -> Result<Option<f64>, String> {
    let mut wl = speed_reference_workload();
    // Seeds apart from every other run's (probes 1000 + i, warm-up 7,000,000 + k, check repeats
    // seed + 1,000,003·k): the same seed draws the same leading tokens, which a prefix cache serves.
    wl["seed"] = (500_000_000 + k).into();
    let spec = load::resolve(&derive_scenario(info, derive, &wl)?)?.1;
    let w = sim::workload::generate(&spec.workload);
    let run = bench::run(&unrecorded(opts), &w).await;
    if run.interrupted {
        return Err("interrupted".into());
    }
    if run.outcomes.iter().any(|r| !r.success) {
        return Ok(None);
    }
    Ok(live::measured_json(info, &w, &run)
        .get("mean_itl_ms")
        .and_then(Value::as_f64)
        .filter(|v| v.is_finite() && *v > 0.0))
}

pub fn calibrate(a: CalibrateArgs) -> Result<ExitCode, String> {
    if !a.warmup_s.is_finite() || a.warmup_s < 0.0 {
        return Err(format!("--warmup-s: expected seconds, 0 or more, got {}", a.warmup_s));
    }
    if !a.from_results.is_empty() {
        return calibrate_offline(&a);
    }
    live::rt()?.block_on(async {
        let (info, mut opts) = live::connect(&a.server).await?;
        check_engine(&a.engine, &info)?;
        let kv = info.kv_capacity_tokens.ok_or("--base-url: the server does not expose its KV capacity")?;
        let max_len = info.max_model_len.unwrap_or(2048);
        let probe_scenario = derive_scenario(&info, &a.derive, &json!({"dataset_name": "random", "ignore_eos": true}))?;
        let base_spec = load::resolve(&probe_scenario)?.1;
        let plan = probe_plan(max_len, kv, base_spec.engine.max_running(), a.max_probe_concurrency);
        let dir = a.result_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("servesim-calibrate"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("--result-dir {}: {e}", dir.display()))?;
        if a.warmup_s > 0.0 {
            let raw = derive_scenario(
                &info,
                &a.derive,
                &json!({"dataset_name": "random", "random_input_len": 64, "random_output_len": 16, "num_prompts": 8,
                        "max_concurrency": 4, "ignore_eos": true, "initial_test_request": false}),
            )?;
            let spec = load::resolve(&raw)?.1;
            let o = unrecorded(&opts);
            let t0 = std::time::Instant::now();
            let mut k = 0u64;
            eprintln!("warming the engine up for {:.0} s", a.warmup_s);
            while t0.elapsed().as_secs_f64() < a.warmup_s {
                let mut ws = spec.workload.clone();
                // Seeds far from the probes' (1000 + i): the same seed draws the same leading
                // tokens, which the prefix cache would then serve to a probe.
                ws.seed = 7_000_000 + k;
                k += 1;
                let run = bench::run(&o, &sim::workload::generate(&ws)).await;
                if run.outcomes.iter().all(|r| !r.success) {
                    return Err("warm-up: every request failed; is the server answering?".into());
                }
                if run.interrupted {
                    return Err("interrupted".into());
                }
            }
        }
        let mut points = Vec::new();
        let runs: Vec<(String, Value)> = (0..a.repeat.max(1))
            .flat_map(|k| {
                plan.iter().map(move |(name, wl)| {
                    let mut wl = wl.clone();
                    if k == 0 {
                        return (name.clone(), wl);
                    }
                    wl["seed"] = (wl["seed"].as_u64().unwrap_or(0) + 100 * u64::from(k)).into();
                    (format!("{name}#{}", k + 1), wl)
                })
            })
            .collect();
        // The speed reference measured before each probe (None where it failed or is off).
        let mut reference: Vec<Option<f64>> = Vec::new();
        for (name, wl) in &runs {
            let raw = derive_scenario(&info, &a.derive, wl)?;
            let spec = load::resolve(&raw)?.1;
            let w = sim::workload::generate(&spec.workload);
            reference.push(if a.no_speed_reference {
                None
            } else {
                speed_reference(&opts, &info, &a.derive, reference.len() as u64).await?
            });
            opts.jsonl = Some(dir.join(format!("{name}.requests.jsonl")));
            let (point, run) = measure(&opts, &info, &w, true).await;
            let failed = run.outcomes.iter().filter(|o| !o.success).count();
            eprintln!(
                "probe {name}: mean TTFT {:.1} ms, mean ITL {:.2} ms, {} failed",
                point.get("mean_ttft_ms").and_then(Value::as_f64).unwrap_or(f64::NAN),
                point.get("mean_itl_ms").and_then(Value::as_f64).unwrap_or(f64::NAN),
                failed
            );
            if failed > 0 {
                return Err(format!("probe {name}: {failed} requests failed (see {})", dir.join(format!("{name}.requests.jsonl")).display()));
            }
            let mut measured = measured_targets(&point);
            let concurrent = wl["max_concurrency"].as_u64().is_some_and(|c| c > 1);
            if concurrent {
                // A decode probe's TTFT is the phase at which the client's closed-loop arrivals
                // meet the engine's steps (when a wave of requests reaches the server decides
                // how many share the first prefill step), which the simulator replays only on
                // average; its TPOT, ITL and E2EL are what it measures. The c=1 probes fit TTFT.
                measured[0] = None;
            }
            // At c=1 the closed loop is exact; replaying would only add the client's gaps.
            let replay = if concurrent {
                let send: Vec<f64> = run.outcomes.iter().map(|o| o.start_s).collect();
                fit::replay_workload(&w, &send)
            } else {
                None
            };
            points.push(FitPoint { name: name.clone(), spec, measured, replay });
        }
        let ref_values: Vec<f64> = reference.iter().flatten().copied().collect();
        let ref_median = median(ref_values.clone());
        let prior = points[0].spec.cost.clone();
        // Teacher forcing on the engine's own step log, when there is one.
        let step_log = a.step_log.clone().or(a.derive.server_log.clone());
        let step_fit = match &step_log {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| format!("--step-log {}: {e}", p.display()))?;
                fit::fit_step_log(&fit::parse_step_log(&text))
            }
            None => None,
        };
        let (start, free, projected): (_, Vec<Free>, &[&'static str]) = match &step_fit {
            Some(sf) => {
                let mut c = prior.clone();
                let mut o = sim::cost::CostCoefficients::default();
                for (k, v) in ["step_us", "per_seq_us", "prefill_token_us", "decode_token_us"].iter().zip(sf.coefficients) {
                    o.set(k, v);
                }
                c.overlay(&o, sim::cost::CoefficientSource::Profile);
                eprintln!("step log: {} steps, R² {:.4}, residual std {:.2} ms", sf.rows, sf.r2, sf.residual_std_ms);
                // The log times the model only and does not give context lengths: the step constant
                // (scheduler, output handling), the context terms and ingress come from the requests.
                (c, vec![Free::one("step_us"), Free::one("decode_kv_us")], &["request_ingress_us", "prefill_attention_us"])
            }
            // Without a step log, the prefill terms and the ingress come from the lone requests' TTFT.
            None => (
                prior.clone(),
                vec![Free::one("step_us"), Free::one("decode_token_us"), Free::one("decode_kv_us")],
                &["prefill_token_us", "request_ingress_us", "prefill_attention_us"],
            ),
        };
        let projection = fit::Projection::new(&points, projected, &prior);
        // Too few lone requests to solve them: searched with the rest.
        let free = match &projection {
            Some(_) => free,
            None => {
                let mut f = free;
                f.extend(projected.iter().map(|c| Free::one(c)));
                f
            }
        };
        // First the decode terms as one scale, so that the coefficient-by-coefficient fit starts
        // near the engine rather than at the prior, which can be off several-fold per term (a
        // rugged objective lets Nelder–Mead wander off in a far start).
        let start = if step_fit.is_none() {
            let coarse = vec![Free { name: "decode scale".into(), coefficients: vec!["step_us", "decode_token_us", "decode_kv_us"] }];
            fit::fit(&points, &start, &coarse, projection.as_ref(), a.max_evals / 3).cost
        } else {
            start
        };
        let mut r = fit::fit(&points, &start, &free, projection.as_ref(), a.max_evals);
        if step_fit.is_some() {
            // The step log determined these too.
            for c in ["per_seq_us", "prefill_token_us", "decode_token_us"] {
                r.free.push(Free { name: format!("{c} (step log)"), coefficients: vec![c] });
            }
            r.factors.extend([1.0, 1.0, 1.0]);
        }
        let linear = projection.as_ref().and_then(|p| p.solve(&points, &r.cost));
        if let (Some(p), Some(l)) = (&projection, &linear) {
            for c in &p.names {
                r.free.push(Free { name: format!("{c} (solved on the lone requests' TTFT)"), coefficients: vec![*c] });
                r.factors.push(1.0);
            }
            eprintln!(
                "lone requests' TTFT: {} probes, R² {:.4}: {}",
                l.points,
                l.r2,
                p.names.iter().zip(&l.values).map(|(n, v)| format!("{n} {v:.3}")).collect::<Vec<_>>().join(", ")
            );
        }
        let engine = json!({"kind": live::meta_of(&info).engine, "version": info.version, "model": info.model, "kv_capacity_tokens": kv});
        let mut extra = Map::new();
        if let Some(sf) = &step_fit {
            extra.insert(
                "step_log_fit".into(),
                json!({"file": step_log.as_ref().map(|p| p.display().to_string()), "rows": sf.rows, "r2": sf.r2, "residual_std_ms": sf.residual_std_ms,
                       "step_us": sf.coefficients[0], "per_seq_us": sf.coefficients[1], "prefill_token_us": sf.coefficients[2], "decode_token_us": sf.coefficients[3]}),
            );
        }
        if let (Some(p), Some(l)) = (&projection, &linear) {
            let mut solved = Map::new();
            for (n, v) in p.names.iter().zip(&l.values) {
                solved.insert((*n).into(), (*v).into());
            }
            extra.insert(
                "lone_request_fit".into(),
                json!({"method": "solved at each step of the search by least squares on the concurrency-1 probes' mean TTFT in ms (variable projection)",
                       "points": l.points, "r2": l.r2, "coefficients": solved}),
            );
        }
        if let Some(med) = ref_median {
            let (lo, hi) = ref_values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
            eprintln!(
                "speed reference (mean ITL at one request, {} runs, one before each probe): median {med:.2} ms, {lo:.2} to {hi:.2}",
                ref_values.len()
            );
            extra.insert(
                "speed_reference".into(),
                json!({"workload": speed_reference_workload(), "mean_itl_ms": reference, "median_mean_itl_ms": med}),
            );
        }
        extra.insert("fit_workloads".into(), Value::Array(plan.iter().map(|(n, w)| json!({"name": n, "workload": w})).collect()));
        let profile = fit::profile_json(&r, &points, "live", &engine, &prior, extra);
        write_profile(&a.out, &profile)?;
        print!("{}", profile_summary(&profile));
        Ok(ExitCode::SUCCESS)
    })
}

fn check_engine(expected: &Option<String>, info: &ServerInfo) -> Result<(), String> {
    if let Some(e) = expected {
        let got = live::meta_of(info).engine;
        if *e != got {
            return Err(format!("--engine {e}: the server at {} is {got}", info.base_url));
        }
    }
    Ok(())
}

fn write_profile(path: &Path, profile: &Value) -> Result<(), String> {
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).map_err(|e| format!("--out {}: {e}", path.display()))?;
    }
    std::fs::write(path, serde_json::to_string_pretty(profile).expect("json"))
        .map_err(|e| format!("--out {}: {e}", path.display()))
}

/// A readable summary of a profile.
pub fn profile_summary(p: &Value) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Fitted cost profile ({}):", p["source"].as_str().unwrap_or("?"));
    if let Some(c) = p["coefficients"].as_object() {
        for (k, v) in c {
            let src = p["coefficient_sources"][k].as_str().unwrap_or("?");
            let prior = p["prior"][k].as_f64().unwrap_or(f64::NAN);
            let _ = writeln!(s, "  {k:<22} {:>12.4} µs   ({src}; prior {prior:.4})", v.as_f64().unwrap_or(f64::NAN));
        }
    }
    let _ = writeln!(s, "R² per metric: {}", p["fit"]["r2"]);
    if let Some(pts) = p["fit"]["points"].as_array() {
        for pt in pts {
            let _ = writeln!(s, "  {:<14} residuals {}", pt["name"].as_str().unwrap_or("?"), pt["relative_residual"]);
        }
    }
    if let Some(rc) = p["roofline_check"].as_array() {
        for r in rc.iter().filter(|r| r["beats_physics"] == true) {
            let _ = writeln!(
                s,
                "WARNING: {} = {} µs beats the hardware card's roofline floor of {} µs: the fit implies more than the card's peak. Check the hardware card or the data.",
                r["coefficient"], r["fitted_us"], r["roofline_floor_us"]
            );
        }
    }
    s
}

/// Reads a `--save-result` JSON (vLLM or ours) or `sglang.bench_serving` JSONL: one or more load points.
fn read_results(path: &Path) -> Result<Vec<Map<String, Value>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let mut out = Vec::new();
    let values: Vec<Value> = match serde_json::from_str::<Value>(&text) {
        Ok(v) => vec![v],
        Err(_) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("{}:{}: not JSON: {e}", path.display(), i + 1)))
            .collect::<Result<_, _>>()?,
    };
    for v in values {
        let mut m = v.as_object().cloned().ok_or(format!("{}: expected a JSON object", path.display()))?;
        // sglang.bench_serving names E2E latency differently.
        if let Some(e) = m.get("mean_e2e_latency_ms").cloned() {
            m.entry("mean_e2el_ms").or_insert(e);
        }
        if !m.contains_key("mean_ttft_ms") {
            return Err(format!(
                "{}: no mean_ttft_ms: not a vllm bench serve --save-result or sglang.bench_serving result",
                path.display()
            ));
        }
        out.push(m);
    }
    Ok(out)
}

fn calibrate_offline(a: &CalibrateArgs) -> Result<ExitCode, String> {
    if a.scenario.is_empty() {
        return Err("--from-results needs --scenario: the setup the results were measured on".into());
    }
    if a.scenario.len() != 1 && a.scenario.len() != a.from_results.len() {
        return Err(format!(
            "--scenario: give one scenario, or one per results file ({}), got {}",
            a.from_results.len(),
            a.scenario.len()
        ));
    }
    let scenario = &a.scenario[0];
    let mut points = Vec::new();
    for (fi, f) in a.from_results.iter().enumerate() {
        let base = load::read_raw(Some(&a.scenario[if a.scenario.len() == 1 { 0 } else { fi }]))?;
        for (k, r) in read_results(f)?.into_iter().enumerate() {
            let mut raw = base.clone();
            let mut sets = Vec::new();
            match r.get("max_concurrency") {
                Some(Value::Number(n)) => sets.push(format!("workload.max_concurrency={n}")),
                Some(Value::Null) => {
                    if let Some(o) = raw.json["workload"].as_object_mut() {
                        o.remove("max_concurrency");
                    }
                }
                _ => {}
            }
            match r.get("request_rate") {
                Some(Value::Number(n)) => sets.push(format!("workload.request_rate={n}")),
                Some(Value::String(s)) => sets.push(format!("workload.request_rate={s}")),
                _ => {}
            }
            if let Some(n) = r.get("num_prompts").or(r.get("completed")).and_then(Value::as_u64) {
                sets.push(format!("workload.num_prompts={n}"));
            }
            load::apply_overrides(&mut raw, &sets, None)?;
            let spec = load::resolve(&raw)?.1;
            points.push(FitPoint {
                name: format!("{}#{k}", f.display()),
                spec,
                measured: measured_targets(&r),
                replay: None,
            });
        }
    }
    if points.is_empty() {
        return Err("--from-results: no load point found".into());
    }
    let prior = points[0].spec.cost.clone();
    let distinct: std::collections::BTreeSet<String> = points
        .iter()
        .map(|p| format!("{:?}/{:?}", p.spec.workload.max_concurrency, p.spec.workload.request_rate))
        .collect();
    let free = group_free(distinct.len());
    let r = fit::fit(&points, &prior, &free, None, a.max_evals);
    let engine = json!({"kind": points[0].spec.engine.kind(), "version": points[0].spec.engine.version().to_string(), "model": points[0].spec.model.id});
    let mut extra = Map::new();
    extra.insert(
        "from_results".into(),
        Value::Array(a.from_results.iter().map(|p| Value::from(p.display().to_string())).collect()),
    );
    extra.insert("scenario".into(), scenario.display().to_string().into());
    if distinct.len() < 3 {
        extra.insert(
            "note".into(),
            format!(
                "{} distinct load point(s): the prior's shape is kept and only {} fitted",
                distinct.len(),
                free.iter().map(|f| f.name.clone()).collect::<Vec<_>>().join(", ")
            )
            .into(),
        );
    }
    let profile = fit::profile_json(&r, &points, "results", &engine, &prior, extra);
    write_profile(&a.out, &profile)?;
    print!("{}", profile_summary(&profile));
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[arg(long)]
    pub engine: Option<String>,
    /// A fitted profile (from `servesim calibrate`).
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Fit on the measured points at these concurrencies instead (the verdict is on the others).
    #[arg(long, value_name = "N,N,...")]
    pub fit_on: Option<String>,
    #[command(flatten)]
    pub derive: DeriveArgs,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[arg(long, value_name = "N,N,...", default_value = "1,4,16,64")]
    pub concurrency: String,
    /// Prompts per point (one value, or one per concurrency).
    #[arg(long, value_name = "N[,N,...]")]
    pub num_prompts_per_point: Option<String>,
    #[arg(long)]
    pub result_dir: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
    #[arg(long, default_value_t = 800)]
    pub max_evals: usize,
    /// Write measured against predicted throughput and TTFT as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<String>,
    /// Measure each point this many times (fresh prompts each time); judge on the mean, report the spread.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Skip the speed reference before each point (run when the profile has one).
    #[arg(long)]
    pub no_speed_reference: bool,
}

/// The mean of repeated measurements of a point, and each metric's relative
/// spread ((max − min) / mean) across them.
fn mean_of_runs(runs: &[Map<String, Value>]) -> (Map<String, Value>, Map<String, Value>) {
    let mut mean = runs[0].clone();
    let mut spread = Map::new();
    if runs.len() < 2 {
        return (mean, spread);
    }
    for (k, v) in &runs[0] {
        if !v.is_number() {
            continue;
        }
        let xs: Vec<f64> = runs.iter().filter_map(|r| r.get(k).and_then(Value::as_f64)).collect();
        let m = xs.iter().sum::<f64>() / xs.len() as f64;
        mean.insert(k.clone(), m.into());
        if CHECK_METRICS.iter().any(|(c, _)| c == k) && m.abs() > 1e-12 {
            let (lo, hi) = xs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
            spread.insert(k.clone(), ((hi - lo) / m).into());
        }
    }
    mean.insert("repeats".into(), runs.len().into());
    (mean, spread)
}

/// The metrics `check` compares, with their targets (median relative error on points not used
/// for fitting), as the calibration issue sets them: mean and p99 TTFT are judged, median TTFT
/// is shown only. In a closed loop a wave of requests splits across the engine's first steps
/// (some get the first prefill step, the rest the next), so TTFT is bimodal and its median
/// jumps between the modes on a shift of the split; the mean moves with the split smoothly.
pub const CHECK_METRICS: [(&str, f64); 10] = [
    ("output_throughput", 0.05),
    ("mean_ttft_ms", 0.10),
    ("median_ttft_ms", f64::NAN),
    ("p99_ttft_ms", 0.10),
    ("mean_tpot_ms", 0.05),
    ("mean_itl_ms", 0.05),
    ("mean_e2el_ms", 0.05),
    ("num_preemptions", f64::NAN),
    ("prefix_cache_hit_rate", f64::NAN),
    ("kv_cache_usage_peak", f64::NAN),
];

pub fn check(a: CheckArgs) -> Result<ExitCode, String> {
    let conc: Vec<u32> = crate::parse_list("--concurrency", &a.concurrency)?;
    if conc.is_empty() || conc.contains(&0) || conc.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("--concurrency: give increasing values >= 1, got {}", a.concurrency));
    }
    let per_point: Option<Vec<u32>> =
        a.num_prompts_per_point.as_deref().map(|s| crate::parse_list("--num-prompts-per-point", s)).transpose()?;
    let fit_on: Vec<u32> =
        a.fit_on.as_deref().map(|s| crate::parse_list("--fit-on", s)).transpose()?.unwrap_or_default();
    if a.profile.is_none() && fit_on.is_empty() {
        return Err("check needs --profile FILE (from servesim calibrate) or --fit-on N,...".into());
    }
    let profile: Option<Value> = match &a.profile {
        Some(p) => {
            let t = std::fs::read_to_string(p).map_err(|e| format!("--profile {}: {e}", p.display()))?;
            Some(serde_json::from_str(&t).map_err(|e| format!("--profile {}: not JSON: {e}", p.display()))?)
        }
        None => None,
    };
    let (wl_json, _) = a.workload.section_json()?;
    live::rt()?.block_on(async {
        let (info, mut opts) = live::connect(&a.server).await?;
        check_engine(&a.engine, &info)?;
        let dir = a.result_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("servesim-check"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("--result-dir {}: {e}", dir.display()))?;
        // The scenario of each point.
        let mut specs: Vec<SimSpec> = Vec::new();
        let mut raws = Vec::new();
        for (i, &c) in conc.iter().enumerate() {
            let mut w = wl_json.clone();
            w["max_concurrency"] = c.into();
            // Fresh prompts at every point: the live server's cache still holds the
            // previous points' prompts, the simulator starts each point cold.
            let seed = w.get("seed").and_then(Value::as_u64).unwrap_or(0);
            w["seed"] = (seed + i as u64).into();
            if let Some(p) = &per_point {
                w["num_prompts"] = (if p.len() == 1 {
                    p[0]
                } else {
                    *p.get(i).ok_or("--num-prompts-per-point: one value per concurrency")?
                })
                .into();
            }
            // `--scenario` gives the whole setup; without it the engine side comes from the server.
            let mut raw = match &a.workload.scenario {
                Some(f) => {
                    let mut r = load::read_raw(Some(f))?;
                    r.json["workload"] = w;
                    r
                }
                None => derive_scenario(&info, &a.derive, &w)?,
            };
            if let Some(p) = &a.profile {
                raw.json["cost"] =
                    json!({"profile": std::fs::canonicalize(p).unwrap_or(p.clone()).display().to_string()});
            }
            specs.push(load::resolve(&raw)?.1);
            raws.push(raw);
        }
        // Measure every point (after a warm-up at its concurrency), `--repeat` times
        // with fresh prompts each time; the point's value is the mean of the repeats.
        // Repeats go round the sweep (all points, then all points again), not point by
        // point: a host whose speed drifts over tens of seconds (scripts/live/host_speed.py)
        // then spreads its slow spells over every point instead of loading them onto one.
        let repeats = a.repeat.max(1);
        let mut runs_of: Vec<Vec<Map<String, Value>>> = vec![Vec::new(); specs.len()];
        // The calibration's speed reference, if the profile has one: measured again before each point.
        let reference_calib = profile
            .as_ref()
            .and_then(|p| p["speed_reference"]["median_mean_itl_ms"].as_f64())
            .filter(|_| !a.no_speed_reference);
        let mut reference_of: Vec<Vec<Option<f64>>> = vec![Vec::new(); specs.len()];
        for k in 0..repeats {
            for (i, s) in specs.iter().enumerate() {
                let mut sk = s.clone();
                // Repeats' seeds far from any probe's (1000 + i, 1100 + i, ...): the same seed draws
                // the same leading tokens, which the prefix cache would serve to the other run.
                sk.workload.seed = s.workload.seed.wrapping_add(1_000_003 * u64::from(k));
                let w = sim::workload::generate(&sk.workload);
                if reference_calib.is_some() {
                    let n = reference_of.iter().map(Vec::len).sum::<usize>() as u64;
                    let v = speed_reference(&opts, &info, &a.derive, 1_000 + n).await?;
                    reference_of[i].push(v);
                }
                let files = live::run_files(Some(&dir), None, "check", &w, &opts.target.model)?;
                opts.jsonl = Some(files.requests.clone());
                let (point, run) = measure(&opts, &info, &w, true).await;
                let mut f = Map::new();
                f.insert("requests".into(), files.requests.display().to_string().into());
                let rec = calibrate::manifest::record(
                    &info,
                    &a.server.endpoint,
                    &raws[i].json["workload"],
                    &w,
                    run.metrics_before.as_ref(),
                    run.metrics_after.as_ref(),
                    &f,
                    &point,
                );
                std::fs::write(&files.record, serde_json::to_string_pretty(&rec).expect("json"))
                    .map_err(|e| format!("{}: {e}", files.record.display()))?;
                eprintln!(
                    "measured concurrency {} (run {}/{repeats}): {:.1} tok/s, mean TTFT {:.1} ms",
                    conc[i],
                    k + 1,
                    point["output_throughput"].as_f64().unwrap_or(0.0),
                    point["mean_ttft_ms"].as_f64().unwrap_or(0.0)
                );
                if run.interrupted {
                    return Err("interrupted".into());
                }
                runs_of[i].push(point);
            }
        }
        let mut measured = Vec::new();
        let mut spreads: Vec<Map<String, Value>> = Vec::new();
        for runs in &runs_of {
            let (point, spread) = mean_of_runs(runs);
            measured.push(point);
            spreads.push(spread);
        }
        // Fit on the chosen points, if asked.
        let used: Vec<bool> = conc.iter().map(|c| fit_on.contains(c)).collect();
        if !fit_on.is_empty() {
            let points: Vec<FitPoint> = specs
                .iter()
                .zip(&measured)
                .zip(&used)
                .filter(|(_, u)| **u)
                .map(|((s, m), _)| FitPoint {
                    name: format!("c{}", s.workload.max_concurrency.unwrap_or(0)),
                    spec: s.clone(),
                    measured: measured_targets(m),
                    replay: None,
                })
                .collect();
            let free = if points.len() >= 3 { live_free() } else { group_free(points.len()) };
            let r = fit::fit(&points, &specs[0].cost, &free, None, a.max_evals);
            for s in &mut specs {
                s.cost = r.cost.clone();
            }
        }
        // Predict every point with the same requests.
        let predicted: Vec<Map<String, Value>> = specs
            .iter()
            .map(|s| sim::report::point_json(s, &sim::simulate(s, sim::simulation::RunOptions::default())))
            .collect();
        let mut report = check_report(&conc, &measured, &predicted, &used, &info, profile.as_ref());
        if let Some(calib) = reference_calib {
            add_speed_reference(&mut report, calib, &reference_of);
        }
        if repeats > 1 {
            if let Some(pts) = report["points"].as_array_mut() {
                for (p, sp) in pts.iter_mut().zip(&spreads) {
                    p["measured_spread"] = Value::Object(sp.clone());
                }
            }
            // The knee of each repeat on its own: where they differ, the 5%-gain rule is within
            // the measurement's noise at this sweep, and so is any comparison with a prediction.
            let per = knee_per_repeat(&conc, &runs_of);
            report["knee"]["measured_per_repeat"] = json!(per);
            report["knee"]["measured_stable"] = per.windows(2).all(|w| w[0] == w[1]).into();
            report["repeats"] = repeats.into();
        }
        if let Some(path) = &a.plot {
            let line = |pts: &[Map<String, Value>], label: &str, dashed: bool| crate::plot::Series {
                label: label.into(),
                points: conc
                    .iter()
                    .zip(pts)
                    .map(|(&c, p)| {
                        let f = |k: &str| p.get(k).and_then(Value::as_f64).unwrap_or(0.0);
                        (f64::from(c), f("output_throughput"), f("mean_ttft_ms"), f("p99_ttft_ms"))
                    })
                    .collect(),
                dashed,
            };
            let mut marks = Vec::new();
            if let Some(k) = report["knee"]["measured"].as_u64() {
                marks.push((k as f64, format!("measured knee {k}")));
            }
            crate::plot::sweep(
                path,
                "measured against predicted",
                &[line(&measured, "measured", false), line(&predicted, "predicted", true)],
                &marks,
            )?;
        }
        if a.json {
            println!("{}", serde_json::to_string_pretty(&report).expect("json"));
        } else {
            print!("{}", check_text(&report));
        }
        // Exit 1 when the verdict misses a target, so scripts can tell.
        Ok(if report["verdict"]["pass"] == true { ExitCode::SUCCESS } else { ExitCode::from(1) })
    })
}

fn rel_err(m: Option<f64>, p: Option<f64>) -> Option<f64> {
    match (m, p) {
        (Some(m), Some(p)) if m.abs() > 1e-12 => Some((p - m) / m),
        (Some(m), Some(p)) if m.abs() <= 1e-12 && p.abs() <= 1e-12 => Some(0.0),
        _ => None,
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

fn knee_at(conc: &[u32], pts: &[Map<String, Value>]) -> Option<u32> {
    let kp: Vec<KneePoint> = conc
        .iter()
        .zip(pts)
        .map(|(&c, p)| KneePoint {
            concurrency: f64::from(c),
            output_throughput: p["output_throughput"].as_f64().unwrap_or(0.0),
            mean_ttft_ms: p["mean_ttft_ms"].as_f64().unwrap_or(0.0),
        })
        .collect();
    find_knee(&kp).map(|i| conc[i])
}

/// The knee of each repeat on its own (`runs_of[i][k]`: the k-th run of point i).
fn knee_per_repeat(conc: &[u32], runs_of: &[Vec<Map<String, Value>>]) -> Vec<Option<u32>> {
    let n = runs_of.iter().map(Vec::len).min().unwrap_or(0);
    (0..n).map(|k| knee_at(conc, &runs_of.iter().map(|r| r[k].clone()).collect::<Vec<_>>())).collect()
}

/// The check report: per point, measured, predicted and relative error; the verdict on the points not used for fitting.
pub fn check_report(
    conc: &[u32],
    measured: &[Map<String, Value>],
    predicted: &[Map<String, Value>],
    used: &[bool],
    info: &ServerInfo,
    profile: Option<&Value>,
) -> Value {
    let mut points = Vec::new();
    for i in 0..conc.len() {
        let mut err = Map::new();
        for (k, _) in CHECK_METRICS {
            if let Some(e) =
                rel_err(measured[i].get(k).and_then(Value::as_f64), predicted[i].get(k).and_then(Value::as_f64))
            {
                err.insert(k.into(), e.into());
            }
        }
        points.push(json!({
            "max_concurrency": conc[i],
            "used_for_fit": used[i],
            "measured": measured[i],
            "predicted": predicted[i],
            "error": err,
        }));
    }
    let mut verdict = Map::new();
    let mut pass = true;
    for (k, target) in CHECK_METRICS {
        let errs: Vec<f64> = (0..conc.len())
            .filter(|&i| !used[i])
            .filter_map(|i| {
                rel_err(measured[i].get(k).and_then(Value::as_f64), predicted[i].get(k).and_then(Value::as_f64))
            })
            .map(f64::abs)
            .collect();
        let med = median(errs);
        let ok = if target.is_nan() { Value::Null } else { Value::from(med.is_none_or(|m| m <= target)) };
        if ok == Value::Bool(false) {
            pass = false;
        }
        verdict.insert(k.into(), json!({"median_abs_error": med, "target": if target.is_nan() { Value::Null } else { target.into() }, "ok": ok}));
    }
    let km = knee_at(conc, measured);
    let kp = knee_at(conc, predicted);
    let knee_ok = km == kp;
    json!({
        "engine": live::meta_of(info).engine,
        "engine_version": info.version,
        "model": info.model,
        "kv_capacity_tokens": info.kv_capacity_tokens,
        "profile": profile.map(|p| p["coefficients"].clone()),
        "points": points,
        "knee": {"measured": km, "predicted": kp, "same": knee_ok},
        "verdict": {"per_metric": verdict, "knee_same_point": knee_ok, "pass": pass && knee_ok, "points_judged": used.iter().filter(|u| !**u).count()},
    })
}

/// Adds the speed reference to a check report: per point, the mean of the references
/// measured before its runs and how far that is from the calibration's median (positive: the
/// engine was slower); in the verdict, whether every point's stayed within
/// [`SPEED_REFERENCE_TOLERANCE`]. It is reported, not used: scaling each run by its reference
/// made the live errors worse, not better (a one-second run at one request does not track
/// the engine's speed over a point's run closely enough; VALIDATION.md, third round).
fn add_speed_reference(report: &mut Value, calib: f64, reference_of: &[Vec<Option<f64>>]) {
    let mut moves = Vec::new();
    if let Some(pts) = report["points"].as_array_mut() {
        for (p, r) in pts.iter_mut().zip(reference_of) {
            let got: Vec<f64> = r.iter().flatten().copied().collect();
            if got.is_empty() {
                continue;
            }
            let m = got.iter().sum::<f64>() / got.len() as f64;
            let d = m / calib - 1.0;
            moves.push(d);
            p["speed_reference"] = json!({"mean_itl_ms": m, "vs_calibration": d});
        }
    }
    let largest = moves.iter().map(|d| d.abs()).fold(None, |a: Option<f64>, d| Some(a.map_or(d, |a| a.max(d))));
    report["verdict"]["speed_reference"] = json!({
        "calibration_mean_itl_ms": calib,
        "median_vs_calibration": median(moves.clone()),
        "largest_abs_vs_calibration": largest,
        "tolerance": SPEED_REFERENCE_TOLERANCE,
        "engine_held_still": largest.map(|l| l <= SPEED_REFERENCE_TOLERANCE),
    });
}

fn check_text(r: &Value) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Live check: {} {} ({}), KV {} tokens",
        r["engine"].as_str().unwrap_or("?"),
        r["engine_version"],
        r["model"],
        r["kv_capacity_tokens"]
    );
    let _ = writeln!(
        s,
        "{:>11} {:>4} {:<22} {:>12} {:>12} {:>9}",
        "concurrency", "fit", "metric", "measured", "predicted", "error"
    );
    for p in r["points"].as_array().into_iter().flatten() {
        for (k, _) in CHECK_METRICS {
            let m = p["measured"][k].as_f64();
            let q = p["predicted"][k].as_f64();
            let e = p["error"][k].as_f64();
            let spread = p["measured_spread"][k].as_f64().map(|v| format!("{:.1}%", 100.0 * v)).unwrap_or_default();
            let _ = writeln!(
                s,
                "{:>11} {:>4} {:<22} {:>12} {:>12} {:>9} {:>9}",
                p["max_concurrency"],
                if p["used_for_fit"] == true { "*" } else { "" },
                k,
                m.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into()),
                q.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into()),
                e.map(|v| format!("{:+.1}%", 100.0 * v)).unwrap_or_else(|| "-".into()),
                spread,
            );
        }
    }
    let _ = writeln!(s, "Knee: measured at {}, predicted at {}.", r["knee"]["measured"], r["knee"]["predicted"]);
    if r["knee"]["measured_stable"] == false {
        let _ = writeln!(
            s,
            "  Each repeat on its own puts the measured knee at {}: at this sweep the knee is within the measurement's noise.",
            r["knee"]["measured_per_repeat"]
        );
    }
    let _ = writeln!(s, "Verdict on the {} points not used for fitting (* = used):", r["verdict"]["points_judged"]);
    if let Some(v) = r["verdict"]["per_metric"].as_object() {
        for (k, x) in v {
            if let Some(m) = x["median_abs_error"].as_f64() {
                let t = x["target"]
                    .as_f64()
                    .map(|t| format!(" (target {:.0}%: {})", 100.0 * t, if x["ok"] == true { "ok" } else { "MISSED" }))
                    .unwrap_or_default();
                let _ = writeln!(s, "  {k:<22} median |error| {:.1}%{t}", 100.0 * m);
            }
        }
    }
    let sr = &r["verdict"]["speed_reference"];
    if let Some(calib) = sr["calibration_mean_itl_ms"].as_f64() {
        let per: Vec<String> = r["points"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some(format!(
                    "{} {:+.1}%",
                    p["max_concurrency"],
                    100.0 * p["speed_reference"]["vs_calibration"].as_f64()?
                ))
            })
            .collect();
        let _ = writeln!(
            s,
            "Speed reference (one request's mean ITL, {calib:.2} ms while calibrating), before each point: {}",
            per.join(", ")
        );
        if sr["engine_held_still"] == false {
            let _ = writeln!(
                s,
                "  The speed reference moved more than {:.0}% between calibration and check: the engine or the host\n  \
                 was not at one speed, and errors of that size may be the machine's as much as the model's.",
                100.0 * SPEED_REFERENCE_TOLERANCE
            );
        }
    }
    let _ = writeln!(s, "Overall: {}", if r["verdict"]["pass"] == true { "PASS" } else { "FAIL" });
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(thr: f64, ttft: f64) -> Map<String, Value> {
        json!({"output_throughput": thr, "mean_ttft_ms": ttft}).as_object().unwrap().clone()
    }

    #[test]
    fn each_repeat_has_its_own_knee() {
        let conc = [1, 2, 4, 8];
        // Repeat 1 flattens after 4 (205 < 1.05 × 200); repeat 2 still gains 6% from 4 to 8.
        let thr = [[100.0, 100.0], [180.0, 180.0], [200.0, 188.0], [205.0, 200.0]];
        let runs_of: Vec<Vec<Map<String, Value>>> =
            thr.iter().enumerate().map(|(i, t)| t.iter().map(|&x| run(x, 100.0 * (i + 1) as f64)).collect()).collect();
        assert_eq!(knee_per_repeat(&conc, &runs_of), vec![Some(4), None]);
    }

    #[test]
    fn the_speed_reference_says_how_far_the_engine_moved() {
        let mut report = json!({"points": [{}, {}, {}], "verdict": {}});
        let refs = vec![vec![Some(10.2), Some(10.4)], vec![None], vec![Some(12.0)]];
        add_speed_reference(&mut report, 10.0, &refs);
        let d0 = report["points"][0]["speed_reference"]["vs_calibration"].as_f64().unwrap();
        assert!((d0 - 0.03).abs() < 1e-9, "{d0}");
        // A point whose reference failed has none, and does not count.
        assert!(report["points"][1].get("speed_reference").is_none());
        let v = &report["verdict"]["speed_reference"];
        assert!((v["largest_abs_vs_calibration"].as_f64().unwrap() - 0.2).abs() < 1e-9);
        assert_eq!(v["engine_held_still"], false);
        let mut steady = json!({"points": [{}], "verdict": {}});
        add_speed_reference(&mut steady, 10.0, &[vec![Some(10.3)]]);
        assert_eq!(steady["verdict"]["speed_reference"]["engine_held_still"], true);
    }
}
