//! Groups (DESIGN §2, "Groups"): exact grants worked by hand, and property tests
//! of hierarchical order against the flat one.

use proptest::prelude::*;

use super::*;

fn group(path: &str, weight: f64) -> GroupView {
    GroupView {
        weight,
        ..GroupView::new(path)
    }
}

fn member(name: &str, group: &str) -> UserView {
    UserView {
        group: Some(group.to_owned()),
        ..user(name)
    }
}

/// Groups A and B weighted 1:3, two users each (1:1 within), 1-core jobs, one
/// cluster of 8 cores, no history. Worked by hand (keys `s/w`, group keys of the
/// group's share): A and B tie at 0, A first (groups tie in path order), a1 before
/// a2 (name); then B (0 < 1/8), b1; B (1/24 < 1/8), b2; B (1/12), b1 (its head is
/// as old as b2's, name); B and A tie at 1/8, A first: a2; then B (1/8 < 1/4)
/// three times, b2, b1, b2. A holds 2 cores, B 6: 1:3, and 1:1 within each.
#[test]
fn a_two_level_tree_shares_by_weight_at_each_level() {
    let groups = vec![group("a", 1.0), group("b", 3.0)];
    let users = vec![
        member("a1", "a").queue(jobs(100, 8, cpus(1.0), 0.0)),
        member("a2", "a").queue(jobs(200, 8, cpus(1.0), 0.0)),
        member("b1", "b").queue(jobs(300, 8, cpus(1.0), 0.0)),
        member("b2", "b").queue(jobs(400, 8, cpus(1.0), 0.0)),
    ];
    let clusters = vec![cluster("c", cpus(8.0))];
    let out = run_cycle_in(10.0, &plain(), &groups, &users, &clusters, None);
    assert_eq!(
        granted(&out),
        vec![
            ("a1", id(100)),
            ("b1", id(300)),
            ("b2", id(400)),
            ("b1", id(301)),
            ("a2", id(200)),
            ("b2", id(401)),
            ("b1", id(302)),
            ("b2", id(402)),
        ]
    );
    // The same users flat would share 2:2:2:2.
    let flat: Vec<UserView> = users
        .iter()
        .map(|u| UserView {
            group: None,
            ..u.clone()
        })
        .collect();
    let out = run_cycle(10.0, &plain(), &flat, &clusters, None);
    assert!(["a1", "a2", "b1", "b2"].iter().all(|u| count(&out, u) == 2));
}

/// Three levels: `org` holds `org/x` and `org/y` (1:1) beside the root user `r`.
/// Capacity 8: the root splits between `org` and `r` (4 and 4), `org` between
/// its groups (2 and 2).
#[test]
fn a_deeper_tree_splits_each_level_and_root_users_sit_beside_groups() {
    let groups = vec![group("org", 1.0), group("org/x", 1.0), group("org/y", 1.0)];
    let users = vec![
        member("x1", "org/x").queue(jobs(100, 8, cpus(1.0), 0.0)),
        member("y1", "org/y").queue(jobs(200, 8, cpus(1.0), 0.0)),
        user("r").queue(jobs(300, 8, cpus(1.0), 0.0)),
    ];
    let clusters = vec![cluster("c", cpus(8.0))];
    let out = run_cycle_in(10.0, &plain(), &groups, &users, &clusters, None);
    assert_eq!(count(&out, "r"), 4);
    assert_eq!(count(&out, "x1"), 2);
    assert_eq!(count(&out, "y1"), 2);
}

