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
//! the node type it waited for (the tightest that holds it, [`node_type_for_unless`]) is then
//! left out of the potential for as long again, doubling with each consecutive failure
//! of that type up to [`MAX_HOLD_FACTOR`] times (the growth of that type is "held
//! back"): the same jobs are not sent again and again for a node that cannot be had
//! (a type declared here that Ray's autoscaler does not know, a cloud out of
//! machines), while the cluster's other node types keep growing. A node that comes
//! up ends the doubling.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::config::ClusterSettings;
use crate::policy::Resources;
use crate::views::{GrowthView, NodeTypeView};

/// The longest hold of a node type, as a multiple of `monitor.scale_up_timeout` (80 min
/// at the default 10 min): holds double with each consecutive scale-up of the type that
/// did not come, up to this.
pub(crate) const MAX_HOLD_FACTOR: u32 = 8;

/// A node type whose scale-up did not come ([`Growth::hold`]).
#[derive(Clone, Debug)]
pub(crate) struct Hold {
    /// Left out of the potential until then.
    pub(crate) until: Instant,
    /// Scale-ups of this type in a row that did not come (no node came up between).
    pub(crate) failures: u32,
}

/// What the monitor keeps of one autoscaling cluster between polls.
#[derive(Clone, Debug, Default)]
pub(crate) struct Growth {
    /// Nodes Ray's autoscaler was adding at the last poll.
    pub(crate) nodes_starting: u32,
    /// Node types held back, by name: a job waited `scale_up_timeout` for one.
    pub(crate) holds: BTreeMap<String, Hold>,
    /// What was alive at the last poll: more alive now means a node came up, which
    /// ends every type's doubling.
    pub(crate) last_alive: Resources,
    /// The operator was told once that more is alive than the declared potential.
    pub(crate) warned_small: bool,
}

