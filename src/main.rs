//! The `quantforge` command.

mod cli;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

fn main() -> ExitCode {
    // Ctrl-C or SIGTERM: outputs being written fail at their next write and are removed
    // by their error paths, so the command ends with its usual error report and leaves
    // nothing half-written. A second signal quits at once.
    static ASKED: AtomicBool = AtomicBool::new(false);
    let handler = ctrlc::set_handler(|| {
        if ASKED.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!("quantforge: interrupted; stopping (again to quit at once)");
        quantforge::formats::output::request_stop();
    });
    if let Err(e) = handler {
        eprintln!("quantforge: warning: cannot handle interrupts: {e}");
    }
    cli::main()
}
