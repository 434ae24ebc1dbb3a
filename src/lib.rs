//! fairshare: a fair-share job scheduler between an API gateway and Ray clusters.
//!
//! The gateway POSTs jobs; fairshare keeps one queue per user, decides who runs next by
//! weighted dominant-resource fair share with decayed usage, submits the chosen jobs to
//! Ray through its Jobs REST API exactly once, follows them to the end, and reports to
//! admins and Prometheus. The contract is `DESIGN.md`.
//!
//! # Layout
//! - [`policy`]: the pure fair-share decision (DRF, decayed usage, backfill,
//!   starvation guard). No I/O; the arbiter and the simulator both call it.
//! - [`actors`]: the actix actors — one `UserQueue` per user, the
//!   `FairShareArbiter`, the `Dispatcher`, the `RayCapacityMonitor` — and their
//!   messages; [`actors::Scheduler`] is the handle the API uses.
//! - [`ray`]: the Ray Jobs REST client (submit, status, stop, logs, capacity) and
//!   idempotent submission with retries.
//! - [`store`]: repository functions over SeaORM; every status change and its
//!   `job_events` row in one transaction.
//! - [`api`]: actix-web routes, auth, errors, OpenAPI.
//! - [`config`]: typed settings (`config` crate); [`telemetry`]: `tracing` setup;
//!   [`metrics`]: Prometheus metrics.
//! - [`sim`]: SWF traces, the discrete-event simulator and baselines, live replay.
//! - [`leadership`]: the lease among replicas on PostgreSQL, fencing terms, the
//!   followers' hand-over to the leader; the SQLite single-replica lock.
//! - [`app`]: wires everything into a running service.

pub mod actors;
pub mod api;
pub mod app;
pub mod config;
pub mod leadership;
pub mod lifecycle;
pub mod metrics;
pub mod policy;
pub mod ray;
pub mod sim;
pub mod store;

pub mod telemetry;
pub mod views;

pub use app::Application;
pub use config::Settings;
