//! Unit tests of the fair-share policy: exact grants for small scenarios, and
//! short simulations that step virtual time.

use super::*;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

fn id(n: u128) -> JobId {
    JobId::from_u128(n)
}

/// `WaitingForCapacity`, short of `short`.
fn waiting(short: &[&str]) -> PendingReason {
    PendingReason::WaitingForCapacity {
        short: short.iter().map(|s| (*s).to_owned()).collect(),
    }
}

fn cpus(n: f64) -> Resources {
    Resources::new(n, 0.0, 0.0)
}

fn job(n: u128, resources: Resources, submitted_at: Seconds) -> QueuedJob {
    QueuedJob::new(id(n), resources, submitted_at)
}

/// `job` with a runtime estimate of `estimate` seconds.
fn estimated(mut job: QueuedJob, estimate: Seconds) -> QueuedJob {
    job.runtime_estimate = Some(estimate);
    job
}

/// `count` jobs with ids `first, first + 1, …`, submitted at `start, start + 1, …`.
fn jobs(first: u128, count: usize, resources: Resources, start: Seconds) -> Vec<QueuedJob> {
    (0..count)
        .map(|i| job(first + i as u128, resources, start + i as f64))
        .collect()
}

fn user(name: &str) -> UserView {
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
        queue: Vec::new(),
    }
}

/// Short builders for test users.
trait UserExt {
    fn weight(self, weight: f64) -> Self;
    fn limit(self, max_running_jobs: u32) -> Self;
    fn running(self, count: u32, each: Resources) -> Self;
    fn queue(self, queue: Vec<QueuedJob>) -> Self;
    fn paused(self) -> Self;
    fn max_resources(self, max: Resources) -> Self;
    fn usage(self, usage: f64, at: Seconds) -> Self;
}

