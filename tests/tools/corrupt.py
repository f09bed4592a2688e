"""Table-driven failure paths: each case corrupts a copy of a synthetic checkpoint in one way and
checks that `deltafin inspect` (release and sanitizer builds) refuses it with exit status 1 and a
single-line message naming the file and the field or tensor - never a crash or a sanitizer report.

usage: corrupt.py SOURCE_MODEL_DIR SCRATCH_DIR DF [DF ...]
"""
import json
import os
import shutil
import struct
import subprocess
import sys


def shards(d):
    return sorted(f for f in os.listdir(d) if f.startswith("model-") and f.endswith(".safetensors"))


def read_shard(path):
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + hlen]), raw[8 + hlen:]


def write_shard(path, header, data):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def edit_header(d, fn, which=0):
    """Apply fn(header) to the header of shard number `which`; returns that shard's name."""
    name = shards(d)[which]
    header, data = read_shard(os.path.join(d, name))
    fn(header)
    write_shard(os.path.join(d, name), header, data)
    return name


def tensors_by_offset(header):
    return sorted((v["data_offsets"][0], k) for k, v in header.items() if k != "__metadata__")


def edit_config(d, fn):
    p = os.path.join(d, "config.json")
    cfg = json.load(open(p))
    fn(cfg)
    json.dump(cfg, open(p, "w"))


def drop_index(d):
    os.remove(os.path.join(d, "model.safetensors.index.json"))


# --- the cases: each mutates the copy and returns the substrings the message must contain ---

def truncated_shard(d):
    name = shards(d)[-1]
    p = os.path.join(d, name)
    os.truncate(p, os.path.getsize(p) - 100)
    return [name, "truncated"]


def header_past_eof(d):
    name = shards(d)[0]
    with open(os.path.join(d, name), "r+b") as f:
        f.write(struct.pack("<Q", 1 << 26))
    return [name, "past the end"]


def header_not_json(d):
    name = shards(d)[0]
    with open(os.path.join(d, name), "r+b") as f:
        f.seek(8)
        f.write(b"{not json")
    return [name, "not valid JSON"]


def overlapping_tensors(d):
    state = {}

    def fn(h):
        order = tensors_by_offset(h)
        sizes = {}
        for _, k in order:  # the first later tensor with the same size as an earlier one
            size = h[k]["data_offsets"][1] - h[k]["data_offsets"][0]
            if size in sizes and "b" not in state:
                state["a"], state["b"] = sizes[size], k
            sizes.setdefault(size, k)
        h[state["b"]]["data_offsets"] = list(h[state["a"]]["data_offsets"])
    name = edit_header(d, fn)
    return [name, state["b"], "overlaps"]


def unsupported_dtype(d):
    state = {}

    def fn(h):
        k = next(k for k, v in h.items() if k != "__metadata__" and v["dtype"] == "BF16")
        h[k]["dtype"] = "F16"
        state["k"] = k
    name = edit_header(d, fn)
    return [name, state["k"], "F16", "not supported"]


