package rally.bench.pekko;

import com.typesafe.config.Config;
import com.typesafe.config.ConfigFactory;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.HdrHistogram.Histogram;
import org.apache.pekko.actor.AbstractActor;
import org.apache.pekko.actor.ActorRef;
import org.apache.pekko.actor.ActorSystem;
import org.apache.pekko.actor.Props;
import org.apache.pekko.cluster.Cluster;
import org.apache.pekko.cluster.Member;
import org.apache.pekko.cluster.MemberStatus;
import org.apache.pekko.cluster.sharding.ClusterSharding;
import org.apache.pekko.cluster.sharding.ClusterShardingSettings;
import org.apache.pekko.cluster.sharding.ShardRegion;
import org.apache.pekko.pattern.Patterns;

/**
 * grain-ping and activation on Pekko cluster sharding: entities of the type "ping" hosted by two
 * member JVMs (role "ping"), driven by this JVM as a member without that role, which reaches them
 * through a shard region proxy. The three JVMs form the cluster from one seed node on
 * 127.0.0.1, over Artery TCP.
 */
final class Grain {
  private Grain() {}

  static final String TYPE = "ping";
  static final int MEMBERS = 2;
  /** Pekko's guidance is about ten shards per member at most; 100 is its usual example. */
  static final int SHARDS = 100;
  static final Duration REQUEST_TIMEOUT = Duration.ofSeconds(5);
  static final Duration CLUSTER_FORM_LIMIT = Duration.ofSeconds(90);

  /** Entities alive in this member JVM. */
  static final AtomicLong ACTIVE = new AtomicLong();

  /** The benchmark's entity: replies "Hello " + the text. */
  static final class PingEntity extends AbstractActor {
    @Override
    public void preStart() {
      ACTIVE.incrementAndGet();
    }

    @Override
    public void postStop() {
      ACTIVE.decrementAndGet();
    }

    @Override
    public Receive createReceive() {
      return receiveBuilder()
          .match(Msgs.GrainPing.class, m -> getSender().tell(new Msgs.GrainPong("Hello " + m.text()), getSelf()))
          .build();
    }
  }

  /** Answers the driver's questions about this member JVM. */
  static final class MemberStats extends AbstractActor {
    @Override
    public Receive createReceive() {
      return receiveBuilder()
          .match(Msgs.MemberQuery.class, m -> getSender().tell(
              new Msgs.MemberReply(Node.processCpuNanos(), residentBytes(), ACTIVE.get()), getSelf()))
          .build();
    }
  }

  static final ShardRegion.MessageExtractor EXTRACTOR = new ShardRegion.HashCodeMessageExtractor(SHARDS) {
    @Override
    public String entityId(Object message) {
      return message instanceof Msgs.GrainPing p ? p.identity() : null;
    }
  };

  /** Resident set size of this process (from /proc/self/statm), 0 if unknown. */
  static long residentBytes() {
    try {
      String[] fields = Files.readString(Path.of("/proc/self/statm")).trim().split("\\s+");
      return Long.parseLong(fields[1]) * 4096;
    } catch (Exception e) {
      return 0;
    }
  }

  static ActorSystem clusterSystem(int port, int seedPort, String role) {
    String text = "pekko.actor.provider = cluster\n"
        + "pekko.remote.artery.transport = tcp\n"
        + "pekko.remote.artery.canonical.port = " + port + "\n"
        + "pekko.cluster.seed-nodes = [\"pekko://bench@127.0.0.1:" + seedPort + "\"]\n"
        + "pekko.cluster.roles = [\"" + role + "\"]\n"
        + "pekko.cluster.jmx.multi-mbeans-in-same-jvm = on\n"
        + "pekko.cluster.log-info = off\n";
    Config config = ConfigFactory.parseString(text).withFallback(ConfigFactory.load());
    return ActorSystem.create("bench", config);
  }

