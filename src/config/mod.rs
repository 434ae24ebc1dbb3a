//! Typed settings loaded with the `config` crate (DESIGN §7).
//!
//! Sources, later ones winning: the built-in `config/default.toml`, the file given by
//! `--config FILE`, then environment variables `FAIRSHARE__SECTION__KEY`. Unknown keys
//! and bad values are errors that name the key (`scheduler.usage_half_life: ...`).
//!
//! Here: the sections and the loading; `validate` the checks run after loading;
//! `tests` their tests against `config/default.toml`.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

mod duration;
mod network;
mod preemption;
#[cfg(test)]
mod tests;
mod validate;

pub use duration::{parse_bounded, parse_or_off, MAX as MAX_DURATION};
pub use network::Network;
pub use preemption::PreemptionSettings;

/// The built-in defaults, shipped inside the binary so it runs without files.
pub const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

/// Why the settings could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A source could not be read or parsed (missing file, bad TOML).
    #[error("cannot read configuration: {0}")]
    Source(#[from] config::ConfigError),
    /// A key is unknown or has a bad value; `key` is its dotted path.
    #[error("invalid configuration key `{key}`: {reason}")]
    Invalid { key: String, reason: String },
    /// The file given is not valid TOML: where, with the line it is on.
    #[error("cannot read configuration file {path}: {reason}")]
    File { path: String, reason: String },
}

/// All settings.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub scheduler: SchedulerSettings,
    #[serde(default)]
    pub clusters: Vec<ClusterSettings>,
    pub monitor: MonitorSettings,
    pub dispatcher: DispatcherSettings,
    pub auth: AuthSettings,
    pub telemetry: TelemetrySettings,
    pub leadership: LeadershipSettings,
    /// `[events]`: the SSE stream and webhook delivery (DESIGN §4, "Events").
    pub events: EventSettings,
    /// `[[webhooks]]`: receivers of every job transition (none by default).
    #[serde(default)]
    pub webhooks: Vec<WebhookSettings>,
    pub ray_compat: RayCompatSettings,
    /// `[notify]`: how attempts tell the service that their driver started and ended
    /// (DESIGN §5, "How the end of a job is learned").
    pub notify: NotifySettings,
    /// `[preemption]`: stopping preemptible jobs for users below their fair share
    /// (DESIGN §2 "Preemption").
    pub preemption: PreemptionSettings,
    /// `[secrets]`: the keys that seal runtime_envs at rest (DESIGN §6, "Secrets").
    pub secrets: SecretSettings,
    /// `[[licenses]]`: resources with one count shared by every cluster (DESIGN §2,
    /// "Licenses"; none by default).
    #[serde(default)]
    pub licenses: Vec<LicenseSettings>,
    /// `[[pools]]`: capacity this service admits jobs to but does not run (issue 30,
    /// DESIGN §2 "Pools" and §3 "Admission"; none by default).
    #[serde(default)]
    pub pools: Vec<PoolSettings>,
    /// `[admission]`: the runners' leases on admitted pool jobs (DESIGN §3).
    pub admission: AdmissionSettings,
    /// `[usage]`: how long usage accounting keeps its rollup (issue 48, DESIGN §6
    /// "Usage rollup").
    pub usage: UsageSettings,
    /// `[[sizes]]`: named job sizes (issue 48 part 4; none by default).
    #[serde(default)]
    pub sizes: Vec<SizeSettings>,
    /// `[estimates]`: the estimated start of every waiting job (DESIGN §2,
    /// "Estimates").
    pub estimates: EstimateSettings,
}

/// `[estimates]`: the forward run that gives every QUEUED job an estimated start
/// (DESIGN §2, "Estimates"; issue 48).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EstimateSettings {
    /// Compute estimates at all (false: `estimated_start` is always null).
    pub enabled: bool,
    /// How often the estimates are refreshed at most: changes within one interval
    /// are taken together by one forward run, off the arbiter's cycle. At least 1 s.
    #[serde(with = "crate::config::duration")]
    pub refresh: Duration,
    /// Expected run time of a job with no `max_runtime_s` whose user has not yet run
    /// its entrypoint to completion (`estimate_basis = "default"`). At least 1 s.
    #[serde(with = "crate::config::duration")]
    pub default_runtime: Duration,
    /// How far ahead the forward run looks; a job not started by then has no
    /// estimate. At least 1 s.
    #[serde(with = "crate::config::duration")]
    pub horizon: Duration,
    /// Most QUEUED jobs one forward run reads (default 20,000, at least 1): past it,
    /// each user's queue is cut to its first `k` jobs, `k` the largest with
    /// `Σ_users min(queued_u, k) ≤ max_jobs` (at least 1), and the jobs cut get no
    /// estimate (null, as past the horizon). The forward run makes at most 20,000
    /// cycles, so it starts few more jobs than that; the cap bounds the memory and the
    /// reads of a refresh at a million queued (issue 43 §7).
    pub max_jobs: u64,
}

/// `[usage]`: retention of the usage rollup (DESIGN §6, "Usage rollup").
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageSettings {
    /// How long hourly rows are kept (what `step=hour` reads); at least 1 day, at most
    /// `retention`.
    #[serde(with = "crate::config::duration")]
    pub hourly_retention: Duration,
    /// How long daily rows are kept (what `step=day` and `step=month` read); at least
    /// 1 day.
    #[serde(with = "crate::config::duration")]
    pub retention: Duration,
    /// How often rows past retention are deleted; at least 1 s.
    #[serde(with = "crate::config::duration")]
    pub prune_interval: Duration,
}

