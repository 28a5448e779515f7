//! The discrete-event loop: a client (open or closed loop, as `vllm bench
//! serve` drives a server), a front end (ingress, output streaming) and one
//! engine, in integer nanoseconds.
//!
//! # Event order
//!
//! Events are ordered by `(time, sequence number)`: two events at the same
//! instant run in the order they were scheduled (FIFO). There is one sequence
//! counter, so the order is total and the run deterministic. The events wait in
//! a heap, but for a phase's client sends: they are all known when the phase
//! starts (10,000 at one instant at `request_rate=inf`), so they take their
//! sequence numbers then, as they would entering the heap, are sorted once, and
//! are merged with the heap's events in the same `(time, sequence)` order (as
//! the fleet loop does, `crate::fleet`). The step's end (one at a time) waits in a slot of
//! its own, and the engine arrivals and the client's completions each in a queue of their
//! own while they come in time order (as they mostly do: the front end's queues are FIFO),
//! in the heap when one does not; the next event is the least `(time, sequence)` of the
//! sends', the slot's, the queues' fronts and the heap's, the same order as one heap's.
//!
//! # Phases
//!
//! The initial test request, the warm-ups and the timed requests run one
//! phase after the other; the next starts when the last request of the
//! previous one has been received by the client. Only the timed phase is
//! measured; the engine's caches carry over, as they do on a real server.
//!
//! # Fast-forward (`RunOptions::fast_forward`, on by default)
//!
//! At a step's end, before planning the next step, the loop asks the engine
//! ([`Engine::ff_begin`]) whether the coming steps are *plain decode steps*, and if so
//! runs as many as end strictly before the next event without planning
//! them one by one. Each condition is there because it makes those steps identical
//! but for each request's context (one more token per step):
//!
//! * **Every running request decodes one token** (it has sampled before and has one
//!   token left to compute): the plan is the running list, in order, one token each,
//!   so the shape is `n` decodes whose context sum grows by `n` a step, and the cost
//!   model is still called on each step's shape (`CostModel::step_ns`, rounded per
//!   step), so durations are the same integers.
//! * **No request finishes within the run** (at most `output_len − outputs − 1`
//!   steps): nothing is freed, the running list and its order stay, no `ClientDone`
//!   or next-phase event is made, and with `output_lag` no last token jumps the queue.
//! * **No waiting request can be admitted and no prefill is in progress.** vLLM:
//!   nothing waits, or phase B stops before touching the queue (`max_num_seqs`
//!   reached, no token budget left), or the queue's head is blocked and stays so:
//!   its prefix lookup stands (no block of its hit is among those the step's
//!   allocations evict, and no block the step caches holds the hash it missed), so it
//!   asks for the same blocks at every step, more than are free after the step's
//!   allocations (its lookups counted as the release counts them); and every running
//!   request fits the budget.
//!   SGLang: no chunked request, and nothing waits or `batch_is_full` (only a finish
//!   or a retraction clears it), so `get_new_batch_prefill` returns at its first test
//!   and the queue is neither sorted nor shuffled (the `random` stream is not drawn).
//! * **No preemption or retraction, no eviction.** vLLM: a step's new blocks (a
//!   request crossing a block boundary) are counted against the free queue before
//!   the step is taken; if they do not fit the run ends and the step is planned
//!   normally. The requests that leave `allocate_slots`' fast path at a step (a
//!   block needed, or with prefix caching a block filled and hashed) are found from
//!   their block counts and call the real `allocate_slots`, in running order, so the
//!   free queue, the hash map and each request's block hashes change exactly as
//!   when stepping; the others would change nothing. SGLang: the pages a step needs
//!   (requests at a page boundary) must be available without evicting, so
//!   `check_decode_mem` passes, nothing is retracted and the tree is untouched;
//!   `new_token_ratio` decays by the same f64 operation once per step.
//! * **No event falls inside.** Every fast-forwarded step ends strictly before the
//!   next event (an event at the same instant was scheduled first and runs
//!   first), so no arrival, client send or completion could have changed a plan.
//!   `max_steps` is honoured: the step that reaches it is left to the normal path.
//!
//! The loop does per step what `start_step` and `on_step_end` do for such a step:
//! the step count, the gauge sample (and its integral and time series), and the
//! delivery of the step's tokens through the output streaming queue, at the same
//! instants and in the same order (with `output_lag`, each step delivers the one
//! before's tokens). The engine then applies the `k` tokens to each request at once
//! ([`Engine::ff_end`]). The output is byte-identical to stepping
//! (`sim/tests/fast_forward.rs`: random scenarios of both engines and every scenario
//! file, both ways).
//!
//! # Lazy decodes (`RunOptions::lazy_decodes`, on by default)
//!
//! Where no step repeats the last (a finish and an admission nearly every step at a high
//! concurrency), the fast-forward never applies, and each step's plan, outputs and
//! delivery would list every running request. The loop tells the engine it may instead
//! count the steady decodes of a *cohort* ([`Engine::enable_lazy_decodes`]; vLLM's
//! scheduler under FCFS, `engine::vllm::scheduler`'s module docs): a plan's
//! `lazy_decodes` are in its shape but not in its list, and [`Engine::finish_step`] lists
//! only the other tokens, [`Engine::lazy_tick`] giving the step's cohort finish number and
//! token count. The loop streams all the step's tokens as one delivery, as before, and
//! keeps which delivery each cohort finish number got (`lazy_deliveries`, runs of
//! consecutive ones). A member never sees its first token or its last in the cohort, so
//! nothing but its [`RequestRecord::tokens`] needs it; when it leaves (the engine lists
//! [`crate::engine::LazyDeparture`]s: its first finish number and how many of its tokens
//! were processed), before any later token of it is delivered and at the run's end, its
//! record takes those deliveries as runs, exactly the indices one push per token would have
//! given. The output is byte-identical either way (`sim/tests/lazy_decodes.rs`, and the
//! fast-forward tests with both on against both off).
//!
//! # Bounds
//!
//! A run ends when every request has completed, when no event is left while
//! requests are unfinished (the engine cannot schedule them: `stalled`), after
//! `max_steps` engine steps (default 200,000,000: `step limit`), or when
//! simulated time would pass `u64::MAX` nanoseconds (584 years: `time
//! overflow`, naming what was too large: a step's cost, a send time, the
//! ingress or the streaming cost). Every addition to simulated time is
//! checked; none wraps. It always says which. The scenario's limits
//! (`sim::config::MAX_NUM_PROMPTS` and the others) bound the memory a run
//! takes; [`run_observed`] reports progress for a caller that shows it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::cost::CostModel;
use crate::engine::{Engine, EngineCounters, FfProbe, LazyDeparture, ReqId, TokenOutput};
use crate::request::RequestSpec;
use crate::workload::Workload;

