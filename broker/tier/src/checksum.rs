//! The CRC-32C (Castagnoli) an uploaded object carries, and how it is written into the
//! object's user metadata.
//!
//! `put_file` computes the CRC-32C and the length of the local file and stores both with the
//! object, as S3 user metadata (`x-amz-meta-rustqueue-crc32c: 1a2b3c4d`,
//! `x-amz-meta-rustqueue-size: 41943040`). Metadata is written with the object (in the same
//! PUT, or when a multipart upload is created), so there is no window in which an object
//! exists without its checksum. `verify` recomputes both over the bytes the bucket returns.
//! CRC-32C is the checksum the storage crate's records already use (the `crc32c` crate).

use std::fmt;

use object_store::{Attribute, Attributes};

/// The metadata name holding the CRC-32C, as 8 lowercase hex digits.
pub const CRC32C_METADATA: &str = "rustqueue-crc32c";
/// The metadata name holding the object's length in bytes, in decimal.
pub const SIZE_METADATA: &str = "rustqueue-size";

/// The CRC-32C and length of an object's bytes: what was uploaded, or what was read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checksum {
    /// CRC-32C (Castagnoli) of all the bytes.
    pub crc32c: u32,
    /// Number of bytes.
    pub size: u64,
}

impl Checksum {
    /// The checksum of no bytes.
    pub const EMPTY: Self = Self { crc32c: 0, size: 0 };

    /// This checksum extended by `bytes`.
    pub fn append(self, bytes: &[u8]) -> Self {
        Self {
            crc32c: crc32c::crc32c_append(self.crc32c, bytes),
            size: self.size + bytes.len() as u64,
        }
    }

    /// The checksum of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self::EMPTY.append(bytes)
    }

    /// The two metadata attributes that record this checksum on an object.
    pub(crate) fn to_attributes(self) -> Attributes {
        let mut attributes = Attributes::new();
        attributes.insert(
            Attribute::Metadata(CRC32C_METADATA.into()),
            encode_crc(self.crc32c).into(),
        );
        attributes.insert(
            Attribute::Metadata(SIZE_METADATA.into()),
            self.size.to_string().into(),
        );
        attributes
    }

    /// The checksum an object's metadata records, `None` when either value is missing or
    /// malformed (an object this layer did not write).
    pub(crate) fn from_attributes(attributes: &Attributes) -> Option<Self> {
        let get = |name: &'static str| attributes.get(&Attribute::Metadata(name.into()));
        Some(Self {
            crc32c: decode_crc(get(CRC32C_METADATA)?)?,
            size: decode_size(get(SIZE_METADATA)?)?,
        })
    }
}

impl fmt::Display for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CRC-32C {} over {} bytes",
            encode_crc(self.crc32c),
            self.size
        )
    }
}

/// A CRC as written in metadata: exactly 8 lowercase hex digits.
pub(crate) fn encode_crc(crc: u32) -> String {
    format!("{crc:08x}")
}

/// The CRC of a metadata value written by [`encode_crc`]; anything else is refused, so a value
/// that merely parses (`"+1"`, `"ABC"`) never passes for a recorded checksum.
pub(crate) fn decode_crc(value: &str) -> Option<u32> {
    if value.len() != 8
        || !value
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    u32::from_str_radix(value, 16).ok()
}

/// A size as written in metadata: decimal digits, no sign, no leading zero.
pub(crate) fn decode_size(value: &str) -> Option<u64> {
    let canonical = value == "0" || (!value.starts_with('0') && !value.is_empty());
    if !canonical || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crcs_are_eight_lowercase_hex_digits_both_ways() {
        let cases = [
            (0u32, "00000000"),
            (1, "00000001"),
            (0xe306_9283, "e3069283"),
            (u32::MAX, "ffffffff"),
        ];
        for (crc, text) in cases {
            assert_eq!(encode_crc(crc), text);
            assert_eq!(decode_crc(text), Some(crc));
        }
    }

    #[test]
    fn malformed_crcs_are_not_a_recorded_checksum() {
        for text in [
            "",
            "0",
            "E3069283",
            "+3069283",
            "e306928",
            "e30692830",
            "g3069283",
            " 3069283",
        ] {
            assert_eq!(decode_crc(text), None, "{text:?}");
        }
    }

    #[test]
    fn sizes_are_canonical_decimal() {
        let cases: &[(&str, Option<u64>)] = &[
            ("0", Some(0)),
            ("41943040", Some(41_943_040)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", None),
            ("", None),
            ("007", None),
            ("-1", None),
            ("+1", None),
            ("1e3", None),
        ];
        for (text, want) in cases {
            assert_eq!(decode_size(text), *want, "{text:?}");
        }
    }

    #[test]
    fn the_check_value_is_the_castagnoli_one() {
        // The standard CRC-32C check value: the CRC of ASCII "123456789".
        assert_eq!(Checksum::of(b"123456789").crc32c, 0xe306_9283);
        let split = Checksum::of(b"1234").append(b"56789");
        assert_eq!(split, Checksum::of(b"123456789"));
        assert_eq!(split.size, 9);
    }

    #[test]
    fn a_checksum_round_trips_through_metadata() {
        let checksum = Checksum {
            crc32c: 0xdead_beef,
            size: 42,
        };
        let attributes = checksum.to_attributes();
        assert_eq!(Checksum::from_attributes(&attributes), Some(checksum));
        assert_eq!(Checksum::from_attributes(&Attributes::new()), None);
    }
}
