//! PostgreSQL's intake: a batch takes two round trips, whatever its size (one, for a
//! batch taken while no other is in flight and with nothing to weigh: see
//! [`commit`], "One round trip").
//!
//! 1. `BEGIN; EXECUTE lock(users); EXECUTE read(users, keys)` (one simple-query
//!    message): the transaction, the users' row locks and the read of their counts
//!    and keys;
//! 2. `EXECUTE insert(jobs, at); COMMIT`: the jobs and their events, and the commit.
//!
//! The three statements are prepared once per connection with SQL `PREPARE` (and
//! planned once: the writer's sessions force generic plans), so a batch sends only
//! their arguments: arrays of texts and one JSON document, written as literals
//! ([`statements::literal`]). Through sqlx's extended protocol the same batch took six round
//! trips (the pool's ping, `BEGIN`, lock, read, insert, `COMMIT`), each a wake-up of
//! the backend and of the writer: 1.3-2.5 ms of a one-job submit against 0.4 ms of
//! work inside PostgreSQL (BENCHMARKS.md, round 6). sqlx has no pipelining; a
//! simple-query message with several statements is PostgreSQL's own way to send them
//! at once, each statement with its own snapshot (READ COMMITTED).
//!
//! A batch whose connection is lost is begun again on another; when the loss came
//! after round trip 2 was sent, the next attempt first looks whether the lost one
//! committed ([`commit`], DESIGN §6 "Lost connections").

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use entity::job;
use sea_orm::sqlx::{postgres::PgRow, Postgres, Row as _};
use sea_orm::{DbErr, FromQueryResult, QueryResult};
use uuid::Uuid;

use super::decide::{decide, key_pairs, new_row, Decided, Stored};
use super::{create_users, db_err, now, Answered, Db, Intake, NewJob, Txn};

mod connection;
mod statements;

use connection::{
    abandon, connection_lost, failed, failed_db, prepare_after, rollback, simple, unprepared,
    Failed,
};
use statements::{literal, text_array, DocRow};

/// Commits `batch` (see the module docs), beginning it again when its connection
/// is lost, at most the pool's size + 2 times (enough to get past every idle
/// connection of the pool, had the server ended them all, as a restart does, and
/// then some), then failing with the last error (503). A batch whose doubt is
/// still open then may have been committed: as with any 503 to a submit, a retry
/// with the same `external_id` finds the job if so.
///
/// - Lost before round trip 2 was sent (round trip 1, preparing, creating users):
///   nothing of the batch can have been committed; it begins again on another
///   connection.
/// - Lost after round trip 2 was sent: the `COMMIT` may or may not have happened.
///   The next attempt, on another connection, first takes the batch's user locks
///   (round trip 1 as always), which waits for the lost transaction to end if its
///   session still runs, then looks for the first of the lost attempt's job ids:
///   a transaction is all or nothing, so that one id tells. Found: the lost
///   attempt committed, and its answers are the batch's (the new transaction is
///   rolled back). Not found: it never will be, and the batch goes on as new.
///
/// `decide`: what the batch answers and inserts given what round trip 1 read.
///
/// **One round trip** (`speculate`, when the writer has no other batch in flight:
/// a lone client's case). The batch is first sent as one message, `BEGIN; lock;
/// read; insert if; COMMIT` ([`statements::INSERT_IF`]), its ids and submit time chosen
/// before: the guarded insert writes every job exactly when [`super::decide()`]
/// would create them all (users exist, no key stored, every user within its
/// limit), and nothing otherwise; then the batch goes the two-round-trip way
/// above. The answers (queue positions) come from `decide` on what the same
/// message read. Its submit time is taken before its user locks, not after: the
/// writer runs such a batch alone, so none of its own batches can commit a later
/// submit time first; another replica's batch for the same user, racing it within
/// that round trip, can (their queue order is then their submit times', and the
/// positions answered may count the other batch's jobs or miss them). A loss in
/// that round trip is in doubt, settled as above.
pub(super) async fn commit(
    db: &Db,
    batch: &[NewJob],
    users: &[&str],
    default_max_queued: u32,
    speculate: bool,
    decide: impl Fn(Stored) -> Decided,
) -> Result<(Vec<Answered>, u8), DbErr> {
    let pool = db.get_postgres_connection_pool();
    let max_lost = pool.options().get_max_connections() as usize + 2;
    let mut lost = 0;
    // The last attempt's first job id and answers when its round trip 2 was lost.
    let mut in_doubt = None;
    let batches = &crate::metrics::get().intake_batches;
    if speculate {
        match one_round_trip(db, batch, users, default_max_queued, &mut in_doubt).await {
            Ok(Some(answers)) => {
                batches.with_label_values(&["1"]).inc();
                return Ok((answers, 1));
            }
            Ok(None) => {}
            Err(Failed::Refused(e)) => return Err(e),
            Err(Failed::Lost(e)) => {
                lost += 1;
                tracing::info!(error = %e, lost, in_doubt = in_doubt.is_some(),
                    "intake lost its connection; the batch begins again on another");
            }
        }
    }
    loop {
        let e = match attempt(db, batch, users, default_max_queued, &decide, &mut in_doubt).await {
            Ok(answers) => {
                batches.with_label_values(&["2"]).inc();
                return Ok((answers, 2));
            }
            Err(Failed::Refused(e)) => return Err(e),
            Err(Failed::Lost(e)) => e,
        };
        lost += 1;
        if lost > max_lost {
            return Err(e);
        }
        tracing::info!(error = %e, lost, in_doubt = in_doubt.is_some(),
            "intake lost its connection; the batch begins again on another");
    }
}

