//! SGLang's `Scheduler` (`srt/managers/scheduler.py`, `schedule_batch.py`).
//!
//! One iteration of `event_loop_normal`:
//!
//! 1. New requests are appended to `waiting_queue`.
//! 2. `get_new_batch_prefill`: unless `batch_is_full`, sort the queue by the
//!    policy, continue the chunked request (at most one exists), then admit
//!    waiting requests through the `PrefillAdder` while KV, prefill-token,
//!    chunk and `max_running_requests` budgets allow. Admission reserves KV:
//!    every running request's remaining output × `new_token_ratio` (1.0 for
//!    `ignore_eos` from 0.5.22), and each admitted request's prompt plus its
//!    whole `max_new_tokens` (clipped at 4096). A `NO_TOKEN` answer sets
//!    `batch_is_full`: no new admission is tried until the running batch
//!    shrinks.
//! 3. **Prefill first**: if a prefill batch formed, it runs alone (mixed
//!    with the decodes only under `enable_mixed_chunk`). Otherwise every
//!    running request decodes one token, after `check_decode_mem`; if the
//!    step does not fit even after evicting the cache, requests are
//!    **retracted** (fewest outputs first, ties: longest prompt): their
//!    decoded KV is freed, their prompt stays in the radix tree as
//!    evictable, and they go to the **tail** of the waiting queue.
//!    `new_token_ratio` decays each decode step without retraction, is set
//!    to an estimate after one, and resets when the scheduler is idle.
//!
//! As the decode server of a prefill/decode-disaggregated fleet
//! ([`Scheduler::disaggregation_decode`]), step 2 is `get_new_prebuilt_batch` instead: the
//! landed requests, in queue order, up to `max_running_requests`, each whole prompt at once,
//! while the pool holds their prompts (no token budget, no chunking, no `new_token_ratio`).
//!
//! KV accounting: the pool holds `max_total_num_tokens`; tokens in the radix
//! tree (evictable or locked) plus tokens owned privately by requests
//! (decoded tokens, the tail of a page) are in use; the rest is available.
//! After each prefill chunk the computed prompt is inserted in the tree
//! (`cache_unfinished_req`), at finish prompt + output (`cache_finished_req`).
//!
//! The overlap scheduler (default; `disable_overlap_schedule` turns it off), by
//! [`Overlap`]: on a GPU, `schedule` hands out the batch formed one step
//! earlier and forms the next before the running step's results are processed
//! (a batch's launch effects in `launch`, its results in `do_finish_step`), so
//! finishes and KV frees are seen one iteration late and a finishing request
//! decodes once more (its token discarded; from 0.5.22 not one finishing by length,
//! [`SglangBehaviour::skip_finishing_decode`]); on the CPU backend, `output_lag`
//! makes the simulation loop deliver each step's tokens at the next step's end,
//! a request's last token at once. Not modelled: `dfs-weight` and
//! the 0.5.23-only policies, the
//! `ignore_eos` admission path without the radix cache, hierarchical cache,
//! speculative decoding, data parallelism.

use std::collections::VecDeque;

use rand::seq::SliceRandom;

use super::radix_cache::{Key, NodeId, RadixCache, Run, ROOT};
use super::schedule_policy::{
    AddReqResult, PrefillAdder, SchedulePolicy, CLIP_MAX_NEW_TOKENS, IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD,
    IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD, LPM_MAX_WAITING, WAITING_PREFIX_REFRESH_INTERVAL,
};
use crate::cost::StepShape;
use crate::engine::{Engine, EngineCounters, ReqId, Scheduled, StepPlan, TokenOutput, Version};

/// How the overlap scheduler (`event_loop_overlap`) is modelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overlap {
    /// `--disable-overlap-schedule`: `event_loop_normal`.
    Off,
    /// The CPU backend, as measured on the live test bed: `event_loop_normal`'s scheduling,
    /// with each step's tokens delivered at the next step's end (the forward runs
    /// synchronously, so a batch's results are processed only after the next batch has
    /// run; `Engine::output_lag`).
    CpuBackend,
    /// A GPU (`event_loop_overlap`): batch N+1 is formed and launched before batch N's
    /// results are processed, so finishes and the KV they free are seen one iteration late
    /// and a finishing request runs one extra decode (its token is discarded; from 0.5.22
    /// not one finishing by length, [`SglangBehaviour::skip_finishing_decode`]). Each
    /// batch's tokens are delivered at that batch's own end (no output lag). `schedule`
    /// hands out the batch formed one step earlier and forms the next.
    Gpu,
}

/// What differs between SGLang releases, named: resolved from the release in
/// `config/sglang.rs` ([`SglangBehaviour::of_release`]), read by the scheduler. No
/// release comparison is made inside the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SglangBehaviour {
    /// ≥ 0.5.0: a request chunked at admission takes `⌊rem_chunk ÷ page⌋ × page` tokens
    /// (0.4.10: `rem_chunk − page + 1`).
    pub page_floored_chunks: bool,
    /// ≥ 0.5.2: retraction stops as soon as the next decode step fits (0.4.10–0.5.1: at least
    /// one, then while free tokens < 20 × remaining requests; read: 0.5.1 without, 0.5.2 with).
    pub retract_until_decode_fits: bool,
    /// ≥ 0.5.3: after each retraction the cache is evicted towards 20 tokens a remaining
    /// request (`release_req`; 0.5.2 frees the request's tokens only).
    pub retract_evicts_for_remaining: bool,
    /// ≥ 0.5.17: an allocation short of free tokens evicts only the shortfall from the radix
    /// cache; through 0.5.16 it evicts the whole allocation's size (`evict_from_tree_cache`,
    /// `_evict_tree_cache_if_needed` before 0.5.11: `evict(num_tokens)` whenever fewer are
    /// free; read in the wheels of 0.4.10, 0.5.3, 0.5.11, 0.5.15 and 0.5.16 against 0.5.17,
    /// 0.5.19 and 0.5.23).
    pub evicts_shortfall_only: bool,
    /// ≥ 0.5.7: the chunked request takes a full chunk even when the remaining token
    /// budget is ≤ 0 (`add_chunked_req`: "the chunked_req must be added to the list";
    /// read: 0.5.6 without, 0.5.7 with).
    pub chunked_req_always_progresses: bool,
    /// ≥ 0.5.22: a running `ignore_eos` request's remaining output is reserved in full
    /// (ratio 1.0), not discounted by `new_token_ratio` (read: 0.5.21 without, 0.5.22 with).
    pub ignore_eos_full_reservation: bool,
    /// ≥ 0.5.11: admission reserves one page on top of a request's prompt and output (in
    /// `add_one_req`'s test; read: 0.5.10 without, 0.5.11 with).
    pub page_reserve_per_request: bool,
    /// ≥ 0.5.10: every admission or chunk charges one page to the batch's total and current
    /// offsets (`_update_prefill_budget`'s `page_overhead`; read: 0.5.9 without, 0.5.10 with,
    /// a release before the test above takes it).
    pub page_charge_per_admission: bool,
    /// ≥ 0.5.13: `add_one_req` stops a batch at `max_prefill_tokens` only with chunked prefill
    /// off (`self.rem_chunk_tokens is None and ...`); with it on, a prompt past what is left is
    /// chunked into the batch (read: 0.5.12 without, 0.5.13 with).
    pub max_prefill_stop_only_unchunked: bool,
    /// ≥ 0.5.4: the ratio after a retraction divides by Σ max_new_tokens + 1 (read: 0.5.3
    /// without, 0.5.4 with).
    pub retract_ratio_plus_one: bool,
    /// ≥ 0.5.4: `add_one_req`'s admission test reserves a request's remaining output
    /// (`max_new_tokens − len(output_ids)`), so a retracted request, whose prompt now carries its
    /// outputs so far, is not charged them twice; the budget it then takes still counts the
    /// full `max_new_tokens` (read: 0.5.3 without; 0.5.4, 0.5.6, 0.5.10–0.5.14, 0.5.18,
    /// 0.5.21–0.5.23 with).
    pub admission_reserves_remaining_output: bool,
    /// ≥ 0.5.23: each pass of the waiting-queue loop first stops if the pass's input or
    /// chunk budget is spent (`budget_state() == OTHER`: "a spent pass budget admits no
    /// one"), without setting `batch_is_full`. Before, every request is put to `add_one_req`.
    pub spent_pass_budget_stops: bool,
    /// ≥ 0.5.23: `get_next_batch_to_run` filters the running batch at every iteration
    /// ("Every step, not only after a merge"), before `get_new_batch_prefill`, and clears
    /// `batch_is_full` if it shrank: a request that finished in a decode step leaves the
    /// batch at the next iteration's top, so admission is tried again at once. Before, only
    /// `update_running_batch`'s filter (the next decode step) clears the flag after such a
    /// finish (read: 0.5.21 and 0.5.22 without, 0.5.23 with).
    pub filter_running_every_step: bool,
    /// ≥ 0.5.22, with the overlap scheduler on a GPU ([`Overlap::Gpu`]; `event_loop_overlap`
    /// sets `enable_skip_finishing_decode`): a running request whose in-flight token is its
    /// last by length (`_reqs_finishing_inflight`: in the queued batch, `len(output_ids) + 1 >=
    /// max_new_tokens`) leaves the running batch instead of decoding once more (clearing
    /// `batch_is_full`), also from a mixed step; if the rest's decode does not fit, no decode
    /// is formed that iteration (no retraction; the finishes free their KV). Read: 0.5.21
    /// without, 0.5.22 and 0.5.23 with.
    pub skip_finishing_decode: bool,
    /// ≥ 0.5.10, a decode server of a disaggregated deployment
    /// ([`Scheduler::disaggregation_decode`]): `get_next_disagg_decode_batch_to_run` processes
    /// a new prebuilt batch as it forms it (`process_batch_result_prebuilt`: the prefill
    /// server's first token is streamed then) and merges it into the running batch, which
    /// decodes in the same iteration; no iteration runs the prebuilt batch alone. Through
    /// 0.5.9 the prebuilt batch is an iteration's batch of its own, processed (its first token
    /// streamed) with that iteration's result and merged at the next (read: 0.5.9 without,
    /// 0.5.10 and 0.5.23 with, `disaggregation/decode.py`).
    pub prebuilt_merged: bool,
    /// ≥ 0.5.22: under a cache-agnostic policy (fcfs, lof, random; lpm past 128 waiting) with
    /// the radix cache on, every 32nd `calc_priority` that finds requests waiting refreshes the
    /// first 128 waiting requests' cached prefixes in the LRU, the queue's head last
    /// (`SchedulePolicy._touch_waiting_prefixes`, `SGLANG_ENABLE_WAITING_PREFIX_REFRESH` on by
    /// default; read: 0.5.21 without, 0.5.22 and 0.5.23 with).
    pub refresh_waiting_prefixes: bool,
    /// ≥ 0.5.1: a decode server's pre-allocation queue counts a request's output as at most
    /// `CLIP_MAX_NEW_TOKEN` (4,096, `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`) when it checks that
    /// the largest request can still finish (`_allocatable_tokens`, `pop_preallocated`; read:
    /// 0.4.10 and 0.4.10.post2 without, 0.5.1, 0.5.6 and 0.5.23 with).
    pub prealloc_clips_output: bool,
    /// The overlap scheduler, as modelled for the hardware.
    pub overlap: Overlap,
    /// With [`Overlap::Gpu`], every step is [`StepShape::cpu_overlapped`]: its CPU time
    /// overlaps the GPU's, as `event_loop_overlap` runs them. Off by default
    /// (`config/sglang.rs`, `SGLANG_CPU_OVERLAP`).
    pub cpu_overlap: bool,
}

