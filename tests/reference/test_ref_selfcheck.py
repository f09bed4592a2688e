#!/usr/bin/env python3
"""Checks the float64 reference (k3_ref.py) piece by piece against values derived by hand or by an
algebraically different evaluation, then end to end on small checkpoints written by ckpt_writer.py.
Prints one line per failure and "N passed, N failed" last; exit status 1 on any failure.

usage: test_ref_selfcheck.py [SCRATCH_DIR]   (default: a fresh temporary directory)"""
import io
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from contextlib import redirect_stdout

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ckpt_writer as cw  # noqa: E402
import k3_ref as R  # noqa: E402

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}")


def close(a, b, tol, what):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    err = float(np.max(np.abs(a - b))) if a.shape == b.shape and a.size else math.inf
    check(err <= tol, f"{what}: max error {err:.3g} > {tol:.3g} (shapes {a.shape} {b.shape})")


def raises(fn, needle, what):
    try:
        fn()
    except R.RefError as e:
        check(needle in str(e), f"{what}: message {str(e)!r} lacks {needle!r}")
        return
    check(False, f"{what}: no RefError raised")


# ------------------------------------------------------------------------------ primitives

def test_situ():
    for b in (-30.0, -1.0, 0.0, 2.5, 100.0):
        check(R.situ(0.0, b, 4.0, 25.0) == 0.0, f"SiTU(0, {b}) == 0")
        check(R.situ(b, 0.0, 4.0, 25.0) == 0.0, f"SiTU({b}, 0) == 0")
    # saturation: tanh -> 1 and sigmoid -> 1, so the caps multiply: 4 * 25
    close(R.situ(1e3, 1e4, 4.0, 25.0), 100.0, 1e-12, "SiTU saturates at beta*beta_lin")
    close(R.situ(-1e3, 1e4, 4.0, 25.0), 0.0, 1e-12, "SiTU vanishes for very negative gate")
    # a=2, b=3: [4 tanh(2/4) sigmoid(2)] [25 tanh(3/25)]
    close(R.situ(2.0, 3.0, 4.0, 25.0), 4 * math.tanh(0.5) / (1 + math.exp(-2)) * 25 * math.tanh(0.12), 1e-14, "SiTU(2, 3)")


def test_norms():
    close(R.rms_norm(np.array([3.0, 4.0]), np.array([1.0, 2.0]), 0.0),
          [3 / math.sqrt(12.5), 8 / math.sqrt(12.5)], 1e-15, "RMSNorm weight after normalisation")
    close(R.l2n(np.array([3.0, 4.0])), [0.6, 0.8], 1e-15, "L2N")
    check(np.all(R.l2n(np.zeros(4)) == 0), "L2N of zero is zero (1e-12 floor)")
    close(R.l2n(np.array([1e-13, 0.0])), [0.1, 0.0], 1e-15, "L2N below the 1e-12 floor divides by 1e-12")
    close(R.sigmoid(np.array([-800.0, 0.0, 800.0])), [0.0, 0.5, 1.0], 0, "sigmoid saturates without overflow")


def test_attn_res():
    v = np.array([0.3, -1.2, 2.0, 0.5])
    close(R.attn_res([v], np.array([5.0, -3.0, 1.0, 2.0]), 1e-5), v, 0, "AttnRes of one value is that value")
    close(R.attn_res([v, v, v], np.array([5.0, -3.0, 1.0, 2.0]), 1e-5), v, 1e-15, "AttnRes of equal values")
    u = np.array([1.0, 1.0, -1.0, 4.0])
    close(R.attn_res([v, u], np.zeros(4), 1e-5), (v + u) / 2, 1e-15, "AttnRes with w = 0 is the mean")
    # e0=[1,0], e1=[0,1]: keys sqrt(2)*e_i (eps 0); w=[a,0] -> scores [a*sqrt2, 0] -> alpha0 = sigmoid(a*sqrt2)
    a = 0.7
    al = 1 / (1 + math.exp(-a * math.sqrt(2)))
    close(R.attn_res([np.array([1.0, 0.0]), np.array([0.0, 1.0])], np.array([a, 0.0]), 0.0),
          [al, 1 - al], 1e-15, "AttnRes two-value hand case")
    # values are not normalised: scaling one value scales its contribution, not its weight
    close(R.attn_res([np.array([10.0, 0.0]), np.array([0.0, 1.0])], np.array([a, 0.0]), 0.0),
          [10 * al, 1 - al], 1e-13, "AttnRes keys normalised, values not")


