//! Issue 31, part 6: packages belong to whoever uploaded them. Until now `ray_packages`
//! had one row per URI for everyone, so a user who uploaded `gcs://_ray_pkg_<hash>.zip`
//! first decided what every other user's job naming that URI ran (Ray's client names a
//! package by a hash of its directory, which anyone who knows the directory can make).
//!
//! The table is rebuilt with the key `(owner, uri)`: `owner` is the uploading token's
//! user, or `""` (the shared namespace) for a token without one (a gateway, an admin)
//! and for an open service. `digest` is the hex SHA-256 of `content`, which names the
//! package on the clusters (`ray::packages`), so that one name on a cluster always
//! holds one content. Existing rows are carried into the shared namespace (nothing
//! tells who uploaded them) with no digest; it is computed from the content the first
//! time a submit names the package (`store::package_digest`).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum RayPackages {
    Table,
}

#[derive(DeriveIden)]
enum RayPackagesOwned {
    Table,
    Owner,
    Uri,
    Digest,
    Content,
    SizeBytes,
    CreatedAt,
}

/// The table before this migration, for `down`.
#[derive(DeriveIden)]
enum RayPackagesShared {
    Table,
}

fn owned_table() -> TableCreateStatement {
    Table::create()
        .table(RayPackagesOwned::Table)
        .col(
            ColumnDef::new(RayPackagesOwned::Owner)
                .string_len(128)
                .not_null(),
        )
        .col(ColumnDef::new(RayPackagesOwned::Uri).text().not_null())
        .col(
            ColumnDef::new(RayPackagesOwned::Digest)
                .string_len(64)
                .null(),
        )
        .col(ColumnDef::new(RayPackagesOwned::Content).blob().not_null())
        .col(
            ColumnDef::new(RayPackagesOwned::SizeBytes)
                .big_integer()
                .not_null(),
        )
        .col(
            ColumnDef::new(RayPackagesOwned::CreatedAt)
                .timestamp_with_time_zone()
                .not_null(),
        )
        .primary_key(
            Index::create()
                .col(RayPackagesOwned::Owner)
                .col(RayPackagesOwned::Uri),
        )
        .to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.create_table(owned_table()).await?;
        manager
            .get_connection()
            .execute_unprepared(
                "INSERT INTO ray_packages_owned (owner, uri, digest, content, size_bytes, created_at) \
                 SELECT '', uri, NULL, content, size_bytes, created_at FROM ray_packages",
            )
            .await?;
        manager
            .drop_table(Table::drop().table(RayPackages::Table).to_owned())
            .await?;
        manager
            .rename_table(
                Table::rename()
                    .table(RayPackagesOwned::Table, RayPackages::Table)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ray_packages_digest")
                    .table(RayPackages::Table)
                    .col(RayPackagesOwned::Digest)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // Back to one row per URI: the shared namespace's rows win, then the oldest.
        manager
            .create_table(
                Table::create()
                    .table(RayPackagesShared::Table)
                    .col(
                        ColumnDef::new(RayPackagesOwned::Uri)
                            .text()
                            .not_null()
                            .primary_key(),
                    )
                    .col(ColumnDef::new(RayPackagesOwned::Content).blob().not_null())
                    .col(
                        ColumnDef::new(RayPackagesOwned::SizeBytes)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(RayPackagesOwned::CreatedAt)
                            .timestamp_with_time_zone()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .get_connection()
            .execute_unprepared(
                "INSERT INTO ray_packages_shared (uri, content, size_bytes, created_at) \
                 SELECT p.uri, p.content, p.size_bytes, p.created_at FROM ray_packages p \
                 WHERE NOT EXISTS (SELECT 1 FROM ray_packages q WHERE q.uri = p.uri AND \
                   (q.owner < p.owner OR (q.owner = p.owner AND q.created_at < p.created_at)))",
            )
            .await?;
        manager
            .drop_table(Table::drop().table(RayPackages::Table).to_owned())
            .await?;
        manager
            .rename_table(
                Table::rename()
                    .table(RayPackagesShared::Table, RayPackages::Table)
                    .to_owned(),
            )
            .await
    }
}
