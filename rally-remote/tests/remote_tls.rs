//! Mutual TLS between nodes: certificates from files signed by one CA; a node with a
//! certificate from another CA, or speaking plain TCP, is refused with an error naming the cause.

#[path = "support/nodes.rs"]
mod nodes;
#[path = "support/pki.rs"]
mod pki;

use std::sync::Arc;

use nodes::{Echo, T, Target, config, target_node_on};
use pki::{NodePem, TestCa};
use rally_actor::AskError;
use rally_remote::transport::{TcpTransport, TlsTransport, Transport};
use rally_test::eventually;

/// Writes the PEM files into a fresh directory and loads them as a node would.
fn transport_from_files(pem: &NodePem, dir: &std::path::Path) -> Arc<dyn Transport> {
    std::fs::create_dir_all(dir).unwrap();
    let (cert, key, ca) = (
        dir.join("node.crt"),
        dir.join("node.key"),
        dir.join("ca.crt"),
    );
    std::fs::write(&cert, &pem.cert).unwrap();
    std::fs::write(&key, &pem.key).unwrap();
    std::fs::write(&ca, &pem.ca).unwrap();
    Arc::new(TlsTransport::from_files(&cert, &key, &ca).unwrap())
}

fn scratch(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("rally-tls-{}-{name}", std::process::id()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_with_certificates_from_one_ca_talk() {
    let ca = TestCa::new();
    let (_bs, b) = target_node_on(
        "b",
        config(),
        transport_from_files(&ca.issue(), &scratch("b")),
    )
    .await;
    let (_as, a) = target_node_on(
        "a",
        config(),
        transport_from_files(&ca.issue(), &scratch("a")),
    )
    .await;
    let target = a.lookup::<Target>(b.address(), "target");
    for i in 0..1000 {
        assert_eq!(target.ask(Echo(i), T).await, Ok(i));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_or_plain_tcp_is_refused() {
    let ca = TestCa::new();
    let (_bs, b) = target_node_on(
        "b",
        config(),
        transport_from_files(&ca.issue(), &scratch("b2")),
    )
    .await;
    let stranger_pem = TestCa::new().issue();
    let stranger = TlsTransport::from_pem(
        stranger_pem.cert.as_bytes(),
        stranger_pem.key.as_bytes(),
        stranger_pem.ca.as_bytes(),
    )
    .unwrap();
    let (_xs, x) = target_node_on("x", config(), Arc::new(stranger)).await;
    let target = x.lookup::<Target>(b.address(), "target");
    // The caller hears why, not a timeout: the certificate is not trusted.
    match target.ask(Echo(1), T).await {
        Err(AskError::Undeliverable(why)) => assert!(why.contains("TLS"), "{why}"),
        other => panic!("expected a typed TLS refusal, got {other:?}"),
    }
    assert!(x.stats().handshake_failures >= 1, "{:?}", x.stats());
    // The accepting side counts the foreign certificate too (before any other bad peer).
    eventually("B counts the foreign certificate", T, async || {
        match b.stats() {
            stats if stats.handshake_failures == 0 => Err(stats),
            _ => Ok(()),
        }
    })
    .await;
    let after_foreign = b.stats().handshake_failures;
    // A plain-TCP node calling the TLS node hears that the peer speaks TLS (before: a timeout).
    let (_ps, plain) = target_node_on("p", config(), Arc::new(TcpTransport)).await;
    let target = plain.lookup::<Target>(b.address(), "target");
    match target.ask(Echo(1), T).await {
        Err(AskError::Undeliverable(why)) => {
            assert!(why.contains("speaks TLS and this node plain TCP"), "{why}")
        }
        other => panic!("expected a typed refusal naming TLS, got {other:?}"),
    }
    assert!(plain.stats().handshake_failures >= 1, "{:?}", plain.stats());
    // And the TLS node calling the plain one hears that its answer is not TLS.
    let target = b.lookup::<Target>(plain.address(), "target");
    match target.ask(Echo(1), T).await {
        Err(AskError::Undeliverable(why)) => assert!(why.contains("is not TLS"), "{why}"),
        other => panic!("expected a typed refusal naming plain TCP, got {other:?}"),
    }
    assert!(
        b.stats().handshake_failures > after_foreign,
        "B counts the plain-TCP peer as well: {:?}",
        b.stats()
    );
    // A properly certified node still gets through.
    let (_as, a) = target_node_on(
        "a",
        config(),
        transport_from_files(&ca.issue(), &scratch("a2")),
    )
    .await;
    assert_eq!(
        a.lookup::<Target>(b.address(), "target")
            .ask(Echo(9), T)
            .await,
        Ok(9)
    );
}

#[test]
fn unreadable_or_bad_pem_is_a_clear_error() {
    let missing = TlsTransport::from_files(
        "/nonexistent/a.crt".as_ref(),
        "/nonexistent/a.key".as_ref(),
        "/nonexistent/ca.crt".as_ref(),
    );
    assert!(
        missing
            .unwrap_err()
            .to_string()
            .contains("/nonexistent/a.crt")
    );
    let garbage = TlsTransport::from_pem(b"not pem", b"not pem", b"not pem");
    assert!(garbage.is_err());
}
