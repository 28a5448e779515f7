//! The `fleet` section: several engine replicas behind a router, optionally
//! split into prefill and decode pools, and data parallelism inside one
//! engine (`data_parallel_size`, `dp_size`) as replicas sharing a front end.
//! What is modelled and the shortcuts: `docs/fleets.md`.
//!
//! Each replica group is resolved as a scenario of its own (the top-level
//! scenario with the group's `engine` fields laid over the top-level
//! `engine`, and its `hardware`), so every check, default and KV sizing of a
//! single engine applies to each replica, and every request must fit every
//! replica.

use super::overrides;
use super::*;
use crate::fleet::RouterSpec;

/// What a replica does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicaRole {
    /// Prefill and decode (an ordinary engine).
    #[default]
    Mixed,
    /// Prefill only: runs the prompt, hands its KV cache to a decode replica.
    Prefill,
    /// Decode only: receives the prompt's KV cache, generates the output.
    Decode,
}

impl ReplicaRole {
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicaRole::Mixed => "mixed",
            ReplicaRole::Prefill => "prefill",
            ReplicaRole::Decode => "decode",
        }
    }
}

/// A group of identical replicas.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaGroup {
    /// Replicas in the group (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<ReplicaRole>,
    /// Engine fields laid over the top-level `engine` (a different `kind` replaces it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<Value>,
    /// The group's GPU (a card id, an inline card, or `{gpu, count}`); default: the top-level `hardware`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Default KV-transfer bandwidth per GPU: one 400 Gb/s RDMA NIC per GPU
/// (ConnectX-7 NDR, as in DGX H100/H200 nodes), i.e. 50 GB/s nominal.
pub const DEFAULT_KV_TRANSFER_BANDWIDTH: f64 = 50e9;

/// The `fleet` section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSection {
    /// Replica groups. Or, shorthand, `count` (mixed replicas of the top-level engine) or
    /// `prefill_count` and `decode_count`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<ReplicaGroup>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_count: Option<u32>,
    /// The router (`docs/routers.md`); default round-robin. With prefill and decode pools,
    /// it picks the prefill replica.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "router_naming_the_field")]
    pub router: Option<RouterSpec>,
    /// The decode pool's router (default: the same policy as `router`, its own instance).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "router_naming_the_field")]
    pub decode_router: Option<RouterSpec>,
    /// Bytes per second per GPU of the prefill → decode KV link (default 50e9, 400 Gb/s RDMA;
    /// NVLink within a node: 450e9 on H100/H200, the GPU card's `interconnect_bandwidth_bytes_per_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_bandwidth_bytes_per_s: Option<f64>,
    /// Fixed time per KV transfer (handshake, notification), µs (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_latency_us: Option<f64>,
}

/// A router section, its error naming the field at fault: serde reads an internally tagged enum
/// through a buffer that loses the path, so `{"policy": "cache_aware", "balance_abs_threshold":
/// -1}` said only "invalid value: integer `-1`, expected u32". The field is found by trying the
/// policy with each field alone; the message then starts with its name.
fn router_naming_the_field<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<RouterSpec>, D::Error> {
    use serde::de::Error as _;
    let Some(v) = Option::<Value>::deserialize(d)? else { return Ok(None) };
    match serde_json::from_value::<RouterSpec>(v.clone()) {
        Ok(r) => Ok(Some(r)),
        Err(e) => {
            // serde's words for a policy that takes no parameter ("there are no fields") say
            // nothing a user can act on: say that the policy takes none.
            let e = e.to_string();
            let e = match (e.split_once(", there are no fields"), v.get("policy").and_then(Value::as_str)) {
                (Some((head, _)), Some(policy)) => match v.get("routing_logic").and_then(Value::as_str) {
                    Some(logic) => {
                        format!("{head}: the {policy} policy's {logic} routing logic takes no further parameters")
                    }
                    None => format!("{head}: the {policy} policy takes no parameters"),
                },
                _ => e,
            };
            // The two data-parallel balancers are RouterSpec variants a scenario cannot name
            // (`data_parallel_size` / `dp_size` set them): not offered as choices.
            let e = e
                .replace(", `vllm_data_parallel`, `sglang_data_parallel`", "")
                .replace("`vllm_data_parallel`, `sglang_data_parallel`, ", "");
            Err(D::Error::custom(match router_field_at_fault(&v) {
                Some(field) => format!("{field}: {e}"),
                None => e,
            }))
        }
    }
}

/// The field of router section `v` that its policy refuses on its own (in key order), if the
/// policy alone is accepted.
fn router_field_at_fault(v: &Value) -> Option<String> {
    // The tags: the policy, and production-stack's `routing_logic` (a tagged section in it).
    const TAGS: [&str; 2] = ["policy", "routing_logic"];
    let m = v.as_object()?;
    let alone = |k: Option<(&String, &Value)>| {
        let mut o: serde_json::Map<String, Value> =
            m.iter().filter(|(k, _)| TAGS.contains(&k.as_str())).map(|(k, x)| (k.clone(), x.clone())).collect();
        if let Some((k, x)) = k {
            o.insert(k.clone(), x.clone());
        }
        serde_json::from_value::<RouterSpec>(Value::Object(o)).is_ok()
    };
    if !alone(None) {
        // The tags themselves are refused (a missing or unknown policy): serde's message says so.
        return None;
    }
    m.iter().filter(|(k, _)| !TAGS.contains(&k.as_str())).find(|&kv| !alone(Some(kv))).map(|(k, _)| k.clone())
}

