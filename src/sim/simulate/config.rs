//! What a simulation run is configured with: the policy, the scheduler's knobs, the
//! weights, which jobs may be preempted.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::DEFAULT_SEED;
use crate::policy::{PreemptionConfig, Seconds};

/// A scheduling policy the simulator can replay a trace with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SimPolicy {
    /// Weighted fair share with decayed usage, backfill and the starvation
    /// guard: [`crate::policy::run_cycle`].
    #[serde(rename = "fairshare")]
    FairShare,
    /// Strict submit order, no backfill.
    #[serde(rename = "fifo")]
    Fifo,
    /// The polling loop of the API gateway: a pass a second, at most one job
    /// per user per pass, at most 2 running per user, random user order.
    #[serde(rename = "gateway-loop")]
    GatewayLoop,
    /// Slurm's `priority/multifactor` with the classic fair-share factor
    /// `F = 2^(-U/S)`, the age factor and EASY backfill (issue 47; see
    /// [`super::anchors`]).
    #[serde(rename = "slurm")]
    SlurmMultifactor,
    /// Slurm's multifactor priority with the Fair Tree fair-share factor (the
    /// default since Slurm 19.05), EASY backfill.
    #[serde(rename = "slurm-fairtree")]
    SlurmFairTree,
    /// Kueue's Admission Fair Sharing (KEP-4136): one LocalQueue per user in one
    /// ClusterQueue, ordered by decayed usage, BestEffortFIFO; never preempts.
    #[serde(rename = "kueue-afs")]
    KueueAfs,
    /// Kueue's fair sharing (KEP-1714): one ClusterQueue per user in a cohort,
    /// admission by dominant resource share; with preemptible jobs, preemption
    /// with `LessThanOrEqualToFinalShare` then `LessThanInitialShare`.
    #[serde(rename = "kueue-fair")]
    KueueFairSharing,
    /// Armada: queues by DRF cost; with preemptible jobs, preemption to fair
    /// share with `protectedFractionOfFairShare`.
    #[serde(rename = "armada")]
    Armada,
    /// YuniKorn: the `fair` queue sort (allocated / guaranteed), `fifo`
    /// application sort within a queue.
    #[serde(rename = "yunikorn")]
    YuniKorn,
}

impl SimPolicy {
    /// All policies, in the order the comparison prints them.
    pub const ALL: [SimPolicy; 9] = [
        SimPolicy::FairShare,
        SimPolicy::Fifo,
        SimPolicy::GatewayLoop,
        SimPolicy::SlurmMultifactor,
        SimPolicy::SlurmFairTree,
        SimPolicy::KueueAfs,
        SimPolicy::KueueFairSharing,
        SimPolicy::Armada,
        SimPolicy::YuniKorn,
    ];

    /// The anchors (issue 47): the other projects' policies, in
    /// [`SimPolicy::ALL`] order.
    pub const ANCHORS: [SimPolicy; 6] = [
        SimPolicy::SlurmMultifactor,
        SimPolicy::SlurmFairTree,
        SimPolicy::KueueAfs,
        SimPolicy::KueueFairSharing,
        SimPolicy::Armada,
        SimPolicy::YuniKorn,
    ];

    /// The policy's name on the command line and in reports: `fairshare`,
    /// `fifo`, `gateway-loop`, `slurm`, `slurm-fairtree`, `kueue-afs`,
    /// `kueue-fair`, `armada` or `yunikorn`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            SimPolicy::FairShare => "fairshare",
            SimPolicy::Fifo => "fifo",
            SimPolicy::GatewayLoop => "gateway-loop",
            SimPolicy::SlurmMultifactor => "slurm",
            SimPolicy::SlurmFairTree => "slurm-fairtree",
            SimPolicy::KueueAfs => "kueue-afs",
            SimPolicy::KueueFairSharing => "kueue-fair",
            SimPolicy::Armada => "armada",
            SimPolicy::YuniKorn => "yunikorn",
        }
    }

    /// Whether the policy stops preemptible jobs (`--preemptible`): fairshare,
    /// kueue-fair and armada; the others never preempt.
    #[must_use]
    pub const fn preempts(self) -> bool {
        matches!(
            self,
            SimPolicy::FairShare | SimPolicy::KueueFairSharing | SimPolicy::Armada
        )
    }

    /// Whether the policy is one of the anchors ([`SimPolicy::ANCHORS`]).
    #[must_use]
    pub const fn is_anchor(self) -> bool {
        !matches!(
            self,
            SimPolicy::FairShare | SimPolicy::Fifo | SimPolicy::GatewayLoop
        )
    }
}