/// Options of one run.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Check every engine invariant after each step (tests).
    pub check_invariants: bool,
    /// Stop after this many engine steps.
    pub max_steps: u64,
    /// Keep a per-step time series of running, waiting and KV usage.
    pub record_timeseries: bool,
    /// Advance runs of provably identical decode steps in one move (see the module docs).
    /// The output is byte-identical either way; off, every step is planned and run.
    pub fast_forward: bool,
    /// Tell the engine every request of the run before the first
    /// ([`crate::engine::Engine::expect_requests`]), so that it may skip work it proves
    /// unobservable (vLLM: registering blocks no other request can hit). The output is
    /// byte-identical either way.
    pub expect_requests: bool,
    /// Let the engine count the plain decodes of its lazy decode cohort instead of listing
    /// them ([`crate::engine::Engine::enable_lazy_decodes`]; vLLM): each request's share of
    /// their deliveries is recorded when it leaves the cohort. The output is byte-identical
    /// either way.
    pub lazy_decodes: bool,
    /// `Some((ns, count))`: stop (`StopReason::StoppedEarly`) once `count` timed requests
    /// have completed with a TTFT (first token received − sent) of at least `ns` (`tune`'s
    /// early stop of a configuration whose TTFT percentile is already certain to break an SLO).
    pub stop_after_slow_ttft: Option<(u64, usize)>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            check_invariants: false,
            max_steps: 200_000_000,
            record_timeseries: false,
            fast_forward: true,
            expect_requests: true,
            lazy_decodes: true,
            stop_after_slow_ttft: None,
        }
    }
}

/// Which phase a request belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    InitialTest,
    Warmup,
    Timed,
}

/// What happened to one request, in simulated nanoseconds.
#[derive(Clone, Debug, Default)]
pub struct RequestRecord {
    pub prompt_len: u32,
    pub output_len: u32,
    /// The client sent it (after its concurrency slot was free).
    pub dispatch_ns: u64,
    /// It reached the scheduler's waiting queue.
    pub engine_arrival_ns: u64,
    pub first_scheduled_ns: Option<u64>,
    /// Σ durations of the steps that ran its prompt, until its first token.
    pub prefill_compute_ns: u64,
    /// End of the step that produced its first token.
    pub first_token_step_end_ns: Option<u64>,
    /// The deliveries of the run's [`TokenLog`] that brought its output tokens, one token
    /// each: when the client received each token is the delivery's time
    /// ([`RunResult::token_times`]).
    pub tokens: TokenRuns,
    pub completed: bool,
    /// Its last token is an EOS for which the client received no chunk it times
    /// ([`crate::workload::Workload::eos_unstreamed`]: SGLang's chat stream): the request stopped
    /// at EOS (sent without `ignore_eos`, `output_len < max_tokens`), and for the client it ends
    /// at the token before ([`crate::metrics`]). False where the tokens were measured.
    pub eos_unstreamed: bool,
}

/// The instants at which the front end delivered output tokens, one entry per delivery: every
/// token one streaming call of the front end sends goes out at the same instant
/// ([`crate::delivery::FrontEnd::stream`]), so a step's tokens share one entry, and a request
/// holds only which deliveries brought its tokens ([`TokenRuns`]). A run's token times are
/// then a few bytes a step, not eight bytes a token, and the inter-token gaps of every request
/// decoding through a step are one gap with a count (`crate::metrics`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenLog {
    times_ns: Vec<u64>,
}

impl TokenLog {
    /// The most deliveries a log holds (indices are u32).
    pub const CAPACITY: usize = u32::MAX as usize;

    /// An empty log with room for the deliveries of `tokens` output tokens (at most one
    /// delivery a token), up to 2^20 deliveries (8 MiB; past it the log grows as it goes: a
    /// larger reservation bought nothing measurable at 5 M deliveries, and in the browser's
    /// wasm memory a reservation is memory taken).
    pub fn for_tokens(tokens: u64) -> TokenLog {
        TokenLog { times_ns: Vec::with_capacity(tokens.min(1 << 20) as usize) }
    }

    /// Records a delivery at `t_ns`; its index, or `None` when the log is full
    /// ([`TokenLog::CAPACITY`]).
    pub fn push(&mut self, t_ns: u64) -> Option<u32> {
        let d = u32::try_from(self.times_ns.len()).ok().filter(|&d| d < u32::MAX)?;
        self.times_ns.push(t_ns);
        Some(d)
    }

    /// Appends `n` deliveries to be written later ([`TokenLog::set`]), for a producer that
    /// keeps its own deliveries consecutive among others' (a fleet's replica); the first's
    /// index, or `None` when the log would pass [`TokenLog::CAPACITY`]. An entry never set
    /// stays 0 and no record refers to it.
    pub fn reserve_block(&mut self, n: u32) -> Option<u32> {
        let d = u32::try_from(self.times_ns.len()).ok()?;
        d.checked_add(n).filter(|&end| end < u32::MAX)?;
        self.times_ns.resize(self.times_ns.len() + n as usize, 0);
        Some(d)
    }

    /// Writes the time of delivery `d`, reserved by [`TokenLog::reserve_block`].
    pub fn set(&mut self, d: u32, t_ns: u64) {
        self.times_ns[d as usize] = t_ns;
    }

    /// The time of delivery `d`.
    pub fn time(&self, d: u32) -> u64 {
        self.times_ns[d as usize]
    }

    /// Every delivery's time, by index.
    pub fn times_ns(&self) -> &[u64] {
        &self.times_ns
    }

    /// The number of deliveries.
    pub fn len(&self) -> usize {
        self.times_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.times_ns.is_empty()
    }

    /// Records one delivery per time of `times_ns` (a request's token times, measured one by
    /// one, as a live run has them) and returns them as a request's [`TokenRuns`].
    /// Panics past [`TokenLog::CAPACITY`] deliveries.
    pub fn append(&mut self, times_ns: &[u64]) -> TokenRuns {
        let mut runs = TokenRuns::default();
        for &t in times_ns {
            runs.push(self.push(t).expect("a token log holds at most u32::MAX deliveries"));
        }
        runs
    }

    /// The times of the tokens of `runs`, in order.
    pub fn times<'a>(&'a self, runs: &'a TokenRuns) -> impl Iterator<Item = u64> + 'a {
        runs.runs().flat_map(move |(s, n)| self.times_ns[s as usize..(s + n) as usize].iter().copied())
    }
}

/// The deliveries ([`TokenLog`]) that brought a request's tokens, as runs of consecutive
/// deliveries `(first, count)`: a request decoding through `k` steps in a row is one run, so a
/// request takes a few runs (one more after each preemption or pause), not a time per token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenRuns {
    /// The first run (count 0: no token yet).
    first: (u32, u32),
    /// The runs after the first.
    more: Vec<(u32, u32)>,
}

impl TokenRuns {
    /// One token at delivery `d`, received after every token already held. Deliveries usually
    /// come in index order; in a fleet a request moved to another replica (disaggregated
    /// prefill and decode) continues in that replica's block of the log, which may lie before
    /// the first's. A token at the delivery right after the last held one extends its run.
    pub fn push(&mut self, d: u32) {
        self.push_run(d, 1);
    }

    /// `count` tokens at the consecutive deliveries from `first` on: as many
    /// [`TokenRuns::push`]es.
    pub fn push_run(&mut self, first: u32, count: u32) {
        if count == 0 {
            return;
        }
        if self.first.1 == 0 {
            self.first = (first, count);
            return;
        }
        let last = self.more.last_mut().unwrap_or(&mut self.first);
        if last.0 + last.1 == first {
            last.1 += count;
        } else {
            self.more.push((first, count));
        }
    }

