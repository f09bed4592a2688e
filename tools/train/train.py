#!/usr/bin/env python3
"""Trains a K3-architecture model (model.py) on token files (data.py) and exports it (export.py).

One run, three phases by share of the run (time with --minutes, steps with --steps):
  pretrain  plain text (train.bin);
  chat      a mix: each window from the chat data (chat_train.bin, loss on its masked tokens) with
            probability --chat-mix, else text; --chat-frac of the run;
  qat       the same mix, with the routed experts seen through MXFP4 rounding (straight-through
            gradient), so the exported model is the one trained; --qat-frac of the run.
AdamW on float32 master weights, linear warmup then cosine decay to --min-lr-frac of the peak,
gradient clipping, bf16 autocast on CUDA, optional torch.compile on torch 2.x. The MoE routers'
correction biases move by the sign of each expert's load imbalance after every step.

At the end (before --minutes run out: training stops --reserve seconds early) it measures the
validation NLL of the float32 weights, of the BF16-rounded spine, and of the exported checkpoint
(BF16 spine + MXFP4 experts, read back from the files), writes the checkpoint to --out and the
numbers to --metrics (JSON).

usage: train.py --shape mini --data DIR --out DIR [--tokenizer DIR] [--minutes 8.5 | --steps N] ...
       (train.py --help lists everything)"""
import time

START = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import config as C  # noqa: E402
import data as D  # noqa: E402
import export as X  # noqa: E402
import kda as kda_ops  # noqa: E402
from model import K3Model  # noqa: E402
from quant import bf16_round, mxfp4_round  # noqa: E402


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    a = ap.add_argument
    a("--shape", default="mini", choices=sorted(C.SHAPES), help="model shape (config.py)")
    a("--init-from", metavar="DIR", help="start from an exported checkpoint (its shape wins over --shape)")
    a("--data", required=True, metavar="DIR", help="train.bin, valid.bin [, chat_train.bin, chat_valid.bin + masks]")
    a("--tokenizer", metavar="DIR", help="tiktoken.model + tokenizer_config.json (default: --data)")
    a("--out", metavar="DIR", help="export the checkpoint here")
    a("--metrics", metavar="FILE", help="write the run's numbers here (JSON)")
    a("--minutes", type=float, help="wall-clock budget of the whole run, export included")
    a("--started-at", type=float, help="unix time the budget counts from (default: this program's start)")
    a("--reserve", type=float, default=40.0, help="seconds kept for the final measurements and the export")
    a("--steps", type=int, help="number of optimizer steps (instead of --minutes)")
    a("--batch", type=int, default=128, help="sequences per step")
    a("--accum", type=int, default=1, help="micro-batches per step (batch split in this many)")
    a("--seq", type=int, default=512, help="tokens per sequence")
    a("--lr", type=float, default=3e-3)
    a("--min-lr-frac", type=float, default=0.1)
    a("--warmup", type=int, default=100, help="warmup steps")
    a("--weight-decay", type=float, default=0.1)
    a("--clip", type=float, default=1.0)
    a("--chat-frac", type=float, default=0.15, help="share of the run in the chat phase")
    a("--chat-mix", type=float, default=0.5, help="share of chat windows in the chat and QAT phases")
    a("--qat-frac", type=float, default=0.05, help="share of the run in the QAT phase (0: none)")
    a("--bias-rate", type=float, default=1e-3, help="router correction-bias step per update")
    a("--balance-loss", type=float, default=1e-4, help="weight of the sequence-level balance loss (0: none)")
    a("--eval-every", type=float, default=60.0, help="validate every this many seconds (with --steps: steps)")
    a("--eval-windows", type=int, default=64, help="validation windows per file")
    a("--log-every", type=int, default=20)
    a("--compile", default="auto", choices=("auto", "off", "kda"),
      help="torch.compile of the chunked KDA core (torch 2.x on CUDA); auto = kda there, off elsewhere")
    a("--checkpoint", action="store_true", help="recompute each layer's activations in the backward pass (less memory)")
    a("--device", default="auto", choices=("auto", "cpu", "cuda"))
    a("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    a("--seed", type=int, default=0)
    a("--save", metavar="FILE", help="save weights + optimizer state here at the end (local resume)")
    a("--resume", metavar="FILE", help="continue from a --save file (same shape and settings)")
    args = ap.parse_args(argv)
    if (args.minutes is None) == (args.steps is None):
        ap.error("give exactly one of --minutes and --steps")
    if not 0 <= args.chat_frac + args.qat_frac <= 1:
        ap.error("--chat-frac + --qat-frac must be within 0..1")
    if args.batch % args.accum:
        ap.error("--batch must be a multiple of --accum")
    return args


# ----------------------------------------------------------------------------------- the pieces

def pick_device(name):
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def autocast(device):
    """bf16 autocast on CUDA, nothing on the CPU (float32 there)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def param_groups(model, weight_decay):
    """Weight decay on matrices (and the expert stacks), none on norms, gates' vectors, conv taps
    and the AttnRes pseudo-queries."""
    decay, plain = [], []
    for name, p in model.named_parameters():
        vector_like = p.dim() < 2 or name.endswith(("_conv1d.weight", ".proj"))
        (plain if vector_like else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}]


def make_optimizer(model, args, device):
    kw = dict(lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    if device.type == "cuda" and int(torch.__version__.split(".")[0]) >= 2:
        kw["fused"] = True
    return torch.optim.AdamW(param_groups(model, args.weight_decay), **kw)


def lr_at(step, progress, args):
    """Linear warmup over --warmup steps, then cosine from --lr to --min-lr-frac x --lr over the run."""
    warm = min(1.0, (step + 1) / max(1, args.warmup))
    cos = 0.5 * (1 + math.cos(math.pi * min(1.0, max(0.0, progress))))
    return args.lr * warm * (args.min_lr_frac + (1 - args.min_lr_frac) * cos)


def phase_at(progress, args):
    if progress >= 1 - args.qat_frac and args.qat_frac > 0:
        return "qat"
    if progress >= 1 - args.qat_frac - args.chat_frac:
        return "chat"
    return "pretrain"


def masked_nll(logits, targets, mask):
    """(sum of mask-weighted NLL, sum of mask) in float32."""
    nll = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    m = mask.reshape(-1)
    return (nll * m).sum(), m.sum()


class Progress:
    """Share of the run done: by elapsed time (--minutes) or by steps (--steps)."""

    def __init__(self, args, t_train0):
        self.steps = args.steps
        if args.minutes is not None:
            deadline = (args.started_at or START) + 60 * args.minutes
            self.t0, self.t_end = t_train0, deadline - args.reserve
            if self.t_end <= self.t0:
                raise SystemExit(f"train: --minutes {args.minutes} leaves no time after --reserve {args.reserve}s "
                                 "and the start-up")

    def __call__(self, step):
        if self.steps is not None:
            return step / self.steps
        return (time.time() - self.t0) / (self.t_end - self.t0)

    def done(self, step):
        return self(step) >= 1.0


# ------------------------------------------------------------------------------------- evaluation

@torch.no_grad()
def evaluate(model, windows, device, batch=16):
    """Mean NLL (nats per target token) of the model on the fixed validation windows, computed in
    float32 without autocast (TF32 off)."""
    was_training = model.training
    model.eval()
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    out = {}
    with kda_ops.eager():
        out = _evaluate(model, windows, device, batch)
    torch.set_float32_matmul_precision(precision)
    model.train(was_training)
    return out


def _evaluate(model, windows, device, batch):
    out = {}
    for name, (ids, mask) in windows.items():
        tot, cnt = 0.0, 0.0
        for i in range(0, len(ids), batch):
            x, m = ids[i:i + batch].to(device), mask[i:i + batch].to(device)
            s, c = masked_nll(model(x[:, :-1]), x[:, 1:], m)
            tot, cnt = tot + float(s.detach()), cnt + float(c)
        out[name] = tot / max(cnt, 1.0)
    return out


def rounded_copy(model, spine_bf16, experts_mxfp4):
    """A copy of model with its weights rounded as the checkpoint stores them."""
    m = K3Model(model.cfg).to(next(model.parameters()).device)
    m.load_state_dict(model.state_dict())
    f32 = {X.state_key(n) for g in X.layout(m.cfg) for n, d, _, _ in g if d == "F32"}
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith((".w1", ".w2", ".w3")):
                if experts_mxfp4:
                    p.copy_(mxfp4_round(p))
            elif spine_bf16 and name not in f32:
                p.copy_(bf16_round(p))
    return m


def validation_windows(ds, seq, n):
    w = {"text": ds.valid.windows(ds.valid.fixed_starts(n, seq), seq)}
    if ds.chat_valid is not None:
        w["chat"] = ds.chat_valid.windows(ds.chat_valid.fixed_starts(n, seq), seq)
    return w


# ---------------------------------------------------------------------------------------- training

def build_model(args, device):
    if args.init_from:
        cfg, _ = X.load(args.init_from)
        model = X.load_into(K3Model(cfg), args.init_from)
    else:
        cfg = C.shape(args.shape)
        model = K3Model(cfg)
    return model.to(device), cfg


def maybe_compile(model, args, device):
    """Returns (the callable that runs the model's forward for training, the compile mode in use).
    torch.compile (torch 2.x on CUDA only; elsewhere "off") is applied to the chunked KDA core
    (kda.use_compiled): its recurrence across chunks otherwise runs as hundreds of small kernels
    per layer. Measured on an H200 (tools/train/README.md): 117k tokens/s eager, 160k compiled."""
    kda_ops.use_compiled(False)
    mode = "kda" if args.compile == "auto" else args.compile
    if mode == "off" or device.type != "cuda" or not hasattr(torch, "compile"):
        return model, "off"
    kda_ops.use_compiled(True)
    return model, "kda"


def train_step(model, fwd, opt, batch, args, device, lr):
    ids, mask = batch
    for g in opt.param_groups:
        g["lr"] = lr
    loss_sum, tok_sum = 0.0, 0.0
    total_mask = float(mask.sum())
    for x, m in zip(ids.chunk(args.accum), mask.chunk(args.accum)):
        x, m = x.to(device, non_blocking=True), m.to(device, non_blocking=True)
        with autocast(device):
            logits = fwd(x[:, :-1])
        s, c = masked_nll(logits, x[:, 1:], m)
        loss = s / max(total_mask, 1.0)
        if args.balance_loss > 0:
            aux = model.balance_loss()
            if aux is not None:
                loss = loss + args.balance_loss * aux / args.accum
        loss.backward()
        loss_sum, tok_sum = loss_sum + float(s.detach()), tok_sum + float(c)
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    for m in model.moe_layers():
        m.update_bias(args.bias_rate)
    return loss_sum / max(tok_sum, 1.0), float(gnorm)


def run(args):
    device = pick_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")     # TF32 for the float32 products of training
    model, cfg = build_model(args, device)
    model.checkpoint = args.checkpoint
    ds = D.Dataset(args.data, cfg.vocab_size)
    opt = make_optimizer(model, args, device)
    step, tokens = 0, 0
    if args.resume:
        ck = torch.load(args.resume, map_location=device)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, tokens = ck["step"], ck["tokens"]
        rng = np.random.default_rng([args.seed, step])    # other windows than the run before
    fwd, compiled = maybe_compile(model, args, device)
    val = validation_windows(ds, args.seq, args.eval_windows)
    total, active, experts = C.parameter_counts(cfg)
    metrics = {"shape": args.shape if not args.init_from else f"from {args.init_from}", "config": cfg.to_json(),
               "parameters": {"total": total, "active": active, "experts": experts},
               "args": vars(args), "torch": torch.__version__, "device": str(device), "compile": compiled,
               "evals": [], "phases": {}}
    if device.type == "cuda":
        metrics["gpu"] = torch.cuda.get_device_name(device)
    log(f"model {args.shape}: {total:,} parameters ({active:,} active per token), device {device}, "
        f"compile {compiled}, data {len(ds.train):,} text tokens"
        + (f", {len(ds.chat_train):,} chat tokens" if ds.chat_train is not None else ", no chat data"))
    model.train()
    progress = Progress(args, time.time())
    phase, t_last, tok_last, next_eval = None, time.time(), tokens, args.eval_every
    t_train0, tokens0, rates = time.time(), tokens, []
    record_eval(metrics, model, val, device, step, tokens, 0.0, args.metrics)
    while not progress.done(step):
        p = progress(step)
        now_phase = phase_at(p, args)
        if now_phase != phase:
            if now_phase == "qat":
                metrics["before_qat"] = {"fp32": evaluate(model, val, device),
                                         "mxfp4_experts": evaluate(rounded_copy(model, False, True), val, device)}
                log(f"before QAT: {metrics['before_qat']}")
                model.set_qat(True)
            metrics["phases"][now_phase] = {"step": step, "tokens": tokens, "seconds": time.time() - t_train0}
            log(f"phase {now_phase} from step {step}")
            phase = now_phase
        chat_share = args.chat_mix if phase in ("chat", "qat") else 0.0
        batch = ds.batch(rng, args.batch, args.seq, chat_share)
        lr = lr_at(step, p, args)
        try:
            loss, gnorm = train_step(model, fwd, opt, batch, args, device, lr)
        except Exception as e:  # a torch.compile failure: go on without it (anything else: re-raise)
            if compiled == "off" or "out of memory" in str(e):
                raise
            log(f"compiled code failed ({type(e).__name__}: {str(e).splitlines()[0][:300]}); continuing eagerly")
            kda_ops.use_compiled(False)
            fwd, compiled = model, "off"
            metrics["compile"] = "failed, off"
            opt.zero_grad(set_to_none=True)
            loss, gnorm = train_step(model, fwd, opt, batch, args, device, lr)
        step += 1
        tokens += args.batch * args.seq
        if step % args.log_every == 0:
            if device.type == "cuda":
                torch.cuda.synchronize()
            dt = time.time() - t_last
            rates.append((tokens - tok_last) / dt)
            log(f"step {step} {phase} loss {loss:.4f} lr {lr:.2e} gnorm {gnorm:.2f} "
                f"{(tokens - tok_last) / dt:,.0f} tok/s, {tokens / 1e6:.1f}M tokens, {time.time() - START:.0f}s")
            t_last, tok_last = time.time(), tokens
        since = step if args.steps is not None else time.time() - t_train0
        if since >= next_eval:
            record_eval(metrics, model, val, device, step, tokens, time.time() - t_train0, args.metrics)
            next_eval += args.eval_every
    train_seconds = time.time() - t_train0
    metrics.update(steps=step, tokens=tokens, train_seconds=train_seconds,
                   tokens_per_s=(tokens - tokens0) / max(train_seconds, 1e-9),      # compile and evaluations included
                   tokens_per_s_median=float(np.median(rates)) if rates else None)  # of the logged intervals
    finish(model, args, device, val, metrics, opt, step, tokens)
    return metrics


def record_eval(metrics, model, val, device, step, tokens, seconds, path):
    ev = evaluate(model, val, device)
    metrics["evals"].append({"step": step, "tokens": tokens, "seconds": seconds, "nll": ev})
    log(f"step {step} validation NLL {ev}")
    write_metrics(metrics, path)     # so that a run cut short still leaves its numbers


def write_metrics(metrics, path):
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump(metrics, f, indent=1)
        os.replace(path + ".tmp", path)


def finish(model, args, device, val, metrics, opt, step, tokens):
    """Final measurements, export and the metrics file."""
    model.set_qat(False)
    final = {"fp32": evaluate(model, val, device)}
    final["bf16_spine"] = evaluate(rounded_copy(model, True, False), val, device)
    if args.out:
        metrics["export"] = X.export(model, args.out, args.tokenizer or args.data)
        exported = X.load_into(K3Model(model.cfg), args.out).to(device)
        final["exported"] = evaluate(exported, val, device)
        metrics["export_bytes"] = sum(metrics["export"].values())
    metrics["final"] = final
    metrics["nll_cost"] = {k: {"bf16": final["bf16_spine"][k] - final["fp32"][k],
                               **({"mxfp4": final["exported"][k] - final["bf16_spine"][k]} if "exported" in final else {})}
                           for k in final["fp32"]}
    metrics["seconds_total"] = time.time() - START
    log(f"final validation NLL {final}; cost of the storage formats {metrics['nll_cost']}")
    if args.save:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "tokens": tokens}, args.save)
    write_metrics(metrics, args.metrics)


def log(msg):
    print(f"[{time.time() - START:7.1f}s] {msg}", flush=True)


def main(argv=None):
    args = parse_args(argv)
    try:
        run(args)
    except (D.DataError, ValueError, OSError) as e:
        print(f"train: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
