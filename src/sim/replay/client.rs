//! The HTTP client of the replay: submitting with retries, reading job pages.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context as _};
use backon::{ExponentialBuilder, Retryable};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::*;

/// `POST /v1/jobs` body.
#[derive(Serialize)]
pub(super) struct SubmitBody<'a> {
    pub(super) user: &'a str,
    pub(super) entrypoint: String,
    pub(super) resources: Resources,
    pub(super) external_id: &'a str,
    pub(super) metadata: BTreeMap<&'static str, String>,
}

#[derive(Serialize)]
pub(super) struct Resources {
    pub(super) cpu: f64,
}

#[derive(Deserialize)]
pub(super) struct JobPage {
    pub(super) jobs: Vec<JobRecord>,
    pub(super) next_after: Option<Uuid>,
}

#[derive(Deserialize)]
pub(super) struct ErrorEnvelope {
    pub(super) error: ErrorDetail,
}

#[derive(Deserialize)]
pub(super) struct ErrorDetail {
    #[serde(default)]
    pub(super) code: Option<String>,
    #[serde(default)]
    pub(super) message: Option<String>,
}

/// What became of one submission.
#[derive(Debug)]
pub(super) enum Submitted {
    /// 201.
    Created(JobRecord),
    /// 200: the same (user, external_id) was submitted before.
    Existing(JobRecord),
    /// A definitive 4xx.
    Rejected { status: u16, message: String },
    /// The retry budget ran out.
    GaveUp(String),
}

/// One failed attempt.
#[derive(Debug)]
pub(super) enum AttemptError {
    /// 408, 429, 5xx or a transport error: try again.
    Retryable {
        message: String,
        retry_after: Option<Duration>,
        /// No answer at all: the service may have committed the job anyway.
        transport: bool,
    },
    /// The replay cannot work (401, 403, 404, 405, unreadable 2xx body).
    Fatal(String),
}

impl AttemptError {
    pub(super) fn is_retryable(&self) -> bool {
        matches!(self, AttemptError::Retryable { .. })
    }
}

/// How an HTTP status of `POST /v1/jobs` is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Disposition {
    Created,
    Existing,
    Retry,
    Reject,
    Fatal,
}

pub(super) fn disposition(status: u16) -> Disposition {
    match status {
        201 => Disposition::Created,
        200 => Disposition::Existing,
        408 | 429 | 500..=599 => Disposition::Retry,
        401 | 403 | 404 | 405 => Disposition::Fatal,
        _ => Disposition::Reject,
    }
}

/// Tuning of the network side (tests shorten it).
#[derive(Clone, Debug)]
pub(super) struct Tuning {
    pub(super) poll_interval: Duration,
    pub(super) request_timeout: Duration,
    pub(super) backoff_min: Duration,
    pub(super) backoff_max: Duration,
    pub(super) backoff_times: usize,
    /// Give up when no poll has succeeded for this long.
    pub(super) unreachable_after: Duration,
    /// Largest `Retry-After` honoured.
    pub(super) max_retry_after: Duration,
    /// Jobs fetched one by one per poll when missing from the listing.
    pub(super) max_single_gets: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            poll_interval: Duration::from_secs(1),
            request_timeout: Duration::from_secs(30),
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(5),
            backoff_times: 10,
            unreachable_after: Duration::from_secs(120),
            max_retry_after: Duration::from_secs(30),
            max_single_gets: 10,
        }
    }
}

/// The HTTP side: base URL, token, client.
#[derive(Clone)]
pub(super) struct Api {
    pub(super) client: reqwest::Client,
    pub(super) base: String,
    pub(super) token: Option<String>,
}

