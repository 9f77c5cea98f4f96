//! Signatures over the bytes as received. python-tuf's verdict on the same cases is
//! asserted end to end in `tests/interop.rs`; these pin our side alone.

use serde_json::{Value, json};
use tough::schema::Targets;

use super::*;
use crate::trust::SigningKey;
use crate::trust::publisher::plan::delegations_for;

fn role(custom: Value) -> Value {
    json!({
        "_type": "targets",
        "spec_version": "1.0.0",
        "version": 1,
        "expires": "2030-01-01T00:00:00Z",
        "targets": {
            "acme/x/1.0.0.yaml": {
                "length": 3,
                "hashes": {"sha256": "00".repeat(32)},
                "custom": custom,
            }
        },
    })
}

/// `signed` signed by each key over its canonical bytes, as JSON bytes.
fn signed_by(signed: &Value, keys: &[&SigningKey]) -> Vec<u8> {
    let canonical = crate::trust::cjson::encode(signed).unwrap();
    let signatures: Vec<Value> = keys
        .iter()
        .map(|k| json!({"keyid": k.public().key_id(), "sig": hex::encode(k.sign_raw(&canonical))}))
        .collect();
    serde_json::to_vec_pretty(&json!({"signed": signed, "signatures": signatures})).unwrap()
}

fn check(bytes: &[u8], keys: &[&SigningKey], threshold: u64) -> Result<Vec<String>, EnvelopeError> {
    let publics: Vec<_> = keys.iter().map(|k| k.public()).collect();
    let d = delegations_for("acme", &publics, threshold).unwrap();
    parse::<Targets>("acme", bytes)?.verify_delegated(&d, "acme")
}

#[test]
fn an_empty_custom_object_is_covered_by_the_signature() {
    let key = SigningKey::generate().unwrap();
    let with_empty = role(json!({}));
    let ok = signed_by(&with_empty, &[&key]);
    assert_eq!(check(&ok, &[&key], 1).unwrap(), [key.public().key_id()]);

    // Signed without `custom`, served with `custom: {}`: the served bytes are not what
    // was signed (tough's re-serialization used to hide the difference).
    let mut without = with_empty.clone();
    without["targets"]["acme/x/1.0.0.yaml"]
        .as_object_mut()
        .unwrap()
        .remove("custom");
    let sig_for_without = signed_by(&without, &[&key]);
    let mut served: Value = serde_json::from_slice(&sig_for_without).unwrap();
    served["signed"] = with_empty;
    let err = check(&serde_json::to_vec(&served).unwrap(), &[&key], 1).unwrap_err();
    assert!(
        matches!(err, EnvelopeError::Threshold { valid: 0, .. }),
        "{err}"
    );
}

#[test]
fn unrecognized_fields_and_non_nfc_strings_are_signed_as_written() {
    let key = SigningKey::generate().unwrap();
    let mut r = role(json!({"note": "e\u{301}", "nested": {"x": [1, {"y": null}]}}));
    r["x-vendor"] = json!({"a": "ẞ"});
    let bytes = signed_by(&r, &[&key]);
    check(&bytes, &[&key], 1).unwrap();
    // Re-normalizing the string (what olpc-cjson does) breaks the signature.
    let mut nfc: Value = serde_json::from_slice(&bytes).unwrap();
    nfc["signed"]["targets"]["acme/x/1.0.0.yaml"]["custom"]["note"] = json!("é");
    assert!(check(&serde_json::to_vec(&nfc).unwrap(), &[&key], 1).is_err());
}

#[test]
fn thresholds_count_distinct_registered_keys() {
    let (a, b, c) = (
        SigningKey::generate().unwrap(),
        SigningKey::generate().unwrap(),
        SigningKey::generate().unwrap(),
    );
    let r = role(json!({"name": "x"}));
    let both = signed_by(&r, &[&a, &b]);
    assert_eq!(check(&both, &[&a, &b], 2).unwrap().len(), 2);
    let one = signed_by(&r, &[&a]);
    let err = check(&one, &[&a, &b], 2).unwrap_err();
    assert_eq!(
        err.to_string(),
        "acme: 1 valid signature(s) of the 2 required from its keys"
    );
    // A foreign key's signature does not count.
    let foreign = signed_by(&r, &[&a, &c]);
    assert!(check(&foreign, &[&a, &b], 2).is_err());
    // Two signatures by one key are refused outright, as python-tuf and tough do.
    let mut twice: Value = serde_json::from_slice(&one).unwrap();
    let sig = twice["signatures"][0].clone();
    twice["signatures"].as_array_mut().unwrap().push(sig);
    let err = check(&serde_json::to_vec(&twice).unwrap(), &[&a], 1).unwrap_err();
    assert!(err.to_string().contains("two signatures by key"), "{err}");
}

#[test]
fn fields_python_tuf_insists_on() {
    let key = SigningKey::generate().unwrap();
    let cases: [(&str, Value, &str); 7] = [
        (
            "spec_version",
            json!("2.0.0"),
            "spec_version `2.0.0` is not supported",
        ),
        (
            "spec_version",
            json!("1"),
            "spec_version `1` is not supported",
        ),
        ("spec_version", json!("1.0.x"), "not supported"),
        (
            "_type",
            json!("snapshot"),
            "`_type` is `snapshot`, but this is targets metadata",
        ),
        (
            "expires",
            json!("2030-01-01T00:00:00.5Z"),
            "must be written as YYYY-MM-DDTHH:MM:SSZ",
        ),
        (
            "expires",
            json!("2030-01-01T00:00:00+00:00"),
            "YYYY-MM-DDTHH:MM:SSZ",
        ),
        (
            "version",
            json!(0),
            "`signed.version` must be a whole number above 0",
        ),
    ];
    for (field, value, message) in cases {
        let mut r = role(json!({}));
        r[field] = value.clone();
        let err = check(&signed_by(&r, &[&key]), &[&key], 1).unwrap_err();
        assert!(err.to_string().contains(message), "{field}={value}: {err}");
    }
    for ok in ["1.0", "1.0.31", "1.2.3"] {
        let mut r = role(json!({}));
        r["spec_version"] = json!(ok);
        check(&signed_by(&r, &[&key]), &[&key], 1).unwrap();
    }
    let mut float = role(json!({"size": 1.5}));
    float["version"] = json!(1);
    let err = parse::<Targets>(
        "acme",
        &serde_json::to_vec(&json!({"signed": float, "signatures": []})).unwrap(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("allows only integers"), "{err}");
    for garbage in [&b"[]"[..], b"{\"signed\": 1}", b"not json"] {
        assert!(matches!(
            parse::<Targets>("acme", garbage),
            Err(EnvelopeError::Malformed { .. })
        ));
    }
}
