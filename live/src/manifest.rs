//! Run records: what a live run ran against, so that a number can be
//! explained months later, and `servesim diff` of two records' setups.
//!
//! A record's `setup` holds everything that defines the experiment (engine,
//! version, flags the server exposes, model, KV capacity, workload and its
//! hash, seed, client version, host); `observed` holds what was measured
//! around it (`/metrics` before and after). API keys never appear.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::Value;
use sim::request::RequestSpec;
use sim::workload::Workload;

use crate::prom::Snapshot;
use crate::server::ServerInfo;

/// FNV-1a 64 over the bytes.
fn fnv(bytes: &[u8], mut h: u64) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A hash of the exact request list (lengths, contents, send times) of all phases.
pub fn workload_hash(w: &Workload) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut add = |r: &RequestSpec| {
        h = fnv(&r.prompt_len.to_le_bytes(), h);
        h = fnv(&r.max_tokens.to_le_bytes(), h);
        h = fnv(&r.output_len.to_le_bytes(), h);
        h = fnv(&r.arrival_ns.to_le_bytes(), h);
        h = fnv(&[u8::from(r.ignore_eos)], h);
        for s in &r.prompt {
            h = fnv(&s.key.to_le_bytes(), h);
            h = fnv(&s.len.to_le_bytes(), h);
        }
    };
    w.initial_test.iter().chain(&w.warmups).chain(&w.requests).for_each(&mut add);
    h = fnv(&w.max_concurrency.unwrap_or(0).to_le_bytes(), h);
    h = fnv(&w.request_rate.unwrap_or(f64::INFINITY).to_le_bytes(), h);
    format!("{h:016x}")
}

/// Seconds since the epoch, now.
pub fn now_unix_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// `YYYYmmdd-HHMMSS` (UTC) of a unix time, as `vllm bench serve` names files.
pub fn stamp(unix_s: f64) -> String {
    let secs = unix_s.max(0.0) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}{m:02}{d:02}-{:02}{:02}{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

fn host() -> String {
    std::fs::read_to_string("/etc/hostname").map(|s| s.trim().to_string()).unwrap_or_else(|_| "unknown".into())
}

/// The counters and gauges a record keeps from a `/metrics` snapshot.
pub fn relevant_metrics(s: &Snapshot) -> BTreeMap<String, f64> {
    let keep = [
        "vllm:num_preemptions_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:iteration_tokens_total_sum",
        "vllm:iteration_tokens_total_count",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "sglang:num_retracted_requests_total",
        "sglang:total_retracted_reqs",
        "sglang:num_retracted_reqs",
        "sglang:cached_tokens_total",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:num_requests_total",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:max_total_num_tokens",
        "sglang:new_token_ratio",
    ];
    keep.iter().filter_map(|k| s.sum(k).map(|v| ((*k).to_string(), v))).collect()
}

/// The `files` section of a record: each file's role and path, in order; written as an
/// object of role → path.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordFiles(pub Vec<(String, String)>);

impl Serialize for RecordFiles {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// The `files` section of a record: (role, path) pairs.
pub fn files(list: &[(&str, &std::path::Path)]) -> RecordFiles {
    RecordFiles(list.iter().map(|(k, p)| ((*k).to_string(), p.display().to_string())).collect())
}

/// The checksum of a file's bytes, named by its algorithm: `fnv1a64:` and 16 hex digits (FNV-1a
/// 64, as [`workload_hash`]: it tells a file changed or cut short since its record was written,
/// not a forgery). None where the file cannot be read.
pub fn file_checksum(path: &std::path::Path) -> Option<String> {
    std::fs::read(path).ok().map(|b| format!("fnv1a64:{:016x}", fnv(&b, 0xcbf2_9ce4_8422_2325)))
}

/// The `checksums` section of a record: each of its files' checksum ([`file_checksum`]) by role,
/// as the file is when the record is written; a file that cannot be read is left out.
pub fn checksums(files: &RecordFiles) -> BTreeMap<String, String> {
    files.0.iter().filter_map(|(role, path)| Some((role.clone(), file_checksum(std::path::Path::new(path))?))).collect()
}

/// A run record (`*.record.json`): the setup, what was observed around the run, its files (and
/// their checksums), and its report (`summary`).
#[derive(Clone, Debug, Serialize)]
pub struct RunRecord<'a, S: Serialize> {
    /// `servesim-run`.
    pub format: &'static str,
    pub version: u32,
    pub created_unix_s: f64,
    pub setup: RunSetup<'a>,
    pub observed: Observed,
    pub files: &'a RecordFiles,
    /// The files' checksums by role, as they were when the record was written.
    pub checksums: BTreeMap<String, String>,
    pub summary: &'a S,
}

/// The server as it described itself, and where the requests went: the part of a setup every
/// run record shares (`bench`, `check`, `calibrate`), so that `servesim diff` compares them
/// field by field.
#[derive(Clone, Debug, Serialize)]
pub struct ServerSetup<'a> {
    pub engine: EngineSetup<'a>,
    pub base_url: &'a str,
    pub endpoint: &'a str,
    pub model: &'a Option<String>,
    pub model_root: &'a Option<String>,
    pub max_model_len: Option<u32>,
    pub kv_capacity_tokens: Option<u64>,
    pub num_gpu_blocks: Option<u64>,
    pub kv_granularity: Option<u32>,
    pub max_running: Option<u32>,
    pub token_budget: Option<i64>,
    pub prefix_caching: Option<bool>,
    /// `servesim serve`'s emulated GPU and time scale (absent for a real engine): a run against
    /// a time-scaled emulator timed an engine that many times faster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub servesim_hardware: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub servesim_time_scale: Option<f64>,
}

