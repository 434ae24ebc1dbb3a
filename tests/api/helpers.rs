//! `spawn_app()`: the real service on port 0 with a fresh, migrated database per test,
//! on SQLite (a file in a temp dir) or PostgreSQL (a database created for the test and
//! dropped after it).

use std::time::Duration;

use fairshare::config::{Role, Settings, TokenSettings};
use fairshare::Application;
use sea_orm::{ConnectionTrait, Database};

pub const SUBMITTER: &str = "submitter-token-1";
pub const ADMIN: &str = "admin-token-1";

#[derive(Clone, Copy, Debug)]
pub enum Db {
    Sqlite,
    Postgres,
}

/// The admin URL of the test PostgreSQL. The PostgreSQL variants are `#[ignore]`d
/// unless this build saw `FAIRSHARE_TEST_POSTGRES_URL` (see `build.rs`); one that runs
/// without it (`--include-ignored`, or `FAIRSHARE_REQUIRE_POSTGRES=1`) fails here.
pub fn postgres_url() -> String {
    match std::env::var("FAIRSHARE_TEST_POSTGRES_URL") {
        Ok(u) if !u.is_empty() => u,
        _ => panic!(
            "this test needs PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL \
             (e.g. postgres://postgres@127.0.0.1:5432/postgres)"
        ),
    }
}

/// A database for one test.
pub struct TestDb {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    pg: Option<(String, String)>,
}

impl TestDb {
    pub async fn new(kind: Db) -> Option<TestDb> {
        match kind {
            Db::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("sqlite://{}/fairshare.db?mode=rwc", dir.path().display());
                Some(TestDb {
                    url,
                    _dir: Some(dir),
                    pg: None,
                })
            }
            Db::Postgres => {
                let admin = postgres_url();
                let name = format!("fs_test_{}", uuid::Uuid::new_v4().simple());
                let conn = Database::connect(&admin)
                    .await
                    .expect("connect to test PostgreSQL");
                conn.execute_unprepared(&format!("CREATE DATABASE {name}"))
                    .await
                    .expect("create database");
                conn.close().await.ok();
                let base = admin
                    .rsplit_once('/')
                    .map(|(b, _)| b.to_string())
                    .unwrap_or(admin.clone());
                Some(TestDb {
                    url: format!("{base}/{name}"),
                    _dir: None,
                    pg: Some((admin, name)),
                })
            }
        }
    }
}

impl TestDb {
    /// The same database for a second replica: dropping it leaves the database to
    /// `self`.
    pub fn alias(&self) -> TestDb {
        TestDb {
            url: self.url.clone(),
            _dir: None,
            pg: None,
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some((admin, name)) = self.pg.take() {
            // Drop runs outside async: use a private runtime on another thread.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .ok()?;
                rt.block_on(async {
                    let conn = Database::connect(&admin).await.ok()?;
                    conn.execute_unprepared(&format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    ))
                    .await
                    .ok()?;
                    Some(())
                })
            })
            .join();
        }
    }
}

/// The runtime_env key of [`test_settings`] (32 bytes of 0x2a, base64).
pub const TEST_KEY: &str = "KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=";

/// Settings for a test: port 0, no Ray cluster, two tokens, one runtime_env key.
pub fn test_settings(db_url: &str) -> Settings {
    let mut s =
        Settings::load_with_env(None, Vec::<(String, String)>::new()).expect("default settings");
    s.server.bind = "127.0.0.1:0".parse().unwrap();
    s.database.url = db_url.to_string();
    s.clusters.clear();
    s.scheduler.tick = Duration::from_millis(200);
    // The fake Rays of these tests run no entrypoint, so no watcher reports a job's
    // end: they are polled for it (tests/api/hints.rs turns notifications on).
    s.notify.enabled = false;
    s.secrets.runtime_env_keys = fairshare::secrets::KeyList(vec![
        fairshare::secrets::RuntimeEnvKey::parse(TEST_KEY).expect("the test key"),
    ]);
    s.auth.tokens = vec![
        TokenSettings {
            name: "gateway".into(),
            token: SUBMITTER.into(),
            role: Role::Submitter,
            user: None,
            pool: None,
        },
        TokenSettings {
            name: "ops".into(),
            token: ADMIN.into(),
            role: Role::Admin,
            user: None,
            pool: None,
        },
    ];
    s
}

/// Adds a submitter token `token` that acts only for `user` (docs/security.md,
/// tokens with a user).
pub fn add_user_token(s: &mut Settings, token: &str, user: &str) {
    s.auth.tokens.push(TokenSettings {
        name: user.into(),
        token: token.into(),
        role: Role::Submitter,
        user: Some(user.into()),
        pool: None,
    });
}

