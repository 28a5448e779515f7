//! The engines: each one's scheduling policy and KV cache in its own module,
//! named as the engine names things, behind one small interface the
//! simulation loop drives.
//!
//! **Architecture invariant:** an engine owns no clock. The loop asks it to
//! [`Engine::schedule`] a step, times the step with the cost model, and calls
//! [`Engine::finish_step`] when the step's time has passed. The same engine
//! code therefore runs under simulated time and, in `servesim serve`, under
//! the wall clock.

pub mod sglang;
pub mod vllm;

use std::fmt;

use crate::cost::StepShape;
use crate::request::RequestSpec;

/// A request's index in the run (dense, in the order the client creates them).
pub type ReqId = u32;

/// An engine release, `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Version {
        Version { major, minor, patch }
    }

    /// Parses `0.28.0`, `0.28`, `v0.5.23`, `0.4.10.post2`, `0.11.0rc1` or `0.8.5+cu121`: a
    /// release of two to four numbers, then at most a PEP 440 pre-, post- or dev-release and a
    /// local label (read and ignored). Anything else (`0.28x.7`, `0.28.`, `latest`) is None: a
    /// version that only looks parsed would pick another release's rules.
    pub fn parse(s: &str) -> Option<Version> {
        let s = s.trim().trim_start_matches('v');
        let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
        let (release, suffix) = s.split_at(split);
        // `0.4.10.post2`: the dot before the suffix belongs to it.
        let release = if suffix.is_empty() { release } else { release.strip_suffix('.').unwrap_or(release) };
        let nums: Vec<u32> = release.split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
        if !(2..=4).contains(&nums.len()) || !pep440_suffix(suffix) {
            return None;
        }
        Some(Version { major: nums[0], minor: nums[1], patch: nums.get(2).copied().unwrap_or(0) })
    }
}

/// A PEP 440 suffix: `[{a|b|rc|c|alpha|beta|pre|preview}N][.postN][.devN][+local]`, each
/// part optional, `.`, `-` or `_` allowed before each.
fn pep440_suffix(s: &str) -> bool {
    let (public, local) = match s.split_once('+') {
        Some((p, l)) => (p, Some(l)),
        None => (s, None),
    };
    if let Some(l) = local {
        if l.is_empty() || !l.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')) {
            return false;
        }
    }
    let lower = public.to_ascii_lowercase();
    let mut rest = lower.as_str();
    let groups: [&[&str]; 3] =
        [&["alpha", "beta", "preview", "pre", "rc", "a", "b", "c"], &["post", "rev", "r"], &["dev"]];
    for tags in groups {
        let r = rest.trim_start_matches(['.', '-', '_']);
        if let Some(t) = tags.iter().find(|t| r.starts_with(**t)) {
            let after = &r[t.len()..];
            rest = after.trim_start_matches(|c: char| c.is_ascii_digit());
        }
    }
    rest.is_empty()
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// One request's share of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheduled {
    pub id: ReqId,
    pub num_tokens: u32,
    /// True for prompt (or recompute) tokens, false for a decode token.
    pub prefill: bool,
    /// The step samples a token for it (its last prompt chunk, or a decode); a partial
    /// prefill chunk samples nothing.
    pub samples: bool,
}

/// What one step runs: the engine's `SchedulerOutput`.
#[derive(Clone, Debug, Default)]
pub struct StepPlan {
    pub scheduled: Vec<Scheduled>,
    pub shape: StepShape,
    /// Requests preempted (vLLM) or retracted (SGLang) while planning it.
    pub num_preempted: u32,
    /// Decodes of the engine's lazy decode cohort ([`Engine::enable_lazy_decodes`]): each
    /// samples one token, none finishes; counted in `shape`, not listed in `scheduled`.
    pub lazy_decodes: u32,
    /// The plan is one of the cohort's (engine bookkeeping: its finish advances the cohort's
    /// finish count even when every member has left it since, `lazy_decodes` 0).
    pub cohort: bool,
}

impl StepPlan {
    pub fn is_empty(&self) -> bool {
        self.scheduled.is_empty() && self.lazy_decodes == 0
    }

    pub fn clear(&mut self) {
        self.scheduled.clear();
        self.shape = StepShape::default();
        self.num_preempted = 0;
        self.lazy_decodes = 0;
        self.cohort = false;
    }
}

/// [`Engine::ff_probe`]'s answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FfProbe {
    /// Ask [`Engine::ff_begin`].
    Unknown,
    /// [`Engine::ff_begin`] would return 0.
    Refused,
    /// If [`Engine::ff_begin`] opens a run, its first step has this shape.
    FirstStep(StepShape),
}

/// A request that left the lazy decode cohort ([`Engine::enable_lazy_decodes`]): the tokens
/// of its cohort plans whose output was processed are those of the cohort finishes
/// `first_tick .. first_tick + count` ([`Engine::lazy_tick`]), in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LazyDeparture {
    pub id: ReqId,
    pub first_tick: u64,
    pub count: u64,
}

