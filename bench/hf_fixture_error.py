"""The yardstick of GPU conformance (tests/conformance/gpu_conformance_test.cc): how far Hugging
Face transformers itself, run on this GPU in the precision mlaserve uses, lands from the float64
goldens of every fixture (tests/data/*), per row: each prefill (relative L2 error of its
logits) and the teacher-forced decode steps (the golden's continuation fed back one token at a
time through the KV cache; relative L2 error of all step logits), the largest over transformers'
equally valid runs (VARIANTS). The GPU test requires at most 1.25 x these, and at most 2e-2
where transformers is within 2e-2.

Precision: bf16 for bf16 fixtures. For FP8 fixtures transformers' fine-grained FP8 path needs
kernels from the hub (not on the GPU machine), so the run is bf16 over the block-dequantised
weights (128x128 weight_scale_inv) with DeepSeek-style FP8 activations emulated: each such
linear's input quantised per token in groups of 128 to e4m3 (scale = amax / 448) and
dequantised (../shared/GPU-NOTES.md).

  python3 bench/hf_fixture_error.py [--write] [--out FILE]   (GPU machine: torch, transformers)

--write puts tests/data/<fixture>/transformers_error.json beside each fixture (check them in).
"""
import argparse
import collections
import json
import os
import tempfile

import torch
import transformers
from safetensors.torch import load_file, save_file

FIXTURES = ["tiny-glm5", "tiny-glm5-fp8", "tiny-dsv32", "tiny-dsv32-fp8", "tiny-dsv3",
            "tiny-dsv3-fp8"]
FP8_MAX = 448.0


def rel_err(got, want):
    return ((got - want).norm() / want.norm()).item()


def dequantised_state(weights):
    """bf16 weights, FP8 ones multiplied out of their 128x128 block scales; and their names."""
    out, fp8 = {}, set()
    for name, t in weights.items():
        if name.endswith("_scale_inv"):
            continue
        scale = weights.get(name + "_scale_inv")
        if scale is None:
            out[name] = t.to(torch.bfloat16)
            continue
        fp8.add(name)
        n, k = t.shape
        s = scale.float().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
        out[name] = (t.float() * s).to(torch.bfloat16)
    return out, fp8


def quantise_input(module, args):
    """DeepSeek-style dynamic FP8 activations: per token, groups of 128, e4m3, dequantised."""
    (x,) = args
    k = x.shape[-1]
    pad = (-k) % 128
    xf = torch.nn.functional.pad(x.float(), (0, pad)).reshape(*x.shape[:-1], -1, 128)
    scale = (xf.abs().amax(-1, keepdim=True) / FP8_MAX).clamp(min=1e-12)
    q = (xf / scale).to(torch.float8_e4m3fn).float() * scale
    return (q.reshape(*x.shape[:-1], -1)[..., :k].to(x.dtype),)


# The reference semantics: eager attention and eager experts (a loop of per-expert linears).
EAGER = {"attn_implementation": "eager", "experts_implementation": "eager"}

# Equally valid transformers runs in the same precision, differing only in execution order:
# the attention kernel, and the batch a prompt runs in (a batch of two copies: other GEMM
# shapes; on the H200 it gave the single run's figures exactly, kept as a check). Near-tied
# discrete choices (MoE routing, the DSA top-k) fall either way across such runs, so
# transformers' own error on a row is the largest over them (each run's figures are kept in the
# JSON under "variants").
VARIANTS = {"eager": ({}, 1), "eager, batch 2": ({}, 2), "sdpa": ({"attn_implementation": "sdpa"}, 1)}


def load(d, tmp_root, impl):
    config = transformers.AutoConfig.from_pretrained(d)
    if getattr(config, "quantization_config", None) is None:
        model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, **impl)
        return model.cuda().eval(), "bf16", None
    # transformers fuses the checkpoint's per-expert weights at load time, so the dequantised
    # weights go through from_pretrained as a bf16 checkpoint of their own.
    state, fp8_names = dequantised_state(load_file(f"{d}/model.safetensors"))
    plain = os.path.join(tmp_root, os.path.basename(d))
    if not os.path.exists(os.path.join(plain, "model.safetensors")):
        os.makedirs(plain, exist_ok=True)
        save_file(state, os.path.join(plain, "model.safetensors"))
        del config.quantization_config
        config.save_pretrained(plain)
    model = transformers.AutoModelForCausalLM.from_pretrained(plain, dtype=torch.bfloat16, **impl)
    model = model.cuda().eval()
    # A parameter is FP8 when it holds weights of FP8 checkpoint tensors (fused experts
    # included): every linear over it sees e4m3-quantised inputs.
    fp8_params = {}
    for name, p in model.named_parameters():
        prefix = name.rsplit(".", 1)[0]
        fused = any(n.startswith(prefix + ".") and n[len(prefix) + 1:].split(".")[0].isdigit()
                    for n in fp8_names)
        if name in fp8_names or fused:
            fp8_params[p.untyped_storage().data_ptr()] = name
    return model, "bf16, dequantised FP8 weights, emulated FP8 activations", fp8_params


