//! What the replay submits: the plan of scaled jobs and the overall timeout.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use super::*;
use crate::sim::swf::Trace;

/// One job as the replay will submit it.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedJob {
    /// The trace's job number.
    pub number: u64,
    /// The trace's user id.
    pub user: String,
    /// `"<stem>-<number>"` (a repeated number gets `.2`, `.3`, ...).
    pub external_id: String,
    /// When to submit it: real seconds after the replay starts.
    pub at_s: f64,
    /// The scaled run time: the `sleep` duration, seconds.
    pub sleep_s: f64,
    /// Cores requested.
    pub cpu: f64,
}

impl PlannedJob {
    /// The job's entrypoint, `sleep <sleep_s>`.
    #[must_use]
    pub fn entrypoint(&self) -> String {
        entrypoint(self.sleep_s)
    }
}

/// Cores for a job of `processors` trace processors: `processors × cpu_scale`,
/// clamped to `[min_cpu, max_cpu]` and rounded to Ray's step of 0.0001 core (never
/// below `min_cpu`). `args` must be valid ([`ReplayArgs::validate`]).
#[must_use]
pub fn scale_cpu(processors: u32, args: &ReplayArgs) -> f64 {
    let raw = f64::from(processors) * args.cpu_scale;
    let capped = match args.max_cpu {
        Some(max) => raw.min(max),
        None => raw,
    };
    let rounded = (capped.max(args.min_cpu) / RAY_RESOURCE_UNIT).round() * RAY_RESOURCE_UNIT;
    // Round to at most 4 decimals without binary noise (0.8800000000000001 → 0.88).
    let clean = (rounded * 1e4).round() / 1e4;
    if clean < args.min_cpu {
        args.min_cpu
    } else {
        clean
    }
}

/// The scaled run time of a job that ran `run_s` trace seconds: `run_s / time_scale`,
/// at least `min_runtime_s`, in real seconds.
#[must_use]
pub fn scale_run(run_s: f64, args: &ReplayArgs) -> f64 {
    (run_s / args.time_scale).max(args.min_runtime_s)
}

/// The entrypoint of a job that sleeps `seconds`: `sleep 1.234` (three decimals,
/// rounded up so a job never sleeps less than its floor).
#[must_use]
pub fn entrypoint(seconds: f64) -> String {
    let millis = (seconds.max(0.0) * 1000.0 - 1e-6).ceil().max(0.0);
    format!("sleep {:.3}", millis / 1000.0)
}

/// The trace's file name without `.gz` and `.swf`, for external ids
/// (`coare-saliksik-2020.swf.gz` → `coare-saliksik-2020`).
#[must_use]
pub fn trace_stem(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace".to_string());
    let mut stem = name.as_str();
    for suffix in [".gz", ".swf"] {
        if stem.len() > suffix.len() && stem.to_ascii_lowercase().ends_with(suffix) {
            stem = &stem[..stem.len() - suffix.len()];
        }
    }
    stem.chars().take(MAX_STEM_CHARS).collect()
}

/// The jobs `[skip, skip + limit)` of `trace` as they will be submitted, in submit
/// order. `args` must be valid ([`ReplayArgs::validate`]).
#[must_use]
pub fn plan(trace: &Trace, stem: &str, args: &ReplayArgs) -> Vec<PlannedJob> {
    let selected = trace
        .jobs
        .iter()
        .skip(args.skip)
        .take(args.limit.unwrap_or(usize::MAX));
    let mut origin = None;
    let mut seen: HashMap<u64, usize> = HashMap::new();
    selected
        .map(|job| {
            let first = *origin.get_or_insert(job.submit);
            let count = seen.entry(job.number).or_insert(0);
            *count += 1;
            let external_id = if *count == 1 {
                format!("{stem}-{}", job.number)
            } else {
                format!("{stem}-{}.{count}", job.number)
            };
            PlannedJob {
                number: job.number,
                user: job.user.clone(),
                external_id,
                at_s: ((job.submit - first) / args.time_scale).max(0.0),
                sleep_s: scale_run(job.run, args),
                cpu: scale_cpu(job.cpus, args),
            }
        })
        .collect()
}

/// How long the replay may take before it stops waiting, real seconds:
/// `3 × L + 300`, where `L` is the scaled length of the replay — the latest
/// `at_s + sleep_s + RAY_START_OVERHEAD_S`, or, when `max_cpu` gives the cluster's
/// size, the time to run all the work one after the other at full use,
/// `Σ cpu × (sleep_s + RAY_START_OVERHEAD_S) / max_cpu`, whichever is longer.
#[must_use]
pub fn overall_timeout(plan: &[PlannedJob], max_cpu: Option<f64>) -> Duration {
    let span = plan
        .iter()
        .map(|j| j.at_s + j.sleep_s + RAY_START_OVERHEAD_S)
        .fold(0.0, f64::max);
    let work = match max_cpu {
        Some(cap) if cap > 0.0 => {
            plan.iter()
                .map(|j| j.cpu * (j.sleep_s + RAY_START_OVERHEAD_S))
                .sum::<f64>()
                / cap
        }
        _ => 0.0,
    };
    Duration::try_from_secs_f64(3.0 * span.max(work) + 300.0).unwrap_or(Duration::MAX)
}
