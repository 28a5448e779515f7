//! Loading a scenario from disk: the file (or the built-in default), `--set`
//! overrides, the cards, the profile and the trace it names. Every error
//! names the file and the field.

use std::path::{Path, PathBuf};

use serde_json::Value;
use sim::config::{self, Resources, Scenario, SimSpec};
use sim::cost::CostCoefficients;
use sim::workload::TraceRow;

/// The built-in default scenario: the published RTX 5090 + Qwen2.5-7B +
/// vLLM 0.28 setup, the "why does TTFT explode" example.
pub const DEFAULT_SCENARIO_NAME: &str = "scenarios/rtx5090-qwen2.5-7b-vllm.json";
pub const DEFAULT_SCENARIO: &str = sim::builtin::DEFAULT_SCENARIO;

/// A scenario as read, before resolution.
#[derive(Clone, Debug)]
pub struct RawScenario {
    /// Where it came from, for error messages.
    pub origin: String,
    /// The folder relative paths inside it are resolved against.
    pub base_dir: PathBuf,
    pub json: Value,
}

/// Reads a scenario file, or the built-in default when `path` is None.
pub fn read_raw(path: Option<&Path>) -> Result<RawScenario, String> {
    let (origin, text, base_dir) = match path {
        None => (
            format!("{DEFAULT_SCENARIO_NAME} (built in)"),
            DEFAULT_SCENARIO.to_string(),
            std::env::current_dir().unwrap_or_default(),
        ),
        Some(p) => {
            let text = read_text(p)?;
            let base = p.parent().map(Path::to_path_buf).unwrap_or_default();
            (p.display().to_string(), text, base)
        }
    };
    let json: Value = serde_json::from_str(&text).map_err(|e| format!("{origin}: not valid JSON: {e}"))?;
    if !json.is_object() {
        return Err(format!("{origin}: expected a JSON object (a scenario)"));
    }
    config::no_duplicate_keys(&text).map_err(|e| format!("{origin}: {e}"))?;
    Ok(RawScenario { origin, base_dir, json })
}

pub use sim::config::{resizes_pool, LOGGED_POOL, PINNED_POOL};

/// Applies `--set` overrides (`config::apply_sets`: a memory fraction or an engine flag the pool
/// depends on moves a start-up log's pinned pool by what the derived pool moves; a model, GPU,
/// TP size or KV format drops it; vLLM's `num_gpu_blocks_override` holds; each said here) and
/// `--seed`.
pub fn apply_overrides(raw: &mut RawScenario, sets: &[String], seed: Option<u64>) -> Result<(), String> {
    for change in apply_overrides_quietly(raw, sets, seed)? {
        warn_once(change.message(&raw.origin));
    }
    Ok(())
}

/// [`apply_overrides`] without its warning: what became of the pins (`config::apply_sets`), for
/// a caller that says so itself (`tune`, once for its grid).
pub fn apply_overrides_quietly(
    raw: &mut RawScenario,
    sets: &[String],
    seed: Option<u64>,
) -> Result<Vec<config::PinChange>, String> {
    let path_of = |s: &String| config::set_path(s).to_string();
    if seed.is_some() && sets.iter().any(|s| path_of(s) == "workload.seed") {
        return Err("--seed and --set workload.seed both give the workload's seed: give one".into());
    }
    let changes = config::apply_sets(&mut raw.json, sets)?;
    if let Some(seed) = seed {
        config::apply_set(&mut raw.json, &format!("workload.seed={seed}")).map_err(|e| format!("--seed: {e}"))?;
    }
    Ok(changes)
}

pub(crate) fn resolve_path(base: &Path, p: &str) -> PathBuf {
    let pb = PathBuf::from(p);
    if pb.is_absolute() {
        return pb;
    }
    let rel = base.join(&pb);
    if rel.exists() {
        rel
    } else {
        pb
    }
}

