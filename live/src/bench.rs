//! The load generator: runs a workload (the very request list the simulator
//! generates for that workload and seed) against a live server the way
//! `vllm bench serve` does: the initial test request, warm-ups, then the
//! timed requests at their send times under a `max_concurrency` semaphore,
//! timing starting once the semaphore is acquired.
//!
//! Each request's result is appended to a JSONL file as it completes, so an
//! interrupted run loses nothing measured. Ctrl-C stops sending, abandons
//! the requests in flight and reports what completed. `/metrics` is
//! snapshotted before and after, and polled during the run for the
//! running/waiting/KV-usage gauges.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sim::engine::EngineCounters;
use sim::request::RequestSpec;
use sim::simulation::{GaugeStats, RequestRecord, RunResult, StopReason};
use sim::workload::Workload;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::client::{self, Outcome, Request, Target};
use crate::prom::Snapshot;
use crate::server;
use sim::config::EngineKind;

/// How to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub base_url: String,
    pub target: Target,
    pub api_key: Option<String>,
    /// Token ids are drawn in `[reserved_ids, vocab_size)`.
    pub vocab_size: u32,
    pub reserved_ids: u32,
    /// Per-request results, appended as they complete.
    pub jsonl: Option<PathBuf>,
    /// Poll `/metrics` this often during the timed phase (None: never).
    pub poll_interval: Option<Duration>,
    pub kind: Option<EngineKind>,
    /// The server's KV pool, where it says (`None`: the report's pool figures are `null`).
    pub kv_capacity_tokens: Option<u64>,
    /// Print a line per phase on stderr.
    pub verbose: bool,
    /// Called as each timed request completes (progress display).
    pub on_done: Option<OnDone>,
    /// With the chat endpoint: prompts become text through this tokenizer.
    pub chat_tokenizer: Option<Arc<tokenizers::Tokenizer>>,
    /// Requests ask for greedy sampling ([`crate::client::Request::greedy`]).
    pub greedy: bool,
}

/// A callback run as each timed request completes.
#[derive(Clone)]
pub struct OnDone(pub Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for OnDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnDone")
    }
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct BenchRun {
    /// Timed requests, in workload order.
    pub outcomes: Vec<Outcome>,
    /// The measurements in the simulator's shapes, so that the same metric
    /// code computes both sides.
    pub result: RunResult,
    pub metrics_before: Option<Snapshot>,
    pub metrics_after: Option<Snapshot>,
    pub interrupted: bool,
    /// CPU time this process used, and the wall time of the timed phase.
    pub client_cpu_s: f64,
    pub wall_s: f64,
    /// The initial test request failed, why: `vllm bench serve` stops there ("Initial test run
    /// failed"), and so does this run (nothing else sent).
    pub initial_test_error: Option<String>,
}

/// Token ids of a request's prompt, less its leading BOS segment (`RequestSpec::bos_len`): that
/// stands for the BOS the server's tokenizer puts before a text prompt, which it adds itself (a
/// workload has one only for text prompts: `WorkloadParams::special_tokens` is 0 with
/// `tokenize_prompt`).
pub fn prompt_ids(spec: &RequestSpec, vocab: u32, reserved: u32) -> Vec<u32> {
    (spec.bos_len()..spec.prompt_len).map(|p| spec.token_id(p, vocab, reserved)).collect()
}

/// CPU seconds used by this process so far (user + system, all threads).
pub fn process_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    // Fields after the command name (which is in parentheses and may hold spaces).
    let Some(rest) = stat.rsplit_once(')').map(|x| x.1) else { return 0.0 };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line: 12 and 13 here.
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    // USER_HZ is 100 on Linux.
    (ticks(11) + ticks(12)) / 100.0
}

struct Writer {
    file: Option<std::fs::File>,
}