/// How the replicas came about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FleetKind {
    /// A `fleet` section: replicas behind a router, each with its own front end.
    Fleet,
    /// `data_parallel_size` / `dp_size`: engines behind one front end.
    DataParallel,
}

/// One replica, resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaSpec {
    pub group: usize,
    pub name: String,
    pub role: ReplicaRole,
    pub engine: EngineSpec,
    pub cost: CostModel,
    pub gpu: String,
    pub deployment: Deployment,
    /// KV bytes one prompt token occupies on one GPU of this replica.
    pub kv_bytes_per_token_per_gpu: u64,
    /// How its KV pool was sized (with the per-GPU memory account when derived).
    pub kv_sizing: KvSizing,
    /// Index of its front end (API server): its own, or the one its DP group shares.
    pub front: usize,
    /// Its GPU card is the Windows/WSL2 view (`hardware.host: "wsl2"`, [`super::wddm_host`]).
    pub wddm_host: bool,
    /// Its GPU card's link between GPUs (`interconnect`: "nvlink", "pcie"), from the card the
    /// replica resolved (an inline card's own, not a built-in card's of the same id).
    pub interconnect: Option<String>,
}

/// A fleet, resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetSpec {
    pub kind: FleetKind,
    pub replicas: Vec<ReplicaSpec>,
    pub router: RouterSpec,
    pub decode_router: RouterSpec,
    pub kv_transfer_bandwidth_bytes_per_s: f64,
    pub kv_transfer_latency_ns: u64,
    pub num_fronts: usize,
    /// What became of a pool the top level pins in each replica group that changes a field the
    /// pool depends on (`overrides::carry_pins`), for the caller to say, as `--set` does.
    pub pin_changes: Vec<crate::config::PinChange>,
}

/// A replica that is an SGLang decode server (`--disaggregation-mode decode`): its
/// `num_reserved_decode_tokens`, which its pre-allocation queue keeps free for each request it
/// holds (docs/fleets.md); `None` for every other replica.
pub fn sglang_decode_reserve(role: ReplicaRole, engine: &EngineSpec) -> Option<u32> {
    match engine {
        EngineSpec::Sglang(c) if role == ReplicaRole::Decode => Some(c.num_reserved_decode_tokens),
        _ => None,
    }
}

impl FleetSpec {
    /// The first SGLang decode server's `num_reserved_decode_tokens` ([`sglang_decode_reserve`]);
    /// `None` without one.
    pub fn sglang_decode_reserve(&self) -> Option<u32> {
        self.replicas.iter().find_map(|r| sglang_decode_reserve(r.role, &r.engine))
    }

    /// Whether prefill and decode are disaggregated.
    pub fn disaggregated(&self) -> bool {
        self.replicas.iter().any(|r| r.role != ReplicaRole::Mixed)
    }

    /// GPUs of the whole fleet.
    pub fn num_gpus(&self) -> u32 {
        self.replicas.iter().map(|r| r.deployment.num_gpus).sum()
    }

    /// The fleet's GPUs by card, each card once in order of first appearance: `(card id, GPUs)`.
    pub fn gpus_by_card(&self) -> Vec<(String, u32)> {
        let mut cards: Vec<(String, u32)> = Vec::new();
        for r in &self.replicas {
            match cards.iter_mut().find(|(g, _)| *g == r.gpu) {
                Some((_, n)) => *n += r.deployment.num_gpus,
                None => cards.push((r.gpu.clone(), r.deployment.num_gpus)),
            }
        }
        cards
    }
}

/// Whether the scenario is a fleet (a `fleet` section, or data parallelism > 1).
pub(super) fn is_fleet(s: &Scenario) -> bool {
    s.fleet.is_some() || dp_of(&s.engine) > 1
}

fn dp_of(e: &EngineSection) -> u32 {
    e.data_parallel_size.or(e.dp_size).unwrap_or(1)
}

/// The top-level scenario as a single engine's: no fleet, no data parallelism.
fn single(s: &Scenario) -> Scenario {
    let mut b = s.clone();
    b.fleet = None;
    b.engine.data_parallel_size = None;
    b.engine.dp_size = None;
    b.engine.load_balance_method = None;
    b
}

pub(super) fn check_dp_flags(e: &EngineSection, kind: EngineKind, path: &str) -> Result<()> {
    match kind {
        EngineKind::Vllm => {
            if e.dp_size.is_some() {
                return Err(ConfigError::new(
                    format!("{path}.dp_size"),
                    "is an SGLang flag but engine.kind is \"vllm\"; the vllm counterpart is data_parallel_size",
                ));
            }
            if e.load_balance_method.is_some() {
                return Err(ConfigError::new(
                    format!("{path}.load_balance_method"),
                    "is an SGLang flag (the DataParallelController's); vLLM's DP balancing has no such flag",
                ));
            }
        }
        EngineKind::Sglang => {
            if e.data_parallel_size.is_some() {
                return Err(ConfigError::new(
                    format!("{path}.data_parallel_size"),
                    "is a vLLM flag but engine.kind is \"sglang\"; the sglang counterpart is dp_size",
                ));
            }
            // SGLang's argparse takes only its choices, whatever dp_size is.
            load_balance_method(e, path)?;
        }
    }
    for (field, v) in [("data_parallel_size", e.data_parallel_size), ("dp_size", e.dp_size)] {
        if v == Some(0) {
            return Err(ConfigError::new(format!("{path}.{field}"), "must be at least 1 (got 0)"));
        }
        if let Some(n) = v.filter(|&n| n > MAX_REPLICAS) {
            return Err(ConfigError::new(
                format!("{path}.{field}"),
                format!("must be from 1 to {MAX_REPLICAS}, got {n}"),
            ));
        }
    }
    Ok(())
}

