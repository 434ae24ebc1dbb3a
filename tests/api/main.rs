//! HTTP integration tests: the real server, a fresh database per test, on SQLite and
//! on PostgreSQL.

mod burst;
mod console;
mod events;
mod fake_ray;
mod helpers;
mod hostile;
mod intake;
mod jobs;
mod leadership;
mod openapi;
mod queue_counts;
mod ray_api;
mod ray_edges;
mod ray_mock;
mod system;
mod tester_findings;
mod users;
mod what_if;