/// One line of the per-request results (`*.requests.jsonl`).
#[derive(serde::Serialize)]
struct RequestLine<'a> {
    phase: &'a str,
    index: usize,
    prompt_len: u32,
    max_tokens: u32,
    success: bool,
    error: &'a Option<client::Failure>,
    start_s: f64,
    ttft_ms: f64,
    itl_ms: Vec<f64>,
    e2el_ms: f64,
    output_tokens: u32,
    prompt_tokens: Option<u32>,
}

impl Writer {
    fn write(&mut self, phase: &str, index: usize, spec: &RequestSpec, o: &Outcome) {
        let Some(f) = &mut self.file else { return };
        let line = RequestLine {
            phase,
            index,
            prompt_len: spec.prompt_len,
            max_tokens: spec.max_tokens,
            success: o.success,
            error: &o.error,
            start_s: o.start_s,
            ttft_ms: o.ttft_s * 1e3,
            itl_ms: o.itl_s.iter().map(|x| x * 1e3).collect(),
            e2el_ms: o.latency_s * 1e3,
            output_tokens: o.output_tokens,
            prompt_tokens: o.prompt_tokens,
        };
        // A failed write must not end the run: the results are also in memory.
        let _ = writeln!(f, "{}", serde_json::to_string(&line).expect("a request line serializes"));
        let _ = f.flush();
    }
}

#[derive(Default)]
struct Poll {
    samples: Vec<(f64, f64, f64, f64)>, // (t, running, waiting, kv usage)
}

