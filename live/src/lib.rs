//! # servesim's live side
//!
//! The only crate that sends requests. It measures real engines the way
//! `vllm bench serve` does and turns what it measured into the simulator's
//! shapes, so that one piece of code computes the metrics of both the live
//! and the simulated side.
//!
//! * [`client`]: one streaming completion, timed (TTFT, ITL per chunk, latency, usage); every failure a [`client::Failure`].
//! * [`bench`](mod@bench): the load generator (phases, semaphore, send times, per-request JSONL, Ctrl-C).
//! * [`server`]: asks a server what it is (engine, version, KV capacity, limits) → `calib::ServerInfo`.
//! * [`prom`]: Prometheus text parsing.
//! * [`manifest`]: run records and their diff.
//! * [`tokenizer`]: tokenizer.json files (vocabularies, text prompts).
//! * [`measure`]: `calib::Measure` against a live server.
//!
//! **Architecture invariant:** API keys never leave memory: they are sent in
//! request headers and written nowhere.

pub mod bench;
pub mod client;
pub mod manifest;
pub mod measure;
pub mod prom;
pub mod server;
pub mod tokenizer;
