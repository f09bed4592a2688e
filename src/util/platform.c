/* platform.c - the operating system's side of platform.h. Each function has its Linux form and,
 * after #else, the macOS one; nothing else in the code base tests which system it is built for. */
#include "util/platform.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifdef __linux__
#include <sched.h>
#endif
#ifdef __APPLE__
#include <mach-o/dyld.h>
#include <mach/mach.h>
#include <sys/sysctl.h>
#endif

const char *plat_os_name(void) {
#if defined(__linux__)
    return "Linux";
#elif defined(__APPLE__)
    return "macOS";
#else
    return "POSIX";
#endif
}

const char *plat_arch_name(void) {
#if defined(__x86_64__)
    return "x86-64";
#elif defined(__aarch64__)
    return "AArch64";
#else
    return "another architecture";
#endif
}

int plat_open_uncached(const char *path, int flags, unsigned mode) {
#ifdef __linux__
    return open(path, flags | O_DIRECT, (mode_t)mode);
#else
    int fd = open(path, flags, (mode_t)mode);
#ifdef F_NOCACHE
    if (fd >= 0) (void)fcntl(fd, F_NOCACHE, 1); /* a hint: the file reads and writes the same without it */
#endif
    return fd;
#endif
}

const char *plat_uncached_name(void) {
#ifdef __linux__
    return "O_DIRECT";
#else
    return "F_NOCACHE";
#endif
}

int plat_uncached_off(int fd) {
#ifdef __linux__
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl & ~O_DIRECT);
#elif defined(F_NOCACHE)
    return fcntl(fd, F_NOCACHE, 0) == -1 ? -1 : 0;
#else
    (void)fd;
    return 0;
#endif
}

void plat_drop_cached(int fd, uint64_t off, uint64_t len) {
#ifdef __linux__
    (void)posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
#else
    (void)fd, (void)off, (void)len;
#endif
}

int plat_datasync(int fd) {
#ifdef __linux__
    return fdatasync(fd);
#else
    return fsync(fd);
#endif
}

int plat_prefault(void *addr, size_t len) {
#ifdef MADV_POPULATE_WRITE
    return madvise(addr, len, MADV_POPULATE_WRITE);
#else
    (void)addr, (void)len;
    errno = ENOSYS;
    return -1;
#endif
}

#ifdef __linux__
uint64_t plat_mem_available(const char **what) {
    *what = "MemAvailable";
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[128];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}
#elif defined(__APPLE__)
uint64_t plat_mem_available(const char **what) {
    *what = "free + inactive memory";
    uint64_t physical = 0;
    size_t len = sizeof physical;
    if (sysctlbyname("hw.memsize", &physical, &len, NULL, 0) != 0) physical = 0;
    vm_statistics64_data_t vm;
    mach_msg_type_number_t count = HOST_VM_INFO64_COUNT;
    if (host_statistics64(mach_host_self(), HOST_VM_INFO64, (host_info64_t)&vm, &count) != KERN_SUCCESS) {
        *what = "physical memory";
        return physical;
    }
    uint64_t avail = ((uint64_t)vm.free_count + vm.inactive_count) * (uint64_t)vm_kernel_page_size;
    return physical && avail > physical ? physical : avail;
}
#else
uint64_t plat_mem_available(const char **what) {
    *what = "available memory";
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}
#endif

int plat_cpu_count(void) {
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int plat_exe_path(char *buf, size_t n) {
#ifdef __APPLE__
    char raw[4096];
    uint32_t size = sizeof raw;
    if (_NSGetExecutablePath(raw, &size) != 0) return errno = ENAMETOOLONG, -1;
    char *real = realpath(raw, NULL); /* the path it was started by may be relative or a link */
    if (!real) return -1;
    int fits = strlen(real) < n;
    if (fits) memcpy(buf, real, strlen(real) + 1);
    free(real);
    return fits ? 0 : (errno = ENAMETOOLONG, -1);
#else
    if (n < 2) return errno = ENAMETOOLONG, -1;
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    if (len <= 0) return -1;
    if ((size_t)len == n - 1) return errno = ENAMETOOLONG, -1; /* perhaps cut short */
    buf[len] = 0;
    return 0;
#endif
}

int plat_wait_signal(const sigset_t *set, double seconds) {
#ifdef __linux__
    struct timespec t = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    int sig = sigtimedwait(set, NULL, &t);
    return sig > 0 ? sig : 0;
#else
    const struct timespec slice = {0, 5 * 1000 * 1000};
    for (double waited = 0; waited < seconds; waited += 0.005) {
        sigset_t pending;
        if (sigpending(&pending) == 0)
            for (int s = 1; s < NSIG; s++)
                if (sigismember(set, s) == 1 && sigismember(&pending, s) == 1) {
                    int got = 0;
                    return sigwait(set, &got) == 0 ? got : 0;
                }
        nanosleep(&slice, NULL);
    }
    return 0;
#endif
}

#ifdef __APPLE__
typedef struct {
    int (*cmp)(const void *, const void *, void *);
    void *ctx;
} SortCall;

static int sort_call(void *thunk, const void *a, const void *b) {
    const SortCall *c = thunk;
    return c->cmp(a, b, c->ctx);
}
#endif

#ifndef __linux__
/* Sets close-on-exec and non-blocking on fd; closes it when that fails. 0, or -1 with errno. */
static int cloexec_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL), fdf = fcntl(fd, F_GETFD);
    if (fl < 0 || fdf < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) || fcntl(fd, F_SETFD, fdf | FD_CLOEXEC)) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return 0;
}
#endif

struct timespec plat_mtime(const struct stat *st) {
#ifdef __APPLE__
    return st->st_mtimespec;
#else
    return st->st_mtim;
#endif
}

int plat_pipe_nonblock(int fds[2]) {
#ifdef __linux__
    return pipe2(fds, O_CLOEXEC | O_NONBLOCK);
#else
    if (pipe(fds)) return -1;
    if (cloexec_nonblock(fds[0])) {
        int err = errno;
        close(fds[1]);
        errno = err;
        return -1;
    }
    if (cloexec_nonblock(fds[1])) {
        int err = errno;
        close(fds[0]);
        errno = err;
        return -1;
    }
    return 0;
#endif
}

int plat_socket_nonblock(int family) {
#ifdef __linux__
    return socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
#else
    int s = socket(family, SOCK_STREAM, 0);
    return s < 0 || cloexec_nonblock(s) ? -1 : s;
#endif
}

void plat_qsort_r(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *, void *), void *ctx) {
#ifdef __APPLE__
    SortCall c = {cmp, ctx};
    qsort_r(base, n, size, &c, sort_call);
#else
    qsort_r(base, n, size, cmp, ctx);
#endif
}
