//! How good the estimated starts are (issue 48 §2): replays an SWF trace through the
//! simulator (fairshare policy, the service's defaults) in virtual time, records each
//! job's estimated start at submit and its real start, and prints the accuracy table
//! of BENCHMARKS.md ("Estimated starts").
//!
//! ```text
//! cargo run --release --example estimate_accuracy -- TRACE [--cpus N] [--limit N]
//!     [--every N] [--default-runtime SECONDS]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use fairshare::sim::simulate::estimates::EstimateOptions;
use fairshare::sim::simulate::simulate_with_estimates;
use fairshare::sim::{SimConfig, SimPolicy};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut trace = None;
    let mut cpus = None;
    let mut limit = None;
    let mut options = EstimateOptions::default();
    while let Some(a) = args.next() {
        let mut value = |name: &str| -> Option<String> {
            let v = args.next();
            if v.is_none() {
                eprintln!("estimate_accuracy: {name} needs a value");
            }
            v
        };
        let parsed = match a.as_str() {
            "--cpus" => value("--cpus")
                .and_then(|v| v.parse().ok())
                .map(|v| cpus = Some(v)),
            "--limit" => value("--limit")
                .and_then(|v| v.parse().ok())
                .map(|v| limit = Some(v)),
            "--every" => value("--every")
                .and_then(|v| v.parse().ok())
                .filter(|&v: &usize| v >= 1)
                .map(|v| options.every = v),
            "--default-runtime" => value("--default-runtime")
                .and_then(|v| v.parse().ok())
                .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                .map(|v| options.default_runtime = v),
            _ if trace.is_none() && !a.starts_with("--") => {
                trace = Some(PathBuf::from(&a));
                Some(())
            }
            _ => None,
        };
        if parsed.is_none() {
            eprintln!("estimate_accuracy: bad argument {a:?}");
            return ExitCode::from(2);
        }
    }
    let Some(path) = trace else {
        eprintln!("usage: estimate_accuracy TRACE [--cpus N] [--limit N] [--every N] [--default-runtime S]");
        return ExitCode::from(2);
    };
    let t = match fairshare::sim::swf::read_trace(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("estimate_accuracy: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut jobs = t.jobs;
    if let Some(n) = limit {
        jobs.truncate(n);
    }
    let Some(capacity) = cpus.or(t.max_procs) else {
        eprintln!("estimate_accuracy: the trace gives no MaxProcs: pass --cpus");
        return ExitCode::from(2);
    };
    let config = SimConfig::new(SimPolicy::FairShare, capacity);
    let started = std::time::Instant::now();
    let (outcome, report) = simulate_with_estimates(&jobs, &config, options);
    println!(
        "{}: {} jobs, {} cores, default run time {} s, every {}; simulated in {:.1} s\n",
        path.display(),
        outcome.jobs.len(),
        capacity,
        options.default_runtime,
        options.every,
        started.elapsed().as_secs_f64()
    );
    println!("{}", report.table());
    ExitCode::SUCCESS
}
