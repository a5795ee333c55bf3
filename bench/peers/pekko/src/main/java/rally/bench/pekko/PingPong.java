package rally.bench.pekko;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.pekko.actor.AbstractActor;
import org.apache.pekko.actor.ActorRef;
import org.apache.pekko.actor.ActorSystem;
import org.apache.pekko.actor.PoisonPill;
import org.apache.pekko.actor.Props;

/** remote-ping-pong (Akka.NET RemotePingPong) and local-ping-pong. */
final class PingPong {
  private PingPong() {}

  /** Round trips in flight per remote-ping-pong client (Akka.NET primes each with 50). */
  static final int IN_FLIGHT_REMOTE = 50;

  /**
   * Sends its first inFlight messages on Go, then answers every reply with the next request until
   * it has received want replies, then completes done.
   */
  static final class Pinger extends AbstractActor {
    private final ActorRef target;
    private final int inFlight;
    private final int want;
    private final CompletableFuture<Void> done;
    private final Msgs.Ping msg = new Msgs.Ping("hit");
    private int sent;
    private int received;

    Pinger(ActorRef target, Integer inFlight, Integer want, CompletableFuture<Void> done) {
      this.target = target;
      this.inFlight = inFlight;
      this.want = want;
      this.done = done;
    }

    @Override
    public Receive createReceive() {
      return receiveBuilder()
          .match(Msgs.Go.class, g -> {
            while (sent < inFlight && sent < want) {
              sent++;
              target.tell(msg, getSelf());
            }
          })
          .match(Msgs.Ping.class, p -> {
            received++;
            if (received == want) {
              done.complete(null);
              return;
            }
            if (sent < want) {
              sent++;
              target.tell(p, getSelf());
            }
          })
          .build();
    }
  }

  /** Replies with the same message (local-ping-pong's other half). */
  static final class Ponger extends AbstractActor {
    @Override
    public Receive createReceive() {
      return receiveBuilder().match(Msgs.Ping.class, m -> getSender().tell(m, getSelf())).build();
    }
  }

  /** Runs one pinger per target and gives the nanoseconds from the start signals to the last done. */
  static long runPairs(ActorSystem system, List<ActorRef> targets, int inFlight, int want) throws Exception {
    List<ActorRef> pingers = new ArrayList<>();
    List<CompletableFuture<Void>> dones = new ArrayList<>();
    for (ActorRef t : targets) {
      CompletableFuture<Void> done = new CompletableFuture<>();
      dones.add(done);
      pingers.add(system.actorOf(Props.create(Pinger.class, t, inFlight, want, done)));
    }
    try {
      long start = System.nanoTime();
      for (ActorRef p : pingers) p.tell(Msgs.Go.INSTANCE, ActorRef.noSender());
      CompletableFuture.allOf(dones.toArray(new CompletableFuture[0])).get(Main.rowLimitMs, TimeUnit.MILLISECONDS);
      return System.nanoTime() - start;
    } catch (TimeoutException e) {
      throw new IllegalStateException(targets.size() + " pingers did not finish " + want + " round trips within "
          + Main.rowLimitMs / 1000 + " s");
    } finally {
      for (ActorRef p : pingers) p.tell(PoisonPill.getInstance(), ActorRef.noSender());
    }
  }

  static List<Integer> ints(String s) {
    List<Integer> out = new ArrayList<>();
    for (String part : s.split(",")) out.add(Integer.parseInt(part.trim()));
    return out;
  }

  static Report remote(Main.Args args) throws Exception {
    List<Integer> clients = ints(args.option("clients", args.quick ? "1,5" : "1,5,10,15,20,25,30"));
    int roundTrips = Integer.parseInt(args.option("round-trips", args.quick ? "5000" : "100000"));
    for (int c : clients) {
      if (c < 1 || c > Node.MAX_ECHOES) throw new IllegalArgumentException("clients must be 1.." + Node.MAX_ECHOES);
    }
    ActorSystem system = Node.remoteSystem(args.transport);
    String addr = Node.startRemoteNode(args.processes, args.transport);
    List<ActorRef> echoes = new ArrayList<>();
    for (int i = 0; i < Node.MAX_ECHOES; i++) echoes.add(Node.resolve(system, addr, "echo" + i));

    // JVM warm-up on both nodes: the JIT compiles the hot paths before any timed row.
    int warm = args.quick ? 5_000 : 20_000;
    runPairs(system, echoes.subList(0, 1), IN_FLIGHT_REMOTE, warm);
    runPairs(system, echoes.subList(0, 5), IN_FLIGHT_REMOTE, warm);
    runPairs(system, echoes.subList(0, 20), IN_FLIGHT_REMOTE, warm);

    Report rep = new Report("remote-ping-pong", args.framework());
    rep.pingPongTable = true;
    rep.params.put("processes", args.processes);
    rep.params.put("in_flight_per_client", IN_FLIGHT_REMOTE);
    rep.params.put("round_trips_per_client", roundTrips);
    rep.params.put("message", "Ping(\"hit\")");
    rep.params.put("serializer", "custom binary SerializerWithStringManifest (1-letter manifest, raw UTF-8 body)");
    rep.params.put("transport", "Artery " + args.transport + " over loopback");
    rep.params.put("warm_up", String.format("1, 5 and 20 clients x %,d round trips, untimed", warm));
    for (int c : clients) {
      long nanos = runPairs(system, echoes.subList(0, c), IN_FLIGHT_REMOTE, roundTrips);
      rep.rows.add(new Report.Row(c == 1 ? "1 client" : c + " clients").clients(c)
          .throughput((long) c * roundTrips * 2, nanos));
    }
    return rep;
  }

  static Report local(Main.Args args) throws Exception {
    int roundTrips = Integer.parseInt(args.option("round-trips", args.quick ? "100000" : "1000000"));
    int cores = Runtime.getRuntime().availableProcessors();
    ActorSystem system = Node.localSystem();
    Report rep = new Report("local-ping-pong", "pekko");
    rep.params.put("round_trips_per_pair", roundTrips);
    rep.params.put("message", "Ping(\"hit\") reference (no serialization in process)");
    rep.params.put("pairs", "1 and one per core (" + cores + ")");
    rep.params.put("dispatcher", "Pekko default-dispatcher (fork-join, parallelism-min 8, throughput 5)");
    int warm = args.quick ? 100_000 : 500_000;
    rep.params.put("warm_up", String.format("1 pair x %,d round trips at 50 and at 1 in flight, untimed", warm));

    List<ActorRef> warmPong = List.of(system.actorOf(Props.create(Ponger.class)));
    runPairs(system, warmPong, 50, warm);
    runPairs(system, warmPong, 1, warm / 5);
    List<Integer> pairCounts = cores > 1 ? List.of(1, cores) : List.of(1);
    for (int pairs : pairCounts) {
      for (int inFlight : new int[] {1, 50}) {
        List<ActorRef> pongs = new ArrayList<>();
        for (int i = 0; i < pairs; i++) pongs.add(system.actorOf(Props.create(Ponger.class)));
        long nanos = runPairs(system, pongs, inFlight, roundTrips);
        for (ActorRef p : pongs) p.tell(PoisonPill.getInstance(), ActorRef.noSender());
        String label = pairs + (pairs == 1 ? " pair" : " pairs") + ", " + inFlight + " in flight";
        rep.rows.add(new Report.Row(label).clients(pairs).throughput((long) pairs * roundTrips * 2, nanos)
            .with("in_flight", inFlight));
      }
    }
    return rep;
  }
}
