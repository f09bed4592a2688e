/* numfmt.h - the checkpoint's number formats, expanded exactly to fp32.
 *
 * BF16: the upper 16 bits of an IEEE fp32; widening is a shift and loses nothing.
 * MXFP4 (OCP microscaling, "mxfp4-pack-quantized"): a row of C values is C/2 bytes of 4-bit E2M1
 * codes (low nibble = even column) and C/32 E8M0 scale bytes, one per 32 consecutive input columns.
 * Value = E2M1[code] * 2^(scale - 127). Every such product is exactly representable in fp32
 * unless it overflows: with scale bytes 253 and 254, codes of magnitude >= 2 become +-inf (the
 * forward pass then refuses the non-finite logits). Scale byte 0 means 2^-127 as in the OCP spec (the products are fp32
 * subnormals, still exact). Scale byte 255 is the OCP NaN: decoding yields NaN, which propagates to
 * the logits, where the forward pass refuses to emit a token from non-finite values. */
#ifndef DF_NUMFMT_H
#define DF_NUMFMT_H

#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round-to-nearest-even fp32 -> bf16 (NaN stays NaN). Used by synth and tests, never by inference. */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* E2M1 code (0..15) -> value. */
extern const float mxfp4_e2m1[16];

/* E8M0 scale byte -> 2^(s-127); 255 -> NaN. */
float mxfp4_scale(uint8_t s);

/* Expand one row of C columns (C a multiple of 32) to fp32. */
void mxfp4_decode_row(float *out, const uint8_t *packed, const uint8_t *scales, int cols);

/* Quantise one row of C fp32 values to MXFP4 (round to nearest E2M1, ties to even code magnitude),
 * choosing per 32-block the smallest scale whose range holds the block's max |x| at 6.0.
 * Values that are already exactly representable round-trip bit-exactly. */
void mxfp4_encode_row(uint8_t *packed, uint8_t *scales, const float *in, int cols);

/* Nearest E2M1 code for v (already divided by the scale). */
uint8_t mxfp4_nearest_code(float v);

#endif
