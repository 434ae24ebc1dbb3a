//! The qiskit-serverless gateway's own calls through fairshare, against the real Ray
//! head (issue 31, "Done when" 1; docs/qiskit-serverless.md): Ray's
//! `JobSubmissionClient` with no header but what `RAY_AUTH_MODE=token` makes it add,
//! `submit_job(entrypoint="python main.py", runtime_env={"working_dir", "env_vars"})`
//! with no submission id, metadata or resources, `get_job_status` each pass, a new
//! client for each stop, and a plain header-less `requests.get` for the logs (trusted
//! access). Two users told apart only by `QISKIT_IBM_TOKEN` are ordered by fair share;
//! afterwards no user's token is anywhere in the database, on SQLite (the file and its
//! WAL) and on PostgreSQL (a `pg_dump`).

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{ray_bin, RayHead};
use crate::service::{all_terminal, Service};
use crate::{by_dispatch, ONE_HEAD_AT_A_TIME};

/// The gateway's fairshare token (its `RAY_AUTH_TOKEN`), acting for every user.
const GATEWAY: &str = "qiskit-gateway-token-1";
const ADMIN: &str = "gateway-test-admin-1";
/// The users' own API tokens: what must never be stored.
const TOKENS: [&str; 2] = ["ibm-token-of-ada-7c1e9f", "ibm-token-of-bob-42d0aa"];
/// The gateway's per-job tokens (`ENV_JOB_GATEWAY_TOKEN`), secrets too.
const JOB_TOKEN: &str = "gw-job-token-";

const MAIN: &str = r#"
import json, os, sys, time
args = json.loads(os.environ.get("ENV_JOB_ARGUMENTS", "{}"))
if args.get("long"):
    print("long job started", flush=True)
    time.sleep(120)
for i in range(200):
    print(f"line {i} of {os.environ['ENV_JOB_ID_GATEWAY']}")
time.sleep(1.5)
"#;

/// Submits as the gateway does: a new client (`GET /api/version`), `submit_job` with
/// the working dir and env vars only. Job n of user u: `{u}-{n}`; args per job.
const SUBMIT: &str = r#"
import json, sys
from ray.job_submission import JobSubmissionClient
url, wd, plan = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ids = {}
for job in plan:
    env = {
        "QISKIT_IBM_TOKEN": job["token"],
        "QISKIT_IBM_INSTANCE": job["instance"],
        "ENV_JOB_GATEWAY_INSTANCE": job["instance"],
        "ENV_JOB_GATEWAY_TOKEN": job["job_token"],
        "ENV_JOB_ID_GATEWAY": job["name"],
        "ENV_JOB_ARGUMENTS": json.dumps(job["args"]),
        "DATA_PATH": "/data", "ARGUMENTS_PATH": "/data/args", "RESULTS_PATH": "/data/results",
        "QISKIT_IBM_RUNTIME_CUSTOM_CLIENT_APP_HEADER": "middleware_job_id/" + job["name"] + "," + job["job_token"] + "/",
    }
    client = JobSubmissionClient(url)
    ids[job["name"]] = client.submit_job(entrypoint="python main.py",
                                         runtime_env={"working_dir": wd, "env_vars": env})
if "stop" in sys.argv[4:]:
    # Stopped while it waits in fairshare: a new client, then stop_job.
    name = sys.argv[5]
    stopped = JobSubmissionClient(url).stop_job(ids[name])
    ids["_stopped"] = stopped
    ids["_status"] = JobSubmissionClient(url).get_job_status(ids[name]).value
print(json.dumps(ids))
"#;

/// The gateway's scheduler passes: `get_job_status` of every job until all ended;
/// the long job stopped once RUNNING (a new client); the logs of each job by a plain
/// GET with no header, found by the marker as the gateway finds them.
const FOLLOW: &str = r#"
import json, sys, time, requests
from ray.job_submission import JobSubmissionClient
url, ids, long_name = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
client = JobSubmissionClient(url)
status, stop_sent, deadline = {}, None, time.time() + 240
while time.time() < deadline:
    status = {n: client.get_job_status(i).value for n, i in ids.items()}
    if stop_sent is None and status[long_name] == "RUNNING":
        stop_sent = JobSubmissionClient(url).stop_job(ids[long_name])
    if all(s in ("SUCCEEDED", "FAILED", "STOPPED") for s in status.values()):
        break
    time.sleep(0.5)
logs = {}
for n, i in ids.items():
    r = requests.get(f"{url}/api/jobs/{i}/logs")
    raw = r.content
    marker = b'"logs": "'
    at = raw.find(marker)
    logs[n] = {"code": r.status_code, "at": at,
               "after": raw[at + len(marker):].decode() if at >= 0 else raw.decode(),
               "logs": r.json().get("logs") if r.status_code == 200 else None}
