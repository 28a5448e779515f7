//! `calib::Measure` against a live server: each run through the load
//! generator, after a short warm-up at the run's shape; probes' and check
//! points' per-request results and run records written to a folder.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use calib::measure::{ClientCpu, Measure, Measurement, Point, Run};
use calib::{MeasureError, ServerInfo};
use sim::report::PointMeta;
use sim::workload::Workload;

use crate::bench::{self, BenchOptions, BenchRun, OnDone};

/// A progress display for a run of `n` requests: a tick per completed request, and a
/// function that clears it.
pub type Progress = Arc<dyn Fn(u64) -> (OnDone, Box<dyn FnOnce()>) + Send + Sync>;

/// A live server, measured.
pub struct LiveMeasure {
    pub rt: tokio::runtime::Runtime,
    pub opts: BenchOptions,
    pub info: ServerInfo,
    /// Where per-request results and run records go.
    pub dir: PathBuf,
    /// The endpoint path (for run records).
    pub endpoint: String,
    pub progress: Option<Progress>,
    /// The prefix of this run's probe files (`calibrate-{stamp}`, made unique in `dir` at the
    /// first probe), so that a later calibration in the same directory writes files of its own
    /// (every run's `prefill-16.requests.jsonl` overwrote the last one's until 2026-12-06).
    pub probe_prefix: Option<String>,
    /// A live calibration's run record: each probe's file is added to it, and it is written
    /// again, as the probe ends (an interrupted calibration's record lists what it ran).
    pub record: Option<crate::manifest::CalibrationRecord>,
    /// Turns true at Ctrl-C and stays so ([`crate::bench::interrupt_watch`]): every run of
    /// this measure listens to it, so a Ctrl-C between two runs stops the next one before it
    /// sends anything.
    pub stop: tokio::sync::watch::Receiver<bool>,
}

/// `opts` for a run whose requests are not recorded: a warm-up or a speed reference.
pub fn unrecorded(opts: &BenchOptions) -> BenchOptions {
    let mut o = opts.clone();
    o.jsonl = None;
    o.poll_interval = None;
    o.on_done = None;
    o
}

/// `stem`, or `stem-2`, `stem-3`, …: the first that no file in `dir` begins with (followed by
/// `-`), so that a run's files are its own beside an earlier run's stamped in the same second.
pub fn free_prefix(dir: &Path, stem: &str) -> String {
    let names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    (1..)
        .map(|k| if k == 1 { stem.to_string() } else { format!("{stem}-{k}") })
        .find(|p| !names.iter().any(|n| n.starts_with(&format!("{p}-"))))
        .expect("a free name")
}

/// The `hardware` of a measured run whose server does not say its GPU (a real engine).
pub const LIVE_HARDWARE: &str = "live";

/// What identifies the measured engine in report keys.
pub fn meta_of(info: &ServerInfo) -> PointMeta {
    PointMeta {
        engine: info.kind_name().into(),
        engine_version: info.version.clone().unwrap_or_else(|| "unknown".into()),
        model_id: info.model.clone().unwrap_or_default(),
        // The GPU where the server says it (`servesim serve` names its card), else "live": a
        // real engine does not say which GPU it runs on.
        hardware: info.servesim_hardware.clone().unwrap_or_else(|| LIVE_HARDWARE.into()),
        kv_granularity: info.kv_granularity.unwrap_or(1),
        // Unsaid, the engines' default: on.
        prefix_caching: info.prefix_caching.unwrap_or(true),
    }
}