/// The most replicas a fleet (or engines a data-parallel deployment) may have: each replica is
/// a whole simulated engine (tens of KB before its first request), and 4,096 is already past
/// any deployment a what-if is about.
pub const MAX_REPLICAS: u32 = 4096;

/// SGLang's default `--load-balance-method`.
const SGLANG_DEFAULT_LOAD_BALANCE_METHOD: &str = "round_robin";

/// SGLang's `--load-balance-method` of `e` (round-robin when unset); `path` names the section.
fn load_balance_method(e: &EngineSection, path: &str) -> Result<crate::fleet::dp::LoadBalanceMethod> {
    use crate::fleet::dp::LoadBalanceMethod as M;
    match e.load_balance_method.as_deref().unwrap_or(SGLANG_DEFAULT_LOAD_BALANCE_METHOD) {
        "round_robin" => Ok(M::RoundRobin),
        "shortest_queue" => Ok(M::ShortestQueue),
        other => Err(ConfigError::new(
            format!("{path}.load_balance_method"),
            format!("unknown method {other:?}; expected round_robin or shortest_queue"),
        )),
    }
}

fn prefix_err(prefix: &str, e: ConfigError) -> ConfigError {
    if e.path.is_empty() {
        ConfigError::new(prefix, e.message)
    } else {
        ConfigError::new(format!("{prefix}.{}", e.path), e.message)
    }
}

/// A replica group's scenario: the top-level one with the group's engine and hardware, and what
/// became of a pool the top level pins.
///
/// A pool the top level pins (`kv_cache_tokens`, `max_total_num_tokens`: a start-up log's figure)
/// is that setup's: a group with another engine flag the pool depends on or another memory
/// fraction moves it by what the pool derived from memory moves; a group on another GPU, TP
/// size, KV or weight format or release does not inherit it (its pool is derived from memory);
/// vLLM's `num_gpu_blocks_override` holds, as vLLM holds it; all as `--set` on one engine does
/// (`overrides::carry_pins`), unless the group pins its own.
fn group_scenario(base: &Scenario, g: &ReplicaGroup, path: &str) -> Result<(Scenario, Vec<crate::config::PinChange>)> {
    let mut b = single(base);
    let mut pin_changes = Vec::new();
    let other_hardware = g.hardware.as_ref().is_some_and(|h| *h != base.hardware);
    if g.engine.is_some() || other_hardware {
        let over = match &g.engine {
            Some(Value::Object(over)) => over.clone(),
            Some(_) => return Err(ConfigError::new(format!("{path}.engine"), "expected an object of engine fields")),
            None => serde_json::Map::new(),
        };
        let Value::Object(mut merged) = serde_json::to_value(&b.engine).expect("serializable") else { unreachable!() };
        let other_kind = over.get("kind").is_some_and(|k| Some(k) != merged.get("kind"));
        // The group's setup as scenario JSON beside the top level's: the group's engine fields
        // laid over the top level's (or replacing them, for another kind), its hardware.
        let top = serde_json::to_value(&b).expect("serializable");
        let mut group = top.clone();
        if other_kind {
            group["engine"] = Value::Object(over.clone());
        } else if let Some(e) = group.get_mut("engine").and_then(Value::as_object_mut) {
            for (k, v) in &over {
                e.insert(k.clone(), v.clone());
            }
        }
        if let Some(h) = &g.hardware {
            group["hardware"] = h.clone();
        }
        // The fields the group changes, as `--set` reads a change (`overrides::value_at`: a
        // default spelled out, or the same card as `{"gpu": id}`, is no change).
        // (The hardware first: a refusal names the card before the TP size that goes with it.)
        let changed: Vec<String> = g
            .hardware
            .is_some()
            .then(|| "hardware".to_string())
            .into_iter()
            .chain(over.keys().map(|k| format!("engine.{k}")))
            .filter(|p| overrides::value_at(&top, p) != overrides::value_at(&group, p))
            .collect();
        // Fixed step coefficients are the top level's deployment's costs: a group on another
        // GPU, TP size, weight format or engine would be timed as that one (the robustness
        // audit of 2026-12-07: an RTX 4090 replica beside an A100 ran the A100's steps), as
        // `--set` refuses them (`overrides::refuse_fixed_coefficients_elsewhere`; a group cannot
        // give its own cost).
        overrides::refuse_fixed_coefficients_elsewhere(&changed, &top, &group).map_err(|(field, names)| {
            ConfigError::new(
                format!("{path}.{field}"),
                format!(
                    "the scenario's step costs are fixed coefficients (cost.coefficients: {}), one deployment's, \
                     which would time this group's steps as the top level's; drop them to time each group from its own \
                     GPU's kernels",
                    names.join(", ")
                ),
            )
        })?;
        if other_kind {
            merged = over.clone();
        } else {
            let given = |k: &str| over.get(k).is_some_and(|v| !v.is_null());
            // One pin the group gives replaces the top level's others, as on the command line.
            if PINNED_POOL.iter().any(|k| given(k)) {
                for k in PINNED_POOL {
                    merged.remove(k);
                }
            } else {
                let resized: Vec<&String> = changed.iter().filter(|p| crate::config::resizes_pool(p)).collect();
                let cause = format!("{path}'s {}", resized.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", "));
                pin_changes = overrides::carry_pins(&resized, &cause, &top, &mut group, given);
                for k in PINNED_POOL {
                    match group["engine"].get(k) {
                        Some(v) if !v.is_null() => merged.insert(k.to_string(), v.clone()),
                        _ => merged.remove(k),
                    };
                }
            }
            for (k, v) in over {
                merged.insert(k.clone(), v.clone());
            }
        }
        b.engine = from_value(Value::Object(merged), &format!("{path}.engine"))?;
        if dp_of(&b.engine) > 1 {
            return Err(ConfigError::new(
                format!("{path}.engine"),
                "data parallelism inside a fleet's replica is not modelled: give the group a count instead",
            ));
        }
        b.engine.data_parallel_size = None;
        b.engine.dp_size = None;
        b.engine.load_balance_method = None;
    }
    if let Some(h) = &g.hardware {
        b.hardware = h.clone();
    }
    Ok((b, pin_changes))
}