/// A paused group: none of its users (nor those of its subgroups) is granted, each
/// job of theirs says which group is paused, and the others take the capacity.
#[test]
fn a_paused_group_gets_nothing_and_says_so() {
    let mut b = group("b", 3.0);
    b.paused = true;
    let groups = vec![group("a", 1.0), b, group("b/sub", 1.0)];
    let users = vec![
        member("a1", "a").queue(jobs(100, 8, cpus(1.0), 0.0)),
        member("b1", "b").queue(jobs(300, 2, cpus(1.0), 0.0)),
        member("s1", "b/sub").queue(jobs(400, 1, cpus(1.0), 0.0)),
    ];
    let clusters = vec![cluster("c", cpus(4.0))];
    let out = run_cycle_in(10.0, &plain(), &groups, &users, &clusters, None);
    assert_eq!(
        granted(&out),
        vec![
            ("a1", id(100)),
            ("a1", id(101)),
            ("a1", id(102)),
            ("a1", id(103))
        ]
    );
    let paused = PendingReason::GroupPaused { group: "b".into() };
    for job in [300, 301, 400] {
        assert_eq!(reason(&out, id(job)), Some(&paused), "job {job}");
    }
    assert_eq!(
        paused.to_string(),
        "the group b is paused; its users' jobs wait until an admin resumes it"
    );
}

/// A group's running-job limit counts every user under it: group `a` allows 3,
/// its two users get 2 and 1 (in hierarchical order), the third job waits with
/// the group's limit; the root user takes the rest.
#[test]
fn a_group_limit_holds_for_all_its_users_together() {
    let mut a = group("a", 1.0);
    a.max_running_jobs = 3;
    let groups = vec![a];
    let users = vec![
        member("a1", "a").queue(jobs(100, 4, cpus(1.0), 0.0)),
        member("a2", "a").queue(jobs(200, 4, cpus(1.0), 0.0)),
        user("r").queue(jobs(300, 8, cpus(1.0), 0.0)),
    ];
    let clusters = vec![cluster("c", cpus(8.0))];
    let out = run_cycle_in(10.0, &plain(), &groups, &users, &clusters, None);
    assert_eq!(count(&out, "a1") + count(&out, "a2"), 3);
    assert_eq!(count(&out, "r"), 5);
    let limit = PendingReason::GroupMaxRunningJobs {
        group: "a".into(),
        limit: 3,
    };
    let heads = [
        id(100 + count(&out, "a1") as u128),
        id(200 + count(&out, "a2") as u128),
    ];
    assert!(heads.iter().all(|h| reason(&out, *h) == Some(&limit)));
}

/// A job alone above its group's `max_resources`, or above that of a group over
/// it, can never start: it is stepped over with its own reason, as a job over its
/// user's cap is, and the user's next job runs (found by the estimates' property
/// test: such a head blocked its user for ever, reported as `GroupMaxResources`,
/// "it starts when some of its jobs finish"). Cluster of 8 cores; group `a` capped at
/// 4 cores, `a/b` under it at 6: b1's 5-core job 100 exceeds `a`'s cap, its 7-core
/// job 101 both (the nearest group is named, `a/b`); its 1-core job 102 runs. A cap
/// raised by a new tree (the ledger's `set_groups`) lets job 100 run.
#[test]
fn a_job_alone_above_a_groups_cap_is_stepped_over() {
    let mut a = group("a", 1.0);
    a.max_resources = Some(cpus(4.0));
    let mut b = group("a/b", 1.0);
    b.max_resources = Some(cpus(6.0));
    let groups = vec![a.clone(), b];
    let users = vec![member("b1", "a/b").queue(vec![
        job(100, cpus(5.0), 0.0),
        job(101, cpus(7.0), 1.0),
        job(102, cpus(1.0), 2.0),
    ])];
    let clusters = vec![cluster("c", cpus(8.0))];
    let out = run_cycle_in(10.0, &plain(), &groups, &users, &clusters, None);
    assert_eq!(granted(&out), [("b1", id(102))]);
    assert_eq!(
        reason(&out, id(100)),
        Some(&PendingReason::ExceedsGroupMaxResources { group: "a".into() })
    );
    assert_eq!(
        reason(&out, id(101)),
        Some(&PendingReason::ExceedsGroupMaxResources {
            group: "a/b".into()
        })
    );
    // The straightforward cycle agrees.
    let oracle = crate::policy::oracle::run_cycle_in(
        10.0,
        &plain(),
        &crate::policy::Tree::new(&groups),
        &users,
        &[],
        &clusters,
        None,
    );
    assert_eq!(oracle.grants, out.grants);
    assert_eq!(oracle.pending, out.pending);
    // The ledger: a's cap raised to 8 and a/b's removed, job 100 (5 cores) runs; 101
    // (7 cores) would take a to 13 cores and waits.
    let mut ledger = Ledger::from_views(plain(), 10.0, &users, &clusters, None);
    ledger.set_groups(&groups);
    assert_eq!(ledger.cycle(10.0).grants.len(), 1);
    a.max_resources = Some(cpus(8.0));
    ledger.set_groups(&[a, group("a/b", 1.0)]);
    let next = ledger.cycle(11.0);
    let ids: Vec<JobId> = next.grants.iter().map(|g| g.job_id).collect();
    assert_eq!(ids, [id(100)]);
    assert_eq!(
        ledger.reason("b1", id(101)),
        Some(PendingReason::GroupMaxResources { group: "a".into() })
    );
}

