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
pub const PINNED_POOL: [&str; 3] = ["kv_cache_tokens", "num_gpu_blocks_override", "max_total_num_tokens"];

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

/// Applies `--set` assignments as the command line does (the binary and the browser page alike):
/// each with [`apply_set`]; one pool pin set replaces the scenario's other pins; a path that
/// changes what the pool would be (and is set to a value the scenario does not already have)
/// drops the scenario's pins the same assignments do not give. Returns the pins dropped that
/// way, each with the `--set` paths that caused it (`"a, --set b"`), for the caller to say.
pub fn apply_sets(json: &mut Value, sets: &[String]) -> std::result::Result<Vec<(String, String)>, String> {
    let path_of = |s: &String| s.split('=').next().unwrap_or("").trim().to_string();
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
    // A path set to the value the scenario already has changes no pool; a field left out is
    // read as its default: an engine release the kind's default one (`VLLM_DEFAULT`,
    // `SGLANG_DEFAULT`), a TP size 1 under either name (`tp_size` is SGLang's name of
    // `tensor_parallel_size`), a KV cache dtype "auto". (Setting a TP size of 1 or an "auto"
    // dtype on a scenario that gives none had dropped its pinned pool, a start-up log's figure
    // for that very setup: the browser page does so when a box is set back to what it shows.)
    let at = |v: &Value, p: &str| {
        let field = |k: &str| v.get("engine").and_then(|e| e.get(k)).cloned().filter(|x| !x.is_null());
        match p {
            "engine.tensor_parallel_size" | "engine.tp_size" => {
                return Some(field("tensor_parallel_size").or_else(|| field("tp_size")).unwrap_or(Value::from(1)));
            }
            "engine.kv_cache_dtype" => return Some(field("kv_cache_dtype").unwrap_or(Value::from("auto"))),
            _ => {}
        }
        let got = p.split('.').try_fold(v, |v, k| v.get(k)).cloned().filter(|x| !x.is_null());
        if p == "engine.version" && got.is_none() {
            let sglang = v.pointer("/engine/kind").and_then(Value::as_str) == Some("sglang");
            return Some(Value::from(if sglang { super::SGLANG_DEFAULT } else { super::VLLM_DEFAULT }));
        }
        got
    };
    let mut resized: Vec<String> =
        sets.iter().map(path_of).filter(|p| resizes_pool(p) && at(&before, p) != at(json, p)).collect();
    // A flag the pool depends on only in some setups (`POOL_FLAGS`: `max_model_len` only with
    // chunked prefill off, SGLang's `max_running_requests` only from 0.5.22, a prefill chunk only
    // under SGLang's default fraction): the pin (that pool as a log printed it) is dropped only
    // where the new setup derives another pool from memory, or none (its error then says why).
    // Where the scenario's own setup derives none (a card vLLM 0.33's sizing refuses, whose error
    // asks for a pin), the pin is what lets the run start, and it holds (a review, 2026-12-07).
    if !paths_resize_pool(&resized, &before, json) {
        resized.clear();
    }
    // A memory fraction, model, GPU, TP size or KV format set is a what-if on the pool: the
    // scenario's pinned pool (a start-up log's figure for its own setup) would otherwise
    // override it silently. Unless the same assignments pin the pool too, the pin is dropped.
    let mut dropped = Vec::new();
    if !resized.is_empty() {
        let pinned_here = |k: &str| sets.iter().any(|s| path_of(s) == format!("engine.{k}"));
        if let Some(e) = json.get_mut("engine").and_then(Value::as_object_mut) {
            for k in PINNED_POOL {
                if !pinned_here(k) && e.get(k).is_some_and(|v| !v.is_null()) {
                    e.remove(k);
                    dropped.push((k.to_string(), resized.join(", --set ")));
                }
            }
        }
    }
    Ok(dropped)
}

/// Whether changing `paths` (each a field [`resizes_pool`] names, set to another value) takes the
/// setup `before` (scenario JSON) to one, `after`, with another KV pool: any path but an engine
/// flag of [`POOL_FLAGS`] does; flags alone only where the derived pool differs
/// ([`derived_pools_differ`]). `--set` ([`apply_sets`]) and a fleet's groups decide by it alike.
pub(crate) fn paths_resize_pool<S: AsRef<str>>(paths: &[S], before: &Value, after: &Value) -> bool {
    let flags_only = paths.iter().all(|p| p.as_ref().strip_prefix("engine.").is_some_and(|f| POOL_FLAGS.contains(&f)));
    !paths.is_empty() && (!flags_only || derived_pools_differ(before, after))
}

