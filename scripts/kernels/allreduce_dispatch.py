"""Where vLLM's dispatch shows in the committed all-reduce tables (docs/vllm.md section 8).

aiconfigurator's vLLM collector times vLLM's `tensor_model_parallel_all_reduce`, so the
"custom" table holds the custom kernel below its size cap and NCCL (or symmetric memory) above.
This prints, per system and TP size, the CUDA-graph table beside the system's nccl-tests
all_reduce at the sizes both measured (standard library only; run from the repository root):

    python3 scripts/kernels/allreduce_dispatch.py [SYSTEM ...]
"""

import json
import sys
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[2] / "data" / "kernels"
SIZES_MIB = [2, 4, 8, 16, 32, 64]


def main(systems):
    known = sorted(p.name for p in KERNELS.iterdir() if (p / "vllm" / "custom_allreduce.json").exists())
    for system in systems:
        if system not in known:
            sys.exit(f"allreduce_dispatch.py: no tables for system {system!r}; expected one of {', '.join(known)}")
        custom = json.loads((KERNELS / system / "vllm" / "custom_allreduce.json").read_text())
        nccl = json.loads((KERNELS / system / "nccl.json").read_text())
        print(f"{system}: vLLM {custom['release']} table (graph) / nccl-tests {nccl['release']}, us")
        for curve in custom["curves"]:
            if curve["mode"] != "graph":
                continue
            tp = curve["num_gpus"]
            ref = [c for c in nccl["curves"] if c["num_gpus"] == tp and c["op_name"] == "all_reduce"]
            if not ref:
                print(f"  TP {tp}: no nccl-tests curve")
                continue
            by_elems = dict(zip(ref[0]["message_elems"], ref[0]["latency_ms"]))
            cells = []
            for mib in SIZES_MIB:
                elems = mib * 1024 * 1024 // 2  # bfloat16
                if elems in curve["message_elems"] and elems in by_elems:
                    t = curve["latency_ms"][curve["message_elems"].index(elems)]
                    cells.append(f"{mib} MiB {t * 1000:,.0f} / {by_elems[elems] * 1000:,.0f}")
            print(f"  TP {tp}: " + " | ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1:] or sorted(p.name for p in KERNELS.iterdir() if (p / "vllm" / "custom_allreduce.json").exists()))
