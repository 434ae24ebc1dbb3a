//! How good the estimated starts are (issue 48 §2): the simulator records, for every
//! job still queued after the step of its submit, the start the forward run
//! ([`crate::policy::estimate::forward`]) estimates from the simulator's state at that
//! instant, then its real start in the same run, and compares them with two naive
//! baselines computed in the same run.
//!
//! # Expected run times
//!
//! The simulator knows each job's real run time; the estimator does not. It takes a
//! job's expected run time as the service does ([`crate::policy::estimate::expected_run`]):
//! the SWF requested time (field 9, Slurm's time limit, the trace's `max_runtime_s`)
//! where given, else the decayed median of its user's past run times (SWF has no
//! entrypoint: one per user), else the default given. The **learned-first** variant
//! prefers the learned median when there is one (requested times are limits, often far
//! above the run).
//!
//! # Baselines
//!
//! - **position × mean run time**: the job's position among all queued jobs (every
//!   job may use the one cluster; the newest is last) times the mean run time of the
//!   jobs finished so far (the default before any);
//! - **the same ÷ slots**: divided by how many jobs of the mean size run at once
//!   (capacity ÷ the mean cores of the jobs finished so far).
//!
//! # Measures
//!
//! Over the jobs recorded: the median and 90th percentile of `|estimated start − real
//! start|` (seconds), and the share with `|real wait − estimated wait| ≤ 0.2 ×
//! estimated wait` (started within ±20 % of the wait estimated). A job the forward run
//! does not start has no estimate: counted in `missing` and left out of the measures.

use std::collections::HashMap;

use serde::Serialize;

use super::{ledger_id, Sim};
use crate::policy::estimate::{self, expected_run, Forward, Limits, RunTimes};
use crate::policy::preview::Snapshot;
use crate::policy::{JobId, Seconds};

/// The options of [`super::simulate_with_estimates`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct EstimateOptions {
    /// Expected run time of a job with no requested time and no learned median,
    /// seconds (the service's `estimates.default_runtime`).
    pub default_runtime: Seconds,
    /// Estimate only every `every`-th job still queued after its submit (1: all), to
    /// bound the cost on long traces.
    pub every: usize,
}

impl Default for EstimateOptions {
    fn default() -> Self {
        EstimateOptions {
            default_runtime: 3600.0,
            every: 1,
        }
    }
}

/// One estimator's accuracy.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Accuracy {
    /// The estimator.
    pub name: &'static str,
    /// Jobs with an estimate.
    pub jobs: usize,
    /// Jobs it gave no estimate.
    pub missing: usize,
    /// Median `|estimated start − real start|`, seconds.
    pub median_abs_error_s: Seconds,
    /// 90th percentile of the same, seconds.
    pub p90_abs_error_s: Seconds,
    /// Share of jobs whose real wait is within ±20 % of the wait estimated.
    pub within_20pct: f64,
}

/// What [`super::simulate_with_estimates`] measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EstimateReport {
    /// Jobs recorded (queued after their submit step, one in `every`).
    pub recorded: usize,
    /// Of those, by the basis of their own expected run time (service order): jobs
    /// with a requested time, with a learned median, with the default.
    pub by_basis: [usize; 3],
    /// Forward runs made and their ledger cycles in all.
    pub forward_runs: usize,
    /// Ledger cycles of all forward runs.
    pub forward_cycles: usize,
    /// Per estimator: the forward run (service order), the forward run
    /// (learned first), position × mean run time, the same ÷ slots.
    pub accuracy: Vec<Accuracy>,
}

/// One recorded job.
struct Record {
    job: usize,
    submit: Seconds,
    /// Forward run, service order; learned first.
    forward: [Option<Seconds>; 2],
    naive: Seconds,
    naive_slots: Seconds,
}

/// The simulator's estimate state (fairshare only).
#[derive(Default)]
pub(super) struct EstimateState {
    options: EstimateOptions,
    learned: RunTimes,
    finished: usize,
    run_sum: f64,
    cpu_sum: f64,
    seen: usize,
    records: Vec<Record>,
    by_basis: [usize; 3],
    forward_runs: usize,
    forward_cycles: usize,
}

impl EstimateState {
    pub(super) fn new(options: EstimateOptions) -> EstimateState {
        EstimateState {
            options,
            ..EstimateState::default()
        }
    }
}