async fn run_phase(
    client: &reqwest::Client,
    opts: &BenchOptions,
    phase: &'static str,
    reqs: &[RequestSpec],
    max_conc: Option<u32>,
    role_chunk: bool,
    t0: Instant,
    writer: &Arc<Mutex<Writer>>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
    interrupted: &mut bool,
) -> Vec<Outcome> {
    // Each request's send time, in ns from `t0` plus 1, stored by its task as it is sent (0: not
    // sent yet): a request the interruption catches in flight keeps its real send time, as
    // `vllm bench serve`'s failed outputs keep theirs (`RequestFuncOutput.start_time`, set before
    // the request is posted, and its `start_times` list holds every output, failed ones too:
    // `vllm/benchmarks/lib/endpoint_request_func.py`, `async_request_openai_completions`, and
    // `vllm/benchmarks/serve.py`, `benchmark`, read in the 0.32.0 wheel; it has no handling of an
    // interruption and writes nothing then); it was written as 0 until 2026-12-06.
    let sent: Arc<Vec<std::sync::atomic::AtomicU64>> =
        Arc::new((0..reqs.len()).map(|_| std::sync::atomic::AtomicU64::new(0)).collect());
    // Each request's outcome, stored by its task in the same poll as its line is written (no
    // await between them, so an abort cannot fall between): an interruption that catches a
    // finished task before the join below has taken its result must not count it in flight
    // (that wrote a second, failed line for a request already saved as completed).
    let done: Arc<Mutex<Vec<Option<Outcome>>>> = Arc::new(Mutex::new(vec![None; reqs.len()]));
    let sem = Arc::new(Semaphore::new(max_conc.map(|c| c as usize).unwrap_or(Semaphore::MAX_PERMITS)));
    let start = Instant::now();
    let mut set = JoinSet::new();
    // Each request's turn, given in list order: `vllm bench serve` creates one asyncio task per
    // request as it arrives, and they reach its semaphore in that order. Here one dispatcher
    // waits for each send time and the semaphore in turn and hands the permit on (tasks left to
    // race for it start in the runtime's order, the last spawned first).
    let mut turns = Vec::with_capacity(reqs.len());
    for (i, spec) in reqs.iter().enumerate() {
        let (give, turn) = tokio::sync::oneshot::channel::<tokio::sync::OwnedSemaphorePermit>();
        turns.push((start + Duration::from_nanos(spec.arrival_ns), give));
        let client = client.clone();
        let target = opts.target.clone();
        let ids = prompt_ids(spec, opts.vocab_size, opts.reserved_ids);
        let text = opts.chat_tokenizer.as_ref().map(|t| crate::tokenizer::text_prompt(t, &ids));
        let req = Request {
            prompt_token_ids: ids,
            text,
            max_tokens: spec.max_tokens,
            ignore_eos: spec.ignore_eos,
            time_role_chunk: role_chunk,
            greedy: opts.greedy,
        };
        let writer = writer.clone();
        let spec = spec.clone();
        let on_done = if phase == "timed" { opts.on_done.clone() } else { None };
        let sent = sent.clone();
        let done = done.clone();
        set.spawn(async move {
            let _permit = turn.await.expect("the dispatcher gives every request its turn");
            sent[i].store(t0.elapsed().as_nanos() as u64 + 1, std::sync::atomic::Ordering::SeqCst);
            let o = client::send(&client, &target, &req, t0).await;
            writer.lock().expect("writer").write(phase, i, &spec, &o);
            done.lock().expect("outcomes")[i] = Some(o.clone());
            if let Some(f) = on_done {
                (f.0)();
            }
            (i, o)
        });
    }
    // In send-time order, ties in list order: a trace whose rows are not sorted by
    // `arrival_time` is sent as the simulator sends it (`simulation::Loop::start_phase` sorts
    // its sends by time, then sequence); in list order a later row held back every row after it
    // (the audit of 2026-12-06). Sorted lists (every generated one) keep their order.
    turns.sort_by_key(|(send_at, _)| *send_at);
    let dispatcher = tokio::spawn(async move {
        for (send_at, give) in turns {
            tokio::time::sleep_until(send_at.into()).await;
            let permit = sem.clone().acquire_owned().await.expect("semaphore open");
            let _ = give.send(permit);
        }
    });
    let mut out: Vec<Option<Outcome>> = vec![None; reqs.len()];
    let stopped = stopped(stop);
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            next = set.join_next() => match next {
                Some(Ok((i, o))) => out[i] = Some(o),
                Some(Err(_)) => {}
                None => break,
            },
            _ = &mut stopped => {
                *interrupted = true;
                dispatcher.abort();
                set.abort_all();
                break;
            }
        }
    }
    // Requests the interruption caught in flight failed, at the time they were sent, and their
    // lines are written as the completed ones were (the result counted them failed while the file
    // had no line for them); those never sent are not failures.
    let stored = std::mem::take(&mut *done.lock().unwrap_or_else(|e| e.into_inner()));
    let out: Vec<Outcome> = out
        .into_iter()
        .zip(stored)
        .enumerate()
        .map(|(i, (o, finished))| {
            o.or(finished).unwrap_or_else(|| {
                let at = sent[i].load(std::sync::atomic::Ordering::SeqCst);
                if at > 0 {
                    let o = Outcome {
                        sent: true,
                        start_s: (at - 1) as f64 / 1e9,
                        error: Some(client::Failure::Aborted),
                        ..Default::default()
                    };
                    writer.lock().unwrap_or_else(|e| e.into_inner()).write(phase, i, &reqs[i], &o);
                    o
                } else {
                    Outcome::default()
                }
            })
        })
        .collect();
    if opts.verbose {
        let ok = out.iter().filter(|o| o.success).count();
        let unsent = out.iter().filter(|o| !o.sent).count();
        let tail = if unsent > 0 { format!(" ({unsent} never sent)") } else { String::new() };
        eprintln!("{phase}: {ok}/{} requests succeeded in {:.1} s{tail}", reqs.len(), start.elapsed().as_secs_f64());
    }
    out
}

