//! Ray's Jobs API (docs/ray-jobs-api.md): `working_dir` / `py_modules` packages
//! uploaded through `PUT /api/packages/{protocol}/{name}`, kept here until the cluster
//! a job is granted has them. The key is Ray's package URI (`gcs://_ray_pkg_<hash>.zip`,
//! content-addressed by Ray's client), so the same package is stored once.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum RayPackages {
    Table,
    Uri,
    Content,
    SizeBytes,
    CreatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(RayPackages::Table)
                    .if_not_exists()
                    .col(
                        ColumnDef::new(RayPackages::Uri)
                            .text()
                            .not_null()
                            .primary_key(),
                    )
                    .col(ColumnDef::new(RayPackages::Content).blob().not_null())
                    .col(
                        ColumnDef::new(RayPackages::SizeBytes)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(RayPackages::CreatedAt)
                            .timestamp_with_time_zone()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(RayPackages::Table).to_owned())
            .await
    }
}
