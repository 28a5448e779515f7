//! `vllm bench serve`'s workload flags on the commands that simulate one run (`simulate`), so
//! that what a user types for the benchmark carries over: `servesim simulate
//! --max-concurrency 64 --num-prompts 200` is `--set workload.max_concurrency=64 --set
//! workload.num_prompts=200`. Each flag is the `workload` field of its name (`-` for `_`), as
//! on `servesim bench`; the seed is the scenario flags' `--seed`. The live commands (`bench`,
//! `check`, `calibrate`) take the same flags (`live::WorkloadArgs` flattens them).
//! `--goodput` is the one flag of the set that is no workload field: the objectives of the
//! report's `request_goodput` ([`BenchFlags::goodput_slos`]).

use clap::Args;
use serde_json::Value;

/// The workload flags, named as `vllm bench serve` names them (each sets the `workload` field of
/// its name; a flag and a `--set` of the same field are an error).
#[derive(Args, Debug, Clone, Default)]
pub struct BenchFlags {
    /// `workload.dataset_name`: random, prefix_repetition or trace.
    #[arg(long, help_heading = "vllm bench serve flags")]
    pub dataset_name: Option<String>,
    #[arg(long, help_heading = "vllm bench serve flags")]
    pub random_input_len: Option<u32>,
    #[arg(long, help_heading = "vllm bench serve flags")]
    pub random_output_len: Option<u32>,
    #[arg(long, help_heading = "vllm bench serve flags")]
    pub random_range_ratio: Option<f64>,
    #[arg(long, help_heading = "vllm bench serve flags")]
    pub random_prefix_len: Option<u32>,
    #[arg(long, help_heading = "vllm bench serve flags")]
    pub prefix_repetition_prefix_len: Option<u32>,
    #[arg(long, help_heading = "vllm bench serve flags")]
    pub prefix_repetition_suffix_len: Option<u32>,
    #[arg(long, help_heading = "vllm bench serve flags")]
    pub prefix_repetition_num_prefixes: Option<u32>,
    #[arg(long, help_heading = "vllm bench serve flags")]
    pub prefix_repetition_output_len: Option<u32>,
    #[arg(long, help_heading = "vllm bench serve flags")]
    pub num_prompts: Option<u32>,
    #[arg(long, help_heading = "vllm bench serve flags")]
    pub max_concurrency: Option<u32>,
    /// Requests per second, or `inf`.
    #[arg(long, help_heading = "vllm bench serve flags")]
    pub request_rate: Option<String>,
    #[arg(long, help_heading = "vllm bench serve flags")]
    pub burstiness: Option<f64>,
    #[arg(long, help_heading = "vllm bench serve flags")]
    pub ignore_eos: bool,
    #[arg(long, help_heading = "vllm bench serve flags")]
    pub num_warmups: Option<u32>,
    /// Do not send `vllm bench serve`'s initial test request first (`workload.initial_test_request`
    /// false; recent releases skip it by default, `--ready-check-timeout-sec 0`).
    #[arg(long, help_heading = "vllm bench serve flags")]
    pub no_initial_test: bool,
    /// Service-level objectives of `request_goodput`, as `vllm bench serve --goodput`: KEY:VALUE
    /// pairs in milliseconds, KEY one of ttft, tpot, e2el (`--goodput ttft:500 tpot:50`); a
    /// request is good when it completed and meets every one. Not a workload field.
    #[arg(long, num_args = 1.., value_name = "KEY:VALUE", help_heading = "vllm bench serve flags")]
    pub goodput: Vec<String>,
}

impl BenchFlags {
    /// A NaN or an infinity would become JSON null, read as "not given" (the field's default
    /// would run instead): each is refused by its flag (`--request-rate inf` is text, read by
    /// the field's own check).
    pub fn check(&self) -> Result<(), String> {
        for (flag, v) in [
            ("--random-range-ratio", self.random_range_ratio),
            ("--burstiness", self.burstiness),
            ("--request-rate", self.request_rate.as_deref().and_then(|r| r.trim().parse::<f64>().ok())),
        ] {
            if v.is_some_and(f64::is_nan) {
                return Err(format!("{flag}: expected a number, got NaN"));
            }
        }
        // `inf` is vLLM's fixed gaps (from 0.11.1); -inf is no burstiness.
        if let Some(b) = self.burstiness.filter(|b| *b == f64::NEG_INFINITY) {
            return Err(format!("--burstiness: expected a number above 0 or inf, got {b}"));
        }
        if let Some(r) = self.random_range_ratio.filter(|r| !r.is_finite()) {
            return Err(format!("--random-range-ratio: expected a number in [0, 1), got {r}"));
        }
        self.goodput_slos()?;
        Ok(())
    }

