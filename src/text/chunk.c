#include "text/chunk.h"

#include "text/utf8.h"

void chunk_iter_init(ChunkIter *it, const uint8_t *s, size_t n) {
    *it = (ChunkIter){.s = s, .n = n, .max_chars = CHUNK_MAX_CHARS, .max_run = CHUNK_MAX_RUN};
}

static uint32_t char_at(const ChunkIter *it, size_t i, size_t *len) {
    uint32_t cp;
    utf8_next(it->s + i, it->n - i, &cp, len);
    return cp;
}

/* Opens the slice of up to max_chars characters that starts at it->pos. */
static void open_slice(ChunkIter *it) {
    size_t i = it->pos, chars = 0;
    while (i < it->n && chars < it->max_chars) {
        i++;
        while (i < it->n && (it->s[i] & 0xC0) == 0x80) i++; /* skip continuation bytes */
        chars++;
    }
    it->slice_end = i;
    it->scan = it->pos;
    size_t len;
    it->run_space = utf8_is_pyspace(char_at(it, it->pos, &len));
    it->run = 0;
}

int chunk_next(ChunkIter *it, size_t *start, size_t *len) {
    if (it->pos >= it->n) return 0;
    if (it->pos == it->slice_end) open_slice(it);
    while (it->scan < it->slice_end) {
        size_t clen;
        int space = utf8_is_pyspace(char_at(it, it->scan, &clen));
        if (space != it->run_space) {
            it->run = 1, it->run_space = space;
        } else if (++it->run > it->max_run) {
            *start = it->pos, *len = it->scan - it->pos;
            it->pos = it->scan;
            it->run = 1;
            it->scan += clen;
            return 1;
        }
        it->scan += clen;
    }
    *start = it->pos, *len = it->slice_end - it->pos;
    it->pos = it->slice_end;
    return 1;
}
