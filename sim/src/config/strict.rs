//! A JSON value read strictly: a struct given as an array is an error.
//!
//! Serde's derived `Deserialize` for a struct takes an array too, its fields by position, so
//! `--set 'cost.coefficients=[5000]'` ran with `step_us` 5000 and the rest unset, and an inline
//! card's `[...]` was read field by field, without a word. [`Strict`] wraps a
//! [`serde_json::Value`] and delegates to it, except that wherever serde asks for a struct
//! (`deserialize_struct`, and a struct variant of an externally tagged enum) an array is
//! refused; maps, sequences, options, newtypes and enum variants hand their contents on
//! wrapped, so the rule holds at every depth, for every struct-typed field, without a list of
//! them to keep.
//!
//! Not covered: what serde reads through `deserialize_any` (internally tagged and untagged
//! enums, `#[serde(flatten)]`), which buffers the value before it knows the type. The
//! scenario's internally tagged sections are checked by name (`schema::TAGGED_SECTIONS`).

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};
use serde_json::{Error, Map, Value};

/// A value whose structs must be objects.
pub struct Strict(pub Value);

fn not_an_object(a: Vec<Value>) -> Error {
    de::Error::custom(format!("expected an object of named fields, got an array ({})", Value::Array(a)))
}

struct Seq(std::vec::IntoIter<Value>);

/// An array handed to `visitor` as serde_json hands it: elements the visitor leaves unread (a
/// tuple or fixed-size array given too many) are an error, not dropped.
fn visit_array<'de, V: Visitor<'de>>(a: Vec<Value>, visitor: V) -> Result<V::Value, Error> {
    let len = a.len();
    let mut seq = Seq(a.into_iter());
    let out = visitor.visit_seq(&mut seq)?;
    if seq.0.len() == 0 {
        Ok(out)
    } else {
        Err(de::Error::invalid_length(len, &"fewer elements in array"))
    }
}

impl<'de> de::SeqAccess<'de> for Seq {
    type Error = Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        self.0.next().map(|v| seed.deserialize(Strict(v))).transpose()
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct MapAccess {
    iter: serde_json::map::IntoIter,
    value: Option<Value>,
}

impl MapAccess {
    fn new(m: Map<String, Value>) -> MapAccess {
        MapAccess { iter: m.into_iter(), value: None }
    }
}

impl<'de> de::MapAccess<'de> for MapAccess {
    type Error = Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        match self.iter.next() {
            Some((k, v)) => {
                self.value = Some(v);
                // As serde_json reads a key: a string (numeric keys are not used by the schema).
                seed.deserialize(Value::String(k)).map(Some)
            }
            None => Ok(None),
        }
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let v = self.value.take().ok_or_else(|| <Error as de::Error>::custom("a map value without its key"))?;
        seed.deserialize(Strict(v))
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

struct Enum {
    variant: String,
    value: Option<Value>,
}

impl<'de> de::EnumAccess<'de> for Enum {
    type Error = Error;
    type Variant = Variant;
    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Variant), Error> {
        let name: de::value::StringDeserializer<Error> = self.variant.into_deserializer();
        Ok((seed.deserialize(name)?, Variant(self.value)))
    }
}

struct Variant(Option<Value>);

impl<'de> de::VariantAccess<'de> for Variant {
    type Error = Error;
    fn unit_variant(self) -> Result<(), Error> {
        match self.0 {
            None | Some(Value::Null) => Ok(()),
            Some(v) => Err(de::Error::invalid_type(unexpected(&v), &"a unit variant")),
        }
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        match self.0 {
            Some(v) => seed.deserialize(Strict(v)),
            None => Err(de::Error::invalid_type(de::Unexpected::UnitVariant, &"a newtype variant")),
        }
    }
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Some(v) => de::Deserializer::deserialize_tuple(Strict(v), len, visitor),
            None => Err(de::Error::invalid_type(de::Unexpected::UnitVariant, &"a tuple variant")),
        }
    }
    fn struct_variant<V: Visitor<'de>>(self, fields: &'static [&'static str], visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Some(v) => de::Deserializer::deserialize_struct(Strict(v), "", fields, visitor),
            None => Err(de::Error::invalid_type(de::Unexpected::UnitVariant, &"a struct variant")),
        }
    }
}

fn unexpected(v: &Value) -> de::Unexpected<'_> {
    match v {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(b) => de::Unexpected::Bool(*b),
        Value::Number(_) => de::Unexpected::Other("a number"),
        Value::String(s) => de::Unexpected::Str(s),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

macro_rules! delegate {
    ($($f:ident)*) => {
        $(fn $f<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.0.$f(visitor)
        })*
    };
}

