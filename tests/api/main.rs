//! HTTP integration tests: the real server, a fresh database per test, on SQLite and
//! on PostgreSQL.

mod accounting;
mod admission;
mod autoscaling;
mod browsers;
mod burst;
mod console;
mod custom;
mod edge_races;
mod estimates;
mod events;
mod fake_ray;
mod groups;
mod helpers;
mod hints;
mod hostile;
mod identity;
mod intake;
mod jobs;
mod leadership;
mod openapi;
mod packages;
mod preemption;
mod queue_counts;
mod ray_api;
mod ray_bytes;
mod ray_edges;
mod ray_mock;
mod secrets;
mod system;
mod tester_findings;
mod trusted;
mod usage;
mod users;
mod what_if;
