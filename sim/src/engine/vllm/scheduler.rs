//! vLLM V1's `Scheduler` (`v1/core/sched/scheduler.py`).
//!
//! One step, as `Scheduler.schedule()` builds it:
//!
//! 1. **RUNNING**, in admission order, while budget is left: each request asks
//!    for what it has not computed (1 token for a decode, the rest of its
//!    prompt for a chunked prefill), capped by `long_prefill_token_threshold`
//!    and the budget. If `allocate_slots` fails, the scheduler **preempts**
//!    (the last running request under FCFS; the lowest priority, latest
//!    arrival under `priority`) until it succeeds or preempts the asking
//!    request itself.
//! 2. **WAITING**, only if nothing was preempted in this step: the head of the
//!    queue gets a prefix-cache lookup, its first chunk is cut at the
//!    remaining budget, and it is admitted if `allocate_slots` succeeds (from
//!    0.19 with the whole prompt required to fit). The first failure stops
//!    admission (head-of-line blocking), as do `max_num_seqs` and an empty
//!    budget.
//! 3. `num_computed_tokens` advances at once. When the step has run, every
//!    request whose computed tokens reach its token count samples one token;
//!    partial prefill chunks sample nothing.
//!
//! Preemption frees all the victim's blocks tail first, resets its progress,
//! and puts it at the front of the waiting queue; on resume it recomputes
//! prompt and output, reusing whatever of its blocks is still cached.
//!
//! **Async scheduling** ([`VllmBehaviour::async_scheduling`], the default from
//! 0.14): the engine core keeps two steps in flight. Step N+1 is planned while
//! step N runs on the GPU, before N's output is processed: every request N
//! samples for gets an output placeholder (so it decodes again in N+1 without
//! waiting), a request whose last token is in flight is not scheduled again,
//! and what N's output changes (a finish freeing its blocks, a first token) is
//! seen only by the plan after N+1. The engine does this itself: `schedule`
//! hands out the plan it formed one step earlier and forms the next one, so
//! the loop that drives it is the same for both modes. The step's CPU time
//! overlaps the GPU's ([`StepShape::cpu_overlapped`]).
//!
//! Version differences are named behaviours ([`VllmBehaviour`]), resolved
//! from the release when the scenario is resolved (`config/vllm.rs`).
//!
//! # Lazy decodes (FCFS, when the driver handles them: [`Engine::enable_lazy_decodes`])
//!
//! At a high concurrency most running requests, in most plans, decode one token on
//! `allocate_slots`' fast path: nothing allocated, cached or freed, one decode of context
//! `total()` in the shape, one placeholder and one more computed token, one output at the
//! step's end. Such requests form a *cohort* (`Cohort`) whose members are counted, not
//! walked or listed: a plan adds `members` decodes and their context sum (kept as
//! `ctx_base + members × s` for cohort plan `s`) to its shape in O(1) (`lazy_decodes`);
//! its finish adds one processed token to every member it held (`Cohort::finished`). A
//! member's count fields keep their values from before its first cohort plan `s0`; with
//! `formed` cohort plans formed and `finished` finished it has computed `formed − s0` more
//! tokens and processed `max(0, finished − s0)`, the rest placeholders (the plan in flight
//! under async scheduling). A request joins after a plan scheduled it as a plain decode
//! (having sampled at least once), and is due (a calendar of `(rseq, id)` by cohort plan)
//! in the first cohort plan where its decode would leave the fast path (a block needed,
//! or a block filled and hashed: an anonymous request's filled blocks are only counted,
//! so they are caught up when it leaves, `KvCacheManager::catch_up_fills`) or sample its
//! last token. An anonymous member whose next block falls at the next token count ≡ 1
//! (mod block size) is *grouped* instead (`Cohort::groups`, by that residue): it is due only
//! for its last token, and a plan takes its group's blocks in one `get_new_anonymous` call
//! where every other block the walk takes is anonymous too and none can be refused (the
//! free queue's front is popped as many times, and anonymous blocks are interchangeable),
//! else walks the group in running order, each member's block taken in place. Why this is
//! exact:
//!
//! * **The walk's order is kept.** `running` stays the running list; each request gets
//!   `rseq` at admission, so running order is `rseq` order. A cohort plan walks, in `rseq`
//!   order, the requests outside the cohort and the members due, with the explicit walk's
//!   rules; a due member's block is taken in place (the same `allocate_slots` call, at the
//!   same point of the walk, so the free queue and the hash map change as when stepping),
//!   or it leaves the cohort and is walked as any other request. Preemption victims are
//!   the last running request (FCFS), never one walked before; a member victim leaves
//!   first, so it is preempted from its true state.
//! * **No member is cut by the budget.** A cohort plan is formed only if the budget covers
//!   the members' tokens (one each) and what every request before the last member asks
//!   (after the threshold): then no one before the last member is cut, wherever it stands,
//!   and the requests after it (a new admission's prefill chunk) get what is left after the
//!   members, as in the explicit walk; phase B sees the same budget. Otherwise the cohort
//!   dissolves (every member leaves) and the explicit walk plans the step; so do a
//!   fast-forward that will run (`ff_probe` answers without dissolving; it also refuses a
//!   run too short for the members it would dissolve, `Cohort::FF_MEMBERS_PER_STEP`, which
//!   only moves steps between two exact paths), an abort, and the priority policy (never
//!   formed). For `Cohort::QUIET` plans after a fast-forward ran,
//!   none forms (it would be dissolved by the next run).
//! * **What a member's decode does is what the counts say.** Between its joining and its
//!   due plan its decode is on the fast path (its block limit, `lazy_limit`, is fixed while
//!   it is a member: it allocates nothing and no one frees its blocks), it is not the
//!   last token (so no finish, no free, no skip for a last token in flight), and the
//!   shape's decode terms are sums (order-free). Plans finish in order, so the finish count
//!   says how many of a member's plans have been processed.
//! * **Leaving restores the explicit state.** A member that leaves while its token of the
//!   plan in flight is not processed (async) is listed in that plan (at its end: it does
//!   not finish there, so the order of finishes and frees is unchanged; a dissolution
//!   sorts the list back into running order, which the fast-forward reads); the driver is
//!   told which cohort finishes brought its processed tokens, before any later one.
//!
//! Not modelled: speculative decoding, the 0.25+ watermark (default 0),
//! 0.33's adaptive threshold and prefill interval (off by default), encoder
//! budgets, LoRA; under async scheduling, blocks whose last token is still a
//! placeholder are hashed when scheduled, one step before vLLM caches them.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, VecDeque};

use super::kv_cache_manager::{ComputedBlocks, KvCacheManager, RequestKv};
use crate::cost::StepShape;
use crate::engine::{Engine, EngineCounters, FfProbe, LazyDeparture, ReqId, Scheduled, StepPlan, TokenOutput, Version};
use crate::request::{extend_block_hashes, first_block_hash};

/// vLLM 0.11.0's chat endpoint, per request, on the API server's one event loop before the
/// engine sees the request ([`Engine::front_end_ns_per_request`]): `resolve_chat_template_kwargs`
/// (`entrypoints/chat_utils.py`, added by PR #25794) builds a jinja2 sandboxed environment,
/// parses the chat template and walks it for its variables on every chat request; 0.10.x has
/// no such step and 0.11.1 on memoise it (`_cached_resolve_chat_template_kwargs`). 17.1 ms:
/// the median of five runs of `python3 validation/front_end/template_parse.py
/// validation/front_end/qwen3_like.jinja` on this project's 2-core build machine (16.9–17.8 ms;
/// a 4,169-character Qwen3-style template, jinja2 3.1.6, Python 3.11). The same machine gave
/// 20–30 ms at other times of the day (a shared VM's speed varies), and PR #20065 reports
/// 6–8 ms for a similar uncached walk of a Llama template. A server's CPU is not this machine's
/// and the real template's length varies by model: a fixed figure is the shortcut
/// (`docs/front-end.md`). The rest of the front end (the 2 ms tokenizer microbatch window,
/// detokenization on the same loop) is not modelled.
pub const VLLM_0110_CHAT_TEMPLATE_KWARGS_NS: u64 = 17_100_000;

/// What differs between vLLM releases, named: resolved from the release (and the
/// scenario's flags) in `config/vllm.rs` ([`VllmBehaviour::of_release`]), read by the
/// scheduler. No release comparison is made inside the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VllmBehaviour {
    /// ≥ 0.11.1: lookups by resumed preempted requests are left out of the prefix-cache
    /// query and hit counters (0.11 counts them).
    pub skip_preempted_prefix_stats: bool,
    /// ≥ 0.27: the prefix-cache counters are recorded once, when a request is admitted
    /// (failed lookups of a blocked head of queue are not counted); before, every lookup.
    pub prefix_stats_at_admission: bool,
    /// ≥ 0.19 (`scheduler_reserve_full_isl`): a waiting request is admitted only if its
    /// whole current length fits, not just its first chunk.
    pub full_prompt_admission: bool,
    /// ≥ 0.31: `long_prefill_token_threshold` is ignored when running + waiting holds
    /// a single request.
    pub long_prefill_alone_rule: bool,
    /// ≥ 0.33: under the `priority` policy, a running request that preempted itself
    /// lets the walk continue with the next one (before, the walk stops).
    pub priority_walk_continues: bool,
    /// Async scheduling (`--async-scheduling`; on by default from 0.14).
    pub async_scheduling: bool,
    /// Chunked prefill (`--enable-chunked-prefill`, on by default). Off (modelled from 0.12):
    /// a waiting request whose next tokens (after its prefix-cache hit and the
    /// `long_prefill_token_threshold` cap) exceed the step's remaining budget ends the walk
    /// of the waiting queue (`break`): it and every request behind it wait for a later step.
    pub chunked_prefill: bool,
    /// ≥ 0.23: freed blocks without a hash go to the front of the free queue, to be reused
    /// first ("LIFO reuse of non-cached blocks"), hashed ones to the back (`BlockPool.free_blocks`:
    /// `prepend_n` / `append_n`); before, every freed block to the back.
    pub unhashed_freed_first: bool,
}
use crate::request::RequestSpec;

/// `--scheduling-policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    Fcfs,
    Priority,
}

/// The resolved vLLM engine configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct VllmConfig {
    pub version: Version,
    /// The release's behaviours (and `async_scheduling`).
    pub behaviour: VllmBehaviour,
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
    /// 0 = off.
    pub long_prefill_token_threshold: u32,
    pub block_size: u32,
    pub enable_prefix_caching: bool,
    /// `num_gpu_blocks`, the null block included.
    pub num_gpu_blocks: u32,
    pub max_model_len: u32,
    pub policy: Policy,
}

impl VllmConfig {
    /// Usable KV capacity in tokens.
    pub fn kv_capacity_tokens(&self) -> u64 {
        u64::from(self.num_gpu_blocks - 1) * u64::from(self.block_size)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Waiting,
    Running,
    Preempted,
    Finished,
}

/// Laid out by hand (`repr(C)`), one request to a whole number of cache lines: the fields a
/// plan's walk, its joins and a step's finish read (the counts, the lengths, the status, the
/// running order, the cohort membership) share the first line, the KV state follows.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
struct Request {
    num_computed_tokens: u32,
    num_output_tokens: u32,
    /// `num_output_placeholders`: tokens sampled by steps in flight, not yet processed.
    placeholders: u32,
    /// `spec.prompt_len` and `spec.output_len`, beside the counts.
    prompt_len: u32,
    output_len: u32,
    status: Status,
    /// Its place in `running` (running order is the order of these, given at admission).
    rseq: u64,
    /// A member of the lazy decode cohort: `(s0, due)`, its first cohort plan and the cohort
    /// plan it must be scheduled explicitly in (see [`Cohort`]). Its count fields then hold
    /// their values from before plan `s0`, plus what plans formed before `s0` did to them.
    member: Option<(u64, u64)>,
    kv: RequestKv,
    /// A member whose new blocks the cohort takes in aggregate (see [`Cohort::groups`]):
    /// `(group, position in it)`. Its `kv.anon` then lags: it holds
    /// `max(kv.anon, ⌈computed / block_size⌉)` anonymous blocks.
    group: Option<(u32, u32)>,
    spec: RequestSpec,
    /// Order of arrival at the engine (the priority queue's tie-break).
    arrival_seq: u64,
    num_preemptions: u32,
    /// The most tokens it had computed when last preempted: prefill below it is recompute
    /// (`EngineCounters::recomputed_tokens`).
    computed_before_preemption: u32,
}

impl Request {
    /// A request as it reaches the waiting queue (`arrival_seq` its arrival order).
    fn arriving(spec: &RequestSpec, arrival_seq: u64, private: bool) -> Request {
        Request {
            prompt_len: spec.prompt_len,
            output_len: spec.output_len,
            spec: spec.clone(),
            arrival_seq,
            num_computed_tokens: 0,
            num_output_tokens: 0,
            placeholders: 0,
            status: Status::Waiting,
            kv: RequestKv::with_private(private),
            num_preemptions: 0,
            computed_before_preemption: 0,
            rseq: 0,
            member: None,
            group: None,
        }
    }

