#!/usr/bin/python3
"""tools/draw_zero_memory.py — what each rank holds under DDP and under ZeRO-1, as a picture drawn
from the byte counts `bench_zero --json` measured (one bar per rank: parameters, gradients,
optimizer state).

    ./build/examples/bench_zero 3 4 vit --json docs/img/zero_memory.json
    /usr/bin/python3 tools/draw_zero_memory.py docs/img/zero_memory.json -o docs/img/zero_memory.svg

It also prints the table the picture shows. SVG output is deterministic (fixed hash salt, no
date), so the picture in docs/img is checked against the JSON beside it (ctest
diagrams_are_up_to_date). Needs matplotlib (Debian: python3-matplotlib).
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

PARTS = [  # key in the JSON, legend, colour
    ("parameters", "parameters", "#4c78a8"),
    ("gradients", "gradients (DDP's buckets)", "#f58518"),
    ("optimizer_state", "optimizer state (Adam's two moments)", "#54a24b"),
]
CONFIGS = ["DDP", "ZeRO-1"]


def mib(n):
    return n / (1 << 20)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", type=pathlib.Path)
    ap.add_argument("-o", "--out", type=pathlib.Path, required=True)
    args = ap.parse_args()
    data = json.loads(args.json.read_text())
    for c in CONFIGS:
        if c not in data or not data[c]:
            sys.exit(f"draw_zero_memory.py: {args.json} has no ranks under '{c}'")

    # table
    print(f"{data['model']} + {data['optimizer']}, {data['processes']} processes: MiB per rank")
    print(f"{'':8} {'rank':>4} " + " ".join(f"{k:>16}" for k, _, _ in PARTS) + f" {'total':>8}")
    for c in CONFIGS:
        for r in data[c]:
            total = sum(r[k] for k, _, _ in PARTS)
            print(f"{c:8} {r['rank']:>4} " + " ".join(f"{mib(r[k]):16.2f}" for k, _, _ in PARTS) + f" {mib(total):8.2f}")

    rows = [(c, r) for c in CONFIGS for r in data[c]]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.6))
    labels = []
    for y, (c, r) in enumerate(reversed(rows)):
        left = 0.0
        for k, legend, colour in PARTS:
            w = mib(r[k])
            ax.barh(y, w, left=left, color=colour, edgecolor="white", label=legend if y == 0 else None)
            left += w
        ax.text(left, y, f" {left:.2f} MiB", va="center", fontsize=8)
        labels.append(f"{c}, rank {r['rank']}")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=9)
    ax.set_xlabel("MiB held by the rank")
    ax.set_xlim(0, max(sum(mib(r[k]) for k, _, _ in PARTS) for _, r in rows) * 1.25)
    ax.set_title(f"{data['model']} + {data['optimizer']} on {data['processes']} processes: "
                 "what each rank holds", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.45, -0.12), ncol=3, fontsize=8, frameon=False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.savefig(args.out, dpi=110, bbox_inches="tight",
                metadata={"Date": None, "Creator": None} if str(args.out).endswith(".svg") else None)


if __name__ == "__main__":
    main()
