//! Users: their rows and settings (`PUT /v1/users/{id}`), the defaults a new user
//! gets, the row locks that keep queue limits across replicas ([`lock_users`], which
//! intake prepares too), and the decayed usage the arbiter saves.

use chrono::{DateTime, Utc};
use entity::user;
use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseBackend, DbErr, EntityTrait,
    QueryFilter, QueryOrder, Set, TransactionTrait,
};

use super::groups::GroupError;
use super::{now, Db};

/// A new user's weight, and what `PUT /v1/users/{id}` with `"weight": null` restores.
pub const DEFAULT_WEIGHT: f64 = 1.0;

/// A user row with the defaults (weight 1, not paused, no limits, no usage).
pub(super) fn new_user(id: &str, at: DateTime<Utc>) -> user::ActiveModel {
    user::ActiveModel {
        id: Set(id.to_string()),
        weight: Set(DEFAULT_WEIGHT),
        paused: Set(false),
        max_running_jobs: Set(None),
        max_queued_jobs: Set(None),
        max_resources: Set(None),
        usage: Set(0.0),
        usage_at: Set(at),
        display_name: Set(None),
        created_at: Set(at),
        updated_at: Set(at),
        preemptible: Set(false),
        group_path: Set(None),
    }
}

async fn ensure_user_in<C: sea_orm::ConnectionTrait>(
    conn: &C,
    id: &str,
    at: DateTime<Utc>,
) -> Result<(), DbErr> {
    user::Entity::insert(new_user(id, at))
        .on_conflict(OnConflict::column(user::Column::Id).do_nothing().to_owned())
        .exec_without_returning(conn)
        .await?;
    Ok(())
}

/// One user by id.
pub async fn get_user(db: &Db, id: &str) -> Result<Option<user::Model>, DbErr> {
    user::Entity::find_by_id(id.to_string()).one(db).await
}

/// All users, by id.
pub async fn list_users(db: &Db) -> Result<Vec<user::Model>, DbErr> {
    user::Entity::find()
        .order_by_asc(user::Column::Id)
        .all(db)
        .await
}

/// Changes to a user's settings; `None` leaves a field as it is, `Some(None)` clears a
/// limit back to the default.
#[derive(Clone, Debug, Default)]
pub struct UserPatch {
    pub weight: Option<f64>,
    pub max_running_jobs: Option<Option<i32>>,
    pub max_queued_jobs: Option<Option<i32>>,
    pub max_resources: Option<Option<serde_json::Value>>,
    pub paused: Option<bool>,
    /// `Some(None)` clears it.
    pub display_name: Option<Option<String>>,
    /// The default of the user's jobs that do not say whether they may be preempted.
    pub preemptible: Option<bool>,
    /// The user's group (a path that must be a group); `Some(None)` moves it to the
    /// root.
    pub group: Option<Option<String>>,
}

/// Applies `patch` to user `id`, creating the user with defaults first if it is new.
/// Returns the user as stored; a `group` that is not a group is
/// [`GroupError::NotFound`] and changes nothing.
pub async fn upsert_user(db: &Db, id: &str, patch: UserPatch) -> Result<user::Model, GroupError> {
    let at = now();
    let txn = db.begin().await?;
    if let Some(Some(path)) = &patch.group {
        super::groups::require_group(&txn, path).await?;
    }
    ensure_user_in(&txn, id, at).await?;
    let mut am = user::ActiveModel {
        id: sea_orm::Unchanged(id.to_string()),
        updated_at: Set(at),
        ..Default::default()
    };
    if let Some(w) = patch.weight {
        am.weight = Set(w);
    }
    if let Some(v) = patch.max_running_jobs {
        am.max_running_jobs = Set(v);
    }
    if let Some(v) = patch.max_queued_jobs {
        am.max_queued_jobs = Set(v);
    }
    if let Some(v) = patch.max_resources {
        am.max_resources = Set(v);
    }
    if let Some(p) = patch.paused {
        am.paused = Set(p);
    }
    if let Some(d) = patch.display_name {
        am.display_name = Set(d);
    }
    if let Some(p) = patch.preemptible {
        am.preemptible = Set(p);
    }
    if let Some(g) = patch.group {
        // An admin's "no group" is stored as "" (not a path): the root by choice,
        // which the identity rule leaves alone (it fills in NULL only).
        am.group_path = Set(Some(g.unwrap_or_default()));
    }
    let model = am.update(&txn).await?;
    txn.commit().await?;
    Ok(model)
}

