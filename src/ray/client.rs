//! The client of one cluster's Jobs REST API.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reqwest::{StatusCode, Url};
use serde::{Deserialize, Serialize};

use super::error::{bad_usage, classify, decode, error_chain, status_error, RayError};
use super::{ClusterUsage, RayJob, RayResources, SubmitJob, SubmitOutcome};

// ---------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------

/// Client of one Ray cluster's Jobs REST API. Cheap to clone (shares one connection
/// pool). Every request, body included, is bounded by the timeout given to
/// [`RayClient::new`].
#[derive(Clone, Debug)]
pub struct RayClient {
    pub(super) http: reqwest::Client,
    base: Url,
    address: String,
    timeout: Duration,
    /// The cluster's token for Ray's token authentication (hidden in `Debug`).
    token: super::auth::RayToken,
    /// Resource names as `GET /api/cluster_status` spells them (the dashboard turns
    /// `qpu_session` into `qpuSession`) → as the nodes declare them, learnt from
    /// `GET /api/v0/nodes` the first time a report names one not seen before.
    spellings: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
}

/// Body of `POST /api/jobs/` (field names are Ray's).
#[derive(Serialize)]
struct SubmitBody<'a> {
    entrypoint: &'a str,
    submission_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime_env: Option<&'a serde_json::Value>,
    metadata: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "is_zero_f64")]
    entrypoint_num_cpus: f64,
    #[serde(skip_serializing_if = "is_zero_f64")]
    entrypoint_num_gpus: f64,
    #[serde(skip_serializing_if = "is_zero_u64")]
    entrypoint_memory: u64,
    /// Custom resources by name (Ray's `entrypoint_resources`); omitted when none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    entrypoint_resources: BTreeMap<String, f64>,
}

/// A resource Ray reports that is never a custom one: `CPU`, `GPU`, `memory`, the
/// object store under either spelling, a node's (`node:…`) or an accelerator type's
/// (`accelerator_type:…`).
/// Parses `ray status`'s text (Ray's autoscaler v2 report; formatted by Ray's
/// `autoscaler/_private/util.py` `parse_usage`): under "Total Usage:", lines
/// ` {used}/{total} {resource}` (memory as `format_memory`: `0B`, `1.50GiB`; custom
/// resources under Ray's own names), and under "Pending:", ` {type}, {n} launching`
/// and one line per node starting. `None` without a "Total Usage:" section or with an
/// empty one (measured on Ray 2.60 while the head is starting).
#[must_use]
pub fn parse_status_text(text: &str) -> Option<ClusterUsage> {
    fn section<'a>(text: &'a str, title: &str) -> Option<Vec<&'a str>> {
        let mut lines = text.lines().skip_while(|l| l.trim_end() != title);
        lines.next()?;
        Some(
            lines
                .take_while(|l| l.starts_with(' ') && !l.trim().is_empty())
                .map(str::trim)
                .collect(),
        )
    }
    fn amount(x: &str) -> Option<f64> {
        const UNITS: [(&str, f64); 5] = [
            ("TiB", 1_099_511_627_776.0),
            ("GiB", 1_073_741_824.0),
            ("MiB", 1_048_576.0),
            ("KiB", 1024.0),
            ("B", 1.0),
        ];
        for (suffix, factor) in UNITS {
            if let Some(n) = x.strip_suffix(suffix) {
                return n.parse::<f64>().ok().map(|n| n * factor);
            }
        }
        x.parse().ok()
    }
    let mut total = RayResources::new(0.0, 0.0, 0.0);
    let mut used = RayResources::new(0.0, 0.0, 0.0);
    // Empty while the head itself is still starting (measured: the head listed under
    // "Pending:", no usage line): capacity unknown, not 0.
    let usage = section(text, "Total Usage:").filter(|lines| !lines.is_empty())?;
    for line in usage {
        let Some((pair, rest)) = line.split_once(' ') else {
            continue;
        };
        let resource = rest.split(" (").next().unwrap_or(rest).trim();
        let Some((u, t)) = pair.split_once('/') else {
            continue;
        };
        let (Some(u), Some(t)) = (amount(u), amount(t)) else {
            continue;
        };
        match resource {
            "CPU" => (used.cpu, total.cpu) = (u, t),
            "GPU" => (used.gpu, total.gpu) = (u, t),
            "memory" => (used.memory_bytes, total.memory_bytes) = (u, t),
            name if is_builtin(name) => {}
            name => {
                if let Some(k) = custom_slot(name) {
                    used.custom.set(k, u);
                    total.custom.set(k, t);
                }
            }
        }
    }
    let nodes_starting = section(text, "Pending:")
        .unwrap_or_default()
        .iter()
        .filter(|l| !l.starts_with('('))
        .map(|l| {
            l.strip_suffix(" launching")
                .and_then(|l| l.rsplit(", ").next())
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(1)
        })
        .sum();
    Some(ClusterUsage {
        total,
        used,
        nodes_starting,
    })
}

