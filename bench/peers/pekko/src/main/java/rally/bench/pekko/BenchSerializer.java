package rally.bench.pekko;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.apache.pekko.serialization.SerializerWithStringManifest;

/**
 * A hand-written binary serializer for the harness's messages: a one-letter manifest names the
 * type and the body is its fields in fixed-width big-endian form (strings and payloads as raw
 * bytes). It is the fastest honest choice, comparable to what Rally and Proto.Actor put on the
 * wire; Java serialization is off, as it is by default in Pekko.
 */
public final class BenchSerializer extends SerializerWithStringManifest {
  /** Pekko reserves 0 to 40 for its own serializers. */
  @Override
  public int identifier() {
    return 7401;
  }

  @Override
  public String manifest(Object o) {
    if (o instanceof Msgs.Ping) return "P";
    if (o instanceof Msgs.Payload) return "D";
    if (o instanceof Msgs.Ack) return "A";
    if (o instanceof Msgs.Reset) return "R";
    if (o instanceof Msgs.Probe) return "L";
    if (o instanceof Msgs.CpuQuery) return "Q";
    if (o instanceof Msgs.CpuReply) return "C";
    if (o instanceof Msgs.GrainPing) return "G";
    if (o instanceof Msgs.GrainPong) return "H";
    if (o instanceof Msgs.MemberQuery) return "M";
    if (o instanceof Msgs.MemberReply) return "N";
    throw new IllegalArgumentException("cannot serialize " + o.getClass());
  }

  @Override
  public byte[] toBinary(Object o) {
    if (o instanceof Msgs.Ping p) return p.text().getBytes(StandardCharsets.UTF_8);
    if (o instanceof Msgs.Payload p) {
      return ByteBuffer.allocate(8 + p.data().length).putLong(p.seq()).put(p.data()).array();
    }
    if (o instanceof Msgs.Ack a) return longBytes(a.received());
    if (o instanceof Msgs.Reset r) return longBytes(r.ackEvery());
    if (o instanceof Msgs.Probe p) return longBytes(p.seq());
    if (o instanceof Msgs.CpuQuery) return new byte[0];
    if (o instanceof Msgs.CpuReply c) return longBytes(c.cpuNs());
    if (o instanceof Msgs.GrainPing g) {
      byte[] id = g.identity().getBytes(StandardCharsets.UTF_8);
      byte[] text = g.text().getBytes(StandardCharsets.UTF_8);
      return ByteBuffer.allocate(4 + id.length + text.length).putInt(id.length).put(id).put(text).array();
    }
    if (o instanceof Msgs.GrainPong g) return g.text().getBytes(StandardCharsets.UTF_8);
    if (o instanceof Msgs.MemberQuery) return new byte[0];
    if (o instanceof Msgs.MemberReply m) {
      return ByteBuffer.allocate(24).putLong(m.cpuNs()).putLong(m.residentBytes()).putLong(m.active()).array();
    }
    throw new IllegalArgumentException("cannot serialize " + o.getClass());
  }

  @Override
  public Object fromBinary(byte[] bytes, String manifest) {
    switch (manifest) {
      case "P":
        return new Msgs.Ping(new String(bytes, StandardCharsets.UTF_8));
      case "D": {
        ByteBuffer buf = ByteBuffer.wrap(bytes);
        long seq = buf.getLong();
        byte[] data = new byte[buf.remaining()];
        buf.get(data);
        return new Msgs.Payload(seq, data);
      }
      case "A":
        return new Msgs.Ack(ByteBuffer.wrap(bytes).getLong());
      case "R":
        return new Msgs.Reset((int) ByteBuffer.wrap(bytes).getLong());
      case "L":
        return new Msgs.Probe(ByteBuffer.wrap(bytes).getLong());
      case "Q":
        return new Msgs.CpuQuery();
      case "C":
        return new Msgs.CpuReply(ByteBuffer.wrap(bytes).getLong());
      case "G": {
        ByteBuffer buf = ByteBuffer.wrap(bytes);
        byte[] id = new byte[buf.getInt()];
        buf.get(id);
        byte[] text = new byte[buf.remaining()];
        buf.get(text);
        return new Msgs.GrainPing(new String(id, StandardCharsets.UTF_8), new String(text, StandardCharsets.UTF_8));
      }
      case "H":
        return new Msgs.GrainPong(new String(bytes, StandardCharsets.UTF_8));
      case "M":
        return new Msgs.MemberQuery();
      case "N": {
        ByteBuffer buf = ByteBuffer.wrap(bytes);
        return new Msgs.MemberReply(buf.getLong(), buf.getLong(), buf.getLong());
      }
      default:
        throw new IllegalArgumentException("unknown manifest " + manifest);
    }
  }

  private static byte[] longBytes(long v) {
    return ByteBuffer.allocate(8).putLong(v).array();
  }
}
