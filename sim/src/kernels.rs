//! Measured kernel tables (aiconfigurator-core 0.12.0, `data/kernels/`) and
//! the interpolation servesim reads them with.
//!
//! The tables are embedded (`include_str!`, about 3 MB of JSON) and parsed
//! lazily, once per GPU system and engine, on first use. Everything here is
//! pure: no IO, no clock.
//!
//! # Interpolation and extrapolation
//!
//! * **GEMM** `t(m)` for one `(n, k)` curve: linear in log–log between the two
//!   grid points around `m`; beyond the last grid point the utilisation of
//!   the last point is held (`t = SOL(m) × t_last / SOL(m_last)`, SOL the
//!   roofline `max(FLOPs / peak, bytes / bandwidth)`); below the first, the
//!   first point (a kernel's latency floor). A shape the table does not have
//!   takes the nearest curve in `(log2 n, log2 k)` and holds its utilisation
//!   point by point (aiconfigurator's site transfer, simplified).
//! * **Prefill attention** `t(seq_len, batch)`: bilinear, linear in `√t`
//!   along `seq_len` (the causal work grows as `seq²`), linear in `batch`.
//!   Cells above the measured staircase (`null`) are filled at load from the
//!   largest measured batch at that `seq_len`, in proportion to the batch.
//!   Beyond the last `seq_len`, `t ∝ seq²`; beyond the last batch, `t ∝
//!   batch`. A chunk of `n` new tokens after `c` cached ones is costed as
//!   aiconfigurator does: `t(c + n) × ((c+n)² − c²) / (c+n)²`. The chunks of
//!   one step are one batch: each costs `t(its length, chunks) / chunks`.
//! * **Decode attention** `t(batch, kv_len)`: bilinear in the raw axes
//!   (both grids are powers of two), staircase cells filled from the largest
//!   measured batch at that `kv_len` in proportion to the batch; beyond the
//!   last `kv_len` or batch, linear in it. A step's decodes are one batch at
//!   their mean context (aiconfigurator's reading). Each cell is floored at
//!   the model's KV read at the table's own DRAM rate (`Tables::gen_rate`,
//!   `gen_dram_rate`: the collector re-reads one layer's KV, which the
//!   L40S's and RTX PRO 6000's L2 holds up to 96–128 MB; a model's step does
//!   not).
//! * **MoE experts** `t(tokens)` for one `(dtype, hidden, moe_intermediate, top-k, experts,
//!   moe_tp)` curve of `moe.json` at `moe_ep` 1 (one MoE layer's fused experts on one GPU, the
//!   router, top-k and collectives not included): linear in log–log between the two grid
//!   points around the step's token count, as the GEMM curves; below the first point (1 token)
//!   the first point; beyond the last (16,384 tokens, 65,536 on the A100's vLLM table) linear
//!   in tokens (`t = t_last × tokens / tokens_last`). That is aiconfigurator's own rule there
//!   (the boundary utilisation held against the MoE roofline, `k_tail = 1`), since at that
//!   many tokens every expert is touched and the roofline is compute-bound, linear in tokens.
//!   The points are used as measured (not made monotone), except that each is floored at the
//!   time its experts' weights take to stream from memory at the GPU card's bandwidth
//!   ([`moe_weight_floor_ms`]: the collector replays one layer without flushing the L2, which on
//!   the L40S and RTX PRO 6000 holds a small batch's experts). The routing distribution is fixed at
//!   extraction to aiconfigurator's default (`power_law_1.2`). No shape, dtype or TP borrow:
//!   a curve the table does not hold is refused ([`Tables::moe`]).
//! * **All-reduce** `t(elements)`: log–log between points; beyond the
//!   largest message, linear in size; below the smallest, the first point.
//!   The same for NCCL's **all-gather** (`nccl.json`, nccl-tests: `t(elements
//!   of the gathered output)`), which times the logits' gather at TP > 1.
//!
//! # GPUs without tables
//!
//! [`Provider::Scaled`] reads the nearest tabled GPU (by peak BF16 FLOP/s and
//! memory bandwidth, in log space) and moves every kernel point to the target
//! card by the ratio of the two cards' rooflines at that point (the point's
//! utilisation is held). [`Provider::Roofline`] synthesises the same grids
//! from a roofline with per-kernel-class efficiencies fitted on the tabled
//! GPUs ([`fit_roofline`]). Which one servesim uses is chosen by the
//! leave-one-GPU-out error of [`crate::cost::leave_one_gpu_out`] (see `VALIDATION.md`).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;

/// The package the tables come from.
pub const SOURCE_PACKAGE: &str = "aiconfigurator-core 0.12.0";

struct RawFiles {
    system: &'static str,
    engine: &'static str,
    gemm: &'static str,
    ctx: &'static str,
    gen: &'static str,
    ar: &'static str,
    /// nccl-tests on the system (shared by both engines' entries).
    nccl: &'static str,
    /// MoE experts (the MoE cards' shapes only).
    moe: &'static str,
}

macro_rules! raw {
    ($s:literal, $e:literal) => {
        RawFiles {
            system: $s,
            engine: $e,
            gemm: include_str!(concat!("../../data/kernels/", $s, "/", $e, "/gemm.json")),
            ctx: include_str!(concat!("../../data/kernels/", $s, "/", $e, "/context_attention.json")),
            gen: include_str!(concat!("../../data/kernels/", $s, "/", $e, "/generation_attention.json")),
            ar: include_str!(concat!("../../data/kernels/", $s, "/", $e, "/custom_allreduce.json")),
            nccl: include_str!(concat!("../../data/kernels/", $s, "/nccl.json")),
            moe: include_str!(concat!("../../data/kernels/", $s, "/", $e, "/moe.json")),
        }
    };
}

const FILES: [RawFiles; 12] = [
    raw!("a100_sxm", "vllm"),
    raw!("a100_sxm", "sglang"),
    raw!("h100_sxm", "vllm"),
    raw!("h100_sxm", "sglang"),
    raw!("h200_sxm", "vllm"),
    raw!("h200_sxm", "sglang"),
    raw!("l40s", "vllm"),
    raw!("l40s", "sglang"),
    raw!("rtx_pro_6000_server", "vllm"),
    raw!("rtx_pro_6000_server", "sglang"),
    raw!("b200_sxm", "vllm"),
    raw!("b200_sxm", "sglang"),
];

const INDEX: &str = include_str!("../../data/kernels/index.json");

// ---------------------------------------------------------------- raw JSON

#[derive(Deserialize)]
struct GemmFile {
    release: String,
    dtypes: BTreeMap<String, GemmDtype>,
}

#[derive(Deserialize)]
struct GemmDtype {
    m: Vec<f64>,
    curves: Vec<GemmCurveRaw>,
}

#[derive(Deserialize)]
struct GemmCurveRaw {
    n: u64,
    k: u64,
    latency_ms: Vec<f64>,
}

#[derive(Deserialize)]
struct AttnFile {
    release: String,
    entries: Vec<AttnEntry>,
}

#[derive(Deserialize)]
struct AttnEntry {
    kv_cache_dtype: String,
    kernel_source: String,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    batch: Vec<f64>,
    #[serde(default)]
    seq_len: Vec<f64>,
    #[serde(default)]
    kv_len: Vec<f64>,
    latency_ms: Vec<Vec<Option<f64>>>,
}

#[derive(Deserialize)]
struct ArFile {
    release: String,
    curves: Vec<ArCurve>,
}

#[derive(Deserialize)]
struct ArCurve {
    mode: String,
    num_gpus: u32,
    message_elems: Vec<f64>,
    latency_ms: Vec<f64>,
}

#[derive(Deserialize)]
struct NcclFile {
    curves: Vec<NcclCurve>,
}

#[derive(Deserialize)]
struct NcclCurve {
    op_name: String,
    num_gpus: u32,
    message_elems: Vec<f64>,
    latency_ms: Vec<f64>,
}

#[derive(Deserialize)]
struct MoeFile {
    release: String,
    distribution: String,
    curves: Vec<MoeCurveRaw>,
}

#[derive(Deserialize)]
struct MoeCurveRaw {
    moe_dtype: String,
    hidden: u32,
    inter: u32,
    topk: u32,
    num_experts: u32,
    moe_tp: u32,
    moe_ep: u32,
    kernel_source: Vec<String>,
    num_tokens: Vec<f64>,
    latency_ms: Vec<f64>,
}

#[derive(Deserialize)]
struct IndexFile {
    servesim_gpu_to_system: BTreeMap<String, Option<String>>,
    systems: BTreeMap<String, IndexSystem>,
}

#[derive(Deserialize)]
struct IndexSystem {
    spec: IndexSpec,
}

#[derive(Deserialize)]
struct IndexSpec {
    bfloat16_tc_flops: f64,
    fp8_tc_flops: Option<f64>,
    mem_bw: f64,
}

// ---------------------------------------------------------------- tables

/// A GPU's peak numbers, as a roofline reads them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Peaks {
    pub bf16_flops: f64,
    pub fp8_flops: Option<f64>,
    pub mem_bw: f64,
}

impl Peaks {
    fn flops(&self, fp8: bool) -> f64 {
        if fp8 {
            self.fp8_flops.unwrap_or(self.bf16_flops)
        } else {
            self.bf16_flops
        }
    }
}

/// One GPU system's tables for one engine.
pub struct Tables {
    pub system: &'static str,
    pub engine: &'static str,
    /// The engine release the GEMM table was measured with.
    pub release: String,
    /// aiconfigurator's header figures for the system (`data/kernels/index.json`).
    pub peaks: Peaks,
    gemm: GemmFile,
    ctx: AttnFile,
    gen: AttnFile,
    ar: ArFile,
    nccl: NcclFile,
    moe: MoeFile,
}

struct Index {
    gpu_to_system: BTreeMap<String, Option<String>>,
    peaks: BTreeMap<String, Peaks>,
}

fn index() -> &'static Index {
    static I: OnceLock<Index> = OnceLock::new();
    I.get_or_init(|| {
        let f: IndexFile = serde_json::from_str(INDEX).expect("data/kernels/index.json parses");
        Index {
            gpu_to_system: f.servesim_gpu_to_system,
            peaks: f
                .systems
                .into_iter()
                .map(|(k, s)| {
                    (
                        k,
                        Peaks {
                            bf16_flops: s.spec.bfloat16_tc_flops,
                            fp8_flops: s.spec.fp8_tc_flops,
                            mem_bw: s.spec.mem_bw,
                        },
                    )
                })
                .collect(),
        }
    })
}

