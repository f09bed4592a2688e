#!/usr/bin/env python3
"""A count-based baseline for the trained model: an interpolated Kneser-Ney trigram over the same
token ids (same tokenizer), fitted on the training split and scored on the validation split's
targets exactly as evalset.py defines them (same windows: a target at position 1 of a window has
one token of context, so it is scored by the bigram level).

Smoothing (Chen and Goodman 1998, "interpolated Kneser-Ney"; `--discounts modified`, the default,
is their modified variant with three discounts per order; `single` uses one, D = n1/(n1 + 2 n2)):

  P3(c | a b) = (max(c(abc) - D3(c(abc)), 0) + gamma3(ab) P2(c | b)) / c(ab.)
      gamma3(ab) = D3(1) N1(ab.) + D3(2) N2(ab.) + D3(3+) N3+(ab.)
      (c(ab.) = 0, a context never seen: P3 = P2, the whole mass backs off)
  P2(c | b) = the same form over continuation counts n(bc) = |{a : c(abc) > 0}| with discounts
      D2 estimated from the counts of those counts; (n(b.) = 0: P2 = P1)
  P1(c) = the same form over n(c) = |{b : n(bc) > 0}|, interpolated with the uniform
      distribution 1/V over the whole vocabulary, so a token never seen in training (and any
      special id) still has probability gamma1 / (n(.) V) > 0.

Nk(ctx.) counts the continuations seen exactly k times (3+: at least 3). Discounts per order from
the count-of-counts n_k of that order's counts: Y = n1/(n1 + 2 n2), D(1) = 1 - 2Y n2/n1,
D(2) = 2 - 3Y n3/n2, D(3+) = 3 - 4Y n4/n3 (single: D = Y for every count). The training split is
one stream (documents separated by [EOS], as the model saw it in its training windows).

usage: kn_baseline.py --data DIR [--split text|chat] [--train-files train.bin,...] [--window 512]
                      [--every K] [--discounts modified|single] [--json FILE]"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from evalset import EvalSet, bits_per_byte, token_byte_lengths  # noqa: E402


def discounts(counts, modified):
    """D for counts 1, 2 and 3+ (an array indexed by min(count, 3); D[0] = 0) from counts' count-of-counts."""
    n = np.bincount(np.minimum(counts, 5), minlength=5)[1:5].astype(np.float64)
    if n[0] == 0 or n[1] == 0:
        raise ValueError("too little data for Kneser-Ney discounts (no count of 1 or of 2)")
    y = n[0] / (n[0] + 2 * n[1])
    if not modified:
        return np.array([0.0, y, y, y])
    if n[2] == 0:
        raise ValueError("too little data for modified Kneser-Ney discounts (no count of 3)")
    return np.array([0.0, 1 - 2 * y * n[1] / n[0], 2 - 3 * y * n[2] / n[1], 3 - 4 * y * n[3] / n[2]])


class Level:
    """One order: sorted keys (context * V + token) with their counts, and per context the total
    count and the interpolation mass gamma."""

    def __init__(self, keys, counts, V, modified):
        self.keys, self.counts, self.V = keys, counts, V
        self.D = discounts(counts, modified)
        ctx = keys // V
        self.ctx, first = np.unique(ctx, return_index=True)
        self.total = np.add.reduceat(counts, first).astype(np.float64)
        self.gamma = np.add.reduceat(self.D[np.minimum(counts, 3)], first)

    def lookup(self, keys):
        """Counts of the given keys (0 where unseen)."""
        i = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return np.where(self.keys[i] == keys, self.counts[i], 0)

    def context(self, ctx):
        """(total, gamma) of the given contexts; (0, 0) where unseen."""
        i = np.minimum(np.searchsorted(self.ctx, ctx), len(self.ctx) - 1)
        seen = self.ctx[i] == ctx
        return np.where(seen, self.total[i], 0.0), np.where(seen, self.gamma[i], 0.0)

    def interpolate(self, ctx, tok, lower):
        """P(tok | ctx) = (max(c - D(c), 0) + gamma(ctx) lower) / total(ctx), or lower for an
        unseen context."""
        c = self.lookup(ctx * self.V + tok)
        total, gamma = self.context(ctx)
        safe = np.where(total > 0, total, 1.0)
        p = (np.maximum(c - self.D[np.minimum(c, 3)], 0.0) + gamma * lower) / safe
        return np.where(total > 0, p, lower)