    /// The runs `(first delivery, count)`, in order.
    pub fn runs(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        std::iter::once(self.first).filter(|r| r.1 > 0).chain(self.more.iter().copied())
    }

    /// The number of tokens.
    pub fn len(&self) -> usize {
        self.first.1 as usize + self.more.iter().map(|r| r.1 as usize).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.first.1 == 0
    }

    /// The delivery of the first token.
    pub fn first_delivery(&self) -> Option<u32> {
        (self.first.1 > 0).then_some(self.first.0)
    }

    /// The delivery of the last token.
    pub fn last_delivery(&self) -> Option<u32> {
        let last = self.more.last().unwrap_or(&self.first);
        (last.1 > 0).then(|| last.0 + last.1 - 1)
    }

    /// These runs less the last token (empty from one token or none).
    pub fn without_last(&self) -> TokenRuns {
        let mut t = self.clone();
        match t.more.last_mut() {
            Some(last) if last.1 > 1 => last.1 -= 1,
            Some(_) => {
                t.more.pop();
            }
            None => t.first.1 = t.first.1.saturating_sub(1),
        }
        t
    }
}

/// One sample of the engine's gauges, taken when a step starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GaugeSample {
    pub t_ns: u64,
    pub running: u32,
    pub waiting: u32,
    pub kv_usage: f64,
}

/// Time-weighted gauges over the timed phase.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GaugeStats {
    pub kv_usage_peak: f64,
    pub kv_usage_mean: f64,
    pub running_peak: u32,
    pub running_mean: f64,
    pub waiting_peak: u32,
    pub waiting_mean: f64,
    /// A live run whose engine never reported a request in flight (no metrics endpoint, or
    /// no poll fell while requests ran): the gauges above are not measurements, and the report
    /// says so (`null` in JSON, "n/a" in text) instead of printing zeros. Never set by the
    /// simulator.
    pub unmeasured: bool,
}

/// Why the run stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    Completed,
    Stalled {
        unfinished: usize,
        /// The engine's reason, where it gives one ([`crate::engine::Engine::stall_reason`]).
        why: Option<String>,
    },
    StepLimit {
        steps: u64,
    },
    InvariantViolated(String),
    /// The modelled engine stops here ([`crate::engine::Engine::fatal_error`] says why):
    /// the real one would raise and no request after this point would complete.
    EngineError(String),
    /// A live run stopped by the user (Ctrl-C) after `completed` requests.
    Interrupted {
        completed: usize,
    },
    /// Simulated time would have passed `u64::MAX` nanoseconds; `cause` says what was too large.
    TimeOverflow {
        cause: &'static str,
    },
    /// [`RunOptions::stop_after_slow_ttft`]'s count was reached after `completed` timed requests.
    StoppedEarly {
        completed: usize,
    },
    /// The run's last request was sent before its measured window closed
    /// ([`crate::workload::Workload::measure_window_ns`]): the load thinned inside the window.
    /// Nanoseconds from the timed phase's start.
    WindowOutlastsLoad {
        last_send_ns: u64,
        window_end_ns: u64,
    },
    /// No timed request completed in the measured window: nothing to measure (its statistics
    /// would be zeros). Nanoseconds from the timed phase's start.
    WindowEmpty {
        window_start_ns: u64,
        window_end_ns: u64,
    },
}

impl StopReason {
    /// Ok for a run that completed; else the error a command reports instead of the run's
    /// metrics, which cover only the requests that finished ("the run did not complete: …").
    pub fn completed(&self) -> Result<(), String> {
        match self {
            StopReason::Completed => Ok(()),
            other => Err(format!("the run did not complete: {}", other.as_str())),
        }
    }

    /// What the figures of a run stopped this way cover, for a warning beside them.
    pub fn figures_cover(&self) -> &'static str {
        match self {
            StopReason::Completed => "its figures cover every timed request",
            StopReason::WindowOutlastsLoad { .. } => {
                "every request finished, but its figures measure a load that thinned inside the measured window"
            }
            StopReason::WindowEmpty { .. } => "no request completed in the measured window: its figures are empty",
            _ => "its metrics cover only the requests that finished",
        }
    }

    pub fn as_str(&self) -> String {
        match self {
            StopReason::Completed => "completed".into(),
            StopReason::Stalled { unfinished, why } => {
                let why = why.as_deref().map(|w| format!(": {w}")).unwrap_or_default();
                format!("stalled: {unfinished} requests could not be scheduled and nothing else could happen{why}")
            }
            StopReason::StepLimit { steps } => format!("step limit: stopped after {steps} engine steps"),
            StopReason::InvariantViolated(m) => format!("invariant violated: {m}"),
            StopReason::EngineError(m) => format!("engine error: {m}"),
            StopReason::Interrupted { completed } => format!("interrupted: {completed} requests had completed"),
            StopReason::TimeOverflow { cause } => {
                format!("time overflow: simulated time passed 584 years (u64 nanoseconds): {cause}")
            }
            StopReason::StoppedEarly { completed } => {
                format!("stopped early: enough slow first tokens after {completed} requests")
            }
            StopReason::WindowOutlastsLoad { last_send_ns, window_end_ns } => format!(
                "the measured window outlasts the load: the last prompt was sent at {:.3} s, before the \
                 window closes at {:.3} s (workload.window_start_s + window_duration_s), so the load \
                 thinned inside it; raise workload.num_prompts (a trace: close the window before its last send)",
                *last_send_ns as f64 / 1e9,
                *window_end_ns as f64 / 1e9
            ),
            StopReason::WindowEmpty { window_start_ns, window_end_ns } => format!(
                "no request completed in the measured window ({:.3} s to {:.3} s of the timed phase: \
                 workload.window_start_s, window_duration_s): nothing to measure; lengthen the window or move it",
                *window_start_ns as f64 / 1e9,
                *window_end_ns as f64 / 1e9
            ),
        }
    }
}

/// The outcome of a run.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Records of the timed requests, in workload order.
    pub records: Vec<RequestRecord>,
    pub bench_start_ns: u64,
    pub bench_end_ns: u64,
    /// Engine counters accumulated during the timed phase.
    pub counters: EngineCounters,
    pub gauges: GaugeStats,
    pub timeseries: Vec<GaugeSample>,
    pub kv_capacity_tokens: u64,
    pub stop: StopReason,
    /// Engine steps in the whole run.
    pub num_steps: u64,
    /// Simulated time of the whole run (all phases).
    pub end_ns: u64,
    /// Ingress cost per request, for the TTFT breakdown.
    pub ingress_ns: u64,
    /// Of `num_steps`, the steps the fast-forward ran (0 with it off). Not reported: it
    /// says how a run was computed, not what it computed.
    pub fast_forwarded_steps: u64,
    /// Of the tokens produced, those of the engine's lazy decode cohort (0 with
    /// [`RunOptions::lazy_decodes`] off). Not reported, as `fast_forwarded_steps`.
    pub lazy_decoded_tokens: u64,
    /// The deliveries the records' [`RequestRecord::tokens`] refer to.
    pub token_log: TokenLog,
    /// Each completed record has one more ITL, of 0, before its first delivery's: the
    /// benchmark client timed the chat role chunk, sent with the first token
    /// ([`crate::workload::Workload::role_chunk`]). False where the gaps were measured.
    pub role_chunk_gaps: bool,
    /// Tokens of each record's `prompt_len` the client's `total_input_tokens` leaves out
    /// ([`crate::workload::Workload::uncounted_prompt_tokens`]: the BOS of a generated prompt,
    /// for `vllm bench serve` before 0.20). 0 where the counts were measured.
    pub uncounted_prompt_tokens: u32,
    /// The measured window, `(start, end)` in the run's time: the metrics cover the records
    /// completed in it ([`crate::workload::Workload::measure_window_ns`]); `None`: all.
    pub measure_window_ns: Option<(u64, u64)>,
}