impl Api {
    pub(super) fn new(server: &str, token: Option<String>, tuning: &Tuning) -> anyhow::Result<Api> {
        // Parsed here so that a bad port or host is named as such (it was "builder
        // error; is it running?"); a query or fragment would end up before the API's
        // paths, and a password in it would be printed in every error.
        if !server.contains("://") {
            bail!("--server must be an http:// or https:// URL, got {server:?}");
        }
        let url = reqwest::Url::parse(server.trim())
            .map_err(|e| anyhow::anyhow!("--server {server:?} is not a valid URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            bail!("--server must be an http:// or https:// URL, got {server:?}");
        }
        if url.query().is_some() || url.fragment().is_some() {
            bail!("--server {server:?} has a query or fragment; give the service's base URL");
        }
        if !url.username().is_empty() || url.password().is_some() {
            bail!("--server holds a user or password; give the service's token with --token");
        }
        let base = url.as_str().trim_end_matches('/').to_string();
        if let Some(token) = &token {
            if token.trim().is_empty() {
                bail!("the token (--token or FAIRSHARE_TOKEN) is empty");
            }
            // Checked once here: a token with a control character (a CRLF file's
            // `\r`) made every request fail to build, and the replay waited forever.
            if reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
                bail!(
                    "the token (--token or FAIRSHARE_TOKEN) holds characters not allowed in \
                     an HTTP header (a line break or other control character?)"
                );
            }
        }
        let client = reqwest::Client::builder()
            .timeout(tuning.request_timeout)
            .user_agent(concat!("fairshare-replay/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Api {
            client,
            base,
            token,
        })
    }

    /// Fails fast, with the cause, when nothing answers at the address or what answers
    /// is not a fairshare service (`GET /healthz` must say `{"status": "ok"}`).
    pub(super) async fn preflight(&self) -> anyhow::Result<()> {
        let url = format!("{}/healthz", self.base);
        let resp = self
            .client
            .get(&url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot reach the fairshare service at {}: {e}; is it running?",
                    self.base
                )
            })?;
        let body: serde_json::Value = resp.json().await.unwrap_or_default();
        if body["status"] != "ok" {
            bail!("{} does not look like a fairshare service: GET /healthz did not answer {{\"status\": \"ok\"}}", self.base);
        }
        Ok(())
    }

    pub(super) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// One `POST /v1/jobs` attempt.
    pub(super) async fn post_once(
        &self,
        body: &serde_json::Value,
    ) -> Result<Submitted, AttemptError> {
        let resp = self
            .request(reqwest::Method::POST, "/v1/jobs")
            .json(body)
            .send()
            .await
            .map_err(|e| AttemptError::Retryable {
                message: format!("POST /v1/jobs: {}", error_chain(&e)),
                retry_after: None,
                transport: true,
            })?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        match disposition(status) {
            Disposition::Created | Disposition::Existing => {
                let job: JobRecord = resp.json().await.map_err(|e| {
                    AttemptError::Fatal(format!(
                        "POST /v1/jobs answered {status} with a body that is not a job: {}",
                        error_chain(&e)
                    ))
                })?;
                Ok(if status == 201 {
                    Submitted::Created(job)
                } else {
                    Submitted::Existing(job)
                })
            }
            Disposition::Retry => Err(AttemptError::Retryable {
                message: format!("POST /v1/jobs: {status} {}", error_text(resp).await),
                retry_after,
                transport: false,
            }),
            Disposition::Fatal => Err(AttemptError::Fatal(format!(
                "POST {}/v1/jobs answered {status} {} (is --server the fairshare service, \
                 and --token a submitter token?)",
                self.base,
                error_text(resp).await
            ))),
            Disposition::Reject => Ok(Submitted::Rejected {
                status,
                message: error_text(resp).await,
            }),
        }
    }

    /// Submits with retries; `Err` only for a fatal answer. A 200 after an attempt that
    /// got no answer counts as created: most likely that attempt committed the job.
    pub(super) async fn submit(
        &self,
        body: serde_json::Value,
        tuning: &Tuning,
    ) -> anyhow::Result<Submitted> {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(tuning.backoff_min)
            .with_max_delay(tuning.backoff_max)
            .with_max_times(tuning.backoff_times)
            .with_jitter();
        let max_retry_after = tuning.max_retry_after;
        let unanswered = AtomicBool::new(false);
        let result = (|| self.post_once(&body))
            .retry(backoff)
            .when(AttemptError::is_retryable)
            .notify(|err, _| {
                if let AttemptError::Retryable {
                    transport: true, ..
                } = err
                {
                    unanswered.store(true, Ordering::Relaxed);
                }
            })
            .adjust(move |err, delay| match (err, delay) {
                (
                    AttemptError::Retryable {
                        retry_after: Some(after),
                        ..
                    },
                    Some(_),
                ) => Some((*after).min(max_retry_after)),
                _ => delay,
            })
            .await;
        match result {
            Ok(Submitted::Existing(job)) if unanswered.load(Ordering::Relaxed) => {
                Ok(Submitted::Created(job))
            }
            Ok(s) => Ok(s),
            Err(AttemptError::Retryable { message, .. }) => Ok(Submitted::GaveUp(message)),
            Err(AttemptError::Fatal(message)) => Err(anyhow::anyhow!(message)),
        }
    }

    /// One `GET` of a JSON document; a non-2xx answer is an error with its text.
    pub(super) async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
    ) -> anyhow::Result<Result<T, u16>> {
        let resp = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("GET {path}: {}", error_chain(&e)))?;
        let status = resp.status();
        if !status.is_success() {
            if matches!(status.as_u16(), 401 | 403) {
                bail!("GET {path}: {} {}", status.as_u16(), error_text(resp).await);
            }
            return Ok(Err(status.as_u16()));
        }
        let value = resp
            .json::<T>()
            .await
            .map_err(|e| anyhow::anyhow!("GET {path}: unreadable answer: {}", error_chain(&e)))?;
        Ok(Ok(value))
    }
}

