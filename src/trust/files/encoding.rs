//! One `/tuf/` file ready to send: its bytes, a gzip copy made once for metadata over
//! 1 KiB, and the choice between them by `Accept-Encoding` (RFC 9110 §12.5.3).
//!
//! Each representation has its own strong ETag: the identity bytes keep the one served
//! before (the sha256 the metadata is known by), the gzip bytes add `+gzip`, as their
//! bytes differ. A conditional request matches the identity tag whatever it accepts (a
//! client may always be answered with identity) and the gzip tag only when it accepts
//! gzip; the 304 carries the tag that matched, so a cache holding either copy keeps it.

use std::io::Write;

use bytes::Bytes;

/// Metadata at or below this size is sent as it is: compressing would save a few
/// hundred bytes at best (nginx's usual `gzip_min_length`).
pub const COMPRESS_OVER: usize = 1024;

/// A file as served: immutable once made.
#[derive(Debug)]
pub struct File {
    identity: Bytes,
    etag: String,
    gzip: Option<(Bytes, String)>,
}

/// What to send for one request.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply<'a> {
    /// 304: the client holds the representation tagged `etag`.
    pub not_modified: bool,
    pub body: Bytes,
    pub etag: &'a str,
    /// `Content-Encoding: gzip`.
    pub gzip: bool,
    /// The file has a gzip copy, so the response depends on `Accept-Encoding`
    /// (`Vary: Accept-Encoding`), whichever representation is sent.
    pub varies: bool,
}

impl File {
    /// `etag` is the quoted tag of the identity bytes. With `compress`, a gzip copy is
    /// made when the bytes exceed [`COMPRESS_OVER`] and it comes out smaller; this is
    /// CPU work (milliseconds for a large role), done once per file.
    pub fn new(bytes: Vec<u8>, etag: String, compress: bool) -> File {
        let gzip = (compress && bytes.len() > COMPRESS_OVER)
            .then(|| gzip(&bytes))
            .filter(|z| z.len() < bytes.len())
            .map(|z| {
                let tag = format!("{}+gzip\"", etag.trim_end_matches('"'));
                (Bytes::from(z), tag)
            });
        File {
            identity: Bytes::from(bytes),
            etag,
            gzip,
        }
    }

    pub fn bytes(&self) -> &Bytes {
        &self.identity
    }

    pub fn etag(&self) -> &str {
        &self.etag
    }

    /// Memory held, for the cache's budget.
    pub fn size(&self) -> usize {
        self.identity.len()
            + self.etag.len()
            + self.gzip.as_ref().map_or(0, |(z, t)| z.len() + t.len())
    }

    /// The reply to a request with these `Accept-Encoding` and `If-None-Match` header
    /// values (each header may appear several times).
    pub fn reply<'a, 'h>(
        &'a self,
        accept_encoding: impl IntoIterator<Item = &'h str>,
        if_none_match: impl IntoIterator<Item = &'h str>,
    ) -> Reply<'a> {
        let varies = self.gzip.is_some();
        let (body, etag, gzip) = match &self.gzip {
            Some((body, tag)) if accepts_gzip(accept_encoding) => (body, tag.as_str(), true),
            _ => (&self.identity, self.etag.as_str(), false),
        };
        // The client holds the identity copy, or the chosen one (the gzip copy when it
        // still accepts gzip).
        let held = if_none_match_has(if_none_match, |t| t == "*" || t == etag || t == self.etag);
        if let Some(t) = held {
            return Reply {
                not_modified: true,
                body: Bytes::new(),
                etag: if t == self.etag { &self.etag } else { etag },
                gzip: false,
                varies,
            };
        }
        Reply {
            not_modified: false,
            body: body.clone(),
            etag,
            gzip,
            varies,
        }
    }
}

/// The first entity tag in the `If-None-Match` values that `wanted` accepts (weak
/// comparison: a `W/` prefix is ignored).
fn if_none_match_has<'h>(
    values: impl IntoIterator<Item = &'h str>,
    wanted: impl Fn(&str) -> bool,
) -> Option<&'h str> {
    values
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/"))
        .find(|t| wanted(t))
}

/// Whether to send gzip: the client gives gzip a quality above zero and at least the
/// one it gives identity, explicitly or through `*` (a tie goes to the smaller gzip). No header means identity,
/// as nginx and most servers do. Elements with an unreadable quality are skipped.
pub fn accepts_gzip<'h>(values: impl IntoIterator<Item = &'h str>) -> bool {
    let (mut gzip, mut identity, mut any) = (None, None, None);
    for element in values.into_iter().flat_map(|v| v.split(',')) {
        let mut parts = element.split(';');
        let coding = parts.next().unwrap_or_default().trim();
        if coding.is_empty() {
            continue;
        }
        let mut q = Some(1.0);
        for param in parts {
            if let Some((name, value)) = param.split_once('=')
                && name.trim().eq_ignore_ascii_case("q")
            {
                q = quality(value.trim());
            }
        }
        let Some(q) = q else { continue };
        let slot = if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
            &mut gzip
        } else if coding.eq_ignore_ascii_case("identity") {
            &mut identity
        } else if coding == "*" {
            &mut any
        } else {
            continue;
        };
        *slot = Some(q);
    }
    let gzip = gzip.or(any).unwrap_or(0.0);
    // Identity is always acceptable, but a client that lists neither it nor `*` states
    // no preference for it: any quality it gives gzip wins.
    let identity = identity.or(any).unwrap_or(0.0);
    gzip > 0.0 && gzip >= identity
}