    /// Becomes [`Request::arriving`]`(spec, arrival_seq, private)` in place, keeping its
    /// buffers (its prompt's segments, its KV state's vectors): a finished request's slot taken
    /// over by a new one.
    fn arrive(&mut self, spec: &RequestSpec, arrival_seq: u64, private: bool) {
        // Every field named: one added must be set here too.
        let Request {
            prompt_len,
            output_len,
            spec: my_spec,
            arrival_seq: my_seq,
            num_computed_tokens,
            num_output_tokens,
            placeholders,
            status,
            kv,
            num_preemptions,
            computed_before_preemption,
            rseq,
            member,
            group,
        } = self;
        *prompt_len = spec.prompt_len;
        *output_len = spec.output_len;
        my_spec.clone_from(spec);
        *my_seq = arrival_seq;
        *num_computed_tokens = 0;
        *num_output_tokens = 0;
        *placeholders = 0;
        *status = Status::Waiting;
        kv.reset(private);
        *num_preemptions = 0;
        *computed_before_preemption = 0;
        *rseq = 0;
        *member = None;
        *group = None;
    }

    /// Of `n` prefill tokens from position `from`, those it computes again: below what it had
    /// computed before its last preemption.
    #[inline]
    fn recomputed_in(&self, from: u32, n: u32) -> u64 {
        u64::from(n.min(self.computed_before_preemption.saturating_sub(from)))
    }

    fn num_tokens(&self) -> u32 {
        self.prompt_len + self.num_output_tokens
    }
    /// The length the scheduler brings `num_computed_tokens` up to: processed tokens
    /// plus output placeholders (`num_tokens_with_spec + num_output_placeholders`).
    fn total(&self) -> u32 {
        self.num_tokens() + self.placeholders
    }
}

/// The live requests by id, kept together in one vector of slots (`slots`) rather than boxed
/// one by one: a step touches a few of them, which then share cache lines and pages with the
/// others running. A finished request's slot is freed as it stands, and the next request to
/// arrive takes it over in place, buffers included, so that a run allocates per request only
/// while the live count grows, and no request moves.
#[derive(Clone, Debug, Default)]
struct Requests {
    /// By id: the request's slot, [`Requests::NONE`] if it is not live.
    slot: Vec<u32>,
    slots: Vec<Request>,
    /// Slots whose request finished.
    free: Vec<u32>,
}

impl Requests {
    const NONE: u32 = u32::MAX;

    /// Live request `id`.
    #[inline]
    fn get(&self, id: ReqId) -> Option<&Request> {
        // `NONE` is past any slot.
        self.slots.get(*self.slot.get(id as usize)? as usize)
    }

    #[inline]
    fn get_mut(&mut self, id: ReqId) -> Option<&mut Request> {
        self.slots.get_mut(*self.slot.get(id as usize)? as usize)
    }

    /// One more than the largest id ever added.
    fn ids(&self) -> usize {
        self.slot.len()
    }

    /// Adds request `id` (not live): `arriving(spec, arrival_seq, private)` in a free slot, in
    /// place, or in a new one.
    fn insert(&mut self, id: ReqId, spec: &RequestSpec, arrival_seq: u64, private: bool) {
        let idx = id as usize;
        if self.slot.len() <= idx {
            self.slot.resize(idx + 1, Self::NONE);
        }
        debug_assert_eq!(self.slot[idx], Self::NONE);
        self.slot[idx] = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize].arrive(spec, arrival_seq, private);
                s
            }
            None => {
                self.slots.push(Request::arriving(spec, arrival_seq, private));
                (self.slots.len() - 1) as u32
            }
        };
    }

    /// Removes live request `id`, if it is: its slot is free.
    fn remove(&mut self, id: ReqId) {
        let Some(&s) = self.slot.get(id as usize) else { return };
        if s == Self::NONE {
            return;
        }
        self.slot[id as usize] = Self::NONE;
        self.free.push(s);
    }
}

/// `list.iter().position(|&x| x == id)`, sixteen entries at a time (a test per chunk without
/// an early exit, which the compiler vectorises): the first index holding `id`.
#[inline]
fn position_of(list: &[ReqId], id: ReqId) -> Option<usize> {
    const W: usize = 16;
    let mut chunks = list.chunks_exact(W);
    let mut base = 0;
    for c in &mut chunks {
        if c.iter().fold(false, |any, &x| any | (x == id)) {
            return c.iter().position(|&x| x == id).map(|p| base + p);
        }
        base += W;
    }
    chunks.remainder().iter().position(|&x| x == id).map(|p| base + p)
}

/// `RequestQueue`: a FCFS deque, or a heap ordered by (priority, arrival).
#[derive(Clone, Debug)]
enum WaitingQueue {
    Fcfs(VecDeque<ReqId>),
    Priority(BTreeSet<(i32, u64, ReqId)>),
}

/// The fast-forward's calendar: the step at which each running request next leaves
/// `allocate_slots`' fast path, taken step by step in running order, as a heap of
/// `(step, position)` pairs would give them. The next [`FfCalendar::RING`] steps are a ring
/// of per-step buckets (a bucket is tagged with its run and step, so a stale one reads as
/// empty and nothing is cleared between runs). Later steps, up to [`FfCalendar::WHEEL`] spans
/// of `RING` steps ahead, wait in a wheel of per-span buckets (tagged the same way), each
/// moved into the ring, entry by entry, when the step taken reaches its span (every entry of
/// it is then less than `RING` steps ahead); the earliest step of each is kept. Steps beyond
/// the wheel wait in a queue while they come in step order, each taken from its front, and in
/// a heap when they do not. The earliest step due is kept, so that a step with nothing due
/// costs one comparison.
/// The lazy decode cohort's calendar is one too, of `(rseq, id)` entries by cohort plan.
#[derive(Clone, Debug)]
struct FfCalendar<T = u32> {
    /// `(run, step, positions)`.
    ring: Vec<(u64, u64, Vec<T>)>,
    /// `(run, span, earliest step, (step, position))` by span `step / RING`, modulo `WHEEL`.
    wheel: Vec<(u64, u64, u64, Vec<(u64, T)>)>,
    /// The first span not yet moved into the ring (every span before it has been).
    span: u64,
    far: BinaryHeap<Reverse<(u64, T)>>,
    /// Later steps pushed in step order (each at or after the last one's): a sorted queue,
    /// beside `far`.
    far_queue: VecDeque<(u64, T)>,
    run: u64,
    /// The earliest step with a position due, `u64::MAX` if none.
    next: u64,
    /// Positions in the ring.
    near: usize,
    /// Positions in the wheel.
    wheeled: usize,
}

impl<T> Default for FfCalendar<T> {
    fn default() -> Self {
        FfCalendar {
            ring: Vec::new(),
            wheel: Vec::new(),
            span: 0,
            far: BinaryHeap::new(),
            far_queue: VecDeque::new(),
            run: 0,
            next: u64::MAX,
            near: 0,
            wheeled: 0,
        }
    }
}

impl<T: Ord + Copy> FfCalendar<T> {
    const RING: u64 = 64;
    /// Spans of `RING` steps in the wheel.
    const WHEEL: u64 = 64;

    /// Empties the calendar for a new run.
    fn clear(&mut self) {
        if self.ring.is_empty() {
            self.ring = (0..Self::RING).map(|_| (0, 0, Vec::new())).collect();
            self.wheel = (0..Self::WHEEL).map(|_| (0, 0, 0, Vec::new())).collect();
        }
        self.run += 1;
        self.span = 0;
        self.far.clear();
        self.far_queue.clear();
        self.next = u64::MAX;
        self.near = 0;
        self.wheeled = 0;
    }

    /// Adds `pos` to the ring's bucket of `step` (less than `RING` steps after the last step
    /// taken or pushed at).
    #[inline]
    fn push_near(&mut self, step: u64, pos: T) {
        let b = &mut self.ring[(step % Self::RING) as usize];
        if (b.0, b.1) != (self.run, step) {
            *b = (self.run, step, std::mem::take(&mut b.2));
            b.2.clear();
        }
        b.2.push(pos);
        self.near += 1;
    }

    /// Position `pos` is due at `step`, pushed at step `now` (`now <= step`).
    #[inline]
    fn push(&mut self, now: u64, step: u64, pos: T) {
        debug_assert!(step >= now);
        self.next = self.next.min(step);
        if step - now < Self::RING {
            self.push_near(step, pos);
            return;
        }
        // Its span is after `now`'s, so not moved into the ring yet (`span` is at most the
        // span after the last step taken, which is at most `now`).
        let k = step / Self::RING;
        debug_assert!(k >= self.span);
        if k < self.span + Self::WHEEL {
            let b = &mut self.wheel[(k % Self::WHEEL) as usize];
            if (b.0, b.1) != (self.run, k) {
                *b = (self.run, k, u64::MAX, std::mem::take(&mut b.3));
                b.3.clear();
            }
            b.2 = b.2.min(step);
            b.3.push((step, pos));
            self.wheeled += 1;
            return;
        }
        if self.far_queue.back().is_none_or(|&(last, _)| last <= step) {
            self.far_queue.push_back((step, pos));
        } else {
            self.far.push(Reverse((step, pos)));
        }
    }

    /// Whether some position is due at `step`.
    #[inline]
    fn due(&self, step: u64) -> bool {
        debug_assert!(self.next >= step, "a step was skipped");
        self.next == step
    }

    /// Moves the positions due at `step` into `out`, in ascending order.
    fn take_due(&mut self, step: u64, out: &mut Vec<T>) {
        // The spans up to `step`'s go into the ring: their entries are at or after `step`
        // (none is due before the earliest, `next`) and before the end of `step`'s span.
        let last = step / Self::RING;
        while self.span <= last {
            if self.wheeled > 0 {
                let b = &mut self.wheel[(self.span % Self::WHEEL) as usize];
                if (b.0, b.1) == (self.run, self.span) && !b.3.is_empty() {
                    let mut moved = std::mem::take(&mut b.3);
                    self.wheeled -= moved.len();
                    for &(s, pos) in &moved {
                        debug_assert!(s >= step && s - step < Self::RING);
                        self.push_near(s, pos);
                    }
                    moved.clear();
                    self.wheel[(self.span % Self::WHEEL) as usize].3 = moved;
                }
            } else {
                // Nothing in the wheel: no span to move.
                self.span = self.span.max(last);
            }
            self.span += 1;
        }
        let b = &mut self.ring[(step % Self::RING) as usize];
        if (b.0, b.1) == (self.run, step) {
            self.near -= b.2.len();
            out.append(&mut b.2);
        }
        while let Some(&Reverse((s, pos))) = self.far.peek() {
            debug_assert!(s >= step);
            if s != step {
                break;
            }
            self.far.pop();
            out.push(pos);
        }
        while let Some(&(s, pos)) = self.far_queue.front() {
            debug_assert!(s >= step);
            if s != step {
                break;
            }
            self.far_queue.pop_front();
            out.push(pos);
        }
        // In ascending order whichever of the ring, the heap and the queue held them.
        out.sort_unstable();
        // The ring holds steps before `step + RING` (each was pushed less than `RING` steps
        // ahead of a step no later than this one, or moved from a span no later than this
        // step's); the wheel's spans are after this step's, in span order.
        let heap_next = self.far.peek().map_or(u64::MAX, |&Reverse((s, _))| s);
        self.next = heap_next.min(self.far_queue.front().map_or(u64::MAX, |&(s, _)| s));
        if self.wheeled > 0 {
            for k in self.span..self.span + Self::WHEEL {
                let b = &self.wheel[(k % Self::WHEEL) as usize];
                if (b.0, b.1) == (self.run, k) && !b.3.is_empty() {
                    self.next = self.next.min(b.2);
                    break;
                }
            }
        }
        if self.near == 0 {
            return;
        }
        for s in step + 1..(step + Self::RING).min(self.next) {
            let b = &self.ring[(s % Self::RING) as usize];
            if (b.0, b.1) == (self.run, s) && !b.2.is_empty() {
                self.next = s;
                break;
            }
        }
    }
}

