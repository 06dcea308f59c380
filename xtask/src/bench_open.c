// `open`+`close` of one file in a loop, for `cargo xtask bench`'s file
// table: prints the nanoseconds each pair took (the mean of COUNT).
//
//   bench_open FILE COUNT
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: bench_open FILE COUNT\n");
        return 2;
    }
    long n = atol(argv[2]);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            perror(argv[1]);
            return 1;
        }
        close(fd);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.0f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
    return 0;
}
