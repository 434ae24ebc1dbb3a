//! The forward run on hand-built states, every estimate worked out by hand: a
//! reservation with backfill, a group limit, a paused user, a pool.

use super::*;
use crate::policy::{ClusterView, GroupView, PolicyConfig, UserView};

fn id(n: u128) -> JobId {
    JobId::from_u128(n)
}

fn cpus(n: f64) -> Resources {
    Resources::new(n, 0.0, 0.0)
}

/// Job `n` of `resources`, submitted at `at`, whose policy estimate and expected run
/// time are both `run` seconds.
fn job(n: u128, resources: Resources, at: Seconds, run: Seconds) -> QueuedJob {
    QueuedJob::new(id(n), resources, at).with_runtime_estimate(run)
}

fn user(name: &str, queue: Vec<QueuedJob>) -> UserView {
    UserView {
        user: name.to_owned(),
        weight: 1.0,
        paused: false,
        max_running_jobs: 100,
        max_resources: None,
        outstanding_jobs: 0,
        allocation: Resources::ZERO,
        usage: 0.0,
        usage_at: 0.0,
        group: None,
        queue,
    }
}

fn cluster(name: &str, total: Resources) -> ClusterView {
    ClusterView {
        name: name.to_owned(),
        healthy: true,
        total,
        used_reported: Resources::ZERO,
        outstanding: Resources::ZERO,
        unreported: Resources::ZERO,
        jobs: Vec::new(),
        pool: false,
    }
}

/// History and age off, backfill on, a 300 s starvation guard.
fn config() -> PolicyConfig {
    PolicyConfig {
        usage_half_life: 0.0,
        starvation_guard: 300.0,
        starvation_runs: 0.0,
        backfill: true,
        age_weight: 0.0,
        max_age: 86_400.0,
        licenses: crate::policy::Custom::EMPTY,
    }
}

fn snapshot(now: Seconds, users: Vec<UserView>, clusters: Vec<ClusterView>) -> Snapshot {
    Snapshot {
        now,
        config: config(),
        users,
        clusters,
        reservation: None,
        groups: Vec::new(),
    }
}

fn running(n: u128, user: &str, cluster: &str, r: Resources, end: Seconds) -> Outstanding {
    Outstanding {
        job_id: id(n),
        user: user.to_owned(),
        cluster: cluster.to_owned(),
        resources: r,
        expected_end: Some(end),
        started_at: 0.0,
        end,
    }
}

/// The policy's own estimate as the expected run time.
fn policy_run(j: &QueuedJob) -> Seconds {
    j.runtime_estimate.unwrap_or(0.0)
}

/// (job number, start, position), in start order.
fn starts(f: &Forward) -> Vec<(u128, Seconds, usize)> {
    f.estimates
        .iter()
        .map(|e| (e.job_id.as_u128(), e.start, e.position))
        .collect()
}

/// 4 cores at t = 1000. User a runs job 1 (2 cores, ends 1100) and job 2 (1 core,
/// ends 1300): 1 core free. b's job 10 (4 cores, 500 s) has waited 1000 s, past the
/// 300 s guard, fits nowhere and is passed over (a holds 3/4 with a larger key): it
/// gets the reservation, shadow time S = 1300 (both of a's jobs ended), no extra
/// capacity. c's job 20 (1 core, 50 s) ends by S: backfilled now. c's job 21 (1 core,
/// 1000 s) would run past S: blocked until b's job has started, at 1300 when job 2
/// ends, and ended (1800). By hand: 20 at 1000, 10 at 1300, 21 at 1800.
#[test]
fn the_reserved_job_starts_at_its_shadow_time_and_a_short_job_backfills_before_it() {
    let s = snapshot(
        1000.0,
        vec![
            user("a", Vec::new()),
            user("b", vec![job(10, cpus(4.0), 0.0, 500.0)]),
            user(
                "c",
                vec![
                    job(20, cpus(1.0), 10.0, 50.0),
                    job(21, cpus(1.0), 11.0, 1000.0),
                ],
            ),
        ],
        vec![cluster("k", cpus(4.0))],
    );
    let out = vec![
        running(1, "a", "k", cpus(2.0), 1100.0),
        running(2, "a", "k", cpus(1.0), 1300.0),
    ];
    let f = forward(&s, &out, policy_run, Limits::default());
    assert_eq!(
        starts(&f),
        [(20, 1000.0, 1), (10, 1300.0, 2), (21, 1800.0, 3)]
    );
    assert!(!f.cut);
    // The reservation holds: without it (guard off) job 21 backfills at 1050, when
    // job 20 ends, and the big job waits until 21 ends at 2050.
    let mut off = s.clone();
    off.config.starvation_guard = f64::INFINITY;
    let f = forward(&off, &out, policy_run, Limits::default());
    assert_eq!(
        starts(&f),
        [(20, 1000.0, 1), (21, 1050.0, 2), (10, 2050.0, 3)]
    );
}

