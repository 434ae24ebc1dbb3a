//! The simulator with preemption: a hand-computed schedule, no change at all when
//! no job is preemptible, and every job run once to the end on COARE.

use std::path::Path;

use super::simulate::{simulate, Preemptible, SimConfig, SimPolicy};
use super::swf::{read_trace, TraceJob};
use crate::policy::PreemptionConfig;

fn job(number: u64, submit: f64, run: f64, cpus: u32, user: &str) -> TraceJob {
    TraceJob::new(number, submit, run, cpus, user)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

fn preempting(capacity: u32, preemptible: Preemptible) -> SimConfig {
    SimConfig {
        preemptible,
        preemption: PreemptionConfig {
            after: 60.0,
            min_runtime: 0.0,
            max_per_job: 1,
            budget: 1.0,
            interval: 60.0,
            shortfall: false,
        },
        ..SimConfig::new(SimPolicy::FairShare, capacity)
    }
}

/// a fills 4 cores with four 1-core jobs of 1000 s at 0; b's 2-core job of 100 s
/// comes at 10. Just after 70 (10 + after) the two youngest of a's jobs (equal
/// starts: jobs 4 and 3) are preempted and b starts; when b ends (170) they start
/// again. Work lost: 2 cores × 70 s.
#[test]
fn a_preempted_job_runs_again_once_the_preemptor_is_done() {
    let trace = vec![
        job(1, 0.0, 1000.0, 1, "a"),
        job(2, 0.0, 1000.0, 1, "a"),
        job(3, 0.0, 1000.0, 1, "a"),
        job(4, 0.0, 1000.0, 1, "a"),
        job(5, 10.0, 100.0, 2, "b"),
    ];
    let out = simulate(&trace, &preempting(4, Preemptible::All));
    let start = |n: u64| out.jobs.iter().find(|j| j.number == n).unwrap().start;
    let times = |n: u64| out.jobs.iter().find(|j| j.number == n).unwrap().preemptions;
    assert_eq!((start(1), start(2)), (0.0, 0.0));
    assert!(close(start(5), 70.0), "b starts at {}", start(5));
    assert!(close(start(3), start(5) + 100.0) && close(start(4), start(5) + 100.0));
    assert_eq!(
        (times(1), times(2), times(3), times(4), times(5)),
        (0, 0, 1, 1, 0)
    );
    assert_eq!(out.preemptions, 2);
    assert!(close(out.lost_core_s, 140.0), "lost {}", out.lost_core_s);
    // Jobs 3 and 4 ran 70 s before they were preempted: that is part of their wait
    // (to the start of the run that finished) but not of their time queued.
    let job3 = out.jobs.iter().find(|j| j.number == 3).unwrap();
    assert!(close(job3.preempted_run_s, 70.0), "{job3:?}");
    assert!(close(job3.queued(), job3.wait() - 70.0), "{job3:?}");
    let report = super::report::Report::new("t", 0, &preempting(4, Preemptible::All), &out);
    let o = &report.overall;
    assert_eq!(o.worst_user.as_deref(), Some("a"));
    assert!(close(o.worst_user_p95_wait_s, start(3)), "{o:?}");
    assert_eq!(o.worst_queued_user.as_deref(), Some("a"));
    assert!(close(o.worst_user_p95_queued_s, start(3) - 70.0), "{o:?}");
    assert!(report.to_table().contains("worst user's p95 time queued"));
    // Without preemption b waits for a whole job of a.
    let off = simulate(&trace, &preempting(4, Preemptible::None));
    let b = off.jobs.iter().find(|j| j.number == 5).unwrap();
    assert_eq!(b.start, 1000.0);
    assert_eq!(off.preemptions, 0);
    // The all-policies table shows preemptions and work lost once some run preempted
    // (a tester's nit from issue 28), and not otherwise.
    let on = preempting(4, Preemptible::All);
    let with = super::report::Report::new("t", 0, &on, &out);
    let without = super::report::Report::new("t", 0, &on, &off);
    let table = super::report::comparison_table(&[&with, &without]);
    let header = table.lines().next().unwrap();
    assert!(header.ends_with("preempted  lost %"), "{table}");
    let row = table.lines().nth(2).unwrap();
    assert!(row.split_whitespace().rev().nth(1) == Some("2"), "{table}");
    let quiet = super::report::comparison_table(&[&without]);
    assert!(!quiet.contains("preempted"), "{quiet}");
}

fn coare_prefix(n: usize) -> (Vec<TraceJob>, u32) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/traces/coare-saliksik-2020.swf.gz");
    let trace = read_trace(&path).unwrap();
    (trace.jobs[..n].to_vec(), trace.max_procs.unwrap())
}