/// Whether the setup of scenario `after` (JSON) derives another KV pool from memory than that of
/// `before` ([`derived_pool`]): false where `before` derives none (its pin is what lets it run),
/// true where only `before` does (the new setup's own error then says why it cannot run).
fn derived_pools_differ(before: &Value, after: &Value) -> bool {
    match (derived_pool(before), derived_pool(after)) {
        (None, _) => false,
        (Some(x), Some(y)) => x != y,
        (Some(_), None) => true,
    }
}

/// The KV pool in tokens that `json`'s setup derives from memory (its pinned pools removed,
/// its workload and cost profile replaced by stand-ins the pool does not depend on), for
/// [`apply_sets`]' comparison; `None` where that setup does not resolve.
fn derived_pool(json: &Value) -> Option<u64> {
    let mut v = json.clone();
    let o = v.as_object_mut()?;
    if let Some(e) = o.get_mut("engine").and_then(Value::as_object_mut) {
        for k in PINNED_POOL {
            e.remove(k);
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
    // The built-in cards, parsed once (`tune` compares two setups per configuration).
    static BUILTIN: std::sync::OnceLock<Option<super::Resources>> = std::sync::OnceLock::new();
    let res = BUILTIN.get_or_init(|| crate::builtin::resources().ok()).as_ref()?;
    let scenario = super::scenario_from_value(v).ok()?;
    let spec = super::resolve(&scenario, res).ok()?;
    Some(spec.engine.kv_capacity_tokens())
}

#[cfg(test)]
mod set_value_tests {
    use super::*;

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

    /// An engine flag the derived pool depends on drops a pinned pool where its new value
    /// changes that pool (the report-only audit of 2026-12-07: `max_num_batched_tokens=16384`
    /// kept the default scenario's pinned pool (194,880 tokens) where the model derives 164,304), and keeps
    /// it where it does not (`max_model_len` with chunked prefill on; SGLang's prefill chunk
    /// under a given `mem_fraction_static`).
    #[test]
    fn an_engine_flag_drops_the_pin_only_where_it_resizes_the_derived_pool() {
        let scenario = |i: usize| -> Value { serde_json::from_str(crate::builtin::SCENARIOS[i].1).unwrap() };
        let run = |i: usize, set: &str| {
            let mut v = scenario(i);
            let dropped = apply_sets(&mut v, &[set.to_string()]).unwrap();
            (dropped, v)
        };
        // vLLM 0.28 on the RTX 5090 (the default scenario, pinned at 194,880 tokens).
        let (dropped, v) = run(0, "engine.max_num_batched_tokens=16384");
        assert_eq!(dropped, vec![("kv_cache_tokens".to_string(), "engine.max_num_batched_tokens".to_string())]);
        assert!(v["engine"].get("kv_cache_tokens").is_none());
        let (dropped, _) = run(0, "engine.max_num_seqs=512");
        assert_eq!(dropped.len(), 1);
        let (dropped, v) = run(0, "engine.max_model_len=8192");
        assert_eq!(dropped, vec![], "max_model_len leaves vLLM's derived pool as it was");
        assert_eq!(v["engine"]["kv_cache_tokens"], scenario(0)["engine"]["kv_cache_tokens"]);
        // SGLang with its fraction given: the prefill chunk sizes no reserve.
        let (dropped, v) = run(1, "engine.chunked_prefill_size=4096");
        assert_eq!(dropped, vec![]);
        assert_eq!(v["engine"]["max_total_num_tokens"], 210714);
        // The same flag under SGLang's default fraction resizes the pool.
        let mut v = scenario(1);
        v["engine"].as_object_mut().unwrap().remove("mem_fraction_static");
        let dropped = apply_sets(&mut v, &["engine.chunked_prefill_size=16384".to_string()]).unwrap();
        assert_eq!(dropped.len(), 1, "{dropped:?}");
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
        assert_eq!(derived_pool(&v), None);
        let dropped = apply_sets(&mut v, &["engine.max_num_seqs=512".to_string()]).unwrap();
        assert_eq!(dropped, vec![]);
        assert_eq!(v["engine"]["kv_cache_tokens"], 400000);
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
