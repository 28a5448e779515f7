//! The scenario format: the JSON schema of a scenario file, strict and versioned.
//! Field names are a contract (they follow the engines' flags in snake case).

use super::*;

/// Which engine a scenario models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    Vllm,
    Sglang,
}

/// Declares one engine's own flags of the `engine` section, in the engine's file
/// (`vllm.rs`: [`VllmFlags`], `sglang.rs`: [`SglangFlags`]): one line per flag, its
/// snake-case name, its type and its doc (with serde attributes if any). Every flag is
/// optional (unset: the engine's default, given where the engine resolves it, in the
/// same file). The macro makes the struct, its names in order
/// (`NAMES`: the strict section's field list, and the foreign-flag check of
/// `flags.rs`), [`is_set`](VllmFlags::is_set) and the readers the strict
/// [`EngineSection`] deserializer calls. A line's serde attributes apply when the section
/// is written back to JSON (`fleet.rs` merges a replica group's `engine` over it).
macro_rules! engine_flags {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$attr:meta])* $field:ident : $ty:ty, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, ::serde::Serialize)]
        pub struct $name {
            $( $(#[$attr])* pub $field: Option<$ty>, )+
        }

        impl $name {
            /// The flags' names, in the order the section lists them.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($field)),+];

            /// Whether the scenario sets `flag`.
            pub fn is_set(&self, flag: &str) -> bool {
                match flag {
                    $(stringify!($field) => self.$field.is_some(),)+
                    _ => false,
                }
            }

            /// Reads the value of `flag` (one of [`Self::NAMES`]); false for another name.
            pub(super) fn read_value<'de, A: ::serde::de::MapAccess<'de>>(
                &mut self,
                flag: &str,
                map: &mut A,
            ) -> std::result::Result<bool, A::Error> {
                match flag {
                    $(stringify!($field) => {
                        self.$field = if $crate::config::schema::HUMAN_READABLE_INT_FLAGS.contains(&flag) {
                            map.next_value::<$crate::config::schema::HumanReadable<$ty>>()?.0
                        } else {
                            map.next_value()?
                        }
                    })+
                    _ => return Ok(false),
                }
                Ok(true)
            }

            /// Reads the flags in order from a sequence, as a derived struct does; false
            /// when the sequence ended first (the rest stay unset).
            pub(super) fn read_seq<'de, A: ::serde::de::SeqAccess<'de>>(
                &mut self,
                seq: &mut A,
            ) -> std::result::Result<bool, A::Error> {
                $(
                    match seq.next_element()? {
                        Some(v) => self.$field = v,
                        None => return Ok(false),
                    }
                )+
                Ok(true)
            }
        }
    };
}
pub(super) use engine_flags;

/// The vLLM flags `vllm serve` parses with `human_readable_int` (`vllm/engine/arg_utils.py`):
/// `--max-num-batched-tokens`, `--max-model-len` and `--kv-cache-memory-bytes` take `8k` or
/// `8G` as well as a number, and so do these fields, as a string.
pub const HUMAN_READABLE_INT_FLAGS: &[&str] = &["max_num_batched_tokens", "max_model_len", "kv_cache_memory_bytes"];

/// A flag of [`HUMAN_READABLE_INT_FLAGS`] as the section reads it: a string goes through
/// [`human_readable_int`], then the value is the flag's type (errors raised inside the value,
/// so they carry the field's path).
pub struct HumanReadable<T>(pub Option<T>);

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for HumanReadable<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        let v = human_readable_int(serde_json::Value::deserialize(d)?).map_err(D::Error::custom)?;
        serde_json::from_value::<Option<T>>(v).map(HumanReadable).map_err(D::Error::custom)
    }
}

