//! `servesim validate` against the committed baseline (`validation/baseline.json`):
//! every published measurement in the repository runs uncalibrated, and no
//! group's median |error| may get worse than the baseline's by more than a
//! point. A change that improves a group rewrites the baseline with
//! `servesim validate --write-baseline validation/baseline.json`, so accuracy
//! can only ratchet.

use std::time::Duration;

use crate::common::*;

#[test]
fn no_group_is_worse_than_the_baseline() {
    let mut cmd = servesim();
    cmd.args(["validate", "--json", "--baseline", "validation/baseline.json", "--tolerance", "1"]);
    let out = run_bounded(cmd, Duration::from_secs(1800));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("validate --json: {e}\n{}", String::from_utf8_lossy(&out.stderr)));
    let failures = v["baseline_failures"].as_array().cloned().unwrap_or_default();
    assert!(failures.is_empty(), "groups worse than validation/baseline.json: {failures:#?}");
    assert!(out.status.success(), "validate failed: {}", String::from_utf8_lossy(&out.stderr));
    // Every row either ran or says why not.
    for r in v["rows"].as_array().unwrap() {
        assert!(r.get("metrics").is_some() || r["skipped"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
    }
    // The default scenario's published point is in the corpus and timed by the kernel fallback.
    let g =
        v["groups"].as_array().unwrap().iter().find(|g| g["group"].as_str().unwrap().starts_with("rtx5090_")).unwrap();
    assert!(g["cost_source"].as_str().unwrap().contains("scaled"), "{g}");
    // The MoE caveat quotes each judged MoE group's signed median TPOT error
    // (`sim::report::moe_timing`): what it says must be what validate measures today. vLLM
    // 0.12.0's Qwen3-235B-A22B-FP8 rows ran DeepGEMM's grouped GEMM, which servesim refuses.
    let mut by_group: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for r in v["rows"].as_array().unwrap() {
        let group = r["group"].as_str().unwrap_or_default();
        if !group.contains("qwen3-235b") && !group.contains("qwen3-30b-a3b") {
            continue;
        }
        if group.contains("qwen3-235b") && group.contains("vllm") {
            let why = r["skipped"].as_str().unwrap_or_default();
            assert!(why.contains("engine.moe_backend") && why.contains("deep_gemm"), "{r}");
            continue;
        }
        for m in r["metrics"].as_array().into_iter().flatten() {
            if let (Some("mean_tpot_ms"), Some(s), Some(p)) =
                (m["key"].as_str(), m["simulated"].as_f64(), m["published"].as_f64())
            {
                by_group.entry(group.to_string()).or_default().push(s / p - 1.0);
            }
        }
    }
    assert_eq!(by_group.len(), 4, "the judged MoE groups: {:?}", by_group.keys().collect::<Vec<_>>());
    let mut c = servesim();
    c.args(["simulate", "--set", "model=qwen3-30b-a3b", "--set", r#"hardware={"gpu":"h100-80gb","count":1}"#]);
    c.args(["--set", "workload.num_prompts=2", "--json"]);
    let o = run_bounded(c, Duration::from_secs(120));
    let sim: serde_json::Value = serde_json::from_slice(&o.stdout).expect("simulate --json");
    let caveat = sim["caveats"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["id"] == "moe_timing"))
        .unwrap_or_else(|| panic!("no moe_timing caveat: {sim}"));
    let message = caveat["message"].as_str().unwrap();
    for (group, mut errs) in by_group {
        errs.sort_by(f64::total_cmp);
        let n = errs.len();
        let median = if n % 2 == 1 { errs[n / 2] } else { (errs[n / 2 - 1] + errs[n / 2]) / 2.0 };
        let quoted =
            if median < 0.0 { format!("-{:.0}%", -100.0 * median) } else { format!("+{:.0}%", 100.0 * median) };
        assert!(
            message.contains(&quoted),
            "{group}: median TPOT error {quoted} is not what the caveat says: {message}"
        );
    }
}

/// A tolerance that is not a finite number of points ≥ 0 would pass any regression (NaN, inf)
/// or fail every group (negative); a run in which no row could run judged nothing. Both exit
/// 2 with the reason, never 0 (the fuzzing of 2026-12-04).
#[test]
fn a_gate_that_cannot_judge_is_an_error() {
    for t in ["NaN", "inf", "-1"] {
        let out = servesim().args(["validate", "--only", "rtx5090", &format!("--tolerance={t}")]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "--tolerance {t}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--tolerance: expected a finite number"), "{t}");
    }
    let out = servesim().args(["validate", "--only", "rtx5090", "--set", "engine.max_num_seqs=0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing was judged") && err.contains("engine.max_num_seqs"), "{err}");
    // A --set of what a row sets itself (its load) would run every such row at one setup and
    // still compare it with its own published values: refused, naming the row (until 2026-12-07
    // the --set won, silently).
    for set in ["workload.max_concurrency=8", "workload={}"] {
        let out = servesim().args(["validate", "--only", "evalscope", "--set", set]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{set}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("sets workload.max_concurrency itself") && err.contains("evalscope_llama31-8b_h100"),
            "{err}"
        );
    }
}

/// The baseline judges every group it holds and every group measured (the audit of
/// 2026-12-06): a group of a set whose file was deleted or renamed had left the gate without a
/// failure, as had a group measured but missing from the baseline, and a row that stopped being
/// compared left its group's median to the rest of the rows.
#[test]
fn the_baseline_judges_every_group_both_ways() {
    // The baselines beside the folder of sets, not in it (every *.json there is a set).
    let d = scratch().join("validate-baseline").join("sets");
    std::fs::create_dir_all(&d).unwrap();
    let set = "rtx5090_qwen25-7b_vllm028_c1.json";
    std::fs::copy(root().join("validation/published").join(set), d.join(set)).unwrap();
    let base = d.with_file_name("base.json");
    let run = |extra: &[&str]| -> (i32, String) {
        let mut cmd = servesim();
        cmd.args(["validate", "--dir", d.to_str().unwrap()]).args(extra);
        let o = run_bounded(cmd, Duration::from_secs(300));
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        (o.status.code().unwrap_or(-1), text)
    };
    let (c, out) = run(&["--write-baseline", base.to_str().unwrap()]);
    assert_eq!(c, 0, "{out}");
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&base).unwrap()).unwrap();
    let (c, out) = run(&["--baseline", base.to_str().unwrap()]);
    assert_eq!(c, 0, "{out}");
    let group = written["groups"].as_object().unwrap().keys().next().unwrap().clone();
    let judge = |edit: &dyn Fn(&mut serde_json::Value), want: &str| {
        let mut b = written.clone();
        edit(&mut b);
        let f = d.with_file_name("edited.json");
        std::fs::write(&f, b.to_string()).unwrap();
        let (c, out) = run(&["--baseline", f.to_str().unwrap()]);
        assert_eq!(c, 1, "{want}: {out}");
        assert!(out.contains(want), "want {want:?} in: {out}");
    };
    // A group of a set no longer in the folder.
    let gone = "nosuchset | 1x h100-80gb | vllm-0.11.0";
    judge(
        &|b| b["groups"][gone] = b["groups"][&group].clone(),
        &format!("{gone}: in the baseline but no longer measured"),
    );
    // The same among the groups kept apart from the corpus.
    judge(
        &|b| b["apart_groups"] = serde_json::json!({gone: b["groups"][&group].clone()}),
        &format!("{gone}: in the baseline but no longer measured"),
    );
    // A group measured that the baseline does not hold.
    judge(
        &|b| {
            let g = b["groups"].as_object_mut().unwrap();
            let v = g.remove(&group).unwrap();
            g.insert("othername | 1x rtx-5090 | vllm-0.28.0".into(), v);
        },
        &format!("{group}: measured but not in the baseline"),
    );
    // Fewer values compared than the baseline's.
    judge(
        &|b| {
            let n = b["groups"][&group]["n"].as_u64().unwrap();
            b["groups"][&group]["n"] = (n + 1).into();
        },
        "a row or a metric is no longer judged",
    );
}

