"""Kimi K3's architecture at any size (docs/MODEL.md section 4), in PyTorch, for training.

Reads top to bottom like the specification: primitives (3.0), Block AttnRes (3.2), KDA (3.3),
gated NoPE MLA (3.4), the dense FFN (3.5), the latent MoE with K3's router (3.6), then the whole
model (3.1, 3.7) on a batch of sequences [B, T]. Parameter names are the checkpoint's tensor names
without the `language_model.` prefix, except the routed experts, held as one [E, out, in] tensor
per matrix (w1 = gate, w3 = up, w2 = down) and written per expert by export.py.

Precision: parameters are float32 master weights. On a GPU the trainer runs the matrix products
under bfloat16 autocast; the residual stream, AttnRes, norms, the router and the KDA recurrence
stay in float32. For agreement checks the model runs entirely in float32 or float64.

Training-only parts (none changes what the checkpoint means):
  * e_score_correction_bias is a buffer, moved by the sign of each expert's load imbalance
    (MoE.update_bias), never by the gradient;
  * an optional sequence-level balance loss (MoE.balance_loss);
  * quantisation-aware training (K3Model.qat = True): routed experts are seen through MXFP4
    rounding with a straight-through gradient (quant.fake_mxfp4)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

import kda as kda_ops
from quant import fake_mxfp4


# ------------------------------------------------------------------------------ primitives (3.0)

def _wide(dtype):
    """float64 stays float64; everything else (bfloat16 under autocast) is computed in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


