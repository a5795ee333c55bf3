package rally.bench.pekko;

import com.typesafe.config.Config;
import com.typesafe.config.ConfigFactory;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pekko.actor.AbstractActor;
import org.apache.pekko.actor.ActorRef;
import org.apache.pekko.actor.ActorSystem;
import org.apache.pekko.actor.ExtendedActorSystem;
import org.apache.pekko.actor.Props;
import org.apache.pekko.pattern.Patterns;

/** Starting nodes: actor systems with Artery, the echo node's actors, and the child process. */
final class Node {
  private Node() {}

  /** How many echo actors a node spawns: the largest client count of remote-ping-pong. */
  static final int MAX_ECHOES = 30;

  /** Bounds how long the second node may take to start and print its address. */
  static final Duration CHILD_START_LIMIT = Duration.ofSeconds(60);

  private static final List<Process> children = new ArrayList<>();

  /** A system with remoting over Artery ("tcp" or "aeron-udp") on 127.0.0.1 and a free port. */
  static ActorSystem remoteSystem(String transport) {
    String extra = "pekko.actor.provider = remote\n"
        + "pekko.remote.artery.transport = " + transport + "\n";
    if (transport.equals("aeron-udp")) {
      // Each embedded media driver spins; on 2 cores two of them fight the actors for CPU, so
      // they are told to back off as much as Artery allows (idle-cpu-level 1 = least spinning).
      extra += "pekko.remote.artery.advanced.aeron.idle-cpu-level = 1\n";
    }
    Config config = ConfigFactory.parseString(extra).withFallback(ConfigFactory.load());
    return ActorSystem.create("bench", config);
  }

  /** A system without remoting, for the in-process scenarios. */
  static ActorSystem localSystem() {
    return ActorSystem.create("bench", ConfigFactory.load());
  }

  /** The address ("pekko://bench@127.0.0.1:port") this system listens on. */
  static String address(ActorSystem system) {
    return ((ExtendedActorSystem) system).provider().getDefaultAddress().toString();
  }

  /** Replies to the sender with the same message (remote-ping-pong, latency). */
  static final class Echo extends AbstractActor {
    @Override
    public Receive createReceive() {
      return receiveBuilder()
          .match(Msgs.Ping.class, m -> getSender().tell(m, getSelf()))
          .match(Msgs.Probe.class, m -> getSender().tell(m, getSelf()))
          .match(Msgs.CpuQuery.class, m -> getSender().tell(new Msgs.CpuReply(processCpuNanos()), getSelf()))
          .build();
    }
  }

  /** The max-throughput receiver: counts payloads and acknowledges every ackEvery. */
  static final class Sink extends AbstractActor {
    private long received;
    private long ackEvery = 1;

    @Override
    public Receive createReceive() {
      return receiveBuilder()
          .match(Msgs.Payload.class, m -> {
            received++;
            if (received % ackEvery == 0) getSender().tell(new Msgs.Ack(received), getSelf());
          })
          .match(Msgs.Reset.class, m -> {
            received = 0;
            ackEvery = m.ackEvery();
            getSender().tell(new Msgs.Ack(0), getSelf());
          })
          .match(Msgs.CpuQuery.class, m -> getSender().tell(new Msgs.CpuReply(processCpuNanos()), getSelf()))
          .build();
    }
  }

  /** Spawns "echo0".."echo29" and "sink". */
  static void startNodeActors(ActorSystem system) {
    for (int i = 0; i < MAX_ECHOES; i++) system.actorOf(Props.create(Echo.class), "echo" + i);
    system.actorOf(Props.create(Sink.class), "sink");
  }

  /** The "node" subcommand: prints "READY address" and serves until stdin closes. */
  static void runChild(String transport) throws Exception {
    ActorSystem system = remoteSystem(transport);
    startNodeActors(system);
    Main.OUT.println("READY " + address(system));
    Main.OUT.flush();
    while (System.in.read() >= 0) {
      // drain; the parent never writes, it only closes
    }
    Runtime.getRuntime().halt(0);
  }

  /** The second node's address: a child JVM (processes == 2) or a second system here (1). */
  static String startRemoteNode(int processes, String transport) throws Exception {
    if (processes == 1) {
      ActorSystem system = remoteSystem(transport);
      startNodeActors(system);
      return address(system);
    }
    if (processes != 2) throw new IllegalArgumentException("--processes must be 1 or 2, not " + processes);
    String java = ProcessHandle.current().info().command().orElse("java");
    String jar = Path.of(Main.class.getProtectionDomain().getCodeSource().getLocation().toURI()).toString();
    List<String> cmd = new ArrayList<>();
    cmd.add(java);
    cmd.addAll(ManagementFactory.getRuntimeMXBean().getInputArguments());
    cmd.addAll(List.of("-jar", jar, "node", "--transport", transport));
    Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
    synchronized (children) {
      children.add(p);
    }
    CompletableFuture<String> line = CompletableFuture.supplyAsync(() -> {
      try {
        BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        String l = r.readLine();
        Thread drain = new Thread(() -> {
          try {
            while (r.readLine() != null) {
              // the child prints nothing more; keep its pipe from filling
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
    String l = line.get(CHILD_START_LIMIT.toSeconds(), TimeUnit.SECONDS);
    if (l == null || !l.startsWith("READY ")) throw new IllegalStateException("echo node did not start (said " + l + ")");
    return l.substring("READY ".length()).trim();
  }

  /** Records a child process so that stopChildren kills it. */
  static void adoptChild(Process p) {
    synchronized (children) {
      children.add(p);
    }
  }

  /** Kills any child node and waits briefly for it. */
  static void stopChildren() {
    synchronized (children) {
      for (Process p : children) {
        p.destroyForcibly();
        try {
          p.waitFor(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
      children.clear();
    }
  }

  /** Resolves a named actor on a remote node. */
  static ActorRef resolve(ActorSystem system, String address, String name) throws Exception {
    return system.actorSelection(address + "/user/" + name).resolveOne(Duration.ofSeconds(20))
        .toCompletableFuture().get(30, TimeUnit.SECONDS);
  }

  /** Asks a (possibly remote) actor for its process CPU time. */
  static long queryCpu(ActorRef ref) throws Exception {
    Object r = Patterns.ask(ref, new Msgs.CpuQuery(), Duration.ofSeconds(10)).toCompletableFuture().get(15, TimeUnit.SECONDS);
    return ((Msgs.CpuReply) r).cpuNs();
  }

  /** This JVM's CPU time, user plus system, in nanoseconds. */
  static long processCpuNanos() {
    var os = ManagementFactory.getOperatingSystemMXBean();
    if (os instanceof com.sun.management.OperatingSystemMXBean sun) return sun.getProcessCpuTime();
    return 0;
  }
}
