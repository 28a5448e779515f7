//! `servesim calibrate` and `servesim check`: flags, files, progress and
//! rendering. The procedures themselves (probe plan, seed spaces, fit,
//! verdict) are `calib::procedure`; the live measurements `live::measure`.

use clap::builder::TypedValueParser as _;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use calib::check::CHECK_METRICS;
use calib::derive::{DeriveOptions, ModelChoice};
use calib::fit::FitPoint;
use calib::procedure::{self, CalibrateOptions, CheckOptions};
use calib::profile::ProfileFile;
use calib::{CheckReport, Profile, ServerInfo};
use clap::Args;
use live::measure::{LiveMeasure, Progress};
use serde_json::{json, Value};
use sim::config::{EngineKind, SimSpec};
use sim::report::{Metric, Metrics, PointReport};

use crate::live::{self as livecli, ServerArgs, WorkloadArgs};
use crate::load::{self, RawScenario};

/// How to describe the live server as a scenario.
#[derive(Args, Debug, Clone)]
pub struct DeriveArgs {
    /// Hardware card id (models/gpu/); default the card `servesim serve` reports, else `cpu-host` (the development machines).
    #[arg(long)]
    pub hardware: Option<String>,
    /// A model card id (models/model/) instead of the served model's config.json (or the card `servesim serve` reports).
    #[arg(long)]
    pub model_card: Option<String>,
    /// The server's start-up log: vLLM's non-default arguments (max_num_seqs, ...) are read from it.
    #[arg(long)]
    pub server_log: Option<PathBuf>,
    /// Override a field of the derived scenario (repeatable), e.g. `--set engine.max_num_seqs=32`.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub sets: Vec<String>,
}

impl DeriveArgs {
    /// The derivation options for this server: the model card from `--model-card`, the
    /// served model's folder, or what the server reports; vLLM's logged arguments.
    pub fn options(&self, info: &ServerInfo) -> Result<DeriveOptions, String> {
        let model = match (&self.model_card, &info.model_root) {
            (Some(id), _) => ModelChoice::Card(id.clone()),
            (None, Some(root)) => {
                match live::tokenizer::model_card_from_dir(
                    Path::new(root),
                    info.model.as_deref().unwrap_or("served-model"),
                )? {
                    Some(card) => ModelChoice::Read(card),
                    None => ModelChoice::FromServer,
                }
            }
            (None, None) => ModelChoice::FromServer,
        };
        let log_args = match &self.server_log {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| format!("--server-log {}: {e}", p.display()))?;
                // A log without vLLM's `non-default args:` line says nothing of the scheduler (it
                // was read as an empty set of arguments, without a word).
                if info.kind == Some(sim::config::EngineKind::Vllm) && !text.contains("non-default args:") {
                    crate::load::warn_once(format!(
                        "--server-log {}: no `non-default args:` line (vLLM prints it at start-up): no scheduler flag read from it",
                        p.display()
                    ));
                }
                calib::derive::vllm_args_from_log(&text)
            }
            None => Default::default(),
        };
        Ok(DeriveOptions { hardware: self.hardware.clone(), model, log_args, sets: self.sets.clone() })
    }
}

/// A probe's workload with the endpoint its requests went to (`--endpoint`), where it is one the
/// simulator prices (`workload.endpoint`): a live fit must simulate its probes as they were sent
/// (vLLM 0.11.0 parses the chat template on every chat request, a cost a completions probe does
/// not have), or the fit would take that cost for the engine's.
pub fn as_sent(workload: &Value, endpoint: &str) -> Value {
    let mut w = workload.clone();
    if sim::config::priced_endpoint(endpoint) {
        if let Some(o) = w.as_object_mut() {
            o.insert("endpoint".into(), endpoint.into());
        }
    }
    // The live client sends `/v1/completions` prompts as token ids (`live::client::send`): the
    // server does not tokenize them, and neither does the prediction (SGLang's serial tokenizer).
    // Chat messages go as text (a scenario's own `tokenize_prompt` does not apply to them).
    if let Some(o) = w.as_object_mut() {
        o.insert("tokenize_prompt".into(), (!endpoint.contains("chat")).into());
    }
    w
}

/// The scenario that describes the live server, with the given workload.
pub fn derive_scenario(info: &ServerInfo, d: &DeriveOptions, workload: &Value) -> Result<RawScenario, String> {
    let unknown = calib::derive::unknown_scheduler_flags(info, d);
    if !unknown.is_empty() {
        crate::load::warn_once(format!(
            "the server at {} does not say its {} (vLLM exposes neither): the predictions use vLLM's defaults for them; give --scenario, or --server-log with the start-up log (its `non-default args:` line), or --set engine.FLAG=N",
            info.base_url,
            unknown.join(" or ")
        ));
    }
    Ok(RawScenario {
        origin: format!("the scenario derived from {}", info.base_url),
        base_dir: std::env::current_dir().unwrap_or_default(),
        json: calib::derive::derive_scenario(info, d, workload).map_err(|e| e.to_string())?,
    })
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
    /// With `--from-results`: the model's discrepancy at a published point per metric family
    /// (sd in ln, `ttft=0.4,e2el=0.08`), in place of the validate corpus' within-group sd for
    /// the families named (your own corpus; or a validation that leaves the judged set out).
    #[arg(long, value_name = "FAMILY=SD,...")]
    pub discrepancy: Option<String>,
    /// With `--from-results`: the uncalibrated model's 90% |error| per metric family
    /// (`ttft=0.9,tpot=0.2`, as fractions), in place of `validation/baseline.json`'s for this GPU
    /// and engine, for the families named: the model-error term of the profile's intervals
    /// (a validation that leaves the judged set out: `calib/held_out.py`).
    #[arg(long, value_name = "FAMILY=P90,...")]
    pub model_error: Option<String>,
    /// Where to write the profile (JSON).
    #[arg(long)]
    pub out: PathBuf,
    /// Where the probes' per-request results go.
    #[arg(long)]
    pub result_dir: Option<PathBuf>,
    /// Largest concurrency of the decode probes (at least 1; default 16).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_probe_concurrency: Option<u32>,
    /// Seconds of load (short requests at concurrency 4, not measured) before the probes: an
    /// engine that just started runs its first minutes slower, and probes taken then fit a
    /// slower engine than the one a later check meets (VALIDATION.md). 0: none (default 180).
    #[arg(long)]
    pub warmup_s: Option<f64>,
    /// Run the probe plan this many times, round the plan (every probe, then every probe
    /// again, with fresh prompts), and fit on all the runs: a host whose speed drifts then
    /// weighs on every probe alike (at least 1; default 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: Option<u32>,
    /// Simulator evaluations the fit may use (at least 1).
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u64).range(1..).map(|v| v as usize))]
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

