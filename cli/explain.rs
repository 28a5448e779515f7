//! `servesim explain`: why the metrics are what they are, in words and
//! numbers. The computation is `sim::explain` (pure, serializable); this file
//! runs its plan in parallel and renders the result as text or JSON.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use rayon::prelude::*;
use sim::explain::Explanation;
use sim::simulation::RunOptions;

use crate::load;
use crate::ScenarioArgs;

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// Scenario file (JSON); the built-in default if omitted.
    pub scenario: Option<PathBuf>,
    /// Explain the run at this concurrency (default: the scenario's, or, for a closed loop, twice
    /// the concurrency at which the first limit binds: the KV-limited concurrency or the running
    /// cap, max_num_seqs / max_running_requests, whichever is lower); 1 to 1,000,000 (the run
    /// gets at most 50,000 prompts).
    #[arg(long)]
    pub concurrency: Option<u32>,
    #[command(flatten)]
    pub common: ScenarioArgs,
    #[command(flatten)]
    pub bench: crate::bench_flags::BenchFlags,
    /// The explanation as JSON (its keys: README, the `servesim explain` row of "Commands").
    #[arg(long)]
    pub json: bool,
}

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

/// What the text adds from the resolved scenario (not JSON keys: those are a contract).
pub struct TextExtras {
    /// The step's token budget or prefill chunk the release chose, in words.
    pub budget: String,
    /// The fitted profile's file, where one prices the steps (`cost.profile`).
    pub profile: Option<String>,
}

impl TextExtras {
    pub fn of(raw: &load::RawScenario, base: &sim::config::SimSpec) -> TextExtras {
        let budget = match &base.engine {
            sim::config::EngineSpec::Vllm(c) => {
                format!(
                    "Token budget per step: max_num_batched_tokens = {}",
                    sim::explain::thousands(u64::from(c.max_num_batched_tokens))
                )
            }
            sim::config::EngineSpec::Sglang(c) => match c.chunked_prefill_size {
                Some(n) => {
                    format!("Prefill chunk: chunked_prefill_size = {} tokens", sim::explain::thousands(u64::from(n)))
                }
                None => "Prefill chunk: none (chunked_prefill_size off: prefills unchunked)".to_string(),
            },
        };
        let profile = raw.json.pointer("/cost/profile").and_then(|v| v.as_str()).map(str::to_string);
        TextExtras { budget, profile }
    }
}