/// The tabled systems, in table order.
pub fn tabled_systems() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = FILES.iter().map(|f| f.system).collect();
    v.dedup();
    v
}

/// The aiconfigurator system that measured `gpu_id` (a servesim card id), if any.
pub fn system_for_gpu(gpu_id: &str) -> Option<&'static str> {
    let s = index().gpu_to_system.get(gpu_id)?.as_deref()?;
    FILES.iter().find(|f| f.system == s).map(|f| f.system)
}

/// The tables of `system` for `engine` (`vllm` or `sglang`), parsed on first use.
pub fn tables(system: &str, engine: &str) -> Option<&'static Tables> {
    static PARSED: [OnceLock<Tables>; 12] = [const { OnceLock::new() }; 12];
    let i = FILES.iter().position(|f| f.system == system && f.engine == engine)?;
    let f = &FILES[i];
    Some(PARSED[i].get_or_init(|| {
        let what = |t: &str| format!("data/kernels/{}/{}/{t}.json", f.system, f.engine);
        let gemm: GemmFile = serde_json::from_str(f.gemm).unwrap_or_else(|e| panic!("{}: {e}", what("gemm")));
        let ctx: AttnFile =
            serde_json::from_str(f.ctx).unwrap_or_else(|e| panic!("{}: {e}", what("context_attention")));
        let gen: AttnFile =
            serde_json::from_str(f.gen).unwrap_or_else(|e| panic!("{}: {e}", what("generation_attention")));
        let ar: ArFile = serde_json::from_str(f.ar).unwrap_or_else(|e| panic!("{}: {e}", what("custom_allreduce")));
        let nccl: NcclFile =
            serde_json::from_str(f.nccl).unwrap_or_else(|e| panic!("data/kernels/{}/nccl.json: {e}", f.system));
        let moe: MoeFile = serde_json::from_str(f.moe).unwrap_or_else(|e| panic!("{}: {e}", what("moe")));
        let peaks = index().peaks[f.system];
        Tables {
            system: f.system,
            engine: f.engine,
            release: gemm.release.clone(),
            peaks,
            gemm,
            ctx,
            gen,
            ar,
            nccl,
            moe,
        }
    }))
}

impl Tables {
    /// `"aiconfigurator-core 0.12.0 h100_sxm vllm 0.24.0"`.
    pub fn label(&self) -> String {
        let mut s = format!("{SOURCE_PACKAGE} {} {} {}", self.system, self.engine, self.release);
        if self.ctx.release != self.release || self.ar.release != self.release || self.gen.release != self.release {
            s.push_str(&format!(
                " (attention {}/{}, all-reduce {})",
                self.ctx.release, self.gen.release, self.ar.release
            ));
        }
        s
    }
}

// ---------------------------------------------------------------- rooflines

/// Shape of a GEMM `y[m,n] = x[m,k] W[k,n]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmShape {
    pub n: u64,
    pub k: u64,
    /// fp8 weights (W8A8 where the GPU has FP8 tensor cores).
    pub fp8: bool,
}

fn gemm_work(m: f64, s: GemmShape) -> (f64, f64) {
    let (n, k) = (s.n as f64, s.k as f64);
    let wbytes = if s.fp8 { 1.0 } else { 2.0 };
    (2.0 * m * n * k, 2.0 * m * (n + k) + wbytes * n * k)
}

/// The GEMM's roofline time in ms on `p`.
pub fn gemm_sol_ms(m: f64, s: GemmShape, p: &Peaks) -> f64 {
    let (f, b) = gemm_work(m, s);
    (f / p.flops(s.fp8)).max(b / p.mem_bw) * 1e3
}

/// One MoE layer's experts as a table keys them (docs/moe.md §1.2): the model's hidden size,
/// its full `moe_intermediate_size`, top-k and expert count, the experts' dtype as the tables
/// name it (`bfloat16`, `fp8_block`) and the MoE tensor-parallel size (expert parallelism 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoeShape {
    pub hidden: u32,
    pub inter: u32,
    pub topk: u32,
    pub num_experts: u32,
    pub dtype: &'static str,
    pub moe_tp: u32,
}

/// Per-GPU attention heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heads {
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    pub kv_bytes: u32,
}

fn ctx_work(seq: f64, batch: f64, h: Heads) -> (f64, f64) {
    let (q, kv, d) = (f64::from(h.heads), f64::from(h.kv_heads), f64::from(h.head_dim));
    // Causal: QKᵀ and PV over the lower triangle.
    let flops = 4.0 * batch * q * d * seq * seq / 2.0;
    let bytes = batch * seq * d * (2.0 * q * 2.0 + 2.0 * kv * f64::from(h.kv_bytes));
    (flops, bytes)
}

/// Prefill attention's roofline time in ms (BF16 compute).
pub fn ctx_sol_ms(seq: f64, batch: f64, h: Heads, p: &Peaks) -> f64 {
    let (f, b) = ctx_work(seq, batch, h);
    (f / p.bf16_flops).max(b / p.mem_bw) * 1e3
}

fn gen_work(batch: f64, kv_len: f64, h: Heads) -> (f64, f64) {
    let (q, kv, d) = (f64::from(h.heads), f64::from(h.kv_heads), f64::from(h.head_dim));
    let flops = 4.0 * batch * q * d * kv_len;
    let bytes = batch * kv_len * 2.0 * kv * d * f64::from(h.kv_bytes) + batch * q * d * 4.0;
    (flops, bytes)
}

/// Decode attention's roofline time in ms.
pub fn gen_sol_ms(batch: f64, kv_len: f64, h: Heads, p: &Peaks) -> f64 {
    let (f, b) = gen_work(batch, kv_len, h);
    (f / p.bf16_flops).max(b / p.mem_bw) * 1e3
}

// ---------------------------------------------------------------- curves and grids

/// A latency curve over one axis (`xs` ascending), interpolated log–log.
#[derive(Clone, Debug, PartialEq)]
pub struct Curve {
    pub xs: Vec<f64>,
    pub ys: Vec<f64>,
    /// Per point, the roofline time the utilisation hold divides by (GEMM),
    /// or empty: hold linear in `x` beyond the end.
    sol_last: Option<(GemmShape, Peaks)>,
}

impl Curve {
    pub fn at(&self, x: f64) -> f64 {
        let n = self.xs.len();
        if x <= self.xs[0] {
            return self.ys[0];
        }
        if x >= self.xs[n - 1] {
            let (xl, yl) = (self.xs[n - 1], self.ys[n - 1]);
            return match &self.sol_last {
                Some((s, p)) => yl * gemm_sol_ms(x, *s, p) / gemm_sol_ms(xl, *s, p),
                None => yl * x / xl,
            };
        }
        let i = self.xs.partition_point(|&v| v <= x); // xs[i-1] <= x < xs[i]
        let (x0, x1, y0, y1) = (self.xs[i - 1], self.xs[i], self.ys[i - 1], self.ys[i]);
        if x == x0 {
            return y0;
        }
        let t = (x / x0).ln() / (x1 / x0).ln();
        (y0.ln() + t * (y1.ln() - y0.ln())).exp()
    }
}

/// A latency grid over two axes, every cell filled (ms).
#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    /// First axis: `seq_len` (prefill) or `batch` (decode).
    pub a: Vec<f64>,
    /// Second axis: `batch` (prefill) or `kv_len` (decode).
    pub b: Vec<f64>,
    /// `v[i][j]` at `(a[i], b[j])`.
    pub v: Vec<Vec<f64>>,
    /// Prefill: interpolate `√t` along `a`, and `t ∝ a²` beyond it.
    sqrt_a: bool,
}

fn bracket(xs: &[f64], x: f64) -> (usize, usize, f64) {
    let n = xs.len();
    if x <= xs[0] {
        return (0, 0, 0.0);
    }
    if x >= xs[n - 1] {
        return (n - 1, n - 1, 0.0);
    }
    let i = xs.partition_point(|&v| v <= x);
    (i - 1, i, (x - xs[i - 1]) / (xs[i] - xs[i - 1]))
}

impl Grid {
    /// The same grid with every cell replaced by `f(a, b, value)`.
    fn map_cells(mut self, f: impl Fn(f64, f64, f64) -> f64) -> Grid {
        for (i, row) in self.v.iter_mut().enumerate() {
            for (j, y) in row.iter_mut().enumerate() {
                *y = f(self.a[i], self.b[j], *y);
            }
        }
        self
    }

    fn at_row(&self, i: usize, b: f64) -> f64 {
        let row = &self.v[i];
        let (j0, j1, t) = bracket(&self.b, b);
        let mut y = row[j0] + t * (row[j1] - row[j0]);
        let bl = self.b[self.b.len() - 1];
        if b > bl {
            y *= b / bl;
        } else if b < self.b[0] {
            // Below the first grid point: the first point (a latency floor).
        }
        y
    }

    pub fn at(&self, a: f64, b: f64) -> f64 {
        let (i0, i1, t) = bracket(&self.a, a);
        let (y0, y1) = (self.at_row(i0, b), self.at_row(i1, b));
        let al = self.a[self.a.len() - 1];
        if self.sqrt_a {
            let s = y0.sqrt() + t * (y1.sqrt() - y0.sqrt());
            let mut y = s * s;
            if a > al {
                y *= (a / al) * (a / al);
            }
            y
        } else {
            let mut y = y0 + t * (y1 - y0);
            if a > al {
                y *= a / al;
            }
            y
        }
    }
}

/// One axis of a [`FlatGrid`]: its points, and [`bracket`] precomputed at every
/// whole number up to the last point (the batch axes), so that a lookup at a
/// whole number is one load.
#[derive(Clone, Debug, PartialEq)]
struct Axis {
    xs: Box<[f64]>,
    first: f64,
    last: f64,
    /// `bracket(xs, k)` for `k` in `0..=last` (empty when the last point is past [`Axis::MAX_WHOLE`]).
    whole: Box<[Bracket]>,
}

/// Where `x` falls on an axis: the two points around it and the fraction between them
/// (exactly `bracket`'s result).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bracket {
    lo: u32,
    hi: u32,
    t: f64,
}

impl Axis {
    /// Axes ending past this are not tabulated at whole numbers.
    const MAX_WHOLE: f64 = 4096.0;

    fn new(xs: &[f64]) -> Axis {
        let last = xs[xs.len() - 1];
        let whole = if last <= Self::MAX_WHOLE {
            (0..=last as u64).map(|k| Self::search(xs, k as f64)).collect()
        } else {
            Box::default()
        };
        Axis { xs: xs.into(), first: xs[0], last, whole }
    }

