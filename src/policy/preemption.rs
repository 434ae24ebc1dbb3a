//! Preemption's knobs and decisions (DESIGN §2, "Preemption"); the decision itself
//! is [`crate::policy::Ledger::preempt`].
//!
//! A head that has waited past [`PreemptionConfig::after`], fits no healthy
//! cluster's free capacity, and whose user holds less than its fair share may have
//! running **preemptible** jobs of users above their fair share stopped and queued
//! again, on the cluster where stopping the fewest lets it fit. The rules:
//!
//! - **Fair share** of a user: the weighted max-min (water-filling) division of the
//!   healthy capacity among the users with demand, each capped at its demand
//!   ([`crate::policy::fair_shares`] over dominant shares; demand = what its
//!   outstanding jobs hold, less the jobs being stopped, plus its window's
//!   requests, capped at 1). The simulator's fairness error measures against the
//!   same fair share.
//! - **Victims** are outstanding jobs marked preemptible, of another user whose
//!   dominant share (less its jobs being stopped) is above its fair share, that have
//!   run at least [`PreemptionConfig::min_runtime`] and were preempted fewer than
//!   [`PreemptionConfig::max_per_job`] times, youngest first (the least work lost;
//!   equal start times by the larger job id).
//! - A victim is taken only while the preemptor's weighted share after the
//!   preemption, `dominant_share(A_p + request) / w_p`, stays at or below the
//!   victim user's after it, `dominant_share(A_v − victims) / w_v` (Kueue's
//!   fair-sharing strategy `LessThanOrEqualToFinalShare`, KEP-1714), so a
//!   preemption never turns the preemptor into the one above its share. With
//!   groups the two are compared where their paths part, as the order compares
//!   them: the preemptor's side (the child of their lowest common group, or of the
//!   root, that holds it; itself if both sit in one group)
//!   `dominant_share(A_a + request) / w_a` against the
//!   victim's side `dominant_share(A_b − victims) / w_b`, where a group's `A` is
//!   what every user under it holds (less its jobs being stopped). The fair shares
//!   are hierarchical, so each user's own weight alone would stop short of them
//!   (issue 43 §2: groups 3:1 with one user each stopped at 2:2 of 4 cores, not
//!   3:1).
//! - With [`PreemptionConfig::shortfall`], a head for which that share rule finds no
//!   victims may still preempt under the **shortfall rule**: any other user's
//!   preemptible jobs (the same `min_runtime` and `max_per_job` limits), youngest
//!   first until the head fits, allowed only if what they hold,
//!   `Σ dominant_share(r_v)`, is less than the preemptor's gain towards its fair
//!   share, `min(dominant_share(request), fair_p − dominant_share(A_p))`. Every
//!   victim user's shortfall below its fair share grows by at most what it loses,
//!   and the preemptor's falls by the gain, so the sum of the shortfalls (the
//!   fairness error while contended: idle capacity plus capacity held beyond fair
//!   share) strictly falls with each such preemption. It lets a wide head start
//!   when most of its cores are idle and the rest are held by users at their fair
//!   share, which the share rule never allows.
//! - Of the clusters where victims found so let the head fit, the one needing the
//!   **fewest** victims is chosen (ties by cluster name).
//! - The capacity the victims free is the head's **claim**: each cycle first holds
//!   it back (up to the head's request) while some victims are still being
//!   stopped, then grants the head there once all have ended and it fits
//!   ([`crate::policy::Ledger`]'s `serve_claims`).
//! - At most [`PreemptionConfig::budget`] of the capacity (the victims' dominant
//!   shares, summed) is preempted per [`PreemptionConfig::interval`], except that
//!   when nothing was preempted within the interval one head's victims may exceed
//!   it (so that a budget below one job's share, as on a small cluster, still lets
//!   one preemption through per interval).
//! - Heads are considered in fair-share order (with groups, the hierarchical order
//!   the last cycle left); a head with jobs being stopped for it waits for them ([`crate::policy::PendingReason::Preempting`]) and preempts
//!   nothing more until they have all ended.

use serde::{Deserialize, Serialize};

use super::{JobId, Resources, Seconds};

/// `[preemption]` of the configuration, as the policy uses it (seconds, fractions).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PreemptionConfig {
    /// A head may preempt once it has waited longer than this, seconds (from its
    /// submit time). `f64::INFINITY` turns preemption off.
    pub after: Seconds,
    /// A job that has run less than this, seconds, is never preempted.
    pub min_runtime: Seconds,
    /// A job is never preempted more than this many times.
    pub max_per_job: u32,
    /// At most this fraction of the capacity (the sum of the victims' dominant
    /// shares) is preempted per `interval`, in `[0, 1]`; when nothing was preempted
    /// within the interval, one head's victims may exceed it.
    pub budget: f64,
    /// The window of `budget`, seconds.
    pub interval: Seconds,
    /// Whether a head for which the share rule finds no victims may still preempt
    /// under the shortfall rule (the module doc): victims of any other user, if
    /// what they hold is less than what the preemptor gains towards its fair share.
    #[serde(default)]
    pub shortfall: bool,
}

impl Default for PreemptionConfig {
    /// The service's defaults (`[preemption]` of `config/default.toml`), chosen on
    /// a family of traces, tuned on half and checked on the other half
    /// (BENCHMARKS.md, "Preemption's defaults"): a head may preempt after 10
    /// minutes, any job that opted in and has run 2 minutes, at most 5 times each,
    /// at most 2 % of the capacity per 6 hours but one head's victims whenever
    /// nothing was preempted within the last 6 hours, by the share rule only.
    fn default() -> Self {
        PreemptionConfig {
            after: 600.0,
            min_runtime: 120.0,
            max_per_job: 5,
            budget: 0.02,
            interval: 21_600.0,
            shortfall: false,
        }
    }
}

impl PreemptionConfig {
    /// Preemption off: no head ever preempts.
    pub const OFF: PreemptionConfig = PreemptionConfig {
        after: f64::INFINITY,
        min_runtime: 0.0,
        max_per_job: 0,
        budget: 0.0,
        interval: 0.0,
        shortfall: false,
    };
}

/// A decision: stop `job_id` of `user` on `cluster` and queue it again, for head
/// `for_job` of `for_user`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Preemption {
    /// The job to stop (the victim).
    pub job_id: JobId,
    /// Its user.
    pub user: String,
    /// Where it runs.
    pub cluster: String,
    /// What it holds there (what it is charged: cores, GPUs, bytes).
    pub resources: Resources,
    /// When it started, seconds: `now − started_at` of work is lost.
    pub started_at: Seconds,
    /// How many times it was preempted before this one.
    pub preemptions: u32,
    /// The head it is stopped for.
    pub for_job: JobId,
    /// That head's user.
    pub for_user: String,
}