/// A ledger keeps groups between cycles: a job ending frees its group's share.
#[test]
fn the_ledger_keeps_groups_across_cycles() {
    let mut ledger = Ledger::new(plain(), UserSettings::default());
    ledger.set_groups(&[group("a", 1.0), group("b", 3.0)]);
    ledger.report_cluster(0.0, "c", true, cpus(4.0), Resources::ZERO, |_| false);
    for (name, g, first) in [("a1", "a", 100), ("b1", "b", 300)] {
        let settings = UserSettings {
            group: Some(g.to_owned()),
            ..UserSettings::default()
        };
        ledger.set_user(0.0, name, settings);
        for j in jobs(first, 8, cpus(1.0), 0.0) {
            ledger.push_queued(0.0, name, j);
        }
    }
    let first = ledger.cycle(1.0);
    let users: Vec<&str> = first.grants.iter().map(|g| g.user.as_str()).collect();
    assert_eq!(users, ["a1", "b1", "b1", "b1"]);
    // b1's first job ends: B (2/4 / 3 = 1/6) is still below A (1/4): B again.
    assert!(ledger.end(2.0, id(300)));
    let second = ledger.cycle(2.0);
    assert_eq!(second.grants.len(), 1);
    assert_eq!(second.grants[0].user, "b1");
    assert_eq!(
        ledger.reason("a1", id(101)),
        Some(PendingReason::WaitingForCapacity {
            short: vec!["cpu".into()]
        })
    );
}