impl SglangBehaviour {
    /// Whether a step's CPU time overlaps the GPU's ([`StepShape::cpu_overlapped`]), with
    /// [`SglangBehaviour::cpu_overlap`] on: with [`Overlap::Gpu`], `event_loop_overlap` receives
    /// requests, forms and launches batch N+1 and processes batch N's results
    /// (`process_batch_result`: finishes, the radix cache, `stream_output`) on the CPU while
    /// batch N runs on the GPU, so a step lasts the longer of the two. `event_loop_normal` (off,
    /// and the CPU backend, whose forward is synchronous) does them one after the other.
    pub fn cpu_overlapped(&self) -> bool {
        self.cpu_overlap && self.overlap == Overlap::Gpu
    }
}
use crate::request::RequestSpec;
use crate::rng::{stream, Rng};

/// The resolved SGLang configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct SglangConfig {
    pub version: Version,
    /// The release's behaviours (and how the overlap scheduler is modelled).
    pub behaviour: SglangBehaviour,
    pub max_running_requests: u32,
    /// The `--max-running-requests` given, where the release capped it below that
    /// (`max_running_requests` holds the cap; `config::sglang`): said in the reports.
    pub capped_max_running_requests: Option<u32>,
    /// None: chunked prefill disabled (`--chunked-prefill-size -1`).
    pub chunked_prefill_size: Option<u32>,
    pub max_prefill_tokens: u32,
    pub page_size: u32,
    pub schedule_policy: SchedulePolicy,
    /// `max_total_num_tokens`: the KV pool.
    pub max_total_tokens: u64,
    pub schedule_conservativeness: f64,
    pub disable_radix_cache: bool,
    pub enable_mixed_chunk: bool,
    /// `--disable-overlap-schedule` as given (reported by `servesim serve`); how the overlap
    /// scheduler is modelled is [`SglangBehaviour::overlap`].
    pub disable_overlap_schedule: bool,
    pub context_length: u32,
    /// The largest decode batch captured as a CUDA graph: the last size of the release's
    /// capture list (`config::sglang_capture_list`: from `--cuda-graph-max-bs` or the
    /// release's default for the GPU, stopping at the request pool); `None` without graphs.
    /// The step cost's graph rule reads it; the scheduler does not. (The default
    /// `mem_fraction_static` reserves for the `--cuda-graph-max-bs` setting, not for this.)
    pub cuda_graph_max_bs: Option<u32>,
    /// With graphs turned off (`--disable-cuda-graph`), or captured only up to a
    /// `--cuda-graph-max-bs` below the release's default: the largest decode batch the release
    /// would have captured by default, so that the step cost knows which steps run eagerly by
    /// that choice.
    pub forgone_cuda_graph_max_bs: Option<u32>,
    /// Seed of the `random` policy's stream.
    pub seed: u64,
    /// `req_to_token_pool.size`: the request pool (`max_num_reqs`), at least
    /// `max_running_requests`; a decode server's pre-allocation queue takes a slot of it per
    /// request ([`crate::engine::PreallocView::free_slots`]).
    pub req_pool_size: u32,
    /// `--num-reserved-decode-tokens` (512): the KV a decode server's pre-allocation queue keeps
    /// for each request's decode ([`crate::engine::PreallocView::reserve`]).
    pub num_reserved_decode_tokens: u32,
}

impl SglangConfig {
    /// `SGLANG_INIT_NEW_TOKEN_RATIO` × conservativeness, capped at 1.
    pub fn init_new_token_ratio(&self) -> f64 {
        (0.7 * self.schedule_conservativeness).min(1.0)
    }
    /// `init × SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR (0.14)`.
    pub fn min_new_token_ratio(&self) -> f64 {
        self.init_new_token_ratio() * 0.14
    }
    /// Decay per decode step: `(init − min) / SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS (600)`.
    pub fn new_token_ratio_decay(&self) -> f64 {
        (self.init_new_token_ratio() - self.min_new_token_ratio()) / 600.0
    }
}

/// `retract_decode_steps`.
const RETRACT_DECODE_STEPS: u64 = 20;

/// Tokenisation time per prompt token in the `TokenizerManager`, ns
/// ([`Engine::tokenizer_ns_per_prompt_token`]). The `TokenizerManager` is one asyncio
/// process (`tokenizer_worker_num` 1 and the dynamic batch tokenizer off by default) that
/// calls the Hugging Face fast tokenizer synchronously on its event loop for each request
/// (`_tokenize_one_request`, 0.5.x `_tokenize_texts`), so requests are tokenized one after
/// the other. 1 µs a token: measured on the live test bed's CPU (`transformers`
/// `PreTrainedTokenizerFast.__call__`, the test model's byte-level BPE, prompts made as
/// `bench_serving`'s random dataset makes them: 0.78–0.97 µs a token from 128 to 4,096
/// tokens, 1.24 at 8,192), the order of magnitude published for real models' tokenizers
/// (LightLLM PR #1258: 41.7 ms for 22k tokens, Qwen3.5, 1.9 µs; agentcore-rl-toolkit PR
/// #141: 1.2 s for eight 128k-token prompts, Qwen3-Coder, 1.2 µs). `docs/sglang.md` §7.
pub const TOKENIZER_NS_PER_PROMPT_TOKEN: u64 = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Waiting,
    /// In the prefill batch being planned or run.
    Prefilling,
    Running,
    Finished,
}

#[derive(Clone, Debug)]
struct Req {
    spec: RequestSpec,
    /// Token contents of prompt + outputs (`origin_input_ids + output_ids`), as runs
    /// ([`super::token_runs`]); `fill_ids` are the first `fill_len()` of them. Empty until
    /// first needed.
    tokens: Vec<Run>,
    num_output: u32,
    /// `len(prefix_indices)`: tokens covered by the radix tree, locked at `last_node`.
    prefix_len: u32,
    last_node: Option<NodeId>,
    /// Tokens whose KV has been computed (prefix included).
    kv_len: u32,
    /// Tokens allocated outside the tree (page multiples).
    private: u64,
    /// Tokens to compute in the current prefill round.
    extend: u32,
    status: Status,
    /// The current prefill round ends the prompt (the request will sample).
    completes_prefill: bool,
    /// The most tokens it had computed when last retracted: prefill below it is recompute
    /// (`EngineCounters::recomputed_tokens`).
    computed_before_retraction: u32,
    /// Left the running batch while its last token was in flight
    /// ([`SglangBehaviour::skip_finishing_decode`]): its finish shrinks no batch.
    left_running: bool,
}

impl Req {
    fn fill_len(&self) -> u32 {
        self.spec.prompt_len + self.num_output
    }
    fn max_new(&self) -> u32 {
        self.spec.max_tokens
    }
}

/// What the planned step runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StepKind {
    Prefill { mixed: bool },
    Decode,
}

/// The SGLang scheduler and its KV pool.
#[derive(Clone, Debug)]
pub struct Scheduler {
    config: SglangConfig,
    tree: RadixCache,
    /// Reused between steps: the decodes of the step that finished.
    decodes_buf: Vec<ReqId>,
    /// Live requests by id, boxed: a finished one leaves an empty slot of one word.
    requests: Vec<Option<Box<Req>>>,
    waiting: VecDeque<ReqId>,
    running: Vec<ReqId>,
    chunked: Option<ReqId>,
    /// The prefill batch of the planned step.
    batch: Vec<ReqId>,
    kind: Option<StepKind>,
    /// [`Overlap::Gpu`]: the batch formed (and launched) for the step after the one running.
    next_plan: StepPlan,
    next_batch: Vec<ReqId>,
    next_kind: Option<StepKind>,
    /// `do_schedule` is forming the next batch while one is in flight.
    forming_next: bool,
    /// First tokens streamed while a batch was formed ([`SglangBehaviour::prebuilt_merged`]),
    /// until [`Engine::take_formed_outputs`] takes them.
    formed: Vec<TokenOutput>,
    batch_is_full: bool,
    /// A running request finished since the last `update_running_batch` (its
    /// `filter_batch` will shrink the decode batch and clear `batch_is_full`).
    finished_since_filter: bool,
    /// The last prefill batch shrinks when it is merged (a request finished in it, or it
    /// holds the chunked request, which is excluded): `batch_is_full` is cleared then.
    last_prefill_shrinks: bool,
    /// Why the modelled engine stops here ([`Engine::fatal_error`]): the next decode step
    /// does not fit in the pool after retraction, where SGLang raises instead of running.
    fatal: Option<String>,
    new_token_ratio: f64,
    /// Σ private tokens of all requests.
    private_total: u64,
    /// A decode server's KV pre-allocated for requests whose prefill or transfer is under way
    /// ([`Engine::set_preallocated`]): allocated in SGLang (`_pre_alloc`), so not free here.
    preallocated: u64,
    num_unfinished: usize,
    plan: StepPlan,
    counters: EngineCounters,
    rng: Rng,
    /// The last prefill batch's hit rate (`sglang:cache_hit_rate`).
    last_cache_hit_rate: f64,
    /// `SchedulePolicy._waiting_prefix_refresh_calls`
    /// ([`SglangBehaviour::refresh_waiting_prefixes`]).
    waiting_prefix_refresh_calls: u64,
    /// Shape of the last step run (for the invariant checks).
    last_shape: StepShape,
    /// Fast-forward: running requests by `kv_len % page_size` at the run's first step.
    ff_hist: Vec<u32>,
    /// Fast-forward: Σ decode contexts of the run's first step.
    ff_ctx0: u64,
    ff_n: u64,
    /// The decode server of a prefill/decode-disaggregated deployment
    /// (`--disaggregation-mode decode`; [`Scheduler::disaggregation_decode`]): waiting
    /// requests are admitted as a prebuilt batch ([`Scheduler::get_new_prebuilt_batch`]), not
    /// through the `PrefillAdder`.
    disagg_decode: bool,
}

