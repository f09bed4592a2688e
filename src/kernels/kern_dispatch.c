/* kern_dispatch.c - which implementation runs: chosen once per process from the CPU's features
 * and K3_KERNELS (auto | avx512 | avx2 | portable). auto takes the widest the CPU supports. A bad
 * value is fatal with a message, like every other setting read from the environment. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "util/err.h"

static const char *const isa_names[KERN_N_ISA] = {"portable", "avx2", "avx512"};
static const char *const isa_cpu[KERN_N_ISA] = {"", "AVX2 with FMA", "AVX-512F"};

static KernIsa selected;
static pthread_once_t selected_once = PTHREAD_ONCE_INIT;

int kern_isa_available(KernIsa isa) {
    if (isa == KERN_PORTABLE) return 1;
#if KERN_HAVE_X86
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (isa == KERN_AVX2) return avx2;
    if (isa == KERN_AVX512) return avx2 && __builtin_cpu_supports("avx512f");
#endif
    return 0;
}

const char *kern_isa_name(KernIsa isa) { return isa >= 0 && isa < KERN_N_ISA ? isa_names[isa] : "?"; }

static void select_isa(void) {
    const char *v = getenv("K3_KERNELS");
    if (!v || !*v || !strcmp(v, "auto")) {
        selected = KERN_PORTABLE;
        for (int i = 0; i < KERN_N_ISA; i++)
            if (kern_isa_available((KernIsa)i)) selected = (KernIsa)i;
        return;
    }
    for (int i = 0; i < KERN_N_ISA; i++)
        if (!strcmp(v, isa_names[i])) {
            if (!kern_isa_available((KernIsa)i))
                df_die("K3_KERNELS=%s: this CPU does not support %s (use auto or portable)", v, isa_cpu[i]);
            selected = (KernIsa)i;
            return;
        }
    df_die("K3_KERNELS: '%s' is not one of auto, avx512, avx2, portable", v);
}

KernIsa kern_selected(void) {
    pthread_once(&selected_once, select_isa);
    return selected;
}

const char *kern_isa(void) { return kern_isa_name(kern_selected()); }
