//! What a simulation run means: waits, bounded slowdown, utilization and
//! fairness, per user and overall, as a serializable [`Report`], text tables,
//! and the comparison of the three policies.
//!
//! # Definitions
//!
//! - **Wait** of a job: start − submit, seconds. **p95**: the nearest-rank
//!   95th percentile, the `⌈0.95·n⌉`-th smallest value.
//! - **Bounded slowdown** (Feitelson, Rudolph, Schwiegelshohn, Sevcik, Wong,
//!   "Theory and Practice in Parallel Job Scheduling", JSSPP 1997):
//!   `bsld = max(1, (wait + run) / max(run, τ))` with the bound
//!   `τ =` [`BSLD_BOUND_S`] = 10 s, so that very short jobs do not dominate
//!   the mean.
//! - **Utilization**: busy core-seconds (`Σ cpus × run` over the jobs that ran)
//!   / (capacity × makespan), where **makespan** = last finish − first submit,
//!   seconds.
//! - **Actual share** of user `u` at time `t`: `actual_u` = cores in use by `u`
//!   / capacity.
//! - **Fair share**: `demand_u` = cores of `u`'s running and queued jobs /
//!   capacity; `fair_u` is the weighted max-min (water-filling) division of the
//!   whole cluster (1.0) among the users with demand, each capped at its demand
//!   ([`fair_shares`]): `fair_u = min(demand_u, w_u·λ)` with the level `λ` such
//!   that `Σ fair_u = min(1, Σ demand_u)`. With one resource this is what DRF
//!   (Ghodsi et al., "Dominant Resource Fairness", NSDI 2011) allocates in the
//!   limit of infinitely divisible jobs.
//! - **Contended**: at least one job is queued.
//! - **Fairness error**: `Σ_u max(0, fair_u − actual_u)`, the share of the
//!   cluster that users with demand are owed; time-averaged over contended time.
//! - **Jain's index** (R. Jain, D.-M. Chiu, W. Hawe, "A Quantitative Measure of
//!   Fairness and Discrimination for Resource Allocation in Shared Computer
//!   Systems", DEC TR-301, 1984) of `x_u = actual_u / fair_u` over the
//!   backlogged users (those with queued jobs): `(Σ x)² / (n · Σ x²)`, 1 when
//!   all get the same fraction of their fair share (also when all get
//!   nothing), `1/n` when one user gets everything; time-averaged over
//!   contended time.
//!
//! Both time averages are exact: the simulator evaluates the metrics after
//! every event (every state change) and integrates them, piecewise constant,
//! up to the next event. With no contended time they are reported as 0 and 1.

use std::fmt::Write as _;

use serde::Serialize;

use super::simulate::{simulate, SimConfig, SimOutcome, SimPolicy};
use super::swf::TraceJob;

/// The bound `τ` of the bounded slowdown, seconds.
pub const BSLD_BOUND_S: f64 = 10.0;

/// How many users [`Report::to_table`] lists (by jobs, most first).
pub const TABLE_USERS: usize = 15;

/// Bounded slowdown `max(1, (wait + run) / max(run, τ))` with
/// `τ =` [`BSLD_BOUND_S`]; `wait` and `run` in seconds.
#[must_use]
pub fn bounded_slowdown(wait: f64, run: f64) -> f64 {
    ((wait + run) / run.max(BSLD_BOUND_S)).max(1.0)
}

/// Nearest-rank 95th percentile: the `⌈0.95·n⌉`-th smallest of `values`
/// (sorted in place); 0 for no values.
#[must_use]
pub fn p95(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = (values.len() * 95).div_ceil(100);
    values[rank.saturating_sub(1)]
}

