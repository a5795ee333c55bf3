//! The TOML form of [`SystemConfig`], and errors that name the key.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::{DispatcherConfig, SystemConfig};
use crate::dispatch::{
    DEFAULT_CORE_POOL_SIZE, DEFAULT_KEEP_ALIVE, DEFAULT_MAX_POOL_SIZE, DEFAULT_PARALLELISM_FACTOR,
    DEFAULT_PARALLELISM_MAX, DEFAULT_PARALLELISM_MIN, DEFAULT_QUEUE_SIZE, DispatcherKind,
};
use crate::{MailboxConfig, Overflow};

/// Why a configuration was refused. Every variant about the text names the key.
///
/// # Example
///
/// ```
/// use rally::SystemConfig;
///
/// let error = SystemConfig::from_toml("[dispatchers.io]\ntype = \"blocking\"\nmax-pool-size = 0")
///     .unwrap_err();
/// assert_eq!(error.key(), Some("dispatchers.io.max-pool-size"));
/// assert!(error.to_string().contains("dispatchers.io.max-pool-size"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SystemConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Not valid TOML, an unknown key, or a value of the wrong type.
    #[error("config key `{key}`: {message}")]
    Syntax {
        /// The dotted key, as far as it could be found.
        key: String,
        /// The parser's explanation.
        message: String,
    },
    /// A value of the right type that is not allowed.
    #[error("config key `{key}`: {reason}")]
    Invalid {
        /// The dotted key.
        key: String,
        /// What is wrong and what is allowed.
        reason: String,
    },
}

