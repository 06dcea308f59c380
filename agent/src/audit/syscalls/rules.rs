//! The run's kernel audit rules, and the host's rules read through the
//! audit netlink socket (`AUDIT_ADD_RULE`, `AUDIT_DEL_RULE`,
//! `AUDIT_LIST_RULES`: a `struct audit_rule_data` each, needing
//! `CAP_AUDIT_CONTROL`).
//!
//! A rule of lockrun's is one of three exact shapes ([`HostRule::lockruns`]):
//! the exit filter, `always`, and the fields `arch` of this build, `auid` of
//! lockrun's range and `exit`, each `=`; either `-EACCES` of every syscall
//! ([`Refused::Files`]), `-EXDEV` of the calls that link or rename a file
//! ([`Refused::Refer`], [`REFER_CALLS`]), or `-EPERM` of the calls that
//! signal a process or name a socket's address ([`Refused::Reach`],
//! [`REACH_CALLS`]). Nothing else is ever changed or deleted.

use std::os::fd::{AsRawFd as _, OwnedFd};

use nix::sys::socket::{recv, send, setsockopt, sockopt, MsgFlags};

use super::{is_lockruns, SyscallAuditError};
use crate::audit::kernel::{
    enable, nl_message, nl_socket, KernelAuditError, NLMSG_ERROR, NLMSG_HDRLEN, NLM_F_ACK,
    NLM_F_REQUEST,
};
use crate::kernel::{SyscallAudit, Unusable};
use crate::shown::say;

const AUDIT_GET: u16 = 1000;
const AUDIT_ADD_RULE: u16 = 1011;
const AUDIT_DEL_RULE: u16 = 1012;
const AUDIT_LIST_RULES: u16 = 1013;
const AUDIT_GET_FEATURE: u16 = 1019;
const NLMSG_DONE: u16 = 3;

/// Filter lists (`flags`, low bits).
const AUDIT_FILTER_TASK: u32 = 0x01;
const AUDIT_FILTER_EXIT: u32 = 0x04;
const AUDIT_FILTER_EXCLUDE: u32 = 0x05;
/// Put the rule first in its list (`auditctl -A`). The kernel clears it
/// once the rule is in: a rule is deleted (and listed) without it.
const AUDIT_FILTER_PREPEND: u32 = 0x10;
/// `action`.
const AUDIT_NEVER: u32 = 0;
const AUDIT_ALWAYS: u32 = 2;
/// `exit=-EACCES`, `exit=-EPERM`, `exit=-EXDEV`, as the kernel compares
/// them (32 bits).
const EXIT_EACCES: u32 = (-libc::EACCES).cast_unsigned();
const EXIT_EPERM: u32 = (-libc::EPERM).cast_unsigned();
const EXIT_EXDEV: u32 = (-libc::EXDEV).cast_unsigned();
/// Fields.
const AUDIT_LOGINUID: u32 = 9;
const AUDIT_ARCH: u32 = 11;
const AUDIT_MSGTYPE: u32 = 12;
const AUDIT_EXIT: u32 = 103;
/// Operators (`fieldflags`).
const AUDIT_BIT_MASK: u32 = 0x0800_0000;
const AUDIT_LESS_THAN: u32 = 0x1000_0000;
const AUDIT_GREATER_THAN: u32 = 0x2000_0000;
const AUDIT_NOT_EQUAL: u32 = 0x3000_0000;
const AUDIT_EQUAL: u32 = 0x4000_0000;
const AUDIT_BIT_TEST: u32 = 0x4800_0000;
const AUDIT_LESS_THAN_OR_EQUAL: u32 = 0x5000_0000;
const AUDIT_GREATER_THAN_OR_EQUAL: u32 = 0x6000_0000;
const AUDIT_OPERATORS: u32 = 0x7800_0000;
/// `struct audit_features`' bits.
pub(super) const FEATURE_ONLY_UNSET_LOGINUID: u32 = 1 << 0;
pub(super) const FEATURE_LOGINUID_IMMUTABLE: u32 = 1 << 1;

/// `AUDIT_BITMASK_SIZE`: the syscall mask's words; `AUDIT_MAX_FIELDS`.
const WORDS: usize = 64;
/// `struct audit_rule_data` without its strings: `flags`, `action`,
/// `field_count`, `mask`, `fields`, `values`, `fieldflags`, `buflen`.
const RULE_LEN: usize = 4 * 3 + 4 * WORDS * 4 + 4;