/// Round trip 1's text, `BEGIN; EXECUTE lock(users); EXECUTE read(users, keys)`,
/// and the users' array literal (the one-round-trip message goes on from it).
fn begin_lock_read(users: &[&str], pairs: &[(&str, &str)]) -> Result<(String, String), Failed> {
    let mut users_array = String::new();
    text_array(&mut users_array, users.iter().copied()).map_err(Failed::Refused)?;
    let mut sql = format!(
        "BEGIN; EXECUTE fairshare_intake_lock({users_array}); \
         EXECUTE fairshare_intake_read({users_array}, "
    );
    text_array(&mut sql, pairs.iter().map(|p| p.0)).map_err(Failed::Refused)?;
    sql.push_str(", ");
    text_array(&mut sql, pairs.iter().map(|p| p.1)).map_err(Failed::Refused)?;
    sql.push(')');
    Ok((sql, users_array))
}

/// The batch in one round trip (see [`commit`]): `Some(answers)` if it committed
/// so, `None` if the guard found something [`super::decide()`] must weigh (nothing
/// was written). A connection that has not prepared the statements yet prepares
/// them and is sent the message again. A loss leaves the batch in doubt, with the
/// answers it would have (without queue positions: the API counts them).
async fn one_round_trip(
    db: &Db,
    batch: &[NewJob],
    users: &[&str],
    default_max_queued: u32,
    in_doubt: &mut Option<(Uuid, Vec<Answered>)>,
) -> Result<Option<Vec<Answered>>, Failed> {
    let pairs = key_pairs(batch);
    if pairs.len() != batch.iter().filter(|n| n.external_id.is_some()).count() {
        // A key repeated inside the batch resolves against its first use: decide.
        return Ok(None);
    }
    let at = now();
    let ids: Vec<Uuid> = batch.iter().map(|_| Uuid::now_v7()).collect();
    // Each row with its preemptibility as given: the statement takes the user's
    // default for those that gave none (its users are read by the same message).
    // (Until then a row that gave none says false: the answers of a batch left in
    // doubt before its read can say so, while the row holds the user's default.)
    let mut given: Vec<(job::Model, Option<bool>)> = batch
        .iter()
        .zip(&ids)
        .map(|(new, id)| {
            let own = new.preemptible.unwrap_or(false);
            (new_row(new, *id, at, own), new.preemptible)
        })
        .collect();
    given.sort_by(|a, b| a.0.user_id.cmp(&b.0.user_id));
    let given_of: Vec<Option<bool>> = given.iter().map(|g| g.1).collect();
    let mut rows: Vec<job::Model> = given.into_iter().map(|g| g.0).collect();
    let mut per_user: HashMap<&str, usize> = HashMap::new();
    for new in batch {
        *per_user.entry(new.user.as_str()).or_default() += 1;
    }
    let counts: Vec<String> = users
        .iter()
        .map(|u| per_user.get(u).copied().unwrap_or(0).to_string())
        .collect();

    let (mut sql, users_array) = begin_lock_read(users, &pairs)?;
    sql.push_str("; EXECUTE fairshare_intake_insert_if(");
    let doc: Vec<DocRow<'_>> = rows
        .iter()
        .zip(&given_of)
        .map(|(j, given)| DocRow::as_given(j, *given))
        .collect();
    let doc = serde_json::to_string(&doc)
        .map_err(|e| Failed::Refused(DbErr::Custom(format!("a batch as JSON: {e}"))))?;
    literal(&mut sql, &doc).map_err(Failed::Refused)?;
    sql.push_str(", ");
    literal(&mut sql, &at.format("%Y-%m-%d %H:%M:%S%.6f+00").to_string())
        .map_err(Failed::Refused)?;
    let _ = write!(
        sql,
        ", {users_array}, '{{{}}}'::bigint[], {default_max_queued}); COMMIT",
        counts.join(",")
    );

    let pool = db.get_postgres_connection_pool();
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| Failed::Refused(db_err(e)))?;
    let mut prepared = false;
    let answered = loop {
        match simple(&mut conn, &sql).await {
            Ok(read) => break read,
            Err(e) => {
                if !prepared && unprepared(&e) {
                    // Nothing ran: prepare, and send it again.
                    prepared = true;
                    conn = prepare_after(conn, e).await?;
                    continue;
                }
                if connection_lost(&e) {
                    drop(conn.detach());
                    *in_doubt = Some((batch_first(&ids), created(&rows)));
                    return Err(Failed::Lost(db_err(e)));
                }
                abandon(conn, &e).await;
                return Err(failed(e));
            }
        }
    };
    let (inserted, read): (Vec<PgRow>, Vec<PgRow>) = answered
        .into_iter()
        .partition(|row| row.try_column("inserted").is_ok());
    let (inserted, written_at): (i64, Option<chrono::DateTime<chrono::Utc>>) =
        match inserted.first() {
            Some(row) => (
                row.try_get("inserted")
                    .map_err(|e| Failed::Refused(db_err(e)))?,
                row.try_get("at").map_err(|e| Failed::Refused(db_err(e)))?,
            ),
            None => (0, None),
        };
    if inserted == 0 {
        return Ok(None);
    }
    // The submit time the guarded insert wrote (the database's, after the lock).
    let at = written_at.unwrap_or(at);
    for row in &mut rows {
        row.submitted_at = at;
    }
    // Committed: what decide makes of the same read, with the same ids, is what was
    // written (the guard is decide's own condition for creating every job).
    let stored = stored_of(read, default_max_queued).map_err(Failed::Refused)?;
    for (row, given) in rows.iter_mut().zip(&given_of) {
        row.preemptible = given.unwrap_or_else(|| stored.preemptible.contains(&row.user_id));
    }
    let mut next = ids.iter().copied();
    let (answers, decided) = decide(batch, stored, default_max_queued, at, || {
        next.next().unwrap_or_else(Uuid::now_v7)
    });
    let written: BTreeSet<Uuid> = rows.iter().map(|r| r.id).collect();
    let same = decided.len() == rows.len() && decided.iter().all(|d| written.contains(&d.id));
    #[cfg(feature = "fault-injection")]
    if let Some(name) = db_name(db) {
        if crate::faults::intake_commit_answer_lost(&name).await {
            let answers = if same { answers } else { created(&rows) };
            *in_doubt = Some((batch_first(&ids), answers));
            return Err(Failed::Lost(DbErr::Custom(
                "fault injected: the answer to the commit was lost".into(),
            )));
        }
    }
    if !same {
        // The guard read the counts a statement later than decide's read: a job
        // that left or re-entered a queue in between (a dispatch, a requeue, which
        // take no user lock) can make them disagree. What was written stands (the
        // guard held the limit on the later count); positions are counted afresh.
        tracing::info!(
            written = rows.len(),
            decided = decided.len(),
            "a queue changed between intake's read and its guarded insert"
        );
        return Ok(Some(created(&rows)));
    }
    Ok(Some(answers))
}

