//! Preemption on the ledger: exact expected victims on small cases worked by hand,
//! and the rules checked independently over random ones.

use proptest::prelude::*;

use super::*;
use crate::policy::{fair_shares, Preemption, PreemptionConfig};

fn cpu(n: f64) -> Resources {
    Resources::new(n, 0.0, 0.0)
}

fn id(n: u128) -> JobId {
    JobId::from_u128(n)
}

fn queued(n: u128, cores: f64, at: Seconds) -> QueuedJob {
    QueuedJob::new(id(n), cpu(cores), at)
}

/// Preempt after 60 s, any run time, once per job, the whole capacity per minute.
fn knobs() -> PreemptionConfig {
    PreemptionConfig {
        after: 60.0,
        min_runtime: 0.0,
        max_per_job: 1,
        budget: 1.0,
        interval: 60.0,
        shortfall: false,
    }
}

/// [`knobs`] with the shortfall rule on.
fn with_shortfall() -> PreemptionConfig {
    PreemptionConfig {
        shortfall: true,
        ..knobs()
    }
}

fn policy() -> PolicyConfig {
    PolicyConfig {
        usage_half_life: 0.0,
        starvation_guard: f64::INFINITY,
        starvation_runs: 0.0,
        backfill: true,
        age_weight: 0.0,
        max_age: 0.0,
        licenses: crate::policy::Custom::EMPTY,
    }
}

/// A ledger with healthy clusters `(name, cores)` and, per `(user, cluster, cores,
/// started_at, preemptible)`, a running job numbered from 1 in that order.
fn ledger(clusters: &[(&str, f64)], running: &[(&str, &str, f64, Seconds, bool)]) -> Ledger {
    let mut l = Ledger::new(policy(), UserSettings::default());
    for (name, cores) in clusters {
        l.report_cluster(0.0, name, true, cpu(*cores), Resources::ZERO, |_| false);
    }
    for (n, (user, cluster, cores, at, preemptible)) in running.iter().enumerate() {
        let job = id(n as u128 + 1);
        l.start(*at, job, user, cluster, cpu(*cores), None);
        if *preemptible {
            l.set_preemptible(job, *at, 0);
        }
    }
    l
}

/// The jobs a cycle at `now` grants, by number.
fn granted(l: &mut Ledger, now: Seconds) -> Vec<u128> {
    l.cycle(now)
        .grants
        .iter()
        .map(|g| g.job_id.as_u128())
        .collect()
}

fn victims(out: &[Preemption]) -> Vec<u128> {
    out.iter().map(|p| p.job_id.as_u128()).collect()
}

/// Four 1-core jobs of a (started at 0, 10, 20, 30) fill a 4-core cluster; b
/// queues a 2-core job at 100. Fair shares (water-filling, demands 1 and 0.5):
/// 0.5 each. At 161 b has waited past 60 s: the two youngest of a's jobs go (a
/// keeps 0.5, b gets 0.5: 0.5 ≤ 0.5), then b's job is granted.
#[test]
fn the_youngest_jobs_of_the_user_above_its_share_make_room() {
    let mut l = ledger(
        &[("c", 4.0)],
        &[
            ("a", "c", 1.0, 0.0, true),
            ("a", "c", 1.0, 10.0, true),
            ("a", "c", 1.0, 20.0, true),
            ("a", "c", 1.0, 30.0, true),
        ],
    );
    l.push_queued(100.0, "b", queued(10, 2.0, 100.0));
    assert!(l.cycle(100.0).grants.is_empty());
    assert!(
        l.preempt(100.0, &knobs()).is_empty(),
        "b has not waited 60 s"
    );
    assert!(l.cycle(161.0).grants.is_empty());
    let out = l.preempt(161.0, &knobs());
    assert_eq!(victims(&out), [4, 3]);
    assert!(out
        .iter()
        .all(|p| p.user == "a" && p.cluster == "c" && p.for_job == id(10) && p.for_user == "b"));
    assert_eq!(out[0].started_at, 30.0);
    assert_eq!(
        l.reason("b", id(10)),
        Some(PendingReason::Preempting {
            cluster: "c".into(),
            jobs: vec![id(4), id(3)],
        })
    );
    let text = l.reason("b", id(10)).unwrap().to_string();
    assert!(
        text.contains(": 2 jobs of other users are being stopped on cluster c"),
        "{text}"
    );
    // Nothing more while they stop.
    assert!(l.preempt(162.0, &knobs()).is_empty());
    for v in [4, 3] {
        assert!(l.end(170.0, id(v)));
        let mut again = queued(v, 1.0, 0.0);
        again.preemptible = true;
        again.preemptions = 1;
        l.requeue(170.0, "a", again);
    }
    let grants = l.cycle(170.0).grants;
    assert_eq!(grants.len(), 1);
    assert_eq!((grants[0].job_id, grants[0].user.as_str()), (id(10), "b"));
    // a's jobs are back in its window, in queue order, and were preempted once:
    // they may not be preempted again.
    let window: Vec<u128> = l.accounts[l.by_name["a"] as usize]
        .window
        .iter()
        .map(|j| j.job_id.as_u128())
        .collect();
    assert_eq!(window, [3, 4]);
}

#[test]
fn jobs_that_are_not_preemptible_are_never_touched() {
    let mut l = ledger(
        &[("c", 4.0)],
        &[
            ("a", "c", 2.0, 0.0, false),
            ("a", "c", 1.0, 0.0, true),
            ("a", "c", 1.0, 0.0, false),
        ],
    );
    l.push_queued(0.0, "b", queued(10, 2.0, 0.0));
    l.cycle(100.0);
    // The one preemptible job frees 1 core; b needs 2.
    assert!(l.preempt(100.0, &knobs()).is_empty());
}

