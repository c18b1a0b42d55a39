#!/usr/bin/env python3
"""Side-by-side table of our qmm bench and llama.cpp's MUL_MAT harness, measured in one run.

    tools/peer/compare_qmm.py OURS_SUMMARY.tsv LLAMACPP.csv COPY_GBPS > table.md

OURS_SUMMARY.tsv: the bench summary (FLASHTREE_BENCH_SUMMARY) of `bench-qmm` — rows `qmm` (prep + matmul,
comparable to llama.cpp's op, which quantizes x itself) and `qmm-mm` (matmul only).
LLAMACPP.csv: `tools/peer/llamacpp/run.sh`'s CSV. Fractions are weight bytes / time / COPY_GBPS.
"""
import csv
import re
import sys


def main() -> None:
    ours_path, peer_path, copy = sys.argv[1], sys.argv[2], float(sys.argv[3])
    ours = {}
    for row in csv.reader(open(ours_path), delimiter="\t"):
        if len(row) < 4 or row[0] not in ("qmm", "qmm-mm"):
            continue
        m = re.match(r"(\S+) (\d+)->(\d+) n=(\d+)", row[1])
        if not m:
            continue
        key = (m.group(1).upper(), int(m.group(2)), int(m.group(3)), int(m.group(4)))
        ours.setdefault(key, {})[row[0]] = float(row[2])
    peer = {}
    for r in csv.DictReader(open(peer_path)):
        key = (r["type"].upper(), int(r["in"]), int(r["out"]), int(r["n"]))
        peer[key] = (float(r["us_median"]), int(r["weight_bytes"]))
    print("| type | in→out | n | ours µs (prep + mm) | ours mm µs | ours frac (mm) | ours t(n)/t(1) (mm)"
          " | llama.cpp µs | llama.cpp frac | llama t(n)/t(1) | ours / llama.cpp time (prep + mm) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(peer, key=lambda k: (k[0], k[1], k[2], k[3])):
        if key not in ours or "qmm" not in ours[key]:
            continue
        ty, i, o, n = key
        us_p, wbytes = peer[key]
        full, mm = ours[key]["qmm"], ours[key].get("qmm-mm", float("nan"))
        one = ours.get((ty, i, o, 1), {}).get("qmm-mm", float("nan"))
        peer_one = peer.get((ty, i, o, 1), (float("nan"), 0))[0]
        frac = wbytes / (mm * 1e-6) / (copy * 1e9)
        pfrac = wbytes / (us_p * 1e-6) / (copy * 1e9)
        print(f"| {ty} | {i}→{o} | {n} | {full:.1f} | {mm:.1f} | {frac:.3f} | {mm / one:.2f} | {us_p:.1f} | "
              f"{pfrac:.3f} | {us_p / peer_one:.2f} | {full / us_p:.2f} |")


if __name__ == "__main__":
    main()
