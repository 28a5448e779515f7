//! The vLLM ↔ SGLang flag correspondence, in one place: the other engine's
//! counterpart of a flag (the error for a flag of the other engine names it),
//! the knobs both engines have under their own names (the alignment table of
//! `sweep`, `explain`'s knob names), the translation of one engine's flags into
//! the other's (`--set engine.kind=vllm,sglang`), and the scheduler flags read
//! from what a live server reports (`calibrate`, `check`).
//!
//! Which flags belong to which engine is not here: each engine declares its own
//! (`VllmFlags` in `vllm.rs`, `SglangFlags` in `sglang.rs`). Only a flag *with* a
//! counterpart in the other engine needs a line here: in [`VLLM_COUNTERPARTS`] or
//! [`SGLANG_COUNTERPARTS`], and, if it translates, in [`KNOBS`] and
//! [`translate_engine`].

use serde_json::Map;

use super::*;

impl EngineKind {
    /// Both engines, in a fixed order.
    pub const ALL: [EngineKind; 2] = [EngineKind::Vllm, EngineKind::Sglang];

    /// The name in scenarios and on the command line: `vllm`, `sglang`.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Vllm => "vllm",
            EngineKind::Sglang => "sglang",
        }
    }

    /// The engine's own spelling, for prose: `vLLM`, `SGLang`.
    pub fn display_name(self) -> &'static str {
        match self {
            EngineKind::Vllm => "vLLM",
            EngineKind::Sglang => "SGLang",
        }
    }

    /// Reads `vllm` or `sglang`.
    pub fn parse(s: &str) -> Option<EngineKind> {
        EngineKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    pub fn other(self) -> EngineKind {
        match self {
            EngineKind::Vllm => EngineKind::Sglang,
            EngineKind::Sglang => EngineKind::Vllm,
        }
    }

    /// The engine's flag for `knob` (a [`Knob::name`]), e.g. `running cap` → `max_num_seqs`.
    pub fn flag(self, knob: &str) -> Option<&'static str> {
        KNOBS.iter().find(|k| k.name == knob).map(|k| match self {
            EngineKind::Vllm => k.vllm,
            EngineKind::Sglang => k.sglang,
        })
    }

    /// The cap on running requests: `max_num_seqs` / `max_running_requests`.
    pub fn running_cap_flag(self) -> &'static str {
        match self {
            EngineKind::Vllm => "max_num_seqs",
            EngineKind::Sglang => "max_running_requests",
        }
    }

    /// The per-step token cap: `max_num_batched_tokens` / `chunked_prefill_size`.
    pub fn token_budget_flag(self) -> &'static str {
        match self {
            EngineKind::Vllm => "max_num_batched_tokens",
            EngineKind::Sglang => "chunked_prefill_size",
        }
    }

    /// The KV allocation unit's flag: `block_size` / `page_size`.
    pub fn kv_granularity_flag(self) -> &'static str {
        match self {
            EngineKind::Vllm => "block_size",
            EngineKind::Sglang => "page_size",
        }
    }

    /// The KV allocation unit: `block` / `page`.
    pub fn kv_unit(self) -> &'static str {
        match self {
            EngineKind::Vllm => "block",
            EngineKind::Sglang => "page",
        }
    }

    /// The memory fraction flag: `gpu_memory_utilization` / `mem_fraction_static`.
    pub fn memory_fraction_flag(self) -> &'static str {
        match self {
            EngineKind::Vllm => "gpu_memory_utilization",
            EngineKind::Sglang => "mem_fraction_static",
        }
    }

    /// The prefix cache's switch: `enable_prefix_caching` / `disable_radix_cache`.
    pub fn prefix_cache_flag(self) -> &'static str {
        match self {
            EngineKind::Vllm => "enable_prefix_caching",
            EngineKind::Sglang => "disable_radix_cache",
        }
    }

    /// The scheduling policy flag: `policy` / `schedule_policy`.
    pub fn policy_flag(self) -> &'static str {
        match self {
            EngineKind::Vllm => "policy",
            EngineKind::Sglang => "schedule_policy",
        }
    }

    /// The context length flag: `max_model_len` / `context_length`.
    pub fn context_length_flag(self) -> &'static str {
        match self {
            EngineKind::Vllm => "max_model_len",
            EngineKind::Sglang => "context_length",
        }
    }

    /// What the engine does to a running request when KV runs out: `preempt` / `retract`.
    pub fn preempt_verb(self) -> &'static str {
        match self {
            EngineKind::Vllm => "preempt",
            EngineKind::Sglang => "retract",
        }
    }

    /// `preempted` / `retracted`.
    pub fn preempted(self) -> &'static str {
        match self {
            EngineKind::Vllm => "preempted",
            EngineKind::Sglang => "retracted",
        }
    }

    /// `preemptions` / `retractions`.
    pub fn preemptions(self) -> &'static str {
        match self {
            EngineKind::Vllm => "preemptions",
            EngineKind::Sglang => "retractions",
        }
    }

    /// The scheduler flags a live server of this engine reports about itself (vLLM: its
    /// start-up log's non-default arguments; SGLang: `/get_server_info`) that a derived
    /// scenario takes over as they are.
    pub fn reported_scheduler_flags(self) -> &'static [&'static str] {
        match self {
            EngineKind::Vllm => &[
                "max_num_seqs",
                "max_num_batched_tokens",
                "long_prefill_token_threshold",
                "block_size",
                "max_model_len",
            ],
            EngineKind::Sglang => &[
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
            ],
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl EngineSpec {
    /// Which engine this is.
    pub fn engine_kind(&self) -> EngineKind {
        match self {
            EngineSpec::Vllm(_) => EngineKind::Vllm,
            EngineSpec::Sglang(_) => EngineKind::Sglang,
        }
    }

    /// `max_model_len` / `context_length`.
    pub fn context_length(&self) -> u32 {
        match self {
            EngineSpec::Vllm(c) => c.max_model_len,
            EngineSpec::Sglang(c) => c.context_length,
        }
    }
}

/// A knob both engines have, under their own names.
pub struct Knob {
    pub name: &'static str,
    pub vllm: &'static str,
    pub sglang: &'static str,
    /// How the two differ in meaning, when they do.
    pub note: &'static str,
}

impl Knob {
    /// The flag of `kind`.
    pub fn flag(&self, kind: EngineKind) -> &'static str {
        match kind {
            EngineKind::Vllm => self.vllm,
            EngineKind::Sglang => self.sglang,
        }
    }
}

/// The knobs both engines have (`docs/parameter-mapping.md`).
pub const KNOBS: &[Knob] = &[
    Knob { name: "running cap", vllm: "max_num_seqs", sglang: "max_running_requests", note: "" },
    Knob {
        name: "per-step token cap",
        vllm: "max_num_batched_tokens",
        sglang: "chunked_prefill_size",
        note: "vLLM counts decode tokens in it; SGLang counts new prompt tokens of a prefill batch only (plus max_prefill_tokens)",
    },
    Knob { name: "KV granularity (tokens)", vllm: "block_size", sglang: "page_size", note: "" },
    Knob {
        name: "prefix reuse",
        vllm: "enable_prefix_caching",
        sglang: "radix cache (not disable_radix_cache)",
        note: "hashed full blocks vs a token-level radix tree",
    },
    Knob {
        name: "memory fraction",
        vllm: "gpu_memory_utilization",
        sglang: "mem_fraction_static",
        note: "vLLM's covers weights, activations and KV; SGLang's weights and KV (activations come out of the rest)",
    },
    Knob {
        name: "KV pool (tokens)",
        vllm: "usable KV",
        sglang: "max_total_num_tokens",
        note: "vLLM's from num_gpu_blocks_override, kv_cache_tokens, kv_cache_memory_bytes or gpu_memory_utilization, less the null block",
    },
    Knob { name: "context length", vllm: "max_model_len", sglang: "context_length", note: "" },
    Knob { name: "scheduling policy", vllm: "policy", sglang: "schedule_policy", note: "" },
];

/// Translates a scenario's raw `engine` section to the other engine's flags (`to`).
/// Returns the new section and a note per flag that has no counterpart.
pub fn translate_engine(
    engine: &Map<String, Value>,
    to: EngineKind,
) -> std::result::Result<(Map<String, Value>, Vec<String>), String> {
    let from = engine.get("kind").and_then(Value::as_str).and_then(EngineKind::parse).unwrap_or(EngineKind::Vllm);
    let mut out = Map::new();
    out.insert("kind".into(), to.as_str().into());
    let mut notes = Vec::new();
    if from == to {
        return Ok((engine.clone(), notes));
    }
    let block = engine.get("block_size").and_then(Value::as_u64).unwrap_or(16);
    for (k, v) in engine {
        // A field set to null is unset (the engine's default applies): it has nothing to
        // translate (a null pin became a pool of 0 or 16 tokens).
        if v.is_null() {
            continue;
        }
        let mapped: Option<(&str, Value)> = match (from, k.as_str()) {
            (_, "kind") => None,
            // Both engines' fields, and the parallelism and graph flags under each one's name.
            // vLLM's `fp8` KV cache is e4m3; SGLang's `--kv-cache-dtype` names it `fp8_e4m3` only.
            (EngineKind::Vllm, "kv_cache_dtype") if v.as_str() == Some("fp8") => Some((k.as_str(), "fp8_e4m3".into())),
            (_, "kv_cache_dtype" | "quantization") => Some((k.as_str(), v.clone())),
            (EngineKind::Vllm, "tensor_parallel_size") => Some(("tp_size", v.clone())),
            (EngineKind::Sglang, "tp_size") => Some(("tensor_parallel_size", v.clone())),
            (EngineKind::Vllm, "pipeline_parallel_size") => Some(("pp_size", v.clone())),
            (EngineKind::Sglang, "pp_size") => Some(("pipeline_parallel_size", v.clone())),
            (EngineKind::Vllm, "enforce_eager") => Some(("disable_cuda_graph", v.clone())),
            (EngineKind::Sglang, "disable_cuda_graph") => Some(("enforce_eager", v.clone())),
            // CPU scheduling overlapped with the GPU's step: vLLM's async scheduling, SGLang's
            // overlap scheduler (docs/parameter-mapping.md).
            (EngineKind::Vllm, "async_scheduling") => {
                Some(("disable_overlap_schedule", Value::Bool(!v.as_bool().unwrap_or(true))))
            }
            (EngineKind::Sglang, "disable_overlap_schedule") => {
                Some(("async_scheduling", Value::Bool(!v.as_bool().unwrap_or(false))))
            }
            (_, "version") => {
                notes.push(format!("engine.version {v} is a {from} release: the {to} side uses its default release"));
                None
            }
            (EngineKind::Vllm, "max_num_seqs") => Some(("max_running_requests", v.clone())),
            // Chunking off is SGLang's `chunked_prefill_size: -1` (below, after the loop: it
            // replaces the budget's mapping).
            (EngineKind::Vllm, "enable_chunked_prefill") => None,
            (EngineKind::Vllm, "max_num_batched_tokens") => Some(("chunked_prefill_size", v.clone())),
            (EngineKind::Vllm, "block_size") => Some(("page_size", v.clone())),
            (EngineKind::Vllm, "enable_prefix_caching") => {
                Some(("disable_radix_cache", Value::Bool(!v.as_bool().unwrap_or(true))))
            }
            (EngineKind::Vllm, "gpu_memory_utilization") => Some(("mem_fraction_static", v.clone())),
            // The same usable pool: vLLM loses one block (the null block) of what its log prints.
            (EngineKind::Vllm, "kv_cache_tokens") => {
                let t = v.as_u64().unwrap_or(0);
                Some(("max_total_num_tokens", Value::from((t / block).saturating_sub(1) * block)))
            }
            (EngineKind::Vllm, "num_gpu_blocks_override") => {
                let n = v.as_u64().unwrap_or(2);
                Some(("max_total_num_tokens", Value::from(n.saturating_sub(1) * block)))
            }
            // Bytes per GPU: the tokens they hold depend on the model and TP size, which the
            // engine section does not say; SGLang has no flag in bytes.
            (EngineKind::Vllm, "kv_cache_memory_bytes") => {
                notes.push(format!(
                    "engine.kv_cache_memory_bytes {v} (vLLM's KV cache in bytes per GPU) has no {to} counterpart and is \
                     dropped: the {to} side's pool is derived from mem_fraction_static (pin it with max_total_num_tokens)"
                ));
                None
            }
            (EngineKind::Vllm, "max_model_len") => Some(("context_length", v.clone())),
            (EngineKind::Vllm, "policy") => match v.as_str() {
                Some("fcfs") => Some(("schedule_policy", v.clone())),
                _ => return Err(format!("engine.policy {v} has no modelled SGLang counterpart")),
            },
            (EngineKind::Sglang, "max_running_requests") => Some(("max_num_seqs", v.clone())),
            (EngineKind::Sglang, "chunked_prefill_size") => match v.as_i64() {
                Some(-1) => {
                    notes.push(
                        "chunked_prefill_size -1 (off) becomes enable_chunked_prefill false: vLLM's default budget is then \
                         at least max_model_len, and a waiting prompt over the step's budget waits (from vLLM 0.12.0)"
                            .into(),
                    );
                    Some(("enable_chunked_prefill", Value::Bool(false)))
                }
                _ => Some(("max_num_batched_tokens", v.clone())),
            },
            (EngineKind::Sglang, "page_size") => Some(("block_size", v.clone())),
            (EngineKind::Sglang, "disable_radix_cache") => {
                Some(("enable_prefix_caching", Value::Bool(!v.as_bool().unwrap_or(false))))
            }
            (EngineKind::Sglang, "mem_fraction_static") => Some(("gpu_memory_utilization", v.clone())),
            (EngineKind::Sglang, "max_total_tokens" | "max_total_num_tokens") => {
                if k.as_str() == "max_total_tokens" {
                    notes.push(
                        "max_total_tokens bounds SGLang's pool from above (the smaller of it and what mem_fraction_static gives); vLLM has no bound: its side is pinned at the bound itself (kv_cache_tokens), so the pools differ where the bound does not bind"
                            .into(),
                    );
                }
                // kv_cache_tokens counts the null block too; usable = whole blocks of the pool.
                let m = v.as_u64().unwrap_or(0);
                // The vLLM side's block: the page size given (page_size → block_size), else
                // vLLM's default of 16 (SGLang's default page of 1 is not carried over).
                let b = engine.get("page_size").and_then(Value::as_u64).filter(|&p| p > 0).unwrap_or(16);
                Some(("kv_cache_tokens", Value::from((m / b + 1) * b)))
            }
            (EngineKind::Sglang, "context_length") => Some(("max_model_len", v.clone())),
            (EngineKind::Sglang, "schedule_policy") => match v.as_str() {
                Some("fcfs") => Some(("policy", v.clone())),
                _ => {
                    notes.push(format!("schedule_policy {v} has no vLLM counterpart: vLLM uses fcfs"));
                    None
                }
            },
            (_, other) => {
                notes.push(format!("engine.{other} has no {to} counterpart and is dropped"));
                None
            }
        };
        if let Some((name, value)) = mapped {
            out.insert(name.into(), value);
        }
    }
    if from == EngineKind::Vllm && engine.get("enable_chunked_prefill").and_then(Value::as_bool) == Some(false) {
        if let Some(b) = out.insert("chunked_prefill_size".into(), Value::from(-1)) {
            notes.push(format!(
                "max_num_batched_tokens {b} is dropped: with enable_chunked_prefill false the SGLang side runs \
                 chunked_prefill_size -1 (no chunking; max_prefill_tokens caps a prefill batch)"
            ));
        }
    }
    Ok((out, notes))
}

/// vLLM flags and their SGLang counterparts, as the error for a vLLM flag in an SGLang
/// scenario names them. A vLLM flag not listed has none (`(none)`).
const VLLM_COUNTERPARTS: &[(&str, &str)] = &[
    ("max_num_seqs", "max_running_requests"),
    ("max_num_batched_tokens", "chunked_prefill_size (and max_prefill_tokens)"),
    ("long_prefill_token_threshold", "chunked_prefill_size"),
    ("enable_chunked_prefill", "chunked_prefill_size (-1 turns chunking off)"),
    ("block_size", "page_size"),
    ("enable_prefix_caching", "disable_radix_cache"),
    ("gpu_memory_utilization", "mem_fraction_static"),
    ("num_gpu_blocks_override", "max_total_num_tokens (the start-up log's pool; max_total_tokens only bounds it)"),
    ("kv_cache_tokens", "max_total_num_tokens (the start-up log's pool; max_total_tokens only bounds it)"),
    (
        "kv_cache_memory_bytes",
        "(none in bytes: SGLang sizes its pool from mem_fraction_static; max_total_num_tokens pins it in tokens)",
    ),
    ("max_model_len", "context_length"),
    ("policy", "schedule_policy"),
    ("async_scheduling", "disable_overlap_schedule (the overlap scheduler, on by default)"),
    ("tensor_parallel_size", "tp_size"),
    ("pipeline_parallel_size", "pp_size"),
    ("enforce_eager", "disable_cuda_graph"),
    (
        "disable_custom_all_reduce",
        "disable_custom_all_reduce (SGLang has a flag of that name; servesim does not model it)",
    ),
    ("moe_backend", "moe_runner_backend"),
    ("enable_expert_parallel", "ep_size (expert parallelism: not modelled in either engine)"),
];

/// SGLang flags and their vLLM counterparts (or what vLLM does instead). An SGLang flag
/// not listed has none (`(none)`).
const SGLANG_COUNTERPARTS: &[(&str, &str)] = &[
    ("max_running_requests", "max_num_seqs"),
    ("chunked_prefill_size", "max_num_batched_tokens (-1: enable_chunked_prefill false)"),
    ("max_prefill_tokens", "max_num_batched_tokens"),
    ("page_size", "block_size"),
    ("schedule_policy", "policy"),
    ("mem_fraction_static", "gpu_memory_utilization"),
    ("max_total_tokens", "(none: vLLM has no bound on its pool; kv_cache_tokens or num_gpu_blocks_override pin it)"),
    ("max_total_num_tokens", "kv_cache_tokens or num_gpu_blocks_override"),
    ("disable_radix_cache", "enable_prefix_caching"),
    ("enable_mixed_chunk", "(always mixed)"),
    ("disable_overlap_schedule", "async_scheduling (false to turn it off)"),
    ("context_length", "max_model_len"),
    ("tp_size", "tensor_parallel_size"),
    ("pp_size", "pipeline_parallel_size"),
    ("disable_cuda_graph", "enforce_eager"),
    ("cuda_graph_max_bs", "(vLLM derives its capture sizes from max_num_seqs)"),
    ("moe_runner_backend", "moe_backend"),
    ("ep_size", "enable_expert_parallel (expert parallelism: not modelled in either engine)"),
    ("num_reserved_decode_tokens", "(none: vLLM's decode side reserves the prompt's blocks only)"),
];

impl EngineKind {
    /// The engine's own flags of the `engine` section, in order ([`VllmFlags::NAMES`],
    /// [`SglangFlags::NAMES`]).
    pub fn own_flags(self) -> &'static [&'static str] {
        match self {
            EngineKind::Vllm => VllmFlags::NAMES,
            EngineKind::Sglang => SglangFlags::NAMES,
        }
    }

    /// The other engine's counterpart of this engine's `flag`, in words; `(none)` when it has none.
    pub fn counterpart(self, flag: &str) -> &'static str {
        let table = match self {
            EngineKind::Vllm => VLLM_COUNTERPARTS,
            EngineKind::Sglang => SGLANG_COUNTERPARTS,
        };
        table.iter().find(|(f, _)| *f == flag).map_or("(none)", |(_, c)| c)
    }
}

