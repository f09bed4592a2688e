/* cpu_device.h - the CPU as a device: the whole-layer operations of devops.h on host memory, so the
 * model has one layer schedule (model/k3.c) whatever runs it.
 *
 * Its memory is the host's (MatDevice.host_memory): alloc is calloc, put, copy and get are memcpy,
 * and a State's arrays serve as its copy of them. Each operation runs before it returns, on the
 * calling thread and the compute pool's workers; the work is split only where every output is
 * computed by one task in a fixed order (rows, heads, channels, SiTU's elements), so results do not
 * depend on the thread count. It keeps no weights (keep and holds say 0: every matrix is read where
 * its store put it), has no expert slots and records nothing.
 *
 * Its matrix products are mat.h's: either the process's device's (a GPU that runs only the products,
 * K3_DEV_PASS=products) or the CPU kernels always (an accelerator's helper that computes the experts
 * it does not hold on the CPU threads); both give the same bits. */
#ifndef DF_CPU_DEVICE_H
#define DF_CPU_DEVICE_H

#include "kernels/device.h"
#include "util/pool.h"

typedef enum {
    CPU_PRODUCTS_PROCESS, /* mat_mul: on the process's device (device_current), else the CPU kernels */
    CPU_PRODUCTS_CPU,     /* mat_mul_cpu: the CPU kernels, whatever the process's device */
} CpuProducts;

/* A CPU device running on pool (borrowed: it must outlive the device). Never fails (allocation
 * failure aborts, util/err.h). Not installed as the process's device: its owner passes it where a
 * MatDevice is wanted, and destroys it. */
MatDevice *cpu_device_create(Pool *pool, CpuProducts products);
void cpu_device_destroy(MatDevice *d);

#endif
