//! Canonical CBOR: the only encoding agentmesh puts on the wire.
//!
//! Every wire type is a CBOR array of fields in a fixed order (no maps, no
//! floats, no tags), encoded in the deterministic form of RFC 8949 §4.2.1:
//! shortest-form integers and lengths, definite lengths only. Decoding
//! checks the byte length against the type's limit *before* parsing, parses
//! with a small nesting limit, refuses trailing bytes, and refuses any input
//! that does not re-encode to exactly the same bytes, so one value has one
//! encoding and a signature over bytes is a signature over the value.
//!
//! Decoding any input returns a value or a [`DecodeError`]; it never panics
//! (the fuzz targets in `protocol/fuzz` hold it to that).

use ciborium::Value;

/// The largest body (the plaintext CBOR inside the seal) an envelope may
/// carry. 64 KiB keeps a whole envelope inside one default libp2p relay
/// circuit, which carries 128 KiB in all.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The largest encoded envelope: the body limit plus 8 KiB for the header,
/// the encapsulated key, the AEAD tag, the signature and CBOR framing.
pub const MAX_ENVELOPE_BYTES: usize = 72 * 1024;

/// The largest encoded envelope header. Every field is fixed-size or
/// bounded; 512 bytes is about twice what the largest legal header needs.
pub const MAX_HEADER_BYTES: usize = 512;

/// The largest encoded team block. Blocks hold keys and short names; 8 KiB
/// leaves room for future fields while keeping a team's history small.
pub const MAX_BLOCK_BYTES: usize = 8 * 1024;

/// How deeply arrays may nest. The deepest wire type (a body holding a list
/// of attachments) nests three levels; the rest is margin, and the limit
/// keeps a hostile input from exhausting the stack.
const MAX_NESTING: usize = 8;

/// Why bytes could not be decoded into a wire type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input is longer than the type allows; nothing was parsed.
    #[error("{what} is {len} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// The type being decoded.
        what: &'static str,
        /// The input's length.
        len: usize,
        /// The type's limit.
        limit: usize,
    },
    /// The input is not well-formed CBOR, or nests too deeply.
    #[error("{what} is not valid CBOR: {reason}")]
    Invalid {
        /// The type being decoded.
        what: &'static str,
        /// What the parser reported.
        reason: String,
    },
    /// Bytes follow the single CBOR item the input must hold.
    #[error("{what} has {extra} unexpected bytes after its end")]
    Trailing {
        /// The type being decoded.
        what: &'static str,
        /// How many bytes follow the item.
        extra: usize,
    },
    /// The input is valid CBOR but not in canonical form (for example an
    /// integer in a longer form than needed, or an indefinite length).
    #[error("{what} is not in canonical CBOR form")]
    NotCanonical {
        /// The type being decoded.
        what: &'static str,
    },
    /// The input has the wrong shape or a field holds an illegal value.
    #[error("{what}: {field} {problem}")]
    Field {
        /// The type being decoded.
        what: &'static str,
        /// The field, by its name in docs/protocol.md.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// The input is of a version this build does not speak.
    #[error("{what} has version {found}; this build speaks version {supported}")]
    UnsupportedVersion {
        /// The type being decoded.
        what: &'static str,
        /// The version in the input.
        found: u64,
        /// The version this build speaks.
        supported: u64,
    },
}

/// A type with a canonical CBOR encoding.
pub trait Wire: Sized {
    /// The type's name in errors and in docs/protocol.md.
    const WHAT: &'static str;
    /// The largest encoding accepted by [`Wire::from_bytes`].
    const MAX_BYTES: usize;

    /// The value as a CBOR data item.
    fn to_value(&self) -> Value;

    /// Reads the value back from a CBOR data item.
    fn from_value(value: Value) -> Result<Self, DecodeError>;

    /// The canonical encoding.
    fn to_bytes(&self) -> Vec<u8> {
        encode(&self.to_value())
    }

    /// Decodes canonical bytes, refusing anything over [`Wire::MAX_BYTES`].
    fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        Self::from_value(decode(Self::WHAT, bytes, Self::MAX_BYTES)?)
    }
}

/// Encodes a data item canonically.
pub fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(value, &mut out).expect("encoding a CBOR value into a Vec cannot fail");
    out
}

/// Decodes one canonical data item of at most `limit` bytes.
pub fn decode(what: &'static str, bytes: &[u8], limit: usize) -> Result<Value, DecodeError> {
    if bytes.len() > limit {
        return Err(DecodeError::TooLarge {
            what,
            len: bytes.len(),
            limit,
        });
    }
    let mut rest = bytes;
    let value: Value = ciborium::de::from_reader_with_recursion_limit(&mut rest, MAX_NESTING)
        .map_err(|e| DecodeError::Invalid {
            what,
            reason: e.to_string(),
        })?;
    if !rest.is_empty() {
        return Err(DecodeError::Trailing {
            what,
            extra: rest.len(),
        });
    }
    if encode(&value) != bytes {
        return Err(DecodeError::NotCanonical { what });
    }
    Ok(value)
}

