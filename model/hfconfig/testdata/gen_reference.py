"""Make the reference fixtures of package hfconfig with transformers 5.17.

    python3 gen_reference.py OUTDIR

For each case, builds the transformers configuration, saves it with
save_pretrained (testdata/hf/CASE.json is that config.json, byte for byte), then
builds the model on the meta device (no memory, no weights) and records what
transformers itself made of the config (testdata/hf/CASE.expect.json): the
module class of every layer's mixer and FFN, the parameter shapes of the first
layer of each kind, and the config attributes after transformers' own
normalisation. Package hfconfig's tests compare Parse against these.
Everything goes into OUTDIR/hfconfig.tar.
"""

import json
import math
import os
import re
import sys
import tarfile
import tempfile
import traceback

import torch
import transformers as tf

out = sys.argv[1]

NANO4B_PATTERN = "M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-"
SUPER_PATTERN = ("MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*"
                 "EMEMEMEMEM*EMEMEMEM*EMEMEMEME")

CASES = {
    "nemotron_h_nano4b": lambda: (tf.NemotronHConfig(
        vocab_size=131072, hidden_size=3136, hybrid_override_pattern=NANO4B_PATTERN,
        mamba_num_heads=96, mamba_head_dim=80, ssm_state_size=128, n_groups=8, conv_kernel=4,
        num_attention_heads=40, num_key_value_heads=8, head_dim=128, intermediate_size=12544,
        layer_norm_epsilon=1e-5, tie_word_embeddings=False, chunk_size=128,
    ), tf.NemotronHForCausalLM),
    "nemotron_h_super": lambda: (tf.NemotronHConfig(
        vocab_size=131072, hidden_size=4096, hybrid_override_pattern=SUPER_PATTERN,
        mamba_num_heads=128, mamba_head_dim=64, ssm_state_size=128, n_groups=8, conv_kernel=4,
        num_attention_heads=32, num_key_value_heads=2, head_dim=128,
        n_routed_experts=512, num_experts_per_tok=22, moe_intermediate_size=2688,
        moe_shared_expert_intermediate_size=5376, n_shared_experts=1, moe_latent_size=1024,
        routed_scaling_factor=5.0, n_group=1, topk_group=1, norm_topk_prob=True,
        num_nextn_predict_layers=1, mtp_hybrid_override_pattern="*E",
    ), tf.NemotronHForCausalLM),
    "qwen3_5_4b": lambda: (tf.Qwen3_5Config(
        text_config=dict(
            vocab_size=248320, hidden_size=2560, num_hidden_layers=32, intermediate_size=9216,
            num_attention_heads=16, num_key_value_heads=4, head_dim=256,
            linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
            linear_value_head_dim=128, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
            tie_word_embeddings=True, eos_token_id=248044,
            rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25,
                                 mrope_section=[11, 11, 10], mrope_interleaved=True),
            mtp_num_hidden_layers=1,
        ),
        tie_word_embeddings=True,
    ), tf.Qwen3_5ForConditionalGeneration),
    "qwen3_next_80b": lambda: (tf.Qwen3NextConfig(
        rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25),
    ), tf.Qwen3NextForCausalLM),
    "qwen3_next_mixed": lambda: (tf.Qwen3NextConfig(
        vocab_size=1000, hidden_size=256, num_hidden_layers=8, intermediate_size=384,
        num_attention_heads=8, num_key_value_heads=2, head_dim=64,
        linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=32, linear_value_head_dim=48,
        num_experts=16, num_experts_per_tok=4, moe_intermediate_size=64, shared_expert_intermediate_size=0,
        decoder_sparse_step=2, mlp_only_layers=[3], full_attention_interval=3, norm_topk_prob=False,
    ), tf.Qwen3NextForCausalLM),
    "qwen3_5_moe_122b_text": lambda: (tf.Qwen3_5MoeTextConfig(
        vocab_size=248320, hidden_size=3072, num_hidden_layers=48, num_attention_heads=32,
        num_key_value_heads=2, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=64,
        linear_key_head_dim=128, linear_value_head_dim=128, num_experts=256, num_experts_per_tok=8,
        moe_intermediate_size=1024, shared_expert_intermediate_size=1024, rms_norm_eps=1e-6,
        rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25,
                             mrope_section=[11, 11, 10], mrope_interleaved=True),
    ), tf.Qwen3_5MoeForCausalLM),
    "mamba2_130m": lambda: (tf.Mamba2Config(
        vocab_size=50288, hidden_size=768, num_hidden_layers=24, num_heads=24, head_dim=64,
        state_size=128, n_groups=1, expand=2, conv_kernel=4, chunk_size=256,
        tie_word_embeddings=True, layer_norm_epsilon=1e-5,
    ), tf.Mamba2ForCausalLM),
}


def find_layers(model):
    for path in ["model.language_model.layers", "model.layers", "backbone.layers"]:
        obj = model
        try:
            for p in path.split("."):
                obj = getattr(obj, p)
            return path, obj
        except AttributeError:
            continue
    raise RuntimeError("no layers found")


def branches(layer):
    if hasattr(layer, "mixer"):
        return type(layer.mixer).__name__, None
    mixer = getattr(layer, "linear_attn", None) or getattr(layer, "self_attn", None)
    return type(mixer).__name__, type(layer.mlp).__name__


def jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return repr(v)


EXPERT = re.compile(r"experts\.(\d+)\.")

tar = tarfile.open(os.path.join(out, "hfconfig.tar"), "w")
for case, make in CASES.items():
    try:
        cfg, cls = make()
        with tempfile.TemporaryDirectory() as d:
            cfg.save_pretrained(d)
            tar.add(os.path.join(d, "config.json"), arcname=f"hf/{case}.json")
        with torch.device("meta"):
            model = cls(cfg)
        path, layers = find_layers(model)
        kinds, params, seen = [], {}, set()
        for i, layer in enumerate(layers):
            k = branches(layer)
            kinds.append(list(k))
            if k not in seen:
                seen.add(k)
                params[str(i)] = {n: list(p.shape) for n, p in layer.named_parameters()
                                  if not (EXPERT.search(n) and EXPERT.search(n).group(1) != "0")}
        top = {n: list(p.shape) for n, p in model.named_parameters() if ".layers." not in n}
        text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        attrs = {k: jsonable(v) for k, v in sorted(text.to_dict().items())
                 if k not in ("vision_config", "text_config", "id2label", "label2id")}
        expect = {
            "model_type": cfg.model_type, "text_model_type": text.model_type,
            "tie_word_embeddings": bool(getattr(text, "tie_word_embeddings", False)),
            "outer_tie_word_embeddings": bool(getattr(cfg, "tie_word_embeddings", False)),
            "layers_path": path, "layers": kinds, "layer_params": params, "top_params": top,
            "attrs": attrs,
        }
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "e.json")
            json.dump(expect, open(p, "w"), indent=1, sort_keys=True)
            tar.add(p, arcname=f"hf/{case}.expect.json")
        print("ok", case, cfg.model_type, len(kinds), "layers")
    except Exception:  # noqa: BLE001  (one failing case must not lose the others)
        print("FAILED", case)
        traceback.print_exc()
tar.close()
