/* convert.c - convert-spine's work on an opened Engine (engine.h): the int8 spine written from the
 * mapped BF16 tensors. */
#include <stdlib.h>

#include "engine/engine_internal.h"
#include "util/err.h"

int engine_convert_spine(Engine *e, FILE *log, SpineConversion *r) {
    if (e->streaming || e->spine_int8) return df_fail("%s: convert-spine reads the BF16 spine through the mapped store", e->cat.dir);
    const TensorInfo **v;
    int n = i8spine_tensors(&e->cat, &v), rc = 0;
    *r = (SpineConversion){.total = n};
    for (int i = 0; i < n && !rc; i++) {
        r->bf16_bytes += v[i]->nbytes;
        int k = i8spine_check(&e->cat, v[i]);
        if (k < 0) fprintf(log, "convert-spine: %s: rewriting\n", df_errmsg());
        if (k == 1) r->skipped++, i8spine_remove_stale(&e->cat, v[i]);
        else if (!(rc = i8spine_convert(&e->cat, v[i], mapped_tensor_bytes(&e->store, v[i])))) r->converted++;
    }
    free(v);
    return rc ? -1 : 0;
}