class RMSNorm(nn.Module):
    """weight * (x / sqrt(mean(x^2) + eps)), in float32 (float64 for a float64 input)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.to(_wide(x.dtype))
        return self.weight.to(xf.dtype) * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps))


def l2n(x):
    """x / max(||x||, 1e-12) over the last axis."""
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def situ(a, b, beta, beta_lin):
    """SiTU(a, b) = [beta tanh(a/beta) sigmoid(a)] * [beta_lin tanh(b/beta_lin)], in float32 (float64
    for float64 inputs). Its backward keeps only a and b (_SiTU), not the float32 intermediates."""
    return _SiTU.apply(a, b, beta, beta_lin)


class _SiTU(torch.autograd.Function):
    @staticmethod
    def _parts(a, b, beta, beta_lin):
        a, b = a.to(_wide(a.dtype)), b.to(_wide(b.dtype))
        return torch.tanh(a / beta), torch.sigmoid(a), torch.tanh(b / beta_lin)

    @staticmethod
    def forward(ctx, a, b, beta, beta_lin):
        ctx.save_for_backward(a, b)
        ctx.beta = beta, beta_lin
        ta, sa, tb = _SiTU._parts(a, b, beta, beta_lin)
        return (ta * beta * sa) * (tb * beta_lin)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        beta, beta_lin = ctx.beta
        ta, sa, tb = _SiTU._parts(a, b, beta, beta_lin)
        grad = grad.to(ta.dtype)
        # d/da [beta tanh(a/beta) sigmoid(a)] = (1 - tanh^2) sigmoid + beta tanh sigmoid (1 - sigmoid)
        da = grad * (tb * beta_lin) * ((1 - ta * ta) * sa + beta * ta * sa * (1 - sa))
        db = grad * (ta * beta * sa) * (1 - tb * tb)
        return da.to(a.dtype), db.to(b.dtype), None, None


def linear(in_dim, out_dim, std):
    m = nn.Linear(in_dim, out_dim, bias=False)
    nn.init.normal_(m.weight, std=std)
    return m


# ------------------------------------------------------------------------------- AttnRes (3.2)

def attn_res(values, norm_w, proj_w, eps):
    """Block AttnRes over depth: softmax_i(w . RMS(v_i)) weighted sum of the unnormalised v_i,
    w = norm_weight * proj_weight (the folded pseudo-query). values: list of [..., H], float32."""
    v = torch.stack(values)                                         # [n, ..., H]
    w = norm_w * proj_w[0]
    keys = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
    alpha = torch.softmax((keys * w).sum(-1), dim=0)                # [n, ...]
    return (alpha.unsqueeze(-1) * v).sum(0)


class AttnResWeights(nn.Module):
    """The two tensors of one AttnRes site: `{site}_norm.weight` [H] and `{site}_proj.weight` [1, H].
    The pseudo-query starts at zero: a uniform average over depth."""

    def __init__(self, dim):
        super().__init__()
        self.norm = nn.Parameter(torch.ones(dim))
        self.proj = nn.Parameter(torch.zeros(1, dim))


# ----------------------------------------------------------------------------------- KDA (3.3)

class KDA(nn.Module):
    def __init__(self, cfg, out_std):
        super().__init__()
        H, NH, D, W = cfg.hidden_size, cfg.kda_heads, cfg.kda_head_dim, cfg.kda_width
        self.NH, self.D, self.K = NH, D, cfg.conv_kernel
        self.lower_bound, self.eps = cfg.gate_lower_bound, cfg.rms_norm_eps
        std = H ** -0.5
        self.q_proj, self.k_proj, self.v_proj = linear(H, W, std), linear(H, W, std), linear(H, W, std)
        self.g_proj = linear(H, W, std)                              # output gate
        self.f_a_proj, self.f_b_proj = linear(H, D, std), linear(D, W, 0.1 * D ** -0.5)
        self.b_proj = linear(H, NH, std)
        self.o_proj = linear(W, H, out_std)
        for s in "qkv":
            setattr(self, f"{s}_conv1d", nn.Conv1d(W, W, self.K, groups=W, bias=False))
        self.A_log = nn.Parameter(torch.zeros(cfg.a_log_len))       # entries past kda_heads: padding
        # decay half-lives log-uniform over 1 .. 512 tokens: g = -ln2/h = lb * sigmoid(dt_bias)
        half_life = torch.exp(torch.rand(W) * math.log(512.0))
        self.dt_bias = nn.Parameter(torch.logit(math.log(2.0) / (half_life * -cfg.gate_lower_bound)))
        self.o_norm = RMSNorm(D, cfg.rms_norm_eps)
        self.chunk = kda_ops.chunk_size(cfg.gate_lower_bound)
        self.recurrent = False                                       # True: the per-token form

    def conv(self, name, x):
        """Causal depthwise conv (tap K-1 = current token, zero history), then SiLU. x [B, T, W]."""
        w = getattr(self, f"{name}_conv1d").weight
        y = F.conv1d(x.transpose(1, 2), w.to(x.dtype), padding=self.K - 1, groups=w.shape[0])
        return F.silu(y[..., :x.shape[1]].transpose(1, 2))

    def gate(self, x):
        """g[h,d] = lb * sigmoid(exp(A_log[h]) * (f[h,d] + dt_bias[h*D+d])), per-head A_log."""
        B, T, _ = x.shape
        f = self.f_b_proj(self.f_a_proj(x))
        dt = f.to(self.dt_bias.dtype) + self.dt_bias
        rate = torch.exp(self.A_log[:self.NH]).view(self.NH, 1)
        return self.lower_bound * torch.sigmoid(rate * dt.view(B, T, self.NH, self.D))

    def forward(self, x):
        B, T, _ = x.shape
        shape = (B, T, self.NH, self.D)
        work = _wide(x.dtype)
        q = l2n(self.conv("q", self.q_proj(x)).to(work).view(shape)) / math.sqrt(self.D)
        k = l2n(self.conv("k", self.k_proj(x)).to(work).view(shape))
        v = self.conv("v", self.v_proj(x)).to(work).view(shape)
        g = self.gate(x).to(work)
        beta = torch.sigmoid(self.b_proj(x).to(work))
        run = kda_ops.kda_recurrent if self.recurrent else kda_ops.kda_chunked
        o, _ = run(q, k, v, g, beta) if self.recurrent else run(q, k, v, g, beta, chunk=self.chunk)
        o = self.o_norm(o) * torch.sigmoid(self.g_proj(x).to(work).view(shape))
        return self.o_proj(o.reshape(B, T, -1))


# ----------------------------------------------------------------------------------- MLA (3.4)

def causal_attention(q, k, v, scale):
    """q, k [B, T, NH, Dqk], v [B, T, NH, Dv] -> [B, T, NH, Dv]; softmax in float32 or float64."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    if hasattr(F, "scaled_dot_product_attention") and q.dtype != torch.float64 and q.is_cuda:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    else:
        s = (q @ k.transpose(-1, -2)) * scale
        T = s.shape[-1]
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        out = torch.softmax(s, -1, dtype=_wide(s.dtype)).to(v.dtype) @ v
    return out.transpose(1, 2)


