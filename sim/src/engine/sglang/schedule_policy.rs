//! `schedule_policy.py`: `SchedulePolicy.calc_priority` (the waiting queue's
//! order) and the `PrefillAdder` budgets of one prefill batch.

use serde::{Deserialize, Serialize};

/// `--schedule-policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchedulePolicy {
    /// First come, first served: no sort (the default).
    Fcfs,
    /// Longest prefix match first; falls back to fcfs above 128 waiting.
    Lpm,
    /// Longest output first (`-max_new_tokens`).
    Lof,
    /// Shuffled (seeded).
    Random,
}

/// `WAITING_QUEUE_PREFIX_MATCH_MAX`: above this many waiting requests, lpm is fcfs.
pub const LPM_MAX_WAITING: usize = 128;

/// `IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD` (an environment variable, 32 by default): lpm's
/// in-batch check applies to a waiting request with at most this many tokens cached.
pub const IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD: u32 = 32;

/// `IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD` (32 by default): such a request sharing at
/// least this many tokens with a request before it in the waiting queue is put last.
pub const IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD: u32 = 32;

/// `WAITING_PREFIX_REFRESH_INTERVAL` (0.5.22+): every this many `calc_priority` calls that
/// find requests waiting, the waiting prefixes are refreshed in the LRU.
pub const WAITING_PREFIX_REFRESH_INTERVAL: u64 = 32;

/// `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`.
pub const CLIP_MAX_NEW_TOKENS: u32 = 4096;

/// What `add_one_req` / `budget_state` answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddReqResult {
    Continue,
    /// No KV left: sets `batch_is_full`.
    NoToken,
    /// Another limit (prefill tokens, chunk) ends the batch.
    Other,
}

/// The `PrefillAdder`'s running budgets (tokens).
#[derive(Clone, Debug)]
pub struct PrefillAdder {
    /// free + evictable tokens when the adder was built.
    pub base_available: f64,
    /// Σ running reservations + the batch's own reservations.
    pub rem_total_token_offset: f64,
    /// Σ the batch's extend tokens.
    pub cur_rem_token_offset: f64,
    pub rem_input_tokens: i64,
    /// None when chunked prefill is disabled.
    pub rem_chunk_tokens: Option<i64>,
    pub log_hit_tokens: u64,
    pub log_input_tokens: u64,
    /// ≥ 0.5.11: each admission and chunk also reserves one page (`alloc_extend` may take
    /// an extra page a request), in the total and the current offsets; 0 before.
    pub page_overhead: u32,
}

impl PrefillAdder {
    /// `rem_total_tokens`: what is left after every reservation, given the
    /// evictable size now (locking a prefix shrinks it).
    pub fn rem_total_tokens(&self, available_plus_evictable: f64) -> f64 {
        available_plus_evictable - self.rem_total_token_offset
    }

    pub fn cur_rem_tokens(&self, available_plus_evictable: f64) -> f64 {
        available_plus_evictable - self.cur_rem_token_offset
    }

    /// `_update_prefill_budget`.
    pub fn update_prefill_budget(&mut self, prefix_len: u32, extend: u32, max_new: u32) {
        self.rem_total_token_offset += f64::from(extend) + f64::from(max_new) + f64::from(self.page_overhead);
        self.cur_rem_token_offset += f64::from(extend) + f64::from(self.page_overhead);
        self.rem_input_tokens -= i64::from(extend);
        if let Some(c) = &mut self.rem_chunk_tokens {
            *c -= i64::from(extend);
        }
        self.log_hit_tokens += u64::from(prefix_len);
        self.log_input_tokens += u64::from(extend);
    }

    /// `budget_state`.
    pub fn budget_state(&self, available_plus_evictable: f64) -> AddReqResult {
        if self.rem_total_tokens(available_plus_evictable) <= 0.0
            || self.cur_rem_tokens(available_plus_evictable) <= 0.0
        {
            AddReqResult::NoToken
        } else if self.rem_input_tokens <= 0 || self.rem_chunk_tokens.is_some_and(|c| c <= 0) {
            AddReqResult::Other
        } else {
            AddReqResult::Continue
        }
    }
}
