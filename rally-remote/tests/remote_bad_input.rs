//! Bad peers and bad bytes on a real TCP port: each gets a clear outcome, the node stays up and
//! keeps serving a good peer throughout.

#[path = "support/nodes.rs"]
mod nodes;

use std::time::Duration;

use bytes::BytesMut;
use nodes::{Echo, SECRET, T, Target, client_node, config, target_node};
use rally_remote::RemoteNode;
use rally_test::eventually;
use rally_wire::{
    ClientHandshake, FrameKind, HandshakeConfig, HandshakeEvent, Incarnation, Lane, MessageHeader,
    NodeAddress, SystemMessage, UniqueAddress, begin_frame, encode_define_manifest,
    encode_define_recipient, encode_system, finish_frame, split_frame, write_message_header,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn connect(node: &RemoteNode) -> TcpStream {
    TcpStream::connect((node.address().host.as_str(), node.address().port))
        .await
        .unwrap()
}

/// Reads until the node closes the connection (or `within` passes); returns whether it closed.
async fn closed_by_peer(stream: &mut TcpStream, within: Duration) -> bool {
    let mut sink = vec![0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// A raw client that authenticates like a node, to send hand-made frames afterwards.
async fn authenticated(
    node: &RemoteNode,
    secret: &[u8],
) -> Result<TcpStream, rally_wire::HandshakeError> {
    let mut stream = connect(node).await;
    let local = UniqueAddress {
        address: NodeAddress {
            system: "raw".into(),
            host: "127.0.0.1".into(),
            port: 1,
        },
        incarnation: Incarnation(rand_incarnation()),
    };
    let config = HandshakeConfig {
        local,
        secret: secret.to_vec(),
        cluster: "rally".into(),
        max_frame_len: 1 << 20,
    };
    let mut handshake =
        ClientHandshake::new(config, node.address().clone(), Lane::Ordinary(0), [9; 32]);
    let mut out = BytesMut::new();
    handshake.start(&mut out);
    stream.write_all(&out).await.unwrap();
    let mut buf = BytesMut::new();
    loop {
        while let Some((kind, body, used)) = split_frame(&buf, 1 << 20).unwrap() {
            out.clear();
            let event = handshake.on_frame(kind, body, &mut out)?;
            stream.write_all(&out).await.unwrap();
            let _ = buf.split_to(used);
            if let HandshakeEvent::Done(_) = event {
                return Ok(stream);
            }
        }
        if stream.read_buf(&mut buf).await.unwrap() == 0 {
            panic!("closed during the handshake");
        }
    }
}

fn rand_incarnation() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn message(recipient: u32, manifest: u32, request_id: u64, payload: &[u8]) -> BytesMut {
    let mut out = BytesMut::new();
    let mark = begin_frame(&mut out, FrameKind::Message);
    write_message_header(
        &mut out,
        &MessageHeader {
            recipient,
            manifest,
            request_id,
        },
    );
    out.extend_from_slice(payload);
    finish_frame(&mut out, mark, 1 << 20).unwrap();
    out
}

/// A good peer still gets answers.
async fn good_peer_still_served(good: &rally_actor::ActorRef<Target>) {
    assert_eq!(good.ask(Echo(42), T).await, Ok(42));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_protocols_and_wrong_prefaces_are_dropped() {
    let (_bs, b) = target_node("b", config()).await;
    let (_as, a) = client_node("a", config()).await;
    let good = a.lookup::<Target>(b.address(), "target");
    good_peer_still_served(&good).await;
    let cases: [(&str, &[u8]); 4] = [
        ("http", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        (
            "tls client hello",
            &[0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00],
        ),
        ("wrong magic", b"RALX\x00\x01"),
        ("wrong version", b"RALY\x00\x63"),
    ];
    for (name, bytes) in cases {
        let before = b.stats().handshake_failures;
        let mut stream = connect(&b).await;
        stream.write_all(bytes).await.unwrap();
        assert!(
            closed_by_peer(&mut stream, Duration::from_secs(5)).await,
            "{name}: the node keeps the connection open"
        );
        // Counted before the close, each case on its own.
        assert_eq!(
            b.stats().handshake_failures,
            before + 1,
            "{name}: counted once"
        );
        good_peer_still_served(&good).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_fails_the_handshake_on_both_sides() {
    let (_bs, b) = target_node("b", config()).await;
    // The node proves itself first, so a client with the wrong secret stops at the challenge.
    let error = authenticated(&b, b"not the secret").await.unwrap_err();
    assert_eq!(error, rally_wire::HandshakeError::BadServerProof);
    // A whole node with the wrong secret: the caller gets a typed error naming the cause, not
    // a timeout, and both sides count the failure.
    let mut wrong = config();
    wrong.secret = b"wrong".to_vec();
    let (_as, stranger) = client_node("stranger", wrong).await;
    let target = stranger.lookup::<Target>(b.address(), "target");
    match target.ask(Echo(1), T).await {
        Err(rally_actor::AskError::Undeliverable(why)) => {
            assert!(why.contains("different secret"), "{why}")
        }
        other => panic!("expected a typed refusal, got {other:?}"),
    }
    assert!(stranger.stats().handshake_failures >= 1);
    // B counts it when it reads the stranger's Reject, a moment after the stranger gave up.
    eventually("B counts the refused proof", T, async || {
        b.stats().handshake_failures >= 2
    })
    .await;
    // Later sends fail at once with the same reason.
    assert!(matches!(
        target.ask(Echo(2), T).await,
        Err(rally_actor::AskError::Undeliverable(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_system_message_without_a_handshake_is_refused() {
    let (_bs, b) = target_node("b", config()).await;
    let mut stream = connect(&b).await;
    let mut out = BytesMut::new();
    rally_wire::encode_preface(&mut out);
    encode_system(
        &mut out,
        &SystemMessage::Terminated {
            actor: "target".into(),
        },
    );
    stream.write_all(&out).await.unwrap();
    assert!(closed_by_peer(&mut stream, Duration::from_secs(5)).await);
    let (_as, a) = client_node("a", config()).await;
    good_peer_still_served(&a.lookup::<Target>(b.address(), "target")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4gib_length_prefix_is_refused_before_allocating_and_the_peer_quarantined() {
    let (_bs, b) = target_node("b", config()).await;
    let mut stream = authenticated(&b, SECRET).await.unwrap();
    stream
        .write_all(&[0xff, 0xff, 0xff, 0xff, 0x10])
        .await
        .unwrap();
    assert!(closed_by_peer(&mut stream, Duration::from_secs(5)).await);
    let stats = b.stats();
    assert_eq!(stats.protocol_errors, 1);
    let (_as, a) = client_node("a", config()).await;
    good_peer_still_served(&a.lookup::<Target>(b.address(), "target")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_frame_then_silence_is_closed_by_timeout() {
    let mut short = config();
    short.partial_frame_timeout = Duration::from_millis(300);
    let (_bs, b) = target_node("b", short).await;
    let mut stream = authenticated(&b, SECRET).await.unwrap();
    stream.write_all(&[100, 0, 0, 0, 0x10, 1, 2]).await.unwrap();
    assert!(
        closed_by_peer(&mut stream, Duration::from_secs(5)).await,
        "a stalled partial frame must be closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_manifests_and_garbage_payloads_are_dropped_and_counted_and_the_connection_lives() {
    let (_bs, b) = target_node("b", config()).await;
    let mut stream = authenticated(&b, SECRET).await.unwrap();
    let mut out = BytesMut::new();
    encode_define_recipient(&mut out, 1, "target");
    encode_define_manifest(&mut out, 1, "no.such.Type");
    encode_define_manifest(&mut out, 2, "test.Echo");
    out.extend_from_slice(&message(1, 1, 0, b"whatever"));
    // test.Echo's payload is a varint u64: 0xff 0xff ... never ends.
    out.extend_from_slice(&message(1, 2, 0, &[0xff; 12]));
    stream.write_all(&out).await.unwrap();
    // Both are dropped and counted; the connection stays open.
    eventually("both are counted", T, async || match b.stats() {
        stats if stats.unknown_manifest == 1 && stats.decode_failed == 1 => Ok(()),
        stats => Err(stats),
    })
    .await;
    assert!(
        !closed_by_peer(&mut stream, Duration::from_millis(300)).await,
        "the connection must live on"
    );
    // A valid message on the same connection is still delivered.
    let mut valid = BytesMut::new();
    encode_define_manifest(&mut valid, 3, "test.Record");
    valid.extend_from_slice(&message(1, 3, 0, &[5]));
    stream.write_all(&valid).await.unwrap();
    let (_as, a) = client_node("a", config()).await;
    let target = a.lookup::<Target>(b.address(), "target");
    eventually("the valid Record arrives", T, async || {
        target.ask(nodes::Check, T).await == Ok((1, true))
    })
    .await;
    assert_eq!(b.stats().protocol_errors, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_used_before_its_definition_closes_the_connection() {
    let (_bs, b) = target_node("b", config()).await;
    let mut stream = authenticated(&b, SECRET).await.unwrap();
    stream.write_all(&message(7, 7, 0, b"")).await.unwrap();
    assert!(closed_by_peer(&mut stream, Duration::from_secs(5)).await);
    assert_eq!(b.stats().protocol_errors, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_announcing_a_large_frame_is_refused_before_authentication() {
    // Before authentication a frame may be a few KiB at most, whatever the data-phase maximum:
    // an unauthenticated peer must not make the node buffer megabytes.
    let mut patient = config();
    patient.handshake_timeout = Duration::from_secs(60);
    let (_bs, b) = target_node("b", patient).await;
    let mut stream = connect(&b).await;
    let mut out = BytesMut::new();
    rally_wire::encode_preface(&mut out);
    out.extend_from_slice(&(1024u32 * 1024).to_le_bytes());
    out.extend_from_slice(&[FrameKind::Hello as u8, 0, 0, 0]);
    stream.write_all(&out).await.unwrap();
    assert!(
        closed_by_peer(&mut stream, Duration::from_secs(10)).await,
        "a 1 MiB Hello must be refused at once, not buffered until the handshake deadline"
    );
    assert_eq!(b.stats().handshake_failures, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_frame_dripped_a_byte_at_a_time_is_bounded_as_a_whole() {
    // The bound is on the whole frame: a peer that sends one byte every 200 ms of a 100-byte
    // frame never lets a read wait the full 1 s, yet the frame is not done after 1 s.
    let mut short = config();
    short.partial_frame_timeout = Duration::from_secs(1);
    let (_bs, b) = target_node("b", short).await;
    let mut stream = authenticated(&b, SECRET).await.unwrap();
    stream.write_all(&[100, 0, 0, 0, 0x10]).await.unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if stream.write_all(&[0]).await.is_err() {
                return true;
            }
            let mut probe = [0u8; 1];
            if let Ok(Ok(0)) =
                tokio::time::timeout(Duration::from_millis(1), stream.read(&mut probe)).await
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(closed, Ok(true), "the dripping peer was never cut off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_of_another_protocol_version_is_a_typed_error_for_the_caller() {
    // A listener that answers every preface as a node of another version does: with
    // Reject{UnsupportedVersion} (the Reject frame is the same in every version).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        for _ in 0..16 {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let mut preface = [0u8; rally_wire::PREFACE_LEN];
            if stream.read_exact(&mut preface).await.is_ok() {
                let mut reject = BytesMut::new();
                let mark = begin_frame(&mut reject, FrameKind::Reject);
                reject.extend_from_slice(&[rally_wire::RejectReason::UnsupportedVersion as u8]);
                finish_frame(&mut reject, mark, 64).unwrap();
                let _ = stream.write_all(&reject).await;
            }
        }
    });
    let (_as, a) = client_node("a", config()).await;
    let elsewhere: NodeAddress = format!("rally://old@127.0.0.1:{port}").parse().unwrap();
    let target = a.lookup::<Target>(&elsewhere, "target");
    match target.ask(Echo(1), T).await {
        Err(rally_actor::AskError::Undeliverable(why)) => {
            assert!(why.contains("protocol version"), "{why}")
        }
        other => panic!("expected a typed refusal naming the version, got {other:?}"),
    }
    assert!(a.stats().handshake_failures >= 1);
    server.abort();
}
