//! `raw-echo`: the limit. The same framed bytes as remote-ping-pong, pipelined over one loopback
//! TCP connection by a minimal program with no actors, batching writes the same way (everything
//! that is ready goes out in one write). Rally's remote-ping-pong divided by this is how close
//! it gets to what the machine can do.

use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use hdrhistogram::Histogram;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::common::{CommonArgs, Workers, micros, on_worker, pace, spawn_listening_child};
use super::remote::NodeArgs;
use crate::report::{Report, Row};

/// One steady-state message frame as Rally writes it for a `Ping`: length, kind, recipient id,
/// manifest id, a three-byte request id, a two-byte payload.
const FRAME: [u8; 13] = [9, 0, 0, 0, 0x10, 1, 1, 0x81, 0x80, 0x01, 0xd0, 0x0f, 0];
const FRAME_LEN: usize = FRAME.len();

/// `raw-echo` flags.
#[derive(Debug, Args)]
pub(crate) struct RawEchoArgs {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    node: NodeArgs,
    /// Round trips per client (the window is 50 per client, as in remote-ping-pong).
    #[arg(long, default_value_t = 100_000)]
    round_trips: u64,
    /// Client counts, comma separated: in flight = clients × 50 on one connection.
    #[arg(long, value_delimiter = ',', default_value = "1,5,10,15,20,25,30")]
    clients: Vec<u64>,
    /// Latency mode (the `latency` scenario's shape): offered rates in frames per second; each
    /// round trip is timed from its intended send time.
    #[arg(long, value_delimiter = ',')]
    rates: Vec<u64>,
    /// Seconds per rate in latency mode.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
}

/// Sends frames on a fixed schedule and times each echo from its intended send time (the echo
/// keeps order, so the i-th reply answers the i-th frame).
async fn paced(port: u16, rate: u64, seconds: u64) -> anyhow::Result<(Histogram<u64>, Duration)> {
    let stream = TcpStream::connect(("127.0.0.1", port)).await?;
    stream.set_nodelay(true)?;
    // The pacer thread writes with blocking calls on a clone of the socket; this task reads.
    let std_stream = stream.into_std()?;
    let mut writer = std_stream.try_clone()?;
    writer.set_nonblocking(false)?;
    let mut reader = TcpStream::from_std(std_stream)?;
    let total = rate * seconds;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let start = Instant::now() + Duration::from_millis(5);
    let sender = pace(start, interval, total, move |_, _| {
        std::io::Write::write_all(&mut writer, &FRAME)
    });
    let mut histogram = Histogram::<u64>::new(3).expect("3 significant digits is valid");
    let mut buf = vec![0u8; 64 * 1024];
    let (mut received, mut partial) = (0u64, 0usize);
    while received < total {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            bail!("the echo server closed the connection");
        }
        let now = Instant::now();
        let frames = (partial + n) / FRAME_LEN;
        partial = (partial + n) % FRAME_LEN;
        for _ in 0..frames {
            let intended = start + interval.mul_f64(received as f64);
            histogram
                .record(now.saturating_duration_since(intended).as_nanos() as u64)
                .expect("values fit");
            received += 1;
        }
    }
    let sent = tokio::task::spawn_blocking(move || sender.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the pacer thread panicked"))?;
    sent.into_iter().try_for_each(|written| written)?;
    Ok((histogram, start.elapsed()))
}

