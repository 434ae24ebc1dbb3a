//! The `simulate` command: read a trace, replay it under one policy or all
//! three, print tables, write the JSON report and the plot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::plot::{plot_shares, PlotError, PLOT_BUCKETS, PLOT_USERS};
use super::report::{compare, Report};
use super::simulate::{
    simulate, top_users_by_core_seconds, Preemptible, SimConfig, SimOutcome, SimPolicy,
    DEFAULT_SEED,
};
use super::swf::{read_trace, TraceError};
use crate::policy::PreemptionConfig;

/// Arguments of `fairshare simulate`.
#[derive(Clone, Debug, PartialEq)]
pub struct SimulateArgs {
    /// The SWF trace, plain or gzip-compressed.
    pub trace: PathBuf,
    /// Cores of the simulated cluster; `None` = the trace's `MaxProcs`.
    pub cpus: Option<u32>,
    /// The policy; `None` runs all of [`SimPolicy::ALL`] and compares them.
    pub policy: Option<SimPolicy>,
    /// Half-life of decayed usage, seconds; 0 turns history off.
    pub half_life_s: f64,
    /// Starvation guard, seconds; `f64::INFINITY` disables it.
    pub starvation_guard_s: f64,
    /// Typical run times a head may wait before it is starved, when shorter than
    /// the guard; 0 turns it off.
    pub starvation_runs: f64,
    /// Backfill on (EASY around the reservation) or off (strict order).
    pub backfill: bool,
    /// Weight of the age term, dominant-share units.
    pub age_weight: f64,
    /// Age at which the age term saturates, seconds.
    pub max_age_s: f64,
    /// Cap on each user's running jobs under fairshare; `None` = unlimited.
    pub max_running_jobs: Option<u32>,
    /// A JSON file mapping user id to weight, e.g. `{"u62": 2, "u7": 0.5}`;
    /// users not listed have weight 1.
    pub weights: Option<PathBuf>,
    /// Replay only the first this many jobs (in submit order).
    pub limit: Option<usize>,
    /// Seed of the gateway loop's random user order and of the choice of
    /// preemptible jobs.
    pub seed: u64,
    /// Which jobs may be preempted (fairshare).
    pub preemptible: Preemptible,
    /// Groups of users (`none`, or the trace's group field).
    pub groups: crate::sim::simulate::SimGroups,
    /// Preemption's knobs (fairshare).
    pub preemption: PreemptionConfig,
    /// An autoscaling cluster (`--autoscale`) instead of a fixed one of `cpus`
    /// cores: the policy divides its potential, jobs run on nodes that are up
    /// ([`crate::sim::simulate::autoscale`]).
    pub autoscale: Option<crate::sim::simulate::Autoscale>,
    /// Where to write the JSON report of every run, if anywhere.
    pub report: Option<PathBuf>,
    /// Where to write the SVG share plot (of the fairshare run, or of the
    /// chosen policy), if anywhere; without a policy, every other policy's plot
    /// goes beside it as `STEM-POLICY.svg`.
    pub plot: Option<PathBuf>,
}

impl SimulateArgs {
    /// Arguments for `trace` with the defaults: capacity from the trace, all
    /// policies, the service's `[scheduler]` defaults, unlimited running
    /// jobs, weights 1, the whole trace, seed 42, no files written.
    #[must_use]
    pub fn new(trace: PathBuf) -> SimulateArgs {
        let defaults = SimConfig::new(SimPolicy::FairShare, 1);
        SimulateArgs {
            trace,
            cpus: None,
            policy: None,
            half_life_s: defaults.half_life_s,
            starvation_guard_s: defaults.starvation_guard_s,
            starvation_runs: defaults.starvation_runs,
            backfill: defaults.backfill,
            age_weight: defaults.age_weight,
            max_age_s: defaults.max_age_s,
            max_running_jobs: None,
            weights: None,
            limit: None,
            seed: DEFAULT_SEED,
            preemptible: defaults.preemptible,
            groups: defaults.groups,
            preemption: defaults.preemption.clone(),
            autoscale: None,
            report: None,
            plot: None,
        }
    }
}