fn replica_of(spec: &SimSpec, group: usize, name: String, role: ReplicaRole, front: usize) -> ReplicaSpec {
    ReplicaSpec {
        group,
        name,
        role,
        engine: spec.engine.clone(),
        cost: spec.cost.clone(),
        gpu: spec.gpu.id.clone(),
        deployment: spec.deployment.clone(),
        kv_bytes_per_token_per_gpu: spec.kv_sizing.kv_bytes_per_token,
        kv_sizing: spec.kv_sizing.clone(),
        front,
        wddm_host: super::wddm_host(&spec.gpu),
        interconnect: spec.gpu.interconnect.clone(),
    }
}

/// Resolves a fleet scenario: the first replica's spec (the report's engine, model and GPU),
/// with the fleet attached.
pub(super) fn resolve_fleet(s: &Scenario, res: &Resources) -> Result<SimSpec> {
    let kind =
        s.engine.kind.ok_or_else(|| ConfigError::new("engine.kind", "missing; expected \"vllm\" or \"sglang\""))?;
    check_dp_flags(&s.engine, kind, "engine")?;
    // A fleet's client loop has no staggered users and no measured window (`crate::fleet::run`).
    let given = serde_json::to_value(&s.workload).unwrap_or_default();
    if let Some(f) = given.as_object().and_then(simulate_only_field) {
        return Err(ConfigError::new(
            format!("workload.{f}"),
            "is not modelled for a fleet or data parallelism (one engine's client loop only): remove it",
        ));
    }
    let dp = dp_of(&s.engine);
    let dp_field = match kind {
        EngineKind::Vllm => "data_parallel_size",
        EngineKind::Sglang => "dp_size",
    };
    if dp > 1 {
        // vLLM's data parallelism with a MoE model is one MoE layer over all DP ranks (its experts
        // sharded by DP × TP, or all-to-all with expert parallelism), not independent replicas.
        let model: ModelCard = resolve_card(&s.model, "model", &res.models, |c: &ModelCard| &c.id, "models/model/")?;
        if model.moe.is_some() {
            return Err(ConfigError::new(
                format!("engine.{dp_field}"),
                format!(
                    "{dp} with MoE model {}: data parallelism of a MoE model is not modelled{}; use a fleet of \
                     independent replicas",
                    model.id,
                    match kind {
                        EngineKind::Vllm =>
                            " (vLLM shards each expert over all DP x TP ranks, \
                                             FusedMoEParallelConfig.make, with all-to-all dispatch only under \
                                             --enable-expert-parallel)",
                        EngineKind::Sglang => "",
                    }
                ),
            ));
        }
    }
    if dp > 1 && s.fleet.is_some() {
        return Err(ConfigError::new(
            format!("engine.{dp_field}"),
            "data parallelism with a fleet section is not modelled: give the fleet's replica groups counts instead",
        ));
    }
    if dp > 1 {
        // Data parallelism: `dp` engines of TP size each, one front end, the engine's own balancer.
        let mut b = single(s);
        if let Value::Object(m) = &mut b.hardware {
            if let Some(c) = m.get("count").and_then(Value::as_u64) {
                // `dp` engines of TP GPUs each.
                let (tp_field, tp) = match kind {
                    EngineKind::Vllm => ("tensor_parallel_size", s.engine.vllm.tensor_parallel_size),
                    EngineKind::Sglang => ("tp_size", s.engine.sglang.tp_size),
                };
                let tp = u64::from(tp.unwrap_or(1).max(1));
                if c != u64::from(dp) * tp {
                    return Err(ConfigError::new(
                        "hardware.count",
                        format!(
                            "{c} GPUs for {dp} data-parallel engines of {tp_field} {tp}: count must be {} \
                             ({dp_field} × {tp_field}), or leave count out",
                            u64::from(dp) * tp
                        ),
                    ));
                }
                m.insert("count".into(), (c / u64::from(dp)).into());
            }
        }
        let base = resolve(&b, res)?;
        let router = match kind {
            EngineKind::Vllm => RouterSpec::VllmDataParallel {},
            EngineKind::Sglang => {
                RouterSpec::SglangDataParallel { load_balance_method: load_balance_method(&s.engine, "engine")? }
            }
        };
        let replicas =
            (0..dp as usize).map(|i| replica_of(&base, 0, format!("dp{i}"), ReplicaRole::Mixed, 0)).collect();
        let fleet = FleetSpec {
            kind: FleetKind::DataParallel,
            replicas,
            router: router.clone(),
            decode_router: router,
            kv_transfer_bandwidth_bytes_per_s: DEFAULT_KV_TRANSFER_BANDWIDTH,
            kv_transfer_latency_ns: 0,
            num_fronts: 1,
            pin_changes: Vec::new(),
        };
        return Ok(SimSpec { fleet: Some(Box::new(fleet)), ..base });
    }
    let f = s.fleet.as_ref().expect("is_fleet");
    let mut groups = f.replicas.clone();
    let shorthand = f.count.is_some() || f.prefill_count.is_some() || f.decode_count.is_some();
    if shorthand && !groups.is_empty() {
        return Err(ConfigError::new(
            "fleet.replicas",
            "give either replica groups (replicas) or counts (count, or prefill_count and decode_count), not both",
        ));
    }
    if let Some(c) = f.count {
        if f.prefill_count.is_some() || f.decode_count.is_some() {
            return Err(ConfigError::new(
                "fleet.count",
                "give count (mixed replicas) or prefill_count and decode_count",
            ));
        }
        groups.push(ReplicaGroup { count: Some(c), ..Default::default() });
    } else if shorthand {
        let (Some(p), Some(d)) = (f.prefill_count, f.decode_count) else {
            // Name the one that is missing, beside the one given.
            let (given, missing) = if f.prefill_count.is_some() {
                ("prefill_count", "decode_count")
            } else {
                ("decode_count", "prefill_count")
            };
            return Err(ConfigError::new(
                format!("fleet.{missing}"),
                format!("missing: {given} is given, and prefill_count and decode_count go together"),
            ));
        };
        for (field, v) in [("fleet.prefill_count", p), ("fleet.decode_count", d)] {
            if v == 0 {
                return Err(ConfigError::new(
                    field,
                    "must be at least 1 (got 0): a disaggregated fleet needs both roles",
                ));
            }
        }
        groups.push(ReplicaGroup { count: Some(p), role: Some(ReplicaRole::Prefill), ..Default::default() });
        groups.push(ReplicaGroup { count: Some(d), role: Some(ReplicaRole::Decode), ..Default::default() });
    }
    if groups.is_empty() {
        return Err(ConfigError::new("fleet.replicas", "no replicas: give at least one group (or fleet.count)"));
    }
    let mut replicas = Vec::new();
    let mut pin_changes = Vec::new();
    let mut first: Option<SimSpec> = None;
    // The first group was resolved with a stand-in workload (a vLLM prefill group whose requests
    // fit only with one output token); the run's workload, from the first group resolved with it.
    let mut first_fitted_alone = false;
    let mut real_workload: Option<WorkloadParams> = None;
    let mut gen_clamps: Vec<(String, Option<u32>)> = Vec::new();
    for (gi, g) in groups.iter().enumerate() {
        let path = if shorthand { "fleet".to_string() } else { format!("fleet.replicas[{gi}]") };
        let count = g.count.unwrap_or(1);
        // The field the user wrote: a shorthand's group is `count`, `prefill_count` or
        // `decode_count`.
        let count_field = match (shorthand, g.role) {
            (true, Some(ReplicaRole::Prefill)) => "fleet.prefill_count".to_string(),
            (true, Some(ReplicaRole::Decode)) => "fleet.decode_count".to_string(),
            _ => format!("{path}.count"),
        };
        if count == 0 || count > MAX_REPLICAS {
            return Err(ConfigError::new(count_field, format!("must be from 1 to {MAX_REPLICAS}, got {count}")));
        }
        if replicas.len() as u64 + u64::from(count) > u64::from(MAX_REPLICAS) {
            return Err(ConfigError::new(
                count_field,
                format!("the fleet's groups hold more than {MAX_REPLICAS} replicas in all"),
            ));
        }
        let (mut sc, group_pins) = group_scenario(s, g, &path)?;
        pin_changes.extend(group_pins);
        // SGLang's decode servers run a chunk cache, not a radix cache, whatever
        // disable_radix_cache says (server_args `_handle_pd_disaggregation`: "KV cache is
        // forced as chunk cache for decode server"; only the experimental
        // --disaggregation-decode-enable-radix-cache, not modelled, keeps it).
        if g.role == Some(ReplicaRole::Decode) && sc.engine.kind == Some(EngineKind::Sglang) {
            sc.engine.sglang.disable_radix_cache = Some(true);
        }
        // An error in what the group sets names the group's field; one in the scenario's own
        // fields (its workload, its top-level engine) keeps the path the user wrote.
        let named = |e: ConfigError| {
            let key = e.path.strip_prefix("engine.").map(|k| k.split('.').next().unwrap_or(k));
            let set_by_group = match (&g.engine, key) {
                (Some(Value::Object(over)), Some(k)) => over.contains_key(k) || over.contains_key("kind"),
                _ => false,
            } || (g.hardware.is_some() && e.path.starts_with("hardware"));
            if set_by_group || e.path.is_empty() {
                prefix_err(&path, e)
            } else if e.path.starts_with("engine") && path != "fleet" {
                ConfigError::new(e.path.clone(), format!("{} (in {path}'s engine)", e.message))
            } else if path != "fleet" && (g.engine.is_some() || g.hardware.is_some()) {
                // A scenario field that fails only with what the group changed (a prompt past the
                // group's max_model_len): say which group it was resolved for.
                ConfigError::new(e.path.clone(), format!("{} (resolving {path})", e.message))
            } else {
                e
            }
        };
        // A vLLM prefill replica is sent each request with max_tokens = 1 (the P/D proxy's
        // prefill request: vLLM's `tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`,
        // `send_request_to_service`), so the prompt and one token must fit it, not the prompt
        // and its output. SGLang's prefill server is sent the client's request as it is
        // (sgl-router's `pd_router.rs`, `execute_dual_dispatch_internal`: the same JSON to both
        // workers), and its `TokenizerManager._validate_one_request` refuses prompt +
        // max_new_tokens past the context length, so there the whole request must fit, as on a
        // decode replica.
        let (spec, fitted_alone) = match resolve(&sc, res) {
            Ok(spec) => (spec, false),
            Err(e) => match (g.role, sc.engine.kind) {
                (Some(ReplicaRole::Prefill), Some(EngineKind::Vllm)) => match vllm_prefill_fit(&sc, res) {
                    Ok(spec) => (spec, true),
                    // Too long even with one output token: that check's words, at the field the
                    // first error named.
                    Err(Some(fit)) if e.path.starts_with("workload") => {
                        return Err(named(ConfigError::new(
                            e.path,
                            format!("{} (a prefill replica is sent each request with max_tokens 1)", fit.message),
                        )))
                    }
                    Err(_) => return Err(named(e)),
                },
                _ => return Err(named(e)),
            },
        };
        if first.is_none() {
            first_fitted_alone = fitted_alone;
        } else if first_fitted_alone && !fitted_alone && real_workload.is_none() {
            real_workload = Some(spec.workload.clone());
        }
        if let Some(f0) = &first {
            if f0.model.id != spec.model.id {
                return Err(ConfigError::new(format!("{path}.engine"), "every replica serves the same model"));
            }
        }
        let role = g.role.unwrap_or_default();
        // Where the outputs are generated (every group but a prefill one), each group's cap on a
        // request's output (vLLM ≥ 0.32: its max_model_len, `WorkloadParams::context_clamp`).
        if role != ReplicaRole::Prefill {
            gen_clamps.push((path.clone(), spec.workload.context_clamp));
        }
        // A replica's name labels its rows of the report, its text table and its JSON: one
        // line, and not empty.
        if let Some(n) = &g.name {
            if n.trim().is_empty() || n.chars().any(char::is_control) {
                return Err(ConfigError::new(
                    format!("{path}.name"),
                    format!("{n:?}: expected a name on one line (letters, digits, '-', ...), not empty"),
                ));
            }
        }
        for k in 0..count {
            let name = match &g.name {
                Some(n) if count == 1 => n.clone(),
                Some(n) => format!("{n}-{k}"),
                None => format!("{}{}", role.as_str(), replicas.len()),
            };
            let front = replicas.len();
            replicas.push(replica_of(&spec, gi, name, role, front));
        }
        if first.is_none() {
            first = Some(spec);
        }
    }
    // Names tell the replicas apart in the report: two alike (a group named twice, or "big" of
    // two beside "big-0") are refused.
    for (i, r) in replicas.iter().enumerate() {
        if let Some(o) = replicas[..i].iter().find(|o| o.name == r.name) {
            return Err(ConfigError::new(
                format!("fleet.replicas[{}].name", r.group),
                format!(
                    "replica name {:?} is also a replica of group {}: give the groups names that do not collide",
                    r.name, o.group
                ),
            ));
        }
    }
    let n_pre = replicas.iter().filter(|r| r.role == ReplicaRole::Prefill).count();
    let n_dec = replicas.iter().filter(|r| r.role == ReplicaRole::Decode).count();
    let n_mix = replicas.len() - n_pre - n_dec;
    if (n_pre > 0 || n_dec > 0) && (n_pre == 0 || n_dec == 0 || n_mix > 0) {
        return Err(ConfigError::new(
            "fleet.replicas",
            format!(
                "disaggregated serving needs prefill and decode replicas only (got {n_pre} prefill, {n_dec} decode, {n_mix} mixed)"
            ),
        ));
    }
    // A prefill replica hands its KV to a decode replica: the two must keep it alike. A vLLM
    // prefill engine's KV (NIXL, vLLM's block layout) is not what an SGLang decode engine reads,
    // and a KV cache of another dtype is other bytes than the transfer moves.
    if n_pre > 0 {
        let a = &replicas[0];
        if let Some(b) = replicas.iter().find(|r| r.engine.kind() != a.engine.kind()) {
            return Err(ConfigError::new(
                "fleet.replicas",
                format!(
                    "replica {} runs {} and replica {} runs {}: disaggregated prefill and decode replicas hand KV caches \
                     to each other through one connector, which both ends must be the same engine to use",
                    a.name,
                    a.engine.kind(),
                    b.name,
                    b.engine.kind()
                ),
            ));
        }
        if let Some(b) = replicas.iter().find(|r| r.deployment.kv_dtype_bytes != a.deployment.kv_dtype_bytes) {
            return Err(ConfigError::new(
                "fleet.replicas",
                format!(
                    "replica {} keeps its KV cache in {} byte(s) an element and replica {} in {}: a prefill replica's KV \
                     is read by the decode replica as it was written, so both need the same kv_cache_dtype",
                    a.name, a.deployment.kv_dtype_bytes, b.name, b.deployment.kv_dtype_bytes
                ),
            ));
        }
    }
    // The KV transfer and the decode pool's router exist only with prefill and decode pools:
    // set on a fleet of mixed replicas they would be read by nothing.
    if n_pre == 0 {
        for (field, set) in [
            ("kv_transfer_bandwidth_bytes_per_s", f.kv_transfer_bandwidth_bytes_per_s.is_some()),
            ("kv_transfer_latency_us", f.kv_transfer_latency_us.is_some()),
            ("decode_router", f.decode_router.is_some()),
        ] {
            if set {
                return Err(ConfigError::new(
                    format!("fleet.{field}"),
                    "applies to disaggregated serving only (replicas with role prefill and role decode); \
                     these replicas are mixed, so nothing would read it: remove it",
                ));
            }
        }
    }
    let bw = f.kv_transfer_bandwidth_bytes_per_s.unwrap_or(DEFAULT_KV_TRANSFER_BANDWIDTH);
    // From a slow network (100 MB/s) to beyond any NVLink (100 TB/s): a value outside is a typo
    // in units, and would give a run of years, or none at all.
    if !(bw.is_finite() && (1e8..=1e14).contains(&bw)) {
        return Err(ConfigError::new(
            "fleet.kv_transfer_bandwidth_bytes_per_s",
            format!("must be from 1e8 (100 MB/s) to 1e14 (100 TB/s) bytes per second, got {bw:?}"),
        ));
    }
    let lat = f.kv_transfer_latency_us.unwrap_or(0.0);
    if !(lat.is_finite() && (0.0..=1e9).contains(&lat)) {
        return Err(ConfigError::new("fleet.kv_transfer_latency_us", format!("must be from 0 to 1e9, got {lat:?}")));
    }
    let router = f.router.clone().unwrap_or(RouterSpec::RoundRobin {});
    router.check("fleet.router")?;
    let decode_router = f.decode_router.clone().unwrap_or_else(|| router.clone());
    decode_router.check("fleet.decode_router")?;
    let num_fronts = replicas.len();
    let fleet = FleetSpec {
        kind: FleetKind::Fleet,
        replicas,
        router,
        decode_router,
        kv_transfer_bandwidth_bytes_per_s: bw,
        kv_transfer_latency_ns: (lat * 1e3).round() as u64,
        num_fronts,
        pin_changes,
    };
    let mut base = first.expect("at least one group");
    if first_fitted_alone {
        // The run's workload as the other groups resolved it, with what the first group's engine
        // decides of it (as `resolve` would have for that group).
        let mut w = real_workload.expect("a disaggregated fleet has a decode group, resolved with the workload");
        apply_client_rules(s.workload.initial_test_request.is_none(), &base.engine, &base.model, &mut w)?;
        base.workload = w;
    }
    // The run has one workload: its outputs are shortened to a context only where every group
    // that generates them shortens them alike (a prefill replica, sent max_tokens = 1, never
    // does). Groups that would shorten a request differently are refused, not averaged.
    base.workload.context_clamp = match gen_clamps.first() {
        Some((_, c)) if gen_clamps.iter().all(|(_, d)| d == c) => *c,
        _ => {
            let asked = max_request_lengths(&WorkloadParams { context_clamp: None, ..base.workload.clone() }).1;
            if let Some((p, Some(m))) = gen_clamps.iter().find(|(_, c)| c.is_some_and(|m| asked > m)) {
                return Err(ConfigError::new(
                    format!("{p}.engine.max_model_len"),
                    format!(
                        "{m}: this group's vLLM would shorten requests of up to {asked} tokens to fit it, where the \
                         fleet's other groups would not or would otherwise: one workload cannot be both; give the \
                         groups that generate outputs one max_model_len, or shorten the requests"
                    ),
                ));
            }
            None
        }
    };
    Ok(SimSpec { fleet: Some(Box::new(fleet)), ..base })
}