/// The lazy decode cohort (module docs, "Lazy decodes"): running requests that decode one
/// token in every plan the cohort is in, with no block to allocate or fill and no last token,
/// counted rather than listed. A member's count fields hold their values from before its first
/// cohort plan `s0`; with `formed` cohort plans formed and `finished` finished (in order), it
/// has been scheduled in `formed − s0` of them and their output processed for
/// `finished − s0` (at least 0). It is scheduled explicitly again from the cohort plan `due`
/// on (its calendar entry): the first in which its decode leaves `allocate_slots`' fast path
/// (for a grouped member, the group's blocks are taken by the plan: only its last token),
/// or samples its last token.
#[derive(Clone, Debug, Default)]
struct Cohort {
    /// The driver handles lazy decodes ([`Engine::enable_lazy_decodes`]).
    enabled: bool,
    /// The cohort's bookkeeping stands (`outside` holds every running non-member); off while
    /// the explicit walk plans (after [`Scheduler::dissolve`]).
    active: bool,
    /// The running requests that are not members, `(rseq, id)` in running order.
    outside: Vec<(u64, ReqId)>,
    members: u32,
    /// Cohort plans formed and finished; the next plan's cohort number is `formed`.
    formed: u64,
    finished: u64,
    /// Σ over members of (their `total()` before `s0`) − `s0`, wrapping: their decodes'
    /// context in cohort plan `s` is this + `members × s`.
    ctx_base: u64,
    /// `(rseq, id)` by `due` cohort plan; an entry whose request is no longer a member with
    /// that `due` is stale.
    cal: FfCalendar<(u64, ReqId)>,
    /// A departed member's token is listed at the end of the plan in flight.
    flight_unordered: bool,
    /// Members that left since the driver last asked, with their processed cohort tokens.
    departed: Vec<LazyDeparture>,
    /// The last finished plan's cohort number and unlisted tokens, if it was a cohort plan.
    last_tick: Option<(u64, u32)>,
    /// Reused: a cohort plan's walk, its members due, those that leave in it.
    walk: Vec<(u64, ReqId)>,
    due: Vec<(u64, ReqId)>,
    left: Vec<(u64, ReqId)>,
    merged: Vec<(u64, ReqId)>,
    /// Anonymous members whose decodes need a new block exactly at every token count
    /// `≡ 1 (mod block_size)` (from their joining on), by `(total() before s0 − s0) mod
    /// block_size`: in cohort plan `s`, group `(1 − s) mod block_size` needs one block each.
    /// Where nothing else in the plan's walk touches the pool but anonymous allocations that
    /// cannot fail, the order of those allocations changes nothing (anonymous blocks are
    /// interchangeable, and the free queue's front is popped the same number of times), so
    /// the group's blocks are taken in one call; otherwise the group is walked in running
    /// order, each member's block taken in place.
    groups: Vec<Vec<(u64, ReqId)>>,
    grow: Vec<(u64, ReqId)>,
    /// Plans formed since a fast-forward last ran steps: the explicit walk plans the first
    /// [`Cohort::QUIET`] (a cohort formed between two runs would be dissolved by the next
    /// at once, its forming and dissolving costing more than the walks it saves).
    quiet: u32,
}

impl Cohort {
    const QUIET: u32 = 4;
    /// A fast-forward that would dissolve the cohort is opened only if its run could last at
    /// least one step per this many members ([`Scheduler::ff_probe`]'s estimate): a short run
    /// saves less than the members' leaving, the explicit plans after it and their joining
    /// again cost (the bench's c=256 case ran 1.5× faster declining runs of fewer than
    /// 16 steps there, most of them 2–3 steps long; every other row kept its share).
    const FF_MEMBERS_PER_STEP: u64 = 16;
}

/// The vLLM V1 scheduler and its KV cache.
#[derive(Clone, Debug)]
pub struct Scheduler {
    config: VllmConfig,
    kv: KvCacheManager,
    /// Live requests by id.
    requests: Requests,
    running: Vec<ReqId>,
    waiting: WaitingQueue,
    next_arrival_seq: u64,
    num_unfinished: usize,
    /// The plan (`plans[cur]`) and, under async scheduling, the plan formed for the step after
    /// the one running (`plans[cur ^ 1]`): swapping the two flips `cur`, moving nothing.
    plans: [StepPlan; 2],
    cur: usize,
    counters: EngineCounters,
    hit: ComputedBlocks,
    /// The waiting queue head's last prefix lookup (phase B), its blocks watched by the
    /// pool while `head_memo` names it.
    head_hit: ComputedBlocks,
    /// `(request, num_tokens)` whose lookup `head_hit` holds, while it stands: a head of
    /// queue that cannot be admitted is looked up at every step, and its hit changes only
    /// when one of its blocks is evicted or the block after it is cached (see
    /// [`Scheduler::head_lookup`]).
    head_memo: Option<(ReqId, u32)>,
    /// Reused between steps: (request, tokens) scheduled.
    scheduled_buf: Vec<(ReqId, u32)>,
    /// Reused between steps: the requests that finish in a step.
    finished_buf: Vec<ReqId>,
    /// Tokens of the last step run (for the invariant checks).
    last_tokens: u64,
    /// Fast-forward: the run's requests that leave `allocate_slots`' fast path, as
    /// (step, position in `running`), soonest first and in running order within a step.
    ff_calendar: FfCalendar,
    /// Fast-forward: each running request's token count at the run's first step.
    ff_base: Vec<u32>,
    /// The first-block hashes that more than one of the run's requests hold, sorted
    /// ([`Engine::expect_requests`]); `None` until told, when no request is private.
    shared_first_blocks: Option<Vec<u64>>,
    /// Whether request `id` (an index of the specs [`Engine::expect_requests`] was told) is
    /// private, found there (so that `add_request` does not hash its first block again).
    private_by_id: Vec<bool>,
    ff_tmp: Vec<u32>,
    /// Fast-forward: Σ decode contexts of the run's first step.
    ff_ctx0: u64,
    ff_calendar_ready: bool,
    /// Fast-forward past a blocked head of the waiting queue (see
    /// [`Scheduler::ff_head_stays_blocked`]); `None` when phase B does not touch the queue.
    ff_head: Option<FfHead>,
    /// Fast-forward: the hashes a step caches.
    ff_hashes: Vec<u64>,
    /// The lazy decode cohort.
    cohort: Cohort,
    /// The next admission's `rseq`.
    next_rseq: u64,
}

/// The waiting queue's head during a fast-forward past it: phase B looks it up at every step
/// (kept in `head_hit`, as when stepping) and must fail to admit it.
#[derive(Clone, Copy, Debug)]
struct FfHead {
    id: ReqId,
    num_tokens: u32,
    preempted_before: bool,
}

impl Scheduler {
    pub fn new(config: VllmConfig) -> Scheduler {
        let kv = KvCacheManager::new(config.num_gpu_blocks, config.block_size, config.enable_prefix_caching)
            .with_unhashed_freed_first(config.behaviour.unhashed_freed_first);
        let waiting = match config.policy {
            Policy::Fcfs => WaitingQueue::Fcfs(VecDeque::new()),
            Policy::Priority => WaitingQueue::Priority(BTreeSet::new()),
        };
        Scheduler {
            config,
            kv,
            requests: Requests::default(),
            running: Vec::new(),
            waiting,
            next_arrival_seq: 0,
            num_unfinished: 0,
            plans: [StepPlan::default(), StepPlan::default()],
            cur: 0,
            counters: EngineCounters::default(),
            hit: ComputedBlocks::default(),
            head_hit: ComputedBlocks::default(),
            head_memo: None,
            scheduled_buf: Vec::new(),
            finished_buf: Vec::new(),
            last_tokens: 0,
            ff_calendar: FfCalendar::default(),
            ff_base: Vec::new(),
            ff_tmp: Vec::new(),
            ff_ctx0: 0,
            ff_calendar_ready: false,
            ff_head: None,
            ff_hashes: Vec::new(),
            shared_first_blocks: None,
            private_by_id: Vec::new(),
            cohort: Cohort::default(),
            next_rseq: 0,
        }
    }

    pub fn config(&self) -> &VllmConfig {
        &self.config
    }

    /// Whether live request `id` is private ([`RequestKv::private`]; tests and diagnostics).
    pub fn is_private(&self, id: ReqId) -> bool {
        self.req(id).kv.private
    }

    fn req(&self, id: ReqId) -> &Request {
        self.requests.get(id).expect("live request")
    }

    fn req_mut(&mut self, id: ReqId) -> &mut Request {
        self.requests.get_mut(id).expect("live request")
    }

    fn waiting_len(&self) -> usize {
        match &self.waiting {
            WaitingQueue::Fcfs(q) => q.len(),
            WaitingQueue::Priority(q) => q.len(),
        }
    }

    fn waiting_peek(&self) -> Option<ReqId> {
        match &self.waiting {
            WaitingQueue::Fcfs(q) => q.front().copied(),
            WaitingQueue::Priority(q) => q.first().map(|&(_, _, id)| id),
        }
    }

    fn waiting_pop(&mut self) {
        match &mut self.waiting {
            WaitingQueue::Fcfs(q) => {
                q.pop_front();
            }
            WaitingQueue::Priority(q) => {
                q.pop_first();
            }
        }
    }

    /// `prepend_request` (FCFS: the front) / heap push (priority).
    fn waiting_prepend(&mut self, id: ReqId) {
        let (prio, seq) = {
            let r = self.req(id);
            (r.spec.priority, r.arrival_seq)
        };
        match &mut self.waiting {
            WaitingQueue::Fcfs(q) => q.push_front(id),
            WaitingQueue::Priority(q) => {
                q.insert((prio, seq, id));
            }
        }
    }

    /// Removes `id` from the waiting queue (an abort, or a preempted request finished by
    /// its in-flight token).
    fn waiting_remove(&mut self, id: ReqId) {
        if self.head_memo.is_some_and(|(m, _)| m == id) {
            self.drop_head_memo();
        }
        let key = {
            let r = self.req(id);
            (r.spec.priority, r.arrival_seq, id)
        };
        match &mut self.waiting {
            WaitingQueue::Fcfs(q) => q.retain(|&x| x != id),
            WaitingQueue::Priority(q) => {
                q.remove(&key);
            }
        }
    }

    /// `_preempt_request`.
    fn preempt(&mut self, id: ReqId) {
        let Scheduler { kv, requests, .. } = self;
        let r = requests.get_mut(id).expect("live request");
        kv.register_private(&r.spec, &mut r.kv);
        kv.free(&mut r.kv);
        r.status = Status::Preempted;
        r.computed_before_preemption = r.computed_before_preemption.max(r.num_computed_tokens);
        r.num_computed_tokens = 0;
        r.num_preemptions += 1;
        self.counters.num_preemptions += 1;
        self.waiting_prepend(id);
    }

    /// Picks and removes the preemption victim from `running`; returns it and
    /// its former index.
    fn pop_victim(&mut self) -> (ReqId, usize) {
        match self.config.policy {
            Policy::Fcfs => {
                let idx = self.running.len() - 1;
                (self.running.pop().expect("running is not empty"), idx)
            }
            Policy::Priority => {
                // max(running, key=(priority, arrival_time))
                let mut best = 0;
                for i in 1..self.running.len() {
                    let (a, b) = (self.req(self.running[i]), self.req(self.running[best]));
                    if (a.spec.priority, a.arrival_seq) > (b.spec.priority, b.arrival_seq) {
                        best = i;
                    }
                }
                (self.running.remove(best), best)
            }
        }
    }

    fn threshold_cap(&self, n: u32) -> u32 {
        let t = self.config.long_prefill_token_threshold;
        // ≥ 0.31 ignores the threshold when only one request is running or waiting.
        let alone = self.config.behaviour.long_prefill_alone_rule && self.running.len() + self.waiting_len() == 1;
        if t > 0 && n > t && !alone {
            t
        } else {
            n
        }
    }

