//! Property tests of [`run_cycle`] over random users and clusters.
//!
//! Quantities are multiples of half a core, whole GPUs and whole GiB, so every
//! sum is exact in f64 and the checks below can recompute free capacity
//! independently of the policy without rounding doubts.

use proptest::prelude::*;

use super::*;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
const NOW: Seconds = 1000.0;

fn resources(max_half_cores: u32, max_gpus: u32, max_gib: u32) -> impl Strategy<Value = Resources> {
    (0..=max_half_cores, 0..=max_gpus, 0..=max_gib)
        .prop_map(|(c, g, m)| Resources::new(f64::from(c) * 0.5, f64::from(g), f64::from(m) * GIB))
}

fn clusters() -> impl Strategy<Value = Vec<ClusterView>> {
    let one = (
        prop::bool::weighted(0.85),
        resources(32, 4, 64),
        resources(32, 4, 64),
        resources(32, 4, 64),
    );
    prop::collection::vec(one, 0..=3).prop_map(|parts| {
        parts
            .into_iter()
            .enumerate()
            .map(|(i, (healthy, total, used, outstanding))| ClusterView {
                name: format!("c{i}"),
                healthy,
                total,
                // Half of a random vector: some load, at times more than the total.
                used_reported: half(used),
                outstanding: half(outstanding),
                unreported: Resources::ZERO,
            })
            .collect()
    })
}

/// Half of `r`, rounded down to whole GPUs and GiB (still exact in f64).
fn half(r: Resources) -> Resources {
    Resources::new(
        r.cpu * 0.5,
        (r.gpu * 0.5).floor(),
        (r.memory_bytes / GIB * 0.5).floor() * GIB,
    )
}

fn queue(user: usize) -> impl Strategy<Value = Vec<QueuedJob>> {
    let job = (resources(12, 1, 16), 0u32..=900, -2i32..=2);
    prop::collection::vec(job, 0..=8).prop_map(move |jobs| {
        jobs.into_iter()
            .enumerate()
            .map(|(j, (resources, at, priority))| QueuedJob {
                job_id: JobId::from_u128((user as u128) << 64 | j as u128),
                resources,
                priority,
                submitted_at: f64::from(at),
            })
            .collect()
    })
}

fn user(index: usize) -> impl Strategy<Value = UserView> {
    (
        prop::sample::select(vec![0.5, 1.0, 1.0, 2.0, 3.0]),
        prop::bool::weighted(0.15),
        0u32..=6,
        prop::option::weighted(0.3, resources(24, 2, 48)),
        0u32..=3,
        resources(8, 1, 16),
        (0u32..=10, 0u32..=1000),
        queue(index),
    )
        .prop_map(
            move |(
                weight,
                paused,
                max_running_jobs,
                max_resources,
                outstanding_jobs,
                allocation,
                (usage, usage_at),
                queue,
            )| {
                UserView {
                    user: format!("u{index}"),
                    weight,
                    paused,
                    max_running_jobs,
                    max_resources,
                    outstanding_jobs,
                    allocation,
                    usage: f64::from(usage) / 10.0,
                    usage_at: f64::from(usage_at),
                    queue,
                }
            },
        )
}

fn users() -> impl Strategy<Value = Vec<UserView>> {
    (0usize..=6).prop_flat_map(|n| (0..n).map(user).collect::<Vec<_>>())
}

fn config() -> impl Strategy<Value = PolicyConfig> {
    (
        prop::sample::select(vec![0.0, 60.0, 3600.0]),
        prop::sample::select(vec![0.0, 300.0, 800.0, f64::INFINITY]),
        prop::bool::weighted(0.8),
    )
        .prop_map(
            |(usage_half_life, starvation_guard, backfill)| PolicyConfig {
                usage_half_life,
                starvation_guard,
                backfill,
            },
        )
}

/// Permutes `items` with a small deterministic generator seeded by `seed`.
fn shuffled<T: Clone>(items: &[T], seed: u64) -> Vec<T> {
    let mut out = items.to_vec();
    let mut state = seed | 1;
    for i in (1..out.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.swap(i, (state % (i as u64 + 1)) as usize);
    }
    out
}

fn healthy<'a>(clusters: &'a [ClusterView], name: &str) -> Option<&'a ClusterView> {
    clusters.iter().find(|c| c.healthy && c.name == name)
}

/// Whether `job` can never run for `u`: too large for every healthy cluster,
/// or larger than the user's limit on its own.
fn unrunnable(job: &QueuedJob, u: &UserView, clusters: &[ClusterView]) -> bool {
    let any_healthy = clusters.iter().any(|c| c.healthy);
    (any_healthy && !fits_some_cluster(&job.resources, clusters))
        || u.max_resources
            .is_some_and(|m| !job.resources.fits_within(&m))
}

