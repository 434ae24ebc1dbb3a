//! What the ledger is told between cycles: users' settings, usage and windows, jobs
//! starting and ending, cluster reports.

use std::collections::VecDeque;

use super::{Job, Ledger, Uid, UserSettings};
use crate::policy::licenses;
use crate::policy::{decay_usage, dominant_share, JobId, QueuedJob, Resources, Seconds};

impl Ledger {
    /// Sets the tree of groups ([`crate::policy::groups`]; users name theirs in
    /// [`UserSettings::group`]). With any group, cycles follow hierarchical order
    /// and cost O(users) per grant; with none, the incremental cycle's decisions.
    pub fn set_groups(&mut self, groups: &[crate::policy::GroupView]) {
        self.tree = crate::policy::Tree::new(groups);
        if let Some(last) = &mut self.last {
            last.grouped = None;
        }
        // A group's `max_resources` decides which jobs can never run (the effective
        // heads): every user is placed again.
        let now = self.now;
        for uid in 0..self.accounts.len() {
            self.reindex(uid as Uid, now);
        }
    }

    /// The tree of groups.
    #[must_use]
    pub fn tree(&self) -> &crate::policy::Tree {
        &self.tree
    }

    /// Makes `name` a pool (issue 30; [`crate::policy::ClusterView::pool`]): only
    /// jobs naming it go there, and no other. Report its capacity with
    /// [`Ledger::report_cluster`] as for a cluster. With any pool, cycles run the
    /// straightforward way (like groups: [`Ledger::set_groups`]).
    pub fn set_pool(&mut self, now: Seconds, name: &str) {
        let now = self.clock(now);
        let k = self.cluster(name);
        if !self.clusters[k].pool {
            self.clusters[k].pool = true;
            self.resize(now);
        }
    }

    /// Sets a user's settings (creating it if new).
    pub fn set_user(&mut self, now: Seconds, name: &str, settings: UserSettings) {
        let now = self.clock(now);
        let uid = self.account(name, now);
        self.accounts[uid as usize].settings = settings;
        self.reindex(uid, now);
    }

    /// Sets a user's decayed usage `usage`, valid at `usage_at` (seconds), as read back
    /// from the database (creating the user if new).
    pub fn set_usage(&mut self, now: Seconds, name: &str, usage: f64, usage_at: Seconds) {
        let now = self.clock(now);
        let uid = self.account(name, now);
        let a = &mut self.accounts[uid as usize];
        a.usage = usage;
        a.usage_at = usage_at;
        self.reindex(uid, now);
    }

    /// Replaces a user's window: a prefix of its QUEUED jobs in queue order (priority
    /// desc, submit time, id). Jobs outstanding in the ledger are left out.
    pub fn set_window(&mut self, now: Seconds, name: &str, mut window: Vec<QueuedJob>) {
        let now = self.clock(now);
        let uid = self.account(name, now);
        window.retain(|j| !self.jobs.contains_key(&j.job_id));
        let a = &mut self.accounts[uid as usize];
        a.window = VecDeque::from(window);
        a.queued = super::preempt::sum(&a.window);
        self.reindex(uid, now);
    }

    /// Appends a QUEUED job to the back of a user's window (creating the user if
    /// new): a job queued behind every job in it, as when a caller that passes its
    /// whole queue as the window sees one more job submitted (the simulator). The
    /// decisions are those of [`Ledger::set_window`] with the window and `job` after
    /// it, without copying the window: O(1) when the user already has an effective
    /// head (that head, the user's key and its indexes stay as they are). A job
    /// outstanding in the ledger is left out.
    pub fn push_queued(&mut self, now: Seconds, name: &str, job: QueuedJob) {
        let now = self.clock(now);
        let uid = self.account(name, now);
        if self.jobs.contains_key(&job.job_id) {
            return;
        }
        let a = &mut self.accounts[uid as usize];
        let had_head = a.head().is_some();
        a.queued += job.resources;
        a.window.push_back(job);
        if !had_head {
            self.reindex(uid, now);
        }
    }

    /// Makes sure `name` is known (with the default settings if new).
    pub fn ensure_user(&mut self, now: Seconds, name: &str) {
        let now = self.clock(now);
        self.account(name, now);
    }

