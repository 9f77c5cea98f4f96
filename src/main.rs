//! The `marketplace` binary: everything is in the library (`cli::run` parses the
//! command line); nothing lives here, so tests reach all of it.

use std::process::ExitCode;

fn main() -> ExitCode {
    marketplace::cli::run()
}