/// A validation set's own mistakes are errors naming the file and the field, never a panic nor
/// a row judged on the wrong load (the fuzzing of 2026-12-05): a silicon-sample CSV without a
/// column the run is built from panicked (exit 101); a row's `set` that is not a list of strings
/// was dropped, so the row ran without its load and its error read as the model's; a published
/// cell that is not a positive number (a typo, a 0) was dropped without a word.
#[test]
fn a_malformed_validation_set_is_refused_naming_the_field() {
    let dir = scratch().join("validate-sets");
    let validate = |name: &str, set: &str, csv: &str| -> (i32, String) {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        let csv_path = d.join("t.csv");
        std::fs::write(&csv_path, csv).unwrap();
        std::fs::write(d.join("s.json"), set.replace("CSV", csv_path.to_str().unwrap())).unwrap();
        let mut cmd = servesim();
        cmd.args(["validate", "--dir", d.to_str().unwrap()]);
        let o = run_bounded(cmd, Duration::from_secs(120));
        (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let silicon = r#"{"csv": "CSV", "gpu": "a100-80gb", "silicon": {"filter": {}}, "scenario": "scenarios/serve-small-vllm.json"}"#;
    let (c, err) = validate("silicon", silicon, "id,isl,osl\n1,256,32\n");
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("s.json") && err.contains("missing column `backend`") && !err.contains("panicked"), "{err}");
    let cols = "id,backend,backend_version,tp_size,batch_size,isl,osl,silicon_concurrency\n";
    let (c, err) = validate("silicon_tp", silicon, &format!("{cols}1,vllm,0.33.0,two,8,256,32,8\n"));
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("tp_size: expected a whole number of at least 1, got \"two\""), "{err}");
    // A silicon set's scenario given as a path is read for its GPU (it was read off the path's
    // string: "no card named \"null\"").
    let (c, err) = validate(
        "silicon_path",
        silicon,
        "id,backend,backend_version,tp_size,batch_size,isl,osl,silicon_concurrency,silicon_ttft_ms\n1,vllm,0.33.0,1,8,256,32,8,100\n",
    );
    assert_eq!(c, 0, "{err}");
    assert!(!err.contains("no card named"), "{err}");

    let rows = |set: &str| {
        format!(
            r#"{{"csv": "CSV", "gpu": "a100-80gb", "scenario": "scenarios/serve-small-vllm.json",
                "rows": [{{"engine": "vllm", "load": "4", "set": {set}}}]}}"#
        )
    };
    let csv = |ttft: &str| format!("engine,concurrency_or_rate,mean_ttft_ms,output_tok_s\nvllm,4,{ttft},900\n");
    let (c, err) = validate("set_string", &rows(r#""workload.max_concurrency=4""#), &csv("100"));
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("rows[0].set: expected a list of \"PATH=VALUE\" strings"), "{err}");
    for bad in ["abc", "-1", "0", "NaN"] {
        let (c, err) = validate(&format!("cell_{bad}"), &rows(r#"["workload.max_concurrency=4"]"#), &csv(bad));
        assert_eq!(c, 2, "{bad}: {err}");
        assert!(
            err.contains("load \"4\": mean_ttft_ms: expected a positive number") && err.contains(&format!("{bad:?}")),
            "{bad}: {err}"
        );
    }
    // A key the reader does not know is an error naming it (a misspelt `set` ran the row without
    // its load).
    let misspelt = r#"{"csv": "CSV", "gpu": "a100-80gb", "scenario": "scenarios/serve-small-vllm.json",
        "rows": [{"engine": "vllm", "load": "4", "sets": ["workload.max_concurrency=4"]}]}"#;
    let (c, err) = validate("row_key", misspelt, &csv("100"));
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("rows[0].sets: unknown key (expected one of engine, load"), "{err}");
    // An empty cell is a metric the source does not give: the row runs on the rest.
    let (c, err) = validate("cell_empty", &rows(r#"["workload.max_concurrency=4"]"#), &csv(""));
    assert_eq!(c, 0, "{err}");
    // A load that reads as a number must be one ("NaN" panicked the knee's sort: an audit,
    // 2026-12-07).
    let nan = r#"{"csv": "CSV", "gpu": "a100-80gb", "scenario": "scenarios/serve-small-vllm.json",
        "rows": [{"engine": "vllm", "load": "NaN", "set": ["workload.max_concurrency=4"]}]}"#;
    let (c, err) = validate("load_nan", nan, "engine,concurrency_or_rate,mean_ttft_ms\nvllm,NaN,100\n");
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("rows[0].load: \"NaN\" is not a number") && !err.contains("panicked"), "{err}");
}

