//! Workloads as `vllm bench serve` makes them (`benchmarks/datasets.py`,
//! `benchmarks/serve.py:get_request`), from named random streams.
//!
//! * `random`: input lengths uniform in `[⌊L(1−r)⌋, ⌈L(1+r)⌉]`, outputs in
//!   `[max(1, ⌊O(1−r)⌋), ⌈O(1+r)⌉]`, every prompt distinct, optionally after
//!   one shared random prefix of `random_prefix_len` tokens.
//! * `prefix_repetition`: `num_prefixes` random prefixes, each followed by
//!   `num_prompts / num_prefixes` distinct suffixes, the list shuffled.
//! * `trace`: rows of (arrival time, input length, output length, optional
//!   prefix group and length) replayed as given.
//!
//! Arrivals: an infinite rate sends everything at t = 0; a finite rate follows the
//! modelled client ([`BenchClient`], `workload.client`). `vllm bench serve` (the
//! default) draws gamma intervals (shape `burstiness`, scale `1/(rate·burstiness)`;
//! 1 is Poisson), sums them, and rescales so the last request goes at exactly
//! `N/rate` ([`arrival_offsets`]); `sglang.bench_serving` sends the first request
//! at 0 and each next one an unscaled exponential gap of mean `1/rate` after the
//! last ([`sglang_arrival_offsets`]). Both draw from the `arrivals` stream: the
//! same distribution as the clients' numpy draws, never numpy's values.
//! `max_concurrency` is applied by the client loop.
//!
//! Before the benchmark, `vllm bench serve` sends one initial test request
//! built from the first prompt, and `num_warmups` warm-up requests (the same
//! prompt again). With prefix caching on they leave that prompt cached, which
//! is why a first timed request at concurrency 1 can be a cache hit.
//!
//! `prior_run_prompts` replays an earlier run on the same server: the run's
//! own first N prompts (the same contents, fresh outputs) are sent in the
//! warm-up phase (all at once, under `max_concurrency`, unmeasured), so they
//! are in the prefix cache when the timed phase starts, as on a server that
//! a sweep reused its prompts against: `evalscope perf --parallel 5 10 20 …`
//! takes every level's prompts from the start of one list, and `vllm bench
//! serve` with the same dataset, seed and prompt count sends the same prompts
//! at every rate. What the earlier run left in the caches is modelled, not its
//! timing. `prior_run_prefixes` does the same for an earlier run whose prompts
//! were only the starts of this run's (a trace's `prefix_group`/`prefix_len`):
//! `sglang.bench_serving --dataset-name random` cuts prompt i from the same
//! text at every `--random-input-len`, so a run at 8000 begins its prompts
//! with a run at 1000's. Each of the first N rows' prefix is sent alone (one
//! output token), before the prior run's prompts.
//!
//! The BOS a model's tokenizer puts before a text prompt (`WorkloadParams::special_tokens`, from
//! the card's `add_bos_token`): `random` draws around `random_input_len` less it
//! (`num_special_tokens_to_add`), and every `random` and `prefix_repetition` prompt begins with
//! one shared BOS segment, which the server prefills; `vllm bench serve` before 0.20 leaves it
//! out of `total_input_tokens` (`Workload::uncounted_prompt_tokens`).
//!
//! Not modelled: the decode/re-encode round trip that changes prompt lengths by a token or
//! two, ShareGPT and other text datasets (replay them as traces), `vllm bench
//! serve`'s rate ramp-up (`--ramp-up-strategy`).
//!
//! Not `vllm bench serve`'s, a steady-state client's: `concurrency_ramp_ns`
//! starts a closed loop's users one after another (the client loop applies
//! it), and `measure_window_ns` measures only the requests completed in a
//! window (`crate::metrics`).

use rand::seq::SliceRandom;
use rand::Rng as _;
use rand_distr::{Distribution, Exp, Gamma, Geometric};

use crate::request::{RequestSpec, Segment};
use crate::rng::{mix64, stream, Rng};

/// One row of a replayed trace.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceRow {
    /// Seconds from the start of the trace.
    pub arrival_time: f64,
    pub input_len: u32,
    pub output_len: u32,
    /// Requests of one group share their first `prefix_len` prompt tokens.
    #[serde(default)]
    pub prefix_group: Option<u64>,
    #[serde(default)]
    pub prefix_len: Option<u32>,
    #[serde(default)]
    pub priority: Option<i32>,
}

impl TraceRow {
    /// The row's own values: lengths of at least 1, a finite arrival from 0, a shared prefix
    /// within the prompt. `Err((field, message))`, the field empty for the row as a whole; the
    /// caller says where the row is (a file's line, or the trace's index).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.input_len == 0 || self.output_len == 0 {
            return Err(("", "input_len and output_len must be at least 1".into()));
        }
        if !(self.arrival_time.is_finite() && self.arrival_time >= 0.0) {
            return Err(("arrival_time", format!("must be a time in seconds from 0, got {}", self.arrival_time)));
        }
        // A shared prefix is a group and a length together: one without the other would be
        // dropped without a word (the row read as all unique prompt).
        match (self.prefix_group, self.prefix_len) {
            (Some(g), None) => {
                return Err((
                    "prefix_len",
                    format!("missing: prefix_group {g} needs the length of the prefix it shares"),
                ))
            }
            (None, Some(p)) if p > 0 => {
                return Err(("prefix_group", format!("missing: prefix_len {p} needs the group whose prefix it shares")))
            }
            _ => {}
        }
        if let (Some(p), true) = (self.prefix_len, self.prefix_group.is_some()) {
            if p > self.input_len {
                return Err(("prefix_len", format!("{p} is longer than the prompt (input_len {})", self.input_len)));
            }
        }
        Ok(())
    }

    /// Whether the row's prompt begins with a shared prefix: a group and a length above 0.
    pub fn has_shared_prefix(&self) -> bool {
        self.prefix_group.is_some() && self.prefix_len.is_some_and(|p| p > 0)
    }
}

