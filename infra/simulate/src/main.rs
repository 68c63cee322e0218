//! `simulate`: see the library docs (`simulate --help`).

use std::process::ExitCode;

/// glibc's malloc was a third of the profile (millions of small, short-lived strings and maps).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

extern "C" {
    fn mi_option_get(option: i32) -> std::ffi::c_long;
    fn mi_option_set(option: i32, value: std::ffi::c_long);
}

#[cfg(target_os = "linux")]
extern "C" {
    fn prctl(option: std::ffi::c_int, ...) -> std::ffi::c_int;
}

/// Linux's `PR_SET_THP_DISABLE` (`<linux/prctl.h>`).
#[cfg(target_os = "linux")]
const PR_SET_THP_DISABLE: std::ffi::c_int = 41;

/// No transparent huge pages for this process: mimalloc's arenas asked for them, and each first
/// touch then zeroed 2 MB, most of it never used; 100,000 orders faulted in ~930 MB for a 260 MB
/// peak, and the kernel's page clearing was 13 % of the profile. With 4 KB pages it zeroes what
/// is touched. (mimalloc's own `allow_thp` is read only at its start, before `main`.)
fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: a plain syscall wrapper with integer arguments; on failure nothing changes.
    unsafe {
        let _ = prctl(
            PR_SET_THP_DISABLE,
            1 as std::ffi::c_ulong,
            0 as std::ffi::c_ulong,
            0 as std::ffi::c_ulong,
            0 as std::ffi::c_ulong,
        );
    }
}

/// `mi_option_purge_delay`: its place in mimalloc 3's `mi_option_t` (the `mimalloc` crate's
/// default build; 0.1.52, `c_src/mimalloc/v3/include/mimalloc.h`).
const MI_OPTION_PURGE_DELAY: i32 = 15;
/// Its default there (`options.c`: 1000 ms).
const MI_DEFAULT_PURGE_DELAY: std::ffi::c_long = 1000;

/// The run only grows: memory mimalloc gives back to the OS (purges) is faulted in again, zeroed,
/// a moment later. Never purging took 5 % off a 1,000,000-order run's CPU seconds (53 vs 56 s,
/// most of it system time), at ~4 % more peak RSS. Only mimalloc's own default is changed: a
/// value from `MIMALLOC_PURGE_DELAY`, or an option numbered otherwise in another mimalloc, is
/// left alone.
fn never_purge() {
    // SAFETY: plain C calls on an option number; mimalloc ignores numbers it does not know.
    unsafe {
        if mi_option_get(MI_OPTION_PURGE_DELAY) == MI_DEFAULT_PURGE_DELAY {
            mi_option_set(MI_OPTION_PURGE_DELAY, -1);
        }
    }
}

fn main() -> ExitCode {
    no_huge_pages();
    never_purge();
    simulate::main_with_args(std::env::args_os())
}
