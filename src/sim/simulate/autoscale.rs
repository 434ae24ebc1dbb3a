//! Autoscaling clusters (issue 44, part 5): worker nodes that Ray's autoscaler starts
//! when work waits inside Ray and removes when they have been idle.
//!
//! # Model (`simulate --autoscale`; [`Autoscale`])
//!
//! The cluster is a head of `head_cpus` cores (0: KubeRay's recommended head that takes
//! no work), always up, and worker nodes of the given [`NodeType`]s, each between its
//! `min` and `max` count. The `min` nodes of each type are up from the simulation's
//! start (the first submit) and are never removed.
//!
//! - **The policy sees the potential.** Every policy fits jobs against the cluster's
//!   *potential*, `head_cpus + Σ max × cpus` ([`Autoscale::potential`], the
//!   simulator's capacity), as the service does for an autoscaling cluster: a job
//!   granted beyond what is alive is sent to Ray, which holds it PENDING while a
//!   node starts. It counts toward its user's allocation (and the fairness metrics)
//!   from the grant.
//! - **A granted job runs only on a node that is up.** Granted jobs wait, in grant
//!   order, until some node that is up has room for the whole job (a job runs on one
//!   node); they are placed first fit, the head first and then the workers in launch
//!   order. The job's wait, and its finish, count from that real start.
//! - **The autoscaler** runs at every event: the granted jobs that did not find room
//!   are packed, in grant order, first fit onto the room of the nodes still starting,
//!   and each one that does not fit there launches a node of the smallest type that can
//!   hold it (by cores, ties in the order given) whose count (starting and up) is below
//!   its `max`; when every type that could hold it is at its maximum, it waits for
//!   room. A node launched at `t` is up at `t + start_delay_s`.
//! - **Idle nodes go.** A worker with nothing on it since `t` is removed at
//!   `t + idle_timeout_s` while its type has more than `min` nodes (the least recently
//!   used first, as Ray's autoscaler chooses); a node starting is never removed.
//! - A job wider than the head and every node type can never run: it is skipped and
//!   listed with the jobs too large ([`super::SimOutcome::too_large`]).
//!
//! What Ray does that this leaves out: its autoscaler's update interval (5 s by default)
//! and its per-round launch limits (`upscaling_speed`), launch failures, and the fake
//! provider's one node per round (docs/ray.md, "Autoscaling clusters"); Ray's own
//! placement (hybrid: pack up to half a node, then spread) is first fit here.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{Finish, SimJob};
use crate::policy::Seconds;
use std::cmp::Reverse;

/// `simulate --start-delay`'s default, seconds: a cloud VM or a Kubernetes pod on a new
/// node takes about a minute or more to join (the fake provider's 2–3 s is a floor).
pub const DEFAULT_START_DELAY_S: Seconds = 60.0;

/// `simulate --idle-timeout`'s default, seconds: KubeRay's `idleTimeoutSeconds` default
/// (Ray's cluster launcher's `idle_timeout_minutes` is 5).
pub const DEFAULT_IDLE_TIMEOUT_S: Seconds = 60.0;

/// One kind of worker node the autoscaler may start: Ray's `available_node_types`
/// entry, KubeRay's `workerGroupSpecs` item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeType {
    /// Its name (`cpu-2`), for reports.
    pub name: String,
    /// Cores per node, at least 1.
    pub cpus: u32,
    /// Nodes always up (`min_workers`, `minReplicas`).
    pub min: u32,
    /// Most nodes at once, starting or up (`max_workers`, `maxReplicas`), at least 1
    /// and at least `min`.
    pub max: u32,
}

impl FromStr for NodeType {
    type Err = String;

    /// `cpus=N,max=M` with optional `min=K` (default 0) and `name=TEXT` (default
    /// `cpu-N`), in any order, each key once, e.g. `cpus=32,min=1,max=50,name=worker`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (mut cpus, mut min, mut max, mut name) = (None, 0u32, None, None);
        let number = |key: &str, value: &str| {
            value.trim().parse::<u32>().map_err(|_| {
                format!("{key}={value:?} in node type {s:?}: expected a whole number ≥ 0")
            })
        };
        // A key given twice is refused: `cpus=4,cpus=8` took the last (a tester's
        // finding), and which one was meant cannot be known.
        let mut given: Vec<&str> = Vec::new();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                format!("{part:?} in node type {s:?}: expected KEY=VALUE (cpus, min, max, name)")
            })?;
            let key = key.trim();
            if given.contains(&key) {
                return Err(format!(
                    "{key} is given twice in node type {s:?}: give each key once"
                ));
            }
            given.push(key);
            match key {
                "cpus" => cpus = Some(number("cpus", value)?),
                "min" => min = number("min", value)?,
                "max" => max = Some(number("max", value)?),
                "name" if !value.trim().is_empty() => name = Some(value.trim().to_owned()),
                "name" => return Err(format!("name in node type {s:?} is empty")),
                other => {
                    return Err(format!(
                        "unknown key {other:?} in node type {s:?}: expected cpus, min, max or name"
                    ))
                }
            }
        }
        let cpus = cpus.ok_or_else(|| format!("node type {s:?} has no cpus=N"))?;
        let max = max.ok_or_else(|| format!("node type {s:?} has no max=M"))?;
        let node_type = NodeType {
            name: name.unwrap_or_else(|| format!("cpu-{cpus}")),
            cpus,
            min,
            max,
        };
        node_type.check()?;
        Ok(node_type)
    }
}

