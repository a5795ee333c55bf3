//! Arbitrary frames fed to both handshake state machines: never a panic, never `Done` without
//! a valid proof (a fuzzer cannot forge an HMAC).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use rally_wire::*;

fn config(port: u16) -> HandshakeConfig {
    HandshakeConfig {
        local: UniqueAddress { address: NodeAddress { system: "f".into(), host: "h".into(), port }, incarnation: Incarnation(1) },
        secret: b"fuzz secret".to_vec(),
        cluster: "fuzz".into(),
        max_frame_len: 1 << 16,
    }
}

fuzz_target!(|data: &[u8]| {
    let mut server = ServerHandshake::new(config(1), [3; 32]);
    let mut client = ClientHandshake::new(config(2), config(1).local.address, Lane::Control, [4; 32]);
    let mut out = BytesMut::new();
    client.start(&mut out);
    let (preface, mut rest) = match data.split_first_chunk::<PREFACE_LEN>() {
        Some((p, r)) => (*p, r),
        None => return,
    };
    let server_ok = server.on_preface(&preface, &mut out).is_ok();
    while let Ok(Some((kind, body, used))) = split_frame(rest, 1 << 16) {
        if server_ok {
            if let Ok(HandshakeEvent::Done(_)) = server.on_frame(kind, body, &mut out) {
                panic!("the server accepted a client without the secret");
            }
        }
        if let Ok(HandshakeEvent::Done(_)) = client.on_frame(kind, body, &mut out) {
            panic!("the client accepted a server without the secret");
        }
        rest = &rest[used..];
    }
});
