//! The engine driver: `sim::simulation::run`'s twin for a live server. It owns the
//! engine (`sim::engine::build`) and the front end's state (`sim::delivery`: ingress,
//! output lag, the streaming queue), computes in engine time (integer ns) and takes
//! time from a [`Clock`]: the wall clock in production, a virtual one in tests. Its
//! events: a request clears ingress, a step ends, the streaming queue hands tokens to
//! their streams; between them it waits on the clock for the next one or for a message
//! (a new request, an abort, shutdown).

use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sim::cost::StepShape;
use sim::engine::{Engine, ReqId, TokenOutput};
use sim::request::RequestSpec;
use tokio::sync::mpsc::UnboundedSender;

use crate::clock::{Clock, Closed};
use crate::metrics::Stats;

/// A token (or the end of a stream) for a request's HTTP handler.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TokenEvent {
    pub finished: bool,
    /// The request stopped at EOS (not at max_tokens).
    pub stop: bool,
    /// The request's cached tokens as SGLang counts them (`Req.cached_tokens`, its
    /// `meta_info.cached_tokens` on `/generate`): [`Live::cached`].
    pub cached: u32,
    /// Engine time the token leaves the streaming queue for its client: the tokenizer
    /// manager's receipt of the output, SGLang's `finished_time` for the last token.
    pub at_ns: u64,
}

pub(crate) struct NewRequest {
    /// The handler's id for the request (aborts name it).
    pub key: u64,
    pub spec: RequestSpec,
    pub tokens: UnboundedSender<TokenEvent>,
    /// Engine time the HTTP request was read (server-side TTFT and E2E count from here).
    pub arrived_ns: u64,
    /// Came on the chat endpoint (vLLM 0.11.0 parses the template first:
    /// `Engine::front_end_ns_per_request`).
    pub chat: bool,
    /// The prompt came as token ids: the engine's tokenizer (SGLang's) has nothing to do.
    pub token_ids: bool,
}

pub(crate) enum Msg {
    Add(NewRequest),
    /// The client went away: free the request (vLLM's and SGLang's abort).
    Abort(u64),
    /// End every stream (its handler sends the error event) and stop.
    Shutdown,
}

/// A message for the driver (opaque outside the crate).
pub struct Input(pub(crate) Msg);

/// The driver's inbox, read through a [`Clock`].
pub struct Inbox(pub(crate) Receiver<Input>);

impl Inbox {
    pub fn try_take(&self) -> Result<Option<Input>, Closed> {
        match self.0.try_recv() {
            Ok(m) => Ok(Some(m)),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(Closed),
        }
    }
    pub fn take_timeout(&self, d: Duration) -> Result<Option<Input>, Closed> {
        match self.0.recv_timeout(d) {
            Ok(m) => Ok(Some(m)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(Closed),
        }
    }
    pub fn take(&self) -> Result<Input, Closed> {
        self.0.recv().map_err(|_| Closed)
    }
}

pub(crate) fn channel() -> (Sender<Input>, Inbox) {
    let (tx, rx) = std::sync::mpsc::channel();
    (tx, Inbox(rx))
}

struct Live {
    key: u64,
    tx: UnboundedSender<TokenEvent>,
    arrived_ns: u64,
    last_ns: Option<u64>,
    prompt_len: u32,
    stop: bool,
    /// Tokens streamed so far.
    generated: u32,
    /// Prompt tokens the engine computed (not found in the prefix cache) before the first
    /// token: the prefill chunks scheduled for it until then, at most the prompt.
    computed_before_first: u32,
    /// SGLang's `Req.cached_tokens`: the prefix found at each admission
    /// (`ScheduleBatch.prepare_for_extend`, `req.cached_tokens += pre_len - req.already_computed`,
    /// where a retraction zeroes `already_computed`, `Req.reset_for_retract`). Through 0.5.5 a
    /// re-admission after a retraction adds its own lookup (which may hit the request's own
    /// prompt and output: `cached_tokens` can exceed the prompt); from 0.5.6 only the first
    /// admission counts (`if not req.retracted_stain`; read in the 0.4.10, 0.5.3, 0.5.4,
    /// 0.5.5, 0.5.6 and 0.5.23 wheels): [`DriverSetup::cached_on_readmission`]. Each admission's
    /// prefix is what it held less what it computed before its next token: the prompt less
    /// `computed_before_first` at the first token; after a retraction, the prompt and the
    /// outputs so far less the recompute ([`Live::readmitted`]). Its later prefill chunks add
    /// nothing (`pre_len == already_computed`).
    cached: u32,
    /// A re-admission after a retraction (SGLang) or a preemption (vLLM) whose next token has
    /// not come yet: the tokens it held (prompt and outputs) and the prefill scheduled since.
    readmitted: Option<(u32, u32)>,
}

/// How vLLM's `vllm:iteration_tokens_total` counts a request's prompt in the output batch
/// that carries its first token (`v1/metrics/loggers.py`, `PrometheusStatLogger.record`:
/// one observation per engine-core output batch that has outputs, `async_llm.py`
/// `output_handler`: `IterationStats() if (log_stats and num_outputs)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IterationPrompt {
    /// 0.11–0.22: `num_prompt_tokens + num_generation_tokens`, the whole prompt
    /// (`stats.py`, `update_from_output`: `num_prompt_tokens += prompt_len`; read in the
    /// 0.11.0, 0.14.0, 0.20.0 and 0.22.0 sources).
    Whole,
    /// 0.23 on: `prompt_token_stats.computed + num_generation_tokens`, the prompt less the
    /// tokens found cached when it was scheduled (`PrefillStats.set`; read in the 0.23.0,
    /// 0.24.0, 0.26.0, 0.30.0, 0.32.0 and 0.34.0 sources). servesim takes it as the prefill
    /// tokens scheduled for the request before its first token, which is exact unless the
    /// request is preempted before its first token (rare: mid-prefill). Then servesim counts
    /// its recompute too, up to its prompt, where vLLM counts the prompt less what its first
    /// admission found cached (0.26 on: `PrefillStats.set` only `if request.num_preemptions
    /// <= 0`, read in 0.28.0 and 0.34.0) or its last admission's (0.23–0.25: set at every
    /// admission, read in 0.24.0). The two agree when no admission found a cached prefix.
    /// What an admission found cached is not visible from here (a plan's chunks do not say
    /// where in the prompt they start), so the difference is left: it needs the engine to
    /// report it (`sim::engine::Scheduled` has no such field).
    Computed,
}

