//! The TOML form of [`RemoteConfig`]: kebab-case keys, durations as text, the secret only by
//! reference (`secret-file`, `secret-env`).

use std::path::PathBuf;
use std::time::Duration;

use rally_actor::config_text;
use serde::Deserialize;

use super::{RemoteConfig, RemoteConfigBuilder, RemoteConfigError};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct File {
    host: Option<String>,
    port: Option<u16>,
    secret_file: Option<PathBuf>,
    secret_env: Option<String>,
    cluster_name: Option<String>,
    max_frame_bytes: Option<u32>,
    outbound_lane_bytes: Option<usize>,
    ordinary_lanes: Option<u8>,
    large_message_destinations: Option<Vec<String>>,
    heartbeat_interval: Option<String>,
    /// A duration, or `"never"`.
    quarantine_unreachable_after: Option<String>,
    handshake_timeout: Option<String>,
    max_reconnect_backoff: Option<String>,
    partial_frame_timeout: Option<String>,
    max_unauthenticated_connections: Option<usize>,
    failure_detector: Option<Detector>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Detector {
    threshold: Option<f64>,
    max_sample_size: Option<usize>,
    min_std_deviation: Option<String>,
    acceptable_heartbeat_pause: Option<String>,
    first_heartbeat_estimate: Option<String>,
}

/// The builder the text describes (its secret still to be read).
pub(super) fn parse(text: &str) -> Result<RemoteConfigBuilder, RemoteConfigError> {
    let file: File = toml::from_str(text).map_err(|error| RemoteConfigError::Syntax {
        key: error.span().map_or_else(
            || "?".to_owned(),
            |span| config_text::key_at(text, span.start),
        ),
        message: error.message().to_owned(),
    })?;
    let mut builder = RemoteConfig::builder();
    let config = &mut builder.config;
    set(&mut config.host, file.host);
    set(&mut config.port, file.port);
    set(&mut config.cluster_name, file.cluster_name);
    set(&mut config.max_frame_bytes, file.max_frame_bytes);
    set(&mut config.outbound_lane_bytes, file.outbound_lane_bytes);
    set(&mut config.ordinary_lanes, file.ordinary_lanes);
    set(
        &mut config.large_message_destinations,
        file.large_message_destinations,
    );
    set(
        &mut config.max_unauthenticated_connections,
        file.max_unauthenticated_connections,
    );
    for (key, field, text) in [
        (
            "heartbeat-interval",
            &mut config.heartbeat_interval,
            file.heartbeat_interval,
        ),
        (
            "handshake-timeout",
            &mut config.handshake_timeout,
            file.handshake_timeout,
        ),
        (
            "max-reconnect-backoff",
            &mut config.max_reconnect_backoff,
            file.max_reconnect_backoff,
        ),
        (
            "partial-frame-timeout",
            &mut config.partial_frame_timeout,
            file.partial_frame_timeout,
        ),
    ] {
        set(field, text.map(|text| duration(key, &text)).transpose()?);
    }
    if let Some(text) = file.quarantine_unreachable_after {
        config.quarantine_unreachable_after = match text.trim() {
            "never" => None,
            other => Some(duration("quarantine-unreachable-after", other)?),
        };
    }
    let detector = file.failure_detector.unwrap_or_default();
    let target = &mut config.failure_detector;
    set(&mut target.threshold, detector.threshold);
    set(&mut target.max_sample_size, detector.max_sample_size);
    for (key, field, text) in [
        (
            "failure-detector.min-std-deviation",
            &mut target.min_std_deviation,
            detector.min_std_deviation,
        ),
        (
            "failure-detector.acceptable-heartbeat-pause",
            &mut target.acceptable_heartbeat_pause,
            detector.acceptable_heartbeat_pause,
        ),
        (
            "failure-detector.first-heartbeat-estimate",
            &mut target.first_heartbeat_estimate,
            detector.first_heartbeat_estimate,
        ),
    ] {
        set(field, text.map(|text| duration(key, &text)).transpose()?);
    }
    match (file.secret_file, file.secret_env) {
        (Some(_), Some(_)) => {
            return Err(RemoteConfigError::Invalid {
                key: "secret-file",
                reason: "give secret-file or secret-env, not both".to_owned(),
            });
        }
        (Some(path), None) => {
            builder.secret_file(path);
        }
        (None, Some(variable)) => {
            builder.secret_env(variable);
        }
        (None, None) => {}
    }
    Ok(builder)
}

/// Overrides `field` where the file gives a value.
fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *field = value;
    }
}