impl Scheduler {
    pub fn new(config: SglangConfig) -> Scheduler {
        let tree = RadixCache::new(config.page_size);
        let ratio = config.init_new_token_ratio();
        let rng = stream(config.seed, "sglang.schedule_policy");
        Scheduler {
            config,
            tree,
            decodes_buf: Vec::new(),
            requests: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            chunked: None,
            batch: Vec::new(),
            kind: None,
            next_plan: StepPlan::default(),
            next_batch: Vec::new(),
            next_kind: None,
            forming_next: false,
            formed: Vec::new(),
            batch_is_full: false,
            finished_since_filter: false,
            last_prefill_shrinks: false,
            fatal: None,
            new_token_ratio: ratio,
            private_total: 0,
            preallocated: 0,
            num_unfinished: 0,
            plan: StepPlan::default(),
            counters: EngineCounters::default(),
            rng,
            last_cache_hit_rate: 0.0,
            waiting_prefix_refresh_calls: 0,
            last_shape: StepShape::default(),
            ff_hist: Vec::new(),
            ff_ctx0: 0,
            ff_n: 0,
            disagg_decode: false,
        }
    }

    /// This scheduler as the decode server of a prefill/decode-disaggregated deployment
    /// (`--disaggregation-mode decode`): a waiting request is one whose KV has been transferred
    /// (or a retracted one to resume), and the iteration admits them as SGLang's
    /// `SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch` does
    /// ([`Scheduler::get_new_prebuilt_batch`]) instead of `get_new_batch_prefill`. Set by the
    /// fleet loop (`fleet/run.rs`) for an SGLang decode replica only.
    pub fn disaggregation_decode(mut self) -> Scheduler {
        self.disagg_decode = true;
        self
    }

    pub fn config(&self) -> &SglangConfig {
        &self.config
    }

    /// `new_token_ratio` now.
    pub fn new_token_ratio(&self) -> f64 {
        self.new_token_ratio
    }

    pub fn last_cache_hit_rate(&self) -> f64 {
        self.last_cache_hit_rate
    }

    fn req(&self, id: ReqId) -> &Req {
        self.requests[id as usize].as_ref().expect("live request")
    }

    fn req_mut(&mut self, id: ReqId) -> &mut Req {
        self.requests[id as usize].as_mut().expect("live request")
    }

    fn page(&self) -> u64 {
        u64::from(self.config.page_size)
    }

    fn ceil_page(&self, n: u64) -> u64 {
        n.div_ceil(self.page()) * self.page()
    }

    fn floor_page(&self, n: u32) -> u32 {
        n / self.config.page_size * self.config.page_size
    }

    /// `token_to_kv_pool.available_size()`.
    pub fn available_size(&self) -> u64 {
        self.config.max_total_tokens.saturating_sub(self.tree.total_size() + self.private_total + self.preallocated)
    }

    fn evictable_size(&self) -> u64 {
        if self.config.disable_radix_cache {
            0
        } else {
            self.tree.evictable_size()
        }
    }

    /// `evict_from_tree_cache(num_tokens)` before an allocation of `num_tokens`: when fewer are
    /// free, evicts that many (through 0.5.16) or the shortfall (0.5.17 on,
    /// [`SglangBehaviour::evicts_shortfall_only`]).
    fn evict_for(&mut self, num_tokens: u64) {
        let avail = self.available_size();
        if avail < num_tokens {
            let n = if self.config.behaviour.evicts_shortfall_only { num_tokens - avail } else { num_tokens };
            self.tree.evict(n);
        }
    }

    /// A request's share of an allocation whose eviction ran before it ([`Scheduler::evict_for`]
    /// for the whole batch): evicts what is still missing, if anything.
    fn alloc(&mut self, id: ReqId, tokens: u64) -> bool {
        let avail = self.available_size();
        if avail < tokens {
            self.tree.evict(tokens - avail);
        }
        if self.available_size() < tokens {
            return false;
        }
        self.req_mut(id).private += tokens;
        self.private_total += tokens;
        true
    }

    fn free_private(&mut self, id: ReqId) {
        let p = std::mem::take(&mut self.req_mut(id).private);
        self.private_total -= p;
    }

    /// Names the request's tokens (prompt, then every output it can sample) as runs, once.
    fn materialize(&mut self, id: ReqId) {
        let r = self.requests[id as usize].as_mut().expect("live request");
        if r.tokens.is_empty() {
            r.tokens = super::token_runs(&r.spec);
        }
    }

    /// `init_next_round_input`: matches `fill_ids[:len-1]` in the tree.
    fn init_next_round_input(&mut self, id: ReqId) {
        self.materialize(id);
        let disabled = self.config.disable_radix_cache;
        let Scheduler { tree, requests, .. } = self;
        let r = requests[id as usize].as_mut().expect("live request");
        let fill = r.fill_len();
        let (len, node) = if disabled {
            (0, ROOT)
        } else {
            let m = tree.match_prefix_runs(Key::new(&r.tokens, (fill - 1) as usize));
            (m.len, m.last_node)
        };
        r.prefix_len = len;
        r.last_node = Some(node);
        r.kv_len = len;
        r.extend = fill - len;
    }

    /// Reservation of a running request: its remaining output × ratio.
    fn running_reservation(&self, r: &Req) -> f64 {
        let left = r.max_new().saturating_sub(r.num_output).min(CLIP_MAX_NEW_TOKENS);
        let ratio = if r.spec.ignore_eos && self.config.behaviour.ignore_eos_full_reservation {
            1.0
        } else {
            self.new_token_ratio
        };
        f64::from(left) * ratio
    }

    fn avail_plus_evictable(&self) -> f64 {
        (self.available_size() + self.evictable_size()) as f64
    }

    /// `calc_priority`: sorts the waiting queue by the policy.
    fn calc_priority(&mut self) {
        let policy = match self.config.schedule_policy {
            SchedulePolicy::Lpm if self.config.disable_radix_cache || self.waiting.len() > LPM_MAX_WAITING => {
                SchedulePolicy::Fcfs
            }
            p => p,
        };
        match policy {
            SchedulePolicy::Fcfs => {}
            SchedulePolicy::Lof => {
                let mut v: Vec<ReqId> = self.waiting.drain(..).collect();
                v.sort_by_key(|&id| std::cmp::Reverse(self.req(id).max_new()));
                self.waiting = v.into();
            }
            SchedulePolicy::Random => {
                let mut v: Vec<ReqId> = self.waiting.drain(..).collect();
                v.shuffle(&mut self.rng);
                self.waiting = v.into();
            }
            SchedulePolicy::Lpm => {
                // `_compute_prefix_matches`: each request's cached prefix, and the in-batch
                // prefix caching: a request that finds at most `IN_BATCH_PREFIX_CACHING_CHECK_
                // THRESHOLD` tokens cached, but shares at least `..._DEPRIORITIZE_THRESHOLD` with
                // a request before it in the queue (a temporary tree of the waiting queue's
                // keys, page size 1, rebuilt at each call), is put last, so that the shared part
                // is computed once, by the first, and found cached by the rest. A request not
                // deprioritised is added to the temporary tree.
                let ids: Vec<ReqId> = self.waiting.iter().copied().collect();
                let mut in_batch = RadixCache::new(1);
                let mut keyed: Vec<(bool, std::cmp::Reverse<u32>, ReqId)> = Vec::with_capacity(ids.len());
                for id in ids {
                    self.init_next_round_input(id);
                    let r = self.req(id);
                    let mut deprioritised = false;
                    if r.prefix_len <= IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD {
                        let key = Key::new(&r.tokens, (r.fill_len() - 1) as usize);
                        if in_batch.cached_prefix_len_runs(key) >= IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD {
                            deprioritised = true;
                        } else {
                            in_batch.insert_runs(key);
                        }
                    }
                    keyed.push((deprioritised, std::cmp::Reverse(r.prefix_len), id));
                }
                // `_sort_by_longest_prefix`: `-len(prefix_indices)`, a deprioritised request
                // `inf`; a stable sort.
                keyed.sort_by_key(|&(d, len, _)| (d, len));
                self.waiting = keyed.into_iter().map(|(_, _, id)| id).collect();
            }
        }
        self.touch_waiting_prefixes(policy);
    }

