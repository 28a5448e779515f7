//! Production trace formats: text in, rows out, and rows as the simulator's requests.
//!
//! * **Mooncake** (`FAST25-release/traces/*.jsonl`, kvcache-ai/Mooncake): one
//!   JSON object per line, `timestamp` (ms from the trace start),
//!   `input_length`, `output_length`, `hash_ids`: each id names a block of
//!   [`MOONCAKE_BLOCK_TOKENS`] (512) prompt tokens; rows whose `hash_ids`
//!   start alike share that prefix.
//! * **Azure LLM inference traces** 2023 and 2024 (Azure/AzurePublicDataset):
//!   CSV with `TIMESTAMP` (a datetime such as `2023-11-16 18:15:46.6805900`),
//!   `ContextTokens`, `GeneratedTokens`.
//! * **BurstGPT** (HPMLL/BurstGPT): CSV with `Timestamp` (seconds from the
//!   trace start), `Model`, `Request tokens`, `Response tokens`,
//!   `Total tokens`, `Log Type`.
//!
//! Parsers are pure: `&str` in, rows or a [`TraceError`] naming the line and
//! column out. Columns are found by their header name, in any order; other
//! columns are ignored (CSV) and so are other keys (JSONL).
//!
//! [`TraceRequest`]s are the rows in the simulator's terms: arrival offset
//! from the first row, lengths, and the prompt as keyed [`Segment`]s. A
//! Mooncake row's prompt is one 512-token segment per hash id, keyed by the
//! id (so shared leading ids share block hashes in the engines' caches,
//! whatever their block size), then a unique tail if `input_length` runs past
//! the ids; the last id's segment is cut short when `input_length` ends
//! inside it (a cut segment's tokens are the first tokens of the full one, so
//! a row ending inside a block still shares what it holds of it). Azure and
//! BurstGPT rows carry no prefix information: one unique segment each.
//!
//! [`time_scale`] multiplies inter-arrival times by a factor;
//! [`rate_scale`] rescales them to a target mean request rate.

use std::fmt;

use crate::request::{RequestSpec, Segment};
use crate::rng::mix64;

/// Tokens per Mooncake hash id.
pub const MOONCAKE_BLOCK_TOKENS: u32 = 512;

/// A parse error: the 1-based line and column, and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}: {}", self.line, self.column, self.message)
    }
}

impl std::error::Error for TraceError {}

fn err(line: usize, column: usize, message: impl Into<String>) -> TraceError {
    TraceError { line, column, message: message.into() }
}

/// The trace formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceFormat {
    Mooncake,
    Azure,
    Burstgpt,
}

/// One row of a Mooncake trace.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct MooncakeRow {
    /// Milliseconds from the start of the trace.
    pub timestamp: f64,
    pub input_length: u32,
    pub output_length: u32,
    pub hash_ids: Vec<u64>,
}

/// One row of an Azure LLM inference trace.
#[derive(Clone, Debug, PartialEq)]
pub struct AzureRow {
    /// `TIMESTAMP` as nanoseconds since the Unix epoch (UTC).
    pub timestamp_ns: i128,
    pub context_tokens: u32,
    pub generated_tokens: u32,
}

/// One row of BurstGPT.
#[derive(Clone, Debug, PartialEq)]
pub struct BurstGptRow {
    /// Seconds from the start of the trace.
    pub timestamp: f64,
    pub model: String,
    pub request_tokens: u32,
    pub response_tokens: u32,
    pub total_tokens: u32,
    pub log_type: String,
}

impl BurstGptRow {
    /// BurstGPT marks a failed request by zero response tokens.
    pub fn is_failure(&self) -> bool {
        self.response_tokens == 0
    }
}

/// A trace row in the simulator's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRequest {
    /// Offset from the earliest row of the trace.
    pub arrival_ns: u64,
    pub input_len: u32,
    pub output_len: u32,
    /// Segments whose lengths sum to `input_len`.
    pub prompt: Vec<Segment>,
}

