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

fn raw(url: &str, request: &[u8]) -> String {
    let addr = url.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(request);
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
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
        (post(&s.url, "/v1/completions", &format!(r#"{{"prompt": "hi", "max_tokens": 4}}"#)), "400"),
        (post(&s.url, "/v1/completions", &format!(r#"{{"model": "other", "prompt": "hi"}}"#)), "404"),
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
    }
    // A connection cut in the middle of its body, and one that sends garbage.
    {
        let mut t = TcpStream::connect(s.url.trim_start_matches("http://")).unwrap();
        t.write_all(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 500\r\n\r\n{\"model\":").unwrap();
    }
    raw(&s.url, b"\x00\x01\x02 garbage\r\n\r\n");
    // Still up, and still serving.
    assert!(raw(&s.url, b"GET /health HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    let ok = post(
        &s.url,
        "/v1/chat/completions",
        &format!(r#"{{"model": "{m}", "messages": [{{"role": "user", "content": "hello"}}], "max_tokens": 3}}"#),
    );
    assert!(ok.starts_with("HTTP/1.1 200") && ok.contains("\"completion_tokens\":3"), "{ok}");
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
    assert!(info.contains("\"max_total_tokens\":10240"), "{info}");
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
    let dir = std::env::temp_dir().join(format!("servesim-chat-{}", std::process::id()));
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
        "--json",
    ]));
    assert_eq!(j["completed"], 6);
    assert_eq!(j["total_output_tokens"], 24);
    // Each request's prompt, as the server counted it, is recorded beside the intended length.
    let f = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".requests.jsonl"))
        .unwrap();
    for l in std::fs::read_to_string(f).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let counted = v["prompt_tokens"].as_u64().unwrap();
        assert!(
            counted >= 20 && counted <= 24,
            "the server counted {counted} tokens for a 20-token prompt (plus the chat role)"
        );
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
    let dir = std::env::temp_dir().join(format!("servesim-diff-{}", std::process::id()));
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
    assert!(rec["observed"]["metrics_after"]["vllm:generation_tokens_total"].as_f64().unwrap() > 0.0);
    let d = run_cli(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    let t = String::from_utf8_lossy(&d.stdout);
    assert!(t.contains("workload.seed") && t.contains("workload_hash"), "{t}");
    let same = run_cli(&["diff", a.to_str().unwrap(), c.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&same.stdout).contains("the same setup"));
    let bad = run_cli(&["diff", a.to_str().unwrap(), "Cargo.toml"]);
    assert_eq!(bad.status.code(), Some(2));
}
