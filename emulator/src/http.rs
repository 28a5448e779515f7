//! **How `serve` streams.** The HTTP side: hyper (HTTP/1.1 with keep-alive), the routes
//! the engines have, the request checks with the status codes and error bodies of vLLM's
//! OpenAI server (SGLang's flat variant when emulating SGLang), the SSE chunks, aborts of
//! clients that go away, and the error event that ends a stream at shutdown.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use sim::config::{EngineSpec, SimSpec};
use sim::request::{RequestSpec, Segment};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};

use crate::clock::Clock;
use crate::driver::{Input, Msg, NewRequest, TokenEvent};
use crate::metrics::Stats;
use crate::{is_sglang, ServeOptions, MAX_BODY_BYTES};

/// What every connection shares.
pub struct Shared {
    spec: SimSpec,
    opts: ServeOptions,
    stats: Arc<Mutex<Stats>>,
    driver: Mutex<Sender<Input>>,
    conns: Arc<Semaphore>,
    next_id: AtomicU64,
    clock: Arc<dyn Clock>,
    pub(crate) shutting_down: AtomicBool,
    /// Streams whose handler has not finished writing.
    pub(crate) active_streams: AtomicUsize,
}

impl Shared {
    pub(crate) fn new(
        spec: SimSpec,
        opts: ServeOptions,
        stats: Arc<Mutex<Stats>>,
        driver: Sender<Input>,
        clock: Arc<dyn Clock>,
    ) -> Shared {
        let conns = Arc::new(Semaphore::new(opts.max_connections));
        Shared {
            spec,
            opts,
            stats,
            driver: Mutex::new(driver),
            conns,
            next_id: AtomicU64::new(0),
            clock,
            shutting_down: AtomicBool::new(false),
            active_streams: AtomicUsize::new(0),
        }
    }

    fn send(&self, m: Msg) -> bool {
        self.driver.lock().expect("driver").send(Input(m)).is_ok()
    }
}

/// A response body: all at once, or a stream of SSE chunks from a channel.
pub enum ServeBody {
    Full(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

impl Body for ServeBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            ServeBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ServeBody::Stream(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, ServeBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ServeBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            ServeBody::Full(None) => SizeHint::with_exact(0),
            ServeBody::Stream(_) => SizeHint::default(),
        }
    }
}

type Resp = Response<ServeBody>;

fn full(status: StatusCode, ctype: &str, body: String) -> Resp {
    Response::builder()
        .status(status)
        .header("content-type", ctype)
        .body(ServeBody::Full(Some(Bytes::from(body))))
        .expect("a valid response")
}

/// The error type names vLLM's server gives each status.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "BadRequestError",
        404 => "NotFoundError",
        405 => "MethodNotAllowedError",
        413 => "RequestEntityTooLargeError",
        503 => "ServiceUnavailableError",
        _ => "InternalServerError",
    }
}

/// An error body as the engine's server writes it: vLLM `{"error": {message, type, param,
/// code}}` (`ErrorResponse(error=ErrorInfo(...))`); SGLang the flat `{"object": "error",
/// message, type, param, code}`. `code` is the HTTP status.
fn error_value(sglang: bool, status: StatusCode, msg: &str) -> Value {
    let (t, c) = (error_type(status), status.as_u16());
    if sglang {
        json!({"object": "error", "message": msg, "type": t, "param": null, "code": c})
    } else {
        json!({"error": {"message": msg, "type": t, "param": null, "code": c}})
    }
}

fn error(sh: &Shared, status: StatusCode, msg: &str) -> Resp {
    full(status, "application/json", error_value(is_sglang(&sh.spec), status, msg).to_string())
}

