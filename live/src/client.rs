//! One streaming request against an OpenAI-compatible server, timed as
//! `vllm bench serve`'s `async_request_openai_completions` times it.
//!
//! * TTFT: first SSE chunk that carries `choices` (even with empty text).
//! * ITL: one entry per later chunk with `choices`.
//! * Latency: up to the last chunk with `choices` (not `[DONE]`).
//! * Output tokens: `usage.completion_tokens` (`stream_options.include_usage`).
//!
//! Every failure is an outcome with a reason ([`Failure`]), never a panic:
//! HTTP errors, refused connections, timeouts, streams cut before `[DONE]`,
//! malformed chunks.

use std::time::{Duration, Instant};

use serde::{Serialize, Serializer};
use serde_json::{json, Value};
use thiserror::Error;

/// Why a request failed.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum Failure {
    /// The connection could not be made (refused, reset, DNS).
    #[error("connection failed: {0}")]
    Connect(String),
    /// The request's time limit passed.
    #[error("timeout after {0} s")]
    Timeout(f64),
    /// The transport failed otherwise.
    #[error("request failed: {0}")]
    Request(String),
    /// The server answered with an error status (the body's first 300 characters).
    #[error("HTTP {status}: {body}")]
    Http { status: u16, body: String },
    /// The stream broke off.
    #[error("stream cut: {0}")]
    StreamCut(String),
    /// A chunk was not JSON.
    #[error("malformed SSE chunk ({error}): {chunk}")]
    Malformed { error: String, chunk: String },
    /// The server sent an error event in the stream.
    #[error("server error in stream: {0}")]
    ServerError(String),
    /// The stream ended without `[DONE]`.
    #[error("stream ended before [DONE] after {0} chunks")]
    NoDone(u32),
    /// The stream ended without a token.
    #[error("the stream carried no token")]
    NoToken,
    /// The run was interrupted (Ctrl-C) while the request was in flight.
    #[error("not completed: the run was interrupted")]
    Aborted,
}

impl Serialize for Failure {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

/// What happened to one request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    pub success: bool,
    /// Why it failed; None when it succeeded or was never sent.
    pub error: Option<Failure>,
    /// False for a request that was never sent (the run was interrupted first): not a failure.
    pub sent: bool,
    /// Seconds from the run's start when the request was sent.
    pub start_s: f64,
    pub ttft_s: f64,
    pub itl_s: Vec<f64>,
    pub latency_s: f64,
    /// `usage.completion_tokens`, or the number of chunks if usage is missing.
    pub output_tokens: u32,
    pub prompt_tokens: Option<u32>,
    /// The text streamed back, as `vllm bench serve` collects it (`generated_text`): each chunk's
    /// `choices[0].text` (completions) or `choices[0].delta.content` (chat), in order.
    pub generated_text: String,
}

/// Request parameters.
#[derive(Clone, Debug)]
pub struct Request {
    pub prompt_token_ids: Vec<u32>,
    /// The prompt as text, for the chat endpoint (`messages`); None sends token ids to `/v1/completions`.
    pub text: Option<String>,
    pub max_tokens: u32,
    pub ignore_eos: bool,
    /// Time the chat stream's opening role chunk (a delta with `role` and empty `content`) as the
    /// first token, as `vllm bench serve` 0.11–0.32 does (`sim::workload::Workload::role_chunk`);
    /// false: skip it, as 0.33 and `sglang.bench_serving` do.
    pub time_role_chunk: bool,
    /// Send `"temperature": 0.0` (greedy), as `vllm bench serve` before 0.15 and
    /// `sglang.bench_serving` do; false: no temperature, the server's default sampling, as
    /// `vllm bench serve` from 0.15 (`sim::config::client_sends_greedy`).
    pub greedy: bool,
}

/// Where and how to send.
#[derive(Clone, Debug)]
pub struct Target {
    pub url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub timeout: Duration,
}

