/* The matrix kernels against an fp64 dequantise-then-multiply reference, and the bit-identities
 * the engine relies on: any thread count, batched rows vs one row at a time, every SIMD path vs
 * the portable one, and every format vs the F32 kernel on its dequantised weights. Every test runs
 * each implementation this CPU supports. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "format/numfmt.h"
#include "kernels/kernels_impl.h"
#include "kernels/mat.h"
#include "util/err.h"
#include "util/rng.h"

typedef enum { FMT_F32, FMT_BF16, FMT_MXFP4, FMT_I8ROW, N_FMT } Fmt;
static const char *const fmt_name[] = {"f32", "bf16", "mxfp4", "i8row"};

/* One random matrix and input, with its exact fp32 dequantisation. Buffers are offset by one
 * element from malloc's alignment: the kernels promise to take any pointer. */
typedef struct {
    Fmt fmt;
    int rows, cols, T;
    void *w_alloc, *aux_alloc, *x_alloc;
    const void *W;
    const uint8_t *scales;
    const float *row_scales; /* I8ROW */
    const float *X;
    float *Wf; /* [rows][cols] dequantised */
} Case;

static double uniform(Rng *r) { return (double)(rng_next(r) >> 11) * 0x1p-53 * 2.0 - 1.0; }

static void case_make(Case *k, Fmt fmt, int rows, int cols, int T, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    memset(k, 0, sizeof *k);
    k->fmt = fmt, k->rows = rows, k->cols = cols, k->T = T;
    size_t n = (size_t)rows * (size_t)cols;
    k->Wf = malloc(sizeof(float) * (n ? n : 1));
    if (fmt == FMT_F32) {
        float *w = (float *)(k->w_alloc = malloc(sizeof(float) * (n + 1))) + 1;
        for (size_t i = 0; i < n; i++) w[i] = k->Wf[i] = (float)uniform(&r);
        k->W = w;
    } else if (fmt == FMT_BF16) {
        uint16_t *w = (uint16_t *)(k->w_alloc = malloc(sizeof(uint16_t) * (n + 1))) + 1;
        for (size_t i = 0; i < n; i++) k->Wf[i] = bf16_to_f32(w[i] = f32_to_bf16((float)uniform(&r)));
        k->W = w;
    } else if (fmt == FMT_I8ROW) {
        /* row scales over many binades (the spine's rows differ a lot); q covers -127..127 */
        int8_t *q = (int8_t *)(k->w_alloc = malloc(n + 1)) + 1;
        float *s = (float *)(k->aux_alloc = malloc(sizeof(float) * ((size_t)rows + 1))) + 1;
        for (int i = 0; i < rows; i++) s[i] = (float)((1.0 + uniform(&r)) * ldexp(1.0, (int)(rng_next(&r) % 20) - 16));
        for (size_t i = 0; i < n; i++) {
            q[i] = (int8_t)((int)(rng_next(&r) % 255) - 127);
            k->Wf[i] = (float)q[i] * s[i / (size_t)cols];
        }
        k->W = q, k->row_scales = s;
    } else {
        uint8_t *p = (uint8_t *)(k->w_alloc = malloc(n / 2 + 1)) + 1;
        uint8_t *s = (uint8_t *)(k->aux_alloc = malloc(n / 32 + 1)) + 1;
        for (size_t i = 0; i < n / 2; i++) p[i] = (uint8_t)rng_next(&r);
        for (size_t i = 0; i < n / 32; i++) s[i] = (uint8_t)(120 + rng_next(&r) % 12);
        for (int i = 0; i < rows; i++)
            mxfp4_decode_row(k->Wf + (size_t)i * cols, p + (size_t)i * cols / 2, s + (size_t)i * cols / 32, cols);
        k->W = p, k->scales = s;
    }
    size_t nx = (size_t)T * (size_t)cols;
    float *x = (float *)(k->x_alloc = malloc(sizeof(float) * (nx + 1))) + 1;
    for (size_t i = 0; i < nx; i++) x[i] = (float)uniform(&r);
    k->X = x;
}

static void case_free(Case *k) {
    free(k->w_alloc), free(k->aux_alloc), free(k->x_alloc), free(k->Wf);
}

