//! The fleet's event loop: one client, a router, several engine replicas
//! (each with its front end, or data-parallel engines sharing one), and, when
//! prefill and decode are disaggregated, the KV transfers between them.
//!
//! # Why a loop beside `simulation::run`
//!
//! The single-engine loop is left as it is, so a scenario without a fleet runs
//! the code it ran before, byte for byte (and its fast-forward keeps the proofs
//! written in `simulation`'s module docs). This loop shares its pieces: the
//! phase layout, the records, [`crate::delivery`] (ingress and the streaming
//! queue), the gauge integrals, the stop reasons and the result type. Its
//! event order, for a fleet of one, is the single loop's (a test runs both and
//! compares every metric): the same events at the same instants, scheduled in
//! the same order.
//!
//! # Event order and determinism
//!
//! One order, `(time, sequence)`, one sequence counter: a heap, and beside it the
//! phase's client sends, sorted when the phase starts (they take their sequence numbers
//! then, as they would entering the heap) and merged with it. The router is
//! called when the client sends a request (before its ingress), with views of
//! the replicas in replica order; routers draw from named random streams. No
//! decision iterates a hash map.
//!
//! # Fast-forward
//!
//! A replica whose step ends may advance its plain decode steps in one move, as
//! the single loop does, but only those ending strictly before the next event (any
//! replica's, or a client send): nothing another replica or the router does can fall
//! inside, so the output is the same as stepping. A replica whose last step
//! would already cross the next event does not try.
//!
//! # Disaggregated prefill and decode
//!
//! A request is routed to a prefill replica and a decode replica when it is
//! sent (both pools' routers). The prefill replica runs it with
//! `max_tokens = 1`; its token is not streamed. The transfer then waits in the
//! decode replica's queue until the replica can reserve KV for the prompt (its
//! free KV, less what in-flight transfers reserved, holds the prompt; a
//! transfer always starts when none is in flight). Its bytes (prompt tokens ×
//! KV bytes per token per GPU) then hold two links at once, the prefill
//! replica's outgoing one and the decode replica's incoming one, for `bytes ÷
//! bandwidth`, from the later of the two's free times: each link moves one
//! transfer at a time, in the order they were posted. The fixed latency is
//! added after the bytes and holds neither link (NIXL posts each request's read
//! asynchronously). When it lands the request joins the decode engine's queue;
//! the decode replica's steps cost each prompt chunk of the transferred KV as
//! one token (the KV is there; vLLM recomputes the last prompt token to
//! sample). A vLLM request preempted on the decode replica has lost that KV and
//! is not pulled again (`NixlConnectorScheduler.update_state_after_alloc`: "Only
//! trigger 1 KV transfer per request"), so its chunks after the preemption are
//! computed in full; SGLang's decode server offloads a retracted request's KV to
//! host memory and loads it back (`ScheduleBatch.retract_decode`,
//! `DecodePreallocQueue.resume_retracted_reqs`), so its chunks stay one token
//! each. `docs/fleets.md` lists the shortcuts.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::config::{FleetSpec, ReplicaRole};
use crate::cost::{CostModel, StepShape};
use crate::delivery::FrontEnd;
use crate::engine::{Engine, EngineCounters, ReqId, TokenOutput};
use crate::fleet::{ReplicaView, RouteRequest, Router};
use crate::request::RequestSpec;
use crate::simulation::{
    phase_layout, GaugeSample, GaugeStats, Phase, Progress, RequestRecord, RunOptions, RunResult, StopReason, TokenLog,
    INGRESS_TOO_LONG, SEND_TOO_LATE, STEP_TOO_LONG, STREAMING_TOO_LONG,
};
use crate::workload::Workload;

/// One replica's engine block over the timed phase.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaRun {
    pub name: String,
    pub group: usize,
    pub role: ReplicaRole,
    pub engine: &'static str,
    pub engine_version: String,
    pub hardware: String,
    pub tensor_parallel_size: u32,
    /// Timed requests routed to it.
    pub requests: u64,
    pub counters: EngineCounters,
    pub gauges: GaugeStats,
    pub kv_capacity_tokens: u64,
    /// Its steps in the whole run.
    pub num_steps: u64,
    /// What times its steps ([`crate::cost::CostModel::source`]): a group of another GPU or
    /// engine has its own.
    pub cost_source: String,
}

/// What a fleet run adds to the fleet-wide [`RunResult`].
#[derive(Clone, Debug, PartialEq)]
pub struct FleetRun {
    pub kind: crate::config::FleetKind,
    pub router: String,
    pub decode_router: Option<String>,
    pub replicas: Vec<ReplicaRun>,
    pub num_gpus: u32,
    /// KV transfers of timed requests (disaggregated fleets).
    pub kv_transfers: u64,
    /// Their mean time from start to landing (bytes on the links, then the fixed latency),
    /// and mean wait from the prefill's end to the start (for a decode reservation and for
    /// both links), ms.
    pub mean_kv_transfer_ms: f64,
    pub mean_kv_transfer_wait_ms: f64,
    /// Mean time from a timed request's KV landing to the decode replica first scheduling it
    /// (its wait in the decode engine's queue), ms.
    pub mean_kv_landed_to_scheduled_ms: f64,
    /// With SGLang decode servers: the mean wait of a timed request in a decode server's
    /// pre-allocation queue, from its arrival to its prefill being let start, ms (`None`
    /// without one).
    pub mean_kv_prealloc_wait_ms: Option<f64>,
    /// A disaggregated fleet: the most requests running at once on its decode replicas
    /// together, in the timed window (the fleet's peak counts the prefill replicas' too, where
    /// the decode replicas' KV pools are what binds); `None` otherwise.
    pub decode_running_peak: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    ClientSend(ReqId),
    EngineArrival(ReqId, u32),
    /// The request reaches an SGLang decode server's pre-allocation queue (its prefill waits).
    PreallocArrival(ReqId, u32),
    StepEnd(u32),
    ClientDone(ReqId),
    TransferDone(ReqId, u32),
}

/// Time-weighted gauges, as the single loop keeps them.
#[derive(Clone, Debug, Default)]
struct GaugeAcc {
    last: Option<GaugeSample>,
    integ: [f64; 3],
    stats: GaugeStats,
}

impl GaugeAcc {
    fn integrate_until(&mut self, t: u64, bench_start: u64) {
        if let Some(prev) = self.last {
            let dt = t.saturating_sub(prev.t_ns.max(bench_start)) as f64;
            self.integ[0] += prev.kv_usage * dt;
            self.integ[1] += f64::from(prev.running) * dt;
            self.integ[2] += f64::from(prev.waiting) * dt;
        }
    }

    fn sample(&mut self, s: GaugeSample, timed: bool, bench_start: u64) {
        if timed {
            self.integrate_until(s.t_ns, bench_start);
            let g = &mut self.stats;
            g.kv_usage_peak = g.kv_usage_peak.max(s.kv_usage);
            g.running_peak = g.running_peak.max(s.running);
            g.waiting_peak = g.waiting_peak.max(s.waiting);
        }
        self.last = Some(s);
    }

    fn finish(&mut self, timed: bool, bench_start: u64, bench_end: u64) -> GaugeStats {
        if timed {
            self.integrate_until(bench_end, bench_start);
        }
        let span = bench_end.saturating_sub(bench_start) as f64;
        let mut g = self.stats;
        if span > 0.0 {
            g.kv_usage_mean = self.integ[0] / span;
            g.running_mean = self.integ[1] / span;
            g.waiting_mean = self.integ[2] / span;
        }
        g
    }
}