impl NodeType {
    /// Its cores at least 1, `max` at least 1 and at least `min`.
    fn check(&self) -> Result<(), String> {
        if self.cpus == 0 {
            return Err(format!("node type {}: cpus must be at least 1", self.name));
        }
        if self.max == 0 {
            return Err(format!("node type {}: max must be at least 1", self.name));
        }
        if self.min > self.max {
            return Err(format!(
                "node type {}: min {} is above max {}",
                self.name, self.min, self.max
            ));
        }
        Ok(())
    }
}

impl fmt::Display for NodeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} cores, {}–{} nodes)",
            self.name, self.cpus, self.min, self.max
        )
    }
}

/// An autoscaling cluster (`simulate --autoscale`): the head, the worker node types,
/// how long a node takes to start and how long an idle one stays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Autoscale {
    /// Cores of the head, always up; 0 for a head that takes no work.
    pub head_cpus: u32,
    /// The worker node types, at least one.
    pub node_types: Vec<NodeType>,
    /// Seconds from a node's launch to its being usable.
    pub start_delay_s: Seconds,
    /// Seconds a worker with nothing on it stays before it is removed.
    pub idle_timeout_s: Seconds,
}

impl Autoscale {
    /// Cores the cluster can grow to: `head_cpus + Σ max × cpus`.
    #[must_use]
    pub fn potential(&self) -> u64 {
        u64::from(self.head_cpus)
            + self
                .node_types
                .iter()
                .map(|t| u64::from(t.max) * u64::from(t.cpus))
                .sum::<u64>()
    }

    /// Cores of the widest node (head or worker type): no job wider can ever run.
    #[must_use]
    pub fn widest_node(&self) -> u32 {
        self.node_types
            .iter()
            .map(|t| t.cpus)
            .fold(self.head_cpus, u32::max)
    }

    /// Errors: no node type, a type with 0 cores or a maximum of 0 or below its
    /// minimum, two types of one name, a delay or timeout negative or not finite, a
    /// potential above `u32::MAX` cores; each message names what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.node_types.is_empty() {
            return Err("no node type: give at least one --node-type".to_owned());
        }
        for (k, t) in self.node_types.iter().enumerate() {
            t.check()?;
            if self.node_types[..k].iter().any(|o| o.name == t.name) {
                return Err(format!("two node types are named {}", t.name));
            }
        }
        for (name, v) in [
            ("start delay (--start-delay)", self.start_delay_s),
            ("idle timeout (--idle-timeout)", self.idle_timeout_s),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{name} is {v} s; must be a finite number ≥ 0"));
            }
        }
        if self.potential() > u64::from(u32::MAX) {
            return Err(format!(
                "the potential, {} cores, is above {} cores",
                self.potential(),
                u32::MAX
            ));
        }
        Ok(())
    }

    /// One line for a report's header: head, types, delays, potential.
    #[must_use]
    pub fn describe(&self) -> String {
        let types: Vec<String> = self.node_types.iter().map(ToString::to_string).collect();
        format!(
            "autoscaling: head {} cores, workers {}, start delay {} s, idle timeout {} s, \
             potential {} cores",
            self.head_cpus,
            types.join(", "),
            self.start_delay_s,
            self.idle_timeout_s,
            self.potential()
        )
    }
}

/// One node's life in an autoscaled run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeLife {
    /// Index of its type in [`Autoscale::node_types`]; `None` for the head.
    pub node_type: Option<usize>,
    /// Its cores.
    pub cpus: u32,
    /// When it was launched, seconds since the trace start.
    pub launched: Seconds,
    /// When it was up (usable): `launched + start_delay_s`, or the start for the head
    /// and the `min` nodes.
    pub up: Seconds,
    /// When it was removed; `None` if it never was (the head, the `min` nodes, or
    /// nodes still up when nothing was left to happen).
    pub removed: Option<Seconds>,
}