    /// [`bracket`], as a [`Bracket`] (the same comparisons and the same arithmetic).
    #[inline]
    fn search(xs: &[f64], x: f64) -> Bracket {
        let (lo, hi, t) = bracket(xs, x);
        Bracket { lo: lo as u32, hi: hi as u32, t }
    }

    #[inline]
    fn at(&self, x: f64) -> Bracket {
        let n = self.xs.len();
        if x <= self.first {
            return Bracket { lo: 0, hi: 0, t: 0.0 };
        }
        if x >= self.last {
            return Bracket { lo: (n - 1) as u32, hi: (n - 1) as u32, t: 0.0 };
        }
        let i = self.xs.partition_point(|&v| v <= x);
        Bracket { lo: (i - 1) as u32, hi: i as u32, t: (x - self.xs[i - 1]) / (self.xs[i] - self.xs[i - 1]) }
    }

    /// [`Axis::at`] of the whole number `k`.
    #[inline]
    fn at_whole(&self, k: u64) -> Bracket {
        match self.whole.get(k as usize) {
            Some(b) => *b,
            None => self.at(k as f64),
        }
    }
}

/// A [`Grid`] laid out for evaluation in the step loop: one flat row-major
/// array, both axes' brackets found once (the row interpolation is shared by
/// the two rows), whole-number lookups tabulated. [`FlatGrid::at`] returns
/// exactly [`Grid::at`]'s value: the same operations on the same operands in
/// the same order (tested bit for bit).
#[derive(Clone, Debug, PartialEq)]
pub struct FlatGrid {
    a: Axis,
    b: Axis,
    /// `v[i * b.len() + j]` at `(a[i], b[j])`.
    v: Box<[f64]>,
    sqrt_a: bool,
}

impl Grid {
    /// This grid, laid out for fast evaluation.
    pub fn flat(&self) -> FlatGrid {
        assert!(self.v.len() == self.a.len() && self.v.iter().all(|r| r.len() == self.b.len()), "a full grid");
        FlatGrid {
            a: Axis::new(&self.a),
            b: Axis::new(&self.b),
            v: self.v.iter().flatten().copied().collect(),
            sqrt_a: self.sqrt_a,
        }
    }
}

impl FlatGrid {
    /// [`Grid::at`]`(a, b)`.
    #[inline]
    pub fn at(&self, a: f64, b: f64) -> f64 {
        self.eval(self.a.at(a), a, self.b.at(b), b)
    }

    /// [`Grid::at`]`(a as f64, b)` for a whole-number `a` (decode batches).
    #[inline]
    pub fn at_whole_a(&self, a: u64, b: f64) -> f64 {
        self.eval(self.a.at_whole(a), a as f64, self.b.at(b), b)
    }

    /// [`Grid::at`]`(a, b as f64)` for a whole-number `b` (prefill batches).
    #[inline]
    pub fn at_whole_b(&self, a: f64, b: u64) -> f64 {
        self.eval(self.a.at(a), a, self.b.at_whole(b), b as f64)
    }

    #[inline]
    fn eval(&self, ba: Bracket, a: f64, bb: Bracket, b: f64) -> f64 {
        let nb = self.b.xs.len();
        let bl = self.b.last;
        // `Grid::at_row`, for the rows `ba.lo` and `ba.hi`.
        let row = |i: u32| {
            let r = &self.v[i as usize * nb..(i as usize + 1) * nb];
            let (y0, y1) = (r[bb.lo as usize], r[bb.hi as usize]);
            let mut y = y0 + bb.t * (y1 - y0);
            if b > bl {
                y *= b / bl;
            }
            y
        };
        let (y0, y1) = (row(ba.lo), row(ba.hi));
        let t = ba.t;
        let al = self.a.last;
        if self.sqrt_a {
            let s = y0.sqrt() + t * (y1.sqrt() - y0.sqrt());
            let mut y = s * s;
            if a > al {
                y *= (a / al) * (a / al);
            }
            y
        } else {
            let mut y = y0 + t * (y1 - y0);
            if a > al {
                y *= a / al;
            }
            y
        }
    }
}

/// Fills the `null` cells above a staircase from the largest measured cell
/// of the same first-axis row, in proportion to the second axis (`batch`
/// for prefill) or, for decode grids (`batch` first), from the largest
/// measured batch of the same column in proportion to the batch.
fn fill_grid(a: &[f64], b: &[f64], raw: &[Vec<Option<f64>>], batch_first: bool) -> Vec<Vec<f64>> {
    let mut v: Vec<Vec<f64>> = raw.iter().map(|r| r.iter().map(|c| c.unwrap_or(f64::NAN)).collect()).collect();
    if batch_first {
        // v[batch][kv_len]
        for j in 0..b.len() {
            let mut last: Option<usize> = None;
            for i in 0..a.len() {
                if v[i][j].is_finite() {
                    last = Some(i);
                } else if let Some(l) = last {
                    v[i][j] = v[l][j] * a[i] / a[l];
                }
            }
        }
        // A kv_len no batch measured: from the longest measured kv_len of the row.
        for row in v.iter_mut() {
            let mut last: Option<usize> = None;
            for j in 0..b.len() {
                if row[j].is_finite() {
                    last = Some(j);
                } else if let Some(l) = last {
                    row[j] = row[l] * b[j] / b[l];
                }
            }
        }
    } else {
        // v[seq_len][batch]
        for row in v.iter_mut() {
            let mut last: Option<usize> = None;
            for j in 0..b.len() {
                if row[j].is_finite() {
                    last = Some(j);
                } else if let Some(l) = last {
                    row[j] = row[l] * b[j] / b[l];
                }
            }
        }
        for j in 0..b.len() {
            let mut last: Option<usize> = None;
            for i in 0..a.len() {
                if v[i][j].is_finite() {
                    last = Some(i);
                } else if let Some(l) = last {
                    v[i][j] = v[l][j] * (a[i] / a[l]).powi(2);
                }
            }
        }
    }
    // Anything still empty (a row with no measurement at all) takes the grid's minimum.
    let min = v.iter().flatten().copied().filter(|x| x.is_finite()).fold(f64::INFINITY, f64::min);
    for x in v.iter_mut().flatten() {
        if !x.is_finite() {
            *x = min;
        }
    }
    v
}

/// Makes a GEMM latency curve non-decreasing in `m` (ascending `xs`): each point
/// becomes the least latency measured at that many rows or more,
/// `t(m) = min over m' ≥ m of t(m')`.
///
/// The fp8 tables (aiconfigurator-core 0.12.0, vLLM 0.24 and SGLang 0.5.14
/// collectors, H100 and H200 alike) are not monotone: the first point past each
/// step of the `m` grid (129, 257, 513, 769, 1025, …) is 1.5–3× the next grid
/// point (`n = 57344, k = 8192` on H200: 0.176 ms at 256, 0.562 ms at 257,
/// 0.303 ms at 512), and latency then *falls* as `m` grows until the next step.
/// Interpolated as measured, a 300-token step cost more than a 512-token one,
/// and every prefill of 129–511 tokens about twice what its work needs. The same
/// GEMM on more rows is never faster with the same kernel (vLLM's SM90 fp8
/// CUTLASS dispatch keeps one configuration, tile 128×128×128, for every
/// `m` > 128: `csrc/quantization/cutlass_w8a8/c3x/scaled_mm_sm90_fp8_dispatch.cuh`),
/// so the envelope is
/// what an `m`-row GEMM can cost at most. Applied to the fp8 tables only: the
/// bf16 tables' departures from monotone are a few per cent of noise, which a
/// running minimum would turn into a bias.
fn monotone_in_m(ys: &mut [f64]) {
    for i in (0..ys.len().saturating_sub(1)).rev() {
        if ys[i + 1] < ys[i] {
            ys[i] = ys[i + 1];
        }
    }
}

// ---------------------------------------------------------------- what a table holds

fn dtype_name(kv_bytes: u32) -> &'static str {
    if kv_bytes == 1 {
        "fp8"
    } else {
        "bfloat16"
    }
}

impl Tables {
    /// The `(m, latency)` curve of one GEMM shape, on this table's GPU.
    pub fn gemm(&self, s: GemmShape) -> Curve {
        let dt = if s.fp8 && self.gemm.dtypes.contains_key("fp8") { "fp8" } else { "bfloat16" };
        let d = &self.gemm.dtypes[dt];
        let table_shape = GemmShape { fp8: dt == "fp8", ..s };
        let ms = d.m.clone();
        let exact = d.curves.iter().find(|c| c.n == s.n && c.k == s.k);
        let (src, src_shape) = match exact {
            Some(c) => (c, table_shape),
            None => {
                let dist = |c: &GemmCurveRaw| {
                    let dn = (c.n as f64).log2() - (s.n as f64).log2();
                    let dk = (c.k as f64).log2() - (s.k as f64).log2();
                    dn * dn + dk * dk
                };
                let c = d
                    .curves
                    .iter()
                    .min_by(|a, b| dist(a).partial_cmp(&dist(b)).unwrap())
                    .expect("a GEMM table has curves");
                (c, GemmShape { n: c.n, k: c.k, fp8: table_shape.fp8 })
            }
        };
        // Hold the source point's utilisation, moved to the requested shape and dtype.
        let mut ys: Vec<f64> = ms
            .iter()
            .zip(&src.latency_ms)
            .map(|(&m, &y)| {
                if src_shape == s {
                    y
                } else {
                    y * gemm_sol_ms(m, s, &self.peaks) / gemm_sol_ms(m, src_shape, &self.peaks)
                }
            })
            .collect();
        if dt == "fp8" {
            monotone_in_m(&mut ys);
        }
        Curve { xs: ms, ys, sol_last: Some((s, self.peaks)) }
    }

