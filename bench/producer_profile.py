"""Where the load runner's Python time goes with the ledger on: py-spy samples one load (all
threads, idle included), then the share of samples under each part of the pipeline.

    bench/run producer_profile [--mode idempotent] [--messages 300000]

The collapsed stacks are kept in artifacts/ (open them with any flame-graph viewer).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (label, a frame name that marks it); a sample counts under the first label whose frame it holds.
PARTS = [
    ("ledger: COPY events (writer thread)", "copy_events"),
    ("ledger: COPY outcomes (writer thread)", "copy_outcomes"),
    ("producer: waiting for the ledger before sending", "result"),
    ("producer: produce() and delivery reports", "send"),
    ("generator: building events", "batches"),
    ("flush and drain", "_finish_outcomes"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", default="idempotent")
    ap.add_argument("--messages", type=int, default=300_000)
    args = ap.parse_args(argv)
    out = REPO / "artifacts" / f"py-spy-load-{args.mode}.txt"
    out.parent.mkdir(exist_ok=True)
    cmd = ["py-spy", "record", "--format", "raw", "--idle", "--threads", "--rate", "200", "-o", str(out), "--",
           sys.executable, "-m", "delivery_semantics.load", "run", "--mode", args.mode, "--messages",
           str(args.messages), "--no-progress"]
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ})
    if res.returncode != 0:
        print(res.stderr[-2000:], file=sys.stderr)
        return 1
    print(res.stdout.strip().splitlines()[-1])
    per_thread: dict[str, Counter] = {}
    for line in out.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        thread = frames[0]
        label = next((lbl for lbl, marker in PARTS if any(f.startswith(marker + " ") for f in frames)), "other")
        if any(f.startswith(("select ", "wait ", "_wait_for_tstate_lock ", "poll ")) for f in frames[-2:]):
            label += " (idle)"
        per_thread.setdefault(thread, Counter())[label] += int(n)
    for thread, counts in per_thread.items():
        total = sum(counts.values())
        if total < 50:
            continue
        print(f"\n{thread}: {total} samples")
        for label, n in counts.most_common(8):
            print(f"  {100 * n / total:5.1f}%  {label}")
    print(f"\ncollapsed stacks: {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
