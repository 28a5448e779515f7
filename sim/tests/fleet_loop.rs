//! The fleet loop across phases: the initial test request, warm-ups and the timed phase
//! each send from their own list of client sends, merged with the event heap in
//! `(time, sequence)` order; open and closed loops, fast-forward on and off, agree.

mod common;

use common::{small_vllm, spec};
use serde_json::json;
use sim::simulation::{RunOptions, StopReason};

#[test]
fn phases_run_in_order_in_a_fleet_open_and_closed_loop() {
    for closed in [false, true] {
        let mut v = small_vllm(512, 32, 200, 16);
        let w = v["workload"].as_object_mut().unwrap();
        w.insert("initial_test_request".into(), json!(true));
        w.insert("num_warmups".into(), json!(4));
        if !closed {
            w.remove("max_concurrency");
            w.insert("request_rate".into(), json!(20.0));
        }
        v["fleet"] = json!({"count": 3, "router": {"policy": "cache_aware"}});
        let s = spec(v);
        let on = sim::simulate(&s, RunOptions { check_invariants: true, ..Default::default() });
        let off = sim::simulate(&s, RunOptions { fast_forward: false, ..Default::default() });
        assert_eq!(on.run.stop, StopReason::Completed, "closed loop: {closed}");
        assert_eq!(on.metrics.completed, 200);
        let (a, b) = (sim::report::PointReport::of(&s, &on), sim::report::PointReport::of(&s, &off));
        assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap(), "closed loop: {closed}");
        assert_eq!(format!("{:?}", on.run.records), format!("{:?}", off.run.records));
        assert_eq!(on.run.token_log, off.run.token_log);
        // The timed phase starts after the warm-ups: every timed request is sent after it.
        assert!(on.run.records.iter().all(|r| r.dispatch_ns >= on.run.bench_start_ns));
    }
}
