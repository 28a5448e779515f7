//! The step cost model: how long one engine step takes, given its shape, and
//! the costs outside the GPU step (request ingress, output streaming).
//!
//! A step's duration is linear in its shape:
//!
//! ```text
//! step = step_us                                  constant per step (weights read, launch, scheduler CPU)
//!      + per_seq_us          × sequences scheduled
//!      + prefill_token_us    × prefill tokens        (linear layers, compute bound)
//!      + decode_token_us     × decode tokens
//!      + prefill_attention_us× Σ prefill token × context it attends to
//!      + decode_kv_us        × Σ decode token × context it reads (KV reads)
//! ```
//!
//! and, outside the step:
//!
//! * `request_ingress_us` per request: HTTP, tokenisation and hand-off to the
//!   engine core, between the client's dispatch and the request reaching the
//!   scheduler's waiting queue;
//! * `output_token_us` per output token: detokenisation and streaming. The
//!   front end handles a step's outputs one after the other, so this is a
//!   single-server queue; it adds latency, and becomes a bottleneck if a step's
//!   outputs take longer to stream than the next step takes to run.
//!
//! Published simulators that left out non-GPU time under-predicted TTFT by
//! 17–56% (BLIS #482); these terms are why they are here.
//!
//! The default coefficients are a **roofline prior** computed from the model
//! and GPU cards with efficiency factors ([`PriorEfficiencies`]); a fitted
//! profile (from `servesim calibrate`) replaces any of them. The linear form
//! adds compute and memory time where a roofline would take their maximum; at
//! the batch sizes serving runs at one term dominates, and a fit absorbs the
//! rest. This shortcut is listed in ARCHITECTURE.md.
//!
//! **A time-scaled engine** (`cost.time_scale` k, [`CostModel::time_scale`]): an engine k
//! times faster than the rest of the scenario says, as `servesim serve --time-scale k` runs
//! one (its wall clock runs k engine seconds a second, `emulator/src/clock.rs`). The prior (the
//! roofline coefficients, the composed cost from the kernel tables, its CPU terms) and the
//! scenario's inline coefficients are divided by k; so is each fixed front-end cost of an
//! engine ([`CostModel::scaled_ns`]). A fitted profile's coefficients are not: a profile is
//! fitted on the faster engine itself and records its scale (`engine.servesim_time_scale`),
//! its coefficients that engine's µs. Every time is computed in µs (f64), divided by k, and
//! rounded to whole ns once ([`us_to_ns`]): at k, a time is within half a nanosecond of the
//! unscaled one ÷ k, and exactly it where the unscaled time in ns is a multiple of k and k a
//! power of two. docs/calibration.md says how `calibrate` and `check` use it.

use serde::{Deserialize, Serialize};

use crate::cards::{GpuCard, ModelCard};
use crate::config::Deployment;

mod composed;
pub use composed::*;

/// The coefficients, every one optional: a scenario's inline values and a
/// fitted profile are both partial overlays on the prior.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostCoefficients {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_seq_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_token_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_token_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_attention_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_kv_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_ingress_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_token_us: Option<f64>,
}

/// Calls `$m!` with every coefficient's field name, in report order: the one
/// list the name-based accessors below are generated from.
macro_rules! for_each_coefficient {
    ($m:ident) => {
        $m!(
            step_us,
            per_seq_us,
            prefill_token_us,
            decode_token_us,
            prefill_attention_us,
            decode_kv_us,
            request_ingress_us,
            output_token_us
        )
    };
}

/// Names of the coefficients, in the order they are reported.
pub const COEFFICIENT_NAMES: [&str; 8] = [
    "step_us",
    "per_seq_us",
    "prefill_token_us",
    "decode_token_us",
    "prefill_attention_us",
    "decode_kv_us",
    "request_ingress_us",
    "output_token_us",
];

impl CostCoefficients {
    pub fn get(&self, name: &str) -> Option<f64> {
        macro_rules! get {
            ($($f:ident),*) => {
                match name {
                    $(stringify!($f) => self.$f,)*
                    _ => None,
                }
            };
        }
        for_each_coefficient!(get)
    }

    pub fn set(&mut self, name: &str, value: f64) {
        macro_rules! set {
            ($($f:ident),*) => {
                match name {
                    $(stringify!($f) => self.$f = Some(value),)*
                    _ => {}
                }
            };
        }
        for_each_coefficient!(set)
    }
}