/// The progress bar of a live run.
fn progress() -> Progress {
    Arc::new(|n| {
        let pb = crate::plot::progress(n, "requests");
        let tick = pb.clone();
        (live::bench::OnDone(Arc::new(move || tick.inc(1))), Box::new(move || pb.finish_and_clear()))
    })
}

/// Connects to the server and makes it measurable; results go to `dir`.
fn connect(server: &ServerArgs, engine: &Option<String>, dir: PathBuf) -> Result<LiveMeasure, String> {
    let rt = livecli::rt()?;
    let (info, opts) = rt.block_on(livecli::connect(server))?;
    if let Some(e) = engine {
        let want = EngineKind::parse(e).ok_or_else(|| format!("--engine {e}: expected vllm or sglang"))?;
        if info.kind != Some(want) {
            return Err(format!("--engine {e}: the server at {} is {}", info.base_url, info.kind_name()));
        }
    }
    // A time-scaled emulator runs its engine k times faster than the engine it emulates: what
    // is fitted or judged there is that faster engine (a test's shortcut), said here and kept
    // in every run record (`server.servesim_time_scale`).
    if let Some(k) = info.servesim_time_scale.filter(|k| *k != 1.0) {
        eprintln!(
            "warning: the server at {} is servesim serve at --time-scale {k}: its timings are the emulated engine's divided by {k}, and so are this command's fits and predictions (a profile from it describes a {k}x faster engine); use --time-scale 1 for the engine itself",
            info.base_url
        );
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("--result-dir {}: {e}", dir.display()))?;
    // One listener for the whole command: a Ctrl-C between two runs stops the next (see
    // `interrupt_watch`); a second one exits at once, as the shell's would have.
    let stop = live::bench::interrupt_watch(|| {
        eprintln!("interrupted again (Ctrl-C): exiting now; the requests that completed are in the per-request files");
        std::process::exit(130);
    })
    .map_err(|e| format!("cannot listen for Ctrl-C: {e}"))?;
    Ok(LiveMeasure {
        stop,
        rt,
        opts,
        info,
        dir,
        endpoint: server.endpoint.clone(),
        progress: Some(progress()),
        probe_prefix: None,
        record: None,
    })
}

pub fn calibrate(a: CalibrateArgs) -> Result<ExitCode, String> {
    if let Some(w) = a.warmup_s.filter(|w| !w.is_finite() || *w < 0.0) {
        return Err(format!("--warmup-s: expected seconds, 0 or more, got {w}"));
    }
    if !a.from_results.is_empty() {
        return calibrate_offline(&a);
    }
    if a.discrepancy.is_some() {
        return Err(
            "--discrepancy: only with --from-results (a live fit takes its residuals and the engine's speed)".into()
        );
    }
    if !a.scenario.is_empty() {
        return Err("--scenario: only with --from-results; a live calibration describes the server from what it \
                    reports (give what it cannot report with --hardware, --model-card and --set)"
            .into());
    }
    if a.model_error.is_some() {
        return Err("--model-error: only with --from-results (a live fit's intervals come from its own probes)".into());
    }
    let dir = a.result_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("servesim-calibrate"));
    let mut m = connect(&a.server, &a.engine, dir)?;
    let derive = a.derive.options(&m.info)?;
    let info = m.info.clone();
    let endpoint = a.server.endpoint.clone();
    let scenario = |w: &Value| -> Result<SimSpec, String> {
        Ok(load::resolve(&derive_scenario(&info, &derive, &as_sent(w, &endpoint))?)?.1)
    };
    let step_log = match a.step_log.clone().or(a.derive.server_log.clone()) {
        Some(p) => Some((
            p.display().to_string(),
            std::fs::read_to_string(&p).map_err(|e| format!("--step-log {}: {e}", p.display()))?,
        )),
        None => None,
    };
    let opts = CalibrateOptions {
        max_probe_concurrency: a.max_probe_concurrency.unwrap_or(16),
        warmup_s: a.warmup_s.unwrap_or(180.0),
        repeat: a.repeat.unwrap_or(1),
        max_evals: a.max_evals,
        speed_reference: !a.no_speed_reference,
        step_log,
    };
    // The run record, beside the profile: written now that the server is known (what it said of
    // itself, its `/metrics`, the command and the settings), again after each probe, and at the
    // end (`live::manifest::CalibrationRecord`); an error writing it stops the run before any load.
    let record_path = live::manifest::calibration_record_path(&a.out);
    let settings = json!({
        "max_probe_concurrency": opts.max_probe_concurrency,
        "warmup_s": opts.warmup_s,
        "repeat": opts.repeat,
        "max_evals": opts.max_evals,
        "speed_reference": opts.speed_reference,
        "hardware": a.derive.hardware,
        "model_card": a.derive.model_card,
        "sets": a.derive.sets,
    });
    let command: Vec<String> = std::env::args().collect();
    let mut record = live::manifest::CalibrationRecord::new(
        record_path.clone(),
        &m.info,
        &a.server.endpoint,
        &command,
        settings,
        m.metrics_now().as_ref(),
    );
    for (role, p) in [("server_log", &a.derive.server_log), ("step_log", &a.step_log)] {
        if let Some(p) = p {
            record.add_file(role, p);
        }
    }
    record.write().map_err(|e| format!("--out {}: the run record beside it: {e}", a.out.display()))?;
    m.record = Some(record);
    // Ends the record as the run ended (its write error said, the run's own outcome kept).
    let end = |m: &mut LiveMeasure, status: &str, profile: Option<Value>, out: Option<&Path>| {
        let after = m.metrics_now();
        if let Some(r) = m.record.as_mut() {
            if let Some(o) = out {
                r.add_file("profile", o);
            }
            r.set_metrics_after(after.as_ref());
            r.finish(status, profile);
            if let Err(e) = r.write() {
                eprintln!("warning: the run record was not completed: {e}");
            }
        }
    };
    let profile = match procedure::calibrate(&mut m, &scenario, &opts) {
        Ok(p) => p,
        Err(e) if is_interrupted(&e) => {
            end(&mut m, "interrupted", None, None);
            return Ok(interrupted(
                "calibrate",
                &m.dir,
                &format!("no profile was written; the run record is {}", record_path.display()),
            ));
        }
        Err(e) => {
            end(&mut m, &format!("failed: {e}"), None, None);
            return Err(e.to_string());
        }
    };
    if let Err(e) = write_profile(&a.out, &profile, Some(&record_path)) {
        end(&mut m, &format!("failed: {e}"), None, None);
        return Err(e);
    }
    let said = json!({
        "path": a.out.display().to_string(),
        "source": profile.source,
        "coefficients": profile.coefficients,
        "coefficient_sources": profile.coefficient_sources,
    });
    end(&mut m, "completed", Some(said), Some(&a.out));
    print!("{}", profile_summary(&profile));
    println!("Run record: {}", record_path.display());
    Ok(ExitCode::SUCCESS)
}

