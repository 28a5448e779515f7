//! `--set PATH=VALUE` overrides, applied to the raw scenario JSON.

use super::*;

/// Applies `--set PATH=VALUE` to raw scenario JSON. `VALUE` is parsed as
/// JSON if it can be (numbers, booleans, objects), else taken as a string.
pub fn apply_set(root: &mut Value, assignment: &str) -> Result<()> {
    let (path, raw) = assignment
        .split_once('=')
        .ok_or_else(|| ConfigError::new("--set", format!("expected PATH=VALUE, got {assignment:?}")))?;
    let path = path.trim();
    if path.is_empty() {
        return Err(ConfigError::new("--set", format!("empty path in {assignment:?}")));
    }
    let mut cur = root;
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.trim().is_empty()) {
        return Err(ConfigError::new(
            "--set",
            format!("empty field name in path {path:?} (expected e.g. engine.max_num_seqs)"),
        ));
    }
    // No scenario field name has brackets: an index into a list (`fleet.replicas[0].count`) is
    // not a path --set takes; said as such, not as an unknown field `replicas[0]`.
    if let Some(p) = parts.iter().find(|p| p.contains('[') || p.contains(']')) {
        let field = p.split('[').next().unwrap_or(p);
        return Err(ConfigError::new(
            "--set",
            format!(
                "{path:?}: --set does not index into lists ({p:?}); set the whole `{field}` as JSON instead, \
                 e.g. --set '{field}=[...]' with every element"
            ),
        ));
    }
    // A value that is not JSON is a string (`engine.kind=vllm`), except what was meant as JSON:
    // an object or a list with a typo is an error, not a card or engine named by its text, and
    // a number past f64 (`1e400`) is not read as "inf" by a field that takes strings.
    let value: Value = match serde_json::from_str(raw) {
        Ok(v) => v,
        Err(e) => {
            let t = raw.trim();
            if t.starts_with('{') || t.starts_with('[') {
                return Err(ConfigError::new(path, format!("not valid JSON: {e}")));
            }
            if t.parse::<f64>().is_ok_and(|x| x.is_infinite()) && t.chars().any(|c| c.is_ascii_digit()) {
                return Err(ConfigError::new(path, format!("{t} is beyond any number (give \"inf\" for no limit)")));
            }
            Value::String(raw.to_string())
        }
    };
    for (i, part) in parts.iter().enumerate() {
        let obj = match cur {
            Value::Object(m) => m,
            _ => {
                return Err(ConfigError::new(
                    parts[..i].join("."),
                    format!("is not an object, so it has no field {part:?}"),
                ))
            }
        };
        if i + 1 == parts.len() {
            obj.insert((*part).to_string(), value);
            return Ok(());
        }
        cur = obj.entry((*part).to_string()).or_insert_with(|| Value::Object(Default::default()));
        if cur.is_null() {
            *cur = Value::Object(Default::default());
        }
    }
    Ok(())
}

/// The engine fields that pin the KV pool, overriding a memory fraction. (SGLang's
/// `max_total_tokens` only bounds the pool the fraction gives, as SGLang does: it stays.)
pub const PINNED_POOL: [&str; 4] =
    ["kv_cache_tokens", "num_gpu_blocks_override", "kv_cache_memory_bytes", "max_total_num_tokens"];

/// The pins of [`PINNED_POOL`] that are a start-up log's figure of one setup (vLLM's
/// `kv_cache_tokens`, SGLang's `max_total_num_tokens`); the others ([`HELD_POOL`]) are the
/// engine's own flags, which vLLM holds whatever the setup.
pub const LOGGED_POOL: [&str; 2] = ["kv_cache_tokens", "max_total_num_tokens"];

/// The pins of [`PINNED_POOL`] that are vLLM's own flags, used in place of its memory profile
/// whatever the setup: `num_gpu_blocks_override` (a block count) and `kv_cache_memory_bytes`
/// (bytes per GPU, which vLLM cuts into the setup's own blocks).
pub const HELD_POOL: [&str; 2] = ["num_gpu_blocks_override", "kv_cache_memory_bytes"];

/// What a pin of [`HELD_POOL`] holds, in words.
pub fn held_what(field: &str) -> &'static str {
    if field == "kv_cache_memory_bytes" {
        "its bytes per GPU (cut into the setup's own blocks)"
    } else {
        "its block count"
    }
}

/// Whether a `--set` (or `tune --vary`) path changes what the KV pool would be: the memory
/// fraction, the model, the GPU (or its host), the TP size, the KV cache's or the weights'
/// format, the engine or its release (each release sizes its pool by its own rules: vLLM 0.29's
/// CUDA-graph estimate, 0.34's post-warmup sizing and 64-token blocks, SGLang's per-release
/// reserves), and the flags the memory account reads ([`POOL_FLAGS`]). A pinned pool (a
/// start-up log's figure) is then another setup's.
pub fn resizes_pool(path: &str) -> bool {
    let under = |root: &str| path == root || path.starts_with(&format!("{root}."));
    under("model")
        || under("hardware")
        || [
            "engine.gpu_memory_utilization",
            "engine.mem_fraction_static",
            "engine.tensor_parallel_size",
            "engine.tp_size",
            "engine.kv_cache_dtype",
            "engine.quantization",
            "engine.kind",
            "engine.version",
        ]
        .contains(&path)
        || path.strip_prefix("engine.").is_some_and(|f| POOL_FLAGS.contains(&f))
}

/// The engine flags (besides the memory fraction, TP size and formats) that the pool derived
/// from memory depends on (`memory.rs`): vLLM's profiled activation peak at the token budget
/// and its sampler's rows at `max_num_seqs` (the budget's default follows chunked prefill and
/// `max_model_len` when it is off), its CUDA graphs' memory (`enforce_eager`, the capture sizes
/// from `max_num_seqs` and the budget) and the pool rounded to whole blocks; SGLang's default
/// `mem_fraction_static`, whose reserve grows with the prefill chunk, the CUDA-graph batch size
/// (its default capped by `max_running_requests` from 0.5.22) and the piecewise graphs' token
/// sizes, and the pool rounded to whole pages. Until 2026-12-07 a pinned pool held when these
/// changed: `--set engine.max_num_batched_tokens=16384` kept the default scenario's 194,880
/// tokens where the model derives 164,304 (a report-only audit).
pub const POOL_FLAGS: [&str; 15] = [
    "max_num_batched_tokens",
    "max_num_seqs",
    "enable_chunked_prefill",
    "max_model_len",
    "enforce_eager",
    "block_size",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "cuda_graph_max_bs",
    "max_running_requests",
    "disable_cuda_graph",
    "context_length",
    "max_total_tokens",
    "page_size",
    "attention_backend",
];