/// b's 3-core head would leave b at 0.75 and a at 0.25: the second victim already
/// breaks "the preemptor's share after ≤ the victim's after", so none is taken.
#[test]
fn a_preemption_never_puts_the_preemptor_above_its_victim() {
    let running: Vec<_> = (0..4)
        .map(|i| ("a", "c", 1.0, f64::from(i), true))
        .collect();
    let mut l = ledger(&[("c", 4.0)], &running);
    l.push_queued(0.0, "b", queued(10, 3.0, 0.0));
    l.cycle(100.0);
    assert!(l.preempt(100.0, &knobs()).is_empty());
    // With weight 3 for b it is allowed: 0.75 / 3 ≤ 0.25 / 1.
    l.set_user(
        100.0,
        "b",
        UserSettings {
            weight: 3.0,
            ..UserSettings::default()
        },
    );
    l.cycle(100.0);
    assert_eq!(victims(&l.preempt(100.0, &knobs())), [4, 3, 2]);
}

#[test]
fn young_jobs_and_jobs_preempted_too_often_are_spared_and_the_budget_holds() {
    // Job 1 ran 100 s, job 2 only 10 s, job 3 was preempted once already.
    let mut l = ledger(
        &[("c", 3.0)],
        &[
            ("a", "c", 1.0, 0.0, true),
            ("a", "c", 1.0, 90.0, true),
            ("a", "c", 1.0, 50.0, false),
        ],
    );
    l.set_preemptible(id(3), 50.0, 1);
    l.push_queued(0.0, "b", queued(10, 1.0, 0.0));
    l.cycle(100.0);
    // A budget below one job's share (1/3): the first preemption of the interval
    // still goes through.
    let knobs = PreemptionConfig {
        min_runtime: 30.0,
        budget: 0.3,
        ..knobs()
    };
    assert_eq!(victims(&l.preempt(100.0, &knobs)), [1]);
}

/// Within one interval the budget holds once something was preempted; the next
/// interval starts afresh.
#[test]
fn the_budget_is_spent_per_interval() {
    let running: Vec<_> = (0..6)
        .map(|i| ("a", "c", 1.0, f64::from(i), true))
        .collect();
    let mut l = ledger(&[("c", 6.0)], &running);
    for (n, user) in [(10, "b"), (11, "c2"), (12, "d")] {
        l.push_queued(0.0, user, queued(n, 1.0, 0.0));
    }
    l.cycle(100.0);
    // 1/6 each; a budget of 0.2 takes one head's victim and not a second.
    let knobs = PreemptionConfig {
        budget: 0.2,
        ..knobs()
    };
    let first = l.preempt(100.0, &knobs);
    assert_eq!(victims(&first), [6]);
    assert!(l.preempt(130.0, &knobs).is_empty(), "the budget is spent");
    // 60 s later the interval has passed.
    assert_eq!(victims(&l.preempt(160.0, &knobs)), [5]);
}

/// a holds a 4-core cluster with four 1-core jobs and a 4-core one with two
/// 2-core jobs; b's 2-core head fits after one victim on the second: fewest
/// victims wins over the youngest.
#[test]
fn the_cluster_needing_the_fewest_victims_is_chosen() {
    let mut l = ledger(
        &[("c1", 4.0), ("c2", 4.0)],
        &[
            ("a", "c1", 1.0, 40.0, true),
            ("a", "c1", 1.0, 40.0, true),
            ("a", "c1", 1.0, 40.0, true),
            ("a", "c1", 1.0, 40.0, true),
            ("a", "c2", 2.0, 0.0, true),
            ("a", "c2", 2.0, 0.0, true),
        ],
    );
    l.push_queued(0.0, "b", queued(10, 2.0, 0.0));
    l.cycle(100.0);
    let out = l.preempt(100.0, &knobs());
    // Both started at 0: the larger id goes first.
    assert_eq!(victims(&out), [6]);
    assert_eq!(out[0].cluster, "c2");
}

/// A user below its fair share does not lose jobs to one above it, and the one
/// above it does not preempt.
#[test]
fn only_users_above_their_fair_share_lose_jobs() {
    let mut l = ledger(
        &[("c", 4.0)],
        &[
            ("a", "c", 1.0, 0.0, true),
            ("b", "c", 1.0, 0.0, true),
            ("b", "c", 1.0, 5.0, true),
            ("b", "c", 1.0, 10.0, true),
        ],
    );
    // Both ask for one more core: demands 0.5 and 1, fair shares 0.5 each. a
    // (0.25) is below, b (0.75) above; after one of b's jobs goes, both hold 0.5.
    l.push_queued(0.0, "a", queued(10, 1.0, 0.0));
    l.push_queued(0.0, "b", queued(11, 1.0, 0.0));
    l.cycle(100.0);
    let out = l.preempt(100.0, &knobs());
    assert_eq!(victims(&out), [4]);
    assert_eq!(out[0].for_user, "a");
}