  /** The "grain-member" subcommand: hosts the entity type, prints READY, serves until stdin closes. */
  static void runMember(int port, int seedPort) throws Exception {
    ActorSystem system = clusterSystem(port, seedPort, TYPE);
    ClusterSharding.get(system).start(TYPE, Props.create(PingEntity.class),
        ClusterShardingSettings.create(system).withRole(TYPE), EXTRACTOR);
    system.actorOf(Props.create(MemberStats.class), "member-stats");
    Main.OUT.println("READY " + Node.address(system));
    Main.OUT.flush();
    while (System.in.read() >= 0) {
      // drain; the parent never writes, it only closes
    }
    Runtime.getRuntime().halt(0);
  }

  /** The driver: the member JVMs, this JVM's cluster system and its shard region proxy. */
  static final class Driver {
    final ActorSystem system;
    final ActorRef proxy;
    final List<ActorRef> members = new ArrayList<>();

    Driver() throws Exception {
      int seedPort = freePort();
      List<String> addresses = new ArrayList<>();
      addresses.add(startMember(seedPort, seedPort));
      for (int i = 1; i < MEMBERS; i++) addresses.add(startMember(0, seedPort));
      system = clusterSystem(0, seedPort, "client");
      proxy = ClusterSharding.get(system).startProxy(TYPE, java.util.Optional.of(TYPE), EXTRACTOR);
      long deadline = System.nanoTime() + CLUSTER_FORM_LIMIT.toNanos();
      while (upMembers() < MEMBERS + 1) {
        if (System.nanoTime() > deadline) {
          throw new IllegalStateException("the cluster had " + upMembers() + " of " + (MEMBERS + 1)
              + " members up after " + CLUSTER_FORM_LIMIT.toSeconds() + " s");
        }
        Thread.sleep(50);
      }
      for (String address : addresses) members.add(Node.resolve(system, address, "member-stats"));
    }

    long upMembers() {
      long n = 0;
      for (Member m : Cluster.get(system).state().getMembers()) {
        if (m.status() == MemberStatus.up()) n++;
      }
      return n;
    }

    /**
     * Sends one request to an entity and checks the reply; a failure is an exception. The check
     * and everything chained after it run on the actor system's dispatcher: the future that
     * {@code Patterns.ask} returns runs even its non-async stages asynchronously, on
     * {@code CompletableFuture}'s default executor, which starts a new thread per task when the
     * common pool has one thread (as on a 2-core machine).
     */
    CompletableFuture<Void> ping(String identity, String text) {
      return Patterns.ask(proxy, new Msgs.GrainPing(identity, text), REQUEST_TIMEOUT).toCompletableFuture()
          .thenAcceptAsync(reply -> {
            if (!(reply instanceof Msgs.GrainPong p) || !p.text().equals("Hello " + text)) {
              throw new IllegalStateException("wrong reply " + reply + " to " + text);
            }
          }, system.dispatcher());
    }

    List<Msgs.MemberReply> memberStats() throws Exception {
      List<Msgs.MemberReply> out = new ArrayList<>();
      for (ActorRef m : members) {
        out.add((Msgs.MemberReply) Patterns.ask(m, new Msgs.MemberQuery(), Duration.ofSeconds(10))
            .toCompletableFuture().get(15, TimeUnit.SECONDS));
      }
      return out;
    }
  }

