/* options.h - how weights are stored and read: the K3_STORE family of settings, apart from the
 * stores that follow them (stream.h, mapped.h), so that the engine's options can carry them
 * without its callers seeing the stores' types. The caller validates them (the CLI's settings). */
#ifndef DF_STORE_OPTIONS_H
#define DF_STORE_OPTIONS_H

#include <stdint.h>

#include "model/cache_index.h"

typedef enum { STORE_AUTO, STORE_MAPPED, STORE_STREAM } StoreKind;

/* How reads are run (iopool.h): a pool of threads, or io_uring's queue. */
typedef enum { IO_THREADS, IO_URING } IoBackend;

typedef struct {
    StoreKind kind;          /* K3_STORE: AUTO streams when the checkpoint exceeds the budget */
    uint64_t ram_bytes;      /* K3_RAM_GB: the memory budget; 0: measured (budget.h) */
    int pin_layers;          /* K3_PIN_LAYERS: spine layers kept resident; -1: as many as fit */
    CachePolicy policy;      /* K3_CACHE_POLICY */
    IoBackend io;            /* K3_IO: how reads are run (iopool.h) */
    int io_threads;          /* K3_IO_THREADS: parallel reads (threads, or reads in flight), >= 1 */
    int prefetch;            /* K3_PREFETCH: expert guesses and read-ahead of the next streamed layer */
    int lookahead;           /* K3_LOOKAHEAD: read router lookahead's guesses */
    int populate;            /* K3_POPULATE: prepare the expert cache's pages in the background */
    int direct;              /* K3_DIRECT: O_DIRECT reads where the file system allows them */
} StoreOptions;

#endif