/// vLLM's `human_readable_int` on a string value (any other value is returned as it is, for
/// the field's own type to judge): after trimming, a number and one suffix, `k m g t`
/// decimal (×10³ⁿ, decimals allowed: `int(float(number) * mult)`, which truncates) or
/// `K M G T` binary (×2¹⁰ⁿ, whole numbers only, as vLLM refuses `1.5G`); otherwise a plain
/// integer as Python's `int` reads one (a sign, `_` between digits). Releases before the
/// `t`/`T` entries refused those two suffixes; servesim takes them. A string that is none of
/// these is an error saying what vLLM accepts.
pub fn human_readable_int(v: serde_json::Value) -> std::result::Result<serde_json::Value, String> {
    let serde_json::Value::String(raw) = &v else { return Ok(v) };
    let s = raw.trim();
    let expected = || {
        format!(
            "{raw:?} is not an integer as vLLM reads this flag (human_readable_int): a whole number, or a \
             number with one suffix, k m g t (×1000, ×1000², …; decimals allowed: 25.6k) or K M G T \
             (×1024, ×1024², …; whole numbers only: 8G)"
        )
    };
    let too_big = || format!("{raw:?} is past the largest integer this flag takes");
    let number = |n: u128| u64::try_from(n).map(serde_json::Value::from).map_err(|_| too_big());
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if let Some(suffix) = s.chars().last().filter(|c| "kmgtKMGT".contains(*c)) {
        let num = &s[..s.len() - 1];
        let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
        if digits(whole) && (frac.is_empty() || digits(frac)) && !num.ends_with('.') {
            let pos = "kmgt".find(suffix.to_ascii_lowercase()).expect("one of kmgt") as i32 + 1;
            if suffix.is_ascii_lowercase() {
                let f: f64 = num.parse().map_err(|_| expected())?;
                let x = (f * [1e3, 1e6, 1e9, 1e12][pos as usize - 1]).trunc();
                return if x < 2f64.powi(64) { number(x as u128) } else { Err(too_big()) };
            }
            if !frac.is_empty() {
                return Err(format!(
                    "{raw:?}: decimals are not allowed with binary suffixes like {suffix} (vLLM's \
                     human_readable_int); did you mean {num}{}?",
                    suffix.to_ascii_lowercase()
                ));
            }
            let n: u128 = whole.parse().map_err(|_| expected())?;
            return n.checked_mul(1u128 << (10 * pos)).map_or_else(|| Err(too_big()), number);
        }
        return Err(expected());
    }
    // Python's int(): an optional sign, digits with single underscores between them.
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if body.split('_').all(digits) {
        let n: u128 = body.replace('_', "").parse().map_err(|_| too_big())?;
        return if neg {
            i64::try_from(n).map(|n| serde_json::Value::from(-n)).map_err(|_| expected())
        } else {
            number(n)
        };
    }
    Err(expected())
}

/// The `engine` section: the engine's flags in snake case. Strict: an unknown field is an
/// error listing [`ENGINE_FIELDS`]. Each engine's own flags are declared in its file
/// ([`VllmFlags`] in `vllm.rs`, [`SglangFlags`] in `sglang.rs`) and written flat in the
/// section; the fields here are those of both engines and the data-parallel ones
/// (resolved in `fleet.rs`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EngineSection {
    pub kind: Option<EngineKind>,
    /// Engine release whose behaviour is modelled (`0.28.0`).
    pub version: Option<String>,
    /// vLLM's flags (`config/vllm.rs`).
    #[serde(flatten)]
    pub vllm: VllmFlags,
    // ---- both engines ----
    /// `--kv-cache-dtype`: `auto` (the model's dtype), `bfloat16`, `float16`, `fp8`, `fp8_e4m3`, `fp8_e5m2`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache_dtype: Option<String>,
    /// `--quantization`: `fp8` (weights quantized to fp8 at load); the model card's own
    /// `quantization` applies when this is absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantization: Option<String>,
    /// `--attention-backend`, in each engine's own words: vLLM `FLASH_ATTN`, `FLASHINFER`,
    /// `TRITON_ATTN`, `FLEX_ATTENTION` (the flag from 0.13, `VLLM_ATTENTION_BACKEND` before);
    /// SGLang `fa3`, `flashinfer`, `triton`, `trtllm_mha`. Unset: the engine's default for the
    /// release and GPU. Which lane of the kernel tables times attention, and SGLang's page size
    /// (`vllm.rs`, `sglang.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention_backend: Option<String>,
    /// SGLang's flags (`config/sglang.rs`).
    #[serde(flatten)]
    pub sglang: SglangFlags,
    // ---- data parallelism inside one engine (`docs/fleets.md`, `fleet.rs`) ----
    /// vLLM `--data-parallel-size`: that many engine cores behind one API server, balanced
    /// by the engine-core client (least `4 × waiting + running`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_parallel_size: Option<u32>,
    /// SGLang `--dp-size`: that many schedulers behind one tokenizer manager, dispatched by
    /// the `DataParallelController`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dp_size: Option<u32>,
    /// SGLang `--load-balance-method`: `round_robin` (default) or `shortest_queue`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_balance_method: Option<String>,
}

