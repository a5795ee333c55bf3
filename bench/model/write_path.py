#!/usr/bin/env python3
"""The write path's model: messages per write and throughput of remote-ping-pong at 20 clients
by core count, for the design before 2026-11-27 (the writer woken per batch, batching from its
lateness) and after (a read's consequences leave in one write). Prints the calibration, the
check against the 16-core measurements, and the predictions. The derivation is in
docs/write-path-model.md; the numbers it prints are the ones quoted there.

No arguments; standard library only."""

# remote-ping-pong at 20 clients on the 16-core Intel Xeon machine, pinned with taskset, one
# run each (2026-11-27): cores -> (msgs/s, messages per write). The calibration data.
MEASURED = {2: (1.07e6, 169.0), 4: (1.88e6, 25.5), 8: (1.69e6, 11.4), 16: (1.48e6, 6.2)}
PROTO_ACTOR_GO = {4: 0.94e6, 8: 1.24e6, 16: 1.27e6}
W = 1000          # messages in flight per direction: 20 clients x 50
SLICE = 256       # frames per read hold (rally-remote's SLICE_FRAMES)
# Reader work per message with no wake-up in it (decode, resolve, enqueue), measured on the
# 2-core AMD EPYC VM (0.04 us, profiles of 2026-11-24) and scaled by how much slower the Xeon
# ran the same work when both were CPU-bound at 2 cores (1.87 / 0.43 us per message).
DELIVER = 0.04e-6 * (1.87 / 0.43)


def fit():
    # Serial stage (each direction's reader): s per message + sigma per batch, from the two
    # points where idle cores were plentiful (8 and 16), where the reader was the limit.
    (x8, m8), (x16, m16) = MEASURED[8], MEASURED[16]
    sigma = (2 / x16 - 2 / x8) / (1 / m16 - 1 / m8)
    s = 2 / x8 - sigma / m8
    # CPU: c per message + k per batch over both processes. k: a batch's write, read and
    # wake-up system calls on both sides, taken as twice the reader's share (sigma); c from
    # the 2-core point, where both cores were busy.
    k = 2 * sigma
    x2, m2 = MEASURED[2]
    c = 2 / x2 - k / m2
    # The old writer's lateness D: m = 1 + lambda * D, lambda = X / 2 per direction.
    lateness = {p: (m - 1) / (x / 2) for p, (x, m) in MEASURED.items()}
    return s, sigma, c, k, lateness


def throughput(p, m, s, sigma, c, k, lanes=1):
    cpu = p / (c + k / m)
    serial = lanes * 2 / (s + sigma / m)
    return min(cpu, serial), cpu, serial


def old_fixed_point(p_idle, late, wake, s, sigma, c, k, p):
    """The old design at a given share of wake-ups finding an idle core: m = 1 + lambda * D
    with D = p_idle * wake + (1 - p_idle) * late, and lambda from the throughput m gives."""
    d = p_idle * wake + (1 - p_idle) * late
    m = 50.0
    for _ in range(200):
        x, _, _ = throughput(p, m, s, sigma, c, k)
        m = min(W, 1 + (x / 2) * d)
    return m, throughput(p, m, s, sigma, c, k)[0]


