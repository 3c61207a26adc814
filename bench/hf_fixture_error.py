"""The yardstick of GPU conformance (tests/conformance/gpu_conformance_test.cc): how far Hugging
Face transformers itself, run on this GPU in the precision mlaserve uses, lands from the float64
goldens of every fixture (tests/data/*), per row: each prefill (relative L2 error of its
logits) and the teacher-forced decode steps (the golden's continuation fed back one token at a
time through the KV cache; relative L2 error of all step logits). The GPU test requires at most
1.25 x these, and at most 2e-2 where transformers is within 2e-2.

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


def load(d, tmp_root):
    config = transformers.AutoConfig.from_pretrained(d)
    if getattr(config, "quantization_config", None) is None:
        model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, **EAGER)
        return model.cuda().eval(), "bf16", None
    # transformers fuses the checkpoint's per-expert weights at load time, so the dequantised
    # weights go through from_pretrained as a bf16 checkpoint of their own.
    state, fp8_names = dequantised_state(load_file(f"{d}/model.safetensors"))
    plain = os.path.join(tmp_root, os.path.basename(d))
    os.makedirs(plain, exist_ok=True)
    save_file(state, os.path.join(plain, "model.safetensors"))
    del config.quantization_config
    config.save_pretrained(plain)
    model = transformers.AutoModelForCausalLM.from_pretrained(plain, dtype=torch.bfloat16, **EAGER)
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
    model, precision, fp8_params = load(d, tmp_root)
    with Fp8Activations(fp8_params or {}) as fp8:
        rows = run_rows(model, d)
    if fp8_params and set(fp8.hits) != set(fp8_params.values()):
        raise SystemExit(f"{d}: FP8 activations not emulated for "
                         f"{sorted(set(fp8_params.values()) - set(fp8.hits))}")
    return {"transformers": transformers.__version__, "torch": torch.__version__,
            "device": torch.cuda.get_device_name(), "precision": precision, "rows": rows}


def run_rows(model, d):
    gold = load_file(f"{d}/golden.safetensors")
    rows = {}
    for i in range(4):
        ids = gold[f"prefill.{i}.input_ids"].long().cuda()[None]
        got = model(ids).logits[0].double().cpu()
        rows[f"prefill.{i}"] = rel_err(got, gold[f"prefill.{i}.logits"].double())
    prompt = gold["generate.prompt_ids"].long().cuda()[None]
    out = gold["generate.output_ids"].long().tolist()
    res = model(prompt, use_cache=True)
    steps = [res.logits[0, -1]]
    past = res.past_key_values
    for tok in out[:-1]:
        res = model(torch.tensor([[tok]], device="cuda"), past_key_values=past, use_cache=True)
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
