package rally.bench.pekko;

/**
 * The harness's messages. Every remote message implements {@link BenchMsg}, which is bound to
 * {@link BenchSerializer} in {@code application.conf}, so no Java serialization is involved.
 */
final class Msgs {
  private Msgs() {}

  /** Marker for messages that cross the wire through {@link BenchSerializer}. */
  interface BenchMsg {}

  /** remote-ping-pong and local-ping-pong: the tiny message ("hit", as in Akka.NET RemotePingPong). */
  record Ping(String text) implements BenchMsg {}

  /** max-throughput: one payload; seq counts from 1. */
  record Payload(long seq, byte[] data) implements BenchMsg {}

  /** max-throughput: the receiver's count so far, sent every ackEvery messages. */
  record Ack(long received) implements BenchMsg {}

  /** max-throughput: resets the receiver and sets how often it acknowledges. */
  record Reset(int ackEvery) implements BenchMsg {}

  /** latency: one probe, echoed unchanged. */
  record Probe(long seq) implements BenchMsg {}

  /** Asks a node for its process CPU time. */
  record CpuQuery() implements BenchMsg {}

  record CpuReply(long cpuNs) implements BenchMsg {}

  /** grain-ping and activation: a request to the entity with this identity. */
  record GrainPing(String identity, String text) implements BenchMsg {}

  /** The entity's reply: "Hello " + the text. */
  record GrainPong(String text) implements BenchMsg {}

  /** Asks a member JVM for its CPU time, resident bytes and live entities. */
  record MemberQuery() implements BenchMsg {}

  record MemberReply(long cpuNs, long residentBytes, long active) implements BenchMsg {}

  /** Local start signal for pingers, flooders (never serialized). */
  enum Go { INSTANCE }
}
