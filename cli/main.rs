//! The `servesim` command line.
//!
//! Each subcommand parses its flags (clap), loads what it needs from disk
//! (`load`), and hands plain data to the `sim` library, which does no IO.
//! Errors are printed as `error: FILE: FIELD: what was expected` and exit
//! with status 2; a run that did not complete exits with 1.

mod align;
mod bench_flags;
mod calib;
mod explain;
mod live;
mod load;
mod plan;
mod plot;
mod serve;
mod sweep;
mod tune;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use sim::report::TextOptions;
use sim::simulation::{RunOptions, StopReason};

#[derive(Parser, Debug)]
#[command(
    name = "servesim",
    version,
    about = "Predict how vLLM and SGLang behave under load, before touching the hardware."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// `allow_negative_numbers`: a negative value after a flag (`--concurrency -1`) reaches the
// flag's own check, which names the flag, instead of clap's tip to write `-- -1`.
#[derive(Subcommand, Debug)]
enum Cmd {
    /// Simulate one benchmark run and print what `vllm bench serve` would print for it.
    #[command(allow_negative_numbers = true)]
    Simulate(SimulateArgs),
    /// Simulate a run per concurrency (in parallel) and find the throughput knee.
    #[command(allow_negative_numbers = true)]
    Sweep(sweep::SweepArgs),
    /// Load-test a live server as `vllm bench serve` does, with the simulator's request list.
    #[command(allow_negative_numbers = true)]
    Bench(live::BenchArgs),
    /// Say what differs between the setups of two run records.
    #[command(allow_negative_numbers = true)]
    Diff(live::DiffArgs),
    /// Fit the cost model: live probes against a server, or existing results.
    #[command(allow_negative_numbers = true)]
    Calibrate(calib::CalibrateArgs),
    /// Run a sweep live and simulated with the same requests; error per metric.
    // `--goodput` comes with the workload flags check shares with bench, and is refused: hidden.
    #[command(allow_negative_numbers = true, mut_arg("goodput", |a| a.hide(true)))]
    Check(calib::CheckArgs),
    /// Explain why the metrics are what they are: KV limit, TTFT split, preemptions, the knee.
    #[command(allow_negative_numbers = true)]
    Explain(explain::ExplainArgs),
    /// What-if tuning: the best configuration under SLOs, the Pareto front, what broke which SLO.
    #[command(allow_negative_numbers = true)]
    Tune(tune::TuneArgs),
    /// The cheapest fleet (replicas × GPU × TP × prefill:decode split) that meets the SLOs.
    #[command(allow_negative_numbers = true)]
    Plan(plan::PlanArgs),
    /// Serve a simulated engine over the OpenAI-compatible API (and /metrics), in real time.
    #[command(allow_negative_numbers = true)]
    Serve(serve::ServeArgs),
    /// Run every published measurement in the repository, uncalibrated; error per row and group.
    #[command(allow_negative_numbers = true)]
    Validate(validate::ValidateArgs),
    /// Write a model card from a Hugging Face `config.json` (a dense full-attention model), to give inline.
    #[command(allow_negative_numbers = true)]
    Card(CardArgs),
}

/// `servesim card CONFIG.json --id ID`: the card `calibrate` derives from a served model's
/// `config.json`, printed as JSON, so that a model without a built-in card can be simulated
/// (`--set model=<the card>`). What a dense full-attention card cannot describe is refused
/// naming the config key (`calib::derive::model_card_from_config`).
#[derive(Args, Debug)]
pub struct CardArgs {
    /// The checkpoint's `config.json`.
    pub config: PathBuf,
    /// The card's `id`.
    #[arg(long)]
    pub id: String,
    /// The card's `hf_repo` (the Hugging Face repository), recorded in the card.
    #[arg(long)]
    pub hf_repo: Option<String>,
    /// Whether the model's tokenizer puts a BOS token before a text prompt (the card's
    /// `add_bos_token`). Read from the `tokenizer_config.json` (`add_bos_token`) or else the
    /// `tokenizer.json` (`post_processor`) beside the config where they are; required where
    /// neither is, and refused where it contradicts them.
    #[arg(long)]
    pub add_bos_token: Option<bool>,
}