/// Writes the profile; `record`, the run record of the calibration that fitted it, is named in
/// it (`run_record`: the record's file name, beside the profile).
fn write_profile(path: &Path, profile: &Profile, record: Option<&Path>) -> Result<(), String> {
    // A profile that a scenario would refuse is an error here, not at the next `check`.
    let mut c = sim::cost::CostCoefficients::default();
    for (name, v) in profile.coefficients.iter() {
        c.set(name, *v);
    }
    sim::config::check_coefficients(&c, "coefficients").map_err(|e| {
        format!(
            "the fitted profile's {e}: the engine measured is slower than anything servesim models; \
             the profile was not written to {}",
            path.display()
        )
    })?;
    // Its uncertainty block too, as `simulate` reads it (an ensemble member that would run the
    // engine in no time was written, and then refused by every command that used the profile).
    if let Some(u) = &profile.uncertainty {
        u.check().map_err(|e| {
            format!(
                "the fitted profile's {e}: the data leave the coefficients unbounded (a point no engine can produce?); \
                 the profile was not written to {}",
                path.display()
            )
        })?;
    }
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).map_err(|e| format!("--out {}: {e}", path.display()))?;
    }
    let mut profile = profile.clone();
    profile.run_record =
        record.map(|r| r.file_name().map_or_else(|| r.display().to_string(), |n| n.to_string_lossy().into_owned()));
    std::fs::write(path, serde_json::to_string_pretty(&profile).expect("json"))
        .map_err(|e| format!("--out {}: {e}", path.display()))
}

fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "null".into(), |x| serde_json::to_string(&x).unwrap_or_default())
}

fn named_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// A readable summary of a profile.
pub fn profile_summary(p: &Profile) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Fitted cost profile ({}):", p.source);
    for (k, v) in p.coefficients.iter() {
        let src = p.coefficient_sources.get(k).copied().unwrap_or("?");
        let prior = p.prior.get(k).unwrap_or(f64::NAN);
        let _ = writeln!(s, "  {k:<22} {v:>12.4} µs   ({src}; prior {prior:.4})");
    }
    if let Some(u) = &p.uncertainty {
        let how = if u.ensemble.is_empty() { "Laplace covariance" } else { "randomised-maximum-likelihood ensemble" };
        let _ =
            writeln!(s, "90% intervals of the coefficients ({how}; the method in the profile's uncertainty block):");
        for (k, i) in &u.intervals {
            let zero =
                if u.at_zero_sigma_us.contains_key(k) { "  (fitted to 0: one-sided, from its prior's σ)" } else { "" };
            let _ = writeln!(s, "  {k:<22} {:>12.4} – {:<12.4} µs{zero}", i.p05, i.p95);
        }
    }
    if let Some(ids) = &p.identifiability {
        let _ = writeln!(s, "Which coefficients the data determine:");
        for i in ids {
            let _ = writeln!(
                s,
                "  {:<22} {:<11} ({:.0}% of its prior variance removed; prior σ {:.2} in ln): {}",
                i.coefficient,
                i.source(),
                100.0 * i.data_share,
                i.prior_sigma_log,
                i.why
            );
        }
    }
    if let Some(traps) = &p.traps {
        for t in traps.iter().filter(|t| t.kind != "statistic_set_aside") {
            let _ = writeln!(s, "FLAGGED {} ({}, {}): {}", t.point, t.kind, t.action, t.why);
        }
        // A full result file gives medians and p99s beside every mean: one line for them all.
        let aside: Vec<_> = traps.iter().filter(|t| t.kind == "statistic_set_aside").collect();
        if !aside.is_empty() {
            let mut names: Vec<&str> = aside.iter().flat_map(|t| t.metrics.iter().map(String::as_str)).collect();
            names.sort_unstable();
            names.dedup();
            let _ = writeln!(
                s,
                "Not fitted, given beside the mean of their family at {} of {} point(s) (the fit matches the mean; the profile's traps list them per point): {}",
                aside.len(),
                p.fit.points.len(),
                names.join(", ")
            );
        }
    }
    if let Some(n) = &p.note {
        let _ = writeln!(s, "Note: {n}");
    }
    let _ = writeln!(s, "R² per metric: {}", named_json(&p.fit.r2));
    for pt in &p.fit.points {
        let _ = writeln!(s, "  {:<14} residuals {}", pt.name, named_json(&pt.relative_residual));
    }
    for r in p.roofline_check.iter().filter(|r| r.beats_physics) {
        let what = match r.implied_us {
            // A corrected composed cost: its time per unit of the term's work.
            Some(i) => format!(
                "corrected composed cost takes {} µs per unit of \"{}\"'s work, which",
                num(Some(i)),
                r.coefficient
            ),
            None => format!("\"{}\" = {} µs", r.coefficient, num(Some(r.fitted_us))),
        };
        let _ = writeln!(
            s,
            "WARNING: {what} beats the hardware card's roofline floor of {} µs: the fit implies more than the card's peak. Check the hardware card or the data.",
            num(Some(r.roofline_floor_us))
        );
    }
    if let Some(w) = misfit_warning(&p.fit.misfit) {
        let _ = writeln!(s, "WARNING: {w}");
    }
    s
}

/// The words for a fit's values off by more than its own noise allows
/// (`calib::profile::misfits`), or None: `calibrate` prints them, and every run with the
/// profile says them again (`load::load_profile`, from the profile's `fit.misfit`).
pub fn misfit_warning(m: &[calib::profile::Misfit]) -> Option<String> {
    if m.is_empty() {
        return None;
    }
    let mut worst: Vec<&calib::profile::Misfit> = m.iter().collect();
    worst.sort_by(|a, b| b.sigmas.total_cmp(&a.sigmas));
    let shown: Vec<String> = worst
        .iter()
        .take(8)
        .map(|x| format!("{} at {} {:+.0}% ({:.1}σ)", x.metric, x.point, 100.0 * x.relative_residual, x.sigmas))
        .collect();
    Some(format!(
        "the fit does not describe its data: {} fitted value(s) lie more than {} times their noise from the measurement (the fit's own noise model, fit.points[].target_noise; the profile's fit.misfit lists them): {}{}. Its coefficients and intervals stand for a model these points contradict: check the results (another deployment or workload than the scenario's, a warm prefix cache, a failed run) or the scenario before using it",
        m.len(),
        calib::profile::MISFIT_SIGMAS,
        shown.join(", "),
        if m.len() > shown.len() { format!(", and {} more", m.len() - shown.len()) } else { String::new() }
    ))
}