/// One `[[sizes]]` entry: a named set of resources a job may ask for by name
/// (`size` on `/v1/jobs`, metadata `fairshare.size` on Ray's Jobs API).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeSettings {
    /// 1–64 characters `A-Z a-z 0-9 _ . -`, unique.
    pub name: String,
    /// Cores (at most 4 decimal places).
    #[serde(default)]
    pub cpu: f64,
    /// GPUs.
    #[serde(default)]
    pub gpu: f64,
    /// Bytes: an integer, or a string with a unit (`"16 GiB"`, `"512 MB"`).
    #[serde(default, deserialize_with = "crate::config::deserialize_bytes")]
    pub memory_bytes: u64,
    /// Custom resources by name (Ray's names, amounts > 0).
    #[serde(default)]
    pub custom: std::collections::BTreeMap<String, f64>,
}

/// Bytes as an integer or a string with a unit: `B`, `KB`/`MB`/`GB`/`TB` (powers of
/// 1000) or `KiB`/`MiB`/`GiB`/`TiB` (powers of 1024), e.g. `"16 GiB"`.
pub fn deserialize_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(BytesVisitor)
}

/// Reads [`deserialize_bytes`]'s two forms and says which it expects for anything else
/// (a fresh tester's finding: a negative or fractional number said "data did not
/// match any variant of untagged enum Either").
struct BytesVisitor;

impl serde::de::Visitor<'_> for BytesVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(
            "a whole number of bytes of 0 or more, or a string with a unit such as \"16 GiB\"",
        )
    }

    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<u64, E> {
        Ok(n)
    }

    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<u64, E> {
        u64::try_from(n).map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(n), &self))
    }

    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<u64, E> {
        if n.is_finite() && n >= 0.0 && n.fract() == 0.0 && n <= i64::MAX as f64 {
            Ok(n as u64)
        } else {
            Err(E::invalid_value(serde::de::Unexpected::Float(n), &self))
        }
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<u64, E> {
        parse_bytes(s).map_err(E::custom)
    }
}

/// Parses `"16 GiB"`, `"512MB"`, `"1024"` into bytes.
///
/// # Errors
/// Not a number with a known unit, or too large: the message says what was expected.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let not_a_size = || format!("{text:?} is not a size such as \"16 GiB\"");
    let mult: u128 = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        u => {
            return Err(format!(
                "{u:?} is not a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    // Exactly, in integers: `int.frac × mult` must be a whole number of bytes (a fresh
    // tester's finding: "0.3 B" and "1.0000001 KiB" were truncated to 0 and 1024).
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') || int.len() + frac.len() > 30 {
        return Err(not_a_size());
    }
    let digits: u128 = format!("0{int}{frac}").parse().map_err(|_| not_a_size())?;
    let scale = 10u128.pow(frac.len() as u32);
    let scaled = digits
        .checked_mul(mult)
        .ok_or_else(|| format!("{text:?} is too large"))?;
    if scaled % scale != 0 {
        return Err(format!("{text:?} is not a whole number of bytes"));
    }
    let bytes = scaled / scale;
    if bytes > i64::MAX as u128 {
        return Err(format!("{text:?} is too large"));
    }
    Ok(bytes as u64)
}

/// One `[[pools]]` entry: capacity a runner outside this service drives (such as a
/// gateway creating one KubeRay cluster per job). Jobs naming it (`pool` on `/v1/jobs`,
/// metadata `fairshare.pool` on Ray's API) are admitted to it by the fair-share policy
/// and never sent to Ray; the runner starts them and reports back.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSettings {
    /// Unique among pools, and not the name of a `[[clusters]]` entry (a grant names
    /// one or the other): 1–64 characters `[A-Za-z0-9_.-]`.
    pub name: String,
    /// Its total, by resource: `cpu` (cores), `gpu`, `memory_bytes`, or a custom
    /// resource name (registered at load, like a license's), each amount above 0; e.g.
    /// `capacity = { clusters = 20, gpu = 8 }`. A resource it does not name it has
    /// none of: a job for it asks only what it names (`cpu = 0` unless it names cpu).
    pub capacity: std::collections::BTreeMap<String, f64>,
}

impl PoolSettings {
    /// The pool's capacity as the policy counts it (names registered at load;
    /// a name that is not, which [`Settings::load`] refuses, counts nothing).
    #[must_use]
    pub fn total(&self) -> crate::policy::Resources {
        resource_map(&self.capacity)
    }
}

/// What happens to an admitted or started pool job whose runner's lease lapsed.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OnLeaseLapse {
    /// Back to the queue at its old place, attempt + 1.
    Requeue,
    /// FAILED, with the reason.
    Fail,
}

/// `[admission]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionSettings {
    /// How long an admitted or started pool job's runner may stay silent: every report
    /// (`started`, `heartbeat`) renews the lease for this long. At least 1 s.
    #[serde(with = "crate::config::duration")]
    pub lease: Duration,
    /// `requeue` (default) or `fail`: what a lapsed lease does to the job.
    pub on_lease_lapse: OnLeaseLapse,
}

