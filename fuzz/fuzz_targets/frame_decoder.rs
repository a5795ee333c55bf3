//! Arbitrary bytes through the frame splitter and every body decoder, as a reader sees them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rally_wire::{FrameKind, split_frame};

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while let Ok(Some((kind, body, used))) = split_frame(rest, 1 << 16) {
        assert!(used <= rest.len() && body.len() < used);
        match kind {
            FrameKind::Message => drop(rally_wire::decode_message(body)),
            FrameKind::Reply => drop(rally_wire::decode_reply(body)),
            FrameKind::DefineRecipient => drop(rally_wire::decode_define_recipient(body)),
            FrameKind::DefineManifest => drop(rally_wire::decode_define_manifest(body)),
            FrameKind::Heartbeat => drop(rally_wire::decode_heartbeat(body)),
            FrameKind::System => drop(rally_wire::decode_system(body)),
            _ => {}
        }
        rest = &rest[used..];
    }
});
