#!/usr/bin/python3
"""tools/draw_trace.py — draws a Chrome trace written by `train --trace` or `bench --trace` as a
picture, and prints what overlapped.

    /usr/bin/python3 tools/draw_trace.py TRACE.json -o PICTURE.svg|.png [--title TEXT]

One row per track (rank x thread: the training thread "main", one row per DDP bucket with its
all-reduce from launch to completion, the communication thread running the collectives, data
workers), bars coloured by category, time in ms from the first event. Spans nested in others
(a DDP wait inside the last AccumulateGrad) are drawn on top of them; whole steps are the grey
band behind a row; small triangles mark the launch of each bucket.

The summary has one line per rank, per traced step (averaged when several are):
  step         a "step" span (train: from the end of the previous step; bench: the loop body)
  forward      every op's forward
  backward     the backward nodes, minus the waits inside them (compute only)
  all-reduce   the buckets' collectives as they ran on the communication thread, and how much
               of that ran while backward was computing (overlapped)
  exposed wait DDP waiting at the end of backward for the buckets still in flight ("DDP wait")
  broadcast    DDP's forward waiting for rank 0's buffers (BatchNorm statistics): mostly the time
               this rank arrived before the slowest one
  data         the training loop waiting for its next batch
  optimizer    zero_grad and the optimizer step

SVG output is deterministic (fixed hash salt, no date), so the picture in docs/img can be
checked against the trace beside it. Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.hashsalt"] = "minidl"
matplotlib.rcParams["svg.fonttype"] = "none"
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COLOURS = {
    "forward": "#4c78a8",
    "backward": "#f58518",
    "allreduce": "#54a24b",
    "comm": "#88d27a",
    "wait": "#e45756",
    "data": "#b279a2",
    "optimizer": "#9d755d",
}
LABELS = {
    "forward": "forward",
    "backward": "backward",
    "allreduce": "bucket all-reduce (launch to done)",
    "comm": "collective running",
    "wait": "DDP waiting (buffer broadcast, buckets)",
    "data": "data",
    "optimizer": "optimizer",
}


def load(path):
    """(events, tracks): complete and instant events; track names and sort keys by (pid, tid)."""
    doc = json.loads(pathlib.Path(path).read_text())
    raw = doc["traceEvents"] if isinstance(doc, dict) else doc
    names, sort, procs = {}, {}, {}
    events = []
    for e in raw:
        ph = e.get("ph")
        key = (e.get("pid", 0), e.get("tid", 0))
        if ph == "M":
            args = e.get("args", {})
            if e["name"] == "thread_name":
                names[key] = args["name"]
            elif e["name"] == "thread_sort_index":
                sort[key] = args["sort_index"]
            elif e["name"] == "process_name":
                procs[key[0]] = args["name"]
        elif ph in ("X", "i", "I"):
            events.append(e)
    return events, names, sort, procs


def union(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def measure(intervals):
    return sum(b - a for a, b in union(intervals))


def intersect(xs, ys):
    xs, ys = union(xs), union(ys)
    out, i, j = [], 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if a < b:
            out.append([a, b])
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(xs, ys):
    """xs minus ys, as intervals."""
    out = []
    ys = union(ys)
    for a, b in union(xs):
        cur = a
        for c, d in ys:
            if d <= cur or c >= b:
                continue
            if c > cur:
                out.append([cur, c])
            cur = max(cur, d)
        if cur < b:
            out.append([cur, b])
    return out


def summarise(events, names):
    """{pid: {quantity: ms per step}}."""
    result = {}
    for pid in sorted({e.get("pid", 0) for e in events}):
        mine = [e for e in events if e.get("pid", 0) == pid and e.get("ph") == "X"]
        main = [e for e in mine if names.get((pid, e["tid"])) == "main"]

        def spans(cat, pool=mine, pred=lambda e: True):
            return [[e["ts"], e["ts"] + e["dur"]] for e in pool if e.get("cat") == cat and pred(e)]

        steps = spans("step", main)
        n = max(1, len(steps))
        backward, waits = spans("backward", main), spans("wait", main)
        finalize = spans("wait", main, lambda e: e["name"] == "DDP wait")
        compute = subtract(backward, waits)
        comm = spans("comm", pred=lambda e: "DDP bucket" in e["name"])
        ms = 1e-3 / n
        result[pid] = {
            "steps": len(steps),
            "step": sum(b - a for a, b in steps) * ms if steps else 0.0,
            "forward": measure(spans("forward", main)) * ms,
            "backward": measure(compute) * ms,
            "allreduce": measure(comm) * ms,
            "overlapped": measure(intersect(comm, compute)) * ms,
            "wait": measure(finalize) * ms,
            "broadcast": measure(subtract(waits, finalize)) * ms,
            "data": measure(spans("data", main)) * ms,
            "optimizer": measure(spans("optimizer", main)) * ms,
        }
    return result


def draw(events, names, sort, procs, out, title):
    tracks = sorted({(e.get("pid", 0), e.get("tid", 0)) for e in events}, key=lambda k: (k[0], sort.get(k, 1 << 30), k[1]))
    row = {k: i for i, k in enumerate(tracks)}
    t0 = min(e["ts"] for e in events)
    fig, ax = plt.subplots(figsize=(12, 0.42 * len(tracks) + 1.3))
    # widest first, so spans nested in others are drawn on top of them
    spans = sorted((e for e in events if e.get("ph") == "X"), key=lambda e: -e["dur"])
    for e in spans:
        y = row[(e.get("pid", 0), e.get("tid", 0))]
        x, w = (e["ts"] - t0) * 1e-3, e["dur"] * 1e-3
        if e.get("cat") == "step":
            ax.barh(y, w, left=x, height=0.9, color="#eeeeee", edgecolor="#bbbbbb", linewidth=0.5)
        else:
            ax.barh(y, w, left=x, height=0.6, color=COLOURS.get(e.get("cat"), "#cccccc"), edgecolor="white",
                    linewidth=0.3)
    for e in events:
        if e.get("ph") in ("i", "I"):
            y = row[(e.get("pid", 0), e.get("tid", 0))]
            ax.plot([(e["ts"] - t0) * 1e-3], [y - 0.42], marker="v", color="#2f6f2a", markersize=5)
    labels = []
    for pid, tid in tracks:
        labels.append(f"{procs.get(pid, 'process ' + str(pid))} · {names.get((pid, tid), 'thread ' + str(tid))}")
    ax.set_yticks(range(len(tracks)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.grid(axis="x", color="#dddddd", linewidth=0.5)
    ax.set_axisbelow(True)
    used = [c for c in COLOURS if any(e.get("cat") == c for e in events)]
    handles = [Patch(color=COLOURS[c], label=LABELS[c]) for c in used]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.55 / max(1, len(tracks)) - 0.12),
              ncol=len(handles), fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    fig.savefig(out, dpi=110, bbox_inches="tight", metadata={"Date": None, "Creator": None} if str(out).endswith(".svg") else None)
    plt.close(fig)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("-o", "--out", required=True, help="picture to write: .svg or .png")
    p.add_argument("--title", default="")
    a = p.parse_args(argv)
    events, names, sort, procs = load(a.trace)
    if not events:
        print(f"draw_trace: {a.trace} holds no events", file=sys.stderr)
        return 1
    draw(events, names, sort, procs, a.out, a.title)
    for pid, s in summarise(events, names).items():
        print(f"{procs.get(pid, 'process ' + str(pid))}: {s['steps']} step(s), per step: step {s['step']:.2f} ms, "
              f"forward {s['forward']:.2f} ms, backward {s['backward']:.2f} ms, all-reduce {s['allreduce']:.2f} ms "
              f"({s['overlapped']:.2f} ms overlapped with backward), exposed wait {s['wait']:.2f} ms, "
              f"broadcast {s['broadcast']:.2f} ms, data {s['data']:.2f} ms, optimizer {s['optimizer']:.2f} ms")
    print(f"draw_trace: wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
