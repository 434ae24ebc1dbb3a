//! Groups (DESIGN §2 "Groups", §6): their rows, the tree's rules the database keeps
//! (a group's parent exists; a group with subgroups or users is not deleted; a user's
//! group exists), and the identity rule's "join the job's group" (§4).
//!
//! Those rules hold across replicas on PostgreSQL by row locks: whatever needs a
//! group to exist (a subgroup's creation, a user's move into it) takes its row
//! `FOR SHARE`, and a deletion takes it `FOR UPDATE` before it counts what is under
//! it, so one of the two waits for the other and then sees its result. SQLite has
//! one writer (the locks are no-ops there).

use entity::{group, user};
use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DbErr, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
    QuerySelect, Set, TransactionTrait,
};

use super::{now, Db};

/// Why a change to groups was refused; the database's own errors are `Db`.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// The database failed or could not be reached.
    #[error("database error")]
    Db(#[from] DbErr),
    /// No group has this path.
    #[error("no group {0:?}")]
    NotFound(String),
    /// The group's parent (this path) is not a group.
    #[error("the parent group {0:?} does not exist; create it first")]
    NoParent(String),
    /// The group still has subgroups or users (a deletion).
    #[error(
        "the group {path:?} has {subgroups} subgroups and {users} users; move or delete them first"
    )]
    InUse {
        path: String,
        subgroups: u64,
        users: u64,
    },
}

/// Changes to a group's settings; `None` leaves a field as it is, `Some(None)`
/// clears a limit.
#[derive(Clone, Debug, Default)]
pub struct GroupPatch {
    pub weight: Option<f64>,
    pub paused: Option<bool>,
    pub max_running_jobs: Option<Option<i32>>,
    pub max_resources: Option<Option<serde_json::Value>>,
}

/// Every group, in path order (a parent before its children).
pub async fn list_groups(db: &Db) -> Result<Vec<group::Model>, DbErr> {
    group::Entity::find()
        .order_by_asc(group::Column::Path)
        .all(db)
        .await
}

/// One group by path.
pub async fn get_group(db: &Db, path: &str) -> Result<Option<group::Model>, DbErr> {
    group::Entity::find_by_id(path.to_string()).one(db).await
}

/// The group at `path` read with a shared lock (PostgreSQL), so that it cannot be
/// deleted before `txn` commits.
async fn hold_group(
    txn: &sea_orm::DatabaseTransaction,
    path: &str,
) -> Result<Option<group::Model>, DbErr> {
    group::Entity::find_by_id(path.to_string())
        .lock_shared()
        .one(txn)
        .await
}

/// Applies `patch` to the group at `path`; with `create`, a group that does not
/// exist yet is created first (weight 1, running, no limits), else it is
/// [`GroupError::NotFound`]. A new group's parent must exist
/// ([`GroupError::NoParent`]). The path is checked by the caller
/// ([`crate::policy::groups::check_path`]). Returns the group as stored and whether
/// it is new.
pub async fn put_group(
    db: &Db,
    path: &str,
    patch: GroupPatch,
    create: bool,
) -> Result<(group::Model, bool), GroupError> {
    let at = now();
    let txn = db.begin().await?;
    let existing = group::Entity::find_by_id(path.to_string())
        .one(&txn)
        .await?;
    let created = existing.is_none();
    if created {
        if !create {
            return Err(GroupError::NotFound(path.to_string()));
        }
        if let Some(parent) = crate::policy::groups::parent(path) {
            if hold_group(&txn, parent).await?.is_none() {
                return Err(GroupError::NoParent(parent.to_string()));
            }
        }
        group::Entity::insert(group::ActiveModel {
            path: Set(path.to_string()),
            weight: Set(1.0),
            paused: Set(false),
            max_running_jobs: Set(None),
            max_resources: Set(None),
            created_at: Set(at),
            updated_at: Set(at),
        })
        .on_conflict(
            OnConflict::column(group::Column::Path)
                .do_nothing()
                .to_owned(),
        )
        .exec_without_returning(&txn)
        .await?;
    }
    let mut am = group::ActiveModel {
        path: sea_orm::Unchanged(path.to_string()),
        updated_at: Set(at),
        ..Default::default()
    };
    if let Some(w) = patch.weight {
        am.weight = Set(w);
    }
    if let Some(p) = patch.paused {
        am.paused = Set(p);
    }
    if let Some(v) = patch.max_running_jobs {
        am.max_running_jobs = Set(v);
    }
    if let Some(v) = patch.max_resources {
        am.max_resources = Set(v);
    }
    let model = match am.update(&txn).await {
        Ok(m) => m,
        // Deleted by another replica between the read and the update.
        Err(DbErr::RecordNotUpdated) => return Err(GroupError::NotFound(path.to_string())),
        Err(e) => return Err(e.into()),
    };
    txn.commit().await?;
    Ok((model, created))
}

