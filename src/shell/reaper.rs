//! Agents' descendants that leave their process group.
//!
//! An agent runs in a process group of its own, and that group is killed
//! when the agent ends. A descendant that starts a session or group of its
//! own (`setsid`, a daemonising double fork) is not in it: it would go on
//! running — and writing into the workspace — after its step was recorded,
//! after the run ended, after modix exited. So modix makes itself the
//! "child subreaper" of everything it starts (`PR_SET_CHILD_SUBREAPER`):
//! such a descendant, once its parent is gone, becomes modix's child instead
//! of init's, and after each agent ends, modix kills every child it did not
//! start itself (and the group each leads), until none is left.
//!
//! Only a command that runs agents turns this on ([`adopt_orphans`]), and
//! only a process that did finds anything to kill: a library user or a test
//! binary that spawns processes on other threads is never touched.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::waitpid;
use nix::unistd::{Pid, getpgid, getpgrp};

static ADOPTING: AtomicBool = AtomicBool::new(false);

/// Agents started by [`super::run_process`] and not yet ended: children,
/// but not adopted ones.
static STARTED: Mutex<Option<HashSet<u32>>> = Mutex::new(None);

/// Makes this process the subreaper of its descendants (Linux); whether it
/// now is. Call before the first agent starts.
pub fn adopt_orphans() -> bool {
    let on = nix::sys::prctl::set_child_subreaper(true).is_ok();
    ADOPTING.store(on, Ordering::Relaxed);
    on
}

/// Notes an agent's process as started by us (`true`) or ended (`false`).
pub(super) fn started(pid: u32, running: bool) {
    if !ADOPTING.load(Ordering::Relaxed) {
        return;
    }
    let mut set = STARTED.lock().unwrap_or_else(|e| e.into_inner());
    let set = set.get_or_insert_with(HashSet::new);
    if running {
        set.insert(pid);
    } else {
        set.remove(&pid);
    }
}

/// Kills (SIGKILL) and reaps every child this process adopted — with the
/// group each leads — again as long as killing them leaves new orphans to
/// adopt; how many. Nothing when [`adopt_orphans`] was not called.
pub(super) fn kill_adopted() -> usize {
    if !ADOPTING.load(Ordering::Relaxed) || !has_children() {
        return 0;
    }
    let ours = getpgrp();
    let mut killed = 0;
    // Each round's dead hand their own children to us; a chain deeper than
    // this is not worth waiting for.
    for _ in 0..32 {
        let adopted: Vec<Pid> = {
            let started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
            children()
                .into_iter()
                .filter(|pid| started.as_ref().is_none_or(|s| !s.contains(pid)))
                .map(|pid| Pid::from_raw(pid as i32))
                .collect()
        };
        if adopted.is_empty() {
            break;
        }
        for pid in adopted {
            if let Ok(group) = getpgid(Some(pid))
                && group != ours
            {
                let _ = killpg(group, Signal::SIGKILL);
            }
            match kill(pid, Signal::SIGKILL) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(e) => tracing::debug!(%pid, "cannot kill an adopted process: {e}"),
            }
            // Reaped here: an adopted process is nobody else's to wait for.
            let _ = waitpid(pid, None);
            tracing::info!(%pid, "killed a process an agent left running outside its group");
            killed += 1;
        }
    }
    killed
}

/// Whether this process has any child at all, running or not (one system
/// call). The common case after an agent ends — it was reaped, nothing was
/// adopted — then costs no walk of `/proc/self/task`.
fn has_children() -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, waitid};
    // WNOWAIT: a zombie found here stays for the walk to reap.
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    !matches!(waitid(Id::All, flags), Err(Errno::ECHILD))
}

/// This process's children (zombies included), from every thread's
/// `/proc/self/task/<tid>/children`.
fn children() -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for task in tasks.flatten() {
        // Room for ~100,000 pids.
        if let Ok(text) = crate::fsutil::read_small(&task.path().join("children"), 1 << 20) {
            pids.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}
