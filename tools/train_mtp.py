#!/usr/bin/env python3
"""Train a multi-token-prediction (MTP) head for models/qwen35-kjv.

Runs on the GPU machine (PyTorch 2.11, transformers 5.17, tokenizers,
safetensors; no network). The target model is loaded with transformers
(Qwen3_5ForCausalLM) and frozen; only the MTP head trains.

    PYTHONUNBUFFERED=1 python3 tools/train_mtp.py --model models/qwen35-kjv \\
        --corpus .corpus --out $OUT --budget 165   (the shipped head: 130 s)

The head is the Qwen3-Next / Qwen3.5 MTP layer (checkpoint names mtp.*),
written here from its published structure:

    e   = pre_fc_norm_embedding(embed(token[t+1]))       norms are "1+w" RMSNorm
    h   = pre_fc_norm_hidden(hidden[t])                  hidden: the target's last
                                                         hidden state AFTER its final
                                                         norm (what lm_head reads)
    x   = fc(concat(e, h))                               2H -> H, no bias, embedding first
    x   = decoder layer (gated attention at position t + SwiGLU MLP, pre-norm residual)
    out = mtp.norm(x);  logits = lm_head(out)            predicts token[t+2]

Drafting chains the layer: the next row takes out (normed) as its hidden and
the drafted token as its token. Embeddings and lm_head (tied) are the
target's and are not stored.

Training: the target's hidden states for the training split are computed once
(windows of 512 tokens from a fresh state, at offsets 0 and 256), then the head
learns to match the target's next-token distribution at t+1 (soft
cross-entropy against softmax(lm_head(hidden[t+1]))), which is what greedy
speculative decoding accepts; a second, chained pass (each row's hidden is the
previous row's MTP output) trains the chained drafts. The layer starts from a
copy of the target's last attention layer. The checkpoint with the best
agreement with the target's greedy token on the validation split is kept.

Output under --out: mtp.safetensors (matrices bf16, 1-D tensors fp32),
mtp_reference.safetensors (a few positions of the test split: token ids, the
target's hidden states, the MTP outputs and logits computed in fp32 from the
stored weights, for replayssm's Go test), mtp_eval.json, train_mtp_log.txt.
"""

import argparse
import json
import math
import os
import sys
import time

WINDOW = 512
LOG = []


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.append(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/qwen35-kjv")
    ap.add_argument("--corpus", default=".corpus")
    ap.add_argument("--test", default="models/kjv-test.txt")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--budget", type=float, default=170, help="seconds for the whole script")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--chain-weight", type=float, default=0.3)
    ap.add_argument("--dry", action="store_true", help="CPU, tiny data: check the pipeline")
    args = ap.parse_args()
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    try:
        run(args, t0)
    finally:
        with open(os.path.join(args.out, "train_mtp_log.txt"), "w") as f:
            f.write("\n".join(LOG) + "\n")


