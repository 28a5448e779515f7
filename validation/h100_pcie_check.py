#!/usr/bin/env python3
"""The GPUStack H100 groups that VALIDATION.md §5 lists and does not judge ("look like PCIe"),
run once as the H100 SXM card and once as `h100-pcie`: a check of that reading, not a judgement
(the groups stay out of the corpus). Copies each set's JSON with the hardware doubt removed and
the card swapped, then runs `servesim validate --dir` on each copy; prints both "Per group" blocks.

    python3 validation/h100_pcie_check.py [target/release/servesim]   # from the repository root
"""
import glob, json, os, subprocess, sys, tempfile

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/servesim"


def swap(o, card):
    if isinstance(o, dict):
        for k, v in o.items():
            if k == "hardware" and v == "h100-80gb":
                o[k] = card
            else:
                swap(v, card)
    elif isinstance(o, list):
        for v in o:
            swap(v, card)


with tempfile.TemporaryDirectory() as tmp:
    for card in ["h100-80gb", "h100-pcie"]:
        d = os.path.join(tmp, card)
        os.makedirs(d)
        for f in sorted(glob.glob("validation/published/gpustack_qwen3-*_h100_*.json")):
            if "8b" in f:
                continue  # the Qwen3-8B page fits an SXM card and is judged as one
            v = json.load(open(f))
            for r in v["rows"]:
                if "hardware in doubt" in r.get("skip", ""):
                    del r["skip"]
            swap(v, card)
            json.dump(v, open(os.path.join(d, os.path.basename(f)), "w"))
        out = subprocess.run([BIN, "validate", "--dir", d], capture_output=True, text=True).stdout
        print(f"== run as {card}")
        print(out[out.index("Per group"):] if "Per group" in out else out)