def test_kda_gate():
    rng = np.random.default_rng(1)
    z = rng.standard_normal((3, 5)) * 1.5
    a_log = np.array([-1.0, 0.0, 1.5])
    g = R.kda_gate(z, a_log, -5.0)
    check(np.all(g > -5.0) and np.all(g < 0.0), "KDA gate in (lower_bound, 0)")
    close(g[1, 2], -5.0 / (1 + math.exp(-z[1, 2])), 1e-14, "KDA gate with A_log = 0 is lb*sigmoid(z)")
    close(g[2, 0], -5.0 / (1 + math.exp(-math.exp(1.5) * z[2, 0])), 1e-14, "KDA gate per-head rate exp(A_log[h])")
    g2 = R.kda_gate(z, np.array([-1.0, 0.3, 1.5]), -5.0)
    check(np.array_equal(g2[[0, 2]], g[[0, 2]]) and not np.array_equal(g2[1], g[1]),
          "A_log[h] changes only head h's gate")
    close(R.kda_gate(np.zeros((1, 1)), np.array([0.0]), -2.0), [[-1.0]], 0, "gate at z=0 is lb/2")


def test_route():
    ids, w, _ = R.route(np.zeros(8), np.zeros(8), 3)
    check(list(ids) == [0, 1, 2], f"router ties pick the lowest indices (got {list(ids)})")
    close(w, [1 / 3] * 3, 1e-15, "tied router weights are equal")
    logits = np.array([0.0, 2.0, -1.0, 1.0, 3.0])
    bias = np.array([5.0, 0.0, 0.0, 0.0, 0.0])
    ids, w, margin = R.route(logits, bias, 2)
    check(list(ids) == [0, 4], f"bias used for selection (got {list(ids)})")
    s0, s4 = 0.5, 1 / (1 + math.exp(-3.0))
    close(w, [s0 / (s0 + s4), s4 / (s0 + s4)], 1e-15, "router weights are unbiased scores renormalised")
    close(margin, s4 - 1 / (1 + math.exp(-2.0)), 1e-15, "route margin = k-th minus (k+1)-th choice")
    rng = np.random.default_rng(2)
    for _ in range(20):
        ids, w, _ = R.route(rng.standard_normal(16) * 3, rng.standard_normal(16) * 0.1, 4)
        check(abs(np.sum(w) - 1.0) < 1e-15 and len(set(ids.tolist())) == 4, "router weights sum to 1")


def test_mxfp4():
    # row 0: bytes 0x10, 0x32, ..., 0xFE put codes 0..15 in column order (low nibble first)
    row0 = [(2 * j + 1) << 4 | (2 * j) for j in range(8)] + [0x71] + [0x00] * 7
    row1 = [0x8F] + [0x22] * 15
    packed = np.array([row0, row1], np.uint8)
    table = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    scale = np.array([[128], [125]], np.uint8)          # x2 and x1/4
    w = R.mxfp4_decode(packed, scale)
    check(w.shape == (2, 32), "MXFP4 shape [R, C]")
    close(w[0, :16], [2 * t for t in table], 0, "MXFP4 codes 0..15, low nibble = even column")
    close(w[0, 16:18], [1.0, 12.0], 0, "0x71 decodes to (+0.5, +6) times 2")
    close(w[0, 18:], [0.0] * 14, 0, "zero bytes decode to zero")
    close(w[1, :2], [-1.5, -0.0], 0, "0x8F decodes to (-6, -0) / 4")
    check(np.signbit(w[1, 1]), "code 8 is negative zero")
    close(w[1, 2:], [0.25] * 30, 0, "0x22 decodes to (+1, +1) / 4")
    # the scale applies per 32 input columns of its own row
    packed2 = np.full((1, 32), 0x22, np.uint8)
    close(R.mxfp4_decode(packed2, np.array([[127, 130]], np.uint8))[0], [1.0] * 32 + [8.0] * 32, 0,
          "MXFP4 scale groups run along the input axis")


