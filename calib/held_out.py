#!/usr/bin/env python3
"""Calibrate on the lowest load point of each published set, predict the others.

For every group (set x engine x input length) of validation/published/*.json with rows
(the silicon sample, read by filter, is left out: its groups are one concurrency per TP
size), the row at the lowest load is written as a result file and fitted with
`servesim calibrate --from-results`; every other row is simulated uncalibrated and with
the profile (whose ensemble gives each metric a 90% interval). Printed per group: the
median |error| over the held-out rows' published metrics, uncalibrated and calibrated,
and how often the published value lies inside the calibrated 90% interval (and inside the
uncalibrated interval of `simulate --uncertainty`), and the median over its held-out values of
the uncalibrated interval's width as p95/p05; last, the median widths over every held-out
value, calibrated and uncalibrated, so that coverage gained by widening every band shows.

    python3 calib/held_out.py [target/release/servesim]    # from the repository root
    HELD_OUT_ONLY=phase0 python3 calib/held_out.py ...     # only the sets whose file name has it
    HELD_OUT_VERBOSE=1 python3 calib/held_out.py ...       # and every held-out value on stderr
    HELD_OUT_KEEP=1 python3 calib/held_out.py ...          # keep the profiles and scenarios it wrote (a temp folder, named on stderr; removed at exit otherwise)

The model's discrepancy at a point that `calibrate --from-results` adds to each value's noise
is, by default, the within-group sd of the whole validate corpus, which holds the judged set
too. Here each set is fitted with the sd estimated on the corpus without that set (the same
statistic `servesim validate --write-baseline` writes, recomputed from `validate --json`, and
passed as `--discrepancy`), so nothing of the judged set reaches its own fit.
The same for the model-error term of the calibrated intervals (the uncalibrated 90% |error|
for the GPU and engine, which `calibrate` reads from validation/baseline.json): recomputed
without the set and passed as `--model-error`, to `calibrate` and to the uncalibrated
`simulate --uncertainty` whose intervals the last column judges.
HELD_OUT_POOLED_BAND=1 scales every family's uncalibrated 90% |error| by the GPU and engine's
record over every metric pooled (the rule before 2026-12-05), for comparison.
HELD_OUT_JSON=FILE also writes the table as JSON (each group's medians, verdict and coverage, the
groups that could not be judged, the totals): `tests/held_out.rs` compares it with the committed
`validation/held_out_baseline.json`, which the same command rewrites:

    HELD_OUT_JSON=validation/held_out_baseline.json python3 calib/held_out.py target/release/servesim

HELD_OUT_CORPUS_DISCREPANCY=1 uses the corpus' as it is instead (both terms); HELD_OUT_DISCREPANCY_SCALE=k
multiplies the estimated sd by k (how much the verdicts depend on the estimate).

Diagnostics (what moves a group's verdict; none changes the table's default run):
HELD_OUT_FACTORS=1 prints on stderr, per group, each coefficient the fit moved by more than 0.5%
(fitted / prior). HELD_OUT_FIT_DROP=key,... leaves those published values out of the fitted
point's result file, and HELD_OUT_FIT_SET=key=value,... replaces fitted values (report keys, as
`mean_tpot_ms=7.436`), every group alike: the fit without a value, or with another reading of it;
the held-out values are judged as always. HELD_OUT_CORRELATIONS=1 prints on stderr the
correlation between the families of one row's deviations from their group's mean of
ln(simulated / published), over the corpus' means (`validate --json`), with the number of rows
holding both: how far the families' discrepancies at one point are one error and not several.
"""
import atexit, csv, io, json, math, os, shutil, statistics, subprocess, sys, tempfile

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/servesim"
METRICS = [("mean_ttft_ms", "mean_ttft_ms"), ("p50_ttft_ms", "median_ttft_ms"), ("p99_ttft_ms", "p99_ttft_ms"),
           ("mean_tpot_ms", "mean_tpot_ms"), ("p50_tpot_ms", "median_tpot_ms"), ("p99_tpot_ms", "p99_tpot_ms"),
           ("mean_itl_ms", "mean_itl_ms"), ("p50_itl_ms", "median_itl_ms"), ("p99_itl_ms", "p99_itl_ms"),
           ("mean_e2el_ms", "mean_e2el_ms"), ("p50_e2el_ms", "median_e2el_ms"), ("p99_e2el_ms", "p99_e2el_ms"),
           ("output_tok_s", "output_throughput"), ("req_s", "request_throughput"), ("total_tok_s", "total_token_throughput")]