impl fmt::Display for SimPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A policy name that is not one of [`SimPolicy::ALL`]'s.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown policy {0:?}: expected fairshare, fifo, gateway-loop, slurm, slurm-fairtree, \
     kueue-afs, kueue-fair, armada or yunikorn"
)]
pub struct UnknownPolicy(pub String);

impl FromStr for SimPolicy {
    type Err = UnknownPolicy;

    /// Parses `fairshare` (also `fair-share`, `fair_share`), `fifo`,
    /// `gateway-loop` (also `gateway_loop`, `gateway`), and the anchors by their
    /// [`SimPolicy::name`] (`_` for `-` too), ignoring ASCII case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fairshare" | "fair-share" | "fair_share" => Ok(SimPolicy::FairShare),
            "fifo" => Ok(SimPolicy::Fifo),
            "gateway-loop" | "gateway_loop" | "gateway" => Ok(SimPolicy::GatewayLoop),
            other => SimPolicy::ANCHORS
                .into_iter()
                .find(|p| p.name() == other.replace('_', "-"))
                .ok_or_else(|| UnknownPolicy(s.to_owned())),
        }
    }
}

/// Everything one simulation run needs besides the trace.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimConfig {
    /// The policy to replay with.
    pub policy: SimPolicy,
    /// Cores of the simulated cluster.
    pub capacity: u32,
    /// Half-life `T` of decayed usage, seconds; 0 turns history off
    /// (fairshare only).
    pub half_life_s: Seconds,
    /// Starvation guard, seconds; `f64::INFINITY` disables it (fairshare only).
    pub starvation_guard_s: Seconds,
    /// Typical run times a head may wait before it is starved, when shorter than
    /// the guard (`scheduler.starvation_runs`); 0 turns it off (fairshare only).
    #[serde(default)]
    pub starvation_runs: f64,
    /// Backfill on (EASY around the reservation) or off (strict order)
    /// (fairshare only).
    pub backfill: bool,
    /// Weight of the age term, dominant-share units (fairshare only).
    pub age_weight: f64,
    /// Age at which the age term saturates, seconds (fairshare only).
    pub max_age_s: Seconds,
    /// Cap on each user's running jobs (fairshare only); `u32::MAX` =
    /// unlimited.
    pub max_running_jobs: u32,
    /// Weight per user; users not listed have weight 1 (fairshare's order,
    /// and every policy's fair share in the fairness metrics).
    pub weights: BTreeMap<String, f64>,
    /// Seed of the gateway loop's random user order, and of the choice of
    /// preemptible jobs.
    pub seed: u64,
    /// Which jobs may be preempted (fairshare only).
    pub preemptible: Preemptible,
    /// Groups of users (`--groups`): none, or the trace's group field (SWF field
    /// 13, each group weight 1, a user in the group of its first job). With groups
    /// fairshare's order is hierarchical, and every policy's fair shares in the
    /// fairness metrics are (a user's is its group's, divided).
    #[serde(default)]
    pub groups: SimGroups,
    /// When a head may preempt (fairshare only; see
    /// [`crate::policy::PreemptionConfig`]).
    pub preemption: PreemptionConfig,
    /// An autoscaling cluster (`--autoscale`), or `None` for a fixed one of
    /// `capacity` cores. With one, `capacity` is its potential
    /// ([`super::Autoscale::potential`]; [`SimConfig::autoscaled`] sets both): what
    /// every policy fits jobs against ([`super::autoscale`] has the model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<super::Autoscale>,
    /// Users whose actual and fair share over time are recorded in
    /// [`SimOutcome::series`] (for plots).
    ///
    /// [`SimOutcome::series`]: super::SimOutcome::series
    #[serde(skip)]
    pub record_shares_for: Vec<String>,
}

