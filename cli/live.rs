//! The live commands: `servesim bench` (the load generator) and
//! `servesim diff` (two run records' setups).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use calib::measure::Point;
use calib::ServerInfo;
use clap::Args;
use live::bench::{self, BenchOptions, BenchRun};
use live::client::Target;
use live::measure::run_files;
use live::server;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{json, Value};
use sim::config::{self, Resources, WorkloadSection};
use sim::workload::{self, Workload};

use crate::bench_flags::BenchFlags;
use crate::load;

/// The workload of a live run: a scenario's, `vllm bench serve`'s flags over it
/// ([`BenchFlags`], the flags `simulate` takes), a trace and the seed.
#[derive(Args, Debug, Clone, Default)]
pub struct WorkloadArgs {
    /// Take the workload from this scenario file (flags below override its fields).
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    #[command(flatten)]
    pub bench: BenchFlags,
    /// A trace (CSV or JSONL) for `--dataset-name trace`.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    #[arg(long)]
    pub seed: Option<u64>,
}

impl WorkloadArgs {
    /// `(workload field, value)` of each flag given: the bench flags', then `--trace`'s and
    /// `--seed`'s.
    fn values(&self) -> Vec<(&'static str, Value)> {
        let mut v = self.bench.values();
        v.extend(self.trace.as_ref().map(|p| ("trace", Value::from(p.display().to_string()))));
        v.extend(self.seed.map(|s| ("seed", Value::from(s))));
        v
    }

    /// An error about a workload field a flag set names the flag first (`--max-concurrency
    /// (workload.max_concurrency): ...`): the user typed the flag, not the scenario's path.
    fn name_the_flag(&self, e: String) -> String {
        crate::bench_flags::name_flags(e, &crate::bench_flags::as_text(self.values()))
    }

    /// The `workload` section these flags describe (over the scenario's, if any), sent to
    /// `endpoint` (`--endpoint`): the section says the endpoint the requests go to, so that a
    /// prediction of it (`check`) and the run record describe what was sent.
    pub fn section_json(&self, endpoint: &str) -> Result<(Value, PathBuf), String> {
        self.section_and_client(endpoint).map(|(w, base, _, _)| (w, base))
    }