/// The report keys of a measured run, with the same names as a simulated one. What the client
/// could not measure is `None` (JSON `null`, "n/a" in text), never a zero: an engine counter not
/// read from `/metrics` before and after the run, the KV pool (and so the KV-limited
/// concurrency) of a server that does not say it, and the simulator's own figures (the TTFT
/// split, the step count), which no client sees.
pub fn measured_point(info: &ServerInfo, w: &Workload, run: &BenchRun) -> Point {
    let metrics = sim::metrics::bench_metrics(&run.result);
    let mut report = sim::report::BenchReport::of(&meta_of(info), w, &metrics, &run.result);
    let kind = info.kind;
    let c = bench::measured_counters(kind, run.metrics_before.as_ref(), run.metrics_after.as_ref());
    report.num_preemptions = c.num_preemptions;
    if report.num_retractions.is_some() {
        report.num_retractions = c.num_preemptions;
    }
    report.prefix_cache_queries = c.prefix_cache_queries;
    report.prefix_cache_hits = c.prefix_cache_hits;
    report.prefix_cache_hit_rate = match (c.prefix_cache_queries, c.prefix_cache_hits) {
        (Some(q), Some(h)) if q > 0 => h as f64 / q as f64,
        (Some(_), Some(_)) => 0.0,
        _ => f64::NAN,
    };
    // The KV a request needs is its prompt and its requested output (`max_tokens`): without
    // ignore_eos the server decides where EOS falls, and the generator's own output lengths are a
    // stand-in that sizes nothing. Otherwise as `simulate` counts it (`sim::sweep::kv_limit`):
    // the last token never stored, a prefix the prompts share held once where the server's
    // prefix cache is on (bench counted every request's copy of it: 24 where simulate said 35).
    let mut sized = w.clone();
    for r in &mut sized.requests {
        r.output_len = r.max_tokens;
    }
    let meta = meta_of(info);
    let limit =
        sim::sweep::kv_limit(info.kv_capacity_tokens.unwrap_or(0), meta.kv_granularity, meta.prefix_caching, &sized);
    report.kv_request_footprint_tokens = limit.footprint_tokens;
    report.kv_limited_concurrency = info.kv_capacity_tokens.map(|_| limit.concurrency);
    if info.kv_capacity_tokens.is_none() {
        report.kv_cache_tokens = None;
    }
    report.ttft_breakdown = None;
    report.num_steps = None;
    Point {
        report,
        client_cpu: Some(ClientCpu { seconds: run.client_cpu_s, fraction: run.client_cpu_s / run.wall_s.max(1e-9) }),
    }
}

/// Where a run's files go.
pub struct RunFiles {
    /// When the files were named (`YYYYMMDD-HHMMSS`, UTC): the default name's stamp and the
    /// result's `date`, one clock for both (`vllm bench serve` stamps both from one `now()`).
    pub stamp: String,
    pub result: PathBuf,
    pub requests: PathBuf,
    pub record: PathBuf,
}

/// The files of a run named as `vllm bench serve` names them (or `filename`).
pub fn run_files(
    dir: Option<&Path>,
    filename: Option<&str>,
    label: &str,
    w: &Workload,
    model: &str,
) -> Result<RunFiles, String> {
    let dir = dir.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    let stamp = crate::manifest::stamp(crate::manifest::now_unix_s());
    std::fs::create_dir_all(&dir).map_err(|e| format!("--result-dir {}: {e}", dir.display()))?;
    match filename {
        // The result is written under the name given, as `vllm bench serve` writes it; the
        // per-request lines and the record beside it, named after it.
        Some(f) => {
            if f.trim().is_empty() {
                return Err("--result-filename: expected a file name, got an empty one".into());
            }
            let result = dir.join(f);
            if let Some(parent) = result.parent() {
                std::fs::create_dir_all(parent).map_err(|e| format!("--result-filename {f}: {e}"))?;
            }
            let base = f.strip_suffix(".json").unwrap_or(f);
            Ok(RunFiles {
                stamp,
                result,
                requests: dir.join(format!("{base}.requests.jsonl")),
                record: dir.join(format!("{base}.record.json")),
            })
        }
        None => {
            // `args.request_rate` is a Python float: str() writes 4 as "4.0", infinity as "inf".
            let rate = match w.request_rate {
                Some(r) if r.is_finite() && r.fract() == 0.0 && r.abs() < 1e16 => format!("{r:.1}"),
                Some(r) if r.is_finite() => format!("{r}"),
                _ => "inf".into(),
            };
            let conc = w.max_concurrency.map(|c| format!("-concurrency{c}")).unwrap_or_default();
            let model = model.rsplit('/').next().unwrap_or(model);
            let stem = format!("{label}-{rate}qps{conc}-{model}-{stamp}");
            // Two runs stamped in the same second (a check's repeats, quick benches) get names
            // of their own: neither overwrites the other's record nor adds to its requests.
            let files = |base: &str| RunFiles {
                stamp: stamp.clone(),
                result: dir.join(format!("{base}.json")),
                requests: dir.join(format!("{base}.requests.jsonl")),
                record: dir.join(format!("{base}.record.json")),
            };
            let mut k = 1;
            loop {
                let f = files(&if k == 1 { stem.clone() } else { format!("{stem}-{k}") });
                if !(f.result.exists() || f.requests.exists() || f.record.exists()) {
                    return Ok(f);
                }
                k += 1;
            }
        }
    }
}

