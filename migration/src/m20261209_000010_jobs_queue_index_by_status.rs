//! Issue 27: the index of a user's jobs by status and priority leads with `status`,
//! `(status, user_id, priority)` instead of `(user_id, status, priority)`, so that the
//! unique `(user_id, external_id)` index is the only one leading with `user_id`.
//!
//! Intake looks a batch's `(user, external_id)` pairs up with prepared statements whose
//! generic plan is made once per connection, at its first batch. On a new or small
//! `jobs` table without statistics both indexes leading with `user_id` cost the same
//! (one row, one page), and PostgreSQL 15 took `(user_id, status, priority)`, with
//! `external_id` as a filter: every look-up then read every job of the user, and kept
//! doing so for the connection's life (with autovacuum off, always). One user's burst
//! of 10,000 jobs cost ~0.9 ms of PostgreSQL's CPU per job against ~0.13 ms spread
//! over 1,000 users (BENCHMARKS.md, issue 27). Led by `status`, this index cannot serve
//! a look-up by user alone, so no plan can pick it for one; what it is for (a user's
//! QUEUED jobs of at least a priority: `store::queue_position`; a user's jobs in one
//! status) names the status, and reads the same entries in either order.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Jobs {
    Table,
    UserId,
    Status,
    Priority,
}

const OLD: &str = "idx_jobs_user_status_priority";
const NEW: &str = "idx_jobs_status_user_priority";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name(NEW)
                    .table(Jobs::Table)
                    .col(Jobs::Status)
                    .col(Jobs::UserId)
                    .col(Jobs::Priority)
                    .if_not_exists()
                    .to_owned(),
            )
            .await?;
        manager
            .drop_index(Index::drop().name(OLD).table(Jobs::Table).to_owned())
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name(OLD)
                    .table(Jobs::Table)
                    .col(Jobs::UserId)
                    .col(Jobs::Status)
                    .col(Jobs::Priority)
                    .if_not_exists()
                    .to_owned(),
            )
            .await?;
        manager
            .drop_index(Index::drop().name(NEW).table(Jobs::Table).to_owned())
            .await
    }
}
