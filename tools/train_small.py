#!/usr/bin/env python3
"""Train the small models that ship with replayssm (models/qwen35-kjv, models/nemotronh-kjv).

Runs on the GPU machine (PyTorch, transformers 5.17, tokenizers; no network,
no fla / mamba_ssm kernels: the pure-PyTorch paths of transformers train the
models). The corpus comes from tools/prepare_corpus.py, carried as .corpus/.

    PYTHONUNBUFFERED=1 python3 tools/train_small.py --corpus .corpus --out $OUT --budget 290

The shipped models (models/) came from two calls on one H200, reusing the
tokenizer of an earlier run (mkdir -p .corpus/tokenizer; cp
models/qwen35-kjv/tokenizer*.json .corpus/tokenizer/):
  --tokenizer .corpus/tokenizer --epochs 8,16 --budget 290               (qwen35-kjv, 218 s)
  --tokenizer .corpus/tokenizer --only nemotronh-kjv --epochs 7,10 --budget 165   (nemotronh-kjv, 63 s)

Stages:
 1. Tokenizer: byte-level BPE trained with HF tokenizers on the training split,
    configured exactly as tokenizer/testdata/qwen (NFC, Qwen's split regex,
    ByteLevel without prefix space) so that the Go tokenizer reproduces it;
    8189 learned tokens + <|endoftext|>, <|im_start|>, <|im_end|> = 8192 ids.
    --tokenizer DIR reuses a saved one instead (tokenizer.json,
    tokenizer_config.json).
 2. Training: for each architecture and each entry of --epochs, a child
    process (all in parallel on the one GPU: the pure-PyTorch scans are
    launch-bound, so concurrent processes use the GPU better than one) trains
    from scratch with AdamW, bf16 autocast, cosine schedule, random 512-token
    windows of the training split, and keeps the checkpoint with the lowest
    loss on the validation split. A child shortens its schedule to fit
    --budget seconds (measured after 15 steps) and stops at the budget.
    NemotronH children train with a faster Mamba-2 scan (see
    fast_mamba_forward), checked against transformers' own path first.
 3. Selection and evaluation: per architecture the run with the lowest
    validation loss wins. Its checkpoint is saved with matrices in bf16 (1-D
    parameters such as A_log, dt_bias, D and norms in fp32), reloaded from disk
    in float32 with eager attention, and scored by transformers in fp32 on the
    GPU (TF32 off): perplexity over the test split in non-overlapping windows
    of 512 tokens (each scored from a fresh state, 511 predictions per full
    window), the same for the validation split and for the first
    --slice-windows windows of the test split (what CI re-measures), plus a
    few greedy generations. Results go to eval.json in the model folder.

Output under --out: <name>.tar for each model (the HF folder: config.json,
model.safetensors, generation_config.json, tokenizer.json,
tokenizer_config.json, eval.json, train_log.txt), tokenizer.tar, summary.json.
Each tar is rewritten as soon as its model is final.

--smoke: a few steps per run and a reference.safetensors (ids and fp32 logits
of the first 16 test tokens) in each model folder, to check the pipeline and
the Go forward pass before the real run.
"""

import argparse
import hashlib
import importlib.util
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
import traceback

QWEN_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
           r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
VOCAB = 8192
CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
WINDOW = 512  # training sequence length and evaluation window
PROMPTS = ["In the beginning", "And Jesus said unto them,", "The LORD is my shepherd;", "Blessed are the"]


def log(*a):
    print(*a, flush=True)


# ----------------------------------------------------------------------------
# architectures