/// `sim::report::JUDGED_DENSE_MODELS` (which dense runs carry no `unjudged_model` caveat) is the
/// set of dense cards whose published runs `validate` judges today, with the cards' parameter
/// counts: a set added, dropped or kept apart moves it, and this test says to edit the list.
#[test]
fn the_judged_models_list_is_the_corpus() {
    let out = run_bounded(
        {
            let mut c = servesim();
            c.args(["validate", "--json"]);
            c
        },
        Duration::from_secs(1800),
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("validate --json");
    let judged: std::collections::BTreeSet<String> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r.get("metrics").is_some())
        .map(|r| r["set"].as_str().unwrap().to_string())
        .collect();
    let model_of = |sc: &serde_json::Value| -> String {
        let sc = match sc.as_str() {
            Some(path) => serde_json::from_str(&std::fs::read_to_string(root().join(path)).unwrap()).unwrap(),
            None => sc.clone(),
        };
        match &sc["model"] {
            serde_json::Value::String(id) => id.clone(),
            m => m["id"].as_str().unwrap().to_string(),
        }
    };
    let mut models = std::collections::BTreeSet::new();
    for set in &judged {
        let path = root().join("validation/published").join(format!("{set}.json"));
        let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        if s.get("apart_from_corpus").is_some() {
            continue;
        }
        let scenarios =
            s.get("scenario").into_iter().chain(s["scenarios"].as_object().into_iter().flat_map(|m| m.values()));
        let rows = s["rows"].as_array().into_iter().flatten().filter_map(|r| r.get("scenario"));
        for sc in scenarios.chain(rows) {
            models.insert(model_of(sc));
        }
    }
    let cards = sim::builtin::models().unwrap();
    let listed: std::collections::BTreeSet<String> =
        sim::report::JUDGED_DENSE_MODELS.iter().map(|(id, _)| id.to_string()).collect();
    assert_eq!(listed, models, "edit sim::report::JUDGED_DENSE_MODELS to the dense cards validate judges");
    for (id, n) in sim::report::JUDGED_DENSE_MODELS {
        let card = cards.iter().find(|c| c.id == *id).unwrap_or_else(|| panic!("no card {id}"));
        assert_eq!(card.num_parameters, *n, "{id}");
        assert!(card.moe.is_none(), "{id}");
    }
    let sizes: Vec<u64> = sim::report::JUDGED_DENSE_MODELS.iter().map(|(_, n)| *n).collect();
    assert!(sizes.windows(2).all(|w| w[0] <= w[1]), "smallest first");
}