/// Efficiency factors of the roofline prior. Each is a fraction of the card's
/// peak that the engine is assumed to reach; none was tuned to a measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorEfficiencies {
    /// Fraction of dense BF16 FLOP/s reached by the linear layers in prefill.
    #[serde(default = "d_prefill_mfu")]
    pub prefill_mfu: f64,
    /// The same for decode tokens' linear layers (small GEMMs run further from peak).
    #[serde(default = "d_decode_mfu")]
    pub decode_mfu: f64,
    /// Fraction of peak FLOP/s reached by prefill attention.
    #[serde(default = "d_attention_mfu")]
    pub attention_mfu: f64,
    /// Fraction of memory bandwidth reached when streaming the weights once per step.
    #[serde(default = "d_weight_bw")]
    pub weight_bandwidth_eff: f64,
    /// Fraction of memory bandwidth reached by paged KV reads in decode.
    #[serde(default = "d_kv_bw")]
    pub kv_bandwidth_eff: f64,
    /// CPU time per step outside the kernels (scheduler, input preparation, sampler).
    #[serde(default = "d_step_overhead")]
    pub step_overhead_us: f64,
    #[serde(default = "d_per_seq")]
    pub per_seq_us: f64,
    #[serde(default = "d_ingress")]
    pub request_ingress_us: f64,
    #[serde(default = "d_output_token")]
    pub output_token_us: f64,
    /// Latency of one tensor-parallel all-reduce (launch and synchronisation), µs.
    #[serde(default = "d_allreduce_latency")]
    pub allreduce_latency_us: f64,
    /// Fraction of the interconnect's bandwidth an all-reduce reaches.
    #[serde(default = "d_interconnect_eff")]
    pub interconnect_bandwidth_eff: f64,
}

// The prior's defaults. The efficiencies are round numbers typical of
// published MFU/MBU figures for dense decoder models, not fits. The non-GPU
// terms take their order of magnitude from BLIS's published fit on vLLM
// 0.15 (`docs/guide/latency-models.md`: β7≈126 µs/step plus β5≈32 µs/layer,
// β6≈4 µs/request, α2≈46 µs/output token), rounded.
fn d_prefill_mfu() -> f64 {
    0.6
}
fn d_decode_mfu() -> f64 {
    0.5
}
fn d_attention_mfu() -> f64 {
    0.4
}
fn d_weight_bw() -> f64 {
    0.8
}
fn d_kv_bw() -> f64 {
    0.6
}
fn d_step_overhead() -> f64 {
    1000.0
}
fn d_per_seq() -> f64 {
    4.0
}
fn d_ingress() -> f64 {
    2000.0
}
fn d_output_token() -> f64 {
    40.0
}
// All-reduce: a small NCCL or custom all-reduce takes a few µs on NVLink
// (NCCL's documented small-message latency); ring all-reduce bus bandwidth is
// typically 70–80% of the link's. Round numbers, not fits.
fn d_allreduce_latency() -> f64 {
    5.0
}
fn d_interconnect_eff() -> f64 {
    0.7
}

impl Default for PriorEfficiencies {
    fn default() -> Self {
        PriorEfficiencies {
            prefill_mfu: d_prefill_mfu(),
            decode_mfu: d_decode_mfu(),
            attention_mfu: d_attention_mfu(),
            weight_bandwidth_eff: d_weight_bw(),
            kv_bandwidth_eff: d_kv_bw(),
            step_overhead_us: d_step_overhead(),
            per_seq_us: d_per_seq(),
            request_ingress_us: d_ingress(),
            output_token_us: d_output_token(),
            allreduce_latency_us: d_allreduce_latency(),
            interconnect_bandwidth_eff: d_interconnect_eff(),
        }
    }
}

/// Where a resolved coefficient came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CoefficientSource {
    Prior,
    Profile,
    Scenario,
}