/// Parses and resolves a raw scenario into a runnable spec.
pub fn resolve(raw: &RawScenario) -> Result<(Scenario, SimSpec), String> {
    let origin = &raw.origin;
    let mut scenario: Scenario = config::scenario_from_value(raw.json.clone()).map_err(|e| format!("{origin}: {e}"))?;
    let mut res = Resources { models: sim::builtin::models()?, gpus: sim::builtin::gpus()?, ..Default::default() };
    let mut fitted_on = None;
    if let Some(p) = scenario.cost.profile.clone() {
        let path = resolve_path(&raw.base_dir, &p);
        let (coefficients, prior, deployment) =
            load_profile(&path).map_err(|e| format!("{origin}: cost.profile: {e}"))?;
        // A profile's coefficients are the µs of the engine it was fitted on, at its time scale
        // (`engine.servesim_time_scale`, docs/calibration.md): the scenario runs at that scale.
        let k = deployment.servesim_time_scale.unwrap_or(1.0);
        match scenario.cost.time_scale {
            None if k != 1.0 => scenario.cost.time_scale = Some(k),
            Some(t) if (t / k - 1.0).abs() > 1e-9 => {
                return Err(format!(
                "{origin}: cost.time_scale: {t}, and cost.profile {} was fitted at time scale {k} (its coefficients \
                     are the µs of that engine): leave cost.time_scale out, or give {k}",
                path.display()
            ))
            }
            _ => {}
        }
        res.profile = Some(coefficients);
        res.profile_prior = prior;
        fitted_on = Some((path.clone(), deployment));
    }
    if let Some(t) = &scenario.workload.trace {
        let path = resolve_path(&raw.base_dir, t);
        let w = &scenario.workload;
        use sim::config::TraceFileFormat as F;
        match w.trace_format {
            Some(f @ (F::Mooncake | F::Azure | F::Burstgpt)) => {
                let reqs = load_production_trace(&path, f, w).map_err(|e| {
                    // A scaling error names its own field; a parse error the trace's line.
                    if e.starts_with("workload.") {
                        format!("{origin}: {e}")
                    } else {
                        format!("{origin}: workload.trace: {e}")
                    }
                })?;
                res.trace_requests = Some(std::sync::Arc::new(reqs));
            }
            _ => {
                let mut rows =
                    load_trace(&path, w.trace_format).map_err(|e| format!("{origin}: workload.trace: {e}"))?;
                // The first num_prompts rows are taken in the file's order: of a file not in
                // order of arrival, not the earliest ones (an audit, 2026-12-07: the same rows
                // shuffled ran at half the rate).
                if let Some(n) = w.num_prompts.filter(|&n| (n as usize) < rows.len()) {
                    if rows.windows(2).any(|p| p[1].arrival_time < p[0].arrival_time) {
                        warn_once(format!(
                            "{origin}: workload.trace: its rows are not in order of arrival_time, and \
                             workload.num_prompts {n} takes the first {n} rows of the file, not the {n} earliest; \
                             sort the file by arrival_time for the earliest"
                        ));
                    }
                }
                scale_rows(&mut rows, w.trace_time_scale, w.trace_rate, w.num_prompts)
                    .map_err(|e| format!("{origin}: workload.trace_rate: {e}"))?;
                res.trace = Some(rows);
            }
        }
    }
    let spec = config::resolve(&scenario, &res).map_err(|e| format!("{origin}: {e}"))?;
    // A fleet group that changes what the top level's pinned pool would be (as `--set` does).
    for change in spec.fleet.iter().flat_map(|f| &f.pin_changes) {
        warn_once(change.message(origin));
    }
    if let (Some((path, _)), Some(_)) = (&fitted_on, &res.profile_prior) {
        // The corrected composed cost against the card's roofline: what it takes per unit of
        // each term's work (`calib::profile::implied_per_unit_us`), below the floor only where
        // the correction takes the steps faster than the card can run them.
        // Judged against the uncorrected measured-kernel cost's own figure where that is under
        // the roofline (`calib::profile::roofline_bound`).
        for (name, floor) in ::calib::fit::roofline_floors(&spec) {
            let (bound, own) = ::calib::profile::roofline_bound(&spec.cost, name, floor);
            let what = match own {
                Some(own) => format!(
                    "the uncorrected measured-kernel cost's own ({own:.4e} µs, itself under the card's roofline floor of {floor:.4e} µs at the margin)"
                ),
                None => format!("the hardware card's roofline floor ({floor:.4e} µs)"),
            };
            if let Some(i) = ::calib::profile::implied_per_unit_us(&spec.cost, name).filter(|i| *i < bound) {
                warn_once(format!(
                    "{}: with its corrections the step cost takes {i:.4e} µs per unit of {name}'s work, below {what}: the predictions with it run faster than the card can; check the data it was fitted on (speculative decoding, a cached prompt) or the card",
                    path.display()
                ));
            }
        }
    }
    if let Some((path, d)) = &fitted_on {
        check_profile_deployment(&spec, d).map_err(|e| format!("{origin}: cost.profile: {}: {e}", path.display()))?;
        // A fleet's every replica group runs on the profile's step costs: each must be the
        // deployment it was fitted on (another GPU, TP size or engine kind is another machine).
        if let Some(f) = &spec.fleet {
            for r in &f.replicas {
                check_replica_deployment(&spec, r, d)
                    .map_err(|e| format!("{origin}: cost.profile: {}: replica {}: {e}", path.display(), r.name))?;
            }
        }
        if let Some(prior) = &res.profile_prior {
            let now = spec.cost.composed.as_ref().map(|c| c.source.as_str());
            let msg = match (&d.composed_cost_source, now) {
                (Some(then), Some(now)) if then != now => Some(format!(
                    "it corrects the step cost servesim composed when it was fitted ({then}), and servesim composes this setup's steps otherwise today ({now}): its corrections, applied to today's cost, may count that change twice; refit it (servesim calibrate) on its data"
                )),
                (Some(_), _) => None,
                // Profiles written before they recorded it (before 2026-12-05): a setup whose
                // decodes now run unpacked beside prefill chunks was timed otherwise then (or,
                // that day, against a linearisation that dropped the pairs' term); else their
                // prior still tells a changed table.
                (None, _) if spec.cost.composed.as_ref().is_some_and(|c| c.unpacks_mixed_decodes()) => Some(
                    "it does not record the step cost it corrected (profiles before 2026-12-05), and since then servesim times this setup's decodes beside a prefill chunk unpacked (vLLM's FlashAttention 2, docs/vllm.md): its corrections, applied to today's cost, may count that change twice; refit it (servesim calibrate) on its data"
                        .to_string(),
                ),
                (None, _) => stale_prior(&spec, prior),
            };
            if let Some(msg) = msg {
                warn_once(format!("{origin}: cost.profile: {}: {msg}", path.display()));
            }
        }
    }
    if let Some(b) = res.models.iter().find(|b| b.id == spec.model.id && **b != spec.model) {
        // An inline card under a built-in card's id and other figures is another model: what
        // names it (the report's header, the caveats on judged models) would say the built-in one.
        let differs: Vec<&str> = [
            ("num_parameters", b.num_parameters != spec.model.num_parameters),
            ("num_layers", b.num_layers != spec.model.num_layers),
            ("hidden_size", b.hidden_size != spec.model.hidden_size),
            ("num_kv_heads", b.num_kv_heads != spec.model.num_kv_heads),
            ("dtype", b.dtype != spec.model.dtype),
            ("quantization", b.quantization != spec.model.quantization),
        ]
        .into_iter()
        .filter_map(|(k, d)| d.then_some(k))
        .collect();
        warn_once(format!(
            "{origin}: model: an inline card with the id of the built-in card {:?} and other figures ({}): it is reported \
             under that id but is not that model; give it an id of its own",
            b.id,
            if differs.is_empty() { "its other fields".to_string() } else { differs.join(", ") }
        ));
    }
    if spec.model.architecture.is_none() {
        // A card without its architecture (an inline card written before the field, or by hand):
        // the engines' per-architecture rules then follow its name, which a fine-tune may not carry.
        let taken = config::vllm_architecture(&spec.model);
        let named = spec.model.hf_repo.as_deref().unwrap_or(&spec.model.id);
        let as_what = if taken.starts_with("other") {
            format!("another architecture than {}", config::KNOWN_ARCHITECTURES.join(", "))
        } else {
            taken.to_string()
        };
        warn_once(format!(
            "{origin}: model.architecture not given: {} is taken as {as_what} by its name ({named:?}); the engines \
             pick code paths by the checkpoint's architectures[0] (vLLM's V2 model runner by release, SGLang's Qwen3 \
             q/k norm): give it",
            spec.model.id
        ));
    }
    if let config::EngineSpec::Sglang(c) = &spec.engine {
        if let Some(given) = scenario.engine.sglang.page_size.filter(|&p| p != c.page_size) {
            warn_once(format!(
                "{origin}: engine.page_size {given} runs as {}: on this GPU (compute capability {}) SGLang {} runs \
                 the trtllm_mha attention backend (its default on the SM100 family from 0.5.7, or engine.attention_backend), \
                 which takes pages of 16, 32 or 64 tokens, and changes any other size to 64 (\"changing page_size from \
                 {given} to 64\", docs/sglang.md section 5)",
                c.page_size,
                spec.gpu.compute_capability.as_deref().unwrap_or("?"),
                c.version
            ));
        }
        if !c.behaviour.retract_until_decode_fits && c.page_size > 20 {
            warn_once(format!(
                "{origin}: engine.page_size {}: SGLang {} retracts until 20 tokens per running request are free, \
                 which does not cover a page each; under KV pressure its next decode step can fail to allocate and the \
                 server stops (\"Decode out of memory\"; fixed in later releases, docs/sglang.md §4). A run that reaches \
                 it stops with that engine error",
                c.page_size, c.version
            ));
        }
    }
    let prioritised = res.trace.as_ref().is_some_and(|rows| rows.iter().any(|r| r.priority.is_some_and(|p| p != 0)));
    let priority_policy = match &spec.engine {
        config::EngineSpec::Vllm(c) => c.policy == sim::engine::vllm::Policy::Priority,
        config::EngineSpec::Sglang(_) => false,
    };
    if prioritised && !priority_policy {
        warn_once(format!(
            "{origin}: workload.trace: its priority column has no effect under this engine's scheduling policy: \
             vLLM orders by priority only under engine.policy \"priority\" (--scheduling-policy priority; vLLM's \
             V0 engine refused such requests otherwise), and servesim's SGLang does not read it"
        ));
    }
    if scenario.workload.trace.is_some() && scenario.workload.request_rate.is_some_and(|r| r.0.is_some()) {
        warn_once(format!(
            "{origin}: workload.request_rate (--request-rate) is ignored: the trace's arrival times say when requests \
             are sent; to replay them at another mean rate, set workload.trace_rate (as plan's --request-rate does)"
        ));
    }
    warn_burstiness_without_rate(origin, &scenario.workload);
    for msg in config::flags_without_effect(&scenario, &spec) {
        warn_once(format!("{origin}: {msg}"));
    }
    Ok((scenario, spec))
}

