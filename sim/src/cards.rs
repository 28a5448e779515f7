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
    /// The checkpoint's `architectures[0]` in its `config.json` (`LlamaForCausalLM`,
    /// `Qwen3ForCausalLM`, ...): the engines choose code paths by it (vLLM's V2 model runner
    /// default by release, SGLang's Qwen3 q/k-norm kernels). Any `...ForCausalLM` name is accepted;
    /// those servesim does not tell apart ([`crate::config::KNOWN_ARCHITECTURES`]) are run by the
    /// engines' rules for every other dense model. Absent: inferred from `hf_repo` (or `id`) by name,
    /// which a fine-tune's name may not reveal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
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
    /// The checkpoint's `torch_dtype`: `bfloat16`, `float16` or `float32`
    /// (activations, embeddings and the LM head; `fp8` is read as an fp8
    /// checkpoint for old cards).
    pub dtype: String,
    /// Quantized linear-layer weights of the checkpoint (`fp8`: one byte per
    /// weight in the attention and MLP projections; embeddings and the LM head
    /// stay in `dtype`, as in vLLM's and SGLang's fp8 checkpoints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<String>,
    /// The checkpoint's `quantization_config.quant_method` (`modelopt` for NVIDIA's ModelOpt
    /// FP8 checkpoints, `fp8`, `compressed-tensors`): the engines pick the quantization code
    /// by it, and ModelOpt's refuses GPUs below compute capability 8.9. Absent: unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization_method: Option<String>,
    /// The checkpoint's `quantization_config.weight_block_size` (`[128, 128]` for Qwen's block
    /// fp8 checkpoints: one scale per 128 × 128 block of weights). Only block-128 fp8 experts
    /// of a MoE card are modelled (the `fp8_block` MoE tables); its attention projections are
    /// timed by the per-tensor fp8 GEMM tables (`config::check_model_card` refuses the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_block_size: Option<Vec<u32>>,
    #[serde(default)]
    pub max_position_embeddings: Option<u32>,
    /// The checkpoint's `rope_scaling`, where it extends the positions (`linear`, `dynamic`,
    /// `yarn`): each engine derives its default context from it by its own rule
    /// (`config::context_positions`). Absent: `max_position_embeddings` as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<RopeScaling>,
    /// Mixture of experts: every decoder layer's MLP is `num_experts` experts, of which each
    /// token runs `experts_per_token` (docs/moe.md). Absent: a dense model. Only what is
    /// modelled can be said (unknown fields are refused): no shared experts, no dense layers
    /// beside the MoE ones, standard attention (Qwen3-MoE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe: Option<MoeSpec>,
    /// Whether the model's tokenizer puts a BOS token before a text prompt
    /// (`tokenizer.num_special_tokens_to_add()` is 1): Llama 3.x (`<|begin_of_text|>`, from
    /// `tokenizer.json`'s `TemplateProcessing` post-processor) and Mistral (`add_bos_token` in
    /// `tokenizer_config.json`) do, Qwen2, Qwen2.5 and Qwen3 do not. A server that tokenizes a text
    /// prompt prefills that token too, and `vllm bench serve`'s `random` dataset takes it off the
    /// input length it draws ([`crate::workload::WorkloadParams::special_tokens`],
    /// docs/benchmark.md §1.5). Required of every card ([`crate::config::check_model_card`]
    /// refuses a card without it): read as absent it would silently be a tokenizer without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_bos_token: Option<bool>,
    #[serde(default)]
    pub sources: Vec<String>,
    #[serde(default)]
    pub notes: Option<String>,
}

/// The `rope_scaling` types a card may carry: Hugging Face transformers' (`default`, `linear`,
/// `dynamic`, `yarn`, `longrope`, `llama3`; `ROPE_INIT_FUNCTIONS`) and two older names configs
/// still use (`su`, Phi-3's name of `longrope`; `mrope`, Qwen2-VL's, read as `default`). Another
/// name is refused (`config::check_model_card`): vLLM's rule for the default context would not be
/// known for it (an audit, 2026-12-07: `"bogus"` extended a context fourfold).
pub const ROPE_TYPES: [&str; 8] = ["default", "linear", "dynamic", "yarn", "longrope", "llama3", "su", "mrope"];

