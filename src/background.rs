//! One long-lived helper thread for work that can run beside the main
//! thread's: the second half of a large workspace scan, and the store's
//! fsync of the write-ahead log while the next step is prepared. Started
//! on first use, it waits on a channel between jobs (a thread started per
//! job would cost more than most jobs); jobs run one at a time, in order.

use std::sync::Mutex;
use std::sync::mpsc::{Sender, channel};

type Job = Box<dyn FnOnce() + Send>;

static JOBS: Mutex<Option<Sender<Job>>> = Mutex::new(None);

/// Hands `job` to the helper; `false` if the helper could not be started
/// or has died (the job is then dropped: the caller does the work itself).
pub(crate) fn run(job: Job) -> bool {
    let mut jobs = JOBS.lock().unwrap_or_else(|p| p.into_inner());
    if jobs.is_none() {
        let (tx, rx) = channel::<Job>();
        let started = std::thread::Builder::new()
            .name("modix-helper".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job();
                }
            });
        if started.is_err() {
            return false;
        }
        *jobs = Some(tx);
    }
    let sent = jobs.as_ref().is_some_and(|tx| tx.send(job).is_ok());
    if !sent {
        *jobs = None;
    }
    sent
}