/// This build's audit architecture (`AUDIT_ARCH_X86_64`, `AUDIT_ARCH_AARCH64`).
#[cfg(target_arch = "x86_64")]
pub const ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
pub const ARCH: u32 = 0xc000_00b7;

/// The record types a refused call's account needs: `SYSCALL`, `PATH`,
/// `SOCKADDR` (the abstract name a connect gave), `CWD`, `EOE`. (`OBJ_PID`,
/// a signal's target, is not: the call's arguments name it too.)
const NEEDED: [u32; 5] = [1300, 1302, 1306, 1307, 1320];

/// The refused calls a rule of lockrun's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every call refused with `EACCES`: the run's filesystem refusals
    /// (Landlock ABI < 7).
    Files,
    /// The calls of [`REACH_CALLS`] refused with `EPERM`: the run's signals
    /// to processes outside it and its connects and sends to abstract
    /// sockets bound outside it, which Landlock ABI 6 scopes and does not
    /// log.
    Reach,
    /// The calls of [`REFER_CALLS`] refused with `EXDEV`: the run's links
    /// and renames, among them those Landlock refuses (`fs.refer`) and
    /// does not log (ABI < 7), which the reader tells from the kernel's
    /// own refusal of a move across mounts ([`super::refer`]).
    Refer,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Files => "its calls refused with EACCES",
            Self::Reach => "its signal and socket calls refused with EPERM",
            Self::Refer => "its link and rename calls refused with EXDEV",
        })
    }
}

/// The calls a [`Refused::Reach`] rule records: those that signal one
/// process (or a group) and those that name a socket address, whose
/// `SOCKADDR` record tells an abstract unix name from the inet and pathname
/// refusals the cgroup hooks record themselves.
pub const REACH_CALLS: [i64; 10] = [
    libc::SYS_kill,
    libc::SYS_tkill,
    libc::SYS_tgkill,
    libc::SYS_rt_sigqueueinfo,
    libc::SYS_rt_tgsigqueueinfo,
    libc::SYS_pidfd_send_signal,
    libc::SYS_connect,
    libc::SYS_sendto,
    libc::SYS_sendmsg,
    libc::SYS_sendmmsg,
];

/// The calls a [`Refused::Refer`] rule records: those that link or rename
/// a file, the calls Landlock's `fs.refer` right decides (`EXDEV`, which
/// the kernel also gives a move across two mounts).
#[cfg(target_arch = "x86_64")]
pub const REFER_CALLS: [i64; 5] = [
    libc::SYS_link,
    libc::SYS_linkat,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
];
#[cfg(target_arch = "aarch64")]
pub const REFER_CALLS: [i64; 2] = [libc::SYS_linkat, libc::SYS_renameat2];

/// The syscall mask of the rule of `calls` (`-S` each).
fn mask_of(calls: &[i64]) -> [u32; WORDS] {
    let mut mask = [0; WORDS];
    for nr in calls.iter().filter_map(|nr| usize::try_from(*nr).ok()) {
        mask[nr / 32] |= 1 << (nr % 32);
    }
    mask
}

/// A rule of the kernel's, as listed, or as lockrun sends one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HostRule {
    /// The filter list (with `AUDIT_FILTER_PREPEND` when sent).
    flags: u32,
    action: u32,
    mask: [u32; WORDS],
    /// (field, operator, value).
    fields: Vec<(u32, u32, u32)>,
    /// The strings of string fields (paths, keys), as they came.
    strings: Vec<u8>,
}

