//! What a simulation run produced: the jobs as they ran and the share series.

use std::collections::HashMap;

use serde::Serialize;

use super::SimPolicy;
use crate::policy::{JobId, Seconds};
use crate::sim::swf::TraceJob;

/// One job as it ran in the simulation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobOutcome {
    /// The trace's job number.
    pub number: u64,
    /// Index of its user in [`SimOutcome::users`].
    pub user: usize,
    /// Cores it held.
    pub cpus: u32,
    /// Submit time, seconds since the trace start.
    pub submit: Seconds,
    /// Start time, seconds since the trace start.
    pub start: Seconds,
    /// Run time, seconds.
    pub run: Seconds,
    /// How many times it was preempted before the run that finished (`start` is
    /// that run's start).
    pub preemptions: u32,
    /// Seconds of its earlier runs that preemption cut short (0 if never
    /// preempted): part of its wait, not of its time queued.
    pub preempted_run_s: Seconds,
}

impl JobOutcome {
    /// Seconds between submit and start (of the run that finished).
    #[must_use]
    pub fn wait(&self) -> Seconds {
        self.start - self.submit
    }

    /// Seconds it spent queued: its wait less the runs that preemption cut
    /// short. Equal to the wait for a job never preempted.
    #[must_use]
    pub fn queued(&self) -> Seconds {
        self.wait() - self.preempted_run_s
    }

    /// Finish time, seconds since the trace start.
    #[must_use]
    pub fn finish(&self) -> Seconds {
        self.start + self.run
    }
}

/// A user's actual and fair share from time `t` until the next point.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SharePoint {
    /// Seconds since the trace start.
    pub t: Seconds,
    /// Cores the user holds / capacity.
    pub actual: f64,
    /// The user's weighted, demand-capped fair share (0 without demand).
    pub fair: f64,
}

/// One user's shares over time, piecewise constant: a point is recorded only
/// when a value changes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShareSeries {
    /// The user id.
    pub user: String,
    /// Change points in time order.
    pub points: Vec<SharePoint>,
}

/// What a simulation run produced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimOutcome {
    /// The policy that ran.
    pub policy: SimPolicy,
    /// Cores of the cluster.
    pub capacity: u32,
    /// User ids; [`JobOutcome::user`] indexes this.
    pub users: Vec<String>,
    /// Weight of each user, same index.
    pub weights: Vec<f64>,
    /// Every job that ran, in trace (submit) order.
    pub jobs: Vec<JobOutcome>,
    /// Job numbers skipped because they request more cores than the capacity (on an
    /// autoscaled cluster: than the widest node, head or worker type).
    pub too_large: Vec<u64>,
    /// Job numbers still queued when no event was left (always empty unless a
    /// policy can leave a fitting job queued forever).
    pub never_started: Vec<u64>,
    /// Seconds during which at least one job was queued.
    pub queued_s: Seconds,
    /// ∫ free cores dt while at least one job was queued, core-seconds.
    pub idle_while_queued_core_s: f64,
    /// ∫ fairness error dt over queued time (the definition before issue 10,
    /// which called all queued time contended), for comparison.
    pub queued_error_integral: f64,
    /// Seconds of contention (see [`crate::sim::report`]): some user is backlogged
    /// and the users' demands, each capped at the capacity, sum to more than
    /// the capacity.
    pub contended_s: Seconds,
    /// ∫ fairness error dt over contended time.
    pub fairness_error_integral: f64,
    /// ∫ free cores / capacity dt over contended time: the part of the
    /// fairness error integral that is capacity nobody holds (the rest is
    /// what users hold beyond their fair share).
    pub contended_idle_integral: f64,
    /// Seconds of contended time in which some backlogged user holds cores:
    /// the time Jain's index is scored over.
    pub jain_s: Seconds,
    /// ∫ Jain's index dt over `jain_s`.
    pub jain_integral: f64,
    /// Instants at which events were processed.
    pub steps: u64,
    /// Scheduling cycles (fairshare) or passes (gateway-loop) actually run,
    /// or FIFO steps that started something.
    pub cycles: u64,
    /// Preemptions made (fairshare with preemptible jobs).
    pub preemptions: u64,
    /// Core-seconds of the runs preemption cut short: work lost.
    pub lost_core_s: f64,
    /// Shares over time of [`SimConfig::record_shares_for`].
    ///
    /// [`SimConfig::record_shares_for`]: super::SimConfig::record_shares_for
    pub series: Vec<ShareSeries>,
    /// Per user (as [`SimOutcome::users`]): over the contended time in which it
    /// had demand, its demand (cores of its running and queued jobs / capacity)
    /// averaged more than its fair share before the cap at demand, `λ · w_u`
    /// (`λ` the water level of the weighted max-min division). Users for whom it
    /// is false stayed at or below their fair share over the run's busy time
    /// (issue 47's "below-share" users). (Capped at demand, the fair share is
    /// never below the demand, so the cap is left out; read instant by instant,
    /// almost every user of a busy trace exceeds it at some moment.)
    pub above_share: Vec<bool>,
    /// What the autoscaler did (autoscaled runs only, [`super::SimConfig::autoscale`]):
    /// the nodes' lives, each job's node and grant time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<super::AutoscaleOutcome>,
}

/// The users holding the most core-seconds (`cpus × run`) in `jobs`, counting
/// only jobs that fit `capacity`, most first (ties by user id); at most `n`.
#[must_use]
pub fn top_users_by_core_seconds(jobs: &[TraceJob], capacity: u32, n: usize) -> Vec<String> {
    let mut totals: HashMap<&str, f64> = HashMap::new();
    for job in jobs.iter().filter(|j| j.cpus <= capacity) {
        *totals.entry(job.user.as_str()).or_default() += f64::from(job.cpus) * job.run;
    }
    let mut ranked: Vec<(&str, f64)> = totals.into_iter().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    ranked
        .into_iter()
        .take(n)
        .map(|(u, _)| u.to_owned())
        .collect()
}

/// The policy's job id of trace job `number`.
#[must_use]
pub fn job_id(number: u64) -> JobId {
    JobId::from_u128(u128::from(number))
}