/// A vLLM prefill group's scenario `sc`, resolved for the requests as its replicas receive them,
/// with `max_tokens = 1`: the scenario with a stand-in workload of its longest prompt and one
/// output token (so that the fit checks ask prompt + 1 of `max_model_len` and the pool). An
/// error when that fails too (`Some`: the stand-in's requests do not fit either, with the check's
/// words), or when the scenario's own workload was refused for something else than its requests'
/// length on this engine (`None`: the caller reports the first error). The spec's workload is the
/// stand-in: the caller replaces it.
fn vllm_prefill_fit(sc: &Scenario, res: &Resources) -> std::result::Result<SimSpec, Option<ConfigError>> {
    let real = resolve_workload(&sc.workload, res).map_err(|_| None)?;
    let (max_prompt, _) = max_request_lengths(&real);
    let stand_in = serde_json::json!({
        "dataset_name": "random",
        "random_input_len": max_prompt.max(1),
        "random_output_len": 1,
        "num_prompts": 1,
        "ignore_eos": true,
        "seed": sc.workload.seed,
    });
    let mut fit = sc.clone();
    fit.workload = serde_json::from_value(stand_in).map_err(|_| None)?;
    let spec = match resolve(&fit, res) {
        Ok(spec) => spec,
        Err(e) if e.path.starts_with("workload") => return Err(Some(e)),
        Err(_) => return Err(None),
    };
    // Only a refusal of the requests' length (prompt + output past max_model_len or the pool)
    // is lifted.
    match check_requests_fit(&SimSpec { workload: real, ..spec.clone() }) {
        Err(_) => Ok(spec),
        Ok(()) => Err(None),
    }
}

