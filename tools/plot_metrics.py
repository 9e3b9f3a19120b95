#!/usr/bin/python3
"""tools/plot_metrics.py — loss, accuracy and learning-rate curves of a `train` run, as a PNG.

    /usr/bin/python3 tools/plot_metrics.py runs/cnn/metrics.jsonl [-o curves.png]

Reads the JSON lines `train` appends to OUT/metrics.jsonl (one per epoch: epoch, lr, train_loss,
train_acc1, val_loss, val_acc1, val_acc5, images_per_s, seconds, world_size) and draws three panels:
train and validation loss; train top-1, validation top-1 and top-5 accuracy; and the learning rate
of each epoch. When a run was resumed into the same directory an epoch can appear twice; the last
line wins. Writes next to the input (metrics.png) unless -o is given. Needs python3-matplotlib. `train` runs it at
the end of every run (OUT/curves.png; `--plot none` turns that off).
"""
import argparse
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def read_epochs(path):
    by_epoch = {}
    for n, line in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            by_epoch[int(record["epoch"])] = record
        except (json.JSONDecodeError, KeyError, ValueError) as e:
            sys.exit(f"plot_metrics: {path}:{n}: not a metrics line ({e})")
    if not by_epoch:
        sys.exit(f"plot_metrics: {path} holds no epochs")
    return [by_epoch[e] for e in sorted(by_epoch)]


def main():
    ap = argparse.ArgumentParser(description="Draw loss and accuracy curves from OUT/metrics.jsonl.")
    ap.add_argument("metrics", help="metrics.jsonl written by train")
    ap.add_argument("-o", "--output", help="PNG to write (default: metrics.png next to the input)")
    args = ap.parse_args()
    if not pathlib.Path(args.metrics).is_file():
        sys.exit(f"plot_metrics: {args.metrics} does not exist")
    rows = read_epochs(args.metrics)
    out = args.output or str(pathlib.Path(args.metrics).with_name("metrics.png"))
    epochs = [r["epoch"] for r in rows]

    fig, (loss_ax, acc_ax, lr_ax) = plt.subplots(1, 3, figsize=(15, 4))
    loss_ax.plot(epochs, [r["train_loss"] for r in rows], "o-", label="train")
    loss_ax.plot(epochs, [r["val_loss"] for r in rows], "s-", label="validation")
    loss_ax.set(xlabel="epoch", ylabel="cross-entropy loss", title="loss")
    acc_ax.plot(epochs, [r["train_acc1"] for r in rows], "o-", label="train top-1")
    acc_ax.plot(epochs, [r["val_acc1"] for r in rows], "s-", label="validation top-1")
    acc_ax.plot(epochs, [r["val_acc5"] for r in rows], "^--", label="validation top-5")
    acc_ax.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy")
    best = max(rows, key=lambda r: r["val_acc1"])
    acc_ax.annotate(f"{best['val_acc1']:.2f}%", (best["epoch"], best["val_acc1"]),
                    textcoords="offset points", xytext=(0, -14), ha="center")
    lr_ax.plot(epochs, [r["lr"] for r in rows], "o-", label="learning rate")
    lr_ax.set(xlabel="epoch", ylabel="learning rate", title="learning rate (at the epoch's start)")
    for ax in (loss_ax, acc_ax, lr_ax):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole epochs
        ax.grid(alpha=0.3)
        ax.legend()
    last = rows[-1]
    fig.suptitle(f"{len(rows)} epochs, {last['world_size']} process(es), {last['images_per_s']:.0f} images/s")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"plot_metrics: wrote {out}")


if __name__ == "__main__":
    main()
