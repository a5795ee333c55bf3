#!/usr/bin/env python3
"""Instructions per request between two callgrind runs of grain-ping (see run.sh).

Arguments: a label, then the short run's folder and the long run's. Each folder holds the run's
`out.json` (its requests) and callgrind's dumps `cg.<pid>[.<n>]` of every process; a process
is named by its command line (the client, the seed member, the other member).
"""
import glob
import json
import re
import sys


def totals(folder):
    """Instructions by process name, and the requests the run made."""
    by_pid = {}
    names = {}
    for path in glob.glob(f"{folder}/cg.*"):
        pid = re.match(r".*/cg\.(\d+)", path).group(1)
        with open(path, errors="replace") as dump:
            for line in dump:
                if line.startswith("cmd:"):
                    if "grain-member" not in line:
                        names[pid] = "client"
                    else:
                        names[pid] = "member 2" if "--seed" in line else "member 1"
                elif line.startswith("summary:"):
                    by_pid[pid] = by_pid.get(pid, 0) + int(line.split()[1])
    out = {}
    for pid, count in by_pid.items():
        name = names.get(pid, pid)
        out[name] = out.get(name, 0) + count
    with open(f"{folder}/out.json") as f:
        requests = sum(row["total_msgs"] for row in json.load(f)["rows"])
    return out, requests


def main():
    label, short, long = sys.argv[1:4]
    (a, n_a), (b, n_b) = totals(short), totals(long)
    if n_b <= n_a:
        sys.exit(f"{label}: the long run made no more requests than the short one")
    per = {name: (b.get(name, 0) - a.get(name, 0)) / (n_b - n_a) for name in sorted(set(a) | set(b))}
    parts = "  ".join(f"{name} {value:,.0f}" for name, value in per.items())
    print(f"{label:>6}: {sum(per.values()):,.0f} instructions a request ({n_a} and {n_b} requests)  {parts}")


if __name__ == "__main__":
    main()
