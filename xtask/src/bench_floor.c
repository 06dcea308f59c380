// The floor of a lockrun run's start-up on this machine: the kernel calls a
// run makes that its promises cannot do without, in C and in one thread,
// and nothing else. Compiled and run by `cargo xtask bench` as one more
// "sandbox" beside bare, lockrun and the peers.
//
//   bench_floor SPEC CGROUP2_PARENT -- COMMAND [ARGS]...
//
// SPEC is `lockrun __kernel_steps`'s output (the Landlock rules a run builds
// here, its own filesystems, the kernel filesystems hidden, the machine's
// secrets masked, its seccomp program). Per run, as lockrun:
//   parent: a unified cgroup beneath CGROUP2_PARENT, and a pids and a memory
//           cgroup (v1, with their limits) beneath the ones it is in; the
//           child cloned into the first with CLONE_INTO_CGROUP, into a mount
//           and an IPC namespace of its own; waited for; the cgroups removed.
//   child:  joins the v1 cgroups (a write of 0 to `tasks`), descriptors
//           close-on-exec, oom_score_adj 1000, its mounts private, /dev/shm,
//           /dev/pts and /proc of its own, an mqueue instance, the kernel
//           filesystems under a read-only tmpfs, the secrets under an empty
//           0000 file or dir; a Landlock ruleset (every right of the ABI
//           handled, signal and abstract-socket scoping) with each rule's path
//           opened; securebits locked, the bounding and ambient sets emptied,
//           capset to nothing, no_new_privs; restrict_self; the seccomp program
//           with a notification listener (closed: nothing supervises it); exec.
// Not done (each costs lockrun more): the eBPF hooks' registration, the
// watchdog and its cgroup, the supervisor, the kernel audit reader, the run
// dir, the Landlock walk that finds the rules, the git and terminal guards.
// With FLOOR_TIMES set, each step's time goes to stderr.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/mount.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/securebits.h>

// Newer than this machine's headers (Debian 12's are Linux 6.1's).
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#define LANDLOCK_ACCESS_FS_IOCTL_DEV_ (1ULL << 15)
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET_ (1ULL << 0)
#define LANDLOCK_SCOPE_SIGNAL_ (1ULL << 1)
#define LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON_ (1U << 1)
#ifndef SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
#define SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (1UL << 5)
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

#define MAX_RULES 4096
#define MAX_INSNS 4096
#define FILE_RIGHTS                                                                  \
    (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE |                    \
     LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_IOCTL_DEV_)

struct rule {
    uint64_t rights;
    char *path;
};

static struct rule rules[MAX_RULES], owns[8], hides[64], masks[64];
static int n_rules, n_owns, n_hides, n_masks;
static struct sock_filter insns[MAX_INSNS];
static int n_insns;
static uint64_t handled, queue_rights;
static int times;
static struct timespec t0;

static void step(const char *what) {
    if (!times)
        return;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    fprintf(stderr, "floor: %7.1f us  %s\n",
            (t.tv_sec - t0.tv_sec) * 1e6 + (t.tv_nsec - t0.tv_nsec) / 1e3, what);
}

// The cgroups this run made, removed (deepest last made first) on every
// way out of the parent; the child leaves them to it.
static char made[3][4200];
static int n_made;
static pid_t parent;

static void remove_made(void) {
    while (n_made > 0)
        rmdir(made[--n_made]);
}

static void die(const char *what) {
    fprintf(stderr, "bench_floor: %s: %s\n", what, strerror(errno));
    if (getpid() == parent)
        remove_made();
    _exit(125);
}

static void read_spec(const char *spec) {
    FILE *f = fopen(spec, "r");
    if (!f)
        die(spec);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        if (line[n - 1] == '\n')
            line[n - 1] = 0;
        unsigned long long r;
        unsigned code, jt, jf, k;
        int at = 0;
        char kind[16];
        if (strncmp(line, "bpf ", 4) == 0) {
            // most of the lines: parsed by hand
            char *p = line + 4;
            code = strtoul(p, &p, 10);
            jt = strtoul(p, &p, 10);
            jf = strtoul(p, &p, 10);
            k = strtoul(p, &p, 10);
            if (n_insns < MAX_INSNS)
                insns[n_insns++] = (struct sock_filter){code, jt, jf, k};
        } else if (sscanf(line, "rule %llx %n", &r, &at) == 1 && at && n_rules < MAX_RULES) {
            rules[n_rules++] = (struct rule){r, strdup(line + at)};
        } else if (sscanf(line, "own %llx %n", &r, &at) == 1 && at && n_owns < 8) {
            owns[n_owns++] = (struct rule){r, strdup(line + at)};
        } else if (sscanf(line, "hide %n", &at) == 0 && at && n_hides < 64) {
            hides[n_hides++] = (struct rule){0, strdup(line + at)};
        } else if (sscanf(line, "mask %15s %n", kind, &at) == 1 && at && n_masks < 64) {
            masks[n_masks++] = (struct rule){strcmp(kind, "dir") == 0, strdup(line + at)};
        } else if (sscanf(line, "bpf %u %u %u %u", &code, &jt, &jf, &k) == 4 &&
                   n_insns < MAX_INSNS) {
            insns[n_insns++] = (struct sock_filter){code, jt, jf, k};
        } else if (sscanf(line, "handled %llx", &r) == 1) {
            handled = r;
        } else if (sscanf(line, "queues %llx", &r) == 1) {
            queue_rights = r;
        } else {
            errno = EINVAL;
            die(line);
        }
    }
    free(line);
    fclose(f);
    if (!handled || !n_insns) {
        errno = EINVAL;
        die("spec without rules or seccomp program");
    }
}

