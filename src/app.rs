//! Builds the whole service from [`Settings`]: database, migrations, the scheduler's
//! actors (with recovery), and the HTTP server.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_http::{HttpService, Protocol};
use actix_service::{fn_service, map_config, IntoServiceFactory, ServiceFactoryExt};
use actix_web::dev::{AppConfig, Server, ServerHandle};
use actix_web::{web, App};

use crate::api::line_limit::LineLimit;
use anyhow::Context;

use crate::actors::Scheduler;
use crate::api::{self, AppState, Auth};
use crate::config::Settings;
use crate::leadership::{Leadership, SqliteLock};
use crate::store;

/// Fills in `[notify]` where it was left empty: the URL from the bound address `addr`
/// (none when bound to every interface: then notifications are off, said once), and
/// a random key for this process.
fn resolve_notify(settings: &mut Settings, addr: std::net::SocketAddr) {
    let n = &mut settings.notify;
    if !n.enabled {
        return;
    }
    if n.url.is_empty() {
        if addr.ip().is_unspecified() {
            tracing::warn!(bind = %addr, "notify.url is not set and the service listens on every interface: \
                the end of a job is learned by polling only (set notify.url to where Ray reaches this service)");
            n.enabled = false;
            return;
        }
        n.url = format!("http://{addr}");
    }
    say_where_notifications_go(&settings.notify.url, &settings.clusters);
    let n = &mut settings.notify;
    if n.key.is_empty() {
        n.key = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
    }
}

/// Says at start which URL the job processes on the Ray nodes must reach (issue 49):
/// at `info` when `notify.url` is not loopback (the operator must make it reachable
/// from every Ray node), at `warn` when it is loopback but a cluster is not (that
/// cluster's watchers cannot reach it: its jobs' ends are learned by polling at
/// `monitor.poll_interval`).
fn say_where_notifications_go(url: &str, clusters: &[crate::config::ClusterSettings]) {
    let loopback = |u: &str| {
        reqwest::Url::parse(u).ok().is_some_and(|u| {
            let host = u.host_str().unwrap_or_default();
            host.eq_ignore_ascii_case("localhost")
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        })
    };
    if !loopback(url) {
        tracing::info!(notify_url = %url, "end-of-job notifications: the job processes on every Ray node must reach this URL (POST); while they do not, each cluster is polled every monitor.poll_interval and GET /v1/scheduler says so");
        return;
    }
    for c in clusters.iter().filter(|c| !loopback(&c.address)) {
        tracing::warn!(notify_url = %url, cluster = %c.name, address = %c.address,
            "notify.url is a loopback address but this cluster is not on this host: its job processes cannot reach it, so its jobs' ends are learned by polling every monitor.poll_interval (set notify.url to where the Ray nodes reach this service)");
    }
}

/// A built, not yet running, service.
pub struct Application {
    server: Server,
    port: u16,
    leadership: Leadership,
    /// Checkpointed on a clean stop (SQLite: the WAL written back into the file).
    db: store::Db,
    /// Held while the service runs on SQLite (one replica per database file).
    sqlite_lock: Option<SqliteLock>,
}