/// Whether a streamed choice carries output, as `vllm bench serve` 0.33 reads it
/// (`_choice_has_streamed_output`, `benchmarks/lib/endpoint_request_func.py`): a completions
/// choice always (its `text` may be empty for a special token); a chat delta with content,
/// reasoning or a tool call, or with an empty `content` and no `role` (a token that decodes to
/// nothing). `sglang.bench_serving` counts only a non-empty content or `reasoning_content`, so
/// it also drops that last kind (rare: a special token under `skip_special_tokens`).
fn streams_output(choice: &Value) -> bool {
    let Some(delta) = choice.get("delta") else { return true };
    let Some(d) = delta.as_object() else { return false };
    let truthy = |k: &str| match d.get(k) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(t)) => !t.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(_) => true,
    };
    if ["content", "reasoning", "reasoning_content", "tool_calls", "function_call"].iter().any(|k| truthy(k)) {
        return true;
    }
    d.get("content").and_then(Value::as_str) == Some("") && !d.contains_key("role")
}

/// Sends one streaming completion; `t0` is the run's start.
pub async fn send(client: &reqwest::Client, target: &Target, req: &Request, t0: Instant) -> Outcome {
    let st = Instant::now();
    let mut out = Outcome { start_s: (st - t0).as_secs_f64(), sent: true, ..Default::default() };
    let mut body = match &req.text {
        Some(text) => json!({
            "model": target.model,
            "messages": [{"role": "user", "content": text}],
            "max_completion_tokens": req.max_tokens,
            "max_tokens": req.max_tokens,
            "stream": true,
            "stream_options": {"include_usage": true},
            "ignore_eos": req.ignore_eos,
        }),
        None => json!({
            "model": target.model,
            "prompt": req.prompt_token_ids,
            "max_tokens": req.max_tokens,
            "stream": true,
            "stream_options": {"include_usage": true},
            "ignore_eos": req.ignore_eos,
        }),
    };
    if req.greedy {
        body["temperature"] = json!(0.0);
    }
    let mut rb = client.post(&target.url).header("Content-Type", "application/json").body(body.to_string());
    if let Some(k) = &target.api_key {
        rb = rb.header("Authorization", format!("Bearer {k}"));
    }
    let fut = async {
        let resp = rb.send().await.map_err(|e| describe(&e))?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            return Err(Failure::Http { status: status.as_u16(), body: text.chars().take(300).collect::<String>() });
        }
        read_stream(resp, st, req.time_role_chunk, &mut out).await
    };
    match tokio::time::timeout(target.timeout, fut).await {
        Ok(Ok(())) => {
            out.success = true;
        }
        Ok(Err(e)) => {
            out.error = Some(e);
        }
        Err(_) => {
            out.error = Some(Failure::Timeout(target.timeout.as_secs_f64()));
        }
    }
    out
}

fn describe(e: &reqwest::Error) -> Failure {
    if e.is_connect() {
        Failure::Connect(e.to_string())
    } else {
        Failure::Request(e.to_string())
    }
}

