//! Framing of the local API: one JSON object per line, read so that a bad
//! line is an answerable problem, never the end of the connection.
//!
//! [`LineCodec`] yields every line as [`Line::Text`], a line over the limit
//! as one [`Line::TooLarge`] (the rest of it is skipped up to its newline),
//! and a line that is not UTF-8 as [`Line::NotUtf8`]. tokio-util's
//! `LinesCodec` returns those as errors, after which a `Framed` stream
//! ends: the connection would close with no error frame.
//!
//! [`parse_strict`] reads JSON refusing duplicate keys at any depth:
//! serde_json keeps the last of two, so `{"op":"status","op":"shutdown"}`
//! would run the second.

use std::io;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use tokio_util::bytes::{Buf, BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

/// One line read from the socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A line of text, without its newline.
    Text(String),
    /// A line longer than the limit (skipped).
    TooLarge,
    /// A line that is not UTF-8 (skipped).
    NotUtf8,
}

/// Newline-delimited frames of at most `max` bytes.
#[derive(Debug, Clone)]
pub struct LineCodec {
    max: usize,
    /// Skipping the rest of an oversized line.
    discarding: bool,
    /// Where the search for a newline goes on from.
    searched: usize,
}

impl LineCodec {
    /// Frames of at most `max` bytes.
    pub fn new(max: usize) -> Self {
        LineCodec {
            max,
            discarding: false,
            searched: 0,
        }
    }
}

impl Decoder for LineCodec {
    type Item = Line;
    type Error = io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Line>, io::Error> {
        loop {
            let newline = buf[self.searched..]
                .iter()
                .position(|b| *b == b'\n')
                .map(|i| i + self.searched);
            match (self.discarding, newline) {
                (true, Some(i)) => {
                    // The end of the oversized line: read on after it.
                    buf.advance(i + 1);
                    self.discarding = false;
                    self.searched = 0;
                }
                (true, None) => {
                    buf.advance(buf.len());
                    self.searched = 0;
                    return Ok(None);
                }
                (false, Some(i)) => {
                    let line = buf.split_to(i + 1);
                    self.searched = 0;
                    if i > self.max {
                        return Ok(Some(Line::TooLarge));
                    }
                    let mut text = &line[..i];
                    if text.last() == Some(&b'\r') {
                        text = &text[..text.len() - 1];
                    }
                    return Ok(Some(match std::str::from_utf8(text) {
                        Ok(t) => Line::Text(t.to_owned()),
                        Err(_) => Line::NotUtf8,
                    }));
                }
                (false, None) => {
                    if buf.len() > self.max {
                        buf.advance(buf.len());
                        self.discarding = true;
                        self.searched = 0;
                        return Ok(Some(Line::TooLarge));
                    }
                    self.searched = buf.len();
                    return Ok(None);
                }
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Line>, io::Error> {
        match self.decode(buf)? {
            Some(line) => Ok(Some(line)),
            None => {
                // A last line without its newline: the peer is gone, so
                // there is no one to answer; it is dropped.
                buf.clear();
                self.searched = 0;
                Ok(None)
            }
        }
    }
}

impl Encoder<String> for LineCodec {
    type Error = io::Error;

    fn encode(&mut self, line: String, buf: &mut BytesMut) -> Result<(), io::Error> {
        buf.reserve(line.len() + 1);
        buf.put(line.as_bytes());
        buf.put_u8(b'\n');
        Ok(())
    }
}

/// Parses JSON, refusing an object that names a key twice.
pub fn parse_strict(text: &str) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Strict::deserialize(&mut de)?.0;
    de.end()?;
    Ok(value)
}

struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = vec![];
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!(
                    "the key {key:?} appears twice; name each key once"
                )));
            }
            let Strict(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<Line> {
        let mut codec = LineCodec::new(max);
        let mut buf = BytesMut::new();
        let mut out = vec![];
        // Fed in small pieces, as a socket may deliver it.
        for piece in input.chunks(3) {
            buf.extend_from_slice(piece);
            while let Some(l) = codec.decode(&mut buf).unwrap() {
                out.push(l);
            }
        }
        while let Some(l) = codec.decode_eof(&mut buf).unwrap() {
            out.push(l);
        }
        out
    }

    #[test]
    fn bad_lines_are_items_and_reading_goes_on() {
        let mut input = b"{\"a\":1}\n".to_vec();
        input.extend(vec![b'x'; 50]);
        input.extend(b"\n\xff\xfe\n");
        input.extend(b"ok\r\n");
        input.extend(b"truncated");
        assert_eq!(
            lines(&input, 20),
            vec![
                Line::Text("{\"a\":1}".into()),
                Line::TooLarge,
                Line::NotUtf8,
                Line::Text("ok".into()),
            ]
        );
        // A line exactly at the limit passes.
        assert_eq!(
            lines(&[vec![b'y'; 20], b"\n".to_vec()].concat(), 20),
            vec![Line::Text("y".repeat(20))]
        );
    }

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        assert!(parse_strict(r#"{"op":"status","id":1}"#).is_ok());
        let e = parse_strict(r#"{"op":"status","op":"shutdown"}"#).unwrap_err();
        assert!(e.to_string().contains("appears twice"), "{e}");
        assert!(parse_strict(r#"{"args":{"name":"a","name":"b"}}"#).is_err());
        assert!(parse_strict(r#"[{"a":1},{"a":2}]"#).is_ok());
        assert!(parse_strict(r#"{"a":1} trailing"#).is_err());
        assert_eq!(
            parse_strict(r#"{"n":-3,"f":1.5,"t":true,"z":null,"s":"\u00e9"}"#).unwrap(),
            serde_json::json!({"n":-3,"f":1.5,"t":true,"z":null,"s":"é"})
        );
    }
}