  static int freePort() throws Exception {
    try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      return s.getLocalPort();
    }
  }

  /** Starts a member JVM (this jar, "grain-member") and returns its address. */
  static String startMember(int port, int seedPort) throws Exception {
    String java = ProcessHandle.current().info().command().orElse("java");
    String jar = Path.of(Main.class.getProtectionDomain().getCodeSource().getLocation().toURI()).toString();
    List<String> cmd = new ArrayList<>();
    cmd.add(java);
    cmd.addAll(ManagementFactory.getRuntimeMXBean().getInputArguments());
    cmd.addAll(List.of("-jar", jar, "grain-member", "--port", Integer.toString(port), "--seed-port",
        Integer.toString(seedPort)));
    Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
    Node.adoptChild(p);
    BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
    CompletableFuture<String> line = CompletableFuture.supplyAsync(() -> {
      try {
        String l;
        while ((l = r.readLine()) != null && !l.startsWith("READY ")) {
          // skip anything printed before the READY line
        }
        Thread drain = new Thread(() -> {
          try {
            while (r.readLine() != null) {
              // keep the child's pipe from filling
            }
          } catch (Exception e) {
            // child gone
          }
        });
        drain.setDaemon(true);
        drain.start();
        return l;
      } catch (Exception e) {
        return null;
      }
    });
    String l = line.get(Node.CHILD_START_LIMIT.toSeconds(), TimeUnit.SECONDS);
    if (l == null) throw new IllegalStateException("member JVM did not start");
    return l.substring("READY ".length()).trim();
  }

  private static final SecureRandom RANDOM = new SecureRandom();

  static String randomText() {
    byte[] b = new byte[16];
    RANDOM.nextBytes(b);
    return HexFormat.of().formatHex(b);
  }

  static int[] list(String text) {
    String[] parts = text.split(",");
    int[] out = new int[parts.length];
    for (int i = 0; i < parts.length; i++) {
      out[i] = Integer.parseInt(parts[i].trim());
      if (out[i] <= 0) throw new IllegalArgumentException(parts[i] + " is not a positive number");
    }
    return out;
  }

  static long rowLimitMs(boolean quick) {
    return quick ? 60_000 : 600_000;
  }

  static Report report(String scenario) {
    Report rep = new Report(scenario, "pekko");
    rep.params.put("layout", "2 member JVMs hosting the entity type (role ping) + this JVM via a shard region proxy, Artery TCP on loopback");
    rep.params.put("shards", SHARDS);
    rep.params.put("serializer", "hand-written binary (BenchSerializer)");
    rep.params.put("request_timeout_ms", REQUEST_TIMEOUT.toMillis());
    rep.params.put("remember_entities", "off (default)");
    return rep;
  }

  /**
   * Untimed closed loops before the first row, so that the three JVMs' JIT compilers have done
   * their work (a cold run's rate was still climbing after 30 s): the loops of {@link #ping} on
   * identities of their own for this long, or {@link #activation}'s workers on fresh identities.
   */
  static double jitWarmUpSeconds(Main.Args args) {
    return args.quick ? 1 : 15;
  }

  /** Runs {@code loops} closed loops on the identities {@code prefix + i} for {@code seconds}. */
  static void warmUp(Driver d, String prefix, int loops, double seconds) throws Exception {
    long[] errors = new long[loops];
    CountDownLatch done = new CountDownLatch(loops);
    long end = System.nanoTime() + (long) (seconds * 1e9);
    for (int i = 0; i < loops; i++) {
      loop(d, prefix + i, new Histogram(60_000_000L, 3), errors, i, end, done);
    }
    if (!done.await((long) (seconds * 1000) + REQUEST_TIMEOUT.toMillis() + 5000, TimeUnit.MILLISECONDS)) {
      throw new IllegalStateException("the JIT warm-up did not finish");
    }
  }

  /** The messaging test: P loops, each owning one entity, in a closed loop. */
  static Report ping(Main.Args args) throws Exception {
    int[] rows = list(args.option("parallelism", args.quick ? "8,32" : "8,32,128,512"));
    double seconds = Double.parseDouble(args.option("seconds", args.quick ? "1" : "10"));
    Driver d = new Driver();
    Report rep = report("grain-ping");
    rep.params.put("seconds", seconds);
    double warm = jitWarmUpSeconds(args);
    warmUp(d, "warm-", 32, warm);
    rep.params.put("warm_up", "JIT: " + warm + " s of 32 untimed closed loops on identities of their own before the"
        + " first row; then one request per loop before each row's timed part (activates its entity)");
    for (int p : rows) {
      for (int i = 0; i < p; i++) {
        d.ping("ping-" + i, randomText()).get(REQUEST_TIMEOUT.toSeconds() + 5, TimeUnit.SECONDS);
      }
      List<Msgs.MemberReply> before = d.memberStats();
      long clientBefore = Node.processCpuNanos();
      Histogram[] hists = new Histogram[p];
      long[] errors = new long[p];
      CountDownLatch done = new CountDownLatch(p);
      long start = System.nanoTime();
      long end = start + (long) (seconds * 1e9);
      for (int i = 0; i < p; i++) {
        hists[i] = new Histogram(60_000_000L, 3);
        loop(d, "ping-" + i, hists[i], errors, i, end, done);
      }
      if (!done.await(rowLimitMs(args.quick), TimeUnit.MILLISECONDS)) {
        throw new IllegalStateException("P=" + p + " did not finish within its time limit");
      }
      long elapsed = System.nanoTime() - start;
      long clientCpu = Node.processCpuNanos() - clientBefore;
      List<Msgs.MemberReply> after = d.memberStats();
      Histogram total = new Histogram(60_000_000L, 3);
      long errs = 0;
      for (int i = 0; i < p; i++) {
        total.add(hists[i]);
        errs += errors[i];
      }
      Report.Row row = new Report.Row("P=" + p).clients(p).throughput(total.getTotalCount(), elapsed);
      row.p50us = (double) total.getValueAtPercentile(50);
      row.p99us = (double) total.getValueAtPercentile(99);
      row.with("parallelism", p).with("errors", errs).with("mean_us", total.getMean());
      row.with("client_cpu_ms", clientCpu / 1e6);
      List<Object> memberCpu = new ArrayList<>();
      for (int i = 0; i < after.size(); i++) memberCpu.add((after.get(i).cpuNs() - before.get(i).cpuNs()) / 1e6);
      row.with("member_cpu_ms", memberCpu);
      rep.rows.add(row);
    }
    return rep;
  }

  /** One closed loop: the next request is sent when the previous one completes. */
  private static void loop(Driver d, String identity, Histogram hist, long[] errors, int i, long end,
      CountDownLatch done) {
    if (System.nanoTime() >= end) {
      done.countDown();
      return;
    }
    String text = randomText();
    long t0 = System.nanoTime();
    d.ping(identity, text).whenCompleteAsync((ok, err) -> {
      synchronized (hist) {
        if (err != null) errors[i]++;
        else hist.recordValue(Math.max(1, (System.nanoTime() - t0) / 1000));
      }
      loop(d, identity, hist, errors, i, end, done);
    }, d.system.dispatcher());
  }

  /** The activation test: N fresh identities taken in order by P workers, one request each. */
  static Report activation(Main.Args args) throws Exception {
    int[] rows = list(args.option("activations", args.quick ? "10000" : "100000,1000000"));
    int workers = Integer.parseInt(args.option("workers", "64"));
    Driver d = new Driver();
    Report rep = report("activation");
    rep.params.put("workers", workers);
    double warm = jitWarmUpSeconds(args);
    warmUpActivations(d, workers, warm);
    rep.params.put("warm_up", "JIT: " + warm + " s of the workers activating identities of their own (row " + WARM_UP_ROW + ")"
        + " before the first row; in the rows every identity is new, the first request activates it");
    for (int index = 0; index < rows.length; index++) {
      int n = rows[index];
      List<Msgs.MemberReply> before = d.memberStats();
      AtomicLong next = new AtomicLong();
      Histogram[] hists = new Histogram[workers];
      long[] errors = new long[workers];
      CountDownLatch done = new CountDownLatch(workers);
      long start = System.nanoTime();
      for (int w = 0; w < workers; w++) {
        hists[w] = new Histogram(60_000_000L, 3);
        activate(d, index, n, next, hists[w], errors, w, done);
      }
      if (!done.await(rowLimitMs(args.quick), TimeUnit.MILLISECONDS)) {
        throw new IllegalStateException("N=" + n + " did not finish within its time limit");
      }
      long elapsed = System.nanoTime() - start;
      List<Msgs.MemberReply> after = d.memberStats();
      Histogram total = new Histogram(60_000_000L, 3);
      long errs = 0;
      for (int w = 0; w < workers; w++) {
        total.add(hists[w]);
        errs += errors[w];
      }
      Report.Row row = new Report.Row("N=" + n).throughput(total.getTotalCount(), elapsed);
      row.p50us = (double) total.getValueAtPercentile(50);
      row.p99us = (double) total.getValueAtPercentile(99);
      row.with("activations", total.getTotalCount()).with("errors", errs).with("activations_per_sec", row.msgsPerSec);
      List<Object> active = new ArrayList<>();
      List<Object> perMember = new ArrayList<>();
      double sum = 0;
      for (int i = 0; i < after.size(); i++) {
        long grains = after.get(i).active() - before.get(i).active();
        double bytes = grains > 0 ? (double) (after.get(i).residentBytes() - before.get(i).residentBytes()) / grains : 0;
        active.add(grains);
        perMember.add(bytes);
        sum += bytes;
      }
      row.with("active_per_member", active).with("bytes_per_actor_per_member", perMember);
      row.with("bytes_per_actor", sum / after.size());
      rep.rows.add(row);
    }
    return rep;
  }

  /** The row number of the JIT warm-up's identities: no measured row has it. */
  static final int WARM_UP_ROW = 1_000_000;

  /**
   * The identity of the k-th request of activation row {@code row}: UUID-shaped (8-4-4-4-12
   * lowercase hex), spread over the key space as real identities are, unique (the first 64 bits
   * are SplitMix64's finaliser of {@code row << 32 | k}, a bijection), and the same string Rally's
   * harness computes.
   */
  static String activationIdentity(long row, long k) {
    long hi = splitmix64((row << 32) | (k & 0xffffffffL));
    long lo = splitmix64(hi);
    return String.format("%08x-%04x-%04x-%04x-%012x", hi >>> 32, (hi >>> 16) & 0xffff, hi & 0xffff,
        lo >>> 48, lo & 0xffffffffffffL);
  }

  /** SplitMix64's output function: a bijection of 64-bit values that scatters neighbours. */
  static long splitmix64(long x) {
    long z = x + 0x9e3779b97f4a7c15L;
    z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
    z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
    return z ^ (z >>> 31);
  }

  /** The activation workers on fresh identities (row {@link #WARM_UP_ROW}) for {@code seconds}, untimed. */
  static void warmUpActivations(Driver d, int workers, double seconds) throws Exception {
    AtomicLong next = new AtomicLong();
    long[] errors = new long[workers];
    CountDownLatch done = new CountDownLatch(workers);
    long end = System.nanoTime() + (long) (seconds * 1e9);
    for (int w = 0; w < workers; w++) {
      warmActivate(d, next, end, errors, w, done);
    }
    if (!done.await((long) (seconds * 1000) + REQUEST_TIMEOUT.toMillis() + 5000, TimeUnit.MILLISECONDS)) {
      throw new IllegalStateException("the JIT warm-up did not finish");
    }
  }

  private static void warmActivate(Driver d, AtomicLong next, long end, long[] errors, int w, CountDownLatch done) {
    if (System.nanoTime() >= end) {
      done.countDown();
      return;
    }
    d.ping(activationIdentity(WARM_UP_ROW, next.getAndIncrement()), "").whenCompleteAsync((ok, err) -> {
      if (err != null) errors[w]++;
      warmActivate(d, next, end, errors, w, done);
    }, d.system.dispatcher());
  }

  /** One worker: takes the next identity, activates it, repeats until all are taken. */
  private static void activate(Driver d, int index, int n, AtomicLong next, Histogram hist, long[] errors, int w,
      CountDownLatch done) {
    long k = next.getAndIncrement();
    if (k >= n) {
      done.countDown();
      return;
    }
    long t0 = System.nanoTime();
    d.ping(activationIdentity(index, k), "").whenCompleteAsync((ok, err) -> {
      synchronized (hist) {
        if (err != null) errors[w]++;
        else hist.recordValue(Math.max(1, (System.nanoTime() - t0) / 1000));
      }
      activate(d, index, n, next, hist, errors, w, done);
    }, d.system.dispatcher());
  }
}
