//! `chargectl`: see the library docs (`chargectl --help`).

use std::process::ExitCode;

fn main() -> ExitCode {
    chargectl::main_with_args(std::env::args_os())
}
