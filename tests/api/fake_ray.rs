//! An in-process fake Ray cluster (a wiremock responder with state), for what a real
//! Ray cannot produce on demand: another tenant's usage arriving at a chosen moment, a
//! jobs route that 404s while the dashboard starts, jobs held PENDING.
//!
//! It keeps Ray's rules that matter here (docs/ray.md): a job is PENDING until its CPUs are
//! free, then RUNNING; a stop of a PENDING job takes effect only when it would start;
//! a known `submission_id` is refused with Ray's 500 "already exists".

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::json;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

#[derive(Debug, Clone)]
pub struct FakeJob {
    pub status: &'static str,
    pub cpu: f64,
    pub stop_requested: bool,
    /// Polls left before a RUNNING job succeeds.
    pub runs_for: u32,
    /// Cores its driver's tasks hold while it runs, beyond its entrypoint's.
    pub tasks_cpu: f64,
    /// Custom resources its entrypoint reserves (`entrypoint_resources`).
    pub custom: BTreeMap<String, f64>,
}

#[derive(Debug, Default)]
pub struct State {
    pub total_cpu: f64,
    /// Custom resources of the cluster (a head started with `--resources`).
    pub custom_total: BTreeMap<String, f64>,
    /// CPUs used by other tenants.
    pub foreign_cpu: f64,
    /// Set `foreign_cpu` to this as the first submission arrives.
    pub foreign_on_first_submit: Option<f64>,
    /// Answer this many submissions with 404 "404: Not Found" (route not loaded).
    pub submit_404s: u32,
    /// Polls a RUNNING job takes to succeed.
    pub run_polls: u32,
    pub jobs: BTreeMap<String, FakeJob>,
    /// Submission ids in the order they were POSTed (accepted ones).
    pub submitted: Vec<String>,
    pub posts: u32,
    pub stops: Vec<String>,
    pub list_polls: u64,
    /// Most of our jobs RUNNING at once.
    pub max_running: usize,
    /// A loopback proxy in front of Ray that holds each `POST /api/jobs/` this long
    /// before Ray sees it (and answers only then).
    pub submit_hold: std::time::Duration,
    /// The proxy answers the submits with this status itself (after the hold); Ray
    /// never sees them.
    pub submit_status: Option<u16>,
    /// Submissions the proxy holds: (when Ray sees it, submission id, job).
    pub in_transit: Vec<(std::time::Instant, String, FakeJob)>,
    /// Every `POST /api/jobs/`'s submission id, in order (refused ones too).
    pub post_ids: Vec<String>,
    /// The entrypoint each submission id was POSTed with (the last one).
    pub entrypoints: BTreeMap<String, String>,
    /// The runtime_env each submission id was POSTed with (the last one).
    pub runtime_envs: BTreeMap<String, serde_json::Value>,
    /// Answer Ray's State API (`/api/v0/actors`, `/api/v0/tasks`); else 404 as an old
    /// dashboard would.
    pub state_api: bool,
    /// Cores the driver of each job submitted from now on starts tasks with.
    pub tasks_cpu: f64,
    /// Stops are answered and recorded but do not take effect (a stop that lands
    /// late); the test ends the job itself.
    pub ignore_stops: bool,
    /// Jobs whose `JobSupervisor` outlives them: once such a job ended, Ray lists it
    /// SUCCEEDED while its supervisor still holds its entrypoint's CPUs (in the State
    /// API and Ray's usage, and for Ray's own scheduling) until the test removes it
    /// from this set. Real Ray shows this for a moment after every driver exits.
    pub lingering: std::collections::BTreeSet<String>,
}

impl State {
    /// Submissions whose hold has passed reach Ray.
    fn arrive(&mut self) {
        let now = std::time::Instant::now();
        let (due, held): (Vec<_>, Vec<_>) = std::mem::take(&mut self.in_transit)
            .into_iter()
            .partition(|(at, _, _)| *at <= now);
        self.in_transit = held;
        for (_, sid, job) in due {
            self.jobs.insert(sid.clone(), job);
            self.submitted.push(sid);
        }
    }

    fn used(&self) -> f64 {
        self.foreign_cpu
            + self
                .jobs
                .values()
                .filter(|j| j.status == "RUNNING")
                .map(|j| j.cpu + j.tasks_cpu)
                .sum::<f64>()
            + self
                .lingering_supervisors()
                .map(|(_, j)| j.cpu)
                .sum::<f64>()
    }

    /// Ended jobs whose supervisor still holds their entrypoint's CPUs.
    fn lingering_supervisors(&self) -> impl Iterator<Item = (&String, &FakeJob)> {
        self.jobs
            .iter()
            .filter(|(id, j)| self.lingering.contains(*id) && j.status == "SUCCEEDED")
    }