fn is_builtin(name: &str) -> bool {
    matches!(
        name,
        "CPU" | "GPU" | "memory" | "object_store_memory" | "objectStoreMemory"
    ) || name.starts_with("node:")
        || name.starts_with("accelerator_type:")
}

/// How Ray's dashboard spells a resource name in `GET /api/cluster_status` (its
/// `to_google_style`: the parts between `_` after the first, each through Python's
/// `str.title()`, joined): `qpu_session` → `qpuSession`, `my_QPU` → `myQpu`,
/// `node:__internal_head__` → `node:InternalHead`. Measured on Ray 2.60: a head
/// started with `--resources='{"qpu_session": 2}'` reports `qpuSession`.
#[must_use]
pub(crate) fn google_style(name: &str) -> String {
    let mut parts = name.split('_');
    let mut out = parts.next().unwrap_or_default().to_owned();
    for part in parts {
        // Python's str.title(): a letter after a letter is lower-cased, any other
        // letter upper-cased.
        let mut after_letter = false;
        for c in part.chars() {
            if c.is_alphabetic() {
                if after_letter {
                    out.extend(c.to_lowercase());
                } else {
                    out.extend(c.to_uppercase());
                }
                after_letter = true;
            } else {
                out.push(c);
                after_letter = false;
            }
        }
    }
    out
}

/// The slot of a resource name Ray reports, if it is a custom resource this service
/// counts: not a built-in one (`CPU`, `GPU`, `memory`, the object store under either
/// spelling), not a node's (`node:…`) nor an accelerator type's
/// (`accelerator_type:…`), and a valid name ([`custom::check_name`]). New names are
/// registered; once the registry is full ([`custom::MAX_CUSTOM`] names) a new one is
/// skipped, with one warning per process.
///
/// [`custom::check_name`]: crate::policy::custom::check_name
/// [`custom::MAX_CUSTOM`]: crate::policy::custom::MAX_CUSTOM
pub(crate) fn custom_slot(name: &str) -> Option<usize> {
    use crate::policy::custom;
    if is_builtin(name) || name.contains("_group_") {
        return None;
    }
    match custom::slot(name) {
        Ok(k) => Some(k),
        Err(custom::NameError::TooMany(_)) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!(
                    resource = name,
                    max = custom::MAX_CUSTOM,
                    "a cluster reports more custom resources than this service counts; \
                     the ones beyond are ignored"
                );
            });
            None
        }
        Err(_) => None,
    }
}

fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

/// Answer to `POST /api/jobs/` (`{"job_id", "submission_id"}`); decoded to check that
/// Ray (not some proxy page) answered, `submission_id` logged at debug level.
#[derive(Deserialize)]
struct SubmitAnswer {
    #[serde(default)]
    submission_id: Option<String>,
}

/// Answer to `POST /api/jobs/{id}/stop`.
#[derive(Deserialize)]
struct StopAnswer {
    stopped: bool,
}

/// `request` with `Authorization: Bearer <token>` when there is a token (Ray's
/// client's header for token authentication).
fn with_token(request: reqwest::RequestBuilder, token: Option<String>) -> reqwest::RequestBuilder {
    match token {
        Some(t) => request.bearer_auth(t),
        None => request,
    }
}

