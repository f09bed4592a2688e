#!/usr/bin/env python3
"""Every part of the PyTorch model (tools/train/model.py) against the project's independent float64
NumPy reference (tests/reference/k3_ref.py), and the storage formats against their definitions.

A tiny model with every weight randomised (AttnRes pseudo-queries, correction biases, A_log and its
padding entries included) is exported (export.py) and read back by both sides in float64:
  primitives   RMSNorm, L2N, SiTU, Block AttnRes                       |diff| <= 1e-12
  layers       KDA (with its conv, gate, per-head A_log), MLA, dense FFN, MoE with the router,
               each over a sequence against k3_ref's token-by-token layer       <= 1e-10 relative
  router       the same experts and weights as k3_ref.route
  model        the logits of a sequence                                        <= 1e-10 relative
  formats      MXFP4: what quant.py chooses, packed by k3_format, decodes in k3_ref to exactly the
               values quant.py trained with; every weight goes to its nearest E2M1 value, ties to
               the even code, no group clipped; MXFP4 values are fixed points. BF16: k3_format's
               rounding equals torch's bfloat16 rounding, ties to even included."""
import math
import os
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import config as C  # noqa: E402
import export as X  # noqa: E402
import k3_format as kf  # noqa: E402
import k3_ref as R  # noqa: E402
import model as M  # noqa: E402
import quant as Q  # noqa: E402

failures = []


def check(name, err, bound):
    ok = err <= bound
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {err:.3e} (bound {bound:.0e})")
    if not ok:
        failures.append(name)


def claim(name, ok):
    print(f"{'ok  ' if ok else 'FAIL'} {name}")
    if not ok:
        failures.append(name)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b))))


def randomised_tiny(seed=0):
    """The tiny shape with every parameter and buffer random (none left at its initial value)."""
    torch.manual_seed(seed)
    m = M.K3Model(C.shape("tiny"))
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith((".norm", ".weight")) and p.dim() == 1:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith(".proj"):
                p.copy_(0.5 * torch.randn_like(p))
            elif name.endswith(".A_log"):
                p.copy_(torch.empty_like(p).uniform_(-1.5, 1.0))   # padding entries non-zero too
        for moe in m.moe_layers():
            moe.gate.e_score_correction_bias.copy_(0.2 * torch.randn(moe.E))
    return m


def test_primitives():
    g = np.random.default_rng(1)
    x = g.standard_normal((5, 24))
    w = g.standard_normal(24)
    t = torch.from_numpy
    norm = M.RMSNorm(24, 1e-5).double()
    with torch.no_grad():
        norm.weight.copy_(t(w))
    check("RMSNorm", rel(norm(t(x)).detach(), R.rms_norm(x, w, 1e-5)), 1e-12)
    check("L2N", rel(M.l2n(t(x)), R.l2n(x)), 1e-12)
    a, b = 6 * g.standard_normal(100), 40 * g.standard_normal(100)
    check("SiTU", rel(M.situ(t(a), t(b), 4.0, 25.0), R.situ(a, b, 4.0, 25.0)), 1e-12)
    ga, gb = t(a[:20] / 3).requires_grad_(), t(b[:20] / 10).requires_grad_()
    claim("SiTU's hand-written backward passes gradcheck (float64)",
          torch.autograd.gradcheck(lambda x, y: M.situ(x, y, 4.0, 25.0), (ga, gb)))
    vals = [g.standard_normal(24) * s for s in (1.0, 3.0, 0.2, 7.0)]
    nw, pw = g.standard_normal(24), g.standard_normal((1, 24))
    got = M.attn_res([t(v) for v in vals], t(nw), t(pw), 1e-5)
    check("Block AttnRes", rel(got, R.attn_res(vals, nw * pw[0], 1e-5)), 1e-12)
    check("AttnRes of one value is that value", rel(M.attn_res([t(vals[0])], t(nw), t(pw), 1e-5), vals[0]), 0)


def test_layers(model, ck_dir):
    cfg_r, ck = R.load(ck_dir)
    ref = R.K3Ref(ck, cfg_r)
    m = X.load_into(M.K3Model(model.cfg), ck_dir).double().eval()
    H, T = model.cfg.hidden_size, 9
    x = np.random.default_rng(2).standard_normal((T, H))
    xt = torch.from_numpy(x)[None]
    for l, layer in enumerate(m.model.layers):
        kind = "MLA" if isinstance(layer.self_attn, M.MLA) else "KDA"
        st = R.State(cfg_r)
        step = ref.mla if kind == "MLA" else ref.kda
        want = np.stack([step(l, x[t], st.mla[l] if kind == "MLA" else st.kda[l]) for t in range(T)])
        with torch.no_grad():
            got = layer.self_attn(xt)[0]
        check(f"layer {l} {kind} over {T} tokens", rel(got, want), 1e-10)
        if kind == "KDA":
            layer.self_attn.recurrent = True
            with torch.no_grad():
                got_r = layer.self_attn(xt)[0]
            layer.self_attn.recurrent = False
            check(f"layer {l} KDA, per-token recurrence", rel(got_r, want), 1e-10)
        with torch.no_grad():
            got = layer.ffn(xt)[0]
        if l < model.cfg.first_k_dense_replace:
            want = np.stack([ref.dense_ffn(l, x[t]) for t in range(T)])
            check(f"layer {l} dense FFN", rel(got, want), 1e-10)
        else:
            want = np.stack([ref.moe(l, x[t], t) for t in range(T)])
            check(f"layer {l} MoE", rel(got, want), 1e-10)
            moe = layer.block_sparse_moe
            with torch.no_grad():
                ids, wts, _ = moe.gate(xt[0], moe.top_k)
            same = True
            for t in range(T):
                rid, rw, _ = R.route(ref._lin(f"model.layers.{l}.block_sparse_moe.gate.weight", (moe.E, H), x[t]),
                                     ref.w.vec(f"model.layers.{l}.block_sparse_moe.gate.e_score_correction_bias", moe.E),
                                     moe.top_k)
                order = np.argsort(ids[t].numpy())
                same &= list(np.sort(rid)) == list(ids[t].numpy()[order]) and \
                    rel(wts[t].numpy()[order], rw[np.argsort(rid)]) <= 1e-12
            claim(f"layer {l} router: the reference's experts and weights at every position", same)
    tokens = [5, 700, 3, 3, 3, 100, 42, 600, 1, 767, 0, 9, 9]
    want, _ = ref.forward(tokens)
    with torch.no_grad():
        got = m(torch.tensor([tokens]))[0]
    check("whole model logits (float64)", rel(got, want), 1e-10)