impl SimConfig {
    /// A configuration with the service's defaults (`[scheduler]` of
    /// `config/default.toml`: half-life, starvation guard, backfill, age term),
    /// unlimited running jobs, all weights 1, seed [`DEFAULT_SEED`], nothing
    /// recorded.
    #[must_use]
    pub fn new(policy: SimPolicy, capacity: u32) -> SimConfig {
        let defaults = crate::config::Settings::defaults().scheduler.policy();
        SimConfig {
            policy,
            capacity,
            half_life_s: defaults.usage_half_life,
            starvation_guard_s: defaults.starvation_guard,
            starvation_runs: defaults.starvation_runs,
            backfill: defaults.backfill,
            age_weight: defaults.age_weight,
            max_age_s: defaults.max_age,
            max_running_jobs: u32::MAX,
            weights: BTreeMap::new(),
            seed: DEFAULT_SEED,
            preemptible: Preemptible::None,
            groups: SimGroups::None,
            preemption: PreemptionConfig::default(),
            autoscale: None,
            record_shares_for: Vec::new(),
        }
    }

    /// This configuration on the autoscaling cluster `autoscale`: its capacity becomes
    /// the cluster's potential (at most `u32::MAX` cores: [`super::Autoscale::validate`]
    /// checks it).
    #[must_use]
    pub fn autoscaled(self, autoscale: super::Autoscale) -> SimConfig {
        SimConfig {
            capacity: u32::try_from(autoscale.potential()).unwrap_or(u32::MAX),
            autoscale: Some(autoscale),
            ..self
        }
    }

    /// Whether trace job `number` may be preempted under this configuration: all,
    /// none, or a seeded choice of the given fraction (the same jobs for the same
    /// seed, whatever the policy or the capacity).
    #[must_use]
    pub fn is_preemptible(&self, number: u64) -> bool {
        match self.preemptible {
            Preemptible::None => false,
            Preemptible::All => true,
            Preemptible::Fraction(f) => unit_hash(self.seed, number) < f,
        }
    }

    /// The weight of `user`: from [`SimConfig::weights`], else 1.
    #[must_use]
    pub fn weight_of(&self, user: &str) -> f64 {
        self.weights.get(user).copied().unwrap_or(1.0)
    }
}

/// Groups in a simulation (`--groups`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SimGroups {
    /// Every user in the root.
    #[default]
    None,
    /// SWF's group field (13): a user in the group of its first job.
    Swf,
}

impl FromStr for SimGroups {
    type Err = String;

    /// `none` or `swf`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(SimGroups::None),
            "swf" => Ok(SimGroups::Swf),
            _ => Err(format!("{s:?}: expected none or swf")),
        }
    }
}

/// Which jobs may be preempted in a simulation (`--preemptible`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preemptible {
    /// None: every decision is the non-preemptive policy's.
    None,
    /// Every job.
    All,
    /// Each job with this probability (in `[0, 1]`), chosen from the seed and its
    /// job number.
    Fraction(f64),
}

impl FromStr for Preemptible {
    type Err = String;

    /// `all`, `none`, or a fraction in `[0, 1]` such as `0.5`; a fraction of 0 is
    /// `none`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "all" => Ok(Preemptible::All),
            "none" => Ok(Preemptible::None),
            other => match other.parse::<f64>() {
                Ok(0.0) => Ok(Preemptible::None),
                Ok(f) if (0.0..=1.0).contains(&f) => Ok(Preemptible::Fraction(f)),
                _ => Err(format!(
                    "{s:?}: expected all, none, or a fraction between 0 and 1"
                )),
            },
        }
    }
}

/// A number in `[0, 1)` from a seed and a job number (SplitMix64's finalizer).
fn unit_hash(seed: u64, number: u64) -> f64 {
    let mut z = seed ^ number.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}
