"""The evaluation set shared by every scorer of a validation split (the model in PyTorch, the C
engine through `deltafin nll --window`, the n-gram baseline), so that all of them predict exactly
the same targets from exactly the same context.

A split is a uint16 token file of a data directory (tools/corpus): `text` = valid.bin (documents,
each followed by [EOS]), `chat` = chat_valid.bin with its loss mask (1 on the assistant's
tokens). The file is cut into consecutive windows of `window` tokens (the training length; the
last window may be shorter), each scored from an empty state: position t of a window predicts its
token t + 1, and a target counts when the split's mask (if any) marks it. `every` > 1 keeps only
windows 0, every, 2 * every, ... (a deterministic subset spread over the whole file).

Bytes per target come from the tokenizer: the length of the token's bytes in tiktoken.model;
special tokens ([EOS], the chat markers) stand for no text and count 0 bytes. Bits per byte =
total NLL / ln 2 / total bytes of the counted targets.

As a program it writes an evaluation set in the files `deltafin nll` reads:
  evalset.py --data DIR --split text|chat [--window 512] [--every K] [--first N] --out PREFIX
writes PREFIX.tokens and PREFIX.mask (--first N: only the set's first N windows), for
  deltafin nll --tokens-file PREFIX.tokens --window 512 --mask PREFIX.mask"""
import argparse
import base64
import json
import math
import os
import sys

import numpy as np

SPLITS = {"text": ("valid.bin", None), "chat": ("chat_valid.bin", "chat_valid.mask")}


class EvalSet:
    def __init__(self, data_dir, split, window=512, every=1):
        if split not in SPLITS:
            raise ValueError(f"split must be one of {sorted(SPLITS)}, not {split!r}")
        if window < 2 or every < 1:
            raise ValueError("window must be >= 2 and every >= 1")
        ids_name, mask_name = SPLITS[split]
        masks = {}
        meta = os.path.join(data_dir, "data.json")
        if os.path.isfile(meta):
            with open(meta) as f:
                masks = json.load(f).get("masks", {})
        if mask_name is not None:
            mask_name = masks.get(ids_name, mask_name)
        ids = np.fromfile(os.path.join(data_dir, ids_name), "<u2").astype(np.int64)
        mask = np.ones(len(ids), np.uint8) if mask_name is None else np.fromfile(os.path.join(data_dir, mask_name), np.uint8)
        if len(mask) != len(ids):
            raise ValueError(f"{mask_name}: {len(mask)} mask bytes for {len(ids)} tokens")
        starts = list(range(0, len(ids) - 1, window))[::every]
        self.split, self.window, self.every = split, window, every
        self.windows = [ids[s:s + window] for s in starts]
        # targets[w][t]: whether position t of window w (predicting its token t + 1) counts
        self.targets = [mask[s + 1:s + window].astype(bool) for s in starts]

    @property
    def tokens(self):
        return int(sum(len(w) for w in self.windows))

    def counted(self):
        return int(sum(t.sum() for t in self.targets))

    def target_ids(self):
        """The counted target ids, in order."""
        return np.concatenate([w[1:][t] for w, t in zip(self.windows, self.targets)])

    def bytes(self, lengths):
        """Text bytes of the counted targets, given each id's byte length."""
        return int(lengths[self.target_ids()].sum())

    def describe(self):
        sub = "" if self.every == 1 else f", one window in {self.every}"
        return (f"{self.split}: {len(self.windows)} windows of {self.window} tokens{sub}, {self.tokens} tokens, "
                f"{self.counted()} targets")

    def write_for_engine(self, tokens_path, mask_path):
        """The windows, concatenated, as `deltafin nll --tokens-file F --window N --mask M` reads
        them (every window but possibly the last is full, so N cuts them where they were cut)."""
        if any(len(w) != self.window for w in self.windows[:-1]):
            raise ValueError("only the last window may be short")
        with open(tokens_path, "w") as f:
            f.write(" ".join(map(str, np.concatenate(self.windows).tolist())) + "\n")
        with open(mask_path, "w") as f:
            # the first token of every window is never a target
            flags = np.concatenate([np.concatenate([[0], t.astype(np.int64)]) for t in self.targets])
            f.write(" ".join(map(str, flags.tolist())) + "\n")


def token_byte_lengths(tokenizer_dir, vocab_size):
    """Byte length of every id: the mergeable ranks of tiktoken.model; 0 for the special ids."""
    lengths = np.zeros(vocab_size, np.int64)
    with open(os.path.join(tokenizer_dir, "tiktoken.model")) as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                lengths[int(rank)] = len(base64.b64decode(tok))
    return lengths


def bits_per_byte(total_nll, n_bytes):
    return total_nll / math.log(2) / n_bytes


def main(argv=None):
    ap = argparse.ArgumentParser(description="write an evaluation set as deltafin nll's token and mask files")
    ap.add_argument("--data", required=True)
    ap.add_argument("--split", required=True, choices=sorted(SPLITS))
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--first", type=int, default=0, help="keep only the first N windows of the set")
    ap.add_argument("--out", required=True, help="prefix of the .tokens and .mask files")
    args = ap.parse_args(argv)
    es = EvalSet(args.data, args.split, args.window, args.every)
    if args.first:
        es.windows, es.targets = es.windows[:args.first], es.targets[:args.first]
    es.write_for_engine(args.out + ".tokens", args.out + ".mask")
    print(es.describe() + ("" if not args.first else " (its first windows)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
