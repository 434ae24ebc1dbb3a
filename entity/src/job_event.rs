//! One status transition of a job, written in the same transaction as the change.

use sea_orm::entity::prelude::*;

use crate::job::JobStatus;

/// One row of `job_events`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "job_events")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub job_id: Uuid,
    /// `None` for the creation event.
    pub from_status: Option<JobStatus>,
    pub to_status: JobStatus,
    pub at: DateTimeUtc,
    #[sea_orm(column_type = "Text", nullable)]
    pub detail: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
