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