/* Runs the case's kernel on the first T rows of X (T <= k->T), starting at X row t_first. */
static void run(const Case *k, KernIsa isa, Pool *pool, float *Y, int t_first, int T) {
    const float *X = k->X + (size_t)t_first * k->cols;
    switch (k->fmt) {
    case FMT_F32: kern_matmul_f32_isa(isa, pool, Y, k->W, X, T, k->rows, k->cols); break;
    case FMT_BF16: kern_matmul_bf16_isa(isa, pool, Y, k->W, X, T, k->rows, k->cols); break;
    case FMT_MXFP4: kern_matmul_mxfp4_isa(isa, pool, Y, k->W, k->scales, X, T, k->rows, k->cols); break;
    case FMT_I8ROW: kern_matmul_i8row_isa(isa, pool, Y, k->W, k->row_scales, X, T, k->rows, k->cols); break;
    case N_FMT: break;
    }
}

static float *run_new(const Case *k, KernIsa isa, Pool *pool) {
    float *Y = malloc(sizeof(float) * ((size_t)k->T * k->rows + 1));
    run(k, isa, pool, Y, 0, k->T);
    return Y;
}

/* Worst-case error of a 16-lane fused reduction: ceil(cols/16) roundings per lane, 4 in the tree,
 * each at most u = 2^-24 relative, plus half an ulp of the smallest subnormal per operation. */
static double error_bound(int cols, double abs_sum) {
    double m = (cols + 15) / 16 + 4, u = 0x1p-24;
    return m * u / (1 - m * u) * abs_sum + (16 * m) * 0x1p-149;
}

/* Every output against sum_c (double)Wf * (double)X; returns the number of violations. */
static int check_reference(const Case *k, const float *Y) {
    int bad = 0;
    for (int t = 0; t < k->T; t++)
        for (int r = 0; r < k->rows; r++) {
            double ref = 0, abs_sum = 0;
            for (int c = 0; c < k->cols; c++) {
                double p = (double)k->Wf[(size_t)r * k->cols + c] * (double)k->X[(size_t)t * k->cols + c];
                ref += p, abs_sum += fabs(p);
            }
            double y = Y[(size_t)t * k->rows + r], tol = error_bound(k->cols, abs_sum);
            if (!(fabs(y - ref) <= tol) && bad++ < 3)
                fprintf(stderr, "  %s %dx%d T=%d: Y[%d][%d] = %.9g, reference %.9g (tol %.3g)\n", fmt_name[k->fmt],
                        k->rows, k->cols, k->T, t, r, y, ref, tol);
        }
    return bad;
}

/* The implementations this CPU runs, portable first. */
static KernIsa isas[KERN_N_ISA];
static int n_isa;
static int n_isas(void) { return n_isa; }
static KernIsa isa_at(int i) { return isas[i]; }

static const int odd_cols[] = {1, 5, 15, 16, 17, 31, 33, 100, 255, 301};
static const int mx_cols[] = {32, 64, 96, 160, 544};
static const int odd_rows[] = {1, 3, 17, 70};

static void each_format_matches_fp64_reference_at_odd_shapes(void) {
    for (int f = 0; f < N_FMT; f++) {
        const int *cols = f == FMT_MXFP4 ? mx_cols : odd_cols;
        int n_cols = f == FMT_MXFP4 ? 5 : 10;
        for (int ci = 0; ci < n_cols; ci++)
            for (int ri = 0; ri < 4; ri++) {
                Case k;
                case_make(&k, (Fmt)f, odd_rows[ri], cols[ci], 1 + (ci + ri) % 9, 100 * f + 10 * ci + ri);
                for (int i = 0; i < n_isas(); i++) {
                    float *Y = run_new(&k, isa_at(i), NULL);
                    CHECK_MSG(check_reference(&k, Y) == 0, "%s isa %d rows %d cols %d", fmt_name[f], i, k.rows, k.cols);
                    free(Y);
                }
                case_free(&k);
            }
    }
}

