#!/usr/bin/env python3
"""The end-to-end serving benchmark in one command (issue 16; issue 20's MTP timing): the raw
decode step of `mlaserve bench`, then `mlaserve serve` under token-id load from
bench/serve_tpot.py, and the engine + HTTP overhead of serving over the raw step. Standard
library only (the GPU machine has no Node.js).

    python3 bench/serve_bench.py --model bench/models/glm5-shaped --device cuda \
        --concurrency 1,16,64,256 --prompt-len 1024 --max-tokens 256 \
        --speculative-config '{"method":"mtp","num_speculative_tokens":3}' --mtp-concurrency 1,8,64

Steps, each one process of build/mlaserve on the same model (--load-format dummy by default:
random weights from config.json, no tokenizer needed):

1. Raw step: `mlaserve bench --batch <levels> --input-len P + M/2 − 8 --output-len 16
   --synthetic-context --max-model-len P + M + 64`: 16 decode steps per batch size at mean
   context P + M/2 (P prompt tokens, M output tokens: the mean context of a request's middle
   half), median step time, with the decode graphs planned for the server's max_model_len.
2. Served: `mlaserve serve --skip-tokenizer-init` on 127.0.0.1; serve_tpot.py's token-id load
   (--requests waves of C requests of P random ids, M tokens each, greedy, ignore_eos); the
   server's /metrics (preemptions, prefix-cache hits) after the levels.
3. With --speculative-config: the server again with that MTP configuration (a copy of
   config.json with num_nextn_predict_layers 1 when the model declares none: with dummy weights
   the MTP layer is random, so its drafts are accepted about as often as chance allows; the
   acceptance measured is printed from /metrics' vllm:spec_decode_* counters) over
   --mtp-concurrency, beside MTP off at the same levels.

Printed: one JSON line per level as it completes, then the tables: per concurrency C the
served TPOT (vLLM's definition), the served mid-stream time per token (the decode step as
served: serve_tpot.py's docstring), the raw step at batch C and mean context, and the overhead
= mid-stream / raw − 1 (issue 16's target ≤ 10 %), and the engine's steps over the level with
their mean wall time by phase from /metrics (schedule / forward / output: the host's share is
schedule + output; prefill steps included).
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import serve_tpot


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def max_model_len(a):
    """The server's --max-model-len, which the raw step's graphs are planned for too."""
    return a.prompt_len + a.max_tokens + 64


def raw_steps(a, levels, out_dir):
    """{batch: median decode step in ms} from `mlaserve bench` at the served mean context and
    the server's max_model_len (a graph step's attention and indexer are planned for it)."""
    input_len = a.prompt_len + a.max_tokens // 2 - 8
    cmd = [a.mlaserve, "bench", "--model", a.model, "--load-format", a.load_format,
           "--device", a.device, "--batch", ",".join(map(str, levels)),
           "--input-len", str(input_len), "--output-len", "16", "--synthetic-context",
           "--max-model-len", str(max_model_len(a)),
           "--warmup", "2", "--iters", "2", "--json"] + (["--enforce-eager"] if a.enforce_eager else [])
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    with open(os.path.join(out_dir, "bench.log"), "w") as log:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    if r.returncode != 0:
        sys.stderr.write(open(os.path.join(out_dir, "bench.log")).read()[-4000:])
        raise SystemExit(f"mlaserve bench failed ({r.returncode})")
    steps = {}
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            steps[j["batch"]] = j["decode"]["tpot_ms"]["median"]
    print(f"raw steps (ms) at context {input_len + 8}: {json.dumps(steps)} "
          f"({time.monotonic() - t0:.0f} s)", flush=True)
    return steps, input_len + 8


def metrics(url):
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def metric(m, family, **labels):
    """Sum of a family's samples whose labels include `labels`."""
    total = 0.0
    for name, v in m.items():
        if name.split("{")[0] == family and all(f'{k}="{x}"' in name for k, x in labels.items()):
            total += v
    return total