fn calibrate_offline(a: &CalibrateArgs) -> Result<ExitCode, String> {
    if a.scenario.is_empty() {
        return Err("--from-results needs --scenario: the setup the results were measured on".into());
    }
    // Flags of a live calibration have nothing to act on offline: the scenario is the setup.
    let live_only: Vec<&str> = [
        ("--hardware (offline: the scenario's hardware, or --set hardware=ID)", a.derive.hardware.is_some()),
        ("--model-card (offline: the scenario's model, or --set model=ID)", a.derive.model_card.is_some()),
        ("--server-log", a.derive.server_log.is_some()),
        ("--engine (offline: the scenario's engine.kind)", a.engine.is_some()),
        ("--step-log", a.step_log.is_some()),
        ("--result-dir", a.result_dir.is_some()),
        ("--no-speed-reference", a.no_speed_reference),
        ("--warmup-s", a.warmup_s.is_some()),
        ("--repeat", a.repeat.is_some()),
        ("--max-probe-concurrency", a.max_probe_concurrency.is_some()),
    ]
    .into_iter()
    .filter_map(|(f, given)| given.then_some(f))
    .collect();
    if !live_only.is_empty() {
        return Err(format!(
            "{}: for a live calibration (against --base-url) only; --from-results fits on the scenario as given",
            live_only.join(", ")
        ));
    }
    if a.scenario.len() != 1 && a.scenario.len() != a.from_results.len() {
        return Err(format!(
            "--scenario: give one scenario, or one per results file ({}), got {}",
            a.from_results.len(),
            a.scenario.len()
        ));
    }
    // A file given twice would weigh its points twice (under any spelling of its path).
    let canon: Vec<PathBuf> =
        a.from_results.iter().map(|f| std::fs::canonicalize(f).unwrap_or_else(|_| f.clone())).collect();
    if let Some((i, f)) = a.from_results.iter().enumerate().find(|(i, _)| canon[..*i].contains(&canon[*i])) {
        return Err(format!(
            "--from-results: {} is given twice (position {}); give each file once",
            f.display(),
            i + 1
        ));
    }
    let mut points: Vec<FitPoint> = Vec::new();
    // The medians and p99s given beside a mean of their family, which the fit leaves out.
    let mut set_aside = Vec::new();
    let mut given: Vec<Vec<Option<f64>>> = Vec::new();
    // Every point read so far with where it was, to refuse one given in two files as
    // `parse_results` refuses one given twice in a file.
    let mut seen: Vec<(calib::results::ResultPoint, String)> = Vec::new();
    for (fi, f) in a.from_results.iter().enumerate() {
        let mut base = load::read_raw(Some(&a.scenario[if a.scenario.len() == 1 { 0 } else { fi }]))?;
        // The user's --set first, then each point's load (its concurrency or rate, its count):
        // what the results file measured.
        load::apply_overrides(&mut base, &a.derive.sets, None)?;
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: cannot read: {e}", f.display()))?;
        let results = calib::results::parse_results(&text, &f.display().to_string())?;
        if results.is_empty() {
            return Err(format!(
                "{}: no result in it (expected a `vllm bench serve --save-result` JSON object or `sglang.bench_serving` JSON lines)",
                f.display()
            ));
        }
        for (k, r) in results.into_iter().enumerate() {
            // The same point in two files (one run's line copied into another run's file)
            // would be fitted as two measurements and narrow the intervals.
            if let Some((_, first)) = seen.iter().find(|(p, _)| *p == r) {
                return Err(format!(
                    "{}#{k}: the same point as {first} (the same load and the same values): a point given twice would \
                     be fitted as two measurements; give each run once",
                    f.display()
                ));
            }
            seen.push((r.clone(), format!("{}#{k}", f.display())));
            let mut raw = base.clone();
            let o = &r.load;
            if o.unlimited_concurrency {
                if let Some(w) = raw.json["workload"].as_object_mut() {
                    w.remove("max_concurrency");
                }
            }
            // The point's own load (its concurrency, rate, burstiness, count) may be what the
            // scenario refuses: say which point gave it.
            let at_point = |e: String| format!("{}#{k} (its load: {}): {e}", f.display(), o.sets.join(", "));
            load::apply_overrides(&mut raw, &o.sets, None).map_err(at_point)?;
            let spec = load::resolve(&raw).map_err(at_point)?.1;
            // A fleet's replicas each hold their step cost: one fit stands for all of them only
            // where they are one deployment.
            if !spec.one_step_cost() {
                return Err(format!(
                    "{}#{k}: the scenario's fleet has replica groups with different step costs (GPU, TP size, engine, or a setting that moves the step cost): one profile is one deployment's step costs; calibrate on a scenario of one group's deployment, or of a fleet of identical replicas",
                    f.display()
                ));
            }
            stated_deployment_differs(&r.stated, &spec).map_err(|e| format!("{}#{k}: {e}", f.display()))?;
            for w in
                calib::results::check_against_scenario(&r, &spec).map_err(|e| format!("{}#{k}: {e}", f.display()))?
            {
                crate::load::warn_once(format!("{}#{k}: {w}", f.display()));
            }
            // The prompts the result measured must be the scenario's: every metric moves with
            // their length, and a fit would take the difference for the engine's speed.
            let generated = sim::workload::generate(&spec.workload);
            // The prompts as the modelled client counts them in total_input_tokens: without the
            // BOS the server adds to a generated prompt for `vllm bench serve` before 0.20
            // (`Workload::counted_prompt_len`), with it from 0.20 (the server's usage).
            let (_, scenario_out) = generated.mean_lengths();
            let scenario_in = generated.mean_counted_prompt_len();
            let [measured_in, measured_out] = r.mean_lengths(generated.requests.len() as u64);
            // A result without the totals cannot be checked, and a run of other lengths would be
            // fitted as the scenario's (an audit, 2026-12-07: a 1,024-token run fitted silently
            // against 4,096-token prompts once its totals were deleted): said, not refused, since
            // tables from blogs often publish no totals.
            for (total, measured, scenario_mean) in [
                ("total_input_tokens", &measured_in, scenario_in),
                ("total_output_tokens", &measured_out, scenario_out),
            ] {
                if measured.is_none() {
                    crate::load::warn_once(format!(
                        "{}#{k}: no {total} (or a request count of 0): the run's mean lengths cannot be checked against \
                         the scenario's ({scenario_mean:.0} tokens on average); the fit takes them to be the scenario's, \
                         so a run of other lengths would be read as the engine's speed",
                        f.display()
                    ));
                }
            }
            // The totals are exact: the room is for the two runs' length draws and a few tokens a
            // request (`calib::traps::mean_length_tolerance`; 25% until 2026-12-06).
            let lens =
                |f: fn(&sim::request::RequestSpec) -> u32| generated.requests.iter().map(f).collect::<Vec<u32>>();
            let allowed = |t: f64| {
                format!("{:.1}% allowed for the two runs' length draws and a few tokens a request", (t - 1.0) * 100.0)
            };
            if let Some((measured, by)) = measured_in {
                let counted: Vec<u32> = generated.requests.iter().map(|r| generated.counted_prompt_len(r)).collect();
                let tol = calib::traps::mean_length_tolerance(&counted);
                if scenario_in > 0.0 && (measured / scenario_in).ln().abs() > tol.ln() {
                    return Err(format!(
                        "{}#{k}: total_input_tokens: the result's prompts average {measured:.0} tokens ({by}), the scenario's {scenario_in:.0} ({}): the scenario is not the measured run, and a fit would take the difference for the engine's speed; give its prompt lengths (--set workload.random_input_len=N, or a trace of the run's requests)",
                        f.display(),
                        allowed(tol)
                    ));
                }
            }
            // The same for the outputs: decode steps and TPOT move with them (a 64-token run
            // fitted against 512-token outputs took the difference for a 3.3× step cost).
            if let Some((measured, by)) = measured_out {
                let tol = calib::traps::mean_length_tolerance(&lens(|r| r.output_len));
                if scenario_out > 0.0 && (measured / scenario_out).ln().abs() > tol.ln() {
                    return Err(format!(
                        "{}#{k}: total_output_tokens: the result's outputs average {measured:.0} tokens ({by}), the scenario's {scenario_out:.0} ({}): the scenario is not the measured run; give its output lengths (--set workload.random_output_len=N; where EOS ended them and the modelled client lets it, ignore_eos false with an output_len_dist)",
                        f.display(),
                        allowed(tol)
                    ));
                }
            }
            // A TPOT or ITL of 0 is a one-token output's; with longer outputs it is no measurement
            // (it was read as "not published").
            use sim::report::{Metric, Metrics};
            for m in [Metric::MeanTpotMs, Metric::MedianTpotMs, Metric::MeanItlMs, Metric::MedianItlMs] {
                if r.metric(m) == Some(0.0) && scenario_out > 1.5 {
                    return Err(format!(
                        "{}#{k}: {}: 0 with outputs of {scenario_out:.0} tokens on average: a time per token of 0 is a one-token output's; this is not the run's measurement",
                        f.display(),
                        m.key()
                    ));
                }
            }
            // A trace's arrivals replayed (servesim's own report of one, `request_rate: "trace"`)
            // are that trace's: a scenario without one would run the point at its own load.
            if r.replayed_trace && !spec.workload.dataset.is_trace() {
                return Err(format!(
                    "{}#{k}: request_rate: \"trace\": the result replayed a trace's arrivals, and the scenario has no trace; give the scenario the trace the run replayed (workload.dataset_name trace)",
                    f.display()
                ));
            }
            // One profile is one deployment's step costs: every point is simulated with the
            // cost fitted from the first point's prior, and the profile names the first point's
            // deployment. A point measured on another (an engine, model, GPU, TP size, release
            // or any other setting that moves the step cost) cannot share that fit.
            if let Some(first) = points.first() {
                if let Some(what) = deployment_difference(&first.spec, &spec) {
                    return Err(format!(
                        "{}#{k}: measured on another deployment than {} ({what}): one profile is one deployment's step costs; calibrate each deployment on its own",
                        f.display(),
                        first.name
                    ));
                }
            }
            let name = format!("{}#{k}", f.display());
            set_aside.extend(procedure::set_aside_statistics(&name, &r));
            given.push(procedure::given_targets(&r));
            points.push(FitPoint { name, spec, measured: procedure::measured_targets(&r), replay: None });
        }
    }
    let discrepancy = match &a.discrepancy {
        Some(spec) => calib::fit::Discrepancy::parse(spec).map_err(|e| format!("--discrepancy {e}"))?,
        None => calib::fit::Discrepancy::corpus(),
    };
    let model_error = parse_model_error(a.model_error.as_deref())?;
    let profile = procedure::calibrate_from_results_with(
        &points,
        a.max_evals,
        a.from_results.iter().map(|p| p.display().to_string()).collect(),
        a.scenario[0].display().to_string(),
        &discrepancy,
        &model_error,
        &given,
    )
    .map_err(|e| e.to_string())?;
    let mut profile = profile;
    // Every scenario, not the first alone (`scenario` keeps the first for older readers).
    profile.scenarios = Some(a.scenario.iter().map(|p| p.display().to_string()).collect());
    profile.traps.get_or_insert_with(Vec::new).extend(set_aside);
    write_profile(&a.out, &profile, None)?;
    print!("{}", profile_summary(&profile));
    Ok(ExitCode::SUCCESS)
}

