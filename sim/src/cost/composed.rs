//! The step cost composed from measured kernels (issue #12).
//!
//! ```text
//! step = GPU + CPU
//! GPU  = Σ_layers [ GEMM_qkv(m) + GEMM_o(m) + GEMM_gate_up(m) + GEMM_down(m)
//!                   + decode attention(decodes, their mean context)   (vLLM's FlashAttention 2 in
//!                     a step with a prefill chunk of 2+ tokens: decodes × query heads per KV head)
//!                   + Σ_chunks prefill attention(chunk over its cached prefix)
//!                   + 2 × all-reduce(m × hidden)            (TP > 1, each plus the
//!                                                             wait for the slowest rank)
//!                   + element-wise kernels' memory time (norms, RoPE, SiLU·mul, KV write)
//!                   + 4 element-wise kernels' fixed time (3 µs each)
//!                   − fp8 quantisations a compiled vLLM fuses (3 a layer, each 3 µs
//!                     and its bytes; the fp8 GEMM tables include them) ]
//!      − 2 add + RMSNorm kernels a layer, fixed time and bytes (vLLM ≥ 0.17 at TP 2–8 on
//!        9.0 / 10.x, steps within the fusion's size cap: they run inside the all-reduces)
//!      + 2 element-wise kernels' fixed time                 (the embedding, the final norm)
//!      + all-reduce(m × hidden)                             (TP > 1: the embedding)
//!      + GEMM_lm_head(sampled positions = scheduled sequences)
//!      + all-gather(sequences × vocab)                      (TP > 1: the logits)
//! CPU  = step + per sequence × sequences                 (sync_cpu: vLLM's synchronous
//!                                                             steps 0.6 ms + 12 µs, BLIS's
//!                                                             126 µs + 4 µs otherwise)
//! ```
//!
//! **Mixture of experts** (a card with `moe`, docs/moe.md; Qwen3-MoE: every layer MoE, no
//! shared expert, experts sharded by TP: vLLM without `--enable-expert-parallel`, SGLang with
//! `ep_size` 1, so `moe_tp` = TP and `moe_ep` = 1): a layer's `GEMM_gate_up + GEMM_down` become
//! `GEMM_router(m) + experts(m)`. The router is the replicated bf16 linear `n = num_experts`,
//! `k = hidden` (not sharded), from the GEMM table. `experts(m)` is one layer's fused experts on
//! one GPU at the step's `m` tokens from the GPU's own `moe.json` (aiconfigurator's `moe_perf`,
//! routing `power_law_1.2`, aiconfigurator's default; interpolated log–log in tokens like the
//! GEMM curves, the first point below 1 token, linear in tokens beyond the last, each point
//! floored at its experts' weight reads at the card's bandwidth: `kernels` module docs). A
//! block-fp8 layout whose TP shards are not whole weight blocks is refused before any table is
//! read ([`fp8_block_misfit`]: the engines refuse it, or vLLM from 0.29.0 refines its blocks
//! onto a kernel no table times). Attention, QKV, O, the two all-reduces, the LM head and the CPU terms are as
//! for a dense layer. The element-wise bytes lose SiLU·mul (inside the fused experts) and gain
//! the top-k softmax's read of the router logits; its kernel takes SiLU·mul's place in the
//! count. A compiled vLLM fuses only the QKV input's fp8 quantisation (the experts quantise
//! their own inputs inside the timed kernel). Where no `moe.json` curve covers the GPU (its own
//! tables: never a scaled or roofline GPU), engine, expert dtype (`bfloat16`, or `fp8_block` for
//! block-128 fp8 checkpoints) and TP, the run is refused ([`ComposedCost::build`]), never
//! timed as a dense model.
//!
//! With TP, besides the two all-reduces a layer, each step makes two collectives
//! once: the vocabulary-parallel embedding sums its partial lookups with an
//! all-reduce of the step's hidden states (vLLM and SGLang
//! `VocabParallelEmbedding.forward`: `tensor_model_parallel_all_reduce`), timed
//! from the engine's all-reduce table like the layers'; and the logits of the
//! vocabulary-parallel LM head are gathered (vLLM `LogitsProcessor._gather_logits`:
//! `tensor_model_parallel_gather`/`_all_gather`; SGLang 0.5.8
//! `LogitsProcessor._get_logits`: `tensor_model_parallel_all_gather`), a NCCL
//! collective of the whole `sequences × padded vocab` bf16 output, timed from
//! the system's nccl-tests all-gather table (`data/kernels/<system>/nccl.json`).
//!
//! `m` is the step's token count. Without a CUDA graph for the step (vLLM:
//! more tokens than `max_cudagraph_capture_size`; SGLang: a prefill step or a
//! decode batch above `cuda_graph_max_bs`; either with eager mode), the
//! kernels are launched one by one from the CPU, `LAUNCH_PER_LAYER_US` a
//! layer, and the GPU part is at least that (launches overlap the kernels
//! they queue); a CUDA graph launches the whole step at once.
//!
//! A step that runs as a graph replays the graph captured for the next size up
//! ([`GraphRule::padded`]: vLLM pads the step's tokens, SGLang the decode batch,
//! to their capture lists): its linear layers, collectives and element-wise
//! kernels run on the padded rows, so `m` above is the padded count there.
//! Attention costs the real rows only (vLLM's piecewise graphs call it outside
//! the graph on the real tokens, and a full decode graph's padding requests have
//! no context; SGLang's padded decodes attend to a context of one), and vLLM's
//! logits run on the real rows too (computed after the graph on the sampled
//! positions); SGLang's decode graph includes its LM head, at the padded batch.
//!
//! The embedding is a lookup (no GEMM), the LM head runs on one position per
//! scheduled sequence (vLLM V1 and SGLang compute the logits of every
//! scheduled request's last position, partial prefills included).
//!
//! The CPU terms are a **prior**, not fitted here: their values are BLIS's
//! published fit on vLLM 0.15 on H100 (`docs/guide/latency-models.md` of
//! BLIS: β7 ≈ 126 µs a step, β5 ≈ 32 µs a layer, β6 ≈ 4 µs a request), read
//! as step CPU time, per-layer launch time and per-request CPU time. BLIS's
//! roofline has no non-GEMM kernels and no CUDA-graph distinction, so its
//! per-layer term also stood for work that is modelled here on its own
//! (element-wise kernels, attention's latency floor from the tables); here it
//! is only the eager launch floor. BLIS fitted them with vLLM's async scheduling
//! on (0.15's default), so β7 + β6 is what a step leaves exposed *beyond* the
//! overlap: here a step that overlaps its CPU time with the GPU's (vLLM's async
//! scheduling; SGLang's overlap scheduler, whose CPU hiding is built but off,
//! `config/sglang.rs` `SGLANG_CPU_OVERLAP`: `StepShape::cpu_overlapped`) costs
//! max(GPU, β7 + β6 × sequences). A step that does not adds its CPU time: for
//! vLLM's synchronous steps (async scheduling off, the default before 0.14) the
//! larger [`VLLM_SYNC_CPU`] read from vLLM's own published measurements (not
//! from the validation corpus), for SGLang's BLIS's figures ([`BLIS_SYNC_CPU`]).
//!
//! Everything is memoised per token count (`m` up to [`MEMO_TOKENS`], LM
//! head up to [`MEMO_SEQS`]) in lock-free slots, so a step costs a few loads
//! and one bilinear lookup of the decode-attention grid.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::cards::{GpuCard, ModelCard};
use crate::config::Deployment;
use crate::kernels::{self, Curve, FlatGrid, GemmShape, Grid, Heads, MoeShape, Peaks, Provider};

use super::StepShape;

/// CPU time per step (scheduler, input preparation, sampler), µs. BLIS β7.
pub const STEP_CPU_US: f64 = 126.0;
/// CPU time per scheduled sequence, µs. BLIS β6.
pub const PER_SEQ_CPU_US: f64 = 4.0;

/// The CPU time a step adds to its GPU time where the engine does not overlap them
/// (vLLM with async scheduling off: its default before 0.14; SGLang without its overlap
/// scheduler), µs: a constant and a part per scheduled sequence.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SyncCpu {
    pub step_us: f64,
    pub per_seq_us: f64,
}

/// BLIS's figures ([`STEP_CPU_US`], [`PER_SEQ_CPU_US`]): SGLang's steps without the overlap
/// scheduler keep them (no engine-specific source was found).
pub const BLIS_SYNC_CPU: SyncCpu = SyncCpu { step_us: STEP_CPU_US, per_seq_us: PER_SEQ_CPU_US };

/// vLLM V1 with async scheduling off, one GPU (the engine core runs the worker in its own
/// process): the host time of a synchronous step that the GPU waits for (`schedule()`,
/// `_update_states` / `_prepare_inputs`, the graph launch, the blocking copy of the sampled
/// tokens, `update_from_output`), µs. A prior read from published vLLM measurements, none of
/// them in the validation corpus (docs/engine-cpu.md): about 13 µs a running request removed
/// by async scheduling at batches 32–256 (PR #23914, A100), about 1 ms a step exposed at batch
/// 1 with a draft model (PR #25872, L20, Llama-3.1-8B), and BLIS's β7 + β6 as the floor left
/// *under* async scheduling; 0.6 ms + 12 µs a sequence, uncertain by a factor of about two.
pub const VLLM_SYNC_CPU: SyncCpu = SyncCpu { step_us: 600.0, per_seq_us: 12.0 };

/// The same with TP > 1, where separate worker processes receive each step's scheduler
/// output by a shared-memory broadcast and return their result: 0.2 ms more a step.
pub const VLLM_SYNC_CPU_TP: SyncCpu = SyncCpu { step_us: 800.0, per_seq_us: 12.0 };

/// The synchronous CPU term of `engine` (`"vllm"` or `"sglang"`) at TP `tp`.
pub fn sync_cpu(engine: &str, tp: u32) -> SyncCpu {
    match engine {
        "vllm" if tp > 1 => VLLM_SYNC_CPU_TP,
        "vllm" => VLLM_SYNC_CPU,
        _ => BLIS_SYNC_CPU,
    }
}

/// Kernel-launch CPU time per decoder layer when the step runs eagerly, µs. BLIS β5.
pub const LAUNCH_PER_LAYER_US: f64 = 32.0;
/// A step that a CUDA graph would have replayed, run eagerly because the deployment turned
/// graphs off (vLLM `--enforce-eager`, SGLang `--disable-cuda-graph`): the CPU's cost of
/// launching one decoder layer's kernels one by one, µs, which floors the step where the GPU
/// work is smaller (the launch-bound regime). **[pub → inf]** vLLM PR #10058: OPT-125M at batch
/// 8, whose GPU work is nearly nothing, runs 1.6–2.0 ms a step slower eager than with graphs
/// over 12 layers, 130–170 µs a layer (docs/engine-cpu.md, "Eager mode").
pub const EAGER_LAUNCH_FLOOR_US_PER_LAYER: f64 = 150.0;
/// The part of that launching the GPU's work does not hide (the first kernels of each step,
/// short kernels issued faster than the CPU launches them), added to such a step, µs a layer.
/// **[pub → inf]** Llama-3.1-8B and Llama-3-8B at batch 1–8: 27–54 µs a layer (vLLM PR #10058,
/// SGLang PR #1401), Qwen3-0.6B 53 → 26 µs from 1 to 30 requests (xLLM PR #713); 35, uncertain
/// from 20 to 60 (90 for quantized layers); not fitted on, or judged by, the validation corpus,
/// which has no eager run.
pub const EAGER_EXPOSED_LAUNCH_US_PER_LAYER: f64 = 35.0;
/// Fraction of memory bandwidth the element-wise kernels reach (a round prior).
pub const ELEMENTWISE_BW_EFF: f64 = 0.8;
/// The fixed time of one element-wise kernel, µs, added to its bytes' time: aiconfigurator's
/// `mem_empirical_constant_latency` (3 µs in every one of its system files, the other half of
/// the memory-op formula `bytes / (bandwidth × 0.8) + 3 µs` whose 0.8 is
/// [`ELEMENTWISE_BW_EFF`]); measured small kernels inside a CUDA graph at batch 1 take 2–4 µs
/// (nm-vllm PR #332: RMSNorm 4 µs, rotary 3 µs, fp8 quant 2 µs on an 8B Llama), where their
/// bytes alone would take 0.01–0.05 µs.
pub const ELEMENTWISE_CONSTANT_US: f64 = 3.0;
/// Element-wise kernels per decoder layer between the linear layers and attention: the
/// residual add + RMSNorm before attention, the rotary embedding, the residual add + RMSNorm
/// before the MLP, SiLU·mul (vLLM's Llama and Qwen decoder layers; SGLang's own count, one or
/// two more, is set by [`ComposedCost::apply_engine_kernels`]). The KV-cache
/// write is not among them: its bytes are counted with the element-wise bytes, and
/// aiconfigurator's current attention collector times it inside attention.
pub const ELEMENTWISE_OPS_PER_LAYER: f64 = 4.0;
/// Element-wise kernels once a step: the embedding lookup and the final RMSNorm.
pub const ELEMENTWISE_OPS_PER_STEP: f64 = 2.0;
/// fp8 activation quantisations a layer that the measured fp8 GEMM times include and that a
/// compiled vLLM model does not run as kernels of their own. aiconfigurator's vLLM collector
/// times an fp8 `RowParallelLinear` (static activation scale) eagerly, so each measured fp8
/// GEMM includes the standalone quantisation of its input (`collector/vllm/collect_gemm.py`;
/// at one token on H100 the fp8 times of the small shapes equal or exceed the bf16 ones for
/// half the weight bytes). vLLM V1 compiled with Inductor (its default; not under
/// `enforce_eager`) runs `QuantFP8` natively (a custom op only when `custom_ops` names
/// `+quant_fp8`), so Inductor fuses the quantisation of the QKV and gate/up inputs into the
/// residual add + RMSNorm before them and that of the down projection's input into SiLU·mul;
/// the output projection's input, after attention (a graph split), keeps its own kernel.
/// SGLang does not compile by default: its quantisations stay kernels of their own.
pub const FP8_QUANTS_FUSED_PER_LAYER: f64 = 3.0;

/// Engine-specific kernel rules found while resolving a scenario, applied to the composed cost
/// after it is built ([`ComposedCost::apply_engine_kernels`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EngineKernels {
    /// vLLM's all-reduce + RMSNorm fusion: the largest step it covers, in tokens.
    pub allreduce_rms_fused_up_to: Option<u64>,
    /// The engine's own element-wise kernels a layer: (every step, more from two tokens).
    pub layer_small_kernels: Option<(f64, f64)>,
    /// vLLM's FlashAttention 2 ([`vllm_fa2_unpacked_mixed_decodes`]): in a step with prefill
    /// chunks each decode runs one query tile per query head, not per KV head; the share of
    /// what that adds over the packed kernel the step pays ([`vllm_fa2_unpacked_share`]).
    /// `None`: packed.
    pub unpacked_mixed_decodes: Option<f64>,
    /// vLLM's `--disable-custom-all-reduce`: TP's all-reduces on NCCL
    /// ([`ComposedCost::use_nccl_all_reduce`], applied where the provider is at hand).
    pub nccl_all_reduce: bool,
}

/// Whether vLLM runs a mixed step's decodes without packing a KV head's query heads together:
/// its FlashAttention backend with FlashAttention 2 (vLLM's own on compute capability 8.x and
/// 12.x: `get_flash_attn_version` takes 3 only on major 9 and 4 only on major 10, read in
/// 0.28.0), the default there for a 16-bit KV cache (`attention_lane` `None`: FLASH_ATTN heads
/// the backend priorities everywhere but major 10, `_get_backend_priorities`) or asked for
/// (`"flash_attn"`). The RTX 5090 and RTX PRO 6000 (12.0) run the same kernel as the A100.
///
/// vLLM's FlashAttention backend makes one `flash_attn_varlen_func` call a layer for the whole
/// step, prefill chunks and decodes together (`FlashAttentionImpl.forward`, read in 0.11.0).
/// FlashAttention 2's `mha_varlen_fwd` (vllm-project/flash-attention `csrc/flash_attn/
/// flash_api.cpp`) packs the query heads of one KV head into the query tile
/// (`seqlenq_ngroups_swapped`: the `(b, 1, heads)` queries become `(b, heads/kv_heads, kv_heads)`)
/// only when `max_seqlen_q == 1`, a step whose every query is one token (decodes, and prefill
/// chunks of one token each); with a prefill chunk of two tokens or more in the step every
/// decode is a sequence of one query row, run as one 64-row tile per *query* head over its whole
/// context, each re-reading its KV head's cache. aiconfigurator's decode table timed decode-only
/// batches (`collector/vllm/collect_attn.py`: `query_lens=[1] * batch`), the packed kernel, whose
/// blocks are one such tile per KV head: `heads / kv_heads` times the batch of them is the
/// unpacked kernel's work ([`ComposedCost::gpu_us`]).
pub fn vllm_fa2_unpacked_mixed_decodes(capability: Option<(u32, u32)>, attention_lane: Option<&str>) -> bool {
    capability.is_some_and(|c| matches!(c.0, 8 | 12)) && matches!(attention_lane, None | Some("flash_attn"))
}

