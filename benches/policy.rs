//! `policy::run_cycle` at scale (issue 11): grants per second and the cost of a cycle
//! that grants nothing, with 1,000,000 queued jobs spread over 100, 10,000 and
//! 100,000 users (each user's window is the first `min(64, jobs per user)` of its
//! queue, as the arbiter passes it).
//!
//!     cargo bench --bench policy
//!
//! "full_overdue": as "full", but every head has waited past the starvation guard and
//! one user in ten holds capacity, so one head takes the reservation.
//! "grants": one cluster with room for `GRANTS` one-core jobs, so one cycle grants
//! `GRANTS` jobs, or every windowed job when fewer (100 users × 64 = 6,400); divan's
//! throughput column is grants per second. "full": the cluster's
//! cores are all in use, so the cycle grants nothing (it still orders every user and
//! gives each head its pending reason).

use divan::counter::ItemsCount;
use divan::{black_box, Bencher};
use fairshare::policy::{self, ClusterView, PolicyConfig, QueuedJob, Resources, UserView};

const QUEUED: usize = 1_000_000;
const WINDOW: usize = 64;
const GRANTS: usize = 10_000;
const NOW: f64 = 1_000_000.0;

fn main() {
    divan::main();
}

fn config() -> PolicyConfig {
    PolicyConfig {
        usage_half_life: 3600.0,
        starvation_guard: 300.0,
        backfill: true,
        age_weight: 0.2,
        max_age: 86_400.0,
    }
}

/// `users` users sharing 1,000,000 queued one-core jobs; each view holds its window.
fn users(users: usize) -> Vec<UserView> {
    users_submitted(users, NOW - 60.0)
}

/// As [`users`], the jobs submitted from `at` (seconds) on.
fn users_submitted(users: usize, at: f64) -> Vec<UserView> {
    let per_user = QUEUED / users;
    (0..users)
        .map(|u| UserView {
            user: format!("u{u:06}"),
            weight: 1.0,
            paused: false,
            max_running_jobs: u32::MAX,
            max_resources: None,
            outstanding_jobs: 0,
            allocation: Resources::default(),
            usage: (u % 97) as f64 * 1e-4,
            usage_at: NOW,
            queue: (0..per_user.min(WINDOW))
                .map(|i| QueuedJob {
                    job_id: uuid::Uuid::from_u128(((u as u128) << 32) | i as u128),
                    resources: Resources::new(1.0, 0.0, 0.0),
                    priority: 0,
                    submitted_at: at + (u * per_user + i) as f64 * 1e-6,
                    runtime_estimate: Some(600.0),
                })
                .collect(),
        })
        .collect()
}

fn cluster(total_cpu: f64, used_cpu: f64) -> ClusterView {
    ClusterView {
        name: "c".into(),
        healthy: true,
        total: Resources::new(total_cpu, 0.0, 1e12),
        used_reported: Resources::new(used_cpu, 0.0, 0.0),
        outstanding: Resources::default(),
        unreported: Resources::default(),
        jobs: Vec::new(),
    }
}

/// One cycle that grants `GRANTS` jobs; throughput is grants per second.
#[divan::bench(args = [100, 10_000, 100_000], sample_count = 10)]
fn grants(bencher: Bencher, n_users: usize) {
    let views = users(n_users);
    let granted = GRANTS.min(views.iter().map(|v| v.queue.len()).sum());
    let clusters = [cluster(granted as f64, 0.0)];
    let config = config();
    bencher.counter(ItemsCount::new(granted)).bench(|| {
        let out = policy::run_cycle(NOW, &config, black_box(&views), &clusters, None);
        assert_eq!(out.grants.len(), granted);
        out
    });
}

/// One cycle on a full cluster: nothing is granted.
#[divan::bench(args = [100, 10_000, 100_000], sample_count = 10)]
fn full(bencher: Bencher, n_users: usize) {
    let views = users(n_users);
    let clusters = [cluster(1024.0, 1024.0)];
    let config = config();
    bencher.bench(|| {
        let out = policy::run_cycle(NOW, &config, black_box(&views), &clusters, None);
        assert!(out.grants.is_empty());
        out
    });
}

/// One cycle on a full cluster where every head has waited a day (past the
/// starvation guard) and every tenth user holds a core: one head takes the
/// reservation, nothing is granted.
#[divan::bench(args = [100, 10_000, 100_000], sample_count = 10)]
fn full_overdue(bencher: Bencher, n_users: usize) {
    let mut views = users_submitted(n_users, NOW - 86_400.0);
    let mut holders = 0.0;
    for v in views.iter_mut().step_by(10) {
        v.outstanding_jobs = 1;
        v.allocation = Resources::new(1.0, 0.0, 0.0);
        holders += 1.0;
    }
    let mut full = cluster(1024.0_f64.max(holders), 0.0);
    full.used_reported = full.total;
    full.outstanding = Resources::new(holders, 0.0, 0.0);
    let clusters = [full];
    let config = config();
    bencher.bench(|| {
        let out = policy::run_cycle(NOW, &config, black_box(&views), &clusters, None);
        assert!(out.grants.is_empty());
        out
    });
}
