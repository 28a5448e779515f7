//! Golden outputs: `servesim simulate --json` and `servesim sweep --json` of
//! every shipped scenario and every validation scenario, compared byte for
//! byte with the files in `tests/golden/`.
//!
//! A refactor must leave every file unchanged. A change that is meant to move
//! the numbers (a modelling fix) regenerates them with
//! `SERVESIM_BLESS=1 cargo test --test e2e golden`, and its commit says which
//! outputs moved and why.

use std::path::{Path, PathBuf};

use crate::common::*;

/// The scenarios whose outputs are pinned, relative to the repository root.
fn golden_scenarios() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = Vec::new();
    for dir in ["scenarios", "validation/llmd-exp0"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.extension().is_some_and(|e| e == "json")
                    && (dir == "scenarios" || p.file_name().unwrap().to_string_lossy().starts_with("scenario-"))
            })
            .map(|p| p.strip_prefix(root()).unwrap().to_path_buf())
            .collect();
        files.sort();
        v.extend(files);
    }
    v
}

fn golden_name(scenario: &Path, command: &str) -> PathBuf {
    let flat = scenario.to_string_lossy().replace(['/', '\\'], "__");
    root().join("tests/golden").join(format!("{}.{command}.json", flat.trim_end_matches(".json")))
}

fn run_json(args: &[&str]) -> String {
    let o = servesim().args(args).output().unwrap();
    assert!(o.status.success(), "servesim {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn golden_outputs_are_byte_identical() {
    let bless = std::env::var_os("SERVESIM_BLESS").is_some();
    let mut mismatches = Vec::new();
    let scenarios = golden_scenarios();
    assert!(scenarios.len() >= 10, "expected the shipped and validation scenarios, found {scenarios:?}");
    for sc in &scenarios {
        let s = sc.to_string_lossy().to_string();
        for (command, args) in [
            ("simulate", vec!["simulate", s.as_str(), "--json"]),
            ("sweep", vec!["sweep", s.as_str(), "--concurrency", "1,8,32,128", "--json", "--jobs", "2"]),
        ] {
            let out = run_json(&args);
            let path = golden_name(sc, command);
            if bless {
                std::fs::write(&path, &out).unwrap();
                continue;
            }
            match std::fs::read_to_string(&path) {
                Ok(want) if want == out => {}
                Ok(_) => mismatches.push(format!("{} differs from servesim {}", path.display(), args.join(" "))),
                Err(e) => mismatches.push(format!("{}: {e} (run with SERVESIM_BLESS=1 to create it)", path.display())),
            }
        }
    }
    assert!(mismatches.is_empty(), "golden outputs changed:\n{}", mismatches.join("\n"));
}
