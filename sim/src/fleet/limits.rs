//! Each replica group's memory and KV limits, and the fleet's total: what `explain` and
//! the reports say about the KV pool, for every group rather than the first replica only.
//!
//! A fleet's replica groups may differ in engine, release, GPU, tensor parallelism and
//! pool size (`config::fleet`); every replica of a group is identical. For each group:
//! the pool of one replica, the tokens one request holds there (the workload's mean
//! request in whole blocks or pages, as [`crate::sweep::kv_limit`] counts it), and how
//! many requests one replica, and the group, hold at once.
//!
//! What a request holds depends on the replica's role: a mixed or decode replica holds the
//! prompt and the output until the request ends; a prefill replica runs the request with
//! `max_tokens = 1` and holds the prompt and that token until it hands the KV over. The
//! fleet's KV-limited concurrency is the sum over the groups that hold requests to their
//! end (mixed and decode); the prefill groups' sum is given apart. The sum is of whole
//! replicas' limits (each pool holds a whole number of requests), not the pooled tokens
//! divided by the footprint.

use serde::Serialize;

use crate::config::{MemoryAccount, ReplicaRole, SimSpec};
use crate::explain::thousands;
use crate::workload::Workload;

/// One replica group's limits.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplicaLimit {
    /// The group's index in the fleet section (0 for a single engine and for data parallelism).
    pub group: usize,
    /// Its replicas' names, in replica order (`"engine"` for a single engine).
    pub replicas: Vec<String>,
    pub role: ReplicaRole,
    /// `"vllm"` or `"sglang"`.
    pub engine: crate::config::EngineKind,
    pub engine_version: String,
    /// The GPU card's id.
    pub hardware: String,
    pub tensor_parallel_size: u32,
    /// GPUs of one replica.
    pub num_gpus: u32,
    /// KV block (vLLM) or page (SGLang) size, tokens.
    pub kv_block_size: u32,
    /// KV bytes one token occupies on one GPU of a replica.
    pub kv_bytes_per_token_per_gpu: u64,
    /// One replica's KV pool, tokens.
    pub kv_cache_tokens: u64,
    /// Mean tokens a request holds on this replica: prompt + output less the last token, which
    /// is sampled and never stored (prefill: the prompt).
    pub mean_request_tokens: f64,
    /// That, rounded up to whole blocks (pages).
    pub request_footprint_tokens: u64,
    /// Requests one replica holds at once: pool ÷ footprint, rounded down (with a prefix cache,
    /// after the shared prefixes they use, held once).
    pub kv_limited_concurrency: u64,
    /// With a prefix cache and prompts sharing a prefix: the tokens of the shared prefixes the
    /// requests one replica holds use, held once ([`crate::sweep::KvLimit`]); 0 otherwise. The
    /// mean request and footprint are then less the shared prefix. (Not in the JSON: the
    /// sentences say it.)
    #[serde(skip)]
    pub shared_prefix_tokens: u64,
    /// The workload's distinct shared prefixes (0 without a prefix cache or sharing).
    #[serde(skip)]
    pub shared_prefixes: u64,
    /// The group's: one replica's × the number of replicas.
    pub group_kv_limited_concurrency: u64,
    /// An SGLang decode server's `num_reserved_decode_tokens`, in the footprint: its
    /// pre-allocation queue keeps that much free for each request it holds (docs/fleets.md); 0
    /// elsewhere. (Not in the JSON: the footprint holds it and the sentences say it.)
    #[serde(skip)]
    pub reserved_decode_tokens: u64,
    /// The per-GPU memory account of one of its replicas, when the pool was derived from memory.
    pub memory: Option<MemoryAccount>,
}

/// Every group's limits and the fleet's.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FleetLimits {
    /// In group order.
    pub groups: Vec<ReplicaLimit>,
    pub num_replicas: usize,
    pub num_gpus: u32,
    /// Σ of every replica's pool.
    pub kv_cache_tokens: u64,
    /// Requests the fleet holds at once: Σ over the mixed and decode groups.
    pub kv_limited_concurrency: u64,
    /// Disaggregated fleets: prompts the prefill groups hold at once; `None` without them.
    pub prefill_kv_limited_concurrency: Option<u64>,
}

