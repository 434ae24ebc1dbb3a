//! The leadership lease (DESIGN §10): one row, id 1.

use sea_orm::entity::prelude::*;

/// The only row of `leases`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "leases")]
pub struct Model {
    /// Always 1.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: i32,
    /// The replica id of the leader (empty before anyone led).
    pub holder: String,
    /// Fencing term: incremented on every takeover; the leader's writes carry it.
    pub term: i64,
    /// When the lease lapses unless renewed (database clock).
    pub expires_at: DateTimeUtc,
    /// When the current holder took the lease under this term.
    pub acquired_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