impl LiveMeasure {
    /// The server's `/metrics` now (None where it cannot be read).
    pub fn metrics_now(&self) -> Option<crate::prom::Snapshot> {
        self.rt.block_on(async {
            crate::server::metrics(&reqwest::Client::new(), &self.opts.base_url, self.opts.api_key.as_deref())
                .await
                .ok()
        })
    }

    /// Warms the engine up at `w`'s shape: SGLang (and, less, vLLM) is slow on the first
    /// batches of a new shape. Fresh prompts, sent at once, not recorded.
    async fn warm_at_shape(&self, w: &Workload) {
        let mut wu = w.clone();
        let n = wu.max_concurrency.unwrap_or(1).max(1) as usize;
        wu.requests.truncate(n.min(wu.requests.len()));
        for (i, r) in wu.requests.iter_mut().enumerate() {
            r.output_key ^= 0x5eed;
            r.prompt[0].key ^= 0xa11ce + i as u64;
            r.arrival_ns = 0;
        }
        wu.initial_test = None;
        wu.warmups.clear();
        let run = bench::run_until(&unrecorded(&self.opts), &wu, self.stop.clone()).await;
        // The simulator runs the measured workload on an idle engine; the warm-up's last
        // response can leave a step in flight (SGLang before 0.5.22 with the overlap scheduler
        // decodes a finished request once more), and a request sent at once would wait for it.
        // Wait for that step: twice the longest TTFT or token gap the warm-up saw, 50 ms to 2 s.
        let gap = run
            .outcomes
            .iter()
            .flat_map(|o| o.itl_s.iter().copied().chain(std::iter::once(o.ttft_s)))
            .filter(|g| g.is_finite())
            .fold(0.0f64, f64::max);
        tokio::time::sleep(std::time::Duration::from_secs_f64((2.0 * gap).clamp(0.05, 2.0))).await;
    }

    /// A recorded run with a progress display.
    async fn recorded(&self, w: &Workload, jsonl: PathBuf) -> BenchRun {
        let mut o = self.opts.clone();
        o.jsonl = Some(jsonl);
        let done = self.progress.as_ref().map(|p| {
            let (tick, finish) = p(w.requests.len() as u64);
            o.on_done = Some(tick);
            finish
        });
        let run = bench::run_until(&o, w, self.stop.clone()).await;
        if let Some(f) = done {
            f();
        }
        run
    }
}

fn measurement(info: &ServerInfo, w: &Workload, run: &BenchRun, file: Option<&Path>) -> Measurement {
    Measurement {
        point: measured_point(info, w, run),
        send_s: run.outcomes.iter().map(|o| o.start_s).collect(),
        failed: run.outcomes.iter().filter(|o| o.sent && !o.success).count(),
        requests_file: file.map(|p| p.display().to_string()),
    }
}

impl Measure for LiveMeasure {
    fn info(&self) -> &ServerInfo {
        &self.info
    }

    fn measure(&mut self, w: &Workload, run: Run<'_>) -> Result<Measurement, MeasureError> {
        let io = |p: &Path, e: String| MeasureError::Io { path: p.display().to_string(), message: e };
        match run {
            Run::SpeedReference => {
                let r = self.rt.block_on(bench::run_until(&unrecorded(&self.opts), w, self.stop.clone()));
                if r.interrupted {
                    return Err(MeasureError::Interrupted);
                }
                if let Some(e) = r.initial_test_error {
                    return Err(MeasureError::InitialTestFailed(e));
                }
                Ok(measurement(&self.info, w, &r, None))
            }
            Run::Probe { name } => {
                let prefix = self.probe_prefix.get_or_insert_with(|| {
                    free_prefix(
                        &self.dir,
                        &format!("calibrate-{}", crate::manifest::stamp(crate::manifest::now_unix_s())),
                    )
                });
                let file = self.dir.join(format!("{prefix}-{name}.requests.jsonl"));
                let r = self.rt.block_on(async {
                    self.warm_at_shape(w).await;
                    self.recorded(w, file.clone()).await
                });
                if let Some(rec) = &mut self.record {
                    let sent = r.outcomes.iter().filter(|o| o.sent).count();
                    let completed = r.outcomes.iter().filter(|o| o.success).count();
                    rec.add_probe(name, &file, w, sent, completed);
                    rec.write().map_err(|e| io(&rec.path, e))?;
                }
                if r.interrupted {
                    return Err(MeasureError::Interrupted);
                }
                if let Some(e) = r.initial_test_error {
                    return Err(MeasureError::InitialTestFailed(e));
                }
                Ok(measurement(&self.info, w, &r, Some(&file)))
            }
            Run::CheckPoint { workload, prompt_salt, .. } => {
                let files = run_files(Some(&self.dir), None, "check", w, &self.opts.target.model)
                    .map_err(|e| io(&self.dir, e))?;
                let r = self.rt.block_on(async {
                    self.warm_at_shape(w).await;
                    self.recorded(w, files.requests.clone()).await
                });
                if let Some(e) = r.initial_test_error {
                    return Err(MeasureError::InitialTestFailed(e));
                }
                let m = measurement(&self.info, w, &r, Some(&files.requests));
                let record_files = crate::manifest::files(&[("requests", &files.requests)]);
                let mut rec = crate::manifest::record(
                    &self.info,
                    &self.endpoint,
                    workload,
                    w,
                    r.metrics_before.as_ref(),
                    r.metrics_after.as_ref(),
                    &record_files,
                    &m.point,
                );
                rec.setup.prompt_salt = (prompt_salt != 0).then_some(prompt_salt);
                std::fs::write(&files.record, serde_json::to_string_pretty(&rec).expect("json"))
                    .map_err(|e| io(&files.record, e.to_string()))?;
                if r.interrupted {
                    return Err(MeasureError::Interrupted);
                }
                Ok(m)
            }
        }
    }