class Fp8Activations:
    """Within the block, F.linear quantises its input when its weight lives in an FP8 parameter
    (nn.Linear and the eager experts' per-expert slices alike); counts the hits per parameter."""

    def __init__(self, fp8_params):
        self.fp8_params, self.hits = fp8_params, collections.Counter()

    def __enter__(self):
        self.orig = torch.nn.functional.linear
        def linear(x, w, b=None):
            name = self.fp8_params.get(w.untyped_storage().data_ptr())
            if name is not None:
                self.hits[name] += 1
                (x,) = quantise_input(None, (x,))
            return self.orig(x, w, b)
        torch.nn.functional.linear = linear
        return self

    def __exit__(self, *exc):
        torch.nn.functional.linear = self.orig


@torch.no_grad()
def measure(name, tmp_root):
    d = f"tests/data/{name}"
    variants, precision = {}, None
    for vname, (override, batch) in VARIANTS.items():
        try:
            model, precision, fp8_params = load(d, tmp_root, {**EAGER, **override})
            with Fp8Activations(fp8_params or {}) as fp8:
                rows = run_rows(model, d, batch)
        except Exception as e:  # a variant transformers does not run for this model
            print(f"{name}: variant {vname!r} does not run: {e}", flush=True)
            continue
        if fp8_params and set(fp8.hits) != set(fp8_params.values()):
            raise SystemExit(f"{d}: FP8 activations not emulated for "
                             f"{sorted(set(fp8_params.values()) - set(fp8.hits))} ({vname})")
        variants[vname] = rows
    if "eager" not in variants:
        raise SystemExit(f"{d}: the eager reference run failed")
    rows = {row: max(v[row] for v in variants.values() if row in v) for row in variants["eager"]}
    return {"transformers": transformers.__version__, "torch": torch.__version__,
            "device": torch.cuda.get_device_name(), "precision": precision, "rows": rows,
            "variants": variants}


def run_rows(model, d, batch):
    gold = load_file(f"{d}/golden.safetensors")
    rows = {}
    for i in range(4):
        ids = gold[f"prefill.{i}.input_ids"].long().cuda()[None].repeat(batch, 1)
        res = model(ids, output_hidden_states=True)
        rows[f"prefill.{i}"] = rel_err(res.logits[0].double().cpu(),
                                       gold[f"prefill.{i}.logits"].double())
        # Layer by layer where the golden has the hidden states (embeddings, each layer's
        # output, the last one after the final norm), to place an excess error at its layer.
        for k, h in enumerate(res.hidden_states):
            want = gold.get(f"prefill.{i}.hidden.{k}")
            if want is not None:
                rows[f"prefill.{i}.hidden.{k}"] = rel_err(h[0].double().cpu(), want.double())
    prompt = gold["generate.prompt_ids"].long().cuda()[None].repeat(batch, 1)
    out = gold["generate.output_ids"].long().tolist()
    res = model(prompt, use_cache=True)
    steps = [res.logits[0, -1]]
    past = res.past_key_values
    for tok in out[:-1]:
        res = model(torch.tensor([[tok]] * batch, device="cuda"), past_key_values=past,
                    use_cache=True)
        past = res.past_key_values
        steps.append(res.logits[0, -1])
    got = torch.stack(steps).double().cpu()
    rows["decode"] = rel_err(got, gold["generate.step_logits"].double().reshape(got.shape))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true",
                    help="write tests/data/<fixture>/transformers_error.json")
    ap.add_argument("--out", help="all fixtures' figures as one JSON file")
    args = ap.parse_args()
    results = {}
    tmp_root = tempfile.mkdtemp(prefix="hf-fixture-error-")
    for name in FIXTURES:
        r = measure(name, tmp_root)
        results[name] = r
        print(json.dumps({"fixture": name, **r}), flush=True)
        if args.write:
            with open(os.path.join("tests/data", name, "transformers_error.json"), "w") as f:
                json.dump(r, f, indent=1)
                f.write("\n")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