print(json.dumps({"status": status, "stop_sent": stop_sent, "logs": logs}))
"#;

/// Runs a Python script of the test venv with the gateway's environment (Ray's
/// token mode, so Ray's client sends `Authorization` by itself); its last line as JSON.
async fn python(dir: &Path, name: &str, script: &str, args: &[&str]) -> Value {
    let file = dir.join(name);
    std::fs::write(&file, script).unwrap();
    let bin = ray_bin().parent().unwrap().join("python");
    let out = tokio::time::timeout(
        Duration::from_secs(300),
        tokio::process::Command::new(&bin)
            .arg(&file)
            .args(args)
            .env("RAY_USAGE_STATS_ENABLED", "0")
            .env("RAY_AUTH_MODE", "token")
            .env("RAY_AUTH_TOKEN", GATEWAY)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("{name} did not finish in time"))
    .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{name} failed:\n{stdout}\n{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{name}: {e}: {stdout}\n{stderr}"))
}

/// fairshare as the guide configures it for the gateway, plus an admin token for the
/// test's own reads. Starts inside `[scheduler]` ([`Service::start_on`] writes it).
fn config() -> String {
    format!(
        "usage_half_life = \"0s\"\n\
         [secrets]\nruntime_env_keys = [\"KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=\"]\n\
         [auth]\ntrusted_networks = [\"127.0.0.1/32\"]\ntrusted_role = \"submitter\"\n\
         [[auth.tokens]]\nname = \"qiskit-gateway\"\ntoken = \"{GATEWAY}\"\nrole = \"submitter\"\n\
         [[auth.tokens]]\nname = \"ops\"\ntoken = \"{ADMIN}\"\nrole = \"admin\"\n\
         [ray_compat]\nuser_rules = [{{from = \"metadata\", key = \"fairshare.user\"}}, \
           {{from = \"env_var_hash\", name = \"QISKIT_IBM_TOKEN\", secret = \"a-kept-secret-of-32-bytes-000000\"}}]\n\
         group_rules = [{{from = \"env_var\", name = \"QISKIT_IBM_INSTANCE\"}}]\n\
         default_resources = {{cpu = 1}}\n"
    )
}

enum Store {
    Sqlite,
    /// A database created for the test, reached through the unix socket (the test
    /// runs in a network namespace with loopback only).
    Postgres(String),
}

const PG_SOCKET: &str = "host=/var/run/postgresql";

async fn pg_admin() -> sea_orm::DatabaseConnection {
    sea_orm::Database::connect(format!(
        "postgres://postgres@localhost/postgres?{PG_SOCKET}"
    ))
    .await
    .expect("PostgreSQL through /var/run/postgresql")
}

async fn the_gateway_unchanged_gets_fair_share_logs_stops_and_leaves_no_token(store: Store) {
    use sea_orm::ConnectionTrait;
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    let ray = ray_bin();
    let dir = tempfile::tempdir().unwrap();
    let head = RayHead::spawn(&ray, 2);
    let db_url = match &store {
        Store::Sqlite => format!("sqlite://{}/fairshare.db?mode=rwc", dir.path().display()),
        Store::Postgres(name) => {
            pg_admin()
                .await
                .execute_unprepared(&format!("CREATE DATABASE {name}"))
                .await
                .unwrap();
            format!("postgres://postgres@localhost/{name}?{PG_SOCKET}")
        }
    };
    let mut svc = Service::start_on(dir.path(), &head.dashboard, &config(), &db_url).await;
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {ADMIN}").parse().unwrap(),
    );
    svc.client = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap();
    let wd = dir.path().join("program");
    std::fs::create_dir(&wd).unwrap();
    std::fs::write(wd.join("main.py"), MAIN).unwrap();

    // While the head starts (nothing can be dispatched), ada submits 4 jobs, then bob
    // 3 (the last a long one, stopped once it runs); ada's last is stopped queued.
    let mut plan = Vec::new();
    for (u, (user, n)) in [("ada", 4), ("bob", 3)].into_iter().enumerate() {
        for i in 0..n {
            let long = user == "bob" && i == n - 1;
            plan.push(json!({"name": format!("{user}-{i}"), "token": TOKENS[u],
                "instance": format!("hub/{user}/main"), "job_token": format!("{JOB_TOKEN}{user}-{i}"),
                "args": {"long": long}}));
        }
    }
    let ids = python(
        dir.path(),
        "submit.py",
        SUBMIT,
        &[
            &svc.url,
            wd.to_str().unwrap(),
            &Value::from(plan).to_string(),
            "stop",
            "ada-3",
        ],
    )
    .await;
    assert_eq!(ids["_stopped"], true, "{ids}");
    assert_eq!(ids["_status"], "STOPPED", "{ids}");
    let mut ids = ids.as_object().unwrap().clone();
    ids.retain(|k, _| !k.starts_with('_'));
    head.wait_ready().await;
    let out = python(
        dir.path(),
        "follow.py",
        FOLLOW,
        &[&svc.url, &Value::from(ids.clone()).to_string(), "bob-2"],
    )
    .await;
    let log = svc.log();
    for (name, want) in [
        ("ada-0", "SUCCEEDED"),
        ("ada-1", "SUCCEEDED"),
        ("ada-2", "SUCCEEDED"),
        ("ada-3", "STOPPED"),
        ("bob-0", "SUCCEEDED"),
        ("bob-1", "SUCCEEDED"),
        ("bob-2", "STOPPED"),
    ] {
        assert_eq!(out["status"][name], want, "{name}: {out}\n{log}");
    }
    assert_eq!(out["stop_sent"], true, "{out}");
    // Logs: the plain GET found the marker, and the logs are complete.
    for name in ["ada-0", "ada-1", "ada-2", "bob-0", "bob-1"] {
        let l = &out["logs"][name];
        assert_eq!(l["code"], 200, "{name}: {l}");
        assert!(l["at"].as_i64().unwrap() >= 0, "{name}: no marker: {l}");
        // What follows the marker (what the gateway streams) is the whole log, Ray's
        // own lines first, then the program's, each line as JSON escapes it.
        let after = l["after"].as_str().unwrap();
        for i in [0, 199] {
            assert!(
                after.contains(&format!("line {i} of {name}\\n")),
                "{name}: {l}"
            );
        }
        let text = l["logs"].as_str().unwrap();
        for i in [0, 100, 199] {
            assert!(
                text.contains(&format!("line {i} of {name}\n")),
                "{name}: {text}"
            );
        }
    }

    // Fair share: two users (keyed hashes of their tokens), one group each; of the
    // first four dispatches two are each user's, where FIFO would give ada three.
    let jobs = all_terminal(&svc, 30).await;
    let users: std::collections::BTreeSet<&str> =
        jobs.iter().filter_map(|j| j["user"].as_str()).collect();
    assert_eq!(users.len(), 2, "{users:?}");
    assert!(users.iter().all(|u| u.starts_with("u-")), "{users:?}");
    let order = by_dispatch(&jobs);
    let first: Vec<&str> = order.iter().take(4).map(|(_, u, _)| u.as_str()).collect();
    for u in &users {
        assert_eq!(first.iter().filter(|x| *x == u).count(), 2, "{order:?}");
    }
    assert!(jobs
        .iter()
        .all(|j| j["group"].as_str().is_some_and(|g| g.starts_with("hub/"))));

    // No secret anywhere in the database.
    svc.kill();
    let dump: Vec<u8> = match &store {
        Store::Sqlite => {
            let mut all = Vec::new();
            for f in ["fairshare.db", "fairshare.db-wal", "fairshare.db-shm"] {
                all.extend(std::fs::read(dir.path().join(f)).unwrap_or_default());
            }
            assert!(all.len() > 4096, "the SQLite file was read");
            all
        }
        Store::Postgres(name) => {
            let out = std::process::Command::new("pg_dump")
                .args(["-h", "/var/run/postgresql", "-U", "postgres", name])
                .output()
                .expect("pg_dump");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        }
    };
    let text = String::from_utf8_lossy(&dump);
    assert!(text.contains("python main.py"), "the dump holds the jobs");
    for secret in TOKENS
        .iter()
        .map(|t| t.to_string())
        .chain(["ada-0", "bob-1"].iter().map(|n| format!("{JOB_TOKEN}{n}")))
    {
        assert!(!text.contains(&secret), "{secret} is in the database");
    }
    assert!(
        !text.contains("QISKIT_IBM_TOKEN"),
        "an env var name is in the database"
    );
    if let Store::Postgres(name) = &store {
        let _ = pg_admin()
            .await
            .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await;
    }
}

#[tokio::test]
#[cfg_attr(
    not(fairshare_ray),
    ignore = "no Ray: set FAIRSHARE_RAY_BIN (scripts/test does)"
)]
async fn the_qiskit_gateway_unchanged_through_fairshare_on_sqlite() {
    the_gateway_unchanged_gets_fair_share_logs_stops_and_leaves_no_token(Store::Sqlite).await;
}

#[tokio::test]
#[cfg_attr(
    any(not(fairshare_ray), not(fairshare_postgres)),
    ignore = "needs Ray (FAIRSHARE_RAY_BIN) and PostgreSQL (FAIRSHARE_TEST_POSTGRES_URL)"
)]
async fn the_qiskit_gateway_unchanged_through_fairshare_on_postgres() {
    let name = format!("fs_gw_{}", uuid::Uuid::new_v4().simple());
    the_gateway_unchanged_gets_fair_share_logs_stops_and_leaves_no_token(Store::Postgres(name))
        .await;
}