struct Rep<'a> {
    engine: Box<dyn Engine + Send>,
    cost: &'a CostModel,
    role: ReplicaRole,
    /// Index in its router's pool.
    pool_idx: usize,
    front: usize,
    step_running: bool,
    outputs: Vec<TokenOutput>,
    held: Vec<TokenOutput>,
    later: Vec<TokenOutput>,
    steps: u64,
    last_dur: u64,
    counters_at_start: EngineCounters,
    /// A decode replica's prompt tokens whose KV was transferred, not computed: its engine
    /// counts them as prefill, and the report takes them out of `prefill_tokens_computed`
    /// (the replica computes one token of each prompt chunk, to sample).
    loaded_tokens: u64,
    loaded_at_start: u64,
    acc: GaugeAcc,
    cur: GaugeSample,
    outstanding: u32,
    routed_timed: u64,
    capacity: u64,
    granularity: u32,
    kv_bytes_per_token_per_gpu: u64,
    /// A decode replica's recomputed tokens (its engine's count) that were loaded, not
    /// computed: SGLang's decode server reloads a retracted request's KV from host memory.
    reloaded_tokens: u64,
    reloaded_at_start: u64,
    // The decode side of a disaggregated fleet.
    /// vLLM's connector pulls only the prompt blocks the decode side does not hold already
    /// (`get_num_new_matched_tokens`: the prompt less its local prefix hit).
    pulls_only_uncached: bool,
    /// vLLM: a request preempted on this decode replica recomputes its prompt here (no second
    /// pull); SGLang: its KV is offloaded to host memory and loaded back.
    recomputes_after_preemption: bool,
    /// SGLang: a transferred request's first token is the prefill server's, streamed from a
    /// prebuilt batch with no forward ([`decode_side_shape`]); vLLM recomputes its last prompt
    /// token to sample it.
    prebuilt_first_token: bool,
    reserved: u64,
    /// SGLang's decode server: its pre-allocation queue (`DecodePreallocQueue`) reserves KV for
    /// a request before the request's prefill may start (`xfer_queue` is that queue), by
    /// SGLang's rule ([`FleetLoop::try_prealloc`]); vLLM's decode side reserves after the
    /// prefill, for the transfer ([`FleetLoop::try_transfers`]).
    prealloc: bool,
    /// Requests pre-allocated here whose KV has not landed yet (SGLang's `transfer_queue`).
    preallocated: u64,
    /// When this replica's KV link is free: a prefill replica's outgoing, a decode replica's
    /// incoming (one transfer at a time on each, in the order they were posted).
    link_free_at: u64,
    xfer_queue: VecDeque<ReqId>,
}

/// Where a request's KV stands on its decode replica (disaggregated fleets).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum DecodeKv {
    /// Not landed yet.
    #[default]
    Absent,
    /// The transferred KV is resident and its prompt chunks are being scheduled: `next` is the
    /// context the next chunk of it starts at (`None`: not known, any), `seen` whether the
    /// replica has scheduled the request yet.
    Landed { next: Option<u64>, seen: bool },
    /// The whole prompt was taken from the transferred KV (its last chunk sampled).
    Resident,
    /// A preemption discarded the transferred KV (vLLM): the request recomputes.
    Recomputing,
}

struct FleetLoop<'a> {
    reps: Vec<Rep<'a>>,
    fronts: Vec<FrontEnd>,
    router: Box<dyn Router>,
    decode_router: Box<dyn Router>,
    pool: Vec<usize>,
    decode_pool: Vec<usize>,
    disagg: bool,
    specs: Vec<&'a RequestSpec>,
    /// Disaggregated: each request as its prefill replica runs it (`max_tokens = 1`).
    prefill_specs: Vec<RequestSpec>,
    phase_of: Vec<Phase>,
    records: Vec<RequestRecord>,
    /// (prefill or only replica, decode replica) of each request.
    placed: Vec<(u32, u32)>,
    /// KV reserved on the decode side for each request's transfer; when it was queued.
    xfer_need: Vec<u64>,
    xfer_queued_at: Vec<u64>,
    /// Per request (disaggregated fleets): its prefill replica has finished it.
    prefill_done: Vec<bool>,
    /// Per request (disaggregated fleets): its KV on the decode replica, and when it landed.
    decode_kv: Vec<DecodeKv>,
    landed_at: Vec<u64>,
    /// sgl-router's policies in P/D hold the prefill worker's load until the client's stream
    /// ends (`pd_router.rs`: `create_streaming_response` decrements both workers' load when the
    /// decode stream ends; `WorkerLoadGuard::new_multi(vec![prefill, decode])` without streaming).
    prefill_load_to_stream_end: bool,
    /// Per prefill chunk of the step being planned on a decode replica: its tokens, and whether
    /// it is of transferred (or reloaded) KV.
    chunk_buf: Vec<(u32, ChunkKv)>,
    /// Tokens a replica streamed as it formed a batch ([`Engine::take_formed_outputs`]).
    formed_buf: Vec<TokenOutput>,
    heap: BinaryHeap<Reverse<(u64, u64, Event)>>,
    /// The phase's client sends as `(time, sequence, request)`, in `(time, sequence)` order,
    /// and the next one: the `ClientSend` events, kept beside the heap (a phase's sends are
    /// known when it starts, so a million of them need not sit in the heap). Each takes its
    /// sequence number when the phase starts, as it did in the heap, so the merged order of
    /// sends and heap events is the heap's `(time, sequence)` order.
    sends: crate::delivery::ClientSends,
    seq: u64,
    max_concurrency: Option<u32>,
    in_flight: u32,
    pending: VecDeque<ReqId>,
    remaining_in_phase: usize,
    opts: RunOptions,
    steps: u64,
    /// Of `steps`, those the fast-forward ran.
    ff_steps: u64,
    timed: bool,
    bench_start: u64,
    fleet_acc: GaugeAcc,
    tot_running: u64,
    /// The decode replicas' running requests together, and their peak in the timed window.
    tot_running_decode: u64,
    decode_running_peak: u32,
    tot_waiting: u64,
    tot_kv_used: f64,
    tot_capacity: f64,
    timeseries: Vec<GaugeSample>,
    stop: Option<StopReason>,
    /// When a step could not start ([`StopReason::EngineError`], a step too long): a
    /// fast-forward may have carried the clock past the event the loop last took, so the
    /// run ends here.
    stopped_at: Option<u64>,
    ff_ids: Vec<ReqId>,
    ff_outs: Vec<TokenOutput>,
    /// Every delivery of output tokens, of every replica's front end.
    token_log: TokenLog,
    /// Per replica, the log block it fills: (next delivery, end).
    log_blocks: Vec<(u32, u32)>,
    views: Vec<ReplicaView>,
    bw: f64,
    xfer_latency_ns: u64,
    xfers: u64,
    xfer_ns_sum: u64,
    xfer_wait_sum: u64,
    /// Timed requests first scheduled on their decode replica, and the sum of their waits from
    /// landing.
    landed_n: u64,
    landed_wait_sum: u64,
    /// Timed requests pre-allocated by an SGLang decode server, and the sum of their waits.
    prealloc_n: u64,
    prealloc_wait_sum: u64,
}

/// Where the KV of a prompt chunk that a decode replica schedules comes from
/// ([`decode_chunk`]), and so what the chunk costs there ([`decode_side_shape`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChunkKv {
    /// The transferred prompt, scheduled for the first time in order: vLLM recomputes its last
    /// token to sample (one token at the end of its context); SGLang's decode server forwards
    /// nothing (a prebuilt batch, `prebuilt` of [`decode_side_shape`]).
    Transferred,
    /// KV the replica holds again after a retraction (SGLang's reload from host memory): one
    /// token at the end of its context.
    Loaded,
    /// KV the replica does not hold (vLLM after a preemption, or a prompt that was never
    /// transferred): computed in full.
    Computed,
}

/// A prompt chunk of `n` tokens from context `ctx` (`None`: not known) that a decode replica
/// schedules for a request whose KV there stands at `state`, which it advances: where the
/// chunk's KV comes from ([`ChunkKv`]), and how many of its tokens the engine counts as
/// recomputed that were loaded instead (SGLang's reload from host memory).
///
/// The transferred prompt's chunks follow each other (each starts where the last ended); a
/// prompt chunk after its last one sampled, or one starting elsewhere, follows a preemption.
/// Then, with `recomputes` (vLLM: the KV is gone and not pulled again,
/// `NixlConnectorScheduler.update_state_after_alloc` sets `do_remote_prefill = False`, "Only
/// trigger 1 KV transfer per request"), the request computes its prompt and outputs again;
/// without (SGLang: `ScheduleBatch.retract_decode` offloads the KV to host memory in decode mode
/// and `DecodePreallocQueue.resume_retracted_reqs` loads it back), the chunk is loaded.
fn decode_chunk(state: &mut DecodeKv, ctx: Option<u64>, n: u64, samples: bool, recomputes: bool) -> (ChunkKv, u64) {
    match *state {
        DecodeKv::Landed { next, seen } if next.zip(ctx).is_none_or(|(e, c)| c == e) => {
            *state = if samples { DecodeKv::Resident } else { DecodeKv::Landed { next: ctx.map(|c| c + n), seen } };
            (ChunkKv::Transferred, 0)
        }
        // A prompt the replica never received by transfer (not landed: not a P/D request).
        DecodeKv::Absent => (ChunkKv::Computed, 0),
        _ if recomputes => {
            *state = DecodeKv::Recomputing;
            (ChunkKv::Computed, 0)
        }
        cur => {
            *state = match cur {
                _ if samples => DecodeKv::Resident,
                DecodeKv::Landed { seen, .. } => DecodeKv::Landed { next: ctx.map(|c| c + n), seen },
                other => other,
            };
            (ChunkKv::Loaded, n.saturating_sub(1))
        }
    }
}