/// The memory fractions: a what-if on the same GPU, model and release whose effect on the pool
/// servesim's memory account gives exactly (the requested share of the GPU), so a pinned log's
/// pool moves with it ([`carry_pins`]).
const FRACTIONS: [&str; 2] = ["engine.gpu_memory_utilization", "engine.mem_fraction_static"];

/// What became of a pool the scenario pins when assignments (`--set`, `tune --vary`) or a fleet's
/// replica group change a field the pool depends on ([`carry_pins`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PinChange {
    /// The pin (`kv_cache_tokens`, `max_total_num_tokens`: a start-up log's figure) belongs to
    /// another setup now (another GPU, model, TP size, KV or weight format, engine release; or
    /// one servesim cannot size both ways): dropped, the pool derived from memory.
    Dropped { field: String, cause: String },
    /// An engine flag ([`POOL_FLAGS`]) or the memory fraction changed on the same GPU, model,
    /// TP size, formats and release: the log's pool moved by what the pool derived from memory
    /// moves (`to = from + derived_to − derived_from` in whole blocks or pages, at most an SGLang
    /// `bound` where one caps it, at least 0), so the log's measured offset from
    /// servesim's memory account (what the account misses on that host) is kept and only the
    /// change is the model's. Until 2026-12-07 the pin was dropped, replacing the measured pool
    /// by the account's own error (`max_num_seqs=120` on the default scenario: the account moves
    /// +80 tokens, the dropped pin +1,504).
    Moved { field: String, cause: String, from: u64, to: u64, derived_from: u64, derived_to: u64, bound: Option<u64> },
    /// vLLM's `num_gpu_blocks_override` holds its block count, and its `kv_cache_memory_bytes`
    /// its bytes (cut into the new setup's blocks): vLLM uses them in place of its memory profile
    /// whatever else is set (`may_override_num_blocks`; `determine_available_memory` returns the
    /// bytes), so the change does not resize the pool from memory. Said, because the change would otherwise have. Until 2026-12-07 servesim dropped it
    /// as it drops a log's figure (`--set engine.max_num_seqs=32` on the KV-starved scenario
    /// ran on a derived 1,070,256 tokens where vLLM keeps its 10,240).
    Held { field: String, cause: String },
}

impl PinChange {
    /// The warning a caller prints (the binary, the browser page); `origin`: the scenario's
    /// file or name.
    pub fn message(&self, origin: &str) -> String {
        let n = crate::explain::thousands;
        match self {
            PinChange::Dropped { field, cause } => format!(
                "{origin}: engine.{field} was dropped: {cause} {} what the KV pool would be, so the pool is \
                 derived from the memory fraction and the model and GPU cards (an estimate; see README \"KV capacity \
                 from a memory fraction\"); {}",
                if cause.contains(", ") { "change" } else { "changes" },
                pin_again(field, cause)
            ),
            PinChange::Moved { field, cause, from, to, derived_from, derived_to, bound } => {
                let d = *derived_to as i128 - *derived_from as i128;
                let offset = *from as i128 - *derived_from as i128;
                let sign = |x: i128| if x >= 0 { "+" } else { "−" };
                let plural = cause.contains(", ");
                // The derived pool unmoved (only a bound or the block rounding changed the figure)
                // is said as such, not as a move of "+0".
                let account = if d == 0 {
                    format!(
                        "{cause} {} the pool servesim derives from memory at {} tokens, and the pinned figure{} keeps",
                        if plural { "leave" } else { "leaves" },
                        n(*derived_from),
                        // Only the rounding to the new setup's blocks (or a bound, said below) moved it.
                        if bound.is_none() && to != from { ", in whole blocks or pages of the new setup," } else { "" }
                    )
                } else {
                    format!(
                        "{cause} {} the pool servesim derives from memory from {} to {} tokens ({}{}), and the pinned \
                         figure moves by as much (in whole blocks or pages), keeping",
                        if plural { "move" } else { "moves" },
                        n(*derived_from),
                        n(*derived_to),
                        sign(d),
                        n(d.unsigned_abs() as u64)
                    )
                };
                format!(
                    "{origin}: engine.{field} moved from {} to {} tokens: {account} its measured offset from that \
                     account ({}{} tokens){}; the new figure is an estimate (README \"KV capacity from a memory \
                     fraction\"): {}",
                    n(*from),
                    n(*to),
                    sign(offset),
                    n(offset.unsigned_abs() as u64),
                    match bound {
                        Some(b) => format!(", then SGLang's max_total_tokens bound of {} caps it", n(*b)),
                        None if *to == 0 => ", and past zero it is none".to_string(),
                        None => String::new(),
                    },
                    pin_again(field, cause)
                )
            }
            PinChange::Held { field, cause } => format!(
                "{origin}: engine.{field} holds {}: vLLM uses it in place of its memory profile, so {cause} \
                 {} not resize the pool from memory; set engine.{field}=null to derive the pool",
                held_what(field),
                if cause.contains(", ") { "do" } else { "does" }
            ),
        }
    }
}

/// How to pin a pool again after [`PinChange`] `cause` dropped or moved the pin `field`: in a
/// fleet's group, in the group's engine (a top-level pin would be moved again); on an engine
/// changed to SGLang, SGLang's own field (vLLM's override is refused there).
fn pin_again(field: &str, cause: &str) -> String {
    match cause.split_once("'s ") {
        Some((group, _)) if group.starts_with("fleet") => {
            format!("pin the group's own pool with {group}.engine.{field}=N if you know it")
        }
        _ if HELD_POOL.contains(&field) => {
            "pin it again with --set engine.max_total_num_tokens=N (SGLang's log figure) if you know it".to_string()
        }
        _ => format!("pin it again with --set engine.{field}=N if you know it"),
    }
}

/// The path of a `--set PATH=VALUE` assignment, trimmed (`""` where there is none).
pub fn set_path(s: &str) -> &str {
    s.split('=').next().unwrap_or("").trim()
}