/* Prefill (T rows at once) must equal decode (one row at a time) bit for bit, for every T. */
static void batched_rows_equal_one_row_at_a_time(void) {
    for (int f = 0; f < N_FMT; f++)
        for (int T = 1; T <= 9; T++) {
            Case k;
            case_make(&k, (Fmt)f, 23, f == FMT_MXFP4 ? 96 : 83, T, 1000 + 10 * f + T);
            for (int i = 0; i < n_isas(); i++) {
                float *Y = run_new(&k, isa_at(i), NULL), one[23];
                CHECK(check_reference(&k, Y) == 0);
                for (int t = 0; t < T; t++) {
                    run(&k, isa_at(i), NULL, one, t, 1);
                    CHECK_MSG(!memcmp(one, Y + (size_t)t * k.rows, sizeof one), "%s T=%d row %d isa %d", fmt_name[f],
                              T, t, i);
                }
                free(Y);
            }
            case_free(&k);
        }
}

/* Many rows (a prefill window: each chunk of weights expanded to fp32 once, then the F32 kernel over
 * it, kern_tile.c) equal one row at a time too, for every format, on one thread and on several. */
static void many_rows_equal_one_row_at_a_time(void) {
    Pool *pool = pool_create(3);
    const int Ts[] = {16, 17, 40};
    for (int f = 0; f < N_FMT; f++)
        for (int ti = 0; ti < 3; ti++) {
            const int T = Ts[ti], rows = 131;
            Case k;
            case_make(&k, (Fmt)f, rows, f == FMT_MXFP4 ? 544 : 531, T, 3000 + 10 * f + T);
            for (int i = 0; i < n_isas(); i++)
                for (int threads = 0; threads < 2; threads++) {
                    float *Y = run_new(&k, isa_at(i), threads ? pool : NULL), *one = malloc(sizeof(float) * (size_t)rows);
                    CHECK(check_reference(&k, Y) == 0);
                    for (int t = 0; t < T; t++) {
                        run(&k, isa_at(i), NULL, one, t, 1);
                        CHECK_MSG(!memcmp(one, Y + (size_t)t * rows, sizeof(float) * (size_t)rows), "%s T=%d row %d isa %d threads %d",
                                  fmt_name[f], T, t, i, pool_threads(threads ? pool : NULL));
                    }
                    free(Y), free(one);
                }
            case_free(&k);
        }
    pool_destroy(pool);
}

/* Sizes large enough that the kernels do split the rows over the pool. */
static void results_do_not_depend_on_thread_count(void) {
    Pool *pools[4] = {NULL, pool_create(1), pool_create(2), pool_create(3)};
    for (int f = 0; f < N_FMT; f++)
        for (int T = 1; T <= 5; T += 4) {
            Case k;
            case_make(&k, (Fmt)f, 515, 544, T, 2000 + 10 * f + T);
            size_t bytes = sizeof(float) * (size_t)T * k.rows;
            for (int i = 0; i < n_isas(); i++) {
                float *Y0 = run_new(&k, isa_at(i), NULL);
                CHECK(check_reference(&k, Y0) == 0);
                for (int p = 1; p < 4; p++) {
                    float *Y = run_new(&k, isa_at(i), pools[p]);
                    CHECK_MSG(!memcmp(Y, Y0, bytes), "%s T=%d isa %d threads %d", fmt_name[f], T, i, pool_threads(pools[p]));
                    free(Y);
                }
                free(Y0);
            }
            case_free(&k);
        }
    for (int p = 1; p < 4; p++) pool_destroy(pools[p]);
}

static void simd_and_portable_paths_agree_bitwise(void) {
    for (int i = 0; i < KERN_N_ISA; i++)
        if (kern_isa_built((KernIsa)i) && !kern_isa_available((KernIsa)i))
            printf("     (this CPU cannot run %s: not tested)\n", kern_isa_name((KernIsa)i));
    for (int f = 0; f < N_FMT; f++)
        for (int s = 0; s < 6; s++) {
            Case k;
            int cols = f == FMT_MXFP4 ? 32 * (1 + 3 * s) : 1 + 37 * s;
            case_make(&k, (Fmt)f, 9 + 4 * s, cols, 1 + s, 3000 + 10 * f + s);
            float *Yp = run_new(&k, KERN_PORTABLE, NULL);
            for (int i = 1; i < n_isas(); i++) {
                float *Ys = run_new(&k, isa_at(i), NULL);
                CHECK_MSG(!memcmp(Yp, Ys, sizeof(float) * (size_t)k.T * k.rows), "%s %s %dx%d T=%d",
                          kern_isa_name(isa_at(i)), fmt_name[f], k.rows, k.cols, k.T);
                free(Ys);
            }
            free(Yp);
            case_free(&k);
        }
}