impl RunResult {
    /// When the client received each token of `r`, one of this run's records.
    pub fn token_times(&self, r: &RequestRecord) -> Vec<u64> {
        self.token_log.times(&r.tokens).collect()
    }

    /// When the client received `r`'s first token.
    pub fn first_token_ns(&self, r: &RequestRecord) -> Option<u64> {
        r.tokens.first_delivery().map(|d| self.token_log.time(d))
    }

    /// When the client received `r`'s last token.
    pub fn last_token_ns(&self, r: &RequestRecord) -> Option<u64> {
        r.tokens.last_delivery().map(|d| self.token_log.time(d))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The client's send time for a request has come.
    ClientSend(ReqId),
    /// The request reaches the engine's waiting queue.
    EngineArrival(ReqId),
    /// The running step is over.
    StepEnd,
    /// The client has received the request's last token.
    ClientDone(ReqId),
    /// The closed loop's user `k` (from 1) starts ([`crate::workload::Workload::concurrency_ramp_ns`]).
    UserStart(u32),
}

struct Loop<'a, E: Engine> {
    engine: E,
    cost: &'a CostModel,
    specs: Vec<&'a RequestSpec>,
    phase_of: Vec<Phase>,
    records: Vec<RequestRecord>,
    heap: BinaryHeap<Reverse<(u64, u64, Event)>>,
    /// The pending `StepEnd`, `(time, sequence)` (module docs, "Event order").
    step_end: Option<(u64, u64)>,
    /// `EngineArrival` and `ClientDone` events pushed in time order, `(time, sequence,
    /// request)`, beside the heap.
    arrivals: VecDeque<(u64, u64, ReqId)>,
    dones: VecDeque<(u64, u64, ReqId)>,
    /// The phase's client sends as `(time, sequence, request)`, in `(time, sequence)` order,
    /// and the next one: the `ClientSend` events, kept beside the heap (module docs, "Event
    /// order").
    sends: crate::delivery::ClientSends,
    seq: u64,
    max_concurrency: Option<u32>,
    /// The closed loop's users started so far: the concurrency cap while they ramp up
    /// ([`crate::workload::Workload::concurrency_ramp_ns`]; `u32::MAX` without a ramp).
    users: u32,
    in_flight: u32,
    pending: VecDeque<ReqId>,
    remaining_in_phase: usize,
    step_running: bool,
    /// Ingress and the output streaming queue (`crate::delivery`).
    front: crate::delivery::FrontEnd,
    outputs: Vec<TokenOutput>,
    /// Tokens of the last step waiting for the next one (engines with `output_lag`).
    held: Vec<TokenOutput>,
    /// An empty buffer for the next step's held tokens.
    later: Vec<TokenOutput>,
    ingress_ns: u64,
    opts: RunOptions,
    steps: u64,
    /// Of `steps`, those the fast-forward ran.
    ff_steps: u64,
    // timed-phase bookkeeping
    timed: bool,
    bench_start: u64,
    counters_at_start: EngineCounters,
    last_sample: Option<GaugeSample>,
    integ: [f64; 3],
    gauges: GaugeStats,
    timeseries: Vec<GaugeSample>,
    stop: Option<StopReason>,
    /// When a step could not start ([`StopReason::EngineError`], a step too long): a
    /// fast-forward may have carried the clock past the event the loop last took, so the
    /// run ends here.
    stopped_at: Option<u64>,
    /// Fast-forward buffers: the run's requests in step order, and their tokens.
    ff_ids: Vec<ReqId>,
    ff_outs: Vec<TokenOutput>,
    /// Every delivery of output tokens.
    token_log: TokenLog,
    /// The deliveries of the engine's cohort finishes ([`crate::engine::Engine::lazy_tick`]),
    /// as runs `(first tick, first delivery, count)` of consecutive ticks and deliveries.
    lazy_deliveries: Vec<(u64, u32, u32)>,
    /// Reused: the requests that left the cohort.
    lazy_departed: Vec<LazyDeparture>,
    /// The cohort's tokens delivered.
    lazy_tokens: u64,
}

pub(crate) const STEP_TOO_LONG: &str =
    "an engine step's cost is too large (cost coefficients, or a prior efficiency close to 0)";
pub(crate) const SEND_TOO_LATE: &str = "a request's send time is too late (trace arrival_time or request_rate)";
pub(crate) const INGRESS_TOO_LONG: &str = "request_ingress_us is too large";
pub(crate) const STREAMING_TOO_LONG: &str = "output_token_us is too large";

impl<'a, E: Engine> Loop<'a, E> {
    fn push(&mut self, t: u64, ev: Event) {
        self.seq += 1;
        let seq = self.seq;
        // Beside the heap where it keeps its kind's order (`seq` grows: time decides).
        match ev {
            Event::StepEnd if self.step_end.is_none() => {
                self.step_end = Some((t, seq));
                return;
            }
            Event::EngineArrival(id) if self.arrivals.back().is_none_or(|&(last, _, _)| last <= t) => {
                self.arrivals.push_back((t, seq, id));
                return;
            }
            Event::ClientDone(id) if self.dones.back().is_none_or(|&(last, _, _)| last <= t) => {
                self.dones.push_back((t, seq, id));
                return;
            }
            _ => {}
        }
        self.heap.push(Reverse((t, seq, ev)));
    }

    /// `now + d`, or `None` with the run stopped naming `cause` if it overflows.
    fn later_by(&mut self, now: u64, d: u64, cause: &'static str) -> Option<u64> {
        let t = now.checked_add(d);
        if t.is_none() && self.stop.is_none() {
            self.stop = Some(StopReason::TimeOverflow { cause });
        }
        t
    }

    fn start_phase(&mut self, now: u64, ids: std::ops::Range<usize>) {
        self.remaining_in_phase = ids.len();
        self.sends.begin();
        for id in ids {
            let Some(t) = self.later_by(now, self.specs[id].arrival_ns, SEND_TOO_LATE) else { break };
            self.seq += 1;
            self.sends.push(t, self.seq, id as ReqId);
        }
        self.sends.sort();
    }

