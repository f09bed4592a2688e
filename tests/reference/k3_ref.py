#!/usr/bin/env python3
"""Independent float64 reference of the Kimi K3 forward pass, written from the model's description
(docs/MODEL.md) only.

The C engine is checked against this file, so it shares no code or data layout decisions with it:
every formula below is transcribed from the specification, evaluated in float64, one position at a
time, carrying the decode state exactly as the specification describes it.

What implements which part of docs/MODEL.md:

  Config                   §1.1        dimensions from config.json; layer kinds from the one-based
                                        kda_layers / full_attn_layers lists (must partition the layers)
  read_header, Checkpoint  §2.2        safetensors: u64 LE header length, JSON header, data region;
                                        dtypes BF16 / F32 / U8; bounds and sizes validated
  Checkpoint.f64, bf16_to_f64          §2.3, §3.2  BF16 widened exactly (bits << 16), F32 as is
  mxfp4_decode, E2M1       §3.3        low nibble = even column, E8M0 scale per 32 input columns
  Weights                  §2.3, §2.4  tensor names and shapes; experts read only when routed
  rms_norm, l2n, sigmoid, silu, situ   §4.0
  attn_res                 §4.2        Block Attention Residuals (weightless RMS keys, softmax over depth)
  K3Ref.step               §4.1, §4.7  one token through all layers and the tail
  K3Ref.kda, kda_gate, kda_recurrent_step
                           §4.3, §5.1  conv windows (kernel size from config), L2-normalised q/k,
                                        PER-HEAD A_log gate (§7.1), gated delta rule,
                                        per-head output RMSNorm and sigmoid gate
  K3Ref.mla                §4.4, §5.1  gated NoPE MLA with an expanded K/V cache
  K3Ref.dense_ffn          §4.5        SiTU MLP of the first_k_dense_replace layers
  route, K3Ref.moe         §4.6        sigmoid router, bias for selection only, top-k (ties: lowest
                                        expert index), weights renormalised with +1e-20, latent
                                        experts in MXFP4, routed_expert_norm on the weighted sum,
                                        shared experts fused into one MLP
  K3Ref.forward, greedy    §4.1, §4.7  logits of every position; greedy argmax (lowest index on ties)

Library use:  cfg, ck = load(model_dir); ref = K3Ref(ck, cfg); logits, state = ref.forward([1, 2, 3])
CLI:          k3_ref.py --model DIR --tokens "1 2 3" --out FILE [--greedy N] [--dump-routes FILE]
              FILE receives little-endian float64 logits [T, vocab]; row t follows token t.
              --greedy N prints N greedily generated ids (space-separated) on stdout.
              --dump-routes FILE writes one line per MoE evaluation: position, layer, router margin
              (k-th minus (k+1)-th biased score), then expert:weight pairs in selection order.
              --cache-gb bounds the float64 weight cache; larger tensors are re-read when used.

Notes on choices the specification leaves to the implementation:
  * E8M0 scale bytes 0 and 255 decode as 2^-127 and 2^128 (the float64 value of 2^(s-127)).
  * routed_scaling_factor is read but not applied (§4.6: the original does not multiply by it).
  * The conv state holds the last K raw inputs (K = short_conv_kernel_size, newest last); only the
    last K-1 are ever read, as in §4.3.
"""
import argparse
import collections
import json
import math
import os
import struct
import sys

import numpy as np

PREFIX = "language_model."
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float64)
DTYPE_SIZE = {"BF16": 2, "F32": 4, "U8": 1}


class RefError(Exception):
    """A checkpoint or input the reference refuses, with a message naming the file/field/tensor."""


# ----------------------------------------------------------------------------------- config (§1)