/// A 10-core cluster: a and b each run a 3-core job (started at 0 and 10), 4 cores
/// are idle, and d queues a 6-core job at 50. Demands 0.3, 0.3 and 0.6 give fair shares
/// 0.3, 0.3 and 0.4: nobody is above its share, so the share rule allows no victim
/// and d's job would wait, 4 cores idle, until a or b ends. The shortfall rule
/// takes b's job (the younger, 0.3 of the capacity, less than d's gain min(0.6,
/// 0.4)): the shortfalls below fair share sum to 0.4 before and to 0.3 after.
#[test]
fn the_shortfall_rule_puts_idle_capacity_to_use_when_nobody_is_above_its_share() {
    let mut l = ledger(
        &[("c", 10.0)],
        &[("a", "c", 3.0, 0.0, true), ("b", "c", 3.0, 10.0, true)],
    );
    l.push_queued(50.0, "d", queued(10, 6.0, 50.0));
    l.cycle(200.0);
    assert!(
        l.preempt(200.0, &knobs()).is_empty(),
        "the share rule alone"
    );
    let shortfall = with_shortfall();
    let out = l.preempt(200.0, &shortfall);
    assert_eq!(victims(&out), [2]);
    assert_eq!((out[0].user.as_str(), out[0].for_user.as_str()), ("b", "d"));
    assert!(
        l.reason("d", id(10))
            .unwrap()
            .to_string()
            .contains(": 1 job of other users is being stopped on cluster c"),
        "{}",
        l.reason("d", id(10)).unwrap()
    );
    // b's job is stopped and queued again. b and d now hold nothing, and b's job
    // (submitted at 10) comes before d's (at 50) in fair-share order: the 7 free
    // cores would go to b's 3-core job first and d's 6-core job would not fit. The
    // claim gives them to d.
    assert!(l.end(210.0, id(2)));
    let mut again = queued(2, 3.0, 10.0);
    again.preemptible = true;
    again.preemptions = 1;
    l.requeue(210.0, "b", again);
    assert_eq!(granted(&mut l, 210.0), [10]);
    assert!(
        l.cycle(211.0).grants.is_empty(),
        "1 core is free, b needs 3"
    );
}

/// While one of a head's victims is still being stopped, the capacity the other
/// freed is held for the head: e's 1-core job, which would fit it, waits; once the
/// second victim has ended the head is granted. a and b run three 1-core jobs
/// each on 10 cores, d queues 6 cores (fair shares 0.3, 0.3, 0.4): b's two
/// youngest go (0.2 < d's gain 0.4).
#[test]
fn the_capacity_freed_for_a_head_is_held_while_its_other_victims_stop() {
    capacity_held_while_victims_stop(false);
}

/// The same through the cycle with groups (every user in one group, so the fair
/// shares are the flat ones): the claim is served before the hierarchical cycle.
#[test]
fn with_groups_the_capacity_freed_for_a_head_is_held_while_its_other_victims_stop() {
    capacity_held_while_victims_stop(true);
}

fn capacity_held_while_victims_stop(grouped: bool) {
    let running: Vec<_> = [
        ("a", 0.0),
        ("a", 1.0),
        ("a", 2.0),
        ("b", 10.0),
        ("b", 11.0),
        ("b", 12.0),
    ]
    .into_iter()
    .map(|(u, at)| (u, "c", 1.0, at, true))
    .collect();
    let mut l = ledger(&[("c", 10.0)], &running);
    if grouped {
        l.set_groups(&[crate::policy::GroupView::new("g")]);
        for user in ["a", "b", "d", "e"] {
            let settings = UserSettings {
                group: Some("g".into()),
                ..UserSettings::default()
            };
            l.set_user(0.0, user, settings);
        }
    }
    l.push_queued(50.0, "d", queued(10, 6.0, 50.0));
    l.cycle(200.0);
    let shortfall = with_shortfall();
    assert_eq!(victims(&l.preempt(200.0, &shortfall)), [6, 5]);
    let again = |n: u128, at: Seconds| {
        let mut j = queued(n, 1.0, at);
        j.preemptible = true;
        j.preemptions = 1;
        j
    };
    assert!(l.end(205.0, id(6)));
    l.requeue(205.0, "b", again(6, 12.0));
    l.push_queued(205.0, "e", queued(11, 1.0, 205.0));
    assert!(l.cycle(205.0).grants.is_empty(), "5 free cores held for d");
    assert!(l.end(210.0, id(5)));
    l.requeue(210.0, "b", again(5, 11.0));
    assert_eq!(granted(&mut l, 210.0), [10]);
}

/// Issue 43 §2, worked by hand: 4 cores; groups `heavy` (weight 3, user d5a) and
/// `light` (weight 1, user d5b). d5b runs 4 preemptible 1-core jobs and queues 2
/// more; d5a queues 4 at 1 s. Hierarchical fair shares 0.75 and 0.25. The share
/// rule compares the two where their paths part, the groups: after each of d5a's
/// heads `heavy` holds 1, 2, 3 cores (keys 1/12, 1/6, 1/4) against `light`'s 3, 2,
/// 1 (keys 3/4, 1/2, 1/4), so three of d5b's jobs go, youngest first (equal starts:
/// the larger id), and each head starts on the capacity its victim freed. Then
/// d5a holds its fair share and stops: 3 to 1. (Before, the rule divided each
/// user's own share by the user's weight, 1 and 1: it stopped at 2 to 2.)
#[test]
fn with_groups_preemption_reaches_the_hierarchical_fair_shares() {
    let mut l = ledger(&[("c", 4.0)], &[("d5b", "c", 1.0, 0.0, true); 4]);
    let group = |path: &str, weight: f64| crate::policy::GroupView {
        weight,
        ..crate::policy::GroupView::new(path)
    };
    l.set_groups(&[group("heavy", 3.0), group("light", 1.0)]);
    for (user, g) in [("d5a", "heavy"), ("d5b", "light")] {
        let settings = UserSettings {
            group: Some(g.into()),
            ..UserSettings::default()
        };
        l.set_user(0.0, user, settings);
    }
    let preemptible = |n: u128, at: Seconds, times: u32| {
        let mut j = queued(n, 1.0, at);
        j.preemptible = true;
        j.preemptions = times;
        j
    };
    for n in [5, 6] {
        l.push_queued(0.0, "d5b", preemptible(n, 0.0, 0));
    }
    for n in 10..14 {
        l.push_queued(1.0, "d5a", queued(n, 1.0, 1.0));
    }
    let knobs = PreemptionConfig {
        after: 2.0,
        max_per_job: 5,
        interval: 3600.0,
        ..knobs()
    };
    assert!(l.cycle(1.0).grants.is_empty());
    assert!(l.preempt(1.0, &knobs).is_empty(), "d5a has not waited 2 s");
    let mut rounds = Vec::new();
    for t in [4.0, 5.0, 6.0, 7.0, 8.0] {
        let grants = granted(&mut l, t);
        let out = l.preempt(t, &knobs);
        for v in &out {
            assert!(l.end(t + 0.5, v.job_id));
            l.requeue(t + 0.5, "d5b", preemptible(v.job_id.as_u128(), 0.0, 1));
        }
        rounds.push((grants, victims(&out)));
    }
    let none: Vec<u128> = Vec::new();
    assert_eq!(
        rounds,
        [
            (none.clone(), vec![4]),
            (vec![10], vec![3]),
            (vec![11], vec![2]),
            (vec![12], none.clone()),
            (none.clone(), none),
        ]
    );
    assert_eq!(l.user("d5a", 8.0).unwrap().allocation, cpu(3.0));
    assert_eq!(l.user("d5b", 8.0).unwrap().allocation, cpu(1.0));
}