class KNTrigram:
    def __init__(self, ids, V, modified=True):
        ids = np.asarray(ids, np.int64)
        self.V = V
        tri, tri_n = np.unique((ids[:-2] * V + ids[1:-1]) * V + ids[2:], return_counts=True)
        self.l3 = Level(tri, tri_n, V, modified)                     # context a*V+b, token c
        bi, bi_n = np.unique(tri % (V * V), return_counts=True)       # n(bc) = |{a}|
        self.l2 = Level(bi, bi_n, V, modified)                       # context b, token c
        uni_n = np.bincount(bi % V, minlength=V)                     # n(c) = |{b}|
        seen = np.nonzero(uni_n)[0]
        D1 = discounts(uni_n[seen], modified)
        total = float(uni_n.sum())
        gamma = float(D1[np.minimum(uni_n[seen], 3)].sum())
        self.p1 = (np.maximum(uni_n - D1[np.minimum(uni_n, 3)], 0.0) + gamma / V) / total
        self.sizes = {"trigrams": len(tri), "bigrams": len(bi), "unigrams": len(seen)}
        self.D = {"trigram": self.l3.D[1:].tolist(), "bigram": self.l2.D[1:].tolist(), "unigram": D1[1:].tolist()}

    def prob(self, a, b, c):
        """P(c | a b) for arrays of ids; a = -1 where only b is known (bigram level)."""
        p2 = self.l2.interpolate(b, c, self.p1[c])
        has_a = a >= 0
        p3 = self.l3.interpolate(np.where(has_a, a, 0) * self.V + b, c, p2)
        return np.where(has_a, p3, p2)

    def score(self, es):
        """Total NLL (nats) of the evaluation set's counted targets."""
        total = 0.0
        for w, t in zip(es.windows, es.targets):
            pos = np.nonzero(t)[0]                                   # position p predicts w[p + 1]
            a = np.where(pos >= 1, w[np.maximum(pos - 1, 0)], -1)
            total += float(-np.log(self.prob(a, w[pos], w[pos + 1])).sum())
        return total


def main(argv=None):
    ap = argparse.ArgumentParser(description="interpolated Kneser-Ney trigram baseline on the validation windows")
    ap.add_argument("--data", required=True, help="data directory (tools/corpus output)")
    ap.add_argument("--split", default="text", choices=["text", "chat"])
    ap.add_argument("--train-files", default=None,
                    help="comma-separated training token files (default: train.bin for text, train.bin,chat_train.bin for chat)")
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--discounts", default="modified", choices=["modified", "single"])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    with open(os.path.join(args.data, "data.json")) as f:
        V = json.load(f)["vocabulary"]["vocab_size"]
    files = (args.train_files or ("train.bin" if args.split == "text" else "train.bin,chat_train.bin")).split(",")
    t0 = time.time()
    train = np.concatenate([np.fromfile(os.path.join(args.data, n), "<u2") for n in files]).astype(np.int64)
    kn = KNTrigram(train, V, args.discounts == "modified")
    fit_s = time.time() - t0
    es = EvalSet(args.data, args.split, args.window, args.every)
    total = kn.score(es)
    n, nbytes = es.counted(), es.bytes(token_byte_lengths(args.data, V))
    res = {"split": args.split, "eval": es.describe(), "train_files": files, "train_tokens": int(len(train)),
           "discounts": args.discounts, "D": kn.D, "sizes": kn.sizes, "targets": n, "bytes": nbytes,
           "nll": total / n, "bits_per_byte": bits_per_byte(total, nbytes), "fit_seconds": round(fit_s, 1)}
    print(f"KN trigram ({args.discounts} discounts) on {es.describe()}; trained on {'+'.join(files)} "
          f"({len(train)} tokens, {kn.sizes['trigrams']} trigram types): "
          f"{res['nll']:.4f} nats/token, {res['bits_per_byte']:.4f} bits/byte over {nbytes} bytes")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
