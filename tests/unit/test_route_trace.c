/* Router traces read back (route_trace.h): a K3_TRACE file loads with its layers sorted and its
 * rows in file order; malformed lines fail naming the file, the line and the field; the mapping
 * rule onto another shape gives the ids worked out by hand, maps a trace onto its own shape
 * unchanged, and refuses a model with too few experts. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "store/route_trace.h"
#include "util/err.h"

static char path[] = "/tmp/df-route-trace-XXXXXX";

static void write_trace(const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* 3 layers (numbered 1, 2, 5), 4 experts, top-2, 5 rows; layer keys out of order on purpose. */
static const char *GOOD = "{\"pos\":0,\"layers\":{\"5\":[0,1],\"1\":[2,3],\"2\":[1,0]}}\n"
                          "{\"pos\":1,\"layers\":{\"1\":[3,0],\"2\":[2,1],\"5\":[1,3]}}\n"
                          "\n"
                          "{\"pos\":2,\"layers\":{\"1\":[0,1],\"2\":[3,2],\"5\":[2,0]}}\n"
                          "{\"pos\":0,\"layers\":{\"1\":[1,2],\"2\":[0,3],\"5\":[3,1]}}\n"
                          "{\"pos\":1,\"layers\":{\"1\":[2,0],\"2\":[1,2],\"5\":[0,2]}}\n";

static void loads_a_trace(void) {
    write_trace(GOOD);
    RouteTrace t;
    CHECK(route_trace_load(&t, path) == 0);
    CHECK(t.n_rows == 5 && t.n_layers == 3 && t.top_k == 2 && t.n_experts == 4);
    CHECK(t.layer[0] == 1 && t.layer[1] == 2 && t.layer[2] == 5);
    CHECK(route_trace_row(&t, 1, 2)[0] == 1 && route_trace_row(&t, 1, 2)[1] == 3); /* row 1, layer "5" */
    CHECK(route_trace_row(&t, 3, 0)[0] == 1 && route_trace_row(&t, 3, 0)[1] == 2); /* a second run's row */
    route_trace_free(&t);
}

static void refuses_bad_lines(void) {
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"", "has no lines"},
        {"not json\n", "line 1: not JSON"},
        {"[1,2]\n", "line 1: not a trace line"},
        {"{\"layers\":{\"1\":[0,1]}}\n", "line 1: \"pos\" is not a position"},
        {"{\"pos\":-1,\"layers\":{\"1\":[0,1]}}\n", "line 1: \"pos\""},
        {"{\"pos\":0,\"layers\":[]}\n", "line 1: \"layers\" is not an object"},
        {"{\"pos\":0,\"layers\":{\"x\":[0,1]}}\n", "layer key 'x'"},
        {"{\"pos\":0,\"layers\":{\"1\":[0,1],\"2\":[0]}}\n", "layer 2 has 1 experts"},
        {"{\"pos\":0,\"layers\":{\"1\":[0,1]}}\n{\"pos\":1,\"layers\":{\"1\":[0,0]}}\n", "line 2: layer 1 selects expert 0 twice"},
        {"{\"pos\":0,\"layers\":{\"1\":[0,1]}}\n{\"pos\":1,\"layers\":{\"2\":[0,1]}}\n", "line 2: layer 1 is missing"},
        {"{\"pos\":0,\"layers\":{\"1\":[0,1]}}\n{\"pos\":1,\"layers\":{\"1\":[0,1],\"2\":[0,1]}}\n", "line 2: routes 2 layers"},
        {"{\"pos\":0,\"layers\":{\"1\":[0,\"a\"]}}\n", "expert 1 is not an id"},
        {"{\"pos\":0,\"layers\":{\"1\":[0,70000]}}\n", "expert 1 is not an id"},
        {"{\"pos\":0,\"layers\":{\"1\":[0,1],\"2\":[0,1]}}\n{\"pos\":1,\"layers\":{\"1\":[0,1],\"2\":[0]}}\n",
         "line 2: layer 2 is not a list of 2 experts"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_trace(bad[i].text);
        RouteTrace t;
        int rc = route_trace_load(&t, path);
        CHECK_MSG(rc == -1 && strstr(df_errmsg(), bad[i].want) && strstr(df_errmsg(), path), "case %zu: %s", i, df_errmsg());
        if (rc == 0) route_trace_free(&t);
    }
    RouteTrace t;
    CHECK(route_trace_load(&t, "/nonexistent/trace.jsonl") == -1 && strstr(df_errmsg(), "/nonexistent/trace.jsonl"));
}

static void maps_onto_another_shape(void) {
    write_trace(GOOD);
    RouteTrace t;
    TraceMap m;
    int rc = route_trace_load(&t, path);
    CHECK(rc == 0);
    if (rc) return;
    /* the same shape: the identity */
    CHECK(route_trace_mapping(&t, 3, 4, 2, &m, path) == 0 && m.streams == 1 && m.laps == 1);
    int out[8];
    for (int j = 0; j < 3; j++)
        for (int p = 0; p < 5; p++) {
            route_trace_map(&t, &m, j, p, out);
            CHECK(out[0] == route_trace_row(&t, p, j)[0] && out[1] == route_trace_row(&t, p, j)[1]);
        }
    /* 4 MoE layers x 8 experts, top-3: 2 streams a layer, 8 streams over 3 trace layers = 3 laps,
     * a lap shifts by 5 / 3 = 1 row. Layer 1 at position 4: stream 2 (trace layer "5", lap 0, row 4:
     * [0,2]) then stream 3 (trace layer "1", lap 1, row 0: [2,3] + 4, first one kept). */
    CHECK(route_trace_mapping(&t, 4, 8, 3, &m, path) == 0 && m.streams == 2 && m.laps == 3);
    route_trace_map(&t, &m, 1, 4, out);
    CHECK_MSG(out[0] == 0 && out[1] == 2 && out[2] == 6, "%d %d %d", out[0], out[1], out[2]);
    /* layer 3 at position 7: stream 6 (trace layer "1", lap 2, row (7 + 2) % 5 = 4: [2,0]) and
     * stream 7 (trace layer "2", lap 2, row 4: [1,2] + 4) */
    route_trace_map(&t, &m, 3, 7, out);
    CHECK_MSG(out[0] == 2 && out[1] == 0 && out[2] == 5, "%d %d %d", out[0], out[1], out[2]);
    /* fewer experts per token than the trace: the first ones */
    CHECK(route_trace_mapping(&t, 2, 4, 1, &m, path) == 0 && m.streams == 1);
    route_trace_map(&t, &m, 1, 1, out);
    CHECK(out[0] == 2);
    /* top-3 needs 2 x 4 experts */
    CHECK(route_trace_mapping(&t, 4, 7, 3, &m, path) == -1 && strstr(df_errmsg(), "needs 2 x 4 experts"));
    route_trace_free(&t);
}

int main(void) {
    int fd = mkstemp(path);
    if (fd < 0) return perror("mkstemp"), 1;
    close(fd);
    RUN(loads_a_trace);
    RUN(refuses_bad_lines);
    RUN(maps_onto_another_shape);
    unlink(path);
    return check_summary();
}