impl AdmissionSettings {
    /// How often the leader looks for lapsed leases: a quarter of the lease, between
    /// 100 ms and 5 s (a lapse is noticed within a quarter lease).
    #[must_use]
    pub fn check_interval(&self) -> Duration {
        (self.lease / 4).clamp(Duration::from_millis(100), Duration::from_secs(5))
    }

    /// The end of a lease given or renewed now (`now` + `lease`).
    #[must_use]
    pub fn lease_from_now(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::Utc::now()
            + chrono::Duration::from_std(self.lease)
                .unwrap_or_else(|_| chrono::Duration::seconds(60))
    }
}

/// One `[[licenses]]` entry (Slurm's licenses): at most `count` of `name` held at
/// once by this service's jobs, over all clusters together, e.g. `name =
/// "qpu_session"`, `count = 4`. Jobs ask for it as a custom resource
/// (`resources.custom` on `/v1`, `entrypoint_resources` on Ray's API); it counts in
/// fitting and in the dominant share like any resource, and is never passed to Ray.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LicenseSettings {
    /// A custom resource name (1–64 characters `[A-Za-z0-9_.:/-]`, starting with a
    /// letter or `_`; not `CPU`, `GPU`, `memory`, `object_store_memory` nor
    /// `node:*`). Unique. Should a cluster also report a resource of this name, the
    /// license's count is what the policy goes by.
    pub name: String,
    /// Seats: a number above 0 and at most 1e6, as a job's request (jobs usually
    /// take whole ones).
    pub count: f64,
}

/// `[secrets]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSettings {
    /// AES-256 keys (32 bytes each, standard base64: `openssl rand -base64 32`) that
    /// seal each job's `runtime_env` in the database, **newest first**: the first
    /// seals, every one opens, and at start the service re-seals what an older key
    /// sealed under the first (so a key can be dropped after one restart with the new
    /// one first). Required when `auth.tokens` are configured; empty on an open
    /// loopback service stores runtime_envs as they are. In the environment one string,
    /// the keys separated by commas. Never logged.
    pub runtime_env_keys: crate::secrets::KeyList,
}

/// `[notify]`: each attempt's entrypoint runs behind a watcher that POSTs to
/// `<url>/v1/attempts/{submission_id}/{started|ended}`, so that the end of a job is
/// known within milliseconds instead of at the next poll.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifySettings {
    /// Send entrypoints behind the watcher (false: learn every end by polling).
    pub enabled: bool,
    /// The base URL at which Ray's job processes reach this service, e.g.
    /// `http://fairshare.ns.svc:8080`. Empty: `http://<the bound address>`, which
    /// works when Ray runs where that address is reachable (loopback in the quickstart
    /// and tests); a service bound to every interface (0.0.0.0) must set it, or it
    /// runs without notifications and says so at start.
    pub url: String,
    /// The key (at least 16 bytes) that signs notification URLs. Empty: a random key
    /// for this process; then notifications from attempts dispatched by another
    /// replica or before a restart are not recognised, and the poll learns their end.
    /// Set it (the same on every replica) to keep them. Never logged.
    pub key: String,
}

impl std::fmt::Debug for NotifySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifySettings")
            .field("enabled", &self.enabled)
            .field("url", &self.url)
            .field("key", &if self.key.is_empty() { "" } else { "<hidden>" })
            .finish()
    }
}

/// `[ray_compat]`: Ray's Jobs REST API served under `/api/` (docs/ray-jobs-api.md).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RayCompatSettings {
    /// Largest `working_dir`/`py_modules` package accepted by `PUT /api/packages/...`,
    /// in bytes (kept in the database's `ray_packages` table until sent to a cluster).
    pub max_package_bytes: usize,
    /// Who a job submitted through Ray's Jobs API by a token without a user (or with
    /// no token) belongs to: these rules, tried in order, the first that names a user
    /// wins; none does → 422. A token with a user always submits as that user.
    pub user_rules: Vec<IdentityRule>,
    /// The same kind of rules for a job's group (stored in its metadata under
    /// `fairshare.group`, shown with the job); none matching = no group.
    #[serde(default)]
    pub group_rules: Vec<IdentityRule>,
    /// What a Ray-API submit that declares no resources (no `entrypoint_num_*`,
    /// `entrypoint_memory` or `entrypoint_resources`) asks for (Ray's own default is
    /// nothing, which fair share cannot count; docs/qiskit-serverless.md).
    pub default_resources: DefaultResources,
}

/// `ray_compat.default_resources`: cores, GPUs and bytes of a Ray-API job that
/// declares none. `cpu > 0` or `gpu > 0`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultResources {
    /// Cores (at most 4 decimal places).
    pub cpu: f64,
    /// GPUs (at most 4 decimal places).
    #[serde(default)]
    pub gpu: f64,
    /// Bytes.
    #[serde(default)]
    pub memory_bytes: u64,
}

