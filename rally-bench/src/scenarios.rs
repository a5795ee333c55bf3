//! The scenarios, one module per family.

pub mod common;
pub mod dispatcher;
pub mod local;
pub mod raw_echo;
pub mod remote;