/// What a results file says it ran on against the scenario it is fitted with: another engine,
/// release, GPU or number of replicas is an error (the fit would take the other deployment's
/// speed for this one's, and the profile would be labelled with this one); a served model name
/// that is neither the card's id nor its repository warns (a server may serve a model under
/// any name).
fn stated_deployment_differs(d: &calib::results::StatedDeployment, spec: &sim::config::SimSpec) -> Result<(), String> {
    let mut differ = Vec::new();
    if let Some(e) = d.engine.as_deref().filter(|e| *e != spec.engine.kind()) {
        differ.push(format!("engine: {e} (the scenario: {})", spec.engine.kind()));
    }
    let version = spec.engine.version().to_string();
    if let Some(v) = d.engine_version.as_deref().filter(|v| {
        d.engine.as_deref().is_none_or(|e| e == spec.engine.kind())
            && !calib::results::same_release(v, spec.engine.version())
    }) {
        differ.push(format!("engine_version: {v} (the scenario: {version}; set engine.version)"));
    }
    // "live": `servesim bench` against a server that does not say its GPU (a real engine): no
    // GPU stated, not another one (every bench result was refused until 2026-12-06).
    if let Some(h) = d.hardware.as_deref().filter(|h| *h != spec.gpu.id && *h != live::measure::LIVE_HARDWARE) {
        differ.push(format!("hardware: {h} (the scenario: {})", spec.gpu.id));
    }
    let replicas = spec.fleet.as_ref().map_or(1, |f| f.replicas.len() as u64);
    if let Some(n) = d.num_replicas.filter(|n| *n != replicas) {
        differ.push(format!("fleet.num_replicas: {n} (the scenario: {replicas})"));
    }
    if !differ.is_empty() {
        return Err(format!(
            "the result says it ran on another deployment than the scenario's ({}): a fit would take that deployment's speed for this one's; give the scenario of the measured deployment",
            differ.join(", ")
        ));
    }
    if let Some(served) = d.model_id.as_deref() {
        if !spec.model.is_served_as(served) {
            crate::load::warn_once(format!(
                "a result's model_id is {served:?}, the scenario's model card {} ({}): the fit takes that run's speed for this model's; check that the result measured this model",
                spec.model.id,
                spec.model.hf_repo.as_deref().unwrap_or("no hf_repo")
            ));
        }
    }
    Ok(())
}