/// The limits of every replica group of `spec` (a single engine is one group of one) for the
/// mean request of `workload`.
pub fn replica_limits(spec: &SimSpec, workload: &Workload) -> FleetLimits {
    let (mean_in, _) = workload.mean_lengths();
    let mut groups: Vec<ReplicaLimit> = Vec::new();
    let mut add = |group: usize,
                   name: &str,
                   role,
                   engine: &crate::config::EngineSpec,
                   hardware: &str,
                   dep: &crate::config::Deployment,
                   kv_bytes: u64,
                   memory: &Option<MemoryAccount>| {
        if let Some(g) = groups.last_mut().filter(|g| g.group == group) {
            g.replicas.push(name.to_string());
            g.group_kv_limited_concurrency += g.kv_limited_concurrency;
            return;
        }
        let capacity = engine.kv_capacity_tokens();
        // A replica that holds requests to their end holds a shared prefix once, as one engine
        // does (`sweep::kv_limit`); a prefill replica holds each prompt until it is sent on.
        let l = if role == ReplicaRole::Prefill {
            // Its prompt: the one token it samples is sent on, never stored. With a prefix cache,
            // a shared prefix is held once for the prompts that share it, as on a replica that
            // holds requests to their end (the same count, with an output of that one token).
            if engine.prefix_caching() {
                let mut prompts = workload.clone();
                for r in &mut prompts.requests {
                    r.output_len = 1;
                    r.max_tokens = 1;
                }
                crate::sweep::kv_limit(capacity, engine.kv_granularity(), true, &prompts)
            } else {
                crate::sweep::kv_limit_of_mean(capacity, engine.kv_granularity(), mean_in.max(1.0))
            }
        } else {
            crate::sweep::kv_limit(capacity, engine.kv_granularity(), engine.prefix_caching(), workload)
        };
        // An SGLang decode server pre-allocates a request only while the reserve stays free for
        // every request it holds (`DecodePreallocQueue`): a request takes its footprint and that.
        let reserved = crate::config::sglang_decode_reserve(role, engine).map_or(0, u64::from);
        let footprint = l.footprint_tokens + reserved;
        let per = if reserved > 0 {
            capacity.saturating_sub(l.shared_prefix_tokens) / footprint.max(1)
        } else {
            l.concurrency
        };
        groups.push(ReplicaLimit {
            group,
            replicas: vec![name.to_string()],
            role,
            engine: engine.engine_kind(),
            engine_version: engine.version().to_string(),
            hardware: hardware.to_string(),
            tensor_parallel_size: dep.tensor_parallel_size,
            num_gpus: dep.num_gpus,
            kv_block_size: engine.kv_granularity(),
            kv_bytes_per_token_per_gpu: kv_bytes,
            kv_cache_tokens: capacity,
            mean_request_tokens: l.mean_request_tokens,
            request_footprint_tokens: footprint,
            kv_limited_concurrency: per,
            group_kv_limited_concurrency: per,
            shared_prefix_tokens: l.shared_prefix_tokens,
            shared_prefixes: l.shared_prefixes,
            reserved_decode_tokens: reserved,
            memory: memory.clone(),
        });
    };
    match &spec.fleet {
        None => add(
            0,
            "engine",
            ReplicaRole::Mixed,
            &spec.engine,
            &spec.gpu.id,
            &spec.deployment,
            spec.kv_sizing.kv_bytes_per_token,
            &spec.kv_sizing.memory,
        ),
        Some(f) => {
            for r in &f.replicas {
                add(
                    r.group,
                    &r.name,
                    r.role,
                    &r.engine,
                    &r.gpu,
                    &r.deployment,
                    r.kv_bytes_per_token_per_gpu,
                    &r.kv_sizing.memory,
                );
            }
        }
    }
    let holding = |g: &&ReplicaLimit| g.role != ReplicaRole::Prefill;
    let prefill: Vec<&ReplicaLimit> = groups.iter().filter(|g| g.role == ReplicaRole::Prefill).collect();
    FleetLimits {
        num_replicas: groups.iter().map(|g| g.replicas.len()).sum(),
        num_gpus: groups.iter().map(|g| g.num_gpus * g.replicas.len() as u32).sum(),
        kv_cache_tokens: groups.iter().map(|g| g.kv_cache_tokens * g.replicas.len() as u64).sum(),
        kv_limited_concurrency: groups.iter().filter(holding).map(|g| g.group_kv_limited_concurrency).sum(),
        prefill_kv_limited_concurrency: (!prefill.is_empty())
            .then(|| prefill.iter().map(|g| g.group_kv_limited_concurrency).sum()),
        groups,
    }
}