/// A memory fraction as the engines' flags write it: 0.92, 0.83, 0.875.
fn fraction(part: u64, whole: u64) -> String {
    let t = format!("{:.3}", part as f64 / whole.max(1) as f64);
    t.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The text rendering of an explanation.
pub fn text(e: &Explanation, x: &TextExtras) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Why the metrics are what they are ({} {}, {}):", e.engine, e.engine_version, e.load);
    let _ = writeln!(s, "Scenario: {} ({} on {})", e.scenario, e.model_id, e.hardware);
    let d = &e.deployment;
    // A fleet's (or a data-parallel engine's) deployment line is one replica's; the fleet's
    // GPUs are counted in its own line below.
    let whose = match &e.replica_limits {
        Some(f) if f.groups.len() > 1 => {
            format!(
                " of each replica of group 0 (the fleet: {} replicas in {} groups, {} GPUs in all)",
                f.num_replicas,
                f.groups.len(),
                f.num_gpus
            )
        }
        Some(f) if f.num_replicas == 1 => {
            format!(" of the fleet's one replica ({} GPU{} in all)", f.num_gpus, if f.num_gpus == 1 { "" } else { "s" })
        }
        Some(f) => format!(" of each replica ({} replicas, {} GPUs in all)", f.num_replicas, f.num_gpus),
        None => String::new(),
    };
    // The CPU test bed's card runs on the host's CPU (the engines' CPU backends), not a GPU.
    let cpu_host = e.hardware == "cpu-host";
    let _ = writeln!(
        s,
        "Deployment{whose}: tensor parallel {} on {}, KV cache {} ({} B/element), weights {}, CUDA graphs {}{}",
        d.tensor_parallel_size,
        if cpu_host {
            "the host's CPU (the engine's CPU backend)".to_string()
        } else {
            format!("{} GPU{}", d.num_gpus, if d.num_gpus == 1 { "" } else { "s" })
        },
        d.kv_cache_dtype,
        d.kv_dtype_bytes,
        d.quantization
            .as_deref()
            .map(|q| format!("quantized ({q})"))
            .unwrap_or_else(|| format!("{} B each", d.linear_weight_bytes)),
        if d.cuda_graphs { "on" } else { "off" },
        match e.cuda_graph_max {
            Some(m) if e.engine == "sglang" =>
                format!(" (decode batches up to {m}, each padded to the next captured batch size)"),
            Some(m) => format!(" (steps up to {m} tokens, each padded to the next captured size)"),
            None => String::new(),
        }
    );
    match &x.profile {
        Some(f) if e.point.cost_source.contains("fitted profile)") => {
            let _ = writeln!(
                s,
                "Step cost source: {}",
                e.point.cost_source.replace("fitted profile)", &format!("fitted profile {f})"))
            );
        }
        Some(f) if e.point.cost_source.contains("fitted profile") => {
            let _ = writeln!(s, "Step cost source: {} ({f})", e.point.cost_source);
        }
        _ => {
            let _ = writeln!(s, "Step cost source: {}", e.point.cost_source);
        }
    }
    let _ = writeln!(s, "{}", x.budget);
    if let Some(c) = &e.step_cpu {
        let _ = writeln!(s, "Host CPU per step: {c}");
    }
    match &e.memory {
        Some(m) => {
            if e.kv_sizing_source == "max_total_tokens" {
                let _ = writeln!(
                    s,
                    "KV pool bounded by max_total_tokens, below the pool SGLang profiles from mem_fraction_static (per GPU, the profiled pool):"
                );
            } else {
                let _ = writeln!(s, "KV pool derived from {} (per GPU):", e.kv_sizing_source);
            }
            let requested = format!("requested (the fraction, {})", fraction(m.requested, m.total));
            for (label, v) in [
                ("total", m.total),
                (requested.as_str(), m.requested),
                ("weights", m.weights),
                ("activation peak", m.activation_peak),
                ("non-torch", m.non_torch),
                ("CUDA graphs", m.cuda_graphs),
                ("sampler state (V2 runner)", m.sampler_state),
                ("context", m.context),
                ("margin", m.margin),
                ("KV cache", m.kv),
                ("reserve (outside the fraction)", m.reserve),
            ] {
                // The sizing margin is vLLM 0.34's alone, the sampler state the V2 runner's from
                // 0.27: no row where it is not charged.
                if matches!(label, "margin" | "sampler state (V2 runner)") && v == 0 {
                    continue;
                }
                // A term that is 0 here is not charged to the fraction: it lives in the reserve
                // outside it (vLLM's CUDA context before 0.34; SGLang's activations and graphs).
                let shown = match label {
                    "CUDA graphs" if v == 0 && !e.deployment.cuda_graphs => {
                        format!("{:>12}  (CUDA graphs off)", "none")
                    }
                    _ if v == 0 && !label.starts_with("reserve") => {
                        format!("{:>12}  (not charged to the fraction: in the reserve outside it)", "-")
                    }
                    _ => format!("{:>12}", gib(v)),
                };
                let _ = writeln!(s, "  {label:<32} {shown}");
            }
            if e.kv_sizing_source == "max_total_tokens" {
                let _ = writeln!(
                    s,
                    "  {:<32} {:>12}  ({} tokens: the pool)",
                    "max_total_tokens bound",
                    gib(e.kv_cache_tokens.saturating_mul(e.kv_bytes_per_token)),
                    sim::explain::thousands(e.kv_cache_tokens)
                );
            }
            let _ = writeln!(
                s,
                "  ({}; {} KV bytes per token per GPU)",
                m.derivation,
                sim::explain::thousands(e.kv_bytes_per_token)
            );
        }
        // A fleet of several groups: the source is group 0's, and other groups may derive theirs
        // (the robustness audit of 2026-12-07: an A100 group pinned, an RTX 4090 group derived,
        // and the line said the fleet's 120,288 tokens were all "given by" the pin, "nothing
        // derived").
        None => match &e.replica_limits {
            Some(f) if f.groups.len() > 1 => {
                let g0 = &f.groups[0];
                let _ = writeln!(
                    s,
                    "KV pool: {} tokens over the fleet's replicas; group 0's {} tokens a replica given by {} (no memory \
                     account for it; {} KV bytes per token per GPU); each group's own pool (its pin, or derived from \
                     memory) in its line below",
                    sim::explain::thousands(e.kv_cache_tokens),
                    sim::explain::thousands(g0.kv_cache_tokens),
                    e.kv_sizing_source,
                    sim::explain::thousands(e.kv_bytes_per_token)
                );
            }
            _ => {
                let _ = writeln!(
                    s,
                    "KV pool: {} tokens, given by {} (no memory account: nothing is derived; {} KV bytes per token{})",
                    sim::explain::thousands(e.kv_cache_tokens),
                    e.kv_sizing_source,
                    sim::explain::thousands(e.kv_bytes_per_token),
                    if e.hardware == "cpu-host" { " in the host's memory" } else { " per GPU" }
                );
            }
        },
    }
    for (i, w) in e.explanation.iter().enumerate() {
        let _ = writeln!(s, "{}. {w}", i + 1);
    }
    for n in &e.notes {
        let _ = writeln!(s, "note: {n}");
    }
    if let Some(g) = e.point.bench.request_goodput {
        let _ = writeln!(
            s,
            "Request goodput (req/s): {g:.2} of the explained run's {:.2} completed requests per second met every --goodput objective.",
            e.point.bench.request_throughput
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "Knobs (you set them): {}", e.metric_kinds.knobs.join(", "));
    let _ = writeln!(s, "Results (the engine produces them): {}", e.metric_kinds.results.join(", "));
    if cpu_host {
        let _ = writeln!(s, "Outside the engine: CPU utilisation, memory bandwidth and power are not modelled; measure them with perf, top or the engine's own logs.");
    } else {
        let _ = writeln!(s, "Outside the engine: GPU utilisation, SM occupancy and power are not modelled; measure them with nvidia-smi dmon, DCGM or Nsight Systems.");
    }
    s
}

pub fn run(a: ExplainArgs) -> Result<ExitCode, String> {
    if a.concurrency.is_some() && a.bench.max_concurrency.is_some() {
        return Err("--concurrency and --max-concurrency both give the explained run's concurrency: give one".into());
    }
    let mut raw = load::read_raw(a.scenario.as_deref())?;
    let sets = a.bench.with_sets(&a.common.sets)?;
    let goodput = a.bench.goodput_slos()?;
    load::apply_overrides(&mut raw, &sets, a.common.seed).map_err(|e| a.bench.name_the_flag(e))?;
    let (_, base) = load::resolve(&raw).map_err(|e| a.bench.name_the_flag(e))?;
    let extras = TextExtras::of(&raw, &base);
    // `--max-concurrency N` asks for the run at N as `--concurrency N` does (its 4 × N prompts):
    // kept at the scenario's prompt count it could never reach N (20 prompts at 64).
    let plan = sim::explain::plan(&base, a.concurrency.or(a.bench.max_concurrency))?;
    let pb = crate::plot::progress(plan.grid_specs.len() as u64 + 1, "simulating");
    let all: Vec<&sim::config::SimSpec> = plan.grid_specs.iter().chain(std::iter::once(&plan.point)).collect();
    let mut outs = all
        .par_iter()
        .map(|s| {
            let o = sim::simulate(s, RunOptions::default());
            pb.inc(1);
            o
        })
        .collect::<Vec<_>>();
    pb.finish_and_clear();
    let point = outs.pop().expect("the explained run");
    let mut e = sim::explain::assemble(&raw.origin, &base, &plan, &point, &outs);
    // `--goodput`: the explained run's `request_goodput` (`point.request_goodput`; `null` without).
    if let Some(g) = &goodput {
        sim::report::with_goodput(&mut e.point.bench, &point.run, g);
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&e).expect("json"));
    } else {
        print!("{}", text(&e, &extras));
    }
    // As `simulate`: a run that did not complete (the notes say why) exits 1.
    let done = point.run.stop == sim::simulation::StopReason::Completed;
    Ok(if done { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