impl SystemConfigError {
    /// The dotted key the error is about, e.g. `dispatchers.io.max-pool-size`.
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::Read { .. } => None,
            Self::Syntax { key, .. } | Self::Invalid { key, .. } => Some(key),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct File {
    throughput: Option<i64>,
    throughput_deadline: Option<String>,
    shutdown_timeout: Option<String>,
    default_mailbox: Option<Mailbox>,
    default_dispatcher: Option<Dispatcher>,
    #[serde(default)]
    dispatchers: BTreeMap<String, Dispatcher>,
    monitoring: Option<Monitoring>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Mailbox {
    capacity: Option<i64>,
    overflow: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Dispatcher {
    #[serde(rename = "type")]
    kind: Option<String>,
    parallelism_factor: Option<f64>,
    parallelism_min: Option<i64>,
    parallelism_max: Option<i64>,
    core_pool_size: Option<i64>,
    max_pool_size: Option<i64>,
    keep_alive: Option<String>,
    queue_size: Option<i64>,
    throughput: Option<i64>,
    throughput_deadline: Option<String>,
    monitoring: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Monitoring {
    all_actors: Option<bool>,
    sample_every: Option<i64>,
    tracing_spans: Option<bool>,
    blocking_threshold: Option<String>,
}

#[cfg(feature = "toml")]
pub(super) fn parse(text: &str) -> Result<SystemConfig, SystemConfigError> {
    let file: File = toml::from_str(text).map_err(|error| SystemConfigError::Syntax {
        key: error.span().map_or_else(
            || "?".to_owned(),
            |span| crate::config_text::key_at(text, span.start),
        ),
        message: error.message().to_owned(),
    })?;
    let mut config = SystemConfig::default();
    if let Some(n) = file.throughput {
        config.throughput = positive("throughput", n)?;
    }
    if let Some(text) = &file.throughput_deadline {
        config.throughput_deadline = Some(duration("throughput-deadline", text)?);
    }
    if let Some(text) = &file.shutdown_timeout {
        config.shutdown_timeout = duration("shutdown-timeout", text)?;
    }
    if let Some(mailbox) = file.default_mailbox {
        config.default_mailbox = self::mailbox(mailbox)?;
    }
    if let Some(d) = file.default_dispatcher {
        let mut default = dispatcher("default-dispatcher", "default", d, true)?;
        default.name = "default".to_owned();
        config.default_dispatcher = default;
    }
    for (name, d) in file.dispatchers {
        let key = format!("dispatchers.{name}");
        if name == "default" || name.is_empty() {
            return Err(invalid(
                &key,
                "this name is reserved; configure it as [default-dispatcher]",
            ));
        }
        config.dispatchers.push(dispatcher(&key, &name, d, false)?);
    }
    if let Some(m) = file.monitoring {
        if let Some(on) = m.all_actors {
            config.monitoring.all_actors = on;
        }
        if let Some(n) = m.sample_every {
            config.monitoring.sample_every = u32::try_from(positive("monitoring.sample-every", n)?)
                .map_err(|_| invalid("monitoring.sample-every", "must be at most 4294967295"))?;
        }
        if let Some(on) = m.tracing_spans {
            config.monitoring.tracing_spans = on;
        }
        if let Some(text) = &m.blocking_threshold {
            config.monitoring.blocking_threshold = duration("monitoring.blocking-threshold", text)?;
        }
    }
    Ok(config)
}

fn mailbox(m: Mailbox) -> Result<MailboxConfig, SystemConfigError> {
    let overflow = match m.overflow.as_deref() {
        None | Some("drop-newest") => Overflow::DropNewest,
        Some("fail") => Overflow::Fail,
        Some("backpressure") => Overflow::Backpressure,
        Some(other) => {
            return Err(invalid(
                "default-mailbox.overflow",
                &format!("{other:?} is not one of \"drop-newest\", \"fail\", \"backpressure\""),
            ));
        }
    };
    Ok(match m.capacity {
        None => MailboxConfig {
            capacity: None,
            overflow,
        },
        Some(n) => MailboxConfig::bounded(positive("default-mailbox.capacity", n)?, overflow),
    })
}

fn dispatcher(
    key: &str,
    name: &str,
    d: Dispatcher,
    is_default: bool,
) -> Result<DispatcherConfig, SystemConfigError> {
    let k = |field: &str| format!("{key}.{field}");
    let kind_name = d.kind.as_deref().unwrap_or(if is_default {
        "current-runtime"
    } else {
        "shared"
    });
    let shared_only = [
        ("parallelism-factor", d.parallelism_factor.is_some()),
        ("parallelism-min", d.parallelism_min.is_some()),
        ("parallelism-max", d.parallelism_max.is_some()),
    ];
    let blocking_only = [
        ("core-pool-size", d.core_pool_size.is_some()),
        ("max-pool-size", d.max_pool_size.is_some()),
        ("keep-alive", d.keep_alive.is_some()),
        ("queue-size", d.queue_size.is_some()),
    ];
    let refuse = |fields: &[(&str, bool)], of: &str| -> Result<(), SystemConfigError> {
        match fields.iter().find(|(_, set)| *set) {
            Some((field, _)) => Err(invalid(
                &k(field),
                &format!("only applies to type = {of}, not \"{kind_name}\""),
            )),
            None => Ok(()),
        }
    };
    let sized = "\"shared\" or \"affinity\"";
    // `parallelism-factor`, `-min` and `-max`, for the kinds sized by cores.
    let sizing = || -> Result<(f64, usize, usize), SystemConfigError> {
        refuse(&blocking_only, "\"blocking\"")?;
        let factor = d.parallelism_factor.unwrap_or(DEFAULT_PARALLELISM_FACTOR);
        if !(factor.is_finite() && factor > 0.0) {
            return Err(invalid(
                &k("parallelism-factor"),
                "must be a number greater than 0",
            ));
        }
        let min = d.parallelism_min.map_or(Ok(DEFAULT_PARALLELISM_MIN), |n| {
            positive(&k("parallelism-min"), n)
        })?;
        let max = d.parallelism_max.map_or(Ok(DEFAULT_PARALLELISM_MAX), |n| {
            positive(&k("parallelism-max"), n)
        })?;
        at_least(&k("parallelism-max"), max, "parallelism-min", min)?;
        Ok((factor, min, max))
    };
    let kind = match kind_name {
        "shared" => {
            let (parallelism_factor, parallelism_min, parallelism_max) = sizing()?;
            DispatcherKind::Shared {
                parallelism_factor,
                parallelism_min,
                parallelism_max,
            }
        }
        "affinity" => {
            let (parallelism_factor, parallelism_min, parallelism_max) = sizing()?;
            DispatcherKind::Affinity {
                parallelism_factor,
                parallelism_min,
                parallelism_max,
            }
        }
        "blocking" => {
            refuse(&shared_only, sized)?;
            let core = d.core_pool_size.map_or(Ok(DEFAULT_CORE_POOL_SIZE), |n| {
                non_negative(&k("core-pool-size"), n)
            })?;
            let max = d.max_pool_size.map_or(Ok(DEFAULT_MAX_POOL_SIZE), |n| {
                positive(&k("max-pool-size"), n)
            })?;
            at_least(&k("max-pool-size"), max, "core-pool-size", core)?;
            let keep_alive = match &d.keep_alive {
                Some(text) => duration(&k("keep-alive"), text)?,
                None => DEFAULT_KEEP_ALIVE,
            };
            let queue_size = d.queue_size.map_or(Ok(DEFAULT_QUEUE_SIZE), |n| {
                non_negative(&k("queue-size"), n)
            })?;
            DispatcherKind::Blocking {
                core_pool_size: core,
                max_pool_size: max,
                keep_alive,
                queue_size,
            }
        }
        "pinned" | "calling-thread" | "current-runtime" => {
            refuse(&shared_only, sized)?;
            refuse(&blocking_only, "\"blocking\"")?;
            match kind_name {
                "pinned" => DispatcherKind::Pinned,
                "calling-thread" => DispatcherKind::CallingThread,
                _ => DispatcherKind::CurrentRuntime,
            }
        }
        other => {
            return Err(invalid(
                &k("type"),
                &format!(
                    "{other:?} is not one of \"shared\", \"affinity\", \"pinned\", \
                     \"blocking\", \"calling-thread\", \"current-runtime\""
                ),
            ));
        }
    };
    Ok(DispatcherConfig {
        name: name.to_owned(),
        kind,
        throughput: d
            .throughput
            .map(|n| positive(&k("throughput"), n))
            .transpose()?,
        throughput_deadline: d
            .throughput_deadline
            .as_deref()
            .map(|t| duration(&k("throughput-deadline"), t))
            .transpose()?,
        monitored: d.monitoring.unwrap_or(false),
    })
}

fn invalid(key: &str, reason: &str) -> SystemConfigError {
    SystemConfigError::Invalid {
        key: key.to_owned(),
        reason: reason.to_owned(),
    }
}

fn positive(key: &str, n: i64) -> Result<usize, SystemConfigError> {
    usize::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
        invalid(
            key,
            &format!("must be a whole number greater than 0, not {n}"),
        )
    })
}

/// An upper bound `max` (at `key`) below the lower bound `min` (the key `min_name`) is refused.
fn at_least(key: &str, max: usize, min_name: &str, min: usize) -> Result<(), SystemConfigError> {
    if max < min {
        return Err(invalid(
            key,
            &format!("must be at least {min_name} ({min})"),
        ));
    }
    Ok(())
}

fn non_negative(key: &str, n: i64) -> Result<usize, SystemConfigError> {
    usize::try_from(n).map_err(|_| invalid(key, &format!("must be 0 or more, not {n}")))
}

/// Parses `"250us"`, `"10ms"`, `"1.5s"`, `"2m"`.
pub(crate) fn duration(key: &str, text: &str) -> Result<Duration, SystemConfigError> {
    crate::config_text::duration(text).ok_or_else(|| {
        invalid(
            key,
            &format!("{text:?} is not a duration such as \"500us\", \"10ms\", \"1.5s\" or \"2m\""),
        )
    })
}

#[cfg(all(test, feature = "toml"))]
mod tests {
    use super::*;

    #[test]
    fn durations_take_common_units() {
        assert_eq!(duration("k", "250us").unwrap(), Duration::from_micros(250));
        assert_eq!(duration("k", "10ms").unwrap(), Duration::from_millis(10));
        assert_eq!(duration("k", "1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(duration("k", "2m").unwrap(), Duration::from_secs(120));
        assert_eq!(duration("k", "ten").unwrap_err().key(), Some("k"));
        assert_eq!(duration("k", "10").unwrap_err().key(), Some("k"));
    }

    #[test]
    fn unknown_and_mistyped_keys_are_named_with_their_table() {
        let error =
            parse("[dispatchers.io]\ntype = \"blocking\"\nkeep-alive-ms = 5\n").unwrap_err();
        assert_eq!(error.key(), Some("dispatchers.io.keep-alive-ms"));
        let error = parse("throughput = \"many\"").unwrap_err();
        assert_eq!(error.key(), Some("throughput"));
    }

    #[test]
    fn an_empty_file_is_the_default() {
        let config = parse("").unwrap();
        assert_eq!(config.throughput, SystemConfig::default().throughput);
        assert!(config.dispatchers.is_empty());
    }
}
