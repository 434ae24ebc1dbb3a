//! The `fairshare` binary: the command line lives in the library (`fairshare::cli`).

fn main() -> std::process::ExitCode {
    fairshare::cli::run()
}
