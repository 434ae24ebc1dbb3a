//! Stored runtime_envs brought to the leader's keys when a replica begins to lead
//! (DESIGN §6, "Secrets"): [`seal_stored`].

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
/// so that once a replica with a new key first has led, the old one can go. Each row
/// is written only while its job still waits (`status` not terminal: a job ending
/// meanwhile keeps its deletion).
///
/// Only the leader runs it, as it begins to lead (`fence` is its lease; it stops at
/// the first page after the lease is lost): a follower restarted with a new key first
/// would seal the waiting jobs under a key the leader may not hold yet, and the
/// leader could not send them (issue 43 §3). What a replica cannot open it leaves as
/// it is (counted in [`Resealed::unknown_keys`]). With no key configured nothing is
/// written. Errors: the database's.
pub async fn seal_stored(
    db: &Db,
    sealer: &Sealer,
    fence: &super::Fence,
) -> Result<Resealed, DbErr> {
    let waiting = [
        JobStatus::Queued,
        JobStatus::Dispatching,
        JobStatus::Pending,
        JobStatus::Running,
    ];
    let mut out = Resealed::default();
    let mut after: Option<Uuid> = None;
    loop {
        if !super::fence_holds(db, fence).await? {
            break;
        }
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
