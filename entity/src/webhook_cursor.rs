//! How far each configured webhook has got through `job_events` (DESIGN §4).

use sea_orm::entity::prelude::*;

/// One row of `webhook_cursors`: webhook `name` has settled every event up to and
/// including `last_event_id` (delivered with a 2xx, or not wanted by its filter).
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_cursors")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false, column_type = "Text")]
    pub name: String,
    pub last_event_id: i64,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
