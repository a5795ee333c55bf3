package rally.bench.pekko;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.pekko.actor.AbstractActor;
import org.apache.pekko.actor.ActorRef;
import org.apache.pekko.actor.ActorSystem;
import org.apache.pekko.actor.PoisonPill;
import org.apache.pekko.actor.Props;
import org.apache.pekko.pattern.Patterns;

/** max-throughput: one sender floods one receiver on the other node (Artery MaxThroughputSpec shape). */
final class Throughput {
  private Throughput() {}

  /**
   * The receiver acknowledges every ACK_EVERY messages and the sender keeps at most WINDOW
   * unacknowledged: Artery's outbound queue (outbound-message-queue-size = 3072) drops messages
   * past its size, and the figure is to be sustained rate, not queue growth. Every peer uses it.
   */
  static final int ACK_EVERY = 250;

  static final int WINDOW = 2_000;

  /** Sends want payloads, at most WINDOW unacknowledged; completes done when all are acknowledged. */
  static final class Flooder extends AbstractActor {
    private final ActorRef sink;
    private final byte[] data;
    private final long want;
    private final CompletableFuture<Void> done;
    private long sent;
    private long acked;

    Flooder(ActorRef sink, Integer size, Long want, CompletableFuture<Void> done) {
      this.sink = sink;
      this.data = new byte[size];
      this.want = want;
      this.done = done;
    }

    @Override
    public Receive createReceive() {
      return receiveBuilder()
          .match(Msgs.Go.class, g -> fill())
          .match(Msgs.Ack.class, a -> {
            acked = a.received();
            if (acked >= want) {
              done.complete(null);
              return;
            }
            fill();
          })
          .build();
    }

    private void fill() {
      while (sent < want && sent - acked < WINDOW) {
        sent++;
        sink.tell(new Msgs.Payload(sent, data), getSelf());
      }
    }
  }

  record Flow(long nanos, long senderCpu, long receiverCpu) {}

  static Flow flood(ActorSystem system, ActorRef sink, long n, int size, boolean measureCpu) throws Exception {
    Patterns.ask(sink, new Msgs.Reset(ACK_EVERY), Duration.ofSeconds(10)).toCompletableFuture().get(15, TimeUnit.SECONDS);
    CompletableFuture<Void> done = new CompletableFuture<>();
    ActorRef flooder = system.actorOf(Props.create(Flooder.class, sink, size, n, done));
    try {
      long recv0 = measureCpu ? Node.queryCpu(sink) : 0;
      long cpu0 = Node.processCpuNanos();
      long start = System.nanoTime();
      flooder.tell(Msgs.Go.INSTANCE, ActorRef.noSender());
      done.get(Main.rowLimitMs, TimeUnit.MILLISECONDS);
      long nanos = System.nanoTime() - start;
      long cpu = Node.processCpuNanos() - cpu0;
      long recv = measureCpu ? Node.queryCpu(sink) - recv0 : 0;
      return new Flow(nanos, cpu, recv);
    } catch (TimeoutException e) {
      throw new IllegalStateException(n + " payloads of " + size + " B not acknowledged within " + Main.rowLimitMs / 1000 + " s");
    } finally {
      flooder.tell(PoisonPill.getInstance(), ActorRef.noSender());
    }
  }

  static Report run(Main.Args args) throws Exception {
    double scale = Double.parseDouble(args.option("scale", "1"));
    int[] sizes = {100, 1024, 10 * 1024};
    long[] counts = args.quick ? new long[] {50_000, 20_000, 5_000} : new long[] {1_000_000, 500_000, 100_000};
    ActorSystem system = Node.remoteSystem(args.transport);
    String addr = Node.startRemoteNode(args.processes, args.transport);
    ActorRef sink = Node.resolve(system, addr, "sink");
    int warm = args.quick ? 50_000 : 300_000;
    flood(system, sink, warm, 100, false);
    flood(system, sink, warm / 10, 10 * 1024, false);

    Report rep = new Report("max-throughput", args.framework());
    rep.params.put("processes", args.processes);
    rep.params.put("flow_control", "receiver acknowledges every " + ACK_EVERY + "; at most " + WINDOW + " unacknowledged");
    rep.params.put("message", "Payload(seq: long, data: byte[])");
    rep.params.put("serializer", "custom binary SerializerWithStringManifest (8-byte seq + raw payload)");
    rep.params.put("transport", "Artery " + args.transport + " over loopback");
    rep.params.put("warm_up", String.format("%,d x 100 B and %,d x 10 KiB, untimed", warm, warm / 10));
    rep.params.put("mb", "10^6 bytes of payload");
    for (int i = 0; i < sizes.length; i++) {
      long n = Math.max(ACK_EVERY, (long) (counts[i] * scale) / ACK_EVERY * ACK_EVERY);
      Flow f = flood(system, sink, n, sizes[i], args.processes == 2);
      Report.Row row = new Report.Row(sizes[i] + " B").clients(1).throughput(n, f.nanos())
          .with("payload_bytes", sizes[i])
          .with("mb_per_sec", n * (double) sizes[i] / (f.nanos() / 1e9) / 1e6);
      if (args.processes == 2) {
        row.with("sender_cpu_ms", f.senderCpu() / 1e6).with("receiver_cpu_ms", f.receiverCpu() / 1e6);
      } else {
        row.with("process_cpu_ms", f.senderCpu() / 1e6);
      }
      rep.rows.add(row);
    }
    return rep;
  }
}
