//! Free capacity under Ray's lagging report and other tenants' usage (issue 8 §1):
//! a property test over report lag × foreign usage that no cycle ever grants past the
//! cluster's total.
//!
//! The model: time in poll steps. Each of our jobs is granted at some step, starts
//! running in Ray a few steps later and ends later still; other tenants' usage changes
//! at random steps. Ray's usage report at step t shows the true usage of step t − d
//! for a lag d ≤ L. The monitor counts one of our jobs as included in the report once
//! Ray has listed it RUNNING for at least L steps (`monitor.usage_report_lag`). The
//! arbiter's free capacity is [`ClusterView::free`]. The claim: whenever other tenants'
//! usage has not grown within the last L steps (a rise Ray has not reported yet is
//! invisible to anyone), our outstanding jobs plus the true foreign usage plus what the
//! arbiter believes free never exceed the total.

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
    Resources {
        cpu: v,
        gpu: 0.0,
        memory_bytes: 0.0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn no_cycle_grants_past_total(
        lag in 0usize..6,
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
        for (t, delay) in report_delay.iter().enumerate() {
            let d = (*delay).min(lag).min(t);
            let seen = t - d;
            let used_reported = foreign_at(seen)
                + jobs.iter().filter(|j| running(j, seen)).map(|j| j.cpu).sum::<f64>();
            // Outstanding here: granted, not yet seen finished.
            let outstanding: Vec<&Job> = jobs.iter().filter(|j| j.granted <= t && t < j.ends).collect();
            let unreported: f64 = outstanding
                .iter()
                .filter(|j| !(j.starts <= t && t - j.starts >= lag))
                .map(|j| j.cpu)
                .sum();
            let view = ClusterView {
                name: "c".into(),
                healthy: true,
                total: cpu(total),
                used_reported: cpu(used_reported),
                outstanding: cpu(outstanding.iter().map(|j| j.cpu).sum()),
                unreported: cpu(unreported),
                jobs: Vec::new(),
            };
            let foreign_steady = (t.saturating_sub(lag)..=t).all(|s| foreign_at(s) <= foreign_at(seen));
            if foreign_steady {
                let ours: f64 = outstanding.iter().map(|j| j.cpu).sum();
                let claimed = ours + foreign_at(t) + view.free().cpu;
                prop_assert!(
                    claimed <= total + 1e-9 || ours + foreign_at(t) > total,
                    "t={t} lag={lag} d={d}: ours {ours} + foreign {} + free {} > {total}",
                    foreign_at(t),
                    view.free().cpu
                );
            }
        }
    }
}
