"""Train the demo model's MTP layer (mtp.py) with the main model frozen, export it, and write its
golden.

    python3 train_mtp.py --data DIR --model MODELDIR --out OUTDIR

MODELDIR is the trained main model (models/demo-glm5 without an MTP layer); DIR holds
train.jsonl / heldout.jsonl from generate_data.py. Loss (DeepSeek-V3's MTP loss, depth 1): the
cross-entropy of the MTP layer's prediction of t_{i+2} from (h_i, t_{i+1}), h_i the frozen main
model's final-norm output, on the main training's target tokens. Writes to OUTDIR:
model.safetensors (every main tensor bitwise the MODELDIR one, checked, plus the MTP layer as
`model.layers.{N}.*` in bf16, router bias f32, and the copies of the embedding and head real
checkpoints carry), config.json (+ num_nextn_predict_layers 1) and mtp_golden.json (MTP logits of
held-out chats in float32 on the CPU from the exported weights).
"""
import argparse, json, multiprocessing, os, random, sys, time

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mtp as mtp_mod  # noqa: E402
import render  # noqa: E402
import train  # noqa: E402

log = train.log


def render_all(samples):
    with multiprocessing.Pool(min(16, os.cpu_count() or 1)) as pool:
        return pool.map(render.render_sample, samples, chunksize=512)


def encode(tok, prompts, samples):
    p = [e.ids for e in tok.encode_batch(prompts, add_special_tokens=False)]
    t = [e.ids for e in tok.encode_batch([s["target"] for s in samples], add_special_tokens=False)]
    return p, t


def mtp_logits(model, mtp, x):
    """MTP logits at positions 0..S-2 of x (predicting x[:, 2:] and one past the end)."""
    h = model.model(input_ids=x, use_cache=False).last_hidden_state
    out = mtp(h[:, :-1], x[:, 1:], model.model.embed_tokens, model.model.rotary_emb)
    return mtp.logits(out, model.lm_head), model.lm_head(h)


