//! The kernel-composed step cost (issue #12): the fallback for GPUs without
//! tables is the one with the smaller leave-one-GPU-out error, and the
//! composed cost behaves as a step clock should.
//!
//! `cargo test -p sim --release --test kernel_cost -- --nocapture` prints the
//! leave-one-out table that `VALIDATION.md` quotes.

use sim::cost::{leave_one_gpu_out, Fallback, StepShape, FALLBACK};

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i]
}

#[test]
fn fallback_is_chosen_by_leave_one_gpu_out_error() {
    let rows = leave_one_gpu_out();
    assert!(rows.len() >= 10, "{} rows", rows.len());
    println!("| held-out GPU | engine | nearest | scaled median | scaled p90 | roofline median | roofline p90 |");
    println!("|---|---|---|---:|---:|---:|---:|");
    let (mut all_s, mut all_r) = (Vec::new(), Vec::new());
    let (mut med_s, mut med_r) = (Vec::new(), Vec::new());
    for r in &rows {
        let (mut s, mut f) = (r.scaled_errors.clone(), r.roofline_errors.clone());
        all_s.extend_from_slice(&s);
        all_r.extend_from_slice(&f);
        let (sm, rm) = (quantile(&mut s, 0.5), quantile(&mut f, 0.5));
        med_s.push(sm);
        med_r.push(rm);
        println!(
            "| {} | {} | {} | {:.1}% | {:.1}% | {:.1}% | {:.1}% |",
            r.system,
            r.engine,
            r.nearest,
            100.0 * sm,
            100.0 * quantile(&mut s, 0.9),
            100.0 * rm,
            100.0 * quantile(&mut f, 0.9)
        );
    }
    let (s50, r50) = (quantile(&mut all_s, 0.5), quantile(&mut all_r, 0.5));
    println!(
        "| all | | | {:.1}% | {:.1}% | {:.1}% | {:.1}% |",
        100.0 * s50,
        100.0 * quantile(&mut all_s, 0.9),
        100.0 * r50,
        100.0 * quantile(&mut all_r, 0.9)
    );
    for engine in ["vllm", "sglang"] {
        let f = sim::cost::fitted_roofline(engine, None);
        println!(
            "fitted roofline ({engine} tables, all GPUs): GEMM compute {:.2}, GEMM memory {:.2}, prefill attention {:.2}, \
             decode attention memory {:.2}; floors GEMM {:.1} µs, prefill attention {:.1} µs, decode attention {:.1} µs",
            f.gemm_compute,
            f.gemm_memory,
            f.ctx_compute,
            f.gen_memory,
            1e3 * f.gemm_floor_ms,
            1e3 * f.ctx_floor_ms,
            1e3 * f.gen_floor_ms
        );
    }
    let better = if s50 <= r50 { Fallback::NearestScaled } else { Fallback::FittedRoofline };
    assert_eq!(FALLBACK, better, "the fallback must be the one with the smaller leave-one-out median error");
}

#[test]
fn composed_step_grows_with_tokens_and_context() {
    let spec = sim::config::resolve(
        &sim::config::from_value(
            serde_json::json!({"version": 1, "engine": {"kind": "vllm", "kv_cache_tokens": 100000, "max_model_len": 8192},
                "model": "llama-3.1-8b-instruct", "hardware": "h100-80gb",
                "workload": {"dataset_name": "random", "random_input_len": 1024, "random_output_len": 128, "ignore_eos": true}}),
            "",
        )
        .unwrap(),
        &sim::builtin::resources().unwrap(),
    )
    .unwrap();
    let c = &spec.cost;
    assert!(c.source().starts_with("aiconfigurator-core 0.12.0 h100_sxm vllm"), "{}", c.source());
    let step = |s: &StepShape| c.step_ns(s);
    let mut last = 0;
    for n in [1u64, 64, 512, 2048, 8192, 20000] {
        let mut s = StepShape::default();
        s.add_prefill(0, n);
        let t = step(&s);
        assert!(t > last, "prefill {n}: {t} ns not above {last}");
        last = t;
    }
    let d1 = step(&StepShape::decodes(32, 32 * 1024));
    let d2 = step(&StepShape::decodes(32, 32 * 8192));
    assert!(d2 > d1);
    // A cached prefix makes a chunk cheaper than the same tokens from scratch... but dearer than a
    // chunk of the same length without the prefix.
    let mut a = StepShape::default();
    a.add_prefill(0, 2048);
    let mut b = StepShape::default();
    b.add_prefill(6144, 2048);
    let mut full = StepShape::default();
    full.add_prefill(0, 8192);
    assert!(step(&a) < step(&b) && step(&b) < step(&full));
    // Memoised values are the computed ones.
    assert_eq!(step(&a), step(&a));
}

