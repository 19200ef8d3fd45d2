/* A wall-clock offset for one process (LD_PRELOAD), for the clock tests: a redis-server whose
 * CLOCK_REALTIME reads ahead of (or behind) everyone else's, and can be stepped while it runs.
 *
 * The offset, in milliseconds (signed, decimal), is read from the file named by
 * LOCKRUN_CLOCKSHIM_FILE at every call, so writing that file steps the clock at once. An empty
 * or unreadable file keeps the offset last read (a writer truncates before it writes). Only the
 * realtime clocks move (clock_gettime of CLOCK_REALTIME and CLOCK_REALTIME_COARSE,
 * gettimeofday, time): Redis expires keys by its wall clock, while CLOCK_MONOTONIC, which it
 * uses for timeouts and latency, must stay with the machine's.
 *
 * libfaketime hangs redis-server 7.0 at start (jemalloc calls clock_gettime while libfaketime
 * initialises itself with dlsym and malloc). This shim calls nothing that allocates: raw
 * system calls only, no dlsym, no stdio.
 *
 * Built by tests/support/clockshim.rs: cc -shared -fPIC -O2 -o clockshim.so clockshim.c */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ms;
static int fd = -2;

static long long current_offset(void) {
    if (fd == -2) {
        const char *path = getenv("LOCKRUN_CLOCKSHIM_FILE");
        fd = path ? (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC) : -1;
    }
    if (fd < 0) {
        return 0;
    }
    char buf[32];
    long n = syscall(SYS_pread64, fd, buf, sizeof buf - 1, 0L);
    if (n <= 0) {
        return offset_ms;
    }
    buf[n] = 0;
    long long v = 0;
    int neg = 0, digits = 0;
    char *p = buf;
    while (*p == ' ' || *p == '\t') {
        p++;
    }
    if (*p == '-' || *p == '+') {
        neg = *p == '-';
        p++;
    }
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        v = v * 10 + (*p - '0');
    }
    if (digits > 0) {
        offset_ms = neg ? -v : v;
    }
    return offset_ms;
}

static int real_clock_gettime(clockid_t clk, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, clk, ts);
}

static void shift(struct timespec *ts) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + current_offset() * 1000000LL;
    ts->tv_sec = (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000L;
        ts->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    int r = real_clock_gettime(clk, ts);
    if (r == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE)) {
        shift(ts);
    }
    return r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;
    struct timespec ts;
    int r = clock_gettime(CLOCK_REALTIME, &ts);
    if (r == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return r;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}