/// With no job preemptible (none, or a fraction of 0) every decision is the
/// non-preemptive policy's: the same outcome, field for field.
#[test]
fn with_no_job_preemptible_the_schedule_is_todays() {
    let (jobs, capacity) = coare_prefix(4000);
    let today = simulate(&jobs, &SimConfig::new(SimPolicy::FairShare, capacity));
    for none in [Preemptible::None, Preemptible::Fraction(0.0)] {
        let config = SimConfig {
            preemption: PreemptionConfig {
                after: 0.0,
                min_runtime: 0.0,
                max_per_job: 10,
                budget: 1.0,
                interval: 1.0,
                shortfall: false,
            },
            ..preempting(capacity, none)
        };
        assert_eq!(simulate(&jobs, &config), today, "{none:?}");
    }
}

/// With every job preemptible on COARE's first 4,000 jobs, and squeezed onto 64
/// cores: every job still runs once to the end, none more than `max_per_job`
/// times preempted, the finished runs never hold more than the capacity, and
/// preemption did happen.
#[test]
fn every_job_still_runs_to_the_end_when_all_are_preemptible() {
    let (jobs, _) = coare_prefix(4000);
    for capacity in [1728, 64] {
        let jobs: Vec<TraceJob> = jobs
            .iter()
            .filter(|j| j.cpus <= capacity)
            .cloned()
            .collect();
        let mut config = preempting(capacity, Preemptible::All);
        config.preemption.max_per_job = 2;
        let out = simulate(&jobs, &config);
        assert!(out.never_started.is_empty());
        assert_eq!(out.jobs.len(), jobs.len());
        assert!(out
            .jobs
            .iter()
            .all(|j| j.start >= j.submit && j.preemptions <= 2));
        assert!(out.preemptions > 0, "{capacity} cores: no preemption");
        let per_job: u64 = out.jobs.iter().map(|j| u64::from(j.preemptions)).sum();
        assert_eq!(per_job, out.preemptions);
        let mut edges: Vec<(f64, i64)> = out
            .jobs
            .iter()
            .flat_map(|j| {
                [
                    (j.start, i64::from(j.cpus)),
                    (j.finish(), -i64::from(j.cpus)),
                ]
            })
            .collect();
        edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut held = 0;
        for (_, d) in edges {
            held += d;
            assert!(
                held <= i64::from(capacity),
                "{held} cores held on {capacity}"
            );
        }
    }
}

#[test]
fn the_choice_of_preemptible_jobs_is_seeded() {
    let half = SimConfig {
        preemptible: Preemptible::Fraction(0.5),
        ..SimConfig::new(SimPolicy::FairShare, 8)
    };
    let chosen: Vec<bool> = (0..10_000).map(|n| half.is_preemptible(n)).collect();
    let again: Vec<bool> = (0..10_000).map(|n| half.is_preemptible(n)).collect();
    assert_eq!(chosen, again);
    let share = chosen.iter().filter(|&&c| c).count() as f64 / 10_000.0;
    assert!((share - 0.5).abs() < 0.02, "{share}");
    let other = SimConfig { seed: 7, ..half };
    assert!((0..10_000).any(|n| other.is_preemptible(n) != chosen[n as usize]));
    assert_eq!("0.25".parse(), Ok(Preemptible::Fraction(0.25)));
    assert_eq!("ALL".parse(), Ok(Preemptible::All));
    assert!("1.5".parse::<Preemptible>().is_err());
}