/// The [`ServerSetup`] of a server's self-description, requests sent to `endpoint`.
pub fn server_setup<'a>(info: &'a ServerInfo, endpoint: &'a str) -> ServerSetup<'a> {
    ServerSetup {
        engine: EngineSetup {
            kind: info.kind_name(),
            version: &info.version,
            info_gauges: &info.info_gauges,
            server_args: &info.server_args,
        },
        base_url: &info.base_url,
        endpoint,
        model: &info.model,
        model_root: &info.model_root,
        max_model_len: info.max_model_len,
        kv_capacity_tokens: info.kv_capacity_tokens,
        num_gpu_blocks: info.num_gpu_blocks,
        kv_granularity: info.kv_granularity,
        max_running: info.max_running,
        token_budget: info.token_budget,
        prefix_caching: info.prefix_caching,
        servesim_hardware: info.servesim_hardware.as_deref(),
        servesim_time_scale: info.servesim_time_scale,
    }
}

/// Everything that defines the experiment (`servesim diff` compares these): the server
/// ([`ServerSetup`], its fields first), then the workload.
#[derive(Clone, Debug, Serialize)]
pub struct RunSetup<'a> {
    #[serde(flatten)]
    pub server: ServerSetup<'a>,
    /// The workload section as the user gave it.
    pub workload: &'a Value,
    pub workload_hash: String,
    pub seed: u64,
    /// `check`'s salt of the prompts' contents (`calib::procedure::salt_prompts`); absent when
    /// the prompts are the seed's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_salt: Option<u64>,
    pub client: ClientSetup,
    pub host: String,
}

/// The engine as the server describes itself.
#[derive(Clone, Debug, Serialize)]
pub struct EngineSetup<'a> {
    pub kind: &'static str,
    pub version: &'a Option<String>,
    pub info_gauges: &'a BTreeMap<String, BTreeMap<String, String>>,
    pub server_args: &'a Option<Value>,
}

/// The load generator.
#[derive(Clone, Debug, Serialize)]
pub struct ClientSetup {
    pub name: &'static str,
    pub version: &'static str,
}

/// The engine's `/metrics` around the run ([`relevant_metrics`]).
#[derive(Clone, Debug, Serialize)]
pub struct Observed {
    pub metrics_before: Option<BTreeMap<String, f64>>,
    pub metrics_after: Option<BTreeMap<String, f64>>,
}

/// Builds a run record.
#[allow(clippy::too_many_arguments)]
pub fn record<'a, S: Serialize>(
    info: &'a ServerInfo,
    endpoint: &'a str,
    workload_spec: &'a Value,
    workload: &Workload,
    before: Option<&Snapshot>,
    after: Option<&Snapshot>,
    files: &'a RecordFiles,
    summary: &'a S,
) -> RunRecord<'a, S> {
    RunRecord {
        format: "servesim-run",
        version: 1,
        created_unix_s: now_unix_s(),
        setup: RunSetup {
            server: server_setup(info, endpoint),
            workload: workload_spec,
            workload_hash: workload_hash(workload),
            seed: workload.seed,
            prompt_salt: None,
            client: ClientSetup { name: "servesim", version: env!("CARGO_PKG_VERSION") },
            host: host(),
        },
        observed: Observed { metrics_before: before.map(relevant_metrics), metrics_after: after.map(relevant_metrics) },
        files,
        checksums: checksums(files),
        summary,
    }
}

/// The run record of a live `calibrate` (`<profile>.record.json`, beside the profile:
/// [`calibration_record_path`]): written when the server is known ([`CalibrationRecord::write`],
/// `summary.status` `"running"`), again after each probe (its per-request file and checksum
/// added), and at the end (`"completed"` with the profile and its checksum, or `"interrupted"`,
/// or `"failed: …"`). A run record as `bench`'s and `check`'s are (`format` `servesim-run`,
/// version 1, the same server fields in `setup`), so that `servesim diff` reads it beside them.
#[derive(Clone, Debug)]
pub struct CalibrationRecord {
    /// Where it is written.
    pub path: std::path::PathBuf,
    info: ServerInfo,
    endpoint: String,
    created_unix_s: f64,
    /// The command line, an API key given on it redacted.
    command: Vec<String>,
    /// The calibration's own settings (probe plan size, warm-up, repeats, fit budget, how the
    /// server was described), as `setup.calibrate`.
    settings: Value,
    metrics_before: Option<BTreeMap<String, f64>>,
    metrics_after: Option<BTreeMap<String, f64>>,
    files: RecordFiles,
    probes: Vec<Value>,
    status: String,
    profile: Option<Value>,
}

