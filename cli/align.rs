//! The vLLM ↔ SGLang flag alignment: translating one engine's scenario into
//! the other's, and the table that shows, knob by knob, what each side of a
//! comparison runs with (`docs/parameter-mapping.md`, the vLLM ↔ SGLang
//! parameter mapping).

use serde_json::{Map, Value};
use sim::config::{EngineSpec, SimSpec};

pub use sim::config::{Knob, KNOBS};

/// A knob's value in a resolved scenario, as text, and whether the scenario set it.
fn value(knob: &str, spec: &SimSpec, raw_engine: &Map<String, Value>) -> (String, bool) {
    let set = |f: &str| raw_engine.contains_key(f);
    match (&spec.engine, knob) {
        (EngineSpec::Vllm(c), "running cap") => (c.max_num_seqs.to_string(), set("max_num_seqs")),
        (EngineSpec::Sglang(c), "running cap") => (c.max_running_requests.to_string(), set("max_running_requests")),
        (EngineSpec::Vllm(c), "per-step token cap") => {
            (c.max_num_batched_tokens.to_string(), set("max_num_batched_tokens"))
        }
        (EngineSpec::Sglang(c), "per-step token cap") => {
            (c.chunked_prefill_size.map(|v| v.to_string()).unwrap_or_else(|| "off".into()), set("chunked_prefill_size"))
        }
        (EngineSpec::Vllm(c), "KV granularity (tokens)") => (c.block_size.to_string(), set("block_size")),
        (EngineSpec::Sglang(c), "KV granularity (tokens)") => (c.page_size.to_string(), set("page_size")),
        (EngineSpec::Vllm(c), "prefix reuse") => (on_off(c.enable_prefix_caching), set("enable_prefix_caching")),
        (EngineSpec::Sglang(c), "prefix reuse") => (on_off(!c.disable_radix_cache), set("disable_radix_cache")),
        (EngineSpec::Vllm(_), "memory fraction") => fraction(raw_engine, "gpu_memory_utilization", spec),
        (EngineSpec::Sglang(_), "memory fraction") => fraction(raw_engine, "mem_fraction_static", spec),
        (_, "KV pool (tokens)") => (
            spec.engine.kv_capacity_tokens().to_string(),
            // Given: pinned, or bounded where the bound binds (a bound above the profiled pool
            // changes nothing).
            sim::config::PINNED_POOL.iter().any(|f| set(f))
                || (set("max_total_tokens") && spec.kv_sizing.source == "max_total_tokens"),
        ),
        (EngineSpec::Vllm(c), "context length") => (c.max_model_len.to_string(), set("max_model_len")),
        (EngineSpec::Sglang(c), "context length") => (c.context_length.to_string(), set("context_length")),
        (EngineSpec::Vllm(c), "scheduling policy") => (format!("{:?}", c.policy).to_lowercase(), set("policy")),
        (EngineSpec::Sglang(c), "scheduling policy") => {
            (format!("{:?}", c.schedule_policy).to_lowercase(), set("schedule_policy"))
        }
        _ => ("?".into(), false),
    }
}

fn on_off(b: bool) -> String {
    if b { "on" } else { "off" }.into()
}

fn fraction(raw: &Map<String, Value>, field: &str, spec: &SimSpec) -> (String, bool) {
    match raw.get(field) {
        Some(v) => (v.to_string(), true),
        // A derived pool, or one SGLang's max_total_tokens bounds (the fraction still sizes it).
        None if spec.kv_sizing.memory.is_some() => ("default".into(), false),
        None => ("n/a (pool given)".into(), false),
    }
}

/// One row of the alignment table.
pub struct Row {
    pub knob: &'static Knob,
    /// Per scenario: (flag = value, set by the scenario).
    pub values: Vec<(String, bool)>,
    pub differs: bool,
}

/// Builds the alignment table of resolved scenarios (with their raw engine sections).
pub fn table(specs: &[(&SimSpec, &Map<String, Value>)]) -> Vec<Row> {
    KNOBS
        .iter()
        .map(|k| {
            let values: Vec<(String, bool)> = specs
                .iter()
                .map(|(s, raw)| {
                    let flag = k.flag(s.engine.engine_kind());
                    let (v, set) = value(k.name, s, raw);
                    (format!("{flag} = {v}"), set)
                })
                .collect();
            let plain: Vec<String> = specs.iter().map(|(s, raw)| value(k.name, s, raw).0).collect();
            let differs = plain.windows(2).any(|w| w[0] != w[1]);
            Row { knob: k, values, differs }
        })
        .collect()
}

