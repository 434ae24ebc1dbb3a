//! Seeded synthetic SWF traces (`fairshare trace`, issue 28): workloads of a chosen
//! shape and size, written as Standard Workload Format so that `simulate` and
//! `replay` read them like the real traces in `examples/traces/`.
//!
//! # Model
//!
//! A trace is a sequence of **batches** (job arrays, as COARE's users submit them):
//! one user, one size, `n` jobs submitted at the same second, `n` geometric with mean
//! [`MEAN_BATCH`] (capped at [`MAX_BATCH`]). Each job of a batch runs the batch's
//! base run time times a log-normal jitter (σ = 0.3) and requests the batch's
//! requested time (field 9, the simulator's runtime estimate): the base run time
//! times an overestimate factor, log-uniform in [1, 4], rounded up to 15 minutes;
//! one batch in twenty underestimates (requested = ½ base), as 7 % of COARE's jobs
//! ran past their request.
//!
//! Which user sends a batch is drawn by **activity**: Zipf (user `k` of `U` with
//! weight `1/k`, the heavy-tailed activity of real logs) unless the shape says
//! otherwise. `U` is the population drawn from, not a count the trace must reach:
//! with fewer batches than users, or in Zipf's tail, some users draw no batch (200
//! jobs, about 50 batches, for 200 users of `weighted`, seed 1, have 52), and the
//! header then says how many did. Giving every user a job would flatten the shapes'
//! activity and change every seeded trace. Sizes: a batch is 1 core with probability
//! 0.4, else `2^k` cores with `k` uniform in `1..=log2(C/16)` (at most `C/16`). Base
//! run times are log-uniform in [60 s, 12 h]. Batches arrive as a Poisson process
//! whose rate makes the **offered load** `Σ cpus·run / (C · span)` equal to `load`
//! (default [`DEFAULT_LOAD`]); times are whole seconds, the first batch at 0.
//!
//! # Shapes ([`Shape`])
//!
//! - `zipf`: the model as above (the default; the 188,041-job trace).
//! - `heavy`: one heavy user among many light ones: `u1` sends half the batches,
//!   in batches four times as long; the others share the rest equally.
//! - `equal`: many equal users: uniform activity, every batch 4 cores.
//! - `wide`: a third of the batches are wide, `C/8` to `C/2` cores.
//! - `bursty`: batch gaps hyperexponential (nine in ten from a mean 20× shorter
//!   than the average, the rest long), so arrivals come in bursts.
//! - `mixed`: long and short mixed: 80 % of batches run 30 s to 10 min, 20 % run
//!   6 h to 3 days (both log-uniform).
//! - `weighted`: uniform activity; user weights other than 1 (0.5, 1, 2 and 4 in
//!   turn), returned in [`SynthTrace::weights`] for `simulate --weights`.
//!
//! # Determinism
//!
//! The random stream is ChaCha8 (`rand_chacha`, portable and value-stable) seeded
//! with the seed; only uniform draws are taken from it and transformed here, so a
//! (shape, jobs, users, cores, load, seed) always writes the same file.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::Path;
use std::str::FromStr;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::swf::TraceJob;

/// Mean number of jobs in a batch (job array).
pub const MEAN_BATCH: f64 = 4.0;

/// Largest batch, jobs: keeps one draw from the geometric tail from dominating a
/// small trace.
pub const MAX_BATCH: u64 = 64;

/// The most jobs a trace may hold: 53 times issue 28's 188,041, about 1 GB to
/// generate. A tester's `--jobs 18446744073709551615` (or `--users 4294967295`)
/// asked for tens of gigabytes and was aborted by the allocator.
pub const MAX_JOBS: usize = 10_000_000;

/// The most users a trace may have: 463 times issue 28's 216. Choosing a batch's
/// user walks the users, so generation grows with users × jobs (100,000 users and
/// jobs take about 2 s; a tester's 10 million ran for hours).
pub const MAX_USERS: u32 = 100_000;

/// Offered load when none is given: busy enough that queues form in most hours
/// (fairness is only measured while contended), light enough that they drain.
pub const DEFAULT_LOAD: f64 = 0.9;

