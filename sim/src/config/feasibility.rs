//! Feasibility: every request must fit the context and the KV pool.

use super::*;

/// The first vLLM release that shortens a request's output to fit `max_model_len` instead of
/// refusing it (`renderers/params.py`, `max_input_tokens` no longer less `max_tokens`; read in
/// the 0.31.0 and 0.32.0 wheels, and 0.34.0).
pub const VLLM_CLAMPS_MAX_TOKENS: Version = Version::new(0, 32, 0);

/// The first SGLang release that accepts a request whose prompt and `max_new_tokens` fill the
/// context exactly (`>` in `_validate_one_request`; `>=` through 0.5.10).
pub const SGLANG_ACCEPTS_A_FULL_CONTEXT: Version = Version::new(0, 5, 11);

/// Every request must fit `max_model_len` and the whole KV pool, or it could
/// never finish (vLLM would reject it, or preempt it forever).
pub(super) fn check_requests_fit(spec: &SimSpec) -> Result<()> {
    let (max_prompt, max_total) = max_request_lengths(&spec.workload);
    // The lengths saturate at u32::MAX: a total there is past it, not equal to it (an audit,
    // 2026-12-07: a 4,294,967,295-token prompt was said to total 4,294,967,295).
    let total_words = if max_total == u32::MAX { format!("over {}", u32::MAX) } else { max_total.to_string() };
    let field = match spec.workload.dataset {
        // The shared prefix named where it is the larger part of the prompt.
        Dataset::Random { input_len, prefix_len, .. } if prefix_len > input_len => "workload.random_prefix_len",
        Dataset::Random { .. } => "workload.random_input_len",
        Dataset::PrefixRepetition { .. } => "workload.prefix_repetition_prefix_len",
        Dataset::Trace { .. } | Dataset::Requests { .. } => "workload.trace",
    };
    match &spec.engine {
        EngineSpec::Vllm(c) => {
            if max_total > c.max_model_len {
                // What the server does with such a request depends on the release: through 0.31 it
                // answers HTTP 400 ("'max_tokens' or 'max_completion_tokens' is too large",
                // `serving_engine._validate_input`; from 0.20 `renderers/params.py`, whose
                // `max_input_tokens` is max_model_len − max_tokens) and the client counts the
                // request failed; from 0.32 only the prompt must fit (`max_input_tokens` is
                // max_model_len) and `get_max_tokens` shortens the output to what is left, which
                // the run does too (`WorkloadParams::context_clamp`, so such a request no longer
                // passes the context here), unless its prompt fills the context (a 400 there too).
                // A refusal the client would count as failed is not modelled: the run is refused.
                let what = if c.version >= VLLM_CLAMPS_MAX_TOKENS && max_prompt < c.max_model_len {
                    "vLLM from 0.32 shortens such a request's output to fit (get_max_tokens), as a run of this engine's own workload does"
                } else if max_prompt >= c.max_model_len {
                    "vLLM would answer such a request with HTTP 400 and the client count it failed, which servesim does not model"
                } else {
                    "vLLM through 0.31 answers such a request with HTTP 400 ('max_tokens' too large) and the client counts it failed, which servesim does not model"
                };
                return Err(ConfigError::new(
                    field,
                    format!(
                        "a request of up to {max_prompt} prompt tokens and {} total exceeds engine.max_model_len {} ({what}); shorten the requests or raise engine.max_model_len",
                        total_words, c.max_model_len
                    ),
                ));
            }
            let usable = u64::from(c.num_gpu_blocks - 1);
            // Its last sampled token is never computed, so never given a slot.
            let need = u64::from(max_total.saturating_sub(1).div_ceil(c.block_size));
            if need > usable {
                return Err(ConfigError::new(
                    field,
                    format!(
                        "a request of {max_total} tokens needs {need} KV blocks (for its {} computed tokens: the last one sampled takes none) but the whole pool has {usable} usable blocks ({} tokens): it could never finish; shorten the requests or give a larger pool (engine.num_gpu_blocks_override, kv_cache_tokens, kv_cache_memory_bytes or gpu_memory_utilization)",
                        max_total.saturating_sub(1),
                        c.kv_capacity_tokens()
                    ),
                ));
            }
        }
        EngineSpec::Sglang(c) => {
            // `TokenizerManager._validate_one_request` answers 400 to prompt + max_new_tokens >=
            // the context through 0.5.10, > it from 0.5.11 (read in the 0.4.10, 0.5.6, 0.5.10,
            // 0.5.11–0.5.23 wheels): a request that fills the context exactly is refused there.
            let fills = c.version < SGLANG_ACCEPTS_A_FULL_CONTEXT && max_total == c.context_length;
            if max_total > c.context_length || fills {
                let how = if fills { "fills" } else { "exceeds" };
                return Err(ConfigError::new(
                    field,
                    format!(
                        "a request of up to {max_prompt} prompt tokens and {total_words} total {how} engine.context_length {} (SGLang {} answers such a request with HTTP 400, which servesim does not model); shorten the requests or raise engine.context_length",
                        c.context_length, c.version
                    ),
                ));
            }
            // PrefillAdder admits iff prompt + min(max_new, 4096) (+ a page, from 0.5.11:
            // `SglangBehaviour::page_reserve_per_request`) < what is left.
            let max_new = max_total - max_prompt;
            let page = if c.behaviour.page_reserve_per_request { c.page_size } else { 0 };
            let need = u64::from(max_prompt) + u64::from(max_new.min(4096)) + u64::from(page);
            if need >= c.max_total_tokens {
                return Err(ConfigError::new(
                    field,
                    format!(
                        "a request of {max_prompt} prompt tokens reserving {} output tokens needs {need} KV tokens; the pool ({}) has {}: it could never be admitted; shorten the requests or give a larger pool (max_total_num_tokens, mem_fraction_static, or a max_total_tokens bound that binds raised)",
                        max_new.min(4096),
                        spec.kv_sizing.source,
                        c.max_total_tokens
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Largest max_tokens the workload can produce.
pub fn max_output_len(w: &WorkloadParams) -> u32 {
    match &w.dataset {
        Dataset::Random { output_len, range_ratio, .. } => (f64::from(*output_len) * (1.0 + range_ratio)).ceil() as u32,
        Dataset::PrefixRepetition { output_len, .. } => *output_len,
        Dataset::Trace { rows } => rows.iter().take(w.num_prompts as usize).map(|r| r.output_len).max().unwrap_or(0),
        Dataset::Requests { requests } => {
            requests.iter().take(w.num_prompts as usize).map(|r| r.output_len).max().unwrap_or(0)
        }
    }
}

/// Largest prompt and largest prompt + max_tokens the workload can produce (with the engine's cap
/// on the output where it has one, [`WorkloadParams::context_clamp`]: a prompt the context holds
/// then never passes it).
pub fn max_request_lengths(w: &WorkloadParams) -> (u32, u32) {
    let (p, t) = max_request_lengths_asked(w);
    match w.context_clamp {
        Some(m) if p < m => (p, t.min(m)),
        _ => (p, t),
    }
}

/// [`max_request_lengths`] as the requests ask, before any cap on their output.
fn max_request_lengths_asked(w: &WorkloadParams) -> (u32, u32) {
    match &w.dataset {
        Dataset::Random { input_len, output_len, range_ratio, prefix_len } => {
            // Saturating: a length past u32 is past any context, and the check then says so.
            // The server's BOS (`special_tokens`) and the prefix before the sampled part, which
            // is drawn around `input_len` less the BOS.
            let sampled = crate::workload::random_input_bounds(*input_len, *range_ratio, w.special_tokens).1;
            let i = sampled.saturating_add(*prefix_len).saturating_add(w.special_tokens);
            let o = (f64::from(*output_len) * (1.0 + range_ratio)).ceil() as u32;
            (i, i.saturating_add(o))
        }
        Dataset::PrefixRepetition { prefix_len, suffix_len, output_len, .. } => {
            let p = prefix_len.saturating_add(*suffix_len).saturating_add(w.special_tokens);
            (p, p.saturating_add(*output_len))
        }
        Dataset::Trace { rows } => rows
            .iter()
            .take(w.num_prompts as usize)
            .fold((0, 0), |(p, t), r| (p.max(r.input_len), t.max(r.input_len.saturating_add(r.output_len)))),
        Dataset::Requests { requests } => requests
            .iter()
            .take(w.num_prompts as usize)
            .fold((0, 0), |(p, t), r| (p.max(r.input_len), t.max(r.input_len.saturating_add(r.output_len)))),
    }
}
