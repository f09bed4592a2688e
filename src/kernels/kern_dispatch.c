/* kern_dispatch.c - which implementation runs: chosen once per process from the CPU's features
 * and K3_KERNELS (auto | avx2 | portable). A bad value is fatal with a message, like every other
 * setting read from the environment. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_impl.h"
#include "util/err.h"

static KernIsa selected;
static pthread_once_t selected_once = PTHREAD_ONCE_INIT;

int kern_avx2_available(void) {
#if KERN_HAVE_AVX2
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

static void select_isa(void) {
    const char *v = getenv("K3_KERNELS");
    int avx2 = kern_avx2_available();
    if (!v || !*v || !strcmp(v, "auto")) {
        selected = avx2 ? KERN_AVX2 : KERN_PORTABLE;
    } else if (!strcmp(v, "portable")) {
        selected = KERN_PORTABLE;
    } else if (!strcmp(v, "avx2")) {
        if (!avx2) df_die("K3_KERNELS=avx2: this CPU does not support AVX2 with FMA (use auto or portable)");
        selected = KERN_AVX2;
    } else {
        df_die("K3_KERNELS: '%s' is not one of auto, avx2, portable", v);
    }
}

KernIsa kern_selected(void) {
    pthread_once(&selected_once, select_isa);
    return selected;
}

const char *kern_isa(void) { return kern_selected() == KERN_AVX2 ? "avx2-fma" : "portable"; }
