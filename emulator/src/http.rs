//! **How `serve` streams.** The HTTP side: hyper (HTTP/1.1 with keep-alive), the routes
//! the engines have, the request checks with the status codes and error bodies of vLLM's
//! OpenAI server, or of SGLang's when emulating SGLang (its flat body, its tokenizer manager's
//! messages, its stream errors per release: `BadKind`), the SSE chunks, aborts of clients
//! that go away, and the error event that ends a stream at shutdown.

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

/// The routes a connection past `max_connections` is still answered on: a monitoring scrape
/// (`GET /metrics`) and a health check (`GET /health`). vLLM's and SGLang's servers limit no
/// connections (uvicorn's `--limit-concurrency` is unset by both), so a scrape of a loaded engine
/// succeeds; `--max-connections` protects servesim itself from streams it cannot hold, and
/// these two answers are small and cannot start one.
fn exempt_from_connection_limit(req: &Request<Incoming>) -> bool {
    req.method() == Method::GET && matches!(req.uri().path(), "/health" | "/metrics")
}

/// Serves one connection (keep-alive: any number of requests). Past `max_connections`
/// the connection is answered 503 and closed, except on the monitoring routes
/// ([`exempt_from_connection_limit`]), answered as usual before the connection closes.
pub(crate) fn spawn_connection(sock: TcpStream, sh: Arc<Shared>) {
    tokio::spawn(async move {
        let _ = sock.set_nodelay(true);
        let io = hyper_util::rt::TokioIo::new(sock);
        let permit = sh.conns.clone().try_acquire_owned();
        let over = permit.is_err();
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let sh = sh.clone();
            async move {
                if over && !exempt_from_connection_limit(&req) {
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

const ROUTES: &[&str] = &[
    "/health",
    "/version",
    "/v1/models",
    "/metrics",
    "/get_server_info",
    "/generate",
    "/v1/completions",
    "/v1/chat/completions",
];

/// The routes only SGLang has: vLLM answers them 404.
const SGLANG_ROUTES: &[&str] = &["/get_server_info", "/generate"];

/// Reads a request's body within [`MAX_BODY_BYTES`] and [`READ_TIMEOUT`]; refuses it once
/// the server is shutting down.
async fn read_body(req: Request<Incoming>, sh: &Shared) -> Result<Bytes, Resp> {
    let declared = req.headers().get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(error(
            sh,
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("request body of {} bytes exceeds the limit of {MAX_BODY_BYTES}", declared.unwrap_or(0)),
        ));
    }
    // A body that stops short of its Content-Length is answered 408 after READ_TIMEOUT.
    let read =
        tokio::time::timeout(READ_TIMEOUT, http_body_util::Limited::new(req.into_body(), MAX_BODY_BYTES).collect());
    let Ok(read) = read.await else {
        return Err(error(
            sh,
            StatusCode::REQUEST_TIMEOUT,
            &format!("the request body did not arrive within {} s", READ_TIMEOUT.as_secs()),
        ));
    };
    let body = match read {
        Ok(b) => b.to_bytes(),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            return Err(error(
                sh,
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("request body exceeds the limit of {MAX_BODY_BYTES} bytes"),
            ))
        }
        Err(e) => return Err(error(sh, StatusCode::BAD_REQUEST, &format!("could not read the request body: {e}"))),
    };
    if sh.shutting_down.load(Ordering::SeqCst) {
        return Err(error(sh, StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down"));
    }
    Ok(body)
}

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
            let body = match read_body(req, &sh).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            match parse_completion(&body, chat, &sh) {
                Ok(c) => generate(sh.clone(), c, chat).await,
                Err(b) => completion_refusal(&sh, &body, b),
            }
        }
        // SGLang's native route (`http_server.py`, `generate_request`: POST and PUT), which
        // `sglang.bench_serving --backend sglang` posts to. vLLM has none.
        (&Method::POST | &Method::PUT, "/generate") if is_sglang(spec) => {
            let body = match read_body(req, &sh).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            match parse_generate(&body, &sh) {
                Ok(g) => generate_native(sh.clone(), g).await,
                Err(e) => native_refusal(e),
            }
        }
        (_, p) if ROUTES.contains(&p) && (!SGLANG_ROUTES.contains(&p) || is_sglang(spec)) => {
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
    /// `min_tokens` (vLLM) or `min_new_tokens` (SGLang): no EOS before this many output tokens.
    min_tokens: u32,
    /// The `model` a response names when it is not the served one: SGLang writes the request's
    /// (`model=request.model`, or `"default"` when none was sent); vLLM refuses another.
    model: Option<String>,
}

impl Completion {
    /// A request with the body's `stream` and `ignore_eos` (each false when absent); no usage
    /// chunk and no `min_tokens` (the caller sets those it has checked).
    fn with_flags(
        obj: &serde_json::Map<String, Value>,
        prompt: Vec<Segment>,
        token_ids: bool,
        prompt_len: u32,
        max_tokens: u32,
        model: Option<String>,
    ) -> Completion {
        let flag = |k: &str| obj.get(k).and_then(Value::as_bool);
        Completion {
            prompt,
            token_ids,
            prompt_len,
            max_tokens,
            stream: flag("stream").unwrap_or(false),
            include_usage: false,
            ignore_eos: flag("ignore_eos").unwrap_or(false),
            min_tokens: 0,
            model,
        }
    }
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

/// How SGLang's OpenAI server answers a refusal of each kind (vLLM answers each with its
/// status and [`error_type`]). Read in the 0.4.10, 0.5.6, 0.5.10 and 0.5.23 wheels
/// (`entrypoints/http_server.py`, `entrypoints/openai/serving_base.py`,
/// `serving_completions.py`, `serving_chat.py`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BadKind {
    /// The body against the request's model (FastAPI's pydantic validation: not JSON, a field
    /// of the wrong type, a required field missing): `validation_exception_handler` answers 400
    /// `{"object": "error", message, "type": "Bad Request", "param": null, "code": 400}`.
    /// servesim's message names the field; pydantic's own text is not reproduced.
    Schema,
    /// A `ValueError` of the tokenizer manager (the context, `SamplingParams.verify`): the
    /// handler's `create_error_response(str(e))`, 400 with type `BadRequestError`. Streamed,
    /// through 0.5.9 the stream has begun (status 200) and the error is its event
    /// (`create_streaming_error_response`, `data: {"error": {...}}`, then `data: [DONE]`);
    /// from 0.5.10 the handler awaits the first chunk before answering (the "kick-start"),
    /// so the error is a plain 400 ([`SGLANG_STREAM_ERRORS_BEFORE_200`]).
    Value,
    /// `_validate_request`'s refusals and servesim's own (what it does not model): 400
    /// `BadRequestError`, before any stream.
    Plain,
}

/// A refused request: its status, its message, and how SGLang's server classes it.
pub(crate) struct Bad {
    status: StatusCode,
    msg: String,
    kind: BadKind,
}

/// A body that does not fit the request's schema (wrong type, missing field).
fn bad(msg: impl Into<String>) -> Bad {
    Bad { status: StatusCode::BAD_REQUEST, msg: msg.into(), kind: BadKind::Schema }
}

/// A refusal of what servesim does not model, or of SGLang's `_validate_request`.
fn plain(msg: impl Into<String>) -> Bad {
    Bad { status: StatusCode::BAD_REQUEST, msg: msg.into(), kind: BadKind::Plain }
}

/// The first SGLang release whose OpenAI handlers await a stream's first chunk before
/// answering (`_handle_streaming_request`: "Kick-start the generator to trigger validation
/// before HTTP 200 is sent"; absent from the 0.5.9 wheel, present in 0.5.10's).
const SGLANG_STREAM_ERRORS_BEFORE_200: sim::engine::Version = sim::engine::Version::new(0, 5, 10);

/// The first SGLang release whose `CompletionRequest` and `ChatCompletionRequest` default
/// `model` to `"default"` (`DEFAULT_MODEL_NAME`); through 0.5.1 it is required (`model: str`;
/// read in the 0.5.1 and 0.5.2 wheels).
const SGLANG_MODEL_OPTIONAL: sim::engine::Version = sim::engine::Version::new(0, 5, 2);

/// The first SGLang release whose chat limit is `max_completion_tokens or max_tokens`
/// (`ChatCompletionRequest.to_sampling_params`, `"max_new_tokens"`); through 0.5.8 it is
/// `max_tokens or max_completion_tokens` (`protocol.py` of 0.5.6–0.5.8, `serving_chat.py`'s
/// `_build_sampling_params` in 0.4.10; read in the 0.4.10, 0.5.6, 0.5.7, 0.5.8, 0.5.9, 0.5.10
/// and 0.5.23 wheels).
const SGLANG_CHAT_LIMIT_COMPLETION_FIRST: sim::engine::Version = sim::engine::Version::new(0, 5, 9);

/// The answer to a refused `/v1/completions` or `/v1/chat/completions` request, in the
/// engine's form ([`BadKind`] for SGLang's).
fn completion_refusal(sh: &Shared, body: &[u8], b: Bad) -> Resp {
    if !is_sglang(&sh.spec) {
        return error(sh, b.status, &b.msg);
    }
    let t = match b.kind {
        BadKind::Schema => "Bad Request",
        BadKind::Value | BadKind::Plain => error_type(b.status),
    };
    let err = json!({"object": "error", "message": b.msg, "type": t, "param": null, "code": b.status.as_u16()});
    let stream = serde_json::from_slice::<Value>(body).ok().and_then(|v| v.get("stream")?.as_bool()).unwrap_or(false);
    if b.kind == BadKind::Value && stream && sh.spec.engine.version() < SGLANG_STREAM_ERRORS_BEFORE_200 {
        let body = format!("data: {}\n\ndata: [DONE]\n\n", json!({ "error": err }));
        return full(StatusCode::OK, "text/event-stream; charset=utf-8", body);
    }
    full(b.status, "application/json", err.to_string())
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
    let sglang = is_sglang(&sh.spec);
    // SGLang checks no model name (`OpenAIServingBase` never compares it; a response names the
    // request's `model`); vLLM answers 404 for a model it does not serve.
    let model = match obj.get("model") {
        Some(Value::String(m)) if *m == sh.opts.model => None,
        Some(Value::String(m)) if sglang => Some(m.clone()),
        Some(Value::String(m)) => {
            return Err(Bad {
                status: StatusCode::NOT_FOUND,
                msg: format!("The model `{m}` does not exist; this server serves `{}`", sh.opts.model),
                kind: BadKind::Plain,
            })
        }
        // Optional in vLLM's protocol (`model: str | None = None`: the served model) and in
        // SGLang's from 0.5.2 (`"default"`); required through 0.5.1.
        None | Some(Value::Null) if sglang => {
            if sh.spec.engine.version() < SGLANG_MODEL_OPTIONAL {
                return Err(bad("model: Field required"));
            }
            Some("default".to_string())
        }
        None | Some(Value::Null) => None,
        Some(_) => return Err(bad("model: expected a string")),
    };
    // `n` > 1 (several choices per prompt) is not modelled: refused, as vLLM refuses what it
    // does not support, rather than answered with one choice.
    match obj.get("n") {
        None | Some(Value::Null) => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(n) if n.as_u64().is_some_and(|n| n > 1) => {
            return Err(plain(format!("n: only n=1 is supported by servesim serve, got {n}")))
        }
        Some(n) => return Err(bad(format!("n: expected a positive integer, got {n}"))),
    }
    let mut token_ids = false;
    let prompt: Vec<Segment> = if chat {
        let msgs = obj
            .get("messages")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("messages: expected an array of {role, content}"))?;
        if sglang && msgs.is_empty() {
            // `OpenAIServingChat._validate_request` (0.4.10, 0.5.23).
            return Err(plain("Messages cannot be empty."));
        }
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
            let segs = id_segments(a).ok_or_else(|| bad("prompt: token ids must be integers from 0 to 4294967295"))?;
            match out_of_vocab(a, sh.spec.model.vocab_size) {
                None => Ok(segs),
                Some(m) if sglang => Err(Bad { status: StatusCode::BAD_REQUEST, msg: m, kind: BadKind::Value }),
                Some(m) => Err(bad(m)),
            }
        };
        match obj.get("prompt") {
            Some(Value::String(s)) => encode(s, sh)?,
            Some(Value::Array(a)) if a.len() == 1 && a[0].is_array() => {
                token_ids = true;
                ids(a[0].as_array().expect("array"))?
            }
            Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => encode(a[0].as_str().expect("string"), sh)?,
            Some(Value::Array(a)) if a.iter().all(|x| x.is_array() || x.is_string()) && a.len() > 1 => {
                return Err(plain(
                    "prompt: a batch of prompts is not supported by servesim serve; send one per request",
                ))
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
        return Err(plain("the prompt is empty"));
    }
    // The body's types, before any check of its values (pydantic validates the request first).
    for k in ["stream", "ignore_eos"] {
        if obj.get(k).is_some_and(|s| !s.is_boolean() && !s.is_null()) {
            return Err(bad(format!("{k}: expected a boolean")));
        }
    }
    let include_usage = stream_options(obj, sglang)?;
    refuse_unmodelled(obj, chat)?;
    let num = |k: &str| -> Result<Option<f64>, Bad> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| bad(format!("{k}: expected a number, got {v}"))),
        }
    };
    let (temperature, top_p, min_tokens) = (num("temperature")?, num("top_p")?, num("min_tokens")?);
    let max_len = max_model_len(&sh.spec);
    let kv = sh.spec.engine.kv_capacity_tokens();
    let prompt_len = u32::try_from(prompt.len()).map_err(|_| bad("the prompt is too long"))?;
    // A chat request's limit is Python's `first or second` over its two fields: the first
    // unless absent, null or 0, else the second as given (null: none). vLLM reads
    // `max_completion_tokens or max_tokens` (`ChatCompletionRequest.to_sampling_params`), as
    // SGLang does from 0.5.9; SGLang through 0.5.8 reads `max_tokens or max_completion_tokens`
    // ([`SGLANG_CHAT_LIMIT_COMPLETION_FIRST`]). A completion has `max_tokens` only.
    let given = |k: &str| obj.get(k).filter(|v| !v.is_null());
    let (first, second) = if sglang && sh.spec.engine.version() < SGLANG_CHAT_LIMIT_COMPLETION_FIRST {
        ("max_tokens", "max_completion_tokens")
    } else {
        ("max_completion_tokens", "max_tokens")
    };
    let (limit_field, limit) = match given(first).filter(|v| chat && v.as_f64() != Some(0.0)) {
        Some(v) => (first, Some(v)),
        None if chat => (second, given(second)),
        None => ("max_tokens", given("max_tokens")),
    };
    if let EngineSpec::Sglang(cfg) = &sh.spec.engine {
        // SGLang's own checks and messages, those of `/generate` ([`sglang_limits`]): a
        // completion passes `max_tokens` (default 16) as `max_new_tokens`, a chat request its
        // limit or none (the scheduler's room).
        let max_new = match limit {
            None if chat => None,
            None => Some(16),
            Some(v) => Some(v.as_i64().ok_or_else(|| bad(format!("{limit_field}: expected an integer, got {v}")))?),
        };
        if min_tokens.is_some_and(|m| m.fract() != 0.0) {
            return Err(bad("min_tokens: expected an integer"));
        }
        let ask = SglangAsk {
            max_new,
            default_max_new: None,
            temperature: temperature.map(|t| (t, obj["temperature"].to_string())),
            top_p: top_p.map(|p| (p, obj["top_p"].to_string())),
            min_new: min_tokens.map(|m| m as i64),
            min_field: "min_new_tokens",
        };
        let (max_tokens, abort) = sglang_limits(sh, cfg, prompt_len.into(), ask).map_err(|r| match r {
            SglangRefusal::Value(m) => Bad { status: StatusCode::BAD_REQUEST, msg: m, kind: BadKind::Value },
            SglangRefusal::Unsupported(m) => plain(m),
        })?;
        if let Some(m) = abort {
            // The scheduler aborts the request (`validate_input_length`); the OpenAI handler
            // raises it as the `ValueError` of `_wait_one_response`.
            return Err(Bad { status: StatusCode::BAD_REQUEST, msg: m, kind: BadKind::Value });
        }
        let mut c = Completion::with_flags(obj, prompt, token_ids, prompt_len, max_tokens, model);
        c.include_usage = include_usage;
        // `min_new_tokens` is checked above (an integer from 0 to `max_new_tokens`); the
        // scheduler's cut of the output may leave less.
        c.min_tokens = min_tokens.map_or(0, |m| m as u32).min(max_tokens);
        return Ok(c);
    }
    let max_tokens = match limit {
        None => {
            if chat {
                // A chat request without a limit may fill the rest of its context (vLLM's
                // `get_max_tokens`: max_model_len − prompt) and of the pool. At least one token;
                // a prompt with no room left is the context error below.
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
    let total = u64::from(prompt_len) + u64::from(max_tokens);
    if total > u64::from(max_len) {
        return Err(bad(format!("This model's maximum context length is {max_len} tokens. However, you requested {total} tokens ({prompt_len} in the messages, {max_tokens} in the completion). Please reduce the length of the messages or completion.")));
    }
    if u64::from(prompt_len) + u64::from(max_tokens) >= kv {
        return Err(bad(format!("the request needs {} KV tokens but the pool holds {kv}", prompt_len + max_tokens)));
    }
    // The sampling parameters the engines refuse (vLLM's `SamplingParams._verify_args`, with its
    // messages), though servesim samples nothing: a request vLLM answers 400 is answered 400.
    if let Some(t) = temperature.filter(|t| *t < 0.0) {
        return Err(bad(format!("temperature must be non-negative, got {t}.")));
    }
    if let Some(p) = top_p.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
        return Err(bad(format!("top_p must be in (0, 1], got {p}.")));
    }
    if let Some(m) = min_tokens {
        if m < 0.0 || m.fract() != 0.0 {
            return Err(bad(format!("min_tokens must be greater than or equal to 0, got {m}.")));
        }
        if m > f64::from(max_tokens) {
            return Err(bad(format!("min_tokens must be less than or equal to max_tokens={max_tokens}, got {m}.")));
        }
    }
    let mut c = Completion::with_flags(obj, prompt, token_ids, prompt_len, max_tokens, model);
    c.include_usage = include_usage;
    c.min_tokens = min_tokens.map_or(0, |m| m as u32);
    Ok(c)
}

/// The largest token id of a prompt given as ids when it is past the model's vocabulary: its
/// refusal, naming the id and the vocabulary (vLLM's processor: "Token id {id} is out of
/// vocabulary"; SGLang's tokenizer manager: "The input_ids ... contains values greater than
/// the vocab size"). An id no embedding row holds would be served as if it were a token.
fn out_of_vocab(ids: &[Value], vocab_size: u32) -> Option<String> {
    let max = ids.iter().filter_map(Value::as_u64).max()?;
    (max >= u64::from(vocab_size)).then(|| {
        format!(
            "Token id {max} is out of vocabulary: the model's vocab_size is {vocab_size} (ids 0 to {})",
            vocab_size.saturating_sub(1)
        )
    })
}

/// `stream_options`: whether a stream ends with a usage chunk. An object whose
/// `include_usage` is a boolean (absent: true in vLLM's `StreamOptions`, false in SGLang's;
/// null: none); `continuous_usage_stats` (usage in every chunk) is not modelled and refused
/// when true. vLLM refuses options given without `stream` true (`validate_stream_options`,
/// which tests them as Python does: null, `{}` and `false` pass). Any other type is a 400
/// naming the field, as `stream`'s is.
fn stream_options(obj: &serde_json::Map<String, Value>, sglang: bool) -> Result<bool, Bad> {
    let so = match obj.get("stream_options") {
        None | Some(Value::Null) => return Ok(false),
        Some(v) => v,
    };
    let truthy = match so {
        Value::Bool(b) => *b,
        Value::Object(m) => !m.is_empty(),
        Value::String(t) => !t.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::Null => false,
    };
    let stream = obj.get("stream") == Some(&Value::Bool(true));
    if !sglang && truthy && !stream {
        return Err(bad("Stream options can only be defined when `stream=True`."));
    }
    let Value::Object(m) = so else {
        return Err(bad(format!("stream_options: expected an object such as {{\"include_usage\": true}}, got {so}")));
    };
    match m.get("continuous_usage_stats") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => {
            return Err(plain(
                "stream_options.continuous_usage_stats (usage in every chunk) is not supported by servesim serve; use include_usage (one usage chunk at the end)",
            ))
        }
        Some(v) => return Err(bad(format!("stream_options.continuous_usage_stats: expected a boolean, got {v}"))),
    }
    match m.get("include_usage") {
        None => Ok(!sglang),
        Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b && stream),
        Some(v) => Err(bad(format!("stream_options.include_usage: expected a boolean, got {v}"))),
    }
}

/// The request fields that would change the answer in the engines and that servesim serve does
/// not model: refused (400) when they ask for something, accepted at their defaults (what
/// clients send unasked): `stop` null or `[]`, `echo` false, `logprobs` null or false, and so on.
/// servesim's output is no text a stop string could end; it has no log probabilities.
fn refuse_unmodelled(obj: &serde_json::Map<String, Value>, chat: bool) -> Result<(), Bad> {
    let unsupported = |k: &str, what: &str, v: &Value| {
        Err(plain(format!("{k}: {what} is not modelled by servesim serve (got {v}); leave it out or null")))
    };
    let empty_list = |v: &Value| v.as_array().is_some_and(Vec::is_empty);
    if let Some(v) = obj.get("stop") {
        match v {
            Value::Null => {}
            v if empty_list(v) => {}
            Value::String(_) | Value::Array(_) => return unsupported("stop", "a stop string", v),
            _ => return Err(bad(format!("stop: expected a string or a list of strings, got {v}"))),
        }
    }
    if let Some(v) = obj.get("stop_token_ids") {
        match v {
            Value::Null => {}
            v if empty_list(v) => {}
            Value::Array(_) => return unsupported("stop_token_ids", "a stop token", v),
            _ => return Err(bad(format!("stop_token_ids: expected a list of token ids, got {v}"))),
        }
    }
    match obj.get("echo") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(v @ Value::Bool(true)) => return unsupported("echo", "echoing the prompt in the output", v),
        Some(v) => return Err(bad(format!("echo: expected a boolean, got {v}"))),
    }
    match obj.get("logprobs") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(v @ Value::Bool(true)) if chat => return unsupported("logprobs", "log probabilities", v),
        // A completion's `logprobs` is a count; 0 still returns the sampled tokens' own.
        Some(v @ Value::Number(_)) if !chat && v.as_u64().is_some() => {
            return unsupported("logprobs", "log probabilities (0 too: the sampled tokens' own)", v)
        }
        Some(v) if chat => return Err(bad(format!("logprobs: expected a boolean, got {v}"))),
        Some(v) => return Err(bad(format!("logprobs: expected a non-negative integer, got {v}"))),
    }
    match obj.get("top_logprobs") {
        None | Some(Value::Null) => {}
        Some(v) if v.as_u64() == Some(0) => {}
        Some(v) if v.as_u64().is_some() => return unsupported("top_logprobs", "log probabilities", v),
        Some(v) => return Err(bad(format!("top_logprobs: expected a non-negative integer, got {v}"))),
    }
    match obj.get("prompt_logprobs") {
        None | Some(Value::Null) => {}
        Some(v) => return unsupported("prompt_logprobs", "the prompt's log probabilities", v),
    }
    match obj.get("best_of") {
        None | Some(Value::Null) => {}
        Some(v) if v.as_u64() == Some(1) => {}
        Some(v) => return unsupported("best_of", "best_of other than 1 (several samples, the best returned)", v),
    }
    match obj.get("suffix") {
        None | Some(Value::Null) => {}
        Some(v) => return unsupported("suffix", "a suffix", v),
    }
    match obj.get("response_format") {
        None | Some(Value::Null) => {}
        Some(v) if v.get("type").and_then(Value::as_str) == Some("text") => {}
        Some(v) => return unsupported("response_format", "structured output (a JSON or schema format)", v),
    }
    for k in ["guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs"] {
        if let Some(v) = obj.get(k).filter(|v| !v.is_null()) {
            return unsupported(k, "structured output", v);
        }
    }
    Ok(())
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