/// The share of the unpacked kernel's extra time over the packed one that a mixed step pays on
/// Ada (compute capability 8.9) and Blackwell RTX (12.x) cards ([`vllm_fa2_unpacked_share`]).
/// **Fitted** on one set and judged on another (VALIDATION.md §5, "FlashAttention 2's unpacked
/// decodes on Ada and Blackwell"): on pegainfer's RTX 5090 Poisson sweep (Qwen3-4B, vLLM
/// 0.22.1) the group's median |error| over shares 0, 0.1, …, 0.7 and 0.75, 1 is lowest, 5.2%,
/// from 0.3 to 0.5 (6.5% at 0, 14.7% at 1): the middle of that flat, 0.4. Judged on TechBroMoho's L40S
/// closed loop (Qwen3-8B, vLLM 0.10.2, another card, model, release and client): 10.9% at 1,
/// 4.2% at 0.4. Rechecked with the decode tables' L2 floor (`kernels::gen_dram_rate`): the 5090
/// sweep lowest from 0.3 to 0.5 again (5.4%, 15.7% at 1), the L40S loop 4.5% at 0.4, 11.1% at 1.
/// The A100 groups (8.0) are best at 1 (every one of them: 8.0 keeps it). Why the
/// newer cards pay less is not established: their KV heads' re-reads one query head after
/// another can stay in a 96–128 MB L2 (the A100's 40 MB is split in two partitions), or their
/// padded query tiles' tensor work sets the time; a rule by L2 capacity alone did not fit (the
/// A100 groups' working sets fit 40 MB and still pay the whole surcharge).
pub const FA2_UNPACKED_SHARE_ADA_BLACKWELL: f64 = 0.4;

/// [`EngineKernels::unpacked_mixed_decodes`]'s share on a card of compute capability
/// `capability` where the rule applies ([`vllm_fa2_unpacked_mixed_decodes`]): the whole
/// surcharge on Ampere (8.0, 8.6, 8.7), [`FA2_UNPACKED_SHARE_ADA_BLACKWELL`] on 8.9 and 12.x.
pub fn vllm_fa2_unpacked_share(capability: Option<(u32, u32)>) -> f64 {
    match capability {
        Some((8, 9)) | Some((12, _)) => FA2_UNPACKED_SHARE_ADA_BLACKWELL,
        _ => 1.0,
    }
}

/// Whether `engine` (`"vllm"` / `"sglang"`) fuses fp8 activation quantisations into element-wise
/// kernels ([`FP8_QUANTS_FUSED_PER_LAYER`]): vLLM when it compiles, i.e. with CUDA graphs on.
pub fn fp8_quant_fused(engine: &str, cuda_graphs: bool) -> bool {
    engine == "vllm" && cuda_graphs
}

/// The spread of the TP ranks' arrival at each collective, µs: σ of a normal jitter per
/// rank, so that a collective waits `σ · E[max of TP standard normals]` for its slowest rank
/// ([`collective_skew_us`]) on top of the table's time. The all-reduce tables are timed back
/// to back inside one CUDA graph (aiconfigurator's `collect_all_reduce.py`), where the ranks
/// arrive together; in a model each collective also waits for the rank that is behind
/// (published in-model all-reduce times are 2–4× the microbenchmark's: SGLang PRs #7621 and
/// #19889, flashinfer PR #1507). **Fitted**, not derived: the value minimising the median
/// |TPOT error| of one validation group, the aiconfigurator silicon rows of Llama-3.1-70B fp8
/// on H100 at TP 2/4/8 (45 TPOT values; a 1 µs grid from 0 to 12: 11.1% at 0, 2.3% at 9),
/// and judged on every other TP > 1 group (VALIDATION.md §5, "Collectives inside a model").
/// Fitted at 9 with BLIS's CPU figures for vLLM's synchronous steps and left at 9 when those
/// became [`VLLM_SYNC_CPU_TP`] (a refit would have given 4 and made the TP > 1 groups it was
/// judged on worse: VALIDATION.md §5, "vLLM's synchronous step CPU time"). **Refitted by the
/// same rule** (2026-12-04) when the element-wise kernels got their fixed time
/// ([`ELEMENTWISE_CONSTANT_US`]) and a compiled vLLM its fused fp8 quantisations
/// ([`FP8_QUANTS_FUSED_PER_LAYER`]): 4 µs (2.1% on its group; 5.3% at 0, 4.6% at 9). Part of
/// what σ had absorbed was the per-layer fixed time those kernels now carry (VALIDATION.md §5,
/// "The element-wise kernels' fixed time").
pub const COLLECTIVE_SKEW_SIGMA_US: f64 = 4.0;

/// `E[max of n independent standard normals]` for n up to 16 (`[0]` unused), from
/// `∫ x · n φ(x) Φ(x)^(n−1) dx` evaluated to 1e-6 (n = 2: 1/√π; n = 3: 3/(2√π)).
const EXPECTED_MAX_OF_NORMALS: [f64; 17] = [
    0.0, 0.0, 0.56419, 0.846284, 1.029375, 1.162964, 1.267206, 1.352178, 1.4236, 1.485013, 1.538753, 1.586436,
    1.629228, 1.66799, 1.703382, 1.735913, 1.765991,
];

/// `E[max of n independent standard normals]`: tabulated up to 16, past it by Simpson's rule
/// on the same integral (0 for n ≤ 1).
pub fn expected_max_of_normals(n: u32) -> f64 {
    match EXPECTED_MAX_OF_NORMALS.get(n as usize) {
        Some(v) => *v,
        None => expected_max_by_integral(n),
    }
}

/// `∫ x · n φ(x) Φ(x)^(n−1) dx` by Simpson's rule on [−12, 12] (4,800 intervals).
fn expected_max_by_integral(n: u32) -> f64 {
    let phi = |x: f64| (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let cdf = |x: f64| 0.5 * (1.0 + erf(x / std::f64::consts::SQRT_2));
    let f = |x: f64| x * f64::from(n) * phi(x) * cdf(x).powi(n as i32 - 1);
    let (a, b, k) = (-12.0f64, 12.0f64, 4800usize);
    let h = (b - a) / k as f64;
    let mut sum = f(a) + f(b);
    for i in 1..k {
        let x = a + i as f64 * h;
        sum += if i % 2 == 1 { 4.0 * f(x) } else { 2.0 * f(x) };
    }
    sum * h / 3.0
}

/// The error function, Abramowitz & Stegun 7.1.26 (|error| ≤ 1.5e-7).
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly =
        ((((1.061_405_429 * t - 1.453_152_027) * t + 1.421_413_741) * t - 0.284_496_736) * t + 0.254_829_592) * t;
    let y = 1.0 - poly * (-x * x).exp();
    if x >= 0.0 {
        y
    } else {
        -y
    }
}

/// The expected wait for the slowest of `tp` ranks at one collective, µs (0 at TP 1).
pub fn collective_skew_us(tp: u32) -> f64 {
    COLLECTIVE_SKEW_SIGMA_US * expected_max_of_normals(tp)
}

/// vLLM's default `max_cudagraph_capture_size` (V1, 0.11+) before the SM100 family's 1,024
/// of 0.28 (`config::vllm_graph_ceiling`): steps of more tokens run the piecewise graphs'
/// eager fallback.
pub const VLLM_GRAPH_MAX_TOKENS: u64 = 512;
/// Token counts memoised.
pub const MEMO_TOKENS: usize = 16384;
/// Sequence counts memoised for the LM head.
pub const MEMO_SEQS: usize = 4096;
/// Entries of the decode-step memo ([`ComposedCost::step_ns`]), a power of two.
pub const MEMO_DECODE_STEPS: usize = 4096;

/// A direct-mapped memo of whole decode-only steps' durations, shared by the
/// threads of a sweep: each entry a seqlock (`version` odd while written) over a
/// `(key, ns)` pair, all atomics. A reader that sees the same even version before
/// and after reading, and its key, has the pair one writer wrote; a writer that
/// cannot take the entry skips it (the value is recomputed, never wrong).
#[derive(Debug)]
struct StepMemo {
    entries: Box<[[AtomicU64; 3]]>,
}

impl StepMemo {
    fn new() -> StepMemo {
        StepMemo {
            entries: (0..MEMO_DECODE_STEPS)
                .map(|_| [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)])
                .collect(),
        }
    }

    #[inline]
    fn slot(&self, key: u64) -> &[AtomicU64; 3] {
        let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - MEMO_DECODE_STEPS.trailing_zeros());
        &self.entries[h as usize]
    }

    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        let [version, k, v] = self.slot(key);
        let v1 = version.load(Ordering::Acquire);
        let (k, v) = (k.load(Ordering::Relaxed), v.load(Ordering::Relaxed));
        std::sync::atomic::fence(Ordering::Acquire);
        let v2 = version.load(Ordering::Relaxed);
        (v1 & 1 == 0 && v1 == v2 && k == key).then_some(v)
    }

    fn put(&self, key: u64, ns: u64) {
        let [version, k, v] = self.slot(key);
        let v1 = version.load(Ordering::Relaxed);
        if v1 & 1 == 1 || version.compare_exchange(v1, v1 + 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return;
        }
        std::sync::atomic::fence(Ordering::Release);
        k.store(key, Ordering::Relaxed);
        v.store(ns, Ordering::Relaxed);
        version.store(v1 + 2, Ordering::Release);
    }
}

/// What the all-reduce costs.
#[derive(Debug)]
enum AllReduce {
    None,
    Table(Curve),
    /// `latency + bytes / bandwidth` (µs, µs per element).
    Roofline {
        latency_us: f64,
        us_per_elem: f64,
    },
}

/// What the logits' all-gather costs.
#[derive(Debug)]
enum AllGather {
    None,
    /// nccl-tests all-gather: `t(elements of the gathered output)`.
    Table(Curve),
    /// `latency + (tp − 1)/tp × bytes / bandwidth` (µs, µs per gathered element).
    Roofline {
        latency_us: f64,
        us_per_elem: f64,
    },
}

/// The engine side of the step cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphRule {
    /// vLLM: graphs for steps up to this many tokens.
    VllmTokens(u64),
    /// vLLM 0.11.1 and later: as [`GraphRule::VllmTokens`], but the capture sizes step by 16
    /// from 256 tokens (vLLM PR #26016) where earlier releases step by 8 throughout.
    VllmTokensStep16Above256(u64),
    /// vLLM with sizes off the grid's stride appended to the capture list (`extra`, 0 where
    /// none): `max_num_batched_tokens` when it is the cap (from [`VLLM_CAPTURES_BUDGET`]), and
    /// `max_num_seqs`, the widest uniform decode batch (from [`VLLM_CAPTURES_MAX_NUM_SEQS`]);
    /// `max` is the grid's last size (steps of 8, then 16 from 256).
    VllmGridPlus { max: u64, extra: [u64; 2] },
    /// SGLang: graphs for decode-only steps up to `max` sequences (the last size of the
    /// release's capture list, `config::sglang_capture_list`), padded along `list`.
    SglangDecodeBatch { max: u64, list: SglangList },
    /// Eager mode.
    Eager,
}

/// The first vLLM release that appends `max_num_batched_tokens` to the capture list when it is
/// the cap and off the grid's stride (`_set_cudagraph_sizes`, "ensure max_num_tokens is
/// captured if within max capture size"; absent in 0.20.0, present in 0.21.0, 0.23.0, 0.24.0,
/// 0.25.0, 0.31.0–0.33.0, read in the wheels).
pub const VLLM_CAPTURES_BUDGET: crate::engine::Version = crate::engine::Version::new(0, 21, 0);

/// The first vLLM release that appends `max_num_seqs`, the widest uniform decode batch, to the
/// capture list (`uniform_decode_sizes = [max_num_seqs]`; absent in 0.30.0, present in 0.31.0,
/// 0.32.0 and 0.33.0).
pub const VLLM_CAPTURES_MAX_NUM_SEQS: crate::engine::Version = crate::engine::Version::new(0, 31, 0);

/// The first vLLM release whose capture sizes step by 16 from 256 tokens (`_set_cudagraph_sizes`:
/// `range(8, min(max + 1, 256), 8)` then `range(256, max + 1, 16)`, 0.11.1 `config/vllm.py:880`;
/// 0.11.0's `[1, 2, 4] + range(8, N + 1, 8)`, `config/__init__.py:596`; PR #26016). servesim
/// had it from 0.12.0 until the defaults audit of 2026-12-06.
pub const VLLM_GRAPH_STEP16: crate::engine::Version = crate::engine::Version::new(0, 11, 1);

/// Whether `e` is on vLLM's capture grid: 1, 2, 4, then multiples of 8 (of 16 from 256 with
/// `step16`).
fn on_grid(e: u64, step16: bool) -> bool {
    matches!(e, 1 | 2 | 4) || (e % 8 == 0 && (e < 256 || !step16 || e % 16 == 0))
}

/// The sizes vLLM appends to its capture list off the grid's stride (`_set_cudagraph_sizes`,
/// read in the 0.21–0.33 wheels), `cap` being the grid's `min(ceiling, 2 × max_num_seqs,
/// budget)`: the budget when it is within the cap ("ensure max_num_tokens is captured if within
/// max capture size", from [`VLLM_CAPTURES_BUDGET`]), and `max_num_seqs` within the cap and the
/// budget ("uniform decode sizes are appended when they fit", from
/// [`VLLM_CAPTURES_MAX_NUM_SEQS`]). 0 where none, or where the size is on the grid already (or
/// is the other one): [`GraphRule::vllm`]'s extra sizes, and the capture count of the memory
/// estimate (`config::vllm_capture_sizes`).
pub fn vllm_appended_capture_sizes(
    version: crate::engine::Version,
    cap: u64,
    max_num_seqs: u32,
    max_num_batched_tokens: u32,
) -> [u64; 2] {
    let step16 = version >= VLLM_GRAPH_STEP16;
    let (budget, seqs) = (u64::from(max_num_batched_tokens), u64::from(max_num_seqs));
    let off = |e: u64| !on_grid(e, step16);
    let b = if version >= VLLM_CAPTURES_BUDGET && budget <= cap && off(budget) { budget } else { 0 };
    let q = if version >= VLLM_CAPTURES_MAX_NUM_SEQS && seqs <= cap && seqs <= budget && off(seqs) && seqs != b {
        seqs
    } else {
        0
    };
    [b, q]
}

/// The shape of an SGLang release's decode capture list below its last size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SglangList {
    /// 0.5.3 and later: `[1, 2, 4, 8, 12] + range(16, 257, 8) + range(272, 512, 16) +
    /// range(512, …, 32)`.
    Since053,
    /// 0.4.10–0.5.2: `[1, 2, 4, 8] + range(16, step8_to + 1, 8)`, then by 16 (the list's
    /// 16-steps above 256 on the largest cards and the extension to a larger
    /// `--cuda-graph-max-bs` alike). `step8_to` is 160 up to 90 GiB of device memory, 256 above.
    Before053 { step8_to: u64 },
}

impl GraphRule {
    /// The largest step that runs as a graph (tokens for vLLM, decodes for SGLang); `None`
    /// in eager mode.
    pub fn max(self) -> Option<u64> {
        match self {
            GraphRule::VllmTokens(m)
            | GraphRule::VllmTokensStep16Above256(m)
            | GraphRule::SglangDecodeBatch { max: m, .. } => Some(m),
            GraphRule::VllmGridPlus { max, extra } => Some(max.max(extra[0]).max(extra[1])),
            GraphRule::Eager => None,
        }
    }

    /// vLLM's graphs for a release and its limits: the capture list runs up to
    /// `min(2 × max_num_seqs, 512)`, filtered to `max_num_batched_tokens` (0.11 through 0.33,
    /// `VllmConfig`'s capture-size setup); a cap that is not in the list is not captured (the
    /// largest listed size below it is the last graph: vLLM PR #37865 describes the
    /// truncation). The step of the list from 256 tokens is 16 from 0.11.1 (PR #26016, merged
    /// 2025-10-01, after 0.11.0's `[1, 2, 4] + range(8, N + 1, 8)`), 8 before. The 1,024-token
    /// cap later releases use on SM100 is not modelled.
    /// `ceiling`: the release's and GPU's largest capture size before the clips
    /// (`config::vllm_graph_ceiling`: [`VLLM_GRAPH_MAX_TOKENS`], or 1,024 on the SM100 family
    /// from 0.28).
    pub fn vllm(
        version: crate::engine::Version,
        ceiling: u32,
        max_num_seqs: u32,
        max_num_batched_tokens: u32,
    ) -> GraphRule {
        let cap = u64::from(ceiling).min(2 * u64::from(max_num_seqs)).min(u64::from(max_num_batched_tokens)).max(1);
        let step16 = version >= VLLM_GRAPH_STEP16;
        // The largest captured size not above the cap.
        let largest = if cap < 8 {
            [4, 2, 1].into_iter().find(|&c| c <= cap).unwrap_or(1)
        } else if !step16 || cap < 256 {
            cap / 8 * 8
        } else {
            256 + (cap - 256) / 16 * 16
        };
        let extra = vllm_appended_capture_sizes(version, cap, max_num_seqs, max_num_batched_tokens);
        if extra != [0, 0] {
            GraphRule::VllmGridPlus { max: largest, extra }
        } else if step16 {
            GraphRule::VllmTokensStep16Above256(largest)
        } else {
            GraphRule::VllmTokens(largest)
        }
    }