    /// [`WorkloadArgs::section_json`], and whether the modelled client times the chat role
    /// chunk as its first token (`config::client_times_role_chunk`: the scenario's release, as
    /// `simulate` of it has it; without a scenario, the current client, 0.33 and later: not).
    #[allow(clippy::type_complexity)]
    fn section_and_client(
        &self,
        endpoint: &str,
    ) -> Result<(Value, PathBuf, bool, Option<(sim::cards::ModelCard, config::EngineSpec)>), String> {
        self.bench.check()?;
        // Whether the modelled `vllm bench serve` sends ignore_eos with every random request
        // (from 0.11.1, `config::VLLM_FORCES_IGNORE_EOS_ON_RANDOM`): the scenario's vLLM release;
        // an SGLang scenario's field is as given, as `simulate` has it; without a scenario, the
        // current client.
        let (mut w, base, forces_random_eos, role_chunk, card) = match &self.scenario {
            Some(p) => {
                let raw = load::read_raw(Some(p))?;
                let mut w = raw.json.get("workload").cloned().unwrap_or_else(|| json!({}));
                // The engine is what this reads; the workload's burstiness is said once the
                // command line's flags are laid over it (below, `workload`), not here.
                let mut probe = raw.clone();
                if let Some(o) = probe.json.get_mut("workload").and_then(Value::as_object_mut) {
                    o.remove("burstiness");
                }
                let (_, spec) = load::resolve(&probe)?;
                // Unset, the initial test request follows the scenario's modelled release, as
                // `simulate` of the same scenario has it (`config::default_initial_test_request`).
                if let Some(o) = w.as_object_mut().filter(|o| !o.contains_key("initial_test_request")) {
                    o.insert("initial_test_request".into(), config::default_initial_test_request(&spec.engine).into());
                }
                // Only where the modelled client is `vllm bench serve` (`sglang.bench_serving` can
                // send ignore_eos false), as `simulate` resolves it.
                let forces = match &spec.engine {
                    config::EngineSpec::Vllm(c) => {
                        c.version >= config::VLLM_FORCES_IGNORE_EOS_ON_RANDOM
                            && spec.workload.client == sim::workload::BenchClient::VllmBenchServe
                    }
                    config::EngineSpec::Sglang(_) => false,
                };
                let card = Some((spec.model.clone(), spec.engine.clone()));
                (w, raw.base_dir, forces, config::client_times_role_chunk(&spec.engine), card)
            }
            None => (json!({"dataset_name": "random"}), std::env::current_dir().unwrap_or_default(), true, false, None),
        };
        let o = w.as_object_mut().ok_or("the scenario's workload is not an object")?;
        for (k, v) in self.values() {
            o.insert(k.into(), v);
        }
        // The live client sends `vllm bench serve`'s load (every user at once, every request
        // measured): a staggered closed loop or a measured window would be simulated and not sent,
        // and a prediction of it compared with a run without it (bench, check, calibrate alike).
        if let Some(field) = config::simulate_only_field(o) {
            return Err(format!("workload.{field}: {}", config::LIVE_REFUSES_SIMULATE_ONLY));
        }
        // `vllm bench serve` sets ignore_eos for the random dataset on OpenAI-compatible backends
        // ("when using random datasets, default to ignoring EOS so generation runs to the requested
        // length", vllm/benchmarks/serve.py, vLLM PR #28227, merged November 2025, after 0.11.0):
        // so does bench for a vLLM scenario of 0.11.1 or later (or none), unless the scenario says
        // otherwise; before 0.11.1 and for SGLang the field is as given. (vLLM's client has no way to turn it
        // off: from 0.11.1, the release that carries it, a vLLM scenario's explicit
        // `ignore_eos: false` is refused when the scenario is resolved, `sim::config::resolve`.)
        let random = o.get("dataset_name").is_none_or(|d| d == "random");
        if forces_random_eos && random && !o.contains_key("ignore_eos") {
            o.insert("ignore_eos".into(), true.into());
        }
        // Said, not left to a default: what the requests are sent with (`sglang.bench_serving`'s
        // default is true, `--disable-ignore-eos` turns it off; `vllm bench serve`'s false).
        if !o.contains_key("ignore_eos") {
            let sglang_client = o.get("client").and_then(Value::as_str) == Some("sglang_bench_serving");
            o.insert("ignore_eos".into(), sglang_client.into());
        }
        // The endpoint the requests go to is `--endpoint`'s, whatever the scenario says; a path
        // servesim does not know (a proxy's) leaves the section's as it is.
        if sim::config::priced_endpoint(endpoint) {
            if let Some(given) = o.get("endpoint").and_then(Value::as_str).filter(|g| *g != endpoint) {
                eprintln!(
                    "warning: the scenario's workload.endpoint is {given}, the requests go to --endpoint {endpoint}: \
                     the run is recorded (and predicted) with {endpoint}"
                );
            }
            o.insert("endpoint".into(), endpoint.into());
        }
        Ok((w, base, role_chunk, card))
    }

    /// Whether the modelled client asks for greedy sampling (`config::client_sends_greedy`: the
    /// scenario's release; without a scenario, the current `vllm bench serve`, which sends no
    /// temperature).
    pub fn greedy(&self) -> Result<bool, String> {
        match &self.scenario {
            Some(p) => {
                let raw = load::read_raw(Some(p))?;
                let (_, spec) = load::resolve(&raw)?;
                Ok(config::client_sends_greedy(&spec.engine))
            }
            None => Ok(false),
        }
    }

