//! HTTP integration tests: the real server, a fresh database per test, on SQLite and
//! on PostgreSQL.

mod helpers;
mod hostile;
mod jobs;
mod ray_mock;
mod system;
mod users;
