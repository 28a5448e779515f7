//! `servesim serve` over HTTP against what the engines' own servers answer: SGLang's error
//! texts and shapes on the OpenAI routes (per release), `/generate`'s text at EOS and its
//! `e2e_latency` under `--time-scale`, the connection limit's monitoring routes. Each server
//! runs in process on a [`VirtualClock`] (exact, no wall time measured); the client is a
//! plain `TcpStream` speaking HTTP/1.1 with `Connection: close`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use sim::config::SimSpec;

use crate::{serve_with_clock, Clock, ServeOptions, VirtualClock, WallClock};

const MODEL: &str = "qwen2.5-7b-instruct";

/// A built-in scenario with `engine` and `workload` fields overridden.
fn spec(scenario: &str, engine: Value, workload: Value) -> SimSpec {
    let path = format!("{}/../scenarios/{scenario}.json", env!("CARGO_MANIFEST_DIR"));
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for (k, x) in engine.as_object().unwrap() {
        v["engine"][k] = x.clone();
    }
    for (k, x) in workload.as_object().unwrap() {
        v["workload"][k] = x.clone();
    }
    let s = sim::config::scenario_from_value(v).unwrap();
    sim::config::resolve(&s, &sim::builtin::resources().unwrap()).unwrap()
}

/// The KV-starved SGLang scenario (context 4,096) at `version`.
fn sglang(version: &str) -> SimSpec {
    spec("kv-starved-qwen2.5-7b-a100-sglang", json!({"version": version}), json!({}))
}

