//! `grain-churn`: grain-ping load (P closed loops, one grain each) while the cluster changes:
//! a third member process joins, later leaves gracefully, then one of the first two members is
//! killed (SIGKILL). Throughput is counted in 100 ms buckets; every failed request is counted
//! by its error, in the window (between two events) in which it ended.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use hdrhistogram::Histogram;
use rally::cluster::MemberEvent;
use rally::cluster::virtual_actors::{AskError, GrainRef};
use rally::sync::Mutex;
use serde_json::{Map, Value};
use tokio::io::AsyncWriteExt as _;

use super::run::{
    GrainCluster, GrainPing, MemberReply, PingGrain, REQUEST_TIMEOUT, grain_report, histogram,
    ping, random_text,
};
use super::{GrainChurnArgs, Store};
use crate::report::Row;
use crate::scenarios::common::{multi_thread_runtime, on_worker, spawn_listening_child};

/// The width of a throughput bucket.
const BUCKET: Duration = Duration::from_millis(100);
/// Recovered: this many buckets in a row at or above [`RECOVERED_SHARE`] of the baseline.
const RECOVERED_BUCKETS: usize = 5;
/// The share of the baseline a bucket must reach to count as recovered.
const RECOVERED_SHARE: f64 = 0.9;
/// How long the leaving member and the killed member may take to exit.
const EXIT_LIMIT: Duration = Duration::from_secs(30);
/// Load before the timeline starts, so that the loops are all running at its start: failures
/// in it count (in `steady`), successes do not.
const RAMP: Duration = Duration::from_millis(500);
/// A request still waiting for its reply at the end of the load after this long is counted as
/// stalled (a healthy one takes milliseconds).
const STALLED: Duration = Duration::from_secs(1);
/// The windows: before the first event, then after each event.
const WINDOWS: [&str; 4] = ["steady", "join", "leave", "kill"];

/// What one request loop saw, per window (the window in which each request ended).
struct LoopOut {
    latencies: Vec<Histogram<u64>>,
    failures: Vec<BTreeMap<String, u64>>,
    /// The first error of each type, in full.
    examples: BTreeMap<String, String>,
    /// The longest time without a success, per window (the window in which it ended: a stall
    /// an event causes ends after it; one still open at the end counts in the last window).
    gaps: Vec<Duration>,
    /// Requests waiting for their reply for longer than [`STALLED`] when the load ended.
    stalled: u64,
    /// Per window, when each failed request failed (from the start of the timeline) and how
    /// long it took.
    failed_at: Vec<Vec<(Duration, Duration)>>,
}

