"""Model shapes of the trainer, and the checkpoint's config.json for a shape.

A ModelConfig holds every dimension docs/MODEL.md section 1 names (text_config's names, in
snake case), so a trained model is a K3 checkpoint the engine runs without code changes. The layer
pattern is K3's: layer 0 dense, the rest MoE; MLA where the one-based layer index is divisible by
4 and on the last layer, KDA elsewhere.

Named shapes:
  tiny    CI: the engine's `synth --preset tiny` dimensions (5 layers, AttnRes blocks of 2,
          8 experts top-2, A_log padded to 16 entries), vocabulary of the synthetic tokenizer.
  smoke   a quick GPU check of the whole program at a realistic width.
  mini    the shipped model: 12 layers (MLA at one-based 4, 8, 12), hidden 256, 64 experts top-8,
          vocabulary 8192 + 256 specials; see `python3 tools/train/config.py mini` for its bytes.

`python3 tools/train/config.py NAME [--vocab N]` prints the byte budget of a shape: every file of the
exported checkpoint, computed from the same tensor list the export writes."""
import argparse
import dataclasses
import json
import sys


@dataclasses.dataclass
class ModelConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int            # dense FFN of the first_k_dense_replace layers
    moe_intermediate_size: int        # per routed expert; shared experts use n_shared times it
    routed_expert_hidden_size: int    # latent width of the routed experts
    num_experts: int
    num_experts_per_token: int
    num_shared_experts: int
    num_attention_heads: int          # MLA heads
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int             # used without rotary (NoPE)
    v_head_dim: int
    attn_res_block_size: int
    kda_heads: int
    kda_head_dim: int
    conv_kernel: int = 4
    gate_lower_bound: float = -5.0
    a_log_len: int = 0                # stored A_log length (>= kda_heads; the rest is padding); 0 = kda_heads
    first_k_dense_replace: int = 1
    activation_situ_beta: float = 4.0
    activation_situ_linear_beta: float = 25.0
    rms_norm_eps: float = 1e-5
    n_mergeable: int = 0              # tokenizer ranks; specials are n_mergeable .. n_mergeable+255

    def __post_init__(self):
        if not self.a_log_len:
            self.a_log_len = self.kda_heads
        if not self.n_mergeable:
            self.n_mergeable = self.vocab_size - 256
        self.check()

    def check(self):
        def need(ok, what):
            if not ok:
                raise ValueError(f"model config: {what}")
        need(self.vocab_size == self.n_mergeable + 256, "vocab_size must be the mergeable ranks + 256 specials")
        need(self.num_experts_per_token <= self.num_experts, "num_experts_per_token exceeds num_experts")
        need(self.moe_intermediate_size % 32 == 0 and self.routed_expert_hidden_size % 32 == 0,
             "moe_intermediate_size and routed_expert_hidden_size must be multiples of 32 (MXFP4 groups)")
        need(self.a_log_len >= self.kda_heads, "a_log_len must be at least kda_heads")
        need(self.gate_lower_bound < 0, "gate_lower_bound must be negative")
        need(self.first_k_dense_replace >= 1, "K3's layer 0 is dense (first_k_dense_replace >= 1)")

    # --- the layer pattern ---
    def is_mla(self, layer):
        n = self.num_hidden_layers
        return (layer + 1) % 4 == 0 or layer + 1 == n

    def is_moe(self, layer):
        return layer >= self.first_k_dense_replace

    @property
    def kda_width(self):
        return self.kda_heads * self.kda_head_dim

    @property
    def shared_width(self):
        return self.num_shared_experts * self.moe_intermediate_size

    @property
    def special_ids(self):
        """bos, eos, pad: K3's offsets in the special range ([BOS], <|end_of_msg|>, [PAD])."""
        return self.n_mergeable, self.n_mergeable + 2, self.n_mergeable + 255

    # --- config.json (the fields and layout src/synth/config_json.c writes) ---
    def to_json(self):
        bos, eos, pad = self.special_ids
        n = self.num_hidden_layers
        mla = [l + 1 for l in range(n) if self.is_mla(l)]
        quant_weights = {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32,
                         "symmetric": True, "dynamic": False, "observer": "minmax", "scale_dtype": "torch.uint8"}
        text = {
            "model_type": "kimi_linear", "dtype": "bfloat16",
            "bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad,
            "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
            "moe_intermediate_size": self.moe_intermediate_size,
            "routed_expert_hidden_size": self.routed_expert_hidden_size,
            "num_hidden_layers": n, "num_experts": self.num_experts,
            "num_experts_per_token": self.num_experts_per_token, "num_shared_experts": self.num_shared_experts,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_attention_heads,
            "vocab_size": self.vocab_size, "attn_res_block_size": self.attn_res_block_size,
            "q_lora_rank": self.q_lora_rank, "kv_lora_rank": self.kv_lora_rank,
            "qk_nope_head_dim": self.qk_nope_head_dim, "qk_rope_head_dim": self.qk_rope_head_dim,
            "v_head_dim": self.v_head_dim, "first_k_dense_replace": self.first_k_dense_replace,
            "moe_layer_freq": 1, "num_expert_group": 1, "topk_group": 1, "num_nextn_predict_layers": 0,
            "max_position_embeddings": 1048576, "hidden_act": "situ",
            "activation_situ_beta": self.activation_situ_beta,
            "activation_situ_linear_beta": self.activation_situ_linear_beta,
            "moe_router_activation_func": "sigmoid", "topk_method": "noaux_tc", "routed_scaling_factor": 1.0,
            "rms_norm_eps": self.rms_norm_eps,
            "use_grouped_topk": True, "moe_renormalize": True, "latent_moe_use_norm": True,
            "mla_use_nope": True, "mla_use_output_gate": True, "use_cache": True,
            "tie_word_embeddings": False,
            "linear_attn_config": {
                "head_dim": self.kda_head_dim, "num_heads": self.kda_heads,
                "short_conv_kernel_size": self.conv_kernel, "use_full_rank_gate": True,
                "gate_lower_bound": self.gate_lower_bound,
                "kda_layers": [l + 1 for l in range(n) if not self.is_mla(l)], "full_attn_layers": mla},
            "quantization_config": {
                "quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
                "quantization_status": "compressed",
                "config_groups": {"group_0": {"format": "mxfp4-pack-quantized", "weights": quant_weights,
                                              "targets": ["Linear"]}},
                "ignore": ["lm_head"]},
        }
        return {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
                "dtype": "bfloat16", "tie_word_embeddings": False, "bos_token_id": bos,
                "eos_token_id": eos, "pad_token_id": pad, "text_config": text}

    @staticmethod
    def from_json(root, a_log_len=0):
        """The shape of a config.json this trainer wrote (or any K3 config with its layer pattern)."""
        t = root["text_config"]
        la = t["linear_attn_config"]
        cfg = ModelConfig(
            vocab_size=t["vocab_size"], hidden_size=t["hidden_size"], num_hidden_layers=t["num_hidden_layers"],
            intermediate_size=t["intermediate_size"], moe_intermediate_size=t["moe_intermediate_size"],
            routed_expert_hidden_size=t["routed_expert_hidden_size"], num_experts=t["num_experts"],
            num_experts_per_token=t["num_experts_per_token"], num_shared_experts=t["num_shared_experts"],
            num_attention_heads=t["num_attention_heads"], q_lora_rank=t["q_lora_rank"],
            kv_lora_rank=t["kv_lora_rank"], qk_nope_head_dim=t["qk_nope_head_dim"],
            qk_rope_head_dim=t["qk_rope_head_dim"], v_head_dim=t["v_head_dim"],
            attn_res_block_size=t["attn_res_block_size"], kda_heads=la["num_heads"], kda_head_dim=la["head_dim"],
            conv_kernel=la["short_conv_kernel_size"], gate_lower_bound=la["gate_lower_bound"],
            a_log_len=a_log_len, first_k_dense_replace=t["first_k_dense_replace"],
            activation_situ_beta=t["activation_situ_beta"],
            activation_situ_linear_beta=t["activation_situ_linear_beta"], rms_norm_eps=t["rms_norm_eps"],
            n_mergeable=t["bos_token_id"])
        mla = sorted(la["full_attn_layers"])
        if mla != [l + 1 for l in range(cfg.num_hidden_layers) if cfg.is_mla(l)]:
            raise ValueError("config.json: full_attn_layers is not K3's pattern (every 4th and the last)")
        if t.get("routed_scaling_factor", 1.0) != 1.0:
            raise ValueError("config.json: routed_scaling_factor must be 1.0")
        return cfg


