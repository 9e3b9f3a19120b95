#!/usr/bin/python3
"""tools/draw_diagrams.py — draws the two figures of docs/source-walk.md as SVG files.

    /usr/bin/python3 tools/draw_diagrams.py [OUT_DIR]      (default: docs/img)

layers.svg       the library's folders, lowest layer at the bottom, and what each adds
ddp_overlap.svg  one data-parallel step on a time line: backward runs layer by layer from the
                 loss, each bucket's all-reduce starts on the communication thread as soon as its
                 last gradient is accumulated, and finalize waits for the buckets still in flight

The figures are schematic (the bars' lengths are illustrative, not measured); the output is
deterministic (fixed SVG hash salt, no date), so ctest `diagrams_are_up_to_date` can compare a
fresh drawing with the committed files. Needs matplotlib (Debian: python3-matplotlib).
"""
import pathlib
import sys

import matplotlib

matplotlib.use("svg")
matplotlib.rcParams["svg.hashsalt"] = "minidl"
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, and searchable
import matplotlib.pyplot as plt  # noqa: E402

LAYERS = [  # (folder, what it adds), lowest first
    ("kernels/", "raw loops: CPU (OpenMP, Eigen) and CUDA; shared element functors"),
    ("tensor/", "Tensor: dtype, shape, strides, views; every op, checked once, dispatched"),
    ("autograd/", "Variable, grad_fn nodes, backward engine, post-accumulate hooks"),
    ("nn/ optim/ data/", "Module and layers;  SGD/Adam;  datasets, DataLoader"),
    ("dist/", "store, process groups (Gloo, NCCL), DDP buckets, SyncBatchNorm, sampler"),
    ("examples/", "the trainer, benchmarks, teaching programs"),
]


def save(fig, out, name):
    fig.savefig(out / name, metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    plt.close(fig)


def draw_layers(out):
    fig, ax = plt.subplots(figsize=(10, 4.2))
    for i, (folder, what) in enumerate(LAYERS):
        color = "#dce9f5" if i < 4 else ("#fde2c8" if i == 4 else "#e6e6e6")
        ax.add_patch(plt.Rectangle((0, i), 17, 0.8, facecolor=color, edgecolor="#333333", linewidth=1))
        ax.text(0.25, i + 0.4, folder, va="center", ha="left", fontsize=11, fontweight="bold", family="monospace")
        ax.text(5.6, i + 0.4, what, va="center", ha="left", fontsize=9)
    ax.annotate("", xy=(17.5, 5.5), xytext=(17.5, 0.3), arrowprops={"arrowstyle": "->", "color": "#555555"})
    ax.text(17.7, 2.9, "includes only\nwhat is below", va="center", fontsize=8, color="#555555")
    ax.plot([0, 17], [3.9, 3.9], color="#aa3300", linewidth=1.2, linestyle="--")
    ax.text(8.5, 3.9, "  a complete single-process framework below this line  ", ha="center", va="center",
            fontsize=7.5, color="#aa3300", backgroundcolor="white")
    ax.set_xlim(-0.2, 19.8)
    ax.set_ylim(-0.2, 6)
    ax.axis("off")
    save(fig, out, "layers.svg")


def draw_overlap(out):
    # backward of 4 layers, nearest the loss first; 3 buckets (the last two layers share one)
    layers = [("fc2", 1.4), ("fc1", 2.4), ("conv2", 2.8), ("conv1", 1.8)]
    bucket_of = {"fc2": 0, "fc1": 0, "conv2": 1, "conv1": 2}
    colors = ["#4c78a8", "#f58518", "#54a24b"]
    fig, ax = plt.subplots(figsize=(10, 3.1))
    t, ready = 0.0, {}
    for name, dur in layers:
        b = bucket_of[name]
        ax.add_patch(plt.Rectangle((t, 2), dur, 0.7, facecolor=colors[b], alpha=0.35, edgecolor="#333333"))
        ax.text(t + dur / 2, 2.35, f"{name} backward", ha="center", va="center", fontsize=8)
        t += dur
        ready[b] = t  # the bucket's last gradient is accumulated here: its hook fires
    comm_free = 0.0
    comm_len = [2.2, 2.4, 1.8]
    for b in range(3):
        start = max(ready[b], comm_free)  # buckets launch in order on one communication thread
        ax.add_patch(plt.Rectangle((start, 0.9), comm_len[b], 0.7, facecolor=colors[b], edgecolor="#333333"))
        ax.text(start + comm_len[b] / 2, 1.25, f"all_reduce #{b}", ha="center", va="center", fontsize=8,
                color="white")
        ax.annotate("", xy=(start, 1.6), xytext=(ready[b], 2.0),
                    arrowprops={"arrowstyle": "->", "color": colors[b], "linewidth": 1.2})
        comm_free = start + comm_len[b]
    end_backward = t
    ax.add_patch(plt.Rectangle((end_backward, 2), comm_free - end_backward, 0.7, facecolor="white",
                               edgecolor="#999999", hatch="//"))
    ax.text((end_backward + comm_free) / 2, 2.35, "finalize: wait", ha="center", va="center", fontsize=8)
    ax.add_patch(plt.Rectangle((comm_free, 2), 1.0, 0.7, facecolor="#e6e6e6", edgecolor="#333333"))
    ax.text(comm_free + 0.5, 2.35, "step", ha="center", va="center", fontsize=8)
    ax.text(-0.2, 2.35, "main thread", ha="right", va="center", fontsize=9)
    ax.text(-0.2, 1.25, "comm thread", ha="right", va="center", fontsize=9)
    ax.annotate("", xy=(comm_free + 1.2, 0.45), xytext=(0, 0.45), arrowprops={"arrowstyle": "->", "color": "#555555"})
    ax.text(comm_free + 1.2, 0.2, "time", ha="right", fontsize=8, color="#555555")
    ax.set_xlim(-2.2, comm_free + 1.4)
    ax.set_ylim(0, 3)
    ax.axis("off")
    save(fig, out, "ddp_overlap.svg")


def main():
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent / "docs" / "img"
    out.mkdir(parents=True, exist_ok=True)
    draw_layers(out)
    draw_overlap(out)
    print(f"draw_diagrams: wrote {out / 'layers.svg'} and {out / 'ddp_overlap.svg'}")


if __name__ == "__main__":
    main()