    /// The workload: the same request list the simulator generates for it, and its section as
    /// given (what the run record keeps).
    pub fn workload(&self, endpoint: &str) -> Result<(Value, Workload), String> {
        let (given, base, role_chunk, card) = self.section_and_client(endpoint)?;
        // Live, the server decides where EOS falls; the generator still wants a distribution to
        // build its request list. It is a stand-in that sizes nothing (the report's KV footprint
        // is the requested length, `live::measure::measured_point`) and stays out of the section
        // returned for the run record: simulating that section without ignore_eos is then the
        // config's clear error, not a run of 1-token outputs.
        let mut json = given.clone();
        if let Some(o) = json.as_object_mut() {
            if o.get("ignore_eos") != Some(&Value::Bool(true)) && !o.contains_key("output_len_dist") {
                o.insert("ignore_eos".into(), false.into());
                o.insert("output_len_dist".into(), json!({"kind": "uniform", "min": 1, "max": 1}));
            }
        }
        let section: WorkloadSection =
            config::from_value(json, "workload").map_err(|e| self.name_the_flag(e.to_string()))?;
        let mut res = Resources::default();
        load::warn_burstiness_without_rate("the workload", &section);
        // As simulate says it (`load::resolve`): a trace times its own requests.
        if section.trace.is_some() && section.request_rate.is_some_and(|r| r.0.is_some()) {
            crate::load::warn_once(
                "--request-rate (workload.request_rate) is ignored: the trace's arrival times say when requests are sent".into(),
            );
        }
        if let Some(t) = &section.trace {
            let p = if Path::new(t).is_absolute() { PathBuf::from(t) } else { base.join(t) };
            let p = if p.exists() { p } else { PathBuf::from(t) };
            // The trace is read in its `trace_format`, as `simulate` reads it (`load::resolve`).
            use sim::config::TraceFileFormat as F;
            match section.trace_format {
                Some(f @ (F::Mooncake | F::Azure | F::Burstgpt)) => {
                    let reqs = load::load_production_trace(&p, f, &section).map_err(|e| {
                        if e.starts_with("workload.") {
                            e
                        } else {
                            format!("workload.trace: {e}")
                        }
                    })?;
                    res.trace_requests = Some(std::sync::Arc::new(reqs));
                }
                _ => {
                    for (set, field) in [
                        (section.trace_time_scale.is_some(), "trace_time_scale"),
                        (section.trace_rate.is_some(), "trace_rate"),
                    ] {
                        if set {
                            return Err(format!(
                                "workload.{field}: bench does not rescale servesim's own trace rows; give the arrival times you want in the trace"
                            ));
                        }
                    }
                    res.trace = Some(load::load_trace(&p, section.trace_format).map_err(|e| format!("--trace: {e}"))?);
                }
            }
        }
        let mut params = config::resolve_workload(&section, &res).map_err(|e| self.name_the_flag(e.to_string()))?;
        // The chat role chunk, timed as the modelled client times it (`section_and_client`).
        params.role_chunk = params.chat && role_chunk;
        // The BOS the server's tokenizer adds to a text prompt and how the modelled client counts
        // it, from the scenario's card and release, as `simulate` resolves them (the prompts are
        // then drawn around the length less it, and it is not sent: the server adds it). Without
        // a scenario no card says it: none, and what is sent is counted.
        if let Some((model, engine)) = &card {
            params.special_tokens = config::prompt_special_tokens(model, &params);
            params.counts_server_prompt_tokens = config::client_counts_server_prompt_tokens(engine);
        }
        Ok((given, workload::generate(&params)))
    }
}