fn mean(values: impl IntoIterator<Item = f64>) -> f64 {
    let (sum, n) = values
        .into_iter()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// Weighted max-min fair shares of a cluster of size 1, capped at demand
/// (water-filling), written to `out` (same index as the inputs).
///
/// `weights[i] > 0` and `demands[i] ≥ 0` (fractions of the cluster). When the
/// demands sum to at most 1 every user gets its demand; otherwise users are
/// filled in order of `demand / weight` and those not capped share what is left
/// in proportion to their weights. Users with a non-positive weight get 0.
pub fn fair_shares(weights: &[f64], demands: &[f64], out: &mut Vec<f64>) {
    out.clear();
    out.resize(demands.len(), 0.0);
    let total: f64 = demands.iter().sum();
    if total <= 1.0 {
        out.copy_from_slice(demands);
        return;
    }
    let mut order: Vec<usize> = (0..demands.len())
        .filter(|&i| weights.get(i).is_some_and(|&w| w > 0.0))
        .collect();
    order.sort_by(|&a, &b| (demands[a] / weights[a]).total_cmp(&(demands[b] / weights[b])));
    let mut remaining = 1.0;
    let mut weight_left: f64 = order.iter().map(|&i| weights[i]).sum();
    for (k, &i) in order.iter().enumerate() {
        let level = remaining / weight_left;
        if demands[i] <= weights[i] * level {
            out[i] = demands[i];
            remaining -= demands[i];
            weight_left -= weights[i];
        } else {
            for &j in &order[k..] {
                out[j] = weights[j] * level;
            }
            return;
        }
    }
}

/// Jain's fairness index `(Σ x)² / (n · Σ x²)` of `values`; 1 for no values or
/// when all are 0.
#[must_use]
pub fn jain_index(values: &[f64]) -> f64 {
    let sum: f64 = values.iter().sum();
    let squares: f64 = values.iter().map(|x| x * x).sum();
    if values.is_empty() || squares <= 0.0 {
        1.0
    } else {
        sum * sum / (values.len() as f64 * squares)
    }
}

/// The whole run in numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Overall {
    /// Jobs that ran.
    pub jobs: usize,
    /// Jobs skipped because they request more cores than the capacity.
    pub skipped_too_large: usize,
    /// Their job numbers.
    pub skipped_job_numbers: Vec<u64>,
    /// Trace lines the reader could not use (unknown run time, user or
    /// processors, malformed).
    pub unparsed_lines: usize,
    /// Jobs that fit but never started (0 unless a policy is broken).
    pub never_started: usize,
    /// Busy core-seconds / (capacity × makespan), 0..1.
    pub utilization: f64,
    /// Last finish − first submit, seconds.
    pub makespan_s: f64,
    /// Mean wait, seconds.
    pub mean_wait_s: f64,
    /// Nearest-rank 95th percentile of the wait, seconds.
    pub p95_wait_s: f64,
    /// Mean bounded slowdown (bound 10 s).
    pub mean_bounded_slowdown: f64,
    /// Time average over contended time of `Σ_u max(0, fair_u − actual_u)`.
    pub fairness_error: f64,
    /// Time average over contended time of Jain's index of
    /// `actual_u / fair_u` over backlogged users.
    pub jain_index: f64,
    /// Seconds with at least one job queued.
    pub contended_s: f64,
    /// Event instants processed.
    pub steps: u64,
    /// Scheduling cycles or passes that ran.
    pub cycles: u64,
}

/// One user's numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UserReport {
    /// The user id.
    pub user: String,
    /// Its weight.
    pub weight: f64,
    /// Jobs it ran.
    pub jobs: usize,
    /// `Σ cpus × run` of its jobs, core-seconds.
    pub core_seconds: f64,
    /// Mean wait, seconds.
    pub mean_wait_s: f64,
    /// Nearest-rank 95th percentile of the wait, seconds.
    pub p95_wait_s: f64,
    /// Mean bounded slowdown (bound 10 s).
    pub mean_bounded_slowdown: f64,
}

/// The report of one simulation run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// The trace's name (file name without `.swf` / `.gz`).
    pub trace: String,
    /// The policy.
    pub policy: SimPolicy,
    /// Cores of the simulated cluster.
    pub capacity_cores: u32,
    /// Half-life of decayed usage, seconds (fairshare).
    pub half_life_s: f64,
    /// Starvation guard, seconds (fairshare); `null` in JSON when disabled.
    pub starvation_guard_s: Option<f64>,
    /// Cap on running jobs per user (fairshare); `null` when unlimited.
    pub max_running_jobs: Option<u32>,
    /// Seed of the gateway loop's random order.
    pub seed: u64,
    /// Numbers for the whole run.
    pub overall: Overall,
    /// Per user, most jobs first (ties by user id).
    pub users: Vec<UserReport>,
}

