#!/usr/bin/env python3
"""Extract measured GPU kernel times from the aiconfigurator-core wheel.

aiconfigurator-core (PyPI, Apache-2.0, NVIDIA) ships per-GPU, per-engine,
per-release parquet tables of measured kernel latencies. This script reads
them straight out of the wheel and writes small JSON tables that servesim's
Rust cost model can read with serde alone:

  data/kernels/index.json                     what exists, what was used, provenance
  data/kernels/shapes.json                    per model card x TP: GEMM (n, k) and attention heads
  data/kernels/<system>/<engine>/gemm.json    GEMM latency over the token grid m, per (dtype, n, k)
  data/kernels/<system>/<engine>/context_attention.json     prefill attention, seq x batch
  data/kernels/<system>/<engine>/generation_attention.json  decode attention, batch x kv length
  data/kernels/<system>/<engine>/custom_allreduce.json      engine's custom all-reduce
  data/kernels/<system>/<engine>/moe.json     MoE expert layers (fused experts) over tokens, for the
                                              MoE cards' shapes only (see extract_moe)
  data/kernels/<system>/nccl.json             NCCL collectives (engine independent)

and, with --published-out, the silicon_sample.csv rows of servesim's models.

Usage:
  pip download --no-deps aiconfigurator-core==0.12.0 -d /tmp/aic
  python scripts/kernels/extract.py \
      --wheel /tmp/aic/aiconfigurator_core-0.12.0-cp311-abi3-manylinux_2_28_x86_64.whl \
      --out data/kernels --published-out data/published

The output is deterministic: keys are sorted, floats are rounded to 4
significant digits, and nothing depends on the time or the machine.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import re
import sys
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aic_interp import (  # noqa: E402
    GEMM_DTYPES,
    GemmSites,
    context_attn_sol_ms,
    generation_attn_sol_ms,
)

ENGINES = ("vllm", "sglang")
TPS = (1, 2, 4, 8)
# MoE tables: the expert dtypes servesim's MoE cards run (bf16 checkpoints; fp8 checkpoints with
# 128x128 weight blocks), experts sharded by TP only (moe_ep = 1: vLLM without
# --enable-expert-parallel, SGLang with ep_size 1), and the routing distribution fixed a priori to
# aiconfigurator's own default: sdk/config.py `workload_distribution = "power_law"` with
# sdk/models/moe.py MOEModel `_power_law_alpha = 1.2` -> helpers.power_law_distribution ->
# "power_law_1.2" (docs/moe.md 1.6). Not chosen by comparison with any measurement.
MOE_DTYPES = ("bfloat16", "fp8_block")
MOE_DISTRIBUTION = "power_law_1.2"
SYS_PREFIX = "aiconfigurator_core/systems/"

# servesim GPU card id -> aiconfigurator system name. Cards not listed have
# no table of their own (see README "Gaps").
SERVESIM_GPU_TO_SYSTEM = {
    "a100-80gb": "a100_sxm",
    "b200": "b200_sxm",
    "h100-80gb": "h100_sxm",
    "h200": "h200_sxm",
    "l40s": "l40s",
    "rtx-pro-6000": "rtx_pro_6000_server",
}

# silicon_sample.csv model_path -> servesim model card ids with the same
# architecture (the checkpoint may be a base/instruct/quantised sibling).
HF_ALIASES = {
    "meta-llama/Llama-3.1-70B": "meta-llama/Llama-3.1-70B-Instruct",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Llama-3.1-8B-Instruct",
    "nvidia/Qwen3-32B-NVFP4": "Qwen/Qwen3-32B",
}


def sig4(x):
    if x is None:
        return None
    return float(f"{x:.4g}")


def vkey(v: str):
    """Version sort key like aiconfigurator's _version_sort_tuple."""
    v = str(v).lower()
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", v)
    if not m:
        return (0, 0, 0, 0, 0, 0)
    parts = [int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)]
    rc = re.search(r"rc(\d+)", v)
    parts += [0, int(rc.group(1))] if rc else [1, 0]
    tail = re.search(r"(\d+)(?!.*\d)", v[m.end():])
    parts.append(int(tail.group(1)) if tail else 0)
    return tuple(parts)