    /// SGLang's graphs for a release: decode batches up to `max` (the last size of its capture
    /// list), padded along the list of the release and the device memory SGLang sees
    /// (`gpu_mem_mib`, nvidia-smi's MiB).
    pub fn sglang(version: crate::engine::Version, gpu_mem_mib: f64, max: u64) -> GraphRule {
        let list = if version >= crate::config::SGLANG_GPU_MEMORY_SETTINGS {
            SglangList::Since053
        } else {
            SglangList::Before053 {
                step8_to: if gpu_mem_mib > crate::config::SGLANG_LIST_TO_256_MIB { 256 } else { 160 },
            }
        };
        GraphRule::SglangDecodeBatch { max, list }
    }

    /// Whether a step of this shape replays a captured graph under this rule.
    pub fn covers(self, s: &StepShape) -> bool {
        match self {
            GraphRule::VllmTokens(max) | GraphRule::VllmTokensStep16Above256(max) => s.total_tokens() <= max,
            GraphRule::VllmGridPlus { .. } => s.total_tokens() <= self.max().unwrap_or(0),
            GraphRule::SglangDecodeBatch { max, .. } => s.prefill_tokens == 0 && s.decode_tokens <= max,
            GraphRule::Eager => false,
        }
    }

    /// The size a CUDA graph replays a step of `m` tokens (vLLM) or `m` decodes (SGLang) at:
    /// the smallest captured size at least `m`, capped at the largest one. The engines
    /// capture graphs for a list of sizes and pad a step up to the next one; the padded
    /// rows run through every kernel inside the graph. vLLM 0.9–0.11:
    /// `[1, 2, 4] + range(8, max + 1, 8)`; vLLM 0.11.1+: `[1, 2, 4] + range(8, 256, 8) +
    /// range(256, max + 1, 16)`; SGLang: [`SglangList`]. Every list ends at its largest
    /// captured size, which may lie off the list's steps (SGLang adds the request pool's size,
    /// and from 0.5.10 the `--cuda-graph-max-bs` setting): the cap.
    pub fn padded(self, m: u64) -> u64 {
        let ceil = |m: u64, k: u64| m.div_ceil(k) * k;
        if let GraphRule::VllmGridPlus { max, extra } = self {
            // The grid's next size where the grid reaches, else none; an appended size if one
            // is nearer.
            let grid = if m > max {
                u64::MAX
            } else if m <= 4 {
                m.next_power_of_two()
            } else if m < 256 {
                ceil(m, 8)
            } else {
                ceil(m, 16)
            };
            let appended = extra.iter().copied().filter(|&e| e >= m).min().unwrap_or(u64::MAX);
            let up = grid.min(appended);
            return if up == u64::MAX { m } else { up };
        }
        let (max, up) = match self {
            // Handled above.
            GraphRule::Eager | GraphRule::VllmGridPlus { .. } => return m,
            _ if m <= 4 => (self.max().unwrap_or(m), m.next_power_of_two()),
            GraphRule::VllmTokens(max) => (max, ceil(m, 8)),
            GraphRule::VllmTokensStep16Above256(max) => (max, if m < 256 { ceil(m, 8) } else { ceil(m, 16) }),
            GraphRule::SglangDecodeBatch { max, list: SglangList::Since053 } => (
                max,
                match m {
                    ..=8 => 8,
                    9..=12 => 12,
                    13..=256 => ceil(m, 8),
                    257..=512 => ceil(m, 16),
                    _ => 512 + ceil(m - 512, 32),
                },
            ),
            GraphRule::SglangDecodeBatch { max, list: SglangList::Before053 { step8_to } } => {
                (max, if m <= step8_to { ceil(m, 8) } else { step8_to + ceil(m - step8_to, 16) })
            }
        };
        up.min(max).max(m)
    }
}

/// Why TP's all-reduces run on NCCL ([`ComposedCost::use_nccl_all_reduce`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NcclWhy {
    /// vLLM's `--disable-custom-all-reduce`.
    Flag,
    /// A card without peer-to-peer access (`GpuCard::peer_to_peer` false): the engines turn their
    /// custom all-reduce off themselves.
    NoPeerToPeer,
}

/// The kernel-composed step cost of one deployment.
#[derive(Debug)]
pub struct ComposedCost {
    /// Which tables (or fallback) timed it: the `cost_source` report key.
    pub source: String,
    /// A MoE card's experts: the kernel their measured table ran, in vLLM's `--moe-backend`
    /// words (`None`: a dense card, or a table whose kernel has no such name).
    pub moe_kernel: Option<&'static str>,
    /// The engine release that MoE table was measured with.
    pub moe_table_release: Option<crate::engine::Version>,
    layers: f64,
    hidden: f64,
    /// QKV, O, gate/up, down: per layer.
    gemms: [Curve; 4],
    lm_head: Curve,
    ctx: Grid,
    gen: Grid,
    /// `ctx` and `gen` laid out for the step loop (the same values, bit for bit).
    ctx_flat: FlatGrid,
    gen_flat: FlatGrid,
    allreduce: AllReduce,
    /// The logits' all-gather, and the elements it gathers per sequence (the padded vocabulary).
    gather: AllGather,
    gather_elems_per_seq: f64,
    /// Element-wise kernels, all layers, µs per token.
    elementwise_us_per_token: f64,
    /// fp8 activation quantisations the measured GEMM times include but the compiled model
    /// fuses into its element-wise kernels ([`FP8_QUANTS_FUSED_PER_LAYER`]): kernels a layer,
    /// and their bytes' time, µs per token a layer (both 0 where nothing is fused).
    fused_quant_kernels: f64,
    fused_quant_us_per_token: f64,
    /// One residual add + RMSNorm's bytes' time, µs per token a layer.
    norm_us_per_token: f64,
    /// Element-wise kernels a layer with a fixed time, in every step and in steps of two tokens
    /// or more ([`ComposedCost::apply_engine_kernels`]; [`ELEMENTWISE_OPS_PER_LAYER`] and 0
    /// unless the engine's own count is set).
    layer_small_kernels: (f64, f64),
    /// Steps of up to this many tokens fuse each all-reduce with the add + RMSNorm after it
    /// ([`ComposedCost::fuse_allreduce_rms`]); 0: none do.
    allreduce_rms_fused_up_to: u64,
    /// TP's all-reduces on NCCL ([`ComposedCost::use_nccl_all_reduce`]), not the custom kernel,
    /// and why.
    nccl_all_reduce: Option<NcclWhy>,
    /// With NCCL's all-reduces, the table the steps of vLLM's all-reduce + RMSNorm fusion keep
    /// (FlashInfer's fused kernel, which the flag does not turn off; timed as before).
    fused_allreduce: Option<Curve>,
    /// The expected wait for the slowest rank at each collective, µs (0 without TP).
    skew_us: f64,
    /// The decode batch a step's decodes are timed at, per decode, in a step with prefill
    /// chunks: 1, or the query heads per KV head where the engine does not pack them there
    /// ([`vllm_fa2_unpacked_mixed_decodes`]).
    mixed_decode_batch_per_decode: u64,
    /// Query heads per KV head, per GPU (1 without grouped KV heads).
    gqa_group: u64,
    /// The share of the unpacked decodes' extra time a mixed step pays
    /// ([`vllm_fa2_unpacked_share`]; 1 where nothing is unpacked).
    unpacked_share: f64,
    graphs: GraphRule,
    /// The graph rule the engine would have used, where the deployment turned graphs off.
    forgone: Option<GraphRule>,
    /// The CPU time a step without CPU/GPU overlap adds ([`sync_cpu`]).
    sync_cpu: SyncCpu,
    /// The engine runs this many times faster than the tables and cards say (`cost.time_scale`,
    /// [`ComposedCost::set_time_scale`]): every time this cost gives out is divided by it; 1
    /// (the default) leaves every time as computed, bit for bit.
    time_scale: f64,
    memo_tokens: Box<[AtomicU64]>,
    memo_seqs: Box<[AtomicU64]>,
    memo_decode: StepMemo,
}

impl PartialEq for ComposedCost {
    fn eq(&self, o: &Self) -> bool {
        self.source == o.source
            && self.moe_kernel == o.moe_kernel
            && self.moe_table_release == o.moe_table_release
            && self.layers == o.layers
            && self.gemms == o.gemms
            && self.lm_head == o.lm_head
            && self.ctx == o.ctx
            && self.gen == o.gen
            && self.graphs == o.graphs
            && self.elementwise_us_per_token == o.elementwise_us_per_token
            && self.fused_quant_kernels == o.fused_quant_kernels
            && self.fused_quant_us_per_token == o.fused_quant_us_per_token
            && self.allreduce_rms_fused_up_to == o.allreduce_rms_fused_up_to
            && self.layer_small_kernels == o.layer_small_kernels
            && self.skew_us == o.skew_us
            && self.mixed_decode_batch_per_decode == o.mixed_decode_batch_per_decode
            && self.unpacked_share == o.unpacked_share
            && self.sync_cpu == o.sync_cpu
            && self.forgone == o.forgone
            && self.time_scale == o.time_scale
    }
}

/// The per-GPU shapes of `model` at TP `tp`: the four per-layer GEMMs, the LM head, the heads.
pub fn model_shapes(model: &ModelCard, tp: u32, fp8: bool, kv_bytes: u32) -> ([GemmShape; 4], GemmShape, Heads) {
    let tp = tp.max(1);
    let h = u64::from(model.hidden_size);
    let d = u64::from(model.head_dim);
    let q = u64::from((model.num_attention_heads / tp).max(1));
    let kv = u64::from(model.kv_heads_per_gpu(tp));
    let i = (model.effective_intermediate_size() / f64::from(tp)).round() as u64;
    let g = |n, k| GemmShape { n, k, fp8 };
    let gemms = [g((q + 2 * kv) * d, h), g(h, q * d), g(2 * i, h), g(h, i)];
    let lm = GemmShape { n: u64::from(model.vocab_size).div_ceil(u64::from(tp)), k: h, fp8: false };
    let heads = Heads { heads: q as u32, kv_heads: kv as u32, head_dim: d as u32, kv_bytes };
    (gemms, lm, heads)
}

fn peaks_of_card(gpu: &GpuCard) -> Peaks {
    Peaks { bf16_flops: gpu.dense_bf16_flops, fp8_flops: gpu.dense_fp8_flops, mem_bw: gpu.memory_bandwidth_bytes_per_s }
}

/// The built-in card of the tabled system `system` (the card `data/kernels/index.json` maps to it).
fn card_of_system(system: &str) -> Option<&'static GpuCard> {
    crate::builtin::gpu_cards().iter().find(|g| kernels::system_for_gpu(&g.id) == Some(system))
}

/// The card `gpu`'s peaks as the tables of `system` (header figures `header`) are scaled to
/// them, and the two bf16 matmul measurements where the card and the system's own card both
/// give one.
///
/// Where both give `measured_bf16_matmul_flops`, the target's BF16 rate is the header's times
/// the ratio of the two measurements: the tables' compute moves by what the two cards' GEMMs
/// reach in one benchmark, not by their datasheets (the RTX 5090's 209.5 TFLOP/s is GeForce's
/// FP32-accumulate rate at the rated boost clock; its bf16 `torch.matmul` peaks at 236.5
/// TFLOP/s, the RTX PRO 6000 Server Edition's at 417.3 against its 467.8: VALIDATION.md §5,
/// "The RTX 5090 on Linux"). Bandwidth and FP8 stay on the datasheets' ratio (no like-for-like
/// measurement of both cards).
fn scaling_peaks(system: &str, header: Peaks, gpu: &GpuCard) -> (Peaks, Option<(f64, f64)>) {
    let mut target = peaks_of_card(gpu);
    let measured =
        gpu.measured_bf16_matmul_flops.and_then(|t| Some((t, card_of_system(system)?.measured_bf16_matmul_flops?)));
    if let Some((t, s)) = measured {
        target.bf16_flops = header.bf16_flops * t / s;
    }
    (target, measured)
}

/// How a GPU without tables is timed (chosen by leave-one-GPU-out error; see
/// `VALIDATION.md`, "Step costs from measured kernels").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// The nearest tabled GPU, moved by the roofline ratio point by point.
    NearestScaled,
    /// A roofline with efficiencies fitted on every tabled GPU.
    FittedRoofline,
}

/// The fallback servesim uses.
pub const FALLBACK: Fallback = Fallback::NearestScaled;

/// Where `gpu`'s kernel times come from for `engine`, and the words that say so.
/// `None`: the card opts out (`kernel_tables: "none"`).
pub fn provider_for(
    gpu: &GpuCard,
    engine: &str,
    fallback: Fallback,
    exclude: Option<&str>,
) -> Option<(Provider, String)> {
    let named = match gpu.kernel_tables.as_deref() {
        Some("none") => return None,
        Some(s) => Some(s),
        // An inline card under a tabled GPU's id with other figures is another GPU: the id's
        // tables would time it as the built-in card and drop its edits (twice the bandwidth had
        // moved TPOT by 0.02%; the cost audit of 2026-12-06); it is scaled like any untabled card.
        None => kernels::system_for_gpu(&gpu.id).filter(|_| crate::builtin::gpu_is_builtin(gpu)),
    };
    if let Some(sys) = named.filter(|s| Some(*s) != exclude) {
        if let Some(t) = kernels::tables(sys, engine) {
            return Some((Provider::Table(t), t.label()));
        }
    }
    let target = peaks_of_card(gpu);
    let near = kernels::nearest_system(&target, gpu.capability(), exclude);
    let from = kernels::tables(near, engine)?;
    match fallback {
        Fallback::NearestScaled => {
            let (target, measured) = scaling_peaks(near, from.peaks, gpu);
            let how = match measured {
                Some((t, s)) => format!(
                    "measured bf16 matmul FLOP/s ({:.1} against {:.1} TFLOP/s) and bandwidth",
                    t / 1e12,
                    s / 1e12
                ),
                None => "peak FLOP/s and bandwidth".to_string(),
            };
            Some((Provider::Scaled { from, target }, format!("{} scaled by {how} to {}", from.label(), gpu.id)))
        }
        Fallback::FittedRoofline => {
            let fit = fitted_roofline(engine, exclude);
            Some((Provider::Roofline { fit, target, like: from }, "roofline (fitted efficiencies)".into()))
        }
    }
}

/// The roofline efficiencies fitted on every tabled GPU but `exclude`, on
/// every model card's shapes at TP 1.
pub fn fitted_roofline(engine: &str, exclude: Option<&str>) -> kernels::RooflineFit {
    let shapes = fit_shapes();
    let systems: Vec<&str> = kernels::tabled_systems().into_iter().filter(|s| Some(*s) != exclude).collect();
    kernels::fit_roofline(&systems, engine, &shapes)
}

/// The built-in model cards' TP-1 shapes, in bf16 and fp8.
pub fn fit_shapes() -> kernels::FitShapes {
    let models = crate::builtin::resources().map(|r| r.models).unwrap_or_default();
    let mut gemms = Vec::new();
    let mut heads = Vec::new();
    for m in &models {
        if m.quantization.is_some() || m.moe.is_some() {
            continue;
        }
        let (g, lm, h) = model_shapes(m, 1, false, 2);
        for s in g.iter().chain(std::iter::once(&lm)) {
            if !gemms.contains(s) {
                gemms.push(*s);
            }
        }
        if !heads.contains(&h) {
            heads.push(h);
        }
    }
    kernels::FitShapes { gemms, heads }
}

/// The router GEMM of a MoE card: the replicated bf16 linear from the hidden states to the
/// expert logits (`n = num_experts`, `k = hidden`, not sharded by TP).
pub fn moe_router_shape(model: &ModelCard) -> Option<GemmShape> {
    let m = model.moe.as_ref()?;
    Some(GemmShape { n: u64::from(m.num_experts), k: u64::from(model.hidden_size), fp8: false })
}

/// The MoE tables' name for a MoE card's expert dtype as deployed: `bfloat16` for 16-bit
/// experts, `fp8_block` for a block-128 fp8 checkpoint; an error for what is not modelled.
pub fn moe_table_dtype(model: &ModelCard, dep: &Deployment) -> Result<&'static str, String> {
    match dep.quantization.as_deref() {
        None if dep.linear_weight_bytes == 2 => Ok("bfloat16"),
        Some("fp8") if model.quantization.is_some() && model.weight_block_size.as_deref() == Some(&[128, 128]) => {
            Ok("fp8_block")
        }
        Some("fp8") => Err(format!(
            "per-tensor fp8 experts (engine.quantization = \"fp8\" on a {} checkpoint, or an fp8 card without \
             weight_block_size [128, 128]) are not modelled: only bf16 and block-128 fp8 (fp8_block) experts are",
            model.dtype
        )),
        _ => Err(format!(
            "{} experts are not modelled: only bf16 and block-128 fp8 (fp8_block) experts are",
            model.dtype
        )),
    }
}

