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

/// Keeps an uploaded package under its URI (`gcs://_ray_pkg_<hash>.zip`). Ray's client
/// names packages by a hash of their content, so a second upload under a known URI is
/// the same package and is ignored.
pub async fn put_package(db: &Db, uri: &str, content: Vec<u8>) -> Result<(), DbErr> {
    let size = i64::try_from(content.len()).unwrap_or(i64::MAX);
    ray_package::Entity::insert(ray_package::ActiveModel {
        uri: Set(uri.to_string()),
        content: Set(content),
        size_bytes: Set(size),
        created_at: Set(now()),
    })
    .on_conflict(
        OnConflict::column(ray_package::Column::Uri)
            .do_nothing()
            .to_owned(),
    )
    .exec_without_returning(db)
    .await?;
    Ok(())
}

/// Whether a package with this URI is kept (without reading its content).
pub async fn package_exists(db: &Db, uri: &str) -> Result<bool, DbErr> {
    Ok(ray_package::Entity::find_by_id(uri.to_string())
        .count(db)
        .await?
        > 0)
}

/// The content of the package with this URI, if kept.
pub async fn package_content(db: &Db, uri: &str) -> Result<Option<Vec<u8>>, DbErr> {
    Ok(ray_package::Entity::find_by_id(uri.to_string())
        .one(db)
        .await?
        .map(|p| p.content))
}
