#!/usr/bin/env python3
"""Shares of CPU per process, by the part of the remote message path the samples fall in.

Reads `perf script -F comm,pid,tid,ip,sym,dso` of a `perf record --call-graph dwarf` run on
stdin. A sample that ends in a system call is put under that call (write, read, futex,
epoll_wait, ...); any other sample goes to the first frame, walking from the leaf up, that a
rule below names (so an allocation made while encoding counts as "alloc/free", a memcpy in
encoding as "encode into lane"). Arguments name the processes in pid order (e.g. client echo).
See docs/benchmarks.md, "Where the time goes: the remote path".
"""
import sys, re, collections
RULES = [
 ("holds (gate, scope, run)", ["hold::", "ReadHold", "gate::", "OutboundLane::release", "write_direct", "write_batch"]),
 ("alloc/free", ["mi_", "_mi_", "malloc", "free"]),
 ("encode into lane", ["OutboundEncoder::push", "registry::encode", "write_message_header", "guarded_encode", "codec::encode", "postcard::", "OutboundLane::push"]),
 ("writer task (take batch, write call)", ["OutboundLane::write_to", "next_batch", "OutboundEncoder::take", "outbound::writer", "association::writer", "Wakeup::wait"]),
 ("decode", ["InboundDecoder", "decode_message", "Reader::varint", "rally_wire::frame", "rally_wire::envelope::decode", "registry::decode", "codec::decode"]),
 ("reply routing", ["RequestTable", "register_request", "Association::complete", "ReplyTo", "take_reply", "ReplyRoute", "hash_one", "hashbrown", "oneshot"]),
 ("deliver/enqueue (mailbox)", ["Mailbox", "registry::deliver", "Exposed>::deliver", "on_frame", "inbound::resolve", "send_with", "ExternalTarget", "ActorRef<A>::request", "ActorRef<A>::tell", "Recipient"]),
 ("actor run loop + handler", ["handle_typed", "Erased<A>>::handle", "runner::", "rally_bench::", "Context<A>"]),
 ("reader loop", ["inbound::Connection::run", "inbound::serve"]),
 ("tokio scheduling/wake", ["tokio::runtime", "tokio::sync", "AtomicWaker", "tokio::task", "Waker", "wake_by", "tokio::io"]),
]
SYS = [("socket write (kernel)", ["sys_write", "sys_sendto", "sys_sendmsg", "sys_writev"]),
       ("socket read (kernel)", ["sys_read", "sys_recvfrom", "sys_recvmsg", "sys_readv"]),
       ("futex: cross-thread wake/park (kernel)", ["sys_futex"]),
       ("epoll_wait: I/O driver (kernel)", ["sys_epoll_wait", "sys_epoll_pwait"]),
       ("sched_yield (kernel)", ["sys_sched_yield"]),
       ("nanosleep/timer (kernel)", ["nanosleep", "clock_nanosleep"])]
def classify(frames):
    syms = [f[1] for f in frames]
    kern = [s for f, s in zip(frames, syms) if f[0]]
    if frames and frames[0][0]:
        if any("entry_SYSCALL" in s for s in kern):
            for name, keys in SYS:
                if any(k in s for s in kern for k in keys):
                    return name
            return "other syscalls (kernel)"
        if any(s.startswith(("schedule", "__schedule", "finish_task_switch")) for s in kern):
            return "kernel: switch/irq"
        return "kernel: other (irq, faults)"
    for s in syms:
        for name, keys in RULES:
            if any(k in s for k in keys):
                return name
    return "other user code"
cur = None; out = collections.defaultdict(collections.Counter); frames = []
head = re.compile(r"^(\S.*?)\s+(\d+)/(\d+)\s")
def flush():
    if cur is not None: out[cur][classify(frames)] += 1
for line in sys.stdin:
    if not line.strip():
        continue
    if not line.startswith(("\t", " ")):
        flush(); frames = []
        m = head.match(line); cur = m.group(2) if m else None
        continue
    parts = line.strip().split(None, 1)
    if len(parts) < 2: continue
    sym = re.sub(r"\+0x[0-9a-f]+ \(.*\)$", "", parts[1]).strip()
    frames.append(("kernel.kallsyms" in parts[1] or parts[0].startswith("ffffffff"), sym))
flush()
names = sys.argv[1:] or []
for i, (pid, c) in enumerate(sorted(out.items(), key=lambda kv: kv[0])):
    total = sum(c.values())
    if total < 50: continue
    print(f"process {pid} ({names[i] if i < len(names) else ''}): {total} samples")
    for k, v in c.most_common():
        print(f"  {100*v/total:5.1f}%  {k}")
