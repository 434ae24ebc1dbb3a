//! Job attempts (DESIGN §3, §5): a job that Ray held PENDING too long goes back to the
//! queue and is submitted again under a new Ray `submission_id`, derived from the job id
//! and the attempt number. `retiring_attempt` names an earlier attempt whose stop Ray has
//! not yet confirmed (the job is not granted again until it has); `stop_reason` records a
//! stop that was asked for (cancel, runtime limit) so that a restart keeps asking Ray.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Jobs {
    Table,
    Attempt,
    RetiringAttempt,
    StopReason,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per ALTER: SQLite adds one column at a time.
        manager
            .alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .add_column(
                        ColumnDef::new(Jobs::Attempt)
                            .integer()
                            .not_null()
                            .default(1),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .add_column(ColumnDef::new(Jobs::RetiringAttempt).integer().null())
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .add_column(ColumnDef::new(Jobs::StopReason).text().null())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for col in [Jobs::StopReason, Jobs::RetiringAttempt, Jobs::Attempt] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Jobs::Table)
                        .drop_column(col)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