/// Checks every safety property of one outcome and, when the cycle ran to
/// its end, work conservation.
fn check(config: &PolicyConfig, users: &[UserView], clusters: &[ClusterView], out: &CycleOutcome) {
    // Capacity: grants go to healthy clusters, within their free capacity.
    let mut remaining: Vec<(String, Resources)> = clusters
        .iter()
        .map(|c| (c.name.clone(), c.free()))
        .collect();
    for g in &out.grants {
        assert!(
            healthy(clusters, &g.cluster).is_some(),
            "grant to unhealthy {g:?}"
        );
        let (_, free) = remaining.iter_mut().find(|(n, _)| *n == g.cluster).unwrap();
        assert!(
            g.resources.fits_within(free),
            "over free capacity: {g:?}, free {free:?}"
        );
        *free = free.saturating_sub(g.resources);
    }

    for u in users {
        let mine: Vec<&Grant> = out.grants.iter().filter(|g| g.user == u.user).collect();
        assert!(
            !u.paused || mine.is_empty(),
            "paused user {} granted",
            u.user
        );
        assert!(
            mine.is_empty() || u.outstanding_jobs + mine.len() as u32 <= u.max_running_jobs,
            "max_running_jobs exceeded for {}",
            u.user
        );
        let allocation = mine.iter().fold(u.allocation, |a, g| a + g.resources);
        if let (Some(max), false) = (u.max_resources, mine.is_empty()) {
            assert!(
                allocation.fits_within(&max),
                "max_resources exceeded for {}",
                u.user
            );
        }
        // Grants are the user's runnable jobs in window order, a prefix of them.
        let runnable: Vec<&QueuedJob> = u
            .queue
            .iter()
            .filter(|j| !unrunnable(j, u, clusters))
            .collect();
        let granted_ids: Vec<JobId> = mine.iter().map(|g| g.job_id).collect();
        let prefix: Vec<JobId> = runnable.iter().take(mine.len()).map(|j| j.job_id).collect();
        assert_eq!(
            granted_ids, prefix,
            "grants of {} skip or reorder its queue",
            u.user
        );

        // Each user's effective head has a reason when it was not granted.
        if let Some(head) = runnable.get(mine.len()) {
            assert!(
                out.pending.iter().any(|(id, _)| *id == head.job_id),
                "head of {} has no pending reason",
                u.user
            );
        }

        // Work conservation: nothing eligible fits once the cycle ran to its end.
        let cycle_completed = out.stopped_for.is_none() && clusters.iter().any(|c| c.healthy);
        if !cycle_completed || u.paused {
            continue;
        }
        let outstanding = u.outstanding_jobs + mine.len() as u32;
        let Some(head) = runnable.get(mine.len()) else {
            continue;
        };
        let within_limit = u
            .max_resources
            .is_none_or(|m| (allocation + head.resources).fits_within(&m));
        if outstanding < u.max_running_jobs && within_limit {
            let fits_now = remaining
                .iter()
                .filter(|(name, _)| healthy(clusters, name).is_some())
                .any(|(_, free)| head.resources.fits_within(free));
            assert!(
                !fits_now,
                "not work-conserving: head {:?} of {} fits (backfill {})",
                head.job_id, u.user, config.backfill
            );
        }
    }

    // A stop holds capacity for one job, for the configured reason only.
    if let Some(job) = out.stopped_for {
        let why = out
            .pending
            .iter()
            .find(|(id, _)| *id == job)
            .map(|(_, r)| r);
        let queued = users
            .iter()
            .flat_map(|u| &u.queue)
            .find(|j| j.job_id == job);
        match (config.backfill, why, queued) {
            (true, Some(PendingReason::Starving { waited }), Some(j)) => {
                assert_eq!(*waited, NOW - j.submitted_at);
                assert!(*waited > config.starvation_guard);
            }
            (false, Some(PendingReason::WaitingForCapacity), Some(_)) => {}
            other => panic!("stopped for {job} with {other:?}"),
        }
        let behind = if config.backfill {
            PendingReason::ReservingForStarvedJob { job_id: job }
        } else {
            PendingReason::WaitingBehind { job_id: job }
        };
        for (_, reason) in &out.pending {
            assert!(
                !matches!(
                    reason,
                    PendingReason::ReservingForStarvedJob { .. }
                        | PendingReason::WaitingBehind { .. }
                ) || *reason == behind
            );
        }
    }

    // The order lists exactly the users with a non-empty window, by key.
    let mut listed: Vec<&str> = out.order.iter().map(|o| o.user.as_str()).collect();
    listed.sort_unstable();
    let mut expected: Vec<&str> = users
        .iter()
        .filter(|u| !u.queue.is_empty())
        .map(|u| u.user.as_str())
        .collect();
    expected.sort_unstable();
    assert_eq!(listed, expected);
    assert!(out
        .order
        .windows(2)
        .all(|w| quantize_key(w[0].key) <= quantize_key(w[1].key)));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn cycles_respect_capacity_limits_and_pause_and_conserve_work(
        config in config(),
        users in users(),
        clusters in clusters(),
    ) {
        let out = run_cycle(NOW, &config, &users, &clusters);
        check(&config, &users, &clusters, &out);
    }

    #[test]
    fn cycles_are_deterministic_and_ignore_input_order(
        config in config(),
        users in users(),
        clusters in clusters(),
        seed in any::<u64>(),
    ) {
        let out = run_cycle(NOW, &config, &users, &clusters);
        prop_assert_eq!(&out, &run_cycle(NOW, &config, &users, &clusters));
        let (u, c) = (shuffled(&users, seed), shuffled(&clusters, seed.rotate_left(17)));
        prop_assert_eq!(&out, &run_cycle(NOW, &config, &u, &c));
    }
}
