//! Issue 31, part 1: users named by a keyed hash (`u-3f9a…`, from a per-user secret such
//! as the qiskit-serverless gateway's `QISKIT_IBM_TOKEN`) get an admin-set
//! `display_name` (`PUT /v1/users/{id}`), so `/v1/users` and the console stay
//! readable. Nullable: existing rows keep none.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Users {
    Table,
    DisplayName,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Users::Table)
                    .add_column(ColumnDef::new(Users::DisplayName).text().null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Users::Table)
                    .drop_column(Users::DisplayName)
                    .to_owned(),
            )
            .await
    }
}