def read_csv(path):
    text = "".join(l for l in open(path) if not l.startswith("#"))
    return list(csv.DictReader(io.StringIO(text)))


def set_path(obj, path, raw):
    try:
        val = json.loads(raw)
    except ValueError:
        val = raw
    keys = path.split(".")
    for k in keys[:-1]:
        obj = obj.setdefault(k, {})
    obj[keys[-1]] = val


def scenario_of(spec, v, root):
    s = spec.get("scenario") or (v.get("scenarios") or {}).get(spec["engine"]) or v.get("scenario")
    if s is None:
        return None
    if isinstance(s, str):
        path = os.path.join(root, s)
        sc = json.load(open(path))
        tr = sc.get("workload", {}).get("trace")
        if tr and not os.path.isabs(tr):
            sc["workload"]["trace"] = os.path.join(os.path.dirname(path), tr)
    else:
        sc = json.loads(json.dumps(s))
        # An inline scenario's trace is relative to the repository root (as `servesim validate` reads it).
        tr = sc.get("workload", {}).get("trace")
        if tr and not os.path.isabs(tr):
            sc["workload"]["trace"] = os.path.join(root, tr)
    for a in spec.get("set", []):
        p, raw = a.split("=", 1)
        set_path(sc, p.strip(), raw)
    return sc


FAMILIES = ["ttft", "tpot", "itl", "e2el", "throughput"]


def family(key):
    return next((f for f in FAMILIES[:4] if f in key), "throughput")


_VALIDATE = None


def apart_sets():
    """The sets `servesim validate` keeps out of its corpus (`apart_from_corpus`)."""
    out = set()
    for f in sorted(os.listdir("validation/published")):
        if f.endswith(".json"):
            with open(os.path.join("validation/published", f)) as fh:
                if json.load(fh).get("apart_from_corpus"):
                    out.add(f[:-5])
    return out


def validate_json():
    """`servesim validate --json`, run once, without the rows of the sets it keeps out of its
    corpus (`apart_from_corpus`), as its corpus summary is."""
    global _VALIDATE
    if _VALIDATE is None:
        out = subprocess.run([BIN, "validate", "--json"], capture_output=True, text=True)
        _VALIDATE = json.loads(out.stdout)
        apart = apart_sets()
        _VALIDATE["rows"] = [r for r in _VALIDATE["rows"] if r["set"] not in apart]
    return _VALIDATE


def quantile(v, q):
    """`servesim validate`'s quantile: linear between the order statistics."""
    s = sorted(v)
    x = (len(s) - 1) * q
    lo, hi = math.floor(x), math.ceil(x)
    return s[lo] + (x - lo) * (s[hi] - s[lo])