    /// `allocate_slots` of `n` new tokens for the running request `id` (`total` tokens,
    /// `computed` of them computed), which has no prefix hit to bring: false if the pool is
    /// short (the caller preempts).
    #[inline]
    fn allocate_running(&mut self, id: ReqId, total: u32, computed: u32, n: u32) -> bool {
        let Scheduler { kv, requests, hit, .. } = self;
        hit.blocks.clear();
        hit.num_tokens = 0;
        let r = requests.get_mut(id).expect("live request");
        kv.allocate_slots(&r.spec, total, computed, &mut r.kv, n, hit, false)
    }

    /// Forgets the memoised head-of-queue lookup and unwatches its blocks.
    fn drop_head_memo(&mut self) {
        if self.head_memo.take().is_some() {
            self.kv.pool.unwatch(&self.head_hit.blocks, 0);
        }
    }

    /// `get_computed_blocks` for the waiting request `id` of `num_tokens` tokens into
    /// `head_hit`; returns how many of the hit's blocks have ref 0.
    ///
    /// A head of queue that cannot be admitted is looked up at every step, so the last
    /// lookup is kept (`head_memo`) with its blocks watched by the pool. The block a lookup
    /// finds for a hash changes only when that block is evicted (caching a hash already
    /// held adds a duplicate behind it), so the hit stands up to the first of its blocks
    /// evicted since (the pool's `watched_cut`), and the lookup resumes from there, or from
    /// the hash it missed last, which may be cached now. The pool counts the watched blocks
    /// with ref 0 as they come and go.
    fn head_lookup(&mut self, id: ReqId, num_tokens: u32) -> u32 {
        let n = self.head_lookup_memoised(id, num_tokens);
        if cfg!(debug_assertions) {
            // The memo against a lookup from scratch.
            let Scheduler { kv, requests, head_hit, .. } = self;
            let r = requests.get_mut(id).expect("live request");
            let mut fresh = ComputedBlocks::default();
            kv.get_computed_blocks(&r.spec, num_tokens, &mut r.kv, &mut fresh);
            assert_eq!((&fresh.blocks, fresh.num_tokens), (&head_hit.blocks, head_hit.num_tokens));
            assert_eq!(n, kv.num_evictable(&fresh.blocks));
        }
        n
    }

    fn head_lookup_memoised(&mut self, id: ReqId, num_tokens: u32) -> u32 {
        let Scheduler { kv, requests, head_hit, head_memo, .. } = self;
        let r = requests.get_mut(id).expect("live request");
        if !kv.enable_caching || num_tokens == 0 {
            kv.get_computed_blocks(&r.spec, num_tokens, &mut r.kv, head_hit);
            return 0;
        }
        if *head_memo == Some((id, num_tokens)) {
            let cut = kv.pool.watched_cut() as usize;
            if cut < head_hit.blocks.len() {
                kv.pool.unwatch(&head_hit.blocks[cut..], cut as u32);
                head_hit.blocks.truncate(cut);
            }
        } else {
            if head_memo.take().is_some() {
                kv.pool.unwatch(&head_hit.blocks, 0);
            }
            head_hit.blocks.clear();
            if !r.kv.lookup_cannot_hit() {
                r.kv.reserve_hashes(&r.spec, kv.block_size);
                extend_block_hashes(&r.spec, kv.block_size, num_tokens, &mut r.kv.block_hashes);
            }
            *head_memo = Some((id, num_tokens));
        }
        kv.pool.reset_watched_cut();
        // `find_longest_cache_hit` from where the kept hit ends.
        let start = head_hit.blocks.len();
        let max_blocks = if r.kv.lookup_cannot_hit() { 0 } else { ((num_tokens - 1) / kv.block_size) as usize };
        for &h in &r.kv.block_hashes[start..max_blocks] {
            match kv.pool.get_cached_block(h) {
                Some(b) => head_hit.blocks.push(b),
                None => break,
            }
        }
        head_hit.num_tokens = head_hit.blocks.len() as u32 * kv.block_size;
        if kv.pool.watch(&head_hit.blocks[start..], start as u32) {
            kv.pool.watched_free()
        } else {
            // A block found twice (equal hashes along one prompt): counted, not kept.
            kv.pool.unwatch(&head_hit.blocks[..start], 0);
            *head_memo = None;
            kv.num_evictable(&head_hit.blocks)
        }
    }

    fn record_prefix_lookup(&mut self, num_tokens: u32, hit_tokens: u32, preempted: bool) {
        // With prefix caching off `KVCacheManager.get_computed_blocks` returns before it records
        // anything: vLLM's prefix-cache counters stay at 0.
        if !self.config.enable_prefix_caching {
            return;
        }
        // 0.11 counts every lookup, resumed preempted requests included;
        // 0.11.1+ excludes the preempted ones.
        if preempted && self.config.behaviour.skip_preempted_prefix_stats {
            return;
        }
        self.counters.prefix_cache_queries += u64::from(num_tokens);
        self.counters.prefix_cache_hits += u64::from(hit_tokens);
    }

    fn do_schedule(&mut self) {
        if self.cohort.enabled
            && self.config.policy == Policy::Fcfs
            && (self.cohort.active || self.cohort.quiet >= Cohort::QUIET)
            && self.do_schedule_lazy()
        {
            return;
        }
        self.cohort.quiet = self.cohort.quiet.saturating_add(1);
        self.plans[self.cur].clear();
        let mut budget = self.config.max_num_batched_tokens;
        let mut preempted_any = false;
        // (request, tokens) scheduled this step, in order, whose plan entries and shape are
        // formed after phase B. Under FCFS a preemption victim is the last running request,
        // never one scheduled before it, so the requests phase A schedules keep what they
        // were scheduled with: their entries and shape are formed at once (`direct`), in the
        // same order, and only phase B's admissions go through `scheduled`.
        let direct = self.config.policy == Policy::Fcfs;
        let mut shape = StepShape { cpu_overlapped: self.config.behaviour.async_scheduling, ..Default::default() };
        let mut scheduled = std::mem::take(&mut self.scheduled_buf);
        scheduled.clear();

        // ---- Phase A: RUNNING ----
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let id = self.running[i];
            if direct {
                // A decode on `allocate_slots`' fast path (no hit, held blocks with room, none
                // filled: nothing to allocate or cache), most requests of most steps: one
                // token, within any threshold and the budget left; or a request whose last
                // token is in flight, skipped (below).
                let Scheduler { kv, requests, plans, cur, counters, .. } = self;
                let plan = &mut plans[*cur];
                let r = requests.get_mut(id).expect("live request");
                let computed = r.num_computed_tokens;
                let total = r.total();
                // With `total = computed + 1`, the in-flight test below reads
                // `outputs + 1 ≥ output_len`.
                if total == computed + 1
                    && !(r.placeholders > 0 && r.num_output_tokens + 1 >= r.output_len)
                    && kv.fits_held(total, &r.kv)
                {
                    Self::schedule_direct(r, plan, &mut shape, &mut counters.recomputed_tokens, id, computed, total, 1);
                    budget -= 1;
                    i += 1;
                    continue;
                }
            }
            let (num_tokens, computed) = {
                let r = self.req(id);
                // Async scheduling: a request whose last token is in flight is not
                // scheduled again (`num_computed_tokens + 2 − placeholders ≥ prompt +
                // max_tokens`); it finishes when that step's output is processed.
                if r.placeholders > 0 && r.num_computed_tokens + 2 - r.placeholders >= r.prompt_len + r.output_len {
                    i += 1;
                    continue;
                }
                (r.total(), r.num_computed_tokens)
            };
            let want = num_tokens - computed;
            // The threshold never caps a single token.
            let mut n = if want <= 1 { want } else { self.threshold_cap(want) };
            n = n.min(budget);
            if n == 0 {
                i += 1;
                continue;
            }
            if direct {
                // `allocate_slots`' fast path (no hit, held blocks with room, none filled):
                // nothing to allocate or cache. Most decodes.
                let Scheduler { kv, requests, plans, cur, counters, .. } = self;
                let plan = &mut plans[*cur];
                let r = requests.get_mut(id).expect("live request");
                if kv.fits_held(computed + n, &r.kv) {
                    Self::schedule_direct(
                        r,
                        plan,
                        &mut shape,
                        &mut counters.recomputed_tokens,
                        id,
                        computed,
                        num_tokens,
                        n,
                    );
                    budget -= n;
                    i += 1;
                    continue;
                }
            }
            let mut can_schedule = true;
            loop {
                let ok = self.allocate_running(id, num_tokens, computed, n);
                if ok {
                    break;
                }
                let (victim, idx) = self.pop_victim();
                if let Some(pos) = scheduled.iter().position(|&(v, _)| v == victim) {
                    // Only under `priority` can the victim have been scheduled already.
                    let (_, tokens) = scheduled.remove(pos);
                    budget += tokens;
                    let r = self.req_mut(victim);
                    r.num_computed_tokens -= tokens;
                }
                if idx < i {
                    i -= 1;
                }
                self.preempt(victim);
                self.plans[self.cur].num_preempted += 1;
                preempted_any = true;
                if victim == id {
                    can_schedule = false;
                    break;
                }
            }
            if !can_schedule {
                if self.config.policy == Policy::Priority && self.config.behaviour.priority_walk_continues {
                    continue;
                }
                break;
            }
            if direct {
                let Scheduler { requests, plans, cur, counters, .. } = self;
                let plan = &mut plans[*cur];
                let r = requests.get_mut(id).expect("live request");
                Self::schedule_direct(
                    r,
                    plan,
                    &mut shape,
                    &mut counters.recomputed_tokens,
                    id,
                    computed,
                    num_tokens,
                    n,
                );
            } else {
                self.req_mut(id).num_computed_tokens += n;
                scheduled.push((id, n));
            }
            budget -= n;
            i += 1;
        }

