/* platform.h - what Linux and macOS do differently, one small function each, so that no other file
 * needs an #ifdef for the operating system. Linux is the reference: each function says what it
 * does there and what takes its place on macOS (Apple Silicon; compiled with `make macos-check`,
 * not run on a Mac). Other POSIX systems get the macOS forms where they have them.
 *
 * Nothing here allocates, reads the environment or ends the process. */
#ifndef DF_PLATFORM_H
#define DF_PLATFORM_H

#include <signal.h>
#include <sys/stat.h>
#include <stddef.h>
#include <stdint.h>

/* The system and the processor architecture the binary was built for ("Linux", "macOS"; "x86-64",
 * "AArch64"), for --version and messages. */
const char *plat_os_name(void);
const char *plat_arch_name(void);

/* ---- file data outside the page cache ---- */

/* open(2) with the file's data kept out of the page cache: O_DIRECT on Linux (transfers must then
 * be aligned to the file system's block; a file system that refuses fails with EINVAL, at open or
 * at the first transfer), F_NOCACHE on macOS (any alignment; a hint, never refused). The
 * descriptor, or -1 with errno. */
int plat_open_uncached(const char *path, int flags, unsigned mode);
/* What plat_open_uncached uses, for messages: "O_DIRECT" or "F_NOCACHE". */
const char *plat_uncached_name(void);
/* Turns that off again for fd (the unaligned tail of a write). 0, or -1 with errno. */
int plat_uncached_off(int fd);
/* Asks the system to drop [off, off + len) of fd's file from the page cache (after a buffered
 * read that should not stay there): posix_fadvise DONTNEED on Linux, nothing on macOS (where the
 * file is read with F_NOCACHE instead). A hint: nothing to check. */
void plat_drop_cached(int fd, uint64_t off, uint64_t len);
/* fdatasync(2) on Linux, fsync(2) on macOS (which has no declared fdatasync). 0 or -1 with errno. */
int plat_datasync(int fd);

/* ---- memory ---- */

/* Prepares the pages of [addr, addr + len) (fresh anonymous memory) for writing without touching
 * their content: MADV_POPULATE_WRITE on Linux 5.14+. 0, or -1 where the system has no such call
 * (older kernels, macOS): the pages then fault in when first written. */
int plat_prefault(void *addr, size_t len);
/* Memory that other programs are not using and the system could give this process, in bytes, 0
 * when unknown: MemAvailable (/proc/meminfo) on Linux; on macOS the free and inactive pages
 * (host_statistics64), at most hw.memsize (sysctl). *what names the figure for the start-up line. */
uint64_t plat_mem_available(const char **what);

/* ---- processes and threads ---- */

/* Cores this process may run on: its CPU affinity on Linux, the online cores elsewhere (>= 1). */
int plat_cpu_count(void);
/* The absolute path of the running executable into buf (NUL-terminated): /proc/self/exe on Linux,
 * _NSGetExecutablePath on macOS. 0, or -1 with errno (ENAMETOOLONG when it does not fit). */
int plat_exe_path(char *buf, size_t n);
/* Waits up to `seconds` for one of the signals in `set` (which the caller keeps blocked) and
 * takes it: its number, or 0 when none came (timeout, interrupted). sigtimedwait on Linux; macOS
 * has none, so there the pending set is polled every few milliseconds. */
int plat_wait_signal(const sigset_t *set, double seconds);

/* ---- descriptors ---- */

/* A file's last modification time from its stat: st_mtim on Linux, st_mtimespec on macOS. */
struct timespec plat_mtime(const struct stat *st);

/* A pipe whose two ends close on exec and never block: pipe2 on Linux, pipe and fcntl on macOS
 * (which has no pipe2). 0, or -1 with errno. */
int plat_pipe_nonblock(int fds[2]);
/* A stream socket of `family` (AF_INET, AF_INET6) that closes on exec and never blocks: one socket
 * call on Linux, socket and fcntl on macOS (which has no SOCK_CLOEXEC). The descriptor, or -1
 * with errno. */
int plat_socket_nonblock(int family);

/* ---- C library ---- */

/* qsort with a context pointer handed to the comparison: glibc's qsort_r order of arguments (macOS
 * has the same function with the context first). */
void plat_qsort_r(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *, void *), void *ctx);

#endif