impl ReplicaLimit {
    /// `"mixed0"`, or `"mixed0–mixed63 (64 replicas)"`.
    pub fn label(&self) -> String {
        match self.replicas.as_slice() {
            [one] => one.clone(),
            [first, .., last] => format!("{first}–{last} ({} replicas)", self.replicas.len()),
            [] => String::new(),
        }
    }
}

impl FleetLimits {
    /// The limits in words: a sentence per group, then the fleet's (none for a single engine).
    pub fn sentences(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.num_replicas <= 1 {
            return out;
        }
        for g in &self.groups {
            let unit = g.engine.kv_unit();
            // The words say what the figure counts: less the shared prefix where one is held once.
            let shared = g.shared_prefix_tokens > 0;
            let holds = match (g.role == ReplicaRole::Prefill, shared) {
                (true, false) => "mean prompt",
                (true, true) => "mean prompt less its shared prefix",
                (false, false) => "mean prompt + output less the last token",
                (false, true) => "mean prompt + output less its shared prefix and the last token",
            };
            let prefixes = if shared {
                format!(
                    ", with about {} tokens of the {} shared prefix{} they use held once",
                    thousands(g.shared_prefix_tokens),
                    g.shared_prefixes,
                    if g.shared_prefixes == 1 { "" } else { "es" }
                )
            } else {
                String::new()
            };
            let n = g.replicas.len();
            let (names, each) = match g.replicas.as_slice() {
                [first, .., last] => (format!("{first}–{last}"), "each replica's"),
                _ => (g.label(), "its"),
            };
            let reserve = if g.reserved_decode_tokens > 0 {
                format!(
                    ", and the {} tokens SGLang's decode server keeps free for each request's decode (num_reserved_decode_tokens)",
                    thousands(g.reserved_decode_tokens)
                )
            } else {
                String::new()
            };
            out.push(format!(
                "Group {}, {names} ({n} {} replica{}, {} {}, {} × {} at TP {}): {each} KV pool holds {} tokens; a request holds {} ({holds}, {:.0} tokens, in whole {unit}s of {}{reserve}), so a replica holds {} requests at once{prefixes}{}.",
                g.group,
                g.role.as_str(),
                if n == 1 { "" } else { "s" },
                g.engine,
                g.engine_version,
                g.num_gpus,
                g.hardware,
                g.tensor_parallel_size,
                thousands(g.kv_cache_tokens),
                thousands(g.request_footprint_tokens),
                g.mean_request_tokens,
                g.kv_block_size,
                thousands(g.kv_limited_concurrency),
                if n > 1 { format!(", the group {}", thousands(g.group_kv_limited_concurrency)) } else { String::new() },
            ));
        }
        let mut total = format!(
            "The fleet ({} replicas, {} GPUs) holds {} KV tokens in all and {} requests at once",
            self.num_replicas,
            self.num_gpus,
            thousands(self.kv_cache_tokens),
            thousands(self.kv_limited_concurrency)
        );
        match self.prefill_kv_limited_concurrency {
            Some(p) => {
                let shared = self.groups.iter().any(|g| g.role == ReplicaRole::Prefill && g.shared_prefix_tokens > 0);
                total.push_str(&format!(
                    " on its decode replicas; its prefill replicas hold {} prompts at once{}.",
                    thousands(p),
                    if shared { " (their shared prefixes held once)" } else { "" }
                ))
            }
            None => total.push_str(": the KV-limited concurrency, the sum of every replica's."),
        }
        out.push(total);
        if let Some(even) = self.even_split_concurrency() {
            out.push(format!(
                "That sum assumes a router that fills each replica to its own limit. One that splits the requests evenly (round_robin, least_outstanding, power_of_two, SGLang's or vLLM's data-parallel balancing) fills the replicas with the smallest limit first: they reach it, and requests wait for KV or are preempted there, from {} concurrent requests ({} replicas × the smallest limit).",
                thousands(even),
                self.holding_replicas()
            ));
        }
        out
    }

    /// The replicas that hold requests to their end (mixed and decode).
    fn holding_replicas(&self) -> usize {
        self.groups.iter().filter(|g| g.role != ReplicaRole::Prefill).map(|g| g.replicas.len()).sum()
    }

