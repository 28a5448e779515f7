//! Helpers shared by the tests that need the `servesim` binary (the simulator's own
//! suites have theirs in `sim/tests/common/mod.rs`).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sim::config::{self, Resources, SimSpec};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The built-in cards (`sim::builtin`, the binary's own).
pub fn resources() -> Resources {
    sim::builtin::resources().expect("built-in cards parse")
}

/// Resolves scenario JSON against the repository's cards.
pub fn spec(v: Value) -> SimSpec {
    let s = config::from_value(v, "").unwrap_or_else(|e| panic!("scenario does not parse: {e}"));
    config::resolve(&s, &resources()).unwrap_or_else(|e| panic!("scenario does not resolve: {e}"))
}

pub fn servesim() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_servesim"));
    c.current_dir(root());
    c
}

/// Runs a command with a time limit: a hang is a failure, not a stuck CI.
pub fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    use std::io::Read;
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn servesim");
    // Drain both pipes while waiting: a child whose output fills a pipe would block forever.
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("command did not finish within {limit:?}: {cmd:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() }
}

pub fn run_cli(args: &[&str]) -> Output {
    let mut c = servesim();
    c.args(args);
    // A live run writes its per-request results where it is told, "." by default: keep the
    // tests' out of the repository.
    if args.first() == Some(&"bench") && !args.contains(&"--result-dir") {
        c.arg("--result-dir").arg(scratch());
    }
    run_bounded(c, Duration::from_secs(120))
}

/// This test process's scratch folder, `servesim-tests-<pid>` in the system's temp folder: every
/// file a test writes goes under it, and it is removed with all of them when the process exits
/// (an `atexit` handler, which runs after the test harness returns, failed tests or not).
pub fn scratch() -> &'static std::path::Path {
    SCRATCH.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("servesim-tests-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // SAFETY: `atexit` from the C library std links; the handler only removes a folder.
        unsafe { atexit(remove_scratch) };
        dir
    })
}

static SCRATCH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

extern "C" {
    fn atexit(f: extern "C" fn()) -> std::os::raw::c_int;
}

extern "C" fn remove_scratch() {
    if let Some(dir) = SCRATCH.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

pub fn write_temp(name: &str, text: &str) -> PathBuf {
    let p = scratch().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The run record (`*.record.json`) a `--save-result` run wrote into `dir`, parsed.
pub fn run_record(dir: &std::path::Path) -> Value {
    let path = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".record.json"))
        .unwrap_or_else(|| panic!("no run record in {}", dir.display()));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The per-request lines (`*.requests.jsonl`) a `--save-result` run wrote into `dir`, parsed.
pub fn request_lines(dir: &std::path::Path) -> Vec<Value> {
    let path = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".requests.jsonl"))
        .unwrap_or_else(|| panic!("no per-request lines in {}", dir.display()));
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

pub fn stdout_json(o: &Output) -> Value {
    assert!(
        o.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    serde_json::from_slice(&o.stdout).expect("stdout is JSON")
}

/// A `servesim serve` child process, killed when dropped.
pub struct Server {
    child: Child,
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A profile fitted by `calibrate --from-results` on one run of `scenario` "measured" by the
/// simulator with a known slowdown (a slower prior: prefill MFU 0.9, weight bandwidth 0.6),
/// written under `dir` (with the result file); the calibration must succeed.
pub fn profile_from_slowed_run(scenario: &str, dir: &std::path::Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let slow = stdout_json(&run_cli(&[
        "simulate",
        scenario,
        "--json",
        "--set",
        "cost.prior.prefill_mfu=0.9",
        "--set",
        "cost.prior.weight_bandwidth_eff=0.6",
    ]));
    let f = dir.join("result.json");
    std::fs::write(&f, serde_json::to_string(&slow).unwrap()).unwrap();
    let out = dir.join("profile.json");
    let o = calibrate_from_results(&f, scenario, &out, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// `servesim calibrate --from-results RESULT --scenario SCENARIO --out OUT EXTRA...`.
pub fn calibrate_from_results(
    result: &std::path::Path,
    scenario: &str,
    out: &std::path::Path,
    extra: &[&str],
) -> Output {
    let (r, o) = (result.to_str().unwrap(), out.to_str().unwrap());
    let mut args = vec!["calibrate", "--from-results", r, "--scenario", scenario, "--out", o];
    args.extend_from_slice(extra);
    run_cli(&args)
}

/// Starts `servesim serve` on a free port and reads its address from the first line it logs.
pub fn start_server(scenario: &str, extra: &[&str]) -> Server {
    let mut c = servesim();
    c.args(["serve", scenario, "--port", "0", "--max-lifetime", "300"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("start servesim serve");
    let mut line = String::new();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    err.read_line(&mut line).unwrap();
    // The rest of stderr is drained, not dropped: a server that writes another line to a closed
    // pipe dies of it (a model name with a newline printed two lines, and the test read an
    // empty /metrics now and then).
    std::thread::spawn(move || {
        let mut sink = String::new();
        while err.read_line(&mut sink).is_ok_and(|n| n > 0) {
            sink.clear();
        }
    });
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    Server { child, url }
}