/// Each row's answer as created, without its queue position (the API counts it).
fn created(rows: &[job::Model]) -> Vec<Answered> {
    rows.iter()
        .map(|row| Answered {
            answer: Ok(Intake::Created(row.clone())),
            position: None,
        })
        .collect()
}

/// The id of a batch's first job as written (rows go in user order, but any of
/// them tells whether the transaction committed): the smallest.
fn batch_first(ids: &[Uuid]) -> Uuid {
    ids.iter().copied().min().unwrap_or_else(Uuid::nil)
}

/// One attempt at a batch (see [`commit`]). On a loss in round trip 2 it leaves
/// the attempt's first job id and answers in `in_doubt`; when `in_doubt` holds an
/// earlier attempt's, it settles that first.
async fn attempt(
    db: &Db,
    batch: &[NewJob],
    users: &[&str],
    default_max_queued: u32,
    decide: &impl Fn(Stored) -> Decided,
    in_doubt: &mut Option<(Uuid, Vec<Answered>)>,
) -> Result<Vec<Answered>, Failed> {
    let (mut txn, stored) = read(db, batch, users, default_max_queued).await?;
    if let Some((id, _)) = in_doubt {
        let committed = txn.holds_job(*id).await?;
        let (_, answers) = in_doubt.take().expect("checked above");
        if committed {
            txn.roll_back().await;
            return Ok(answers);
        }
    }
    let (answers, rows, at) = decide(stored);
    match txn.insert_and_commit(&rows, at).await {
        Ok(()) => {}
        Err(Failed::Lost(e)) => {
            let Some(first) = rows.first() else {
                // Nothing to commit: the answers (stored jobs, full queues) stand
                // as read.
                return Ok(answers);
            };
            *in_doubt = Some((first.id, answers));
            return Err(Failed::Lost(e));
        }
        Err(refused) => return Err(refused),
    }
    #[cfg(feature = "fault-injection")]
    if let (Some(first), Some(name)) = (rows.first(), db_name(db)) {
        if crate::faults::intake_commit_answer_lost(&name).await {
            *in_doubt = Some((first.id, answers));
            return Err(Failed::Lost(DbErr::Custom(
                "fault injected: the answer to the commit was lost".into(),
            )));
        }
    }
    Ok(answers)
}

