#!/usr/bin/env python3
"""Throughput, TTFT and time per output token of a running OpenAI-compatible server, for machines
without Node.js (the GPU machine): bench/serve_load.mjs measures the transport under load where
Node.js is. Standard library only.

    # token ids (a server with --skip-tokenizer-init, e.g. the GLM-5-shaped dummy model):
    python3 bench/serve_tpot.py --url http://127.0.0.1:8000 --model-dir bench/models/glm5-shaped \
        --prompt-len 1024 --max-tokens 256 --concurrency 1,16,64,256 --requests 2
    # chat text (a server with a tokenizer):
    python3 bench/serve_tpot.py --url http://127.0.0.1:8000 --concurrency 1,8,64 --max-tokens 128
    # the demo model's held-out chats (their templated prompt ids, their own lengths):
    python3 bench/serve_tpot.py --url http://127.0.0.1:8000 \
        --samples models/demo-glm5/golden.json --concurrency 1,8,64 --requests 4

C clients each send --requests streaming requests back to back (greedy, ignore_eos, max_tokens
fixed), so a level is --requests waves of C sequences of equal length. Three request kinds:

- token ids (--prompt-len N): /v1/completions with N pseudo-random ids below the vocabulary
  (--vocab, or config.json's vocab_size of --model-dir), seeded per request (--seed) so that
  no two prompts share a prefix (no prefix-cache hits) and a rerun sends the same ids;
  return_token_ids, so every chunk says how many tokens it carries (several with speculative
  decoding).
- held-out samples (--samples, a golden.json with "heldout_eval"): request i sends sample
  i mod count as token ids (its chat-templated prompt_ids) with max_tokens = its target length,
  so that greedy output is the sample's own continuation (what the model was trained to say:
  the acceptance speculative decoding gets on real chats). Lengths differ, so the mid-stream
  figure mixes steps of fewer sequences.
- chat (neither): /v1/chat/completions with a short message; each content delta counts
  as one chunk and the token count comes from the stream's usage chunk.

Per request: TTFT (request sent to first token), TPOT = (last token − first token) /
(completion tokens − 1) as vLLM's benchmark defines it, and with token ids the mid-stream time
per token: (arrival of token 3n/4 − arrival of token n/4) / (n/2). The mid-stream figure is the
decode step as served: in a wave of C equal requests every sequence's middle half falls in
steps where all C decode (the wave's prompts are prefilled in its first C × N /
max_num_batched_tokens steps, its stragglers finish in the last as many), at mean context N +
n/2, as long as that prefill takes fewer than n/4 steps (256 × 1024 / 8192 = 32 < 64 for the
benchmark's 1k prompts and 256 tokens); it uses two arrival times only, so a client that reads
several chunks at once does not bias it.
TPOT also counts the steps shared with other requests' prefill chunks: a serving cost, not the
engine's or HTTP's overhead.

Clients run as threads spread over processes (--processes; the GIL of one process cannot keep
up with 256 streams of one chunk per step), timestamps from the system-wide monotonic clock.
One JSON line per level: requests, errors, output tokens/s over the level's wall time, TTFT
median/p90, TPOT median/p90 and the mid-stream time per token median/p90 (token ids only).
"""
import argparse
import concurrent.futures
import http.client
import json
import math
import os
import random
import statistics
import threading
import time
import urllib.parse


def prompt_ids(seed, index, length, vocab):
    rng = random.Random(seed * 1_000_003 + index)
    return [rng.randrange(vocab) for _ in range(length)]


def request_body(cfg, index):
    common = {"max_tokens": cfg["max_tokens"], "ignore_eos": True, "temperature": 0,
              "stream": True, "stream_options": {"include_usage": True}}
    if cfg["model"]:
        common["model"] = cfg["model"]
    if cfg["samples"]:
        s = cfg["samples"][index % len(cfg["samples"])]
        common["max_tokens"] = len(s["target_ids"])
        return "/v1/completions", {"prompt": s["prompt_ids"], "return_token_ids": True, **common}
    if cfg["prompt_len"]:
        ids = prompt_ids(cfg["seed"], index, cfg["prompt_len"], cfg["vocab"])
        return "/v1/completions", {"prompt": ids, "return_token_ids": True, **common}
    messages = [{"role": "user", "content": f"Request {index}: write something."}]
    return "/v1/chat/completions", {"messages": messages, **common}


def token_ids(cfg):
    """Whether the requests send (and stream back) token ids."""
    return bool(cfg["prompt_len"] or cfg["samples"])


def chunk_tokens(chunk, token_ids):
    """Tokens one stream chunk carries: its token ids, or 1 per chat content delta."""
    n = 0
    for c in chunk.get("choices", []):
        if token_ids:
            n += len(c.get("token_ids") or [])
        elif c.get("delta", {}).get("content"):
            n += 1
    return n


def one(url, cfg, index):
    path, body = request_body(cfg, index)
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    t0 = time.monotonic()
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"HTTP {res.status}: {res.read()[:300]!r}")
    lines = []  # (arrival, line): parsed after the stream, so reading keeps up
    for raw in res:
        if raw.startswith(b"data: ") and not raw.startswith(b"data: [DONE]"):
            lines.append((time.monotonic(), raw))
    t_end = time.monotonic()
    conn.close()
    arrivals = []  # (time, tokens so far) per chunk with tokens
    usage_tokens = None
    total = 0
    for t, raw in lines:
        chunk = json.loads(raw[6:])
        if "error" in chunk:
            raise RuntimeError(f"request {index}: {chunk['error']}")
        if chunk.get("usage"):
            usage_tokens = chunk["usage"]["completion_tokens"]
        n = chunk_tokens(chunk, token_ids(cfg))
        if n:
            total += n
            arrivals.append((t, total))
    tokens = usage_tokens if usage_tokens is not None else total
    if not arrivals or tokens < 2:
        raise RuntimeError(f"request {index}: {tokens} tokens streamed")
    if token_ids(cfg) and total != tokens:
        raise RuntimeError(f"request {index}: chunks carried {total} ids, usage says {tokens}")
    first, last = arrivals[0][0], arrivals[-1][0]
    out = {"ttft": first - t0, "tpot": (last - first) / (tokens - 1), "tokens": tokens,
           "start": t0, "end": t_end, "mid": None}
    if token_ids(cfg) and tokens >= 8:
        def arrival_of(k):  # when the k-th token (1-based) arrived
            return next(t for t, n in arrivals if n >= k)
        lo, hi = tokens // 4, (3 * tokens) // 4
        out["mid"] = (arrival_of(hi) - arrival_of(lo)) / (hi - lo)
    return out