/// The fields of the `engine` section before vLLM's flags, between vLLM's and SGLang's
/// (both engines'), and after SGLang's (data parallelism).
const ENGINE_HEAD: &[&str] = &["kind", "version"];
const ENGINE_BOTH: &[&str] = &["kv_cache_dtype", "quantization", "attention_backend"];
const ENGINE_TAIL: &[&str] = &["data_parallel_size", "dp_size", "load_balance_method"];
const ENGINE_PARTS: [&[&str]; 5] = [ENGINE_HEAD, VllmFlags::NAMES, ENGINE_BOTH, SglangFlags::NAMES, ENGINE_TAIL];

/// Every field of the `engine` section, in order (an unknown field's error lists them).
pub static ENGINE_FIELDS: [&str; engine_fields_len()] = engine_fields();

const fn engine_fields_len() -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < ENGINE_PARTS.len() {
        n += ENGINE_PARTS[i].len();
        i += 1;
    }
    n
}

const fn engine_fields() -> [&'static str; engine_fields_len()] {
    let mut out = [""; engine_fields_len()];
    let (mut i, mut k) = (0, 0);
    while i < ENGINE_PARTS.len() {
        let mut j = 0;
        while j < ENGINE_PARTS[i].len() {
            out[k] = ENGINE_PARTS[i][j];
            j += 1;
            k += 1;
        }
        i += 1;
    }
    out
}

/// The strict reading of the `engine` section, as `#[derive(Deserialize)]` with
/// `deny_unknown_fields` reads a flat struct of [`ENGINE_FIELDS`] (the same errors, at
/// the same paths): each engine's flags are read by its own table.
impl<'de> Deserialize<'de> for EngineSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::{DeserializeSeed, Error, MapAccess, SeqAccess, Visitor};

        /// A field name of the section; another name is the unknown-field error, raised
        /// while the key is read so that its path names the key.
        struct FieldName;
        impl<'de> DeserializeSeed<'de> for FieldName {
            type Value = &'static str;
            fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<&'static str, D::Error> {
                d.deserialize_identifier(self)
            }
        }
        impl Visitor<'_> for FieldName {
            type Value = &'static str;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("field identifier")
            }
            fn visit_str<E: Error>(self, v: &str) -> std::result::Result<&'static str, E> {
                ENGINE_FIELDS.iter().copied().find(|f| *f == v).ok_or_else(|| E::unknown_field(v, &ENGINE_FIELDS))
            }
        }

        /// After `kind`: the rest in order, until the sequence ends.
        fn read_rest<'de, A: SeqAccess<'de>>(e: &mut EngineSection, seq: &mut A) -> std::result::Result<(), A::Error> {
            let Some(v) = seq.next_element()? else { return Ok(()) };
            e.version = v;
            if !e.vllm.read_seq(seq)? {
                return Ok(());
            }
            let Some(v) = seq.next_element()? else { return Ok(()) };
            e.kv_cache_dtype = v;
            let Some(v) = seq.next_element()? else { return Ok(()) };
            e.quantization = v;
            let Some(v) = seq.next_element()? else { return Ok(()) };
            e.attention_backend = v;
            if !e.sglang.read_seq(seq)? {
                return Ok(());
            }
            let Some(v) = seq.next_element()? else { return Ok(()) };
            e.data_parallel_size = v;
            let Some(v) = seq.next_element()? else { return Ok(()) };
            e.dp_size = v;
            let Some(v) = seq.next_element()? else { return Ok(()) };
            e.load_balance_method = v;
            Ok(())
        }

        struct Section;
        impl<'de> Visitor<'de> for Section {
            type Value = EngineSection;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("struct EngineSection")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<EngineSection, A::Error> {
                let mut e = EngineSection::default();
                while let Some(key) = map.next_key_seed(FieldName)? {
                    match key {
                        "kind" => e.kind = map.next_value()?,
                        "version" => e.version = map.next_value()?,
                        "kv_cache_dtype" => e.kv_cache_dtype = map.next_value()?,
                        "quantization" => e.quantization = map.next_value()?,
                        "attention_backend" => e.attention_backend = map.next_value()?,
                        "data_parallel_size" => e.data_parallel_size = map.next_value()?,
                        "dp_size" => e.dp_size = map.next_value()?,
                        "load_balance_method" => e.load_balance_method = map.next_value()?,
                        flag => {
                            let read = e.vllm.read_value(flag, &mut map)? || e.sglang.read_value(flag, &mut map)?;
                            debug_assert!(read, "{flag} is in ENGINE_FIELDS");
                        }
                    }
                }
                Ok(e)
            }
            /// The fields in order, as a derived struct reads an array (`kind` is required there).
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<EngineSection, A::Error> {
                let mut e = EngineSection::default();
                let expected = format!("struct EngineSection with {} elements", ENGINE_FIELDS.len());
                e.kind = seq.next_element()?.ok_or_else(|| A::Error::invalid_length(0, &expected.as_str()))?;
                read_rest(&mut e, &mut seq)?;
                Ok(e)
            }
        }

        d.deserialize_struct("EngineSection", &ENGINE_FIELDS, Section)
    }
}