/// The certificates of PEM file `path` (a CA bundle). Errors: unreadable, or no
/// certificate in it.
fn ca_certificates(path: &std::path::Path) -> Result<Vec<reqwest::Certificate>, String> {
    let pem =
        std::fs::read(path).map_err(|e| format!("cannot read ca_file {}: {e}", path.display()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| format!("ca_file {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "ca_file {} holds no PEM certificate",
            path.display()
        ));
    }
    Ok(certs)
}

/// Answer to `GET /api/jobs/{id}/logs`.
#[derive(Deserialize)]
struct LogsAnswer {
    #[serde(default)]
    logs: Option<String>,
}

impl RayClient {
    /// A client for the Ray dashboard at `address` (base URL, e.g.
    /// `"http://127.0.0.1:8265"`; a trailing slash and a path prefix are allowed).
    /// `request_timeout` bounds each request from connect to the end of the body.
    ///
    /// Fails with [`RayError::Client`] (status 0) when `address` is not an `http://`
    /// or `https://` URL, and with [`RayError::Transport`] when the HTTP client cannot
    /// be built (TLS initialisation). No request is sent.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn new(address: &str, request_timeout: Duration) -> Result<Self, RayError> {
        Self::build(
            address,
            request_timeout,
            super::auth::RayToken::none(),
            None,
        )
    }

    /// [`RayClient::new`] sending `token` (tests of the token's handling).
    #[cfg(test)]
    pub(crate) fn with_token(
        address: &str,
        request_timeout: Duration,
        token: super::auth::RayToken,
    ) -> Result<Self, RayError> {
        Self::build(address, request_timeout, token, None)
    }

    /// The client of a `[[clusters]]` entry: its address, its token
    /// ([`super::auth::RayToken::for_cluster`]: `auth_token_file`, else Ray's
    /// `RAY_AUTH_TOKEN`/`RAY_AUTH_TOKEN_PATH`) sent on every request, and its
    /// `ca_file` trusted for `https://` besides the Mozilla roots bundled with rustls
    /// (webpki-roots).
    ///
    /// Errors: as [`RayClient::new`]; and [`RayError::Client`] (status 0) when
    /// `ca_file` cannot be read or holds no PEM certificate.
    pub fn for_cluster(
        c: &crate::config::ClusterSettings,
        request_timeout: Duration,
    ) -> Result<Self, RayError> {
        let token = super::auth::RayToken::for_cluster(c.auth_token_file.as_deref(), |k| {
            std::env::var(k).ok()
        });
        Self::build(&c.address, request_timeout, token, c.ca_file.as_deref())
    }

    fn build(
        address: &str,
        request_timeout: Duration,
        token: super::auth::RayToken,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Self, RayError> {
        let address = address.trim().trim_end_matches('/');
        let invalid = |reason: String| RayError::Client {
            status: 0,
            message: format!("invalid Ray address {address:?}: {reason}"),
        };
        let base = Url::parse(address).map_err(|e| invalid(e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(invalid("expected an http:// or https:// URL".to_owned()));
        }
        if base.query().is_some() || base.fragment().is_some() {
            return Err(invalid("a query or fragment is not allowed".to_owned()));
        }
        let mut builder = reqwest::Client::builder().timeout(request_timeout);
        if let Some(path) = ca_file {
            for cert in ca_certificates(path).map_err(invalid)? {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder.build().map_err(|source| RayError::Transport {
            endpoint: "client setup".to_owned(),
            source: source.without_url(),
        })?;
        Ok(Self {
            http,
            base,
            address: address.to_owned(),
            timeout: request_timeout,
            token,
            spellings: std::sync::Arc::default(),
        })
    }

    /// The dashboard base URL this client talks to, without a trailing slash.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Submits `job` with `POST /api/jobs/`.
    ///
    /// A 500 whose text says "already exists" (Ray's answer to a duplicate
    /// `submission_id`) is `Ok(SubmitOutcome::AlreadyExists)`. Does not retry; see
    /// [`submit_idempotent`].
    ///
    /// [`submit_idempotent`]: super::submit_idempotent
    pub async fn submit(&self, job: &SubmitJob) -> Result<SubmitOutcome, RayError> {
        let body = SubmitBody {
            entrypoint: &job.entrypoint,
            submission_id: &job.submission_id,
            runtime_env: job.runtime_env.as_ref(),
            metadata: &job.metadata,
            entrypoint_num_cpus: job.resources.cpu,
            entrypoint_num_gpus: job.resources.gpu,
            entrypoint_memory: crate::views::bytes(job.resources.memory_bytes),
            entrypoint_resources: job.resources.custom.by_name(),
        };
        let endpoint = "POST /api/jobs/";
        let request = self.http.post(self.url(&["api", "jobs", ""])).json(&body);
        let (status, bytes) = self.execute(request, endpoint).await?;
        if status.is_success() {
            let answer: SubmitAnswer = decode(endpoint, &bytes)?;
            tracing::debug!(
                submission_id = %job.submission_id,
                ray_submission_id = answer.submission_id.as_deref().unwrap_or_default(),
                "Ray accepted the job"
            );
            return Ok(SubmitOutcome::Submitted);
        }
        let text = String::from_utf8_lossy(&bytes);
        if status == StatusCode::INTERNAL_SERVER_ERROR && text.contains("already exists") {
            return Ok(SubmitOutcome::AlreadyExists);
        }
        Err(classify(endpoint, status, &text))
    }

    /// The job with this `submission_id` (`GET /api/jobs/{id}`); `None` when Ray
    /// answers 404 (it does not know the job).
    pub async fn get_job(&self, submission_id: &str) -> Result<Option<RayJob>, RayError> {
        let endpoint = format!("GET /api/jobs/{submission_id}");
        let request = self.http.get(self.url(&["api", "jobs", submission_id]));
        let (status, bytes) = self.execute(request, &endpoint).await?;
        match status {
            s if s.is_success() => decode(&endpoint, &bytes).map(Some),
            StatusCode::NOT_FOUND => Ok(None),
            s => Err(status_error(s, &String::from_utf8_lossy(&bytes))),
        }
    }

    /// Every job Ray knows (`GET /api/jobs/`), in no particular order, including
    /// driver jobs without a `submission_id`.
    ///
    /// One malformed element fails the whole call with [`RayError::Decode`] rather than
    /// being skipped: a skipped job would look lost to the monitor. Unknown statuses
    /// and fields do not count as malformed.
    pub async fn list_jobs(&self) -> Result<Vec<RayJob>, RayError> {
        let endpoint = "GET /api/jobs/";
        let request = self.http.get(self.url(&["api", "jobs", ""]));
        let (status, bytes) = self.execute(request, endpoint).await?;
        if !status.is_success() {
            return Err(classify(endpoint, status, &String::from_utf8_lossy(&bytes)));
        }
        decode(endpoint, &bytes)
    }

    /// Asks Ray to stop the job (`POST /api/jobs/{id}/stop`). `Ok(true)` when Ray
    /// stopped it, `Ok(false)` when it was already terminal or Ray does not know it
    /// (404). A job still PENDING in Ray is only stopped once resources free up.
    pub async fn stop_job(&self, submission_id: &str) -> Result<bool, RayError> {
        let endpoint = format!("POST /api/jobs/{submission_id}/stop");
        let request = self
            .http
            .post(self.url(&["api", "jobs", submission_id, "stop"]));
        let (status, bytes) = self.execute(request, &endpoint).await?;
        match status {
            s if s.is_success() => decode::<StopAnswer>(&endpoint, &bytes).map(|a| a.stopped),
            StatusCode::NOT_FOUND => Ok(false),
            s => Err(status_error(s, &String::from_utf8_lossy(&bytes))),
        }
    }

    /// The job's whole driver log so far (`GET /api/jobs/{id}/logs`); `None` when Ray
    /// does not know the job (404). A `null` log is an empty string.
    pub async fn job_logs(&self, submission_id: &str) -> Result<Option<String>, RayError> {
        let endpoint = format!("GET /api/jobs/{submission_id}/logs");
        let request = self
            .http
            .get(self.url(&["api", "jobs", submission_id, "logs"]));
        let (status, bytes) = self.execute(request, &endpoint).await?;
        match status {
            s if s.is_success() => {
                decode::<LogsAnswer>(&endpoint, &bytes).map(|a| Some(a.logs.unwrap_or_default()))
            }
            StatusCode::NOT_FOUND => Ok(None),
            s => Err(status_error(s, &String::from_utf8_lossy(&bytes))),
        }
    }

    /// The job as Ray describes it (`GET /api/jobs/{id}`), undecoded, for Ray's Jobs
    /// API served by fairshare to pass through (`status`, `message`, `error_type`,
    /// `driver_info`, `start_time`/`end_time` in ms, ...); `None` on 404.
    pub async fn job_details(
        &self,
        submission_id: &str,
    ) -> Result<Option<serde_json::Value>, RayError> {
        let endpoint = format!("GET /api/jobs/{submission_id}");
        let request = self.http.get(self.url(&["api", "jobs", submission_id]));
        let (status, bytes) = self.execute(request, &endpoint).await?;
        match status {
            s if s.is_success() => decode(&endpoint, &bytes).map(Some),
            StatusCode::NOT_FOUND => Ok(None),
            s => Err(status_error(s, &String::from_utf8_lossy(&bytes))),
        }
    }

    /// Deletes a finished job's record in Ray (`DELETE /api/jobs/{id}`). `Ok(true)`
    /// when Ray deleted it, `Ok(false)` when Ray does not know it (404). Ray refuses
    /// (an error) to delete a job that is not finished.
    pub async fn delete_job(&self, submission_id: &str) -> Result<bool, RayError> {
        let endpoint = format!("DELETE /api/jobs/{submission_id}");
        let request = self.http.delete(self.url(&["api", "jobs", submission_id]));
        let (status, bytes) = self.execute(request, &endpoint).await?;
        match status {
            s if s.is_success() => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            s => Err(status_error(s, &String::from_utf8_lossy(&bytes))),
        }
    }

    /// Whether the cluster has the `working_dir`/`py_modules` package `{protocol}://
    /// {name}` (`GET /api/packages/{protocol}/{name}`: 200 yes, 404 no).
    pub async fn package_exists(&self, protocol: &str, name: &str) -> Result<bool, RayError> {
        let endpoint = format!("GET /api/packages/{protocol}/{name}");
        let request = self
            .http
            .get(self.url(&["api", "packages", protocol, name]));
        let (status, bytes) = self.execute(request, &endpoint).await?;
        match status {
            s if s.is_success() => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            s => Err(status_error(s, &String::from_utf8_lossy(&bytes))),
        }
    }

    /// Uploads the package `{protocol}://{name}` (a zip file, as Ray's client makes it)
    /// with `PUT /api/packages/{protocol}/{name}`, as `JobSubmissionClient` does
    /// before a submit.
    pub async fn upload_package(
        &self,
        protocol: &str,
        name: &str,
        content: Vec<u8>,
    ) -> Result<(), RayError> {
        let endpoint = format!("PUT /api/packages/{protocol}/{name}");
        let request = self
            .http
            .put(self.url(&["api", "packages", protocol, name]))
            .body(content);
        let (status, bytes) = self.execute(request, &endpoint).await?;
        if status.is_success() {
            Ok(())
        } else {
            Err(status_error(status, &String::from_utf8_lossy(&bytes)))
        }
    }

    /// Capacity and usage from the text report, `GET /api/cluster_status?format=1`
    /// (`data.clusterStatus`, a string: `ray status`'s output), for Ray's autoscaler
    /// v2, which writes no JSON report (docs/ray.md, "Autoscaler v2"). `None` when the
    /// text has no "Total Usage:" section (no report written yet).
    async fn cluster_usage_text(&self) -> Result<Option<ClusterUsage>, RayError> {
        let endpoint = "GET /api/cluster_status?format=1";
        let request = self
            .http
            .get(self.url(&["api", "cluster_status"]))
            .query(&[("format", "1")]);
        let (status, bytes) = self.execute(request, endpoint).await?;
        if !status.is_success() {
            return Err(status_error(status, &String::from_utf8_lossy(&bytes)));
        }
        let answer: serde_json::Value = decode(endpoint, &bytes)?;
        let Some(text) = answer
            .pointer("/data/clusterStatus")
            .and_then(serde_json::Value::as_str)
        else {
            return Ok(None);
        };
        Ok(parse_status_text(text))
    }

    /// Capacity and usage of the cluster (`GET /api/cluster_status`), from
    /// `data.clusterStatus.loadMetricsReport.usage` = `{"CPU": [used, total], "GPU":
    /// [..], "memory": [..], ...}` (cores, devices, bytes). A resource absent from the
    /// report is 0.
    ///
    /// Right after the head starts, Ray reports `clusterStatus: null` until its
    /// autoscaler has written a first report: that is a [`RayError::Decode`] (capacity
    /// unknown), not a cluster of size 0.
    pub async fn cluster_usage(&self) -> Result<ClusterUsage, RayError> {
        let endpoint = "GET /api/cluster_status";
        let request = self.http.get(self.url(&["api", "cluster_status"]));
        let (status, bytes) = self.execute(request, endpoint).await?;
        if !status.is_success() {
            return Err(status_error(status, &String::from_utf8_lossy(&bytes)));
        }
        let answer: serde_json::Value = decode(endpoint, &bytes)?;
        if answer
            .pointer("/data/clusterStatus")
            .is_some_and(serde_json::Value::is_null)
        {
            // Ray's autoscaler v2 (KubeRay's default) writes no JSON report at all;
            // its text report (`?format=1`, what `ray status` prints) has the totals.
            if let Some(usage) = self.cluster_usage_text().await? {
                return Ok(usage);
            }
        }
        let usage = answer
            .pointer("/data/clusterStatus/loadMetricsReport/usage")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| RayError::Decode {
                endpoint: endpoint.to_owned(),
                detail: "no data.clusterStatus.loadMetricsReport.usage object (the \
                         autoscaler has not reported yet?)"
                    .to_owned(),
            })?;
        let pair = |key: &str| -> Result<(f64, f64), RayError> {
            let Some(value) = usage.get(key) else {
                return Ok((0.0, 0.0));
            };
            match value.as_array().map(Vec::as_slice) {
                Some([used, total]) => match (used.as_f64(), total.as_f64()) {
                    (Some(used), Some(total)) => Ok((used, total)),
                    _ => Err(bad_usage(endpoint, key, value)),
                },
                _ => Err(bad_usage(endpoint, key, value)),
            }
        };
        let (cpu_used, cpu_total) = pair("CPU")?;
        let (gpu_used, gpu_total) = pair("GPU")?;
        let (mem_used, mem_total) = pair("memory")?;
        let mut total = RayResources::new(cpu_total, gpu_total, mem_total);
        let mut used = RayResources::new(cpu_used, gpu_used, mem_used);
        let reported: Vec<&String> = usage.keys().filter(|k| !is_builtin(k)).collect();
        let unknown = {
            let known = self
                .spellings
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            reported.iter().any(|k| !known.contains_key(k.as_str()))
        };
        if unknown {
            self.learn_spellings(&reported).await;
        }
        for reported_name in reported {
            let name = self
                .spellings
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(reported_name.as_str())
                .cloned()
                .unwrap_or_else(|| reported_name.clone());
            let Some(k) = custom_slot(&name) else {
                continue;
            };
            let (u, t) = pair(reported_name)?;
            total.custom.set(k, t);
            used.custom.set(k, u);
        }
        let report = answer.pointer("/data/clusterStatus/autoscalerReport");
        let launches: u64 = report
            .and_then(|r| r.get("pendingLaunches"))
            .and_then(serde_json::Value::as_object)
            .map(|m| m.values().filter_map(serde_json::Value::as_u64).sum())
            .unwrap_or(0);
        let started = report
            .and_then(|r| r.get("pendingNodes"))
            .and_then(serde_json::Value::as_array)
            .map_or(0, Vec::len) as u64;
        let nodes_starting = u32::try_from(launches + started).unwrap_or(u32::MAX);
        Ok(ClusterUsage {
            total,
            used,
            nodes_starting,
        })
    }

    /// Learns how the nodes spell the resources `reported` names
    /// (`GET /api/v0/nodes?detail=1`, each node's `resources_total`): the dashboard's
    /// cluster report spells them in "Google style" ([`google_style`]). A name no node
    /// declares, or every name when the nodes cannot be read (an older dashboard), is
    /// taken as reported; either way it is not asked about again.
    async fn learn_spellings(&self, reported: &[&String]) {
        let endpoint = "GET /api/v0/nodes";
        let request = self
            .http
            .get(self.url(&["api", "v0", "nodes"]))
            .query(&[("detail", "1"), ("limit", "10000")]);
        let declared: Vec<String> = match self.execute(request, endpoint).await {
            Ok((status, bytes)) if status.is_success() => {
                serde_json::from_slice::<serde_json::Value>(&bytes)
                    .ok()
                    .and_then(|v| v.pointer("/data/result/result").cloned())
                    .and_then(|v| v.as_array().cloned())
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|n| n.get("resources_total")?.as_object().cloned())
                    .flat_map(|m| m.into_iter().map(|(k, _)| k))
                    .collect()
            }
            _ => Vec::new(),
        };
        let mut known = self
            .spellings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for name in declared {
            known.insert(google_style(&name), name);
        }
        for r in reported {
            known.entry((*r).clone()).or_insert_with(|| (*r).clone());
        }
    }

    /// `base` + the given path segments, each percent-encoded. An empty last segment
    /// gives a trailing slash (Ray's routes `/api/jobs/` need it).
    pub(super) fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        // `new` rejected cannot-be-a-base URLs, so this always succeeds.
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// Sends `request` and reads the whole body. Only transport errors and timeouts
    /// are errors here; the caller interprets the status.
    /// Sends `request` with the cluster's token; a 401 or 403 is
    /// [`RayError::Unauthorized`] (after the token file was read once more and, if it
    /// changed, the request sent again with the new token).
    pub(super) async fn execute(
        &self,
        request: reqwest::RequestBuilder,
        endpoint: &str,
    ) -> Result<(StatusCode, Vec<u8>), RayError> {
        let unauthorized = |status: u16, detail: String| RayError::Unauthorized {
            endpoint: endpoint.to_owned(),
            status,
            detail,
        };
        let token = self.token.current().map_err(|why| unauthorized(0, why))?;
        let again = request.try_clone();
        let (status, bytes) = self.send(with_token(request, token), endpoint).await?;
        let refused = |s: StatusCode| matches!(s.as_u16(), 401 | 403);
        if !refused(status) {
            return Ok((status, bytes));
        }
        let (status, bytes) = match again {
            Some(again) if self.token.reload() => {
                let token = self.token.current().map_err(|why| unauthorized(0, why))?;
                self.send(with_token(again, token), endpoint).await?
            }
            _ => (status, bytes),
        };
        if !refused(status) {
            return Ok((status, bytes));
        }
        let said = super::error::summarize(&String::from_utf8_lossy(&bytes));
        Err(unauthorized(
            status.as_u16(),
            format!(
                "sent {}; Ray said {said:?} (check the cluster's token: auth_token_file, RAY_AUTH_TOKEN)",
                self.token.describe()
            ),
        ))
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        endpoint: &str,
    ) -> Result<(StatusCode, Vec<u8>), RayError> {
        crate::metrics::get().ray_dashboard_requests.inc();
        let started = Instant::now();
        let result = async {
            let response = request.send().await?;
            let status = response.status();
            let bytes = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, bytes.to_vec()))
        }
        .await;
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match result {
            Ok((status, bytes)) => {
                tracing::debug!(
                    endpoint,
                    status = status.as_u16(),
                    elapsed_ms,
                    "Ray answered"
                );
                Ok((status, bytes))
            }
            Err(err) => {
                let err = self.request_error(endpoint, err);
                tracing::debug!(endpoint, elapsed_ms, error = %error_chain(&err), "Ray request failed");
                Err(err)
            }
        }
    }

    fn request_error(&self, endpoint: &str, err: reqwest::Error) -> RayError {
        let endpoint = endpoint.to_owned();
        if err.is_timeout() {
            RayError::Timeout {
                endpoint,
                timeout_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
                source: err.without_url(),
            }
        } else {
            RayError::Transport {
                endpoint,
                source: err.without_url(),
            }
        }
    }
}