/// The database `db` connects to (the fault-injection hooks' key).
#[cfg(feature = "fault-injection")]
fn db_name(db: &Db) -> Option<String> {
    let options = db.get_postgres_connection_pool().connect_options();
    options.get_database().map(str::to_string)
}

/// Begins the batch's transaction with its users locked and reads their limits,
/// counts and keys (round trip 1). Users that do not exist yet are created first,
/// in a commit of their own (the transaction is rolled back, and begun again once
/// they exist; at most twice, then the batch fails): inserting a user row inside
/// the batch would take its lock out of id order. A user created so whose batch
/// then fails stays, with the defaults, as `PUT /v1/users/{u}` with an empty body
/// would leave it. A connection found lost (the pool does not ping a connection
/// before handing it out, `store::connect_intake`) is [`Failed::Lost`]: nothing
/// was written, and [`commit`] begins the batch again on another.
///
/// `users`: the batch's users, each once, in byte order (the lock's order).
async fn read(
    db: &Db,
    batch: &[NewJob],
    users: &[&str],
    default_max_queued: u32,
) -> Result<(Txn<Postgres>, Stored), Failed> {
    let pool = db.get_postgres_connection_pool();
    let pairs = key_pairs(batch);
    let (sql, _) = begin_lock_read(users, &pairs)?;

    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| Failed::Refused(db_err(e)))?;
    let (mut created, mut prepared) = (0, false);
    loop {
        let rows = match simple(&mut conn, &sql).await {
            Ok(rows) => rows,
            Err(e) => {
                // Prepare, once per connection.
                if !prepared && unprepared(&e) {
                    prepared = true;
                    conn = prepare_after(conn, e).await?;
                    continue;
                }
                abandon(conn, &e).await;
                return Err(failed(e));
            }
        };
        let stored = stored_of(rows, default_max_queued).map_err(Failed::Refused)?;
        if stored.limits.len() == users.len() {
            return Ok((Txn { conn: Some(conn) }, stored));
        }
        // Back to the pool while the users are created: that takes a connection
        // of the same pool, which may have no other.
        drop(rollback(conn).await);
        if created == 2 {
            return Err(Failed::Refused(DbErr::Custom(
                "the batch's users could not be created".into(),
            )));
        }
        created += 1;
        let missing = users
            .iter()
            .copied()
            .filter(|u| !stored.limits.contains_key(*u));
        create_users(db, missing, now()).await.map_err(failed_db)?;
        conn = pool
            .acquire()
            .await
            .map_err(|e| Failed::Refused(db_err(e)))?;
        prepared = false;
    }
}

