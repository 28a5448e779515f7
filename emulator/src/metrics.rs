//! `/metrics` in the engine's own names, buckets, `# HELP` and `# TYPE` lines.

use sim::config::{EngineSpec, SimSpec};

/// Counters and histograms, updated by the driver.
#[derive(Default)]
pub(crate) struct Stats {
    pub running: usize,
    pub waiting: usize,
    pub kv_usage: f64,
    pub preemptions: u64,
    pub prefix_queries: u64,
    pub prefix_hits: u64,
    /// SGLang `sglang:cache_hit_rate`: the last prefill batch's hit rate (`log_prefill_stats`:
    /// its cached tokens over its cached and new tokens), set as a prefill batch is formed and
    /// reset to 0 at every `decode_log_interval`-th (40th) decode batch (`log_decode_stats`;
    /// 0.4.10 and 0.5.10 read); not the run's cumulative rate (until 2026-12-06).
    pub cache_hit_rate: f64,
    /// SGLang's `forward_ct_decode`: decode batches processed.
    pub decode_batches: u64,
    /// The engine's prompt and generation token counters, each moved as its engine moves it:
    /// vLLM the prompt with a request's first token and each token as it comes
    /// (`v1/metrics/stats.py`, `IterationStats.update_from_output`); SGLang both when a
    /// request finishes (`metrics/collector.py`, `observe_one_finished_request`, from the
    /// tokenizer manager's `collect_metrics`: `len(origin_input_ids)` once a request, however
    /// often it was retracted).
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    /// SGLang `sglang:cached_tokens_total`: each request's `cached_tokens` added once, when its
    /// output finishes (`observe_one_finished_request` from the tokenizer manager's
    /// `collect_metrics`, 0.4.10 to 0.5.23), not at each prefix lookup; what a request counts
    /// is the driver's `Live::cached` (per release).
    pub cached_tokens: u64,
    /// Finished requests by reason: stop (EOS), length (max_tokens). A client that went away
    /// is not a finished request in vLLM (`output_processor.py`, `abort_requests`: the state
    /// is dropped, no stats): `finished_reason="abort"` stays 0.
    pub finished_stop: u64,
    pub finished_length: u64,
    /// SGLang `num_requests_total`: requests whose output the tokenizer manager saw finish
    /// (aborted running requests included).
    pub finished_requests: u64,
    /// SGLang `num_aborted_requests_total`: aborts sent (`TokenizerManager.abort_request`).
    pub aborted: u64,
    pub iteration_tokens: Histogram,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    /// Why the modelled engine stopped (`sim::engine::Engine::fatal_error`), once it has:
    /// `/health` then answers 503, as a server whose engine died does.
    pub engine_error: Option<String>,
}

impl Stats {
    /// An SGLang request's output finished: its counters move now.
    pub fn count_sglang_finished(&mut self, prompt_len: u32, generated: u32, cached: u32) {
        self.prompt_tokens += u64::from(prompt_len);
        self.generation_tokens += u64::from(generated);
        self.cached_tokens += u64::from(cached);
        self.finished_requests += 1;
    }

    pub fn new(sglang: bool) -> Stats {
        Stats {
            iteration_tokens: Histogram::new(VLLM_ITER),
            ttft: Histogram::new(if sglang { SGL_TTFT } else { VLLM_TTFT }),
            itl: Histogram::new(if sglang { SGL_ITL } else { VLLM_ITL }),
            e2e: Histogram::new(if sglang { SGL_E2E } else { VLLM_E2E }),
            ..Default::default()
        }
    }
}

#[derive(Default, Clone)]
pub(crate) struct Histogram {
    bounds: Vec<f64>,
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &[f64]) -> Histogram {
        Histogram { bounds: bounds.to_vec(), counts: vec![0; bounds.len()], sum: 0.0, count: 0 }
    }
    #[cfg(test)]
    pub fn count(&self) -> u64 {
        self.count
    }
    #[cfg(test)]
    pub fn sum(&self) -> f64 {
        self.sum
    }
    pub fn observe(&mut self, v: f64) {
        for (b, c) in self.bounds.iter().zip(self.counts.iter_mut()) {
            if v <= *b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }
    fn render(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} histogram\n"));
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            out.push_str(&format!("{name}_bucket{{{labels},le=\"{b:?}\"}} {c}.0\n"));
        }
        out.push_str(&format!("{name}_bucket{{{labels},le=\"+Inf\"}} {}.0\n", self.count));
        out.push_str(&format!("{name}_sum{{{labels}}} {:?}\n", self.sum));
        out.push_str(&format!("{name}_count{{{labels}}} {}.0\n", self.count));
    }
}

// vLLM's buckets (`v1/metrics/loggers.py`) and SGLang's (`metrics/collector.py`).
const VLLM_TTFT: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
];
const VLLM_ITL: &[f64] =
    &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
const VLLM_E2E: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
];
const VLLM_ITER: &[f64] = &[1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0];
const SGL_TTFT: &[f64] =
    &[0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0];
const SGL_ITL: &[f64] = &[
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100, 0.200, 0.400,
    0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
];
const SGL_E2E: &[f64] = &[
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0, 600.0, 1200.0,
    1800.0, 2400.0,
];

