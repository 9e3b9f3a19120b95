#!/usr/bin/python3
"""tools/bench_restart.py — what one restart costs: `train --max-restarts 1` with a worker killed.

    /usr/bin/python3 tools/bench_restart.py [--train build/examples/train] [--model cnn] [--repeats 5]
                                           [--signal KILL|STOP] [--dist-timeout 10] [-- EXTRA TRAIN FLAGS]

Alternates, `--repeats` times each, an uninterrupted 2-process run and the same run in which rank 1
gets SIGKILL (or SIGSTOP) a few steps into its second epoch; every output line is time-stamped
as it arrives. For each interrupted run it measures
  detection  signal sent -> the trainer's "restart 1/1" line (every process stopped and reaped;
             for SIGSTOP this includes the collective timeout, --dist-timeout)
  restart    that line -> "resumed from ... (loaded in X ms)": fork, rendezvous, model, and
  reload     the X ms of reading the checkpoint (part of restart)
  redo       "resumed" -> the step where the kill happened is reached again (the work since the
             last checkpoint, trained a second time)
and prints their medians beside the medians of both runs' wall times: the difference of the
two is the whole time lost. Only the standard library; Fashion-MNIST must be installed.
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def run(cmd, env, kill_at=None, sig=signal.SIGKILL, step_dir=None):
    """Runs cmd; returns (wall seconds, [(t, line)], t_signal, step killed at, t_back_at_that_step)."""
    start = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []

    def reader():
        for line in p.stdout:
            lines.append((time.monotonic(), line.rstrip("\n")))

    t = threading.Thread(target=reader)
    t.start()
    t_sig, killed_step, t_again = None, None, None
    if kill_at is not None:
        path = os.path.join(step_dir, "step.1")
        victim = None
        while p.poll() is None:
            try:
                with open(path) as f:
                    parts = f.read().split()
                if len(parts) == 2:
                    step, pid = int(parts[0]), int(parts[1])
                    if victim is None and step >= kill_at:
                        killed_step, victim, t_sig = step, pid, time.monotonic()
                        os.kill(pid, sig)
                    elif victim is not None and pid != victim and step >= killed_step:
                        t_again = time.monotonic()  # the restarted rank 1 is back at that step
                        break
            except (OSError, ValueError):
                pass
            time.sleep(0.002)
    p.wait()
    t.join()
    if p.returncode != 0:
        sys.exit("bench_restart: " + " ".join(cmd) + f" exited {p.returncode}:\n" + "\n".join(l for _, l in lines[-20:]))
    return time.monotonic() - start, lines, t_sig, killed_step, t_again


def first(lines, pattern, after=0.0):
    rx = re.compile(pattern)
    for t, line in lines:
        if t >= after and rx.search(line):
            return t, line
    sys.exit(f"bench_restart: no line matching /{pattern}/")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", default="build/examples/train")
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--signal", default="KILL", choices=["KILL", "STOP"])
    ap.add_argument("--dist-timeout", default="10")
    ap.add_argument("--train-subset", default="4096")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    sig = signal.SIGKILL if a.signal == "KILL" else signal.SIGSTOP
    work = tempfile.mkdtemp(prefix="bench_restart.")
    base = [a.train, "--model", a.model, "--epochs", "2", "--nproc", "2", "--device", "cpu", "--train-subset",
            a.train_subset, "--val-subset", "1000", "--dist-timeout", a.dist_timeout, "--overwrite"] + a.extra
    env = dict(os.environ)
    rows = {"plain": [], "interrupted": [], "detection": [], "restart": [], "reload": [], "redo": []}
    for i in range(a.repeats):
        wall, lines, _, _, _ = run(base + ["--out", f"{work}/plain"], env)
        rows["plain"].append(wall)
        steps = max(int(m.group(1)) for _, l in lines for m in [re.search(r"epoch 1/2 +\d+/(\d+) ", l)] if m)
        step_dir = f"{work}/steps"
        os.makedirs(step_dir, exist_ok=True)
        for name in os.listdir(step_dir):  # the previous run's step files
            os.unlink(os.path.join(step_dir, name))
        env_k = dict(env, MINIDL_STEP_DIR=step_dir)
        wall, lines, t_sig, killed, t_again = run(base + ["--max-restarts", "1", "--out", f"{work}/hurt"], env_k,
                                                  steps + 3, sig, step_dir)
        rows["interrupted"].append(wall)
        t_restart, _ = first(lines, r"train: restart 1/1", t_sig)
        t_resumed, line = first(lines, r"resumed from .*loaded in (\d+) ms", t_restart)
        reload_ms = int(re.search(r"loaded in (\d+) ms", line).group(1))
        t_redo = t_again if t_again is not None else float("nan")
        rows["detection"].append(t_restart - t_sig)
        rows["restart"].append(t_resumed - t_restart)
        rows["reload"].append(reload_ms / 1000)
        rows["redo"].append(t_redo - t_resumed)
        print(f"run {i + 1}: plain {rows['plain'][-1]:.2f} s, interrupted {wall:.2f} s (rank 1 {a.signal} at step "
              f"{killed}; detection {rows['detection'][-1]:.3f} s, restart {rows['restart'][-1]:.3f} s, "
              f"reload {rows['reload'][-1]:.3f} s, redo {rows['redo'][-1]:.3f} s)", flush=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"\n{a.model}, 2 processes, {a.train_subset} images/epoch, SIG{a.signal}, medians of {a.repeats}:")
    print(f"  uninterrupted {med['plain']:.2f} s, interrupted {med['interrupted']:.2f} s: "
          f"{med['interrupted'] - med['plain']:.2f} s lost ({med['interrupted'] / med['plain']:.2f}x)")
    print(f"  detection {med['detection']:.3f} s, restart {med['restart']:.3f} s (of which reload {med['reload']:.3f} s), "
          f"redo since the checkpoint {med['redo']:.3f} s")


if __name__ == "__main__":
    main()
