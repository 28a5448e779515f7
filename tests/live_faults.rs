//! The load generator against a local fault-injecting server: server errors,
//! timeouts, refused connections, streams cut mid-way and malformed SSE
//! chunks are recorded per request as failures with their reason; the run
//! completes and counts them. Ctrl-C ends a run cleanly with what was
//! measured saved.

use std::io::BufRead;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::*;

/// What the fake server does with a completion request.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Ok,
    ServerError,
    Malformed,
    Cut,
    Hang,
}

fn mode_for(max_tokens: u64) -> Mode {
    match max_tokens % 6 {
        1 => Mode::ServerError,
        2 => Mode::Malformed,
        3 => Mode::Cut,
        4 => Mode::Hang,
        _ => Mode::Ok,
    }
}

const METRICS: &str = "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1001\",enable_prefix_caching=\"True\"} 1.0\nvllm:num_preemptions_total{engine=\"0\"} 0.0\nvllm:num_requests_running{engine=\"0\"} 0.0\n";

async fn handle(mut sock: TcpStream, faults: bool, slow_ms: u64, metrics: bool) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let (head_end, content_len) = loop {
        let n = match sock.read(&mut tmp).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&tmp[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..p]).to_lowercase();
            let cl = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap_or(0)))
                .unwrap_or(0);
            break (p + 4, cl);
        }
    };
    while buf.len() < head_end + content_len {
        let n = match sock.read(&mut tmp).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&tmp[..n]);
    }
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let body: serde_json::Value = serde_json::from_slice(&buf[head_end..head_end + content_len]).unwrap_or_default();
    let send = |status: &str, ctype: &str, body: &str| {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let reply = match path.as_str() {
        "/v1/models" => {
            send("200 OK", "application/json", r#"{"object":"list","data":[{"id":"fake","max_model_len":8192}]}"#)
        }
        "/version" => send("200 OK", "application/json", r#"{"version":"0.33.0"}"#),
        "/metrics" if metrics => send("200 OK", "text/plain", METRICS),
        "/v1/completions" => {
            let max_tokens = body["max_tokens"].as_u64().unwrap_or(1);
            let mode = if faults { mode_for(max_tokens) } else { Mode::Ok };
            match mode {
                Mode::ServerError => send("500 Internal Server Error", "application/json", r#"{"error":"injected"}"#),
                Mode::Hang => {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    return;
                }
                _ => {
                    let _ = sock
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
                        .await;
                    for i in 0..max_tokens {
                        if mode == Mode::Cut && i == 1 {
                            return; // the connection drops mid-stream
                        }
                        if mode == Mode::Malformed && i == 1 {
                            let _ = sock.write_all(b"data: {\"choices\": [{\"text\": \"x\"\n\n").await;
                            continue;
                        }
                        let chunk = format!("data: {{\"choices\":[{{\"index\":0,\"text\":\" t{i}\"}}]}}\n\n");
                        if sock.write_all(chunk.as_bytes()).await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(slow_ms)).await;
                    }
                    let usage = format!("data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":1,\"completion_tokens\":{max_tokens}}}}}\n\ndata: [DONE]\n\n");
                    let _ = sock.write_all(usage.as_bytes()).await;
                    let _ = sock.shutdown().await;
                    return;
                }
            }
        }
        _ => send("404 Not Found", "text/plain", "no"),
    };
    let _ = sock.write_all(reply.as_bytes()).await;
    let _ = sock.shutdown().await;
}

/// Starts the fake server on a thread; it stops accepting completions after `max_completions`
/// (later connections are refused).
fn start(faults: bool, slow_ms: u64, max_completions: Option<usize>) -> SocketAddr {
    start_with(faults, slow_ms, max_completions, true)
}

/// [`start`]; without `metrics` the server has no `/metrics` (404), as a plain OpenAI-compatible
/// server.
fn start_with(faults: bool, slow_ms: u64, max_completions: Option<usize>, metrics: bool) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            let served = Arc::new(AtomicUsize::new(0));
            // Bounded: the server stops by itself after a minute.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while let Ok(Ok((sock, _))) = tokio::time::timeout_at(deadline, listener.accept()).await {
                let n = served.fetch_add(1, Ordering::SeqCst);
                if max_completions.is_some_and(|m| n >= m) {
                    drop(sock);
                    break; // the listener closes: new connections are refused
                }
                tokio::spawn(handle(sock, faults, slow_ms, metrics));
            }
            drop(listener);
            tokio::time::sleep(Duration::from_secs(40)).await;
        });
    });
    rx.recv().unwrap()
}

