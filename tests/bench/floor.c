/* The floor for a Redis lock wrapper: only the work lockrun cannot avoid.
 *
 *   floor HOST PORT KEY COMMAND [ARGS]...
 *
 * TCP connect, one EVAL that takes the lock (SET NX PX) and hands out a fence (INCR), fork +
 * exec of the command, waitpid, one EVAL that deletes the key if it is still ours. No renewal,
 * no signal forwarding, no queue, no logging, no history: a benchmark reference, built by
 * tests/bench/run.sh, never shipped. Its run time is the distance to the physical limit in the
 * overhead table; its two EVALs are the floor of the server cost per lock cycle.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *ACQUIRE =
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
    "return redis.call('INCR', KEYS[2]) end return 0";
static const char *RELEASE =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
    "return 0";

/* Appends one RESP bulk string. */
static size_t bulk(char *out, size_t at, const char *s) {
    return at + (size_t)sprintf(out + at, "$%zu\r\n%s\r\n", strlen(s), s);
}

/* Sends EVAL script with keys/args, reads one reply line; returns its integer (or -1). */
static long eval(int fd, const char *script, int nkeys, const char **words, int nwords) {
    char req[4096], reply[256];
    size_t n = (size_t)sprintf(req, "*%d\r\n", 3 + nwords);
    n = bulk(req, n, "EVAL");
    n = bulk(req, n, script);
    char count[16];
    snprintf(count, sizeof count, "%d", nkeys);
    n = bulk(req, n, count);
    for (int i = 0; i < nwords; i++) n = bulk(req, n, words[i]);
    if (write(fd, req, n) != (ssize_t)n) return -1;
    ssize_t got = read(fd, reply, sizeof reply - 1);
    if (got <= 0) return -1;
    reply[got] = 0;
    return reply[0] == ':' ? atol(reply + 1) : -1;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: floor HOST PORT KEY COMMAND [ARGS]...\n");
        return 64;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &addr.sin_addr);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) return 69;
    char token[32], fence_key[256];
    snprintf(token, sizeof token, "%d", getpid());
    snprintf(fence_key, sizeof fence_key, "floor:fence:{%s}", argv[3]);
    const char *acquire[] = {argv[3], fence_key, token, "30000"};
    if (eval(fd, ACQUIRE, 2, acquire, 4) <= 0) return 75;
    pid_t child = fork();
    if (child == 0) {
        close(fd);
        execvp(argv[4], argv + 4);
        _exit(127);
    }
    int status = 0;
    waitpid(child, &status, 0);
    const char *release[] = {argv[3], token};
    eval(fd, RELEASE, 1, release, 2);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