/// A running service.
pub struct TestApp {
    pub address: String,
    pub client: reqwest::Client,
    pub handle: actix_web::dev::ServerHandle,
    pub db: TestDb,
}

/// A SQLite service whose one cluster `name` is the (mock) Ray at `uri`, polled every
/// 100 ms, with quick dispatch retries; `tweak` adjusts the rest.
pub async fn app_with_cluster(
    name: &str,
    uri: String,
    tweak: impl FnOnce(&mut Settings),
) -> TestApp {
    let name = name.to_string();
    spawn_app_with(Db::Sqlite, move |s| {
        s.clusters = vec![fairshare::config::ClusterSettings {
            name,
            address: uri,
            ..Default::default()
        }];
        s.monitor.poll_interval = Duration::from_millis(100);
        s.dispatcher.retry_initial_backoff = Duration::from_millis(10);
        s.dispatcher.retry_max_backoff = Duration::from_millis(20);
        s.dispatcher.request_timeout = Duration::from_millis(500);
        tweak(s);
    })
    .await
    .expect("sqlite app")
}

/// A 1-CPU `echo` job of `user` as intake takes it (tests that write to the store
/// directly).
pub fn new_job(user: &str, external_id: Option<String>) -> fairshare::store::NewJob {
    fairshare::store::NewJob {
        user: user.into(),
        external_id,
        priority: 0,
        entrypoint: "echo".into(),
        runtime_env: None,
        runtime_env_digest: None,
        runtime_env_digests: Vec::new(),
        metadata: None,
        cpu: 1.0,
        gpu: 0.0,
        memory_bytes: 0,
        custom: Default::default(),
        max_runtime_s: None,
        preemptible: None,
        pool: None,
    }
}

/// Starts the service on a fresh database of `kind`; `None` when that database is not
/// available here (PostgreSQL without FAIRSHARE_TEST_POSTGRES_URL).
pub async fn spawn_app(kind: Db) -> Option<TestApp> {
    spawn_app_with(kind, |_| {}).await
}

pub async fn spawn_app_with(kind: Db, tweak: impl FnOnce(&mut Settings)) -> Option<TestApp> {
    let db = TestDb::new(kind).await?;
    let mut s = test_settings(&db.url);
    tweak(&mut s);
    Some(start_on(db, s).await)
}

/// Events of interest captured from the service: (level, target, message or fault).
pub static CAPTURED: std::sync::Mutex<Vec<(tracing::Level, String, String)>> =
    std::sync::Mutex::new(Vec::new());

/// Captures events from actix-http and the client-fault target into [`CAPTURED`].
struct Capture;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if matches!(f.name(), "message" | "fault") {
                    self.0.push_str(&format!("{v:?} "));
                }
            }
        }
        let meta = event.metadata();
        if meta.target().starts_with("actix_http")
            || meta.target() == fairshare::telemetry::CLIENT_FAULT_TARGET
        {
            let mut text = Text(String::new());
            event.record(&mut text);
            if let Ok(mut c) = CAPTURED.lock() {
                c.push((*meta.level(), meta.target().to_string(), text.0));
            }
        }
    }
}

/// One subscriber for the test binary: the service's client-fault handling, a capture
/// of HTTP-level events for the tests that check log levels, and with `TEST_LOG=1` the
/// service's logs (filtered by `RUST_LOG`, default `info`) on the test's output, which
/// the runner shows for a failing test (as zero2prod's helpers do).
pub fn init_test_telemetry() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let show = std::env::var("TEST_LOG").is_ok_and(|v| !v.is_empty() && v != "0");
        let logs = show.then(|| {
            let filter = tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
            tracing_subscriber::fmt::layer()
                .with_test_writer()
                .with_filter(filter)
        });
        let subscriber = tracing_subscriber::registry()
            .with(fairshare::telemetry::ClientFaults)
            .with(
                Capture.with_filter(tracing_subscriber::filter::filter_fn(|m| {
                    m.target().starts_with("actix_http")
                        || m.target() == fairshare::telemetry::CLIENT_FAULT_TARGET
                })),
            )
            .with(logs);
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}

/// Starts the service with `settings` on an existing database.
pub async fn start_on(db: TestDb, settings: Settings) -> TestApp {
    let app = start_unready(db, settings).await;
    // Recovery runs beside the server: wait for /readyz as a deployment would
    // (tests/api/system.rs checks the not-ready phase itself).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let ready = app.client.get(app.url("/readyz")).send().await;
        if ready.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the service never became ready"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    app
}

