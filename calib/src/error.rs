//! What can go wrong in a calibration or a check.

use thiserror::Error;

/// Why a measurement could not be taken (from a [`crate::Measure`]).
#[derive(Debug, Error, Clone, PartialEq)]
pub enum MeasureError {
    /// The user stopped the run (Ctrl-C).
    #[error("interrupted")]
    Interrupted,
    /// Every request of a warm-up failed: the server is not answering.
    #[error("warm-up: every request failed; is the server answering?")]
    ServerNotAnswering,
    /// Writing a run's files failed.
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    /// The run's initial test request failed (`vllm bench serve` stops there too).
    #[error("Initial test run failed - please make sure the benchmark arguments are correctly specified: {0}")]
    InitialTestFailed(String),
}

/// Why a calibration or a check failed.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CalibError {
    #[error(transparent)]
    Measure(#[from] MeasureError),
    /// A scenario could not be built or resolved (the message names the field).
    #[error("{0}")]
    Scenario(String),
    /// What the server reports does not allow the procedure (the flag to give, and why).
    #[error("{flag}: {message}")]
    Server { flag: &'static str, message: String },
    /// A probe had failed requests.
    #[error("probe {name}: {failed} requests failed (see {requests})")]
    ProbeFailed { name: String, failed: usize, requests: String },
    /// Bad input to the procedure (the flag, and what was expected).
    #[error("{flag}: {message}")]
    Input { flag: &'static str, message: String },
}

pub type Result<T> = std::result::Result<T, CalibError>;
