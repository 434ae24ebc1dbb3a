//! Intake's writes (`store::submit_batch`) against a real database: what a batch
//! stores is what was submitted, field by field, on both databases. PostgreSQL's intake
//! sends a batch as arrays and one JSON document (store/intake.rs), so every value
//! there crosses a JSON encoding: strings with escapes and any Unicode, doubles that
//! must come back bit for bit, the full range of `i64` and absent optional fields.

use fairshare::store::{self, Intake, NewJob};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use sea_orm::{DatabaseConnection, EntityTrait};

use crate::helpers::{Db, TestDb};

/// Strings as a user may send them: any Unicode but NUL (the API refuses it), JSON's
/// escapes among them.
fn text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just('"'),
            Just('\\'),
            Just('\n'),
            Just('\u{1}'),
            Just('é'),
            Just('😀'),
            any::<char>().prop_filter("no NUL", |c| *c != '\0'),
        ],
        1..max,
    )
    .prop_map(|cs| cs.into_iter().collect())
}

/// A JSON object as `runtime_env` or `metadata` may be: nested values of every kind.
fn object() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        (-1e300f64..1e300).prop_map(serde_json::Value::from),
        text(12).prop_map(serde_json::Value::from),
    ];
    let value = leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(text(6), inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    });
    prop::collection::btree_map(text(8), value, 0..4)
        .prop_map(|m| serde_json::Value::Object(m.into_iter().collect()))
}

fn new_job() -> impl Strategy<Value = NewJob> {
    (
        (
            0..4usize,
            prop::option::of(text(20)),
            any::<i32>(),
            text(60),
        ),
        (prop::option::of(object()), prop::option::of(object())),
        (
            prop_oneof![Just(0.1), Just(1e-9), 0.0f64..1e6],
            prop_oneof![Just(0.0), Just(1.0 / 3.0), 0.0f64..64.0],
            prop_oneof![Just(0i64), Just(i64::MAX), 0..i64::MAX],
            prop::option::of(prop_oneof![Just(i64::MAX), 1..i64::MAX]),
        ),
    )
        .prop_map(
            |((user, external_id, priority, entrypoint), (runtime_env, metadata), r)| NewJob {
                user: format!("user-{user}"),
                external_id,
                priority,
                entrypoint,
                runtime_env,
                metadata,
                cpu: r.0,
                gpu: r.1,
                memory_bytes: r.2,
                max_runtime_s: r.3,
            },
        )
}

/// Submits `batch` and checks that every job it created reads back exactly as the
/// answer gave it and as it was submitted.
async fn round_trip(conn: &DatabaseConnection, batch: Vec<NewJob>) -> Result<(), TestCaseError> {
    let answers = store::submit_batch(conn, batch.clone(), 1_000_000).await;
    prop_assert_eq!(answers.len(), batch.len());
    for (new, answer) in batch.iter().zip(answers) {
        let answer = answer.map_err(|e| TestCaseError::fail(format!("{e}")))?;
        let Intake::Created(created) = answer else {
            // A repeat of a key drawn twice: resolved against the first, which is
            // checked where it was created.
            continue;
        };
        let stored = entity::job::Entity::find_by_id(created.id)
            .one(conn)
            .await
            .unwrap();
        let Some(stored) = stored else {
            return Err(TestCaseError::fail(format!("{} not stored", created.id)));
        };
        prop_assert_eq!(&stored, &created);
        prop_assert_eq!(&stored.user_id, &new.user);
        prop_assert_eq!(&stored.external_id, &new.external_id);
        prop_assert_eq!(stored.priority, new.priority);
        prop_assert_eq!(&stored.entrypoint, &new.entrypoint);
        prop_assert_eq!(&stored.runtime_env, &new.runtime_env);
        prop_assert_eq!(&stored.metadata, &new.metadata);
        prop_assert_eq!(stored.cpu.to_bits(), new.cpu.to_bits());
        prop_assert_eq!(stored.gpu.to_bits(), new.gpu.to_bits());
        prop_assert_eq!(stored.memory_bytes, new.memory_bytes);
        prop_assert_eq!(stored.max_runtime_s, new.max_runtime_s);
        prop_assert!(store::payload_differences(new, &stored).is_empty());
    }
    Ok(())
}

/// Property: any batch of submissions (any text, any JSON, any number in range) is
/// stored as submitted.
fn a_batch_is_stored_as_submitted(which: Db, cases: u32) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Some(db) = rt.block_on(TestDb::new(which)) else {
        return;
    };
    let conn = rt.block_on(async {
        let conn = sea_orm::Database::connect(&db.url).await.unwrap();
        store::migrate(&conn).await.unwrap();
        conn
    });
    let mut runner = TestRunner::new(ProptestConfig {
        cases,
        ..ProptestConfig::default()
    });
    let result = runner.run(&prop::collection::vec(new_job(), 1..40), |batch| {
        rt.block_on(round_trip(&conn, batch))
    });
    rt.block_on(conn.close()).unwrap();
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn a_batch_is_stored_as_submitted_sqlite() {
    a_batch_is_stored_as_submitted(Db::Sqlite, 48);
}

#[test]
#[cfg_attr(
    not(fairshare_postgres),
    ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
)]
fn a_batch_is_stored_as_submitted_postgres() {
    a_batch_is_stored_as_submitted(Db::Postgres, 48);
}
