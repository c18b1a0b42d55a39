#!/usr/bin/env python3
"""GPU idle gaps at the end of an nsys capture (the last WINDOW_MS of device activity).

Usage: gaps.py REPORT.sqlite [WINDOW_MS]   (from `nsys export --type sqlite`)

Kernels and memory copies of every stream are merged into busy intervals; prints the busy
fraction of the window, the gaps by size, and the largest gaps with the activity on each side
(kernel names, or "memcpy"/"memset"). For `flashtree bench`, whose last phase is the spec loop
with the oracle draft, the window is that loop's last rounds.
"""
import sqlite3
import sys


def rows(db, table, name_sql):
    try:
        return db.execute(f"SELECT start, end, {name_sql} FROM {table}").fetchall()
    except sqlite3.OperationalError:
        return []


def main():
    path = sys.argv[1]
    window_ms = float(sys.argv[2]) if len(sys.argv) > 2 else 200.0
    db = sqlite3.connect(path)
    acts = rows(
        db,
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "(SELECT value FROM StringIds WHERE id = CUPTI_ACTIVITY_KIND_KERNEL.shortName)",
    )
    acts += [(s, e, "memcpy") for s, e, _ in rows(db, "CUPTI_ACTIVITY_KIND_MEMCPY", "0")]
    acts += [(s, e, "memset") for s, e, _ in rows(db, "CUPTI_ACTIVITY_KIND_MEMSET", "0")]
    if not acts:
        print("no device activity in", path)
        return
    acts.sort()
    end = max(e for _, e, _ in acts)
    lo = end - window_ms * 1e6
    acts = [a for a in acts if a[0] >= lo]
    busy, gaps = 0, []
    cur_s, cur_e, cur_name = acts[0]
    for s, e, name in acts[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            gaps.append((s - cur_e, cur_name, name))
            cur_s, cur_e, cur_name = s, e, name
        elif e > cur_e:
            cur_e, cur_name = e, name
    busy += cur_e - cur_s
    span = cur_e - acts[0][0]
    idle = sum(g for g, _, _ in gaps)
    print(f"window: last {span / 1e6:.2f} ms of device activity, {len(acts)} kernels/copies")
    print(f"busy {busy / 1e6:.3f} ms ({busy / span:.3f}), idle {idle / 1e6:.3f} ms in {len(gaps)} gaps")
    bins = [(0, 1e3), (1e3, 5e3), (5e3, 2e4), (2e4, 1e5), (1e5, 1e12)]
    for a, b in bins:
        sel = [g for g, _, _ in gaps if a <= g < b]
        print(f"  gaps {a / 1e3:>6.0f}-{min(b, 1e9) / 1e3:<9.0f} us: {len(sel):5d}, {sum(sel) / 1e6:.3f} ms")
    print("largest gaps (us, before -> after):")
    for g, a, b in sorted(gaps, reverse=True)[:16]:
        print(f"  {g / 1e3:8.1f}  {a} -> {b}")


if __name__ == "__main__":
    main()
