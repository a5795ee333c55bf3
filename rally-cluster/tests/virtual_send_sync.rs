//! The virtual-actor handles can be shared across tasks and threads.

use rally::cluster::virtual_actors::{
    Activation, AskError, GetError, GrainNetwork, GrainRef, KindStats, TellError, VirtualActors,
    VirtualActorsConfig,
};

mod virtual_support;

fn send_sync<T: Send + Sync>() {}

#[test]
fn public_handles_are_send_and_sync() {
    send_sync::<VirtualActors>();
    send_sync::<GrainRef<virtual_support::Probe>>();
    send_sync::<Activation>();
    send_sync::<GrainNetwork>();
    send_sync::<AskError>();
    send_sync::<GetError>();
    send_sync::<TellError>();
    send_sync::<KindStats>();
    send_sync::<VirtualActorsConfig>();
}
