//! Pins the `Send`/`Sync`-ness of the public types of `rally::otel`, so a change is a compile
//! error here.

use rally::otel::{FlushError, InstallError, Tracing, TracingBuilder, TracingFilter};

fn send_sync<T: Send + Sync>() {}

#[test]
fn public_types_are_send_and_sync() {
    send_sync::<Tracing>();
    send_sync::<TracingBuilder>();
    send_sync::<TracingFilter>();
    send_sync::<InstallError>();
    send_sync::<FlushError>();
    send_sync::<rally_test::otlp::Receiver>();
    send_sync::<rally_test::otlp::Received>();
}