/// An RFC 9110 qvalue: 0 to 1 with at most three decimals.
fn quality(value: &str) -> Option<f32> {
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    let valid = matches!(whole, "0" | "1")
        && fraction.len() <= 3
        && fraction.bytes().all(|b| b.is_ascii_digit())
        && (whole == "0" || fraction.bytes().all(|b| b == b'0'));
    valid.then(|| value.parse().ok()).flatten()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 2),
        flate2::Compression::best(),
    );
    // Writing into a Vec cannot fail.
    encoder.write_all(bytes).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn json(n: usize) -> Vec<u8> {
        let items: Vec<String> = (0..n).map(|i| format!("\"target-{i}\"")).collect();
        format!("{{\"targets\":[{}]}}", items.join(",")).into_bytes()
    }

    #[test]
    fn gzip_is_chosen_by_quality() {
        for (header, want) in [
            ("gzip", true),
            ("gzip, deflate, br", true),
            ("GZIP", true),
            ("x-gzip", true),
            ("*", true),
            ("br;q=1, gzip;q=0.5", true),
            ("gzip;q=0", false),
            ("gzip; q=0.000", false),
            ("*;q=0", false),
            ("identity, gzip;q=0.5", false),
            ("identity;q=0.4, gzip;q=0.5", true),
            ("*;q=0.5, gzip;q=0.3", false),
            ("br, deflate", false),
            ("", false),
            ("gzip;q=2", false),
            ("gzip;q=abc", false),
            ("gzip;q=1.5", false),
            ("*;q=0.1, gzip;q=0", false),
        ] {
            assert_eq!(accepts_gzip([header]), want, "{header:?}");
        }
        assert!(!accepts_gzip([]), "no header: identity");
        assert!(accepts_gzip(["br", "gzip"]), "several header lines");
    }

    #[test]
    fn large_metadata_gets_a_gzip_copy_of_the_same_bytes() {
        let bytes = json(200);
        let file = File::new(bytes.clone(), "\"abc\"".into(), true);
        let r = file.reply(["gzip"], []);
        assert!(r.gzip && r.varies && !r.not_modified);
        assert_eq!(r.etag, "\"abc+gzip\"");
        assert!(r.body.len() < bytes.len());
        let mut decoded = Vec::new();
        flate2::read::GzDecoder::new(&r.body[..])
            .read_to_end(&mut decoded)
            .unwrap();
        assert_eq!(decoded, bytes);

        let plain = file.reply(["gzip;q=0"], []);
        assert!(!plain.gzip && plain.varies);
        assert_eq!((plain.body.as_ref(), plain.etag), (&bytes[..], "\"abc\""));
    }

    #[test]
    fn small_files_and_targets_are_sent_as_they_are() {
        let small = File::new(json(2), "\"s\"".into(), true);
        let r = small.reply(["gzip"], []);
        assert!(!r.gzip && !r.varies);
        let target = File::new(json(200), "\"t\"".into(), false);
        assert!(!target.reply(["gzip"], []).gzip);
        assert_eq!(target.size(), json(200).len() + 3);
    }

    #[test]
    fn conditional_requests_match_the_representation_the_client_can_use() {
        let file = File::new(json(200), "\"abc\"".into(), true);
        // The gzip copy, asked with gzip: 304 with its tag.
        let r = file.reply(["gzip"], ["\"abc+gzip\""]);
        assert!(r.not_modified && r.body.is_empty());
        assert_eq!(r.etag, "\"abc+gzip\"");
        assert!(r.varies);
        // The identity copy is always usable: 304 with the identity tag.
        let r = file.reply(["gzip"], ["W/\"abc\""]);
        assert_eq!((r.not_modified, r.etag), (true, "\"abc\""));
        let r = file.reply([], ["\"other\", \"abc\""]);
        assert_eq!((r.not_modified, r.etag), (true, "\"abc\""));
        // The gzip copy, but gzip no longer accepted: the full identity bytes.
        let r = file.reply(["identity"], ["\"abc+gzip\""]);
        assert!(!r.not_modified && !r.gzip);
        assert_eq!(r.etag, "\"abc\"");
        // `*` matches whatever is chosen.
        let r = file.reply(["gzip"], ["*"]);
        assert_eq!((r.not_modified, r.etag), (true, "\"abc+gzip\""));
        // Another file's tag: the body.
        assert!(!file.reply(["gzip"], ["\"abd\""]).not_modified);
    }
}