/// How to reach the server.
#[derive(Args, Debug, Clone)]
pub struct ServerArgs {
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub base_url: String,
    #[arg(long, default_value = "/v1/completions")]
    pub endpoint: String,
    /// The served model name (default: the first of `/v1/models`).
    #[arg(long)]
    pub model: Option<String>,
    /// tokenizer.json (or a folder holding one): the vocabulary prompts are drawn from.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Vocabulary size when no tokenizer is found.
    #[arg(long)]
    pub vocab_size: Option<u32>,
    /// Bearer token; also read from OPENAI_API_KEY. Never written anywhere.
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Per-request time limit, seconds (vllm bench serve's client allows 6 hours:
    /// `aiohttp.ClientTimeout(total=6 * 60 * 60)`; a shorter limit would count a saturated
    /// run's slowest requests as failed where vLLM's client waits for them).
    #[arg(long, default_value_t = 21600.0)]
    pub request_timeout: f64,
}

/// Probes the server and prepares the options of a run.
pub async fn connect(s: &ServerArgs) -> Result<(ServerInfo, BenchOptions), String> {
    // A limit of 0 (or less) would fail every request as a timeout: bad input, said so.
    // At most a year, the bound of the other times (a larger one overflowed the timer: a panic).
    if !(s.request_timeout.is_finite() && s.request_timeout >= 0.001 && s.request_timeout <= 31_536_000.0) {
        return Err(format!(
            "--request-timeout: expected a number of seconds from 0.001 to 31536000 (a year), got {}",
            s.request_timeout
        ));
    }
    if !(s.base_url.starts_with("http://") || s.base_url.starts_with("https://")) {
        return Err(format!("--base-url: expected a URL starting with http:// or https://, got {:?}", s.base_url));
    }
    if !s.endpoint.starts_with('/') {
        return Err(format!(
            "--endpoint: expected a path starting with / (e.g. /v1/completions), got {:?}",
            s.endpoint
        ));
    }
    let client = reqwest::Client::new();
    let info =
        server::probe(&client, &s.base_url, s.api_key.as_deref()).await.map_err(|e| format!("--base-url: {e}"))?;
    let model = s.model.clone().or(info.model.clone()).ok_or("--model: the server lists no model; name one")?;
    let (vocab, reserved) = match (&s.tokenizer, &info.model_root) {
        (Some(t), _) => live::tokenizer::vocab_of(t).map_err(|e| format!("--tokenizer: {e}"))?,
        (None, Some(root)) if Path::new(root).join("tokenizer.json").exists() => {
            live::tokenizer::vocab_of(Path::new(root))?
        }
        _ => {
            let vocab = s.vocab_size.unwrap_or(32000);
            // Ids below 256 are left out (special and byte tokens): a vocabulary of 256 or fewer
            // would make every prompt the same id over and over, all of them one prefix-cache hit.
            if vocab <= 257 {
                return Err(format!(
                    "--vocab-size: expected more than 257 (prompts draw token ids from 256 up to the vocabulary size), got {vocab}"
                ));
            }
            (vocab, 256)
        }
    };
    // The chat endpoint takes text: prompts are built with the server's tokenizer.
    let chat_tokenizer = if s.endpoint.contains("chat") {
        let path = match (&s.tokenizer, &info.model_root) {
            (Some(t), _) => t.clone(),
            (None, Some(root)) if Path::new(root).join("tokenizer.json").exists() => PathBuf::from(root),
            _ => {
                return Err(
                    "--endpoint /v1/chat/completions sends text: give the server's tokenizer with --tokenizer".into()
                )
            }
        };
        Some(std::sync::Arc::new(live::tokenizer::load(&path).map_err(|e| format!("--tokenizer {e}"))?))
    } else {
        None
    };
    let opts = BenchOptions {
        base_url: s.base_url.clone(),
        target: Target {
            url: format!("{}{}", s.base_url.trim_end_matches('/'), s.endpoint),
            model,
            api_key: s.api_key.clone(),
            timeout: Duration::from_secs_f64(s.request_timeout),
        },
        api_key: s.api_key.clone(),
        vocab_size: vocab,
        reserved_ids: reserved,
        jsonl: None,
        poll_interval: Some(Duration::from_millis(500)),
        kind: info.kind,
        kv_capacity_tokens: info.kv_capacity_tokens,
        verbose: false,
        on_done: None,
        chat_tokenizer,
        // calibrate's probes and check's runs ask for greedy sampling (their outputs are
        // ignore_eos or the scenario's); bench follows the modelled client (`WorkloadArgs::greedy`).
        greedy: true,
    };
    Ok((info, opts))
}

/// The report of a measured run, with the same keys as a simulated one.
pub fn measured_point(info: &ServerInfo, w: &Workload, run: &BenchRun) -> Point {
    live::measure::measured_point(info, w, run)
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[arg(long, default_value = "ttft,tpot,itl")]
    pub percentile_metrics: String,
    #[arg(long, default_value = "99")]
    pub metric_percentiles: String,
    /// Write the `--save-result` JSON (and the run record beside it).
    #[arg(long)]
    pub save_result: bool,
    #[arg(long)]
    pub result_dir: Option<PathBuf>,
    #[arg(long)]
    pub result_filename: Option<String>,
    #[arg(long)]
    pub label: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The async runtime of the live commands: one thread, so the client stays light, and a FIFO
/// run queue, as `vllm bench serve`'s asyncio loop has: requests given their turn together are
/// sent in list order (a multi-threaded runtime runs the task woken last first).
pub fn rt() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

/// The `vllm bench serve --save-result` file of a measured run: who ran what, the run's
/// report, and the per-request detail lists.
pub struct SaveResult<'a> {
    pub date: String,
    /// `vllm bench serve --backend` as the run used it: `openai` (completions) or `openai-chat`;
    /// vLLM writes it as `endpoint_type` and `backend` both.
    pub backend: &'static str,
    /// `--label` as given (`null` without: vLLM writes `args.label`).
    pub label: Option<&'a str>,
    /// The served model's name (`model_id` and `tokenizer_id`); the report's own
    /// `model_id` is not repeated.
    pub model: &'a str,
    pub point: &'a Point,
    pub w: &'a Workload,
    pub run: &'a BenchRun,
}

/// Keys as `vllm bench serve` writes them: `date` … `tokenizer_id`, the report's keys
/// (less `model_id`, given above), then `input_lens` … `errors`.
impl Serialize for SaveResult<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("date", &self.date)?;
        m.serialize_entry("endpoint_type", self.backend)?;
        m.serialize_entry("backend", self.backend)?;
        m.serialize_entry("label", &self.label)?;
        m.serialize_entry("model_id", self.model)?;
        m.serialize_entry("tokenizer_id", self.model)?;
        let r = &self.point.report;
        m.serialize_entry("engine", &r.engine)?;
        m.serialize_entry("engine_version", &r.engine_version)?;
        m.serialize_entry("hardware", &r.hardware)?;
        // With the percentiles asked for beyond the report's own (`--metric-percentiles`).
        r.write_run_entries(&mut m, &|k| r.num(k))?;
        if let Some(c) = &self.point.client_cpu {
            m.serialize_entry("client_cpu_s", &c.seconds)?;
            m.serialize_entry("client_cpu_fraction", &c.fraction)?;
        }
        let o = &self.run.outcomes;
        m.serialize_entry("input_lens", &self.w.requests.iter().map(|r| r.prompt_len).collect::<Vec<_>>())?;
        m.serialize_entry("output_lens", &o.iter().map(|o| o.output_tokens).collect::<Vec<_>>())?;
        m.serialize_entry("ttfts", &o.iter().map(|o| o.ttft_s).collect::<Vec<_>>())?;
        m.serialize_entry("itls", &o.iter().map(|o| &o.itl_s).collect::<Vec<_>>())?;
        m.serialize_entry("start_times", &o.iter().map(|o| o.start_s).collect::<Vec<_>>())?;
        m.serialize_entry("generated_texts", &o.iter().map(|o| o.generated_text.as_str()).collect::<Vec<_>>())?;
        // `vllm bench serve`'s lists read an empty error as a success: a request an interruption
        // kept from being sent says so (its zero TTFT and start time were counted as a success's
        // by anyone recomputing the statistics from the lists).
        m.serialize_entry(
            "errors",
            &o.iter()
                .map(|o| match &o.error {
                    Some(e) => e.to_string(),
                    None if !o.sent => "not sent: the run was interrupted first".to_string(),
                    None => String::new(),
                })
                .collect::<Vec<_>>(),
        )?;
        m.end()
    }
}