fn card(a: CardArgs) -> Result<ExitCode, String> {
    let path = a.config.display().to_string();
    let text = std::fs::read_to_string(&a.config).map_err(|e| format!("{path}: cannot read: {e}"))?;
    let c: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{path}: not JSON: {e}"))?;
    if a.id.trim().is_empty() || a.id.chars().any(char::is_control) {
        return Err(format!("--id: {:?}: expected the card's name (as \"acme-chat-8b\")", a.id));
    }
    if a.hf_repo.as_deref().is_some_and(|r| r.trim().is_empty() || r.chars().any(char::is_control)) {
        return Err(format!(
            "--hf-repo: {:?}: expected the Hugging Face repository (as \"acme/chat-8b\")",
            a.hf_repo.unwrap_or_default()
        ));
    }
    // Card ids are matched as given, but one that differs from a built-in id by case alone
    // reads as that model's.
    if let Some(m) = sim::builtin::models()?.iter().find(|m| m.id.eq_ignore_ascii_case(&a.id) && m.id != a.id) {
        return Err(format!(
            "--id: {:?} differs from the built-in card {:?} by case alone: give the derived card an id of its own",
            a.id, m.id
        ));
    }
    if sim::builtin::models()?.iter().any(|m| m.id == a.id) {
        return Err(format!(
            "--id: {:?} is a built-in card's id: a card derived from {path} is another model's unless it is that one; \
             give it an id of its own (the built-in card is used by its id alone: --set model={})",
            a.id, a.id
        ));
    }
    // Whether the tokenizer adds a BOS: its files beside the config, or the flag.
    let dir = a.config.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    let dir = if dir.as_os_str().is_empty() { std::path::PathBuf::from(".") } else { dir };
    let read = ::live::tokenizer::tokenizer_adds_bos_in(&dir)?;
    let add_bos_token = match (a.add_bos_token, read) {
        (Some(given), Some(read)) if given != read => {
            return Err(format!(
                "--add-bos-token {given}: the tokenizer files in {} say {read} (tokenizer_config.json's add_bos_token, \
                 or else tokenizer.json's post_processor); drop the flag, or give the card for the tokenizer the \
                 server runs",
                dir.display()
            ))
        }
        (given, read) => given.or(read),
    };
    let mut card = ::calib::derive::model_card_from_config(&c, &path, &a.id, add_bos_token)?;
    card.hf_repo = a.hf_repo;
    card.sources = vec![path];
    println!("{}", serde_json::to_string_pretty(&card).map_err(|e| e.to_string())?);
    Ok(ExitCode::SUCCESS)
}

/// Flags shared by the commands that read a scenario.
#[derive(Args, Debug, Clone)]
pub struct ScenarioArgs {
    /// Override a scenario field by its path, e.g. `--set engine.max_num_seqs=64` (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub sets: Vec<String>,
    /// The workload seed (`workload.seed`).
    #[arg(long)]
    pub seed: Option<u64>,
}