/// How long a connection may take to send a request's headers, or its body once the headers
/// are in, before it is answered (408) or closed. hyper's header timer also runs on an idle
/// keep-alive connection, so it is longer than the clients' own idle limits (aiohttp's 15 s,
/// reqwest's 90 s): they close an idle pooled connection before the server does.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Serves one connection (keep-alive: any number of requests). Past `max_connections`
/// the connection is answered 503 and closed.
pub(crate) fn spawn_connection(sock: TcpStream, sh: Arc<Shared>) {
    tokio::spawn(async move {
        let _ = sock.set_nodelay(true);
        let io = hyper_util::rt::TokioIo::new(sock);
        let permit = sh.conns.clone().try_acquire_owned();
        let over = permit.is_err();
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let sh = sh.clone();
            async move {
                if over {
                    return Ok::<_, Infallible>(error(&sh, StatusCode::SERVICE_UNAVAILABLE, "too many connections"));
                }
                Ok(route(req, sh).await)
            }
        });
        // A client that sends part of its headers and stops is not answered forever: it would
        // hold a connection slot (`max_connections`) for as long as it stayed open.
        let _ = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(READ_TIMEOUT)
            .keep_alive(!over)
            .max_buf_size(64 * 1024)
            .serve_connection(io, service)
            .await;
        drop(permit);
    });
}

const ROUTES: &[&str] =
    &["/health", "/version", "/v1/models", "/metrics", "/get_server_info", "/v1/completions", "/v1/chat/completions"];

async fn route(req: Request<Incoming>, sh: Arc<Shared>) -> Resp {
    let spec = &sh.spec;
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    match (&method, path.as_str()) {
        (&Method::GET, "/health") => match sh.stats.lock().expect("stats").engine_error.clone() {
            None => full(StatusCode::OK, "application/json", "{}".into()),
            // The modelled engine stopped: the server is not healthy (vLLM's and SGLang's
            // /health fail once their engine has died).
            Some(e) => full(StatusCode::SERVICE_UNAVAILABLE, "application/json", json!({"error": e}).to_string()),
        },
        (&Method::GET, "/version") => {
            full(StatusCode::OK, "application/json", json!({"version": spec.engine.version().to_string()}).to_string())
        }
        (&Method::GET, "/v1/models") => full(
            StatusCode::OK,
            "application/json",
            json!({"object": "list", "data": [{"id": sh.opts.model, "object": "model", "root": sh.opts.model, "owned_by": "servesim", "max_model_len": max_model_len(spec), "servesim_model_card": spec.model, "servesim_hardware": spec.gpu.id, "servesim_time_scale": sh.opts.time_scale, "servesim_engine_args": engine_args(spec)}]}).to_string(),
        ),
        (&Method::GET, "/metrics") => {
            let text = crate::metrics::render(spec, &sh.opts.model, &sh.stats.lock().expect("stats"));
            full(StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8", text)
        }
        (&Method::GET, "/get_server_info") if is_sglang(spec) => {
            full(StatusCode::OK, "application/json", server_info(&sh).to_string())
        }
        (&Method::POST, "/v1/completions" | "/v1/chat/completions") => {
            let chat = path.ends_with("chat/completions");
            let declared = req.headers().get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
                return error(
                    &sh,
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("request body of {} bytes exceeds the limit of {MAX_BODY_BYTES}", declared.unwrap_or(0)),
                );
            }
            // A body that stops short of its Content-Length is answered 408 after READ_TIMEOUT.
            let read = tokio::time::timeout(READ_TIMEOUT, http_body_util::Limited::new(req.into_body(), MAX_BODY_BYTES).collect());
            let Ok(read) = read.await else {
                return error(
                    &sh,
                    StatusCode::REQUEST_TIMEOUT,
                    &format!("the request body did not arrive within {} s", READ_TIMEOUT.as_secs()),
                );
            };
            let body = match read {
                Ok(b) => b.to_bytes(),
                Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
                    return error(&sh, StatusCode::PAYLOAD_TOO_LARGE, &format!("request body exceeds the limit of {MAX_BODY_BYTES} bytes"))
                }
                Err(e) => return error(&sh, StatusCode::BAD_REQUEST, &format!("could not read the request body: {e}")),
            };
            if sh.shutting_down.load(Ordering::SeqCst) {
                return error(&sh, StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down");
            }
            match parse_completion(&body, chat, &sh) {
                Ok(c) => generate(sh.clone(), c, chat).await,
                Err((code, msg)) => error(&sh, code, &msg),
            }
        }
        (_, p) if ROUTES.contains(&p) && (p != "/get_server_info" || is_sglang(spec)) => {
            error(&sh, StatusCode::METHOD_NOT_ALLOWED, &format!("method {method} not allowed on {p}"))
        }
        _ => error(&sh, StatusCode::NOT_FOUND, &format!("no route {path}")),
    }
}