/// As in `vllm bench serve`, the burstiness shapes the gaps of a finite rate only; with none
/// (inf, or not given) every request is sent at once (or as the concurrency cap frees a slot):
/// said where given. (A trace refuses the field outright: its own arrivals.) The live commands
/// call it on the section their flags made.
pub fn warn_burstiness_without_rate(origin: &str, w: &config::WorkloadSection) {
    if let Some(b) = w.burstiness.filter(|&b| b != 1.0) {
        if w.trace.is_none() && !w.request_rate.is_some_and(|r| r.0.is_some()) {
            warn_once(format!(
                "{origin}: workload.burstiness {b} has no effect: the request rate is infinite, so every request is \
                 sent at once (up to the concurrency cap), as vllm bench serve sends them; give a finite \
                 request_rate (--request-rate) for the burstiness to shape the gaps"
            ));
        }
    }
}

/// Whether a profile that corrects the composed cost was fitted against the cost servesim
/// composes today: its `prior` is the composed cost linearised when it was fitted
/// (`calib::identify::linear_prior`), and a correction scales today's cost by the fit's move
/// from that prior. Where servesim has since changed how it times these steps (a kernel rule,
/// a table), the profile's move may already hold what the new cost adds, and count it twice.
/// A step coefficient more than 2% from today's linearisation says so.
fn stale_prior(spec: &SimSpec, prior: &CostCoefficients) -> Option<String> {
    spec.cost.composed.as_ref()?;
    let now = calib::identify::linear_prior(&spec.cost).coefficients();
    let moved: Vec<String> = ["step_us", "prefill_token_us", "decode_token_us", "prefill_attention_us", "decode_kv_us"]
        .iter()
        .filter_map(|n| {
            let (p, x) = (prior.get(n)?, now.get(n)?);
            let off = if p > 0.0 && x > 0.0 {
                (x / p - 1.0).abs()
            } else if p == x {
                0.0
            } else {
                f64::INFINITY
            };
            (off > 0.02).then(|| format!("{n} {p:.4} µs in the profile's prior, {x:.4} from today's"))
        })
        .collect();
    (!moved.is_empty()).then(|| {
        format!(
            "its prior (the step cost its fit started from) is not the step cost servesim composes for this setup today ({}; cost source: {}): servesim has changed how it times these steps since the fit, and the profile's corrections, applied to today's cost, may count that change twice; refit it (servesim calibrate) on its data",
            moved.join("; "),
            spec.cost.source()
        )
    })
}

/// Prints a warning on stderr once per process (a sweep resolves a scenario per point).
pub fn warn_once(msg: String) {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if !seen.contains(&msg) {
        eprintln!("warning: {msg}");
        seen.push(msg);
    }
}

