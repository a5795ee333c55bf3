//! The endpoint every member answers the dashboard from: `rally.dashboard.figures`, exposed on
//! the member's node, answers [`FiguresRequest`] with the member's figures over its last
//! period (a [`Recorder`](crate::Recorder) runs on the member every second).

use std::sync::Arc;
use std::time::Duration;

use rally_actor::sync::Mutex;
use rally_actor::{ActorResult, Context, Handler, Message};
use rally_remote::{MessageTable, RemoteActor, RemoteMessage, RemoteNode};
use serde::{Deserialize, Serialize};

use super::DashboardError;
use super::view::MemberFigures;
use crate::report::{PeriodReport, periodic};

/// The name the endpoint is exposed under on every member.
pub(crate) const ENDPOINT: &str = "rally.dashboard.figures";

/// A member's period: one second, so the dashboard's charts move every second and a
/// bottleneck shows within two.
pub(crate) const PERIOD: Duration = Duration::from_secs(1);

/// "Your figures over your last period."
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct FiguresRequest;

impl Message for FiguresRequest {
    type Reply = MemberFigures;
}

impl RemoteMessage for FiguresRequest {
    const MANIFEST: &'static str = "rally.dashboard.FiguresRequest";
}

/// Answers [`FiguresRequest`] from the latest period report.
pub(crate) struct Figures {
    latest: Arc<Mutex<PeriodReport>>,
}

impl rally_actor::Actor for Figures {}

impl Handler<FiguresRequest> for Figures {
    async fn handle(
        &mut self,
        _: FiguresRequest,
        _: &mut Context<Self>,
    ) -> ActorResult<MemberFigures> {
        let report = self.latest.lock().clone();
        Ok(MemberFigures::from_report(&report))
    }
}

impl RemoteActor for Figures {
    fn messages(table: &mut MessageTable<Self>) {
        table.add::<FiguresRequest>();
    }
}

/// Starts the member's recorder and exposes its endpoint.
pub(crate) fn expose(node: &RemoteNode) -> Result<(), DashboardError> {
    let system = node.system();
    let latest = Arc::new(Mutex::new(PeriodReport::default()));
    let actor = system
        .spawn(Figures {
            latest: Arc::clone(&latest),
        })
        .map_err(|e| DashboardError::Expose(e.to_string()))?;
    if let Err(e) = node.expose(ENDPOINT, &actor) {
        actor.stop();
        return Err(match e {
            rally_remote::ExposeError::NameTaken(_) => DashboardError::AlreadyExposed,
            other => DashboardError::Expose(other.to_string()),
        });
    }
    // Ends when the system shuts down.
    drop(periodic(system, PERIOD, latest));
    Ok(())
}
