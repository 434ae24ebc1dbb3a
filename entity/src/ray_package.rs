//! A `working_dir` / `py_modules` package uploaded through Ray's Jobs API
//! (`PUT /api/packages/{protocol}/{name}`), kept until sent to the clusters that run
//! the jobs using it.

use sea_orm::entity::prelude::*;

/// One row of `ray_packages`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "ray_packages")]
pub struct Model {
    /// Ray's package URI, `{protocol}://{name}` (e.g. `gcs://_ray_pkg_<hash>.zip`).
    #[sea_orm(primary_key, auto_increment = false)]
    pub uri: String,
    /// The zip file as the client uploaded it.
    pub content: Vec<u8>,
    /// `content.len()`, in bytes.
    pub size_bytes: i64,
    /// When it was uploaded.
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
