//! A JSON object written by hand: keys in the order given, strings escaped
//! as RFC 8259 requires (quote, backslash and every control character),
//! so that any path, host or spec comes out as valid JSON.

use std::fmt::Write;

/// One JSON object being written.
pub struct Object {
    out: String,
    empty: bool,
}

/// A value of a member.
pub enum Value<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Str(&'a str),
    Object(Object),
}

impl<T: Into<Value<'static>>> From<Option<T>> for Value<'static> {
    fn from(value: Option<T>) -> Value<'static> {
        value.map_or(Value::Null, Into::into)
    }
}

impl From<i64> for Value<'static> {
    fn from(n: i64) -> Value<'static> {
        Value::Int(n)
    }
}

impl From<u64> for Value<'static> {
    fn from(n: u64) -> Value<'static> {
        Value::Uint(n)
    }
}

impl From<bool> for Value<'static> {
    fn from(b: bool) -> Value<'static> {
        Value::Bool(b)
    }
}

impl Object {
    pub fn new() -> Object {
        Object { out: String::from("{"), empty: true }
    }

    /// Adds `"key": value`.
    pub fn member<'a>(mut self, key: &str, value: impl Into<Value<'a>>) -> Object {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        string(&mut self.out, key);
        self.out.push(':');
        match value.into() {
            Value::Null => self.out.push_str("null"),
            Value::Bool(b) => self.out.push_str(if b { "true" } else { "false" }),
            Value::Int(n) => {
                let _ = write!(self.out, "{n}");
            }
            Value::Uint(n) => {
                let _ = write!(self.out, "{n}");
            }
            Value::Str(s) => string(&mut self.out, s),
            Value::Object(inner) => self.out.push_str(&inner.finish()),
        }
        self
    }

    /// Adds `"key": "text"`, or `null` for `None`.
    pub fn text(self, key: &str, value: Option<&str>) -> Object {
        match value {
            Some(text) => self.member(key, Value::Str(text)),
            None => self.member(key, Value::Null),
        }
    }

    pub fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

impl<'a> From<Object> for Value<'a> {
    fn from(object: Object) -> Value<'a> {
        Value::Object(object)
    }
}

/// `text` as a JSON string, quotes included.
fn string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_and_members_kept_in_order() {
        let inner = Object::new().member("n", 7u64).member("ok", true);
        let text = Object::new()
            .text("path", Some("/tmp/a \"b\"\\c\n\u{1}é"))
            .text("host", None)
            .member("pid", -1i64)
            .member("inner", inner)
            .finish();
        assert_eq!(text, r#"{"path":"/tmp/a \"b\"\\c\n\u0001é","host":null,"pid":-1,"inner":{"n":7,"ok":true}}"#);
    }
}