/// `sim::report::JUDGED_GPU_ENGINES` (which uncalibrated runs carry no `unjudged_gpu` caveat) is
/// the GPU and engine of every group of `validation/baseline.json`, read as the uncalibrated
/// intervals read them (`calib::uncertainty`: the GPU the last word of the group key's second
/// part, the engine the first of `vllm`, `sglang` in its third; a group naming neither, as NIM's,
/// judges no engine), so that the caveat and the corpus-wide interval go together.
#[test]
fn the_judged_gpu_engines_list_is_the_baseline() {
    let b: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("validation/baseline.json")).unwrap()).unwrap();
    let mut from_baseline = std::collections::BTreeSet::new();
    for key in b["groups"].as_object().expect("baseline groups").keys() {
        let parts: Vec<&str> = key.split(" | ").collect();
        let gpu = parts[1].split_whitespace().last().unwrap().to_string();
        let label = parts[2].to_ascii_lowercase();
        if let Some(kind) = ["vllm", "sglang"].into_iter().find(|k| label.contains(k)) {
            from_baseline.insert((gpu, kind.to_string()));
        }
    }
    let listed: std::collections::BTreeSet<(String, String)> =
        sim::report::JUDGED_GPU_ENGINES.iter().map(|(g, k)| (g.to_string(), k.as_str().to_string())).collect();
    assert_eq!(listed, from_baseline, "edit sim::report::JUDGED_GPU_ENGINES to validation/baseline.json's groups");
    let gpus = sim::builtin::gpus().unwrap();
    for (g, _) in sim::report::JUDGED_GPU_ENGINES {
        assert!(gpus.iter().any(|c| c.id == *g), "no built-in card {g}");
    }
}

/// The published sets measured at a finite rate with `python -m sglang.bench_serving` (their
/// CSV's `#` header names it) model that client's arrivals (`workload.client`: the first request
/// at once, unscaled exponential gaps; docs/benchmark.md §2), both engines' scenarios alike (the
/// client, not the engine, decides); every other set keeps `vllm bench serve`'s (the default),
/// an SGLang server measured with it included.
#[test]
fn the_sets_measured_with_sglang_bench_serving_model_its_arrivals() {
    let mut stated = Vec::new();
    for entry in std::fs::read_dir(root().join("validation/published")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let csv = std::fs::read_to_string(root().join(s["csv"].as_str().unwrap())).unwrap();
        let header: String = csv.lines().filter(|l| l.starts_with('#')).collect();
        let finite_rate =
            s["rows"].as_array().into_iter().flatten().any(|r| {
                r["set"].as_array().into_iter().flatten().any(|x| {
                    x.as_str().and_then(|x| x.strip_prefix("workload.request_rate=")).is_some_and(|v| v != "inf")
                })
            });
        let sglang_client = finite_rate && header.contains("sglang.bench_serving");
        let scenarios =
            s.get("scenario").into_iter().chain(s["scenarios"].as_object().into_iter().flat_map(|m| m.values()));
        for sc in scenarios.filter(|sc| sc.is_object()) {
            let client = sc["workload"]["client"].as_str();
            let want = sglang_client.then_some("sglang_bench_serving");
            assert_eq!(client, want, "{}: workload.client", path.display());
            if client.is_some() {
                stated.push(path.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
    }
    stated.sort();
    stated.dedup();
    assert_eq!(
        stated,
        [
            "datacrunch_llama33-70b_4xh200_sglang.json",
            "sglang_vs_vllm060_llama31-70b_4xh100.json",
            "sglang_vs_vllm060_llama31-8b_a100.json"
        ]
    );
}
