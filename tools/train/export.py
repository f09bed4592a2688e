"""Writes a trained K3Model as a K3 checkpoint in the engine's layout, and reads one back.

The file set (docs/MODEL.md 1-2, as `deltafin synth` writes it): config.json,
generation_config.json, model-NNNNN-of-NNNNNN.safetensors shards, model.safetensors.index.json,
the tokenizer's tiktoken.model and tokenizer_config.json, and SHA256SUMS (sha256sum's format) of
all of them. Tensors are `language_model.`-prefixed; the spine is BF16 (the trained float32
weights rounded to nearest even); conv weights, A_log, dt_bias, o_norm and the router's correction
bias are F32; routed experts are MXFP4 (quant.mxfp4_quantize): per expert, in one shard and in
this order, w1/w2/w3 weight_packed (U8 [rows, cols/2], low nibble = even column) and weight_scale
(U8 [rows, cols/32], E8M0). Shards hold whole groups (the embedding, a layer's non-expert tensors,
one expert, the output tensors) and are started anew before one would exceed max_shard_bytes.

  layout(cfg)                    every tensor in file order: (name, dtype, shape, source)
  export(model, dir, tokenizer)  writes the file set, returns {file: bytes}
  byte_budget(cfg)               the bytes export() would write per part, without a model
  load(dir)                      (ModelConfig, {state_dict key: tensor}) of a checkpoint
  load_into(model, dir)          copies a checkpoint's weights into a model of the same shape

Run as a program: export.py --budget NAME prints nothing new (see config.py); the trainer calls
export() at the end of training."""
import hashlib
import json
import os
import shutil

import numpy as np
import torch

import k3_format as kf
from config import ModelConfig
from quant import mxfp4_quantize

PREFIX = "language_model."
F32_SUFFIXES = ("_conv1d.weight", ".A_log", ".dt_bias", ".o_norm.weight", ".e_score_correction_bias")
RES_SITES = ("self_attention_res", "mlp_res", "output_attn_res")
TOKENIZER_FILES = ("tiktoken.model", "tokenizer_config.json")
MAX_SHARD_BYTES = 15 << 20   # the GPU machine returns files of at most 16 MiB


def ckpt_name(key):
    """Checkpoint tensor name of a state_dict key (routed experts excepted)."""
    for site in RES_SITES:
        key = key.replace(f"{site}.norm", f"{site}_norm.weight").replace(f"{site}.proj", f"{site}_proj.weight")
    return PREFIX + key


def state_key(name):
    """The inverse of ckpt_name."""
    key = name[len(PREFIX):]
    for site in RES_SITES:
        key = key.replace(f"{site}_norm.weight", f"{site}.norm").replace(f"{site}_proj.weight", f"{site}.proj")
    return key


def model_keys(cfg):
    """state_dict keys and shapes of a model of shape cfg, in the model's order (built on the
    meta device where available, so no memory is touched)."""
    from model import K3Model
    try:
        with torch.device("meta"):
            m = K3Model(cfg)
    except (AttributeError, TypeError, RuntimeError):   # torch 1.13: no device context manager
        m = K3Model(cfg)
    return [(k, tuple(v.shape)) for k, v in m.state_dict().items()]


