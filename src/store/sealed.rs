//! Stored runtime_envs brought to the configured keys at start (DESIGN §6, "Secrets"):
//! [`seal_stored`].

use std::collections::BTreeMap;

use entity::{job, JobStatus};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, DbErr, EntityTrait, FromQueryResult, QueryFilter, QueryOrder, QuerySelect,
};
use uuid::Uuid;

use super::Db;
use crate::secrets::{OpenError, Sealer};

/// Jobs read per page.
const PAGE: u64 = 500;

/// What [`seal_stored`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Resealed {
    /// Rows sealed (or re-sealed under the newest key).
    pub sealed: u64,
    /// Waiting jobs whose runtime_env is sealed with a key not configured, by key id.
    pub unknown_keys: BTreeMap<String, u64>,
    /// Waiting jobs whose runtime_env does not open at all (altered rows): left for
    /// the dispatcher, which fails them.
    pub corrupt: u64,
}

#[derive(FromQueryResult)]
struct Row {
    id: Uuid,
    user_id: String,
    runtime_env: Option<serde_json::Value>,
}

/// Brings the runtime_env of every job that has not ended to what `sealer` writes
/// now: plaintext (rows from before migration 11, or stored while no key was
/// configured) is sealed, and what an older key sealed is re-sealed under the newest,
/// so that after one start with a new key first the old one can go. Each row is
/// written only while its job still waits (`status` not terminal: a job ending
/// meanwhile keeps its deletion). Safe beside another replica doing the same (both
/// write a value that opens). With no key configured nothing is written. Errors: the
/// database's.
pub async fn seal_stored(db: &Db, sealer: &Sealer) -> Result<Resealed, DbErr> {
    let waiting = [
        JobStatus::Queued,
        JobStatus::Dispatching,
        JobStatus::Pending,
        JobStatus::Running,
    ];
    let mut out = Resealed::default();
    let mut after: Option<Uuid> = None;
    loop {
        let mut q = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .column(job::Column::UserId)
            .column(job::Column::RuntimeEnv)
            .filter(job::Column::Status.is_in(waiting))
            .filter(job::Column::RuntimeEnv.is_not_null())
            .order_by_asc(job::Column::Id)
            .limit(PAGE);
        if let Some(a) = after {
            q = q.filter(job::Column::Id.gt(a));
        }
        let rows = q.into_model::<Row>().all(db).await?;
        let Some(last) = rows.last() else { break };
        after = Some(last.id);
        for r in rows {
            let Some(stored) = r.runtime_env else {
                continue;
            };
            if sealer.is_current(&stored) {
                continue;
            }
            let plain = match sealer.open(&r.user_id, &stored) {
                Ok(p) => p,
                Err(OpenError::UnknownKey(k)) => {
                    *out.unknown_keys.entry(k).or_default() += 1;
                    continue;
                }
                Err(OpenError::Corrupt) => {
                    out.corrupt += 1;
                    continue;
                }
            };
            let sealed = sealer
                .seal(&r.user_id, &plain)
                .map_err(|e| DbErr::Custom(e.to_string()))?;
            let done = job::Entity::update_many()
                .col_expr(job::Column::RuntimeEnv, Expr::value(sealed))
                .filter(job::Column::Id.eq(r.id))
                .filter(job::Column::Status.is_in(waiting))
                .exec(db)
                .await?;
            out.sealed += done.rows_affected;
        }
    }
    Ok(out)
}
