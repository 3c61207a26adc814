"""The multi-token-prediction (MTP) layer of GLM-5 / DeepSeek-V3 in PyTorch, as docs/reference.md
§ "Multi-token prediction (MTP) layers" defines it (transformers has the checkpoint names but no
module: it skips `model.layers.{N}.*` on load).

Given the main model's final-norm output h_i and the token t_{i+1}, at position i:

    e  = enorm(Emb(t_{i+1}))        (zero at position 0, as vLLM and mlaserve do)
    g  = hnorm(h_i)
    h' = DecoderBlock(eh_proj([e ; g]))          the embedding first, then the hidden state
    logits(t_{i+2}) = lm_head(shared_head.norm(h'))

Emb and lm_head are the main model's (shared). The block is transformers' GlmMoeDsaDecoderLayer,
so it computes exactly what the main layers compute (MLA, its own "full" DSA indexer, MoE).
"""
import torch
import torch.nn as nn
from transformers.models.glm_moe_dsa import modeling_glm_moe_dsa as glm


class MtpLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        H = config.hidden_size
        self.enorm = glm.GlmMoeDsaRMSNorm(H, config.rms_norm_eps)
        self.hnorm = glm.GlmMoeDsaRMSNorm(H, config.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * H, H, bias=False)
        # transformers indexes its per-layer type lists (mlp_layer_types, indexer_types) by layer
        # index and has no entry past the main layers: the block is built as the last main layer
        # (MoE, "full" indexer), which is what an MTP layer is (docs/reference.md).
        last = config.num_hidden_layers - 1
        assert config.mlp_layer_types[last] == "sparse" and config.indexer_types[last] == "full"
        self.block = glm.GlmMoeDsaDecoderLayer(config, last)
        self.shared_head_norm = glm.GlmMoeDsaRMSNorm(H, config.rms_norm_eps)

    def forward(self, hidden, next_ids, embed_tokens, rotary_emb):
        """hidden [B, S, H]: h_0..h_{S-1}; next_ids [B, S]: t_1..t_S. Returns the block's output
        h' [B, S, H] (the next depth's hidden input; logits() gives t_2..t_{S+1})."""
        B, S, _ = hidden.shape
        e = self.enorm(embed_tokens(next_ids))
        e = torch.cat([torch.zeros_like(e[:, :1]), e[:, 1:]], dim=1)
        u = self.eh_proj(torch.cat([e, self.hnorm(hidden)], dim=-1))
        pos = torch.arange(S, device=hidden.device)[None].expand(B, -1)
        # cos/sin in the dtype the main model computes them in (from its float embeddings)
        pe = rotary_emb(e, position_ids=pos)
        causal = torch.full((S, S), float("-inf"), device=hidden.device).triu(1)
        out = self.block(u, attention_mask=causal[None, None].expand(B, 1, S, S), position_ids=pos,
                         past_key_values=None, use_cache=False, position_embeddings=pe)
        return out[0] if isinstance(out, tuple) else out

    def logits(self, out, lm_head):
        return lm_head(self.shared_head_norm(out))


def init_from_main(mtp, model):
    """A warm start: the block from the last main layer, shared_head.norm from model.norm, and
    eh_proj passing the hidden half through (the embedding half small and random)."""
    H = mtp.eh_proj.in_features // 2
    with torch.no_grad():
        mtp.block.load_state_dict(model.model.layers[-1].state_dict())
        mtp.shared_head_norm.weight.copy_(model.model.norm.weight)
        w = torch.zeros(H, 2 * H, device=mtp.eh_proj.weight.device)
        w[:, :H].normal_(0.0, 0.02)
        w[:, H:] = torch.eye(H, device=w.device)
        mtp.eh_proj.weight.copy_(w)


def checkpoint_tensors(mtp, layer, moe_inter, to_checkpoint_names):
    """The MTP layer's tensors under real checkpoints' names, `model.layers.{layer}.` + enorm,
    hnorm, eh_proj, shared_head.norm and the decoder layer's names (float32, CPU)."""
    pre = f"model.layers.{layer}."
    sd = {}
    for k, v in mtp.state_dict().items():
        v = v.detach().float().cpu()
        if k.startswith("block."):
            sd[pre + k[len("block."):]] = v
        elif k == "shared_head_norm.weight":
            sd[pre + "shared_head.norm.weight"] = v
        else:
            sd[pre + k] = v
    return to_checkpoint_names(sd, moe_inter)


def load_checkpoint_tensors(mtp, tensors, layer, moe_inter):
    """Inverse of checkpoint_tensors: fills `mtp` from checkpoint tensors (any dtype, converted
    to the module's)."""
    pre = f"model.layers.{layer}."
    sd = {}
    for k, ref in mtp.state_dict().items():
        name = pre + ("shared_head.norm.weight" if k == "shared_head_norm.weight"
                      else k[len("block."):] if k.startswith("block.") else k)
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            v = torch.stack([torch.cat([tensors[f"{base}{e}.gate_proj.weight"],
                                        tensors[f"{base}{e}.up_proj.weight"]]) for e in range(ref.shape[0])])
        elif name.endswith("mlp.experts.down_proj"):
            base = name[: -len("down_proj")]
            v = torch.stack([tensors[f"{base}{e}.down_proj.weight"] for e in range(ref.shape[0])])
        else:
            v = tensors[name]
        assert v.shape == ref.shape, (name, v.shape, ref.shape)
        sd[k] = v.to(ref.dtype)
    mtp.load_state_dict(sd)
    assert moe_inter * 2 == sd["block.mlp.experts.gate_up_proj"].shape[1]