    /// Where the replicas' limits differ: the concurrency at which an even split of the requests
    /// fills the replicas with the smallest limit (replicas × that limit); `None` where every
    /// replica that holds requests has the same limit (the sum is then that figure).
    pub fn even_split_concurrency(&self) -> Option<u64> {
        let holding: Vec<&ReplicaLimit> = self.groups.iter().filter(|g| g.role != ReplicaRole::Prefill).collect();
        let min = holding.iter().map(|g| g.kv_limited_concurrency).min()?;
        let max = holding.iter().map(|g| g.kv_limited_concurrency).max()?;
        (min < max).then(|| min * self.holding_replicas() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 8 shared 1,024-token prefixes, each followed by a distinct 128-token question, 128 out, on
    /// H100s under vLLM 0.33 (prefix caching on), as the fleet `fleet`.
    fn shared_prefix_fleet(fleet: serde_json::Value) -> (SimSpec, Workload) {
        let v = serde_json::json!({
            "version": 1, "engine": {"kind": "vllm", "version": "0.33.0", "max_model_len": 8192},
            "model": "llama-3.1-8b-instruct", "hardware": "h100-80gb", "fleet": fleet,
            "workload": {"dataset_name": "prefix_repetition", "prefix_repetition_prefix_len": 1024,
                         "prefix_repetition_suffix_len": 128, "prefix_repetition_num_prefixes": 8,
                         "prefix_repetition_output_len": 128, "num_prompts": 400, "ignore_eos": true, "seed": 0}
        });
        let s = crate::config::from_value(v, "").unwrap();
        let spec = crate::config::resolve(&s, &crate::builtin::resources().unwrap()).unwrap();
        let w = crate::workload::generate(&spec.workload);
        (spec, w)
    }

    /// With the prefix cache on, a request holds its prompt and output less its shared prefix (held
    /// once), and the words say so (they said "mean prompt + output less the last token, 255
    /// tokens", a sum of 1,279); a prefill replica holds its prompts' shared prefixes once too (it
    /// counted every prompt whole: 386 prompts where the pool holds 3,416). Llama's BOS before
    /// each prompt (shared; 1 + 1,024 + 128 tokens) leaves 1,024 tokens in shared whole blocks
    /// and one more token to each request: 256 tokens decoding, 129 (in 144) prefilling.
    #[test]
    fn shared_prefixes_are_held_once_and_the_sentences_say_so() {
        let (spec, w) = shared_prefix_fleet(serde_json::json!({"count": 2}));
        let l = replica_limits(&spec, &w);
        let g = &l.groups[0];
        assert_eq!(g.request_footprint_tokens, 256);
        assert!(g.shared_prefix_tokens > 0 && g.shared_prefixes == 8);
        let s = &l.sentences()[0];
        assert!(
            s.contains(
                "a request holds 256 (mean prompt + output less its shared prefix and the last token, 256 tokens"
            ),
            "{s}"
        );
        assert!(s.contains("shared prefixes they use held once"), "{s}");

        let (spec, w) = shared_prefix_fleet(serde_json::json!({"prefill_count": 1, "decode_count": 1}));
        let l = replica_limits(&spec, &w);
        let p = &l.groups[0];
        assert_eq!(p.role, ReplicaRole::Prefill);
        assert_eq!(p.request_footprint_tokens, 144, "the 128-token question and a token, the prefix held once");
        // The pool less the 8 prefixes, over 144 tokens a prompt (not 1,153 each).
        assert!(p.kv_limited_concurrency > 3000, "{}", p.kv_limited_concurrency);
        let s = l.sentences();
        assert!(s[0].contains("a request holds 144 (mean prompt less its shared prefix, 129 tokens"), "{}", s[0]);
        assert!(
            s[2].contains(&format!(
                "its prefill replicas hold {} prompts at once (their shared prefixes held once)",
                thousands(p.kv_limited_concurrency)
            )),
            "{}",
            s[2]
        );
        // Without the prefix cache, each prompt whole (1,153 tokens, BOS included, in 73 blocks).
        let (mut spec, w) = shared_prefix_fleet(serde_json::json!({"prefill_count": 1, "decode_count": 1}));
        for r in &mut spec.fleet.as_mut().unwrap().replicas {
            if let crate::config::EngineSpec::Vllm(c) = &mut r.engine {
                c.enable_prefix_caching = false;
            }
        }
        let l = replica_limits(&spec, &w);
        assert_eq!(l.groups[0].request_footprint_tokens, 1168);
        assert!(l.sentences()[0].contains("(mean prompt, 1153 tokens"), "{}", l.sentences()[0]);
    }
}