    /// `SchedulePolicy._touch_waiting_prefixes` ([`SglangBehaviour::refresh_waiting_prefixes`],
    /// 0.5.22+): under a cache-agnostic policy with the radix cache on, every
    /// [`WAITING_PREFIX_REFRESH_INTERVAL`]th call that finds requests waiting walks the first
    /// [`LPM_MAX_WAITING`] waiting requests' `origin_input_ids + output_ids` in the tree
    /// (`touch_prefix`: the page-aligned match, its access times and split, nothing locked), the
    /// queue's head last, "so LRU evicts in reverse admission order". lpm matches as it sorts.
    fn touch_waiting_prefixes(&mut self, policy: SchedulePolicy) {
        if !self.config.behaviour.refresh_waiting_prefixes
            || policy == SchedulePolicy::Lpm
            || self.waiting.is_empty()
            || self.config.disable_radix_cache
        {
            return;
        }
        let refresh = self.waiting_prefix_refresh_calls % WAITING_PREFIX_REFRESH_INTERVAL == 0;
        self.waiting_prefix_refresh_calls += 1;
        if !refresh {
            return;
        }
        for k in (0..self.waiting.len().min(LPM_MAX_WAITING)).rev() {
            let id = self.waiting[k];
            self.materialize(id);
            let Scheduler { tree, requests, .. } = self;
            let r = requests[id as usize].as_ref().expect("live request");
            tree.match_prefix_runs(Key::new(&r.tokens, r.fill_len() as usize));
        }
    }

    /// What `add_one_req`'s admission test reserves for a request beside its prompt: its output
    /// (from 0.5.4 what is left of it: a retracted request's outputs so far are in its prompt
    /// now), clipped, and the page from 0.5.11.
    fn admission_output(&self, r: &Req) -> (u32, u32) {
        let b = &self.config.behaviour;
        let out =
            if b.admission_reserves_remaining_output { r.max_new().saturating_sub(r.num_output) } else { r.max_new() };
        (out.min(CLIP_MAX_NEW_TOKENS), if b.page_reserve_per_request { self.config.page_size } else { 0 })
    }

    /// `add_one_req` on the radix-cache path.
    fn add_one_req(&mut self, adder: &mut PrefillAdder, id: ReqId, can_run: &mut Vec<ReqId>) -> (AddReqResult, bool) {
        let (extend, max_new, prefix_len, last_node) = {
            let r = self.req(id);
            (r.extend, r.max_new(), r.prefix_len, r.last_node.expect("matched"))
        };
        let clip = max_new.min(CLIP_MAX_NEW_TOKENS);
        // The budget taken below is the full clip; the test reserves `admission_output`.
        let (test_clip, page_overhead) = self.admission_output(self.req(id));
        let total = f64::from(extend) + f64::from(test_clip) + f64::from(page_overhead);
        let input_tokens = self.ceil_page(u64::from(extend)) as i64;
        if total >= adder.rem_total_tokens(self.avail_plus_evictable()) {
            return (AddReqResult::NoToken, false);
        }
        if input_tokens >= adder.rem_input_tokens
            && !can_run.is_empty()
            && (adder.rem_chunk_tokens.is_none() || !self.config.behaviour.max_prefill_stop_only_unchunked)
        {
            return (AddReqResult::Other, false);
        }
        // Locking the prefix takes it out of "evictable": check again.
        self.tree.inc_lock_ref(last_node);
        if total >= adder.rem_total_tokens(self.avail_plus_evictable()) {
            self.tree.dec_lock_ref(last_node);
            return (AddReqResult::NoToken, false);
        }
        let chunked = match adder.rem_chunk_tokens {
            Some(rem) if input_tokens > rem => {
                let trunc = if self.config.behaviour.page_floored_chunks {
                    rem / i64::from(self.config.page_size) * i64::from(self.config.page_size)
                } else {
                    rem - i64::from(self.config.page_size) + 1
                };
                if trunc <= 0 {
                    self.tree.dec_lock_ref(last_node);
                    return (AddReqResult::Other, false);
                }
                let trunc = trunc as u32;
                let r = self.req_mut(id);
                r.extend = trunc;
                r.completes_prefill = false;
                adder.update_prefill_budget(prefix_len, trunc, 0);
                true
            }
            _ => {
                self.req_mut(id).completes_prefill = true;
                adder.update_prefill_budget(prefix_len, input_tokens as u32, clip);
                false
            }
        };
        can_run.push(id);
        (adder.budget_state(self.avail_plus_evictable()), chunked)
    }

    /// `get_new_batch_prefill`. Fills `self.batch`; returns whether a batch formed.
    fn get_new_batch_prefill(&mut self) -> bool {
        self.batch.clear();
        if (self.batch_is_full || self.waiting.is_empty()) && self.chunked.is_none() {
            return false;
        }
        let running_bs = self.running.len() as u32;
        if running_bs >= self.config.max_running_requests {
            self.batch_is_full = true;
            return false;
        }
        self.calc_priority();
        let mixed_decode = if self.config.enable_mixed_chunk { running_bs } else { 0 };
        let offset: f64 = self.running.iter().map(|&id| self.running_reservation(self.req(id))).sum();
        let mut adder = PrefillAdder {
            base_available: self.avail_plus_evictable(),
            rem_total_token_offset: offset + f64::from(mixed_decode),
            cur_rem_token_offset: f64::from(mixed_decode),
            rem_input_tokens: i64::from(self.config.max_prefill_tokens) - i64::from(mixed_decode),
            rem_chunk_tokens: self.config.chunked_prefill_size.map(|c| i64::from(c) - i64::from(mixed_decode)),
            log_hit_tokens: 0,
            log_input_tokens: 0,
            page_overhead: if self.config.behaviour.page_charge_per_admission { self.config.page_size } else { 0 },
        };
        let mut can_run: Vec<ReqId> = Vec::new();
        let mut new_chunked: Option<ReqId> = None;

        // The chunked request continues first (`add_chunked_req`).
        if let Some(id) = self.chunked {
            let rem_total = adder.rem_total_tokens(self.avail_plus_evictable()).floor() as i64;
            let mut rem = match adder.rem_chunk_tokens {
                Some(c) => c.min(rem_total),
                None => rem_total,
            };
            if rem <= 0 && self.config.behaviour.chunked_req_always_progresses {
                // "The chunked_req must be added to the list": a full chunk, whatever the
                // budget. The pool must still hold it (SGLang would fail the allocation):
                // it takes what is free or evictable, and waits if nothing is.
                let physical =
                    self.floor_page((self.available_size() + self.evictable_size()).min(u64::from(u32::MAX)) as u32);
                rem = adder.rem_chunk_tokens.unwrap_or(0).min(i64::from(physical));
            }
            if rem > 0 {
                let (extend, max_new) = {
                    let r = self.req(id);
                    (r.fill_len() - r.kv_len, r.max_new())
                };
                let truncated = i64::from(extend) > rem;
                let n = if truncated { self.floor_page(rem as u32).max(1) } else { extend };
                let r = self.req_mut(id);
                r.extend = n;
                r.completes_prefill = !truncated;
                adder.update_prefill_budget(0, n, if truncated { 0 } else { max_new.min(CLIP_MAX_NEW_TOKENS) });
                can_run.push(id);
                if truncated {
                    new_chunked = Some(id);
                }
            } else {
                new_chunked = Some(id);
            }
        }

        let mut taken: Vec<ReqId> = Vec::new();
        // No budget check before the loop: a request that the total budget cannot hold gets
        // NO_TOKEN from `add_one_req`, which sets `batch_is_full` (0.4.10–0.5.23 alike).
        // The queue does not change in this loop (what it takes leaves after it), and the
        // loop mostly stops at its first request: walked in place, not copied.
        for k in 0..self.waiting.len() {
            let id = self.waiting[k];
            if self.config.behaviour.spent_pass_budget_stops
                && adder.budget_state(self.avail_plus_evictable()) == AddReqResult::Other
            {
                break;
            }
            if running_bs as usize + can_run.len() >= self.config.max_running_requests as usize {
                self.batch_is_full = true;
                break;
            }
            // A new chunked request may only start if none is in progress.
            if new_chunked.is_some() {
                break;
            }
            self.init_next_round_input(id);
            let (res, chunked) = self.add_one_req(&mut adder, id, &mut can_run);
            if can_run.last() == Some(&id) {
                taken.push(id);
                if chunked {
                    new_chunked = Some(id);
                }
            }
            match res {
                AddReqResult::Continue => {}
                AddReqResult::NoToken => {
                    self.batch_is_full = true;
                    break;
                }
                AddReqResult::Other => break,
            }
        }
        if !taken.is_empty() {
            self.waiting.retain(|id| !taken.contains(id));
        }
        self.chunked = new_chunked;
        if can_run.is_empty() {
            return false;
        }
        // `prepare_for_extend`: allocate the extend tokens, for the batch at once
        // (`alloc_token_slots(extend_num_tokens)`; paged, `alloc_paged_token_slots_extend`
        // asks a page more per request), its eviction first.
        let extend_num_tokens: u64 = can_run.iter().map(|&id| u64::from(self.req(id).extend)).sum();
        let page = self.page();
        let paged_extra = if page > 1 { can_run.len() as u64 * page } else { 0 };
        self.evict_for(extend_num_tokens + paged_extra);
        for &id in &can_run {
            let (kv_len, extend, again) = {
                let r = self.req(id);
                let again = r.extend.min(r.computed_before_retraction.saturating_sub(r.kv_len));
                (u64::from(r.kv_len), u64::from(r.extend), u64::from(again))
            };
            self.counters.recomputed_tokens += again;
            let need = self.ceil_page(kv_len + extend) - self.ceil_page(kv_len);
            let ok = self.alloc(id, need);
            debug_assert!(ok, "admission reserved this KV");
            self.req_mut(id).status = Status::Prefilling;
        }
        self.counters.prefix_cache_hits += adder.log_hit_tokens;
        self.counters.prefix_cache_queries += adder.log_hit_tokens + adder.log_input_tokens;
        let denom = adder.log_hit_tokens + adder.log_input_tokens;
        self.last_cache_hit_rate = if denom > 0 { adder.log_hit_tokens as f64 / denom as f64 } else { 0.0 };
        self.batch = can_run;
        true
    }

