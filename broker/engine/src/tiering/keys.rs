//! The object keys of tiered storage, relative to the bucket prefix (docs/tiering.md, "Object
//! layout"):
//!
//! ```text
//! nodes/<node>/catalog.json                                           the node's topics
//! nodes/<node>/topics/<hex topic>/<incarnation>/checkpoint.json       one topic's checkpoint
//! nodes/<node>/topics/<hex topic>/<incarnation>/segments/segment-<20-digit base>.rqlog|.rqidx
//! ```
//!
//! The incarnation is one life of a topic on this node: a topic deleted and created again
//! starts its log indexes at 1 again, and only a new incarnation keeps its objects from
//! replacing (or being restored as) the old topic's.

/// The key prefix of everything node `node_id` stores.
pub(crate) fn node_prefix(node_id: u16) -> String {
    format!("nodes/{node_id}")
}

/// The node's catalog: which topics it holds, each with its incarnation.
pub(crate) fn catalog_key(node_id: u16) -> String {
    format!("{}/catalog.json", node_prefix(node_id))
}

/// The prefix of every incarnation of `topic` on the node.
pub(crate) fn topic_prefix(node_id: u16, topic: &str) -> String {
    format!(
        "{}/topics/{}",
        node_prefix(node_id),
        rustqueue_storage::hex(topic)
    )
}

/// The prefix of one incarnation of `topic`.
pub(crate) fn incarnation_prefix(node_id: u16, topic: &str, incarnation: &str) -> String {
    format!("{}/{incarnation}", topic_prefix(node_id, topic))
}

/// The topic's checkpoint (manifest, head, channels, uploaded segments) in this incarnation.
pub(crate) fn checkpoint_key(node_id: u16, topic: &str, incarnation: &str) -> String {
    format!(
        "{}/checkpoint.json",
        incarnation_prefix(node_id, topic, incarnation)
    )
}

/// The prefix of an incarnation's segment objects.
pub(crate) fn segments_prefix(node_id: u16, topic: &str, incarnation: &str) -> String {
    format!(
        "{}/segments",
        incarnation_prefix(node_id, topic, incarnation)
    )
}

/// The keys of a sealed segment's `.rqlog` and `.rqidx`: the file names on disk, so a restore
/// puts the objects back under the names they had.
pub(crate) fn segment_keys(node_id: u16, topic: &str, incarnation: &str, base: u64) -> [String; 2] {
    let stem = format!(
        "{}/segment-{base:020}",
        segments_prefix(node_id, topic, incarnation)
    );
    [format!("{stem}.rqlog"), format!("{stem}.rqidx")]
}

/// The base and extension of a segment object's key (`None` for any other key).
pub(crate) fn parse_segment_key(key: &str) -> Option<(u64, &str)> {
    let name = key.rsplit('/').next()?;
    let (num, ext) = name.strip_prefix("segment-")?.split_once('.')?;
    if num.len() != 20 || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((num.parse().ok()?, ext))
}

/// A new incarnation: the time in ms (16 hex digits, so later ones sort later) and 32 random
/// bits (two topics of one name created in the same millisecond on one node do not happen, but
/// a clock set back must not reuse a name).
pub(crate) fn new_incarnation(now_ms: u64, random: u32) -> String {
    format!("{now_ms:016x}-{random:08x}")
}

/// The topic named by a `<hex topic>` key segment.
pub(crate) fn unhex_topic(hex: &str) -> Option<String> {
    rustqueue_storage::unhex(hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_the_node_the_topic_in_hex_its_incarnation_and_the_file_names_on_disk() {
        let inc = new_incarnation(0x18c_2a3b_4c5d, 0x1a2b_3c4d);
        assert_eq!(inc, "0000018c2a3b4c5d-1a2b3c4d");
        assert_eq!(
            segment_keys(7, "ab.c", &inc, 42),
            [
                "nodes/7/topics/61622e63/0000018c2a3b4c5d-1a2b3c4d/segments/segment-00000000000000000042.rqlog",
                "nodes/7/topics/61622e63/0000018c2a3b4c5d-1a2b3c4d/segments/segment-00000000000000000042.rqidx",
            ]
        );
        assert_eq!(
            checkpoint_key(7, "ab.c", &inc),
            "nodes/7/topics/61622e63/0000018c2a3b4c5d-1a2b3c4d/checkpoint.json"
        );
        assert_eq!(catalog_key(7), "nodes/7/catalog.json");
        let longest = "t".repeat(64);
        let inc = new_incarnation(u64::MAX, u32::MAX);
        for key in segment_keys(65_535, &longest, &inc, u64::MAX)
            .into_iter()
            .chain([checkpoint_key(65_535, &longest, &inc), catalog_key(65_535)])
        {
            assert!(rustqueue_tier::ObjectKey::new(key.clone()).is_ok(), "{key}");
        }
    }

    #[test]
    fn segment_keys_and_topic_names_parse_back() {
        let [log, idx] = segment_keys(1, "t", "i", 9);
        let cases = [
            (log.as_str(), Some((9, "rqlog"))),
            (idx.as_str(), Some((9, "rqidx"))),
            ("nodes/1/topics/74/i/checkpoint.json", None),
            ("nodes/1/topics/74/i/segments/segment-9.rqlog", None),
        ];
        for (key, want) in cases {
            assert_eq!(parse_segment_key(key), want, "{key}");
        }
        assert_eq!(unhex_topic("61622e63").as_deref(), Some("ab.c"));
        assert_eq!(unhex_topic("6"), None);
        assert_eq!(unhex_topic("zz"), None);
        assert!(new_incarnation(1, 0) < new_incarnation(2, 0));
    }
}