/// The dataset, resolved.
#[derive(Clone, Debug, PartialEq)]
pub enum Dataset {
    Random {
        input_len: u32,
        output_len: u32,
        range_ratio: f64,
        prefix_len: u32,
    },
    PrefixRepetition {
        prefix_len: u32,
        suffix_len: u32,
        num_prefixes: u32,
        output_len: u32,
    },
    Trace {
        rows: Vec<TraceRow>,
    },
    /// A production trace (Mooncake, Azure, BurstGPT; [`crate::traces`]) as requests:
    /// arrivals in ns from the first row, prompts as keyed segments (Mooncake's hash ids
    /// are shared 512-token segments, so prefix caches and prefix-aware routers see the
    /// trace's real sharing).
    Requests {
        requests: std::sync::Arc<Vec<crate::traces::TraceRequest>>,
    },
}

impl Dataset {
    /// A trace (servesim's rows or a production trace's requests): its own arrival times say
    /// when requests are sent, and a request rate does not apply.
    pub fn is_trace(&self) -> bool {
        matches!(self, Dataset::Trace { .. } | Dataset::Requests { .. })
    }
}

/// Where output lengths end when `ignore_eos` is false.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum OutputLenDist {
    /// EOS after a geometric number of tokens with this mean (≥ 1).
    Geometric { mean: f64 },
    /// EOS after a uniform number of tokens in `[min, max]`.
    Uniform { min: u32, max: u32 },
}

/// The benchmark client a scenario models (`workload.client`): whose rule its send times
/// follow at a finite rate (docs/benchmark.md §1.1, §2). Not read from the engine: a client
/// measures any server, and a run of `vllm bench serve` against SGLang keeps vLLM's rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BenchClient {
    /// `vllm bench serve` (`benchmarks/serve.py:get_request`, every release from 0.10.0, so all
    /// of 0.11–0.34): gamma gaps summed and rescaled so the last request is due at `N/rate`
    /// ([`arrival_offsets`]).
    #[default]
    VllmBenchServe,
    /// `python -m sglang.bench_serving` (`get_request`, 0.4.10–0.5.23): the first request at
    /// once, then one exponential gap of mean `1/rate` after each, never rescaled; no
    /// burstiness ([`sglang_arrival_offsets`]).
    SglangBenchServing,
}

impl BenchClient {
    /// The client's name as a scenario spells it.
    pub fn name(self) -> &'static str {
        match self {
            BenchClient::VllmBenchServe => "vllm_bench_serve",
            BenchClient::SglangBenchServing => "sglang_bench_serving",
        }
    }

    /// Send-time offsets of `n` requests at `rate` (`None`: infinite) under this client's rule.
    pub fn arrival_offsets(self, n: usize, rate: Option<f64>, burstiness: f64, seed: u64) -> Vec<u64> {
        match self {
            BenchClient::VllmBenchServe => arrival_offsets(n, rate, burstiness, seed),
            BenchClient::SglangBenchServing => sglang_arrival_offsets(n, rate, seed),
        }
    }
}

/// Everything the generator needs.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadParams {
    pub dataset: Dataset,
    pub num_prompts: u32,
    pub num_warmups: u32,
    /// The run's first N prompts, sent again in the warm-up phase before the timed one (an
    /// earlier run on the same server that used the same prompts; see the module docs).
    pub prior_run_prompts: u32,
    /// The shared prefixes (`prefix_group`, `prefix_len`) of the trace's first N rows, each sent
    /// alone (one output token) in the warm-up phase, before the prior run's prompts: an earlier
    /// run on the same server whose prompts were the starts of this run's (see the module docs).
    pub prior_run_prefixes: u32,
    /// None = infinite.
    pub request_rate: Option<f64>,
    pub burstiness: f64,
    /// Whose rule the send times at a finite rate follow ([`BenchClient`]).
    pub client: BenchClient,
    pub max_concurrency: Option<u32>,
    /// The closed loop's users start one after another over this long ([`Workload::concurrency_ramp_ns`]).
    pub concurrency_ramp_ns: u64,
    /// The measured window ([`Workload::measure_window_ns`]).
    pub measure_window_ns: Option<(u64, u64)>,
    pub ignore_eos: bool,
    pub output_len_dist: Option<OutputLenDist>,
    pub initial_test_request: bool,
    pub seed: u64,
    /// Sent to the chat endpoint (`/v1/chat/completions`), not `/v1/completions`.
    pub chat: bool,
    /// The benchmark client times the chat stream's opening role chunk (`delta: {"role":
    /// "assistant", "content": ""}`, which vLLM and SGLang send just before the first token's
    /// chunk) as a token: TTFT at it, and one near-zero ITL per request. `vllm bench serve`
    /// 0.11–0.32 does; 0.33's `_choice_has_streamed_output` and `sglang.bench_serving` skip it.
    /// Set by the scenario's resolution ([`crate::config::client_times_role_chunk`]).
    pub role_chunk: bool,
    /// The client receives no chunk it times for the step that produced an output's EOS token:
    /// SGLang's chat stream writes no content chunk for it, and the modelled client times only
    /// chunks with output. A request sent without `ignore_eos` whose output ends at EOS
    /// (`output_len < max_tokens`) then ends, for the client, at its last token before EOS
    /// ([`crate::simulation::RequestRecord::eos_unstreamed`]). Set by the scenario's resolution
    /// ([`crate::config::client_misses_eos_step`]).
    pub eos_unstreamed: bool,
    /// Prompts are sent as token ids (`workload.tokenize_prompt`): the server does not tokenize
    /// them, so SGLang's serial tokenizer is skipped.
    pub tokenize_prompt: bool,
    /// Tokens the server's tokenizer puts before a text prompt: the model's BOS
    /// (`ModelCard::add_bos_token`), 0 for prompts sent as token ids. Every `random` and
    /// `prefix_repetition` prompt begins with them (one [`crate::request::BOS_KEY`] segment, the
    /// same token in every prompt), and `random` draws its sampled part around
    /// `random_input_len` less them, as `vllm bench serve` does (`RandomDataset`:
    /// `real_input_len = input_len - tokenizer.num_special_tokens_to_add()`, 0.11.0 to 0.34.0),
    /// so that the server prefills about `random_input_len`; `prefix_repetition` subtracts
    /// nothing, and the server prefills `prefix_len + suffix_len` and them. A trace's
    /// `input_len` is already the server's count (ShareGPT's `prompt_len` is the tokenizer's,
    /// BOS included): nothing is added. Set by the scenario's resolution
    /// ([`crate::config::prompt_special_tokens`]).
    pub special_tokens: u32,
    /// The modelled client's `total_input_tokens` counts each prompt as the server's usage does
    /// (`usage.prompt_tokens`, the BOS included: `vllm bench serve` from 0.20), not as its
    /// dataset made it (before 0.20: `random` and `prefix_repetition` without `special_tokens`).
    /// Set by the scenario's resolution ([`crate::config::client_counts_server_prompt_tokens`]).
    pub counts_server_prompt_tokens: bool,
    /// The context a request's output is shortened to fit: vLLM from 0.32 caps `max_tokens` at
    /// `max_model_len − prompt` (`get_max_tokens`, where through 0.31 the server answers 400: see
    /// [`crate::config::VLLM_CLAMPS_MAX_TOKENS`]). Set by the scenario's resolution; `None` keeps
    /// every request as asked (a request past the context is then refused before the run).
    pub context_clamp: Option<u32>,
}

