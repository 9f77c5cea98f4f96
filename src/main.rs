use std::process::ExitCode;

fn main() -> ExitCode {
    marketplace::cli::run()
}