def run_clients(url, cfg, clients, requests):
    """One process's share of a level: a thread per client, its requests back to back."""
    results, errors = [], []
    lock = threading.Lock()

    def client(c):
        for r in range(requests):
            try:
                out = one(url, cfg, cfg["index_base"] + c * requests + r)
                with lock:
                    results.append(out)
            except Exception as e:  # reported in the level's line
                with lock:
                    errors.append(str(e))

    threads = [threading.Thread(target=client, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


def pct(values, q):
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)] if s else None


def ms(v):
    return None if v is None else v * 1e3


def level(pool, processes, url, cfg, concurrency, requests):
    """Runs one concurrency level; returns its summary line."""
    shares = [list(range(p, concurrency, processes)) for p in range(processes)]
    futures = [pool.submit(run_clients, url, cfg, s, requests) for s in shares if s]
    results, errors = [], []
    for f in futures:
        r, e = f.result()
        results += r
        errors += e
    wall = (max(r["end"] for r in results) - min(r["start"] for r in results)) if results else 0
    mids = [r["mid"] for r in results if r["mid"] is not None]
    return {
        "concurrency": concurrency, "requests": len(results), "errors": errors[:3],
        "num_errors": len(errors),
        "output_tokens_per_s": sum(r["tokens"] for r in results) / wall if wall else None,
        "ttft_ms_median": ms(statistics.median(r["ttft"] for r in results)) if results else None,
        "ttft_ms_p90": ms(pct([r["ttft"] for r in results], 0.9)),
        "tpot_ms_median": ms(statistics.median(r["tpot"] for r in results)) if results else None,
        "tpot_ms_p90": ms(pct([r["tpot"] for r in results], 0.9)),
        "mid_ms_median": ms(statistics.median(mids)) if mids else None,
        "mid_ms_p90": ms(pct(mids, 0.9)),
    }


def vocab_of(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return int(json.load(f)["vocab_size"])


def make_pool(processes):
    return concurrent.futures.ProcessPoolExecutor(max_workers=processes)


def run_levels(url, cfg, levels, requests, processes, warmup=True, snapshot=None):
    """Every level in turn (after one untimed wave, so start-up costs stay out); a list of the
    summary lines, each printed as it completes. `snapshot`, when given, is called before and
    after each level; the line keeps the level's difference of the two (numbers by key)."""
    out = []
    with make_pool(processes) as pool:
        if warmup:
            w = dict(cfg, max_tokens=min(cfg["max_tokens"], 16), index_base=10**6)
            level(pool, processes, url, w, min(max(levels), 64), 1)
        for i, c in enumerate(levels):
            before = snapshot() if snapshot else None
            line = level(pool, processes, url, dict(cfg, index_base=i * 100_000), c, requests)
            if snapshot:
                after = snapshot()
                line["delta"] = {k: after[k] - before.get(k, 0.0) for k in after}
            print(json.dumps(line), flush=True)
            out.append(line)
    return out


def add_load_args(p):
    p.add_argument("--concurrency", default="1", help="comma-separated levels")
    p.add_argument("--requests", type=int, default=2,
                   help="requests per client, back to back (a level sends concurrency × this)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--prompt-len", type=int, default=0,
                   help="token-id prompts of this length to /v1/completions (0: chat text)")
    p.add_argument("--vocab", type=int, default=0, help="prompt ids below this")
    p.add_argument("--samples", default="",
                   help="a golden.json whose heldout_eval samples are the prompts (token ids)")
    p.add_argument("--seed", type=int, default=0, help="of the prompt ids")
    p.add_argument("--processes", type=int, default=min(8, os.cpu_count() or 1),
                   help="client processes the concurrent streams are spread over")


def load_config(a, model_dir, served_name):
    """What every request of a run shares, from the load arguments."""
    vocab = a.vocab or (vocab_of(model_dir) if model_dir else 0)
    if a.prompt_len and vocab <= 0:
        raise SystemExit("--prompt-len needs --vocab or --model-dir (config.json's vocab_size)")
    samples = []
    if a.samples:
        with open(a.samples) as f:
            samples = [{"prompt_ids": s["prompt_ids"], "target_ids": s["target_ids"]}
                       for s in json.load(f)["heldout_eval"]]
    return {"model": served_name, "max_tokens": a.max_tokens, "prompt_len": a.prompt_len,
            "vocab": vocab, "seed": a.seed, "index_base": 0, "samples": samples}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--model", default="", help="the served model name (default: the server's)")
    p.add_argument("--model-dir", default="", help="config.json's vocab_size bounds the ids")
    add_load_args(p)
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed first wave")
    a = p.parse_args()
    levels = [int(x) for x in a.concurrency.split(",")]
    run_levels(a.url, load_config(a, a.model_dir, a.model), levels, a.requests, a.processes,
               warmup=not a.no_warmup)


if __name__ == "__main__":
    main()
