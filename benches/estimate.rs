//! The estimates' cost at scale (issue 48): 10,000 users × 100 queued jobs (1,000,000),
//! four clusters of 1,024 cores full of running one-core jobs (4,096 outstanding).
//!
//!     cargo bench --bench estimate
//!
//! Prints, each the median of `RUNS` runs (wall time, one thread):
//!
//! - `forward`: [`policy::estimate::forward`] over every queued job, every one started
//!   in virtual time (one cycle per instant a job ends): what the estimates' task runs
//!   on a blocking thread, off the arbiter;
//! - `copy`: what the arbiter does for it (`GetEstimateInput`): the users without
//!   their windows, the clusters and the outstanding jobs, on a ledger holding 64-job
//!   windows; beside it `copy with windows`, the what-if snapshot's copy
//!   (`GetSnapshot`), which the estimates avoid;
//! - `cycle`: one ledger cycle on the full clusters (grants nothing), for scale;
//! - `arbiter's cycle`: a job ends and a cycle grants its core again on the arbiter's
//!   ledger, alone and then beside a forward run on another thread (the estimates on
//!   and off, as far as the cycle is concerned).
//!
//! The forward run's line ends with a digest of every estimate, so that two builds can
//! be shown to estimate alike.

use std::time::Instant;

use fairshare::policy::estimate::{forward, Limits, Outstanding};
use fairshare::policy::preview::Snapshot;
use fairshare::policy::{
    ClusterView, JobId, Ledger, PolicyConfig, QueuedJob, Resources, UserSettings, UserView,
};

const USERS: usize = 10_000;
const PER_USER: usize = 100;
const CLUSTERS: usize = 4;
const CORES: usize = 1024;
const WINDOW: usize = 64;
const NOW: f64 = 1_000_000.0;
const RUNS: usize = 3;

fn config() -> PolicyConfig {
    PolicyConfig {
        usage_half_life: 86_400.0,
        starvation_guard: 300.0,
        starvation_runs: 0.0,
        backfill: true,
        age_weight: 0.05,
        max_age: 86_400.0,
        licenses: fairshare::policy::Custom::EMPTY,
    }
}

fn job_id(user: usize, i: usize) -> JobId {
    uuid::Uuid::from_u128(((user as u128) << 32) | i as u128)
}

