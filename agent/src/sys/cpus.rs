//! Where to start a thread that is to run beside its parent ([`OtherCpus`]).

/// The CPUs the calling thread may run on, except the one it runs on now:
/// where to start a thread that is to run beside it ([`OtherCpus::pin`]).
///
/// The placement is the point: a new thread can be queued behind its busy
/// parent and first run only when the parent blocks, although another CPU
/// is idle; pinned to the other CPUs it runs at once. While it works, the thread
/// takes back the whole set ([`OtherCpus::unpin_this_thread`]), so that a
/// CPU that turns idle can still take it over.
#[derive(Clone, Copy)]
pub struct OtherCpus {
    others: libc::cpu_set_t,
    all: libc::cpu_set_t,
}

impl OtherCpus {
    /// `None` when the calling thread may run on one CPU only (or its
    /// affinity cannot be read): nothing would run beside it.
    #[must_use]
    pub fn of_this_thread() -> Option<Self> {
        // SAFETY: a zeroed `cpu_set_t` is the empty set.
        let mut all: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `all` is a valid `cpu_set_t` of the size passed; the
        // kernel writes at most that many bytes.
        let r = unsafe {
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw mut all)
        };
        if r != 0 {
            return None;
        }
        let mut others = all;
        // SAFETY: no preconditions; -1 on failure.
        let here = unsafe { libc::sched_getcpu() };
        if let Ok(here) = usize::try_from(here) {
            // SAFETY: `here` is a CPU number the kernel gave (CPU_CLR
            // ignores one beyond the set).
            unsafe { libc::CPU_CLR(here, &mut others) };
        }
        // SAFETY: `others` is an initialized `cpu_set_t`.
        (unsafe { libc::CPU_COUNT(&others) } > 0).then_some(Self { others, all })
    }

    /// Move the handle's thread to the other CPUs. A failure only leaves it
    /// where the scheduler put it.
    pub fn pin<T>(&self, thread: &std::thread::JoinHandle<T>) {
        use std::os::unix::thread::JoinHandleExt as _;
        // SAFETY: a `JoinHandle` is neither joined nor detached while it
        // exists, so its `pthread_t` is valid; `others` is valid for its size.
        let _ = unsafe {
            libc::pthread_setaffinity_np(
                thread.as_pthread_t(),
                std::mem::size_of::<libc::cpu_set_t>(),
                &raw const self.others,
            )
        };
    }

    /// Give the calling thread every CPU its parent had, while it works:
    /// widening does not move it, and a CPU that turns idle can take it.
    pub fn unpin_this_thread(&self) {
        Self::set_this_thread(&self.all);
    }

    /// Pin the calling thread to the other CPUs again, before it waits:
    /// woken, it is put there, not beside whoever woke it.
    pub fn pin_this_thread(&self) {
        Self::set_this_thread(&self.others);
    }

    fn set_this_thread(set: &libc::cpu_set_t) {
        // SAFETY: `set` is valid for its size; 0 is the calling thread. A
        // failure leaves the affinity as it was.
        let _ = unsafe {
            libc::sched_setaffinity(
                0,
                std::mem::size_of::<libc::cpu_set_t>(),
                std::ptr::from_ref(set),
            )
        };
    }
}

/// The CPUs the calling thread may run on; `None` if they cannot be read.
pub(super) fn this_threads_cpus() -> Option<libc::cpu_set_t> {
    // SAFETY: a zeroed `cpu_set_t` is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid `cpu_set_t` of the size passed.
    let r =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw mut set) };
    (r == 0).then_some(set)
}