/// Echoes every complete frame back, batching whatever one read brought into one write.
async fn serve(listener: TcpListener) -> anyhow::Result<()> {
    loop {
        let (mut stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        tokio::spawn(async move {
            let mut buf = vec![0u8; 256 * 1024];
            let mut filled = 0;
            loop {
                let n = match stream.read(&mut buf[filled..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                filled += n;
                let whole = filled / FRAME_LEN * FRAME_LEN;
                if whole > 0 {
                    if stream.write_all(&buf[..whole]).await.is_err() {
                        return;
                    }
                    buf.copy_within(whole..filled, 0);
                    filled -= whole;
                }
            }
        });
    }
}

/// `raw-echo-server` flags (internal).
#[derive(Debug, Args)]
pub(crate) struct ServerArgs {
    #[command(flatten)]
    workers: Workers,
}

/// `raw-echo-server`: listens, prints `LISTENING <port>`, serves until stdin closes.
pub(crate) fn server_main(args: &ServerArgs) -> anyhow::Result<()> {
    let runtime = args.workers.runtime();
    runtime.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        println!("LISTENING {}", listener.local_addr()?.port());
        tokio::spawn(serve(listener));
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while lines.next_line().await?.is_some() {}
        Ok(())
    })
}

/// Keeps `window` frames in flight until `total` have come back; returns the elapsed time.
async fn pipeline(port: u16, window: u64, total: u64) -> anyhow::Result<Duration> {
    let stream = TcpStream::connect(("127.0.0.1", port)).await?;
    stream.set_nodelay(true)?;
    let (mut reader, mut writer) = stream.into_split();
    let credits = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let start = Instant::now();
    let sender = {
        let credits = credits.clone();
        tokio::spawn(async move {
            let mut out = Vec::with_capacity(FRAME_LEN * window as usize);
            let mut sent = 0u64;
            let mut allowed = window.min(total);
            while sent < total {
                out.clear();
                for _ in 0..allowed {
                    out.extend_from_slice(&FRAME);
                }
                writer.write_all(&out).await?;
                sent += allowed;
                if sent >= total {
                    break;
                }
                // Wait for at least one reply, then send as many as came back (batched).
                let first = credits.acquire().await?;
                first.forget();
                let mut more = 1u64;
                while let Ok(permit) = credits.try_acquire() {
                    permit.forget();
                    more += 1;
                }
                allowed = more.min(total - sent);
            }
            anyhow::Ok(())
        })
    };
    let mut buf = vec![0u8; 256 * 1024];
    let mut received = 0u64;
    let mut partial = 0usize;
    while received < total {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            bail!("the echo server closed the connection");
        }
        let bytes = partial + n;
        let frames = bytes / FRAME_LEN;
        partial = bytes % FRAME_LEN;
        received += frames as u64;
        credits.add_permits(frames);
    }
    let elapsed = start.elapsed();
    sender.await??;
    Ok(elapsed)
}

/// Runs `raw-echo`.
pub(crate) fn raw_echo(args: &RawEchoArgs) -> anyhow::Result<()> {
    let (round_trips, clients) = if args.common.quick {
        (5_000, vec![1, 5])
    } else {
        (args.round_trips, args.clients.clone())
    };
    let processes = args.node.processes;
    let workers = args.node.workers.flag();
    if args.node.cluster {
        bail!("raw-echo is plain bytes over one socket, no actors: --cluster does not apply");
    }
    let (rates, seconds) = (args.rates.clone(), args.seconds);
    // Latency mode measures only the rates.
    let clients = if rates.is_empty() {
        clients
    } else {
        Vec::new()
    };
    let runtime = args.node.workers.runtime();
    let rows = on_worker(&runtime, async move {
        let (port, _child) = if processes == 1 {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            let port = listener.local_addr()?.port();
            tokio::spawn(serve(listener));
            (port, None)
        } else {
            let mut child_args: Vec<&std::ffi::OsStr> = vec!["raw-echo-server".as_ref()];
            child_args.extend(workers.iter().map(|arg| arg.as_os_str()));
            let (child, port) = spawn_listening_child(&child_args).await?;
            let port: u16 = port.parse()?;
            (port, Some(child))
        };
        pipeline(port, 50, 10_000).await?;
        let mut rows = Vec::new();
        for rate in rates {
            let (h, elapsed) = paced(port, rate, seconds).await?;
            let us = |q: f64| micros(Duration::from_nanos(h.value_at_quantile(q)));
            let mut row = Row::new(format!("{rate} msg/s"))
                // Both directions count, as in ping-pong.
                .throughput(2 * h.len(), elapsed)
                .with("rate", rate)
                .with("p90_us", us(0.9))
                .with("p999_us", us(0.999))
                .with("max_us", micros(Duration::from_nanos(h.max())));
            row.p50_us = Some(us(0.5));
            row.p99_us = Some(us(0.99));
            rows.push(row);
        }
        for c in clients {
            let elapsed = pipeline(port, c * 50, c * round_trips).await?;
            rows.push(
                Row::new(format!("{c} clients"))
                    .clients(c)
                    .throughput(c * round_trips * 2, elapsed)
                    .with("in_flight", c * 50),
            );
        }
        anyhow::Ok(rows)
    })?;
    let mut report = Report::new("raw-echo");
    report
        .param("frame_bytes", FRAME_LEN as u64)
        .param("processes", processes)
        .param("workers_per_process", args.node.workers.param())
        .param("connections", 1);
    report.rows = rows;
    report.print(args.common.json);
    Ok(())
}