SHAPES = {
    "tiny": dict(vocab_size=768, hidden_size=64, num_hidden_layers=5, intermediate_size=96,
                 moe_intermediate_size=32, routed_expert_hidden_size=32, num_experts=8, num_experts_per_token=2,
                 num_shared_experts=1, num_attention_heads=4, q_lora_rank=32, kv_lora_rank=32,
                 qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, attn_res_block_size=2,
                 kda_heads=4, kda_head_dim=16, a_log_len=16),
    "smoke": dict(vocab_size=8448, hidden_size=256, num_hidden_layers=5, intermediate_size=768,
                  moe_intermediate_size=96, routed_expert_hidden_size=128, num_experts=16,
                  num_experts_per_token=4, num_shared_experts=2, num_attention_heads=4, q_lora_rank=128,
                  kv_lora_rank=64, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
                  attn_res_block_size=2, kda_heads=4, kda_head_dim=64),
    "mini": dict(vocab_size=8448, hidden_size=256, num_hidden_layers=12, intermediate_size=768,
                 moe_intermediate_size=96, routed_expert_hidden_size=128, num_experts=64,
                 num_experts_per_token=8, num_shared_experts=2, num_attention_heads=4, q_lora_rank=128,
                 kv_lora_rank=64, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
                 attn_res_block_size=4, kda_heads=4, kda_head_dim=64),
}