impl<'de> de::Deserializer<'de> for Strict {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Array(a) => visit_array(a, visitor),
            Value::Object(m) => visitor.visit_map(MapAccess::new(m)),
            v => v.deserialize_any(visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::Array(a) => Err(not_an_object(a)),
            Value::Object(m) => visitor.visit_map(MapAccess::new(m)),
            v => v.deserialize_struct(name, fields, visitor),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(m) => visitor.visit_map(MapAccess::new(m)),
            v => v.deserialize_map(visitor),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Array(a) => visit_array(a, visitor),
            v => v.deserialize_seq(visitor),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            v => visitor.visit_some(Strict(v)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _name: &'static str, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::String(variant) => visitor.visit_enum(Enum { variant, value: None }),
            Value::Object(m) if m.len() == 1 => {
                let (variant, value) = m.into_iter().next().expect("one entry");
                visitor.visit_enum(Enum { variant, value: Some(value) })
            }
            v => v.deserialize_enum(name, variants, visitor),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, Error> {
        self.0.deserialize_unit_struct(name, visitor)
    }

    delegate! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
        deserialize_f32 deserialize_f64 deserialize_char deserialize_str deserialize_string
        deserialize_bytes deserialize_byte_buf deserialize_unit deserialize_identifier deserialize_ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        a: u32,
        #[serde(default)]
        b: Option<f64>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum E {
        Unit,
        New(Inner),
        Fields { x: u32 },
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Outer {
        inner: Inner,
        list: Vec<Inner>,
        map: std::collections::BTreeMap<String, Inner>,
        opt: Option<Inner>,
        pair: (u32, String),
        e: Vec<E>,
        any: Value,
    }

    fn read(v: Value) -> Result<Outer, String> {
        serde_path_to_error::deserialize(Strict(v)).map_err(|e| format!("{}: {}", e.path().to_string(), e.into_inner()))
    }

    fn good() -> Value {
        serde_json::json!({
            "inner": {"a": 1}, "list": [{"a": 2, "b": 0.5}], "map": {"k": {"a": 3}}, "opt": {"a": 4},
            "pair": [5, "s"], "e": ["unit", {"new": {"a": 6}}, {"fields": {"x": 7}}], "any": [1, {"z": [2]}]
        })
    }

    #[test]
    fn reads_what_serde_json_reads() {
        let direct: Outer = serde_json::from_value(good()).unwrap();
        assert_eq!(read(good()).unwrap(), direct);
    }

    #[test]
    fn a_struct_given_as_an_array_is_refused_at_any_depth_naming_its_path() {
        for (path, bad, at) in [
            ("inner", serde_json::json!([1]), "inner"),
            ("list", serde_json::json!([[2]]), "list[0]"),
            ("map", serde_json::json!({"k": [3]}), "map.k"),
            ("opt", serde_json::json!([4]), "opt"),
            ("e", serde_json::json!([{"new": [6]}]), "e[0]"),
            ("e", serde_json::json!([{"fields": [7]}]), "e[0]"),
        ] {
            let mut v = good();
            v[path] = bad;
            let e = read(v).unwrap_err();
            assert!(e.starts_with(at) && e.contains("expected an object of named fields, got an array"), "{path}: {e}");
        }
        // serde_json alone takes them by position.
        let mut v = good();
        v["inner"] = serde_json::json!([1]);
        assert_eq!(serde_json::from_value::<Outer>(v).unwrap().inner, Inner { a: 1, b: None });
    }

    #[test]
    fn an_array_with_elements_left_over_is_refused_as_serde_json_refuses_it() {
        for bad in [serde_json::json!([1, "s", 2]), serde_json::json!([1, "s", null])] {
            let mut v = good();
            v["pair"] = bad.clone();
            let e = read(v).unwrap_err();
            assert!(e.starts_with("pair") && e.contains("invalid length 3, expected fewer elements in array"), "{e}");
            assert!(serde_json::from_value::<(u32, String)>(bad).is_err());
        }
        let e = serde_path_to_error::deserialize::<_, [u32; 2]>(Strict(serde_json::json!([1, 2, 3]))).unwrap_err();
        assert!(e.to_string().contains("fewer elements in array"), "{e}");
    }

    #[test]
    fn other_errors_are_serde_jsons() {
        let mut v = good();
        v["inner"] = serde_json::json!({"a": 1, "c": 2});
        let e = read(v).unwrap_err();
        assert!(e.contains("unknown field `c`"), "{e}");
        let mut v = good();
        v["inner"] = serde_json::json!({"a": "one"});
        let e = read(v).unwrap_err();
        assert!(e.starts_with("inner.a") && e.contains("invalid type: string \"one\", expected u32"), "{e}");
    }
}