impl IterationPrompt {
    pub(crate) fn of(spec: &sim::config::SimSpec) -> IterationPrompt {
        if spec.engine.version() >= sim::engine::Version::new(0, 23, 0) {
            IterationPrompt::Computed
        } else {
            IterationPrompt::Whole
        }
    }
}

type Delivery = (UnboundedSender<TokenEvent>, TokenEvent);

/// A driver's constant inputs.
pub(crate) struct DriverSetup {
    pub engine: Box<dyn Engine + Send>,
    pub cost: sim::cost::CostModel,
    pub front: sim::delivery::FrontEnd,
    pub stats: Arc<Mutex<Stats>>,
    pub clock: Arc<dyn Clock>,
    /// Engine ns a step may start behind the clock (wall clock: absorbs wake-up
    /// latency without letting a stall be caught up all at once).
    pub slack_ns: u64,
    /// The engine is SGLang (its counters move when a request finishes).
    pub sglang: bool,
    /// vLLM's rule for `vllm:iteration_tokens_total`.
    pub iteration_prompt: IterationPrompt,
    /// SGLang before 0.5.6: a re-admission after a retraction adds its prefix to the request's
    /// cached tokens ([`Live::cached`]; [`cached_on_readmission`]).
    pub cached_on_readmission: bool,
    /// `--time-scale`: engine seconds per wall second. The latency histograms are observed in
    /// the time the client sees (engine time divided by it): a scaled server looks like the
    /// faster engine it stands for, as a real engine's are measured on the wall clock
    /// (`time.time()` / `time.perf_counter()` in vLLM's output processor and SGLang's tokenizer
    /// manager). 1 on a virtual clock.
    pub time_scale: f64,
}

/// The first SGLang release whose `Req.cached_tokens` counts the first admission only
/// (`retracted_stain`, sgl-project/sglang#11900; absent from the 0.5.5 wheel, present in 0.5.6's).
pub(crate) const SGLANG_CACHED_FIRST_ADMISSION_ONLY: sim::engine::Version = sim::engine::Version::new(0, 5, 6);

/// Whether `spec`'s engine adds a re-admission's prefix to a request's cached tokens
/// ([`DriverSetup::cached_on_readmission`]).
pub(crate) fn cached_on_readmission(spec: &sim::config::SimSpec) -> bool {
    crate::is_sglang(spec) && spec.engine.version() < SGLANG_CACHED_FIRST_ADMISSION_ONLY
}

/// A request that cleared ingress reaches the engine's waiting queue.
fn admit(engine: &mut (dyn Engine + Send), live: &mut BTreeMap<ReqId, Live>, next: &mut ReqId, r: NewRequest) {
    let id = *next;
    *next += 1;
    engine.add_request(id, &r.spec);
    let stop = !r.spec.ignore_eos && r.spec.output_len < r.spec.max_tokens;
    live.insert(
        id,
        Live {
            key: r.key,
            tx: r.tokens,
            arrived_ns: r.arrived_ns,
            last_ns: None,
            prompt_len: r.spec.prompt_len,
            stop,
            generated: 0,
            computed_before_first: 0,
            cached: 0,
            readmitted: None,
        },
    );
}

/// SGLang's `--decode-log-interval` default (`server_args.py`, 0.4.10–0.5.23): decode batches
/// between two decode-stats logs.
const SGLANG_DECODE_LOG_INTERVAL: u64 = 40;

