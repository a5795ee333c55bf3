//! HTTP for the endpoint tests: a GET over real loopback with ureq, off the runtime's threads,
//! and a sample read from Prometheus text.
#![allow(dead_code)]

use std::time::Duration;

/// What a GET answered.
pub(crate) struct Got {
    pub(crate) status: u16,
    pub(crate) content_type: String,
    pub(crate) body: String,
}

/// `GET http://addr/path`, whatever the status (a 404 is an answer too).
pub(crate) async fn get(addr: std::net::SocketAddr, path: &str) -> Got {
    let url = format!("http://{addr}{path}");
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        let mut response = agent.get(&url).call().expect("the endpoint answers");
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().expect("an ASCII content type").to_owned())
            .unwrap_or_default();
        Got {
            status: response.status().as_u16(),
            content_type,
            body: response.body_mut().read_to_string().expect("a text body"),
        }
    })
    .await
    .expect("the request ran")
}

/// `GET /metrics`, which must answer 200: the Prometheus text.
pub(crate) async fn scrape(addr: std::net::SocketAddr) -> String {
    let got = get(addr, "/metrics").await;
    assert_eq!(got.status, 200, "{}", got.body);
    got.body
}

/// The value of the sample `name{labels}` in Prometheus text, if it is there.
pub(crate) fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|value| value.parse().expect("a number"))
}
