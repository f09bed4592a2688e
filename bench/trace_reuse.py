#!/usr/bin/env python3
"""Expert reuse between consecutive tokens in router traces (K3_TRACE files): per MoE layer, the
share of a position's top-k experts that the previous position of the same sequence also chose,
and what uniformly random routing would give (k / experts). A new sequence starts where "pos"
does not follow the previous line's (a new process appending to the file); with --window N also
every N positions (`deltafin nll --window W` runs its windows in one process, W - 1
positions each: give N = W - 1).

Then what an expert cache can know from the history: the chance that an expert is chosen, by the
positions since its layer last chose it, over the trace as a cache replays it (one stream, no
restarts): past the previous position it is near chance on the trained model's traces, which
bounds what any policy built on recency and frequency can keep (docs/PERFORMANCE.md).

usage: bench/trace_reuse.py TRACE.jsonl [--window N] [--experts E]"""
import argparse
import json
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(description="expert reuse between consecutive tokens of a router trace")
    ap.add_argument("trace")
    ap.add_argument("--window", type=int, default=0, help="a sequence restarts every N positions")
    ap.add_argument("--experts", type=int, default=0, help="experts per layer (default: the largest id seen + 1)")
    args = ap.parse_args(argv)
    shared, pairs, prev, prev_pos, top_k, n_experts, lines = {}, {}, None, None, 0, 0, 0
    rows = []
    with open(args.trace) as f:
        for n, line in enumerate(f, 1):
            try:
                rec = json.loads(line)
                pos, layers = int(rec["pos"]), {int(l): v for l, v in rec["layers"].items()}
            except (ValueError, KeyError, TypeError, AttributeError):
                print(f"{args.trace}:{n}: not a trace line", file=sys.stderr)
                return 1
            lines += 1
            new_seq = prev is None or pos != prev_pos + 1 or (args.window and pos % args.window == 0)
            for l, ids in layers.items():
                top_k = max(top_k, len(ids))
                n_experts = max(n_experts, max(ids) + 1)
                if not new_seq and l in prev:
                    shared[l] = shared.get(l, 0) + len(set(ids) & set(prev[l]))
                    pairs[l] = pairs.get(l, 0) + len(ids)
            prev, prev_pos = layers, pos
            rows.append(layers)
    if not pairs:
        print(f"{args.trace}: no consecutive positions", file=sys.stderr)
        return 1
    n_experts = args.experts or n_experts
    total = sum(shared.values()) / sum(pairs.values())
    print(f"trace {args.trace}: {lines} positions, {len(pairs)} MoE layers, top-{top_k} of {n_experts} experts")
    print("reuse from the previous token, per layer: " +
          " ".join(f"{l}:{100 * shared[l] / pairs[l]:.1f}%" for l in sorted(pairs)))
    print(f"reuse from the previous token, all layers: {100 * total:.1f}% (uniformly random routing: "
          f"{100 * top_k / n_experts:.1f}%)")
    print("chosen, by positions since the expert's last use: " + chance_by_age(rows, n_experts))
    return 0


AGE_BINS = ((1, 1), (2, 2), (3, 3), (4, 5), (6, 9), (10, None))  # the last: 10 or more, or never


def chance_by_age(rows, n_experts):
    """The share of (position, layer, expert) triples chosen, per bin of the positions since the
    expert was last chosen in its layer."""
    last, seen, chosen = {}, [0] * len(AGE_BINS), [0] * len(AGE_BINS)
    for p, layers in enumerate(rows):
        for l, ids in layers.items():
            picked = set(ids)
            for e in range(n_experts):
                age = p - last[(l, e)] if (l, e) in last else None
                b = next(i for i, (lo, hi) in enumerate(AGE_BINS) if hi is None or (age is not None and lo <= age <= hi))
                seen[b] += 1
                chosen[b] += e in picked
            for e in picked:
                last[(l, e)] = p
    names = [f"{lo}" if lo == hi else f"{lo}-{hi}" if hi else f"{lo}+ or never" for lo, hi in AGE_BINS]
    return " ".join(f"{n}:{100 * c / s:.1f}%" for n, c, s in zip(names, chosen, seen) if s)


if __name__ == "__main__":
    sys.exit(main())