/// Where a block-quantized card's per-GPU shards at TP `tp` do not fall on whole weight blocks:
/// the shard, its size and the block side it misses, in words; `None` for a card without
/// `weight_block_size` or one whose shards all fit. Checked as the engines check them when they
/// create the fp8 weights (each release of both engines servesim models, docs/moe.md section 1.4):
///
/// * the experts (`moe_intermediate_size / TP`, gate/up's output and down's input): a multiple of
///   block_n, and of block_k at TP > 1 (vLLM `quantization/fp8.py:Fp8MoEMethod.create_weights`,
///   `utils/fp8_utils.py:validate_fp8_block_shape_moe` in 0.34.0; SGLang
///   `quantization/fp8.py:Fp8MoEMethod.create_weights`, and from 0.5.6
///   `ModelRunner.check_quantized_moe_compatibility`: "(moe_intermediate_size / moe_tp_size) %
///   weight_block_size_n == 0"); `moe_intermediate_size` itself a multiple of TP;
/// * the attention projections (a Qwen3-MoE card has no dense MLP): QKV's per-GPU outputs (query
///   heads × head_dim, KV heads × head_dim) multiples of block_n, O's per-GPU input (query heads ×
///   head_dim) of block_k at TP > 1 (vLLM `utils/fp8_utils.py:validate_fp8_block_shape`, called by
///   `Fp8LinearMethod.create_weights`; SGLang `Fp8LinearMethod.validate_block_quant_shapes`).
///
/// From vLLM 0.29.0 an experts' misfit is served instead, its scale blocks refined
/// ([`vllm_refined_moe_block`]); the attention's is refused by every release of both.
pub fn fp8_block_misfit(model: &ModelCard, tp: u32) -> Option<Fp8BlockMisfit> {
    let b = model.weight_block_size.as_deref()?;
    let (bn, bk) = (*b.first()?, *b.get(1)?);
    let tp = tp.max(1);
    if let Some(m) = &model.moe {
        let i = m.moe_intermediate_size;
        if !i.is_multiple_of(tp) {
            return Some(Fp8BlockMisfit {
                experts: true,
                what: format!("moe_intermediate_size {i} is not a multiple of TP {tp}"),
            });
        }
        let ispp = i / tp;
        for (side, block) in [("block_n", bn), ("block_k", bk)] {
            if !ispp.is_multiple_of(block) && (side == "block_n" || tp > 1) {
                return Some(Fp8BlockMisfit {
                    experts: true,
                    what: format!(
                        "moe_intermediate_size / TP = {i} / {tp} = {ispp} is not a multiple of the weight block's \
                         {side} {block} (model.weight_block_size)"
                    ),
                });
            }
        }
    }
    let d = model.head_dim;
    let q = (model.num_attention_heads / tp).max(1) * d;
    let kv = model.kv_heads_per_gpu(tp) * d;
    let shards = [("QKV's query output", q, "block_n", bn), ("QKV's key and value outputs", kv, "block_n", bn)];
    let o = [("O's input", q, "block_k", bk)];
    for (what, size, side, block) in shards.into_iter().chain(o.into_iter().filter(|_| tp > 1)) {
        if !size.is_multiple_of(block) {
            return Some(Fp8BlockMisfit {
                experts: false,
                what: format!(
                    "{what} per GPU at TP {tp}, {size}, is not a multiple of the weight block's {side} {block} \
                     (model.weight_block_size)"
                ),
            });
        }
    }
    None
}

/// A block-quantized card's shard that does not fall on whole weight blocks ([`fp8_block_misfit`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fp8BlockMisfit {
    /// The experts' shard (vLLM from 0.29.0 refines their scale blocks); else an attention one.
    pub experts: bool,
    /// Which shard, its size and the block side, in words.
    pub what: String,
}

/// The first vLLM release that serves block-fp8 experts whose TP shard is not a whole number of
/// weight blocks: their scale blocks are refined at load to `gcd(block_n, block_k, shard,
/// hidden)` square blocks when that is 32 or more, which only Triton's fused MoE runs
/// (`fused_moe/oracle/fp8.py:refine_fp8_moe_block_shape`, `Fp8MoEMethod.__init__`, 0.29.0 to
/// 0.34.0); before it `Fp8MoEMethod.create_weights` raises.
pub const VLLM_FP8_MOE_BLOCK_REFINE: crate::engine::Version = crate::engine::Version::new(0, 29, 0);

/// The refined square block vLLM from [`VLLM_FP8_MOE_BLOCK_REFINE`] gives a block-fp8 card's
/// experts at TP `tp` (`refine_fp8_moe_block_shape`): `None` where the shard fits the blocks or
/// no refinement of 32 or more exists (the engine then refuses).
pub fn vllm_refined_moe_block(model: &ModelCard, tp: u32) -> Option<u32> {
    fn gcd(a: u32, b: u32) -> u32 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let (m, b) = (model.moe.as_ref()?, model.weight_block_size.as_deref()?);
    let (bn, bk, tp) = (*b.first()?, *b.get(1)?, tp.max(1));
    let ispp = m.moe_intermediate_size / tp;
    if !m.moe_intermediate_size.is_multiple_of(tp) || (ispp.is_multiple_of(bn) && (tp == 1 || ispp.is_multiple_of(bk)))
    {
        return None;
    }
    Some(gcd(gcd(bn, bk), gcd(ispp, model.hidden_size))).filter(|&r| r >= 32)
}

/// A MoE card's router and expert curves, and the words for the cost source: from `provider`'s
/// own measured tables only (module docs); else an error naming the model, the GPU, the engine
/// and what is missing.
fn moe_parts(
    model: &ModelCard,
    gpu: &GpuCard,
    dep: &Deployment,
    provider: &Provider,
    engine: &str,
) -> Result<Option<MoeParts>, String> {
    let Some(m) = &model.moe else { return Ok(None) };
    let tp = dep.tensor_parallel_size.max(1);
    let what = format!("MoE model {} on {} under {engine} at TP {tp}", model.id, gpu.id);
    let Provider::Table(t) = provider else {
        return Err(format!(
            "{what}: {} has no measured kernel tables of its own (its dense kernels would be moved from {}'s), and \
             MoE expert times are taken only from the GPU's own measured moe table (data/kernels/<system>/{engine}/moe.json): \
             not modelled (use a GPU with tables: {})",
            gpu.id,
            provider.tables().system,
            kernels::tabled_systems().join(", ")
        ));
    };
    if dep.quantization.is_some() && !gpu.has_fp8_tensor_cores() {
        return Err(format!(
            "{what}: fp8 experts on a GPU without FP8 tensor cores run weight-only (FP8 Marlin MoE), which no table \
             measured: not modelled"
        ));
    }
    let dtype = moe_table_dtype(model, dep).map_err(|e| format!("{what}: {e}"))?;
    // A layout the engines refuse is never timed, whatever a table holds: the SGLang B200 table has
    // fp8_block curves at moe_tp 4 and 8 for shards of 192 and 96 (its collector times the kernel
    // alone, outside the engine's checks). The engine's own rule, by release, is checked first
    // (`config::vllm::vllm_moe_kernel`, `config::sglang::sglang_moe_kernel`); this one holds for
    // any caller.
    if let Some(b) = fp8_block_misfit(model, tp).filter(|_| dtype == "fp8_block") {
        return Err(format!(
            "{what}: {}: SGLang (every release; ModelRunner.check_quantized_moe_compatibility, \
             Fp8MoEMethod.create_weights) and vLLM before {VLLM_FP8_MOE_BLOCK_REFINE} (Fp8MoEMethod.create_weights) refuse \
             this layout{}; not modelled (a TP whose shards are whole 128-wide blocks, or expert parallelism, which \
             servesim does not model)",
            b.what,
            if b.experts {
                format!(
                    ", and vLLM from {VLLM_FP8_MOE_BLOCK_REFINE} serves it with refined scale blocks on Triton, which no \
                     measured table times"
                )
            } else {
                String::new()
            }
        ));
    }
    let shape = MoeShape {
        hidden: model.hidden_size,
        inter: m.moe_intermediate_size,
        topk: m.experts_per_token,
        num_experts: m.num_experts,
        dtype,
        moe_tp: tp,
    };
    let Some((experts, label, kernel)) = t.moe(&shape, gpu.memory_bandwidth_bytes_per_s) else {
        let have: Vec<String> = t
            .moe_layouts(shape.hidden, shape.inter, shape.topk, shape.num_experts)
            .into_iter()
            .map(|(d, tp)| format!("{d} at moe_tp {tp}"))
            .collect();
        return Err(format!(
            "{what}: data/kernels/{}/{}/moe.json has no {dtype} curve for hidden {}, moe_intermediate_size {}, top-{} \
             of {} experts at moe_tp {tp}, moe_ep 1; it has {}",
            t.system,
            t.engine,
            shape.hidden,
            shape.inter,
            shape.topk,
            shape.num_experts,
            if have.is_empty() { "none for this shape".to_string() } else { have.join(", ") }
        ));
    };
    let router_shape = moe_router_shape(model).expect("a MoE card");
    let router = provider.gemm(router_shape);
    let source = format!(
        "MoE experts (moe_tp {tp}, moe_ep 1) from {label}; router GEMM (n = {}, k = {}, bf16) from the GEMM table",
        router_shape.n, router_shape.k
    );
    let release = crate::engine::Version::parse(t.moe_release());
    Ok(Some(MoeParts { router, experts, source, kernel, release }))
}

/// A MoE card's MLP parts ([`moe_parts`]): the router GEMM, the experts' curve, the words for
/// the cost source, and the kernel the experts' table ran (vLLM's `--moe-backend` name).
struct MoeParts {
    router: Curve,
    experts: Curve,
    source: String,
    kernel: Option<&'static str>,
    /// The engine release the experts' table was measured with.
    release: Option<crate::engine::Version>,
}