    /// `get_new_prebuilt_batch` of a decode server ([`Scheduler::disaggregation_decode`];
    /// `python/sglang/srt/disaggregation/decode.py`, `SchedulerDisaggregationDecodeMixin`,
    /// read in 0.4.10, 0.5.6, 0.5.9, 0.5.10 and 0.5.23 (`_get_new_prebuilt_batch`), alike in
    /// what is modelled here). Fills `self.batch`; returns whether a batch formed.
    ///
    /// SGLang takes the first `min(req_to_token_pool.size, max_running_requests) − running batch
    /// size` requests of the waiting queue, in queue order (no `calc_priority`; 0.5.23 sorts only
    /// under priority scheduling, not modelled), with no token budget, no chunking and no
    /// `new_token_ratio` reservation: their KV was allocated by `DecodePreallocQueue`
    /// (`pop_preallocated`) before the transfer, which admits a request only if the pool's free
    /// tokens less `num_reserved_decode_tokens` per request hold its prompt. servesim's
    /// reservation is the fleet loop's (`fleet/run.rs`, `try_transfers`: the prompt and a token
    /// against the replica's free KV less the transfers in flight), released when the transfer
    /// lands; here each request's prompt pages are allocated, in queue order, while the pool
    /// holds them (evicting as an allocation does), and the first that does not fit waits with
    /// every request behind it (`pop_preallocated` stops at the first request it cannot place).
    /// Each request's whole prompt (with a retracted one's outputs so far) is one chunk that
    /// completes its prefill: the fleet loop costs a transferred one nothing (the prebuilt batch
    /// runs no forward) and a reloaded one a token.
    fn get_new_prebuilt_batch(&mut self) -> bool {
        self.batch.clear();
        if self.waiting.is_empty() {
            return false;
        }
        let free_slots = (self.config.max_running_requests as usize).saturating_sub(self.running.len());
        let mut can_run: Vec<ReqId> = Vec::new();
        let (mut hit, mut input) = (0u64, 0u64);
        while can_run.len() < free_slots {
            let Some(&id) = self.waiting.front() else { break };
            self.init_next_round_input(id);
            let (kv_len, extend, again, node) = {
                let r = self.req(id);
                let again = r.extend.min(r.computed_before_retraction.saturating_sub(r.kv_len));
                (u64::from(r.kv_len), u64::from(r.extend), u64::from(again), r.last_node.expect("matched"))
            };
            let need = self.ceil_page(kv_len + extend) - self.ceil_page(kv_len);
            // Locked first, as `add_one_req` does: the matched prefix is not evictable for it.
            self.tree.inc_lock_ref(node);
            if !self.alloc(id, need) {
                self.tree.dec_lock_ref(node);
                break;
            }
            self.waiting.pop_front();
            self.counters.recomputed_tokens += again;
            hit += kv_len;
            input += extend;
            let r = self.req_mut(id);
            r.completes_prefill = true;
            r.status = Status::Prefilling;
            can_run.push(id);
        }
        if can_run.is_empty() {
            return false;
        }
        self.counters.prefix_cache_hits += hit;
        self.counters.prefix_cache_queries += hit + input;
        self.last_cache_hit_rate = if hit + input > 0 { hit as f64 / (hit + input) as f64 } else { 0.0 };
        self.batch = can_run;
        true
    }

    /// A decode server's new prebuilt batch, from 0.5.10 ([`SglangBehaviour::prebuilt_merged`]):
    /// `process_batch_result_prebuilt` as it is formed (each request that has produced nothing
    /// yet streams the prefill server's token now, into [`Scheduler::formed`], and finishes if
    /// that was its last; a resumed, retracted one streams nothing new), `filter_batch`, then
    /// `merge_batch` into the running batch, which the same iteration decodes. No step runs it.
    fn merge_prebuilt_batch(&mut self) {
        let batch = std::mem::take(&mut self.batch);
        let mut formed = std::mem::take(&mut self.formed);
        for &id in &batch {
            let r = self.req_mut(id);
            r.kv_len += r.extend;
            r.status = Status::Running;
            let fresh = r.num_output == 0;
            if fresh && self.finish(id, &mut formed) {
                self.requests[id as usize] = None;
                continue;
            }
            self.cache_unfinished_req(id);
            self.running.push(id);
        }
        self.formed = formed;
        self.batch = batch;
        self.batch.clear();
    }

    /// The KV tokens the next decode step of `ids` allocates: a page for each request whose
    /// context fills its last page.
    fn decode_need(&self, ids: &[ReqId]) -> u64 {
        let page = self.page();
        ids.iter().filter(|&&id| u64::from(self.req(id).kv_len) % page == 0).count() as u64 * page
    }

    /// `check_decode_mem` for the requests `ids`: evicts the cache as needed.
    fn check_decode_mem(&mut self, ids: &[ReqId]) -> bool {
        let need = self.decode_need(ids);
        self.evict_for(need);
        self.available_size() >= need
    }

    /// `release_req` for a retraction: frees the decoded KV, unlocks the
    /// prefix (it stays cached, evictable), clears `prefix_indices`.
    fn retract(&mut self, id: ReqId) {
        self.free_private(id);
        let node = self.req_mut(id).last_node.take();
        if let Some(n) = node {
            self.tree.dec_lock_ref(n);
        }
        let r = self.req_mut(id);
        r.computed_before_retraction = r.computed_before_retraction.max(r.kv_len);
        r.prefix_len = 0;
        r.kv_len = 0;
        r.status = Status::Waiting;
    }

    /// `_reqs_finishing_inflight` and the `filter_batch` that drops them
    /// ([`SglangBehaviour::skip_finishing_decode`]): with the overlap scheduler on a GPU, while
    /// a batch is in flight (its result queued), the running requests in it whose token there
    /// is their last by length (`len(output_ids) + 1 >= max_new_tokens`) leave the running
    /// batch; they finish when that result is processed. Returns the requests that stay, and
    /// whether any left.
    fn exclude_finishing_inflight(&mut self) -> (Vec<ReqId>, bool) {
        let mut ids = self.running.clone();
        if !(self.forming_next && self.config.behaviour.skip_finishing_decode) {
            return (ids, false);
        }
        // While the next batch is formed, the batch in flight is `next_plan` (`schedule`).
        let before = ids.len();
        let Scheduler { requests, next_plan, .. } = self;
        ids.retain(|&id| {
            let r = requests[id as usize].as_mut().expect("live request");
            let finishing =
                r.num_output + 1 >= r.max_new() && next_plan.scheduled.iter().any(|s| s.id == id && s.samples);
            r.left_running |= finishing;
            !finishing
        });
        let left = ids.len() < before;
        (ids, left)
    }

    /// `update_running_batch`: retraction if the next decode step does not fit. Returns the
    /// requests that decode, or `None` when no decode is formed this iteration.
    fn update_running_batch(&mut self) -> Option<Vec<ReqId>> {
        // `filter_batch` drops the requests that finished since: the batch shrank.
        if std::mem::take(&mut self.finished_since_filter) {
            self.batch_is_full = false;
        }
        // From 0.5.22 on a GPU, also those whose last token is in flight.
        let (ids, left) = self.exclude_finishing_inflight();
        if left {
            self.batch_is_full = false;
        }
        if ids.is_empty() {
            return None;
        }
        if self.check_decode_mem(&ids) {
            self.new_token_ratio =
                (self.new_token_ratio - self.config.new_token_ratio_decay()).max(self.config.min_new_token_ratio());
            return Some(ids);
        }
        if left {
            // "The queued result frees the finishing requests' KV at the end of this step;
            // decode the rest next step instead of retracting them."
            return None;
        }
        // `retract_decode`: sort by (len(output_ids), -len(origin_input_ids)) descending, pop from the end.
        let mut sorted = ids;
        sorted.sort_by(|&a, &b| {
            let (ra, rb) = (self.req(a), self.req(b));
            (rb.num_output, std::cmp::Reverse(rb.spec.prompt_len))
                .cmp(&(ra.num_output, std::cmp::Reverse(ra.spec.prompt_len)))
        });
        let old_style = !self.config.behaviour.retract_until_decode_fits;
        let mut retracted = Vec::new();
        let mut first = true;
        loop {
            let fits = if old_style {
                self.available_size() >= sorted.len() as u64 * RETRACT_DECODE_STEPS
            } else {
                self.check_decode_mem(&sorted)
            };
            if !first && fits {
                break;
            }
            if sorted.len() <= 1 {
                break;
            }
            first = false;
            let id = sorted.pop().expect("non-empty");
            self.retract(id);
            retracted.push(id);
            if old_style {
                // 0.4.10 and 0.5.1 (`retract_decode`, "use the newly evictable memory
                // instantly"): with a radix cache, `_evict_tree_cache_if_needed` evicts the
                // whole `len(sorted) × retract_decode_steps` (not the shortfall) when less is
                // free, and the loop's test reads what is free after it (0.5.2 dropped it).
                let want = sorted.len() as u64 * RETRACT_DECODE_STEPS;
                if !self.config.disable_radix_cache && self.available_size() < want {
                    self.tree.evict(want);
                }
                continue;
            }
            if !self.config.behaviour.retract_evicts_for_remaining {
                continue;
            }
            self.evict_for(sorted.len() as u64 * RETRACT_DECODE_STEPS);
        }
        self.running.retain(|id| !retracted.contains(id));
        for &id in &retracted {
            self.waiting.push_back(id);
        }
        // The decode step's allocation evicts what it must and fails only if even the whole
        // evictable cache would not do (checked without evicting: the step's own allocation
        // evicts as it always has).
        if self.available_size() + self.evictable_size() < self.decode_need(&self.running) {
            self.fatal = Some(self.decode_oom_message(self.running.len(), old_style));
        }
        self.counters.num_preemptions += retracted.len() as u64;
        self.plan.num_preempted += retracted.len() as u32;
        // New estimate from the remaining requests.
        let (out, max_new, n) = self.running.iter().fold((0u64, 0u64, 0u64), |(o, m, n), &id| {
            let r = self.req(id);
            (o + u64::from(r.num_output), m + u64::from(r.max_new()), n + 1)
        });
        let denom = max_new + u64::from(self.config.behaviour.retract_ratio_plus_one);
        if denom > 0 {
            self.new_token_ratio = ((out + RETRACT_DECODE_STEPS * n) as f64 / denom as f64).min(1.0);
        }
        self.batch_is_full = false;
        Some(self.running.clone())
    }