/// Resolves once `stop` says so; never where its sender is gone without saying so.
async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A Ctrl-C (SIGINT) listener for a command that runs several benches: the receiver turns
/// true at the first Ctrl-C and stays so, so one pressed between two runs (or while the
/// command fits or simulates) interrupts the next run before it sends anything, where a
/// listener of each run's own ([`run`]) missed it: tokio's handler, once installed, keeps
/// the process alive, and nobody heard it (until 2026-12-06). A second Ctrl-C calls `again`
/// (the CLI exits there), heard at once: the listener has a thread and a runtime of its own, so
/// a command busy in a fit, outside its own runtime, still hears it.
pub fn interrupt_watch(again: fn()) -> std::io::Result<tokio::sync::watch::Receiver<bool>> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // The handler is installed before this returns (a Ctrl-C right after is heard, not the
    // shell's default).
    #[cfg(unix)]
    let mut sigint =
        rt.block_on(async { tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()) })?;
    std::thread::Builder::new().name("ctrl-c".into()).spawn(move || {
        rt.block_on(async move {
            #[cfg(unix)]
            let _ = sigint.recv().await;
            #[cfg(not(unix))]
            let _ = tokio::signal::ctrl_c().await;
            let _ = tx.send(true);
            #[cfg(unix)]
            let _ = sigint.recv().await;
            #[cfg(not(unix))]
            let _ = tokio::signal::ctrl_c().await;
            again();
            // `again` is meant not to return; if it does, keep the sender (and the stop) alive.
            std::future::pending::<()>().await
        })
    })?;
    Ok(rx)
}

/// Runs the workload's phases against the server; Ctrl-C (SIGINT) interrupts it.
pub async fn run(opts: &BenchOptions, workload: &Workload) -> BenchRun {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let ctrl_c = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = tx.send(true);
        }
    });
    let run = run_until(opts, workload, rx).await;
    ctrl_c.abort();
    run
}

