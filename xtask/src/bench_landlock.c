// Landlock alone, for `cargo xtask bench`'s file table: the floor of what
// a Landlock sandbox adds to a file operation, with two rules and nothing
// else (no namespace, cgroup, seccomp or supervisor).
//
//   bench_landlock WORKTREE -- COMMAND [ARGS]...
//
// Every filesystem right of the running kernel's ABI handled; `/` granted
// execute, read-file and read-dir, WORKTREE every right; no_new_privs;
// restrict_self; exec.
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/landlock.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

// Each ABI's filesystem rights: bits 0-12 (1), refer (2), truncate (3),
// ioctl_dev (5).
static uint64_t rights(int abi) {
    uint64_t r = (1ULL << 13) - 1;
    if (abi >= 2) r |= 1ULL << 13;
    if (abi >= 3) r |= 1ULL << 14;
    if (abi >= 5) r |= 1ULL << 15;
    return r;
}

static int rule(int ruleset, const char *path, uint64_t allowed) {
    struct landlock_path_beneath_attr pb = {.allowed_access = allowed};
    pb.parent_fd = open(path, O_PATH | O_CLOEXEC);
    if (pb.parent_fd < 0 ||
        syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) != 0) {
        perror(path);
        return -1;
    }
    return close(pb.parent_fd);
}

int main(int argc, char **argv) {
    if (argc < 4 || strcmp(argv[2], "--") != 0) {
        fprintf(stderr, "usage: bench_landlock WORKTREE -- COMMAND [ARGS]...\n");
        return 2;
    }
    int abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi < 1) {
        perror("landlock");
        return 1;
    }
    struct landlock_ruleset_attr attr = {.handled_access_fs = rights(abi)};
    int ruleset = syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    uint64_t read = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE |
                    LANDLOCK_ACCESS_FS_READ_DIR;
    if (ruleset < 0 || rule(ruleset, "/", read) != 0 || rule(ruleset, argv[1], rights(abi)) != 0)
        return 1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) {
        perror("restrict_self");
        return 1;
    }
    execvp(argv[3], argv + 3);
    perror(argv[3]);
    return 127;
}
