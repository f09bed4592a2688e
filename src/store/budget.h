/* budget.h - how much memory this process may use.
 *
 * What the caller fixed (K3_RAM_GB) when it did; otherwise what the machine and this process's
 * cgroup allow:
 * the smaller of the memory available (MemAvailable in /proc/meminfo on Linux, free and inactive
 * pages on macOS: util/platform.h) and the cgroup limit (v2 memory.max, or v1
 * memory.limit_in_bytes; none on macOS), minus a reserve for the OS and everything else (10%, at least 256 MB). */
#ifndef DF_BUDGET_H
#define DF_BUDGET_H

#include <stddef.h>
#include <stdint.h>

/* fixed: the budget the caller set (K3_RAM_GB), or 0 to measure it. how: where the number came
 * from, for the start-up line. */
int budget_detect(uint64_t fixed, uint64_t *bytes, char *how, size_t how_len);

/* Components of the automatic budget, exposed for tests: 0 when unknown. */
uint64_t budget_mem_available(void);
uint64_t budget_cgroup_limit(void);

#endif
