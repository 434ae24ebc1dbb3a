//! The anchors' exact tests (issue 47): their formulas on the documentation's
//! terms, and tiny traces whose schedules are worked out by hand in each test's
//! comment.

use std::collections::BTreeMap;

use super::simulate::anchors::{
    fair_tree_factors, kueue_share, kueue_targets, slurm_classic_factor, slurm_priority,
    KUEUE_AFS_HALF_LIFE_S, SLURM_MAX_AGE_S,
};
use super::simulate::{simulate, Preemptible, SimConfig, SimOutcome, SimPolicy};
use super::swf::TraceJob;

fn job(number: u64, submit: f64, run: f64, cpus: u32, user: &str) -> TraceJob {
    TraceJob::new(number, submit, run, cpus, user)
}

fn estimated(number: u64, submit: f64, run: f64, cpus: u32, user: &str) -> TraceJob {
    TraceJob {
        requested_time: Some(run),
        ..job(number, submit, run, cpus, user)
    }
}

fn run(policy: SimPolicy, capacity: u32, trace: &[TraceJob], preemptible: bool) -> SimOutcome {
    let config = SimConfig {
        preemptible: if preemptible {
            Preemptible::All
        } else {
            Preemptible::None
        },
        ..SimConfig::new(policy, capacity)
    };
    simulate(trace, &config)
}

fn starts(outcome: &SimOutcome) -> BTreeMap<u64, f64> {
    outcome.jobs.iter().map(|j| (j.number, j.start)).collect()
}

fn expect(outcome: &SimOutcome, want: &[(u64, f64)]) {
    assert!(outcome.never_started.is_empty(), "{outcome:?}");
    let got = starts(outcome);
    let want: BTreeMap<u64, f64> = want.iter().copied().collect();
    assert_eq!(got, want, "{}", outcome.policy);
}

// --- names ---

#[test]
fn every_policy_parses_from_its_own_name() {
    for policy in SimPolicy::ALL {
        assert_eq!(policy.name().parse::<SimPolicy>(), Ok(policy));
    }
    assert_eq!("Kueue_AFS".parse::<SimPolicy>(), Ok(SimPolicy::KueueAfs));
    assert!("slurmy".parse::<SimPolicy>().is_err());
    assert_eq!(
        SimPolicy::ALL.iter().filter(|p| p.is_anchor()).count(),
        SimPolicy::ANCHORS.len()
    );
}

// --- Slurm: formulas ---

#[test]
fn slurm_classic_factor_halves_for_each_share_of_usage() {
    // classic_fair_share.html: F = 2^(-U/S).
    assert_eq!(slurm_classic_factor(0.0, 0.25), 1.0);
    assert_eq!(slurm_classic_factor(0.25, 0.25), 0.5);
    assert_eq!(slurm_classic_factor(0.5, 0.25), 0.25);
    assert_eq!(slurm_classic_factor(1.0, 0.5), 0.25);
}

#[test]
fn fair_tree_ranks_users_by_level_fairshare_and_ties_share_a_rank() {
    // fair_tree.html: rank / user count, the highest 1.0, ties allowed. Level FS
    // ∞ (no usage), 2, 2, 0.5 among 4 users: 4/4, 3/4, 3/4, 1/4.
    let f = fair_tree_factors(&[2.0, f64::INFINITY, 0.5, 2.0]);
    assert_eq!(f, vec![0.75, 1.0, 0.25, 0.75]);
    assert_eq!(fair_tree_factors(&[1.0]), vec![1.0]);
}

#[test]
fn slurm_priority_weighs_fair_share_and_capped_age_and_truncates() {
    // 10000 · F + 1000 · min(age / 7 days, 1), as Slurm's 32-bit integer.
    assert_eq!(slurm_priority(0.5, SLURM_MAX_AGE_S / 2.0), 5500.0);
    assert_eq!(slurm_priority(1.0, 3.0 * SLURM_MAX_AGE_S), 11000.0);
    assert_eq!(slurm_priority(1.0 / 3.0, 0.0), 3333.0);
}

// --- Slurm: schedules ---