async fn read_stream(
    mut resp: reqwest::Response,
    st: Instant,
    time_role_chunk: bool,
    out: &mut Outcome,
) -> Result<(), Failure> {
    let mut buf: Vec<u8> = Vec::new();
    let mut first = true;
    let mut last = st;
    let mut chunks = 0u32;
    let mut usage_tokens: Option<u32> = None;
    let mut done = false;
    loop {
        let chunk = match resp.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => return Err(Failure::StreamCut(e.to_string())),
        };
        buf.extend_from_slice(&chunk);
        // Process complete lines.
        while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim();
            let Some(data) = line.strip_prefix("data:") else { continue };
            let data = data.trim();
            if data == "[DONE]" {
                done = true;
                continue;
            }
            let v: Value = serde_json::from_str(data).map_err(|e| Failure::Malformed {
                error: e.to_string(),
                chunk: data.chars().take(120).collect::<String>(),
            })?;
            if let Some(err) = v.get("error") {
                return Err(Failure::ServerError(err.to_string()));
            }
            // An error body written flat into the stream (`{"object": "error", "message": ...}`,
            // SGLang's non-streaming form) ends the request as well: read as no chunk, the
            // stream's `[DONE]` made a cut-off request a success of a few tokens.
            if v.get("object").and_then(Value::as_str) == Some("error") {
                return Err(Failure::ServerError(v.to_string()));
            }
            let now = Instant::now();
            // Usage first: a chunk skipped below may still carry it.
            if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
                usage_tokens = u.get("completion_tokens").and_then(Value::as_u64).map(|x| x as u32);
                out.prompt_tokens = u.get("prompt_tokens").and_then(Value::as_u64).map(|x| x as u32);
            }
            match v.get("choices").and_then(Value::as_array) {
                Some(choices) if !choices.is_empty() => {
                    // The chat role chunk: a delta naming the role, with no content and no text.
                    let role_chunk = choices[0].get("delta").is_some_and(|d| {
                        d.get("role").is_some()
                            && d.get("content").and_then(Value::as_str).unwrap_or_default().is_empty()
                    });
                    if role_chunk && !time_role_chunk {
                        continue;
                    }
                    // A chat chunk that streams no output (SGLang's separate finish chunk, whose
                    // delta from 0.5.11 is `{"reasoning_content": null}`): `vllm bench serve`
                    // from 0.33 (`_choice_has_streamed_output`) and `sglang.bench_serving` skip it;
                    // the clients that time the role chunk (vLLM ≤ 0.32) time every chunk.
                    if !time_role_chunk && !streams_output(&choices[0]) {
                        continue;
                    }
                    if first {
                        first = false;
                        out.ttft_s = (now - st).as_secs_f64();
                    } else {
                        out.itl_s.push((now - last).as_secs_f64());
                    }
                    last = now;
                    // A timed role chunk is no token (the count stands in for a missing usage).
                    chunks += u32::from(!role_chunk);
                    let c = &choices[0];
                    if let Some(t) = c.get("text").or_else(|| c.get("delta").and_then(|d| d.get("content"))) {
                        out.generated_text.push_str(t.as_str().unwrap_or_default());
                    }
                }
                _ => {}
            }
        }
    }
    if !done {
        return Err(Failure::NoDone(chunks));
    }
    if chunks == 0 {
        return Err(Failure::NoToken);
    }
    out.latency_s = (last - st).as_secs_f64();
    out.output_tokens = usage_tokens.unwrap_or(chunks);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A chat stream as SGLang 0.5.23 writes it for three tokens: the role chunk, three content
    /// chunks, a separate finish chunk whose delta is `{"reasoning_content": null}` (0.5.11+
    /// leaves `None` fields out), the usage chunk, `[DONE]`.
    async fn sglang_chat_stream() -> (String, tokio::sync::oneshot::Receiver<String>) {
        stream_of(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"a"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"b"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"c"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":null},"finish_reason":"length"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}"#,
        ])
        .await
    }

    /// A server that answers one request with a stream of these events, then `[DONE]`.
    async fn stream_of(chunks: &[&str]) -> (String, tokio::sync::oneshot::Receiver<String>) {
        let chunks: Vec<String> = chunks.iter().map(|c| c.to_string()).collect();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 65536];
            let n = sock.read(&mut buf).await.unwrap();
            let _ = tx.send(String::from_utf8_lossy(&buf[..n]).to_string());
            let mut body = String::new();
            for c in &chunks {
                body.push_str(&format!("data: {c}\n\n"));
            }
            body.push_str("data: [DONE]\n\n");
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            sock.write_all(head.as_bytes()).await.unwrap();
            sock.write_all(body.as_bytes()).await.unwrap();
            sock.shutdown().await.unwrap();
        });
        (format!("http://{addr}/v1/chat/completions"), rx)
    }

    async fn outcome(time_role_chunk: bool) -> Outcome {
        outcome_and_request(time_role_chunk, true).await.0
    }

    /// The outcome and the request as the server read it.
    async fn outcome_and_request(time_role_chunk: bool, greedy: bool) -> (Outcome, String) {
        let (url, sent) = sglang_chat_stream().await;
        let target = Target { url, model: "m".into(), api_key: None, timeout: Duration::from_secs(10) };
        let req = Request {
            prompt_token_ids: vec![1, 2],
            text: Some("hi".into()),
            max_tokens: 3,
            ignore_eos: true,
            time_role_chunk,
            greedy,
        };
        let out = send(&reqwest::Client::new(), &target, &req, Instant::now()).await;
        (out, sent.await.unwrap())
    }

    /// An error event ends the request as failed in either form, wrapped (`{"error": ...}`, what
    /// vLLM and SGLang write into a stream) or flat (`{"object": "error", ...}`, an error body
    /// as SGLang answers a request): read as no chunk, the flat one let the `[DONE]` after it
    /// count a request cut off at shutdown as a success of a few tokens (the audit of
    /// 2026-12-06).
    #[tokio::test]
    async fn an_error_event_in_either_form_fails_the_request() {
        for err in [
            r#"{"error":{"object":"error","message":"shutting down","type":"ServiceUnavailableError","param":null,"code":503}}"#,
            r#"{"object":"error","message":"shutting down","type":"ServiceUnavailableError","param":null,"code":503}"#,
        ] {
            let (url, _) = stream_of(&[r#"{"choices":[{"index":0,"text":"a"}]}"#, err]).await;
            let target = Target { url, model: "m".into(), api_key: None, timeout: Duration::from_secs(10) };
            let req = Request {
                prompt_token_ids: vec![1, 2],
                text: None,
                max_tokens: 3,
                ignore_eos: true,
                time_role_chunk: false,
                greedy: false,
            };
            let out = send(&reqwest::Client::new(), &target, &req, Instant::now()).await;
            assert!(!out.success, "{err}");
            assert!(out.error.as_ref().is_some_and(|e| e.to_string().contains("shutting down")), "{:?}", out.error);
        }
    }

    /// Greedy sampling is asked for only by the clients that ask for it (`vllm bench serve`
    /// before 0.15, `sglang.bench_serving`); 0.15 and later send no temperature.
    #[tokio::test]
    async fn temperature_is_sent_only_by_the_clients_that_send_it() {
        let (out, req) = outcome_and_request(false, true).await;
        assert!(out.success && req.contains("\"temperature\":0.0"), "{req}");
        let (out, req) = outcome_and_request(false, false).await;
        assert!(out.success && !req.contains("temperature"), "{req}");
    }

    /// `vllm bench serve` 0.33 and `sglang.bench_serving` time the three tokens only (two
    /// gaps); 0.11–0.32 time every chunk with choices: the role chunk and the finish chunk too
    /// (four gaps). The token count is the usage's either way.
    #[tokio::test]
    async fn a_chunk_without_output_is_timed_only_by_the_clients_that_time_every_chunk() {
        let skip = outcome(false).await;
        assert!(skip.success, "{:?}", skip.error);
        assert_eq!(skip.itl_s.len(), 2);
        assert_eq!(skip.output_tokens, 3);
        assert_eq!(skip.generated_text, "abc");
        let every = outcome(true).await;
        assert!(every.success, "{:?}", every.error);
        assert_eq!(every.itl_s.len(), 4);
        assert_eq!(every.output_tokens, 3);
    }

    #[test]
    fn streamed_output_follows_vllm_0_33() {
        let c = |v: Value| streams_output(&v);
        assert!(c(json!({"text": ""})));
        assert!(c(json!({"delta": {"content": "x"}})));
        assert!(c(json!({"delta": {"reasoning_content": "x"}})));
        assert!(c(json!({"delta": {"tool_calls": [{"id": "1"}]}})));
        assert!(c(json!({"delta": {"content": ""}})));
        assert!(!c(json!({"delta": {"role": "assistant", "content": ""}})));
        assert!(!c(json!({"delta": {"reasoning_content": null}})));
        assert!(!c(json!({"delta": {"content": null, "role": null}})));
        assert!(!c(json!({"delta": {}})));
    }
}