/// A head's claim does not take its group past a limit reached while its victims
/// stopped: 4 cores; group `g` (at most 2 jobs) holds g1 (1 job running, a head
/// queued) and g2; o in the root runs 3 preemptible jobs. At 4 s g1's head preempts
/// o's youngest (g: 2 of 4 cores then, o 2: 1/2 ≤ 1/2). Meanwhile another of o's
/// jobs ends and g2, queued, takes that core: g runs 2 jobs, its limit. When the
/// victim has ended, the claim goes instead of granting g1's head (which would
/// make 3), the head says why, and the freed core goes in fair-share order: to o.
#[test]
fn a_claim_does_not_take_its_group_past_a_limit_reached_meanwhile() {
    let mut l = ledger(
        &[("c", 4.0)],
        &[
            ("g1", "c", 1.0, 0.0, false),
            ("o", "c", 1.0, 0.0, true),
            ("o", "c", 1.0, 0.0, true),
            ("o", "c", 1.0, 0.0, true),
        ],
    );
    let mut g = crate::policy::GroupView::new("g");
    g.max_running_jobs = 2;
    l.set_groups(&[g]);
    for user in ["g1", "g2"] {
        let settings = UserSettings {
            group: Some("g".into()),
            ..UserSettings::default()
        };
        l.set_user(0.0, user, settings);
    }
    l.push_queued(1.0, "g1", queued(10, 1.0, 1.0));
    let knobs = PreemptionConfig {
        after: 2.0,
        ..knobs()
    };
    assert!(l.cycle(4.0).grants.is_empty());
    assert_eq!(victims(&l.preempt(4.0, &knobs)), [4]);
    l.push_queued(5.0, "g2", queued(20, 1.0, 5.0));
    l.push_queued(5.0, "g2", queued(21, 1.0, 5.0));
    assert!(l.end(5.0, id(2)));
    assert_eq!(granted(&mut l, 5.0), [20]);
    assert!(l.end(6.0, id(4)));
    let mut again = queued(4, 1.0, 0.0);
    again.preemptible = true;
    again.preemptions = 1;
    l.requeue(6.0, "o", again);
    assert_eq!(granted(&mut l, 6.0), [4]);
    assert_eq!(
        l.reason("g1", id(10)),
        Some(PendingReason::GroupMaxRunningJobs {
            group: "g".into(),
            limit: 2
        })
    );
}

/// The same with 2 cores idle (a and b run 4 cores each; fair shares 1/3 each):
/// d's 6-core job needs one 4-core job stopped, 0.4 of the capacity, more than its
/// gain of 1/3; the sum of the shortfalls would not fall, so nothing is preempted.
#[test]
fn the_shortfall_rule_takes_no_more_than_the_preemptor_gains() {
    let mut l = ledger(
        &[("c", 10.0)],
        &[("a", "c", 4.0, 0.0, true), ("b", "c", 4.0, 10.0, true)],
    );
    l.push_queued(0.0, "d", queued(10, 6.0, 0.0));
    l.cycle(100.0);
    let shortfall = with_shortfall();
    assert!(l.preempt(100.0, &shortfall).is_empty());
}

#[test]
fn with_no_job_preemptible_the_ledger_decides_as_without_preemption() {
    let running: Vec<_> = (0..4)
        .map(|i| ("a", "c", 1.0, f64::from(i), false))
        .collect();
    let mut with = ledger(&[("c", 4.0)], &running);
    let mut without = ledger(&[("c", 4.0)], &running);
    for l in [&mut with, &mut without] {
        l.push_queued(0.0, "b", queued(10, 2.0, 0.0));
    }
    for t in [100.0, 200.0, 300.0] {
        assert_eq!(with.cycle(t), without.cycle(t));
        assert!(with.preempt(t, &knobs()).is_empty());
        assert_eq!(with.pending(), without.pending());
    }
}

// ----- the rules over random cases -----------------------------------------

/// The cost (sum of dominant shares) of the first head's victims in `out`.
fn by_head_cost(
    out: &[Preemption],
    jobs: &HashMap<JobId, (usize, usize, f64, u32, bool, u32)>,
    capacity: f64,
) -> f64 {
    let Some(first) = out.first() else { return 0.0 };
    out.iter()
        .filter(|p| p.for_job == first.for_job)
        .map(|p| jobs[&p.job_id].2 / capacity)
        .sum()
}

/// A random case: per user its weight and queued heads (cores, seconds waited);
/// running jobs (user, cluster, cores, seconds run, preemptible, preemptions).
#[derive(Clone, Debug)]
struct Case {
    weights: Vec<f64>,
    clusters: Vec<f64>,
    queued: Vec<Vec<(u32, u32)>>,
    running: Vec<(usize, usize, u32, u32, bool, u32)>,
    knobs: PreemptionConfig,
}

