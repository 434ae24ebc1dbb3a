//! A user of the scheduler: the gateway's user id plus its fair-share settings.

use sea_orm::entity::prelude::*;

/// One row of `users`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "users")]
pub struct Model {
    /// The gateway's user id (1–128 printable characters).
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// Fair-share weight, `> 0` (default 1).
    pub weight: f64,
    /// Paused users get nothing new dispatched; their queued jobs stay.
    pub paused: bool,
    /// Cap on DISPATCHING + PENDING + RUNNING jobs; `None` = the configured default.
    pub max_running_jobs: Option<i32>,
    /// Cap on QUEUED jobs; `None` = the configured default.
    pub max_queued_jobs: Option<i32>,
    /// Cap on the user's allocation, `{"cpu","gpu","memory_bytes"}`; `None` = no cap.
    pub max_resources: Option<Json>,
    /// Decayed usage `h_u` (a dominant share, 0..=1) valid at `usage_at`.
    pub usage: f64,
    /// When `usage` was last brought up to date.
    pub usage_at: DateTimeUtc,
    /// An admin's readable name for the user (a hashed id such as `u-3f9a…` has
    /// none of its own); `None` = none. Shown, never used to find the user.
    pub display_name: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    /// The default of the user's jobs that do not say whether they may be preempted
    /// (DESIGN §2 "Preemption"); false unless an admin sets it.
    pub preemptible: bool,
    /// The path of the group the user belongs to (`ibm-q/open/main`, a row of
    /// `groups`); `None` = the root (DESIGN §2 "Groups").
    pub group_path: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