/// The resolved cost model: every coefficient has a value (µs).
#[derive(Clone, Debug, PartialEq)]
pub struct CostModel {
    pub step_us: f64,
    pub per_seq_us: f64,
    pub prefill_token_us: f64,
    pub decode_token_us: f64,
    pub prefill_attention_us: f64,
    pub decode_kv_us: f64,
    pub request_ingress_us: f64,
    pub output_token_us: f64,
    /// For each of [`COEFFICIENT_NAMES`], where its value came from.
    pub sources: [CoefficientSource; 8],
    /// The kernel-composed step cost, when it times the steps (the default
    /// where no profile or inline step coefficient overrides the prior); the
    /// six step coefficients above are then the linear roofline prior, kept
    /// as the calibration's starting point, and do not time anything.
    pub composed: Option<std::sync::Arc<ComposedCost>>,
    /// With `composed`: the six step coefficients at which the composed cost is
    /// taken as it is. When set, a step costs its composed time corrected part by
    /// part: its decodes' part × (the linear model's decode terms at the current
    /// coefficients ÷ at these), what its prefill chunks add × the same ratio of the
    /// prefill terms; so a calibration corrects the measured-kernel cost along the
    /// directions its data determine and leaves it exact elsewhere
    /// ([`CostModel::correct`]).
    pub reference: Option<[f64; 6]>,
    /// The engine runs this many times faster than its cards (and the scenario's inline
    /// coefficients) say: `cost.time_scale`, 1 by default ([`CostModel::scale_time`]). The
    /// coefficients above and `composed` are already divided by it; it is kept for the costs
    /// outside this model that a time-scaled engine also divides ([`CostModel::scaled_ns`]) and
    /// for the roofline floors a fit is judged against (`calib::fit::roofline_floors`).
    pub time_scale: f64,
}

/// At most this many prefill chunks of a step are kept one by one
/// ([`StepShape::chunks`]); more are merged into [`StepShape::rest`].
pub const MAX_CHUNKS: usize = 8;

/// One prefill chunk: `n` new tokens after `context` already computed ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Chunk {
    pub context: u64,
    pub n: u64,
}

/// The shape of one engine step, as the cost model sees it: totals for the
/// linear model, and each prefill chunk for the kernel-composed one (the
/// decodes are costed at their mean context, so their sum is enough).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepShape {
    pub num_seqs: u32,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
    /// Σ over prefill tokens of the context each attends to (itself included).
    pub prefill_attention_pairs: u64,
    /// Σ over decode tokens of the context each reads.
    pub decode_context_tokens: u64,
    /// The first [`MAX_CHUNKS`] prefill chunks, in scheduling order.
    pub chunks: [Chunk; MAX_CHUNKS],
    /// Prefill chunks in the step (`chunks` holds the first of them).
    pub num_chunks: u32,
    /// Chunks past the first [`MAX_CHUNKS`]: their count, tokens and
    /// attention pairs (costed as that many chunks of their mean shape).
    pub rest: (u64, u64, u64),
    /// The engine schedules this step while the previous one runs on the GPU (vLLM's
    /// async scheduling, SGLang's overlap scheduler on a GPU), so the step's CPU time
    /// overlaps the GPU's: the kernel-composed cost takes their maximum instead of their
    /// sum. The linear model ignores it (a fitted per-step constant absorbs the overlap).
    pub cpu_overlapped: bool,
}

impl StepShape {
    /// Adds a prefill chunk of `n` tokens whose first token sits after
    /// `context` already computed tokens.
    pub fn add_prefill(&mut self, context: u64, n: u64) {
        self.num_seqs += 1;
        self.prefill_tokens += n;
        // Σ_{i=1..n} (context + i)
        let pairs = n * context + n * (n + 1) / 2;
        self.prefill_attention_pairs += pairs;
        let i = self.num_chunks as usize;
        if i < MAX_CHUNKS {
            self.chunks[i] = Chunk { context, n };
        } else {
            self.rest.0 += 1;
            self.rest.1 += n;
            self.rest.2 += pairs;
        }
        self.num_chunks += 1;
    }

    /// Adds one decode token reading `context` tokens (itself included).
    pub fn add_decode(&mut self, context: u64) {
        self.num_seqs += 1;
        self.decode_tokens += 1;
        self.decode_context_tokens += context;
    }

    /// A step of `n` decodes reading `context_tokens` in all (the fast-forward's shape).
    pub fn decodes(n: u64, context_tokens: u64) -> StepShape {
        StepShape { num_seqs: n as u32, decode_tokens: n, decode_context_tokens: context_tokens, ..Default::default() }
    }

    pub fn total_tokens(&self) -> u64 {
        self.prefill_tokens + self.decode_tokens
    }

