//! Reading Prometheus text exposition (`/metrics`): samples with labels.

use std::collections::BTreeMap;

/// One sample line: `name{label="v",...} value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses the text format; lines that are not samples (comments, blanks,
/// malformed lines) are skipped.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let close = find_label_end(line, open)?;
            (&line[..open], parse_labels(&line[open + 1..close])?, line[close + 1..].trim())
        }
        None => {
            let sp = line.find(char::is_whitespace)?;
            (&line[..sp], BTreeMap::new(), line[sp..].trim())
        }
    };
    let value_text = rest.split_whitespace().next()?;
    let value = match value_text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().ok()?,
    };
    Some(Sample { name: name.to_string(), labels, value })
}

fn find_label_end(line: &str, open: usize) -> Option<usize> {
    let bytes = line.as_bytes();
    let mut in_str = false;
    let mut i = open + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_str => i += 1,
            b'"' => in_str = !in_str,
            b'}' if !in_str => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

fn parse_labels(s: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let key = rest[..eq].trim().trim_start_matches(',').trim().to_string();
        let after = rest[eq + 1..].trim_start();
        if !after.starts_with('"') {
            return None;
        }
        let mut val = String::new();
        let mut chars = after[1..].char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        val.push(match n {
                            'n' => '\n',
                            o => o,
                        });
                    }
                }
                '"' => {
                    end = Some(i + 1);
                    break;
                }
                c => val.push(c),
            }
        }
        let end = end?;
        out.insert(key, val);
        rest = after[1 + end..].trim_start().trim_start_matches(',').trim_start();
    }
    Some(out)
}

/// A parsed `/metrics` snapshot.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub samples: Vec<Sample>,
}

impl Snapshot {
    pub fn from_text(text: &str) -> Snapshot {
        Snapshot { samples: parse(text) }
    }

    /// Σ of every sample named `name` (over label sets), or None if absent.
    pub fn sum(&self, name: &str) -> Option<f64> {
        let mut found = false;
        let mut s = 0.0;
        for x in self.samples.iter().filter(|x| x.name == name) {
            found = true;
            s += x.value;
        }
        found.then_some(s)
    }

    /// The first of `names` present.
    pub fn first_sum(&self, names: &[&str]) -> Option<f64> {
        names.iter().find_map(|n| self.sum(n))
    }

    /// Labels of the first sample named `name` (info gauges).
    pub fn labels(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.samples.iter().find(|x| x.name == name).map(|x| &x.labels)
    }

    /// Every `*_info` gauge's labels, by name.
    pub fn info(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.samples.iter().filter(|x| x.name.ends_with("_info")).map(|x| (x.name.clone(), x.labels.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_samples_labels_and_escapes() {
        let t = "# HELP x y\n# TYPE vllm:num_preemptions counter\nvllm:num_preemptions_total{engine=\"0\",model_name=\"m\"} 3.0\nplain 4\nq{a=\"x,y}\\\"z\",b=\"2\"} 1e3\nbad line here\n";
        let s = Snapshot::from_text(t);
        assert_eq!(s.sum("vllm:num_preemptions_total"), Some(3.0));
        assert_eq!(s.sum("plain"), Some(4.0));
        let q = s.labels("q").unwrap();
        assert_eq!(q["a"], "x,y}\"z");
        assert_eq!(q["b"], "2");
        assert_eq!(s.sum("q"), Some(1000.0));
        assert_eq!(s.sum("missing"), None);
    }
}
