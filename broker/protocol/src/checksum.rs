//! CRC-32C (Castagnoli), for the places that name it: the Snappy framing format's masked
//! checksums (negotiated with IDENTIFY) and dead-letter topic names
//! (docs/storage-format.md). Stored records use CRC-32 (`crc32fast`).

/// CRC-32C of the concatenated `parts` (hardware-accelerated where the CPU has it, through the
/// `crc32c` crate the storage uses too).
pub fn crc32c(parts: &[&[u8]]) -> u32 {
    parts.iter().fold(0, |crc, p| crc32c::crc32c_append(crc, p))
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