/// [`run`], interrupted when `stop` turns true (as Ctrl-C does) instead of on Ctrl-C.
pub async fn run_until(
    opts: &BenchOptions,
    workload: &Workload,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> BenchRun {
    let client = reqwest::Client::builder().pool_max_idle_per_host(1024).build().expect("an HTTP client");
    let t0 = Instant::now();
    let writer = Arc::new(Mutex::new(Writer {
        file: opts.jsonl.as_ref().and_then(|p| {
            match std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(p) {
                Ok(f) => Some(f),
                Err(e) => {
                    eprintln!("warning: per-request results will not be written to {}: {e}", p.display());
                    None
                }
            }
        }),
    }));
    let mut interrupted = false;
    let mut initial_test_error = None;
    if let Some(t) = &workload.initial_test {
        let o = run_phase(
            &client,
            opts,
            "initial_test",
            std::slice::from_ref(t),
            Some(1),
            workload.role_chunk,
            t0,
            &writer,
            &mut stop,
            &mut interrupted,
        )
        .await;
        if let Some(o) = o.first().filter(|o| o.sent && !o.success) {
            initial_test_error = Some(o.error.as_ref().map_or_else(|| "?".to_string(), ToString::to_string));
        }
    }
    let skip = interrupted || initial_test_error.is_some();
    if !skip && !workload.warmups.is_empty() {
        run_phase(
            &client,
            opts,
            "warmup",
            &workload.warmups,
            workload.max_concurrency,
            workload.role_chunk,
            t0,
            &writer,
            &mut stop,
            &mut interrupted,
        )
        .await;
    }
    let metrics_before = server::metrics(&client, &opts.base_url, opts.api_key.as_deref()).await.ok();
    let poll = Arc::new(Mutex::new(Poll::default()));
    let poller = opts.poll_interval.map(|every| {
        let client = client.clone();
        let base = opts.base_url.clone();
        let key = opts.api_key.clone();
        let poll = poll.clone();
        let kind = opts.kind;
        tokio::spawn(async move {
            let start = Instant::now();
            // Midpoints: the first poll half an interval into the run, then one an interval.
            // Each poll stands for the interval around it, so the mean of equal-weight polls is
            // the time average; a first poll at the start read the engine before any request
            // had reached it (a third low on a run of three polls).
            tokio::time::sleep(every / 2).await;
            loop {
                if let Ok(s) = server::metrics(&client, &base, key.as_deref()).await {
                    let (r, w, u) = match kind {
                        Some(EngineKind::Sglang) => (
                            s.sum("sglang:num_running_reqs"),
                            s.sum("sglang:num_queue_reqs"),
                            s.sum("sglang:token_usage"),
                        ),
                        _ => (
                            s.sum("vllm:num_requests_running"),
                            s.sum("vllm:num_requests_waiting"),
                            s.first_sum(&["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"]),
                        ),
                    };
                    // A gauge the server does not export is NaN, not 0 (`gauge_stats`).
                    poll.lock().expect("poll").samples.push((
                        start.elapsed().as_secs_f64(),
                        r.unwrap_or(f64::NAN),
                        w.unwrap_or(f64::NAN),
                        u.unwrap_or(f64::NAN),
                    ));
                }
                tokio::time::sleep(every).await;
            }
        })
    });
    let bench_start = Instant::now();
    let cpu_start = process_cpu_seconds();
    let timed = if interrupted || initial_test_error.is_some() {
        vec![Outcome::default(); workload.requests.len()]
    } else {
        run_phase(
            &client,
            opts,
            "timed",
            &workload.requests,
            workload.max_concurrency,
            workload.role_chunk,
            bench_start,
            &writer,
            &mut stop,
            &mut interrupted,
        )
        .await
    };
    let wall_s = bench_start.elapsed().as_secs_f64();
    let client_cpu_s = process_cpu_seconds() - cpu_start;
    if let Some(p) = poller {
        p.abort();
    }
    let metrics_after = server::metrics(&client, &opts.base_url, opts.api_key.as_deref()).await.ok();

    // The measurements in the simulator's shapes.
    let mut records = Vec::with_capacity(timed.len());
    let mut outcomes = Vec::with_capacity(timed.len());
    let mut token_log = sim::simulation::TokenLog::default();
    let mut end_s: f64 = 0.0;
    for (spec, o) in workload.requests.iter().zip(timed) {
        if !o.sent {
            // Never sent (the run was interrupted first): neither completed nor failed.
            outcomes.push(o);
            continue;
        }
        let mut rec = RequestRecord { prompt_len: spec.prompt_len, output_len: o.output_tokens, ..Default::default() };
        let ns = |s: f64| (s.max(0.0) * 1e9).round() as u64;
        rec.dispatch_ns = ns(o.start_s);
        rec.engine_arrival_ns = rec.dispatch_ns;
        if o.success {
            let mut t = o.start_s + o.ttft_s;
            let mut times = vec![ns(t)];
            for d in &o.itl_s {
                t += d;
                times.push(ns(t));
            }
            rec.tokens = token_log.append(&times);
            rec.completed = true;
            end_s = end_s.max(o.start_s + o.latency_s);
        }
        records.push(rec);
        outcomes.push(o);
    }
    // What was not measured is `None` in the report ([`MeasuredCounters`]), not these zeros.
    let counters = match (&metrics_before, &metrics_after) {
        (Some(a), Some(b)) => counter_diff(opts.kind, a, b),
        _ => EngineCounters::default(),
    };
    let gauges = {
        let p = poll.lock().expect("poll");
        gauge_stats(&p.samples)
    };
    let bench_end_ns = (wall_s.max(end_s) * 1e9).round() as u64;
    let completed = records.iter().filter(|r| r.completed).count();
    let result = RunResult {
        records,
        bench_start_ns: 0,
        bench_end_ns,
        counters,
        gauges,
        timeseries: Vec::new(),
        kv_capacity_tokens: opts.kv_capacity_tokens.unwrap_or(0),
        stop: if interrupted { StopReason::Interrupted { completed } } else { StopReason::Completed },
        num_steps: 0,
        end_ns: bench_end_ns,
        ingress_ns: 0,
        fast_forwarded_steps: 0,
        lazy_decoded_tokens: 0,
        token_log,
        // The client measured its gaps, a role chunk's included.
        role_chunk_gaps: false,
        // Its records' `prompt_len` are the workload's, counted as the modelled client counts them.
        uncounted_prompt_tokens: workload.uncounted_prompt_tokens,
        measure_window_ns: None,
    };
    BenchRun { outcomes, result, metrics_before, metrics_after, interrupted, client_cpu_s, wall_s, initial_test_error }
}

/// The engine counters accumulated between two `/metrics` snapshots (0 for a counter that is
/// not in both; [`measured_counters`] says which were).
pub fn counter_diff(kind: Option<EngineKind>, a: &Snapshot, b: &Snapshot) -> EngineCounters {
    let m = measured_counters(kind, Some(a), Some(b));
    EngineCounters {
        num_preemptions: m.num_preemptions.unwrap_or(0),
        prefix_cache_queries: m.prefix_cache_queries.unwrap_or(0),
        prefix_cache_hits: m.prefix_cache_hits.unwrap_or(0),
        ..Default::default()
    }
}

/// The engine counters of a live run, each `None` where it was not measured: no snapshot
/// before or after the run (no readable `/metrics`), a counter the server does not export, or
/// one that went backwards (a restart).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MeasuredCounters {
    pub num_preemptions: Option<u64>,
    pub prefix_cache_queries: Option<u64>,
    pub prefix_cache_hits: Option<u64>,
}