/// Parses `--starvation-guard` and `--preempt-after`: `off` (also `none`, `inf`, in
/// any case, as the service's `preemption.after` takes them) disables it
/// (`f64::INFINITY` seconds); anything else is a `humantime` duration such as `5m` or
/// `300s`, at most 100 years ([`crate::config::parse_or_off`]).
///
/// # Errors
/// The text is neither `off` nor such a duration.
pub fn parse_seconds_or_off(text: &str) -> Result<f64, String> {
    crate::config::parse_or_off(text).map(|d| d.map_or(f64::INFINITY, |d| d.as_secs_f64()))
}

/// Notes on flags that can have no effect in the run `args` describes (`flags`: the
/// fairshare policy's own flags given, by name: `--half-life`, `--starvation-guard`,
/// `--starvation-runs`, `--no-backfill`, `--age-weight`, `--max-age`,
/// `--max-running-jobs` and the `--preempt-*` flags). A tester took a run with
/// `--preempt-after` but the default `--preemptible none` for a measure of
/// preemption; another set `--half-life` for `--policy slurm`, which runs with
/// Slurm's documented settings (its header says which).
#[must_use]
pub fn ineffective(args: &SimulateArgs, flags: &[&str]) -> Vec<String> {
    let mut notes = Vec::new();
    let list = |flags: &[&str]| {
        format!(
            "{} {}",
            flags.join(", "),
            if flags.len() == 1 { "has" } else { "have" }
        )
    };
    // Without --policy every run's header says its settings; fairshare's are these.
    match args.policy {
        Some(policy) if policy != SimPolicy::FairShare && !flags.is_empty() => {
            notes.push(format!(
                "{} no effect with --policy {}: {} the fairshare policy only; {}",
                list(flags),
                policy.name(),
                if flags.len() == 1 {
                    "it sets"
                } else {
                    "they set"
                },
                if policy.is_anchor() {
                    format!(
                        "{} runs with its project's documented settings (in its header)",
                        policy.name()
                    )
                } else {
                    format!("{} reads none of them", policy.name())
                }
            ));
        }
        _ => {}
    }
    let preempt: Vec<&str> = flags
        .iter()
        .copied()
        .filter(|f| f.starts_with("--preempt-"))
        .collect();
    let fairshare_runs = args.policy.is_none_or(|p| p == SimPolicy::FairShare);
    let others: Vec<&str> = preempt
        .iter()
        .copied()
        .filter(|&f| f != "--preempt-after")
        .collect();
    if !fairshare_runs {
        // Said above: none of them acts.
    } else if !args.preemption.after.is_finite() {
        // Every policy runs: kueue-fair and armada go on preempting (a tester read
        // "turns preemption off" and counted 578 preemptions).
        let anchors_preempt = args.policy.is_none()
            && args.preemptible != Preemptible::None
            && preempt.contains(&"--preempt-after");
        let anchors = " (kueue-fair and armada preempt by their own rules)";
        if !others.is_empty() {
            notes.push(format!(
                "--preempt-after off turns fairshare's preemption off: {} no effect{}",
                list(&others),
                if anchors_preempt { anchors } else { "" }
            ));
        } else if anchors_preempt {
            notes.push(format!(
                "--preempt-after off turns fairshare's preemption off only{anchors}"
            ));
        }
    } else if !preempt.is_empty() && args.preemptible == Preemptible::None {
        notes.push(
            "the --preempt-* flags have no effect with --preemptible none (the default); \
             give --preemptible all or a fraction such as 0.5"
                .to_owned(),
        );
    }
    if args.groups == crate::sim::simulate::SimGroups::Swf
        && args.policy.is_none_or(SimPolicy::is_anchor)
    {
        notes.push(
            "--groups swf: the fair shares measured and fairshare's order follow the groups; \
             the anchors' order stays flat (Slurm's Fair Tree accounts, Kueue's cohorts and \
             YuniKorn's queues are not modelled)"
                .to_owned(),
        );
    }
    if let Some(policy) = args.policy.filter(|&p| !p.preempts()) {
        if args.preemptible != Preemptible::None {
            notes.push(format!(
                "only fairshare, kueue-fair and armada preempt: --preemptible has no effect \
                 with --policy {}",
                policy.name()
            ));
        }
    }
    notes
}