/// Capacity 2. User a: jobs 1 and 2 (2 cores, 10 s) at 0; user b: job 3 (2 cores)
/// at 1. At 10, a has all the usage: `F_a = 2^(−1/0.5) = 0.25` (2500), b has none
/// (`F_b = 1`, 10000), so b's job 3 goes before a's older job 2 (FIFO runs job 2
/// at 10).
fn usage_trace() -> Vec<TraceJob> {
    vec![
        job(1, 0.0, 10.0, 2, "a"),
        job(2, 0.0, 10.0, 2, "a"),
        job(3, 1.0, 10.0, 2, "b"),
    ]
}

#[test]
fn slurm_puts_the_user_without_usage_before_an_older_job_of_the_user_with_it() {
    for policy in [SimPolicy::SlurmMultifactor, SimPolicy::SlurmFairTree] {
        let outcome = run(policy, 2, &usage_trace(), false);
        expect(&outcome, &[(1, 0.0), (3, 10.0), (2, 20.0)]);
    }
    let fifo = run(SimPolicy::Fifo, 2, &usage_trace(), false);
    expect(&fifo, &[(1, 0.0), (2, 10.0), (3, 20.0)]);
}

/// Capacity 5, estimates exact. Job 1 (a, 3 cores, 100 s) at 0; job 2 (b, 5 cores,
/// 10 s) at 1 cannot start: reservation at the shadow time 100, extra 0. Job 3 (c,
/// 1 core, 50 s) at 2 ends by 100: backfilled at 2. Job 4 (c, 1 core, 200 s) at 3
/// would end after 100 and there is no extra: it waits. At 100 job 2 starts (b has
/// no usage, so it is first); at 110 job 4.
#[test]
fn slurm_backfills_only_jobs_that_do_not_delay_the_reservation() {
    let trace = vec![
        estimated(1, 0.0, 100.0, 3, "a"),
        estimated(2, 1.0, 10.0, 5, "b"),
        estimated(3, 2.0, 50.0, 1, "c"),
        estimated(4, 3.0, 200.0, 1, "c"),
    ];
    for policy in [SimPolicy::SlurmMultifactor, SimPolicy::SlurmFairTree] {
        let outcome = run(policy, 5, &trace, false);
        expect(&outcome, &[(1, 0.0), (3, 2.0), (2, 100.0), (4, 110.0)]);
    }
}

/// Capacity 1. Job 1 (x, 100 s) at 0; then y's job 2 at 10 and z's job 3 at 5.
/// At 100 neither y nor z has usage (`F = 1`): priority 10000 + the age term
/// (95 s and 90 s of 7 days: 0 after truncation) ties, and the earlier submit
/// (job 3) goes first; job 2 at 200.
#[test]
fn slurm_breaks_equal_priorities_by_submit_time() {
    let trace = vec![
        job(1, 0.0, 100.0, 1, "x"),
        job(2, 10.0, 100.0, 1, "y"),
        job(3, 5.0, 100.0, 1, "z"),
    ];
    let outcome = run(SimPolicy::SlurmMultifactor, 1, &trace, false);
    expect(&outcome, &[(1, 0.0), (3, 100.0), (2, 200.0)]);
}

/// Fair Tree's ranks: capacity 1; a runs 300 s, b 200 s, c 100 s (jobs 1–3, one
/// after the other from 0); at 600 a, b and c each wait with a job submitted at 1
/// (jobs 4–6). Level FS `S/U` orders c > b > a: c's job 6 at 600, b's 5 at 700,
/// a's 4 at 800.
#[test]
fn slurm_fair_tree_serves_users_in_rank_order() {
    let trace = vec![
        job(1, 0.0, 300.0, 1, "a"),
        job(2, 0.0, 200.0, 1, "b"),
        job(3, 0.0, 100.0, 1, "c"),
        job(4, 1.0, 100.0, 1, "a"),
        job(5, 1.0, 100.0, 1, "b"),
        job(6, 1.0, 100.0, 1, "c"),
    ];
    let outcome = run(SimPolicy::SlurmFairTree, 1, &trace, false);
    // Before 600: at 300 (a's job ends) b and c have no usage (F = 1 each) and
    // tie; b's job 2 (earlier number at the same submit) starts; at 500 c (no
    // usage) first: job 3; at 600 the three with usage: c < b < a.
    expect(
        &outcome,
        &[
            (1, 0.0),
            (2, 300.0),
            (3, 500.0),
            (6, 600.0),
            (5, 700.0),
            (4, 800.0),
        ],
    );
}