/// A profile's coefficients, its `prior` (the coefficients its fit started from) when it
/// corrects the composed cost (`cost_mode: corrects_composed`), and what it was fitted on
/// ([`ProfileDeployment`]).
pub fn load_profile(path: &Path) -> Result<(CostCoefficients, Option<CostCoefficients>, ProfileDeployment), String> {
    let text = read_text(path)?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: not valid JSON: {e}", path.display()))?;
    config::no_duplicate_keys(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    // What `calibrate` writes says what it is: another file (or a later format) is not read as one.
    use ::calib::profile::{PROFILE_FORMAT, PROFILE_VERSION};
    match v.get("format") {
        None | Some(Value::Null) => {}
        Some(Value::String(f)) if f == PROFILE_FORMAT => {}
        Some(other) => {
            return Err(format!("{}: format: expected {PROFILE_FORMAT:?}, got {other}", path.display()));
        }
    }
    match v.get("version") {
        None | Some(Value::Null) => {}
        Some(n) if n.as_u64() == Some(u64::from(PROFILE_VERSION)) => {}
        Some(other) => {
            return Err(format!(
                "{}: version: this servesim reads profile format {PROFILE_VERSION}, the file says {other}",
                path.display()
            ));
        }
    }
    let co = v.get("coefficients").cloned().ok_or_else(|| format!("{}: no \"coefficients\" object", path.display()))?;
    // `calibrate` writes every coefficient (the unfitted ones at their prior) in `coefficients`
    // and, correcting the composed cost, in `prior`: in a file that says it is its profile, one
    // missing or null was edited out, and the run took the scenario's own value in its place
    // under the profile's name.
    let complete = |section: &str| -> Result<(), String> {
        if v.get("format").and_then(Value::as_str) != Some(PROFILE_FORMAT) {
            return Ok(());
        }
        let Some(obj) = v.get(section).and_then(Value::as_object) else { return Ok(()) };
        for name in sim::cost::COEFFICIENT_NAMES {
            if obj.get(name).is_none_or(Value::is_null) {
                return Err(format!(
                    "{}: {section}.{name}: missing; calibrate writes all of {} (those it did not fit at their prior): the file was edited or cut short",
                    path.display(),
                    sim::cost::COEFFICIENT_NAMES.join(", ")
                ));
            }
        }
        Ok(())
    };
    let coefficients: CostCoefficients =
        config::from_value(co, "coefficients").map_err(|e| format!("{}: {e}", path.display()))?;
    // A profile that sets no coefficient changes nothing, yet the run would say it was timed
    // "by a fitted profile".
    if sim::cost::COEFFICIENT_NAMES.iter().all(|n| coefficients.get(n).is_none()) {
        return Err(format!(
            "{}: coefficients: sets none of {}: not a fitted profile",
            path.display(),
            sim::cost::COEFFICIENT_NAMES.join(", ")
        ));
    }
    complete("coefficients")?;
    // Each coefficient in its range first: a negative or huge one was reported as an edited prior
    // by the ratio check below (printed to 300 digits).
    config::check_coefficients(&coefficients, "coefficients").map_err(|e| format!("{}: {e}", path.display()))?;
    // A fit's 90% interval holds its own estimate (`calib::uncertainty::ProfileUncertainty`):
    // a coefficient outside it was edited after the fit (×3 on step_us ran with its old
    // interval, a band lopsided round the new value: TPOT 32.33 in 10.99–39.79; an audit,
    // 2026-12-07), and every interval drawn from the block is about another profile.
    let u = ::calib::uncertainty::ProfileUncertainty::from_profile_json(&v)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(u) = &u {
        u.holds(&coefficients).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    // What the profile says it was fitted on: an `engine` that is there must be an object (any
    // other value read as a profile that says nothing, and skipped the deployment checks).
    if let Some(e) = v.get("engine").filter(|e| !e.is_null() && !e.is_object()) {
        return Err(format!(
            "{}: engine: expected an object ({{\"kind\", \"version\", ...}}: what the profile was fitted on), got {e}",
            path.display()
        ));
    }
    if let Some(c) = v.get("composed_cost_source").filter(|c| !c.is_null() && !c.is_string()) {
        return Err(format!(
            "{}: composed_cost_source: expected a string (the cost_source of the composed cost the fit corrected), got {c}",
            path.display()
        ));
    }
    // Only a profile that corrects the composed cost is applied relative to its prior. Its mode
    // is `corrects_composed` or `linear` (older profiles say none: linear); a misspelt mode, or
    // a corrects_composed profile without its prior, ran the linear model in its place.
    let corrects = match v.get("cost_mode") {
        None | Some(Value::Null) => false,
        Some(Value::String(m)) if m == "corrects_composed" => true,
        Some(Value::String(m)) if m == "linear" => false,
        Some(other) => {
            return Err(format!(
                "{}: cost_mode: expected \"corrects_composed\" or \"linear\", got {other}",
                path.display()
            ))
        }
    };
    // A profile fitted as a correction of the composed cost names the composed cost it
    // corrected; one that says `linear` beside that name was edited, and would run its
    // coefficients as the linear model's, moving every prediction with no word.
    if !corrects {
        if let Some(c) = v.get("composed_cost_source").and_then(|c| c.as_str()) {
            return Err(format!(
                "{}: cost_mode: {} beside a composed_cost_source ({c}): the profile was fitted as a correction of that \
                 composed cost (cost_mode \"corrects_composed\"), and its coefficients mean something else in the \
                 linear model; refit rather than edit the mode",
                path.display(),
                v.get("cost_mode").map(|m| m.to_string()).unwrap_or_else(|| "not given (linear)".into())
            ));
        }
    }
    let prior: Option<CostCoefficients> = match v.get("prior") {
        Some(p) if corrects && !p.is_null() => {
            complete("prior")?;
            Some(config::from_value(p.clone(), "prior").map_err(|e| format!("{}: {e}", path.display()))?)
        }
        _ if corrects => {
            return Err(format!(
                "{}: prior: missing, and cost_mode is \"corrects_composed\": the profile corrects the composed cost by its change from the prior its fit started from, which it must give",
                path.display()
            ))
        }
        _ => None,
    };
    if let Some(p) = &prior {
        // The prior is the reference each step part is scaled against (coefficient ÷ prior):
        // a value no fit starts from (negative, zero under a fitted term, or a thousand times
        // away from it) would scale every step by nonsense.
        config::check_coefficients(p, "prior").map_err(|e| format!("{}: {e}", path.display()))?;
        let c: &CostCoefficients = &coefficients;
        for name in &sim::cost::COEFFICIENT_NAMES[..6] {
            if let (Some(k), Some(r)) = (c.get(name), p.get(name)) {
                let ratio = if r > 0.0 {
                    k / r
                } else if k > 0.0 {
                    f64::INFINITY
                } else {
                    1.0
                };
                if !(1e-3..=1e3).contains(&ratio) {
                    return Err(format!(
                        "{}: prior.{name}: {r} against the fitted {k}: a fit moves a coefficient by a factor, never by more than a thousand; the profile's prior was edited, or comes from another profile",
                        path.display()
                    ));
                }
            }
        }
    }
    // A fit whose values lie further off than its own noise allows (`calibrate` said so when it
    // wrote the profile, `fit.misfit`) is said again wherever the profile is used.
    if let Some(m) = v.get("fit").and_then(|f| f.get("misfit")).filter(|m| !m.is_null()) {
        let m: Vec<::calib::profile::Misfit> =
            config::from_value(m.clone(), "fit.misfit").map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(w) = crate::calib::misfit_warning(&m) {
            warn_once(format!("{}: {w}", path.display()));
        }
    }
    // A fit that implies more than the card's peak (`calibrate` said so when it wrote the
    // profile) is said again wherever the profile is used (µs to four significant figures: a
    // per-pair attention term is thousandths of one).
    let us = |x: f64| if x != 0.0 && x.abs() < 1.0 { format!("{x:.4e}") } else { format!("{x:.1}") };
    // A profile correcting the composed cost is judged on the corrected cost once the scenario's
    // is built (`resolve`): its coefficients are references of ratios, not times.
    for r in v.get("roofline_check").and_then(Value::as_array).into_iter().flatten().filter(|_| !corrects) {
        if r.get("beats_physics").and_then(Value::as_bool) == Some(true) {
            warn_once(format!(
                "{}: its fitted {} ({} µs) beats the hardware card's roofline floor ({} µs): the predictions with it run faster than the card can; check the data it was fitted on (speculative decoding, a cached prompt) or the card",
                path.display(),
                r.get("coefficient").and_then(Value::as_str).unwrap_or("?"),
                r.get("fitted_us").and_then(Value::as_f64).map_or("?".into(), us),
                r.get("roofline_floor_us").and_then(Value::as_f64).map_or("?".into(), us),
            ));
        }
    }
    Ok((coefficients, prior, ProfileDeployment::of(&v, path)?))
}

/// What a profile says it was fitted on (its `engine` object): the engine kind and release,
/// the model as the engine named it, and (profiles from 2026-12-03 on) the model card, the GPU
/// card and the TP size; with its `source` (`live` or `results`).
#[derive(Clone, Debug, Default)]
pub struct ProfileDeployment {
    pub source: Option<String>,
    pub kind: Option<String>,
    pub version: Option<String>,
    pub model: Option<String>,
    pub model_card: Option<String>,
    pub gpu: Option<String>,
    pub tensor_parallel_size: Option<u32>,
    /// The KV dtype, the linear layers' bytes per weight, CUDA graphs (profiles from
    /// 2026-12-06 on).
    pub kv_cache_dtype: Option<String>,
    pub linear_weight_bytes: Option<u32>,
    pub cuda_graphs: Option<bool>,
    /// Fitted against `servesim serve --time-scale k`, k ≠ 1.
    pub servesim_time_scale: Option<f64>,
    /// The composed cost a `corrects_composed` profile corrected (profiles from 2026-12-05 on).
    pub composed_cost_source: Option<String>,
    /// The profile corrects the composed cost (`cost_mode: corrects_composed`).
    pub corrects: bool,
}

impl ProfileDeployment {
    /// From a profile's JSON (`path` names it in errors). A key that is there must have its
    /// type: a wrong one (`engine.kind: 1`, `engine.tensor_parallel_size: "2"`) was read as
    /// absent, and the profile then skipped the check that key makes (applied to another engine,
    /// GPU or TP size, or at time scale 1) or was warned about as a profile too old to have it
    /// (an audit, 2026-12-07). `null` reads as absent, as `calibrate` writes an unknown
    /// `version` or served `model`. `engine.kind` and the `engine.model` key are in every profile
    /// `calibrate` has written (`engine.model` null where a live server named none): a profile
    /// that has neither `engine.model` nor `engine.model_card` was edited and names no model, so
    /// it is refused rather than applied to any model unchecked.
    fn of(v: &Value, path: &Path) -> Result<ProfileDeployment, String> {
        let p = path.display();
        let null = Value::Null;
        let e = v.get("engine").unwrap_or(&null);
        let at = |o: &Value, k: &str| o.get(k).filter(|x| !x.is_null()).cloned();
        let string = |o: &Value, field: &str, k: &str, what: &str| -> Result<Option<String>, String> {
            match at(o, k) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s)),
                Some(other) => Err(format!("{p}: {field}: expected a string ({what}), got {other}")),
            }
        };
        let count = |k: &str, what: &str| -> Result<Option<u32>, String> {
            match at(e, k) {
                None => Ok(None),
                Some(x) => x
                    .as_u64()
                    .filter(|n| *n >= 1 && *n <= u64::from(u32::MAX))
                    .map(|n| Some(n as u32))
                    .ok_or_else(|| format!("{p}: engine.{k}: expected a whole number ≥ 1 ({what}), got {x}")),
            }
        };
        let kind = string(e, "engine.kind", "kind", "the engine kind, \"vllm\" or \"sglang\"")?;
        if let Some(k) = kind.as_deref().filter(|k| !["vllm", "sglang"].contains(k)) {
            return Err(format!("{p}: engine.kind: expected \"vllm\" or \"sglang\", got {k:?}"));
        }
        let model_card = string(
            e,
            "engine.model_card",
            "model_card",
            "the model card the profile was fitted with, such as \"qwen2.5-7b-instruct\"",
        )?;
        let model = string(e, "engine.model", "model", "the model as the engine served it, or from results the card")?;
        if e.is_object() {
            if kind.is_none() {
                return Err(format!(
                    "{p}: engine.kind: missing; every profile calibrate writes says the engine it was fitted on (\"vllm\" or \"sglang\"): the file was edited"
                ));
            }
            if model_card.is_none() && e.get("model").is_none() {
                return Err(format!(
                    "{p}: engine.model: missing, and no engine.model_card: the profile names no model it was fitted on, which every profile calibrate writes does (engine.model since the first, engine.model_card from 2026-12-03): the file was edited; give the card (engine.model_card) or calibrate again"
                ));
            }
        }
        let cuda_graphs = match at(e, "cuda_graphs") {
            None => None,
            Some(Value::Bool(b)) => Some(b),
            Some(other) => {
                return Err(format!(
                    "{p}: engine.cuda_graphs: expected true or false (whether CUDA graphs ran), got {other}"
                ))
            }
        };
        let servesim_time_scale = match at(e, "servesim_time_scale") {
            None => None,
            Some(x) => Some(x.as_f64().filter(|k| k.is_finite() && *k > 0.0).ok_or_else(|| {
                format!(
                    "{p}: engine.servesim_time_scale: expected a finite number > 0 (the --time-scale of the servesim serve it was fitted against), got {x}"
                )
            })?),
        };
        Ok(ProfileDeployment {
            source: string(v, "source", "source", "\"live\" or \"results\"")?,
            kind,
            version: string(e, "engine.version", "version", "the engine's release, such as \"0.28.0\"")?,
            model,
            model_card,
            gpu: string(e, "engine.gpu", "gpu", "the GPU card the profile was fitted on, such as \"rtx-5090\"")?,
            tensor_parallel_size: count("tensor_parallel_size", "the TP size the profile was fitted at")?,
            kv_cache_dtype: string(
                e,
                "engine.kv_cache_dtype",
                "kv_cache_dtype",
                "the KV cache's element type, such as \"bfloat16\"",
            )?,
            linear_weight_bytes: count("linear_weight_bytes", "the linear layers' bytes per weight")?,
            cuda_graphs,
            servesim_time_scale: servesim_time_scale.filter(|k| *k != 1.0),
            composed_cost_source: string(
                v,
                "composed_cost_source",
                "composed_cost_source",
                "the cost_source of the composed cost the fit corrected",
            )?,
            corrects: v["cost_mode"].as_str() == Some("corrects_composed"),
        })
    }
}