    fn attn_entry<'a>(entries: &'a [AttnEntry], h: Heads, prefer: &Lanes) -> (&'a AttnEntry, f64) {
        let kvd = dtype_name(h.kv_bytes);
        let rank = |e: &AttnEntry| {
            // The engine's backend first, then within it the phase's own kernel (a table may
            // hold a backend's prefill and decode kernels side by side: vLLM's FlashInfer on
            // B200), then the common kernels.
            let backend = prefer.first.map_or(0, |f| usize::from(!e.kernel_source.contains(f)));
            let rest = prefer.rest.iter().position(|p| e.kernel_source.contains(p)).unwrap_or(prefer.rest.len());
            let lane = (backend, rest);
            let dt = usize::from(e.kv_cache_dtype != kvd);
            let kvh = usize::from(e.kv_heads != h.kv_heads && !(e.kv_heads == 0 && h.kv_heads == h.heads));
            let dh = ((f64::from(e.heads)).ln() - f64::from(h.heads).ln()).abs();
            let hd = usize::from(e.head_dim != h.head_dim);
            (dt, hd, kvh, (dh * 1e6) as u64, lane)
        };
        let e = entries.iter().min_by_key(|e| rank(e)).expect("an attention table has entries");
        // A different head count: in proportion to the query heads.
        (e, f64::from(h.heads) / f64::from(e.heads))
    }

    /// The lanes an attention table's entry is preferred from, best first: `first` (the
    /// engine's default backend where the table holds several, e.g. SGLang's `trtllm_mha` on
    /// the SM100 family), then the phase's own lane and the common kernels.
    fn lanes<'a>(first: Option<&'a str>, phase: &'a str) -> Lanes<'a> {
        Lanes { first, rest: [phase, "flashinfer", "fa3", "flash"] }
    }

    /// Whether the attention tables hold `lane` (a substring of an entry's `kernel_source`) for
    /// both prefill and decode.
    pub fn has_lane(&self, lane: &str) -> bool {
        let has = |es: &[AttnEntry]| es.iter().any(|e| e.kernel_source.contains(lane));
        has(&self.ctx.entries) && has(&self.gen.entries)
    }

    /// Whether the attention tables hold entries for a KV cache of `kv_bytes` bytes an element
    /// (fp8 or 16-bit) for both prefill and decode.
    pub fn has_kv_dtype(&self, kv_bytes: u32) -> bool {
        let kvd = dtype_name(kv_bytes);
        let has = |es: &[AttnEntry]| es.iter().any(|e| e.kv_cache_dtype == kvd);
        has(&self.ctx.entries) && has(&self.gen.entries)
    }

    /// Prefill attention: `t(seq_len, batch)` per layer; `first`: the lane preferred first.
    pub fn ctx_grid(&self, h: Heads, first: Option<&str>) -> Grid {
        let (e, scale) = Self::attn_entry(&self.ctx.entries, h, &Self::lanes(first, "prefill"));
        let mut v = fill_grid(&e.seq_len, &e.batch, &e.latency_ms, false);
        v.iter_mut().flatten().for_each(|x| *x *= scale);
        Grid { a: e.seq_len.clone(), b: e.batch.clone(), v, sqrt_a: true }
    }

    /// Decode attention: `t(batch, kv_len)` per layer; `first`: the lane preferred first. Each
    /// cell is floored at the model's KV read (`h`'s KV heads, head dim and KV bytes) at the
    /// table's own DRAM rate (`Tables::gen_rate`).
    pub fn gen_grid(&self, h: Heads, first: Option<&str>) -> Grid {
        self.gen_grid_floored(h, first).0
    }

    /// [`Tables::gen_grid`], and how many of its cells the floor raised (out of all of them).
    pub fn gen_grid_floored(&self, h: Heads, first: Option<&str>) -> (Grid, usize, usize) {
        let (e, scale) = Self::attn_entry(&self.gen.entries, h, &Self::lanes(first, "decode"));
        let mut v = fill_grid(&e.batch, &e.kv_len, &e.latency_ms, true);
        v.iter_mut().flatten().for_each(|x| *x *= scale);
        let mut raised = 0;
        if let Some(rate) = self.gen_rate(e) {
            let kv_token = 2.0 * f64::from(h.kv_heads) * f64::from(h.head_dim) * f64::from(h.kv_bytes);
            for (row, &b) in v.iter_mut().zip(&e.batch) {
                for (y, &l) in row.iter_mut().zip(&e.kv_len) {
                    let floor = b * l * kv_token / rate;
                    // Beyond rounding: the cell that sets the rate reads exactly at it.
                    raised += usize::from(floor > *y * (1.0 + 1e-9));
                    *y = y.max(floor);
                }
            }
        }
        let cells = v.iter().map(Vec::len).sum();
        (Grid { a: e.batch.clone(), b: e.kv_len.clone(), v, sqrt_a: false }, raised, cells)
    }

    /// The DRAM rate a decode-attention entry's cells are floored at, bytes/ms: its own
    /// ([`gen_dram_rate`]), or, for an entry none of whose cells reads [`GEN_DRAM_BYTES`] (the
    /// fp8 entries of one or two KV heads on the L40S and RTX PRO 6000 tables stop at 268 MB),
    /// the fastest own rate among the table's entries of the same kernel and KV dtype.
    fn gen_rate(&self, e: &AttnEntry) -> Option<f64> {
        gen_dram_rate(e).or_else(|| {
            self.gen
                .entries
                .iter()
                .filter(|o| o.kernel_source == e.kernel_source && o.kv_cache_dtype == e.kv_cache_dtype)
                .filter_map(gen_dram_rate)
                .reduce(f64::max)
        })
    }

    /// The engine's all-reduce (CUDA-graph mode) over `tp` GPUs: `t(elements)`.
    pub fn allreduce(&self, tp: u32) -> Option<Curve> {
        let c = self
            .ar
            .curves
            .iter()
            .find(|c| c.num_gpus == tp && c.mode == "graph")
            .or_else(|| self.ar.curves.iter().find(|c| c.num_gpus == tp))?;
        Some(Curve { xs: c.message_elems.clone(), ys: c.latency_ms.clone(), sol_last: None })
    }

    /// NCCL's all-reduce over `tp` GPUs (nccl-tests, half): `t(elements per rank)`, as the
    /// custom all-reduce table's x ([`Tables::allreduce`]). vLLM runs it where the custom kernel
    /// is off (`--disable-custom-all-reduce`).
    pub fn nccl_all_reduce(&self, tp: u32) -> Option<Curve> {
        let c = self.nccl.curves.iter().find(|c| c.op_name == "all_reduce" && c.num_gpus == tp)?;
        Some(Curve { xs: c.message_elems.clone(), ys: c.latency_ms.clone(), sol_last: None })
    }

    /// NCCL's all-gather over `tp` GPUs (nccl-tests, half): `t(elements of the gathered
    /// output)`, nccl-tests' buffer size for all-gather being the whole output.
    pub fn all_gather(&self, tp: u32) -> Option<Curve> {
        let c = self.nccl.curves.iter().find(|c| c.op_name == "all_gather" && c.num_gpus == tp)?;
        Some(Curve { xs: c.message_elems.clone(), ys: c.latency_ms.clone(), sol_last: None })
    }

    /// One MoE layer's experts over the step's tokens (ms; module docs for the interpolation),
    /// each point floored at the time its experts' weights take to stream from memory at
    /// `mem_bw` bytes/s, the GPU card's bandwidth ([`moe_weight_floor_ms`]), the words that say
    /// where it comes from, and the kernel the collector ran in vLLM's `--moe-backend` words
    /// ([`moe_backend_of`]; `None` for another engine's name); `None` where the table has no
    /// curve of this exact shape, dtype and TP (no borrow from another).
    pub fn moe(&self, s: &MoeShape, mem_bw: f64) -> Option<(Curve, String, Option<&'static str>)> {
        let c = self.moe.curves.iter().find(|c| {
            c.moe_dtype == s.dtype
                && c.hidden == s.hidden
                && c.inter == s.inter
                && c.topk == s.topk
                && c.num_experts == s.num_experts
                && c.moe_tp == s.moe_tp
                && c.moe_ep == 1
        })?;
        let label = format!(
            "{SOURCE_PACKAGE} {} {} {} moe_perf ({}, {}, moe_tp {}, moe_ep 1, {})",
            self.system,
            self.engine,
            self.moe.release,
            s.dtype,
            self.moe.distribution,
            s.moe_tp,
            c.kernel_source.join("/")
        );
        let kernel = c.kernel_source.iter().map(|k| moe_backend_of(k)).reduce(|a, b| a.filter(|x| Some(*x) == b));
        let mut ys = c.latency_ms.clone();
        let mut floored = 0;
        for (y, &x) in ys.iter_mut().zip(&c.num_tokens) {
            let floor = moe_weight_floor_ms(x, s, &self.moe.distribution, mem_bw);
            if *y < floor {
                *y = floor;
                floored += 1;
            }
        }
        let label = if floored > 0 {
            format!(
                "{label}; {floored} of its {} points below its experts' weight reads at the card's {:.0} GB/s, \
                 floored there",
                ys.len(),
                mem_bw / 1e9
            )
        } else {
            label
        };
        Some((Curve { xs: c.num_tokens.clone(), ys, sol_last: None }, label, kernel.flatten()))
    }

    /// The engine release the MoE table was measured with (`0.24.0`).
    pub fn moe_release(&self) -> &str {
        &self.moe.release
    }

    /// What the MoE table holds for a shape (ignoring dtype and TP): `(dtype, moe_tp)` pairs, for
    /// an error that says what is there.
    pub fn moe_layouts(&self, hidden: u32, inter: u32, topk: u32, num_experts: u32) -> Vec<(String, u32)> {
        self.moe
            .curves
            .iter()
            .filter(|c| c.hidden == hidden && c.inter == inter && c.topk == topk && c.num_experts == num_experts)
            .map(|c| (c.moe_dtype.clone(), c.moe_tp))
            .collect()
    }
}

/// One MoE layer's experts' weight reads on one GPU at `tokens` tokens, as time at `mem_bw`
/// bytes/s (ms): the experts the step's tokens touch, in expectation under the table's routing
/// ([`moe_experts_touched`]), each `3 × hidden × moe_intermediate / moe_tp` weights (gate, up
/// and down) at the table's dtype (2 bytes bf16, 1 byte fp8_block; its scales, 1/16,384 of
/// that, left out). A decode step streams every layer's experts from HBM: its 48 or 94 layers'
/// active sets do not stay in a 50–128 MB L2 from one step to the next. aiconfigurator's
/// collector times a CUDA graph of one layer's fused experts replayed on the same weights with
/// no L2 flush (`collector/helper.py:benchmark_with_power`, `collector/vllm/collect_moe.py:
/// run_moe_torch`), so where the GPU's L2 holds that one layer's active experts (L40S 96 MB, RTX
/// PRO 6000 128 MB, at small token counts) the table's point can be below this (0.35–0.81× of
/// it at the card's bandwidth); [`Tables::moe`] floors its points here. At the full bandwidth,
/// not [`crate::cost::ELEMENTWISE_BW_EFF`]'s 0.8: a floor is a bound, and the H100, H200, B200 and
/// A100 tables, whose L2 cannot hold the active set, reach 0.80–0.93 of the bandwidth in places
/// (every one of their points is 1.06× or more of this floor, so none moves).
pub fn moe_weight_floor_ms(tokens: f64, s: &MoeShape, distribution: &str, mem_bw: f64) -> f64 {
    let weight_bytes = match s.dtype {
        "bfloat16" => 2.0,
        _ => 1.0,
    };
    let per_expert = 3.0 * f64::from(s.hidden) * f64::from(s.inter) / f64::from(s.moe_tp.max(1)) * weight_bytes;
    moe_experts_touched(tokens, s.num_experts, s.topk, distribution) * per_expert / mem_bw * 1e3
}