/// What the autoscaler did in a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AutoscaleOutcome {
    /// Every node, the head first, then the workers in launch order.
    pub nodes: Vec<NodeLife>,
    /// Per job of [`super::SimOutcome::jobs`] (same index): the node its final run ran on.
    pub job_nodes: Vec<usize>,
    /// Per job of [`super::SimOutcome::jobs`]: when the policy granted its final run
    /// (its start is when a node held it).
    pub granted: Vec<Seconds>,
}

impl AutoscaleOutcome {
    /// Core-seconds and worker node-seconds up within `[from, to]` (the head's cores
    /// count, the head is not a worker node).
    #[must_use]
    pub fn alive_within(&self, from: Seconds, to: Seconds) -> (f64, f64) {
        let (mut core_s, mut node_s) = (0.0, 0.0);
        for node in &self.nodes {
            let end = node.removed.unwrap_or(f64::INFINITY).min(to);
            let span = (end - node.up.max(from)).max(0.0);
            core_s += f64::from(node.cpus) * span;
            if node.node_type.is_some() {
                node_s += span;
            }
        }
        (core_s, node_s)
    }

    /// Worker nodes launched, the `min` nodes present from the start included.
    #[must_use]
    pub fn workers_started(&self) -> usize {
        self.nodes.iter().filter(|n| n.node_type.is_some()).count()
    }
}

/// A node while the simulation runs.
#[derive(Clone, Debug)]
struct NodeState {
    used: u32,
    /// Up with nothing on it since then.
    idle_since: Option<Seconds>,
}

/// The autoscaled cluster's state in a simulation.
#[derive(Debug)]
pub(super) struct Scaler {
    config: Autoscale,
    /// Node types' indices by cores, ties in the order given.
    by_size: Vec<usize>,
    lives: Vec<NodeLife>,
    states: Vec<NodeState>,
    /// Nodes not removed: the head first, then workers in launch order.
    live: Vec<usize>,
    /// Per type: nodes not removed (starting or up).
    counts: Vec<u32>,
    /// Granted jobs without a node, in grant order.
    pending: Vec<usize>,
    /// Per job: the node of its current run, the node of its last run placed, and
    /// its last grant time.
    job_node: Vec<Option<usize>>,
    ran_on: Vec<usize>,
    granted: Vec<Seconds>,
}

impl Scaler {
    /// The cluster at `t0`: the head and every type's `min` nodes up, for `jobs` jobs.
    pub(super) fn new(config: &Autoscale, t0: Seconds, jobs: usize) -> Scaler {
        let mut by_size: Vec<usize> = (0..config.node_types.len()).collect();
        by_size.sort_by_key(|&k| config.node_types[k].cpus);
        let mut scaler = Scaler {
            config: config.clone(),
            by_size,
            lives: Vec::new(),
            states: Vec::new(),
            live: Vec::new(),
            counts: vec![0; config.node_types.len()],
            pending: Vec::new(),
            job_node: vec![None; jobs],
            ran_on: vec![usize::MAX; jobs],
            granted: vec![0.0; jobs],
        };
        scaler.add(None, config.head_cpus, t0, t0);
        for (k, t) in config.node_types.iter().enumerate() {
            for _ in 0..t.min {
                scaler.add(Some(k), t.cpus, t0, t0);
            }
        }
        scaler
    }

    fn add(&mut self, node_type: Option<usize>, cpus: u32, launched: Seconds, up: Seconds) {
        self.live.push(self.lives.len());
        self.lives.push(NodeLife {
            node_type,
            cpus,
            launched,
            up,
            removed: None,
        });
        self.states.push(NodeState {
            used: 0,
            idle_since: None,
        });
        if let Some(k) = node_type {
            self.counts[k] += 1;
        }
    }

    /// Job `j` was granted at `now`: it waits for a node.
    pub(super) fn grant(&mut self, j: usize, now: Seconds) {
        self.granted[j] = now;
        self.pending.push(j);
    }

    /// Job `j`'s run ended or was stopped: its node's room is free, or it no longer
    /// waits for one.
    pub(super) fn release(&mut self, j: usize, cpus: u32) {
        match self.job_node[j].take() {
            Some(n) => self.states[n].used -= cpus,
            None => self.pending.retain(|&k| k != j),
        }
    }

    /// The next instant something happens to the nodes after `now`: a node up, or an
    /// idle one removed.
    pub(super) fn next_event(&self, now: Seconds) -> Option<Seconds> {
        let mut next = f64::INFINITY;
        for &n in &self.live {
            let life = &self.lives[n];
            if life.up > now {
                next = next.min(life.up);
            } else if let (Some(k), Some(since)) = (life.node_type, self.states[n].idle_since) {
                let at = since + self.config.idle_timeout_s;
                if at > now && self.counts[k] > self.config.node_types[k].min {
                    next = next.min(at);
                }
            }
        }
        next.is_finite().then_some(next)
    }