    /// The next event in `(time, sequence)` order: the least of the next send, the step's
    /// end, the queues' fronts and the heap's first.
    #[inline]
    fn pop_event(&mut self) -> Option<(u64, Event)> {
        const NONE: (u64, u64) = (u64::MAX, u64::MAX);
        let send = self.sends.peek().map_or(NONE, |(t, s, _)| (t, s));
        let step = self.step_end.unwrap_or(NONE);
        let arrival = self.arrivals.front().map_or(NONE, |&(t, s, _)| (t, s));
        let done = self.dones.front().map_or(NONE, |&(t, s, _)| (t, s));
        let heap = self.heap.peek().map_or(NONE, |Reverse((t, s, _))| (*t, *s));
        let least = send.min(step).min(arrival).min(done).min(heap);
        if least == NONE {
            return None;
        }
        if least == send {
            let (t, _, id) = self.sends.peek().expect("the next send");
            self.sends.advance();
            Some((t, Event::ClientSend(id)))
        } else if least == step {
            self.step_end = None;
            Some((step.0, Event::StepEnd))
        } else if least == arrival {
            let (t, _, id) = self.arrivals.pop_front().expect("the next arrival");
            Some((t, Event::EngineArrival(id)))
        } else if least == done {
            let (t, _, id) = self.dones.pop_front().expect("the next completion");
            Some((t, Event::ClientDone(id)))
        } else {
            self.heap.pop().map(|Reverse((t, _, ev))| (t, ev))
        }
    }

    /// The time of the next event (`u64::MAX` if none).
    #[inline]
    fn next_event_time(&self) -> u64 {
        let step = self.step_end.map_or(u64::MAX, |(t, _)| t);
        let arrival = self.arrivals.front().map_or(u64::MAX, |&(t, _, _)| t);
        let done = self.dones.front().map_or(u64::MAX, |&(t, _, _)| t);
        self.sends.next_event_time(&self.heap).min(step).min(arrival).min(done)
    }

    fn dispatch(&mut self, id: ReqId, now: u64) {
        // The fixed ingress, then (where the engine's front end tokenizes serially) the
        // tokenizer's FIFO queue (`crate::delivery::FrontEnd::arrival_tokenized`).
        let prompt_len = self.specs[id as usize].prompt_len;
        let Some(arrival) = self.front.arrival_tokenized(now, prompt_len) else {
            self.stop.get_or_insert(StopReason::TimeOverflow { cause: INGRESS_TOO_LONG });
            return;
        };
        self.in_flight += 1;
        let rec = &mut self.records[id as usize];
        rec.dispatch_ns = now;
        rec.engine_arrival_ns = arrival;
        self.push(arrival, Event::EngineArrival(id));
    }

    /// Adds the last sample's gauges, held from it (or from the start of the timed phase)
    /// until `t`, to the time integrals behind the means.
    fn integrate_gauges_until(&mut self, t: u64) {
        if let Some(prev) = self.last_sample {
            let dt = t.saturating_sub(prev.t_ns.max(self.bench_start)) as f64;
            self.integ[0] += prev.kv_usage * dt;
            self.integ[1] += f64::from(prev.running) * dt;
            self.integ[2] += f64::from(prev.waiting) * dt;
        }
    }

    fn sample_gauges(&mut self, now: u64) {
        let s = GaugeSample {
            t_ns: now,
            running: self.engine.num_running() as u32,
            waiting: self.engine.num_waiting() as u32,
            kv_usage: self.engine.kv_usage(),
        };
        if self.timed {
            self.integrate_gauges_until(now);
            let g = &mut self.gauges;
            g.kv_usage_peak = g.kv_usage_peak.max(s.kv_usage);
            g.running_peak = g.running_peak.max(s.running);
            g.waiting_peak = g.waiting_peak.max(s.waiting);
            if self.opts.record_timeseries {
                self.timeseries.push(GaugeSample { t_ns: now - self.bench_start, ..s });
            }
        }
        self.last_sample = Some(s);
    }

    fn start_step(&mut self, now: u64) {
        let plan = self.engine.schedule();
        if plan.is_empty() {
            if let Some(e) = self.engine.fatal_error() {
                // The server stops now: nothing in flight reaches the client.
                self.stop = Some(StopReason::EngineError(e.to_string()));
                self.stopped_at = Some(now);
                self.step_running = false;
                return;
            }
            self.step_running = false;
            self.sample_gauges(now);
            return;
        }
        let dur = self.cost.step_ns(&plan.shape);
        let Some(end) = now.checked_add(dur) else {
            if self.stop.is_none() {
                self.stop = Some(StopReason::TimeOverflow { cause: STEP_TOO_LONG });
                self.stopped_at = Some(now);
            }
            self.step_running = false;
            return;
        };
        for s in &plan.scheduled {
            if !s.prefill {
                // A decode: the request sampled in an earlier step, which was its first
                // scheduling or came after it, and it is not prefilling.
                debug_assert!(self.records[s.id as usize].first_scheduled_ns.is_some());
                continue;
            }
            let rec = &mut self.records[s.id as usize];
            if rec.first_scheduled_ns.is_none() {
                rec.first_scheduled_ns = Some(now);
            }
            if s.prefill && rec.first_token_step_end_ns.is_none() {
                rec.prefill_compute_ns += dur;
            }
        }
        self.steps += 1;
        self.step_running = true;
        self.sample_gauges(now);
        self.push(end, Event::StepEnd);
    }

    fn on_step_end(&mut self, now: u64) {
        self.outputs.clear();
        let mut outs = std::mem::take(&mut self.outputs);
        self.engine.finish_step(&mut outs);
        let lazy = self.engine.lazy_tick();
        if self.opts.check_invariants {
            if let Err(e) = self.engine.check_invariants() {
                self.stop = Some(StopReason::InvariantViolated(e));
            }
        }
        // With `output_lag`, the previous step's held tokens go out now with this step's
        // last tokens, and this step's other tokens wait for the next step. The buffers go
        // round (`outputs`, `held`, `later`), so that a step allocates nothing.
        let mut later = std::mem::take(&mut self.later);
        if self.engine.output_lag() {
            self.later = crate::delivery::split_lagged(&mut self.held, &mut outs, &mut later);
        }
        self.deliver(now, &outs, lazy);
        self.outputs = outs;
        if self.steps >= self.opts.max_steps {
            self.stop = Some(StopReason::StepLimit { steps: self.steps });
            return;
        }
        let now = if self.opts.fast_forward { self.fast_forward(now, &mut later) } else { now };
        if self.stop.is_some() {
            return;
        }
        self.start_step(now);
        if !later.is_empty() {
            if self.step_running {
                // Produced now, delivered at the next step's end: the engine-side time stays.
                for o in &later {
                    let rec = &mut self.records[o.id as usize];
                    if rec.first_token_step_end_ns.is_none() {
                        rec.first_token_step_end_ns = Some(now);
                    }
                }
            } else {
                // Nothing runs next: they go out now.
                self.deliver(now, &later, None);
                later.clear();
            }
        }
        self.held = later;
    }

