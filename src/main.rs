//! The `fairshare` binary: the command line lives in the library (`fairshare::cli`).

/// mimalloc instead of glibc's allocator: under intake load glibc's malloc and free
/// took ~22 % of the service's CPU (`perf record`, issue 11; BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    fairshare::cli::run()
}
