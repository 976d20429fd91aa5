//! The ledger: every message body carries `run nonce | producer | sequence`, every
//! acknowledged publish is counted, every delivery is ticked off. A result only counts when
//! each acknowledged message came back at least once (missing = 0) and nothing else did.
//!
//! Producer `p` numbers its messages `0, 1, 2, ...` and has one publish in flight at a time,
//! so "acknowledged" is a count per producer and "received" a bitset per producer.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of the ledger header at the front of every body.
pub const HEADER_BYTES: usize = 20;

/// Writes the header into `body` (which must be at least [`HEADER_BYTES`] long) and fills the
/// rest with a recognisable pattern.
pub fn encode_body(body: &mut [u8], nonce: u64, producer: u32, sequence: u64) {
    body[..8].copy_from_slice(&nonce.to_be_bytes());
    body[8..12].copy_from_slice(&producer.to_be_bytes());
    body[12..20].copy_from_slice(&sequence.to_be_bytes());
}

/// Fills a fresh body buffer of `size` bytes: the header is written per message later.
pub fn blank_body(size: usize) -> Vec<u8> {
    (0..size.max(HEADER_BYTES))
        .map(|i| b'a' + (i % 26) as u8)
        .collect()
}

/// Reads `(nonce, producer, sequence)` back, or `None` for a body too short to be ours.
pub fn decode_body(body: &[u8]) -> Option<(u64, u32, u64)> {
    let header = body.get(..HEADER_BYTES)?;
    let nonce = u64::from_be_bytes(header[..8].try_into().ok()?);
    let producer = u32::from_be_bytes(header[8..12].try_into().ok()?);
    let sequence = u64::from_be_bytes(header[12..20].try_into().ok()?);
    Some((nonce, producer, sequence))
}

/// Shared by producers (atomics, no lock on the hot path) and consumers (one lock per read).
#[derive(Debug)]
pub struct Ledger {
    nonce: u64,
    sent: Vec<AtomicU64>,
    acked: Vec<AtomicU64>,
    received: Mutex<Received>,
}

#[derive(Debug, Default)]
struct Received {
    bits: Vec<Vec<u64>>,
    unique: u64,
    total: u64,
    duplicates: u64,
    unexpected: u64,
}

/// The ledger's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// Messages the broker acknowledged (`OK` to PUB/MPUB).
    pub acknowledged: u64,
    /// Distinct acknowledged messages delivered at least once.
    pub received_unique: u64,
    /// Every delivery, duplicates included.
    pub received_total: u64,
    /// Deliveries of a message already seen.
    pub duplicates: u64,
    /// Acknowledged messages never delivered.
    pub missing: u64,
    /// Deliveries that are not ours: wrong run, unknown producer, never sent, or unreadable.
    pub unexpected: u64,
}

impl Summary {
    /// True when every acknowledged message came back exactly once and nothing else did.
    pub fn is_clean(&self) -> bool {
        self.missing == 0 && self.duplicates == 0 && self.unexpected == 0
    }
}

impl Ledger {
    /// A ledger for `producers` producers of run `nonce`.
    pub fn new(nonce: u64, producers: usize) -> Self {
        Ledger {
            nonce,
            sent: (0..producers).map(|_| AtomicU64::new(0)).collect(),
            acked: (0..producers).map(|_| AtomicU64::new(0)).collect(),
            received: Mutex::new(Received {
                bits: vec![Vec::new(); producers],
                ..Received::default()
            }),
        }
    }

    /// The run nonce every body must carry.
    pub fn nonce(&self) -> u64 {
        self.nonce
    }

    /// Producer `p` is about to write messages up to (excluding) sequence `upto`.
    pub fn mark_sent(&self, producer: usize, upto: u64) {
        self.sent[producer].store(upto, Ordering::Release);
    }

    /// The broker acknowledged producer `p`'s messages up to (excluding) sequence `upto`.
    pub fn mark_acked(&self, producer: usize, upto: u64) {
        self.acked[producer].store(upto, Ordering::Release);
    }

