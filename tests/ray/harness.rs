//! An isolated local Ray head per test: own ports, own temp dir, stopped (SIGTERM to
//! its process group) when dropped. Ray comes from `FAIRSHARE_RAY_BIN` or the
//! project's `.venv/bin/ray` (`scripts/setup-ray` makes it).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where `ray` is. The Ray tests are `#[ignore]`d unless this build saw
/// `FAIRSHARE_RAY_BIN` (see `build.rs`; `scripts/test` sets it); one that runs anyway
/// without Ray fails here. Also refuses to run outside a loopback-only network
/// namespace (see [`assert_loopback_only`]).
pub fn ray_bin() -> PathBuf {
    let candidate = std::env::var_os("FAIRSHARE_RAY_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/ray"));
    assert!(
        candidate.exists(),
        "this test needs Ray at {} (run scripts/setup-ray, set FAIRSHARE_RAY_BIN)",
        candidate.display()
    );
    assert_loopback_only();
    candidate
}

/// The network interfaces this process sees (its network namespace's, from
/// /proc/self/net/dev; /sys/class/net shows the namespace sysfs was mounted in).
pub fn interfaces() -> Vec<String> {
    std::fs::read_to_string("/proc/self/net/dev")
        .unwrap_or_default()
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(|name| name.trim().to_string())
        .collect()
}

/// A local Ray head listens on the machine's address and on all interfaces whatever
/// its flags say, with Ray's token auth off (docs/ray.md): anyone who reaches it can run
/// code. The Ray tests therefore run inside a private network namespace whose only
/// interface is loopback (`scripts/test` runs this binary through
/// `scripts/test-runner`, which uses `scripts/in-netns`), where Ray binds 127.0.0.1
/// only. Started anywhere else, they refuse, unless `FAIRSHARE_RAY_UNISOLATED=1`
/// (set by `scripts/in-netns` when the machine allows no namespace; it says so loudly).
pub fn assert_loopback_only() {
    let ifaces = interfaces();
    if ifaces.iter().all(|i| i == "lo") {
        return;
    }
    if std::env::var("FAIRSHARE_RAY_UNISOLATED").as_deref() == Ok("1") {
        eprintln!(
            "WARNING: Ray tests run WITHOUT network isolation (interfaces {ifaces:?}): \
             the Ray heads they start are reachable from the network"
        );
        return;
    }
    panic!(
        "the Ray tests must run in a loopback-only network namespace (this one has \
         {ifaces:?}); run them through scripts/test, or: \
         scripts/in-netns cargo test --test ray"
    );
}

/// A free TCP port on loopback, outside Ray's worker range 10002–19999.
pub fn free_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !(10002..=19999).contains(&port) {
            return port;
        }
    }
}

/// One running Ray head.
pub struct RayHead {
    child: Child,
    pub dashboard: String,
    /// Ray's token authentication token, for a head started with it.
    pub token: Option<String>,
    /// The head's temp dir: Ray's session and logs, the launcher's output.
    dir: tempfile::TempDir,
    /// The head's GCS address, `127.0.0.1:PORT`, when this harness chose it (an
    /// autoscaling head's launcher writes it into `dir/gcs`).
    gcs: Option<String>,
}

impl RayHead {
    /// Starts a head with `cpus` CPUs; does not wait for it (see [`RayHead::wait_ready`]).
    pub fn spawn(ray: &PathBuf, cpus: u32) -> RayHead {
        RayHead::spawn_with(ray, cpus, None)
    }

    /// [`RayHead::spawn`] with custom resources (`--resources`, a JSON object such as
    /// `{"QPU": 2}`).
    pub fn spawn_with(ray: &PathBuf, cpus: u32, resources: Option<&str>) -> RayHead {
        RayHead::spawn_full(ray, cpus, resources, None)
    }

    /// [`RayHead::spawn`] with Ray's token authentication on (`RAY_AUTH_MODE=token`,
    /// `RAY_AUTH_TOKEN=token`): every dashboard request without the token is 401.
    pub fn spawn_secured(ray: &PathBuf, cpus: u32, token: &str) -> RayHead {
        RayHead::spawn_full(ray, cpus, None, Some(token))
    }