/// A `--set` list that would keep a value unsaid is refused, naming both assignments: a path
/// given twice (the last would win; a key twice in a file and a path twice to `--vary` are
/// refused alike), or a path after one of its own fields (the whole object replaces the field
/// set before it; the other order, an object then one of its fields, refines it and is kept).
pub fn refuse_repeated_paths(sets: &[String]) -> std::result::Result<(), String> {
    let path_of = |s: &String| set_path(s).to_string();
    for (i, s) in sets.iter().enumerate() {
        let p = path_of(s);
        if let Some(first) = sets[..i].iter().find(|t| path_of(t) == p) {
            return Err(format!("--set {p}: the path is given twice ({first}, then {s}); give it once"));
        }
        if let Some(field) = sets[..i].iter().find(|t| path_of(t).starts_with(&format!("{p}."))) {
            return Err(format!(
                "--set {p}: replaces the whole of {p}, whose field an earlier --set gave ({field}, then {s}), which \
                 would be lost; give {p} first, then its fields"
            ));
        }
    }
    Ok(())
}

/// Applies `--set` assignments as the command line does (the binary and the browser page alike):
/// each with [`apply_set`]; one pool pin set replaces the scenario's other pins; a path that
/// changes what the pool would be (and is set to a value the scenario does not already have,
/// [`value_at`]) moves, drops or holds the scenario's pins the same assignments do not give
/// ([`carry_pins`]). Returns what became of each such pin, for the caller to say
/// ([`PinChange::message`]).
pub fn apply_sets(json: &mut Value, sets: &[String]) -> std::result::Result<Vec<PinChange>, String> {
    let path_of = |s: &String| set_path(s).to_string();
    refuse_repeated_paths(sets)?;
    let before = json.clone();
    for s in sets {
        apply_set(json, s).map_err(|e| format!("--set {s}: {e}"))?;
    }
    // One pin set on the command line replaces the scenario's other pins (two pins are an
    // error, `config::vllm`): the command line says which pool this run has.
    let pinned_by_set: Vec<&str> = PINNED_POOL
        .into_iter()
        .filter(|k| sets.iter().any(|s| path_of(s) == format!("engine.{k}")))
        .filter(|k| json["engine"].get(*k).is_some_and(|v| !v.is_null()))
        .collect();
    if !pinned_by_set.is_empty() {
        if let Some(e) = json.get_mut("engine").and_then(Value::as_object_mut) {
            for k in PINNED_POOL {
                if !pinned_by_set.contains(&k) && before["engine"].get(k).is_some_and(|v| !v.is_null()) {
                    e.remove(k);
                }
            }
        }
    }
    let paths: Vec<String> = sets.iter().map(path_of).collect();
    refuse_fixed_coefficients_elsewhere(&paths, &before, json).map_err(|(_, names)| {
        let retimed: Vec<&str> = paths.iter().map(String::as_str).filter(|p| times_steps(p)).collect();
        format!(
            "--set {}: the scenario's step costs are fixed coefficients (cost.coefficients: {}), one deployment's, \
             which would time the new setup's steps as the scenario's own; drop them (--set cost.coefficients=null) \
             to time the new setup from its own GPU's kernels, or give all of them for it (--set \
             cost.coefficients='{{...}}')",
            retimed.join(", --set "),
            names.join(", ")
        )
    })?;
    let resized: Vec<String> =
        paths.iter().filter(|p| resizes_pool(p) && value_at(&before, p) != value_at(json, p)).cloned().collect();
    let cause = resized.iter().map(|p| format!("--set {p}")).collect::<Vec<_>>().join(", ");
    let given = |k: &str| paths.iter().any(|p| *p == format!("engine.{k}"));
    Ok(carry_pins(&resized, &cause, &before, json, given))
}

/// The value at `path` of scenario JSON `v` as the setup reads it: a field left out as its
/// default (an engine release the kind's default one, `VLLM_DEFAULT` or `SGLANG_DEFAULT`; a TP
/// size 1 under either name, `tp_size` being SGLang's name of `tensor_parallel_size`; a KV cache
/// dtype "auto"), and the hardware by its card and host (a card id and `{"gpu": id}` are one
/// GPU; its `count` is the TP size's). A path set to the value the scenario already has changes
/// no pool (setting a TP size of 1 or an "auto" dtype on a scenario that gives none had dropped
/// its pinned pool, a start-up log's figure for that very setup: the browser page does so when
/// a box is set back to what it shows). `--set` and fleet groups read it alike.
pub(crate) fn value_at(v: &Value, path: &str) -> Option<Value> {
    let field = |k: &str| v.get("engine").and_then(|e| e.get(k)).cloned().filter(|x| !x.is_null());
    match path {
        "engine.tensor_parallel_size" | "engine.tp_size" => {
            return Some(field("tensor_parallel_size").or_else(|| field("tp_size")).unwrap_or(Value::from(1)));
        }
        "engine.kv_cache_dtype" => return Some(field("kv_cache_dtype").unwrap_or(Value::from("auto"))),
        p if p == "hardware" || p.starts_with("hardware.") => {
            let d = step_deployment(v);
            return Some(serde_json::json!({"gpu": d["gpu"], "host": d["host"]}));
        }
        _ => {}
    }
    let got = path.split('.').try_fold(v, |v, k| v.get(k)).cloned().filter(|x| !x.is_null());
    if path == "engine.version" && got.is_none() {
        let sglang = v.pointer("/engine/kind").and_then(Value::as_str) == Some("sglang");
        return Some(Value::from(if sglang { super::SGLANG_DEFAULT } else { super::VLLM_DEFAULT }));
    }
    got
}