/// The generated workload: three phases, run one after the other.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub initial_test: Option<RequestSpec>,
    pub warmups: Vec<RequestSpec>,
    pub requests: Vec<RequestSpec>,
    pub max_concurrency: Option<u32>,
    /// A closed loop (`max_concurrency` users, an infinite rate) whose users start one after
    /// another: user k at `k · ramp / max_concurrency` from the timed phase's start, each then
    /// sending its next request when its last ends. 0: every user at once. The client loop
    /// applies it as a concurrency cap that rises by one at each user's start
    /// (`crate::simulation`), the same load as users that each send their own next request.
    pub concurrency_ramp_ns: u64,
    /// `(start, end)` from the timed phase's start: the metrics cover the timed requests whose
    /// last token arrives in `[start, end]`, and the throughputs divide by `end − start`
    /// (`crate::metrics::bench_metrics`). `None`: the whole timed phase, as `vllm bench serve`.
    pub measure_window_ns: Option<(u64, u64)>,
    pub request_rate: Option<f64>,
    pub burstiness: f64,
    /// The arrivals are a trace's timestamps (`request_rate` and `burstiness` do not apply).
    pub trace_arrivals: bool,
    pub seed: u64,
    /// Sent to the chat endpoint ([`WorkloadParams::chat`]).
    pub chat: bool,
    /// The client times the chat role chunk ([`WorkloadParams::role_chunk`]).
    pub role_chunk: bool,
    /// The client sees no chunk for an EOS step ([`WorkloadParams::eos_unstreamed`]).
    pub eos_unstreamed: bool,
    /// Prompts sent as token ids ([`WorkloadParams::tokenize_prompt`]).
    pub tokenize_prompt: bool,
    /// The `--num-prompts` asked for, where the dataset made fewer requests: `prefix_repetition`
    /// makes `num_prompts ÷ num_prefixes` (rounded down) a prefix, and `vllm bench serve` reports
    /// the number asked (`result_json["num_prompts"] = args.num_prompts`), not the number sent.
    /// `None`: the report's `num_prompts` is the requests' count.
    pub requested_prompts: Option<u32>,
    /// Timed requests whose `max_tokens` [`WorkloadParams::context_clamp`] shortened.
    pub clamped_requests: u32,
    /// Tokens of every timed prompt that the client's `total_input_tokens` leaves out: the BOS
    /// of a `random` or `prefix_repetition` prompt where the client counts its dataset's lengths
    /// ([`WorkloadParams::counts_server_prompt_tokens`] false; `vllm bench serve` before 0.20).
    /// The engine prefills them all the same.
    pub uncounted_prompt_tokens: u32,
}

/// No request, sent at once with no concurrency limit (`vllm bench serve`'s `--request-rate inf`,
/// burstiness 1), seed 0, the completions endpoint: a base for a workload built by hand
/// (`Workload { requests, ..Default::default() }`).
impl Default for Workload {
    fn default() -> Workload {
        Workload {
            initial_test: None,
            warmups: Vec::new(),
            requests: Vec::new(),
            max_concurrency: None,
            concurrency_ramp_ns: 0,
            measure_window_ns: None,
            request_rate: None,
            burstiness: 1.0,
            trace_arrivals: false,
            seed: 0,
            chat: false,
            role_chunk: false,
            eos_unstreamed: false,
            tokenize_prompt: false,
            requested_prompts: None,
            clamped_requests: 0,
            uncounted_prompt_tokens: 0,
        }
    }
}

/// The most prompt-block hashes [`Workload::share_prompt_hashes`] keeps (64 MiB).
pub const MAX_SHARED_PROMPT_HASHES: usize = 1 << 23;