/// The error's variant name (`Timeout`, `Stopped`, …), so failures are counted by type.
fn error_type(error: &AskError) -> String {
    let debug = format!("{error:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Runs `grain-churn`.
pub(crate) fn grain_churn(args: &GrainChurnArgs) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let p = args.parallelism;
    if p == 0 {
        bail!("--parallelism must be at least 1");
    }
    let phase = args.phase_seconds.unwrap_or(if quick { 1.0 } else { 10.0 });
    if !(phase >= 0.5 && phase.is_finite()) {
        bail!("--phase-seconds must be at least 0.5, not {phase}");
    }
    let after_kill = args
        .after_kill_seconds
        .unwrap_or(if quick { 2.0 } else { 20.0 });
    if !(after_kill >= 0.5 && after_kill.is_finite()) {
        bail!("--after-kill-seconds must be at least 0.5, not {after_kill}");
    }
    let max_active = p * 2;
    let mut report = grain_report("grain-churn", max_active);
    report
        .param(
            "layout",
            "2 member processes hosting the kind + this process as a client-only member, loopback TCP; a third member process joins, later leaves; then the second of the first two is killed",
        )
        .param("parallelism", p as u64)
        .param("phase_s", phase)
        .param("after_kill_s", after_kill)
        .param("bucket_ms", BUCKET.as_millis() as u64)
        .param(
            "recovered",
            format!(
                "{RECOVERED_BUCKETS} buckets in a row at or above {}% of the baseline",
                RECOVERED_SHARE * 100.0
            ),
        )
        .param(
            "warm_up",
            "one request per loop before the load (activates its grain)",
        );
    let runtime = multi_thread_runtime();
    let (rows, series, examples) = on_worker(&runtime, async move {
        eprintln!("grain-churn: starting 2 members and joining...");
        let gc = GrainCluster::start(max_active, Store::Sqlite).await?;
        run(
            gc,
            p,
            Duration::from_secs_f64(phase),
            Duration::from_secs_f64(after_kill),
        )
        .await
    })?;
    report.rows = rows;
    report
        .param("series_per_sec", series)
        .param("first_error_of_each_type", examples);
    report.print(args.common.json);
    Ok(())
}

/// The load and the events; returns the rows, the throughput series (requests/s per bucket) and
/// the first error of each type.
async fn run(
    mut gc: GrainCluster,
    p: usize,
    phase: Duration,
    after_kill: Duration,
) -> anyhow::Result<(Vec<Row>, Vec<f64>, Map<String, Value>)> {
    // Every member event the client sees, with when.
    let seen: Arc<Mutex<Vec<(Instant, MemberEvent)>>> = Arc::default();
    let recorder = {
        let seen = Arc::clone(&seen);
        let mut events = gc.cluster.events();
        tokio::spawn(async move {
            while let Some(event) = events.next().await {
                seen.lock().push((Instant::now(), event));
            }
        })
    };
    let mut refs = Vec::with_capacity(p);
    for i in 0..p {
        let grain = gc.grains.get::<PingGrain>(&format!("churn-{i}"))?;
        ping(&grain, &random_text())
            .await
            .with_context(|| format!("warm-up of churn-{i}"))?;
        refs.push(grain);
    }

    // Nominal times, from the start of the load: the join, the leave, the kill, the end.
    let events = [phase, phase * 2, phase * 3];
    let total = phase * 3 + after_kill;
    let buckets: Arc<Vec<AtomicU64>> = Arc::new(
        (0..total.as_nanos().div_ceil(BUCKET.as_nanos()))
            .map(|_| AtomicU64::new(0))
            .collect(),
    );
    eprintln!(
        "grain-churn: P={p}, join at {:?}, leave at {:?}, kill at {:?}, end at {total:?}...",
        events[0], events[1], events[2]
    );
    let mut figures = vec![gc.member_stats().await?];
    let start = Instant::now() + RAMP;
    let end = start + total;
    // When each event's action started (ns from `start`; not yet: u64::MAX): a request belongs
    // to the window in which it ended.
    let acted: Arc<[AtomicU64; 3]> = Arc::new(std::array::from_fn(|_| AtomicU64::new(u64::MAX)));
    let loops: Vec<_> = refs
        .into_iter()
        .map(|grain| {
            let buckets = Arc::clone(&buckets);
            let acted = Arc::clone(&acted);
            tokio::spawn(request_loop(grain, start, end, acted, buckets))
        })
        .collect();

    // The events, each at its nominal time; `lags` is how late each action started.
    let mut lags = [Duration::ZERO; 3];
    let act = |i: usize, lags: &mut [Duration; 3]| {
        let now = start.elapsed();
        lags[i] = now.saturating_sub(events[i]);
        acted[i].store(now.as_nanos() as u64, Ordering::Relaxed);
    };
    tokio::time::sleep_until((start + events[0]).into()).await;
    figures.push(gc.member_stats().await?);
    act(0, &mut lags);
    let db = gc.processes.store_file();
    let seed = gc.processes.addresses[0].to_string();
    let max_active = (p * 2).to_string();
    let (mut joiner, joiner_address) = spawn_listening_child(&[
        OsStr::new("grain-member"),
        OsStr::new("--db"),
        db.as_os_str(),
        OsStr::new("--max-active"),
        OsStr::new(&max_active),
        OsStr::new("--seed"),
        OsStr::new(&seed),
    ])
    .await
    .context("starting the joining member")?;

    tokio::time::sleep_until((start + events[1]).into()).await;
    figures.push(gc.member_stats().await?);
    act(1, &mut lags);
    joiner
        .stdin
        .as_mut()
        .context("the joining member's stdin")?
        .write_all(b"leave\n")
        .await
        .context("telling the joining member to leave")?;
    let left = tokio::spawn(async move {
        let status = tokio::time::timeout(EXIT_LIMIT, joiner.wait()).await;
        (Instant::now(), status)
    });

    tokio::time::sleep_until((start + events[2]).into()).await;
    figures.push(gc.member_stats().await?);
    act(2, &mut lags);
    let victim_address = gc.processes.addresses[1].to_string();
    let victim = &mut gc.processes.children[1];
    victim.start_kill().context("killing the second member")?;

    let mut outs = Vec::with_capacity(p);
    for task in loops {
        outs.push(task.await.context("a request loop panicked")?);
    }
    let (left_at, status) = left.await.context("waiting for the leaving member")?;
    let status = status
        .map_err(|_| anyhow::anyhow!("the leaving member did not exit within {EXIT_LIMIT:?}"))?
        .context("waiting for the leaving member")?;
    if !status.success() {
        bail!("the leaving member exited with {status}");
    }
    tokio::time::timeout(EXIT_LIMIT, gc.processes.children[1].wait())
        .await
        .map_err(|_| anyhow::anyhow!("the killed member did not exit within {EXIT_LIMIT:?}"))?
        .context("waiting for the killed member")?;
    // The survivor's figures at the end (the killed member has none).
    figures.push(vec![gc.member_stat(0).await?]);
    recorder.abort();

    let names = [
        (gc.processes.addresses[0].to_string(), "A"),
        (victim_address, "B"),
        (joiner_address, "C"),
    ];
    let seen = seen.lock().clone();
    let mut seen_text: Vec<(Duration, String)> = seen
        .iter()
        .filter(|(at, _)| *at >= start)
        .map(|(at, event)| (*at - start, describe(event, &names)))
        .collect();
    seen_text.push((left_at - start, "C exited".to_owned()));
    seen_text.sort();

    let series: Vec<f64> = buckets
        .iter()
        .map(|b| b.load(Ordering::Relaxed) as f64 / BUCKET.as_secs_f64())
        .collect();
    let mut rows = rows(&outs, &series, events, total, phase, lags, &seen_text);
    // Per window and member (A, B; only A after the kill): what its virtual actors did.
    for (w, row) in rows.iter_mut().enumerate() {
        let (before, after) = (&figures[w], &figures[w + 1]);
        let delta = |f: fn(&MemberReply) -> u64| -> Vec<u64> {
            after
                .iter()
                .zip(before)
                .map(|(a, b)| f(a).saturating_sub(f(b)))
                .collect()
        };
        row.extra.insert(
            "activations_per_member".into(),
            delta(|m| m.activations).into(),
        );
        row.extra
            .insert("moves_per_member".into(), delta(|m| m.moves).into());
        row.extra
            .insert("forwarded_per_member".into(), delta(|m| m.forwarded).into());
    }
    let mut examples = Map::new();
    for out in &outs {
        for (kind, text) in &out.examples {
            examples
                .entry(kind.clone())
                .or_insert_with(|| Value::from(text.clone()));
        }
    }
    Ok((rows, series, examples))
}

/// `Up C`, `Down B`, … (the event and which process it is about).
fn describe(event: &MemberEvent, names: &[(String, &str)]) -> String {
    let address = event.member().address.to_string();
    let who = names
        .iter()
        .find(|(a, _)| *a == address)
        .map_or("client", |(_, name)| name);
    let what = format!("{event:?}");
    let what = what.split('(').next().unwrap_or_default();
    format!("{what} {who}")
}

/// One closed loop on `grain` from now until `end` (the timeline starts at `start`, after the
/// ramp); a request still waiting at `end` is neither a success nor a failure, and counts as
/// stalled if it has waited longer than [`STALLED`].
async fn request_loop(
    grain: GrainRef<PingGrain>,
    start: Instant,
    end: Instant,
    acted: Arc<[AtomicU64; 3]>,
    buckets: Arc<Vec<AtomicU64>>,
) -> LoopOut {
    let mut out = LoopOut {
        latencies: (0..WINDOWS.len()).map(|_| histogram()).collect(),
        failures: vec![BTreeMap::new(); WINDOWS.len()],
        stalled: 0,
        examples: BTreeMap::new(),
        gaps: vec![Duration::ZERO; WINDOWS.len()],
        failed_at: vec![Vec::new(); WINDOWS.len()],
    };
    let window_of = |at: Instant| {
        let since = at.saturating_duration_since(start);
        let since = since.as_nanos() as u64;
        acted
            .iter()
            .filter(|e| since >= e.load(Ordering::Relaxed))
            .count()
    };
    let mut last_success = start;
    loop {
        let t0 = Instant::now();
        if t0 >= end {
            break;
        }
        let ramp = t0 < start;
        let text = random_text();
        let request = grain.ask(GrainPing { text: text.clone() }, REQUEST_TIMEOUT);
        let reply = tokio::select! {
            reply = request => reply,
            () = tokio::time::sleep_until(end.into()) => {
                out.stalled += u64::from(end - t0 > STALLED);
                break;
            }
        };
        let failure = match reply {
            Ok(reply) if reply.strip_prefix("Hello ") == Some(text.as_str()) => None,
            Ok(reply) => Some(("WrongReply".to_owned(), format!("{reply:?} to {text:?}"))),
            Err(e) => Some((error_type(&e), e.to_string())),
        };
        // A request counts in the window in which it ended.
        let now = Instant::now();
        let window = window_of(now);
        match failure {
            None if ramp => {}
            None => {
                let gap = &mut out.gaps[window];
                *gap = (*gap).max(now - last_success);
                last_success = now;
                out.latencies[window].saturating_record((now - t0).as_micros() as u64);
                let bucket = ((now - start).as_nanos() / BUCKET.as_nanos()) as usize;
                if let Some(count) = buckets.get(bucket) {
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
            Some((kind, text)) => {
                out.failed_at[window].push((now.saturating_duration_since(start), now - t0));
                out.examples.entry(kind.clone()).or_insert(text);
                *out.failures[window].entry(kind).or_default() += 1;
            }
        }
    }
    let last = WINDOWS.len() - 1;
    out.gaps[last] = out.gaps[last].max(end.saturating_duration_since(last_success));
    out
}

fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// The bucket index at `at` (from the start of the load).
fn bucket_at(at: Duration) -> usize {
    (at.as_nanos() / BUCKET.as_nanos()) as usize
}

/// What a window's buckets say against a baseline.
#[derive(Debug, PartialEq)]
struct Dip {
    /// The lowest bucket (requests/s) and its start, from the window's start.
    lowest: f64,
    lowest_at: Duration,
    /// Buckets below the recovered share of the baseline.
    below: usize,
    /// From the window's start to the first of [`RECOVERED_BUCKETS`] buckets in a row that
    /// are all at or above the share and after which no bucket of the window falls below it;
    /// `None` when the window ends first.
    recovered_after: Option<Duration>,
}

/// The dip of `window` (its buckets, in order) against `baseline`.
fn dip(window: &[f64], baseline: f64) -> Dip {
    let threshold = baseline * RECOVERED_SHARE;
    let (lowest_index, lowest) = window
        .iter()
        .copied()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((0, 0.0));
    let below = window.iter().filter(|&&v| v < threshold).count();
    // After the last bucket below the threshold: recovered if enough buckets follow.
    let first_good = window
        .iter()
        .rposition(|&v| v < threshold)
        .map_or(0, |last_bad| last_bad + 1);
    let recovered_after = (window.len() - first_good >= RECOVERED_BUCKETS)
        .then(|| BUCKET * u32::try_from(first_good).unwrap_or(u32::MAX));
    Dip {
        lowest,
        lowest_at: BUCKET * u32::try_from(lowest_index).unwrap_or(u32::MAX),
        below,
        recovered_after,
    }
}

/// One row per window: `steady` (from the start of the load to the join), then one per event.
fn rows(
    outs: &[LoopOut],
    series: &[f64],
    events: [Duration; 3],
    total: Duration,
    phase: Duration,
    lags: [Duration; 3],
    seen: &[(Duration, String)],
) -> Vec<Row> {
    let bounds = [Duration::ZERO, events[0], events[1], events[2], total];
    let half = bucket_at(phase / 2).max(1);
    let mut rows = Vec::with_capacity(WINDOWS.len());
    for (w, name) in WINDOWS.iter().enumerate() {
        let (from, to) = (bounds[w], bounds[w + 1]);
        let (first, last) = (bucket_at(from), bucket_at(to).min(series.len()));
        let window = &series[first..last];
        // The baseline: the median of the half phase before the event (for `steady`, of its own
        // second half).
        let baseline = if w == 0 {
            median(&window[window.len().saturating_sub(half)..])
        } else {
            median(&series[first.saturating_sub(half)..first])
        };
        let dip = dip(window, baseline);
        let settled = median(&window[window.len().saturating_sub(half)..]);
        let mut latencies = histogram();
        let mut failures: BTreeMap<String, u64> = BTreeMap::new();
        for out in outs {
            latencies
                .add(&out.latencies[w])
                .expect("histograms with the same bounds add");
            for (kind, n) in &out.failures[w] {
                *failures.entry(kind.clone()).or_default() += n;
            }
        }
        let failed: u64 = failures.values().sum();
        let timed_out = failures.get("Timeout").copied().unwrap_or(0);
        let stalled: u64 = if w + 1 == WINDOWS.len() {
            outs.iter().map(|o| o.stalled).sum()
        } else {
            0
        };
        // When the window's failed requests failed (from the event's action) and how long they
        // took.
        let acted_at = if w == 0 { from } else { from + lags[w - 1] };
        let mut ended = Vec::new();
        let mut took = Vec::new();
        for (at, after) in outs.iter().flat_map(|o| &o.failed_at[w]) {
            ended.push(at.saturating_sub(acted_at).as_millis() as u64);
            took.push(after.as_millis() as u64);
        }
        let range = |v: &[u64]| -> Value {
            match (v.iter().min(), v.iter().max()) {
                (Some(lo), Some(hi)) => Value::from(vec![*lo, *hi]),
                _ => Value::Null,
            }
        };
        let longest_gap = outs.iter().map(|o| o.gaps[w]).max().unwrap_or_default();
        let loops_stalled = outs.iter().filter(|o| o.gaps[w] > STALLED).count();
        let client_saw: Vec<String> = seen
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|(at, what)| format!("+{}ms {what}", (*at - from).as_millis()))
            .collect();
        let mut row = Row::new(*name).throughput(latencies.len(), to - from);
        row.p50_us = Some(latencies.value_at_quantile(0.5) as f64);
        row.p99_us = Some(latencies.value_at_quantile(0.99) as f64);
        let dip_pct = if baseline > 0.0 {
            (100.0 * (1.0 - dip.lowest / baseline)).max(0.0)
        } else {
            0.0
        };
        rows.push(
            row.with("at_ms", from.as_millis() as u64)
                .with(
                    "lag_ms",
                    if w == 0 {
                        0.0
                    } else {
                        lags[w - 1].as_secs_f64() * 1e3
                    },
                )
                .with("baseline_per_sec", baseline)
                .with("lowest_per_sec", dip.lowest)
                .with("lowest_at_ms", dip.lowest_at.as_millis() as u64)
                .with("dip_pct", dip_pct)
                .with("buckets_below_90pct", dip.below as u64)
                .with(
                    "recovered_ms",
                    dip.recovered_after
                        .map_or(Value::Null, |d| Value::from(d.as_millis() as u64)),
                )
                .with("settled_per_sec", settled)
                .with("failed", failed)
                .with("timed_out", timed_out)
                .with("failed_at_ms", range(&ended))
                .with("failed_took_ms", range(&took))
                .with(
                    "failed_by_type",
                    Value::Object(
                        failures
                            .into_iter()
                            .map(|(k, v)| (k, Value::from(v)))
                            .collect::<Map<_, _>>(),
                    ),
                )
                .with("stalled_at_end", stalled)
                .with("longest_gap_ms", longest_gap.as_secs_f64() * 1e3)
                .with("loops_gap_over_1s", loops_stalled as u64)
                .with("max_latency_ms", latencies.max() as f64 / 1e3)
                .with("client_saw", client_saw),
        );
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dip_is_measured_from_the_window_start_to_the_last_low_bucket() {
        let window = [
            100.0, 95.0, 40.0, 70.0, 85.0, 100.0, 99.0, 98.0, 97.0, 100.0,
        ];
        let d = dip(&window, 100.0);
        assert_eq!(d.lowest, 40.0);
        assert_eq!(d.lowest_at, BUCKET * 2);
        assert_eq!(d.below, 3);
        assert_eq!(d.recovered_after, Some(BUCKET * 5));
    }

    #[test]
    fn a_window_without_low_buckets_recovers_at_once_and_one_ending_low_never() {
        assert_eq!(
            dip(&[100.0; 6], 100.0).recovered_after,
            Some(Duration::ZERO)
        );
        let ends_low = [100.0, 100.0, 100.0, 100.0, 100.0, 100.0, 50.0];
        assert_eq!(dip(&ends_low, 100.0).recovered_after, None);
        // Fewer than RECOVERED_BUCKETS good buckets after the last low one: not recovered.
        let short = [50.0, 100.0, 100.0, 100.0, 100.0];
        assert_eq!(dip(&short, 100.0).recovered_after, None);
    }

    #[test]
    fn errors_are_counted_by_their_variant_name() {
        assert_eq!(
            error_type(&AskError::Timeout(Duration::from_secs(5))),
            "Timeout"
        );
        assert_eq!(error_type(&AskError::Stopped), "Stopped");
        assert_eq!(
            error_type(&AskError::NotHosted {
                kind: "ping".into(),
                member: "m".into()
            }),
            "NotHosted"
        );
    }

    #[test]
    fn the_median_takes_the_upper_middle() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(median(&[]), 0.0);
    }
}
