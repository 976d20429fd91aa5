//! CRC-32C (Castagnoli), for the places that name it: the Snappy framing format's masked
//! checksums (negotiated with IDENTIFY) and dead-letter topic names
//! (docs/storage-format.md). Stored records use CRC-32 (`crc32fast`).

/// CRC-32C of the concatenated `parts`.
pub fn crc32c(parts: &[&[u8]]) -> u32 {
    let mut crc = !0u32;
    for &b in parts.iter().flat_map(|p| p.iter()) {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::crc32c;

    #[test]
    fn crc32c_matches_the_castagnoli_check_value() {
        assert_eq!(crc32c(&[b"123456789"]), 0xE306_9283);
        assert_eq!(crc32c(&[b"1234", b"56789"]), 0xE306_9283);
        assert_eq!(crc32c(&[]), 0);
    }
}