/// A label value in the Prometheus text format: `\`, `"` and a newline escaped
/// (`\\`, `\"`, `\n`), as `prometheus_client` writes them.
fn escape_label(v: &str) -> String {
    let mut e = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => e.push_str("\\\\"),
            '"' => e.push_str("\\\""),
            '\n' => e.push_str("\\n"),
            c => e.push(c),
        }
    }
    e
}

fn family(o: &mut String, name: &str, kind: &str, help: &str) {
    o.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
}

fn sample(o: &mut String, name: &str, labels: &str, v: f64) {
    o.push_str(&format!("{name}{{{labels}}} {v:?}\n"));
}

/// The Prometheus text of `/metrics` (text format 0.0.4, counters named `*_total` in
/// their HELP and TYPE lines as `prometheus_client` writes them).
pub(crate) fn render(spec: &SimSpec, model: &str, st: &Stats) -> String {
    let mut o = String::new();
    let model = escape_label(model);
    match &spec.engine {
        EngineSpec::Vllm(c) => {
            let l = format!("engine=\"0\",model_name=\"{model}\"");
            family(&mut o, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
            o.push_str(&format!(
                "vllm:cache_config_info{{block_size=\"{}\",enable_prefix_caching=\"{}\",num_gpu_blocks=\"{}\",kv_cache_size_tokens=\"{}\",{l}}} 1.0\n",
                c.block_size,
                if c.enable_prefix_caching { "True" } else { "False" },
                c.num_gpu_blocks,
                u64::from(c.num_gpu_blocks) * u64::from(c.block_size)
            ));
            for (name, kind, help, v) in [
                (
                    "vllm:num_requests_running",
                    "gauge",
                    "Number of requests in model execution batches.",
                    st.running as f64,
                ),
                (
                    "vllm:num_requests_waiting",
                    "gauge",
                    "Number of requests waiting to be processed.",
                    st.waiting as f64,
                ),
                ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", st.kv_usage),
                (
                    "vllm:num_preemptions_total",
                    "counter",
                    "Cumulative number of preemption from the engine.",
                    st.preemptions as f64,
                ),
                (
                    "vllm:prefix_cache_queries_total",
                    "counter",
                    "Prefix cache queries, in terms of number of queried tokens.",
                    st.prefix_queries as f64,
                ),
                (
                    "vllm:prefix_cache_hits_total",
                    "counter",
                    "Prefix cache hits, in terms of number of cached tokens.",
                    st.prefix_hits as f64,
                ),
                ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", st.prompt_tokens as f64),
                (
                    "vllm:generation_tokens_total",
                    "counter",
                    "Number of generation tokens processed.",
                    st.generation_tokens as f64,
                ),
            ] {
                family(&mut o, name, kind, help);
                sample(&mut o, name, &l, v);
            }
            family(&mut o, "vllm:request_success_total", "counter", "Count of successfully processed requests.");
            for (reason, v) in [("stop", st.finished_stop), ("length", st.finished_length), ("abort", 0)] {
                sample(&mut o, "vllm:request_success_total", &format!("{l},finished_reason=\"{reason}\""), v as f64);
            }
            st.iteration_tokens.render(
                &mut o,
                "vllm:iteration_tokens_total",
                "Histogram of number of tokens per engine_step.",
                &l,
            );
            st.ttft.render(
                &mut o,
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                &l,
            );
            st.itl.render(
                &mut o,
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                &l,
            );
            st.e2e.render(
                &mut o,
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                &l,
            );
        }
        EngineSpec::Sglang(c) => {
            let l = format!("model_name=\"{model}\",tp_rank=\"0\"");
            let hit = st.cache_hit_rate;
            for (name, kind, help, v) in [
                ("sglang:num_running_reqs", "gauge", "The number of running requests.", st.running as f64),
                ("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", st.waiting as f64),
                ("sglang:token_usage", "gauge", "The token usage.", st.kv_usage),
                (
                    "sglang:max_total_num_tokens",
                    "gauge",
                    "Maximum total number of tokens in the KV cache pool.",
                    c.max_total_tokens as f64,
                ),
                ("sglang:page_size", "gauge", "The page size of the KV cache.", f64::from(c.page_size)),
                ("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", hit),
                (
                    "sglang:num_retracted_requests_total",
                    "counter",
                    "Number of retracted requests.",
                    st.preemptions as f64,
                ),
                (
                    "sglang:prompt_tokens_total",
                    "counter",
                    "Number of prefill tokens processed.",
                    st.prompt_tokens as f64,
                ),
                ("sglang:cached_tokens_total", "counter", "Number of cached prompt tokens.", st.cached_tokens as f64),
                (
                    "sglang:generation_tokens_total",
                    "counter",
                    "Number of generation tokens processed.",
                    st.generation_tokens as f64,
                ),
                ("sglang:num_requests_total", "counter", "Number of requests processed.", st.finished_requests as f64),
                ("sglang:num_aborted_requests_total", "counter", "Number of requests aborted.", st.aborted as f64),
            ] {
                family(&mut o, name, kind, help);
                sample(&mut o, name, &l, v);
            }
            st.ttft.render(
                &mut o,
                "sglang:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                &l,
            );
            st.itl.render(
                &mut o,
                "sglang:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                &l,
            );
            st.e2e.render(
                &mut o,
                "sglang:e2e_request_latency_seconds",
                "Histogram of End-to-end request latency in seconds",
                &l,
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_as_the_text_format_says() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(escape_label("qwen2.5-7b"), "qwen2.5-7b");
    }
}