/// The profile's deployment against one engine's: an error listing what differs.
fn deployment_differs(
    d: &ProfileDeployment,
    kind: &str,
    model: &str,
    gpu: &str,
    dep: &sim::config::Deployment,
) -> Result<(), String> {
    let tp = dep.tensor_parallel_size;
    let card = d.model_card.clone().or_else(|| d.model.clone().filter(|_| d.source.as_deref() == Some("results")));
    let mut differ = Vec::new();
    if d.kind.as_deref().is_some_and(|k| k != kind) {
        differ.push(format!("engine {} (this scenario: {kind})", d.kind.as_deref().unwrap_or("")));
    }
    if let Some(c) = card.filter(|c| *c != model) {
        differ.push(format!("model {c} (this scenario: {model})"));
    }
    if let Some(g) = d.gpu.as_ref().filter(|g| **g != gpu) {
        differ.push(format!("GPU {g} (this scenario: {gpu})"));
    }
    if let Some(t) = d.tensor_parallel_size.filter(|t| *t != tp) {
        differ.push(format!("tensor parallel size {t} (this scenario: {tp})"));
    }
    // The formats the steps run in: a linear profile's coefficients are that format's times
    // (another is another deployment); a profile correcting the composed cost scales the
    // composed cost of this scenario's format by what it fitted on its own (an extrapolation:
    // said, and run).
    let mut formats = Vec::new();
    if let Some(k) = d.kv_cache_dtype.as_ref().filter(|k| **k != dep.kv_cache_dtype) {
        formats.push(format!("KV cache dtype {k} (this scenario: {})", dep.kv_cache_dtype));
    }
    if let Some(b) = d.linear_weight_bytes.filter(|b| *b != dep.linear_weight_bytes) {
        formats.push(format!(
            "{b}-byte linear weights (this scenario: {}-byte{})",
            dep.linear_weight_bytes,
            dep.quantization.as_deref().map_or(String::new(), |q| format!(", {q}"))
        ));
    }
    if let Some(g) = d.cuda_graphs.filter(|g| *g != dep.cuda_graphs) {
        let on = |g: bool| if g { "on" } else { "off" };
        formats.push(format!("CUDA graphs {} (this scenario: {})", on(g), on(dep.cuda_graphs)));
    }
    if d.corrects && !formats.is_empty() {
        warn_once(format!(
            "cost.profile was fitted with {}: its corrections are applied to the composed step cost of this scenario's format, an extrapolation no data judged; calibrate this format to have it fitted",
            formats.join(", ")
        ));
    } else {
        differ.extend(formats);
    }
    if differ.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "fitted on {}: its coefficients are that deployment's step costs, not this one's. Calibrate this \
             deployment, or run without the profile",
            differ.join(", ")
        ))
    }
}