/// The `rope_scaling` types whose `factor` Hugging Face requires (`_validate_linear_scaling_rope_parameters`
/// and its siblings: a float of at least 1).
pub const ROPE_TYPES_WITH_FACTOR: [&str; 4] = ["linear", "dynamic", "yarn", "llama3"];

/// A checkpoint's `rope_scaling` (Hugging Face `rope_type`, or the older `type`; `factor`;
/// `original_max_position_embeddings`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RopeScaling {
    /// `linear`, `dynamic`, `yarn`, `llama3`, `longrope`, ...
    pub rope_type: String,
    /// The scaling factor (1 where the checkpoint gives none).
    pub factor: f64,
    /// The positions the model was trained on before the scaling, where the checkpoint says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_max_position_embeddings: Option<u32>,
}

/// A mixture-of-experts card's experts (Hugging Face `num_experts`, `num_experts_per_tok`,
/// `moe_intermediate_size`). Every layer is MoE and has no shared expert: a feature beyond these
/// (`num_shared_experts`, `mlp_only_layers`, ...) is an unknown field, refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeSpec {
    /// Routed experts per layer.
    pub num_experts: u32,
    /// Experts each token is routed to (top-k).
    pub experts_per_token: u32,
    /// The intermediate size of one expert's gated MLP (gate/up `2 × I` by hidden, down hidden by `I`).
    pub moe_intermediate_size: u32,
}

impl ModelCard {
    /// Whether a model served (or reported) as `served` is most likely this card: its last path
    /// component, case aside, is the card's id or its Hugging Face repository's name (a server may
    /// serve a model under any name, so a mismatch warns, never refuses).
    pub fn is_served_as(&self, served: &str) -> bool {
        let norm = |x: &str| x.trim_end_matches('/').rsplit('/').next().unwrap_or(x).to_ascii_lowercase();
        [Some(self.id.as_str()), self.hf_repo.as_deref()].into_iter().flatten().any(|n| norm(n) == norm(served))
    }

    /// Parameters of the routed experts, all layers (gate, up and down of every expert).
    pub fn expert_parameters(&self) -> u64 {
        self.moe.as_ref().map_or(0, |m| {
            u64::from(self.num_layers)
                * u64::from(m.num_experts)
                * 3
                * u64::from(self.hidden_size)
                * u64::from(m.moe_intermediate_size)
        })
    }

    /// The dense MLP's intermediate size: the card's, else solved from the parameter count
    /// (Llama-style: QKV, O and three MLP matrices a layer), at least `hidden_size`. The step
    /// cost's GEMMs and the memory account's activations both read it, so a card without it is
    /// one model to both.
    pub fn effective_intermediate_size(&self) -> f64 {
        if let Some(i) = self.intermediate_size {
            return f64::from(i);
        }
        let h = f64::from(self.hidden_size);
        let d = f64::from(self.head_dim);
        let per_layer = (self.num_parameters - self.embedding_parameters().min(self.num_parameters)) as f64
            / f64::from(self.num_layers.max(1));
        let attn = h * d * (2.0 * f64::from(self.num_attention_heads) + 2.0 * f64::from(self.num_kv_heads));
        ((per_layer - attn) / (3.0 * h)).max(h)
    }

    /// Bytes per element of the weights (and, by default, of the KV cache).
    pub fn dtype_bytes(&self) -> Option<u32> {
        dtype_bytes(&self.dtype)
    }

    /// The activations' (and by default the KV cache's) dtype: the card's
    /// `dtype`, or bfloat16 for an old-style card whose `dtype` says `fp8`.
    pub fn activation_dtype_name(&self) -> &str {
        match self.dtype_bytes() {
            Some(1) => "bfloat16",
            _ => &self.dtype,
        }
    }

    /// Bytes per activation (and default KV) element.
    pub fn activation_dtype_bytes(&self) -> u32 {
        match self.dtype_bytes() {
            Some(1) | None => 2,
            Some(b) => b,
        }
    }