@torch.no_grad()
def acceptance(model, mtp, p_ids, t_ids, pad, dev, bs=64):
    """Teacher-forced k = 1 acceptance on the target tokens: the MTP argmax at position i equals
    the main model's argmax at position i+1 (both predict t_{i+2} from the true prefix), and the
    MTP top-1 accuracy against the data's t_{i+2}."""
    agree = right = n = 0
    for b in range(0, len(p_ids), bs):
        idx = list(range(b, min(b + bs, len(p_ids))))
        x, y = train.make_batch(p_ids, t_ids, idx, pad, dev)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(dev == "cuda")):
            ml, tl = mtp_logits(model, mtp, x)
        ym = y[:, 1:]
        m = ym != -100
        pm = ml.argmax(-1)
        agree += int(((pm == tl[:, 1:].argmax(-1)) & m).sum())
        right += int(((pm == ym) & m).sum())
        n += int(m.sum())
    return agree / n, right / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--max-train-seconds", type=float, default=120.0,
                    help="safety net: the schedule runs on max(step fraction, time fraction) and stops at 1")
    ap.add_argument("--n-golden", type=int, default=3)
    a = ap.parse_args()
    t_start = time.time()
    dev, train_s, held = train.begin_run(a.out, a.data)
    tr_prompts = render_all(train_s)
    seen = {p + s["target"] for p, s in zip(tr_prompts, train_s)}
    h_prompts = render_all(held)
    keep = [i for i, s in enumerate(held) if h_prompts[i] + s["target"] not in seen]
    held, h_prompts = [held[i] for i in keep], [h_prompts[i] for i in keep]
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    pad = tok.token_to_id("<|endoftext|>")
    tp, tt = encode(tok, tr_prompts, train_s)
    hp, ht = encode(tok, h_prompts, held)
    lens = [len(p) + len(t) for p, t in zip(tp, tt)]
    log("train samples", len(train_s), "held-out", len(held), "data seconds", round(time.time() - t_start, 1))

    # The frozen main model, as transformers trained it (sdpa would see our 4-D float mask too,
    # but eager attention takes it as the reference defines it).
    model = transformers.GlmMoeDsaForCausalLM.from_pretrained(
        a.model, dtype=torch.float32, attn_implementation="eager").to(dev).eval()
    model.requires_grad_(False)
    cfg = model.config
    N, V = cfg.num_hidden_layers, cfg.vocab_size
    mtp = mtp_mod.MtpLayer(cfg).to(dev)
    mtp_mod.init_from_main(mtp, model)
    n_params = sum(p.numel() for p in mtp.parameters())
    log("MTP layer params", n_params)
    acc0 = acceptance(model, mtp, hp[:500], ht[:500], pad, dev)
    log(f"before training: held-out (500) teacher-forced k=1 acceptance {acc0[0]:.4f}, top-1 {acc0[1]:.4f}")

    t0 = time.time()
    opt, sched = train.adamw_cosine(mtp.parameters(), a.lr, a.steps, 100, a.max_train_seconds, t0)
    batches = train.length_batches(lens, a.batch, random.Random(0))
    mtp.train()
    steps_done, ema = 0, None
    for step in range(a.steps):
        if time.time() - t0 > a.max_train_seconds:
            log("time budget reached at step", step)
            break
        steps_done = step + 1
        idx = next(batches)
        x, y = train.make_batch(tp, tt, idx, pad, dev)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(dev == "cuda")):
            with torch.no_grad():
                h = model.model(input_ids=x, use_cache=False).last_hidden_state
            out = mtp(h[:, :-1], x[:, 1:], model.model.embed_tokens, model.model.rotary_emb)
            logits = mtp.logits(out, model.lm_head)
        # position i predicts t_{i+2}: the main target of position i+1
        loss = F.cross_entropy(logits.float().reshape(-1, V), y[:, 1:].reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(mtp.parameters(), 1.0)
        opt.step()
        sched.step()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if step % 100 == 0 or step == a.steps - 1:
            log(f"step {step} loss {loss.item():.4f} ema {ema:.4f} lr {sched.get_last_lr()[0]:.2e} "
                f"{(time.time() - t0) / (step + 1):.3f}s/step")
    train_secs = time.time() - t0
    log("training seconds", round(train_secs, 1), "steps", steps_done, "final loss ema", round(ema, 4))
    mtp.eval()
    acc = acceptance(model, mtp, hp, ht, pad, dev)
    acc100 = acceptance(model, mtp, hp[:100], ht[:100], pad, dev)
    log(f"held-out ({len(hp)}) teacher-forced k=1 acceptance {acc[0]:.4f}, top-1 {acc[1]:.4f}; "
        f"first 100: {acc100[0]:.4f}, {acc100[1]:.4f}")

    # Export: the main tensors copied as stored, the MTP layer in bf16 (router bias f32) and the
    # embedding and head copies real checkpoints carry under the MTP layer's prefix.
    main_t = load_file(os.path.join(a.model, "model.safetensors"))
    assert not any(k.startswith(f"model.layers.{N}.") for k in main_t), "MODELDIR already has an MTP layer"
    new_t = dict(main_t)
    for k, v in mtp_mod.checkpoint_tensors(mtp, N, cfg.moe_intermediate_size, train.to_checkpoint_names).items():
        new_t[k] = v if "e_score_correction_bias" in k else v.to(torch.bfloat16)
    new_t[f"model.layers.{N}.embed_tokens.weight"] = main_t["model.embed_tokens.weight"].clone()
    new_t[f"model.layers.{N}.shared_head.head.weight"] = main_t["lm_head.weight"].clone()
    save_file(new_t, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
    back = load_file(os.path.join(a.out, "model.safetensors"))
    for k, v in main_t.items():
        w = back[k]
        assert w.dtype == v.dtype and w.shape == v.shape and torch.equal(
            w.contiguous().view(torch.uint8), v.contiguous().view(torch.uint8)), k
    extra = sorted(set(back) - set(main_t))
    assert all(k.startswith(f"model.layers.{N}.") for k in extra)
    log(f"export: {len(main_t)} main tensors bitwise equal to {a.model}'s; {len(extra)} MTP tensors, "
        f"{sum(back[k].numel() for k in extra)} elements")
    conf = json.load(open(os.path.join(a.model, "config.json")))
    conf["num_nextn_predict_layers"] = 1
    with open(os.path.join(a.out, "config.json"), "w") as f:
        f.write(json.dumps(conf, indent=2, sort_keys=True) + "\n")

    # Golden: float32 on the CPU, eager attention and experts, main model from MODELDIR (bitwise
    # the exported main tensors), the MTP layer read back from the exported file.
    m32 = transformers.GlmMoeDsaForCausalLM.from_pretrained(
        a.model, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager").eval()
    mtp32 = mtp_mod.MtpLayer(m32.config).eval()
    mtp_mod.load_checkpoint_tensors(mtp32, back, N, cfg.moe_intermediate_size)
    picks = []
    for want in ("tool_call", "string"):
        picks.append(next(i for i in range(100) if held[i]["category"] == want))
    picks.append(max(range(len(held)), key=lambda i: len(hp[i]) + len(ht[i])))
    golden = []
    with torch.no_grad():
        for i in picks[:a.n_golden]:
            seq = hp[i] + ht[i]
            ml, tl = mtp_logits(m32, mtp32, torch.tensor([seq]))
            ml = ml[0]
            S = ml.shape[0]
            pos = sorted({0, len(hp[i]) - 2, len(hp[i]), S // 2, S - 2, S - 1})
            golden.append({"id": held[i]["id"], "category": held[i]["category"], "token_ids": seq,
                           "prompt_len": len(hp[i]), "argmax": ml.argmax(-1).tolist(),
                           "positions": pos, "logits": [[float(f"{v:.7g}") for v in ml[p].tolist()] for p in pos],
                           "main_logits": [[float(f"{v:.7g}") for v in tl[0, p].tolist()] for p in pos]})
            log("golden", held[i]["category"], "tokens", len(seq), "MTP argmax == main argmax at i+1:",
                int((ml[:-1].argmax(-1) == tl[0, 1:-1].argmax(-1)).sum()), "/", S - 1)
    json.dump({"setting": "mtp.py MtpLayer + transformers GlmMoeDsaForCausalLM, float32, CPU, eager attention "
                          "and experts; main weights from the bundled checkpoint, MTP layer read back from "
                          "the exported bf16 tensors. Row i of a sequence = MTP layer 1 at position i on "
                          "(final-norm h_i, token_ids[i+1]): logits of token i+2.",
               "transformers": transformers.__version__, "torch": torch.__version__,
               "train_steps": steps_done, "train_seconds": round(train_secs, 1), "final_loss_ema": round(ema, 4),
               "heldout_teacher_forced_acceptance": round(acc[0], 4), "heldout_mtp_top1": round(acc[1], 4),
               "sequences": golden},
              open(os.path.join(a.out, "mtp_golden.json"), "w"), separators=(",", ":"))
    log("total seconds", round(time.time() - t_start, 1))


if __name__ == "__main__":
    main()
