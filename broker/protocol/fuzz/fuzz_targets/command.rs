//! Feeds arbitrary bytes to the command stream decoder, split at a data-chosen point.
#![no_main]
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use rustqueue_protocol::{Decoder, DecoderLimits};

fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |b| *b as usize).min(data.len());
    let mut d = Decoder::new(DecoderLimits::default());
    let mut buf = BytesMut::new();
    for part in [&data[..split], &data[split..]] {
        buf.extend_from_slice(part);
        while let Ok(Some(_)) = d.decode(&mut buf) {}
    }
});
