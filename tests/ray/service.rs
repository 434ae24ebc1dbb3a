//! The real `fairshare` binary as a child process, on a SQLite file, for tests that
//! kill and restart it.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::harness::{eventually, free_port};

/// A running service.
pub struct Service {
    child: Option<Child>,
    pub url: String,
    pub db_url: String,
    config: PathBuf,
    log: PathBuf,
    pub client: reqwest::Client,
}

impl Service {
    /// Writes a config (loopback, no tokens, SQLite in `dir`, one cluster) and starts.
    pub async fn start(dir: &std::path::Path, ray_dashboard: &str, extra_toml: &str) -> Service {
        let db_url = format!("sqlite://{}/fairshare.db?mode=rwc", dir.display());
        Service::start_on(dir, ray_dashboard, extra_toml, &db_url).await
    }

    /// [`Service::start`] on the database at `db_url`.
    pub async fn start_on(
        dir: &std::path::Path,
        ray_dashboard: &str,
        extra_toml: &str,
        db_url: &str,
    ) -> Service {
        Service::start_full(dir, ray_dashboard, extra_toml, db_url, "").await
    }

    /// [`Service::start`] with more keys of the `[[clusters]]` entry
    /// (`auth_token_file = "…"`).
    pub async fn start_with_cluster(
        dir: &std::path::Path,
        ray_dashboard: &str,
        extra_toml: &str,
        cluster_toml: &str,
    ) -> Service {
        let db_url = format!("sqlite://{}/fairshare.db?mode=rwc", dir.display());
        Service::start_full(dir, ray_dashboard, extra_toml, &db_url, cluster_toml).await
    }

    async fn start_full(
        dir: &std::path::Path,
        ray_dashboard: &str,
        extra_toml: &str,
        db_url: &str,
        cluster_toml: &str,
    ) -> Service {
        let port = free_port();
        let db_url = db_url.to_string();
        let config = dir.join("fairshare.toml");
        let toml = format!(
            "[server]\nbind = \"127.0.0.1:{port}\"\n[database]\nurl = \"{db_url}\"\n\
             [monitor]\npoll_interval = \"250ms\"\nusage_report_lag = \"1500ms\"\n[scheduler]\ntick = \"1s\"\n{extra_toml}\n\
             [[clusters]]\nname = \"local\"\naddress = \"{ray_dashboard}\"\n{cluster_toml}\n"
        );
        std::fs::write(&config, toml).unwrap();
        let mut svc = Service {
            child: None,
            url: format!("http://127.0.0.1:{port}"),
            db_url,
            config,
            log: dir.join("service.log"),
            client: reqwest::Client::new(),
        };
        svc.spawn().await;
        svc
    }

    async fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_fairshare"))
            .args(["serve", "--config"])
            .arg(&self.config)
            .env("RUST_LOG", "info,sqlx=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start fairshare");
        self.child = Some(child);
        let client = self.client.clone();
        let url = format!("{}/readyz", self.url);
        eventually(30, "service ready", || {
            let client = client.clone();
            let url = url.clone();
            async move {
                client
                    .get(&url)
                    .send()
                    .await
                    .ok()
                    .filter(|r| r.status() == 200)
                    .map(|_| ())
            }
        })
        .await;
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the same configuration again on the same database.
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn().await;
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn submit(
        &self,
        user: &str,
        entrypoint: &str,
        cpu: f64,
        extra: serde_json::Value,
    ) -> serde_json::Value {
        let mut body =
            serde_json::json!({"user": user, "entrypoint": entrypoint, "resources": {"cpu": cpu}});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        let r = self
            .client
            .post(format!("{}/v1/jobs", self.url))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "submit: {}",
            r.text().await.unwrap()
        );
        r.json().await.unwrap()
    }

    pub async fn get(&self, path: &str) -> serde_json::Value {
        self.client
            .get(format!("{}{}", self.url, path))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub async fn post(&self, path: &str) -> reqwest::Response {
        self.client
            .post(format!("{}{}", self.url, path))
            .send()
            .await
            .unwrap()
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> String {
        self.client
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub async fn put(&self, path: &str, body: serde_json::Value) -> reqwest::Response {
        self.client
            .put(format!("{}{}", self.url, path))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Every job, newest first.
    pub async fn jobs(&self) -> Vec<serde_json::Value> {
        let page = self.get("/v1/jobs?limit=1000").await;
        page["jobs"].as_array().cloned().unwrap_or_default()
    }

    pub async fn job(&self, id: &str) -> serde_json::Value {
        self.get(&format!("/v1/jobs/{id}")).await
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill();
        // TEST_LOG=1: a failing test shows the service's log (as zero2prod's helpers do).
        if std::thread::panicking()
            && std::env::var("TEST_LOG").is_ok_and(|v| !v.is_empty() && v != "0")
        {
            eprintln!(
                "---- fairshare log ({}) ----\n{}",
                self.log.display(),
                self.log()
            );
        }
    }
}

/// Waits until every job the service knows is terminal; returns them.
pub async fn all_terminal(svc: &Service, secs: u64) -> Vec<serde_json::Value> {
    eventually(secs, "every job terminal", || async {
        let jobs = svc.jobs().await;
        jobs.iter()
            .all(|j| {
                matches!(
                    j["status"].as_str(),
                    Some("SUCCEEDED" | "FAILED" | "STOPPED")
                )
            })
            .then_some(jobs)
    })
    .await
}
