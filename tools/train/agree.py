#!/usr/bin/env python3
"""Agreement of an exported checkpoint across the three implementations: the PyTorch model
(model.py, float32 and float64), the C engine (`deltafin logits`, `deltafin nll`) and the
project's float64 NumPy reference (tests/reference/k3_ref.py).

Checks, on one token sequence:
  C vs PyTorch float32 logits   max_v |c - p| <= 1e-4 * max(1, max_v |p|) at every position (the
                                bound tests/reference/compare.py uses), and the same argmax unless
                                PyTorch's top-2 gap is within that bound (a tie; counted, reported);
  C vs PyTorch NLL              `deltafin nll` minus PyTorch's mean NLL of the same sequence,
                                |difference| <= 1e-3 nats/token;
  PyTorch float64 vs NumPy      (--ref) the same logits bound, against k3_ref's float64 forward;
  greedy continuation           (--greedy N) `deltafin run --tokens ... --max-new N` generates the
                                same N ids as PyTorch float32 (each step recomputed from the whole
                                sequence, argmax with the lowest index on ties); PyTorch's smallest
                                top-2 gap along the way is printed (how close a step came to a tie).
Prints one line per check and PASS or FAIL; exit status 0 = PASS, 1 = FAIL, 2 = could not run.

usage: agree.py --model DIR (--tokens "1 2 3" | --tokens-bin FILE.bin [--offset N] --n N)
                [--df build/deltafin] [--ref] [--greedy N] [--device cpu|cuda] [--tmp DIR]"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export as X  # noqa: E402
from model import K3Model  # noqa: E402

REL_TOL = 1e-4
NLL_TOL = 1e-3


def torch_model(model_dir, dtype=torch.float32, device="cpu"):
    cfg, _ = X.load(model_dir)
    torch.set_float32_matmul_precision("highest")   # no TF32 on a GPU
    return X.load_into(K3Model(cfg), model_dir).to(device=device, dtype=dtype).eval()


def torch_logits(model_dir, tokens, dtype=torch.float32, device="cpu", model=None):
    """Logits [T, vocab] (float64 numpy) of the exported model evaluated in `dtype`."""
    m = model or torch_model(model_dir, dtype, device)
    with torch.no_grad():
        return m(torch.tensor([tokens], device=device, dtype=torch.long))[0].double().cpu().numpy()


def torch_greedy(model, tokens, n, device="cpu"):
    """(n greedy ids, the smallest top-2 logit gap among the steps) of the float32 model."""
    seq, gaps = list(tokens), []
    for _ in range(n):
        last = torch_logits(None, seq, device=device, model=model)[-1]
        top2 = np.sort(last)[-2:]
        gaps.append(float(top2[1] - top2[0]))
        seq.append(int(np.argmax(last)))
    return seq[len(tokens):], min(gaps)


def c_greedy(df, model_dir, tokens, n):
    """Ids `deltafin run --tokens` generates (its last output line)."""
    out = run([df, "run", "--model", model_dir, "--tokens", " ".join(map(str, tokens)), "--max-new", str(n)])
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return [int(t) for t in lines[-1].split()] if lines else []


def mean_nll(logits, tokens):
    """Mean NLL of tokens[1:] given rows 0..T-2 (float64)."""
    z = logits[:-1]
    lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
    return float(np.mean(lse - z[np.arange(len(z)), tokens[1:]]))


def c_logits(df, model_dir, tokens, tmp):
    out = os.path.join(tmp, "c_logits.f32")
    run([df, "logits", "--model", model_dir, "--tokens", " ".join(map(str, tokens)), "--out", out])
    return np.fromfile(out, "<f4").astype(np.float64).reshape(len(tokens), -1)


def c_nll(df, model_dir, tokens, tmp):
    path = os.path.join(tmp, "tokens.txt")
    with open(path, "w") as f:
        f.write(" ".join(map(str, tokens)) + "\n")
    out = run([df, "nll", "--model", model_dir, "--tokens-file", path])
    return float(out.split()[1])            # "nll X over N predicted tokens (...)"


def ref_logits(model_dir, tokens):
    sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "reference"))
    import k3_ref as R
    cfg, ck = R.load(model_dir)
    logits, _ = R.K3Ref(ck, cfg).forward(tokens)
    return logits


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:2])} exited with {p.returncode}: {p.stderr.strip()[-1000:]}")
    return p.stdout


def compare_logits(name, got, want):
    """(ok, report line): the per-position bound and argmax rule of the module docstring."""
    worst, worst_abs, ties, bad = 0.0, 0.0, 0, []
    for t in range(len(want)):
        bound = REL_TOL * max(1.0, float(np.max(np.abs(want[t]))))
        err = float(np.max(np.abs(got[t] - want[t])))
        worst, worst_abs = max(worst, err / bound), max(worst_abs, err)
        top2 = np.sort(want[t])[-2:]
        if int(np.argmax(got[t])) != int(np.argmax(want[t])):
            if top2[1] - top2[0] <= 2 * bound:
                ties += 1
            else:
                bad.append(t)
        if err > bound or not np.all(np.isfinite(got[t])):
            bad.append(t)
    ok = not bad
    line = (f"{name}: {len(want)} positions, max |difference| {worst_abs:.3e} = {worst:.3f} of the bound "
            f"(1e-4 x max(1, max|logit|)), "
            f"argmax ties within the bound {ties}" + ("" if ok else f", FAIL at positions {sorted(set(bad))[:10]}"))
    return ok, line


def main(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch vs C engine vs NumPy reference on an exported checkpoint")
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", help="token ids, space-separated")
    ap.add_argument("--tokens-bin", help="uint16 token file (e.g. valid.bin)")
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--n", type=int, default=1024, help="tokens taken from --tokens-bin")
    ap.add_argument("--df", default=os.environ.get("DF", os.path.join(HERE, "..", "..", "build", "deltafin")))
    ap.add_argument("--ref", action="store_true", help="also compare with the float64 NumPy reference (slow)")
    ap.add_argument("--greedy", type=int, default=0, metavar="N", help="also compare N greedy ids of `deltafin run`")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tmp")
    args = ap.parse_args(argv)
    if bool(args.tokens) == bool(args.tokens_bin):
        ap.error("give exactly one of --tokens and --tokens-bin")
    if args.tokens:
        tokens = [int(t) for t in args.tokens.split()]
    else:
        tokens = np.fromfile(args.tokens_bin, "<u2")[args.offset:args.offset + args.n].astype(int).tolist()
    tmp = args.tmp or tempfile.mkdtemp(prefix="agree-")
    os.makedirs(tmp, exist_ok=True)
    try:
        m32 = torch_model(args.model, torch.float32, args.device)
        p32 = torch_logits(args.model, tokens, device=args.device, model=m32)
        c = c_logits(args.df, args.model, tokens, tmp)
        nll_c, nll_p = c_nll(args.df, args.model, tokens, tmp), mean_nll(p32, tokens)
        ref = ref_logits(args.model, tokens) if args.ref else None
        p64 = torch_logits(args.model, tokens, torch.float64, args.device) if args.ref else None
        if args.greedy:
            gen_p, min_gap = torch_greedy(m32, tokens, args.greedy, args.device)
            gen_c = c_greedy(args.df, args.model, tokens, args.greedy)
    except (RuntimeError, OSError, ValueError) as e:
        print(f"agree: {e}", file=sys.stderr)
        return 2
    ok, line = compare_logits("C vs PyTorch float32 logits", c, p32)
    print(line)
    nll_ok = abs(nll_c - nll_p) <= NLL_TOL
    print(f"NLL over {len(tokens) - 1} predicted tokens: C {nll_c:.6f}, PyTorch {nll_p:.6f}, "
          f"difference {nll_c - nll_p:+.2e} (bound {NLL_TOL:g})" + ("" if nll_ok else "  FAIL"))
    ok &= nll_ok
    if ref is not None:
        ok64, line = compare_logits("PyTorch float64 vs NumPy float64 logits", p64, ref)
        print(line)
        ok32, line = compare_logits("C vs NumPy float64 logits", c, ref)
        print(line)
        ok &= ok64 and ok32
    if args.greedy:
        same = gen_c == gen_p
        print(f"greedy {args.greedy} ids: C {' '.join(map(str, gen_c))}")
        print(f"                 PyTorch {' '.join(map(str, gen_p))}")
        print(f"greedy ids {'equal' if same else 'DIFFER  FAIL'}; PyTorch's smallest top-2 gap {min_gap:.3e}")
        ok &= same
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
