/* cpu_experts.c - the CPU device's routed experts (devops.h experts, experts_rows): each expert's
 * gate and up products over its rows, SiTU, and the down product, read straight from where the
 * expert store put the weights (the CPU has no expert slots: dslot is ignored, and nothing is
 * copied, so `wait` has nothing to wait for). */
#include "kernels/cpu/cpu_int.h"

/* Expert (w1, w2, w3) on `rows` rows of x into out ([rows][latent]); h1, h3: scratch [rows][inter]. */
static void run_expert(CpuDevice *c, const Mat *w1, const Mat *w2, const Mat *w3, const float *x, int rows, float *h1,
                       float *h3, float *out, float beta, float beta_lin) {
    cpu_mul(c, h1, w1, x, rows);
    cpu_mul(c, h3, w3, x, rows);
    cpu_situ(c, h1, h3, (size_t)rows * (size_t)w1->rows, beta, beta_lin);
    cpu_mul(c, out, w2, h1, rows);
}

void cpu_op_experts(MatDevice *d, const Mat *const *w1, const Mat *const *w2, const Mat *const *w3, const int *slot,
                    const int *dslot, int n, const float *z, float *h, float *out, float beta, float beta_lin, int wait) {
    (void)dslot, (void)wait;
    for (int i = 0; i < n; i++) {
        const size_t inter = (size_t)w1[i]->rows;
        run_expert(cpu_of(d), w1[i], w2[i], w3[i], z, 1, h + (size_t)i * inter, h + ((size_t)n + i) * inter,
                   out + (size_t)slot[i] * (size_t)w1[i]->cols, beta, beta_lin);
    }
}

void cpu_op_experts_rows(MatDevice *d, const Mat *const *w1, const Mat *const *w2, const Mat *const *w3, const int *dslot,
                         const int *at, const int *rows, int n, const float *X, float *h, int h_rows, float *out,
                         float beta, float beta_lin, int wait) {
    (void)dslot, (void)wait, (void)h_rows;
    for (int i = 0; i < n; i++) { /* one at a time: each expert's hidden rows from the start of h */
        const size_t latent = (size_t)w1[i]->cols, inter = (size_t)w1[i]->rows, a = (size_t)at[i];
        run_expert(cpu_of(d), w1[i], w2[i], w3[i], X + a * latent, rows[i], h, h + (size_t)rows[i] * inter, out + a * latent,
                   beta, beta_lin);
    }
}
