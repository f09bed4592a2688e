/* MXFP4 and BF16 against hand-computed values. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "format/numfmt.h"

static void e2m1_table_is_the_ocp_table(void) {
    const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int i = 0; i < 16; i++) {
        CHECK(mxfp4_e2m1[i] == want[i]);
        CHECK(!!signbit(mxfp4_e2m1[i]) == (i >= 8));
    }
}

static void scale_bytes_map_to_powers_of_two(void) {
    CHECK(mxfp4_scale(127) == 1.0f);
    CHECK(mxfp4_scale(128) == 2.0f);
    CHECK(mxfp4_scale(120) == 1.0f / 128);
    CHECK(mxfp4_scale(254) == ldexpf(1, 127));
    CHECK(mxfp4_scale(1) == ldexpf(1, -126));
    CHECK(mxfp4_scale(0) == ldexpf(1, -127)); /* subnormal, not zero */
    CHECK(mxfp4_scale(0) > 0);
    CHECK(isnan(mxfp4_scale(255)));
}

static void low_nibble_is_the_even_column(void) {
    uint8_t packed[16] = {0}, scales[1] = {127};
    packed[0] = 0x72; /* col 0: code 2 = +1.0, col 1: code 7 = +6.0 */
    packed[1] = 0xF9; /* col 2: code 9 = -0.5, col 3: code 15 = -6.0 */
    float out[32];
    mxfp4_decode_row(out, packed, scales, 32);
    CHECK(out[0] == 1.0f && out[1] == 6.0f && out[2] == -0.5f && out[3] == -6.0f);
    for (int i = 4; i < 32; i++) CHECK(out[i] == 0.0f);
}

static void one_scale_per_32_input_columns(void) {
    uint8_t packed[32], scales[2] = {126, 130}; /* 0.5 and 8 */
    memset(packed, 0x22, sizeof packed);        /* every code = +1.0 */
    float out[64];
    mxfp4_decode_row(out, packed, scales, 64);
    for (int i = 0; i < 32; i++) CHECK(out[i] == 0.5f);
    for (int i = 32; i < 64; i++) CHECK(out[i] == 8.0f);
}

static void subnormal_scale_products_are_exact(void) {
    uint8_t packed[16], scales[1] = {0};
    memset(packed, 0x71, sizeof packed); /* 0.5 and 6.0 */
    float out[32];
    mxfp4_decode_row(out, packed, scales, 32);
    CHECK(out[0] == ldexpf(1, -128));
    CHECK(out[1] == 6.0f * ldexpf(1, -127));
}

static void encode_round_trips_representable_values(void) {
    float in[64];
    for (int i = 0; i < 64; i++) in[i] = mxfp4_e2m1[i % 16] * (i < 32 ? 0.25f : 64.0f);
    uint8_t packed[32], scales[2];
    mxfp4_encode_row(packed, scales, in, 64);
    float out[64];
    mxfp4_decode_row(out, packed, scales, 64);
    for (int i = 0; i < 64; i++) CHECK_MSG(out[i] == in[i], "col %d: %g vs %g", i, out[i], in[i]);
    CHECK(scales[0] == 125 && scales[1] == 133);
}

static void encode_rounds_to_nearest_ties_to_even(void) {
    CHECK(mxfp4_nearest_code(0.24f) == 0);
    CHECK(mxfp4_nearest_code(0.25f) == 0);  /* tie 0 / 0.5 -> even code 0 */
    CHECK(mxfp4_nearest_code(0.75f) == 2);  /* tie 0.5 / 1.0 -> code 2 */
    CHECK(mxfp4_nearest_code(1.25f) == 2);  /* tie 1.0 / 1.5 -> code 2 */
    CHECK(mxfp4_nearest_code(2.5f) == 4);   /* tie 2 / 3 -> code 4 */
    CHECK(mxfp4_nearest_code(5.0f) == 6);   /* tie 4 / 6 -> code 6 */
    CHECK(mxfp4_nearest_code(100.0f) == 7); /* saturates at 6 */
    CHECK(mxfp4_nearest_code(-3.2f) == 13);
    CHECK(mxfp4_nearest_code(-0.1f) == 0);  /* negative zero is stored as +0 */
}

static void bf16_widening_is_exact(void) {
    CHECK(bf16_to_f32(0x3f80) == 1.0f);
    CHECK(bf16_to_f32(0xc040) == -3.0f);
    CHECK(bf16_to_f32(0x0001) == ldexpf(1, -133)); /* smallest bf16 subnormal */
    CHECK(isinf(bf16_to_f32(0x7f80)));
    for (uint32_t b = 0; b < 65536; b++) {
        float f = bf16_to_f32((uint16_t)b);
        if (!isnan(f)) CHECK(f32_to_bf16(f) == b);
    }
    CHECK(f32_to_bf16(1.00390625f) == 0x3f80); /* tie rounds to even */
    CHECK(f32_to_bf16(1.01171875f) == 0x3f82);
}

int main(void) {
    RUN(e2m1_table_is_the_ocp_table);
    RUN(scale_bytes_map_to_powers_of_two);
    RUN(low_nibble_is_the_even_column);
    RUN(one_scale_per_32_input_columns);
    RUN(subnormal_scale_products_are_exact);
    RUN(encode_round_trips_representable_values);
    RUN(encode_rounds_to_nearest_ties_to_even);
    RUN(bf16_widening_is_exact);
    return check_summary();
}