    /// `--goodput`'s objectives (`sim::metrics::GoodputSlos::parse`: vLLM's checks, the error
    /// naming the flag); `None` without the flag.
    pub fn goodput_slos(&self) -> Result<Option<sim::metrics::GoodputSlos>, String> {
        if self.goodput.is_empty() {
            return Ok(None);
        }
        sim::metrics::GoodputSlos::parse(&self.goodput).map(Some).map_err(|e| format!("--goodput: {e}"))
    }

    /// `(workload field, value)` for each flag given, in the order above. `--request-rate`
    /// is a number where it reads as a finite one, else its text (`inf`), which the field's
    /// own check reads. Call [`BenchFlags::check`] first: a NaN here is JSON null.
    pub fn values(&self) -> Vec<(&'static str, Value)> {
        let n = |x: Option<u32>| x.map(Value::from);
        let f = |x: Option<f64>| x.map(Value::from);
        let rate = self.request_rate.as_ref().map(|r| match r.trim().parse::<f64>() {
            Ok(v) if v.is_finite() => Value::from(v),
            _ => Value::from(r.clone()),
        });
        let flags: [(&'static str, Option<Value>); 16] = [
            ("dataset_name", self.dataset_name.clone().map(Value::from)),
            ("random_input_len", n(self.random_input_len)),
            ("random_output_len", n(self.random_output_len)),
            ("random_range_ratio", f(self.random_range_ratio)),
            ("random_prefix_len", n(self.random_prefix_len)),
            ("prefix_repetition_prefix_len", n(self.prefix_repetition_prefix_len)),
            ("prefix_repetition_suffix_len", n(self.prefix_repetition_suffix_len)),
            ("prefix_repetition_num_prefixes", n(self.prefix_repetition_num_prefixes)),
            ("prefix_repetition_output_len", n(self.prefix_repetition_output_len)),
            ("num_prompts", n(self.num_prompts)),
            ("max_concurrency", n(self.max_concurrency)),
            ("request_rate", rate),
            // An infinite burstiness as text (JSON has no infinity), which the field reads.
            ("burstiness", self.burstiness.map(|b| if b.is_infinite() { Value::from("inf") } else { Value::from(b) })),
            ("num_warmups", n(self.num_warmups)),
            ("ignore_eos", self.ignore_eos.then_some(Value::Bool(true))),
            ("initial_test_request", self.no_initial_test.then_some(Value::Bool(false))),
        ];
        flags.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect()
    }

    /// [`BenchFlags::values`] as `--set` text ([`as_text`]).
    fn given(&self) -> Vec<(&'static str, String)> {
        as_text(self.values())
    }

    /// The flag that sets `workload.<field>`.
    pub fn flag(field: &str) -> String {
        if field == "initial_test_request" {
            "--no-initial-test".into()
        } else {
            format!("--{}", field.replace('_', "-"))
        }
    }

    /// The flags as `--set` assignments, put before `sets` (the user's own): one field given by
    /// both is an error naming both.
    pub fn with_sets(&self, sets: &[String]) -> Result<Vec<String>, String> {
        self.check()?;
        let mut out = Vec::new();
        for (field, value) in self.given() {
            let path = format!("workload.{field}");
            if let Some(s) = sets.iter().find(|s| sim::config::set_path(s) == path) {
                return Err(format!("{} and --set {s} both give {path}: give one", Self::flag(field)));
            }
            // A text value is a JSON string where it is not a number or a keyword; the field's
            // own check reads it (`--request-rate inf`, `--dataset-name random`).
            out.push(format!("{path}={value}"));
        }
        out.extend(sets.iter().cloned());
        Ok(out)
    }

    /// An error about a field a flag set names the flag first (`--max-concurrency
    /// (workload.max_concurrency): must be at least 1`), wherever the error puts the path: the
    /// user typed the flag.
    pub fn name_the_flag(&self, e: String) -> String {
        name_flags(e, &self.given())
    }
}

/// `(field, value)` pairs as `--set` text: a string as it is, anything else as JSON.
pub fn as_text(values: Vec<(&'static str, Value)>) -> Vec<(&'static str, String)> {
    values
        .into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => (k, s),
            v => (k, v.to_string()),
        })
        .collect()
}

/// [`BenchFlags::name_the_flag`] over `given`, `(workload field, value text)` of each flag the
/// user typed (the live commands add `--trace` and `--seed` to the bench flags).
pub fn name_flags(e: String, given: &[(&'static str, String)]) -> String {
    let mut e = e;
    for (field, value) in given {
        let path = format!("workload.{field}");
        let flag = BenchFlags::flag(field);
        e = e.replace(&format!("--set {path}={value}: "), "");
        for end in [":", " "] {
            let at = format!("{path}{end}");
            if let Some(i) = e.find(&at) {
                // Not inside a longer path (`workload.num_prompts` in `x.workload.num_prompts`).
                if i == 0 || e[..i].ends_with(' ') {
                    e = format!("{}{flag} ({path}){end}{}", &e[..i], &e[i + at.len()..]);
                    break;
                }
            }
        }
    }
    e
}