/// Fixed step coefficients are one deployment's costs: another GPU, model, TP size, weight
/// format or engine (`before` → `after`, scenario JSON, through `paths`) would be timed as the
/// scenario's own (the robustness audit of 2026-12-07: `tune --vary
/// hardware=a100-80gb,h100-80gb,rtx-4090,l40s` on `serve-small-vllm` drew four equal rows).
/// Refused, as `plan` refuses them and as a profile fitted on another deployment is refused,
/// unless the same assignments give every step coefficient `after` fixes (the whole
/// `cost.coefficients`, or each by name: another `cost.*` field leaves them the old setup's); a
/// card, model or engine that does not exist is left to the scenario's own error. The error is
/// `(the first path that retimes the steps, the coefficients fixed)`, for the caller to word.
pub(crate) fn refuse_fixed_coefficients_elsewhere(
    paths: &[String],
    before: &Value,
    after: &Value,
) -> std::result::Result<(), (String, Vec<&'static str>)> {
    let Some(retimed) = paths.iter().find(|p| times_steps(p)) else { return Ok(()) };
    let Some(names) = fixed_step_coefficients(after) else { return Ok(()) };
    if step_deployment(before) == step_deployment(after) {
        return Ok(());
    }
    let whole = paths.iter().any(|p| p == "cost" || p == "cost.coefficients");
    if whole || names.iter().all(|n| paths.iter().any(|p| *p == format!("cost.coefficients.{n}"))) {
        return Ok(());
    }
    // A card, model or engine kind no one knows: the scenario's own error names it.
    let d = step_deployment(after);
    let unknown_gpu = d["gpu"].as_str().is_some_and(|g| crate::builtin::gpu(g).is_none());
    let unknown_model = d["model"].as_str().is_some_and(|m| crate::builtin::model(m).is_none());
    let unknown_kind = d["kind"].as_str().is_some_and(|k| !["vllm", "sglang"].contains(&k));
    if unknown_gpu || unknown_model || unknown_kind {
        return Ok(());
    }
    Err((retimed.clone(), names))
}

/// Whether a `--set` path changes what a step costs on the hardware: the GPU (or its host), the
/// model, the TP size, the weights' format, the engine ([`apply_sets`] refuses fixed step
/// coefficients under such a change).
pub(crate) fn times_steps(path: &str) -> bool {
    let under = |root: &str| path == root || path.starts_with(&format!("{root}."));
    under("model")
        || under("hardware")
        || ["engine.tensor_parallel_size", "engine.tp_size", "engine.quantization", "engine.kind"].contains(&path)
}

/// What a step's cost depends on in scenario JSON `v`, beside the engine's flags: the GPU card
/// (by id or inline) and its host, the model, the TP size under either name, the weights'
/// format, the engine. A GPU given as an id or as `{"gpu": id, "count": n}` is one card (the
/// count is the TP size's, or data parallelism's, which the step does not see).
pub(crate) fn step_deployment(v: &Value) -> Value {
    let e = |k: &str| v.get("engine").and_then(|e| e.get(k)).cloned().filter(|x| !x.is_null());
    let (gpu, host) = match v.get("hardware") {
        Some(Value::Object(h)) => (h.get("gpu").cloned(), h.get("host").cloned()),
        h => (h.cloned(), None),
    };
    serde_json::json!({
        "gpu": gpu, "host": host, "model": v.get("model"),
        "tp": e("tensor_parallel_size").or_else(|| e("tp_size")).unwrap_or(Value::from(1)),
        "quantization": e("quantization"), "kind": e("kind").unwrap_or(Value::from("vllm")),
    })
}

/// The step coefficients (the six of the GPU's step cost; ingress and streaming are the
/// front end's) that scenario `json` fixes inline in `cost.coefficients`, by name; `None` where
/// it fixes none. `plan` refuses them too.
pub fn fixed_step_coefficients(json: &Value) -> Option<Vec<&'static str>> {
    let co = json.pointer("/cost/coefficients").and_then(Value::as_object)?;
    let names: Vec<&str> = crate::cost::COEFFICIENT_NAMES[..6]
        .iter()
        .copied()
        .filter(|k| co.get(*k).is_some_and(|v| !v.is_null()))
        .collect();
    (!names.is_empty()).then_some(names)
}

/// Whether changing `path` (one [`resizes_pool`] names) moves a start-up log's pinned pool with
/// the pool derived from memory rather than dropping it: an engine flag of [`POOL_FLAGS`] or a
/// memory fraction, unless the fraction only caps the pool (`fraction_only_caps`: vLLM from
/// 0.34, [`super::SimSpec::memory_fraction_only_caps`]). [`carry_pins`] and `tune`'s notes
/// decide by it.
pub fn moves_pin(path: &str, fraction_only_caps: bool) -> bool {
    path.strip_prefix("engine.").is_some_and(|f| POOL_FLAGS.contains(&f))
        || (FRACTIONS.contains(&path) && !fraction_only_caps)
}