#[derive(Args, Debug)]
struct SimulateArgs {
    /// Scenario file (JSON). Without one, the built-in default runs:
    /// the published RTX 5090 + Qwen2.5-7B + vLLM 0.28 setup.
    scenario: Option<PathBuf>,
    #[command(flatten)]
    common: ScenarioArgs,
    #[command(flatten)]
    bench: bench_flags::BenchFlags,
    /// Print the report as JSON (`vllm bench serve --save-result` keys plus the engine's).
    #[arg(long)]
    json: bool,
    /// Percentiles shown in the text report, as in `vllm bench serve`; those beyond p50, p90,
    /// p95 and p99 also add `p{p}_{metric}_ms` keys to `--json`.
    #[arg(long, default_value = "99", value_name = "P,P,...")]
    metric_percentiles: String,
    /// Metrics whose percentiles the text report shows.
    #[arg(long, default_value = "ttft,tpot,itl", value_name = "ttft,tpot,itl,e2el")]
    percentile_metrics: String,
    /// Write KV usage and running/waiting requests over time as SVG.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<String>,
    /// Put a 90% interval on every metric even without a profile (from the uncalibrated
    /// model's error on the validation corpus). With a profile that carries an uncertainty
    /// block (`servesim calibrate`), the intervals are always given.
    #[arg(long)]
    uncertainty: bool,
    /// With the uncalibrated interval: its 90% |error| per metric family (a fraction), for the
    /// families named, instead of the committed corpus' (`ttft=0.9,tpot=0.2`); implies
    /// `--uncertainty`. For a validation that leaves the judged set out (`calib/held_out.py`).
    #[arg(long, value_name = "FAMILY=P90,...")]
    model_error: Option<String>,
}

/// A comma-separated list; an empty item (`1,,2`, a trailing comma) is an error.
fn parse_list<T: std::str::FromStr>(flag: &str, s: &str) -> Result<Vec<T>, String> {
    s.split(',')
        .map(|x| {
            if x.trim().is_empty() {
                return Err(format!("{flag}: an empty item in {s:?}"));
            }
            x.trim().parse::<T>().map_err(|_| {
                // What was expected, in words (a negative count read "cannot read \"-1\" in \"-1\"").
                let what = match std::any::type_name::<T>() {
                    // Each flag says its own least value ("--concurrency: values must be at
                    // least 1"): "0 or more" here was then contradicted.
                    "u32" | "u64" | "usize" => "a whole number",
                    "f64" | "f32" => "a number",
                    _ => "a value of this flag",
                };
                format!("{flag}: cannot read {x:?} in {s:?} as {what}")
            })
        })
        .collect()
}

fn text_options(percentiles: &str, metrics: &str) -> Result<TextOptions, String> {
    let percentiles: Vec<f64> = parse_list("--metric-percentiles", percentiles)?;
    // `vllm bench serve` takes any list (numpy's percentiles): each in [0, 100].
    for p in &percentiles {
        if !(p.is_finite() && (0.0..=100.0).contains(p)) {
            return Err(format!("--metric-percentiles: {p} is not a percentile (expected a number from 0 to 100)"));
        }
    }
    let metrics: Vec<String> = parse_list("--percentile-metrics", metrics)?;
    for m in &metrics {
        if !["ttft", "tpot", "itl", "e2el"].contains(&m.as_str()) {
            return Err(format!("--percentile-metrics: unknown metric {m:?}; expected ttft, tpot, itl, e2el"));
        }
    }
    Ok(TextOptions { percentiles, metrics, goodput: None })
}

/// What `servesim simulate --json` prints: the run's report, then its 90% intervals when
/// asked for (`--uncertainty`) or given by the scenario's profile.
#[derive(serde::Serialize)]
struct SimulateReport {
    #[serde(flatten)]
    point: sim::report::PointReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    uncertainty: Option<::calib::uncertainty::ReportIntervals>,
}