    /// Whether some prefill chunk has two tokens or more: the step's longest query is then
    /// more than one token (every decode is one), FlashAttention 2's `max_seqlen_q > 1`.
    #[inline]
    pub fn has_multi_token_chunk(&self) -> bool {
        self.prefill_tokens > u64::from(self.num_chunks)
    }
}

impl CostModel {
    /// The roofline prior for `model` on `gpu`, deployed as `dep` (per GPU:
    /// weights, FLOPs, attention heads and KV heads divided by the TP size;
    /// with TP, two all-reduces of the hidden state per layer per token, a
    /// ring over the card's interconnect, plus their latency per step; fp8
    /// weights stream one byte each and run at the GPU's FP8 rate where it
    /// has one).
    pub fn roofline(model: &ModelCard, gpu: &GpuCard, dep: &Deployment, eff: &PriorEfficiencies) -> CostModel {
        let tp = f64::from(dep.tensor_parallel_size.max(1));
        let flops = match (&dep.quantization, gpu.dense_fp8_flops) {
            (Some(_), Some(f8)) => f8,
            _ => gpu.dense_bf16_flops,
        };
        let bw = gpu.memory_bandwidth_bytes_per_s;
        let params = model.num_parameters as f64 / tp;
        let us = 1e6;
        // Streaming every weight once per step.
        let weight_bytes = model.weight_bytes_per_gpu(dep.tensor_parallel_size, dep.linear_weight_bytes) as f64;
        let weights_us = weight_bytes / (bw * eff.weight_bandwidth_eff) * us;
        // 2 FLOPs per parameter per token in the linear layers.
        let mut prefill_token_us = 2.0 * params / (flops * eff.prefill_mfu) * us;
        let mut decode_token_us = 2.0 * params / (flops * eff.decode_mfu) * us;
        // QKᵀ and PV: 2 matmuls × 2 FLOPs per (query, key) pair per head dim, per head, per layer.
        let attn_flops_per_pair =
            4.0 * f64::from(model.num_layers) * f64::from(model.num_attention_heads) * f64::from(model.head_dim) / tp;
        let prefill_attention_us = attn_flops_per_pair / (gpu.dense_bf16_flops * eff.attention_mfu) * us;
        let kv_bytes = model.kv_bytes_per_token_per_gpu(dep.tensor_parallel_size, dep.kv_dtype_bytes) as f64;
        let decode_kv_us = kv_bytes / (bw * eff.kv_bandwidth_eff) * us;
        let mut step_us = weights_us + eff.step_overhead_us;
        if dep.tensor_parallel_size > 1 {
            // Two all-reduces per layer (after attention, after the MLP), each of
            // the hidden state: a ring moves 2(tp − 1)/tp of it per GPU.
            let link = gpu.interconnect_bandwidth_bytes_per_s.unwrap_or(32e9) * eff.interconnect_bandwidth_eff;
            let per_token_bytes = 2.0
                * f64::from(model.num_layers)
                * f64::from(model.hidden_size)
                * f64::from(model.activation_dtype_bytes())
                * 2.0
                * (tp - 1.0)
                / tp;
            let allreduce_token_us = per_token_bytes / link * us;
            prefill_token_us += allreduce_token_us;
            decode_token_us += allreduce_token_us;
            step_us += 2.0 * f64::from(model.num_layers) * eff.allreduce_latency_us;
        }
        CostModel {
            step_us,
            per_seq_us: eff.per_seq_us,
            prefill_token_us,
            decode_token_us,
            prefill_attention_us,
            decode_kv_us,
            request_ingress_us: eff.request_ingress_us,
            output_token_us: eff.output_token_us,
            sources: [CoefficientSource::Prior; 8],
            composed: None,
            reference: None,
            time_scale: 1.0,
        }
    }

    /// An engine `k` times faster than this model says (`cost.time_scale`): every coefficient
    /// divided by `k` (the prior's, before a profile or inline coefficients overlay them), and
    /// the composed cost's times too ([`ComposedCost::set_time_scale`]; it must not be shared
    /// yet: `config::resolve_cost` calls this as it builds the cost). Scales compose; `k` = 1
    /// changes nothing.
    pub fn scale_time(&mut self, k: f64) {
        assert!(k.is_finite() && k > 0.0, "time scale {k}");
        if k == 1.0 {
            return;
        }
        if let Some(c) = self.composed.as_mut() {
            let c = std::sync::Arc::get_mut(c).expect("a composed cost is time-scaled before it is shared");
            c.set_time_scale(c.time_scale() * k);
        }
        for name in COEFFICIENT_NAMES {
            let v = *self.slot(name);
            *self.slot(name) = v / k;
        }
        if let Some(r) = self.reference.as_mut() {
            r.iter_mut().for_each(|v| *v /= k);
        }
        self.time_scale *= k;
    }

