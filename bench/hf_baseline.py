#!/usr/bin/env python3
"""Peer baseline: the GLM-5-shaped benchmark model through Hugging Face transformers.

Builds the model of bench/models/glm5-shaped/config.json (FP8 quantization_config removed) with
random bf16 weights directly on the GPU, then times
  - prefill of --prefill-tokens tokens at batch 1 (logits of the last position only, as
    generate() asks for them), and
  - decode steps at each --batches size from a --context-token cache: one prompt is prefilled
    and its cache rows replicated to the batch (transformers' caches hold the fully expanded
    per-head keys and values, so a batch that does not fit is reported as "OOM").
Each figure is the median over --steps timed runs after --warmup untimed ones. Prints one JSON
object and writes it to --out when given. Needs a CUDA GPU with torch and transformers.
"""

import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=os.path.join(HERE, "models/glm5-shaped/config.json"))
    p.add_argument("--prefill-tokens", type=int, default=8192)
    p.add_argument("--context", type=int, default=4096, help="cached tokens before decoding")
    p.add_argument("--batches", default="1,8,64,256", help="comma-separated decode batch sizes")
    p.add_argument("--warmup", type=int, default=3)
    # Decode steps now and then take ~10x the median (the caching allocator growing the
    # concatenated cache): enough steps keep the median on the steady state.
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--attn-implementation", default="sdpa", help="sdpa (default) or eager")
    p.add_argument("--quick", action="store_true", help="--warmup 2 --steps 5")
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args()
    if args.quick:
        args.warmup, args.steps = 2, 5
    args.batches = [int(b) for b in args.batches.split(",") if b]
    return args


def build_config(path, attn_implementation):
    with open(path) as f:
        cfg = json.load(f)
    cfg.pop("quantization_config", None)  # bf16 weights: transformers' FP8 path needs a checkpoint
    model_type = cfg.pop("model_type")
    for key in ("architectures", "transformers_version"):
        cfg.pop(key, None)
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    config._attn_implementation = attn_implementation
    return config


def build_model(config):
    """Random bf16 weights created on the GPU; initialised here rather than by transformers so
    that no parameter is left as uninitialised memory whatever the version's init does."""
    torch.manual_seed(0)
    with torch.device("cuda"):
        try:
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        except TypeError:  # versions before the `dtype` spelling
            model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)  # includes the router, so routing is close to uniform
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.fill_(1.0)  # norm weights
    torch.cuda.synchronize()
    return model


def forward(model, ids, cache, last_only):
    kwargs = {"input_ids": ids, "use_cache": True}
    if cache is not None:
        kwargs["past_key_values"] = cache
    if last_only:
        kwargs["logits_to_keep"] = 1
    return model(**kwargs)


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def free():
    gc.collect()
    torch.cuda.empty_cache()


def one_row(t):
    return torch.is_tensor(t) and t.dim() >= 3 and t.shape[0] == 1


def replicate_rows(obj, batch, depth=0):
    """Replaces every cache tensor of one row ([1, ...], 3+ dims) reachable from `obj` (a cache
    object and its layers, lists and dicts, whichever way this transformers version keeps the
    attention and indexer keys) by `batch` contiguous copies of that row."""
    if depth > 4:
        return obj
    if one_row(obj):
        return obj.expand(batch, *obj.shape[1:]).contiguous()
    if isinstance(obj, (list, tuple)):
        items = [replicate_rows(v, batch, depth + 1) for v in obj]
        return type(obj)(items) if isinstance(obj, tuple) else items
    if isinstance(obj, dict):
        return {k: replicate_rows(v, batch, depth + 1) for k, v in obj.items()}
    if hasattr(obj, "__dict__") and not isinstance(obj, (torch.nn.Module, torch.Tensor, type)):
        for name, value in list(vars(obj).items()):
            setattr(obj, name, replicate_rows(value, batch, depth + 1))
    return obj


def bench_prefill(model, vocab, tokens, warmup, steps):
    ids = torch.randint(0, vocab, (1, tokens), device="cuda")
    times = []
    for i in range(warmup + steps):
        out, dt = timed(lambda: forward(model, ids, None, True))
        del out
        if i >= warmup:
            times.append(dt)
    median = statistics.median(times)
    return {"batch": 1, "tokens": tokens, "median_s": median, "tokens_per_s": tokens / median,
            "runs_s": times}


def bench_decode(model, vocab, batch, context, warmup, steps):
    prompt = torch.randint(0, vocab, (1, context), device="cuda")
    with torch.no_grad():
        out = forward(model, prompt, None, True)
    cache = out.past_key_values
    del out
    cache = replicate_rows(cache, batch)
    # Some versions keep the DSA indexer's keys on the module instead of in the cache.
    for module in model.modules():
        for name, value in list(vars(module).items()):
            if one_row(value):
                setattr(module, name, replicate_rows(value, batch))
    ids = torch.randint(0, vocab, (batch, 1), device="cuda")
    times = []
    for i in range(warmup + steps):
        out, dt = timed(lambda: forward(model, ids, cache, False))
        cache = out.past_key_values
        ids = out.logits[:, -1].argmax(-1, keepdim=True)
        del out
        if i >= warmup:
            times.append(dt)
    median = statistics.median(times)
    # What the last step attended over, read back from the cache: proof that the replicated
    # context is the one the steps used.
    cached = cache.get_seq_length() if hasattr(cache, "get_seq_length") else None
    return {"batch": batch, "context": context, "median_step_ms": median * 1e3,
            "tokens_per_s": batch / median, "steps_ms": [t * 1e3 for t in times],
            "cached_tokens_after": cached, "logits_rows": int(ids.shape[0])}


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        sys.exit("hf_baseline.py: no CUDA device")
    result = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "config": os.path.relpath(args.config),
        "dtype": "bfloat16",
        "attn_implementation": args.attn_implementation,
        "warmup": args.warmup,
        "steps": args.steps,
    }
    t0 = time.perf_counter()
    config = build_config(args.config, args.attn_implementation)
    model = build_model(config)
    result["experts_implementation"] = getattr(config, "_experts_implementation", None)
    result["params"] = sum(p.numel() for p in model.parameters())
    result["build_s"] = time.perf_counter() - t0
    vocab = config.vocab_size

    with torch.no_grad():
        try:
            result["prefill"] = bench_prefill(model, vocab, args.prefill_tokens, args.warmup,
                                              args.steps)
        except torch.cuda.OutOfMemoryError:
            result["prefill"] = {"batch": 1, "tokens": args.prefill_tokens, "error": "OOM"}
        free()

        result["decode"] = []
        oom_at = None
        for batch in args.batches:
            if oom_at is not None and batch > oom_at:
                result["decode"].append({"batch": batch, "context": args.context, "error": "OOM",
                                         "note": f"not run: batch {oom_at} ran out of memory"})
                continue
            try:
                result["decode"].append(bench_decode(model, vocab, batch, args.context,
                                                     args.warmup, args.steps))
            except torch.cuda.OutOfMemoryError:
                oom_at = batch
                result["decode"].append({"batch": batch, "context": args.context,
                                         "error": "OOM"})
            free()
    result["total_s"] = time.perf_counter() - t0

    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