/// The expected run time decides when a job ends in the forward run, the policy's
/// estimate what backfill allows: job 20 is allowed in front of the reservation on
/// its 50 s estimate but is expected to run 400 s, so the reserved job waits for it
/// (1400, not 1300). An outstanding job expected to have ended already ends now.
#[test]
fn jobs_end_at_their_expected_run_time_and_overdue_ones_now() {
    let s = snapshot(
        1000.0,
        vec![
            user("a", Vec::new()),
            user("b", vec![job(10, cpus(4.0), 0.0, 500.0)]),
            user("c", vec![job(20, cpus(1.0), 10.0, 50.0)]),
        ],
        vec![cluster("k", cpus(4.0))],
    );
    let out = vec![
        running(1, "a", "k", cpus(2.0), 1100.0),
        running(2, "a", "k", cpus(1.0), 1300.0),
    ];
    let run = |j: &QueuedJob| if j.job_id == id(20) { 400.0 } else { 500.0 };
    let f = forward(&s, &out, run, Limits::default());
    assert_eq!(starts(&f), [(20, 1000.0, 1), (10, 1400.0, 2)]);
    // Job 1 should have ended at 900: it ends at once (1000); the big job still
    // waits for job 2 (1300) and for job 20, which holds a core until 1400.
    let late = vec![
        running(1, "a", "k", cpus(2.0), 900.0),
        running(2, "a", "k", cpus(1.0), 1300.0),
    ];
    let f = forward(&s, &late, run, Limits::default());
    assert_eq!(starts(&f), [(20, 1000.0, 1), (10, 1400.0, 2)]);
    // Both overdue: 3 cores free at 1000 plus 1 taken by nothing: the big job starts
    // at once (it comes first: b's key 0 and c's 0 tie, b's head is older) and job 20
    // when it ends.
    let gone = vec![
        running(1, "a", "k", cpus(2.0), 900.0),
        running(2, "a", "k", cpus(1.0), 950.0),
    ];
    let f = forward(&s, &gone, run, Limits::default());
    assert_eq!(starts(&f), [(10, 1000.0, 1), (20, 1500.0, 2)]);
}

/// Groups g (at most 1 outstanding job) and h, 4 cores, nothing running at t = 0;
/// u1 and u2 in g, v in h, one 1-core 100 s job each. g and h tie at 0, g first
/// (path order): u1 (older head than u2); then h: v; then g is at its limit: u2 waits
/// for u1's job to end, at 100.
#[test]
fn a_group_limit_holds_its_users_jobs_until_one_ends() {
    let mut s = snapshot(
        0.0,
        vec![
            user("u1", vec![job(1, cpus(1.0), -3.0, 100.0)]),
            user("u2", vec![job(2, cpus(1.0), -2.0, 100.0)]),
            user("v", vec![job(3, cpus(1.0), -1.0, 100.0)]),
        ],
        vec![cluster("k", cpus(4.0))],
    );
    for (u, g) in s.users.iter_mut().zip(["g", "g", "h"]) {
        u.group = Some(g.to_owned());
    }
    s.groups = vec![
        GroupView {
            max_running_jobs: 1,
            ..GroupView::new("g")
        },
        GroupView::new("h"),
    ];
    let f = forward(&s, &[], policy_run, Limits::default());
    assert_eq!(starts(&f), [(1, 0.0, 1), (3, 0.0, 2), (2, 100.0, 3)]);
}

