//! `servesim serve`: the simulator behind the HTTP interface the engines
//! have, so that real clients (`vllm bench serve`, `sglang.bench_serving`,
//! routers, `servesim bench`) can load-test a simulated engine.
//!
//! **The same engine code as the offline simulator**, driven by the wall
//! clock: the driver thread asks the engine to schedule a step, sleeps for the
//! step's modelled duration (divided by `time_scale`), and delivers the
//! tokens the step produced. Only the driver differs from `sim::simulation`.
//! The driver is an OS thread, not a tokio task: tokio's timer rounds every
//! sleep up to the next millisecond, which on 10 ms steps is a bias of 5–10%
//! (and made calibration against `serve` find a different engine than the
//! scenario's); a thread's sleep is good to tens of microseconds.
//!
//! Token counts: token-id prompts are exact; text is encoded with the
//! tokenizer.json given (exact, special tokens included), or else counts one
//! token per 4 bytes (rounded up), its contents the hashes of those 4-byte
//! pieces, so that identical text prefixes still share KV.
//!
//! Bounded and safe: loopback by default, a cap on request bodies (8 MiB)
//! and on concurrent connections (503 past it), 4xx answers for bad requests,
//! never a panic on input; SIGINT/SIGTERM end the server.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use sim::config::{EngineSpec, SimSpec};
use sim::engine::{Engine, ReqId, TokenOutput};
use sim::request::{RequestSpec, Segment};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 8 << 20;

/// How to serve.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub addr: SocketAddr,
    pub model: String,
    /// Simulated seconds per wall second (1: real time).
    pub time_scale: f64,
    pub max_connections: usize,
    /// Stop after this long (tests), or never.
    pub max_lifetime: Option<Duration>,
    /// Counts text prompts exactly (special tokens included, as the engines do).
    pub tokenizer: Option<Arc<tokenizers::Tokenizer>>,
}

/// Loads a tokenizer.json (or the one in a folder).
pub fn load_tokenizer(path: &std::path::Path) -> Result<tokenizers::Tokenizer, String> {
    let p = if path.is_dir() { path.join("tokenizer.json") } else { path.to_path_buf() };
    tokenizers::Tokenizer::from_file(&p).map_err(|e| format!("{}: not a tokenizer.json: {e}", p.display()))
}

/// A token delivered to a request's stream.
#[derive(Clone, Copy, Debug)]
struct TokenEvent {
    finished: bool,
}

struct NewRequest {
    spec: RequestSpec,
    tokens: mpsc::UnboundedSender<TokenEvent>,
    /// When the HTTP request was read (server-side TTFT and E2E count from here).
    arrived: Instant,
    /// When it reaches the engine: `arrived` + the modelled ingress (HTTP, tokenisation).
    ready: Instant,
}

/// Counters and histograms for `/metrics`.
#[derive(Default)]
struct Stats {
    running: usize,
    waiting: usize,
    kv_usage: f64,
    preemptions: u64,
    prefix_queries: u64,
    prefix_hits: u64,
    prompt_tokens: u64,
    generation_tokens: u64,
    requests_finished: u64,
    iteration_tokens: Histogram,
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
}

#[derive(Default, Clone)]
struct Histogram {
    bounds: Vec<f64>,
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &[f64]) -> Histogram {
        Histogram { bounds: bounds.to_vec(), counts: vec![0; bounds.len()], sum: 0.0, count: 0 }
    }
    fn observe(&mut self, v: f64) {
        for (b, c) in self.bounds.iter().zip(self.counts.iter_mut()) {
            if v <= *b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }
    fn render(&self, out: &mut String, name: &str, labels: &str) {
        out.push_str(&format!("# TYPE {name} histogram\n"));
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            out.push_str(&format!("{name}_bucket{{{labels},le=\"{b}\"}} {c}\n"));
        }
        out.push_str(&format!("{name}_bucket{{{labels},le=\"+Inf\"}} {}\n", self.count));
        out.push_str(&format!("{name}_sum{{{labels}}} {}\n", self.sum));
        out.push_str(&format!("{name}_count{{{labels}}} {}\n", self.count));
    }
}

