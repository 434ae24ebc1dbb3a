//! What Ray's Jobs API (`/api/`, `src/api/ray_compat/`) needs beyond `/v1`: jobs found
//! by the client's `submission_id` (the job's `external_id`), deletion of a finished
//! job, and the `working_dir` / `py_modules` packages clients upload.

use entity::{job, job_event, ray_package};
use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ColumnTrait, DbErr, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, Set,
    TransactionTrait,
};
use uuid::Uuid;

use super::{now, Db};

/// Jobs whose `external_id` is `external_id`, of `user` only when given; at most two
/// (enough for the caller to tell "one" from "ambiguous"), oldest first.
pub async fn jobs_by_external_id(
    db: &Db,
    user: Option<&str>,
    external_id: &str,
) -> Result<Vec<job::Model>, DbErr> {
    let mut q = job::Entity::find().filter(job::Column::ExternalId.eq(external_id));
    if let Some(u) = user {
        q = q.filter(job::Column::UserId.eq(u));
    }
    q.order_by_asc(job::Column::SubmittedAt)
        .limit(2)
        .all(db)
        .await
}

/// Deletes a job and its `job_events` rows in one transaction. `false` when no such
/// job. The caller checks that the job is finished (nothing follows it any more).
pub async fn delete_job(db: &Db, id: Uuid) -> Result<bool, DbErr> {
    let txn = db.begin().await?;
    job_event::Entity::delete_many()
        .filter(job_event::Column::JobId.eq(id))
        .exec(&txn)
        .await?;
    let deleted = job::Entity::delete_by_id(id).exec(&txn).await?;
    txn.commit().await?;
    Ok(deleted.rows_affected > 0)
}

/// The hex SHA-256 of a package's content: its name on the clusters
/// (`ray::packages::cluster_uri`).
pub fn package_digest_of(content: &[u8]) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(content);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Keeps an uploaded package under `(owner, uri)` (`owner`: the uploading token's user,
/// `""` for the shared namespace). Ray's client names packages by a hash of their
/// content, so a second upload under a URI the owner already has is the same package
/// and is ignored; another owner's row is never read or touched.
pub async fn put_package(db: &Db, owner: &str, uri: &str, content: Vec<u8>) -> Result<(), DbErr> {
    let size = i64::try_from(content.len()).unwrap_or(i64::MAX);
    let digest = package_digest_of(&content);
    ray_package::Entity::insert(ray_package::ActiveModel {
        owner: Set(owner.to_string()),
        uri: Set(uri.to_string()),
        digest: Set(Some(digest)),
        content: Set(content),
        size_bytes: Set(size),
        created_at: Set(now()),
    })
    .on_conflict(
        OnConflict::columns([ray_package::Column::Owner, ray_package::Column::Uri])
            .do_nothing()
            .to_owned(),
    )
    .exec_without_returning(db)
    .await?;
    Ok(())
}

/// Whether `owner` has a package with this URI (without reading its content).
pub async fn package_exists(db: &Db, owner: &str, uri: &str) -> Result<bool, DbErr> {
    Ok(
        ray_package::Entity::find_by_id((owner.to_string(), uri.to_string()))
            .count(db)
            .await?
            > 0,
    )
}

/// The digest (hex SHA-256 of the content) of `owner`'s package with this URI, if it
/// has one; a row carried over without a digest gets it now (computed from its
/// content and stored).
pub async fn package_digest(db: &Db, owner: &str, uri: &str) -> Result<Option<String>, DbErr> {
    let key = (owner.to_string(), uri.to_string());
    let digest: Option<Option<String>> = ray_package::Entity::find_by_id(key.clone())
        .select_only()
        .column(ray_package::Column::Digest)
        .into_tuple()
        .one(db)
        .await?;
    match digest {
        None => Ok(None),
        Some(Some(d)) => Ok(Some(d)),
        Some(None) => {
            let Some(row) = ray_package::Entity::find_by_id(key).one(db).await? else {
                return Ok(None);
            };
            let d = package_digest_of(&row.content);
            ray_package::Entity::update_many()
                .col_expr(
                    ray_package::Column::Digest,
                    sea_orm::sea_query::Expr::value(d.clone()),
                )
                .filter(ray_package::Column::Owner.eq(owner))
                .filter(ray_package::Column::Uri.eq(uri))
                .exec(db)
                .await?;
            Ok(Some(d))
        }
    }
}

/// The content of the package a cluster-side URI names
/// (`ray::packages::cluster_uri`: `gcs://_ray_pkg_fs_<digest>.zip`), from any
/// owner's row with that digest (the content is the same by construction). `None` for
/// any other URI: a package is only ever sent under the name of its content.
pub async fn package_content(db: &Db, uri: &str) -> Result<Option<Vec<u8>>, DbErr> {
    let Some(digest) = crate::ray::packages::digest_in(uri) else {
        return Ok(None);
    };
    let rows: Vec<ray_package::Model> = ray_package::Entity::find()
        .filter(ray_package::Column::Digest.eq(digest))
        .limit(1)
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .next()
        .map(|p| p.content)
        .filter(|c| package_digest_of(c) == digest))
}
