//! The delivery model: what happens to a request outside the engine, between
//! the client and the scheduler, in one place for the simulation loop
//! ([`crate::simulation`]) and for `servesim serve`'s wall-clock driver.
//! Pure: times are integer nanoseconds of engine time, passed in.
//!
//! * **Ingress.** A request reaches the scheduler's waiting queue a fixed
//!   `request_ingress_us` after the client sent it (HTTP, parsing, tokenisation).
//!   Where the engine's front end tokenizes in one process, one request after the
//!   other ([`crate::engine::Engine::tokenizer_ns_per_prompt_token`]: SGLang's
//!   `TokenizerManager`), the prompt's tokenisation is also a single-server FIFO
//!   queue ([`FrontEnd::arrival_tokenized`]): a request waits for those sent before
//!   it, so a burst of N requests reaches the scheduler spread out, not at once.
//!   The same queue carries a fixed serial cost per request where the engine's API
//!   loop has one ([`crate::engine::Engine::front_end_ns_per_request`]: vLLM 0.11.0's
//!   chat-template parse on every chat request, `docs/front-end.md`).
//! * **Output lag** ([`crate::engine::Engine::output_lag`], SGLang's overlap
//!   scheduler): a step's tokens are streamed at the next step's end; a
//!   request's last token, and the tokens of a step nothing follows, at once.
//! * **Streaming queue.** The front end (detokenise, stream) is a single server:
//!   each step's tokens go out after those already queued, `output_token_us`
//!   apiece; they delay the tokens, not the engine's next step.
//!
//! Additions to time are checked: `None` means simulated time would pass
//! `u64::MAX` nanoseconds.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::engine::ReqId;
use crate::engine::TokenOutput;

/// A phase's client sends, `(time, sequence, request)` in `(time, sequence)` order, kept
/// beside a loop's event heap and merged with it in that order (the simulation loop's and the
/// fleet loop's: `simulation`'s module docs, "Event order"): a phase's sends are all known
/// when it starts, so they are sorted once instead of pushed through the heap.
#[derive(Debug, Default)]
pub(crate) struct ClientSends {
    sends: Vec<(u64, u64, ReqId)>,
    next: usize,
}

impl ClientSends {
    /// Starts a phase: the last one's sends are all out.
    pub fn begin(&mut self) {
        debug_assert!(self.next == self.sends.len(), "the last phase sent everything");
        self.sends.clear();
        self.next = 0;
    }

    pub fn push(&mut self, t: u64, seq: u64, id: ReqId) {
        self.sends.push((t, seq, id));
    }

    /// Orders the phase's sends (already in order when arrivals are: a linear pass then).
    pub fn sort(&mut self) {
        self.sends.sort_unstable();
    }

    /// The next event in `(time, sequence)` order: the next send (as `send(id)`) or the heap's
    /// first.
    #[inline]
    pub fn pop_event<E: Ord>(
        &mut self,
        heap: &mut BinaryHeap<Reverse<(u64, u64, E)>>,
        send: impl FnOnce(ReqId) -> E,
    ) -> Option<(u64, E)> {
        match (self.sends.get(self.next).copied(), heap.peek()) {
            (Some((t, s, id)), Some(Reverse((ht, hs, _)))) if (t, s) < (*ht, *hs) => {
                self.next += 1;
                Some((t, send(id)))
            }
            (Some((t, _, id)), None) => {
                self.next += 1;
                Some((t, send(id)))
            }
            _ => heap.pop().map(|Reverse((t, _, ev))| (t, ev)),
        }
    }

    /// The next send `(time, sequence, request)`, not taken.
    #[inline]
    pub fn peek(&self) -> Option<(u64, u64, ReqId)> {
        self.sends.get(self.next).copied()
    }

    /// Takes the next send (after [`ClientSends::peek`]).
    #[inline]
    pub fn advance(&mut self) {
        self.next += 1;
    }

    /// The time of the next event (`u64::MAX` if none).
    #[inline]
    pub fn next_event_time<E: Ord>(&self, heap: &BinaryHeap<Reverse<(u64, u64, E)>>) -> u64 {
        let send = self.sends.get(self.next).map_or(u64::MAX, |&(t, _, _)| t);
        send.min(heap.peek().map_or(u64::MAX, |Reverse((t, _, _))| *t))
    }
}

/// The front end: ingress, the serial tokenizer (where the engine has one) and the
/// single-server output streaming queue.
#[derive(Clone, Debug)]
pub struct FrontEnd {
    pub ingress_ns: u64,
    pub per_token_ns: u64,
    busy_until: u64,
    /// Tokenisation time per prompt token of a serial tokenizer (0: none).
    pub tokenize_ns_per_token: u64,
    /// A fixed time per request on the same serial queue (0: none).
    pub serial_ns_per_request: u64,
    /// When the serial tokenizer has finished the requests given to it so far.
    tokenizer_busy_until: u64,
}

impl FrontEnd {
    pub fn new(ingress_ns: u64, per_token_ns: u64) -> FrontEnd {
        FrontEnd {
            ingress_ns,
            per_token_ns,
            busy_until: 0,
            tokenize_ns_per_token: 0,
            serial_ns_per_request: 0,
            tokenizer_busy_until: 0,
        }
    }

