//! Issue 29 part 2: custom resources (DESIGN §6). `jobs.custom_resources`: the job's
//! custom resources (Ray's custom resources, e.g. `{"QPU": 1}`) as a JSON object of
//! name to amount, written as text; `NULL` when it asks for none, which is every
//! existing row.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Jobs {
    Table,
    CustomResources,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .add_column(ColumnDef::new(Jobs::CustomResources).text().null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .drop_column(Jobs::CustomResources)
                    .to_owned(),
            )
            .await
    }
}