/// [`check_profile_deployment`]'s errors for one replica of a fleet (its engine kind, GPU card
/// and TP size; the model is the fleet's). A profile that does not say its GPU or TP size is
/// checked against the fleet's first replica's (what the warning names): a replica on another
/// GPU or TP size than that is another machine all the same.
pub fn check_replica_deployment(
    spec: &SimSpec,
    r: &sim::config::ReplicaSpec,
    d: &ProfileDeployment,
) -> Result<(), String> {
    let mut fitted = d.clone();
    fitted.gpu.get_or_insert_with(|| spec.gpu.id.clone());
    fitted.tensor_parallel_size.get_or_insert(spec.deployment.tensor_parallel_size);
    fitted.kind.get_or_insert_with(|| spec.engine.kind().to_string());
    deployment_differs(&fitted, r.engine.kind(), &spec.model.id, &r.gpu, &r.deployment)?;
    // Another release of the same engine in this group (the fleet's first group was warned
    // about with the scenario's engine).
    let version = r.engine.version().to_string();
    if let Some(v) = d.version.as_ref().filter(|v| **v != version && r.engine.version() != spec.engine.version()) {
        warn_once(format!(
            "cost.profile was fitted on {kind} {v}; the fleet's replica group fleet.replicas[{}] models {kind} {version}: the fitted per-step and per-request CPU costs may differ between releases",
            r.group,
            kind = r.engine.kind()
        ));
    }
    Ok(())
}