    fn warm_up(&mut self, seconds: f64, next: &mut dyn FnMut(u64) -> Workload) -> Result<(), MeasureError> {
        let o = unrecorded(&self.opts);
        let t0 = std::time::Instant::now();
        let mut k = 0u64;
        while t0.elapsed().as_secs_f64() < seconds {
            let run = self.rt.block_on(bench::run_until(&o, &next(k), self.stop.clone()));
            k += 1;
            // Interrupted first: Ctrl-C before any request of the run finished is not a server
            // that does not answer (it was said so, exit 2, until 2026-12-06).
            if run.interrupted {
                return Err(MeasureError::Interrupted);
            }
            if run.outcomes.iter().all(|r| !r.success) {
                return Err(MeasureError::ServerNotAnswering);
            }
        }
        Ok(())
    }

    fn say(&mut self, line: &str) {
        eprintln!("{line}");
    }
}

#[cfg(test)]
mod run_file_tests {
    use super::*;

    /// A calibration's probe files begin with a prefix no earlier run in the directory used, so a
    /// second calibration there keeps the first one's files (it overwrote them until 2026-12-06).
    #[test]
    fn a_second_run_in_a_directory_gets_a_prefix_of_its_own() {
        let dir = std::env::temp_dir().join(format!("servesim-free-prefix-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let stem = "calibrate-20261206-170000";
        assert_eq!(free_prefix(&dir, stem), stem);
        std::fs::write(dir.join(format!("{stem}-prefill-16.requests.jsonl")), "").unwrap();
        assert_eq!(free_prefix(&dir, stem), format!("{stem}-2"));
        std::fs::write(dir.join(format!("{stem}-2-prefill-16.requests.jsonl")), "").unwrap();
        assert_eq!(free_prefix(&dir, stem), format!("{stem}-3"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Files are named as `vllm bench serve` names them: `{label or backend}-{rate}qps`, the rate
    /// as Python's `str(float)` writes `args.request_rate` ("4.0", "0.5", "inf"), then
    /// `-concurrency{n}` where given (it read "vllm-4qps" until 2026-12-06).
    #[test]
    fn result_files_are_named_as_vllm_bench_serve_names_them() {
        let dir = std::env::temp_dir().join(format!("servesim-run-files-{}", std::process::id()));
        let w = |rate: Option<f64>, conc: Option<u32>| Workload {
            max_concurrency: conc,
            request_rate: rate,
            ..Default::default()
        };
        for (rate, conc, label, want) in [
            (Some(4.0), None, "openai", "openai-4.0qps-model-"),
            (Some(0.5), Some(8), "openai-chat", "openai-chat-0.5qps-concurrency8-model-"),
            (None, Some(1), "mine", "mine-infqps-concurrency1-model-"),
        ] {
            let f = run_files(Some(&dir), None, label, &w(rate, conc), "org/model").unwrap();
            let name = f.result.file_name().unwrap().to_string_lossy().to_string();
            assert!(name.starts_with(want) && name.ends_with(".json"), "{name}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
