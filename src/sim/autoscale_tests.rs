//! Autoscaled clusters in the simulator (issue 44, part 5): tiny traces with schedules
//! and node lives computed by hand, the report's figures, and a property test of the
//! model's invariants on random traces and clusters.

use proptest::prelude::*;

use super::report::Report;
use super::simulate::{simulate, Autoscale, NodeType, SimConfig, SimOutcome, SimPolicy};
use super::swf::TraceJob;

fn job(number: u64, submit: f64, run: f64, cpus: u32, user: &str) -> TraceJob {
    TraceJob::new(number, submit, run, cpus, user)
}

fn node_type(cpus: u32, min: u32, max: u32) -> NodeType {
    NodeType {
        name: format!("cpu-{cpus}"),
        cpus,
        min,
        max,
    }
}

fn cluster(head_cpus: u32, types: Vec<NodeType>, delay: f64, idle: f64) -> Autoscale {
    Autoscale {
        head_cpus,
        node_types: types,
        start_delay_s: delay,
        idle_timeout_s: idle,
    }
}

fn run(policy: SimPolicy, autoscale: Autoscale, trace: &[TraceJob]) -> SimOutcome {
    let config = SimConfig::new(policy, 1).autoscaled(autoscale);
    simulate(trace, &config)
}

/// `(number, start)` of every job that ran, in trace order.
fn starts(outcome: &SimOutcome) -> Vec<(u64, f64)> {
    outcome.jobs.iter().map(|j| (j.number, j.start)).collect()
}

/// `(type, launched, up, removed)` of every worker node, in launch order.
fn workers(outcome: &SimOutcome) -> Vec<(usize, f64, f64, Option<f64>)> {
    outcome
        .autoscale
        .as_ref()
        .unwrap()
        .nodes
        .iter()
        .filter_map(|n| Some((n.node_type?, n.launched, n.up, n.removed)))
        .collect()
}

/// The scenario of issue 44 with a 0-CPU head: four 1-CPU jobs of 20 s on a cluster
/// of up to two 2-CPU workers starting in 10 s; four users, so that the gateway loop
/// (one job per user per pass, two running per user) grants them all at once too.
fn four_jobs() -> Vec<TraceJob> {
    ["u1", "u2", "u3", "u4"]
        .iter()
        .zip(1..)
        .map(|(user, n)| job(n, 0.0, 20.0, 1, user))
        .collect()
}

#[test]
fn four_jobs_wait_for_two_nodes_then_run_together() {
    let c = cluster(0, vec![node_type(2, 0, 2)], 10.0, 12.0);
    for policy in SimPolicy::ALL {
        let outcome = run(policy, c.clone(), &four_jobs());
        assert_eq!(
            starts(&outcome),
            vec![(1, 10.0), (2, 10.0), (3, 10.0), (4, 10.0)],
            "{policy}"
        );
        // Both launched at once, up 10 s later, removed 12 s after the last end (30 s).
        assert_eq!(
            workers(&outcome),
            vec![(0, 0.0, 10.0, Some(42.0)), (0, 0.0, 10.0, Some(42.0))],
            "{policy}"
        );
        let a = outcome.autoscale.as_ref().unwrap();
        assert_eq!(a.granted, vec![0.0; 4], "{policy}: granted at submit");
        // First fit in grant order (the gateway loop's is its random user order).
        let mut nodes = a.job_nodes.clone();
        if policy == SimPolicy::GatewayLoop {
            nodes.sort_unstable();
        }
        assert_eq!(nodes, vec![1, 1, 2, 2], "{policy}: first fit");
    }
    let config = SimConfig::new(SimPolicy::FairShare, 1).autoscaled(c);
    let outcome = simulate(&four_jobs(), &config);
    let report = Report::new("four", 0, &config, &outcome);
    let o = &report.overall;
    assert_eq!(o.makespan_s, 30.0);
    assert_eq!(o.mean_wait_s, 10.0);
    // 80 core-seconds of work on 4 cores alive from 10 s to 30 s.
    assert_eq!(o.utilization, 1.0);
    let a = o.autoscale.as_ref().unwrap();
    assert_eq!(a.alive_core_s, 80.0);
    assert_eq!(a.worker_node_s, 40.0);
    assert_eq!(a.workers_started, 2);
    assert_eq!(a.mean_node_wait_s, 10.0);
    assert_eq!(a.jobs_waited_for_node, 4);
    assert!((a.utilization_of_potential - 80.0 / 120.0).abs() < 1e-12);
    assert_eq!(report.capacity_cores, 4, "the potential");
    let table = report.to_table();
    assert!(
        table.contains("utilization (of the cores alive)  "),
        "{table}"
    );
    assert!(
        table.contains("2 started (0 of them the minimum"),
        "{table}"
    );
}

