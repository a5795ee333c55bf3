package rally.bench.pekko;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.time.Duration;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.locks.LockSupport;
import org.HdrHistogram.Histogram;
import org.apache.pekko.actor.AbstractActor;
import org.apache.pekko.actor.ActorRef;
import org.apache.pekko.actor.ActorSystem;
import org.apache.pekko.actor.PoisonPill;
import org.apache.pekko.actor.Props;
import org.apache.pekko.pattern.Patterns;

/** latency: round trips at a fixed offered rate, timed from the intended send time (LatencySpec shape). */
final class Latency {
  private Latency() {}

  /** Bounds the wait for the last replies after the last send. */
  static final long DRAIN_LIMIT_MS = 10_000;

  /** Records each echoed probe's round trip from its intended send time. */
  static final class Recorder extends AbstractActor {
    private final long start;
    private final long interval;
    private final long want;
    private final Histogram hist;
    private final CompletableFuture<Long> done;
    private long received;
    private long last;

    Recorder(Long start, Long interval, Long want, Histogram hist, CompletableFuture<Long> done) {
      this.start = start;
      this.interval = interval;
      this.want = want;
      this.hist = hist;
      this.done = done;
    }

    @Override
    public Receive createReceive() {
      return receiveBuilder()
          .match(Msgs.Probe.class, p -> {
            long now = System.nanoTime();
            hist.recordValue(Math.max(1, now - (start + p.seq() * interval)));
            last = now;
            if (++received == want) done.complete(now);
          })
          .match(Snapshot.class, s -> getSender().tell(new Result(hist.copy(), last - start, want, received), getSelf()))
          .build();
    }
  }

  /** Asks the recorder for what it has so far (after the drain limit ran out). */
  enum Snapshot { INSTANCE }

  /** n probes were sent, received came back; nanos runs from the start to the last reply. */
  record Result(Histogram hist, long nanos, long n, long received) {}

  static Result offer(ActorSystem system, ActorRef echo, int rate, double seconds) throws Exception {
    long interval = 1_000_000_000L / rate;
    long n = (long) (seconds * rate);
    // 1 ns to 60 s at 3 significant digits.
    Histogram hist = new Histogram(1, 60_000_000_000L, 3);
    CompletableFuture<Long> done = new CompletableFuture<>();
    long start = System.nanoTime() + 5_000_000;
    ActorRef rec = system.actorOf(Props.create(Recorder.class, start, interval, n, hist, done));
    try {
      for (long seq = 0; seq < n; seq++) {
        long intended = start + seq * interval;
        // Park, not spin: on 2 cores a spinning pacer takes a core from the actors. A late
        // wake-up counts against the round trip, and the pacer then catches up without parking.
        long wait;
        while ((wait = intended - System.nanoTime()) > 0) LockSupport.parkNanos(wait);
        echo.tell(new Msgs.Probe(seq), rec);
      }
      try {
        long last = done.get(DRAIN_LIMIT_MS, TimeUnit.MILLISECONDS);
        return new Result(hist, last - start, n, n);
      } catch (TimeoutException e) {
        // Replies are missing: the offered rate is past what the pair can carry (Artery drops
        // what its outbound queue cannot hold). Report what came back and how much was lost.
        return (Result) Patterns.ask(rec, Snapshot.INSTANCE, Duration.ofSeconds(10)).toCompletableFuture()
            .get(15, TimeUnit.SECONDS);
      }
    } finally {
      rec.tell(PoisonPill.getInstance(), ActorRef.noSender());
    }
  }

  static Report run(Main.Args args) throws Exception {
    double seconds = Double.parseDouble(args.option("seconds", args.quick ? "1" : "5"));
    int[] rates = args.quick ? new int[] {1_000} : new int[] {1_000, 10_000, 100_000};
    ActorSystem system = Node.remoteSystem(args.transport);
    String addr = Node.startRemoteNode(args.processes, args.transport);
    ActorRef echo = Node.resolve(system, addr, "echo0");
    double warm = args.quick ? 0.5 : 2;
    offer(system, echo, 10_000, warm);

    Report rep = new Report("latency", args.framework());
    rep.params.put("processes", args.processes);
    rep.params.put("seconds_per_rate", seconds);
    rep.params.put("message", "Probe(seq: long)");
    rep.params.put("serializer", "custom binary SerializerWithStringManifest (8-byte seq)");
    rep.params.put("transport", "Artery " + args.transport + " over loopback");
    rep.params.put("timing", "round trip from the intended send time (no coordinated omission); HDR histogram, 3 significant digits");
    rep.params.put("pacing", "a thread outside the actors parks until each intended send time (late wake-ups count against the round trip)");
    rep.params.put("warm_up", "10,000 msg/s for " + warm + " s, untimed");
    rep.params.put("lost", "probes with no reply " + DRAIN_LIMIT_MS / 1000 + " s after the last send (offered rate past capacity)");
    for (int rate : rates) {
      Result r = offer(system, echo, rate, seconds);
      Report.Row row = new Report.Row(rate + " msg/s").clients(1).throughput(r.received() * 2, r.nanos());
      row.p50us = r.hist().getValueAtPercentile(50) / 1e3;
      row.p99us = r.hist().getValueAtPercentile(99) / 1e3;
      row.with("rate", rate)
          .with("p90_us", r.hist().getValueAtPercentile(90) / 1e3)
          .with("p999_us", r.hist().getValueAtPercentile(99.9) / 1e3)
          .with("max_us", r.hist().getMaxValue() / 1e3)
          .with("sent", r.n())
          .with("lost", r.n() - r.received());
      rep.rows.add(row);
    }
    return rep;
  }
}