/// A request handed to the simulated engine: its key, its tokens' channel, the guard that
/// aborts it if the client goes away, and the engine time it arrived.
struct Admitted {
    n: u64,
    rx: mpsc::UnboundedReceiver<TokenEvent>,
    guard: AbortGuard,
    arrived_ns: u64,
}

/// A response that is not streamed: its tokens as they come, counted, to the last (`None`: the
/// channel closed first, the server shutting down). Both non-streaming routes read them so.
async fn drain_tokens(rx: &mut mpsc::UnboundedReceiver<TokenEvent>, sh: &Shared) -> (u32, Option<TokenEvent>) {
    let mut i = 0u32;
    while let Some(ev) = rx.recv().await {
        sh.clock.release(); // the client cannot count tokens it does not see
        i += 1;
        if ev.finished {
            return (i, Some(ev));
        }
    }
    (i, None)
}

/// Hands a checked request to the engine (every route's one way in); `None` once the
/// engine has stopped.
fn admit(sh: &Arc<Shared>, c: &mut Completion, chat: bool) -> Option<Admitted> {
    let n = sh.next_id.fetch_add(1, Ordering::Relaxed);
    // Where EOS falls without ignore_eos: the scenario's output distribution, drawn per request.
    let output_len = if c.ignore_eos {
        c.max_tokens
    } else {
        // No EOS before `min_tokens` (vLLM's `MinTokensLogitsProcessor`, SGLang's
        // `min_new_tokens` penalizer).
        sim::workload::eos_len(sh.spec.workload.output_len_dist, c.max_tokens, &mut sim::rng::stream(n, "serve.eos"))
            .max(c.min_tokens)
            .min(c.max_tokens)
    };
    let spec = RequestSpec {
        prompt: std::mem::take(&mut c.prompt),
        prompt_len: c.prompt_len,
        max_tokens: c.max_tokens,
        output_len,
        output_key: n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5151,
        arrival_ns: 0,
        priority: 0,
        ignore_eos: c.ignore_eos,
        prompt_hashes: None,
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let arrived_ns = sh.clock.now_ns();
    let token_ids = c.token_ids;
    if !sh.send(Msg::Add(NewRequest { key: n, spec, tokens: tx, arrived_ns, chat, token_ids })) {
        return None;
    }
    Some(Admitted { n, rx, guard: AbortGuard { sh: sh.clone(), key: n, armed: true }, arrived_ns })
}

async fn generate(sh: Arc<Shared>, mut c: Completion, chat: bool) -> Resp {
    let Some(Admitted { n, mut rx, mut guard, .. }) = admit(&sh, &mut c, chat) else {
        return error(&sh, StatusCode::SERVICE_UNAVAILABLE, "the engine stopped");
    };
    let id = format!("{}-{n}", if chat { "chatcmpl" } else { "cmpl" });
    let created = unix_now();
    let model = c.model.clone().unwrap_or_else(|| sh.opts.model.clone());
    let object = if chat { "chat.completion.chunk" } else { "text_completion" };
    let piece = |i: u32| format!(" t{i}");
    let reason = |ev: &TokenEvent| if ev.stop { "stop" } else { "length" };
    // An output that stops at EOS has no text for the EOS token, though `completion_tokens`
    // counts it. vLLM: the output processor tells the detokenizer the request stopped
    // (`detokenizer.update(new_token_ids, finish_reason == FinishReason.STOP)`) and
    // `IncrementalDetokenizer.update` leaves the last token out of the text
    // (`include_stop_str_in_output` false by default; `skip_special_tokens`, true by default,
    // would drop it anyway); `completion_tokens` is `len(output.token_ids)` summed, the EOS id
    // included (`vllm/v1/engine/output_processor.py`, `detokenizer.py`,
    // `serving_completion.py`, `serving_chat.py`; 0.11.0 and 0.34.0). SGLang: the detokenizer
    // trims the matched stop token (`DetokenizerManager.trim_matched_stop`) and
    // `meta_info.completion_tokens` counts the output ids, EOS included (0.4.10–0.5.23), as on
    // `/generate` below.
    let eos = |ev: &TokenEvent| ev.finished && ev.stop;
    if !c.stream {
        let (i, last) = drain_tokens(&mut rx, &sh).await;
        guard.armed = false;
        let Some(last) = last else {
            return error(&sh, StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down; the request was aborted");
        };
        let texts = if eos(&last) { i - 1 } else { i };
        let text: String = (0..texts).map(piece).collect();
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
    let finish_delta = sglang_finish_delta(&sh.spec);
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
            // SGLang's chat stream puts `finish_reason` only on a finish chunk of its own, after
            // the last content chunk, whatever stopped the request (`serving_chat.py`: every
            // content chunk `finish_reason=None`, then one chunk per finished index with an
            // empty delta; 0.4.10 and 0.5.10 read): a length stop is the last token's content
            // chunk, then that chunk ([`sglang_finish_delta`], `matched_stop` null).
            let finish_apart = chat && sglang && ev.finished && !eos(&ev);
            let finish = if ev.finished && !finish_apart { Value::from(reason(&ev)) } else { Value::Null };
            // The EOS step's chunk, with no text (above). vLLM writes it as any other: an
            // empty `text` or `delta.content` with `finish_reason` (`serving_completion.py`:
            // a chunk per output, `text=delta_text`; `serving_chat.py`:
            // `DeltaMessage(content=delta_text)`; 0.11.0, and 0.34.0's
            // `ChatStreamProcessor.step`), which `vllm bench serve` times as a token (every
            // chunk with choices before 0.33; `_choice_has_streamed_output` from 0.33: an empty
            // `content` without `role`). SGLang's completions do the same (`text=delta`, a
            // chunk per output, `matched_stop` the EOS id); its chat stream writes a content
            // chunk only for a non-empty delta (`if delta:`) and ends with a separate finish
            // chunk whose delta is empty ([`sglang_finish_delta`]), so the EOS step is that
            // chunk alone (0.4.10–0.5.23 `serving_chat.py`).
            let text = if eos(&ev) { String::new() } else { piece(i) };
            let choice = match (chat, sglang && eos(&ev)) {
                (true, true) => json!({"index": 0, "delta": finish_delta, "finish_reason": finish,
                    "matched_stop": output_id(n, i)}),
                (true, false) => json!({"index": 0, "delta": {"content": text}, "finish_reason": finish}),
                (false, true) => {
                    json!({"index": 0, "text": text, "finish_reason": finish, "matched_stop": output_id(n, i)})
                }
                (false, false) => json!({"index": 0, "text": text, "finish_reason": finish}),
            };
            let chunk = json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]});
            if send(format!("data: {chunk}\n\n")).await.is_err() {
                clock.release(); // nobody will read it
                return;
            }
            if finish_apart {
                let choice =
                    json!({"index": 0, "delta": finish_delta, "finish_reason": reason(&ev), "matched_stop": null});
                let chunk =
                    json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]});
                if send(format!("data: {chunk}\n\n")).await.is_err() {
                    clock.release(); // nobody will read it
                    return;
                }
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

