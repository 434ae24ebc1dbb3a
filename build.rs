//! Tells the tests which dependencies this build was made for, so that a test whose
//! database or Ray is missing shows as *ignored* in `cargo test`'s summary, never as
//! passed (issue 9):
//!
//! - `cfg(fairshare_postgres)` when `FAIRSHARE_TEST_POSTGRES_URL` is set or
//!   `FAIRSHARE_REQUIRE_POSTGRES=1`: the PostgreSQL variants run (and fail hard when
//!   the URL is missing); otherwise they are `#[ignore]`d with the reason.
//! - `cfg(fairshare_ray)` when `FAIRSHARE_RAY_BIN` is set or `FAIRSHARE_REQUIRE_RAY=1`:
//!   the real-Ray tests run; otherwise they are ignored. `scripts/test` sets
//!   `FAIRSHARE_RAY_BIN` to `.venv/bin/ray`.
//!
//! `cargo test -- --include-ignored` runs them anyway, and then a missing dependency is
//! a failure with a message saying what to set.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(fairshare_postgres)");
    println!("cargo::rustc-check-cfg=cfg(fairshare_ray)");
    for var in [
        "FAIRSHARE_TEST_POSTGRES_URL",
        "FAIRSHARE_REQUIRE_POSTGRES",
        "FAIRSHARE_RAY_BIN",
        "FAIRSHARE_REQUIRE_RAY",
    ] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    println!("cargo::rerun-if-changed=build.rs");
    let set = |var: &str| std::env::var(var).is_ok_and(|v| !v.is_empty());
    let one = |var: &str| std::env::var(var).as_deref() == Ok("1");
    if set("FAIRSHARE_TEST_POSTGRES_URL") || one("FAIRSHARE_REQUIRE_POSTGRES") {
        println!("cargo::rustc-cfg=fairshare_postgres");
    }
    if set("FAIRSHARE_RAY_BIN") || one("FAIRSHARE_REQUIRE_RAY") {
        println!("cargo::rustc-cfg=fairshare_ray");
    }
}