    /// What the engine does when the decode step after a retraction still does not fit.
    fn decode_oom_message(&self, running: usize, old_style: bool) -> String {
        let (v, page, pool) = (self.config.version, self.page(), self.config.max_total_tokens);
        let why = if old_style {
            format!(
                "retract_decode stops once {RETRACT_DECODE_STEPS} tokens per running request are free \
                 (retract_decode_steps), but a request crossing a page boundary needs a whole page of \
                 {page} tokens; the page allocation in prepare_for_decode then fails and SGLang {v} raises \
                 RuntimeError(\"Decode out of memory. Try to lower your batch size.\"), which stops the server"
            )
        } else {
            format!(
                "the last running request does not fit even after every other one is retracted; SGLang {v} \
                 either raises RuntimeError(\"Decode out of memory\") or (later releases) aborts that request, \
                 and servesim models neither"
            )
        };
        let page_hint =
            if old_style { format!(", a page_size of at most {RETRACT_DECODE_STEPS}") } else { String::new() };
        format!(
            "SGLang's next decode step of {running} request(s) does not fit in the KV pool ({pool} tokens, \
             page_size {page}): {why}. A larger pool (max_total_num_tokens / mem_fraction_static, or a binding max_total_tokens raised){page_hint} or a \
             lower max_running_requests avoids it"
        )
    }

    /// `cache_unfinished_req`: inserts the computed tokens, re-locks the new prefix.
    fn cache_unfinished_req(&mut self, id: ReqId) {
        if self.config.disable_radix_cache {
            return;
        }
        let kv_len = self.req(id).kv_len;
        let insert_len = self.floor_page(kv_len);
        // The request holds a lock on `last_node`, at the end of its prefix: the insert
        // resumes there instead of re-walking the prefix from the root (exactly the same
        // tree, access times and locks; linear instead of quadratic in a prompt prefilled
        // in small chunks).
        let node = {
            let Scheduler { tree, requests, .. } = self;
            let r = requests[id as usize].as_mut().expect("live request");
            let key = Key::new(&r.tokens, insert_len as usize);
            match r.last_node {
                Some(start) => tree.insert_from(start, r.prefix_len, key).1,
                None => tree.insert_runs(key).1,
            }
        };
        // The request's KV for those tokens is now the tree's (or a freed duplicate).
        match self.req_mut(id).last_node.replace(node) {
            // `node` is at or below the old one: `inc_lock_ref(node); dec_lock_ref(old)`.
            Some(o) => self.tree.move_lock_down(o, node),
            None => self.tree.inc_lock_ref(node),
        }
        let private_now = self.ceil_page(u64::from(kv_len)) - u64::from(insert_len);
        let r = self.req_mut(id);
        let freed = r.private - private_now.min(r.private);
        r.private -= freed;
        r.prefix_len = insert_len;
        self.private_total -= freed;
    }

    /// `cache_finished_req`: inserts prompt + output[:-1], unlocks, frees the rest.
    fn cache_finished_req(&mut self, id: ReqId) {
        if !self.config.disable_radix_cache {
            let kv_len = self.req(id).kv_len;
            let insert_len = self.floor_page(kv_len);
            {
                let Scheduler { tree, requests, .. } = self;
                let r = requests[id as usize].as_mut().expect("live request");
                tree.insert_runs(Key::new(&r.tokens, insert_len as usize));
            }
        }
        self.free_private(id);
        if let Some(n) = self.req_mut(id).last_node.take() {
            if !self.config.disable_radix_cache {
                self.tree.dec_lock_ref(n);
            }
        }
    }

    fn do_schedule(&mut self) {
        self.plan.clear();
        self.kind = None;
        // `get_next_batch_to_run`: the last prefill batch is filtered and merged; if it
        // shrank, `batch_is_full` is cleared. An empty running batch is never full (SGLang
        // takes the prefill batch as the new one).
        if std::mem::take(&mut self.last_prefill_shrinks) || self.running.is_empty() {
            self.batch_is_full = false;
        }
        // 0.5.23: the running batch itself is filtered here at every iteration, so a request
        // that finished in a decode step has left it before admission is tried.
        if self.config.behaviour.filter_running_every_step && std::mem::take(&mut self.finished_since_filter) {
            self.batch_is_full = false;
        }
        if self.disagg_decode && self.config.behaviour.prebuilt_merged && self.get_new_prebuilt_batch() {
            self.merge_prebuilt_batch();
        }
        let formed = if self.disagg_decode {
            !self.config.behaviour.prebuilt_merged && self.get_new_prebuilt_batch()
        } else {
            self.get_new_batch_prefill()
        };
        if formed {
            let mut mixed = false;
            let mut shape = self.empty_shape();
            for k in 0..self.batch.len() {
                let id = self.batch[k];
                let r = self.req(id);
                shape.add_prefill(u64::from(r.kv_len), u64::from(r.extend));
                self.plan.scheduled.push(Scheduled {
                    id,
                    num_tokens: r.extend,
                    prefill: true,
                    samples: r.completes_prefill,
                });
            }
            if self.config.enable_mixed_chunk && !self.running.is_empty() {
                // `mix_with_running`: the running requests decode in the same forward (from
                // 0.5.22 on a GPU without those whose last token is in flight).
                let (ids, left) = self.exclude_finishing_inflight();
                if left {
                    self.batch_is_full = false;
                }
                if !ids.is_empty() && self.check_decode_mem(&ids) {
                    mixed = true;
                    self.decode_into_plan(&ids, &mut shape);
                }
            }
            self.plan.shape = shape;
            self.kind = Some(StepKind::Prefill { mixed });
        } else if !self.running.is_empty() {
            let ids = self.update_running_batch();
            if self.fatal.is_some() {
                // The engine stops here: nothing is planned.
                return;
            }
            if let Some(ids) = ids {
                let mut shape = self.empty_shape();
                self.decode_into_plan(&ids, &mut shape);
                self.plan.shape = shape;
                self.kind = Some(StepKind::Decode);
            }
        } else if !self.forming_next {
            // Idle (with the overlap scheduler, only when no batch is in flight either):
            // `self_check_during_idle` resets the ratio.
            self.new_token_ratio = self.config.init_new_token_ratio();
        }
        if !self.plan.is_empty() {
            self.counters.num_steps += 1;
            self.counters.prefill_tokens_computed += self.plan.shape.prefill_tokens;
            self.launch();
        }
    }

    /// What launching the planned batch does before its results are processed
    /// (`prepare_for_extend`, `prepare_for_decode`, and the merge of a prefill batch into
    /// the running batch in `get_next_batch_to_run`): each request's KV length advances,
    /// a request whose prompt completes joins the running batch, the chunked request
    /// goes back to waiting for its next chunk. Its results (`process_batch_result`) are
    /// `do_finish_step`'s. Without [`Overlap::Gpu`] nothing is planned in between, so
    /// this is the same as doing it all when the step ends.
    fn launch(&mut self) {
        for k in 0..self.plan.scheduled.len() {
            let s = self.plan.scheduled[k];
            if !s.prefill {
                self.req_mut(s.id).kv_len += 1;
            }
        }
        if matches!(self.kind, Some(StepKind::Prefill { .. })) {
            for k in 0..self.batch.len() {
                let id = self.batch[k];
                let r = self.req_mut(id);
                r.kv_len += r.extend;
                if r.completes_prefill {
                    r.status = Status::Running;
                    self.running.push(id);
                } else {
                    // The chunked request is excluded when the batch is merged (it shrinks).
                    r.status = Status::Waiting;
                    self.last_prefill_shrinks = true;
                }
            }
        }
    }

    /// Whether a step's CPU time overlaps the GPU's ([`SglangBehaviour::cpu_overlapped`]).
    fn cpu_overlapped(&self) -> bool {
        self.config.behaviour.cpu_overlapped()
    }

    /// An empty step shape, its CPU overlap set ([`Scheduler::cpu_overlapped`]).
    fn empty_shape(&self) -> StepShape {
        StepShape { cpu_overlapped: self.cpu_overlapped(), ..Default::default() }
    }

    fn swap_next(&mut self) {
        std::mem::swap(&mut self.plan, &mut self.next_plan);
        std::mem::swap(&mut self.batch, &mut self.next_batch);
        std::mem::swap(&mut self.kind, &mut self.next_kind);
    }

    /// Whether request `id` is live and running (its in-flight result is processed; a
    /// request finished, aborted or retracted since its batch was launched is not: the
    /// token is discarded).
    fn is_running(&self, id: ReqId) -> bool {
        self.requests[id as usize].as_ref().is_some_and(|r| r.status == Status::Running)
    }

    /// Allocates one decode slot per request and adds them to the plan. Paged,
    /// `alloc_paged_token_slots_decode` first evicts for a page per request, whether or not its
    /// last page is full (with one token a page, `check_decode_mem` evicted for them already).
    fn decode_into_plan(&mut self, ids: &[ReqId], shape: &mut StepShape) {
        if self.page() > 1 {
            self.evict_for(ids.len() as u64 * self.page());
        }
        for &id in ids {
            let kv_len = u64::from(self.req(id).kv_len);
            if kv_len % self.page() == 0 {
                let ok = self.alloc(id, self.page());
                debug_assert!(ok, "check_decode_mem passed");
            }
            shape.add_decode(kv_len + 1);
            self.plan.scheduled.push(Scheduled { id, num_tokens: 1, prefill: false, samples: true });
        }
    }

    fn finish(&mut self, id: ReqId, out: &mut Vec<TokenOutput>) -> bool {
        let r = self.req_mut(id);
        r.num_output += 1;
        let finished = r.num_output >= r.spec.output_len;
        if finished {
            self.cache_finished_req(id);
            self.req_mut(id).status = Status::Finished;
            self.num_unfinished -= 1;
        }
        out.push(TokenOutput { id, finished });
        finished
    }