static void write_file(const char *path, const char *value) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, value, strlen(value)) != (ssize_t)strlen(value))
        die(path);
    close(fd);
}

// The cgroup this process is in, in the v1 hierarchy of `controller`.
static int own_v1(const char *controller, char *out, size_t len) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':'), *p = c ? strchr(c + 1, ':') : NULL;
        if (!p)
            continue;
        *p = 0;
        p[strcspn(p + 1, "\n") + 1] = 0;
        if (strcmp(c + 1, controller) == 0) {
            snprintf(out, len, "/sys/fs/cgroup/%s%s", controller, strcmp(p + 1, "/") ? p + 1 : "");
            found = 1;
        }
    }
    fclose(f);
    return found;
}

static int add_rule(int ruleset, int fd, uint64_t rights) {
    struct stat st;
    if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
        rights &= FILE_RIGHTS;
    struct landlock_path_beneath_attr attr = {.allowed_access = rights, .parent_fd = fd};
    return syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &attr, 0);
}

static int own_has(const char *path) {
    for (int i = 0; i < n_owns; i++)
        if (strcmp(owns[i].path, path) == 0)
            return 1;
    return 0;
}

static void child(char **argv, const int *tasks, int n_tasks, const char *sealed_dir,
                  const char *sealed_file) {
    signal(SIGPIPE, SIG_DFL);
    for (int i = 0; i < n_tasks; i++)
        if (write(tasks[i], "0", 1) != 1)
            die("joining a v1 cgroup");
    if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
        die("close_range");
    write_file("/proc/self/oom_score_adj", "1000");
    step("child: v1 cgroups joined, fds, oom_score_adj");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        die("making the mounts private");
    if (own_has("/dev/shm") &&
        mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0)
        die("/dev/shm");
    if (own_has("/dev/pts") && mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                                "newinstance,ptmxmode=0666,mode=0620") != 0)
        die("/dev/pts");
    if (own_has("/proc") && mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                 "hidepid=ptraceable") != 0)
        die("/proc");
    int fsfd = syscall(SYS_fsopen, "mqueue", FSOPEN_CLOEXEC);
    if (fsfd < 0 || syscall(SYS_fsconfig, fsfd, FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0)
        die("mqueue");
    int queues = syscall(SYS_fsmount, fsfd, FSMOUNT_CLOEXEC,
                         MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    if (queues < 0)
        die("fsmount mqueue");
    close(fsfd);
    if (own_has("/dev/mqueue") && syscall(SYS_move_mount, queues, "", AT_FDCWD, "/dev/mqueue",
                                     MOVE_MOUNT_F_EMPTY_PATH) != 0)
        die("/dev/mqueue");
    for (int i = 0; i < n_hides; i++)
        if (mount("tmpfs", hides[i].path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "mode=0555") != 0)
            die(hides[i].path);
    for (int i = 0; i < n_masks; i++)
        if (mount(masks[i].rights ? sealed_dir : sealed_file, masks[i].path, NULL, MS_BIND,
                  NULL) != 0)
            die(masks[i].path);
    step("child: own filesystems, hidden, masked");

    struct {
        uint64_t fs, net, scoped;
    } attr = {handled, 0, LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET_ | LANDLOCK_SCOPE_SIGNAL_};
    int ruleset = syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (ruleset < 0)
        die("landlock_create_ruleset");
    for (int i = 0; i < n_rules; i++) {
        int fd = open(rules[i].path, O_PATH | O_CLOEXEC);
        if (fd < 0)
            continue; // gone since the spec was made
        if (add_rule(ruleset, fd, rules[i].rights) != 0)
            die(rules[i].path);
        close(fd);
    }
    // The mqueue instance is granted by its fd below, mounted or not.
    for (int i = 0; i < n_owns; i++)
        if (strcmp(owns[i].path, "/dev/mqueue") != 0) {
            int fd = open(owns[i].path, O_PATH | O_CLOEXEC);
            if (fd < 0 || add_rule(ruleset, fd, owns[i].rights) != 0)
                die(owns[i].path);
            close(fd);
        }
    if (add_rule(ruleset, queues, queue_rights) != 0)
        die("the mqueue rule");
    close(queues);
    step("child: Landlock ruleset");

    unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                         SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                         SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0)
        die("securebits");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
        die("ambient");
    for (int cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0)
            die("bounding set");
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2] = {{0}};
    if (syscall(SYS_capset, &h, d) != 0)
        die("capset");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        die("no_new_privs");
    if (syscall(SYS_landlock_restrict_self, ruleset, LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON_) != 0)
        die("landlock_restrict_self");
    close(ruleset);
    step("child: capabilities, no_new_privs, Landlock applied");
    struct sock_fprog prog = {(unsigned short)n_insns, insns};
    int listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                           SECCOMP_FILTER_FLAG_NEW_LISTENER |
                               SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
                           &prog);
    if (listener < 0)
        die("seccomp");
    close(listener);
    step("child: seccomp loaded; exec");
    execvp(argv[0], argv);
    fprintf(stderr, "bench_floor: %s: %s\n", argv[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
}

int main(int argc, char **argv) {
    if (argc < 5 || strcmp(argv[3], "--") != 0) {
        fprintf(stderr, "usage: bench_floor SPEC CGROUP2_PARENT -- COMMAND [ARGS]...\n");
        return 2;
    }
    times = getenv("FLOOR_TIMES") != NULL;
    parent = getpid();
    // A reader of its times gone must not kill it before it removes its
    // cgroups (the child takes the default back before it execs).
    signal(SIGPIPE, SIG_IGN);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    read_spec(argv[1]);
    char sealed_dir[4096], sealed_file[4096];
    snprintf(sealed_dir, sizeof sealed_dir, "%s.sealed-dir", argv[1]);
    snprintf(sealed_file, sizeof sealed_file, "%s.sealed-file", argv[1]);
    step("spec read");

    char v2[4096], v1[2][4200];
    _Static_assert(sizeof made[0] >= sizeof v1[0], "a made path fits");
    int pid = getpid();
    snprintf(v2, sizeof v2, "%s/%d", argv[2], pid);
    if (mkdir(v2, 0755) != 0)
        die(v2);
    snprintf(made[n_made++], sizeof made[0], "%s", v2);
    int cgroup = open(v2, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cgroup < 0)
        die(v2);
    int tasks[2], n_v1 = 0;
    static const char *controllers[] = {"pids", "memory"};
    for (int i = 0; i < 2; i++) {
        char own[4096], file[4096 + 64];
        if (!own_v1(controllers[i], own, sizeof own))
            continue;
        snprintf(v1[n_v1], sizeof v1[n_v1], "%s/lockrun-floor-%d", own, pid);
        if (mkdir(v1[n_v1], 0755) != 0)
            die(v1[n_v1]);
        snprintf(made[n_made++], sizeof made[0], "%s", v1[n_v1]);
        if (i == 0) {
            snprintf(file, sizeof file, "%s/pids.max", v1[n_v1]);
            write_file(file, "4096");
        } else {
            char half[32];
            snprintf(half, sizeof half, "%lld",
                     (long long)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE) / 2);
            snprintf(file, sizeof file, "%s/memory.limit_in_bytes", v1[n_v1]);
            write_file(file, half);
            snprintf(file, sizeof file, "%s/memory.memsw.limit_in_bytes", v1[n_v1]);
            write_file(file, half);
        }
        snprintf(file, sizeof file, "%s/tasks", v1[n_v1]);
        tasks[n_v1] = open(file, O_WRONLY | O_CLOEXEC);
        if (tasks[n_v1] < 0)
            die(file);
        n_v1++;
    }
    step("cgroups made");

    struct clone_args args = {
        .flags = CLONE_INTO_CGROUP | CLONE_NEWNS | CLONE_NEWIPC,
        .exit_signal = SIGCHLD,
        .cgroup = (uint64_t)cgroup,
    };
    long child_pid = syscall(SYS_clone3, &args, sizeof args);
    if (child_pid < 0)
        die("clone3");
    if (child_pid == 0)
        child(argv + 4, tasks, n_v1, sealed_dir, sealed_file);
    int status;
    while (waitpid((pid_t)child_pid, &status, 0) < 0)
        if (errno != EINTR)
            die("waitpid");
    step("the command exec'd, ran and was reaped");
    while (n_made > 0) {
        if (rmdir(made[n_made - 1]) != 0)
            die(made[n_made - 1]);
        n_made--;
    }
    step("cgroups removed");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
