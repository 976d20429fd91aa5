//! Storage feature levels: which binaries may open a data directory (docs/storage-format.md,
//! "COMPATIBILITY").
//!
//! A level is reached only by configuring it (`storage.feature_level`): the open raises the
//! directory's active writer and minimum reader level to it, and never lowers them. What each
//! level allows:
//!
//! | level | what a directory at it may hold | why an older reader must not open it |
//! |---|---|---|
//! | 1 | records of at most 72 MiB, messages of at most 20 MiB | |
//! | 2 ([`LARGE_RECORDS_LEVEL`]) | larger records and messages | a level-1 binary refuses the records |
//! | 3 ([`LOCAL_RETENTION_LEVEL`]) | segments local retention evicted (tiered record format 3) | a level-2 binary starts the record over and drops the evicted segments' messages |
//!
//! [`on_open`] is the whole decision, a function of the file and the binary, tested by table.

use crate::meta::Compatibility;

/// Highest storage feature level this binary can read and write: 3, or the build-time ceiling
/// `RUSTQUEUE_MAX_STORAGE_FEATURE_LEVEL` (1 or 2: how tests build an "older" binary). The
/// broker's capabilities report this same constant, so what it says and what it opens cannot
/// differ.
pub const MAX_FEATURE_LEVEL: u8 = build_ceiling(option_env!("RUSTQUEUE_MAX_STORAGE_FEATURE_LEVEL"));

/// The level a directory needs once it holds a record above level 1's bounds.
pub const LARGE_RECORDS_LEVEL: u8 = 2;

/// The level a directory needs before local retention evicts its first segment: a binary that
/// reads at most level 2 reads tiered records of format 2 only, and would start the record over
/// and drop the evicted segments' indexes, and with them their messages.
pub const LOCAL_RETENTION_LEVEL: u8 = 3;

const fn build_ceiling(v: Option<&str>) -> u8 {
    match v {
        None => 3,
        Some(s) => match s.as_bytes() {
            b"1" => 1,
            b"2" => 2,
            b"3" | b"" => 3,
            _ => panic!("RUSTQUEUE_MAX_STORAGE_FEATURE_LEVEL must be 1, 2 or 3"),
        },
    }
}

/// What opening a directory whose `COMPATIBILITY` says `c`, configured at level `configured`,
/// does in a binary that reads and writes levels `1..=ceiling`: `Ok(None)` opens it as it is,
/// `Ok(Some(raised))` opens it after `raised` replaced the file (atomically, before anything
/// else is read or written), `Err` refuses with the message to show.
pub(crate) fn on_open(
    c: &Compatibility,
    configured: u8,
    ceiling: u8,
) -> Result<Option<Compatibility>, String> {
    if configured == 0 || configured > ceiling {
        return Err(format!(
            "feature level {configured} is outside 1..={ceiling}"
        ));
    }
    if c.minimum_reader_feature_level > ceiling {
        return Err(format!(
            "data needs reader level {} but this binary reads at most {ceiling} (rollback fence); \
             run a newer broker",
            c.minimum_reader_feature_level
        ));
    }
    if configured < c.active_writer_feature_level {
        return Err(format!(
            "configured feature level {configured} is below the active level {}; levels cannot \
             be lowered (set storage.feature_level = {})",
            c.active_writer_feature_level, c.active_writer_feature_level
        ));
    }
    if configured == c.active_writer_feature_level {
        return Ok(None);
    }
    Ok(Some(Compatibility {
        data_format: c.data_format,
        active_writer_feature_level: configured,
        minimum_reader_feature_level: c.minimum_reader_feature_level.max(configured),
        generation: c.generation + 1,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compat(active: u8, reader: u8, generation: u64) -> Compatibility {
        Compatibility {
            data_format: 7,
            active_writer_feature_level: active,
            minimum_reader_feature_level: reader,
            generation,
        }
    }

    #[test]
    fn the_build_time_ceiling_parses_one_to_three() {
        assert_eq!(build_ceiling(None), 3);
        assert_eq!(build_ceiling(Some("")), 3);
        assert_eq!(build_ceiling(Some("1")), 1);
        assert_eq!(build_ceiling(Some("2")), 2);
        assert_eq!(build_ceiling(Some("3")), 3);
        assert!((1..=3).contains(&MAX_FEATURE_LEVEL));
    }

    /// (file, configured, ceiling) → `Ok(None)`: opened as it is, `Ok(Some)`: raised to,
    /// `Err`: a refusal containing the text.
    type Case = (
        Compatibility,
        u8,
        u8,
        Result<Option<Compatibility>, &'static str>,
    );

    #[test]
    fn opening_raises_to_the_configured_level_and_refuses_what_it_must() {
        let cases: &[Case] = &[
            (compat(1, 1, 1), 1, 3, Ok(None)),
            (compat(1, 1, 1), 2, 3, Ok(Some(compat(2, 2, 2)))),
            (compat(1, 1, 1), 3, 3, Ok(Some(compat(3, 3, 2)))),
            (compat(2, 2, 4), 3, 3, Ok(Some(compat(3, 3, 5)))),
            (compat(3, 3, 5), 3, 3, Ok(None)),
            // a directory fenced for local retention, opened by a release that reads 1..=2
            (
                compat(3, 3, 5),
                2,
                2,
                Err("data needs reader level 3 but this binary reads at most 2 (rollback fence)"),
            ),
            (compat(3, 3, 5), 1, 2, Err("rollback fence")),
            (
                compat(2, 2, 2),
                1,
                1,
                Err("data needs reader level 2 but this binary reads at most 1"),
            ),
            // an older release opens what it may read
            (compat(2, 2, 2), 2, 2, Ok(None)),
            (compat(1, 1, 1), 2, 2, Ok(Some(compat(2, 2, 2)))),
            // never lowered
            (
                compat(3, 3, 5),
                2,
                3,
                Err("levels cannot be lowered (set storage.feature_level = 3)"),
            ),
            (compat(2, 2, 2), 1, 3, Err("levels cannot be lowered")),
            // beyond the binary
            (
                compat(1, 1, 1),
                3,
                2,
                Err("feature level 3 is outside 1..=2"),
            ),
            (
                compat(1, 1, 1),
                4,
                3,
                Err("feature level 4 is outside 1..=3"),
            ),
            (
                compat(1, 1, 1),
                0,
                3,
                Err("feature level 0 is outside 1..=3"),
            ),
        ];
        for (file, configured, ceiling, want) in cases {
            let got = on_open(file, *configured, *ceiling);
            match (want, &got) {
                (Ok(w), Ok(g)) => assert_eq!(w, g, "{file:?} at {configured} (ceiling {ceiling})"),
                (Err(w), Err(g)) => assert!(g.contains(w), "{file:?} at {configured}: {g}"),
                _ => panic!("{file:?} at {configured} (ceiling {ceiling}): {got:?}, want {want:?}"),
            }
        }
    }
}
