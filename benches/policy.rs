//! The policy at scale (issue 11): grants per second and the cost of cycles that
//! grant nothing or one job, with 1,000,000 queued jobs spread over 100, 10,000 and
//! 100,000 users (each user's window is the first `min(64, jobs per user)` of its
//! queue, as the arbiter passes it).
//!
//!     cargo bench --bench policy
//!
//! Two ways in:
//!
//! - `ledger_*`: a [`Ledger`] kept between cycles, as the arbiter keeps it; the state
//!   is built once, outside the timing, and each sample is one more cycle.
//!   - `ledger_full`: the cluster's cores are all in use, no head has waited past the
//!     starvation guard: the cycle grants nothing.
//!   - `ledger_full_overdue`: as full, but every head has waited a day and one user in
//!     ten holds capacity, so a reservation is made (first cycle, untimed) and held.
//!   - `ledger_one_freed`: one running job ends, then a cycle grants the one job that
//!     fits the core it freed (the finish → dispatch path): `end` plus `cycle`.
//!   - `ledger_grants`: one cycle granting `GRANTS` jobs on an empty cluster (the
//!     ledger built untimed for each sample); throughput is grants per second.
//! - `run_cycle_*`: [`policy::run_cycle`] on a snapshot, which builds a ledger from
//!   every user each call (what the simulator and the what-if preview do): `full`
//!   and `grants` as above.

use divan::counter::ItemsCount;
use divan::{black_box, Bencher};
use fairshare::policy::{
    self, ClusterView, JobId, Ledger, PolicyConfig, QueuedJob, Resources, UserSettings, UserView,
};

const QUEUED: usize = 1_000_000;
const WINDOW: usize = 64;
const GRANTS: usize = 10_000;
const NOW: f64 = 1_000_000.0;
const CORES: f64 = 1024.0;

fn main() {
    divan::main();
}

fn config() -> PolicyConfig {
    PolicyConfig {
        usage_half_life: 3600.0,
        starvation_guard: 300.0,
        starvation_runs: 0.0,
        backfill: true,
        age_weight: 0.2,
        max_age: 86_400.0,
        licenses: fairshare::policy::Custom::EMPTY,
    }
}

fn job_id(user: usize, i: usize) -> JobId {
    uuid::Uuid::from_u128(((user as u128) << 32) | i as u128)
}

/// User `u`'s window: one-core jobs submitted from `at` (seconds) on.
fn window(u: usize, users: usize, at: f64) -> Vec<QueuedJob> {
    let per_user = QUEUED / users;
    (0..per_user.min(WINDOW))
        .map(|i| {
            QueuedJob::new(
                job_id(u, i),
                Resources::new(1.0, 0.0, 0.0),
                at + (u * per_user + i) as f64 * 1e-6,
            )
            .with_runtime_estimate(600.0)
        })
        .collect()
}

/// `users` users sharing 1,000,000 queued one-core jobs, submitted from `at`; each
/// view holds its window.
fn views(users: usize, at: f64) -> Vec<UserView> {
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
            group: None,
            queue: window(u, users, at),
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
        pool: false,
    }
}

/// A ledger of `users` users whose jobs were submitted from `at`, on one cluster of
/// `cores` cores; the first `running` users (one in `every`) each hold one core with
/// a job of their own, and other tenants hold `foreign` cores.
fn ledger(users: usize, at: f64, cores: f64, holders_every: usize, foreign: f64) -> Ledger {
    let mut ledger = Ledger::new(config(), UserSettings::default());
    ledger.report_cluster(
        NOW,
        "c",
        true,
        Resources::new(cores, 0.0, 1e12),
        Resources::new(foreign, 0.0, 0.0),
        |_| false,
    );
    for u in 0..users {
        let name = format!("u{u:06}");
        ledger.set_usage(NOW, &name, (u % 97) as f64 * 1e-4, NOW);
        ledger.set_window(NOW, &name, window(u, users, at));
        if holders_every > 0 && u % holders_every == 0 {
            let id = job_id(u, 1 << 20);
            let one = Resources::new(1.0, 0.0, 0.0);
            ledger.start(NOW, id, &name, "c", one, Some(NOW + 600.0));
        }
    }
    ledger
}

/// A cycle on a full cluster: nothing to grant, no head past the guard.
#[divan::bench(args = [100, 10_000, 100_000], sample_count = 20, sample_size = 10)]
fn ledger_full(bencher: Bencher, n_users: usize) {
    let mut ledger = ledger(n_users, NOW - 60.0, CORES, 0, CORES);
    let mut now = NOW;
    bencher.bench_local(|| {
        now += 0.001;
        let out = ledger.cycle(black_box(now));
        assert!(out.grants.is_empty());
        out
    });
}