/// The scheduler's limits the emulated vLLM runs with, which a real vLLM server does not
/// expose (its start-up log's `non-default args:` line does): so that `calibrate` and `check`
/// describe the emulator without `--scenario` (they assumed vLLM's defaults, 256 running
/// requests where the emulator ran 32; the live-loop hunt of 2026-12-05). SGLang reports its
/// own in `/get_server_info`.
fn engine_args(spec: &SimSpec) -> Value {
    match &spec.engine {
        EngineSpec::Vllm(c) => json!({
            "max_num_seqs": c.max_num_seqs,
            "max_num_batched_tokens": c.max_num_batched_tokens,
            "long_prefill_token_threshold": c.long_prefill_token_threshold,
            "block_size": c.block_size,
            "max_model_len": c.max_model_len,
        }),
        EngineSpec::Sglang(_) => Value::Null,
    }
}

fn max_model_len(spec: &SimSpec) -> u32 {
    match &spec.engine {
        EngineSpec::Vllm(c) => c.max_model_len,
        EngineSpec::Sglang(c) => c.context_length,
    }
}

pub(crate) struct Completion {
    prompt: Vec<Segment>,
    /// The prompt came as token ids: the engine does not tokenize it.
    token_ids: bool,
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

type Bad = (StatusCode, String);

fn bad(msg: impl Into<String>) -> Bad {
    (StatusCode::BAD_REQUEST, msg.into())
}

fn encode(text: &str, sh: &Shared) -> Result<Vec<Segment>, Bad> {
    match &sh.opts.tokenizer {
        Some(t) => {
            let e = t.encode(text, true).map_err(|e| bad(format!("the prompt could not be tokenized: {e}")))?;
            Ok(e.get_ids().iter().map(|&id| Segment { key: u64::from(id) ^ 0x7f4a_7c15, len: 1 }).collect())
        }
        None => Ok(text_segments(text)),
    }
}

fn parse_completion(body: &[u8], chat: bool, sh: &Shared) -> Result<Completion, Bad> {
    let v: Value = serde_json::from_slice(body).map_err(|e| bad(format!("the body is not valid JSON: {e}")))?;
    let obj = v.as_object().ok_or_else(|| bad("the body must be a JSON object"))?;
    match obj.get("model") {
        Some(Value::String(m)) if *m == sh.opts.model => {}
        Some(Value::String(m)) => {
            return Err((
                StatusCode::NOT_FOUND,
                format!("The model `{m}` does not exist; this server serves `{}`", sh.opts.model),
            ))
        }
        // Optional in both engines' protocols: vLLM's `model: str | None = None` (the served
        // model), SGLang's default "default".
        None | Some(Value::Null) => {}
        Some(_) => return Err(bad("model: expected a string")),
    }
    // `n` > 1 (several choices per prompt) is not modelled: refused, as vLLM refuses what it
    // does not support, rather than answered with one choice.
    match obj.get("n") {
        None | Some(Value::Null) => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(n) if n.as_u64().is_some_and(|n| n > 1) => {
            return Err(bad(format!("n: only n=1 is supported by servesim serve, got {n}")))
        }
        Some(n) => return Err(bad(format!("n: expected a positive integer, got {n}"))),
    }
    let mut token_ids = false;
    let prompt: Vec<Segment> = if chat {
        let msgs = obj
            .get("messages")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("messages: expected an array of {role, content}"))?;
        let mut text = String::new();
        for (i, m) in msgs.iter().enumerate() {
            let c = message_text(i, m.get("content")).map_err(bad)?;
            text.push_str(m.get("role").and_then(Value::as_str).unwrap_or("user"));
            text.push_str(": ");
            text.push_str(&c);
            text.push('\n');
        }
        encode(&text, sh)?
    } else {
        let ids = |a: &Vec<Value>| -> Result<Vec<Segment>, Bad> {
            a.iter()
                .map(|t| {
                    t.as_u64()
                        .filter(|&x| x <= u64::from(u32::MAX))
                        .map(|x| Segment { key: x ^ 0x7f4a_7c15, len: 1 })
                        .ok_or_else(|| bad("prompt: token ids must be non-negative integers"))
                })
                .collect()
        };
        match obj.get("prompt") {
            Some(Value::String(s)) => encode(s, sh)?,
            Some(Value::Array(a)) if a.len() == 1 && a[0].is_array() => {
                token_ids = true;
                ids(a[0].as_array().expect("array"))?
            }
            Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => encode(a[0].as_str().expect("string"), sh)?,
            Some(Value::Array(a)) if a.iter().all(|x| x.is_array() || x.is_string()) && a.len() > 1 => {
                return Err(bad("prompt: a batch of prompts is not supported by servesim serve; send one per request"))
            }
            Some(Value::Array(a)) => {
                token_ids = true;
                ids(a)?
            }
            Some(_) => return Err(bad("prompt: expected a string or a list of token ids")),
            None => return Err(bad("prompt: required")),
        }
    };
    if prompt.is_empty() {
        return Err(bad("the prompt is empty"));
    }
    let max_len = max_model_len(&sh.spec);
    let kv = sh.spec.engine.kv_capacity_tokens();
    let prompt_len = u32::try_from(prompt.len()).map_err(|_| bad("the prompt is too long"))?;
    // A chat request's limit is `max_completion_tokens or max_tokens` (vLLM's
    // `ChatCompletionRequest.to_sampling_params`: the first unless absent, null or 0); a
    // completion has `max_tokens` only. A null is not given.
    let given = |k: &str| obj.get(k).filter(|v| !v.is_null());
    let (limit_field, limit) = match given("max_completion_tokens").filter(|v| chat && v.as_u64() != Some(0)) {
        Some(v) => ("max_completion_tokens", Some(v)),
        None => ("max_tokens", given("max_tokens")),
    };
    let max_tokens = match limit {
        None => {
            if chat {
                // A chat request without a limit may fill the rest of its context: vLLM's
                // `get_max_tokens` (max_model_len − prompt), SGLang's room up to its
                // `max_req_len` (the context and the pool, less one). At least one token; a
                // prompt with no room left is the context error below.
                let room = u64::from(max_len).min(kv.saturating_sub(1));
                room.saturating_sub(u64::from(prompt_len)).max(1) as u32
            } else {
                // `CompletionRequest.max_tokens` defaults to 16 in both engines.
                16
            }
        }
        Some(v) => {
            let n = v.as_u64().ok_or_else(|| bad(format!("{limit_field}: expected a positive integer, got {v}")))?;
            if n == 0 || n > u64::from(max_len) {
                return Err(bad(format!("{limit_field}: must be between 1 and {max_len}, got {n}")));
            }
            n as u32
        }
    };
    // vLLM from 0.32 shortens `max_tokens` to what the context leaves after the prompt
    // (`get_max_tokens`; through 0.31 `max_input_tokens` is max_model_len − max_tokens and such a
    // request is the 400 below): the run's own rule, `WorkloadParams::context_clamp`.
    let max_tokens = match sh.spec.workload.context_clamp {
        Some(m) if prompt_len < m => max_tokens.min(m - prompt_len),
        _ => max_tokens,
    };
    if u64::from(prompt_len) + u64::from(max_tokens) > u64::from(max_len) {
        return Err(bad(format!("This model's maximum context length is {max_len} tokens. However, you requested {} tokens ({prompt_len} in the messages, {max_tokens} in the completion). Please reduce the length of the messages or completion.", u64::from(prompt_len) + u64::from(max_tokens))));
    }
    if u64::from(prompt_len) + u64::from(max_tokens) >= kv {
        return Err(bad(format!("the request needs {} KV tokens but the pool holds {kv}", prompt_len + max_tokens)));
    }
    for k in ["stream", "ignore_eos"] {
        if obj.get(k).is_some_and(|s| !s.is_boolean() && !s.is_null()) {
            return Err(bad(format!("{k}: expected a boolean")));
        }
    }
    // The sampling parameters the engines refuse (vLLM's `SamplingParams._verify_args`, with its
    // messages), though servesim samples nothing: a request vLLM answers 400 is answered 400.
    let num = |k: &str| -> Result<Option<f64>, Bad> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| bad(format!("{k}: expected a number, got {v}"))),
        }
    };
    if let Some(t) = num("temperature")?.filter(|t| *t < 0.0) {
        return Err(bad(format!("temperature must be non-negative, got {t}.")));
    }
    if let Some(p) = num("top_p")?.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
        return Err(bad(format!("top_p must be in (0, 1], got {p}.")));
    }
    if let Some(m) = num("min_tokens")? {
        if m < 0.0 || m.fract() != 0.0 {
            return Err(bad(format!("min_tokens must be greater than or equal to 0, got {m}.")));
        }
        if m > f64::from(max_tokens) {
            return Err(bad(format!("min_tokens must be less than or equal to max_tokens={max_tokens}, got {m}.")));
        }
    }
    let flag = |k: &str| obj.get(k).and_then(Value::as_bool);
    Ok(Completion {
        prompt,
        token_ids,
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

/// Sends `Abort` to the driver when dropped armed: the client went away (hyper dropped
/// the handler or the stream's body) before the request finished.
struct AbortGuard {
    sh: Arc<Shared>,
    key: u64,
    armed: bool,
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        if self.armed {
            self.sh.send(Msg::Abort(self.key));
        }
    }
}

/// Counts a stream as active while its handler runs.
struct ActiveStream(Arc<Shared>);

impl Drop for ActiveStream {
    fn drop(&mut self) {
        self.0.active_streams.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn generate(sh: Arc<Shared>, c: Completion, chat: bool) -> Resp {
    let n = sh.next_id.fetch_add(1, Ordering::Relaxed);
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
        prompt_hashes: None,
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let arrived_ns = sh.clock.now_ns();
    let token_ids = c.token_ids;
    if !sh.send(Msg::Add(NewRequest { key: n, spec, tokens: tx, arrived_ns, chat, token_ids })) {
        return error(&sh, StatusCode::SERVICE_UNAVAILABLE, "the engine stopped");
    }
    let mut guard = AbortGuard { sh: sh.clone(), key: n, armed: true };
    let id = format!("{}-{n}", if chat { "chatcmpl" } else { "cmpl" });
    let created = unix_now();
    let model = sh.opts.model.clone();
    let object = if chat { "chat.completion.chunk" } else { "text_completion" };
    let piece = |i: u32| format!(" t{i}");
    let reason = |ev: &TokenEvent| if ev.stop { "stop" } else { "length" };
    if !c.stream {
        let mut i = 0u32;
        let mut last = None;
        while let Some(ev) = rx.recv().await {
            sh.clock.release(); // the client cannot count tokens it does not see
            i += 1;
            if ev.finished {
                last = Some(ev);
                break;
            }
        }
        guard.armed = false;
        let Some(last) = last else {
            return error(&sh, StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down; the request was aborted");
        };
        let text: String = (0..i).map(piece).collect();
        let choice = if chat {
            json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason(&last)})
        } else {
            json!({"index": 0, "text": text, "finish_reason": reason(&last)})
        };
        let body = json!({"id": id, "object": if chat { "chat.completion" } else { "text_completion" }, "created": created, "model": model,
            "choices": [choice], "usage": {"prompt_tokens": c.prompt_len, "completion_tokens": i, "total_tokens": c.prompt_len + i}});
        return full(StatusCode::OK, "application/json", body.to_string());
    }
    let (body_tx, body_rx) = mpsc::channel::<Bytes>(64);
    sh.active_streams.fetch_add(1, Ordering::SeqCst);
    let active = ActiveStream(sh.clone());
    let sglang = is_sglang(&sh.spec);
    let clock = sh.clock.clone();
    tokio::spawn(async move {
        let _active = active;
        let mut guard = guard;
        let mut i = 0u32;
        let send = |b: String| body_tx.send(Bytes::from(b));
        loop {
            let ev = tokio::select! {
                ev = rx.recv() => ev,
                // The client went away (hyper dropped the body): the guard aborts the request.
                _ = body_tx.closed() => return,
            };
            let Some(ev) = ev else {
                // The engine ended the stream before its last token: the server is shutting
                // down. vLLM's stream generator writes the error as a data event, then
                // `[DONE]` (`completion/serving.py`: `except Exception` ... `yield "data: [DONE]"`).
                guard.armed = false;
                let err = error_value(
                    sglang,
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the server is shutting down; the request was aborted",
                );
                // SGLang wraps its flat error body in `{"error": ...}` inside a stream
                // (`create_streaming_error_response`: `json.dumps({"error": error.model_dump()})`).
                let err = if sglang { json!({ "error": err }) } else { err };
                let _ = send(format!("data: {err}\n\n")).await;
                let _ = send("data: [DONE]\n\n".to_string()).await;
                return;
            };
            if chat && i == 0 {
                // vLLM and SGLang open a chat stream with a chunk naming the role, written with
                // the first output just before its token (vLLM's `first_iteration`, SGLang's
                // `is_firsts`); `vllm bench serve` before 0.33 times it as the first token.
                let role = json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null});
                let chunk = json!({"id": id, "object": object, "created": created, "model": model, "choices": [role]});
                if send(format!("data: {chunk}\n\n")).await.is_err() {
                    clock.release(); // nobody will read it
                    return;
                }
            }
            let finish = if ev.finished { Value::from(reason(&ev)) } else { Value::Null };
            let choice = if chat {
                json!({"index": 0, "delta": {"content": piece(i)}, "finish_reason": finish})
            } else {
                json!({"index": 0, "text": piece(i), "finish_reason": finish})
            };
            let chunk = json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]});
            if send(format!("data: {chunk}\n\n")).await.is_err() {
                clock.release(); // nobody will read it
                return;
            }
            i += 1;
            if ev.finished {
                break;
            }
        }
        guard.armed = false;
        if c.include_usage {
            let usage = json!({"id": id, "object": object, "created": created, "model": model, "choices": [],
                "usage": {"prompt_tokens": c.prompt_len, "completion_tokens": i, "total_tokens": c.prompt_len + i}});
            let _ = send(format!("data: {usage}\n\n")).await;
        }
        let _ = send("data: [DONE]\n\n".to_string()).await;
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream; charset=utf-8")
        .header("cache-control", "no-cache")
        .body(ServeBody::Stream(body_rx))
        .expect("a valid response")
}