def model_error_without(left_out, gpu, kind):
    """The uncalibrated 90% |error| per family that `calibrate --from-results` adds to a
    profile's intervals (calib's `uncalibrated_errors`), recomputed from `validate --json`
    without the set `left_out`; as `--model-error`'s argument. Each family: the corpus p90 of
    that family, scaled by (m / a)^Z, m the n-weighted median of this GPU and engine's group
    medians |error| of that family, a the same over every group, Z = n / (n + k) the credibility
    of its n groups with k from that family's group medians; a family none of this GPU and
    engine's groups has takes the scale of the group medians over every metric (and
    HELD_OUT_POOLED_BAND=1 gives every family that pooled scale, the rule before 2026-12-05)."""
    groups, fams = {}, {f: [] for f in FAMILIES}
    for r in validate_json()["rows"]:
        if r["set"] == left_out:
            continue
        for m in r.get("metrics") or []:
            if m.get("error_pct") is None:
                continue
            e = abs(m["error_pct"]) / 100
            groups.setdefault(r["group"], {}).setdefault(family(m["key"]), []).append(e)
            fams[family(m["key"])].append(e)

    def weighted_median(gs):
        s = sorted((quantile(v, 0.5), len(v)) for v in gs)
        total, acc = sum(n for _, n in s), 0
        for m, n in s:
            acc += n
            if 2 * acc >= total:
                return m
        return None

    def engine_kind(label):
        return next((k for k in ("vllm", "sglang") if k in label.lower()), None)

    def gpu_of(g):
        return g.split(" | ")[1].split()[-1]

    def kind_of(g):
        return engine_kind(g.split(" | ")[2])

    def scale_of(values):
        """(m / a)^Z over `values`: group -> that group's |errors|; None without a group of mine
        (or where m or a is 0), as calib's `band_parts`."""
        mine = [v for g, v in values.items() if gpu_of(g) == gpu and kind_of(g) == kind]
        if not mine:
            return None
        m, a = weighted_median(mine), weighted_median(list(values.values()))
        keyed = [(gpu_of(g) + " " + kind_of(g), math.log(quantile(v, 0.5)))
                 for g, v in values.items() if kind_of(g) and quantile(v, 0.5) > 0]
        k = credibility_k(keyed)
        z = len(mine) / (len(mine) + k) if math.isfinite(k) else 0.0
        return (m / a) ** z if (m and a) else None

    pooled = scale_of({g: [e for v in fs.values() for e in v] for g, fs in groups.items()})
    pooled = 1.0 if pooled is None else pooled
    out = []
    for f, v in fams.items():
        if not v:
            continue
        own = None
        if not os.environ.get("HELD_OUT_POOLED_BAND"):
            own = scale_of({g: fs[f] for g, fs in groups.items() if fs.get(f)})
        out.append(f"{f}={quantile(v, 0.9) * (pooled if own is None else own):.4f}")
    return ",".join(out)


def credibility_k(keyed):
    """calib's `credibility_k`: sigma^2 within / sigma^2 between of ln(group median |error|),
    the groups keyed by GPU and engine kind (one-way random effects, method of moments);
    infinite where the between-key variance is not positive."""
    by = {}
    for key, x in keyed:
        by.setdefault(key, []).append(x)
    n, kk = len(keyed), len(by)
    if kk < 2 or n <= kk:
        return math.inf
    grand = sum(x for _, x in keyed) / n
    ssw = ssb = sq = 0.0
    for v in by.values():
        mean = sum(v) / len(v)
        ssw += sum((x - mean) ** 2 for x in v)
        ssb += len(v) * (mean - grand) ** 2
        sq += len(v) ** 2
    msw, msb = ssw / (n - kk), ssb / (kk - 1)
    between = (msb - msw) / ((n - sq / n) / (kk - 1))
    return msw / between if between > 0 else math.inf


def corpus_logs():
    """(set, group, family, ln(simulated / published)) of every compared mean or median of the
    validate corpus (the values `servesim validate` splits into within- and between-group sd)."""
    v = validate_json()
    logs = []
    for r in v["rows"]:
        for m in r.get("metrics") or []:
            s, p = m.get("simulated"), m.get("published")
            if s and p and s > 0 and p > 0 and not m["key"].startswith("p9"):
                logs.append((r["set"], r["group"], family(m["key"]), math.log(s / p)))
    return logs


def discrepancy_scale():
    raw = os.environ.get("HELD_OUT_DISCREPANCY_SCALE", "1")
    try:
        k = float(raw)
    except ValueError:
        k = float("nan")
    if not (math.isfinite(k) and k >= 0):
        sys.exit(f"HELD_OUT_DISCREPANCY_SCALE: expected a finite number >= 0, got {raw!r}")
    return k


def within_sd_without(logs, left_out, scale=1.0):
    """The pooled within-group sd per family over the groups of every set but `left_out`, as
    `--discrepancy` wants it (a family without two values in a group keeps the corpus')."""
    parts = []
    for f in FAMILIES:
        groups = {}
        for st, g, fam, x in logs:
            if fam == f and st != left_out:
                groups.setdefault(g, []).append(x)
        ss = dof = 0
        for xs in groups.values():
            if len(xs) >= 2:
                m = sum(xs) / len(xs)
                ss += sum((x - m) ** 2 for x in xs)
                dof += len(xs) - 1
        if dof:
            parts.append(f"{f}={scale * math.sqrt(ss / dof):.4f}")
    return ",".join(parts)


