//! Free capacity under Ray's lagging report and other tenants' usage (issue 8 §1):
//! a property test over report lag × report period × foreign usage that no cycle
//! ever grants past the cluster's total.
//!
//! The model: time in poll steps. Each of our jobs is granted at some step, runs in
//! Ray from a later step and ends later still; other tenants' usage changes at random
//! steps. A usage report arrives every `period` steps and shows the true usage of a
//! step `d ≤ L` earlier. When it arrives, the arbiter takes as included the jobs Ray
//! has listed RUNNING for at least `L` steps (`monitor.usage_report_lag`) and fixes
//! other tenants' usage as the report less those jobs; until the next report, free
//! capacity is the total less that, less our outstanding jobs — exactly what the
//! arbiter hands [`ClusterView::free`]. The claim: whenever other tenants' usage has
//! not grown since the step the report shows (a rise Ray has not reported yet is
//! invisible to anyone), our outstanding jobs plus the true foreign usage plus what
//! the arbiter believes free never exceed the total.

use proptest::prelude::*;

use crate::policy::{ClusterView, Resources};

#[derive(Clone, Debug)]
struct Job {
    cpu: f64,
    granted: usize,
    starts: usize,
    ends: usize,
}

fn cpu(v: f64) -> Resources {
    Resources::new(v, 0.0, 0.0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn no_cycle_grants_past_total(
        lag in 0usize..6,
        period in 1usize..4,
        report_delay in proptest::collection::vec(0usize..6, 60),
        foreign in proptest::collection::vec(0u8..5, 60),
        jobs in proptest::collection::vec((1u8..4, 0usize..50, 0usize..5, 1usize..20), 0..12),
    ) {
        let total = 16.0;
        let jobs: Vec<Job> = jobs
            .into_iter()
            .map(|(c, g, s, r)| Job { cpu: f64::from(c), granted: g, starts: g + s, ends: g + s + r })
            .collect();
        let foreign_at = |t: usize| f64::from(foreign[t.min(59)]);
        // Ray reserves a job's CPUs from the moment it runs until it ends.
        let running = |j: &Job, t: usize| j.starts <= t && t < j.ends;
        // Outstanding here: granted, not yet seen finished.
        let outstanding = |j: &Job, t: usize| j.granted <= t && t < j.ends;
        // (step the last report shows, jobs it was taken to include, foreign estimate)
        let mut report: Option<(usize, Vec<usize>, f64)> = None;
        for (t, delay) in report_delay.iter().enumerate() {
            if t % period == 0 {
                let seen = t - (*delay).min(lag).min(t);
                let used = foreign_at(seen)
                    + jobs.iter().filter(|j| running(j, seen)).map(|j| j.cpu).sum::<f64>();
                let included: Vec<usize> = (0..jobs.len())
                    .filter(|&i| outstanding(&jobs[i], t) && jobs[i].starts + lag <= t)
                    .collect();
                let ours: f64 = included.iter().map(|&i| jobs[i].cpu).sum();
                report = Some((seen, included, (used - ours).max(0.0)));
            }
            let Some((seen, included, foreign_est)) = &report else { continue };
            let mine: Vec<usize> = (0..jobs.len()).filter(|&i| outstanding(&jobs[i], t)).collect();
            let ours: f64 = mine.iter().map(|&i| jobs[i].cpu).sum();
            let unreported: f64 = mine
                .iter()
                .filter(|i| !included.contains(i))
                .map(|&i| jobs[i].cpu)
                .sum();
            let view = ClusterView {
                name: "c".into(),
                healthy: true,
                total: cpu(total),
                used_reported: cpu(foreign_est + ours - unreported),
                outstanding: cpu(ours),
                unreported: cpu(unreported),
                jobs: Vec::new(),
                pool: false,
            };
            let foreign_steady = (*seen..=t).all(|s| foreign_at(s) <= foreign_at(*seen));
            if foreign_steady && ours + foreign_at(t) <= total {
                let free = view.free().cpu;
                prop_assert!(
                    ours + foreign_at(t) + free <= total + 1e-9,
                    "t={t} lag={lag}: ours {ours} + foreign {} + free {free} > {total}",
                    foreign_at(t)
                );
                prop_assert!((view.foreign().cpu - foreign_est).abs() < 1e-9);
            }
        }
    }
}