/// A token produced by a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenOutput {
    pub id: ReqId,
    /// This was the request's last token; the engine has freed it.
    pub finished: bool,
}

/// The engine's counters, as its `/metrics` would show them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineCounters {
    /// vLLM `vllm:num_preemptions_total`; SGLang retractions.
    pub num_preemptions: u64,
    /// Prompt tokens looked up in the prefix cache (vLLM `prefix_cache_queries`).
    pub prefix_cache_queries: u64,
    /// Of which found cached (`prefix_cache_hits`).
    pub prefix_cache_hits: u64,
    /// Steps run.
    pub num_steps: u64,
    /// Prompt (and recomputed) tokens computed by prefill, summed over steps.
    pub prefill_tokens_computed: u64,
    /// Of which computed again: KV a preemption (vLLM) or a retraction (SGLang) discarded,
    /// below what the request had computed before (tokens found in the prefix cache on
    /// resuming are not recomputed).
    pub recomputed_tokens: u64,
}

impl EngineCounters {
    /// `prefix_cache_hits / prefix_cache_queries`, 0 with no query (the reports' `prefix_cache_hit_rate`).
    pub fn prefix_cache_hit_rate(&self) -> f64 {
        if self.prefix_cache_queries > 0 {
            self.prefix_cache_hits as f64 / self.prefix_cache_queries as f64
        } else {
            0.0
        }
    }
}

impl std::ops::Sub for EngineCounters {
    type Output = EngineCounters;
    fn sub(self, o: EngineCounters) -> EngineCounters {
        EngineCounters {
            num_preemptions: self.num_preemptions - o.num_preemptions,
            prefix_cache_queries: self.prefix_cache_queries - o.prefix_cache_queries,
            prefix_cache_hits: self.prefix_cache_hits - o.prefix_cache_hits,
            num_steps: self.num_steps - o.num_steps,
            prefill_tokens_computed: self.prefill_tokens_computed - o.prefill_tokens_computed,
            recomputed_tokens: self.recomputed_tokens - o.recomputed_tokens,
        }
    }
}

/// An SGLang decode server's state as its pre-allocation queue reads it
/// (`python/sglang/srt/disaggregation/decode.py`, `DecodePreallocQueue._allocatable_tokens` and
/// `pop_preallocated`, read in the 0.4.10, 0.4.10.post2, 0.5.1, 0.5.6 and 0.5.23 wheels): the
/// fleet loop adds what it holds itself (the requests pre-allocated and not landed yet) and
/// applies the rule (`fleet::run`, `try_prealloc`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PreallocView {
    /// Free KV tokens (`token_to_kv_pool_allocator.available_size()`), less the pages of landed
    /// requests the engine has not placed yet: SGLang allocated them at pre-allocation.
    pub available: u64,
    /// Requests that each hold `num_reserved_decode_tokens`: the running batch and the waiting
    /// queue (not the retracted ones, [`PreallocView::retracted`]).
    pub active: u64,
    /// `retractable_tokens`: Σ prompt + outputs so far over the running batch.
    pub retractable: u64,
    /// The largest `prompt + max_new_tokens` of the running batch (`max_new_tokens` clipped at
    /// `CLIP_MAX_NEW_TOKEN` from 0.5.1); 0 with none running.
    pub largest_running: u64,
    /// Retracted requests waiting to be resumed (SGLang's `retracted_queue`): while one waits,
    /// `process_decode_queue` pre-allocates nothing.
    pub retracted: u64,
    /// Request slots left in `req_to_token_pool` (its size, plus twice that when at most 32,
    /// less the running and waiting requests); the loop subtracts its pre-allocated ones.
    pub free_slots: u64,
    /// `CLIP_MAX_NEW_TOKEN` (4,096) from 0.5.1, none (`u32::MAX`) before.
    pub clip: u32,
    /// `num_reserved_decode_tokens` (`--num-reserved-decode-tokens`, 512).
    pub reserve: u64,
    /// The metadata buffers (`req_to_metadata_buffer_idx_allocator`: twice the request pool),
    /// one taken by each request from pre-allocation to landing.
    pub metadata_buffers: u64,
}