/// The decode replica's step. `chunks` holds each prefill chunk of `s`, in scheduling order:
/// its tokens and where its KV comes from ([`ChunkKv`]). A chunk whose KV is there (transferred,
/// or reloaded from host memory) costs one token at the end of its context (the token vLLM
/// recomputes to sample), except a transferred chunk on an SGLang decode server (`prebuilt`),
/// which costs nothing: SGLang streams the token the prefill server sampled from a prebuilt
/// batch that runs no forward (`get_new_prebuilt_batch`, `process_batch_result_prebuilt`;
/// 0.4.10–0.5.9 as a step's chunks; from 0.5.10 the engine merges them with no chunk, so none
/// reaches here). A chunk whose KV is not there (a vLLM request recomputing after a
/// preemption) costs what it costs.
///
/// Chunks past the shape's first [`crate::cost::MAX_CHUNKS`] are known only by their total
/// tokens and attention pairs: each takes the token-weighted mean context of those chunks.
fn decode_side_shape(s: &StepShape, chunks: &[(u32, ChunkKv)], prebuilt: bool) -> StepShape {
    if s.prefill_tokens == 0 {
        return *s;
    }
    debug_assert_eq!(chunks.len(), s.num_chunks as usize, "one entry per prefill chunk");
    let mut d = StepShape {
        num_seqs: s.num_seqs - s.num_chunks,
        decode_tokens: s.decode_tokens,
        decode_context_tokens: s.decode_context_tokens,
        cpu_overlapped: s.cpu_overlapped,
        ..Default::default()
    };
    let free = |k: ChunkKv| prebuilt && k == ChunkKv::Transferred;
    let shown = (s.num_chunks as usize).min(crate::cost::MAX_CHUNKS);
    for (i, c) in s.chunks[..shown].iter().enumerate() {
        match chunks.get(i).map(|c| c.1) {
            Some(k) if free(k) => {}
            Some(ChunkKv::Computed) => d.add_prefill(c.context, c.n),
            _ => d.add_prefill(c.context + c.n.saturating_sub(1), 1),
        }
    }
    let (rest_n, rest_tokens, rest_pairs) = s.rest;
    if rest_n > 0 {
        let rest = chunks.get(shown..).unwrap_or(&[]);
        // Σ n(n+1)/2 of the rest's chunks; what is left of their pairs is Σ n × context.
        let own: u64 = rest.iter().map(|&(n, _)| u64::from(n) * (u64::from(n) + 1) / 2).sum();
        let ctx = if rest.len() as u64 == rest_n && rest_tokens > 0 {
            rest_pairs.saturating_sub(own) / rest_tokens
        } else {
            0
        };
        for k in 0..rest_n as usize {
            match rest.get(k) {
                Some(&(_, kv)) if free(kv) => {}
                Some(&(n, ChunkKv::Computed)) => d.add_prefill(ctx, u64::from(n)),
                Some(&(n, _)) => d.add_prefill(ctx + u64::from(n).saturating_sub(1), 1),
                None => d.add_prefill(ctx + (rest_tokens / rest_n).saturating_sub(1), 1),
            }
        }
    }
    d
}

/// A step of an SGLang decode server that runs no forward: only a prebuilt batch of transferred
/// requests, whose first tokens (the prefill server's) it streams (through 0.5.9; from 0.5.10
/// the batch is merged as it is formed and runs no step: [`Engine::take_formed_outputs`]). Its time is the host's work
/// for a step and its requests, the figures the model uses for SGLang's synchronous CPU time
/// ([`crate::cost::BLIS_SYNC_CPU`]), in ns.
fn prebuilt_step_ns(requests: u32) -> u64 {
    let c = crate::cost::BLIS_SYNC_CPU;
    crate::cost::us_to_ns(c.step_us + c.per_seq_us * f64::from(requests)).max(1)
}