impl TraceRequest {
    /// The request as the client sends it (`max_tokens` = the trace's output
    /// length, generated in full), its output contents named by `output_key`.
    pub fn to_spec(&self, output_key: u64) -> RequestSpec {
        RequestSpec {
            prompt: self.prompt.clone(),
            prompt_len: self.input_len,
            max_tokens: self.output_len,
            output_len: self.output_len,
            output_key,
            arrival_ns: self.arrival_ns,
            priority: 0,
            ignore_eos: true,
            prompt_hashes: None,
        }
    }
}

// ---------------------------------------------------------------- Mooncake

/// Parses a Mooncake JSONL trace. Blank lines are skipped.
pub fn parse_mooncake(text: &str) -> Result<Vec<MooncakeRow>, TraceError> {
    // A UTF-8 byte-order mark first is not part of the first row (the CSV readers skip it too).
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row = mooncake_row(line).map_err(|(col, m)| err(i + 1, col, m))?;
        if !row.timestamp.is_finite() || row.timestamp < 0.0 {
            let col = line.find("\"timestamp\"").map_or(1, |c| c + 1);
            return Err(err(i + 1, col, format!("timestamp must be a finite number ≥ 0, got {}", row.timestamp)));
        }
        // Named at its line here (later checks count requests, not lines).
        for (key, v) in [("input_length", row.input_length), ("output_length", row.output_length)] {
            if v == 0 {
                let col = line.find(&format!("\"{key}\"")).map_or(1, |c| c + 1);
                return Err(err(i + 1, col, format!("{key} must be at least 1, got 0")));
            }
        }
        rows.push(row);
    }
    Ok(rows)
}

/// One Mooncake line, or the 1-based column and what is wrong there (naming the key).
fn mooncake_row(line: &str) -> Result<MooncakeRow, (usize, String)> {
    /// The four keys read (others ignored); a key given twice is an error (JSON would keep
    /// the last one silently), found in the same pass.
    #[derive(serde::Deserialize)]
    struct Raw {
        #[serde(default, deserialize_with = "present")]
        timestamp: Option<serde_json::Value>,
        #[serde(default, deserialize_with = "present")]
        input_length: Option<serde_json::Value>,
        #[serde(default, deserialize_with = "present")]
        output_length: Option<serde_json::Value>,
        #[serde(default, deserialize_with = "present")]
        hash_ids: Option<serde_json::Value>,
    }
    /// A key that is there, `null` included (`None`: the key is missing).
    fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
        <serde_json::Value as serde::Deserialize>::deserialize(d).map(Some)
    }
    let parsed = if line.trim_start().starts_with('{') {
        serde_json::from_str::<Raw>(line).map(Some)
    } else {
        // Not an object (a struct would also read a JSON array): valid JSON, or the error.
        serde_json::from_str::<serde::de::IgnoredAny>(line).map(|_| None)
    };
    let raw = parsed
        .map_err(|e| {
            // serde_json's message ends with its own "at line 1 column N" (of this one line): drop it.
            let msg = e.to_string();
            let msg =
                msg.strip_suffix(&format!(" at line {} column {}", e.line(), e.column())).unwrap_or(&msg).to_string();
            if let Some(key) = msg.strip_prefix("duplicate field `").and_then(|m| m.strip_suffix('`')) {
                return (e.column().max(1), format!("`{key}` given twice (JSON keeps only the last); give it once"));
            }
            (e.column().max(1), format!("not valid JSON (Mooncake traces are JSONL, one object per line): {msg}"))
        })?
        .ok_or_else(|| (1, "expected a JSON object".to_string()))?;
    let col = |key: &str| line.find(&format!("\"{key}\"")).map_or(1, |c| c + 1);
    fn field<T: serde::de::DeserializeOwned>(
        v: Option<serde_json::Value>,
        key: &str,
        want: &str,
        col: &dyn Fn(&str) -> usize,
    ) -> Result<T, (usize, String)> {
        let v = v.ok_or_else(|| (1, format!("missing key `{key}`")))?;
        T::deserialize(&v).map_err(|_| (col(key), format!("`{key}` must be {want}, got {v}")))
    }
    Ok(MooncakeRow {
        timestamp: field(raw.timestamp, "timestamp", "a number of milliseconds", &col)?,
        input_length: field(raw.input_length, "input_length", "a whole number ≥ 0", &col)?,
        output_length: field(raw.output_length, "output_length", "a whole number ≥ 0", &col)?,
        hash_ids: field(raw.hash_ids, "hash_ids", "a list of whole numbers ≥ 0", &col)?,
    })
}

