//! `simulate`: see the library docs (`simulate --help`).

use std::process::ExitCode;

/// glibc's malloc was a third of the profile (millions of small, short-lived strings and maps).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    simulate::main_with_args(std::env::args_os())
}
