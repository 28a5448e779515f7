"""Turns the llm-d exp-0 per-request rows (data/published/raw/llmd_exp0_vllm70b/) into servesim
traces, scenarios and save-result-like summaries, one per rate, written beside this file.

    python3 validation/llmd-exp0/make.py                  # reads data/published/ of this repository
    python3 validation/llmd-exp0/make.py path/to/published

The summaries use the aggregates of data/published/llmd_exp0_llama31-70b_2xa100_vllm_lmbench-sharegpt.csv
(computed from the same per-request rows; see data/published/README.md).
"""
import csv
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
data = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "data", "published")
rates = ["0.5", "0.67", "0.84", "1", "1.17", "1.34"]

agg = {}
with open(os.path.join(data, "llmd_exp0_llama31-70b_2xa100_vllm_lmbench-sharegpt.csv")) as f:
    rows = [l for l in f if not l.startswith("#")]
for r in csv.DictReader(rows):
    agg[r["concurrency_or_rate"]] = r

for rate in rates:
    src = os.path.join(data, "raw", "llmd_exp0_vllm70b", f"LMBench_sharegpt_output_{rate}.csv")
    with open(src) as f:
        reqs = list(csv.DictReader(f))
    t0 = min(float(r["launch_time"]) for r in reqs)
    reqs.sort(key=lambda r: float(r["launch_time"]))
    with open(os.path.join(here, f"trace-{rate}.csv"), "w") as out:
        out.write("arrival_time,input_len,output_len\n")
        for r in reqs:
            out.write(f"{float(r['launch_time']) - t0:.6f},{int(r['prompt_tokens'])},{max(1, int(r['generation_tokens']))}\n")
    scenario = {
        "version": 1,
        "name": f"llmd-exp0-llama3.1-70b-2xa100-{rate}qps",
        "description": "llm-d exp-0: Llama-3.1-70B-Instruct, tensor parallel 2 on 2xA100-SXM4-80GB (NVLink), vLLM ~0.8.5 V1 modelled as 0.11.0 (the nearest modelled release), --max-model-len 20000 --gpu-memory-utilization 0.95, defaults otherwise (A100: 2048 batched tokens, 256 seqs). KV size not reported: derived from the memory fraction, per GPU.",
        "engine": {"kind": "vllm", "version": "0.11.0", "max_model_len": 20000, "gpu_memory_utilization": 0.95, "tensor_parallel_size": 2},
        "model": "llama-3.1-70b-instruct",
        "hardware": {"gpu": "a100-80gb", "count": 2},
        "workload": {"dataset_name": "trace", "trace": f"trace-{rate}.csv", "ignore_eos": True, "initial_test_request": False, "seed": 0},
    }
    with open(os.path.join(here, f"scenario-{rate}.json"), "w") as out:
        json.dump(scenario, out, indent=2)
    a = agg[rate]
    summary = {
        "source": "llmd_exp0 aggregates",
        "request_rate": float(rate),
        "max_concurrency": None,
        "num_prompts": int(a["completed"]),
        "completed": int(a["completed"]),
        "output_throughput": float(a["output_tok_s"]),
        "mean_ttft_ms": float(a["mean_ttft_ms"]),
        "p99_ttft_ms": float(a["p99_ttft_ms"]),
        "mean_tpot_ms": float(a["mean_tpot_ms"]),
        "mean_e2el_ms": float(a["mean_e2el_ms"]),
    }
    with open(os.path.join(here, f"result-{rate}.json"), "w") as out:
        json.dump(summary, out, indent=2)
print("ok")