/// One rule of `ray_compat.user_rules` / `group_rules`: where a job's user (or group)
/// is read from what the client already sends (DESIGN §4, "Who a job belongs to").
#[derive(Clone, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case", deny_unknown_fields)]
pub enum IdentityRule {
    /// `metadata[key]`, as written.
    Metadata {
        /// The metadata key, e.g. `fairshare.user`.
        key: String,
    },
    /// `runtime_env.env_vars[name]`, as written (e.g. `ENV_JOB_GATEWAY_INSTANCE`).
    EnvVar {
        /// The variable's name.
        name: String,
    },
    /// A keyed hash of `runtime_env.env_vars[name]`: `u-` and the first 32 hex digits
    /// of HMAC-SHA-256(`secret`, value), for a variable that holds a per-user secret
    /// (`QISKIT_IBM_TOKEN`): users are told apart, the secret is never stored.
    EnvVarHash {
        /// The variable's name.
        name: String,
        /// The HMAC key, at least 16 bytes; changing it makes every user a new one.
        secret: String,
    },
    /// This value for every job no earlier rule placed (said once in the log).
    Default {
        /// The user (or group) id.
        value: String,
    },
}

impl std::fmt::Debug for IdentityRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdentityRule::Metadata { key } => write!(f, "metadata[{key:?}]"),
            IdentityRule::EnvVar { name } => write!(f, "env_vars[{name:?}]"),
            IdentityRule::EnvVarHash { name, .. } => {
                write!(f, "hash(env_vars[{name:?}], <redacted>)")
            }
            IdentityRule::Default { value } => write!(f, "default {value:?}"),
        }
    }
}

/// `[events]`: how `GET /v1/events` and the webhooks read `job_events`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSettings {
    /// A reader looks at `job_events` at least this often; commits of this replica wake
    /// it at once, so this bounds the latency of another replica's events.
    #[serde(with = "crate::config::duration")]
    pub poll_interval: Duration,
    /// An event id still missing while later ones are visible (a transaction that took
    /// its id has not committed yet, or rolled back) holds readers back for at most
    /// this long before they take the id as never coming.
    #[serde(with = "crate::config::duration")]
    pub gap_grace: Duration,
    /// An idle SSE stream gets a comment line this often, so proxies keep it open and
    /// a dead client is noticed.
    #[serde(with = "crate::config::duration")]
    pub keep_alive: Duration,
    /// Timeout of one webhook request.
    #[serde(with = "crate::config::duration")]
    pub webhook_timeout: Duration,
    /// First wait before a failed webhook delivery is retried; doubles up to
    /// `webhook_retry_max_backoff`, and retries go on until the receiver takes it.
    #[serde(with = "crate::config::duration")]
    pub webhook_retry_initial_backoff: Duration,
    /// Longest wait between two tries of one delivery.
    #[serde(with = "crate::config::duration")]
    pub webhook_retry_max_backoff: Duration,
}

/// One `[[webhooks]]` entry: where job transitions are POSTed, signed with `secret`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettings {
    /// Unique name; keys the webhook's cursor in `webhook_cursors` (renaming a webhook
    /// starts it afresh from the newest event) and labels its metrics.
    pub name: String,
    /// `http://` or `https://` URL the events are POSTed to.
    pub url: String,
    /// HMAC-SHA256 key of `X-Fairshare-Signature` (at least 16 bytes; never logged).
    pub secret: String,
    /// Only transitions to these statuses (e.g. `["SUCCEEDED", "FAILED", "STOPPED"]`);
    /// absent = all. An empty list is refused at start (it would deliver nothing, or,
    /// read as "all", the opposite of what it says).
    #[serde(default)]
    pub events: Option<Vec<entity::JobStatus>>,
}

impl std::fmt::Debug for WebhookSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSettings")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .field("events", &self.events)
            .finish()
    }
}

/// `[server]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// Listen address, e.g. `127.0.0.1:8080` (port 0 picks a free port).
    pub bind: SocketAddr,
    /// Largest request body in bytes; larger ones get 413.
    pub max_body_bytes: usize,
    /// Longest a request body may stall (no bytes arrive) before the request is
    /// answered 408 and the connection closed (default 10 s). actix-web's own timeout
    /// covers only the headers.
    #[serde(with = "crate::config::duration")]
    pub body_idle_timeout: Duration,
    /// How long an idle keep-alive connection is kept open (default 120 s). Longer
    /// than the client pools that reuse idle connections keep them (reqwest, hyper and
    /// Go's `http.Transport`: 90 s): a server that closes first races the client's
    /// next request on that connection, which then fails with "connection reset by
    /// peer" (actix-web's 5 s default did, issue 43 §8).
    #[serde(with = "crate::config::duration")]
    pub keep_alive: Duration,
    /// HTTP worker threads; 0 = one per core.
    pub workers: usize,
    /// Host names the service answers to, besides any IP address, `localhost` (and
    /// `*.localhost`) and the host of `notify.url`; `*.example.org` matches the names
    /// under it, `"*"` every host. A request whose `Host` is none of these is refused
    /// with 421 before any handler: a DNS-rebinding page sends its own name (DESIGN
    /// §4, "Browsers"). Default: none.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
}