    /// Runs, at once, the plain decode steps that would start at `now` and end before the
    /// next event (see the module docs), exactly as stepping would; returns the end of the
    /// last one (`now` if none ran). `later`: with `output_lag`, the tokens of the step that
    /// ended at `now`, still to be delivered; on return, those of the last step run.
    fn fast_forward(&mut self, mut now: u64, later: &mut Vec<TokenOutput>) -> u64 {
        // Where the engine can say, a run refused or ending before its first step is not
        // opened (opening it would dissolve a lazy decode cohort for nothing).
        let probe = self.engine.ff_probe();
        match probe {
            FfProbe::Unknown => {}
            FfProbe::Refused => return now,
            FfProbe::FirstStep(shape) => {
                let t_next = self.next_event_time();
                if now.saturating_add(self.cost.step_ns(&shape)) >= t_next {
                    return now;
                }
            }
        }
        let mut ids = std::mem::take(&mut self.ff_ids);
        let k_max = self.engine.ff_begin(&mut ids);
        if let FfProbe::FirstStep(shape) = probe {
            debug_assert!(k_max == 0 || self.engine.ff_shape(0) == shape, "the probe's first step is the run's");
        }
        // It may have dissolved the engine's cohort.
        self.record_lazy_departures(false);
        if k_max == 0 {
            self.ff_ids = ids;
            return now;
        }
        // Every step must end strictly before the next event: an event at the same instant
        // was scheduled earlier and runs before the step's end.
        let t_next = self.next_event_time();
        let lag = self.engine.output_lag();
        let mut outs = std::mem::take(&mut self.ff_outs);
        outs.clear();
        outs.extend(ids.iter().map(|&id| TokenOutput { id, finished: false }));
        let mut k = 0;
        // The deliveries of `outs` this fast-forward made: (first, count), consecutive.
        let mut batch = (0u32, 0u32);
        // A step that reaches `max_steps` is left to `on_step_end`, which stops there.
        while k < k_max && self.steps + 1 < self.opts.max_steps {
            let dur = self.cost.step_ns(&self.engine.ff_shape(k));
            if now.saturating_add(dur) >= t_next || !self.engine.ff_step(k) {
                break;
            }
            // `start_step`: every request was scheduled before and decodes, so its
            // record's first-schedule and prefill times do not move.
            self.steps += 1;
            self.sample_gauges(now);
            if lag && k == 0 {
                for o in later.iter() {
                    let rec = &mut self.records[o.id as usize];
                    if rec.first_token_step_end_ns.is_none() {
                        rec.first_token_step_end_ns = Some(now);
                    }
                }
            }
            now += dur;
            // `on_step_end`: no request finishes. With the lag, the first step delivers the
            // tokens held from before; every other step delivers `outs` (the step before's
            // with the lag), whose records take the run of deliveries at once below.
            if lag && k == 0 {
                self.deliver(now, later, None);
                later.clear();
                later.extend_from_slice(&outs);
            } else if self.stop.is_none() && !outs.is_empty() {
                // Where the delivery fails the run stops, and no later token goes out.
                if let Some(d) = self.stream_and_log(now, outs.len()) {
                    if batch.1 == 0 {
                        batch.0 = d;
                    }
                    batch.1 += 1;
                }
            }
            k += 1;
        }
        if batch.1 > 0 {
            for o in &outs {
                let rec = &mut self.records[o.id as usize];
                debug_assert!(
                    lag || rec.first_token_step_end_ns.is_some(),
                    "a decoding request has had its first token"
                );
                rec.tokens.push_run(batch.0, batch.1);
            }
        }
        self.engine.ff_end(k);
        self.ff_steps += k;
        if k > 0 && self.opts.check_invariants {
            if let Err(e) = self.engine.check_invariants() {
                self.stop = Some(StopReason::InvariantViolated(format!("after a fast-forward: {e}")));
            }
        }
        self.ff_ids = ids;
        self.ff_outs = outs;
        now
    }

    /// Streams `n` (≥ 1) tokens produced at `now` through the front end and logs their
    /// delivery: its index, or `None` with the run stopped (streaming past `u64::MAX` ns, or
    /// a full log).
    fn stream_and_log(&mut self, now: u64, n: usize) -> Option<u32> {
        let Some(t) = self.front.stream(now, n) else {
            self.stop.get_or_insert(StopReason::TimeOverflow { cause: STREAMING_TOO_LONG });
            return None;
        };
        let d = self.token_log.push(t);
        if d.is_none() {
            self.stop.get_or_insert(StopReason::StepLimit { steps: self.steps });
        }
        d
    }

    /// Gives the requests that left the engine's cohort (all its members, with `all`) the
    /// deliveries of their cohort tokens, before any later token of theirs is delivered.
    fn record_lazy_departures(&mut self, all: bool) {
        let mut departed = std::mem::take(&mut self.lazy_departed);
        departed.clear();
        self.engine.take_lazy_departures(all, &mut departed);
        for dep in &departed {
            let rec = &mut self.records[dep.id as usize];
            let (mut t, end) = (dep.first_tick, dep.first_tick + dep.count);
            // A tick without a delivery (the run stopped at its streaming) brought nothing.
            let mut i = self.lazy_deliveries.partition_point(|&(t0, _, n)| t0 + u64::from(n) <= t);
            while t < end && i < self.lazy_deliveries.len() {
                let (t0, d0, n) = self.lazy_deliveries[i];
                t = t.max(t0);
                let stop = end.min(t0 + u64::from(n));
                if t < stop {
                    rec.tokens.push_run(d0 + (t - t0) as u32, (stop - t) as u32);
                    t = stop;
                }
                i += 1;
            }
        }
        self.lazy_departed = departed;
    }

    /// Streams `outs`, produced by the step that ended at `now` (or held from the one before),
    /// and the step's `lazy` cohort tokens (`(tick, count)`) through the front end, one after
    /// the other.
    fn deliver(&mut self, now: u64, outs: &[TokenOutput], lazy: Option<(u64, u32)>) {
        // Requests that left the cohort get their cohort tokens before any later one.
        self.record_lazy_departures(false);
        let lazy_n = lazy.map_or(0, |(_, n)| n as usize);
        if !outs.is_empty() || lazy_n > 0 {
            // The front end streams the step's outputs one after the other.
            let Some(d) = self.stream_and_log(now, outs.len() + lazy_n) else { return };
            if let Some((tick, n)) = lazy.filter(|&(_, n)| n > 0) {
                self.lazy_tokens += u64::from(n);
                match self.lazy_deliveries.last_mut() {
                    Some((t0, d0, len)) if *t0 + u64::from(*len) == tick && *d0 + *len == d => *len += 1,
                    _ => self.lazy_deliveries.push((tick, d, 1)),
                }
            }
            let deliver = self.token_log.time(d);
            for o in outs {
                let rec = &mut self.records[o.id as usize];
                if rec.first_token_step_end_ns.is_none() {
                    rec.first_token_step_end_ns = Some(now);
                }
                rec.tokens.push(d);
                if o.finished {
                    self.push(deliver, Event::ClientDone(o.id));
                }
            }
        }
    }
}

/// How far a run has got, for a caller that shows progress ([`run_observed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Timed requests completed.
    pub completed: usize,
    /// Timed requests in the run.
    pub total: usize,
    /// Simulated time now.
    pub now_ns: u64,
}

/// When user `k` of a closed loop of `n` starts, from the timed phase's start: `k · ramp / n`
/// whole nanoseconds, rounded down ([`crate::workload::Workload::concurrency_ramp_ns`]).
pub(crate) fn user_start_ns(ramp_ns: u64, k: u32, n: u32) -> u64 {
    (u128::from(ramp_ns) * u128::from(k) / u128::from(n.max(1))) as u64
}

/// Runs `workload` against `engine` with `cost`.
pub fn run<E: Engine>(engine: E, cost: &CostModel, workload: &Workload, opts: RunOptions) -> RunResult {
    run_observed(engine, cost, workload, opts, &mut |_| {})
}

