//! The scenarios, one module per family.

pub mod common;
pub mod local;