/// `serve_with_clock` on a virtual clock in a runtime of its own, stopped when dropped.
struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(spec: SimSpec, time_scale: f64, max_connections: usize) -> Server {
        Server::start_on(spec, time_scale, max_connections, Arc::new(VirtualClock::new()))
    }

    /// On the wall clock at `time_scale`: for streams, which a client on the virtual clock
    /// must release token by token (this one reads a response whole).
    fn start_wall(spec: SimSpec, time_scale: f64) -> Server {
        Server::start_on(spec, time_scale, 64, Arc::new(WallClock::new(time_scale)))
    }

    fn start_on(spec: SimSpec, time_scale: f64, max_connections: usize, clock: Arc<dyn Clock>) -> Server {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            let opts = ServeOptions {
                addr: "127.0.0.1:0".parse().unwrap(),
                model: MODEL.into(),
                time_scale,
                max_connections,
                max_lifetime: Some(Duration::from_secs(120)),
                tokenizer: None,
                handle_signals: false,
            };
            let stop = async move {
                let _ = stopped.await;
            };
            rt.block_on(serve_with_clock(spec, opts, clock, stop, move |a| {
                let _ = tx.send(a);
            }))
            .unwrap();
        });
        let addr = rx.recv_timeout(Duration::from_secs(30)).expect("the server started");
        Server { addr, stop: Some(stop), thread: Some(thread) }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    }

    /// One request on a connection of its own; the whole response (head and body) as text.
    fn ask(&self, method: &str, path: &str, body: &str) -> String {
        let mut s = self.connect();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    fn post(&self, path: &str, body: &Value) -> String {
        self.ask("POST", path, &body.to_string())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.take().map(|s| s.send(()));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn status(r: &str) -> u16 {
    r.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no status in {r:?}"))
}

/// The JSON body of a response with a Content-Length.
fn json_body(r: &str) -> Value {
    let body = r.split_once("\r\n\r\n").map(|x| x.1).unwrap_or_else(|| panic!("no body in {r:?}"));
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {r}"))
}

/// The value of the first sample of `name` in a `/metrics` answer.
fn metric(r: &str, name: &str) -> f64 {
    r.lines()
        .find_map(|l| l.strip_prefix(name).filter(|x| x.starts_with('{')).and_then(|x| x.rsplit(' ').next()))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {r}"))
}

#[test]
fn generate_leaves_the_eos_tokens_text_out_and_times_e2e_as_the_client_sees_it() {
    // Every output stops at EOS after 3 tokens unless ignore_eos.
    let s = spec(
        "kv-starved-qwen2.5-7b-a100-sglang",
        json!({}),
        json!({"ignore_eos": false, "output_len_dist": {"kind": "uniform", "min": 3, "max": 3}}),
    );
    let ask = json!({"input_ids": [1, 2, 3, 4, 5, 6, 7, 8], "sampling_params": {"max_new_tokens": 8}});
    let one = Server::start(s.clone(), 1.0, 64);
    let r = one.post("/generate", &ask);
    assert_eq!(status(&r), 200, "{r}");
    let v = json_body(&r);
    let m = &v["meta_info"];
    assert_eq!(m["finish_reason"]["type"], "stop", "{v}");
    assert_eq!(m["completion_tokens"], 3, "{v}");
    // The EOS id is the last output id and the `matched` token, but it has no text.
    let ids = v["output_ids"].as_array().unwrap();
    assert_eq!(ids.len(), 3, "{v}");
    assert_eq!(m["finish_reason"]["matched"], ids[2], "{v}");
    assert_eq!(v["text"], " t0 t1", "{v}");
    // Run to its length, every token has its text.
    let r = one.post(
        "/generate",
        &json!({"input_ids": [9, 10, 11], "sampling_params": {"max_new_tokens": 4, "ignore_eos": true}}),
    );
    let v = json_body(&r);
    assert_eq!(v["meta_info"]["finish_reason"]["type"], "length", "{v}");
    assert_eq!(v["text"], " t0 t1 t2 t3", "{v}");

    // The same request at --time-scale 4: the engine takes the same engine time, which the
    // client sees in a quarter of the wall time; `e2e_latency` and the histograms say so.
    let e2e_at_1 = m["e2e_latency"].as_f64().unwrap();
    let four = Server::start(s, 4.0, 64);
    let v = json_body(&four.post("/generate", &ask));
    let e2e_at_4 = v["meta_info"]["e2e_latency"].as_f64().unwrap();
    assert!(e2e_at_1 > 0.0);
    assert!((e2e_at_4 * 4.0 - e2e_at_1).abs() <= 1e-9 * e2e_at_1, "{e2e_at_4} at 4 vs {e2e_at_1} at 1");
    let m4 = four.ask("GET", "/metrics", "");
    // The histogram observes at the step's end, `e2e_latency` when the output reaches the
    // tokenizer manager (the streaming queue's delay later): close, and both in client time.
    let sum4 = metric(&m4, "sglang:e2e_request_latency_seconds_sum");
    assert!((sum4 - e2e_at_4).abs() <= 0.05 * e2e_at_4, "{sum4} vs {e2e_at_4}");
    let ttft4 = metric(&m4, "sglang:time_to_first_token_seconds_sum");
    assert!(ttft4 > 0.0 && ttft4 < e2e_at_4, "{ttft4}");
}

#[test]
fn a_connection_past_the_limit_is_still_answered_on_metrics_and_health() {
    let server = Server::start(spec("serve-small-vllm", json!({}), json!({})), 1.0, 1);
    // The one connection allowed, kept open (keep-alive) after its first answer.
    let mut held = server.connect();
    held.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    held.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    // A monitoring scrape and a health check on a second connection are answered.
    let m = server.ask("GET", "/metrics", "");
    assert_eq!(status(&m), 200, "{m}");
    assert!(m.contains("vllm:num_requests_running"), "{m}");
    assert_eq!(status(&server.ask("GET", "/health", "")), 200);
    // Anything else past the limit is refused.
    let body = json!({"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 2});
    let r = server.post("/v1/completions", &body);
    assert_eq!(status(&r), 503, "{r}");
    assert!(r.contains("too many connections"), "{r}");
    assert_eq!(status(&server.ask("GET", "/v1/models", "")), 503);
    // With the first connection gone, a completion is served again.
    drop(held);
    let mut tries = 0;
    let r = loop {
        let r = server.post("/v1/completions", &body);
        if status(&r) != 503 || tries == 200 {
            break r;
        }
        tries += 1;
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status(&r), 200, "{r}");
}

/// The flat error body SGLang's OpenAI server writes, checked field by field.
fn sglang_error(v: &Value, kind: &str, message_start: &str) {
    assert_eq!(v["object"], "error", "{v}");
    assert_eq!(v["type"], kind, "{v}");
    assert_eq!(v["code"], 400, "{v}");
    assert!(v["param"].is_null(), "{v}");
    let msg = v["message"].as_str().unwrap_or_else(|| panic!("{v}"));
    assert!(msg.starts_with(message_start), "{msg:?} does not start with {message_start:?}");
}

#[test]
fn sglangs_openai_routes_answer_with_sglangs_error_texts() {
    let server = Server::start(sglang("0.5.10"), 1.0, 64);
    let long: Vec<u32> = (0..5000).collect();
    // The context: the tokenizer manager's messages, not vLLM's.
    let r = server.post("/v1/completions", &json!({"model": MODEL, "prompt": long, "max_tokens": 8}));
    assert_eq!(status(&r), 400, "{r}");
    sglang_error(
        &json_body(&r),
        "BadRequestError",
        "The input (5000 tokens) is longer than the model's context length (4096 tokens).",
    );
    let r = server
        .post("/v1/completions", &json!({"model": MODEL, "prompt": [1, 2, 3, 4, 5, 6, 7, 8], "max_tokens": 4090}));
    assert_eq!(status(&r), 400, "{r}");
    sglang_error(&json_body(&r), "BadRequestError", "Requested token count exceeds the model's maximum context length of 4096 tokens. You requested a total of 4098 tokens");
    // The sampling parameters: `SamplingParams.verify`'s messages.
    let r = server.post("/v1/completions", &json!({"model": MODEL, "prompt": "hi", "temperature": -1}));
    sglang_error(&json_body(&r), "BadRequestError", "temperature must be non-negative, got -1.");
    let r = server.post("/v1/completions", &json!({"model": MODEL, "prompt": "hi", "max_tokens": -2}));
    sglang_error(&json_body(&r), "BadRequestError", "max_new_tokens must be at least 0, got -2.");
    // The body's types: FastAPI's validation, answered 400 with type "Bad Request".
    let r = server.post("/v1/completions", &json!({"model": MODEL, "prompt": "hi", "stream": "yes"}));
    sglang_error(&json_body(&r), "Bad Request", "stream: expected a boolean");
    // `_validate_request`.
    let r = server.post("/v1/chat/completions", &json!({"model": MODEL, "messages": []}));
    sglang_error(&json_body(&r), "BadRequestError", "Messages cannot be empty.");
    // No model name is checked: another is served, and named in the response.
    let r = server.post("/v1/completions", &json!({"model": "other", "prompt": [1, 2, 3], "max_tokens": 2}));
    assert_eq!(status(&r), 200, "{r}");
    assert_eq!(json_body(&r)["model"], "other", "{r}");
    // From 0.5.10 a stream's refusal comes before the stream, as a plain 400.
    let stream_long = json!({"model": MODEL, "prompt": long, "max_tokens": 8, "stream": true});
    let r = server.post("/v1/completions", &stream_long);
    assert_eq!(status(&r), 400, "{r}");
    sglang_error(&json_body(&r), "BadRequestError", "The input (5000 tokens)");
    drop(server);

    // Through 0.5.9 the stream has begun: status 200, the error as its event, then [DONE].
    let server = Server::start(sglang("0.5.9"), 1.0, 64);
    let r = server.post("/v1/completions", &stream_long);
    assert_eq!(status(&r), 200, "{r}");
    let events: Vec<&str> = r.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(events.len(), 2, "{r}");
    assert_eq!(events[1], "[DONE]", "{r}");
    let e: Value = serde_json::from_str(events[0]).unwrap();
    sglang_error(&e["error"], "BadRequestError", "The input (5000 tokens)");
    // A request without a model: "default" from 0.5.2.
    let r = server.post("/v1/completions", &json!({"prompt": [1, 2, 3], "max_tokens": 2}));
    assert_eq!(json_body(&r)["model"], "default", "{r}");
    drop(server);

    // Through 0.5.1 `model` is required.
    let server = Server::start(sglang("0.4.10"), 1.0, 64);
    let r = server.post("/v1/completions", &json!({"prompt": [1, 2, 3], "max_tokens": 2}));
    sglang_error(&json_body(&r), "Bad Request", "model: Field required");
    drop(server);

    // vLLM's server keeps its own: 404 for another model, its context text.
    let server = Server::start(spec("serve-small-vllm", json!({}), json!({})), 1.0, 64);
    let r = server.post("/v1/completions", &json!({"model": "other", "prompt": [1, 2, 3], "max_tokens": 2}));
    assert_eq!(status(&r), 404, "{r}");
    let r = server.post("/v1/completions", &json!({"model": MODEL, "prompt": long, "max_tokens": 8}));
    assert_eq!(status(&r), 400, "{r}");
    let v = json_body(&r);
    assert_eq!(v["error"]["type"], "BadRequestError", "{v}");
    assert!(v["error"]["message"].as_str().unwrap().starts_with("This model's maximum context length is"), "{v}");
}

/// The JSON events of a streamed response (the `data:` lines, `[DONE]` left out).
fn events(r: &str) -> Vec<Value> {
    r.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect()
}

/// The OpenAI routes send no text for the EOS token and count it in `completion_tokens`, as
/// vLLM (the detokenizer leaves a stop-terminated output's last token out) and SGLang
/// (`trim_matched_stop`) do. The EOS step's chunk: vLLM's and SGLang's completions an empty
/// `text` with `finish_reason` "stop"; vLLM's chat an empty `content`; SGLang's chat its
/// separate finish chunk with an empty delta (no content chunk for the EOS step). Before,
/// the EOS token's stand-in text (" t2") was sent as the last token's.
#[test]
fn the_openai_routes_send_no_text_for_the_eos_token_and_count_it() {
    // Every output stops at EOS after 3 tokens unless ignore_eos.
    let eos3 = json!({"ignore_eos": false, "output_len_dist": {"kind": "uniform", "min": 3, "max": 3}});
    let cases = [
        ("vllm 0.11.0", spec("serve-small-vllm", json!({"version": "0.11.0"}), eos3.clone())),
        ("sglang 0.4.10", spec("kv-starved-qwen2.5-7b-a100-sglang", json!({"version": "0.4.10"}), eos3.clone())),
        ("sglang 0.5.10", spec("kv-starved-qwen2.5-7b-a100-sglang", json!({"version": "0.5.10"}), eos3.clone())),
        ("sglang 0.5.11", spec("kv-starved-qwen2.5-7b-a100-sglang", json!({"version": "0.5.11"}), eos3.clone())),
        ("sglang 0.5.23", spec("kv-starved-qwen2.5-7b-a100-sglang", json!({"version": "0.5.23"}), eos3.clone())),
    ];
    for (name, s) in cases {
        let sglang = name.starts_with("sglang");
        let server = Server::start_wall(s, 100.0);
        let completion = json!({"model": MODEL, "prompt": [1, 2, 3, 4, 5, 6, 7, 8], "max_tokens": 8});
        let chat = json!({"model": MODEL, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 8});
        let streamed = |b: &Value| {
            let mut b = b.clone();
            b["stream"] = json!(true);
            b["stream_options"] = json!({"include_usage": true});
            b
        };

        // Not streamed: the text of the two tokens before EOS, three tokens counted.
        let v = json_body(&server.post("/v1/completions", &completion));
        assert_eq!(v["choices"][0]["text"], " t0 t1", "{name}: {v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{name}: {v}");
        assert_eq!(v["usage"]["completion_tokens"], 3, "{name}: {v}");
        let v = json_body(&server.post("/v1/chat/completions", &chat));
        assert_eq!(v["choices"][0]["message"]["content"], " t0 t1", "{name}: {v}");
        assert_eq!(v["usage"]["completion_tokens"], 3, "{name}: {v}");

        // Streamed completion: a chunk per token, the EOS one with no text.
        let ev = events(&server.post("/v1/completions", &streamed(&completion)));
        let texts: Vec<&str> = ev.iter().filter_map(|e| e["choices"][0]["text"].as_str()).collect();
        assert_eq!(texts, [" t0", " t1", ""], "{name}: {ev:?}");
        let last = &ev[2]["choices"][0];
        assert_eq!(last["finish_reason"], "stop", "{name}: {ev:?}");
        assert_eq!(last.get("matched_stop").is_some(), sglang, "{name}: {ev:?}");
        assert_eq!(ev[3]["usage"]["completion_tokens"], 3, "{name}: {ev:?}");

        // Streamed chat: the role chunk, the two tokens' text, then the EOS step's chunk.
        let ev = events(&server.post("/v1/chat/completions", &streamed(&chat)));
        assert_eq!(ev.len(), 5, "{name}: {ev:?}");
        let deltas: Vec<&Value> = ev[..4].iter().map(|e| &e["choices"][0]["delta"]).collect();
        assert_eq!(deltas[0]["role"], "assistant", "{name}: {ev:?}");
        assert_eq!(deltas[1]["content"], " t0", "{name}: {ev:?}");
        assert_eq!(deltas[2]["content"], " t1", "{name}: {ev:?}");
        let want = match name {
            "vllm 0.11.0" => json!({"content": ""}),
            "sglang 0.4.10" | "sglang 0.5.10" => {
                json!({"role": null, "content": null, "reasoning_content": null, "tool_calls": null})
            }
            _ => json!({"reasoning_content": null}),
        };
        assert_eq!(deltas[3], &want, "{name}: {ev:?}");
        assert_eq!(ev[3]["choices"][0]["finish_reason"], "stop", "{name}: {ev:?}");
        assert_eq!(ev[4]["usage"]["completion_tokens"], 3, "{name}: {ev:?}");

        // Run to its length (ignore_eos), the last token has its text.
        let mut long = streamed(&completion);
        long["max_tokens"] = json!(2);
        long["ignore_eos"] = json!(true);
        let ev = events(&server.post("/v1/completions", &long));
        let texts: Vec<&str> = ev.iter().filter_map(|e| e["choices"][0]["text"].as_str()).collect();
        assert_eq!(texts, [" t0", " t1"], "{name}: {ev:?}");
        assert_eq!(ev[1]["choices"][0]["finish_reason"], "length", "{name}: {ev:?}");

        // The same on the chat route: vLLM puts `finish_reason` on the last content chunk;
        // SGLang's every content chunk has none and a finish chunk of its own, with an empty
        // delta, follows (`serving_chat.py`, 0.4.10 and 0.5.10 read; serve put it on the
        // content chunk until 2026-12-06).
        let mut long = streamed(&chat);
        long["max_tokens"] = json!(2);
        long["ignore_eos"] = json!(true);
        let ev = events(&server.post("/v1/chat/completions", &long));
        let choices: Vec<&Value> = ev.iter().filter_map(|e| e["choices"].get(0)).collect();
        let contents: Vec<&str> = choices.iter().filter_map(|c| c["delta"]["content"].as_str()).collect();
        assert_eq!(contents, ["", " t0", " t1"], "{name}: {ev:?}");
        let reasons: Vec<&Value> = choices.iter().map(|c| &c["finish_reason"]).collect();
        if sglang {
            assert_eq!(reasons, [&Value::Null, &Value::Null, &Value::Null, &json!("length")], "{name}: {ev:?}");
            assert_eq!(choices[3]["delta"].get("content").cloned().unwrap_or(Value::Null), Value::Null, "{name}");
            assert_eq!(choices[3]["matched_stop"], Value::Null, "{name}: {ev:?}");
        } else {
            assert_eq!(reasons, [&Value::Null, &Value::Null, &json!("length")], "{name}: {ev:?}");
        }
        assert_eq!(ev.last().unwrap()["usage"]["completion_tokens"], 2, "{name}: {ev:?}");
    }
}

/// SGLang's chat limit is `max_tokens or max_completion_tokens` through 0.5.8 and
/// `max_completion_tokens or max_tokens` from 0.5.9 (`ChatCompletionRequest.to_sampling_params`;
/// 0.4.10's `_build_sampling_params`): Python's `or`, so a 0 or null first field gives way to
/// the second. vLLM reads `max_completion_tokens` first at every release. Before, serve read
/// vLLM's order for SGLang too (max_tokens 5 beside max_completion_tokens 3 gave 3 at 0.4.10).
#[test]
fn sglangs_chat_limit_follows_its_releases_order() {
    for (version, old) in [("0.4.10", true), ("0.5.8", true), ("0.5.9", false), ("0.5.23", false)] {
        let server = Server::start(sglang(version), 1.0, 64);
        let tokens = |limits: Value| {
            let mut b = json!({"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "ignore_eos": true});
            for (k, v) in limits.as_object().unwrap() {
                b[k] = v.clone();
            }
            let r = server.post("/v1/chat/completions", &b);
            assert_eq!(status(&r), 200, "{version} {limits}: {r}");
            json_body(&r)["usage"]["completion_tokens"].as_u64().unwrap()
        };
        let first = |old_first: u64, new_first: u64| if old { old_first } else { new_first };
        assert_eq!(tokens(json!({"max_tokens": 5, "max_completion_tokens": 3})), first(5, 3), "{version}");
        assert_eq!(tokens(json!({"max_tokens": 0, "max_completion_tokens": 3})), 3, "{version}");
        assert_eq!(tokens(json!({"max_tokens": 5, "max_completion_tokens": 0})), 5, "{version}");
        assert_eq!(tokens(json!({"max_tokens": null, "max_completion_tokens": 3})), 3, "{version}");
        assert_eq!(tokens(json!({"max_tokens": 5, "max_completion_tokens": null})), 5, "{version}");
    }
    // vLLM's order, at its release.
    let server = Server::start(spec("serve-small-vllm", json!({}), json!({})), 1.0, 64);
    let b = json!({"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "ignore_eos": true,
        "max_tokens": 5, "max_completion_tokens": 3});
    assert_eq!(json_body(&server.post("/v1/chat/completions", &b))["usage"]["completion_tokens"], 3);
}

/// `sglang:cache_hit_rate` is the last prefill batch's hit rate (`log_prefill_stats`), reset to
/// 0 by every 40th decode batch's stats log (`log_decode_stats`; 0.4.10 and 0.5.10 read), not
/// the run's cumulative rate (as it was until 2026-12-06). A 64-token prompt, then the same 64
/// and 16 more: the second batch hit 64 of 80 (the cumulative rate, 64 of 144, reads 0.44);
/// then a request whose 44 decode batches pass the 40th.
#[test]
fn sglangs_cache_hit_rate_is_the_last_prefill_batchs() {
    let server = Server::start(sglang("0.5.10"), 1.0, 64);
    let prompt = |n: u32, extra: u32| -> Vec<u32> { (1..=n).chain(1000..1000 + extra).collect() };
    let send = |p: Vec<u32>, max_tokens: u32| {
        let r = server.post(
            "/v1/completions",
            &json!({"model": MODEL, "prompt": p, "max_tokens": max_tokens, "ignore_eos": true}),
        );
        assert_eq!(status(&r), 200, "{r}");
    };
    let rate = || metric(&server.ask("GET", "/metrics", ""), "sglang:cache_hit_rate");
    send(prompt(64, 0), 2);
    assert_eq!(rate(), 0.0);
    send(prompt(64, 16), 2);
    assert!((rate() - 64.0 / 80.0).abs() < 1e-9, "{}", rate());
    send(prompt(8, 500), 45);
    assert_eq!(rate(), 0.0, "the 40th decode batch's log resets it");
}