impl HostRule {
    /// lockrun's rule of `refused` for the run of `login_uid`: `-A
    /// exit,always -F arch=<this build's> -F auid=<login_uid>`, and `-F
    /// exit=-EACCES -S all`, `-F exit=-EXDEV -S link -S linkat …`
    /// ([`REFER_CALLS`]), or `-F exit=-EPERM -S kill -S tkill …`
    /// ([`REACH_CALLS`]).
    fn lockruns(login_uid: u32, refused: Refused) -> Self {
        let (mask, exit) = match refused {
            Refused::Files => ([u32::MAX; WORDS], EXIT_EACCES),
            Refused::Reach => (mask_of(&REACH_CALLS), EXIT_EPERM),
            Refused::Refer => (mask_of(&REFER_CALLS), EXIT_EXDEV),
        };
        Self {
            flags: AUDIT_FILTER_EXIT,
            action: AUDIT_ALWAYS,
            mask,
            fields: vec![
                (AUDIT_ARCH, AUDIT_EQUAL, ARCH),
                (AUDIT_LOGINUID, AUDIT_EQUAL, login_uid),
                (AUDIT_EXIT, AUDIT_EQUAL, exit),
            ],
            strings: Vec::new(),
        }
    }

    /// The login uid and kind of a rule of one of lockrun's shapes; `None`
    /// for any other. The syscall mask is not compared: the kernel keeps
    /// it without the bits that name syscall classes.
    fn ours(&self) -> Option<(u32, Refused)> {
        let [arch, auid, exit] = self.fields.as_slice() else {
            return None;
        };
        let uid = auid.2;
        let refused = match exit.2 {
            EXIT_EACCES => Refused::Files,
            EXIT_EPERM => Refused::Reach,
            EXIT_EXDEV => Refused::Refer,
            _ => return None,
        };
        let shape = [
            (AUDIT_ARCH, AUDIT_EQUAL, ARCH),
            (AUDIT_LOGINUID, AUDIT_EQUAL, uid),
            (AUDIT_EXIT, AUDIT_EQUAL, exit.2),
        ];
        if [*arch, *auid, *exit] != shape {
            return None;
        }
        (self.flags & !AUDIT_FILTER_PREPEND == AUDIT_FILTER_EXIT
            && self.action == AUDIT_ALWAYS
            && self.strings.is_empty()
            && is_lockruns(uid))
        .then_some((uid, refused))
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(RULE_LEN + self.strings.len());
        let mut word = |w: u32| b.extend_from_slice(&w.to_ne_bytes());
        word(self.flags);
        word(self.action);
        word(self.fields.len() as u32);
        self.mask.iter().copied().for_each(&mut word);
        for i in 0..WORDS {
            word(self.fields.get(i).map_or(0, |f| f.0));
        }
        for i in 0..WORDS {
            word(self.fields.get(i).map_or(0, |f| f.2));
        }
        for i in 0..WORDS {
            word(self.fields.get(i).map_or(0, |f| f.1));
        }
        word(self.strings.len() as u32);
        b.extend_from_slice(&self.strings);
        b
    }

    fn parse(p: &[u8]) -> Option<Self> {
        if p.len() < RULE_LEN {
            return None;
        }
        let word =
            |i: usize| u32::from_ne_bytes([p[i * 4], p[i * 4 + 1], p[i * 4 + 2], p[i * 4 + 3]]);
        let count = (word(2) as usize).min(WORDS);
        let mut mask = [0; WORDS];
        for (i, m) in mask.iter_mut().enumerate() {
            *m = word(3 + i);
        }
        let fields = (0..count)
            .map(|i| {
                let flags = word(3 + 3 * WORDS + i);
                (
                    word(3 + WORDS + i),
                    flags & AUDIT_OPERATORS,
                    word(3 + 2 * WORDS + i),
                )
            })
            .collect();
        let buflen = word(3 + 4 * WORDS) as usize;
        let strings = p.get(RULE_LEN..RULE_LEN + buflen)?.to_vec();
        Some(Self {
            flags: word(0),
            action: word(1),
            mask,
            fields,
            strings,
        })
    }

    /// Why this rule of the host's would leave a run's refused calls
    /// without their records, if it would: a `task,never` rule (whatever
    /// its fields: a run's processes may match them), or an `exclude` rule
    /// unless its fields are all message types that rule out every type
    /// needed. Exit rules cannot: lockrun's is put first.
    pub(super) fn silences(&self) -> Option<Unusable> {
        match self.flags & !AUDIT_FILTER_PREPEND {
            AUDIT_FILTER_TASK if self.action == AUDIT_NEVER => Some(Unusable::TaskNever),
            AUDIT_FILTER_EXCLUDE => {
                if self.fields.iter().any(|f| f.0 != AUDIT_MSGTYPE) {
                    return Some(Unusable::Excluded { msgtype: 0 });
                }
                NEEDED
                    .into_iter()
                    .find(|ty| self.fields.iter().all(|(_, op, v)| compare(*ty, *op, *v)))
                    .map(|msgtype| Unusable::Excluded { msgtype })
            }
            _ => None,
        }
    }
}