impl Report {
    /// Computes the report of `outcome`, run with `config` on the trace named
    /// `trace` that had `unparsed_lines` unusable lines.
    #[must_use]
    pub fn new(
        trace: &str,
        unparsed_lines: usize,
        config: &SimConfig,
        outcome: &SimOutcome,
    ) -> Report {
        let jobs = &outcome.jobs;
        let mut waits: Vec<f64> = jobs.iter().map(|j| j.wait()).collect();
        let first_submit = jobs.iter().map(|j| j.submit).fold(f64::INFINITY, f64::min);
        let last_finish = jobs
            .iter()
            .map(|j| j.finish())
            .fold(f64::NEG_INFINITY, f64::max);
        let makespan = if jobs.is_empty() {
            0.0
        } else {
            last_finish - first_submit
        };
        let busy: f64 = jobs.iter().map(|j| f64::from(j.cpus) * j.run).sum();
        let utilization = if makespan > 0.0 && outcome.capacity > 0 {
            busy / (f64::from(outcome.capacity) * makespan)
        } else {
            0.0
        };
        let (fairness_error, jain) = if outcome.contended_s > 0.0 {
            (
                outcome.fairness_error_integral / outcome.contended_s,
                outcome.jain_integral / outcome.contended_s,
            )
        } else {
            (0.0, 1.0)
        };
        let overall = Overall {
            jobs: jobs.len(),
            skipped_too_large: outcome.too_large.len(),
            skipped_job_numbers: outcome.too_large.clone(),
            unparsed_lines,
            never_started: outcome.never_started.len(),
            utilization,
            makespan_s: makespan,
            mean_wait_s: mean(waits.iter().copied()),
            p95_wait_s: p95(&mut waits),
            mean_bounded_slowdown: mean(jobs.iter().map(|j| bounded_slowdown(j.wait(), j.run))),
            fairness_error,
            jain_index: jain,
            contended_s: outcome.contended_s,
            steps: outcome.steps,
            cycles: outcome.cycles,
        };

        let mut per_user: Vec<Vec<usize>> = vec![Vec::new(); outcome.users.len()];
        for (k, job) in jobs.iter().enumerate() {
            if let Some(list) = per_user.get_mut(job.user) {
                list.push(k);
            }
        }
        let mut users: Vec<UserReport> = per_user
            .iter()
            .enumerate()
            .filter(|(_, list)| !list.is_empty())
            .map(|(u, list)| {
                let mut waits: Vec<f64> = list.iter().map(|&k| jobs[k].wait()).collect();
                UserReport {
                    user: outcome.users[u].clone(),
                    weight: outcome.weights.get(u).copied().unwrap_or(1.0),
                    jobs: list.len(),
                    core_seconds: list
                        .iter()
                        .map(|&k| f64::from(jobs[k].cpus) * jobs[k].run)
                        .sum(),
                    mean_wait_s: mean(waits.iter().copied()),
                    p95_wait_s: p95(&mut waits),
                    mean_bounded_slowdown: mean(
                        list.iter()
                            .map(|&k| bounded_slowdown(jobs[k].wait(), jobs[k].run)),
                    ),
                }
            })
            .collect();
        users.sort_by(|a, b| b.jobs.cmp(&a.jobs).then_with(|| a.user.cmp(&b.user)));

        Report {
            trace: trace.to_owned(),
            policy: outcome.policy,
            capacity_cores: outcome.capacity,
            half_life_s: config.half_life_s,
            starvation_guard_s: Some(config.starvation_guard_s).filter(|g| g.is_finite()),
            max_running_jobs: Some(config.max_running_jobs).filter(|&m| m != u32::MAX),
            seed: config.seed,
            overall,
            users,
        }
    }

    /// An aligned text table: the run's settings, the overall numbers, then
    /// the top [`TABLE_USERS`] users by jobs.
    #[must_use]
    pub fn to_table(&self) -> String {
        let o = &self.overall;
        let mut out = String::new();
        let guard = self
            .starvation_guard_s
            .map_or_else(|| "off".to_owned(), |g| format!("{g} s"));
        let _ = writeln!(
            out,
            "{} — policy {}, capacity {} cores, half-life {} s, starvation guard {}, seed {}",
            self.trace, self.policy, self.capacity_cores, self.half_life_s, guard, self.seed
        );
        let skipped = if o.skipped_job_numbers.is_empty() {
            o.skipped_too_large.to_string()
        } else {
            let shown: Vec<String> = o
                .skipped_job_numbers
                .iter()
                .take(10)
                .map(u64::to_string)
                .collect();
            let more = if o.skipped_job_numbers.len() > 10 {
                ", …"
            } else {
                ""
            };
            format!("{} (jobs {}{more})", o.skipped_too_large, shown.join(", "))
        };
        let rows = vec![
            vec!["jobs run".to_owned(), o.jobs.to_string()],
            vec!["skipped, larger than capacity".to_owned(), skipped],
            vec![
                "unparsed trace lines".to_owned(),
                o.unparsed_lines.to_string(),
            ],
            vec![
                "utilization".to_owned(),
                format!("{:.2} %", 100.0 * o.utilization),
            ],
            vec![
                "makespan".to_owned(),
                format!("{:.0} s ({:.1} h)", o.makespan_s, o.makespan_s / 3600.0),
            ],
            vec!["mean wait".to_owned(), format!("{:.1} s", o.mean_wait_s)],
            vec!["p95 wait".to_owned(), format!("{:.1} s", o.p95_wait_s)],
            vec![
                "mean bounded slowdown".to_owned(),
                format!("{:.2}", o.mean_bounded_slowdown),
            ],
            vec![
                "fairness error".to_owned(),
                format!("{:.4}", o.fairness_error),
            ],
            vec!["Jain's index".to_owned(), format!("{:.4}", o.jain_index)],
            vec![
                "contended time".to_owned(),
                format!("{:.0} s", o.contended_s),
            ],
        ];
        out.push_str(&format_table(&["overall", "value"], &rows, &[false, false]));
        if o.never_started > 0 {
            let _ = writeln!(out, "WARNING: {} jobs never started", o.never_started);
        }
        out.push('\n');
        let rows: Vec<Vec<String>> = self
            .users
            .iter()
            .take(TABLE_USERS)
            .map(|u| {
                vec![
                    u.user.clone(),
                    format!("{}", u.weight),
                    u.jobs.to_string(),
                    format!("{:.1}", u.core_seconds / 3600.0),
                    format!("{:.1}", u.mean_wait_s),
                    format!("{:.1}", u.p95_wait_s),
                    format!("{:.2}", u.mean_bounded_slowdown),
                ]
            })
            .collect();
        let title = format!("top {} of {} users by jobs", rows.len(), self.users.len());
        let _ = writeln!(out, "{title}");
        out.push_str(&format_table(
            &[
                "user",
                "weight",
                "jobs",
                "core-h",
                "mean wait (s)",
                "p95 wait (s)",
                "mean bsld",
            ],
            &rows,
            &[false, true, true, true, true, true, true],
        ));
        out
    }
}