// vLLM's buckets (`v1/metrics/loggers.py`) and SGLang's (`metrics/collector.py`).
const VLLM_TTFT: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
];
const VLLM_ITL: &[f64] =
    &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
const VLLM_E2E: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
];
const VLLM_ITER: &[f64] = &[1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0];
const SGL_TTFT: &[f64] =
    &[0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0];
const SGL_ITL: &[f64] = &[
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100, 0.200, 0.400,
    0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
];
const SGL_E2E: &[f64] = &[
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0, 600.0, 1200.0,
    1800.0, 2400.0,
];

struct Shared {
    spec: SimSpec,
    opts: ServeOptions,
    stats: Mutex<Stats>,
    new_requests: std::sync::mpsc::Sender<NewRequest>,
    conns: Semaphore,
    next_id: std::sync::atomic::AtomicU64,
    /// Engine time against the wall clock.
    clock: WallClock,
    /// The delivery model's constants (ingress); the driver owns the streaming queue's state.
    front_model: sim::delivery::FrontEnd,
}

/// Engine time (integer ns, what `sim::delivery` computes in) on the wall clock:
/// `time_scale` engine seconds per wall second from `base`.
#[derive(Clone, Copy, Debug)]
struct WallClock {
    base: Instant,
    scale: f64,
}

impl WallClock {
    fn ns(&self, t: Instant) -> u64 {
        (t.saturating_duration_since(self.base).as_secs_f64() * self.scale * 1e9).round() as u64
    }
    fn instant(&self, ns: u64) -> Instant {
        let d = ns as f64 / 1e9 / self.scale;
        self.base + Duration::from_secs_f64(d.min(1e9))
    }
}

fn is_sglang(spec: &SimSpec) -> bool {
    matches!(spec.engine, EngineSpec::Sglang(_))
}

fn max_model_len(spec: &SimSpec) -> u32 {
    match &spec.engine {
        EngineSpec::Vllm(c) => c.max_model_len,
        EngineSpec::Sglang(c) => c.context_length,
    }
}

/// Runs the server until SIGINT/SIGTERM (or `max_lifetime`). `ready` gets the bound address.
pub async fn serve(spec: SimSpec, opts: ServeOptions, ready: impl FnOnce(SocketAddr)) -> Result<(), String> {
    let listener = TcpListener::bind(opts.addr).await.map_err(|e| format!("--host/--port {}: {e}", opts.addr))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let (tx, rx) = std::sync::mpsc::channel();
    let sg = is_sglang(&spec);
    let stats = Stats {
        iteration_tokens: Histogram::new(VLLM_ITER),
        ttft: Histogram::new(if sg { SGL_TTFT } else { VLLM_TTFT }),
        itl: Histogram::new(if sg { SGL_ITL } else { VLLM_ITL }),
        e2e: Histogram::new(if sg { SGL_E2E } else { VLLM_E2E }),
        ..Default::default()
    };
    let shared = Arc::new(Shared {
        spec: spec.clone(),
        stats: Mutex::new(stats),
        new_requests: tx,
        conns: Semaphore::new(opts.max_connections),
        next_id: std::sync::atomic::AtomicU64::new(0),
        opts: opts.clone(),
        clock: WallClock { base: Instant::now(), scale: opts.time_scale.max(1e-6) },
        front_model: sim::delivery::FrontEnd::new(spec.cost.ingress_ns(), spec.cost.output_token_ns()),
    });
    let engine = sim::engine::build(&spec.engine);
    let sh = shared.clone();
    std::thread::Builder::new()
        .name("servesim-engine".into())
        .spawn(move || drive(engine, sh, rx))
        .map_err(|e| format!("cannot start the engine thread: {e}"))?;
    ready(addr);
    let deadline = opts.max_lifetime.map(|d| tokio::time::Instant::now() + d);
    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(|e| e.to_string())?;
    loop {
        let sleep_until = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            acc = listener.accept() => {
                let Ok((sock, _)) = acc else { continue };
                let sh = shared.clone();
                tokio::spawn(async move {
                    match sh.conns.try_acquire() {
                        Ok(_permit) => handle(sock, &sh).await,
                        Err(_) => {
                            let mut sock = sock;
                            let _ = sock.write_all(&response(503, "application/json", &error_json("too many connections"))).await;
                        }
                    }
                });
            }
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = sleep_until => break,
        }
    }
    Ok(())
}

