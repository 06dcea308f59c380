/* The cost of the seccomp supervisor, measured from inside a run and, for
 * the baseline, outside one (see the report in the commit that added it):
 *
 *   cc -O2 -pthread -o /tmp/supervise_cost tests/bench/supervise_cost.c
 *   /tmp/supervise_cost chmod  FILE  N          # a notified syscall
 *   /tmp/supervise_cost connect PORT N          # TCP to 127.0.0.1:PORT (addrlen 16: not notified)
 *   /tmp/supervise_cost unix   PATH  N          # unix connect (notified, done by the supervisor)
 *   /tmp/supervise_cost udp    PORT  N [LEN]    # UDP connect (no handshake: the syscall path only);
 *                                               # LEN 16 is not notified, 128 (sockaddr_storage) is
 *                                               # notified and continued
 *   lockrun --worktree WT --allow-local 127.0.0.1:PORT -- /tmp/supervise_cost ...
 *
 * Prints the mean nanoseconds per operation. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int srv;
static void *acceptor(void *arg) {
    (void)arg;
    for (;;) {
        int c = accept(srv, NULL, NULL);
        if (c < 0) return NULL;
        close(c);
    }
}

static void die(const char *what) { perror(what); exit(1); }

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) { fprintf(stderr, "usage: %s chmod|connect|unix ARG N\n", argv[0]); return 2; }
    long n = atol(argv[3]);
    long long t0, t1;
    pthread_t th;
    if (!strcmp(argv[1], "chmod")) {
        t0 = now_ns();
        for (long i = 0; i < n; i++)
            if (chmod(argv[2], (i & 1) ? 0600 : 0644)) die("chmod");
        t1 = now_ns();
    } else if (!strcmp(argv[1], "connect")) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int one = 1;
        srv = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(srv, (void *)&a, sizeof a) || listen(srv, 128)) die("listen");
        pthread_create(&th, NULL, acceptor, NULL);
        t0 = now_ns();
        for (long i = 0; i < n; i++) {
            int s = socket(AF_INET, SOCK_STREAM, 0);
            /* Close with RST: no TIME_WAIT pile-up to slow the port search. */
            struct linger l = { .l_onoff = 1, .l_linger = 0 };
            setsockopt(s, SOL_SOCKET, SO_LINGER, &l, sizeof l);
            if (connect(s, (void *)&a, sizeof a)) die("connect");
            close(s);
        }
        t1 = now_ns();
    } else if (!strcmp(argv[1], "udp")) {
        struct sockaddr_storage st;
        struct sockaddr_in *a = (void *)&st;
        memset(&st, 0, sizeof st);
        a->sin_family = AF_INET;
        a->sin_port = htons(atoi(argv[2]));
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = argc == 5 ? (socklen_t)atoi(argv[4]) : sizeof *a;
        int s = socket(AF_INET, SOCK_DGRAM, 0);
        t0 = now_ns();
        for (long i = 0; i < n; i++)
            if (connect(s, (void *)&st, len)) die("connect");
        t1 = now_ns();
        close(s);
    } else if (!strcmp(argv[1], "unix")) {
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        strncpy(a.sun_path, argv[2], sizeof a.sun_path - 1);
        unlink(argv[2]);
        srv = socket(AF_UNIX, SOCK_STREAM, 0);
        if (bind(srv, (void *)&a, sizeof a) || listen(srv, 128)) die("listen");
        pthread_create(&th, NULL, acceptor, NULL);
        t0 = now_ns();
        for (long i = 0; i < n; i++) {
            int s = socket(AF_UNIX, SOCK_STREAM, 0);
            if (connect(s, (void *)&a, sizeof a)) die("connect");
            close(s);
        }
        t1 = now_ns();
        unlink(argv[2]);
    } else {
        return 2;
    }
    printf("%s %.0f ns/op\n", argv[1], (double)(t1 - t0) / n);
    return 0;
}