/// Where the two fair-share factors part (capacity 1, equal shares of 1/3): a
/// ran 100 s, b 200 s, c then holds the core for 100,000 s, so a's and b's
/// normalized usage are tiny (about 0.001 and 0.002 of everyone's). At 100,300 b's
/// job 4 (submitted at 400) and a's job 5 (at 50,000) wait. Classic:
/// `10000 · 2^(−U/S)` is about 9979 for a and 9959 for b, 21 points apart, while
/// b's extra 49,600 s of age is worth 1000 · 49,600 / 604,800 = 82: b (about
/// 10,123) goes before a (about 10,062). Fair Tree ranks the users by `S/U`: a
/// first (factor 3/3: 10,083), b second (2/3: 6,831): a goes first. Before that:
/// at 100 b's job 2 and c's job 3 have no usage and tie (10,000); b's submitted
/// first.
#[test]
fn slurm_fair_tree_ranks_where_classic_lets_age_decide() {
    let trace = vec![
        job(1, 0.0, 100.0, 1, "a"),
        job(2, 0.0, 200.0, 1, "b"),
        job(3, 1.0, 100_000.0, 1, "c"),
        job(4, 400.0, 10.0, 1, "b"),
        job(5, 50_000.0, 10.0, 1, "a"),
    ];
    let classic = run(SimPolicy::SlurmMultifactor, 1, &trace, false);
    expect(
        &classic,
        &[
            (1, 0.0),
            (2, 100.0),
            (3, 300.0),
            (4, 100_300.0),
            (5, 100_310.0),
        ],
    );
    let tree = run(SimPolicy::SlurmFairTree, 1, &trace, false);
    expect(
        &tree,
        &[
            (1, 0.0),
            (2, 100.0),
            (3, 300.0),
            (5, 100_300.0),
            (4, 100_310.0),
        ],
    );
}

// --- Kueue AFS ---

/// Capacity 2. a: jobs 1–4 (1 core, 100 s) at 0; b: job 5 at 10. Jobs 1 and 2
/// start at 0. At 100 a's LocalQueue has usage (an average of its 2 cores over
/// 100 s of a 168 h half-life), b's none: b's job 5 first, then a's job 3; job 4
/// at 200. FIFO would start 3 and 4 at 100 and 5 at 200.
#[test]
fn kueue_afs_admits_the_local_queue_with_less_usage_first() {
    let trace = vec![
        job(1, 0.0, 100.0, 1, "a"),
        job(2, 0.0, 100.0, 1, "a"),
        job(3, 0.0, 100.0, 1, "a"),
        job(4, 0.0, 100.0, 1, "a"),
        job(5, 10.0, 100.0, 1, "b"),
    ];
    let outcome = run(SimPolicy::KueueAfs, 2, &trace, false);
    expect(
        &outcome,
        &[(1, 0.0), (2, 0.0), (5, 100.0), (3, 100.0), (4, 200.0)],
    );
}

/// BestEffortFIFO: capacity 2; a's job 1 (1 core, 100 s) at 0; b's job 2 (2 cores)
/// at 1 does not fit and does not block b's job 3 (1 core, 100 s) at 2, which
/// starts at once; job 2 at 102, when both have ended.
#[test]
fn kueue_afs_best_effort_fifo_lets_a_later_job_pass_one_that_does_not_fit() {
    let trace = vec![
        job(1, 0.0, 100.0, 1, "a"),
        job(2, 1.0, 10.0, 2, "b"),
        job(3, 2.0, 100.0, 1, "b"),
    ];
    let outcome = run(SimPolicy::KueueAfs, 2, &trace, false);
    expect(&outcome, &[(1, 0.0), (3, 2.0), (2, 102.0)]);
}