def test_bf16():
    raw = struct.pack("<4H", 0x3F80, 0xC000, 0x3E20, 0x0001)
    close(R.bf16_to_f64(raw), [1.0, -2.0, 0.15625, 2.0 ** -133], 0, "BF16 widening is exact (bits << 16)")
    back = R.bf16_to_f64(cw.bf16_bytes(np.array([1.0, 0.1, -3.5])))
    close(back, [1.0, 0.10009765625, -3.5], 0, "writer rounds to nearest BF16")


# ------------------------------------------------------------------- KDA: chunked vs step

def kda_chunked(S0, Q, K, Vv, G, B, chunk):
    """Gated delta rule for one head over T steps, evaluated chunk-wise in closed form.
    With Gam_t = exp(cumsum g within the chunk), the state is S_t = Gam_t (S0 + sum_{s<=t} Gam_s^-1 k_s u_s^T)
    where the pseudo-values u solve (I + diag(beta) A) U = diag(beta) (V - Ktilde S0),
    A[t,s] = sum_i k_t[i] k_s[i] exp(G_t[i]-G_s[i]) (s<t), Ktilde_t = exp(G_t) * k_t; the outputs are
    o_t = (exp(G_t) * q_t) S0 + sum_{s<=t} (sum_i q_t[i] k_s[i] exp(G_t[i]-G_s[i])) u_s."""
    T = len(Q)
    S = S0.copy()
    out = np.zeros((T, S0.shape[1]))
    for c0 in range(0, T, chunk):
        q, k, v, g, b = Q[c0:c0 + chunk], K[c0:c0 + chunk], Vv[c0:c0 + chunk], G[c0:c0 + chunk], B[c0:c0 + chunk]
        n = len(q)
        Gc = np.cumsum(g, axis=0)
        diff = Gc[:, None, :] - Gc[None, :, :]                       # [t, s, i]
        lower = np.tril(np.ones((n, n), bool), -1)
        incl = np.tril(np.ones((n, n), bool))
        decay_s = np.exp(np.where(lower[:, :, None], diff, -np.inf))
        decay_i = np.exp(np.where(incl[:, :, None], diff, -np.inf))
        A = np.einsum("ti,si,tsi->ts", k, k, decay_s)
        U = np.linalg.solve(np.eye(n) + b[:, None] * A, b[:, None] * (v - (np.exp(Gc) * k) @ S))
        Bm = np.einsum("ti,si,tsi->ts", q, k, decay_i)
        out[c0:c0 + n] = (np.exp(Gc) * q) @ S + Bm @ U
        S = np.exp(Gc[-1])[:, None] * S + (np.exp(Gc[-1] - Gc) * k).T @ U
    return out, S


def test_kda_chunked():
    rng = np.random.default_rng(3)
    NH, D, Dv, T = 2, 6, 5, 11
    Q = R.l2n(rng.standard_normal((T, NH, D))) / math.sqrt(D)
    K = R.l2n(rng.standard_normal((T, NH, D)))
    V = rng.standard_normal((T, NH, Dv))
    G = -5 * R.sigmoid(rng.standard_normal((T, NH, D)) * 2)
    B = R.sigmoid(rng.standard_normal((T, NH)))
    S0 = rng.standard_normal((NH, D, Dv)) * 0.3
    S = S0.copy()
    steps = np.stack([R.kda_recurrent_step(S, Q[t], K[t], V[t], G[t], B[t]) for t in range(T)])
    for chunk in (1, 4, T):
        for h in range(NH):
            o, Sh = kda_chunked(S0[h], Q[:, h], K[:, h], V[:, h], G[:, h], B[:, h], chunk)
            close(steps[:, h], o, 1e-12, f"KDA step-by-step == chunked closed form (chunk {chunk}, head {h}) outputs")
            close(S[h], Sh, 1e-12, f"KDA step-by-step == chunked closed form (chunk {chunk}, head {h}) state")
    # one step by hand: S0 = 0, g = 0 -> S = beta k v^T, o = beta (q.k) v
    q, k, v = np.array([[1.0, 0.0]]), np.array([[0.6, 0.8]]), np.array([[2.0, -1.0]])
    o = R.kda_recurrent_step(np.zeros((1, 2, 2)), q, k, v, np.zeros((1, 2)), np.array([0.5]))
    close(o, [[0.6, -0.3]], 1e-15, "KDA first step by hand")


