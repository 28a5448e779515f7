//! Values named by key, in a fixed order: serialised as a JSON object whose
//! keys keep the order they were added in (the report key order is a contract).

use serde::ser::{Serialize, SerializeMap, Serializer};

/// `(name, value)` pairs serialised as a JSON object, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Named<T>(pub Vec<(String, T)>);

impl<T> Named<T> {
    pub fn new() -> Named<T> {
        Named(Vec::new())
    }

    pub fn push(&mut self, name: impl Into<String>, value: T) {
        self.0.push((name.into(), value));
    }

    pub fn get(&self, name: &str) -> Option<&T> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &T)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v))
    }
}

impl<T: Serialize> Serialize for Named<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}