/// The usage is a decayed average: a held 2 cores for 100 s, b 1 core for 150 s
/// (both long before); with `T` = 168 h, `h = cores · (1 − 2^(−Δt/T))` decayed
/// since: a ≈ 2·100·ln2/T, b ≈ 150·ln2/T, so b (less) goes first at 1000 although
/// a's waiting job is older.
#[test]
fn kueue_afs_orders_by_decayed_usage_not_by_age() {
    let trace = vec![
        job(1, 0.0, 100.0, 2, "a"),
        job(2, 100.0, 150.0, 1, "b"),
        job(3, 250.0, 750.0, 2, "x"),
        job(4, 300.0, 10.0, 2, "a"),
        job(5, 400.0, 10.0, 2, "b"),
    ];
    let outcome = run(SimPolicy::KueueAfs, 2, &trace, false);
    expect(
        &outcome,
        &[(1, 0.0), (2, 100.0), (3, 250.0), (5, 1000.0), (4, 1010.0)],
    );
    // The averages at 1000, by the formula.
    let d = |dt: f64| (-dt / KUEUE_AFS_HALF_LIFE_S).exp2();
    let a = 2.0 * (1.0 - d(100.0)) * d(900.0);
    let b = 1.0 * (1.0 - d(150.0)) * d(750.0);
    assert!(b < a);
}

/// A LocalQueue's `fairSharing.weight` divides its usage ("a queue with weight 2 will
/// be treated as if it used half as many resources", Kueue's admission fair sharing
/// page; a fresh tester found the weights ignored). Capacity 2: a holds 2 cores over
/// 0–100, b 2 cores over 100–150; at 150 a's job 3 and b's job 4 wait. By the formula
/// a's usage is about twice b's (2·100 against 2·50 core-seconds, decayed): equal
/// weights, b first; a's weight 1.5, a's usage over 1.5 is still above b's; a's
/// weight 3, below: a first.
#[test]
fn kueue_afs_divides_a_local_queues_usage_by_its_weight() {
    let trace = vec![
        job(1, 0.0, 100.0, 2, "a"),
        job(2, 100.0, 50.0, 2, "b"),
        job(3, 120.0, 10.0, 2, "a"),
        job(4, 121.0, 10.0, 2, "b"),
    ];
    let with_weight = |w: f64| {
        let mut config = SimConfig::new(SimPolicy::KueueAfs, 2);
        config.weights.insert("a".to_owned(), w);
        simulate(&trace, &config)
    };
    let b_first = [(1, 0.0), (2, 100.0), (4, 150.0), (3, 160.0)];
    let a_first = [(1, 0.0), (2, 100.0), (3, 150.0), (4, 160.0)];
    expect(&run(SimPolicy::KueueAfs, 2, &trace, false), &b_first);
    expect(&with_weight(1.5), &b_first);
    expect(&with_weight(3.0), &a_first);
    // The usages at 150, by the formula: 1.5 < a / b < 3.
    let d = |dt: f64| (-dt / KUEUE_AFS_HALF_LIFE_S).exp2();
    let a = 2.0 * (1.0 - d(100.0)) * d(50.0);
    let b = 2.0 * (1.0 - d(50.0));
    assert!((1.5..3.0).contains(&(a / b)), "{}", a / b);
}

// --- Kueue fair sharing ---

#[test]
fn kueue_share_is_a_thousandth_of_the_dominant_share_over_the_weight() {
    assert_eq!(kueue_share(50.0, 100.0, 1.0), 500);
    assert_eq!(kueue_share(50.0, 100.0, 2.0), 250);
    assert_eq!(kueue_share(1.0, 3.0, 1.0), 333);
}

/// Capacity 4: a's job 1 (3 cores, 100 s) at 0; at 10 a's job 2 and b's job 3
/// (1 core each). With its workload a's share would be 1000, b's 250: b's job 3
/// takes the free core; a's job 2 waits for 100.
#[test]
fn kueue_fair_and_armada_admit_the_queue_with_the_smaller_share_first() {
    let trace = vec![
        job(1, 0.0, 100.0, 3, "a"),
        job(2, 10.0, 100.0, 1, "a"),
        job(3, 10.0, 100.0, 1, "b"),
    ];
    for policy in [
        SimPolicy::KueueFairSharing,
        SimPolicy::Armada,
        SimPolicy::YuniKorn,
    ] {
        let outcome = run(policy, 4, &trace, false);
        expect(&outcome, &[(1, 0.0), (3, 10.0), (2, 100.0)]);
    }
}