    /// Bytes of KV cache one token occupies across all layers (K and V).
    pub fn kv_bytes_per_token(&self, kv_dtype_bytes: u32) -> u64 {
        2 * u64::from(self.num_layers)
            * u64::from(self.num_kv_heads)
            * u64::from(self.head_dim)
            * u64::from(kv_dtype_bytes)
    }

    /// KV heads each GPU holds at tensor-parallel size `tp`: the heads are
    /// split across GPUs, and replicated when `tp` exceeds them (vLLM's and
    /// SGLang's `max(1, num_kv_heads // tp)`).
    pub fn kv_heads_per_gpu(&self, tp: u32) -> u32 {
        (self.num_kv_heads / tp.max(1)).max(1)
    }

    /// Bytes of KV cache one token occupies on one GPU at tensor-parallel size `tp`.
    pub fn kv_bytes_per_token_per_gpu(&self, tp: u32, kv_dtype_bytes: u32) -> u64 {
        2 * u64::from(self.num_layers)
            * u64::from(self.kv_heads_per_gpu(tp))
            * u64::from(self.head_dim)
            * u64::from(kv_dtype_bytes)
    }

    /// Parameters of the token embedding and the LM head (one matrix when tied).
    pub fn embedding_parameters(&self) -> u64 {
        let one = u64::from(self.vocab_size) * u64::from(self.hidden_size);
        if self.tie_word_embeddings.unwrap_or(false) {
            one
        } else {
            2 * one
        }
    }