/// How the deployment of `b` differs from `a`'s in what sets the step cost, in words; `None`
/// where their step costs are the same model.
fn deployment_difference(a: &sim::config::SimSpec, b: &sim::config::SimSpec) -> Option<String> {
    let mut d = Vec::new();
    let pair = |what: &str, x: String, y: String, d: &mut Vec<String>| {
        if x != y {
            d.push(format!("{what} {x} / {y}"));
        }
    };
    pair(
        "engine",
        format!("{} {}", a.engine.kind(), a.engine.version()),
        format!("{} {}", b.engine.kind(), b.engine.version()),
        &mut d,
    );
    pair("model", a.model.id.clone(), b.model.id.clone(), &mut d);
    pair("GPU", a.gpu.id.clone(), b.gpu.id.clone(), &mut d);
    pair(
        "tensor parallel size",
        a.deployment.tensor_parallel_size.to_string(),
        b.deployment.tensor_parallel_size.to_string(),
        &mut d,
    );
    if d.is_empty() && a.cost != b.cost {
        d.push("a setting that changes the step cost (KV or weight format, CUDA graphs, cost section)".into());
    }
    (!d.is_empty()).then(|| d.join(", "))
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
    /// Simulator evaluations the fit may use (at least 1).
    #[arg(long, default_value_t = 800, value_parser = clap::value_parser!(u64).range(1..).map(|v| v as usize))]
    pub max_evals: usize,
    /// Write measured against predicted throughput and TTFT as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<String>,
    /// Measure each point this many times (fresh prompts each time); judge on the mean, report the spread (at least 1).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// Skip the speed reference before each point (run when the profile has one).
    #[arg(long)]
    pub no_speed_reference: bool,
}