        // ---- Phase B: WAITING (not in a step that preempted) ----
        if !preempted_any {
            self.phase_b(&mut budget, &mut scheduled);
        }
        self.close_plan(shape, scheduled);
    }

    /// Phase B: admits from the waiting queue while `budget` and `max_num_seqs` allow.
    fn phase_b(&mut self, budget: &mut u32, scheduled: &mut Vec<(ReqId, u32)>) {
        let gate = self.config.behaviour.full_prompt_admission;
        let record_at_admission = self.config.behaviour.prefix_stats_at_admission;
        while *budget > 0 {
            let Some(id) = self.waiting_peek() else { break };
            if self.running.len() >= self.config.max_num_seqs as usize {
                break;
            }
            let (num_tokens, preempted_before) = {
                let r = self.req(id);
                debug_assert_eq!(r.placeholders, 0, "a preempted request's in-flight token is processed first");
                (r.num_tokens(), r.num_preemptions > 0)
            };
            debug_assert_eq!(self.req(id).num_computed_tokens, 0);
            let num_evictable = self.head_lookup(id, num_tokens);
            let hit_tokens = self.head_hit.num_tokens;
            if !record_at_admission {
                self.record_prefix_lookup(num_tokens, hit_tokens, preempted_before);
            }
            let want = self.threshold_cap(num_tokens - hit_tokens);
            // Chunked prefill off: "we can stop the scheduling here" (0.33.0
            // `v1/core/sched/scheduler.py:1336`; `break` from 0.12.0).
            if !self.config.behaviour.chunked_prefill && want > *budget {
                break;
            }
            let n = want.min(*budget);
            let ok = {
                let Scheduler { kv, requests, head_hit, .. } = self;
                let r = requests.get_mut(id).expect("live request");
                kv.allocate_slots_counted(&r.spec, num_tokens, 0, &mut r.kv, n, head_hit, num_evictable, gate)
            };
            if !ok {
                break;
            }
            // Admitted: its hit is spent.
            self.drop_head_memo();
            if record_at_admission {
                self.record_prefix_lookup(num_tokens, hit_tokens, preempted_before);
            }
            self.waiting_pop();
            self.running.push(id);
            self.admitted(id);
            let r = self.req_mut(id);
            r.status = Status::Running;
            r.num_computed_tokens = hit_tokens + n;
            scheduled.push((id, n));
            *budget -= n;
        }
    }

    /// Forms the plan's entries and shape for what phase B admitted (`scheduled`), on top of
    /// `shape` (phase A's), and counts the step.
    fn close_plan(&mut self, mut shape: StepShape, scheduled: Vec<(ReqId, u32)>) {
        // ---- the step's shape (of what is not in it yet) ----
        let mut recomputed_here = 0u64;
        for &(id, n) in &scheduled {
            let r = self.req_mut(id);
            let before = r.num_computed_tokens - n;
            let total = r.total();
            let decode = n == 1 && r.num_output_tokens + r.placeholders > 0 && before + 1 == total;
            // The step samples for a request it brings up to its length; a partial chunk
            // samples nothing. What it samples is a placeholder until processed.
            let samples = r.num_computed_tokens == total;
            if samples {
                r.placeholders += 1;
            }
            if decode {
                shape.add_decode(u64::from(total));
            } else {
                shape.add_prefill(u64::from(before), u64::from(n));
                recomputed_here += r.recomputed_in(before, n);
            }
            self.plans[self.cur].scheduled.push(Scheduled { id, num_tokens: n, prefill: !decode, samples });
        }
        self.counters.recomputed_tokens += recomputed_here;
        self.plans[self.cur].shape = shape;
        self.scheduled_buf = scheduled;
        if !self.plans[self.cur].is_empty() {
            self.counters.num_steps += 1;
            self.counters.prefill_tokens_computed += self.plans[self.cur].shape.prefill_tokens;
        }
    }

    /// Schedules `n` tokens of the running request `r` (`id`), with `computed` tokens
    /// computed of `total`, its blocks allocated: its plan entry and its part of the step's
    /// shape, as the shape loop of [`Scheduler::do_schedule`] forms them.
    #[inline(always)]
    fn schedule_direct(
        r: &mut Request,
        plan: &mut StepPlan,
        shape: &mut StepShape,
        recomputed: &mut u64,
        id: ReqId,
        computed: u32,
        total: u32,
        n: u32,
    ) {
        r.num_computed_tokens = computed + n;
        let decode = n == 1 && r.num_output_tokens + r.placeholders > 0 && computed + 1 == total;
        let samples = computed + n == total;
        if samples {
            r.placeholders += 1;
        }
        if decode {
            shape.add_decode(u64::from(total));
        } else {
            shape.add_prefill(u64::from(computed), u64::from(n));
            *recomputed += r.recomputed_in(computed, n);
        }
        plan.scheduled.push(Scheduled { id, num_tokens: n, prefill: !decode, samples });
    }

    fn do_finish_step(&mut self, out: &mut Vec<TokenOutput>) {
        // The requests that finish in this step (a few, most steps).
        let mut finished_ids = std::mem::take(&mut self.finished_buf);
        finished_ids.clear();
        // A cohort plan's members each sampled one token, none its last (counted, not listed).
        self.cohort.last_tick = if self.plans[self.cur].cohort {
            self.cohort.finished += 1;
            Some((self.cohort.finished - 1, self.plans[self.cur].lazy_decodes))
        } else {
            None
        };
        {
            let Scheduler { plans, cur, requests, .. } = self;
            let plan = &plans[*cur];
            out.reserve(plan.scheduled.len());
            for s in &plan.scheduled {
                if !s.samples {
                    continue; // a partial prefill chunk samples nothing
                }
                let r = requests.get_mut(s.id).expect("live request");
                r.placeholders -= 1;
                r.num_output_tokens += 1;
                let finished = r.num_output_tokens >= r.output_len;
                if finished {
                    finished_ids.push(s.id);
                }
                out.push(TokenOutput { id: s.id, finished });
            }
        }
        // Their blocks freed in the plan's order (the free queue's order).
        for &id in &finished_ids {
            let Scheduler { kv, requests, .. } = self;
            let r = requests.get_mut(id).expect("live request");
            // Async scheduling: a request preempted while its last token was in
            // flight finishes from the waiting queue (`stopped_preempted_reqs`).
            let was_waiting = r.status != Status::Running;
            r.status = Status::Finished;
            kv.free(&mut r.kv);
            self.num_unfinished -= 1;
            if was_waiting {
                self.waiting_remove(id);
            }
        }
        if !finished_ids.is_empty() {
            if self.cohort.active {
                let Scheduler { cohort, requests, .. } = self;
                for &id in &finished_ids {
                    let r = requests.get(id).expect("live request");
                    debug_assert!(r.member.is_none(), "a member sampled its last token");
                    if let Ok(p) = cohort.outside.binary_search(&(r.rseq, id)) {
                        cohort.outside.remove(p);
                    }
                }
            }
            // The running requests that finished are among those that finished in this step.
            if finished_ids.len() <= 4 {
                for &id in &finished_ids {
                    if let Some(p) = position_of(&self.running, id) {
                        self.running.remove(p);
                    }
                }
            } else {
                let Scheduler { running, requests, .. } = self;
                running.retain(|&id| requests.get(id).is_some_and(|r| r.status != Status::Finished));
            }
            // Finished requests free their slots (the next arrival takes one over): nothing
            // reads them again.
            for &id in &finished_ids {
                self.requests.remove(id);
            }
        }
        self.finished_buf = finished_ids;
    }
}

impl Scheduler {
    /// The waiting queue's head, for a fast-forward past it: looked up as phase B looks it
    /// up (memoised: a lookup now changes nothing phase B then finds). `None` if the lookup
    /// is not memoised (a block found twice), so that it could not be followed, or if the
    /// head could be admitted now (the run would most likely end at its first step).
    fn ff_blocked_head(&mut self) -> Option<FfHead> {
        let id = self.waiting_peek()?;
        let (num_tokens, preempted_before) = {
            let r = self.req(id);
            if r.placeholders > 0 || r.num_computed_tokens > 0 {
                return None;
            }
            (r.num_tokens(), r.num_preemptions > 0)
        };
        let evictable = self.head_lookup(id, num_tokens);
        if self.kv.enable_caching && self.head_memo != Some((id, num_tokens)) {
            return None;
        }
        let h = FfHead { id, num_tokens, preempted_before };
        (self.ff_head_need(h, self.head_hit.blocks.len() as u32, evictable) > self.kv.pool.num_free()).then_some(h)
    }

    /// A fast-forwarded step's phase B lookup of the blocked head (`head_hit`), counted where
    /// the release counts lookups (not only at admission).
    fn ff_count_head_lookup(&mut self) {
        if let Some(h) = self.ff_head {
            if !self.config.behaviour.prefix_stats_at_admission {
                self.record_prefix_lookup(h.num_tokens, self.head_hit.num_tokens, h.preempted_before);
            }
        }
    }

    /// The free blocks phase B requires to admit the head `h` with a hit of its first
    /// `hit_len` looked-up blocks, `evictable` of them with ref 0, after a step of decodes
    /// of every running request (`allocate_slots_counted`'s count).
    fn ff_head_need(&self, h: FfHead, hit_len: u32, evictable: u32) -> u32 {
        let hit_tokens = hit_len * self.config.block_size;
        let budget = self.config.max_num_batched_tokens - self.running.len() as u32;
        let want = self.threshold_cap(h.num_tokens - hit_tokens);
        if !self.config.behaviour.chunked_prefill && want > budget {
            // Chunked prefill off: the head waits for the budget, whatever is free (the
            // fast-forward's steps keep the running list, so the budget, as it is).
            return u32::MAX;
        }
        let tokens = want.min(budget);
        let gate = self.config.behaviour.full_prompt_admission;
        self.kv.blocks_needed(h.num_tokens, hit_tokens + tokens, 0, hit_len, evictable, gate).1
    }

    /// Whether, after the fast-forward's step `j` allocates `need` blocks for the requests
    /// at `positions` in `running`, phase B still cannot admit the waiting queue's head.
    ///
    /// The step evicts the first `need` blocks of the free queue, so its lookup after the
    /// step is known before it: the hit up to the first of its (watched) blocks evicted,
    /// then a miss. That holds while no hash is held twice (no eviction hands a hash to
    /// another block) and the step caches no hash that is cached already (a duplicate) or
    /// is the one the lookup then misses; otherwise (rare) the run ends here. The evictable
    /// hits are those of the kept part; the step takes no hit and frees nothing.
    #[inline(never)]
    fn ff_head_stays_blocked(&mut self, need: u32, positions: &[u32], j: u64) -> bool {
        let Some(h) = self.ff_head else { return true };
        let free_after = self.kv.pool.num_free() - need;
        if !self.kv.enable_caching {
            return self.ff_head_need(h, 0, 0) > free_after;
        }
        if self.kv.pool.has_duplicates() {
            return false;
        }
        let hit_len = self.head_hit.blocks.len();
        let kept = hit_len.min(self.kv.pool.front_watched_cut(need) as usize);
        let max_blocks = ((h.num_tokens - 1) / self.config.block_size) as usize;
        // A private head's hashes are cached by no other request (and it is not running).
        let head_private = self.req(h.id).kv.lookup_cannot_hit();
        let miss = (kept < max_blocks && !head_private).then(|| self.req(h.id).kv.block_hashes[kept]);
        let bs = self.config.block_size;
        let mut hashes = std::mem::take(&mut self.ff_hashes);
        hashes.clear();
        let mut ok = true;
        'steps: for &pos in positions {
            let t = self.ff_base[pos as usize] + j as u32;
            let id = self.running[pos as usize];
            let Scheduler { requests, kv, .. } = self;
            let r = requests.get_mut(id).expect("live request");
            if r.kv.private {
                // Its blocks are registered only when it is preempted.
                continue;
            }
            // The hashes `allocate_slots` computes for this step (the same values), and
            // those of them it may cache.
            extend_block_hashes(&r.spec, bs, t, &mut r.kv.block_hashes);
            for &x in &r.kv.block_hashes[r.kv.num_cached_blocks as usize..] {
                if Some(x) == miss || kv.pool.get_cached_block(x).is_some() || hashes.contains(&x) {
                    ok = false;
                    break 'steps;
                }
                hashes.push(x);
            }
        }
        self.ff_hashes = hashes;
        if !ok {
            return false;
        }
        // The hit's blocks are the watched ones, each once: those with ref 0 in the kept part
        // are all of them but the cut part's (a few blocks: the step's evictions).
        let evictable = self.kv.pool.watched_free() - self.kv.num_evictable(&self.head_hit.blocks[kept..]);
        self.ff_head_need(h, kept as u32, evictable) > free_after
    }

    /// The first token count (the `total` of a decode's `allocate_slots`) at which `kv`
    /// leaves the fast path: a block is needed, or (with caching) a block becomes full.
    /// Below it, `allocate_slots` changes nothing.
    fn ff_next_slow(&self, kv: &RequestKv) -> u32 {
        let bs = self.config.block_size;
        let grow = kv.held() * bs + 1;
        if self.kv.enable_caching {
            grow.min((kv.num_cached_blocks + 1) * bs)
        } else {
            grow
        }
    }
}

/// The lazy decode cohort (module docs, "Lazy decodes").
impl Scheduler {
    /// Notes the admission of `id` to `running` (its place in running order).
    fn admitted(&mut self, id: ReqId) {
        let rseq = self.next_rseq;
        self.next_rseq += 1;
        self.req_mut(id).rseq = rseq;
        if self.cohort.active {
            self.cohort.outside.push((rseq, id));
        }
    }

    /// `(num_computed_tokens, num_output_tokens, placeholders)` of `r` as stepping would hold
    /// them now (a member's, from its count fields and the cohort's plans).
    fn view(&self, r: &Request) -> (u32, u32, u32) {
        match r.member {
            None => (r.num_computed_tokens, r.num_output_tokens, r.placeholders),
            Some((s0, _)) => {
                let sched = (self.cohort.formed - s0) as u32;
                let fin = self.cohort.finished.saturating_sub(s0) as u32;
                (r.num_computed_tokens + sched, r.num_output_tokens + fin, r.placeholders + sched - fin)
            }
        }
    }

    /// The cohort plan from which member `r` (first cohort plan `s0`, its count fields those
    /// from before it) must be scheduled explicitly: the first whose decode leaves
    /// `allocate_slots`' fast path (an anonymous request's filled blocks only counted, later:
    /// [`KvCacheManager::lazy_limit`]), or samples its last token. `None` if that is `s0`.
    fn member_due(kv: &KvCacheManager, r: &Request, s0: u64) -> Option<u64> {
        let tb = r.total();
        let limit = kv.lazy_limit(&r.kv);
        let sampled = r.num_output_tokens + r.placeholders;
        if limit < tb || sampled + 1 >= r.output_len {
            return None;
        }
        Some((s0 + u64::from(limit - tb) + 1).min(s0 + u64::from(r.output_len - 1 - sampled)))
    }

    /// The anonymous blocks `r` holds now (a grouped member's `kv.anon` lags).
    fn anon_now(&self, r: &Request) -> u32 {
        if r.group.is_some() {
            r.kv.anon.max(self.view(r).0.div_ceil(self.config.block_size))
        } else {
            r.kv.anon
        }
    }