/// A run time from 60 s to an hour, spread by a cheap hash of `n`.
fn run_of(n: u128) -> f64 {
    let h = (n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as u64;
    60.0 + (h % 3540) as f64
}

fn queue(u: usize, len: usize) -> Vec<QueuedJob> {
    (0..len)
        .map(|i| {
            let id = job_id(u, i);
            QueuedJob::new(
                id,
                Resources::new(1.0, 0.0, 0.0),
                NOW - 3600.0 + (u * PER_USER + i) as f64 * 1e-3,
            )
            .with_runtime_estimate(run_of(id.as_u128()))
        })
        .collect()
}

fn user(u: usize, len: usize) -> UserView {
    UserView {
        user: format!("u{u:05}"),
        weight: 1.0,
        paused: false,
        max_running_jobs: 100,
        max_resources: None,
        outstanding_jobs: 0,
        allocation: Resources::ZERO,
        usage: 0.0,
        usage_at: NOW,
        group: None,
        queue: queue(u, len),
    }
}

fn clusters() -> Vec<ClusterView> {
    (0..CLUSTERS)
        .map(|k| ClusterView {
            name: format!("ray-{k}"),
            healthy: true,
            total: Resources::new(CORES as f64, 0.0, 0.0),
            used_reported: Resources::ZERO,
            outstanding: Resources::ZERO,
            unreported: Resources::ZERO,
            jobs: Vec::new(),
            pool: false,
        })
        .collect()
}

/// The running jobs: one core each, for the first users, ending over the next hour.
fn outstanding() -> Vec<Outstanding> {
    (0..CLUSTERS * CORES)
        .map(|n| {
            let id = uuid::Uuid::from_u128(u128::MAX - n as u128);
            let end = NOW + run_of(n as u128) - 30.0;
            Outstanding {
                job_id: id,
                user: format!("u{:05}", n % USERS),
                cluster: format!("ray-{}", n % CLUSTERS),
                resources: Resources::new(1.0, 0.0, 0.0),
                expected_end: Some(end),
                started_at: NOW - 30.0,
                end,
            }
        })
        .collect()
}

/// A digest of every estimate (job, start, cluster, position) in order, so that two
/// builds can be shown to estimate the same (FNV-1a over the fields' bytes).
fn digest_of(estimates: &[fairshare::policy::estimate::Estimate]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for e in estimates {
        eat(e.job_id.as_bytes());
        eat(&e.start.to_bits().to_le_bytes());
        eat(e.cluster.as_bytes());
        eat(&(e.position as u64).to_le_bytes());
    }
    h
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs it once with little.
    let quick = std::env::args().any(|a| a == "--test");
    // ESTIMATE_USERS / ESTIMATE_MAX_CYCLES: another size or a cycle cap, to see how
    // the cost grows (BENCHMARKS.md, issue 48).
    let users_n = std::env::var("ESTIMATE_USERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 100 } else { USERS });
    // ESTIMATE_PER_USER: the queued jobs a run reads per user; the service reads each
    // user's first `k` past `estimates.max_jobs` (20,000: k = 2 at 10,000 users).
    let per_user = std::env::var("ESTIMATE_PER_USER")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(PER_USER);
    let max_cycles = std::env::var("ESTIMATE_MAX_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(usize::MAX);
    let runs = if std::env::var("ESTIMATE_RUNS").is_ok_and(|v| v == "1") {
        1
    } else {
        RUNS
    };
    let snapshot = Snapshot {
        now: NOW,
        config: config(),
        users: (0..users_n).map(|u| user(u, per_user)).collect(),
        clusters: clusters(),
        reservation: None,
        groups: Vec::new(),
    };
    let out = outstanding();
    let mut times = Vec::new();
    let mut started = 0;
    let mut cycles = 0;
    let mut digest = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let f = forward(
            &snapshot,
            &out,
            |j| j.runtime_estimate.unwrap_or(3600.0),
            Limits {
                max_cycles,
                ..Limits::default()
            },
        );
        times.push(t.elapsed().as_secs_f64());
        started = f.estimates.len();
        cycles = f.cycles;
        digest = digest_of(&f.estimates);
    }
    println!(
        "forward: {} users × {} queued, {} outstanding: {:.2} s (median of {runs}; {} jobs estimated, {} cycles; estimates' digest {digest:016x})",
        users_n,
        per_user,
        out.len(),
        median(times),
        started,
        cycles
    );

    // The arbiter's ledger: 64-job windows, the outstanding jobs held.
    let mut ledger = Ledger::new(config(), UserSettings::default());
    for k in 0..CLUSTERS {
        ledger.report_cluster(
            NOW,
            &format!("ray-{k}"),
            true,
            Resources::new(CORES as f64, 0.0, 0.0),
            Resources::ZERO,
            |_| false,
        );
    }
    for u in 0..users_n {
        let name = format!("u{u:05}");
        ledger.set_user(
            NOW,
            &name,
            UserSettings {
                max_running_jobs: 100,
                ..UserSettings::default()
            },
        );
        ledger.set_window(NOW, &name, queue(u, WINDOW.min(PER_USER)));
    }
    for o in &out {
        ledger.start(
            NOW,
            o.job_id,
            &o.user,
            &o.cluster,
            o.resources,
            o.expected_end,
        );
    }
    let mut copy = Vec::new();
    let mut with_windows = Vec::new();
    let mut cycle = Vec::new();
    for _ in 0..RUNS.max(5) {
        let t = Instant::now();
        let s = (
            ledger.all_user_settings(),
            ledger.cluster_views(),
            ledger.outstanding_jobs(),
            ledger.policy_config(),
            ledger.reservation().cloned(),
        );
        copy.push(t.elapsed().as_secs_f64());
        std::hint::black_box(s);
        let t = Instant::now();
        let s = (ledger.all_user_views(), ledger.cluster_views());
        with_windows.push(t.elapsed().as_secs_f64());
        std::hint::black_box(s);
        let t = Instant::now();
        let r = ledger.cycle(NOW + 1.0);
        cycle.push(t.elapsed().as_secs_f64());
        std::hint::black_box(r);
    }
    println!(
        "copy (GetEstimateInput): {:.2} ms; copy with windows (GetSnapshot): {:.2} ms; cycle: {:.3} ms (medians)",
        median(copy) * 1e3,
        median(with_windows) * 1e3,
        median(cycle) * 1e3
    );

    // The arbiter's cycle with the estimates off and on: a job ends and a cycle grants
    // its core again, every 50 ms of wall time, on this thread, first alone, then while
    // a forward run (what the estimates' task runs) goes on another thread. On a
    // machine of 2 cores the second thread competes for the cores as the service's
    // blocking thread does.
    let mut ends: std::collections::VecDeque<JobId> = out.iter().map(|o| o.job_id).collect();
    let mut t = NOW + 2.0;
    let mut step = |ledger: &mut Ledger| {
        t += 0.01;
        let id = ends.pop_front().expect("a job to end");
        let began = Instant::now();
        ledger.end(t, id);
        let r = ledger.cycle(t);
        let took = began.elapsed().as_secs_f64();
        ends.extend(r.grants.iter().map(|g| g.job_id));
        took
    };
    let pause = std::time::Duration::from_millis(if quick { 5 } else { 50 });
    let samples = if quick { 50 } else { 400 };
    let mut alone = Vec::new();
    for _ in 0..samples {
        alone.push(step(&mut ledger));
        std::thread::sleep(pause);
    }
    let background = {
        let snapshot = snapshot.clone();
        let out = out.clone();
        std::thread::spawn(move || {
            forward(
                &snapshot,
                &out,
                |j| j.runtime_estimate.unwrap_or(3600.0),
                Limits {
                    max_cycles,
                    ..Limits::default()
                },
            )
            .estimates
            .len()
        })
    };
    let mut beside = Vec::new();
    while !background.is_finished() && beside.len() < samples {
        beside.push(step(&mut ledger));
        std::thread::sleep(pause);
    }
    let _ = background.join();
    let p99 = |mut xs: Vec<f64>| {
        xs.sort_by(f64::total_cmp);
        xs[(xs.len() * 99 / 100).min(xs.len().saturating_sub(1))]
    };
    if !beside.is_empty() {
        println!(
            "arbiter's cycle (a job ends, one is granted): alone median {:.3} ms, p99 {:.3} ms ({} cycles); beside a forward run median {:.3} ms, p99 {:.3} ms ({} cycles)",
            median(alone.clone()) * 1e3,
            p99(alone.clone()) * 1e3,
            alone.len(),
            median(beside.clone()) * 1e3,
            p99(beside.clone()) * 1e3,
            beside.len()
        );
    }
}