/// Strategy 1 (LessThanOrEqualToFinalShare): a holds 4 of 4 cores (4 jobs), b's
/// head needs 1: b with it 250 ≤ a without one job 750: a's most recently
/// admitted job (equal starts: the last, job 4) is preempted, b starts at 10, job
/// 4 again at 100 with 10 core-seconds lost.
#[test]
fn kueue_fair_preempts_the_newest_job_of_the_queue_with_the_largest_share() {
    let trace = vec![
        job(1, 0.0, 100.0, 1, "a"),
        job(2, 0.0, 100.0, 1, "a"),
        job(3, 0.0, 100.0, 1, "a"),
        job(4, 0.0, 100.0, 1, "a"),
        job(5, 10.0, 100.0, 1, "b"),
    ];
    let outcome = run(SimPolicy::KueueFairSharing, 4, &trace, true);
    expect(
        &outcome,
        &[(1, 0.0), (2, 0.0), (3, 0.0), (4, 100.0), (5, 10.0)],
    );
    assert_eq!(outcome.preemptions, 1);
    assert_eq!(outcome.lost_core_s, 10.0);
    // Without preemptible jobs nothing is stopped.
    let none = run(SimPolicy::KueueFairSharing, 4, &trace, false);
    assert_eq!(none.preemptions, 0);
    assert_eq!(starts(&none)[&5], 100.0);
}

/// The strategies on their own, shares in thousandths of 4 cores: `share(u, c) =
/// floor(250 c)`. Jobs 0, 1 of user 0 (1 core each), job 2 of user 1 (2 cores).
#[test]
fn kueue_targets_follow_the_two_strategies_and_give_back_what_is_not_needed() {
    let cpus = [1.0, 1.0, 2.0, 3.0];
    let users = [0, 0, 1, 3];
    let share = |_u: usize, c: f64| kueue_share(c, 4.0, 1.0);
    // (a) User 2 needs 2 with 0 free; 0 and 1 hold 2 each (500). With it, 500:
    // strategy 1 needs 500 ≤ 250 (without one 1-core job) or ≤ 0: never;
    // strategy 2 needs 500 < 500: never. No targets.
    let held = [2.0, 2.0, 0.0, 0.0];
    let cands = vec![vec![1, 0], vec![2], vec![], vec![]];
    let got = kueue_targets(
        2,
        2.0,
        0.0,
        500,
        &held,
        &cands,
        share,
        |k| cpus[k],
        |k| users[k],
    );
    assert_eq!(got, None);
    // (b) User 3 holds 3 (750, job 3), user 1 holds 1 (250, a 1-core job 2'):
    // user 2 needs 2 with 0 free, 500 with it. Strategy 1: 750 → without job 3,
    // 0: no; 250 → 0: no. Strategy 2: 500 < 750: job 3 goes; it fits (3 ≥ 2).
    let cpus_b = [1.0, 1.0, 1.0, 3.0];
    let held = [0.0, 1.0, 0.0, 3.0];
    let cands = vec![vec![], vec![2], vec![], vec![3]];
    let got = kueue_targets(
        2,
        2.0,
        0.0,
        500,
        &held,
        &cands,
        share,
        |k| cpus_b[k],
        |k| users[k],
    );
    assert_eq!(got, Some(vec![3]));
    // (c) Give-back: user 1 needs 1 with 0 free (250 with it); user 0 holds 3 jobs
    // of 1 and a 2-core one... simpler: user 0 holds jobs 0 and 1 (1 core each,
    // 500): strategy 1 takes job 1 (250 ≤ 250), fits; one target, nothing to give
    // back.
    let held = [2.0, 0.0, 0.0, 0.0];
    let cands = vec![vec![1, 0], vec![], vec![], vec![]];
    let got = kueue_targets(
        1,
        1.0,
        0.0,
        250,
        &held,
        &cands,
        share,
        |k| cpus[k],
        |k| users[k],
    );
    assert_eq!(got, Some(vec![1]));
}