/// Translates a scenario's engine section to the other engine's flags (the table is
/// `sim::config::translate_engine`). Returns the new section and a note per flag that has
/// no counterpart.
pub fn translate_engine(engine: &Map<String, Value>, to: &str) -> Result<(Map<String, Value>, Vec<String>), String> {
    let to =
        sim::config::EngineKind::parse(to).ok_or_else(|| format!("engine.kind {to:?}: expected vllm or sglang"))?;
    sim::config::translate_engine(engine, to)
}

/// `--set engine.kind=vllm,sglang` (a comma list: run each scenario once per engine): the
/// kinds it lists, and the other `--set`s in order. Beside a list, another `engine.kind` (a
/// second list, or one kind that would turn every variant into it) is refused: it kept the last
/// unsaid.
pub fn split_engine_kinds(sets: &[String]) -> Result<(Option<Vec<String>>, Vec<String>), String> {
    let is_kind = |s: &String| sim::config::set_path(s) == "engine.kind";
    let mut kinds = None;
    let mut rest = Vec::new();
    for s in sets {
        match s.strip_prefix("engine.kind=") {
            Some(k) if k.contains(',') => kinds = Some(k.split(',').map(|x| x.trim().to_string()).collect()),
            _ => rest.push(s.clone()),
        }
    }
    if kinds.is_some() && sets.iter().filter(|s| is_kind(s)).count() > 1 {
        let given: Vec<&str> = sets.iter().filter(|s| is_kind(s)).map(String::as_str).collect();
        return Err(format!("--set engine.kind: given more than once ({}); give one list", given.join(", then ")));
    }
    Ok((kinds, rest))
}

/// A scenario's engine section as each of `kinds`: per kind, the label (`origin [kind]`),
/// the translated section and a note per flag without a counterpart.
pub fn engine_variants(
    engine: &Map<String, Value>,
    origin: &str,
    kinds: &[String],
) -> Result<Vec<(String, Map<String, Value>, Vec<String>)>, String> {
    let mut out = Vec::new();
    for k in kinds {
        if sim::config::EngineKind::parse(k).is_none() {
            return Err(format!("--set engine.kind: unknown engine {k:?}; expected vllm or sglang"));
        }
        let (translated, notes) = translate_engine(engine, k).map_err(|e| format!("{origin}: {e}"))?;
        out.push((format!("{origin} [{k}]"), translated, notes));
    }
    Ok(out)
}