def build(torch, cfg):
    nn = torch.nn
    F = torch.nn.functional
    H, nh, nkv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    inter, eps = cfg.intermediate_size, cfg.rms_norm_eps

    class Norm(nn.Module):  # Qwen "1+w" RMSNorm, computed in fp32
        def __init__(self, n):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(n))

        def forward(self, x):
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
            return (y * (1.0 + self.weight.float())).to(x.dtype)

    def rope(x, cos, sin, rd):
        xr, rest = x[..., :rd], x[..., rd:]
        x1, x2 = xr[..., : rd // 2], xr[..., rd // 2:]
        rot = torch.cat([-x2, x1], -1)
        return torch.cat([(xr.float() * cos + rot.float() * sin).to(x.dtype), rest], -1)

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(H, nh * hd * 2, bias=False)
            self.k_proj = nn.Linear(H, nkv * hd, bias=False)
            self.v_proj = nn.Linear(H, nkv * hd, bias=False)
            self.o_proj = nn.Linear(nh * hd, H, bias=False)
            self.q_norm = Norm(hd)
            self.k_norm = Norm(hd)

        def forward(self, x, cos, sin, rd):
            B, S, _ = x.shape
            qg = self.q_proj(x).view(B, S, nh, 2 * hd)  # per head [q; gate]
            q, gate = qg[..., :hd], qg[..., hd:].reshape(B, S, nh * hd)
            q = rope(self.q_norm(q).transpose(1, 2), cos, sin, rd)
            k = rope(self.k_norm(self.k_proj(x).view(B, S, nkv, hd)).transpose(1, 2), cos, sin, rd)
            v = self.v_proj(x).view(B, S, nkv, hd).transpose(1, 2)
            rep = nh // nkv
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # scale hd^-1/2
            o = o.transpose(1, 2).reshape(B, S, nh * hd) * torch.sigmoid(gate)
            return self.o_proj(o)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(H, inter, bias=False)
            self.up_proj = nn.Linear(H, inter, bias=False)
            self.down_proj = nn.Linear(inter, H, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = Norm(H)
            self.self_attn = Attn()
            self.post_attention_layernorm = Norm(H)
            self.mlp = MLP()

        def forward(self, x, cos, sin, rd):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin, rd)
            return x + self.mlp(self.post_attention_layernorm(x))

    class MTP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2 * H, H, bias=False)
            self.pre_fc_norm_embedding = Norm(H)
            self.pre_fc_norm_hidden = Norm(H)
            self.layers = nn.ModuleList([Layer()])
            self.norm = Norm(H)

        def forward(self, emb, hid, cos, sin, rd):
            x = self.fc(torch.cat([self.pre_fc_norm_embedding(emb), self.pre_fc_norm_hidden(hid)], -1))
            return self.norm(self.layers[0](x, cos, sin, rd))

    return MTP()


def conventions_check(torch, model, x, lm_w, cos_sin, rd, dev):
    """last_hidden_state is after the final norm (lm_head of it gives the logits); our RoPE is transformers'."""
    with torch.no_grad():
        out = model(input_ids=x, use_cache=False, output_hidden_states=True)
        last = model.model(input_ids=x, use_cache=False).last_hidden_state
        log("check: |lm_head(last_hidden_state) - logits| max %.2e" % (last @ lm_w.T - out.logits).abs().max().item())
        hs = getattr(out, "hidden_states", None)
        if hs is not None:
            log("check: hidden_states[-1] vs last_hidden_state max diff %.2e" % (hs[-1] - last).abs().max().item())
        try:
            n = x.shape[1]
            pid = torch.arange(n, device=dev)[None]
            c, s = model.model.rotary_emb(last, pid)
            c, s = c.reshape(-1, c.shape[-1])[:n], s.reshape(-1, s.shape[-1])[:n]
            mc, ms = cos_sin(n)
            log("check: rotary_emb cos/sin width %d, max diff vs ours %.2e / %.2e" % (
                c.shape[-1], (c[:, :rd].float() - mc).abs().max().item(), (s[:, :rd].float() - ms).abs().max().item()))
        except Exception as e:  # noqa: BLE001
            log("check: rotary_emb comparison skipped: %r" % (e,))


