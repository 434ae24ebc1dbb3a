//! The text PostgreSQL's intake sends: the three statements each connection prepares
//! ([`PREPARED`]), the JSON document of a batch's jobs ([`DocRow`]), and the literals
//! its arguments are written as ([`literal`], [`text_array`]).

use entity::job;
use sea_orm::DbErr;
use uuid::Uuid;

/// What the batch needs to know, in one statement after the lock: the users'
/// QUEUED jobs per priority (rows of kind `c`) and the stored jobs of its
/// `(user, external_id)` pairs (kind `j`, one probe of the unique index per
/// pair; `(NULL::jobs).*` gives the first branch the jobs' columns).
///
/// Not read in the locking statement: the counts would come from that statement's
/// snapshot, taken before it waited for the other writer's commit (the limit was
/// overrun so; test `concurrent_writers_hold_the_queue_limit`). `OFFSET 0` keeps
/// the planner from flattening a lateral subquery into a join, which it ran as a
/// sequential scan (see [`crate::store::users::lock_users`]). A pair's probe can only
/// be of the unique `(user_id, external_id)` index because no other index leads with
/// `user_id` (migration `m20261209_000010`): the generic plan, made on a new table
/// without statistics, took `(user_id, status, priority)` and read every job of the
/// user for each pair (issue 27).
pub(super) const READ: &str = "SELECT 'c' AS kind, c.user_id AS c_user, c.priority AS c_priority, \
       c.queued AS c_queued, (NULL::jobs).* \
     FROM unnest($1::text[]) AS k(user_id) \
     CROSS JOIN LATERAL (SELECT user_id, priority, queued FROM queue_counts \
       WHERE queue_counts.user_id = k.user_id AND queued > 0 OFFSET 0) c \
     UNION ALL \
     SELECT 'j', NULL, NULL, NULL, j.* \
     FROM unnest($2::text[], $3::text[]) AS k(user_id, external_id) \
     CROSS JOIN LATERAL (SELECT * FROM jobs \
       WHERE jobs.user_id = k.user_id AND jobs.external_id = k.external_id OFFSET 0) j";

/// The batch's jobs (a JSON array of objects, `$1`) and their creation events at
/// `$2`, in one statement.
///
/// `json`, not `jsonb`: `json_to_recordset` hands each `runtime_env` and
/// `metadata` on as the text the writer wrote (serde_json's, the same text SQLite
/// stores), into columns of type `json`, which keep it. Through `jsonb` PostgreSQL
/// rewrote it (keys by length, `1e16` as `10000000000000000`, read back as an
/// integer; `-0.0` as `0.0`), so the same submission read back differently by
/// database (DESIGN §6, "JSON columns").
pub(super) const INSERT: &str = "WITH r AS (SELECT * FROM json_to_recordset($1) AS r(\
       id uuid, user_id text, external_id text, priority integer, entrypoint text, \
       runtime_env json, metadata json, cpu double precision, gpu double precision, \
       memory_bytes bigint, max_runtime_s bigint, runtime_env_digest text, \
       preemptible boolean, custom_resources text, pool text)), \
     j AS (INSERT INTO jobs (id, user_id, external_id, status, priority, entrypoint, \
       runtime_env, metadata, cpu, gpu, memory_bytes, max_runtime_s, submitted_at, \
       attempt, runtime_env_digest, preemptible, custom_resources, pool) \
       SELECT id, user_id, external_id, 'QUEUED', priority, entrypoint, runtime_env, \
       metadata, cpu, gpu, memory_bytes, max_runtime_s, $2, 1, runtime_env_digest, \
       coalesce(r.preemptible, (SELECT u.preemptible FROM users u WHERE u.id = r.user_id), \
         false), custom_resources, pool \
       FROM r ORDER BY user_id \
       RETURNING id) \
     INSERT INTO job_events (job_id, to_status, at) SELECT id, 'QUEUED', $2 FROM j";

