#!/usr/bin/env python3
"""Time per output token of a running OpenAI-compatible server, for machines without Node.js (the
GPU machine): bench/serve_load.mjs measures throughput and TTFT under load where Node.js is.

    python3 bench/serve_tpot.py --url http://127.0.0.1:8000 --model NAME \
        --concurrency 1,8,64 --requests 2 --max-tokens 128

C clients each send --requests streaming chat completions back to back (greedy, ignore_eos,
max_tokens fixed). Per request: TTFT (first content delta) and TPOT = (last delta − first delta)
/ (completion_tokens − 1), completion_tokens from the stream's usage chunk, so a delta carrying
several tokens (speculative decoding) counts them all. One JSON line per concurrency level: the
median and p90 TPOT, median TTFT, and output tokens/s over the level's wall time. Standard
library only.
"""
import argparse
import http.client
import json
import math
import statistics
import threading
import time
import urllib.parse


def one(url, model, max_tokens, i):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = {
        "model": model,
        "messages": [{"role": "user", "content": f"Request {i}: write something."}],
        "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    res = conn.getresponse()
    if res.status != 200:
        raise RuntimeError(f"HTTP {res.status}: {res.read()[:300]!r}")
    first = last = None
    tokens = 0
    for raw in res:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        for c in chunk.get("choices", []):
            if c.get("delta", {}).get("content"):
                now = time.perf_counter()
                first = first if first is not None else now
                last = now
    conn.close()
    if first is None or tokens < 2:
        raise RuntimeError(f"request {i}: {tokens} tokens streamed")
    return {"ttft": first - t0, "tpot": (last - first) / (tokens - 1), "tokens": tokens}


def level(url, model, concurrency, requests, max_tokens):
    results, errors = [], []
    lock = threading.Lock()

    def client(c):
        for r in range(requests):
            try:
                out = one(url, model, max_tokens, c * requests + r)
                with lock:
                    results.append(out)
            except Exception as e:  # reported in the level's line
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    tpot = sorted(r["tpot"] for r in results)
    return {
        "concurrency": concurrency, "requests": len(results), "errors": errors[:3],
        "tpot_ms_median": statistics.median(tpot) * 1e3 if tpot else None,
        "tpot_ms_p90": tpot[math.ceil(0.9 * len(tpot)) - 1] * 1e3 if tpot else None,
        "ttft_ms_median": statistics.median(r["ttft"] for r in results) * 1e3 if results else None,
        "output_tokens_per_s": sum(r["tokens"] for r in results) / wall,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--model", default="")
    p.add_argument("--concurrency", default="1")
    p.add_argument("--requests", type=int, default=2, help="per client")
    p.add_argument("--max-tokens", type=int, default=128)
    a = p.parse_args()
    for c in (int(x) for x in a.concurrency.split(",")):
        print(json.dumps(level(a.url, a.model, c, a.requests, a.max_tokens)), flush=True)


if __name__ == "__main__":
    main()
