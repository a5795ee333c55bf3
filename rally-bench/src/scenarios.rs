//! The scenarios, one module per family.

pub(crate) mod cluster;
pub(crate) mod common;
pub(crate) mod dispatcher;
pub(crate) mod grain;
pub(crate) mod local;
pub(crate) mod otel;
pub(crate) mod raw_echo;
pub(crate) mod remote;