MEAN_KEYS = {"ttft": "mean_ttft_ms", "tpot": "mean_tpot_ms", "itl": "mean_itl_ms", "e2el": "mean_e2el_ms",
             "throughput": "output_throughput"}


def family_correlations():
    """Per pair of families: (rows holding both, correlation) of a row's deviation from its
    group's mean of ln(simulated / published), over the corpus' means (`validate --json`; a
    family's deviations in groups where it has two rows or more)."""
    by = {}
    for r in validate_json()["rows"]:
        d = {}
        for m in r.get("metrics") or []:
            s, p = m.get("simulated"), m.get("published")
            for f, k in MEAN_KEYS.items():
                if m.get("key") == k and s and p and s > 0 and p > 0:
                    d[f] = math.log(s / p)
        by.setdefault(r["group"], []).append(d)
    dev = []
    for rows in by.values():
        mean = {}
        for f in FAMILIES:
            xs = [d[f] for d in rows if f in d]
            if len(xs) >= 2:
                mean[f] = sum(xs) / len(xs)
        dev.extend({f: d[f] - mean[f] for f in d if f in mean} for d in rows)
    out = {}
    for i, a in enumerate(FAMILIES):
        for b in FAMILIES[i + 1:]:
            xy = [(d[a], d[b]) for d in dev if a in d and b in d]
            if len(xy) < 3:
                continue
            x, y = [p[0] for p in xy], [p[1] for p in xy]
            sx, sy = statistics.pstdev(x), statistics.pstdev(y)
            if sx > 0 and sy > 0:
                out[(a, b)] = (len(xy), statistics.correlation(x, y))
    return out


def fit_changes():
    """HELD_OUT_FIT_DROP's keys and HELD_OUT_FIT_SET's key -> value, each key a report key of
    METRICS; exits with a message on any other key or on a value that is not finite and > 0."""
    known = [key for _, key in METRICS]

    def key_of(var, k):
        if k not in known:
            sys.exit(f"{var}: `{k}` is not a report key (expected one of {', '.join(known)})")
        return k

    drop = [key_of("HELD_OUT_FIT_DROP", k)
            for k in filter(None, (x.strip() for x in os.environ.get("HELD_OUT_FIT_DROP", "").split(",")))]
    sets = {}
    for kv in filter(None, (x.strip() for x in os.environ.get("HELD_OUT_FIT_SET", "").split(","))):
        k, _, raw = kv.partition("=")
        try:
            x = float(raw)
        except ValueError:
            x = float("nan")
        if not (math.isfinite(x) and x > 0):
            sys.exit(f"HELD_OUT_FIT_SET: expected key=value with a finite value > 0, got {kv!r}")
        sets[key_of("HELD_OUT_FIT_SET", k.strip())] = x
    return drop, sets


def fit_values(pub, changes):
    """The fitted point's published values with `changes` ([`fit_changes`]) applied."""
    drop, sets = changes
    out = {k: v for k, v in pub.items() if k not in drop}
    out.update(sets)
    return out


def verdict(mu, mc):
    """A group's verdict from its uncalibrated and calibrated median |error| (fractions): half a
    point either way is "same"."""
    return "better" if mc < mu - 0.005 else ("worse" if mc > mu + 0.005 else "same")


def sim(scen_file, *extra):
    out = subprocess.run([BIN, "simulate", scen_file, "--json", *extra], capture_output=True, text=True)
    if not out.stdout.strip():
        return None
    return json.loads(out.stdout)


