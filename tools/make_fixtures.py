#!/usr/bin/env python3
"""Write tiny random-weight transformers parity fixtures for replayssm.

For every supported architecture (nemotron_h, qwen3_next, qwen3_5 text-only,
qwen3_5_moe text-only, mamba2, kimi_linear) this builds a tiny float32 model with
transformers, re-randomises every parameter (norm weights, dt_bias, D, A_log,
router correction bias, conv weights included) so that a wrong formula cannot
pass, saves it with save_pretrained, reloads it, and records reference
outputs of the reloaded model:

  <out>/<name>/config.json, model.safetensors, generation_config.json
  <out>/<name>/reference.safetensors   (see TENSORS below)
  <out>/<name>/reference.json          (metadata, seeds, versions, checks)

Everything runs on the CPU in float32 with eager attention and the pure-PyTorch
reference paths of transformers (no fla / mamba_ssm / causal_conv1d kernels).

Self-consistency checks (printed PASS/FAIL per model):
  * the saved checkpoint reloads to the same parameters and logits;
  * greedy tokens from generate() (through the model's cache) equal an argmax
    loop over full forwards without cache;
  * logits of prefill + one-token decode steps through the cache equal the
    full-forward logits.

Usage (on the device machine):
  cd tools && PYTHONUNBUFFERED=1 python3 make_fixtures.py --out /tmp/fx
"""

import argparse
import hashlib
import importlib
import importlib.util
import inspect
import json
import math
import os
import platform
import shutil
import sys
import time
import traceback

import torch
import torch.nn.functional as F
from torch import nn

torch.set_grad_enabled(False)

VOCAB = 384
HIDDEN = 64
N_NEW = 32
# prompt 0 is the main one; lengths chosen so that Mamba chunked prefill
# (chunk_size 16) crosses chunk boundaries and the GDN chunked prefill
# (fixed chunk 64 in transformers) crosses one with the 70-token prompt.
PROMPT_LENS = [33, 1, 7, 17, 70]
PROMPT_SEED = 20240601

TENSORS = {
    "prompt.<i>.ids": "int64 [L_i]: prompt token ids (uniform random over the vocab, seed prompt_seed)",
    "prompt.<i>.logits": "float32 [L_i, vocab]: logits of one full forward over the prompt (no cache)",
    "prompt.0.hidden": "float32 [n_layers+1, L_0, hidden]: residual stream of the full forward over prompt 0 "
    "(forward hooks): [0] = embedding output, [l+1] = output of decoder layer l (after its residual adds)",
    "prompt.0.final_norm": "float32 [L_0, hidden]: output of the final norm (the lm_head input) for prompt 0",
    "greedy.<i>.ids": "int64 [32]: greedy continuation from generate(do_sample=False) through the model's cache",
    "greedy.<i>.logits": "float32 [32, vocab]: logits that produced each greedy token, from one full forward "
    "(no cache) over prompt + greedy[:-1] (positions L_i-1 .. L_i+30); row 0 equals prompt.<i>.logits[-1]",
    "greedy.<i>.cache_logits": "(only if cache path and full forward disagree by > 1e-4 rel) float32 [32, vocab]: the same "
    "logits through prefill + one-token decode with the cache",
    "greedy.<i>.argmax_ids": "(only if different from greedy.<i>.ids) int64 [32]: argmax loop over full forwards",
}


# ----------------------------------------------------------------------------
# small helpers


def log(*a):
    print(*a, flush=True)


def get_cls(names, arch):
    import transformers

    for n in names:
        c = getattr(transformers, n, None)
        if c is not None:
            return c
    for mod in ("transformers.models.%s" % arch,
                "transformers.models.%s.modeling_%s" % (arch, arch),
                "transformers.models.%s.configuration_%s" % (arch, arch)):
        try:
            m = importlib.import_module(mod)
        except Exception:  # noqa: BLE001
            continue
        for n in names:
            c = getattr(m, n, None)
            if c is not None:
                return c
    raise ImportError("none of %s in transformers %s" % (names, transformers.__version__))


def inv_softplus(y):
    return y + torch.log(-torch.expm1(-y))


def loguniform(g, n, lo, hi):
    u = torch.rand(n, generator=g, dtype=torch.float64)
    return torch.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))).float()


def uniform(g, n, lo, hi):
    return (lo + (hi - lo) * torch.rand(n, generator=g, dtype=torch.float64)).float()


def normal(g, shape, mean, std):
    return (mean + std * torch.randn(shape, generator=g, dtype=torch.float64)).float()


