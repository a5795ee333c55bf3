package rally.bench.pekko;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Runs Rally's benchmark scenarios (docs/benchmarks.md) on Apache Pekko, with the same
 * definitions and counting as rally-bench, and prints the same report.
 *
 * <pre>
 * java -jar target/pekko-bench.jar remote-ping-pong [--processes 2|1] [--transport tcp|aeron-udp] [--quick] [--json]
 * java -jar target/pekko-bench.jar max-throughput   [--processes 2|1] [--transport ...] [--quick] [--json]
 * java -jar target/pekko-bench.jar latency          [--processes 2|1] [--transport ...] [--quick] [--json]
 * java -jar target/pekko-bench.jar local-ping-pong  [--quick] [--json]
 * java -jar target/pekko-bench.jar grain-ping       [--parallelism 8,32,128,512] [--seconds S] [--quick] [--json]
 * java -jar target/pekko-bench.jar activation       [--activations 100000,1000000] [--workers 64] [--quick] [--json]
 * </pre>
 */
public final class Main {
  /** Bounds a whole invocation: reaching it means the harness is stuck, so it exits non-zero. */
  static final long RUN_LIMIT_MS = 15 * 60 * 1000;

  /** Bounds one row of any scenario (30 s with --quick). */
  static long rowLimitMs = 120_000;

  /**
   * The real standard output, which carries only the report (and the child's READY line).
   * System.out itself is pointed at stderr in main, because Pekko's default logger prints there.
   */
  static final java.io.PrintStream OUT = System.out;

  private Main() {}

  /** Parsed command line: flags every scenario accepts plus scenario-specific ones. */
  static final class Args {
    final String scenario;
    boolean json;
    boolean quick;
    int processes = 2;
    String transport = "tcp";
    final Map<String, String> options = new HashMap<>();

    Args(String scenario) {
      this.scenario = scenario;
    }

    String option(String name, String fallback) {
      return options.getOrDefault(name, fallback);
    }

    String framework() {
      return transport.equals("tcp") ? "pekko" : "pekko-aeron";
    }
  }

  public static void main(String[] argv) {
    if (argv.length < 1) {
      usage();
      System.exit(2);
    }
    System.setOut(System.err);
    try {
      Args args = parse(argv);
      if (args.scenario.equals("node")) {
        Node.runChild(args.transport);
        return;
      }
      if (args.scenario.equals("grain-member")) {
        Grain.runMember(Integer.parseInt(args.option("port", "0")), Integer.parseInt(args.option("seed-port", "0")));
        return;
      }
      Thread watchdog = new Thread(() -> {
        try {
          Thread.sleep(RUN_LIMIT_MS);
        } catch (InterruptedException e) {
          return;
        }
        fail(new IllegalStateException(args.scenario + " did not finish within " + RUN_LIMIT_MS / 1000 + " s"));
      });
      watchdog.setDaemon(true);
      watchdog.start();
      if (args.quick) rowLimitMs = 30_000;
      Report report = switch (args.scenario) {
        case "remote-ping-pong" -> PingPong.remote(args);
        case "local-ping-pong" -> PingPong.local(args);
        case "max-throughput" -> Throughput.run(args);
        case "latency" -> Latency.run(args);
        case "grain-ping" -> Grain.ping(args);
        case "activation" -> Grain.activation(args);
        default -> {
          usage();
          throw new IllegalArgumentException("unknown scenario " + args.scenario);
        }
      };
      OUT.print(args.json ? report.json() + "\n" : report.table());
      OUT.flush();
      Node.stopChildren();
      // Actor systems are not shut down gracefully: the report is out, and a stuck shutdown
      // must not turn a finished run into a hang.
      Runtime.getRuntime().halt(0);
    } catch (Throwable e) {
      fail(e);
    }
  }

  /** Parses flags and the scenario, in any order (the first bare word is the scenario). */
  static Args parse(String[] argv) {
    String scenario = null;
    Args a = null;
    List<String> rest = List.of(argv);
    Map<String, String> flags = new HashMap<>();
    List<String> switches = new ArrayList<>();
    for (int i = 0; i < rest.size(); i++) {
      String s = rest.get(i);
      switch (s) {
        case "--json", "--quick" -> switches.add(s);
        case "--processes", "--transport", "--clients", "--round-trips", "--seconds", "--scale",
            "--parallelism", "--activations", "--workers", "--port", "--seed-port" ->
            flags.put(s.substring(2), value(rest, ++i, s));
        default -> {
          if (s.startsWith("--") || scenario != null) throw new IllegalArgumentException("unexpected argument " + s);
          scenario = s;
        }
      }
    }
    if (scenario == null) throw new IllegalArgumentException("no scenario given");
    a = new Args(scenario);
    a.json = switches.contains("--json");
    a.quick = switches.contains("--quick");
    a.processes = Integer.parseInt(flags.getOrDefault("processes", "2"));
    a.transport = flags.getOrDefault("transport", "tcp");
    for (String k : List.of("clients", "round-trips", "seconds", "scale", "parallelism", "activations", "workers",
        "port", "seed-port")) {
      if (flags.containsKey(k)) a.options.put(k, flags.get(k));
    }
    if (!a.transport.equals("tcp") && !a.transport.equals("aeron-udp")) {
      throw new IllegalArgumentException("--transport must be tcp or aeron-udp");
    }
    return a;
  }

  private static String value(List<String> rest, int i, String flag) {
    if (i >= rest.size()) throw new IllegalArgumentException(flag + " needs a value");
    return rest.get(i);
  }

  static void usage() {
    System.err.println("usage: java -jar pekko-bench.jar <remote-ping-pong|max-throughput|latency|local-ping-pong|grain-ping|activation>"
        + " [--quick] [--json] [--processes 2|1] [--transport tcp|aeron-udp]");
  }

  static void fail(Throwable e) {
    System.err.println("pekko-bench: error: " + e);
    Node.stopChildren();
    Runtime.getRuntime().halt(1);
  }
}