/// A profile's coefficients hold for the deployment they were fitted on: the same engine, model
/// card, GPU and TP size. Another deployment is an error (its step costs are another
/// machine's); another release of the same engine is a warning (a what-if across releases keeps
/// the hardware's costs but not the engine's own). A key the profile lacks is not checked (the
/// model of a live profile is the served name, not a card; older profiles have no GPU).
pub fn check_profile_deployment(spec: &SimSpec, d: &ProfileDeployment) -> Result<(), String> {
    let kind = spec.engine.kind();
    deployment_differs(d, kind, &spec.model.id, &spec.gpu.id, &spec.deployment)?;
    // A live profile that does not name its card names the model as it was served: one that is
    // neither this card's id nor its Hugging Face repository is most likely another model.
    if d.model_card.is_none() && d.source.as_deref() != Some("results") {
        if let Some(served) = d.model.as_deref() {
            if !spec.model.is_served_as(served) {
                warn_once(format!(
                    "cost.profile was fitted on a model served as {served:?} and does not name its card; this scenario's \
                     model is {}: its step costs are applied as if they were this model's; calibrate this model to \
                     have it checked",
                    spec.model.id
                ));
            }
        }
    }
    // An older profile that does not say its GPU (or TP size) cannot be checked there: said,
    // not applied as if it had been fitted here.
    let unsaid: Vec<(&str, &str)> = [
        ("GPU", "engine.gpu", d.gpu.is_none()),
        ("tensor parallel size", "engine.tensor_parallel_size", d.tensor_parallel_size.is_none()),
    ]
    .into_iter()
    .filter_map(|(w, field, missing)| missing.then_some((w, field)))
    .collect();
    if !unsaid.is_empty() {
        warn_once(format!(
            "cost.profile does not say its {} ({} missing: a profile from before 2026-12-03): it is applied to this scenario's {} at TP {} as if fitted there; calibrate again to have it checked",
            unsaid.iter().map(|u| u.0).collect::<Vec<_>>().join(" or "),
            unsaid.iter().map(|u| u.1).collect::<Vec<_>>().join(", "),
            spec.gpu.id,
            spec.deployment.tensor_parallel_size
        ));
    }
    // Nor its model: no card (before 2026-12-03), and a live server that named none.
    if d.model_card.is_none() && d.model.is_none() {
        warn_once(format!(
            "cost.profile does not say its model (engine.model_card missing: a profile from before 2026-12-03; engine.model null: the server named none): it is applied to this scenario's {} as if fitted on it; calibrate again to have it checked",
            spec.model.id
        ));
    }
    if let Some(k) = d.servesim_time_scale {
        warn_once(format!(
            "cost.profile was fitted against servesim serve at --time-scale {k}: its step costs are those of an engine {k}x faster than the {} it names, and so are this run's predictions; calibrate at --time-scale 1 (or against the engine itself) for that GPU's",
            d.gpu.as_deref().unwrap_or("GPU")
        ));
    }
    let version = spec.engine.version().to_string();
    if let Some(v) = d.version.as_ref().filter(|v| **v != version) {
        warn_once(format!(
            "cost.profile was fitted on {kind} {v}; this scenario models {kind} {version}: the fitted per-step \
             and per-request CPU costs may differ between releases"
        ));
    }
    Ok(())
}

/// Reads a trace in CSV (a header naming `arrival_time,input_len,output_len`
/// and optionally `prefix_group,prefix_len,priority`) or JSONL (one object
/// per line with the same keys): as `format` says (`workload.trace_format` `csv` or `jsonl`),
/// else by the file's extension (`.jsonl`, `.json`) or a first `{`.
pub fn load_trace(path: &Path, format: Option<config::TraceFileFormat>) -> Result<Vec<TraceRow>, String> {
    // Without a byte-order mark (a JSONL trace so saved read "not valid JSON" at line 1; the CSV
    // reader skipped it already).
    let text = read_text(path)?;
    let name = path.display().to_string();
    let is_jsonl = match format {
        Some(config::TraceFileFormat::Jsonl) => true,
        Some(config::TraceFileFormat::Csv) => false,
        _ => path.extension().is_some_and(|e| e == "jsonl" || e == "json") || text.trim_start().starts_with('{'),
    };
    if is_jsonl {
        let mut rows = Vec::new();
        for (i, l) in text.lines().enumerate() {
            if l.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(l).map_err(|e| format!("{name}:{}: not valid JSON: {e}", i + 1))?;
            config::no_duplicate_keys(l).map_err(|e| format!("{name}:{}: {e}", i + 1))?;
            // A row is an object of named fields: an array was read by position (`[1, 2, 3]` as
            // arrival 1 s, 2 prompt tokens, 3 output tokens).
            if !v.is_object() {
                return Err(format!(
                    "{name}:{}: expected an object (\"arrival_time\", \"input_len\", \"output_len\", ...), got {v}",
                    i + 1
                ));
            }
            let row = config::from_value::<TraceRow>(v, "").map_err(|e| format!("{name}:{}: {e}", i + 1))?;
            check_row(&row, &name, i)?;
            rows.push(row);
        }
        return Ok(rows);
    }
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'));
    let (_, head) = lines.next().ok_or_else(|| format!("{name}: empty file"))?;
    // A spreadsheet's byte-order mark is not part of the first column's name.
    // A spreadsheet may quote every field (RFC 4180): `"arrival_time"` names arrival_time.
    let unquote = |c: &str| {
        let c = c.trim();
        c.strip_prefix('"').and_then(|x| x.strip_suffix('"')).unwrap_or(c).trim().to_string()
    };
    let cols: Vec<String> = head.trim_start_matches('\u{feff}').split(',').map(unquote).collect();
    let known = ["arrival_time", "input_len", "output_len", "prefix_group", "prefix_len", "priority"];
    for (k, c) in cols.iter().enumerate() {
        if !known.contains(&c.as_str()) {
            return Err(format!("{name}:1: unknown column {c:?}; expected {}", known.join(", ")));
        }
        // Which of two same-named columns holds the values would be a guess.
        if cols[..k].contains(c) {
            return Err(format!("{name}:1: column {c:?} is named twice"));
        }
    }
    for req in &known[..3] {
        if !cols.iter().any(|c| c == req) {
            return Err(format!("{name}:1: missing column {req:?}"));
        }
    }
    let mut rows = Vec::new();
    for (i, l) in lines {
        let cells: Vec<String> = l.split(',').map(unquote).collect();
        if cells.len() != cols.len() {
            return Err(format!("{name}:{}: {} cells, the header has {}", i + 1, cells.len(), cols.len()));
        }
        let mut obj = serde_json::Map::new();
        for (c, cell) in cols.iter().zip(&cells) {
            if cell.is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(cell)
                .map_err(|_| format!("{name}:{}: column {c}: expected a number, got {cell:?}", i + 1))?;
            obj.insert(c.clone(), v);
        }
        let row =
            config::from_value::<TraceRow>(Value::Object(obj), "").map_err(|e| format!("{name}:{}: {e}", i + 1))?;
        check_row(&row, &name, i)?;
        rows.push(row);
    }
    Ok(rows)
}

