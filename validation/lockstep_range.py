#!/usr/bin/env python3
"""Where the published vLLM silicon rows' mean TTFT lies between servesim's two replays.

Each vLLM row of validation/published/silicon_*.json is simulated as `servesim validate` replays
it (a closed loop of 10 x C identical requests, the first wave sent at once: the lock-step
figure), and the run's `lockstep_waves` caveat carries the same loop with its first wave
spread one mean E2EL / C apart (`desynchronised_mean_ttft_ms`). Printed per set and prompt
length: how many published values lie inside [desynchronised, lock-step], below or above it,
and where inside (0 = the desynchronised end, 1 = the lock-step end), then the totals, which
`sim::report::LOCKSTEP_RANGE_INSIDE` quotes.

    python3 validation/lockstep_range.py [target/release/servesim]    # from the repository root
"""
import csv, glob, io, json, os, statistics, subprocess, sys, tempfile
from concurrent.futures import ThreadPoolExecutor

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/servesim"
REQUESTS_PER_CLIENT = 10  # cli/validate.rs AIPERF_REQUESTS_PER_CLIENT


def read_csv(path):
    return list(csv.DictReader(io.StringIO("".join(l for l in open(path) if not l.startswith("#")))))


def jobs():
    for f in sorted(glob.glob("validation/published/silicon_*.json")):
        v = json.load(open(f))
        if v["scenario"]["engine"]["kind"] != "vllm":
            continue
        for r in read_csv(v["csv"]):
            if not all(r.get(k) == w for k, w in v["silicon"]["filter"].items()) or not r["silicon_concurrency"]:
                continue
            c, tp = int(r["silicon_concurrency"]), int(r["tp_size"])
            if r["batch_size"] and int(r["batch_size"]) < c:
                continue  # spread over replicas: validate skips it too
            sc = json.loads(json.dumps(v["scenario"]))
            sc["engine"]["tensor_parallel_size"] = tp
            sc["hardware"] = {"gpu": v["scenario"]["hardware"], "count": tp}
            sc["workload"].update(random_input_len=int(r["isl"]), random_output_len=int(r["osl"]),
                                  max_concurrency=c, num_prompts=REQUESTS_PER_CLIENT * c)
            yield os.path.basename(f)[len("silicon_"):-len(".json")], r, sc


def run(job, tmp):
    name, r, sc = job
    path = os.path.join(tmp, r["id"] + ".json")
    json.dump(sc, open(path, "w"))
    out = subprocess.run([BIN, "simulate", path, "--json"], capture_output=True, text=True)
    if out.returncode == 2:
        # Refused with a reason, as `servesim validate` lists it (e.g. vLLM 0.12.0's Qwen3-235B
        # rows, which ran DeepGEMM's experts): not judged, counted apart.
        # The reason, past the temporary file's name: the field and the first words of why.
        why = out.stderr.strip().splitlines()[-1].split(".json: ", 1)[-1][:80] if out.stderr.strip() else "?"
        return name, None, why, None, None
    out.check_returncode()
    d = json.loads(out.stdout)
    cv = [c for c in d.get("caveats", []) if c["id"] == "lockstep_waves"]
    lo = cv[0].get("desynchronised_mean_ttft_ms") if cv else None
    isl = int(r["isl"])
    band = "1,000-2,048" if isl <= 2048 else ("4,000-4,096" if isl <= 4096 else "8,000-8,192")
    return name, band, float(r["silicon_ttft_ms"]), lo, d["mean_ttft_ms"]


with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(os.cpu_count() or 2) as ex:
    res = list(ex.map(lambda j: run(j, tmp), list(jobs())))
groups, total = {}, {"inside": 0, "below": 0, "above": 0, "no figure": 0}
refused = {}
for r in res:
    if r[1] is None:
        refused[(r[0], r[2])] = refused.get((r[0], r[2]), 0) + 1
res = [r for r in res if r[1] is not None]
for name, band, pub, lo, hi in res:
    if lo is None:
        total["no figure"] += 1
        continue
    a, b = min(lo, hi), max(lo, hi)
    where = "inside" if a <= pub <= b else ("below" if pub < a else "above")
    total[where] += 1
    g = groups.setdefault((name, band), {"inside": 0, "below": 0, "above": 0, "pos": []})
    g[where] += 1
    if hi != lo:
        g["pos"].append((pub - lo) / (hi - lo))
print("| set | prompt tokens | values | inside | below | above | median position (0 desynchronised, 1 lock-step) |")
print("|---|---|---:|---:|---:|---:|---:|")
for (name, band), g in sorted(groups.items()):
    n = g["inside"] + g["below"] + g["above"]
    print(f"| {name} | {band} | {n} | {g['inside']} | {g['below']} | {g['above']} | {statistics.median(g['pos']):.2f} |")
n = sum(total.values())
print(f"inside {total['inside']} of {n} values ({100 * total['inside'] / n:.0f}%), below {total['below']}, above {total['above']}, without the figure {total['no figure']}")
print(f"refused by simulate (not judged, as validate lists them): {sum(refused.values())} rows")
for (name, why), n in sorted(refused.items()):
    print(f"  {n} of {name}: {why}")