/// The kernel's `audit_comparator`.
fn compare(left: u32, op: u32, right: u32) -> bool {
    match op {
        AUDIT_EQUAL => left == right,
        AUDIT_NOT_EQUAL => left != right,
        AUDIT_LESS_THAN => left < right,
        AUDIT_LESS_THAN_OR_EQUAL => left <= right,
        AUDIT_GREATER_THAN => left > right,
        AUDIT_GREATER_THAN_OR_EQUAL => left >= right,
        AUDIT_BIT_MASK => left & right != 0,
        AUDIT_BIT_TEST => left & right == right,
        _ => false,
    }
}

fn sys(call: &'static str) -> impl FnOnce(nix::Error) -> SyscallAuditError {
    move |source| SyscallAuditError::Syscall { call, source }
}

/// A socket for requests, whose answers wait at most a second.
fn socket() -> Result<OwnedFd, SyscallAuditError> {
    let fd = nl_socket(0)?;
    setsockopt(
        &fd,
        sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(1, 0),
    )
    .map_err(sys("setsockopt(SO_RCVTIMEO)"))?;
    Ok(fd)
}

fn ask(fd: &OwnedFd, ty: u16, seq: u32, payload: &[u8]) -> Result<(), SyscallAuditError> {
    send(
        fd.as_raw_fd(),
        &nl_message(ty, NLM_F_REQUEST | NLM_F_ACK, seq, payload),
        MsgFlags::empty(),
    )
    .map(drop)
    .map_err(sys("send"))
}

/// Netlink messages in one datagram: (type, sequence number, payload).
fn split(buf: &[u8]) -> Vec<(u16, u32, &[u8])> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + NLMSG_HDRLEN <= buf.len() {
        let w = |i: usize| u32::from_ne_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        let len = w(off) as usize;
        let ty = u16::from_ne_bytes([buf[off + 4], buf[off + 5]]);
        let seq = w(off + 8);
        let end = if len >= NLMSG_HDRLEN && off + len <= buf.len() {
            off + len
        } else {
            buf.len()
        };
        out.push((ty, seq, &buf[off + NLMSG_HDRLEN..end]));
        off = end.next_multiple_of(4);
    }
    out
}

