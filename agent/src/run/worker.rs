//! The run's worker thread, on another CPU, for side work: the Landlock
//! walk (step 3) while steps 2 and 4–7 go on, and the run dir's removal
//! while the rest of the teardown goes on.
//!
//! Both are system calls that nothing on the main path waits for until
//! later, and a run's start-up is what every command an agent runs pays.
//! The thread is started first thing and pinned to the CPUs other than the
//! one lockrun runs on ([`crate::sys::OtherCpus`]): left to the scheduler,
//! a new thread can be queued behind its busy parent and run only once the
//! parent blocks. With one CPU to run on, or no thread to be had, each job
//! runs in place.
//!
//! The thread runs the jobs one after the other, in the order given. A job
//! it has not started when its result is waited for is taken back and run
//! by the waiter: with both CPUs busy (many runs on one machine), the thread
//! may get its turn late, and a run then costs what it did without it.
//! Dropping the [`Worker`] waits for every job given to it that has not
//! finished: no work of a run outlives the run. (With none left, the idle
//! thread is not waited for: it ends on its own as the queue closes.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

/// A job not started yet: whoever takes it first runs it.
type Slot = Arc<Mutex<Option<Job>>>;

fn take(slot: &Slot) -> Option<Job> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// The worker thread beside lockrun's own, or none.
pub struct Worker {
    jobs: Option<mpsc::Sender<Slot>>,
    thread: Option<JoinHandle<()>>,
    /// Jobs given and not finished (a panicked one never is).
    unfinished: Arc<AtomicUsize>,
}

/// A job's result, to be waited for.
pub struct Pending<T> {
    slot: Slot,
    result: mpsc::Receiver<T>,
}

impl<T> Pending<T> {
    /// The job's result, running the job here if the thread has not
    /// started it; `None` when it panicked on the thread.
    #[must_use]
    pub fn wait(self) -> Option<T> {
        if let Some(job) = take(&self.slot) {
            job();
        }
        self.result.recv().ok()
    }
}

impl Worker {
    /// Start the thread, when there is another CPU for it.
    #[must_use]
    pub fn start() -> Self {
        let none = Self {
            jobs: None,
            thread: None,
            unfinished: Arc::default(),
        };
        let Some(cpus) = crate::sys::OtherCpus::of_this_thread() else {
            return none;
        };
        let (tx, rx) = mpsc::channel::<Slot>();
        let Ok(thread) = std::thread::Builder::new()
            .name("lockrun-worker".into())
            .spawn(move || {
                // Pinned while idle, so that a job queued wakes the thread
                // on the other CPU; free to run anywhere while it works,
                // and through the jobs queued meanwhile, back to back (each
                // switch is a `sched_setaffinity`, a system call).
                let mut pinned = true;
                for slot in &rx {
                    let mut next = Some(slot);
                    while let Some(slot) = next.take() {
                        if let Some(job) = take(&slot) {
                            if pinned {
                                cpus.unpin_this_thread();
                                pinned = false;
                            }
                            job();
                        }
                        next = rx.try_recv().ok();
                    }
                    if !pinned {
                        cpus.pin_this_thread();
                        pinned = true;
                    }
                }
            })
        else {
            return none;
        };
        cpus.pin(&thread);
        Self {
            jobs: Some(tx),
            thread: Some(thread),
            unfinished: Arc::default(),
        }
    }

    /// Start `job` on the worker thread (or run it now, when there is no thread).
    pub fn run<T: Send + 'static>(&self, job: impl FnOnce() -> T + Send + 'static) -> Pending<T> {
        let (tx, result) = mpsc::sync_channel(1);
        let unfinished = self.unfinished.clone();
        unfinished.fetch_add(1, Ordering::AcqRel);
        let job: Job = Box::new(move || {
            let r = job();
            // Before the send: whoever has the result sees it counted.
            unfinished.fetch_sub(1, Ordering::AcqRel);
            // The receiver is gone when the run failed meanwhile: the
            // result is dropped here.
            let _ = tx.send(r);
        });
        let slot: Slot = Arc::new(Mutex::new(Some(job)));
        let queued = self
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(slot.clone()).is_ok());
        if !queued {
            // No thread, or it is gone (a job panicked): run it here.
            if let Some(job) = take(&slot) {
                job();
            }
        }
        Pending { slot, result }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Closing the queue ends the thread's loop once every job ran.
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            if self.unfinished.load(Ordering::Acquire) > 0 {
                let _ = thread.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_in_order_and_all_before_the_drop_returns() {
        let worker = Worker::start();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let pending: Vec<Pending<usize>> = (0..5)
            .map(|i| {
                let log = log.clone();
                worker.run(move || {
                    log.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(i);
                    i * 10
                })
            })
            .collect();
        let unwaited = {
            let log = log.clone();
            worker.run(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                log.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(99);
            })
        };
        drop(unwaited);
        let results: Vec<Option<usize>> = pending.into_iter().map(Pending::wait).collect();
        assert_eq!(results, [0, 10, 20, 30, 40].map(Some));
        drop(worker);
        let log = log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        assert_eq!(
            *log,
            [0, 1, 2, 3, 4, 99],
            "the drop waited for the last job"
        );
    }

    #[test]
    fn a_job_the_thread_has_not_started_is_run_by_its_waiter() {
        let worker = Worker::start();
        if worker.thread.is_none() {
            eprintln!("skipped: a_job_the_thread_has_not_started_is_run_by_its_waiter: one CPU to run on, so no thread beside");
            return;
        }
        let (release, hold) = mpsc::channel::<()>();
        let busy = worker.run(move || hold.recv().is_ok());
        let waiter = std::thread::current().id();
        let queued = worker.run(move || std::thread::current().id() == waiter);
        // The thread is held by the first job for 2 s: the second is not
        // started, and the waiter runs it (without the taking back, it would
        // run on the thread after those 2 s).
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(2));
            let _ = release.send(());
        });
        assert_eq!(queued.wait(), Some(true), "run by the waiter");
        assert_eq!(busy.wait(), Some(true));
        releaser
            .join()
            .unwrap_or_else(|_| panic!("the releaser panicked"));
    }

    #[test]
    fn a_panicking_job_reports_none_and_later_jobs_still_run() {
        let worker = Worker::start();
        if worker.thread.is_none() {
            eprintln!("skipped: a_panicking_job_reports_none_and_later_jobs_still_run: one CPU to run on, so no thread beside (the job would panic here)");
            return;
        }
        let (started, on_thread) = mpsc::channel::<()>();
        let boom = worker.run(move || -> u8 {
            let _ = started.send(());
            panic!("a job that panics")
        });
        // Taken by the thread (not by the waiter, which would panic here).
        on_thread.recv().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(boom.wait(), None);
        assert_eq!(worker.run(|| 7).wait(), Some(7));
    }
}