/// `request_rate`: a number of requests per second, or `"inf"`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestRate(pub Option<f64>);

impl Serialize for RequestRate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self.0 {
            Some(r) => s.serialize_f64(r),
            None => s.serialize_str("inf"),
        }
    }
}

impl<'de> Deserialize<'de> for RequestRate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = RequestRate;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a positive number of requests per second, or \"inf\"")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<RequestRate, E> {
                if v.is_infinite() && v > 0.0 {
                    Ok(RequestRate(None))
                } else if v > 0.0 && v.is_finite() {
                    Ok(RequestRate(Some(v)))
                } else {
                    Err(E::custom(format!("must be > 0 requests per second or \"inf\" (got {v})")))
                }
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<RequestRate, E> {
                self.visit_f64(v as f64)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<RequestRate, E> {
                self.visit_f64(v as f64)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<RequestRate, E> {
                match v {
                    "inf" | "Infinity" | "infinity" => Ok(RequestRate(None)),
                    _ => v
                        .parse::<f64>()
                        .map_err(|_| E::custom(format!("expected a number or \"inf\", got {v:?}")))
                        .and_then(|x| self.visit_f64(x)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// `burstiness`: a number, or `"inf"` (also `"Infinity"`, as Python writes it) for fixed gaps;
/// `null` for the default.
fn burstiness<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<f64>, D::Error> {
    // Read as any JSON value, so that another type is said in the field's own words (an untagged
    // enum's error named the enum: "data did not match any variant of untagged enum B").
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_f64()
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("expected a number or \"inf\", got {n}"))),
        Some(Value::String(t)) => match t.as_str() {
            "inf" | "Infinity" | "infinity" => Ok(Some(f64::INFINITY)),
            _ => Err(serde::de::Error::custom(format!("expected a number or \"inf\", got {t:?}"))),
        },
        Some(other) => Err(serde::de::Error::custom(format!("expected a number or \"inf\", got {other}"))),
    }
}

/// The dataset generator (`--dataset-name`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatasetName {
    Random,
    PrefixRepetition,
    Trace,
}

/// Limits on the `workload` section, stated in every error that enforces them.
/// They bound a run's time and memory by its work: a run stores each timed
/// request's token times (8 bytes a token), so the output tokens of a run are
/// capped, and simulated time (`u64` nanoseconds, 584 years) must not overflow.
pub const MAX_NUM_PROMPTS: u32 = 10_000_000;
/// Warm-up requests (each resends the first prompt).
pub const MAX_NUM_WARMUPS: u32 = 100_000;
/// `max_concurrency`.
pub const MAX_CONCURRENCY: u32 = 1_000_000;
/// Requests per second: a finite rate above this is indistinguishable from `inf`.
pub const MAX_REQUEST_RATE: f64 = 1e9;
/// The smallest finite rate: the last request is sent at `num_prompts / rate`
/// seconds, which must stay within [`MAX_ARRIVAL_TIME_S`].
pub const MIN_REQUEST_RATE: f64 = 1e-6;
/// A send time (a trace's `arrival_time`, or `num_prompts / request_rate`): one year.
pub const MAX_ARRIVAL_TIME_S: f64 = 365.0 * 86_400.0;
/// Output tokens of a run (`num_prompts` × the largest output length): 4 GB of token times.
pub const MAX_TOTAL_OUTPUT_TOKENS: u64 = 500_000_000;

/// The `workload` section: `vllm bench serve`'s flags in snake case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSection {
    pub dataset_name: DatasetName,
    /// `vllm bench serve --endpoint`: `/v1/completions` (the default) or `/v1/chat/completions`
    /// (`--backend openai-chat`). Only vLLM 0.11.0's front end prices them differently
    /// (`docs/front-end.md`).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Prompts are sent as token ids, not text, so the server does not tokenize them (SGLang's
    /// serial tokenizer is skipped): what `servesim bench` sends on `/v1/completions`, and
    /// `sglang.bench_serving --tokenize-prompt` on its native backend; `vllm bench serve` and
    /// `sglang.bench_serving` send text by default. Not with the chat endpoint (text messages).
    #[serde(default)]
    pub tokenize_prompt: Option<bool>,
    #[serde(default)]
    pub random_input_len: Option<u32>,
    #[serde(default)]
    pub random_output_len: Option<u32>,
    #[serde(default)]
    pub random_range_ratio: Option<f64>,
    #[serde(default)]
    pub random_prefix_len: Option<u32>,
    #[serde(default)]
    pub prefix_repetition_prefix_len: Option<u32>,
    #[serde(default)]
    pub prefix_repetition_suffix_len: Option<u32>,
    #[serde(default)]
    pub prefix_repetition_num_prefixes: Option<u32>,
    #[serde(default)]
    pub prefix_repetition_output_len: Option<u32>,
    #[serde(default)]
    pub num_prompts: Option<u32>,
    #[serde(default)]
    pub num_warmups: Option<u32>,
    /// Send the run's first N prompts in the warm-up phase first: an earlier run on the same
    /// server that used the same prompts (`sim::workload`).
    #[serde(default)]
    pub prior_run_prompts: Option<u32>,
    /// Send the shared prefixes (`prefix_group`, `prefix_len`) of the trace's first N rows in the
    /// warm-up phase first, each alone: an earlier run on the same server whose prompts were the
    /// starts of this run's (`sim::workload`).
    #[serde(default)]
    pub prior_run_prefixes: Option<u32>,
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    /// A closed loop whose `max_concurrency` users start one after another: user k (from 0)
    /// sends its first request at `k · concurrency_ramp_s / max_concurrency` seconds and each
    /// next one as soon as its last ends (a steady-state client such as llmbench's `ramp_s`;
    /// `vllm bench serve`'s `--ramp-up-*` flags ramp a request *rate* instead). Needs
    /// `max_concurrency` and an infinite `request_rate`; seconds from 0 to one year.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_ramp_s: Option<f64>,
    /// Measure only the requests whose last token arrives in a window that opens this many
    /// seconds after the timed phase starts (a warm-up the statistics skip); with
    /// `window_duration_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_start_s: Option<f64>,
    /// The measured window's length, seconds: the statistics cover the requests completed in
    /// it, the throughputs divide what it saw (requests completed, output tokens streamed in
    /// it, input tokens of the completed requests) by its length. The run's prompts must
    /// outlast it (an error says so where they do not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_duration_s: Option<f64>,
    #[serde(default)]
    pub request_rate: Option<RequestRate>,
    /// A number, or `"inf"` (fixed gaps of 1 / rate: `vllm bench serve --burstiness inf`).
    #[serde(default, deserialize_with = "burstiness")]
    pub burstiness: Option<f64>,
    /// The benchmark client the scenario models, whose rule its send times at a finite rate
    /// follow: `vllm_bench_serve` (the default, whatever the engine: gaps rescaled so the last
    /// request is due at `num_prompts / request_rate`) or `sglang_bench_serving` (the first
    /// request at once, then unscaled exponential gaps; no `burstiness`). docs/benchmark.md §2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<crate::workload::BenchClient>,
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Where EOS ends outputs when `ignore_eos` is false.
    #[serde(default)]
    pub output_len_dist: Option<OutputLenDist>,
    /// Send `vllm bench serve`'s initial test request (the first prompt) before the run.
    #[serde(default)]
    pub initial_test_request: Option<bool>,
    #[serde(default)]
    pub seed: Option<u64>,
    /// Path of a CSV or JSONL trace (read by the command line, relative to the scenario file).
    #[serde(default)]
    pub trace: Option<String>,
    /// The trace's format: `csv` or `jsonl` (servesim's rows; the default, told by the
    /// file's extension), or a production trace: `mooncake`, `azure`, `burstgpt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_format: Option<TraceFileFormat>,
    /// Multiplies every inter-arrival time of the trace (2: half the rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_time_scale: Option<f64>,
    /// Rescales the trace's arrivals to this mean rate (requests per second), keeping its shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_rate: Option<f64>,
}

/// `workload.trace_format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceFileFormat {
    Csv,
    Jsonl,
    Mooncake,
    Azure,
    Burstgpt,
}

