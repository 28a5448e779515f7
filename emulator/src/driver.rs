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
}

/// Runs until shutdown or until every sender is gone.
pub(crate) fn run(setup: DriverSetup, inbox: Inbox) {
    let DriverSetup { mut engine, cost, mut front, stats, clock, slack_ns } = setup;
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
        let events: Vec<Delivery> = outs
            .iter()
            .filter_map(|o| live.get(&o.id).map(|l| (l.tx.clone(), TokenEvent { finished: o.finished, stop: l.stop })))
            .collect();
        if !events.is_empty() {
            let when = front.stream(at, events.len()).unwrap_or(u64::MAX);
            out_queue.push_back((when, events));
        }
    };
    loop {
        let now = clock.now_ns();
        while out_queue.front().is_some_and(|d| d.0 <= now) {
            let (_, events) = out_queue.pop_front().expect("front");
            deliver(&clock, events);
        }
        if let Some((end, shape)) = step.filter(|s| s.0 <= now) {
            step = None;
            cursor = end;
            outs.clear();
            engine.finish_step(&mut outs);
            {
                let mut st = stats.lock().expect("stats");
                st.iteration_tokens.observe(shape.total_tokens() as f64);
                for o in &outs {
                    let Some(l) = live.get_mut(&o.id) else { continue };
                    let since = |t: u64| end.saturating_sub(t) as f64 / 1e9;
                    match l.last_ns {
                        None => {
                            st.ttft.observe(since(l.arrived_ns));
                            st.prompt_tokens += u64::from(l.prompt_len);
                        }
                        Some(prev) => st.itl.observe(since(prev)),
                    }
                    l.last_ns = Some(end);
                    st.generation_tokens += 1;
                }
                for o in outs.iter().filter(|o| o.finished) {
                    if let Some(l) = live.get(&o.id) {
                        st.e2e.observe(end.saturating_sub(l.arrived_ns) as f64 / 1e9);
                        if l.stop {
                            st.finished_stop += 1;
                        } else {
                            st.finished_length += 1;
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
            let (ready, r) = ingress.pop_front().expect("front");
            cursor = cursor.max(ready);
            let id = next;
            next += 1;
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
                },
            );
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
                    live.remove(&id);
                    held.retain(|o| o.id != id);
                    stats.lock().expect("stats").finished_abort += 1;
                }
            }
            let (busy, shape) = {
                let plan = engine.schedule();
                (!plan.is_empty(), plan.shape)
            };
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
                front.serial_ns_per_request = engine.front_end_ns_per_request(r.chat);
                let tokens = if r.token_ids { 0 } else { r.spec.prompt_len };
                let ready = front.arrival_tokenized(r.arrived_ns, tokens).unwrap_or(u64::MAX);
                ingress.push_back((ready, r));
            }
            Ok(Some(Input(Msg::Abort(key)))) => {
                if let Some(i) = ingress.iter().position(|r| r.1.key == key) {
                    ingress.remove(i);
                    stats.lock().expect("stats").finished_abort += 1;
                } else if live.values().any(|l| l.key == key) {
                    aborts.push(key);
                }
            }
            // Dropping the streams' senders ends them: each handler says so to its client.
            Ok(Some(Input(Msg::Shutdown))) | Err(Closed) => return,
        }
    }
}