pub fn bench(a: BenchArgs) -> Result<ExitCode, String> {
    let mut text_opts = crate::text_options(&a.metric_percentiles, &a.percentile_metrics)?;
    text_opts.goodput = a.workload.bench.goodput_slos()?;
    let (mut wl_json, mut w) = a.workload.workload(&a.server.endpoint)?;
    let rt = rt()?;
    rt.block_on(async {
        let (info, mut opts) = connect(&a.server).await?;
        // As calibrate and check say it: a time-scaled emulator is a k× faster engine.
        if let Some(k) = info.servesim_time_scale.filter(|k| *k != 1.0) {
            eprintln!(
                "warning: the server at {} is servesim serve at --time-scale {k}: its timings are the emulated engine's divided by {k}, and so is every time and throughput this run measures; use --time-scale 1 for the engine itself",
                info.base_url
            );
        }
        // Without a scenario, the initial test request follows the server's release, as a
        // scenario's follows its modelled one (`config::default_initial_test_request`): vLLM's
        // benchmark skips it from 0.14.
        let skips = info.kind == Some(sim::config::EngineKind::Vllm)
            && info
                .version
                .as_deref()
                .and_then(sim::engine::Version::parse)
                .is_some_and(|v| v >= sim::config::VLLM_SKIPS_INITIAL_TEST);
        if a.workload.scenario.is_none() && !a.workload.bench.no_initial_test && skips {
            let mut args = a.workload.clone();
            args.bench.no_initial_test = true;
            (wl_json, w) = args.workload(&a.server.endpoint)?;
        }
        opts.verbose = !a.json;
        opts.greedy = a.workload.greedy()?;
        // `vllm bench serve` names the file after `--label`, else after `--backend` (`openai`,
        // or `openai-chat` on the chat endpoint: `compute_result_filename`, read in the 0.11.0 and
        // 0.32.0 wheels); the file's `label` is `--label` as given.
        let backend = if w.chat { "openai-chat" } else { "openai" };
        let label = a.label.clone().unwrap_or_else(|| backend.to_string());
        let files = run_files(a.result_dir.as_deref(), a.result_filename.as_deref(), &label, &w, &opts.target.model)?;
        // Per-request results are always kept, as they complete.
        opts.jsonl = Some(files.requests.clone());
        let pb = crate::plot::progress(w.requests.len() as u64, "requests");
        let pb2 = pb.clone();
        opts.on_done = Some(bench::OnDone(std::sync::Arc::new(move || pb2.inc(1))));
        let run = bench::run(&opts, &w).await;
        pb.finish_and_clear();
        // `vllm bench serve` stops when its initial test request fails: the arguments (a model
        // name, an endpoint) are wrong, and nothing else is sent.
        if let Some(e) = &run.initial_test_error {
            eprintln!(
                "error: Initial test run failed - please make sure the benchmark arguments are correctly specified: {e}"
            );
            return Ok(ExitCode::from(1));
        }
        let mut point = measured_point(&info, &w, &run);
        sim::report::with_percentiles(&mut point.report, &run.result, &text_opts.percentiles);
        // `--goodput`, from the run's own requests as the client timed them (`null` without).
        if let Some(g) = &text_opts.goodput {
            sim::report::with_goodput(&mut point.report, &run.result, g);
        }
        // The text shows the run as the client measured it (before a failure's reason below).
        let mut text = sim::report::text_report(&point.report, &text_opts, "measured");
        // The engine's gauges are sampled, not traced: a peak between two polls is missed.
        if point.report.peak_running.is_some() {
            text.push_str(&format!(
                "Note: running and waiting requests and KV cache usage are the server's /metrics gauges polled every {} ms: their means and peaks are of the polls (a run shorter than a poll, or a peak between two, is missed); simulate's are exact.\n",
                opts.poll_interval.map_or(0, |d| d.as_millis())
            ));
        }
        // Nothing succeeded: say why (the most common failure), in the JSON too, and exit 1.
        let nothing = nothing_succeeded(&run).or_else(|| some_failed(&run));
        if let Some(why) = &nothing {
            point.report.stop_reason = format!("failed: {why}");
        }
        if a.save_result {
            let result = SaveResult {
                // The file name's stamp: one clock for both, as in vLLM (the audit found them a
                // second or more apart). vLLM stamps after the run; the per-request lines are
                // written as requests complete, so the name, and with it the date, is taken before.
                date: files.stamp.clone(),
                backend,
                label: a.label.as_deref(),
                model: &opts.target.model,
                point: &point,
                w: &w,
                run: &run,
            };
            std::fs::write(&files.result, serde_json::to_string_pretty(&result).expect("json"))
                .map_err(|e| format!("{}: {e}", files.result.display()))?;
            let f = live::manifest::files(&[("result", &files.result), ("requests", &files.requests)]);
            let rec = live::manifest::record(
                &info,
                &a.server.endpoint,
                &wl_json,
                &w,
                run.metrics_before.as_ref(),
                run.metrics_after.as_ref(),
                &f,
                &point,
            );
            std::fs::write(&files.record, serde_json::to_string_pretty(&rec).expect("json"))
                .map_err(|e| format!("{}: {e}", files.record.display()))?;
        }
        if a.json {
            println!("{}", serde_json::to_string_pretty(&point).expect("json"));
        } else {
            print!("{text}");
            println!("{:<40} {:<10.2}", "Client CPU time (s):", run.client_cpu_s);
            if run.client_cpu_s > 0.5 * run.wall_s {
                println!(
                    "WARNING: the client used {:.0}% of a core: it may be the bottleneck.",
                    100.0 * run.client_cpu_s / run.wall_s
                );
            }
            println!("Per-request results: {}", files.requests.display());
            if a.save_result {
                println!("Result: {}  Run record: {}", files.result.display(), files.record.display());
            }
        }
        if let Some(why) = &nothing {
            eprintln!("error: {why}");
        }
        Ok(if run.interrupted {
            ExitCode::from(130)
        } else if nothing.is_some() {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        })
    })
}