fn case() -> impl Strategy<Value = Case> {
    let users = 2usize..=4;
    users.prop_flat_map(|n| {
        (
            prop::collection::vec(prop::sample::select(vec![1.0, 2.0, 3.0]), n),
            prop::collection::vec(4u32..=12, 1..=2),
            prop::collection::vec(prop::collection::vec((1u32..=6, 30u32..=300), 0..=2), n),
            prop::collection::vec(
                (
                    0..n,
                    0usize..2,
                    1u32..=4,
                    0u32..=300,
                    prop::bool::weighted(0.8),
                    0u32..=2,
                ),
                4..=14,
            ),
            (
                0u32..=60,
                0u32..=120,
                1u32..=3,
                prop::sample::select(vec![0.2, 0.5, 1.0]),
                any::<bool>(),
            ),
        )
            .prop_map(
                |(
                    weights,
                    clusters,
                    queued,
                    running,
                    (after, min_runtime, max, budget, shortfall),
                )| Case {
                    weights,
                    clusters: clusters.into_iter().map(f64::from).collect(),
                    queued,
                    running,
                    knobs: PreemptionConfig {
                        after: f64::from(after),
                        min_runtime: f64::from(min_runtime),
                        max_per_job: max,
                        budget,
                        interval: 300.0,
                        shortfall,
                    },
                },
            )
    })
}