    /// Records a batch of delivered bodies under one lock.
    pub fn record_deliveries<'a>(&self, bodies: impl Iterator<Item = &'a [u8]>) {
        let mut received = self.received.lock().unwrap_or_else(|e| e.into_inner());
        for body in bodies {
            received.total += 1;
            let Some((nonce, producer, sequence)) = decode_body(body) else {
                received.unexpected += 1;
                continue;
            };
            let p = producer as usize;
            let known = nonce == self.nonce
                && p < self.sent.len()
                && sequence < self.sent[p].load(Ordering::Acquire);
            if !known {
                received.unexpected += 1;
                continue;
            }
            let (word, bit) = ((sequence / 64) as usize, sequence % 64);
            let bits = &mut received.bits[p];
            if bits.len() <= word {
                bits.resize((word + 1).next_power_of_two(), 0);
            }
            if bits[word] & (1 << bit) != 0 {
                received.duplicates += 1;
            } else {
                bits[word] |= 1 << bit;
                received.unique += 1;
            }
        }
    }

    /// Acknowledged messages not yet delivered (cheap: counts only).
    pub fn outstanding(&self) -> u64 {
        let acked: u64 = self.acked.iter().map(|a| a.load(Ordering::Acquire)).sum();
        let unique = self
            .received
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unique;
        acked.saturating_sub(unique)
    }

    /// Deliveries so far, duplicates included.
    pub fn received_total(&self) -> u64 {
        self.received
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .total
    }

    /// Acknowledged messages so far.
    pub fn acknowledged(&self) -> u64 {
        self.acked.iter().map(|a| a.load(Ordering::Acquire)).sum()
    }

    /// The exact verdict, checking every acknowledged sequence against the bitsets.
    pub fn summary(&self) -> Summary {
        let received = self.received.lock().unwrap_or_else(|e| e.into_inner());
        let mut acknowledged = 0;
        let mut received_unique = 0;
        for (p, acked) in self.acked.iter().enumerate() {
            let acked = acked.load(Ordering::Acquire);
            acknowledged += acked;
            let bits = &received.bits[p];
            received_unique += (0..acked)
                .filter(|s| {
                    bits.get((s / 64) as usize)
                        .is_some_and(|w| w & (1 << (s % 64)) != 0)
                })
                .count() as u64;
        }
        Summary {
            acknowledged,
            received_unique,
            received_total: received.total,
            duplicates: received.duplicates,
            missing: acknowledged - received_unique,
            unexpected: received.unexpected,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(nonce: u64, producer: u32, sequence: u64) -> Vec<u8> {
        let mut b = blank_body(100);
        encode_body(&mut b, nonce, producer, sequence);
        b
    }

    #[test]
    fn body_header_round_trips_and_short_bodies_are_rejected() {
        let b = body(42, 3, 1 << 40);
        assert_eq!(b.len(), 100);
        assert_eq!(decode_body(&b), Some((42, 3, 1 << 40)));
        assert_eq!(decode_body(&b[..19]), None);
    }

    #[test]
    fn a_complete_delivery_is_clean() {
        let ledger = Ledger::new(7, 2);
        ledger.mark_sent(0, 3);
        ledger.mark_sent(1, 1);
        ledger.mark_acked(0, 3);
        ledger.mark_acked(1, 1);
        let bodies = [body(7, 0, 2), body(7, 1, 0), body(7, 0, 0), body(7, 0, 1)];
        ledger.record_deliveries(bodies.iter().map(|b| &b[..]));
        assert_eq!(ledger.outstanding(), 0);
        let s = ledger.summary();
        assert!(s.is_clean(), "{s:?}");
        assert_eq!((s.acknowledged, s.received_unique), (4, 4));
    }

    #[test]
    fn counts_missing_duplicate_and_foreign_deliveries() {
        let ledger = Ledger::new(7, 1);
        ledger.mark_sent(0, 3);
        ledger.mark_acked(0, 3);
        let bodies = [
            body(7, 0, 0),
            body(7, 0, 0),  // duplicate
            body(8, 0, 1),  // another run
            body(7, 5, 1),  // unknown producer
            body(7, 0, 99), // never sent
            b"short".to_vec(),
        ];
        ledger.record_deliveries(bodies.iter().map(|b| &b[..]));
        let s = ledger.summary();
        assert_eq!(s.missing, 2);
        assert_eq!(s.duplicates, 1);
        assert_eq!(s.unexpected, 4);
        assert_eq!(s.received_total, 6);
        assert!(!s.is_clean());
        assert_eq!(ledger.outstanding(), 2);
    }

    #[test]
    fn a_delivery_that_beats_its_acknowledgement_still_counts() {
        let ledger = Ledger::new(1, 1);
        ledger.mark_sent(0, 1);
        ledger.record_deliveries([&body(1, 0, 0)[..]].into_iter());
        ledger.mark_acked(0, 1);
        assert!(ledger.summary().is_clean());
    }
}
