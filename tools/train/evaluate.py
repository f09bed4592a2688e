#!/usr/bin/env python3
"""Validation NLL of an exported checkpoint, by PyTorch (model.py, float32) and by the C engine
(`deltafin nll --window N --mask M`) on the same windows and targets (evalset.py), in nats per
token and bits per byte, and the difference between the two.

usage: evaluate.py --model DIR --data DIR [--split text|chat]... [--window 512] [--every K]
                   [--df build/deltafin] [--no-torch] [--no-c] [--batch 8] [--json FILE]

The C engine's NLL must equal PyTorch's within 1e-3 nats/token (exit status 1 otherwise; 2 when
something could not run). PyTorch runs on the CPU with one thread (the machine is shared): about
4 ms per token with an optimised BLAS, four times that with Debian's reference libblas3; a faster
BLAS can be put in front with LD_LIBRARY_PATH (for example the libblas.so.3 of the
libopenblas0-pthread package) without changing the results beyond float32 rounding."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export as X  # noqa: E402
from evalset import EvalSet, bits_per_byte, token_byte_lengths  # noqa: E402
from model import K3Model  # noqa: E402

NLL_TOL = 1e-3


def torch_total(model, es, batch):
    """Total NLL (float64) of the evaluation set's counted targets under the float32 model."""
    total = 0.0
    order = list(range(len(es.windows)))
    full = [i for i in order if len(es.windows[i]) == es.window]
    short = [i for i in order if len(es.windows[i]) != es.window]
    groups = [full[i:i + batch] for i in range(0, len(full), batch)] + [[i] for i in short]
    with torch.no_grad():
        for g in groups:
            ids = torch.from_numpy(np.stack([es.windows[i] for i in g]))
            logp = torch.log_softmax(model(ids)[:, :-1].double(), -1)
            nll = -logp.gather(-1, ids[:, 1:, None])[..., 0]
            mask = torch.from_numpy(np.stack([es.targets[i] for i in g]))
            total += float(nll[mask].sum())
    return total


def c_total(df, model_dir, es, tmp):
    """(mean NLL, counted targets) from `deltafin nll` over the same windows and mask."""
    tokens, mask = os.path.join(tmp, f"{es.split}.tokens"), os.path.join(tmp, f"{es.split}.mask")
    es.write_for_engine(tokens, mask)
    cmd = [df, "nll", "--model", model_dir, "--tokens-file", tokens, "--window", str(es.window), "--mask", mask]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"deltafin nll exited with {p.returncode}: {p.stderr.strip()[-500:]}")
    words = p.stdout.split()          # "nll X over N predicted tokens (...)"
    return float(words[1]), int(words[3])


def main(argv=None):
    ap = argparse.ArgumentParser(description="validation NLL: PyTorch vs the C engine on the same windows")
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--split", action="append", choices=["text", "chat"])
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--every", type=int, default=1, help="keep every K-th window (a deterministic subset)")
    ap.add_argument("--df", default=os.path.join(HERE, "..", "..", "build", "deltafin"))
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-c", action="store_true")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg, _ = X.load(args.model)
    lengths = token_byte_lengths(args.model, cfg.vocab_size)
    model = None if args.no_torch else X.load_into(K3Model(cfg), args.model).eval()
    results, ok = [], True
    with tempfile.TemporaryDirectory(prefix="evaluate-") as tmp:
        for split in args.split or ["text", "chat"]:
            es = EvalSet(args.data, split, args.window, args.every)
            n, nbytes = es.counted(), es.bytes(lengths)
            r = {"split": split, "eval": es.describe(), "targets": n, "bytes": nbytes}
            try:
                if model is not None:
                    t0 = time.time()
                    total = torch_total(model, es, args.batch)
                    r.update(torch_nll=total / n, torch_bits_per_byte=bits_per_byte(total, nbytes),
                             torch_seconds=round(time.time() - t0, 1))
                if not args.no_c:
                    t0 = time.time()
                    mean, counted = c_total(args.df, args.model, es, tmp)
                    if counted != n:
                        raise RuntimeError(f"deltafin nll counted {counted} targets, the evaluation set has {n}")
                    r.update(c_nll=mean, c_bits_per_byte=bits_per_byte(mean * n, nbytes), c_seconds=round(time.time() - t0, 1))
            except (RuntimeError, OSError, ValueError) as e:
                print(f"evaluate: {e}", file=sys.stderr)
                return 2
            line = f"{es.describe()}, {nbytes} bytes:"
            if "torch_nll" in r:
                line += f" PyTorch {r['torch_nll']:.6f} nats/token ({r['torch_bits_per_byte']:.4f} bits/byte, {r['torch_seconds']} s)"
            if "c_nll" in r:
                line += f" C {r['c_nll']:.6f} ({r['c_bits_per_byte']:.4f} bits/byte, {r['c_seconds']} s)"
            if "torch_nll" in r and "c_nll" in r:
                r["difference"] = r["c_nll"] - r["torch_nll"]
                good = abs(r["difference"]) <= NLL_TOL
                ok &= good
                line += f", C - PyTorch {r['difference']:+.2e} (bound {NLL_TOL:g})" + ("" if good else " FAIL")
            print(line, flush=True)
            results.append(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "window": args.window, "every": args.every, "results": results}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
