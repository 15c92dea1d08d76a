//! Ctrl-C and SIGTERM from modix's first instant until a command takes them.
//!
//! The commands that stop in order on these signals (a run recorded as
//! stopped and resumable; doctor's checks killed) listen for them through
//! the [`Engine`](crate::orchestrator::Engine), which exists only once the
//! command line is parsed and the runtime built: milliseconds on a loaded
//! machine, in which a signal used to kill modix outright. So `main` first
//! *holds* them: a handler notes the signal and modix goes on, and the
//! engine, once it listens, finds the note and stops at once ([`caught`]).
//! Commands that take no stop let the signals through as soon as the
//! command line is parsed ([`release`]), and so does anything that may
//! block before the engine exists ([`unheld`]: reading the epic from a
//! pipe), so that a held signal never makes modix deaf: then a signal,
//! noted or new, has its default effect, and nothing has been created yet.
//!
//! The handler stays installed afterwards: the engine's listeners chain to
//! it (they call the handler they replaced), which is harmless while held.

use nix::libc::c_int;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering::SeqCst};

/// The last stop signal seen (0: none).
static CAUGHT: AtomicI32 = AtomicI32::new(0);
/// Whether a stop signal is noted for later instead of having its effect.
static HELD: AtomicBool = AtomicBool::new(false);

/// Holds SIGINT and SIGTERM: the first thing `main` does. This also
/// replaces a disposition of "ignore" a parent may have left (a script's
/// background job ignores SIGINT), which would make modix deaf to a stop.
pub fn hold() {
    HELD.store(true, SeqCst);
    let action = SigAction::new(
        SigHandler::Handler(note),
        // Held, a signal must not fail a system call half-way with EINTR.
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: `note` only touches atomics and calls the
        // async-signal-safe `signal` and `raise`.
        let _ = unsafe { sigaction(sig, &action) };
    }
}

/// Lets stop signals have their default effect from now on; one already
/// noted has it now.
pub fn release() {
    HELD.store(false, SeqCst);
    let sig = CAUGHT.load(SeqCst);
    if sig != 0 {
        die_of(sig);
        // Only if the signal could not end the process: as its shell would.
        std::process::exit(128 + sig);
    }
}

/// Runs `f`, which may block (reading a pipe), with stop signals let
/// through, then holds them again.
pub fn unheld<T>(f: impl FnOnce() -> T) -> T {
    release();
    let out = f();
    HELD.store(true, SeqCst);
    out
}

/// Whether a stop signal has arrived since [`hold`].
pub fn caught() -> bool {
    CAUGHT.load(SeqCst) != 0
}

/// The process group of a helper modix waits on now (its own git, in a
/// group of its own so that a stop reaches what git starts too), 0: none.
/// A stop that ends modix at once passes SIGTERM on to it first: git then
/// removes its lock files and ends, instead of running on, orphaned.
static HELPER_GROUP: AtomicI32 = AtomicI32::new(0);

/// Names the helper group a stop must reach while the returned guard lives.
pub(crate) fn helper_group(pgid: i32) -> HelperGroup {
    HELPER_GROUP.store(pgid, SeqCst);
    HelperGroup
}

pub(crate) struct HelperGroup;

impl Drop for HelperGroup {
    fn drop(&mut self) {
        HELPER_GROUP.store(0, SeqCst);
    }
}

extern "C" fn note(sig: c_int) {
    CAUGHT.store(sig, SeqCst);
    if !HELD.load(SeqCst) {
        let group = HELPER_GROUP.load(SeqCst);
        if group > 0 {
            // SAFETY: kill is async-signal-safe.
            unsafe { nix::libc::kill(-group, nix::libc::SIGTERM) };
        }
        die_of(sig);
    }
}

/// The signal's default effect. In the handler, `sig` is blocked until it
/// returns, so the raised signal is delivered then.
fn die_of(sig: c_int) {
    // SAFETY: both are async-signal-safe.
    unsafe {
        nix::libc::signal(sig, nix::libc::SIG_DFL);
        nix::libc::raise(sig);
    }
}
