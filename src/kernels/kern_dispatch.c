/* kern_dispatch.c - which implementation runs: chosen once per process from the CPU's features
 * and the caller's choice (K3_KERNELS: auto | avx512 | avx2 | neon | portable). auto, also what
 * the first product picks when nobody chose, takes the widest the CPU supports. An x86-64 build
 * has avx512, avx2 and portable, an AArch64 build neon and portable. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "util/err.h"
#include "util/platform.h"

static const char *const isa_names[KERN_N_ISA] = {"portable", "avx2", "avx512", "neon"};
static const char *const isa_cpu[KERN_N_ISA] = {"", "AVX2 with FMA", "AVX-512F", "NEON"};

static KernIsa selected;
static int chosen; /* kern_select ran: the first product keeps its choice */
static pthread_once_t selected_once = PTHREAD_ONCE_INIT;

int kern_isa_built(KernIsa isa) {
    switch (isa) {
    case KERN_PORTABLE: return 1;
    case KERN_AVX2:
    case KERN_AVX512: return KERN_HAVE_X86;
    case KERN_NEON: return KERN_HAVE_NEON;
    default: return 0;
    }
}

int kern_isa_available(KernIsa isa) {
    if (isa == KERN_PORTABLE || isa == KERN_NEON) return kern_isa_built(isa);
#if KERN_HAVE_X86
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (isa == KERN_AVX2) return avx2;
    if (isa == KERN_AVX512) return avx2 && __builtin_cpu_supports("avx512f");
#endif
    return 0;
}

const char *kern_isa_name(KernIsa isa) { return isa >= 0 && isa < KERN_N_ISA ? isa_names[isa] : "?"; }

static KernIsa widest(void) {
    KernIsa best = KERN_PORTABLE;
    for (int i = 0; i < KERN_N_ISA; i++)
        if (kern_isa_available((KernIsa)i)) best = (KernIsa)i;
    return best;
}

static void select_default(void) {
    if (!chosen) selected = widest();
}

int kern_select(const char *name) {
    if (!name || !*name || !strcmp(name, "auto")) {
        selected = widest(), chosen = 1;
        return 0;
    }
    for (int i = 0; i < KERN_N_ISA; i++)
        if (!strcmp(name, isa_names[i])) {
            if (!kern_isa_built((KernIsa)i))
                return df_fail("this %s build has no %s kernels (use auto or portable)", plat_arch_name(), isa_cpu[i]);
            if (!kern_isa_available((KernIsa)i))
                return df_fail("this CPU does not support %s (use auto or portable)", isa_cpu[i]);
            selected = (KernIsa)i, chosen = 1;
            return 0;
        }
    return df_fail("'%s' is not auto, avx512, avx2, neon or portable", name);
}

KernIsa kern_selected(void) {
    pthread_once(&selected_once, select_default);
    return selected;
}

const char *kern_isa(void) { return kern_isa_name(kern_selected()); }

void kern_describe(char *buf, size_t n) {
    char have[64] = "", runs[64] = "";
    for (int i = KERN_N_ISA - 1; i >= 0; i--) {
        size_t h = strlen(have), r = strlen(runs);
        if (kern_isa_built((KernIsa)i)) snprintf(have + h, sizeof have - h, "%s%s", h ? " " : "", isa_names[i]);
        if (kern_isa_available((KernIsa)i)) snprintf(runs + r, sizeof runs - r, "%s%s", r ? " " : "", isa_names[i]);
    }
    snprintf(buf, n, "%s (this CPU: %s)", have, runs);
}