/// A decode call whose KV working set is at least this many bytes reads it from DRAM on every
/// tabled GPU: four times the largest L2 among them (the RTX PRO 6000's 128 MB).
pub const GEN_DRAM_BYTES: f64 = 512e6;

/// The KV cache a decode-attention call of `batch` sequences at `kv_len` tokens reads under the
/// table entry `e`'s heads and KV dtype, bytes (K and V; the queries and output, under 0.1% of
/// it past a few tokens, left out); `None` for a KV dtype other than the tables' `bfloat16` and
/// `fp8`.
fn gen_kv_bytes(e: &AttnEntry, batch: f64, kv_len: f64) -> Option<f64> {
    let kv_heads = if e.kv_heads == 0 { e.heads } else { e.kv_heads };
    let elem = match e.kv_cache_dtype.as_str() {
        "fp8" => 1.0,
        "bfloat16" | "float16" => 2.0,
        _ => return None,
    };
    Some(batch * kv_len * 2.0 * f64::from(kv_heads) * f64::from(e.head_dim) * elem)
}

/// The fastest KV read of a decode-attention table entry over its measured cells of
/// [`GEN_DRAM_BYTES`] or more, bytes/ms: the kernel's own DRAM rate (`None` under three such
/// cells). aiconfigurator's collector replays one layer's call on the same KV cache with no L2
/// flush (as for the MoE experts, [`moe_weight_floor_ms`]), so where a GPU's L2 holds that one
/// layer's KV the table reads it from the L2: on the L40S (96 MB) and the RTX PRO 6000 (128 MB)
/// cells of 34–134 MB run at up to 0.86 and 1.79 TB/s, the cards' whole DRAM bandwidth, where
/// this rate is 0.67–0.75 and 1.43–1.53 TB/s. A model's decode step reads every layer's KV and
/// weights between two reads of one layer's, so nothing of it is still in the L2:
/// [`Tables::gen_grid`] floors each cell at its bytes over this rate. On the A100, H100, H200
/// and B200 tables one measured cell reads faster than its entry's rate, by 4.8% (A100 SGLang;
/// VALIDATION.md §5, "The decode tables' L2").
fn gen_dram_rate(e: &AttnEntry) -> Option<f64> {
    let mut n = 0;
    let mut best: f64 = 0.0;
    for (row, &b) in e.latency_ms.iter().zip(&e.batch) {
        for (cell, &l) in row.iter().zip(&e.kv_len) {
            let bytes = gen_kv_bytes(e, b, l)?;
            if let Some(ms) = cell.filter(|&ms| ms > 0.0 && bytes >= GEN_DRAM_BYTES) {
                n += 1;
                best = best.max(bytes / ms);
            }
        }
    }
    (n >= 3).then_some(best)
}

/// Trials averaged for [`moe_experts_touched`] under a power law.
const ROUTING_TRIALS: u32 = 256;

/// The distinct experts `tokens` tokens of top-`topk` routing over `num_experts` experts touch, in
/// expectation under the routing aiconfigurator's collector generated for `distribution`:
///
/// * `power_law_<α>`: `collector/helper.py:_generate_power_law_distribution` (called by
///   `power_law_logits_v3`, EP 1): per-expert weights drawn from a power law of exponent α on
///   `[1, 0.8·tokens]` (on `[0.01, 2]` when `tokens·topk ≤ num_experts`), scaled to `tokens·topk`
///   assignments and rounded half to even, each capped at `tokens` with the overflow and any
///   rounding shortfall added one at a time to the least-loaded expert (so the empty ones first),
///   a rounding excess taken one at a time from the most-loaded; averaged over
///   [`ROUTING_TRIALS`] seeded draws (deterministic). One token touches exactly `topk`.
/// * `balanced`: `min(num_experts, tokens·topk)` (`balanced_logits` spreads the assignments).
/// * anything else: `topk`, the fewest any routing touches.
pub fn moe_experts_touched(tokens: f64, num_experts: u32, topk: u32, distribution: &str) -> f64 {
    type Key = (u64, u32, u32, String);
    static MEMO: OnceLock<std::sync::Mutex<BTreeMap<Key, f64>>> = OnceLock::new();
    let (e, k) = (num_experts.max(1), topk.max(1).min(num_experts.max(1)));
    let t = tokens.max(1.0).round() as u64;
    if distribution == "balanced" {
        return (t * u64::from(k)).min(u64::from(e)) as f64;
    }
    let Some(alpha) = distribution.strip_prefix("power_law_").and_then(|a| a.parse::<f64>().ok()) else {
        return f64::from(k);
    };
    let key = (t, e, k, distribution.to_string());
    let memo = MEMO.get_or_init(Default::default);
    if let Some(v) = memo.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return *v;
    }
    let v = power_law_experts_touched(t, e, k, alpha);
    memo.lock().unwrap_or_else(|p| p.into_inner()).insert(key, v);
    v
}

/// [`moe_experts_touched`] under `power_law_<alpha>`, drawn afresh.
fn power_law_experts_touched(t: u64, e: u32, k: u32, alpha: f64) -> f64 {
    use rand::Rng;
    let target = t * u64::from(k);
    let (lo, hi) = if target > u64::from(e) { (1.0, t as f64 * 0.8) } else { (0.01, 2.0) };
    let (lo_p, hi_p) = (f64::powf(lo, 1.0 - alpha), f64::powf(hi, 1.0 - alpha));
    let mut rng = crate::rng::stream(u64::from(e) << 32 | u64::from(k), "moe-routing-power-law");
    let mut weights = vec![0.0; e as usize];
    let mut sum_touched = 0u64;
    for _ in 0..ROUTING_TRIALS {
        for w in weights.iter_mut() {
            let u: f64 = rng.random();
            *w = ((hi_p - lo_p) * u + lo_p).powf(1.0 / (1.0 - alpha));
        }
        let total: f64 = weights.iter().sum();
        let (mut assigned, mut overflow, mut nonzero) = (0u64, 0u64, 0u64);
        for w in &weights {
            let c = (w / total * target as f64).round_ties_even() as u64;
            overflow += c.saturating_sub(t);
            let c = c.min(t);
            assigned += c;
            nonzero += u64::from(c > 0);
        }
        // The overflow goes back one assignment at a time to the least-loaded expert under the
        // cap, so to the empty ones first; then the rounding: a shortfall the same way, an excess
        // taken from the most-loaded, which empties an expert only once every one holds one.
        let shortfall = target as i64 - (assigned + overflow) as i64;
        let mut touched = (nonzero + overflow + shortfall.max(0) as u64).min(u64::from(e));
        if shortfall < 0 {
            touched = touched.min(target);
        }
        sum_touched += touched;
    }
    sum_touched as f64 / f64::from(ROUTING_TRIALS)
}

/// The kernel behind an aiconfigurator vLLM MoE `kernel_source` (`vllm_<method>_<backend>_<experts>`,
/// e.g. `vllm_fp8moe_triton_tritonexperts`, `vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic`)
/// in vLLM's `--moe-backend` words (SGLang's two collector names too, in `--moe-runner-backend`'s,
/// the same); `None` for a name that is not a collector's or names none of them. The older collector's `vllm_fused_moe` (the A100 table, vLLM 0.14.0) timed
/// vLLM's `fused_moe`, the Triton kernel.
pub fn moe_backend_of(kernel_source: &str) -> Option<&'static str> {
    // SGLang's collector names: its Triton fused MoE and FlashInfer TRT-LLM's (the B200 table),
    // which `--moe-runner-backend` names as vLLM's `--moe-backend` does.
    match kernel_source {
        "sglang_fused_moe_triton" => return Some("triton"),
        "sglang_flashinfer_trtllm_moe" => return Some("flashinfer_trtllm"),
        _ => {}
    }
    let rest = kernel_source.strip_prefix("vllm_")?;
    if rest == "fused_moe" {
        return Some("triton");
    }
    let (_, backend) = rest.split_once('_')?;
    [
        ("flashinfer_trtllm_", "flashinfer_trtllm"),
        ("flashinfer_cutlass_", "flashinfer_cutlass"),
        ("flashinfer_cutedsl_", "flashinfer_cutedsl"),
        ("deep_gemm_", "deep_gemm"),
        ("deepgemm_", "deep_gemm"),
        ("triton_", "triton"),
        ("cutlass_", "cutlass"),
        ("marlin_", "marlin"),
        ("aiter_", "aiter"),
    ]
    .into_iter()
    .find(|(prefix, _)| backend.starts_with(prefix))
    .map(|(_, name)| name)
}

// ---------------------------------------------------------------- providers

/// Roofline efficiencies per kernel class, and each class's latency floor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RooflineFit {
    pub gemm_compute: f64,
    pub gemm_memory: f64,
    pub gemm_floor_ms: f64,
    pub ctx_compute: f64,
    pub ctx_floor_ms: f64,
    pub gen_memory: f64,
    pub gen_floor_ms: f64,
}