    /// Whether `name` is known.
    pub fn knows(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Takes a QUEUED job out of its user's window (it was cancelled or left the
    /// queue); whether it was there.
    pub fn drop_queued(&mut self, now: Seconds, name: &str, job: JobId) -> bool {
        let now = self.clock(now);
        let Some(&uid) = self.by_name.get(name) else {
            return false;
        };
        let a = &mut self.accounts[uid as usize];
        let before = a.window.len();
        a.window.retain(|j| j.job_id != job);
        if a.window.len() == before {
            return false;
        }
        a.queued = super::preempt::sum(&a.window);
        self.reindex(uid, now);
        true
    }

    /// Counts `job` of `user` as outstanding on `cluster` (a recovered job, or one
    /// granted outside a cycle), holding `resources` until [`Ledger::end`]; its
    /// expected end is seconds since the epoch, if known. Not counted twice.
    pub fn start(
        &mut self,
        now: Seconds,
        job: JobId,
        user: &str,
        cluster: &str,
        resources: Resources,
        expected_end: Option<Seconds>,
    ) {
        let now = self.clock(now);
        if self.jobs.contains_key(&job) {
            return;
        }
        let uid = self.account(user, now);
        let k = self.cluster(cluster);
        self.hold(now, uid, k, job, resources, expected_end);
        let a = &mut self.accounts[uid as usize];
        let before = a.window.len();
        a.window.retain(|j| j.job_id != job);
        if a.window.len() != before {
            a.queued = super::preempt::sum(&a.window);
        }
        self.reindex(uid, now);
    }

    /// Adds a job to its user's allocation and its cluster's outstanding capacity.
    pub(super) fn hold(
        &mut self,
        now: Seconds,
        uid: Uid,
        k: usize,
        job: JobId,
        resources: Resources,
        expected_end: Option<Seconds>,
    ) {
        self.touch_usage(uid, now);
        let capacity = self.capacity;
        let a = &mut self.accounts[uid as usize];
        a.allocation += resources;
        a.outstanding = a.outstanding.saturating_add(1);
        a.share = dominant_share(&a.allocation, &capacity);
        self.book(now, job, uid, k, resources, expected_end);
    }

    /// Records `job` of `uid` as outstanding on cluster `k`: in the cluster's
    /// outstanding capacity (not in Ray's report yet) and its jobs by expected end.
    pub(super) fn book(
        &mut self,
        now: Seconds,
        job: JobId,
        uid: Uid,
        k: usize,
        resources: Resources,
        expected_end: Option<Seconds>,
    ) {
        let c = &mut self.clusters[k];
        c.outstanding += resources;
        c.unreported += resources;
        let end_key = c.add(job, resources, expected_end);
        self.jobs.insert(
            job,
            Job {
                uid,
                cluster: k,
                resources,
                declared: resources,
                reported: false,
                end_key,
                started_at: now,
                preemptible: false,
                preemptions: 0,
                stopping_for: None,
            },
        );
    }

    /// Every cluster as if every job on it had ended and no other tenant used it: its
    /// total free (what the what-if preview fills after its first round). Users keep
    /// their allocations and outstanding counts; the jobs are no longer followed
    /// (ending one later is a no-op), and no reservation is held.
    pub fn empty_clusters(&mut self) {
        for c in &mut self.clusters {
            c.used_reported = Resources::ZERO;
            c.outstanding = Resources::ZERO;
            c.unreported = Resources::ZERO;
            c.ends.clear();
        }
        self.jobs.clear();
        self.preempt.forget_all();
        self.reservation = None;
    }

    /// Ends an outstanding job (it finished, was declined, or is queued again): what
    /// it held is free again. Whether it was outstanding.
    pub fn end(&mut self, now: Seconds, job: JobId) -> bool {
        let now = self.clock(now);
        let Some(j) = self.jobs.remove(&job) else {
            return false;
        };
        self.forget_preemptible(job, &j);
        self.observe_runtime(now, now - j.started_at);
        self.touch_usage(j.uid, now);
        let capacity = self.capacity;
        let a = &mut self.accounts[j.uid as usize];
        a.outstanding = a.outstanding.saturating_sub(1);
        a.allocation = if a.outstanding == 0 {
            Resources::ZERO
        } else {
            a.allocation.saturating_sub(j.resources)
        };
        a.share = dominant_share(&a.allocation, &capacity);
        let c = &mut self.clusters[j.cluster];
        c.ends.remove(&j.end_key);
        if c.ends.is_empty() {
            c.used_reported = c
                .used_reported
                .saturating_sub(c.outstanding.saturating_sub(c.unreported));
            c.outstanding = Resources::ZERO;
            c.unreported = Resources::ZERO;
        } else {
            c.outstanding = c.outstanding.saturating_sub(j.resources);
            if j.reported {
                c.used_reported = c.used_reported.saturating_sub(j.resources);
            } else {
                c.unreported = c.unreported.saturating_sub(j.resources);
            }
        }
        self.reindex(j.uid, now);
        true
    }

    /// Counts a job that ran `runtime` seconds in the typical run time, and moves the
    /// guard in force with it. Heads that a longer guard no longer finds overdue are
    /// indexed again (a shorter one takes effect as the next cycle advances the
    /// waiting heads).
    fn observe_runtime(&mut self, now: Seconds, runtime: Seconds) {
        self.runtimes.observe(runtime);
        let guard = crate::policy::starvation::guard(&self.config, &self.runtimes);
        if guard.to_bits() == self.guard.to_bits() {
            return;
        }
        let longer = guard > self.guard;
        self.guard = guard;
        if longer {
            let early: Vec<Uid> = (0..self.accounts.len())
                .filter(|&u| {
                    let a = &self.accounts[u];
                    a.overdue
                        && a.head()
                            .is_some_and(|h| !super::overdue(now, h.submitted_at, guard))
                })
                .map(|u| u as Uid)
                .collect();
            for uid in early {
                self.reindex(uid, now);
            }
        }
    }

    /// Charges outstanding `job` `held` (cores, GPUs, bytes: what Ray's State API says
    /// its entrypoint, tasks and actors hold now) instead of what it was charged so
    /// far; never less than it declared, component by component (DESIGN §2, "What is
    /// charged"). Its user's allocation and dominant share, its decayed usage from now
    /// on, and its cluster's outstanding capacity follow. Whether anything changed.
    pub fn charge(&mut self, now: Seconds, job: JobId, held: Resources) -> bool {
        let now = self.clock(now);
        let Some(j) = self.jobs.get(&job) else {
            return false;
        };
        let charged = held.max(j.declared);
        if charged == j.resources {
            return false;
        }
        let (uid, k, old, reported, end_key) =
            (j.uid, j.cluster, j.resources, j.reported, j.end_key);
        self.touch_usage(uid, now);
        let capacity = self.capacity;
        let a = &mut self.accounts[uid as usize];
        a.allocation = a.allocation.saturating_sub(old) + charged;
        a.share = dominant_share(&a.allocation, &capacity);
        let c = &mut self.clusters[k];
        c.outstanding = c.outstanding.saturating_sub(old) + charged;
        if reported {
            c.used_reported = c.used_reported.saturating_sub(old) + charged;
        } else {
            c.unreported = c.unreported.saturating_sub(old) + charged;
        }
        if let Some(e) = c.ends.get_mut(&end_key) {
            e.1 = charged;
        }
        if let Some(j) = self.jobs.get_mut(&job) {
            j.resources = charged;
        }
        self.reindex(uid, now);
        true
    }

    /// Withholds `amount` of cluster `name`'s capacity from fitting until the next
    /// call (`Resources::ZERO` to release it): the arbiter withholds an autoscaling
    /// cluster's growth (potential less what is alive) between two scale-up batches, so
    /// that jobs which must wait for Ray to add a node are granted together, in fair
    /// order over every job queued by then, and not in the order they arrived (DESIGN
    /// §2, "Autoscaling clusters"; issue 44). Shares, the reservation's ceiling and
    /// preemption still count the whole capacity. Returns whether it changed; an
    /// unknown cluster is created unhealthy, as a report would.
    pub fn withhold(&mut self, name: &str, amount: Resources) -> bool {
        let k = self.cluster(name);
        let c = &mut self.clusters[k];
        let changed = c.withheld != amount;
        c.withheld = amount;
        changed
    }

    /// Takes a report of cluster `name`: whether it answers (`healthy`), its capacity
    /// `total` and what Ray reports in use (`used`, every tenant), of which
    /// `reported(job)` tells which of this service's jobs the report already counts.
    /// Other tenants' load is `used` less those jobs; the jobs it does not count yet
    /// are added to it when judging free capacity (DESIGN §2). Returns whether
    /// anything the policy sees changed.
    pub fn report_cluster(
        &mut self,
        now: Seconds,
        name: &str,
        healthy: bool,
        total: Resources,
        used: Resources,
        reported: impl Fn(&JobId) -> bool,
    ) -> bool {
        let now = self.clock(now);
        let k = self.cluster(name);
        let mut outstanding = Resources::ZERO;
        let mut unreported = Resources::ZERO;
        let mut ours_reported = Resources::ZERO;
        let ids: Vec<JobId> = self.clusters[k].ends.values().map(|(id, _)| *id).collect();
        for id in ids {
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
            job.reported = reported(&id);
            outstanding += job.resources;
            if job.reported {
                ours_reported += job.resources;
            } else {
                unreported += job.resources;
            }
        }
        let foreign = used.saturating_sub(ours_reported);
        let total = licenses::with_counts(total, &self.config.licenses);
        let c = &mut self.clusters[k];
        let resized = c.healthy != healthy || c.total != total;
        let before = (c.used_reported, c.outstanding, c.unreported);
        c.healthy = healthy;
        c.total = total;
        c.outstanding = outstanding;
        c.unreported = unreported;
        c.used_reported = foreign + outstanding.saturating_sub(unreported);
        let changed = resized || before != (c.used_reported, c.outstanding, c.unreported);
        if resized {
            self.resize(now);
        }
        changed
    }

    /// The healthy clusters changed: bring every user's usage to `now` with the
    /// share it held, then recompute capacity, shares and every index.
    pub(super) fn resize(&mut self, now: Seconds) {
        for uid in 0..self.accounts.len() {
            self.touch_usage(uid as Uid, now);
        }
        self.refresh_capacity();
        let capacity = self.capacity;
        for a in &mut self.accounts {
            a.share = dominant_share(&a.allocation, &capacity);
        }
        for uid in 0..self.accounts.len() {
            self.reindex(uid as Uid, now);
        }
    }

    pub(super) fn refresh_capacity(&mut self) {
        self.totals = self
            .by_cluster_name
            .values()
            .map(|&k| &self.clusters[k])
            .filter(|c| c.healthy)
            .map(|c| (c.name.clone(), c.pool, c.total))
            .collect();
        let sum = self
            .totals
            .iter()
            .fold(Resources::ZERO, |sum, total| sum + total.2);
        // A license counts once, not once per cluster.
        self.capacity = if self.totals.is_empty() {
            sum
        } else {
            licenses::with_counts(sum, &self.config.licenses)
        };
    }

    /// Brings a user's decayed usage to `now` with the share it holds (call before
    /// the share changes).
    pub(super) fn touch_usage(&mut self, uid: Uid, now: Seconds) {
        let hl = self.config.usage_half_life;
        let a = &mut self.accounts[uid as usize];
        let usage = decay_usage(a.usage, a.usage_at, a.share, now, hl);
        // An unchanged value needs no write: from the stored pair it decays the same
        // (it equals the share, or history is off).
        if usage != a.usage {
            a.usage_dirty = true;
        }
        a.usage = usage;
        a.usage_at = now;
    }

    /// Brings every user's decayed usage to `now` (before saving them all).
    pub fn touch_all_usage(&mut self, now: Seconds) {
        let now = self.clock(now);
        for uid in 0..self.accounts.len() {
            self.touch_usage(uid as Uid, now);
            self.accounts[uid].usage_dirty = true;
        }
        for uid in 0..self.accounts.len() {
            self.reindex(uid as Uid, now);
        }
    }

    /// The users whose decayed usage changed since the last call: `(user, usage,
    /// usage_at)`, the usage valid at `usage_at` (seconds); what a restart needs to
    /// carry usage on.
    pub fn take_usage_changes(&mut self) -> Vec<(String, f64, Seconds)> {
        let mut out = Vec::new();
        for a in &mut self.accounts {
            if std::mem::take(&mut a.usage_dirty) {
                out.push((a.name.to_string(), a.usage, a.usage_at));
            }
        }
        out
    }
}