    /// The autoscaler at `now`: places the granted jobs that fit on nodes up (returns
    /// them, in grant order, to be started), launches nodes for those that do not,
    /// removes the nodes idle for the timeout.
    pub(super) fn step(&mut self, now: Seconds, jobs: &[SimJob]) -> Vec<usize> {
        let mut placed = Vec::new();
        loop {
            self.place(now, jobs, &mut placed);
            if !self.launch(now, jobs) {
                break;
            }
        }
        for &n in &self.live {
            let state = &mut self.states[n];
            if self.lives[n].up <= now {
                if state.used > 0 {
                    state.idle_since = None;
                } else if state.idle_since.is_none() {
                    state.idle_since = Some(now);
                }
            }
        }
        self.remove_idle(now);
        placed
    }

    /// Places pending jobs, in grant order, first fit on the nodes up.
    fn place(&mut self, now: Seconds, jobs: &[SimJob], placed: &mut Vec<usize>) {
        if self.pending.is_empty() {
            return;
        }
        let room = |s: &Scaler| {
            s.live
                .iter()
                .filter(|&&n| s.lives[n].up <= now)
                .map(|&n| s.lives[n].cpus - s.states[n].used)
                .max()
                .unwrap_or(0)
        };
        let mut most = room(self);
        if most == 0 {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        for j in pending {
            let cpus = jobs[j].cpus;
            let node = (cpus <= most)
                .then(|| {
                    self.live.iter().copied().find(|&n| {
                        self.lives[n].up <= now && self.lives[n].cpus - self.states[n].used >= cpus
                    })
                })
                .flatten();
            match node {
                Some(n) => {
                    self.states[n].used += cpus;
                    self.states[n].idle_since = None;
                    self.job_node[j] = Some(n);
                    self.ran_on[j] = n;
                    placed.push(j);
                    most = room(self);
                }
                None => self.pending.push(j),
            }
        }
    }

    /// Launches the nodes the pending jobs need beyond the room of the nodes starting;
    /// whether one of them is already up (no start delay).
    fn launch(&mut self, now: Seconds, jobs: &[SimJob]) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        let mut room: Vec<u32> = self
            .live
            .iter()
            .filter(|&&n| self.lives[n].up > now)
            .map(|&n| self.lives[n].cpus - self.states[n].used)
            .collect();
        let mut up_now = false;
        for k in 0..self.pending.len() {
            let cpus = jobs[self.pending[k]].cpus;
            if let Some(r) = room.iter_mut().find(|r| **r >= cpus) {
                *r -= cpus;
                continue;
            }
            let types = &self.config.node_types;
            let Some(t) = self
                .by_size
                .iter()
                .copied()
                .find(|&t| types[t].cpus >= cpus && self.counts[t] < types[t].max)
            else {
                continue;
            };
            let node_cpus = types[t].cpus;
            let up = now + self.config.start_delay_s;
            self.add(Some(t), node_cpus, now, up);
            room.push(node_cpus - cpus);
            up_now |= up <= now;
        }
        up_now
    }

    /// Removes the workers idle for the timeout, least recently used first, while
    /// their type has more than its minimum.
    fn remove_idle(&mut self, now: Seconds) {
        let timeout = self.config.idle_timeout_s;
        let mut due: Vec<(Seconds, usize)> = self
            .live
            .iter()
            .filter(|&&n| self.lives[n].node_type.is_some())
            .filter_map(|&n| {
                let since = self.states[n].idle_since?;
                (since + timeout <= now).then_some((since, n))
            })
            .collect();
        if due.is_empty() {
            return;
        }
        due.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (_, n) in due {
            let Some(k) = self.lives[n].node_type else {
                continue;
            };
            if self.counts[k] > self.config.node_types[k].min {
                self.counts[k] -= 1;
                self.lives[n].removed = Some(now);
                self.live.retain(|&m| m != n);
            }
        }
    }

    /// What happened, with the jobs of the outcome (`ran`: each outcome job's index
    /// among the simulation's jobs).
    pub(super) fn into_outcome(self, ran: &[usize]) -> AutoscaleOutcome {
        AutoscaleOutcome {
            job_nodes: ran.iter().map(|&j| self.ran_on[j]).collect(),
            granted: ran.iter().map(|&j| self.granted[j]).collect(),
            nodes: self.lives,
        }
    }
}

impl super::Sim<'_> {
    /// The autoscaler's step at `now` (autoscaled runs only): the jobs it places start.
    pub(super) fn autoscale_step(&mut self, now: Seconds) {
        let Some(scaler) = &mut self.scaler else {
            return;
        };
        for j in scaler.step(now, &self.jobs) {
            let job = &mut self.jobs[j];
            job.run_start = Some(now);
            self.finishes
                .push(Reverse(Finish(now + job.run, j, job.preemptions)));
        }
    }
}