/// [`MeasuredCounters`] between two `/metrics` snapshots.
pub fn measured_counters(kind: Option<EngineKind>, a: Option<&Snapshot>, b: Option<&Snapshot>) -> MeasuredCounters {
    let (Some(a), Some(b)) = (a, b) else {
        return MeasuredCounters::default();
    };
    let d = |names: &[&str]| -> Option<u64> {
        match (b.first_sum(names), a.first_sum(names)) {
            (Some(x), Some(y)) if x >= y => Some((x - y).round() as u64),
            _ => None,
        }
    };
    match kind {
        Some(EngineKind::Sglang) => MeasuredCounters {
            num_preemptions: d(&["sglang:num_retracted_requests_total", "sglang:total_retracted_reqs"]),
            prefix_cache_queries: d(&["sglang:prompt_tokens_total"]),
            prefix_cache_hits: d(&["sglang:cached_tokens_total"]),
        },
        _ => MeasuredCounters {
            num_preemptions: d(&["vllm:num_preemptions_total"]),
            prefix_cache_queries: d(&["vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"]),
            prefix_cache_hits: d(&["vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"]),
        },
    }
}

/// The gauges of a live run from the metrics polls (time, running, waiting, KV usage; NaN where
/// the server does not export one). Unmeasured ([`GaugeStats::unmeasured`]) when no poll saw a
/// request running: no metrics endpoint, or every poll fell outside the load (a run shorter than
/// the poll interval); a KV usage the server does not export is NaN. Never zeros for "unknown".
fn gauge_stats(samples: &[(f64, f64, f64, f64)]) -> GaugeStats {
    let mut g = GaugeStats::default();
    if !samples.iter().any(|&(_, r, _, _)| r > 0.0) {
        g.unmeasured = true;
        return g;
    }
    let mean_peak = |f: &dyn Fn(&(f64, f64, f64, f64)) -> f64| {
        let v: Vec<f64> = samples.iter().map(f).filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            (f64::NAN, f64::NAN)
        } else {
            (v.iter().sum::<f64>() / v.len() as f64, v.iter().copied().fold(f64::MIN, f64::max))
        }
    };
    let (rm, rp) = mean_peak(&|s| s.1);
    let (wm, wp) = mean_peak(&|s| s.2);
    let (um, up) = mean_peak(&|s| s.3);
    g.running_mean = rm;
    g.running_peak = rp as u32;
    g.waiting_mean = wm;
    g.waiting_peak = if wp.is_finite() { wp as u32 } else { 0 };
    g.kv_usage_mean = um;
    g.kv_usage_peak = up;
    g
}

