//! tokenizer.json files: the vocabulary prompts are drawn from, and the
//! tokenizer that turns token ids into text for the chat endpoint.

use std::path::Path;

use serde_json::Value;

/// Loads a tokenizer.json (or the one in a folder).
pub fn load(path: &Path) -> Result<tokenizers::Tokenizer, String> {
    let p = if path.is_dir() { path.join("tokenizer.json") } else { path.to_path_buf() };
    tokenizers::Tokenizer::from_file(&p).map_err(|e| format!("{}: not a tokenizer.json: {e}", p.display()))
}

/// The vocabulary of a tokenizer.json: (ids to draw from, first id to use).
pub fn vocab_of(path: &Path) -> Result<(u32, u32), String> {
    let p = if path.is_dir() { path.join("tokenizer.json") } else { path.to_path_buf() };
    let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: cannot read: {e}", p.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", p.display()))?;
    let base = v
        .pointer("/model/vocab")
        .and_then(Value::as_object)
        .map(|m| m.len() as u32)
        .ok_or(format!("{}: no model.vocab", p.display()))?;
    let specials: Vec<u32> = v
        .get("added_tokens")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|t| t.get("id").and_then(Value::as_u64)).map(|x| x as u32).collect())
        .unwrap_or_default();
    // Special tokens at the start of the vocabulary are skipped; those after the base vocabulary are outside it.
    let reserved = specials.iter().copied().filter(|&i| i < 1024).max().map(|m| m + 1).unwrap_or(0);
    Ok((base, reserved))
}

/// Text of exactly `ids.len()` tokens when re-encoded, as `vllm bench serve`
/// builds its random prompts: decode, re-encode, cut or pad, decode again.
pub fn text_prompt(tok: &tokenizers::Tokenizer, ids: &[u32]) -> String {
    let target = ids.len();
    let mut cur: Vec<u32> = ids.to_vec();
    let mut text = tok.decode(&cur, true).unwrap_or_default();
    for _ in 0..4 {
        let got: Vec<u32> = tok.encode(text.as_str(), false).map(|e| e.get_ids().to_vec()).unwrap_or_default();
        if got.len() == target {
            break;
        }
        cur = if got.len() > target {
            got[..target].to_vec()
        } else {
            got.iter().chain(ids.iter().cycle()).take(target).copied().collect()
        };
        text = tok.decode(&cur, true).unwrap_or_default();
    }
    text
}

/// The served model's card from its folder's `config.json`, when the folder is readable here;
/// whether its tokenizer adds a BOS from the `tokenizer_config.json` and `tokenizer.json` beside it
/// (`calib::derive::tokenizer_adds_bos`).
pub fn model_card_from_dir(dir: &Path, id: &str) -> Result<Option<sim::cards::ModelCard>, String> {
    let p = dir.join("config.json");
    if !p.exists() {
        return Ok(None);
    }
    let c = read_json(&p)?.expect("it exists");
    let add_bos_token = tokenizer_adds_bos_in(dir)?;
    calib::derive::model_card_from_config(&c, &p.display().to_string(), id, add_bos_token).map(Some)
}

/// A JSON file, `None` where it is not there; an unreadable or malformed one is an error naming it.
pub fn read_json(p: &Path) -> Result<Option<Value>, String> {
    if !p.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(p).map_err(|e| format!("{}: cannot read: {e}", p.display()))?;
    serde_json::from_str(&text).map(Some).map_err(|e| format!("{}: not JSON: {e}", p.display()))
}

/// Whether the tokenizer in `dir` puts a BOS before a text prompt, from its `tokenizer_config.json`
/// and `tokenizer.json` (`calib::derive::tokenizer_adds_bos`); `None` where neither says.
pub fn tokenizer_adds_bos_in(dir: &Path) -> Result<Option<bool>, String> {
    let (cp, tp) = (dir.join("tokenizer_config.json"), dir.join("tokenizer.json"));
    let (c, t) = (read_json(&cp)?, read_json(&tp)?);
    let (cn, tn) = (cp.display().to_string(), tp.display().to_string());
    calib::derive::tokenizer_adds_bos(c.as_ref().map(|v| (v, cn.as_str())), t.as_ref().map(|v| (v, tn.as_str())))
}