/// `[database]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    /// `sqlite://PATH?mode=rwc` or `postgres://...`.
    pub url: String,
    /// Pool size for PostgreSQL (SQLite always uses one connection).
    pub max_connections: u32,
    /// Wait for a pooled connection before answering 503.
    #[serde(with = "crate::config::duration")]
    pub acquire_timeout: Duration,
    /// PostgreSQL ends a session that sits this long inside a transaction
    /// (`idle_in_transaction_session_timeout`): a replica paused mid-write (SIGSTOP, a
    /// frozen VM) then stops holding its locks, the lease row's among them, so a
    /// follower can take over (DESIGN §10). Below `leadership.lease`.
    #[serde(with = "crate::config::duration")]
    pub idle_in_transaction_timeout: Duration,
    /// PostgreSQL: intake transactions in flight at once, 1–8 (DESIGN §6), and at most
    /// `max_connections − 1` (one connection stays for everything else). The writer
    /// begins the next batch while earlier ones commit; batches of the same users wait
    /// for each other at the user lock. SQLite always commits one at a time.
    pub intake_pipeline: u32,
}

/// `[scheduler]`: the fair-share policy's knobs (DESIGN §2).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerSettings {
    /// Half-life `T` of decayed usage; zero turns history off.
    #[serde(with = "crate::config::duration")]
    pub usage_half_life: Duration,
    /// Wait after which a head that fits nowhere gets the reservation (EASY
    /// backfill around it; DESIGN §2).
    #[serde(with = "crate::config::duration")]
    pub starvation_guard: Duration,
    /// How many typical run times (the geometric mean of recent jobs' run times) a
    /// head that fits nowhere may wait before it gets the reservation, when that is
    /// shorter than `starvation_guard`; 0 turns it off (DESIGN §2).
    pub starvation_runs: f64,
    /// Weight of the age term in dominant-share units (0 turns it off).
    pub age_weight: f64,
    /// Age at which the age term saturates (Slurm's `PriorityMaxAge`).
    #[serde(with = "crate::config::duration")]
    pub max_age: Duration,
    /// Skip users whose head does not fit and go on (true), or stop the cycle (false).
    pub backfill: bool,
    /// Default cap on DISPATCHING + PENDING + RUNNING jobs per user.
    pub default_max_running_jobs: u32,
    /// Default cap on QUEUED jobs per user (429 beyond it).
    pub default_max_queued_jobs: u32,
    /// Safety cycle interval on top of event-driven cycles.
    #[serde(with = "crate::config::duration")]
    pub tick: Duration,
    /// Default cap on a job's run time.
    #[serde(with = "crate::config::duration")]
    pub default_max_runtime: Duration,
    /// Jobs per user queue the arbiter considers per cycle (at least 1).
    pub queue_window: usize,
    /// What a running job is charged (allocation, dominant share, decayed usage,
    /// `max_resources`): `actual`, what Ray's State API says it holds (never less
    /// than it declared), or `declared`, its declared resources only (DESIGN §2).
    pub charge: Charge,
}

/// `scheduler.charge`.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Charge {
    /// What the job holds on Ray: its entrypoint, its tasks and actors.
    #[default]
    Actual,
    /// What the job declared.
    Declared,
}

/// One `[[clusters]]` entry.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSettings {
    /// Unique name, shown in the API and metrics.
    pub name: String,
    /// Ray dashboard base URL, e.g. `http://127.0.0.1:8265` or
    /// `https://ray.example.org` (a KubeRay cluster behind an ingress).
    pub address: String,
    /// A file holding the cluster's token for Ray's token authentication
    /// (`RAY_AUTH_MODE=token`, Ray 2.52+; KubeRay's `authOptions` Secret mounted as a
    /// file), sent as `Authorization: Bearer <token>` on every request to the
    /// cluster. Re-read when it changes (a rotated Kubernetes Secret takes effect
    /// without a restart) and once more after a 401 before the cluster is marked
    /// unhealthy. Unset: Ray's own environment, `RAY_AUTH_TOKEN` (the token) or
    /// `RAY_AUTH_TOKEN_PATH` (a file), when set; else no token. Never logged.
    #[serde(default)]
    pub auth_token_file: Option<std::path::PathBuf>,
    /// A PEM file of CA certificates trusted for an `https://` address (a cluster
    /// behind an ingress with a private CA), besides the Mozilla roots bundled with
    /// rustls (webpki-roots).
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
    /// An autoscaling cluster's head node (issue 44): what it offers to jobs, by
    /// resource as in [`NodeTypeSettings::resources`]. Unset or `{}`: it takes no work
    /// (KubeRay's recommended `num-cpus: 0` head). Read only when `node_types` is set.
    #[serde(default)]
    pub head: std::collections::BTreeMap<String, f64>,
    /// An autoscaling cluster's worker node types and their maximum counts (KubeRay's
    /// `workerGroupSpecs`, `ray up`'s `available_node_types`; DESIGN §2, "Autoscaling
    /// clusters"). Ray's dashboard does not report them (docs/ray.md). Empty: the
    /// cluster is as large as Ray reports it now.
    #[serde(default)]
    pub node_types: Vec<NodeTypeSettings>,
}

