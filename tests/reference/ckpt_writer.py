"""Writes small random-weight K3 checkpoints in the Hugging Face layout of docs/MODEL.md §1-§2, so the
reference can be run end to end without the C tools: config.json (root + text_config with
linear_attn_config), safetensors shards with `language_model.`-prefixed tensors, BF16 spine, F32
KDA conv/A_log/dt_bias/o_norm and correction bias, MXFP4 experts (U8 packed + E8M0 scales).

tiny_config(**overrides) gives the text_config of a 5-layer model; write_checkpoint(dir, tc, seed)
writes it. Scales keep activations O(1) so numerical comparisons stay well-conditioned."""
import json
import math
import os
import sys

import numpy as np

# the file encodings (BF16 bytes, safetensors shards) are shared with the trainer's export
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "train"))
from k3_format import bf16_bytes, write_shard  # noqa: E402,F401


def tiny_config(**over):
    tc = dict(model_type="kimi_linear", hidden_size=32, num_hidden_layers=5, intermediate_size=48,
              moe_intermediate_size=32, routed_expert_hidden_size=64, num_experts=6,
              num_experts_per_token=2, num_shared_experts=1, num_attention_heads=2,
              num_key_value_heads=2, q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=8,
              qk_rope_head_dim=4, v_head_dim=8, first_k_dense_replace=1, attn_res_block_size=2,
              activation_situ_beta=4.0, activation_situ_linear_beta=25.0, rms_norm_eps=1e-5,
              vocab_size=64, routed_scaling_factor=1.0, hidden_act="situ",
              linear_attn_config=dict(head_dim=8, num_heads=2, short_conv_kernel_size=3,
                                      gate_lower_bound=-5.0))
    a_log_len = over.pop("a_log_len", 4)
    tc.update(over)
    n = tc["num_hidden_layers"]
    mla = [l + 1 for l in range(n) if (l + 1) % 4 == 0 or l + 1 == n]
    tc["linear_attn_config"] = dict(tc["linear_attn_config"], full_attn_layers=mla,
                                    kda_layers=[l + 1 for l in range(n) if l + 1 not in mla])
    tc["_a_log_len"] = a_log_len
    return tc


def tensors(tc, rng):
    """{name: (dtype, shape, bytes)} for every tensor of the checkpoint."""
    out = {}
    H, V = tc["hidden_size"], tc["vocab_size"]
    la = tc["linear_attn_config"]
    NH, D, K = la["num_heads"], la["head_dim"], la["short_conv_kernel_size"]

    def mat(name, rows, cols, gain=1.0):
        out[name] = ("BF16", [rows, cols], bf16_bytes(rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)))

    def vec(name, n, center=1.0, spread=0.1, dtype="BF16", shape=None):
        v = center + spread * rng.standard_normal(n)
        out[name] = (dtype, shape or [n], bf16_bytes(v) if dtype == "BF16" else v.astype("<f4").tobytes())

    P = "language_model."
    out[P + "model.embed_tokens.weight"] = ("BF16", [V, H], bf16_bytes(rng.standard_normal((V, H))))
    vec(P + "model.norm.weight", H)
    vec(P + "model.output_attn_res_norm.weight", H)
    vec(P + "model.output_attn_res_proj.weight", H, 0.0, 0.5, shape=[1, H])
    mat(P + "lm_head.weight", V, H)
    mla = set(l - 1 for l in la["full_attn_layers"])
    for l in range(tc["num_hidden_layers"]):
        p = f"{P}model.layers.{l}."
        for n in ("input_layernorm", "self_attention_res_norm", "post_attention_layernorm", "mlp_res_norm"):
            vec(p + n + ".weight", H)
        for n in ("self_attention_res_proj", "mlp_res_proj"):
            vec(p + n + ".weight", H, 0.0, 0.5, shape=[1, H])
        a = p + "self_attn."
        if l in mla:
            NHm, nope, rope, vd = tc["num_attention_heads"], tc["qk_nope_head_dim"], tc["qk_rope_head_dim"], tc["v_head_dim"]
            ql, kl = tc["q_lora_rank"], tc["kv_lora_rank"]
            mat(a + "q_a_proj.weight", ql, H)
            vec(a + "q_a_layernorm.weight", ql)
            mat(a + "q_b_proj.weight", NHm * (nope + rope), ql, 2.0)
            mat(a + "kv_a_proj_with_mqa.weight", kl + rope, H, 2.0)
            vec(a + "kv_a_layernorm.weight", kl)
            mat(a + "kv_b_proj.weight", NHm * (nope + vd), kl)
            mat(a + "g_proj.weight", NHm * vd, H)
            mat(a + "o_proj.weight", H, NHm * vd)
        else:
            PW = NH * D
            for n in ("q_proj", "k_proj", "v_proj", "g_proj"):
                mat(a + n + ".weight", PW, H)
            mat(a + "f_a_proj.weight", D, H)
            mat(a + "f_b_proj.weight", PW, D)
            mat(a + "b_proj.weight", NH, H)
            mat(a + "o_proj.weight", H, PW)
            for n in ("q_conv1d", "k_conv1d", "v_conv1d"):
                vec(a + n + ".weight", PW * K, 0.0, 0.6, "F32", [PW, 1, K])
            n_log = tc["_a_log_len"]  # per head; entries past num_heads are padding
            a_log = np.concatenate([rng.uniform(-1.5, 1.0, NH), rng.uniform(-3, 3, max(0, n_log - NH))])[:n_log]
            out[a + "A_log"] = ("F32", [len(a_log)], a_log.astype("<f4").tobytes())
            vec(a + "dt_bias", PW, 0.0, 0.5, "F32")
            vec(a + "o_norm.weight", D, 1.0, 0.1, "F32")
        if l < tc["first_k_dense_replace"]:
            I = tc["intermediate_size"]
            mat(p + "mlp.gate_proj.weight", I, H, 2.0)
            mat(p + "mlp.up_proj.weight", I, H, 2.0)
            mat(p + "mlp.down_proj.weight", H, I)
        else:
            moe_tensors(out, tc, p + "block_sparse_moe.", rng, mat, vec)
    return out