/// The delta of SGLang's chat finish chunk: through 0.5.10 `DeltaMessage()` in pydantic's dump,
/// every field null (`DeltaMessage._serialize` drops only `hidden_states`; 0.4.10, 0.5.6 and
/// 0.5.10 `protocol.py`, `serving_chat.py`); from 0.5.11 a msgspec `_StreamDelta`
/// (`omit_defaults`; `serving_chat.py`'s `_fast_sse_content` in 0.5.11 and 0.5.12,
/// `sse_utils.StreamDelta` from 0.5.13 to 0.5.23), which keeps only the required
/// `reasoning_content`. `vllm bench serve` from 0.33 and `sglang.bench_serving` time neither
/// as a token.
fn sglang_finish_delta(spec: &SimSpec) -> Value {
    if spec.engine.version() < SGLANG_STREAM_DELTA_OMITS_NULLS {
        json!({"role": null, "content": null, "reasoning_content": null, "tool_calls": null})
    } else {
        json!({"reasoning_content": null})
    }
}

/// The first SGLang release that writes chat chunks with msgspec's `_StreamDelta`
/// ([`sglang_finish_delta`]; read in the 0.5.10 and 0.5.11 wheels).
const SGLANG_STREAM_DELTA_OMITS_NULLS: sim::engine::Version = sim::engine::Version::new(0, 5, 11);

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