impl Api {
    /// The share table's context: the cores of the healthy clusters
    /// (`GET /v1/scheduler`) and the users' weights (`GET /v1/users`). `None`
    /// when the scheduler view cannot be read (then the table is left out).
    pub(super) async fn share_context(&self) -> Option<ShareContext> {
        #[derive(Deserialize)]
        struct Cores {
            cpu: f64,
        }
        #[derive(Deserialize)]
        struct Cluster {
            healthy: bool,
            capacity: Cores,
        }
        #[derive(Deserialize)]
        struct Scheduler {
            clusters: Vec<Cluster>,
            usage_half_life_seconds: Option<f64>,
            starvation_guard_seconds: Option<f64>,
            starvation_runs: Option<f64>,
            backfill: Option<bool>,
        }
        #[derive(Deserialize)]
        struct User {
            id: String,
            weight: f64,
        }
        let scheduler: Scheduler = self.get_json("/v1/scheduler").await.ok()?.ok()?;
        let users: Vec<User> = self
            .get_json("/v1/users")
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        Some(ShareContext {
            capacity_cpu: scheduler
                .clusters
                .iter()
                .filter(|c| c.healthy)
                .map(|c| c.capacity.cpu)
                .sum(),
            weights: users.into_iter().map(|u| (u.id, u.weight)).collect(),
            // An older service without these fields: the simulator's defaults.
            knobs: match (
                scheduler.usage_half_life_seconds,
                scheduler.starvation_runs,
                scheduler.backfill,
            ) {
                (Some(usage_half_life_s), Some(starvation_runs), Some(backfill)) => {
                    Some(ServiceKnobs {
                        usage_half_life_s,
                        starvation_guard_s: scheduler.starvation_guard_seconds,
                        starvation_runs,
                        backfill,
                    })
                }
                _ => None,
            },
        })
    }
}

pub(super) use crate::errors::chain as error_chain;

/// The service's error message (`{"error": {"code", "message"}}`), else the body text.
pub(super) async fn error_text(resp: reqwest::Response) -> String {
    let text = resp.text().await.unwrap_or_default();
    match serde_json::from_str::<ErrorEnvelope>(&text) {
        Ok(ErrorEnvelope { error }) => match (error.code, error.message) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (None, Some(message)) => message,
            (Some(code), None) => code,
            (None, None) => text,
        },
        Err(_) => text.chars().take(300).collect(),
    }
}
