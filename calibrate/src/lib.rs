//! # servesim's live side
//!
//! The only crate that talks to the network. It measures real engines the
//! way `vllm bench serve` does and turns what it measured into the
//! simulator's shapes, so that one piece of code computes the metrics of
//! both the live and the simulated side.
//!
//! * [`client`]: one streaming completion, timed (TTFT, ITL per chunk, latency, usage).
//! * [`bench`]: the load generator (phases, semaphore, send times, per-request JSONL, Ctrl-C).
//! * [`server`]: what a server says about itself (engine, version, KV capacity, limits).
//! * [`prom`]: Prometheus text parsing.
//! * [`manifest`]: run records and their diff.
//! * [`fit`]: fitting the cost model to measurements.
//!
//! **Architecture invariant:** API keys never leave memory: they are sent in
//! request headers and written nowhere.

pub mod bench;
pub mod client;
pub mod fit;
pub mod manifest;
pub mod prom;
pub mod serve;
pub mod server;
