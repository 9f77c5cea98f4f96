//! Canonical JSON as TUF signatures cover it, byte for byte what securesystemslib's
//! `encode_canonical` (python-tuf's serializer, the referee) produces: object keys sorted
//! by code point, no whitespace, only `"` and `\` escaped, every other character written
//! as UTF-8, integers only.
//!
//! Not `olpc-cjson` (what tough uses): it normalizes strings to Unicode NFC, so a role
//! whose strings are not in NFC canonicalizes to other bytes than python-tuf and go-tuf
//! sign, and a valid signature would be refused.

use serde_json::Value;

/// A value canonical JSON cannot carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("canonical JSON allows only integers, and {0} is not one")]
pub struct NotCanonical(String);

/// The canonical bytes of `value`.
pub fn encode(value: &Value) -> Result<Vec<u8>, NotCanonical> {
    let mut out = Vec::with_capacity(1024);
    write(value, &mut out)?;
    Ok(out)
}

fn write(value: &Value, out: &mut Vec<u8>) -> Result<(), NotCanonical> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            // serde_json keeps integers that fit 64 bits as integers; anything else
            // (fractions, exponents, larger integers) arrives as a float.
            if n.is_i64() || n.is_u64() {
                out.extend_from_slice(n.to_string().as_bytes());
            } else {
                return Err(NotCanonical(n.to_string()));
            }
        }
        Value::String(s) => string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out)?;
            }
            out.push(b']');
        }
        Value::Object(map) => {
            // Rust orders strings by their UTF-8 bytes, which is code point order: the
            // order Python's `sorted` gives.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(key, out);
                out.push(b':');
                write(item, out)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

fn string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    for b in s.bytes() {
        if b == b'"' || b == b'\\' {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(v: Value) -> String {
        String::from_utf8(encode(&v).unwrap()).unwrap()
    }

    #[test]
    fn matches_securesystemslib() {
        // Expected strings are what securesystemslib.formats.encode_canonical printed
        // for the same values.
        assert_eq!(
            text(json!({"b": 1, "a": [true, null, -2]})),
            r#"{"a":[true,null,-2],"b":1}"#
        );
        assert_eq!(text(json!({})), "{}");
        assert_eq!(text(json!({"custom": {}})), r#"{"custom":{}}"#);
        assert_eq!(text(json!("a\"b\\c\nd/é")), "\"a\\\"b\\\\c\nd/é\"");
        // Not normalized: "e" + combining acute stays two code points.
        assert_eq!(text(json!("e\u{301}")), "\"e\u{301}\"");
        // Code point order: "Z" < "a" < "é" < "ẞ".
        assert_eq!(
            text(json!({"ẞ": 1, "é": 2, "a": 3, "Z": 4})),
            r#"{"Z":4,"a":3,"é":2,"ẞ":1}"#
        );
        assert_eq!(text(json!(u64::MAX)), "18446744073709551615");
    }

    #[test]
    fn refuses_floats() {
        for v in [json!(1.5), json!({"x": [1.0]}), json!(1e3)] {
            assert!(encode(&v).is_err(), "{v}");
        }
    }
}