def arch_specs():
    no_special = dict(pad_token_id=None, bos_token_id=None)
    return {
        "qwen35-kjv": dict(
            arch="qwen3_5",
            cls="Qwen3_5ForCausalLM",
            cfg_cls="Qwen3_5TextConfig",
            seed=3535,
            cfg=dict(
                vocab_size=VOCAB,
                hidden_size=256,
                intermediate_size=448,
                num_hidden_layers=8,
                layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 2,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=64,
                hidden_act="silu",
                max_position_embeddings=4096,
                rms_norm_eps=1e-6,
                tie_word_embeddings=True,
                rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                                 "mrope_section": [3, 3, 2], "mrope_interleaved": True},
                partial_rotary_factor=0.25,
                attention_bias=False,
                linear_conv_kernel_dim=4,
                linear_key_head_dim=32,
                linear_value_head_dim=32,
                linear_num_key_heads=4,
                linear_num_value_heads=8,
                **no_special,
            ),
            summary="Qwen3.5-style: 8 layers (3 Gated DeltaNet + 1 gated attention) x 2, hidden 256, SwiGLU 448, "
                    "GDN 4 key / 8 value heads of 32, conv 4; attention 4 q / 2 kv heads of 64, partial RoPE "
                    "(16 dims, theta 1e7), q/k norms, output gate; tied embeddings; vocab 8192",
        ),
        "nemotronh-kjv": dict(
            arch="nemotron_h",
            cls="NemotronHForCausalLM",
            cfg_cls="NemotronHConfig",
            seed=4646,
            cfg=dict(
                vocab_size=VOCAB,
                hidden_size=256,
                hybrid_override_pattern="M-M*M-M-",
                # untied like the real Nemotron-H (transformers' NemotronH does not tie
                # its lm_head to the embeddings even when asked)
                tie_word_embeddings=False,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=64,
                max_position_embeddings=4096,
                attention_bias=False,
                intermediate_size=512,
                mlp_hidden_act="relu2",
                mlp_bias=False,
                use_mamba_kernels=False,
                ssm_state_size=64,
                mamba_num_heads=8,
                mamba_head_dim=64,
                n_groups=2,
                conv_kernel=4,
                expand=2,
                chunk_size=128,
                # The multi-token scan of transformers clamps Δ >= time_step_min and the
                # one-token decode does not: a floor that never acts keeps prefill and
                # decode the same function. dt_bias is initialised here instead.
                time_step_min=1e-9,
                time_step_max=0.1,
                time_step_floor=1e-4,
                use_conv_bias=True,
                use_bias=False,
                mamba_proj_bias=False,
                layer_norm_epsilon=1e-5,
                residual_in_fp32=False,
                num_nextn_predict_layers=0,
                **no_special,
            ),
            summary="NemotronH-style: 8 layers M-M*M-M- (4 Mamba-2, 3 relu^2 MLP, 1 attention), hidden 256; "
                    "Mamba-2 8 heads x 64, state 64, 2 groups, conv 4, chunk 128; MLP 512; attention 4 q / 2 kv "
                    "heads of 64, no RoPE; untied embeddings and LM head; vocab 8192",
        ),
    }


def get_cls(name):
    import transformers

    c = getattr(transformers, name, None)
    if c is None:
        raise ImportError("%s not in transformers %s" % (name, transformers.__version__))
    return c


def make_config(cls, kw):
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


# ----------------------------------------------------------------------------
# tokenizer


def ids_digest(ids):
    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode()).hexdigest()


def build_tokenizer(corpus, out_dir):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    t0 = time.time()
    text = open(os.path.join(corpus, "kjv-train.txt"), encoding="utf-8").read()
    chapters = text.split("\n\n")
    chapters = [c + "\n\n" for c in chapters]  # keep the blank-line separators in the statistics
    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - len(SPECIALS), min_frequency=2, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    t.train_from_iterator(chapters, trainer=trainer)
    t.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    n = t.get_vocab_size()
    log("tokenizer: trained %d ids in %.1fs" % (n, time.time() - t0))
    if n != VOCAB:
        raise RuntimeError("tokenizer has %d ids, want %d" % (n, VOCAB))
    os.makedirs(out_dir, exist_ok=True)
    t.save(os.path.join(out_dir, "tokenizer.json"), pretty=False)
    eot, ims, ime = (t.token_to_id(s) for s in SPECIALS)
    cfg = {
        "backend": "tokenizers",
        "tokenizer_class": "TokenizersBackend",
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHATML,
        "added_tokens_decoder": {
            str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False, "special": True}
            for i, s in zip((eot, ims, ime), SPECIALS)
        },
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
        f.write("\n")


