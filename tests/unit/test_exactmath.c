/* kernels/exactmath.h against the C library's long double functions (64-bit significands on
 * x86-64, 11 more bits than the doubles): e^x to 4e-16 relative, tanh and the sigmoid to 2e-15
 * over their whole range, SiTU's float result the correctly rounded one (to within
 * a count of inputs that sit on a rounding boundary), and the edges (zeros, subnormals, infinities,
 * NaN, the clamps). That the GPU computes the same bits is device_check's to show
 * (tests/cuda/device_check.sh, split_repeats). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "kernels/exactmath.h"

/* |got - want| / |want| (absolute below 1e-300). */
static double rel_err(double got, long double want) {
    long double d = fabsl((long double)got - want), w = fabsl(want);
    return (double)(w > 1e-300L ? d / w : d);
}

/* A deterministic sweep: n points spread over [lo, hi], plus a small odd offset so that they do
 * not land on round numbers only. */
static double sweep(double lo, double hi, int i, int n) { return lo + (hi - lo) * ((double)i + 0.318) / n; }

static void exp_is_accurate_over_its_range(void) {
    double worst = 0, at = 0;
    for (int i = 0; i < 400000; i++) {
        const double x = sweep(-707.9, 708.9, i, 400000);
        const double e = rel_err(exact_exp(x), expl((long double)x));
        if (e > worst) worst = e, at = x;
    }
    for (int i = 0; i < 200000; i++) { /* where the reduction's k is small and r spans its interval */
        const double x = sweep(-3, 3, i, 200000);
        const double e = rel_err(exact_exp(x), expl((long double)x));
        if (e > worst) worst = e, at = x;
    }
    CHECK_MSG(worst < 4e-16, "exact_exp: worst relative error %.3g at x = %.17g", worst, at);
    CHECK(exact_exp(0.0) == 1.0);
    CHECK(isinf(exact_exp(709.5)) && exact_exp(709.5) > 0 && isinf(exact_exp(INFINITY)));
    CHECK(exact_exp(-708.5) == 0.0 && exact_exp(-INFINITY) == 0.0);
    CHECK(isnan(exact_exp(NAN)));
}

static void tanh_is_accurate_on_both_sides_of_its_series(void) {
    double worst = 0, at = 0;
    const double ranges[][2] = {{-25, 25}, {-0.07, 0.07}, {1e-9, 1e-3}};
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 200000; i++) {
            const double y = sweep(ranges[r][0], ranges[r][1], i, 200000);
            const double e = rel_err(exact_tanh(y), tanhl((long double)y));
            if (e > worst) worst = e, at = y;
        }
    CHECK_MSG(worst < 2e-15, "exact_tanh: worst relative error %.3g at y = %.17g", worst, at);
    CHECK(exact_tanh(0.0) == 0.0 && signbit(exact_tanh(-0.0)));
    CHECK(exact_tanh(5e-324) == 5e-324); /* subnormal: tanh(y) = y */
    CHECK(exact_tanh(INFINITY) == 1.0 && exact_tanh(-INFINITY) == -1.0 && exact_tanh(21.0) == 1.0);
    CHECK(exact_tanh(-0.0625) == -exact_tanh(0.0625) && exact_tanh(-3.5) == -exact_tanh(3.5));
    CHECK(isnan(exact_tanh(NAN)));
}

static void sigmoid_is_accurate_and_saturates(void) {
    double worst = 0, at = 0;
    for (int i = 0; i < 400000; i++) {
        const double x = sweep(-700, 40, i, 400000);
        const double e = rel_err(exact_sigmoid(x), 1.0L / (1.0L + expl(-(long double)x)));
        if (e > worst) worst = e, at = x;
    }
    CHECK_MSG(worst < 2e-15, "exact_sigmoid: worst relative error %.3g at x = %.17g", worst, at);
    CHECK(exact_sigmoid(0.0) == 0.5);
    CHECK(exact_sigmoid(INFINITY) == 1.0 && exact_sigmoid(-INFINITY) == 0.0 && exact_sigmoid(-800.0) == 0.0);
    CHECK(isnan(exact_sigmoid(NAN)));
}

/* SiTU in long double, rounded to float. */
static float situ_ref(float a, float b, float beta, float beta_lin) {
    long double gate = tanhl((long double)a / beta) * beta / (1.0L + expl(-(long double)a));
    return (float)(gate * (tanhl((long double)b / beta_lin) * beta_lin));
}

static void situ_is_the_correctly_rounded_float(void) {
    long n = 0, off_by_one = 0, wrong = 0;
    uint32_t s = 12345u;
    for (int i = 0; i < 1000000; i++) {
        s = s * 1664525u + 1013904223u; /* a, b spread over several scales, signs, and the soft caps */
        const float a = (float)(((int)(s >> 8) % 20001 - 10000) / 100.0) * (i % 3 ? 1.0f : 0.01f);
        s = s * 1664525u + 1013904223u;
        const float b = (float)(((int)(s >> 8) % 20001 - 10000) / 50.0) * (i % 5 ? 1.0f : 0.001f);
        const float got = exact_situ(a, b, 4.0f, 25.0f), want = situ_ref(a, b, 4.0f, 25.0f);
        n++;
        if (got == want) continue;
        if (nextafterf(want, got) == got) off_by_one++; /* an input on a rounding boundary */
        else wrong++;
    }
    CHECK_MSG(wrong == 0, "exact_situ: %ld of %ld results more than one float ulp off", wrong, n);
    CHECK_MSG(off_by_one <= n / 100000, "exact_situ: %ld of %ld results one ulp off the correctly rounded", off_by_one, n);
    CHECK(exact_situ(0.0f, 3.0f, 4.0f, 25.0f) == 0.0f && exact_situ(2.0f, 0.0f, 4.0f, 25.0f) == 0.0f);
    CHECK(exact_situ(INFINITY, INFINITY, 4.0f, 25.0f) == 100.0f); /* the caps: 4 x 25 */
    CHECK(isnan(exact_situ(NAN, 1.0f, 4.0f, 25.0f)) && isnan(exact_situ(1.0f, NAN, 4.0f, 25.0f)));
    CHECK(exact_situ(-INFINITY, 1.0f, 4.0f, 25.0f) == 0.0f); /* -4 x sigmoid(-inf) = -0 */
}

int main(void) {
    RUN(exp_is_accurate_over_its_range);
    RUN(tanh_is_accurate_on_both_sides_of_its_series);
    RUN(sigmoid_is_accurate_and_saturates);
    RUN(situ_is_the_correctly_rounded_float);
    return check_summary();
}
