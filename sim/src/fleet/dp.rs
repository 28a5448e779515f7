//! Data parallelism inside one engine: the balancers that pick a DP rank.
//!
//! * [`VllmDpBalancer`]: vLLM V1's `DPLBAsyncMPClient.get_core_engine_for_request`
//!   (`vllm/v1/engine/core_client.py`): the API server keeps, per engine core, the
//!   `(waiting, running)` counts the DP coordinator publishes (about every 100 ms),
//!   picks the engine with the lowest `waiting × 4 + running` (scanning from its
//!   start index, the first minimum on ties), and adds the request to its local
//!   waiting count until the next publication.
//! * [`SglangDpController`]: SGLang's `DataParallelController`
//!   (`python/sglang/srt/managers/data_parallel_controller.py`): `round_robin`
//!   (the default `--load-balance-method`) cycles the DP ranks; `shortest_queue`
//!   sends to the rank with the fewest requests dispatched and not finished
//!   (servesim's reading; see `docs/fleets.md`).

use super::router::{argmin_by, ReplicaView, RouteRequest, Router};

/// Stats publication interval of vLLM's DP coordinator, ns.
pub const VLLM_DP_STATS_INTERVAL_NS: u64 = 100_000_000;

/// vLLM's DP load balancer (least `4 × waiting + running`, counts refreshed every 100 ms).
#[derive(Clone, Debug, Default)]
pub struct VllmDpBalancer {
    counts: Vec<(u64, u64)>,
    /// The publication period the counts were last refreshed in.
    period: Option<u64>,
}

impl Router for VllmDpBalancer {
    fn name(&self) -> &'static str {
        "vllm_data_parallel"
    }
    fn route(&mut self, req: &RouteRequest<'_>, replicas: &[ReplicaView]) -> usize {
        let period = req.now_ns / VLLM_DP_STATS_INTERVAL_NS;
        if self.period != Some(period) || self.counts.len() != replicas.len() {
            self.period = Some(period);
            self.counts = replicas.iter().map(|r| (u64::from(r.waiting), u64::from(r.running))).collect();
        }
        let i = argmin_by(replicas.len(), |i| self.counts[i].0 * 4 + self.counts[i].1);
        self.counts[i].0 += 1;
        i
    }
}

/// SGLang's `--load-balance-method`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadBalanceMethod {
    #[default]
    RoundRobin,
    ShortestQueue,
}

/// SGLang's `DataParallelController`.
#[derive(Clone, Debug, Default)]
pub struct SglangDpController {
    pub method: LoadBalanceMethod,
    next: u64,
}

impl SglangDpController {
    pub fn new(method: LoadBalanceMethod) -> SglangDpController {
        SglangDpController { method, next: 0 }
    }
}

impl Router for SglangDpController {
    fn name(&self) -> &'static str {
        "sglang_data_parallel"
    }
    fn route(&mut self, _req: &RouteRequest<'_>, replicas: &[ReplicaView]) -> usize {
        match self.method {
            LoadBalanceMethod::RoundRobin => {
                let i = (self.next % replicas.len() as u64) as usize;
                self.next += 1;
                i
            }
            LoadBalanceMethod::ShortestQueue => argmin_by(replicas.len(), |i| replicas[i].outstanding),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::blocks::tests::spec;
    use crate::fleet::router::tests::req;

    #[test]
    fn vllm_balancer_counts_its_own_sends_between_publications() {
        let s = spec(&[(1, 10)]);
        let mut b = VllmDpBalancer::default();
        let mut v = vec![ReplicaView::default(); 2];
        v[0].running = 2; // score 2
        v[1].waiting = 0; // score 0
                          // Two sends in the same period: the second sees the first's +4 on replica 1.
        assert_eq!(b.route(&req(0, &s, 0), &v), 1);
        assert_eq!(b.route(&req(1, &s, 1), &v), 0);
        // 4·1 + 0 = 4 vs 4·1 + 2 = 6: replica 1 again.
        assert_eq!(b.route(&req(2, &s, 2), &v), 1);
        // A new period: the engines' own counts again.
        assert_eq!(b.route(&req(3, &s, VLLM_DP_STATS_INTERVAL_NS), &v), 1);
    }

    #[test]
    fn sglang_controller_round_robin_and_shortest_queue() {
        let s = spec(&[(1, 10)]);
        let mut rr = SglangDpController::new(LoadBalanceMethod::RoundRobin);
        let v = crate::fleet::router::tests::views(&[5, 0, 0]);
        let picks: Vec<usize> = (0..4).map(|i| rr.route(&req(i, &s, 0), &v)).collect();
        assert_eq!(picks, [0, 1, 2, 0]);
        let mut sq = SglangDpController::new(LoadBalanceMethod::ShortestQueue);
        assert_eq!(sq.route(&req(0, &s, 0), &v), 1);
    }
}
