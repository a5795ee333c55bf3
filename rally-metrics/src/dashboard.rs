//! The cluster dashboard: one web page, served by any member, showing every member of the
//! cluster, live.
//!
//! - **Members** and their status in the serving member's view; per member its dispatchers and
//!   its hottest actors with the diagnosis in words ([`Verdict`](crate::Verdict)).
//! - **Virtual-actor kinds**: activations, leases, activation and move rates, calls per second
//!   and the 99th percentile of call time, per member and for the cluster, and a listing of
//!   what is active, a page at a time.
//! - **Charts** of the last five minutes: grain calls per second, p99 call time, messages
//!   queued and handled, one line per member (uPlot, vendored: the page loads nothing from
//!   the network).
//!
//! The serving member gathers the figures every second from every member in its view, through
//! the endpoint each member exposes on its node (`expose`) and Rally's own connections; a
//! member that does not answer is listed with the reason. Every member runs its own period
//! recorder, so the diagnosis of a member is made from its own counters.
//!
//! | path | what |
//! |---|---|
//! | `/` | the page (HTML rendered on the server; it refreshes itself every second) |
//! | `/api/cluster` | the same as JSON: a [`ClusterView`] |
//! | `/active?kind=K` | what is active of kind `K`, a page at a time, with a link to the next |
//! | `/api/active?kind=K&limit=N&cursor=C` | the same as JSON (`identities`, `next`, `skipped`) |
//!
//! The data types ([`ClusterView`] and its parts) are always here, so a client can read
//! `/api/cluster` (`rally top --cluster` does); `serve` and `expose` need the `cluster`
//! feature of `rally` (with `metrics`).

#[cfg(feature = "cluster")]
mod member;
#[cfg(feature = "cluster")]
mod page;
#[cfg(feature = "cluster")]
mod serve;
mod view;

pub use view::{Charts, ClusterView, HOTTEST, KindFigures, KindView, MemberFigures, MemberView};

#[cfg(feature = "cluster")]
pub use cluster_side::{Dashboard, DashboardError, expose, serve};

#[cfg(feature = "cluster")]
mod cluster_side {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use rally_actor::sync::Mutex;
    use rally_cluster::Cluster;
    use rally_remote::RemoteNode;

    use super::ClusterView;

    /// Why the dashboard, or a member's endpoint for it, did not start.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::metrics::dashboard::DashboardError;
    ///
    /// let error = DashboardError::AlreadyExposed;
    /// assert!(error.to_string().contains("exposed already"));
    /// ```
    #[derive(Debug, thiserror::Error)]
    #[non_exhaustive]
    pub enum DashboardError {
        /// The address could not be bound.
        #[error("cannot listen on {addr}: {source}")]
        Bind {
            /// The address asked for.
            addr: SocketAddr,
            /// The operating system's error.
            source: std::io::Error,
        },
        /// The member's endpoint is exposed already on this node ([`expose`] was called
        /// before).
        #[error("this member's dashboard endpoint is exposed already")]
        AlreadyExposed,
        /// The member's endpoint could not be exposed (the actor system is shutting down).
        #[error("cannot expose this member's dashboard endpoint: {0}")]
        Expose(String),
    }

    /// A running dashboard; dropping it stops serving (the member's endpoint stays).
    ///
    /// # Example
    ///
    /// See [`serve`].
    #[derive(Debug)]
    pub struct Dashboard {
        pub(super) addr: SocketAddr,
        pub(super) view: Arc<Mutex<ClusterView>>,
        pub(super) tasks: [tokio::task::AbortHandle; 2],
    }

    impl Dashboard {
        /// The address it listens on (useful after binding port 0).
        pub fn local_addr(&self) -> SocketAddr {
            self.addr
        }

        /// The cluster as last gathered (what `/api/cluster` answers).
        pub fn view(&self) -> ClusterView {
            self.view.lock().clone()
        }
    }

    impl Drop for Dashboard {
        fn drop(&mut self) {
            for task in &self.tasks {
                task.abort();
            }
        }
    }

    /// Serves the cluster dashboard of `cluster` on `addr` over HTTP/1.1, gathering every
    /// second from every member in this member's view (this member's own endpoint is exposed
    /// too, as [`expose`] does).
    ///
    /// # Errors
    ///
    /// [`DashboardError::Bind`] when the address cannot be bound; [`DashboardError::Expose`]
    /// when this member's endpoint cannot be exposed (one exposed already by [`expose`] is
    /// used as it is).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: nothing is started before the listener is bound, and a cancelled call
    /// drops it.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use rally::ActorSystem;
    /// use rally::cluster::{Cluster, ClusterConfig};
    /// use rally::remote::{RemoteConfig, RemoteNode};
    ///
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::new("shop");
    /// let remote = RemoteConfig::builder().listen("127.0.0.1", 2552).secret(b"cluster secret".to_vec()).build().unwrap();
    /// let node = RemoteNode::start(&system, remote).await.unwrap();
    /// let cluster = Cluster::join(&system, &node, ClusterConfig::default()).unwrap();
    /// let dashboard = rally::metrics::dashboard::serve(&cluster, &node, "127.0.0.1:9470".parse().unwrap())
    ///     .await
    ///     .unwrap();
    /// println!("open http://{}/", dashboard.local_addr());
    /// # }
    /// ```
    pub async fn serve(
        cluster: &Cluster,
        node: &RemoteNode,
        addr: SocketAddr,
    ) -> Result<Dashboard, DashboardError> {
        super::serve::serve(cluster, node, addr).await
    }

    /// Makes this member answer the dashboard: exposes the endpoint `rally.dashboard.figures`
    /// on `node` and records a period of its figures every second. Call it on every member
    /// (the serving one does it in [`serve`]); a member that does not is listed without
    /// figures.
    ///
    /// # Errors
    ///
    /// [`DashboardError::AlreadyExposed`] if it is exposed already on this node;
    /// [`DashboardError::Expose`] if the actor system is shutting down.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::ActorSystem;
    /// use rally::remote::{RemoteConfig, RemoteNode};
    ///
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::new("shop");
    /// let remote = RemoteConfig::builder().listen("127.0.0.1", 0).secret(b"cluster secret".to_vec()).build().unwrap();
    /// let node = RemoteNode::start(&system, remote).await.unwrap();
    /// rally::metrics::dashboard::expose(&node).unwrap();
    /// assert!(matches!(
    ///     rally::metrics::dashboard::expose(&node),
    ///     Err(rally::metrics::dashboard::DashboardError::AlreadyExposed)
    /// ));
    /// # }
    /// ```
    pub fn expose(node: &RemoteNode) -> Result<(), DashboardError> {
        super::member::expose(node)
    }
}
