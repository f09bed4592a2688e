#!/usr/bin/env python3
"""The chunked gated delta rule (tools/train/kda.py) computes the specification's per-token
recurrence: outputs, final state and the gradients of every input (the initial state included)
agree in float64 to 1e-10 and in float32 to 2e-5, for sequences that are not a multiple of the
chunk, several chunk sizes, a non-zero initial state and gates at the lower bound (the largest
factors the chunked form meets, and overflowing products above the diagonal that it must drop).
Also: chunk_size keeps exp(C/2 * |lower bound|) within float32."""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "train"))
import kda  # noqa: E402

failures = []


def check(name, err, bound):
    ok = err <= bound
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {err:.3e} (bound {bound:.0e})")
    if not ok:
        failures.append(name)


def inputs(B, T, H, K, V, dtype, seed, gate_scale=3.0, gate_offset=2.0, lower_bound=-5.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=g, dtype=dtype), dim=-1) / math.sqrt(K)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=g, dtype=dtype), dim=-1)
    v = torch.randn(B, T, H, V, generator=g, dtype=dtype)
    gate = lower_bound * torch.sigmoid(gate_scale * torch.randn(B, T, H, K, generator=g, dtype=dtype) + gate_offset)
    beta = torch.sigmoid(torch.randn(B, T, H, generator=g, dtype=dtype))
    S0 = 0.5 * torch.randn(B, H, K, V, generator=g, dtype=dtype)
    return [q, k, v, gate, beta, S0]


def compare(name, dtype, bound, T, chunk, gate_scale=3.0, gate_offset=2.0):
    ins = [t.requires_grad_() for t in inputs(2, T, 3, 16, 8, dtype, seed=T + chunk, gate_scale=gate_scale,
                                      gate_offset=gate_offset)]
    weight = torch.randn(2, T, 3, 8, dtype=dtype, generator=torch.Generator().manual_seed(1))
    results = []
    for run in (lambda: kda.kda_recurrent(*ins[:5], state=ins[5]), lambda: kda.kda_chunked(*ins[:5], state=ins[5], chunk=chunk)):
        o, S = run()
        grads = torch.autograd.grad((o * weight).sum() + (S * S).sum(), ins)
        results.append((o, S, grads))
    (o1, S1, g1), (o2, S2, g2) = results
    scale = max(1.0, float(o1.abs().max()))
    check(f"{name} output", float((o1 - o2).abs().max()) / scale, bound)
    check(f"{name} final state", float((S1 - S2).abs().max()) / max(1.0, float(S1.abs().max())), bound)
    for label, a, b in zip(("q", "k", "v", "g", "beta", "S0"), g1, g2):
        check(f"{name} d/d{label}", float((a - b).abs().max()) / max(1.0, float(a.abs().max())), bound)


def main():
    torch.manual_seed(0)
    for dtype, bound in ((torch.float64, 1e-10), (torch.float32, 2e-5)):
        tag = str(dtype).split(".")[1]
        compare(f"{tag} T=37 chunk=16", dtype, bound, 37, 16)
        compare(f"{tag} T=40 chunk=8", dtype, bound, 40, 8)
        compare(f"{tag} T=5 chunk=16 (one partial chunk)", dtype, bound, 5, 16)
        compare(f"{tag} T=48 chunk=16, gates at the lower bound", dtype, bound, 48, 16, gate_scale=0.0, gate_offset=20.0)
        compare(f"{tag} T=70 chunk=32, gates at the lower bound", dtype, bound, 70, 32, gate_scale=0.0, gate_offset=20.0)
        compare(f"{tag} T=64 chunk=32", dtype, bound, 64, 32)
    # no initial state: the zero start of every sequence
    q, k, v, g, beta, _ = inputs(1, 33, 2, 8, 8, torch.float64, seed=7)
    o1, _ = kda.kda_recurrent(q, k, v, g, beta)
    o2, _ = kda.kda_chunked(q, k, v, g, beta, chunk=16)
    check("float64 zero initial state output", float((o1 - o2).abs().max()), 1e-12)
    for lb, want in ((-5.0, 32), (-10.0, 16), (-1.0, 32), (-20.0, 8)):
        got = kda.chunk_size(lb)
        print(f"{'ok  ' if got == want else 'FAIL'} chunk_size({lb}) = {got} (want {want})")
        if got != want:
            failures.append(f"chunk_size({lb})")
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
