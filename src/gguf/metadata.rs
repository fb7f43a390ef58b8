//! GGUF metadata values and typed, erroring lookups over them.

use std::collections::BTreeMap;

/// One metadata value. Arrays hold values of a single element type (the spec requires it;
/// the parser enforces it).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// Any integer type that fits in u64 (GGUF writers disagree on u32 vs i32 vs u64 for ids).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v as i64),
            Value::I16(v) => Some(v as i64),
            Value::I32(v) => Some(v as i64),
            Value::I64(v) => Some(v),
            Value::U64(v) => i64::try_from(v).ok(),
            _ => self.as_u64().map(|v| v as i64),
        }
    }

    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::F32(v) => Some(v),
            Value::F64(v) => Some(v as f32),
            _ => self.as_i64().map(|v| v as f32),
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::F32(_) => "f32",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F64(_) => "f64",
        }
    }
}

/// Why a metadata lookup failed; names the key so the message is actionable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MetadataError {
    #[error("missing metadata key `{0}`")]
    Missing(String),
    #[error("metadata key `{key}` has type {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("metadata key `{key}` = {value} is out of range: {why}")]
    OutOfRange {
        key: String,
        value: String,
        why: String,
    },
}

/// All key/value pairs of a GGUF file, in key order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metadata {
    pub entries: BTreeMap<String, Value>,
}

impl Metadata {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.get(key)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    fn require(&self, key: &str) -> Result<&Value, MetadataError> {
        self.get(key)
            .ok_or_else(|| MetadataError::Missing(key.to_string()))
    }

    fn wrong(key: &str, expected: &'static str, v: &Value) -> MetadataError {
        MetadataError::WrongType {
            key: key.to_string(),
            expected,
            found: v.type_name(),
        }
    }

    pub fn u64(&self, key: &str) -> Result<u64, MetadataError> {
        let v = self.require(key)?;
        v.as_u64()
            .ok_or_else(|| Self::wrong(key, "unsigned integer", v))
    }

    /// An unsigned integer that must fit in u32 (dimensions, counts, token ids).
    pub fn u32(&self, key: &str) -> Result<u32, MetadataError> {
        let v = self.u64(key)?;
        u32::try_from(v).map_err(|_| MetadataError::OutOfRange {
            key: key.to_string(),
            value: v.to_string(),
            why: "does not fit in 32 bits".into(),
        })
    }

    pub fn f32(&self, key: &str) -> Result<f32, MetadataError> {
        let v = self.require(key)?;
        v.as_f32().ok_or_else(|| Self::wrong(key, "number", v))
    }

    pub fn bool(&self, key: &str) -> Result<bool, MetadataError> {
        let v = self.require(key)?;
        v.as_bool().ok_or_else(|| Self::wrong(key, "bool", v))
    }

    pub fn str(&self, key: &str) -> Result<&str, MetadataError> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| Self::wrong(key, "string", v))
    }

    pub fn array(&self, key: &str) -> Result<&[Value], MetadataError> {
        let v = self.require(key)?;
        v.as_array().ok_or_else(|| Self::wrong(key, "array", v))
    }

    pub fn str_array(&self, key: &str) -> Result<Vec<&str>, MetadataError> {
        self.array(key)?
            .iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| Self::wrong(key, "array of string", v))
            })
            .collect()
    }

    pub fn f32_array(&self, key: &str) -> Result<Vec<f32>, MetadataError> {
        self.array(key)?
            .iter()
            .map(|v| {
                v.as_f32()
                    .ok_or_else(|| Self::wrong(key, "array of number", v))
            })
            .collect()
    }

    pub fn i64_array(&self, key: &str) -> Result<Vec<i64>, MetadataError> {
        self.array(key)?
            .iter()
            .map(|v| {
                v.as_i64()
                    .ok_or_else(|| Self::wrong(key, "array of integer", v))
            })
            .collect()
    }

    /// Optional lookups: `Ok(None)` when absent, an error when present with the wrong type.
    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>, MetadataError> {
        if self.contains(key) {
            self.u32(key).map(Some)
        } else {
            Ok(None)
        }
    }
    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>, MetadataError> {
        if self.contains(key) {
            self.f32(key).map(Some)
        } else {
            Ok(None)
        }
    }
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, MetadataError> {
        if self.contains(key) {
            self.bool(key).map(Some)
        } else {
            Ok(None)
        }
    }
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>, MetadataError> {
        if self.contains(key) {
            self.str(key).map(Some)
        } else {
            Ok(None)
        }
    }
}
