#include "store/spine.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "format/schema.h"
#include "store/i8spine.h"
#include "store/mats.h"
#include "util/err.h"

#define CHUNK_BYTES (8ull << 20) /* one read request; large enough for full disk speed */
#define MERGE_GAP (1ull << 20)   /* tensors closer than this are read as one run */

enum { BUF_EMPTY, BUF_LOADING, BUF_READY, BUF_FAILED };

/* A run reads from one file of a set: the checkpoint's shards, or the int8 spine files. */
enum { SET_SHARDS, SET_INT8 };

struct SpineRun {
    int set, shard;
    uint64_t aoff, alen, need, buf_off;
};

typedef struct {
    IoJob job;               /* first member: the I/O pool reads it */
    SpineBuf *b;
    int set;
} SpineChunk;

struct SpineBuf {
    SpineStore *ss;
    uint8_t *mem;
    int group, state, in_use, pending, failed, n_chunks;
    int validated;           /* the int8 scales of this load were checked */
    char err[384];
    SpineChunk *chunks;
};

static int globals_group(const SpineStore *ss) { return ss->cat->cfg.n_layers; }
static int smalls_group(const SpineStore *ss) { return ss->cat->cfg.n_layers + 1; }
uint64_t spine_globals_bytes(const SpineStore *ss) { return ss->group_bytes[globals_group(ss)]; }
uint64_t spine_small_bytes(const SpineStore *ss) { return ss->group_bytes[smalls_group(ss)]; }

/* ---- layout ---- */

typedef struct {
    int t;
    int set, shard;
    uint64_t off, end;
} Piece;