/// The record of a live calibration written beside the profile `out`: `out` without its
/// `.json`, then `.record.json` (`profile.json` → `profile.record.json`), as a `bench` result's
/// record is named after the result.
pub fn calibration_record_path(out: &std::path::Path) -> std::path::PathBuf {
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "profile".into());
    let base = name.strip_suffix(".json").unwrap_or(&name);
    out.with_file_name(format!("{base}.record.json"))
}

/// `args` with the value of `--api-key` (given as `--api-key KEY` or `--api-key=KEY`) replaced:
/// API keys are written nowhere.
pub fn redact_command(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut hide_next = false;
    for a in args {
        if hide_next {
            out.push("<redacted>".to_string());
            hide_next = false;
        } else if a == "--api-key" {
            out.push(a.clone());
            hide_next = true;
        } else if a.starts_with("--api-key=") {
            out.push("--api-key=<redacted>".to_string());
        } else {
            out.push(a.clone());
        }
    }
    out
}

#[derive(Serialize)]
struct CalibrationSetup<'a> {
    #[serde(flatten)]
    server: ServerSetup<'a>,
    calibrate: &'a Value,
    client: ClientSetup,
    host: String,
}

#[derive(Serialize)]
struct CalibrationView<'a> {
    format: &'static str,
    version: u32,
    created_unix_s: f64,
    command: &'a [String],
    setup: CalibrationSetup<'a>,
    observed: Observed,
    files: &'a RecordFiles,
    checksums: BTreeMap<String, String>,
    summary: Value,
}

impl CalibrationRecord {
    /// The record of a calibration against the server `info` (requests to `endpoint`), to be
    /// written at `path`; `before` is the server's `/metrics` as the calibration starts.
    pub fn new(
        path: std::path::PathBuf,
        info: &ServerInfo,
        endpoint: &str,
        command: &[String],
        settings: Value,
        before: Option<&Snapshot>,
    ) -> CalibrationRecord {
        CalibrationRecord {
            path,
            info: info.clone(),
            endpoint: endpoint.to_string(),
            created_unix_s: now_unix_s(),
            command: redact_command(command),
            settings,
            metrics_before: before.map(relevant_metrics),
            metrics_after: None,
            files: RecordFiles::default(),
            probes: Vec::new(),
            status: "running".into(),
            profile: None,
        }
    }

    /// A probe's run: its name, per-request file, workload hash and counts.
    pub fn add_probe(&mut self, name: &str, requests: &std::path::Path, w: &Workload, sent: usize, completed: usize) {
        self.files.0.push((format!("probe {name}"), requests.display().to_string()));
        self.probes.push(serde_json::json!({
            "name": name,
            "requests": requests.display().to_string(),
            "workload_hash": workload_hash(w),
            "seed": w.seed,
            "max_concurrency": w.max_concurrency,
            "num_prompts": w.requests.len(),
            "sent": sent,
            "completed": completed,
        }));
    }

    /// Another file the calibration read or wrote (`step_log`, `server_log`, `profile`).
    pub fn add_file(&mut self, role: &str, path: &std::path::Path) {
        self.files.0.retain(|(r, _)| r != role);
        self.files.0.push((role.to_string(), path.display().to_string()));
    }

    /// The server's `/metrics` when the calibration ended.
    pub fn set_metrics_after(&mut self, after: Option<&Snapshot>) {
        self.metrics_after = after.map(relevant_metrics);
    }

    /// How it ended: `completed` (with what the profile says: `profile`, its coefficients and
    /// their sources), `interrupted`, or `failed: why`.
    pub fn finish(&mut self, status: &str, profile: Option<Value>) {
        self.status = status.to_string();
        self.profile = profile;
    }

    /// Writes the record as it stands (its folder made where missing); the error names the file.
    pub fn write(&self) -> Result<(), String> {
        let mut summary = serde_json::Map::new();
        summary.insert("status".into(), self.status.clone().into());
        summary.insert("probes".into(), Value::Array(self.probes.clone()));
        if let Some(p) = &self.profile {
            summary.insert("profile".into(), p.clone());
        }
        let view = CalibrationView {
            format: "servesim-run",
            version: 1,
            created_unix_s: self.created_unix_s,
            command: &self.command,
            setup: CalibrationSetup {
                server: server_setup(&self.info, &self.endpoint),
                calibrate: &self.settings,
                client: ClientSetup { name: "servesim", version: env!("CARGO_PKG_VERSION") },
                host: host(),
            },
            observed: Observed {
                metrics_before: self.metrics_before.clone(),
                metrics_after: self.metrics_after.clone(),
            },
            files: &self.files,
            checksums: checksums(&self.files),
            summary: Value::Object(summary),
        };
        if let Some(d) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", self.path.display()))?;
        }
        std::fs::write(&self.path, serde_json::to_string_pretty(&view).expect("json"))
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }
}

fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                flatten(&p, x, out);
            }
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

