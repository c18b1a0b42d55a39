#!/usr/bin/env python3
"""Per-side summary of an interleaved A/B file written by tools/gpu/engine_check.sh
(`ab-old-new.txt`, `ptxab.txt`, `ab-FEATURE.txt`) or a run.sh in the same format.

The file is a sequence of blocks headed `== round R, SIDE` (optionally `: what`); each block holds
the lines `flashtree bench` and `bench-qmm` print. For every metric found, one row per side: the
value of each round, their mean, the difference of the mean from the first side's, and whether
that difference exceeds the largest round-to-round range of any side (the only noise estimate two
or three rounds give). A difference inside that range is "within spread". One outside it is still
only this machine session's: on nvidia-h200 a 0.06 ms (0.7 %) verify difference beyond two rounds'
spread did not repeat on the next two machines (docs/perf/qmatmul.md, twenty-second engine
session) — replicate on a second machine session before acting on anything under ≈ 1 %.

Usage: ab_summary.py FILE [FILE ...]   (standard library only; prints to stdout)
"""

import re
import sys
from collections import OrderedDict

HEADER = re.compile(r"^== round (\d+), ([^:]+?)(?::.*)?$")
# (metric name, pattern, unit); the first group of each pattern is the value.
METRICS = [
    ("AR step", re.compile(r"^AR decode at context \d+: [\d.]+ tok/s, ([\d.]+) ms/step"), "ms"),
    ("22-node verify", re.compile(r"^forward of a 22-node tree: ([\d.]+) ms"), "ms"),
    ("one node", re.compile(r"^forward of a 22-node tree: [\d.]+ ms; one node: ([\d.]+) ms"), "ms"),
    ("23-node verify", re.compile(r"^forward of a 23-node tree[^:]*: ([\d.]+) ms"), "ms"),
    ("draft step", re.compile(r"^draft step [^:]*: ([\d.]+) ms"), "ms"),
    ("oracle tok/s",
     re.compile(r"oracle depth \d+: \d+ tokens equal to AR; acceptance length [\d.]+, ([\d.]+) tok/s"),
     "tok/s"),
]
# The device-time line that follows an oracle run's result line: its verify per round.
ORACLE = re.compile(r"oracle depth \d+: ")
DEVICE_ROUND = re.compile(r"^\s+device time: .*per round: verify ([\d.]+) ms")
QMM = re.compile(r"^(\S+ \d+->\d+) n=(\d+)\s+([\d.]+)\s+[\d.]+$")


def parse(path):
    """{metric: {side: [values in round order]}}, sides in first-seen order."""
    data = OrderedDict()
    sides = []
    side = None
    after_oracle = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = HEADER.match(line)
            if m:
                side = m.group(2).strip()
                if side not in sides:
                    sides.append(side)
                continue
            if side is None:
                continue
            if after_oracle:
                md = DEVICE_ROUND.match(line)
                if md:
                    key = ("oracle verify per round", "ms")
                    data.setdefault(key, OrderedDict()).setdefault(side, []).append(float(md.group(1)))
                    after_oracle = False
            if ORACLE.search(line):
                after_oracle = True
            for name, pat, unit in METRICS:
                mm = pat.search(line)
                if mm:
                    data.setdefault((name, unit), OrderedDict()).setdefault(side, []).append(float(mm.group(1)))
            mq = QMM.match(line.strip())
            if mq:
                key = (f"{mq.group(1)} n={mq.group(2)}", "us")
                data.setdefault(key, OrderedDict()).setdefault(side, []).append(float(mq.group(3)))
    return sides, data


def summarize(path):
    sides, data = parse(path)
    print(f"# {path}: sides {', '.join(sides)}")
    for (name, unit), per_side in data.items():
        present = [s for s in sides if s in per_side]
        if len(present) < 2:
            continue
        spread = max(max(v) - min(v) for v in per_side.values())
        base = sum(per_side[present[0]]) / len(per_side[present[0]])
        print(f"{name} ({unit}); largest round-to-round range {spread:.3f}")
        for s in present:
            vals = per_side[s]
            mean = sum(vals) / len(vals)
            rounds = " / ".join(f"{v:.3f}" for v in vals)
            if s == present[0]:
                note = "(reference)"
            else:
                d = mean - base
                verdict = "within spread" if abs(d) <= spread else "beyond this run's spread"
                note = f"{d:+.3f} ({100 * d / base:+.2f} %), {verdict}"
            print(f"  {s:<28} {rounds:<28} mean {mean:.3f}  {note}")


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for path in argv[1:]:
        try:
            summarize(path)
        except OSError as e:
            print(f"ab_summary: {path}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