/// fillBackWorkloads: user 2 needs 2 cores, none free, 250 with them (capacity
/// 8: `share(u, c) = floor(125 c)`). User 0 holds 6 cores (750); its candidates,
/// newest first: job 0 (1 core), job 1 (2 cores). Strategy 1 takes job 0 (250 ≤
/// share of 5 = 625): 1 free, not enough; then job 1 (250 ≤ share of 3 = 375): 3
/// free. Given back, newest target first but never the last: without job 0 2
/// cores are still free, enough: only job 1 is preempted.
#[test]
fn kueue_targets_give_back_a_target_the_preemptor_does_not_need() {
    let cpus = [1.0, 2.0];
    let users = [0, 0];
    let got = kueue_targets(
        2,
        2.0,
        0.0,
        250,
        &[6.0, 0.0, 0.0],
        &[vec![0, 1], vec![], vec![]],
        |_u, c| kueue_share(c, 8.0, 1.0),
        |k| cpus[k],
        |k| users[k],
    );
    assert_eq!(got, Some(vec![1]));
}

// --- Armada ---

/// The DRF cost follows the weights: capacity 4, a holds 2 cores (job 1), b 1
/// (job 2); at 10 each asks for the last core. Cost with the job, `cores / C / w`:
/// equal weights, a 3/4, b 2/4: b's job 4 first (a's job 3 at 100). With a's
/// weight 2, a's cost is 3/8 < 2/4: a's job 3 first (b's job 4 at 100).
#[test]
fn armada_queue_cost_divides_by_the_weight() {
    let trace = vec![
        job(1, 0.0, 100.0, 2, "a"),
        job(2, 0.0, 100.0, 1, "b"),
        job(3, 10.0, 100.0, 1, "a"),
        job(4, 10.0, 100.0, 1, "b"),
    ];
    let equal = run(SimPolicy::Armada, 4, &trace, false);
    expect(&equal, &[(1, 0.0), (2, 0.0), (4, 10.0), (3, 100.0)]);
    let mut config = SimConfig::new(SimPolicy::Armada, 4);
    config.weights.insert("a".to_owned(), 2.0);
    let weighted = simulate(&trace, &config);
    expect(&weighted, &[(1, 0.0), (2, 0.0), (3, 10.0), (4, 100.0)]);
}

/// Preemption to a weighted fair share: capacity 4, all preemptible, a (weight 3)
/// runs jobs 1–4 (1 core, 100 s) from 0, b (weight 1) sends jobs 5 and 6 at 10.
/// Water-filling: a's demand 1.0 and b's 0.5 both exceed `w · 1/4`, so a's share
/// is 0.75 (3 cores), b's 0.25. a holds 4 > 3: all four evicted, rescheduled by
/// cost with the job: a 1/12, 2/12, then a 3/12 and b 1/4 tie (a, first in queue
/// order, wins), then b 1/4 against a 4/12: b's job 5. Full: job 4 is preempted
/// (10 core-seconds lost). At 100 b (1 core held, share 2 of the then 3 cores of
/// demand) is below its share but nobody is above: jobs 4 and 6 start at 100.
#[test]
fn armada_preempts_down_to_the_weighted_fair_share() {
    let trace = vec![
        job(1, 0.0, 100.0, 1, "a"),
        job(2, 0.0, 100.0, 1, "a"),
        job(3, 0.0, 100.0, 1, "a"),
        job(4, 0.0, 100.0, 1, "a"),
        job(5, 10.0, 100.0, 1, "b"),
        job(6, 10.0, 100.0, 1, "b"),
    ];
    let mut config = SimConfig {
        preemptible: Preemptible::All,
        ..SimConfig::new(SimPolicy::Armada, 4)
    };
    config.weights.insert("a".to_owned(), 3.0);
    let outcome = simulate(&trace, &config);
    expect(
        &outcome,
        &[
            (1, 0.0),
            (2, 0.0),
            (3, 0.0),
            (4, 100.0),
            (5, 10.0),
            (6, 100.0),
        ],
    );
    assert_eq!(outcome.preemptions, 1);
    assert_eq!(outcome.lost_core_s, 10.0);
}

