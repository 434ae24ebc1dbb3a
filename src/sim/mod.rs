//! Real input: Standard Workload Format traces, the discrete-event fair-share
//! simulator (virtual time, the same [`crate::policy`] the arbiter runs) with baseline
//! policies, and live replay of a trace against a running service.
//!
//! - [`swf`]: reading SWF traces.
//! - [`mod@simulate`]: the discrete-event simulator and the policies it replays
//!   (fairshare, fifo, gateway-loop, and the anchors: Slurm, Kueue, Armada and
//!   YuniKorn, [`simulate::anchors`]), on a fixed cluster or an autoscaling one
//!   ([`simulate::autoscale`]).
//! - [`report`]: waits, bounded slowdown, utilization, fairness error and Jain's
//!   index, per user and overall; the comparison of the policies.
//! - [`stats`]: percentiles, means, bounded slowdown, fair shares and Jain's
//!   index, shared by the simulator's report and the live replay's.
//! - [`plot`]: SVG plot of actual against fair share over time.
//! - [`replay`]: posting a trace to a running service in scaled real time, and its report.
//! - [`run`]: the `simulate` command's entry point, [`run_simulate`].
//! - [`synth`]: seeded synthetic traces of chosen shapes, written as SWF
//!   (`fairshare trace`).

pub mod plot;
pub mod replay;
pub mod report;
pub mod run;
pub mod simulate;
pub mod stats;
pub mod swf;
pub mod synth;

#[cfg(test)]
mod anchor_tests;
#[cfg(test)]
mod autoscale_tests;
#[cfg(test)]
mod golden;
#[cfg(test)]
mod preempt_tests;
#[cfg(test)]
mod tests;

pub use report::{compare, Comparison, Report};
pub use run::{load_weights, run_simulate, SimError, SimulateArgs, SimulationReport};
pub use simulate::{simulate, Preemptible, SimConfig, SimOutcome, SimPolicy};
