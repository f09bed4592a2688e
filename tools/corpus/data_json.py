#!/usr/bin/python3
"""Writes OUTDIR/data.json, the description of the training files build.sh made:

    data_json.py OUTDIR                         # data.json
    data_json.py OUTDIR --bundle FILE.tar.xz    # bundle.json: the bundle's size, SHA-256, members

data.json gives the vocabulary (mergeable ranks, vocabulary size, special ids), the separator,
and per file its format, token count, SHA-256 and the encoder's counts; and the tokenizer's
bytes per token on the validation text (UTF-8 bytes of the documents / their tokens, separators
not counted).
"""
import argparse
import base64
import json
import os
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from build_corpus import sha256_file as sha256  # noqa: E402


def specials(out, n_mergeable):
    with open(os.path.join(out, "tokenizer_config.json")) as f:
        dec = json.load(f)["added_tokens_decoder"]
    names = ["[BOS]", "[EOS]", "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>", "[PAD]", "[UNK]"]
    by_name = {v["content"]: int(k) for k, v in dec.items()}
    return {n: by_name[n] for n in names if n in by_name and by_name[n] >= n_mergeable}


def n_mergeable_of(out):
    with open(os.path.join(out, "tiktoken.model"), "rb") as f:
        lines = f.read().split(b"\n")
    ranks = [l for l in lines if l]
    base64.b64decode(ranks[-1].split()[0], validate=True)  # a readable file, not a truncated one
    return len(ranks)


def file_entry(out, name, fmt, **extra):
    path = os.path.join(out, name)
    return dict({"file": name, "format": fmt, "bytes": os.path.getsize(path), "sha256": sha256(path)}, **extra)


def data_json(out):
    n = n_mergeable_of(out)
    sp = specials(out, n)
    stats = {}
    for name in ("train", "valid", "chat_train", "chat_valid"):
        with open(os.path.join(out, name + ".stats")) as f:
            stats[name] = json.load(f)
    files = {}
    for name in ("train", "valid"):
        files[name + ".bin"] = file_entry(out, name + ".bin", "uint16 little-endian token ids", **stats[name])
    for name in ("chat_train", "chat_valid"):
        files[name + ".bin"] = file_entry(out, name + ".bin", "uint16 little-endian token ids", **stats[name])
        files[name + ".mask"] = file_entry(out, name + ".mask", "uint8 per token: 1 = assistant-generated",
                                           tokens=stats[name]["tokens"])
    for name in ("tiktoken.model", "tokenizer_config.json", "train.jsonl", "valid.jsonl", "chat_train.jsonl",
                 "chat_valid.jsonl", "manifest.json"):
        files[name] = file_entry(out, name, "text")
    v = stats["valid"]
    timings = {}
    if os.path.exists(os.path.join(out, "timings.tsv")):
        with open(os.path.join(out, "timings.tsv")) as f:
            timings = {k: int(s) for k, s in (line.split("\t") for line in f if line.strip())}
    return {
        "vocabulary": {"n_mergeable": n, "vocab_size": n + 256, "special_ids": sp},
        "separator": {"id": sp["[EOS]"], "token": "[EOS]",
                      "rule": "every pretraining document and every conversation is followed by one [EOS]"},
        "chat_format": "K3 chat format (XTML) rendered by the engine: thinking on, no generation prompt; "
                       "reasoning_effort per conversation (absent = max)",
        "mask": "1 on the tokens after each assistant turn's generation prompt "
                "(<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>) through its <|end_of_msg|>",
        "valid_bytes_per_token": round(v["text_bytes"] / (v["tokens"] - v["documents"]), 4),
        "files": files,
        "timings_s": timings,
    }


def bundle_json(out, name):
    path = os.path.join(out, name)
    with tarfile.open(path) as t:
        members = [{"file": m.name, "bytes": m.size} for m in t.getmembers()]
    return {"file": name, "bytes": os.path.getsize(path), "sha256": sha256(path), "members": members,
            "unpack": f"tar -xJf {name}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--bundle")
    args = ap.parse_args()
    doc, target = (bundle_json(args.out, args.bundle), "bundle.json") if args.bundle else \
        (data_json(args.out), "data.json")
    with open(os.path.join(args.out, target), "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