/// A paused user's jobs get no estimate, and do not hold up the others: q's two
/// 4-core 60 s jobs run back to back on the 4 cores, at 0 and 60. A user at its
/// `max_running_jobs` waits for its own jobs: r (limit 1) runs its 1-core jobs one
/// after the other on a second cluster.
#[test]
fn a_paused_user_gets_no_estimate_and_a_user_at_its_limit_waits_for_its_own_jobs() {
    let mut p = user("p", vec![job(1, cpus(1.0), -10.0, 10.0)]);
    p.paused = true;
    let mut r = user(
        "r",
        vec![
            job(20, cpus(1.0), -5.0, 30.0),
            job(21, cpus(1.0), -4.0, 30.0),
        ],
    );
    r.max_running_jobs = 1;
    let s = snapshot(
        0.0,
        vec![
            p,
            user(
                "q",
                vec![
                    job(10, cpus(4.0), -2.0, 60.0),
                    job(11, cpus(4.0), -1.0, 60.0),
                ],
            ),
            r,
        ],
        vec![cluster("k", cpus(4.0)), cluster("m", cpus(4.0))],
    );
    let f = forward(&s, &[], policy_run, Limits::default());
    // q and r tie at 0; r's head is older: 20 first (best fit: k and m tie, k by
    // name), then q's 10 on m (k has 3 cores free). At 30 r's 21; at 60 q's 11.
    assert_eq!(
        starts(&f),
        [(20, 0.0, 1), (10, 0.0, 2), (21, 30.0, 3), (11, 60.0, 4)]
    );
    assert!(!f.by_job().contains_key(&id(1)));
}

/// A pool of one slot beside a Ray cluster: the pool's two jobs (30 s each) start one
/// after the other, and are numbered among the pool's jobs; the Ray job among the Ray
/// jobs.
#[test]
fn pool_jobs_queue_for_their_pool_and_are_numbered_among_its_jobs() {
    let slot = crate::policy::custom::slot("clusters").expect("a valid custom name");
    let mut one = Resources::ZERO;
    one.custom.set(slot, 1.0);
    let in_pool = |mut j: QueuedJob| {
        j.pool = Some("k8s".to_owned());
        j
    };
    let s = snapshot(
        0.0,
        vec![
            user("a", vec![in_pool(job(1, one, -3.0, 30.0))]),
            user(
                "b",
                vec![
                    in_pool(job(2, one, -2.0, 30.0)),
                    job(3, cpus(1.0), -1.0, 30.0),
                ],
            ),
        ],
        vec![
            cluster("ray", cpus(4.0)),
            ClusterView {
                pool: true,
                ..cluster("k8s", one)
            },
        ],
    );
    let f = forward(&s, &[], policy_run, Limits::default());
    assert_eq!(starts(&f), [(1, 0.0, 1), (2, 30.0, 2), (3, 30.0, 1)]);
    let by = f.by_job();
    assert_eq!(by[&id(2)].cluster, "k8s");
    assert_eq!(by[&id(3)].cluster, "ray");
}

/// One user's five jobs, each of 60 s asking the whole 4-CPU cluster, submitted at
/// −10, −9, … s: they run one after another.
fn five_whole_cluster_jobs() -> Snapshot {
    snapshot(
        0.0,
        vec![user(
            "q",
            (0..5)
                .map(|n| job(n, cpus(4.0), n as f64 - 10.0, 60.0))
                .collect(),
        )],
        vec![cluster("k", cpus(4.0))],
    )
}

/// The budget: `until` stops at that job's start, the horizon before anything past it.
#[test]
fn the_budget_stops_the_run() {
    let s = five_whole_cluster_jobs();
    let until = Limits {
        until: vec![id(2)],
        ..Limits::default()
    };
    let f = forward(&s, &[], policy_run, until);
    assert_eq!(starts(&f), [(0, 0.0, 1), (1, 60.0, 2), (2, 120.0, 3)]);
    let horizon = Limits {
        horizon: 100.0,
        ..Limits::default()
    };
    let f = forward(&s, &[], policy_run, horizon);
    assert_eq!(starts(&f), [(0, 0.0, 1), (1, 60.0, 2)]);
    assert!(f.cut);
}

