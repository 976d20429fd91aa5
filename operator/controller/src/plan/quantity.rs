//! Kubernetes quantities as byte counts, enough to compare storage sizes (`100Gi`, `1.5G`,
//! `500M`, `1024`). Millis and exponents are not storage sizes and are refused.

/// Parse a storage quantity into bytes.
pub fn parse_bytes(q: &str) -> Option<u128> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let mult: u128 = match suffix {
        "" => 1,
        "k" | "K" => 1000,
        "M" => 1000u128.pow(2),
        "G" => 1000u128.pow(3),
        "T" => 1000u128.pow(4),
        "P" => 1000u128.pow(5),
        "E" => 1000u128.pow(6),
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        _ => return None,
    };
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    if whole.is_empty() && frac.is_empty() {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut total = whole.checked_mul(mult)?;
    if !frac.is_empty() {
        let digits: u32 = frac.len().try_into().ok()?;
        let scale = 10u128.checked_pow(digits)?;
        let f: u128 = frac.parse().ok()?;
        total = total.checked_add(f.checked_mul(mult)? / scale)?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_quantities_parse_to_bytes() {
        for (q, bytes) in [
            ("100Gi", Some(100u128 << 30)),
            ("1Ki", Some(1024)),
            ("1.5Gi", Some(3u128 << 29)),
            ("2G", Some(2_000_000_000)),
            ("2k", Some(2000)),
            ("1024", Some(1024)),
            (" 1Mi ", Some(1 << 20)),
            ("100m", None),
            ("1e3", None),
            ("Gi", None),
            ("", None),
            ("1.2.3Gi", None),
        ] {
            assert_eq!(parse_bytes(q), bytes, "{q}");
        }
    }
}