    fn spawn_full(
        ray: &PathBuf,
        cpus: u32,
        resources: Option<&str>,
        token: Option<&str>,
    ) -> RayHead {
        let dir = tempfile::Builder::new()
            .prefix("ray")
            .tempdir_in("/tmp")
            .unwrap();
        let dash = free_port();
        let gcs = format!("127.0.0.1:{}", free_port());
        let bin_dir = ray.parent().unwrap().to_path_buf();
        let path = format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut command = Command::new("setsid");
        if let Some(t) = token {
            command
                .env("RAY_AUTH_MODE", "token")
                .env("RAY_AUTH_TOKEN", t);
        }
        let child = command
            .arg(ray)
            .args([
                "start",
                "--head",
                "--block",
                "--include-dashboard=true",
                "--disable-usage-stats",
            ])
            .arg(format!("--num-cpus={cpus}"))
            .arg(format!("--port={}", gcs.rsplit(':').next().unwrap()))
            .arg("--dashboard-host=127.0.0.1")
            .arg(format!("--dashboard-port={dash}"))
            .arg(format!("--ray-client-server-port={}", free_port()))
            .arg(format!("--dashboard-agent-listen-port={}", free_port()))
            .arg(format!("--temp-dir={}", dir.path().display()))
            .arg("--object-store-memory=200000000")
            .args(resources.map(|r| format!("--resources={r}")))
            .env("PATH", path)
            .env("RAY_USAGE_STATS_ENABLED", "0")
            .env("AUTOSCALER_UPDATE_INTERVAL_S", "1")
            .env("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
            .env("RAY_JOB_START_TIMEOUT_SECONDS", "60")
            .stdout(Stdio::null())
            .stderr(launcher_log(dir.path()))
            .spawn()
            .expect("start ray");
        RayHead {
            child,
            dashboard: format!("http://127.0.0.1:{dash}"),
            token: token.map(str::to_string),
            dir,
            gcs: Some(gcs),
        }
    }

    /// An *autoscaling* head (issue 44): Ray's own autoscaler with its fake multi-node
    /// provider, through `scripts/ray-autoscaling-head` (which writes the cluster config
    /// into this head's temp dir and puts head, autoscaler and every worker raylet it
    /// starts in one process group, stopped on drop like any head). `head_cpus` 0 is
    /// a head that takes no work; `worker_types` is Ray's `available_node_types` for
    /// the workers, e.g. `{"cpu-2": {"resources": {"CPU": 2}, "min_workers": 0,
    /// "max_workers": 2}}`; idle timeout 0.2 min (12 s), autoscaler update every 1 s.
    /// See [`crate::autoscale`] for reading the autoscaler's view.
    pub fn spawn_autoscaling(
        ray: &PathBuf,
        head_cpus: u32,
        worker_types: &serde_json::Value,
    ) -> RayHead {
        let dir = tempfile::Builder::new()
            .prefix("ray")
            .tempdir_in("/tmp")
            .unwrap();
        let dash = free_port();
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        // The venv's python runs the launcher; it execs `ray start` in a new session.
        let child = Command::new(ray.parent().unwrap().join("python"))
            .arg(root.join("scripts/ray-autoscaling-head"))
            .arg(dir.path())
            .arg(format!("--head-cpus={head_cpus}"))
            .arg(format!("--worker-types={worker_types}"))
            .arg("--idle-timeout-minutes=0.2")
            .arg(format!("--dashboard-port={dash}"))
            .arg("--job-start-timeout=60")
            .env("FAIRSHARE_RAY_BIN", ray)
            .stdout(Stdio::null())
            .stderr(launcher_log(dir.path()))
            .spawn()
            .expect("start scripts/ray-autoscaling-head");
        RayHead {
            child,
            dashboard: format!("http://127.0.0.1:{dash}"),
            token: None,
            dir,
            gcs: None,
        }
    }

    /// A client that sends the head's token, if it has one.
    pub fn client(&self) -> reqwest::Client {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(t) = &self.token {
            headers.insert(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {t}").parse().unwrap(),
            );
        }
        reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .unwrap()
    }

    /// Waits until the head's node is ALIVE and capacity is reported (deadline 90 s).
    pub async fn wait_ready(&self) {
        let client = self.client();
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let nodes = client
                .get(format!("{}/api/v0/nodes", self.dashboard))
                .send()
                .await;
            let status = client
                .get(format!("{}/api/cluster_status", self.dashboard))
                .send()
                .await;
            if let (Ok(n), Ok(s)) = (nodes, status) {
                let n = n.text().await.unwrap_or_default();
                let s = s.text().await.unwrap_or_default();
                if n.contains("ALIVE") && s.contains("loadMetricsReport") {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "Ray head did not become ready in 90 s"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Whether this head has gone away: its launcher (`ray start --block`, which ends
    /// the whole head when any of its processes dies) has exited, or its dashboard
    /// refuses connections.
    pub fn gone(&mut self) -> bool {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return true;
        }
        let addr = self.dashboard.trim_start_matches("http://");
        std::net::TcpStream::connect(addr).is_err()
    }

    /// The last lines of this head's logs and its launcher's output (as printed when a
    /// test fails with the head up).
    pub fn logs(&self) -> String {
        log_tails(self.dir.path())
    }

    /// Ray's own job list, as `GET /api/jobs/` answers it (one object per job).
    pub async fn job_list(&self) -> Vec<serde_json::Value> {
        let list: serde_json::Value = self
            .client()
            .get(format!("{}/api/jobs/", self.dashboard))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        list.as_array().unwrap().clone()
    }

    /// Ray's own job list: (submission_id, status).
    pub async fn jobs(&self) -> Vec<(String, String)> {
        self.job_list()
            .await
            .iter()
            .filter_map(|j| {
                Some((
                    j["submission_id"].as_str()?.to_string(),
                    j["status"].as_str()?.to_string(),
                ))
            })
            .collect()
    }
}

impl Drop for RayHead {
    fn drop(&mut self) {
        let pid = self.child.id();
        if std::thread::panicking() {
            // Before the SIGTERM: whether the head had already gone (`ray start --block`
            // ends the whole head when any of its processes dies) and what Ray logged.
            let state = match self.child.try_wait() {
                Ok(Some(status)) => format!("had already exited ({status})"),
                _ => "was still running".to_string(),
            };
            eprintln!(
                "--- the Ray head at {} {state}; its logs' last lines:\n{}",
                self.dashboard,
                self.logs()
            );
        }
        // Ray does not end a job's driver with the head (scripts/stop-ray-drivers says
        // why): a test's leftover drivers would run on into the next tests. Found
        // while the head runs (stopping, Ray ends a driver's shell, not its children).
        let gcs = self.gcs.clone().or_else(|| {
            std::fs::read_to_string(self.dir.path().join("gcs"))
                .ok()
                .map(|s| s.trim().to_string())
        });
        let drivers = gcs.as_ref().map(|gcs| {
            let found = Command::new(stop_ray_drivers())
                .args(["--find", gcs])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            found
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        });
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{pid}")])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut stopped = false;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                // The rest of the group (an autoscaling head's worker raylets) ends
                // on the same SIGTERM, a moment later.
                while Instant::now() < deadline && group_alive(pid) {
                    std::thread::sleep(Duration::from_millis(100));
                }
                stopped = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if !stopped {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
            let _ = self.child.wait();
        }
        if let (Some(gcs), Some(drivers)) = (gcs, drivers) {
            let _ = Command::new(stop_ray_drivers())
                .arg(gcs)
                .args(drivers)
                .status();
        }
    }
}

/// `scripts/stop-ray-drivers`.
fn stop_ray_drivers() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/stop-ray-drivers")
}

/// A file in the head's dir for what `ray start` (or the autoscaling launcher) prints:
/// Ray says there which of its processes died when it ends a `--block` head.
fn launcher_log(dir: &Path) -> Stdio {
    std::fs::File::create(dir.join("launcher.log"))
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::null())
}

/// Ray's logs most telling when a head goes away in a test, found under `dir` (a head's
/// temp dir holds `session_*/logs/`, an autoscaling head's under `t/`): the last 15
/// lines of the launcher's output and of each of them. Printed when a test fails.
fn log_tails(dir: &Path) -> String {
    const NAMES: [&str; 8] = [
        "launcher.log",
        "monitor.err",
        "monitor.log",
        "dashboard.err",
        "dashboard.log",
        "raylet.err",
        "gcs_server.err",
        "dashboard_agent.log",
    ];
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            // session_latest is a link to the session's own dir: read that one once.
            if path.is_symlink() {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if NAMES
                .iter()
                .any(|n| path.file_name().is_some_and(|f| f == *n))
            {
                found.push(path);
            }
        }
    }
    found.sort();
    let mut out = String::new();
    for path in found {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(15)..];
        out.push_str(&format!("== {}\n{}\n", path.display(), tail.join("\n")));
    }
    out
}

/// Whether any process of process group `pgid` is still there (`kill -0`).
fn group_alive(pgid: u32) -> bool {
    Command::new("kill")
        .args(["-0", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Polls `check` every 200 ms until it returns `Some`, failing after `secs`.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {secs} s waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
