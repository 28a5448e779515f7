//! Reading a sweep: the throughput knee and the KV-limited concurrency.

use crate::config::SimSpec;
use crate::workload::Workload;

/// How many requests the KV pool holds at once.
#[derive(Clone, Debug, PartialEq)]
pub struct KvLimit {
    /// Mean prompt + output tokens of the workload's requests.
    pub mean_request_tokens: f64,
    /// That, rounded up to whole blocks (pages).
    pub footprint_tokens: u64,
    pub kv_capacity_tokens: u64,
    /// `kv_capacity_tokens / footprint_tokens`, rounded down.
    pub concurrency: u64,
}

/// KV tokens ÷ per-request footprint in whole blocks, for the workload's mean request.
pub fn kv_limited_concurrency(spec: &SimSpec, workload: &Workload) -> KvLimit {
    kv_limit(spec.engine.kv_capacity_tokens(), spec.engine.kv_granularity(), workload)
}

/// The same from a capacity and a block (page) size.
pub fn kv_limit(capacity_tokens: u64, granularity: u32, workload: &Workload) -> KvLimit {
    let (i, o) = workload.mean_lengths();
    let mean = i + o;
    let g = u64::from(granularity.max(1));
    let footprint = ((mean.ceil() as u64).div_ceil(g) * g).max(g);
    KvLimit {
        mean_request_tokens: mean,
        footprint_tokens: footprint,
        kv_capacity_tokens: capacity_tokens,
        concurrency: capacity_tokens / footprint,
    }
}

/// One point of a sweep as the knee finder sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KneePoint {
    pub concurrency: f64,
    pub output_throughput: f64,
    pub mean_ttft_ms: f64,
}

/// The knee: the smallest concurrency past which output throughput grows
/// less than 5% (no later point exceeds it by 5% or more) while TTFT keeps
/// rising (the next point's mean TTFT is higher). Points must be in
/// increasing concurrency. `None` if the sweep never reaches it.
pub fn find_knee(points: &[KneePoint]) -> Option<usize> {
    (0..points.len().saturating_sub(1)).find(|&i| {
        let p = points[i];
        let later_max = points[i + 1..].iter().map(|q| q.output_throughput).fold(f64::NEG_INFINITY, f64::max);
        later_max < p.output_throughput * 1.05 && points[i + 1].mean_ttft_ms > p.mean_ttft_ms
    })
}

/// One sentence on what the KV-limited concurrency means for this scenario.
pub fn kv_limit_sentence(limit: &KvLimit, max_running: u32, engine: &str) -> String {
    let knob = if engine == "sglang" { "max_running_requests" } else { "max_num_seqs" };
    if u64::from(max_running) < limit.concurrency {
        format!(
            "{knob} = {max_running} binds before the KV pool does (the pool holds {} requests of {} tokens): past {max_running} concurrent requests, new ones queue in the engine and TTFT grows with the queue.",
            limit.concurrency, limit.footprint_tokens
        )
    } else {
        format!(
            "The KV pool of {} tokens holds {} requests of {} tokens (mean prompt + output, in whole blocks) at once: past that concurrency, new requests wait for KV (or running ones are preempted), so throughput stops rising and TTFT grows with the queue.",
            limit.kv_capacity_tokens, limit.concurrency, limit.footprint_tokens
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(v: &[(f64, f64, f64)]) -> Vec<KneePoint> {
        v.iter().map(|&(c, t, f)| KneePoint { concurrency: c, output_throughput: t, mean_ttft_ms: f }).collect()
    }

    #[test]
    fn knee_is_where_throughput_flattens_and_ttft_rises() {
        let p = pts(&[
            (1.0, 100.0, 50.0),
            (16.0, 1200.0, 60.0),
            (64.0, 2000.0, 90.0),
            (128.0, 2050.0, 900.0),
            (256.0, 2060.0, 3000.0),
        ]);
        assert_eq!(find_knee(&p), Some(2));
        let rising = pts(&[(1.0, 100.0, 50.0), (2.0, 200.0, 51.0)]);
        assert_eq!(find_knee(&rising), None);
        // Flat throughput but falling TTFT is not a knee.
        let flat = pts(&[(1.0, 100.0, 50.0), (2.0, 101.0, 40.0)]);
        assert_eq!(find_knee(&flat), None);
    }
}
