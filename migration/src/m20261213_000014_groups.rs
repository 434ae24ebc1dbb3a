//! Issue 29 part 1: groups (DESIGN §2 "Groups", §6). A `groups` table, one row per
//! group of the tree, keyed by its path (`ibm-q/open/main`: its parent is the path
//! without the last segment, so a cycle cannot be written down); and
//! `users.group_path`, the group a user belongs to (`NULL`: the root, which every
//! existing user stays in).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Groups {
    Table,
    Path,
    Weight,
    Paused,
    MaxRunningJobs,
    MaxResources,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Users {
    Table,
    GroupPath,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Groups::Table)
                    .if_not_exists()
                    .col(ColumnDef::new(Groups::Path).text().not_null().primary_key())
                    .col(
                        ColumnDef::new(Groups::Weight)
                            .double()
                            .not_null()
                            .default(1.0),
                    )
                    .col(
                        ColumnDef::new(Groups::Paused)
                            .boolean()
                            .not_null()
                            .default(false),
                    )
                    .col(ColumnDef::new(Groups::MaxRunningJobs).integer().null())
                    // The shape of `users.max_resources`: `{"cpu","gpu","memory_bytes"}`,
                    // `json` on PostgreSQL, text on SQLite (DESIGN §6 "JSON columns").
                    .col(ColumnDef::new(Groups::MaxResources).json().null())
                    .col(
                        ColumnDef::new(Groups::CreatedAt)
                            .timestamp_with_time_zone()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(Groups::UpdatedAt)
                            .timestamp_with_time_zone()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Users::Table)
                    .add_column(ColumnDef::new(Users::GroupPath).text().null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Users::Table)
                    .drop_column(Users::GroupPath)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table(Groups::Table).to_owned())
            .await
    }
}
