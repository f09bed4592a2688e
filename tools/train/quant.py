"""Rounding to the checkpoint's storage formats, in PyTorch: BF16 for the spine, MXFP4 for the
routed experts (docs/MODEL.md 2.4, 3.3). Training's fake quantisation and the export use the same functions,
so the model trained in the last phase is exactly the model written to disk.

MXFP4 here: per row and group of 32 input columns, the E8M0 scale 2^e is the smallest power of two
(e in -126..127) with max|w| <= 6 * 2^e, so nothing is clipped; each weight is rounded to the nearest
E2M1 value {0, 0.5, 1, 1.5, 2, 3, 4, 6} times the scale, a tie going to the even code."""
import torch

MX_GROUP = 32
_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)   # between code j and j + 1


def bf16_round(t):
    """t rounded to BF16 (nearest, ties to even) and widened back to t's dtype."""
    return t.to(torch.bfloat16).to(t.dtype)


def _scale_exponents(amax):
    """Smallest e with amax <= 6 * 2^e, clamped to -126..127 (a zero group gets -126).
    With amax = m * 2^x, m in [0.5, 1): 6 * 2^(x-3) = 0.75 * 2^x, so e = x - 3 when m <= 0.75,
    else x - 2. Exact: no division, no logarithm."""
    m, x = torch.frexp(amax.float())
    e = torch.where(m <= 0.75, x - 3, x - 2)
    return torch.where(amax > 0, e, torch.full_like(e, -126)).clamp(-126, 127)


def _pow2(e):
    """2^e as float32 for integer e in -126..127, built from the exponent bits."""
    return ((e.to(torch.int32) + 127) << 23).view(torch.float32)


def mxfp4_quantize(w):
    """w [..., C] (C a multiple of 32) -> (codes uint8 [..., C], 0..15, bit 3 = sign;
    exponents int32 [..., C/32]). Works on any device."""
    shape = w.shape
    if shape[-1] % MX_GROUP:
        raise ValueError(f"MXFP4: {shape[-1]} columns is not a multiple of {MX_GROUP}")
    g = w.detach().float().reshape(*shape[:-1], shape[-1] // MX_GROUP, MX_GROUP)
    e = _scale_exponents(g.abs().amax(-1))
    y = g / _pow2(e).unsqueeze(-1)                      # exact: divides by a power of two
    m = y.abs()
    code = torch.zeros_like(m, dtype=torch.uint8)
    for j, t in enumerate(_MIDPOINTS):
        above = m > t
        if j % 2:                                        # a tie rounds up to the even code j + 1
            above = above | (m == t)
        code += above.to(torch.uint8)
    code = code | ((y < 0) & (code > 0)).to(torch.uint8) * 8
    return code.reshape(shape), e


def mxfp4_dequantize(codes, e):
    """float32 weights from 4-bit codes [..., C] and exponents [..., C/32]."""
    mags = torch.tensor(_MAGNITUDES, dtype=torch.float32, device=codes.device)
    v = mags[(codes & 7).long()] * torch.where((codes & 8) > 0, -1.0, 1.0)
    shape = codes.shape
    v = v.reshape(*shape[:-1], shape[-1] // MX_GROUP, MX_GROUP) * _pow2(e).unsqueeze(-1)
    return v.reshape(shape)


def mxfp4_round(w):
    """w rounded to MXFP4 (values as float32, w's shape)."""
    return mxfp4_dequantize(*mxfp4_quantize(w)).to(w.dtype)


def fake_mxfp4(w):
    """Quantisation-aware training: the forward sees MXFP4-rounded weights, the gradient passes
    straight through to the full-precision weights."""
    return w + (mxfp4_round(w) - w).detach()
