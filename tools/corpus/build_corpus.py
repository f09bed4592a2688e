#!/usr/bin/python3
"""Builds the English training corpus from Debian packages (tools/corpus/README.md).

    /usr/bin/python3 tools/corpus/build_corpus.py --out DIR

Reads the sources of sources.SOURCES (installed Debian packages; a missing one stops the build
with the apt-get line that installs it), cleans each document, drops junk and short fragments,
removes exact and near-exact duplicates (documents and repeated paragraphs), and splits train
and validation by a hash of the document id. Writes DIR/train.jsonl and DIR/valid.jsonl (one
{"id", "source", "text"} per line, ordered by a hash of the id) and DIR/manifest.json (per
source: packages, versions, licences, documents, bytes; SHA-256 of every output file).
The output depends only on the package versions installed.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sources  # noqa: E402
import textclean  # noqa: E402

VALID_PER_MILLE = 15
MAX_DOC_CHARS = 200_000  # longer documents (whole manuals on one page) are cut into parts


def package_version(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}\t${Version}", pkg], capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.startswith("install ok installed"):
        return None
    return r.stdout.split("\t")[1]


def check_packages():
    """{package: version} for every package the build reads; exits with the install line if any
    is missing."""
    wanted = sorted({p for s in sources.SOURCES for p in s[1]} | set(sources.TOOL_PACKAGES))
    versions = {p: package_version(p) for p in wanted}
    missing = [p for p, v in versions.items() if v is None]
    if missing:
        sys.exit("build_corpus: missing Debian packages; install them with:\n"
                 "  apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends " + " ".join(missing))
    return versions


def licence_fields(pkg):
    """The License: short names of a machine-readable copyright file, and the file's SHA-256."""
    path = f"/usr/share/doc/{pkg}/copyright"
    with open(path, "rb") as f:
        raw = f.read()
    names = sorted({m.strip() for m in re.findall(rb"^License:[ \t]*(\S[^\n]*)", raw, re.M)
                    if len(m.strip()) < 60})
    return {"copyright_file": path, "copyright_sha256": hashlib.sha256(raw).hexdigest(),
            "license_fields": [n.decode("utf-8", "replace") for n in names]}


def split_long(doc_id, text):
    """Documents over MAX_DOC_CHARS become parts cut at paragraph boundaries."""
    if len(text) <= MAX_DOC_CHARS:
        return [(doc_id, text)]
    parts, cur, n = [], [], 0
    for para in text.split("\n\n"):
        if cur and n + len(para) > MAX_DOC_CHARS:
            parts.append("\n\n".join(cur))
            cur, n = [], 0
        cur.append(para)
        n += len(para) + 2
    parts.append("\n\n".join(cur))
    return [(f"{doc_id}#{i}", p) for i, p in enumerate(parts)]


def clean_document(text, min_chars):
    text = textclean.normalize(text)
    text = textclean.drop_junk_paragraphs(text)
    return text if len(text) >= min_chars else None


def build_source(name, extract, min_chars, dedup, seen_ids):
    """The cleaned, deduplicated documents of one source, and its counts."""
    docs, stats = [], {"extracted": 0, "too_short": 0, "duplicates": 0}
    for doc_id, raw in extract():
        stats["extracted"] += 1
        text = clean_document(raw, min_chars)
        if text is None:
            stats["too_short"] += 1
            continue
        text = dedup.add(text)
        if text is None or len(text) < min_chars:
            stats["duplicates"] += 1
            continue
        for part_id, part in split_long(doc_id, text):
            while part_id in seen_ids:  # two entries under one headword
                part_id += "+"
            seen_ids.add(part_id)
            docs.append({"id": part_id, "source": name, "text": part})
    return docs, stats


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_jsonl(path, docs):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--only", help="comma-separated source names (for trying one source)")
    args = ap.parse_args()
    versions = check_packages()
    os.makedirs(args.out, exist_ok=True)
    dedup, seen_ids, train, valid, manifest_sources = textclean.Deduper(), set(), [], [], []
    only = set(args.only.split(",")) if args.only else None
    for name, pkgs, licence, kind, extract, min_chars in sources.SOURCES:
        if only and name not in only:
            continue
        t0 = time.time()
        docs, stats = build_source(name, extract, min_chars, dedup, seen_ids)
        n_valid = 0
        for d in docs:
            is_valid = textclean.is_validation(d["id"], VALID_PER_MILLE)
            (valid if is_valid else train).append(d)
            n_valid += is_valid
        size = sum(len(d["text"].encode()) for d in docs)
        entry = {"name": name, "kind": kind, "licence": licence,
                 "packages": [dict({"package": p, "version": versions[p]}, **licence_fields(p)) for p in pkgs],
                 "documents": len(docs), "valid_documents": n_valid, "bytes": size, **stats}
        manifest_sources.append(entry)
        print(f"{name:22s} {len(docs):7d} docs {size / 1e6:8.2f} MB  ({time.time() - t0:.0f} s)", flush=True)
    order = lambda d: hashlib.sha256(d["id"].encode()).digest()  # noqa: E731
    train.sort(key=order)
    valid.sort(key=order)
    write_jsonl(os.path.join(args.out, "train.jsonl"), train)
    write_jsonl(os.path.join(args.out, "valid.jsonl"), valid)
    files = {n: {"sha256": sha256_file(os.path.join(args.out, n)), "bytes": os.path.getsize(os.path.join(args.out, n))}
             for n in ("train.jsonl", "valid.jsonl")}
    manifest = {
        "description": "English corpus from Debian packages (tools/corpus/build_corpus.py)",
        "split": f"validation when sha256(id) mod 1000 < {VALID_PER_MILLE}",
        "tool_packages": {p: versions[p] for p in sources.TOOL_PACKAGES},
        "sources": manifest_sources,
        "totals": {"train_documents": len(train), "valid_documents": len(valid),
                   "train_bytes": sum(len(d["text"].encode()) for d in train),
                   "valid_bytes": sum(len(d["text"].encode()) for d in valid)},
        "files": files,
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    t = manifest["totals"]
    print(f"train {t['train_documents']} docs {t['train_bytes'] / 1e6:.1f} MB, "
          f"valid {t['valid_documents']} docs {t['valid_bytes'] / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
