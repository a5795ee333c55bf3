//! Rally (being assembled).
pub use rally_actor::*;