    /// Custom resource `name` held by RUNNING jobs.
    fn used_custom(&self, name: &str) -> f64 {
        self.jobs
            .values()
            .filter(|j| j.status == "RUNNING")
            .filter_map(|j| j.custom.get(name))
            .sum()
    }

    /// Ray's scheduler: stopped jobs end, finished runs succeed, PENDING jobs start in
    /// submission order while their CPUs and custom resources are free.
    fn tick(&mut self) {
        for j in self.jobs.values_mut() {
            if j.status == "RUNNING" {
                if j.stop_requested {
                    j.status = "STOPPED";
                } else if j.runs_for == 0 {
                    j.status = "SUCCEEDED";
                } else {
                    j.runs_for -= 1;
                }
            }
        }
        for sid in self.submitted.clone() {
            let free = self.total_cpu - self.used();
            let custom_free: BTreeMap<String, f64> = self
                .custom_total
                .iter()
                .map(|(n, t)| (n.clone(), t - self.used_custom(n)))
                .collect();
            let Some(j) = self.jobs.get_mut(&sid) else {
                continue;
            };
            let custom_fits = j
                .custom
                .iter()
                .all(|(n, x)| *x <= custom_free.get(n).copied().unwrap_or(0.0) + 1e-9);
            if j.status == "PENDING" && j.cpu <= free + 1e-9 && custom_fits {
                j.status = if j.stop_requested {
                    "STOPPED"
                } else {
                    "RUNNING"
                };
            }
        }
        let running = self.jobs.values().filter(|j| j.status == "RUNNING").count();
        self.max_running = self.max_running.max(running);
    }
}

#[derive(Clone)]
pub struct FakeRay(pub Arc<Mutex<State>>);