/// With tensor parallelism a step makes, besides the two all-reduces a layer, one
/// all-reduce of the embedding's output and one NCCL all-gather of the logits
/// (`VocabParallelEmbedding.forward`, `LogitsProcessor._gather_logits` in vLLM;
/// the same calls in SGLang), timed from the system's tables: none at TP 1, the
/// nccl-tests all-gather at the gathered size (sequences × padded vocabulary) at TP 8, each
/// collective plus the wait for the slowest rank.
#[test]
fn tp_steps_pay_the_embedding_all_reduce_and_the_logits_all_gather() {
    let spec_at = |tp: u32| {
        sim::config::resolve(
            &sim::config::from_value(
                serde_json::json!({"version": 1,
                    "engine": {"kind": "vllm", "version": "0.11.0", "kv_cache_tokens": 16000, "max_model_len": 8192,
                               "tensor_parallel_size": tp},
                    "model": "llama-3.1-70b-instruct", "hardware": {"gpu": "h200", "count": tp},
                    "workload": {"dataset_name": "random", "random_input_len": 1024, "random_output_len": 128, "ignore_eos": true}}),
                "",
            )
            .unwrap(),
            &sim::builtin::resources().unwrap(),
        )
        .unwrap()
    };
    let one = spec_at(1);
    let c1 = one.cost.composed.as_ref().expect("composed cost");
    assert_eq!(c1.logits_gather_us(16), 0.0);
    assert_eq!(c1.allreduce_us(16), 0.0);
    let eight = spec_at(8);
    let c8 = eight.cost.composed.as_ref().expect("composed cost");
    let tables = sim::kernels::tables("h200_sxm", "vllm").unwrap();
    let ag = tables.all_gather(8).expect("nccl all_gather at 8 GPUs");
    // Llama-3.1: vocabulary 128,256, 16,032 a rank at TP 8.
    let elems = 16.0 * 16_032.0 * 8.0;
    // The table's time plus the wait for the slowest of 8 ranks (σ · E[max of 8 normals]).
    let skew = sim::cost::collective_skew_us(8);
    assert!((skew - sim::cost::COLLECTIVE_SKEW_SIGMA_US * 1.4236).abs() < 1e-9, "{skew}");
    assert!((c8.logits_gather_us(16) - (ag.at(elems) * 1e3 + skew)).abs() < 1e-9);
    let ar_table = tables.allreduce(8).expect("all-reduce at 8 GPUs");
    assert!((c8.allreduce_us(16) - (ar_table.at(16.0 * 8192.0) * 1e3 + skew)).abs() < 1e-9);
    assert!(c8.logits_gather_us(16) > 10.0 && c8.logits_gather_us(16) < 100.0, "{}", c8.logits_gather_us(16));
    // A decode step's GPU time holds 2 × layers + 1 all-reduces and the gather: removing
    // them leaves the same kernels as at TP 8 without collectives.
    let s = StepShape::decodes(16, 16 * 1024);
    let ar = c8.allreduce_us(16);
    assert!(ar > 0.0);
    let collectives = (2.0 * 80.0 + 1.0) * ar + c8.logits_gather_us(16);
    assert!(c8.gpu_us(&s) > collectives, "{} vs {collectives}", c8.gpu_us(&s));
}

/// Where a table holds several attention lanes, the engine's default backend is read first:
/// SGLang on the B200 from 0.5.7 takes `trtllm_mha` (its default on the SM100 family), earlier
/// releases and other engines the `flashinfer` lane (docs/sglang.md §5).
#[test]
fn the_engines_default_attention_lane_is_read_first() {
    let t = sim::kernels::tables("b200_sxm", "sglang").expect("B200 SGLang tables");
    // Heads of a TP-sharded shape whose two lanes differ in the table.
    let h = sim::kernels::Heads { heads: 16, kv_heads: 2, head_dim: 128, kv_bytes: 2 };
    let (fi, trt) = (t.gen_grid(h, None), t.gen_grid(h, Some("trtllm_mha")));
    assert_ne!(fi.v, trt.v, "the two lanes are different measurements");
    let spec = |version: &str| {
        sim::config::resolve(
            &sim::config::from_value(
                serde_json::json!({"version": 1, "engine": {"kind": "sglang", "version": version, "tp_size": 4},
                    "model": "llama-3.1-70b-instruct-fp8", "hardware": {"gpu": "b200", "count": 4},
                    "workload": {"dataset_name": "random", "random_input_len": 1024, "random_output_len": 128, "ignore_eos": true}}),
                "",
            )
            .unwrap(),
            &sim::builtin::resources().unwrap(),
        )
        .unwrap()
    };
    // Llama-3.1-70B at TP 4: the 16 query heads and 2 KV heads a GPU compared above.
    let step = |version: &str| {
        let s = spec(version);
        let c = s.cost.composed.as_ref().unwrap().clone();
        c.gpu_us(&StepShape::decodes(64, 64 * 4096))
    };
    assert_ne!(step("0.5.6"), step("0.5.7"), "0.5.7 reads the trtllm_mha lane");
    assert_eq!(step("0.5.7"), step("0.5.23"));
}