/// Where kernel times come from.
#[derive(Clone, Copy)]
pub enum Provider {
    /// The GPU's own tables.
    Table(&'static Tables),
    /// Another GPU's tables moved to `target` by the roofline ratio at each point (against the
    /// header's [`Tables::peaks`]; `target`'s BF16 rate made comparable with them where both
    /// cards give a measured one: `sim::cost::composed::provider_for`).
    Scaled { from: &'static Tables, target: Peaks },
    /// A roofline with fitted efficiencies on `target`, grids as `like`'s.
    Roofline { fit: RooflineFit, target: Peaks, like: &'static Tables },
}

impl Provider {
    pub fn gemm(&self, s: GemmShape) -> Curve {
        match self {
            Provider::Table(t) => t.gemm(s),
            Provider::Scaled { from, target } => {
                let mut c = from.gemm(s);
                let measured = c.ys.clone();
                for (y, &m) in c.ys.iter_mut().zip(&c.xs) {
                    *y *= gemm_sol_ms(m, s, target) / gemm_sol_ms(m, s, &from.peaks);
                }
                // The ratio of the two rooflines falls from the bandwidths' to the FLOP/s' where
                // the GEMM turns compute-bound, while the measured curve is still flat there: the
                // scaled curve then fell where the measured one did not (A100-40GB from the
                // A100-80GB's table, a prefill of 249 tokens 14% cheaper than one of 160; the cost
                // audit of 2026-12-06). Where the measured time does not fall, neither does the
                // scaled one; where it does (the table's own kernel switches), as measured.
                for i in 1..c.ys.len() {
                    if measured[i] >= measured[i - 1] && c.ys[i] < c.ys[i - 1] {
                        c.ys[i] = c.ys[i - 1];
                    }
                }
                c.sol_last = Some((s, *target));
                c
            }
            Provider::Roofline { fit, target, like } => {
                let xs = like.gemm.dtypes["bfloat16"].m.clone();
                let ys = xs
                    .iter()
                    .map(|&m| {
                        let (f, b) = gemm_work(m, s);
                        fit.gemm_floor_ms
                            + (f / (target.flops(s.fp8) * fit.gemm_compute)).max(b / (target.mem_bw * fit.gemm_memory))
                                * 1e3
                    })
                    .collect();
                Curve { xs, ys, sol_last: Some((s, *target)) }
            }
        }
    }

    pub fn ctx_grid(&self, h: Heads, first: Option<&str>) -> Grid {
        match self {
            Provider::Table(t) => t.ctx_grid(h, first),
            Provider::Scaled { from, target } => from
                .ctx_grid(h, first)
                .map_cells(|s, b, y| y * (ctx_sol_ms(s, b, h, target) / ctx_sol_ms(s, b, h, &from.peaks))),
            Provider::Roofline { fit, target, like } => like.ctx_grid(h, first).map_cells(|a, b, _| {
                let (f, b) = ctx_work(a, b, h);
                fit.ctx_floor_ms
                    + (f / (target.bf16_flops * fit.ctx_compute)).max(b / (target.mem_bw * fit.gen_memory)) * 1e3
            }),
        }
    }

    pub fn gen_grid(&self, h: Heads, first: Option<&str>) -> Grid {
        self.gen_grid_floored(h, first).0
    }

    /// [`Provider::gen_grid`], and how many cells of the table grid it starts from the DRAM-rate
    /// floor raised, out of how many ([`Tables::gen_grid_floored`]); none for the fitted roofline,
    /// which takes only the grid's axes.
    pub fn gen_grid_floored(&self, h: Heads, first: Option<&str>) -> (Grid, usize, usize) {
        match self {
            Provider::Table(t) => t.gen_grid_floored(h, first),
            Provider::Scaled { from, target } => {
                let (g, raised, cells) = from.gen_grid_floored(h, first);
                let g = g.map_cells(|b, l, y| y * (gen_sol_ms(b, l, h, target) / gen_sol_ms(b, l, h, &from.peaks)));
                (g, raised, cells)
            }
            Provider::Roofline { fit, target, like } => {
                let g = like.gen_grid(h, first).map_cells(|a, b, _| {
                    let (f, b) = gen_work(a, b, h);
                    fit.gen_floor_ms
                        + (f / (target.bf16_flops * fit.ctx_compute)).max(b / (target.mem_bw * fit.gen_memory)) * 1e3
                });
                (g, 0, 0)
            }
        }
    }

    /// The GPU's own tables, where it has them (not another GPU's, scaled or taken by a roofline).
    fn own(&self) -> Option<&'static Tables> {
        match self {
            Provider::Table(t) => Some(t),
            _ => None,
        }
    }

    /// The table the all-reduce comes from, where the GPU has its own.
    pub fn allreduce(&self, tp: u32) -> Option<Curve> {
        self.own()?.allreduce(tp)
    }

    /// The tables behind this provider: its own, the ones it scales, or the ones whose grids
    /// its roofline takes.
    pub fn tables(&self) -> &'static Tables {
        match self {
            Provider::Table(t) | Provider::Scaled { from: t, .. } | Provider::Roofline { like: t, .. } => t,
        }
    }

    /// NCCL's all-reduce from the GPU's own table, where it has one.
    pub fn nccl_all_reduce(&self, tp: u32) -> Option<Curve> {
        self.own()?.nccl_all_reduce(tp)
    }

    /// The table NCCL's all-gather comes from, where the GPU has its own.
    pub fn all_gather(&self, tp: u32) -> Option<Curve> {
        self.own()?.all_gather(tp)
    }
}

/// The lanes of an attention table an entry is preferred from ([`Tables::ctx_grid`]).
struct Lanes<'a> {
    /// The engine's backend, where one is named.
    first: Option<&'a str>,
    /// The phase's own kernel, then the common ones.
    rest: [&'a str; 4],
}

/// Peak numbers of the tabled system `s`.
pub fn peaks_of(system: &str) -> Option<Peaks> {
    index().peaks.get(system).copied()
}

/// The compute capability of each tabled system's GPU (`major`, `minor`), as its servesim card
/// states it (a test checks the two agree): which kernels its tables measured (FA3 and the
/// SM90 CUTLASS GEMMs on Hopper, the SM100 ones on B200, the SM120 ones on GB202).
pub const SYSTEM_CAPABILITY: &[(&str, (u32, u32))] = &[
    ("a100_sxm", (8, 0)),
    ("l40s", (8, 9)),
    ("h100_sxm", (9, 0)),
    ("h200_sxm", (9, 0)),
    ("b200_sxm", (10, 0)),
    ("rtx_pro_6000_server", (12, 0)),
];

/// The GPU-to-GPU link of each tabled system, as its servesim card states it: the kind
/// (`nvlink`, `pcie`) and the bandwidth a direction, bytes/s (a test checks the two agree).
pub const SYSTEM_LINK: &[(&str, &str, f64)] = &[
    ("a100_sxm", "nvlink", 300e9),
    ("l40s", "pcie", 32e9),
    ("h100_sxm", "nvlink", 450e9),
    ("h200_sxm", "nvlink", 450e9),
    ("b200_sxm", "nvlink", 900e9),
    ("rtx_pro_6000_server", "pcie", 64e9),
];

/// For a GPU without tables, the engine's measured all-reduce over `tp` GPUs of the tabled
/// system whose link is of the same kind and nearest in bandwidth (`|ln|` of the ratio),
/// its times scaled by the bandwidth ratio (the large messages' regime; the small ones'
/// latency then moves with it, an approximation). What an engine runs over a link is the
/// link's: vLLM's custom all-reduce needs NVLink past two GPUs, and falls back to NCCL over
/// PCIe, which the PCIe systems' tables measured. `None` where no such system has a table
/// at `tp`. Returns the curve and the system it came from.
pub fn allreduce_by_link(kind: &str, bandwidth: f64, engine: &str, tp: u32) -> Option<(Curve, &'static str)> {
    curve_by_link(kind, bandwidth, engine, |t| t.allreduce(tp))
}

/// The curve `of` a tabled system's tables, of the system on a link of `kind` nearest in
/// bandwidth, its times scaled by the bandwidth ratio ([`allreduce_by_link`]).
fn curve_by_link(
    kind: &str,
    bandwidth: f64,
    engine: &str,
    of: impl Fn(&Tables) -> Option<Curve>,
) -> Option<(Curve, &'static str)> {
    let distance = |bw: f64| (bw / bandwidth).ln().abs();
    let (system, bw, mut c) = SYSTEM_LINK
        .iter()
        .filter(|(_, k, _)| *k == kind)
        .filter_map(|&(s, _, bw)| Some((s, bw, of(tables(s, engine)?)?)))
        .min_by(|a, b| distance(a.1).total_cmp(&distance(b.1)))?;
    let scale = bw / bandwidth;
    for y in c.ys.iter_mut() {
        *y *= scale;
    }
    Some((c, system))
}

/// [`allreduce_by_link`] for NCCL's all-reduce ([`Tables::nccl_all_reduce`]): the nccl-tests table
/// of the tabled system on the same kind of link nearest in bandwidth, scaled by the bandwidth
/// ratio. `None` where no such system has one at `tp`.
pub fn nccl_all_reduce_by_link(kind: &str, bandwidth: f64, engine: &str, tp: u32) -> Option<(Curve, &'static str)> {
    curve_by_link(kind, bandwidth, engine, |t| t.nccl_all_reduce(tp))
}

/// [`SYSTEM_CAPABILITY`] of `system`.
pub fn system_capability(system: &str) -> Option<(u32, u32)> {
    SYSTEM_CAPABILITY.iter().find(|(s, _)| *s == system).map(|(_, c)| *c)
}

/// The tabled system a GPU without tables borrows from, leaving out `exclude`: among the
/// tabled systems of the GPU's compute capability (where the card states one and such a
/// system is tabled), else among all, the nearest to `p` in `(ln bf16 FLOP/s, ln bandwidth)`.
/// The compute capability first because the engines' kernels are built per SM architecture
/// (`sm_80`, `sm_89`, `sm_90`, `sm_100`, `sm_120`), so a table of the same capability timed
/// the same kernels: the RTX 5090 runs the RTX PRO 6000's GB202 kernels, the H100 PCIe the
/// H100 SXM's, whatever their peaks are nearest to. The whole capability, not its major:
/// the A100 (8.0) and the L40S (8.9) share a major, and either one's tables scaled time the
/// other 15–22% off (median) where the RTX PRO 6000's time them 4–15% off (VALIDATION.md §5,
/// the fallback).
pub fn nearest_system(p: &Peaks, capability: Option<(u32, u32)>, exclude: Option<&str>) -> &'static str {
    let d = |s: &str| {
        let q = peaks_of(s).expect("tabled system has peaks");
        let a = (q.bf16_flops / p.bf16_flops).ln();
        let b = (q.mem_bw / p.mem_bw).ln();
        a * a + b * b
    };
    let candidates: Vec<&'static str> = tabled_systems().into_iter().filter(|s| Some(*s) != exclude).collect();
    let same_arch: Vec<&'static str> = match capability {
        Some(cc) => candidates.iter().copied().filter(|s| system_capability(s) == Some(cc)).collect(),
        None => Vec::new(),
    };
    let pool = if same_arch.is_empty() { candidates } else { same_arch };
    pool.into_iter().min_by(|a, b| d(a).partial_cmp(&d(b)).unwrap()).expect("more than one tabled system")
}

