//! Model and GPU cards: the physical facts the roofline prior and the KV-pool
//! sizing are computed from. The card files live in `models/` (data, with
//! their sources cited); this module only defines their shape.

use serde::{Deserialize, Serialize};

/// A transformer model, as its Hugging Face `config.json` describes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCard {
    pub id: String,
    #[serde(default)]
    pub hf_repo: Option<String>,
    /// Total parameters, embeddings included.
    pub num_parameters: u64,
    pub num_layers: u32,
    pub hidden_size: u32,
    #[serde(default)]
    pub intermediate_size: Option<u32>,
    pub num_attention_heads: u32,
    pub num_kv_heads: u32,
    pub head_dim: u32,
    pub vocab_size: u32,
    #[serde(default)]
    pub tie_word_embeddings: Option<bool>,
    /// `bfloat16`, `float16`, `float32` or `fp8`.
    pub dtype: String,
    #[serde(default)]
    pub max_position_embeddings: Option<u32>,
    #[serde(default)]
    pub sources: Vec<String>,
    #[serde(default)]
    pub notes: Option<String>,
}

impl ModelCard {
    /// Bytes per element of the weights (and, by default, of the KV cache).
    pub fn dtype_bytes(&self) -> Option<u32> {
        dtype_bytes(&self.dtype)
    }

    /// Bytes of KV cache one token occupies across all layers (K and V).
    pub fn kv_bytes_per_token(&self, kv_dtype_bytes: u32) -> u64 {
        2 * u64::from(self.num_layers)
            * u64::from(self.num_kv_heads)
            * u64::from(self.head_dim)
            * u64::from(kv_dtype_bytes)
    }
}

/// Bytes per element of a dtype name, as torch names them.
pub fn dtype_bytes(dtype: &str) -> Option<u32> {
    match dtype {
        "bfloat16" | "bf16" | "float16" | "fp16" | "half" => Some(2),
        "float32" | "fp32" | "float" => Some(4),
        "fp8" | "float8" | "fp8_e4m3" | "fp8_e5m2" | "int8" => Some(1),
        _ => None,
    }
}

/// A GPU, from its vendor datasheet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuCard {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    /// Device memory in bytes.
    pub memory_bytes: u64,
    pub memory_bandwidth_bytes_per_s: f64,
    /// Dense (no sparsity) BF16 tensor throughput.
    pub dense_bf16_flops: f64,
    #[serde(default)]
    pub sources: Vec<String>,
    #[serde(default)]
    pub notes: Option<String>,
}

impl GpuCard {
    /// Device memory in GiB, as the engines compare it against their thresholds.
    pub fn memory_gib(&self) -> f64 {
        self.memory_bytes as f64 / (1u64 << 30) as f64
    }

    /// vLLM and SGLang special-case the A100 in their defaults.
    pub fn is_a100(&self) -> bool {
        self.id.to_ascii_lowercase().contains("a100")
            || self.name.as_deref().is_some_and(|n| n.to_ascii_lowercase().contains("a100"))
    }
}