/// A trace row's own values (`TraceRow::check`), named by the file and line (0-based `i`) they
/// are on; the scenario's checks name a row by its index.
fn check_row(r: &TraceRow, name: &str, i: usize) -> Result<(), String> {
    r.check().map_err(|(f, m)| {
        if f.is_empty() {
            format!("{name}:{}: {m}", i + 1)
        } else {
            format!("{name}:{}: {f}: {m}", i + 1)
        }
    })
}

/// Reads a production trace (Mooncake JSONL, Azure or BurstGPT CSV) as requests, keyed by
/// `seed` (so that two seeds share no prompt by accident), time- or rate-scaled.
pub fn load_production_trace(
    path: &Path,
    format: sim::config::TraceFileFormat,
    w: &sim::config::WorkloadSection,
) -> Result<Vec<sim::traces::TraceRequest>, String> {
    let (seed, time_scale, rate, num_prompts) = (w.seed.unwrap_or(0), w.trace_time_scale, w.trace_rate, w.num_prompts);
    use sim::config::TraceFileFormat as F;
    use sim::traces::TraceFormat;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let f = match format {
        F::Mooncake => TraceFormat::Mooncake,
        F::Azure => TraceFormat::Azure,
        F::Burstgpt => TraceFormat::Burstgpt,
        F::Csv | F::Jsonl => unreachable!("servesim's own rows are read by load_trace"),
    };
    let salt = splitmix64(seed ^ 0x7472_6163_6573_616c);
    let at = |e: sim::traces::TraceError| format!("{}: {e}", path.display());
    // The rows the replay changes are said (they were changed unsaid): a Mooncake row whose
    // hash_ids name more 512-token blocks than its input_length holds is cut to input_length
    // (the length the trace measured), and BurstGPT's failed requests (no response tokens)
    // are left out, as they generated nothing.
    let mut reqs = match f {
        TraceFormat::Mooncake => {
            let rows = sim::traces::parse_mooncake(&text).map_err(at)?;
            let block = sim::traces::MOONCAKE_BLOCK_TOKENS;
            let cut =
                rows.iter().filter(|r| r.hash_ids.len() as u64 > u64::from(r.input_length.div_ceil(block))).count();
            if cut > 0 {
                warn_once(format!(
                    "{}: {cut} of {} rows name more hash_ids ({block}-token blocks) than their input_length holds: \
                     each prompt is cut to its input_length, its last blocks left out",
                    path.display(),
                    rows.len()
                ));
            }
            sim::traces::mooncake_requests(&rows, salt)
        }
        TraceFormat::Burstgpt => {
            let rows = sim::traces::parse_burstgpt(&text).map_err(at)?;
            let failed = rows.iter().filter(|r| r.is_failure()).count();
            if failed > 0 {
                warn_once(format!(
                    "{}: {failed} of {} rows are failed requests (no response tokens) and are left out, as they \
                     generated nothing (data/traces/README.md)",
                    path.display(),
                    rows.len()
                ));
            }
            sim::traces::burstgpt_requests(&rows, salt)
        }
        TraceFormat::Azure => sim::traces::parse_requests(f, &text, salt).map_err(at)?,
    };
    if let Some(k) = time_scale {
        sim::traces::time_scale(&mut reqs, k).map_err(|e| format!("workload.trace_time_scale: {e}"))?;
    }
    if let Some(r) = rate {
        // Over the requests the run replays (num_prompts takes the first rows).
        let kept = num_prompts.map_or(reqs.len(), |n| n as usize);
        sim::traces::rate_scale_over(&mut reqs, r, kept).map_err(|e| format!("workload.trace_rate: {e}"))?;
    }
    Ok(reqs)
}

/// `trace_time_scale` / `trace_rate` on servesim's own rows (arrival times in seconds).
fn scale_rows(
    rows: &mut [TraceRow],
    time_scale: Option<f64>,
    rate: Option<f64>,
    num_prompts: Option<u32>,
) -> Result<(), String> {
    let factor = match (time_scale, rate) {
        (Some(k), _) => k,
        (None, Some(r)) => {
            // The rate of the rows the run replays (num_prompts takes the first rows), not the file's.
            let kept = &rows[..num_prompts.map_or(rows.len(), |n| (n as usize).min(rows.len()))];
            let first = kept.iter().map(|x| x.arrival_time).fold(f64::INFINITY, f64::min);
            let last = kept.iter().map(|x| x.arrival_time).fold(f64::NEG_INFINITY, f64::max);
            if kept.len() < 2 || last <= first {
                return Err("rate scaling needs at least two replayed rows at different times".into());
            }
            ((kept.len() - 1) as f64 / (last - first)) / r
        }
        (None, None) => return Ok(()),
    };
    let t0 = rows.iter().map(|x| x.arrival_time).fold(f64::INFINITY, f64::min);
    for x in rows.iter_mut() {
        x.arrival_time = t0 + (x.arrival_time - t0) * factor;
    }
    Ok(())
}

/// SplitMix64's finaliser: the trace's key salt from the seed.
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A JSON file's text, without the UTF-8 byte-order mark an editor may put first (a scenario so
/// saved read "not valid JSON: expected value at line 1 column 1"; traces already skip it).
pub(crate) fn read_text(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_string(),
        None => text,
    })
}