static int cmp_piece(const void *a, const void *b) {
    const Piece *x = a, *y = b;
    if (x->set != y->set) return x->set < y->set ? -1 : 1;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

static void add_run(SpineStore *ss, int *n_runs, const Piece *first, uint64_t end, uint64_t *buf_off) {
    SpineRun *r = &ss->runs[(*n_runs)++];
    uint64_t start = first->off;
    r->set = first->set, r->shard = first->shard;
    r->aoff = start & ~(uint64_t)(SHARD_ALIGN - 1);
    r->need = end - r->aoff;
    r->alen = shard_read_cap(r->aoff, r->need);
    r->buf_off = *buf_off;
    *buf_off += r->alen;
}

/* Sorts a group's tensors by position and merges neighbours into runs. */
static void layout_group(SpineStore *ss, int g, Piece *p, int n, int *n_runs) {
    qsort(p, (size_t)n, sizeof *p, cmp_piece);
    ss->run_first[g] = *n_runs;
    uint64_t buf_off = 0;
    for (int i = 0; i < n;) {
        int j = i + 1;
        uint64_t end = p[i].end;
        while (j < n && p[j].set == p[i].set && p[j].shard == p[i].shard && p[j].off <= end + MERGE_GAP)
            end = p[j].end > end ? p[j].end : end, j++;
        int run = *n_runs;
        add_run(ss, n_runs, &p[i], end, &buf_off);
        for (int k = i; k < j; k++) ss->tensor_off[p[k].t] = ss->runs[run].buf_off + (p[k].off - ss->runs[run].aoff);
        i = j;
    }
    ss->run_count[g] = *n_runs - ss->run_first[g];
    ss->group_bytes[g] = buf_off;
}

static int find_tensor(SpineStore *ss, const char *name) {
    const TensorInfo *t = catalog_find(ss->cat, name);
    if (!t) return df_fail("%s: tensor %s is missing", ss->cat->dir, name);
    return (int)(t - ss->cat->tensors);
}

/* Assigns each non-expert tensor to its group: layer matrices, global matrices, small vectors. */
static int assign_groups(SpineStore *ss, Piece **by_group, int *count) {
    const K3Config *c = &ss->cat->cfg;
    SchemaEntry e[SCHEMA_MAX_PER_LAYER];
    for (int l = -1; l < c->n_layers; l++) {
        int n = l < 0 ? schema_globals(c, e) : schema_layer(c, l, e);
        for (int i = 0; i < n; i++) {
            int t = find_tensor(ss, e[i].name);
            if (t < 0) return -1;
            if (e[i].role == ROLE_EMBED) continue;
            int g = e[i].role == ROLE_SMALL ? smalls_group(ss) : l < 0 ? globals_group(ss) : l;
            const TensorInfo *ti = &ss->cat->tensors[t];
            int k = ss->tensor_i8 ? ss->tensor_i8[t] : -1;
            ss->tensor_group[t] = g;
            by_group[g][count[g]++] = k < 0 ? (Piece){t, SET_SHARDS, ti->shard, ti->offset, ti->offset + ti->nbytes}
                                            : (Piece){t, SET_INT8, k, I8SPINE_HEADER, i8spine_file_bytes(ti)};
        }
    }
    return 0;
}

/* Which catalog tensors come from int8 files, and each group's range of them (the list is in
 * layer order, globals first, so a group's int8 tensors are consecutive). */
static void index_int8(SpineStore *ss) {
    int N = ss->cat->n_tensors, G = ss->n_groups;
    ss->n_i8 = i8spine_tensors(ss->cat, &ss->i8t);
    ss->tensor_i8 = df_malloc(sizeof(int) * (size_t)N);
    memset(ss->tensor_i8, 0xff, sizeof(int) * (size_t)N);
    for (int k = 0; k < ss->n_i8; k++) ss->tensor_i8[ss->i8t[k] - ss->cat->tensors] = k;
    ss->i8_first = df_calloc((size_t)G, sizeof(int));
    ss->i8_count = df_calloc((size_t)G, sizeof(int));
}

static void count_int8(SpineStore *ss) {
    for (int k = 0; k < ss->n_i8; k++) {
        int g = ss->tensor_group[ss->i8t[k] - ss->cat->tensors];
        if (!ss->i8_count[g]++) ss->i8_first[g] = k;
    }
}

int spine_layout(SpineStore *ss, const Catalog *cat, int int8) {
    memset(ss, 0, sizeof *ss);
    ss->cat = cat;
    ss->n_groups = cat->cfg.n_layers + 2;
    ss->int8 = int8;
    if (int8) index_int8(ss);
    int G = ss->n_groups, N = cat->n_tensors;
    ss->tensor_group = df_malloc(sizeof(int) * (size_t)N);
    memset(ss->tensor_group, 0xff, sizeof(int) * (size_t)N);
    ss->tensor_off = df_calloc((size_t)N, sizeof *ss->tensor_off);
    ss->run_first = df_calloc((size_t)G, sizeof(int));
    ss->run_count = df_calloc((size_t)G, sizeof(int));
    ss->group_bytes = df_calloc((size_t)G, sizeof(uint64_t));
    ss->resident = df_calloc((size_t)G, sizeof *ss->resident);
    ss->runs = df_calloc((size_t)N, sizeof *ss->runs);
    Piece **by_group = df_calloc((size_t)G, sizeof *by_group);
    int *count = df_calloc((size_t)G, sizeof(int));
    for (int g = 0; g < G; g++) by_group[g] = df_malloc(sizeof(Piece) * (size_t)(g == smalls_group(ss) ? N : SCHEMA_MAX_PER_LAYER));
    int rc = assign_groups(ss, by_group, count), n_runs = 0;
    if (!rc && int8) count_int8(ss);
    for (int g = 0; g < G && !rc; g++) layout_group(ss, g, by_group[g], count[g], &n_runs);
    for (int g = 0; g < G; g++) free(by_group[g]);
    free(by_group), free(count);
    if (rc) spine_close(ss);
    return rc;
}

/* ---- reading a group into a buffer ---- */

static int group_chunks(const SpineStore *ss, int g) {
    int n = 0;
    for (int r = 0; r < ss->run_count[g]; r++) n += (int)((ss->runs[ss->run_first[g] + r].alen + CHUNK_BYTES - 1) / CHUNK_BYTES);
    return n;
}

static void describe_chunk(const IoJob *job, char *what, size_t n) {
    const SpineChunk *ch = (const SpineChunk *)job;
    const SpineStore *ss = ch->b->ss;
    const char *kind = ch->set == SET_INT8 ? "int8 spine" : "spine";
    if (ch->b->group < ss->cat->cfg.n_layers) snprintf(what, n, "%s of layer %d", kind, ch->b->group);
    else snprintf(what, n, ch->b->group == globals_group(ss) ? "global %s tensors" : "small %s tensors", kind);
}

/* I/O thread: a chunk's read ended. */
static void chunk_read(IoJob *job, int rc) {
    SpineChunk *ch = (SpineChunk *)job;
    SpineBuf *b = ch->b;
    SpineStore *ss = b->ss;
    pthread_mutex_lock(&ss->mu);
    if (rc && !b->failed) b->failed = 1, snprintf(b->err, sizeof b->err, "%s", df_errmsg());
    if (!rc) ss->bytes_read += job->alen;
    if (--b->pending == 0) {
        b->state = b->failed ? BUF_FAILED : BUF_READY;
        pthread_cond_broadcast(&ss->done);
    }
    pthread_mutex_unlock(&ss->mu);
}

/* Starts reading group g into b (caller holds mu): urgent when the forward waits for it. */
static void start_group(SpineStore *ss, SpineBuf *b, int g, int urgent) {
    b->group = g, b->state = BUF_LOADING, b->failed = 0, b->pending = 0, b->validated = 0;
    int n = 0;
    for (int r = 0; r < ss->run_count[g]; r++) {
        const SpineRun *run = &ss->runs[ss->run_first[g] + r];
        for (uint64_t at = 0; at < run->alen; at += CHUNK_BYTES) {
            SpineChunk *ch = &b->chunks[n];
            uint64_t alen = run->alen - at < CHUNK_BYTES ? run->alen - at : CHUNK_BYTES;
            uint64_t need = run->need > at ? run->need - at : 0;
            memset(ch, 0, sizeof *ch);
            ch->job.files = run->set == SET_INT8 ? &ss->i8files : ss->shards, ch->job.file = run->shard;
            ch->job.aoff = run->aoff + at, ch->job.alen = alen, ch->job.need = need < alen ? need : alen;
            ch->job.buf = b->mem + run->buf_off + at;
            ch->job.done = chunk_read, ch->job.describe = describe_chunk;
            ch->b = b, ch->set = run->set;
            ss->jobs[n++] = &ch->job;
        }
    }
    b->pending = b->n_chunks = n;
    if (n == 0) b->state = BUF_READY;
    iopool_submit_many(ss->io, ss->jobs, n, urgent ? IO_URGENT : IO_AHEAD);
}

/* The int8 files' scales are checked on every load: a damaged file must fail naming itself, not
 * turn into non-finite logits. (The scales are 1/cols of the bytes: the check is cheap.) */
static int validate_group(const SpineStore *ss, const SpineBuf *b) {
    int g = b->group;
    for (int k = ss->i8_first ? ss->i8_first[g] : 0, end = k + (ss->i8_count ? ss->i8_count[g] : 0); k < end; k++) {
        const TensorInfo *t = ss->i8t[k];
        if (i8spine_check_scales(b->mem + ss->tensor_off[t - ss->cat->tensors], i8spine_rows(t), ss->i8files.path[k]))
            return -1;
    }
    return 0;
}

static int wait_group(SpineStore *ss, SpineBuf *b) {
    while (b->state == BUF_LOADING) pthread_cond_wait(&ss->done, &ss->mu);
    if (b->state != BUF_FAILED && (b->validated || !validate_group(ss, b))) return b->validated = 1, 0;
    if (b->state == BUF_FAILED) df_fail("%s", b->err);
    b->state = BUF_EMPTY, b->group = -1;
    return -1;
}

/* Reads group g into a new resident buffer, now. */
static int load_resident(SpineStore *ss, int g) {
    SpineBuf b = {ss, NULL, -1, BUF_EMPTY, 0, 0, 0, 0, 0, {0}, NULL};
    b.mem = ss->resident[g] = df_aligned_alloc(SHARD_ALIGN, ss->group_bytes[g] ? ss->group_bytes[g] : SHARD_ALIGN);
    b.chunks = df_calloc((size_t)group_chunks(ss, g) + 1, sizeof *b.chunks);
    pthread_mutex_lock(&ss->mu);
    start_group(ss, &b, g, 1);
    int rc = wait_group(ss, &b);
    pthread_mutex_unlock(&ss->mu);
    free(b.chunks);
    return rc;
}

/* ---- streaming ---- */

uint64_t spine_stream_buf_bytes(const SpineStore *ss, int n_pinned) {
    uint64_t m = 0;
    for (int l = n_pinned; l < ss->cat->cfg.n_layers; l++) m = ss->group_bytes[l] > m ? ss->group_bytes[l] : m;
    return m;
}

uint8_t *spine_stream_buf(const SpineStore *ss, int i) { return ss->bufs ? ss->bufs[i].mem : NULL; }

static SpineBuf *holding(SpineStore *ss, int g) {
    for (int i = 0; i < 2; i++)
        if (ss->bufs[i].group == g && ss->bufs[i].state != BUF_EMPTY) return &ss->bufs[i];
    return NULL;
}

static SpineBuf *free_buf(SpineStore *ss) {
    for (int i = 0; i < 2; i++)
        if (!ss->bufs[i].in_use && ss->bufs[i].state != BUF_LOADING) return &ss->bufs[i];
    return NULL;
}

/* The next streamed layer after l, cyclically (the next token starts over at layer 0). */
/* Reads the streamed layer after l (the first one again after the last; none that is held
 * elsewhere) into a free buffer, in the background. */
static void prefetch_after(SpineStore *ss, int l) {
    const int L = ss->cat->cfg.n_layers;
    if (!ss->bufs || ss->n_pinned >= L || !ss->prefetch) return;
    int next = l;
    for (int tries = 0; tries < L; tries++) {
        next = next + 1 < L && next + 1 >= ss->n_pinned ? next + 1 : ss->n_pinned;
        if (!ss->elsewhere[next]) break;
    }
    if (ss->elsewhere[next] || holding(ss, next)) return;
    SpineBuf *b = free_buf(ss);
    if (b) start_group(ss, b, next, 0), ss->layers_streamed++;
}

static int spine_acquire(SpineSource *src, int l) {
    SpineStore *ss = (SpineStore *)src;
    pthread_mutex_lock(&ss->mu);
    int rc = 0;
    if (!ss->resident[l]) {
        SpineBuf *b = holding(ss, l);
        if (b && b->state == BUF_LOADING)
            for (int i = 0; i < b->n_chunks; i++) iopool_promote(ss->io, &b->chunks[i].job);
        if (!b) {
            while (!(b = free_buf(ss))) pthread_cond_wait(&ss->done, &ss->mu);
            start_group(ss, b, l, 1), ss->layers_streamed++;
        }
        rc = wait_group(ss, b);
        if (!rc) b->in_use = 1, ss->cur = b;
    }
    if (!rc) prefetch_after(ss, l);
    pthread_mutex_unlock(&ss->mu);
    return rc ? -1 : !ss->resident[l]; /* a streamed layer may be in either buffer */
}

static void spine_held_elsewhere(SpineSource *src, int l) {
    SpineStore *ss = (SpineStore *)src;
    pthread_mutex_lock(&ss->mu);
    ss->elsewhere[l] = 1;
    pthread_mutex_unlock(&ss->mu);
}

static void spine_release(SpineSource *src, int l) {
    SpineStore *ss = (SpineStore *)src;
    pthread_mutex_lock(&ss->mu);
    if (!ss->resident[l] && ss->cur && ss->cur->group == l) ss->cur->in_use = 0, ss->cur = NULL;
    pthread_mutex_unlock(&ss->mu);
}

/* Where tensor t's bytes are now (NULL: a streamed layer not held). */
static const uint8_t *tensor_bytes(const SpineStore *ss, const TensorInfo *t) {
    int i = (int)(t - ss->cat->tensors), g = ss->tensor_group[i];
    if (g < 0) /* only the embedding is served outside the groups */
        return t->offset >= ss->embed_map_off && t->offset + t->nbytes <= ss->embed_map_off + ss->embed_map_len
                   ? ss->embed + (t->offset - ss->embed_map_off)
                   : NULL;
    if (ss->resident[g]) return ss->resident[g] + ss->tensor_off[i];
    if (ss->cur && ss->cur->group == g) return ss->cur->mem + ss->tensor_off[i];
    return NULL;
}

/* SpineSource.mat: a BF16/F32 tensor's Mat, or a converted tensor's int8 one (scales, then codes,
 * in the buffer); data NULL (and no key) while its streamed layer is not held. */
static Mat spine_mat(SpineSource *src, const TensorInfo *t) {
    SpineStore *ss = (SpineStore *)src;
    const uint8_t *p = tensor_bytes(ss, t);
    int i = (int)(t - ss->cat->tensors), k = ss->tensor_i8 ? ss->tensor_i8[i] : -1;
    MatKey key = p ? store_key(ss->id, (uint64_t)i, 0) : (MatKey){0, 0, 0, 0};
    if (k < 0) return store_tensor_mat(t, p, key);
    uint32_t rows = i8spine_rows(t);
    key.part = p ? MAT_PART_INT8 : 0;
    Mat m = {WF_I8ROW, (int)rows, (int)t->shape[t->ndim - 1], p ? p + 4 * (uint64_t)rows : NULL, p, key};
    return m;
}

static int open_int8_files(SpineStore *ss, int want_direct) {
    char **paths = df_calloc((size_t)ss->n_i8 + 1, sizeof *paths);
    for (int k = 0; k < ss->n_i8; k++) paths[k] = i8spine_path(ss->cat, ss->i8t[k]);
    int rc = shards_open_paths(&ss->i8files, ss->n_i8, paths, want_direct);
    for (int k = 0; k < ss->n_i8; k++) free(paths[k]);
    free(paths);
    return rc;
}

static int map_embedding(SpineStore *ss) {
    char name[SCHEMA_NAME_MAX];
    schema_tensor_name(name, TENSOR_EMBED, -1);
    const TensorInfo *t = catalog_find(ss->cat, name);
    if (!t) return df_fail("%s: the embedding is missing", ss->cat->dir);
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    ss->embed_map_off = t->offset / page * page;
    ss->embed_map_len = (size_t)(t->offset + t->nbytes - ss->embed_map_off);
    char *path = catalog_shard_path(ss->cat, t->shard);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    void *p = fd < 0 ? MAP_FAILED : mmap(NULL, ss->embed_map_len, PROT_READ, MAP_SHARED, fd, (off_t)ss->embed_map_off);
    int err = errno;
    if (fd >= 0) close(fd);
    if (p == MAP_FAILED) {
        df_fail("%s: cannot map the embedding: %s", path, strerror(err));
        free(path);
        return -1;
    }
    free(path);
    ss->embed = p;
    return 0;
}

int spine_start(SpineStore *ss, const Shards *shards, IoPool *io, int n_pinned, int want_direct) {
    const int L = ss->cat->cfg.n_layers;
    ss->shards = shards, ss->io = io, ss->n_pinned = n_pinned;
    ss->src.acquire_layer = spine_acquire;
    ss->src.resident_layers = n_pinned;
    ss->src.release_layer = spine_release;
    ss->src.held_elsewhere = spine_held_elsewhere;
    ss->src.mat = spine_mat;
    ss->elsewhere = df_calloc((size_t)L, 1);
    ss->id = mat_store_id();
    pthread_mutex_init(&ss->mu, NULL);
    pthread_cond_init(&ss->done, NULL);
    if (map_embedding(ss)) return -1;
    if (ss->int8 && open_int8_files(ss, want_direct)) return -1;
    int most = 1; /* chunks of the largest group: the batch start_group submits */
    for (int g = 0; g < L + 2; g++) most = group_chunks(ss, g) > most ? group_chunks(ss, g) : most;
    ss->jobs = df_malloc(sizeof *ss->jobs * (size_t)most);
    for (int g = 0; g < L + 2; g++)
        if ((g < n_pinned || g >= L) && load_resident(ss, g)) return -1;
    if (n_pinned >= L) return 0;
    uint64_t cap = spine_stream_buf_bytes(ss, n_pinned);
    int chunks = 0;
    for (int l = n_pinned; l < L; l++) chunks = group_chunks(ss, l) > chunks ? group_chunks(ss, l) : chunks;
    ss->bufs = df_calloc(2, sizeof *ss->bufs);
    for (int i = 0; i < 2; i++) {
        SpineBuf *b = &ss->bufs[i];
        b->ss = ss, b->group = -1, b->state = BUF_EMPTY;
        b->mem = df_aligned_alloc(SHARD_ALIGN, cap);
        b->chunks = df_calloc((size_t)chunks, sizeof *b->chunks);
    }
    return 0;
}

void spine_end_load(SpineStore *ss) {
    int g = smalls_group(ss);
    free(ss->resident[g]);
    ss->resident[g] = NULL;
}

void spine_close(SpineStore *ss) {
    if (ss->resident)
        for (int g = 0; g < ss->n_groups; g++) free(ss->resident[g]);
    if (ss->bufs)
        for (int i = 0; i < 2; i++) free(ss->bufs[i].mem), free(ss->bufs[i].chunks);
    if (ss->embed) munmap((void *)ss->embed, ss->embed_map_len);
    if (ss->src.acquire_layer) pthread_mutex_destroy(&ss->mu), pthread_cond_destroy(&ss->done);
    if (ss->i8files.fd) shards_close(&ss->i8files);
    free(ss->tensor_i8), free(ss->i8t), free(ss->i8_first), free(ss->i8_count);
    free(ss->bufs), free(ss->elsewhere), free(ss->resident), free(ss->runs), free(ss->run_first), free(ss->run_count);
    free(ss->group_bytes), free(ss->tensor_group), free(ss->tensor_off), free(ss->jobs);
    memset(ss, 0, sizeof *ss);
}
