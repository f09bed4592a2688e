#include "cli/install_common.h"

#include <stdlib.h>
#include <string.h>

#include "fetch/progress.h"
#include "fetch/source.h"
#include "util/err.h"

uint64_t install_reserve(uint64_t need) { return need / 100 + (64u << 20); }

int install_fits(uint64_t need, uint64_t free_b) { return need == 0 || need + install_reserve(need) <= free_b; }

const char *install_source_display(const FetchOptions *o) {
    static Source s;
    return source_init(&s, o) ? "?" : s.display;
}

int install_verify_report(Installer *in) {
    int checked, unpublished;
    if (installer_verify(in, &checked, &unpublished)) return -1;
    printf("verified: sizes of every range; SHA-256 of %d shard(s) against the published hash", checked);
    if (unpublished) printf("; %d shard(s) have no published hash (sizes only)", unpublished);
    printf("\n");
    return 0;
}

void install_report(Installer *in, FILE *f) {
    uint64_t full, present, ex_have, ex_all;
    installer_totals(in, &full, &present);
    installer_expert_counts(in, &ex_have, &ex_all);
    char a[32], b[32], c[32];
    const Catalog *cat = installer_catalog(in);
    fprintf(f, "install %s: %s of %s local; experts %llu of %llu local", installer_root(in), fmt_bytes(a, sizeof a, present),
            fmt_bytes(b, sizeof b, full), (unsigned long long)ex_have, (unsigned long long)ex_all);
    if (present == full) fprintf(f, " (full install)\n");
    else
        fprintf(f, " (streaming install)\n  finishing costs %s: deltafin fetch --root %s\n",
                fmt_bytes(c, sizeof c, (ex_all - ex_have) * cat->expert_bytes), installer_root(in));
}

int parse_layer_spec(const char *spec, const K3Config *cfg, uint8_t *want) {
    const char *p = spec;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p) return df_fail("--layers: '%s': expected numbers like 1-40,45", spec);
        if (*end == '-') {
            p = end + 1;
            b = strtol(p, &end, 10);
            if (end == p) return df_fail("--layers: '%s': range without an end", spec);
        }
        if (a > b) return df_fail("--layers: %ld-%ld: empty range", a, b);
        if (a < cfg->first_dense || b >= cfg->n_layers)
            return df_fail("--layers: %ld-%ld: routed experts are in layers %d-%d", a, b, cfg->first_dense, cfg->n_layers - 1);
        for (long l = a; l <= b; l++) want[l] = 1;
        if (*end == ',') end++;
        else if (*end) return df_fail("--layers: '%s': unexpected '%c'", spec, *end);
        p = end;
    }
    return 0;
}
