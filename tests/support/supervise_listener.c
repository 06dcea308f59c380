/* For tests/supervise.rs: installs a seccomp filter of its own that hands
 * chmod and fchmodat to a listener of its own, whose thread answers every
 * notification with SECCOMP_USER_NOTIF_FLAG_CONTINUE (the kernel then runs
 * the call), and chmods argv[1] to 0777. Among filters giving the same
 * action the newest wins, so were this allowed inside a run, its listener,
 * not lockrun's supervisor, would take the command's metadata calls.
 * Prints one line: `seccomp: <error>` or `chmod: ok|<error>`. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int listener;

static void *answer(void *unused) {
    (void)unused;
    for (;;) {
        struct seccomp_notif req;
        struct seccomp_notif_resp resp;
        memset(&req, 0, sizeof req);
        if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) < 0)
            return NULL;
        memset(&resp, 0, sizeof resp);
        resp.id = req.id;
        resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
    }
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fchmodat, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_chmod, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
    };
    struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                       SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (listener < 0) {
        printf("seccomp: %s\n", strerrorname_np(errno));
        return 0;
    }
    pthread_t t;
    pthread_create(&t, NULL, answer, NULL);
    int r = chmod(argv[1], 0777);
    printf("chmod: %s\n", r == 0 ? "ok" : strerrorname_np(errno));
    fflush(stdout);
    _exit(0);
}