/// The workload fields `vllm bench serve` gives a value when none is passed, at that value (a
/// record written without `--burstiness` and one with `--burstiness 1.0` ran the same load),
/// `"inf"` and null rates alike (all at once), and numbers by value (4 and 4.0 are one count).
/// The values are the workload section's defaults as the simulator resolves them
/// (`sim::config::resolve_workload`), which are `vllm bench serve`'s; a field of another
/// dataset than the run's is absent on both sides, or its default on both. Not `num_prompts`:
/// a trace's default is its rows.
const WORKLOAD_DEFAULTS: [(&str, &str); 15] = [
    ("burstiness", "1"),
    ("client", "\"vllm_bench_serve\""),
    ("num_warmups", "0"),
    ("random_range_ratio", "0"),
    ("request_rate", "inf"),
    ("seed", "0"),
    ("dataset_name", "\"random\""),
    ("random_input_len", "1024"),
    ("random_output_len", "128"),
    ("random_prefix_len", "0"),
    ("prefix_repetition_num_prefixes", "10"),
    ("prefix_repetition_prefix_len", "256"),
    ("prefix_repetition_suffix_len", "256"),
    ("prefix_repetition_output_len", "128"),
    ("prior_run_prompts", "0"),
];

/// The flattened paths of the workload sections in `v` (`workload`, or `….workload`): each
/// object under a key `workload`, an empty one too (which flattens to no key at all).
fn workload_paths(prefix: &str, v: &Value, out: &mut std::collections::BTreeSet<String>) {
    if let Value::Object(m) = v {
        for (k, x) in m {
            let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
            if k == "workload" && x.is_object() {
                out.insert(p.clone());
            }
            workload_paths(&p, x, out);
        }
    }
}

/// A flattened `request_rate` as the scenario reader takes it (`sim::config::RequestRate`):
/// `null`, `"inf"`, `"Infinity"`, `"infinity"` (and any text that parses as +∞) are one
/// infinite rate, written `inf`; a number written as text (`"5"`) is that number.
fn normalise_rate(v: &str) -> Option<String> {
    if v == "null" {
        return Some("inf".into());
    }
    let s: String = serde_json::from_str(v).ok()?;
    match s.as_str() {
        "inf" | "Infinity" | "infinity" => Some("inf".into()),
        _ => match s.parse::<f64>() {
            Ok(x) if x == f64::INFINITY => Some("inf".into()),
            Ok(x) if x.is_finite() && x > 0.0 => Some(format!("{x}")),
            _ => None,
        },
    }
}

/// Each record's setup as the scenario reader gives it, so that two spellings of one value are
/// one value: in each workload section (even an empty one) a field given as `null` is not
/// given, and one not given is its default ([`WORKLOAD_DEFAULTS`]); a rate's and a burstiness's
/// infinities and a rate's number written as text by value ([`normalise_rate`]); numbers by
/// value.
/// Returns the keys it filled in with their defaults (not in the record, or null there).
fn normalise(
    m: &mut BTreeMap<String, String>,
    workloads: &std::collections::BTreeSet<String>,
) -> std::collections::BTreeSet<String> {
    let mut defaulted = std::collections::BTreeSet::new();
    for w in workloads {
        let prefix = format!("{w}.");
        m.retain(|k, v| !(v == "null" && k.strip_prefix(&prefix).is_some_and(|f| !f.contains('.'))));
        for (k, v) in WORKLOAD_DEFAULTS {
            let key = format!("{w}.{k}");
            if !m.contains_key(&key) {
                m.insert(key.clone(), v.to_string());
                defaulted.insert(key);
            }
        }
    }
    let is = |k: &str, f: &str| k == f || k.strip_suffix(f).is_some_and(|p| p.ends_with('.'));
    for (k, v) in m.iter_mut() {
        if is(k, "request_rate") {
            if let Some(r) = normalise_rate(v) {
                *v = r;
                continue;
            }
        }
        if is(k, "burstiness") && matches!(v.as_str(), "\"inf\"" | "\"Infinity\"" | "\"infinity\"") {
            *v = "inf".into();
        } else if let Ok(x) = v.parse::<f64>() {
            *v = format!("{x}");
        }
    }
    defaulted
}

/// The dataset a workload field belongs to (`random_input_len`: `random`), if it is one
/// dataset's own.
fn dataset_of(field: &str) -> Option<&'static str> {
    if field.starts_with("random_") && field != "random_range_ratio" {
        Some("random")
    } else if field.starts_with("prefix_repetition_") {
        Some("prefix_repetition")
    } else {
        None
    }
}

/// How `diff` shows a value the record does not hold (a workload field it leaves out, or gives
/// as null), which it compares at its default: the default, said to be one; or, for a field of
/// another dataset than the run's, that the run's dataset does not use it (its default would
/// read as a length the run had).
fn shown_default(key: &str, value: &str, flat: &BTreeMap<String, String>) -> String {
    let (section, field) = key.rsplit_once('.').unwrap_or(("", key));
    let dataset_key = if section.is_empty() { "dataset_name".to_string() } else { format!("{section}.dataset_name") };
    let dataset = flat.get(&dataset_key).and_then(|d| serde_json::from_str::<String>(d).ok());
    match (dataset_of(field), dataset) {
        (Some(own), Some(d)) if own != d => format!("(not in the record: its dataset {d} does not use it)"),
        _ => format!("{value} (not in the record: the default)"),
    }
}