/// The `cost` section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostSection {
    /// A fitted profile (JSON, from `servesim calibrate`), relative to the scenario file.
    #[serde(default)]
    pub profile: Option<String>,
    /// Coefficients set by hand; they override the profile and the prior.
    #[serde(default)]
    pub coefficients: Option<CostCoefficients>,
    /// Efficiency factors of the roofline prior.
    #[serde(default)]
    pub prior: Option<PriorEfficiencies>,
    /// The engine runs this many times faster than the rest of the scenario says (default 1):
    /// the prior, the composed cost and the inline coefficients are divided by it, as
    /// `servesim serve --time-scale` runs its engine (`cost::CostModel::scale_time`; a profile's
    /// coefficients are its own scale's, docs/calibration.md). From 0.001 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_scale: Option<f64>,
}

/// A section given as `null`: the section left out.
fn null_is_default<'de, D: serde::Deserializer<'de>, T: Deserialize<'de> + Default>(
    d: D,
) -> std::result::Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub version: u32,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    pub engine: EngineSection,
    /// A card id from `models/model/`, or an inline card.
    pub model: Value,
    /// A card id from `models/gpu/`, or an inline card.
    pub hardware: Value,
    pub workload: WorkloadSection,
    /// `null` is the section left out (the default cost), as `fleet: null` is no fleet.
    #[serde(default, deserialize_with = "null_is_default")]
    pub cost: CostSection,
    /// Several engine replicas behind a router (`docs/fleets.md`); absent: one engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<super::fleet::FleetSection>,
}