def moe_tensors(out, tc, p, rng, mat, vec):
    H, E, Z, I = tc["hidden_size"], tc["num_experts"], tc["routed_expert_hidden_size"], tc["moe_intermediate_size"]
    mat(p + "gate.weight", E, H, 2.0)
    vec(p + "gate.e_score_correction_bias", E, 0.0, 0.2, "F32")
    mat(p + "routed_expert_down_proj.weight", Z, H)
    vec(p + "routed_expert_norm.weight", Z)
    mat(p + "routed_expert_up_proj.weight", H, Z)
    S = tc["num_shared_experts"] * I
    if S:
        mat(p + "shared_experts.gate_proj.weight", S, H, 2.0)
        mat(p + "shared_experts.up_proj.weight", S, H, 2.0)
        mat(p + "shared_experts.down_proj.weight", H, S)
    for e in range(E):
        for w, rows, cols in (("w1", I, Z), ("w2", Z, I), ("w3", I, Z)):
            # E2M1 codes have RMS ~2.9; scale 2^(s-127) brings rows to ~1/sqrt(cols)
            s0 = 127 - round(math.log2(2.9 * math.sqrt(cols)))
            packed = rng.integers(0, 256, (rows, cols // 2), dtype=np.uint8)
            scale = (s0 + rng.integers(-1, 2, (rows, cols // 32))).astype(np.uint8)
            out[f"{p}experts.{e}.{w}.weight_packed"] = ("U8", [rows, cols // 2], packed.tobytes())
            out[f"{p}experts.{e}.{w}.weight_scale"] = ("U8", [rows, cols // 32], scale.tobytes())


def write_checkpoint(d, tc, seed=0, n_shards=3, edit=None):
    """Writes config.json and n_shards safetensors files (names sorted, split round-robin by layer).
    edit(ts), if given, may change the {name: (dtype, shape, bytes)} dict before it is written.
    Returns that dict."""
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    ts = tensors(tc, rng)
    if edit:
        edit(ts)
    tc_public = {k: v for k, v in tc.items() if not k.startswith("_")}
    root = dict(model_type="kimi_k3", dtype="bfloat16", tie_word_embeddings=False, bos_token_id=60,
                eos_token_id=62, pad_token_id=63, text_config=tc_public)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(root, f, indent=1)
    shards = [[] for _ in range(n_shards)]
    for name in sorted(ts):
        parts = name.split(".")
        idx = int(parts[3]) + 1 if parts[2] == "layers" else 0
        shards[idx % n_shards].append((name, ts[name]))
    for i, items in enumerate(shards):
        write_shard(os.path.join(d, f"model-{i + 1:05d}-of-{n_shards:06d}.safetensors"), items)
    return ts