impl<'a> FleetLoop<'a> {
    fn push(&mut self, t: u64, ev: Event) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, ev)));
    }

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

    /// The next event in `(time, sequence)` order: the next send or the heap's first.
    fn pop_event(&mut self) -> Option<(u64, Event)> {
        self.sends.pop_event(&mut self.heap, Event::ClientSend)
    }

    /// The time of the next event (`u64::MAX` if none).
    fn next_event_time(&self) -> u64 {
        self.sends.next_event_time(&self.heap)
    }

    /// The views of a pool's replicas; with `cached_of`, each engine's cached prefix of that
    /// request (only for a router that asks: a lookup that changes nothing, see
    /// [`Engine::cached_prefix_tokens`]).
    fn fill_views(&mut self, decode: bool, cached_of: Option<&RequestSpec>) {
        let pool = if decode { &self.decode_pool } else { &self.pool };
        self.views.clear();
        for &r in pool {
            let rep = &self.reps[r];
            self.views.push(ReplicaView {
                outstanding: rep.outstanding,
                running: rep.engine.num_running() as u32,
                waiting: rep.engine.num_waiting() as u32,
                kv_usage: rep.engine.kv_usage(),
                kv_block_size: rep.granularity,
                kv_num_blocks: rep.capacity / u64::from(rep.granularity.max(1)),
                cached_prefix_tokens: cached_of.map(|s| rep.engine.cached_prefix_tokens(s)),
            });
        }
    }

    fn dispatch(&mut self, id: ReqId, now: u64) {
        let spec = self.specs[id as usize];
        let req = RouteRequest { id: u64::from(id), spec, now_ns: now, session: None };
        self.fill_views(false, self.router.wants_cached_prefix().then_some(spec));
        let r = self.pool[self.router.route(&req, &self.views)];
        let d = if self.disagg {
            self.fill_views(true, self.decode_router.wants_cached_prefix().then_some(spec));
            self.decode_pool[self.decode_router.route(&req, &self.views)]
        } else {
            r
        };
        // The fixed ingress, then the front end's serial tokenizer where the engine has one
        // (SGLang's `TokenizerManager`, shared by data-parallel replicas behind one front).
        let Some(arrival) = self.fronts[self.reps[r].front].arrival_tokenized(now, spec.prompt_len) else {
            self.stop.get_or_insert(StopReason::TimeOverflow { cause: INGRESS_TOO_LONG });
            return;
        };
        self.in_flight += 1;
        self.placed[id as usize] = (r as u32, d as u32);
        let timed = self.phase_of[id as usize] == Phase::Timed;
        self.reps[r].outstanding += 1;
        if timed {
            self.reps[r].routed_timed += 1;
        }
        if d != r {
            self.reps[d].outstanding += 1;
            if timed {
                self.reps[d].routed_timed += 1;
            }
        }
        let rec = &mut self.records[id as usize];
        rec.dispatch_ns = now;
        rec.engine_arrival_ns = arrival;
        // An SGLang decode server pre-allocates the request's KV before its prefill may start
        // (the prefill server's bootstrap queue holds it until the decode side's `kv_receiver`
        // sends where the KV goes: `KVPoll.WaitingForInput`).
        let ev = if self.disagg && self.reps[d].prealloc {
            Event::PreallocArrival(id, d as u32)
        } else {
            Event::EngineArrival(id, r as u32)
        };
        self.push(arrival, ev);
    }

    fn sample_gauges(&mut self, r: usize, now: u64) {
        let single = self.reps.len() == 1;
        let rep = &mut self.reps[r];
        let s = GaugeSample {
            t_ns: now,
            running: rep.engine.num_running() as u32,
            waiting: rep.engine.num_waiting() as u32,
            kv_usage: rep.engine.kv_usage(),
        };
        rep.acc.sample(s, self.timed, self.bench_start);
        let old = std::mem::replace(&mut rep.cur, s);
        if rep.role == ReplicaRole::Decode {
            self.tot_running_decode = self.tot_running_decode + u64::from(s.running) - u64::from(old.running);
            if self.timed {
                self.decode_running_peak =
                    self.decode_running_peak.max(self.tot_running_decode.min(u64::from(u32::MAX)) as u32);
            }
        }
        let fleet = if single {
            s
        } else {
            let cap = rep.capacity as f64;
            self.tot_running = self.tot_running + u64::from(s.running) - u64::from(old.running);
            self.tot_waiting = self.tot_waiting + u64::from(s.waiting) - u64::from(old.waiting);
            self.tot_kv_used += (s.kv_usage - old.kv_usage) * cap;
            GaugeSample {
                t_ns: now,
                running: self.tot_running.min(u64::from(u32::MAX)) as u32,
                waiting: self.tot_waiting.min(u64::from(u32::MAX)) as u32,
                kv_usage: (self.tot_kv_used / self.tot_capacity.max(1.0)).clamp(0.0, 1.0),
            }
        };
        self.fleet_acc.sample(fleet, self.timed, self.bench_start);
        if self.timed && self.opts.record_timeseries {
            self.timeseries.push(GaugeSample { t_ns: now - self.bench_start, ..fleet });
        }
    }

    /// Starts replica `r`'s next step, if it has one, and delivers the tokens it streamed as it
    /// formed its batches (an SGLang ≥ 0.5.10 decode server's merged prebuilt requests: the
    /// prefill server's first token, streamed now, with no step of its own).
    fn start_step(&mut self, r: usize, now: u64) {
        self.plan_and_start_step(r, now);
        // Only a decode replica forms batches of landed requests.
        if self.reps[r].role != ReplicaRole::Decode {
            return;
        }
        let mut formed = std::mem::take(&mut self.formed_buf);
        formed.clear();
        self.reps[r].engine.take_formed_outputs(&mut formed);
        if !formed.is_empty() {
            for o in &formed {
                let id = o.id as usize;
                // The request is taken by the scheduler now: its wait after landing ends, and its
                // transferred KV is resident (no prompt chunk of it will be scheduled).
                if let DecodeKv::Landed { seen, .. } = self.decode_kv[id] {
                    if !seen && self.phase_of[id] == Phase::Timed {
                        self.landed_n += 1;
                        self.landed_wait_sum += now.saturating_sub(self.landed_at[id]);
                    }
                    self.decode_kv[id] = DecodeKv::Resident;
                }
            }
            self.deliver(r, now, &formed);
        }
        self.formed_buf = formed;
    }

    fn plan_and_start_step(&mut self, r: usize, now: u64) {
        let rep = &mut self.reps[r];
        let plan = rep.engine.schedule();
        if plan.is_empty() {
            if let Some(e) = rep.engine.fatal_error() {
                // The replica's server stops now: nothing in flight reaches the client.
                if self.stop.is_none() {
                    self.stop = Some(StopReason::EngineError(format!("replica {r}: {e}")));
                    self.stopped_at = Some(now);
                }
                rep.step_running = false;
                return;
            }
            rep.step_running = false;
            self.sample_gauges(r, now);
            return;
        }
        let decode_side = rep.role == ReplicaRole::Decode;
        let dur = if decode_side {
            // Which prefill chunks are of KV the replica holds (transferred, or reloaded from
            // host memory), request by request; and each request's first schedule after landing.
            let (recomputes, prebuilt) = (rep.recomputes_after_preemption, rep.prebuilt_first_token);
            let mut chunks = std::mem::take(&mut self.chunk_buf);
            chunks.clear();
            let mut reloaded = 0u64;
            let mut k = 0usize;
            for sch in &plan.scheduled {
                let id = sch.id as usize;
                if let DecodeKv::Landed { seen: seen @ false, .. } = &mut self.decode_kv[id] {
                    *seen = true;
                    if self.phase_of[id] == Phase::Timed {
                        self.landed_n += 1;
                        self.landed_wait_sum += now.saturating_sub(self.landed_at[id]);
                    }
                }
                if !sch.prefill {
                    continue;
                }
                let ctx = (k < crate::cost::MAX_CHUNKS).then(|| plan.shape.chunks[k].context);
                k += 1;
                let (kv, again) =
                    decode_chunk(&mut self.decode_kv[id], ctx, u64::from(sch.num_tokens), sch.samples, recomputes);
                reloaded += again;
                chunks.push((sch.num_tokens, kv));
            }
            let shape = decode_side_shape(&plan.shape, &chunks, prebuilt);
            let prebuilt_only = shape.num_seqs == 0 && plan.shape.num_seqs > 0;
            let n = plan.shape.num_chunks;
            self.chunk_buf = chunks;
            rep.loaded_tokens += plan.shape.prefill_tokens - shape.prefill_tokens;
            rep.reloaded_tokens += reloaded;
            if prebuilt_only {
                prebuilt_step_ns(n)
            } else {
                rep.cost.step_ns(&shape)
            }
        } else {
            rep.cost.step_ns(&plan.shape)
        };
        let Some(end) = now.checked_add(dur) else {
            if self.stop.is_none() {
                self.stop = Some(StopReason::TimeOverflow { cause: STEP_TOO_LONG });
                self.stopped_at = Some(now);
            }
            rep.step_running = false;
            return;
        };
        for s in &plan.scheduled {
            // A prefill replica may schedule a request once more after its prefill is done (SGLang's
            // overlap scheduler sees a finish one step late): that step is not its prefill's.
            let done = self.prefill_done.get(s.id as usize).copied().unwrap_or(false);
            let rec = &mut self.records[s.id as usize];
            if rec.first_scheduled_ns.is_none() {
                rec.first_scheduled_ns = Some(now);
            }
            if s.prefill && rec.first_token_step_end_ns.is_none() && !decode_side && !done {
                rec.prefill_compute_ns += dur;
            }
        }
        rep.steps += 1;
        rep.last_dur = dur;
        rep.step_running = true;
        self.steps += 1;
        self.sample_gauges(r, now);
        self.push(end, Event::StepEnd(r as u32));
    }

    fn on_step_end(&mut self, r: usize, now: u64) {
        let mut outs = std::mem::take(&mut self.reps[r].outputs);
        outs.clear();
        self.reps[r].engine.finish_step(&mut outs);
        if self.opts.check_invariants {
            if let Err(e) = self.reps[r].engine.check_invariants() {
                self.stop = Some(StopReason::InvariantViolated(format!("replica {r}: {e}")));
            }
        }
        if self.reps[r].role == ReplicaRole::Prefill {
            // The prefill's token is not streamed: the decode side produces the client's first.
            for o in &outs {
                if o.finished {
                    self.on_prefill_done(o.id, r, now);
                }
            }
            self.reps[r].outputs = outs;
            if self.steps >= self.opts.max_steps {
                self.stop = Some(StopReason::StepLimit { steps: self.steps });
                return;
            }
            if self.stop.is_none() {
                self.start_step(r, now);
            }
            return;
        }
        let mut later = std::mem::take(&mut self.reps[r].later);
        if self.reps[r].engine.output_lag() {
            let rep = &mut self.reps[r];
            rep.later = crate::delivery::split_lagged(&mut rep.held, &mut outs, &mut later);
        }
        self.deliver(r, now, &outs);
        self.reps[r].outputs = outs;
        if self.steps >= self.opts.max_steps {
            self.stop = Some(StopReason::StepLimit { steps: self.steps });
            return;
        }
        // SGLang's decode server polls its pre-allocation queue before it forms the next batch
        // (`process_decode_queue` → `get_next_disagg_decode_batch_to_run`).
        if self.reps[r].prealloc {
            self.try_prealloc(r, now);
        }
        let now = if self.opts.fast_forward { self.fast_forward(r, now, &mut later) } else { now };
        if self.stop.is_some() {
            return;
        }
        self.start_step(r, now);
        if !later.is_empty() {
            if self.reps[r].step_running {
                for o in &later {
                    let rec = &mut self.records[o.id as usize];
                    if rec.first_token_step_end_ns.is_none() {
                        rec.first_token_step_end_ns = Some(now);
                    }
                }
            } else {
                self.deliver(r, now, &later);
                later.clear();
            }
        }
        self.reps[r].held = later;
        if self.reps[r].role == ReplicaRole::Decode && !self.reps[r].prealloc {
            self.try_transfers(r, now);
        }
    }

    fn on_prefill_done(&mut self, id: ReqId, p: usize, now: u64) {
        let rep = &mut self.reps[p];
        let pidx = rep.pool_idx;
        self.router.on_first_token(u64::from(id), pidx, now);
        // The router's count of the prefill worker's requests drops now, or (sgl-router) when
        // the client's stream ends (`Event::ClientDone`).
        if !self.prefill_load_to_stream_end {
            rep.outstanding -= 1;
            self.router.on_finish(u64::from(id), pidx, now);
        }
        let d = self.placed[id as usize].1 as usize;
        self.xfer_queued_at[id as usize] = now;
        self.prefill_done[id as usize] = true;
        if self.reps[d].prealloc {
            // Its KV was reserved before the prefill: the transfer waits for the links only.
            self.start_transfer(id, d, now);
        } else {
            self.reps[d].xfer_queue.push_back(id);
            self.try_transfers(d, now);
        }
    }

    /// SGLang's `DecodePreallocQueue.pop_preallocated` on decode replica `d` (0.4.10–0.5.23,
    /// read in the 0.4.10, 0.4.10.post2, 0.5.1, 0.5.6 and 0.5.23 wheels): nothing while a
    /// retracted request waits (`process_decode_queue` returns first); else in queue order, while
    /// a request slot and a metadata buffer are free, a request is pre-allocated if its prompt
    /// plus `num_reserved_decode_tokens`, and its prompt plus its (clipped) output less the
    /// running requests' tokens, fit in the allocatable tokens: the free tokens (the engine holds
    /// the KV pre-allocated already) less the larger of the reserve for every running,
    /// transferring and waiting request and what the largest running request could still need
    /// beyond the running requests' tokens; each takes its prompt plus the reserve from that
    /// figure. The first that does not fit stops the pass. A pre-allocated request's prefill may
    /// start.
    fn try_prealloc(&mut self, d: usize, now: u64) {
        if self.reps[d].xfer_queue.is_empty() {
            return;
        }
        let v = self.reps[d].engine.prealloc_view().expect("an SGLang decode server");
        // `process_decode_queue` pre-allocates nothing while a retracted request waits.
        if v.retracted > 0 {
            return;
        }
        let rep = &self.reps[d];
        let active = v.active + rep.preallocated;
        let need_single = v.largest_running.saturating_sub(v.retractable);
        // `available` is net of the KV pre-allocated already (the engine holds it).
        let mut allocatable = v.available as i64 - (v.reserve * active).max(need_single) as i64;
        let mut slots = v.free_slots.saturating_sub(rep.preallocated);
        let mut buffers = v.metadata_buffers.saturating_sub(rep.preallocated);
        let g = u64::from(rep.granularity.max(1));
        while let Some(&id) = self.reps[d].xfer_queue.front() {
            if slots == 0 || buffers == 0 {
                break;
            }
            let spec = self.specs[id as usize];
            let prompt = u64::from(spec.prompt_len);
            let required = (prompt + v.reserve) as i64;
            let to_finish = (prompt + u64::from(spec.max_tokens.min(v.clip))) as i64 - v.retractable as i64;
            if required.max(to_finish) > allocatable {
                break;
            }
            allocatable -= required;
            slots -= 1;
            buffers -= 1;
            self.reps[d].xfer_queue.pop_front();
            let need = prompt.div_ceil(g) * g;
            self.reps[d].reserved += need;
            self.reps[d].preallocated += 1;
            let reserved = self.reps[d].reserved;
            self.reps[d].engine.set_preallocated(reserved);
            self.xfer_need[id as usize] = need;
            if self.phase_of[id as usize] == Phase::Timed {
                self.prealloc_n += 1;
                self.prealloc_wait_sum += now - self.xfer_queued_at[id as usize];
            }
            let p = self.placed[id as usize].0;
            self.push(now, Event::EngineArrival(id, p));
        }
    }

    /// Why a request waits in an SGLang decode server's pre-allocation queue for good (the run
    /// has stalled): what the head of the queue asks of the pool.
    fn prealloc_stall(&self) -> Option<String> {
        self.reps.iter().enumerate().filter(|(_, r)| r.prealloc).find_map(|(i, rep)| {
            let &id = rep.xfer_queue.front()?;
            let v = rep.engine.prealloc_view()?;
            let spec = self.specs[id as usize];
            Some(format!(
                "a request waits in SGLang's pre-allocation queue on decode replica {i}: it needs its {}-token prompt plus \
                 num_reserved_decode_tokens ({}), and its prompt plus its output of {} tokens, to fit in the {}-token pool",
                spec.prompt_len,
                v.reserve,
                spec.max_tokens.min(v.clip),
                rep.capacity
            ))
        })
    }

    /// Starts the decode replica's queued transfers that its free KV can reserve.
    fn try_transfers(&mut self, d: usize, now: u64) {
        while let Some(&id) = self.reps[d].xfer_queue.front() {
            let spec = self.specs[id as usize];
            let rep = &self.reps[d];
            let g = u64::from(rep.granularity.max(1));
            let need = (u64::from(spec.prompt_len) + 1).div_ceil(g) * g;
            let free = ((rep.capacity as f64) * (1.0 - rep.engine.kv_usage())).max(0.0) as u64;
            if rep.reserved > 0 && need > free.saturating_sub(rep.reserved) {
                break;
            }
            self.reps[d].xfer_queue.pop_front();
            self.reps[d].reserved += need;
            self.xfer_need[id as usize] = need;
            if !self.start_transfer(id, d, now) {
                return;
            }
        }
    }

    /// Starts request `id`'s KV transfer to decode replica `d`, its KV reserved there: on the
    /// two links when both are free, then the fixed latency. False if the run stopped (a time
    /// overflow).
    fn start_transfer(&mut self, id: ReqId, d: usize, now: u64) -> bool {
        {
            let spec = self.specs[id as usize];
            let p = self.placed[id as usize].0 as usize;
            let rep = &self.reps[d];
            let bytes_per_token = rep.kv_bytes_per_token_per_gpu.max(self.reps[p].kv_bytes_per_token_per_gpu);
            // vLLM's NixlConnector reads only the blocks the decode side's own prefix cache
            // lacks: the prompt less its local hit, looked up as the transfer starts.
            let local_hit = if rep.pulls_only_uncached { rep.engine.cached_prefix_tokens(spec) } else { 0 };
            let bytes = bytes_per_token as f64 * f64::from(spec.prompt_len.saturating_sub(local_hit));
            let link_ns = (bytes / self.bw * 1e9).ceil() as u64;
            // The bytes hold the prefill replica's outgoing link and the decode replica's
            // incoming one together (bandwidth is per GPU at each end), from when both are free;
            // a transfer of no bytes (a whole local hit) holds neither. The fixed latency follows
            // on no link: NIXL posts each request's read on its own.
            let start =
                if link_ns == 0 { now } else { now.max(self.reps[d].link_free_at).max(self.reps[p].link_free_at) };
            let Some(end) = start.checked_add(link_ns).and_then(|t| t.checked_add(self.xfer_latency_ns)) else {
                self.stop.get_or_insert(StopReason::TimeOverflow { cause: "a KV transfer's time is too large" });
                return false;
            };
            if link_ns > 0 {
                let link_end = start + link_ns;
                self.reps[d].link_free_at = link_end;
                self.reps[p].link_free_at = link_end;
            }
            if self.phase_of[id as usize] == Phase::Timed {
                self.xfers += 1;
                self.xfer_ns_sum += end - start;
                self.xfer_wait_sum += start - self.xfer_queued_at[id as usize];
            }
            self.push(end, Event::TransferDone(id, d as u32));
        }
        true
    }

    fn fast_forward(&mut self, r: usize, mut now: u64, later: &mut Vec<TokenOutput>) -> u64 {
        let t_next = self.next_event_time();
        if self.reps.len() > 1 && now.saturating_add(self.reps[r].last_dur) >= t_next {
            return now;
        }
        // A request waiting for an SGLang decode server's pre-allocation is tried after every
        // step (its allocatable tokens can grow within a page as the running requests' tokens
        // do), so that server steps one at a time while one waits.
        if self.reps[r].prealloc && !self.reps[r].xfer_queue.is_empty() {
            return now;
        }
        let mut ids = std::mem::take(&mut self.ff_ids);
        let k_max = self.reps[r].engine.ff_begin(&mut ids);
        if k_max == 0 {
            self.ff_ids = ids;
            return now;
        }
        let lag = self.reps[r].engine.output_lag();
        let mut outs = std::mem::take(&mut self.ff_outs);
        outs.clear();
        outs.extend(ids.iter().map(|&id| TokenOutput { id, finished: false }));
        let mut k = 0;
        while k < k_max && self.steps + 1 < self.opts.max_steps {
            let dur = self.reps[r].cost.step_ns(&self.reps[r].engine.ff_shape(k));
            if now.saturating_add(dur) >= t_next || !self.reps[r].engine.ff_step(k) {
                break;
            }
            self.steps += 1;
            self.reps[r].steps += 1;
            self.reps[r].last_dur = dur;
            self.sample_gauges(r, now);
            if lag && k == 0 {
                for o in later.iter() {
                    let rec = &mut self.records[o.id as usize];
                    if rec.first_token_step_end_ns.is_none() {
                        rec.first_token_step_end_ns = Some(now);
                    }
                }
            }
            now += dur;
            if lag {
                self.deliver(r, now, later);
                later.clear();
                later.extend_from_slice(&outs);
            } else {
                self.deliver(r, now, &outs);
            }
            k += 1;
        }
        self.reps[r].engine.ff_end(k);
        self.ff_steps += k;
        if k > 0 && self.opts.check_invariants {
            if let Err(e) = self.reps[r].engine.check_invariants() {
                self.stop = Some(StopReason::InvariantViolated(format!("replica {r} after a fast-forward: {e}")));
            }
        }
        self.ff_ids = ids;
        self.ff_outs = outs;
        now
    }

    fn deliver(&mut self, r: usize, now: u64, outs: &[TokenOutput]) {
        if outs.is_empty() {
            return;
        }
        let front = self.reps[r].front;
        let Some(deliver) = self.fronts[front].stream(now, outs.len()) else {
            self.stop.get_or_insert(StopReason::TimeOverflow { cause: STREAMING_TOO_LONG });
            return;
        };
        // Each replica's deliveries in blocks of the log of their own, so that a request's
        // tokens are runs of consecutive deliveries as on one engine, not one run a token.
        let (next, end) = &mut self.log_blocks[r];
        if *next == *end {
            let Some(d) = self.token_log.reserve_block(LOG_BLOCK) else {
                self.stop.get_or_insert(StopReason::StepLimit { steps: self.steps });
                return;
            };
            (*next, *end) = (d, d + LOG_BLOCK);
        }
        let d = *next;
        *next += 1;
        self.token_log.set(d, deliver);
        let pidx = self.reps[r].pool_idx;
        for o in outs {
            let rec = &mut self.records[o.id as usize];
            if rec.first_token_step_end_ns.is_none() {
                rec.first_token_step_end_ns = Some(now);
            }
            let first = rec.tokens.is_empty();
            rec.tokens.push(d);
            if first {
                if self.disagg {
                    self.decode_router.on_first_token(u64::from(o.id), pidx, now);
                } else {
                    self.router.on_first_token(u64::from(o.id), pidx, now);
                }
            }
            if o.finished {
                self.push(deliver, Event::ClientDone(o.id));
            }
        }
    }
}