    /// Takes member `id` out of its group, if any, its `kv.anon` brought up to date.
    fn ungroup(&mut self, id: ReqId) {
        let anon = self.anon_now(self.req(id));
        let Scheduler { requests, cohort, kv, .. } = self;
        let r = requests.get_mut(id).expect("live request");
        let Some((g, pos)) = r.group.take() else { return };
        kv.set_anon(&mut r.kv, anon);
        let list = &mut cohort.groups[g as usize];
        list.swap_remove(pos as usize);
        if let Some(&(_, moved)) = list.get(pos as usize) {
            requests.get_mut(moved).expect("live request").group = Some((g, pos));
        }
    }

    /// The group of cohort plan `s`: its members need a block in it.
    fn growing_group(&self, s: u64) -> usize {
        let bs = u64::from(self.config.block_size);
        ((1 % bs + bs - s % bs) % bs) as usize
    }

    /// Takes member `id` out of the cohort: its count fields brought up to date, its processed
    /// cohort tokens noted for the driver. Its token of a cohort plan still in flight (under
    /// async scheduling, `next_plan`), if any, is listed there.
    fn depart(&mut self, id: ReqId) {
        self.depart_listing(id, true);
    }

    /// [`Scheduler::depart`]; with `list` false (the run is over: plans in flight never
    /// finish), its token in flight is not listed.
    fn depart_listing(&mut self, id: ReqId, list: bool) {
        self.ungroup(id);
        let Scheduler { requests, cohort, plans, cur, kv, .. } = self;
        let next_plan = &mut plans[*cur ^ 1];
        let r = requests.get_mut(id).expect("live request");
        let (s0, _) = r.member.take().expect("a member");
        let sched = cohort.formed - s0;
        let fin = cohort.finished.saturating_sub(s0);
        debug_assert!(fin <= sched && (sched - fin <= 1 || !list));
        cohort.ctx_base = cohort.ctx_base.wrapping_sub(u64::from(r.total())).wrapping_add(s0);
        r.num_computed_tokens += sched as u32;
        r.num_output_tokens += fin as u32;
        r.placeholders += (sched - fin) as u32;
        kv.catch_up_fills(&mut r.kv, r.num_computed_tokens);
        cohort.members -= 1;
        if fin > 0 {
            cohort.departed.push(LazyDeparture { id, first_tick: s0, count: fin });
        }
        if sched > fin && list {
            // Listed after the plan's entries: it does not finish there, so nothing its place
            // decides (the order of finishes and frees) moves; `dissolve` restores running order.
            debug_assert!(next_plan.cohort && next_plan.lazy_decodes > 0);
            next_plan.lazy_decodes -= 1;
            next_plan.scheduled.push(Scheduled { id, num_tokens: 1, prefill: false, samples: true });
            cohort.flight_unordered = true;
        }
    }

    /// Every member leaves and the cohort's bookkeeping stops (until a cohort plan is formed
    /// again): before an explicit walk, a fast-forward, an abort. The cohort plan in flight,
    /// if any, lists all its tokens from now on, in running order, and counts as an explicit one.
    fn dissolve(&mut self) {
        if !self.cohort.active {
            return;
        }
        self.cohort.active = false;
        if self.cohort.members > 0 {
            for i in 0..self.running.len() {
                let id = self.running[i];
                if self.req(id).member.is_some() {
                    self.depart(id);
                }
            }
        }
        if self.cohort.flight_unordered {
            self.cohort.flight_unordered = false;
            let Scheduler { plans, cur, requests, .. } = self;
            let next_plan = &mut plans[*cur ^ 1];
            next_plan.scheduled.sort_by_key(|e| requests.get(e.id).map_or(u64::MAX, |r| r.rseq));
        }
        self.cohort.outside.clear();
        if self.plans[self.cur ^ 1].cohort {
            debug_assert_eq!(self.plans[self.cur ^ 1].lazy_decodes, 0);
            self.plans[self.cur ^ 1].cohort = false;
            self.cohort.formed -= 1;
        }
        debug_assert_eq!(self.cohort.formed, self.cohort.finished);
        debug_assert_eq!(self.cohort.members, 0);
    }

    /// Phase A of a cohort plan (FCFS): the running requests outside the cohort and the
    /// members due now, walked in running order as the explicit walk takes them (a member's
    /// block taken in place, where it needs no more), the other members' decodes counted;
    /// phase B; then the plan's plain decodes join the cohort. False (the cohort dissolved,
    /// nothing planned) when the budget might not cover every running request's tokens: the
    /// explicit walk then interleaves the members.
    fn do_schedule_lazy(&mut self) -> bool {
        if !self.cohort.active {
            debug_assert_eq!(self.cohort.members, 0);
            let Scheduler { cohort, running, requests, .. } = self;
            cohort.outside.clear();
            cohort.outside.extend(running.iter().map(|&id| (requests.get(id).expect("live").rseq, id)));
            cohort.cal.clear();
            cohort.active = true;
            let bs = self.config.block_size as usize;
            if self.cohort.groups.len() != bs {
                self.cohort.groups = vec![Vec::new(); bs];
            }
        }
        let s = self.cohort.formed;
        // The members due now, in running order.
        let mut due = std::mem::take(&mut self.cohort.due);
        due.clear();
        self.cohort.cal.take_due(s, &mut due);
        due.retain(|&(rseq, id)| {
            self.requests
                .get(id)
                .is_some_and(|r| r.rseq == rseq && r.member.is_some_and(|(_, d)| d == s) && r.status == Status::Running)
        });

        // A grouped member due now (its last token) leaves its group first: the group's count
        // is of the members that only decode.
        let caching = self.config.enable_prefix_caching;
        let mut all_anonymous = true;
        for &(_, id) in &due {
            self.ungroup(id);
            all_anonymous &= self.req(id).kv.anonymous(caching);
        }
        let g = self.growing_group(s);
        let growing = self.cohort.groups.get(g).map_or(0, |l| l.len() as u32);

        // Every member, and every request before the last member, gets all it asks (the
        // members one token each): then the budget cuts no one before the last member, and
        // those after it get what is left after the members, as in the explicit walk.
        let budget0 = self.config.max_num_batched_tokens;
        let mut need = u64::from(self.cohort.members);
        let last_member =
            self.running.iter().rev().map(|&id| self.req(id)).find(|r| r.member.is_some()).map_or(0, |r| r.rseq);
        // At most the blocks phase A takes; whether all of them are anonymous.
        let mut blocks = u64::from(growing) + due.len() as u64;
        for &(rseq, id) in &self.cohort.outside {
            let r = self.req(id);
            if r.placeholders > 0 && r.num_computed_tokens + 2 - r.placeholders >= r.prompt_len + r.output_len {
                continue;
            }
            let want = r.total() - r.num_computed_tokens;
            let n = if want <= 1 { want } else { self.threshold_cap(want) };
            if rseq < last_member {
                need += u64::from(n);
            }
            if growing > 0 && !self.kv.fits_held(r.num_computed_tokens + n, &r.kv) {
                all_anonymous &= r.kv.anonymous(caching);
                let (num_tokens, computed) = (r.total(), r.num_computed_tokens);
                blocks += u64::from(self.kv.blocks_needed(num_tokens, computed + n, r.kv.held(), 0, 0, false).1);
            }
        }
        if need > u64::from(budget0) {
            self.cohort.due = due;
            self.dissolve();
            return false;
        }
        // The growing group's blocks: at once where nothing in the walk can tell (every block
        // it takes anonymous, none refused), else each in its place.
        let mut events = std::mem::take(&mut self.cohort.grow);
        events.clear();
        if growing > 0 {
            if all_anonymous && blocks <= u64::from(self.kv.pool.num_free()) {
                self.kv.pool.get_new_anonymous(growing);
            } else {
                events.extend_from_slice(&self.cohort.groups[g]);
                events.sort_unstable();
            }
        }

        self.plans[self.cur].clear();
        // The members' tokens are taken first (a member leaving in the walk gives its back).
        let mut budget = budget0 - self.cohort.members;
        let mut preempted_any = false;
        let mut shape = StepShape { cpu_overlapped: self.config.behaviour.async_scheduling, ..Default::default() };
        let mut scheduled = std::mem::take(&mut self.scheduled_buf);
        scheduled.clear();
        let mut walk = std::mem::take(&mut self.cohort.walk);
        walk.clear();
        walk.extend_from_slice(&self.cohort.outside);
        // Members that leave in this walk, in running order (to `outside` after it).
        let mut left = std::mem::take(&mut self.cohort.left);
        left.clear();
        let (mut a, mut b, mut c) = (0, 0, 0);
        loop {
            // The next of `walk`, `due` and `events` (the growing group walked) in running order.
            let ra = walk.get(a).map_or(u64::MAX, |e| e.0);
            let rb = due.get(b).map_or(u64::MAX, |e| e.0);
            let rc = events.get(c).map_or(u64::MAX, |e| e.0);
            let (rseq, id, is_due) = if ra < rb && ra < rc {
                a += 1;
                (ra, walk[a - 1].1, false)
            } else if rb < rc {
                b += 1;
                (rb, due[b - 1].1, true)
            } else if rc < u64::MAX {
                c += 1;
                (rc, events[c - 1].1, true)
            } else {
                break;
            };
            if is_due {
                // A member due now: its decode leaves the fast path (a block to allocate or
                // fill) or samples its last token. The first is taken in place where it fits;
                // otherwise it leaves the cohort and is walked as any other request.
                let Some((s0, _)) = self.req(id).member else { continue }; // preempted in this walk
                let grouped = self.req(id).group.is_some();
                if grouped {
                    // Its blocks so far, before this one.
                    let anon = self.anon_now(self.req(id));
                    let Scheduler { requests, kv, .. } = self;
                    kv.set_anon(&mut requests.get_mut(id).expect("live request").kv, anon);
                }
                let (computed, outputs, placeholders) = self.view(self.req(id));
                let r = self.req(id);
                let last = outputs + placeholders + 1 >= r.output_len;
                if !last {
                    let total = r.prompt_len + outputs + placeholders;
                    debug_assert_eq!(computed + 1, total);
                    let ok = self.allocate_running(id, total, computed, 1);
                    if ok && grouped {
                        continue; // its due plan (its last token) stands
                    }
                    if ok {
                        let Scheduler { requests, cohort, kv, .. } = self;
                        let r = requests.get_mut(id).expect("live request");
                        let next = Self::member_due(kv, r, s0).expect("a decode with its block allocated fits");
                        debug_assert!(next > s);
                        r.member = Some((s0, next));
                        cohort.cal.push(s, next, (rseq, id));
                        continue;
                    }
                }
                self.depart(id);
                left.push((rseq, id));
                budget += 1;
            }
            let (num_tokens, computed) = {
                let r = self.req(id);
                if r.status != Status::Running {
                    continue; // preempted by a request before it in this walk
                }
                // As the explicit walk: a request whose last token is in flight is skipped.
                if r.placeholders > 0 && r.num_computed_tokens + 2 - r.placeholders >= r.prompt_len + r.output_len {
                    continue;
                }
                (r.total(), r.num_computed_tokens)
            };
            let want = num_tokens - computed;
            let n = if want <= 1 { want } else { self.threshold_cap(want) }.min(budget);
            if n == 0 {
                continue;
            }
            let mut can_schedule = true;
            loop {
                let ok = self.allocate_running(id, num_tokens, computed, n);
                if ok {
                    break;
                }
                // FCFS: the victim is the last running request, never one walked before.
                let victim = self.running.pop().expect("running is not empty");
                let (vseq, member) = {
                    let r = self.req(victim);
                    (r.rseq, r.member.is_some())
                };
                if member {
                    self.depart(victim);
                    budget += 1;
                } else if let Ok(p) = self.cohort.outside.binary_search(&(vseq, victim)) {
                    self.cohort.outside.remove(p);
                } else if let Some(p) = left.iter().position(|&(_, x)| x == victim) {
                    left.remove(p);
                }
                self.preempt(victim);
                self.plans[self.cur].num_preempted += 1;
                preempted_any = true;
                if victim == id {
                    can_schedule = false;
                    break;
                }
            }
            if !can_schedule {
                break;
            }
            let Scheduler { requests, plans, cur, counters, .. } = self;
            let plan = &mut plans[*cur];
            let r = requests.get_mut(id).expect("live request");
            Self::schedule_direct(r, plan, &mut shape, &mut counters.recomputed_tokens, id, computed, num_tokens, n);
            budget -= n;
        }
        self.cohort.walk = walk;
        self.cohort.due = due;
        self.cohort.grow = events;
        // The members' decodes, in cohort plan `s`.
        let m = self.cohort.members;
        if m > 0 {
            shape.num_seqs += m;
            shape.decode_tokens += u64::from(m);
            shape.decode_context_tokens += self.cohort.ctx_base.wrapping_add(u64::from(m) * s);
            self.plans[self.cur].lazy_decodes = m;
            self.plans[self.cur].cohort = true;
            self.cohort.formed += 1;
        }
        if !preempted_any {
            self.phase_b(&mut budget, &mut scheduled);
        }
        self.close_plan(shape, scheduled);

        // The plan's plain decodes join, for the cohort plans from the next on, until the first
        // in which they need a block, fill one, or sample their last token.
        let s0 = self.cohort.formed;
        let mut joined = false;
        let Scheduler { plans, cur, requests, cohort, kv, .. } = self;
        let plan = &plans[*cur];
        for e in &plan.scheduled {
            if e.prefill || !e.samples || e.num_tokens != 1 {
                continue;
            }
            let r = requests.get_mut(e.id).expect("live request");
            if r.num_output_tokens == 0 || r.status != Status::Running {
                continue;
            }
            debug_assert!(r.member.is_none() && r.num_computed_tokens + 1 == r.total());
            let tb = r.total();
            let sampled = r.num_output_tokens + r.placeholders;
            // Grouped: anonymous, its next block needed at the first token count ≡ 1 on.
            let bs = kv.block_size;
            let first = tb + (bs + 1 - tb % bs) % bs;
            let due = if bs > 1 && r.kv.anonymous(kv.enable_caching) && r.kv.held() * bs + 1 == first {
                if sampled + 1 >= r.output_len {
                    continue;
                }
                let g = ((u64::from(tb % bs) + u64::from(bs) - s0 % u64::from(bs)) % u64::from(bs)) as usize;
                r.group = Some((g as u32, cohort.groups[g].len() as u32));
                cohort.groups[g].push((r.rseq, e.id));
                s0 + u64::from(r.output_len - 1 - sampled)
            } else {
                let Some(due) = Self::member_due(kv, r, s0) else { continue };
                due
            };
            r.member = Some((s0, due));
            cohort.cal.push(s0, due, (r.rseq, e.id));
            cohort.members += 1;
            cohort.ctx_base = cohort.ctx_base.wrapping_add(u64::from(r.total())).wrapping_sub(s0);
            joined = true;
        }
        if !left.is_empty() {
            // Both in running order: merged.
            let mut merged = std::mem::take(&mut cohort.merged);
            merged.clear();
            let (mut i, mut j) = (0, 0);
            while i < cohort.outside.len() && j < left.len() {
                if cohort.outside[i] < left[j] {
                    merged.push(cohort.outside[i]);
                    i += 1;
                } else {
                    merged.push(left[j]);
                    j += 1;
                }
            }
            merged.extend_from_slice(&cohort.outside[i..]);
            merged.extend_from_slice(&left[j..]);
            cohort.merged = std::mem::replace(&mut cohort.outside, merged);
        }
        if joined {
            cohort.outside.retain(|&(_, id)| requests.get(id).is_some_and(|r| r.member.is_none()));
        }
        self.cohort.left = left;
        true
    }
}

