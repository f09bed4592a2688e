/* cpu_int.h - what the CPU device's files share (cpu_device.c: memory, norms, routing, the table;
 * cpu_attention.c: KDA and MLA; cpu_experts.c: routed experts). Private to kernels/cpu/. */
#ifndef DF_CPU_INT_H
#define DF_CPU_INT_H

#include "kernels/cpu/cpu_device.h"
#include "kernels/devops.h"

typedef struct {
    MatDevice base;
    Pool *pool;
    CpuProducts products;
    int phase;                  /* the phase marked last (devops.h mark) */
    double phase_since;         /* when it was marked */
    double secs[DEV_N_PHASES];  /* seconds per phase since the last phase_times */
} CpuDevice;

static inline CpuDevice *cpu_of(MatDevice *d) { return (CpuDevice *)d; }

/* The device's matrix products (CpuProducts says which kernels). */
void cpu_mul(CpuDevice *c, float *Y, const Mat *W, const float *X, int T);
/* a[i] = SiTU(a[i], b[i]) for i < n on the pool, each element alone. */
void cpu_situ(CpuDevice *c, float *a, const float *b, size_t n, float beta, float beta_lin);

void cpu_op_kda(MatDevice *d, const DevKda *a);
void cpu_op_mla(MatDevice *d, const DevMla *a);
void cpu_op_mla_expanded(MatDevice *d, const DevMlaExpanded *a);
void cpu_op_experts(MatDevice *d, const Mat *const *w1, const Mat *const *w2, const Mat *const *w3, const int *slot,
                    const int *dslot, int n, const float *z, float *h, float *out, float beta, float beta_lin, int wait);
void cpu_op_experts_rows(MatDevice *d, const Mat *const *w1, const Mat *const *w2, const Mat *const *w3, const int *dslot,
                         const int *at, const int *rows, int n, const float *X, float *h, int h_rows, float *out,
                         float beta, float beta_lin, int wait);

#endif
