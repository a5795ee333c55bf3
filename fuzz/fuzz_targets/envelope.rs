//! Arbitrary bodies through the data-phase decoders (messages, system messages, grain requests
//! and their outcomes, replies, definitions, heartbeats); what decodes must re-encode identically.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use rally_wire::{
    FrameKind, begin_frame, finish_frame, split_frame, write_grain_outcome, write_grain_request,
    write_message_header,
};

fuzz_target!(|data: &[u8]| {
    if let Ok((header, payload)) = rally_wire::decode_message(data) {
        let mut out = BytesMut::new();
        let mark = begin_frame(&mut out, FrameKind::Message);
        write_message_header(&mut out, &header);
        out.extend_from_slice(payload);
        finish_frame(&mut out, mark, u32::MAX).unwrap();
        let (_, body, _) = split_frame(&out, u32::MAX).unwrap().unwrap();
        let (again, rest) = rally_wire::decode_message(body).unwrap();
        assert_eq!((again, rest), (header, payload));
    }
    if let Ok(msg) = rally_wire::decode_system(data) {
        let mut out = BytesMut::new();
        rally_wire::encode_system(&mut out, &msg);
        let (_, body, _) = split_frame(&out, u32::MAX).unwrap().unwrap();
        assert_eq!(rally_wire::decode_system(body).unwrap(), msg);
    }
    if let Ok((header, identity, payload)) = rally_wire::decode_grain_request(data) {
        let mut out = BytesMut::new();
        let mark = begin_frame(&mut out, FrameKind::GrainRequest);
        write_grain_request(&mut out, &header, identity);
        out.extend_from_slice(payload);
        finish_frame(&mut out, mark, u32::MAX).unwrap();
        let (_, body, _) = split_frame(&out, u32::MAX).unwrap().unwrap();
        let again = rally_wire::decode_grain_request(body).unwrap();
        assert_eq!(again, (header, identity, payload));
    }
    if let Ok((outcome, body)) = rally_wire::decode_grain_outcome(data) {
        let mut out = BytesMut::new();
        write_grain_outcome(&mut out, outcome, body);
        assert_eq!(rally_wire::decode_grain_outcome(&out).unwrap(), (outcome, body));
    }
    let _ = rally_wire::decode_reply(data);
    let _ = rally_wire::decode_define_recipient(data);
    let _ = rally_wire::decode_define_manifest(data);
    let _ = rally_wire::decode_heartbeat(data);
});
