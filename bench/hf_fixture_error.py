"""The yardstick for GPU conformance: how far Hugging Face transformers itself, run in bf16 on
the GPU, lands from the float64 goldens of the tiny fixtures (tests/data/*), with the same
measures as tests/conformance/gpu_conformance_test.cc: relative L2 error of the prefill logits
and top-1 agreement on rows whose golden top-two gap exceeds 0.05 x the row's std.

  python3 bench/hf_fixture_error.py [--out FILE]   (GPU machine: torch + transformers)
"""
import argparse
import json

import torch
import transformers
from safetensors.torch import load_file

FIXTURES = ["tiny-glm5", "tiny-dsv32", "tiny-dsv3"]  # bf16 checkpoints


def compare(got, want):
    rel = ((got - want).norm() / want.norm()).item()
    checked = agree = 0
    for g, w in zip(got, want):
        top2 = torch.topk(w, 2).values
        if (top2[0] - top2[1]).item() <= 0.05 * w.std(unbiased=False).item():
            continue
        checked += 1
        agree += int(torch.argmax(g).item() == torch.argmax(w).item())
    return rel, checked, agree


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    results = []
    for name in FIXTURES:
        d = f"tests/data/{name}"
        model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16)
        model = model.cuda().eval()
        gold = load_file(f"{d}/golden.safetensors")
        for i in range(4):
            ids = gold[f"prefill.{i}.input_ids"].long().cuda()[None]
            with torch.no_grad():
                got = model(ids).logits[0].double().cpu()
            rel, checked, agree = compare(got, gold[f"prefill.{i}.logits"].double())
            row = {"fixture": name, "prefill": i, "tokens": ids.shape[1], "rel_err": rel,
                   "top1_checked": checked, "top1_agree": agree}
            print(json.dumps(row), flush=True)
            results.append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                       "rows": results}, f, indent=1)


if __name__ == "__main__":
    main()