/// The engine driver: the wall-clock twin of `sim::simulation::run`, on a
/// thread of its own. It ends when every sender is gone (the server stopped).
fn drive(mut engine: Box<dyn Engine + Send>, shared: Arc<Shared>, rx: std::sync::mpsc::Receiver<NewRequest>) {
    use std::sync::mpsc::RecvTimeoutError;
    let mut streams: Streams = BTreeMap::new();
    let mut next: ReqId = 0;
    let mut outs: Vec<TokenOutput> = Vec::new();
    // Requests still in ingress, in the order they were read.
    let mut ingress: std::collections::VecDeque<NewRequest> = std::collections::VecDeque::new();
    let scale = shared.opts.time_scale.max(1e-6);
    let Some(mut front) = FrontEnd::start(shared.front_model.clone(), shared.clock) else {
        return;
    };
    // Tokens of the last step held for the next one (engines with `output_lag`).
    let mut held: Vec<TokenOutput> = Vec::new();
    // Steps are laid on an absolute timeline, so that sleep overshoot and the
    // driver's own work do not accumulate: each step ends `duration` after
    // the previous one ended (or after the engine woke up from idle).
    let mut timeline = Instant::now();
    loop {
        loop {
            match rx.try_recv() {
                Ok(r) => ingress.push_back(r),
                Err(std::sync::mpsc::TryRecvError::Empty) => break,
                Err(std::sync::mpsc::TryRecvError::Disconnected) if ingress.is_empty() && streams.is_empty() => return,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
            }
        }
        let now = Instant::now();
        while ingress.front().is_some_and(|r| r.ready <= now) {
            let r = ingress.pop_front().expect("front");
            let id = next;
            next += 1;
            engine.add_request(id, &r.spec);
            streams.insert(id, (r.tokens, r.arrived, None, r.spec.prompt_len));
        }
        let (idle, shape) = {
            let plan = engine.schedule();
            (plan.is_empty(), plan.shape)
        };
        if idle {
            // The last step's held tokens go out now (see `output_lag`).
            if !front.send(Instant::now(), deliveries(&streams, &std::mem::take(&mut held))) {
                return;
            }
            publish(&shared, engine.as_ref());
            // Idle: wait for the next request to clear ingress, or for a new one.
            let got = match ingress.front() {
                Some(r) => rx.recv_timeout(r.ready.saturating_duration_since(Instant::now())),
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match got {
                Ok(r) => ingress.push_back(r),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) if ingress.is_empty() => return,
                Err(RecvTimeoutError::Disconnected) => {
                    if let Some(r) = ingress.front() {
                        sleep_until(r.ready);
                    }
                }
            }
            timeline = Instant::now();
            continue;
        }
        let dur_ns = shared.spec.cost.step_ns(&shape);
        publish(&shared, engine.as_ref());
        timeline = timeline.max(Instant::now() - Duration::from_millis(50))
            + Duration::from_secs_f64(dur_ns as f64 / 1e9 / scale);
        sleep_until(timeline);
        outs.clear();
        engine.finish_step(&mut outs);
        let now = Instant::now();
        let mut st = shared.stats.lock().expect("stats");
        st.iteration_tokens.observe(shape.total_tokens() as f64);
        for o in &outs {
            let Some(entry) = streams.get_mut(&o.id) else { continue };
            match entry.2 {
                None => {
                    st.ttft.observe((now - entry.1).as_secs_f64() * scale);
                    st.prompt_tokens += u64::from(entry.3);
                }
                Some(prev) => st.itl.observe((now - prev).as_secs_f64() * scale),
            }
            entry.2 = Some(now);
            st.generation_tokens += 1;
        }
        // Which tokens go out now and which wait for the next step: `sim::delivery`.
        if engine.output_lag() {
            let mut later = Vec::new();
            let _ = sim::delivery::split_lagged(&mut held, &mut outs, &mut later);
            held = later;
        }
        let events = deliveries(&streams, &outs);
        for o in outs.iter().filter(|o| o.finished) {
            let Some(entry) = streams.remove(&o.id) else { continue };
            st.e2e.observe((now - entry.1).as_secs_f64() * scale);
            st.requests_finished += 1;
        }
        drop(st);
        if !front.send(now, events) {
            return;
        }
    }
}