/// What differs between the scenarios beyond the aligned knobs and the workload, one line each
/// (`what: value / value / ...`): the engine release, the model, the GPU and its count, the TP
/// size, the quantization, the KV cache dtype, CUDA graphs, what times the steps, and any other
/// engine field set on one side and not the same on the others. A side-by-side comparison whose
/// only named difference is a knob must not hide a GPU swap.
pub fn setup_differences(specs: &[(&SimSpec, &Map<String, Value>)]) -> Vec<String> {
    let mut out = Vec::new();
    let line = |out: &mut Vec<String>, what: &str, f: &dyn Fn(&SimSpec, &Map<String, Value>) -> String| {
        let vals: Vec<String> = specs.iter().map(|(s, raw)| f(s, raw)).collect();
        if vals.windows(2).any(|w| w[0] != w[1]) {
            out.push(format!("{what}: {}", vals.join(" / ")));
        }
    };
    // Between engines (vLLM against SGLang, `sweep --engine vllm,sglang`) the engine is what is
    // compared: its release, its step cost and its own flags are part of it, and only what
    // should be the same on both sides is listed.
    let same_engine = specs.windows(2).all(|w| w[0].0.engine.engine_kind() == w[1].0.engine.engine_kind());
    if same_engine {
        line(&mut out, "engine", &|s, _| format!("{} {}", s.engine.kind(), s.engine.version()));
    }
    line(&mut out, "model", &|s, _| s.model.id.clone());
    // A fleet against one engine (or another fleet): its replicas, router, every GPU it holds
    // and its pools. Where the replicas differ, the GPUs and pools follow from them: one line.
    let cards = |s: &SimSpec| match &s.fleet {
        Some(f) => f.gpus_by_card().iter().map(|(g, n)| format!("{g} x{n}")).collect::<Vec<_>>().join(" + "),
        None => format!("{} x{}", s.gpu.id, s.deployment.num_gpus),
    };
    let pools = |s: &SimSpec| match &s.fleet {
        Some(f) => f.replicas.iter().map(|r| r.engine.kv_capacity_tokens()).sum::<u64>(),
        None => s.engine.kv_capacity_tokens(),
    };
    let replicas = |s: &SimSpec| match &s.fleet {
        Some(f) => format!("{} ({:?}, router {})", f.replicas.len(), f.kind, f.router.build(0).name()),
        None => "1 engine".into(),
    };
    let n = out.len();
    line(&mut out, "replicas", &|s, _| replicas(s));
    if out.len() > n {
        out.pop();
        line(&mut out, "replicas", &|s, _| {
            format!("{} on {}, KV pool {} tokens in all", replicas(s), cards(s), pools(s))
        });
    } else {
        line(&mut out, "hardware", &|s, _| cards(s));
    }
    line(&mut out, "tensor parallel size", &|s, _| s.deployment.tensor_parallel_size.to_string());
    line(&mut out, "quantization", &|s, _| s.deployment.quantization.clone().unwrap_or_else(|| "none".into()));
    line(&mut out, "KV cache dtype", &|s, _| s.deployment.kv_cache_dtype.clone());
    line(&mut out, "CUDA graphs", &|s, _| on_off(s.deployment.cuda_graphs));
    // What the benchmark client sends before the timed run, as each side resolves it (an
    // SGLang scenario sends the initial test request, vLLM's client from 0.14 does not): the
    // first prompt then finds itself cached on one side only.
    line(&mut out, "benchmark client before the timed run (leaves the first prompt cached)", &|s, _| {
        let w = &s.workload;
        let test = if w.initial_test_request { "initial test request" } else { "no initial test request" };
        match w.num_warmups {
            0 => test.to_string(),
            n => format!("{test}, {n} warm-ups"),
        }
    });
    if !same_engine {
        return out;
    }
    // What times the steps follows from the lines above when one of them differs; alone, it
    // is a difference of its own (a profile on one side).
    if out.is_empty() {
        line(&mut out, "step cost", &|s, _| s.cost.source());
    }
    // Engine fields outside the aligned knobs, set on some side.
    let aligned: Vec<&str> = KNOBS.iter().flat_map(|k| [k.vllm, k.sglang]).collect();
    let mut keys: Vec<&String> = specs.iter().flat_map(|(_, raw)| raw.keys()).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        let covered = aligned.iter().any(|a| a.split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|w| w == k));
        if covered || ["kind", "version"].contains(&k.as_str()) {
            continue;
        }
        line(&mut out, &format!("engine.{k}"), &|_, raw| raw.get(k).map_or_else(|| "unset".into(), Value::to_string));
    }
    out
}

/// A side-by-side sweep (`sweep --json` of two or more scenarios): each scenario's
/// series, the alignment table, the knobs that moved and whether the workloads differ.
/// One type for the binary and the browser build, so both print the same keys.
#[derive(Debug, serde::Serialize)]
pub struct SideBySide {
    pub scenarios: Vec<sim::sweep::SweepSeries>,
    pub alignment: Vec<AlignmentRow>,
    pub knobs_moved: Vec<&'static str>,
    pub workloads_differ: bool,
    /// What else differs ([`setup_differences`]); absent when nothing does.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub setup_differs: Vec<String>,
}

/// One knob of the alignment table, with each scenario's `flag = value`.
#[derive(Debug, serde::Serialize)]
pub struct AlignmentRow {
    pub knob: &'static str,
    pub vllm_flag: &'static str,
    pub sglang_flag: &'static str,
    pub values: Vec<String>,
    pub differs: bool,
    /// How the two flags differ in meaning, when they do.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub note: &'static str,
}

impl SideBySide {
    pub fn new(
        scenarios: Vec<sim::sweep::SweepSeries>,
        rows: &[Row],
        workloads_differ: bool,
        setup_differs: Vec<String>,
    ) -> SideBySide {
        SideBySide {
            scenarios,
            alignment: rows
                .iter()
                .map(|r| AlignmentRow {
                    knob: r.knob.name,
                    vllm_flag: r.knob.vllm,
                    sglang_flag: r.knob.sglang,
                    values: r.values.iter().map(|(v, _)| v.clone()).collect(),
                    differs: r.differs,
                    note: r.knob.note,
                })
                .collect(),
            knobs_moved: rows.iter().filter(|r| r.differs).map(|r| r.knob.name).collect(),
            workloads_differ,
            setup_differs,
        }
    }
}
