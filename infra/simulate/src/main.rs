//! `simulate`: see the library docs (`simulate --help`).

use std::process::ExitCode;

fn main() -> ExitCode {
    simulate::main_with_args(std::env::args_os())
}