/// The capacity the policy counts for a cluster whose nodes alive offer `alive` and
/// whose node types not held back can grow it to `potential` (`None` for a fixed
/// cluster): the larger of the two per resource (a node Ray runs that the
/// configuration does not declare still counts, and the head's memory, which Ray
/// reports whatever the configuration says, is not lost).
#[must_use]
pub(crate) fn capacity(alive: Resources, potential: Option<Resources>) -> Resources {
    match potential {
        Some(p) => alive.max(p),
        None => alive,
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
    /// Whether node type `name` is held back at `now`.
    pub(crate) fn is_held(&self, name: &str, now: Instant) -> bool {
        self.holds.get(name).is_some_and(|h| now < h.until)
    }

    /// What cluster `c` can grow to at `now`: `head + Σ max_count × resources` over
    /// its node types not held back; `None` for a fixed cluster.
    #[must_use]
    pub(crate) fn potential(&self, c: &ClusterSettings, now: Instant) -> Option<Resources> {
        if !c.autoscales() {
            return None;
        }
        let mut total = crate::config::resource_map(&c.head);
        for t in c.node_types.iter().filter(|t| !self.is_held(&t.name, now)) {
            total += crate::config::resource_map(&t.resources).scaled(f64::from(t.max_count));
        }
        Some(total)
    }

    /// The node type not held back at `now` that Ray's autoscaler would add for a job
    /// asking `request` ([`node_type_for_unless`] over those types).
    #[must_use]
    pub(crate) fn node_type_for<'a>(
        &self,
        c: &'a ClusterSettings,
        request: &Resources,
        now: Instant,
    ) -> Option<&'a str> {
        tightest_type(c, request, |name| !self.is_held(name, now))
    }

    /// Whether a job asking `request` that Ray holds PENDING on cluster `c` (nodes
    /// alive: `alive`) waits for a node (`monitor.scale_up_timeout`) rather than for
    /// resources to free up (`monitor.pending_timeout`): a node type not held back
    /// holds it, and either a node is starting or the cluster can still grow beyond
    /// what is alive. A cluster at its maximum waits as a fixed one does.
    #[must_use]
    pub(crate) fn can_grow_for(
        &self,
        c: &ClusterSettings,
        request: &Resources,
        alive: &Resources,
        now: Instant,
    ) -> bool {
        self.node_type_for(c, request, now).is_some()
            && (self.nodes_starting > 0
                || self
                    .potential(c, now)
                    .is_some_and(|p| larger_than_declared(&p, alive)))
    }

    /// A job waited `scale_up_timeout` for a node of type `name` that did not come:
    /// leave the type out of the potential for `scale_up_timeout × 2^(failures − 1)`
    /// (at most [`MAX_HOLD_FACTOR`] × `scale_up_timeout`), `failures` counting the
    /// type's scale-ups in a row that did not come. A hold already running is not
    /// lengthened by another job that waited for the same scale-up. Returns the hold.
    pub(crate) fn hold(
        &mut self,
        name: &str,
        now: Instant,
        scale_up_timeout: Duration,
    ) -> Duration {
        let h = self.holds.entry(name.to_string()).or_insert(Hold {
            until: now,
            failures: 0,
        });
        if now < h.until {
            return h.until - now;
        }
        h.failures = h.failures.saturating_add(1);
        let factor = 1u32
            .checked_shl(h.failures - 1)
            .unwrap_or(u32::MAX)
            .min(MAX_HOLD_FACTOR);
        let length = scale_up_timeout.saturating_mul(factor);
        h.until = now + length;
        length
    }

    /// Takes a poll's nodes alive on cluster `c`: what grew since the last poll is a
    /// node (or more) that came up, which ends the doubling of each node type whose
    /// node fits in that growth (cores, GPUs, custom resources; a GPU type's failures
    /// are not forgotten because a CPU node came). Holds running now still run out.
    pub(crate) fn saw_alive(&mut self, c: &ClusterSettings, alive: Resources) {
        let mut grown = alive.saturating_sub(self.last_alive);
        grown.memory_bytes = 0.0;
        if grown != Resources::ZERO {
            for t in &c.node_types {
                let mut shape = crate::config::resource_map(&t.resources);
                shape.memory_bytes = 0.0;
                if shape.fits_within(&grown) {
                    if let Some(h) = self.holds.get_mut(&t.name) {
                        h.failures = 0;
                    }
                }
            }
        }
        self.last_alive = alive;
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
            held_for_seconds: None,
            failed_scale_ups: 0,
        });
        let held_for = |name: &str| {
            self.holds
                .get(name)
                .filter(|h| now < h.until)
                .map(|h| h.until.saturating_duration_since(now).as_secs_f64())
        };
        GrowthView {
            alive: alive.into(),
            potential: c.potential().unwrap_or(alive).into(),
            nodes_starting: self.nodes_starting,
            jobs_waiting_in_ray: waiting.0,
            demand_in_ray: waiting.1.into(),
            growth_held_for_seconds: c
                .node_types
                .iter()
                .filter_map(|t| held_for(&t.name))
                .reduce(f64::max),
            can_grow: self.nodes_starting > 0
                || self
                    .potential(c, now)
                    .is_some_and(|p| larger_than_declared(&p, &alive)),
            node_types: head_view
                .into_iter()
                .chain(c.node_types.iter().map(|t| NodeTypeView {
                    name: t.name.clone(),
                    resources: crate::config::resource_map(&t.resources).into(),
                    min_count: t.min_count,
                    max_count: t.max_count,
                    held_for_seconds: held_for(&t.name),
                    failed_scale_ups: self.holds.get(&t.name).map_or(0, |h| h.failures),
                }))
                .collect(),
        }
    }
}

/// The node type Ray's autoscaler would add for a job asking `request`, among those
/// for which `held` is false (the ones held back after a scale-up that did not come are
/// left out): the one with the least left over once the request is placed on one of its
/// nodes (best fit, ties to the first declared); `None` when no such type holds it.
#[must_use]
pub fn node_type_for_unless<'a>(
    c: &'a ClusterSettings,
    request: &Resources,
    held: impl Fn(&str) -> bool,
) -> Option<&'a str> {
    tightest_type(c, request, |t| !held(t))
}