impl Workload {
    /// Memoises every request's prompt-block hashes at `block_size`
    /// ([`crate::request::PromptBlockHashes`]) so that runs sharing this workload hash each
    /// prompt once, not once per run. Results are unchanged (the memo holds the values the
    /// engine would compute). Does nothing if the memo would pass
    /// [`MAX_SHARED_PROMPT_HASHES`], or if it is already there at that block size.
    pub fn share_prompt_hashes(&mut self, block_size: u32) {
        let block_size = block_size.max(1);
        let all = || self.initial_test.iter().chain(&self.warmups).chain(&self.requests);
        if all().all(|r| r.prompt_hashes.as_ref().is_some_and(|p| p.block_size == block_size)) {
            return;
        }
        let n: usize = all().map(|r| (r.prompt_len / block_size) as usize).sum();
        if n > MAX_SHARED_PROMPT_HASHES {
            return;
        }
        let memo = |r: &mut RequestSpec| {
            let h = crate::request::PromptBlockHashes::of(r, block_size);
            r.prompt_hashes = Some(std::sync::Arc::new(h));
        };
        self.initial_test.iter_mut().chain(&mut self.warmups).chain(&mut self.requests).for_each(memo);
    }

    /// The prompt length of `r`, one of this workload's timed requests, as the modelled client
    /// counts it in `total_input_tokens` ([`Workload::uncounted_prompt_tokens`] off).
    pub fn counted_prompt_len(&self, r: &RequestSpec) -> u32 {
        r.prompt_len.saturating_sub(self.uncounted_prompt_tokens)
    }

    /// Mean prompt length of the timed requests as the modelled client counts them
    /// ([`Workload::counted_prompt_len`]): what a result's `total_input_tokens ÷ completed` is.
    pub fn mean_counted_prompt_len(&self) -> f64 {
        let n = self.requests.len().max(1) as f64;
        self.requests.iter().map(|r| u64::from(self.counted_prompt_len(r))).sum::<u64>() as f64 / n
    }

    /// Mean prompt (as the server prefills it) and output lengths of the timed requests.
    pub fn mean_lengths(&self) -> (f64, f64) {
        let n = self.requests.len().max(1) as f64;
        let i: u64 = self.requests.iter().map(|r| u64::from(r.prompt_len)).sum();
        let o: u64 = self.requests.iter().map(|r| u64::from(r.output_len)).sum();
        (i as f64 / n, o as f64 / n)
    }
}

fn key(rng: &mut Rng) -> u64 {
    rng.random::<u64>()
}

/// The bounds `[lo, hi]` of a `random` prompt's sampled part, for `random_input_len`
/// `input_len`, `random_range_ratio` `r` and `special` tokens the server adds
/// ([`WorkloadParams::special_tokens`]): `vllm bench serve` draws around `input_len − special`
/// (`get_sampling_params`: `real_input_len = max(0, input_len − num_special_tokens)`, then
/// `[⌊real·(1−r)⌋, ⌈real·(1+r)⌉]`); servesim raises a lower bound of 0 to 1.
pub fn random_input_bounds(input_len: u32, r: f64, special: u32) -> (u32, u32) {
    let real = f64::from(input_len.saturating_sub(special));
    let lo = random_input_floor(input_len, r, special).max(1);
    let hi = ((real * (1.0 + r)).ceil() as u32).max(lo);
    (lo, hi)
}

/// The sampled part's lower bound as `vllm bench serve` computes it, before the bound of one
/// token: `⌊(input_len − special) × (1 − r)⌋` in floating point (`5 × (1 − 0.8)` is 0 there as
/// here). `config::check_random_min_prompt` refuses where it and the prefix are 0.
pub fn random_input_floor(input_len: u32, r: f64, special: u32) -> u32 {
    (f64::from(input_len.saturating_sub(special)) * (1.0 - r)).floor() as u32
}

