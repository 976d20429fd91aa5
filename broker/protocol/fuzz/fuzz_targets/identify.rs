//! Feeds arbitrary bytes to the IDENTIFY JSON parser and negotiation.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rustqueue_protocol::identify::{IdentifyLimits, IdentifyRequest, negotiate};

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = IdentifyRequest::parse(data) {
        let _ = negotiate(&req, &IdentifyLimits::default());
    }
});