impl UserExt for UserView {
    fn weight(mut self, weight: f64) -> Self {
        self.weight = weight;
        self
    }
    fn limit(mut self, max_running_jobs: u32) -> Self {
        self.max_running_jobs = max_running_jobs;
        self
    }
    fn running(mut self, count: u32, each: Resources) -> Self {
        self.outstanding_jobs = count;
        self.allocation = Resources::new(
            each.cpu * f64::from(count),
            each.gpu * f64::from(count),
            each.memory_bytes * f64::from(count),
        );
        self
    }
    fn queue(mut self, queue: Vec<QueuedJob>) -> Self {
        self.queue = queue;
        self
    }
    fn paused(mut self) -> Self {
        self.paused = true;
        self
    }
    fn max_resources(mut self, max: Resources) -> Self {
        self.max_resources = Some(max);
        self
    }
    fn usage(mut self, usage: f64, at: Seconds) -> Self {
        self.usage = usage;
        self.usage_at = at;
        self
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

fn with_outstanding(mut c: ClusterView, outstanding: Resources) -> ClusterView {
    c.outstanding = outstanding;
    c
}

fn unhealthy(mut c: ClusterView) -> ClusterView {
    c.healthy = false;
    c
}

/// The service's defaults (`config/default.toml`).
fn service_defaults() -> PolicyConfig {
    crate::config::Settings::defaults().scheduler.policy()
}

/// History off, starvation guard off, backfill on.
fn plain() -> PolicyConfig {
    PolicyConfig {
        usage_half_life: 0.0,
        starvation_guard: f64::INFINITY,
        starvation_runs: 0.0,
        backfill: true,
        age_weight: 0.0,
        max_age: 86_400.0,
        licenses: crate::policy::Custom::EMPTY,
    }
}

fn granted(outcome: &CycleOutcome) -> Vec<(&str, JobId)> {
    outcome
        .grants
        .iter()
        .map(|g| (g.user.as_str(), g.job_id))
        .collect()
}

fn count(outcome: &CycleOutcome, name: &str) -> usize {
    outcome.grants.iter().filter(|g| g.user == name).count()
}

fn reason(outcome: &CycleOutcome, job_id: JobId) -> Option<&PendingReason> {
    outcome
        .pending
        .iter()
        .find(|(j, _)| *j == job_id)
        .map(|(_, r)| r)
}

fn granted_cpu(outcome: &CycleOutcome) -> f64 {
    outcome.grants.iter().map(|g| g.resources.cpu).sum()
}

/// A tiny simulator for multi-cycle tests: one cluster, users with running
/// jobs that end at known times.
struct Sim {
    total: Resources,
    users: Vec<SimUser>,
    reservation: Option<Reservation>,
}

struct SimUser {
    view: UserView,
    /// (job, resources, end time)
    running: Vec<(JobId, Resources, Seconds)>,
}

impl Sim {
    fn new(total: Resources, users: Vec<UserView>) -> Sim {
        let users = users
            .into_iter()
            .map(|view| SimUser {
                view,
                running: Vec::new(),
            })
            .collect();
        Sim {
            total,
            users,
            reservation: None,
        }
    }

    fn user_mut(&mut self, name: &str) -> &mut SimUser {
        self.users.iter_mut().find(|u| u.view.user == name).unwrap()
    }

    fn running(&self, name: &str) -> usize {
        self.users
            .iter()
            .find(|u| u.view.user == name)
            .map_or(0, |u| u.running.len())
    }

    fn views(&self) -> Vec<UserView> {
        self.users
            .iter()
            .map(|u| {
                let mut view = u.view.clone();
                view.outstanding_jobs = u.running.len() as u32;
                view.allocation = u
                    .running
                    .iter()
                    .fold(Resources::ZERO, |sum, (_, r, _)| sum + *r);
                view
            })
            .collect()
    }

    fn clusters(&self) -> Vec<ClusterView> {
        let used = self
            .users
            .iter()
            .flat_map(|u| u.running.iter())
            .fold(Resources::ZERO, |sum, (_, r, _)| sum + *r);
        vec![ClusterView {
            name: "ray".to_owned(),
            healthy: true,
            total: self.total,
            used_reported: used,
            outstanding: used,
            unreported: Resources::ZERO,
            jobs: self
                .users
                .iter()
                .flat_map(|u| u.running.iter())
                .map(|&(_, resources, end)| OutstandingJob {
                    resources,
                    expected_end: Some(end),
                })
                .collect(),
            pool: false,
        }]
    }

    /// Runs a cycle at `now`, carrying the reservation from the previous
    /// one; granted jobs leave the queue and run for `runtime`.
    fn cycle(&mut self, now: Seconds, config: &PolicyConfig, runtime: Seconds) -> CycleOutcome {
        let views = self.views();
        let outcome = run_cycle(
            now,
            config,
            &views,
            &self.clusters(),
            self.reservation.as_ref(),
        );
        self.reservation.clone_from(&outcome.reservation);
        for grant in &outcome.grants {
            let u = self.user_mut(&grant.user);
            u.view.queue.retain(|j| j.job_id != grant.job_id);
            u.running
                .push((grant.job_id, grant.resources, now + runtime));
        }
        outcome
    }

    /// Ends every job whose end time is at or before `now`.
    fn finish_until(&mut self, now: Seconds) {
        for u in &mut self.users {
            u.running.retain(|(_, _, end)| *end > now);
        }
    }

    /// Ends the oldest running job of `name`, if any.
    fn finish_one(&mut self, name: &str) {
        let u = self.user_mut(name);
        if !u.running.is_empty() {
            u.running.remove(0);
        }
    }
}

// 1. The polling-loop scheduler's intent: fewest running jobs first, oldest job on ties.
#[test]
fn users_with_fewest_running_jobs_go_first_and_limits_hold() {
    let one = cpus(1.0);
    let users = vec![
        user("u1")
            .limit(2)
            .queue(vec![job(11, one, 1.0), job(12, one, 2.0)]),
        user("u2").limit(2).running(1, one),
        user("u3")
            .limit(2)
            .running(2, one)
            .queue(vec![job(31, one, 0.0), job(32, one, 0.5)]),
        user("u4")
            .limit(2)
            .queue(vec![job(41, one, 3.0), job(42, one, 4.0)]),
    ];
    let clusters = vec![with_outstanding(cluster("ray", cpus(8.0)), cpus(3.0))];
    let outcome = run_cycle(10.0, &plain(), &users, &clusters, None);

    assert_eq!(
        granted(&outcome),
        vec![
            ("u1", id(11)),
            ("u4", id(41)),
            ("u1", id(12)),
            ("u4", id(42))
        ]
    );
    assert_eq!(count(&outcome, "u3"), 0);
    assert_eq!(
        8.0 - 3.0 - granted_cpu(&outcome),
        1.0,
        "one slot stays free"
    );
    assert_eq!(
        reason(&outcome, id(31)),
        Some(&PendingReason::MaxRunningJobs { limit: 2 })
    );
    assert_eq!(outcome.stopped_for, None);
}

// 2. DRF golden case (Ghodsi et al., NSDI 2011, §4.1).
#[test]
fn drf_paper_example_gives_three_and_two_jobs_at_equal_dominant_share() {
    let a_job = Resources::new(1.0, 0.0, 4.0 * GIB);
    let b_job = Resources::new(3.0, 0.0, GIB);
    let users = vec![
        user("A").queue(jobs(100, 10, a_job, 0.0)),
        user("B").queue(jobs(200, 10, b_job, 0.0)),
    ];
    let clusters = vec![cluster("ray", Resources::new(9.0, 0.0, 18.0 * GIB))];
    let outcome = run_cycle(100.0, &plain(), &users, &clusters, None);

    assert_eq!(count(&outcome, "A"), 3);
    assert_eq!(count(&outcome, "B"), 2);
    for entry in &outcome.order {
        assert!((entry.share - 2.0 / 3.0).abs() < 1e-12, "{entry:?}");
    }
    assert_eq!(reason(&outcome, id(103)), Some(&waiting(&["cpu"])));
}

// 3. Weights.
#[test]
fn weight_three_gets_three_times_the_share_and_keeps_it_under_churn() {
    let one = cpus(1.0);
    let mut sim = Sim::new(
        cpus(40.0),
        vec![
            user("A").weight(1.0).queue(jobs(1_000, 40, one, 0.0)),
            user("B").weight(3.0).queue(jobs(2_000, 40, one, 0.0)),
        ],
    );
    sim.cycle(10.0, &plain(), 1e9);
    assert!(
        (9..=11).contains(&sim.running("A")),
        "A {}",
        sim.running("A")
    );
    assert!(
        (29..=31).contains(&sim.running("B")),
        "B {}",
        sim.running("B")
    );

    let mut next = 10_000;
    for round in 0..12u32 {
        // Jobs finish in varying numbers and new ones replace them.
        for _ in 0..(round % 4 + 1) {
            sim.finish_one("A");
        }
        for _ in 0..(round % 5 + 2) {
            sim.finish_one("B");
        }
        for name in ["A", "B"] {
            let u = sim.user_mut(name);
            let fresh = jobs(next, 5, one, 100.0 + f64::from(round));
            next += 5;
            u.view.queue.extend(fresh);
        }
        sim.cycle(100.0 + f64::from(round), &plain(), 1e9);
        assert_eq!(sim.running("A") + sim.running("B"), 40);
        assert!(
            (9..=11).contains(&sim.running("A")),
            "round {round}: A {}",
            sim.running("A")
        );
    }
}

// 4. Big jobs are not starved by small ones.
#[test]
fn every_user_gets_a_job_whatever_its_job_size() {
    let users = vec![
        user("A").queue(jobs(100, 8, cpus(1.0), 0.0)),
        user("B").queue(jobs(200, 4, cpus(2.0), 0.0)),
        user("C").queue(jobs(300, 2, cpus(4.0), 0.0)),
    ];
    let outcome = run_cycle(10.0, &plain(), &users, &[cluster("ray", cpus(8.0))], None);
    assert_eq!(
        granted(&outcome),
        vec![
            ("A", id(100)),
            ("B", id(200)),
            ("C", id(300)),
            ("A", id(101))
        ]
    );
}

// 5. Pause.
#[test]
fn paused_user_gets_nothing_and_reaches_its_share_after_resume() {
    let one = cpus(1.0);
    let mut sim = Sim::new(
        cpus(10.0),
        vec![
            user("A").queue(jobs(100, 10, one, 0.0)),
            user("B").queue(jobs(200, 10, one, 0.0)),
            user("C").paused().queue(jobs(300, 10, one, 0.0)),
        ],
    );
    let outcome = sim.cycle(10.0, &plain(), 1e9);
    assert_eq!(
        (
            count(&outcome, "A"),
            count(&outcome, "B"),
            count(&outcome, "C")
        ),
        (5, 5, 0)
    );
    assert_eq!(reason(&outcome, id(300)), Some(&PendingReason::Paused));
    assert_eq!(reason(&outcome, id(309)), Some(&PendingReason::Paused));

    sim.user_mut("C").view.paused = false;
    for round in 0..5u32 {
        for name in ["A", "B", "C"] {
            sim.finish_one(name);
        }
        sim.cycle(20.0 + f64::from(round), &plain(), 1e9);
    }
    let counts = [sim.running("A"), sim.running("B"), sim.running("C")];
    assert_eq!(counts.iter().sum::<usize>(), 10);
    assert!(sim.running("C") >= 3, "{counts:?}");
    let (max, min) = (counts.iter().max().unwrap(), counts.iter().min().unwrap());
    assert!(max - min <= 1, "{counts:?}");
}

// 6. Granted-but-unconfirmed jobs count against free capacity.
#[test]
fn outstanding_jobs_not_yet_reported_by_ray_keep_capacity_taken() {
    let users = vec![user("A").queue(jobs(100, 3, cpus(1.0), 0.0))];
    let clusters = vec![with_outstanding(cluster("ray", cpus(4.0)), cpus(4.0))];
    let outcome = run_cycle(10.0, &plain(), &users, &clusters, None);
    assert!(outcome.grants.is_empty());
    assert_eq!(reason(&outcome, id(100)), Some(&waiting(&["cpu"])));
}

// 7. A job larger than every cluster.
#[test]
fn job_larger_than_every_cluster_blocks_nobody() {
    let users = vec![
        user("A").queue(vec![job(1, cpus(16.0), 0.0), job(2, cpus(1.0), 1.0)]),
        user("B").queue(jobs(10, 2, cpus(1.0), 2.0)),
    ];
    let clusters = vec![cluster("x", cpus(8.0)), cluster("y", cpus(4.0))];
    let outcome = run_cycle(10.0, &plain(), &users, &clusters, None);
    assert_eq!(
        granted(&outcome),
        vec![("A", id(2)), ("B", id(10)), ("B", id(11))]
    );
    assert_eq!(
        reason(&outcome, id(1)),
        Some(&PendingReason::NoClusterLargeEnough)
    );
    assert_eq!(outcome.stopped_for, None);
    assert!(!fits_some_cluster(&cpus(16.0), &clusters));
    assert!(fits_some_cluster(&cpus(8.0), &clusters));
}

/// Permanent reasons go to the jobs the cycle steps over to reach a user's
/// effective head; jobs behind that head are not looked at (DESIGN §2, "Cost").
#[test]
fn only_jobs_stepped_over_get_a_permanent_reason() {
    let users = vec![user("A").queue(vec![
        job(1, cpus(16.0), 0.0),
        job(2, cpus(2.0), 1.0),
        job(3, cpus(16.0), 2.0),
        job(4, cpus(2.0), 3.0),
    ])];
    // Room for one 2-CPU job: job 2 is granted, job 3 is stepped over, job 4
    // is the effective head and waits.
    let clusters = vec![ClusterView {
        used_reported: cpus(5.0),
        ..cluster("x", cpus(8.0))
    }];
    let outcome = run_cycle(10.0, &plain(), &users, &clusters, None);
    assert_eq!(granted(&outcome), vec![("A", id(2))]);
    assert_eq!(
        reason(&outcome, id(1)),
        Some(&PendingReason::NoClusterLargeEnough)
    );
    assert_eq!(
        reason(&outcome, id(3)),
        Some(&PendingReason::NoClusterLargeEnough)
    );
    assert_eq!(reason(&outcome, id(4)), Some(&waiting(&["cpu"])));

    // Nothing granted: the head (job 2) waits; job 3 behind it is not judged.
    let clusters = vec![ClusterView {
        used_reported: cpus(8.0),
        ..cluster("x", cpus(8.0))
    }];
    let outcome = run_cycle(10.0, &plain(), &users, &clusters, None);
    assert!(outcome.grants.is_empty());
    assert_eq!(reason(&outcome, id(2)), Some(&waiting(&["cpu"])));
    assert_eq!(reason(&outcome, id(3)), None);
    assert_eq!(
        outcome
            .pending
            .iter()
            .map(|(id, _)| *id)
            .collect::<Vec<_>>(),
        vec![id(1), id(2)]
    );
}

/// Simulates test 8: A streams 1-CPU jobs of 10 s on 4 CPUs, finishing
/// staggered so that 4 CPUs are never free at once unless dispatch pauses;
/// B's 4-CPU job was submitted at 0. Returns when B's job was granted.
fn starvation_scenario(guard: Seconds, horizon: Seconds) -> Option<Seconds> {
    let config = PolicyConfig {
        usage_half_life: 0.0,
        starvation_guard: guard,
        starvation_runs: 0.0,
        ..plain()
    };
    let one = cpus(1.0);
    let mut sim = Sim::new(
        cpus(4.0),
        vec![user("A"), user("B").queue(vec![job(1, cpus(4.0), 0.0)])],
    );
    sim.user_mut("A").running = [1.0, 3.0, 6.0, 8.0]
        .iter()
        .enumerate()
        .map(|(i, end)| (id(100 + i as u128), one, *end))
        .collect();
    let mut next = 1_000;
    let mut t = 0.0;
    while t <= horizon {
        t += 1.0;
        sim.finish_until(t);
        let a = sim.user_mut("A");
        while a.view.queue.len() < 8 {
            a.view.queue.push(job(next, one, t));
            next += 1;
        }
        let outcome = sim.cycle(t, &config, 10.0);
        if outcome.grants.iter().any(|g| g.job_id == id(1)) {
            return Some(t);
        }
        if t > guard && sim.running("B") == 0 && !outcome.grants.is_empty() {
            panic!("granted A at {t} while B starves: {outcome:?}");
        }
    }
    None
}

// 8. Starvation guard.
#[test]
fn starvation_guard_lets_a_big_job_in_within_guard_plus_one_runtime() {
    let at = starvation_scenario(60.0, 500.0).expect("B's job was never granted");
    assert!(at <= 60.0 + 10.0 + 1.0, "granted at {at}");
    assert!(at > 60.0, "granted at {at}, before the guard could matter");
}

#[test]
fn without_the_starvation_guard_backfill_starves_the_big_job() {
    assert_eq!(starvation_scenario(f64::INFINITY, 500.0), None);
}

#[test]
fn starvation_guard_reserves_and_tells_the_others_why() {
    let config = PolicyConfig {
        usage_half_life: 0.0,
        starvation_guard: 60.0,
        starvation_runs: 0.0,
        ..plain()
    };
    let users = vec![
        user("A").queue(vec![job(1, cpus(4.0), 0.0)]),
        user("B")
            .running(1, cpus(1.0))
            .queue(jobs(10, 2, cpus(1.0), 5.0)),
    ];
    let clusters = vec![with_outstanding(cluster("ray", cpus(4.0)), cpus(1.0))];
    let outcome = run_cycle(100.0, &config, &users, &clusters, None);
    // B's running job has no expected end: A's start time is unknown, and
    // B's jobs (no estimate) would take capacity A needs.
    assert!(outcome.grants.is_empty());
    assert_eq!(outcome.stopped_for, Some(id(1)));
    assert_eq!(
        reason(&outcome, id(1)),
        Some(&PendingReason::Reserved {
            cluster: "ray".to_owned(),
            expected_in: None,
            waited: 100.0
        })
    );
    assert_eq!(
        reason(&outcome, id(10)),
        Some(&PendingReason::BlockedByReservation {
            job_id: id(1),
            until_in: None
        })
    );
    let reservation = outcome.reservation.expect("a reservation for A's job");
    assert_eq!(
        reservation,
        Reservation {
            job_id: id(1),
            user: "A".to_owned(),
            cluster: "ray".to_owned(),
            resources: cpus(4.0),
            expected_start: None,
            since: 100.0,
        }
    );

    // Not yet past the guard: B backfills.
    let outcome = run_cycle(50.0, &config, &users, &clusters, None);
    assert_eq!(granted(&outcome), vec![("B", id(10)), ("B", id(11))]);
    assert_eq!(outcome.stopped_for, None);
}

// 8b. Sticky reservation and EASY backfill.

/// The issue-10 S/L scenario: one 4-CPU cluster, guard 4 s, history off; S
/// queues 40 one-CPU jobs at t = 0 (no estimate, 1.5 s each), L one 4-CPU job
/// at t = 1. Cycles every 0.25 s. Returns when L was granted and the outcome
/// of the first cycle that held a reservation.
fn s_l_scenario() -> (Option<Seconds>, Option<CycleOutcome>) {
    let config = PolicyConfig {
        starvation_guard: 4.0,
        starvation_runs: 0.0,
        ..plain()
    };
    let s_jobs = (0..40).map(|i| job(100 + i, cpus(1.0), 0.0)).collect();
    let mut sim = Sim::new(cpus(4.0), vec![user("S").queue(s_jobs), user("L")]);
    let mut tripped = None;
    for step in 0..=240 {
        let t = f64::from(step) * 0.25;
        sim.finish_until(t);
        if t == 1.0 {
            sim.user_mut("L").view.queue.push(job(1, cpus(4.0), 1.0));
        }
        let outcome = sim.cycle(t, &config, 1.5);
        if tripped.is_none() && outcome.reservation.is_some() {
            tripped = Some(outcome.clone());
        }
        if outcome.grants.iter().any(|g| g.job_id == id(1)) {
            return (Some(t), tripped);
        }
        if t > 6.0 {
            assert!(
                outcome.grants.is_empty(),
                "granted past the reservation at {t}: {outcome:?}"
            );
        }
    }
    (None, tripped)
}

#[test]
fn s_l_wide_job_is_reserved_for_once_backfill_passes_it_over_past_the_guard() {
    let (at, tripped) = s_l_scenario();
    // S takes all 4 CPUs at 0, 1.5, 3 and 4.5 (its head is older, keys tie).
    // L is past the guard from 5.25 but nothing can start until S's jobs end at
    // 6: nobody passes it over, so no reservation yet (until issue 43 §5-§6 it
    // was reserved at 5.25 because S, holding capacity, came after it). At 6 S
    // goes first (the tie) and takes one CPU; its next job would take another
    // while L fits nowhere: L is passed over by backfill and reserved for, and
    // S's jobs (no estimate) wait. L starts when S's one job ends, at 7.5.
    assert_eq!(at, Some(7.5));
    let tripped = tripped.expect("L was reserved for");
    assert_eq!(granted(&tripped), vec![("S", id(116))]);
    assert_eq!(
        tripped.reservation,
        Some(Reservation {
            job_id: id(1),
            user: "L".to_owned(),
            cluster: "ray".to_owned(),
            resources: cpus(4.0),
            expected_start: None,
            since: 6.0,
        })
    );
    assert_eq!(
        reason(&tripped, id(1)),
        Some(&PendingReason::Reserved {
            cluster: "ray".to_owned(),
            expected_in: None,
            waited: 5.0,
        })
    );
    // S's head would delay L: it fits the 3 free CPUs but has no estimate.
    assert_eq!(
        reason(&tripped, id(117)),
        Some(&PendingReason::BlockedByReservation {
            job_id: id(1),
            until_in: None
        })
    );
}

// 8c. Starved means passed over by backfill (issue 43 §5-§6).

/// Two CPUs held by `holder`'s jobs (each `each` CPUs, ending at `ends`), the
/// rest free.
fn held_by(holder: &str, each: f64, ends: &[Seconds]) -> (UserView, ClusterView) {
    let n = ends.len();
    let u = user(holder).running(n as u32, cpus(each));
    let mut c = with_outstanding(cluster("ray", cpus(2.0)), cpus(each * n as f64));
    c.jobs = ends
        .iter()
        .map(|&end| OutstandingJob {
            resources: cpus(each),
            expected_end: Some(end),
        })
        .collect();
    (u, c)
}

#[test]
fn a_head_that_waits_only_for_a_full_cluster_is_not_reserved_for() {
    // The two real-Ray fair-order tests' kind: alice holds both CPUs with
    // one-CPU jobs, bob's one-CPU head has waited 100 s past a 30 s guard. Nothing
    // can start, so nobody passes bob over: no reservation (until issue 43 §5-§6
    // bob was "passed over" because alice, holding capacity, came after him, and
    // the sticky reservation then put him before a user that fell below him).
    let config = PolicyConfig {
        starvation_guard: 30.0,
        starvation_runs: 0.0,
        ..plain()
    };
    let (alice, full) = held_by("alice", 1.0, &[150.0, 160.0]);
    let users = vec![
        alice.queue(vec![job(10, cpus(1.0), 0.0)]),
        user("bob").queue(vec![job(20, cpus(1.0), 0.0)]),
    ];
    let outcome = run_cycle(100.0, &config, &users, std::slice::from_ref(&full), None);
    assert!(outcome.grants.is_empty());
    assert_eq!(outcome.reservation, None);
    assert_eq!(outcome.stopped_for, None);
    assert_eq!(reason(&outcome, id(20)), Some(&waiting(&["cpu"])));
    // A CPU frees: bob, first in order, takes it; still no reservation.
    let (alice, half) = held_by("alice", 1.0, &[160.0]);
    let users = vec![
        alice.queue(vec![job(10, cpus(1.0), 0.0)]),
        user("bob").queue(vec![job(20, cpus(1.0), 0.0)]),
    ];
    let outcome = run_cycle(150.0, &config, &users, &[half], None);
    assert_eq!(granted(&outcome), vec![("bob", id(20))]);
    assert_eq!(outcome.reservation, None);
}

/// Issue 43 §6's kind (the quickstart's 2-CPU head): u41 holds seven 0.25-CPU
/// jobs (ending at 410, 420, …, 470), 0.25 CPU is free, u62's 0.352-CPU head has
/// waited since 0, u41's next 0.25-CPU job (estimate `estimate`) is queued.
fn quickstart_kind(estimate: Option<Seconds>) -> (Vec<UserView>, ClusterView) {
    let ends: Vec<Seconds> = (1..=7).map(|i| 400.0 + 10.0 * f64::from(i)).collect();
    let (u41, c) = held_by("u41", 0.25, &ends);
    let mut next = job(41, cpus(0.25), 1.0);
    next.runtime_estimate = estimate;
    let users = vec![
        u41.queue(vec![next]),
        user("u62").queue(vec![job(62, cpus(0.352), 0.0)]),
    ];
    (users, c)
}

#[test]
fn a_smaller_job_passing_a_starved_head_over_makes_the_reservation_first() {
    let config = PolicyConfig {
        starvation_guard: 300.0,
        starvation_runs: 0.0,
        ..plain()
    };
    // Before the guard, backfill passes u62 over: u41 takes the free 0.25 CPU.
    let (users, c) = quickstart_kind(None);
    let outcome = run_cycle(200.0, &config, &users, std::slice::from_ref(&c), None);
    assert_eq!(granted(&outcome), vec![("u41", id(41))]);
    assert_eq!(outcome.reservation, None);
    // Past the guard the same grant would pass u62 over: u62 is reserved for
    // first. Its 0.352 CPU fits once u41's first job ends (0.5 free at 410), with
    // 0.148 to spare then. u41's job has no estimate, so it may only use that
    // extra, which it does not fit: blocked, and the 0.25 CPU waits 10 s for u62.
    let outcome = run_cycle(400.0, &config, &users, std::slice::from_ref(&c), None);
    let expected = Reservation {
        job_id: id(62),
        user: "u62".to_owned(),
        cluster: "ray".to_owned(),
        resources: cpus(0.352),
        expected_start: Some(410.0),
        since: 400.0,
    };
    assert_eq!(outcome.reservation.as_ref(), Some(&expected));
    assert!(outcome.grants.is_empty(), "{:?}", outcome.grants);
    assert_eq!(outcome.stopped_for, Some(id(62)));
    assert_eq!(
        reason(&outcome, id(62)),
        Some(&PendingReason::Reserved {
            cluster: "ray".to_owned(),
            expected_in: Some(10.0),
            waited: 400.0,
        })
    );
    assert_eq!(
        reason(&outcome, id(41)),
        Some(&PendingReason::BlockedByReservation {
            job_id: id(62),
            until_in: Some(10.0)
        })
    );
    // Work-conserving: a job that ends by 410 does not delay u62 and starts in
    // the free 0.25 CPU beside the reservation.
    let (users, c) = quickstart_kind(Some(5.0));
    let outcome = run_cycle(400.0, &config, &users, &[c], None);
    assert_eq!(granted(&outcome), vec![("u41", id(41))]);
    assert_eq!(outcome.reservation, Some(expected));
}

/// Cluster "ray" of 8 CPUs: 4 CPUs end at 100, 1 CPU at 200; 3 free.
fn easy_cluster() -> ClusterView {
    let mut c = with_outstanding(cluster("ray", cpus(8.0)), cpus(5.0));
    c.jobs = vec![
        OutstandingJob {
            resources: cpus(4.0),
            expected_end: Some(100.0),
        },
        OutstandingJob {
            resources: cpus(1.0),
            expected_end: Some(200.0),
        },
    ];
    c
}

#[test]
fn easy_backfill_admits_jobs_that_end_before_the_shadow_or_fit_the_extra() {
    let config = PolicyConfig {
        starvation_guard: 30.0,
        starvation_runs: 0.0,
        ..plain()
    };
    // W's 6-CPU job waited 50 s and X, which holds the 5 busy CPUs, comes
    // after W in fair-share order: shadow 100 (3 + 4 free), extra 1 CPU.
    let users = vec![
        user("X").running(2, cpus(2.5)),
        user("W").queue(vec![job(1, cpus(6.0), 0.0)]),
        user("A").queue(vec![estimated(job(10, cpus(2.0), 10.0), 500.0)]),
        user("B").queue(vec![job(20, cpus(1.0), 11.0)]),
        user("C").queue(vec![estimated(job(30, cpus(2.0), 12.0), 50.0)]),
    ];
    let outcome = run_cycle(50.0, &config, &users, &[easy_cluster()], None);
    // A (ends at 550) would delay W and needs more than the extra; B has no
    // estimate but fits the 1 extra CPU; C ends at 100, exactly the shadow.
    assert_eq!(granted(&outcome), vec![("B", id(20)), ("C", id(30))]);
    // B and C took the 3 free CPUs: A now waits for capacity, whatever the
    // reservation (a reason describes free capacity as the cycle leaves it).
    assert_eq!(reason(&outcome, id(10)), Some(&waiting(&["cpu"])));
    // Without C, 2 CPUs stay free, which A's 2 CPUs fit: the reservation is what
    // keeps it out.
    let without_c = &users[..4];
    let outcome = run_cycle(50.0, &config, without_c, &[easy_cluster()], None);
    assert_eq!(granted(&outcome), vec![("B", id(20))]);
    assert_eq!(
        reason(&outcome, id(10)),
        Some(&PendingReason::BlockedByReservation {
            job_id: id(1),
            until_in: Some(50.0),
        })
    );
    assert_eq!(
        outcome.reservation,
        Some(Reservation {
            job_id: id(1),
            user: "W".to_owned(),
            cluster: "ray".to_owned(),
            resources: cpus(6.0),
            expected_start: Some(100.0),
            since: 50.0,
        })
    );
    assert_eq!(outcome.stopped_for, Some(id(1)));
}

#[test]
fn the_reservation_sticks_to_its_job_whatever_the_keys_and_ages() {
    let config = PolicyConfig {
        starvation_guard: 30.0,
        starvation_runs: 0.0,
        ..plain()
    };
    let held = Reservation {
        job_id: id(1),
        user: "W".to_owned(),
        cluster: "ray".to_owned(),
        resources: cpus(6.0),
        expected_start: Some(100.0),
        since: 40.0,
    };
    // V's head is older and starved too, and W now has the larger key: the
    // reservation stays with W's job; V waits.
    let users = vec![
        user("W")
            .running(1, cpus(1.0))
            .queue(vec![job(1, cpus(6.0), 5.0)]),
        user("V").queue(vec![job(2, cpus(7.0), 0.0)]),
    ];
    let outcome = run_cycle(50.0, &config, &users, &[easy_cluster()], Some(&held));
    assert!(outcome.grants.is_empty());
    assert_eq!(
        outcome.reservation.as_ref().map(|r| (r.job_id, r.since)),
        Some((id(1), 40.0))
    );
    assert_eq!(reason(&outcome, id(2)), Some(&waiting(&["cpu"])));

    // Once it fits, W's job is granted first, ahead of a smaller key, and
    // the next reservation goes to V.
    let mut roomy = easy_cluster();
    roomy.outstanding = cpus(1.0);
    roomy.jobs.remove(0);
    let users = vec![
        user("W")
            .running(1, cpus(1.0))
            .queue(vec![estimated(job(1, cpus(6.0), 5.0), 50.0)]),
        user("V").queue(vec![job(2, cpus(7.0), 0.0)]),
        user("Y").queue(vec![job(3, cpus(1.0), 45.0)]),
        user("Z").queue(vec![estimated(job(4, cpus(1.0), 46.0), 10.0)]),
    ];
    let outcome = run_cycle(101.0, &config, &users, &[roomy], Some(&held));
    // V's 7 CPUs free up when W's job ends (101 + 50); Y (no estimate) would
    // delay it, Z (ends at 111) does not.
    assert_eq!(granted(&outcome), vec![("W", id(1)), ("Z", id(4))]);
    assert_eq!(
        outcome
            .reservation
            .as_ref()
            .map(|r| (r.job_id, r.expected_start)),
        Some((id(2), Some(151.0)))
    );
    // Z took the last free CPU after Y's turn: Y waits for capacity.
    assert_eq!(reason(&outcome, id(3)), Some(&waiting(&["cpu"])));
}

#[test]
fn a_cancelled_reserved_job_releases_the_reservation() {
    let config = PolicyConfig {
        starvation_guard: 30.0,
        starvation_runs: 0.0,
        ..plain()
    };
    let held = Reservation {
        job_id: id(1),
        user: "W".to_owned(),
        cluster: "ray".to_owned(),
        resources: cpus(6.0),
        expected_start: Some(100.0),
        since: 40.0,
    };
    let users = vec![user("B").queue(vec![job(20, cpus(3.0), 45.0)])];
    let outcome = run_cycle(50.0, &config, &users, &[easy_cluster()], Some(&held));
    assert_eq!(granted(&outcome), vec![("B", id(20))]);
    assert_eq!(outcome.reservation, None);
    assert_eq!(outcome.stopped_for, None);
}

#[test]
fn shadow_walks_expected_ends_and_unknown_ends_come_last() {
    let jobs = [
        OutstandingJob {
            resources: cpus(2.0),
            expected_end: None,
        },
        OutstandingJob {
            resources: cpus(1.0),
            expected_end: Some(30.0),
        },
        OutstandingJob {
            resources: cpus(1.0),
            expected_end: Some(5.0), // overran: counts as now
        },
    ];
    let at = |request: f64| shadow(10.0, &cpus(request), cpus(4.0), cpus(4.0), &jobs);
    assert_eq!(at(1.0).start, Some(10.0));
    assert_eq!(at(1.0).extra, cpus(0.0));
    assert_eq!(at(2.0).start, Some(30.0));
    assert_eq!(at(3.0).start, None);
    assert_eq!(at(3.0).extra, cpus(1.0));
    // Another tenant holds 1 CPU for good: 4 CPUs never free up.
    assert_eq!(
        shadow(10.0, &cpus(4.0), cpus(3.0), cpus(4.0), &jobs).start,
        None
    );
}

#[test]
fn jobs_without_an_estimate_are_released_one_at_a_time() {
    // Issue 43 §6: the quickstart's 2-CPU head full of 0.25-CPU jobs with no
    // estimate, a 0.352-CPU head reserved. Released one at a time (in the given
    // order), two must end: then 0.5 is free and E = 0.5 − 0.352 = 0.148, too small
    // for another 0.25 job. Released together, E was 2 − 0.352 = 1.648 and every
    // 0.25 job passed the reservation as "extra".
    let jobs = [OutstandingJob {
        resources: cpus(0.25),
        expected_end: None,
    }; 8];
    let s = shadow(10.0, &cpus(0.352), cpus(2.0), cpus(2.0), &jobs);
    assert_eq!(s.start, None);
    assert!((s.extra.cpu - 0.148).abs() < 1e-12, "{s:?}");
    // Known ends at one instant are still released together.
    let at_20 = [OutstandingJob {
        resources: cpus(0.25),
        expected_end: Some(20.0),
    }; 8];
    let s = shadow(10.0, &cpus(0.352), cpus(2.0), cpus(2.0), &at_20);
    assert_eq!(s.start, Some(20.0));
    assert!((s.extra.cpu - 1.648).abs() < 1e-12, "{s:?}");
}

// 8c. Age term.
#[test]
fn the_age_term_lets_a_long_waiting_heavy_user_go_first_and_saturates() {
    assert_eq!(age_term(3600.0, 0.5, 7200.0), 0.25);
    assert_eq!(age_term(1e9, 0.5, 7200.0), 0.5);
    assert_eq!(age_term(-1.0, 0.5, 7200.0), 0.0);
    assert_eq!(age_term(100.0, 0.5, 0.0), 0.0);
    let users = vec![
        user("heavy")
            .running(2, cpus(1.0))
            .queue(vec![job(1, cpus(1.0), 0.0)]),
        user("light").queue(vec![job(2, cpus(1.0), 7000.0)]),
    ];
    let clusters = vec![with_outstanding(cluster("ray", cpus(3.0)), cpus(2.0))];
    // Keys without age: heavy 2/3, light 0.
    let outcome = run_cycle(7200.0, &plain(), &users, &clusters, None);
    assert_eq!(granted(&outcome), vec![("light", id(2))]);
    // With a = 1 and M = 7200 s: heavy 2/3 − 1 < light 0 − 200/7200.
    let aged = PolicyConfig {
        age_weight: 1.0,
        max_age: 7200.0,
        ..plain()
    };
    let outcome = run_cycle(7200.0, &aged, &users, &clusters, None);
    assert_eq!(granted(&outcome), vec![("heavy", id(1))]);
}

// 9. Decayed usage.
#[test]
fn recent_heavy_usage_puts_a_user_behind_and_half_life_zero_forgets_it() {
    let users = vec![
        user("heavy")
            .usage(0.5, 90.0)
            .queue(vec![job(1, cpus(1.0), 0.0)]),
        user("light").queue(vec![job(2, cpus(1.0), 5.0)]),
    ];
    let clusters = vec![cluster("ray", cpus(1.0))];
    let with_history = PolicyConfig {
        usage_half_life: 3600.0,
        ..plain()
    };
    let outcome = run_cycle(100.0, &with_history, &users, &clusters, None);
    assert_eq!(granted(&outcome), vec![("light", id(2))]);
    let heavy = outcome.order.iter().find(|o| o.user == "heavy").unwrap();
    assert!(heavy.usage > 0.49 && heavy.usage < 0.5, "{heavy:?}");

    let outcome = run_cycle(100.0, &plain(), &users, &clusters, None);
    assert_eq!(granted(&outcome), vec![("heavy", id(1))]);
}

#[test]
fn decay_usage_halves_per_half_life_and_converges_to_a_held_share() {
    assert!((decay_usage(1.0, 0.0, 0.0, 60.0, 60.0) - 0.5).abs() < 1e-12);
    assert!((decay_usage(1.0, 0.0, 0.0, 120.0, 60.0) - 0.25).abs() < 1e-12);
    let mut h = 0.0;
    for step in 0..100 {
        h = decay_usage(
            h,
            f64::from(step) * 60.0,
            0.3,
            f64::from(step + 1) * 60.0,
            60.0,
        );
    }
    assert!((h - 0.3).abs() < 1e-12, "{h}");
    // Stepping in pieces equals one step.
    let once = decay_usage(0.8, 0.0, 0.2, 90.0, 60.0);
    let twice = decay_usage(
        decay_usage(0.8, 0.0, 0.2, 30.0, 60.0),
        30.0,
        0.2,
        90.0,
        60.0,
    );
    assert!((once - twice).abs() < 1e-12);
    assert_eq!(
        decay_usage(0.7, 0.0, 0.4, 100.0, 0.0),
        0.0,
        "T = 0: history off"
    );
    assert_eq!(
        decay_usage(0.7, 50.0, 0.4, 10.0, 60.0),
        0.7,
        "negative Δt is no time"
    );
    assert_eq!(decay_usage(0.7, 0.0, 0.4, 1e9, f64::INFINITY), 0.7);
}

// 10. Extreme weights on a huge cluster.
#[test]
fn weight_1000_gets_1000_grants_per_grant_of_weight_1_on_a_million_cores() {
    let one = cpus(1.0);
    let users = vec![
        user("heavy")
            .weight(1000.0)
            .limit(10_000)
            .queue(jobs(1_000_000, 2_500, one, 10.0)),
        user("light").weight(1.0).queue(jobs(1, 5, one, 0.0)),
    ];
    let clusters = vec![cluster("ray", cpus(1_000_000.0))];
    let outcome = run_cycle(100_000.0, &plain(), &users, &clusters, None);
    assert_eq!(outcome.grants.len(), 2_505);
    let light_at: Vec<usize> = outcome
        .grants
        .iter()
        .enumerate()
        .filter(|(_, g)| g.user == "light")
        .map(|(i, _)| i)
        .collect();
    // light first (older head at equal key 0), then heavy until its key
    // 1000/10⁶/1000 reaches light's 1/10⁶, the tie goes to light's older head.
    assert_eq!(&light_at[..3], &[0, 1_001, 2_002]);
    assert_eq!(
        &granted(&outcome)[..4],
        &[
            ("light", id(1)),
            ("heavy", id(1_000_000)),
            ("heavy", id(1_000_001)),
            ("heavy", id(1_000_002))
        ]
    );
}

#[test]
fn backfill_off_stops_at_the_first_head_that_does_not_fit() {
    let users = vec![
        user("A").queue(vec![job(1, cpus(4.0), 0.0)]),
        user("B").queue(vec![job(2, cpus(1.0), 1.0)]),
        user("Z").running(2, cpus(1.0)),
    ];
    let clusters = vec![with_outstanding(cluster("ray", cpus(4.0)), cpus(2.0))];

    let outcome = run_cycle(10.0, &plain(), &users, &clusters, None);
    assert_eq!(granted(&outcome), vec![("B", id(2))]);
    assert_eq!(reason(&outcome, id(1)), Some(&waiting(&["cpu"])));

    let strict = PolicyConfig {
        backfill: false,
        ..plain()
    };
    let outcome = run_cycle(10.0, &strict, &users, &clusters, None);
    assert!(outcome.grants.is_empty());
    assert_eq!(outcome.stopped_for, Some(id(1)));
    assert_eq!(reason(&outcome, id(1)), Some(&waiting(&["cpu"])));
    assert_eq!(
        reason(&outcome, id(2)),
        Some(&PendingReason::WaitingBehind { job_id: id(1) })
    );
}

#[test]
fn max_resources_caps_the_allocation_and_an_oversized_job_is_stepped_over() {
    let limit = Resources::new(2.0, 0.0, 8.0 * GIB);
    let users = vec![user("A").max_resources(limit).queue(vec![
        job(1, Resources::new(3.0, 0.0, 0.0), 0.0),
        job(2, Resources::new(1.0, 0.0, GIB), 1.0),
        job(3, Resources::new(1.0, 0.0, GIB), 2.0),
        job(4, Resources::new(1.0, 0.0, GIB), 3.0),
    ])];
    let clusters = [cluster("ray", Resources::new(64.0, 0.0, 256.0 * GIB))];
    let outcome = run_cycle(10.0, &plain(), &users, &clusters, None);
    assert_eq!(granted(&outcome), vec![("A", id(2)), ("A", id(3))]);
    assert_eq!(
        reason(&outcome, id(1)),
        Some(&PendingReason::ExceedsMaxResources)
    );
    assert_eq!(reason(&outcome, id(4)), Some(&PendingReason::MaxResources));
}

#[test]
fn best_fit_picks_the_cluster_left_tightest_and_breaks_ties_by_name() {
    let clusters = vec![
        cluster("big", cpus(16.0)),
        with_outstanding(cluster("small", cpus(4.0)), cpus(2.0)),
    ];
    let users = vec![user("A").queue(vec![job(1, cpus(2.0), 0.0), job(2, cpus(2.0), 1.0)])];
    let outcome = run_cycle(10.0, &plain(), &users, &clusters, None);
    let placed: Vec<&str> = outcome.grants.iter().map(|g| g.cluster.as_str()).collect();
    assert_eq!(placed, vec!["small", "big"]);
    assert_eq!(
        best_fit(&cpus(2.0), &clusters).map(|c| c.name.as_str()),
        Some("small")
    );
    assert_eq!(
        best_fit(&cpus(3.0), &clusters).map(|c| c.name.as_str()),
        Some("big")
    );
    assert!(best_fit(&cpus(17.0), &clusters).is_none());

    let twins = vec![cluster("b", cpus(4.0)), cluster("a", cpus(4.0))];
    assert_eq!(
        best_fit(&cpus(1.0), &twins).map(|c| c.name.as_str()),
        Some("a")
    );
}

#[test]
fn best_fit_weighs_each_resource_by_the_cluster_size() {
    // A CPU-only job goes where it leaves less spare by fraction, which keeps
    // the GPUs free for GPU jobs.
    let clusters = vec![
        cluster("cpu-only", Resources::new(64.0, 0.0, 256.0 * GIB)),
        cluster("gpu", Resources::new(16.0, 4.0, 64.0 * GIB)),
    ];
    let small = Resources::new(1.0, 0.0, GIB);
    // Leftover fractions: cpu-only 63/64 + 255/256, gpu 15/16 + 1 + 63/64.
    assert_eq!(
        best_fit(&small, &clusters).map(|c| c.name.as_str()),
        Some("cpu-only")
    );
    let gpu_job = Resources::new(1.0, 1.0, GIB);
    assert_eq!(
        best_fit(&gpu_job, &clusters).map(|c| c.name.as_str()),
        Some("gpu")
    );
}

#[test]
fn unhealthy_cluster_is_never_granted_to_nor_counted_in_shares() {
    let clusters = vec![
        unhealthy(cluster("a-down", cpus(100.0))),
        cluster("b-up", cpus(2.0)),
    ];
    let users = vec![user("A").queue(jobs(1, 5, cpus(1.0), 0.0))];
    let outcome = run_cycle(10.0, &plain(), &users, &clusters, None);
    assert_eq!(outcome.grants.len(), 2);
    assert!(outcome.grants.iter().all(|g| g.cluster == "b-up"));
    assert_eq!(outcome.order[0].share, 1.0);
    assert_eq!(best_fit(&cpus(1.0), &clusters[..1]), None);
}

#[test]
fn no_healthy_cluster_grants_nothing_and_says_so() {
    let clusters = [unhealthy(cluster("ray", cpus(8.0)))];
    let users = vec![
        user("A").queue(jobs(1, 2, cpus(1.0), 0.0)),
        user("P").paused().queue(jobs(10, 1, cpus(1.0), 0.0)),
    ];
    let none: Vec<ClusterView> = Vec::new();
    for clusters in [&clusters[..], &none[..]] {
        let outcome = run_cycle(10.0, &service_defaults(), &users, clusters, None);
        assert!(outcome.grants.is_empty());
        assert_eq!(
            reason(&outcome, id(1)),
            Some(&PendingReason::NoHealthyCluster)
        );
        assert_eq!(reason(&outcome, id(2)), None);
        assert_eq!(reason(&outcome, id(10)), Some(&PendingReason::Paused));
        assert_eq!(outcome.order.len(), 2);
    }
}

fn mixed_scenario() -> (Vec<UserView>, Vec<ClusterView>) {
    let users = vec![
        user("carol")
            .weight(2.0)
            .queue(jobs(300, 6, Resources::new(2.0, 0.0, 4.0 * GIB), 3.0)),
        user("alice")
            .usage(0.2, 0.0)
            .queue(jobs(100, 6, cpus(1.0), 1.0)),
        user("bob")
            .running(2, cpus(1.0))
            .queue(jobs(200, 6, Resources::new(1.0, 1.0, 0.0), 2.0)),
        user("dave").paused().queue(jobs(400, 2, cpus(1.0), 0.0)),
        user("erin")
            .limit(1)
            .queue(vec![job(500, cpus(64.0), 0.0), job(501, cpus(1.0), 0.5)]),
    ];
    let clusters = vec![
        with_outstanding(
            cluster("west", Resources::new(8.0, 2.0, 32.0 * GIB)),
            cpus(2.0),
        ),
        cluster("east", Resources::new(6.0, 0.0, 16.0 * GIB)),
        unhealthy(cluster("north", cpus(128.0))),
    ];
    (users, clusters)
}

#[test]
fn outcome_does_not_depend_on_the_order_of_users_or_clusters() {
    let (users, clusters) = mixed_scenario();
    let config = service_defaults();
    let base = run_cycle(1000.0, &config, &users, &clusters, None);
    assert!(!base.grants.is_empty());
    assert_eq!(base, run_cycle(1000.0, &config, &users, &clusters, None));
    for shift in 1..users.len() {
        let mut u = users.clone();
        u.rotate_left(shift);
        let mut c = clusters.clone();
        c.rotate_left(shift % clusters.len());
        c.reverse();
        assert_eq!(
            base,
            run_cycle(1000.0, &config, &u, &c, None),
            "shift {shift}"
        );
    }
}

#[test]
fn order_lists_users_with_queued_jobs_by_key_after_the_cycle() {
    let (users, clusters) = mixed_scenario();
    let outcome = run_cycle(1000.0, &service_defaults(), &users, &clusters, None);
    let names: Vec<&str> = outcome.order.iter().map(|o| o.user.as_str()).collect();
    assert_eq!(names.len(), 5);
    let keys: Vec<f64> = outcome.order.iter().map(|o| quantize_key(o.key)).collect();
    assert!(keys.windows(2).all(|w| w[0] <= w[1]), "{:?}", outcome.order);
    // erin's 64-CPU job never blocks her 1-CPU one.
    assert_eq!(
        reason(&outcome, id(500)),
        Some(&PendingReason::NoClusterLargeEnough)
    );
    assert!(outcome.grants.iter().any(|g| g.job_id == id(501)));
    assert_eq!(count(&outcome, "dave"), 0);
}

#[test]
fn invalid_weight_is_served_last_without_panicking() {
    let users = vec![
        user("bad").weight(0.0).queue(jobs(1, 2, cpus(1.0), 0.0)),
        user("nan")
            .weight(f64::NAN)
            .queue(jobs(10, 2, cpus(1.0), 0.0)),
        user("ok").queue(jobs(20, 2, cpus(1.0), 5.0)),
    ];
    let outcome = run_cycle(10.0, &plain(), &users, &[cluster("ray", cpus(3.0))], None);
    assert_eq!(
        granted(&outcome),
        vec![("ok", id(20)), ("ok", id(21)), ("bad", id(1))]
    );
}

#[test]
fn fits_within_forgives_rounding_noise_only() {
    let sum = Resources::new(0.1, 0.0, 0.0) + Resources::new(0.2, 0.0, 0.0);
    assert!(sum.fits_within(&Resources::new(0.3, 0.0, 0.0)));
    assert!(!Resources::new(0.31, 0.0, 0.0).fits_within(&Resources::new(0.3, 0.0, 0.0)));
    assert!(!cpus(1.0).fits_within(&Resources::ZERO));
    assert!(Resources::ZERO.fits_within(&Resources::ZERO));
    assert!(!Resources::new(f64::NAN, 0.0, 0.0).fits_within(&cpus(10.0)));
    // Ten 0.1-core jobs fill one core exactly, despite the rounding of the running sum.
    let users = vec![user("A").queue(jobs(1, 11, cpus(0.1), 0.0))];
    let outcome = run_cycle(1.0, &plain(), &users, &[cluster("ray", cpus(1.0))], None);
    assert_eq!(outcome.grants.len(), 10);
}

#[test]
fn free_capacity_takes_the_larger_of_reported_and_outstanding() {
    let mut c = cluster("ray", Resources::new(8.0, 2.0, 16.0 * GIB));
    c.used_reported = Resources::new(3.0, 2.0, 4.0 * GIB);
    c.outstanding = Resources::new(5.0, 1.0, 20.0 * GIB);
    assert_eq!(c.free(), Resources::new(3.0, 0.0, 0.0));
    assert_eq!(
        Resources::new(1.0, 2.0, 3.0).saturating_sub(Resources::new(2.0, 1.0, 3.0)),
        Resources::new(0.0, 1.0, 0.0)
    );
}

#[test]
fn dominant_share_is_the_largest_fraction_over_resources_with_capacity() {
    let capacity = Resources::new(9.0, 0.0, 18.0 * GIB);
    assert_eq!(
        dominant_share(&Resources::new(3.0, 0.0, 2.0 * GIB), &capacity),
        1.0 / 3.0
    );
    assert_eq!(
        dominant_share(&Resources::new(1.0, 0.0, 9.0 * GIB), &capacity),
        0.5
    );
    // No GPU capacity: a GPU allocation does not count (nor divide by zero).
    assert_eq!(
        dominant_share(&Resources::new(0.0, 4.0, 0.0), &capacity),
        0.0
    );
    assert_eq!(dominant_share(&cpus(4.0), &Resources::ZERO), 0.0);
}

#[test]
fn quantized_keys_merge_rounding_noise_and_keep_real_differences() {
    assert_eq!(quantize_key(0.1 + 0.2), quantize_key(0.3));
    assert_eq!(quantize_key(-0.0).to_bits(), 0.0f64.to_bits());
    assert_eq!(quantize_key(f64::NAN), f64::INFINITY);
    // Weight 1000 on 10⁶ cores: one grant is still a visible step.
    let k = |n: f64| quantize_key(fair_share_key(n / 1e6, 0.0, 1000.0));
    assert!(k(999.0) < k(1000.0));
    assert!(k(1000.0) < k(1001.0));
    // Monotone on a sweep.
    let xs: Vec<f64> = (0..2000).map(|i| f64::from(i) * 1e-7 + 1e-3).collect();
    assert!(xs
        .windows(2)
        .all(|w| quantize_key(w[0]) <= quantize_key(w[1])));
}

#[test]
fn every_pending_reason_reads_as_a_sentence() {
    let reasons = [
        PendingReason::Paused,
        PendingReason::MaxRunningJobs { limit: 3 },
        PendingReason::MaxResources,
        PendingReason::ExceedsMaxResources,
        PendingReason::NoClusterLargeEnough,
        PendingReason::NoHealthyCluster,
        waiting(&["cpu"]),
        PendingReason::Reserved {
            cluster: "ray".to_owned(),
            expected_in: Some(12.0),
            waited: 301.4,
        },
        PendingReason::BlockedByReservation {
            job_id: id(7),
            until_in: Some(12.0),
        },
        PendingReason::WaitingBehind { job_id: id(7) },
    ];
    for r in &reasons {
        let text = r.to_string();
        assert!(text.len() > 20 && !text.ends_with('.'), "{text}");
    }
    assert!(reasons[1].to_string().contains('3'));
    assert!(reasons[7].to_string().contains("301 s"));
    assert!(reasons[8].to_string().contains(&id(7).to_string()));
}

#[test]
fn a_busy_cycle_of_100_users_and_10000_jobs_fills_the_clusters() {
    let users: Vec<UserView> = (0..100u32)
        .map(|u| {
            user(&format!("user{u:03}"))
                .weight(f64::from(u % 4 + 1))
                .queue(jobs(
                    u128::from(u) * 1_000,
                    100,
                    cpus(f64::from(u % 3 + 1)),
                    f64::from(u),
                ))
        })
        .collect();
    let clusters: Vec<ClusterView> = (0..4)
        .map(|i| cluster(&format!("ray{i}"), cpus(500.0)))
        .collect();
    let outcome = run_cycle(1000.0, &service_defaults(), &users, &clusters, None);
    // Its speed is measured by `cargo bench --bench policy`, not here.
    assert!(outcome.grants.len() >= 900, "{}", outcome.grants.len());
}

#[test]
fn bytes_fit_exactly_and_cores_within_rounding_noise() {
    let cluster = Resources::new(0.3, 1.0, 64e9);
    // 0.1 + 0.2 cores is 0.30000000000000004: rounding noise, it fits.
    assert!(Resources::new(0.1 + 0.2, 0.0, 0.0).fits_within(&cluster));
    // One byte over is over (it was let through by the relative tolerance: up to 64
    // bytes on 64 GB).
    assert!(Resources::new(0.0, 0.0, 64e9).fits_within(&cluster));
    assert!(!Resources::new(0.0, 0.0, 64e9 + 1.0).fits_within(&cluster));
    assert!(!Resources::new(0.0, 0.0, 64e9 + 64.0).fits_within(&cluster));
}

#[test]
fn the_running_limit_reason_counts_its_jobs_in_words() {
    let one = PendingReason::MaxRunningJobs { limit: 1 }.to_string();
    assert_eq!(
        one,
        "the user already has 1 job dispatched or running, its limit (max_running_jobs)"
    );
    let three = PendingReason::MaxRunningJobs { limit: 3 }.to_string();
    assert!(
        three.starts_with("the user already has 3 jobs dispatched"),
        "{three}"
    );
}

// ----- custom resources (issue 29) --------------------------------------------

/// `cpu` cores and `qpu` units of the custom resource `QPU`.
fn cpu_qpu(cpu: f64, qpu: f64) -> Resources {
    let slot = custom::slot("QPU").expect("QPU is a valid custom name");
    let mut r = cpus(cpu);
    r.custom.set(slot, qpu);
    r
}

/// DRF with a custom resource as the dominant one, worked by hand. One cluster of
/// 10 cores and 2 QPUs. A's jobs each take 1 core and 1 QPU (dominant share 1/2 per
/// job, QPU), B's 1 core (1/10 per job). A goes first (older head at equal keys 0):
/// A = 0.5. B then takes 5 jobs (0.1 … 0.5); at 0.5 each A's older head wins again:
/// A = 1.0 (both QPUs); B takes the last 3 cores (0.8). A's third job lacks both
/// cores and QPU, B's next lacks cores.
#[test]
fn drf_counts_a_custom_resource_as_the_dominant_one() {
    let users = vec![
        user("a").queue(jobs(1, 3, cpu_qpu(1.0, 1.0), 0.0)),
        user("b").queue(jobs(100, 10, cpus(1.0), 1.0)),
    ];
    let clusters = vec![cluster("c", cpu_qpu(10.0, 2.0))];
    let out = run_cycle(10.0, &plain(), &users, &clusters, None);
    let b = |n: u128| ("b", id(n));
    assert_eq!(
        granted(&out),
        vec![
            ("a", id(1)),
            b(100),
            b(101),
            b(102),
            b(103),
            b(104),
            ("a", id(2)),
            b(105),
            b(106),
            b(107),
        ]
    );
    assert_eq!(reason(&out, id(3)), Some(&waiting(&["cpu", "QPU"])));
    assert_eq!(reason(&out, id(108)), Some(&waiting(&["cpu"])));
    assert_eq!(
        reason(&out, id(3)).map(ToString::to_string).as_deref(),
        Some("waiting for enough free capacity on a cluster (short of cpu, QPU)")
    );
}

/// A job asking a custom resource no healthy cluster has never blocks anyone: it is
/// too large for every cluster, and the user's next job runs.
#[test]
fn a_custom_resource_no_cluster_has_is_never_granted() {
    let users = vec![user("a").queue(vec![job(1, cpu_qpu(1.0, 1.0), 0.0), job(2, cpus(1.0), 1.0)])];
    let clusters = vec![cluster("c", cpus(4.0))];
    let out = run_cycle(10.0, &plain(), &users, &clusters, None);
    assert_eq!(granted(&out), vec![("a", id(2))]);
    assert_eq!(
        reason(&out, id(1)),
        Some(&PendingReason::NoClusterLargeEnough)
    );
    assert!(!fits_some_cluster(&cpu_qpu(1.0, 1.0), &clusters));
    assert_eq!(
        cpu_qpu(1.0, 1.0).first_short(&cpus(4.0)).as_deref(),
        Some("QPU")
    );
}

/// Best fit sends a QPU job to the cluster that has QPUs, and a cores-only job to
/// the tighter of the two, the QPU cluster's spare QPUs counting as room left.
#[test]
fn best_fit_counts_custom_capacity() {
    let clusters = vec![
        cluster("plain", cpus(4.0)),
        cluster("quantum", cpu_qpu(4.0, 2.0)),
    ];
    assert_eq!(
        best_fit(&cpu_qpu(1.0, 1.0), &clusters).map(|c| c.name.as_str()),
        Some("quantum")
    );
    // plain leaves 3/4, quantum 3/4 + 2/2.
    assert_eq!(
        best_fit(&cpus(1.0), &clusters).map(|c| c.name.as_str()),
        Some("plain")
    );
}

/// What a waiting job lacks: what no cluster has enough of; when each cluster
/// lacks something else, everything some cluster lacks.
#[test]
fn short_of_names_what_no_cluster_has_free() {
    let need = cpu_qpu(2.0, 1.0);
    assert_eq!(short_of(&need, &[cpu_qpu(1.0, 0.0)]), vec!["cpu", "QPU"]);
    assert_eq!(
        short_of(&need, &[cpu_qpu(1.0, 1.0), cpu_qpu(4.0, 0.0)]),
        vec!["cpu", "QPU"]
    );
    assert_eq!(
        short_of(&need, &[cpu_qpu(4.0, 0.0), cpu_qpu(8.0, 0.5)]),
        vec!["QPU"]
    );
    assert!(short_of(&need, &[cpu_qpu(2.0, 1.0)]).is_empty());
    assert!(short_of(&need, &[]).is_empty());
    let wide = Resources::new(1.0, 1.0, GIB);
    assert_eq!(
        short_of(&wide, &[Resources::new(2.0, 0.0, 0.5 * GIB)]),
        vec!["gpu", "memory"]
    );
}

/// `cores` cores and `sessions` of the license "session".
fn cpu_session(cpu: f64, sessions: f64) -> Resources {
    let slot = custom::slot("session").expect("session is a valid custom name");
    let mut r = cpus(cpu);
    r.custom.set(slot, sessions);
    r
}

/// The license "session" with `count` seats.
fn sessions(count: f64) -> PolicyConfig {
    let mut licenses = Custom::EMPTY;
    licenses.set(
        custom::slot("session").expect("session is a valid custom name"),
        count,
    );
    PolicyConfig {
        licenses,
        ..plain()
    }
}

/// A license shared by two clusters, worked by hand. Two clusters of 4 cores (Ray
/// reports no "session"), the license "session" with 2 seats for both. A and B each
/// queue 1-core jobs holding a session, C 1-core jobs without. Capacity is 8 cores
/// and 2 seats (once, not per cluster), so a session job's dominant share is 1/2:
/// A, B, C, C, C are granted (C stays below 1/2 with 3 cores of 8); then no seat is
/// left anywhere (two clusters with 2 seats each would have run 4), and A's and B's
/// next jobs wait short of a session while 3 cores are free.
#[test]
fn a_license_shared_by_two_clusters() {
    let config = sessions(2.0);
    let users = vec![
        user("a").queue(jobs(1, 3, cpu_session(1.0, 1.0), 0.0)),
        user("b").queue(jobs(100, 3, cpu_session(1.0, 1.0), 0.0)),
        user("c").queue(jobs(200, 3, cpus(1.0), 0.0)),
    ];
    let clusters = vec![cluster("one", cpus(4.0)), cluster("two", cpus(4.0))];
    let out = run_cycle(10.0, &config, &users, &clusters, None);
    assert_eq!(
        granted(&out),
        vec![
            ("a", id(1)),
            ("b", id(100)),
            ("c", id(200)),
            ("c", id(201)),
            ("c", id(202))
        ]
    );
    assert_eq!(reason(&out, id(2)), Some(&waiting(&["session"])));
    assert_eq!(reason(&out, id(101)), Some(&waiting(&["session"])));
    let share = |u: &str| out.order.iter().find(|o| o.user == u).map(|o| o.share);
    assert_eq!(share("a"), Some(0.5));
    assert_eq!(share("c"), Some(3.0 / 8.0));
    assert_eq!(
        out,
        super::oracle::run_cycle(10.0, &config, &users, &clusters, None)
    );

    // A seat held by a job on a cluster that is down still counts: one seat left.
    let clusters = vec![
        cluster("one", cpus(4.0)),
        unhealthy(with_outstanding(
            cluster("two", cpus(4.0)),
            cpu_session(1.0, 1.0),
        )),
    ];
    let out = run_cycle(10.0, &config, &users, &clusters, None);
    assert_eq!(count(&out, "a") + count(&out, "b"), 1);
    assert_eq!(
        out,
        super::oracle::run_cycle(10.0, &config, &users, &clusters, None)
    );

    // A job asking more seats than the license has can never run.
    let users = vec![user("a").queue(vec![job(1, cpu_session(1.0, 3.0), 0.0)])];
    let clusters = vec![cluster("one", cpus(4.0))];
    let out = run_cycle(10.0, &config, &users, &clusters, None);
    assert_eq!(
        reason(&out, id(1)),
        Some(&PendingReason::NoClusterLargeEnough)
    );
}
mod group_tests;
mod pool_tests;
