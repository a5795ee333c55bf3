package rally.bench.pekko;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/** The report every harness prints: a plain table, or one JSON object (docs/benchmarks.md). */
final class Report {
  final String scenario;
  final String framework;
  final Map<String, Object> params = new TreeMap<>();
  final List<Row> rows = new ArrayList<>();
  /** Print the Akka.NET RemotePingPong columns instead of the generic table. */
  boolean pingPongTable;

  Report(String scenario, String framework) {
    this.scenario = scenario;
    this.framework = framework;
    params.put("pekko_version", org.apache.pekko.Version.current());
    params.put("java_version", System.getProperty("java.version"));
    params.put("jvm", System.getProperty("java.vm.name"));
  }

  /** One result row: the contract's fixed fields plus scenario-specific extras, in order. */
  static final class Row {
    final String label;
    Long clients;
    Long totalMsgs;
    Double elapsedMs;
    Double msgsPerSec;
    Double p50us;
    Double p99us;
    final Map<String, Object> extra = new LinkedHashMap<>();

    Row(String label) {
      this.label = label;
    }

    Row clients(long n) {
      clients = n;
      return this;
    }

    Row throughput(long total, long elapsedNanos) {
      totalMsgs = total;
      elapsedMs = elapsedNanos / 1e6;
      msgsPerSec = elapsedNanos > 0 ? total / (elapsedNanos / 1e9) : 0.0;
      return this;
    }

    Row with(String key, Object value) {
      extra.put(key, value);
      return this;
    }

    Map<String, Object> toMap() {
      Map<String, Object> m = new LinkedHashMap<>();
      m.put("label", label);
      m.put("clients", clients);
      m.put("total_msgs", totalMsgs);
      m.put("elapsed_ms", elapsedMs);
      m.put("msgs_per_sec", msgsPerSec);
      m.put("p50_us", p50us);
      m.put("p99_us", p99us);
      m.putAll(extra);
      return m;
    }
  }

  String json() {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("scenario", scenario);
    m.put("framework", framework);
    Map<String, Object> machine = new LinkedHashMap<>();
    machine.put("cores", Runtime.getRuntime().availableProcessors());
    machine.put("cpu", cpuModel());
    m.put("machine", machine);
    m.put("params", params);
    List<Object> rs = new ArrayList<>();
    for (Row r : rows) rs.add(r.toMap());
    m.put("rows", rs);
    StringBuilder sb = new StringBuilder();
    write(sb, m);
    return sb.toString();
  }

  String table() {
    StringBuilder sb = new StringBuilder();
    sb.append(String.format("# %s (%s) on %d cores, %s%n", scenario, framework,
        Runtime.getRuntime().availableProcessors(), cpuModel()));
    params.forEach((k, v) -> sb.append(String.format("#   %s = %s%n", k, v)));
    if (pingPongTable) {
      sb.append("Num clients, Total [msg], Msgs/sec, Total [ms]\n");
      for (Row r : rows) {
        sb.append(String.format("%d, %d, %.0f, %.0f%n", r.clients, r.totalMsgs, r.msgsPerSec, r.elapsedMs));
      }
      return sb.toString();
    }
    List<String> keys = rows.isEmpty() ? List.of() : new ArrayList<>(rows.get(0).extra.keySet());
    sb.append("label, Total [msg], Msgs/sec, Total [ms], p50 [us], p99 [us]");
    for (String k : keys) sb.append(", ").append(k);
    sb.append('\n');
    for (Row r : rows) {
      sb.append(String.format("%s, %s, %s, %s, %s, %s", r.label, r.totalMsgs == null ? "-" : r.totalMsgs.toString(),
          fmt(r.msgsPerSec, 0), fmt(r.elapsedMs, 1), fmt(r.p50us, 1), fmt(r.p99us, 1)));
      for (String k : keys) {
        Object v = r.extra.get(k);
        sb.append(", ").append(v instanceof Double d ? String.format("%.2f", d) : v == null ? "-" : v.toString());
      }
      sb.append('\n');
    }
    return sb.toString();
  }

  private static String fmt(Double v, int decimals) {
    return v == null ? "-" : String.format("%." + decimals + "f", v);
  }

  static String cpuModel() {
    try {
      for (String line : Files.readAllLines(Path.of("/proc/cpuinfo"))) {
        if (line.startsWith("model name")) {
          int i = line.indexOf(':');
          if (i >= 0) return line.substring(i + 1).trim();
        }
      }
    } catch (IOException e) {
      // fall through
    }
    return "unknown";
  }

  @SuppressWarnings("unchecked")
  private static void write(StringBuilder sb, Object v) {
    if (v == null) {
      sb.append("null");
    } else if (v instanceof String s) {
      sb.append('"');
      for (char c : s.toCharArray()) {
        switch (c) {
          case '"' -> sb.append("\\\"");
          case '\\' -> sb.append("\\\\");
          case '\n' -> sb.append("\\n");
          default -> {
            if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
            else sb.append(c);
          }
        }
      }
      sb.append('"');
    } else if (v instanceof Double d) {
      sb.append(d.isNaN() || d.isInfinite() ? "null" : d.toString());
    } else if (v instanceof Number || v instanceof Boolean) {
      sb.append(v);
    } else if (v instanceof Map<?, ?> m) {
      sb.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> e : m.entrySet()) {
        if (!first) sb.append(',');
        first = false;
        write(sb, e.getKey().toString());
        sb.append(':');
        write(sb, e.getValue());
      }
      sb.append('}');
    } else if (v instanceof List<?> l) {
      sb.append('[');
      for (int i = 0; i < l.size(); i++) {
        if (i > 0) sb.append(',');
        write(sb, l.get(i));
      }
      sb.append(']');
    } else {
      write(sb, v.toString());
    }
  }
}