/// The errno of an `NLMSG_ERROR` payload (0: an acknowledgement).
fn errno_of(p: &[u8]) -> i32 {
    p.get(..4)
        .map_or(libc::EIO, |b| -i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

/// Send one rule change and wait for its acknowledgement, which the
/// kernel sends in the sending call.
fn change(ty: u16, rule: &HostRule) -> Result<(), SyscallAuditError> {
    changes(ty, std::slice::from_ref(rule))?
        .into_iter()
        .next()
        .unwrap_or(Ok(()))
}

/// Send the changes of `rules` in one datagram, which the kernel takes in
/// one call, each in turn (a deletion waits out an RCU grace period: two
/// in one call wait less than in two), and wait for their
/// acknowledgements: each change's outcome, in order; `Err` where the
/// socket failed.
fn changes(
    ty: u16,
    rules: &[HostRule],
) -> Result<Vec<Result<(), SyscallAuditError>>, SyscallAuditError> {
    let what = if ty == AUDIT_ADD_RULE {
        "AUDIT_ADD_RULE"
    } else {
        "AUDIT_DEL_RULE"
    };
    let fd = socket()?;
    let mut datagram = Vec::new();
    for (seq, rule) in (1..).zip(rules) {
        datagram.extend(nl_message(
            ty,
            NLM_F_REQUEST | NLM_F_ACK,
            seq,
            &rule.to_bytes(),
        ));
    }
    send(fd.as_raw_fd(), &datagram, MsgFlags::empty()).map_err(sys("send"))?;
    let mut out: Vec<Option<Result<(), SyscallAuditError>>> = rules.iter().map(|_| None).collect();
    let mut buf = vec![0u8; 8192];
    for _ in 0..4 * rules.len() {
        if out.iter().all(Option::is_some) {
            break;
        }
        let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()).map_err(sys("recv"))?;
        for (t, seq, p) in split(&buf[..n]) {
            let slot = (seq as usize).checked_sub(1).and_then(|i| out.get_mut(i));
            if let (NLMSG_ERROR, Some(slot)) = (t, slot) {
                *slot = Some(match errno_of(p) {
                    0 => Ok(()),
                    errno => Err(SyscallAuditError::Refused { what, errno }),
                });
            }
        }
    }
    Ok(out
        .into_iter()
        .map(|o| o.unwrap_or(Err(SyscallAuditError::NoAnswer { what })))
        .collect())
}

/// What [`ask_host`] learnt.
#[derive(Debug, Default)]
pub(super) struct Asked {
    /// Audit's `enabled`: 0 off, 1 on, 2 locked.
    pub(super) enabled: u32,
    /// The audit features on (`AUDIT_GET_FEATURE`; 0 when not asked).
    pub(super) features: u32,
    pub(super) rules: Vec<HostRule>,
}

/// Ask the kernel's audit status, its rules, and (with `features`) its
/// features, at once on one socket: each answer comes from a thread the
/// kernel starts for it.
pub(super) fn ask_host(features: bool) -> Result<Asked, SyscallAuditError> {
    const STATUS: u32 = 1;
    const LIST: u32 = 2;
    const FEATURES: u32 = 3;
    let fd = socket()?;
    ask(&fd, AUDIT_GET, STATUS, &[])?;
    ask(&fd, AUDIT_LIST_RULES, LIST, &[])?;
    if features {
        ask(&fd, AUDIT_GET_FEATURE, FEATURES, &[])?;
    }
    let mut asked = Asked::default();
    let (mut got_status, mut got_list, mut got_features) = (false, false, !features);
    let mut buf = vec![0u8; 64 * 1024];
    while !(got_status && got_list && got_features) {
        let n = match recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            Ok(n) => n,
            Err(nix::Error::EAGAIN) => {
                return Err(SyscallAuditError::NoAnswer {
                    what: "AUDIT_GET, AUDIT_LIST_RULES",
                })
            }
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(sys("recv")(e)),
        };
        for (t, seq, p) in split(&buf[..n]) {
            match t {
                NLMSG_ERROR => match errno_of(p) {
                    0 => {}
                    errno => {
                        let what = match seq {
                            STATUS => "AUDIT_GET",
                            LIST => "AUDIT_LIST_RULES",
                            _ => "AUDIT_GET_FEATURE",
                        };
                        return Err(SyscallAuditError::Refused { what, errno });
                    }
                },
                AUDIT_GET => {
                    got_status = true;
                    asked.enabled = word(p, 1);
                }
                AUDIT_GET_FEATURE => {
                    got_features = true;
                    asked.features = word(p, 2);
                }
                AUDIT_LIST_RULES => asked.rules.extend(HostRule::parse(p)),
                NLMSG_DONE if seq == LIST => got_list = true,
                _ => {}
            }
        }
    }
    Ok(asked)
}

fn word(p: &[u8], i: usize) -> u32 {
    p.get(i * 4..i * 4 + 4)
        .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

/// Every rule of the kernel's (`AUDIT_LIST_RULES`).
fn list() -> Result<Vec<HostRule>, SyscallAuditError> {
    let fd = socket()?;
    ask(&fd, AUDIT_LIST_RULES, 1, &[])?;
    let mut rules = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            Ok(n) => n,
            Err(nix::Error::EINTR) => continue,
            Err(nix::Error::EAGAIN) => {
                return Err(SyscallAuditError::NoAnswer {
                    what: "AUDIT_LIST_RULES",
                })
            }
            Err(e) => return Err(sys("recv")(e)),
        };
        for (t, _, p) in split(&buf[..n]) {
            match t {
                NLMSG_ERROR => match errno_of(p) {
                    0 => {}
                    errno => {
                        return Err(SyscallAuditError::Refused {
                            what: "AUDIT_LIST_RULES",
                            errno,
                        })
                    }
                },
                AUDIT_LIST_RULES => rules.extend(HostRule::parse(p)),
                NLMSG_DONE => return Ok(rules),
                _ => {}
            }
        }
    }
}

