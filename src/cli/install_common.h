/* install_common.h - what setup, fetch, warm and doctor say about an install, in one place. */
#ifndef DF_INSTALL_COMMON_H
#define DF_INSTALL_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include "fetch/installer.h"

/* setup may install into `root` when it is new, empty or an install (it holds deltafin's
 * manifest); anything else holds files that are not ours, refused unless force. */
int install_check_root(const char *root, int force);
/* need bytes fit in free_b with a reserve (1% + 64 MiB) left for the system. */
int install_fits(uint64_t need, uint64_t free_b);
/* The space kept free beyond `need`. */
uint64_t install_reserve(uint64_t need);
/* What to do when setup or fetch may not write into the install. */
#define INSTALL_WRITER_TODO "run it as a user who may write there (the install's owner), or where it is mounted read-write"
/* Opens the install at root that fetch and warm complete: online unless dry (nothing is
 * downloaded then); refused when root holds no deltafin manifest. 0, or -1 with a message. */
int install_open_managed(Installer **in, const char *root, int dry, const FetchOptions *fetch);
/* Verifies (installer_verify) and prints plainly what was checked and how. */
int install_verify_report(Installer *in, uint64_t recheck_upto, int apply);
/* doctor's words on where the install comes from and whether this process can complete it: the
 * source the fetch settings name against the recorded one, write access to the directory. Prints
 * its lines to f and returns the number of problems (a streaming install that cannot be completed
 * from here; a complete one needs neither). */
int install_access_report(Installer *in, const FetchOptions *fetch, FILE *f);
/* One line on how the install is tied to its revision (pinned commit, ETags, or sizes only). */
void install_revision_report(Installer *in, FILE *f);
/* Local/missing summary, with the exact fetch command when experts are missing. */
void install_report(Installer *in, FILE *f);
/* Parses "1-40,45" into want[0..n_layers); every layer must be a MoE layer. */
int parse_layer_spec(const char *spec, const K3Config *cfg, uint8_t *want);

#endif