/* BF16, MXFP4 and I8ROW expand exactly and reduce like F32: the same bits as the F32 kernel on Wf. */
static void formats_equal_f32_kernel_on_dequantised_weights(void) {
    for (int f = FMT_BF16; f < N_FMT; f++) {
        Case k;
        case_make(&k, (Fmt)f, 37, f == FMT_MXFP4 ? 352 : 349, 6, 4000 + f);
        for (int i = 0; i < n_isas(); i++) {
            float *Y = run_new(&k, isa_at(i), NULL), *Yf = malloc(sizeof(float) * (size_t)k.T * k.rows);
            kern_matmul_f32_isa(isa_at(i), NULL, Yf, k.Wf, k.X, k.T, k.rows, k.cols);
            CHECK_MSG(!memcmp(Y, Yf, sizeof(float) * (size_t)k.T * k.rows), "%s isa %d", fmt_name[f], i);
            free(Y), free(Yf);
        }
        case_free(&k);
    }
}

static void mxfp4_hand_computed_row(void) {
    uint8_t packed[32] = {0x72, 0xF9}, scales[2] = {127, 128};
    packed[16] = 0x03; /* column 32: +1.5 at scale 2 -> 3.0 */
    float X[64], Y = 0;
    for (int c = 0; c < 64; c++) X[c] = 1.0f;
    for (int i = 0; i < n_isas(); i++) {
        kern_matmul_mxfp4_isa(isa_at(i), NULL, &Y, packed, scales, X, 1, 1, 64);
        CHECK(Y == 1.0f + 6.0f - 0.5f - 6.0f + 3.0f);
    }
}

/* Scale byte 0 is 2^-127 (subnormal weights), 254 is 2^127, 255 is NaN (that row only). The input
 * is scaled so each checked row's products are normal numbers. */
static void mxfp4_edge_scale_bytes(void) {
    enum { R = 4, C = 64 };
    uint8_t packed[R * C / 2], scales[R * C / 32] = {0, 0, 254, 254, 1, 1, 255, 127};
    Rng r;
    rng_seed(&r, 5);
    for (int i = 0; i < R * C / 2; i++) packed[i] = (uint8_t)(rng_next(&r) & 0xBB); /* |code| <= 1.5: 2^127 rows stay finite */
    float X[C], Wf[R * C], Y[R];
    for (int i = 0; i < R; i++) mxfp4_decode_row(Wf + i * C, packed + i * C / 2, scales + i * C / 32, C);
    const struct { float x_scale; int row; } runs[] = {{0x1p60f, 0}, {0x1p60f, 2}, {0x1p-100f, 1}};
    for (int k = 0; k < 3; k++) {
        int row = runs[k].row;
        double ref = 0, abs_sum = 0;
        for (int c = 0; c < C; c++) {
            X[c] = (float)uniform(&r) * runs[k].x_scale;
            ref += (double)Wf[row * C + c] * X[c], abs_sum += fabs((double)Wf[row * C + c] * X[c]);
        }
        for (int i = 0; i < n_isas(); i++) {
            kern_matmul_mxfp4_isa(isa_at(i), NULL, Y, packed, scales, X, 1, R, C);
            CHECK(Y[row] != 0 && isfinite(Y[row]));
            CHECK_MSG(fabs(Y[row] - ref) <= error_bound(C, abs_sum), "row %d: %.9g vs %.9g", row, Y[row], ref);
            CHECK(isnan(Y[3]));
        }
    }
}

static void e8m0_table_is_the_numfmt_scale(void) {
    for (int s = 0; s < 256; s++) {
        float want = mxfp4_scale((uint8_t)s), got = kern_e8m0_table.f[s];
        CHECK_MSG(s == 255 ? isnan(got) : got == want, "scale byte %d: %g vs %g", s, got, want);
    }
}