    /// A fixed cost of the engine's that the cost model does not hold (SGLang's serial
    /// tokenizer per prompt token, vLLM 0.11.0's chat-template parse per request:
    /// `Engine::tokenizer_ns_per_prompt_token`, `Engine::front_end_ns_per_request`), in ns, as
    /// this engine runs it: ÷ [`CostModel::time_scale`], rounded to the nearest ns (unchanged at 1).
    pub fn scaled_ns(&self, ns: u64) -> u64 {
        if self.time_scale == 1.0 {
            return ns;
        }
        us_to_ns(ns as f64 / 1000.0 / self.time_scale)
    }

    /// Replaces the coefficients `overlay` has, marking them `source`.
    ///
    /// Setting any of the six step coefficients (`step_us` .. `decode_kv_us`)
    /// switches the step clock to the linear model: a fitted profile or
    /// inline coefficients replace the kernel-composed prior as a whole, and
    /// the coefficients they leave unset keep the linear roofline prior's
    /// values (which is what `servesim calibrate` starts its fit from).
    ///
    /// On a model already put in corrected mode ([`CostModel::correct`]) the
    /// composed cost stays, and the new values correct it against the same
    /// reference (how a fit moves its coefficients).
    pub fn overlay(&mut self, overlay: &CostCoefficients, source: CoefficientSource) {
        for (i, name) in COEFFICIENT_NAMES.iter().enumerate() {
            if let Some(v) = overlay.get(name) {
                *self.slot(name) = v;
                self.sources[i] = source;
                if i < 6 && self.reference.is_none() {
                    self.composed = None;
                }
            }
        }
    }

    /// Puts the model in corrected mode, when measured kernels time its steps:
    /// `reference` (a fit's prior: the composed cost linearised) is where the
    /// composed cost is taken as it is, and `overlay` (the fitted values)
    /// scales each step's decode part and prefill part by how much the linear
    /// model's terms of that part moved there (`decode part × dec(fitted) ÷
    /// dec(reference) + prefill part × pre(fitted) ÷ pre(reference)`, see
    /// `corrected_us`). Coefficients missing
    /// from `reference` are taken as the overlay's (no change). Without a
    /// composed cost this is [`CostModel::overlay`].
    pub fn correct(&mut self, overlay: &CostCoefficients, reference: &CostCoefficients, source: CoefficientSource) {
        if self.composed.is_none() {
            return self.overlay(overlay, source);
        }
        let mut r = [0.0; 6];
        for (i, name) in COEFFICIENT_NAMES[..6].iter().enumerate() {
            r[i] = reference.get(name).or_else(|| overlay.get(name)).unwrap_or_else(|| *self.slot(name));
        }
        self.reference = Some(r);
        self.overlay(overlay, source);
    }

    /// The linear model's step time, µs, at coefficients `c` (the six step ones): the step clock
    /// of the linear model, and the ratio of the corrected mode.
    #[inline]
    fn linear_us(c: &[f64; 6], s: &StepShape) -> f64 {
        c[0] + c[1] * f64::from(s.num_seqs)
            + c[2] * s.prefill_tokens as f64
            + c[3] * s.decode_tokens as f64
            + c[4] * s.prefill_attention_pairs as f64
            + c[5] * s.decode_context_tokens as f64
    }

    /// Which model times the steps, in words (the `cost_source` report key); a time-scaled
    /// engine's says so ([`CostModel::scale_time`]).
    pub fn source(&self) -> String {
        let s = self.unscaled_source();
        if self.time_scale == 1.0 {
            return s;
        }
        format!("{s}; time scale {k} (cost.time_scale: an engine {k}x faster than its cards)", k = self.time_scale)
    }

    fn unscaled_source(&self) -> String {
        if let Some(c) = &self.composed {
            if self.reference.is_some() {
                return format!("{} corrected by a fitted profile", c.source);
            }
            return c.source.clone();
        }
        let step = &self.sources[..6];
        if step.iter().all(|s| *s == CoefficientSource::Prior) {
            "linear roofline prior".into()
        } else if step.contains(&CoefficientSource::Scenario) {
            "linear (scenario coefficients)".into()
        } else {
            "linear (fitted profile)".into()
        }
    }

