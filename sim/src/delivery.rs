//! The delivery model: what happens to a request outside the engine, between
//! the client and the scheduler, in one place for the simulation loop
//! ([`crate::simulation`]) and for `servesim serve`'s wall-clock driver.
//! Pure: times are integer nanoseconds of engine time, passed in.
//!
//! * **Ingress.** A request reaches the scheduler's waiting queue a fixed
//!   `request_ingress_us` after the client sent it (HTTP, parsing, tokenisation).
//! * **Output lag** ([`crate::engine::Engine::output_lag`], SGLang's overlap
//!   scheduler): a step's tokens are streamed at the next step's end; a
//!   request's last token, and the tokens of a step nothing follows, at once.
//! * **Streaming queue.** The front end (detokenise, stream) is a single server:
//!   each step's tokens go out after those already queued, `output_token_us`
//!   apiece; they delay the tokens, not the engine's next step.
//!
//! Additions to time are checked: `None` means simulated time would pass
//! `u64::MAX` nanoseconds.

use crate::engine::TokenOutput;

/// The front end: ingress and the single-server output streaming queue.
#[derive(Clone, Debug)]
pub struct FrontEnd {
    pub ingress_ns: u64,
    pub per_token_ns: u64,
    busy_until: u64,
}

impl FrontEnd {
    pub fn new(ingress_ns: u64, per_token_ns: u64) -> FrontEnd {
        FrontEnd { ingress_ns, per_token_ns, busy_until: 0 }
    }

    /// When a request sent at `sent_ns` reaches the scheduler.
    pub fn arrival(&self, sent_ns: u64) -> Option<u64> {
        sent_ns.checked_add(self.ingress_ns)
    }

    /// Streams `n` (≥ 1) tokens produced at `now_ns`, after those already queued: when the
    /// client receives them (all of the batch at once, as the loop has always modelled it).
    pub fn stream(&mut self, now_ns: u64, n: usize) -> Option<u64> {
        let start = now_ns.max(self.busy_until);
        let cost = self.per_token_ns.checked_mul(n as u64).unwrap_or(u64::MAX);
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