/// Capacity 4, all preemptible. a's jobs 1–4 (1 core, 100 s) at 0; b's jobs 5 and
/// 6 at 10. Fair shares (demand-capped): 0.5 each; a holds 1.0 > 1.0 × 0.5, so
/// all four are evicted; rescheduling by cost with the job, ties by queue order
/// (a first): a:1 (0.25), b:5 (0.25), a:2 (0.5), b:6 (0.5). Jobs 3 and 4 are
/// preempted (20 core-seconds lost) and start again at 100.
#[test]
fn armada_evicts_above_fair_share_and_reschedules_by_cost() {
    let trace = vec![
        job(1, 0.0, 100.0, 1, "a"),
        job(2, 0.0, 100.0, 1, "a"),
        job(3, 0.0, 100.0, 1, "a"),
        job(4, 0.0, 100.0, 1, "a"),
        job(5, 10.0, 100.0, 1, "b"),
        job(6, 10.0, 100.0, 1, "b"),
    ];
    let outcome = run(SimPolicy::Armada, 4, &trace, true);
    expect(
        &outcome,
        &[
            (1, 0.0),
            (2, 0.0),
            (3, 100.0),
            (4, 100.0),
            (5, 10.0),
            (6, 10.0),
        ],
    );
    assert_eq!(outcome.preemptions, 2);
    assert_eq!(outcome.lost_core_s, 20.0);
}

/// Protected at its fair share: a and b hold 2 of 4 cores each; b also queues a
/// third job. Demand-capped fair shares are 0.5 each, both hold exactly that
/// (fraction 1.0 ≤ 1.0): nothing is evicted, b's job 5 waits until 100.
#[test]
fn armada_protects_a_queue_at_its_fair_share() {
    let trace = vec![
        job(1, 0.0, 100.0, 1, "a"),
        job(2, 0.0, 100.0, 1, "a"),
        job(3, 0.0, 100.0, 1, "b"),
        job(4, 0.0, 100.0, 1, "b"),
        job(5, 10.0, 100.0, 1, "b"),
    ];
    let outcome = run(SimPolicy::Armada, 4, &trace, true);
    assert_eq!(outcome.preemptions, 0);
    assert_eq!(starts(&outcome)[&5], 100.0);
}

/// A round the fast paths take, counted as the full round would be. Capacity 3,
/// all preemptible, equal weights: a's jobs 1 (1 core, 1000 s) and 2 (1 core,
/// 900 s) and b's job 3 (1 core, 50 s) at 0, c's jobs 4 (1 core, 10 s) and 5
/// (3 cores, 10 s) at 5.
/// - 0: nothing runs, the plain pass starts 1, 3, 2 (cycle 1).
/// - 5: fair shares 1 core each (b's demand 1/3, then a and c 1/3 each); a holds
///   2, so 1 and 2 are evicted; by cost a:1 (1/3, a before c), c:4 (1/3), then
///   a:2 (2/3) no longer fits: job 2 is preempted (5 core-seconds lost) and its
///   first run's finish, at 900, is stale (cycle 2).
/// - 15: 4 ends; shares 1 each, nobody above: the round is the plain pass, which
///   starts 2 (cycle 3).
/// - 50: 3 ends; shares 1.5 each, a (2) above, c (0) below: the round evicts 1
///   and 2 (keys up to 2/3), c's only job would have key 3/3 > 2/3, so all come
///   back first and then nothing fits: no change (cycle 4).
/// - 900: only the stale finish: the state the step at 50 left, skipped and
///   counted as that step (cycle 5).
/// - 915: 2 ends; shares a 1.5, c 2; nobody above, job 5 does not fit the 2 free
///   cores (cycle 6).
/// - 1000: 1 ends, nothing preemptible runs: the plain pass starts 5 (cycle 7).
#[test]
fn armada_counts_the_rounds_it_proves_change_nothing() {
    let trace = vec![
        job(1, 0.0, 1000.0, 1, "a"),
        job(2, 0.0, 900.0, 1, "a"),
        job(3, 0.0, 50.0, 1, "b"),
        job(4, 5.0, 10.0, 1, "c"),
        job(5, 5.0, 10.0, 3, "c"),
    ];
    let outcome = run(SimPolicy::Armada, 3, &trace, true);
    expect(
        &outcome,
        &[(1, 0.0), (2, 15.0), (3, 0.0), (4, 5.0), (5, 1000.0)],
    );
    assert_eq!(outcome.preemptions, 1);
    assert_eq!(outcome.lost_core_s, 5.0);
    assert_eq!(outcome.steps, 8);
    assert_eq!(outcome.cycles, 7);
}

