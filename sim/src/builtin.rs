//! The model and GPU cards of `models/` and the shipped scenarios, embedded
//! at compile time (no IO at run time), so that the binary, the tests, the
//! benches and the browser build all read the same cards.

use crate::cards::{GpuCard, ModelCard};
use crate::config::Resources;

macro_rules! files {
    ($dir:literal: $($id:literal),* $(,)?) => {
        &[$(($id, include_str!(concat!("../../", $dir, "/", $id, ".json")))),*]
    };
}

/// Every model card, as `(id, JSON text)`. A new card is added here and in `models/model/`.
pub const MODELS: &[(&str, &str)] = files!("models/model":
    "qwen2.5-7b-instruct",
    "qwen2-7b-instruct",
    "llama-3.1-8b-instruct",
    "llama-3-8b-instruct",
    "llama-3.2-3b-instruct",
    "llama-3.1-70b-instruct",
    "llama-3.1-70b-instruct-fp8",
    "llama-3.3-70b-instruct",
    "llama-3.3-70b-instruct-fp8",
    "mistral-7b-instruct-v0.3",
    "qwen3-4b",
    "qwen3-8b",
    "qwen3-14b",
    "qwen3-32b",
    "qwen2.5-3b-instruct",
    "qwen2.5-14b-instruct",
    "qwen2.5-32b",
    "qwen2.5-72b-instruct",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b-fp8",
);

/// Every GPU card, as `(id, JSON text)`.
pub const GPUS: &[(&str, &str)] = files!("models/gpu": "rtx-5090", "a100-80gb", "a100-40gb", "h100-80gb", "h100-pcie", "h100-nvl", "h200", "b200", "rtx-pro-6000", "l40s", "rtx-4090", "cpu-host");

/// The shipped scenarios, as `(file name, JSON text)`; the first is the built-in default.
pub const SCENARIOS: &[(&str, &str)] = files!("scenarios":
    "rtx5090-qwen2.5-7b-vllm",
    "rtx5090-qwen2.5-7b-sglang",
    "kv-starved-qwen2.5-7b-a100-vllm",
    "kv-starved-qwen2.5-7b-a100-sglang",
    "long-prefill-itl-llama3.1-8b-h100-vllm",
    "long-prefill-itl-llama3.1-8b-h100-sglang",
    "shared-prefix-llama3.1-8b-h100-vllm",
    "shared-prefix-lpm-llama3.1-8b-h100-sglang",
    "serve-small-vllm",
    "b200-llama3.1-70b-fp8-vllm",
);

/// The built-in default scenario (JSON text).
pub const DEFAULT_SCENARIO: &str = SCENARIOS[0].1;

fn parse<T: serde::de::DeserializeOwned>(dir: &str, (id, text): &(&str, &str)) -> Result<T, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("{dir}/{id}.json: {e}"))?;
    crate::config::from_value::<T>(v, "").map_err(|e| format!("{dir}/{id}.json: {e}"))
}

/// Every built-in model card. A malformed card is a build defect, caught by the tests.
pub fn models() -> Result<Vec<ModelCard>, String> {
    MODELS.iter().map(|c| parse("models/model", c)).collect()
}

/// Every built-in GPU card.
pub fn gpus() -> Result<Vec<GpuCard>, String> {
    GPUS.iter().map(|c| parse("models/gpu", c)).collect()
}

/// Every built-in GPU card, parsed once.
pub fn gpu_cards() -> &'static [GpuCard] {
    static GPU_CARDS: std::sync::OnceLock<Vec<GpuCard>> = std::sync::OnceLock::new();
    GPU_CARDS.get_or_init(|| gpus().unwrap_or_default())
}

/// The built-in GPU card `id`, parsed once (for the checks that compare a run's card with it
/// at every report).
pub fn gpu(id: &str) -> Option<&'static GpuCard> {
    gpu_cards().iter().find(|g| g.id == id)
}

/// Whether `card` is the built-in GPU card of its id (its memory aside: under WSL2 the device
/// total is nvidia-smi's, `config::card_on_host`). An inline card reusing a built-in id with
/// other figures is another GPU: no published run judged it, and its id's kernel tables did not
/// measure it.
pub fn gpu_is_builtin(card: &GpuCard) -> bool {
    gpu(&card.id).is_some_and(|c| {
        let mut g = card.clone();
        g.memory_bytes = c.memory_bytes;
        *c == g
    })
}

/// The built-in model card `id`, parsed once (for the check that a run's card is the judged one).
pub fn model(id: &str) -> Option<&'static ModelCard> {
    static MODEL_CARDS: std::sync::OnceLock<Vec<ModelCard>> = std::sync::OnceLock::new();
    MODEL_CARDS.get_or_init(|| models().unwrap_or_default()).iter().find(|m| m.id == id)
}

/// The built-in cards as resources for [`crate::config::resolve`] (no profile, no trace).
pub fn resources() -> Result<Resources, String> {
    Ok(Resources { models: models()?, gpus: gpus()?, ..Default::default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_card_parses_and_ids_match_file_names() {
        for (id, c) in MODELS.iter().zip(models().unwrap()) {
            assert_eq!(id.0, c.id);
        }
        for (id, c) in GPUS.iter().zip(gpus().unwrap()) {
            assert_eq!(id.0, c.id);
        }
    }

    #[test]
    fn every_file_in_models_and_scenarios_is_built_in() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for (dir, list) in [("models/model", MODELS), ("models/gpu", GPUS), ("scenarios", SCENARIOS)] {
            let mut on_disk: Vec<String> = std::fs::read_dir(root.join(dir))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .map(|p| p.file_stem().unwrap().to_string_lossy().to_string())
                .collect();
            on_disk.sort();
            let mut built: Vec<String> = list.iter().map(|(id, _)| id.to_string()).collect();
            built.sort();
            assert_eq!(on_disk, built, "{dir}: every file must be listed in sim/src/builtin.rs");
        }
    }
}