/// An unsigned integer as a CBOR item.
pub(crate) fn uint(n: u64) -> Value {
    Value::Integer(n.into())
}

/// Optional bytes: the bytes, or CBOR null.
pub(crate) fn opt_bytes(b: Option<&[u8]>) -> Value {
    b.map_or(Value::Null, |b| Value::Bytes(b.to_vec()))
}

/// Optional text: the text, or CBOR null.
pub(crate) fn opt_text(t: Option<&str>) -> Value {
    t.map_or(Value::Null, |t| Value::Text(t.to_owned()))
}

/// Reads the fields of a wire type's array in order, naming each field in
/// the errors it returns.
#[derive(Debug)]
pub(crate) struct Fields {
    what: &'static str,
    items: std::vec::IntoIter<Value>,
}

impl Fields {
    /// Expects an array of exactly `count` items.
    pub(crate) fn new(what: &'static str, value: Value, count: usize) -> Result<Self, DecodeError> {
        match value {
            Value::Array(items) if items.len() == count => Ok(Fields {
                what,
                items: items.into_iter(),
            }),
            Value::Array(items) => Err(DecodeError::Field {
                what,
                field: "fields",
                problem: format!("number {} where {count} were expected", items.len()),
            }),
            _ => Err(DecodeError::Field {
                what,
                field: "value",
                problem: "is not a CBOR array".into(),
            }),
        }
    }

    /// Expects an array whose first item is the protocol version this build
    /// speaks; returns the fields after checking the count.
    pub(crate) fn versioned(
        what: &'static str,
        value: Value,
        count: usize,
    ) -> Result<Self, DecodeError> {
        if let Value::Array(items) = &value
            && let Some(Value::Integer(v)) = items.first()
        {
            let v = u64::try_from(*v).unwrap_or(u64::MAX);
            if v != crate::PROTOCOL_VERSION {
                return Err(DecodeError::UnsupportedVersion {
                    what,
                    found: v,
                    supported: crate::PROTOCOL_VERSION,
                });
            }
        }
        let mut fields = Fields::new(what, value, count)?;
        fields.uint("version", u64::MAX)?;
        Ok(fields)
    }

    /// [`Fields::versioned`] over the first `count` items of an array
    /// that may have more: a structure whose later items this build does
    /// not know (a block of a later type) is read as far as it is known.
    pub(crate) fn versioned_prefix(
        what: &'static str,
        value: Value,
        count: usize,
    ) -> Result<Self, DecodeError> {
        match value {
            Value::Array(mut items) if items.len() >= count => {
                items.truncate(count);
                Fields::versioned(what, Value::Array(items), count)
            }
            other => Fields::versioned(what, other, count),
        }
    }

    pub(crate) fn error(&self, field: &'static str, problem: impl Into<String>) -> DecodeError {
        DecodeError::Field {
            what: self.what,
            field,
            problem: problem.into(),
        }
    }

    fn next(&mut self, field: &'static str) -> Result<Value, DecodeError> {
        self.items
            .next()
            .ok_or_else(|| self.error(field, "is missing"))
    }

    /// Any item, for the caller to interpret.
    pub(crate) fn value(&mut self, field: &'static str) -> Result<Value, DecodeError> {
        self.next(field)
    }

    /// An unsigned integer no greater than `max`.
    pub(crate) fn uint(&mut self, field: &'static str, max: u64) -> Result<u64, DecodeError> {
        match self.next(field)? {
            Value::Integer(i) => match u64::try_from(i) {
                Ok(n) if n <= max => Ok(n),
                _ => Err(self.error(field, format!("must be an integer from 0 to {max}"))),
            },
            _ => Err(self.error(field, "must be an unsigned integer")),
        }
    }