class MLA(nn.Module):
    def __init__(self, cfg, out_std):
        super().__init__()
        H, NH = cfg.hidden_size, cfg.num_attention_heads
        self.NH, self.nope, self.rope, self.vd = NH, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        self.kv_lora = cfg.kv_lora_rank
        std = H ** -0.5
        self.q_a_proj = linear(H, cfg.q_lora_rank, std)
        self.q_a_layernorm = RMSNorm(cfg.q_lora_rank, cfg.rms_norm_eps)
        self.q_b_proj = linear(cfg.q_lora_rank, NH * (self.nope + self.rope), cfg.q_lora_rank ** -0.5)
        self.kv_a_proj_with_mqa = linear(H, self.kv_lora + self.rope, std)
        self.kv_a_layernorm = RMSNorm(self.kv_lora, cfg.rms_norm_eps)
        self.kv_b_proj = linear(self.kv_lora, NH * (self.nope + self.vd), self.kv_lora ** -0.5)
        self.g_proj = linear(H, NH * self.vd, std)
        self.o_proj = linear(NH * self.vd, H, out_std)

    def forward(self, x):
        B, T, _ = x.shape
        NH, nope, rope = self.NH, self.nope, self.rope
        cq = self.q_a_layernorm(self.q_a_proj(x))
        query = self.q_b_proj(cq).view(B, T, NH, nope + rope)        # [q_nope | q_pe], no rotary
        ckv = self.kv_a_proj_with_mqa(x)
        latent = self.kv_a_layernorm(ckv[..., :self.kv_lora])
        k_pe = ckv[..., self.kv_lora:]                               # shared by all heads, not normalised
        kvf = self.kv_b_proj(latent).view(B, T, NH, nope + self.vd)
        key = torch.cat([kvf[..., :nope], k_pe.unsqueeze(2).expand(B, T, NH, rope)], dim=-1)
        value = kvf[..., nope:]
        att = causal_attention(query, key.to(query.dtype), value.to(query.dtype), (nope + rope) ** -0.5)
        att = att.reshape(B, T, NH * self.vd) * torch.sigmoid(self.g_proj(x))
        return self.o_proj(att)


# ----------------------------------------------------------------------------- dense FFN (3.5)

class DenseFFN(nn.Module):
    def __init__(self, cfg, out_std):
        super().__init__()
        H, I = cfg.hidden_size, cfg.intermediate_size
        self.beta, self.beta_lin = cfg.activation_situ_beta, cfg.activation_situ_linear_beta
        self.gate_proj, self.up_proj = linear(H, I, H ** -0.5), linear(H, I, H ** -0.5)
        self.down_proj = linear(I, H, out_std)

    def forward(self, u):
        return self.down_proj(situ(self.gate_proj(u), self.up_proj(u), self.beta, self.beta_lin))


# ----------------------------------------------------------------------------------- MoE (3.6)

class Router(nn.Module):
    """`gate.weight` [E, H] and `gate.e_score_correction_bias` [E] (a buffer: not trained by
    gradient)."""

    def __init__(self, cfg):
        super().__init__()
        # small at the start, so the first routings are close to uniform (balanced) rather than set by
        # the random directions of a full-scale initialisation
        self.weight = nn.Parameter(torch.randn(cfg.num_experts, cfg.hidden_size) * 0.1 * cfg.hidden_size ** -0.5)
        self.register_buffer("e_score_correction_bias", torch.zeros(cfg.num_experts))

    def forward(self, u, top_k):
        """Sigmoid scores, selection by score + bias, weights = selected unbiased scores
        renormalised with +1e-20. In float32 (float64 for float64). Returns (ids, weights, scores)."""
        work = _wide(u.dtype)
        with kda_ops.no_autocast(u.device):
            s = torch.sigmoid(F.linear(u.to(work), self.weight.to(work)))
            ids = torch.topk(s + self.e_score_correction_bias.to(work), top_k, dim=-1).indices
            w = s.gather(-1, ids)
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return ids, w, s


