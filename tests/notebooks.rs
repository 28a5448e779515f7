//! The teaching notebooks run top to bottom, as a class would run them,
//! against this build of servesim (each asserts what it teaches). They need a
//! Python environment (`notebooks/requirements.txt`): without one the test says
//! so and is skipped; `bash scripts/test.sh` always provides it.

use std::process::Command;
use std::time::Duration;

use crate::common::*;

#[test]
fn every_teaching_notebook_runs_top_to_bottom() {
    let python = std::env::var("SERVESIM_PYTHON").ok().or_else(|| {
        let v = root().join(".venv/bin/python");
        v.exists().then(|| v.display().to_string())
    });
    let Some(python) = python else {
        // `bash scripts/test.sh` (the README's test command, and CI's) creates `.venv` and sets
        // SERVESIM_PYTHON, so there the notebooks always run; a bare `cargo test` skips them.
        eprintln!(
            "SKIPPED the teaching notebooks: no Python environment for them (neither SERVESIM_PYTHON nor {}). \
             `bash scripts/test.sh` creates it from notebooks/requirements.txt and runs them.",
            root().join(".venv/bin/python").display()
        );
        return;
    };
    let mut c = Command::new(&python);
    c.arg(root().join("notebooks/run_all.py")).env("SERVESIM", env!("CARGO_BIN_EXE_servesim")).current_dir(root());
    let o = run_bounded(c, Duration::from_secs(600));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("4 passed, 0 failed"), "{out}");
}
