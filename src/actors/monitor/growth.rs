//! An autoscaling cluster's capacity (issue 44; DESIGN §2, "Autoscaling clusters").
//!
//! Ray's dashboard reports only the nodes alive now (`loadMetricsReport.usage`), never
//! the node types the autoscaler may add nor their maximum counts (docs/ray.md,
//! "Autoscaling clusters: what Ray reports"), so the operator declares them
//! (`[[clusters.node_types]]`). The policy then counts the cluster at its **potential**,
//! `head + Σ max_count × node resources`: fair share grants jobs beyond what is alive,
//! the dispatcher sends them to Ray, and Ray's autoscaler sees them waiting (PENDING)
//! and adds nodes, exactly as for jobs sent straight to Ray. A job that waits
//! `monitor.scale_up_timeout` for a node that does not come goes back to the queue, and
//! the cluster then counts only what is alive for as long again (the growth is held
//! back), so the same jobs are not sent for a node that cannot be had.

use std::time::{Duration, Instant};

use crate::config::ClusterSettings;
use crate::policy::Resources;
use crate::views::{GrowthView, NodeTypeView};

/// What the monitor keeps of one autoscaling cluster between polls.
#[derive(Clone, Debug, Default)]
pub(crate) struct Growth {
    /// Nodes Ray's autoscaler was adding at the last poll.
    pub(crate) nodes_starting: u32,
    /// Only the nodes alive count until then: a job waited `scale_up_timeout` for a
    /// node that did not come.
    pub(crate) held_until: Option<Instant>,
    /// The operator was told once that more is alive than the declared potential.
    pub(crate) warned_small: bool,
}

/// The capacity the policy counts for a cluster whose nodes alive offer `alive`:
/// for a fixed cluster (`potential` `None`) or while the growth is held back, `alive`;
/// otherwise the larger of `alive` and `potential` per resource (a node Ray runs that
/// the configuration does not declare still counts, and the head's memory, which Ray
/// reports whatever the configuration says, is not lost).
#[must_use]
pub(crate) fn capacity(alive: Resources, potential: Option<Resources>, held: bool) -> Resources {
    match potential {
        Some(p) if !held => alive.max(p),
        _ => alive,
    }
}

/// Whether `alive` offers more cores, GPUs or custom resources than `potential`: the
/// declared node types are smaller than the cluster (a warning, not an error: the
/// larger counts). Memory is left out: Ray reports a node's memory whatever it was
/// given, and operators rarely declare it exactly.
#[must_use]
pub(crate) fn larger_than_declared(alive: &Resources, potential: &Resources) -> bool {
    let (mut a, mut p) = (*alive, *potential);
    a.memory_bytes = 0.0;
    p.memory_bytes = 0.0;
    !a.fits_within(&p)
}

impl Growth {
    /// Whether the growth is held back at `now`.
    pub(crate) fn held(&self, now: Instant) -> bool {
        self.held_until.is_some_and(|t| now < t)
    }

    /// A job waited `scale_up_timeout` for a node that did not come: count only what is
    /// alive for that long again.
    pub(crate) fn hold(&mut self, now: Instant, scale_up_timeout: Duration) {
        self.held_until = Some(now + scale_up_timeout);
    }

    /// The view of the cluster `c` for `GET /v1/scheduler`.
    pub(crate) fn view(
        &self,
        c: &ClusterSettings,
        alive: Resources,
        waiting: (u32, Resources),
        now: Instant,
    ) -> GrowthView {
        let head = crate::config::resource_map(&c.head);
        let head_view = (head != Resources::ZERO).then(|| NodeTypeView {
            name: "head".into(),
            resources: head.into(),
            min_count: 1,
            max_count: 1,
        });
        GrowthView {
            alive: alive.into(),
            potential: c.potential().unwrap_or(alive).into(),
            nodes_starting: self.nodes_starting,
            jobs_waiting_in_ray: waiting.0,
            demand_in_ray: waiting.1.into(),
            growth_held_for_seconds: self
                .held_until
                .filter(|_| self.held(now))
                .map(|t| t.saturating_duration_since(now).as_secs_f64()),
            node_types: head_view
                .into_iter()
                .chain(c.node_types.iter().map(|t| NodeTypeView {
                    name: t.name.clone(),
                    resources: crate::config::resource_map(&t.resources).into(),
                    min_count: t.min_count,
                    max_count: t.max_count,
                }))
                .collect(),
        }
    }
}