    fn do_finish_step(&mut self, out: &mut Vec<TokenOutput>) {
        let Some(kind) = self.kind.take() else { return };
        let mut finished_any = false;
        // Decode tokens (a decode step, or the decodes mixed into a prefill).
        if matches!(kind, StepKind::Decode | StepKind::Prefill { mixed: true }) {
            let mut decodes = std::mem::take(&mut self.decodes_buf);
            decodes.clear();
            decodes.extend(self.plan.scheduled.iter().filter(|s| !s.prefill).map(|s| s.id));
            for &id in &decodes {
                if !self.is_running(id) {
                    continue;
                }
                let left = self.req(id).left_running;
                let fin = self.finish(id, out);
                if fin && !left {
                    // A decode step's finishes shrink the running batch at its next
                    // `filter_batch`; a mixed step's are filtered with its prefill batch. (One
                    // that already left it, its last token in flight, shrinks nothing.)
                    if kind == StepKind::Decode {
                        self.finished_since_filter = true;
                    } else {
                        self.last_prefill_shrinks = true;
                    }
                }
                finished_any |= fin;
            }
            self.decodes_buf = decodes;
        }
        if matches!(kind, StepKind::Prefill { .. }) {
            let batch = std::mem::take(&mut self.batch);
            for (k, &id) in batch.iter().enumerate() {
                let Some(r) = self.requests[id as usize].as_ref() else { continue };
                // Whether this batch's chunk ended the prompt, as planned: with the overlap
                // scheduler the request's next chunk is already formed (and its
                // `completes_prefill` set for it) when this batch's results are processed.
                let s = self.plan.scheduled[k];
                debug_assert!(s.id == id && s.prefill, "a prefill batch's plan lists its requests first");
                if !s.samples {
                    // The chunked request: its computed part goes into the tree.
                    self.cache_unfinished_req(id);
                    continue;
                }
                if r.status != Status::Running {
                    continue;
                }
                let left = r.left_running;
                let fin = self.finish(id, out);
                self.last_prefill_shrinks |= fin && !left;
                if !fin {
                    self.cache_unfinished_req(id);
                }
                finished_any |= fin;
            }
            self.batch = batch;
        }
        if finished_any {
            let Scheduler { running, requests, .. } = self;
            running.retain(|&id| requests[id as usize].as_ref().is_some_and(|r| r.status != Status::Finished));
            for s in &self.plan.scheduled {
                if self.requests[s.id as usize].as_ref().is_some_and(|r| r.status == Status::Finished) {
                    self.requests[s.id as usize] = None;
                }
            }
        }
    }
}

impl Engine for Scheduler {
    fn ff_begin(&mut self, ids: &mut Vec<ReqId>) -> u64 {
        ids.clear();
        // `get_new_batch_prefill` returns at its first test: no chunked request, and
        // nothing waits or the batch is full (only a finish or a retraction clears that).
        if self.running.is_empty() || self.chunked.is_some() || !(self.batch_is_full || self.waiting.is_empty()) {
            return 0;
        }
        // Nor may the flag be about to be cleared (a finish or a shrunk prefill batch).
        if self.finished_since_filter || self.last_prefill_shrinks {
            return 0;
        }
        let gpu = self.config.behaviour.overlap == Overlap::Gpu;
        if gpu {
            // The batch launched for the run's first step is a decode of the running batch,
            // one token each: the run's steps are it and the ones `ff_step` forms after it.
            let p = &self.next_plan;
            if self.next_kind != Some(StepKind::Decode)
                || p.num_preempted != 0
                || p.scheduled.len() != self.running.len()
                || p.scheduled.iter().zip(&self.running).any(|(s, &id)| s.id != id)
            {
                return 0;
            }
        }
        let page = self.config.page_size as usize;
        self.ff_hist.clear();
        self.ff_hist.resize(page, 0);
        let mut k_max = u64::MAX;
        let mut ctx = 0u64;
        for i in 0..self.running.len() {
            let r = self.req(self.running[i]);
            // With the overlap scheduler the first step's decode is launched: its KV length
            // already counts the token it computes.
            let ahead = if gpu { 0 } else { 1 };
            if r.status != Status::Running || r.num_output == 0 || r.kv_len + ahead != r.fill_len() {
                return 0;
            }
            k_max = k_max.min(u64::from(r.spec.output_len.saturating_sub(r.num_output + 1)));
            // `ff_step(j)` allocates for a decode launched at KV length `kv_len + j`.
            let kv_len = r.kv_len;
            ctx += u64::from(kv_len) + u64::from(ahead);
            self.ff_hist[kv_len as usize % page] += 1;
        }
        if k_max == 0 {
            return 0;
        }
        self.ff_ctx0 = ctx;
        self.ff_n = self.running.len() as u64;
        ids.extend_from_slice(&self.running);
        k_max
    }

    fn ff_shape(&self, j: u64) -> StepShape {
        let n = self.ff_n;
        StepShape { cpu_overlapped: self.cpu_overlapped(), ..StepShape::decodes(n, self.ff_ctx0 + j * n) }
    }

    fn ff_step(&mut self, j: u64) -> bool {
        // Requests at a page boundary (`kv_len % page == 0`) need a page this step.
        let page = self.page();
        let at_boundary = self.ff_hist[((page - j % page) % page) as usize];
        let need = u64::from(at_boundary) * page;
        // `check_decode_mem` passes without evicting, `alloc` never evicts: no retraction.
        if self.available_size() < need {
            return false;
        }
        self.private_total += need;
        self.new_token_ratio =
            (self.new_token_ratio - self.config.new_token_ratio_decay()).max(self.config.min_new_token_ratio());
        self.counters.num_steps += 1;
        true
    }

    fn ff_end(&mut self, k: u64) {
        if k == 0 {
            return;
        }
        let page = self.page();
        let k32 = k as u32;
        for i in 0..self.running.len() {
            let id = self.running[i];
            let r = self.req_mut(id);
            // Pages taken at steps j in 0..k where (kv_len + j) % page == 0.
            let lo = u64::from(r.kv_len);
            let pages = (lo + k).div_ceil(page) - lo.div_ceil(page);
            r.private += pages * page;
            r.kv_len += k32;
            r.num_output += k32;
            self.materialize(id);
        }
        self.last_shape = self.ff_shape(k - 1);
        if self.config.behaviour.overlap == Overlap::Gpu {
            // The batch formed during the run's last step: the same decodes, k tokens on.
            self.next_plan.shape = self.ff_shape(k);
        }
    }

    fn output_lag(&self) -> bool {
        self.config.behaviour.overlap == Overlap::CpuBackend
    }

    fn tokenizer_ns_per_prompt_token(&self) -> u64 {
        TOKENIZER_NS_PER_PROMPT_TOKEN
    }

    fn add_request(&mut self, id: ReqId, spec: &RequestSpec) {
        let idx = id as usize;
        if self.requests.len() <= idx {
            self.requests.resize(idx + 1, None);
        }
        assert!(self.requests[idx].is_none(), "request {id} added twice");
        self.requests[idx] = Some(Box::new(Req {
            spec: spec.clone(),
            tokens: Vec::new(),
            num_output: 0,
            prefix_len: 0,
            last_node: None,
            kv_len: 0,
            private: 0,
            extend: 0,
            status: Status::Waiting,
            completes_prefill: false,
            computed_before_retraction: 0,
            left_running: false,
        }));
        self.num_unfinished += 1;
        self.waiting.push_back(id);
    }

    fn schedule(&mut self) -> &StepPlan {
        if self.config.behaviour.overlap != Overlap::Gpu {
            self.do_schedule();
            return &self.plan;
        }
        // `event_loop_overlap`: the step that starts now is the batch formed and launched
        // one step ago, if there was one (else one is formed now, with what has been
        // processed); the batch after it is formed now, before this step's results are
        // processed (they are, in `finish_step`).
        if self.next_plan.is_empty() {
            self.do_schedule();
        } else {
            self.swap_next();
        }
        self.next_plan.clear();
        self.next_kind = None;
        self.next_batch.clear();
        if !self.plan.is_empty() {
            self.swap_next();
            self.forming_next = true;
            self.do_schedule();
            self.forming_next = false;
            self.swap_next();
            if self.fatal.is_some() {
                // Forming the next batch raised: the server dies with this one in flight.
                self.plan.clear();
            }
        }
        &self.plan
    }

    fn take_formed_outputs(&mut self, out: &mut Vec<TokenOutput>) {
        out.append(&mut self.formed);
    }

    fn finish_step(&mut self, out: &mut Vec<TokenOutput>) {
        self.do_finish_step(out);
        self.last_shape = self.plan.shape;
        self.plan.clear();
    }

    fn abort_request(&mut self, id: ReqId) -> bool {
        let Some(Some(r)) = self.requests.get(id as usize) else { return false };
        if r.status == Status::Finished {
            return false;
        }
        if self.running.contains(&id) || self.chunked == Some(id) {
            // Admitted: its prefix is locked and it owns private tokens; released as a
            // finished request is (`cache_finished_req`).
            self.cache_finished_req(id);
            self.running.retain(|&x| x != id);
            if self.chunked == Some(id) {
                self.chunked = None;
            }
        } else {
            // Waiting: no lock held (a match that was not admitted is not locked) and no KV.
            self.waiting.retain(|&x| x != id);
            self.free_private(id);
        }
        self.requests[id as usize] = None;
        self.num_unfinished -= 1;
        true
    }

    fn num_unfinished(&self) -> usize {
        self.num_unfinished
    }

    fn num_running(&self) -> usize {
        self.running.len()
    }