impl Engine for Scheduler {
    fn front_end_ns_per_request(&self, chat: bool) -> u64 {
        if chat && self.config.version == Version::new(0, 11, 0) {
            VLLM_0110_CHAT_TEMPLATE_KWARGS_NS
        } else {
            0
        }
    }

    fn ff_begin(&mut self, ids: &mut Vec<ReqId>) -> u64 {
        ids.clear();
        let n = self.running.len();
        let budget = self.config.max_num_batched_tokens as usize;
        // Phase A schedules every running request (one token each); phase B admits nothing:
        // nothing waits, it stops before touching the queue (`max_num_seqs`, no budget), or
        // the queue's head stays blocked (below).
        if n == 0 || n > budget {
            return 0;
        }
        if self.cohort.members > 0 {
            if self.ff_probe() == FfProbe::Refused {
                return 0;
            }
            // The checks below read every request.
            self.dissolve();
        }
        // Phase B tries the waiting queue's head at every step: the run may go on only while
        // that head stays blocked (checked at every step, `ff_head_stays_blocked`).
        let phase_b = self.waiting_len() > 0 && n < self.config.max_num_seqs as usize && n < budget;
        self.ff_head = None;
        if phase_b {
            match self.ff_blocked_head() {
                Some(h) => self.ff_head = Some(h),
                None => return 0,
            }
        }
        // A request that finishes at the next step ends the run before it starts (most steps
        // at a high concurrency): found before the longer checks below.
        if self.running.iter().any(|&id| {
            let r = self.req(id);
            r.output_len.saturating_sub(r.num_output_tokens + 1) == 0
        }) {
            return 0;
        }
        let async_ = self.config.behaviour.async_scheduling;
        if async_ {
            // The plan formed for the next step is the running list, one decode each: the
            // run's steps are that plan and the ones `ff_step` forms after it.
            let p = &self.plans[self.cur ^ 1].scheduled;
            if p.len() != n
                || p.iter()
                    .zip(&self.running)
                    .any(|(s, &id)| s.id != id || s.prefill || !s.samples || s.num_tokens != 1)
            {
                return 0;
            }
        }
        self.ff_calendar.clear();
        self.ff_base.clear();
        let mut k_max = u64::MAX;
        let mut ctx = 0u64;
        for pos in 0..n {
            let r = self.req(self.running[pos]);
            // A decode: one token left to compute, the request has sampled before. Under
            // async scheduling its decode for the next step is already planned: one
            // placeholder, and `num_computed_tokens` counts the token that decode computes
            // (the last one sampled), so it equals `num_tokens`, one short of `total`.
            let ready = if async_ {
                r.placeholders == 1 && r.num_computed_tokens + 1 == r.total()
            } else {
                r.placeholders == 0 && r.num_computed_tokens + 1 == r.num_tokens()
            };
            if r.status != Status::Running || r.num_output_tokens == 0 || !ready {
                return 0;
            }
            // It must not finish within the run: at most output_len − outputs − 1 steps
            // (under async scheduling, nor be left out of a plan the run forms).
            k_max = k_max.min(u64::from(r.output_len.saturating_sub(r.num_output_tokens + 1)));
            if k_max == 0 {
                // A request finishes at the next step (most steps at a high concurrency):
                // no run, and no need to look at the rest.
                return 0;
            }
            // The context of its decode in the run's first step; `ff_step(j)` allocates
            // for a step whose decode reaches `base + j` tokens.
            let t0 = if async_ { r.num_computed_tokens } else { r.num_tokens() };
            ctx += u64::from(t0);
            self.ff_base.push(r.num_computed_tokens + 1);
        }
        if k_max == 0 {
            return 0;
        }
        // The heap is built by the first `ff_step`: often the next event comes first.
        self.ff_calendar_ready = false;
        self.ff_ctx0 = ctx;
        ids.extend_from_slice(&self.running);
        k_max
    }

    fn ff_probe(&self) -> FfProbe {
        let n = self.running.len();
        if self.cohort.members == 0 {
            return FfProbe::Unknown;
        }
        if n > self.config.max_num_batched_tokens as usize {
            return FfProbe::Refused;
        }
        // The members are plain decodes that sample no last token at the next plan unless
        // due then (a grouped member's next block is one `ff_step` takes); a request outside
        // that is not one refuses the run as `ff_begin` would.
        let async_ = self.config.behaviour.async_scheduling;
        if self.cohort.cal.next <= self.cohort.formed {
            return FfProbe::Refused;
        }
        let mut ctx = 0u64;
        // An estimate, from below, of the most steps the run could take (`ff_begin`'s
        // `k_max`): the first cohort plan a member is due in (its last token, or a block,
        // which would not end the run), and the fewest tokens a request outside has left.
        let mut run = self.cohort.cal.next - self.cohort.formed;
        for &(_, id) in &self.cohort.outside {
            let r = self.req(id);
            let ready = if async_ {
                r.placeholders == 1 && r.num_computed_tokens + 1 == r.total()
            } else {
                r.placeholders == 0 && r.num_computed_tokens + 1 == r.num_tokens()
            };
            if r.status != Status::Running
                || r.num_output_tokens == 0
                || !ready
                || r.output_len.saturating_sub(r.num_output_tokens + 1) == 0
            {
                return FfProbe::Refused;
            }
            run = run.min(u64::from(r.output_len - (r.num_output_tokens + 1)));
            ctx += u64::from(if async_ { r.num_computed_tokens } else { r.num_tokens() });
        }
        // A short run is not worth the cohort it dissolves (every member leaves, the next
        // `Cohort::QUIET` plans walk every running request, then all join again).
        if run.saturating_mul(Cohort::FF_MEMBERS_PER_STEP) < u64::from(self.cohort.members) {
            return FfProbe::Refused;
        }
        // The members' contexts in `ff_begin`'s first step: their `total()` in the next cohort
        // plan (synchronous), or their computed tokens (async: the plan in flight's decodes).
        let m = u64::from(self.cohort.members);
        let members = self.cohort.ctx_base.wrapping_add(m * self.cohort.formed);
        ctx += if async_ { members.wrapping_sub(m) } else { members };
        FfProbe::FirstStep(StepShape { cpu_overlapped: async_, ..StepShape::decodes(n as u64, ctx) })
    }

    fn ff_shape(&self, j: u64) -> StepShape {
        let n = self.ff_base.len() as u64;
        StepShape {
            cpu_overlapped: self.config.behaviour.async_scheduling,
            ..StepShape::decodes(n, self.ff_ctx0 + j * n)
        }
    }

    fn ff_step(&mut self, j: u64) -> bool {
        if self.ff_calendar_ready && !self.ff_calendar.due(j) {
            // No request needs a block or fills one at this step (most steps): the pool is
            // untouched, so a blocked head of queue stays blocked, with the same lookup.
            self.ff_count_head_lookup();
            self.counters.num_steps += 1;
            return true;
        }
        // The requests whose `allocate_slots` leaves the fast path at this step, in running order.
        if !self.ff_calendar_ready {
            self.ff_calendar_ready = true;
            for pos in 0..self.ff_base.len() {
                let slow = self.ff_next_slow(&self.req(self.running[pos]).kv);
                self.ff_calendar.push(j, u64::from(slow.saturating_sub(self.ff_base[pos])), pos as u32);
            }
        }
        let mut tmp = std::mem::take(&mut self.ff_tmp);
        tmp.clear();
        self.ff_calendar.take_due(j, &mut tmp);
        let bs = self.config.block_size;
        let mut need = 0u32;
        for &pos in &tmp {
            let t = self.ff_base[pos as usize] + j as u32;
            let held = self.req(self.running[pos as usize]).kv.held();
            need += t.div_ceil(bs).saturating_sub(held);
        }
        // A preemption, or an admission: not a plain step.
        if need > self.kv.pool.num_free() || (self.ff_head.is_some() && !self.ff_head_stays_blocked(need, &tmp, j)) {
            for &pos in &tmp {
                self.ff_calendar.push(j, j, pos);
            }
            self.ff_tmp = tmp;
            return false;
        }
        for &pos in &tmp {
            let t = self.ff_base[pos as usize] + j as u32;
            let id = self.running[pos as usize];
            let ok = self.allocate_running(id, t, t - 1, 1);
            debug_assert!(ok, "the step's blocks were counted free");
            let slow = self.ff_next_slow(&self.req(id).kv);
            self.ff_calendar.push(j, j + u64::from(slow.saturating_sub(t)).max(1), pos);
        }
        self.ff_tmp = tmp;
        if let Some(h) = self.ff_head {
            // Phase B: the head's lookup (as foreseen), counted where the release counts it,
            // and its admission refused.
            let evictable = self.head_lookup(h.id, h.num_tokens);
            debug_assert!(self.ff_head_need(h, self.head_hit.blocks.len() as u32, evictable) > self.kv.pool.num_free());
            self.ff_count_head_lookup();
        }
        self.counters.num_steps += 1;
        true
    }