/// Why `simulate` failed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// Neither `--cpus` nor the trace's `MaxProcs` gives a capacity of at
    /// least 1 core.
    #[error(
        "no capacity: the trace {0} has no MaxProcs header of a whole number from 1 to 4294967295 (cores); give --cpus"
    )]
    NoCapacity(String),
    /// A setting is out of range.
    #[error("invalid {name}: {reason}")]
    Invalid {
        /// The argument.
        name: &'static str,
        /// Why.
        reason: String,
    },
    /// The weights file could not be read or is not a JSON map of positive
    /// numbers.
    #[error("cannot use weights file {path}: {reason}")]
    Weights {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The report could not be written.
    #[error("cannot write report {path}: {source}")]
    Report {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The plot could not be drawn or written.
    #[error(transparent)]
    Plot(#[from] PlotError),
}

/// Reads a weights file: a JSON object mapping user id to a weight from
/// [`crate::policy::MIN_WEIGHT`] to [`crate::policy::MAX_WEIGHT`] (the
/// service's range), e.g. `{"u62": 2, "u7": 0.5}`, each user once.
///
/// Errors: the file cannot be read, is not such an object, names a user twice (a
/// tester's file did, and the last weight silently won), or a weight is out of that
/// range (a tester's weight of 1e155 made Jain's index NaN).
pub fn load_weights(path: &Path) -> Result<BTreeMap<String, f64>, SimError> {
    let fail = |reason: String| SimError::Weights {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let weights: BTreeMap<String, f64> = serde_json::from_str(&text)
        .map_err(|e| fail(format!("expected a JSON object of user → weight: {e}")))?;
    if let Some((user, first, second)) = repeated_key(&text) {
        return Err(fail(format!(
            "user {user:?} is given twice, on lines {first} and {second}; give each user once"
        )));
    }
    use crate::policy::{MAX_WEIGHT, MIN_WEIGHT};
    if let Some((user, w)) = weights
        .iter()
        .find(|(_, w)| !(MIN_WEIGHT..=MAX_WEIGHT).contains(*w))
    {
        return Err(fail(format!(
            "weight of {user} is {w:?}; weights must be from {MIN_WEIGHT:e} to {MAX_WEIGHT:e}, \
             as in the service"
        )));
    }
    Ok(weights)
}

/// The first key given twice in `text`, a JSON object whose values are all numbers
/// (serde_json has checked it), with the lines (from 1) where it is given first and
/// second. In such a document every string is a key; each is decoded, so `"u1"` and
/// `"\u00751"` are one user. serde_json keeps the last of a repeated key and says
/// nothing, hence this.
fn repeated_key(text: &str) -> Option<(String, usize, usize)> {
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let bytes = text.as_bytes();
    let (mut i, mut line) = (0, 1);
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => line += 1,
            b'"' => {
                // A JSON string holds no raw newline; `"` and `\` are ASCII, never
                // inside a multi-byte character, so `start..=i` is on char boundaries.
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                let key: String = serde_json::from_str(text.get(start..=i)?).ok()?;
                if let Some(&first) = seen.get(&key) {
                    return Some((key, first, line));
                }
                seen.insert(key, line);
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Whether `a` and `b` name one file: the same path, the same name in the same
/// (canonical) folder once symbolic links are followed (to where they point, even
/// where nothing is yet), or, when both exist, the same device and inode (a hard
/// link). Used to refuse an output that would overwrite an input or another
/// output (a tester's `--plot` over the trace, `--weights-out` over `--out`).
#[must_use]
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // A symbolic link is followed to where it points even when nothing is there yet
    // (a dangling link to another output let the report overwrite a plot); at most 40
    // links, as the kernel's own limit.
    let resolve = |p: &Path| {
        let mut p = p.to_path_buf();
        for _ in 0..40 {
            let Ok(target) = std::fs::read_link(&p) else {
                break;
            };
            p = p
                .parent()
                .map_or_else(|| target.clone(), |dir| dir.join(&target));
        }
        let folder = p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        Some((
            std::fs::canonicalize(folder).ok()?,
            p.file_name()?.to_owned(),
        ))
    };
    let inode = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    a == b
        || matches!((resolve(a), resolve(b)), (Some(x), Some(y)) if x == y)
        || matches!((inode(a), inode(b)), (Some(x), Some(y)) if x == y)
}

/// The trace's name: its file name without `.gz` and `.swf`.
#[must_use]
pub fn trace_name(path: &Path) -> String {
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    // In any case, as gzip is detected (`X.SWF.GZ` named its weights
    // `X.SWF.GZ.weights.json`, a tester found).
    let strip = |name: &str, suffix: &str| {
        let cut = name.len().saturating_sub(suffix.len());
        match name.get(cut..) {
            Some(end) if end.eq_ignore_ascii_case(suffix) => name[..cut].to_owned(),
            _ => name.to_owned(),
        }
    };
    strip(&strip(&name, ".gz"), ".swf")
}

/// Where `simulate --plot PATH` without `--policy` writes `policy`'s plot:
/// `PATH` with `-POLICY` before its extension (`shares.svg` → `shares-fifo.svg`).
#[must_use]
pub fn policy_plot_path(path: &Path, policy: SimPolicy) -> PathBuf {
    let stem = path
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let ext = path
        .extension()
        .map_or_else(String::new, |e| format!(".{}", e.to_string_lossy()));
    path.with_file_name(format!("{stem}-{}{ext}", policy.name()))
}

/// The JSON document `--report` writes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimulationReport {
    /// The trace's name.
    pub trace: String,
    /// Cores of the simulated cluster.
    pub capacity_cores: u32,
    /// One report per policy run.
    pub runs: Vec<Report>,
}

/// Runs `fairshare simulate`: returns the text to print.
///
/// With a policy: that run's [`Report::to_table`]. Without: the comparison of
/// all three ([`super::report::Comparison::to_table`]) followed by the
/// fairshare run's table. Writes the JSON [`SimulationReport`] to
/// `args.report` and the share plot of the fairshare run (or of the chosen
/// policy) to `args.plot` when given.
///
/// Errors: unreadable trace or weights, no capacity, invalid settings, a
/// report or plot that cannot be written.
pub fn run_simulate(args: &SimulateArgs) -> Result<String, SimError> {
    if args.half_life_s.is_nan() || args.half_life_s < 0.0 {
        return Err(SimError::Invalid {
            name: "half-life (--half-life)",
            reason: format!("{} s; must be ≥ 0", args.half_life_s),
        });
    }
    if args.starvation_guard_s.is_nan() || args.starvation_guard_s < 0.0 {
        return Err(SimError::Invalid {
            name: "starvation guard (--starvation-guard)",
            reason: format!("{} s; must be ≥ 0", args.starvation_guard_s),
        });
    }
    if !(args.starvation_runs.is_finite() && args.starvation_runs >= 0.0) {
        return Err(SimError::Invalid {
            name: "starvation runs (--starvation-runs)",
            reason: format!("{}; must be a finite number ≥ 0", args.starvation_runs),
        });
    }
    if !(args.age_weight.is_finite() && args.age_weight >= 0.0) {
        return Err(SimError::Invalid {
            name: "age weight (--age-weight)",
            reason: format!("{}; must be a finite number ≥ 0", args.age_weight),
        });
    }
    let p = &args.preemption;
    let durations = [
        ("preemption after (--preempt-after)", p.after),
        (
            "preemption min runtime (--preempt-min-runtime)",
            p.min_runtime,
        ),
        ("preemption interval (--preempt-interval)", p.interval),
    ];
    if let Some((name, v)) = durations.into_iter().find(|(_, v)| v.is_nan() || *v < 0.0) {
        return Err(SimError::Invalid {
            name,
            reason: format!("{v} s; must be ≥ 0"),
        });
    }
    if p.interval.is_nan() || p.interval <= 0.0 {
        return Err(SimError::Invalid {
            name: "preemption interval (--preempt-interval)",
            reason: format!("{} s; must be more than 0, as in the service", p.interval),
        });
    }
    if !(0.0..=1.0).contains(&p.budget) {
        return Err(SimError::Invalid {
            name: "preemption budget (--preempt-budget)",
            reason: format!("{}; must be between 0 and 1", p.budget),
        });
    }
    // An output over an input or over the other output is refused before anything
    // is read or written (it silently replaced the trace with an SVG).
    let inputs = [
        ("--trace", Some(&args.trace)),
        ("--weights", args.weights.as_ref()),
    ];
    // Every file the run writes: the report, the plot, and without --policy each other
    // policy's plot beside it (`STEM-POLICY.svg`, which a tester wrote over the trace).
    let mut outputs: Vec<(String, PathBuf)> = Vec::new();
    if let Some(report) = &args.report {
        outputs.push(("--report".to_owned(), report.clone()));
    }
    if let Some(plot) = &args.plot {
        outputs.push(("--plot".to_owned(), plot.clone()));
        if args.policy.is_none() {
            for policy in SimPolicy::ALL
                .into_iter()
                .filter(|&p| p != SimPolicy::FairShare)
            {
                outputs.push((
                    format!("--plot's {} plot", policy.name()),
                    policy_plot_path(plot, policy),
                ));
            }
        }
    }
    for (i, (out_flag, out)) in outputs.iter().enumerate() {
        let clash = inputs
            .iter()
            .filter_map(|&(flag, p)| p.map(|p| (flag.to_owned(), p)))
            .chain(outputs[i + 1..].iter().map(|(flag, p)| (flag.clone(), p)))
            .find(|(_, p)| same_file(out, p));
        if let Some((flag, _)) = clash {
            return Err(SimError::Invalid {
                name: "output file",
                reason: format!(
                    "{out_flag} {} is the file of {flag}: it would be overwritten",
                    out.display()
                ),
            });
        }
    }
    if args.max_running_jobs == Some(0) {
        return Err(SimError::Invalid {
            name: "max running jobs (--max-running-jobs)",
            reason: "0; must be at least 1".to_owned(),
        });
    }
    if let Some(a) = &args.autoscale {
        if args.cpus.is_some() {
            return Err(SimError::Invalid {
                name: "capacity (--cpus)",
                reason: "an autoscaled cluster's capacity is its potential (head and node \
                         types at their maximum): give --cpus or --autoscale, not both"
                    .to_owned(),
            });
        }
        a.validate().map_err(|reason| SimError::Invalid {
            name: "autoscaling cluster (--autoscale)",
            reason,
        })?;
    }
    let mut trace = read_trace(&args.trace)?;
    let name = trace_name(&args.trace);
    let capacity = match &args.autoscale {
        Some(a) => u32::try_from(a.potential()).unwrap_or(u32::MAX),
        None => args
            .cpus
            .or(trace.max_procs)
            .filter(|&c| c > 0)
            .ok_or_else(|| SimError::NoCapacity(args.trace.display().to_string()))?,
    };
    // A job runs on one node of an autoscaled cluster.
    let widest = args
        .autoscale
        .as_ref()
        .map_or(capacity, |a| a.widest_node());
    if let Some(limit) = args.limit {
        trace.jobs.truncate(limit);
    }
    if trace.jobs.is_empty() {
        return Err(SimError::Invalid {
            name: "trace",
            reason: format!(
                "{} has no job to simulate ({} lines were not SWF jobs{})",
                args.trace.display(),
                trace.skipped,
                if args.limit == Some(0) {
                    ", and --limit is 0"
                } else {
                    ""
                }
            ),
        });
    }
    if trace.jobs.iter().all(|j| j.cpus > widest) {
        let narrowest = trace.jobs.iter().map(|j| j.cpus).min().unwrap_or(0);
        return Err(SimError::Invalid {
            name: if args.autoscale.is_some() {
                "node types (--node-type, --head-cpus)"
            } else if args.cpus.is_some() {
                "capacity (--cpus)"
            } else {
                "capacity (the trace's MaxProcs header; give --cpus)"
            },
            reason: format!(
                "{widest} cores{}: no job of {} fits (the narrowest asks for {narrowest})",
                if args.autoscale.is_some() {
                    " on the widest node"
                } else {
                    ""
                },
                args.trace.display()
            ),
        });
    }
    let weights = match &args.weights {
        Some(path) => load_weights(path)?,
        None => BTreeMap::new(),
    };
    let mut config = SimConfig {
        half_life_s: args.half_life_s,
        starvation_guard_s: args.starvation_guard_s,
        starvation_runs: args.starvation_runs,
        backfill: args.backfill,
        age_weight: args.age_weight,
        max_age_s: args.max_age_s,
        max_running_jobs: args.max_running_jobs.unwrap_or(u32::MAX),
        weights,
        seed: args.seed,
        preemptible: args.preemptible,
        groups: args.groups,
        preemption: args.preemption.clone(),
        ..SimConfig::new(args.policy.unwrap_or(SimPolicy::FairShare), capacity)
    };
    if let Some(a) = &args.autoscale {
        config = config.autoscaled(a.clone());
    }
    if args.plot.is_some() {
        config.record_shares_for = top_users_by_core_seconds(&trace.jobs, widest, PLOT_USERS);
    }

    let mut text = String::new();
    // A weight for a user the trace (or its first --limit jobs) does not have acts on
    // nothing: said, since a misspelt user would otherwise go unnoticed.
    let users: std::collections::BTreeSet<&str> =
        trace.jobs.iter().map(|j| j.user.as_str()).collect();
    let strangers: Vec<&str> = config
        .weights
        .keys()
        .map(String::as_str)
        .filter(|u| !users.contains(u))
        .collect();
    if !strangers.is_empty() {
        text.push_str(&format!(
            "note: --weights names {} user(s) with no job in this run, ignored: {}\n",
            strangers.len(),
            strangers
                .iter()
                .take(10)
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let (reports, plotted): (Vec<Report>, Option<SimOutcome>) = match args.policy {
        Some(_) => {
            let outcome = simulate(&trace.jobs, &config);
            let report = Report::new(&name, trace.skipped, &config, &outcome);
            text.push_str(&report.to_table());
            (vec![report], Some(outcome))
        }
        None => {
            let comparison = compare(&name, trace.skipped, &trace.jobs, &config);
            // What was not simulated, said here too (fairshare's table below has it).
            let unparsed = if trace.skipped > 0 {
                format!(
                    " ({} trace lines were not SWF jobs and were skipped)",
                    trace.skipped
                )
            } else {
                String::new()
            };
            text.push_str(&format!(
                "{name}: {} jobs on {capacity} cores{unparsed}, all policies\n",
                trace.jobs.len()
            ));
            if let Some(a) = &args.autoscale {
                text.push_str(&format!(
                    "{} (util % is of the cores alive)\n",
                    a.describe()
                ));
            }
            text.push_str(&comparison.to_table());
            text.push('\n');
            let mut plotted = None;
            let mut reports = Vec::new();
            for (report, outcome) in comparison.runs {
                if report.policy == SimPolicy::FairShare {
                    text.push_str(&report.to_table());
                    plotted = Some(outcome);
                } else if let Some(path) = &args.plot {
                    // Every policy's plot, beside fairshare's.
                    let other = policy_plot_path(path, report.policy);
                    plot_shares(&other, &name, &outcome, PLOT_BUCKETS)?;
                    text.push_str(&format!("plot written to {}\n", other.display()));
                }
                reports.push(report);
            }
            (reports, plotted)
        }
    };

    if let Some(path) = &args.report {
        let doc = SimulationReport {
            trace: name.clone(),
            capacity_cores: capacity,
            runs: reports,
        };
        let fail = |source| SimError::Report {
            path: path.display().to_string(),
            source,
        };
        let json = serde_json::to_string_pretty(&doc).map_err(|e| fail(e.into()))?;
        std::fs::write(path, json + "\n").map_err(fail)?;
        text.push_str(&format!("\nreport written to {}\n", path.display()));
    }
    if let (Some(path), Some(outcome)) = (&args.plot, &plotted) {
        plot_shares(path, &name, outcome, PLOT_BUCKETS)?;
        text.push_str(&format!("plot written to {}\n", path.display()));
    }
    Ok(text)
}
