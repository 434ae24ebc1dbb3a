//! What-if preview (issue 14 §3, DESIGN §2 "What-if"): the grants the policy would
//! make next on a copy of the arbiter's state, as it is and with a proposed admin
//! change applied, without changing anything.
//!
//! Pure: a [`Ledger`] built from a [`Snapshot`] of the arbiter's input makes the
//! same decision the arbiter's ledger makes.
//!
//! # The next grants
//!
//! [`next_grants`] lists up to `limit` grants in the order the policy would make
//! them, with **no job finishing** (allocations only grow):
//!
//! 1. **Now**: one cycle on the snapshot as is (real free capacity, the held
//!    reservation): exactly what the arbiter's next cycle grants if nothing else
//!    changes first. These grants name their cluster (`now = true`).
//! 2. **As capacity frees**: the grants stay in their users' allocations and
//!    outstanding counts, and the cycle runs again on the healthy clusters as if they
//!    were empty (their totals, none of our or other tenants' usage), so it fills
//!    them in fair-share order; repeated until `limit` grants or a cycle grants
//!    nothing (every user left is paused, at a limit, or out of queued jobs). Shares
//!    stay measured against the real capacity. This is the order in which jobs start
//!    when capacity frees up a job's worth at a time while nobody's running jobs end
//!    (no share goes down); these grants carry no cluster (`now = false`). The rounds
//!    run on one [`Ledger`] built from the snapshot, as the arbiter keeps one: a
//!    granted user's decayed usage is brought to `now` with the share it held before
//!    its grant, as the arbiter does.
//!
//! Only the jobs the arbiter sees are previewed: each user's window
//! (`scheduler.queue_window`, 64 by default). Time stands still at the snapshot's
//! `now`: the age term and decayed usage move keys as time passes, so a preview
//! taken minutes before a change can differ where keys are close.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::{
    decay_usage, dominant_share, fair_share_key, ClusterView, JobId, Ledger, PolicyConfig,
    Reservation, Resources, Seconds, UserView,
};

/// A copy of the arbiter's policy input at one instant: what [`super::run_cycle`]
/// would be called with now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The instant, seconds since the epoch.
    pub now: Seconds,
    /// The policy's knobs.
    pub config: PolicyConfig,
    /// Every user the arbiter knows, with its window of QUEUED jobs (possibly empty).
    pub users: Vec<UserView>,
    /// Every configured cluster as the policy sees it.
    pub clusters: Vec<ClusterView>,
    /// The reservation held, if any.
    pub reservation: Option<Reservation>,
    /// The groups (empty: none; users name theirs in [`UserView::group`]).
    #[serde(default)]
    pub groups: Vec<super::GroupView>,
}

/// A proposed change to one user's fair-share settings; `None` keeps the current value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UserChange {
    /// New weight (> 0).
    pub weight: Option<f64>,
    /// Pause (`true`) or resume (`false`).
    pub paused: Option<bool>,
    /// New cap on outstanding jobs (already resolved against the default).
    pub max_running_jobs: Option<u32>,
    /// New cap on the allocation: `Some(None)` removes it.
    pub max_resources: Option<Option<Resources>>,
    /// Move to a group (`Some(Some(path))`) or to the root (`Some(None)`).
    #[serde(default)]
    pub group: Option<Option<String>>,
}

/// A proposed change to one cluster; `None` keeps the current value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterChange {
    /// New total capacity (cores, GPUs, bytes). Other tenants' usage and this
    /// service's jobs there stay as they are.
    pub total: Option<Resources>,
    /// Healthy (granted to) or not.
    pub healthy: Option<bool>,
}

/// A proposed admin change: per user and per cluster, by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// Changes by user id.
    pub users: BTreeMap<String, UserChange>,
    /// Changes by cluster name.
    pub clusters: BTreeMap<String, ClusterChange>,
    /// Changes by group path.
    #[serde(default)]
    pub groups: BTreeMap<String, GroupChange>,
}

/// A proposed change to one group; `None` keeps the current value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupChange {
    /// New weight (> 0).
    pub weight: Option<f64>,
    /// Pause (`true`) or resume (`false`).
    pub paused: Option<bool>,
    /// New cap on the outstanding jobs of its users (`u32::MAX`: none).
    pub max_running_jobs: Option<u32>,
}