/// One `[[clusters.node_types]]` entry: a kind of worker node Ray's autoscaler may add.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeTypeSettings {
    /// The node type's name as Ray's autoscaler knows it (KubeRay's `groupName`), shown
    /// in pending reasons ("waiting for Ray to add a node of type cpu-2").
    pub name: String,
    /// What one node offers, by resource: `cpu` (cores), `gpu`, `memory_bytes`, or a
    /// custom resource name (KubeRay: the container's limits, or `rayStartParams`
    /// `num-cpus`/`num-gpus`/`resources`); each amount above 0, at least one.
    pub resources: std::collections::BTreeMap<String, f64>,
    /// Nodes of this type the autoscaler keeps at least (`minReplicas`). Default 0.
    #[serde(default)]
    pub min_count: u32,
    /// Nodes of this type the autoscaler may have at most (`maxReplicas`); at least
    /// `min_count` and at least 1.
    pub max_count: u32,
}

/// A resource map (`{ cpu = 2, memory_bytes = 8e9, QPU = 1 }`) as the policy counts it;
/// custom names are registered (at load, [`Settings::load`] checks them).
#[must_use]
pub fn resource_map(map: &std::collections::BTreeMap<String, f64>) -> crate::policy::Resources {
    let mut r = crate::policy::Resources::ZERO;
    for (name, &amount) in map {
        match name.as_str() {
            "cpu" => r.cpu = amount,
            "gpu" => r.gpu = amount,
            "memory_bytes" => r.memory_bytes = amount,
            other => {
                if let Ok(k) = crate::policy::custom::slot(other) {
                    r.custom.set(k, amount);
                }
            }
        }
    }
    r
}

impl ClusterSettings {
    /// Whether the cluster autoscales (has `node_types`).
    #[must_use]
    pub fn autoscales(&self) -> bool {
        !self.node_types.is_empty()
    }

    /// What the cluster can grow to: `head + Σ max_count × node resources`, or `None`
    /// for a cluster without `node_types`.
    #[must_use]
    pub fn potential(&self) -> Option<crate::policy::Resources> {
        if !self.autoscales() {
            return None;
        }
        let mut total = resource_map(&self.head);
        for t in &self.node_types {
            total += resource_map(&t.resources).scaled(f64::from(t.max_count));
        }
        Some(total)
    }

    /// One node's resources per node type, by name, with the head first (named
    /// `head`) when it offers anything: the largest request a job may make is one
    /// node's (Ray runs a job's entrypoint on one node).
    #[must_use]
    pub fn node_shapes(&self) -> Vec<(String, crate::policy::Resources)> {
        let head = resource_map(&self.head);
        (head != crate::policy::Resources::ZERO)
            .then(|| ("head".to_string(), head))
            .into_iter()
            .chain(
                self.node_types
                    .iter()
                    .map(|t| (t.name.clone(), resource_map(&t.resources))),
            )
            .collect()
    }
}

/// Where a TOML text is wrong, if it is: the parser's own message (it gives line and
/// column), or the first number `config` cannot hold (a float past f64, an integer
/// past i64), by key and line. `None`: nothing found (then `config`'s message
/// stands).
fn where_wrong(text: &str) -> Option<String> {
    use toml::de::{DeTable, DeValue};
    fn walk(table: &DeTable<'_>, prefix: &str, text: &str) -> Option<String> {
        for (key, value) in table {
            let name = if prefix.is_empty() {
                key.get_ref().to_string()
            } else {
                format!("{prefix}.{}", key.get_ref())
            };
            let bad = match value.get_ref() {
                DeValue::Float(f) => {
                    let x = f.as_str().parse::<f64>();
                    x.is_err() || x.is_ok_and(|x| x.is_infinite() && !f.as_str().contains("inf"))
                }
                DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix()).is_err(),
                DeValue::Table(t) => {
                    if let Some(found) = walk(t, &name, text) {
                        return Some(found);
                    }
                    false
                }
                DeValue::Array(items) => {
                    for (k, item) in items.iter().enumerate() {
                        if let DeValue::Table(t) = item.get_ref() {
                            if let Some(found) = walk(t, &format!("{name}[{k}]"), text) {
                                return Some(found);
                            }
                        }
                    }
                    false
                }
                _ => false,
            };
            if bad {
                let line = text[..value.span().start.min(text.len())]
                    .matches('\n')
                    .count()
                    + 1;
                return Some(format!(
                    "`{name}` (line {line}) is a number too large to hold (at most ±1.8e308, or \
                     ±9.2e18 for a whole number)"
                ));
            }
        }
        None
    }
    match DeTable::parse(text) {
        Err(e) => Some(e.to_string().trim_end().to_owned()),
        Ok(table) => walk(table.get_ref(), "", text),
    }
}

impl Settings {
    /// The policy's knobs: [`SchedulerSettings::policy`] with the `[[licenses]]`
    /// (validated by [`Settings::load`], which registers their names).
    #[must_use]
    pub fn policy(&self) -> crate::policy::PolicyConfig {
        let mut config = self.scheduler.policy();
        for l in &self.licenses {
            if let Ok(slot) = crate::policy::custom::slot(&l.name) {
                config.licenses.set(slot, l.count);
            }
        }
        config
    }

    /// The `[[pools]]` entry named `name`.
    #[must_use]
    pub fn pool(&self, name: &str) -> Option<&PoolSettings> {
        self.pools.iter().find(|p| p.name == name)
    }
}