pub fn check(a: CheckArgs) -> Result<ExitCode, String> {
    // `--goodput` comes with the workload flags `check` shares with `bench`; the check judges
    // the metrics a profile predicts (`calib::check::CHECK_METRICS`), and its report carries no
    // goodput: refused, not ignored.
    if !a.workload.bench.goodput.is_empty() {
        return Err(
            "--goodput: check judges predicted metrics against measured ones and computes no goodput; give --goodput to `servesim bench` (measured) or `servesim simulate` (predicted) of the same workload".into(),
        );
    }
    // The plot's name and folder before any point is measured (a missing folder failed after
    // both points had run, no report printed: a review, 2026-12-07).
    if let Some(p) = &a.plot {
        crate::plot::check_path(p)?;
    }
    let conc: Vec<u32> = crate::parse_list("--concurrency", &a.concurrency)?;
    if conc.is_empty() || conc.contains(&0) || conc.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("--concurrency: give increasing values >= 1, got {}", a.concurrency));
    }
    let per_point: Option<Vec<u32>> =
        a.num_prompts_per_point.as_deref().map(|s| crate::parse_list("--num-prompts-per-point", s)).transpose()?;
    let fit_on: Vec<u32> =
        a.fit_on.as_deref().map(|s| crate::parse_list("--fit-on", s)).transpose()?.unwrap_or_default();
    if let Some(c) = fit_on.iter().find(|c| !conc.contains(c)) {
        return Err(format!(
            "--fit-on {c}: not one of the --concurrency points ({}); the fit is on measured points",
            conc.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")
        ));
    }
    if a.profile.is_none() && fit_on.is_empty() {
        return Err("check needs --profile FILE (from servesim calibrate) or --fit-on N,...".into());
    }
    // A verdict needs a point the fit did not see: with none, it would pass having judged nothing.
    if !fit_on.is_empty() && conc.iter().all(|c| fit_on.contains(c)) {
        return Err(format!(
            "--fit-on {}: every --concurrency point is fitted on, so no point is left to judge; leave at least one out",
            a.fit_on.as_deref().unwrap_or("")
        ));
    }
    if let Some(p) = &per_point {
        if p.len() != 1 && p.len() != conc.len() {
            return Err(format!(
                "--num-prompts-per-point: give one value, or one per --concurrency point ({}), got {}",
                conc.len(),
                p.len()
            ));
        }
    }
    let profile: Option<ProfileFile> = match &a.profile {
        Some(p) => {
            let t = std::fs::read_to_string(p).map_err(|e| format!("--profile {}: {e}", p.display()))?;
            Some(ProfileFile::parse(&t).map_err(|e| format!("--profile {}: {e}", p.display()))?)
        }
        None => None,
    };
    let (wl_json, _) = a.workload.section_json(&a.server.endpoint)?;
    let dir = a.result_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("servesim-check"));
    let mut m = connect(&a.server, &a.engine, dir)?;
    // A profile describes one speed: one fitted against `serve --time-scale k` judged against a
    // server at another scale is off by their ratio whatever the model (the audit of 2026-12-06:
    // +890%, blamed on the speed reference).
    let server_scale = m.info.servesim_time_scale.unwrap_or(1.0);
    let profile_scale = profile.as_ref().map_or(1.0, ProfileFile::servesim_time_scale);
    if let Some(p) = a.profile.as_ref().filter(|_| (profile_scale / server_scale - 1.0).abs() > 1e-9) {
        return Err(format!(
            "--profile {}: fitted against {} and the server at {} runs {}: its times differ by a factor {:.3} \
             whatever the model; fit a profile against this server",
            p.display(),
            if profile_scale == 1.0 {
                "an engine at its own speed".to_string()
            } else {
                format!("servesim serve at --time-scale {profile_scale}")
            },
            m.info.base_url,
            if server_scale == 1.0 {
                "at its own speed".to_string()
            } else {
                format!("servesim serve at --time-scale {server_scale}")
            },
            profile_scale / server_scale
        ));
    }
    let derive = a.derive.options(&m.info)?;
    let info = m.info.clone();
    let endpoint = a.server.endpoint.clone();
    let derived = |w: &Value| -> Result<SimSpec, String> {
        Ok(load::resolve(&derive_scenario(&info, &derive, &as_sent(w, &endpoint))?)?.1)
    };
    // `--scenario` gives the whole setup; without it the engine side comes from the server.
    let point = |w: &Value| -> Result<SimSpec, String> {
        let mut raw = match &a.workload.scenario {
            Some(f) => {
                let mut r = load::read_raw(Some(f))?;
                r.json["workload"] = as_sent(w, &endpoint);
                r
            }
            None => derive_scenario(&info, &derive, &as_sent(w, &endpoint))?,
        };
        if let Some(p) = &a.profile {
            raw.json["cost"] = json!({"profile": std::fs::canonicalize(p).unwrap_or(p.clone()).display().to_string()});
        }
        Ok(load::resolve(&raw)?.1)
    };
    // What the server says of itself against the scenario the predictions run (the audit of
    // 2026-12-06: a server at another running cap was judged without a word, its mismatch blamed
    // on the speed reference): another engine, model or GPU is an error before anything is
    // measured; a setting the numbers move with, a warning naming both values, and in the report.
    let server_differs = match point(&wl_json) {
        Ok(spec) => server_differences(&m.info, &spec, a.workload.scenario.as_deref())?,
        // The same scenario fails the check's first point, with its own error.
        Err(_) => Vec::new(),
    };
    let opts = CheckOptions {
        concurrency: conc.clone(),
        num_prompts_per_point: per_point,
        fit_on,
        profile_fitted_loads: profile.as_ref().map(ProfileFile::fitted_loads).unwrap_or_default(),
        workload: wl_json,
        repeat: a.repeat,
        max_evals: a.max_evals,
        speed_reference_ms: profile
            .as_ref()
            .and_then(ProfileFile::speed_reference_ms)
            .filter(|_| !a.no_speed_reference),
        profile_coefficients: profile.as_ref().and_then(|p| p.coefficients.clone()).map(Value::Object),
        uncertainty: profile.as_ref().and_then(|p| p.uncertainty.clone()),
        // Fresh prompt contents for every invocation (`procedure::salt_prompts`): a second check
        // against the same server must not meet the first one's prompts in its prefix cache.
        prompt_salt: invocation_salt(),
    };
    let (mut report, measured, predicted) = match procedure::check(&mut m, &point, &derived, &opts) {
        Ok(r) => r,
        Err(e) if is_interrupted(&e) => return Ok(interrupted("check", &m.dir, "no verdict was reached")),
        Err(e) => return Err(e.to_string()),
    };
    report.server_differs = server_differs;
    if let Some(path) = &a.plot {
        fn line<P: Metrics>(conc: &[u32], pts: &[P], label: &str, dashed: bool) -> crate::plot::Series {
            crate::plot::Series {
                label: label.into(),
                points: conc
                    .iter()
                    .zip(pts)
                    .map(|(&c, p)| {
                        let f = |k: Metric| p.metric(k).unwrap_or(0.0);
                        (f64::from(c), f(Metric::OutputThroughput), f(Metric::MeanTtftMs), f(Metric::P99TtftMs))
                    })
                    .collect(),
                dashed,
                band: None,
            }
        }
        let marks: Vec<(f64, String)> =
            report.knee.measured.map(|k| (f64::from(k), format!("measured knee {k}"))).into_iter().collect();
        crate::plot::sweep(
            path,
            "measured against predicted",
            &[line(&conc, &measured, "measured", false), line(&conc, &predicted, "predicted", true)],
            &marks,
        )?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report).expect("json"));
    } else {
        print!("{}", check_text(&report));
    }
    // Exit 1 when the verdict misses a target, so scripts can tell.
    Ok(if report.verdict.pass { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Where the server `info` contradicts the scenario `spec` of the predictions
/// (`calib::server_info::differences`): an error listing every difference where one makes the
/// prediction another deployment's (engine, model, GPU); otherwise each difference said on
/// stderr, and returned for the report.
fn server_differences(
    info: &ServerInfo,
    spec: &SimSpec,
    scenario: Option<&Path>,
) -> Result<Vec<calib::server_info::SetupDifference>, String> {
    use calib::server_info::Severity;
    let d = calib::server_info::differences(info, spec);
    let what = match scenario {
        Some(p) => format!("--scenario {}", p.display()),
        None => "the scenario derived from it (with --set)".to_string(),
    };
    if d.iter().any(|x| x.severity == Severity::Error) {
        let list: Vec<String> = d.iter().map(ToString::to_string).collect();
        return Err(format!(
            "the server at {} is not the deployment {what} predicts ({}): a check against it would judge that difference, not the model; give the scenario of this server{}",
            info.base_url,
            list.join("; "),
            if scenario.is_some() { " (or leave --scenario out to derive it from the server)" } else { "" }
        ));
    }
    for x in &d {
        eprintln!(
            "warning: the server at {} differs from {what}: {x}; every prediction of this check carries that difference",
            info.base_url
        );
    }
    Ok(d)
}

fn opt_json<T: serde::Serialize>(v: &Option<T>) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// The check report as text.
pub fn check_text(r: &CheckReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Live check: {} {} ({}), KV {} tokens",
        r.engine,
        r.engine_version.as_deref().unwrap_or("(version unknown)"),
        r.model.as_deref().unwrap_or("model unknown"),
        r.kv_capacity_tokens.map_or_else(|| "unknown".to_string(), |t| t.to_string())
    );
    // Said before any number: a server that is not what the predictions assume.
    if !r.server_differs.is_empty() {
        let _ = writeln!(s, "The server differs from the scenario of the predictions (every error below carries it):");
        for d in &r.server_differs {
            let _ = writeln!(s, "  {d}");
        }
    }
    // The spread column is there with repeats only (`--repeat`: (max − min) / mean of the runs).
    let repeats = r.points.iter().any(|p| p.measured_spread.is_some());
    let _ = writeln!(
        s,
        "{:>11} {:>4} {:<22} {:>12} {:>12} {:>9}{}",
        "concurrency",
        "fit",
        "metric",
        "measured",
        "predicted",
        "error",
        if repeats { format!(" {:>9}", "spread") } else { String::new() }
    );
    for p in &r.points {
        for (k, _) in CHECK_METRICS {
            let m = p.measured.metric(k);
            let q = p.predicted.metric(k);
            let e = p.error.get(k.key()).copied();
            let spread = p
                .measured_spread
                .as_ref()
                .and_then(|sp| sp.get(k.key()))
                .map(|v| format!("{:.1}%", 100.0 * v))
                .unwrap_or_default();
            let inside = match p.inside_interval.as_ref().and_then(|i| i.get(k.key())) {
                Some(true) => " in 90%",
                Some(false) => " OUTSIDE 90%",
                None => "",
            };
            let _ = writeln!(
                s,
                "{:>11} {:>4} {:<22} {:>12} {:>12} {:>9} {:>9}{inside}",
                p.max_concurrency,
                if p.used_for_fit { "*" } else { "" },
                k,
                m.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into()),
                q.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into()),
                e.map(|v| format!("{:+.1}%", 100.0 * v)).unwrap_or_else(|| "-".into()),
                spread,
            );
        }
    }
    let knee = |k: &Option<u32>| k.map_or_else(|| "none within the sweep".to_string(), |c| format!("concurrency {c}"));
    let _ = writeln!(s, "Knee: measured at {}, predicted at {}.", knee(&r.knee.measured), knee(&r.knee.predicted));
    if r.knee.measured_stable == Some(false) {
        let _ = writeln!(
            s,
            "  Each repeat on its own puts the measured knee at {}: at this sweep the knee is within the measurement's noise.",
            opt_json(&r.knee.measured_per_repeat)
        );
    }
    let _ = writeln!(
        s,
        "Verdict on the {} points not used for fitting (* = used: fitted on with --fit-on, or at a load the profile was fitted on):",
        r.verdict.points_judged
    );
    for (k, x) in r.verdict.per_metric.iter() {
        let t = x
            .target
            .map(|t| format!(" (target {:.0}%: {})", 100.0 * t, if x.ok == Some(true) { "ok" } else { "MISSED" }))
            .unwrap_or_default();
        let zero = match x.measured_zero_predicted_not {
            0 => String::new(),
            n => format!("; {n} point(s) measured 0 against a nonzero prediction, no relative error"),
        };
        match x.median_abs_error {
            Some(m) => {
                let _ = writeln!(s, "  {k:<22} median |error| {:.1}%{t}{zero}", 100.0 * m);
            }
            None if !zero.is_empty() => {
                let _ = writeln!(s, "  {k:<22} no relative error{t}{zero}");
            }
            None => {}
        }
    }
    if let Some(sr) = &r.verdict.speed_reference {
        let per: Vec<String> = r
            .points
            .iter()
            .filter_map(|p| {
                Some(format!("{} {:+.1}%", p.max_concurrency, 100.0 * p.speed_reference.as_ref()?.vs_calibration))
            })
            .collect();
        let _ = writeln!(
            s,
            "Speed reference (one request's mean ITL, {:.2} ms while calibrating), before each point: {}",
            sr.calibration_mean_itl_ms,
            per.join(", ")
        );
        if sr.engine_held_still == Some(false) {
            let _ = writeln!(
                s,
                "  The speed reference moved more than {:.0}% between calibration and check: the engine or the host\n  \
                 was not at one speed, and errors of that size may be the machine's as much as the model's.",
                100.0 * sr.tolerance
            );
            if !r.server_differs.is_empty() {
                let _ = writeln!(s, "  The server also differs from the scenario (above): that moves the speed too.");
            }
        }
    }
    if let Some(c) = &r.verdict.interval_coverage {
        if let Some(f) = c.fraction {
            let _ = writeln!(
                s,
                "Inside the predicted 90% interval: {} of {} measured values ({:.0}%; at least {:.0}% expected)",
                c.inside,
                c.values,
                100.0 * f,
                100.0 * c.target
            );
        }
    }
    let _ = writeln!(s, "Overall: {}", if r.verdict.pass { "PASS" } else { "FAIL" });
    s
}