#[test]
fn without_a_start_delay_jobs_start_at_submit() {
    let c = cluster(0, vec![node_type(2, 0, 2)], 0.0, 12.0);
    let outcome = run(SimPolicy::FairShare, c, &four_jobs());
    assert_eq!(
        starts(&outcome),
        vec![(1, 0.0), (2, 0.0), (3, 0.0), (4, 0.0)]
    );
    assert_eq!(
        workers(&outcome),
        vec![(0, 0.0, 0.0, Some(32.0)), (0, 0.0, 0.0, Some(32.0))]
    );
}

#[test]
fn a_job_wider_than_every_node_is_skipped_not_left_waiting() {
    // Potential 1 + 2 × 2 = 5 cores, but no node holds 3.
    let c = cluster(1, vec![node_type(2, 0, 2)], 10.0, 12.0);
    let trace = vec![job(1, 0.0, 20.0, 3, "u1"), job(2, 0.0, 20.0, 2, "u1")];
    let config = SimConfig::new(SimPolicy::FairShare, 1).autoscaled(c);
    let outcome = simulate(&trace, &config);
    assert_eq!(outcome.too_large, vec![1]);
    assert!(outcome.never_started.is_empty());
    assert_eq!(starts(&outcome), vec![(2, 10.0)]);
    let table = Report::new("t", 0, &config, &outcome).to_table();
    assert!(table.contains("skipped, wider than any node"), "{table}");
    // The head's core takes a 1-CPU job at once.
    let c = cluster(1, vec![node_type(2, 0, 2)], 10.0, 12.0);
    let outcome = run(SimPolicy::Fifo, c, &[job(1, 0.0, 5.0, 1, "u1")]);
    assert_eq!(starts(&outcome), vec![(1, 0.0)]);
    assert!(workers(&outcome).is_empty(), "no node launched");
}

#[test]
fn idle_workers_go_after_the_timeout_and_come_back_on_demand() {
    let c = cluster(0, vec![node_type(2, 0, 2)], 10.0, 12.0);
    let trace = vec![job(1, 0.0, 5.0, 1, "u1"), job(2, 100.0, 5.0, 1, "u1")];
    let outcome = run(SimPolicy::FairShare, c, &trace);
    assert_eq!(starts(&outcome), vec![(1, 10.0), (2, 110.0)]);
    // Idle from 15 s, removed at 27 s; the second job launches a new node.
    assert_eq!(
        workers(&outcome),
        vec![(0, 0.0, 10.0, Some(27.0)), (0, 100.0, 110.0, Some(127.0))]
    );
    // A job that arrives while a node is idle takes it and keeps it.
    let c = cluster(0, vec![node_type(2, 0, 2)], 10.0, 12.0);
    let trace = vec![job(1, 0.0, 5.0, 1, "u1"), job(2, 20.0, 5.0, 1, "u1")];
    let outcome = run(SimPolicy::FairShare, c, &trace);
    assert_eq!(starts(&outcome), vec![(1, 10.0), (2, 20.0)]);
    assert_eq!(workers(&outcome), vec![(0, 0.0, 10.0, Some(37.0))]);
}

#[test]
fn min_nodes_are_up_from_the_start_and_the_count_never_goes_below_min() {
    let c = cluster(0, vec![node_type(2, 1, 2)], 10.0, 12.0);
    let trace: Vec<TraceJob> = (1..=3).map(|n| job(n, 0.0, 20.0, 1, "u1")).collect();
    let outcome = run(SimPolicy::FairShare, c, &trace);
    assert_eq!(starts(&outcome), vec![(1, 0.0), (2, 0.0), (3, 10.0)]);
    // The least recently used goes first: the min node, idle from 20 s; the other,
    // idle from 30 s, stays as the one node of the minimum.
    assert_eq!(
        workers(&outcome),
        vec![(0, 0.0, 0.0, Some(32.0)), (0, 0.0, 10.0, None)]
    );
    // Nothing to do: the min node is up from the start all the same.
    let c = cluster(0, vec![node_type(2, 1, 2)], 10.0, 12.0);
    let outcome = run(SimPolicy::FairShare, c, &[job(1, 50.0, 5.0, 1, "u1")]);
    assert_eq!(starts(&outcome), vec![(1, 50.0)]);
    assert_eq!(workers(&outcome), vec![(0, 50.0, 50.0, None)]);
}

