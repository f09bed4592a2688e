#include "cli/input.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

int read_stream(FILE *f, const char *label, size_t max, char **out, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = df_malloc(cap + 1);
    for (;;) {
        if (n == cap) {
            if (cap >= max) {
                free(buf);
                return df_fail("%s: more than %zu bytes", label, max);
            }
            cap = cap * 2 < max ? cap * 2 : max;
            buf = df_realloc(buf, cap + 1);
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(buf);
        return df_fail("%s: read failed: %s", label, strerror(errno));
    }
    buf[n] = 0;
    *out = buf, *len = n;
    return 0;
}

int read_input(const char *path, size_t max, char **out, size_t *len) {
    if (!strcmp(path, "-")) return read_stream(stdin, "stdin", max, out, len);
    FILE *f = fopen(path, "rb");
    if (!f) return df_fail("%s: cannot open: %s", path, strerror(errno));
    int rc = read_stream(f, path, max, out, len);
    fclose(f);
    return rc;
}