/// Deletes the group at `path` if nothing is under it: no subgroup, no user
/// ([`GroupError::InUse`] otherwise; [`GroupError::NotFound`] when there is no such
/// group).
pub async fn delete_group(db: &Db, path: &str) -> Result<(), GroupError> {
    let txn = db.begin().await?;
    let found = group::Entity::find_by_id(path.to_string())
        .lock_exclusive()
        .one(&txn)
        .await?;
    if found.is_none() {
        return Err(GroupError::NotFound(path.to_string()));
    }
    let subgroups = group::Entity::find()
        .filter(group::Column::Path.starts_with(format!("{path}/")))
        .count(&txn)
        .await?;
    let users = user::Entity::find()
        .filter(user::Column::GroupPath.eq(path))
        .count(&txn)
        .await?;
    if subgroups > 0 || users > 0 {
        return Err(GroupError::InUse {
            path: path.to_string(),
            subgroups,
            users,
        });
    }
    group::Entity::delete_by_id(path.to_string())
        .exec(&txn)
        .await?;
    txn.commit().await?;
    Ok(())
}

/// Checks, inside a user's update, that `path` is a group, and holds it until the
/// update commits.
pub(super) async fn require_group(
    txn: &sea_orm::DatabaseTransaction,
    path: &str,
) -> Result<(), GroupError> {
    match hold_group(txn, path).await? {
        Some(_) => Ok(()),
        None => Err(GroupError::NotFound(path.to_string())),
    }
}

/// What [`join_group`] did.
#[derive(Debug)]
pub enum Joined {
    /// The user had no group and is now in this one (the row as stored).
    Joined(user::Model),
    /// The user has a group already, or no row: nothing changed.
    Unchanged,
    /// No group has the path: nothing changed.
    UnknownGroup,
}

/// The identity rule (DESIGN §4, "Groups"): a user that has no group joins the group
/// at `path`, if that group exists; a user with a group keeps it, and no group is
/// ever created. One primary-key read when the user has a group already (the usual
/// case), a short transaction otherwise.
pub async fn join_group(db: &Db, user_id: &str, path: &str) -> Result<Joined, DbErr> {
    match user::Entity::find_by_id(user_id.to_string())
        .one(db)
        .await?
    {
        Some(u) if u.group_path.is_none() => {}
        _ => return Ok(Joined::Unchanged),
    }
    let txn = db.begin().await?;
    if hold_group(&txn, path).await?.is_none() {
        return Ok(Joined::UnknownGroup);
    }
    let at = now();
    let updated = user::Entity::update_many()
        .col_expr(
            user::Column::GroupPath,
            sea_orm::sea_query::Expr::value(path),
        )
        .col_expr(user::Column::UpdatedAt, sea_orm::sea_query::Expr::value(at))
        .filter(user::Column::Id.eq(user_id))
        .filter(user::Column::GroupPath.is_null())
        .exec(&txn)
        .await?;
    if updated.rows_affected == 0 {
        return Ok(Joined::Unchanged);
    }
    let u = user::Entity::find_by_id(user_id.to_string())
        .one(&txn)
        .await?
        .ok_or_else(|| DbErr::RecordNotFound(user_id.to_string()))?;
    txn.commit().await?;
    Ok(Joined::Joined(u))
}