/// Deliveries a replica takes of the log at a time.
const LOG_BLOCK: u32 = 4096;

/// Runs `workload` on the fleet `f`; routers draw from streams of `seed`.
pub fn run_fleet(
    f: &FleetSpec,
    workload: &Workload,
    seed: u64,
    opts: RunOptions,
    observe: &mut dyn FnMut(Progress),
) -> (RunResult, FleetRun) {
    let (specs, phase_of, phases, records) = phase_layout(workload);
    let disagg = f.disaggregated();
    let mut pool = Vec::new();
    let mut decode_pool = Vec::new();
    let mut reps = Vec::with_capacity(f.replicas.len());
    for (i, rs) in f.replicas.iter().enumerate() {
        let pool_idx = if rs.role == ReplicaRole::Decode {
            decode_pool.push(i);
            decode_pool.len() - 1
        } else {
            pool.push(i);
            pool.len() - 1
        };
        // An SGLang decode replica is a decode server (`--disaggregation-mode decode`): it admits
        // landed requests as a prebuilt batch (`Scheduler::disaggregation_decode`).
        let engine: Box<dyn Engine + Send> = match &rs.engine {
            crate::config::EngineSpec::Sglang(c) if rs.role == ReplicaRole::Decode => {
                Box::new(crate::engine::sglang::Scheduler::new(c.clone()).disaggregation_decode())
            }
            spec => crate::engine::build(spec),
        };
        let capacity = engine.kv_capacity_tokens();
        reps.push(Rep {
            engine,
            cost: &rs.cost,
            role: rs.role,
            pool_idx,
            front: rs.front,
            step_running: false,
            outputs: Vec::new(),
            held: Vec::new(),
            later: Vec::new(),
            steps: 0,
            last_dur: 0,
            counters_at_start: EngineCounters::default(),
            loaded_tokens: 0,
            loaded_at_start: 0,
            reloaded_tokens: 0,
            reloaded_at_start: 0,
            acc: GaugeAcc::default(),
            cur: GaugeSample { t_ns: 0, running: 0, waiting: 0, kv_usage: 0.0 },
            outstanding: 0,
            routed_timed: 0,
            capacity,
            granularity: rs.engine.kv_granularity(),
            kv_bytes_per_token_per_gpu: rs.kv_bytes_per_token_per_gpu,
            pulls_only_uncached: rs.engine.engine_kind() == crate::config::EngineKind::Vllm,
            recomputes_after_preemption: rs.engine.engine_kind() == crate::config::EngineKind::Vllm,
            prebuilt_first_token: rs.engine.engine_kind() == crate::config::EngineKind::Sglang,
            reserved: 0,
            prealloc: crate::config::sglang_decode_reserve(rs.role, &rs.engine).is_some(),
            preallocated: 0,
            link_free_at: 0,
            xfer_queue: VecDeque::new(),
        });
    }
    let mut fronts = vec![FrontEnd::new(0, 0); f.num_fronts];
    for (rs, rep) in f.replicas.iter().zip(&reps) {
        fronts[rs.front] = FrontEnd::new(rs.cost.ingress_ns(), rs.cost.output_token_ns())
            .with_serial_tokenizer(if workload.tokenize_prompt {
                0
            } else {
                rep.engine.tokenizer_ns_per_prompt_token()
            })
            .with_serial_request_cost(rep.engine.front_end_ns_per_request(workload.chat));
    }
    let prefill_specs: Vec<RequestSpec> = if disagg {
        specs.iter().map(|s| RequestSpec { max_tokens: 1, output_len: 1, ..(*s).clone() }).collect()
    } else {
        Vec::new()
    };
    let n = specs.len();
    let tot_capacity = reps.iter().map(|r| r.capacity as f64).sum();
    let ingress_ns = f.replicas[0].cost.ingress_ns();
    let mut lp = FleetLoop {
        reps,
        fronts,
        router: f.router.build(seed),
        decode_router: f.decode_router.build(crate::rng::mix64(seed ^ 0x6465_636f_6465)),
        pool,
        decode_pool,
        disagg,
        specs,
        prefill_specs,
        phase_of,
        records,
        placed: vec![(0, 0); n],
        xfer_need: if disagg { vec![0; n] } else { Vec::new() },
        xfer_queued_at: if disagg { vec![0; n] } else { Vec::new() },
        prefill_done: if disagg { vec![false; n] } else { Vec::new() },
        decode_kv: if disagg { vec![DecodeKv::Absent; n] } else { Vec::new() },
        landed_at: if disagg { vec![0; n] } else { Vec::new() },
        prefill_load_to_stream_end: disagg && f.router.holds_prefill_load_to_stream_end(),
        chunk_buf: Vec::new(),
        formed_buf: Vec::new(),
        heap: BinaryHeap::new(),
        sends: Default::default(),
        seq: 0,
        max_concurrency: workload.max_concurrency,
        in_flight: 0,
        pending: VecDeque::new(),
        remaining_in_phase: 0,
        opts,
        steps: 0,
        ff_steps: 0,
        timed: false,
        bench_start: 0,
        fleet_acc: GaugeAcc::default(),
        tot_running: 0,
        tot_running_decode: 0,
        decode_running_peak: 0,
        tot_waiting: 0,
        tot_kv_used: 0.0,
        tot_capacity,
        timeseries: Vec::new(),
        stop: None,
        stopped_at: None,
        ff_ids: Vec::new(),
        ff_outs: Vec::new(),
        token_log: TokenLog::default(),
        log_blocks: vec![(0, 0); f.replicas.len()],
        views: Vec::new(),
        bw: f.kv_transfer_bandwidth_bytes_per_s,
        xfer_latency_ns: f.kv_transfer_latency_ns,
        xfers: 0,
        xfer_ns_sum: 0,
        xfer_wait_sum: 0,
        landed_n: 0,
        landed_wait_sum: 0,
        prealloc_n: 0,
        prealloc_wait_sum: 0,
    };

    let mut phase_idx = 0;
    let mut now = 0u64;
    let mut bench_end = 0u64;
    let begin = |lp: &mut FleetLoop, idx: usize, now: u64| {
        let (phase, range) = phases[idx].clone();
        if phase == Phase::Timed {
            lp.timed = true;
            lp.bench_start = now;
            for rep in &mut lp.reps {
                rep.counters_at_start = rep.engine.counters();
                rep.loaded_at_start = rep.loaded_tokens;
                rep.reloaded_at_start = rep.reloaded_tokens;
            }
        }
        lp.start_phase(now, range);
    };
    begin(&mut lp, phase_idx, now);
    if lp.remaining_in_phase == 0 {
        lp.stop = Some(StopReason::Completed);
    }

    while lp.stop.is_none() {
        let Some((t, ev)) = lp.pop_event() else {
            let unfinished = lp.reps.iter().map(|r| r.engine.num_unfinished() + r.xfer_queue.len()).sum();
            let why = lp.reps.iter().find_map(|r| r.engine.stall_reason()).or_else(|| lp.prealloc_stall());
            lp.stop = Some(StopReason::Stalled { unfinished, why });
            break;
        };
        debug_assert!(t >= now, "time went backwards");
        now = t;
        match ev {
            Event::ClientSend(id) => match lp.max_concurrency {
                Some(max) if lp.in_flight >= max => lp.pending.push_back(id),
                _ => lp.dispatch(id, now),
            },
            Event::EngineArrival(id, r) => {
                let r = r as usize;
                let spec: &RequestSpec = if lp.disagg { &lp.prefill_specs[id as usize] } else { lp.specs[id as usize] };
                lp.reps[r].engine.add_request(id, spec);
                if !lp.reps[r].step_running {
                    lp.start_step(r, now);
                }
            }
            Event::PreallocArrival(id, d) => {
                let d = d as usize;
                lp.xfer_queued_at[id as usize] = now;
                lp.reps[d].xfer_queue.push_back(id);
                // SGLang's decode server polls its queue at the top of each loop iteration: at
                // once when idle, else after the step it is running.
                if !lp.reps[d].step_running {
                    lp.try_prealloc(d, now);
                }
            }
            Event::TransferDone(id, d) => {
                let d = d as usize;
                // An idle SGLang decode server's iteration pre-allocates before it takes the
                // landed KV (`pop_preallocated`, then `pop_transferred`).
                if lp.reps[d].prealloc && !lp.reps[d].step_running {
                    lp.try_prealloc(d, now);
                }
                let need = lp.xfer_need[id as usize];
                lp.reps[d].reserved -= need;
                if lp.reps[d].prealloc {
                    lp.reps[d].preallocated -= 1;
                    let reserved = lp.reps[d].reserved;
                    lp.reps[d].engine.set_preallocated(reserved);
                }
                lp.decode_kv[id as usize] = DecodeKv::Landed { next: None, seen: false };
                lp.landed_at[id as usize] = now;
                let spec = lp.specs[id as usize];
                lp.reps[d].engine.add_request(id, spec);
                if !lp.reps[d].step_running {
                    lp.start_step(d, now);
                }
                if !lp.reps[d].prealloc {
                    lp.try_transfers(d, now);
                }
            }
            Event::StepEnd(r) => lp.on_step_end(r as usize, now),
            Event::ClientDone(id) => {
                lp.in_flight -= 1;
                lp.records[id as usize].completed = true;
                lp.remaining_in_phase -= 1;
                let (p, d) = lp.placed[id as usize];
                let (p, d) = (p as usize, d as usize);
                lp.reps[d].outstanding -= 1;
                let didx = lp.reps[d].pool_idx;
                if lp.disagg {
                    lp.decode_router.on_finish(u64::from(id), didx, now);
                    if lp.prefill_load_to_stream_end {
                        lp.reps[p].outstanding -= 1;
                        let pidx = lp.reps[p].pool_idx;
                        lp.router.on_finish(u64::from(id), pidx, now);
                    }
                } else {
                    lp.router.on_finish(u64::from(id), didx, now);
                }
                if lp.timed {
                    let total = workload.requests.len();
                    observe(Progress { completed: total - lp.remaining_in_phase, total, now_ns: now });
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

    let stop = lp.stop.take().unwrap_or(StopReason::Completed);
    if stop != StopReason::Completed {
        now = lp.stopped_at.unwrap_or(now);
        bench_end = now;
    }
    let bench_start = lp.bench_start;
    let timed = lp.timed;
    let gauges = lp.fleet_acc.finish(timed, bench_start, bench_end);
    let mut counters = EngineCounters::default();
    let mut replicas = Vec::with_capacity(lp.reps.len());
    for (rep, rs) in lp.reps.iter_mut().zip(&f.replicas) {
        let mut c = rep.engine.counters() - rep.counters_at_start;
        // (Saturating: under async scheduling a plan formed before the timed phase began may
        // start in it, one plan's count on either side of the boundary.)
        c.prefill_tokens_computed = c.prefill_tokens_computed.saturating_sub(rep.loaded_tokens - rep.loaded_at_start);
        c.recomputed_tokens = c.recomputed_tokens.saturating_sub(rep.reloaded_tokens - rep.reloaded_at_start);
        // With prefill and decode pools, the fleet's prefix cache is the prefill replicas': a
        // decode replica looks each landed prompt up again (vLLM's local lookup before the pull;
        // SGLang's forced chunk cache, which hits nothing), which would halve the rate. Its own
        // row keeps its lookups.
        let prefix = !disagg || rep.role == ReplicaRole::Prefill;
        counters = EngineCounters {
            num_preemptions: counters.num_preemptions + c.num_preemptions,
            prefix_cache_queries: counters.prefix_cache_queries + if prefix { c.prefix_cache_queries } else { 0 },
            prefix_cache_hits: counters.prefix_cache_hits + if prefix { c.prefix_cache_hits } else { 0 },
            num_steps: counters.num_steps + c.num_steps,
            prefill_tokens_computed: counters.prefill_tokens_computed + c.prefill_tokens_computed,
            recomputed_tokens: counters.recomputed_tokens + c.recomputed_tokens,
        };
        replicas.push(ReplicaRun {
            name: rs.name.clone(),
            group: rs.group,
            role: rs.role,
            engine: rs.engine.kind(),
            engine_version: rs.engine.version().to_string(),
            hardware: rs.gpu.clone(),
            tensor_parallel_size: rs.deployment.tensor_parallel_size,
            requests: rep.routed_timed,
            counters: c,
            gauges: rep.acc.finish(timed, bench_start, bench_end),
            kv_capacity_tokens: rep.capacity,
            num_steps: rep.steps,
            cost_source: rs.cost.source(),
        });
    }
    let kv_capacity_tokens = lp.reps.iter().map(|r| r.capacity).sum();
    let records: Vec<RequestRecord> =
        lp.records.into_iter().zip(lp.phase_of.iter()).filter(|(_, p)| **p == Phase::Timed).map(|(r, _)| r).collect();
    let run = RunResult {
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
        ingress_ns,
        fast_forwarded_steps: lp.ff_steps,
        lazy_decoded_tokens: 0,
        token_log: lp.token_log,
        role_chunk_gaps: workload.role_chunk,
        uncounted_prompt_tokens: workload.uncounted_prompt_tokens,
        measure_window_ns: None,
    };
    let per = |x: u64| if lp.xfers > 0 { x as f64 / lp.xfers as f64 / 1e6 } else { 0.0 };
    let fleet = FleetRun {
        kind: f.kind,
        router: lp.router.name().to_string(),
        decode_router: disagg.then(|| lp.decode_router.name().to_string()),
        replicas,
        num_gpus: f.num_gpus(),
        kv_transfers: lp.xfers,
        mean_kv_transfer_ms: per(lp.xfer_ns_sum),
        mean_kv_transfer_wait_ms: per(lp.xfer_wait_sum),
        mean_kv_landed_to_scheduled_ms: if lp.landed_n > 0 {
            lp.landed_wait_sum as f64 / lp.landed_n as f64 / 1e6
        } else {
            0.0
        },
        mean_kv_prealloc_wait_ms: (disagg && lp.reps.iter().any(|r| r.prealloc)).then(|| {
            if lp.prealloc_n > 0 {
                lp.prealloc_wait_sum as f64 / lp.prealloc_n as f64 / 1e6
            } else {
                0.0
            }
        }),
        decode_running_peak: disagg.then_some(lp.decode_running_peak),
    };
    (run, fleet)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(chunks: &[(u64, u64)], decodes: u64) -> StepShape {
        let mut s = StepShape { cpu_overlapped: true, ..Default::default() };
        for &(ctx, n) in chunks {
            s.add_prefill(ctx, n);
        }
        for _ in 0..decodes {
            s.add_decode(100);
        }
        s
    }

    /// Transferred chunks cost a token at the end of their context; a chunk of KV the replica
    /// lost (vLLM, after a preemption) costs what it costs; the rest of the step is kept.
    #[test]
    fn decode_side_shape_collapses_only_the_chunks_whose_kv_is_there() {
        let s = shape(&[(0, 4096), (1024, 2048), (0, 512)], 3);
        let d = decode_side_shape(
            &s,
            &[(4096, ChunkKv::Transferred), (2048, ChunkKv::Computed), (512, ChunkKv::Loaded)],
            false,
        );
        let want = {
            let mut w = StepShape { cpu_overlapped: true, ..Default::default() };
            w.add_prefill(4095, 1);
            w.add_prefill(1024, 2048);
            w.add_prefill(511, 1);
            for _ in 0..3 {
                w.add_decode(100);
            }
            w
        };
        assert_eq!(d, want);
        assert_eq!(d.prefill_tokens, 2050);
        assert!(d.cpu_overlapped, "the step overlaps its CPU work as the engine planned it");
        // All transferred: one token a chunk, as before.
        let all = decode_side_shape(
            &s,
            &[(4096, ChunkKv::Transferred), (2048, ChunkKv::Loaded), (512, ChunkKv::Transferred)],
            false,
        );
        assert_eq!(all.prefill_tokens, 3);
        assert_eq!(all.num_seqs, s.num_seqs);
    }

    /// On an SGLang decode server (`prebuilt`) a transferred chunk runs no forward: the step
    /// keeps its decodes and the chunks it reloads or computes; one of transferred chunks alone is
    /// empty (timed as the host's work, [`prebuilt_step_ns`]). vLLM's recomputes a token each.
    #[test]
    fn an_sglang_decode_server_forwards_nothing_for_a_transferred_prompt() {
        let s = shape(&[(0, 4096), (1024, 2048), (0, 512)], 3);
        let kinds = [(4096, ChunkKv::Transferred), (2048, ChunkKv::Computed), (512, ChunkKv::Loaded)];
        let d = decode_side_shape(&s, &kinds, true);
        let mut want = StepShape { cpu_overlapped: true, ..Default::default() };
        want.add_prefill(1024, 2048);
        want.add_prefill(511, 1);
        for _ in 0..3 {
            want.add_decode(100);
        }
        assert_eq!(d, want);
        let lone = shape(&[(0, 4096), (0, 1000)], 0);
        let only = [(4096, ChunkKv::Transferred), (1000, ChunkKv::Transferred)];
        let e = decode_side_shape(&lone, &only, true);
        assert_eq!((e.num_seqs, e.prefill_tokens, e.decode_tokens), (0, 0, 0), "{e:?}");
        assert_eq!(decode_side_shape(&lone, &only, false).prefill_tokens, 2);
        assert_eq!(prebuilt_step_ns(2), 134_000);
    }

    /// Past the shape's first chunks only totals are known: each rest chunk takes the
    /// token-weighted mean context, and its own length when recomputed.
    #[test]
    fn decode_side_shape_keeps_the_rest_chunks_tokens() {
        let n = crate::cost::MAX_CHUNKS + 3;
        let chunks: Vec<(u64, u64)> = (0..n).map(|i| (0, 100 + i as u64)).collect();
        let s = shape(&chunks, 0);
        let flags: Vec<(u32, ChunkKv)> = chunks
            .iter()
            .enumerate()
            .map(|(i, &(_, k))| (k as u32, if i == n - 1 { ChunkKv::Computed } else { ChunkKv::Loaded }))
            .collect();
        let d = decode_side_shape(&s, &flags, false);
        let last = 100 + (n - 1) as u64;
        assert_eq!(d.prefill_tokens, (n - 1) as u64 + last);
        assert_eq!(d.num_chunks as usize, n);
        assert_eq!(d.rest.0, 3);
        // The rest started at context 0: the recomputed one attends from 0.
        assert_eq!(d.rest.1, 2 + last);
    }

    /// vLLM: a chunk after the transferred prompt sampled, or one restarting it, follows a
    /// preemption and is computed; SGLang reloads it (counted back out of the recomputed tokens).
    #[test]
    fn a_preempted_request_recomputes_on_vllm_and_reloads_on_sglang() {
        for recomputes in [true, false] {
            let mut st = DecodeKv::Landed { next: None, seen: true };
            // Two chunks of the transferred prompt (the first from a local prefix hit at 512).
            assert_eq!(decode_chunk(&mut st, Some(512), 2048, false, recomputes), (ChunkKv::Transferred, 0));
            assert_eq!(st, DecodeKv::Landed { next: Some(2560), seen: true });
            assert_eq!(decode_chunk(&mut st, Some(2560), 1536, true, recomputes), (ChunkKv::Transferred, 0));
            assert_eq!(st, DecodeKv::Resident);
            // Preempted after its outputs began: its prompt comes back as prefill.
            let again = decode_chunk(&mut st, Some(0), 4200, true, recomputes);
            if recomputes {
                assert_eq!(again, (ChunkKv::Computed, 0));
                assert_eq!(st, DecodeKv::Recomputing);
                // And stays computed, a later preemption too.
                assert_eq!(decode_chunk(&mut st, Some(1024), 3000, true, recomputes), (ChunkKv::Computed, 0));
            } else {
                assert_eq!(again, (ChunkKv::Loaded, 4199));
                assert_eq!(st, DecodeKv::Resident);
            }
        }
        // Preempted between two chunks of the transferred prompt: the restart is computed (vLLM).
        let mut st = DecodeKv::Landed { next: None, seen: true };
        assert_eq!(decode_chunk(&mut st, Some(0), 2048, false, true), (ChunkKv::Transferred, 0));
        assert_eq!(decode_chunk(&mut st, Some(0), 2048, false, true), (ChunkKv::Computed, 0));
        assert_eq!(decode_chunk(&mut st, Some(2048), 2048, true, true), (ChunkKv::Computed, 0));
        // A chunk past the shape's listed ones (context unknown) continues the prompt.
        let mut st = DecodeKv::Landed { next: Some(100), seen: true };
        assert_eq!(decode_chunk(&mut st, None, 50, true, true), (ChunkKv::Transferred, 0));
    }
}
