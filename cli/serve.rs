//! `servesim serve`: the simulator behind the engines' HTTP interface.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use emulator::{self as serve, ServeOptions};
use clap::Args;

use crate::load;
use crate::ScenarioArgs;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Scenario file (JSON): engine, model, hardware and cost. The built-in default if omitted.
    pub scenario: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0: any free port; the one taken is printed).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// The served model name (default: the scenario's model card id).
    #[arg(long)]
    pub model: Option<String>,
    /// A tokenizer.json (or a folder holding one) to count text prompts exactly; without it, text counts one token per 4 bytes.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Simulated seconds per wall second (2: twice as fast as the modelled engine).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Concurrent connections accepted; more are answered 503.
    #[arg(long, default_value_t = 4096)]
    pub max_connections: usize,
    /// Stop by itself after this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long)]
    pub max_lifetime: Option<f64>,
    #[command(flatten)]
    pub common: ScenarioArgs,
}

pub fn run(a: ServeArgs) -> Result<ExitCode, String> {
    let tokenizer = match &a.tokenizer {
        Some(p) => Some(std::sync::Arc::new(live::tokenizer::load(p).map_err(|e| format!("--tokenizer {e}"))?)),
        None => None,
    };
    if !(a.time_scale > 0.0 && a.time_scale.is_finite()) {
        return Err(format!("--time-scale: must be > 0, got {}", a.time_scale));
    }
    if a.max_connections == 0 {
        return Err("--max-connections: must be at least 1".into());
    }
    let mut raw = load::read_raw(a.scenario.as_deref())?;
    load::apply_overrides(&mut raw, &a.common.sets, a.common.seed)?;
    let (_, spec) = load::resolve(&raw)?;
    let addr: SocketAddr = format!("{}:{}", a.host, a.port).parse().map_err(|e| format!("--host {}: {e}", a.host))?;
    let model = a.model.clone().unwrap_or_else(|| spec.model.id.clone());
    let opts = ServeOptions {
        addr,
        model: model.clone(),
        time_scale: a.time_scale,
        max_connections: a.max_connections,
        max_lifetime: a.max_lifetime.map(Duration::from_secs_f64),
        tokenizer,
    };
    let kind = spec.engine.kind();
    let version = spec.engine.version();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(serve::serve(spec, opts, |bound| {
        eprintln!("servesim serve: listening on http://{bound} (model {model}, {kind} {version} simulated)");
    }))?;
    Ok(ExitCode::SUCCESS)
}
