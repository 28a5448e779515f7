//! End-to-end tests: one integration-test binary, one module per behaviour.
//!
//! Tests are scenario-in, report-out where they can be, so that a rewrite of
//! the engine internals keeps the suite.

mod common;

mod analytic;
mod bad_input;
mod block_pool_props;
mod calibration;
mod cli;
mod determinism;
mod fast_forward;
mod golden;
mod invariants;
mod live_faults;
mod no_silent_wrong_answer;
mod notebooks;
mod radix_props;
mod serve;
mod sglang_semantics;
mod validate;
mod vllm_semantics;
mod web;
