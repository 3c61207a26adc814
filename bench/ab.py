#!/usr/bin/env python3
"""A/B of two builds of mlaserve on one machine: `mlaserve bench` run with each in turn, A then B,
for --rounds rounds, and the step times side by side with each side's median. Alternating puts a
machine's drift (clocks, temperature, a neighbour) on both sides alike; bench/RESULTS.md's A/B
figures are taken this way.

  bench/ab.py --a DIR --b DIR [--rounds N] [--phase prefill|decode] [-- MLASERVE BENCH FLAGS]

DIR holds the build's `mlaserve` (DIR/mlaserve or DIR/bin/mlaserve). --phase picks the GLM-5-
shaped benchmark of issue 16 (prefill: one 8,192-token prompt; decode: batches 1, 8, 64 and 256
at 4,096 tokens of context); flags after `--` replace it. Prints, per batch size, the prefill's
median time to first token and the decode's median time per output token, in ms, of every run;
exits non-zero when a run fails or reports neither.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GLM5 = ["--model", os.path.join(HERE, "models/glm5-shaped"), "--load-format", "dummy",
        "--device", "cuda"]
PHASES = {
    "prefill": GLM5 + ["--batch", "1", "--input-len", "8192", "--output-len", "0",
                       "--warmup", "1", "--iters", "3"],
    "decode": GLM5 + ["--batch", "1,8,64,256", "--input-len", "4096", "--output-len", "16",
                      "--synthetic-context", "--warmup", "2", "--iters", "10"],
}
# (phase in the JSON, its figure): the median of the timed passes, in ms.
FIGURES = [("prefill", "ttft_ms"), ("decode", "tpot_ms")]


def binary(d):
    for p in (os.path.join(d, "mlaserve"), os.path.join(d, "bin", "mlaserve")):
        if os.access(p, os.X_OK):
            return p
    sys.exit(f"ab.py: no executable mlaserve in {d} or {d}/bin")


def run(exe, flags):
    """One `mlaserve bench --json` run: {(batch, phase): median ms}."""
    r = subprocess.run([exe, "bench", *flags, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ab.py: {exe} bench failed ({r.returncode}):\n{r.stderr[-2000:]}")
    got = {}
    for line in r.stdout.splitlines():
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        for phase, fig in FIGURES:
            p = rec.get(phase)
            if isinstance(p, dict) and isinstance(p.get(fig), dict):
                got[(rec["batch"], phase)] = p[fig]["median"]
    if not got:
        sys.exit(f"ab.py: {exe} bench reported no prefill or decode time")
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="the base build's directory")
    ap.add_argument("--b", required=True, help="the variant build's directory")
    ap.add_argument("--rounds", type=int, default=2, help="A-then-B rounds (default 2)")
    ap.add_argument("--phase", choices=sorted(PHASES), default="prefill")
    ap.add_argument("flags", nargs="*", help="mlaserve bench flags (after --), instead of --phase")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds: at least 1")
    flags = args.flags or PHASES[args.phase]
    exes = {"A": binary(args.a), "B": binary(args.b)}
    runs = {"A": [], "B": []}
    for i in range(args.rounds):
        for side in ("A", "B"):
            runs[side].append(run(exes[side], flags))
            print(f"round {i + 1} {side} done", file=sys.stderr, flush=True)

    keys = sorted(set().union(*runs["A"], *runs["B"]), key=lambda k: (k[1], k[0]))
    print(f"A: {exes['A']}\nB: {exes['B']}\nmlaserve bench {' '.join(flags)}")
    print(f"{'phase':<8} {'batch':>5}  {'A runs (ms)':<24} {'B runs (ms)':<24} "
          f"{'median A':>9} {'median B':>9} {'B vs A':>7}")
    for batch, phase in keys:
        a = [r[(batch, phase)] for r in runs["A"] if (batch, phase) in r]
        b = [r[(batch, phase)] for r in runs["B"] if (batch, phase) in r]
        if len(a) != args.rounds or len(b) != args.rounds:
            sys.exit(f"ab.py: batch {batch} {phase}: not in every run")
        ma, mb = statistics.median(a), statistics.median(b)
        runs_a = " ".join(f"{x:.3f}" for x in a)
        runs_b = " ".join(f"{x:.3f}" for x in b)
        print(f"{phase:<8} {batch:>5}  {runs_a:<24} {runs_b:<24} {ma:>9.3f} {mb:>9.3f} "
              f"{100 * (mb / ma - 1):>+6.1f}%")


if __name__ == "__main__":
    main()
