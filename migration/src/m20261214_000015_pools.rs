//! Issue 30: pools and admission (DESIGN §6). `jobs.pool`: the `[[pools]]` entry a job
//! must run in (`NULL`: a Ray cluster, which is every existing row);
//! `jobs.lease_expires_at`: until when the runner's lease on an ADMITTED or RUNNING
//! pool job holds. The status column (text) takes `ADMITTED` as it is.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Jobs {
    Table,
    Pool,
    LeaseExpiresAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite's ALTER TABLE adds one at a time.
        manager
            .alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .add_column(ColumnDef::new(Jobs::Pool).string_len(64).null())
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .add_column(
                        ColumnDef::new(Jobs::LeaseExpiresAt)
                            .timestamp_with_time_zone()
                            .null(),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [Jobs::LeaseExpiresAt, Jobs::Pool] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Jobs::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