#[test]
fn the_smallest_type_that_holds_a_job_is_launched_up_to_its_maximum() {
    let c = cluster(
        0,
        vec![node_type(8, 0, 1), node_type(1, 0, 1), node_type(4, 0, 1)],
        10.0,
        5.0,
    );
    // 1 CPU → the 1-CPU type; 3 → the 4-CPU type; the next 1 CPU fits the 4-CPU
    // node's room; 2 → the 1-CPU type is too small, the 4 has 0 left: the 8.
    let trace = vec![
        job(1, 0.0, 20.0, 1, "u1"),
        job(2, 0.0, 20.0, 3, "u1"),
        job(3, 0.0, 20.0, 1, "u1"),
        job(4, 0.0, 20.0, 2, "u1"),
    ];
    let outcome = run(SimPolicy::Fifo, c, &trace);
    assert_eq!(
        workers(&outcome),
        vec![
            (1, 0.0, 10.0, Some(35.0)),
            (2, 0.0, 10.0, Some(35.0)),
            (0, 0.0, 10.0, Some(35.0))
        ]
    );
    assert_eq!(
        outcome.autoscale.as_ref().unwrap().job_nodes,
        vec![1, 2, 2, 3]
    );
    // At its maximum a type launches no more: the third 1-CPU job is granted when the
    // first two end (the potential is 2 cores) and takes their node.
    let c = cluster(0, vec![node_type(2, 0, 1)], 10.0, 5.0);
    let trace: Vec<TraceJob> = (1..=3).map(|n| job(n, 0.0, 20.0, 1, "u1")).collect();
    let outcome = run(SimPolicy::Fifo, c, &trace);
    assert_eq!(starts(&outcome), vec![(1, 10.0), (2, 10.0), (3, 30.0)]);
    assert_eq!(workers(&outcome), vec![(0, 0.0, 10.0, Some(55.0))]);
}

#[test]
fn a_grant_counts_for_its_user_from_the_grant() {
    // Potential 2: a's two jobs are granted at 0 and wait for the node; b's job,
    // submitted at 1, is not granted until one of a's ends (the policy sees the
    // cluster full), and then runs on the node that is up.
    let c = cluster(0, vec![node_type(2, 0, 1)], 10.0, 5.0);
    let trace = vec![
        job(1, 0.0, 20.0, 1, "a"),
        job(2, 0.0, 20.0, 1, "a"),
        job(3, 1.0, 20.0, 1, "b"),
    ];
    let outcome = run(SimPolicy::FairShare, c, &trace);
    assert_eq!(starts(&outcome), vec![(1, 10.0), (2, 10.0), (3, 30.0)]);
    assert_eq!(
        outcome.autoscale.as_ref().unwrap().granted,
        vec![0.0, 0.0, 30.0]
    );
}

#[test]
fn node_type_specs_parse_and_bad_ones_name_the_key() {
    let t: NodeType = "cpus=32,min=1,max=54,name=worker".parse().unwrap();
    assert_eq!(
        t,
        NodeType {
            name: "worker".into(),
            cpus: 32,
            min: 1,
            max: 54
        }
    );
    let t: NodeType = "max=2, cpus=2".parse().unwrap();
    assert_eq!(t, node_type(2, 0, 2));
    for (spec, says) in [
        ("cpus=0,max=2", "cpus must be at least 1"),
        ("cpus=2,max=0", "max must be at least 1"),
        ("cpus=2,min=3,max=2", "min 3 is above max 2"),
        ("cpus=2", "no max"),
        ("max=2", "no cpus"),
        ("cpus=-1,max=2", "cpus=\"-1\""),
        ("cpus=2,max=2,gpus=1", "unknown key \"gpus\""),
        ("cpus=2,max", "expected KEY=VALUE"),
    ] {
        let e = spec.parse::<NodeType>().unwrap_err();
        assert!(e.contains(says), "{spec}: {e}");
    }
    let mut c = cluster(0, vec![node_type(2, 0, 2), node_type(2, 0, 1)], 1.0, 1.0);
    assert!(c
        .validate()
        .unwrap_err()
        .contains("two node types are named cpu-2"));
    c.node_types.pop();
    c.start_delay_s = f64::NAN;
    assert!(c.validate().unwrap_err().contains("--start-delay"));
    c.start_delay_s = 0.0;
    c.idle_timeout_s = -1.0;
    assert!(c.validate().unwrap_err().contains("--idle-timeout"));
    c.idle_timeout_s = 0.0;
    assert_eq!(c.validate(), Ok(()));
    c.node_types.clear();
    assert!(c.validate().unwrap_err().contains("--node-type"));
}

