//! # servesim's calibration and check procedures
//!
//! Pure: no network, no clock, no files. The procedures measure an engine
//! through the [`Measure`] trait (a live server in `live::measure`, the
//! simulator in [`SimMeasure`]) and build scenarios through a function the
//! caller gives (the binary resolves them against the cards on disk).
//!
//! * [`plan`]: the probe plan, the free coefficients, the speed reference, the seed spaces.
//! * [`procedure`]: `calibrate`, `calibrate --from-results`, `check`.
//! * [`fit`]: the cost fit (Nelder–Mead over simulations, variable projection, step-log least squares).
//! * [`check`]: how a check judges a point, and the typed [`CheckReport`].
//! * [`profile`]: the typed [`Profile`].
//! * [`derive`](mod@derive): a live server described as a scenario (model card, engine flags).
//! * [`results`]: existing result files (`--from-results`).
//! * [`server_info`]: what a server reports about itself, as data.

pub mod check;
pub mod derive;
pub mod error;
pub mod fit;
pub mod identify;
pub mod measure;
pub mod named;
pub mod plan;
pub mod procedure;
pub mod profile;
pub mod results;
pub mod server_info;
pub mod traps;
pub mod uncertainty;

pub use check::CheckReport;
pub use error::{CalibError, MeasureError};
pub use measure::{Measure, Measurement, Point, RepeatedPoint, Run, SimMeasure};
pub use profile::Profile;
pub use server_info::ServerInfo;