/// A workload shape (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Shape {
    /// Zipf activity, the base model.
    Zipf,
    /// One heavy user among many light ones.
    Heavy,
    /// Many equal users.
    Equal,
    /// A third of the batches wide.
    Wide,
    /// Bursty arrivals.
    Bursty,
    /// Long and short jobs mixed.
    Mixed,
    /// Weights other than 1.
    Weighted,
}

impl Shape {
    /// Every shape, in the order of the module doc.
    pub const ALL: [Shape; 7] = [
        Shape::Zipf,
        Shape::Heavy,
        Shape::Equal,
        Shape::Wide,
        Shape::Bursty,
        Shape::Mixed,
        Shape::Weighted,
    ];

    /// The shape's name on the command line.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Shape::Zipf => "zipf",
            Shape::Heavy => "heavy",
            Shape::Equal => "equal",
            Shape::Wide => "wide",
            Shape::Bursty => "bursty",
            Shape::Mixed => "mixed",
            Shape::Weighted => "weighted",
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A shape name that is not one of [`Shape::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown shape {0:?}: expected zipf, heavy, equal, wide, bursty, mixed or weighted")]
pub struct UnknownShape(pub String);

impl FromStr for Shape {
    type Err = UnknownShape;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim().to_ascii_lowercase();
        Shape::ALL
            .into_iter()
            .find(|shape| shape.name() == s)
            .ok_or(UnknownShape(s))
    }
}

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthSpec {
    /// The workload's shape.
    pub shape: Shape,
    /// Number of jobs, at least 1.
    pub jobs: usize,
    /// Number of users, at least 1 (user ids `u1` … `uU`): the population each
    /// batch's user is drawn from; with few batches some send none, and more users
    /// than jobs is allowed for the same reason.
    pub users: u32,
    /// The cluster's cores `C` (the header's `MaxProcs`), at least 1.
    pub cores: u32,
    /// Offered load: core-seconds asked for / (cores × span), > 0.
    pub load: f64,
    /// Seed of the random stream.
    pub seed: u64,
}

impl SynthSpec {
    /// A spec with [`DEFAULT_LOAD`].
    #[must_use]
    pub fn new(shape: Shape, jobs: usize, users: u32, cores: u32, seed: u64) -> SynthSpec {
        SynthSpec {
            shape,
            jobs,
            users,
            cores,
            load: DEFAULT_LOAD,
            seed,
        }
    }
}

/// A spec out of range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("invalid synthetic trace: {0}")]
pub struct InvalidSpec(pub String);

/// A generated trace.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthTrace {
    /// Jobs in submit order, numbered from 1.
    pub jobs: Vec<TraceJob>,
    /// The cores the trace is made for (`MaxProcs`).
    pub max_procs: u32,
    /// User weights (only the `weighted` shape has any), for `simulate --weights`.
    pub weights: BTreeMap<String, f64>,
    /// The header's comment lines, without the leading `;`.
    pub header: Vec<String>,
}

/// One batch before arrival times are given.
struct Batch {
    user: u32,
    cpus: u32,
    /// Each job's run time, seconds (whole, at least 1).
    runs: Vec<f64>,
    requested: f64,
}

/// Generates the trace `spec` describes (module doc).
///
/// # Errors
/// No jobs, users or cores, more than [`MAX_JOBS`] jobs or [`MAX_USERS`] users, a
/// load that is not finite and positive, or one so low
/// that the trace would span more than 100 years (its submit times would not be
/// times: `--load 1e-300` once wrote 300-digit ones).
pub fn generate(spec: &SynthSpec) -> Result<SynthTrace, InvalidSpec> {
    if spec.jobs == 0 || spec.users == 0 || spec.cores == 0 {
        return Err(InvalidSpec(
            "jobs, users and cores must each be at least 1".to_owned(),
        ));
    }
    if spec.jobs > MAX_JOBS {
        return Err(InvalidSpec(format!(
            "{} jobs is more than {MAX_JOBS} (--jobs)",
            spec.jobs
        )));
    }
    if spec.users > MAX_USERS {
        return Err(InvalidSpec(format!(
            "{} users is more than {MAX_USERS} (--users)",
            spec.users
        )));
    }
    if !(spec.load.is_finite() && spec.load > 0.0) {
        return Err(InvalidSpec(format!(
            "load {:?} must be a finite number > 0 (--load)",
            spec.load
        )));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let activity = activity(spec);
    let mut batches = Vec::new();
    let mut left = spec.jobs as u64;
    let mut work = 0.0;
    while left > 0 {
        let b = batch(spec, &activity, &mut rng, left);
        work += f64::from(b.cpus) * b.runs.iter().sum::<f64>();
        left -= b.runs.len() as u64;
        batches.push(b);
    }
    // Gaps in units of the mean gap, scaled so that the offered load is `load`.
    let gaps: Vec<f64> = batches.iter().map(|_| gap(spec.shape, &mut rng)).collect();
    let unit_span: f64 = gaps.iter().skip(1).sum::<f64>().max(f64::MIN_POSITIVE);
    let span = work / (f64::from(spec.cores) * spec.load);
    let longest = crate::config::MAX_DURATION.as_secs_f64();
    if span > longest {
        return Err(InvalidSpec(format!(
            "load {:?} spreads the jobs over {:.3e} s, more than 100 years (--load)",
            spec.load, span
        )));
    }
    let scale = span / unit_span;
    let mut jobs = Vec::with_capacity(spec.jobs);
    let mut t = 0.0;
    for (i, b) in batches.iter().enumerate() {
        if i > 0 {
            t += gaps[i] * scale;
        }
        let submit = t.floor();
        for &run in &b.runs {
            let number = jobs.len() as u64 + 1;
            let user = format!("u{}", b.user);
            let job = TraceJob::new(number, submit, run, b.cpus, &user);
            jobs.push(job.with_requested_time(b.requested));
        }
    }
    let weights = match spec.shape {
        Shape::Weighted => (1..=spec.users)
            .map(|k| (format!("u{k}"), [0.5, 1.0, 2.0, 4.0][(k as usize - 1) % 4]))
            .collect(),
        _ => BTreeMap::new(),
    };
    let mut header = vec![
        "Version: 2.2".to_owned(),
        format!(
            "Computer: fairshare synthetic trace, shape {}, seed {}",
            spec.shape, spec.seed
        ),
        format!(
            "Note: fairshare trace --shape {} --jobs {} --users {} --cores {} --load {} --seed {}",
            spec.shape, spec.jobs, spec.users, spec.cores, spec.load, spec.seed
        ),
    ];
    // Users are drawn per batch (module doc): say how many the trace has when some drew
    // none (a tester counted 52 users in a trace of 200), and nothing otherwise, so a
    // trace with every user is written as before.
    let drawn = batches
        .iter()
        .map(|b| b.user)
        .collect::<std::collections::BTreeSet<u32>>()
        .len();
    if drawn < spec.users as usize {
        header.push(format!(
            "Note: {drawn} of the {} users asked for drew a job (a batch's user is drawn \
             by activity; the others have none)",
            spec.users
        ));
    }
    header.push(format!("MaxJobs: {}", spec.jobs));
    header.push(format!("MaxProcs: {}", spec.cores));
    Ok(SynthTrace {
        jobs,
        max_procs: spec.cores,
        weights,
        header,
    })
}

/// Each user's relative activity (chance of sending a batch), users `1..=U`.
fn activity(spec: &SynthSpec) -> Vec<f64> {
    let users = spec.users as usize;
    match spec.shape {
        Shape::Equal | Shape::Weighted => vec![1.0; users],
        Shape::Heavy if users > 1 => {
            let mut a = vec![1.0; users];
            a[0] = (users - 1) as f64;
            a
        }
        _ => (1..=users).map(|k| 1.0 / k as f64).collect(),
    }
}

fn batch(spec: &SynthSpec, activity: &[f64], rng: &mut ChaCha8Rng, left: u64) -> Batch {
    let user = pick(activity, rng) as u32 + 1;
    let cores = spec.cores;
    let cpus = match spec.shape {
        Shape::Equal => 4.min(cores),
        Shape::Wide if rng.gen::<f64>() < 1.0 / 3.0 => {
            // C/8 to C/2 cores.
            let lo = (cores / 8).max(1);
            let hi = (cores / 2).max(lo);
            lo + (rng.gen::<f64>() * f64::from(hi - lo + 1)) as u32
        }
        _ if rng.gen::<f64>() < 0.4 => 1,
        _ => {
            let top = (cores / 16).max(2).ilog2().max(1);
            let k = 1 + (rng.gen::<f64>() * f64::from(top)) as u32;
            (1u32 << k.min(top)).min(cores)
        }
    };
    let mut base_run = match spec.shape {
        Shape::Mixed if rng.gen::<f64>() < 0.8 => log_uniform(rng, 30.0, 600.0),
        Shape::Mixed => log_uniform(rng, 6.0 * 3600.0, 3.0 * 86_400.0),
        _ => log_uniform(rng, 60.0, 12.0 * 3600.0),
    };
    if spec.shape == Shape::Heavy && user == 1 {
        base_run *= 4.0;
    }
    let requested = if rng.gen::<f64>() < 0.05 {
        (base_run / 2.0).round().max(1.0)
    } else {
        let asked = base_run * log_uniform(rng, 1.0, 4.0);
        (asked / 900.0).ceil() * 900.0
    };
    // Geometric with mean MEAN_BATCH: P(n) = p (1 − p)^(n − 1), p = 1 / MEAN_BATCH.
    let u: f64 = rng.gen();
    let n = 1 + ((1.0 - u).ln() / (1.0 - 1.0 / MEAN_BATCH).ln()).floor() as u64;
    let runs = (0..n.clamp(1, MAX_BATCH).min(left))
        .map(|_| (base_run * lognormal(rng, 0.3)).round().max(1.0))
        .collect();
    Batch {
        user,
        cpus,
        runs,
        requested,
    }
}

/// A gap between batches in units of the mean gap: exponential, or for `bursty`
/// hyperexponential (0.9 of gaps with mean 1/20, the rest with the mean that makes
/// the whole 1: (1 − 0.9/20) / 0.1 = 9.55).
fn gap(shape: Shape, rng: &mut ChaCha8Rng) -> f64 {
    let mean = match shape {
        Shape::Bursty if rng.gen::<f64>() < 0.9 => 1.0 / 20.0,
        Shape::Bursty => (1.0 - 0.9 / 20.0) / 0.1,
        _ => 1.0,
    };
    -mean * (1.0 - rng.gen::<f64>()).ln()
}

/// An index drawn with probability proportional to `weights`.
fn pick(weights: &[f64], rng: &mut ChaCha8Rng) -> usize {
    let total: f64 = weights.iter().sum();
    let mut x = rng.gen::<f64>() * total;
    for (i, w) in weights.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    weights.len() - 1
}

/// Log-uniform in `[lo, hi]`.
fn log_uniform(rng: &mut ChaCha8Rng, lo: f64, hi: f64) -> f64 {
    lo * (hi / lo).powf(rng.gen::<f64>())
}

/// `exp(σ·Z)` with `Z` standard normal (Box–Muller).
fn lognormal(rng: &mut ChaCha8Rng, sigma: f64) -> f64 {
    let u1 = 1.0 - rng.gen::<f64>();
    let u2: f64 = rng.gen();
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    (sigma * z).exp()
}

/// Writes `trace` as SWF text: the header as `;` comments, then one line of 18
/// fields a job (unknowns `-1`; status 1; group 1).
///
/// # Errors
/// The writer fails.
pub fn write_swf(trace: &SynthTrace, out: &mut impl Write) -> std::io::Result<()> {
    for line in &trace.header {
        writeln!(out, "; {line}")?;
    }
    for j in &trace.jobs {
        let user = j.user.trim_start_matches('u');
        let requested = j.requested_time.map_or(-1.0, f64::round);
        // Field 13: the group's number ("g3" → 3), -1 when it has none.
        let group = j
            .group
            .as_deref()
            .and_then(|g| g.trim_start_matches('g').parse::<u64>().ok())
            .map_or_else(|| "-1".to_owned(), |g| g.to_string());
        writeln!(
            out,
            "{} {} -1 {} {} -1 -1 {} {} -1 1 {} {} -1 -1 -1 -1 -1",
            j.number, j.submit, j.run, j.cpus, j.cpus, requested, user, group
        )?;
    }
    Ok(())
}

/// Writes `trace` to `path` as SWF, gzip-compressed when the name ends in `.gz`.
///
/// # Errors
/// The file cannot be created or written.
pub fn write_swf_file(trace: &SynthTrace, path: &Path) -> std::io::Result<()> {
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
    {
        let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
        write_swf(trace, &mut gz)?;
        gz.finish()?.flush()
    } else {
        let mut file = file;
        write_swf(trace, &mut file)?;
        file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::swf::parse;

    fn spec(shape: Shape) -> SynthSpec {
        SynthSpec::new(shape, 2_000, 40, 256, 7)
    }

    fn swf(trace: &SynthTrace) -> Vec<u8> {
        let mut out = Vec::new();
        write_swf(trace, &mut out).unwrap();
        out
    }

    /// Core-seconds asked for / (cores × span from the first submit to the last).
    fn offered_load(trace: &SynthTrace) -> f64 {
        let work: f64 = trace.jobs.iter().map(|j| f64::from(j.cpus) * j.run).sum();
        let span = trace.jobs.last().unwrap().submit - trace.jobs[0].submit;
        work / (f64::from(trace.max_procs) * span)
    }

    #[test]
    fn a_seed_writes_the_same_trace_and_another_seed_another() {
        let a = swf(&generate(&spec(Shape::Zipf)).unwrap());
        let b = swf(&generate(&spec(Shape::Zipf)).unwrap());
        let other = swf(&generate(&SynthSpec {
            seed: 8,
            ..spec(Shape::Zipf)
        })
        .unwrap());
        assert_eq!(a, b);
        assert_ne!(a, other);
    }

    #[test]
    fn every_shape_reads_back_as_the_jobs_it_generated() {
        for shape in Shape::ALL {
            let trace = generate(&spec(shape)).unwrap();
            assert_eq!(trace.jobs.len(), 2_000, "{shape}");
            let read = parse(swf(&trace).as_slice()).unwrap();
            assert_eq!(read.skipped, 0, "{shape}");
            assert_eq!(read.max_procs, Some(256), "{shape}");
            assert_eq!(read.jobs, trace.jobs, "{shape}");
            assert!(trace.jobs.iter().all(|j| j.cpus >= 1 && j.cpus <= 256));
            assert!(trace
                .jobs
                .iter()
                .all(|j| j.run >= 1.0 && j.requested_time.is_some()));
            assert!(trace.jobs.windows(2).all(|w| w[0].submit <= w[1].submit));
            assert_eq!(trace.jobs[0].submit, 0.0);
        }
    }

    #[test]
    fn the_offered_load_is_the_one_asked_for() {
        for shape in Shape::ALL {
            for load in [0.5, 1.5] {
                let trace = generate(&SynthSpec {
                    load,
                    ..spec(shape)
                })
                .unwrap();
                let got = offered_load(&trace);
                // Whole-second submit times and per-job jitter move it a little.
                assert!((got / load - 1.0).abs() < 0.1, "{shape} at {load}: {got}");
            }
        }
    }

    #[test]
    fn shapes_have_the_features_they_are_named_for() {
        let share_of = |trace: &SynthTrace, user: &str| {
            let n = trace.jobs.iter().filter(|j| j.user == user).count();
            n as f64 / trace.jobs.len() as f64
        };
        let heavy = generate(&spec(Shape::Heavy)).unwrap();
        assert!(share_of(&heavy, "u1") > 0.4, "{}", share_of(&heavy, "u1"));
        assert!(share_of(&heavy, "u2") < 0.05);

        let equal = generate(&spec(Shape::Equal)).unwrap();
        assert!(equal.jobs.iter().all(|j| j.cpus == 4));
        let users: std::collections::BTreeSet<&str> =
            equal.jobs.iter().map(|j| j.user.as_str()).collect();
        assert_eq!(users.len(), 40);

        let wide = generate(&spec(Shape::Wide)).unwrap();
        let wide_jobs = wide.jobs.iter().filter(|j| j.cpus >= 32).count();
        let zipf = generate(&spec(Shape::Zipf)).unwrap();
        assert!(zipf.jobs.iter().all(|j| j.cpus <= 16));
        assert!(wide_jobs > 400, "{wide_jobs}");

        let mixed = generate(&spec(Shape::Mixed)).unwrap();
        let short = mixed.jobs.iter().filter(|j| j.run < 1200.0).count();
        let long = mixed.jobs.iter().filter(|j| j.run > 4.0 * 3600.0).count();
        assert!(short > 1_200 && long > 200, "{short} short, {long} long");

        // Bursty: far more batches arrive within a second of the previous one.
        let quick = |trace: &SynthTrace| {
            let starts: Vec<f64> = trace.jobs.iter().map(|j| j.submit).collect();
            let mut batches: Vec<f64> = starts.clone();
            batches.dedup();
            batches.windows(2).filter(|w| w[1] - w[0] <= 60.0).count() as f64 / batches.len() as f64
        };
        let bursty = generate(&spec(Shape::Bursty)).unwrap();
        assert!(
            quick(&bursty) > 2.0 * quick(&zipf),
            "{} vs {}",
            quick(&bursty),
            quick(&zipf)
        );

        assert!(zipf.weights.is_empty());
        let weighted = generate(&spec(Shape::Weighted)).unwrap();
        assert_eq!(weighted.weights.len(), 40);
        assert_eq!(weighted.weights["u1"], 0.5);
        assert_eq!(weighted.weights["u4"], 4.0);
    }

    /// Users are drawn per batch by the shape's activity, so a trace may have fewer
    /// users than asked for (a tester's 200 jobs for 200 users had 52); its header
    /// says how many it has, and more users than jobs is the same case, not refused.
    #[test]
    fn the_header_says_how_many_users_drew_a_job() {
        let users_in = |trace: &SynthTrace| {
            let users: std::collections::BTreeSet<&str> =
                trace.jobs.iter().map(|j| j.user.as_str()).collect();
            users.len()
        };
        let few = generate(&SynthSpec::new(Shape::Weighted, 200, 200, 64, 1)).unwrap();
        let drawn = users_in(&few);
        assert!(drawn < 200, "{drawn}");
        let note = format!("Note: {drawn} of the 200 users asked for drew a job");
        assert!(
            few.header.iter().any(|l| l.starts_with(&note)),
            "{:?}",
            few.header
        );
        let one = generate(&SynthSpec::new(Shape::Zipf, 1, 5, 64, 1)).unwrap();
        assert_eq!((one.jobs.len(), users_in(&one)), (1, 1));
        assert!(one
            .header
            .iter()
            .any(|l| l.starts_with("Note: 1 of the 5 users asked for drew a job")));
        // Every user drew a job: the header has no such note (and is as before).
        let all = generate(&spec(Shape::Equal)).unwrap();
        assert_eq!(users_in(&all), 40);
        assert_eq!(all.header.len(), 5, "{:?}", all.header);
    }

    #[test]
    fn a_spec_out_of_range_is_refused() {
        assert!(generate(&SynthSpec {
            jobs: 0,
            ..spec(Shape::Zipf)
        })
        .is_err());
        assert!(generate(&SynthSpec {
            cores: 0,
            ..spec(Shape::Zipf)
        })
        .is_err());
        assert!(generate(&SynthSpec {
            load: 0.0,
            ..spec(Shape::Zipf)
        })
        .is_err());
        assert!(generate(&SynthSpec {
            load: f64::NAN,
            ..spec(Shape::Zipf)
        })
        .is_err());
        for (jobs, users) in [(MAX_JOBS + 1, 1), (MAX_JOBS, MAX_USERS + 1)] {
            let error = generate(&SynthSpec {
                jobs,
                users,
                ..spec(Shape::Zipf)
            });
            assert!(
                error.as_ref().is_err_and(|e| e.0.contains("--")),
                "{jobs} jobs, {users} users: {:?}",
                error.err()
            );
        }
        let tiny = generate(&SynthSpec {
            load: 1e-300,
            ..spec(Shape::Zipf)
        });
        assert!(
            tiny.as_ref().is_err_and(|e| e.0.contains("100 years")),
            "{:?}",
            tiny.err()
        );
        assert_eq!("Heavy".parse::<Shape>(), Ok(Shape::Heavy));
        assert!("huge".parse::<Shape>().is_err());
    }
}