/// The decayed median: recent runs weigh more, one outlier moves it little.
#[test]
fn the_learned_run_time_is_a_decayed_median_per_user_and_entrypoint() {
    let mut t = RunTimes::default();
    assert_eq!(t.median("a", "python x.py"), None);
    for r in [10.0, 10.0, 10.0, 100_000.0] {
        t.observe("a", "python x.py", r);
    }
    // Weights (latest first) 1, 0.917, 0.841, 0.771: sorted 10 (0.771 + 0.841 +
    // 0.917 = 2.53) already reaches half of 3.53.
    assert_eq!(t.median("a", "python x.py"), Some(10.0));
    assert_eq!(t.median("a", "python y.py"), None);
    assert_eq!(t.median("b", "python x.py"), None);
    // Two runs: 10 (weight 0.917) and 50 (weight 1): half of 1.917 is 0.96, past 10.
    let mut two = RunTimes::default();
    two.observe("a", "e", 10.0);
    two.observe("a", "e", 50.0);
    assert_eq!(two.median("a", "e"), Some(50.0));
    // The workload changed: after 8 runs of 60 s, the older 32 of 10 s are outvoted
    // (the 8 newest weigh 6.0 in all, the 24 before them 5.3).
    let mut shift = RunTimes::default();
    for _ in 0..32 {
        shift.observe("a", "e", 10.0);
    }
    for _ in 0..8 {
        shift.observe("a", "e", 60.0);
    }
    assert_eq!(shift.median("a", "e"), Some(60.0));
    t.observe("a", "python x.py", f64::NAN);
    assert_eq!(t.len(), 1);
}

#[test]
fn the_basis_is_max_runtime_then_learned_then_the_default() {
    assert_eq!(
        expected_run(Some(60.0), Some(5.0), 3600.0),
        (60.0, Basis::MaxRuntime)
    );
    assert_eq!(expected_run(None, Some(5.0), 3600.0), (5.0, Basis::Learned));
    assert_eq!(expected_run(None, None, 3600.0), (3600.0, Basis::Default));
    assert_eq!(Basis::MaxRuntime.as_str(), "max_runtime");
}

/// When the budget stops the run, `not_before` says from when the jobs it did not
/// reach could start: the next event past the horizon, or the last cycle's instant
/// when the cycles run out; a run that reaches its end has none.
#[test]
fn a_cut_run_says_from_when_the_rest_could_start() {
    let s = five_whole_cluster_jobs();
    let horizon = Limits {
        horizon: 100.0,
        ..Limits::default()
    };
    let f = forward(&s, &[], policy_run, horizon);
    assert_eq!(f.estimates.len(), 2);
    assert_eq!(f.not_before, Some(120.0));
    let cycles = Limits {
        max_cycles: 3,
        ..Limits::default()
    };
    let f = forward(&s, &[], policy_run, cycles);
    assert_eq!(starts(&f), [(0, 0.0, 1), (1, 60.0, 2), (2, 120.0, 3)]);
    assert_eq!(f.not_before, Some(120.0));
    let whole = forward(&s, &[], policy_run, Limits::default());
    assert!(!whole.cut);
    assert_eq!(whole.not_before, None);
    assert_eq!(whole.estimates.len(), 5);
}

/// The bars, by hand: a paused user, a user at a running-jobs limit of 0, a user in a
/// paused group's subgroup, a job alone above its group's `max_resources`, a job
/// larger than every healthy cluster (an unhealthy larger one does not count), and a
/// pool job too large for its pool are barred; a job that fits is not, nor one of a
/// user the snapshot does not know.
#[test]
fn bars_name_the_jobs_that_never_start() {
    let mut s = snapshot(
        0.0,
        vec![
            UserView {
                paused: true,
                ..user("paused", vec![])
            },
            UserView {
                max_running_jobs: 0,
                ..user("zero", vec![])
            },
            UserView {
                group: Some("p/q".into()),
                ..user("under-paused", vec![])
            },
            UserView {
                group: Some("capped".into()),
                ..user("capped", vec![])
            },
            user("free", vec![]),
        ],
        vec![
            cluster("k", cpus(4.0)),
            ClusterView {
                healthy: false,
                ..cluster("big", cpus(64.0))
            },
            ClusterView {
                pool: true,
                ..cluster("pool", cpus(2.0))
            },
        ],
    );
    let mut paused = GroupView::new("p");
    paused.paused = true;
    let mut capped = GroupView::new("capped");
    capped.max_resources = Some(cpus(2.0));
    s.groups = vec![paused, GroupView::new("p/q"), capped];
    let bars = Bars::of(&s);
    let small = job(1, cpus(1.0), 0.0, 60.0);
    let three = job(2, cpus(3.0), 0.0, 60.0);
    let huge = job(3, cpus(5.0), 0.0, 60.0);
    let pooled = |r| job(4, r, 0.0, 60.0).with_pool("pool");
    for u in ["paused", "zero", "under-paused"] {
        assert!(bars.never(u, &small), "{u}");
    }
    assert!(!bars.never("capped", &small));
    assert!(bars.never("capped", &three));
    assert!(!bars.never("free", &three));
    assert!(bars.never("free", &huge));
    assert!(bars.never("unknown", &huge));
    assert!(!bars.never("unknown", &small));
    assert!(!bars.never("free", &pooled(cpus(2.0))));
    assert!(bars.never("free", &pooled(cpus(3.0))));
}

