//! Leadership (DESIGN §10): one row in `leases` names the replica that leads, the
//! fencing term it leads under (incremented on every takeover) and when its lease
//! expires. The row exists from the start (holder empty, term 0, expired), so taking it
//! is always an `UPDATE`.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Leases {
    Table,
    Id,
    Holder,
    Term,
    ExpiresAt,
    AcquiredAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Leases::Table)
                    .if_not_exists()
                    .col(
                        ColumnDef::new(Leases::Id)
                            .integer()
                            .not_null()
                            .primary_key(),
                    )
                    .col(ColumnDef::new(Leases::Holder).text().not_null())
                    .col(ColumnDef::new(Leases::Term).big_integer().not_null())
                    .col(
                        ColumnDef::new(Leases::ExpiresAt)
                            .timestamp_with_time_zone()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(Leases::AcquiredAt)
                            .timestamp_with_time_zone()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await?;
        // A literal both databases read as a UTC timestamp.
        manager
            .get_connection()
            .execute_unprepared(
                "INSERT INTO leases (id, holder, term, expires_at, acquired_at) \
                 VALUES (1, '', 0, '1970-01-01 00:00:00+00:00', '1970-01-01 00:00:00+00:00')",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Leases::Table).to_owned())
            .await
    }
}