/// One previewed grant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PreviewGrant {
    /// The job's user.
    pub user: String,
    /// The job.
    pub job_id: JobId,
    /// The cluster it goes to, for a grant made now; `None` for one made as capacity
    /// frees (which cluster frees first is not known).
    pub cluster: Option<String>,
    /// Granted by the next cycle with today's free capacity (`true`), or only once
    /// capacity frees (`false`).
    pub now: bool,
}

/// One user's fair-share state at the snapshot's instant, as `GET /v1/users` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserState {
    /// The user id.
    pub user: String,
    /// Weight `w_u`.
    pub weight: f64,
    /// Paused by an admin.
    pub paused: bool,
    /// Dominant share `s_u` of its allocation over the healthy clusters' capacity.
    pub share: f64,
    /// Decayed usage `h_u` brought to the instant.
    pub usage: f64,
    /// Fair-share key `(s_u + h_u) / w_u`, before the age term.
    pub key: f64,
}

/// What [`next_grants`] found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Preview {
    /// Up to `limit` grants, in the order they would be made.
    pub grants: Vec<PreviewGrant>,
    /// Every user of the snapshot, by id, before any of these grants.
    pub users: Vec<UserState>,
}

/// A name in a [`Change`] that the snapshot does not have.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    /// The change names a user the snapshot does not have.
    #[error("no user {0:?} is known to the scheduler")]
    UnknownUser(String),
    /// The change names a cluster the snapshot does not have.
    #[error("no cluster {0:?} is configured")]
    UnknownCluster(String),
    /// The change names a group the snapshot does not have.
    #[error("no group {0:?} exists")]
    UnknownGroup(String),
}

impl Snapshot {
    /// A copy with `change` applied. Errors: the change names a user or cluster the
    /// snapshot does not have.
    pub fn with(&self, change: &Change) -> Result<Snapshot, ChangeError> {
        let mut out = self.clone();
        for (name, c) in &change.users {
            let u = out
                .users
                .iter_mut()
                .find(|u| &u.user == name)
                .ok_or_else(|| ChangeError::UnknownUser(name.clone()))?;
            if let Some(w) = c.weight {
                u.weight = w;
            }
            if let Some(p) = c.paused {
                u.paused = p;
            }
            if let Some(m) = c.max_running_jobs {
                u.max_running_jobs = m;
            }
            if let Some(r) = c.max_resources {
                u.max_resources = r;
            }
            if let Some(g) = &c.group {
                if let Some(path) = g {
                    if !self.groups.iter().any(|x| &x.path == path) {
                        return Err(ChangeError::UnknownGroup(path.clone()));
                    }
                }
                u.group.clone_from(g);
            }
        }
        for (path, c) in &change.groups {
            let g = out
                .groups
                .iter_mut()
                .find(|g| &g.path == path)
                .ok_or_else(|| ChangeError::UnknownGroup(path.clone()))?;
            if let Some(w) = c.weight {
                g.weight = w;
            }
            if let Some(p) = c.paused {
                g.paused = p;
            }
            if let Some(m) = c.max_running_jobs {
                g.max_running_jobs = m;
            }
        }
        for (name, c) in &change.clusters {
            let k = out
                .clusters
                .iter_mut()
                .find(|k| &k.name == name)
                .ok_or_else(|| ChangeError::UnknownCluster(name.clone()))?;
            if let Some(t) = c.total {
                k.total = t;
            }
            if let Some(h) = c.healthy {
                k.healthy = h;
            }
        }
        Ok(out)
    }

    /// Sum of the healthy clusters' totals, each license counted once: the capacity
    /// shares are measured against (as the ledger's).
    pub(crate) fn capacity(&self) -> Resources {
        let healthy = self.clusters.iter().filter(|c| c.healthy);
        let sum = healthy
            .clone()
            .fold(Resources::ZERO, |acc, c| acc + c.total);
        if healthy.count() == 0 {
            sum
        } else {
            super::licenses::with_counts(sum, &self.config.licenses)
        }
    }

