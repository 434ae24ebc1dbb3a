//! fairshare: a fair-share job scheduler between an API gateway and Ray clusters.
//!
//! The gateway POSTs jobs; fairshare keeps one queue per user, decides who runs next by
//! weighted dominant-resource fair share with decayed usage, submits the chosen jobs to
//! Ray through its Jobs REST API exactly once, follows them to the end, and reports to
//! admins and Prometheus. The contract is `DESIGN.md`.
//!
//! # Layout
//! Public modules are what the binary, the tests and the simulator use; the rest is
//! private and reached through the re-exports below.
//! - [`policy`] (public): the pure fair-share decision (DRF, decayed usage, sticky
//!   reservation with EASY backfill, age term), kept between cycles in a
//!   [`policy::Ledger`] so that a cycle costs what it grants. No I/O; the arbiter and
//!   the simulator both call it.
//! - [`lifecycle`] (public): the pure job lifecycle — states, events, and what
//!   follows each (the table in its docs). Nothing else decides a transition.
//! - [`secrets`] (public): runtime_envs sealed at rest (AES-256-GCM, rotating keys).
//! - [`store`] (public): repository functions over SeaORM; `store::apply` is the only
//!   writer of job status, the intake writer (`store/intake/`) commits submissions in
//!   batches; and a row as the policy takes it (a queued job's summary, a group, a
//!   resource cap), for the actors and the estimates alike. It imports no HTTP layer.
//! - `actors` (private): the actix actors — one `UserQueue` per user, the
//!   `FairShareArbiter`, the `Dispatcher`, the `RayCapacityMonitor` — which carry
//!   messages between the pure parts and the world; [`Scheduler`] is their handle.
//! - `ray` (private): the Ray Jobs REST client and the one place Ray's answers are
//!   classified.
//! - `api` (private): actix-web routes, auth, errors, OpenAPI, and Ray's Jobs REST API
//!   under `/api/` (`api::ray_compat`); the checks and body shapes several routes
//!   share have one home each (`api::validate`, `api::shapes`), which the routes
//!   import instead of each other; `views` (private): what the scheduler shows,
//!   shared by `actors` and `api`.
//! - [`config`] (public): typed settings (the sections, their checks), importing no
//!   HTTP layer; `user_id` (private): what a user id may be, and `resources_check`
//!   (private): what a job may ask for, the rules the configuration (a `[[sizes]]`
//!   entry is held to a job's) and `api` share; [`telemetry`] (public): `tracing` setup;
//!   `metrics` (private): Prometheus metrics; `errors` (private): the cause-chain
//!   formatter.
//! - [`sim`] (public): SWF traces (read, and seeded synthetic ones written), the
//!   discrete-event simulator and baselines, live replay.
//! - [`estimates`] (public): the estimated start of every waiting job, refreshed off
//!   the arbiter's cycle by a task the scheduler starts (it imports no actor); a
//!   follower reads the leader's from `job_estimates`.
//! - [`leadership`] (public): the lease among replicas on PostgreSQL, fencing terms,
//!   the followers' hand-over to the leader and the leader's catch-up; the SQLite
//!   single-replica lock.
//! - `events` (private): `job_events` read as a feed (readers woken by the store's
//!   commits, gap guard);
//!   `webhooks` (private): delivery of that feed to `[[webhooks]]`, signed.
//! - `faults` (public, feature `fault-injection`, tests only): fault-injection hooks.
//! - `app` (private): wires everything into a running service ([`Application`]);
//!   [`cli`] (public): the command line the binary runs.

mod actors;
mod api;
mod app;
pub mod cli;
pub mod config;
mod errors;
pub mod estimates;
mod events;
#[cfg(feature = "fault-injection")]
pub mod faults;
pub mod leadership;
pub mod lifecycle;
mod mac;
mod metrics;
pub mod policy;
mod ray;
mod resources_check;
pub mod secrets;
pub mod sim;
pub mod store;
pub mod telemetry;
mod user_id;
mod views;
mod webhooks;

pub use actors::Scheduler;
pub use api::error::ERROR_CODES;
/// How Ray's dashboard writes JSON (Python's `json.dumps`), and its `JobDetails` order.
pub use api::ray_compat::pyjson as ray_json;
/// The `/api/` routes of Ray's Jobs REST API, as `(method, path)`.
pub use api::ray_compat::ROUTES as RAY_API_ROUTES;
/// The answer of `GET /v1/usage` made of `store::usage_report`'s rows (what
/// `scripts/bench-usage` times after the read).
pub use api::usage::report_of as usage_report_view;
pub use api::ROUTES;
pub use app::Application;
pub use config::Settings;
pub use errors::chain as error_chain;
/// Attempts' watchers and their signed notifications (DESIGN §5).
pub use ray::notify;