def shape(name, vocab_size=None):
    """The named shape; vocab_size overrides the vocabulary (the tokenizer's ranks + 256)."""
    if name not in SHAPES:
        raise ValueError(f"unknown model shape '{name}' (one of {', '.join(SHAPES)})")
    d = dict(SHAPES[name])
    if vocab_size:
        d["vocab_size"] = vocab_size
    return ModelConfig(**d)


def parameter_counts(cfg):
    """(total, active per token, of which routed experts) parameters, the embedding excluded."""
    import export
    total = active = experts = 0
    for key, shp in export.model_keys(cfg):
        n = 1
        for d in shp:
            n *= d
        if key == "model.embed_tokens.weight" or key.endswith("e_score_correction_bias"):
            continue
        total += n
        if key.endswith((".w1", ".w2", ".w3")):
            experts += n
            active += n * cfg.num_experts_per_token // cfg.num_experts
        else:
            active += n
    return total, active, experts


def main(argv=None):
    ap = argparse.ArgumentParser(description="byte budget of a model shape's exported checkpoint")
    ap.add_argument("name", choices=sorted(SHAPES))
    ap.add_argument("--vocab", type=int, help="vocabulary size (ranks + 256)")
    ap.add_argument("--tokenizer-bytes", type=int, default=0, help="bytes of tiktoken.model + tokenizer_config.json")
    args = ap.parse_args(argv)
    import export
    cfg = shape(args.name, args.vocab)
    b = export.byte_budget(cfg)
    total, active, experts = parameter_counts(cfg)
    print(json.dumps(dataclasses.asdict(cfg)))
    for k, v in b.items():
        print(f"{k:<44} {v:>12,d} B")
    print(f"{'tokenizer files (--tokenizer-bytes)':<44} {args.tokenizer_bytes:>12,d} B")
    print(f"{'all files':<44} {b['total'] + args.tokenizer_bytes:>12,d} B")
    print(f"parameters (embedding excluded): {total:,d} total, {active:,d} active per token, {experts:,d} in routed experts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
