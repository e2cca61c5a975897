//! The `quantforge` command.

use std::process::ExitCode;

fn main() -> ExitCode {
    quantforge::cli::main()
}