fn simulate(a: SimulateArgs) -> Result<ExitCode, String> {
    let mut text_opts = text_options(&a.metric_percentiles, &a.percentile_metrics)?;
    text_opts.goodput = a.bench.goodput_slos()?;
    if let Some(p) = &a.plot {
        plot::check_path(p)?;
    }
    let mut raw = load::read_raw(a.scenario.as_deref())?;
    let sets = a.bench.with_sets(&a.common.sets)?;
    load::apply_overrides(&mut raw, &sets, a.common.seed).map_err(|e| a.bench.name_the_flag(e))?;
    let (_scenario, spec) = load::resolve(&raw).map_err(|e| a.bench.name_the_flag(e))?;
    let pb = plot::progress(u64::from(spec.workload.num_prompts), "simulating requests");
    let out = sim::simulation::simulate_observed(
        &spec,
        RunOptions { record_timeseries: a.plot.is_some(), ..Default::default() },
        &mut |p| pb.set_position(p.completed as u64),
    );
    pb.finish_and_clear();
    // A window the load did not outlast measured a thinning load, and one nothing completed in
    // measured nothing: no figures, the error.
    if let StopReason::WindowOutlastsLoad { .. } | StopReason::WindowEmpty { .. } = out.run.stop {
        let file = a.scenario.as_deref().map_or("the built-in default".into(), |p| p.display().to_string());
        return Err(format!("{file}: {}", out.run.stop.as_str()));
    }
    if let Some(path) = &a.plot {
        plot::timeseries(path, spec.name.as_deref().unwrap_or("simulation"), &out.run.timeseries)?;
    }
    let mut point = sim::report::PointReport::of(&spec, &out);
    // The percentiles asked for beyond the report's own go into `--json` too, under
    // `vllm bench serve`'s keys (`p99.9_ttft_ms`): they had been dropped from it unsaid.
    sim::report::with_percentiles(&mut point.bench, &out.run, &text_opts.percentiles);
    // `--goodput`: the report's `request_goodput` (`null` without, as vLLM writes it).
    if let Some(g) = &text_opts.goodput {
        sim::report::with_goodput(&mut point.bench, &out.run, g);
    }
    let model_error = calib::parse_model_error(a.model_error.as_deref())?;
    let intervals = calib::intervals(&raw, &spec, &point, a.uncertainty, &model_error)?;
    if a.json {
        let j = SimulateReport {
            uncertainty: intervals.as_ref().map(|(i, src)| ::calib::uncertainty::ReportIntervals::new(i, src)),
            point: point.with_caveat_runs(&spec, &out),
        };
        println!("{}", serde_json::to_string_pretty(&j).expect("serializable"));
        if out.run.stop != StopReason::Completed {
            eprintln!("warning: the run did not complete: {}", out.run.stop.as_str());
        }
    } else {
        print!("{}", sim::report::text(&spec, &out, &text_opts));
        if let Some((i, src)) = &intervals {
            println!("{}", ::calib::uncertainty::report_line(i, src));
        }
    }
    Ok(if out.run.stop == StopReason::Completed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Rust ignores SIGPIPE, so a `println!` to a closed pipe (`servesim sweep … | head`) panics.
/// The commands that only print take the default back: the shell's reader went away, and
/// the process ends as `cat` or `grep` would (status 141). The commands that talk to servers
/// keep it ignored: a peer closing a socket must be an error they handle, not their end.
fn default_sigpipe_for_printing(cmd: &Cmd) {
    let prints_only = matches!(
        cmd,
        Cmd::Simulate(_)
            | Cmd::Sweep(_)
            | Cmd::Diff(_)
            | Cmd::Explain(_)
            | Cmd::Tune(_)
            | Cmd::Plan(_)
            | Cmd::Validate(_)
            | Cmd::Card(_)
    );
    #[cfg(unix)]
    if prints_only {
        // SAFETY: `signal` with SIG_DFL for SIGPIPE, before any thread is started; no handler runs.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    #[cfg(not(unix))]
    let _ = prints_only;
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    default_sigpipe_for_printing(&cli.cmd);
    let r = match cli.cmd {
        Cmd::Simulate(a) => simulate(a),
        Cmd::Sweep(a) => sweep::run(a),
        Cmd::Bench(a) => live::bench(a),
        Cmd::Diff(a) => live::diff(a),
        Cmd::Calibrate(a) => calib::calibrate(a),
        Cmd::Check(a) => calib::check(a),
        Cmd::Explain(a) => explain::run(a),
        Cmd::Tune(a) => tune::run(a),
        Cmd::Plan(a) => plan::run(a),
        Cmd::Serve(a) => serve::run(a),
        Cmd::Validate(a) => validate::run(a),
        Cmd::Card(a) => card(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