fn tightest_type<'a>(
    c: &'a ClusterSettings,
    request: &Resources,
    keep: impl Fn(&str) -> bool,
) -> Option<&'a str> {
    crate::policy::tightest(
        request,
        c.node_types.iter().filter(|t| keep(&t.name)).map(|t| {
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
    fn capacity_is_the_potential_and_never_below_what_is_alive() {
        let p = Some(cpu(4.0));
        // A 0-CPU head alone: the policy counts 4 cores.
        assert_eq!(
            capacity(Resources::new(0.0, 0.0, 2e9), p),
            Resources::new(4.0, 0.0, 2e9)
        );
        // More alive than declared (an undeclared node): what is alive.
        assert_eq!(capacity(cpu(6.0), p), cpu(6.0));
        // A fixed cluster: what is alive.
        assert_eq!(capacity(cpu(3.0), None), cpu(3.0));
        assert!(larger_than_declared(&cpu(6.0), &cpu(4.0)));
        assert!(!larger_than_declared(
            &Resources::new(4.0, 0.0, 9e9),
            &cpu(4.0)
        ));
    }

    #[test]
    fn the_node_type_for_a_job_is_the_tightest_that_holds_it() {
        let c = cluster(None, &[("cpu-8", 8.0, 1), ("cpu-2", 2.0, 2)]);
        assert_eq!(
            node_type_for_unless(&c, &cpu(1.0), |_| false),
            Some("cpu-2")
        );
        assert_eq!(
            node_type_for_unless(&c, &cpu(3.0), |_| false),
            Some("cpu-8")
        );
        assert_eq!(node_type_for_unless(&c, &cpu(9.0), |_| false), None);
    }

    #[test]
    fn a_held_node_type_leaves_the_potential_and_the_others_keep_growing() {
        let now = Instant::now();
        let t = Duration::from_secs(60);
        let c = cluster(Some(1.0), &[("cpu-2", 2.0, 2), ("cpu-8", 8.0, 1)]);
        let mut g = Growth::default();
        assert_eq!(g.potential(&c, now), Some(cpu(1.0 + 4.0 + 8.0)));
        assert!(g.can_grow_for(&c, &cpu(1.0), &cpu(1.0), now));
        assert_eq!(g.hold("cpu-2", now, t), t);
        // cpu-2 out, cpu-8 still counts: a 1-CPU job now waits for a cpu-8 node.
        assert_eq!(g.potential(&c, now), Some(cpu(1.0 + 8.0)));
        assert_eq!(g.node_type_for(&c, &cpu(1.0), now), Some("cpu-8"));
        assert!(g.can_grow_for(&c, &cpu(1.0), &cpu(1.0), now));
        g.hold("cpu-8", now, t);
        assert_eq!(g.potential(&c, now), Some(cpu(1.0)));
        assert_eq!(g.node_type_for(&c, &cpu(1.0), now), None);
        assert!(!g.can_grow_for(&c, &cpu(1.0), &cpu(1.0), now));
        // The holds end after the timeout; the view says which type is held and how long.
        let v = g.view(&c, cpu(1.0), (3, cpu(3.0)), now + Duration::from_secs(20));
        assert_eq!(v.growth_held_for_seconds, Some(40.0));
        assert_eq!(v.node_types[1].name, "cpu-2");
        assert_eq!(v.node_types[1].held_for_seconds, Some(40.0));
        assert_eq!(v.node_types[1].failed_scale_ups, 1);
        assert_eq!(
            v.node_types[0].held_for_seconds, None,
            "the head is never held"
        );
        assert_eq!(v.jobs_waiting_in_ray, 3);
        assert!(!g.is_held("cpu-2", now + t));
        assert_eq!(g.potential(&c, now + t), c.potential());
    }

    #[test]
    fn holds_double_with_each_failure_in_a_row_up_to_the_cap_and_a_node_ends_the_doubling() {
        let t = Duration::from_secs(60);
        let mut now = Instant::now();
        let mut g = Growth::default();
        g.saw_alive(&cluster(Some(1.0), &[("cpu-2", 2.0, 2)]), cpu(1.0));
        let mut lengths = Vec::new();
        for _ in 0..6 {
            let h = g.hold("cpu-2", now, t);
            // Another job that waited for the same scale-up does not lengthen it.
            assert_eq!(
                g.hold("cpu-2", now + Duration::from_secs(1), t),
                h - Duration::from_secs(1)
            );
            lengths.push(h.as_secs() / 60);
            now += h;
        }
        assert_eq!(lengths, [1, 2, 4, 8, 8, 8]);
        // The same alive: still doubling. A node of another type came up (a fresh
        // tester's finding): still doubling. A cpu-2 node came up: one timeout again.
        let c = cluster(Some(1.0), &[("cpu-2", 2.0, 2)]);
        let mut with_gpu = c.clone();
        with_gpu.node_types.push(crate::config::NodeTypeSettings {
            name: "gpu-1".into(),
            resources: [("cpu".to_string(), 1.0), ("gpu".to_string(), 1.0)]
                .into_iter()
                .collect(),
            min_count: 0,
            max_count: 1,
        });
        g.hold("gpu-1", now, t);
        g.saw_alive(&with_gpu, cpu(1.0));
        assert_eq!(g.holds["cpu-2"].failures, 6);
        g.saw_alive(&with_gpu, cpu(3.0));
        assert_eq!(
            g.holds["gpu-1"].failures, 1,
            "a CPU node does not end a GPU type's doubling"
        );
        assert_eq!(g.holds["cpu-2"].failures, 0);
        assert_eq!(g.hold("cpu-2", now, t), t);
    }
}