/// When no sent request succeeded, why: how many failed and the most common reason.
pub fn nothing_succeeded(run: &BenchRun) -> Option<String> {
    let sent: Vec<&live::client::Outcome> = run.outcomes.iter().filter(|o| o.sent).collect();
    if sent.iter().any(|o| o.success) || (sent.is_empty() && run.interrupted) {
        return None;
    }
    if sent.is_empty() {
        return Some("no request was sent".into());
    }
    Some(format!("no request succeeded: all {} sent failed; {}", sent.len(), most_common_failure(&sent)))
}

/// "the most common reason (n×): …" among the failed of `outcomes`.
fn most_common_failure(outcomes: &[&live::client::Outcome]) -> String {
    let mut counts: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for o in outcomes.iter().filter(|o| !o.success) {
        *counts.entry(o.error.as_ref().map_or_else(|| "unknown".into(), ToString::to_string)).or_default() += 1;
    }
    let Some((reason, n)) = counts.iter().max_by_key(|(_, n)| **n) else { return String::new() };
    let others = if counts.len() > 1 { format!(" ({} other reasons)", counts.len() - 1) } else { String::new() };
    format!("the most common reason ({n}×): {reason}{others}")
}

/// When some sent requests failed and some succeeded (an uninterrupted run), why: the metrics
/// cover only those that completed, under a load that was not the one set.
pub fn some_failed(run: &BenchRun) -> Option<String> {
    if run.interrupted {
        return None;
    }
    let sent: Vec<&live::client::Outcome> = run.outcomes.iter().filter(|o| o.sent).collect();
    let failed = sent.iter().filter(|o| !o.success).count();
    if failed == 0 || failed == sent.len() {
        return None;
    }
    Some(format!(
        "{failed} of {} requests failed: the metrics cover the {} that completed, under a load that was not the one set; {}",
        sent.len(),
        sent.len() - failed,
        most_common_failure(&sent)
    ))
}