/// A token for a request's stream.
type Delivery = (mpsc::UnboundedSender<TokenEvent>, TokenEvent);

type Streams = BTreeMap<ReqId, (mpsc::UnboundedSender<TokenEvent>, Instant, Option<Instant>, u32)>;

/// The streams' tokens for `outs`.
fn deliveries(streams: &Streams, outs: &[TokenOutput]) -> Vec<Delivery> {
    outs.iter()
        .filter_map(|o| streams.get(&o.id).map(|e| (e.0.clone(), TokenEvent { finished: o.finished })))
        .collect()
}

/// The front end (detokenise and stream) on a thread of its own: each step's tokens reach
/// their streams when `sim::delivery::FrontEnd` (the simulation's streaming queue) says, on
/// the wall clock. It delays the tokens, not the engine's next step.
struct FrontEnd {
    tx: std::sync::mpsc::Sender<(Instant, Vec<Delivery>)>,
    model: sim::delivery::FrontEnd,
    clock: WallClock,
}

impl FrontEnd {
    fn start(model: sim::delivery::FrontEnd, clock: WallClock) -> Option<FrontEnd> {
        let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<Delivery>)>();
        std::thread::Builder::new()
            .name("servesim-frontend".into())
            .spawn(move || {
                while let Ok((at, events)) = rx.recv() {
                    sleep_until(at);
                    for (tx, ev) in events {
                        // A client that went away is not an error for the engine.
                        let _ = tx.send(ev);
                    }
                }
            })
            .ok()?;
        Some(FrontEnd { tx, model, clock })
    }

    /// Streams `events`, produced at `now`, after those already queued. False if the front
    /// end is gone.
    fn send(&mut self, now: Instant, events: Vec<Delivery>) -> bool {
        if events.is_empty() {
            return true;
        }
        let at = self.model.stream(self.clock.ns(now), events.len()).unwrap_or(u64::MAX);
        self.tx.send((self.clock.instant(at), events)).is_ok()
    }
}

/// Sleeps the thread until `t` (the kernel's timer slack, tens of microseconds, late).
fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

fn publish(shared: &Shared, engine: &dyn Engine) {
    let c = engine.counters();
    let mut st = shared.stats.lock().expect("stats");
    st.running = engine.num_running();
    st.waiting = engine.num_waiting();
    st.kv_usage = engine.kv_usage();
    st.preemptions = c.num_preemptions;
    st.prefix_queries = c.prefix_cache_queries;
    st.prefix_hits = c.prefix_cache_hits;
}

fn response(status: u16, ctype: &str, body: &str) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn error_json(msg: &str) -> String {
    json!({"object": "error", "message": msg, "type": "BadRequestError", "code": 400}).to_string()
}