static void dot_f32_is_the_kernel_order(void) {
    for (int n = 0; n < 70; n += 7) {
        Case k;
        case_make(&k, FMT_F32, 1, n, 1, 5000 + n);
        for (int i = 0; i < n_isas(); i++) {
            float y, d = kern_dot_f32_isa(isa_at(i), k.W, k.X, n);
            kern_matmul_f32_isa(isa_at(i), NULL, &y, k.W, k.X, 1, 1, n);
            CHECK(!memcmp(&y, &d, sizeof y));
            CHECK(check_reference(&k, &d) == 0);
        }
        float d = kern_dot_f32(k.W, k.X, n), y;
        kern_matmul_f32(NULL, &y, k.W, k.X, 1, 1, n);
        CHECK(!memcmp(&y, &d, sizeof y));
        case_free(&k);
    }
}

static void empty_shapes_write_nothing_or_zero(void) {
    float Y[4] = {7, 7, 7, 7}, W[4] = {1, 2, 3, 4}, X[4] = {1, 1, 1, 1};
    kern_matmul_f32(NULL, Y, W, X, 0, 2, 2);
    kern_matmul_f32(NULL, Y, W, X, 2, 0, 2);
    CHECK(Y[0] == 7 && Y[3] == 7);
    kern_matmul_f32(NULL, Y, W, X, 2, 2, 0); /* an empty sum is +0 */
    for (int i = 0; i < 4; i++) CHECK(Y[i] == 0 && !signbit(Y[i]));
}

static Mat case_mat(const Case *k) {
    static const WeightFormat wf[] = {WF_F32, WF_BF16, WF_MXFP4, WF_I8ROW};
    const void *aux = k->fmt == FMT_I8ROW ? (const void *)k->row_scales : (const void *)k->scales;
    return (Mat){wf[k->fmt], k->rows, k->cols, k->W, aux, {0, 0, 0, 0}};
}

/* The latent MLA path's per-head products over blocks of rows: mat_mul_heads gives each head what
 * the whole matrix's product gives on its rows, and mat_tmul_heads is y[i] = sum over the head's
 * rows in order of x[j] * w[j][i] (each product rounded, then added: exactly this loop in fp32),
 * for every format, with inputs spaced x_stride apart and any thread count. */
static void head_products_are_exact(void) {
    const Fmt fmts[] = {FMT_F32, FMT_BF16, FMT_I8ROW, FMT_MXFP4};
    enum { HEADS = 3, T = 2, ROWS = 37 };
    const MatHeads hd = {HEADS, 1, 12, 7, 0}; /* head h: rows 1 + 12h .. 1 + 12h + 6 */
    Pool *pool = pool_create(2);
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
        const int cols = fmts[f] == FMT_MXFP4 ? 320 : 301, xs = cols + 3, ts = hd.n + 2;
        Case k;
        case_make(&k, fmts[f], ROWS, cols, 1, 40 + f);
        Mat W = case_mat(&k);
        float *X = malloc(sizeof(float) * T * HEADS * (size_t)xs), *Y = malloc(sizeof(float) * T * HEADS * hd.n);
        float *Xt = malloc(sizeof(float) * T * HEADS * (size_t)ts), *Yt = malloc(sizeof(float) * T * HEADS * (size_t)cols);
        for (int i = 0; i < T * HEADS * xs; i++) X[i] = sinf(0.37f * (float)i);
        for (int i = 0; i < T * HEADS * ts; i++) Xt[i] = cosf(0.53f * (float)i);
        MatHeads mh = hd, th = hd;
        mh.x_stride = xs, th.x_stride = ts;
        for (int threads = 0; threads < 2; threads++) {
            mat_mul_heads(threads ? pool : NULL, Y, &W, &mh, X, T);
            mat_tmul_heads(threads ? pool : NULL, Yt, &W, &th, Xt, T);
            for (int t = 0; t < T; t++)
                for (int h = 0; h < HEADS; h++) {
                    float full[ROWS];
                    const float *x = X + ((size_t)t * HEADS + h) * xs, *xt = Xt + ((size_t)t * HEADS + h) * ts;
                    mat_mul_cpu(NULL, full, &W, x, 1);
                    int row0 = hd.row0 + h * hd.stride;
                    CHECK_MSG(!memcmp(Y + ((size_t)t * HEADS + h) * hd.n, full + row0, sizeof(float) * hd.n),
                              "format %zu, t %d, head %d", f, t, h);
                    for (int i = 0; i < cols; i++) {
                        float acc = 0;
                        for (int j = 0; j < hd.n; j++) {
                            float prod = xt[j] * k.Wf[(size_t)(row0 + j) * cols + i];
                            acc += prod;
                        }
                        const float got = Yt[((size_t)t * HEADS + h) * cols + i];
                        CHECK_MSG(!memcmp(&got, &acc, sizeof acc), "format %zu, t %d, head %d, column %d", f, t, h, i);
                    }
                }
        }
        /* mat_expand and mat_gather_rows give the dequantised weights */
        float *all = malloc(sizeof(float) * ROWS * (size_t)cols), rows2[2 * 320];
        mat_expand(&W, all);
        CHECK(!memcmp(all, k.Wf, sizeof(float) * ROWS * (size_t)cols));
        int pick[2] = {36, 3};
        mat_gather_rows(&W, pick, 2, rows2);
        CHECK(!memcmp(rows2, k.Wf + 36 * (size_t)cols, sizeof(float) * cols) &&
              !memcmp(rows2 + cols, k.Wf + 3 * (size_t)cols, sizeof(float) * cols));
        free(all), free(X), free(Y), free(Xt), free(Yt);
        case_free(&k);
    }
    pool_destroy(pool);
}