def check_tokenizer(tok_dir, repo):
    """Compare the pipeline with tokenizer/testdata/qwen and round-trip through transformers."""
    from transformers import AutoTokenizer

    mine = json.load(open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8"))
    ref_path = os.path.join(repo, "tokenizer", "testdata", "qwen", "tokenizer.json")
    if os.path.exists(ref_path):
        ref = json.load(open(ref_path, encoding="utf-8"))
        for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
            same = json.dumps(mine.get(k), sort_keys=True) == json.dumps(ref.get(k), sort_keys=True)
            log("  tokenizer %-15s same as tokenizer/testdata/qwen: %s" % (k, same))
            if not same:
                log("    mine %s\n    ref  %s" % (json.dumps(mine.get(k)), json.dumps(ref.get(k))))
    hf = AutoTokenizer.from_pretrained(tok_dir)
    s = "In the beginning God created the heaven and the earth.\n\nGenesis 1\n"
    ids = hf(s, add_special_tokens=True)["input_ids"]
    log("  AutoTokenizer %s: %r -> %d ids, decodes back: %s" % (type(hf).__name__, s[:30], len(ids), hf.decode(ids) == s))
    chat = hf.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    log("  chat template renders %r" % chat)
    log("  eos %r %s pad %r %s" % (hf.eos_token, hf.eos_token_id, hf.pad_token, hf.pad_token_id))


def encode_splits(corpus, tok_dir, work):
    import torch
    from tokenizers import Tokenizer

    t = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    out, meta = {}, {}
    for split in ("train", "valid", "test"):
        path = os.path.join(corpus, "kjv-%s.txt" % split)
        text = open(path, encoding="utf-8").read()
        t0 = time.time()
        ids = t.encode(text, add_special_tokens=False).ids
        out[split] = torch.tensor(ids, dtype=torch.int32)
        meta[split] = dict(bytes=len(text.encode()), tokens=len(ids), sha256_ids=ids_digest(ids),
                           sha256_text=hashlib.sha256(text.encode()).hexdigest())
        log("  %-5s %8d bytes -> %7d tokens (%.2f bytes/token) in %.1fs" % (
            split, meta[split]["bytes"], len(ids), meta[split]["bytes"] / len(ids), time.time() - t0))
    torch.save(out, os.path.join(work, "ids.pt"))
    with open(os.path.join(work, "ids.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return meta


# ----------------------------------------------------------------------------
# one training run (child process)


def inv_softplus(y):
    import torch

    return y + torch.log(-torch.expm1(-y))


def build_model(spec, attn="sdpa"):
    import torch

    cls = get_cls(spec["cls"])
    cfg = make_config(get_cls(spec["cfg_cls"]), spec["cfg"])
    torch.manual_seed(spec["seed"])
    try:
        m = cls._from_config(cfg, attn_implementation=attn, dtype=torch.float32)
    except Exception as e:  # noqa: BLE001
        log("  attn %s refused (%s); using eager" % (attn, e))
        m = cls._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    m = m.float()
    if spec["arch"] == "nemotron_h":
        # Mamba-2's usual init: Δ = softplus(dt_bias) log-uniform in [1e-3, 1e-1].
        g = torch.Generator().manual_seed(spec["seed"] + 1)
        with torch.no_grad():
            for name, mod in m.named_modules():
                if hasattr(mod, "dt_bias") and hasattr(mod, "A_log") and hasattr(mod, "in_proj"):
                    n = mod.dt_bias.numel()
                    u = torch.rand(n, generator=g, dtype=torch.float64)
                    dt = torch.exp(math.log(1e-3) + u * (math.log(1e-1) - math.log(1e-3)))
                    mod.dt_bias.copy_(inv_softplus(dt).float())
    return m


# ----------------------------------------------------------------------------
# A faster Mamba-2 scan for training only.
#
# transformers' pure-PyTorch Mamba-2 prefill materialises (batch, chunks, l, s,
# heads, state) products: about 13 GB of fp32 temporaries per layer at batch 32 x
# 512, so a NemotronH step took 1.4 s. The training children swap each mixer's
# forward (when no cache is in use) for the same computation written with
# einsum contractions (the SSD "minimal" form of the Mamba-2 paper); the swap is
# kept only if the logits of the whole model agree with the unpatched forward
# (rel. error < 1e-4 in fp32) on real text. Final evaluation always runs the
# unpatched transformers code on a freshly loaded model.


def segsum(x):
    """x [..., T] -> [..., T, T]: out[i, j] = x[j+1] + ... + x[i] for i >= j, -inf above the diagonal."""
    import torch

    T = x.size(-1)
    x = x[..., None].expand(*x.size(), T)
    x = x.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=-1), 0)
    s = torch.cumsum(x, dim=-2)
    return s.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=0), -torch.inf)