/// [`INSERT`], guarded (the batch in one round trip, see [`super::commit`]): the jobs
/// (`$1`) and their events at `$2` are inserted only if every user of the batch
/// (`$3`) exists, no stored job has one of the batch's `(user, external_id)`
/// pairs, and no user's QUEUED jobs plus its jobs in the batch (`$4`, by `$3`'s
/// order) exceed its `max_queued_jobs` (else the default, `$5`): exactly when
/// [`super::super::decide()`] would create every job of a batch without repeated keys.
/// Otherwise nothing. Answers the number of jobs inserted (all or none) and the
/// submit time written, `at`: the database's clock once the users are locked (never
/// before `$2`), so that a batch that waited for another replica's lock on the same
/// user queues behind that replica's jobs, as the two-round-trip path does by taking
/// its time after round trip 1 (a fresh tester found a later commit with an earlier
/// `$2` ahead of jobs already answered positions 1 and 2). Runs after the lock, in a
/// snapshot of its own (READ COMMITTED), as [`READ`] does. Every
/// look-up is a probe of one index per id or pair (lateral, `OFFSET 0`): the users
/// were counted with `id = ANY($3)`, which the generic plan made on a new table ran
/// as a sequential scan of every user, in every batch.
pub(super) const INSERT_IF: &str = "WITH r AS (SELECT * FROM json_to_recordset($1) AS r(\
       id uuid, user_id text, external_id text, priority integer, entrypoint text, \
       runtime_env json, metadata json, cpu double precision, gpu double precision, \
       memory_bytes bigint, max_runtime_s bigint, runtime_env_digest text, \
       preemptible boolean, custom_resources text, pool text)), \
     t AS (SELECT greatest($2::timestamptz, clock_timestamp()) AS at), \
     ok AS (SELECT \
       (SELECT count(*) FROM unnest($3::text[]) AS k(id) CROSS JOIN LATERAL \
         (SELECT 1 FROM users WHERE users.id = k.id OFFSET 0) u) = cardinality($3::text[]) \
       AND NOT EXISTS (SELECT 1 FROM r CROSS JOIN LATERAL (SELECT 1 FROM jobs \
         WHERE jobs.user_id = r.user_id AND jobs.external_id = r.external_id OFFSET 0) x) \
       AND NOT EXISTS (SELECT 1 FROM unnest($3::text[], $4::bigint[]) AS k(user_id, n) \
         CROSS JOIN LATERAL (SELECT max_queued_jobs FROM users \
           WHERE users.id = k.user_id OFFSET 0) u \
         WHERE (SELECT coalesce(sum(queued), 0) FROM queue_counts \
           WHERE queue_counts.user_id = k.user_id) + k.n \
           > greatest(coalesce(u.max_queued_jobs, $5), 0)) AS pass), \
     j AS (INSERT INTO jobs (id, user_id, external_id, status, priority, entrypoint, \
       runtime_env, metadata, cpu, gpu, memory_bytes, max_runtime_s, submitted_at, \
       attempt, runtime_env_digest, preemptible, custom_resources, pool) \
       SELECT id, user_id, external_id, 'QUEUED', priority, entrypoint, runtime_env, \
       metadata, cpu, gpu, memory_bytes, max_runtime_s, t.at, 1, runtime_env_digest, \
       coalesce(r.preemptible, (SELECT u.preemptible FROM users u WHERE u.id = r.user_id), \
         false), custom_resources, pool \
       FROM r, ok, t \
       WHERE ok.pass ORDER BY user_id RETURNING id), \
     e AS (INSERT INTO job_events (job_id, to_status, at) SELECT id, 'QUEUED', t.at \
       FROM j, t) \
     SELECT count(*) AS inserted, (SELECT at FROM t) AS at FROM j";

/// The statements a connection prepares for intake: name, parameter types, text.
/// A connection prepares them at its first batch (the error "prepared statement
/// does not exist" says when), and again if a migration changed a table under
/// them ("cached plan must not change result type").
pub(super) const PREPARED: [(&str, &str, &str); 4] = [
    (
        "fairshare_intake_lock",
        "text[]",
        crate::store::users::LOCK_USERS,
    ),
    ("fairshare_intake_read", "text[], text[], text[]", READ),
    ("fairshare_intake_insert", "json, timestamptz", INSERT),
    (
        "fairshare_intake_insert_if",
        "json, timestamptz, text[], bigint[], integer",
        INSERT_IF,
    ),
];