#[cfg(test)]
mod tests {
    use super::gauge_stats;
    use sim::request::{RequestSpec, Segment};
    use std::time::Duration;

    /// A 4-token prompt keyed `k`, 2 output tokens, sent `at_ms` into its phase.
    fn small_request(k: u64, at_ms: u64) -> RequestSpec {
        RequestSpec {
            prompt: vec![Segment { key: k, len: 4 }],
            prompt_len: 4,
            max_tokens: 2,
            output_len: 2,
            output_key: k,
            arrival_ns: at_ms * 1_000_000,
            priority: 0,
            ignore_eos: true,
            prompt_hashes: None,
        }
    }

    /// The options of a completions run against `base` (`http://host:port`), lines to `jsonl`.
    fn completions_options(base: &str, jsonl: Option<std::path::PathBuf>, timeout: Duration) -> super::BenchOptions {
        super::BenchOptions {
            base_url: base.to_string(),
            target: crate::client::Target {
                url: format!("{base}/v1/completions"),
                model: "m".into(),
                api_key: None,
                timeout,
            },
            api_key: None,
            vocab_size: 1000,
            reserved_ids: 256,
            jsonl,
            poll_interval: None,
            kind: None,
            kv_capacity_tokens: None,
            verbose: false,
            on_done: None,
            chat_tokenizer: None,
            greedy: true,
        }
    }