fn jsonl_lines(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.to_string_lossy().ends_with(".requests.jsonl") {
            for l in std::io::BufReader::new(std::fs::File::open(&p).unwrap()).lines() {
                out.push(serde_json::from_str(&l.unwrap()).unwrap());
            }
        }
    }
    out
}

#[test]
fn server_faults_are_recorded_per_request_and_the_run_completes() {
    let addr = start(true, 1, None);
    let dir = scratch().join("faults");
    let url = format!("http://{addr}");
    let o = run_cli(&[
        "bench",
        "--base-url",
        &url,
        "--random-input-len",
        "8",
        "--random-output-len",
        "8",
        "--random-range-ratio",
        "0.9",
        "--num-prompts",
        "30",
        "--max-concurrency",
        "6",
        "--ignore-eos",
        "--request-timeout",
        "1.5",
        "--no-initial-test",
        "--vocab-size",
        "1000",
        "--save-result",
        "--result-dir",
        dir.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is JSON");
    let (done, failed) = (j["completed"].as_u64().unwrap(), j["failed"].as_u64().unwrap());
    assert_eq!(done + failed, 30);
    assert!(done > 0 && failed > 0, "completed {done}, failed {failed}");
    // Said, not labelled "completed": the metrics are over the requests that finished (exit 1,
    // everything still written).
    let why = j["stop_reason"].as_str().unwrap();
    assert!(why.starts_with(&format!("failed: {failed} of 30 requests failed")), "{why}");
    let lines = jsonl_lines(&dir);
    assert_eq!(lines.iter().filter(|l| l["phase"] == "timed").count(), 30, "one line per request");
    let reasons: Vec<String> = lines.iter().filter_map(|l| l["error"].as_str().map(str::to_string)).collect();
    for want in ["HTTP 500", "malformed SSE chunk", "stream", "timeout"] {
        assert!(reasons.iter().any(|r| r.contains(want)), "no failure with {want:?} in {reasons:?}");
    }
    // Every failure matches its injected mode, and every success is complete.
    for l in lines.iter().filter(|l| l["phase"] == "timed") {
        let mode = mode_for(l["max_tokens"].as_u64().unwrap());
        assert_eq!(l["success"] == true, mode == Mode::Ok, "{l}");
        if mode == Mode::Ok {
            assert_eq!(l["output_tokens"], l["max_tokens"]);
        }
    }
    // The saved result and the run record exist.
    let names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect();
    assert!(names.iter().any(|n| n.ends_with(".record.json")), "{names:?}");
    let result =
        names.iter().find(|n| n.ends_with(".json") && !n.ends_with(".record.json")).expect("a --save-result file");
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join(result)).unwrap()).unwrap();
    for k in [
        "date",
        "backend",
        "model_id",
        "num_prompts",
        "request_rate",
        "max_concurrency",
        "duration",
        "completed",
        "failed",
        "mean_ttft_ms",
        "p99_itl_ms",
        "errors",
        "request_goodput",
        "generated_texts",
    ] {
        assert!(saved.get(k).is_some(), "the saved result lacks {k}");
    }
    assert!(saved["request_goodput"].is_null(), "no --goodput: null, as vLLM writes it");
    // vLLM writes `--backend` as both `backend` and `endpoint_type`, `--label` as given (null),
    // and names the file after the label or the backend (it read "vllm", "vllm", "vllm-...").
    assert_eq!((&saved["backend"], &saved["endpoint_type"]), (&"openai".into(), &"openai".into()));
    assert!(saved["label"].is_null(), "{}", saved["label"]);
    assert!(result.starts_with("openai-infqps-"), "{result}");
    // The name's stamp is the file's `date`: one clock, as vLLM's (they were a second apart).
    let date = saved["date"].as_str().unwrap();
    assert!(result.ends_with(&format!("-{date}.json")), "{result} against date {date}");
    // The text streamed back, per request: the fake server sends " t0", " t1", ... per token.
    let texts = saved["generated_texts"].as_array().unwrap();
    assert_eq!(texts.len(), 30);
    let ok = lines.iter().filter(|l| l["phase"] == "timed" && l["success"] == true).count();
    assert_eq!(texts.iter().filter(|t| t.as_str().is_some_and(|t| t.starts_with(" t0 t1"))).count(), ok);
}