// SGLang's native `/generate`, as `sglang.bench_serving --backend sglang` (its default) speaks
// it. Read in the 0.4.10, 0.5.6 and 0.5.23 wheels: the request (`bench_serving.py`,
// `async_request_sglang_generate`; 0.5.23 `benchmark/serving.py`) is `text` or `input_ids`,
// `sampling_params` {`max_new_tokens`, `ignore_eos`, `temperature`} and `stream`, with
// `lora_path: null`, `return_logprob: false` and `logprob_start_len` besides. The response
// (`http_server.py`, `generate_request`; `tokenizer_manager.py`, `_handle_batch_output`) is one
// JSON object `{text, output_ids, meta_info}`, or, streamed, one `data: {json}\n\n` event per
// output with the text and `output_ids` so far (cumulative: `--stream-output` off, its
// default) and then `data: [DONE]\n\n`. `meta_info` has `id` (the `rid`, else
// `uuid4().hex`), `finish_reason` (null until the last event, then `{"type": "length",
// "length": max_new_tokens}` or `{"type": "stop", "matched": token}`), `prompt_tokens`,
// `completion_tokens`, `cached_tokens`, and on the last event `e2e_latency`. The client
// times the first event whose `text` is not empty as the first token and splits the gap to
// each later one evenly over the tokens `completion_tokens` grew by.
//
// Differences between the releases: 0.4.10 writes no `output_ids` beside `text`; 0.5.6 adds
// `output_ids`, `weight_version` and `total_retractions` (0.5.23 `num_retractions`, and
// `reasoning_tokens`); servesim writes the 0.5.6 form less `weight_version` and the
// retraction count, which it does not track per request. 0.5.23 checks the body against a
// schema first (400 `{"error": "<text>"}`) and writes an error inside a stream with `type`,
// `code` and `retryable` beside `message`; servesim writes the 0.4.10–0.5.6 forms.