impl EngineSection {
    /// Whether the scenario sets `kind`'s own flag `flag`.
    fn is_set(&self, kind: EngineKind, flag: &str) -> bool {
        match kind {
            EngineKind::Vllm => self.vllm.is_set(flag),
            EngineKind::Sglang => self.sglang.is_set(flag),
        }
    }

    /// A flag of the other engine is an error that names the right one.
    pub(super) fn check_flags_of(&self, kind: EngineKind) -> Result<()> {
        let foreign = kind.other();
        let (this, other) = (kind.as_str(), foreign.display_name());
        // "a vLLM flag", "an SGLang flag": the article goes by how the name is said.
        let article = if other.starts_with('v') { "a" } else { "an" };
        for flag in foreign.own_flags() {
            if self.is_set(foreign, flag) {
                let counterpart = foreign.counterpart(flag);
                return Err(ConfigError::new(
                    format!("engine.{flag}"),
                    format!(
                        "is {article} {other} flag but engine.kind is \"{this}\"; the {this} counterpart is {counterpart}"
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counterparts_name_flags_of_their_engine() {
        for kind in EngineKind::ALL {
            let table = match kind {
                EngineKind::Vllm => VLLM_COUNTERPARTS,
                EngineKind::Sglang => SGLANG_COUNTERPARTS,
            };
            for (flag, _) in table {
                assert!(kind.own_flags().contains(flag), "{flag} is not a {kind} flag");
            }
        }
        for flag in VllmFlags::NAMES {
            assert!(!SglangFlags::NAMES.contains(flag), "{flag} is declared by both engines");
        }
    }

    #[test]
    fn translation_keeps_what_both_engines_have() {
        // The KV dtype, the weights' quantization, the parallelism and the graphs are the same
        // deployment under either engine: a side-by-side run that dropped them would compare an
        // fp8 TP 2 vLLM with a bf16 TP 1 SGLang.
        let v: Map<String, Value> = serde_json::from_str(
            r#"{"kind": "vllm", "kv_cache_dtype": "fp8", "quantization": "fp8", "tensor_parallel_size": 2,
                "pipeline_parallel_size": 1, "enforce_eager": true, "async_scheduling": false,
                "attention_backend": "FLASHINFER"}"#,
        )
        .unwrap();
        let (sg, notes) = translate_engine(&v, EngineKind::Sglang).unwrap();
        assert_eq!(sg["kv_cache_dtype"], "fp8_e4m3");
        assert_eq!(sg["quantization"], "fp8");
        assert_eq!(sg["tp_size"], 2);
        assert_eq!(sg["pp_size"], 1);
        assert_eq!(sg["disable_cuda_graph"], true);
        assert_eq!(sg["disable_overlap_schedule"], true);
        // Each engine names its backends its own way: not carried, and said.
        assert!(!sg.contains_key("attention_backend"));
        assert!(notes.iter().any(|n| n.contains("attention_backend")), "{notes:?}");
        let (back, _) = translate_engine(&sg, EngineKind::Vllm).unwrap();
        // vLLM takes SGLang's name for its fp8 (e4m3) cache as it is.
        assert_eq!(back["kv_cache_dtype"], "fp8_e4m3");
        for k in ["quantization", "tensor_parallel_size", "pipeline_parallel_size", "enforce_eager", "async_scheduling"]
        {
            assert_eq!(back[k], v[k], "{k}");
        }
    }

    /// The pool translates to the same usable tokens, and a pin set to null is no pin (it
    /// became a pool of 0 or 16 tokens, whichever came last in the file; the hunt of
    /// 2026-12-05).
    #[test]
    fn pools_translate_to_the_same_usable_tokens_and_null_is_unset() {
        let tr = |j: &str, to| translate_engine(&serde_json::from_str(j).unwrap(), to).unwrap().0;
        let sg =
            tr(r#"{"kind": "vllm", "kv_cache_tokens": 20000, "num_gpu_blocks_override": null}"#, EngineKind::Sglang);
        assert_eq!(sg["max_total_num_tokens"], 19984);
        let sg =
            tr(r#"{"kind": "vllm", "num_gpu_blocks_override": 1250, "kv_cache_tokens": null}"#, EngineKind::Sglang);
        assert_eq!(sg["max_total_num_tokens"], 19984);
        let sg = tr(r#"{"kind": "vllm", "kv_cache_tokens": null, "gpu_memory_utilization": 0.8}"#, EngineKind::Sglang);
        assert!(!sg.contains_key("max_total_num_tokens") && sg["mem_fraction_static"] == 0.8, "{sg:?}");
        // vLLM's pool in bytes per GPU has no SGLang flag (its tokens depend on the model and TP
        // size): dropped, and said.
        let (sg, notes) = translate_engine(
            &serde_json::from_str(r#"{"kind": "vllm", "kv_cache_memory_bytes": 1073741824}"#).unwrap(),
            EngineKind::Sglang,
        )
        .unwrap();
        assert!(!sg.contains_key("kv_cache_memory_bytes") && !sg.contains_key("max_total_num_tokens"), "{sg:?}");
        assert!(notes.iter().any(|n| n.contains("kv_cache_memory_bytes 1073741824")), "{notes:?}");
        // vLLM's usable pool is kv_cache_tokens less one block of the block size it runs with.
        for (page, usable, field) in [
            (None, 10240, "max_total_num_tokens"),
            (Some(1), 10240, "max_total_num_tokens"),
            (Some(32), 10240, "max_total_tokens"),
        ] {
            let mut j = serde_json::json!({"kind": "sglang"});
            j[field] = 10240.into();
            if let Some(p) = page {
                j["page_size"] = p.into();
            }
            let v = tr(&j.to_string(), EngineKind::Vllm);
            let block = v.get("block_size").and_then(Value::as_u64).unwrap_or(16);
            assert_eq!(v["kv_cache_tokens"].as_u64().unwrap() - block, usable, "page {page:?}: {v:?}");
        }
    }

    /// Chunking off: vLLM's `enable_chunked_prefill: false` is SGLang's
    /// `chunked_prefill_size: -1`, both ways; the budget given beside it is dropped, said.
    #[test]
    fn chunked_prefill_off_translates_both_ways() {
        let tr = |j: &str, to| translate_engine(&serde_json::from_str(j).unwrap(), to).unwrap();
        let (sg, notes) = tr(
            r#"{"kind": "vllm", "enable_chunked_prefill": false, "max_num_batched_tokens": 8192}"#,
            EngineKind::Sglang,
        );
        assert_eq!(sg["chunked_prefill_size"], -1);
        assert!(!sg.contains_key("enable_chunked_prefill"));
        assert!(notes.iter().any(|n| n.contains("max_num_batched_tokens 8192 is dropped")), "{notes:?}");
        let (sg, _) = tr(
            r#"{"kind": "vllm", "enable_chunked_prefill": true, "max_num_batched_tokens": 8192}"#,
            EngineKind::Sglang,
        );
        assert_eq!(sg["chunked_prefill_size"], 8192);
        let (v, _) = tr(r#"{"kind": "sglang", "chunked_prefill_size": -1}"#, EngineKind::Vllm);
        assert_eq!(v["enable_chunked_prefill"], false);
        assert!(!v.contains_key("max_num_batched_tokens"));
    }

    #[test]
    fn engine_fields_are_the_section_in_order() {
        let mut all: Vec<&str> = vec!["kind", "version"];
        all.extend(VllmFlags::NAMES);
        all.extend(["kv_cache_dtype", "quantization", "attention_backend"]);
        all.extend(SglangFlags::NAMES);
        all.extend(["data_parallel_size", "dp_size", "load_balance_method"]);
        assert_eq!(ENGINE_FIELDS.as_slice(), all.as_slice());
        let mut unique = all.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "a field name twice in the engine section");
    }
}