// ---------------------------------------------------------------- the roofline fit

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// The shapes the fit and the leave-one-out read: every model card's GEMMs
/// and heads at TP 1 (what `data/kernels/shapes.json` lists first).
pub struct FitShapes {
    pub gemms: Vec<GemmShape>,
    pub heads: Vec<Heads>,
}

/// Fits [`RooflineFit`] on the tables of `systems` for `engine`: per kernel
/// class, the median over systems of the median utilisation of the points
/// well above the latency floor (roofline time ≥ 50 µs), compute-bound and
/// memory-bound apart, and the median of the smallest points' latency above their roofline as
/// the floor (GEMMs: the tenth of points with the least roofline time;
/// attention: under 2 µs). Fitted on kernel times only, never on end-to-end measurements.
pub fn fit_roofline(systems: &[&str], engine: &str, shapes: &FitShapes) -> RooflineFit {
    let mut per: Vec<[f64; 7]> = Vec::new();
    for &s in systems {
        let Some(t) = tables(s, engine) else { continue };
        let p = t.peaks;
        let (mut gc, mut gm, mut gf, mut cc, mut cf, mut dm, mut df) =
            (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
        let mut gsmall: Vec<(f64, f64)> = Vec::new();
        for &g in &shapes.gemms {
            let c = t.gemm(g);
            for (&m, &y) in c.xs.iter().zip(&c.ys) {
                let (f, b) = gemm_work(m, g);
                let (tc, tm) = (f / p.flops(g.fp8) * 1e3, b / p.mem_bw * 1e3);
                let sol = tc.max(tm);
                gsmall.push((sol, y - sol));
                if sol >= 0.05 {
                    if tc > tm {
                        gc.push(tc / y);
                    } else {
                        gm.push(tm / y);
                    }
                }
            }
        }
        // The floor: the latency above the roofline of the tenth of points with the least work.
        gsmall.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        gf.extend(gsmall.iter().take(gsmall.len().div_ceil(10)).map(|p| p.1));
        for &h in &shapes.heads {
            let g = t.ctx_grid(h, None);
            for (i, row) in g.v.iter().enumerate() {
                for (j, &y) in row.iter().enumerate() {
                    let (f, _) = ctx_work(g.a[i], g.b[j], h);
                    let tc = f / p.bf16_flops * 1e3;
                    if tc < 0.002 {
                        cf.push(y - tc);
                    } else if tc >= 0.05 {
                        cc.push(tc / y);
                    }
                }
            }
            let g = t.gen_grid(h, None);
            for (i, row) in g.v.iter().enumerate() {
                for (j, &y) in row.iter().enumerate() {
                    let (_, b) = gen_work(g.a[i], g.b[j], h);
                    let tm = b / p.mem_bw * 1e3;
                    if tm < 0.002 {
                        df.push(y - tm);
                    } else if tm >= 0.05 {
                        dm.push(tm / y);
                    }
                }
            }
        }
        per.push([
            median(&mut gc),
            median(&mut gm),
            median(&mut gf),
            median(&mut cc),
            median(&mut cf),
            median(&mut dm),
            median(&mut df),
        ]);
    }
    let col = |i: usize| {
        let mut v: Vec<f64> = per.iter().map(|r| r[i]).filter(|x| x.is_finite()).collect();
        median(&mut v)
    };
    RooflineFit {
        gemm_compute: col(0).min(1.0),
        gemm_memory: col(1).min(1.0),
        gemm_floor_ms: col(2),
        ctx_compute: col(3).min(1.0),
        ctx_floor_ms: col(4),
        gen_memory: col(5).min(1.0),
        gen_floor_ms: col(6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The experts a step's tokens touch under aiconfigurator's power-law routing: exactly top-k
    /// for one token, 2·top-k for two (the generator fills empty experts first), then the
    /// expectation of its draws (a Python replay of `_generate_power_law_distribution`, 2,000
    /// draws: 29.0 at 4 tokens, 43.2 at 8, 59.0 at 16, 106.8 at 32, 118.3 at 64), all 128 by 512.
    #[test]
    fn moe_experts_touched_follows_the_collectors_routing() {
        let pl = |t: f64| moe_experts_touched(t, 128, 8, "power_law_1.2");
        assert_eq!(pl(1.0), 8.0);
        assert_eq!(pl(2.0), 16.0);
        for (t, want) in [(4.0, 29.0), (8.0, 43.2), (16.0, 59.0), (32.0, 106.8), (64.0, 118.3)] {
            assert!((pl(t) - want).abs() < 1.5, "{t} tokens: {} experts, want about {want}", pl(t));
        }
        assert!(pl(512.0) > 127.9, "{}", pl(512.0));
        assert_eq!(pl(16384.0), 128.0);
        // Deterministic: the same draws every time.
        assert_eq!(pl(16.0), pl(16.0));
        assert_eq!(moe_experts_touched(4.0, 128, 8, "balanced"), 32.0);
        assert_eq!(moe_experts_touched(64.0, 128, 8, "balanced"), 128.0);
        // A routing the collector did not name: the fewest any routing touches.
        assert_eq!(moe_experts_touched(64.0, 128, 8, "zipf"), 8.0);
    }

    /// The MoE curves are floored at their experts' weight reads (the audit's L40S case: one token
    /// at TP 2 reads 8 experts x 3 x 2048 x 384 x 2 B = 37.7 MB, 43.7 us at 864 GB/s, where the
    /// table says 23.8 us, its weights left in the 96 MB L2); the GPUs whose L2 cannot hold the
    /// active set keep every point as measured.
    /// The shape a table's curve was measured at.
    fn shape_of(r: &MoeCurveRaw) -> MoeShape {
        let dtype = if r.moe_dtype == "bfloat16" { "bfloat16" } else { "fp8_block" };
        MoeShape { hidden: r.hidden, inter: r.inter, topk: r.topk, num_experts: r.num_experts, dtype, moe_tp: r.moe_tp }
    }

    #[test]
    fn moe_curves_are_floored_at_their_weight_reads_where_the_l2_held_them() {
        let shape = |dtype, inter, moe_tp| MoeShape { hidden: 2048, inter, topk: 8, num_experts: 128, dtype, moe_tp };
        let l40s = tables("l40s", "vllm").unwrap();
        let (c, label, _) = l40s.moe(&shape("bfloat16", 768, 2), 864e9).unwrap();
        let floor = 8.0 * 3.0 * 2048.0 * 384.0 * 2.0 / 864e9 * 1e3;
        assert!((c.at(1.0) - floor).abs() < 1e-9, "{} vs {floor}", c.at(1.0));
        assert!(c.at(1.0) > 0.0436 && c.at(1.0) < 0.0438, "{}", c.at(1.0));
        assert!(label.contains("floored"), "{label}");
        // Above the floor the table's points stand.
        let raw =
            l40s.moe.curves.iter().find(|r| r.inter == 768 && r.moe_tp == 2 && r.moe_dtype == "bfloat16").unwrap();
        assert_eq!(c.at(64.0), raw.latency_ms[raw.num_tokens.iter().position(|&x| x == 64.0).unwrap()]);
        // H100, H200, B200 and A100 (both engines): no point moves, even where the tables reach
        // 0.8 of the bandwidth (so the floor is not at ELEMENTWISE_BW_EFF's 0.8).
        for sys in ["h100_sxm", "h200_sxm", "b200_sxm", "a100_sxm"] {
            for eng in ["vllm", "sglang"] {
                let t = tables(sys, eng).unwrap();
                for r in &t.moe.curves {
                    let s = shape_of(r);
                    let (c, label, _) = t.moe(&s, t.peaks.mem_bw).unwrap();
                    assert_eq!(c.ys, r.latency_ms, "{sys} {eng} {label}");
                    assert!(!label.contains("floored"), "{label}");
                }
            }
        }
        // The RTX PRO 6000's and the L40S's tables hold points below it (0.35-0.81 of it).
        let mut floored = 0;
        for (sys, bw) in [("l40s", 864e9), ("rtx_pro_6000_server", 1597e9)] {
            for eng in ["vllm", "sglang"] {
                let t = tables(sys, eng).unwrap();
                for r in &t.moe.curves {
                    let s = shape_of(r);
                    let (c, _, _) = t.moe(&s, bw).unwrap();
                    for ((y, x), raw) in c.ys.iter().zip(&c.xs).zip(&r.latency_ms) {
                        let f = moe_weight_floor_ms(*x, &s, &t.moe.distribution, bw);
                        assert!(*y >= f * (1.0 - 1e-12) && *y >= *raw, "{sys} {eng} {x}");
                        floored += usize::from(y > raw);
                    }
                }
            }
        }
        assert!(floored > 20, "{floored} points floored");
    }

    /// The decode tables' cells are floored at the model's KV read at the table's own DRAM rate:
    /// on the L40S (Qwen3-8B's heads: batch 16 at 4,096 tokens, 268 MB, read at 0.58 TB/s as
    /// measured, stands; batch 16 at 512, 33.5 MB, measured at 0.86 TB/s, the card's whole DRAM
    /// bandwidth, is raised to bytes / rate); an fp8 entry with no cell of 512 MB takes the rate
    /// of its table's entries of the same kernel and dtype; on the A100, H100, H200 and B200 vLLM
    /// tables no cell moves by more than floating-point rounding.
    #[test]
    fn decode_cells_are_floored_at_their_kv_read_at_the_tables_dram_rate() {
        let h = Heads { heads: 32, kv_heads: 8, head_dim: 128, kv_bytes: 2 };
        let entry =
            |t: &'static Tables, h: Heads| Tables::attn_entry(&t.gen.entries, h, &Tables::lanes(None, "decode")).0;
        let cell = |e: &AttnEntry, b: f64, l: f64| {
            let i = e.batch.iter().position(|&x| x == b).unwrap();
            let j = e.kv_len.iter().position(|&x| x == l).unwrap();
            e.latency_ms[i][j].unwrap()
        };
        let l40s = tables("l40s", "vllm").unwrap();
        let e = entry(l40s, h);
        assert_eq!((e.heads, e.kv_heads, e.kv_cache_dtype.as_str()), (32, 8, "bfloat16"));
        let rate = gen_dram_rate(e).unwrap();
        // A DRAM rate: 0.6-0.75 TB/s on a card of 0.864.
        assert!(rate > 0.6e9 && rate < 0.75e9, "{rate} bytes/ms");
        let g = l40s.gen_grid(h, None);
        // Past the L2: the measured cell.
        let bytes = gen_kv_bytes(e, 16.0, 4096.0).unwrap();
        assert_eq!(bytes, 16.0 * 4096.0 * 2.0 * 8.0 * 128.0 * 2.0);
        assert!(bytes / cell(e, 16.0, 4096.0) < rate);
        assert_eq!(g.at(16.0, 4096.0), cell(e, 16.0, 4096.0));
        // In the L2: measured faster than the rate, raised to bytes / rate (1.15-1.35x).
        let (raw, bytes) = (cell(e, 16.0, 512.0), gen_kv_bytes(e, 16.0, 512.0).unwrap());
        assert!(bytes / raw > 0.84e9, "{} bytes/ms measured", bytes / raw);
        assert_eq!(g.at(16.0, 512.0), bytes / rate);
        assert!(g.at(16.0, 512.0) / raw > 1.15 && g.at(16.0, 512.0) / raw < 1.35, "{}", g.at(16.0, 512.0) / raw);
        // An fp8 entry whose cells stop short of 512 MB (16 query heads, 1 KV head): no rate of
        // its own, floored at its kernel's fastest among the table's fp8 entries.
        let h8 = Heads { heads: 16, kv_heads: 1, head_dim: 128, kv_bytes: 1 };
        let e8 = entry(l40s, h8);
        assert_eq!((e8.heads, e8.kv_heads, e8.kv_cache_dtype.as_str()), (16, 1, "fp8"));
        assert_eq!(gen_dram_rate(e8), None);
        let rate8 = l40s.gen_rate(e8).unwrap();
        assert!(rate8 > 0.6e9 && rate8 < 0.8e9, "{rate8}");
        let g8 = l40s.gen_grid(h8, None);
        let (raw, bytes) = (cell(e8, 256.0, 512.0), gen_kv_bytes(e8, 256.0, 512.0).unwrap());
        assert!(bytes / raw > rate8, "{} against {rate8}", bytes / raw);
        assert_eq!(g8.at(256.0, 512.0), bytes / rate8);
        // Cards whose L2 the tables do not show: no cell moves beyond rounding.
        for sys in ["a100_sxm", "h100_sxm", "h200_sxm", "b200_sxm"] {
            let t = tables(sys, "vllm").unwrap();
            let e = entry(t, h);
            let filled = fill_grid(&e.batch, &e.kv_len, &e.latency_ms, true);
            let g = t.gen_grid(h, None);
            for (i, row) in filled.iter().enumerate() {
                for (j, &y) in row.iter().enumerate() {
                    let r = g.v[i][j] / y;
                    assert!((1.0..1.0 + 1e-12).contains(&r), "{sys} batch {} kv_len {}: x{r}", e.batch[i], e.kv_len[j]);
                }
            }
        }
    }

    /// aiconfigurator's vLLM MoE collectors' kernel names, as vLLM's `--moe-backend` names them.
    #[test]
    fn moe_kernel_sources_map_to_vllm_backend_names() {
        for (source, name) in [
            ("vllm_fp8moe_triton_tritonexperts", Some("triton")),
            ("vllm_unquantizedfusedmoe_triton_tritonexperts", Some("triton")),
            ("vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic", Some("flashinfer_trtllm")),
            ("vllm_unquantizedfusedmoe_flashinfer_trtllm_trtllmbf16experts", Some("flashinfer_trtllm")),
            ("vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts", Some("flashinfer_cutlass")),
            ("vllm_fp8moe_deep_gemm_deepgemmexperts", Some("deep_gemm")),
            ("vllm_fused_moe", Some("triton")),
            ("sglang_fused_moe_triton", Some("triton")),
            ("sglang_flashinfer_trtllm_moe", Some("flashinfer_trtllm")),
            ("sglang_something_else", None),
            ("vllm_fp8moe_something_else", None),
        ] {
            assert_eq!(moe_backend_of(source), name, "{source}");
        }
        // Every MoE table in the repository names a kernel.
        for t in tabled_systems().iter().flat_map(|s| [tables(s, "vllm"), tables(s, "sglang")]).flatten() {
            for c in &t.moe.curves {
                for k in &c.kernel_source {
                    assert!(moe_backend_of(k).is_some(), "{} {k}", t.system);
                }
            }
        }
    }

    /// Every fp8 GEMM curve read from a table is non-decreasing in `m` (the raw
    /// tables are not: see [`monotone_in_m`]), and a monotone curve is left as it is.
    #[test]
    fn fp8_gemm_curves_are_monotone_in_m() {
        let shapes = crate::cost::fit_shapes();
        for system in tabled_systems() {
            for engine in ["vllm", "sglang"] {
                let Some(t) = tables(system, engine) else { continue };
                if !t.gemm.dtypes.contains_key("fp8") {
                    continue;
                }
                for &g in &shapes.gemms {
                    let c = t.gemm(GemmShape { fp8: true, ..g });
                    for w in c.ys.windows(2) {
                        assert!(w[0] <= w[1], "{system} {engine} {g:?}: {} > {}", w[0], w[1]);
                    }
                    let mut ys = c.ys.clone();
                    monotone_in_m(&mut ys);
                    assert_eq!(ys, c.ys);
                }
            }
        }
    }

    /// A GEMM curve scaled to an untabled GPU does not fall where the measured one does not
    /// (the cost audit of 2026-12-06: scaled to an A100-40GB's bandwidth, the A100-80GB's flat
    /// curve fell where the roofline ratio turned from the bandwidths' to the FLOP/s', and a
    /// 249-token prefill cost 14% less than a 160-token one).
    #[test]
    fn scaled_gemm_curves_fall_only_where_the_measured_ones_do() {
        let from = tables("a100_sxm", "vllm").expect("the A100's tables");
        let mut target = peaks_of("a100_sxm").expect("its peaks");
        target.mem_bw *= 1555.0 / 2039.0;
        let scaled = Provider::Scaled { from, target };
        let mut lifted = 0;
        for &g in &crate::cost::fit_shapes().gemms {
            let (m, c) = (from.gemm(g), scaled.gemm(g));
            for i in 1..c.ys.len() {
                if m.ys[i] >= m.ys[i - 1] {
                    assert!(c.ys[i] >= c.ys[i - 1], "{g:?} at m = {}: {} after {}", c.xs[i], c.ys[i], c.ys[i - 1]);
                }
                // Never below the measured source scaled by the lower of the two ratios.
                assert!(c.ys[i] >= m.ys[i] * 0.999, "{g:?}: a slower GPU's GEMM faster than the source's");
                lifted += usize::from(
                    c.ys[i]
                        > m.ys[i] * gemm_sol_ms(c.xs[i], g, &target) / gemm_sol_ms(c.xs[i], g, &from.peaks) * 1.000_001,
                );
            }
        }
        assert!(lifted > 0, "the shapes crossed no compute/memory boundary: the check judged nothing");
    }

    /// Every built-in model card has its GEMM shapes extracted into every table at
    /// every TP size its heads divide: a card added without rerunning
    /// `scripts/kernels/extract.py` would otherwise be timed from the nearest other
    /// shape's curve without anyone noticing (Qwen3-8B/14B and Qwen2.5-72B were, until
    /// 2026-12-04).
    #[test]
    fn every_model_card_has_its_gemm_curves_in_every_table() {
        let models = crate::builtin::resources().expect("built-in cards").models;
        for system in tabled_systems() {
            for engine in ["vllm", "sglang"] {
                let Some(t) = tables(system, engine) else { continue };
                let curves = &t.gemm.dtypes["bfloat16"].curves;
                for m in &models {
                    for tp in [1u32, 2, 4, 8] {
                        if m.num_attention_heads % tp != 0 {
                            continue;
                        }
                        let (g, lm, _) = crate::cost::model_shapes(m, tp, false, 2);
                        // A MoE card: QKV, O, the LM head and the router (its experts are moe.json's).
                        let shapes: Vec<GemmShape> = match crate::cost::moe_router_shape(m) {
                            None => g.iter().chain(std::iter::once(&lm)).copied().collect(),
                            Some(r) => vec![g[0], g[1], lm, r],
                        };
                        for s in &shapes {
                            assert!(
                                curves.iter().any(|c| c.n == s.n && c.k == s.k),
                                "data/kernels/{system}/{engine}/gemm.json has no curve for {} at TP {tp} \
                                 (n = {}, k = {}): rerun scripts/kernels/extract.py (data/kernels/README.md)",
                                m.id,
                                s.n,
                                s.k
                            );
                        }
                    }
                }
            }
        }
    }

    /// The flat grids the step loop reads give exactly the grids' values, on the
    /// points, between them, at whole numbers and beyond both ends.
    #[test]
    fn flat_grids_are_the_grids_bit_for_bit() {
        let shapes = crate::cost::fit_shapes();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for system in tabled_systems() {
            for engine in ["vllm", "sglang"] {
                let Some(t) = tables(system, engine) else { continue };
                for &h in &shapes.heads {
                    for g in [t.ctx_grid(h, None), t.gen_grid(h, None)] {
                        let f = g.flat();
                        let (amax, bmax) = (g.a[g.a.len() - 1] * 1.5, g.b[g.b.len() - 1] * 1.5);
                        let mut pts: Vec<(f64, f64)> = Vec::new();
                        for &a in &g.a {
                            for &b in &g.b {
                                pts.push((a, b));
                            }
                        }
                        for _ in 0..3000 {
                            let a = (rnd() % 1_000_000) as f64 / 1e6 * amax;
                            let b = (rnd() % 1_000_000) as f64 / 1e6 * bmax;
                            pts.push((a, b));
                            pts.push((a.round().max(1.0), b));
                            pts.push((a, b.round().max(1.0)));
                        }
                        for (a, b) in pts {
                            let want = g.at(a, b).to_bits();
                            assert_eq!(f.at(a, b).to_bits(), want, "{system} {engine} at ({a}, {b})");
                            if a.fract() == 0.0 {
                                assert_eq!(f.at_whole_a(a as u64, b).to_bits(), want, "{system} {engine} ({a}, {b})");
                            }
                            if b.fract() == 0.0 {
                                assert_eq!(f.at_whole_b(a, b as u64).to_bits(), want, "{system} {engine} ({a}, {b})");
                            }
                        }
                    }
                }
            }
        }
    }
}