/// Why a `/generate` request is refused, in the form SGLang answers each kind.
pub(crate) enum Refusal {
    /// FastAPI's validation of `GenerateReqInput` (the body is not JSON, a field has the wrong
    /// type), before the handler runs: SGLang's handler answers it 400 with its flat
    /// `ErrorResponse` (`type` "Bad Request").
    Schema { field: &'static str, kind: &'static str, msg: String, input: Box<Value> },
    /// A `ValueError` of the tokenizer manager (the prompt's checks, the context, the sampling
    /// parameters): 400 `{"error": {"message"}}` (`_create_error_response`); in a stream,
    /// status 200 with `data: {"error": {"message"}}` then `data: [DONE]`.
    Value { msg: String, stream: bool },
    /// What servesim does not model (a batch, log probabilities, LoRA, images): 400
    /// `{"error": {"message"}}`, streamed or not, so that the client counts it failed.
    Unsupported(String),
}

pub(crate) struct Generate {
    c: Completion,
    /// The request's `rid`, else none (a fresh id, as SGLang's `uuid4().hex`).
    rid: Option<String>,
    /// The scheduler refuses the prompt (`validate_input_length`: at least `max_req_input_len`,
    /// the context and the pool less one, less 5): `FINISH_ABORT` before it runs.
    abort: Option<String>,
}