    /// `sglang:num_queue_reqs` (`len(waiting_queue)`; the chunked request is not in it).
    fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// A decode server's state as `DecodePreallocQueue.pop_preallocated` reads it. SGLang holds
    /// a prebuilt batch's requests in no queue until they are merged (its `last_batch` term);
    /// here they are the formed batches' members still prefilling. A retracted request (one with
    /// outputs, back in the waiting queue here; SGLang's `retracted_queue`) freed its KV and its
    /// request slot.
    fn prealloc_view(&self) -> Option<crate::engine::PreallocView> {
        if !self.disagg_decode {
            return None;
        }
        let clip = if self.config.behaviour.prealloc_clips_output { 4096 } else { u32::MAX };
        let reserve = u64::from(self.config.num_reserved_decode_tokens);
        let mut v = crate::engine::PreallocView {
            available: self.available_size(),
            clip,
            reserve,
            metadata_buffers: 2 * u64::from(self.config.req_pool_size),
            ..Default::default()
        };
        for &id in &self.running {
            let r = self.req(id);
            v.retractable += u64::from(r.fill_len());
            v.largest_running = v.largest_running.max(u64::from(r.spec.prompt_len) + u64::from(r.max_new().min(clip)));
            v.active += 1;
        }
        // (A prebuilt batch's member whose one output was its last is freed while the batch is
        // still held: skipped.)
        for &id in self.batch.iter().chain(&self.next_batch) {
            if self.requests.get(id as usize).and_then(|r| r.as_deref()).is_some_and(|r| r.status == Status::Prefilling)
            {
                v.active += 1;
            }
        }
        for &id in &self.waiting {
            let r = self.req(id);
            if r.num_output > 0 {
                v.retracted += 1;
            } else {
                v.active += 1;
                v.available = v.available.saturating_sub(self.ceil_page(u64::from(r.spec.prompt_len)));
            }
        }
        // `pre_alloc_size = max_num_reqs * 2 if max_num_reqs <= 32 else 0` (`model_runner.py`).
        let size = u64::from(self.config.req_pool_size);
        let slots = if size <= 32 { 3 * size } else { size };
        v.free_slots = slots.saturating_sub(v.active);
        Some(v)
    }

    fn set_preallocated(&mut self, tokens: u64) {
        self.preallocated = tokens;
    }

    /// `sglang:token_usage`: evictable cache counts as free.
    fn kv_usage(&self) -> f64 {
        let used = self.config.max_total_tokens - self.available_size() - self.evictable_size();
        used as f64 / self.config.max_total_tokens as f64
    }

    fn kv_capacity_tokens(&self) -> u64 {
        self.config.max_total_tokens
    }

    fn counters(&self) -> EngineCounters {
        self.counters
    }

    fn cached_prefix_tokens(&self, spec: &RequestSpec) -> u32 {
        super::cached_prefix_tokens(&self.tree, self.config.disable_radix_cache, spec)
    }

    fn stall_reason(&self) -> Option<String> {
        // A waiting request whose admission test can never pass, even with the pool empty: a
        // retracted request before 0.5.4, charged its outputs so far twice.
        let pool = self.config.max_total_tokens;
        self.waiting.iter().find_map(|&id| {
            let r = self.req(id);
            // A decode server's prebuilt batch needs the prompt's pages only.
            let (reserved, page) = if self.disagg_decode { (0, 0) } else { self.admission_output(r) };
            let need = u64::from(r.fill_len()) + u64::from(reserved) + u64::from(page);
            (need >= pool).then(|| {
                let why = if r.num_output > 0 && !self.config.behaviour.admission_reserves_remaining_output {
                    format!(
                        "; SGLang {} admits a retracted request only if its prompt, its {} outputs so far and its \
                         whole output budget again fit (from 0.5.4 only what is left of the budget)",
                        self.config.version, r.num_output
                    )
                } else {
                    String::new()
                };
                format!(
                    "a waiting request needs {need} tokens ({} prompt and outputs so far, {reserved} reserved for its \
                     output) of a {pool}-token pool{why}",
                    r.fill_len()
                )
            })
        })
    }

    fn fatal_error(&self) -> Option<&str> {
        self.fatal.as_deref()
    }

    fn check_invariants(&self) -> Result<(), String> {
        self.tree.check()?;
        let used = self.tree.total_size() + self.private_total + self.preallocated;
        if used > self.config.max_total_tokens {
            return Err(format!("{used} KV tokens in use > pool {}", self.config.max_total_tokens));
        }
        if self.running.len() > self.config.max_running_requests as usize {
            return Err(format!("{} running > max_running_requests", self.running.len()));
        }
        // (A decode server's prebuilt batch takes no token budget.)
        if let Some(c) = self.config.chunked_prefill_size.filter(|_| !self.disagg_decode) {
            if self.last_shape.prefill_tokens > u64::from(c) {
                return Err(format!(
                    "a prefill batch of {} new tokens > chunked_prefill_size {c}",
                    self.last_shape.prefill_tokens
                ));
            }
        }
        if !self.config.enable_mixed_chunk && self.last_shape.prefill_tokens > 0 && self.last_shape.decode_tokens > 0 {
            return Err("a step mixed prefill and decode without enable_mixed_chunk".into());
        }
        let private: u64 = self.requests.iter().flatten().map(|r| r.private).sum();
        if private != self.private_total {
            return Err(format!("private tokens {private} != counter {}", self.private_total));
        }
        let mut seen = vec![0u8; self.requests.len()];
        for &id in self.running.iter().chain(self.waiting.iter()) {
            seen[id as usize] += 1;
        }
        if let Some(c) = self.chunked {
            seen[c as usize] += 1;
        }
        let mut live = 0;
        for (id, r) in self.requests.iter().enumerate() {
            match r {
                Some(r) if r.status != Status::Finished => {
                    live += 1;
                    if seen[id] != 1 {
                        return Err(format!(
                            "request {id} ({:?}) appears {} times in running+waiting+chunked",
                            r.status, seen[id]
                        ));
                    }
                    if r.status == Status::Waiting && self.chunked != Some(id as ReqId) && r.private != 0 {
                        return Err(format!("waiting request {id} holds {} private tokens", r.private));
                    }
                }
                _ => {
                    if seen[id] != 0 {
                        return Err(format!("finished request {id} still queued"));
                    }
                }
            }
        }
        if live != self.num_unfinished {
            return Err(format!("{live} live requests, counter says {}", self.num_unfinished));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Segment;

    fn cfg(version: Version) -> SglangConfig {
        SglangConfig {
            version,
            behaviour: SglangBehaviour { overlap: Overlap::CpuBackend, ..SglangBehaviour::of_release(version) },
            max_running_requests: 16,
            capped_max_running_requests: None,
            chunked_prefill_size: Some(256),
            max_prefill_tokens: 16384,
            page_size: 1,
            schedule_policy: SchedulePolicy::Fcfs,
            max_total_tokens: 4000,
            schedule_conservativeness: 1.0,
            disable_radix_cache: false,
            enable_mixed_chunk: false,
            disable_overlap_schedule: false,
            context_length: 100_000,
            cuda_graph_max_bs: None,
            forgone_cuda_graph_max_bs: None,
            seed: 0,
            req_pool_size: 16,
            num_reserved_decode_tokens: 512,
        }
    }

    fn req(key: u64, prompt: u32, output: u32) -> RequestSpec {
        RequestSpec {
            prompt: vec![Segment { key, len: prompt }],
            prompt_len: prompt,
            max_tokens: output,
            output_len: output,
            output_key: key ^ 0xfeed,
            arrival_ns: 0,
            priority: 0,
            ignore_eos: false,
            prompt_hashes: None,
        }
    }

    fn step(s: &mut Scheduler) -> Vec<(ReqId, bool)> {
        let plan = s.schedule().scheduled.iter().map(|x| (x.id, x.prefill)).collect();
        let mut out = Vec::new();
        s.finish_step(&mut out);
        s.check_invariants().unwrap();
        plan
    }

    /// From 0.5.11 a request's admission test adds one page to its prompt and output, and
    /// every admission charges that page to the batch's offsets (`_update_prefill_budget`):
    /// two requests that fit one batch exactly in 0.5.10 need a page more each from 0.5.11.
    #[test]
    fn admission_reserves_a_page_a_request_from_0_5_11() {
        for (version, both) in [(Version::new(0, 5, 10), true), (Version::new(0, 5, 11), false)] {
            // Each request: 32 prompt tokens (two pages of 16) and 100 of output: 132 tokens,
            // 148 with the page. 0.5.10 admits the second if 132 < 288 − 132; 0.5.11 needs
            // 148 < 288 − 148.
            let mut s = Scheduler::new(SglangConfig { page_size: 16, max_total_tokens: 288, ..cfg(version) });
            s.add_request(0, &req(1, 32, 100));
            s.add_request(1, &req(2, 32, 100));
            let plan = step(&mut s);
            let expect: Vec<(ReqId, bool)> = if both { vec![(0, true), (1, true)] } else { vec![(0, true)] };
            assert_eq!(plan, expect, "{version:?}");
        }
    }

    /// SGLang checks no budget before its waiting-queue loop: a request that the total budget
    /// cannot hold gets NO_TOKEN from `add_one_req`, which sets `batch_is_full`, also when
    /// the budget was already spent before the loop (the running requests' reservations
    /// above what is free, as after a retraction raises `new_token_ratio`). No admission is
    /// then tried until the batch shrinks. servesim skipped the loop there until 2026-12-04,
    /// leaving the flag clear and trying the queue again at every step.
    #[test]
    fn a_budget_spent_before_the_loop_still_sets_batch_is_full() {
        for version in [Version::new(0, 4, 10), Version::new(0, 5, 10), Version::new(0, 5, 23)] {
            let mut s = Scheduler::new(cfg(version));
            s.add_request(0, &req(1, 50, 2000));
            step(&mut s);
            for _ in 0..5 {
                step(&mut s);
            }
            // Admitted against the first request's discounted reservation.
            s.add_request(1, &req(2, 50, 2000));
            assert_eq!(step(&mut s), vec![(1, true)], "{version:?}");
            step(&mut s);
            // A retraction's ratio: the running reservations now exceed what is free.
            s.new_token_ratio = 1.0;
            let offset: f64 = s.running.iter().map(|&id| s.running_reservation(s.req(id))).sum();
            assert!(offset > s.avail_plus_evictable(), "{offset} vs {}", s.avail_plus_evictable());
            s.add_request(2, &req(3, 10, 10));
            assert!(!s.batch_is_full);
            let plan = step(&mut s);
            assert!(plan.iter().all(|&(id, prefill)| id != 2 && !prefill), "{plan:?}");
            assert!(s.batch_is_full, "NO_TOKEN sets batch_is_full ({version:?})");
        }
    }
}
