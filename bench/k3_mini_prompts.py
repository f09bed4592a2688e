#!/usr/bin/env python3
"""Prompts for the benchmarks of the shipped model (bench/bench_spec_k3_mini.sh,
bench/bench_lookahead_k3_mini.sh), from the validation split that training never saw:

  OUT/text-SOURCE.ids  the first 48 token ids of the first validation document (200+ tokens) of
                       each of six sources (valid.jsonl and valid.bin are in the same order, each
                       document followed by the separator id);
  OUT/questions.txt    six chat questions, one per line, phrased as the validation conversations'.

usage: bench/k3_mini_prompts.py DATA_DIR OUT_DIR"""
import json
import os
import sys

import numpy as np

SOURCES = ["bible-web", "postgresql-doc", "man", "python-doc", "gcide", "foldoc"]
QUESTIONS = [
    'What does the word "serendipity" mean?',
    'What are some synonyms of "convenient"?',
    "What does the ls command do?",
    "What is the Python module json for?",
    "In computing, what is a compiler?",
    "Quote of the day?",
]


def main(data, out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(data, "data.json")) as f:
        eos = json.load(f)["separator"]["id"]
    ids = np.fromfile(os.path.join(data, "valid.bin"), "<u2")
    starts = np.concatenate([[0], np.nonzero(ids == eos)[0] + 1])
    chosen = {}
    with open(os.path.join(data, "valid.jsonl")) as f:
        for i, line in enumerate(f):
            src = json.loads(line)["source"]
            if src in SOURCES and src not in chosen and starts[i + 1] - starts[i] > 200:
                chosen[src] = " ".join(map(str, ids[starts[i]:starts[i] + 48]))
    for src in SOURCES:
        with open(os.path.join(out, f"text-{src}.ids"), "w") as f:
            f.write(chosen[src] + "\n")
    with open(os.path.join(out, "questions.txt"), "w") as f:
        f.write("\n".join(QUESTIONS) + "\n")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("usage: ")[1])
    sys.exit(main(*sys.argv[1:]))