/// The types of the setup fields `diff` compares: a value of another type (`"64"` for a length)
/// would be shown as a difference, or hide one. The error names the field (the caller, the
/// file).
fn check_setup_types(setup: &serde_json::Map<String, Value>) -> Result<(), String> {
    fn want(path: &str, v: &Value, what: &str, ok: bool) -> Result<(), String> {
        if ok || v.is_null() {
            Ok(())
        } else {
            Err(format!("{path}: expected {what}, got {v}"))
        }
    }
    let integer = |p: &str, v: &Value| want(p, v, "a non-negative integer", v.as_u64().is_some());
    let number = |p: &str, v: &Value| want(p, v, "a number", v.is_number());
    let string = |p: &str, v: &Value| want(p, v, "a string", v.is_string());
    for k in [
        "max_model_len",
        "kv_capacity_tokens",
        "num_gpu_blocks",
        "kv_granularity",
        "max_running",
        "seed",
        "prompt_salt",
    ] {
        if let Some(v) = setup.get(k) {
            integer(&format!("setup.{k}"), v)?;
        }
    }
    if let Some(v) = setup.get("token_budget") {
        want("setup.token_budget", v, "an integer", v.as_i64().is_some())?;
    }
    if let Some(v) = setup.get("prefix_caching") {
        want("setup.prefix_caching", v, "a boolean", v.is_boolean())?;
    }
    if let Some(v) = setup.get("servesim_time_scale") {
        number("setup.servesim_time_scale", v)?;
    }
    for k in ["base_url", "endpoint", "model", "model_root", "workload_hash", "host", "servesim_hardware"] {
        if let Some(v) = setup.get(k) {
            string(&format!("setup.{k}"), v)?;
        }
    }
    if let Some(v) = setup.get("engine").and_then(|e| e.get("version")) {
        string("setup.engine.version", v)?;
    }
    let mut workloads = std::collections::BTreeSet::new();
    let whole = Value::Object(setup.clone());
    workload_paths("", &whole, &mut workloads);
    for w in workloads {
        let Some(Value::Object(m)) = w.split('.').try_fold(&whole, |v, k| v.get(k)) else { continue };
        for (k, v) in m {
            let p = format!("setup.{w}.{k}");
            match k.as_str() {
                "num_prompts"
                | "max_concurrency"
                | "random_input_len"
                | "random_output_len"
                | "random_prefix_len"
                | "prefix_repetition_num_prefixes"
                | "prefix_repetition_prefix_len"
                | "prefix_repetition_suffix_len"
                | "prefix_repetition_output_len"
                | "prior_run_prompts"
                | "num_warmups"
                | "seed" => number(&p, v)?,
                "random_range_ratio" => number(&p, v)?,
                "burstiness" | "request_rate" => want(&p, v, "a number or \"inf\"", v.is_number() || v.is_string())?,
                "dataset_name" => string(&p, v)?,
                "ignore_eos" => want(&p, v, "a boolean", v.is_boolean())?,
                _ => {}
            }
        }
    }
    Ok(())
}

/// A run record from its text: JSON, with no key given twice in one object (JSON keeps the
/// last, silently: `"num_prompts": 40, "num_prompts": 41` read as 41, where the scenario loader
/// refuses it), and a record this build reads ([`check_record`]). The caller names the file.
pub fn read_record(text: &str) -> Result<Value, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    sim::config::no_duplicate_keys(text)?;
    check_record(&v)?;
    Ok(v)
}

/// Whether `v` is a run record this build reads: `format` `"servesim-run"`, `version` 1, and a
/// `setup` object. The error says which field is wrong and what was expected.
pub fn check_record(v: &Value) -> Result<(), String> {
    let not = |why: String| Err(format!("not a servesim run record: {why}"));
    match v.get("format") {
        Some(Value::String(f)) if f == "servesim-run" => {}
        Some(f) => return not(format!("\"format\" is {f}, expected \"servesim-run\"")),
        None => return not("no \"format\" (expected \"servesim-run\")".into()),
    }
    match v.get("version") {
        Some(n) if n.as_u64() == Some(1) => {}
        Some(n) => return not(format!("\"version\" is {n}, expected 1 (the only version this build reads)")),
        None => return not("no \"version\" (expected 1)".into()),
    }
    let setup = match v.get("setup") {
        Some(Value::Object(s)) => s,
        Some(s) => return not(format!("\"setup\" is {s}, expected an object")),
        None => return not("no \"setup\" (expected an object)".into()),
    };
    // The engine the run was against: every record `bench`, `check` and `calibrate` write has
    // one; without it two runs against different engines would compare as one setup.
    match setup.get("engine") {
        Some(Value::Object(e)) => match e.get("kind") {
            Some(Value::String(_)) => {}
            Some(k) => return Err(format!("setup.engine.kind: expected a string (\"vllm\", \"sglang\"), got {k}")),
            None => return not("no \"setup.engine.kind\" (the engine the run was against)".into()),
        },
        Some(Value::Null) | None => return not(
            "no \"setup.engine\" (the engine the run was against, which every bench, check and calibrate record holds)"
                .into(),
        ),
        Some(e) => return Err(format!("setup.engine: expected an object, got {e}")),
    }
    check_setup_types(setup)
}