fn native_error(status: StatusCode, msg: &str) -> Resp {
    full(status, "application/json", json!({"error": {"message": msg}}).to_string())
}

fn native_refusal(r: Refusal) -> Resp {
    match r {
        Refusal::Schema { field, kind, msg, input } => {
            // SGLang overrides FastAPI's 422 with 400 and its `ErrorResponse` (`http_server.py`,
            // `validation_exception_handler`, 0.4.10 and 0.5.23: "Override FastAPI's default 422
            // validation error with 400"), the message `str(exc)` and `str(exc.errors())`: the
            // errors' Python repr, which servesim approximates (serve answered 422 with FastAPI's
            // `detail` until 2026-12-06).
            let loc = if field.is_empty() { "('body',)".to_string() } else { format!("('body', '{field}')") };
            let message = format!("[{{'type': '{kind}', 'loc': {loc}, 'msg': '{msg}', 'input': {input}}}]");
            let err = json!({"object": "error", "message": message, "type": "Bad Request", "param": null, "code": 400});
            full(StatusCode::BAD_REQUEST, "application/json", err.to_string())
        }
        Refusal::Value { msg, stream: true } => {
            // `stream_results`: `except ValueError` writes the error as an event, then `[DONE]`.
            let body = format!("data: {}\n\ndata: [DONE]\n\n", json!({"error": {"message": msg}}));
            full(StatusCode::OK, "text/event-stream; charset=utf-8", body)
        }
        Refusal::Value { msg, stream: false } | Refusal::Unsupported(msg) => {
            native_error(StatusCode::BAD_REQUEST, &msg)
        }
    }
}

/// Token ids as prompt segments (the key every route gives an id).
fn id_segments(a: &[Value]) -> Option<Vec<Segment>> {
    a.iter()
        .map(|t| t.as_u64().filter(|&x| x <= u64::from(u32::MAX)).map(|x| Segment { key: x ^ 0x7f4a_7c15, len: 1 }))
        .collect()
}

fn parse_generate(body: &[u8], sh: &Shared) -> Result<Generate, Refusal> {
    let schema = |field: &'static str, kind: &'static str, msg: &str, input: &Value| Refusal::Schema {
        field,
        kind,
        msg: msg.to_string(),
        input: Box::new(input.clone()),
    };
    let v: Value = serde_json::from_slice(body).map_err(|e| Refusal::Schema {
        field: "",
        kind: "json_invalid",
        msg: format!("JSON decode error: {e}"),
        input: Box::new(json!({})),
    })?;
    let obj = v.as_object().ok_or_else(|| schema("", "dataclass_type", "Input should be a dictionary", &v))?;
    let given = |k: &str| obj.get(k).filter(|v| !v.is_null());
    let stream = match given("stream") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(schema("stream", "bool_type", "Input should be a valid boolean", v)),
    };
    let value = |msg: String| Refusal::Value { msg, stream };
    let unsupported = |msg: &str| Refusal::Unsupported(format!("{msg} is not supported by servesim serve"));
    for (k, what) in [
        ("input_embeds", "input_embeds (prompt embeddings)"),
        ("image_data", "image_data"),
        ("video_data", "video_data"),
        ("audio_data", "audio_data"),
        ("lora_path", "lora_path (LoRA adapters)"),
    ] {
        if given(k).is_some() {
            return Err(unsupported(what));
        }
    }
    if given("return_logprob").is_some_and(|v| *v != Value::Bool(false)) {
        return Err(unsupported("return_logprob (log probabilities)"));
    }
    let rid = match given("rid") {
        None => None,
        Some(Value::String(r)) => Some(r.clone()),
        Some(_) => return Err(unsupported("rid other than a string (one per prompt of a batch)")),
    };
    let batch = |k: &str| {
        Refusal::Unsupported(format!(
            "{k}: a batch of prompts (a list of them) is not supported by servesim serve; send one prompt per request"
        ))
    };
    // `input_ids` before `text` when both are given (`_tokenize_one_request`).
    let mut token_ids = false;
    let prompt = if let Some(ids) = given("input_ids") {
        let a = ids.as_array().ok_or_else(|| schema("input_ids", "list_type", "Input should be a valid list", ids))?;
        if a.is_empty() {
            return Err(value("input_ids cannot be empty.".into()));
        }
        if a.iter().any(Value::is_array) {
            return Err(batch("input_ids"));
        }
        token_ids = true;
        let segs =
            id_segments(a).ok_or_else(|| schema("input_ids", "int_type", "Input should be a valid integer", ids))?;
        if let Some(m) = out_of_vocab(a, sh.spec.model.vocab_size) {
            return Err(value(m));
        }
        segs
    } else {
        match given("text") {
            Some(Value::String(s)) => encode(s, sh).map_err(|b| value(b.msg))?,
            Some(Value::Array(_)) => return Err(batch("text")),
            Some(t) => return Err(schema("text", "string_type", "Input should be a valid string", t)),
            None => return Err(value("Either text, input_ids or input_embeds should be provided.".into())),
        }
    };
    if prompt.is_empty() {
        return Err(Refusal::Unsupported("the prompt is empty".into()));
    }
    let sp = match given("sampling_params") {
        None => serde_json::Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(Value::Array(_)) => return Err(unsupported("sampling_params as a list (one per prompt of a batch)")),
        Some(v) => return Err(schema("sampling_params", "dict_type", "Input should be a valid dictionary", v)),
    };
    let sget = |k: &str| sp.get(k).filter(|v| !v.is_null());
    let num = |k: &str| -> Result<Option<(f64, &Value)>, Refusal> {
        match sget(k) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(|x| Some((x, v)))
                .ok_or_else(|| Refusal::Unsupported(format!("sampling_params.{k}: expected a number, got {v}"))),
        }
    };
    let int = |k: &str| -> Result<Option<i64>, Refusal> {
        match sget(k) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| Refusal::Unsupported(format!("sampling_params.{k}: expected an integer, got {v}"))),
        }
    };
    match int("n")? {
        None | Some(1) => {}
        Some(n) => return Err(unsupported(&format!("sampling_params.n other than 1 (got {n})"))),
    }
    let ignore_eos = match sget("ignore_eos") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(Refusal::Unsupported(format!("sampling_params.ignore_eos: expected a boolean, got {v}")))
        }
    };
    // What would end the output early: not modelled (servesim's output is no text), refused
    // unless empty.
    for k in ["stop", "stop_token_ids"] {
        if let Some(v) = sget(k).filter(|v| !v.as_array().is_some_and(Vec::is_empty)) {
            return Err(Refusal::Unsupported(format!(
                "sampling_params.{k}: a stop string or token is not modelled by servesim serve (got {v}); leave it out or null"
            )));
        }
    }
    // Structured output (SGLang's grammar backends) constrains which tokens come out and where the
    // output ends: not modelled, refused unless null (a review, 2026-12-07: taken and ignored).
    for k in ["json_schema", "regex", "ebnf", "structural_tag"] {
        if let Some(v) = sget(k) {
            return Err(Refusal::Unsupported(format!(
                "sampling_params.{k}: structured output is not modelled by servesim serve (got {v}); leave it out or null"
            )));
        }
    }
    let given_max = int("max_new_tokens")?;
    let EngineSpec::Sglang(cfg) = &sh.spec.engine else {
        return Err(Refusal::Unsupported("/generate is SGLang's route".into()));
    };
    let text = |x: Option<(f64, &Value)>| x.map(|(f, v)| (f, v.to_string()));
    let ask = SglangAsk {
        max_new: given_max,
        // `SamplingParams.max_new_tokens` defaults to 128.
        default_max_new: Some(128),
        temperature: text(num("temperature")?),
        top_p: text(num("top_p")?),
        min_new: int("min_new_tokens")?,
        min_field: "min_new_tokens",
    };
    let min_new = ask.min_new;
    let input = prompt.len() as u64;
    let (max_tokens, abort) = sglang_limits(sh, cfg, input, ask).map_err(|r| match r {
        SglangRefusal::Value(m) => value(m),
        SglangRefusal::Unsupported(m) => Refusal::Unsupported(m),
    })?;
    let prompt_len = input as u32;
    // Checked by `sglang_limits`: from 0 to `max_new_tokens`.
    let min_tokens = min_new.map_or(0, |m| m.max(0) as u64).min(u64::from(max_tokens)) as u32;
    let c = Completion {
        prompt,
        token_ids,
        prompt_len,
        max_tokens,
        stream,
        include_usage: false,
        ignore_eos,
        min_tokens,
        model: None,
    };
    Ok(Generate { c, rid, abort })
}