impl ComposedCost {
    /// The composed cost of `model` on `gpu` deployed as `dep` under
    /// `engine`, from `provider`; `source` says where the times come from. An error (naming the
    /// model, GPU, engine and what is missing) for a MoE card no measured MoE table covers.
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        model: &ModelCard,
        gpu: &GpuCard,
        dep: &Deployment,
        graphs: GraphRule,
        provider: &Provider,
        source: String,
        allreduce_latency_us: f64,
        interconnect_eff: f64,
        sync_cpu: SyncCpu,
        attention_lane: Option<&str>,
    ) -> Result<ComposedCost, String> {
        let tp = dep.tensor_parallel_size.max(1);
        let fp8 = dep.quantization.as_deref() == Some("fp8");
        let (g, lm, heads) = model_shapes(model, tp, fp8, dep.kv_dtype_bytes);
        let moe = moe_parts(model, gpu, dep, provider, provider.tables().engine)?;
        let mut source = source;
        let (mut moe_kernel, mut moe_table_release) = (None, None);
        let gemms = match moe {
            None => [provider.gemm(g[0]), provider.gemm(g[1]), provider.gemm(g[2]), provider.gemm(g[3])],
            // A MoE layer's MLP: the router GEMM and the experts' table in the gate/up and down slots.
            Some(m) => {
                source = format!("{source}; {}", m.source);
                moe_kernel = m.kernel;
                moe_table_release = m.release;
                [provider.gemm(g[0]), provider.gemm(g[1]), m.router, m.experts]
            }
        };
        let lm_head = provider.gemm(lm);
        let allreduce = if tp == 1 {
            AllReduce::None
        } else {
            // An untabled GPU: the table of a tabled system on the same kind of link.
            let by_link = || {
                let kind = gpu.interconnect.as_deref()?;
                kernels::allreduce_by_link(kind, gpu.interconnect_bandwidth_bytes_per_s?, provider.tables().engine, tp)
            };
            match provider.allreduce(tp).map(|c| (c, None)).or_else(|| by_link().map(|(c, s)| (c, Some(s)))) {
                Some((c, None)) => AllReduce::Table(c),
                Some((c, Some(system))) => {
                    source = format!(
                        "{source}; TP all-reduces from {system}'s measured table ({} link), scaled by link bandwidth",
                        gpu.interconnect.as_deref().unwrap_or("?")
                    );
                    AllReduce::Table(c)
                }
                None => {
                    let link = gpu.interconnect_bandwidth_bytes_per_s.unwrap_or(32e9) * interconnect_eff;
                    let t = f64::from(tp);
                    let bytes_per_elem = f64::from(model.activation_dtype_bytes()) * 2.0 * (t - 1.0) / t;
                    AllReduce::Roofline { latency_us: allreduce_latency_us, us_per_elem: bytes_per_elem / link * 1e6 }
                }
            }
        };
        let gather = if tp == 1 {
            AllGather::None
        } else {
            match provider.all_gather(tp) {
                Some(c) => AllGather::Table(c),
                None => {
                    let link = gpu.interconnect_bandwidth_bytes_per_s.unwrap_or(32e9) * interconnect_eff;
                    let t = f64::from(tp);
                    let bytes_per_elem = f64::from(model.activation_dtype_bytes()) * (t - 1.0) / t;
                    AllGather::Roofline { latency_us: allreduce_latency_us, us_per_elem: bytes_per_elem / link * 1e6 }
                }
            }
        };
        let gather_elems_per_seq = (lm.n * u64::from(tp)) as f64;
        let hidden = f64::from(model.hidden_size);
        let (q, kv, d) = (f64::from(heads.heads), f64::from(heads.kv_heads), f64::from(heads.head_dim));
        // Per token per layer, elements moved: two fused add+RMSNorms (read x and
        // the residual, write both), RoPE on q and k (read, write), SiLU·mul (read
        // 2I, write I), the KV-cache write (K and V). A MoE layer's SiLU·mul runs inside the
        // fused experts (their table's time); its top-k softmax reads the router's logits.
        let mlp_elems = match &model.moe {
            None => 3.0 * g[3].k as f64,
            Some(m) => f64::from(m.num_experts),
        };
        let norm_elems = 4.0 * hidden;
        let elems = 2.0 * norm_elems + 2.0 * (q + kv) * d + mlp_elems;
        let act_bytes = f64::from(model.activation_dtype_bytes());
        let bytes = elems * act_bytes + 2.0 * kv * d * f64::from(dep.kv_dtype_bytes);
        // Element-wise kernels' bytes to µs.
        let us_per_byte = 1e6 / (gpu.memory_bandwidth_bytes_per_s * ELEMENTWISE_BW_EFF);
        let elementwise_us_per_token = f64::from(model.num_layers) * bytes * us_per_byte;
        // A standalone fp8 quantisation reads the bf16 activations and writes fp8 ones: 3 bytes
        // an element of the GEMM's input (`k` elements a token).
        // Without FP8 tensor cores the engines run fp8 weights weight-only (FP8 Marlin, W8A16:
        // `config::check_fp8_weights_on_gpu`): bf16 arithmetic on one-byte weights, which the
        // GEMM curves give (a table without an fp8 curve: the bf16 one moved to one-byte weights
        // at the bf16 peak, `kernels::Tables::gemm`), and no activation quantisation to fuse.
        let weight_only_fp8 = fp8 && !gpu.has_fp8_tensor_cores();
        if weight_only_fp8 {
            source = format!(
                "{source}; fp8 weights weight-only (FP8 Marlin, W8A16: no FP8 tensor cores below compute capability 8.9)"
            );
        }
        let (fused_quant_kernels, fused_quant_us_per_token) =
            if fp8 && !weight_only_fp8 && fp8_quant_fused(provider.tables().engine, dep.cuda_graphs) {
                if model.moe.is_some() {
                    // Only the QKV input's: the experts quantise their inputs inside the fused
                    // kernel their table times (a custom op Inductor does not fuse into).
                    (1.0, 3.0 * g[0].k as f64 * us_per_byte)
                } else {
                    let bytes: f64 = [g[0].k, g[2].k, g[3].k].iter().map(|&k| 3.0 * k as f64).sum();
                    (FP8_QUANTS_FUSED_PER_LAYER, bytes * us_per_byte)
                }
            } else {
                (0.0, 0.0)
            };
        // Graphs turned off (`enforce_eager`, `disable_cuda_graph`): the steps the engine's rule
        // would have replayed as graphs run eagerly, launched kernel by kernel.
        let forgone = (!dep.cuda_graphs).then_some(graphs).filter(|g| *g != GraphRule::Eager);
        let graphs = if dep.cuda_graphs { graphs } else { GraphRule::Eager };
        let ctx = provider.ctx_grid(heads, attention_lane);
        let (gen, raised, cells) = provider.gen_grid_floored(heads, attention_lane);
        if raised > 0 {
            source = format!(
                "{source}; decode attention: {raised} of the table's {cells} cells read the KV faster than the table's \
                 own DRAM rate (the collector re-reads one layer's KV from the L2), floored there"
            );
        }
        // A backend the tables did not measure is timed by the kernels they did: say so.
        if let Some(l) = attention_lane.filter(|l| !provider.tables().has_lane(l)) {
            source =
                format!("{source}; no measured {l} attention in these tables: timed by their own attention kernels");
        }
        if !provider.tables().has_kv_dtype(dep.kv_dtype_bytes) {
            source = format!(
                "{source}; no measured attention over {} KV cache in these tables: timed by their {} one",
                if dep.kv_dtype_bytes == 1 { "an fp8" } else { "a 16-bit" },
                if dep.kv_dtype_bytes == 1 { "16-bit" } else { "fp8" }
            );
        }
        Ok(ComposedCost {
            source,
            moe_kernel,
            moe_table_release,
            layers: f64::from(model.num_layers),
            hidden,
            gemms,
            lm_head,
            ctx_flat: ctx.flat(),
            gen_flat: gen.flat(),
            ctx,
            gen,
            allreduce,
            gather,
            gather_elems_per_seq,
            elementwise_us_per_token,
            fused_quant_kernels,
            fused_quant_us_per_token,
            norm_us_per_token: norm_elems * act_bytes * us_per_byte,
            allreduce_rms_fused_up_to: 0,
            nccl_all_reduce: None,
            fused_allreduce: None,
            layer_small_kernels: (ELEMENTWISE_OPS_PER_LAYER, 0.0),
            skew_us: collective_skew_us(tp),
            mixed_decode_batch_per_decode: 1,
            gqa_group: if heads.kv_heads > 0 { u64::from((heads.heads / heads.kv_heads).max(1)) } else { 1 },
            unpacked_share: 1.0,
            graphs,
            forgone,
            sync_cpu,
            time_scale: 1.0,
            memo_tokens: (0..MEMO_TOKENS).map(|_| AtomicU64::new(0)).collect(),
            memo_seqs: (0..MEMO_SEQS).map(|_| AtomicU64::new(0)).collect(),
            memo_decode: StepMemo::new(),
        })
    }

    /// vLLM's flashinfer all-reduce + residual add + RMSNorm fusion (docs/vllm.md §9), for steps
    /// of up to `max_tokens` tokens (`config::vllm_allreduce_rms_fusion_max_tokens`): in
    /// such a step the two add + RMSNorm kernels a layer run inside the all-reduces before them,
    /// so their fixed time and bytes drop out; the all-reduce keeps its table time and the
    /// ranks' wait. The cost source says so. Only with TP > 1 (nothing to fuse at TP 1).
    fn fuse_allreduce_rms(&mut self, max_tokens: u64) {
        if matches!(self.allreduce, AllReduce::None) || max_tokens == 0 {
            return;
        }
        self.allreduce_rms_fused_up_to = max_tokens;
        self.source = format!(
            "{}; all-reduce + RMSNorm fused (vLLM's flashinfer pass) in steps of up to {max_tokens} tokens",
            self.source
        );
    }

    /// The engine-specific kernel rules a scenario's resolution found ([`EngineKernels`]): the
    /// engine's own count of element-wise kernels a decoder layer launches, each with the fixed
    /// [`ELEMENTWISE_CONSTANT_US`] (`always` in every step, `multi` more in steps of two tokens or
    /// more: SGLang's copy of q into a contiguous tensor, `config::sglang_layer_small_kernels`;
    /// their bytes stay in the element-wise bytes), and vLLM's all-reduce + RMSNorm fusion.
    pub fn apply_engine_kernels(&mut self, k: EngineKernels) {
        if let Some(counts) = k.layer_small_kernels {
            self.layer_small_kernels = counts;
        }
        if let Some(n) = k.allreduce_rms_fused_up_to {
            self.fuse_allreduce_rms(n);
        }
        if let Some(share) = k.unpacked_mixed_decodes {
            self.unpack_mixed_decodes(share);
        }
    }

    /// TP's all-reduces (the layers' and the embedding's) on NCCL instead of the engine's custom
    /// kernel, for `why` (vLLM's `--disable-custom-all-reduce`, or a card without peer-to-peer
    /// access, where vLLM and SGLang turn the custom kernel off themselves): timed from
    /// `provider`'s nccl-tests `all_reduce` table, or, for a GPU without tables, the same-link
    /// system's scaled by link bandwidth (as [`kernels::allreduce_by_link`] does for the custom
    /// kernel); the collective skew stays. An error where no such table exists at this TP size.
    /// Nothing at TP 1, nor over PCIe past two GPUs, where the engines run NCCL anyway (the table,
    /// measured through vLLM's own all-reduce, timed NCCL there). vLLM's all-reduce + RMSNorm
    /// fusion (FlashInfer's own kernel) is left as the release and GPU decide it: its steps keep
    /// the table they had.
    pub fn use_nccl_all_reduce(
        &mut self,
        gpu: &GpuCard,
        provider: &Provider,
        tp: u32,
        why: NcclWhy,
    ) -> Result<(), String> {
        if tp <= 1 || matches!(self.allreduce, AllReduce::None) {
            return Ok(());
        }
        let reason = match why {
            NcclWhy::Flag => "disable_custom_all_reduce".to_string(),
            NcclWhy::NoPeerToPeer => format!(
                "{} has no peer-to-peer access, so the engine turns its custom all-reduce off; the NCCL tables were measured \
                 with peer-to-peer",
                gpu.id
            ),
        };
        // Past two GPUs without NVLink between every pair vLLM never starts the custom kernel
        // (`CustomAllreduce.__init__`: "not supported on more than two PCIe-only GPUs"), so the
        // table, measured through vLLM's own all-reduce, already timed NCCL there.
        if tp > 2 && gpu.interconnect.as_deref() == Some("pcie") {
            self.nccl_all_reduce = Some(why);
            self.source = match why {
                NcclWhy::Flag => format!(
                    "{}; disable_custom_all_reduce changes nothing over PCIe past two GPUs (vLLM runs NCCL there anyway)",
                    self.source
                ),
                NcclWhy::NoPeerToPeer => {
                    format!("{}; TP all-reduces on NCCL, as over PCIe past two GPUs anyway ({reason})", self.source)
                }
            };
            return Ok(());
        }
        let (curve, from) = match provider.nccl_all_reduce(tp) {
            Some(c) => (c, provider.tables().system.to_string()),
            None => {
                let kind = gpu.interconnect.as_deref().unwrap_or("?");
                let bw = gpu.interconnect_bandwidth_bytes_per_s.unwrap_or(0.0);
                match (bw > 0.0)
                    .then(|| kernels::nccl_all_reduce_by_link(kind, bw, provider.tables().engine, tp))
                    .flatten()
                {
                    Some((c, system)) => (c, format!("{system}'s, scaled by {kind} link bandwidth")),
                    None => {
                        return Err(format!(
                            "no measured NCCL all-reduce table over {tp} GPUs for {} ({kind} link): \
                             TP all-reduces on NCCL ({reason}) cannot be timed",
                            gpu.id
                        ))
                    }
                }
            }
        };
        if self.allreduce_rms_fused_up_to > 0 {
            if let AllReduce::Table(c) = &self.allreduce {
                self.fused_allreduce = Some(c.clone());
            }
        }
        self.allreduce = AllReduce::Table(curve);
        self.nccl_all_reduce = Some(why);
        self.source = format!("{}; TP all-reduces on NCCL ({reason}), {from} nccl-tests table", self.source);
        Ok(())
    }

    /// Whether TP's all-reduces are timed as NCCL's ([`ComposedCost::use_nccl_all_reduce`]).
    pub fn all_reduce_on_nccl(&self) -> bool {
        self.nccl_all_reduce.is_some()
    }

    /// Why TP's all-reduces are timed as NCCL's, where they are.
    pub fn nccl_why(&self) -> Option<NcclWhy> {
        self.nccl_all_reduce
    }

    /// [`vllm_fa2_unpacked_mixed_decodes`]: a step with a prefill chunk of two tokens or more
    /// (`max_seqlen_q > 1`) times its `d` decodes as
    /// the packed decode kernel's batch of `d × heads / kv_heads` (per GPU), which runs the same
    /// tiles; the cost source says so. Nothing changes without grouped KV heads.
    fn unpack_mixed_decodes(&mut self, share: f64) {
        if self.gqa_group <= 1 {
            return;
        }
        self.mixed_decode_batch_per_decode = self.gqa_group;
        self.unpacked_share = share;
        self.source = format!(
            "{}; decodes beside prefill chunks unpacked (FlashAttention 2: {} query heads per KV head{})",
            self.source,
            self.mixed_decode_batch_per_decode,
            if share < 1.0 {
                format!(", {:.0}% of the unpacked kernel's extra time", share * 100.0)
            } else {
                String::new()
            }
        );
    }

    /// The graphs the release would have captured by default where the deployment captures
    /// fewer (SGLang's `--cuda-graph-max-bs` below its default): the steps between run eagerly
    /// by that choice, charged as with graphs turned off.
    pub fn set_forgone(&mut self, rule: GraphRule) {
        self.forgone = Some(rule);
    }

    /// How steps run as CUDA graphs (eager when the deployment has none).
    pub fn graphs(&self) -> GraphRule {
        self.graphs
    }

    /// Runs the engine `k` times faster than its tables and cards say (`cost.time_scale`,
    /// `config::resolve_cost`): every time this cost gives out (a step's, its GPU time, its
    /// collectives', its CPU terms) is the time computed from them divided by `k`, in µs before
    /// the rounding to whole ns ([`ComposedCost::step_ns`]). Set before the first step is timed
    /// (the step memo holds scaled times; it is cleared here).
    pub fn set_time_scale(&mut self, k: f64) {
        assert!(k.is_finite() && k > 0.0, "time scale {k}");
        self.time_scale = k;
        // The decode memo holds whole steps' ns (the token and sequence memos hold unscaled parts).
        self.memo_decode = StepMemo::new();
    }

    /// The time scale ([`ComposedCost::set_time_scale`]; 1: as the tables say).
    pub fn time_scale(&self) -> f64 {
        self.time_scale
    }

    /// The CPU time a step without CPU/GPU overlap adds to its GPU time (÷ the time scale).
    pub fn sync_cpu(&self) -> SyncCpu {
        let k = self.time_scale;
        SyncCpu { step_us: self.sync_cpu.step_us / k, per_seq_us: self.sync_cpu.per_seq_us / k }
    }

    /// One all-reduce of the hidden states of `m` tokens, µs (0 without TP; ÷ the time scale).
    pub fn allreduce_us(&self, m: u64) -> f64 {
        self.allreduce_raw_us(m) / self.time_scale
    }

    /// [`ComposedCost::allreduce_us`] as the tables give it (not time-scaled).
    fn allreduce_raw_us(&self, m: u64) -> f64 {
        let x = m as f64;
        match &self.allreduce {
            AllReduce::None => 0.0,
            AllReduce::Table(c) => {
                let c = match &self.fused_allreduce {
                    Some(f) if m <= self.allreduce_rms_fused_up_to => f,
                    _ => c,
                };
                c.at(x * self.hidden) * 1e3 + self.skew_us
            }
            AllReduce::Roofline { latency_us, us_per_elem } => {
                latency_us + us_per_elem * x * self.hidden + self.skew_us
            }
        }
    }

    /// The all-reduces of a step of `m` tokens (two a layer and the embedding's), µs (0 without
    /// TP; ÷ the time scale).
    pub fn step_allreduce_us(&self, m: u64) -> f64 {
        (2.0 * self.layers + 1.0) * self.allreduce_us(m)
    }

    /// The all-gather of the logits of `seqs` sequences, µs (0 without TP; ÷ the time scale).
    pub fn logits_gather_us(&self, seqs: u64) -> f64 {
        self.logits_gather_raw_us(seqs) / self.time_scale
    }

    /// [`ComposedCost::logits_gather_us`] as the tables give it (not time-scaled).
    fn logits_gather_raw_us(&self, seqs: u64) -> f64 {
        let x = seqs as f64 * self.gather_elems_per_seq;
        match &self.gather {
            AllGather::None => 0.0,
            AllGather::Table(c) => c.at(x) * 1e3 + self.skew_us,
            AllGather::Roofline { latency_us, us_per_elem } => latency_us + us_per_elem * x + self.skew_us,
        }
    }

    /// Linear layers, all-reduces (two a layer, and the embedding's) and element-wise
    /// kernels of a step of `m` tokens, µs.
    fn per_token_count_us(&self, m: u64) -> f64 {
        let x = m as f64;
        let gemm_ms: f64 = self.gemms.iter().map(|c| c.at(x)).sum();
        let ar_us = self.allreduce_raw_us(m);
        self.layers * (gemm_ms * 1e3 + 2.0 * ar_us)
            + ar_us
            + self.elementwise_us_per_token * x
            + ELEMENTWISE_CONSTANT_US
                * (self.layers * (self.layer_small_kernels(m) - self.fused_quant_kernels) + ELEMENTWISE_OPS_PER_STEP)
            - self.layers * self.fused_quant_us_per_token * x
            - if m <= self.allreduce_rms_fused_up_to {
                self.layers * 2.0 * (ELEMENTWISE_CONSTANT_US + self.norm_us_per_token * x)
            } else {
                0.0
            }
    }

    /// Element-wise kernels with a fixed time a layer in a step of `m` tokens.
    fn layer_small_kernels(&self, m: u64) -> f64 {
        let (always, multi) = self.layer_small_kernels;
        if m >= 2 {
            always + multi
        } else {
            always
        }
    }

    fn memo(slots: &[AtomicU64], i: u64, f: impl FnOnce() -> f64) -> f64 {
        match slots.get(i as usize) {
            Some(slot) => {
                let bits = slot.load(Ordering::Relaxed);
                if bits != 0 {
                    return f64::from_bits(bits);
                }
                let v = f();
                // 0.0's bits are 0: such a value is recomputed, never wrong.
                slot.store(v.to_bits(), Ordering::Relaxed);
                v
            }
            None => f(),
        }
    }

    /// The GPU time of a step, µs (kernels only: no CPU time, no launch floor; ÷ the time scale).
    pub fn gpu_us(&self, s: &StepShape) -> f64 {
        self.gpu_us_as(s, self.in_graph(s), self.mixed_decode_batch_per_decode) / self.time_scale
    }

    /// [`ComposedCost::gpu_us`] of a step that runs as a CUDA graph (`graph`) or eagerly, its
    /// decodes beside prefill chunks timed at `unpack` times their batch.
    #[inline]
    fn gpu_us_as(&self, s: &StepShape, graph: bool, unpack: u64) -> f64 {
        let m = s.total_tokens();
        if m == 0 {
            return 0.0;
        }
        // Inside a CUDA graph the linear layers, collectives and element-wise kernels run on
        // the padded rows too; attention costs the real ones only (module docs). vLLM computes
        // the logits after the graph, on the real sampled positions; SGLang's decode graph
        // includes them.
        let m_run = if graph { self.graphs.padded(m) } else { m };
        let linear = Self::memo(&self.memo_tokens, m_run, || self.per_token_count_us(m_run));
        let mut seqs = u64::from(s.num_seqs.max(1));
        if graph && matches!(self.graphs, GraphRule::SglangDecodeBatch { .. }) {
            seqs = self.graphs.padded(seqs);
        }
        let lm =
            Self::memo(&self.memo_seqs, seqs, || self.lm_head.at(seqs as f64) * 1e3 + self.logits_gather_raw_us(seqs));
        let mut attn_ms = 0.0;
        if s.decode_tokens > 0 {
            let b = s.decode_tokens as f64;
            // FlashAttention 2 packs them wherever the step's longest query is one token
            // (`max_seqlen_q == 1`): a chunk of two tokens or more unpacks them, chunks of one
            // token each do not ([`vllm_fa2_unpacked_mixed_decodes`]).
            let ctx = s.decode_context_tokens as f64 / b;
            let packed = || self.gen_flat.at_whole_a(s.decode_tokens, ctx);
            attn_ms += if unpack > 1 && s.has_multi_token_chunk() {
                // The unpacked kernel is the packed one's at `unpack` times the batch; the card
                // pays a share of what that adds ([`vllm_fa2_unpacked_share`]).
                let unpacked = self.gen_flat.at_whole_a(s.decode_tokens * unpack, ctx);
                if self.unpacked_share == 1.0 {
                    unpacked
                } else {
                    let packed = packed();
                    packed + self.unpacked_share * (unpacked - packed).max(0.0)
                }
            } else {
                packed()
            };
        }
        if s.num_chunks > 0 {
            let b = f64::from(s.num_chunks);
            let kept = (s.num_chunks as usize).min(super::MAX_CHUNKS);
            for c in &s.chunks[..kept] {
                attn_ms += self.chunk_ms(c.context as f64, c.n as f64, b, s.num_chunks);
            }
            let (k, n, pairs) = s.rest;
            if k > 0 {
                // `k` chunks of the mean length, at the prefix that gives their pairs.
                let (k, n, pairs) = (k as f64, n as f64, pairs as f64);
                let nbar = n / k;
                let ctx = ((pairs / k - nbar * (nbar + 1.0) / 2.0) / nbar).max(0.0);
                attn_ms += k * self.chunk_ms(ctx, nbar, b, s.num_chunks);
            }
        }
        linear + lm + self.layers * attn_ms * 1e3
    }

    /// One prefill chunk of `n` tokens after `ctx` cached ones, in a batch of `b` (= `chunks`) chunks, ms a layer.
    fn chunk_ms(&self, ctx: f64, n: f64, b: f64, chunks: u32) -> f64 {
        if n <= 0.0 {
            return 0.0;
        }
        let full = ctx + n;
        self.ctx_flat.at_whole_b(full, u64::from(chunks)) / b * (1.0 - (ctx / full) * (ctx / full))
    }

    /// Whether the step runs as a CUDA graph.
    fn in_graph(&self, s: &StepShape) -> bool {
        self.graphs.covers(s)
    }

    /// The step's duration in whole nanoseconds (at least 1): [`super::us_to_ns`] of
    /// [`ComposedCost::step_us`]. A decode-only step's duration depends only on its
    /// class `(decodes, Σ context, CPU overlap)`; those are memoised (most steps of a
    /// run are of a class seen before), so such a step costs a hash and four loads.
    #[inline]
    pub fn step_ns(&self, s: &StepShape) -> u64 {
        let decode_only = s.prefill_tokens == 0 && s.num_chunks == 0 && u64::from(s.num_seqs) == s.decode_tokens;
        // The class in one word: 16 bits of decodes, 46 of context, the overlap bit, and
        // a set top bit (an empty entry's key is 0).
        if decode_only && s.decode_tokens < 1 << 16 && s.decode_context_tokens < 1 << 46 {
            let key = 1 << 63 | s.decode_context_tokens << 17 | s.decode_tokens << 1 | u64::from(s.cpu_overlapped);
            if let Some(ns) = self.memo_decode.get(key) {
                return ns;
            }
            let ns = super::us_to_ns(self.step_us(s)).max(1);
            self.memo_decode.put(key, ns);
            return ns;
        }
        super::us_to_ns(self.step_us(s)).max(1)
    }

    /// The step's duration, µs.
    pub fn step_us(&self, s: &StepShape) -> f64 {
        self.step_us_with(s, self.mixed_decode_batch_per_decode)
    }

    /// [`ComposedCost::step_us`] with a step's decodes beside prefill chunks timed packed, as
    /// the decode table times them ([`vllm_fa2_unpacked_mixed_decodes`]): the same where the
    /// engine packs them.
    pub fn step_us_packed(&self, s: &StepShape) -> f64 {
        self.step_us_with(s, 1)
    }

    /// Whether steps with prefill chunks time their decodes unpacked
    /// ([`vllm_fa2_unpacked_mixed_decodes`]).
    pub fn unpacks_mixed_decodes(&self) -> bool {
        self.mixed_decode_batch_per_decode > 1
    }

    /// What running a step's decodes unpacked beside its prefill chunks adds to it, µs:
    /// decode work (their KV re-read once per query head), 0 where the engine packs them.
    pub fn unpacked_decode_surcharge_us(&self, s: &StepShape) -> f64 {
        if !self.unpacks_mixed_decodes() || !s.has_multi_token_chunk() || s.decode_tokens == 0 {
            return 0.0;
        }
        (self.step_us(s) - self.step_us_packed(s)).max(0.0)
    }

    #[inline]
    fn step_us_with(&self, s: &StepShape, unpack: u64) -> f64 {
        let graph = self.in_graph(s);
        let mut gpu = self.gpu_us_as(s, graph, unpack);
        if !graph {
            gpu = gpu.max(LAUNCH_PER_LAYER_US * self.layers);
            // A step a graph would have covered, run eagerly because graphs were turned off:
            // its small kernels are launched one by one (the launch-bound floor) and part of
            // the launching is never hidden behind the GPU (docs/engine-cpu.md, "Eager mode").
            if self.forgone.is_some_and(|g| g.covers(s)) {
                gpu = gpu.max(EAGER_LAUNCH_FLOOR_US_PER_LAYER * self.layers)
                    + EAGER_EXPOSED_LAUNCH_US_PER_LAYER * self.layers;
            }
        }
        let n = f64::from(s.num_seqs);
        let us = if s.cpu_overlapped {
            gpu.max(STEP_CPU_US + PER_SEQ_CPU_US * n)
        } else {
            gpu + self.sync_cpu.step_us + self.sync_cpu.per_seq_us * n
        };
        // A time-scaled engine (`cost.time_scale`): the whole step, GPU and CPU, k times faster.
        // At 1 the division is exact: every time as before, bit for bit.
        us / self.time_scale
    }
}

