#!/usr/bin/env python3
"""The fit objective of this run's probes with the fitted profile and the ingress set by hand.

Shows that the search had left `request_ingress_us` (0.0005 µs) far from where the objective
is lowest (VALIDATION.md, third round). Every probe is simulated closed loop from its own
workload (the fit replayed the concurrency>1 probes at their measured send times, so the
values are close to, not equal to, the fit's own objective); each log error is divided by
the fit's target_noise, as the fit does.

    cargo build --release
    python3 validation/live-20261130-sgl-warm180/ingress_objective.py
"""
import json, math, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SERVESIM = os.path.join(ROOT, "target", "release", "servesim")
profile_path = os.path.join(HERE, "sglang-profile.json")
profile = json.load(open(profile_path))
noise = profile["fit"]["target_noise"]
workloads = {w["name"]: w["workload"] for w in profile["fit_workloads"]}
base = json.load(open(os.path.join(HERE, "ingress-probe-scenario.json")))
base["cost"] = {"profile": profile_path}
with tempfile.TemporaryDirectory() as tmp:
    for ingress_us in [0.0005, 5000, 10000, 15000]:
        total = {}
        for point in profile["fit"]["points"]:
            scenario = dict(base, workload=workloads[point["name"].split("#")[0]])
            path = os.path.join(tmp, "s.json")
            json.dump(scenario, open(path, "w"))
            out = subprocess.run(
                [SERVESIM, "simulate", path, "--json", "--set", f"cost.coefficients.request_ingress_us={ingress_us}"],
                capture_output=True, text=True, check=True,
            ).stdout
            predicted = json.loads(out)
            for k, m in point["measured"].items():
                total[k] = total.get(k, 0.0) + (math.log(predicted[k] / m) / noise[k]) ** 2
        print(f"request_ingress_us {ingress_us:>8}: objective {sum(total.values()):7.1f}  "
              + "  ".join(f"{k} {v:.1f}" for k, v in total.items()))
