/* io_uring IORING_OP_CONNECT probe for tests/net.rs (no liburing needed).
 * Usage: net_uring <ipv4> <port>; waits for "go" on stdin, then prints
 * "ok" or "errno <n> <name>" for the connect submitted through the ring. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    char go[8] = {0};
    if (argc < 3 || !fgets(go, sizeof go, stdin) || strncmp(go, "go", 2)) return 2;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &sa.sin_addr);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    int fd = syscall(__NR_io_uring_setup, 4, &p);
    if (fd < 0) { printf("setup-errno %d\n", errno); return 3; }
    size_t sq_sz = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_sz = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    char *sq = mmap(0, sq_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING);
    char *cq = mmap(0, cq_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_CQ_RING);
    struct io_uring_sqe *sqes = mmap(0, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) { puts("mmap failed"); return 3; }
    unsigned *tail = (unsigned *)(sq + p.sq_off.tail);
    unsigned *mask = (unsigned *)(sq + p.sq_off.ring_mask);
    unsigned *array = (unsigned *)(sq + p.sq_off.array);
    unsigned idx = *tail & *mask;
    struct io_uring_sqe *e = &sqes[idx];
    memset(e, 0, sizeof *e);
    e->opcode = IORING_OP_CONNECT;
    e->fd = s;
    e->addr = (unsigned long)&sa;
    e->off = sizeof sa;
    array[idx] = idx;
    __atomic_store_n(tail, *tail + 1, __ATOMIC_RELEASE);
    if (syscall(__NR_io_uring_enter, fd, 1, 1, IORING_ENTER_GETEVENTS, 0, 0) < 0) {
        printf("enter-errno %d\n", errno);
        return 3;
    }
    unsigned *chead = (unsigned *)(cq + p.cq_off.head);
    struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    unsigned cmask = *(unsigned *)(cq + p.cq_off.ring_mask);
    int res = cqes[*chead & cmask].res;
    if (res < 0) {
        printf("errno %d %s\n", -res, -res == EPERM ? "EPERM" : "?");
        return 0;
    }
    if (write(s, "escaped\n", 8) != 8) { printf("errno %d write\n", errno); return 0; }
    puts("ok");
    return 0;
}