/// Key of the Mooncake block `id` under `salt`.
pub fn mooncake_block_key(salt: u64, id: u64) -> u64 {
    mix64(salt ^ mix64(id ^ 0x6d6f_6f6e_6361_6b65))
}

/// The prompt of a Mooncake row: one [`MOONCAKE_BLOCK_TOKENS`]-token segment
/// per hash id keyed by [`mooncake_block_key`], the last cut to
/// `input_length`, then a tail keyed by `tail_key` for tokens past the ids.
pub fn mooncake_segments(row: &MooncakeRow, salt: u64, tail_key: u64) -> Vec<Segment> {
    let mut segs = Vec::with_capacity(row.hash_ids.len() + 1);
    let mut left = row.input_length;
    for &id in &row.hash_ids {
        if left == 0 {
            break;
        }
        let len = left.min(MOONCAKE_BLOCK_TOKENS);
        segs.push(Segment { key: mooncake_block_key(salt, id), len });
        left -= len;
    }
    if left > 0 {
        segs.push(Segment { key: tail_key, len: left });
    }
    segs
}

/// Mooncake rows as requests; `salt` keys the blocks and the tails (a run's
/// seed-derived key, so that two traces replayed together share nothing by accident).
pub fn mooncake_requests(rows: &[MooncakeRow], salt: u64) -> Vec<TraceRequest> {
    let t0 = rows.iter().map(|r| r.timestamp).fold(f64::INFINITY, f64::min);
    rows.iter()
        .enumerate()
        .map(|(i, r)| TraceRequest {
            arrival_ns: ms_to_ns(r.timestamp - t0),
            input_len: r.input_length,
            output_len: r.output_length,
            prompt: mooncake_segments(r, salt, unique_key(salt, i)),
        })
        .collect()
}

// ---------------------------------------------------------------- CSV

/// Every record of a CSV text (RFC 4180: quoted fields, doubled quotes,
/// commas and newlines inside quotes), header included; `\r` dropped. A
/// lenient whole-file reader for the repository's own data tables
/// (`data/published/`); traces go through the line-numbered reader below,
/// which names the line and column of a bad field.
pub fn csv_records(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, '\r') => {}
            (false, c) => field.push(c),
        }
    }
    if !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    rows
}

/// Splits one CSV record into fields with their 1-based start columns
/// (RFC 4180 quoting: `"a,b"` and `""` inside quotes).
fn csv_fields(line: &str, line_no: usize) -> Result<Vec<(String, usize)>, TraceError> {
    let mut out = Vec::new();
    let chars: Vec<char> = line.trim_end_matches('\r').chars().collect();
    let mut i = 0;
    loop {
        let start = i + 1;
        let mut field = String::new();
        if i < chars.len() && chars[i] == '"' {
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err(err(line_no, start, "unterminated quoted field")),
                    Some('"') if chars.get(i + 1) == Some(&'"') => {
                        field.push('"');
                        i += 2;
                    }
                    Some('"') => {
                        i += 1;
                        break;
                    }
                    Some(&c) => {
                        field.push(c);
                        i += 1;
                    }
                }
            }
            if i < chars.len() && chars[i] != ',' {
                return Err(err(line_no, i + 1, "unexpected character after a quoted field"));
            }
        } else {
            while i < chars.len() && chars[i] != ',' {
                field.push(chars[i]);
                i += 1;
            }
        }
        out.push((field, start));
        if i >= chars.len() {
            break;
        }
        i += 1; // the comma
    }
    Ok(out)
}

/// A CSV with a header: for each data line, the fields of the named columns.
struct Csv<'a> {
    text: &'a str,
}