    /// A boolean.
    pub(crate) fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        match self.next(field)? {
            Value::Bool(b) => Ok(b),
            _ => Err(self.error(field, "must be a boolean")),
        }
    }

    /// A byte string of at most `max` bytes.
    pub(crate) fn bytes(
        &mut self,
        field: &'static str,
        max: usize,
    ) -> Result<Vec<u8>, DecodeError> {
        let v = self.next(field)?;
        self.bytes_of(field, v, max)
    }

    fn bytes_of(&self, field: &'static str, v: Value, max: usize) -> Result<Vec<u8>, DecodeError> {
        match v {
            Value::Bytes(b) if b.len() <= max => Ok(b),
            Value::Bytes(b) => Err(self.error(
                field,
                format!("is {} bytes, over the limit of {max}", b.len()),
            )),
            _ => Err(self.error(field, "must be a byte string")),
        }
    }

    /// A byte string of exactly `N` bytes.
    pub(crate) fn array<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> Result<[u8; N], DecodeError> {
        let v = self.next(field)?;
        self.array_of(field, v)
    }

    fn array_of<const N: usize>(
        &self,
        field: &'static str,
        v: Value,
    ) -> Result<[u8; N], DecodeError> {
        match v {
            Value::Bytes(b) => <[u8; N]>::try_from(b.as_slice()).map_err(|_| {
                self.error(field, format!("must be exactly {N} bytes, not {}", b.len()))
            }),
            _ => Err(self.error(field, format!("must be a byte string of {N} bytes"))),
        }
    }

    /// Null, or a byte string of exactly `N` bytes.
    pub(crate) fn opt_array<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> Result<Option<[u8; N]>, DecodeError> {
        match self.next(field)? {
            Value::Null => Ok(None),
            v => self.array_of(field, v).map(Some),
        }
    }

    /// A text string of at most `max` bytes.
    pub(crate) fn text(&mut self, field: &'static str, max: usize) -> Result<String, DecodeError> {
        let v = self.next(field)?;
        self.text_of(field, v, max)
    }

    fn text_of(&self, field: &'static str, v: Value, max: usize) -> Result<String, DecodeError> {
        match v {
            Value::Text(t) if t.len() <= max => Ok(t),
            Value::Text(t) => Err(self.error(
                field,
                format!("is {} bytes, over the limit of {max}", t.len()),
            )),
            _ => Err(self.error(field, "must be a text string")),
        }
    }

    /// Null, or a text string of at most `max` bytes.
    pub(crate) fn opt_text(
        &mut self,
        field: &'static str,
        max: usize,
    ) -> Result<Option<String>, DecodeError> {
        match self.next(field)? {
            Value::Null => Ok(None),
            v => self.text_of(field, v, max).map(Some),
        }
    }

    /// An array of at most `max` items.
    pub(crate) fn list(
        &mut self,
        field: &'static str,
        max: usize,
    ) -> Result<Vec<Value>, DecodeError> {
        match self.next(field)? {
            Value::Array(items) if items.len() <= max => Ok(items),
            Value::Array(items) => Err(self.error(
                field,
                format!("has {} items, over the limit of {max}", items.len()),
            )),
            _ => Err(self.error(field, "must be an array")),
        }
    }

    /// An array of at most `max` byte strings of at most `item_max` bytes.
    pub(crate) fn bytes_list(
        &mut self,
        field: &'static str,
        max: usize,
        item_max: usize,
    ) -> Result<Vec<Vec<u8>>, DecodeError> {
        self.list(field, max)?
            .into_iter()
            .map(|v| self.bytes_of(field, v, item_max))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_oversized_input_before_parsing() {
        // Not even valid CBOR: the length check must come first.
        let junk = vec![0xff; 100];
        assert_eq!(
            decode("thing", &junk, 99),
            Err(DecodeError::TooLarge {
                what: "thing",
                len: 100,
                limit: 99
            })
        );
    }

    #[test]
    fn refuses_non_canonical_integer() {
        // 1 encoded in two bytes (0x18 0x01) instead of one (0x01).
        assert_eq!(
            decode("thing", &[0x18, 0x01], 10),
            Err(DecodeError::NotCanonical { what: "thing" })
        );
        assert_eq!(decode("thing", &[0x01], 10), Ok(uint(1)));
    }

    #[test]
    fn refuses_indefinite_length() {
        // [_ 1] as an indefinite-length array.
        assert_eq!(
            decode("thing", &[0x9f, 0x01, 0xff], 10),
            Err(DecodeError::NotCanonical { what: "thing" })
        );
    }

    #[test]
    fn refuses_trailing_bytes() {
        assert_eq!(
            decode("thing", &[0x01, 0x02], 10),
            Err(DecodeError::Trailing {
                what: "thing",
                extra: 1
            })
        );
    }

    #[test]
    fn refuses_deep_nesting_without_panicking() {
        let deep = vec![0x81; 1000];
        assert!(matches!(
            decode("thing", &deep, 2000),
            Err(DecodeError::Invalid { .. })
        ));
    }

    #[test]
    fn huge_declared_length_does_not_allocate() {
        // A byte string claiming 2^63 bytes, with 3 bytes present.
        let mut input = vec![0x5b, 0x80, 0, 0, 0, 0, 0, 0, 0];
        input.extend_from_slice(&[1, 2, 3]);
        assert!(matches!(
            decode("thing", &input, 100),
            Err(DecodeError::Invalid { .. })
        ));
    }

    #[test]
    fn versioned_names_both_versions() {
        let v = Value::Array(vec![uint(7), uint(0)]);
        assert_eq!(
            Fields::versioned("thing", v, 2).unwrap_err(),
            DecodeError::UnsupportedVersion {
                what: "thing",
                found: 7,
                supported: 1
            }
        );
    }
}