def run(args, t0):
    import torch
    import torch.nn.functional as F
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    import transformers

    dev = "cpu" if args.dry else "cuda"
    log("torch %s transformers %s device %s" % (torch.__version__, transformers.__version__,
                                                  torch.cuda.get_device_name(0) if dev == "cuda" else "cpu"))
    torch.manual_seed(7)
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))

    def encode(path, limit=None):
        text = open(path, encoding="utf-8").read()
        if limit:
            text = text[:limit]
        return torch.tensor(tok.encode(text, add_special_tokens=False).ids, dtype=torch.long)

    lim = 20000 if args.dry else None
    train = encode(os.path.join(args.corpus, "kjv-train.txt"), lim)
    valid = encode(os.path.join(args.corpus, "kjv-valid.txt"), lim)
    test = encode(args.test, lim)
    log("tokens: train %d valid %d test %d (%.1fs)" % (train.numel(), valid.numel(), test.numel(), time.time() - t0))

    cls = getattr(transformers, json.load(open(os.path.join(args.model, "config.json")))["architectures"][0])
    model = cls.from_pretrained(args.model, dtype=torch.float32).to(dev).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    cfg = model.config
    log("target %s, attn %s" % (type(model).__name__, getattr(cfg, "_attn_implementation", "?")))
    embed = model.model.embed_tokens.weight  # [V, H]
    lm_w = model.lm_head.weight              # tied
    H, V = cfg.hidden_size, cfg.vocab_size
    rp = getattr(cfg, "rope_parameters", None) or {}
    theta = float(rp.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))
    prf = float(rp.get("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", 1.0)))
    rd = int(cfg.head_dim * prf)
    log("rope: theta %g rotary dim %d of %d" % (theta, rd, cfg.head_dim))

    def cos_sin(S, offset=0):
        inv = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd))
        pos = torch.arange(offset, offset + S, dtype=torch.float64)
        fr = pos[:, None] * inv[None]
        emb = torch.cat([fr, fr], -1)
        return emb.cos().float().to(dev), emb.sin().float().to(dev)

    # Check the conventions against transformers: last_hidden_state is after
    # the final norm (lm_head of it is the logits), and our RoPE is theirs.
    x = test[:64][None].to(dev)
    try:
        conventions_check(torch, model, x, lm_w, cos_sin, rd, dev)
    except Exception as e:  # noqa: BLE001
        log("check failed: %r" % (e,))

    # Target hidden states (post-norm) over windows from a fresh state.
    def hidden_windows(ids, offsets, S=WINDOW, bs=64):
        wins = []
        for off in offsets:
            n = (ids.numel() - off) // S
            wins.append(ids[off:off + n * S].view(n, S))
        wins = torch.cat(wins)
        hs = torch.empty(wins.shape[0], S, H, dtype=torch.bfloat16, device=dev)
        with torch.no_grad(), torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
            for i in range(0, wins.shape[0], bs):
                xb = wins[i:i + bs].to(dev)
                hs[i:i + bs] = model.model(input_ids=xb, use_cache=False).last_hidden_state.to(torch.bfloat16)
        return wins.to(dev), hs

    S = 64 if args.dry else WINDOW
    t1 = time.time()
    tr_ids, tr_h = hidden_windows(train, [0, S // 2], S)
    va_ids, va_h = hidden_windows(valid, [0], S)
    te_ids, te_h = hidden_windows(test, [0], S)
    log("target hidden states: %d train windows, %d valid, %d test of %d tokens (%.1fs)" % (
        tr_ids.shape[0], va_ids.shape[0], te_ids.shape[0], S, time.time() - t1))

    mtp = build(torch, cfg).to(dev)
    # Start the layer from the target's last attention layer.
    att = [i for i, t in enumerate(cfg.layer_types) if t == "full_attention"][-1]
    src = model.model.layers[att].state_dict()
    dst = mtp.layers[0].state_dict()
    copied = [k for k in dst if k in src and src[k].shape == dst[k].shape]
    mtp.layers[0].load_state_dict({k: (src[k] if k in copied else dst[k]) for k in dst})
    with torch.no_grad():
        mtp.norm.weight.copy_(model.model.norm.weight)
        torch.nn.init.normal_(mtp.fc.weight, std=0.02)
    log("MTP head: %d parameters; layer initialised from target layer %d (%d of %d tensors)" % (
        sum(p.numel() for p in mtp.parameters()), att, len(copied), len(dst)))
    cs = cos_sin(S - 2)

    def rows(ids, h, chain_from=None):
        """MTP inputs for rows t = 0..S-3: embed(ids[t+1]), hidden[t]."""
        e = F.embedding(ids[:, 1:-1], embed)
        hid = h[:, :-2] if chain_from is None else torch.cat([h[:, :1], chain_from[:, :-1]], 1)
        return e, hid

    def step_loss(ids, h):
        with torch.no_grad():
            tgt = torch.softmax((h[:, 1:-1].float() @ lm_w.T), -1)  # target's distribution at t+1
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
            e, hid = rows(ids, h)
            o1 = mtp(e, hid.to(e.dtype), *cs, rd)
            l1 = -(tgt * torch.log_softmax(o1.float() @ lm_w.T, -1)).sum(-1).mean()
            loss = l1
            if args.chain_weight > 0:
                e, hid = rows(ids, h.to(o1.dtype), chain_from=o1)
                o2 = mtp(e, hid, *cs, rd)
                l2 = -(tgt * torch.log_softmax(o2.float() @ lm_w.T, -1)).sum(-1).mean()
                loss = loss + args.chain_weight * l2
        return loss, l1

    def evaluate(ids, h, bs=16):
        mtp.eval()
        n = agree = gt = tacc = agree2 = 0
        with torch.no_grad():
            for i in range(0, ids.shape[0], bs):
                xb, hb = ids[i:i + bs], h[i:i + bs].float()
                e, hid = rows(xb, hb)
                o = mtp(e, hid, *cs, rd)
                pred = (o @ lm_w.T).argmax(-1)
                targ = (hb[:, 1:-1] @ lm_w.T).argmax(-1)
                e2, hid2 = rows(xb, hb, chain_from=o)
                pred2 = (mtp(e2, hid2, *cs, rd) @ lm_w.T).argmax(-1)
                n += pred.numel()
                agree += (pred == targ).sum().item()
                agree2 += (pred2 == targ).sum().item()
                gt += (pred == xb[:, 2:]).sum().item()
                tacc += (targ == xb[:, 2:]).sum().item()
        mtp.train()
        return dict(rows=n, agree_target=agree / n, agree_target_chained=agree2 / n, top1=gt / n, target_top1=tacc / n)

    params = list(mtp.parameters())
    decay = [p for p in params if p.dim() >= 2]
    nodecay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    deadline = t0 + args.budget - 35  # leave time for evaluation and saving
    train_s = max(5.0, deadline - time.time())
    log("training for %.0fs, batch %d x %d" % (train_s, args.batch, S))
    t_tr = time.time()
    best, best_state, step, hist = -1.0, None, 0, []
    next_eval = t_tr + 8
    g = torch.Generator(device="cpu").manual_seed(11)
    while True:
        el = time.time() - t_tr
        if el >= train_s or (args.dry and step >= 30):
            break
        frac = el / train_s
        lr = args.lr * min(1.0, (step + 1) / 30) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for gr in opt.param_groups:
            gr["lr"] = lr
        idx = torch.randint(0, tr_ids.shape[0], (args.batch,), generator=g).to(dev)
        loss, l1 = step_loss(tr_ids[idx], tr_h[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if time.time() >= next_eval or (args.dry and step % 10 == 0):
            next_eval = time.time() + 8
            ev = evaluate(va_ids, va_h)
            hist.append(dict(step=step, t=round(time.time() - t_tr, 1), loss=round(l1.item(), 4), **ev))
            log("step %5d %5.1fs lr %.2e loss %.4f | valid agree %.4f chained %.4f top1 %.4f (target top1 %.4f)" % (
                step, time.time() - t_tr, lr, l1.item(), ev["agree_target"], ev["agree_target_chained"], ev["top1"],
                ev["target_top1"]))
            if ev["agree_target"] > best:
                best = ev["agree_target"]
                best_state = {k: v.detach().clone() for k, v in mtp.state_dict().items()}
    ev = evaluate(va_ids, va_h)
    log("final step %d: valid agree %.4f" % (step, ev["agree_target"]))
    if ev["agree_target"] > best or best_state is None:
        best = ev["agree_target"]
        best_state = {k: v.detach().clone() for k, v in mtp.state_dict().items()}
    mtp.load_state_dict(best_state)

    # Store: matrices bf16, 1-D fp32; then compute everything from the stored values.
    tensors = {}
    for k, v in mtp.state_dict().items():
        v = v.detach().float().cpu()
        tensors["mtp." + k] = (v.to(torch.bfloat16) if v.dim() >= 2 else v).contiguous()
    save_file(tensors, os.path.join(args.out, "mtp.safetensors"), metadata={"format": "pt"})
    log("saved mtp.safetensors: %d tensors, %d bytes" % (len(tensors), os.path.getsize(os.path.join(args.out, "mtp.safetensors"))))
    mtp.load_state_dict({k[4:]: v.float() for k, v in tensors.items()})
    mtp.float()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    # Held-out test split: target hidden states in fp32 this time.
    with torch.no_grad():
        te_h32 = torch.cat([model.model(input_ids=te_ids[i:i + 16], use_cache=False).last_hidden_state
                            for i in range(0, te_ids.shape[0], 16)])
    res = evaluate(te_ids, te_h32)
    log("test (%d rows, windows of %d from a fresh state): MTP top-1 %.4f, agreement with the target's greedy token "
        "%.4f (chained %.4f); target's own top-1 %.4f" % (res["rows"], S, res["top1"], res["agree_target"],
                                                         res["agree_target_chained"], res["target_top1"]))

    # Reference for the Go test: the first N test tokens.
    N = 16
    ids = test[:N].to(dev)[None]
    with torch.no_grad():
        th = model.model(input_ids=ids, use_cache=False).last_hidden_state[0]  # [N, H]
        c, s = cos_sin(N)
        e = F.embedding(ids[0, 1:], embed)[None]
        o = mtp(e, th[None, :-1], c[:N - 1], s[:N - 1], rd)[0]  # rows 0..N-2
        lg = o @ lm_w.T
        ct = int(lg[-1].argmax())
        e2 = torch.cat([e, embed[ct][None, None]], 1)
        h2 = torch.cat([th[None, :-1], o[None, -1:]], 1)
        o2 = mtp(e2, h2, c, s, rd)[0]
        d = (o2[:-1] - o).abs().max().item()
    ref = {
        "ids": ids[0].to(torch.int32).cpu(),
        "target_hidden": th.float().cpu().contiguous(),
        "mtp_hidden": o.float().cpu().contiguous(),
        "mtp_logits_rows": torch.tensor([N - 4, N - 3, N - 2], dtype=torch.int32),
        "mtp_logits": lg[-3:].float().cpu().contiguous(),
        "chain_token": torch.tensor([ct], dtype=torch.int32),
        "chain_hidden": o2[-1:].float().cpu().contiguous(),
        "chain_logits": (o2[-1:] @ lm_w.T).float().cpu().contiguous(),
    }
    save_file(ref, os.path.join(args.out, "mtp_reference.safetensors"), metadata={"format": "pt"})
    log("saved mtp_reference.safetensors (%d bytes); causal check %.1e; chain token %d" % (
        os.path.getsize(os.path.join(args.out, "mtp_reference.safetensors")), d, ct))
    summary = dict(steps=step, train_seconds=round(time.time() - t_tr, 1), batch=args.batch, window=S,
                   chain_weight=args.chain_weight, lr=args.lr, valid_best_agree=best, test=res, history=hist,
                   torch=torch.__version__, transformers=transformers.__version__, total_seconds=round(time.time() - t0, 1))
    with open(os.path.join(args.out, "mtp_eval.json"), "w") as f:
        json.dump(summary, f, indent=1)
    log("done in %.1fs" % (time.time() - t0))


if __name__ == "__main__":
    sys.exit(main())