impl<'a> Csv<'a> {
    /// Rows of `(line number, [(field, column)])` for the `wanted` columns, in that order.
    fn rows(&self, wanted: &[&str]) -> Result<Vec<(usize, Vec<(String, usize)>)>, TraceError> {
        let mut lines = self.text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
        let Some((hline, header)) = lines.next() else { return Ok(Vec::new()) };
        let header = csv_fields(header.trim_start_matches('\u{feff}'), hline + 1)?;
        let mut idx = Vec::with_capacity(wanted.len());
        for w in wanted {
            match header.iter().position(|(h, _)| h.trim() == *w) {
                Some(p) => idx.push(p),
                None => {
                    let names: Vec<&str> = header.iter().map(|(h, _)| h.as_str()).collect();
                    return Err(err(hline + 1, 1, format!("missing column `{w}` (header has {names:?})")));
                }
            }
        }
        let mut out = Vec::new();
        for (i, line) in lines {
            let fields = csv_fields(line, i + 1)?;
            if fields.len() != header.len() {
                let col = fields.last().map_or(1, |f| f.1);
                return Err(err(i + 1, col, format!("{} fields, the header has {}", fields.len(), header.len())));
            }
            out.push((i + 1, idx.iter().map(|&p| fields[p].clone()).collect()));
        }
        Ok(out)
    }
}

fn parse_u32(field: &(String, usize), line: usize, name: &str) -> Result<u32, TraceError> {
    let s = field.0.trim();
    // Some exports write counts as floats ("123.0").
    if let Ok(v) = s.parse::<u32>() {
        return Ok(v);
    }
    match s.parse::<f64>() {
        Ok(v) if v >= 0.0 && v.fract() == 0.0 && v <= f64::from(u32::MAX) => Ok(v as u32),
        _ => Err(err(line, field.1, format!("`{name}` must be a whole number ≥ 0, got {s:?}"))),
    }
}

fn parse_secs(field: &(String, usize), line: usize, name: &str) -> Result<f64, TraceError> {
    let s = field.0.trim();
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(err(line, field.1, format!("`{name}` must be a number of seconds ≥ 0, got {s:?}"))),
    }
}

// ---------------------------------------------------------------- Azure

/// Parses an Azure LLM inference trace (2023 or 2024).
pub fn parse_azure(text: &str) -> Result<Vec<AzureRow>, TraceError> {
    let csv = Csv { text };
    // Times without a UTC offset read as UTC: a file that mixes them with offset ones would
    // place rows hours apart (an audit, 2026-12-07: a +01:00 row landed 3,599 s early), so
    // every row must be as the first is.
    let first_zoned: std::cell::Cell<Option<(bool, usize)>> = std::cell::Cell::new(None);
    csv.rows(&["TIMESTAMP", "ContextTokens", "GeneratedTokens"])?
        .into_iter()
        .map(|(line, f)| {
            let t = f[0].0.trim();
            let timestamp_ns =
                parse_datetime(t).map_err(|m| err(line, f[0].1, format!("`TIMESTAMP` {:?}: {m}", f[0].0)))?;
            let zoned = has_utc_offset(t);
            match first_zoned.get() {
                None => first_zoned.set(Some((zoned, line))),
                Some((z, first)) if z != zoned => {
                    let (this, that) = if zoned { ("gives a", "gives none") } else { ("gives no", "gives one") };
                    return Err(err(
                        line,
                        f[0].1,
                        format!(
                            "`TIMESTAMP` {t:?} {this} UTC offset where line {first}'s {that}: a file mixing the two \
                             is read as UTC where none is given, which places its rows hours apart; give every time \
                             an offset (or none)"
                        ),
                    ));
                }
                Some(_) => {}
            }
            let row = AzureRow {
                timestamp_ns,
                context_tokens: parse_u32(&f[1], line, "ContextTokens")?,
                generated_tokens: parse_u32(&f[2], line, "GeneratedTokens")?,
            };
            for (k, name, v) in [(1, "ContextTokens", row.context_tokens), (2, "GeneratedTokens", row.generated_tokens)]
            {
                if v == 0 {
                    return Err(err(line, f[k].1, format!("`{name}` must be at least 1, got 0")));
                }
            }
            Ok(row)
        })
        .collect()
}