class Config:
    """Every dimension the forward pass uses, read from config.json (root + text_config)."""

    INT_FIELDS = ("hidden_size", "num_hidden_layers", "intermediate_size", "moe_intermediate_size",
                  "routed_expert_hidden_size", "num_experts", "num_experts_per_token",
                  "num_shared_experts", "num_attention_heads", "q_lora_rank", "kv_lora_rank",
                  "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "first_k_dense_replace",
                  "attn_res_block_size", "vocab_size")
    FLOAT_FIELDS = ("activation_situ_beta", "activation_situ_linear_beta", "rms_norm_eps")

    def __init__(self, root, where="config.json"):
        tc = root.get("text_config")
        if not isinstance(tc, dict):
            raise RefError(f"{where}: missing object text_config")
        for f in self.INT_FIELDS:
            v = tc.get(f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise RefError(f"{where}: text_config.{f} must be a non-negative integer (got {v!r})")
            setattr(self, f, v)
        for f in self.FLOAT_FIELDS:
            v = tc.get(f)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                raise RefError(f"{where}: text_config.{f} must be a number (got {v!r})")
            setattr(self, f, float(v))
        self.routed_scaling_factor = float(tc.get("routed_scaling_factor", 1.0))
        la = tc.get("linear_attn_config")
        if not isinstance(la, dict):
            raise RefError(f"{where}: missing object text_config.linear_attn_config")
        for f in ("head_dim", "num_heads", "short_conv_kernel_size"):
            v = la.get(f)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise RefError(f"{where}: linear_attn_config.{f} must be a positive integer (got {v!r})")
        self.kda_head_dim = la["head_dim"]
        self.kda_heads = la["num_heads"]
        self.conv_kernel = la["short_conv_kernel_size"]
        lb = la.get("gate_lower_bound")
        if not isinstance(lb, (int, float)) or isinstance(lb, bool) or not lb < 0:
            raise RefError(f"{where}: linear_attn_config.gate_lower_bound must be a negative number")
        self.gate_lower_bound = float(lb)
        self.layer_is_mla = self._layer_kinds(la, where)
        self._check(where)

    def _layer_kinds(self, la, where):
        n = self.num_hidden_layers
        kinds = [None] * n
        for key, is_mla in (("kda_layers", False), ("full_attn_layers", True)):
            lst = la.get(key)
            if not isinstance(lst, list):
                raise RefError(f"{where}: linear_attn_config.{key} must be a list")
            for one_based in lst:
                if not isinstance(one_based, int) or not 1 <= one_based <= n:
                    raise RefError(f"{where}: linear_attn_config.{key} entry {one_based!r} is not in 1..{n}")
                if kinds[one_based - 1] is not None:
                    raise RefError(f"{where}: layer {one_based} (one-based) is listed twice in "
                                   "kda_layers/full_attn_layers")
                kinds[one_based - 1] = is_mla
        missing = [i + 1 for i, k in enumerate(kinds) if k is None]
        if missing:
            raise RefError(f"{where}: layers {missing} (one-based) are in neither kda_layers nor full_attn_layers")
        return kinds

    def _check(self, where):
        positive = ("hidden_size", "num_hidden_layers", "vocab_size", "attn_res_block_size")
        for f in positive:
            if getattr(self, f) <= 0:
                raise RefError(f"{where}: text_config.{f} must be positive")
        if self.first_k_dense_replace < self.num_hidden_layers:
            if not 0 < self.num_experts_per_token <= self.num_experts:
                raise RefError(f"{where}: num_experts_per_token must be in 1..num_experts")
            for f in ("routed_expert_hidden_size", "moe_intermediate_size"):
                if getattr(self, f) <= 0 or getattr(self, f) % 32:
                    raise RefError(f"{where}: text_config.{f} must be a positive multiple of 32 (MXFP4 groups)")

    @property
    def shared_width(self):
        return self.num_shared_experts * self.moe_intermediate_size

    @staticmethod
    def load(model_dir):
        path = os.path.join(model_dir, "config.json")
        try:
            with open(path, "rb") as f:
                root = json.loads(f.read())
        except (OSError, ValueError) as e:
            raise RefError(f"{path}: {e}") from None
        if not isinstance(root, dict):
            raise RefError(f"{path}: not a JSON object")
        return Config(root, path)


# --------------------------------------------------------------------------------- safetensors (§2.2)

def read_header(path):
    """Returns (data_start, header dict) of one safetensors file."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise RefError(f"{path}: shorter than the 8-byte header length")
        (hlen,) = struct.unpack("<Q", head)
        if hlen > size - 8:
            raise RefError(f"{path}: header length {hlen} runs past the end of the file")
        try:
            header = json.loads(f.read(hlen))
        except ValueError as e:
            raise RefError(f"{path}: header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise RefError(f"{path}: header is not a JSON object")
    return 8 + hlen, header


TensorRec = collections.namedtuple("TensorRec", "path dtype shape start nbytes")


def bf16_to_f64(raw):
    """BF16 bytes (little-endian) -> float64, exactly: bits << 16 is the float32 pattern (§3.2)."""
    bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << np.uint32(16)
    return bits.view(np.float32).astype(np.float64)


class Checkpoint:
    """The tensors of every *.safetensors file in a directory, read on demand at file offsets.

    bytes_read counts the bytes read per tensor name, so tests can prove which experts were read."""

    def __init__(self, model_dir):
        self.dir = model_dir
        names = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
        if not names:
            raise RefError(f"{model_dir}: no .safetensors files")
        self.tensors = {}
        self.bytes_read = collections.Counter()
        self._fds = {}
        for n in names:
            self._index_shard(os.path.join(model_dir, n))

    def _index_shard(self, path):
        data_start, header = read_header(path)
        data_len = os.path.getsize(path) - data_start
        for name, rec in header.items():
            if name == "__metadata__":
                continue
            try:
                dtype, shape, (b, e) = rec["dtype"], rec["shape"], rec["data_offsets"]
            except (KeyError, TypeError, ValueError):
                raise RefError(f"{path}: tensor {name}: malformed header record") from None
            if dtype not in DTYPE_SIZE:
                raise RefError(f"{path}: tensor {name}: dtype {dtype} is not BF16, F32 or U8")
            if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
                raise RefError(f"{path}: tensor {name}: bad shape {shape}")
            nbytes = int(np.prod(shape, dtype=np.int64)) * DTYPE_SIZE[dtype]
            if not (isinstance(b, int) and isinstance(e, int) and 0 <= b <= e <= data_len) or e - b != nbytes:
                raise RefError(f"{path}: tensor {name}: data_offsets [{b}, {e}] do not hold "
                               f"{nbytes} bytes inside the {data_len}-byte data region")
            if name in self.tensors:
                raise RefError(f"{path}: tensor {name} also appears in {self.tensors[name].path}")
            self.tensors[name] = TensorRec(path, dtype, tuple(shape), data_start + b, nbytes)

    def rec(self, name, shape=None, dtypes=None):
        r = self.tensors.get(name)
        if r is None:
            raise RefError(f"{self.dir}: missing tensor {name}")
        if shape is not None and r.shape != tuple(shape):
            raise RefError(f"{r.path}: tensor {name} has shape {list(r.shape)}, expected {list(shape)}")
        if dtypes is not None and r.dtype not in dtypes:
            raise RefError(f"{r.path}: tensor {name} has dtype {r.dtype}, expected {'/'.join(dtypes)}")
        return r

    def read(self, name, offset=0, nbytes=None):
        """Raw bytes of a tensor (or a byte range of it) read at its file offset."""
        r = self.tensors[name]
        n = r.nbytes - offset if nbytes is None else nbytes
        fd = self._fds.get(r.path)
        if fd is None:
            fd = self._fds[r.path] = os.open(r.path, os.O_RDONLY)
        parts, pos = [], r.start + offset
        while n > 0:  # pread returns at most ~2 GiB per call
            chunk = os.pread(fd, min(n, 1 << 30), pos)
            if not chunk:
                raise RefError(f"{r.path}: tensor {name}: short read at offset {pos}")
            parts.append(chunk)
            pos += len(chunk)
            n -= len(chunk)
        self.bytes_read[name] += pos - r.start - offset
        return b"".join(parts)

    def f64(self, name, shape, row0=0, row1=None):
        """A BF16/F32 tensor (or rows [row0, row1) of it) as float64 of the given shape."""
        r = self.rec(name, shape, ("BF16", "F32"))
        esize = DTYPE_SIZE[r.dtype]
        row_elems = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
        row1 = shape[0] if row1 is None else row1
        raw = self.read(name, row0 * row_elems * esize, (row1 - row0) * row_elems * esize)
        a = bf16_to_f64(raw) if r.dtype == "BF16" else np.frombuffer(raw, "<f4").astype(np.float64)
        return a.reshape((row1 - row0,) + tuple(shape[1:]))

    def u8(self, name, shape):
        self.rec(name, shape, ("U8",))
        return np.frombuffer(self.read(name), np.uint8).reshape(shape)

    def close(self):
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}


# ------------------------------------------------------------------------------------- MXFP4 (§3.3)

def mxfp4_decode(packed, scale):
    """W[R, C] from weight_packed U8[R, C/2] and weight_scale U8[R, C/32]:
    low nibble -> column 2j, high nibble -> 2j+1; value E2M1[code] * 2^(s - 127)."""
    rows, half = packed.shape
    cols = 2 * half
    if scale.shape != (rows, cols // 32) or cols % 32:
        raise RefError(f"MXFP4 scale shape {scale.shape} does not match packed {packed.shape}")
    codes = np.empty((rows, cols), np.uint8)
    codes[:, 0::2] = packed & 0x0F
    codes[:, 1::2] = packed >> 4
    sc = np.ldexp(1.0, scale.astype(np.int64) - 127)
    return (E2M1[codes].reshape(rows, cols // 32, 32) * sc[:, :, None]).reshape(rows, cols)


# ----------------------------------------------------------------------------- weights (§2.3, §2.4)

class Weights:
    """Named float64 weights with an LRU cache bounded in bytes; tensors larger than the budget are
    re-read on every use. Routed experts are decoded only when asked for (i.e. when routed)."""

    def __init__(self, ck, budget_bytes=4 << 30):
        self.ck = ck
        self.budget = budget_bytes
        self.cache = collections.OrderedDict()
        self.used = 0

    def _get(self, key, make):
        a = self.cache.get(key)
        if a is not None:
            self.cache.move_to_end(key)
            return a
        a = make()
        if a.nbytes <= self.budget:
            while self.used + a.nbytes > self.budget:
                _, old = self.cache.popitem(last=False)
                self.used -= old.nbytes
            self.cache[key] = a
            self.used += a.nbytes
        return a

    def get(self, name, shape):
        return self._get(name, lambda: self.ck.f64(PREFIX + name, shape))

    def vec(self, name, n):
        return self.get(name, (n,))

    def expert(self, layer, e, w, rows, cols):
        """Logical matrix [rows, cols] of expert e's w1/w2/w3 in layer `layer` (MXFP4, §2.4)."""
        base = f"{PREFIX}model.layers.{layer}.block_sparse_moe.experts.{e}.{w}."

        def make():
            p = self.ck.u8(base + "weight_packed", (rows, cols // 2))
            s = self.ck.u8(base + "weight_scale", (rows, cols // 32))
            return mxfp4_decode(p, s)
        return self._get(base, make)


# ---------------------------------------------------------------------------------- primitives (§4.0)

def sigmoid(x):
    x = np.asarray(x, np.float64)
    e = np.exp(-np.abs(x))  # never overflows
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def silu(x):
    return x * sigmoid(x)


def situ(a, b, beta, beta_lin):
    """SiTU(a, b) = [beta tanh(a/beta) sigmoid(a)] * [beta_lin tanh(b/beta_lin)]."""
    return (beta * np.tanh(a / beta) * sigmoid(a)) * (beta_lin * np.tanh(b / beta_lin))


def rms_norm(x, w, eps):
    """w * x / sqrt(mean(x^2) + eps) over the last axis (w=None: weightless)."""
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else w * y


def l2n(x):
    """x / max(||x||, 1e-12) over the last axis."""
    return x / np.maximum(np.sqrt(np.sum(x * x, axis=-1, keepdims=True)), 1e-12)


def softmax(s, axis=-1):
    e = np.exp(s - np.max(s, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def attn_res(values, w, eps):
    """Block AttnRes (§4.2): softmax over depth of w . RMS-normalised value; values not normalised."""
    v = np.stack(values)                       # [n, H]
    alpha = softmax(rms_norm(v, None, eps) @ w)
    return alpha @ v


def kda_gate(f_plus_bias, a_log_heads, lower_bound):
    """g[h,d] = lower_bound * sigmoid(exp(A_log[h]) * (f[h,d] + dt_bias[h*D+d])), per-head A_log."""
    return lower_bound * sigmoid(np.exp(a_log_heads)[:, None] * f_plus_bias)


def kda_recurrent_step(S, q, k, v, g, beta):
    """One step of the gated delta rule for all heads, in place on S [NH, Dk, Dv] (§4.3 step 5).
    q, k [NH, Dk] (normalised, q scaled); v [NH, Dv]; g [NH, Dk]; beta [NH]. Returns o [NH, Dv]."""
    S *= np.exp(g)[:, :, None]
    pred = np.einsum("hi,hij->hj", k, S)
    S += beta[:, None, None] * k[:, :, None] * (v - pred)[:, None, :]
    return np.einsum("hi,hij->hj", q, S)


def route(logits, bias, top_k):
    """Router (§4.6): ids = top-k of sigmoid(logits) + bias (ties: lowest index first);
    weights = unbiased scores of ids renormalised with +1e-20. Returns (ids, weights, margin) where
    margin = choice[k-th] - choice[(k+1)-th] (how close the selection was to changing)."""
    s = sigmoid(logits)
    choice = s + bias
    order = np.argsort(-choice, kind="stable")
    ids = order[:top_k]
    wts = s[ids] / (np.sum(s[ids]) + 1e-20)
    margin = choice[order[top_k - 1]] - choice[order[top_k]] if top_k < len(s) else math.inf
    return ids, wts, margin


# ------------------------------------------------------------------------------------- model (§4)

class State:
    """Decode state (§5.1): per KDA layer conv windows [PW, K] for q/k/v and S [NH, D, D];
    per MLA layer the expanded key [T, heads, nope+rope] and value [T, heads, v] caches."""

    def __init__(self, cfg):
        self.pos = 0
        self.kda = {}
        self.mla = {}
        pw = cfg.kda_heads * cfg.kda_head_dim
        for l, is_mla in enumerate(cfg.layer_is_mla):
            if is_mla:
                self.mla[l] = {"k": [], "v": []}
            else:
                self.kda[l] = {s: np.zeros((pw, cfg.conv_kernel)) for s in "qkv"}
                self.kda[l]["S"] = np.zeros((cfg.kda_heads, cfg.kda_head_dim, cfg.kda_head_dim))


class K3Ref:
    def __init__(self, ck, cfg, cache_bytes=4 << 30):
        self.ck, self.cfg = ck, cfg
        self.w = Weights(ck, cache_bytes)
        self.routes = []   # (pos, layer, ids, weights, margin) of every MoE evaluation
        self._check_tensors()

    # -- validation: every tensor the forward reads, with its shape, before any compute --
    def _check_tensors(self):
        for name, shape, dtypes in self._inventory():
            self.ck.rec(PREFIX + name, shape, dtypes)

    def _inventory(self):
        c = self.cfg
        H, V, F = c.hidden_size, c.vocab_size, ("BF16", "F32")
        yield "model.embed_tokens.weight", (V, H), F
        yield "model.norm.weight", (H,), F
        yield "model.output_attn_res_norm.weight", (H,), F
        yield "model.output_attn_res_proj.weight", (1, H), F
        yield "lm_head.weight", (V, H), F
        for l in range(c.num_hidden_layers):
            p = f"model.layers.{l}."
            for n in ("input_layernorm", "post_attention_layernorm", "mlp_res_norm"):
                yield p + n + ".weight", (H,), F
            yield p + "mlp_res_proj.weight", (1, H), F
            if l > 0:  # layer 0's attention AttnRes is never read (§4.2)
                yield p + "self_attention_res_norm.weight", (H,), F
                yield p + "self_attention_res_proj.weight", (1, H), F
            for name, shape in (self._mla_shapes(l) if c.layer_is_mla[l] else self._kda_shapes(l)):
                yield name, shape, F
            if l < c.first_k_dense_replace:
                for name, shape in self._dense_shapes(l):
                    yield name, shape, F
            else:
                for name, shape in self._moe_shapes(l):
                    yield name, shape, F

    def _kda_shapes(self, l):
        c = self.cfg
        H, NH, D = c.hidden_size, c.kda_heads, c.kda_head_dim
        PW = NH * D
        p = f"model.layers.{l}.self_attn."
        rank = self._f_rank(l)
        a_log = self.ck.rec(PREFIX + p + "A_log")
        if len(a_log.shape) != 1 or a_log.shape[0] < NH:
            raise RefError(f"{a_log.path}: tensor {PREFIX}{p}A_log has shape {list(a_log.shape)}, "
                           f"needs at least num_heads={NH} entries")
        shapes = {"q_proj.weight": (PW, H), "k_proj.weight": (PW, H), "v_proj.weight": (PW, H),
                  "g_proj.weight": (PW, H), "f_a_proj.weight": (rank, H), "f_b_proj.weight": (PW, rank),
                  "b_proj.weight": (NH, H), "o_proj.weight": (H, PW),
                  "q_conv1d.weight": (PW, 1, c.conv_kernel), "k_conv1d.weight": (PW, 1, c.conv_kernel),
                  "v_conv1d.weight": (PW, 1, c.conv_kernel), "A_log": a_log.shape, "dt_bias": (PW,),
                  "o_norm.weight": (D,)}
        return [(p + n, s) for n, s in shapes.items()]

    def _f_rank(self, l):
        """Rank of the decay gate's low-rank projection: not a config field, so taken from f_a_proj."""
        r = self.ck.rec(f"{PREFIX}model.layers.{l}.self_attn.f_a_proj.weight")
        if len(r.shape) != 2 or r.shape[0] == 0:
            raise RefError(f"{r.path}: tensor {PREFIX}model.layers.{l}.self_attn.f_a_proj.weight has shape {list(r.shape)}")
        return r.shape[0]

    def _mla_shapes(self, l):
        c = self.cfg
        H, NHm = c.hidden_size, c.num_attention_heads
        p = f"model.layers.{l}.self_attn."
        shapes = {"q_a_proj.weight": (c.q_lora_rank, H), "q_a_layernorm.weight": (c.q_lora_rank,),
                  "q_b_proj.weight": (NHm * (c.qk_nope_head_dim + c.qk_rope_head_dim), c.q_lora_rank),
                  "kv_a_proj_with_mqa.weight": (c.kv_lora_rank + c.qk_rope_head_dim, H),
                  "kv_a_layernorm.weight": (c.kv_lora_rank,),
                  "kv_b_proj.weight": (NHm * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank),
                  "g_proj.weight": (NHm * c.v_head_dim, H), "o_proj.weight": (H, NHm * c.v_head_dim)}
        return [(p + n, s) for n, s in shapes.items()]

    def _dense_shapes(self, l):
        H, I = self.cfg.hidden_size, self.cfg.intermediate_size
        p = f"model.layers.{l}.mlp."
        return [(p + "gate_proj.weight", (I, H)), (p + "up_proj.weight", (I, H)), (p + "down_proj.weight", (H, I))]

    def _moe_shapes(self, l):
        c = self.cfg
        H, E, Z, S = c.hidden_size, c.num_experts, c.routed_expert_hidden_size, c.shared_width
        p = f"model.layers.{l}.block_sparse_moe."
        out = [(p + "gate.weight", (E, H)), (p + "gate.e_score_correction_bias", (E,)),
               (p + "routed_expert_down_proj.weight", (Z, H)), (p + "routed_expert_norm.weight", (Z,)),
               (p + "routed_expert_up_proj.weight", (H, Z))]
        if S:
            out += [(p + "shared_experts.gate_proj.weight", (S, H)), (p + "shared_experts.up_proj.weight", (S, H)),
                    (p + "shared_experts.down_proj.weight", (H, S))]
        return out

    def _expert_headers_ok(self, l, e):
        c = self.cfg
        Z, I = c.routed_expert_hidden_size, c.moe_intermediate_size
        base = f"{PREFIX}model.layers.{l}.block_sparse_moe.experts.{e}."
        for w, rows, cols in (("w1", I, Z), ("w2", Z, I), ("w3", I, Z)):
            self.ck.rec(base + w + ".weight_packed", (rows, cols // 2), ("U8",))
            self.ck.rec(base + w + ".weight_scale", (rows, cols // 32), ("U8",))

    def check_experts(self):
        """Header-only check of every routed expert tensor (no weight bytes are read)."""
        for l in range(self.cfg.first_k_dense_replace, self.cfg.num_hidden_layers):
            for e in range(self.cfg.num_experts):
                self._expert_headers_ok(l, e)

    # -- the layers --
    def _lin(self, name, shape, x):
        return self.w.get(name, shape) @ x

    def kda(self, l, x, st):
        """§4.3: one token of Kimi Delta Attention; st = this layer's conv windows and S."""
        c = self.cfg
        H, NH, D, K = c.hidden_size, c.kda_heads, c.kda_head_dim, c.conv_kernel
        PW = NH * D
        p = f"model.layers.{l}.self_attn."
        streams = {}
        for s in "qkv":
            raw = self._lin(p + s + "_proj.weight", (PW, H), x)
            win = np.concatenate([st[s][:, 1:], raw[:, None]], axis=1)   # oldest ... current
            st[s] = win
            taps = self.w.get(p + s + "_conv1d.weight", (PW, 1, K))[:, 0, :]
            streams[s] = silu(np.sum(taps * win, axis=1)).reshape(NH, D)
        q = l2n(streams["q"]) / math.sqrt(D)
        k = l2n(streams["k"])
        v = streams["v"]
        rank = self._f_rank(l)
        f = self._lin(p + "f_b_proj.weight", (PW, rank), self._lin(p + "f_a_proj.weight", (rank, H), x))
        z = f.reshape(NH, D) + self.w.vec(p + "dt_bias", PW).reshape(NH, D)
        a_log = self.w.get(p + "A_log", self.ck.rec(PREFIX + p + "A_log").shape)[:NH]
        g = kda_gate(z, a_log, c.gate_lower_bound)
        beta = sigmoid(self._lin(p + "b_proj.weight", (NH, H), x))
        o = kda_recurrent_step(st["S"], q, k, v, g, beta)
        o = rms_norm(o, self.w.vec(p + "o_norm.weight", D), c.rms_norm_eps)
        o = o * sigmoid(self._lin(p + "g_proj.weight", (PW, H), x)).reshape(NH, D)
        return self._lin(p + "o_proj.weight", (H, PW), o.reshape(PW))

    def mla(self, l, x, st):
        """§4.4: one token of gated NoPE MLA; st holds this layer's expanded key/value cache."""
        c = self.cfg
        H, NHm, nope, rope, vd = (c.hidden_size, c.num_attention_heads, c.qk_nope_head_dim,
                                  c.qk_rope_head_dim, c.v_head_dim)
        p = f"model.layers.{l}.self_attn."
        cq = rms_norm(self._lin(p + "q_a_proj.weight", (c.q_lora_rank, H), x),
                      self.w.vec(p + "q_a_layernorm.weight", c.q_lora_rank), c.rms_norm_eps)
        query = self._lin(p + "q_b_proj.weight", (NHm * (nope + rope), c.q_lora_rank), cq).reshape(NHm, nope + rope)
        ckv = self._lin(p + "kv_a_proj_with_mqa.weight", (c.kv_lora_rank + rope, H), x)
        lat = rms_norm(ckv[:c.kv_lora_rank], self.w.vec(p + "kv_a_layernorm.weight", c.kv_lora_rank), c.rms_norm_eps)
        kpe = ckv[c.kv_lora_rank:]
        kvf = self._lin(p + "kv_b_proj.weight", (NHm * (nope + vd), c.kv_lora_rank), lat).reshape(NHm, nope + vd)
        key = np.concatenate([kvf[:, :nope], np.broadcast_to(kpe, (NHm, rope))], axis=1)
        st["k"].append(key)
        st["v"].append(kvf[:, nope:])
        keys, vals = np.stack(st["k"]), np.stack(st["v"])           # [T, NHm, .]
        scores = np.einsum("hd,uhd->hu", query, keys) / math.sqrt(nope + rope)
        att = np.einsum("hu,uhd->hd", softmax(scores, axis=1), vals).reshape(NHm * vd)
        att = att * sigmoid(self._lin(p + "g_proj.weight", (NHm * vd, H), x))
        return self._lin(p + "o_proj.weight", (H, NHm * vd), att)

    def dense_ffn(self, l, u):
        """§4.5: W_down . SiTU(W_gate u, W_up u)."""
        c = self.cfg
        H, I = c.hidden_size, c.intermediate_size
        p = f"model.layers.{l}.mlp."
        a = self._lin(p + "gate_proj.weight", (I, H), u)
        b = self._lin(p + "up_proj.weight", (I, H), u)
        return self._lin(p + "down_proj.weight", (H, I), situ(a, b, c.activation_situ_beta, c.activation_situ_linear_beta))

    def moe(self, l, u, pos):
        """§4.6: latent MoE with sigmoid router, MXFP4 experts and fused shared experts."""
        c = self.cfg
        H, E, Z, I, S = c.hidden_size, c.num_experts, c.routed_expert_hidden_size, c.moe_intermediate_size, c.shared_width
        b, bl = c.activation_situ_beta, c.activation_situ_linear_beta
        p = f"model.layers.{l}.block_sparse_moe."
        ids, wts, margin = route(self._lin(p + "gate.weight", (E, H), u),
                                 self.w.vec(p + "gate.e_score_correction_bias", E), c.num_experts_per_token)
        self.routes.append((pos, l, ids, wts, margin))
        z = self._lin(p + "routed_expert_down_proj.weight", (Z, H), u)
        y = np.zeros(Z)
        for e, we in zip(ids, wts):
            h = situ(self.w.expert(l, e, "w1", I, Z) @ z, self.w.expert(l, e, "w3", I, Z) @ z, b, bl)
            y += we * (self.w.expert(l, e, "w2", Z, I) @ h)
        r = self._lin(p + "routed_expert_up_proj.weight", (H, Z),
                      rms_norm(y, self.w.vec(p + "routed_expert_norm.weight", Z), c.rms_norm_eps))
        if S == 0:
            return r
        sp = p + "shared_experts."
        gate, up = self._lin(sp + "gate_proj.weight", (S, H), u), self._lin(sp + "up_proj.weight", (S, H), u)
        sh = self._lin(sp + "down_proj.weight", (H, S), situ(gate, up, b, bl))
        return r + sh

    def _res_w(self, norm, proj):
        H = self.cfg.hidden_size
        return self.w.vec(norm, H) * self.w.get(proj, (1, H))[0]

    def embed(self, token):
        c = self.cfg
        if not 0 <= token < c.vocab_size:
            raise RefError(f"token id {token} is outside the vocabulary 0..{c.vocab_size - 1}")
        return self.ck.f64(PREFIX + "model.embed_tokens.weight", (c.vocab_size, c.hidden_size), token, token + 1)[0]

    def lm_head(self, h):
        c = self.cfg
        name, shape = "lm_head.weight", (c.vocab_size, c.hidden_size)
        if c.vocab_size * c.hidden_size * 8 <= self.w.budget // 2:
            return self.w.get(name, shape) @ h
        step = max(1, (256 << 20) // (8 * c.hidden_size))  # too large to keep: stream row blocks
        return np.concatenate([self.ck.f64(PREFIX + name, shape, r, min(r + step, c.vocab_size)) @ h
                               for r in range(0, c.vocab_size, step)])

    def step(self, token, st):
        """§4.1 + §4.7: consume one token, update st, return its logits [vocab]."""
        c = self.cfg
        eps = c.rms_norm_eps
        P = self.embed(token)
        A = []
        for l in range(c.num_hidden_layers):
            p = f"model.layers.{l}."
            x_att = P if not A else attn_res(A + [P], self._res_w(p + "self_attention_res_norm.weight",
                                                                  p + "self_attention_res_proj.weight"), eps)
            if l % c.attn_res_block_size == 0:
                A.append(P)
                base = None
            else:
                base = P
            xn = rms_norm(x_att, self.w.vec(p + "input_layernorm.weight", c.hidden_size), eps)
            a = self.mla(l, xn, st.mla[l]) if c.layer_is_mla[l] else self.kda(l, xn, st.kda[l])
            P = a if base is None else base + a
            x_ffn = attn_res(A + [P], self._res_w(p + "mlp_res_norm.weight", p + "mlp_res_proj.weight"), eps)
            u = rms_norm(x_ffn, self.w.vec(p + "post_attention_layernorm.weight", c.hidden_size), eps)
            P = P + (self.dense_ffn(l, u) if l < c.first_k_dense_replace else self.moe(l, u, st.pos))
        x = attn_res(A + [P], self._res_w("model.output_attn_res_norm.weight", "model.output_attn_res_proj.weight"), eps)
        st.pos += 1
        return self.lm_head(rms_norm(x, self.w.vec("model.norm.weight", c.hidden_size), eps))

    def forward(self, tokens, st=None):
        """Logits [T, vocab] of a token sequence, one position at a time; st: state to continue."""
        st = State(self.cfg) if st is None else st
        return np.stack([self.step(int(t), st) for t in tokens]), st

    def greedy(self, tokens, n):
        """(logits of the prompt, n greedily generated ids, top-2 margins of each choice)."""
        logits, st = self.forward(tokens)
        out, margins, last = [], [], logits[-1]
        for i in range(n):
            nxt = int(np.argmax(last))          # first maximal index
            out.append(nxt)
            margins.append(top2_margin(last))
            if i + 1 < n:
                last = self.step(nxt, st)
        return logits, out, margins


def top2_margin(row):
    s = np.sort(row)
    return float(s[-1] - s[-2]) if len(s) > 1 else math.inf


def load(model_dir):
    cfg = Config.load(model_dir)
    return cfg, Checkpoint(model_dir)


def parse_tokens(text):
    try:
        ids = [int(t) for t in text.split()]
    except ValueError:
        raise RefError(f"--tokens: not a space-separated list of integers: {text!r}") from None
    if not ids:
        raise RefError("--tokens: empty")
    return ids


def main(argv=None):
    ap = argparse.ArgumentParser(description="float64 reference forward pass of a K3 checkpoint")
    ap.add_argument("--model", required=True, help="checkpoint directory (config.json + *.safetensors)")
    ap.add_argument("--tokens", required=True, help='token ids, space-separated, e.g. "1 2 3"')
    ap.add_argument("--out", help="write little-endian float64 logits [T, vocab] here")
    ap.add_argument("--greedy", type=int, default=0, metavar="N", help="print N greedily generated ids on stdout")
    ap.add_argument("--dump-routes", metavar="FILE", help="write 'pos layer margin id:weight ...' per MoE call")
    ap.add_argument("--cache-gb", type=float, default=4.0, help="float64 weight cache budget (default 4)")
    args = ap.parse_args(argv)
    try:
        if args.greedy < 0:
            raise RefError("--greedy must be >= 0")
        tokens = parse_tokens(args.tokens)
        cfg, ck = load(args.model)
        ref = K3Ref(ck, cfg, int(args.cache_gb * (1 << 30)))
        logits, gen, _ = ref.greedy(tokens, args.greedy)
        if args.out:
            logits.astype("<f8").tofile(args.out)
        if args.dump_routes:
            with open(args.dump_routes, "w") as f:
                for pos, l, ids, wts, margin in ref.routes:
                    pairs = " ".join(f"{i}:{w:.17g}" for i, w in zip(ids, wts))
                    f.write(f"{pos} {l} {margin:.6g} {pairs}\n")
        if args.greedy:
            print(" ".join(str(t) for t in gen))
    except (RefError, OSError) as e:
        print(f"k3_ref: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