def test_mxfp4():
    g = torch.Generator().manual_seed(3)
    w = torch.randn(16, 96, generator=g) * torch.exp(torch.randn(16, 96, generator=g))
    w[0, :32] = 0.0                                         # an all-zero group
    w[1, :32] = torch.tensor([6.0, -6.0] * 16)              # exactly representable
    codes, e = Q.mxfp4_quantize(w)
    packed = kf.mxfp4_pack(codes.numpy())
    scale = (e.numpy() + 127).astype(np.uint8)
    mine = Q.mxfp4_dequantize(codes, e)
    check("MXFP4 decoded by k3_ref equals quant.py's values", rel(R.mxfp4_decode(packed, scale), mine.double()), 0)
    check("MXFP4 decoded by k3_format equals quant.py's values", rel(kf.mxfp4_decode(packed, scale), mine), 0)
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    sc = torch.pow(2.0, e.double()).repeat_interleave(32, dim=1)
    y = (w.double() / sc).float()
    nearest = (y.abs().unsqueeze(-1) - grid).abs().min(-1).values
    check("every weight at its nearest E2M1 value (x scale)", float(((mine.double() / sc).float().abs() - y.abs()).abs().sub(nearest).abs().max()), 0)
    claim("no group clipped: max |w| <= 6 x scale, and the scale is the smallest such power of two",
          bool((y.abs().amax(-1) <= 6).all()) and bool((y[2:].abs().reshape(16 - 2, -1, 32).amax(-1) > 3).all()))
    claim("exact MXFP4 values are fixed points", torch.equal(Q.mxfp4_round(mine), mine))
    ties = torch.tensor([[0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.75] + [6.0] + [0.0] * 23])
    claim("ties go to the even code: 0.25 0.75 1.25 1.75 2.5 3.5 5 -0.75 -> 0 1 1 2 2 4 4 -1",
          Q.mxfp4_round(ties)[0, :8].tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -1.0])
    claim("fake quantisation: MXFP4 values forward, identity gradient",
          _fake_quant_ok(w))


def _fake_quant_ok(w):
    p = w.clone().requires_grad_()
    out = Q.fake_mxfp4(p)
    out.backward(torch.ones_like(out))
    return torch.equal(out.detach(), Q.mxfp4_round(w)) and torch.equal(p.grad, torch.ones_like(w))


def test_bf16():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(1000, generator=g) * torch.exp(4 * torch.randn(1000, generator=g))
    # halfway cases: bit 15 set, lower bits clear, both parities of bit 16
    halfway = torch.tensor([0x3F808000, 0x3F818000, 0xBF808000, 0x40490000 | 0x8000], dtype=torch.int64)
    x = torch.cat([x, halfway.to(torch.int32).view(torch.float32)])
    mine = kf.bf16_round(x.numpy())
    claim("BF16 rounding (k3_format) equals torch's bfloat16, ties to even",
          np.array_equal(mine, x.to(torch.bfloat16).float().numpy()))
    claim("quant.bf16_round equals torch's bfloat16", torch.equal(Q.bf16_round(x), x.to(torch.bfloat16).float()))


def test_checkpointing():
    """Recomputing each layer in the backward pass (--checkpoint) gives the same gradients."""
    grads = []
    for ckpt in (False, True):
        torch.manual_seed(5)
        m = M.K3Model(C.shape("tiny")).double().train()
        m.checkpoint = ckpt
        ids = torch.randint(0, 768, (2, 20), generator=torch.Generator().manual_seed(6))
        m(ids).logsumexp(-1).mean().backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in m.parameters() if p.grad is not None]))
    check("gradients with per-layer recomputation", float((grads[0] - grads[1]).abs().max()), 1e-12)


def main():
    torch.set_num_threads(1)
    test_primitives()
    test_mxfp4()
    test_bf16()
    test_checkpointing()
    model = randomised_tiny()
    with tempfile.TemporaryDirectory(prefix="train-modules-") as d:
        X.export(model, d, None, max_shard_bytes=200 << 10)
        n_shards = len([f for f in os.listdir(d) if f.endswith(".safetensors")])
        claim(f"export split the tiny model into {n_shards} shards of <= 200 KiB",
              n_shards > 1 and all(os.path.getsize(os.path.join(d, f)) <= 200 << 10
                                   for f in os.listdir(d) if f.endswith(".safetensors")))
        test_layers(model, d)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
