//! Database migrations of fairshare (DESIGN §6). Run at `fairshare serve` start and by
//! `fairshare migrate`. Every migration has an `up` and a `down`; one file each
//! (`DeriveMigrationName` takes the file name).

pub use sea_orm_migration::prelude::*;

mod m20261130_000001_create_tables;
mod m20261201_000002_job_attempts;
mod m20261202_000003_leases;
mod m20261203_000004_webhook_cursors;
mod m20261204_000005_ray_packages;
mod m20261205_000006_jobs_queue_count_index;
mod m20261206_000007_queue_counts;
mod m20261207_000008_package_owners;
mod m20261208_000009_user_display_names;
mod m20261209_000010_jobs_queue_index_by_status;
mod m20261210_000011_runtime_env_sealed;
mod m20261211_000012_preemption;
mod m20261212_000013_custom_resources;
mod m20261213_000014_groups;
mod m20261214_000015_pools;
mod m20261215_000016_usage;
mod m20261216_000017_usage_actual;
mod m20261217_000018_job_estimates;

pub use m20261210_000011_runtime_env_sealed::{
    runtime_env_digest, runtime_env_digest_text, unkeyed_digest_of_text,
};

/// The ordered list of migrations.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261130_000001_create_tables::Migration),
            Box::new(m20261201_000002_job_attempts::Migration),
            Box::new(m20261202_000003_leases::Migration),
            Box::new(m20261203_000004_webhook_cursors::Migration),
            Box::new(m20261204_000005_ray_packages::Migration),
            Box::new(m20261205_000006_jobs_queue_count_index::Migration),
            Box::new(m20261206_000007_queue_counts::Migration),
            Box::new(m20261207_000008_package_owners::Migration),
            Box::new(m20261208_000009_user_display_names::Migration),
            Box::new(m20261209_000010_jobs_queue_index_by_status::Migration),
            Box::new(m20261210_000011_runtime_env_sealed::Migration),
            Box::new(m20261211_000012_preemption::Migration),
            Box::new(m20261212_000013_custom_resources::Migration),
            Box::new(m20261213_000014_groups::Migration),
            Box::new(m20261214_000015_pools::Migration),
            Box::new(m20261215_000016_usage::Migration),
            Box::new(m20261216_000017_usage_actual::Migration),
            Box::new(m20261217_000018_job_estimates::Migration),
        ]
    }
}