/// The profile file a raw scenario names (`cost.profile`), resolved against its folder.
pub(crate) fn profile_path(raw: &RawScenario) -> Option<PathBuf> {
    // As `load::resolve` finds it (the scenario's folder, else the working directory): a profile
    // given on the command line relative to the working directory was read for the run and then
    // not found for its intervals.
    let p = raw.json.get("cost")?.get("profile")?.as_str()?;
    Some(crate::load::resolve_path(&raw.base_dir, p))
}

/// The 90% intervals of a prediction `center` of `spec`, and where they came from: the
/// ensemble (or covariance) of the scenario's profile when it has one, simulated in
/// parallel (results in input order); else, when `uncalibrated` is asked, the uncalibrated
/// model's error on the validation corpus for the spec's GPU and engine. None otherwise.
/// `--model-error FAMILY=P90,...` (`calibrate --from-results`, `simulate`): the uncalibrated
/// model's 90% |error| per metric family, as fractions; empty when the flag is absent.
pub fn parse_model_error(spec: Option<&str>) -> Result<Vec<(&'static str, f64)>, String> {
    match spec {
        Some(spec) => calib::fit::parse_family_values(spec, "90% |error| ≥ 0, as a fraction", "ttft=0.9,tpot=0.2")
            .map_err(|e| format!("--model-error: {e}")),
        None => Ok(Vec::new()),
    }
}

pub fn intervals(
    raw: &RawScenario,
    spec: &SimSpec,
    center: &PointReport,
    uncalibrated: bool,
    model_error: &[(&str, f64)],
) -> Result<Option<(calib::named::Named<calib::uncertainty::Interval>, String)>, String> {
    use rayon::prelude::*;
    let Some(band) = crate::sweep::Band::of(raw, spec, uncalibrated || !model_error.is_empty())? else {
        return Ok(None);
    };
    let band = match band {
        crate::sweep::Band::Uncalibrated(u) => crate::sweep::Band::Uncalibrated(u.with_given(model_error)),
        _ if !model_error.is_empty() => {
            return Err("--model-error: the scenario has a profile with an uncertainty block, whose intervals carry their own model-error term (set it with `calibrate --model-error`)".into());
        }
        b => b,
    };
    let members: Vec<PointReport> = band.member_specs(spec).par_iter().map(calib::uncertainty::predict_point).collect();
    let (i, source) = band.named_intervals(center, &members);
    Ok(Some((i, source)))
}

/// A salt for this invocation's prompts: the clock's nanoseconds and the process id, mixed, in
/// 53 bits (a JSON number any reader holds exactly); never 0, which means "no salt".
fn invocation_salt() -> u64 {
    let ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut z = ns ^ (u64::from(std::process::id()) << 32) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) >> 11).max(1)
}

#[cfg(test)]
mod tests {
    use super::as_sent;
    use serde_json::json;

    /// A live fit's probes are simulated with the endpoint they were sent to; an endpoint the
    /// simulator does not price leaves the workload as it was (the scenario's default).
    #[test]
    fn a_probe_is_simulated_at_the_endpoint_it_was_sent_to() {
        let w = json!({"dataset_name": "random", "random_input_len": 64});
        assert_eq!(as_sent(&w, "/v1/chat/completions")["endpoint"], "/v1/chat/completions");
        assert_eq!(as_sent(&w, "/v1/completions")["endpoint"], "/v1/completions");
        // Token-id prompts on the completions endpoint: no server-side tokenization.
        assert_eq!(as_sent(&w, "/v1/completions")["tokenize_prompt"], true);
        let given = json!({"dataset_name": "random", "tokenize_prompt": true});
        assert_eq!(as_sent(&given, "/v1/chat/completions")["tokenize_prompt"], false);
        assert_eq!(as_sent(&w, "/generate").get("endpoint"), None);
        // What was there is kept.
        assert_eq!(as_sent(&w, "/v1/chat/completions")["random_input_len"], 64);
    }
}

fn is_interrupted(e: &calib::CalibError) -> bool {
    matches!(e, calib::CalibError::Measure(calib::MeasureError::Interrupted))
}

/// Ctrl-C during a live `calibrate` or `check`: said as `bench` says it (exit 130, where the
/// per-request files are), not as a usage error (it was "error: interrupted", exit 2).
fn interrupted(command: &str, dir: &std::path::Path, what: &str) -> ExitCode {
    eprintln!(
        "{command}: interrupted (Ctrl-C): {what}; the requests that completed are in the per-request files and run \
         records under {}",
        dir.display()
    );
    ExitCode::from(130)
}