/// Reads one request: (method, path, body), or an HTTP error to answer.
async fn read_request(sock: &mut TcpStream) -> Result<(String, String, Vec<u8>), (u16, String)> {
    let mut buf = Vec::with_capacity(4096);
    let mut tmp = [0u8; 16384];
    let head_end = loop {
        let n = tokio::time::timeout(Duration::from_secs(30), sock.read(&mut tmp))
            .await
            .map_err(|_| (400, "timeout reading the request".to_string()))?
            .map_err(|e| (400, e.to_string()))?;
        if n == 0 {
            return Err((400, "connection closed before a full request".into()));
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        if buf.len() > 64 * 1024 {
            return Err((413, "request head too large".into()));
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.lines();
    let mut first = lines.next().unwrap_or("").split_whitespace();
    let method = first.next().unwrap_or("").to_string();
    let path = first.next().unwrap_or("").split('?').next().unwrap_or("").to_string();
    let mut len = 0usize;
    for l in lines {
        let lower = l.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().map_err(|_| (400, "bad Content-Length".to_string()))?;
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            return Err((400, "chunked request bodies are not supported; send Content-Length".into()));
        }
    }
    if len > MAX_BODY_BYTES {
        return Err((413, format!("request body of {len} bytes exceeds the limit of {MAX_BODY_BYTES}")));
    }
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let n = tokio::time::timeout(Duration::from_secs(30), sock.read(&mut tmp))
            .await
            .map_err(|_| (400, "timeout reading the body".to_string()))?
            .map_err(|e| (400, e.to_string()))?;
        if n == 0 {
            return Err((400, "connection closed in the middle of the body".into()));
        }
        body.extend_from_slice(&tmp[..n]);
    }
    body.truncate(len);
    Ok((method, path, body))
}

async fn handle(mut sock: TcpStream, sh: &Shared) {
    let (method, path, body) = match read_request(&mut sock).await {
        Ok(r) => r,
        Err((code, msg)) => {
            let _ = sock.write_all(&response(code, "application/json", &error_json(&msg))).await;
            return;
        }
    };
    let spec = &sh.spec;
    let reply = match (method.as_str(), path.as_str()) {
        ("GET", "/health") => response(200, "application/json", "{}"),
        ("GET", "/version") => response(200, "application/json", &json!({"version": spec.engine.version().to_string()}).to_string()),
        ("GET", "/v1/models") => response(
            200,
            "application/json",
            &json!({"object": "list", "data": [{"id": sh.opts.model, "object": "model", "root": sh.opts.model, "owned_by": "servesim", "max_model_len": max_model_len(spec), "servesim_model_card": spec.model}]}).to_string(),
        ),
        ("GET", "/metrics") => response(200, "text/plain; version=0.0.4", &metrics_text(sh)),
        ("GET", "/get_server_info") if is_sglang(spec) => response(200, "application/json", &server_info(sh).to_string()),
        ("POST", "/v1/completions") | ("POST", "/v1/chat/completions") => {
            let chat = path.ends_with("chat/completions");
            match parse_completion(&body, chat, sh) {
                Ok(req) => return generate(sock, sh, req, chat).await,
                Err((code, msg)) => response(code, "application/json", &error_json(&msg)),
            }
        }
        (_, "/health" | "/version" | "/v1/models" | "/metrics" | "/v1/completions" | "/v1/chat/completions") => response(405, "application/json", &error_json("method not allowed")),
        _ => response(404, "application/json", &error_json(&format!("no route {path}"))),
    };
    let _ = sock.write_all(&reply).await;
}

struct Completion {
    prompt: Vec<Segment>,
    prompt_len: u32,
    max_tokens: u32,
    stream: bool,
    include_usage: bool,
    ignore_eos: bool,
}

fn text_segments(text: &str) -> Vec<Segment> {
    // One token per 4 bytes; contents = hash of the piece (identical text, identical tokens).
    text.as_bytes()
        .chunks(4)
        .map(|c| {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for &b in c {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
            Segment { key: h, len: 1 }
        })
        .collect()
}

fn encode(text: &str, sh: &Shared) -> Result<Vec<Segment>, (u16, String)> {
    match &sh.opts.tokenizer {
        Some(t) => {
            let e = t.encode(text, true).map_err(|e| (400, format!("the prompt could not be tokenized: {e}")))?;
            Ok(e.get_ids().iter().map(|&id| Segment { key: u64::from(id) ^ 0x7f4a_7c15, len: 1 }).collect())
        }
        None => Ok(text_segments(text)),
    }
}

fn parse_completion(body: &[u8], chat: bool, sh: &Shared) -> Result<Completion, (u16, String)> {
    let v: Value = serde_json::from_slice(body).map_err(|e| (400, format!("the body is not valid JSON: {e}")))?;
    let obj = v.as_object().ok_or((400, "the body must be a JSON object".to_string()))?;
    match obj.get("model") {
        Some(Value::String(m)) if *m == sh.opts.model => {}
        Some(Value::String(m)) => {
            return Err((404, format!("the model {m:?} does not exist; this server serves {:?}", sh.opts.model)))
        }
        Some(_) => return Err((400, "model: expected a string".into())),
        None => return Err((400, "model: required".into())),
    }
    let prompt: Vec<Segment> = if chat {
        let msgs = obj
            .get("messages")
            .and_then(Value::as_array)
            .ok_or((400, "messages: expected an array of {role, content}".to_string()))?;
        let mut text = String::new();
        for m in msgs {
            let c = m
                .get("content")
                .and_then(Value::as_str)
                .ok_or((400, "messages[].content: expected a string".to_string()))?;
            text.push_str(m.get("role").and_then(Value::as_str).unwrap_or("user"));
            text.push_str(": ");
            text.push_str(c);
            text.push('\n');
        }
        encode(&text, sh)?
    } else {
        match obj.get("prompt") {
            Some(Value::String(s)) => encode(s, sh)?,
            Some(Value::Array(a)) if a.iter().all(Value::is_u64) => {
                a.iter().map(|t| Segment { key: t.as_u64().unwrap_or(0) ^ 0x7f4a_7c15, len: 1 }).collect()
            }
            Some(Value::Array(a)) if a.len() == 1 && a[0].is_array() => a[0]
                .as_array()
                .ok_or((400, "prompt: expected token ids".to_string()))?
                .iter()
                .map(|t| {
                    t.as_u64()
                        .map(|x| Segment { key: x ^ 0x7f4a_7c15, len: 1 })
                        .ok_or((400, "prompt: token ids must be non-negative integers".to_string()))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err((400, "prompt: expected a string or a list of token ids".into())),
            None => return Err((400, "prompt: required".into())),
        }
    };
    if prompt.is_empty() {
        return Err((400, "the prompt is empty".into()));
    }
    let max_len = max_model_len(&sh.spec);
    let max_tokens = match obj.get("max_tokens").or(obj.get("max_completion_tokens")) {
        None | Some(Value::Null) => {
            if chat {
                256
            } else {
                16
            }
        }
        Some(v) => {
            let n = v.as_u64().ok_or((400, format!("max_tokens: expected a positive integer, got {v}")))?;
            if n == 0 || n > u64::from(max_len) {
                return Err((400, format!("max_tokens: must be between 1 and {max_len}, got {n}")));
            }
            n as u32
        }
    };
    let prompt_len = prompt.len() as u32;
    if u64::from(prompt_len) + u64::from(max_tokens) > u64::from(max_len) {
        return Err((400, format!("This model's maximum context length is {max_len} tokens; the request has {prompt_len} prompt tokens and asks for {max_tokens} more")));
    }
    let kv = sh.spec.engine.kv_capacity_tokens();
    if u64::from(prompt_len) + u64::from(max_tokens) >= kv {
        return Err((400, format!("the request needs {} KV tokens but the pool holds {kv}", prompt_len + max_tokens)));
    }
    let flag = |k: &str| obj.get(k).and_then(Value::as_bool);
    if obj.get("stream").is_some_and(|s| !s.is_boolean()) {
        return Err((400, "stream: expected a boolean".into()));
    }
    Ok(Completion {
        prompt,
        prompt_len,
        max_tokens,
        stream: flag("stream").unwrap_or(false),
        include_usage: obj
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false),
        ignore_eos: flag("ignore_eos").unwrap_or(false),
    })
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

async fn generate(mut sock: TcpStream, sh: &Shared, c: Completion, chat: bool) {
    let n = sh.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // Where EOS falls without ignore_eos: the scenario's output distribution, drawn per request.
    let output_len = if c.ignore_eos {
        c.max_tokens
    } else {
        sim::workload::eos_len(sh.spec.workload.output_len_dist, c.max_tokens, &mut sim::rng::stream(n, "serve.eos"))
    };
    let spec = RequestSpec {
        prompt: c.prompt,
        prompt_len: c.prompt_len,
        max_tokens: c.max_tokens,
        output_len,
        output_key: n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5151,
        arrival_ns: 0,
        priority: 0,
        ignore_eos: c.ignore_eos,
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    // Ingress (HTTP, tokenisation) as the cost model has it: the driver adds the request to
    // the engine once it has passed.
    let arrived = Instant::now();
    let ready = sh.clock.instant(sh.front_model.arrival(sh.clock.ns(arrived)).unwrap_or(u64::MAX));
    if sh.new_requests.send(NewRequest { spec, tokens: tx, arrived, ready }).is_err() {
        let _ = sock.write_all(&response(503, "application/json", &error_json("the engine stopped"))).await;
        return;
    }
    let id = format!("{}-{n}", if chat { "chatcmpl" } else { "cmpl" });
    let created = unix_now();
    let model = &sh.opts.model;
    let object = if chat { "chat.completion.chunk" } else { "text_completion" };
    let piece = |i: u32| format!(" t{i}");
    if c.stream {
        if sock.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n").await.is_err() {
            return;
        }
        let mut i = 0u32;
        while let Some(ev) = rx.recv().await {
            let finish = if ev.finished { Value::from("length") } else { Value::Null };
            let choice = if chat {
                json!({"index": 0, "delta": {"content": piece(i)}, "finish_reason": finish})
            } else {
                json!({"index": 0, "text": piece(i), "finish_reason": finish})
            };
            let chunk = json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]});
            if sock.write_all(format!("data: {chunk}\n\n").as_bytes()).await.is_err() {
                return; // the client went away; the engine finishes the request on its own
            }
            i += 1;
            if ev.finished {
                break;
            }
        }
        if c.include_usage {
            let usage = json!({"id": id, "object": object, "created": created, "model": model, "choices": [],
                "usage": {"prompt_tokens": c.prompt_len, "completion_tokens": i, "total_tokens": c.prompt_len + i}});
            let _ = sock.write_all(format!("data: {usage}\n\n").as_bytes()).await;
        }
        let _ = sock.write_all(b"data: [DONE]\n\n").await;
        let _ = sock.shutdown().await;
    } else {
        let mut i = 0u32;
        while let Some(ev) = rx.recv().await {
            i += 1;
            if ev.finished {
                break;
            }
        }
        let text: String = (0..i).map(piece).collect();
        let choice = if chat {
            json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"})
        } else {
            json!({"index": 0, "text": text, "finish_reason": "length"})
        };
        let body = json!({"id": id, "object": if chat { "chat.completion" } else { "text_completion" }, "created": created, "model": model,
            "choices": [choice], "usage": {"prompt_tokens": c.prompt_len, "completion_tokens": i, "total_tokens": c.prompt_len + i}});
        let _ = sock.write_all(&response(200, "application/json", &body.to_string())).await;
    }
}

fn server_info(sh: &Shared) -> Value {
    match &sh.spec.engine {
        EngineSpec::Sglang(c) => json!({
            "model_path": sh.opts.model,
            "served_model_name": sh.opts.model,
            "version": c.version.to_string(),
            "max_total_tokens": c.max_total_tokens,
            "max_total_num_tokens": c.max_total_tokens,
            "page_size": c.page_size,
            "max_running_requests": c.max_running_requests,
            "chunked_prefill_size": c.chunked_prefill_size.map(i64::from).unwrap_or(-1),
            "max_prefill_tokens": c.max_prefill_tokens,
            "schedule_policy": format!("{:?}", c.schedule_policy).to_lowercase(),
            "schedule_conservativeness": c.schedule_conservativeness,
            "disable_radix_cache": c.disable_radix_cache,
            "enable_mixed_chunk": c.enable_mixed_chunk,
            "disable_overlap_schedule": c.disable_overlap_schedule,
            "context_length": c.context_length,
        }),
        EngineSpec::Vllm(_) => Value::Null,
    }
}

fn metrics_text(sh: &Shared) -> String {
    let st = sh.stats.lock().expect("stats");
    let mut o = String::new();
    let model = &sh.opts.model;
    match &sh.spec.engine {
        EngineSpec::Vllm(c) => {
            let l = format!("engine=\"0\",model_name=\"{model}\"");
            o.push_str(&format!(
                "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{block_size=\"{}\",enable_prefix_caching=\"{}\",num_gpu_blocks=\"{}\",kv_cache_size_tokens=\"{}\",{l}}} 1.0\n",
                c.block_size,
                if c.enable_prefix_caching { "True" } else { "False" },
                c.num_gpu_blocks,
                u64::from(c.num_gpu_blocks) * u64::from(c.block_size)
            ));
            for (name, kind, v) in [
                ("vllm:num_requests_running", "gauge", st.running as f64),
                ("vllm:num_requests_waiting", "gauge", st.waiting as f64),
                ("vllm:kv_cache_usage_perc", "gauge", st.kv_usage),
                ("vllm:num_preemptions_total", "counter", st.preemptions as f64),
                ("vllm:prefix_cache_queries_total", "counter", st.prefix_queries as f64),
                ("vllm:prefix_cache_hits_total", "counter", st.prefix_hits as f64),
                ("vllm:prompt_tokens_total", "counter", st.prompt_tokens as f64),
                ("vllm:generation_tokens_total", "counter", st.generation_tokens as f64),
                ("vllm:request_success_total", "counter", st.requests_finished as f64),
            ] {
                o.push_str(&format!("# TYPE {} {kind}\n{name}{{{l}}} {v}\n", name.trim_end_matches("_total")));
            }
            st.iteration_tokens.render(&mut o, "vllm:iteration_tokens_total", &l);
            st.ttft.render(&mut o, "vllm:time_to_first_token_seconds", &l);
            st.itl.render(&mut o, "vllm:inter_token_latency_seconds", &l);
            st.e2e.render(&mut o, "vllm:e2e_request_latency_seconds", &l);
        }
        EngineSpec::Sglang(c) => {
            let l = format!("model_name=\"{model}\",tp_rank=\"0\"");
            let hit = if st.prefix_queries > 0 { st.prefix_hits as f64 / st.prefix_queries as f64 } else { 0.0 };
            for (name, kind, v) in [
                ("sglang:num_running_reqs", "gauge", st.running as f64),
                ("sglang:num_queue_reqs", "gauge", st.waiting as f64),
                ("sglang:token_usage", "gauge", st.kv_usage),
                ("sglang:max_total_num_tokens", "gauge", c.max_total_tokens as f64),
                ("sglang:page_size", "gauge", f64::from(c.page_size)),
                ("sglang:cache_hit_rate", "gauge", hit),
                ("sglang:num_retracted_requests_total", "counter", st.preemptions as f64),
                ("sglang:prompt_tokens_total", "counter", st.prefix_queries as f64),
                ("sglang:cached_tokens_total", "counter", st.prefix_hits as f64),
                ("sglang:generation_tokens_total", "counter", st.generation_tokens as f64),
                ("sglang:num_requests_total", "counter", st.requests_finished as f64),
            ] {
                o.push_str(&format!("# TYPE {} {kind}\n{name}{{{l}}} {v}\n", name.trim_end_matches("_total")));
            }
            st.ttft.render(&mut o, "sglang:time_to_first_token_seconds", &l);
            st.itl.render(&mut o, "sglang:inter_token_latency_seconds", &l);
            st.e2e.render(&mut o, "sglang:e2e_request_latency_seconds", &l);
        }
    }
    o
}
