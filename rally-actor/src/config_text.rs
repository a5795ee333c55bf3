//! What every Rally configuration file shares, so that `SystemConfig`, `ClusterConfig` and
//! `RemoteConfig` read durations and name keys alike: [`duration`] and [`key_at`].

use std::time::Duration;

/// A duration as the configuration files write it: a number (decimals allowed) and a unit,
/// `ns`, `us` (or `µs`), `ms`, `s`, `m` (or `min`); `None` for anything else.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::config_text::duration;
///
/// assert_eq!(duration("250ms"), Some(Duration::from_millis(250)));
/// assert_eq!(duration("1.5s"), Some(Duration::from_millis(1500)));
/// assert_eq!(duration("2m"), Some(Duration::from_secs(120)));
/// assert_eq!(duration("10"), None);
/// ```
pub fn duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        _ => return None,
    };
    let value: f64 = number.parse().ok()?;
    (value.is_finite() && value >= 0.0).then(|| Duration::from_secs_f64(value * scale))
}

/// The dotted key at byte `offset` of a TOML text (where a parser points: at a key, at its
/// value or at a table header): the `[table]` above it and the key on its line; `?` when the
/// line names none.
///
/// # Example
///
/// ```
/// use rally::config_text::key_at;
///
/// let text = "a = 1\n[failure-detector]\nthreshold = -1\n";
/// assert_eq!(key_at(text, text.find("-1").unwrap()), "failure-detector.threshold");
/// assert_eq!(key_at(text, 0), "a");
/// assert_eq!(key_at(text, text.find("[f").unwrap()), "failure-detector");
/// assert_eq!(key_at("", 0), "?");
/// ```
pub fn key_at(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("").trim();
    let header = |l: &str| l.trim_matches(|c| c == '[' || c == ']').trim().to_owned();
    if line.starts_with('[') {
        return header(line);
    }
    let key = line
        .split('=')
        .next()
        .unwrap_or("")
        .trim()
        .trim_matches('"');
    let table = text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(header);
    match table {
        _ if key.is_empty() => "?".to_owned(),
        Some(table) if !table.is_empty() => format!("{table}.{key}"),
        _ => key.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::key_at;

    #[test]
    fn the_key_names_its_table_and_a_keyless_line_says_so() {
        let text = "a = 1\n[virtual-actors]\nmax-hops = 0\n\"quoted\" = 2\n";
        let offset = text.find("0\n").unwrap();
        assert_eq!(key_at(text, offset), "virtual-actors.max-hops");
        assert_eq!(key_at(text, 0), "a");
        assert_eq!(
            key_at(text, text.find("2\n").unwrap()),
            "virtual-actors.quoted"
        );
        assert_eq!(key_at("", 0), "?");
        assert_eq!(key_at("[t]\n\n", 4), "?");
    }
}