/// A GPU without tables borrows the tables of its own compute capability where one is tabled
/// (the same SM architecture runs the same kernels), else the nearest by peak numbers; the
/// capabilities the fallback reads for the tabled systems are their cards'.
#[test]
fn the_fallback_reads_tables_of_the_same_compute_capability_first() {
    let res = sim::builtin::resources().unwrap();
    for (system, cc) in sim::kernels::SYSTEM_CAPABILITY {
        let card = res
            .gpus
            .iter()
            .find(|g| sim::kernels::system_for_gpu(&g.id) == Some(*system))
            .unwrap_or_else(|| panic!("no card is timed by {system}"));
        assert_eq!(card.capability(), Some(*cc), "{system} against card {}", card.id);
    }
    for s in sim::kernels::tabled_systems() {
        assert!(sim::kernels::system_capability(s).is_some(), "{s} has no compute capability");
    }
    let borrowed = |id: &str| {
        let gpu = res.gpus.iter().find(|g| g.id == id).unwrap();
        let peaks = sim::kernels::Peaks {
            bf16_flops: gpu.dense_bf16_flops,
            fp8_flops: gpu.dense_fp8_flops,
            mem_bw: gpu.memory_bandwidth_bytes_per_s,
        };
        (sim::kernels::nearest_system(&peaks, gpu.capability(), None), sim::kernels::nearest_system(&peaks, None, None))
    };
    // The RTX 5090 is the RTX PRO 6000's GB202, though the A100 is nearer by peaks.
    assert_eq!(borrowed("rtx-5090"), ("rtx_pro_6000_server", "a100_sxm"));
    // The H100 PCIe is an H100, though the RTX PRO 6000 is nearer by peaks.
    assert_eq!(borrowed("h100-pcie"), ("h100_sxm", "rtx_pro_6000_server"));
    assert_eq!(borrowed("h100-nvl").0, "h100_sxm");
    // No table of the A100 40GB's 8.0 but the A100 80GB's.
    assert_eq!(borrowed("a100-40gb").0, "a100_sxm");
}

/// A GPU without tables takes its TP all-reduces from a tabled system over the same kind of
/// link (the nearest in bandwidth), scaled by the bandwidth ratio; the links the fallback reads
/// for the tabled systems are their cards'.
#[test]
fn an_untabled_gpus_all_reduces_come_from_a_system_on_the_same_link() {
    let res = sim::builtin::resources().unwrap();
    for (system, kind, bw) in sim::kernels::SYSTEM_LINK {
        let card = res.gpus.iter().find(|g| sim::kernels::system_for_gpu(&g.id) == Some(*system)).unwrap();
        assert_eq!(card.interconnect.as_deref(), Some(*kind), "{system}");
        assert_eq!(card.interconnect_bandwidth_bytes_per_s, Some(*bw), "{system}");
    }
    let (pcie, from) = sim::kernels::allreduce_by_link("pcie", 64e9, "vllm", 4).unwrap();
    assert_eq!(from, "rtx_pro_6000_server");
    let own = sim::kernels::tables("rtx_pro_6000_server", "vllm").unwrap().allreduce(4).unwrap();
    assert_eq!(pcie.ys, own.ys, "the same link bandwidth: the table as measured");
    // A link half as fast takes twice as long; a link kind no table has gives none.
    let (slow, _) = sim::kernels::allreduce_by_link("pcie", 32e9, "vllm", 4).unwrap();
    assert_eq!(slow.ys, sim::kernels::tables("l40s", "vllm").unwrap().allreduce(4).unwrap().ys, "L40S's own");
    let (half, _) = sim::kernels::allreduce_by_link("pcie", 48e9, "vllm", 4).unwrap();
    assert!(half.ys.iter().zip(&own.ys).all(|(a, b)| (a / b - 64.0 / 48.0).abs() < 1e-12));
    assert!(sim::kernels::allreduce_by_link("infiniband", 50e9, "vllm", 4).is_none());
    // Through a scenario: the H100 PCIe at TP 4 says where its all-reduces come from.
    let spec = sim::config::resolve(
        &sim::config::from_value(
            serde_json::json!({"version": 1, "engine": {"kind": "vllm", "tensor_parallel_size": 4, "max_model_len": 8192},
                "model": "qwen3-32b", "hardware": {"gpu": "h100-pcie", "count": 4},
                "workload": {"dataset_name": "random", "random_input_len": 1024, "random_output_len": 64, "ignore_eos": true}}),
            "",
        )
        .unwrap(),
        &res,
    )
    .unwrap();
    assert!(spec.cost.source().contains("TP all-reduces from rtx_pro_6000_server"), "{}", spec.cost.source());
}
