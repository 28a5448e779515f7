//! `servesim serve`: the simulator behind the HTTP interface the engines
//! have, so that real clients (`vllm bench serve`, `sglang.bench_serving`,
//! routers, `servesim bench`) can load-test a simulated engine.
//!
//! * [`driver`] — **the same engine code as the offline simulator**
//!   (`sim::engine::build`) and the same delivery model (`sim::delivery`:
//!   ingress, output lag, the streaming queue), stepped on engine time taken
//!   from a [`clock::Clock`]: the wall clock in production (a thread of its
//!   own, whose sleeps are good to tens of microseconds), a virtual clock in
//!   tests (exact and instant).
//! * [`http`] — **how `serve` streams**: hyper (HTTP/1.1, keep-alive), the
//!   routes, the request checks with the emulated engine's status codes, error
//!   bodies and messages (vLLM's, or SGLang's per release), the SSE chunks, aborts
//!   of clients that go away, the error event at shutdown.
//! * `metrics` — `/metrics` in the engine's names, buckets, HELP and TYPE lines.
//!
//! Times a client reads from the server (the latency histograms, `/generate`'s
//! `e2e_latency`) are in the time the client sees: engine time divided by
//! `--time-scale`, as a real engine measures them on the wall clock.
//!
//! Token counts: token-id prompts are exact; text is encoded with the
//! tokenizer.json given (exact, special tokens included), or else counts one
//! token per 4 bytes (rounded up), its contents the hashes of those 4-byte
//! pieces, so that identical text prefixes still share KV.
//!
//! Bounded and safe: loopback by default, a cap on request bodies (8 MiB)
//! and on concurrent connections (503 past it, except `GET /metrics` and
//! `GET /health`: a scrape of a loaded server succeeds, as on the engines, which
//! limit no connections), 4xx answers for bad requests,
//! never a panic on input; SIGINT/SIGTERM end the server, active streams with
//! an error event.

pub mod clock;
pub mod driver;
pub mod http;
mod metrics;
#[cfg(test)]
mod serve_fidelity_tests;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sim::config::{EngineSpec, SimSpec};
use tokio::net::TcpListener;

pub use clock::{Clock, VirtualClock, WallClock};

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 8 << 20;

/// The bounds of `--time-scale`: those of a scenario's `cost.time_scale`
/// ([`sim::config::TIME_SCALE_RANGE`], where the reason is given).
pub const TIME_SCALE_RANGE: (f64, f64) = sim::config::TIME_SCALE_RANGE;

/// The longest `--max-lifetime`, in seconds (a year).
pub const MAX_LIFETIME_S: f64 = 365.0 * 24.0 * 3600.0;

/// How to serve.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub addr: SocketAddr,
    pub model: String,
    /// Simulated seconds per wall second (1: real time); the wall clock only.
    pub time_scale: f64,
    pub max_connections: usize,
    /// Stop after this long (tests), or never.
    pub max_lifetime: Option<Duration>,
    /// Counts text prompts exactly (special tokens included, as the engines do).
    pub tokenizer: Option<Arc<tokenizers::Tokenizer>>,
    /// Stop on SIGINT/SIGTERM (the binary; not an in-process test).
    pub handle_signals: bool,
}

/// Loads a tokenizer.json (or the one in a folder).
pub fn load_tokenizer(path: &std::path::Path) -> Result<tokenizers::Tokenizer, String> {
    let p = if path.is_dir() { path.join("tokenizer.json") } else { path.to_path_buf() };
    tokenizers::Tokenizer::from_file(&p).map_err(|e| format!("{}: not a tokenizer.json: {e}", p.display()))
}

pub(crate) fn is_sglang(spec: &SimSpec) -> bool {
    matches!(spec.engine, EngineSpec::Sglang(_))
}

/// Runs the server on the wall clock until SIGINT/SIGTERM (or `max_lifetime`). `ready`
/// gets the bound address.
pub async fn serve(spec: SimSpec, opts: ServeOptions, ready: impl FnOnce(SocketAddr)) -> Result<(), String> {
    let clock = Arc::new(WallClock::new(opts.time_scale));
    serve_with_clock(spec, opts, clock, std::future::pending(), ready).await
}

/// Runs the server with engine time from `clock` until `stop` resolves (or a signal, or
/// `max_lifetime`). In-process tests use it with a [`VirtualClock`].
pub async fn serve_with_clock(
    spec: SimSpec,
    opts: ServeOptions,
    clock: Arc<dyn Clock>,
    stop: impl std::future::Future<Output = ()>,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), String> {
    let listener = TcpListener::bind(opts.addr).await.map_err(|e| format!("--host/--port {}: {e}", opts.addr))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let stats = Arc::new(Mutex::new(metrics::Stats::new(is_sglang(&spec))));
    let (tx, inbox) = driver::channel();
    let engine = sim::engine::build(&spec.engine);
    let front = sim::delivery::FrontEnd::new(spec.cost.ingress_ns(), spec.cost.output_token_ns())
        .with_serial_tokenizer(spec.cost.scaled_ns(engine.tokenizer_ns_per_prompt_token()));
    let setup = driver::DriverSetup {
        engine,
        cost: spec.cost.clone(),
        front,
        stats: stats.clone(),
        clock: clock.clone(),
        slack_ns: (0.05 * opts.time_scale * 1e9) as u64,
        sglang: is_sglang(&spec),
        iteration_prompt: driver::IterationPrompt::of(&spec),
        cached_on_readmission: driver::cached_on_readmission(&spec),
        time_scale: if opts.time_scale > 0.0 { opts.time_scale } else { 1.0 },
    };
    let engine_thread = std::thread::Builder::new()
        .name("servesim-engine".into())
        .spawn(move || driver::run(setup, inbox))
        .map_err(|e| format!("cannot start the engine thread: {e}"))?;
    let shared = Arc::new(http::Shared::new(spec, opts.clone(), stats, tx.clone(), clock));
    ready(addr);
    let deadline = opts.max_lifetime.map(|d| tokio::time::Instant::now() + d);
    let signals = async {
        if !opts.handle_signals {
            return std::future::pending::<()>().await;
        }
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    tokio::pin!(signals);
    tokio::pin!(stop);
    loop {
        let lifetime = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            acc = listener.accept() => {
                let Ok((sock, _)) = acc else { continue };
                http::spawn_connection(sock, shared.clone());
            }
            _ = &mut signals => break,
            _ = &mut stop => break,
            _ = lifetime => break,
        }
    }
    // Shutdown: no new connections; the driver ends every stream (each gets an error
    // event), and the handlers get a moment to write it.
    drop(listener);
    shared.shutting_down.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = tx.send(driver::Input(driver::Msg::Shutdown));
    drop(tx);
    let until = tokio::time::Instant::now() + Duration::from_secs(2);
    while shared.active_streams.load(std::sync::atomic::Ordering::SeqCst) > 0 && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = tokio::task::spawn_blocking(move || engine_thread.join()).await;
    Ok(())
}