    /// The same front end with a serial tokenizer taking `ns_per_token` a prompt token
    /// ([`FrontEnd::arrival_tokenized`]); 0 leaves ingress a fixed delay.
    pub fn with_serial_tokenizer(mut self, ns_per_token: u64) -> FrontEnd {
        self.tokenize_ns_per_token = ns_per_token;
        self
    }

    /// The same front end with `ns` of serial work per request on the tokenizer's queue
    /// ([`FrontEnd::arrival_tokenized`]); 0: none.
    pub fn with_serial_request_cost(mut self, ns: u64) -> FrontEnd {
        self.serial_ns_per_request = ns;
        self
    }

    /// When a request sent at `sent_ns` reaches the scheduler.
    pub fn arrival(&self, sent_ns: u64) -> Option<u64> {
        sent_ns.checked_add(self.ingress_ns)
    }

    /// When a request of `prompt_tokens` sent at `sent_ns` reaches the scheduler, through the
    /// serial tokenizer: it is tokenized after the fixed ingress (the HTTP request is read
    /// first) and after every request handed to the tokenizer before it, taking
    /// `tokenize_ns_per_token` a prompt token. Calls must come in send order (the loop's
    /// event order). Without a serial tokenizer this is [`FrontEnd::arrival`].
    pub fn arrival_tokenized(&mut self, sent_ns: u64, prompt_tokens: u32) -> Option<u64> {
        let ready = self.arrival(sent_ns)?;
        if self.tokenize_ns_per_token == 0 && self.serial_ns_per_request == 0 {
            return Some(ready);
        }
        let start = ready.max(self.tokenizer_busy_until);
        let work = self
            .tokenize_ns_per_token
            .checked_mul(u64::from(prompt_tokens))?
            .checked_add(self.serial_ns_per_request)?;
        let done = start.checked_add(work)?;
        self.tokenizer_busy_until = done;
        Some(done)
    }

    /// Streams `n` (≥ 1) tokens produced at `now_ns`, after those already queued: when the
    /// client receives them (all of the batch at once, as the loop has always modelled it).
    pub fn stream(&mut self, now_ns: u64, n: usize) -> Option<u64> {
        let start = now_ns.max(self.busy_until);
        let cost = self.per_token_ns.saturating_mul(n as u64);
        let deliver = start.checked_add(cost)?;
        self.busy_until = deliver;
        Some(deliver)
    }
}

/// At the end of a step of an engine with output lag: `outs` (the step's tokens) becomes
/// what goes out now (the tokens `held` from the step before, then this step's last
/// tokens) and `later` gets this step's other tokens, held for the next step's end.
/// Returns the spare buffer (empty), so that a step allocates nothing.
pub fn split_lagged(
    held: &mut Vec<TokenOutput>,
    outs: &mut Vec<TokenOutput>,
    later: &mut Vec<TokenOutput>,
) -> Vec<TokenOutput> {
    let mut now_out = std::mem::take(held);
    for o in outs.drain(..) {
        if o.finished {
            now_out.push(o);
        } else {
            later.push(o);
        }
    }
    std::mem::swap(outs, &mut now_out);
    now_out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_streaming_queue_is_a_single_server() {
        let mut f = FrontEnd::new(1_500, 100);
        assert_eq!(f.arrival(10), Some(1_510));
        assert_eq!(f.stream(1_000, 3), Some(1_300));
        // Produced before the queue is free: after it.
        assert_eq!(f.stream(1_200, 2), Some(1_500));
        assert_eq!(f.stream(2_000, 1), Some(2_100));
        assert_eq!(f.stream(u64::MAX - 10, 1), None);
    }

    #[test]
    fn the_serial_tokenizer_is_a_single_server_after_the_fixed_ingress() {
        let mut f = FrontEnd::new(1_000, 0).with_serial_tokenizer(2);
        // A burst of three: each waits for the ones before it.
        assert_eq!(f.arrival_tokenized(0, 100), Some(1_200));
        assert_eq!(f.arrival_tokenized(0, 50), Some(1_300));
        assert_eq!(f.arrival_tokenized(0, 100), Some(1_500));
        // Sent after the tokenizer is free: no wait.
        assert_eq!(f.arrival_tokenized(10_000, 10), Some(11_020));
        assert_eq!(f.arrival_tokenized(u64::MAX - 10, 1), None);
        // Without a serial tokenizer: the fixed delay.
        let mut g = FrontEnd::new(1_000, 0);
        assert_eq!(g.arrival_tokenized(5, 1_000_000), Some(1_005));
    }

    #[test]
    fn lagged_tokens_wait_for_the_next_step_but_last_tokens_do_not() {
        let t = |id, finished| TokenOutput { id, finished };
        let mut held = vec![t(1, false)];
        let mut outs = vec![t(2, false), t(3, true)];
        let mut later = Vec::new();
        let spare = split_lagged(&mut held, &mut outs, &mut later);
        assert_eq!(outs, vec![t(1, false), t(3, true)]);
        assert_eq!(later, vec![t(2, false)]);
        assert!(held.is_empty() && spare.is_empty());
    }
}
