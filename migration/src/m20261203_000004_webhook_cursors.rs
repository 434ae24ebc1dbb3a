//! Webhooks (DESIGN §4, "Events"): the outbox of every webhook is `job_events` itself,
//! read in id order from a per-webhook cursor. `webhook_cursors` holds, for each
//! configured webhook (by name), the id of the last event it has settled (delivered
//! with a 2xx, or skipped by its filter). A row is created when the webhook is first
//! seen, at the newest event then, so a new webhook gets the events from then on.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum WebhookCursors {
    Table,
    Name,
    LastEventId,
    UpdatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(WebhookCursors::Table)
                    .if_not_exists()
                    .col(
                        ColumnDef::new(WebhookCursors::Name)
                            .text()
                            .not_null()
                            .primary_key(),
                    )
                    .col(
                        ColumnDef::new(WebhookCursors::LastEventId)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(WebhookCursors::UpdatedAt)
                            .timestamp_with_time_zone()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(WebhookCursors::Table).to_owned())
            .await
    }
}