class Server:
    """`mlaserve serve` on 127.0.0.1, its log in a file; stopped with SIGTERM."""

    def __init__(self, a, model_dir, extra, log_path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [a.mlaserve, "serve", model_dir, "--load-format", a.load_format,
               "--device", a.device, "--skip-tokenizer-init", "--host", "127.0.0.1",
               "--port", str(self.port), "--served-model-name", "bench",
               "--max-model-len", str(max_model_len(a)),
               "--max-num-seqs", str(max(256, a.max_level))]
        cmd += ["--enforce-eager"] if a.enforce_eager else []
        cmd += extra + a.serve_arg
        print("$ " + " ".join(cmd), flush=True)
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        t0 = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                self.fail(f"mlaserve serve exited ({self.proc.returncode}) during start-up")
            try:
                if urllib.request.urlopen(self.url + "/health", timeout=5).status == 200:
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() - t0 > a.start_timeout:
                self.stop()
                self.fail(f"mlaserve serve not healthy after {a.start_timeout} s")
            time.sleep(0.5)
        print(f"server ready in {time.monotonic() - t0:.0f} s", flush=True)

    def fail(self, why):
        self.log.flush()
        sys.stderr.write(open(self.log_path).read()[-4000:])
        raise SystemExit(why)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


PHASES = ("schedule", "forward", "output")


def step_phases(url):
    """The engine's step counters on /metrics: steps and seconds by phase."""
    m = metrics(url)
    out = {"steps": metric(m, "mlaserve:engine_steps_total")}
    for p in PHASES:
        out[p] = metric(m, "mlaserve:engine_step_seconds_total", phase=p)
    return out


def served(a, cfg, model_dir, extra, levels, log_path):
    """Levels against one server, each line with the engine's step counters over its level;
    (summary lines, /metrics after them, their delta)."""
    srv = Server(a, model_dir, extra, log_path)
    try:
        before = metrics(srv.url)
        lines = serve_tpot.run_levels(srv.url, cfg, levels, a.requests, a.processes,
                                      snapshot=lambda: step_phases(srv.url))
        after = metrics(srv.url)
    finally:
        srv.stop()
    delta = {k: v - before.get(k, 0.0) for k, v in after.items()}
    return lines, after, delta


def mtp_model_dir(model, tmp):
    """The model directory, or a copy of its config.json declaring one MTP layer."""
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("num_nextn_predict_layers", 0) > 0:
        return model
    cfg["num_nextn_predict_layers"] = 1
    d = os.path.join(tmp, "model-with-mtp")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    gen = os.path.join(model, "generation_config.json")
    if os.path.exists(gen):
        shutil.copy(gen, d)
    return d


def fmt(v, spec=".2f"):
    return "—" if v is None else format(v, spec)


def print_overhead(lines, raw, context, m):
    print(f"\nServed vs raw decode step (prompt {m['prompt_len']}, output {m['max_tokens']}, "
          f"mean context {context}; preemptions {m['preemptions']:.0f}, prefix-cache hits "
          f"{m['hits']:.0f} tokens):\n")
    print("| concurrency | requests | output tok/s | TTFT median / p90 (ms) | TPOT median / p90 (ms) "
          "| mid-stream time per token (ms) | raw step at batch C (ms) | overhead "
          "| engine steps: schedule / forward / output per step (ms) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for l in lines:
        c = l["concurrency"]
        r = raw.get(c)
        over = (l["mid_ms_median"] / r - 1) * 100 if r and l["mid_ms_median"] else None
        d = l.get("delta", {})
        steps = d.get("steps", 0)
        phases = (f"{steps:.0f}: " + " / ".join(f"{1e3 * d[p] / steps:.3f}" for p in PHASES)
                  if steps else "—")
        print(f"| {c} | {l['requests']} | {fmt(l['output_tokens_per_s'], ',.0f')} "
              f"| {fmt(l['ttft_ms_median'], '.1f')} / {fmt(l['ttft_ms_p90'], '.1f')} "
              f"| {fmt(l['tpot_ms_median'])} / {fmt(l['tpot_ms_p90'])} "
              f"| {fmt(l['mid_ms_median'])} | {fmt(r)} | {fmt(over, '+.1f')} % | {phases} |")


def print_mtp(off, on, spec, delta):
    drafts = metric(delta, "vllm:spec_decode_num_drafts_total")
    drafted = metric(delta, "vllm:spec_decode_num_draft_tokens_total")
    accepted = metric(delta, "vllm:spec_decode_num_accepted_tokens_total")
    k = json.loads(spec).get("num_speculative_tokens", 1)
    per_pos = [metric(delta, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(i))
               for i in range(k)]
    print(f"\nMTP {spec}: vllm:spec_decode_* over the timed levels and warm-up: {drafts:.0f} "
          f"drafts, {drafted:.0f} draft tokens, {accepted:.0f} accepted "
          f"({fmt(100 * accepted / drafted if drafted else None, '.1f')} %; per position "
          f"{' / '.join(f'{x:.0f}' for x in per_pos)}); mean accepted length "
          f"{fmt(1 + accepted / drafts if drafts else None)} tokens per target step\n")
    print("| concurrency | TPOT MTP off (ms) | TPOT MTP on (ms) | mid-stream off / on (ms) "
          "| output tok/s off / on |")
    print("| --- | --- | --- | --- | --- |")
    by_c = {l["concurrency"]: l for l in off}
    for l in on:
        o = by_c.get(l["concurrency"], {})
        print(f"| {l['concurrency']} | {fmt(o.get('tpot_ms_median'))} | {fmt(l['tpot_ms_median'])} "
              f"| {fmt(o.get('mid_ms_median'))} / {fmt(l['mid_ms_median'])} "
              f"| {fmt(o.get('output_tokens_per_s'), ',.0f')} / "
              f"{fmt(l['output_tokens_per_s'], ',.0f')} |")


def problems(lines, requests, raw, mtp_delta):
    """What makes the run invalid: failed or missing requests, a level without its figures."""
    out = []
    for l in lines:
        c = l["concurrency"]
        if l["num_errors"] or l["requests"] != c * requests:
            out.append(f"concurrency {c}: {l['requests']} of {c * requests} requests completed, "
                       f"{l['num_errors']} failed {l['errors']}")
        if l["mid_ms_median"] is None:
            out.append(f"concurrency {c}: no mid-stream time per token")
        if raw is not None and c not in raw:
            out.append(f"concurrency {c}: mlaserve bench gave no step time at batch {c}")
    if mtp_delta is not None and metric(mtp_delta, "vllm:spec_decode_num_drafts_total") <= 0:
        out.append("MTP on: the server counted no drafts")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mlaserve", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                      "mlaserve"))
    p.add_argument("--model", default="bench/models/glm5-shaped")
    p.add_argument("--load-format", default="dummy")
    p.add_argument("--device", default="cuda")
    p.add_argument("--enforce-eager", action="store_true", help="passed to bench and serve")
    p.add_argument("--serve-arg", action="append", default=[],
                   help="one more argument for `mlaserve serve` (repeatable)")
    p.add_argument("--speculative-config", default="",
                   help="also serve with this MTP configuration (vLLM's JSON)")
    p.add_argument("--mtp-concurrency", default="1,8,64", help="levels of the MTP comparison")
    p.add_argument("--start-timeout", type=float, default=300, help="seconds to /health 200")
    p.add_argument("--out-dir", default="", help="keep the logs here (default: a temp dir)")
    serve_tpot.add_load_args(p)
    p.set_defaults(concurrency="1,16,64,256", prompt_len=1024, max_tokens=256)
    a = p.parse_args()
    if a.prompt_len <= 0 or a.max_tokens < 8:
        raise SystemExit("--prompt-len must be positive and --max-tokens at least 8")
    levels = [int(x) for x in a.concurrency.split(",")]
    mtp_levels = [int(x) for x in a.mtp_concurrency.split(",")] if a.speculative_config else []
    off_levels = sorted(set(levels) | set(mtp_levels))
    a.max_level = max(off_levels)
    tmp = tempfile.mkdtemp(prefix="serve-bench-")
    out_dir = a.out_dir or tmp
    os.makedirs(out_dir, exist_ok=True)
    cfg = serve_tpot.load_config(a, a.model, "bench")
    t0 = time.monotonic()
    try:
        raw, context = raw_steps(a, off_levels, out_dir)
        off, m_off, _ = served(a, cfg, a.model, [], off_levels,
                                   os.path.join(out_dir, "serve.log"))
        on = d_on = None
        if a.speculative_config:
            on, _, d_on = served(a, cfg, mtp_model_dir(a.model, tmp),
                                 ["--speculative-config", a.speculative_config], mtp_levels,
                                 os.path.join(out_dir, "serve-mtp.log"))
    finally:
        if not a.out_dir:
            shutil.rmtree(tmp, ignore_errors=True)
    print_overhead(off, raw, context,
                   {"prompt_len": a.prompt_len, "max_tokens": a.max_tokens,
                    "preemptions": metric(m_off, "vllm:num_preemptions_total"),
                    "hits": metric(m_off, "vllm:prefix_cache_hits_total")})
    if on is not None:
        print_mtp(off, on, a.speculative_config, d_on)
    print(f"\nwall {time.monotonic() - t0:.0f} s", flush=True)
    bad = problems(off, a.requests, raw, None) + (problems(on, a.requests, None, d_on) if on else [])
    if bad:
        raise SystemExit("invalid run:\n  " + "\n  ".join(bad))


if __name__ == "__main__":
    main()
