#!/usr/bin/env python3
"""Where one kernel's warps wait, instruction by instruction, from Nsight Compute's source view.

    ncu --set full --import-source no --clock-control none --profile-from-start off \
        -k regex:index_score --launch-count 1 -o rep build/mlaserve bench ... --enforce-eager
    ncu --import rep.ncu-rep --page source --csv --print-source sass > src.csv
    python3 bench/ncu_source_stalls.py src.csv [--top 40] [--range 741:950]

Prints the stall reasons over all warp samples, the instructions with the most excessive
shared-memory wavefronts (bank conflicts) and excessive L2 sectors (partly used sectors), the
instructions holding the most samples with their leading reasons, and, over --range (SASS line
numbers of the CSV, e.g. one loop's body), the executed instructions by opcode per execution of
the range's most executed instruction. Session 32 found its three landings with it: the
indexer's serial epilogue chains and half-used copy sectors, top-k's conflicting bin loads, and
attention's exp2 wrapper (bench/RESULTS.md). Standard library only.
"""
import argparse
import collections
import csv


def number(row, col):
    try:
        return float(row[col].replace(",", ""))
    except (ValueError, IndexError):
        return 0.0


def opcode(sass):
    words = sass.split()
    word = words[1] if words and words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    p.add_argument("--top", type=int, default=30, help="instructions listed by samples")
    p.add_argument("--range", default="", help="first:last SASS lines for the opcode counts")
    a = p.parse_args()

    rows = list(csv.reader(open(a.csv)))
    header = rows[1]  # rows[0] names the kernel
    data = rows[2:]
    col = {name: i for i, name in enumerate(header)}
    stalls = [n for n in header if n.startswith("stall_") and "Not Issued" not in n]
    print(rows[0][1] if len(rows[0]) > 1 else rows[0][0])

    samples = sum(number(r, col["# Samples"]) for r in data)
    by_reason = collections.Counter()
    for r in data:
        for s in stalls:
            by_reason[s] += number(r, col[s])
    print("warp samples: %d" % samples)
    for s, v in by_reason.most_common(12):
        print("  %-24s %5.1f %%" % (s[len("stall_"):], 100.0 * v / max(samples, 1)))

    for metric, label in (("L1 Wavefronts Shared Excessive", "excessive shared wavefronts"),
                          ("L2 Theoretical Sectors Global Excessive", "excessive L2 sectors")):
        if metric not in col:
            continue
        worst = sorted(data, key=lambda r: -number(r, col[metric]))[:6]
        print("%s: %d" % (label, sum(number(r, col[metric]) for r in data)))
        for r in worst:
            if number(r, col[metric]) > 0:
                print("  %5d %-64s %12d" % (data.index(r), r[1].strip()[:64],
                                            number(r, col[metric])))

    print("instructions by samples:")
    ranked = sorted(range(len(data)), key=lambda i: -number(data[i], col["# Samples"]))
    for i in ranked[:a.top]:
        r = data[i]
        lead = sorted(((number(r, col[s]), s[len("stall_"):]) for s in stalls), reverse=True)[:3]
        print("  %5d %-60s %7d  %s" % (i, r[1].strip()[:60], number(r, col["# Samples"]),
                                       " ".join("%s:%d" % (s, v) for v, s in lead if v)))

    if a.range:
        first, last = (int(x) for x in a.range.split(":"))
        body = data[first:last + 1]
        executed = col["Instructions Executed"]
        per = max(number(r, executed) for r in body) or 1.0
        counts = collections.Counter()
        for r in body:
            counts[opcode(r[1].strip())] += number(r, executed) / per
        print("lines %d-%d, per execution of the range: %.0f instructions" %
              (first, last, sum(counts.values())))
        print("  " + ", ".join("%s %.1f" % (k, v) for k, v in counts.most_common(24)))


if __name__ == "__main__":
    main()