/// Runs until shutdown or until every sender is gone.
pub(crate) fn run(setup: DriverSetup, inbox: Inbox) {
    let DriverSetup {
        mut engine,
        cost,
        mut front,
        stats,
        clock,
        slack_ns,
        sglang,
        iteration_prompt,
        cached_on_readmission,
        time_scale,
    } = setup;
    // Engine ns to the seconds the client sees.
    let seconds = move |ns: u64| ns as f64 / 1e9 / time_scale;
    let mut live: BTreeMap<ReqId, Live> = BTreeMap::new();
    let mut next: ReqId = 0;
    // Requests in ingress, in the order they were read: (ready_ns, request).
    let mut ingress: VecDeque<(u64, NewRequest)> = VecDeque::new();
    // Tokens on their way out of the streaming queue, in delivery order.
    let mut out_queue: VecDeque<(u64, Vec<Delivery>)> = VecDeque::new();
    let mut step: Option<(u64, StepShape)> = None;
    let mut held: Vec<TokenOutput> = Vec::new();
    let mut outs: Vec<TokenOutput> = Vec::new();
    let mut aborts: Vec<u64> = Vec::new();
    // Engine time of the last event handled: a step starts there, not when the clock
    // got round to it.
    let mut cursor: u64 = 0;
    let publish = |engine: &dyn Engine| {
        let c = engine.counters();
        let mut st = stats.lock().expect("stats");
        st.running = engine.num_running();
        st.waiting = engine.num_waiting();
        st.kv_usage = engine.kv_usage();
        st.preemptions = c.num_preemptions;
        st.prefix_queries = c.prefix_cache_queries;
        st.prefix_hits = c.prefix_cache_hits;
    };
    let deliver = |clock: &Arc<dyn Clock>, events: Vec<Delivery>| {
        for (tx, ev) in events {
            clock.hold();
            if tx.send(ev).is_err() {
                clock.release(); // the handler is gone: nobody will count it
            }
        }
    };
    let stream = |front: &mut sim::delivery::FrontEnd,
                  out_queue: &mut VecDeque<(u64, Vec<Delivery>)>,
                  live: &BTreeMap<ReqId, Live>,
                  at: u64,
                  outs: &[TokenOutput]| {
        let n = outs.iter().filter(|o| live.contains_key(&o.id)).count();
        if n > 0 {
            let when = front.stream(at, n).unwrap_or(u64::MAX);
            let events: Vec<Delivery> = outs
                .iter()
                .filter_map(|o| {
                    live.get(&o.id).map(|l| {
                        let ev = TokenEvent { finished: o.finished, stop: l.stop, cached: l.cached, at_ns: when };
                        (l.tx.clone(), ev)
                    })
                })
                .collect();
            out_queue.push_back((when, events));
        }
    };
    loop {
        let now = clock.now_ns();
        while out_queue.front().is_some_and(|d| d.0 <= now) {
            let (_, events) = out_queue.pop_front().expect("front");
            deliver(&clock, events);
        }
        // The step that ended this turn, if one did.
        let mut ended = None;
        if let Some((end, shape_ran)) = step.filter(|s| s.0 <= now) {
            // Requests that cleared ingress while the step ran reach the engine before its
            // end, as in `simulate`'s event order (time, then sequence), though the clock
            // woke late (the wall clock); those arriving after it are admitted below.
            while ingress.front().is_some_and(|r| r.0 < end) {
                let (_, r) = ingress.pop_front().expect("front");
                admit(engine.as_mut(), &mut live, &mut next, r);
            }
            ended = Some(end);
            step = None;
            cursor = end;
            outs.clear();
            engine.finish_step(&mut outs);
            {
                let mut st = stats.lock().expect("stats");
                if sglang && shape_ran.prefill_tokens == 0 && shape_ran.num_seqs > 0 {
                    // `process_batch_result_decode`: every `decode_log_interval`-th decode batch
                    // logs its stats, which sets `cache_hit_rate` to 0.
                    st.decode_batches += 1;
                    if st.decode_batches % SGLANG_DECODE_LOG_INTERVAL == 0 {
                        st.cache_hit_rate = 0.0;
                    }
                }
                // vLLM's `vllm:iteration_tokens_total`: one observation per output batch that
                // has outputs (a step that only runs a prefill chunk has none), its tokens
                // generated plus the prompts of the requests whose first token it carries
                // ([`IterationPrompt`]); not the tokens the step scheduled.
                let mut batch: Option<u64> = None;
                for o in &outs {
                    let Some(l) = live.get_mut(&o.id) else { continue };
                    let since = |t: u64| seconds(end.saturating_sub(t));
                    let mut tokens = 1;
                    if let Some((held, recomputed)) = l.readmitted.take() {
                        if cached_on_readmission {
                            l.cached = l.cached.saturating_add(held.saturating_sub(recomputed));
                        }
                    }
                    match l.last_ns {
                        None => {
                            l.cached = l.prompt_len.saturating_sub(l.computed_before_first);
                            st.ttft.observe(since(l.arrived_ns));
                            tokens += u64::from(match iteration_prompt {
                                IterationPrompt::Whole => l.prompt_len,
                                IterationPrompt::Computed => l.computed_before_first.min(l.prompt_len),
                            });
                            if !sglang {
                                // vLLM adds the prompt once, with the request's first token
                                // (`stats.py`, `IterationStats.update_from_output` under
                                // `is_prefilling`, which the output processor clears at the
                                // first output): a preemption's recompute is not counted again.
                                st.prompt_tokens += u64::from(l.prompt_len);
                            }
                        }
                        Some(prev) => st.itl.observe(since(prev)),
                    }
                    l.last_ns = Some(end);
                    l.generated += 1;
                    if !sglang {
                        st.generation_tokens += 1;
                    }
                    *batch.get_or_insert(0) += tokens;
                }
                if let Some(b) = batch.filter(|_| !sglang) {
                    st.iteration_tokens.observe(b as f64);
                }
                for o in outs.iter().filter(|o| o.finished) {
                    if let Some(l) = live.get(&o.id) {
                        st.e2e.observe(seconds(end.saturating_sub(l.arrived_ns)));
                        if l.stop {
                            st.finished_stop += 1;
                        } else {
                            st.finished_length += 1;
                        }
                        if sglang {
                            st.count_sglang_finished(l.prompt_len, l.generated, l.cached);
                        }
                    }
                }
            }
            // Which tokens go out now and which wait for the next step: `sim::delivery`.
            if engine.output_lag() {
                let mut later = Vec::new();
                let _ = sim::delivery::split_lagged(&mut held, &mut outs, &mut later);
                held = later;
            }
            stream(&mut front, &mut out_queue, &live, end, &outs);
            for o in outs.iter().filter(|o| o.finished) {
                live.remove(&o.id);
            }
        }
        while ingress.front().is_some_and(|r| r.0 <= now) {
            if step.is_none() && ended.is_some_and(|e| ingress.front().is_some_and(|r| r.0 > e)) {
                // The clock woke late, after the step's end and after this arrival: in
                // `simulate` the engine planned its next step at the step's end, without it.
                // Plan now from the step's end; if nothing runs, the next turn admits it.
                break;
            }
            let (ready, r) = ingress.pop_front().expect("front");
            cursor = cursor.max(ready);
            admit(engine.as_mut(), &mut live, &mut next, r);
            if step.is_none() {
                // An idle engine starts a step with the first request that reaches it; those
                // arriving at the same instant wait for the next step, as `simulate` orders
                // them (an arrival at an idle engine starts a step at once).
                break;
            }
        }
        if step.is_none() {
            // Between steps: the clients that went away leave the engine.
            for key in aborts.drain(..) {
                let Some((&id, _)) = live.iter().find(|(_, l)| l.key == key) else { continue };
                if engine.abort_request(id) {
                    let l = live.remove(&id).expect("live");
                    held.retain(|o| o.id != id);
                    if sglang {
                        let mut st = stats.lock().expect("stats");
                        st.aborted += 1;
                        if l.last_ns.is_some() {
                            // A request in SGLang's running batch is finished with
                            // `FINISH_ABORT` after one more decode pass (`scheduler.py`,
                            // `abort_request`, "Abort method 3") and its output is counted as
                            // any finished request's (`tokenizer_manager.py`,
                            // `collect_metrics`); one in the waiting queue is answered with an
                            // `AbortReq` and counted only as aborted.
                            st.count_sglang_finished(l.prompt_len, l.generated + 1, l.cached);
                            st.e2e.observe(seconds(cursor.max(now).saturating_sub(l.arrived_ns)));
                        }
                    }
                    // vLLM counts nothing for a request its client aborted: the output
                    // processor drops its state (`output_processor.py`, `abort_requests`,
                    // 0.11.0 and 0.32.0) and no finished-request stats are recorded.
                }
            }
            // SGLang's hit-rate gauge needs the prefix counters before the batch is formed.
            let before = sglang.then(|| engine.counters());
            let (busy, shape) = {
                let plan = engine.schedule();
                for s in plan.scheduled.iter().filter(|s| s.prefill) {
                    let Some(l) = live.get_mut(&s.id) else { continue };
                    if l.last_ns.is_none() {
                        l.computed_before_first = l.computed_before_first.saturating_add(s.num_tokens);
                    } else {
                        // A prefill after the first token: the request was retracted (preempted)
                        // and is admitted again, holding its prompt and the outputs so far.
                        let held = l.prompt_len.saturating_add(l.generated);
                        let r = l.readmitted.get_or_insert((held, 0));
                        r.1 = r.1.saturating_add(s.num_tokens);
                    }
                }
                (!plan.is_empty(), plan.shape)
            };
            if let Some(before) = before.filter(|_| shape.prefill_tokens > 0) {
                // A prefill batch formed: `log_prefill_stats` sets `cache_hit_rate` to its rate.
                let c = engine.counters();
                let (hits, queries) = (
                    c.prefix_cache_hits.saturating_sub(before.prefix_cache_hits),
                    c.prefix_cache_queries.saturating_sub(before.prefix_cache_queries),
                );
                stats.lock().expect("stats").cache_hit_rate =
                    if queries > 0 { hits as f64 / queries as f64 } else { 0.0 };
            }
            if !busy {
                if let Some(e) = engine.fatal_error() {
                    // The modelled engine raised (SGLang's decode out of memory; a stopped
                    // engine plans nothing) and the real server dies: the streams in flight
                    // end unfinished, later requests are refused ("the engine stopped").
                    eprintln!("servesim serve: engine error: {e}");
                    stats.lock().expect("stats").engine_error = Some(e.to_string());
                    return;
                }
            }
            if busy {
                let start = cursor.max(now.saturating_sub(slack_ns));
                let end = start.saturating_add(cost.step_ns(&shape));
                step = Some((end, shape));
            } else if !held.is_empty() {
                // The engine goes idle: the last step's held tokens go out (`output_lag`).
                let h = std::mem::take(&mut held);
                stream(&mut front, &mut out_queue, &live, cursor.max(now.saturating_sub(slack_ns)), &h);
            }
            publish(engine.as_ref());
        }
        let until = [step.map(|s| s.0), out_queue.front().map(|d| d.0), ingress.front().map(|r| r.0)]
            .into_iter()
            .flatten()
            .min();
        match clock.wait(&inbox, until) {
            Ok(None) => {}
            Ok(Some(Input(Msg::Add(r)))) => {
                // The fixed ingress, then the engine's serial tokenizer where it has one
                // (SGLang's `TokenizerManager`; not for a prompt sent as token ids) and its
                // per-request work on the same loop (vLLM 0.11.0's chat-template parse), as
                // `simulate` delivers it.
                front.serial_ns_per_request = cost.scaled_ns(engine.front_end_ns_per_request(r.chat));
                let tokens = if r.token_ids { 0 } else { r.spec.prompt_len };
                let ready = front.arrival_tokenized(r.arrived_ns, tokens).unwrap_or(u64::MAX);
                ingress.push_back((ready, r));
            }
            Ok(Some(Input(Msg::Abort(key)))) => {
                if let Some(i) = ingress.iter().position(|r| r.1.key == key) {
                    ingress.remove(i);
                    if sglang {
                        // SGLang's tokenizer manager counts the abort as it sends it
                        // (`tokenizer_manager.py`, `abort_request`).
                        stats.lock().expect("stats").aborted += 1;
                    }
                } else if live.values().any(|l| l.key == key) {
                    aborts.push(key);
                }
            }
            // Dropping the streams' senders ends them: each handler says so to its client.
            Ok(Some(Input(Msg::Shutdown))) | Err(Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, VirtualClock};
    use sim::config::SimSpec;
    use sim::request::Segment;
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

    /// A built-in scenario with `engine` fields overridden.
    fn spec(scenario: &str, engine: serde_json::Value) -> SimSpec {
        spec_costed(scenario, engine, None)
    }

    /// [`spec`] with the scenario's `cost` section replaced.
    fn spec_costed(scenario: &str, engine: serde_json::Value, cost: Option<serde_json::Value>) -> SimSpec {
        let path = format!("{}/../scenarios/{scenario}.json", env!("CARGO_MANIFEST_DIR"));
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        for (k, x) in engine.as_object().unwrap() {
            v["engine"][k] = x.clone();
        }
        if let Some(c) = cost {
            v["cost"] = c;
        }
        let s = sim::config::scenario_from_value(v).unwrap();
        sim::config::resolve(&s, &sim::builtin::resources().unwrap()).unwrap()
    }

    /// A request of `prompt_len` distinct tokens (`tag` keeps prompts apart: no shared prefix).
    fn request(tag: u64, prompt_len: u32, max_tokens: u32) -> RequestSpec {
        RequestSpec {
            prompt: (0..u64::from(prompt_len)).map(|i| Segment { key: (tag << 32) | i, len: 1 }).collect(),
            prompt_len,
            max_tokens,
            output_len: max_tokens,
            output_key: tag,
            arrival_ns: 0,
            priority: 0,
            ignore_eos: true,
            prompt_hashes: None,
        }
    }

    /// Serves `reqs` (all sent at time 0) on a virtual clock to the end, the client reading
    /// every token; `on_token(i, n, stats)` sees request `i`'s `n`-th token (from 1) as it
    /// comes and may abort it (true). Returns the stats at the end.
    fn serve(spec: &SimSpec, reqs: Vec<RequestSpec>, on_token: impl FnMut(usize, u32, &Stats) -> bool) -> Stats {
        serve_on(spec, reqs, Arc::new(VirtualClock::new()), 0, true, 1.0, on_token)
    }

    /// [`serve`] on `clock`, with `slack_ns`; the prompts sent as text (`token_ids` false)
    /// pass SGLang's tokenizer queue; `time_scale` as `--time-scale`.
    #[allow(clippy::too_many_arguments)]
    fn serve_on(
        spec: &SimSpec,
        reqs: Vec<RequestSpec>,
        clock: Arc<dyn Clock>,
        slack_ns: u64,
        token_ids: bool,
        time_scale: f64,
        mut on_token: impl FnMut(usize, u32, &Stats) -> bool,
    ) -> Stats {
        let stats = Arc::new(Mutex::new(Stats::new(crate::is_sglang(spec))));
        let (tx, inbox) = channel();
        let engine = sim::engine::build(&spec.engine);
        let front = sim::delivery::FrontEnd::new(spec.cost.ingress_ns(), spec.cost.output_token_ns())
            .with_serial_tokenizer(spec.cost.scaled_ns(engine.tokenizer_ns_per_prompt_token()));
        // Each stream, its tokens read, whether it has ended, whether it was aborted.
        let mut rxs: Vec<(UnboundedReceiver<TokenEvent>, u32, bool, bool)> = Vec::new();
        for (i, r) in reqs.into_iter().enumerate() {
            let (t, rx) = unbounded_channel();
            let r = NewRequest { key: i as u64, spec: r, tokens: t, arrived_ns: 0, chat: false, token_ids };
            tx.send(Input(Msg::Add(r))).unwrap();
            rxs.push((rx, 0, false, false));
        }
        let setup = DriverSetup {
            engine,
            cost: spec.cost.clone(),
            front,
            stats: stats.clone(),
            clock: clock.clone(),
            slack_ns,
            sglang: crate::is_sglang(spec),
            iteration_prompt: IterationPrompt::of(spec),
            cached_on_readmission: cached_on_readmission(spec),
            time_scale,
        };
        let driver = std::thread::spawn(move || run(setup, inbox));
        let started = std::time::Instant::now();
        while rxs.iter().any(|r| !r.2) {
            assert!(started.elapsed() < std::time::Duration::from_secs(60), "the run did not end");
            let mut got = false;
            for (i, (rx, n, done, aborted)) in rxs.iter_mut().enumerate() {
                if *done {
                    continue;
                }
                match rx.try_recv() {
                    Ok(ev) => {
                        got = true;
                        if !*aborted {
                            *n += 1;
                            if on_token(i, *n, &stats.lock().unwrap()) && !ev.finished {
                                // Sent before the token is released: the clock stands still.
                                tx.send(Input(Msg::Abort(i as u64))).unwrap();
                                *aborted = true;
                            }
                        }
                        // After an abort, the tokens already on their way are read to the
                        // stream's end (the driver drops its sender).
                        *done |= ev.finished;
                        clock.release();
                    }
                    Err(tokio::sync::mpsc::error::TryRecvError::Empty) => {}
                    Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => *done = true,
                }
            }
            if !got {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
        tx.send(Input(Msg::Shutdown)).unwrap();
        driver.join().unwrap();
        let st = std::mem::take(&mut *stats.lock().unwrap());
        st
    }

    #[test]
    fn iteration_tokens_are_observed_per_output_batch_with_the_prompt_and_the_first_token() {
        // The audit's case: a 1,500-token prompt in 512-token chunks, one token out. vLLM 0.32
        // observed count 1, sum 1,501 (not three steps of 512, 512 and 476).
        let s = spec("serve-small-vllm", serde_json::json!({"max_num_batched_tokens": 512, "max_model_len": 2048}));
        let st = serve(&s, vec![request(1, 1500, 1)], |_, _, _| false);
        assert_eq!((st.iteration_tokens.count(), st.iteration_tokens.sum()), (1, 1501.0));
        // Three tokens: the prompt with the first, then one a step.
        let st = serve(&s, vec![request(1, 1500, 3)], |_, _, _| false);
        assert_eq!((st.iteration_tokens.count(), st.iteration_tokens.sum()), (3, 1503.0));
        assert_eq!((st.prompt_tokens, st.generation_tokens), (1500, 3));
    }

    #[test]
    fn iteration_tokens_leave_out_cached_prompt_tokens_from_0_23_and_count_them_before() {
        // The same prompt twice, one after the other: the second finds 1,488 tokens cached
        // (93 blocks of 16; the last token is always computed).
        let run = |version: &str| {
            serve_two_in_turn(&spec("serve-small-vllm", serde_json::json!({"version": version})), request(1, 1500, 1))
        };
        let new = run("0.33.0");
        assert_eq!(new.prefix_hits, 1488);
        assert_eq!((new.iteration_tokens.count(), new.iteration_tokens.sum()), (2, 1501.0 + 13.0));
        assert_eq!(new.prompt_tokens, 3000, "vllm:prompt_tokens_total counts cached tokens too");
        let old = run("0.20.0");
        assert_eq!(old.prefix_hits, 1488);
        assert_eq!((old.iteration_tokens.count(), old.iteration_tokens.sum()), (2, 3002.0));
    }

    #[test]
    fn prompt_tokens_count_each_request_once_however_often_it_is_preempted_or_retracted() {
        // 64 requests of 512 in / 512 out at once into a 10,240-token pool: both engines
        // preempt (vLLM) or retract (SGLang) many times over. The audit's SGLang run showed
        // 116,986 prompt tokens for 201 × 512 = 102,912.
        let n = 64u64;
        for name in ["kv-starved-qwen2.5-7b-a100-vllm", "kv-starved-qwen2.5-7b-a100-sglang"] {
            let s = spec(name, serde_json::json!({}));
            let sglang = crate::is_sglang(&s);
            let mut first = true;
            let st = serve(&s, (0..n).map(|i| request(i + 1, 512, 512)).collect(), |_, _, st| {
                if std::mem::take(&mut first) {
                    // At the first token: SGLang moves its counters when a request finishes,
                    // vLLM with each token.
                    if sglang {
                        assert_eq!((st.prompt_tokens, st.generation_tokens, st.finished_requests), (0, 0, 0));
                    } else {
                        assert!(st.prompt_tokens >= 512 && st.generation_tokens >= 1);
                    }
                }
                false
            });
            assert!(st.preemptions > 0, "{name}: no preemption");
            assert_eq!(st.prompt_tokens, n * 512, "{name}");
            assert_eq!(st.generation_tokens, n * 512, "{name}");
            assert_eq!(st.finished_length, n, "{name}");
            assert_eq!(st.e2e.count(), n, "{name}");
            if sglang {
                assert_eq!((st.finished_requests, st.aborted), (n, 0), "{name}");
            }
        }
    }

    #[test]
    fn a_client_abort_is_no_finished_request_in_vllm_and_an_aborted_one_in_sglang() {
        for name in ["serve-small-vllm", "kv-starved-qwen2.5-7b-a100-sglang"] {
            let s = spec(name, serde_json::json!({}));
            // Request 0 is aborted after its 5th token; request 1 runs to its end.
            let st = serve(&s, vec![request(1, 64, 100), request(2, 64, 8)], |i, k, _| i == 0 && k == 5);
            assert_eq!((st.running, st.waiting), (0, 0), "{name}: the aborted request was freed");
            assert_eq!(st.finished_length, 1, "{name}");
            assert_eq!(st.finished_stop, 0, "{name}");
            assert_eq!(st.ttft.count(), 2, "{name}");
            if crate::is_sglang(&s) {
                // The running request is finished with FINISH_ABORT after one more decode and
                // counted as finished; the abort itself too.
                assert_eq!(st.aborted, 1, "{name}");
                assert_eq!(st.finished_requests, 2, "{name}");
                assert_eq!(st.prompt_tokens, 128, "{name}");
                // The tokens it had when the abort came (the 5th seen, a later one may have been
                // computed and not yet streamed) and the one of the finishing decode.
                assert!((8 + 5 + 1..=8 + 7 + 1).contains(&st.generation_tokens), "{name}: {}", st.generation_tokens);
                assert_eq!(st.e2e.count(), 2, "{name}");
            } else {
                // vLLM drops an aborted request's state: no success, no e2e latency.
                assert_eq!(st.e2e.count(), 1, "{name}");
                assert_eq!(st.prompt_tokens, 128, "{name}: both had their first token");
                assert!(st.generation_tokens >= 8 + 5, "{name}");
                let text = crate::metrics::render(&s, "m", &st);
                assert!(
                    text.contains(
                        "vllm:request_success_total{engine=\"0\",model_name=\"m\",finished_reason=\"abort\"} 0.0"
                    ),
                    "{text}"
                );
            }
        }
    }

    /// A virtual clock that wakes the driver `late_ns` after each time it asked for, as a
    /// busy host's wall clock does.
    struct LateClock {
        inner: VirtualClock,
        late_ns: u64,
    }

    impl Clock for LateClock {
        fn now_ns(&self) -> u64 {
            self.inner.now_ns()
        }
        fn wait(&self, inbox: &Inbox, until: Option<u64>) -> Result<Option<Input>, Closed> {
            self.inner.wait(inbox, until.map(|t| t + self.late_ns))
        }
        fn hold(&self) {
            self.inner.hold()
        }
        fn release(&self) {
            self.inner.release()
        }
    }

    #[test]
    fn a_late_wake_keeps_simulates_event_order() {
        // 64 text prompts through SGLang's tokenizer queue (about 1 ms apart) into a
        // retracting engine whose steps are a few ms, so that arrivals and step ends
        // interleave. Waking 10 ms late (within the slack), the driver still admits the requests
        // that cleared ingress during a step before that step's end and plans the next step
        // at the step's end without those that came after it: every step, and so every
        // request's engine-time TTFT and latency, is the on-time run's. It used to admit one
        // request after the step's end and start the step at its arrival.
        let cost = serde_json::json!({"coefficients": {"step_us": 2000, "per_seq_us": 4, "prefill_token_us": 2,
            "decode_token_us": 20, "prefill_attention_us": 0.0, "decode_kv_us": 0.01, "request_ingress_us": 1500,
            "output_token_us": 40}});
        let s = spec_costed("kv-starved-qwen2.5-7b-a100-sglang", serde_json::json!({}), Some(cost));
        let reqs = || (0..64).map(|i| request(i + 1, 1024, 512)).collect::<Vec<_>>();
        let on_time = serve_on(&s, reqs(), Arc::new(VirtualClock::new()), 0, false, 1.0, |_, _, _| false);
        let late = LateClock { inner: VirtualClock::new(), late_ns: 10_000_000 };
        let late = serve_on(&s, reqs(), Arc::new(late), 1_000_000_000, false, 1.0, |_, _, _| false);
        assert_eq!(on_time.ttft.count(), 64);
        assert_eq!((late.ttft.count(), late.e2e.count()), (64, 64));
        assert!(on_time.preemptions > 0);
        assert_eq!(late.preemptions, on_time.preemptions);
        assert_eq!(late.ttft.sum(), on_time.ttft.sum());
        assert_eq!(late.e2e.sum(), on_time.e2e.sum());
        assert_eq!(late.itl.sum(), on_time.itl.sum());
    }

    /// `n` requests of 512 in / 512 out whose first 256 prompt tokens are the same.
    fn sharing_a_prefix(n: u64) -> Vec<RequestSpec> {
        (0..n)
            .map(|i| {
                let mut r = request(i + 1, 512, 512);
                for (k, seg) in r.prompt.iter_mut().take(256).enumerate() {
                    seg.key = k as u64;
                }
                r
            })
            .collect()
    }

    #[test]
    fn sglang_cached_tokens_are_counted_when_a_request_finishes_by_its_releases_rule() {
        // 64 requests into a 10,240-token pool: later admissions find the shared 256-token
        // prefix, and retracted requests are admitted again, finding their own tokens.
        // Through 0.5.5 a re-admission's prefix adds to the request's `cached_tokens`; from
        // 0.5.6 only the first admission's does. Both releases schedule alike here (no
        // behaviour of the scheduler changes between them), so the lookups are the same.
        let run = |version: &str| {
            let s = spec("kv-starved-qwen2.5-7b-a100-sglang", serde_json::json!({"version": version}));
            let mut hits_before_a_finish = 0;
            let st = serve(&s, sharing_a_prefix(64), |_, _, st| {
                let text = crate::metrics::render(&s, "m", st);
                let counted = text
                    .lines()
                    .find_map(|l| l.strip_prefix("sglang:cached_tokens_total{model_name=\"m\",tp_rank=\"0\"} "))
                    .map(|v| v.parse::<f64>().unwrap())
                    .expect("the counter is rendered");
                if st.finished_requests == 0 {
                    // Nothing finished: nothing counted, however many tokens were found cached.
                    assert_eq!(counted, 0.0, "{version}: counted before any request finished");
                    hits_before_a_finish = hits_before_a_finish.max(st.prefix_hits);
                }
                assert_eq!(counted, st.cached_tokens as f64);
                false
            });
            assert!(hits_before_a_finish > 0, "{version}: no prefix was found before the first finish");
            assert!(st.preemptions > 0, "{version}: no retraction");
            assert_eq!(st.finished_requests, 64);
            st
        };
        let old = run("0.5.5");
        let new = run("0.5.6");
        assert_eq!(old.prefix_hits, new.prefix_hits, "the releases schedule alike");
        // Through 0.5.5 every admission's prefix is counted: the engine's lookups, all of them,
        // attributed request by request (each admission's tokens held less its recompute).
        assert_eq!(old.cached_tokens, old.prefix_hits);
        // From 0.5.6 only the first admissions: at most the shared prefix each (the rest of a
        // prompt is its own), and less than the lookups, which count the re-admissions.
        assert!(new.cached_tokens > 0 && new.cached_tokens <= 64 * 256, "{}", new.cached_tokens);
        assert!(new.cached_tokens < new.prefix_hits, "{} vs {}", new.cached_tokens, new.prefix_hits);
    }

    #[test]
    fn latency_histograms_are_in_the_time_the_client_sees_under_a_time_scale() {
        // The same run at --time-scale 1 and 4: engine time is the same, the client's (wall)
        // time a quarter of it, and the histograms follow the client.
        let s = spec("serve-small-vllm", serde_json::json!({}));
        let reqs = || vec![request(1, 600, 16), request(2, 300, 8)];
        let at = |k: f64| serve_on(&s, reqs(), Arc::new(VirtualClock::new()), 0, true, k, |_, _, _| false);
        let (one, four) = (at(1.0), at(4.0));
        for (name, a, b) in
            [("ttft", &one.ttft, &four.ttft), ("itl", &one.itl, &four.itl), ("e2e", &one.e2e, &four.e2e)]
        {
            assert_eq!(a.count(), b.count(), "{name}");
            assert!(a.sum() > 0.0, "{name}");
            assert!((b.sum() * 4.0 - a.sum()).abs() <= 1e-9 * a.sum(), "{name}: {} at 4 vs {} at 1", b.sum(), a.sum());
        }
    }

    /// `r` twice on one server, the second sent once the first has finished.
    fn serve_two_in_turn(spec: &SimSpec, r: RequestSpec) -> Stats {
        let clock = Arc::new(VirtualClock::new());
        let stats = Arc::new(Mutex::new(Stats::new(crate::is_sglang(spec))));
        let (tx, inbox) = channel();
        let engine = sim::engine::build(&spec.engine);
        let front = sim::delivery::FrontEnd::new(spec.cost.ingress_ns(), spec.cost.output_token_ns());
        let setup = DriverSetup {
            engine,
            cost: spec.cost.clone(),
            front,
            stats: stats.clone(),
            clock: clock.clone(),
            slack_ns: 0,
            sglang: crate::is_sglang(spec),
            iteration_prompt: IterationPrompt::of(spec),
            cached_on_readmission: cached_on_readmission(spec),
            time_scale: 1.0,
        };
        let driver = std::thread::spawn(move || run(setup, inbox));
        for key in 0..2u64 {
            let (t, mut rx) = unbounded_channel();
            let nr = NewRequest {
                key,
                spec: r.clone(),
                tokens: t,
                arrived_ns: clock.now_ns(),
                chat: false,
                token_ids: true,
            };
            tx.send(Input(Msg::Add(nr))).unwrap();
            if key > 0 {
                // The last token of the request before, released once this one is sent.
                clock.release();
            }
            loop {
                let ev = rx.blocking_recv().expect("a token");
                if ev.finished {
                    break;
                }
                clock.release();
            }
        }
        clock.release();
        tx.send(Input(Msg::Shutdown)).unwrap();
        driver.join().unwrap();
        let st = std::mem::take(&mut *stats.lock().unwrap());
        st
    }
}
