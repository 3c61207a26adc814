#!/usr/bin/env python3
"""Per-kernel time and DRAM traffic of one `mlaserve bench` step, measured by Nsight Compute.

    python3 bench/kernel_profile.py --mlaserve build/mlaserve --out-dir prof \
        --batch 1,8,64,256 --input-len 4096 --prefill-len 8192

`mlaserve bench` opens the profiler's window around its profiled step only (cudaProfilerStart /
Stop), so `ncu --profile-from-start off` records exactly one eager step per batch size (decode
with --synthetic-context) and one prefill. Per kernel: launches, summed duration, DRAM bytes read
+ written, the achieved bandwidth (bytes / duration) against --peak-tbps, and the SM clock it ran
at (time-weighted), largest first. ncu serialises kernels and flushes caches between them (its
defaults), so a kernel reads its weights from DRAM as a decode step does; durations are each
kernel's own, without launch gaps. Clocks are the device's own (--clock-control none): under its
power cap a heavy kernel runs below the maximum clock even alone, and lower still in the stream
after other heavy kernels (bench/RESULTS.md, session 36). Standard library only.
"""
import argparse
import csv
import glob
import io
import os
import re
import shutil
import subprocess
import sys

METRICS = ("gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,"
           "sm__cycles_elapsed.avg.per_second")


def find_ncu(given):
    if given:
        return given
    found = shutil.which("ncu") or next(
        iter(sorted(glob.glob("/usr/local/cuda/bin/ncu") +
                    glob.glob("/opt/nvidia/nsight-compute/*/ncu"))), None)
    if not found:
        sys.exit("kernel_profile: ncu not found (give --ncu)")
    return found


def profile(a, ncu, name, bench_args):
    rep = os.path.join(a.out_dir, name)
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--metrics", METRICS,
           "-f", "-o", rep, a.mlaserve, "bench", "--model", a.model, "--load-format", "dummy",
           "--device", "cuda", "--enforce-eager", "--warmup", "1", "--iters", "1"] + bench_args
    print("$ " + " ".join(cmd), flush=True)
    with open(rep + ".log", "w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=a.timeout)
    raw = subprocess.run([ncu, "--import", rep + ".ncu-rep", "--csv", "--page", "raw",
                          "--print-units", "base"], capture_output=True, text=True, check=True)
    return list(csv.reader(io.StringIO(raw.stdout)))


def steps(rows):
    """Kernel rows split into steps: each step starts with the token embedding."""
    head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    col = {n: i for i, n in enumerate(rows[head])}
    out, cur = [], []
    for r in rows[head + 2:]:  # the row after the header holds units
        if len(r) < len(col):
            continue
        if "embedding_kernel" in r[col["Kernel Name"]] and cur:
            out.append(cur)
            cur = []
        cur.append(r)
    if cur:
        out.append(cur)
    return col, out


def num(r, col, name):
    return float(r[col[name]].replace(",", "") or 0)


def table(title, col, step, peak, top):
    agg = {}
    for r in step:
        k = re.sub(r"\(.*", "", r[col["Kernel Name"]]).replace("void ", "")
        k = re.sub(r"mls::(<unnamed>::)?", "", k)[:64]
        e = agg.setdefault(k, [0, 0.0, 0.0, 0.0])
        t = num(r, col, "gpu__time_duration.sum") * 1e-9
        e[0] += 1
        e[1] += t
        e[2] += num(r, col, "dram__bytes_read.sum") + num(r, col, "dram__bytes_write.sum")
        e[3] += num(r, col, "sm__cycles_elapsed.avg.per_second") * t  # cycles
    total = sum(e[1] for e in agg.values())
    moved = sum(e[2] for e in agg.values())
    print(f"\n{title}: {len(step)} kernels, {total * 1e3:.3f} ms, {moved / 1e9:.3f} GB DRAM "
          f"({moved / total / 1e12:.2f} TB/s)")
    print(f"| kernel | launches | ms | share | GB | TB/s | of {peak} TB/s | SM MHz |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for k, (n, s, b, cycles) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]:
        bw = b / s / 1e12 if s else 0
        mhz = cycles / s / 1e6 if s else 0
        print(f"| `{k}` | {n} | {s * 1e3:.3f} | {100 * s / total:.1f} % | {b / 1e9:.3f} | "
              f"{bw:.2f} | {100 * bw / peak:.0f} % | {mhz:.0f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mlaserve", default="build/mlaserve")
    p.add_argument("--model", default="bench/models/glm5-shaped")
    p.add_argument("--ncu", default="")
    p.add_argument("--batch", default="1,8,64,256", help="decode batch sizes")
    p.add_argument("--input-len", type=int, default=4096, help="decode context")
    p.add_argument("--prefill-len", type=int, default=8192, help="0: no prefill step")
    p.add_argument("--peak-tbps", type=float, default=4.8)
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--out-dir", default="kernel-profile")
    a = p.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    ncu = find_ncu(a.ncu)
    batches = a.batch.split(",")
    col, dec = steps(profile(a, ncu, "decode", ["--batch", a.batch, "--input-len",
                                                str(a.input_len), "--output-len", "2",
                                                "--synthetic-context"]))
    for b, st in zip(batches, dec):
        table(f"decode, batch {b}, context {a.input_len}", col, st, a.peak_tbps, a.top)
    if a.prefill_len:
        col, pre = steps(profile(a, ncu, "prefill", ["--batch", "1", "--input-len",
                                                     str(a.prefill_len), "--output-len", "0"]))
        table(f"prefill of {a.prefill_len} tokens", col, pre[0], a.peak_tbps, a.top)


if __name__ == "__main__":
    main()