def wrong_dtype(d):
    state = {}

    def fn(h):
        k = next(k for k, v in h.items() if k.endswith("input_layernorm.weight"))
        h[k]["dtype"], h[k]["shape"] = "F32", [h[k]["shape"][0] // 2]
        state["k"] = k
    name = edit_header(d, fn)
    return [name, state["k"], "requires BF16"]


def shape_mismatch(d):
    state = {}

    def fn(h):
        k = next(k for k, v in h.items() if k.endswith("post_attention_layernorm.weight"))
        n = h[k]["shape"][0]
        h[k]["shape"] = [2, n // 2]
        state["k"] = k
    name = edit_header(d, fn)
    return [name, state["k"], "requires"]


def missing_tensor(d):
    drop_index(d)
    state = {}

    def fn(h):
        k = next(k for k in h if k.endswith("post_attention_layernorm.weight"))
        h[k.replace("post_attention_layernorm", "post_attention_layernorX")] = h.pop(k)
        state["k"] = k
    edit_header(d, fn)
    return [state["k"], "missing"]


def unexpected_tensor(d):
    drop_index(d)

    def fn(h):
        end = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
        h["language_model.model.layers.0.surprise.weight"] = {"dtype": "BF16", "shape": [0], "data_offsets": [end, end]}
    name = edit_header(d, fn)
    return [name, "surprise", "unexpected tensor"]


def non_contiguous_expert(d):
    state = {}

    def fn(h):
        a = next(k for k in h if ".experts.0.w1.weight_packed" in k)
        b = a.replace(".experts.0.", ".experts.1.")
        h[a]["data_offsets"], h[b]["data_offsets"] = h[b]["data_offsets"], h[a]["data_offsets"]
        state["a"] = a
    which = next(i for i, s in enumerate(shards(d)) if ".experts.0.w1" in open(os.path.join(d, s), "rb").read(1 << 20).decode("latin1"))
    name = edit_header(d, fn, which)
    return [name, "not contiguous"]


def malformed_config(d):
    with open(os.path.join(d, "config.json"), "a") as f:
        f.write("{{")
    return ["config.json", "invalid JSON"]


def layer_lists_overlap(d):
    def fn(c):
        lac = c["text_config"]["linear_attn_config"]
        lac["kda_layers"].append(lac["full_attn_layers"][0])
    edit_config(d, fn)
    return ["config.json", "listed twice"]


def layer_lists_incomplete(d):
    def fn(c):
        c["text_config"]["linear_attn_config"]["full_attn_layers"].pop()
    edit_config(d, fn)
    return ["config.json", "in neither list"]


def config_wrong_type(d):
    def fn(c):
        c["text_config"]["hidden_size"] = "64"
    edit_config(d, fn)
    return ["config.json", "text_config.hidden_size", "integer"]


def config_shape_disagrees(d):
    def fn(c):
        c["text_config"]["hidden_size"] *= 2
    edit_config(d, fn)
    return ["embed_tokens", "requires"]


def index_wrong_shard(d):
    p = os.path.join(d, "model.safetensors.index.json")
    idx = json.load(open(p))
    names = shards(d)
    k = next(k for k, v in idx["weight_map"].items() if v == names[0])
    idx["weight_map"][k] = names[1]
    json.dump(idx, open(p, "w"))
    return ["model.safetensors.index.json", k]


def missing_shard(d):
    drop_index(d)
    name = shards(d)[1]
    os.remove(os.path.join(d, name))
    return ["shard set is incomplete"]


def index_empty_weight_map(d):
    p = os.path.join(d, "model.safetensors.index.json")
    idx = json.load(open(p))
    idx["weight_map"] = {}
    json.dump(idx, open(p, "w"))
    return ["model.safetensors.index.json", "weight_map is empty"]


def tokenizer_crlf(d):
    # a tokenizer file saved with Windows line ends: the message quotes the line with its
    # carriage return escaped (a raw one would be a second line or overwrite the message)
    p = os.path.join(d, "tiktoken.model")
    text = open(p, "rb").read()
    open(p, "wb").write(text.replace(b"\n", b"\r\n"))
    return ["tiktoken.model:1", "rank '0\\r'"]


def tokenizer_corrupt(d):
    # one token's base64 damaged in place (same size): inspect reads the tokenizer too
    p = os.path.join(d, "tiktoken.model")
    lines = open(p, "rb").read().split(b"\n")
    lines[300] = b"!" + lines[300][1:]
    open(p, "wb").write(b"\n".join(lines))
    return ["tiktoken.model:301", "base64"]


def tokenizer_last_token_missing(d):
    p = os.path.join(d, "tiktoken.model")
    lines = open(p, "rb").read().rstrip(b"\n").split(b"\n")
    open(p, "wb").write(b"\n".join(lines[:-1]) + b"\n")
    return ["tokenizer_config.json", "outside the special range"]


CASES = [truncated_shard, header_past_eof, header_not_json, overlapping_tensors, unsupported_dtype, wrong_dtype,
         shape_mismatch, missing_tensor, unexpected_tensor, non_contiguous_expert, malformed_config,
         layer_lists_overlap, layer_lists_incomplete, config_wrong_type, config_shape_disagrees,
         index_wrong_shard, missing_shard, index_empty_weight_map, tokenizer_crlf, tokenizer_corrupt,
         tokenizer_last_token_missing]


def check(case, src, scratch, binaries):
    d = os.path.join(scratch, case.__name__)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    want = case(d)
    problems = []
    for df in binaries:
        r = subprocess.run([df, "inspect", d], capture_output=True, text=True, timeout=120)
        err = r.stderr.strip()
        if r.returncode != 1:
            problems.append(f"{df}: exit {r.returncode} (want 1): {err[-400:]}")
        elif len(err.splitlines()) != 1 or "\r" in err:
            problems.append(f"{df}: message is not one line: {err[-400:]}")
        elif any(w not in err for w in want):
            problems.append(f"{df}: message lacks {want}: {err}")
    shutil.rmtree(d, ignore_errors=True)
    return problems


def main():
    src, scratch, binaries = sys.argv[1], sys.argv[2], sys.argv[3:]
    failed = 0
    for case in CASES:
        problems = check(case, src, scratch, binaries)
        print(("FAIL " if problems else "ok   ") + case.__name__)
        for p in problems:
            print("     " + p)
        failed += bool(problems)
    print(f"{len(CASES) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
