/* The model's small operations against values derived by hand from docs/MODEL.md 4.0-4.6. */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "model/internal.h"
#include "kernels/vecops.h"

static void situ_of_zero_gate_is_zero(void) {
    for (float b = -50; b <= 50; b += 7.5f) CHECK(op_situ(0.0f, b, 4.0f, 25.0f) == 0.0f);
}

static void situ_matches_its_definition(void) {
    double a = 1.3, b = -2.2;
    double want = 4.0 * tanh(a / 4.0) / (1 + exp(-a)) * (25.0 * tanh(b / 25.0));
    CHECK_NEAR(op_situ((float)a, (float)b, 4.0f, 25.0f), want, 1e-6);
    /* soft caps: the gate factor stays below 4, the up factor below 25 */
    CHECK(op_situ(1000.0f, 1000.0f, 4.0f, 25.0f) <= 100.0f);
    CHECK_NEAR(op_situ(1000.0f, 1000.0f, 4.0f, 25.0f), 100.0, 1e-3);
}

static void attnres_of_one_value_returns_it(void) {
    float v[48], w[48], out[48];
    for (int i = 0; i < 48; i++) v[i] = sinf((float)i) * 3, w[i] = cosf((float)i);
    const float *values[1] = {v};
    op_attnres(out, values, 1, w, 48, 1e-5f);
    for (int i = 0; i < 48; i++) CHECK(out[i] == v[i]);
}

static void attnres_weights_by_normalised_keys(void) {
    /* two values; scores w . rmsnorm(v_i); the values themselves are mixed unnormalised */
    float a[4] = {1, 0, 0, 0}, b[4] = {0, 2, 0, 0}, w[4] = {1, 0.5f, 0, 0}, out[4];
    const float *values[2] = {a, b};
    op_attnres(out, values, 2, w, 4, 0);
    double sa = 1.0 * 2.0, sb = 0.5 * 2.0; /* rmsnorm(a) = (2,0,0,0), rmsnorm(b) = (0,2,0,0) */
    double pa = exp(sa) / (exp(sa) + exp(sb));
    CHECK_NEAR(out[0], pa * 1, 1e-6);
    CHECK_NEAR(out[1], (1 - pa) * 2, 1e-6);
}

static void router_uses_bias_for_selection_only(void) {
    float logits[6] = {2.0f, 1.0f, 0.5f, 3.0f, -1.0f, 0.0f};
    float bias[6] = {0, 0.5f, 0, 0, 0.9f, 0};
    int ids[2];
    float w[2];
    op_route(logits, bias, 6, 2, ids, w);
    /* choice = sigmoid + bias: e4 = 0.269+0.9 = 1.169, e1 = 0.731+0.5 = 1.231, e3 = 0.953 */
    CHECK(ids[0] == 1 && ids[1] == 4);
    double s1 = 1 / (1 + exp(-1.0)), s4 = 1 / (1 + exp(1.0));
    CHECK_NEAR(w[0], s1 / (s1 + s4), 1e-6);
    CHECK_NEAR(w[1], s4 / (s1 + s4), 1e-6);
    CHECK_NEAR(w[0] + w[1], 1.0, 1e-7);
}

static void router_ties_go_to_the_lowest_index(void) {
    float logits[8] = {0.3f, 0.7f, 0.7f, 0.1f, 0.7f, 0.7f, 0.2f, 0.0f}, bias[8] = {0};
    int ids[3];
    float w[3];
    op_route(logits, bias, 8, 3, ids, w);
    CHECK(ids[0] == 1 && ids[1] == 2 && ids[2] == 4);
}

static void kda_gate_stays_inside_its_bounds(void) {
    /* open interval (-5, 0) while the sigmoid is not saturated; never outside [-5, 0] in fp32 */
    for (float z = -6; z <= 6; z += 0.37f) {
        float g = -5.0f * op_sigmoid(2.5f * z);
        CHECK(g > -5.0f && g < 0.0f);
    }
    for (float z = -300; z <= 300; z += 3.7f) {
        float g = -5.0f * op_sigmoid(2.5f * z);
        CHECK(g >= -5.0f && g <= 0.0f && expf(g) >= expf(-5.0f));
    }
}

static void l2norm_has_an_epsilon_floor(void) {
    float x[3] = {3, 4, 0};
    op_l2norm_scaled(x, 3, 2.0f);
    CHECK_NEAR(x[0], 1.2, 1e-7);
    CHECK_NEAR(x[1], 1.6, 1e-7);
    float z[2] = {1e-20f, 0};
    op_l2norm_scaled(z, 2, 1.0f);
    CHECK_NEAR(z[0], 1e-8, 1e-12); /* divided by 1e-12, not by its own norm */
}

static void argmax_prefers_the_lowest_index(void) {
    float x[5] = {1, 3, 2, 3, 3};
    CHECK(op_argmax(x, 5) == 1);
}

int main(void) {
    RUN(situ_of_zero_gate_is_zero);
    RUN(situ_matches_its_definition);
    RUN(attnres_of_one_value_returns_it);
    RUN(attnres_weights_by_normalised_keys);
    RUN(router_uses_bias_for_selection_only);
    RUN(router_ties_go_to_the_lowest_index);
    RUN(kda_gate_stays_inside_its_bounds);
    RUN(l2norm_has_an_epsilon_floor);
    RUN(argmax_prefers_the_lowest_index);
    return check_summary();
}