/* kern_select (K3_KERNELS): each implementation the CPU runs is taken, the others are refused
 * saying why (another architecture's, or a feature this CPU lacks), auto takes the widest, and an
 * unknown name is refused naming it. kern_describe lists what the build has. */
static void kern_select_picks_the_path(void) {
    char described[160];
    kern_describe(described, sizeof described);
    for (int i = 0; i < KERN_N_ISA; i++) {
        const char *name = kern_isa_name((KernIsa)i);
        if (kern_isa_available((KernIsa)i))
            CHECK_MSG(kern_select(name) == 0 && !strcmp(kern_isa(), name), "%s: %s", name, kern_isa());
        else
            CHECK_MSG(kern_select(name) == -1 &&
                          strstr(df_errmsg(), kern_isa_built((KernIsa)i) ? "does not support" : "build has no"),
                      "%s: %s", name, df_errmsg());
        CHECK_MSG(!!strstr(described, name) == kern_isa_built((KernIsa)i), "%s in '%s'", name, described);
    }
#if defined(__aarch64__)
    CHECK(kern_isa_available(KERN_NEON) && !kern_isa_built(KERN_AVX2));
#elif defined(__x86_64__)
    CHECK(!kern_isa_built(KERN_NEON) && kern_isa_built(KERN_AVX2));
#endif
    const char *widest = kern_isa_name(isa_at(n_isas() - 1));
    CHECK(kern_select("auto") == 0 && !strcmp(kern_isa(), widest));
    CHECK(kern_select("portable") == 0 && kern_select(NULL) == 0 && !strcmp(kern_isa(), widest));
    CHECK(kern_select("sse9") == -1 && strstr(df_errmsg(), "sse9"));
    CHECK(!strcmp(kern_isa(), widest));
}

int main(void) {
    for (int i = 0; i < KERN_N_ISA; i++)
        if (kern_isa_available((KernIsa)i)) isas[n_isa++] = (KernIsa)i;
    RUN(each_format_matches_fp64_reference_at_odd_shapes);
    RUN(batched_rows_equal_one_row_at_a_time);
    RUN(many_rows_equal_one_row_at_a_time);
    RUN(results_do_not_depend_on_thread_count);
    RUN(simd_and_portable_paths_agree_bitwise);
    RUN(formats_equal_f32_kernel_on_dequantised_weights);
    RUN(mxfp4_hand_computed_row);
    RUN(mxfp4_edge_scale_bytes);
    RUN(e8m0_table_is_the_numfmt_scale);
    RUN(dot_f32_is_the_kernel_order);
    RUN(empty_shapes_write_nothing_or_zero);
    RUN(head_products_are_exact);
    RUN(kern_select_picks_the_path);
    return check_summary();
}
