//! The process's two heaps and how they are tuned: Rust's allocations go to
//! mimalloc, SQLite's to the C library's `malloc`.
//!
//! Both allocators' defaults suit long-lived servers that expect to reuse
//! what they free. modix is a short process whose step makes thousands of
//! small allocations and, rarely, a few large ones (a capped agent answer,
//! the blob SQLite binds for it); [`tune`] makes small memory cheap to
//! reuse and large memory go back to the kernel as soon as it is freed.

/// A step makes and drops thousands of small allocations (JSON documents,
/// template values, rows and texts); glibc's allocator took ~10 % more of
/// the engine's CPU per step (docs/performance.md, twelfth round). Declared
/// in the library rather than `main.rs` so that the benchmarks, which drive
/// the engine in their own process, measure what the binary runs.
#[global_allocator]
static ALLOCATOR: Budgeted = Budgeted(mimalloc::MiMalloc);

/// mimalloc, with a bound on what one stretch of work on a thread may hold
/// ([`within`]). A prompt template can build a value of any size in a few
/// steps (a string doubled forty times is a terabyte) before its renderer's
/// own limits (steps, the rendered text's size) see anything; the memory it
/// asks for is the one measure that catches every way.
struct Budgeted(mimalloc::MiMalloc);

thread_local! {
    /// Bytes the current [`within`] stretch may still take on this thread
    /// (net of what it frees); `None` outside one.
    static LEFT: std::cell::Cell<Option<isize>> = const { std::cell::Cell::new(None) };
    /// What to do when the stretch takes more: a `&dyn Fn()` on the stack
    /// of the [`within`] call that set it (null outside one).
    static ON_OVER: std::cell::Cell<*const ()> = const { std::cell::Cell::new(std::ptr::null()) };
}

impl Budgeted {
    /// Counts `delta` bytes against the stretch, if one is on; past its
    /// budget the process ends at once (see [`within`]).
    #[inline]
    fn count(delta: isize) {
        let _ = LEFT.try_with(|left| {
            if let Some(n) = left.get() {
                let n = n.saturating_sub(delta);
                left.set(Some(n));
                if n < 0 {
                    over_budget();
                }
            }
        });
    }
}

// SAFETY: every call is mimalloc's; the count only reads and writes a
// thread-local cell, and never allocates.
unsafe impl std::alloc::GlobalAlloc for Budgeted {
    #[inline]
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        Self::count(layout.size() as isize);
        // SAFETY: as the caller promised for `layout`.
        unsafe { self.0.alloc(layout) }
    }
    #[inline]
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        Self::count(layout.size() as isize);
        // SAFETY: as the caller promised for `layout`.
        unsafe { self.0.alloc_zeroed(layout) }
    }
    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        Self::count(-(layout.size() as isize));
        // SAFETY: as the caller promised for `ptr` and `layout`.
        unsafe { self.0.dealloc(ptr, layout) }
    }
    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        Self::count(new as isize - layout.size() as isize);
        // SAFETY: as the caller promised for `ptr`, `layout` and `new`.
        unsafe { self.0.realloc(ptr, layout, new) }
    }
}

/// The stretch took more than its budget: turns the budget off (saying it
/// may allocate: a few KB, before the allocation that asked is made), runs
/// what `within` was given to do, and ends the process as a crash would
/// (exit 3), since unwinding out of an allocator is not allowed and what
/// asked cannot be told no. The store's transactions and modix's files are
/// made for exactly this: the run is left resumable.
#[cold]
fn over_budget() -> ! {
    let hook = ON_OVER.with(|h| h.replace(std::ptr::null()));
    LEFT.with(|l| l.set(None));
    if !hook.is_null() {
        // SAFETY: `within` set it to a `&dyn Fn()` that outlives the
        // stretch, and clears it when the stretch ends.
        let say = unsafe { *hook.cast::<&dyn Fn()>() };
        // A panic must not unwind out of the allocator.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(say));
    }
    // SAFETY: ends the process without running anything more.
    unsafe { nix::libc::_exit(3) }
}