/// For a file that is not a run record but a `bench --save-result` result (JSON with no
/// `format`), where its record is: `<name>.record.json` beside `<name>.json`.
fn record_hint(p: &Path, text: &str) -> String {
    let Ok(Value::Object(m)) = serde_json::from_str::<Value>(text) else { return String::new() };
    if m.contains_key("format") {
        return String::new();
    }
    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let base = name.strip_suffix(".json").unwrap_or(&name);
    let record = p.with_file_name(format!("{base}.record.json"));
    let there = if record.exists() { "" } else { " (not found there)" };
    format!(
        "; if it is a `bench --save-result` result, give the run record written beside it instead: {}{there}",
        record.display()
    )
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// Two run records (`*.record.json`, written by `bench --save-result`, `check` and `calibrate`).
    pub run_a: PathBuf,
    pub run_b: PathBuf,
}

pub fn diff(a: DiffArgs) -> Result<ExitCode, String> {
    let read = |p: &Path| -> Result<Value, String> {
        let t = std::fs::read_to_string(p).map_err(|e| format!("{}: cannot read: {e}", p.display()))?;
        // JSON with no key given twice (JSON keeps the last, silently), and a run record.
        live::manifest::read_record(&t).map_err(|e| format!("{}: {e}{}", p.display(), record_hint(p, &t)))
    };
    let (x, y) = (read(&a.run_a)?, read(&a.run_b)?);
    let d = live::manifest::diff(&x, &y).map_err(|e| format!("{} / {}: {e}", a.run_a.display(), a.run_b.display()))?;
    if d.is_empty() {
        println!("The two runs have the same setup.");
    } else {
        let fields = if d.len() == 1 { "setup field differs" } else { "setup fields differ" };
        println!("{} {fields} between {} (A) and {} (B):", d.len(), a.run_a.display(), a.run_b.display());
        for (k, va, vb) in &d {
            println!("  {k}: A = {va}, B = {vb}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