def ssd_scan(x, dt, A, B, C, chunk):
    """Mamba-2 scan from a zero state. x [b,L,h,p], dt [b,L,h], A [h], B/C [b,L,g,n] (fp32) -> y [b,L,h,p] (no D)."""
    import torch
    import torch.nn.functional as F

    b, L, h, p = x.shape
    g = B.shape[2]
    pad = (-L) % chunk
    if pad:
        x, B, C = (F.pad(t, (0, 0, 0, 0, 0, pad)) for t in (x, B, C))
        dt = F.pad(dt, (0, 0, 0, pad))
    c = (L + pad) // chunk
    X = (x * dt[..., None]).reshape(b, c, chunk, h, p)
    Adt = (dt * A).reshape(b, c, chunk, h).permute(0, 3, 1, 2)  # b h c l
    Bh = B.repeat_interleave(h // g, dim=2).reshape(b, c, chunk, h, -1)
    Ch = C.repeat_interleave(h // g, dim=2).reshape(b, c, chunk, h, -1)
    A_cs = torch.cumsum(Adt, dim=-1)
    Lm = torch.exp(segsum(Adt))  # b h c l s
    scores = torch.einsum("bclhn,bcshn->bhcls", Ch, Bh) * Lm
    y_diag = torch.einsum("bhcls,bcshp->bclhp", scores, X)
    decay_states = torch.exp(A_cs[..., -1:] - A_cs)  # b h c l
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bh, decay_states, X)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    decay_chunk = torch.exp(segsum(F.pad(A_cs[..., -1], (1, 0))))  # b h c+1 c+1
    states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)[:, :-1]
    y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", Ch, states, torch.exp(A_cs))
    return (y_diag + y_off).reshape(b, c * chunk, h, p)[:, :L]


def fast_mamba_forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):
    """NemotronH Mamba-2 mixer (docs/DESIGN.md 1.1) without a cache: in_proj -> [z | xBC | dt], causal conv + silu,
    SSD scan, + D x, the mixer's own gated norm, out_proj."""
    import torch
    import torch.nn.functional as F

    if cache_params is not None or (attention_mask is not None and not bool(torch.all(attention_mask == 1))):
        return self._orig_forward(hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs)
    b, L, _ = hidden_states.shape
    dtype = hidden_states.dtype
    cfg = self._model_config

    def attr(name, cfg_name=None):
        v = getattr(self, name, None)
        return v if v is not None else getattr(cfg, cfg_name or name)

    H, P = attr("num_heads", "mamba_num_heads"), attr("head_dim", "mamba_head_dim")
    I, G, N = H * P, attr("n_groups"), attr("ssm_state_size")
    GN = G * N
    proj = self.in_proj(hidden_states)
    gate, xBC, dt = torch.split(proj, [I, I + 2 * GN, H], dim=-1)
    xBC = self.act(self.conv1d(xBC.transpose(1, 2))[..., :L].transpose(1, 2))
    x, Bm, Cm = torch.split(xBC, [I, GN, GN], dim=-1)
    A = -torch.exp(self.A_log.float())
    dt = F.softplus(dt.float() + self.dt_bias.float())
    dt = torch.clamp(dt, min=attr("time_step_min"))
    lim = attr("time_step_limit")
    if lim is not None and (lim[0] > 0 or lim[1] != float("inf")):
        dt = torch.clamp(dt, lim[0], lim[1])
    x = x.reshape(b, L, H, P).float()
    with torch.autocast("cuda", enabled=False):  # the scan in fp32, as transformers' path computes it
        y = ssd_scan(x, dt, A, Bm.reshape(b, L, G, N).float(), Cm.reshape(b, L, G, N).float(), attr("chunk_size"))
    y = y + x * self.D.float()[:, None]
    y = y.reshape(b, L, I)
    out = self.norm(y, gate)
    return self.out_proj(out.to(dtype))


def patch_mamba(model, sample):
    """Swap in fast_mamba_forward when it reproduces the model's logits on sample [b, L]."""
    import types

    import torch

    mixers = [m for _, m in model.named_modules() if type(m).__name__.endswith("Mamba2Mixer")]
    if not mixers:
        return "no Mamba-2 mixers"
    was_training = model.training
    model.train()
    g = torch.Generator(device=sample.device).manual_seed(1)
    hid = model.config.hidden_size
    probe = torch.randn(sample.shape[0], sample.shape[1], hid, generator=g, device=sample.device)
    with torch.no_grad():
        ref = model(input_ids=sample, use_cache=False).logits.float()
        ref_mix = [m(probe).float() for m in mixers]
        for m in mixers:
            m._model_config = model.config
            m._orig_forward = m.forward
            m.forward = types.MethodType(fast_mamba_forward, m)
        got = model(input_ids=sample, use_cache=False).logits.float()
        got_mix = [m(probe).float() for m in mixers]
    err = float((got - ref).abs().max() / ref.abs().max())
    mix_err = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(got_mix, ref_mix))
    ok = err < 1e-4 and mix_err < 1e-4
    err = max(err, mix_err)
    if not ok:
        for m in mixers:
            m.forward = m._orig_forward
    model.train(was_training)
    return "fast Mamba-2 scan %s on %d mixers (logits rel err %.2e vs transformers' torch path)" % (
        "ENABLED" if ok else "REJECTED", len(mixers), err)


