/* Hostile inputs: thousands of randomly damaged safetensors headers and config.json texts must
 * each be accepted or refused with a message - never crash, overflow or leak (run under ASan);
 * tensors that overlap or leave a gap by a single byte are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "synth/synth.h"
#include "util/err.h"
#include "util/rng.h"

static char *valid_header(size_t *len) {
    TensorInfo t[3] = {
        {.name = "a.weight", .dtype = DT_BF16, .ndim = 2, .shape = {4, 8}, .nbytes = 64},
        {.name = "b.scale", .dtype = DT_U8, .ndim = 2, .shape = {4, 2}, .nbytes = 8},
        {.name = "c.bias", .dtype = DT_F32, .ndim = 1, .shape = {4}, .nbytes = 16},
    };
    return st_build_header(t, 3, len);
}

static void mutate(char *buf, size_t len, Rng *r) {
    int edits = 1 + (int)(rng_next(r) % 4);
    for (int i = 0; i < edits; i++) {
        size_t at = (size_t)(rng_next(r) % len);
        static const char interesting[] = "0123456789-[]{}\":,e9";
        buf[at] = (rng_next(r) & 1) ? (char)(rng_next(r) >> 56) : interesting[rng_next(r) % (sizeof interesting - 1)];
    }
}

static void valid_header_parses(void) {
    size_t len;
    char *h = valid_header(&len);
    StHeader sh;
    CHECK(st_parse_header(&sh, h + 8, len - 8, 0, "x") == 0);
    CHECK(sh.n == 3 && sh.data_size == 88);
    st_header_free(&sh);
    free(h);
}

/* Two U8 tensors: a at [0, 4), b at [b0, b0 + 4) of the data region. */
static int parse_two(int b0) {
    char json[256];
    snprintf(json, sizeof json,
             "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
             "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[%d,%d]}}",
             b0, b0 + 4);
    StHeader sh;
    int rc = st_parse_header(&sh, json, strlen(json), 0, "two.safetensors");
    if (rc == 0) st_header_free(&sh);
    return rc;
}

/* The tensors must tile the data region to the byte: one byte of overlap or of gap is refused,
 * naming the tensors. */
static void tiling_is_exact_to_the_byte(void) {
    CHECK(parse_two(4) == 0);
    CHECK(parse_two(3) == -1 && strstr(df_errmsg(), "tensor b overlaps a"));
    CHECK_MSG(parse_two(5) == -1 && strstr(df_errmsg(), "gap in the data region before tensor b"), "%s", df_errmsg());
}

static void damaged_headers_never_crash(void) {
    size_t len;
    char *h = valid_header(&len);
    Rng r;
    rng_seed(&r, 42);
    int refused = 0;
    for (int i = 0; i < 4000; i++) {
        char *m = malloc(len);
        memcpy(m, h, len);
        mutate(m + 8, len - 8, &r);
        StHeader sh;
        if (st_parse_header(&sh, m + 8, len - 8, 0, "fuzz.safetensors") == 0) st_header_free(&sh);
        else {
            refused++;
            CHECK(strstr(df_errmsg(), "fuzz.safetensors") != NULL);
        }
        free(m);
    }
    CHECK(refused > 1000); /* most damage must be noticed */
    free(h);
}

static void huge_shapes_are_refused(void) {
    const char *j = "{\"t\":{\"dtype\":\"BF16\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}";
    StHeader sh;
    CHECK(st_parse_header(&sh, j, strlen(j), 0, "x") == -1);
    const char *k = "{\"t\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[18446744073709551612,0]}}";
    CHECK(st_parse_header(&sh, k, strlen(k), 0, "x") == -1);
}

static void damaged_configs_never_crash(void) {
    SynthPreset p;
    SynthOptions opt = {0};
    CHECK(synth_preset(&p, "tiny", &opt) == 0);
    char *text = synth_config_json(&p.cfg);
    if (!text) {
        CHECK(text != NULL);
        return;
    }
    size_t len = strlen(text);
    K3Config c;
    CHECK(config_parse(&c, text, len, "config.json") == 0);
    CHECK(c.hidden == p.cfg.hidden && c.n_mla_layers == 2 && c.layer_kind[4] == LAYER_MLA);
    Rng r;
    rng_seed(&r, 7);
    for (int i = 0; i < 3000; i++) {
        char *m = malloc(len);
        memcpy(m, text, len);
        mutate(m, len, &r);
        if (config_parse(&c, m, len, "config.json") != 0) CHECK(strncmp(df_errmsg(), "config.json: ", 13) == 0);
        free(m);
    }
    free(text);
}

int main(void) {
    RUN(valid_header_parses);
    RUN(tiling_is_exact_to_the_byte);
    RUN(damaged_headers_never_crash);
    RUN(huge_shapes_are_refused);
    RUN(damaged_configs_never_crash);
    return check_summary();
}