# ------------------------------------------------------------------------- layer batched checks

def mk_model(scratch, name, seed=1, edit=None, **over):
    d = os.path.join(scratch, name)
    if os.path.exists(d):
        shutil.rmtree(d)
    ts = cw.write_checkpoint(d, cw.tiny_config(**over), seed, edit=edit)
    cfg, ck = R.load(d)
    return R.K3Ref(ck, cfg), ts, d


def fresh(d, **kw):
    cfg, ck = R.load(d)
    return R.K3Ref(ck, cfg, **kw)


def kda_layer_batched(ref, l, X, chunk=3):
    """A KDA layer over all rows of X at once: conv as a padded cross-correlation, recurrence chunked."""
    c, w = ref.cfg, ref.w
    H, NH, D, Kc = c.hidden_size, c.kda_heads, c.kda_head_dim, c.conv_kernel
    PW, T = NH * D, len(X)
    p = f"model.layers.{l}.self_attn."
    conv = {}
    for s in "qkv":
        raw = X @ w.get(p + s + "_proj.weight", (PW, H)).T
        padded = np.concatenate([np.zeros((Kc - 1, PW)), raw])
        taps = w.get(p + s + "_conv1d.weight", (PW, 1, Kc))[:, 0]
        conv[s] = R.silu(sum(taps[:, j] * padded[j:j + T] for j in range(Kc))).reshape(T, NH, D)
    q, k, v = R.l2n(conv["q"]) / math.sqrt(D), R.l2n(conv["k"]), conv["v"]
    rank = w.ck.rec(R.PREFIX + p + "f_a_proj.weight").shape[0]
    f = X @ w.get(p + "f_a_proj.weight", (rank, H)).T @ w.get(p + "f_b_proj.weight", (PW, rank)).T
    a_log = w.ck.f64(R.PREFIX + p + "A_log", w.ck.rec(R.PREFIX + p + "A_log").shape)[:NH]
    g = -5.0 * R.sigmoid(np.exp(a_log)[None, :, None] * (f + w.vec(p + "dt_bias", PW)).reshape(T, NH, D))
    beta = R.sigmoid(X @ w.get(p + "b_proj.weight", (NH, H)).T)
    o = np.stack([kda_chunked(np.zeros((D, D)), q[:, h], k[:, h], v[:, h], g[:, h], beta[:, h], chunk)[0]
                  for h in range(NH)], axis=1)
    o = R.rms_norm(o, w.vec(p + "o_norm.weight", D), c.rms_norm_eps)
    o = o * R.sigmoid(X @ w.get(p + "g_proj.weight", (PW, H)).T).reshape(T, NH, D)
    return o.reshape(T, PW) @ w.get(p + "o_proj.weight", (H, PW)).T


