/* shardio.h - positional reads of shard byte ranges that bypass the page cache.
 *
 * Every shard is opened once. With O_DIRECT (the default where the file system accepts it) reads
 * go straight from disk into the caller's aligned buffer, so streamed weights never evict what
 * the page cache should keep; where O_DIRECT is refused the shards are read buffered and the read
 * range is dropped from the page cache afterwards (posix_fadvise DONTNEED). Either way a read
 * covers the 4 KiB-aligned superset of the requested range, so the bytes land at
 * buf + (offset % SHARD_ALIGN) in both modes.
 *
 * A read that cannot be completed - I/O error, shard truncated, shard deleted or replaced while
 * open - fails with a message naming the file and the byte range. Reads are thread-safe. */
#ifndef DF_SHARDIO_H
#define DF_SHARDIO_H

#include <stdint.h>

#include "format/catalog.h"

#define SHARD_ALIGN 4096u

typedef struct {
    int n;
    int *fd;
    char **path;
    int direct;        /* 1: O_DIRECT reads; 0: buffered + DONTNEED */
    int refused;       /* O_DIRECT was wanted but the file system refused it */
} Shards;

/* want_direct 0 forces buffered reads (K3_DIRECT=0). */
int shards_open(Shards *s, const Catalog *cat, int want_direct);
/* The same for any n files (paths copied): derived files read like shards (the int8 spine). */
int shards_open_paths(Shards *s, int n, char *const *paths, int want_direct);
void shards_close(Shards *s);

/* Buffer bytes a read of [offset, offset+len) needs (aligned superset). */
uint64_t shard_read_cap(uint64_t offset, uint64_t len);

/* Reads [offset, offset+len) of shard i into buf (SHARD_ALIGN-aligned, shard_read_cap bytes);
 * the data starts at buf + offset % SHARD_ALIGN. `what` names the content in messages. */
int shard_read(const Shards *s, int i, uint64_t offset, uint64_t len, uint8_t *buf, const char *what);

/* The same for an already aligned piece: reads alen bytes at aoff (both aligned) and requires at
 * least `need` of them (a piece may end past the file's end only when need says so). */
int shard_read_aligned(const Shards *s, int i, uint64_t aoff, uint64_t alen, uint64_t need, uint8_t *buf,
                       const char *what);

/* The end of such a read done elsewhere (the I/O pool): got bytes arrived, err is the errno that
 * stopped it (0: none, or the end of the file). Returns 0 when at least `need` bytes arrived and
 * the file is still the install's, else -1 with the message shard_read_aligned gives. */
int shard_read_finish(const Shards *s, int i, uint64_t aoff, uint64_t alen, uint64_t need, uint64_t got, int err,
                      const char *what);

#endif