def main():
    root = os.getcwd()
    tmp = tempfile.mkdtemp(prefix="held-out-")
    if os.environ.get("HELD_OUT_KEEP"):
        print(f"(profiles and scenarios in {tmp})", file=sys.stderr)
    else:
        atexit.register(shutil.rmtree, tmp, True)
    d = os.path.join(root, "validation/published")
    totals = {"in": 0, "n": 0, "in_uncal": 0}
    widths = {"cal": [], "uncal": []}
    scale = discrepancy_scale()
    changes = fit_changes()
    logs = [] if os.environ.get("HELD_OUT_CORPUS_DISCREPANCY") else corpus_logs()
    rows_out = []
    failed = []
    if os.environ.get("HELD_OUT_CORRELATIONS"):
        for (a, b), (n, r) in family_correlations().items():
            print(f"within-group correlation {a}-{b}: {r:+.2f} over {n} rows", file=sys.stderr)
    for f in sorted(os.listdir(d)):
        if not f.endswith(".json"):
            continue
        v = json.load(open(os.path.join(d, f)))
        if "silicon" in v or os.environ.get("HELD_OUT_ONLY", "") not in f:
            continue
        csv_rows = read_csv(os.path.join(root, v["csv"]))
        groups = {}
        for i, spec in enumerate(v["rows"]):
            if spec.get("skip"):
                continue
            extra = spec.get("match", {})
            row = next((r for r in csv_rows if r.get("engine") == spec["engine"]
                        and r.get("concurrency_or_rate", "").strip() == spec["load"]
                        and all(r.get(k) == w for k, w in extra.items())), None)
            sc = scenario_of(spec, v, root)
            if row is None or sc is None:
                continue
            try:
                load = float(spec["load"])
            except ValueError:
                continue
            pub = {}
            for col, key in METRICS:
                if col in spec.get("skip_metrics", {}):
                    continue
                try:
                    x = float(row.get(col, "") or "nan")
                except ValueError:
                    continue
                if x > 0:
                    pub[key] = x
            # As `servesim validate` reads it: a request throughput is completed / duration where
            # the row gives both (sources print it to two decimals).
            try:
                done, dur = float(row.get("completed") or "nan"), float(row.get("duration_s") or "nan")
            except ValueError:
                done = dur = float("nan")
            if "request_throughput" in pub and done > 0 and dur > 0:
                pub["request_throughput"] = done / dur
            if not pub:
                continue
            g = (f[:-5], spec["engine"], json.dumps(extra, sort_keys=True))
            groups.setdefault(g, []).append((load, i, sc, pub))
        for g, pts in groups.items():
            if len(pts) < 2:
                continue
            pts.sort(key=lambda p: p[0])
            files = []
            for load, i, sc, pub in pts:
                sf = os.path.join(tmp, f"{g[0]}-{i}-scenario.json")
                json.dump(sc, open(sf, "w"))
                files.append(sf)
            rf = os.path.join(tmp, f"{g[0]}-{pts[0][1]}-result.json")
            json.dump(fit_values(pts[0][3], changes), open(rf, "w"))
            prof = os.path.join(tmp, f"{g[0]}-{pts[0][1]}-profile.json")
            # Both error terms without the judged set: the fit's discrepancy, and the 90% |error| of
            # the calibrated intervals' model-error term and of the uncalibrated intervals
            # (`calibrate --model-error`, `simulate --model-error`).
            disc, unc_me = [], []
            if logs:
                kind = pts[0][2].get("engine", {}).get("kind", "")
                unc_me = ["--model-error", model_error_without(g[0], v["gpu"].split()[-1], kind)]
                disc = ["--discrepancy", within_sd_without(logs, g[0], scale), *unc_me]
            c = subprocess.run([BIN, "calibrate", "--from-results", rf, "--scenario", files[0], "--out", prof, *disc],
                               capture_output=True, text=True)
            if c.returncode != 0:
                failed.append(f"{g}: calibrate failed: {c.stderr.strip()[:300]}")
                print(failed[-1])
                continue
            if os.environ.get("HELD_OUT_FACTORS"):
                moved = {i["coefficient"]: round(i["fitted_over_prior"], 4)
                         for i in json.load(open(prof)).get("identifiability", [])
                         if abs(i["fitted_over_prior"] - 1) > 0.005}
                print(f"    {g[0][:24]} {g[1][:14]} {g[2] if g[2] != '{}' else ''} fitted / prior: {moved}",
                      file=sys.stderr)
            e_unc, e_cal, inside, inside_u, n = [], [], 0, 0, 0
            w_u = []
            for (load, i, sc, pub), sf in zip(pts[1:], files[1:]):
                u = sim(sf, "--uncertainty", *unc_me)
                k = sim(sf, "--set", f"cost.profile={prof}")
                if u is None or k is None:
                    failed.append(f"{g} load {load:g}: simulate printed nothing")
                    continue
                for key, x in pub.items():
                    if key not in u or key not in k:
                        continue
                    e_unc.append(abs(u[key] / x - 1))
                    if os.environ.get("HELD_OUT_VERBOSE"):
                        print(f"    {g[0][:24]} {g[1][:14]} load {load:g} {key}: published {x:g}, "
                              f"uncalibrated {u[key]:.4g} ({100 * (u[key] / x - 1):+.1f}%), "
                              f"calibrated {k[key]:.4g} ({100 * (k[key] / x - 1):+.1f}%)", file=sys.stderr)
                    e_cal.append(abs(k[key] / x - 1))
                    iv = k.get("uncertainty", {}).get(key)
                    ivu = u.get("uncertainty", {}).get(key)
                    n += 1
                    if iv and iv["p05"] <= x <= iv["p95"]:
                        inside += 1
                    if ivu and ivu["p05"] <= x <= ivu["p95"]:
                        inside_u += 1
                    # An interval's width as the ratio of its ends (a coverage gained by widening
                    # every band shows here).
                    if iv and iv["p05"] > 0:
                        widths["cal"].append(iv["p95"] / iv["p05"])
                    if ivu and ivu["p05"] > 0:
                        widths["uncal"].append(ivu["p95"] / ivu["p05"])
                        w_u.append(ivu["p95"] / ivu["p05"])
            if n == 0:
                failed.append(f"{g}: no held-out value to judge")
                continue
            mu, mc = statistics.median(e_unc), statistics.median(e_cal)
            totals["in"] += inside
            totals["in_uncal"] += inside_u
            totals["n"] += n
            label = f"{g[0]} | {g[1]}" + (f" | {g[2]}" if g[2] != "{}" else "")
            wu = statistics.median(w_u) if w_u else float("nan")
            rows_out.append((label, pts[0][0], len(pts) - 1, n, mu, mc, inside / n, inside_u / n, wu))
            print(f"| {label} | {pts[0][0]:g} | {len(pts) - 1} | {n} | {100 * mu:.1f} | {100 * mc:.1f} | "
                  f"{verdict(mu, mc)} | "
                  f"{100 * inside / n:.0f}% | {100 * inside_u / n:.0f}% | {wu:.2f} |", flush=True)
    if totals["n"]:
        med = lambda v: statistics.median(v) if v else float("nan")
        print(f"width: median p95/p05 over held-out values: calibrated {med(widths['cal']):.2f}, "
              f"uncalibrated {med(widths['uncal']):.2f}")
        print(f"coverage: calibrated 90% intervals hold {totals['in']}/{totals['n']} = "
              f"{100 * totals['in'] / totals['n']:.0f}% of held-out published values; "
              f"uncalibrated intervals {totals['in_uncal']}/{totals['n']} = {100 * totals['in_uncal'] / totals['n']:.0f}%")
    out = os.environ.get("HELD_OUT_JSON")
    if out:
        doc = {
            "command": "HELD_OUT_JSON=validation/held_out_baseline.json python3 calib/held_out.py target/release/servesim",
            "groups": [{"group": label, "lowest_load": lo, "held_out_points": pts_n, "values": n,
                        "uncalibrated_median_abs_error_pct": round(100 * mu, 2),
                        "calibrated_median_abs_error_pct": round(100 * mc, 2),
                        "verdict": verdict(mu, mc),
                        "calibrated_coverage": round(cov, 4), "uncalibrated_coverage": round(cov_u, 4)}
                       for (label, lo, pts_n, n, mu, mc, cov, cov_u, _wu) in rows_out],
            "not_judged": failed,
            "values": totals["n"],
            "calibrated_inside": totals["in"],
            "uncalibrated_inside": totals["in_uncal"],
        }
        with open(out, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")


if __name__ == "__main__":
    main()