/// What an SGLang request asks for, as [`sglang_limits`] checks it.
struct SglangAsk {
    /// `max_new_tokens` as given (an OpenAI route's `max_tokens`), else none.
    max_new: Option<i64>,
    /// The limit when none is given: `/generate`'s `SamplingParams` default (128); none for a
    /// chat request, which passes `None` and gets the scheduler's room.
    default_max_new: Option<i64>,
    /// `temperature` and `top_p`: the value and its JSON text (the message quotes it).
    temperature: Option<(f64, String)>,
    top_p: Option<(f64, String)>,
    min_new: Option<i64>,
    min_field: &'static str,
}

/// Why SGLang refuses a request: a `ValueError` (its message), or what servesim does not model.
enum SglangRefusal {
    Value(String),
    Unsupported(String),
}

/// SGLang's checks of a request's length and sampling parameters, with its messages, shared by
/// `/generate` and the OpenAI routes (both go through `TokenizerManager.generate_request`):
/// `_validate_one_request` (the prompt, and the prompt with `max_new_tokens` when given, under
/// the context), `SamplingParams.verify`, and the scheduler's `validate_input_length` (a prompt
/// of `max_req_input_len` tokens or more is aborted: returned as the abort's message) and
/// `init_req_max_new_tokens` (the output cut to what `max_req_len` leaves). Returns the output
/// limit and the abort, if any.
fn sglang_limits(
    sh: &Shared,
    cfg: &sim::engine::sglang::SglangConfig,
    input: u64,
    ask: SglangAsk,
) -> Result<(u32, Option<String>), SglangRefusal> {
    let value = SglangRefusal::Value;
    let given_max = ask.max_new;
    // The tokenizer manager's checks (`_validate_one_request`): the prompt, and the prompt with
    // `max_new_tokens` when it is given, must stay under the context.
    let ctx = u64::from(cfg.context_length);
    if input >= ctx {
        return Err(value(format!(
            "The input ({input} tokens) is longer than the model's context length ({ctx} tokens)."
        )));
    }
    // Through 0.5.10 a total that reaches the context is refused (`>=`); from 0.5.11 one past
    // it (`> _max_req_len`, the context; read in the 0.5.10 and 0.5.11 wheels):
    // `SGLANG_ACCEPTS_A_FULL_CONTEXT`, the rule `simulate` refuses a scenario by.
    let over = |total: u64| {
        if cfg.version >= sim::config::SGLANG_ACCEPTS_A_FULL_CONTEXT {
            total > ctx
        } else {
            total >= ctx
        }
    };
    if let Some(m) = given_max.filter(|m| *m >= 0 && over(*m as u64 + input)) {
        return Err(value(format!("Requested token count exceeds the model's maximum context length of {ctx} tokens. You requested a total of {} tokens: {input} tokens from the input messages and {m} tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.", m as u64 + input)));
    }
    // `SamplingParams.verify`, with its messages (servesim samples nothing, but what SGLang
    // refuses is refused).
    // No limit at all (a chat request without one): the scheduler's room below.
    let max_new = given_max.or(ask.default_max_new).unwrap_or(i64::MAX);
    if max_new < 0 {
        return Err(value(format!("max_new_tokens must be at least 0, got {max_new}.")));
    }
    if let Some((_, v)) = ask.temperature.filter(|(t, _)| *t < 0.0) {
        return Err(value(format!("temperature must be non-negative, got {v}.")));
    }
    if let Some((_, v)) = ask.top_p.filter(|(p, _)| !(*p > 0.0 && *p <= 1.0)) {
        return Err(value(format!("top_p must be in (0, 1], got {v}.")));
    }
    if let Some(m) = ask.min_new {
        let f = ask.min_field;
        if m < 0 {
            return Err(value(format!("{f} must be in [0, max_new_tokens], got {m}.")));
        }
        if m > max_new {
            return Err(value(format!("{f} must be in [0, max_new_tokens({max_new})], got {m}.")));
        }
    }
    if max_new == 0 {
        return Err(SglangRefusal::Unsupported(
            "max_new_tokens of 0 (a prefill with no output) is not supported by servesim serve".into(),
        ));
    }
    // The scheduler's limits (`tp_worker.py`: `max_req_len` is the context and the pool less
    // one, `max_req_input_len` that less 5): a longer prompt is aborted (`validate_input_length`),
    // and the output is cut to what `max_req_len` leaves (`init_req_max_new_tokens`).
    let max_req_len = (ctx - 1).min(cfg.max_total_tokens.saturating_sub(1));
    let max_req_input_len = max_req_len.saturating_sub(5);
    let abort = (input >= max_req_input_len).then(|| {
        format!("Input length ({input} tokens) exceeds the maximum allowed length ({max_req_input_len} tokens). Use a shorter input or enable --allow-auto-truncate.")
    });
    let room = max_req_len.saturating_sub(input + 1).max(1);
    let max_tokens = (max_new.max(0) as u64).min(room) as u32;
    if abort.is_none() && input + u64::from(max_tokens) >= sh.spec.engine.kv_capacity_tokens() {
        return Err(value(format!(
            "the request needs {} KV tokens but the pool holds {}",
            input + u64::from(max_tokens),
            sh.spec.engine.kv_capacity_tokens()
        )));
    }
    Ok((max_tokens, abort))
}