/// The interface the simulation loop drives.
pub trait Engine {
    /// A request reaches the scheduler's waiting queue.
    fn add_request(&mut self, id: ReqId, spec: &RequestSpec);
    /// Every request the run will add, told before the first: what an engine may use to
    /// skip work whose result it can prove unobservable (vLLM: the prefix-cache
    /// registration of blocks no other request can hit). Never changes a result; an
    /// engine not told (a live server's, a fleet's replicas) does all the work. `specs[i]` is
    /// the request later added as id `i`.
    fn expect_requests(&mut self, _specs: &[&RequestSpec]) {}
    /// Plans the next step. An empty plan means nothing can run now.
    fn schedule(&mut self) -> &StepPlan;
    /// The planned step has run: appends the tokens it produced to `out`.
    fn finish_step(&mut self, out: &mut Vec<TokenOutput>);
    /// Tokens streamed while [`Engine::schedule`] formed a batch, with no step run for them:
    /// moves them to `out` (the caller delivers them at the time it called `schedule`). Only
    /// an SGLang decode server from 0.5.10 has any: it streams a landed request's first token,
    /// the prefill server's, as it merges the request into the running batch
    /// ([`crate::engine::sglang::SglangBehaviour::prebuilt_merged`]).
    fn take_formed_outputs(&mut self, _out: &mut Vec<TokenOutput>) {}
    /// The client went away: the request leaves the engine now and its KV is freed, as
    /// vLLM's `finish_requests(.., FINISHED_ABORTED)` and SGLang's abort do (SGLang caches
    /// its computed prefix, as for a finished request). Called between steps only (after
    /// [`Engine::finish_step`], before the next [`Engine::schedule`]). False if the request
    /// is not live (unknown or already finished). The simulation loop never aborts.
    fn abort_request(&mut self, id: ReqId) -> bool;
    /// Requests added and not yet finished.
    fn num_unfinished(&self) -> usize;
    fn num_running(&self) -> usize;
    fn num_waiting(&self) -> usize;
    /// KV pool usage, 0–1, as the engine's own gauge defines it.
    fn kv_usage(&self) -> f64;
    /// Usable KV capacity in tokens.
    fn kv_capacity_tokens(&self) -> u64;
    fn counters(&self) -> EngineCounters;
    /// Leading prompt tokens of `spec` this engine holds in its prefix cache now, in whole
    /// blocks (vLLM) or pages (SGLang): what a router fed by the engine's KV-cache events
    /// knows (Dynamo's indexer). A pure lookup: no access time is refreshed, no node split,
    /// nothing counted, so asking never changes what the engine does. Unlike the engine's
    /// own lookup at admission it is not capped at `prompt_len - 1`. 0 with prefix caching off.
    /// After [`Engine::expect_requests`], exact only for a request not added yet (a router's
    /// question): a private running request's blocks are not registered until it is preempted.
    fn cached_prefix_tokens(&self, spec: &RequestSpec) -> u32;
    /// Why the modelled engine has stopped, when it has: the real engine raises here (SGLang's
    /// "Decode out of memory" when the decode step after a retraction still does not fit),
    /// so the run has no answer past this point. An engine that has stopped plans nothing
    /// ([`Engine::schedule`] returns an empty plan, also for a step it had formed before),
    /// so a loop asks only when a plan is empty; the simulation then stops with
    /// [`crate::simulation::StopReason::EngineError`].
    fn fatal_error(&self) -> Option<&str> {
        None
    }
    /// Why nothing more can be scheduled, when the run has stalled with requests left and the
    /// engine can say (the simulation appends it to [`crate::simulation::StopReason::Stalled`]).
    fn stall_reason(&self) -> Option<String> {
        None
    }
    /// Checks every structural invariant; used after each step in tests.
    fn check_invariants(&self) -> Result<(), String>;
    /// What SGLang's `DecodePreallocQueue.pop_preallocated` reads of a decode server before it
    /// pre-allocates KV for a request whose prefill has not started ([`PreallocView`]); `None`
    /// for every engine that is not an SGLang decode server.
    fn prealloc_view(&self) -> Option<PreallocView> {
        None
    }
    /// An SGLang decode server: the KV its pre-allocation queue holds for requests not landed
    /// yet, which SGLang allocates at pre-allocation (so its running requests cannot grow into
    /// it, and `sglang:token_usage` counts it). No other engine holds any.
    fn set_preallocated(&mut self, _tokens: u64) {}
    /// Whether a step's tokens reach the front end only when the next step has run, except
    /// a request's last token and the tokens of a step after which the engine goes idle
    /// (SGLang's overlap scheduler: the result of batch N is processed after batch N+1 is
    /// launched, and a finished request is flushed at once).
    fn output_lag(&self) -> bool {
        false
    }

    /// Tokenisation time per prompt token, ns, of a front end that tokenizes the requests
    /// one after the other in one process before they reach the scheduler (SGLang's
    /// `TokenizerManager`; `crate::delivery::FrontEnd::arrival_tokenized`). 0 (the default):
    /// ingress is the fixed `request_ingress_us` delay, requests in parallel.
    fn tokenizer_ns_per_prompt_token(&self) -> u64 {
        0
    }
    /// Serial work per request on the front end's API loop before the engine sees it, by
    /// endpoint (`chat`: `/v1/chat/completions`), on the same FIFO queue as the serial
    /// tokenizer ([`crate::delivery::FrontEnd::arrival_tokenized`]); 0: none modelled.
    fn front_end_ns_per_request(&self, _chat: bool) -> u64 {
        0
    }

