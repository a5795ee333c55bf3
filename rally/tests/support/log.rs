//! What `tracing` logs on the test's thread, kept in memory so a test can read it.
#![allow(dead_code)] // each test uses the part it needs

use std::io::Write;
use std::sync::Arc;

use rally::sync::Mutex;
use tracing_subscriber::fmt::format::FmtSpan;

/// A `tracing` writer that keeps everything in memory.
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Everything logged so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.0.lock().clone()).unwrap()
    }
}

/// Starts capturing what this thread logs (plain text, no colours), until the guard drops.
pub(crate) fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    capture_with(FmtSpan::NONE)
}

/// As [`capture`], with a line for every span opened.
pub(crate) fn capture_with_spans() -> (Captured, tracing::subscriber::DefaultGuard) {
    capture_with(FmtSpan::NEW)
}

fn capture_with(span_events: FmtSpan) -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_span_events(span_events)
        .with_ansi(false)
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}