/// Starts the service without waiting for recovery (it answers `/healthz` at once).
pub async fn start_unready(db: TestDb, settings: Settings) -> TestApp {
    init_test_telemetry();
    let app = Application::build(settings).await.expect("build app");
    let address = format!("http://127.0.0.1:{}", app.port());
    let handle = app.handle();
    actix_web::rt::spawn(app.run_until_stopped());
    TestApp {
        address,
        client: reqwest::Client::new(),
        handle,
        db,
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.address, path)
    }

    pub async fn post(
        &self,
        path: &str,
        token: &str,
        body: serde_json::Value,
    ) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .expect("request")
    }

    pub async fn post_raw(
        &self,
        path: &str,
        token: &str,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request")
    }

    pub async fn put(&self, path: &str, token: &str, body: serde_json::Value) -> reqwest::Response {
        self.client
            .put(self.url(path))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .expect("request")
    }

    pub async fn delete(&self, path: &str, token: &str) -> reqwest::Response {
        self.client
            .delete(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .expect("request")
    }

    pub async fn get(&self, path: &str, token: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .expect("request")
    }

    /// `GET path` as `token`, asserting 200, and its JSON body.
    pub async fn get_json(&self, path: &str, token: &str) -> serde_json::Value {
        let resp = self.get(path, token).await;
        assert_eq!(resp.status(), 200, "GET {path}");
        resp.json().await.unwrap()
    }

    /// Submits a 1-CPU job for `user` and returns its JSON (asserting 201).
    pub async fn submit(&self, user: &str, extra: serde_json::Value) -> serde_json::Value {
        let mut body = serde_json::json!({"user": user, "entrypoint": "echo hello"});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        let resp = self.post("/v1/jobs", SUBMITTER, body).await;
        assert_eq!(resp.status(), 201, "submit failed: {:?}", resp.text().await);
        resp.json().await.unwrap()
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> String {
        let resp = self
            .client
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("scrape");
        resp.text().await.expect("metrics text")
    }

    pub async fn stop(self) -> TestDb {
        self.handle.stop(true).await;
        self.db
    }
}

/// Asserts a JSON error with `status`, `code` and (for 422) the field.
pub async fn assert_error(resp: reqwest::Response, status: u16, code: &str, field: Option<&str>) {
    assert_eq!(resp.status().as_u16(), status);
    let body: serde_json::Value = resp.json().await.expect("JSON error body");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    if let Some(f) = field {
        assert_eq!(body["error"]["details"]["field"], f, "{body}");
    }
}

/// Runs a test body on SQLite and on PostgreSQL as two tests.
#[macro_export]
macro_rules! both_databases {
    ($name:ident) => {
        mod $name {
            #[actix_web::test]
            async fn sqlite() {
                super::$name($crate::helpers::Db::Sqlite).await
            }
            #[actix_web::test]
            #[cfg_attr(
                not(fairshare_postgres),
                ignore = "no PostgreSQL: set FAIRSHARE_TEST_POSTGRES_URL"
            )]
            async fn postgres() {
                super::$name($crate::helpers::Db::Postgres).await
            }
        }
    };
}

/// The value of the first sample in `text` whose line starts with `name` (0 if none).
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Runs a property test over a fresh, migrated database of `which` (nothing when that
/// database is not available here): `cases` inputs drawn from `strategy`, each handed
/// to `test` with the connection on a private current-thread runtime. Panics with
/// proptest's report (the minimal failing input) when a case fails.
pub fn property_on_db<S, F, Fut>(which: Db, cases: u32, strategy: S, test: F)
where
    S: proptest::strategy::Strategy,
    F: Fn(sea_orm::DatabaseConnection, S::Value) -> Fut,
    Fut: std::future::Future<Output = Result<(), proptest::test_runner::TestCaseError>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Some(db) = rt.block_on(TestDb::new(which)) else {
        return;
    };
    let conn = rt.block_on(async {
        let conn = Database::connect(&db.url).await.unwrap();
        fairshare::store::migrate(&conn).await.unwrap();
        conn
    });
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases,
        ..proptest::test_runner::Config::default()
    });
    let result = runner.run(&strategy, |input| rt.block_on(test(conn.clone(), input)));
    rt.block_on(conn.close()).unwrap();
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Polls `check` every 50 ms until it gives a value, failing the test with `what`
/// after `secs` seconds.
pub async fn until<T, F, Fut>(secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
