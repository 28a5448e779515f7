//! Fleets: several engine replicas behind a router (issue #14).
//!
//! This module holds the pieces of a fleet that do not depend on the event
//! loop: the [`Router`] trait and the routing policies as the deployed routers
//! decide ([`router`]), one file per router they follow. The loop integration
//! (one seeded event loop over several engines) builds on them.
//!
//! Invariants, as everywhere in `sim`: no IO, no clock, no threads; routers
//! that draw random numbers own a named stream ([`crate::rng::stream`]); no
//! decision iterates a hash map (the routers' hash maps are only looked up;
//! orderings use `BTreeSet`s or vectors in replica order).
//!
//! Which router follows which source, with its parameters and defaults, is
//! written up in `docs/routers.md`.

pub mod blocks;
pub mod dp;
pub mod dynamo;
pub mod limits;
pub mod llmd;
pub mod production_stack;
pub mod router;
pub mod run;
pub mod sglang;

pub use limits::{replica_limits, FleetLimits, ReplicaLimit};
pub use router::{KvUsage, LeastOutstanding, PowerOfTwo, ReplicaView, RoundRobin, RouteRequest, Router, RouterSpec};
pub use run::{run_fleet, FleetRun, ReplicaRun};