/// The login uids of lockrun's rules loaded now, one per rule, with
/// what each records.
pub fn loaded() -> Result<Vec<(u32, Refused)>, SyscallAuditError> {
    Ok(list()?.iter().filter_map(HostRule::ours).collect())
}

/// The run's rules, loaded while this lives: removed when it drops, on
/// every path out of a run.
#[derive(Debug)]
pub struct RunRules {
    login_uid: u32,
    /// Its rules, in the order they were added.
    rules: Vec<Refused>,
}

impl RunRules {
    /// Turn audit on if [`probe`](super::probe) found it off (a task gets
    /// the kernel's account of its syscalls only if audit was on when it
    /// was forked), then add the rule of each of `refused` for the run of
    /// `login_uid`, first in the exit filter. Before the command starts.
    /// Whether audit was turned on, beside the guard; a rule added before
    /// one that fails is removed again.
    pub fn add(
        login_uid: u32,
        probe: SyscallAudit,
        refused: &[Refused],
    ) -> Result<(Self, bool), SyscallAuditError> {
        if !probe.audit_on {
            enable()?;
        }
        let mut added = Self {
            login_uid,
            rules: Vec::new(),
        };
        let rules: Vec<HostRule> = refused
            .iter()
            .map(|r| {
                let mut rule = HostRule::lockruns(login_uid, *r);
                rule.flags |= AUDIT_FILTER_PREPEND;
                rule
            })
            .collect();
        let mut failed = None;
        for (r, outcome) in refused.iter().zip(changes(AUDIT_ADD_RULE, &rules)?) {
            match outcome {
                Ok(()) => added.rules.push(*r),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        match failed {
            // The rules that did go in are removed as `added` drops.
            Some(e) => Err(e),
            None => Ok((added, !probe.audit_on)),
        }
    }

    #[must_use]
    pub fn login_uid(&self) -> u32 {
        self.login_uid
    }

    /// Leave the rule loaded, for processes of the run left behind:
    /// `lockrun gc` removes it once their cgroup is gone.
    pub fn leave(self) {
        std::mem::forget(self);
    }
}

impl Drop for RunRules {
    fn drop(&mut self) {
        if self.rules.is_empty() {
            return;
        }
        let rules: Vec<HostRule> = (self.rules.iter())
            .map(|r| HostRule::lockruns(self.login_uid, *r))
            .collect();
        let outcomes = match changes(AUDIT_DEL_RULE, &rules) {
            Ok(o) => o,
            Err(e) => {
                say!(
                    "lockrun: warning: removing the run's kernel audit rules (login uid {}): {e} \
                     (`lockrun gc` will retry)",
                    self.login_uid
                );
                return;
            }
        };
        for (refused, outcome) in self.rules.iter().zip(outcomes) {
            if let Err(e) = outcome {
                say!(
                    "lockrun: warning: removing the run's kernel audit rule (login uid {}, \
                     {refused}): {e} (`lockrun gc` will retry)",
                    self.login_uid
                );
            }
        }
    }
}

/// Remove the run's rules on a thread of its own, to be joined: the kernel
/// waits out an RCU grace period before it answers. In place, and `None`,
/// where no thread is to be had.
#[must_use]
pub fn remove_beside(rules: RunRules) -> Option<std::thread::JoinHandle<()>> {
    // Where no thread is had, the job is dropped here, and the rule with it.
    std::thread::Builder::new()
        .name("lockrun-rules".into())
        .spawn(move || drop(rules))
        .ok()
}

/// `lockrun gc`: delete every rule of lockrun's whose run is gone, that
/// is, whose login uid's inode number is no live run cgroup's (`live`,
/// their ids, asked after the rules are listed: a run adds its rules only
/// once its cgroup is there). Nothing where the kernel has no audit. The
/// login uid of each rule deleted, with what it recorded.
pub fn reap_stale<E: std::error::Error + Send + Sync + 'static>(
    live: impl FnOnce() -> Result<Vec<u64>, E>,
) -> Result<Vec<(u32, Refused)>, SyscallAuditError> {
    let rules = match list() {
        Ok(r) => r,
        Err(SyscallAuditError::Kernel(KernelAuditError::Syscall {
            source: nix::Error::EPROTONOSUPPORT | nix::Error::ECONNREFUSED,
            ..
        })) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let ours: Vec<(u32, Refused)> = rules.iter().filter_map(HostRule::ours).collect();
    if ours.is_empty() {
        return Ok(Vec::new());
    }
    let live: Vec<u32> = live()
        .map_err(|e| SyscallAuditError::LiveRuns(Box::new(e)))?
        .into_iter()
        .map(|id| id as u32)
        .collect();
    let mut reaped = Vec::new();
    for (uid, refused) in ours {
        if live.contains(&(uid & !super::LOGIN_UID_RANGE)) {
            continue;
        }
        change(AUDIT_DEL_RULE, &HostRule::lockruns(uid, refused))?;
        reaped.push((uid, refused));
    }
    Ok(reaped)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a panic is the failure report
mod tests {
    use super::*;

    #[test]
    fn the_runs_rule_is_the_kernels_struct_audit_rule_data() {
        let b = HostRule::lockruns(0x8000_0035, Refused::Files).to_bytes();
        assert_eq!(b.len(), 1040);
        let w = |i: usize| word(&b, i);
        assert_eq!((w(0), w(1), w(2)), (0x04, 2, 3));
        assert!((3..3 + WORDS).all(|i| w(i) == u32::MAX));
        assert_eq!((w(67), w(68), w(69), w(70)), (11, 9, 103, 0));
        assert_eq!((w(131), w(132), w(133)), (ARCH, 0x8000_0035, 0xffff_fff3));
        assert!((195..198).all(|i| w(i) == 0x4000_0000));
        assert_eq!(w(259), 0);
        // Read back as the kernel lists it.
        let back = HostRule::parse(&b).unwrap();
        assert_eq!(back, HostRule::lockruns(0x8000_0035, Refused::Files));
        assert_eq!(back.ours(), Some((0x8000_0035, Refused::Files)));
    }

    /// The syscalls a rule's mask names (words 3 on), in order.
    fn calls_of(b: &[u8]) -> Vec<i64> {
        (0..WORDS * 32)
            .filter(|nr| word(b, 3 + nr / 32) & (1 << (nr % 32)) != 0)
            .map(|nr| i64::try_from(nr).unwrap())
            .collect()
    }

    #[test]
    fn the_reach_rule_records_eperm_of_the_signal_and_socket_calls_only() {
        let b = HostRule::lockruns(0x8000_0035, Refused::Reach).to_bytes();
        let w = |i: usize| word(&b, i);
        assert_eq!((w(0), w(1), w(2)), (0x04, 2, 3));
        let calls = calls_of(&b);
        let mut want = REACH_CALLS.to_vec();
        want.sort_unstable();
        assert_eq!(calls, want);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(calls, [42, 44, 46, 62, 129, 200, 234, 297, 307, 424]);
        assert_eq!((w(131), w(132), w(133)), (ARCH, 0x8000_0035, 0xffff_ffff));
        let back = HostRule::parse(&b).unwrap();
        assert_eq!(back.ours(), Some((0x8000_0035, Refused::Reach)));
    }

    #[test]
    fn the_refer_rule_records_exdev_of_the_link_and_rename_calls_only() {
        let b = HostRule::lockruns(0x8000_0035, Refused::Refer).to_bytes();
        let w = |i: usize| word(&b, i);
        assert_eq!((w(0), w(1), w(2)), (0x04, 2, 3));
        let calls = calls_of(&b);
        let mut want = REFER_CALLS.to_vec();
        want.sort_unstable();
        assert_eq!(calls, want);
        // rename, link, renameat, linkat, renameat2.
        #[cfg(target_arch = "x86_64")]
        assert_eq!(calls, [82, 86, 264, 265, 316]);
        assert_eq!((w(131), w(132), w(133)), (ARCH, 0x8000_0035, 0xffff_ffee));
        let back = HostRule::parse(&b).unwrap();
        assert_eq!(back, HostRule::lockruns(0x8000_0035, Refused::Refer));
        assert_eq!(back.ours(), Some((0x8000_0035, Refused::Refer)));
        assert_eq!(
            Refused::Refer.to_string(),
            "its link and rename calls refused with EXDEV"
        );
    }

    #[test]
    fn only_rules_of_lockruns_exact_shape_are_lockruns() {
        let mut r = HostRule::lockruns(0x8000_0035, Refused::Files);
        r.flags |= AUDIT_FILTER_PREPEND;
        assert_eq!(r.ours(), Some((0x8000_0035, Refused::Files)));
        // A user's login uid, "unset", another exit, another field, a key.
        for changed in [
            HostRule::lockruns(1000, Refused::Files),
            HostRule::lockruns(u32::MAX, Refused::Reach),
            HostRule::lockruns(7, Refused::Refer),
            {
                let mut r = HostRule::lockruns(0x8000_0035, Refused::Files);
                r.fields[2].2 = (-libc::ENOENT).cast_unsigned();
                r
            },
            {
                let mut r = HostRule::lockruns(0x8000_0035, Refused::Files);
                r.fields.push((AUDIT_MSGTYPE, AUDIT_EQUAL, 1300));
                r
            },
            {
                let mut r = HostRule::lockruns(0x8000_0035, Refused::Files);
                r.strings = b"key".to_vec();
                r
            },
            {
                let mut r = HostRule::lockruns(0x8000_0035, Refused::Files);
                r.action = AUDIT_NEVER;
                r
            },
            {
                let mut r = HostRule::lockruns(0x8000_0035, Refused::Files);
                r.flags = AUDIT_FILTER_TASK;
                r
            },
        ] {
            assert_eq!(changed.ours(), None, "{changed:?}");
        }
    }

    fn host(flags: u32, action: u32, fields: &[(u32, u32, u32)]) -> HostRule {
        HostRule {
            flags,
            action,
            mask: [0; WORDS],
            fields: fields.to_vec(),
            strings: Vec::new(),
        }
    }

    #[test]
    fn host_rules_that_would_silence_a_run_are_found() {
        // -a task,never (with or without fields).
        assert_eq!(
            host(AUDIT_FILTER_TASK, AUDIT_NEVER, &[]).silences(),
            Some(Unusable::TaskNever)
        );
        assert_eq!(
            host(AUDIT_FILTER_TASK, AUDIT_NEVER, &[(1, AUDIT_EQUAL, 1000)]).silences(),
            Some(Unusable::TaskNever)
        );
        assert_eq!(host(AUDIT_FILTER_TASK, AUDIT_ALWAYS, &[]).silences(), None);
        // -a never,exit: lockrun's rule is put before it.
        assert_eq!(host(AUDIT_FILTER_EXIT, AUDIT_NEVER, &[]).silences(), None);
        // -a always,exclude -F msgtype=...: by the types it drops.
        let exclude = |fields: &[(u32, u32, u32)]| {
            host(AUDIT_FILTER_EXCLUDE, AUDIT_ALWAYS, fields).silences()
        };
        assert_eq!(exclude(&[(AUDIT_MSGTYPE, AUDIT_EQUAL, 1327)]), None);
        assert_eq!(
            exclude(&[(AUDIT_MSGTYPE, AUDIT_EQUAL, 1307)]),
            Some(Unusable::Excluded { msgtype: 1307 })
        );
        assert_eq!(
            exclude(&[
                (AUDIT_MSGTYPE, AUDIT_GREATER_THAN_OR_EQUAL, 1400),
                (AUDIT_MSGTYPE, AUDIT_LESS_THAN, 1500)
            ]),
            None
        );
        assert_eq!(
            exclude(&[(AUDIT_MSGTYPE, AUDIT_LESS_THAN, 1310)]),
            Some(Unusable::Excluded { msgtype: 1300 })
        );
        assert_eq!(
            exclude(&[(1, AUDIT_EQUAL, 0)]),
            Some(Unusable::Excluded { msgtype: 0 })
        );
    }

    #[test]
    fn a_datagram_of_several_answers_is_split_with_their_numbers() {
        let mut d = nl_message(AUDIT_GET, 0, 1, &[1, 0, 0, 0, 1, 0, 0, 0]);
        d.extend(nl_message(NLMSG_DONE, 0, 2, &[0; 4]));
        let parts = split(&d);
        assert_eq!(parts.len(), 2);
        assert_eq!(
            (parts[0].0, parts[0].1, word(parts[0].2, 1)),
            (AUDIT_GET, 1, 1)
        );
        assert_eq!((parts[1].0, parts[1].1), (NLMSG_DONE, 2));
        assert_eq!(errno_of(&(-13i32).to_ne_bytes()), 13);
    }
}