/// Generates the workload. Deterministic in `params` (seed included).
pub fn generate(params: &WorkloadParams) -> Workload {
    let seed = params.seed;
    let mut len_rng = stream(seed, "dataset.lengths");
    let mut key_rng = stream(seed, "dataset.contents");
    let mut shuffle_rng = stream(seed, "dataset.shuffle");
    let n = params.num_prompts as usize;

    // (prompt segments, max_tokens, trace arrival, priority)
    let mut items: Vec<(Vec<Segment>, u32, Option<f64>, i32)> = Vec::with_capacity(n);
    // The server's BOS before a generated prompt's text (`special_tokens`), one token shared by
    // every prompt.
    let special = params.special_tokens;
    let bos = |segs: &mut Vec<Segment>| {
        if special > 0 {
            segs.push(Segment { key: crate::request::BOS_KEY, len: special });
        }
    };
    match &params.dataset {
        Dataset::Random { input_len, output_len, range_ratio, prefix_len } => {
            let r = *range_ratio;
            let (in_lo, in_hi) = random_input_bounds(*input_len, r, special);
            let out_lo = ((f64::from(*output_len) * (1.0 - r)).floor() as u32).max(1);
            let out_hi = ((f64::from(*output_len) * (1.0 + r)).ceil() as u32).max(out_lo);
            let ins: Vec<u32> = (0..n).map(|_| len_rng.random_range(in_lo..=in_hi)).collect();
            let outs: Vec<u32> = (0..n).map(|_| len_rng.random_range(out_lo..=out_hi)).collect();
            let prefix_key = key(&mut key_rng);
            for i in 0..n {
                let mut segs = Vec::with_capacity(3);
                bos(&mut segs);
                if *prefix_len > 0 {
                    segs.push(Segment { key: prefix_key, len: *prefix_len });
                }
                segs.push(Segment { key: key(&mut key_rng), len: ins[i] });
                items.push((segs, outs[i], None, 0));
            }
        }
        Dataset::PrefixRepetition { prefix_len, suffix_len, num_prefixes, output_len } => {
            let per = params.num_prompts / num_prefixes;
            for _ in 0..*num_prefixes {
                let pk = key(&mut key_rng);
                for _ in 0..per {
                    let mut segs = Vec::with_capacity(3);
                    bos(&mut segs);
                    segs.push(Segment { key: pk, len: *prefix_len });
                    segs.push(Segment { key: key(&mut key_rng), len: *suffix_len });
                    items.push((segs, *output_len, None, 0));
                }
            }
            items.shuffle(&mut shuffle_rng);
        }
        Dataset::Trace { rows } => {
            // A stream of its own: from `dataset.contents` a trace's row `i` had the contents of
            // a `random` run's prompt `i` of the same seed, and a live server that ran one found
            // the other's prompts in its prefix cache (the audit of 2026-12-06).
            let mut key_rng = stream(seed, "dataset.trace_contents");
            let group_salt = key(&mut key_rng);
            for row in rows.iter().take(n) {
                let mut segs = Vec::with_capacity(2);
                let plen = match (row.prefix_group, row.prefix_len) {
                    (Some(_), Some(p)) => p.min(row.input_len),
                    _ => 0,
                };
                if let (Some(g), true) = (row.prefix_group, plen > 0) {
                    segs.push(Segment { key: mix64(group_salt ^ mix64(g)), len: plen });
                }
                if row.input_len > plen {
                    segs.push(Segment { key: key(&mut key_rng), len: row.input_len - plen });
                }
                items.push((segs, row.output_len, Some(row.arrival_time), row.priority.unwrap_or(0)));
            }
        }
        Dataset::Requests { requests } => {
            for r in requests.iter().take(n) {
                items.push((r.prompt.clone(), r.output_len, None, 0));
            }
        }
    }

    // Arrivals.
    let arrivals: Vec<u64> = if let Dataset::Requests { requests } = &params.dataset {
        // From the first of the replayed rows, as a servesim trace's (below): a production
        // trace's times were taken from its earliest row over the whole file, so the first `n`
        // rows of an unsorted file started late (the audit of 2026-12-06).
        let t0 = requests.iter().take(n).map(|r| r.arrival_ns).min().unwrap_or(0);
        requests.iter().take(n).map(|r| r.arrival_ns - t0).collect()
    } else if let Some(Dataset::Trace { .. }) = Some(&params.dataset) {
        let t0 = items.iter().filter_map(|it| it.2).fold(f64::INFINITY, f64::min);
        items.iter().map(|it| secs_to_ns(it.2.unwrap_or(0.0) - if t0.is_finite() { t0 } else { 0.0 })).collect()
    } else {
        params.client.arrival_offsets(items.len(), params.request_rate, params.burstiness, seed)
    };

    // Output lengths: exact under ignore_eos, else cut where EOS falls.
    let mut eos_rng = stream(seed, "eos");
    let build =
        |segs: Vec<Segment>, max_tokens: u32, arrival_ns: u64, priority: i32, out_key: u64, eos_rng: &mut Rng| {
            let prompt_len: u32 = segs.iter().map(|s| s.len).sum();
            // The engine's cap on the output (vLLM ≥ 0.32: what is left of the context); a prompt
            // that leaves none is refused before the run (`check_requests_fit`).
            let max_tokens = match params.context_clamp {
                Some(m) if prompt_len < m => max_tokens.min(m - prompt_len),
                _ => max_tokens,
            };
            let output_len =
                if params.ignore_eos { max_tokens } else { eos_len(params.output_len_dist, max_tokens, eos_rng) };
            RequestSpec {
                prompt_len,
                prompt: segs,
                max_tokens,
                output_len,
                output_key: out_key,
                arrival_ns,
                priority,
                ignore_eos: params.ignore_eos,
                prompt_hashes: None,
            }
        };
    let mut out_rng = stream(seed, "dataset.outputs");
    // Each item's segments move into its request (no copy); the timed requests whose output the
    // engine's cap shortened are counted as they are built.
    let mut clamped_requests = 0u32;
    let requests: Vec<RequestSpec> = items
        .into_iter()
        .zip(&arrivals)
        .map(|(it, &a)| {
            let k = key(&mut out_rng);
            let r = build(it.0, it.1, a, it.3, k, &mut eos_rng);
            clamped_requests += u32::from(r.max_tokens < it.1);
            r
        })
        .collect();

    let mut warm_rng = stream(seed, "warmup");
    let mut warm_eos = stream(seed, "warmup.eos");
    let first = requests.first().cloned();
    let initial_test = match (&first, params.initial_test_request) {
        (Some(f), true) => {
            let k = key(&mut warm_rng);
            Some(build(f.prompt.clone(), f.max_tokens, 0, 0, k, &mut warm_eos))
        }
        _ => None,
    };
    let mut warmups: Vec<RequestSpec> = match &first {
        Some(f) => (0..params.num_warmups)
            .map(|_| {
                let k = key(&mut warm_rng);
                build(f.prompt.clone(), f.max_tokens, 0, 0, k, &mut warm_eos)
            })
            .collect(),
        None => Vec::new(),
    };
    // An earlier run whose prompts were the starts of this run's: each of the first rows' shared
    // prefix alone (the request's first segment, the group's key), one output token. A row
    // without a prefix sends nothing.
    if let Dataset::Trace { rows } = &params.dataset {
        for (row, r) in rows.iter().zip(&requests).take(params.prior_run_prefixes as usize) {
            if row.has_shared_prefix() {
                let k = key(&mut warm_rng);
                warmups.push(build(vec![r.prompt[0].clone()], 1, 0, r.priority, k, &mut warm_eos));
            }
        }
    }
    // An earlier run's prompts: the run's first requests again, the same contents, fresh
    // outputs (where EOS falls is drawn again), all due at the start of the warm-up phase.
    for r in requests.iter().take(params.prior_run_prompts as usize) {
        let k = key(&mut warm_rng);
        warmups.push(build(r.prompt.clone(), r.max_tokens, 0, r.priority, k, &mut warm_eos));
    }

    let requested_prompts = (matches!(params.dataset, Dataset::PrefixRepetition { .. })
        && params.num_prompts as usize != requests.len())
    .then_some(params.num_prompts);
    Workload {
        initial_test,
        warmups,
        requests,
        max_concurrency: params.max_concurrency,
        concurrency_ramp_ns: params.concurrency_ramp_ns,
        measure_window_ns: params.measure_window_ns,
        request_rate: params.request_rate,
        burstiness: params.burstiness,
        trace_arrivals: params.dataset.is_trace(),
        seed,
        chat: params.chat,
        role_chunk: params.chat && params.role_chunk,
        eos_unstreamed: params.chat && params.eos_unstreamed,
        tokenize_prompt: params.tokenize_prompt,
        requested_prompts,
        clamped_requests,
        uncounted_prompt_tokens: match params.dataset {
            Dataset::Random { .. } | Dataset::PrefixRepetition { .. } if !params.counts_server_prompt_tokens => special,
            _ => 0,
        },
    }
}

