"""Make the reference fixtures of package safetensors with the reference
library (safetensors 0.8, torch 2.11, transformers 5.17).

    python3 gen_reference.py OUTDIR

writes into OUTDIR:
  reference.safetensors         every bit pattern of F16/BF16/F8_*, F64 edge
                                values, each next to torch's float32 decoding
                                ("X" and "X.f32"), plus integer dtypes
  writer_reference.safetensors  one tensor of each dtype; Write must reproduce
                                these bytes exactly
  hf_sharded.tar                a tiny random NemotronH saved by
                                save_pretrained in several shards, with
                                manifest.json (name -> dtype, shape, float64 sum,
                                first values) read back through safe_open
and prints a check that the reference library reads testdata/tiny.safetensors
(written by our Write) and re-saves it to the same bytes.
"""

import io
import json
import os
import sys
import tarfile
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

out = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(20260615)


def bits(dtype, n, signed):
    """All n-bit patterns viewed as dtype."""
    if n == 16:
        raw = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    else:
        raw = torch.arange(0, 256, dtype=torch.int32).to(torch.uint8)
    return raw.view(dtype).contiguous()


# 1. Exhaustive decode tables.
ref = {}
for name, dtype, n in [
    ("f16_all", torch.float16, 16),
    ("bf16_all", torch.bfloat16, 16),
    ("e4m3_all", torch.float8_e4m3fn, 8),
    ("e5m2_all", torch.float8_e5m2, 8),
    ("e8m0_all", getattr(torch, "float8_e8m0fnu", None), 8),
]:
    if dtype is None:
        print("skip", name, "(torch lacks the dtype)")
        continue
    try:
        t = bits(dtype, n, True)
        ref[name] = t
        ref[name + ".f32"] = t.float().contiguous()
    except Exception as e:  # noqa: BLE001
        print("skip", name, repr(e))
        ref.pop(name, None)

f64 = torch.cat([
    torch.randn(200, dtype=torch.float64),
    torch.randn(100, dtype=torch.float64) * 1e30,
    torch.randn(100, dtype=torch.float64) * 1e-40,
    torch.tensor([
        float("inf"), float("-inf"), float("nan"), 0.0, -0.0,
        3.4028234663852886e38, 3.4028235677973366e38, 3.4028236e38, 1e39, -1e39,
        1.401298464324817e-45, 7.006492321624085e-46, 7.006492321624087e-46, 1e-46,
        1.0 + 2.0**-24, 1.0 + 3 * 2.0**-24, 1.0 - 2.0**-25, 2.0**-126 * (1 - 2.0**-24),
    ], dtype=torch.float64),
])
ref["f64_vals"] = f64
ref["f64_vals.f32"] = f64.float()
for name, dtype, lo, hi in [
    ("i64", torch.int64, -(2**63), 2**63 - 1), ("i32", torch.int32, -(2**31), 2**31 - 1),
    ("i16", torch.int16, -(2**15), 2**15 - 1), ("i8", torch.int8, -128, 127), ("u8", torch.uint8, 0, 255),
]:
    ref[name] = torch.tensor([lo, hi, 0, 1, -1 if lo < 0 else 2], dtype=dtype)
ref["bool"] = torch.tensor([True, False, True])
save_file(ref, os.path.join(out, "reference.safetensors"), metadata={"format": "pt"})
print("reference.safetensors:", sorted(ref))

