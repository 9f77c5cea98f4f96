//! One `Range` header against a blob's size, as RFC 9110 reads it for `/v2/` blobs.

use std::ops::Range;

/// What a `Range` header asks of a blob.
pub(super) enum Ranged {
    Whole,
    Part(Range<u64>),
    Unsatisfiable,
}

/// One `bytes=` range (`a-b`, `a-`, `-n`) against `size`; several ranges, other units
/// or a malformed header are answered with the whole blob, as RFC 9110 allows.
pub(super) fn parse_range(spec: &str, size: u64) -> Ranged {
    let Some(set) = spec.trim().strip_prefix("bytes=") else {
        return Ranged::Whole;
    };
    if set.contains(',') {
        return Ranged::Whole;
    }
    let Some((first, last)) = set.trim().split_once('-') else {
        return Ranged::Whole;
    };
    let number = |s: &str| s.trim().parse::<u64>().ok();
    let (start, end) = match (first.trim().is_empty(), last.trim().is_empty()) {
        (true, true) => return Ranged::Whole,
        // The last n bytes.
        (true, false) => {
            let Some(n) = number(last) else {
                return Ranged::Whole;
            };
            if n == 0 {
                return Ranged::Unsatisfiable;
            }
            (size.saturating_sub(n), size)
        }
        (false, true) => {
            let Some(a) = number(first) else {
                return Ranged::Whole;
            };
            (a, size)
        }
        (false, false) => {
            let (Some(a), Some(b)) = (number(first), number(last)) else {
                return Ranged::Whole;
            };
            if b < a {
                return Ranged::Whole;
            }
            (a, b.saturating_add(1).min(size))
        }
    };
    if start >= size {
        return Ranged::Unsatisfiable;
    }
    Ranged::Part(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_rfc_9110() {
        let part = |spec: &str| match parse_range(spec, 100) {
            Ranged::Part(r) => Some(r),
            Ranged::Whole => None,
            Ranged::Unsatisfiable => Some(0..0),
        };
        assert_eq!(part("bytes=0-9"), Some(0..10));
        assert_eq!(part("bytes=90-"), Some(90..100));
        assert_eq!(part("bytes=-5"), Some(95..100));
        assert_eq!(part("bytes=-500"), Some(0..100));
        assert_eq!(part("bytes=50-1000"), Some(50..100));
        assert_eq!(part("bytes=100-"), Some(0..0), "unsatisfiable");
        assert_eq!(part("bytes=-0"), Some(0..0), "unsatisfiable");
        for whole in [
            "items=0-1",
            "bytes=0-1,5-6",
            "bytes=x-",
            "bytes=9-3",
            "bytes=-",
            "junk",
        ] {
            assert_eq!(part(whole), None, "{whole}");
        }
    }
}