/// SGLang's `--max-total-tokens` as given (the pool it sets, where it binds, is page-aligned),
/// else none.
fn given_max_total_tokens(kv: &sim::config::KvSizing) -> Option<u64> {
    kv.bound_given.filter(|(flag, _)| *flag == "max_total_tokens").map(|(_, v)| v)
}

fn server_info(sh: &Shared) -> Value {
    match &sh.spec.engine {
        EngineSpec::Sglang(c) => json!({
            "model_path": sh.opts.model,
            "served_model_name": sh.opts.model,
            "version": c.version.to_string(),
            // `server_args.max_total_tokens` is the flag (null when not given: SGLang sizes the
            // pool from memory, bounded by the flag when it is); the pool is `max_total_num_tokens`.
            "max_total_tokens": given_max_total_tokens(&sh.spec.kv_sizing),
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

/// The text of message `i`'s `content`: a string, or a list of text parts
/// (`[{"type": "text", "text": ...}]`, what `vllm bench serve --backend openai-chat` sends),
/// whose texts are joined with newlines as vLLM joins them for a string chat template
/// (`_parse_chat_message_content_parts`). Other parts (images, audio) are not modelled: an
/// error naming the part and its type.
fn message_text(i: usize, content: Option<&Value>) -> Result<String, String> {
    match content {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, p) in parts.iter().enumerate() {
                let at = format!("messages[{i}].content[{j}]");
                match p.get("type").and_then(Value::as_str) {
                    Some("text") => match p.get("text") {
                        Some(Value::String(t)) => texts.push(t.as_str()),
                        _ => return Err(format!("{at}.text: expected a string")),
                    },
                    Some(t) => {
                        return Err(format!(
                            "{at}.type: only \"text\" parts are supported by servesim serve, got {t:?}"
                        ))
                    }
                    None => return Err(format!("{at}: expected a {{\"type\": \"text\", \"text\": ...}} part")),
                }
            }
            Ok(texts.join("\n"))
        }
        _ => Err(format!("messages[{i}].content: expected a string or a list of text parts")),
    }
}