    // ---- Fast-forward (see `simulation`'s module docs for why each condition is enough) ----

    /// If the next steps are plain decode steps whose plans are provably identical in
    /// everything but each request's context (every running request decodes one token, no
    /// waiting request can be admitted, no chunked prefill is in progress, nothing is
    /// preempted or retracted), fills `ids` with the running requests in the order a step
    /// schedules them and returns how many such steps can run before one of them finishes
    /// (at most; KV may end the run earlier, see [`Engine::ff_step`]). 0: no fast-forward;
    /// nothing was changed.
    fn ff_begin(&mut self, _ids: &mut Vec<ReqId>) -> u64 {
        0
    }
    /// The shape of the `j`-th step (from 0) of the run [`Engine::ff_begin`] opened; changes nothing.
    fn ff_shape(&self, _j: u64) -> StepShape {
        unreachable!("ff_begin returned 0")
    }
    /// Takes the `j`-th step's scheduling decisions (its KV allocations, counters): what
    /// `schedule` would have done. Returns false, having changed nothing, if the step would
    /// not be a plain one (its KV would not fit without evicting or preempting).
    fn ff_step(&mut self, _j: u64) -> bool {
        unreachable!("ff_begin returned 0")
    }
    /// Closes the run after `k` steps: each running request has decoded `k` more tokens.
    fn ff_end(&mut self, _k: u64) {}
    /// What [`Engine::ff_begin`] would find, where the engine can say without changing
    /// anything (a lazy decode cohort it would otherwise dissolve): the driver skips a run
    /// refused, or one whose first step would not end before the next event.
    fn ff_probe(&self) -> FfProbe {
        FfProbe::Unknown
    }

    // ---- Lazy decodes (vLLM; see `engine::vllm::scheduler`'s module docs) ----

    /// The driver handles lazy decodes: a plan's `lazy_decodes` tokens are delivered with its
    /// listed ones ([`Engine::finish_step`] then returns [`Engine::lazy_tick`]'s tokens apart),
    /// and each request's share is told when it leaves the cohort
    /// ([`Engine::take_lazy_departures`]). An engine not told lists every token.
    fn enable_lazy_decodes(&mut self) {}
    /// After [`Engine::finish_step`]: `Some((tick, n))` if the step was a cohort plan, whose
    /// `n` unlisted tokens (one per member) are the cohort's finish number `tick`.
    fn lazy_tick(&self) -> Option<(u64, u32)> {
        None
    }
    /// Moves the requests that left the cohort since the last call into `out`. Called by the
    /// driver before it delivers a step's tokens, and with `all` at the end of a run (every
    /// member leaves).
    fn take_lazy_departures(&mut self, _all: bool, _out: &mut Vec<LazyDeparture>) {}
}

#[cfg(test)]
mod tests {
    use super::Version;

    #[test]
    fn versions_parse_and_order() {
        assert_eq!(Version::parse("0.28.0"), Some(Version::new(0, 28, 0)));
        assert_eq!(Version::parse("v0.5.23"), Some(Version::new(0, 5, 23)));
        assert_eq!(Version::parse("0.4.10.post2"), Some(Version::new(0, 4, 10)));
        assert_eq!(Version::parse("0.11"), Some(Version::new(0, 11, 0)));
        assert_eq!(Version::parse("x"), None);
        assert_eq!(Version::parse("0.11.0rc1"), Some(Version::new(0, 11, 0)));
        assert_eq!(Version::parse("0.8.5+cu121"), Some(Version::new(0, 8, 5)));
        assert_eq!(Version::parse("0.10.1.1"), Some(Version::new(0, 10, 1)));
        assert_eq!(Version::parse("0.11.1.dev12+g1234abc"), Some(Version::new(0, 11, 1)));
        for junk in ["0.28x.7", "0.28.", "0.28.0x", "0..28", "latest", "0", "0.28.0+", "1.2.3.4.5", "0.5.3-beta-7x"] {
            assert_eq!(Version::parse(junk), None, "{junk}");
        }
        assert!(Version::new(0, 20, 0) > Version::new(0, 17, 1));
    }
}

/// The engine a resolved scenario describes, behind the trait (`servesim serve`'s driver;
/// the simulation loop dispatches statically on the same match in `sim::run_workload`).
pub fn build(spec: &crate::config::EngineSpec) -> Box<dyn Engine + Send> {
    match spec {
        crate::config::EngineSpec::Vllm(c) => Box::new(vllm::Scheduler::new(c.clone())),
        crate::config::EngineSpec::Sglang(c) => Box::new(sglang::Scheduler::new(c.clone())),
    }
}