def rel_err(a, b):
    a = a.double()
    b = b.double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def sanitize(x):
    """JSON-safe copy: NaN/inf floats become null (Go's encoding/json rejects them)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: sanitize(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [sanitize(v) for v in x]
    return x


def make_config(cls, kw):
    """Build a config, dropping keys the class refuses (printed)."""
    kw = dict(kw)
    for _ in range(len(kw) + 1):
        try:
            return cls(**kw)
        except TypeError as e:
            msg = str(e)
            bad = [k for k in kw if ("'%s'" % k) in msg]
            if not bad:
                raise
            for k in bad:
                log("  config %s refused %s=%r (%s); dropping it" % (cls.__name__, k, kw[k], msg))
                kw.pop(k)
    raise RuntimeError("could not build config")


def force_eager_experts(model):
    for fn in ("set_experts_implementation",):
        f = getattr(model, fn, None)
        if f is not None:
            try:
                f("eager")
            except Exception as e:  # noqa: BLE001
                log("  %s('eager') failed: %s" % (fn, e))
    cfg = model.config
    for attr in ("_experts_implementation", "experts_implementation"):
        if hasattr(cfg, attr):
            try:
                setattr(cfg, attr, "eager")
            except Exception:  # noqa: BLE001
                pass


def build_model(cls, cfg):
    try:
        m = cls._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    except TypeError:
        m = cls._from_config(cfg, attn_implementation="eager", torch_dtype=torch.float32)
    m = m.float().eval()
    force_eager_experts(m)
    return m


def load_model(cls, path):
    kw = dict(attn_implementation="eager")
    try:
        m = cls.from_pretrained(path, dtype=torch.float32, **kw)
    except TypeError:
        m = cls.from_pretrained(path, torch_dtype=torch.float32, **kw)
    m = m.float().eval()
    force_eager_experts(m)
    return m


def gen_config(**extra):
    from transformers import GenerationConfig

    return GenerationConfig(
        do_sample=False,
        num_beams=1,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        **extra,
    )


# ----------------------------------------------------------------------------
# architectures


def rope(theta, partial, mrope=None):
    d = {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": partial}
    if mrope is not None:
        d["mrope_section"] = list(mrope)
        d["mrope_interleaved"] = True
    return d


def arch_specs():
    """name -> spec. 'dt' is the (lo, hi) range of softplus(dt_bias)."""
    no_special = dict(pad_token_id=None, bos_token_id=None, eos_token_id=None)
    specs = {}

    specs["nemotron_h"] = dict(
        arch="nemotron_h",
        cls=("NemotronHForCausalLM",),
        cfg_cls=("NemotronHConfig",),
        seed=1000,
        dt=(0.002, 0.2),
        cfg=dict(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            hybrid_override_pattern="MEM*M-ME",
            tie_word_embeddings=False,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            max_position_embeddings=4096,
            attention_bias=False,
            intermediate_size=192,
            mlp_hidden_act="relu2",
            mlp_bias=False,
            use_mamba_kernels=False,
            ssm_state_size=16,
            mamba_num_heads=8,
            mamba_head_dim=16,
            n_groups=2,
            conv_kernel=4,
            expand=2,
            chunk_size=16,
            # time_step_min is the clamp floor of Δ in the torch path: set high so
            # that a third of the Δ values are clamped and the clamp matters.
            time_step_min=0.02,
            time_step_max=0.2,
            use_conv_bias=True,
            use_bias=False,
            mamba_proj_bias=False,
            n_routed_experts=8,
            n_shared_experts=1,
            moe_intermediate_size=64,
            moe_shared_expert_intermediate_size=96,
            moe_latent_size=32,
            num_experts_per_tok=2,
            routed_scaling_factor=2.5,
            n_group=1,
            topk_group=1,
            norm_topk_prob=True,
            layer_norm_epsilon=1e-5,
            residual_in_fp32=False,
            **no_special,
        ),
        summary="pattern MEM*M-ME (4 Mamba-2, 2 MoE, 1 attention, 1 relu2 MLP), hidden 64, vocab 384; "
        "Mamba H8 P16 N16 G2 K4 chunk16; attn 4q/2kv hd32 no RoPE; MoE 8 experts top2 latent32 "
        "expert64 shared96 sigmoid+bias scale2.5; MLP 192",
    )

    specs["qwen3_next"] = dict(
        arch="qwen3_next",
        cls=("Qwen3NextForCausalLM",),
        cfg_cls=("Qwen3NextConfig",),
        seed=2000,
        dt=(0.005, 0.1),
        cfg=dict(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=128,
            num_hidden_layers=6,
            layer_types=[
                "linear_attention",
                "linear_attention",
                "full_attention",
                "linear_attention",
                "linear_attention",
                "full_attention",
            ],
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            hidden_act="silu",
            max_position_embeddings=4096,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters=rope(10000000.0, 0.25),
            partial_rotary_factor=0.25,
            attention_bias=False,
            linear_conv_kernel_dim=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            decoder_sparse_step=1,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=64,
            num_experts_per_tok=2,
            num_experts=8,
            norm_topk_prob=True,
            mlp_only_layers=[2, 4],
            **no_special,
        ),
        expect_rotary=8,
        summary="6 layers [GDN,GDN,attn,GDN,GDN,attn], dense SwiGLU MLP (128) on layers 2,4 (mlp_only_layers), "
        "MoE elsewhere (8 experts top2 softmax renorm, expert 32, shared 64 with sigmoid gate); hidden 64, "
        "vocab 384; GDN Hk2 Hv4 dk16 dv16 K4; attn 4q/2kv hd32 gated, partial RoPE 8 dims theta 1e7",
    )

    specs["qwen3_5"] = dict(
        arch="qwen3_5",
        cls=("Qwen3_5ForCausalLM",),
        cfg_cls=("Qwen3_5TextConfig",),
        seed=3000,
        dt=(0.005, 0.1),
        cfg=dict(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=160,
            num_hidden_layers=8,
            layer_types=["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"],
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
            hidden_act="silu",
            max_position_embeddings=4096,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            rope_parameters=rope(10000000.0, 0.25, mrope=(3, 3, 2)),
            partial_rotary_factor=0.25,
            attention_bias=False,
            linear_conv_kernel_dim=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            **no_special,
        ),
        expect_rotary=16,
        summary="8 layers (GDN x3, attn) x2, dense SwiGLU 160, hidden 64, vocab 384, TIED embeddings; "
        "GDN Hk2 Hv4 dk16 dv16 K4; attn 4q/2kv hd64 gated, partial RoPE 16 dims theta 1e7, "
        "mrope_section [3,3,2] interleaved (text-only: plain RoPE)",
    )

    specs["qwen3_5_moe"] = dict(
        arch="qwen3_5_moe",
        cls=("Qwen3_5MoeForCausalLM",),
        cfg_cls=("Qwen3_5MoeTextConfig",),
        seed=4000,
        dt=(0.005, 0.1),
        cfg=dict(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            num_hidden_layers=4,
            layer_types=["linear_attention"] * 3 + ["full_attention"],
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
            hidden_act="silu",
            max_position_embeddings=4096,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters=rope(10000000.0, 0.25, mrope=(3, 3, 2)),
            partial_rotary_factor=0.25,
            attention_bias=False,
            linear_conv_kernel_dim=4,
            linear_key_head_dim=16,
            linear_value_head_dim=32,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=64,
            num_experts_per_tok=2,
            num_experts=8,
            **no_special,
        ),
        expect_rotary=16,
        summary="4 layers [GDN,GDN,GDN,attn], every layer MoE (8 experts top2 softmax renorm, expert 32, "
        "shared 64 with sigmoid gate); hidden 64, vocab 384; GDN Hk2 Hv4 dk16 dv32 (dk != dv on purpose) K4; "
        "attn 4q/2kv hd64 gated, partial RoPE 16 dims theta 1e7, mrope [3,3,2]",
    )

    specs["mamba2"] = dict(
        arch="mamba2",
        cls=("Mamba2ForCausalLM",),
        cfg_cls=("Mamba2Config",),
        seed=5000,
        dt=(0.001, 0.1),
        cfg=dict(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            num_hidden_layers=6,
            num_heads=8,
            head_dim=16,
            state_size=32,
            expand=2,
            n_groups=2,
            conv_kernel=4,
            chunk_size=16,
            use_bias=False,
            use_conv_bias=True,
            hidden_act="silu",
            layer_norm_epsilon=1e-5,
            rms_norm=True,
            residual_in_fp32=True,
            time_step_min=0.001,
            time_step_max=0.1,
            time_step_limit=(0.0, float("inf")),
            tie_word_embeddings=True,
            **no_special,
        ),
        summary="6 Mamba-2 layers, hidden 64, vocab 384, TIED embeddings; H8 P16 N32 (N != P on purpose) "
        "G2 K4 chunk16; gated norm over all of I (no groups)",
    )

    # Kimi-Linear: written in the checkpoint's own spelling (linear_attn_config
    # with 1-based kda_layers / full_attn_layers, num_experts, moe_renormalize,
    # ...), which the config class must read since it loads the hub configs.
    # Odd head counts (3 KDA heads, 3 MLA heads), qk_nope != v_head_dim, a
    # rope part that Kimi leaves unrotated (mla_use_nope), a dense first
    # layer, and forget gates far from 1: softplus(f + dt_bias) in
    # [0.05, 2] with A in [1, 16] gives per-channel decays exp(g) from e^-32
    # to 0.95.
    specs["kimi_linear"] = dict(
        arch="kimi_linear",
        cls=("KimiLinearForCausalLM",),
        cfg_cls=("KimiLinearConfig",),
        seed=6000,
        dt=(0.05, 2.0),
        cfg=dict(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=96,
            moe_intermediate_size=32,
            num_hidden_layers=5,
            num_attention_heads=3,
            num_key_value_heads=3,
            q_lora_rank=None,
            kv_lora_rank=24,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=12,
            mla_use_nope=True,
            linear_attn_config={
                "head_dim": 16,
                "num_heads": 3,
                "short_conv_kernel_size": 4,
                "kda_layers": [1, 2, 4],
                "full_attn_layers": [3, 5],
            },
            num_experts=8,
            num_experts_per_token=2,
            num_shared_experts=1,
            moe_router_activation_func="sigmoid",
            moe_renormalize=True,
            routed_scaling_factor=2.446,
            use_grouped_topk=True,
            num_expert_group=1,
            topk_group=1,
            first_k_dense_replace=1,
            moe_layer_freq=1,
            hidden_act="silu",
            rms_norm_eps=1e-5,
            model_max_length=4096,
            tie_word_embeddings=False,
            **no_special,
        ),
        summary="5 layers [KDA,KDA,MLA,KDA,MLA], dense SwiGLU 96 on layer 0, MoE elsewhere (8 experts top2 "
        "sigmoid+correction bias renorm scale 2.446, expert 32, one shared expert); hidden 64, vocab 384; "
        "KDA 3 heads dk=dv=16 K4, low-rank gates (rank 16), decays from e^-32 to 0.95; MLA 3 heads, "
        "kv_lora_rank 24, qk_nope 16, qk_rope 8 (unrotated: NoPE), v 12, no q LoRA",
    )
    return specs


# ----------------------------------------------------------------------------
# randomisation


def is_zero_centred_norm(cls_name):
    return "Qwen" in cls_name and "RMSNorm" in cls_name and "Gated" not in cls_name


def randomise(model, spec, seed):
    g = torch.Generator().manual_seed(seed)
    notes = []
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    try:
        same = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    except Exception:  # noqa: BLE001
        same = None
    notes.append("tie_word_embeddings=%s, lm_head shares the embedding tensor: %s" % (tied, same))
    if tied and not same:
        notes.append("WARNING: config says tied but lm_head is a separate tensor")
    for name, p in model.named_parameters():
        owner_name, leaf = name.rsplit(".", 1) if "." in name else ("", name)
        owner = model.get_submodule(owner_name) if owner_name else model
        oc = type(owner).__name__
        shape = tuple(p.shape)
        n = p.numel()
        if leaf == "A_log":
            val = torch.log(uniform(g, n, 1.0, 16.0)).view(shape)
            kind = "A_log=log(U(1,16))"
        elif leaf == "dt_bias":
            lo, hi = spec["dt"]
            val = inv_softplus(loguniform(g, n, lo, hi)).view(shape)
            kind = "dt_bias=softplus^-1(logU(%g,%g))" % (lo, hi)
        elif leaf == "D":
            val = normal(g, shape, 1.0, 0.5)
            kind = "D~N(1,0.5)"
        elif "Norm" in oc and leaf == "weight":
            zc = is_zero_centred_norm(oc)
            init_mean = float(p.float().mean())
            if zc and abs(init_mean) > 1e-6 or (not zc) and abs(init_mean - 1) > 1e-6:
                notes.append("WARNING: %s (%s) init mean %.4f does not match zero_centred=%s" % (name, oc, init_mean, zc))
            val = normal(g, shape, 0.0 if zc else 1.0, 0.3)
            kind = "%s~N(%d,0.3) (%s)" % ("w" if not zc else "w(1+w form)", 0 if zc else 1, oc)
        elif isinstance(owner, nn.Conv1d):
            val = normal(g, shape, 0.0, 0.5 if leaf == "weight" else 0.2)
            kind = "conv %s" % leaf
        elif isinstance(owner, nn.Embedding):
            val = normal(g, shape, 0.0, 0.5 if tied else 1.0)
            kind = "embedding"
        elif leaf == "bias":
            val = normal(g, shape, 0.0, 0.1)
            kind = "bias"
        elif p.dim() >= 2:
            gain = 2.0 if name.endswith("lm_head.weight") else 1.0
            val = normal(g, shape, 0.0, gain / math.sqrt(shape[-1]))
            kind = "matrix"
        else:
            val = normal(g, shape, 0.0, 0.1)
            kind = "UNMATCHED 1-D"
            notes.append("WARNING: unmatched parameter %s %s (%s)" % (name, shape, oc))
        p.copy_(val.to(p.dtype))
        notes.append("  %-60s %-16s %s" % (name, str(list(shape)), kind))
    for name, b in model.named_buffers():
        if name.endswith("e_score_correction_bias"):
            b.copy_(normal(g, tuple(b.shape), 0.0, 0.1).to(b.dtype))
            notes.append("  %-60s %-16s router correction bias~N(0,0.1) (buffer)" % (name, list(b.shape)))
    return notes


# ----------------------------------------------------------------------------
# instrumentation: Δ statistics, GDN decay statistics, router margins


class Probe:
    def __init__(self, model):
        self.model = model
        self.on = False
        self.handles = []
        self.delta = []  # (layer, tensor of Δ)
        self.decay = []  # exp(g) values for GDN
        self.route_margin = float("inf")
        self.route_count = 0
        for name, m in model.named_modules():
            cn = type(m).__name__
            if hasattr(m, "A_log") and hasattr(m, "in_proj") and hasattr(m, "dt_bias"):
                self.handles.append(m.in_proj.register_forward_hook(self._mamba_hook(m)))
            elif hasattr(m, "A_log") and hasattr(m, "dt_bias") and (hasattr(m, "in_proj_a") or hasattr(m, "in_proj_ba")):
                lin = m.in_proj_a if hasattr(m, "in_proj_a") else m.in_proj_ba
                self.handles.append(lin.register_forward_hook(self._gdn_hook(m)))
            elif hasattr(m, "A_log") and hasattr(m, "dt_bias") and (hasattr(m, "forget_gate_up") or hasattr(m, "f_b_proj")):
                lin = m.forget_gate_up if hasattr(m, "forget_gate_up") else m.f_b_proj
                self.handles.append(lin.register_forward_hook(self._kda_hook(m)))
            elif cn.endswith("TopkRouter") or cn.endswith("TopKRouter"):
                self.handles.append(m.register_forward_hook(self._router_hook(m)))

    def _mamba_hook(self, mixer):
        def hook(mod, inp, out):
            if not self.on:
                return
            H = mixer.dt_bias.shape[0]
            dt = out[..., -H:].float()
            self.delta.append(F.softplus(dt + mixer.dt_bias.float()).flatten())

        return hook

    def _gdn_hook(self, m):
        def hook(mod, inp, out):
            if not self.on:
                return
            Hv = m.dt_bias.shape[0]
            if hasattr(m, "in_proj_a"):
                a = out.float()
            else:  # packed per key head [b (r); a (r)]
                Hk = m.num_k_heads
                r = Hv // Hk
                a = out.float().reshape(*out.shape[:-1], Hk, 2 * r)[..., r:].reshape(*out.shape[:-1], Hv)
            gg = -m.A_log.float().exp() * F.softplus(a + m.dt_bias.float())
            self.decay.append(gg.exp().flatten())

        return hook

    def _kda_hook(self, m):
        # Kimi Delta Attention: one log-decay per head and key channel,
        # g = -exp(A_log[h]) * softplus(f + dt_bias[h, c]).
        def hook(mod, inp, out):
            if not self.on:
                return
            H = m.A_log.numel()
            f = out.float().reshape(*out.shape[:-1], H, -1)
            gg = -m.A_log.float().exp().reshape(H, 1) * F.softplus(f + m.dt_bias.float().reshape(H, -1))
            self.decay.append(gg.exp().flatten())

        return hook

    def _router_hook(self, m):
        def hook(mod, inp, out):
            if not self.on:
                return
            cfg = self.model.config
            k = getattr(cfg, "num_experts_per_tok", 2)
            raw = (out[0] if isinstance(out, tuple) else out).float()  # raw router logits [T, E]
            if hasattr(m, "e_score_correction_bias"):
                # nemotron_h: experts are chosen by sigmoid(logits) + correction bias
                s = raw.sigmoid() + m.e_score_correction_bias.float()
            else:
                # qwen: chosen by softmax(logits), same order as the logits: margin in logit units
                s = raw
            srt = s.sort(dim=-1, descending=True).values
            marg = (srt[..., k - 1] - srt[..., k]).min()
            self.route_margin = min(self.route_margin, float(marg))
            self.route_count += s.shape[0]

        return hook

    def stats(self, time_step_min=None):
        st = {}
        if self.delta:
            d = torch.cat(self.delta)
            st["mamba_delta"] = {
                "min": float(d.min()),
                "median": float(d.median()),
                "max": float(d.max()),
                "count": int(d.numel()),
            }
            if time_step_min is not None:
                st["mamba_delta"]["time_step_min"] = time_step_min
                st["mamba_delta"]["fraction_below_time_step_min"] = float((d < time_step_min).float().mean())
        if self.decay:
            e = torch.cat(self.decay)
            # GDN: one decay per head; KDA: one per head and key channel
            st["gdn_decay_exp_g"] = {"min": float(e.min()), "median": float(e.median()), "max": float(e.max())}
        if self.route_count:
            st["router_min_topk_margin"] = self.route_margin
            st["router_margin_definition"] = (
                "min over tokens and MoE layers of (k-th - (k+1)-th) selection score; nemotron_h: "
                "sigmoid(logit)+e_score_correction_bias, qwen: raw router logit")
            st["router_tokens"] = self.route_count
        return st


# ----------------------------------------------------------------------------
# evaluation


def make_prompts(vocab):
    g = torch.Generator().manual_seed(PROMPT_SEED)
    return [torch.randint(0, vocab, (n,), generator=g, dtype=torch.int64) for n in PROMPT_LENS]


def full_logits(model, ids):
    out = model(input_ids=ids[None], use_cache=False)
    return out.logits[0].float().clone()


def find_submodule(model, paths):
    for path in paths:
        try:
            return model.get_submodule(path)
        except Exception:  # noqa: BLE001
            pass
    return None


def capture_hidden(model, ids):
    """Residual stream of a full forward: [embedding out, layer 0 out, ...], and the final-norm output."""
    layers = find_submodule(model, ("model.layers", "backbone.layers"))
    norm = find_submodule(model, ("model.norm", "model.norm_f", "backbone.norm_f", "backbone.norm"))
    if layers is None or norm is None:
        raise RuntimeError("layers or final norm not found")
    got = {}

    def keep(key):
        def hook(mod, inp, out):
            t = out[0] if isinstance(out, (tuple, list)) else out
            got[key] = t[0].float().clone()

        return hook

    handles = [model.get_input_embeddings().register_forward_hook(keep(0))]
    for li, layer in enumerate(layers):
        handles.append(layer.register_forward_hook(keep(li + 1)))
    handles.append(norm.register_forward_hook(keep("norm")))
    try:
        full_logits(model, ids)
    finally:
        for h in handles:
            h.remove()
    hidden = torch.stack([got[k] for k in range(len(layers) + 1)], 0).contiguous()
    return hidden, got["norm"].contiguous()


def generate_greedy(model, prompt):
    gc = gen_config(max_new_tokens=N_NEW, min_new_tokens=N_NEW, return_dict_in_generate=True,
                    output_logits=True, output_scores=True)
    ids = prompt[None]
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gc)
    seq = out.sequences[0, prompt.numel():].clone()
    lg = getattr(out, "logits", None) or out.scores
    lg = torch.stack([x[0].float() for x in lg], 0)
    return seq, lg


def argmax_loop(model, prompt):
    cur = prompt.clone()
    toks = []
    for _ in range(N_NEW):
        lg = full_logits(model, cur)[-1]
        t = int(lg.argmax())
        toks.append(t)
        cur = torch.cat([cur, torch.tensor([t], dtype=torch.int64)])
    return torch.tensor(toks, dtype=torch.int64)


def cache_path(model, prompt, gen):
    """Prefill the prompt with the cache, then feed gen[:-1] one token at a time."""
    sig = inspect.signature(model.forward).parameters
    ckw = "cache_params" if "cache_params" in sig else "past_key_values"
    L = prompt.numel()
    kw = {"use_cache": True}
    if "cache_position" in sig:
        kw["cache_position"] = torch.arange(L)
    if "position_ids" in sig:
        kw["position_ids"] = torch.arange(L)[None]
    out = model(input_ids=prompt[None], **kw)
    cache = getattr(out, ckw, None)
    if cache is None:
        cache = getattr(out, "past_key_values", None) or getattr(out, "cache_params", None)
    pre = out.logits[0].float().clone()
    dec = [pre[-1]]
    pos = L
    for t in gen[:-1].tolist():
        kw = {ckw: cache, "use_cache": True}
        if "cache_position" in sig:
            kw["cache_position"] = torch.tensor([pos])
        if "position_ids" in sig:
            kw["position_ids"] = torch.tensor([[pos]])
        out = model(input_ids=torch.tensor([[t]], dtype=torch.int64), **kw)
        nc = getattr(out, ckw, None)
        if nc is not None:
            cache = nc
        dec.append(out.logits[0, -1].float().clone())
        pos += 1
    return pre, torch.stack(dec, 0)


def evaluate(model, prompts, probe, time_step_min):
    res = {"prompts": [], "ok": True}
    tensors = {}
    min_margin = float("inf")
    worst_cache = 0.0
    worst_gen = 0.0
    ids_match_all = True
    for i, p in enumerate(prompts):
        L = p.numel()
        probe.on = True
        pl = full_logits(model, p)
        probe.on = False
        gen_ids, gen_logits = generate_greedy(model, p)
        seq = torch.cat([p, gen_ids[:-1]])
        probe.on = True
        fl = full_logits(model, seq)[L - 1 :]
        probe.on = False
        am = argmax_loop(model, p)
        ids_match = bool(torch.equal(am, gen_ids))
        ids_match_all &= ids_match
        top2 = fl.topk(2, dim=-1).values
        marg = float((top2[:, 0] - top2[:, 1]).min())
        min_margin = min(min_margin, marg)
        gen_err = rel_err(gen_logits, fl)
        try:
            pre, dec = cache_path(model, p, gen_ids)
            cache_err_prefill = rel_err(pre, pl)
            cache_err_decode = rel_err(dec, fl)
        except Exception:  # noqa: BLE001
            log("  manual cache path failed:\n" + traceback.format_exc())
            pre, dec = None, None
            cache_err_prefill = cache_err_decode = float("nan")
        worst_cache = max(worst_cache, cache_err_prefill if cache_err_prefill == cache_err_prefill else 0.0,
                          cache_err_decode if cache_err_decode == cache_err_decode else 0.0)
        worst_gen = max(worst_gen, gen_err)
        lp = F.log_softmax(pl.double(), dim=-1)
        if L > 1:
            nll_tok = -lp[:-1].gather(1, p[1:, None]).squeeze(1)
            nll = float(nll_tok.mean())
        else:
            nll = None
        if i == 0:
            try:
                hid, fnorm = capture_hidden(model, p)
                tensors["prompt.0.hidden"] = hid
                tensors["prompt.0.final_norm"] = fnorm
            except Exception:  # noqa: BLE001
                log("  hidden-state capture failed:\n" + traceback.format_exc())
        tensors["prompt.%d.ids" % i] = p.clone()
        tensors["prompt.%d.logits" % i] = pl.clone().contiguous()
        tensors["greedy.%d.ids" % i] = gen_ids.clone()
        tensors["greedy.%d.logits" % i] = fl.clone().contiguous()
        inconsistent = max(gen_err, cache_err_decode if cache_err_decode == cache_err_decode else 0.0) > 1e-4
        if inconsistent:
            tensors["greedy.%d.cache_logits" % i] = (dec if dec is not None else gen_logits).clone().contiguous()
        if not ids_match:
            tensors["greedy.%d.argmax_ids" % i] = am.clone()
        res["prompts"].append(
            {
                "index": i,
                "length": L,
                "teacher_forced_mean_nll": nll,
                "teacher_forced_nll_count": L - 1,
                "greedy_matches_argmax_loop": ids_match,
                "greedy_min_top1_top2_margin": marg,
                "generate_logits_vs_full_rel_err": gen_err,
                "cache_prefill_vs_full_rel_err": cache_err_prefill,
                "cache_decode_vs_full_rel_err": cache_err_decode,
                "row0_equals_prompt_last_rel_err": rel_err(fl[0], pl[-1]),
            }
        )
        log(
            "   prompt %d len %2d nll %s ids_match %s margin %.4f gen_err %.2e cache_err pre %.2e dec %.2e"
            % (i, L, "%.4f" % nll if nll is not None else "  -   ", ids_match, marg, gen_err,
               cache_err_prefill, cache_err_decode)
        )
    res["min_greedy_margin"] = min_margin
    res["ids_match_all"] = ids_match_all
    res["worst_cache_rel_err"] = worst_cache
    res["worst_generate_rel_err"] = worst_gen
    res["probe"] = probe.stats(time_step_min)
    return res, tensors


# ----------------------------------------------------------------------------
# structure report


def describe_structure(model):
    lines = []
    layers = None
    for path in ("model.layers", "backbone.layers"):
        try:
            layers = model.get_submodule(path)
            break
        except Exception:  # noqa: BLE001
            pass
    if layers is None:
        return ["(layers not found)"]
    for i, layer in enumerate(layers):
        parts = []
        for cn in ("mixer", "linear_attn", "self_attn", "mlp"):
            if hasattr(layer, cn):
                sub = getattr(layer, cn)
                desc = type(sub).__name__
                if hasattr(sub, "fc1_latent_proj"):
                    desc += "(latent=%s)" % type(sub.fc1_latent_proj).__name__
                if hasattr(sub, "norm") and hasattr(sub.norm, "group_size"):
                    desc += "(norm group_size=%d)" % sub.norm.group_size
                parts.append("%s=%s" % (cn, desc))
        lines.append("  layer %d: %s" % (i, ", ".join(parts)))
    return lines


def rotary_dim(model):
    for _, m in model.named_modules():
        if hasattr(m, "inv_freq") and "Rotary" in type(m).__name__:
            return int(m.inv_freq.numel() * 2)
    return None


def state_dicts_equal(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    bad = []
    for k, v in sa.items():
        if k not in sb:
            bad.append("missing after reload: " + k)
        elif v.shape != sb[k].shape or not torch.equal(v, sb[k]):
            bad.append("differs after reload: %s (max abs diff %s)" % (
                k, float((v.float() - sb[k].float()).abs().max()) if v.shape == sb[k].shape else "shape"))
    for k in sb:
        if k not in sa:
            bad.append("new after reload: " + k)
    return bad


def weight_manifest(path):
    from safetensors import safe_open

    out = {}
    with safe_open(path, framework="pt") as f:
        for k in f.keys():
            t = f.get_tensor(k)
            out[k] = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
    return dict(sorted(out.items()))


def dir_sizes(path):
    s = {}
    for fn in sorted(os.listdir(path)):
        s[fn] = os.path.getsize(os.path.join(path, fn))
    return s


# ----------------------------------------------------------------------------
# one fixture


def make_fixture(name, spec, out_root, attempts, cfg_override=None, seed_override=None, note=None, deadline=None):
    import safetensors
    import transformers
    from safetensors.torch import save_file

    cls = get_cls(spec["cls"], spec["arch"])
    cfg_cls = get_cls(spec["cfg_cls"], spec["arch"])
    cfg_kw = dict(spec["cfg"])
    if cfg_override:
        cfg_kw.update(cfg_override)
    prompts = make_prompts(VOCAB)
    best = None
    base_seed = seed_override if seed_override is not None else spec["seed"]
    tmp_root = os.path.join(out_root, ".tmp")
    os.makedirs(tmp_root, exist_ok=True)
    for attempt in range(attempts):
        seed = base_seed + attempt
        log("== %s attempt %d (weight seed %d)" % (name, attempt, seed))
        cfg = make_config(cfg_cls, cfg_kw)
        torch.manual_seed(seed)
        model = build_model(cls, cfg)
        for line in describe_structure(model):
            log(line)
        rd = rotary_dim(model)
        if spec.get("expect_rotary") is not None:
            log("  rotary dim %s (expected %d)" % (rd, spec["expect_rotary"]))
            if rd != spec["expect_rotary"]:
                log("  WARNING ROTARY MISMATCH: rotary dim %s != expected %d (continuing; recorded)" % (
                    rd, spec["expect_rotary"]))
        log("  attn implementation: %s" % getattr(model.config, "_attn_implementation", "?"))
        notes = randomise(model, spec, seed)
        for n_ in notes:
            if n_.startswith("WARNING"):
                log("  " + n_)
        model.generation_config = gen_config()
        tmp = os.path.join(tmp_root, "%s_%d" % (name, attempt))
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        reloaded = load_model(cls, tmp)
        bad = state_dicts_equal(model, reloaded)
        for b in bad:
            log("  RELOAD " + b)
        probe = Probe(reloaded)
        p0 = prompts[0]
        reload_err = rel_err(full_logits(reloaded, p0), full_logits(model, p0))
        log("  reload logits rel err %.3e, %d state-dict differences" % (reload_err, len(bad)))
        tsm = getattr(reloaded.config, "time_step_min", None) if spec["arch"] == "nemotron_h" else None
        res, tensors = evaluate(reloaded, prompts, probe, tsm)
        res["reload_state_dict_differences"] = bad
        res["reload_logits_rel_err"] = reload_err
        log("  probe: %s" % json.dumps(res["probe"]))
        ok = (
            res["ids_match_all"]
            and res["min_greedy_margin"] >= 2e-3
            and res["probe"].get("router_min_topk_margin", 1.0) >= 1e-5
            and not bad
        )
        score = (
            int(res["ids_match_all"]),
            min(res["min_greedy_margin"], 1.0) + min(res["probe"].get("router_min_topk_margin", 1.0), 1e-3),
        )
        cand = dict(seed=seed, attempt=attempt, tmp=tmp, res=res, tensors=tensors, notes=notes, model=reloaded,
                    rotary_dim=rd)
        if best is None or score > best["score"]:
            best = dict(cand, score=score)
        if ok:
            log("  attempt accepted")
            break
        if bad:
            log("  checkpoint does not reload faithfully: other seeds will not help")
            break
        if res["worst_cache_rel_err"] > 1e-4 or res["worst_generate_rel_err"] > 1e-4:
            log("  cache path and full forward disagree structurally: other seeds will not help")
            break
        if deadline is not None and time.time() > deadline:
            log("  time budget spent: keeping the best attempt so far")
            break
        log("  attempt not accepted (ids_match=%s margin=%.2e route_margin=%s reload_diffs=%d)" % (
            res["ids_match_all"], res["min_greedy_margin"], res["probe"].get("router_min_topk_margin"), len(bad)))

    res = best["res"]
    dst = os.path.join(out_root, name)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(best["tmp"], dst)
    save_file(best["tensors"], os.path.join(dst, "reference.safetensors"))
    cfg_saved = json.load(open(os.path.join(dst, "config.json")))
    worst = max(res["worst_cache_rel_err"], res["worst_generate_rel_err"])
    consistent = worst <= 1e-4
    meta = {
        "fixture": name,
        "arch": spec["arch"],
        "model_class": cls.__name__,
        "config_class": cfg_cls.__name__,
        "model_type": cfg_saved.get("model_type"),
        "summary": spec["summary"],
        "rotary_dim": best["rotary_dim"],
        "note": note,
        "versions": {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "safetensors": safetensors.__version__,
            "python": platform.python_version(),
        },
        "attn_implementation": getattr(best["model"].config, "_attn_implementation", None),
        "experts_implementation": getattr(best["model"].config, "_experts_implementation", None),
        "device": "cpu float32 (torch threads %d), eager attention, pure-PyTorch paths" % torch.get_num_threads(),
        "seeds": {
            "weights": best["seed"],
            "attempt": best["attempt"],
            "torch_manual_seed_before_build": best["seed"],
            "prompt_seed": PROMPT_SEED,
            "prompt_generator": "torch.Generator().manual_seed(prompt_seed); torch.randint(0, vocab, (L,)) for L in prompt_lengths, in order",
        },
        "vocab_size": VOCAB,
        "prompt_lengths": PROMPT_LENS,
        "main_prompt": 0,
        "greedy_new_tokens": N_NEW,
        "greedy_logits_source": "full forward without cache over prompt+greedy[:-1]",
        "special_tokens": "bos/eos/pad are null in config and generation_config: nothing can stop generation",
        "tensors": TENSORS,
        "per_prompt": res["prompts"],
        "checks": {
            "reload_state_dict_differences": res["reload_state_dict_differences"],
            "reload_logits_rel_err": res["reload_logits_rel_err"],
            "greedy_ids_match_argmax_loop_all": res["ids_match_all"],
            "min_greedy_top1_top2_margin": res["min_greedy_margin"],
            "worst_cache_path_vs_full_rel_err": res["worst_cache_rel_err"],
            "worst_generate_logits_vs_full_rel_err": res["worst_generate_rel_err"],
            "cache_consistent_1e-5": worst <= 1e-5,
            "cache_consistent_1e-4": consistent,
            "rel_err_definition": "max|a-b| / max|b| over the compared tensor",
        },
        "stats": res["probe"],
        "randomisation": [n_.strip() for n_ in best["notes"]],
        "weights": weight_manifest(os.path.join(dst, "model.safetensors")),
    }
    with open(os.path.join(dst, "reference.json"), "w") as f:
        json.dump(sanitize(meta), f, indent=1, sort_keys=False, allow_nan=False)
        f.write("\n")
    sizes = dir_sizes(dst)
    total = sum(sizes.values())
    log("  wrote %s: %s total %.2f MB%s" % (dst, sizes, total / 1e6, "  ** OVER 3 MB **" if total > 3e6 else ""))
    if not (consistent and res["ids_match_all"] and not res["reload_state_dict_differences"]):
        status = "FAIL"
    elif worst <= 1e-5:
        status = "PASS"
    else:
        status = "PASS(1e-4 only)"
    log(
        "RESULT %s %-20s cache/full worst rel err %.2e, generate/full %.2e, greedy==argmax %s, min margin %.3e, %.2f MB"
        % (status, name, res["worst_cache_rel_err"], res["worst_generate_rel_err"], res["ids_match_all"],
           res["min_greedy_margin"], total / 1e6)
    )
    return dict(status=status, consistent=consistent, res=res, total=total)


# ----------------------------------------------------------------------------


def report_environment():
    import transformers

    log("python %s, torch %s, transformers %s" % (platform.python_version(), torch.__version__, transformers.__version__))
    for mod in ("fla", "causal_conv1d", "mamba_ssm", "kernels", "flash_attn"):
        log("  module %-14s %s" % (mod, "PRESENT" if importlib.util.find_spec(mod) else "absent"))
    try:
        from transformers.utils import import_utils as iu

        for fn in ("is_flash_linear_attention_available", "is_causal_conv1d_available", "is_mamba_2_ssm_available",
                   "is_mamba_ssm_available", "is_kernels_available"):
            f = getattr(iu, fn, None)
            if f is not None:
                try:
                    log("  %s() = %s" % (fn, f()))
                except Exception as e:  # noqa: BLE001
                    log("  %s() raised %s" % (fn, e))
    except Exception as e:  # noqa: BLE001
        log("  import_utils check failed: %s" % e)
    src = os.path.dirname(transformers.__file__)
    for arch in ("nemotron_h", "mamba2", "qwen3_next", "qwen3_5", "qwen3_5_moe", "kimi_linear"):
        p = os.path.join(src, "models", arch, "modeling_%s.py" % arch)
        if os.path.exists(p):
            h = hashlib.sha256(open(p, "rb").read()).hexdigest()[:16]
            log("  modeling_%s.py sha256 %s" % (arch, h))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output root; one folder per fixture")
    ap.add_argument("--only", default="", help="comma-separated fixture names (default: all)")
    ap.add_argument("--attempts", type=int, default=3, help="weight seeds to try per model")
    ap.add_argument("--threads", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--time-budget", type=float, default=150.0,
                    help="seconds after which no further weight seeds are tried")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)
    report_environment()
    specs = arch_specs()
    names = [n for n in args.only.split(",") if n] or list(specs)
    results = {}
    t0 = time.time()
    deadline = t0 + args.time_budget
    for name in names:
        t1 = time.time()
        try:
            r = make_fixture(name, specs[name], args.out, args.attempts, deadline=deadline)
            results[name] = r["status"]
            if name == "nemotron_h" and not r["consistent"]:
                # transformers' prefill clamps Δ >= time_step_min but its decode path
                # apparently does not (or vice versa): keep this fixture (renamed) for
                # testing the asymmetry, and build a clean one where the clamp never acts.
                dst = os.path.join(args.out, name)
                alt = os.path.join(args.out, "nemotron_h_dtclamp")
                shutil.rmtree(alt, ignore_errors=True)
                os.rename(dst, alt)
                jp = os.path.join(alt, "reference.json")
                meta = json.load(open(jp))
                meta["fixture"] = "nemotron_h_dtclamp"
                meta["note"] = (
                    "time_step_min=0.02 so that about half of the Δ values fall below it. transformers clamps "
                    "Δ >= time_step_min in the chunked (multi-token) scan but NOT in the single-token decode "
                    "(selective_state_update), so prefill+decode through the cache differs from a full forward. "
                    "prompt.<i>.logits and greedy.<i>.logits: full forward (every position clamped); "
                    "greedy.<i>.ids and greedy.<i>.cache_logits: prefill (clamped) then one-token decode steps "
                    "(unclamped), i.e. what generate() does; greedy.<i>.argmax_ids: argmax loop over full forwards")
                with open(jp, "w") as f:
                    json.dump(sanitize(meta), f, indent=1, allow_nan=False)
                    f.write("\n")
                results["nemotron_h_dtclamp"] = results.pop(name) + " (kept: cache path differs from full forward)"
                log("nemotron_h: cache path inconsistent; kept as nemotron_h_dtclamp, building clean nemotron_h")
                r2 = make_fixture(
                    name, specs[name], args.out, args.attempts,
                    cfg_override={"time_step_min": 1e-9},
                    note="time_step_min set to 1e-9 so the Δ clamp never acts (see nemotron_h_dtclamp)",
                    deadline=deadline,
                )
                results[name] = r2["status"]
        except Exception:  # noqa: BLE001
            log("ERROR building %s:\n%s" % (name, traceback.format_exc()))
            results[name] = "ERROR"
        log("   (%s took %.1f s)" % (name, time.time() - t1))
    shutil.rmtree(os.path.join(args.out, ".tmp"), ignore_errors=True)
    log("SUMMARY (%.1f s): %s" % (time.time() - t0, json.dumps(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
