"""Tokenizer + training + export + golden for the mlaserve demo model (GLM-5 architecture).

    python3 train.py --data DIR --out OUTDIR [--steps N]

DIR holds train.jsonl / heldout.jsonl from generate_data.py. Needs torch, transformers 5.17,
tokenizers, safetensors, jinja2. Trains on one GPU (bf16 autocast), exports bf16 safetensors with
per-expert tensor names, then computes golden greedy outputs with transformers on the CPU in
float32 (eager attention, eager experts) from the exported weights.
"""
import argparse, json, math, os, random, shutil, sys, time

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render  # noqa: E402

PAT_GLM = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
           "<|assistant|>", "<|observation|>"]
PLAIN = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
         "</arg_value>", "<tool_response>", "</tool_response>"]
VOCAB = 3072


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def build_tokenizer(texts):
    tok = Tokenizer(models.BPE(byte_fallback=False, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PAT_GLM), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()

    def corpus():
        for t in texts:
            for s in SPECIAL + PLAIN:  # markers become added tokens: keep them out of the merges
                t = t.replace(s, "\n")
            yield t
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - len(SPECIAL) - len(PLAIN), min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.add_special_tokens(SPECIAL)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in PLAIN])
    return tok


def model_config(vocab, ids):
    return dict(
        vocab_size=vocab, hidden_size=256, intermediate_size=512, moe_intermediate_size=64,
        num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8, n_shared_experts=1,
        n_routed_experts=16, num_experts_per_tok=4, routed_scaling_factor=2.5, kv_lora_rank=64,
        q_lora_rank=128, qk_rope_head_dim=16, v_head_dim=32, qk_nope_head_dim=32, n_group=1,
        topk_group=1, norm_topk_prob=True, first_k_dense_replace=1, max_position_embeddings=2048,
        rms_norm_eps=1e-5, initializer_range=0.02, tie_word_embeddings=False,
        index_n_heads=4, index_head_dim=32, index_topk=256,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=ids["[gMASK]"], eos_token_id=[ids["<|endoftext|>"], ids["<|user|>"], ids["<|observation|>"]],
        pad_token_id=ids["<|endoftext|>"])


def to_checkpoint_names(sd, inter):
    out = {}
    for k, v in sd.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            pre = k[: -len("gate_up_proj")]
            for e in range(v.shape[0]):
                out[f"{pre}{e}.gate_proj.weight"] = v[e, :inter].contiguous()
                out[f"{pre}{e}.up_proj.weight"] = v[e, inter:].contiguous()
        elif k.endswith("mlp.experts.down_proj"):
            pre = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{pre}{e}.down_proj.weight"] = v[e].contiguous()
        else:
            out[k] = v.contiguous()
    return out


def encode_samples(tok, samples):
    prompts = [render.render_sample(s) for s in samples]
    p_ids = [e.ids for e in tok.encode_batch(prompts, add_special_tokens=False)]
    t_ids = [e.ids for e in tok.encode_batch([s["target"] for s in samples], add_special_tokens=False)]
    return prompts, p_ids, t_ids


def make_batch(p_ids, t_ids, idx, pad, device):
    seqs = [p_ids[i] + t_ids[i] for i in idx]
    T = max(len(s) for s in seqs)
    x = torch.full((len(idx), T), pad, dtype=torch.long)
    y = torch.full((len(idx), T), -100, dtype=torch.long)
    for r, i in enumerate(idx):
        s = seqs[r]
        x[r, :len(s)] = torch.tensor(s)
        lp = len(p_ids[i])
        # logits at position j predict token j+1: targets are the completion tokens
        y[r, lp - 1:len(s) - 1] = torch.tensor(t_ids[i])
    return x.to(device), y.to(device)


def begin_run(out_dir, data_dir):
    """Seeds, the output directory and the device of a training run, and its data splits
    (generate_data.py's train.jsonl and heldout.jsonl): (device, train samples, held-out)."""
    random.seed(0)
    torch.manual_seed(0)
    os.makedirs(out_dir, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    log("torch", torch.__version__, "transformers", transformers.__version__, "device", dev)

    def read(name):
        with open(os.path.join(data_dir, name), encoding="utf-8") as f:
            return [json.loads(l) for l in f]
    return dev, read("train.jsonl"), read("heldout.jsonl")


def length_batches(lens, batch, rng):
    """Endless training batches of sample indices: mega-batches of 16 batches from a shuffled
    order, sorted by length (less padding), one batch of each taken at random and the rest put
    back in front of the order."""
    order = []
    while True:
        if len(order) < batch * 16:
            perm = list(range(len(lens)))
            rng.shuffle(perm)
            order += perm
        chunk, order = order[:batch * 16], order[batch * 16:]
        chunk.sort(key=lambda i: lens[i])
        b = rng.randrange(16)
        order = chunk[:b * batch] + chunk[(b + 1) * batch:] + order
        yield chunk[b * batch:(b + 1) * batch]


def adamw_cosine(params, lr, steps, warmup_cap, max_seconds, t0):
    """AdamW with weight decay on matrices only, and its schedule: linear warm-up over
    min(warmup_cap, steps / 10) steps, then cosine to 10 % over max(step fraction, (now - t0) /
    max_seconds), a safety net that keeps the run inside its time budget."""
    params = list(params)
    decay = [p for p in params if p.ndim >= 2]
    nodecay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8)
    warm = max(1, min(warmup_cap, steps // 10))

    def progress(s):
        return min(1.0, max(s / steps, (time.time() - t0) / max_seconds))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress(s)))))
    return opt, sched