/// The id of output token `i` of request `n` (servesim generates no real tokens: an id in a
/// 32,000-token vocabulary, fixed by the request and the position).
fn output_id(n: u64, i: u32) -> u64 {
    let h = (n ^ 0x5151).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(i).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    100 + (h >> 17) % 31_900
}

async fn generate_native(sh: Arc<Shared>, mut g: Generate) -> Resp {
    let stream = g.c.stream;
    // A 32-digit hex id, as `uuid.uuid4().hex` (fixed by the request's number).
    let fresh = |n: u64| {
        let mix = |x: u64| {
            let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            x ^ (x >> 31)
        };
        format!("{:016x}{:016x}", mix(n.wrapping_add(0x9e37_79b9_7f4a_7c15)), mix(n ^ 0x5eed_5151_5eed_5151))
    };
    if let Some(msg) = g.abort.take() {
        if !stream {
            // `_wait_one_response`: an abort with status 400 is raised as a ValueError.
            return native_error(StatusCode::BAD_REQUEST, &msg);
        }
        // Streamed, the aborted output itself, then `[DONE]`: the scheduler's `set_finish_with_abort`
        // leaves the request one input token and no output.
        let n = sh.next_id.fetch_add(1, Ordering::Relaxed);
        let rid = g.rid.unwrap_or_else(|| fresh(n));
        let out = json!({"text": "", "output_ids": [], "meta_info": {"id": rid,
            "finish_reason": {"type": "abort", "message": msg, "status_code": 400, "err_type": "BadRequestError"},
            "prompt_tokens": 1, "completion_tokens": 0, "cached_tokens": 0, "e2e_latency": 0.0}});
        return full(StatusCode::OK, "text/event-stream; charset=utf-8", format!("data: {out}\n\ndata: [DONE]\n\n"));
    }
    let Some(Admitted { n, mut rx, mut guard, arrived_ns }) = admit(&sh, &mut g.c, false) else {
        return native_error(StatusCode::SERVICE_UNAVAILABLE, "the engine stopped");
    };
    let rid = g.rid.unwrap_or_else(|| fresh(n));
    let (prompt_len, max_tokens) = (g.c.prompt_len, g.c.max_tokens);
    let clock = sh.clock.clone();
    // `e2e_latency` is the tokenizer manager's `finished_time - created_time`, both
    // `time.time()`: wall time. Under `--time-scale` k the client's wall clock runs k times
    // slower than engine time, so the field is engine time / k, what the client measures.
    let time_scale = sh.opts.time_scale;
    // `meta_info` after `k` tokens, `last` the event that carried the k-th.
    let meta = move |k: u32, last: &TokenEvent| {
        let mut m = json!({"id": rid, "finish_reason": null, "prompt_tokens": prompt_len, "completion_tokens": k,
            "cached_tokens": last.cached});
        if last.finished {
            m["finish_reason"] = if last.stop {
                // EOS: `FINISH_MATCHED_TOKEN`, the token matched (the last output id).
                json!({"type": "stop", "matched": output_id(n, k.saturating_sub(1))})
            } else {
                json!({"type": "length", "length": max_tokens})
            };
            m["e2e_latency"] = json!(last.at_ns.saturating_sub(arrived_ns) as f64 / 1e9 / time_scale);
        }
        m
    };
    let piece = |i: u32| format!(" t{i}");
    // A request that stops at EOS has the EOS id last in `output_ids` and counted in
    // `completion_tokens`, but not in `text`: the detokenizer decodes the ids less the matched
    // stop token (`DetokenizerManager.trim_matched_stop`, `no_stop_trim` false by default), and
    // `skip_special_tokens` (true by default, `SamplingParams`) would drop it anyway (0.4.10
    // and 0.5.23 `detokenizer_manager.py`, `sampling_params.py`).
    let has_text = |ev: &TokenEvent| !(ev.finished && ev.stop);
    if !stream {
        let (i, last) = drain_tokens(&mut rx, &sh).await;
        guard.armed = false;
        let Some(last) = last else {
            return native_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is shutting down; the request was aborted",
            );
        };
        let texts = if has_text(&last) { i } else { i.saturating_sub(1) };
        let text: String = (0..texts).map(piece).collect();
        let ids: Vec<u64> = (0..i).map(|j| output_id(n, j)).collect();
        let body = json!({"text": text, "output_ids": ids, "meta_info": meta(i, &last)});
        return full(StatusCode::OK, "application/json", body.to_string());
    }
    let (body_tx, body_rx) = mpsc::channel::<Bytes>(64);
    sh.active_streams.fetch_add(1, Ordering::SeqCst);
    let active = ActiveStream(sh.clone());
    tokio::spawn(async move {
        let _active = active;
        let mut guard = guard;
        let mut text = String::new();
        let mut ids: Vec<u64> = Vec::new();
        let send = |b: String| body_tx.send(Bytes::from(b));
        loop {
            let ev = tokio::select! {
                ev = rx.recv() => ev,
                // The client went away (hyper dropped the body): the guard aborts the request.
                _ = body_tx.closed() => return,
            };
            let Some(ev) = ev else {
                // The server is shutting down: the error as `stream_results` writes a
                // ValueError, then `[DONE]`.
                guard.armed = false;
                let err = json!({"error": {"message": "the server is shutting down; the request was aborted"}});
                let _ = send(format!("data: {err}\n\n")).await;
                let _ = send("data: [DONE]\n\n".to_string()).await;
                return;
            };
            let i = ids.len() as u32;
            if has_text(&ev) {
                text.push_str(&piece(i));
            }
            ids.push(output_id(n, i));
            let chunk = json!({"text": text, "output_ids": ids, "meta_info": meta(i + 1, &ev)});
            if send(format!("data: {chunk}\n\n")).await.is_err() {
                clock.release(); // nobody will read it
                return;
            }
            if ev.finished {
                break;
            }
        }
        guard.armed = false;
        let _ = send("data: [DONE]\n\n".to_string()).await;
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream; charset=utf-8")
        .header("cache-control", "no-cache")
        .body(ServeBody::Stream(body_rx))
        .expect("a valid response")
}