def main():
    s, sigma, c, k, lateness = fit()
    late, wake = lateness[2], lateness[16]
    print("calibration (16-core Xeon, remote-ping-pong at 20 clients):")
    print(f"  reader per message s = {s * 1e6:.3f} us, per batch sigma = {sigma * 1e6:.2f} us")
    print(f"  CPU per message c = {c * 1e6:.3f} us, per batch k = {k * 1e6:.2f} us (both processes)")
    print("  the old writer's lateness D = (m - 1) / lambda: " + ", ".join(
        f"{p} cores {d * 1e6:.1f} us" for p, d in lateness.items()))
    print(f"  => busy machine D = {late * 1e6:.0f} us; plenty of idle cores D -> wake-up latency {wake * 1e6:.1f} us")
    print()
    print("check: the old design's throughput from its measured messages per write")
    print("  cores  m      predicted  measured   limit")
    for p, (x, m) in MEASURED.items():
        pred, cpu, serial = throughput(p, m, s, sigma, c, k)
        limit = "CPU" if cpu < serial else "reader"
        print(f"  {p:>5}  {m:>5.1f}  {pred / 1e6:>6.2f}M    {x / 1e6:>6.2f}M    {limit}")
    print()
    print("the old design as idle cores grow (share of writer wake-ups that find an idle core):")
    print("  p_idle  m      msgs/s   wake-ups/msg")
    for p_idle in (0.0, 0.9, 0.935, 0.978, 1.0):
        m, x = old_fixed_point(p_idle, late, wake, s, sigma, c, k, 32)
        print(f"  {p_idle:>6.3f}  {m:>5.1f}  {x / 1e6:>6.2f}M   {1 / m:.4f}")
    print()
    # The new design: batches are a slice's consequences, whatever the cores and wake-up
    # latency: at least min(SLICE, a lane's window) messages, at most the lane's window.
    cases = [
        ("s_new = s", s),
        ("s_new = mid", DELIVER + (s - DELIVER) / 2),
        ("s_new = deliver", DELIVER),
    ]
    print("the new design (default lanes: one per 4 cores, 1 to 8):")
    print(f"  s_new = s: {s * 1e6:.2f} us (only the batching changed); "
          f"mid: {cases[1][1] * 1e6:.2f} us; deliver: {DELIVER * 1e6:.2f} us "
          "(the reader's per-delivery wake-ups gone)")
    print("  cores  lanes  m/write  wake-ups/msg  " + "  ".join(f"{n:>16}" for n, _ in cases)
          + "   targets: 2.5x old 4-core, 3x Go")
    x4_old = MEASURED[4][0]
    for p in (2, 4, 8, 16, 32):
        lanes = max(1, min(8, p // 4))
        # The batch the protocol settles at: a lane's whole window when it is within a slice,
        # else a slice (measured on 2 cores: the whole window at 1 and 5 clients, 410-470 at 20
        # with one lane). Not a floor the protocol enforces: see the sensitivity below.
        m_new = min(W / lanes, SLICE)
        cells = []
        for _, s_new in cases:
            x, cpu, serial = throughput(p, m_new, s_new, sigma, c, k, lanes)
            cells.append(f"{x / 1e6:>6.2f}M ({'CPU' if cpu < serial else 'reader'})".rjust(16))
        go = PROTO_ACTOR_GO.get(p)
        targets = f"{2.5 * x4_old / 1e6:.2f}M, {3 * go / 1e6:.2f}M" if go and p == 16 else ""
        print(f"  {p:>5}  {lanes:>5}  {m_new:>7.0f}  {0:>12}  " + "  ".join(cells) + "   " + targets)
    print()
    print("the same with one lane at every core count (ordinary_lanes = 1):")
    for p in (4, 8, 16, 32):
        cells = [f"{throughput(p, SLICE, s_new, sigma, c, k)[0] / 1e6:>6.2f}M".rjust(16)
                 for _, s_new in cases]
        print(f"  {p:>5}      1  {SLICE:>7}  {0:>12}  " + "  ".join(cells))
    print()
    print("sensitivity: the new design with smaller batches than it settled at on 2 cores")
    for m in (25, 50):
        for p in (4, 8, 16):
            lanes = max(1, min(8, p // 4))
            cells = [f"{throughput(p, m, s_new, sigma, c, k, lanes)[0] / 1e6:>6.2f}M".rjust(16)
                     for _, s_new in cases]
            print(f"  {p:>5}  {lanes:>5}  {m:>7}  {0:>12}  " + "  ".join(cells))


if __name__ == "__main__":
    main()