impl Application {
    /// Connects to the database, runs pending migrations, starts leadership (DESIGN
    /// §10: on SQLite this replica leads and recovers now; on PostgreSQL it leads and
    /// recovers now if the lease is free, else it follows) and binds the HTTP listener.
    /// Must run inside an actix System (`#[actix_web::main]` / `#[actix_web::test]`).
    ///
    /// Errors: database unreachable, migration failure, address in use, another
    /// service on the same SQLite database.
    pub async fn build(mut settings: Settings) -> anyhow::Result<Application> {
        // Bind first: a port in use fails before anything starts, and the bound
        // address is where attempts' watchers report when notify.url is not set.
        // Checked again here: tests and embedders change settings after loading them.
        settings.validate_secrets()?;
        let listener = TcpListener::bind(settings.server.bind)
            .with_context(|| format!("cannot bind {} (server.bind)", settings.server.bind))?;
        resolve_notify(&mut settings, listener.local_addr()?);
        let settings = Arc::new(settings);
        // A service of this process that is stopping may still hold it for a moment.
        let sqlite_lock = SqliteLock::take(&settings.database.url, Duration::from_secs(3)).await?;
        let db = store::connect(&settings.database)
            .await
            .with_context(|| "cannot connect to the database (database.url)")?;
        store::migrate(&db)
            .await
            .context("database migration failed")?;
        crate::metrics::set_usage_label_cap(settings.telemetry.per_user_metrics_max);
        start_usage_prune(db.clone(), settings.usage.clone());
        let sealer = Arc::new(crate::secrets::Sealer::new(
            &settings.secrets.runtime_env_keys,
        ));
        if settings.clusters.iter().any(|c| c.autoscales())
            && settings.monitor.scale_up_timeout > std::time::Duration::from_secs(900)
        {
            tracing::warn!(
                scale_up_timeout_s = settings.monitor.scale_up_timeout.as_secs(),
                "monitor.scale_up_timeout is longer than Ray's own job start timeout \
                 (RAY_JOB_START_TIMEOUT_SECONDS, 900 s by default): Ray fails a job that waits \
                 that long for a node before fairshare sends it back to the queue"
            );
        }
        if !sealer.seals() {
            tracing::warn!("secrets.runtime_env_keys is empty: runtime_envs are stored unsealed (allowed only without auth.tokens)");
        }
        for k in &settings.secrets.runtime_env_keys.0 {
            if k.is_trivial() {
                tracing::warn!(key_id = k.id(), "secrets.runtime_env_keys: this key is 32 equal bytes, not a random one; generate one with `openssl rand -base64 32`");
            }
        }
        // Waiting jobs' runtime_envs are sealed under the newest key by the leader
        // only, as it begins to lead (actors::Scheduler::start; DESIGN §6, "Secrets").
        // Before the API takes a submission: a new webhook starts at the newest event.
        let hooks: Vec<String> = settings.webhooks.iter().map(|w| w.name.clone()).collect();
        store::init_webhook_cursors(&db, &hooks)
            .await
            .context("cannot create the webhooks' cursors")?;
        let leadership = Leadership::start(db.clone(), settings.clone())
            .await
            .context("cannot start the scheduler")?;
        crate::webhooks::start(db.clone(), &settings, leadership.clone());
        let port = listener.local_addr()?.port();
        let intake = store::IntakeWriter::start(
            db.clone(),
            &settings.database,
            settings.scheduler.default_max_queued_jobs,
        );
        let state = AppState {
            db: db.clone(),
            settings: settings.clone(),
            auth: Auth::new(settings.auth.tokens.clone()).with_trusted(
                settings
                    .auth
                    .trusted_networks
                    .iter()
                    .filter_map(|n| crate::config::Network::parse(n).ok())
                    .collect(),
                settings.auth.trusted_role,
            ),
            leadership: leadership.clone(),
            intake,
            shares: api::console::ShareHistory::start(leadership.clone()),
            sealer,
            followed_estimates: crate::estimates::Estimates::follow(db.clone(), &settings, {
                let leadership = leadership.clone();
                move || leadership.scheduler().is_some()
            }),
        };
        let addr = listener.local_addr()?;
        // Idle connections outlive the clients' pools (server.keep_alive, issue 43 §8).
        let keep_alive = settings.server.keep_alive;
        // actix-web's HttpServer, assembled by hand so that every connection is wrapped
        // in api::line_limit::LineLimit (414 for request lines of 64 KiB or more, which
        // actix-http would answer with a bare 400 or 431). HTTP/1 only, as before.
        let mut builder = actix_server::Server::build().shutdown_timeout(5);
        if settings.server.workers > 0 {
            builder = builder.workers(settings.server.workers);
        }
        let host_guard = web::Data::new(api::host_guard::HostGuard::new(
            &settings.server.allowed_hosts,
            &settings.notify.url,
        ));
        let server = builder
            .listen("fairshare-http", listener, move || {
                let state = state.clone();
                let app = App::new()
                    .wrap(actix_web::middleware::from_fn(crate::api::head_as_get))
                    .wrap(actix_web::middleware::from_fn(
                        crate::api::host_guard::middleware,
                    ))
                    .wrap(actix_web::middleware::from_fn(
                        crate::api::request_id::middleware,
                    ))
                    .app_data(host_guard.clone())
                    .app_data(web::Data::new(state))
                    .configure(api::routes);
                let http = HttpService::build()
                    .keep_alive(keep_alive)
                    .local_addr(addr)
                    .finish(map_config(
                        app.into_factory()
                            .map_err(|e: actix_web::Error| e.error_response()),
                        |_| AppConfig::default(),
                    ));
                fn_service(|io: actix_web::rt::net::TcpStream| async move {
                    let peer = io.peer_addr().ok();
                    let _ = io.set_nodelay(true);
                    Ok::<_, actix_http::error::DispatchError>((
                        LineLimit::new(io),
                        Protocol::Http1,
                        peer,
                    ))
                })
                .and_then(http)
            })?
            .run();
        tracing::info!(bind = %settings.server.bind, port, replica = leadership.replica(), "listening");
        Ok(Application {
            server,
            port,
            leadership,
            db,
            sqlite_lock,
        })
    }

    /// The bound port (useful with port 0).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The scheduler's handle, while this replica leads.
    pub fn scheduler(&self) -> Option<Scheduler> {
        self.leadership.scheduler()
    }

    /// This replica's leadership.
    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    /// A handle that stops the HTTP server.
    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// Serves until the server stops (SIGINT/SIGTERM or [`ServerHandle::stop`]).
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let result = self.server.await;
        self.leadership.shutdown().await;
        // Last, once nothing writes: SQLite's WAL back into the database file, so the
        // file alone holds everything (a copy of `fairshare.db` is a backup).
        if let Err(e) = store::checkpoint(&self.db).await {
            tracing::warn!(error = %e, "cannot checkpoint the database on stop (SQLite replays its WAL at the next start)");
        }
        drop(self.sqlite_lock);
        result
    }
}

/// Deletes usage rows past `[usage]` retention every `prune_interval` (DESIGN §6,
/// "Usage rollup"), on every replica (the deletes are idempotent); the first pass at
/// start. A failure is logged and tried again next time.
fn start_usage_prune(db: store::Db, usage: crate::config::UsageSettings) {
    actix_web::rt::spawn(async move {
        let mut tick = tokio::time::interval(usage.prune_interval);
        loop {
            tick.tick().await;
            let now = chrono::Utc::now().timestamp();
            let keep = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            match store::prune_usage(
                &db,
                now,
                keep(usage.hourly_retention),
                keep(usage.retention),
            )
            .await
            {
                Ok(0) => {}
                Ok(n) => tracing::info!(rows = n, "usage rows past retention deleted"),
                Err(e) => tracing::warn!(error = %e, "cannot delete usage rows past retention"),
            }
        }
    });
}
