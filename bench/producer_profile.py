"""Where the load runner's Python time goes with the ledger on: py-spy samples one load (all
threads, idle included), then the share of samples under each part of the pipeline.

    bench/run producer_profile [--mode idempotent] [--messages 300000]

The collapsed stacks are kept in artifacts/ (open them with any flame-graph viewer).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def our_frame(frames: list[str]) -> str:
    """The innermost frame of this package, or what the thread was doing outside it."""
    ours = [f for f in frames if "delivery_semantics/" in f]
    if ours:
        return ours[-1]
    if any("concurrent/futures/thread.py" in f for f in frames):
        return "idle: waiting for work"
    return frames[-1] if frames else "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", default="idempotent")
    ap.add_argument("--messages", type=int, default=300_000)
    args = ap.parse_args(argv)
    out = REPO / "artifacts" / f"py-spy-load-{args.mode}.txt"
    out.parent.mkdir(exist_ok=True)
    cmd = [
        "py-spy",
        "record",
        "--format",
        "raw",
        "--idle",
        "--threads",
        "--rate",
        "200",
        "-o",
        str(out),
        "--",
        sys.executable,
        "-m",
        "delivery_semantics.entry.cli",
        "load",
        "run",
        "--mode",
        args.mode,
        "--messages",
        str(args.messages),
        "--no-progress",
    ]
    # py-spy attaches by pid: launching the load itself fails in some containers (ECHILD).
    load_proc = subprocess.Popen(cmd[cmd.index("--") + 1 :], stdout=subprocess.PIPE, text=True)
    spy = subprocess.run(
        ["py-spy", *[a for a in cmd[1 : cmd.index("--")]], "--pid", str(load_proc.pid)], capture_output=True, text=True
    )
    out_text, _ = load_proc.communicate()
    if load_proc.returncode != 0 or spy.returncode != 0:
        print(spy.stderr[-2000:], file=sys.stderr)
        return 1
    print(out_text.strip().splitlines()[-1])
    per_thread: dict[str, Counter] = {}
    for line in out.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        thread = frames[0].split(": ", 1)[-1]
        per_thread.setdefault(thread, Counter())[our_frame(frames[1:])] += int(n)
    for thread, counts in per_thread.items():
        total = sum(counts.values())
        if total < 50:
            continue
        print(f"\n{thread}: {total} samples at 200 Hz")
        for label, n in counts.most_common(8):
            print(f"  {100 * n / total:5.1f}%  {label}")
    print(f"\ncollapsed stacks: {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
