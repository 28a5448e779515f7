//! `servesim serve`: real clients against a simulated engine. Its numbers
//! match `servesim simulate`; calibration against it finds the scenario's
//! own coefficients again; it holds 256 streams; bad requests get 4xx and
//! leave it up.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common::*;

#[test]
fn serve_holds_256_concurrent_streams() {
    let s = start_server("scenarios/serve-small-vllm.json", &["--time-scale", "4"]);
    let j = stdout_json(&run_cli(&[
        "bench",
        "--base-url",
        &s.url,
        "--random-input-len",
        "32",
        "--random-output-len",
        "8",
        "--num-prompts",
        "256",
        "--max-concurrency",
        "256",
        "--ignore-eos",
        "--vocab-size",
        "32000",
        "--json",
    ]));
    assert_eq!(j["completed"], 256);
    assert_eq!(j["failed"], 0);
    assert!(j["max_concurrent_requests"].as_u64().unwrap() >= 200, "{}", j["max_concurrent_requests"]);
}

/// Reads one HTTP/1.1 response: its head, then a body by Content-Length, chunked to the
/// last chunk, or to the end of the connection.
fn read_response(s: &mut TcpStream) -> String {
    let mut buf: Vec<u8> = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return String::from_utf8_lossy(&buf).into_owned(),
        }
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let len = head.lines().find_map(|l| l.strip_prefix("content-length:").and_then(|v| v.trim().parse::<usize>().ok()));
    if let Some(n) = len {
        let mut body = vec![0u8; n];
        let _ = s.read_exact(&mut body);
        buf.extend_from_slice(&body);
    } else if head.contains("transfer-encoding: chunked") {
        while !buf.ends_with(b"\r\n0\r\n\r\n") {
            match s.read(&mut byte) {
                Ok(1) => buf.push(byte[0]),
                _ => break,
            }
        }
    } else {
        let _ = s.read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

fn connect(url: &str) -> TcpStream {
    let s = TcpStream::connect(url.trim_start_matches("http://")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn raw(url: &str, request: &[u8]) -> String {
    let mut s = connect(url);
    let _ = s.write_all(request);
    read_response(&mut s)
}

fn post(url: &str, path: &str, body: &str) -> String {
    raw(
        url,
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
}

#[test]
fn malformed_requests_get_4xx_and_leave_the_server_up() {
    let s = start_server("scenarios/serve-small-vllm.json", &[]);
    let m = "qwen2.5-7b-instruct";
    let cases: Vec<(String, &str)> = vec![
        (post(&s.url, "/v1/completions", "{not json"), "400"),
        (post(&s.url, "/v1/completions", "[1,2,3]"), "400"),
        (post(&s.url, "/v1/completions", r#"{"model": "other", "prompt": "hi"}"#), "404"),
        (post(&s.url, "/v1/completions", &format!(r#"{{"model": "{m}", "prompt": "hi", "max_tokens": "x"}}"#)), "400"),
        (post(&s.url, "/v1/completions", &format!(r#"{{"model": "{m}", "prompt": "hi", "max_tokens": 0}}"#)), "400"),
        (
            post(&s.url, "/v1/completions", &format!(r#"{{"model": "{m}", "prompt": "hi", "max_tokens": 99999}}"#)),
            "400",
        ),
        (
            post(
                &s.url,
                "/v1/completions",
                &format!(
                    r#"{{"model": "{m}", "prompt": {}, "max_tokens": 8}}"#,
                    serde_json::to_string(&vec![7u32; 5000]).unwrap()
                ),
            ),
            "400",
        ),
        (post(&s.url, "/v1/completions", &format!(r#"{{"model": "{m}", "prompt": [-1, 2]}}"#)), "400"),
        (post(&s.url, "/v1/completions", &format!(r#"{{"model": "{m}", "prompt": "hi", "stream": "yes"}}"#)), "400"),
        // What vLLM's SamplingParams refuse, servesim refuses alike.
        (post(&s.url, "/v1/completions", &format!(r#"{{"model": "{m}", "prompt": "hi", "temperature": -5}}"#)), "400"),
        (post(&s.url, "/v1/completions", &format!(r#"{{"model": "{m}", "prompt": "hi", "top_p": 0}}"#)), "400"),
        (
            post(
                &s.url,
                "/v1/completions",
                &format!(r#"{{"model": "{m}", "prompt": "hi", "max_tokens": 2, "min_tokens": 10}}"#),
            ),
            "400",
        ),
        (post(&s.url, "/v1/chat/completions", &format!(r#"{{"model": "{m}", "messages": "hi"}}"#)), "400"),
        (raw(&s.url, b"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n"), "413"),
        (
            raw(&s.url, b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
            "400",
        ),
        (raw(&s.url, b"GET /nowhere HTTP/1.1\r\n\r\n"), "404"),
        (raw(&s.url, b"DELETE /v1/models HTTP/1.1\r\n\r\n"), "405"),
    ];
    for (i, (resp, code)) in cases.iter().enumerate() {
        assert!(
            resp.starts_with(&format!("HTTP/1.1 {code}")),
            "case {i}: expected {code}, got {:?}",
            resp.lines().next()
        );
        // vLLM's error body: {"error": {"message", "type", "param", "code"}}, code = the status.
        let body = &resp[resp.find("\r\n\r\n").unwrap() + 4..];
        let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("case {i}: {e}: {body}"));
        assert_eq!(v["error"]["code"], code.parse::<u64>().unwrap(), "case {i}: {body}");
        assert!(v["error"]["message"].is_string() && v["error"]["type"].is_string(), "case {i}: {body}");
    }
    // No model: the served one, as vLLM's (`model: str | None = None`) and SGLang's protocols
    // default it.
    let no_model = post(&s.url, "/v1/completions", r#"{"prompt": "hi", "max_tokens": 1}"#);
    assert!(no_model.starts_with("HTTP/1.1 200") && no_model.contains(&format!("\"model\":\"{m}\"")), "{no_model}");
    // A request line that is not HTTP, and one with no path: 400, not 404.
    for garbage in [&b"\x00\x01\x02 garbage\r\n\r\n"[..], b"GET\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n"] {
        let r = raw(&s.url, garbage);
        assert!(r.starts_with("HTTP/1.1 400") || r.starts_with("HTTP/1.1 505"), "{garbage:?}: {r:?}");
    }
    // A connection cut in the middle of its body, and one that sends garbage.
    {
        let mut t = TcpStream::connect(s.url.trim_start_matches("http://")).unwrap();
        t.write_all(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 500\r\n\r\n{\"model\":").unwrap();
    }
    // Still up, and still serving.
    assert!(raw(&s.url, b"GET /health HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    let ok = post(
        &s.url,
        "/v1/chat/completions",
        &format!(r#"{{"model": "{m}", "messages": [{{"role": "user", "content": "hello"}}], "max_tokens": 3}}"#),
    );
    assert!(ok.starts_with("HTTP/1.1 200") && ok.contains("\"completion_tokens\":3"), "{ok}");
    // A chat stream opens with the role chunk, before the first token's (vLLM's and SGLang's).
    let streamed = post(
        &s.url,
        "/v1/chat/completions",
        &format!(
            r#"{{"model": "{m}", "messages": [{{"role": "user", "content": "hello"}}], "max_tokens": 2, "stream": true}}"#
        ),
    );
    let role = streamed
        .find(r#""delta":{"content":"","role":"assistant"}"#)
        .or_else(|| streamed.find(r#""delta":{"role":"assistant","content":""}"#));
    let first = streamed.find(r#""delta":{"content":"t"#).or_else(|| streamed.find(r#""delta":{"content":" "#));
    assert!(role.is_some() && streamed.matches("\"role\"").count() == 1, "{streamed}");
    assert!(first.is_none_or(|f| role.unwrap() < f), "{streamed}");
    let metrics = raw(&s.url, b"GET /metrics HTTP/1.1\r\n\r\n");
    for name in [
        "vllm:cache_config_info",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:num_preemptions_total",
    ] {
        assert!(metrics.contains(name), "/metrics lacks {name}");
    }
}

#[test]
fn an_sglang_scenario_is_served_under_sglangs_names() {
    let s = start_server("scenarios/kv-starved-qwen2.5-7b-a100-sglang.json", &["--time-scale", "20"]);
    let info = raw(&s.url, b"GET /get_server_info HTTP/1.1\r\n\r\n");
    // The flag as given (here binding: the pool), and the pool under its own name.
    assert!(info.contains("\"max_total_tokens\":10240") && info.contains("\"max_total_num_tokens\":10240"), "{info}");
    // A bound the page size rounds: the flag as given, the pool page-aligned.
    {
        let rounded = start_server(
            "scenarios/kv-starved-qwen2.5-7b-a100-sglang.json",
            &["--set", "engine.page_size=64", "--set", "engine.max_total_tokens=10000"],
        );
        let info = raw(&rounded.url, b"GET /get_server_info HTTP/1.1\r\n\r\n");
        assert!(
            info.contains("\"max_total_tokens\":10000") && info.contains("\"max_total_num_tokens\":9984"),
            "{info}"
        );
    }
    // A pool pinned at the start-up log's figure: no flag given, as SGLang's server_args says.
    {
        let logged = start_server("scenarios/rtx5090-qwen2.5-7b-sglang.json", &[]);
        let info = raw(&logged.url, b"GET /get_server_info HTTP/1.1\r\n\r\n");
        assert!(info.contains("\"max_total_tokens\":null") && info.contains("\"max_total_num_tokens\":"), "{info}");
    }
    let j = stdout_json(&run_cli(&[
        "bench",
        "--base-url",
        &s.url,
        "--random-input-len",
        "64",
        "--random-output-len",
        "8",
        "--num-prompts",
        "8",
        "--max-concurrency",
        "4",
        "--ignore-eos",
        "--vocab-size",
        "32000",
        "--json",
    ]));
    assert_eq!(j["engine"], "sglang");
    assert_eq!(j["kv_cache_tokens"], 10240);
    assert_eq!(j["completed"], 8);
    let metrics = raw(&s.url, b"GET /metrics HTTP/1.1\r\n\r\n");
    for name in [
        "sglang:num_running_reqs",
        "sglang:max_total_num_tokens",
        "sglang:token_usage",
        "sglang:inter_token_latency_seconds_bucket",
    ] {
        assert!(metrics.contains(name), "/metrics lacks {name}");
    }
}

#[test]
fn serve_counts_text_prompts_with_the_tokenizer_given() {
    let tok = root().join("tests/fixtures/tokenizer.json");
    let s =
        start_server("scenarios/serve-small-vllm.json", &["--tokenizer", tok.to_str().unwrap(), "--time-scale", "10"]);
    let r = post(
        &s.url,
        "/v1/completions",
        r#"{"model": "qwen2.5-7b-instruct", "prompt": "a b c d a b", "max_tokens": 2}"#,
    );
    assert!(r.contains("\"prompt_tokens\":6"), "{r}");
    // Without one, text counts one token per 4 bytes: 11 bytes, 3 tokens.
    let s2 = start_server("scenarios/serve-small-vllm.json", &["--time-scale", "10"]);
    let r = post(
        &s2.url,
        "/v1/completions",
        r#"{"model": "qwen2.5-7b-instruct", "prompt": "a b c d a b", "max_tokens": 2}"#,
    );
    assert!(r.contains("\"prompt_tokens\":3"), "{r}");
    // A bad tokenizer file is an error naming the flag.
    let o = run_cli(&["serve", "--tokenizer", "Cargo.toml", "--port", "0", "--max-lifetime", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--tokenizer"));
}

#[test]
fn bench_speaks_the_chat_endpoint_with_text_built_from_the_tokenizer() {
    let tok = root().join("tests/fixtures/tokenizer.json");
    let s =
        start_server("scenarios/serve-small-vllm.json", &["--tokenizer", tok.to_str().unwrap(), "--time-scale", "10"]);
    let dir = scratch().join("chat");
    let j = stdout_json(&run_cli(&[
        "bench",
        "--base-url",
        &s.url,
        "--endpoint",
        "/v1/chat/completions",
        "--tokenizer",
        tok.to_str().unwrap(),
        "--random-input-len",
        "20",
        "--random-output-len",
        "4",
        "--num-prompts",
        "6",
        "--max-concurrency",
        "3",
        "--ignore-eos",
        "--result-dir",
        dir.to_str().unwrap(),
        "--save-result",
        "--metric-percentiles",
        "25,99.9",
        "--json",
    ]));
    assert_eq!(j["completed"], 6);
    assert_eq!(j["total_output_tokens"], 24);
    // The saved result carries the percentiles asked for under vLLM's keys, beside its own.
    let saved = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json") && !p.to_string_lossy().ends_with(".record.json"))
        .unwrap();
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(saved).unwrap()).unwrap();
    for k in ["p25_ttft_ms", "p99.9_ttft_ms", "p25_itl_ms", "p99.9_e2el_ms", "p99_ttft_ms"] {
        assert!(saved[k].is_number(), "{k} in {saved}");
    }
    assert!(saved["p25_ttft_ms"].as_f64() <= saved["p99.9_ttft_ms"].as_f64());
    // The run record's workload says where the requests went (what `simulate` of it prices).
    let rec = run_record(&dir);
    assert_eq!(rec["setup"]["workload"]["endpoint"], "/v1/chat/completions", "{}", rec["setup"]["workload"]);
    // Each request's prompt, as the server counted it, is recorded beside the intended length.
    for v in request_lines(&dir) {
        let counted = v["prompt_tokens"].as_u64().unwrap();
        assert!(
            (20..=24).contains(&counted),
            "the server counted {counted} tokens for a 20-token prompt (plus the chat role)"
        );
        // The stream opens with a role chunk, which the current `vllm bench serve` (0.33) skips:
        // 4 tokens, 3 gaps.
        assert_eq!(v["itl_ms"].as_array().map(Vec::len), Some(3), "{v}");
    }
    // A client modelled on vLLM 0.32 (a scenario of that release) times the role chunk as its
    // first token, as `vllm bench serve` 0.11–0.32 does: one gap more a request.
    let mut sc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("scenarios/serve-small-vllm.json")).unwrap())
            .unwrap();
    sc["engine"]["version"] = "0.32.0".into();
    std::fs::create_dir_all(&dir).unwrap();
    let sc_path = dir.join("v032.json");
    std::fs::write(&sc_path, sc.to_string()).unwrap();
    let dir32 = dir.join("v032");
    let _ = run_cli(&[
        "bench",
        "--base-url",
        &s.url,
        "--endpoint",
        "/v1/chat/completions",
        "--tokenizer",
        tok.to_str().unwrap(),
        "--scenario",
        sc_path.to_str().unwrap(),
        "--random-input-len",
        "20",
        "--random-output-len",
        "4",
        "--num-prompts",
        "2",
        "--ignore-eos",
        "--result-dir",
        dir32.to_str().unwrap(),
        "--save-result",
        "--json",
    ]);
    let lines = request_lines(&dir32);
    assert_eq!(lines.len(), 2);
    for v in lines {
        assert_eq!(v["itl_ms"].as_array().map(Vec::len), Some(4), "{v}");
        assert_eq!(v["output_tokens"], 4, "usage counts no role chunk: {v}");
    }
    // Without a tokenizer the chat endpoint is refused with a clear error.
    let o = run_cli(&[
        "bench",
        "--base-url",
        &s.url,
        "--endpoint",
        "/v1/chat/completions",
        "--num-prompts",
        "1",
        "--ignore-eos",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--tokenizer"));
}

#[test]
fn diff_says_what_differs_between_two_runs_setups() {
    let s = start_server("scenarios/serve-small-vllm.json", &["--time-scale", "20"]);
    let dir = scratch().join("diff");
    let run = |seed: &str, name: &str| {
        let o = run_cli(&[
            "bench",
            "--base-url",
            &s.url,
            "--random-input-len",
            "32",
            "--random-output-len",
            "4",
            "--num-prompts",
            "4",
            "--ignore-eos",
            "--vocab-size",
            "32000",
            "--seed",
            seed,
            "--save-result",
            "--result-dir",
            dir.to_str().unwrap(),
            "--result-filename",
            name,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        dir.join(format!("{name}.record.json"))
    };
    let (a, b, c) = (run("1", "a"), run("2", "b"), run("1", "c"));
    let rec: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    assert_eq!(rec["setup"]["kv_capacity_tokens"], 10240);
    assert_eq!(rec["setup"]["engine"]["kind"], "vllm");
    // `serve`'s scheduler limits, which it says on /v1/models (a record kept them null, and
    // `diff` read a serve at max_num_seqs 4 and one at 32 as one setup).
    assert!(rec["setup"]["max_running"].as_u64().is_some_and(|n| n > 0), "{}", rec["setup"]);
    assert!(rec["setup"]["token_budget"].as_u64().is_some_and(|n| n > 0), "{}", rec["setup"]);
    assert!(rec["observed"]["metrics_after"]["vllm:generation_tokens_total"].as_f64().unwrap() > 0.0);
    let d = run_cli(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    let t = String::from_utf8_lossy(&d.stdout);
    assert!(t.contains("workload.seed") && t.contains("workload_hash"), "{t}");
    let same = run_cli(&["diff", a.to_str().unwrap(), c.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&same.stdout).contains("the same setup"));
    let bad = run_cli(&["diff", a.to_str().unwrap(), "Cargo.toml"]);
    assert_eq!(bad.status.code(), Some(2));
}

const MODEL: &str = "qwen2.5-7b-instruct";

fn completion(body: &str) -> Vec<u8> {
    format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn serve_keeps_connections_alive_across_requests() {
    let s = start_server("scenarios/serve-small-vllm.json", &["--time-scale", "20"]);
    let mut c = connect(&s.url);
    // Three requests, one after the other, on one connection: a health check, a
    // completion, and the metrics.
    c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert!(read_response(&mut c).starts_with("HTTP/1.1 200"));
    c.write_all(&completion(&format!(
        r#"{{"model": "{MODEL}", "prompt": [1, 2, 3], "max_tokens": 3, "ignore_eos": true}}"#
    )))
    .unwrap();
    let r = read_response(&mut c);
    assert!(r.starts_with("HTTP/1.1 200") && r.contains("\"completion_tokens\":3"), "{r}");
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let m = read_response(&mut c);
    assert!(m.contains("finished_reason=\"length\"} 1.0"), "{m}");
    // A streamed one on the same connection (chunked SSE), then another request still.
    c.write_all(&completion(&format!(
        r#"{{"model": "{MODEL}", "prompt": [1, 2, 3], "max_tokens": 2, "ignore_eos": true, "stream": true}}"#
    )))
    .unwrap();
    let r = read_response(&mut c);
    assert!(r.contains("text/event-stream") && r.contains("data: [DONE]"), "{r}");
    c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert!(read_response(&mut c).starts_with("HTTP/1.1 200"));
}

#[test]
fn serve_rejects_flags_out_of_range_with_a_message_not_a_panic() {
    for (flag, value, says) in [
        ("--max-lifetime", "nan", "--max-lifetime"),
        ("--max-lifetime", "inf", "--max-lifetime"),
        ("--max-lifetime", "1e300", "--max-lifetime"),
        ("--max-lifetime=-1", "", "--max-lifetime"),
        ("--max-lifetime", "0", "--max-lifetime"),
        ("--time-scale", "1e6", "between 0.001 and 100"),
        ("--time-scale", "0", "--time-scale"),
        ("--time-scale", "nan", "--time-scale"),
        ("--host", "no such host.invalid", "--host"),
    ] {
        let mut args = vec!["serve", "--port", "0", flag];
        if !value.is_empty() {
            args.push(value);
        }
        let o = run_cli(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains(says) && !err.contains("panicked"), "{flag} {value}: {err}");
    }
}

#[test]
fn serve_listens_on_localhost_and_ipv6() {
    let mut hosts = vec!["localhost"];
    // IPv6 loopback where the host has one.
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        hosts.extend(["::1", "[::1]"]);
    } else {
        eprintln!("no IPv6 loopback on this host: --host ::1 not tried");
    }
    for host in hosts {
        let s = start_server("scenarios/serve-small-vllm.json", &["--host", host]);
        let url = s.url.clone();
        let addr = url.trim_start_matches("http://");
        let sock: std::net::SocketAddr = addr.parse().unwrap_or_else(|e| panic!("{host}: {addr}: {e}"));
        assert!(sock.ip().is_loopback(), "{host}: {sock}");
        let mut c = TcpStream::connect(sock).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert!(read_response(&mut c).starts_with("HTTP/1.1 200"), "{host}");
    }
}

#[test]
fn serve_honours_n_1_and_refuses_n_above_1() {
    let s = start_server("scenarios/serve-small-vllm.json", &["--time-scale", "20"]);
    let r = raw(&s.url, &completion(&format!(r#"{{"model": "{MODEL}", "prompt": "hi", "max_tokens": 2, "n": 1}}"#)));
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    for n in ["3", "0", "-1", "\"2\""] {
        let r =
            raw(&s.url, &completion(&format!(r#"{{"model": "{MODEL}", "prompt": "hi", "max_tokens": 2, "n": {n}}}"#)));
        assert!(r.starts_with("HTTP/1.1 400") && r.contains("\"code\":400") && r.contains("n:"), "n={n}: {r}");
    }
}

fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn a_client_that_goes_away_has_its_request_aborted_and_not_counted_as_finished() {
    // 2000 tokens at ~10 ms a step: 20 s if it ran to the end.
    let s = start_server("scenarios/serve-small-vllm.json", &[]);
    let started = std::time::Instant::now();
    {
        let mut c = connect(&s.url);
        c.write_all(&completion(&format!(
            r#"{{"model": "{MODEL}", "prompt": [5, 6, 7, 8], "max_tokens": 2000, "ignore_eos": true, "stream": true}}"#
        )))
        .unwrap();
        // Wait for the first token, then hang up.
        let mut buf = [0u8; 4096];
        let mut got = Vec::new();
        while !String::from_utf8_lossy(&got).contains("data: {") {
            let n = c.read(&mut buf).unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
    }
    // Freed from the engine: nothing running or waiting, well before the 20 s it would take.
    let mut freed = false;
    let mut m = String::new();
    while started.elapsed() < Duration::from_secs(15) {
        m = raw(&s.url, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        if metric(&m, "vllm:num_requests_running{") == Some(0.0) {
            freed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(freed, "the aborted request still runs after 15 s:\n{m}");
    // vLLM counts nothing for a request its client aborted (`output_processor.py`,
    // `abort_requests` drops the state without finished-request stats): no success of any
    // reason, no e2e latency; its first token was counted as it came.
    for reason in ["stop", "length", "abort"] {
        let name =
            format!("vllm:request_success_total{{engine=\"0\",model_name=\"{MODEL}\",finished_reason=\"{reason}\"}}");
        assert_eq!(metric(&m, &name), Some(0.0), "{reason}: {m}");
    }
    assert_eq!(metric(&m, "vllm:e2e_request_latency_seconds_count{"), Some(0.0), "{m}");
    assert_eq!(metric(&m, "vllm:time_to_first_token_seconds_count{"), Some(1.0), "{m}");
    assert_eq!(metric(&m, "vllm:prompt_tokens_total{"), Some(4.0), "{m}");
    assert_eq!(metric(&m, "vllm:num_requests_waiting{"), Some(0.0), "{m}");
    assert_eq!(metric(&m, "vllm:kv_cache_usage_perc{"), Some(0.0), "{m}");
    assert!(started.elapsed() < Duration::from_secs(15));
    // The server still serves.
    let r = raw(&s.url, &completion(&format!(r#"{{"model": "{MODEL}", "prompt": [1], "max_tokens": 2}}"#)));
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
}

#[test]
fn metrics_have_help_and_type_lines_and_the_finished_reason() {
    let s = start_server("scenarios/serve-small-vllm.json", &["--time-scale", "20"]);
    let r = raw(
        &s.url,
        &completion(&format!(r#"{{"model": "{MODEL}", "prompt": [1, 2], "max_tokens": 2, "ignore_eos": true}}"#)),
    );
    assert!(r.contains("\"finish_reason\":\"length\""), "{r}");
    let m = raw(&s.url, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    // Every family has HELP then TYPE, and every sample belongs to a declared family.
    let mut declared = std::collections::HashSet::new();
    let lines: Vec<&str> = m.lines().skip_while(|l| !l.starts_with('#')).collect();
    for (i, l) in lines.iter().enumerate() {
        if let Some(rest) = l.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(lines[i + 1].starts_with(&format!("# TYPE {name} ")), "{l} / {}", lines[i + 1]);
            declared.insert(name.to_string());
        } else if !l.starts_with('#') && !l.is_empty() {
            let name = l.split(['{', ' ']).next().unwrap();
            let family = ["_bucket", "_sum", "_count"].iter().fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
            assert!(declared.contains(name) || declared.contains(family), "{name} has no HELP/TYPE");
        }
    }
    for reason in ["stop", "length", "abort"] {
        assert!(
            m.contains(&format!(
                "vllm:request_success_total{{engine=\"0\",model_name=\"{MODEL}\",finished_reason=\"{reason}\"}}"
            )),
            "{m}"
        );
    }
    assert_eq!(
        metric(
            &m,
            &format!("vllm:request_success_total{{engine=\"0\",model_name=\"{MODEL}\",finished_reason=\"length\"}}")
        ),
        Some(1.0)
    );
    assert!(m.contains("# TYPE vllm:num_preemptions_total counter"), "{m}");
}

#[test]
fn metrics_escape_label_values() {
    // A model name with a quote, a backslash and a newline: escaped as the text format says,
    // so that prometheus_client (and `calibrate`) can parse /metrics.
    let s = start_server("scenarios/serve-small-vllm.json", &["--model", "a\"b\\c\nd"]);
    let m = raw(&s.url, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(m.contains("vllm:num_requests_running{engine=\"0\",model_name=\"a\\\"b\\\\c\\nd\"} 0.0\n"), "{m}");
    // Every sample is one line: name{labels} value.
    for l in m.lines().skip_while(|l| !l.starts_with('#')).filter(|l| !l.starts_with('#') && !l.is_empty()) {
        assert!(l.starts_with("vllm:") && l.rsplit(' ').next().unwrap().parse::<f64>().is_ok(), "{l}");
    }
}

#[test]
fn on_sigterm_active_streams_end_with_an_error_event() {
    let mut c = servesim();
    c.args(["serve", "scenarios/serve-small-vllm.json", "--port", "0", "--max-lifetime", "120"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stderr.take().unwrap()), &mut line).unwrap();
    let url = line.split_whitespace().find(|w| w.starts_with("http://")).unwrap().to_string();
    let mut conn = connect(&url);
    conn.write_all(&completion(&format!(
        r#"{{"model": "{MODEL}", "prompt": [5, 6, 7], "max_tokens": 2000, "ignore_eos": true, "stream": true}}"#
    )))
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("data: {") {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    let kill = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    // The rest of the stream: tokens, then the error event and [DONE] (as vLLM's stream
    // generator ends on an error), then the end of the chunked body.
    let _ = conn.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    let err =
        text.lines().find(|l| l.starts_with("data: {\"error\"")).unwrap_or_else(|| panic!("no error event: {text}"));
    let v: serde_json::Value = serde_json::from_str(err.trim_start_matches("data: ")).unwrap();
    assert_eq!(v["error"]["code"], 503, "{err}");
    assert!(text.contains("data: [DONE]"), "{text}");
    assert!(!text.contains("\"finish_reason\":\"length\""), "the request cannot have finished: {text}");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// `serve` emulates one engine: a fleet scenario or a data-parallel engine is refused with the
/// field named, not served as one engine with one pool.
#[test]
fn serve_refuses_fleets_and_data_parallel_engines() {
    let run = |args: &[&str]| {
        let mut c = servesim();
        c.args(["serve", "--port", "0", "--max-lifetime", "3"]).args(args);
        run_bounded(c, std::time::Duration::from_secs(60))
    };
    let o = run(&["data/plan/mooncake-fleet-llama3.1-8b-h100-vllm.json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("fleet") && err.contains("one engine"), "{err}");
    let o = run(&["--set", "engine.data_parallel_size=2", "--set", "hardware.count=2"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("engine.data_parallel_size"), "{err}");
}

/// The chat payload `vllm bench serve --backend openai-chat` sends: `content` as a list of text
/// parts. Served like the same text as a string (the texts joined as vLLM joins them); a part
/// that is not text is a 400 naming the part.
#[test]
fn chat_content_as_text_parts_is_served_and_other_parts_are_refused() {
    let s = start_server("scenarios/serve-small-vllm.json", &["--time-scale", "20"]);
    let m = MODEL;
    let chat = |content: &str| {
        post(
            &s.url,
            "/v1/chat/completions",
            &format!(
                r#"{{"model":"{m}","messages":[{{"role":"user","content":{content}}}],"max_completion_tokens":4,"stream":true,"stream_options":{{"include_usage":true}},"ignore_eos":true}}"#
            ),
        )
    };
    let usage = |r: &str| -> serde_json::Value {
        let line = r.lines().filter(|l| l.contains("\"usage\"") && !l.contains("\"usage\":null")).next_back();
        let line = line.unwrap_or_else(|| panic!("no usage in {r}"));
        let v: serde_json::Value = serde_json::from_str(line.trim_start_matches("data: ")).unwrap();
        v["usage"].clone()
    };
    let parts = chat(r#"[{"type":"text","text":"hello"},{"type":"text","text":"world"}]"#);
    assert!(parts.starts_with("HTTP/1.1 200"), "{parts}");
    let joined = chat(r#""hello\nworld""#);
    assert_eq!(usage(&parts), usage(&joined), "parts are the texts joined with newlines");
    assert_eq!(usage(&parts)["completion_tokens"], 4);
    let image = chat(r#"[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"x"}}]"#);
    assert!(image.starts_with("HTTP/1.1 400"), "{image}");
    assert!(image.contains("messages[0].content[1].type") && image.contains("image_url"), "{image}");
    // Without max_tokens a chat request may fill the rest of its context (vLLM's
    // `get_max_tokens`: max_model_len − prompt; the scenario's max_model_len is 4096); a
    // completion request gets 16, as in both engines.
    let unbounded = post(
        &s.url,
        "/v1/chat/completions",
        &format!(r#"{{"model":"{m}","messages":[{{"role":"user","content":"hello"}}],"ignore_eos":true}}"#),
    );
    let body: serde_json::Value = serde_json::from_str(unbounded.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    let u = &body["usage"];
    assert_eq!(u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap(), 4096, "{body}");
    let completion =
        post(&s.url, "/v1/completions", &format!(r#"{{"model":"{m}","prompt":"hello","ignore_eos":true}}"#));
    let body: serde_json::Value = serde_json::from_str(completion.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["usage"]["completion_tokens"], 16, "{body}");
    // A chat request's limit is `max_completion_tokens or max_tokens`, as vLLM reads it; a null
    // is not given (max_tokens 5 beside max_completion_tokens 3 gave 5, and a null max_tokens
    // beside it the rest of the context; the audit of 2026-12-06).
    for (limits, want) in [
        (r#""max_tokens":5,"max_completion_tokens":3"#, 3),
        (r#""max_tokens":null,"max_completion_tokens":3"#, 3),
        (r#""max_tokens":5,"max_completion_tokens":null"#, 5),
        (r#""max_tokens":5,"max_completion_tokens":0"#, 5),
    ] {
        let r = post(
            &s.url,
            "/v1/chat/completions",
            &format!(
                r#"{{"model":"{m}","messages":[{{"role":"user","content":"hello"}}],{limits},"ignore_eos":true}}"#
            ),
        );
        let body: serde_json::Value = serde_json::from_str(r.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["usage"]["completion_tokens"], want, "{limits}: {body}");
    }
}

/// A second `check` against the same server sends fresh prompts (a per-invocation salt of their
/// contents, recorded in each point's run record): it does not find the first check's prompts in
/// the server's prefix cache while the prediction starts cold.
#[test]
fn a_second_check_against_the_same_server_meets_a_cold_prefix_cache() {
    let s = start_server("scenarios/serve-small-vllm.json", &["--time-scale", "20"]);
    let dir = scratch().join("check-twice");
    let run = |n: &str| {
        let d = dir.join(n);
        let o = run_cli(&[
            "check",
            "--base-url",
            &s.url,
            "--engine",
            "vllm",
            "--fit-on",
            "1",
            "--concurrency",
            "1,2",
            "--num-prompts",
            "8",
            "--random-input-len",
            "64",
            "--random-output-len",
            "4",
            "--max-evals",
            "3",
            "--scenario",
            "scenarios/serve-small-vllm.json",
            "--result-dir",
            d.to_str().unwrap(),
            "--json",
        ]);
        let j: serde_json::Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
        let salts: Vec<u64> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(".record.json"))
            .map(|p| {
                let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
                // What the emulator is, kept in the record: its GPU and its time scale.
                assert_eq!(r["setup"]["servesim_hardware"], "a100-80gb");
                assert_eq!(r["setup"]["servesim_time_scale"], 20.0);
                r["setup"]["prompt_salt"].as_u64().expect("the salt is recorded")
            })
            .collect();
        // And said: what is fitted and judged here is a 20x faster engine.
        assert!(String::from_utf8_lossy(&o.stderr).contains("is servesim serve at --time-scale 20"));
        (j, salts)
    };
    let (_, first) = run("a");
    let (second, salts) = run("b");
    assert!(!salts.is_empty() && salts.iter().all(|s| *s == salts[0]), "{salts:?}");
    assert_ne!(first[0], salts[0], "each invocation has its own salt");
    for p in second["points"].as_array().unwrap() {
        // Predicted on the emulator's own GPU (it was cpu-host, whose vLLM runs without async
        // scheduling: 16% off on TTFT with the exact coefficients; the live-loop hunt).
        assert_eq!(p["predicted"]["hardware"], "a100-80gb", "{p}");
        assert_eq!(p["predicted"]["prefix_cache_hit_rate"], 0.0);
        assert_eq!(p["measured"]["prefix_cache_hit_rate"], 0.0, "the first check's prompts were hit: {p}");
    }
    // Without ignore_eos (a dataset other than random) the prediction would need where EOS falls:
    // a clear error naming the field, never a prediction of 1-token outputs.
    let o = run_cli(&[
        "check",
        "--base-url",
        &s.url,
        "--engine",
        "vllm",
        "--fit-on",
        "1",
        "--concurrency",
        "1,2",
        "--dataset-name",
        "prefix_repetition",
        "--prefix-repetition-num-prefixes",
        "2",
        "--num-prompts",
        "8",
        "--result-dir",
        dir.join("c").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("ignore_eos") && err.contains("output_len_dist"), "{err}");
}

/// Without a scenario, bench's initial test request follows the server's release as a
/// scenario's follows its modelled one: vLLM's benchmark skips it from 0.14 (a vLLM 0.33 server
/// was sent one, and its prompt then hit the prefix cache, unlike `simulate`'s; the live-loop
/// hunt).
#[test]
fn bench_without_a_scenario_follows_the_servers_release_on_the_initial_test() {
    let s = start_server("scenarios/serve-small-vllm.json", &["--time-scale", "20"]);
    let dir = scratch().join("initial-test");
    let o = run_cli(&[
        "bench",
        "--base-url",
        &s.url,
        "--num-prompts",
        "3",
        "--random-input-len",
        "64",
        "--random-output-len",
        "4",
        "--save-result",
        "--result-dir",
        dir.to_str().unwrap(),
        "--result-filename",
        "r.json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("r.record.json")).unwrap()).unwrap();
    assert_eq!(r["setup"]["workload"]["initial_test_request"], false, "{}", r["setup"]["workload"]);
    // --result-filename is the result's exact name (vLLM's); an empty one is an error before the run.
    let bench = |name: &str| {
        run_cli(&[
            "bench",
            "--base-url",
            &s.url,
            "--num-prompts",
            "1",
            "--random-input-len",
            "8",
            "--random-output-len",
            "2",
            "--save-result",
            "--result-dir",
            dir.to_str().unwrap(),
            "--result-filename",
            name,
        ])
    };
    let o = bench("x.txt");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(dir.join("x.txt").exists() && !dir.join("x.txt.json").exists());
    let o = bench("");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--result-filename: expected a file name"));
}

/// `vllm bench serve` stops when its initial test request fails ("Initial test run failed"):
/// bench warned and sent the whole run to a model the server does not serve (the live-loop hunt).
#[test]
fn a_failed_initial_test_request_stops_the_run() {
    // vLLM checks the model name (SGLang serves any name: the serve audit of 2026-12-06), and
    // 0.11.0's client sends the initial test request (the scenario's pool pinned again).
    let s = start_server(
        "scenarios/serve-small-vllm.json",
        &["--time-scale", "20", "--set", "engine.version=0.11.0", "--set", "engine.num_gpu_blocks_override=641"],
    );
    let dir = scratch().join("initial-fails");
    let o = run_cli(&[
        "bench",
        "--base-url",
        &s.url,
        "--model",
        "nope",
        "--num-prompts",
        "3",
        "--random-input-len",
        "8",
        "--random-output-len",
        "2",
        "--result-dir",
        dir.to_str().unwrap(),
        "--result-filename",
        "r.json",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("Initial test run failed") && err.contains("does not exist"), "{err}");
    // Only the initial test request was sent.
    let lines = std::fs::read_to_string(dir.join("r.requests.jsonl")).unwrap();
    assert!(lines.lines().all(|l| l.contains("\"initial_test\"")), "{lines}");
}

/// bench sends ignore_eos with the random dataset only where the modelled `vllm bench serve`
/// does (from 0.11.1): a vLLM 0.11.0 or SGLang scenario with an output length distribution and
/// no ignore_eos ran with `simulate` and was refused by bench, which set ignore_eos itself
/// (the live-loop hunt of 2026-12-05).
#[test]
fn bench_forces_ignore_eos_on_random_only_for_the_releases_that_do() {
    let s = start_server("scenarios/serve-small-vllm.json", &["--time-scale", "20"]);
    let dir = scratch().join("bench-eos");
    std::fs::create_dir_all(&dir).unwrap();
    let scen = |engine: serde_json::Value, name: &str| {
        let v = serde_json::json!({"version": 1, "engine": engine, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
            "workload": {"dataset_name": "random", "random_input_len": 32, "random_output_len": 8, "num_prompts": 3,
                         "output_len_dist": {"kind": "uniform", "min": 1, "max": 8}, "seed": 1}});
        let p = dir.join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p
    };
    for (engine, name) in [
        (serde_json::json!({"kind": "vllm", "version": "0.11.0"}), "v0110.json"),
        (serde_json::json!({"kind": "sglang", "version": "0.5.10"}), "sg.json"),
    ] {
        let p = scen(engine, name);
        let o = run_cli(&[
            "bench",
            "--base-url",
            &s.url,
            "--scenario",
            p.to_str().unwrap(),
            "--save-result",
            "--result-dir",
            dir.to_str().unwrap(),
            "--result-filename",
            &format!("{name}.result.json"),
        ]);
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.result.record.json"))).unwrap())
                .unwrap();
        assert_eq!(r["setup"]["workload"]["ignore_eos"], false, "{name}: {}", r["setup"]["workload"]);
    }
}

/// A trace whose rows are not in `arrival_time` order is sent in time order, as `simulate` sends
/// it: each row at its own time (in file order a later row held back every row after it: a row
/// due at 0 s went out at 0.6 s; the audit of 2026-12-06).
#[test]
fn bench_sends_an_unsorted_trace_in_time_order() {
    let s = start_server("scenarios/serve-small-vllm.json", &["--time-scale", "20"]);
    let dir = scratch().join("unsorted-trace");
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("t.csv");
    std::fs::write(&trace, "arrival_time,input_len,output_len\n0.6,16,2\n0.0,16,2\n").unwrap();
    let o = run_cli(&[
        "bench",
        "--base-url",
        &s.url,
        "--dataset-name",
        "trace",
        "--trace",
        trace.to_str().unwrap(),
        "--ignore-eos",
        "--no-initial-test",
        "--vocab-size",
        "32000",
        "--save-result",
        "--result-dir",
        dir.to_str().unwrap(),
        "--result-filename",
        "r.json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("r.json")).unwrap()).unwrap();
    let starts: Vec<f64> = j["start_times"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert!(starts[1] < 0.3, "the row due at 0 s went out at {} s", starts[1]);
    assert!(starts[0] >= 0.55, "the row due at 0.6 s went out at {} s", starts[0]);
}

/// A prompt and `max_tokens` past `max_model_len`: vLLM from 0.32 shortens the output to what the
/// context leaves (`get_max_tokens`) and answers 200 with `finish_reason` "length"; through 0.31
/// it answers 400 (the audit of 2026-12-06, against a real vLLM 0.32: servesim answered 400).
#[test]
fn a_request_past_the_context_is_shortened_from_vllm_0_32_and_refused_before() {
    let m = "qwen2.5-7b-instruct";
    let body = format!(
        r#"{{"model": "{m}", "prompt": {}, "max_tokens": 200}}"#,
        serde_json::to_string(&vec![7u32; 4000]).unwrap()
    );
    let s =
        start_server("scenarios/serve-small-vllm.json", &["--time-scale", "20", "--set", "engine.max_model_len=4096"]);
    let r = post(&s.url, "/v1/completions", &body);
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.contains("\"completion_tokens\":96") && r.contains("\"finish_reason\":\"length\""), "{r}");
    let old = start_server(
        "scenarios/serve-small-vllm.json",
        &[
            "--time-scale",
            "20",
            "--set",
            "engine.max_model_len=4096",
            "--set",
            "engine.version=0.31.0",
            "--set",
            "engine.num_gpu_blocks_override=641",
        ],
    );
    let r = post(&old.url, "/v1/completions", &body);
    assert!(r.starts_with("HTTP/1.1 400") && r.contains("maximum context length is 4096"), "{r}");
}

/// The body of a raw response (after the head).
fn body_of(r: &str) -> &str {
    r.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("")
}

/// The `data: ` payloads of a streamed response, in order.
fn sse_data(r: &str) -> Vec<String> {
    body_of(r).lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_string).collect()
}

#[test]
fn sglangs_generate_route_answers_as_sglang_does_and_vllm_has_none() {
    let s = start_server("scenarios/kv-starved-qwen2.5-7b-a100-sglang.json", &["--time-scale", "20"]);
    // Token ids, without streaming: one object {text, output_ids, meta_info}; under ignore_eos
    // exactly max_new_tokens tokens, finished by length.
    let r = post(
        &s.url,
        "/generate",
        r#"{"input_ids": [1, 2, 3, 4, 5, 6, 7, 8], "sampling_params": {"max_new_tokens": 5, "ignore_eos": true, "temperature": 0.0}, "stream": false}"#,
    );
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let v: serde_json::Value = serde_json::from_str(body_of(&r)).unwrap();
    let m = &v["meta_info"];
    assert_eq!(m["completion_tokens"], 5, "{v}");
    assert_eq!(m["prompt_tokens"], 8, "{v}");
    assert_eq!(m["finish_reason"], serde_json::json!({"type": "length", "length": 5}), "{v}");
    assert_eq!(v["output_ids"].as_array().unwrap().len(), 5, "{v}");
    assert!(!v["text"].as_str().unwrap().is_empty(), "{v}");
    assert!(m["cached_tokens"].is_u64() && m["e2e_latency"].is_f64(), "{v}");
    let id = m["id"].as_str().unwrap();
    assert!(id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    // Without max_new_tokens, SGLang's default of 128; the client's rid is the id.
    let r = post(
        &s.url,
        "/generate",
        r#"{"input_ids": [9, 10, 11], "sampling_params": {"ignore_eos": true}, "rid": "abc"}"#,
    );
    let v: serde_json::Value = serde_json::from_str(body_of(&r)).unwrap();
    assert_eq!(v["meta_info"]["completion_tokens"], 128, "{v}");
    assert_eq!(v["meta_info"]["id"], "abc", "{v}");
    // Text, streamed (what `sglang.bench_serving --backend sglang` sends): an event per
    // output with the text and ids so far and completion_tokens counting up, finish_reason
    // null until the last, then [DONE]. Text counts one token per 4 bytes without a tokenizer.
    let r = post(
        &s.url,
        "/generate",
        r#"{"text": "hello world, how are you", "sampling_params": {"temperature": 0.0, "max_new_tokens": 6, "ignore_eos": true}, "stream": true, "lora_path": null, "return_logprob": false, "logprob_start_len": -1}"#,
    );
    assert!(r.starts_with("HTTP/1.1 200") && r.contains("text/event-stream"), "{r}");
    let events = sse_data(&r);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{r}");
    let chunks: Vec<serde_json::Value> =
        events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert_eq!(chunks.len(), 6, "{r}");
    let mut prev = String::new();
    for (k, c) in chunks.iter().enumerate() {
        let m = &c["meta_info"];
        assert_eq!(m["completion_tokens"], k as u64 + 1, "{c}");
        assert_eq!(m["prompt_tokens"], 6, "{c}");
        assert_eq!(c["output_ids"].as_array().unwrap().len(), k + 1, "cumulative ids: {c}");
        let text = c["text"].as_str().unwrap();
        assert!(text.len() > prev.len() && text.starts_with(&prev), "cumulative text: {c}");
        prev = text.to_string();
        if k + 1 < chunks.len() {
            assert!(m["finish_reason"].is_null() && m.get("e2e_latency").is_none(), "{c}");
        }
    }
    let last = &chunks[5]["meta_info"];
    assert_eq!(last["finish_reason"], serde_json::json!({"type": "length", "length": 6}));
    assert!(last["e2e_latency"].is_f64(), "{last}");
    // The checks SGLang makes, with its messages: the context (4,096 here) ...
    let long: Vec<u32> = (1..=4096).collect();
    let r = post(&s.url, "/generate", &format!(r#"{{"input_ids": {long:?}}}"#));
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    assert!(
        body_of(&r).contains("The input (4096 tokens) is longer than the model's context length (4096 tokens)."),
        "{r}"
    );
    let r = post(&s.url, "/generate", r#"{"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 4094}}"#);
    assert!(r.starts_with("HTTP/1.1 400") && r.contains("Requested token count exceeds"), "{r}");
    // ... an output cut to what the context leaves (`max_req_len` − prompt − 1) ...
    let near: Vec<u32> = (1..=4000).collect();
    let r =
        post(&s.url, "/generate", &format!(r#"{{"input_ids": {near:?}, "sampling_params": {{"ignore_eos": true}}}}"#));
    let v: serde_json::Value = serde_json::from_str(body_of(&r)).unwrap();
    assert_eq!(v["meta_info"]["completion_tokens"], 94, "{v}");
    assert_eq!(v["meta_info"]["finish_reason"]["length"], 94, "{v}");
    // ... and a sampling parameter refused: 400, or inside a stream (status 200) as
    // `data: {"error": {"message"}}` then [DONE], as `stream_results` writes a ValueError.
    let r = post(&s.url, "/generate", r#"{"text": "hi", "sampling_params": {"temperature": -1}}"#);
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    assert_eq!(body_of(&r), r#"{"error":{"message":"temperature must be non-negative, got -1."}}"#);
    let r = post(&s.url, "/generate", r#"{"text": "hi", "stream": true, "sampling_params": {"temperature": -1}}"#);
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert_eq!(
        sse_data(&r),
        vec![r#"{"error":{"message":"temperature must be non-negative, got -1."}}"#.to_string(), "[DONE]".to_string()]
    );
    // Bad requests: no prompt, a batch (not modelled: a clear 400), a field of the wrong
    // type (FastAPI's validation, answered 400 by SGLang's handler), a GET.
    let r = post(&s.url, "/generate", r#"{"sampling_params": {"max_new_tokens": 4}}"#);
    assert!(
        r.starts_with("HTTP/1.1 400") && r.contains("Either text, input_ids or input_embeds should be provided."),
        "{r}"
    );
    for batch in [r#"{"text": ["a", "b"]}"#, r#"{"input_ids": [[1, 2], [3, 4]]}"#] {
        let r = post(&s.url, "/generate", batch);
        assert!(r.starts_with("HTTP/1.1 400") && r.contains("a batch of prompts"), "{r}");
    }
    let r = post(&s.url, "/generate", r#"{"text": 5}"#);
    assert!(
        r.starts_with("HTTP/1.1 400") && r.contains(r#""type":"Bad Request""#) && r.contains("('body', 'text')"),
        "{r}"
    );
    let r = raw(&s.url, b"GET /generate HTTP/1.1\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 405"), "{r}");
    // The server is still up, and counted what it served.
    let metrics = raw(&s.url, b"GET /metrics HTTP/1.1\r\n\r\n");
    assert!(metrics.contains("sglang:num_requests_total"), "{metrics}");
    // vLLM has no such route.
    let v = start_server("scenarios/serve-small-vllm.json", &[]);
    let r = post(&v.url, "/generate", r#"{"text": "hi"}"#);
    assert!(r.starts_with("HTTP/1.1 404"), "{r}");
}

/// A `servesim bench --save-result` file against `servesim serve` is a result `calibrate
/// --from-results` reads with the served scenario: the run says its GPU (serve names its card);
/// a real engine's "live" states none, and neither is another deployment. Every bench result
/// was refused ("hardware: live (the scenario: a100-80gb)") until 2026-12-06 (the live-loop audit).
#[test]
fn a_bench_result_against_serve_calibrates_with_the_served_scenario() {
    let scen = "scenarios/serve-small-vllm.json";
    // In real time: a faster emulator's timings are below what the card can do, and the fit's
    // physical floors would refuse them.
    let s = start_server(scen, &[]);
    let dir = std::env::temp_dir().join(format!("servesim-bench-calib-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = run_cli(&[
        "bench",
        "--base-url",
        &s.url,
        "--scenario",
        scen,
        "--num-prompts",
        "16",
        "--save-result",
        "--result-dir",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let result = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json") && !p.to_string_lossy().ends_with(".record.json"))
        .expect("a result file");
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&result).unwrap()).unwrap();
    assert_eq!(saved["hardware"], "a100-80gb", "serve names its card");
    let out = dir.join("profile.json");
    let o = run_cli(&[
        "calibrate",
        "--from-results",
        result.to_str().unwrap(),
        "--scenario",
        scen,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ctrl-C during a live `check` ends it as `bench` ends (exit 130, saying where the completed
/// requests are), not as a usage error ("error: interrupted", exit 2, until 2026-12-06).
#[test]
fn ctrl_c_during_a_check_says_what_was_kept() {
    let scen = "scenarios/serve-small-vllm.json";
    let s = start_server(scen, &[]);
    let dir = std::env::temp_dir().join(format!("servesim-check-int-{}", std::process::id()));
    let mut c = servesim();
    c.args(["check", "--base-url", &s.url, "--scenario", scen, "--concurrency", "1,4,16", "--fit-on", "1"])
        .args(["--result-dir", dir.to_str().unwrap()]);
    let child = c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(4000));
    assert!(std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let out = {
        let start = std::time::Instant::now();
        let mut child = child;
        loop {
            if child.try_wait().unwrap().is_some() {
                break child.wait_with_output().unwrap();
            }
            assert!(start.elapsed() < Duration::from_secs(60), "check did not stop after Ctrl-C");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("check: interrupted (Ctrl-C)") && err.contains(dir.to_str().unwrap()), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `check` refuses a profile fitted against `serve --time-scale k` against a server at another
/// scale: its times differ by that ratio whatever the model (it ran, failed at +890% and blamed
/// the speed reference; the live-loop audit of 2026-12-06).
#[test]
fn check_refuses_a_profile_fitted_at_another_time_scale() {
    let scen = "scenarios/serve-small-vllm.json";
    let dir = std::env::temp_dir().join(format!("servesim-check-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let result = dir.join("sim.json");
    let o = run_cli(&["simulate", scen, "--json", "--set", "workload.num_prompts=8"]);
    std::fs::write(&result, &o.stdout).unwrap();
    let profile = dir.join("p.json");
    let o = run_cli(&[
        "calibrate",
        "--from-results",
        result.to_str().unwrap(),
        "--scenario",
        scen,
        "--out",
        profile.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut p: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&profile).unwrap()).unwrap();
    p["engine"]["servesim_time_scale"] = 4.0.into();
    std::fs::write(&profile, p.to_string()).unwrap();
    let s = start_server(scen, &[]);
    let o = run_cli(&[
        "check",
        "--base-url",
        &s.url,
        "--scenario",
        scen,
        "--profile",
        profile.to_str().unwrap(),
        "--concurrency",
        "1",
        "--result-dir",
        dir.join("check").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("fitted against servesim serve at --time-scale 4") && err.contains("factor 4.000"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `stream_options` is checked as `stream` is: an object whose `include_usage` and
/// `continuous_usage_stats` are booleans, else a 400 naming the field (`"include_usage": 1` had
/// been ignored: 200 and no usage chunk); given with `stream` not true it is vLLM's 400; an
/// `include_usage` left out is vLLM's default, true; `continuous_usage_stats` (not modelled) is
/// refused when true.
#[test]
fn stream_options_are_checked_as_strictly_as_stream() {
    let s = start_server("scenarios/serve-small-vllm.json", &["--time-scale", "20"]);
    let req = |extra: &str| post(&s.url, "/v1/completions", &format!(r#"{{"prompt": "Hi", "max_tokens": 1{extra}}}"#));
    for (extra, says) in [
        (r#", "stream": true, "stream_options": {"include_usage": 1}"#, "stream_options.include_usage"),
        (r#", "stream": true, "stream_options": {"include_usage": "yes"}"#, "stream_options.include_usage"),
        (r#", "stream": true, "stream_options": "x""#, "stream_options"),
        (
            r#", "stream": true, "stream_options": {"continuous_usage_stats": 1}"#,
            "stream_options.continuous_usage_stats",
        ),
        (r#", "stream": true, "stream_options": {"continuous_usage_stats": true}"#, "continuous_usage_stats"),
        (r#", "stream_options": {"include_usage": true}"#, "Stream options can only be defined when `stream=True`."),
        (
            r#", "stream": false, "stream_options": {"include_usage": true}"#,
            "Stream options can only be defined when `stream=True`.",
        ),
    ] {
        let r = req(extra);
        assert!(r.starts_with("HTTP/1.1 400") && r.contains("\"code\":400") && r.contains(says), "{extra}: {r}");
    }
    // What vLLM accepts: null, and options Python reads as false, without a stream.
    for extra in [r#", "stream_options": null"#, r#", "stream": false, "stream_options": {}"#] {
        let r = req(extra);
        assert!(r.starts_with("HTTP/1.1 200"), "{extra}: {r}");
    }
    let usage_chunks = |r: &str| sse_data(r).iter().filter(|d| d.contains("\"usage\":{")).count();
    for (extra, chunks) in [
        (r#", "stream": true, "stream_options": {"include_usage": true}"#, 1),
        (r#", "stream": true, "stream_options": {}"#, 1),
        (r#", "stream": true, "stream_options": {"include_usage": false, "continuous_usage_stats": false}"#, 0),
        (r#", "stream": true"#, 0),
    ] {
        let r = req(extra);
        assert!(r.starts_with("HTTP/1.1 200"), "{extra}: {r}");
        assert_eq!(usage_chunks(&r), chunks, "{extra}: {r}");
    }
}

/// Fields that change vLLM's answer and that servesim does not model are refused, naming the
/// field (a `stop` of "t1" had been answered with "t1" in the text, finish_reason "length");
/// at their defaults, as clients send them unasked, they are accepted.
#[test]
fn request_fields_servesim_does_not_model_are_refused_unless_at_their_defaults() {
    let s = start_server("scenarios/serve-small-vllm.json", &["--time-scale", "20"]);
    let cmpl = |extra: &str| post(&s.url, "/v1/completions", &format!(r#"{{"prompt": "Hi", "max_tokens": 2{extra}}}"#));
    let chat = |extra: &str| {
        post(
            &s.url,
            "/v1/chat/completions",
            &format!(r#"{{"messages": [{{"role": "user", "content": "Hi"}}], "max_tokens": 2{extra}}}"#),
        )
    };
    let refused = |r: &str, field: &str, extra: &str| {
        assert!(
            r.starts_with("HTTP/1.1 400")
                && r.contains("\"code\":400")
                && r.contains(&format!("\"message\":\"{field}:"))
                && r.contains("not modelled by servesim serve"),
            "{extra}: {r}"
        );
    };
    for (extra, field) in [
        (r#", "stop": ["t1"]"#, "stop"),
        (r#", "stop": "t1""#, "stop"),
        (r#", "stop_token_ids": [5]"#, "stop_token_ids"),
        (r#", "echo": true"#, "echo"),
        (r#", "logprobs": 5"#, "logprobs"),
        (r#", "logprobs": 0"#, "logprobs"),
        (r#", "prompt_logprobs": 1"#, "prompt_logprobs"),
        (r#", "best_of": 2"#, "best_of"),
        (r#", "suffix": "end""#, "suffix"),
    ] {
        refused(&cmpl(extra), field, extra);
    }
    for (extra, field) in [
        (r#", "logprobs": true"#, "logprobs"),
        (r#", "logprobs": true, "top_logprobs": 3"#, "logprobs"),
        (r#", "top_logprobs": 3"#, "top_logprobs"),
        (r#", "stop": ["t1"]"#, "stop"),
        (r#", "response_format": {"type": "json_object"}"#, "response_format"),
    ] {
        refused(&chat(extra), field, extra);
    }
    // A field of the wrong type is a 400 too, not ignored.
    for extra in [r#", "echo": "yes""#, r#", "stop": 5"#, r#", "logprobs": "x""#] {
        let r = cmpl(extra);
        assert!(r.starts_with("HTTP/1.1 400") && r.contains("expected"), "{extra}: {r}");
    }
    for extra in [
        r#", "stop": null"#,
        r#", "stop": []"#,
        r#", "stop_token_ids": []"#,
        r#", "echo": false"#,
        r#", "logprobs": null"#,
        r#", "logprobs": false"#,
        r#", "best_of": 1"#,
        r#", "suffix": null"#,
    ] {
        let r = cmpl(extra);
        assert!(r.starts_with("HTTP/1.1 200"), "{extra}: {r}");
    }
    for extra in [r#", "logprobs": false"#, r#", "top_logprobs": 0"#, r#", "response_format": {"type": "text"}"#] {
        let r = chat(extra);
        assert!(r.starts_with("HTTP/1.1 200"), "{extra}: {r}");
    }
    // SGLang's native route: a stop string or token in sampling_params alike.
    let g = start_server("scenarios/kv-starved-qwen2.5-7b-a100-sglang.json", &["--time-scale", "20"]);
    // And structured output (a review, 2026-12-07: taken and ignored on /generate).
    for sp in [
        r#""stop": ["t1"]"#,
        r#""stop_token_ids": [5]"#,
        r#""json_schema": "{\"type\": \"object\"}""#,
        r#""regex": "[a-z]+""#,
        r#""ebnf": "root ::= \"a\"""#,
    ] {
        let r = post(
            &g.url,
            "/generate",
            &format!(r#"{{"input_ids": [1, 2, 3], "sampling_params": {{"max_new_tokens": 2, {sp}}}}}"#),
        );
        assert!(r.starts_with("HTTP/1.1 400") && r.contains("not modelled by servesim serve"), "{sp}: {r}");
    }
    let r =
        post(&g.url, "/generate", r#"{"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2, "stop": []}}"#);
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
}

/// `min_tokens` holds EOS back as vLLM's does: a request that may stop at EOS (the scenario's
/// output lengths, geometric with mean 2) has at least `min_tokens` tokens (it had been
/// validated and then ignored).
#[test]
fn min_tokens_holds_eos_back() {
    let s = start_server(
        "scenarios/serve-small-vllm.json",
        &[
            "--time-scale",
            "20",
            "--set",
            r#"workload={"dataset_name": "prefix_repetition", "ignore_eos": false, "output_len_dist": {"kind": "geometric", "mean": 2}}"#,
        ],
    );
    let tokens = |extra: &str| -> Vec<u64> {
        (0..12)
            .map(|_| {
                let r =
                    post(&s.url, "/v1/completions", &format!(r#"{{"prompt": [1, 2, 3], "max_tokens": 16{extra}}}"#));
                assert!(r.starts_with("HTTP/1.1 200"), "{r}");
                let v: serde_json::Value = serde_json::from_str(body_of(&r)).unwrap();
                v["usage"]["completion_tokens"].as_u64().unwrap()
            })
            .collect()
    };
    assert!(tokens("").iter().any(|&n| n < 12), "the scenario's EOS never came early");
    let held = tokens(r#", "min_tokens": 12"#);
    assert!(held.iter().all(|&n| (12..=16).contains(&n)), "{held:?}");
}

/// A token id past the model's vocabulary (qwen2.5-7b-instruct: 152064 ids) is refused naming
/// the id and the vocabulary, as vLLM refuses it (it had been served as a token).
#[test]
fn token_ids_past_the_vocabulary_are_refused() {
    let s = start_server("scenarios/serve-small-vllm.json", &["--time-scale", "20"]);
    let r = post(&s.url, "/v1/completions", r#"{"prompt": [152064, 5], "max_tokens": 2}"#);
    assert!(
        r.starts_with("HTTP/1.1 400")
            && r.contains("Token id 152064 is out of vocabulary")
            && r.contains("vocab_size is 152064"),
        "{r}"
    );
    let r = post(&s.url, "/v1/completions", r#"{"prompt": [[5, 999999]], "max_tokens": 2}"#);
    assert!(r.starts_with("HTTP/1.1 400") && r.contains("Token id 999999"), "{r}");
    let r = post(&s.url, "/v1/completions", r#"{"prompt": [152063, 5], "max_tokens": 2}"#);
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let g = start_server("scenarios/kv-starved-qwen2.5-7b-a100-sglang.json", &["--time-scale", "20"]);
    let r = post(&g.url, "/generate", r#"{"input_ids": [1, 152064], "sampling_params": {"max_new_tokens": 2}}"#);
    assert!(r.starts_with("HTTP/1.1 400") && r.contains("152064"), "{r}");
    let r = post(&g.url, "/v1/completions", r#"{"model": "m", "prompt": [1, 152064], "max_tokens": 2}"#);
    assert!(r.starts_with("HTTP/1.1 400") && r.contains("152064"), "{r}");
}

/// `--model ''` (or blanks) is refused at start-up naming the flag; it had served a model
/// named "".
#[test]
fn serve_refuses_an_empty_model_name() {
    for name in ["", "  "] {
        let o = run_cli(&["serve", "--port", "0", "--max-lifetime", "5", "--model", name]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name:?}: {err}");
        assert!(err.contains("--model") && !err.contains("panicked"), "{name:?}: {err}");
    }
}