/// The rows of round trip 1: the lock's `(id, max_queued_jobs)` and the read's
/// kinds `c` and `j`, all in text format (a simple query's results).
fn stored_of(rows: Vec<PgRow>, default_max_queued: u32) -> Result<Stored, DbErr> {
    let mut stored = Stored::default();
    let mut found = Vec::new();
    for row in rows {
        if row.try_column("kind").is_err() {
            let id: String = row.try_get(0).map_err(db_err)?;
            let max: Option<i32> = row.try_get(1).map_err(db_err)?;
            let preemptible: bool = row.try_get(2).map_err(db_err)?;
            stored.add_preemptible(&id, preemptible);
            stored.add_limit(id, max, default_max_queued);
            continue;
        }
        let row = QueryResult::from(row);
        let kind: String = row.try_get("", "kind")?;
        if kind == "c" {
            stored.add_count(
                row.try_get("", "c_user")?,
                row.try_get("", "c_priority")?,
                row.try_get("", "c_queued")?,
            );
        } else {
            found.push(job::Model::from_query_result(&row, "")?);
        }
    }
    stored.add_known(found);
    Ok(stored)
}

impl Txn<Postgres> {
    /// Whether job `id` is stored, read inside the batch's transaction after its
    /// user locks (see [`commit`]).
    async fn holds_job(&mut self, id: Uuid) -> Result<bool, Failed> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(Failed::Refused(DbErr::Custom(
                "the batch's connection is gone".into(),
            )));
        };
        let sql = format!("SELECT 1 FROM jobs WHERE id = '{id}'");
        match simple(conn, &sql).await {
            Ok(rows) => Ok(!rows.is_empty()),
            Err(e) => {
                if let Some(conn) = self.conn.take() {
                    abandon(conn, &e).await;
                }
                Err(failed(e))
            }
        }
    }

    /// Rolls the transaction back and hands its connection back to the pool.
    async fn roll_back(mut self) {
        if let Some(conn) = self.conn.take() {
            drop(rollback(conn).await);
        }
    }

    /// Inserts the jobs and their creation events (see [`statements::INSERT`]) and commits
    /// (round trip 2). A refusal leaves nothing of the batch stored
    /// ([`Failed::Refused`]); a lost connection ([`Failed::Lost`]) leaves it in
    /// doubt, for [`commit`] to settle.
    async fn insert_and_commit(
        mut self,
        rows: &[job::Model],
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), Failed> {
        let at = at.format("%Y-%m-%d %H:%M:%S%.6f+00").to_string();
        let mut sql = String::new();
        if !rows.is_empty() {
            let doc: Vec<DocRow<'_>> = rows.iter().map(DocRow::from).collect();
            let doc = serde_json::to_string(&doc)
                .map_err(|e| Failed::Refused(DbErr::Custom(format!("a batch as JSON: {e}"))))?;
            sql.push_str("EXECUTE fairshare_intake_insert(");
            literal(&mut sql, &doc).map_err(Failed::Refused)?;
            sql.push_str(", ");
            literal(&mut sql, &at).map_err(Failed::Refused)?;
            sql.push_str("); ");
        }
        sql.push_str("COMMIT");
        let Some(mut conn) = self.conn.take() else {
            return Err(Failed::Refused(DbErr::Custom(
                "the batch's connection is gone".into(),
            )));
        };
        match simple(&mut conn, &sql).await {
            Ok(_) => Ok(()),
            Err(e) => {
                abandon(conn, &e).await;
                Err(failed(e))
            }
        }
    }
}
