#include "cli/token_list.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/fileio.h"

int parse_token_list(const char *text, int *ids, int max, int vocab) {
    int n = 0;
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= vocab) {
            int word = (int)strcspn(p, " \t\n\r,"); /* the offending word alone, never a line break */
            return df_fail("token list: '%.*s%s' is not a token id in 0..%d", word < 20 ? word : 20, p, word > 20 ? "..." : "",
                           vocab - 1);
        }
        if (n >= max) return df_fail("token list: more than %d tokens", max);
        ids[n++] = (int)v;
        p = end;
    }
    if (n == 0) return df_fail("token list is empty");
    return n;
}

int read_token_file(const char *path, int **ids, int vocab) {
    char *text;
    size_t len;
    if (file_read_all(path, 256u << 20, &text, &len)) return -1;
    if (strlen(text) != len) return free(text), df_fail("%s holds a NUL byte (not a list of token ids)", path);
    int max = (int)(len / 2 + 1);
    *ids = df_malloc(sizeof **ids * (size_t)max);
    int n = parse_token_list(text, *ids, max, vocab);
    free(text);
    if (n < 0) {
        free(*ids);
        return df_failctx("%s", path);
    }
    return n;
}
