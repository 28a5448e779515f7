//! The shipped trace samples (`data/traces/`) parse, and their requests carry
//! the fields, arrivals and prefix segments the formats define.

use sim::request::extend_block_hashes;
use sim::traces::{
    burstgpt_requests, mean_rate, mooncake_block_key, parse_azure, parse_burstgpt, parse_mooncake, parse_requests,
    rate_scale, time_scale, TraceFormat, MOONCAKE_BLOCK_TOKENS,
};

const MOONCAKE: &str = include_str!("../../data/traces/mooncake_sample.jsonl");
const AZURE_2023: &str = include_str!("../../data/traces/azure_conv_2023_sample.csv");
const AZURE_2024: &str = include_str!("../../data/traces/azure_code_2024_sample.csv");
const BURSTGPT: &str = include_str!("../../data/traces/burstgpt_sample.csv");

#[test]
fn mooncake_sample_parses_and_shared_hash_ids_share_block_keys_and_hashes() {
    let rows = parse_mooncake(MOONCAKE).unwrap();
    assert_eq!(rows.len(), 40);
    assert_eq!((rows[0].timestamp, rows[0].input_length, rows[0].output_length), (197.0, 1772, 144));
    assert_eq!(rows[0].hash_ids, [0, 1, 2, 12]);
    for r in &rows {
        assert_eq!(r.hash_ids.len() as u32, r.input_length.div_ceil(MOONCAKE_BLOCK_TOKENS), "{r:?}");
    }
    let reqs = parse_requests(TraceFormat::Mooncake, MOONCAKE, 42).unwrap();
    assert_eq!(reqs.len(), 40);
    assert_eq!(reqs[0].arrival_ns, 0, "offsets from the first row");
    assert_eq!(reqs[1].arrival_ns, (527 - 197) * 1_000_000);
    for (r, q) in rows.iter().zip(&reqs) {
        assert_eq!(q.prompt.iter().map(|s| s.len).sum::<u32>(), r.input_length);
        assert_eq!(q.prompt[0].key, mooncake_block_key(42, r.hash_ids[0]));
    }
    // Rows 0 and 1 start with ids 0, 1, 2: their first blocks share keys, and so share the
    // engines' block hashes (at vLLM's 16 tokens, over the 1024 tokens both hold in full).
    assert_eq!(rows[1].hash_ids[..3], rows[0].hash_ids[..3]);
    assert_eq!(reqs[0].prompt[..2], reqs[1].prompt[..2]);
    assert_eq!(reqs[0].prompt[2].key, reqs[1].prompt[2].key);
    let (a, b) = (reqs[0].to_spec(1), reqs[1].to_spec(2));
    let (mut ha, mut hb) = (vec![], vec![]);
    extend_block_hashes(&a, 16, a.prompt_len, &mut ha);
    extend_block_hashes(&b, 16, b.prompt_len, &mut hb);
    // Row 1 holds 466 tokens of block 2 (1490 − 1024): 29 more full 16-token blocks shared.
    assert_eq!(ha[..64 + 29], hb[..64 + 29]);
    assert_ne!(ha[64 + 29], hb.get(64 + 29).copied().unwrap_or(0));
    // A row starting with other ids shares nothing with row 0.
    let other = rows.iter().position(|r| r.hash_ids[0] != 0).unwrap();
    let mut ho = vec![];
    let o = reqs[other].to_spec(3);
    extend_block_hashes(&o, 16, o.prompt_len, &mut ho);
    assert_ne!(ho[0], ha[0]);
}

#[test]
fn azure_samples_parse_both_years() {
    for (text, first_ctx, first_gen) in [(AZURE_2023, 2440, 274), (AZURE_2024, 3492, 16)] {
        let rows = parse_azure(text).unwrap();
        assert_eq!(rows.len(), 30);
        assert_eq!((rows[0].context_tokens, rows[0].generated_tokens), (first_ctx, first_gen));
        assert!(rows.windows(2).all(|w| w[0].timestamp_ns <= w[1].timestamp_ns));
    }
    let reqs = parse_requests(TraceFormat::Azure, AZURE_2023, 0).unwrap();
    // 18:15:47.1372243 → 18:15:47.4294871.
    assert_eq!(reqs[1].arrival_ns, 292_262_800);
    assert!(reqs.iter().all(|r| r.prompt.len() == 1 && r.prompt[0].len == r.input_len));
    let keys: std::collections::BTreeSet<u64> = reqs.iter().map(|r| r.prompt[0].key).collect();
    assert_eq!(keys.len(), 30, "no prefix information: every prompt is its own");
}

#[test]
fn burstgpt_sample_parses_and_failures_are_left_out_of_the_requests() {
    let rows = parse_burstgpt(BURSTGPT).unwrap();
    assert_eq!(rows.len(), 40);
    let r0 = &rows[0];
    assert_eq!((r0.timestamp, r0.model.as_str(), r0.request_tokens, r0.response_tokens), (33.0, "ChatGPT", 517, 737));
    assert_eq!((r0.total_tokens, r0.log_type.as_str()), (1254, "API log"));
    assert_eq!(rows.iter().filter(|r| r.is_failure()).count(), 2);
    let reqs = burstgpt_requests(&rows, 5);
    assert_eq!(reqs.len(), 38);
    assert_eq!(reqs[1].arrival_ns, 20_000_000_000);
    assert!(reqs.iter().all(|r| r.output_len > 0));
}

#[test]
fn time_and_rate_scaling_keep_the_shape() {
    let mut reqs = parse_requests(TraceFormat::Burstgpt, BURSTGPT, 0).unwrap();
    let before: Vec<u64> = reqs.iter().map(|r| r.arrival_ns).collect();
    let rate = mean_rate(&reqs).unwrap();
    time_scale(&mut reqs, 2.0).unwrap();
    assert!(reqs.iter().zip(&before).all(|(r, &b)| r.arrival_ns == 2 * b));
    assert!((mean_rate(&reqs).unwrap() - rate / 2.0).abs() < 1e-9);
    let factor = rate_scale(&mut reqs, 10.0).unwrap();
    assert!((mean_rate(&reqs).unwrap() - 10.0).abs() < 1e-6, "{:?}", mean_rate(&reqs));
    assert!((factor - rate / 20.0).abs() < 1e-9);
    // Order and relative gaps are kept.
    assert!(reqs.windows(2).all(|w| w[0].arrival_ns <= w[1].arrival_ns));
}