/// A key given twice in one `--node-type` value is refused naming it (a tester's
/// `cpus=4,cpus=8` was taken, the last winning), whichever the key.
#[test]
fn a_node_type_key_given_twice_is_refused_naming_it() {
    for (spec, key) in [
        ("cpus=4,cpus=8,max=2", "cpus"),
        ("cpus=4,max=2,max=3", "max"),
        ("min=1,cpus=4,max=2, min=0", "min"),
        ("cpus=4,max=2,name=a,name=b", "name"),
    ] {
        let e = spec.parse::<NodeType>().unwrap_err();
        assert!(
            e.contains(&format!("{key} is given twice in node type {spec:?}")),
            "{spec}: {e}"
        );
    }
}

/// Checks the model's invariants on one run: per type never more than `max` nodes
/// (starting or up); every job ran on a node that was up for its whole run; on every
/// node the jobs running never held more than its cores; every job that fits ran.
fn check_invariants(c: &Autoscale, trace: &[TraceJob], outcome: &SimOutcome) {
    let a = outcome.autoscale.as_ref().unwrap();
    assert!(
        outcome.never_started.is_empty(),
        "{:?}",
        outcome.never_started
    );
    let widest = c.widest_node();
    assert_eq!(
        outcome.jobs.len() + outcome.too_large.len(),
        trace.len(),
        "every job ran or was too wide"
    );
    for &n in &outcome.too_large {
        let job = trace.iter().find(|j| j.number == n).unwrap();
        assert!(job.cpus > widest);
    }
    // Nodes per type at every launch instant (the count only grows then).
    for (k, t) in c.node_types.iter().enumerate() {
        for node in a.nodes.iter().filter(|n| n.node_type == Some(k)) {
            let at = node.launched;
            let count = a
                .nodes
                .iter()
                .filter(|m| m.node_type == Some(k))
                .filter(|m| m.launched <= at && m.removed.is_none_or(|r| r > at))
                .count();
            assert!(count <= t.max as usize, "type {k}: {count} > {}", t.max);
            // `up` is `launched + delay` in floating point: `up - launched` differs from
            // the delay by the rounding of the sum (a random case found it once).
            let delay = node.up - node.launched;
            let rounding = f64::EPSILON * node.up.abs().max(1.0) * 4.0;
            assert!(
                (delay - c.start_delay_s).abs() <= rounding || node.up == node.launched,
                "node up {} launched {} delay {}",
                node.up,
                node.launched,
                c.start_delay_s
            );
        }
    }
    for (k, job) in outcome.jobs.iter().enumerate() {
        let node = &a.nodes[a.job_nodes[k]];
        assert!(
            job.start >= node.up,
            "job {} before its node was up",
            job.number
        );
        assert!(
            node.removed.is_none_or(|r| r >= job.finish()),
            "job {} outlived its node",
            job.number
        );
        assert!(job.start >= a.granted[k] && a.granted[k] >= job.submit);
    }
    // Per node, the cores held at every job start.
    for (n, node) in a.nodes.iter().enumerate() {
        let on: Vec<_> = outcome
            .jobs
            .iter()
            .zip(&a.job_nodes)
            .filter(|(_, &m)| m == n)
            .map(|(j, _)| j)
            .collect();
        for j in &on {
            let held: u32 = on
                .iter()
                .filter(|o| o.start <= j.start && o.finish() > j.start)
                .map(|o| o.cpus)
                .sum();
            assert!(held <= node.cpus, "node {n}: {held} > {}", node.cpus);
        }
    }
}

