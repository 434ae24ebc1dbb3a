//! Real input: Standard Workload Format traces, the discrete-event fair-share
//! simulator (virtual time, the same [`crate::policy`] the arbiter runs) with baseline
//! policies, and live replay of a trace against a running service.

pub mod swf;