@torch.no_grad()
def exact_match(model, p_ids, t_ids, pad, device, bs=64, autocast=False):
    """Greedy exact match by teacher forcing: greedy decoding reproduces the target iff the
    argmax at every target position is the target token."""
    model.eval()
    ok = []
    order = sorted(range(len(p_ids)), key=lambda i: len(p_ids[i]) + len(t_ids[i]))
    res = {}
    for b in range(0, len(order), bs):
        idx = order[b:b + bs]
        x, y = make_batch(p_ids, t_ids, idx, pad, device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=x, use_cache=False).logits
        pred = logits.argmax(-1)
        good = ((pred == y) | (y == -100)).all(dim=1)
        for r, i in enumerate(idx):
            res[i] = bool(good[r])
    return [res[i] for i in range(len(p_ids))]


def by_category(samples, ok):
    cats = {}
    for s, o in zip(samples, ok):
        c = cats.setdefault(s["category"], [0, 0])
        c[0] += int(o)
        c[1] += 1
    out = {k: {"correct": v[0], "total": v[1], "accuracy": round(v[0] / v[1], 4)} for k, v in sorted(cats.items())}
    out["all"] = {"correct": sum(ok), "total": len(ok), "accuracy": round(sum(ok) / len(ok), 4)}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3800)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--max-train-seconds", type=float, default=345.0,
                    help="safety net: the schedule runs on max(step fraction, time fraction) and stops at 1")
    ap.add_argument("--n-golden", type=int, default=20)
    ap.add_argument("--n-eval", type=int, default=100)
    a = ap.parse_args()
    t_start = time.time()
    dev, train, held = begin_run(a.out, a.data)
    tr_text = [render.render_sample(s) + s["target"] for s in train]
    seen_text = set(tr_text)
    n_held = len(held)
    held = [s for s in held if render.render_sample(s) + s["target"] not in seen_text]
    log("held-out samples", n_held, "after dropping those identical to a training sample", len(held))
    tok = build_tokenizer(tr_text)
    ids = {t: tok.token_to_id(t) for t in SPECIAL + PLAIN}
    V = tok.get_vocab_size()
    log("tokenizer vocab", V, "specials", ids)
    tok.save(os.path.join(a.out, "tokenizer.json"))
    pad = ids["<|endoftext|>"]
    eos = [ids["<|endoftext|>"], ids["<|user|>"], ids["<|observation|>"]]

    _, tp, tt = encode_samples(tok, train)
    h_prompts, hp, ht = encode_samples(tok, held)
    lens = [len(p) + len(t) for p, t in zip(tp, tt)]
    log("train samples", len(train), "tokens", sum(lens), "max len", max(lens), "mean", sum(lens) / len(lens))

    cfgd = model_config(V, ids)
    cfg = transformers.GlmMoeDsaConfig(**cfgd)
    model = transformers.GlmMoeDsaForCausalLM(cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    log("params", n_params, "attn", cfg._attn_implementation, "experts", getattr(cfg, "_experts_implementation", None))
    t0 = time.time()
    opt, sched = adamw_cosine(model.parameters(), a.lr, a.steps, 200, a.max_train_seconds, t0)
    batches = length_batches(lens, a.batch, random.Random(0))
    model.train()
    steps_done = 0
    for step in range(a.steps):
        if time.time() - t0 > a.max_train_seconds:
            log("time budget reached at step", step)
            break
        steps_done = step + 1
        idx = next(batches)
        x, y = make_batch(tp, tt, idx, pad, dev)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(dev == "cuda")):
            logits = model(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.float().view(-1, V), y.view(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == a.steps - 1:
            log(f"step {step} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.2e} "
                f"{(time.time() - t0) / (step + 1):.3f}s/step")
    train_s = time.time() - t0
    log("training seconds", round(train_s, 1))

    # Export: bf16 (router bias f32), per-expert names.
    sd = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    ck = {k: (v.to(torch.bfloat16) if "e_score_correction_bias" not in k else v.float())
          for k, v in to_checkpoint_names(sd, cfg.moe_intermediate_size).items()}
    save_file(ck, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
    cfg.architectures = ["GlmMoeDsaForCausalLM"]
    cfg.save_pretrained(a.out)
    for f in ("generation_config.json",):  # written below, ours
        p = os.path.join(a.out, f)
        if os.path.exists(p):
            os.remove(p)
    json.dump({"_from_model_config": False, "bos_token_id": ids["[gMASK]"], "eos_token_id": eos,
               "pad_token_id": pad, "do_sample": False, "temperature": 1.0, "top_p": 0.95},
              open(os.path.join(a.out, "generation_config.json"), "w"), indent=2)
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "[gMASK]", "eos_token": "<|endoftext|>",
               "pad_token": "<|endoftext|>", "add_bos_token": False, "add_eos_token": False,
               "model_max_length": 2048, "chat_template": render.template_source(),
               "stop_tokens": ["<|endoftext|>", "<|user|>", "<|observation|>"]},
              open(os.path.join(a.out, "tokenizer_config.json"), "w"), indent=2, ensure_ascii=False)
    shutil.copy(render.TEMPLATE_PATH, os.path.join(a.out, "chat_template.jinja"))

    # Reload the exported weights in float32, eager attention and experts (the golden setting).
    m32 = transformers.GlmMoeDsaForCausalLM.from_pretrained(
        a.out, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager").eval()
    m_gpu = m32.to(dev)
    ok = exact_match(m_gpu, hp, ht, pad, dev)
    acc = by_category(held, ok)
    log("held-out exact match (exported weights, fp32 eager, teacher-forced greedy):", json.dumps(acc))
    m32 = m_gpu.cpu()

    # Golden: 20 held-out prompts spread over categories, greedy on the CPU in float32.
    cats = ["tool_call", "tool_answer", "arithmetic", "fact", "string", "greeting"]
    picks, seen = [], set()
    want_long = [i for i in range(len(held)) if held[i]["tools"] and len(held[i]["tools"]) == 3]
    for i in want_long[:3]:
        picks.append(i)
        seen.add(i)
    ci = 0
    for i in range(len(held)):
        if len(picks) >= a.n_golden:
            break
        if i in seen:
            continue
        if held[i]["category"] == cats[ci % len(cats)]:
            picks.append(i)
            seen.add(i)
            ci += 1
    golden = []
    t1 = time.time()
    with torch.no_grad():
        for i in picks:
            s = held[i]
            g = m32.generate(input_ids=torch.tensor([hp[i]]), max_new_tokens=64, do_sample=False,
                             use_cache=True, eos_token_id=eos, pad_token_id=pad)
            out = [int(v) for v in g[0, len(hp[i]):]]
            golden.append({"id": s["id"], "category": s["category"], "messages": s["messages"],
                           "tools": s["tools"], "enable_thinking": s["enable_thinking"],
                           "prompt_text": h_prompts[i], "prompt_ids": hp[i], "output_ids": out,
                           "output_text": tok.decode(out, skip_special_tokens=False),
                           "expected_target": s["target"], "matches_target": out == ht[i]})
    log("golden seconds", round(time.time() - t1, 1), "golden matching target",
        sum(g["matches_target"] for g in golden), "/", len(golden),
        "max prompt+output len", max(len(g["prompt_ids"]) + len(g["output_ids"]) for g in golden))
    ev = list(range(a.n_eval))
    heldout_eval = [{"id": held[i]["id"], "category": held[i]["category"], "messages": held[i]["messages"],
                     "tools": held[i]["tools"], "enable_thinking": held[i]["enable_thinking"],
                     "prompt_ids": hp[i], "target_ids": ht[i], "torch_exact": ok[i]} for i in ev]
    info = {
        "transformers": transformers.__version__, "torch": torch.__version__,
        "golden_setting": "transformers GlmMoeDsaForCausalLM from the exported bf16 checkpoint, float32, "
                          "attn_implementation=eager, experts_implementation=eager, CPU, greedy "
                          "(generate do_sample=False, max_new_tokens=64, stop at eos ids)",
        "eos_token_ids": eos, "n_params": n_params, "n_params_checkpoint": sum(v.numel() for v in ck.values()),
        "train_steps": steps_done, "train_steps_planned": a.steps, "batch": a.batch, "train_seconds": round(train_s, 1),
        "train_samples": len(train), "heldout_samples": len(held),
        "heldout_accuracy_torch": acc,
        "heldout_eval_first_n_accuracy_torch": by_category([held[i] for i in ev], [ok[i] for i in ev]),
        "prompts": golden, "heldout_eval": heldout_eval,
    }
    json.dump(info, open(os.path.join(a.out, "golden.json"), "w"), ensure_ascii=False, indent=1)
    for g in golden[:8]:
        log("GOLDEN", g["category"], repr(g["output_text"]))
    log("total seconds", round(time.time() - t_start, 1))


if __name__ == "__main__":
    main()