fn duration(key: &'static str, text: &str) -> Result<Duration, RemoteConfigError> {
    config_text::duration(text).ok_or_else(|| RemoteConfigError::Invalid {
        key,
        reason: format!("{text:?} is not a duration such as \"500ms\", \"5s\" or \"2m\""),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::parse;
    use crate::RemoteConfigError;

    #[test]
    fn every_key_reaches_its_setting() {
        let builder = parse(
            r#"
            host = "0.0.0.0"
            port = 2553
            cluster-name = "orders"
            max-frame-bytes = 4096
            outbound-lane-bytes = 65536
            ordinary-lanes = 2
            large-message-destinations = ["big"]
            heartbeat-interval = "250ms"
            quarantine-unreachable-after = "never"
            handshake-timeout = "2s"
            max-reconnect-backoff = "1s"
            partial-frame-timeout = "3s"
            max-unauthenticated-connections = 8
            [failure-detector]
            threshold = 10.0
            max-sample-size = 100
            min-std-deviation = "50ms"
            acceptable-heartbeat-pause = "4s"
            first-heartbeat-estimate = "500ms"
            "#,
        )
        .unwrap();
        let c = &builder.config;
        assert_eq!((c.host.as_str(), c.port), ("0.0.0.0", 2553));
        assert_eq!(c.cluster_name, "orders");
        assert_eq!((c.max_frame_bytes, c.outbound_lane_bytes), (4096, 65536));
        assert_eq!(c.ordinary_lanes, 2);
        assert_eq!(c.large_message_destinations, ["big"]);
        assert_eq!(c.heartbeat_interval, Duration::from_millis(250));
        assert_eq!(c.quarantine_unreachable_after, None);
        assert_eq!(c.handshake_timeout, Duration::from_secs(2));
        assert_eq!(c.max_reconnect_backoff, Duration::from_secs(1));
        assert_eq!(c.partial_frame_timeout, Duration::from_secs(3));
        assert_eq!(c.max_unauthenticated_connections, 8);
        let d = &c.failure_detector;
        assert_eq!((d.threshold, d.max_sample_size), (10.0, 100));
        assert_eq!(d.min_std_deviation, Duration::from_millis(50));
        assert_eq!(d.acceptable_heartbeat_pause, Duration::from_secs(4));
        assert_eq!(d.first_heartbeat_estimate, Duration::from_millis(500));
    }

    #[test]
    fn bad_values_name_their_key() {
        let key = |text: &str| parse(text).err().and_then(|e| e.key().map(str::to_owned));
        assert_eq!(
            key("heartbeat-interval = \"soon\"").as_deref(),
            Some("heartbeat-interval")
        );
        assert_eq!(
            key("[failure-detector]\nthreshold = \"x\"").as_deref(),
            Some("failure-detector.threshold")
        );
        assert_eq!(key("secret = \"inline\"").as_deref(), Some("secret"));
        assert_eq!(
            key("secret-file = \"/a\"\nsecret-env = \"B\"").as_deref(),
            Some("secret-file")
        );
        assert!(matches!(
            parse("port = -1"),
            Err(RemoteConfigError::Syntax { .. })
        ));
    }

    #[test]
    fn the_secret_file_is_read_without_its_newline_and_never_shown() {
        let path = std::env::temp_dir().join(format!("rally-secret-test-{}", std::process::id()));
        std::fs::write(&path, "hunter2\n").unwrap();
        let text = format!("secret-file = {:?}", path.display().to_string());
        let config = parse(&text).unwrap().build().unwrap();
        assert_eq!(config.secret, b"hunter2");
        assert!(!format!("{config:?}").contains("hunter2"));
        std::fs::write(&path, "\n").unwrap();
        let refused = parse(&text).unwrap().build().unwrap_err();
        assert_eq!(refused.key(), Some("secret-file"));
        assert!(refused.to_string().contains("empty"), "{refused}");
        std::fs::remove_file(&path).unwrap();
        let missing = parse(&text).unwrap().build().unwrap_err();
        assert!(!missing.to_string().contains("hunter2"), "{missing}");
        assert_eq!(missing.key(), Some("secret-file"));
    }
}