/// Deserializes strictly, reporting the path of the first bad field; a struct given as an array
/// is an error naming it (serde would read its fields by position: [`super::strict`]).
pub fn from_value<T: serde::de::DeserializeOwned>(v: Value, prefix: &str) -> Result<T> {
    serde_path_to_error::deserialize(super::strict::Strict(v)).map_err(|e| {
        let inner = e.path().to_string();
        let path = match (prefix.is_empty(), inner.as_str()) {
            (true, _) => inner.clone(),
            (false, ".") => prefix.to_string(),
            (false, _) => format!("{prefix}.{inner}"),
        };
        let path = if path == "." { String::new() } else { path };
        ConfigError::new(path, plain_serde_message(&e.into_inner().to_string()))
    })
}

/// A serde message in the scenario's words: the Rust type a section is read into means nothing
/// to a user ("expected struct EngineSection", "expected internally tagged enum RouterSpec"):
/// said as the JSON it expects.
fn plain_serde_message(m: &str) -> String {
    let mut out = m.to_string();
    for (from, to) in
        [("expected struct ", "expected an object"), ("expected internally tagged enum ", "expected an object")]
    {
        while let Some(i) = out.find(from) {
            let rest = &out[i + from.len()..];
            let name_len = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
            out = format!("{}{to}{}", &out[..i], &rest[name_len..]);
        }
    }
    out
}

