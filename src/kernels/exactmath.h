/* exactmath.h - e^x, tanh, the logistic sigmoid and SiTU from IEEE basic operations in one fixed
 * order, so that the CPU and the GPU compute the same bits.
 *
 * Why. The C library's tanhf/expf and CUDA's differ in the last bit for some inputs. The GPU layer
 * pass computes a layer's routed experts on the GPU or, for the experts its cache misses, on the
 * CPU threads, in a split that follows measured times (docs/ARCHITECTURE.md, "The expert cache in
 * device memory"): with a different SiTU on each side, which expert ran where would show in the
 * logits, and two runs of the same tokens could differ. With this one, an expert gives the same
 * bits wherever it runs (the products already do: device.h).
 *
 * How. Everything is computed in double and rounded to float once, at the end: each function is
 * a handful of additions, multiplications and divisions (correctly rounded on both sides, no fused
 * multiply-add: the project builds with -ffp-contract=off and nvcc --fmad=false), floor, and the
 * construction of 2^k from its bits. e^x reduces x to k ln 2 + r with |r| <= ln 2 / 2 (ln 2 split in
 * two parts so that k ln 2 is exact) and sums the Taylor series of e^r to r^13 (truncation below
 * 2^-60 relative); tanh(y) is y - y^3/3 + ... to y^13 below |y| = 1/16 and (e^2|y| - 1) / (e^2|y| + 1)
 * above, +-1 above 20; sigmoid(x) = 1 / (1 + e^-x). Relative errors stay below 2e-15 (e^x below
 * 4e-16; tanh's worst just above 1/16, where e^2|y| - 1 loses three bits), 2^-49: far below a
 * float's half-ulp, so a float result is the correctly rounded one unless the exact value lies
 * within about 2^-25 ulp of a rounding boundary. NaN in gives NaN out; +-inf gives the limits. */
#ifndef DF_EXACTMATH_H
#define DF_EXACTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define EXACT_FN static inline __host__ __device__
#else
#define EXACT_FN static inline
#endif

/* 2^k for -1022 <= k <= 1023, from its exponent bits. */
EXACT_FN double exact_pow2(int k) {
    const uint64_t bits = (uint64_t)(k + 1023) << 52;
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

EXACT_FN double exact_exp(double x) {
    if (x != x) return x;
    if (x > 709.0) return exact_pow2(1023) * 2.0; /* +inf */
    if (x < -708.0) return 0.0;                   /* below e^-708 (and every float) */
    const double LOG2E = 1.4426950408889634, LN2_HI = 6.93147180369123816490e-01, LN2_LO = 1.90821492927058770002e-10;
    const double k = floor(x * LOG2E + 0.5);
    const double r = (x - k * LN2_HI) - k * LN2_LO;
    double p = 1.6059043836821613e-10; /* 1/13! */
    p = p * r + 2.08767569878681e-09;
    p = p * r + 2.505210838544172e-08;
    p = p * r + 2.755731922398589e-07;
    p = p * r + 2.7557319223985893e-06;
    p = p * r + 2.48015873015873e-05;
    p = p * r + 0.0001984126984126984;
    p = p * r + 0.001388888888888889;
    p = p * r + 0.008333333333333333;
    p = p * r + 0.041666666666666664;
    p = p * r + 0.16666666666666666;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    return p * exact_pow2((int)k);
}

EXACT_FN double exact_tanh(double y) {
    if (y != y || y == 0) return y; /* NaN; and either zero keeps its sign */
    const double a = y < 0 ? -y : y;
    double t;
    if (a > 20.0) {
        t = 1.0;
    } else if (a < 0.0625) {
        const double s = a * a;
        double p = 0.003592128036572481; /* 21844/6081075, the y^13 coefficient */
        p = p * s - 0.008863235529902197;
        p = p * s + 0.021869488536155203;
        p = p * s - 0.05396825396825397;
        p = p * s + 0.13333333333333333;
        p = p * s - 0.3333333333333333;
        t = a + a * (s * p);
    } else {
        const double e = exact_exp(2.0 * a);
        t = (e - 1.0) / (e + 1.0);
    }
    return y < 0 ? -t : t;
}

EXACT_FN double exact_sigmoid(double x) {
    if (x != x) return x;
    return 1.0 / (1.0 + exact_exp(-x));
}

/* SiTU (docs/MODEL.md): [beta tanh(a / beta) sigmoid(a)] [beta_lin tanh(b / beta_lin)], rounded
 * once. */
EXACT_FN float exact_situ(float a, float b, float beta, float beta_lin) {
    const double gate = exact_tanh((double)a / beta) * beta * exact_sigmoid(a);
    return (float)(gate * (exact_tanh((double)b / beta_lin) * beta_lin));
}

#endif
