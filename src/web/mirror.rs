//! How an image's mirror reads on a plugin page: its status word (for styling) and a
//! sentence with the size, the reason of a failure, or the key that verified it.

/// `2.0 KiB`, `187.3 MiB`, `1.2 GiB`: sizes as people read them.
fn human_size(bytes: i64) -> String {
    let b = bytes.max(0) as f64;
    if bytes < 1024 {
        format!("{bytes} bytes")
    } else if bytes < 1 << 20 {
        format!("{:.1} KiB", b / 1024.0)
    } else if bytes < 1 << 30 {
        format!("{:.1} MiB", b / 1_048_576.0)
    } else {
        format!("{:.1} GiB", b / 1_073_741_824.0)
    }
}

/// What an administrator reads about an image's mirror.
pub(super) fn status_text(m: &crate::catalog::MirrorInfo) -> (String, String) {
    let text = match m.status.as_str() {
        "mirrored" => format!(
            "Mirrored here ({}); clusters can pull it from this marketplace{}",
            human_size(m.size.unwrap_or(0)),
            // Key ids are 64 hex digits; 16 tell them apart on a page.
            m.verified_by.as_deref().map_or(String::new(), |k| format!(
                "; image signature verified by {}",
                &k[..k.len().min(16)]
            ))
        ),
        "mirroring" => "Being mirrored now".to_owned(),
        "failed" => {
            let wait = m.next_attempt_at.unwrap_or(0) - crate::clock::now();
            format!(
                "Mirror failed: {}; next attempt in {}",
                m.error.as_deref().unwrap_or("unknown reason"),
                crate::clock::human_duration(wait.max(0))
            )
        }
        _ => "Waiting to be mirrored".to_owned(),
    };
    (m.status.clone(), text)
}

#[cfg(test)]
mod tests {
    use super::human_size;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_size(1987), "1.9 KiB");
        assert_eq!(human_size(12), "12 bytes");
        assert_eq!(human_size(209_715_200), "200.0 MiB");
        assert_eq!(human_size(3 << 30), "3.0 GiB");
    }
}