def layout(cfg):
    """Groups of tensors in file order; each tensor (name, dtype, shape, source) where source is a
    state_dict key, or (key, expert, 'packed'|'scale') for a routed expert's MXFP4 parts."""
    keys = model_keys(cfg)
    groups = {"embed": [], "tail": []}
    per_layer = {l: [] for l in range(cfg.num_hidden_layers)}
    experts = {}
    for key, shape in keys:
        parts = key.split(".")
        if parts[0] == "model" and parts[1] == "layers":
            l = int(parts[2])
            if parts[3] == "block_sparse_moe" and parts[4] in ("w1", "w2", "w3"):
                experts.setdefault(l, {})[parts[4]] = (key, shape)
                continue
            name = ckpt_name(key)
            per_layer[l].append((name, "F32" if name.endswith(F32_SUFFIXES) else "BF16", shape, key))
        elif key == "model.embed_tokens.weight":
            groups["embed"].append((ckpt_name(key), "BF16", shape, key))
        else:
            groups["tail"].append((ckpt_name(key), "BF16", shape, key))
    out = [groups["embed"]]
    for l in range(cfg.num_hidden_layers):
        out.append(per_layer[l])
        for e in range(cfg.num_experts if l in experts else 0):
            one = []
            for w in ("w1", "w2", "w3"):
                key, (E, rows, cols) = experts[l][w]
                base = f"{PREFIX}model.layers.{l}.block_sparse_moe.experts.{e}.{w}."
                one.append((base + "weight_packed", "U8", (rows, cols // 2), (key, e, "packed")))
                one.append((base + "weight_scale", "U8", (rows, cols // 32), (key, e, "scale")))
            out.append(one)
    out.append(groups["tail"])
    return out


def _nbytes(dtype, shape):
    n = kf.DTYPE_SIZE[dtype]
    for d in shape:
        n *= d
    return n


def plan_shards(groups, max_bytes=MAX_SHARD_BYTES):
    """Assigns whole groups to shards in order; a shard is closed before a group would push it past
    max_bytes (a group larger than max_bytes gets a shard of its own)."""
    shards, cur = [], []
    for g in groups:
        entries = [(n, d, s, _nbytes(d, s)) for n, d, s, _ in g]
        if cur and kf.shard_size([e for grp in cur for e in grp] + entries) > max_bytes:
            shards.append(cur)
            cur = []
        cur.append(entries)
    if cur:
        shards.append(cur)
    return [[e for grp in sh for e in grp] for sh in shards]


def shard_name(i, n):
    return f"model-{i:05d}-of-{n:06d}.safetensors"


def generation_config(cfg):
    bos, eos, _ = cfg.special_ids
    return json.dumps({"bos_token_id": bos, "eos_token_id": eos, "do_sample": False}, indent=2) + "\n"


def index_json(shards, total):
    weight_map = {}
    for i, sh in enumerate(shards):
        for name, _, _, _ in sh:
            weight_map[name] = shard_name(i + 1, len(shards))
    return json.dumps({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=2) + "\n"


def config_text(cfg):
    return json.dumps(cfg.to_json(), indent=2) + "\n"


BUDGET_PARTS = (("embedding + lm_head (BF16)", ("embed_tokens.weight", "lm_head.weight")),
                ("routed experts (MXFP4)", (".experts.",)),
                ("MoE router, latent down/up, shared experts", (".block_sparse_moe.",)),
                ("dense FFN of layer 0", (".mlp.",)),
                ("norms and AttnRes vectors", ("layernorm.weight", "_res_norm.weight", "_res_proj.weight",
                                               "model.norm.weight")),
                ("attention: KDA and MLA", (".self_attn.",)))


def byte_budget(cfg, max_shard_bytes=MAX_SHARD_BYTES):
    """Bytes of every part export() writes (tokenizer files excepted), from the shape alone:
    tensor data by part, safetensors headers, the JSON files, SHA256SUMS; then the largest shard."""
    groups = layout(cfg)
    shards = plan_shards(groups, max_shard_bytes)
    out = {label: 0 for label, _ in BUDGET_PARTS}
    kda = mla = 0
    for g in groups:
        for name, dtype, shape, _ in g:
            n = _nbytes(dtype, shape)
            label = next(lb for lb, keys in BUDGET_PARTS if any(k in name for k in keys))
            out[label] += n
            if label.startswith("attention"):
                layer = int(name.split(".layers.")[1].split(".")[0])
                kda, mla = (kda, mla + n) if cfg.is_mla(layer) else (kda + n, mla)
    out["attention: KDA and MLA"] = kda + mla
    out[f"  of which KDA ({sum(not cfg.is_mla(l) for l in range(cfg.num_hidden_layers))} layers)"] = kda
    out[f"  of which MLA ({sum(cfg.is_mla(l) for l in range(cfg.num_hidden_layers))} layers)"] = mla
    sizes = [kf.shard_size(sh) for sh in shards]
    data = sum(n for sh in shards for _, _, _, n in sh)
    out["safetensors headers"] = sum(sizes) - data
    out["config/generation/index JSON"] = (len(config_text(cfg)) + len(generation_config(cfg))
                                           + len(index_json(shards, data)))
    out["SHA256SUMS (about)"] = (len(shards) + 3 + len(TOKENIZER_FILES)) * 100
    out["total"] = sum(sizes) + out["config/generation/index JSON"] + out["SHA256SUMS (about)"]
    out[f"largest of the {len(shards)} shards"] = max(sizes)
    return out


def _tensor_bytes(state, dtype, source, quantized):
    if isinstance(source, tuple):                                   # a routed expert's part
        key, e, part = source
        if (key, e) not in quantized:
            codes, exps = mxfp4_quantize(state[key][e].detach().float().cpu())
            quantized.clear()                                       # only the current expert is kept
            quantized[(key, e)] = (kf.mxfp4_pack(codes.numpy()), (exps.numpy() + 127).astype(np.uint8))
        packed, scale = quantized[(key, e)]
        return (packed if part == "packed" else scale).tobytes()
    a = state[source].detach().float().cpu().numpy()
    return kf.bf16_bytes(a) if dtype == "BF16" else a.astype("<f4").tobytes()


def export(model, out_dir, tokenizer_dir, max_shard_bytes=MAX_SHARD_BYTES):
    """Writes the checkpoint of `model` to out_dir (created; existing files of the set replaced).
    tokenizer_dir holds tiktoken.model and tokenizer_config.json (None: no tokenizer files, for
    tests that need none). Returns {file name: bytes}."""
    cfg = model.cfg
    os.makedirs(out_dir, exist_ok=True)
    state = model.state_dict()
    groups = layout(cfg)
    sources = {name: (dtype, src) for g in groups for name, dtype, _, src in g}
    shards = plan_shards(groups, max_shard_bytes)
    quantized = {}
    for i, sh in enumerate(shards):
        items = [(name, (dtype, shape, _tensor_bytes(state, dtype, sources[name][1], quantized)))
                 for name, dtype, shape, _ in sh]
        _write_atomic(os.path.join(out_dir, shard_name(i + 1, len(shards))), lambda p, it=items: kf.write_shard(p, it))
    total = sum(n for sh in shards for _, _, _, n in sh)
    texts = {"config.json": config_text(cfg), "generation_config.json": generation_config(cfg),
             "model.safetensors.index.json": index_json(shards, total)}
    for name, text in texts.items():
        _write_atomic(os.path.join(out_dir, name), lambda p, t=text: open(p, "w").write(t))
    tok_files = list(TOKENIZER_FILES) if tokenizer_dir else []
    for name in tok_files:
        src = os.path.join(tokenizer_dir, name)
        _write_atomic(os.path.join(out_dir, name), lambda p, s=src: shutil.copyfile(s, p))
    files = [shard_name(i + 1, len(shards)) for i in range(len(shards))] + sorted(texts) + tok_files
    sums = "".join(f"{_sha256(os.path.join(out_dir, f))}  {f}\n" for f in files)
    _write_atomic(os.path.join(out_dir, "SHA256SUMS"), lambda p: open(p, "w").write(sums))
    return {f: os.path.getsize(os.path.join(out_dir, f)) for f in files + ["SHA256SUMS"]}


def _write_atomic(path, write):
    tmp = path + ".tmp"
    write(tmp)
    os.replace(tmp, path)


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ------------------------------------------------------------------------------------- reading

def load(ckpt_dir):
    """(ModelConfig, {state_dict key: float32 tensor}) of a checkpoint this module wrote (or any
    of the same architecture). Routed experts are decoded from MXFP4 exactly."""
    with open(os.path.join(ckpt_dir, "config.json")) as f:
        root = json.load(f)
    tensors = {}
    for fn in sorted(os.listdir(ckpt_dir)):
        if fn.startswith("model-") and fn.endswith(".safetensors"):
            tensors.update(kf.read_safetensors(os.path.join(ckpt_dir, fn)))
    a_log = [s for n, (_, s, _) in tensors.items() if n.endswith(".self_attn.A_log")]
    cfg = ModelConfig.from_json(root, a_log_len=a_log[0][0] if a_log else 0)
    state, experts = {}, {}
    for name, (dtype, shape, raw) in tensors.items():
        if ".experts." in name:
            pre, rest = name.split(".experts.")
            e, w, part = rest.split(".")
            experts.setdefault((state_key(pre) + "." + w, int(e)), {})[part] = kf.decode_tensor(dtype, shape, raw)
        else:
            state[state_key(name)] = torch.from_numpy(kf.decode_tensor(dtype, shape, raw))
    stacks = {}
    for (key, e), parts in experts.items():
        stacks.setdefault(key, {})[e] = kf.mxfp4_decode(parts["weight_packed"], parts["weight_scale"])
    for key, per_e in stacks.items():
        state[key] = torch.from_numpy(np.stack([per_e[e] for e in range(len(per_e))]))
    return cfg, state


def load_into(model, ckpt_dir):
    """Copies the weights of the checkpoint in ckpt_dir into model (same shape, else ValueError)."""
    cfg, state = load(ckpt_dir)
    if cfg != model.cfg:
        raise ValueError(f"{ckpt_dir}: the checkpoint's shape differs from the model's")
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    extra = sorted(set(state) - set(own))
    if missing or extra:
        raise ValueError(f"{ckpt_dir}: tensors missing {missing[:3]} / unexpected {extra[:3]}")
    with torch.no_grad():
        for k, v in state.items():
            if tuple(v.shape) != tuple(own[k].shape):
                raise ValueError(f"{ckpt_dir}: {k} has shape {tuple(v.shape)}, the model {tuple(own[k].shape)}")
            own[k].copy_(v)
    return model