    /// Every user's state at `now`, by id.
    fn user_states(&self) -> Vec<UserState> {
        let capacity = self.capacity();
        let mut out: Vec<UserState> = self
            .users
            .iter()
            .map(|u| {
                let share = dominant_share(&u.allocation, &capacity);
                let usage = decay_usage(
                    u.usage,
                    u.usage_at,
                    share,
                    self.now,
                    self.config.usage_half_life,
                );
                UserState {
                    user: u.user.clone(),
                    weight: u.weight,
                    paused: u.paused,
                    share,
                    usage,
                    key: fair_share_key(share, usage, u.weight),
                }
            })
            .collect();
        out.sort_by(|a, b| a.user.cmp(&b.user));
        out
    }
}

/// The next grants (up to `limit`) on `snapshot`, with no job finishing (module doc),
/// and every user's state before them.
pub fn next_grants(snapshot: &Snapshot, limit: usize) -> Preview {
    let users = snapshot.user_states();
    let mut grants = Vec::new();
    if limit == 0 {
        return Preview { grants, users };
    }
    let now = snapshot.now;
    // One ledger for every round: after the first, a round costs what it grants.
    let mut ledger = Ledger::from_views(
        snapshot.config.clone(),
        now,
        &snapshot.users,
        &snapshot.clusters,
        snapshot.reservation.as_ref(),
    );
    ledger.set_groups(&snapshot.groups);
    let first = ledger.cycle(now);
    grants.extend(first.grants.into_iter().map(|g| PreviewGrant {
        user: g.user,
        job_id: g.job_id,
        cluster: Some(g.cluster),
        now: true,
    }));
    // Each round grants at least one job, so this ends within `limit` rounds.
    while grants.len() < limit {
        // The healthy clusters as if every job on them had ended: their totals to
        // fill (the users keep what they were granted).
        ledger.empty_clusters();
        let outcome = ledger.cycle(now);
        if outcome.grants.is_empty() {
            break;
        }
        grants.extend(outcome.grants.into_iter().map(|g| PreviewGrant {
            user: g.user,
            job_id: g.job_id,
            cluster: None,
            now: false,
        }));
    }
    grants.truncate(limit);
    Preview { grants, users }
}

/// Whether a job moves between two previews.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Move {
    /// It is granted earlier with the change (or only with it, within the limit).
    Sooner,
    /// It is granted later with the change (or only without it, within the limit).
    Later,
}

/// A job whose place among the next grants differs with the change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MovedJob {
    /// The job.
    pub job_id: JobId,
    /// Its user.
    pub user: String,
    /// 1-based place among the grants without the change; `None` = not within them.
    pub before: Option<usize>,
    /// 1-based place among the grants with the change; `None` = not within them.
    pub after: Option<usize>,
    /// Sooner or later with the change.
    pub change: Move,
}