/// One held-out GPU of [`leave_one_gpu_out`].
#[derive(Clone, Debug)]
pub struct LogoRow {
    pub system: &'static str,
    pub engine: &'static str,
    /// The tabled system the nearest-scaled fallback read.
    pub nearest: &'static str,
    /// |predicted / own tables − 1| of every (model, step shape), per fallback.
    pub scaled_errors: Vec<f64>,
    pub roofline_errors: Vec<f64>,
}

/// The step shapes the leave-one-out compares: lone prefills, decode batches at
/// two contexts, and a mixed step.
pub fn logo_shapes() -> Vec<StepShape> {
    let mut v = Vec::new();
    for n in [128, 512, 2048, 8192] {
        let mut s = StepShape::default();
        s.add_prefill(0, n);
        v.push(s);
    }
    for b in [1u64, 8, 32, 128] {
        for ctx in [512u64, 4096] {
            v.push(StepShape::decodes(b, b * ctx));
        }
    }
    let mut s = StepShape::default();
    s.add_prefill(1024, 1024);
    for _ in 0..32 {
        s.add_decode(1024);
    }
    v.push(s);
    v
}

/// Leave-one-GPU-out: for each tabled GPU and engine, the GPU time of
/// [`logo_shapes`] for every built-in bf16 model card at TP 1 from the GPU's own
/// tables, against each fallback built without them. Kernel times only: the
/// CPU terms are the same either way.
pub fn leave_one_gpu_out() -> Vec<LogoRow> {
    let models: Vec<ModelCard> = crate::builtin::resources()
        .map(|r| r.models)
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.quantization.is_none() && m.moe.is_none())
        .collect();
    let shapes = logo_shapes();
    let mut rows = Vec::new();
    for system in kernels::tabled_systems() {
        for engine in ["vllm", "sglang"] {
            let Some(own) = kernels::tables(system, engine) else { continue };
            let p = own.peaks;
            let gpu = GpuCard {
                id: system.to_string(),
                name: None,
                memory_bytes: 80 << 30,
                memory_bandwidth_bytes_per_s: p.mem_bw,
                dense_bf16_flops: p.bf16_flops,
                dense_fp8_flops: p.fp8_flops,
                measured_bf16_matmul_flops: None,
                interconnect: None,
                interconnect_bandwidth_bytes_per_s: None,
                peer_to_peer: None,
                nvidia_smi_memory_mib: None,
                compute_capability: kernels::system_capability(system).map(|(a, b)| format!("{a}.{b}")),
                kernel_tables: None,
                sources: vec![],
                notes: None,
            };
            let (scaled, _) = provider_for(&gpu, engine, Fallback::NearestScaled, Some(system)).expect("fallback");
            let (roof, _) = provider_for(&gpu, engine, Fallback::FittedRoofline, Some(system)).expect("fallback");
            let nearest = kernels::nearest_system(&p, gpu.capability(), Some(system));
            let mut row = LogoRow { system, engine, nearest, scaled_errors: Vec::new(), roofline_errors: Vec::new() };
            for m in &models {
                let dep = Deployment::single(m);
                let build = |pr: &Provider| {
                    ComposedCost::build(
                        m,
                        &gpu,
                        &dep,
                        GraphRule::Eager,
                        pr,
                        String::new(),
                        5.0,
                        0.7,
                        BLIS_SYNC_CPU,
                        None,
                    )
                    .expect("a dense card")
                };
                let (truth, a, b) = (build(&Provider::Table(own)), build(&scaled), build(&roof));
                for s in &shapes {
                    let t = truth.gpu_us(s);
                    row.scaled_errors.push((a.gpu_us(s) / t - 1.0).abs());
                    row.roofline_errors.push((b.gpu_us(s) / t - 1.0).abs());
                }
            }
            rows.push(row);
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    /// Llama-3.1-8B and the H100 of the built-in cards.
    fn llama8b_h100() -> (crate::cards::ModelCard, crate::cards::GpuCard) {
        let res = crate::builtin::resources().unwrap();
        let model = res.models.iter().find(|m| m.id == "llama-3.1-8b-instruct").unwrap().clone();
        let gpu = res.gpus.iter().find(|g| g.id == "h100-80gb").unwrap().clone();
        (model, gpu)
    }

    /// The composed cost of `model` on `gpu` under `engine` as `dep`, from the GPU's provider,
    /// with vLLM's 512-token graph rule and the engine's synchronous CPU term at TP `tp`.
    fn build_on(
        model: &crate::cards::ModelCard,
        gpu: &crate::cards::GpuCard,
        engine: &str,
        dep: &Deployment,
        tp: u32,
    ) -> ComposedCost {
        let (p, src) = provider_for(gpu, engine, FALLBACK, None).unwrap();
        ComposedCost::build(model, gpu, dep, GraphRule::VllmTokens(512), &p, src, 5.0, 0.7, sync_cpu(engine, tp), None)
            .expect("a dense card")
    }

    #[test]
    fn expected_max_of_normals_matches_closed_forms_and_its_integral() {
        use super::{expected_max_by_integral, expected_max_of_normals};
        let pi = std::f64::consts::PI;
        assert_eq!(expected_max_of_normals(1), 0.0);
        assert!((expected_max_of_normals(2) - 1.0 / pi.sqrt()).abs() < 1e-5);
        assert!((expected_max_of_normals(3) - 1.5 / pi.sqrt()).abs() < 1e-5);
        for n in 2..=16 {
            let (t, i) = (expected_max_of_normals(n), expected_max_by_integral(n));
            assert!((t - i).abs() < 1e-5, "n = {n}: table {t}, integral {i}");
        }
        // Past the table: the integral, still growing slowly (≈ √(2 ln n)).
        assert!(expected_max_of_normals(17) > expected_max_of_normals(16));
        assert!(expected_max_of_normals(64) < 2.5);
    }

    use super::*;
    use crate::cost::{us_to_ns, StepShape};

    /// The padded sizes are the engines' capture lists: vLLM 0.9–0.11 `[1, 2, 4] +
    /// range(8, 513, 8)`, vLLM 0.11.1+ `[1, 2, 4] + range(8, 256, 8) + range(256, 513, 16)`,
    /// SGLang's lists as each release builds them (`config::sglang_capture_list`), each capped
    /// at its largest captured size (which the list always holds).
    #[test]
    fn graphs_replay_at_the_next_captured_size() {
        let capture = |rule: GraphRule, max: u64| -> Vec<u64> {
            let mut v = vec![1, 2, 4];
            let step16 = !matches!(rule, GraphRule::VllmTokens(_));
            let mut x = 8;
            while x <= max {
                v.push(x);
                x += if step16 && x >= 256 { 16 } else { 8 };
            }
            v.retain(|&c| c <= max);
            if v.last() != Some(&max) {
                v.push(max);
            }
            v
        };
        for rule in [GraphRule::VllmTokens(512), GraphRule::VllmTokensStep16Above256(512)] {
            let max = rule.max().unwrap();
            let sizes = capture(rule, max);
            for m in 1..=max {
                let want = *sizes.iter().find(|&&c| c >= m).unwrap();
                assert_eq!(rule.padded(m), want, "{rule:?} at {m}");
            }
        }
        // SGLang: against the capture lists as the releases build them
        // (`config::sglang_capture_list`), for both list shapes, the device memories whose lists
        // differ, settings on and off the list, and pools below and above them.
        use crate::engine::Version;
        for v in [Version::new(0, 4, 10), Version::new(0, 5, 2), Version::new(0, 5, 3), Version::new(0, 5, 10)] {
            for mem in [24_000.0, 81_559.0, 143_771.0, 183_359.0] {
                for setting in [
                    None,
                    Some(3),
                    Some(8),
                    Some(80),
                    Some(100),
                    Some(160),
                    Some(200),
                    Some(256),
                    Some(600),
                    Some(1000),
                ] {
                    for pool in [2, 10, 150, 250, 4096] {
                        let sizes = crate::config::sglang_capture_list(v, mem, setting, pool);
                        let max = u64::from(*sizes.last().unwrap());
                        let rule = GraphRule::sglang(v, mem, max);
                        for m in 1..=max {
                            let want = u64::from(*sizes.iter().find(|&&c| u64::from(c) >= m).unwrap());
                            assert_eq!(rule.padded(m), want, "{v} {mem} MiB {setting:?} pool {pool} at {m}: {sizes:?}");
                        }
                    }
                }
            }
        }
        // The lists' known shapes.
        let list = |v, mem, s, pool| crate::config::sglang_capture_list(v, mem, s, pool);
        let (v0410, v053, v0510) = (Version::new(0, 4, 10), Version::new(0, 5, 3), Version::new(0, 5, 10));
        assert_eq!(list(v0410, 81_559.0, None, 4096).last(), Some(&160), "H100, 0.4.10: ends at 160");
        assert_eq!(list(v0410, 143_771.0, None, 4096).last(), Some(&256), "H200, 0.4.10: ends at 256");
        assert_eq!(list(v0410, 183_359.0, None, 4096).last(), Some(&512), "B200, 0.4.10: ends at 512");
        assert_eq!(list(v0410, 81_559.0, Some(200), 4096).last(), Some(&192), "0.4.10 extends by 16 from 160");
        assert_eq!(list(v0410, 81_559.0, None, 100).last(), Some(&100), "the pool's size is captured");
        assert!(list(v053, 81_559.0, Some(256), 4096).contains(&12));
        assert_eq!(
            list(v053, 81_559.0, Some(100), 4096).last(),
            Some(&96),
            "0.5.3: a setting off the list is not captured"
        );
        assert_eq!(list(v0510, 81_559.0, Some(100), 4096).last(), Some(&100), "0.5.10: it is");
        assert_eq!(list(v053, 183_359.0, Some(1000), 4096).last(), Some(&992), "by 32 from 512");
        assert_eq!(GraphRule::VllmTokens(512).padded(300), 304);
        assert_eq!(GraphRule::VllmTokensStep16Above256(512).padded(300), 304);
        assert_eq!(GraphRule::VllmTokensStep16Above256(512).padded(257), 272);
        assert_eq!(GraphRule::VllmTokens(512).padded(257), 264);
        assert_eq!(GraphRule::Eager.padded(5), 5);
    }

    /// vLLM's last graph: `min(2 × max_num_seqs, 512)` within `max_num_batched_tokens`, down to
    /// the largest size in the capture list.
    #[test]
    fn vllm_graphs_end_at_the_largest_captured_size_under_its_cap() {
        use crate::engine::Version;
        let (v11, v12) = (Version::new(0, 11, 0), Version::new(0, 12, 0));
        assert_eq!(GraphRule::vllm(v11, 512, 256, 8192), GraphRule::VllmTokens(512));
        assert_eq!(GraphRule::vllm(v12, 512, 1024, 8192), GraphRule::VllmTokensStep16Above256(512));
        assert_eq!(GraphRule::vllm(v11, 512, 64, 8192), GraphRule::VllmTokens(128));
        assert_eq!(GraphRule::vllm(v11, 512, 5, 8192), GraphRule::VllmTokens(8));
        assert_eq!(GraphRule::vllm(v11, 512, 3, 8192), GraphRule::VllmTokens(4));
        assert_eq!(GraphRule::vllm(v11, 512, 1, 8192), GraphRule::VllmTokens(2));
        assert_eq!(GraphRule::vllm(v11, 512, 150, 8192), GraphRule::VllmTokens(296));
        assert_eq!(GraphRule::vllm(v12, 512, 150, 8192), GraphRule::VllmTokensStep16Above256(288));
        assert_eq!(GraphRule::vllm(v12, 512, 256, 300), GraphRule::VllmTokensStep16Above256(288));
        // 0.11.1 already steps by 16 from 256 (the defaults audit of 2026-12-06).
        assert_eq!(GraphRule::vllm(Version::new(0, 11, 1), 512, 150, 8192), GraphRule::VllmTokensStep16Above256(288));
        // A step of 9 or 10 tokens under max_num_seqs 5 runs eagerly: the last graph is 8.
        assert_eq!(GraphRule::vllm(v11, 512, 5, 8192).padded(7), 8);
        // From 0.21 a budget under the ceiling is captured even off the stride (300, where the
        // grid stops at 288); from 0.31 max_num_seqs too (100, where the grid has 96 and 104).
        let (v21, v31) = (Version::new(0, 21, 0), Version::new(0, 31, 0));
        let r = GraphRule::vllm(v21, 512, 256, 300);
        assert_eq!(r.max(), Some(300));
        assert_eq!((r.padded(289), r.padded(200), r.padded(300)), (300, 200, 300));
        assert_eq!(GraphRule::vllm(Version::new(0, 20, 0), 512, 256, 300).max(), Some(288));
        let r = GraphRule::vllm(v31, 512, 100, 8192);
        assert_eq!((r.padded(97), r.padded(100), r.padded(101), r.padded(200)), (100, 100, 104, 200));
        assert_eq!(GraphRule::vllm(Version::new(0, 30, 0), 512, 100, 8192).padded(97), 104);
        // On the grid: nothing changes.
        assert_eq!(GraphRule::vllm(v31, 512, 256, 8192), GraphRule::VllmTokensStep16Above256(512));
    }

    /// In a graph a step's linear layers run at the padded size (a decode batch of 5 costs
    /// what one of 8 does but for attention); eager steps run at their own size.
    #[test]
    fn padded_rows_cost_their_linear_layers_not_their_attention() {
        let (model, gpu) = &llama8b_h100();
        let (p, src) = provider_for(gpu, "vllm", FALLBACK, None).unwrap();
        let dep = Deployment::single(model);
        let graph = ComposedCost::build(
            model,
            gpu,
            &dep,
            GraphRule::VllmTokens(512),
            &p,
            src.clone(),
            5.0,
            0.7,
            VLLM_SYNC_CPU,
            None,
        )
        .expect("a dense card");
        let eager = ComposedCost::build(model, gpu, &dep, GraphRule::Eager, &p, src, 5.0, 0.7, VLLM_SYNC_CPU, None)
            .expect("a dense card");
        // Context 1 a request: attention is a few µs; the rest is the linear layers and LM head.
        let tiny = |b: u64| StepShape::decodes(b, b);
        let lm = |c: &ComposedCost, b: u64| c.lm_head.at(b as f64) * 1e3;
        let linear = |c: &ComposedCost, b: u64| c.gpu_us(&tiny(b)) - lm(c, b);
        // vLLM: the LM head runs outside the graph on the real positions.
        let (g5, e8) = (graph.gpu_us(&tiny(5)) - lm(&graph, 5), eager.gpu_us(&tiny(8)) - lm(&eager, 8));
        assert!((g5 - e8).abs() < 0.02 * e8, "graph at 5 {g5} vs eager at 8 {e8}");
        assert!((linear(&eager, 5) - linear(&eager, 8)).abs() > 1e-6, "the table distinguishes 5 from 8 rows");
        // Attention is on the real rows: at a long context, 5 decodes attend less than 8.
        let long = |b: u64| StepShape::decodes(b, b * 4096);
        assert!(graph.gpu_us(&long(8)) > graph.gpu_us(&long(5)));
        // Beyond the largest graph a step runs eagerly, unpadded.
        let mut big = StepShape::default();
        big.add_prefill(600, 0);
        assert_eq!(graph.gpu_us(&big), eager.gpu_us(&big));
    }

    /// Graphs turned off (`enforce_eager`): the steps the engine's rule would have replayed as
    /// graphs pay the eager launch floor and the exposed launch time a layer; a step no graph
    /// covers costs the same either way.
    #[test]
    fn graphs_turned_off_cost_the_steps_they_would_have_covered() {
        let (model, gpu) = &llama8b_h100();
        let (p, src) = provider_for(gpu, "vllm", FALLBACK, None).unwrap();
        let on = Deployment::single(model);
        let off = Deployment { cuda_graphs: false, ..on.clone() };
        let rule = GraphRule::VllmTokens(512);
        let eager = ComposedCost::build(model, gpu, &off, rule, &p, src.clone(), 5.0, 0.7, VLLM_SYNC_CPU, None)
            .expect("a dense card");
        // The same eager kernels, where no graph was forgone (the reference).
        let plain = ComposedCost::build(model, gpu, &on, GraphRule::Eager, &p, src, 5.0, 0.7, VLLM_SYNC_CPU, None)
            .expect("a dense card");
        let layers = f64::from(model.num_layers);
        for b in [1u64, 8, 64] {
            let d = StepShape::decodes(b, b * 1024);
            let gpu_eager = plain.step_us(&d) - VLLM_SYNC_CPU.step_us - VLLM_SYNC_CPU.per_seq_us * b as f64;
            let want = gpu_eager.max(EAGER_LAUNCH_FLOOR_US_PER_LAYER * layers)
                + EAGER_EXPOSED_LAUNCH_US_PER_LAYER * layers
                + VLLM_SYNC_CPU.step_us
                + VLLM_SYNC_CPU.per_seq_us * b as f64;
            assert!((eager.step_us(&d) - want).abs() < 1e-6, "batch {b}: {} vs {want}", eager.step_us(&d));
            assert!(eager.step_us(&d) > plain.step_us(&d));
        }
        // A prefill of 2,048 tokens is past the largest graph: eager either way.
        let mut big = StepShape::default();
        big.add_prefill(0, 2048);
        assert_eq!(eager.step_us(&big), plain.step_us(&big));
    }

    /// A step without CPU/GPU overlap adds its engine's synchronous CPU time to the GPU's
    /// (vLLM: 0.6 ms + 12 µs a sequence at TP 1, 0.8 ms at TP > 1; SGLang: BLIS's figures);
    /// an overlapped step costs the larger of its GPU time and BLIS's residual, whatever the
    /// engine. Checked through the configuration path a scenario takes (`cost::sync_cpu`).
    #[test]
    fn a_synchronous_step_adds_its_engines_cpu_time_and_an_overlapped_one_hides_it() {
        let (model, gpu) = &llama8b_h100();
        let dep = Deployment::single(model);
        let build = |engine: &str, tp: u32| build_on(model, gpu, engine, &dep, tp);
        let (vllm, vllm_tp, sglang) = (build("vllm", 1), build("vllm", 2), build("sglang", 1));
        for b in [1u64, 8, 64] {
            let sync = StepShape::decodes(b, b * 2048);
            let overlapped = StepShape { cpu_overlapped: true, ..sync };
            let n = b as f64;
            let close = |a: f64, e: f64| (a - e).abs() < 1e-9 * e.max(1.0);
            assert!(close(vllm.step_us(&sync), vllm.gpu_us(&sync) + 600.0 + 12.0 * n), "vLLM TP 1 at {b}");
            assert!(close(vllm_tp.step_us(&sync), vllm_tp.gpu_us(&sync) + 800.0 + 12.0 * n), "vLLM TP 2 at {b}");
            assert!(close(sglang.step_us(&sync), sglang.gpu_us(&sync) + 126.0 + 4.0 * n), "SGLang at {b}");
            for c in [&vllm, &vllm_tp, &sglang] {
                assert!(close(c.step_us(&overlapped), c.gpu_us(&overlapped).max(126.0 + 4.0 * n)), "overlap at {b}");
            }
        }
    }

    /// Each element-wise kernel costs a fixed 3 µs besides its bytes (four a layer, two a step),
    /// and a compiled vLLM (CUDA graphs on) takes back out of its fp8 GEMMs the three
    /// quantisations a layer it fuses (3 µs and 3 bytes an input element each); SGLang, bf16
    /// weights and `enforce_eager` take none out.
    #[test]
    fn element_wise_kernels_carry_a_fixed_time_and_compiled_vllm_fuses_fp8_quantisations() {
        let (model, gpu) = &llama8b_h100();
        let layers = f64::from(model.num_layers);
        let build = |engine: &str, dep: &Deployment| build_on(model, gpu, engine, dep, 1);
        // bf16: the linear part of a step is its GEMMs, the element-wise bytes and the fixed time.
        let bf16 = Deployment::single(model);
        let c = build("vllm", &bf16);
        for m in [1u64, 7, 300] {
            let gemm_us: f64 = c.gemms.iter().map(|g| g.at(m as f64)).sum::<f64>() * 1e3;
            let want = layers * gemm_us
                + c.elementwise_us_per_token * m as f64
                + ELEMENTWISE_CONSTANT_US * (ELEMENTWISE_OPS_PER_LAYER * layers + ELEMENTWISE_OPS_PER_STEP);
            assert!((c.per_token_count_us(m) - want).abs() < 1e-9 * want, "m = {m}");
        }
        assert!(!fp8_quant_fused("sglang", true) && !fp8_quant_fused("vllm", false) && fp8_quant_fused("vllm", true));
        // fp8 weights: compiled vLLM against the same tables eagerly; SGLang keeps its quantisations.
        let fp8 = Deployment { quantization: Some("fp8".into()), linear_weight_bytes: 1, ..bf16.clone() };
        let eager = Deployment { cuda_graphs: false, ..fp8.clone() };
        let (compiled, uncompiled) = (build("vllm", &fp8), build("vllm", &eager));
        let (h, i) = (f64::from(model.hidden_size), f64::from(model.intermediate_size.unwrap()));
        let bytes_per_token = 3.0 * (h + h + i);
        for m in [1u64, 64, 4096] {
            let taken = uncompiled.per_token_count_us(m) - compiled.per_token_count_us(m);
            let want = layers
                * (FP8_QUANTS_FUSED_PER_LAYER * ELEMENTWISE_CONSTANT_US
                    + bytes_per_token * m as f64 / (gpu.memory_bandwidth_bytes_per_s * ELEMENTWISE_BW_EFF) * 1e6);
            assert!((taken - want).abs() < 1e-9 * want, "m = {m}: {taken} vs {want}");
        }
        let (sg, sg_eager) = (build("sglang", &fp8), build("sglang", &eager));
        assert_eq!(sg.per_token_count_us(64), sg_eager.per_token_count_us(64));
        assert_eq!(sg.fused_quant_kernels, 0.0);
    }

    /// On a GPU without FP8 tensor cores (the A100) fp8 weights run weight-only: the GEMMs read
    /// one-byte weights at the bf16 rate, no activation quantisation is fused away (there is none
    /// to fuse), and the cost source says so.
    #[test]
    fn fp8_weights_on_an_a100_run_weight_only_with_nothing_fused() {
        let res = crate::builtin::resources().unwrap();
        let model = res.models.iter().find(|m| m.id == "llama-3.1-8b-instruct").unwrap().clone();
        let gpu = res.gpus.iter().find(|g| g.id == "a100-80gb").unwrap().clone();
        assert!(!gpu.has_fp8_tensor_cores() && llama8b_h100().1.has_fp8_tensor_cores());
        let build = |dep: &Deployment| build_on(&model, &gpu, "vllm", dep, 1);
        let bf16 = Deployment::single(&model);
        let fp8 = Deployment { quantization: Some("fp8".into()), linear_weight_bytes: 1, ..bf16.clone() };
        let (b, f) = (build(&bf16), build(&fp8));
        assert_eq!(f.fused_quant_kernels, 0.0);
        assert_eq!(f.fused_quant_us_per_token, 0.0);
        assert!(f.source.contains("weight-only") && !b.source.contains("weight-only"), "{}", f.source);
        // Decode (memory-bound): about half the weight bytes; prefill (compute-bound): the bf16 time.
        let (gb, gf) = (&b.gemms[2], &f.gemms[2]);
        let decode = gf.at(1.0) / gb.at(1.0);
        assert!((0.45..0.75).contains(&decode), "decode GEMM fp8/bf16 = {decode}");
        let prefill = gf.at(4096.0) / gb.at(4096.0);
        assert!((0.95..=1.0).contains(&prefill), "prefill GEMM fp8/bf16 = {prefill}");
    }

    /// vLLM's FlashAttention 2 (compute capability 8.x) runs the decodes of a step with prefill
    /// chunks without packing a KV head's query heads: they cost the packed decode table at
    /// `heads / kv_heads` times their batch; a decode-only step, a prefill-only step, Hopper's
    /// FlashAttention 3 and another backend are unchanged.
    /// Qwen3-14B on an A100: its card, the GPU, and its composed cost without and with
    /// FlashAttention 2's unpacked mixed decodes.
    fn qwen3_14b_a100_plain_and_fa2() -> (ModelCard, GpuCard, ComposedCost, ComposedCost) {
        let res = crate::builtin::resources().unwrap();
        let model = res.models.iter().find(|m| m.id == "qwen3-14b").unwrap().clone();
        let a100 = res.gpus.iter().find(|g| g.id == "a100-80gb").unwrap().clone();
        let dep = Deployment::single(&model);
        let plain = build_on(&model, &a100, "vllm", &dep, 1);
        let mut fa2 = build_on(&model, &a100, "vllm", &dep, 1);
        fa2.apply_engine_kernels(EngineKernels { unpacked_mixed_decodes: Some(1.0), ..Default::default() });
        (model, a100, plain, fa2)
    }

    /// Qwen3-14B's mixed step of 64 decodes at a 2,048-token context beside a 1,984-token chunk,
    /// and what unpacking its decodes adds in full, µs: the decode table at five times the batch
    /// (40 query heads over 8 KV heads) less at the batch, over the layers.
    fn mixed_step_and_unpacked_surcharge(model: &ModelCard, plain: &ComposedCost) -> (StepShape, f64) {
        let (d, ctx) = (64u64, 2048u64);
        let mut mixed = StepShape::decodes(d, d * ctx);
        mixed.add_prefill(0, 2048 - d);
        let layers = f64::from(model.num_layers);
        (mixed, layers * 1e3 * (plain.gen.at((5 * d) as f64, ctx as f64) - plain.gen.at(d as f64, ctx as f64)))
    }

    #[test]
    fn fa2_mixed_steps_time_their_decodes_unpacked() {
        let res = crate::builtin::resources().unwrap();
        let (model, a100, plain, fa2) = qwen3_14b_a100_plain_and_fa2();
        let h100 = llama8b_h100().1;
        assert!(vllm_fa2_unpacked_mixed_decodes(a100.capability(), None));
        assert!(vllm_fa2_unpacked_mixed_decodes(a100.capability(), Some("flash_attn")));
        assert!(!vllm_fa2_unpacked_mixed_decodes(a100.capability(), Some("flashinfer")));
        assert!(!vllm_fa2_unpacked_mixed_decodes(h100.capability(), None));
        for (id, fa2) in [("rtx-5090", true), ("b200", false)] {
            let g = res.gpus.iter().find(|g| g.id == id).unwrap();
            assert_eq!(vllm_fa2_unpacked_mixed_decodes(g.capability(), None), fa2, "{id}");
        }
        assert!(fa2.source.contains("unpacked") && !plain.source.contains("unpacked"), "{}", fa2.source);
        // Qwen3-14B: 40 query heads over 8 KV heads.
        assert_eq!(fa2.mixed_decode_batch_per_decode, 5);
        let (mixed, want) = mixed_step_and_unpacked_surcharge(&model, &plain);
        let got = fa2.gpu_us(&mixed) - plain.gpu_us(&mixed);
        assert!(want > 0.0 && (got - want).abs() < 1e-6 * want, "{got} vs {want}");
        let (d, ctx) = (64u64, 2048u64);
        let decodes = StepShape::decodes(d, d * ctx);
        assert_eq!(fa2.gpu_us(&decodes), plain.gpu_us(&decodes));
        let mut prefill = StepShape::default();
        prefill.add_prefill(0, 2048);
        assert_eq!(fa2.gpu_us(&prefill), plain.gpu_us(&prefill));
        // Without grouped KV heads there is nothing to unpack.
        let mut mha = model.clone();
        mha.num_kv_heads = mha.num_attention_heads;
        let mut c = build_on(&mha, &a100, "vllm", &Deployment::single(&mha), 1);
        c.apply_engine_kernels(EngineKernels { unpacked_mixed_decodes: Some(1.0), ..Default::default() });
        assert_eq!(c.mixed_decode_batch_per_decode, 1);
    }

    /// Ada (8.9) and Blackwell RTX (12.x) cards pay [`FA2_UNPACKED_SHARE_ADA_BLACKWELL`] of the
    /// unpacked kernel's extra time, Ampere all of it; the cost source says which.
    #[test]
    fn ada_and_blackwell_pay_a_share_of_the_unpacked_surcharge() {
        let res = crate::builtin::resources().unwrap();
        for (id, share) in
            [("a100-80gb", 1.0), ("a100-40gb", 1.0), ("l40s", 0.4), ("rtx-5090", 0.4), ("rtx-pro-6000", 0.4)]
        {
            let g = res.gpus.iter().find(|g| g.id == id).unwrap();
            assert_eq!(vllm_fa2_unpacked_share(g.capability()), share, "{id}");
        }
        assert_eq!(vllm_fa2_unpacked_share(Some((8, 6))), 1.0);
        let (model, a100, plain, _) = qwen3_14b_a100_plain_and_fa2();
        let dep = Deployment::single(&model);
        let mut part = build_on(&model, &a100, "vllm", &dep, 1);
        part.apply_engine_kernels(EngineKernels { unpacked_mixed_decodes: Some(0.4), ..Default::default() });
        assert!(part.source.contains("40% of the unpacked kernel's extra time"), "{}", part.source);
        let (mixed, whole) = mixed_step_and_unpacked_surcharge(&model, &plain);
        let got = part.gpu_us(&mixed) - plain.gpu_us(&mixed);
        assert!((got - 0.4 * whole).abs() < 1e-6 * whole, "{got} vs 0.4 × {whole}");
        assert!((part.unpacked_decode_surcharge_us(&mixed) - got).abs() < 1e-6 * whole);
    }

    /// FlashAttention 2 packs a KV head's query heads whenever the step's longest query is one
    /// token (`max_seqlen_q == 1`), prefill chunks or not: decodes beside chunks of one token each
    /// (a prompt whose last block is all its prefix cache leaves, a chunk the budget cut to one)
    /// run packed; one chunk of two tokens or more unpacks them.
    #[test]
    fn decodes_beside_one_token_chunks_stay_packed() {
        let (_, _, plain, fa2) = qwen3_14b_a100_plain_and_fa2();
        let (d, ctx) = (64u64, 2048u64);
        let mut ones = StepShape::decodes(d, d * ctx);
        ones.add_prefill(1983, 1);
        ones.add_prefill(511, 1);
        assert_eq!(fa2.gpu_us(&ones), plain.gpu_us(&ones));
        assert_eq!(fa2.unpacked_decode_surcharge_us(&ones), 0.0);
        let mut two = ones;
        two.add_prefill(0, 2);
        assert!(fa2.gpu_us(&two) > plain.gpu_us(&two));
        assert!(fa2.unpacked_decode_surcharge_us(&two) > 0.0);
    }

    /// vLLM's all-reduce + RMSNorm fusion takes the two add + RMSNorm kernels a layer (their
    /// fixed time and bytes) out of the steps it covers, and nothing else; at TP 1 it is a no-op.
    #[test]
    fn fused_allreduce_rms_drops_two_norm_kernels_a_layer_in_the_steps_it_covers() {
        let (model, gpu) = &llama8b_h100();
        let layers = f64::from(model.num_layers);
        let tp2 = Deployment { tensor_parallel_size: 2, num_gpus: 2, ..Deployment::single(model) };
        let build = |dep: &Deployment| {
            let (p, src) = provider_for(gpu, "vllm", FALLBACK, None).unwrap();
            ComposedCost::build(model, gpu, dep, GraphRule::VllmTokens(512), &p, src, 5.0, 0.7, VLLM_SYNC_CPU_TP, None)
                .expect("a dense card")
        };
        let plain = build(&tp2);
        let mut fused = build(&tp2);
        fused.fuse_allreduce_rms(128);
        assert!(fused.source.contains("all-reduce + RMSNorm fused") && !plain.source.contains("fused"));
        let norm_bytes = 4.0 * f64::from(model.hidden_size) * 2.0;
        for m in [1u64, 64, 128] {
            let want = layers
                * 2.0
                * (ELEMENTWISE_CONSTANT_US
                    + norm_bytes * m as f64 / (gpu.memory_bandwidth_bytes_per_s * ELEMENTWISE_BW_EFF) * 1e6);
            let taken = plain.per_token_count_us(m) - fused.per_token_count_us(m);
            assert!((taken - want).abs() < 1e-9 * want, "m = {m}: {taken} vs {want}");
        }
        assert_eq!(plain.per_token_count_us(129), fused.per_token_count_us(129), "past the cap: unfused");
        let mut tp1 = build(&Deployment::single(model));
        let before = tp1.per_token_count_us(1);
        tp1.fuse_allreduce_rms(128);
        assert_eq!(tp1.per_token_count_us(1), before);
    }

    /// SGLang's own count of a layer's small kernels (docs/sglang.md §9): Qwen3's q/k norm one
    /// more than Llama's, and the copy of q from two tokens on; each adds the fixed time.
    #[test]
    fn sglang_layer_small_kernels_follow_the_model_and_the_step_size() {
        let res = crate::builtin::resources().unwrap();
        let card = |id: &str| res.models.iter().find(|m| m.id == id).unwrap().clone();
        assert_eq!(crate::config::sglang_layer_small_kernels(&card("llama-3.1-8b-instruct")), (4.0, 1.0));
        assert_eq!(crate::config::sglang_layer_small_kernels(&card("qwen3-8b")), (5.0, 1.0));
        let (model, gpu) = &llama8b_h100();
        let layers = f64::from(model.num_layers);
        let build = || {
            let (p, src) = provider_for(gpu, "sglang", FALLBACK, None).unwrap();
            let dep = Deployment::single(model);
            ComposedCost::build(model, gpu, &dep, GraphRule::Eager, &p, src, 5.0, 0.7, BLIS_SYNC_CPU, None)
                .expect("a dense card")
        };
        let plain = build();
        let mut sg = build();
        sg.apply_engine_kernels(EngineKernels {
            allreduce_rms_fused_up_to: None,
            layer_small_kernels: Some((5.0, 1.0)),
            unpacked_mixed_decodes: None,
            nccl_all_reduce: false,
        });
        for (m, more) in [(1u64, 1.0), (2, 2.0), (512, 2.0)] {
            let d = sg.per_token_count_us(m) - plain.per_token_count_us(m);
            let want = layers * more * ELEMENTWISE_CONSTANT_US;
            assert!((d - want).abs() < 1e-9 * want, "m = {m}: {d} vs {want}");
        }
    }

    /// The memoised step duration is the computed one, for decode steps seen once or
    /// many times (colliding in the memo's slots), with and without the CPU overlap,
    /// and for steps the memo does not hold.
    #[test]
    fn memoised_steps_equal_computed_steps() {
        let (model, gpu) = &llama8b_h100();
        let (p, src) = provider_for(gpu, "vllm", FALLBACK, None).unwrap();
        let c = ComposedCost::build(
            model,
            gpu,
            &Deployment::single(model),
            GraphRule::VllmTokens(512),
            &p,
            src,
            5.0,
            0.7,
            VLLM_SYNC_CPU,
            None,
        )
        .expect("a dense card");
        let mut x: u64 = 7;
        let mut rnd = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for round in 0..3 {
            for _ in 0..20_000 {
                let b = 1 + rnd(if round == 0 { 8 } else { 700 });
                let mut s = StepShape::decodes(b, b * (1 + rnd(40_000)));
                s.cpu_overlapped = rnd(2) == 1;
                let want = us_to_ns(c.step_us(&s)).max(1);
                assert_eq!(c.step_ns(&s), want, "{s:?}");
                assert_eq!(c.step_ns(&s), want, "{s:?} (memoised)");
            }
        }
        let mut s = StepShape::default();
        s.add_prefill(100, 300);
        s.add_decode(2000);
        assert_eq!(c.step_ns(&s), us_to_ns(c.step_us(&s)).max(1));
    }

    /// A fitted profile corrects the composed cost part by part: a decode-only step by how
    /// much the decode terms moved, a prefill-only step by how much the prefill terms moved
    /// (a per-step constant fitted on decode steps leaves it alone), and a mixed step as its
    /// decodes alone plus what its chunks add, each by its own terms.
    #[test]
    fn a_profile_corrects_the_decode_part_and_the_prefill_part_by_their_own_terms() {
        let (model, gpu) = &llama8b_h100();
        let dep = Deployment::single(model);
        let c = std::sync::Arc::new(build_on(model, gpu, "vllm", &dep, 1));
        let mut cost = crate::cost::CostModel::roofline(model, gpu, &dep, &crate::cost::PriorEfficiencies::default());
        cost.composed = Some(c.clone());
        let prior = cost.coefficients();
        let mut fitted = prior.clone();
        fitted.step_us = Some(prior.step_us.unwrap() * 0.8);
        fitted.prefill_token_us = Some(prior.prefill_token_us.unwrap() * 1.25);
        let mut corrected = cost.clone();
        corrected.correct(&fitted, &prior, crate::cost::CoefficientSource::Profile);
        let close = |a: u64, b: f64, what: &str| assert!((a as f64 - b).abs() <= 1.0, "{what}: {a} vs {b}");
        let k = |o: &crate::cost::CostCoefficients, n: &str| o.get(n).unwrap();
        // Decodes only: the decode terms' ratio, step_us included.
        let dec = StepShape::decodes(32, 32 * 1500);
        let lin = |o: &crate::cost::CostCoefficients| {
            k(o, "step_us") + 32.0 * (k(o, "per_seq_us") + k(o, "decode_token_us")) + 48_000.0 * k(o, "decode_kv_us")
        };
        close(corrected.step_ns(&dec), c.step_us(&dec) * 1e3 * lin(&fitted) / lin(&prior), "decodes");
        // A prefill alone: only the prefill terms' ratio; step_us's 0.8 does not reach it.
        let mut pre = StepShape::default();
        pre.add_prefill(0, 2000);
        let lin_pre = |o: &crate::cost::CostCoefficients| {
            k(o, "per_seq_us")
                + 2000.0 * k(o, "prefill_token_us")
                + pre.prefill_attention_pairs as f64 * k(o, "prefill_attention_us")
        };
        let want_pre = c.step_us(&pre) * lin_pre(&fitted) / lin_pre(&prior);
        close(corrected.step_ns(&pre), want_pre * 1e3, "prefill");
        assert!(want_pre > c.step_us(&pre) * 1.2, "the prefill moved with prefill_token_us");
        // Mixed: the decodes' own step by the decode ratio, the chunk's increment by the prefill one.
        let mut mixed = StepShape::default();
        for _ in 0..32 {
            mixed.add_decode(1500);
        }
        mixed.add_prefill(0, 2000);
        let only = c.step_us(&dec);
        let added = c.step_us(&mixed) - only;
        assert!(added > 0.0);
        close(
            corrected.step_ns(&mixed),
            (only * lin(&fitted) / lin(&prior) + added * lin_pre(&fitted) / lin_pre(&prior)) * 1e3,
            "mixed",
        );
        // At the reference nothing moves.
        let mut same = cost.clone();
        same.correct(&prior, &prior, crate::cost::CoefficientSource::Profile);
        for s in [&dec, &pre, &mixed] {
            close(same.step_ns(s), c.step_us(s) * 1e3, "at the reference");
        }
    }

    /// A MoE layer's MLP is the router GEMM plus the moe table's time at the step's tokens; the
    /// rest (QKV, O, element-wise, collectives) as dense. The table's number is read from the
    /// JSON here, not copied from an output.
    #[test]
    fn moe_step_is_the_dense_parts_plus_the_tables_experts() {
        let res = crate::builtin::resources().unwrap();
        let model = res.models.iter().find(|m| m.id == "qwen3-30b-a3b").unwrap().clone();
        let gpu = res.gpus.iter().find(|g| g.id == "h200").unwrap().clone();
        let dep = Deployment::single(&model);
        let (p, src) = provider_for(&gpu, "vllm", FALLBACK, None).unwrap();
        let c = ComposedCost::build(&model, &gpu, &dep, GraphRule::Eager, &p, src, 5.0, 0.7, VLLM_SYNC_CPU, None)
            .expect("a dense card");
        // The experts' curve of data/kernels/h200_sxm/vllm/moe.json: bf16, (2048, 768, 8, 128), moe_tp 1.
        let file: serde_json::Value =
            serde_json::from_str(include_str!("../../../data/kernels/h200_sxm/vllm/moe.json")).unwrap();
        assert_eq!(file["distribution"], "power_law_1.2");
        let curve = file["curves"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| {
                c["moe_dtype"] == "bfloat16"
                    && c["hidden"] == 2048
                    && c["inter"] == 768
                    && c["topk"] == 8
                    && c["num_experts"] == 128
                    && c["moe_tp"] == 1
                    && c["moe_ep"] == 1
            })
            .expect("the curve");
        let toks: Vec<f64> = curve["num_tokens"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        let lat: Vec<f64> = curve["latency_ms"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        let i = toks.iter().position(|&t| t == 64.0).unwrap();
        let (m, experts_ms) = (64u64, lat[i]);
        // The router: the bf16 GEMM n = 128, k = 2048 of the GEMM table.
        let router = p.gemm(GemmShape { n: 128, k: 2048, fp8: false });
        assert_eq!(c.gemms[2], router);
        assert_eq!(c.gemms[3].at(64.0), experts_ms);
        let x = m as f64;
        let layers = f64::from(model.num_layers);
        let dense_parts = layers * 1e3 * (c.gemms[0].at(x) + c.gemms[1].at(x) + router.at(x))
            + c.elementwise_us_per_token * x
            + ELEMENTWISE_CONSTANT_US * (layers * ELEMENTWISE_OPS_PER_LAYER + ELEMENTWISE_OPS_PER_STEP);
        let want = dense_parts + layers * experts_ms * 1e3;
        assert!((c.per_token_count_us(m) - want).abs() < 1e-6, "{} vs {want}", c.per_token_count_us(m));
        // The QKV and O GEMMs are the dense ones of the card's attention.
        let (g, _, _) = model_shapes(&model, 1, false, 2);
        assert_eq!(c.gemms[0], p.gemm(g[0]));
        assert_eq!(c.gemms[1], p.gemm(g[1]));
        // The element-wise bytes: no SiLU·mul; the top-k softmax reads 128 logits.
        let (q, kv, d, h) = (32.0, 4.0, 128.0, 2048.0);
        let bytes = (2.0 * 4.0 * h + 2.0 * (q + kv) * d + 128.0) * 2.0 + 2.0 * kv * d * 2.0;
        let want_ew = layers * bytes * 1e6 / (gpu.memory_bandwidth_bytes_per_s * ELEMENTWISE_BW_EFF);
        assert!((c.elementwise_us_per_token - want_ew).abs() < 1e-9);
        // Between grid points log–log, beyond the last linear in tokens, below the first the first.
        let (j, k) = (toks.iter().position(|&t| t == 96.0).unwrap(), toks.iter().position(|&t| t == 128.0).unwrap());
        let t = (100.0f64 / 96.0).ln() / (128.0f64 / 96.0).ln();
        let want_100 = (lat[j].ln() + t * (lat[k].ln() - lat[j].ln())).exp();
        assert!((c.gemms[3].at(100.0) - want_100).abs() < 1e-12);
        let (tl, yl) = (toks[toks.len() - 1], lat[lat.len() - 1]);
        assert!((c.gemms[3].at(2.0 * tl) - 2.0 * yl).abs() < 1e-12);
        assert_eq!(c.gemms[3].at(0.5), lat[0]);
        assert!(c.source.contains("moe_perf (bfloat16, power_law_1.2, moe_tp 1, moe_ep 1"), "{}", c.source);
    }

    /// A block-fp8 card's shards that are not whole weight blocks (the engines' rule,
    /// [`fp8_block_misfit`]) are refused before any table is read: the SGLang B200 table holds
    /// fp8_block curves at moe_tp 4 and 8 for Qwen3-30B-A3B and at 8 for Qwen3-235B-A22B (shards
    /// of 192 and 96), which the engines never run.
    #[test]
    fn fp8_block_layouts_the_engines_refuse_are_never_timed() {
        let res = crate::builtin::resources().unwrap();
        let big = res.models.iter().find(|m| m.id == "qwen3-235b-a22b-fp8").unwrap().clone();
        let mut small = res.models.iter().find(|m| m.id == "qwen3-30b-a3b").unwrap().clone();
        small.quantization = Some("fp8".into());
        small.weight_block_size = Some(vec![128, 128]);
        // The rule: moe_intermediate_size / TP a multiple of 128 (and the attention shards).
        for (m, tp, bad) in [(&big, 1, false), (&big, 4, false), (&big, 8, true), (&small, 2, false), (&small, 4, true)]
        {
            let b = fp8_block_misfit(m, tp);
            assert_eq!(b.is_some(), bad, "{} TP {tp}: {b:?}", m.id);
            if let Some(b) = b {
                assert!(b.experts && b.what.contains("is not a multiple of the weight block's block_n 128"), "{b:?}");
            }
        }
        let b = fp8_block_misfit(&small, 8).unwrap();
        assert!(b.what.contains("768 / 8 = 96"), "{b:?}");
        // A bf16 card has no blocks.
        let bf16 = res.models.iter().find(|m| m.id == "qwen3-30b-a3b").unwrap();
        assert_eq!(fp8_block_misfit(bf16, 8), None);
        // The attention's shards: 64-wide heads leave one KV head a GPU 64 wide at TP 4.
        let mut narrow = big.clone();
        narrow.head_dim = 64;
        let b = fp8_block_misfit(&narrow, 4).unwrap();
        assert!(!b.experts && b.what.contains("QKV's key and value outputs per GPU at TP 4, 64"), "{b:?}");
        // vLLM from 0.29.0 refines the experts' scale blocks instead: gcd(128, 128, shard, hidden).
        assert_eq!(vllm_refined_moe_block(&big, 8), Some(64));
        assert_eq!(vllm_refined_moe_block(&small, 8), Some(32));
        assert_eq!(vllm_refined_moe_block(&big, 4), None);
        // And the cost is refused, whatever the table holds.
        let gpu = res.gpus.iter().find(|g| g.id == "b200").unwrap().clone();
        let (p, src) = provider_for(&gpu, "sglang", FALLBACK, None).unwrap();
        let t = p.tables();
        for (m, tp) in [(&big, 8u32), (&small, 4), (&small, 8)] {
            let shape = |dtype| MoeShape {
                hidden: m.hidden_size,
                inter: m.moe.as_ref().unwrap().moe_intermediate_size,
                topk: 8,
                num_experts: 128,
                dtype,
                moe_tp: tp,
            };
            assert!(t.moe(&shape("fp8_block"), gpu.memory_bandwidth_bytes_per_s).is_some(), "the table has it");
            let dep = Deployment { tensor_parallel_size: tp, num_gpus: tp, ..Deployment::single(m) };
            let e =
                ComposedCost::build(m, &gpu, &dep, GraphRule::Eager, &p, src.clone(), 5.0, 0.7, BLIS_SYNC_CPU, None)
                    .unwrap_err();
            for w in
                ["is not a multiple of the weight block's block_n 128", "check_quantized_moe_compatibility", "0.29.0"]
            {
                assert!(e.contains(w), "{w}: {e}");
            }
        }
        // TP 2 is timed from the table.
        let dep = Deployment { tensor_parallel_size: 2, num_gpus: 2, ..Deployment::single(&small) };
        ComposedCost::build(&small, &gpu, &dep, GraphRule::Eager, &p, src, 5.0, 0.7, BLIS_SYNC_CPU, None)
            .expect("768 / 2 = 384, three whole blocks");
    }
}