/// Runs `work` with at most `budget` bytes more held on this thread; past
/// it, runs `on_over` (say why, as the command reports errors) and ends the
/// process with exit 3. Not nested: an inner stretch would end the outer
/// one's count.
pub(crate) fn within<T>(budget: usize, on_over: &dyn Fn(), work: impl FnOnce() -> T) -> T {
    let hook: &&dyn Fn() = &on_over;
    ON_OVER.with(|h| h.set(std::ptr::from_ref(hook).cast()));
    LEFT.with(|l| l.set(Some(isize::try_from(budget).unwrap_or(isize::MAX))));
    // Off again however `work` ends (a panic unwinds through here).
    struct Off;
    impl Drop for Off {
        fn drop(&mut self) {
            LEFT.with(|l| l.set(None));
            ON_OVER.with(|h| h.set(std::ptr::null()));
        }
    }
    let off = Off;
    let out = work();
    drop(off);
    out
}

/// `mi_option_arena_max_object_size` in mimalloc v3's `mi_option_t`, which
/// `libmimalloc-sys` does not name; a unit test checks the index by its
/// effect, so an upgrade that moves it fails there.
const MI_OPTION_ARENA_MAX_OBJECT_SIZE: libmimalloc_sys::mi_option_t = 45;

/// Blocks above this (KiB) are mapped from the kernel for themselves and
/// unmapped when freed, as glibc does above its mmap threshold.
const LARGE_BLOCK_KIB: std::ffi::c_long = 1024;

/// Sets both allocators' parameters, once per process; called by `main`
/// and by the benchmarks' `Project::load`. Cheap to call again.
pub(crate) fn tune() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // mimalloc keeps freed memory for a second before giving it back,
        // to reuse it; a large block is rarely reused (the next one has
        // another size), so an agent's 4 MiB answer copied a few times on
        // its way into the record held ~30 MB more than glibc at its peak
        // (docs/performance.md). The option is read at every large
        // allocation, so setting it after the first ones is fine.
        // SAFETY: mi_option_set stores a value in mimalloc's option table.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_MAX_OBJECT_SIZE, LARGE_BLOCK_KIB) };
        keep_c_heap();
    });
}

/// Keeps glibc from handing the top of the C heap back to the kernel
/// whenever ~128 KB of it is free. SQLite allocates there: a statement's
/// journal of the pages it changes is kept in memory and freed when the
/// statement ends, and every few steps that freed the heap's top, which
/// glibc gave back (`brk`, ~50 µs with the pages unmapped) only to ask for
/// it again, and fault it in anew, at the next step (405 `brk` calls in a
/// 3,000-step run, 24 with this). Up to 16 MiB free stays with the process
/// instead; blocks above the mmap threshold (128 KiB) still go back at once.
fn keep_c_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets allocator parameters; a refused value
        // (it returns 0) leaves glibc's default, which is harmless.
        unsafe { nix::libc::mallopt(nix::libc::M_TRIM_THRESHOLD, 16 << 20) };
    }
}

#[cfg(test)]
mod tests {
    /// Resident memory of this process, in bytes (Linux).
    #[cfg(target_os = "linux")]
    fn rss() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: usize = statm.split(' ').nth(1).unwrap().parse().unwrap();
        pages * 4096
    }

    /// Checks the option's index by its effect: with a wrong index the
    /// freed block would stay resident for mimalloc's purge delay.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_large_block_goes_back_to_the_kernel_when_freed() {
        super::tune();
        let block = vec![1u8; 64 << 20];
        let held = rss();
        drop(std::hint::black_box(block));
        let after = rss();
        assert!(
            held.saturating_sub(after) > 48 << 20,
            "RSS {held} -> {after} after freeing 64 MiB"
        );
    }
}