/// Generates the workload of `spec` and runs it as [`crate::simulate`] does,
/// calling `observe` each time a timed request completes.
pub fn simulate_observed(
    spec: &crate::config::SimSpec,
    opts: RunOptions,
    observe: &mut dyn FnMut(Progress),
) -> crate::SimOutput {
    use crate::config::EngineSpec;
    let workload = crate::workload::generate(&spec.workload);
    if let Some(f) = &spec.fleet {
        let (run, fleet) = crate::fleet::run_fleet(f, &workload, spec.workload.seed, opts, observe);
        let metrics = crate::metrics::bench_metrics(&run);
        return crate::SimOutput { workload, run, metrics, fleet: Some(fleet) };
    }
    let run = match &spec.engine {
        EngineSpec::Vllm(cfg) => {
            run_observed(crate::engine::vllm::Scheduler::new(cfg.clone()), &spec.cost, &workload, opts, observe)
        }
        EngineSpec::Sglang(cfg) => {
            run_observed(crate::engine::sglang::Scheduler::new(cfg.clone()), &spec.cost, &workload, opts, observe)
        }
    };
    let metrics = crate::metrics::bench_metrics(&run);
    crate::SimOutput { workload, run, metrics, fleet: None }
}

/// All phases' requests in one id space (test, warm-ups, timed), each one's phase, the
/// phases' id ranges, and an empty record per request. Shared by the fleet loop.
#[allow(clippy::type_complexity)]
pub(crate) fn phase_layout(
    workload: &Workload,
) -> (Vec<&RequestSpec>, Vec<Phase>, Vec<(Phase, std::ops::Range<usize>)>, Vec<RequestRecord>) {
    let mut specs: Vec<&RequestSpec> = Vec::new();
    let mut phase_of = Vec::new();
    let mut phases: Vec<(Phase, std::ops::Range<usize>)> = Vec::new();
    if let Some(t) = &workload.initial_test {
        phases.push((Phase::InitialTest, specs.len()..specs.len() + 1));
        specs.push(t);
        phase_of.push(Phase::InitialTest);
    }
    if !workload.warmups.is_empty() {
        let start = specs.len();
        for w in &workload.warmups {
            specs.push(w);
            phase_of.push(Phase::Warmup);
        }
        phases.push((Phase::Warmup, start..specs.len()));
    }
    let timed_start = specs.len();
    for r in &workload.requests {
        specs.push(r);
        phase_of.push(Phase::Timed);
    }
    phases.push((Phase::Timed, timed_start..specs.len()));
    let records = specs
        .iter()
        .map(|s| RequestRecord {
            prompt_len: s.prompt_len,
            output_len: s.output_len,
            eos_unstreamed: workload.eos_unstreamed && !s.ignore_eos && s.output_len < s.max_tokens,
            ..Default::default()
        })
        .collect();
    (specs, phase_of, phases, records)
}