/// A key given twice in one object is an error naming it: JSON parsers keep the last one, so
/// `"num_prompts": 40, ..., "num_prompts": 5` ran 5 prompts without a word.
pub fn no_duplicate_keys(text: &str) -> std::result::Result<(), String> {
    use serde::de::{DeserializeSeed, Deserializer, Error, MapAccess, SeqAccess, Visitor};
    use std::result::Result;
    struct Check(String);
    impl<'de> DeserializeSeed<'de> for Check {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Check {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_bool<E: Error>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E: Error>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E: Error>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E: Error>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E: Error>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E: Error>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
            let mut i = 0;
            while a.next_element_seed(Check(format!("{}[{i}]", self.0)))?.is_some() {
                i += 1;
            }
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
            let mut seen = std::collections::BTreeSet::new();
            while let Some(k) = m.next_key::<String>()? {
                let path = if self.0.is_empty() { k.clone() } else { format!("{}.{k}", self.0) };
                if !seen.insert(k) {
                    return Err(A::Error::custom(format!(
                        "{path}: given twice in one object (JSON keeps only the last); give it once"
                    )));
                }
                m.next_value_seed(Check(path))?;
            }
            Ok(())
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    Check(String::new()).deserialize(&mut de).map_err(|e| e.to_string())
}

/// The scenario's internally tagged enum sections (`#[serde(tag = ...)]`). [`from_value`] refuses
/// a struct given as an array wherever serde asks for a struct, but serde reads an internally
/// tagged enum through `deserialize_any`, and takes an array there too, its tag and fields by
/// position (`fleet.router=["round_robin"]`); these are checked by name. A new internally tagged
/// section joins this list.
const TAGGED_SECTIONS: &[(&str, &str)] =
    &[("workload", "output_len_dist"), ("fleet", "router"), ("fleet", "decode_router")];

/// A tagged section given as an array is an error naming it (see [`TAGGED_SECTIONS`]).
fn tagged_sections_are_objects(v: &Value) -> Result<()> {
    for (s, f) in TAGGED_SECTIONS {
        if let Some(a @ Value::Array(_)) = v.get(s).and_then(|x| x.get(f)) {
            return Err(ConfigError::new(
                format!("{s}.{f}"),
                format!("expected an object of named fields, got an array ({a})"),
            ));
        }
    }
    Ok(())
}

/// Reads a scenario from its JSON (after `--set`), strictly: [`from_value`], and no section
/// given as an array.
pub fn scenario_from_value(v: Value) -> Result<Scenario> {
    tagged_sections_are_objects(&v)?;
    from_value(v, "")
}

/// Parses scenario JSON text.
pub fn parse_scenario(text: &str) -> Result<Scenario> {
    let v: Value = serde_json::from_str(text).map_err(|e| ConfigError::new("", format!("not valid JSON: {e}")))?;
    scenario_from_value(v)
}

#[cfg(test)]
mod human_readable_int_tests {
    use super::human_readable_int;
    use serde_json::{json, Value};

    fn read(s: &str) -> Result<Value, String> {
        human_readable_int(Value::from(s))
    }

    /// vLLM's docstring examples and its rules: decimal suffixes in lower case (decimals
    /// truncated as `int(float(n) * m)` truncates), binary in upper case (whole numbers only),
    /// otherwise Python's `int`.
    #[test]
    fn reads_what_vllms_human_readable_int_reads() {
        assert_eq!(read("1k"), Ok(json!(1000)));
        assert_eq!(read("1K"), Ok(json!(1024)));
        assert_eq!(read("25.6k"), Ok(json!(25600)));
        assert_eq!(read(" 8G "), Ok(json!(8u64 << 30)));
        assert_eq!(read("2m"), Ok(json!(2_000_000)));
        assert_eq!(read("1.0000005k"), Ok(json!(1000)));
        assert_eq!(read("1t"), Ok(json!(1_000_000_000_000u64)));
        assert_eq!(read("8192"), Ok(json!(8192)));
        assert_eq!(read("8_192"), Ok(json!(8192)));
        assert_eq!(read("-1"), Ok(json!(-1)));
        let err = read("1.5G").unwrap_err();
        assert!(err.contains("decimals are not allowed with binary suffixes like G") && err.contains("1.5g"), "{err}");
        for bad in ["8x", "k", "8 k", "1.k", ".5k", "8kk", "8__192", "_8", "", "8.5"] {
            let err = read(bad).unwrap_err();
            assert!(err.contains("is not an integer as vLLM reads this flag"), "{bad:?}: {err}");
        }
        assert!(read("99999999999999999999").unwrap_err().contains("past the largest integer"));
        assert!(read("20000000T").unwrap_err().contains("past the largest integer"));
        // Numbers and other values are the field's own type's to judge.
        assert_eq!(human_readable_int(json!(4096)), Ok(json!(4096)));
        assert_eq!(human_readable_int(json!(null)), Ok(json!(null)));
    }
}