fn arb_trace() -> impl Strategy<Value = Vec<TraceJob>> {
    prop::collection::vec((0u32..120, 1u32..60, 1u32..6, 0usize..3), 1..25).prop_map(|jobs| {
        jobs.into_iter()
            .enumerate()
            .map(|(n, (submit, run, cpus, user))| {
                job(
                    n as u64 + 1,
                    f64::from(submit),
                    f64::from(run),
                    cpus,
                    ["a", "b", "c"][user],
                )
            })
            .collect()
    })
}

fn arb_cluster() -> impl Strategy<Value = Autoscale> {
    (
        0u32..3,
        prop::collection::vec((1u32..5, 0u32..2, 1u32..4), 1..4),
        prop::sample::select(vec![0.0, 0.5, 10.0, 45.0]),
        prop::sample::select(vec![0.0, 3.0, 30.0]),
    )
        .prop_map(|(head, types, delay, idle)| Autoscale {
            head_cpus: head,
            node_types: types
                .into_iter()
                .enumerate()
                .map(|(k, (cpus, min, extra))| NodeType {
                    name: format!("t{k}"),
                    cpus,
                    min,
                    max: min + extra,
                })
                .collect(),
            start_delay_s: delay,
            idle_timeout_s: idle,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn autoscaled_runs_keep_the_model_invariants(
        trace in arb_trace(),
        c in arb_cluster(),
        policy in prop::sample::select(SimPolicy::ALL.to_vec()),
        preemptible in any::<bool>(),
    ) {
        let mut config = SimConfig::new(policy, 1).autoscaled(c.clone());
        if preemptible {
            config.preemptible = super::simulate::Preemptible::All;
            config.preemption.after = 5.0;
            config.preemption.min_runtime = 0.0;
        }
        let outcome = simulate(&trace, &config);
        check_invariants(&c, &trace, &outcome);
    }
}

#[test]
fn simulate_runs_an_autoscaled_cluster_and_refuses_what_cannot_be() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("four.swf");
    let line =
        |n: u32, user: u32| format!("{n} 0 -1 20 1 -1 -1 1 -1 -1 1 {user} -1 -1 -1 -1 -1 -1\n");
    let text: String = (1..=4).map(|n| line(n, n)).collect();
    std::fs::write(&path, text).unwrap();
    let mut args = super::run::SimulateArgs::new(path);
    args.policy = Some(SimPolicy::FairShare);
    args.autoscale = Some(cluster(0, vec![node_type(2, 0, 2)], 10.0, 12.0));
    let table = super::run_simulate(&args).unwrap();
    for line in [
        "capacity 4 cores",
        "autoscaling: head 0 cores, workers cpu-2 (2 cores, 0–2 nodes), start delay 10 s, \
         idle timeout 12 s, potential 4 cores",
        "utilization (of the cores alive)",
        "100.00 %",
        "2 started (0 of them the minimum, up from the start), 40 node-seconds alive",
        "10.0 s on average (4 jobs waited)",
        "makespan                                         30 s",
    ] {
        assert!(table.contains(line), "{line}: {table}");
    }
    // With every policy, the header says what util % is.
    args.policy = None;
    let table = super::run_simulate(&args).unwrap();
    assert!(table.contains("(util % is of the cores alive)"), "{table}");

    args.cpus = Some(8);
    let e = super::run_simulate(&args).unwrap_err().to_string();
    assert!(e.contains("--cpus") && e.contains("not both"), "{e}");
    args.cpus = None;
    args.autoscale = Some(cluster(0, vec![], 10.0, 12.0));
    let e = super::run_simulate(&args).unwrap_err().to_string();
    assert!(
        e.contains("--autoscale") && e.contains("no node type"),
        "{e}"
    );
    // A head of 0 and nodes of 1 core: no job of 2 fits.
    let wide = dir.path().join("wide.swf");
    std::fs::write(&wide, "1 0 -1 20 2 -1 -1 2 -1 -1 1 1 -1 -1 -1 -1 -1 -1\n").unwrap();
    args.trace = wide;
    args.autoscale = Some(cluster(0, vec![node_type(1, 0, 8)], 10.0, 12.0));
    let e = super::run_simulate(&args).unwrap_err().to_string();
    assert!(
        e.contains("--node-type") && e.contains("widest node"),
        "{e}"
    );
}
