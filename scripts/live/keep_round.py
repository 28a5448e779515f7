#!/usr/bin/env python3
"""Keep what judges a live round in validation/, and only that (validation/README.md).

    python3 scripts/live/keep_round.py RUN_DIR validation/<round>

From RUN_DIR (what scripts/live/check_live.sh wrote): copies every *-check.json, *-profile.json,
*-calibrate.txt and summary.txt; writes SHA256SUMS for every other file (per-request results,
per-point records, server logs: not kept), versions.json (each engine's setup as its first check
record states it) and coverage.txt: per engine, how many held-out measured values lie inside
their predicted 90% interval (every metric with an interval but the preemption count, the
prefix-cache hit rate and the KV peak, which are counts or shares rather than timings).
The README of the round (the command, the commit, the reading) is written by hand.
"""
import glob, hashlib, json, os, shutil, sys

KEEP = ("-check.json", "-profile.json", "-calibrate.txt")
NOT_TIMED = {"num_preemptions", "prefix_cache_hit_rate", "kv_cache_usage_peak"}


def coverage(check):
    """(inside, values, missed). The same count as `check`'s `verdict.interval_coverage` (which
    reports written since it exists carry; older ones are counted here, the same way)."""
    inside = total = 0
    missed = []
    for p in check["points"]:
        if p.get("used_for_fit"):
            continue
        for k, ok in (p.get("inside_interval") or {}).items():
            if k in NOT_TIMED:
                continue
            total += 1
            inside += bool(ok)
            if not ok:
                missed.append(f"c={p['max_concurrency']} {k}")
    return inside, total, missed


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    run, dest = sys.argv[1], sys.argv[2]
    if not os.path.isdir(run):
        sys.exit(f"{run}: not a folder")
    os.makedirs(dest, exist_ok=True)
    sums, versions, cov = [], {}, []
    for path in sorted(glob.glob(os.path.join(run, "**", "*"), recursive=True)):
        if not os.path.isfile(path):
            continue
        rel = os.path.relpath(path, run)
        if rel == "summary.txt" or (os.sep not in rel and rel.endswith(KEEP)):
            shutil.copyfile(path, os.path.join(dest, rel))
            continue
        with open(path, "rb") as f:
            sums.append(f"{hashlib.sha256(f.read()).hexdigest()}  {rel}")
    with open(os.path.join(dest, "SHA256SUMS"), "w") as f:
        f.write("\n".join(sums) + "\n")
    for check in sorted(glob.glob(os.path.join(run, "*-check.json"))):
        engine = os.path.basename(check)[: -len("-check.json")]
        records = sorted(glob.glob(os.path.join(run, f"{engine}-check", "*.record.json")))
        if records:
            with open(records[0]) as f:
                versions[engine] = json.load(f).get("setup")
        with open(check) as f:
            report = json.load(f)
        inside, total, missed = coverage(report)
        stated = report.get("verdict", {}).get("interval_coverage")
        if stated and (stated["inside"], stated["values"]) != (inside, total):
            sys.exit(f"{check}: verdict.interval_coverage {stated} differs from the count here ({inside}/{total})")
        if total:
            cov.append(f"{engine}: {inside}/{total} = {100 * inside / total:.0f}% of held-out measured values inside "
                       f"their 90% interval; outside: {', '.join(missed) or 'none'}")
    with open(os.path.join(dest, "versions.json"), "w") as f:
        json.dump(versions, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(dest, "coverage.txt"), "w") as f:
        f.write("\n".join(cov) + "\n")
    print("\n".join(cov))


if __name__ == "__main__":
    main()
