//! Issue 31, part 5: secrets not kept. A job's `runtime_env` carries users' API tokens
//! (`env_vars`); from this migration on the service stores it sealed (AES-256-GCM,
//! `secrets.runtime_env_keys`, `fairshare::secrets`) for as long as the job may still
//! be sent to Ray, and deletes it when the job ends. An idempotent resubmit is compared
//! with `runtime_env_digest` ([`runtime_env_digest`]), never with the plaintext.
//!
//! Here: the column `jobs.runtime_env_digest` (hex SHA-256, 64 characters; NULL = no
//! runtime_env), computed for every existing row that has a runtime_env, and the
//! runtime_env of every job that already ended deleted (nothing will send it to Ray
//! again). What stays in plain text is the runtime_env of jobs that have not ended:
//! sealing needs the key, which is the service's configuration and not the
//! migration's, so the service seals those rows at its next start, before it takes a
//! request (`fairshare::store::seal_stored`). `fairshare migrate` alone leaves them in
//! plain text until then. `down` drops the column (the deleted values do not come back).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, FromQueryResult};
use sha2::Digest as _;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Jobs {
    Table,
    Id,
    Status,
    RuntimeEnv,
    RuntimeEnvDigest,
}

/// The idempotency digest of a runtime_env: the hex SHA-256 (64 lower-case digits) of
/// its canonical JSON, serde_json's serialization of the value (object keys in byte
/// order, no spaces, numbers as serde_json writes them, so `1` and `1.0` differ as they
/// do to the Python Ray hands them to). `None`, JSON `null` and `{}` are all the empty
/// runtime_env, as the payload comparison has always taken them (DESIGN §4, "Same
/// payload"). The service and this migration share this one function, so that a
/// digest computed here matches a resubmit's.
pub fn runtime_env_digest(env: Option<&serde_json::Value>) -> String {
    unkeyed_digest_of_text(&runtime_env_digest_text(env))
}

/// [`runtime_env_digest`] of a runtime_env's [`runtime_env_digest_text`].
pub fn unkeyed_digest_of_text(text: &[u8]) -> String {
    sha2::Sha256::digest(text)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The text a runtime_env's digest is taken of, keyed or not: its canonical JSON as
/// [`runtime_env_digest`] says, `{}` for `None` and JSON `null`.
pub fn runtime_env_digest_text(env: Option<&serde_json::Value>) -> Vec<u8> {
    match env {
        None | Some(serde_json::Value::Null) => b"{}".to_vec(),
        Some(v) => serde_json::to_vec(v).unwrap_or_default(),
    }
}

/// Rows read per page while the digests are computed.
const PAGE: u64 = 500;

#[derive(FromQueryResult)]
struct Row {
    id: uuid::Uuid,
    status: String,
    runtime_env: Option<serde_json::Value>,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .add_column(ColumnDef::new(Jobs::RuntimeEnvDigest).string_len(64).null())
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        let backend = db.get_database_backend();
        let mut after: Option<uuid::Uuid> = None;
        loop {
            let mut q = Query::select();
            q.columns([Jobs::Id, Jobs::Status, Jobs::RuntimeEnv])
                .from(Jobs::Table)
                .and_where(Expr::col(Jobs::RuntimeEnv).is_not_null())
                .order_by(Jobs::Id, Order::Asc)
                .limit(PAGE);
            if let Some(a) = after {
                q.and_where(Expr::col(Jobs::Id).gt(a));
            }
            let rows = Row::find_by_statement(backend.build(&q)).all(db).await?;
            let Some(last) = rows.last() else { break };
            after = Some(last.id);
            for r in &rows {
                let ended = matches!(r.status.as_str(), "SUCCEEDED" | "FAILED" | "STOPPED");
                let mut u = Query::update();
                u.table(Jobs::Table)
                    .value(
                        Jobs::RuntimeEnvDigest,
                        runtime_env_digest(r.runtime_env.as_ref()),
                    )
                    .and_where(Expr::col(Jobs::Id).eq(r.id));
                if ended {
                    u.value(Jobs::RuntimeEnv, Option::<serde_json::Value>::None);
                }
                db.execute(backend.build(&u)).await?;
            }
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .drop_column(Jobs::RuntimeEnvDigest)
                    .to_owned(),
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::runtime_env_digest;
    use serde_json::json;

    #[test]
    fn the_digest_is_of_canonical_json_and_empty_is_one_value() {
        let a = json!({"env_vars": {"B": "2", "A": "1"}, "pip": ["x"]});
        let b: serde_json::Value =
            serde_json::from_str(r#"{"pip":["x"],"env_vars":{"A":"1","B":"2"}}"#).unwrap();
        assert_eq!(runtime_env_digest(Some(&a)), runtime_env_digest(Some(&b)));
        assert_eq!(
            runtime_env_digest(None),
            runtime_env_digest(Some(&json!({})))
        );
        assert_eq!(
            runtime_env_digest(None),
            runtime_env_digest(Some(&json!(null)))
        );
        // python3 -c 'import hashlib;print(hashlib.sha256(b"{}").hexdigest())'
        assert_eq!(
            runtime_env_digest(None),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert_ne!(
            runtime_env_digest(Some(&json!({"n": 1}))),
            runtime_env_digest(Some(&json!({"n": 1.0})))
        );
    }
}