impl Sim<'_> {
    /// A job ran `run` seconds: what the estimator learns.
    pub(super) fn learn_run(&mut self, j: usize, run: Seconds) {
        let cpus = f64::from(self.jobs[j].cpus);
        let user = &self.users[self.jobs[j].user].name;
        if let Some(e) = &mut self.estimating {
            e.learned.observe(user, "", run);
            e.finished += 1;
            e.run_sum += run;
            e.cpu_sum += cpus;
        }
    }

    /// After the step at `now`: estimates for the jobs `new` submitted at it and
    /// still queued.
    pub(super) fn record_estimates(&mut self, now: Seconds, new: std::ops::Range<usize>) {
        let Some(mut e) = self.estimating.take() else {
            return;
        };
        let mut targets = Vec::new();
        for j in new {
            if self.jobs[j].start.is_some() {
                continue;
            }
            e.seen += 1;
            if (e.seen - 1) % e.options.every.max(1) == 0 {
                targets.push(j);
            }
        }
        if let (false, Some(ledger)) = (targets.is_empty(), &self.ledger) {
            let default = e.options.default_runtime;
            let users = &self.users;
            let jobs = &self.jobs;
            let learned = &e.learned;
            // Expected run time of job index `j`: service order, or learned first.
            let run_of = |j: usize, learned_first: bool| -> (Seconds, estimate::Basis) {
                let job = &jobs[j];
                let median = learned.median(&users[job.user].name, "");
                if learned_first && median.is_some() {
                    expected_run(None, median, default)
                } else {
                    expected_run(job.estimate, median, default)
                }
            };
            let snapshot = Snapshot {
                now,
                config: ledger.policy_config(),
                users: ledger.all_user_views(),
                clusters: ledger.cluster_views(),
                reservation: ledger.reservation().cloned(),
                groups: ledger.tree().groups().to_vec(),
            };
            let until: Vec<JobId> = targets.iter().map(|&j| ledger_id(j)).collect();
            let mut found: [HashMap<JobId, Seconds>; 2] = [HashMap::new(), HashMap::new()];
            for (v, learned_first) in [false, true].into_iter().enumerate() {
                let mut outstanding = ledger.outstanding_jobs();
                for o in &mut outstanding {
                    o.end = o.started_at + run_of(o.job_id.as_u128() as usize, learned_first).0;
                }
                let f: Forward = estimate::forward(
                    &snapshot,
                    &outstanding,
                    |q| run_of(q.job_id.as_u128() as usize, learned_first).0,
                    Limits {
                        until: until.clone(),
                        ..Limits::default()
                    },
                );
                e.forward_runs += 1;
                e.forward_cycles += f.cycles;
                found[v] = f.estimates.iter().map(|x| (x.job_id, x.start)).collect();
            }
            let mean_run = if e.finished > 0 {
                e.run_sum / e.finished as f64
            } else {
                default
            };
            let mean_cpus = if e.finished > 0 {
                e.cpu_sum / e.finished as f64
            } else {
                1.0
            };
            let slots = (f64::from(self.config.capacity) / mean_cpus).max(1.0);
            for &j in &targets {
                let basis = run_of(j, false).1 as usize;
                e.by_basis[basis] += 1;
                let naive = self.queued_jobs as f64 * mean_run;
                e.records.push(Record {
                    job: j,
                    submit: self.jobs[j].submit,
                    forward: [
                        found[0].get(&ledger_id(j)).copied(),
                        found[1].get(&ledger_id(j)).copied(),
                    ],
                    naive: now + naive,
                    naive_slots: now + naive / slots,
                });
            }
        }
        self.estimating = Some(e);
    }

    /// The report, once the run is over.
    pub(super) fn estimate_report(&mut self) -> EstimateReport {
        let Some(e) = self.estimating.take() else {
            return EstimateReport::default();
        };
        let names = [
            "forward run (max_runtime, learned, default)",
            "forward run (learned first)",
            "position × mean run time",
            "position × mean run time ÷ slots",
        ];
        let accuracy = names
            .iter()
            .enumerate()
            .map(|(k, name)| {
                let mut errors = Vec::new();
                let mut within = 0usize;
                let mut missing = 0usize;
                for r in &e.records {
                    let Some(real) = self.jobs[r.job].start else {
                        missing += 1;
                        continue;
                    };
                    let est = match k {
                        0 | 1 => r.forward[k],
                        2 => Some(r.naive),
                        _ => Some(r.naive_slots),
                    };
                    let Some(est) = est else {
                        missing += 1;
                        continue;
                    };
                    errors.push((est - real).abs());
                    let (w_est, w_real) = (est - r.submit, real - r.submit);
                    if (w_real - w_est).abs() <= 0.2 * w_est {
                        within += 1;
                    }
                }
                errors.sort_by(f64::total_cmp);
                let q = |p: f64| -> Seconds {
                    if errors.is_empty() {
                        return f64::NAN;
                    }
                    let i = ((errors.len() as f64 * p).ceil() as usize).clamp(1, errors.len());
                    errors[i - 1]
                };
                Accuracy {
                    name,
                    jobs: errors.len(),
                    missing,
                    median_abs_error_s: q(0.5),
                    p90_abs_error_s: q(0.9),
                    within_20pct: if errors.is_empty() {
                        0.0
                    } else {
                        within as f64 / errors.len() as f64
                    },
                }
            })
            .collect();
        EstimateReport {
            recorded: e.records.len(),
            by_basis: e.by_basis,
            forward_runs: e.forward_runs,
            forward_cycles: e.forward_cycles,
            accuracy,
        }
    }
}

impl EstimateReport {
    /// The report as a Markdown table.
    #[must_use]
    pub fn table(&self) -> String {
        let mut s = format!(
            "{} jobs recorded (basis: {} requested time, {} learned, {} default); {} forward runs, {} cycles\n\n",
            self.recorded,
            self.by_basis[0],
            self.by_basis[1],
            self.by_basis[2],
            self.forward_runs,
            self.forward_cycles
        );
        s.push_str("| estimator | jobs | no estimate | median abs error | p90 abs error | within ±20 % |\n");
        s.push_str("|---|---:|---:|---:|---:|---:|\n");
        for a in &self.accuracy {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {:.1} % |\n",
                a.name,
                a.jobs,
                a.missing,
                human(a.median_abs_error_s),
                human(a.p90_abs_error_s),
                100.0 * a.within_20pct
            ));
        }
        s
    }
}

/// Seconds as `s`, `min`, `h` or `d`, three significant figures.
fn human(s: Seconds) -> String {
    if !s.is_finite() {
        return "–".into();
    }
    let (v, unit) = if s < 120.0 {
        (s, "s")
    } else if s < 7200.0 {
        (s / 60.0, "min")
    } else if s < 172_800.0 {
        (s / 3600.0, "h")
    } else {
        (s / 86_400.0, "d")
    };
    format!("{v:.3} {unit}")
}
