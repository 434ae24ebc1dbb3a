//! SeaORM entities of fairshare: `users`, `groups` (DESIGN §2 "Groups"), `jobs`, `job_events`, `leases` (DESIGN §6, §10),
//! `webhook_cursors` (§4), `ray_packages` (docs/ray-jobs-api.md).
//!
//! Timestamps are UTC (`DateTime<Utc>`); resources are in cores (`cpu`, `gpu`) and
//! bytes (`memory_bytes`).

pub mod group;
pub mod job;
pub mod job_event;
pub mod lease;
pub mod ray_package;
pub mod user;
pub mod webhook_cursor;

pub use job::JobStatus;