/// [`run`], calling `observe` each time a timed request completes.
pub fn run_observed<E: Engine>(
    mut engine: E,
    cost: &CostModel,
    workload: &Workload,
    opts: RunOptions,
    observe: &mut dyn FnMut(Progress),
) -> RunResult {
    let (specs, phase_of, phases, records) = phase_layout(workload);
    if opts.expect_requests {
        engine.expect_requests(&specs);
    }
    let kv_capacity_tokens = engine.kv_capacity_tokens();
    // Prompts sent as token ids are not tokenized by the server.
    // As a time-scaled engine runs them (`cost.time_scale`; unchanged at 1).
    let tokenizer_ns_per_token =
        if workload.tokenize_prompt { 0 } else { cost.scaled_ns(engine.tokenizer_ns_per_prompt_token()) };
    let front_end_ns_per_request = cost.scaled_ns(engine.front_end_ns_per_request(workload.chat));
    let mut lp = Loop {
        engine,
        cost,
        specs,
        phase_of,
        records,
        heap: BinaryHeap::new(),
        step_end: None,
        arrivals: VecDeque::new(),
        dones: VecDeque::new(),
        sends: Default::default(),
        seq: 0,
        max_concurrency: workload.max_concurrency,
        users: u32::MAX,
        in_flight: 0,
        pending: VecDeque::new(),
        remaining_in_phase: 0,
        step_running: false,
        front: crate::delivery::FrontEnd::new(cost.ingress_ns(), cost.output_token_ns())
            .with_serial_tokenizer(tokenizer_ns_per_token)
            .with_serial_request_cost(front_end_ns_per_request),
        outputs: Vec::new(),
        held: Vec::new(),
        later: Vec::new(),
        ingress_ns: cost.ingress_ns(),
        opts,
        steps: 0,
        ff_steps: 0,
        timed: false,
        bench_start: 0,
        counters_at_start: EngineCounters::default(),
        last_sample: None,
        integ: [0.0; 3],
        gauges: GaugeStats::default(),
        timeseries: Vec::new(),
        stop: None,
        stopped_at: None,
        ff_ids: Vec::new(),
        ff_outs: Vec::new(),
        token_log: TokenLog::default(),
        lazy_deliveries: Vec::new(),
        lazy_departed: Vec::new(),
        lazy_tokens: 0,
    };
    if opts.lazy_decodes {
        lp.engine.enable_lazy_decodes();
    }
    lp.token_log = TokenLog::for_tokens(lp.specs.iter().map(|s| u64::from(s.output_len)).sum());

    let mut phase_idx = 0;
    let mut now = 0u64;
    let mut bench_end = 0u64;
    let begin = |lp: &mut Loop<E>, idx: usize, now: u64| {
        let (phase, range) = phases[idx].clone();
        if phase == Phase::Timed {
            lp.timed = true;
            lp.bench_start = now;
            lp.counters_at_start = lp.engine.counters();
            // Users that start one after another: the first now, the next at its share of the ramp.
            if let Some(n) = lp.max_concurrency.filter(|&n| n > 1 && workload.concurrency_ramp_ns > 0) {
                lp.users = 1;
                lp.push(now + user_start_ns(workload.concurrency_ramp_ns, 1, n), Event::UserStart(1));
            }
        }
        lp.start_phase(now, range);
    };
    begin(&mut lp, phase_idx, now);
    if lp.remaining_in_phase == 0 {
        lp.stop = Some(StopReason::Completed);
    }

    let mut slow_ttfts = 0usize;
    while lp.stop.is_none() {
        let Some((t, ev)) = lp.pop_event() else {
            lp.stop =
                Some(StopReason::Stalled { unfinished: lp.engine.num_unfinished(), why: lp.engine.stall_reason() });
            break;
        };
        debug_assert!(t >= now, "time went backwards");
        now = t;
        match ev {
            Event::ClientSend(id) => match lp.max_concurrency {
                Some(max) if lp.in_flight >= max.min(lp.users) => lp.pending.push_back(id),
                _ => lp.dispatch(id, now),
            },
            Event::UserStart(k) => {
                lp.users = k + 1;
                let n = lp.max_concurrency.expect("a ramp has users");
                if lp.users < n {
                    let next = lp.bench_start + user_start_ns(workload.concurrency_ramp_ns, lp.users, n);
                    lp.push(next, Event::UserStart(lp.users));
                }
                if lp.in_flight < lp.users {
                    if let Some(next) = lp.pending.pop_front() {
                        lp.dispatch(next, now);
                    }
                }
            }
            Event::EngineArrival(id) => {
                let spec = lp.specs[id as usize];
                lp.engine.add_request(id, spec);
                if !lp.step_running {
                    lp.start_step(now);
                }
            }
            Event::StepEnd => lp.on_step_end(now),
            Event::ClientDone(id) => {
                lp.in_flight -= 1;
                lp.records[id as usize].completed = true;
                lp.remaining_in_phase -= 1;
                if lp.timed {
                    let total = workload.requests.len();
                    observe(Progress { completed: total - lp.remaining_in_phase, total, now_ns: now });
                    if let Some((ns, count)) = lp.opts.stop_after_slow_ttft {
                        let r = &lp.records[id as usize];
                        let first = r.tokens.first_delivery().map(|d| lp.token_log.time(d));
                        if first.is_some_and(|t| t - r.dispatch_ns >= ns) {
                            slow_ttfts += 1;
                            if slow_ttfts >= count {
                                let completed = total - lp.remaining_in_phase;
                                lp.stop = Some(StopReason::StoppedEarly { completed });
                            }
                        }
                    }
                }
                if let Some(next) = lp.pending.pop_front() {
                    lp.dispatch(next, now);
                }
                if lp.remaining_in_phase == 0 {
                    phase_idx += 1;
                    if phase_idx < phases.len() {
                        begin(&mut lp, phase_idx, now);
                    } else {
                        bench_end = now;
                        lp.stop = Some(StopReason::Completed);
                    }
                }
            }
        }
    }

    // The cohort's members, still decoding where the run stopped, get their delivered tokens.
    lp.record_lazy_departures(true);
    let mut stop = lp.stop.take().unwrap_or(StopReason::Completed);
    // A measured window, from the timed phase's start; the run's prompts must keep the load up
    // until it closes (a thinning load inside it would be measured as the steady state), and
    // something must complete in it.
    let window =
        workload.measure_window_ns.map(|(a, b)| (lp.bench_start.saturating_add(a), lp.bench_start.saturating_add(b)));
    if let (Some((start, end)), StopReason::Completed) = (window, &stop) {
        let timed = || lp.records.iter().zip(lp.phase_of.iter()).filter(|(_, p)| **p == Phase::Timed).map(|(r, _)| r);
        let last_send = timed().map(|r| r.dispatch_ns).max().unwrap_or(lp.bench_start);
        let in_window = |r: &RequestRecord| {
            r.completed && r.tokens.last_delivery().is_some_and(|d| (start..=end).contains(&lp.token_log.time(d)))
        };
        let (from, to) = (start - lp.bench_start, end - lp.bench_start);
        if last_send < end {
            stop = StopReason::WindowOutlastsLoad { last_send_ns: last_send - lp.bench_start, window_end_ns: to };
        } else if !timed().any(in_window) {
            stop = StopReason::WindowEmpty { window_start_ns: from, window_end_ns: to };
        }
    }
    if stop != StopReason::Completed {
        now = lp.stopped_at.unwrap_or(now);
        bench_end = now;
    }
    let bench_start = lp.bench_start;
    // Close the gauge integral at the end of the timed phase.
    if lp.timed {
        lp.integrate_gauges_until(bench_end);
    }
    let span = bench_end.saturating_sub(bench_start) as f64;
    let mut gauges = lp.gauges;
    if span > 0.0 {
        gauges.kv_usage_mean = lp.integ[0] / span;
        gauges.running_mean = lp.integ[1] / span;
        gauges.waiting_mean = lp.integ[2] / span;
    }
    let counters = lp.engine.counters() - lp.counters_at_start;
    let records: Vec<RequestRecord> =
        lp.records.into_iter().zip(lp.phase_of.iter()).filter(|(_, p)| **p == Phase::Timed).map(|(r, _)| r).collect();
    RunResult {
        records,
        bench_start_ns: bench_start,
        bench_end_ns: bench_end,
        counters,
        gauges,
        timeseries: lp.timeseries,
        kv_capacity_tokens,
        stop,
        num_steps: lp.steps,
        end_ns: now,
        ingress_ns: lp.ingress_ns,
        fast_forwarded_steps: lp.ff_steps,
        lazy_decoded_tokens: lp.lazy_tokens,
        token_log: lp.token_log,
        role_chunk_gaps: workload.role_chunk,
        uncounted_prompt_tokens: workload.uncounted_prompt_tokens,
        measure_window_ns: window,
    }
}

#[cfg(test)]
mod token_runs_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A run of `count` deliveries is as many single pushes; runs hold each token once,
        /// adjacent deliveries merge, and the log gives the tokens' times in the order pushed.
        #[test]
        fn runs_hold_every_token_in_order(
            steps in prop::collection::vec((0u32..4, 1u32..6), 0..40),
        ) {
            let mut log = TokenLog::default();
            for t in 0..400u64 {
                log.push(1_000 + 7 * t).unwrap();
            }
            let (mut one, mut batched) = (TokenRuns::default(), TokenRuns::default());
            let mut want: Vec<u32> = Vec::new();
            let mut d = 0u32;
            for &(skip, count) in &steps {
                d += skip;
                for k in 0..count {
                    one.push(d + k);
                    want.push(d + k);
                }
                batched.push_run(d, count);
                d += count - 1;
            }
            prop_assert_eq!(&one, &batched);
            prop_assert_eq!(one.len(), want.len());
            prop_assert_eq!(one.first_delivery(), want.first().copied());
            prop_assert_eq!(one.last_delivery(), want.last().copied());
            let got: Vec<u32> = one.runs().flat_map(|(s, n)| s..s + n).collect();
            prop_assert_eq!(&got, &want);
            let times: Vec<u64> = log.times(&one).collect();
            prop_assert_eq!(times, want.iter().map(|&x| log.time(x)).collect::<Vec<_>>());
            // No two runs are adjacent (they would have merged), but a run may repeat a
            // delivery (two tokens in one delivery: `skip` 0).
            let runs: Vec<(u32, u32)> = one.runs().collect();
            for w in runs.windows(2) {
                prop_assert!(w[0].0 + w[0].1 != w[1].0);
            }
            // Less the last token: every token but the last, in order (none from one).
            let short = one.without_last();
            let got: Vec<u32> = short.runs().flat_map(|(s, n)| s..s + n).collect();
            prop_assert_eq!(&got[..], &want[..want.len().saturating_sub(1)]);
            prop_assert_eq!(short.len(), want.len().saturating_sub(1));
            prop_assert_eq!(short.is_empty(), want.len() <= 1);
            prop_assert_eq!(short.last_delivery(), want.len().checked_sub(2).map(|i| want[i]));
        }
    }

    /// Reserved blocks of the log are written where the producer says, and the log refuses
    /// to pass its capacity.
    #[test]
    fn reserved_blocks_are_set_in_place() {
        let mut log = TokenLog::default();
        log.push(5).unwrap();
        let b = log.reserve_block(3).unwrap();
        assert_eq!(b, 1);
        log.set(b + 1, 9);
        assert_eq!(log.times_ns(), &[5, 0, 9, 0]);
        assert_eq!(log.reserve_block(u32::MAX), None);
        assert_eq!(log.len(), 4);
    }
}