    fn slot(&mut self, name: &str) -> &mut f64 {
        macro_rules! slot {
            ($($f:ident),*) => {
                match name {
                    $(stringify!($f) => &mut self.$f,)*
                    _ => unreachable!("unknown coefficient {name}"),
                }
            };
        }
        for_each_coefficient!(slot)
    }

    /// All coefficients as an overlay (every one set).
    pub fn coefficients(&self) -> CostCoefficients {
        CostCoefficients {
            step_us: Some(self.step_us),
            per_seq_us: Some(self.per_seq_us),
            prefill_token_us: Some(self.prefill_token_us),
            decode_token_us: Some(self.decode_token_us),
            prefill_attention_us: Some(self.prefill_attention_us),
            decode_kv_us: Some(self.decode_kv_us),
            request_ingress_us: Some(self.request_ingress_us),
            output_token_us: Some(self.output_token_us),
        }
    }

    /// Duration of a step of this shape, in nanoseconds (at least 1).
    pub fn step_ns(&self, s: &StepShape) -> u64 {
        if let Some(c) = &self.composed {
            if let Some(r) = &self.reference {
                return us_to_ns(self.corrected_us(c, r, s)).max(1);
            }
            return c.step_ns(s);
        }
        us_to_ns(Self::linear_us(&self.step_coefficients(), s)).max(1)
    }

    /// A step's time in corrected mode, µs: the composed cost split into its decodes' part
    /// (the same step without its prefill chunks, plus what running them unpacked beside the
    /// chunks adds, `ComposedCost::unpacked_decode_surcharge_us`) and what the prefill chunks
    /// add to it;
    /// each part scaled by how much the linear model's terms of that part moved (decodes:
    /// `step_us`, their `per_seq_us`, `decode_token_us`, `decode_kv_us`; prefill: the
    /// chunks' `per_seq_us`, `prefill_token_us`, `prefill_attention_us`). A prefill-only
    /// step is all prefill part: a per-step constant fitted on decode steps does not move a
    /// compute-bound prefill, whose weight streaming and fixed costs the composed cost
    /// already hides or includes. A part whose reference prices it at nothing cannot be
    /// scaled: the fitted linear model's time for that part, then.
    fn corrected_us(&self, c: &ComposedCost, r: &[f64; 6], s: &StepShape) -> f64 {
        let k = self.step_coefficients();
        let chunks = f64::from(s.num_chunks);
        let dec_seqs = f64::from(s.num_seqs) - chunks;
        let (d, ctx) = (s.decode_tokens as f64, s.decode_context_tokens as f64);
        let (p, pairs) = (s.prefill_tokens as f64, s.prefill_attention_pairs as f64);
        let dec = |c: &[f64; 6]| c[0] + c[1] * dec_seqs + c[3] * d + c[5] * ctx;
        let pre = |c: &[f64; 6]| c[1] * chunks + c[2] * p + c[4] * pairs;
        let scale = |part: f64, now: f64, reference: f64| if reference > 0.0 { part * (now / reference) } else { now };
        let whole = c.step_us(s);
        if s.num_chunks == 0 {
            return scale(whole, dec(&k), dec(r));
        }
        let (decodes, decode_part) = if s.decode_tokens == 0 {
            (0.0, 0.0)
        } else {
            let mut only = StepShape::decodes(s.decode_tokens, s.decode_context_tokens);
            only.num_seqs = dec_seqs as u32;
            only.cpu_overlapped = s.cpu_overlapped;
            // Decodes that run unpacked beside the chunks re-read their KV: decode work.
            let decodes = (c.step_us(&only) + c.unpacked_decode_surcharge_us(s)).min(whole);
            (decodes, scale(decodes, dec(&k), dec(r)))
        };
        decode_part + scale(whole - decodes, pre(&k), pre(r))
    }

    /// The six step coefficients, in [`COEFFICIENT_NAMES`] order.
    #[inline]
    fn step_coefficients(&self) -> [f64; 6] {
        [
            self.step_us,
            self.per_seq_us,
            self.prefill_token_us,
            self.decode_token_us,
            self.prefill_attention_us,
            self.decode_kv_us,
        ]
    }

