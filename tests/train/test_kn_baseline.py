#!/usr/bin/env python3
"""The Kneser-Ney baseline (tools/train/kn_baseline.py) against a direct, dictionary-based
evaluation of the formulas in its docstring, on a small corpus: every P(c | a b) for every a, b, c
(seen and unseen contexts, a token never seen in training) to 1e-12; each distribution sums to 1;
and the windowed scoring of an evaluation set against a position-by-position loop."""
import collections
import math
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
from evalset import EvalSet  # noqa: E402
from kn_baseline import KNTrigram  # noqa: E402

V = 39         # token 38 never occurs in training: only the uniform share gives it probability


def corpus(n, seed):
    """A Markov chain over tokens 0..29 (and a few rare ones): half the time a fixed successor, else a Zipf-like draw, so
    trigram and continuation counts of 1, 2, 3 and 4 all occur and many contexts stay unseen."""
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, 31)
    zipf /= zipf.sum()
    out = [0]
    for _ in range(n - 1):
        prev = out[-1]
        out.append((prev * 7 + 3) % 30 if rng.random() < 0.5 else int(rng.choice(30, p=zipf)))
    # rare tokens 30..37, token 30 + j at j % 4 + 1 places: unigram continuation counts of 1..4
    for j in range(8):
        for at in rng.choice(n, size=j % 4 + 1, replace=False):
            out[at] = 30 + j
    return np.array(out)


def discount_table(counts, modified):
    n = collections.Counter(counts)
    y = n[1] / (n[1] + 2 * n[2])
    if not modified:
        return lambda c: 0.0 if c == 0 else y
    d = {1: 1 - 2 * y * n[2] / n[1], 2: 2 - 3 * y * n[3] / n[2], 3: 3 - 4 * y * n[4] / n[3]}
    return lambda c: 0.0 if c == 0 else d[min(c, 3)]


def reference(ids, modified):
    """P(c | a, b) from the formulas, with dictionaries; a = None means the bigram level."""
    tri = collections.Counter(zip(ids[:-2], ids[1:-1], ids[2:]))
    cont2 = collections.Counter((b, c) for (_, b, c) in tri)            # n(bc) = |{a}|
    cont1 = collections.Counter(c for (_, c) in cont2)                  # n(c) = |{b}|
    D3, D2, D1 = (discount_table(list(x.values()), modified) for x in (tri, cont2, cont1))

    def level(counts, D, ctx_of, tok_of):
        total, gamma = collections.defaultdict(float), collections.defaultdict(float)
        for key, c in counts.items():
            total[ctx_of(key)] += c
            gamma[ctx_of(key)] += D(c)
        return total, gamma

    t1 = sum(cont1.values())
    g1 = sum(D1(c) for c in cont1.values())
    t2, g2 = level(cont2, D2, lambda k: k[0], lambda k: k[1])
    t3, g3 = level(tri, D3, lambda k: k[:2], lambda k: k[2])

    def p1(c):
        n = cont1.get(c, 0)
        return (max(n - D1(n), 0) + g1 / V) / t1

    def p2(b, c):
        if t2[b] == 0:
            return p1(c)
        n = cont2.get((b, c), 0)
        return (max(n - D2(n), 0) + g2[b] * p1(c)) / t2[b]

    def p3(a, b, c):
        if a is None:
            return p2(b, c)
        if t3[(a, b)] == 0:
            return p2(b, c)
        n = tri.get((a, b, c), 0)
        return (max(n - D3(n), 0) + g3[(a, b)] * p2(b, c)) / t3[(a, b)]

    return p3


def main():
    ids = corpus(4000, 1)
    failures = 0
    for modified in (True, False):
        kn = KNTrigram(ids, V, modified)
        ref = reference(ids.tolist(), modified)
        grid = np.array([(a, b, c) for a in range(-1, V) for b in range(V) for c in range(V)])
        got = kn.prob(grid[:, 0], grid[:, 1], grid[:, 2])
        want = np.array([ref(None if a < 0 else a, b, c) for a, b, c in grid])
        err = float(np.max(np.abs(got - want)))
        sums = got.reshape(V + 1, V, V).sum(-1)
        unseen = got[grid[:, 2] == V - 1]
        name = "modified" if modified else "single"
        print(f"{name}: max |P - reference| {err:.2e}; sums in [{sums.min():.15f}, {sums.max():.15f}]; "
              f"unseen token P in [{unseen.min():.2e}, {unseen.max():.2e}]")
        if err > 1e-12 or np.max(np.abs(sums - 1)) > 1e-12 or unseen.min() <= 0:
            print(f"FAIL: {name} discounts")
            failures += 1

    # windowed scoring: the first target of a window has only one token of context
    with tempfile.TemporaryDirectory() as d:
        valid = corpus(300, 2)
        valid[17] = V - 1
        valid.astype("<u2").tofile(os.path.join(d, "valid.bin"))
        es = EvalSet(d, "text", window=64)
        kn = KNTrigram(ids, V, True)
        ref = reference(ids.tolist(), True)
        want = 0.0
        for s in range(0, len(valid) - 1, 64):
            w = valid[s:s + 64].tolist()
            for p in range(len(w) - 1):
                want -= math.log(ref(w[p - 1] if p >= 1 else None, w[p], w[p + 1]))
        got = kn.score(es)
        print(f"windowed score {got:.10f}, position by position {want:.10f}, {es.counted()} targets")
        if abs(got - want) > 1e-9 * abs(want) or es.counted() != len(valid) - len(range(0, len(valid) - 1, 64)):
            print("FAIL: windowed scoring")
            failures += 1
    print("PASS" if not failures else "FAIL")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