/// What becomes of the pools `before` (scenario JSON) pins when `paths` (fields
/// [`resizes_pool`] names, each set to another value) take it to `after` (the same scenario
/// with those values, its pins still in place); `given(k)`: pin `k` is set by the same change and
/// stays as given. Edits `after`'s engine and returns what to say. `--set` ([`apply_sets`]) and a
/// fleet's replica groups decide by it alike:
/// - vLLM's own flags ([`HELD_POOL`]) hold, as vLLM holds them: `num_gpu_blocks_override` its
///   block count, `kv_cache_memory_bytes` its bytes, cut into the new setup's blocks
///   ([`PinChange::Held`], said where the change would have resized a derived pool); on an
///   engine that is no longer vLLM they are dropped.
/// - A start-up log's figure (`kv_cache_tokens`, `max_total_num_tokens`) moves
///   ([`PinChange::Moved`]) where every path [`moves_pin`] and both setups derive a pool: by the
///   difference of the derived pools (the profiled ones, SGLang's `max_total_tokens` bound
///   lifted, where a bound is given; the result then bounded), rounded down to the new setup's
///   block or page, and past zero to zero (the engine's own error then says the setup has no
///   pool). It holds where the derived pools come out the same, and where the scenario's own
///   setup derives none (the pin is what lets it run). It is dropped otherwise
///   ([`PinChange::Dropped`]): another GPU, model, TP size, format or release; vLLM from 0.34 with
///   another memory fraction (there the fraction only caps a pool sized after warm-up, so the
///   log's offset does not carry); a log the SGLang bound had cut (its profiled pool unknown);
///   a new setup that derives no pool (its own error then says why).
pub(crate) fn carry_pins<S: AsRef<str>>(
    paths: &[S],
    cause: &str,
    before: &Value,
    after: &mut Value,
    given: impl Fn(&str) -> bool,
) -> Vec<PinChange> {
    let pins: Vec<&str> = PINNED_POOL
        .into_iter()
        .filter(|k| !given(k) && after["engine"].get(*k).is_some_and(|v| !v.is_null()))
        .collect();
    if paths.is_empty() || pins.is_empty() {
        return Vec::new();
    }
    let bounded = |v: &Value| v.pointer("/engine/max_total_tokens").and_then(Value::as_u64);
    let lift = bounded(before).is_some() || bounded(after).is_some();
    let (d_before, d_after) = (derived_pool(before, lift), derived_pool(after, lift));
    let caps_only = [&d_before, &d_after].iter().any(|d| d.as_ref().is_some_and(|d| d.fraction_caps));
    let movable = paths.iter().all(|p| moves_pin(p.as_ref(), caps_only));
    let tokens = |d: &Option<Derived>| d.as_ref().map(|d| d.tokens);
    // Whether the change resizes the pool from memory: a path that moves a pin only where the
    // derived pool differs (or the new setup derives none); any other path always.
    // (vLLM 0.34's capping fraction drops a log's pin, but only where the derived pool moves: a
    // fraction set to the one in effect is no change.)
    let only_flags_and_fractions = paths.iter().all(|p| moves_pin(p.as_ref(), false));
    let resizes = !only_flags_and_fractions || derived_pools_differ(tokens(&d_before), tokens(&d_after));
    let vllm_after = after.pointer("/engine/kind").and_then(Value::as_str).unwrap_or("vllm") == "vllm";
    let bound_after = bounded(after);
    let mut out = Vec::new();
    for k in pins {
        let field = k.to_string();
        let cause = cause.to_string();
        let e = after.get_mut("engine").and_then(Value::as_object_mut).expect("the pin is in the engine");
        if HELD_POOL.contains(&k) {
            if !vllm_after {
                e.remove(k);
                out.push(PinChange::Dropped { field, cause });
            } else if resizes && d_after.is_some() {
                // (Where the new setup does not resolve without it, its run or its error speaks.)
                out.push(PinChange::Held { field, cause });
            }
            continue;
        }
        let pin = e.get(k).and_then(Value::as_u64);
        let cut_by_bound = matches!((pin, bounded(before)), (Some(p), Some(b)) if p >= b);
        // The moved figure: by the derived pools' difference in whole blocks (pages), past zero
        // to zero, then under the new setup's SGLang bound where it cuts.
        let moved = match (pin, movable && !cut_by_bound, &d_before, &d_after) {
            (Some(pin), true, Some(from), Some(to)) => {
                let unit = u64::from(to.unit.max(1));
                let moved = (pin as i128 + to.tokens as i128 - from.tokens as i128).max(0) as u64 / unit * unit;
                let bound = bound_after.filter(|b| *b < moved);
                Some((pin, bound.map_or(moved, |b| b / unit * unit), from.tokens, to.tokens, bound))
            }
            _ => None,
        };
        match moved {
            // The same pool: nothing to say (a flag or fraction the derived pool does not see).
            Some((from, to, ..)) if to == from => {}
            Some((from, to, derived_from, derived_to, bound)) => {
                e.insert(k.to_string(), Value::from(to));
                out.push(PinChange::Moved { field, cause, from, to, derived_from, derived_to, bound });
            }
            // A movable change the derived pool does not see, where no figure could be moved
            // (the scenario's own setup derives none: the pin is what lets it run).
            // (A log the SGLang bound had cut is dropped where the bound changes: its profiled
            // pool is unknown.)
            None if !resizes && !(cut_by_bound && bounded(before) != bound_after) => {}
            None => {
                e.remove(k);
                out.push(PinChange::Dropped { field, cause });
            }
        }
    }
    out
}

/// Whether a setup derives another KV pool from memory ([`derived_pool`]) than the scenario's
/// own did: false where the scenario's derives none (its pin is what lets it run), true where
/// only the scenario's does (the new setup's own error then says why it cannot run).
fn derived_pools_differ(before: Option<u64>, after: Option<u64>) -> bool {
    match (before, after) {
        (None, _) => false,
        (Some(x), Some(y)) => x != y,
        (Some(_), None) => true,
    }
}

/// A pool a setup derives from memory ([`derived_pool`]).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Derived {
    /// Tokens, as the setup's start-up log prints them (vLLM's with the null block, as
    /// `kv_cache_tokens` has it).
    tokens: u64,
    /// Its block (vLLM) or page (SGLang) size, tokens.
    unit: u32,
    /// vLLM from 0.34 on a GPU: the memory fraction only caps a pool sized after warm-up.
    fraction_caps: bool,
}

