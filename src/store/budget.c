#include "store/budget.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/platform.h"

#define RESERVE_MIN (256ull << 20)

static uint64_t read_u64_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[64];
    uint64_t v = 0;
    if (fgets(line, sizeof line, f) && strncmp(line, "max", 3) != 0) v = strtoull(line, NULL, 10);
    fclose(f);
    return v;
}

uint64_t budget_mem_available(void) {
    const char *what;
    return plat_mem_available(&what);
}

/* The limit of our cgroup or any ancestor's (the tightest), reading from the mount point down. */
static uint64_t limit_along(const char *mount, const char *rel, const char *file) {
    char path[4096], dir[2048];
    uint64_t best = 0;
    snprintf(dir, sizeof dir, "%s", rel);
    for (;;) {
        snprintf(path, sizeof path, "%s%s/%s", mount, strcmp(dir, "/") ? dir : "", file);
        uint64_t v = read_u64_file(path);
        /* v1 reports "no limit" as a huge page-rounded number */
        if (v && v < (1ull << 60) && (!best || v < best)) best = v;
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir) {
            if (!strcmp(dir, "/")) break;
            strcpy(dir, "/");
            continue;
        }
        *slash = 0;
    }
    return best;
}

uint64_t budget_cgroup_limit(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[2048];
    uint64_t best = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        uint64_t v = 0;
        if (!strncmp(line, "0::", 3)) {
            v = limit_along("/sys/fs/cgroup", c2 + 1, "memory.max");
            if (!v) v = limit_along("/sys/fs/cgroup/unified", c2 + 1, "memory.max");
        } else if (strstr(c1, ":memory:") == c1)
            v = limit_along("/sys/fs/cgroup/memory", c2 + 1, "memory.limit_in_bytes");
        if (v && (!best || v < best)) best = v;
    }
    fclose(f);
    return best;
}

int budget_detect(uint64_t fixed, uint64_t *bytes, char *how, size_t how_len) {
    if (fixed) {
        *bytes = fixed;
        snprintf(how, how_len, "K3_RAM_GB");
        return 0;
    }
    const char *avail_what;
    uint64_t avail = plat_mem_available(&avail_what), cg = budget_cgroup_limit();
    if (!avail && !cg) return df_fail("cannot tell how much memory is available (no %s): set K3_RAM_GB", avail_what);
    uint64_t m = avail && (!cg || avail < cg) ? avail : cg;
    uint64_t reserve = m / 10 > RESERVE_MIN ? m / 10 : RESERVE_MIN;
    if (m <= reserve * 2) return df_fail("only %.2f GB of memory is available: set K3_RAM_GB to run anyway", m / 1e9);
    *bytes = m - reserve;
    snprintf(how, how_len, "auto: %s %.2f GB minus %.2f GB reserve", m == cg ? "cgroup limit" : avail_what, m / 1e9,
             reserve / 1e9);
    return 0;
}