/// Where EOS ends an output of at most `max_tokens` tokens, drawn from `dist`.
pub fn eos_len(dist: Option<OutputLenDist>, max_tokens: u32, rng: &mut Rng) -> u32 {
    let drawn = match dist {
        None => max_tokens,
        Some(OutputLenDist::Geometric { mean }) => {
            let p = (1.0 / mean.max(1.0)).clamp(1e-9, 1.0);
            let g = Geometric::new(p).expect("p in (0, 1]");
            1 + g.sample(rng).min(u64::from(u32::MAX - 1)) as u32
        }
        Some(OutputLenDist::Uniform { min, max }) => rng.random_range(min.max(1)..=max.max(min.max(1))),
    };
    drawn.clamp(1, max_tokens.max(1))
}

/// Seconds as whole nanoseconds, rounded.
pub(crate) fn secs_to_ns(s: f64) -> u64 {
    // Past u64 nanoseconds (or infinite) saturates, so that a range check after it refuses the
    // time (a far arrival read as 0 was sent at once); NaN and negatives are 0.
    let ns = (s * 1e9).round();
    if ns > 0.0 {
        ns as u64
    } else {
        0
    }
}

/// Send-time offsets of `n` requests, as `vllm bench serve`'s `get_request` computes them
/// (`benchmarks/serve.py`, 0.10.0 to 0.34.0 read: vLLM PR #21108; 0.9.2 still slept an unscaled
/// gap after each request, as [`sglang_arrival_offsets`] does).
pub fn arrival_offsets(n: usize, rate: Option<f64>, burstiness: f64, seed: u64) -> Vec<u64> {
    let Some(rate) = rate else { return vec![0; n] };
    let mut rng = stream(seed, "arrivals");
    // An infinite burstiness is the gamma's limit, every gap 1 / rate (`get_request`: "when
    // burstiness tends to infinity, the delay time becomes constant"), summed and rescaled as
    // the random gaps are.
    let gamma = burstiness
        .is_finite()
        .then(|| Gamma::new(burstiness, 1.0 / (rate * burstiness)).expect("validated rate and burstiness"));
    let mut t = 0.0f64;
    let mut delays: Vec<f64> = Vec::with_capacity(n);
    for _ in 0..n {
        t += gamma.as_ref().map_or(1.0 / rate, |g| g.sample(&mut rng));
        delays.push(t);
    }
    if let Some(&last) = delays.last() {
        if last > 0.0 {
            let factor = (n as f64 / rate) / last;
            for d in &mut delays {
                *d *= factor;
            }
        }
    }
    delays.into_iter().map(secs_to_ns).collect()
}

/// Send-time offsets of `n` requests, as `sglang.bench_serving`'s `get_request` sends them
/// (`bench_serving.py`, 0.4.10 to 0.5.6; `benchmark/serving.py` from 0.5.17 to 0.5.23, read
/// in each): it yields a request, and only then sleeps `np.random.exponential(1.0 /
/// request_rate)` before the next. So the first request goes at once, request `i` after the
/// sum of `i` gaps, and the last, `N − 1` gaps in, is due at `(N − 1)/rate` on average, not
/// rescaled to `N/rate` as `vllm bench serve` does ([`arrival_offsets`]); the client has no
/// burstiness. An infinite rate sends everything at once. The gaps come from the `arrivals`
/// stream: numpy's global generator (seeded with `--seed`, and drawn from by the dataset's
/// sampler first) cannot be replayed, so the distribution and the structure are SGLang's, the
/// values are not. The asyncio loop's own delay between a request and the next sleep is not
/// modelled (each sleep starts after the request is handed out, so the real gaps are a little
/// longer).
pub fn sglang_arrival_offsets(n: usize, rate: Option<f64>, seed: u64) -> Vec<u64> {
    let Some(rate) = rate else { return vec![0; n] };
    let mut rng = stream(seed, "arrivals");
    let exp = Exp::new(rate).expect("validated rate");
    let mut t = 0.0f64;
    let mut offsets = Vec::with_capacity(n);
    for _ in 0..n {
        offsets.push(secs_to_ns(t));
        t += exp.sample(&mut rng);
    }
    offsets
}