/// Whether a [`parse_datetime`] time names its zone (`Z` or `±HH:MM` last).
fn has_utc_offset(s: &str) -> bool {
    let b = s.as_bytes();
    s.ends_with('Z') || (b.len() >= 6 && matches!(b[b.len() - 6], b'+' | b'-') && b[b.len() - 3] == b':')
}

/// `YYYY-MM-DD[ T]HH:MM:SS[.fraction][Z|±HH:MM]` as nanoseconds since the Unix epoch.
pub fn parse_datetime(s: &str) -> Result<i128, String> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Result<i64, String> {
        let part = s.get(from..from + len).ok_or("too short")?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return Err(format!("expected digits at {}", from + 1));
        }
        part.parse::<i64>().map_err(|e| e.to_string())
    };
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b' ' || b[10] == b'T')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err("expected YYYY-MM-DD HH:MM:SS".into());
    }
    let (y, mo, d, h, mi, se) = (num(0, 4)?, num(5, 2)?, num(8, 2)?, num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&mo) || h > 23 || mi > 59 || se > 60 {
        return Err("date or time out of range".into());
    }
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][(mo - 1) as usize];
    if !(1..=month_days).contains(&d) {
        return Err(format!("day {d} out of range: {y:04}-{mo:02} has {month_days} days"));
    }
    let mut pos = 19;
    let mut frac_ns: i128 = 0;
    if b.get(pos) == Some(&b'.') {
        pos += 1;
        let start = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos == start {
            return Err("empty fraction of a second".into());
        }
        let digits = &s[start..pos.min(start + 9)];
        frac_ns = digits.parse::<i128>().map_err(|e| e.to_string())? * 10i128.pow(9 - digits.len() as u32);
    }
    let offset_s: i128 = match &s[pos..] {
        "" | "Z" => 0,
        tz if (tz.starts_with('+') || tz.starts_with('-')) && tz.len() == 6 && tz.as_bytes()[3] == b':' => {
            let hh = num(pos + 1, 2)?;
            let mm = num(pos + 4, 2)?;
            // UTC offsets in use run from −12:00 to +14:00.
            if mm > 59 || hh * 60 + mm > 14 * 60 {
                return Err(format!("UTC offset {tz} out of range (at most ±14:00, minutes below 60)"));
            }
            let sign = if tz.starts_with('-') { -1 } else { 1 };
            i128::from(sign * (hh * 3600 + mm * 60))
        }
        other => return Err(format!("unexpected {other:?} after the time")),
    };
    let days = days_from_civil(y, mo, d);
    let secs = i128::from(days) * 86_400 + i128::from(h * 3600 + mi * 60 + se) - offset_s;
    Ok(secs * 1_000_000_000 + frac_ns)
}

/// Days from 1970-01-01 to the proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Azure rows as requests, one unique segment each.
pub fn azure_requests(rows: &[AzureRow], salt: u64) -> Vec<TraceRequest> {
    let t0 = rows.iter().map(|r| r.timestamp_ns).min().unwrap_or(0);
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            let off = (r.timestamp_ns - t0).clamp(0, i128::from(u64::MAX)) as u64;
            unique_request(off, r.context_tokens, r.generated_tokens, unique_key(salt, i))
        })
        .collect()
}

// ---------------------------------------------------------------- BurstGPT

