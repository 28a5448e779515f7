//! `vllm bench serve`'s workload flags on the commands that simulate one run (`simulate`), so
//! that what a user types for the benchmark carries over: `servesim simulate
//! --max-concurrency 64 --num-prompts 200` is `--set workload.max_concurrency=64 --set
//! workload.num_prompts=200`. Each flag is the `workload` field of its name (`-` for `_`), as
//! on `servesim bench`; the seed is the scenario flags' `--seed`.

use clap::Args;

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
}

impl BenchFlags {
    /// `(workload field, value)` for each flag given, in the order above.
    fn given(&self) -> Vec<(&'static str, String)> {
        let n = |x: Option<u32>| x.map(|v| v.to_string());
        // A float as JSON reads it back (`{:?}` keeps `1e-300` and `0.5` exact); a NaN or an
        // infinity is not JSON, and stays text for the field's own check to refuse by name.
        let f = |x: Option<f64>| x.map(|v| format!("{v:?}"));
        let flags: [(&'static str, Option<String>); 16] = [
            ("dataset_name", self.dataset_name.clone()),
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
            ("request_rate", self.request_rate.clone()),
            ("burstiness", f(self.burstiness)),
            ("ignore_eos", self.ignore_eos.then(|| "true".to_string())),
            ("num_warmups", n(self.num_warmups)),
            ("initial_test_request", self.no_initial_test.then(|| "false".to_string())),
        ];
        flags.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect()
    }

    /// The flag that sets `workload.<field>`.
    fn flag(field: &str) -> String {
        if field == "initial_test_request" {
            "--no-initial-test".into()
        } else {
            format!("--{}", field.replace('_', "-"))
        }
    }

    /// The flags as `--set` assignments, put before `sets` (the user's own): one field given by
    /// both is an error naming both.
    pub fn with_sets(&self, sets: &[String]) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        for (field, value) in self.given() {
            let path = format!("workload.{field}");
            if let Some(s) = sets.iter().find(|s| s.split('=').next().unwrap_or("").trim() == path) {
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
        let mut e = e;
        for (field, value) in self.given() {
            let path = format!("workload.{field}");
            let flag = Self::flag(field);
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
}