class Wheel:
    """Read files from the wheel (a .whl zip or an unpacked directory)."""

    def __init__(self, path: str):
        self.path = path
        if os.path.isdir(path):
            self.zip = None
            root = Path(path)
            self.names = sorted(str(p.relative_to(root)).replace(os.sep, "/") for p in root.rglob("*") if p.is_file())
        else:
            self.zip = zipfile.ZipFile(path)
            self.names = sorted(self.zip.namelist())

    def read(self, name: str) -> bytes:
        if self.zip is not None:
            return self.zip.read(name)
        return (Path(self.path) / name).read_bytes()

    def parquet(self, name: str):
        return pq.read_table(io.BytesIO(self.read(name))).to_pandas()

    def yaml(self, name: str):
        return yaml.safe_load(self.read(name))

    def metadata(self) -> dict:
        meta = next(n for n in self.names if n.endswith(".dist-info/METADATA"))
        out = {}
        for line in self.read(meta).decode().splitlines():
            if not line.strip():
                break
            k, _, v = line.partition(": ")
            if k in ("Name", "Version", "License-Expression", "Author-email", "Summary"):
                out[k] = v
        return out

    def sha256(self) -> str | None:
        if self.zip is None:
            return None
        return hashlib.sha256(Path(self.path).read_bytes()).hexdigest()


# ---------------------------------------------------------------------------
# Inventory: which (system, family, backend, version) tables exist.
# ---------------------------------------------------------------------------


def inventory(wheel: Wheel):
    inv = {}
    pat = re.compile(r"^" + re.escape(SYS_PREFIX) + r"data/([^/]+)/([^/]+)/([^/]+)/([^/]+)/([^/]+)\.parquet$")
    for name in wheel.names:
        m = pat.match(name)
        if not m:
            continue
        system, family, backend, version, table = m.groups()
        inv.setdefault(system, {}).setdefault(family, {}).setdefault(backend, {}).setdefault(version, []).append(table)
    for s in inv.values():
        for f in s.values():
            for b in f.values():
                for v in b:
                    b[v].sort()
    return inv


def current_version(slots: dict, system: str, engine: str):
    entry = (slots.get("overrides") or {}).get(system, {}).get(engine)
    if entry is None:
        entry = (slots.get("defaults") or {}).get(engine) or {}
    return entry.get("current")


def pick_version(inv, system, family, engine, table, current):
    """Newest release <= aiconfigurator's 'current' slot holding the table
    (the same backward fill aiconfigurator uses); else the newest at all."""
    versions = inv.get(system, {}).get(family, {}).get(engine, {})
    have = sorted((v for v, tabs in versions.items() if table in tabs), key=vkey)
    if not have:
        return None
    if current:
        ok = [v for v in have if vkey(v) <= vkey(current)]
        if ok:
            return ok[-1]
    return have[-1]


# ---------------------------------------------------------------------------
# Model cards -> shapes
# ---------------------------------------------------------------------------