def grouped_experts(z, ids, wts, w1, w3, w2, beta, beta_lin):
    """sum_k wts[n,k] * W2_e SiTU(W1_e z_n, W3_e z_n) for e = ids[n,k], as three batched products:
    the N*k (token, expert) pairs are sorted by expert into an [E, capacity, Z] buffer, capacity =
    the busiest expert's count rounded up to 16 (no pair is dropped). z [N, Z] -> [N, Z] float."""
    N, k = ids.shape
    E, _, Z = w1.shape
    flat = ids.reshape(-1)
    order = torch.argsort(flat)
    expert = flat[order]
    counts = torch.bincount(flat, minlength=E)
    rank = torch.arange(N * k, device=z.device) - (torch.cumsum(counts, 0) - counts)[expert]
    cap = -(-int(counts.max()) // 16) * 16
    slot = expert * cap + rank
    token = order // k
    x = z.new_zeros(E * cap, Z).index_copy(0, slot, z[token]).view(E, cap, Z)
    h = situ(torch.bmm(x, w1.transpose(1, 2)), torch.bmm(x, w3.transpose(1, 2)), beta, beta_lin)
    y = torch.bmm(h, w2.transpose(1, 2)).view(E * cap, Z)[slot]
    out_dtype = _wide(z.dtype)
    contrib = y.to(out_dtype) * wts.reshape(-1)[order].unsqueeze(-1).to(out_dtype)
    return torch.zeros(N, Z, dtype=out_dtype, device=z.device).index_add(0, token, contrib), counts


class SharedExperts(nn.Module):
    def __init__(self, cfg, out_std):
        super().__init__()
        H, S = cfg.hidden_size, cfg.shared_width
        self.gate_proj, self.up_proj = linear(H, S, H ** -0.5), linear(H, S, H ** -0.5)
        self.down_proj = linear(S, H, out_std)


class MoE(nn.Module):
    def __init__(self, cfg, out_std):
        super().__init__()
        H, E, Z, I = cfg.hidden_size, cfg.num_experts, cfg.routed_expert_hidden_size, cfg.moe_intermediate_size
        self.top_k, self.E = cfg.num_experts_per_token, E
        self.beta, self.beta_lin = cfg.activation_situ_beta, cfg.activation_situ_linear_beta
        self.gate = Router(cfg)
        self.routed_expert_down_proj = linear(H, Z, H ** -0.5)
        self.routed_expert_norm = RMSNorm(Z, cfg.rms_norm_eps)
        self.routed_expert_up_proj = linear(Z, H, out_std)
        self.w1 = nn.Parameter(torch.randn(E, I, Z) * Z ** -0.5)    # gate
        self.w3 = nn.Parameter(torch.randn(E, I, Z) * Z ** -0.5)    # up
        self.w2 = nn.Parameter(torch.randn(E, Z, I) * I ** -0.5)    # down
        self.shared_experts = SharedExperts(cfg, out_std) if cfg.shared_width else None
        self.qat = False
        self.register_buffer("load", torch.zeros(E), persistent=False)   # routed pairs since update_bias
        self.aux = None                                                  # balance loss of the last forward

    def expert_weights(self):
        ws = (self.w1, self.w3, self.w2)
        return tuple(fake_mxfp4(w) for w in ws) if self.qat else ws

    def forward(self, u):
        B, T, H = u.shape
        flat = u.reshape(B * T, H)
        ids, wts, scores = self.gate(flat, self.top_k)
        z = self.routed_expert_down_proj(flat)                      # no norm before the experts
        y, counts = grouped_experts(z, ids, wts, *self.expert_weights(), self.beta, self.beta_lin)
        r = self.routed_expert_up_proj(self.routed_expert_norm(y))
        if self.training:
            self.load += counts.to(self.load.dtype)
            self.aux = self.balance_loss(ids.view(B, T, -1), scores.view(B, T, -1))
        if self.shared_experts is not None:
            sh = self.shared_experts
            r = r + sh.down_proj(situ(sh.gate_proj(flat), sh.up_proj(flat), self.beta, self.beta_lin))
        return r.view(B, T, H)

    def balance_loss(self, ids, scores):
        """DeepSeek-V3's sequence-wise balance loss: sum_i f_i P_i per sequence, f_i = E/(k T) x
        the tokens routed to i, P_i = mean over tokens of the normalised scores."""
        B, T, k = ids.shape
        f = torch.zeros(B, self.E, device=ids.device).scatter_add_(
            1, ids.reshape(B, -1), torch.ones(B, T * k, device=ids.device)) * (self.E / (k * T))
        p = (scores / scores.sum(-1, keepdim=True)).mean(1)
        return (f * p).sum(-1).mean()

    @torch.no_grad()
    def update_bias(self, rate):
        """Aux-loss-free balancing: each expert's bias moves by `rate` towards equal load
        (up when the expert had fewer than the mean pairs since the last call, down when more)."""
        self.gate.e_score_correction_bias += rate * torch.sign(self.load.mean() - self.load)  # 0 when idle
        self.load.zero_()


# ------------------------------------------------------------------------------- model (3.1, 3.7)

class Layer(nn.Module):
    def __init__(self, cfg, l):
        super().__init__()
        H, eps = cfg.hidden_size, cfg.rms_norm_eps
        out_std = (2 * cfg.num_hidden_layers) ** -0.5
        self.eps = eps
        self.input_layernorm = RMSNorm(H, eps)
        self.self_attention_res = AttnResWeights(H)    # unused on layer 0 (no anchors yet)
        self.post_attention_layernorm = RMSNorm(H, eps)
        self.mlp_res = AttnResWeights(H)
        self.self_attn = MLA(cfg, out_std * H ** -0.5) if cfg.is_mla(l) else KDA(cfg, out_std * cfg.kda_width ** -0.5)
        if cfg.is_moe(l):
            self.block_sparse_moe = MoE(cfg, out_std * cfg.routed_expert_hidden_size ** -0.5)
        else:
            self.mlp = DenseFFN(cfg, out_std * cfg.intermediate_size ** -0.5)

    def ffn(self, u):
        return self.block_sparse_moe(u) if hasattr(self, "block_sparse_moe") else self.mlp(u)

    def forward(self, P, anchors, boundary):
        """One layer (3.1): AttnRes, attention, AttnRes, FFN. P: the running partial-block sum;
        anchors: the blocks' anchors before this layer (a tuple). At a block boundary P becomes an
        anchor and the partial sum restarts from the attention output. Returns the new P."""
        ar, mr = self.self_attention_res, self.mlp_res
        x_att = P if not anchors else attn_res(list(anchors) + [P], ar.norm, ar.proj, self.eps)
        base = None if boundary else P
        if boundary:
            anchors = anchors + (P,)
        a = self.self_attn(self.input_layernorm(x_att)).to(P.dtype)
        P = a if base is None else base + a
        x_ffn = attn_res(list(anchors) + [P], mr.norm, mr.proj, self.eps)
        return P + self.ffn(self.post_attention_layernorm(x_ffn)).to(P.dtype)


class Backbone(nn.Module):
    """`model.*` of the checkpoint."""

    def __init__(self, cfg):
        super().__init__()
        H = cfg.hidden_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, H)
        nn.init.normal_(self.embed_tokens.weight, std=1.0)
        self.layers = nn.ModuleList(Layer(cfg, l) for l in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        self.output_attn_res = AttnResWeights(H)


class K3Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.lm_head = linear(cfg.hidden_size, cfg.vocab_size, 0.5 * cfg.hidden_size ** -0.5)
        self.checkpoint = False

    def moe_layers(self):
        return [l.block_sparse_moe for l in self.model.layers if hasattr(l, "block_sparse_moe")]

    def kda_layers(self):
        return [l.self_attn for l in self.model.layers if isinstance(l.self_attn, KDA)]

    def set_qat(self, on):
        for m in self.moe_layers():
            m.qat = on

    def hidden(self, ids):
        """The final normalised hidden state [B, T, H] of token ids [B, T] (3.1, 3.7). With
        self.checkpoint set, training recomputes each layer's activations in the backward pass
        instead of keeping them."""
        m = self.model
        P = m.embed_tokens(ids).to(_wide(m.embed_tokens.weight.dtype))
        anchors = ()
        for l, layer in enumerate(m.layers):
            boundary = l % self.cfg.attn_res_block_size == 0
            if self.checkpoint and self.training:
                P_next = torch.utils.checkpoint.checkpoint(layer, P, anchors, boundary, use_reentrant=False)
            else:
                P_next = layer(P, anchors, boundary)
            if boundary:
                anchors = anchors + (P,)
            P = P_next
        o = m.output_attn_res
        return m.norm(attn_res(list(anchors) + [P], o.norm, o.proj, self.cfg.rms_norm_eps))

    def forward(self, ids):
        """Logits [B, T, vocab]; row t predicts token t + 1."""
        return self.lm_head(self.hidden(ids))

    def balance_loss(self):
        aux = [m.aux for m in self.moe_layers() if m.aux is not None]
        return torch.stack(aux).mean() if aux else None
