#include "format/numfmt.h"

#include <math.h>

const float mxfp4_e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                              -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

float mxfp4_scale(uint8_t s) {
    if (s == 255) return NAN;
    return ldexpf(1.0f, (int)s - 127);
}

void mxfp4_decode_row(float *out, const uint8_t *packed, const uint8_t *scales, int cols) {
    for (int c = 0; c < cols; c++) {
        uint8_t byte = packed[c / 2];
        uint8_t code = (c & 1) ? (uint8_t)(byte >> 4) : (uint8_t)(byte & 0xF);
        out[c] = mxfp4_e2m1[code] * mxfp4_scale(scales[c / 32]);
    }
}

uint8_t mxfp4_nearest_code(float v) {
    /* Magnitudes 0,0.5,1,1.5,2,3,4,6; midpoints decide, ties go to the even code index. */
    static const float mid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    float a = fabsf(v);
    uint8_t m = 0;
    while (m < 7 && (a > mid[m] || (a == mid[m] && (m & 1)))) m++;
    uint8_t sign = (signbit(v) && m != 0) ? 8 : 0;
    return (uint8_t)(sign | m);
}

void mxfp4_encode_row(uint8_t *packed, uint8_t *scales, const float *in, int cols) {
    for (int g = 0; g < cols / 32; g++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(in[32 * g + i]));
        /* Smallest exponent e with amax <= 6 * 2^e, clamped to the E8M0 range 1..254. */
        int e = -127;
        if (amax > 0) {
            int ex;
            frexpf(amax / 6.0f, &ex);
            e = ex;
            while (e > -127 && amax <= 6.0f * ldexpf(1.0f, e - 1)) e--;
        }
        int s = e + 127;
        s = s < 1 ? 1 : s > 254 ? 254 : s;
        scales[g] = (uint8_t)s;
        float inv = ldexpf(1.0f, 127 - s);
        for (int i = 0; i < 32; i += 2) {
            uint8_t lo = mxfp4_nearest_code(in[32 * g + i] * inv);
            uint8_t hi = mxfp4_nearest_code(in[32 * g + i + 1] * inv);
            packed[(32 * g + i) / 2] = (uint8_t)(lo | (hi << 4));
        }
    }
}
