#!/usr/bin/env python3
"""Compares the C engine with the float64 reference (k3_ref.py) on one checkpoint and token list.

Checks, at every position t of the token list:
  max_v |c[t,v] - ref[t,v]| <= 1e-4 * max(1, max_v |ref[t,v]|)     and     argmax c[t] == argmax ref[t]
and with --greedy N that `deltafin run --max-new N` generates the same ids as the reference.
Prints the error of every position, the reference's top-2 logit gap (how close an argmax was to a
tie) and the smallest router margin (how close a routing choice was to a tie), then PASS or FAIL.

usage: compare.py --df BUILD/deltafin --model DIR --tokens "1 2 3" [--greedy N] [--chunk C] [--tmp DIR]
       (--df defaults to $DF)
exit status 0 = PASS, 1 = FAIL, 2 = could not run."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_ref as R  # noqa: E402

REL_TOL = 1e-4


def parse_run_output(stdout):
    """Generated ids from `deltafin run` stdout: the last non-empty line, ids space-separated."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    return [int(t) for t in lines[-1].split()] if lines else []


def run_c(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {p.returncode}: {p.stderr.strip()[-2000:]}")
    return p.stdout


def c_logits(df, model, tokens, chunk, tmp, vocab):
    out = os.path.join(tmp, "c_logits.f32")
    cmd = [df, "logits", "--model", model, "--tokens", tokens, "--out", out]
    if chunk:
        cmd += ["--chunk", str(chunk)]
    run_c(cmd)
    a = np.fromfile(out, "<f4").astype(np.float64)
    n = len(tokens.split())
    if a.size != n * vocab:
        raise RuntimeError(f"{out}: {a.size} floats, expected {n} x {vocab}")
    return a.reshape(n, vocab)


def compare_logits(c, ref, min_margins):
    ok = True
    print(f"{'pos':>4} {'max|c-ref|':>12} {'bound':>10} {'argmax c/ref':>14} {'ref top2 gap':>13} {'route margin':>13}")
    for t in range(len(ref)):
        err = float(np.max(np.abs(c[t] - ref[t])))
        bound = REL_TOL * max(1.0, float(np.max(np.abs(ref[t]))))
        ac, ar = int(np.argmax(c[t])), int(np.argmax(ref[t]))
        good = err <= bound and ac == ar and np.all(np.isfinite(c[t]))
        ok &= good
        print(f"{t:>4} {err:>12.3e} {bound:>10.2e} {ac:>6}/{ar:<7} {R.top2_margin(ref[t]):>13.3e} "
              f"{min_margins.get(t, float('inf')):>13.3e}{'' if good else '  <-- FAIL'}")
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description="C engine vs float64 reference")
    ap.add_argument("--df", default=os.environ.get("DF"), help="deltafin binary (default $DF)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--greedy", type=int, default=0, metavar="N", help="also compare N greedy ids of `deltafin run`")
    ap.add_argument("--chunk", type=int, default=0, help="pass --chunk C to the C commands (0: their default)")
    ap.add_argument("--tmp", help="scratch directory (default: a temporary one)")
    args = ap.parse_args(argv)
    if not args.df:
        print("compare: give --df or set $DF", file=sys.stderr)
        return 2
    tmp = args.tmp or tempfile.mkdtemp(prefix="k3cmp-")
    os.makedirs(tmp, exist_ok=True)
    try:
        return compare(args, tmp)
    finally:
        if not args.tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def compare(args, tmp):
    try:
        tokens = R.parse_tokens(args.tokens)
        cfg, ck = R.load(args.model)
        ref = R.K3Ref(ck, cfg)
        ref_logits, ref_gen, gen_margins = ref.greedy(tokens, args.greedy)
        min_margins = {}
        for pos, _, _, _, margin in ref.routes:
            min_margins[pos] = min(min_margins.get(pos, float("inf")), margin)
        c = c_logits(args.df, args.model, args.tokens, args.chunk, tmp, cfg.vocab_size)
    except (R.RefError, RuntimeError, OSError) as e:
        print(f"compare: {e}", file=sys.stderr)
        return 2
    ok = compare_logits(c, ref_logits[:len(tokens)], min_margins)
    if args.greedy:
        cmd = [args.df, "run", "--model", args.model, "--tokens", args.tokens, "--max-new", str(args.greedy)]
        if args.chunk:
            cmd += ["--chunk", str(args.chunk)]
        try:
            c_gen = parse_run_output(run_c(cmd))
        except (RuntimeError, ValueError) as e:
            print(f"compare: {e}", file=sys.stderr)
            return 2
        same = c_gen == ref_gen
        ok &= same
        print(f"greedy C  : {' '.join(map(str, c_gen))}")
        print(f"greedy ref: {' '.join(map(str, ref_gen))}")
        print(f"greedy ref top-2 gaps: {' '.join(f'{m:.2e}' for m in gen_margins)}")
        if not same:
            print("greedy ids differ")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