/// The KV pool `json`'s setup derives from memory: its pinned pools removed (and with
/// `lift_bound` SGLang's `max_total_tokens` bound too: the profiled pool), its workload and cost
/// profile replaced by stand-ins the pool does not depend on; for [`carry_pins`]; `None` where
/// that setup does not resolve. Memoised per thread on the setup (`tune` asks for its base
/// setup's pool once for every configuration).
fn derived_pool(json: &Value, lift_bound: bool) -> Option<Derived> {
    let mut v = json.clone();
    let o = v.as_object_mut()?;
    if let Some(e) = o.get_mut("engine").and_then(Value::as_object_mut) {
        for k in PINNED_POOL {
            e.remove(k);
        }
        if lift_bound {
            e.remove("max_total_tokens");
        }
    }
    o.insert(
        "workload".into(),
        serde_json::json!({"dataset_name": "random", "random_input_len": 1, "random_output_len": 1, "num_prompts": 1,
                           "ignore_eos": true}),
    );
    o.remove("fleet");
    if let Some(c) = o.get_mut("cost").and_then(Value::as_object_mut) {
        c.remove("profile");
    }
    thread_local! {
        static MEMO: std::cell::RefCell<Vec<(String, Option<Derived>)>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let key = v.to_string();
    if let Some(hit) = MEMO.with(|m| m.borrow().iter().find(|(k, _)| *k == key).map(|(_, d)| *d)) {
        return hit;
    }
    // The built-in cards, parsed once.
    static BUILTIN: std::sync::OnceLock<Option<super::Resources>> = std::sync::OnceLock::new();
    let got = BUILTIN.get_or_init(|| crate::builtin::resources().ok()).as_ref().and_then(|res| {
        let scenario = super::scenario_from_value(v).ok()?;
        let spec = super::resolve(&scenario, res).ok()?;
        // In the pin's own terms: vLLM's log counts the null block (`kv_cache_tokens`).
        let (tokens, unit) = match &spec.engine {
            super::EngineSpec::Vllm(c) => (u64::from(c.num_gpu_blocks) * u64::from(c.block_size), c.block_size),
            super::EngineSpec::Sglang(c) => (c.max_total_tokens, c.page_size),
        };
        Some(Derived { tokens, unit, fraction_caps: spec.memory_fraction_only_caps() })
    });
    MEMO.with(|m| {
        let mut m = m.borrow_mut();
        if m.len() >= 8 {
            m.remove(0);
        }
        m.push((key, got));
    });
    got
}

#[cfg(test)]
mod set_value_tests {
    use super::*;

    /// A path given twice is refused, naming both (it kept the last value unsaid); so is an object
    /// after one of its own fields (the field would be lost), not the other order.
    #[test]
    fn a_path_given_twice_is_refused() {
        let mut v = serde_json::json!({"engine": {"kind": "vllm"}});
        let e = apply_sets(&mut v, &["engine.max_num_seqs=8".to_string(), r#"engine={"kind":"vllm"}"#.to_string()])
            .unwrap_err();
        assert!(e.contains("--set engine: replaces the whole of engine, whose field an earlier --set gave"), "{e}");
        apply_sets(&mut v, &[r#"engine={"kind":"vllm"}"#.to_string(), "engine.max_num_seqs=8".to_string()]).unwrap();
        assert_eq!(v["engine"]["max_num_seqs"], 8);
        let mut v = serde_json::json!({"engine": {"kind": "vllm"}});
        let sets = ["engine.max_num_seqs=8".to_string(), " engine.max_num_seqs =16".to_string()];
        assert!(refuse_repeated_paths(&sets).is_err());
        let e = apply_sets(&mut v, &sets).unwrap_err();
        assert!(e.contains("engine.max_num_seqs: the path is given twice"), "{e}");
        assert!(e.contains("engine.max_num_seqs=8, then  engine.max_num_seqs =16"), "{e}");
        assert!(v["engine"].get("max_num_seqs").is_none(), "nothing applied: {v}");
        // Two different paths are not one given twice.
        apply_sets(&mut v, &["engine.max_num_seqs=8".to_string(), "engine.max_num_batched_tokens=4096".to_string()])
            .unwrap();
        assert_eq!(v["engine"]["max_num_seqs"], 8);
    }

    /// Setting a field that sizes the pool to the value it already has, given or by default,
    /// keeps a pinned pool; another value drops it (the audit of 2026-12-06: the page's TP box
    /// set back to 1 dropped a start-up log's pool, 10,240 → 1,080,608 tokens).
    #[test]
    fn a_pool_field_set_to_its_default_keeps_the_pin() {
        let scenario = serde_json::json!({"engine": {"kind": "vllm", "kv_cache_tokens": 10240}});
        for same in ["engine.tensor_parallel_size=1", "engine.tp_size=1", "engine.kv_cache_dtype=auto"] {
            let mut v = scenario.clone();
            assert_eq!(apply_sets(&mut v, &[same.to_string()]).unwrap(), vec![], "{same}");
            assert_eq!(v["engine"]["kv_cache_tokens"], 10240, "{same}");
        }
        for other in ["engine.tensor_parallel_size=2", "engine.tp_size=2", "engine.kv_cache_dtype=fp8"] {
            let mut v = scenario.clone();
            let dropped = apply_sets(&mut v, &[other.to_string()]).unwrap();
            assert_eq!(dropped.len(), 1, "{other}");
            assert!(v["engine"].get("kv_cache_tokens").is_none(), "{other}");
        }
        // Under the other name of the TP size, the same value is no change.
        let mut v = serde_json::json!({"engine": {"kind": "sglang", "tp_size": 2, "max_total_num_tokens": 5000}});
        assert_eq!(apply_sets(&mut v, &["engine.tensor_parallel_size=2".to_string()]).unwrap(), vec![]);
    }

    /// An engine flag the derived pool depends on moves a start-up log's pinned pool by what the
    /// derived pool moves where its new value changes that pool (the report-only audit of
    /// 2026-12-07: `max_num_batched_tokens=16384` kept the default scenario's pinned pool
    /// (194,896 tokens with the null block) where the model derives 164,320; until 2026-12-07 the
    /// pin was then dropped, replacing the log by the account's own error), and keeps it where it
    /// does not (`max_model_len` with chunked prefill on; SGLang's prefill chunk under a given
    /// `mem_fraction_static`).
    #[test]
    fn an_engine_flag_moves_the_pin_only_where_it_resizes_the_derived_pool() {
        let scenario = |i: usize| -> Value { serde_json::from_str(crate::builtin::SCENARIOS[i].1).unwrap() };
        let run = |i: usize, set: &str| {
            let mut v = scenario(i);
            let changes = apply_sets(&mut v, &[set.to_string()]).unwrap();
            (changes, v)
        };
        let log = scenario(0)["engine"]["kv_cache_tokens"].as_u64().unwrap();
        let derived = |v: &Value| derived_pool(v, false).unwrap().tokens;
        let offset = log as i64 - derived(&scenario(0)) as i64;
        // vLLM 0.28 on the RTX 5090 (the default scenario, pinned at 194,896 tokens).
        for set in
            ["engine.max_num_batched_tokens=16384", "engine.max_num_seqs=512", "engine.gpu_memory_utilization=0.9"]
        {
            let (changes, v) = run(0, set);
            let path = set.split('=').next().unwrap();
            let to = v["engine"]["kv_cache_tokens"].as_u64().unwrap();
            let mut unpinned = v.clone();
            unpinned["engine"].as_object_mut().unwrap().remove("kv_cache_tokens");
            // The log's offset from the account is kept at the new setup.
            assert_eq!(to as i64 - derived(&unpinned) as i64, offset, "{set}");
            assert_ne!(to, log, "{set}");
            assert_eq!(
                changes,
                vec![PinChange::Moved {
                    field: "kv_cache_tokens".into(),
                    cause: format!("--set {path}"),
                    from: log,
                    to,
                    derived_from: derived(&scenario(0)),
                    derived_to: derived(&unpinned),
                    bound: None,
                }],
                "{set}"
            );
        }
        let (changes, v) = run(0, "engine.max_model_len=8192");
        assert_eq!(changes, vec![], "max_model_len leaves vLLM's derived pool as it was");
        assert_eq!(v["engine"]["kv_cache_tokens"], log);
        // Another GPU or release: another setup's pool, derived.
        for set in ["hardware=h100-80gb", "engine.version=0.33.0", "engine.kv_cache_dtype=fp8"] {
            let (changes, v) = run(0, set);
            assert!(matches!(&changes[..], [PinChange::Dropped { .. }]), "{set}: {changes:?}");
            assert!(v["engine"].get("kv_cache_tokens").is_none(), "{set}");
        }
        // A flag beside another GPU: dropped, not moved.
        let mut v = scenario(0);
        let changes =
            apply_sets(&mut v, &["engine.max_num_seqs=512".to_string(), "hardware=h100-80gb".to_string()]).unwrap();
        assert!(matches!(&changes[..], [PinChange::Dropped { .. }]), "{changes:?}");
        // SGLang with its fraction given: the prefill chunk sizes no reserve.
        let (changes, v) = run(1, "engine.chunked_prefill_size=4096");
        assert_eq!(changes, vec![]);
        assert_eq!(v["engine"]["max_total_num_tokens"], 210714);
        // The same flag under SGLang's default fraction resizes the pool: the log moves (by
        // 73,831 − 184,469 derived tokens at a chunk of 8,192); at 16,384 the default fraction
        // leaves no pool (its error says so): dropped.
        let mut v = scenario(1);
        v["engine"].as_object_mut().unwrap().remove("mem_fraction_static");
        let before = v.clone();
        let changes = apply_sets(&mut v, &["engine.chunked_prefill_size=8192".to_string()]).unwrap();
        assert!(
            matches!(
                &changes[..],
                [PinChange::Moved { from: 210714, to: 100076, derived_from: 184469, derived_to: 73831, .. }]
            ),
            "{changes:?}"
        );
        let mut v = before;
        let changes = apply_sets(&mut v, &["engine.chunked_prefill_size=16384".to_string()]).unwrap();
        assert!(matches!(&changes[..], [PinChange::Dropped { .. }]), "{changes:?}");
        // A bound below the moved pool caps it, as SGLang's min(profiled, max_total_tokens) does.
        let mut v = scenario(1);
        let changes = apply_sets(
            &mut v,
            &["engine.mem_fraction_static=0.9".to_string(), "engine.max_total_tokens=100000".to_string()],
        )
        .unwrap();
        assert!(matches!(&changes[..], [PinChange::Moved { to: 100000, .. }]), "{changes:?}");
        assert_eq!(v["engine"]["max_total_num_tokens"], 100000);
        // A log the bound had cut tells nothing of the profiled pool: a new bound drops it.
        let mut v = scenario(1);
        v["engine"]["max_total_tokens"] = 210714.into();
        let changes = apply_sets(&mut v, &["engine.max_total_tokens=300000".to_string()]).unwrap();
        assert!(matches!(&changes[..], [PinChange::Dropped { .. }]), "{changes:?}");
        // A setup that derives no pool of its own (vLLM 0.33 sizes none on a card without a
        // compute capability, and its error asks for a pin): the pin is what lets it run, and a
        // flag set beside it keeps it.
        let mut card = serde_json::to_value(crate::builtin::gpu("h100-80gb").unwrap()).unwrap();
        card.as_object_mut().unwrap().remove("compute_capability");
        card["id"] = "h100-no-capability".into();
        let mut v = scenario(0);
        v["engine"]["version"] = "0.33.0".into();
        v["engine"]["max_num_seqs"] = 1024.into();
        v["engine"]["kv_cache_tokens"] = 400000.into();
        v["hardware"] = serde_json::json!({"gpu": card});
        assert_eq!(derived_pool(&v, false), None);
        let changes = apply_sets(&mut v, &["engine.max_num_seqs=512".to_string()]).unwrap();
        assert_eq!(changes, vec![]);
        assert_eq!(v["engine"]["kv_cache_tokens"], 400000);
    }

    /// vLLM's `kv_cache_memory_bytes` holds its bytes whatever else is set, as vLLM holds them
    /// (cut into the new setup's blocks), said as the override is; it is dropped on SGLang, and
    /// one set on the command line replaces the scenario's other pins (a start-up log's figure).
    #[test]
    fn vllms_kv_cache_bytes_hold_as_vllm_holds_them() {
        let scenario = serde_json::json!({"version": 1, "engine": {"kind": "vllm", "version": "0.33.0",
                                          "kv_cache_memory_bytes": 1073741824, "max_model_len": 4096},
                                          "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb"});
        for set in ["engine.max_num_seqs=32", "engine.gpu_memory_utilization=0.5", "engine.tensor_parallel_size=2"] {
            let mut v = scenario.clone();
            let changes = apply_sets(&mut v, &[set.to_string()]).unwrap();
            assert_eq!(v["engine"]["kv_cache_memory_bytes"], 1073741824u64, "{set}");
            assert!(matches!(&changes[..], [PinChange::Held { .. }]), "{set}: {changes:?}");
            assert!(changes[0].message("s.json").contains("holds its bytes per GPU"), "{set}");
        }
        let mut v = scenario.clone();
        let changes = apply_sets(&mut v, &["engine.kind=sglang".to_string()]).unwrap();
        assert!(matches!(&changes[..], [PinChange::Dropped { .. }]), "{changes:?}");
        assert!(v["engine"].get("kv_cache_memory_bytes").is_none());
        assert!(changes[0].message("s.json").contains("engine.max_total_num_tokens=N"));
        // Set on the command line, the bytes replace a log's figure (two pins are an error).
        let mut v = serde_json::json!({"engine": {"kind": "vllm", "kv_cache_tokens": 10240}});
        apply_sets(&mut v, &["engine.kv_cache_memory_bytes=1073741824".to_string()]).unwrap();
        assert!(v["engine"].get("kv_cache_tokens").is_none());
        assert_eq!(v["engine"]["kv_cache_memory_bytes"], 1073741824u64);
    }

    /// vLLM's `num_gpu_blocks_override` holds whatever else is set, as vLLM holds it (it was
    /// dropped as a log's figure is: `--set engine.max_num_seqs=32` on the KV-starved scenario
    /// ran on 1,070,256 derived tokens where vLLM keeps 10,240), and the change is said where
    /// it would have resized a derived pool.
    #[test]
    fn vllms_block_override_holds_as_vllm_holds_it() {
        let scenario = serde_json::json!({"version": 1, "engine": {"kind": "vllm", "version": "0.33.0", "num_gpu_blocks_override": 641},
                                          "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb"});
        for set in ["engine.max_num_seqs=32", "engine.gpu_memory_utilization=0.5", "hardware=h100-80gb"] {
            let mut v = scenario.clone();
            let changes = apply_sets(&mut v, &[set.to_string()]).unwrap();
            assert_eq!(v["engine"]["num_gpu_blocks_override"], 641, "{set}");
            assert!(matches!(&changes[..], [PinChange::Held { .. }]), "{set}: {changes:?}");
            assert!(changes[0].message("s.json").contains("holds its block count"), "{set}");
        }
        // On an engine that is no longer vLLM, vLLM's flag is dropped.
        let mut v = scenario.clone();
        let changes = apply_sets(&mut v, &["engine.kind=sglang".to_string()]).unwrap();
        assert!(matches!(&changes[..], [PinChange::Dropped { .. }]), "{changes:?}");
        assert!(v["engine"].get("num_gpu_blocks_override").is_none());
        // A log's figure set beside it replaces it, as before.
        let mut v = scenario.clone();
        apply_sets(&mut v, &["engine.kv_cache_tokens=20000".to_string()]).unwrap();
        assert!(v["engine"].get("num_gpu_blocks_override").is_none());
    }

    /// The review of 2026-12-07's edge cases of the move: a fraction set to the default the
    /// scenario leaves unwritten is no change (it said "moved +0"); vLLM 0.34's fraction only caps
    /// a pool sized after warm-up, so a log's offset does not carry (dropped); an SGLang bound set
    /// below the log caps it (the bound alone: the derived pool does not move); a move past zero
    /// is zero (the engine's error then says there is no pool); the fixed step coefficients of
    /// another deployment are refused unless every one is given again.
    #[test]
    fn the_moves_edge_cases() {
        let scenario = |i: usize| -> Value { serde_json::from_str(crate::builtin::SCENARIOS[i].1).unwrap() };
        let long =
            crate::builtin::SCENARIOS.iter().position(|(n, _)| *n == "long-prefill-itl-llama3.1-8b-h100-vllm").unwrap();
        let mut v = scenario(long);
        assert!(v["engine"].get("gpu_memory_utilization").is_none());
        assert_eq!(apply_sets(&mut v, &["engine.gpu_memory_utilization=0.92".to_string()]).unwrap(), vec![]);
        let mut v = scenario(long);
        let sets = ["engine.version=0.34.0".to_string(), "engine.gpu_memory_utilization=0.9".to_string()];
        assert!(matches!(&apply_sets(&mut v, &sets).unwrap()[..], [PinChange::Dropped { .. }]));
        // ... but not a fraction the derived pool does not see (0.34's own 1.0).
        let mut v = scenario(long);
        v["engine"]["version"] = "0.34.0".into();
        assert_eq!(apply_sets(&mut v, &["engine.gpu_memory_utilization=1.0".to_string()]).unwrap(), vec![]);
        let mut v = scenario(1);
        let changes = apply_sets(&mut v, &["engine.max_total_tokens=100000".to_string()]).unwrap();
        assert!(matches!(&changes[..], [PinChange::Moved { to: 100000, bound: Some(100000), .. }]), "{changes:?}");
        let mut v = scenario(0);
        let sets = ["engine.gpu_memory_utilization=0.5231".to_string(), "engine.max_model_len=256".to_string()];
        let changes = apply_sets(&mut v, &sets).unwrap();
        assert!(matches!(&changes[..], [PinChange::Moved { to: 0, .. }]), "{changes:?}");
        // Fixed coefficients.
        let mut base = scenario(0);
        base["cost"] = serde_json::json!({"coefficients": {"step_us": 900, "decode_token_us": 20}});
        for sets in [
            vec!["hardware=h100-80gb"],
            vec!["cost.time_scale=1", "hardware=h100-80gb"],
            vec!["cost.coefficients.step_us=800", "hardware=h100-80gb"],
        ] {
            let mut v = base.clone();
            let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
            let e = apply_sets(&mut v, &sets).unwrap_err();
            assert!(e.contains("--set hardware: the scenario's step costs are fixed coefficients"), "{e}");
        }
        for sets in [
            vec!["cost.coefficients=null", "hardware=h100-80gb"],
            vec!["cost.coefficients.step_us=800", "cost.coefficients.decode_token_us=15", "hardware=h100-80gb"],
            vec!["engine.max_num_seqs=64"],
            vec!["hardware={\"gpu\": \"rtx-5090\", \"host\": \"wsl2\", \"count\": 1}"],
            vec!["hardware=no-such-card"],
        ] {
            let mut v = base.clone();
            let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
            assert!(apply_sets(&mut v, &sets).is_ok(), "{sets:?}");
        }
    }

    /// What was meant as JSON and is not (an object or list with a typo, a number past f64) is an
    /// error naming the path, not a string a field then reads as a card name or as "inf".
    #[test]
    fn a_value_meant_as_json_that_is_not_is_an_error() {
        let mut v = serde_json::json!({});
        let e = apply_set(&mut v, "model={bad").unwrap_err();
        assert_eq!(e.path, "model");
        assert!(e.message.starts_with("not valid JSON"), "{e}");
        assert!(apply_set(&mut v, "model=[1").unwrap_err().message.starts_with("not valid JSON"));
        let e = apply_set(&mut v, "workload.request_rate=1e400").unwrap_err();
        assert!(e.message.contains("beyond any number"), "{e}");
        // Strings stay strings; numbers and objects parse.
        apply_set(&mut v, "engine.kind=vllm").unwrap();
        apply_set(&mut v, "workload.request_rate=inf").unwrap();
        assert_eq!(v["workload"]["request_rate"], "inf");
        apply_set(&mut v, "workload.request_rate=1e300").unwrap();
        assert_eq!(v["workload"]["request_rate"], 1e300);
        apply_set(&mut v, r#"model={"id": "m"}"#).unwrap();
        assert_eq!(v["engine"]["kind"], "vllm");
        assert_eq!(v["model"]["id"], "m");
    }

    /// An index into a list is said to be unsupported, naming the list to set whole (it was
    /// "unknown field `replicas[0]`", as if the field did not exist: the fleet audit).
    #[test]
    fn an_index_into_a_list_is_said_to_be_unsupported() {
        let mut v = serde_json::json!({"fleet": {"replicas": [{"count": 1}]}});
        let e = apply_set(&mut v, "fleet.replicas[0].count=2").unwrap_err();
        assert_eq!(e.path, "--set");
        assert!(e.message.contains("does not index into lists") && e.message.contains("`replicas`"), "{e}");
        assert_eq!(v["fleet"]["replicas"][0]["count"], 1);
    }
}