/// Appends `s` to `sql` as an escape-string literal, `E'…'`, with every backslash
/// and quote doubled: its value is `s` exactly, whatever the server's
/// `standard_conforming_strings`. Errors on NUL, which no PostgreSQL text can hold
/// (the API refuses it before, DESIGN §4).
pub(super) fn literal(sql: &mut String, s: &str) -> Result<(), DbErr> {
    sql.reserve(s.len() + 3);
    sql.push_str("E'");
    // Byte by byte between the three ASCII bytes that matter (none occurs inside a
    // multi-byte UTF-8 sequence), the rest copied in runs: a batch's JSON document
    // can be hundreds of MiB.
    let mut rest = s;
    while let Some(i) = rest
        .bytes()
        .position(|b| b == b'\\' || b == b'\'' || b == 0)
    {
        sql.push_str(&rest[..i]);
        match rest.as_bytes()[i] {
            b'\\' => sql.push_str("\\\\"),
            b'\'' => sql.push_str("''"),
            _ => {
                return Err(DbErr::Custom(
                    "a text holds NUL, which PostgreSQL cannot store".into(),
                ))
            }
        }
        rest = &rest[i + 1..];
    }
    sql.push_str(rest);
    sql.push('\'');
    Ok(())
}

/// Appends `ARRAY[…]::text[]` of `items` ([`literal`] each).
pub(super) fn text_array<'a>(
    sql: &mut String,
    items: impl Iterator<Item = &'a str>,
) -> Result<(), DbErr> {
    sql.push_str("ARRAY[");
    for (i, item) in items.enumerate() {
        if i > 0 {
            sql.push(',');
        }
        literal(sql, item)?;
    }
    sql.push_str("]::text[]");
    Ok(())
}

/// A job of [`INSERT`]'s JSON document, borrowed from its row.
#[derive(serde::Serialize)]
pub(super) struct DocRow<'a> {
    id: Uuid,
    user_id: &'a str,
    external_id: Option<&'a str>,
    priority: i32,
    entrypoint: &'a str,
    runtime_env: Option<&'a serde_json::Value>,
    metadata: Option<&'a serde_json::Value>,
    cpu: f64,
    gpu: f64,
    memory_bytes: i64,
    max_runtime_s: Option<i64>,
    runtime_env_digest: Option<&'a str>,
    /// As given; `None`: the user's default, read by the statement.
    preemptible: Option<bool>,
    /// `jobs.custom_resources`: the JSON text, or null.
    custom_resources: Option<&'a str>,
    /// `jobs.pool`, or null.
    pool: Option<&'a str>,
}

impl<'a> From<&'a job::Model> for DocRow<'a> {
    fn from(j: &'a job::Model) -> DocRow<'a> {
        DocRow {
            id: j.id,
            user_id: &j.user_id,
            external_id: j.external_id.as_deref(),
            priority: j.priority,
            entrypoint: &j.entrypoint,
            runtime_env: j.runtime_env.as_ref(),
            metadata: j.metadata.as_ref(),
            cpu: j.cpu,
            gpu: j.gpu,
            memory_bytes: j.memory_bytes,
            max_runtime_s: j.max_runtime_s,
            runtime_env_digest: j.runtime_env_digest.as_deref(),
            preemptible: Some(j.preemptible),
            custom_resources: j.custom_resources.as_deref(),
            pool: j.pool.as_deref(),
        }
    }
}

impl<'a> DocRow<'a> {
    /// The row of `j` with its preemptibility as `new` gave it (the one-round-trip
    /// batch is written before its users' defaults are read).
    pub(super) fn as_given(j: &'a job::Model, preemptible: Option<bool>) -> DocRow<'a> {
        DocRow {
            preemptible,
            ..DocRow::from(j)
        }
    }
}