/// One run per policy on the same trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// One `(report, outcome)` per policy, in [`SimPolicy::ALL`] order.
    pub runs: Vec<(Report, SimOutcome)>,
}

/// Runs every policy of [`SimPolicy::ALL`] on `trace` with `base` (its
/// `policy` field is overridden) and reports each run.
#[must_use]
pub fn compare(
    trace_name: &str,
    unparsed_lines: usize,
    trace: &[TraceJob],
    base: &SimConfig,
) -> Comparison {
    let runs = SimPolicy::ALL
        .iter()
        .map(|&policy| {
            let config = SimConfig {
                policy,
                ..base.clone()
            };
            let outcome = simulate(trace, &config);
            let report = Report::new(trace_name, unparsed_lines, &config, &outcome);
            (report, outcome)
        })
        .collect();
    Comparison { runs }
}

impl Comparison {
    /// One row per policy: policy, utilization %, makespan, mean and p95
    /// wait, mean bounded slowdown, fairness error, Jain's index.
    #[must_use]
    pub fn to_table(&self) -> String {
        let reports: Vec<&Report> = self.runs.iter().map(|(r, _)| r).collect();
        comparison_table(&reports)
    }

    /// The report of `policy`'s run, if it ran.
    #[must_use]
    pub fn get(&self, policy: SimPolicy) -> Option<&(Report, SimOutcome)> {
        self.runs.iter().find(|(r, _)| r.policy == policy)
    }
}

/// The comparison table of any reports: one row each.
#[must_use]
pub fn comparison_table(reports: &[&Report]) -> String {
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            let o = &r.overall;
            vec![
                r.policy.to_string(),
                format!("{:.2}", 100.0 * o.utilization),
                format!("{:.0}", o.makespan_s),
                format!("{:.1}", o.mean_wait_s),
                format!("{:.1}", o.p95_wait_s),
                format!("{:.2}", o.mean_bounded_slowdown),
                format!("{:.4}", o.fairness_error),
                format!("{:.4}", o.jain_index),
            ]
        })
        .collect();
    format_table(
        &[
            "policy",
            "util %",
            "makespan (s)",
            "mean wait (s)",
            "p95 wait (s)",
            "mean bsld",
            "fairness err",
            "Jain",
        ],
        &rows,
        &[false, true, true, true, true, true, true, true],
    )
}

/// Formats rows under headers, columns padded to their widest cell; columns
/// flagged in `right` are right-aligned.
fn format_table(headers: &[&str], rows: &[Vec<String>], right: &[bool]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (k, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(k) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (k, cell) in cells.enumerate() {
            let width = widths.get(k).copied().unwrap_or(0);
            let pad = width.saturating_sub(cell.chars().count());
            if k > 0 {
                s.push_str("  ");
            }
            if right.get(k).copied().unwrap_or(false) {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            } else {
                s.push_str(cell);
                s.push_str(&" ".repeat(pad));
            }
        }
        s.truncate(s.trim_end().len());
        s.push('\n');
        s
    };
    let mut out = line(&mut headers.iter().copied());
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    out.push_str(&line(&mut rule.iter().map(String::as_str)));
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}
