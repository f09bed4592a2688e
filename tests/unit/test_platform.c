/* The platform layer (util/platform.h) on the system it runs on (Linux here, AArch64 under qemu
 * too): each call does what the header promises, checked against what the test can see by other
 * means (the file system, /proc where it exists, a signal the test raised, a comparison it counts). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "util/platform.h"

static void names_the_system_and_architecture(void) {
#if defined(__linux__)
    CHECK(!strcmp(plat_os_name(), "Linux") && !strcmp(plat_uncached_name(), "O_DIRECT"));
#endif
#if defined(__x86_64__)
    CHECK(!strcmp(plat_arch_name(), "x86-64"));
#elif defined(__aarch64__)
    CHECK(!strcmp(plat_arch_name(), "AArch64"));
#endif
}

static const char *argv0;

/* The executable's path is absolute, names this program, and is the file that runs (the same
 * inode as the path it was started by); a buffer too small is refused, not cut. */
static void exe_path_is_this_program(void) {
    char path[4096];
    CHECK(plat_exe_path(path, sizeof path) == 0);
    CHECK_MSG(path[0] == '/', "%s", path);
    const char *base = strrchr(path, '/');
    CHECK_MSG(base && !strcmp(base, "/test_platform"), "%s", path);
    struct stat a, b;
    CHECK(stat(path, &a) == 0);
    CHECK(stat(argv0, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev);
    char tiny[8];
    errno = 0;
    CHECK(plat_exe_path(tiny, sizeof tiny) == -1 && errno == ENAMETOOLONG);
}

static void counts_cores_and_memory(void) {
    int cores = plat_cpu_count();
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK_MSG(cores >= 1 && (online <= 0 || cores <= online), "%d cores of %ld online", cores, online);
    const char *what = NULL;
    uint64_t avail = plat_mem_available(&what);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    CHECK(what && *what);
    CHECK_MSG(avail > (16u << 20) && (pages <= 0 || avail <= (uint64_t)pages * (uint64_t)page),
              "%s %llu bytes of %ld pages", what, (unsigned long long)avail, pages);
}

/* An uncached file reads and writes what a cached one does (aligned transfers, as O_DIRECT wants),
 * and turning it off allows an unaligned tail; dropping the cache is harmless. */
static void uncached_files_read_and_write(void) {
    char path[] = "/tmp/deltafin-platform-XXXXXX";
    int tmp = mkstemp(path);
    CHECK(tmp >= 0);
    close(tmp);
    int fd = plat_open_uncached(path, O_WRONLY | O_TRUNC, 0600);
    int uncached = fd >= 0;
    if (!uncached) fd = open(path, O_WRONLY | O_TRUNC); /* a file system without O_DIRECT (tmpfs) */
    CHECK_MSG(fd >= 0, "%s: %s", path, strerror(errno));
    enum { BLOCK = 4096 };
    unsigned char *buf = NULL;
    CHECK(posix_memalign((void **)&buf, BLOCK, 2 * BLOCK) == 0);
    for (int i = 0; i < 2 * BLOCK; i++) buf[i] = (unsigned char)(i * 7 + 3);
    ssize_t w = write(fd, buf, BLOCK);
    if (w < 0 && uncached && errno == EINVAL) { /* refused at the first transfer */
        CHECK(plat_uncached_off(fd) == 0);
        w = write(fd, buf, BLOCK);
    }
    CHECK(w == BLOCK);
    CHECK(plat_uncached_off(fd) == 0);
    CHECK(write(fd, buf + BLOCK, 100) == 100); /* an unaligned tail */
    CHECK(plat_datasync(fd) == 0);
    CHECK(close(fd) == 0);
    unsigned char back[BLOCK + 100];
    fd = open(path, O_RDONLY);
    CHECK(fd >= 0 && read(fd, back, sizeof back) == (ssize_t)sizeof back);
    CHECK(!memcmp(back, buf, sizeof back));
    plat_drop_cached(fd, 0, sizeof back);
    CHECK(pread(fd, back, 10, 5) == 10 && !memcmp(back, buf + 5, 10));
    close(fd);
    unlink(path);
    free(buf);
}

/* Prefaulted memory is writable and still zero (the call does not touch the content), or the call
 * says it has nothing to offer. */
static void prefault_keeps_fresh_pages_zero(void) {
    size_t len = 1u << 20;
    unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    if (plat_prefault(p, len) != 0) CHECK(errno == ENOSYS || errno == EINVAL);
    size_t nonzero = 0;
    for (size_t i = 0; i < len; i++) nonzero += p[i] != 0;
    CHECK(nonzero == 0);
    p[len - 1] = 1;
    munmap(p, len);
}

typedef struct {
    const int *key;
    int calls;
} ByKey;

static int by_key(const void *a, const void *b, void *ctx) {
    ByKey *k = ctx;
    k->calls++;
    int x = k->key[*(const int *)a], y = k->key[*(const int *)b];
    return (x > y) - (x < y);
}

/* The comparison gets the context, in glibc's order of arguments, wherever the system puts it. */
static void qsort_r_passes_the_context(void) {
    const int key[8] = {50, 10, 40, 20, 30, 0, 70, 60};
    ByKey k = {key, 0};
    int ids[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    plat_qsort_r(ids, 8, sizeof ids[0], by_key, &k);
    const int want[8] = {5, 1, 3, 4, 2, 0, 7, 6};
    CHECK(!memcmp(ids, want, sizeof want));
    CHECK(k.calls > 0);
}

/* A blocked signal that is pending is taken and named; with none, the wait ends after its time. */
static void wait_signal_takes_a_pending_one(void) {
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    CHECK(pthread_sigmask(SIG_BLOCK, &set, &old) == 0);
    CHECK(plat_wait_signal(&set, 0.05) == 0);
    CHECK(raise(SIGUSR1) == 0);
    CHECK(plat_wait_signal(&set, 5.0) == SIGUSR1);
    CHECK(plat_wait_signal(&set, 0.01) == 0); /* taken: no longer pending */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Both ends of the pipe, and the socket, close on exec and never block: a read of the empty
 * pipe fails with EAGAIN at once, and what is written comes out. */
static void pipe_and_socket_close_on_exec_and_never_block(void) {
    int fds[2];
    CHECK(plat_pipe_nonblock(fds) == 0);
    for (int i = 0; i < 2; i++) {
        CHECK(fcntl(fds[i], F_GETFD) & FD_CLOEXEC);
        CHECK(fcntl(fds[i], F_GETFL) & O_NONBLOCK);
    }
    char c = 0;
    errno = 0;
    CHECK(read(fds[0], &c, 1) == -1 && (errno == EAGAIN || errno == EWOULDBLOCK));
    CHECK(write(fds[1], "x", 1) == 1 && read(fds[0], &c, 1) == 1 && c == 'x');
    close(fds[0]), close(fds[1]);
    int s = plat_socket_nonblock(AF_INET);
    CHECK(s >= 0);
    if (s >= 0) {
        CHECK(fcntl(s, F_GETFD) & FD_CLOEXEC);
        CHECK(fcntl(s, F_GETFL) & O_NONBLOCK);
        close(s);
    }
}

int main(int argc, char **argv) {
    (void)argc;
    argv0 = argv[0];
    RUN(names_the_system_and_architecture);
    RUN(exe_path_is_this_program);
    RUN(counts_cores_and_memory);
    RUN(uncached_files_read_and_write);
    RUN(prefault_keeps_fresh_pages_zero);
    RUN(qsort_r_passes_the_context);
    RUN(wait_signal_takes_a_pending_one);
    RUN(pipe_and_socket_close_on_exec_and_never_block);
    return check_summary();
}
