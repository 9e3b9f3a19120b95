#!/usr/bin/python3
"""examples/ctest/check_trace.py — checks a Chrome trace of `train --trace` / `bench --trace`.

    check_trace.py TRACE.json --ranks R --steps S --categories forward,backward,...

Fails (exit 1, naming each problem) unless:
  - the file is JSON with a "traceEvents" list whose complete events carry name, cat, ts, dur >= 0,
    pid and tid, and the processes are ranks 0..R-1, named "rank N";
  - every listed category has a span on every rank, and each rank has S "step" spans on "main";
  - on every track, spans nest: two spans are disjoint or one holds the other;
  - every bucket all-reduce (cat allreduce) lies on a track of its own ("DDP bucket k") and is
    launched during its step's backward (after the step's first backward span began, before its
    last one ended), with a launch instant on "main" at its start;
  - every collective span (cat comm) is on the "communication" thread;
  - in each step, DDP's last wait ends no earlier than the step's last all-reduce finished.
"""
import argparse
import json
import pathlib
import sys


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--categories", required=True)
    a = p.parse_args(argv)
    problems = []
    try:
        doc = json.loads(pathlib.Path(a.trace).read_text())
        raw = doc["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"check_trace: {a.trace} is not a trace file: {e}")
        return 1
    names, procs, spans, instants = {}, {}, [], []
    for e in raw:
        for k in ("ts", "dur"):  # microseconds with three decimals: exact integers of nanoseconds
            if isinstance(e.get(k), (int, float)):
                e[k] = round(e[k] * 1000)
        if e.get("ph") == "M":
            if e.get("name") == "thread_name":
                names[(e["pid"], e["tid"])] = e["args"]["name"]
            elif e.get("name") == "process_name":
                procs[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "X":
            missing = [k for k in ("name", "cat", "ts", "dur", "pid", "tid") if k not in e]
            if missing or e["dur"] < 0:
                problems.append(f"malformed span {e}")
                continue
            spans.append(e)
        elif e.get("ph") == "i":
            instants.append(e)
    if procs != {r: f"rank {r}" for r in range(a.ranks)}:
        problems.append(f"processes {procs}, expected rank 0..{a.ranks - 1}")
    track = lambda e: names.get((e["pid"], e["tid"]), "?")  # noqa: E731
    end = lambda e: e["ts"] + e["dur"]  # noqa: E731
    for r in range(a.ranks):
        mine = [e for e in spans if e["pid"] == r]
        for cat in a.categories.split(","):
            if not any(e["cat"] == cat for e in mine):
                problems.append(f"rank {r}: no '{cat}' span")
        main = [e for e in mine if track(e) == "main"]
        steps = sorted((e for e in main if e["cat"] == "step"), key=lambda e: e["ts"])
        if len(steps) != a.steps:
            problems.append(f"rank {r}: {len(steps)} step spans on main, expected {a.steps}")
        # nesting, per track
        for tid in sorted({e["tid"] for e in mine}):
            on = sorted((e for e in mine if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"]))
            open_ = []
            for e in on:
                while open_ and end(open_[-1]) <= e["ts"]:
                    open_.pop()
                if open_ and end(e) > end(open_[-1]):
                    problems.append(f"rank {r} {track(e)}: '{e['name']}' [{e['ts']}, {end(e)}] crosses "
                                    f"'{open_[-1]['name']}' [{open_[-1]['ts']}, {end(open_[-1])}]")
                open_.append(e)
        for e in mine:
            if e["cat"] == "comm" and track(e) != "communication":
                problems.append(f"rank {r}: collective '{e['name']}' on track '{track(e)}'")
        # bucket all-reduces, step by step
        reduces = [e for e in mine if e["cat"] == "allreduce"]
        launches = {i["ts"] for i in instants if i["pid"] == r and names.get((r, i["tid"])) == "main"}
        for e in reduces:
            if not track(e).startswith("DDP bucket") or e["name"] != track(e) + " all-reduce":
                problems.append(f"rank {r}: '{e['name']}' is on track '{track(e)}'")
            if e["ts"] not in launches:
                problems.append(f"rank {r}: '{e['name']}' has no launch instant on main")
            step = [s for s in steps if s["ts"] <= e["ts"] <= end(s)]
            if not step:
                problems.append(f"rank {r}: '{e['name']}' at {e['ts']} is in no step")
                continue
            backward = [b for b in main if b["cat"] == "backward" and step[0]["ts"] <= b["ts"] <= end(step[0])]
            if not backward or not min(b["ts"] for b in backward) <= e["ts"] <= max(end(b) for b in backward):
                problems.append(f"rank {r}: '{e['name']}' launched at {e['ts']}, outside its step's backward")
        for s in steps:
            in_step = lambda x: s["ts"] <= x["ts"] <= end(s)  # noqa: E731
            done = [end(e) for e in reduces if in_step(e)]
            waits = [end(e) for e in main if e["cat"] == "wait" and in_step(e)]
            if not done or not waits:
                problems.append(f"rank {r}: step at {s['ts']} has {len(done)} all-reduces and {len(waits)} waits")
            elif max(waits) < max(done):
                problems.append(f"rank {r}: step at {s['ts']}: the last wait ends at {max(waits)}, before the "
                                f"last all-reduce finished at {max(done)}")
    for m in problems:
        print(f"check_trace: {m}")
    if problems:
        return 1
    print(f"check_trace: {len(spans)} spans on {a.ranks} ranks, {a.steps} step(s) each: categories, nesting and "
          f"bucket launches as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
