//! `servesim serve`: the simulator behind the engines' HTTP interface.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use emulator::{self as serve, ServeOptions};

use crate::load;
use crate::ScenarioArgs;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Scenario file (JSON): engine, model, hardware and cost. The built-in default if omitted.
    pub scenario: Option<PathBuf>,
    /// Address to listen on: an IPv4 or IPv6 address (`::1` or `[::1]`) or a name such as `localhost`.
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
    /// Simulated seconds per wall second (2: twice as fast as the modelled engine); 0.001 to 100.
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Concurrent connections accepted; more are answered 503.
    #[arg(long, default_value_t = 4096)]
    pub max_connections: usize,
    /// Stop by itself after this many seconds, at most a year (default: run until SIGINT/SIGTERM).
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
    let (lo, hi) = serve::TIME_SCALE_RANGE;
    if !(a.time_scale >= lo && a.time_scale <= hi) {
        return Err(format!(
            "--time-scale: must be between {lo} and {hi}, got {} (beyond {hi} the host's scheduling jitter, tens of microseconds a sleep, becomes milliseconds of engine time)",
            a.time_scale
        ));
    }
    let max_lifetime = match a.max_lifetime {
        None => None,
        Some(s) if s > 0.0 && s <= serve::MAX_LIFETIME_S => Some(Duration::from_secs_f64(s)),
        Some(s) => {
            return Err(format!(
                "--max-lifetime: must be a number of seconds above 0 and at most {} (a year), got {s}",
                serve::MAX_LIFETIME_S
            ))
        }
    };
    if a.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
        return Err(format!(
            "--model: the served model name is empty ({:?}); give a name, or leave --model out to serve the scenario's model card id",
            a.model.as_deref().unwrap_or_default()
        ));
    }
    if a.max_connections == 0 {
        return Err("--max-connections: must be at least 1".into());
    }
    let mut raw = load::read_raw(a.scenario.as_deref())?;
    load::apply_overrides(&mut raw, &a.common.sets, a.common.seed)?;
    let (_, spec) = load::resolve(&raw)?;
    refuse_replicas(&spec).map_err(|e| format!("{}: {e}", raw.origin))?;
    let addr = socket_addr(&a.host, a.port)?;
    let model = a.model.clone().unwrap_or_else(|| spec.model.id.clone());
    let opts = ServeOptions {
        addr,
        model: model.clone(),
        time_scale: a.time_scale,
        max_connections: a.max_connections,
        max_lifetime,
        tokenizer,
        handle_signals: true,
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

/// `serve` emulates one engine behind one front end: a `fleet` (replicas behind a router) or a
/// data-parallel engine (`data_parallel_size` / `dp_size` > 1) would be served as a single
/// engine with a single pool, a server that does not exist. Refused, naming the field.
fn refuse_replicas(spec: &sim::config::SimSpec) -> Result<(), String> {
    let Some(f) = &spec.fleet else { return Ok(()) };
    let n = f.replicas.len();
    Err(match f.kind {
        sim::config::FleetKind::Fleet => format!(
            "fleet: serve emulates one engine, not a fleet of {n} replicas behind a router (serve one replica's scenario per port, or use `servesim simulate` for the fleet)"
        ),
        sim::config::FleetKind::DataParallel => format!(
            "engine.data_parallel_size (dp_size) = {n}: serve emulates one engine, not {n} data-parallel engines behind one front end (serve with data_parallel_size 1, or use `servesim simulate`)"
        ),
    })
}

/// `--host` and `--port` as an address: an IP address (IPv6 with or without brackets) or
/// a name, resolved (`localhost`).
fn socket_addr(host: &str, port: u16) -> Result<SocketAddr, String> {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    use std::net::ToSocketAddrs;
    let mut addrs: Vec<SocketAddr> = (bare, port)
        .to_socket_addrs()
        .map_err(|e| format!("--host {host}: not an IP address or a name that resolves: {e}"))?
        .collect();
    // IPv4 first, as `localhost` usually means to a client.
    addrs.sort_by_key(|a| !a.is_ipv4());
    addrs.into_iter().next().ok_or_else(|| format!("--host {host}: the name resolves to no address"))
}