/// Engine flags the scenario gives that change nothing in this run, each with why: SGLang's
/// `num_reserved_decode_tokens` without an SGLang decode server, `load_balance_method` without
/// data parallelism, and the expert-parallel and MoE-kernel flags on a dense model. The engines
/// take these flags and ignore them as servesim does; a user who set one to see its effect
/// should hear that there is none (the caller says each once, as `--set` notes are).
pub fn flags_without_effect(s: &Scenario, spec: &SimSpec) -> Vec<String> {
    // Whether the flag is given at the top level or in any replica group's engine.
    let in_groups_as = |key: &str, set: fn(&Value) -> bool| {
        s.fleet
            .as_ref()
            .is_some_and(|f| f.replicas.iter().any(|g| g.engine.as_ref().and_then(|e| e.get(key)).is_some_and(set)))
    };
    let fleet = spec.fleet.as_deref();
    let mut out = Vec::new();
    // A value at the engine's own default changes nothing wherever it is given: not said.
    use super::sglang::SGLANG_NUM_RESERVED_DECODE_TOKENS as RESERVE;
    let reserve_given = |v: &Value| v.as_u64().is_some_and(|n| n != u64::from(RESERVE));
    let top_reserve = s.engine.sglang.num_reserved_decode_tokens.is_some_and(|n| n != RESERVE);
    let reserve_said =
        "has no effect: SGLang reads it on a decode server of a prefill/decode-disaggregated deployment \
                        (--disaggregation-mode decode) only";
    if (top_reserve || in_groups_as("num_reserved_decode_tokens", reserve_given))
        && fleet.and_then(FleetSpec::sglang_decode_reserve).is_none()
    {
        out.push(format!("engine.num_reserved_decode_tokens {reserve_said}, and this run has none (docs/fleets.md)"));
    } else if let Some(f) = &s.fleet {
        // A group that is not a decode group: its value is read by no decode server.
        for (i, g) in f.replicas.iter().enumerate() {
            let here = g.engine.as_ref().and_then(|e| e.get("num_reserved_decode_tokens")).is_some_and(reserve_given);
            if here && g.role != Some(ReplicaRole::Decode) {
                out.push(format!(
                    "fleet.replicas[{i}].engine.num_reserved_decode_tokens {reserve_said}, and this group's replicas \
                     are {}",
                    g.role.map_or("mixed", ReplicaRole::as_str)
                ));
            }
        }
    }
    const LB: &str = SGLANG_DEFAULT_LOAD_BALANCE_METHOD;
    if s.engine.load_balance_method.as_deref().is_some_and(|m| m != LB)
        || in_groups_as("load_balance_method", |v| v.as_str().is_some_and(|m| m != LB))
    {
        if fleet.is_none_or(|f| f.kind != FleetKind::DataParallel) {
            let why = if fleet.is_some() {
                "the fleet's router (fleet.router) picks each request's replica"
            } else {
                "this run has one engine (dp_size 1)"
            };
            out.push(format!(
                "engine.load_balance_method has no effect: SGLang's data-parallel controller uses it to spread \
                 requests over dp_size > 1 engines, and {why}"
            ));
        }
    }
    if spec.model.moe.is_none() {
        let given = [
            (
                "enable_expert_parallel",
                s.engine.vllm.enable_expert_parallel == Some(true)
                    || in_groups_as("enable_expert_parallel", |v| v == true),
            ),
            (
                "ep_size",
                s.engine.sglang.ep_size.is_some_and(|n| n > 1)
                    || in_groups_as("ep_size", |v| v.as_u64().is_some_and(|n| n > 1)),
            ),
            (
                "moe_backend",
                s.engine.vllm.moe_backend.as_deref().is_some_and(|b| b != "auto")
                    || in_groups_as("moe_backend", |v| v.as_str().is_some_and(|b| b != "auto")),
            ),
            (
                "moe_runner_backend",
                s.engine.sglang.moe_runner_backend.as_deref().is_some_and(|b| b != "auto")
                    || in_groups_as("moe_runner_backend", |v| v.as_str().is_some_and(|b| b != "auto")),
            ),
        ];
        for (field, given) in given {
            if given {
                out.push(format!(
                    "engine.{field} has no effect: the model has no mixture-of-experts layers, which are all the \
                     flag acts on"
                ));
            }
        }
    }
    // vLLM's `--kv-cache-memory-bytes` where it sizes nothing (the top level's; a group's is
    // resolved as its own engine): 0, which vLLM's worker reads as unset (`if kv_cache_memory_bytes
    // := ...`), and the bytes beside `num_gpu_blocks_override`, whose block count vLLM uses
    // (until 0.20 after checking the bytes' pool against max_model_len, which `resolve_vllm` repeats).
    if let EngineSpec::Vllm(c) = &spec.engine {
        match (s.engine.vllm.kv_cache_memory_bytes, s.engine.vllm.num_gpu_blocks_override) {
            (Some(0), _) => out.push(
                "engine.kv_cache_memory_bytes 0 has no effect: vLLM reads 0 as unset (the pool is sized as without it)"
                    .to_string(),
            ),
            (Some(_), Some(n)) => out.push(format!(
                "engine.kv_cache_memory_bytes has no effect on the pool: vLLM uses num_gpu_blocks_override's {n} blocks \
                 in its place{}",
                if c.version < super::vllm::VLLM_OVERRIDE_CHECKED {
                    format!(" (vLLM {} checks the bytes' pool against max_model_len first)", c.version)
                } else {
                    String::new()
                }
            )),
            _ => {}
        }
    }
    out
}