    /// Requests an interruption catches in flight keep the time they were sent (they were written
    /// with a start time of 0 until 2026-12-06), in the run's outcomes, its records and the
    /// per-request lines; those never sent stay unsent. A server that accepts and never answers
    /// holds three requests sent 150 ms apart until the run is stopped.
    #[test]
    fn requests_caught_in_flight_keep_their_send_time() {
        use sim::workload::Workload;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let dir = std::env::temp_dir().join(format!("servesim-bench-inflight-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let jsonl = dir.join("run.requests.jsonl");
        let spec = small_request;
        let w = Workload {
            // The fourth is due after the stop: never sent.
            requests: vec![spec(1, 0), spec(2, 150), spec(3, 300), spec(4, 60_000)],
            request_rate: Some(1.0),
            ..Default::default()
        };
        let run = rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            // Answers a GET (`/metrics`) 404 at once; holds every POST open, unanswered.
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut held = Vec::new();
                while let Ok((mut sock, _)) = listener.accept().await {
                    let mut head = [0u8; 4];
                    if sock.read_exact(&mut head).await.is_ok() && &head[..3] == b"GET" {
                        let _ = sock
                            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                            .await;
                    } else {
                        held.push(sock);
                    }
                }
            });
            let opts = completions_options(&format!("http://{addr}"), Some(jsonl.clone()), Duration::from_secs(60));
            let (tx, rx) = tokio::sync::watch::channel(false);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(700)).await;
                let _ = tx.send(true);
            });
            super::run_until(&opts, &w, rx).await
        });
        assert!(run.interrupted);
        let o = &run.outcomes;
        assert_eq!(o.len(), 4);
        for (k, want) in [(0, 0.0), (1, 0.15), (2, 0.30)] {
            assert!(o[k].sent && !o[k].success, "{:?}", o[k]);
            assert_eq!(o[k].error, Some(crate::client::Failure::Aborted));
            // Sent at its time, or a little after on a busy host; never before.
            assert!(o[k].start_s >= want && o[k].start_s < want + 0.3, "request {k}: start_s {}", o[k].start_s);
        }
        assert!(!o[3].sent && o[3].start_s == 0.0);
        // The records the metrics read: the three sent, at their send times, none completed.
        let d: Vec<u64> = run.result.records.iter().map(|r| r.dispatch_ns).collect();
        assert_eq!(d.len(), 3);
        assert!(d[1] >= 150_000_000 && d[2] >= 300_000_000, "{d:?}");
        assert!(run.result.records.iter().all(|r| !r.completed));
        // The per-request lines say the same.
        let lines: Vec<serde_json::Value> =
            std::fs::read_to_string(&jsonl).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 3);
        for l in &lines {
            let k = l["index"].as_u64().unwrap() as usize;
            assert_eq!(l["start_s"].as_f64().unwrap(), o[k].start_s, "{l}");
            assert_eq!(l["success"], false);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Polls that never saw a request running (no metrics endpoint, or a run shorter than the poll
    /// interval) are not a measurement of zero load; a KV usage the server does not export is
    /// unknown, not 0.
    #[test]
    fn gauges_not_measured_are_not_zeros() {
        assert!(gauge_stats(&[]).unmeasured);
        assert!(gauge_stats(&[(0.0, 0.0, 0.0, 0.0)]).unmeasured, "one poll before any load");
        let g = gauge_stats(&[(0.0, 0.0, 0.0, 0.0), (1.0, 8.0, 2.0, 0.22), (2.0, 6.0, 0.0, 0.18)]);
        assert!(!g.unmeasured);
        assert_eq!((g.running_peak, g.waiting_peak), (8, 2));
        assert!((g.kv_usage_peak - 0.22).abs() < 1e-12 && (g.running_mean - 14.0 / 3.0).abs() < 1e-12);
        let no_kv = gauge_stats(&[(1.0, 8.0, 2.0, f64::NAN), (2.0, 6.0, 0.0, f64::NAN)]);
        assert!(!no_kv.unmeasured && no_kv.kv_usage_peak.is_nan() && no_kv.kv_usage_mean.is_nan());
    }

    /// One listener for a command of several runs ([`super::interrupt_watch`]): a Ctrl-C heard
    /// while no run is going stays heard, so the next run stops before it sends anything (each
    /// run's own listener missed it, and tokio's handler kept the process alive); a second
    /// Ctrl-C calls `again`. The test sends itself SIGINT twice (were the handler not installed,
    /// the first would kill the test binary).
    #[cfg(unix)]
    #[test]
    fn a_ctrl_c_between_runs_stops_the_next_and_a_second_calls_again() {
        use sim::workload::Workload;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::time::Instant;
        static AGAIN: AtomicBool = AtomicBool::new(false);
        let rx = super::interrupt_watch(|| AGAIN.store(true, Ordering::SeqCst)).unwrap();
        assert!(!*rx.borrow());
        let sigint = || {
            let ok = std::process::Command::new("kill")
                .args(["-INT", &std::process::id().to_string()])
                .status()
                .unwrap()
                .success();
            assert!(ok, "kill -INT");
        };
        let within = |what: &str, f: &dyn Fn() -> bool| {
            let t = Instant::now();
            while !f() {
                assert!(t.elapsed() < Duration::from_secs(30), "{what} not seen within 30 s");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        sigint();
        within("the first Ctrl-C", &|| *rx.borrow());
        assert!(!AGAIN.load(Ordering::SeqCst), "one Ctrl-C is not two");
        // The next run sends nothing: its requests would fail to connect (sent, failed) if it did.
        let w = Workload {
            initial_test: Some(small_request(9, 0)),
            requests: (0..3).map(|k| small_request(k, 0)).collect(),
            ..Default::default()
        };
        let opts = completions_options("http://127.0.0.1:9", None, Duration::from_secs(5));
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let run = rt.block_on(super::run_until(&opts, &w, rx.clone()));
        assert!(run.interrupted);
        assert!(run.initial_test_error.is_none());
        assert!(run.outcomes.iter().all(|o| !o.sent), "{:?}", run.outcomes);
        sigint();
        within("the second Ctrl-C", &|| AGAIN.load(Ordering::SeqCst));
    }
}