def count_params(m):
    seen, n = set(), 0
    for p in m.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    emb = m.get_input_embeddings().weight.numel()
    return n, emb


def lr_at(step, total, warmup, peak, floor_frac=0.1):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor_frac + (1 - floor_frac) * 0.5 * (1 + math.cos(math.pi * p)))


def window_batches(ids, T, B, gen):
    """Endless batches [B, T+1] of windows at a random offset per epoch, shuffled."""
    import torch

    n = ids.numel()
    epoch = 0
    while True:
        off = int(torch.randint(0, T, (1,), generator=gen))
        starts = torch.arange(off, n - (T + 1), T)
        starts = starts[torch.randperm(starts.numel(), generator=gen)]
        for i in range(0, starts.numel() - B + 1, B):
            idx = starts[i:i + B, None] + torch.arange(T + 1)[None, :]
            yield epoch, ids[idx].long()
        epoch += 1


def eval_windows(ids, T):
    return [ids[i:i + T] for i in range(0, ids.numel(), T) if ids[i:i + T].numel() >= 2]


def mean_nll(model, ids, T, device, autocast, batch=64, max_windows=None):
    """Sum of NLL and count over non-overlapping windows of T tokens, each from a fresh state."""
    import torch
    import torch.nn.functional as F

    wins = eval_windows(ids, T)
    if max_windows is not None:
        wins = wins[:max_windows]
    full = [w for w in wins if w.numel() == T]
    rest = [w for w in wins if w.numel() != T]
    total, count = 0.0, 0
    groups = [full[i:i + batch] for i in range(0, len(full), batch)] + [[w] for w in rest]
    with torch.no_grad():
        for g in groups:
            x = torch.stack(g).long().to(device)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                logits = model(input_ids=x, use_cache=False).logits
            lp = F.log_softmax(logits.float()[:, :-1], dim=-1)
            nll = -lp.gather(-1, x[:, 1:, None]).squeeze(-1)
            total += float(nll.double().sum())
            count += nll.numel()
    return total, count


def to_save_dtypes(model):
    """Matrices (and conv kernels) to bf16, 1-D parameters stay fp32."""
    import torch

    for p in model.parameters():
        if p.dim() >= 2:
            p.data = p.data.to(torch.bfloat16)


def write_generation_config(d, eot, ime):
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": None, "eos_token_id": [ime, eot], "pad_token_id": eot, "do_sample": False},
                  f, indent=2)
        f.write("\n")


