//! A group of users (DESIGN §2 "Groups"): a node of the tree, named by its path.

use sea_orm::entity::prelude::*;

/// One row of `groups`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "groups")]
pub struct Model {
    /// Its path from the root (`ibm-q/open/main`); its parent is the path without
    /// the last segment, which must be a group too.
    #[sea_orm(primary_key, auto_increment = false)]
    pub path: String,
    /// Weight among its siblings, `> 0` (default 1).
    pub weight: f64,
    /// Paused: nothing new is dispatched for any user under it.
    pub paused: bool,
    /// Cap on the outstanding jobs of all users under it; `None` = no cap.
    pub max_running_jobs: Option<i32>,
    /// Cap on their summed allocation, `{"cpu","gpu","memory_bytes"}` as users'
    /// `max_resources`; `None` = no cap.
    pub max_resources: Option<Json>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