fn arb_users() -> impl Strategy<Value = Vec<UserView>> {
    let one = (1u32..=3, 0u32..=3, 1usize..=5, 1u32..=4, 0u32..=2);
    prop::collection::vec(one, 1..=6).prop_map(|parts| {
        parts
            .into_iter()
            .enumerate()
            .map(|(i, (w, held, n, size, late))| {
                let first = 1000 * (i as u128 + 1);
                let mut u = user(&format!("u{i}")).queue(jobs(
                    first,
                    n,
                    cpus(f64::from(size)),
                    f64::from(late),
                ));
                u.weight = f64::from(w);
                u.outstanding_jobs = held;
                u.allocation = cpus(f64::from(held));
                u
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// One group holding every user decides exactly as no groups at all: the
    /// hierarchical cycle (the straightforward one, keys recomputed after every
    /// grant) reduces to the flat incremental one.
    #[test]
    fn one_group_for_everyone_decides_as_no_groups(
        users in arb_users(),
        cores in 4u32..=24,
        backfill in any::<bool>(),
        guard in prop::sample::select(vec![0.0, 5.0, f64::INFINITY]),
    ) {
        let config = PolicyConfig { backfill, starvation_guard: guard, ..plain() };
        let clusters = vec![cluster("c", cpus(f64::from(cores)))];
        let flat = run_cycle(10.0, &config, &users, &clusters, None);
        let grouped: Vec<UserView> = users.iter().map(|u| UserView { group: Some("all".into()), ..u.clone() }).collect();
        let out = run_cycle_in(10.0, &config, &[group("all", 2.0)], &grouped, &clusters, None);
        prop_assert_eq!(&out.grants, &flat.grants);
        prop_assert_eq!(&out.pending, &flat.pending);
        prop_assert_eq!(&out.reservation, &flat.reservation);
        prop_assert_eq!(out.stopped_for, flat.stopped_for);
    }

    /// With users spread over random groups: grants stay within capacity, a paused
    /// group's users get nothing, and a group's running-job limit holds for its
    /// users together.
    #[test]
    fn groups_keep_pause_limits_and_capacity(
        users in arb_users(),
        picks in prop::collection::vec(0usize..4, 6),
        limit in 1u32..=4,
        cores in 4u32..=24,
    ) {
        let mut paused = group("p", 1.0);
        paused.paused = true;
        let mut limited = group("l", 2.0);
        limited.max_running_jobs = limit;
        let groups = vec![group("g", 1.0), paused, limited, group("g/h", 3.0)];
        let paths = ["g", "p", "l", "g/h"];
        let users: Vec<UserView> = users
            .into_iter()
            .zip(&picks)
            .map(|(u, &p)| UserView { group: Some(paths[p].into()), ..u })
            .collect();
        let held = users.iter().fold(Resources::ZERO, |sum, u| sum + u.allocation);
        let clusters = vec![with_outstanding(cluster("c", cpus(f64::from(cores))), held)];
        let out = run_cycle_in(10.0, &plain(), &groups, &users, &clusters, None);
        let free = f64::from(cores) - users.iter().map(|u| u.allocation.cpu).sum::<f64>();
        let granted: f64 = out.grants.iter().map(|g| g.resources.cpu).sum();
        prop_assert!(granted <= free.max(0.0) + 1e-9);
        for u in &users {
            let n = count(&out, &u.user) as u32;
            if u.group.as_deref() == Some("p") {
                prop_assert_eq!(n, 0);
            }
        }
        let in_l = |u: &&UserView| u.group.as_deref() == Some("l");
        let held_l: u32 = users.iter().filter(in_l).map(|u| u.outstanding_jobs).sum();
        let granted_l: u32 = users.iter().filter(in_l).map(|u| count(&out, &u.user) as u32).sum();
        prop_assert!(granted_l == 0 || held_l + granted_l <= limit);
    }
}

/// `next_users` leaves out users a group keeps from starting (paused, or at its
/// limit), as it leaves out paused users (a tester found a paused group's user
/// listed).
#[test]
fn next_users_leaves_out_users_of_a_paused_or_full_group() {
    let mut ledger = Ledger::new(plain(), UserSettings::default());
    let mut p = group("p", 1.0);
    p.paused = true;
    let mut full = group("full", 1.0);
    full.max_running_jobs = 0;
    ledger.set_groups(&[p, full, group("ok", 1.0)]);
    ledger.report_cluster(0.0, "c", true, cpus(4.0), Resources::ZERO, |_| false);
    for (name, g, first) in [("a", "p", 100), ("b", "full", 200), ("c", "ok", 300)] {
        let settings = UserSettings {
            group: Some(g.to_owned()),
            ..UserSettings::default()
        };
        ledger.set_user(0.0, name, settings);
        ledger.push_queued(0.0, name, job(first, cpus(1.0), 0.0));
    }
    let next: Vec<String> = ledger.next_users(1.0).into_iter().map(|o| o.user).collect();
    assert_eq!(next, ["c"]);
}

/// Puts user `name` in group `g` with `n` 1-core jobs numbered from `first`, queued
/// at `t`, and runs a cycle half a second later: its grants.
fn queue_and_cycle(
    ledger: &mut Ledger,
    name: &str,
    g: &str,
    first: u128,
    n: usize,
    t: Seconds,
) -> Vec<(String, JobId)> {
    let settings = UserSettings {
        group: Some(g.to_owned()),
        ..UserSettings::default()
    };
    ledger.set_user(t, name, settings);
    for j in jobs(first, n, cpus(1.0), t) {
        ledger.push_queued(t, name, j);
    }
    ledger
        .cycle(t + 0.5)
        .grants
        .iter()
        .map(|g| (g.user.clone(), g.job_id))
        .collect()
}

/// Issue 43 §1, worked by hand: 10 cores; `org` (at most 2 cores) → `org/mid` →
/// `org/mid/a` (d1a) and `org/mid/b` (d1b); `lab` (at most 1 job) → `lab/x` (d1d)
/// → `lab/x/y` (d1c); two 1-core jobs each for d1a, d1b, d1c, one for d1d, queued
/// one user at a time as a client would. d1a's two jobs start and its window
/// empties; d1b's then wait for `org`'s cores, although d1a has nothing queued.
/// d1d's job starts, and d1c's wait for `lab`'s job limit. When one of d1a's jobs
/// ends, `org` has one core left: one of d1b's jobs starts, not two. (Before, the
/// cycle rolled group totals up only from users with something queued: `org` ran
/// 4 jobs and `lab` 2.)
#[test]
fn a_groups_limits_count_users_whose_jobs_all_run() {
    let mut org = group("org", 1.0);
    org.max_resources = Some(cpus(2.0));
    let mut lab = group("lab", 1.0);
    lab.max_running_jobs = 1;
    let mut ledger = Ledger::new(plain(), UserSettings::default());
    ledger.set_groups(&[
        org,
        group("org/mid", 1.0),
        group("org/mid/a", 1.0),
        group("org/mid/b", 1.0),
        lab,
        group("lab/x", 1.0),
        group("lab/x/y", 1.0),
    ]);
    ledger.report_cluster(0.0, "c", true, cpus(10.0), Resources::ZERO, |_| false);
    let s = |v: &[(&str, JobId)]| -> Vec<(String, JobId)> {
        v.iter().map(|(u, j)| ((*u).to_owned(), *j)).collect()
    };
    assert_eq!(
        queue_and_cycle(&mut ledger, "d1a", "org/mid/a", 100, 2, 1.0),
        s(&[("d1a", id(100)), ("d1a", id(101))])
    );
    assert_eq!(
        queue_and_cycle(&mut ledger, "d1b", "org/mid/b", 200, 2, 2.0),
        s(&[])
    );
    assert_eq!(
        ledger.reason("d1b", id(200)),
        Some(PendingReason::GroupMaxResources {
            group: "org".into()
        })
    );
    assert_eq!(
        queue_and_cycle(&mut ledger, "d1d", "lab/x", 400, 1, 3.0),
        s(&[("d1d", id(400))])
    );
    assert_eq!(
        queue_and_cycle(&mut ledger, "d1c", "lab/x/y", 300, 2, 4.0),
        s(&[])
    );
    assert_eq!(
        ledger.reason("d1c", id(300)),
        Some(PendingReason::GroupMaxRunningJobs {
            group: "lab".into(),
            limit: 1
        })
    );
    assert!(ledger.end(5.0, id(100)));
    let out = ledger.cycle(5.0);
    let got: Vec<(&str, JobId)> = out
        .grants
        .iter()
        .map(|g| (g.user.as_str(), g.job_id))
        .collect();
    assert_eq!(got, [("d1b", id(200))]);
    assert_eq!(
        ledger.reason("d1b", id(201)),
        Some(PendingReason::GroupMaxResources {
            group: "org".into()
        })
    );
    // And d1c still waits for lab's one job.
    assert!(ledger.reason("d1c", id(300)).is_some());
    assert!(!ledger.is_outstanding(&id(300)) && !ledger.is_outstanding(&id(301)));
}

/// A group of a [`TreeCase`]: parent pick, weight, max_running_jobs, max cores,
/// paused.
type GroupPick = (usize, u32, Option<u32>, Option<u32>, bool);

/// A user of a [`TreeCase`]: group pick, weight, running and queued jobs' cores,
/// usage in tenths.
type UserPick = (usize, u32, Vec<u32>, Vec<u32>, u32);

/// A round of a [`TreeCase`]: which outstanding job ends, which user queues a job
/// of how many cores.
type Round = (Option<usize>, Option<(usize, u32)>);

/// One level of a user's place in order: key, tie-break, group path or user name.
type Level = (f64, f64, String);

/// A random tree of groups (depth at most 4; weights, limits, sometimes paused),
/// users in it or in the root with running jobs, queued jobs and decayed usage, and
/// a few rounds of a job ending and a job queued.
#[derive(Clone, Debug)]
struct TreeCase {
    /// Per group: parent pick, weight, max_running_jobs, max cores, paused.
    groups: Vec<GroupPick>,
    /// Per user: group pick (past the last group: the root), weight, running and
    /// queued jobs' cores, usage in tenths.
    users: Vec<UserPick>,
    cores: u32,
    half_life: f64,
    /// Per round: which outstanding job ends, and which user queues a job of how
    /// many cores.
    rounds: Vec<Round>,
}

fn tree_case() -> impl Strategy<Value = TreeCase> {
    (
        prop::collection::vec(
            (
                0usize..8,
                1u32..=3,
                prop::option::of(0u32..=4),
                prop::option::of(1u32..=6),
                prop::bool::weighted(0.1),
            ),
            1..=7,
        ),
        prop::collection::vec(
            (
                0usize..8,
                1u32..=3,
                prop::collection::vec(1u32..=2, 0..=3),
                prop::collection::vec(1u32..=2, 0..=3),
                0u32..=5,
            ),
            1..=6,
        ),
        4u32..=16,
        prop::sample::select(vec![0.0, 3600.0]),
        prop::collection::vec(
            (
                prop::option::of(0usize..20),
                prop::option::of((0usize..6, 1u32..=2)),
            ),
            1..=3,
        ),
    )
        .prop_map(|(groups, users, cores, half_life, rounds)| TreeCase {
            groups,
            users,
            cores,
            half_life,
            rounds,
        })
}

/// The groups of a case: group `i`'s parent is the group its pick names among the
/// earlier ones (or the root), so the tree is at most 4 deep.
fn case_groups(case: &TreeCase) -> Vec<GroupView> {
    let mut out: Vec<GroupView> = Vec::new();
    let mut depth: Vec<usize> = Vec::new();
    for (i, &(pick, weight, jobs, cores, paused)) in case.groups.iter().enumerate() {
        let parent = (pick < i && depth[pick] < 4).then_some(pick);
        let path = match parent {
            Some(p) => format!("{}/g{i}", out[p].path),
            None => format!("g{i}"),
        };
        depth.push(parent.map_or(1, |p| depth[p] + 1));
        out.push(GroupView {
            path,
            weight: f64::from(weight),
            paused,
            max_running_jobs: jobs.unwrap_or(u32::MAX),
            max_resources: cores.map(|c| cpus(f64::from(c))),
        });
    }
    out
}

/// The hierarchical order computed from scratch on the ledger's state at `now`: for
/// each of `listed`, its groups from the top, each as (quantized key of what every
/// user under the group holds and its usage, −∞, path), then itself as (quantized
/// key, effective head's submit time, name); compared level by level.
fn order_from_scratch(
    ledger: &Ledger,
    groups: &[GroupView],
    listed: &[String],
    now: Seconds,
) -> Vec<String> {
    let capacity = ledger.capacity();
    let users: Vec<(String, UserState)> =
        ledger.users(now).map(|(n, s)| (n.to_owned(), s)).collect();
    let under = |g: &GroupView, s: &UserState| {
        s.settings
            .group
            .as_deref()
            .is_some_and(|p| p == g.path || p.starts_with(&format!("{}/", g.path)))
    };
    let views = ledger.all_user_views();
    let mut ranked: Vec<(Vec<Level>, String)> = listed
        .iter()
        .map(|name| {
            let state = &users.iter().find(|(n, _)| n == name).unwrap().1;
            let mut levels = Vec::new();
            let mut above: Vec<&GroupView> = groups.iter().filter(|g| under(g, state)).collect();
            above.sort_by_key(|g| g.path.len());
            // The effective head: the first job that can ever run (one cluster: it fits
            // the capacity, and alone within every cap of the groups above).
            let can_run = |j: &&QueuedJob| {
                j.resources.fits_within(&capacity)
                    && above
                        .iter()
                        .all(|g| g.max_resources.is_none_or(|m| j.resources.fits_cap(&m)))
            };
            let view = views.iter().find(|v| &v.user == name).unwrap();
            let head_at = view
                .queue
                .iter()
                .find(can_run)
                .map_or(f64::INFINITY, |j| j.submitted_at);
            for g in above {
                let (held, usage) = users
                    .iter()
                    .filter(|(_, s)| under(g, s))
                    .fold((Resources::ZERO, 0.0), |(r, h), (_, s)| {
                        (r + s.allocation, h + s.usage)
                    });
                let key = fair_share_key(dominant_share(&held, &capacity), usage, g.weight);
                levels.push((quantize_key(key), f64::NEG_INFINITY, g.path.clone()));
            }
            levels.push((quantize_key(state.key), head_at, name.clone()));
            (levels, name.clone())
        })
        .collect();
    ranked.sort_by(|a, b| {
        for (x, y) in a.0.iter().zip(&b.0) {
            let o =
                x.0.total_cmp(&y.0)
                    .then(x.1.total_cmp(&y.1))
                    .then_with(|| x.2.cmp(&y.2));
            if o != std::cmp::Ordering::Equal {
                return o;
            }
        }
        a.0.len().cmp(&b.0.len())
    });
    ranked.into_iter().map(|(_, n)| n).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Issue 43 §1's kind: a group's limits and order count every job of every user
    /// under it, queued or not. Over random trees (depth ≤ 4), limits, users and
    /// job states fed to a ledger as the arbiter feeds it (running jobs started,
    /// jobs queued, jobs ending), each cycle decides as the oracle does on the
    /// whole snapshot (every user, those with nothing queued too); no grant takes a
    /// group past its running-job or resource limit or goes to a paused group; and
    /// the order after it is the hierarchical order computed from scratch.
    #[test]
    fn group_limits_and_order_count_every_user_under_a_group(case in tree_case()) {
        let groups = case_groups(&case);
        let tree = Tree::new(&groups);
        let config = PolicyConfig { usage_half_life: case.half_life, ..plain() };
        let mut ledger = Ledger::new(config.clone(), UserSettings::default());
        ledger.set_groups(&groups);
        let cores = f64::from(case.cores);
        ledger.report_cluster(0.0, "c", true, cpus(cores), Resources::ZERO, |_| false);
        let names: Vec<String> = (0..case.users.len()).map(|u| format!("u{u}")).collect();
        let mut used = 0.0;
        let mut outstanding: Vec<JobId> = Vec::new();
        let mut next = 1u128;
        for (u, (pick, weight, running, queued, usage)) in case.users.iter().enumerate() {
            let settings = UserSettings {
                weight: f64::from(*weight),
                group: groups.get(*pick).map(|g| g.path.clone()),
                ..UserSettings::default()
            };
            ledger.set_user(0.0, &names[u], settings);
            ledger.set_usage(0.0, &names[u], f64::from(*usage) / 10.0, 0.0);
            for &c in running {
                if used + f64::from(c) <= cores {
                    used += f64::from(c);
                    ledger.start(0.0, id(next), &names[u], "c", cpus(f64::from(c)), None);
                    outstanding.push(id(next));
                }
                next += 1;
            }
            for &c in queued {
                ledger.push_queued(1.0, &names[u], job(next, cpus(f64::from(c)), 1.0));
                next += 1;
            }
        }
        let mut now = 10.0;
        for (end, push) in &case.rounds {
            if let Some(n) = end {
                if !outstanding.is_empty() {
                    let job = outstanding.remove(n % outstanding.len());
                    prop_assert!(ledger.end(now, job));
                }
            }
            if let Some((u, c)) = push {
                let u = u % names.len();
                ledger.push_queued(now, &names[u], job(next, cpus(f64::from(*c)), now));
                next += 1;
            }
            now += 5.0;
            let all = ledger.all_user_views();
            let listed: Vec<String> =
                all.iter().filter(|v| !v.queue.is_empty()).map(|v| v.user.clone()).collect();
            let clusters = ledger.cluster_views();
            let expected =
                crate::policy::oracle::run_cycle_in(now, &config, &tree, &all, &[], &clusters, None);
            let got = ledger.cycle(now);
            prop_assert_eq!(&got.grants, &expected.grants);
            prop_assert_eq!(ledger.pending(), expected.pending);
            let order: Vec<String> = ledger.order(now).into_iter().map(|o| o.user).collect();
            let oracle_order: Vec<String> = expected.order.into_iter().map(|o| o.user).collect();
            prop_assert_eq!(&order, &oracle_order);
            prop_assert_eq!(&order, &order_from_scratch(&ledger, &groups, &listed, now));
            // Every group a grant went to is within its limits, counting every user
            // under it.
            let states: Vec<(String, UserState)> =
                ledger.users(now).map(|(n, s)| (n.to_owned(), s)).collect();
            for g in &got.grants {
                outstanding.push(g.job_id);
                let path = states.iter().find(|(n, _)| *n == g.user).unwrap().1.settings.group.clone();
                for i in tree.path_of(path.as_deref()) {
                    let group = &tree.groups()[i];
                    prop_assert!(!group.paused, "granted under paused {}", group.path);
                    let (jobs, held) = states
                        .iter()
                        .filter(|(_, s)| tree.path_of(s.settings.group.as_deref()).contains(&i))
                        .fold((0u32, Resources::ZERO), |(n, r), (_, s)| (n + s.outstanding, r + s.allocation));
                    prop_assert!(jobs <= group.max_running_jobs, "{} runs {} jobs", group.path, jobs);
                    if let Some(max) = &group.max_resources {
                        prop_assert!(held.fits_cap(max), "{} holds {:?}", group.path, held);
                    }
                }
            }
        }
    }
}

/// A group's running-job limit of 0 says that nothing of its users runs until an
/// admin raises it, not that its users "already have 0 jobs" (a fresh tester's
/// finding); a limit above 0 keeps the count.
#[test]
fn a_group_limit_of_zero_says_nothing_runs_until_it_is_raised() {
    let zero = PendingReason::GroupMaxRunningJobs {
        group: "z".into(),
        limit: 0,
    }
    .to_string();
    assert_eq!(
        zero,
        "group z lets none of its users' jobs run (max_running_jobs 0); they wait until an \
         admin raises the limit"
    );
    let two = PendingReason::GroupMaxRunningJobs {
        group: "z".into(),
        limit: 2,
    }
    .to_string();
    assert!(
        two.starts_with("the users of group z already have 2 jobs"),
        "{two}"
    );
}