#[test]
fn refused_connections_are_failures_and_a_dead_server_is_a_clear_error() {
    // The server accepts 8 connections (the probe's 3, then 5 requests) and then refuses the rest.
    let addr = start(false, 1, Some(8));
    let url = format!("http://{addr}");
    let o = run_cli(&[
        "bench",
        "--base-url",
        &url,
        "--random-input-len",
        "8",
        "--random-output-len",
        "4",
        "--num-prompts",
        "12",
        "--max-concurrency",
        "1",
        "--ignore-eos",
        "--no-initial-test",
        "--vocab-size",
        "1000",
        "--request-timeout",
        "5",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "some failed: {}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is JSON");
    assert!(j["failed"].as_u64().unwrap() > 0, "{j}");
    assert_eq!(j["completed"].as_u64().unwrap() + j["failed"].as_u64().unwrap(), 12);
    // Nothing listening at all: an error that names the flag, exit 2, no panic.
    let dead = run_cli(&["bench", "--base-url", "http://127.0.0.1:9", "--num-prompts", "2", "--ignore-eos"]);
    let err = String::from_utf8_lossy(&dead.stderr);
    assert_eq!(dead.status.code(), Some(2), "{err}");
    assert!(err.contains("--base-url") && !err.contains("panicked"), "{err}");
}

#[test]
fn ctrl_c_ends_a_run_cleanly_with_what_was_measured_saved() {
    let addr = start(false, 40, None);
    let dir = scratch().join("sigint");
    let url = format!("http://{addr}");
    let mut c = servesim();
    c.args([
        "bench",
        "--base-url",
        &url,
        "--random-input-len",
        "8",
        "--random-output-len",
        "10",
        "--num-prompts",
        "200",
        "--max-concurrency",
        "2",
        "--ignore-eos",
        "--no-initial-test",
        "--vocab-size",
        "1000",
        "--result-dir",
        dir.to_str().unwrap(),
        "--save-result",
        "--result-filename",
        "interrupted.json",
    ]);
    let child = c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let status = std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let out = {
        let start = std::time::Instant::now();
        let mut child = child;
        loop {
            if child.try_wait().unwrap().is_some() {
                break child.wait_with_output().unwrap();
            }
            assert!(start.elapsed() < Duration::from_secs(30), "bench did not stop after Ctrl-C");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("interrupted"), "{text}");
    let lines = jsonl_lines(&dir);
    assert!(!lines.is_empty() && lines.len() < 200, "{} lines saved", lines.len());
    // The completed requests were saved as they completed; the ones the interruption caught in
    // flight (at most the concurrency, 2) are saved too, as failed (the result counts them
    // failed: the file had no line for them).
    // One line per request: a request that finished just as the interruption came is saved
    // once, as completed (its task had stored its outcome; the run once wrote it a second,
    // failed line, which a busy host made likely).
    let mut seen = std::collections::BTreeSet::new();
    for l in &lines {
        assert!(seen.insert((l["phase"].to_string(), l["index"].to_string())), "a second line for {l}");
    }
    let failed: Vec<_> = lines.iter().filter(|l| l["success"] != true).collect();
    assert!(failed.len() <= 2, "{failed:?}");
    assert!(failed.iter().all(|l| l["success"] == false && !l["error"].is_null()), "{failed:?}");
    // In the saved result's lists an empty error is a success (as `vllm bench serve` reads
    // them): exactly the completed requests; the ones never sent say so (they had "", a TTFT
    // and a start time of 0, counted as successes by anyone recomputing from the lists).
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("interrupted.json")).unwrap()).unwrap();
    let errors = j["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 200);
    let ok = errors.iter().filter(|e| e.as_str() == Some("")).count() as u64;
    assert_eq!(ok, j["completed"].as_u64().unwrap(), "{:?}", &errors[..8]);
    assert!(errors.iter().any(|e| e.as_str().is_some_and(|e| e.starts_with("not sent"))), "{errors:?}");
}

/// A figure the client did not measure is `null` in JSON and "n/a" in text, never a zero: the
/// engine counters without a readable `/metrics` (or a counter the server does not export), the
/// KV pool of a server that does not say it (and so the KV-limited concurrency), and the
/// simulator's TTFT split and step count, which no client sees.
#[test]
fn engine_figures_not_measured_are_null_not_zeros() {
    let bench = |addr: SocketAddr, json: bool| {
        let url = format!("http://{addr}");
        let mut args = vec![
            "bench",
            "--base-url",
            &url,
            "--random-input-len",
            "8",
            "--random-output-len",
            "4",
            "--num-prompts",
            "4",
            "--max-concurrency",
            "2",
            "--ignore-eos",
            "--no-initial-test",
            "--vocab-size",
            "1000",
        ];
        if json {
            args.push("--json");
        }
        run_cli(&args)
    };
    let bare = start_with(false, 1, None, false);
    let j = stdout_json(&bench(bare, true));
    assert_eq!(j["completed"], 4);
    for k in [
        "num_preemptions",
        "prefix_cache_queries",
        "prefix_cache_hits",
        "prefix_cache_hit_rate",
        "kv_cache_tokens",
        "kv_limited_concurrency",
        "ttft_breakdown",
        "num_steps",
    ] {
        assert!(j[k].is_null(), "{k} was not measured: {}", j[k]);
    }
    // 8 prompt + 4 output tokens, the last one never stored (as simulate counts it).
    assert_eq!(j["kv_request_footprint_tokens"], 11, "the requests' own size is known");
    let o = bench(bare, false);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for label in ["Preemptions:", "Prefix cache hit rate (%):", "KV cache size (tokens):", "KV-limited concurrency:"] {
        let l = text.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no {label} in {text}"));
        assert!(l.contains("n/a"), "{l}");
    }
    // A server with /metrics: what it exports is measured (no preemption, a pool of 1000 blocks of
    // 16 less the null block); the prefix counters it does not export are still unknown.
    let j = stdout_json(&bench(start(false, 1, None), true));
    assert_eq!((j["num_preemptions"].as_u64(), j["kv_cache_tokens"].as_u64()), (Some(0), Some(16000)));
    assert!(j["kv_limited_concurrency"].as_u64().is_some());
    assert!(j["prefix_cache_hit_rate"].is_null() && j["ttft_breakdown"].is_null() && j["num_steps"].is_null());
}

/// `vllm bench serve` ignores EOS on the random dataset (vLLM PR #28227): so does bench, and the
/// run record says so. The KV a request needs is its prompt and its requested output, never a
/// stand-in length: without ignore_eos (a trace, or a scenario's explicit false) the footprint is
/// still prompt + max_tokens.
#[test]
fn bench_ignores_eos_on_random_and_sizes_requests_by_max_tokens() {
    let url = format!("http://{}", start(false, 0, None));
    let dir = scratch().join("eos");
    let common = [
        "bench",
        "--base-url",
        &url,
        "--num-prompts",
        "3",
        "--max-concurrency",
        "3",
        "--no-initial-test",
        "--vocab-size",
        "1000",
        "--json",
    ];
    let mut args = common.to_vec();
    args.extend(["--random-input-len", "64", "--random-output-len", "200", "--save-result", "--result-dir"]);
    args.push(dir.to_str().unwrap());
    let j = stdout_json(&run_cli(&args));
    // 64 + 200 tokens in blocks of 16: 272; the pool of 16,000 tokens holds 58 of them.
    assert_eq!(
        (j["kv_request_footprint_tokens"].as_u64(), j["kv_limited_concurrency"].as_u64()),
        (Some(272), Some(58))
    );
    let rec = run_record(&dir);
    assert_eq!(rec["setup"]["workload"]["ignore_eos"], true, "{}", rec["setup"]["workload"]);
    // A trace without ignore_eos: the server decides where EOS falls; the footprint is still the
    // requested 100 + 50 tokens (160 in blocks of 16), not a stand-in output length.
    let trace = write_temp("eos-trace.csv", "arrival_time,input_len,output_len\n0,100,50\n0,100,50\n0,100,50\n");
    let dir2 = dir.join("trace");
    let mut args = common.to_vec();
    args.extend(["--dataset-name", "trace", "--trace", trace.to_str().unwrap(), "--save-result", "--result-dir"]);
    args.push(dir2.to_str().unwrap());
    let j = stdout_json(&run_cli(&args));
    assert_eq!(j["kv_request_footprint_tokens"].as_u64(), Some(160), "{j}");
    // The run record keeps the workload as sent (ignore_eos false), not the generator's stand-in
    // output lengths: simulating it is the config's clear error, not a run of 1-token outputs.
    let rec = run_record(&dir2);
    let w = &rec["setup"]["workload"];
    assert!(w["ignore_eos"] == false && w.get("output_len_dist").is_none(), "{w}");
}

/// `bench --scenario` reads the scenario's trace in its `trace_format` (a production trace), as
/// `simulate` does, instead of blaming a valid trace for fields of another format.
#[test]
fn bench_replays_a_production_trace_in_its_format() {
    let url = format!("http://{}", start(false, 0, None));
    let o = run_cli(&[
        "bench",
        "--base-url",
        &url,
        "--scenario",
        "data/plan/mooncake-fleet-llama3.1-8b-h100-vllm.json",
        "--num-prompts",
        "3",
        "--no-initial-test",
        "--vocab-size",
        "1000",
        "--json",
    ]);
    let j = stdout_json(&o);
    assert_eq!(j["completed"].as_u64().unwrap() + j["failed"].as_u64().unwrap(), 3, "{j}");
    assert_eq!(j["request_rate"], "trace");
    // A rate given with a trace is said to be ignored, as simulate says it (bench said nothing).
    let o = run_cli(&[
        "bench",
        "--base-url",
        &url,
        "--scenario",
        "data/plan/mooncake-fleet-llama3.1-8b-h100-vllm.json",
        "--num-prompts",
        "2",
        "--request-rate",
        "100",
        "--no-initial-test",
        "--vocab-size",
        "1000",
        "--json",
    ]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--request-rate (workload.request_rate) is ignored"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `bench --scenario` on a model whose tokenizer adds a BOS draws and counts its prompts as
/// `simulate` of the same scenario does (`random_input_len` less the BOS, which the server adds;
/// vLLM 0.19's client leaves it out of `total_input_tokens`): bench resolved its workload without
/// the card, sent 256 tokens where vllm bench serve sends 255 and printed 5,120 where simulate
/// printed 5,100 (the review of 2026-12-08).
#[test]
fn bench_with_a_scenario_draws_and_counts_the_bos_as_simulate_does() {
    let url = format!("http://{}", start(false, 0, None));
    let scen = scratch().join("bench-bos.json");
    std::fs::write(
        &scen,
        r#"{"version": 1, "engine": {"kind": "vllm", "version": "0.19.1", "max_model_len": 4096, "kv_cache_tokens": 200000},
            "model": "llama-3.1-8b-instruct", "hardware": "h100-80gb",
            "workload": {"dataset_name": "random", "random_input_len": 256, "random_output_len": 4, "num_prompts": 20,
                         "max_concurrency": 4, "initial_test_request": false}}"#,
    )
    .unwrap();
    let scen = scen.to_str().unwrap();
    let o = run_cli(&["bench", "--base-url", &url, "--scenario", scen, "--vocab-size", "1000", "--json"]);
    let j = stdout_json(&o);
    let sim = stdout_json(&run_cli(&["simulate", scen, "--json"]));
    assert_eq!(sim["total_input_tokens"].as_u64(), Some(20 * 255), "{sim}");
    assert_eq!(j["completed"].as_u64(), Some(20), "{j}");
    assert_eq!(j["total_input_tokens"], sim["total_input_tokens"], "bench {j}");
}

/// Ids below 256 are never drawn: a vocabulary of 257 or fewer would send one prompt over and
/// over (every request one prefix-cache hit, found by the live-loop hunt). Refused, naming it.
#[test]
fn a_vocabulary_with_no_room_for_distinct_prompts_is_refused() {
    let addr = start(false, 1, None);
    let url = format!("http://{addr}");
    let o = run_cli(&["bench", "--base-url", &url, "--num-prompts", "2", "--vocab-size", "256", "--no-initial-test"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--vocab-size: expected more than 257"), "{err}");
}

/// `bench --goodput`: the measured run's `request_goodput` (stdout and `--save-result` alike) is
/// its completed requests meeting every objective over its duration, from the requests as the
/// client timed them: a failed request is never good, and a one-token output's TPOT counts as 0
/// (vLLM's `calculate_metrics`), checked against the saved per-request lists.
#[test]
fn bench_goodput_counts_the_completed_requests_meeting_every_objective() {
    let saved_result = |dir: &std::path::Path| -> serde_json::Value {
        let p = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                let n = p.to_string_lossy();
                n.ends_with(".json") && !n.ends_with(".record.json")
            })
            .expect("a --save-result file");
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let bench = |faults: bool, name: &str, lengths: [&str; 3], goodput: &[&str]| {
        let url = format!("http://{}", start(faults, 1, None));
        let dir = scratch().join(name);
        let mut args = vec![
            "bench",
            "--base-url",
            &url,
            "--random-input-len",
            "8",
            "--random-output-len",
            lengths[0],
            "--random-range-ratio",
            lengths[1],
            "--num-prompts",
            lengths[2],
            "--max-concurrency",
            "6",
            "--ignore-eos",
            "--request-timeout",
            "1.5",
            "--no-initial-test",
            "--vocab-size",
            "1000",
            "--save-result",
            "--result-dir",
            dir.to_str().unwrap(),
            "--json",
            "--goodput",
        ];
        args.extend_from_slice(goodput);
        let o = run_cli(&args);
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is JSON");
        (j, saved_result(&dir))
    };
    // Failures injected: every request that completed meets the objectives, none that failed.
    let (j, saved) = bench(true, "goodput-faults", ["8", "0.9", "30"], &["e2el:1e9", "tpot:1e9"]);
    let ok = saved["errors"].as_array().unwrap().iter().filter(|e| e == &"").count() as u64;
    assert!(ok > 0 && ok < 30, "{ok} of 30 succeeded");
    assert_eq!(j["completed"].as_u64(), Some(ok));
    crate::goodput::assert_goodput(&j, ok, "e2el:1e9 tpot:1e9 with failures");
    assert_eq!(saved["request_goodput"], j["request_goodput"]);
    // No failures, outputs of 1 to 3 tokens 1 ms apart: tpot:0 is met by the one-token outputs
    // alone.
    let (j, saved) = bench(false, "goodput-tpot0", ["2", "0.5", "30"], &["tpot:0"]);
    let lens = saved["output_lens"].as_array().unwrap();
    let ones = lens.iter().filter(|n| n.as_u64() == Some(1)).count() as u64;
    assert!(ones > 0 && ones < 30, "{ones} one-token outputs");
    assert_eq!(j["completed"].as_u64(), Some(30));
    crate::goodput::assert_goodput(&j, ones, "tpot:0");
    assert_eq!(saved["request_goodput"], j["request_goodput"]);
}
