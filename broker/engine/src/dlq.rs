//! Dead-letter topic names (docs/storage-format.md, "Dead letters"): `<topic>.<channel><suffix>`, or, when that is
//! not a valid name (over 64 characters), `<topic prefix>.<crc32c(topic \0 channel) as 8
//! hex><suffix>` truncated to 64.

use rustqueue_protocol::checksum::crc32c;

use crate::types::valid_name;

/// The dead-letter topic of `channel` on `topic`.
pub(crate) fn dead_letter_topic(topic: &str, channel: &str, suffix: &str) -> String {
    let name = format!("{topic}.{}{suffix}", channel.replace('#', "_"));
    if valid_name(&name) {
        return name;
    }
    let tail = format!(
        ".{:08x}{suffix}",
        crc32c(&[topic.as_bytes(), &[0], channel.as_bytes()])
    );
    let prefix: String = topic
        .replace('#', "_")
        .chars()
        .take(64usize.saturating_sub(tail.len()))
        .collect();
    format!("{prefix}{tail}")
}

#[cfg(test)]
mod tests {
    use super::{crc32c, dead_letter_topic};
    use crate::types::valid_name;

    #[test]
    fn a_short_pair_is_topic_dot_channel_suffix() {
        assert_eq!(
            dead_letter_topic("orders", "billing", ".DLQ"),
            "orders.billing.DLQ"
        );
        assert_eq!(
            dead_letter_topic("t", "tail#ephemeral", ".dead"),
            "t.tail_ephemeral.dead"
        );
    }

    #[test]
    fn a_long_pair_is_a_topic_prefix_the_crc32c_and_the_suffix_in_64_characters() {
        let topic = "t".repeat(60);
        let channel = "c".repeat(40);
        let name = dead_letter_topic(&topic, &channel, ".DLQ");
        let crc = crc32c(&[topic.as_bytes(), &[0], channel.as_bytes()]);
        assert_eq!(name, format!("{}.{crc:08x}.DLQ", "t".repeat(51)));
        assert_eq!(name.len(), 64);
        assert!(valid_name(&name));
        let other = dead_letter_topic(&topic, &"c".repeat(41), ".DLQ");
        assert_ne!(name, other, "channels of one topic get distinct DLQ topics");
        assert!(valid_name(&other));
    }

    #[test]
    fn a_short_topic_with_a_long_channel_keeps_the_whole_topic() {
        let name = dead_letter_topic("short", &"c".repeat(64), ".DLQ");
        let crc = crc32c(&[b"short", &[0], "c".repeat(64).as_bytes()]);
        assert_eq!(name, format!("short.{crc:08x}.DLQ"));
    }
}