// --- YuniKorn ---

/// Capacity 1, everything 100 s. At 0 a sends job 1, b jobs 2 and 3: both hold
/// nothing (0 / guaranteed ties), so more pending goes first: b's job 2. At 100
/// both hold nothing and have one pending: queue order (a first), job 1; job 3 at
/// 200.
#[test]
fn yunikorn_breaks_ties_by_pending_then_queue_order() {
    let trace = vec![
        job(1, 0.0, 100.0, 1, "a"),
        job(2, 0.0, 100.0, 1, "b"),
        job(3, 0.0, 100.0, 1, "b"),
    ];
    let outcome = run(SimPolicy::YuniKorn, 1, &trace, false);
    expect(&outcome, &[(2, 0.0), (1, 100.0), (3, 200.0)]);
}

/// Guaranteed follows the weights: capacity 6, weights a 2, b 1 (guaranteed 4 and
/// 2 cores). a holds 3 (0.75 of its guarantee), b 2 (1.0): at 10 both ask for the
/// last core and a, holding more cores, gets it.
#[test]
fn yunikorn_orders_queues_by_allocated_over_guaranteed() {
    let trace = vec![
        job(1, 0.0, 100.0, 3, "a"),
        job(2, 0.0, 100.0, 2, "b"),
        job(3, 10.0, 100.0, 1, "b"),
        job(4, 10.0, 100.0, 1, "a"),
    ];
    let mut config = SimConfig::new(SimPolicy::YuniKorn, 6);
    config.weights.insert("a".to_owned(), 2.0);
    let outcome = simulate(&trace, &config);
    expect(&outcome, &[(1, 0.0), (2, 0.0), (4, 10.0), (3, 100.0)]);
    // With equal weights b (2 of 3) goes before a (3 of 3).
    let outcome = run(SimPolicy::YuniKorn, 6, &trace, false);
    expect(&outcome, &[(1, 0.0), (2, 0.0), (3, 10.0), (4, 100.0)]);
}

/// An ask that does not fit is skipped, not waited for: capacity 4, a's job 1 (2
/// cores) and b's job 2 (1 core) run from 0. At 10 b asks for 2 cores (job 3)
/// and 1 (job 4), a for 1 (job 5), one core free. b (1 of its 2 guaranteed:
/// 0.5) goes before a (2 of 2: 1.0); its job 3 does not fit, its job 4 does: job
/// 4 at 10. At 60 job 4 ends: b's job 3 still does not fit, a's job 5 does. At
/// 100 jobs 1 and 2 end and job 3 starts.
#[test]
fn yunikorn_skips_an_ask_that_does_not_fit() {
    let trace = vec![
        job(1, 0.0, 100.0, 2, "a"),
        job(2, 0.0, 100.0, 1, "b"),
        job(3, 10.0, 50.0, 2, "b"),
        job(4, 10.0, 50.0, 1, "b"),
        job(5, 10.0, 50.0, 1, "a"),
    ];
    let outcome = run(SimPolicy::YuniKorn, 4, &trace, false);
    expect(
        &outcome,
        &[(1, 0.0), (2, 0.0), (4, 10.0), (5, 60.0), (3, 100.0)],
    );
}

/// YuniKorn never preempts, nor do the Slurm variants or Kueue AFS: with every
/// job preemptible their schedules are the same as without.
#[test]
fn anchors_without_a_preemptive_form_ignore_preemptible() {
    let trace = usage_trace();
    for policy in [
        SimPolicy::SlurmMultifactor,
        SimPolicy::SlurmFairTree,
        SimPolicy::KueueAfs,
        SimPolicy::YuniKorn,
    ] {
        let a = run(policy, 2, &trace, true);
        let b = run(policy, 2, &trace, false);
        assert_eq!(starts(&a), starts(&b));
        assert_eq!(a.preemptions, 0);
    }
}