/// A cycle on a full cluster where every head has waited a day and every tenth user
/// holds a core: the reservation made by the first (untimed) cycle is held.
#[divan::bench(args = [100, 10_000, 100_000], sample_count = 20, sample_size = 10)]
fn ledger_full_overdue(bencher: Bencher, n_users: usize) {
    let holders = n_users.div_ceil(10) as f64;
    let cores = CORES.max(holders);
    let mut ledger = ledger(n_users, NOW - 86_400.0, cores, 10, cores - holders);
    let first = ledger.cycle(NOW);
    assert!(first.grants.is_empty() && first.reservation.is_some());
    let mut now = NOW;
    bencher.bench_local(|| {
        now += 0.001;
        let out = ledger.cycle(black_box(now));
        assert!(out.grants.is_empty() && out.reservation.is_some());
        out
    });
}

/// One running job ends and the cycle after it grants the next job: the job granted
/// in the previous sample ends in the next, so the cluster stays full.
#[divan::bench(args = [100, 10_000, 100_000], sample_count = 20, sample_size = 10)]
fn ledger_one_freed(bencher: Bencher, n_users: usize) {
    let config = PolicyConfig {
        starvation_guard: f64::INFINITY,
        starvation_runs: 0.0,
        ..config()
    };
    let mut ledger = Ledger::new(config, UserSettings::default());
    let cores = CORES.min(n_users as f64);
    ledger.report_cluster(
        NOW,
        "c",
        true,
        Resources::new(cores, 0.0, 1e12),
        Resources::ZERO,
        |_| false,
    );
    for u in 0..n_users {
        let name = format!("u{u:06}");
        ledger.set_usage(NOW, &name, (u % 97) as f64 * 1e-4, NOW);
        ledger.set_window(NOW, &name, window(u, n_users, NOW - 60.0));
    }
    let mut now = NOW;
    let mut running: Vec<JobId> = ledger.cycle(now).grants.iter().map(|g| g.job_id).collect();
    assert_eq!(running.len(), cores as usize);
    let mut next = 0;
    bencher.bench_local(|| {
        now += 0.001;
        let slot = next % running.len();
        ledger.end(now, running[slot]);
        let out = ledger.cycle(black_box(now));
        assert_eq!(out.grants.len(), 1);
        running[slot] = out.grants[0].job_id;
        next += 1;
        out
    });
}

/// One cycle that grants `GRANTS` jobs on an empty cluster; throughput is grants per
/// second. The ledger is built for each sample, outside the timing.
#[divan::bench(args = [100, 10_000, 100_000], sample_count = 10)]
fn ledger_grants(bencher: Bencher, n_users: usize) {
    let granted = GRANTS.min(n_users * (QUEUED / n_users).min(WINDOW));
    bencher
        .counter(ItemsCount::new(granted))
        .with_inputs(|| ledger(n_users, NOW - 60.0, granted as f64, 0, 0.0))
        .bench_local_values(|mut ledger| {
            let out = ledger.cycle(NOW);
            assert_eq!(out.grants.len(), granted);
            (out, ledger)
        });
}

/// `run_cycle` on a snapshot of a full cluster: nothing is granted; the ledger is
/// built from every user.
#[divan::bench(args = [100, 10_000, 100_000], sample_count = 10)]
fn run_cycle_full(bencher: Bencher, n_users: usize) {
    let views = views(n_users, NOW - 60.0);
    let clusters = [cluster(CORES, CORES)];
    let config = config();
    bencher.bench(|| {
        let out = policy::run_cycle(NOW, &config, black_box(&views), &clusters, None);
        assert!(out.grants.is_empty());
        out
    });
}

/// `run_cycle` on a snapshot granting `GRANTS` jobs; throughput is grants per second.
#[divan::bench(args = [100, 10_000, 100_000], sample_count = 10)]
fn run_cycle_grants(bencher: Bencher, n_users: usize) {
    let views = views(n_users, NOW - 60.0);
    let granted = GRANTS.min(views.iter().map(|v| v.queue.len()).sum());
    let clusters = [cluster(granted as f64, 0.0)];
    let config = config();
    bencher.counter(ItemsCount::new(granted)).bench(|| {
        let out = policy::run_cycle(NOW, &config, black_box(&views), &clusters, None);
        assert_eq!(out.grants.len(), granted);
        out
    });
}
