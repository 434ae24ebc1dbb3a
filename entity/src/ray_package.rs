//! A `working_dir` / `py_modules` package uploaded through Ray's Jobs API
//! (`PUT /api/packages/{protocol}/{name}`), kept per owner until sent to the clusters
//! that run the jobs using it.

use sea_orm::entity::prelude::*;

/// One row of `ray_packages`; the key is `(owner, uri)`.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "ray_packages")]
pub struct Model {
    /// Whose namespace it is in: the uploading token's user, or `""` (the shared
    /// namespace of tokens without a user, and of an open service).
    #[sea_orm(primary_key, auto_increment = false)]
    pub owner: String,
    /// Ray's package URI, `{protocol}://{name}` (e.g. `gcs://_ray_pkg_<hash>.zip`).
    #[sea_orm(primary_key, auto_increment = false)]
    pub uri: String,
    /// Hex SHA-256 of `content`: the package's name on the clusters. `None` for a row
    /// carried over from before packages had owners, until first named by a submit.
    pub digest: Option<String>,
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
