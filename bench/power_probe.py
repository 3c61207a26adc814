#!/usr/bin/env python3
"""The GPU's power, energy and SM clock while a command runs, read from NVML as fast as it answers.

    bench/power_probe.py [--gpu 0] [--tail-s S] [--csv FILE] -- COMMAND ...

Each sample: the driver's energy counter (mJ since it loaded), the instantaneous board power
(NVML_FI_DEV_POWER_INSTANT; the plain power reading is a one-second average on Hopper), the SM
clock and the clock event reasons (0x4: software power cap, 0x80: hardware power brake). Prints
the power limit and, over the whole run and over its last S seconds (the timed steps of a
`mlaserve bench --iters N` run come last), the mean power from the energy counter and the
percentiles of the instantaneous power and the SM clock, with the share of samples under each
clock event reason. --csv keeps every sample. Uses libnvidia-ml.so.1 through ctypes, so it needs
nothing beyond the driver.
"""

import argparse
import ctypes
import subprocess
import sys
import time

NVML_FI_DEV_POWER_INSTANT = 186
NVML_CLOCK_SM = 1
REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x80: "hw_power_brake"}


class FieldValue(ctypes.Structure):
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint),
                ("timestamp", ctypes.c_longlong), ("latencyUsec", ctypes.c_longlong),
                ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", ctypes.c_ulonglong)]


class Nvml:
    def __init__(self, index):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self.check(self.lib.nvmlInit_v2(), "nvmlInit")
        self.dev = ctypes.c_void_p()
        self.check(self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.dev)), "handle")
        # The older name of the same call, which drivers before 535 only have.
        self.reasons_fn = ("nvmlDeviceGetCurrentClocksEventReasons"
                           if hasattr(self.lib, "nvmlDeviceGetCurrentClocksEventReasons")
                           else "nvmlDeviceGetCurrentClocksThrottleReasons")

    @staticmethod
    def check(rc, what):
        if rc != 0:
            raise RuntimeError(f"NVML {what}: error {rc}")

    def uint(self, fn, *args):
        v = ctypes.c_uint()
        self.check(getattr(self.lib, fn)(self.dev, *args, ctypes.byref(v)), fn)
        return v.value

    def ull(self, fn):
        v = ctypes.c_ulonglong()
        self.check(getattr(self.lib, fn)(self.dev, ctypes.byref(v)), fn)
        return v.value

    def instant_mw(self):
        f = FieldValue(fieldId=NVML_FI_DEV_POWER_INSTANT)
        self.check(self.lib.nvmlDeviceGetFieldValues(self.dev, 1, ctypes.byref(f)), "field values")
        self.check(f.nvmlReturn, "instant power")
        return f.value & 0xFFFFFFFF  # an unsigned int in the value union

    def sample(self):
        return (time.monotonic(), self.ull("nvmlDeviceGetTotalEnergyConsumption"), self.instant_mw(),
                self.uint("nvmlDeviceGetClockInfo", NVML_CLOCK_SM),
                self.ull(self.reasons_fn))


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summary(name, rows):
    if len(rows) < 2:
        print(f"{name}: {len(rows)} samples")
        return
    secs = rows[-1][0] - rows[0][0]
    joules = (rows[-1][1] - rows[0][1]) / 1e3
    watts = [r[2] / 1e3 for r in rows]
    mhz = [r[3] for r in rows]
    shares = ", ".join(f"{label} {sum(1 for r in rows if r[4] & bit) / len(rows):.0%}"
                       for bit, label in REASONS.items())
    print(f"{name}: {secs:.2f} s, {len(rows)} samples, {joules:.1f} J (mean {joules / secs:.0f} W); "
          f"instant W p10/p50/p90/max {pct(watts, .1):.0f}/{pct(watts, .5):.0f}/"
          f"{pct(watts, .9):.0f}/{max(watts):.0f}; SM MHz p10/p50/p90 {pct(mhz, .1)}/"
          f"{pct(mhz, .5)}/{pct(mhz, .9)}; {shares}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--tail-s", type=float, default=2.0, help="also summarise the last S seconds")
    ap.add_argument("--csv", help="write every sample here")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no command")
    nvml = Nvml(args.gpu)
    print(f"power limit {nvml.uint('nvmlDeviceGetEnforcedPowerLimit') / 1e3:.0f} W")
    rows = []
    proc = subprocess.Popen(cmd)
    while proc.poll() is None:
        rows.append(nvml.sample())
    rows.append(nvml.sample())
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("t_s,energy_mj,instant_mw,sm_mhz,reasons\n")
            t0 = rows[0][0]
            f.writelines(f"{r[0] - t0:.4f},{r[1]},{r[2]},{r[3]},{r[4]:#x}\n" for r in rows)
    summary("whole run", rows)
    summary(f"last {args.tail_s:g} s", [r for r in rows if r[0] >= rows[-1][0] - args.tail_s])
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