/// The node type Ray's autoscaler would add for a job asking `request`: the one with
/// the least left over once the request is placed on one of its nodes (best fit, ties
/// to the first declared); `None` when no type holds it.
#[must_use]
pub fn node_type_for<'a>(c: &'a ClusterSettings, request: &Resources) -> Option<&'a str> {
    crate::policy::tightest(
        request,
        c.node_types.iter().map(|t| {
            let shape = crate::config::resource_map(&t.resources);
            (t.name.as_str(), shape, shape)
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NodeTypeSettings;

    fn cpu(x: f64) -> Resources {
        Resources::new(x, 0.0, 0.0)
    }

    fn cluster(head_cpu: Option<f64>, types: &[(&str, f64, u32)]) -> ClusterSettings {
        ClusterSettings {
            name: "ray".into(),
            address: "http://127.0.0.1:8265".into(),
            head: head_cpu
                .map(|c| [("cpu".to_string(), c)].into_iter().collect())
                .unwrap_or_default(),
            node_types: types
                .iter()
                .map(|&(name, c, max)| NodeTypeSettings {
                    name: name.into(),
                    resources: [("cpu".to_string(), c)].into_iter().collect(),
                    min_count: 0,
                    max_count: max,
                })
                .collect(),
            ..ClusterSettings::default()
        }
    }

    #[test]
    fn the_potential_is_the_head_plus_every_type_at_its_maximum() {
        let c = cluster(Some(1.0), &[("cpu-2", 2.0, 2), ("cpu-8", 8.0, 3)]);
        assert_eq!(c.potential(), Some(cpu(1.0 + 4.0 + 24.0)));
        let zero_head = cluster(None, &[("cpu-2", 2.0, 2)]);
        assert_eq!(zero_head.potential(), Some(cpu(4.0)));
        assert_eq!(cluster(None, &[]).potential(), None);
    }

    #[test]
    fn capacity_is_the_potential_unless_held_and_never_below_what_is_alive() {
        let p = Some(cpu(4.0));
        // A 0-CPU head alone: the policy counts 4 cores.
        assert_eq!(
            capacity(Resources::new(0.0, 0.0, 2e9), p, false),
            Resources::new(4.0, 0.0, 2e9)
        );
        // Held back after a scale-up timed out: only what is alive.
        assert_eq!(capacity(cpu(2.0), p, true), cpu(2.0));
        // More alive than declared (an undeclared node): what is alive.
        assert_eq!(capacity(cpu(6.0), p, false), cpu(6.0));
        // A fixed cluster: what is alive, whatever `held` says.
        assert_eq!(capacity(cpu(3.0), None, false), cpu(3.0));
        assert!(larger_than_declared(&cpu(6.0), &cpu(4.0)));
        assert!(!larger_than_declared(
            &Resources::new(4.0, 0.0, 9e9),
            &cpu(4.0)
        ));
    }

    #[test]
    fn the_node_type_for_a_job_is_the_tightest_that_holds_it() {
        let c = cluster(None, &[("cpu-8", 8.0, 1), ("cpu-2", 2.0, 2)]);
        assert_eq!(node_type_for(&c, &cpu(1.0)), Some("cpu-2"));
        assert_eq!(node_type_for(&c, &cpu(3.0)), Some("cpu-8"));
        assert_eq!(node_type_for(&c, &cpu(9.0)), None);
    }

    #[test]
    fn a_hold_ends_after_the_scale_up_timeout() {
        let now = Instant::now();
        let mut g = Growth::default();
        assert!(!g.held(now));
        g.hold(now, Duration::from_secs(60));
        assert!(g.held(now + Duration::from_secs(59)));
        assert!(!g.held(now + Duration::from_secs(60)));
        let c = cluster(None, &[("cpu-2", 2.0, 2)]);
        let v = g.view(&c, cpu(0.0), (3, cpu(3.0)), now);
        assert_eq!(v.growth_held_for_seconds, Some(60.0));
        assert_eq!(v.jobs_waiting_in_ray, 3);
        assert_eq!(v.potential.cpu, 4.0);
        assert_eq!(v.node_types.len(), 1);
    }
}