def mla_layer_batched(ref, l, X):
    """An MLA layer over all rows at once with a causal mask (no cache)."""
    c, w = ref.cfg, ref.w
    H, NHm, T = c.hidden_size, c.num_attention_heads, len(X)
    nope, rope, vd = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
    p = f"model.layers.{l}.self_attn."
    cq = R.rms_norm(X @ w.get(p + "q_a_proj.weight", (c.q_lora_rank, H)).T,
                    w.vec(p + "q_a_layernorm.weight", c.q_lora_rank), c.rms_norm_eps)
    qf = (cq @ w.get(p + "q_b_proj.weight", (NHm * (nope + rope), c.q_lora_rank)).T).reshape(T, NHm, nope + rope)
    ckv = X @ w.get(p + "kv_a_proj_with_mqa.weight", (c.kv_lora_rank + rope, H)).T
    lat = R.rms_norm(ckv[:, :c.kv_lora_rank], w.vec(p + "kv_a_layernorm.weight", c.kv_lora_rank), c.rms_norm_eps)
    kvf = (lat @ w.get(p + "kv_b_proj.weight", (NHm * (nope + vd), c.kv_lora_rank)).T).reshape(T, NHm, nope + vd)
    # q.k = q_nope.k_nope + q_pe.kpe (kpe shared by heads, no rotary)
    scores = (np.einsum("thd,uhd->htu", qf[:, :, :nope], kvf[:, :, :nope])
              + np.einsum("thd,ud->htu", qf[:, :, nope:], ckv[:, c.kv_lora_rank:])) / math.sqrt(nope + rope)
    scores = np.where(np.tril(np.ones((T, T), bool))[None], scores, -np.inf)
    att = np.einsum("htu,uhd->thd", R.softmax(scores, axis=2), kvf[:, :, nope:]).reshape(T, NHm * vd)
    att = att * R.sigmoid(X @ w.get(p + "g_proj.weight", (NHm * vd, H)).T)
    return att @ w.get(p + "o_proj.weight", (H, NHm * vd)).T


def test_layers_batched(scratch):
    ref, _, _ = mk_model(scratch, "layers")
    rng = np.random.default_rng(4)
    X = rng.standard_normal((9, ref.cfg.hidden_size))
    for l in range(ref.cfg.num_hidden_layers):
        st = R.State(ref.cfg)
        if ref.cfg.layer_is_mla[l]:
            steps = np.stack([ref.mla(l, x, st.mla[l]) for x in X])
            close(steps, mla_layer_batched(ref, l, X), 1e-12, f"MLA layer {l}: cached steps == causal batch")
        else:
            steps = np.stack([ref.kda(l, x, st.kda[l]) for x in X])
            close(steps, kda_layer_batched(ref, l, X), 1e-11, f"KDA layer {l}: steps == padded conv + chunked rule")
            K = ref.cfg.conv_kernel
            PW = ref.cfg.kda_heads * ref.cfg.kda_head_dim
            last = X[-K:] @ ref.w.get(f"model.layers.{l}.self_attn.v_proj.weight", (PW, ref.cfg.hidden_size)).T
            close(st.kda[l]["v"], last.T, 1e-12, f"KDA layer {l}: conv state = last {K} raw inputs, newest last")
    check(ref.cfg.conv_kernel == 3, "tiny model uses conv kernel 3 (from config, not 4)")


# ------------------------------------------------------------------------------- end to end

def test_end_to_end(scratch):
    ref, _, d = mk_model(scratch, "e2e")
    toks = [3, 17, 5, 60, 0, 63, 9, 9, 41, 2, 33, 7]
    logits, _ = ref.forward(toks)
    check(logits.shape == (len(toks), ref.cfg.vocab_size) and np.all(np.isfinite(logits)), "logits [T, V], finite")
    check(0.1 < float(np.std(logits)) < 100, f"logits well-scaled (std {np.std(logits):.3g})")
    check(len({int(np.argmax(r)) for r in logits}) > 1, "argmax varies over positions")
    prefix, _ = fresh(d).forward(toks[:5])
    check(np.array_equal(prefix, logits[:5]), "a prefix's logits equal the first rows (causal state)")
    small = fresh(d, cache_bytes=2048)
    check(np.array_equal(small.forward(toks)[0], logits), "no-cache path (re-read weights, streamed lm_head) equal")
    _, gen, margins = ref.greedy(toks[:4], 5)
    full, _ = fresh(d).forward(toks[:4] + gen[:-1])
    check(gen == [int(np.argmax(r)) for r in full[3:]], "greedy ids == argmax of the extended sequence")
    check(all(m >= 0 for m in margins), "top-2 margins non-negative")
    out = os.path.join(scratch, "cli.bin")
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = R.main(["--model", d, "--tokens", " ".join(map(str, toks[:4])), "--out", out, "--greedy", "5"])
    check(rc == 0, "CLI exit status 0")
    check(buf.getvalue().strip() == " ".join(map(str, gen)), f"CLI greedy line {buf.getvalue()!r}")
    cli = np.fromfile(out, "<f8")
    check(np.array_equal(cli, logits[:4].reshape(-1)), "CLI writes little-endian float64 [T, V]")
    p = subprocess.run([sys.executable, os.path.join(HERE, "k3_ref.py"), "--model", d, "--tokens", "1 64"],
                       capture_output=True, text=True)
    check(p.returncode == 1 and "outside the vocabulary" in p.stderr, f"CLI refuses token ids >= vocab: {p.stderr!r}")