const NOW: Seconds = 1000.0;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Every preemption follows DESIGN §2's rules, recomputed here from the case:
    /// the head waited past `after`, fit no free capacity and its user was below
    /// its fair share; each victim is preemptible, another user's, ran at least
    /// `min_runtime`, was preempted fewer than `max_per_job` times, and its user
    /// was above its fair share; after the preemption the preemptor's weighted
    /// share is at most each victim user's; the head then fits; the budget holds;
    /// no job is taken twice.
    #[test]
    fn preemptions_follow_the_rules(case in case()) {
        let mut l = Ledger::new(policy(), UserSettings::default());
        let names: Vec<String> = (0..case.weights.len()).map(|u| format!("u{u}")).collect();
        let capacity: f64 = case.clusters.iter().sum();
        for (k, cores) in case.clusters.iter().enumerate() {
            l.report_cluster(0.0, &format!("c{k}"), true, cpu(*cores), Resources::ZERO, |_| false);
        }
        for (u, w) in case.weights.iter().enumerate() {
            l.set_user(0.0, &names[u], UserSettings { weight: *w, ..UserSettings::default() });
        }
        // Running jobs that fit their cluster, as the arbiter would have them.
        let mut used = vec![0.0; case.clusters.len()];
        let mut jobs = HashMap::new();
        let mut held = vec![0.0; names.len()];
        for (n, &(u, k, cores, ran, preemptible, times)) in case.running.iter().enumerate() {
            let k = k % case.clusters.len();
            if used[k] + f64::from(cores) > case.clusters[k] {
                continue;
            }
            used[k] += f64::from(cores);
            held[u] += f64::from(cores);
            let job = id(n as u128 + 1);
            let started = NOW - f64::from(ran);
            l.start(started, job, &names[u], &format!("c{k}"), cpu(f64::from(cores)), None);
            if preemptible {
                l.set_preemptible(job, started, times);
            }
            jobs.insert(job, (u, k, f64::from(cores), ran, preemptible, times));
        }
        let mut heads = HashMap::new();
        for (u, list) in case.queued.iter().enumerate() {
            for (i, &(cores, waited)) in list.iter().enumerate() {
                let job = id(100 + (u * 10 + i) as u128);
                l.push_queued(NOW, &names[u], queued(job.as_u128(), f64::from(cores), NOW - f64::from(waited)));
                heads.insert(job, (u, f64::from(cores), waited));
            }
        }
        l.cycle(NOW);
        // The state the preemption decides on, read back after the cycle's grants.
        let held: Vec<f64> = names.iter().map(|n| l.user(n, NOW).unwrap().allocation.cpu).collect();
        let demands: Vec<f64> = (0..names.len())
            .map(|u| {
                let a = &l.accounts[l.by_name[names[u].as_str()] as usize];
                ((held[u] + a.queued.cpu) / capacity).min(1.0)
            })
            .collect();
        let mut fair = Vec::new();
        fair_shares(&case.weights, &demands, &mut fair);
        let mut free: Vec<f64> = (0..case.clusters.len())
            .map(|k| case.clusters[k] - l.clusters[l.by_cluster_name[&format!("c{k}")]].outstanding.cpu)
            .collect();
        // Heads are chosen on the free capacity the cycle left.
        let free0 = free.clone();
        let heads_now: HashMap<JobId, (usize, f64)> = names
            .iter()
            .enumerate()
            .filter_map(|(u, n)| {
                let a = &l.accounts[l.by_name[n.as_str()] as usize];
                a.head().map(|h| (h.job_id, (u, h.resources.cpu)))
            })
            .collect();
        let out = l.preempt(NOW, &case.knobs);
        let mut seen = std::collections::HashSet::new();
        let mut cost = 0.0;
        // Heads in the order they preempted (the output's), each with its victims.
        let mut by_head: Vec<(JobId, Vec<&Preemption>)> = Vec::new();
        for p in &out {
            prop_assert!(seen.insert(p.job_id), "taken twice");
            match by_head.iter_mut().find(|(h, _)| *h == p.for_job) {
                Some((_, list)) => list.push(p),
                None => by_head.push((p.for_job, vec![p])),
            }
            let &(v, _, cores, ran, preemptible, times) = &jobs[&p.job_id];
            prop_assert!(preemptible);
            prop_assert!(f64::from(ran) >= case.knobs.min_runtime);
            prop_assert!(times < case.knobs.max_per_job);
            prop_assert_eq!(&p.user, &names[v]);
            cost += cores / capacity;
        }
        // One head's victims may exceed the budget when nothing was spent before.
        let first: f64 = by_head_cost(&out, &jobs, capacity);
        prop_assert!(cost <= case.knobs.budget.max(first) + 1e-9);
        let mut after = held.clone();
        for (head, victims) in &by_head {
            let &(p, cores) = &heads_now[head];
            let (_, _, waited) = heads.get(head).copied().unwrap_or((p, cores, 0));
            prop_assert!(f64::from(waited) > case.knobs.after);
            prop_assert!(free0.iter().all(|&f| f < cores), "the head fit free capacity");
            prop_assert!(held[p] / capacity < fair[p], "preemptor not below its share");
            prop_assert!(victims.iter().all(|v| names[jobs[&v.job_id].0] != names[p]));
            let k = jobs[&victims[0].job_id].1;
            prop_assert!(victims.iter().all(|v| jobs[&v.job_id].1 == k), "one cluster");
            // The share rule: each victim's user above its share as things will
            // stand once earlier heads start, and not below the preemptor after.
            let before = after.clone();
            let mut share_rule = victims.iter().all(|v| {
                let u = jobs[&v.job_id].0;
                before[u] / capacity > fair[u] + 1e-9
            });
            let freed: f64 = victims.iter().map(|v| jobs[&v.job_id].2).sum();
            prop_assert!(free[k] + freed >= cores, "the head does not fit after");
            // What its victims free beyond it is left for later heads there.
            free[k] = free[k] + freed - cores;
            for v in victims.iter() {
                after[jobs[&v.job_id].0] -= jobs[&v.job_id].2;
            }
            after[p] += cores;
            share_rule &= victims.iter().all(|v| {
                let u = jobs[&v.job_id].0;
                after[p] / capacity / case.weights[p] <= after[u] / capacity / case.weights[u] + 1e-9
            });
            if !share_rule {
                // The shortfall rule: what the victims hold is less than what the
                // preemptor gains towards its fair share, so the sum of the users'
                // shortfalls below their fair shares falls.
                prop_assert!(case.knobs.shortfall, "victims the share rule does not allow");
                let gain = (cores / capacity).min(fair[p] - before[p] / capacity);
                prop_assert!(freed / capacity < gain + 1e-9, "taken {} >= gain {}", freed / capacity, gain);
                let shortfall = |held: &[f64]| -> f64 {
                    (0..held.len()).map(|u| (fair[u] - held[u] / capacity).max(0.0)).sum()
                };
                prop_assert!(shortfall(&after) < shortfall(&before) - 1e-12, "the shortfalls did not fall");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// The budget bound that spares the victims' walk is sound: whenever it says a
    /// head is priced out, every set of jobs that would let the head fit on some
    /// room (with that room's free capacity) costs more than the budget. Cores,
    /// GPUs and memory, fractional requests included.
    #[test]
    fn a_head_priced_out_by_the_bound_is_priced_out_by_every_victim_set(
        head in (0u32..=64, 0u32..=4, 0u32..=64),
        frees in prop::collection::vec((0u32..=64, 0u32..=4, 0u32..=64), 1..=3),
        jobs in prop::collection::vec((0u32..=32, 0u32..=2, 0u32..=32), 0..=8),
        subset in any::<u8>(),
        budget in prop::sample::select(vec![0.0, 0.01, 0.02, 0.05, 0.1, 0.3]),
    ) {
        let capacity = Resources::new(128.0, 8.0, 128.0 * 1e9);
        let r = |(c, g, m): (u32, u32, u32)| Resources::new(f64::from(c) / 2.0, f64::from(g), f64::from(m) * 1e9);
        let head = QueuedJob { resources: r(head), ..queued(1, 0.0, 0.0) };
        let rooms: Vec<(usize, Resources)> = frees.iter().enumerate().map(|(k, f)| (k, r(*f))).collect();
        if !super::preempt::over_budget(&head, &rooms, &capacity, budget) {
            return Ok(());
        }
        for (_, free) in &rooms {
            let mut avail = *free;
            let mut cost = 0.0;
            for (i, job) in jobs.iter().enumerate() {
                if subset & (1 << i) != 0 {
                    avail += r(*job);
                    cost += dominant_share(&r(*job), &capacity);
                }
            }
            if head.resources.fits_within(&avail) {
                prop_assert!(cost > budget, "a set costing {cost} <= {budget} lets the head fit");
            }
        }
    }
}

/// A user of a [`GroupCase`]: group pick, weight, running jobs (start, preemptible),
/// queued jobs.
type GroupUser = (usize, u32, Vec<(u32, bool)>, usize);

/// A random case with groups: per group a parent pick and a weight (depth at most
/// 3); per user its group pick (past the last group: the root), weight, running
/// 1-core jobs (start time, preemptible) and queued 1-core jobs; the cores.
#[derive(Clone, Debug)]
struct GroupCase {
    groups: Vec<(usize, u32)>,
    users: Vec<GroupUser>,
    cores: u32,
}

fn group_case() -> impl Strategy<Value = GroupCase> {
    (
        prop::collection::vec((0usize..6, 1u32..=3), 1..=5),
        prop::collection::vec(
            (
                0usize..6,
                1u32..=3,
                prop::collection::vec((0u32..=5, prop::bool::weighted(0.8)), 0..=5),
                0usize..=4,
            ),
            2..=5,
        ),
        4u32..=10,
    )
        .prop_map(|(groups, users, cores)| GroupCase {
            groups,
            users,
            cores,
        })
}

/// Every user's hierarchical fair share and share (fractions of the capacity), from
/// the ledger's state: demand = what it holds plus its window, capped at 1.
fn fair_and_held(l: &Ledger) -> (Vec<f64>, Vec<f64>) {
    let capacity = l.capacity;
    let mut entries = Vec::new();
    let mut with = Vec::new();
    let held: Vec<f64> = l
        .accounts
        .iter()
        .map(|a| dominant_share(&a.allocation, &capacity))
        .collect();
    for (u, a) in l.accounts.iter().enumerate() {
        let demand = dominant_share(&(a.allocation + a.queued), &capacity).min(1.0);
        if demand > 0.0 {
            entries.push((
                l.tree.path_of(a.settings.group.as_deref()),
                a.settings.weight,
                demand,
            ));
            with.push(u);
        }
    }
    let shares = crate::policy::groups::fair_shares(&l.tree, &entries);
    let mut fair = vec![0.0; l.accounts.len()];
    for (i, u) in with.into_iter().enumerate() {
        fair[u] = shares[i];
    }
    (fair, held)
}

/// The ledger of `case`: its groups, users, running jobs (1 core each, started
/// while cores remain; ids from 1 in the case's order, queued jobs after each
/// user's running ones) and queued jobs (1 core, preemptible, submitted at 0);
/// the users are `u0`, `u1`, ….
fn group_ledger(case: &GroupCase) -> Ledger {
    let mut groups: Vec<crate::policy::GroupView> = Vec::new();
    let mut depth: Vec<usize> = Vec::new();
    for (i, &(pick, weight)) in case.groups.iter().enumerate() {
        let parent = (pick < i && depth[pick] < 3).then_some(pick);
        let path = match parent {
            Some(p) => format!("{}/g{i}", groups[p].path),
            None => format!("g{i}"),
        };
        depth.push(parent.map_or(1, |p| depth[p] + 1));
        groups.push(crate::policy::GroupView {
            weight: f64::from(weight),
            ..crate::policy::GroupView::new(&path)
        });
    }
    let cores = f64::from(case.cores);
    let mut l = ledger(&[("c", cores)], &[]);
    l.set_groups(&groups);
    let names: Vec<String> = (0..case.users.len()).map(|u| format!("u{u}")).collect();
    let mut used = 0.0;
    let mut next = 1u128;
    for (u, (pick, weight, running, queued_jobs)) in case.users.iter().enumerate() {
        let settings = UserSettings {
            weight: f64::from(*weight),
            group: groups.get(*pick).map(|g| g.path.clone()),
            ..UserSettings::default()
        };
        l.set_user(0.0, &names[u], settings);
        for &(at, preemptible) in running {
            if used < cores {
                used += 1.0;
                l.start(f64::from(at), id(next), &names[u], "c", cpu(1.0), None);
                if preemptible {
                    l.set_preemptible(id(next), f64::from(at), 0);
                }
            }
            next += 1;
        }
        for _ in 0..*queued_jobs {
            let mut j = queued(next, 1.0, 0.0);
            j.preemptible = true;
            l.push_queued(0.0, &names[u], j);
            next += 1;
        }
    }
    l
}

/// The case the grouped property shrank to (its regression seed), by hand. Six
/// cores, full: group `g0` (weight 3) holds u1 (weight 1; job 5 running,
/// preemptible; job 6 queued) and u3 (weight 1; job 10 queued); the root holds u0
/// (weight 1; jobs 1–4 running, 3 and 4 preemptible) and u2 (weight 3; job 7
/// running, not preemptible; jobs 8 and 9 queued). Demands: u0 4/6, u2 3/6 (capped
/// by nothing), g0 3/6 (u1 2/6, u3 1/6). The root splits 1 by 3:1:3 among g0, u0,
/// u2: 3/7, 1/7, 3/7, each under its demand; g0 splits 3/7 by 1:1, u3 capped at
/// its demand 1/6, u1 the rest, 3/7 − 1/6 = 11/42.
///
/// Heads in the last cycle's order: g0 and u2 tie at the root (1/6 over 3), the
/// group first, and in g0 u3 (nothing) before u1 (1/6). u3's head takes u0's
/// youngest, job 4 (equal starts: the larger id); u1's takes job 3 (u0 at 3/6,
/// then 2/6, above 1/7). u0 has nothing preemptible left; u1 now stands at 2/6
/// with its head, above 11/42, and g0 at 3/6 with both heads: u2's head takes
/// job 5, as u2 with it, 2/6 over 3, is at g0 without it, (3/6 − 1/6) over 3.
/// u1 was above its fair share as the round counted it, its own head included.
/// The property's oracle had counted the victims a round takes but not the heads
/// it serves, so it saw u1 at 1/6 when job 5 was taken. u1 ends where it began:
/// job 5 queues again at its old place, ahead of job 6, whose claim then goes (no
/// longer u1's head), and the next cycle starts job 5 again on what job 3 freed.
/// Then it is a standstill: u1 (1/6) and u2 (2/6) are below their shares, but
/// only u1, u2 and u3 hold preemptible jobs, none of them above its share.
#[test]
fn preempting_a_head_s_user_counts_the_head_it_was_given() {
    let case = GroupCase {
        groups: vec![(0, 3)],
        users: vec![
            (1, 1, vec![(0, false), (0, false), (0, true), (0, true)], 0),
            (0, 1, vec![(0, true)], 1),
            (1, 3, vec![(0, false)], 2),
            (0, 1, vec![], 1),
        ],
        cores: 6,
    };
    let mut l = group_ledger(&case);
    let knobs = PreemptionConfig {
        after: 1.0,
        min_runtime: 0.0,
        max_per_job: 1000,
        budget: 1.0,
        interval: 0.0,
        shortfall: false,
    };
    l.cycle(10.0);
    let (fair, held) = fair_and_held(&l);
    let expected = [1.0 / 7.0, 11.0 / 42.0, 3.0 / 7.0, 1.0 / 6.0];
    for (f, e) in fair.iter().zip(expected) {
        assert!((f - e).abs() < 1e-12, "fair {fair:?}");
    }
    assert_eq!(held, [4.0 / 6.0, 1.0 / 6.0, 1.0 / 6.0, 0.0]);
    let out = l.preempt(10.0, &knobs);
    let got: Vec<(u128, &str, u128, &str)> = out
        .iter()
        .map(|p| {
            (
                p.job_id.as_u128(),
                p.user.as_str(),
                p.for_job.as_u128(),
                p.for_user.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [(4, "u0", 10, "u3"), (3, "u0", 6, "u1"), (5, "u1", 8, "u2")]
    );
    for p in &out {
        assert!(l.end(10.5, p.job_id));
        let mut again = queued(p.job_id.as_u128(), 1.0, 0.0);
        again.preemptible = true;
        again.preemptions = p.preemptions + 1;
        l.requeue(10.5, &p.user, again);
    }
    l.cycle(11.0);
    let mut running: Vec<(u128, String)> = l
        .jobs
        .iter()
        .map(|(j, job)| (j.as_u128(), l.accounts[job.uid as usize].name.to_string()))
        .collect();
    running.sort();
    let want = [
        (1, "u0"),
        (2, "u0"),
        (5, "u1"),
        (7, "u2"),
        (8, "u2"),
        (10, "u3"),
    ];
    assert_eq!(running, want.map(|(j, u)| (j, u.to_owned())));
    assert!(l.preempt(11.0, &knobs).is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Issue 43 §2's kind, with groups: preemption (the share rule) reads the same
    /// hierarchical standing as the fair shares. Run to a standstill (cycle,
    /// preempt, the victims end and queue again, and again), on 1-core jobs:
    /// - it never takes a job of a user at or below its hierarchical fair share
    ///   (counting the heads the round gave it, as the rule does);
    /// - it never stops while a user below its fair share waits with a head that
    ///   a preemptible job of a user above its own could make room for, where that
    ///   leaves the waiting user's side of the tree (where the two users' paths
    ///   part) at or below its fair share and the other side at or above its own:
    ///   then the waiting user could be served without taking anyone below its
    ///   fair share, and preemption must do it.
    #[test]
    fn with_groups_preemption_stops_only_at_hierarchical_fair_shares(case in group_case()) {
        let cores = f64::from(case.cores);
        let mut l = group_ledger(&case);
        let names: Vec<String> = (0..case.users.len()).map(|u| format!("u{u}")).collect();
        let knobs = PreemptionConfig {
            after: 1.0,
            min_runtime: 0.0,
            max_per_job: 1000,
            budget: 1.0,
            interval: 0.0,
            shortfall: false,
        };
        let uid = |l: &Ledger, name: &str| l.by_name[name] as usize;
        for round in 0..40 {
            let t = 10.0 + f64::from(round);
            l.cycle(t);
            let (fair, held) = fair_and_held(&l);
            let out = l.preempt(t, &knobs);
            if out.is_empty() {
                // A standstill: nobody below its share could be served as above.
                let free = cores - l.accounts.iter().map(|a| a.allocation.cpu).sum::<f64>();
                let paths: Vec<Vec<usize>> = l.accounts.iter().map(|a| l.tree.path_of(a.settings.group.as_deref())).collect();
                // What a side of the tree holds and its fair share: a group (all users
                // under it) or one user.
                let side = |node: Result<usize, usize>| -> (f64, f64) {
                    (0..l.accounts.len())
                        .filter(|&u| match node { Ok(g) => paths[u].contains(&g), Err(x) => u == x })
                        .fold((0.0, 0.0), |(h, f), u| (h + held[u], f + fair[u]))
                };
                let unit = 1.0 / cores;
                for p in 0..l.accounts.len() {
                    let a = &l.accounts[p];
                    if a.head().is_none() || free >= 1.0 || held[p] >= fair[p] - 1e-6 {
                        continue;
                    }
                    for v in 0..l.accounts.len() {
                        let has_victim = l.jobs.values().any(|j| j.uid as usize == v && j.preemptible);
                        if v == p || !has_victim || held[v] <= fair[v] + 1e-6 {
                            continue;
                        }
                        let level = (0..).find(|&i| paths[p].get(i) != paths[v].get(i) || paths[p].get(i).is_none()).unwrap();
                        let a_node = paths[p].get(level).map_or(Err(p), |&g| Ok(g));
                        let b_node = paths[v].get(level).map_or(Err(v), |&g| Ok(g));
                        let (held_a, fair_a) = side(a_node);
                        let (held_b, fair_b) = side(b_node);
                        prop_assert!(
                            !(held_a + unit <= fair_a + 1e-12 && held_b - unit >= fair_b - 1e-12),
                            "round {}: {} (held {}, fair {}) waits while {} (held {}, fair {}) could make room",
                            round, names[p], held[p], fair[p], names[v], held[v], fair[v]
                        );
                    }
                }
                break;
            }
            // Never a job of a user at or below its fair share, as things will
            // stand once the round's earlier heads start (each on what its victims
            // free: its claim, granted first by the next cycle) and their victims
            // have gone: the rule's standing, and the flat property's
            // (`preemptions_follow_the_rules`' "as things will stand once earlier
            // heads start"). A user whose head preempted may lose a job to a later
            // head: `preempting_a_head_s_user_counts_the_head_it_was_given`.
            let mut after = held.clone();
            let mut head: Option<(JobId, usize)> = None;
            for p in &out {
                if let Some((h, u)) = head {
                    if h != p.for_job {
                        after[u] += 1.0 / cores;
                    }
                }
                head = Some((p.for_job, uid(&l, &p.for_user)));
                let v = uid(&l, &p.user);
                prop_assert!(after[v] > fair[v] + 1e-9, "{} taken at {} with fair share {}", p.user, after[v], fair[v]);
                after[v] -= 1.0 / cores;
                prop_assert!(l.end(t + 0.5, p.job_id));
                let mut again = queued(p.job_id.as_u128(), 1.0, 0.0);
                again.preemptible = true;
                again.preemptions = p.preemptions + 1;
                l.requeue(t + 0.5, &p.user, again);
            }
        }
    }
}