impl Respond for FakeRay {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let mut s = self.0.lock().unwrap();
        s.arrive();
        let path = req.url.path().to_string();
        let post = req.method == wiremock::http::Method::POST;
        match (post, path.as_str()) {
            (false, "/api/cluster_status") => {
                let (used, total) = (s.used(), s.total_cpu);
                let mut usage = json!({"CPU": [used, total], "memory": [0, 8e9],
                    "node:127.0.0.1": [0.0, 1.0]});
                for (name, total) in &s.custom_total {
                    usage[name] = json!([s.used_custom(name), total]);
                }
                ResponseTemplate::new(200)
                    .set_body_json(json!({"result": true, "data": {"clusterStatus":
                    {"loadMetricsReport": {"usage": usage}}}}))
            }
            (false, "/api/jobs/") => {
                s.list_polls += 1;
                s.tick();
                let list: Vec<_> = s
                    .jobs
                    .iter()
                    .map(|(id, j)| {
                        json!({"submission_id": id, "status": j.status, "message": "",
                        "job_id": (j.status == "RUNNING").then(|| driver(id))})
                    })
                    .collect();
                ResponseTemplate::new(200).set_body_json(list)
            }
            (true, "/api/jobs/") => {
                s.posts += 1;
                let hold = s.submit_hold;
                let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap_or_default();
                let sid = body["submission_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                s.post_ids.push(sid.clone());
                if let Some(ep) = body["entrypoint"].as_str() {
                    s.entrypoints.insert(sid.clone(), ep.to_string());
                }
                s.runtime_envs
                    .insert(sid.clone(), body["runtime_env"].clone());
                if let Some(status) = s.submit_status {
                    return ResponseTemplate::new(status)
                        .set_body_string("proxy: upstream unavailable")
                        .set_delay(hold);
                }
                if !hold.is_zero() {
                    let in_transit = s.in_transit.iter().any(|(_, id, _)| *id == sid);
                    if s.jobs.contains_key(&sid) || in_transit {
                        return ResponseTemplate::new(500).set_body_string(format!(
                            "ValueError: Job with submission_id {sid} already exists. Please use a different submission_id."
                        )).set_delay(hold);
                    }
                    let cpu = body["entrypoint_num_cpus"].as_f64().unwrap_or(0.0);
                    let job = FakeJob {
                        status: "PENDING",
                        cpu,
                        stop_requested: false,
                        runs_for: s.run_polls,
                        tasks_cpu: s.tasks_cpu,
                        custom: custom_of(&body),
                    };
                    s.in_transit
                        .push((std::time::Instant::now() + hold, sid.clone(), job));
                    return ResponseTemplate::new(200)
                        .set_body_json(json!({"job_id": sid, "submission_id": sid}))
                        .set_delay(hold);
                }
                if s.submit_404s > 0 {
                    s.submit_404s -= 1;
                    return ResponseTemplate::new(404).set_body_string("404: Not Found");
                }
                if s.jobs.contains_key(&sid) {
                    return ResponseTemplate::new(500).set_body_string(format!(
                        "ValueError: Job with submission_id {sid} already exists. Please use a different submission_id."
                    ));
                }
                if let Some(f) = s.foreign_on_first_submit.take() {
                    s.foreign_cpu = f;
                }
                let cpu = body["entrypoint_num_cpus"].as_f64().unwrap_or(0.0);
                let runs_for = s.run_polls;
                let tasks_cpu = s.tasks_cpu;
                s.jobs.insert(
                    sid.clone(),
                    FakeJob {
                        status: "PENDING",
                        cpu,
                        stop_requested: false,
                        runs_for,
                        tasks_cpu,
                        custom: custom_of(&body),
                    },
                );
                s.submitted.push(sid.clone());
                ResponseTemplate::new(200)
                    .set_body_json(json!({"job_id": sid, "submission_id": sid}))
            }
            (false, "/api/v0/actors") if s.state_api => {
                let mut alive: Vec<_> = s
                    .jobs
                    .iter()
                    .filter(|(_, j)| j.status == "RUNNING")
                    .chain(s.lingering_supervisors())
                    .map(|(id, j)| {
                        json!({"name": format!("_ray_internal_job_actor_{id}"),
                        "job_id": "01000000", "state": "ALIVE", "class_name": "JobSupervisor",
                        "required_resources": {"CPU": j.cpu}})
                    })
                    .collect();
                if s.foreign_cpu > 0.0 {
                    alive.push(json!({"name": "", "job_id": "ff000000", "state": "ALIVE",
                        "class_name": "Other", "required_resources": {"CPU": s.foreign_cpu}}));
                }
                state_listing(alive)
            }
            (false, "/api/v0/tasks") if s.state_api => {
                let running: Vec<_> = s
                    .jobs
                    .iter()
                    .filter(|(_, j)| j.status == "RUNNING" && j.tasks_cpu > 0.0)
                    .map(|(id, j)| {
                        json!({"job_id": driver(id), "state": "RUNNING",
                        "type": "NORMAL_TASK", "required_resources": {"CPU": j.tasks_cpu}})
                    })
                    .collect();
                state_listing(running)
            }
            (true, p) if p.ends_with("/stop") => {
                let sid = p
                    .trim_start_matches("/api/jobs/")
                    .trim_end_matches("/stop")
                    .to_string();
                s.stops.push(sid.clone());
                let ignore = s.ignore_stops;
                match s.jobs.get_mut(&sid) {
                    Some(j) if ignore => {
                        let live = !matches!(j.status, "SUCCEEDED" | "FAILED" | "STOPPED");
                        ResponseTemplate::new(200).set_body_json(json!({"stopped": live}))
                    }
                    Some(j) => {
                        let live = !matches!(j.status, "SUCCEEDED" | "FAILED" | "STOPPED");
                        j.stop_requested = true;
                        ResponseTemplate::new(200).set_body_json(json!({"stopped": live}))
                    }
                    None => ResponseTemplate::new(404),
                }
            }
            (false, p) if p.starts_with("/api/jobs/") => {
                let sid = p.trim_start_matches("/api/jobs/").trim_end_matches("/logs");
                match s.jobs.get(sid) {
                    Some(j) if p.ends_with("/logs") => ResponseTemplate::new(200)
                        .set_body_json(json!({"logs": format!("{sid} {}\n", j.status)})),
                    Some(j) => ResponseTemplate::new(200)
                        .set_body_json(json!({"submission_id": sid, "status": j.status})),
                    None => ResponseTemplate::new(404)
                        .set_body_string(format!("Job {sid} does not exist")),
                }
            }
            _ => ResponseTemplate::new(404),
        }
    }
}

/// The `entrypoint_resources` of a submit body.
fn custom_of(body: &serde_json::Value) -> BTreeMap<String, f64> {
    serde_json::from_value(body["entrypoint_resources"].clone()).unwrap_or_default()
}

/// A driver job id for a submission id (Ray's are hex counters).
fn driver(sid: &str) -> String {
    format!("d-{sid}")
}

/// The State API's answer for a list.
fn state_listing(result: Vec<serde_json::Value>) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({"result": true, "msg": "",
        "data": {"result": {"total": result.len(), "num_after_truncation": result.len(),
        "result": result}}}))
}

/// Starts a fake cluster with `total_cpu` CPUs; returns the server and its state.
pub async fn start(
    total_cpu: f64,
    tweak: impl FnOnce(&mut State),
) -> (MockServer, Arc<Mutex<State>>) {
    let mut state = State {
        total_cpu,
        run_polls: 3,
        ..Default::default()
    };
    tweak(&mut state);
    let state = Arc::new(Mutex::new(state));
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(FakeRay(state.clone()))
        .mount(&server)
        .await;
    (server, state)
}
