/* install_common.h - what setup, fetch, warm and doctor say about an install, in one place. */
#ifndef DF_INSTALL_COMMON_H
#define DF_INSTALL_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include "fetch/installer.h"

/* need bytes fit in free_b with a reserve (1% + 64 MiB) left for the system. */
int install_fits(uint64_t need, uint64_t free_b);
/* The space kept free beyond `need`. */
uint64_t install_reserve(uint64_t need);
/* The source as messages show it ("?" if invalid). */
const char *install_source_display(const FetchOptions *o);
/* Hashes complete shards against published SHA-256s and prints what was verified. */
int install_verify_report(Installer *in);
/* Local/missing summary, with the exact fetch command when experts are missing. */
void install_report(Installer *in, FILE *f);
/* Parses "1-40,45" into want[0..n_layers); every layer must be a MoE layer. */
int parse_layer_spec(const char *spec, const K3Config *cfg, uint8_t *want);

#endif