mod bars_property {
    use proptest::prelude::*;

    use super::*;
    use crate::policy::proptests;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// With no other tenants' load, a forward run to its end starts exactly the
        /// jobs the bars do not name (when some cluster is healthy): the bars are
        /// what never lifts, over random users, groups (one paused, one at a
        /// running-jobs limit of 0, one capped, one nested under the paused one),
        /// clusters and pools.
        #[test]
        fn an_uncut_run_starts_exactly_the_jobs_not_barred(
            users in proptests::users(),
            clusters in proptests::clusters(),
            config in proptests::config(),
            picks in prop::collection::vec(0usize..6, 6),
        ) {
            let mut zero = GroupView::new("zero");
            zero.max_running_jobs = 0;
            let mut paused = GroupView::new("paused");
            paused.paused = true;
            let mut capped = GroupView::new("capped");
            capped.max_resources = Some(Resources::new(4.0, 1.0, 8.0 * 1024.0 * 1024.0 * 1024.0));
            let groups = vec![GroupView::new("g"), zero, paused, GroupView::new("paused/in"), capped];
            let paths = [None, Some("g"), Some("zero"), Some("paused"), Some("paused/in"), Some("capped")];
            let users: Vec<UserView> = users
                .into_iter()
                .zip(&picks)
                .map(|(u, &p)| UserView { group: paths[p].map(str::to_owned), ..u })
                .map(|mut u| {
                    // A job asks for something (the API refuses one that does not).
                    for j in &mut u.queue {
                        if j.resources.cpu == 0.0 && j.resources.gpu == 0.0 && j.resources.custom == Resources::ZERO.custom {
                            j.resources.cpu = 0.5;
                        }
                    }
                    u
                })
                .collect();
            // No other tenants' load: the clusters hold only what is outstanding, and
            // the forward run starts from the queues alone.
            let clusters: Vec<ClusterView> = clusters
                .into_iter()
                .map(|c| ClusterView {
                    used_reported: Resources::ZERO,
                    outstanding: Resources::ZERO,
                    jobs: Vec::new(),
                    ..c
                })
                .collect();
            let s = Snapshot {
                now: 1000.0,
                config: PolicyConfig { licenses: crate::policy::Custom::EMPTY, ..config },
                users,
                clusters,
                reservation: None,
                groups,
            };
            let bars = Bars::of(&s);
            let f = forward(&s, &[], policy_run, Limits::default());
            prop_assert!(!f.cut);
            // The cycle bound never cuts the run: the same run within it.
            let queued = s.users.iter().map(|u| u.queue.len()).sum();
            let bounded = Limits { max_cycles: cycles_needed(0, queued), ..Limits::default() };
            prop_assert_eq!(&forward(&s, &[], policy_run, bounded), &f);
            let started = f.by_job();
            let healthy = s.clusters.iter().any(|c| c.healthy);
            for u in &s.users {
                for j in &u.queue {
                    let barred = bars.never(&u.user, j);
                    if barred {
                        prop_assert!(!started.contains_key(&j.job_id), "{} {:?} barred but started", u.user, j);
                    } else if healthy {
                        prop_assert!(started.contains_key(&j.job_id), "{} {:?} not barred, never started", u.user, j);
                    }
                }
            }
        }
    }
}
