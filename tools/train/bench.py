#!/usr/bin/env python3
"""Training throughput of model shapes, and the device's agreement checks, on random token ids.

For each configuration (shape, batch, sequence length, compile mode): builds the model and AdamW,
runs --warmup steps (torch.compile's work happens there), then times --steps steps and prints
tokens per second and the peak GPU memory; a table of all configurations is printed last.
Before that, on the same device: the chunked KDA against the per-token recurrence (values and
gradients, float32) and the grouped expert computation against a loop over experts.

usage: bench.py [--config SHAPE:BATCH:SEQ:COMPILE[:ckpt] ...] [--steps N] [--warmup N] [--profile]
       e.g. bench.py --config mini:128:512:off --config mini:128:512:kda --config mini:256:512:kda:ckpt"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import config as C  # noqa: E402
import kda as kda_ops  # noqa: E402
import model as M  # noqa: E402
import train as T  # noqa: E402


def check_kda(device):
    """max |chunked - recurrent| of outputs, final states and input gradients (float32)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    B, L, H, K, V = 2, 100, 4, 64, 64
    q = torch.nn.functional.normalize(torch.randn(B, L, H, K, generator=g), dim=-1) / K ** 0.5
    k = torch.nn.functional.normalize(torch.randn(B, L, H, K, generator=g), dim=-1)
    v = torch.randn(B, L, H, V, generator=g)
    gate = -5 * torch.sigmoid(3 * torch.randn(B, L, H, K, generator=g))
    beta = torch.sigmoid(torch.randn(B, L, H, generator=g))
    ins = [t.to(device).requires_grad_() for t in (q, k, v, gate, beta)]
    o1, s1 = kda_ops.kda_recurrent(*ins)
    g1 = torch.autograd.grad((o1 * o1).sum() + s1.sum(), ins)
    o2, s2 = kda_ops.kda_chunked(*ins, chunk=16)
    g2 = torch.autograd.grad((o2 * o2).sum() + s2.sum(), ins)
    o1, s1, o2, s2 = (t.detach() for t in (o1, s1, o2, s2))
    return {"output": float((o1 - o2).abs().max()), "state": float((s1 - s2).abs().max()),
            "grads": max(float((a - b).abs().max()) for a, b in zip(g1, g2))}


def check_experts(device):
    """max |grouped - loop over experts| of the routed sum (float32)."""
    torch.manual_seed(0)
    N, E, k, Z, I = 500, 16, 4, 64, 96
    z = torch.randn(N, Z, device=device)
    ids = torch.stack([torch.randperm(E, device=device)[:k] for _ in range(N)])
    wts = torch.rand(N, k, device=device)
    w1, w3 = torch.randn(E, I, Z, device=device) / 8, torch.randn(E, I, Z, device=device) / 8
    w2 = torch.randn(E, Z, I, device=device) / 10
    got, _ = M.grouped_experts(z, ids, wts, w1, w3, w2, 4.0, 25.0)
    want = torch.zeros_like(z)
    for n in range(N):
        for j in range(k):
            e = ids[n, j]
            want[n] += wts[n, j] * (w2[e] @ M.situ(w1[e] @ z[n], w3[e] @ z[n], 4.0, 25.0))
    return float((got - want).abs().max())


def throughput(shape, batch, seq, compile_mode, checkpoint, steps, warmup, device, profile=False):
    torch.manual_seed(0)
    cfg = C.shape(shape)
    model = M.K3Model(cfg).to(device).train()
    model.checkpoint = checkpoint
    args = T.parse_args(["--data", ".", "--steps", "1", "--batch", str(batch), "--seq", str(seq),
                         "--compile", compile_mode])
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")
    fwd, compiled = T.maybe_compile(model, args, device)
    opt = T.make_optimizer(model, args, device)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq + 1))
    mask = torch.ones(batch, seq)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    for _ in range(warmup):
        T.train_step(model, fwd, opt, (ids, mask), args, device, 1e-3)
    sync(device)
    t1 = time.time()
    for _ in range(steps):
        loss, _ = T.train_step(model, fwd, opt, (ids, mask), args, device, 1e-3)
    sync(device)
    dt = time.time() - t1
    mem = torch.cuda.max_memory_allocated() / 2 ** 30 if device.type == "cuda" else 0.0
    t2 = time.time()
    T.evaluate(model, {"text": (ids[:8], mask[:8])}, device)    # float32, compiled code run eagerly
    eval_s = time.time() - t2
    if profile:
        print_profile(model, fwd, opt, (ids, mask), args, device)
    name = f"{shape}:{batch}:{seq}:{compiled}" + (":ckpt" if checkpoint else "")
    return {"config": name, "tok_s": steps * batch * seq / dt,
            "step_ms": 1000 * dt / steps, "warmup_s": t1 - t0, "peak_gib": mem, "loss": loss, "eval_s": eval_s}


def print_profile(model, fwd, opt, batch, args, device):
    """The kernels and operators of one training step, by device time (then CPU time)."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        T.train_step(model, fwd, opt, batch, args, device, 1e-3)
        sync(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    try:
        print(prof.key_averages().table(sort_by=key, row_limit=30), flush=True)
    except (KeyError, AttributeError, RuntimeError):
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=30), flush=True)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", action="append",
                    help="SHAPE:BATCH:SEQ:COMPILE[:ckpt] (compile: off or kda; ckpt: recompute layers)")
    ap.add_argument("--profile", action="store_true", help="print a profile of one step of the last configuration")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--no-checks", action="store_true")
    args = ap.parse_args(argv)
    device = T.pick_device(args.device)
    if device.type == "cuda":
        print(f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}", flush=True)
    if not args.no_checks:
        torch.set_float32_matmul_precision("highest")
        print(f"KDA chunked vs recurrent (float32, {device}): {check_kda(device)}", flush=True)
        print(f"grouped experts vs loop (float32, {device}): {check_experts(device):.3e}", flush=True)
        torch.set_float32_matmul_precision("high")
    rows = []
    specs = args.config or ["mini:128:512:off"]
    for i, spec in enumerate(specs):
        shape, batch, seq, mode, *rest = spec.split(":")
        try:
            r = throughput(shape, int(batch), int(seq), mode, rest == ["ckpt"], args.steps, args.warmup, device,
                           args.profile and i == len(specs) - 1)
        except Exception as e:   # out of memory, a compile failure: report and go on
            r = {"config": spec, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:150]}"}
            if device.type == "cuda":
                torch.cuda.empty_cache()
        print(r, flush=True)
        rows.append(r)
    print(f"{'config':<28} {'tokens/s':>10} {'ms/step':>8} {'warmup s':>8} {'peak GiB':>8}")
    for r in rows:
        if "error" in r:
            print(f"{r['config']:<28} error: {r['error']}")
        else:
            print(f"{r['config']:<28} {r['tok_s']:>10,.0f} {r['step_ms']:>8.1f} {r['warmup_s']:>8.1f} {r['peak_gib']:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