    /// Bytes of weights on one GPU at tensor-parallel size `tp`, with the
    /// linear layers' weights at `linear_bytes` each (1 for fp8) and the
    /// embeddings and LM head at the checkpoint dtype. Every weight matrix is
    /// sharded by `tp` (vocabulary-parallel embeddings included); norms and
    /// biases are counted with the linear layers and sharded too (they are a
    /// few MB). A MoE card's `num_parameters` counts every expert, and the
    /// experts are sharded by `tp` too (each GPU holds `1/tp` of every expert's
    /// intermediate dimension: vLLM without `--enable-expert-parallel`, SGLang with
    /// `ep_size` 1), so the same formula holds all of them.
    pub fn weight_bytes_per_gpu(&self, tp: u32, linear_bytes: u32) -> u64 {
        let dt = u64::from(self.dtype_bytes().unwrap_or(2));
        let emb = self.embedding_parameters().min(self.num_parameters);
        let linear = self.num_parameters - emb;
        (linear * u64::from(linear_bytes) + emb * dt).div_ceil(u64::from(tp.max(1)))
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
    /// Dense FP8 tensor throughput, where the GPU has FP8 tensor cores
    /// (Ada, Hopper, Blackwell); absent on Ampere, where fp8 weights run as
    /// weight-only quantization at the BF16 rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dense_fp8_flops: Option<f64>,
    /// The peak BF16 GEMM throughput measured on the card (FLOP/s) in a public `torch.matmul`
    /// benchmark (its `sources` name the benchmark, the runs and how they were combined). Where a
    /// card without kernel tables and the tabled GPU it borrows them from both give one, the
    /// borrowed tables' BF16 compute moves by the ratio of the two measurements, and this card's
    /// `dense_bf16_flops` is then not what scales them (`sim::cost::composed::scaling_peaks`;
    /// the cost source names both figures): a GeForce datasheet's BF16 figure is the
    /// FP32-accumulate rate at the rated boost clock, which the card's GEMMs exceed. Physical
    /// floors use the larger of the two ([`GpuCard::bf16_peak_flops`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_bf16_matmul_flops: Option<f64>,
    /// The GPU-to-GPU link tensor parallelism all-reduces over: `nvlink` or `pcie`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interconnect: Option<String>,
    /// Bandwidth of that link per GPU and direction, in bytes/s (NVLink 4:
    /// 450e9 of its 900 GB/s; PCIe 4.0 x16: 32e9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interconnect_bandwidth_bytes_per_s: Option<f64>,
    /// Whether two of these cards can reach each other's memory peer to peer (CUDA's
    /// `cudaDeviceCanAccessPeer`). `false` for GeForce cards under NVIDIA's stock driver: vLLM
    /// (`_can_p2p`, every modelled release) and SGLang (its IPC copy test) then turn their custom
    /// all-reduce off and run NCCL, which moves the data through host memory
    /// (`cost::ComposedCost::use_nccl_all_reduce`; the `no_peer_to_peer` caveat). Absent: peer
    /// access, as on data-centre and workstation cards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_to_peer: Option<bool>,
    /// Device memory as `nvidia-smi` reports it (MiB), which SGLang's defaults
    /// compare against; it counts memory the driver reserves, so it exceeds
    /// `memory_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvidia_smi_memory_mib: Option<u32>,
    /// Which measured kernel tables time this card (`data/kernels/`): an
    /// aiconfigurator system name (`h100_sxm`, ...) to use that system's
    /// tables as they are, or `"none"` for the linear roofline prior (a CPU
    /// host). Absent: the system `data/kernels/index.json` maps the card to,
    /// else the fallback for GPUs without tables (`sim::cost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_tables: Option<String>,
    /// CUDA compute capability, `"major.minor"` (`"9.0"` Hopper, `"10.0"` B200): the engines
    /// pick some defaults by it (vLLM's 1,024-token graph ceiling and SGLang's `trtllm_mha`
    /// attention with 64-token pages on the SM100 family). Absent: no such rule applies, and
    /// vLLM ≥ 0.33 refuses to derive a KV pool on the V2 runner where its profiled sampler peak,
    /// which depends on it (`config::vllm_v2_sampler_bytes_per_logit`), moves the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
    #[serde(default)]
    pub sources: Vec<String>,
    #[serde(default)]
    pub notes: Option<String>,
}

impl GpuCard {
    /// The highest BF16 tensor rate the card is known to reach, FLOP/s: its datasheet's
    /// `dense_bf16_flops`, or a measured GEMM peak above it (`measured_bf16_matmul_flops`: a
    /// GeForce card's datasheet gives the FP32-accumulate rate at the rated clock, which its
    /// GEMMs exceed). What a physical floor on a step's time divides by.
    pub fn bf16_peak_flops(&self) -> f64 {
        self.measured_bf16_matmul_flops.map_or(self.dense_bf16_flops, |m| m.max(self.dense_bf16_flops))
    }

    /// Device memory in GiB, as the engines compare it against their thresholds.
    pub fn memory_gib(&self) -> f64 {
        self.memory_bytes as f64 / (1u64 << 30) as f64
    }

    /// The compute capability as (major, minor), if the card gives a well-formed one.
    pub fn capability(&self) -> Option<(u32, u32)> {
        let (a, b) = self.compute_capability.as_deref()?.split_once('.')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    }

    /// The SM100 family (B200, GB200, B300: compute capability 10.x), which vLLM's
    /// `is_device_capability_family(100)` and SGLang's `is_sm100_supported` test.
    pub fn is_sm100_family(&self) -> bool {
        self.capability().is_some_and(|(major, _)| major == 10)
    }

    /// Whether the GPU has FP8 tensor cores (compute capability 8.9 and above: Ada, Hopper,
    /// Blackwell), which vLLM's and SGLang's fp8 linear layers need to run W8A8; below it they
    /// run fp8 weights weight-only (the FP8 Marlin kernel, W8A16). A card without a capability
    /// answers by whether it lists an fp8 throughput.
    pub fn has_fp8_tensor_cores(&self) -> bool {
        match self.capability() {
            Some(c) => c >= (8, 9),
            None => self.dense_fp8_flops.is_some(),
        }
    }

    /// vLLM and SGLang special-case the A100 in their defaults.
    pub fn is_a100(&self) -> bool {
        self.id.to_ascii_lowercase().contains("a100")
            || self.name.as_deref().is_some_and(|n| n.to_ascii_lowercase().contains("a100"))
    }
}