impl SchedulerSettings {
    /// The policy's knobs from these settings (seconds for durations), without
    /// licenses ([`Settings::policy`] adds them).
    #[must_use]
    pub fn policy(&self) -> crate::policy::PolicyConfig {
        crate::policy::PolicyConfig {
            usage_half_life: self.usage_half_life.as_secs_f64(),
            starvation_guard: self.starvation_guard.as_secs_f64(),
            starvation_runs: self.starvation_runs,
            backfill: self.backfill,
            age_weight: self.age_weight,
            max_age: self.max_age.as_secs_f64(),
            licenses: crate::policy::Custom::EMPTY,
        }
    }
}

/// `[monitor]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonitorSettings {
    /// How often each cluster is polled while something is awaited that no
    /// notification announces (a job not dispatched behind the watcher, a stop, a
    /// retiring attempt, a cluster not healthy; every job when `[notify]` is off).
    #[serde(with = "crate::config::duration")]
    pub poll_interval: Duration,
    /// How often each cluster is polled otherwise: the safety net when every followed
    /// job announces its own start and end (DESIGN §5). Never shorter than
    /// `poll_interval`.
    #[serde(with = "crate::config::duration")]
    pub idle_poll_interval: Duration,
    /// Consecutive failed polls before a cluster is unhealthy (at least 1).
    pub failure_threshold: u32,
    /// How long a job may be missing from an answering cluster before it is FAILED.
    #[serde(with = "crate::config::duration")]
    pub lost_job_grace: Duration,
    /// Longest time Ray may keep one of our jobs PENDING (waiting for resources, e.g.
    /// taken by another tenant) before it is stopped there and queued here again.
    #[serde(with = "crate::config::duration")]
    pub pending_timeout: Duration,
    /// On an autoscaling cluster (`[[clusters.node_types]]`), the longest time Ray may
    /// keep one of our jobs PENDING while it adds nodes, instead of `pending_timeout`;
    /// past it the job goes back to the queue at its place and the cluster counts only
    /// what is alive for as long again (DESIGN §2). Below Ray's own
    /// `RAY_JOB_START_TIMEOUT_SECONDS` (900 s), which fails the job inside Ray; at
    /// least 1 s (a start-up error naming the key otherwise).
    #[serde(with = "crate::config::duration")]
    pub scale_up_timeout: Duration,
    /// On an autoscaling cluster, jobs that must wait for Ray to add a node are granted
    /// in batches at most this often (default 1 s, `0s` for at once): the first such
    /// job waits this long, so that every job queued meanwhile competes for the new
    /// nodes in fair-share order, not in the order the jobs arrived (issue 44; DESIGN §2,
    /// "Autoscaling clusters"). Jobs that fit what is alive are never delayed. Ray's own
    /// autoscaler reads demand every `AUTOSCALER_UPDATE_INTERVAL_S` (5 s by default).
    #[serde(with = "crate::config::duration")]
    pub scale_up_batch: Duration,
    /// How long Ray's usage report (`/api/cluster_status`) may lag behind its job list:
    /// a job of ours counts as included in the reported usage only once Ray has listed
    /// it RUNNING for this long (docs/ray.md: about 5 s, about 1 s with
    /// `AUTOSCALER_UPDATE_INTERVAL_S=1`).
    #[serde(with = "crate::config::duration")]
    pub usage_report_lag: Duration,
    /// How long a cluster stays unhealthy after a dispatch found it not ready (route
    /// missing, 5xx, timeouts); doubles while it keeps failing, up to
    /// `unhealthy_backoff_max`.
    #[serde(with = "crate::config::duration")]
    pub unhealthy_backoff: Duration,
    /// Longest such hold.
    #[serde(with = "crate::config::duration")]
    pub unhealthy_backoff_max: Duration,
    /// Least time between two warnings that the same cluster is unreachable.
    #[serde(with = "crate::config::duration")]
    pub unreachable_warn_every: Duration,
}

/// `[dispatcher]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DispatcherSettings {
    #[serde(with = "crate::config::duration")]
    pub request_timeout: Duration,
    /// Submit attempts (at least 1).
    pub retry_attempts: u32,
    #[serde(with = "crate::config::duration")]
    pub retry_initial_backoff: Duration,
    #[serde(with = "crate::config::duration")]
    pub retry_max_backoff: Duration,
}

/// `[auth]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    #[serde(default)]
    pub tokens: Vec<TokenSettings>,
    /// Source networks (CIDR, e.g. `10.42.0.0/16`, `127.0.0.1/32`) whose requests
    /// *without* an `Authorization` header act with `trusted_role` and no user, as a
    /// gateway's token does: for a client that cannot send headers (the
    /// qiskit-serverless gateway's log GET). Judged by the TCP peer address only,
    /// never by a header. A network covering everything (`/0`) is refused at start.
    #[serde(default)]
    pub trusted_networks: Vec<String>,
    /// The role of trusted access (default `submitter`).
    #[serde(default = "submitter")]
    pub trusted_role: Role,
}

fn submitter() -> Role {
    Role::Submitter
}

/// A bearer token and the role it grants.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSettings {
    /// A label for logs (the token itself is never logged).
    pub name: String,
    pub token: String,
    pub role: Role,
    /// The user this token submits as on Ray's Jobs API (`/api/jobs/`); absent for a
    /// token that acts for many users (a gateway), which names the user in each job's
    /// `metadata["fairshare.user"]`.
    #[serde(default)]
    pub user: Option<String>,
    /// The pool this token is confined to (issue 30: a pool's runner): it reads,
    /// submits to and reports on that pool's jobs only (another job is 404 to it, as
    /// another user's is to a token with a user). A `[[pools]]` name; absent: any job.
    #[serde(default)]
    pub pool: Option<String>,
}

