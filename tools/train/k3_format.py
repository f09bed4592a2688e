"""The K3 checkpoint's file encodings in NumPy (docs/MODEL.md sections 2-3): BF16, MXFP4, safetensors.

Shared by the trainer's export and loader (tools/train) and by the test checkpoint writer
(tests/reference/ckpt_writer.py). Decoding for correctness checks is done independently by the
fp64 reference (tests/reference/k3_ref.py) and by the C engine; this module only has to agree with
them, which the tests check.

  bf16_round(a)          float32 values rounded to BF16 (nearest, ties to even), as float32
  bf16_bytes(a)          the same as little-endian BF16 bytes
  bf16_decode(raw)       BF16 bytes -> float32 (exact: bits << 16)
  mxfp4_pack(codes)      4-bit codes U8[R, C] -> weight_packed U8[R, C/2]; low nibble = even column
  mxfp4_decode(p, s)     weight_packed + weight_scale (E8M0) -> float32 W[R, C]
(The choice of codes and scales, i.e. the quantisation itself, is in quant.py, in PyTorch, so that
training's fake quantisation and the export are one function.)
  write_shard(path, items)    one safetensors file from [(name, (dtype, shape, bytes))]
  read_safetensors(path)      {name: (dtype, shape, bytes)} of one file, validated
"""
import json
import struct

import numpy as np

# E2M1 magnitudes by 3-bit code; bit 3 of a 4-bit code is the sign
E2M1_MAGNITUDES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)
MX_GROUP = 32
DTYPE_SIZE = {"BF16": 2, "F32": 4, "U8": 1}


def bf16_bits(a):
    """float32 -> BF16 bit patterns (uint16), round to nearest even."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_bytes(a):
    """float -> BF16 little-endian bytes, round to nearest even."""
    return bf16_bits(a).astype("<u2").tobytes()


def bf16_decode(raw, shape=None):
    bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << np.uint32(16)
    out = bits.view(np.float32)
    return out.reshape(shape) if shape is not None else out


def bf16_round(a):
    """The float32 values a BF16 tensor holds after rounding a."""
    return (bf16_bits(a).astype(np.uint32) << np.uint32(16)).view(np.float32).reshape(np.shape(a))


def mxfp4_pack(codes):
    """4-bit codes U8[R, C] (bit 3 = sign) -> weight_packed U8[R, C/2]: low nibble = even column."""
    codes = np.asarray(codes, dtype=np.uint8)
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)


def mxfp4_decode(packed, scale):
    """float32 W[R, C] from packed U8[R, C/2] and scale U8[R, C/32] (scale bytes 1..254)."""
    rows, half = packed.shape
    codes = np.empty((rows, 2 * half), dtype=np.uint8)
    codes[:, 0::2] = packed & 0x0F
    codes[:, 1::2] = packed >> 4
    vals = E2M1_MAGNITUDES[codes & 7] * np.where(codes & 8, -1.0, 1.0).astype(np.float32)
    sc = (scale.astype(np.uint32) << np.uint32(23)).view(np.float32)   # 2^(s-127)
    return (vals.reshape(rows, -1, MX_GROUP) * sc[:, :, None]).reshape(rows, 2 * half)


def write_shard(path, items):
    """One safetensors file: u64 LE header length, JSON header (padded to 8 bytes), data."""
    header, data, off = {}, [], 0
    for name, (dtype, shape, raw) in items:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        data.append(raw)
        off += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(data))


def shard_size(entries):
    """Bytes write_shard writes for tensors [(name, dtype, shape, nbytes)], in that order."""
    header, off = {}, 0
    for name, dtype, shape, nbytes in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + nbytes]}
        off += nbytes
    n = len(json.dumps(header, separators=(",", ":")).encode())
    return 8 + n + (-n % 8) + off


def read_safetensors(path):
    """{name: (dtype, shape, bytes)} of one safetensors file; ValueError naming the file on any
    malformed header, unknown dtype or out-of-range offsets."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (hlen,) = struct.unpack("<Q", blob[:8])
    if hlen > len(blob) - 8:
        raise ValueError(f"{path}: header length {hlen} runs past the end of the file")
    try:
        header = json.loads(blob[8:8 + hlen])
    except ValueError as e:
        raise ValueError(f"{path}: header is not JSON ({e})") from None
    data = memoryview(blob)[8 + hlen:]
    out = {}
    for name, rec in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (b, e) = rec["dtype"], rec["shape"], rec["data_offsets"]
        if dtype not in DTYPE_SIZE:
            raise ValueError(f"{path}: tensor {name}: dtype {dtype} is not BF16, F32 or U8")
        n = int(np.prod(shape, dtype=np.int64)) * DTYPE_SIZE[dtype]
        if not 0 <= b <= e <= len(data) or e - b != n:
            raise ValueError(f"{path}: tensor {name}: data_offsets [{b}, {e}] do not hold {n} bytes")
        out[name] = (dtype, tuple(shape), bytes(data[b:e]))
    return out


def decode_tensor(dtype, shape, raw):
    """A BF16/F32 tensor as float32, a U8 tensor as uint8."""
    if dtype == "BF16":
        return bf16_decode(raw, shape).copy()
    if dtype == "F32":
        return np.frombuffer(raw, "<f4").reshape(shape).copy()
    return np.frombuffer(raw, np.uint8).reshape(shape).copy()
