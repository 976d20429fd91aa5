//! Feeds arbitrary bytes to the MPUB body decoder.
#![no_main]
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rustqueue_protocol::command::decode_mpub_body;

fuzz_target!(|data: &[u8]| {
    let _ = decode_mpub_body(Bytes::copy_from_slice(data), 1 << 20);
});