impl std::fmt::Debug for TokenSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSettings")
            .field("name", &self.name)
            .field("token", &"<redacted>")
            .field("role", &self.role)
            .field("user", &self.user)
            .field("pool", &self.pool)
            .finish()
    }
}

/// What a token may do. `Admin` can do everything a `Submitter` can.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    #[default]
    Submitter,
    Admin,
}

/// `[telemetry]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySettings {
    pub log_format: LogFormat,
    /// A `tracing` filter directive; `RUST_LOG` wins when set.
    pub level: String,
    /// Per-user metric series only up to this many users.
    pub per_user_metrics_max: usize,
}

/// `[leadership]`: replicas on one PostgreSQL database elect a leader by a lease
/// (DESIGN §10). Ignored on SQLite, which runs one replica.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeadershipSettings {
    /// This replica's id, unique among the replicas; empty = `$HOSTNAME` (the pod name
    /// on Kubernetes), else `<host>-<pid>`.
    pub replica_id: String,
    /// How long a lease lasts unless renewed; a follower takes a lapsed one.
    #[serde(with = "crate::config::duration")]
    pub lease: Duration,
    /// How often the leader renews the lease and a follower tries to take it.
    #[serde(with = "crate::config::duration")]
    pub renew_every: Duration,
    /// How often the leader re-reads QUEUED jobs, stops and users, in case a
    /// notification from a follower was missed.
    #[serde(with = "crate::config::duration")]
    pub catch_up_every: Duration,
}

impl LeadershipSettings {
    /// The configured replica id, or `$HOSTNAME`, or `<host>-<pid>`.
    pub fn resolved_replica_id(&self) -> String {
        if !self.replica_id.trim().is_empty() {
            return self.replica_id.trim().to_string();
        }
        match std::env::var("HOSTNAME") {
            Ok(h) if !h.trim().is_empty() => h.trim().to_string(),
            _ => {
                let host = std::fs::read_to_string("/etc/hostname")
                    .map(|h| h.trim().to_string())
                    .unwrap_or_default();
                format!("{host}-{}", std::process::id())
            }
        }
    }
}

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Json,
    Pretty,
}

impl Settings {
    /// The compiled-in defaults (`config/default.toml`), the one place each key's
    /// default is written. The file is checked by this module's tests, so it always
    /// parses.
    #[must_use]
    pub fn defaults() -> Settings {
        Settings::load_with_env(None, Vec::<(String, String)>::new())
            .expect("config/default.toml is valid (checked by the tests)")
    }

    /// Loads defaults, then `file` (if any), then `FAIRSHARE__*` environment variables.
    ///
    /// Errors: [`ConfigError::Source`] for an unreadable file, [`ConfigError::Invalid`]
    /// naming the key for unknown keys and bad values.
    pub fn load(file: Option<&Path>) -> Result<Settings, ConfigError> {
        Self::load_with_env(file, std::env::vars())
    }

    /// [`Settings::load`] with an explicit environment (for tests).
    pub fn load_with_env(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, ConfigError> {
        let env: config::Map<String, String> = env
            .into_iter()
            .filter(|(k, _)| k.starts_with("FAIRSHARE__"))
            .collect();
        let mut builder = config::Config::builder().add_source(config::File::from_str(
            DEFAULT_TOML,
            config::FileFormat::Toml,
        ));
        if let Some(path) = file {
            builder = builder.add_source(config::File::from(path).required(true));
        }
        builder = builder.add_source(
            config::Environment::with_prefix("FAIRSHARE")
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true)
                .source(Some(env)),
        );
        let built = builder.build().map_err(|e| match file {
            // Say where the file is wrong (`config` names only the file, e.g. for a
            // number that overflows).
            Some(path) => match std::fs::read_to_string(path)
                .ok()
                .and_then(|t| where_wrong(&t))
            {
                Some(reason) => ConfigError::File {
                    path: path.display().to_string(),
                    reason,
                },
                None => ConfigError::Source(e),
            },
            None => ConfigError::Source(e),
        })?;
        let raw: serde_json::Value = built.try_deserialize()?;
        let settings: Settings = serde_path_to_error::deserialize(raw).map_err(|e| {
            let reason = e.inner().to_string();
            // The sources meet as JSON, where NaN and ±∞ (and numbers past f64,
            // such as 1e400 given in the environment) can only be null.
            let reason = if reason.starts_with("invalid type: null, expected f64") {
                "must be a finite number (not NaN, infinity or beyond ±1.8e308)".to_owned()
            } else if reason.starts_with("invalid type: null, expected a string") {
                // `FAIRSHARE__PREEMPTION__AFTER=inf`: the environment's `inf` is a number.
                "must be a string (in the environment, inf and NaN are read as numbers; \
                 for a duration write e.g. 10m, or off)"
                    .to_owned()
            } else {
                reason
            };
            ConfigError::Invalid {
                key: e.path().to_string(),
                reason,
            }
        })?;
        settings.validate()?;
        Ok(settings)
    }
}
