//! Pools (issue 30): capacity a runner outside this service drives. A job naming a
//! pool goes there and nowhere else; every other job never goes there; fair share
//! spans clusters and pools alike. Exact grants worked by hand.

use super::*;

/// `n` of the custom resource "clusters" (a pool's cluster slots).
fn slots(n: f64) -> Resources {
    let slot = custom::slot("clusters").expect("a valid custom name");
    let mut r = Resources::ZERO;
    r.custom.set(slot, n);
    r
}

fn pool(name: &str, total: Resources) -> ClusterView {
    ClusterView {
        pool: true,
        ..cluster(name, total)
    }
}

fn in_pool(mut job: QueuedJob, pool: &str) -> QueuedJob {
    job.pool = Some(pool.to_owned());
    job
}

/// A pool `k8s` of 2 cluster slots beside a Ray cluster `ray` of 4 cores; capacity 4
/// cores and 2 slots, so one slot is a dominant share of 1/2. A queues two 1-slot
/// jobs for the pool, then two 1-core jobs; B four 1-core jobs. By hand: A and B tie
/// at 0, A first (name): its slot job to k8s (A 1/2). B (0) twice to ray (B 1/4, then
/// 1/2). A and B tie at 1/2, A's head is older: its second slot job to k8s (A 1). B
/// (1/2) twice to ray (3/4, 1): ray is full and A's 1-core job waits for cores. A's
/// share from the pool counts against it on the Ray cluster: B holds all 4 cores.
#[test]
fn a_pool_takes_only_its_jobs_and_fair_share_spans_it() {
    let users = vec![
        user("a").queue(vec![
            in_pool(job(1, slots(1.0), 0.0), "k8s"),
            in_pool(job(2, slots(1.0), 1.0), "k8s"),
            job(3, cpus(1.0), 2.0),
            job(4, cpus(1.0), 3.0),
        ]),
        user("b").queue(jobs(100, 4, cpus(1.0), 0.5)),
    ];
    let clusters = vec![cluster("ray", cpus(4.0)), pool("k8s", slots(2.0))];
    let out = run_cycle(10.0, &plain(), &users, &clusters, None);
    let placed: Vec<(&str, JobId, &str)> = out
        .grants
        .iter()
        .map(|g| (g.user.as_str(), g.job_id, g.cluster.as_str()))
        .collect();
    assert_eq!(
        placed,
        vec![
            ("a", id(1), "k8s"),
            ("b", id(100), "ray"),
            ("b", id(101), "ray"),
            ("a", id(2), "k8s"),
            ("b", id(102), "ray"),
            ("b", id(103), "ray"),
        ]
    );
    assert_eq!(reason(&out, id(3)), Some(&waiting(&["cpu"])));
}

/// A job that names no pool never goes to one, even when only the pool has room;
/// a job naming a pool that does not exist, or one too large for its pool, can
/// never run and blocks nobody.
#[test]
fn jobs_without_a_pool_never_go_to_one_and_a_missing_pool_is_no_place() {
    let users = vec![user("a").queue(vec![
        in_pool(job(1, cpus(1.0), 0.0), "gone"),
        in_pool(job(2, cpus(9.0), 1.0), "p"),
        job(3, cpus(1.0), 2.0),
        job(4, cpus(1.0), 3.0),
    ])];
    let clusters = vec![cluster("ray", cpus(1.0)), pool("p", cpus(8.0))];
    let out = run_cycle(10.0, &plain(), &users, &clusters, None);
    let placed: Vec<(JobId, &str)> = out
        .grants
        .iter()
        .map(|g| (g.job_id, g.cluster.as_str()))
        .collect();
    assert_eq!(placed, vec![(id(3), "ray")]);
    assert_eq!(
        reason(&out, id(1)),
        Some(&PendingReason::NoClusterLargeEnough)
    );
    assert_eq!(
        reason(&out, id(2)),
        Some(&PendingReason::NoClusterLargeEnough)
    );
    assert_eq!(reason(&out, id(4)), Some(&waiting(&["cpu"])));
}

/// The ledger keeps pools between cycles: a pool declared with `set_pool` takes
/// its jobs; one ending frees the slot for the next.
#[test]
fn the_ledger_places_jobs_on_a_pool_across_cycles() {
    let mut ledger = Ledger::new(plain(), UserSettings::default());
    ledger.set_pool(0.0, "k8s");
    ledger.report_cluster(0.0, "k8s", true, slots(1.0), Resources::ZERO, |_| true);
    ledger.report_cluster(0.0, "ray", true, cpus(2.0), Resources::ZERO, |_| true);
    for j in [
        in_pool(job(1, slots(1.0), 0.0), "k8s"),
        in_pool(job(2, slots(1.0), 1.0), "k8s"),
    ] {
        ledger.push_queued(0.0, "a", j);
    }
    let first = ledger.cycle(1.0);
    assert_eq!(first.grants.len(), 1);
    assert_eq!(
        (first.grants[0].job_id, first.grants[0].cluster.as_str()),
        (id(1), "k8s")
    );
    assert!(ledger.cycle(2.0).grants.is_empty(), "one slot");
    assert!(ledger.end(3.0, id(1)));
    let third = ledger.cycle(3.0);
    assert_eq!(
        (third.grants[0].job_id, third.grants[0].cluster.as_str()),
        (id(2), "k8s")
    );
}