def load_cards(models_dir: Path):
    cards = []
    for p in sorted(models_dir.glob("*.json")):
        d = json.loads(p.read_text())
        need = ("hidden_size", "num_layers", "num_attention_heads", "num_kv_heads", "vocab_size")
        # A dense card needs its MLP; a MoE card (every layer MoE) has none besides the experts.
        if not all(k in d for k in need) or ("intermediate_size" not in d and "moe" not in d):
            continue
        d.setdefault("head_dim", d["hidden_size"] // d["num_attention_heads"])
        d["_id"] = d.get("id", p.stem)
        cards.append(d)
    return cards


def card_shapes(card):
    """Per TP: GEMM shapes and per-GPU attention heads (vLLM/SGLang layout:
    KV heads are replicated when tp > num_kv_heads)."""
    H, KV, D = card["num_attention_heads"], card["num_kv_heads"], card["head_dim"]
    hid, vocab = card["hidden_size"], card["vocab_size"]
    moe = card.get("moe")
    out = []
    for tp in TPS:
        if moe is None:
            inter = card["intermediate_size"]
            if H % tp or inter % tp or (KV % tp and tp % KV):
                continue
        elif H % tp or (KV % tp and tp % KV):
            continue
        h, kv = H // tp, max(1, KV // tp)
        if moe is None:
            gemms = [
                ("qkv_proj", (h + 2 * kv) * D, hid),
                ("o_proj", hid, h * D),
                ("gate_up_proj", 2 * inter // tp, hid),
                ("down_proj", hid, inter // tp),
                ("lm_head", -(-vocab // tp), hid),
            ]
        else:
            # Every layer MoE: the experts are moe.json's; the router is a replicated bf16
            # linear (n = num_experts, k = hidden), not sharded by TP.
            gemms = [
                ("qkv_proj", (h + 2 * kv) * D, hid),
                ("o_proj", hid, h * D),
                ("router", moe["num_experts"], hid),
                ("lm_head", -(-vocab // tp), hid),
            ]
        out.append({"tp": tp, "heads": h, "kv_heads": kv, "head_dim": D, "gemms": gemms})
    return out


# ---------------------------------------------------------------------------
# Table extractors
# ---------------------------------------------------------------------------


def extract_gemm(df, spec, shapes_nk):
    out = {"dtypes": {}}
    for dtype in sorted(GEMM_DTYPES):
        d = df[df["gemm_dtype"] == dtype]
        if d.empty or GEMM_DTYPES[dtype]["flops_key"] not in spec["gpu"]:
            continue
        kernels = sorted(d["kernel_source"].unique().tolist()) if "kernel_source" in d else []
        rows = zip(d["m"].astype(int), d["n"].astype(int), d["k"].astype(int), d["latency"].astype(float))
        sites = GemmSites(rows, spec, dtype)
        grid = sites.m_grid()
        curves = []
        for n, k in sorted(shapes_nk):
            lats, methods, neigh = [], set(), set()
            for m in grid:
                lat, method, used = sites.resolve(m, n, k)
                lats.append(sig4(lat))
                methods.add(method)
                neigh.update(used)
            method = "measured" if methods <= {"measured"} else "+".join(sorted(methods))
            entry = {"n": n, "k": k, "method": method, "latency_ms": lats}
            if neigh:
                entry["neighbour_sites"] = [list(s) for s in sorted(neigh)]
            curves.append(entry)
        out["dtypes"][dtype] = {
            "kernel_source": kernels,
            "m": grid,
            "measured_sites": len(sites.order),
            "sol_clamped_points": sites.clamped,
            "curves": curves,
        }
    return out


def _attn_common(df, kind):
    d = df
    if "attn_dtype" not in d:
        d = d.assign(attn_dtype="bfloat16")
    if "window_size" in d:
        d = d[d["window_size"] == 0]
    if "beam_width" in d:
        d = d[d["beam_width"] == 1]
    return d


def extract_attention(df, spec, kind, heads_set):
    """kind = 'context' (axes isl x batch) or 'generation' (batch x kv_len)."""
    d = _attn_common(df, kind)
    if kind == "generation":
        d = d.assign(s=d["isl"].astype(int) + d["step"].astype(int))
        ax1, ax2 = "batch_size", "s"
    else:
        d = d.assign(s=d["isl"].astype(int))
        ax1, ax2 = "s", "batch_size"
    entries = []
    for (attn_dtype, kv_dtype, ks), g in sorted(d.groupby(["attn_dtype", "kv_cache_dtype", "kernel_source"]),
                                                key=lambda x: x[0]):
        if kv_dtype not in ("bfloat16", "fp8"):
            continue
        # table: (n_kv_lookup, head_dim) -> heads -> {(a1, a2): latency}; first row wins
        tab = {}
        for nh, nkv, hd, a1, a2, lat in zip(g["num_heads"], g["num_key_value_heads"], g["head_dim"], g[ax1], g[ax2], g["latency"]):
            nh, nkv, hd = int(nh), int(nkv), int(hd)
            lookup = 0 if nh == nkv else nkv
            cell = tab.setdefault((lookup, hd), {}).setdefault(nh, {})
            cell.setdefault((int(a1), int(a2)), float(lat))
        for h, kv, hd in sorted(heads_set):
            lookup = 0 if h == kv else kv
            by_heads = tab.get((lookup, hd))
            if not by_heads:
                continue

            def sol(n, a1, a2):
                if kind == "context":
                    return context_attn_sol_ms(spec, kv_dtype, lookup, hd, n, a1, a2, attn_dtype)
                return generation_attn_sol_ms(spec, kv_dtype, lookup, hd, n, a1, a2)

            def clamp(n, cells):  # load-time SOL clamp is applied to decode tables only
                if kind != "generation":
                    return dict(cells)
                return {c: max(v, sol(n, *c)) for c, v in cells.items()}

            if h in by_heads:
                cells, method = clamp(h, by_heads[h]), "measured"
            else:
                lo = [x for x in by_heads if x < h]
                hi = [x for x in by_heads if x > h]
                if not lo or not hi:
                    continue
                hl, hh = max(lo), min(hi)
                cl, ch = clamp(hl, by_heads[hl]), clamp(hh, by_heads[hh])
                w = (h - hl) / (hh - hl)
                cells = {}
                for c in sorted(set(cl) | set(ch)):
                    if c in cl and c in ch:
                        cells[c] = cl[c] + (ch[c] - cl[c]) * w
                    else:  # one bracket missing: hold its util along heads
                        hs, v = (hl, cl[c]) if c in cl else (hh, ch[c])
                        cells[c] = v * sol(h, *c) / sol(hs, *c)
                method = f"interp_heads_{hl}_{hh}"
            a1s = sorted({c[0] for c in cells})
            a2s = sorted({c[1] for c in cells})
            grid = [[sig4(cells.get((x, y))) for y in a2s] for x in a1s]
            name1 = "seq_len" if kind == "context" else "batch"
            name2 = "batch" if kind == "context" else "kv_len"
            entries.append({
                "attn_dtype": attn_dtype,
                "kv_cache_dtype": kv_dtype,
                "kernel_source": ks,
                "heads": h,
                "kv_heads": kv,
                "head_dim": hd,
                "method": method,
                name1: a1s,
                name2: a2s,
                "latency_ms": grid,
            })
    return entries


def extract_comm_curves(df, key_cols):
    out = []
    for key, g in sorted(df.groupby(key_cols), key=lambda x: tuple(str(v) for v in x[0])):
        pts = {}
        for size, lat in zip(g["message_size"].astype(int), g["latency"].astype(float)):
            pts.setdefault(size, lat)
        sizes = sorted(pts)
        entry = dict(zip(key_cols, [v.item() if hasattr(v, "item") else v for v in key]))
        entry["message_elems"] = sizes
        entry["latency_ms"] = [sig4(pts[s]) for s in sizes]
        out.append(entry)
    return out


def moe_shapes_of(cards):
    """(hidden, moe_intermediate_size, topk, num_experts) of every MoE card."""
    out = set()
    for c in cards:
        m = c.get("moe")
        if m:
            out.add((c["hidden_size"], m["moe_intermediate_size"], m["experts_per_token"], m["num_experts"]))
    return sorted(out)


def extract_moe(df, moe_shapes):
    """One curve per (dtype, shape, moe_tp) at moe_ep 1 and MOE_DISTRIBUTION: latency (ms, one MoE
    layer's experts on one GPU; router, top-k and collectives not included) over num_tokens (the
    tokens entering the layer on the rank). The first row of a repeated key wins, as in
    aiconfigurator's loader."""
    d = df[(df["moe_ep_size"] == 1) & (df["distribution"] == MOE_DISTRIBUTION) & df["moe_dtype"].isin(MOE_DTYPES)
           & df["moe_tp_size"].isin(TPS)]
    curves = []
    for hid, inter, topk, ne in moe_shapes:
        s = d[(d["hidden_size"] == hid) & (d["inter_size"] == inter) & (d["topk"] == topk) & (d["num_experts"] == ne)]
        for (dtype, tp), g in sorted(s.groupby(["moe_dtype", "moe_tp_size"]), key=lambda x: (x[0][0], int(x[0][1]))):
            pts, kernels = {}, set()
            for t, lat, ks in zip(g["num_tokens"].astype(int), g["latency"].astype(float), g["kernel_source"]):
                if t not in pts:
                    pts[t] = lat
                    kernels.add(str(ks))
            toks = sorted(pts)
            curves.append({
                "moe_dtype": dtype, "hidden": hid, "inter": inter, "topk": topk, "num_experts": ne,
                "moe_tp": int(tp), "moe_ep": 1, "kernel_source": sorted(kernels),
                "num_tokens": toks, "latency_ms": [sig4(pts[t]) for t in toks],
            })
    return curves


# ---------------------------------------------------------------------------
# JSON writer: dicts indented, lists of scalars inline (small, diffable).
# ---------------------------------------------------------------------------


def dumps(obj, level=0):
    pad, pad1 = " " * level, " " * (level + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad1}{json.dumps(k)}: {dumps(obj[k], level + 1)}" for k in sorted(obj)]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list):
        if all(not isinstance(x, (dict, list)) for x in obj):
            return json.dumps(obj, separators=(",", ":"))
        if all(isinstance(x, list) and all(not isinstance(y, (dict, list)) for y in x) for x in obj):
            return "[\n" + ",\n".join(pad1 + json.dumps(x, separators=(",", ":")) for x in obj) + "\n" + pad + "]"
        return "[\n" + ",\n".join(pad1 + dumps(x, level + 1) for x in obj) + "\n" + pad + "]"
    return json.dumps(obj)


def write_json(path: Path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(obj) + "\n")


# ---------------------------------------------------------------------------
# silicon_sample.csv
# ---------------------------------------------------------------------------


def extract_silicon(wheel: Wheel, cards, out_csv: Path, source: dict):
    name = SYS_PREFIX + "silicon_sample.csv"
    text = wheel.read(name).decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    header = list(rows[0].keys())
    by_repo = {}
    for c in cards:
        if c.get("hf_repo"):
            by_repo.setdefault(c["hf_repo"].lower(), []).append(c["_id"])
    keep = []
    for r in rows:
        repo = HF_ALIASES.get(r["model_path"], r["model_path"])
        ids = by_repo.get(repo.lower())
        if not ids:
            continue
        conc = re.search(r"silicon_concurrency=(\d+)", r["silicon_data_source"])
        r = dict(r)
        r["servesim_models"] = " ".join(sorted(ids))
        r["silicon_concurrency"] = conc.group(1) if conc else ""
        keep.append(r)
    keep.sort(key=lambda r: r["id"])
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    cols = ["id", "servesim_models", "silicon_concurrency"] + [h for h in header if h != "id"]
    with out_csv.open("w", newline="") as f:
        f.write(
            f"# source: {source['Name']} {source['Version']} (PyPI, {source['License-Expression']}), "
            f"wheel path {name}; rows for servesim's model cards only. Columns: see aiconfigurator-silicon.md\n"
        )
        w = csv.DictWriter(f, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        w.writerows(keep)
    return len(rows), len(keep)


# ---------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheel", required=True, help="aiconfigurator-core .whl file or its unpacked directory")
    ap.add_argument("--out", default="data/kernels")
    ap.add_argument("--models", default="models/model", help="servesim model cards (*.json)")
    ap.add_argument("--gpus", default="models/gpu", help="servesim GPU cards (*.json)")
    ap.add_argument("--systems", default="all", help="comma list of aiconfigurator systems, or 'all'")
    ap.add_argument("--published-out", default=None, help="where to write aiconfigurator-silicon.csv")
    args = ap.parse_args()

    wheel = Wheel(args.wheel)
    meta = wheel.metadata()
    source = {
        "package": meta.get("Name"),
        "version": meta.get("Version"),
        "license": meta.get("License-Expression"),
        "author": meta.get("Author-email"),
        "wheel_file": os.path.basename(args.wheel.rstrip("/")),
        "wheel_sha256": wheel.sha256(),
        "data_root_in_wheel": SYS_PREFIX + "data/<system>/<family>/<backend>/<version>/<table>.parquet",
    }
    slots = wheel.yaml(SYS_PREFIX + "query_versions.yaml")
    inv = inventory(wheel)
    cards = load_cards(Path(args.models))
    moe_shapes = moe_shapes_of(cards)
    gpu_cards = sorted(p.stem for p in Path(args.gpus).glob("*.json"))

    # shapes.json (GPU independent)
    shapes, gemm_nk, heads_set = {}, set(), set()
    for c in cards:
        per = []
        for s in card_shapes(c):
            per.append({
                "tp": s["tp"], "heads": s["heads"], "kv_heads": s["kv_heads"], "head_dim": s["head_dim"],
                "gemms": [{"op": op, "n": n, "k": k} for op, n, k in s["gemms"]],
            })
            gemm_nk.update((n, k) for _, n, k in s["gemms"])
            heads_set.add((s["heads"], s["kv_heads"], s["head_dim"]))
        shapes[c["_id"]] = per
    out = Path(args.out)
    write_json(out / "shapes.json", {
        "about": "Per servesim model card and TP size: GEMM shapes (y[m,n] = x[m,k] W[k,n], m = tokens in the "
                 "batch) and per-GPU attention heads. qkv n = (heads/tp + 2*max(1, kv_heads/tp))*head_dim; "
                 "o_proj k = heads/tp*head_dim; gate_up n = 2*intermediate/tp; down k = intermediate/tp; "
                 "lm_head n = ceil(vocab/tp). TP sizes where heads or intermediate do not divide are left out.",
        "models": shapes,
    })

    systems = sorted(inv) if args.systems == "all" else sorted(args.systems.split(","))
    index = {"source": source, "systems": {}, "servesim_gpu_to_system": {}}
    for g in gpu_cards:
        index["servesim_gpu_to_system"][g] = SERVESIM_GPU_TO_SYSTEM.get(g)
    for system in systems:
        spec = wheel.yaml(SYS_PREFIX + f"{system}.yaml")
        if system not in inv:
            continue
        sys_entry = {"spec": {k: spec["gpu"].get(k) for k in ("mem_bw", "bfloat16_tc_flops", "fp8_tc_flops", "mem_capacity")},
                     "num_gpus_per_node": spec.get("node", {}).get("num_gpus_per_node"),
                     "releases": {}, "used": {}}
        for fam in ("gemm", "attention", "comm", "moe"):
            for be, vers in sorted(inv[system].get(fam, {}).items()):
                if be in ENGINES or be == "nccl":
                    sys_entry["releases"].setdefault(be, {})[fam] = {v: vers[v] for v in sorted(vers, key=vkey)}
        wrote_any = False
        for engine in ENGINES:
            cur = current_version(slots, system, engine)
            used = {"aiconfigurator_current": cur}
            base = f"{SYS_PREFIX}data/{system}"
            v = pick_version(inv, system, "gemm", engine, "gemm_perf", cur)
            if v:
                df = wheel.parquet(f"{base}/gemm/{engine}/{v}/gemm_perf.parquet")
                g = extract_gemm(df, spec, gemm_nk)
                if g["dtypes"]:
                    g.update(source=source, release=v, path=f"{base}/gemm/{engine}/{v}/gemm_perf.parquet",
                             units={"latency_ms": "milliseconds per GEMM call", "m": "tokens (rows of x)",
                                    "n": "output features", "k": "input features"})
                    write_json(out / system / engine / "gemm.json", g)
                    used["gemm"] = v
                    wrote_any = True
            for kind in ("context", "generation"):
                table = f"{kind}_attention_perf"
                v = pick_version(inv, system, "attention", engine, table, cur)
                if not v:
                    continue
                path = f"{base}/attention/{engine}/{v}/{table}.parquet"
                ents = extract_attention(wheel.parquet(path), spec, kind, heads_set)
                if not ents:
                    continue
                write_json(out / system / engine / f"{kind}_attention.json", {
                    "source": source, "release": v, "path": path,
                    "units": {"latency_ms": "milliseconds per layer call (all heads on one GPU)",
                              "seq_len": "prompt tokens per sequence, no cached prefix (context only)",
                              "kv_len": "tokens in the KV cache incl. the one being decoded (= isl + step)",
                              "batch": "sequences in the call"},
                    "entries": ents,
                })
                used[kind + "_attention"] = v
                wrote_any = True
            v = pick_version(inv, system, "comm", engine, "custom_allreduce_perf", cur)
            if v:
                path = f"{base}/comm/{engine}/{v}/custom_allreduce_perf.parquet"
                df = wheel.parquet(path)
                df = df.assign(mode=[("eager" if str(k).endswith("_eager") or str(b).endswith("_eager") else "graph")
                                     for k, b in zip(df["kernel_source"], df.get("backend", df["kernel_source"]))])
                curves = extract_comm_curves(df, ["kernel_source", "mode", "allreduce_dtype", "num_gpus"])
                write_json(out / system / engine / "custom_allreduce.json", {
                    "source": source, "release": v, "path": path,
                    "units": {"latency_ms": "milliseconds per all-reduce", "message_elems":
                              "elements per rank (bytes = elems * 2 for bfloat16)"},
                    "curves": curves,
                })
                used["custom_allreduce"] = v
                wrote_any = True
            v = pick_version(inv, system, "moe", engine, "moe_perf", cur) if moe_shapes else None
            if v:
                path = f"{base}/moe/{engine}/{v}/moe_perf.parquet"
                curves = extract_moe(wheel.parquet(path), moe_shapes)
                if curves:
                    write_json(out / system / engine / "moe.json", {
                        "source": source, "release": v, "path": path, "distribution": MOE_DISTRIBUTION,
                        "units": {"latency_ms": "milliseconds for one MoE layer's expert computation on one GPU "
                                                "(fused experts; router GEMM, top-k and collectives not included)",
                                  "num_tokens": "tokens entering the layer on the rank, before top-k expansion",
                                  "inter": "the model's full moe_intermediate_size (the kernel runs inter/moe_tp)",
                                  "distribution": "aiconfigurator's default routing (sdk MOEModel: power_law, alpha 1.2)"},
                        "curves": curves,
                    })
                    used["moe"] = v
            sys_entry["used"][engine] = used
        # NCCL: engine independent; aiconfigurator reads misc.nccl_version
        nv_decl = str((spec.get("misc") or {}).get("nccl_version", ""))
        nccl_vers = inv[system].get("comm", {}).get("nccl", {})
        nv = nv_decl if nv_decl in nccl_vers else (sorted(nccl_vers, key=vkey)[-1] if nccl_vers else None)
        if nv:
            path = f"{SYS_PREFIX}data/{system}/comm/nccl/{nv}/nccl_perf.parquet"
            df = wheel.parquet(path)
            df = df[df["nccl_dtype"] == "half"]
            write_json(out / system / "nccl.json", {
                "source": source, "release": nv, "declared_nccl_version": nv_decl, "path": path,
                "units": {"latency_ms": "milliseconds (nccl-tests out-of-place time)",
                          "message_elems": "elements (bytes/2 for half); nccl-tests buffer size"},
                "curves": extract_comm_curves(df, ["op_name", "nccl_dtype", "num_gpus"]),
            })
            sys_entry["used"]["nccl"] = nv
            wrote_any = True
        if wrote_any:
            index["systems"][system] = sys_entry
    write_json(out / "index.json", index)

    if args.published_out:
        total, kept = extract_silicon(wheel, cards, Path(args.published_out) / "aiconfigurator-silicon.csv", meta)
        print(f"silicon_sample.csv: kept {kept} of {total} rows", file=sys.stderr)


if __name__ == "__main__":
    main()