/// The setup fields that differ between two records: `(field, a, b)`. Both must pass
/// [`check_record`] (the caller names the file that does not).
pub fn diff(a: &Value, b: &Value) -> Result<Vec<(String, String, String)>, String> {
    check_record(a)?;
    check_record(b)?;
    let (Some(sa), Some(sb)) = (a.get("setup"), b.get("setup")) else {
        return Err("not a servesim run record (no \"setup\")".into());
    };
    let (mut fa, mut fb) = (BTreeMap::new(), BTreeMap::new());
    flatten("", sa, &mut fa);
    flatten("", sb, &mut fb);
    let (mut wa, mut wb) = Default::default();
    workload_paths("", sa, &mut wa);
    workload_paths("", sb, &mut wb);
    let da = normalise(&mut fa, &wa);
    let db = normalise(&mut fb, &wb);
    let keys: std::collections::BTreeSet<&String> = fa.keys().chain(fb.keys()).collect();
    // A key one record holds as a value and the other as an object (`workload: null` against a
    // workload with fields) is said to be an object there, not absent.
    let side = |f: &BTreeMap<String, String>, k: &String| -> String {
        match f.get(k) {
            Some(v) => v.clone(),
            None if f.keys().any(|o| o.starts_with(&format!("{k}."))) => "(an object)".to_string(),
            None => "(absent)".to_string(),
        }
    };
    // A value compared at its default is shown as one ([`shown_default`]).
    let shown =
        |f: &BTreeMap<String, String>, defaulted: &std::collections::BTreeSet<String>, k: &String, v: String| {
            if defaulted.contains(k) {
                shown_default(k, &v, f)
            } else {
                v
            }
        };
    Ok(keys
        .into_iter()
        .filter_map(|k| {
            let (x, y) = (side(&fa, k), side(&fb, k));
            (x != y).then(|| (k.clone(), shown(&fa, &da, k, x), shown(&fb, &db, k, y)))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A calibration's record is named after its profile, holds no API key, and is a run record
    /// `diff` reads: the server's fields where a bench record has them, and what the run wrote,
    /// each file with the checksum of its bytes.
    #[test]
    fn a_calibration_record_is_a_run_record_beside_its_profile() {
        use std::path::Path;
        assert_eq!(calibration_record_path(Path::new("out/p.json")), Path::new("out/p.record.json"));
        assert_eq!(calibration_record_path(Path::new("prof")), Path::new("prof.record.json"));
        let args: Vec<String> = ["servesim", "calibrate", "--api-key", "k1", "--api-key=k2", "--out", "p.json"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            redact_command(&args),
            ["servesim", "calibrate", "--api-key", "<redacted>", "--api-key=<redacted>", "--out", "p.json"]
        );
        let dir = std::env::temp_dir().join(format!("servesim-calib-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let probe = dir.join("calibrate-x-prefill-16.requests.jsonl");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&probe, "{}\n").unwrap();
        let info = ServerInfo { base_url: "http://h".into(), max_running: Some(4), ..Default::default() };
        let mut rec = CalibrationRecord::new(
            dir.join("p.record.json"),
            &info,
            "/v1/completions",
            &args,
            json!({"repeat": 1}),
            None,
        );
        rec.write().unwrap();
        let early: Value = serde_json::from_str(&std::fs::read_to_string(&rec.path).unwrap()).unwrap();
        check_record(&early).unwrap();
        assert_eq!(early["summary"]["status"], "running");
        let w = Workload { max_concurrency: Some(1), seed: 7, ..Default::default() };
        rec.add_probe("prefill-16", &probe, &w, 0, 0);
        rec.finish("completed", Some(json!({"path": "p.json"})));
        rec.write().unwrap();
        let text = std::fs::read_to_string(&rec.path).unwrap();
        assert!(!text.contains("k1") && !text.contains("k2"), "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["summary"]["status"], "completed");
        assert_eq!(v["summary"]["probes"][0]["seed"], 7);
        // FNV-1a 64 of "{}\n", as `fnv` computes it.
        let want = format!("fnv1a64:{:016x}", fnv(b"{}\n", 0xcbf2_9ce4_8422_2325));
        assert_eq!(v["checksums"]["probe prefill-16"].as_str(), Some(want.as_str()));
        assert_eq!(v["setup"]["max_running"], 4);
        assert_eq!(v["setup"]["calibrate"]["repeat"], 1);
        // `diff` against a bench-like record: the server's fields compare by name.
        let bench = json!({"format": "servesim-run", "version": 1, "setup": {"engine": {"kind": "unknown"}, "max_running": 8, "base_url": "http://h"}});
        let d = diff(&v, &bench).unwrap();
        assert!(d.contains(&("max_running".into(), "4".into(), "8".into())), "{d:?}");
        assert!(!d.iter().any(|(k, _, _)| k == "base_url"), "{d:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn stamps_are_utc_calendar_dates() {
        assert_eq!(stamp(0.0), "19700101-000000");
        assert_eq!(stamp(1_796_014_244.0), "20261130-045044"); // `date -u -d @1796014244`
        assert_eq!(stamp(951_782_400.0), "20000229-000000");
    }

    /// Two records of the same load, one with vllm bench serve's defaults written out, are the
    /// same setup (the second invariant hunt of 2026-12-04); a real change still shows.
    #[test]
    fn diff_reads_defaults_and_numbers_by_value() {
        let a = json!({"format": "servesim-run", "version": 1, "setup": {"engine": {"kind": "vllm"}, "workload": {"num_prompts": 16, "max_concurrency": 4}}});
        let b = json!({"format": "servesim-run", "version": 1, "setup": {"engine": {"kind": "vllm"}, "workload": {"num_prompts": 16.0, "max_concurrency": 4,
            "burstiness": 1.0, "num_warmups": 0, "random_range_ratio": 0.0, "request_rate": null}}});
        assert_eq!(diff(&a, &b).unwrap(), vec![]);
        let c = json!({"format": "servesim-run", "version": 1, "setup": {"engine": {"kind": "vllm"}, "workload": {"num_prompts": 16, "max_concurrency": 4, "request_rate": "inf"}}});
        assert_eq!(diff(&a, &c).unwrap(), vec![]);
        let d = json!({"format": "servesim-run", "version": 1, "setup": {"engine": {"kind": "vllm"}, "workload": {"num_prompts": 16, "max_concurrency": 4, "burstiness": 0.5}}});
        assert_eq!(
            diff(&a, &d).unwrap(),
            vec![(
                "workload.burstiness".to_string(),
                "1 (not in the record: the default)".to_string(),
                "0.5".to_string()
            )]
        );
        // The seed, the dataset and its lengths at their defaults, written out or not (the
        // audit of 2026-12-06: `--seed 0` against no `--seed` differed).
        let e = json!({"format": "servesim-run", "version": 1, "setup": {"engine": {"kind": "vllm"}, "workload": {"num_prompts": 16, "max_concurrency": 4,
            "seed": 0, "dataset_name": "random", "random_input_len": 1024, "random_output_len": 128, "random_prefix_len": 0}}});
        assert_eq!(diff(&a, &e).unwrap(), vec![]);
        let f = json!({"format": "servesim-run", "version": 1, "setup": {"engine": {"kind": "vllm"}, "workload": {"num_prompts": 16, "max_concurrency": 4, "seed": 1}}});
        assert_eq!(
            diff(&a, &f).unwrap(),
            vec![("workload.seed".to_string(), "0 (not in the record: the default)".to_string(), "1".to_string())]
        );
    }

    /// Two spellings the scenario reader takes as one value are one setup (the audit of
    /// 2026-12-06: `"inf"` against `"Infinity"`, 5 against `"5"`, and an empty workload against
    /// one with a default written out, 14 fields, had all been reported as differing).
    #[test]
    fn diff_reads_rates_and_burstiness_as_the_scenario_reader_does() {
        let r = |w: Value| json!({"format": "servesim-run", "version": 1, "setup": {"engine": {"kind": "vllm"}, "workload": w}});
        let same = |a: Value, b: Value| {
            assert_eq!(diff(&r(a.clone()), &r(b.clone())).unwrap(), vec![], "{a} against {b}");
            assert_eq!(diff(&r(b.clone()), &r(a.clone())).unwrap(), vec![], "{b} against {a}");
        };
        same(
            json!({"dataset_name": "random", "request_rate": "inf", "burstiness": "inf"}),
            json!({"dataset_name": "random", "request_rate": "Infinity", "burstiness": "Infinity"}),
        );
        same(
            json!({"request_rate": "infinity", "burstiness": "infinity"}),
            json!({"request_rate": null, "burstiness": "inf"}),
        );
        same(json!({"request_rate": 5}), json!({"request_rate": "5"}));
        same(json!({"request_rate": 2.5}), json!({"request_rate": "2.50"}));
        same(json!({}), json!({"burstiness": 1}));
        same(json!({}), json!({"burstiness": null, "max_concurrency": null, "seed": 0}));
        same(json!({}), json!({}));
        // A real difference still shows, and a value the reader refuses stays as written.
        let d = diff(&r(json!({})), &r(json!({"request_rate": "5"}))).unwrap();
        assert_eq!(
            d,
            vec![("workload.request_rate".into(), "inf (not in the record: the default)".into(), "5".into())]
        );
        let d = diff(&r(json!({"burstiness": "inf"})), &r(json!({"burstiness": 1}))).unwrap();
        assert_eq!(d, vec![("workload.burstiness".into(), "inf".into(), "1".into())]);
        let d = diff(&r(json!({"request_rate": "fast"})), &r(json!({}))).unwrap();
        assert_eq!(
            d,
            vec![("workload.request_rate".into(), "\"fast\"".into(), "inf (not in the record: the default)".into())]
        );
        let d = diff(&r(json!({})), &r(json!({"max_concurrency": 4}))).unwrap();
        assert_eq!(d, vec![("workload.max_concurrency".into(), "(absent)".into(), "4".into())]);
    }

    /// A record with a key given twice is refused naming the key (JSON keeps the last: it had
    /// been read silently as the second value), as the scenario loader refuses one.
    #[test]
    fn a_record_with_a_key_given_twice_is_refused() {
        let t = r#"{"format":"servesim-run","version":1,"setup":{"engine":{"kind":"vllm"},"workload":{"num_prompts":40,"num_prompts":41}}}"#;
        let e = read_record(t).unwrap_err();
        assert!(e.contains("setup.workload.num_prompts: given twice"), "{e}");
        let ok =
            r#"{"format":"servesim-run","version":1,"setup":{"engine":{"kind":"vllm"},"workload":{"num_prompts":40}}}"#;
        assert_eq!(read_record(ok).unwrap()["setup"]["workload"]["num_prompts"], 40);
        assert!(read_record("{").unwrap_err().starts_with("not JSON"));
        assert!(read_record(r#"{"format":"x"}"#).unwrap_err().starts_with("not a servesim run record"));
    }

    #[test]
    fn diff_lists_setup_fields_only() {
        let a = json!({"format": "servesim-run", "version": 1, "setup": {"engine": {"kind": "vllm", "version": "0.32.0"}, "client": {"name": "servesim"}, "seed": 0}, "summary": {"x": 1}});
        let b = json!({"format": "servesim-run", "version": 1, "setup": {"engine": {"kind": "vllm", "version": "0.33.0"}, "client": {"name": "servesim"}, "seed": 0, "host": "h"}, "summary": {"x": 2}});
        let d = diff(&a, &b).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].0, "engine.version");
        assert_eq!(d[1], ("host".into(), "(absent)".into(), "\"h\"".into()));
        // An object on one side and a value on the other is not "absent".
        let n = json!({"format": "servesim-run", "version": 1, "setup": {"engine": {"kind": "vllm", "version": "0.32.0"}, "client": null, "seed": 0}});
        let d = diff(&a, &n).unwrap();
        assert!(d.contains(&("client".into(), "(an object)".into(), "null".into())), "{d:?}");
        assert!(diff(&json!({}), &b).is_err());
        // Not a run record: another format, another version, a setup that is not an object.
        for bad in [
            json!({"setup": null}),
            json!({"format": "x", "version": 1, "setup": {}}),
            json!({"format": "servesim-run", "version": 2, "setup": {}}),
            json!({"format": "servesim-run", "version": 1, "setup": null}),
            json!({"format": "servesim-run", "version": 1, "setup": {}}),
            json!({"format": "servesim-run", "version": 1, "setup": {"engine": null, "seed": 0}}),
            json!({"format": "servesim-run", "version": 1, "setup": {"engine": {"version": "0.33.0"}}}),
        ] {
            let e = diff(&bad, &b).unwrap_err();
            assert!(e.starts_with("not a servesim run record"), "{e}");
        }
    }

    /// A record without the engine it ran against, or with a setup field of the wrong type, is
    /// refused naming the field (the audit of 2026-12-07: a record with no `setup.engine` was
    /// compared, and `random_input_len: "64"` shown as a difference).
    #[test]
    fn diff_refuses_a_record_without_an_engine_or_with_a_field_of_the_wrong_type() {
        let rec = |setup: Value| json!({"format": "servesim-run", "version": 1, "setup": setup});
        let ok = rec(json!({"engine": {"kind": "vllm"}, "workload": {"random_input_len": 64}}));
        diff(&ok, &ok).unwrap();
        let e = diff(&rec(json!({"workload": {"random_input_len": 64}})), &ok).unwrap_err();
        assert!(e.contains("setup.engine"), "{e}");
        for (setup, field) in [
            (
                json!({"engine": {"kind": "vllm"}, "workload": {"random_input_len": "64"}}),
                "setup.workload.random_input_len",
            ),
            (json!({"engine": {"kind": "vllm"}, "workload": {"ignore_eos": "yes"}}), "setup.workload.ignore_eos"),
            (json!({"engine": {"kind": "vllm"}, "max_running": "8"}), "setup.max_running"),
            (json!({"engine": {"kind": 1}}), "setup.engine.kind"),
            (json!({"engine": "vllm"}), "setup.engine"),
        ] {
            let e = diff(&rec(setup.clone()), &ok).unwrap_err();
            assert!(e.starts_with(field) && e.contains("expected"), "{setup}: {e}");
        }
    }

    /// A value the record does not hold is shown as the default it is compared at, and a field
    /// of another dataset than the run's as unused by it (a random run against a
    /// prefix_repetition one showed `random_input_len: A = 64, B = 1024`, B holding none).
    #[test]
    fn diff_shows_a_default_as_a_default_and_not_as_the_runs_value() {
        let rec = |w: Value| json!({"format": "servesim-run", "version": 1, "setup": {"engine": {"kind": "vllm"}, "workload": w}});
        let random = rec(json!({"dataset_name": "random", "random_input_len": 64}));
        let prefix = rec(json!({"dataset_name": "prefix_repetition", "prefix_repetition_prefix_len": 100}));
        let d = diff(&random, &prefix).unwrap();
        let get = |k: &str| d.iter().find(|(f, _, _)| f == k).cloned().unwrap_or_else(|| panic!("{k}: {d:?}"));
        let (_, a, b) = get("workload.random_input_len");
        assert_eq!(
            (a.as_str(), b.as_str()),
            ("64", "(not in the record: its dataset prefix_repetition does not use it)")
        );
        let (_, a, b) = get("workload.prefix_repetition_prefix_len");
        assert_eq!((a.as_str(), b.as_str()), ("(not in the record: its dataset random does not use it)", "100"));
        let d = diff(&rec(json!({})), &rec(json!({"random_input_len": 64}))).unwrap();
        assert_eq!(
            d,
            vec![("workload.random_input_len".into(), "1024 (not in the record: the default)".into(), "64".into())]
        );
    }
}