/// The parameters of `dataset` with 100 prompts, all at once, `ignore_eos`, seed 0 and nothing
/// else: for the crate's tests.
#[cfg(test)]
pub(crate) fn test_params(dataset: Dataset) -> WorkloadParams {
    tests::params(dataset)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn params(dataset: Dataset) -> WorkloadParams {
        WorkloadParams {
            dataset,
            num_prompts: 100,
            num_warmups: 0,
            prior_run_prompts: 0,
            prior_run_prefixes: 0,
            request_rate: None,
            burstiness: 1.0,
            client: BenchClient::VllmBenchServe,
            max_concurrency: None,
            concurrency_ramp_ns: 0,
            measure_window_ns: None,
            ignore_eos: true,
            output_len_dist: None,
            initial_test_request: false,
            seed: 0,
            chat: false,
            role_chunk: false,
            eos_unstreamed: false,
            tokenize_prompt: false,
            special_tokens: 0,
            counts_server_prompt_tokens: true,
            context_clamp: None,
        }
    }

    #[test]
    fn random_lengths_lie_in_the_symmetric_range() {
        let w = generate(&params(Dataset::Random { input_len: 100, output_len: 10, range_ratio: 0.5, prefix_len: 0 }));
        assert_eq!(w.requests.len(), 100);
        assert!(w.requests.iter().all(|r| (50..=150).contains(&r.prompt_len) && (5..=15).contains(&r.output_len)));
        let distinct: std::collections::BTreeSet<u32> = w.requests.iter().map(|r| r.prompt_len).collect();
        assert!(distinct.len() > 20, "lengths should vary: {distinct:?}");
    }

    /// A trace and a `random` run of one seed send different prompts: their contents came from
    /// one stream, row `i` of the trace the start of random prompt `i`, and a live server that
    /// ran one found the other in its prefix cache (the audit of 2026-12-06).
    #[test]
    fn a_trace_and_a_random_run_of_one_seed_share_no_prompt() {
        let random =
            generate(&params(Dataset::Random { input_len: 100, output_len: 4, range_ratio: 0.0, prefix_len: 0 }));
        let rows: Vec<TraceRow> = (0..100)
            .map(|i| TraceRow {
                arrival_time: f64::from(i),
                input_len: 100,
                output_len: 4,
                prefix_group: None,
                prefix_len: None,
                priority: None,
            })
            .collect();
        let trace = generate(&params(Dataset::Trace { rows }));
        let keys = |w: &Workload| -> std::collections::BTreeSet<u64> {
            w.requests.iter().flat_map(|r| r.prompt.iter().map(|s| s.key)).collect()
        };
        assert_eq!(keys(&trace).len(), 100);
        assert!(keys(&random).is_disjoint(&keys(&trace)));
    }

    #[test]
    fn prefix_repetition_shares_prefixes_evenly() {
        let mut p =
            params(Dataset::PrefixRepetition { prefix_len: 64, suffix_len: 32, num_prefixes: 7, output_len: 8 });
        p.num_prompts = 100;
        let w = generate(&p);
        assert_eq!(w.requests.len(), 7 * 14);
        // The report's num_prompts is the number asked, as `vllm bench serve` writes it.
        assert_eq!(w.requested_prompts, Some(100));
        p.num_prompts = 98;
        assert_eq!(generate(&p).requested_prompts, None, "nothing rounded away");
        let mut keys: std::collections::BTreeMap<u64, u32> = Default::default();
        for r in &w.requests {
            *keys.entry(r.prompt[0].key).or_default() += 1;
        }
        assert_eq!(keys.len(), 7);
        assert!(keys.values().all(|&c| c == 14));
    }

    #[test]
    fn prior_run_prompts_resend_the_runs_first_prompts_and_leave_the_timed_phase_unchanged() {
        for dataset in [
            Dataset::Random { input_len: 100, output_len: 10, range_ratio: 0.5, prefix_len: 0 },
            Dataset::Trace {
                rows: (0..5)
                    .map(|i| TraceRow {
                        arrival_time: 0.0,
                        input_len: 40 + i,
                        output_len: 7,
                        prefix_group: None,
                        prefix_len: None,
                        priority: None,
                    })
                    .collect(),
            },
        ] {
            let mut p = params(dataset);
            p.num_prompts = 5;
            p.num_warmups = 1;
            let plain = generate(&p);
            p.prior_run_prompts = 3;
            let w = generate(&p);
            // The timed phase, and the warm-ups num_warmups makes, are the same with or without.
            assert_eq!(w.requests, plain.requests);
            assert_eq!(plain.warmups.len(), 1);
            assert_eq!(w.warmups[0], plain.warmups[0]);
            // Then the run's first three prompts, the same contents, sent at once.
            assert_eq!(w.warmups.len(), 4);
            for (warm, timed) in w.warmups[1..].iter().zip(&w.requests) {
                assert_eq!(warm.prompt, timed.prompt);
                assert_eq!((warm.max_tokens, warm.arrival_ns), (timed.max_tokens, 0));
                assert_ne!(warm.output_key, timed.output_key);
            }
        }
    }

    #[test]
    fn prior_run_prefixes_send_the_first_rows_prefixes_alone_before_the_prior_prompts() {
        // Rows 0 and 2 share a start with an earlier run's prompts (row 2 wholly), row 1 not.
        let row = |input_len, prefix: Option<(u64, u32)>| TraceRow {
            arrival_time: 0.0,
            input_len,
            output_len: 7,
            prefix_group: prefix.map(|p| p.0),
            prefix_len: prefix.map(|p| p.1),
            priority: None,
        };
        let rows = vec![row(50, Some((0, 20))), row(60, None), row(30, Some((2, 30))), row(40, Some((3, 10)))];
        let mut p = params(Dataset::Trace { rows });
        p.num_prompts = 4;
        let plain = generate(&p);
        p.prior_run_prefixes = 3;
        p.prior_run_prompts = 1;
        let w = generate(&p);
        assert_eq!(w.requests, plain.requests, "the timed phase is the same");
        // Rows 0 and 2's prefixes, alone, with one output token each, then row 0's whole prompt.
        assert_eq!(w.warmups.len(), 3);
        assert_eq!(w.warmups[0].prompt, vec![w.requests[0].prompt[0].clone()]);
        assert_eq!((w.warmups[0].prompt_len, w.warmups[0].max_tokens), (20, 1));
        assert_eq!(w.warmups[1].prompt, w.requests[2].prompt);
        assert_eq!(w.warmups[1].prompt_len, 30);
        assert_eq!(w.warmups[2].prompt, w.requests[0].prompt);
    }

    #[test]
    fn finite_rate_arrivals_are_rescaled_to_n_over_rate() {
        let a = arrival_offsets(50, Some(10.0), 1.0, 3);
        assert_eq!(*a.last().unwrap(), 5_000_000_000);
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        assert!(a[0] > 0, "the first request is delayed too");
    }

    /// `--burstiness inf`: every gap 1 / rate (vLLM's `get_request` from 0.11.1), the first
    /// request one gap in, and no random draw (the seed changes nothing).
    #[test]
    fn infinite_burstiness_gives_fixed_gaps() {
        let a = arrival_offsets(40, Some(4.0), f64::INFINITY, 3);
        assert_eq!(a, arrival_offsets(40, Some(4.0), f64::INFINITY, 9));
        assert_eq!((a[0], a[1], *a.last().unwrap()), (250_000_000, 500_000_000, 10_000_000_000));
        assert!(a.windows(2).all(|w| w[1] - w[0] == 250_000_000), "{a:?}");
    }

    /// `sglang.bench_serving`'s `get_request` yields a request and then sleeps
    /// `np.random.exponential(1 / rate)`: the first request at 0, each gap exponential of mean
    /// 1 / rate, never rescaled. Over 10,000 gaps the sample mean's sd is (1 / rate) / √9,999, 1%
    /// of the mean: 5 sd (5%) bounds it, and rules out the 1/N shift of vLLM's rescaling only in
    /// the structural check below, which is exact.
    #[test]
    fn sglang_arrivals_start_at_once_with_unscaled_exponential_gaps() {
        let (n, rate) = (10_000usize, 4.0);
        let b = sglang_arrival_offsets(n, Some(rate), 3);
        assert_eq!(b, BenchClient::SglangBenchServing.arrival_offsets(n, Some(rate), 1.0, 3), "the client's rule");
        assert_eq!(b, sglang_arrival_offsets(n, Some(rate), 3), "same seed, same offsets");
        assert_ne!(b, sglang_arrival_offsets(n, Some(rate), 4), "the seed draws the gaps");
        assert_eq!(b[0], 0, "the first request goes at once");
        assert!(b.windows(2).all(|w| w[0] <= w[1]));
        let mean_gap_s = *b.last().unwrap() as f64 * 1e-9 / (n - 1) as f64;
        let sd = (1.0 / rate) / ((n - 1) as f64).sqrt();
        assert!(
            (mean_gap_s - 1.0 / rate).abs() < 5.0 * sd,
            "mean gap {mean_gap_s} s, expected {} ± {}",
            1.0 / rate,
            5.0 * sd
        );
        // Not rescaled: vLLM's offsets of the same seed are the same exponential draws summed
        // from the first (burstiness 1: rand_distr's gamma of shape 1 is its exponential), then
        // multiplied by N / rate over their sum. So vLLM's request i is SGLang's request i + 1
        // times one factor, which is not 1, and vLLM's last request is due at N / rate exactly.
        let a = arrival_offsets(n, Some(rate), 1.0, 3);
        assert_eq!(*a.last().unwrap(), 2_500_000_000_000);
        let factor = a[n - 2] as f64 / b[n - 1] as f64;
        assert!((factor - 1.0).abs() > 1e-4, "a rescale factor of {factor}");
        for i in 0..n - 1 {
            let want = b[i + 1] as f64 * factor;
            assert!((a[i] as f64 - want).abs() <= 2.0 + want * 1e-9, "request {i}: {} vs {want}", a[i]);
        }
        assert_ne!(*b.last().unwrap(), 2_500_000_000_000);
    }

    /// An infinite rate is every request at once, for either client.
    #[test]
    fn an_infinite_rate_sends_everything_at_once_for_either_client() {
        for c in [BenchClient::VllmBenchServe, BenchClient::SglangBenchServing] {
            assert_eq!(c.arrival_offsets(5, None, 1.0, 0), vec![0; 5]);
        }
    }

    /// The generator takes the client's rule: the default is vLLM's, unchanged.
    #[test]
    fn the_generator_follows_the_workloads_client() {
        let mut p = params(Dataset::Random { input_len: 10, output_len: 10, range_ratio: 0.0, prefix_len: 0 });
        p.request_rate = Some(2.0);
        let at = |p: &WorkloadParams| generate(p).requests.iter().map(|r| r.arrival_ns).collect::<Vec<_>>();
        assert_eq!(at(&p), arrival_offsets(100, Some(2.0), 1.0, 0));
        assert_eq!(*at(&p).last().unwrap(), 50_000_000_000);
        p.client = BenchClient::SglangBenchServing;
        assert_eq!(at(&p), sglang_arrival_offsets(100, Some(2.0), 0));
        assert_eq!(at(&p)[0], 0);
    }

    #[test]
    fn eos_lengths_never_exceed_max_tokens() {
        let mut p = params(Dataset::Random { input_len: 10, output_len: 100, range_ratio: 0.0, prefix_len: 0 });
        p.ignore_eos = false;
        p.output_len_dist = Some(OutputLenDist::Geometric { mean: 40.0 });
        let w = generate(&p);
        assert!(w.requests.iter().all(|r| r.output_len >= 1 && r.output_len <= 100 && r.max_tokens == 100));
        let mean = w.requests.iter().map(|r| f64::from(r.output_len)).sum::<f64>() / 100.0;
        assert!(mean > 20.0 && mean < 45.0, "mean {mean}");
    }
}