    fn ff_end(&mut self, k: u64) {
        if k > 0 {
            self.cohort.quiet = 0;
        }
        if k == 0 {
            return;
        }
        let k32 = k as u32;
        for i in 0..self.running.len() {
            let id = self.running[i];
            let r = self.req_mut(id);
            r.num_computed_tokens += k32;
            r.num_output_tokens += k32;
        }
        self.last_tokens = self.ff_shape(k - 1).total_tokens();
        if self.config.behaviour.async_scheduling {
            // The plan formed during the run's last step: the same decodes, k tokens on.
            self.plans[self.cur ^ 1].shape = self.ff_shape(k);
        }
    }

    /// Notes the first-block hashes more than one request holds: every other request with
    /// a full first block is private ([`RequestKv::private`]).
    fn expect_requests(&mut self, specs: &[&RequestSpec]) {
        if !self.kv.enable_caching {
            return;
        }
        let bs = self.config.block_size;
        let by_id: Vec<Option<u64>> = specs.iter().map(|s| first_block_hash(s, bs)).collect();
        let mut firsts: Vec<u64> = by_id.iter().flatten().copied().collect();
        firsts.sort_unstable();
        let mut shared: Vec<u64> = firsts.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]).collect();
        shared.dedup();
        self.private_by_id = by_id.iter().map(|h| h.is_some_and(|h| shared.binary_search(&h).is_err())).collect();
        self.shared_first_blocks = Some(shared);
    }

    fn add_request(&mut self, id: ReqId, spec: &RequestSpec) {
        let idx = id as usize;
        assert!(self.requests.get(id).is_none(), "request {id} added twice");
        let seq = self.next_arrival_seq;
        self.next_arrival_seq += 1;
        let private_of = |shared: &Vec<u64>| {
            first_block_hash(spec, self.config.block_size).is_some_and(|h| shared.binary_search(&h).is_err())
        };
        // Found by `expect_requests` for the requests it was told (`specs[id]` is request `id`).
        let private = self.shared_first_blocks.as_ref().is_some_and(|shared| match self.private_by_id.get(idx) {
            Some(&p) => {
                debug_assert_eq!(p, private_of(shared), "request {id} is not the one expect_requests was told");
                p
            }
            None => private_of(shared),
        });
        self.requests.insert(id, spec, seq, private);
        self.num_unfinished += 1;
        match &mut self.waiting {
            WaitingQueue::Fcfs(q) => q.push_back(id),
            WaitingQueue::Priority(q) => {
                q.insert((spec.priority, seq, id));
            }
        }
    }

    fn enable_lazy_decodes(&mut self) {
        self.cohort.enabled = true;
    }

    fn lazy_tick(&self) -> Option<(u64, u32)> {
        self.cohort.last_tick
    }

    fn take_lazy_departures(&mut self, all: bool, out: &mut Vec<LazyDeparture>) {
        if all && self.cohort.active {
            // The run is over: every member's processed tokens (plans in flight never finish).
            for i in 0..self.running.len() {
                let id = self.running[i];
                if self.req(id).member.is_some() {
                    self.depart_listing(id, false);
                }
            }
            self.cohort.active = false;
            self.cohort.outside.clear();
        }
        out.append(&mut self.cohort.departed);
    }

    fn schedule(&mut self) -> &StepPlan {
        if !self.config.behaviour.async_scheduling {
            self.do_schedule();
            return &self.plans[self.cur];
        }
        // Async scheduling (`step_with_batch_queue`, two batches in flight): the step
        // that starts now is the plan formed one step ago, if it scheduled anything (an
        // empty one is formed again now, with what has been processed since); the plan
        // for the step after it is formed now, before this step's output is processed.
        if self.plans[self.cur ^ 1].is_empty() {
            self.do_schedule();
        } else {
            self.cur ^= 1;
        }
        self.plans[self.cur ^ 1].clear();
        if !self.plans[self.cur].is_empty() {
            self.cur ^= 1;
            self.do_schedule();
            self.cur ^= 1;
        }
        &self.plans[self.cur]
    }

    fn finish_step(&mut self, out: &mut Vec<TokenOutput>) {
        self.do_finish_step(out);
        self.last_tokens = self.plans[self.cur].shape.total_tokens();
        self.plans[self.cur].clear();
    }

    fn abort_request(&mut self, id: ReqId) -> bool {
        let Some(r) = self.requests.get_mut(id) else { return false };
        if r.status == Status::Finished {
            return false;
        }
        self.dissolve();
        if self.head_memo.is_some_and(|(m, _)| m == id) {
            self.drop_head_memo();
        }
        if self.plans[self.cur ^ 1].scheduled.iter().any(|s| s.id == id) {
            // Async scheduling: it leaves the plan formed for the next step too.
            self.plans[self.cur ^ 1].scheduled.retain(|s| s.id != id);
            let mut shape =
                StepShape { cpu_overlapped: self.plans[self.cur ^ 1].shape.cpu_overlapped, ..Default::default() };
            for s in &self.plans[self.cur ^ 1].scheduled {
                let c = self.req(s.id).num_computed_tokens;
                if s.prefill {
                    shape.add_prefill(u64::from(c - s.num_tokens), u64::from(s.num_tokens));
                } else {
                    shape.add_decode(u64::from(c));
                }
            }
            self.plans[self.cur ^ 1].shape = shape;
        }
        let r = self.requests.get_mut(id).expect("live request");
        match r.status {
            Status::Finished => return false,
            Status::Running => {
                let Scheduler { kv, requests, .. } = self;
                let r = requests.get_mut(id).expect("live request");
                kv.free(&mut r.kv);
                self.running.retain(|&x| x != id);
            }
            _ => {
                let key = (r.spec.priority, r.arrival_seq, id);
                match &mut self.waiting {
                    WaitingQueue::Fcfs(q) => q.retain(|&x| x != id),
                    WaitingQueue::Priority(q) => {
                        q.remove(&key);
                    }
                }
            }
        }
        self.requests.remove(id);
        self.num_unfinished -= 1;
        true
    }

    fn num_unfinished(&self) -> usize {
        self.num_unfinished
    }

    fn num_running(&self) -> usize {
        self.running.len()
    }

    fn num_waiting(&self) -> usize {
        self.waiting_len()
    }

    fn kv_usage(&self) -> f64 {
        self.kv.pool.usage()
    }

    fn kv_capacity_tokens(&self) -> u64 {
        self.config.kv_capacity_tokens()
    }

    fn counters(&self) -> EngineCounters {
        self.counters
    }

    fn cached_prefix_tokens(&self, spec: &RequestSpec) -> u32 {
        super::cached_prefix_tokens(&self.kv, spec)
    }

    fn check_invariants(&self) -> Result<(), String> {
        self.kv.pool.check()?;
        if self.running.len() > self.config.max_num_seqs as usize {
            return Err(format!("{} running > max_num_seqs {}", self.running.len(), self.config.max_num_seqs));
        }
        let tokens = self.last_tokens;
        if tokens > u64::from(self.config.max_num_batched_tokens) {
            return Err(format!("step of {tokens} tokens > max_num_batched_tokens"));
        }
        // Every live request is in exactly one place, and block references
        // add up to the pool's ref counts.
        let n = self.kv.pool.num_usable() as usize + 1;
        let mut refs = vec![0u32; n];
        let mut seen = vec![0u8; self.requests.ids()];
        let mut anonymous_held = 0u32;
        for &id in &self.running {
            seen[id as usize] += 1;
            let r = self.req(id);
            if r.status != Status::Running {
                return Err(format!("request {id} in running with status {:?}", r.status));
            }
            let computed = self.view(r).0;
            let need = computed.div_ceil(self.config.block_size) as usize;
            let held = r.kv.blocks.len() + self.anon_now(r) as usize;
            if held < need {
                return Err(format!("request {id} computed {computed} tokens with {held} blocks"));
            }
            if let Some((g, pos)) = r.group {
                if self.cohort.groups[g as usize].get(pos as usize) != Some(&(r.rseq, id)) || r.member.is_none() {
                    return Err(format!("request {id} misplaced in group {g} at {pos}"));
                }
            }
            if r.member.is_some_and(|(s0, due)| s0 > self.cohort.formed || due < self.cohort.formed) {
                return Err(format!("member {id} {:?} at cohort plan {}", r.member, self.cohort.formed));
            }
            for &b in &r.kv.blocks {
                refs[b as usize] += 1;
            }
            anonymous_held += self.anon_now(r);
        }
        let waiting: Vec<ReqId> = match &self.waiting {
            WaitingQueue::Fcfs(q) => q.iter().copied().collect(),
            WaitingQueue::Priority(q) => q.iter().map(|&(_, _, id)| id).collect(),
        };
        for id in waiting {
            seen[id as usize] += 1;
            let r = self.req(id);
            if !matches!(r.status, Status::Waiting | Status::Preempted) || r.kv.held() != 0 {
                return Err(format!("waiting request {id} has status {:?} and {} blocks", r.status, r.kv.held()));
            }
        }
        let mut live = 0;
        for (id, &count) in seen.iter().enumerate() {
            if let Some(r) = self.requests.get(id as ReqId) {
                if r.status == Status::Finished {
                    continue;
                }
                live += 1;
                if count != 1 {
                    return Err(format!("request {id} appears {count} times in running+waiting"));
                }
            } else if count != 0 {
                return Err(format!("finished request {id} still queued"));
            }
        }
        if live != self.num_unfinished {
            return Err(format!("{live} live requests, counter says {}", self.num_unfinished));
        }
        for (b, &count) in refs.iter().enumerate().skip(1) {
            if count != self.kv.pool.ref_cnt(b as u32) {
                return Err(format!("block {b}: {count} holders, ref_cnt {}", self.kv.pool.ref_cnt(b as u32)));
            }
        }
        let members = self.running.iter().filter(|&&id| self.req(id).member.is_some()).count();
        if members != self.cohort.members as usize {
            return Err(format!("{members} members, the cohort counts {}", self.cohort.members));
        }
        if self.cohort.active && members + self.cohort.outside.len() != self.running.len() {
            return Err(format!(
                "{members} members and {} outside of {} running",
                self.cohort.outside.len(),
                self.running.len()
            ));
        }
        if anonymous_held != self.kv.pool.num_anonymous_held() {
            return Err(format!(
                "running requests hold {anonymous_held} anonymous blocks, the pool counts {}",
                self.kv.pool.num_anonymous_held()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_of_finds_the_first_match() {
        for n in 0..70u32 {
            let list: Vec<ReqId> = (0..n).map(|i| (i * 7) % 23).collect();
            for id in 0..25 {
                assert_eq!(position_of(&list, id), list.iter().position(|&x| x == id), "n {n} id {id}");
            }
        }
    }

    /// The calendar gives what a heap of `(step, position)` pairs gives, step by step, with
    /// steps near (the ring), far (the wheel) and farther (the heap or the queue), re-pushes at the
    /// current step, and runs cleared in between (stale buckets of an earlier run read as empty).
    #[test]
    fn ff_calendar_takes_what_a_heap_of_pairs_pops() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut cal = FfCalendar::default();
        for run in 0..200 {
            cal.clear();
            let mut heap: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::new();
            let n = 1 + rnd(40) as u32;
            for pos in 0..n {
                let s = match run % 4 {
                    0 => rnd(200),
                    1 => rnd(20),
                    2 => rnd(9000),
                    _ => 500 + rnd(3000),
                };
                cal.push(0, s, pos);
                heap.push(Reverse((s, pos)));
            }
            for j in 0..20_000u64 {
                if heap.is_empty() && j > 400 {
                    break;
                }
                let mut want = Vec::new();
                while let Some(&Reverse((s, pos))) = heap.peek() {
                    if s != j {
                        break;
                    }
                    heap.pop();
                    want.push(pos);
                }
                assert_eq!(cal.due(j), !want.is_empty(), "run {run} step {j}");
                let mut got = Vec::new();
                // The scheduler also takes at a step where nothing is due (the first of a run).
                if cal.due(j) || rnd(4) == 0 {
                    cal.take_due(j, &mut got);
                }
                assert_eq!(got, want, "run {run} step {j}");
                for &pos in &got {
                    let s = j
                        + 1
                        + rnd(if pos % 5 == 0 {
                            150
                        } else if pos % 7 == 0 {
                            6000
                        } else {
                            17
                        });
                    cal.push(j, s, pos);
                    heap.push(Reverse((s, pos)));
                }
                if rnd(if run % 4 >= 2 { 30_000 } else { 300 }) == 0 {
                    break; // a run that ends early leaves entries behind
                }
            }
        }
    }
}