def test_zeroed_model(scratch):
    """All sub-layer outputs zeroed: logits follow by hand from the embedding and the anchor count."""
    def zero(ts):
        for n, (dt, shape, raw) in list(ts.items()):
            if n.endswith(("o_proj.weight", "mlp.down_proj.weight", "routed_expert_up_proj.weight",
                           "shared_experts.down_proj.weight")):
                ts[n] = (dt, shape, bytes(len(raw)))
    for bs in (1, 2, 3, 10):
        ref, ts, _ = mk_model(scratch, f"zero{bs}", 5, zero, attn_res_block_size=bs)
        n_layers = ref.cfg.num_hidden_layers
        n_zero = -(-n_layers // bs)      # anchors after the embedding, plus P, are all zero

        def f(name):
            raw = ts["language_model." + name][2]
            return np.array([struct.unpack("<f", struct.pack("<I", h << 16))[0]
                             for h in struct.unpack(f"<{len(raw) // 2}H", raw)])
        H, V = ref.cfg.hidden_size, ref.cfg.vocab_size
        emb = f("model.embed_tokens.weight").reshape(V, H)
        w_out = f("model.output_attn_res_norm.weight") * f("model.output_attn_res_proj.weight")
        normw, head = f("model.norm.weight"), f("lm_head.weight").reshape(V, H)
        tok = 11
        e = emb[tok]
        s = sum(w_out[i] * e[i] for i in range(H)) / math.sqrt(sum(x * x for x in e) / H + 1e-5)
        alpha = math.exp(s) / (math.exp(s) + n_zero)
        x = alpha * e
        hn = normw * x / math.sqrt(sum(t * t for t in x) / H + 1e-5)
        close(ref.forward([tok])[0][0], head @ hn, 1e-12, f"zeroed model, block size {bs}: hand-derived logits")


def set_f32(ts, name, fn):
    dt, shape, raw = ts[name]
    a = np.frombuffer(raw, "<f4").copy()
    fn(a)
    ts[name] = (dt, shape, a.tobytes())


def test_a_log_padding(scratch):
    toks = [4, 8, 15, 16, 23, 42]
    name = "language_model.model.layers.1.self_attn.A_log"
    base, _, _ = mk_model(scratch, "alog0", 7, a_log_len=5)
    def padding(a):
        a[2:] = 9.0

    def head1(a):
        a[1] += 0.5
    pad, _, _ = mk_model(scratch, "alog1", 7, lambda ts: set_f32(ts, name, padding), a_log_len=5)
    head, _, _ = mk_model(scratch, "alog2", 7, lambda ts: set_f32(ts, name, head1), a_log_len=5)
    lb = base.forward(toks)[0]
    check(np.array_equal(pad.forward(toks)[0], lb), "A_log entries past num_heads are ignored")
    check(np.max(np.abs(head.forward(toks)[0] - lb)) > 1e-6, "A_log[1] (head 1) changes the logits")
    raises(lambda: mk_model(scratch, "alog3", 7, a_log_len=1), "needs at least num_heads=2", "A_log shorter than num_heads")


def test_experts_read_when_routed(scratch):
    ref, ts, d = mk_model(scratch, "experts", 9)
    toks = [1, 2]
    logits = ref.forward(toks)[0]
    routed = {(l, int(e)) for _, l, ids, _, _ in ref.routes for e in ids}
    read = set()
    for name, n in ref.ck.bytes_read.items():
        if ".experts." in name and n:
            parts = name.split(".")
            read.add((int(parts[3]), int(parts[6])))
    check(read == routed, f"exactly the routed experts are read ({sorted(read)} vs {sorted(routed)})")
    unrouted = [(l, e) for l in range(1, ref.cfg.num_hidden_layers)
                for e in range(ref.cfg.num_experts) if (l, e) not in routed]
    check(bool(unrouted), "some expert is not routed in this run")
    l, e = unrouted[0]
    lr, er = sorted(routed)[0]

    def spoil(target):
        def edit(t):
            n = f"language_model.model.layers.{target[0]}.block_sparse_moe.experts.{target[1]}.w2.weight_packed"
            dt, shape, raw = t[n]
            t[n] = (dt, shape, bytes(b ^ 0x77 for b in raw))
        return edit
    r1, _, _ = mk_model(scratch, "experts1", 9, spoil((l, e)))
    check(np.array_equal(r1.forward(toks)[0], logits), "an unrouted expert's bytes do not matter")
    r2, _, _ = mk_model(scratch, "experts2", 9, spoil((lr, er)))
    check(np.max(np.abs(r2.forward(toks)[0] - logits)) > 1e-9, "a routed expert's bytes change the logits")


def test_config_errors(scratch):
    d = os.path.join(scratch, "cfgerr")
    tc = cw.tiny_config()
    cw.write_checkpoint(d, tc, 1)
    import json
    path = os.path.join(d, "config.json")
    good = open(path).read()

    def with_cfg(fn):
        root = json.loads(good)
        fn(root["text_config"])
        with open(path, "w") as f:
            json.dump(root, f)
        cfg, ck = R.load(d)
        return R.K3Ref(ck, cfg)
    raises(lambda: with_cfg(lambda t: t["linear_attn_config"]["kda_layers"].remove(2)),
           "[2] (one-based) are in neither", "layer missing from both lists")
    raises(lambda: with_cfg(lambda t: t["linear_attn_config"]["kda_layers"].append(4)),
           "listed twice", "layer in both lists")
    raises(lambda: with_cfg(lambda t: t.pop("kv_lora_rank")), "text_config.kv_lora_rank", "missing field")
    raises(lambda: with_cfg(lambda t: t.__setitem__("hidden_size", 48)),
           "model.embed_tokens.weight has shape [64, 32], expected [64, 48]", "shape disagrees with config")
    raises(lambda: with_cfg(lambda t: t.__setitem__("num_hidden_layers", 6)), "[6] (one-based)", "more layers than lists")
    raises(lambda: with_cfg(lambda t: t.__setitem__("first_k_dense_replace", 2)),
           "missing tensor language_model.model.layers.1.mlp.gate_proj.weight", "missing dense FFN tensor")
    with open(path, "w") as f:
        f.write(good)
    cfg, ck = R.load(d)
    try:
        R.K3Ref(ck, cfg).check_experts()
        check(True, "check_experts accepts a complete checkpoint")
    except R.RefError as e:
        check(False, f"check_experts refused a complete checkpoint: {e}")


def main():
    scratch = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="k3ref-")
    os.makedirs(scratch, exist_ok=True)
    try:
        test_situ()
        test_norms()
        test_attn_res()
        test_kda_gate()
        test_route()
        test_mxfp4()
        test_bf16()
        test_kda_chunked()
        test_layers_batched(scratch)
        test_end_to_end(scratch)
        test_zeroed_model(scratch)
        test_a_log_padding(scratch)
        test_experts_read_when_routed(scratch)
        test_config_errors(scratch)
    finally:
        if len(sys.argv) <= 1:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