/// Parses a BurstGPT CSV.
pub fn parse_burstgpt(text: &str) -> Result<Vec<BurstGptRow>, TraceError> {
    let csv = Csv { text };
    csv.rows(&["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"])?
        .into_iter()
        .map(|(line, f)| {
            let row = BurstGptRow {
                timestamp: parse_secs(&f[0], line, "Timestamp")?,
                model: f[1].0.trim().to_string(),
                request_tokens: parse_u32(&f[2], line, "Request tokens")?,
                response_tokens: parse_u32(&f[3], line, "Response tokens")?,
                total_tokens: parse_u32(&f[4], line, "Total tokens")?,
                log_type: f[5].0.trim().to_string(),
            };
            // A failed request (no response tokens) is dropped later; a kept one needs a prompt.
            if row.request_tokens == 0 && !row.is_failure() {
                return Err(err(
                    line,
                    f[2].1,
                    "`Request tokens` must be at least 1 for a request that got a response, got 0",
                ));
            }
            if u64::from(row.request_tokens) + u64::from(row.response_tokens) != u64::from(row.total_tokens) {
                return Err(err(
                    line,
                    f[4].1,
                    format!(
                        "`Total tokens` {} is not `Request tokens` {} + `Response tokens` {}",
                        row.total_tokens, row.request_tokens, row.response_tokens
                    ),
                ));
            }
            Ok(row)
        })
        .collect()
}

/// BurstGPT rows as requests, one unique segment each; failed requests
/// (zero response tokens) are left out, as they generated nothing.
pub fn burstgpt_requests(rows: &[BurstGptRow], salt: u64) -> Vec<TraceRequest> {
    let kept: Vec<(usize, &BurstGptRow)> = rows.iter().enumerate().filter(|(_, r)| !r.is_failure()).collect();
    let t0 = kept.iter().map(|(_, r)| r.timestamp).fold(f64::INFINITY, f64::min);
    kept.into_iter()
        .map(|(i, r)| {
            unique_request(secs_to_ns(r.timestamp - t0), r.request_tokens, r.response_tokens, unique_key(salt, i))
        })
        .collect()
}

// ---------------------------------------------------------------- common

/// Parses `text` in `format` and returns its requests.
pub fn parse_requests(format: TraceFormat, text: &str, salt: u64) -> Result<Vec<TraceRequest>, TraceError> {
    Ok(match format {
        TraceFormat::Mooncake => mooncake_requests(&parse_mooncake(text)?, salt),
        TraceFormat::Azure => azure_requests(&parse_azure(text)?, salt),
        TraceFormat::Burstgpt => burstgpt_requests(&parse_burstgpt(text)?, salt),
    })
}

fn unique_key(salt: u64, row: usize) -> u64 {
    mix64(salt ^ mix64(row as u64 ^ 0x7472_6163_655f_726f))
}

fn unique_request(arrival_ns: u64, input_len: u32, output_len: u32, key: u64) -> TraceRequest {
    let prompt = if input_len > 0 { vec![Segment { key, len: input_len }] } else { Vec::new() };
    TraceRequest { arrival_ns, input_len, output_len, prompt }
}

fn secs_to_ns(s: f64) -> u64 {
    // Past u64 nanoseconds (or infinite) saturates, so that a range check after it refuses the
    // time (a far arrival read as 0 was sent at once); NaN and negatives are 0.
    let ns = (s * 1e9).round();
    if ns > 0.0 {
        ns as u64
    } else {
        0
    }
}

fn ms_to_ns(ms: f64) -> u64 {
    secs_to_ns(ms / 1e3)
}

/// Multiplies every inter-arrival time by `factor` (> 0): 2 stretches the
/// trace to twice its duration (half the rate), 0.5 compresses it. Arrivals
/// are offsets from the earliest, so each offset is multiplied.
pub fn time_scale(reqs: &mut [TraceRequest], factor: f64) -> Result<(), String> {
    if !factor.is_finite() || factor <= 0.0 {
        return Err(format!("time scale factor must be a finite number > 0, got {factor}"));
    }
    for r in reqs.iter_mut() {
        r.arrival_ns = secs_to_ns(r.arrival_ns as f64 * 1e-9 * factor);
    }
    Ok(())
}

/// Mean request rate of the trace: `(n − 1) / (last − first arrival)`, per
/// second; `None` with fewer than two requests or no spread.
pub fn mean_rate(reqs: &[TraceRequest]) -> Option<f64> {
    let first = reqs.iter().map(|r| r.arrival_ns).min()?;
    let last = reqs.iter().map(|r| r.arrival_ns).max()?;
    if reqs.len() < 2 || last == first {
        return None;
    }
    Some((reqs.len() - 1) as f64 / ((last - first) as f64 * 1e-9))
}

