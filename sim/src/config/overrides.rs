//! `--set PATH=VALUE` overrides, applied to the raw scenario JSON.

use super::*;

/// Applies `--set PATH=VALUE` to raw scenario JSON. `VALUE` is parsed as
/// JSON if it can be (numbers, booleans, objects), else taken as a string.
pub fn apply_set(root: &mut Value, assignment: &str) -> Result<()> {
    let (path, raw) = assignment
        .split_once('=')
        .ok_or_else(|| ConfigError::new("--set", format!("expected PATH=VALUE, got {assignment:?}")))?;
    let path = path.trim();
    if path.is_empty() {
        return Err(ConfigError::new("--set", format!("empty path in {assignment:?}")));
    }
    let value: Value = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()));
    let mut cur = root;
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.trim().is_empty()) {
        return Err(ConfigError::new(
            "--set",
            format!("empty field name in path {path:?} (expected e.g. engine.max_num_seqs)"),
        ));
    }
    for (i, part) in parts.iter().enumerate() {
        let obj = match cur {
            Value::Object(m) => m,
            _ => {
                return Err(ConfigError::new(
                    parts[..i].join("."),
                    format!("is not an object, so it has no field {part:?}"),
                ))
            }
        };
        if i + 1 == parts.len() {
            obj.insert((*part).to_string(), value);
            return Ok(());
        }
        cur = obj.entry((*part).to_string()).or_insert_with(|| Value::Object(Default::default()));
        if cur.is_null() {
            *cur = Value::Object(Default::default());
        }
    }
    Ok(())
}
