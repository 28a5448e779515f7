//! The model and GPU cards of `models/`, built into the binary so that
//! `servesim simulate` works from any directory.

use sim::cards::{GpuCard, ModelCard};

macro_rules! cards {
    ($dir:literal: $($id:literal),* $(,)?) => {
        &[$(($id, include_str!(concat!("../models/", $dir, "/", $id, ".json")))),*]
    };
}

const MODELS: &[(&str, &str)] = cards!("model":
    "qwen2.5-7b-instruct",
    "qwen2-7b-instruct",
    "llama-3.1-8b-instruct",
    "llama-3-8b-instruct",
    "llama-3.1-70b-instruct",
    "llama-3.3-70b-instruct",
    "qwen3-32b",
    "qwen2.5-32b",
);

const GPUS: &[(&str, &str)] =
    cards!("gpu": "rtx-5090", "a100-80gb", "a100-40gb", "h100-80gb", "h200", "l40s", "cpu-host");

/// Every built-in model card. A malformed card is a build defect, caught by the tests.
pub fn models() -> Result<Vec<ModelCard>, String> {
    MODELS
        .iter()
        .map(|(id, text)| {
            sim::config::from_value::<ModelCard>(
                serde_json::from_str(text).map_err(|e| format!("models/model/{id}.json: {e}"))?,
                "",
            )
            .map_err(|e| format!("models/model/{id}.json: {e}"))
        })
        .collect()
}

/// Every built-in GPU card.
pub fn gpus() -> Result<Vec<GpuCard>, String> {
    GPUS.iter()
        .map(|(id, text)| {
            sim::config::from_value::<GpuCard>(
                serde_json::from_str(text).map_err(|e| format!("models/gpu/{id}.json: {e}"))?,
                "",
            )
            .map_err(|e| format!("models/gpu/{id}.json: {e}"))
        })
        .collect()
}