/// The jobs whose place differs between `before` and `after`, ordered by their place
/// with the change (jobs that drop out last), then without it.
pub fn moved(before: &[PreviewGrant], after: &[PreviewGrant]) -> Vec<MovedJob> {
    let place = |list: &[PreviewGrant]| -> HashMap<JobId, (usize, String)> {
        list.iter()
            .enumerate()
            .map(|(i, g)| (g.job_id, (i + 1, g.user.clone())))
            .collect()
    };
    let (b, a) = (place(before), place(after));
    let mut ids: Vec<JobId> = before.iter().chain(after).map(|g| g.job_id).collect();
    ids.sort();
    ids.dedup();
    let mut out: Vec<MovedJob> = ids
        .into_iter()
        .filter_map(|id| {
            let pb = b.get(&id);
            let pa = a.get(&id);
            let user = pa.or(pb).map(|(_, u)| u.clone())?;
            let (before, after) = (pb.map(|p| p.0), pa.map(|p| p.0));
            let change = match (before, after) {
                (Some(x), Some(y)) if y < x => Move::Sooner,
                (Some(x), Some(y)) if y > x => Move::Later,
                (None, Some(_)) => Move::Sooner,
                (Some(_), None) => Move::Later,
                _ => return None,
            };
            Some(MovedJob {
                job_id: id,
                user,
                before,
                after,
                change,
            })
        })
        .collect();
    out.sort_by_key(|m| {
        (
            m.after.unwrap_or(usize::MAX),
            m.before.unwrap_or(usize::MAX),
        )
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::QueuedJob;

    fn cfg() -> PolicyConfig {
        PolicyConfig {
            usage_half_life: 0.0,
            starvation_guard: f64::INFINITY,
            starvation_runs: 0.0,
            backfill: true,
            age_weight: 0.0,
            max_age: 86_400.0,
            licenses: crate::policy::Custom::EMPTY,
        }
    }

    fn job(n: u128, at: f64) -> QueuedJob {
        QueuedJob::new(uuid::Uuid::from_u128(n), Resources::new(1.0, 0.0, 0.0), at)
    }

    fn user(name: &str, ids: std::ops::Range<u128>) -> UserView {
        UserView {
            user: name.into(),
            weight: 1.0,
            paused: false,
            max_running_jobs: 100,
            max_resources: None,
            outstanding_jobs: 0,
            allocation: Resources::ZERO,
            usage: 0.0,
            usage_at: 0.0,
            group: None,
            queue: ids.map(|n| job(n, n as f64)).collect(),
        }
    }

    /// 4 cores, `used` of them taken by another tenant.
    fn snapshot(used: f64) -> Snapshot {
        Snapshot {
            now: 1000.0,
            config: cfg(),
            users: vec![user("alice", 1..5), user("bob", 11..15)],
            clusters: vec![ClusterView {
                name: "c".into(),
                healthy: true,
                total: Resources::new(4.0, 0.0, 0.0),
                used_reported: Resources::new(used, 0.0, 0.0),
                outstanding: Resources::ZERO,
                unreported: Resources::ZERO,
                jobs: Vec::new(),
                pool: false,
            }],
            reservation: None,
            groups: Vec::new(),
        }
    }

    /// With groups, the preview is hierarchical: alice alone in group a (weight 3),
    /// bob and carol in group b (weight 1): on 4 free cores a gets 3, b 1.
    #[test]
    fn the_preview_follows_the_groups() {
        let mut s = snapshot(0.0);
        s.users.push(user("carol", 21..25));
        for (u, g) in s.users.iter_mut().zip(["a", "b", "b"]) {
            u.group = Some(g.into());
        }
        s.groups = vec![
            super::super::GroupView {
                weight: 3.0,
                ..super::super::GroupView::new("a")
            },
            super::super::GroupView::new("b"),
        ];
        let p = next_grants(&s, 4);
        assert!(p.grants.iter().all(|g| g.now));
        assert_eq!(users_of(&p), ["alice", "bob", "alice", "alice"]);
        // Previewed: group b at weight 3 too, and carol moved to a. By hand: a and b
        // tie at 0, a first (path order): alice (older head than carol); b: bob;
        // a and b tie at 1/4 / 3, a first: carol (a at 2/12); b (1/12): bob.
        let change = Change {
            users: [(
                "carol".to_string(),
                UserChange {
                    group: Some(Some("a".into())),
                    ..Default::default()
                },
            )]
            .into(),
            groups: [(
                "b".to_string(),
                GroupChange {
                    weight: Some(3.0),
                    ..Default::default()
                },
            )]
            .into(),
            ..Default::default()
        };
        let p = next_grants(&s.with(&change).unwrap(), 4);
        assert_eq!(users_of(&p), ["alice", "bob", "carol", "bob"]);
        let unknown = Change {
            groups: [("nope".to_string(), GroupChange::default())].into(),
            ..Default::default()
        };
        assert!(matches!(
            s.with(&unknown),
            Err(ChangeError::UnknownGroup(_))
        ));
    }

    fn users_of(p: &Preview) -> Vec<&str> {
        p.grants.iter().map(|g| g.user.as_str()).collect()
    }

    #[test]
    fn grants_that_fit_now_name_their_cluster_and_the_rest_follow_in_fair_share_order() {
        let p = next_grants(&snapshot(2.0), 6);
        assert_eq!(
            users_of(&p),
            ["alice", "bob", "alice", "bob", "alice", "bob"]
        );
        assert!(p.grants[..2]
            .iter()
            .all(|g| g.now && g.cluster.as_deref() == Some("c")));
        assert!(p.grants[2..].iter().all(|g| !g.now && g.cluster.is_none()));
    }

    #[test]
    fn a_weight_change_moves_the_heavier_users_jobs_sooner() {
        let s = snapshot(4.0);
        let change = Change {
            users: [(
                "alice".to_string(),
                UserChange {
                    weight: Some(3.0),
                    ..Default::default()
                },
            )]
            .into(),
            ..Default::default()
        };
        let before = next_grants(&s, 8);
        let after = next_grants(&s.with(&change).unwrap(), 8);
        assert!(before.grants.iter().chain(&after.grants).all(|g| !g.now));
        // Weight 3: alice is served until she holds three times bob's share.
        assert_eq!(
            users_of(&after),
            ["alice", "bob", "alice", "alice", "alice", "bob", "bob", "bob"]
        );
        let moved = moved(&before.grants, &after.grants);
        let third_alice = uuid::Uuid::from_u128(3);
        assert!(moved
            .iter()
            .any(|m| m.job_id == third_alice && m.change == Move::Sooner));
        assert!(moved
            .iter()
            .all(|m| (m.user == "alice") == (m.change == Move::Sooner)));
        assert_eq!(after.users[0].weight, 3.0);
    }

    #[test]
    fn pausing_a_user_leaves_only_the_others_jobs_and_stops_at_their_end() {
        let s = snapshot(0.0);
        let change = Change {
            users: [(
                "bob".to_string(),
                UserChange {
                    paused: Some(true),
                    ..Default::default()
                },
            )]
            .into(),
            ..Default::default()
        };
        let p = next_grants(&s.with(&change).unwrap(), 20);
        assert_eq!(users_of(&p), ["alice"; 4]);
        assert!(p.grants.iter().all(|g| g.now));
        assert!(p.users.iter().any(|u| u.user == "bob" && u.paused));
    }

    #[test]
    fn a_larger_cluster_grants_more_now_and_limits_hold_without_completions() {
        let s = snapshot(0.0);
        let change = Change {
            users: [(
                "alice".to_string(),
                UserChange {
                    max_running_jobs: Some(1),
                    ..Default::default()
                },
            )]
            .into(),
            clusters: [(
                "c".to_string(),
                ClusterChange {
                    total: Some(Resources::new(8.0, 0.0, 0.0)),
                    healthy: None,
                },
            )]
            .into(),
            ..Default::default()
        };
        let p = next_grants(&s.with(&change).unwrap(), 20);
        assert_eq!(users_of(&p), ["alice", "bob", "bob", "bob", "bob"]);
        assert!(p.grants.iter().all(|g| g.now));
    }

    #[test]
    fn the_limit_caps_the_list_and_an_unhealthy_cluster_grants_nothing() {
        assert_eq!(next_grants(&snapshot(0.0), 3).grants.len(), 3);
        assert!(next_grants(&snapshot(0.0), 0).grants.is_empty());
        let change = Change {
            clusters: [(
                "c".to_string(),
                ClusterChange {
                    total: None,
                    healthy: Some(false),
                },
            )]
            .into(),
            ..Default::default()
        };
        let p = next_grants(&snapshot(0.0).with(&change).unwrap(), 10);
        assert!(p.grants.is_empty());
    }

    #[test]
    fn a_change_naming_an_unknown_user_or_cluster_is_refused() {
        let mut change = Change::default();
        change.users.insert("carol".into(), UserChange::default());
        assert_eq!(
            snapshot(0.0).with(&change),
            Err(ChangeError::UnknownUser("carol".into()))
        );
        let mut change = Change::default();
        change.clusters.insert("d".into(), ClusterChange::default());
        assert_eq!(
            snapshot(0.0).with(&change),
            Err(ChangeError::UnknownCluster("d".into()))
        );
    }

    #[test]
    fn without_a_change_both_previews_agree_and_nothing_moves() {
        let s = snapshot(1.0);
        let a = next_grants(&s, 8);
        let b = next_grants(&s.with(&Change::default()).unwrap(), 8);
        assert_eq!(a, b);
        assert!(moved(&a.grants, &b.grants).is_empty());
    }
}
