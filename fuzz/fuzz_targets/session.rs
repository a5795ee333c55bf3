//! The data-phase session decoder on arbitrary bytes, split into arbitrary reads: it never
//! panics, never hands on a frame twice, and either consumes bytes or asks for more.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use rally_wire::InboundDecoder;

fuzz_target!(|data: &[u8]| {
    let Some((&split, bytes)) = data.split_first() else {
        return;
    };
    let mut decoder = InboundDecoder::new(64 * 1024, Duration::from_secs(10));
    let start = Instant::now();
    let step = usize::from(split).max(1);
    let mut buf = Vec::new();
    for (i, chunk) in bytes.chunks(step).enumerate() {
        buf.extend_from_slice(chunk);
        let now = start + Duration::from_millis(i as u64);
        match decoder.decode(&buf, now, |_| {}) {
            Ok(used) => {
                assert!(used <= buf.len());
                buf.drain(..used);
            }
            Err(_) => return,
        }
        let _ = decoder.check(now);
    }
});