/// Time-scales the trace so that its mean rate ([`mean_rate`]) becomes
/// `rate` requests per second, keeping its burst shape; returns the factor applied.
pub fn rate_scale(reqs: &mut [TraceRequest], rate: f64) -> Result<f64, String> {
    let n = reqs.len();
    rate_scale_over(reqs, rate, n)
}

/// [`rate_scale`] with the mean rate measured over the first `kept` requests, the ones a run
/// replays (`workload.num_prompts` takes the first rows): the rate asked for is the replayed
/// load's, not the whole file's.
pub fn rate_scale_over(reqs: &mut [TraceRequest], rate: f64, kept: usize) -> Result<f64, String> {
    if !rate.is_finite() || rate <= 0.0 {
        return Err(format!("target rate must be a finite number > 0, got {rate}"));
    }
    let current = mean_rate(&reqs[..kept.min(reqs.len())])
        .ok_or("rate scaling needs at least two replayed requests at different times")?;
    let factor = current / rate;
    time_scale(reqs, factor)?;
    Ok(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Azure trace whose times mix UTC offsets with none is refused at the first row that
    /// differs from the first (its rows read hours apart until 2026-12-07); all with or all
    /// without one read.
    #[test]
    fn azure_times_with_and_without_an_offset_do_not_mix() {
        let h = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
        let e = parse_azure(&format!("{h}2023-11-16 18:15:47,10,2\n2023-11-16 18:15:48+01:00,10,2\n")).unwrap_err();
        assert!(e.to_string().contains("gives a UTC offset where line 2's gives none"), "{e}");
        let e = parse_azure(&format!("{h}2023-11-16 18:15:47Z,10,2\n2023-11-16 18:15:48,10,2\n")).unwrap_err();
        assert!(e.to_string().contains("gives no UTC offset where line 2's gives one"), "{e}");
        let rows =
            parse_azure(&format!("{h}2023-11-16 18:15:47+01:00,10,2\n2023-11-16 18:15:48-02:00,10,2\n")).unwrap();
        assert_eq!(rows[1].timestamp_ns - rows[0].timestamp_ns, 10_801_000_000_000);
        assert!(parse_azure(&format!("{h}2023-11-16 18:15:47.1,10,2\n2023-11-16 18:15:48,10,2\n")).is_ok());
    }

    #[test]
    fn mooncake_rows_parse_and_share_block_keys() {
        let text = "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 5, \"hash_ids\": [0, 1, 2]}\n\
                    \n\
                    {\"timestamp\": 250, \"input_length\": 600, \"output_length\": 7, \"hash_ids\": [0, 3], \"extra\": 1}\n";
        let rows = parse_mooncake(text).unwrap();
        assert_eq!(rows.len(), 2);
        let reqs = mooncake_requests(&rows, 9);
        assert_eq!(reqs[1].arrival_ns, 250_000_000);
        assert_eq!(reqs[0].prompt.iter().map(|s| s.len).collect::<Vec<_>>(), [512, 512, 76]);
        assert_eq!(reqs[0].prompt[0].key, reqs[1].prompt[0].key);
        assert_ne!(reqs[0].prompt[1].key, reqs[1].prompt[1].key);
        assert_eq!(reqs[1].prompt.iter().map(|s| s.len).sum::<u32>(), 600);
        // Longer than the ids: a unique tail.
        let long = MooncakeRow { timestamp: 0.0, input_length: 600, output_length: 1, hash_ids: vec![4] };
        let segs = mooncake_segments(&long, 9, 77);
        assert_eq!(segs, [Segment { key: mooncake_block_key(9, 4), len: 512 }, Segment { key: 77, len: 88 }]);
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = parse_mooncake("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}\n{\"timestamp\": 1, \"input_length\": \"x\"}")
            .unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.column > 1, "{e}");
        let e = parse_azure(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,12,3\n2023-11-16 18:15:47,1x,3\n",
        )
        .unwrap_err();
        assert_eq!((e.line, e.column), (3, 21), "{e}");
        let e = parse_azure("TIMESTAMP,Context\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.message.contains("ContextTokens"), "{e}");
        let e = parse_burstgpt(
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,10,20,31,Conversation log\n",
        )
        .unwrap_err();
        assert_eq!((e.line, e.column), (2, 17), "{e}");
        assert!(format!("{e}").starts_with("line 2, column 17: "));
        // A zero length is named at its own line: the later check counted requests, after
        // failed BurstGPT rows and blank Mooncake lines were dropped (it said trace[0] of line 3).
        let e = parse_burstgpt(
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n10,ChatGPT,517,0,517,API log\n12,ChatGPT,0,814,814,API log\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.contains("Request tokens"), "{e}");
        let e = parse_mooncake("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}\n\n{\"timestamp\": 1, \"input_length\": 0, \"output_length\": 1, \"hash_ids\": []}")
            .unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.starts_with("input_length must be at least 1"), "{e}");
        let e = parse_azure("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,12,0\n").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        assert!(e.message.contains("GeneratedTokens"), "{e}");
    }

    #[test]
    fn datetimes_parse_to_epoch_nanoseconds() {
        assert_eq!(parse_datetime("1970-01-01 00:00:00").unwrap(), 0);
        assert_eq!(parse_datetime("1970-01-02T00:00:01.5Z").unwrap(), 86_401_500_000_000);
        assert_eq!(
            parse_datetime("2023-11-16 18:15:46.6805900").unwrap(),
            1_700_158_546_680_590_000,
            "7 fractional digits as Azure writes them"
        );
        assert_eq!(
            parse_datetime("2024-05-10 02:00:00+02:00").unwrap(),
            parse_datetime("2024-05-10 00:00:00").unwrap()
        );
        assert!(parse_datetime("2024-13-10 00:00:00").is_err());
        // Days past the month's end, and offsets no zone has, are errors (not the next month).
        for bad in [
            "2024-02-30 00:00:00",
            "2024-04-31 00:00:00",
            "2023-02-29 00:00:00",
            "2024-01-01 00:00:00+99:00",
            "2024-01-01 00:00:00-10:99",
            "2024-01-01 00:00:00+14:30",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
        for good in
            ["2024-02-29 00:00:00", "2000-02-29 00:00:00", "2024-12-31 23:59:59-12:00", "2024-06-30 00:00:00+14:00"]
        {
            assert!(parse_datetime(good).is_ok(), "{good}");
        }
        assert!(parse_datetime("1900-02-29 00:00:00").is_err());
        assert!(parse_datetime("yesterday").is_err());
    }

    #[test]
    fn csv_quotes_and_scaling() {
        let f = csv_fields("a,\"b,c\",\"d\"\"e\",", 1).unwrap();
        let v: Vec<&str> = f.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(v, ["a", "b,c", "d\"e", ""]);
        assert_eq!(f[1].1, 3);
        let mut reqs: Vec<TraceRequest> =
            [0u64, 1_000_000_000, 3_000_000_000].iter().map(|&a| unique_request(a, 1, 1, 0)).collect();
        assert_eq!(mean_rate(&reqs), Some(2.0 / 3.0));
        time_scale(&mut reqs, 0.5).unwrap();
        assert_eq!(reqs.iter().map(|r| r.arrival_ns).collect::<Vec<_>>(), [0, 500_000_000, 1_500_000_000]);
        let f = rate_scale(&mut reqs, 4.0).unwrap();
        assert!((f - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(reqs[2].arrival_ns, 500_000_000);
        assert!(time_scale(&mut reqs, 0.0).is_err());
        assert!(rate_scale(&mut reqs[..1], 1.0).is_err());
        // Over the first requests only (the ones a run replays): arrivals 0, 1/6 and 1/2 s; the
        // first two at 1 request a second are a second apart.
        assert!(rate_scale_over(&mut reqs, 1.0, 1).is_err(), "one replayed request has no rate");
        rate_scale_over(&mut reqs, 1.0, 2).unwrap();
        assert_eq!(reqs[1].arrival_ns, 1_000_000_000);
    }
}
