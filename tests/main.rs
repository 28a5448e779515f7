//! End-to-end tests: one integration-test binary, one module per behaviour.
//!
//! Tests are scenario-in, report-out where they can be, so that a rewrite of
//! the engine internals keeps the suite.

mod common;

mod bad_input;
mod calibration;
mod calibration_results_checks;
mod cli;
mod determinism;
mod explain_cli;
mod fleet_cli;
mod golden;
mod goodput;
mod held_out;
mod input_tokens;
mod intervals;
mod live_faults;
mod live_records;
mod moe_refusals;
mod no_silent_wrong_answer;
mod notebooks;
mod output_keys;
mod pd;
mod plan_cli;
mod serve;
mod sweep_cli;
mod validate;
mod web;