    pub fn ingress_ns(&self) -> u64 {
        us_to_ns(self.request_ingress_us)
    }

    pub fn output_token_ns(&self) -> u64 {
        us_to_ns(self.output_token_us)
    }
}

/// Microseconds (f64) to whole nanoseconds, rounding to nearest; negative
/// values (which validation rejects) clamp to 0.
#[inline]
pub fn us_to_ns(us: f64) -> u64 {
    let x = us * 1000.0;
    // `x.round()` (half away from zero) without its library call, in the range
    // every step takes: `x as u64` truncates, and `x - trunc(x)` is exact (for
    // x ≥ 1, trunc(x) ≥ x / 2: Sterbenz), so this is `round` bit for bit.
    if x > 0.0 && x < 9_007_199_254_740_992.0 {
        let i = x as u64;
        return i + u64::from(x - i as f64 >= 0.5);
    }
    us_to_ns_slow(x)
}

fn us_to_ns_slow(x: f64) -> u64 {
    let ns = x.round();
    if ns.is_finite() && ns > 0.0 {
        ns as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn us_to_ns_is_round_bit_for_bit() {
        let reference = |us: f64| us_to_ns_slow(us * 1000.0);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut vals = vec![
            0.0,
            -0.0,
            1e-4,
            4.999e-4,
            5e-4,
            0.0005000000000000001,
            1.0,
            0.4995,
            2.5e-3,
            1e15,
            9.007e12,
            9.1e12,
            1e300,
            f64::INFINITY,
            f64::NAN,
            -1.0,
        ];
        for k in 0..2000u64 {
            // Halves and their neighbours.
            let h = (k as f64 + 0.5) / 1000.0;
            vals.extend([h, f64::from_bits(h.to_bits() - 1), f64::from_bits(h.to_bits() + 1)]);
        }
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            vals.push(f64::from_bits(x >> 2) % 1e7);
            vals.push((x % 100_000_000) as f64 / 997.0);
        }
        for v in vals {
            assert_eq!(us_to_ns(v), reference(v), "{v:e}");
        }
    }

    #[test]
    fn prefill_attention_pairs_count_the_causal_triangle() {
        let mut s = StepShape::default();
        s.add_prefill(0, 4);
        assert_eq!(s.prefill_attention_pairs, 1 + 2 + 3 + 4);
        let mut t = StepShape::default();
        t.add_prefill(10, 2);
        assert_eq!(t.prefill_attention_pairs, 11 + 12);
    }

    #[test]
    fn overlay_marks_sources() {
        let model = ModelCard {
            id: "m".into(),
            hf_repo: None,
            architecture: None,
            num_parameters: 1_000_000_000,
            num_layers: 16,
            hidden_size: 2048,
            intermediate_size: None,
            num_attention_heads: 16,
            num_kv_heads: 4,
            head_dim: 128,
            vocab_size: 32000,
            tie_word_embeddings: None,
            dtype: "bfloat16".into(),
            quantization: None,
            quantization_method: None,
            weight_block_size: None,
            max_position_embeddings: None,
            rope_scaling: None,
            moe: None,
            add_bos_token: Some(false),
            sources: vec![],
            notes: None,
        };
        let gpu = GpuCard {
            id: "g".into(),
            name: None,
            memory_bytes: 80 << 30,
            memory_bandwidth_bytes_per_s: 2e12,
            dense_bf16_flops: 300e12,
            dense_fp8_flops: None,
            measured_bf16_matmul_flops: None,
            interconnect: None,
            interconnect_bandwidth_bytes_per_s: None,
            peer_to_peer: None,
            nvidia_smi_memory_mib: None,
            compute_capability: None,
            kernel_tables: None,
            sources: vec![],
            notes: None,
        };
        let mut c = CostModel::roofline(&model, &gpu, &Deployment::single(&model), &PriorEfficiencies::default());
        // 2 GB of weights at 1.6 TB/s effective = 1250 µs, plus 1000 µs overhead.
        assert!((c.step_us - 2250.0).abs() < 1e-6, "{}", c.step_us);
        c.overlay(&CostCoefficients { decode_kv_us: Some(0.5), ..Default::default() }, CoefficientSource::Profile);
        assert_eq!(c.decode_kv_us, 0.5);
        assert_eq!(c.sources[5], CoefficientSource::Profile);
        assert_eq!(c.sources[0], CoefficientSource::Prior);
    }
}