/// [`lock_users`]' statement: `$1` the ids, each once, in byte order; rows
/// `(id, max_queued_jobs)` of those that exist, in that order. Intake prepares it
/// too (store/intake/postgres/statements.rs).
pub(super) const LOCK_USERS: &str = "SELECT u.id, u.max_queued_jobs, u.preemptible \
     FROM unnest($1::text[]) WITH ORDINALITY AS k(id, n) \
     CROSS JOIN LATERAL (SELECT id, max_queued_jobs, preemptible FROM users \
       WHERE users.id = k.id FOR UPDATE) u \
     ORDER BY k.n";

/// Locks the `users` rows of `ids` (PostgreSQL, `SELECT … FOR UPDATE`) one at a time
/// in byte order of the id, so that two transactions locking users (intake, the usage
/// save, another replica's) never deadlock, and returns `(id, max_queued_jobs)` of
/// those that exist, in that order.
///
/// One statement whatever the number of ids (an array), whose plan probes the primary
/// key once per id: the lateral subquery with its `FOR UPDATE` is not flattened into
/// a join, which the planner, on tables it has no statistics of, ran as a sequential
/// scan comparing every row with every id (0.7 ms for 32 ids of 1,000 users).
pub(super) async fn lock_users<'a>(
    txn: &sea_orm::DatabaseTransaction,
    ids: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<(String, Option<i32>)>, DbErr> {
    let mut ids: Vec<String> = ids.into_iter().map(str::to_string).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut locked = Vec::with_capacity(ids.len());
    for row in txn
        .query_all(sea_orm::Statement::from_sql_and_values(
            DatabaseBackend::Postgres,
            LOCK_USERS,
            [sea_orm::Value::from(ids)],
        ))
        .await?
    {
        locked.push((row.try_get_by_index(0)?, row.try_get_by_index(1)?));
    }
    Ok(locked)
}

/// Writes the decayed usage (and its time) of many users: one transaction per
/// [`USAGE_ROWS_PER_STATEMENT`] users, one `UPDATE … FROM (VALUES …)` each, instead of a
/// commit (and an fsync) per user. On PostgreSQL the rows are locked in id order
/// first, as intake locks them, so the two cannot deadlock. Users with no row are
/// skipped.
pub async fn save_usages(db: &Db, rows: &[(String, f64, DateTime<Utc>)]) -> Result<(), DbErr> {
    let backend = db.get_database_backend();
    let mut sorted: Vec<&(String, f64, DateTime<Utc>)> = rows.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let param = |i: usize| placeholder(backend, i);
    for chunk in sorted.chunks(USAGE_ROWS_PER_STATEMENT) {
        let txn = db.begin().await?;
        if backend == DatabaseBackend::Postgres {
            lock_users(&txn, chunk.iter().map(|r| r.0.as_str())).await?;
        }
        let mut values = Vec::with_capacity(chunk.len() * 3);
        let tuples: Vec<String> = chunk
            .iter()
            .enumerate()
            .map(|(i, (id, usage, at))| {
                values.push(sea_orm::Value::from(id.as_str()));
                values.push(sea_orm::Value::from(*usage));
                values.push(sea_orm::Value::from(*at));
                format!(
                    "({}, {}, {})",
                    param(3 * i + 1),
                    param(3 * i + 2),
                    param(3 * i + 3)
                )
            })
            .collect();
        let sql = format!(
            "UPDATE users SET usage = v.column2, usage_at = v.column3 \
             FROM (VALUES {}) AS v WHERE users.id = v.column1",
            tuples.join(", ")
        );
        txn.execute(sea_orm::Statement::from_sql_and_values(
            backend, sql, values,
        ))
        .await?;
        txn.commit().await?;
    }
    Ok(())
}

/// Users per statement of [`save_usages`]: 3 parameters each, well under SQLite's
/// 32,766.
pub const USAGE_ROWS_PER_STATEMENT: usize = 1000;

/// Users whose settings changed after `since` (the leader's catch-up).
pub async fn users_updated_since(db: &Db, since: DateTime<Utc>) -> Result<Vec<user::Model>, DbErr> {
    user::Entity::find()
        .filter(user::Column::UpdatedAt.gt(since))
        .all(db)
        .await
}

/// The `i`-th (from 1) bound parameter of a raw statement: `$i` on PostgreSQL, `?` on
/// SQLite.
fn placeholder(backend: DatabaseBackend, i: usize) -> String {
    match backend {
        DatabaseBackend::Postgres => format!("${i}"),
        _ => "?".to_string(),
    }
}

/// The group a user belongs to: `None` for the root, whether never set (NULL) or
/// chosen by an admin (""; [`upsert_user`]).
#[must_use]
pub fn group_of(u: &user::Model) -> Option<&str> {
    u.group_path.as_deref().filter(|g| !g.is_empty())
}