# 2. One tensor of each dtype, names in the opposite order to dtypes, a scalar
# and an empty tensor: the reference layout our Write must reproduce.
wr = {
    "z.bool": torch.tensor([True, False, True]),
    "y.u8": torch.randint(0, 256, (5,), dtype=torch.uint8),
    "x.i8": torch.randint(-128, 128, (2, 3), dtype=torch.int8),
    "w.e5m2": torch.randn(7).to(torch.float8_e5m2),
    "v.e4m3": torch.randn(3, 3).to(torch.float8_e4m3fn),
    "t.i16": torch.randint(-1000, 1000, (4,), dtype=torch.int16),
    "r.f16": torch.randn(3, 1).half(),
    "q.bf16": torch.randn(5).bfloat16(),
    "p.i32": torch.randint(-(2**31), 2**31 - 1, (3,), dtype=torch.int32),
    "n.f32": torch.randn(2, 2, 2),
    "n0.f32": torch.randn(0, 3),
    "a.f32": torch.tensor(3.5),
    "m.f64": torch.randn(3, dtype=torch.float64),
    "l.i64": torch.randint(-(2**40), 2**40, (2,), dtype=torch.int64),
}
for name, dt in [("u.e8m0", "float8_e8m0fnu"), ("s.u16", "uint16"), ("o.u32", "uint32"), ("k.u64", "uint64")]:
    if hasattr(torch, dt):
        t = torch.randint(0, 200, (3,), dtype=torch.int32)
        wr[name] = t.to(torch.uint8).view(torch.float8_e8m0fnu) if "e8m0" in dt else t.to(getattr(torch, dt))
path = os.path.join(out, "writer_reference.safetensors")
try:
    save_file(wr, path, metadata={"format": "pt"})
except Exception as e:  # noqa: BLE001  (an unsigned dtype safetensors cannot save)
    print("writer_reference: retry without unsigned/e8m0:", repr(e))
    for k in ["u.e8m0", "s.u16", "o.u32", "k.u64"]:
        wr.pop(k, None)
    save_file(wr, path, metadata={"format": "pt"})
with open(path, "rb") as f:
    n = int.from_bytes(f.read(8), "little")
    print("writer_reference header:", f.read(n).decode())

# 3. Our Write's golden file, read and re-saved by the reference library.
tiny = os.path.join(here, "tiny.safetensors")
if os.path.exists(tiny):
    t = load_file(tiny)
    with safe_open(tiny, "pt") as f:
        md = f.metadata()
    for k, v in sorted(t.items()):
        print("tiny", k, v.dtype, list(v.shape), v.float().tolist())
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "x.safetensors")
        save_file(t, p, metadata=md)
        same = open(p, "rb").read() == open(tiny, "rb").read()
    print("tiny.safetensors re-saved by the reference library is byte-identical:", same)

# 4. A tiny random NemotronH, mixed BF16/F32 like the hub checkpoints, sharded.
from transformers import NemotronHConfig, NemotronHForCausalLM  # noqa: E402

cfg = NemotronHConfig(
    vocab_size=128, hidden_size=64, hybrid_override_pattern="M*-E",
    mamba_num_heads=4, mamba_head_dim=16, n_groups=2, ssm_state_size=8, conv_kernel=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=96,
    n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
    moe_shared_expert_intermediate_size=48, moe_latent_size=32, routed_scaling_factor=2.5,
    tie_word_embeddings=False,
)
model = NemotronHForCausalLM(cfg)
with torch.no_grad():
    for p in model.parameters():
        p.uniform_(-1, 1)
model = model.to(torch.bfloat16)
for name, mod in model.named_modules():
    for pname in ["A_log", "D", "dt_bias", "e_score_correction_bias"]:
        p = getattr(mod, pname, None)
        if isinstance(p, torch.nn.Parameter):
            p.data = p.data.float()
    for pname, buf in list(mod.named_buffers(recurse=False)):
        if pname == "e_score_correction_bias":
            mod._buffers[pname] = buf.float()
with tempfile.TemporaryDirectory() as d:
    model.save_pretrained(d, max_shard_size="40KB")
    index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    manifest = {}
    for name, shard in sorted(index["weight_map"].items()):
        with safe_open(os.path.join(d, shard), "pt") as f:
            t = f.get_tensor(name)
        manifest[name] = {
            "shard": shard,
            "dtype": str(t.dtype).replace("torch.", ""),
            "shape": list(t.shape),
            "sum": t.double().sum().item(),
            "first": t.flatten()[:4].float().tolist(),
        }
    json.dump(manifest, open(os.path.join(d, "manifest.json"), "w"), indent=1, sort_keys=True)
    with tarfile.open(os.path.join(out, "hf_sharded.tar"), "w") as tar:
        for fn in sorted(os.listdir(d)):
            tar.add(os.path.join(d, fn), arcname="hf_sharded/" + fn)
            print("hf_sharded/" + fn, os.path.getsize(os.path.join(d, fn)))