def run_child(args):
    import torch
    import torch.nn.functional as F

    spec = arch_specs()[args.arch]
    tag = "[%s e%g]" % (args.arch, args.run_epochs)
    t_start = time.time()
    torch.set_num_threads(2)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = "cuda"
    ids = torch.load(os.path.join(args.work, "ids.pt"))
    train, valid = ids["train"], ids["valid"]
    model = build_model(spec).to(dev)
    model.train()
    n_params, n_emb = count_params(model)
    T, B = WINDOW, args.batch
    if spec["arch"] == "nemotron_h":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        try:
            log("%s %s" % (tag, patch_mamba(model, train[: 2 * T].reshape(2, T).long().to(dev))))
        except Exception:  # noqa: BLE001
            for _, m in model.named_modules():
                if hasattr(m, "_orig_forward"):
                    m.forward = m._orig_forward
            log("%s fast Mamba-2 scan check failed, keeping transformers' path:\n%s" % (tag, traceback.format_exc()))
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    steps_per_epoch = (train.numel() // T) // B
    total = max(1, int(round(args.run_epochs * steps_per_epoch)))
    if args.max_steps:
        total = min(total, args.max_steps)
    warmup = max(1, min(100, total // 10))
    log("%s params %d (embedding %d), %d train tokens, %d steps/epoch, %d steps planned, warmup %d, attn %s" % (
        tag, n_params, n_emb, train.numel(), steps_per_epoch, total, warmup,
        getattr(model.config, "_attn_implementation", "?")))
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    gen = torch.Generator().manual_seed(spec["seed"] + 7)
    batches = window_batches(train, T, B, gen)
    eval_every = max(5, steps_per_epoch // 2) if not args.smoke else max(1, total // 2)
    best = dict(loss=float("inf"), step=-1, state=None)
    hist = []
    deadline = t_start + args.budget
    t_loop = time.time()
    step = 0
    tok_seen = 0
    ema = None
    stop_reason = "planned steps done"
    while step < total:
        epoch, batch = next(batches)
        batch = batch.to(dev, non_blocking=True)
        lr = lr_at(step, total, warmup, args.lr)
        for gp in opt.param_groups:
            gp["lr"] = lr
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=batch[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tok_seen += B * T
        if step == 15 and not args.smoke:
            torch.cuda.synchronize()
            per = (time.time() - t_loop) / 15
            left = deadline - time.time() - 20  # reserve for evals and saving
            fit = int(left / (per * 1.15)) + 15
            if fit < total:
                log("%s %.3fs/step: %d steps fit in the budget, not %d; shortening the schedule" % (tag, per, fit, total))
                total = max(fit, 20)
                warmup = min(warmup, total // 10 + 1)
        if step % 25 == 0 or step == 1:
            lv = loss.item()
            ema = lv if ema is None else 0.9 * ema + 0.1 * lv
            log("%s step %5d/%d epoch %d loss %.4f lr %.2e gnorm %.2f %.0f tok/s %.0fs" % (
                tag, step, total, epoch, lv, lr, float(gnorm), tok_seen / (time.time() - t_loop), time.time() - t_start))
        if step % eval_every == 0 or step == total:
            model.eval()
            s, c = mean_nll(model, valid, T, dev, autocast=True, max_windows=None if not args.smoke else 8)
            model.train()
            vl = s / c
            hist.append(dict(step=step, epoch=step / steps_per_epoch, valid_nll=vl, train_loss=loss.item(),
                             seconds=time.time() - t_start))
            better = vl < best["loss"]
            if better:
                best = dict(loss=vl, step=step, state={k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})
            log("%s eval step %d (epoch %.2f) valid nll %.4f ppl %.2f%s" % (
                tag, step, step / steps_per_epoch, vl, math.exp(vl), " *best*" if better else ""))
        if time.time() > deadline - 15 and step < total:
            stop_reason = "time budget"
            log("%s budget reached at step %d of %d" % (tag, step, total))
            break
    train_s = time.time() - t_loop
    if best["state"] is None or (hist and hist[-1]["step"] != step):
        model.eval()
        s, c = mean_nll(model, valid, T, dev, autocast=True)
        vl = s / c
        hist.append(dict(step=step, epoch=step / steps_per_epoch, valid_nll=vl, seconds=time.time() - t_start))
        if vl < best["loss"]:
            best = dict(loss=vl, step=step, state={k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})
    model.load_state_dict(best["state"])
    to_save_dtypes(model)
    d = os.path.join(args.work, "runs", "%s-e%g" % (args.arch, args.run_epochs))
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d)
    res = dict(arch=args.arch, epochs_planned=args.run_epochs, steps_done=step, steps_planned=total,
               stop_reason=stop_reason, best_step=best["step"], best_epoch=best["step"] / steps_per_epoch,
               best_valid_nll=best["loss"], best_valid_ppl=math.exp(best["loss"]), params=n_params,
               embedding_params=n_emb, batch=B, seq=T, lr=args.lr, weight_decay=args.wd, warmup=warmup,
               train_seconds=train_s, seconds_per_step=train_s / max(1, step), tokens_seen=tok_seen,
               history=hist, dir=d)
    with open(os.path.join(d, "run.json"), "w") as f:
        json.dump(res, f, indent=1)
    log("%s done: best valid ppl %.3f at step %d; %d steps in %.0fs (%.3fs/step)" % (
        tag, math.exp(best["loss"]), best["step"], step, train_s, train_s / max(1, step)))


# ----------------------------------------------------------------------------
# orchestration


def report_environment():
    import torch
    import transformers

    log("python %s, torch %s, transformers %s, cuda %s, gpu %s" % (
        platform.python_version(), torch.__version__, transformers.__version__, torch.version.cuda,
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else None))
    for mod in ("fla", "causal_conv1d", "mamba_ssm", "kernels", "flash_attn", "tokenizers"):
        log("  module %-14s %s" % (mod, "PRESENT" if importlib.util.find_spec(mod) else "absent"))


def tar_dir(src, dst_tar, arcname):
    tmp = dst_tar + ".tmp"
    with tarfile.open(tmp, "w") as tf:
        for fn in sorted(os.listdir(src)):
            tf.add(os.path.join(src, fn), arcname=os.path.join(arcname, fn))
    os.replace(tmp, dst_tar)


def final_eval(name, spec, run, tok_dir, work, out, args, id_meta):
    """Reload the winning checkpoint in fp32 and score it with transformers; write the model folder."""
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    d = os.path.join(work, "final", name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(run["dir"], d)
    os.remove(os.path.join(d, "run.json"))
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, fn), os.path.join(d, fn))
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    eot, ime = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    write_generation_config(d, eot, ime)
    # config.json: eos for the runtime, and the dtype the file holds.
    cp = os.path.join(d, "config.json")
    cfg = json.load(open(cp))
    cfg["eos_token_id"] = ime
    cfg["pad_token_id"] = eot
    cfg["bos_token_id"] = None
    with open(cp, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")

    cls = get_cls(spec["cls"])
    model = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").to("cuda").eval()
    ids = torch.load(os.path.join(work, "ids.pt"))
    res = {}
    t0 = time.time()
    for split in ("test", "valid"):
        s, c = mean_nll(model, ids[split], WINDOW, "cuda", autocast=False, batch=16)
        res[split] = dict(tokens=int(ids[split].numel()), predictions=c, nll=s / c, perplexity=math.exp(s / c))
    s, c = mean_nll(model, ids["test"], WINDOW, "cuda", autocast=False, max_windows=args.slice_windows)
    res["test_slice"] = dict(windows=args.slice_windows, tokens=min(int(ids["test"].numel()), args.slice_windows * WINDOW),
                             predictions=c, nll=s / c, perplexity=math.exp(s / c))
    log("%s transformers fp32: test ppl %.4f (%d predictions), valid ppl %.4f, test slice ppl %.4f (%d) in %.1fs" % (
        name, res["test"]["perplexity"], res["test"]["predictions"], res["valid"]["perplexity"],
        res["test_slice"]["perplexity"], c, time.time() - t0))
    samples = []
    for p in PROMPTS:
        x = torch.tensor([tok.encode(p, add_special_tokens=False).ids], device="cuda")
        with torch.no_grad():
            y = model.generate(x, max_new_tokens=48, do_sample=False, pad_token_id=eot, eos_token_id=[ime, eot])
        new = y[0, x.shape[1]:].tolist()
        samples.append(dict(prompt=p, prompt_ids=x[0].tolist(), ids=new, text=tok.decode(new, skip_special_tokens=False)))
        log("%s greedy: %r -> %r" % (name, p, samples[-1]["text"]))
    if args.smoke:
        x = ids["test"][:16].long()[None].to("cuda")
        with torch.no_grad():
            logits = model(input_ids=x, use_cache=False).logits[0].float().cpu()
        save_file({"ids": x[0].cpu(), "logits": logits.contiguous()}, os.path.join(d, "reference.safetensors"))
    n_params, n_emb = count_params(model)
    ev = dict(
        model=name,
        summary=spec["summary"],
        protocol="mean NLL over non-overlapping windows of %d tokens of the split's token stream (the split "
                 "file encoded whole, no special tokens), each window scored from a fresh state: %d predictions per "
                 "full window; perplexity = exp(mean NLL)" % (WINDOW, WINDOW - 1),
        window=WINDOW,
        transformers=res,
        splits=id_meta,
        params=n_params,
        embedding_params=n_emb,
        training={k: v for k, v in run.items() if k not in ("dir",)},
        greedy_samples=samples,
        versions=dict(torch=torch.__version__, transformers=__import__("transformers").__version__,
                      tokenizers=__import__("tokenizers").__version__, python=platform.python_version()),
        device=torch.cuda.get_device_name(0),
    )
    with open(os.path.join(d, "eval.json"), "w") as f:
        json.dump(ev, f, indent=1)
        f.write("\n")
    logp = os.path.join(work, "runs", "%s-e%g.log" % (name, run["epochs_planned"]))
    if os.path.exists(logp):
        shutil.copy(logp, os.path.join(d, "train_log.txt"))
    sizes = {fn: os.path.getsize(os.path.join(d, fn)) for fn in sorted(os.listdir(d))}
    log("%s folder: %s, total %.2f MB" % (name, sizes, sum(sizes.values()) / 1e6))
    tar_dir(d, os.path.join(out, name + ".tar"), name)
    return ev


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=".corpus")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/train_small")
    ap.add_argument("--tokenizer", help="reuse this tokenizer folder instead of training one")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--epochs", default="8,16", help="one run per architecture and value, in parallel")
    ap.add_argument("--budget", type=float, default=300, help="seconds of training per run (wall clock)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--slice-windows", type=int, default=2, help="test windows CI re-measures")
    ap.add_argument("--smoke", action="store_true")
    # child mode
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--arch", help=argparse.SUPPRESS)
    ap.add_argument("--run-epochs", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run_child(args)
        return 0

    t0 = time.time()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(os.path.join(args.work, "runs"), exist_ok=True)
    report_environment()
    tok_dir = os.path.join(args.work, "tokenizer")
    if args.tokenizer:
        os.makedirs(tok_dir, exist_ok=True)
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(args.tokenizer, fn), os.path.join(tok_dir, fn))
        log("tokenizer: reusing %s" % args.tokenizer)
    else:
        build_tokenizer(args.corpus, tok_dir)
    check_tokenizer(tok_dir, repo)
    id_meta = encode_splits(args.corpus, tok_dir, args.work)
    with open(os.path.join(tok_dir, "ids.json"), "w") as f:
        json.dump(id_meta, f, indent=1)
    tar_dir(tok_dir, os.path.join(args.out, "tokenizer.tar"), "tokenizer")
    log("tokenizer stage done at %.0fs" % (time.time() - t0))

    specs = arch_specs()
    names = [n for n in args.only.split(",") if n] or list(specs)
    epochs = [float(e) for e in args.epochs.split(",") if e]
    procs = []
    for name in names:
        for e in epochs:
            logp = os.path.join(args.work, "runs", "%s-e%g.log" % (name, e))
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--arch", name, "--run-epochs", str(e),
                   "--work", args.work, "--budget", str(args.budget), "--batch", str(args.batch), "--lr", str(args.lr),
                   "--wd", str(args.wd), "--max-steps", str(args.max_steps), "--out", args.out]
            if args.smoke:
                cmd.append("--smoke")
            fh = open(logp, "w")
            # tee: the child's lines go to its log and to our stdout
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
            procs.append(dict(name=name, epochs=e, proc=p, log=fh, path=logp))
    import selectors

    sel = selectors.DefaultSelector()
    for pr in procs:
        sel.register(pr["proc"].stdout, selectors.EVENT_READ, pr)
    open_streams = len(procs)
    hard_deadline = time.time() + args.budget + 120
    while open_streams and time.time() < hard_deadline:
        for key, _ in sel.select(timeout=5):
            pr = key.data
            line = key.fileobj.readline()
            if not line:
                sel.unregister(key.fileobj)
                open_streams -= 1
                continue
            pr["log"].write(line)
            pr["log"].flush()
            if "step" in line and "eval" not in line and "done" not in line and "budget" not in line:
                # print one progress line in four to keep the log short
                pr["n"] = pr.get("n", 0) + 1
                if pr["n"] % 4 != 1:
                    continue
            sys.stdout.write(line)
            sys.stdout.flush()
    for pr in procs:
        try:
            pr["proc"].wait(timeout=max(1, hard_deadline - time.time()))
        except subprocess.TimeoutExpired:
            log("killing %s e%g (past the deadline)" % (pr["name"], pr["epochs"]))
            pr["proc"].kill()
        pr["log"].close()
        log("%s e%g exit %s" % (pr["name"], pr["epochs"], pr["proc"].returncode))
    log("training stage done at %.0fs" % (time.time() - t0))

    summary = dict(runs=[], models={}, seconds=None, smoke=args.smoke)
    for name in names:
        runs = []
        for e in epochs:
            rp = os.path.join(args.work, "runs", "%s-e%g" % (name, e), "run.json")
            if os.path.exists(rp):
                r = json.load(open(rp))
                runs.append(r)
                summary["runs"].append({k: v for k, v in r.items() if k != "history"})
                log("%s e%g: best valid ppl %.3f at epoch %.1f (step %d of %d, %.3fs/step)" % (
                    name, e, r["best_valid_ppl"], r["best_epoch"], r["best_step"], r["steps_done"], r["seconds_per_step"]))
        if not runs:
            log("%s: no finished run" % name)
            continue
        best = min(runs, key=lambda r: r["best_valid_nll"])
        log("%s: choosing the %g-epoch run" % (name, best["epochs_planned"]))
        try:
            ev = final_eval(name, specs[name], best, tok_dir, args.work, args.out, args, id_meta)
            summary["models"][name] = {k: ev[k] for k in ("transformers", "params", "embedding_params")}
        except Exception:  # noqa: BLE001
            log("final eval of %s failed:\n%s" % (name, traceback.format_exc()))
    summary["seconds"] = time.time() - t0
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    log("ALL DONE in %.0fs" % (time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
