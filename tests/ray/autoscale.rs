//! Autoscaling Ray clusters (issue 44) in the Ray tests: Ray's own autoscaler with its
//! fake multi-node provider, started by [`RayHead::spawn_autoscaling`] (worker "nodes"
//! are extra raylets on this machine; the config is written into the head's temp dir;
//! the whole cluster is stopped by its process group on drop), and what the autoscaler
//! reports, read the way docs/ray.md ("Autoscaling clusters: what Ray reports") says:
//!
//! ```ignore
//! let head = RayHead::spawn_autoscaling(&ray_bin(), 0, &cpu2_workers(2));
//! head.wait_ready().await;
//! // ... submit (straight to Ray, or through a Service pointed at head.dashboard) ...
//! let v = view(&head).await; // v.alive_workers, v.pending_launches, v.resource_demand
//! ```
//!
//! Ray's autoscaler v1 (what `ray start` runs); its `GET /api/cluster_status` carries
//! the JSON read here. The smoke test below checks the harness itself with a job sent
//! straight to Ray (no fairshare): on a 0-CPU head, it brings a worker, runs on it,
//! and the worker is removed after the idle timeout.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::{eventually, ray_bin, RayHead};
use crate::ONE_HEAD_AT_A_TIME;

/// The issue's worker type: `cpu-2`, 2 CPUs, min 0, at most `max` nodes.
pub fn cpu2_workers(max: u32) -> Value {
    json!({"cpu-2": {"resources": {"CPU": 2}, "min_workers": 0, "max_workers": max}})
}

/// The autoscaler's view of an autoscaling head, at one moment.
#[derive(Debug, Default)]
pub struct View {
    /// Worker nodes ALIVE now (`GET /api/v0/nodes`, not the head).
    pub alive_workers: usize,
    /// Nodes the autoscaler has asked for and not yet seen up, per node type
    /// (`autoscalerReport.pendingLaunches`).
    pub pending_launches: BTreeMap<String, u64>,
    /// Nodes of each type alive as the autoscaler counts them, head included
    /// (`autoscalerReport.activeNodes`; trails `alive_workers` by a few seconds).
    pub active_nodes: BTreeMap<String, u64>,
    /// What waits inside Ray for resources: (shape, count)
    /// (`loadMetricsReport.resourceDemand`).
    pub resource_demand: Vec<(Value, u64)>,
}

fn counts(v: &Value) -> BTreeMap<String, u64> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, n)| Some((k.clone(), n.as_u64()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// Reads [`View`] from the head's dashboard.
pub async fn view(head: &RayHead) -> View {
    let client = head.client();
    let get = |path: &str| {
        let req = client.get(format!("{}{path}", head.dashboard));
        async move { req.send().await.ok()?.json::<Value>().await.ok() }
    };
    let mut v = View::default();
    if let Some(nodes) = get("/api/v0/nodes").await {
        v.alive_workers = nodes["data"]["result"]["result"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|n| n["state"] == "ALIVE" && n["is_head_node"] == false)
                    .count()
            })
            .unwrap_or(0);
    }
    if let Some(status) = get("/api/cluster_status").await {
        let cs = &status["data"]["clusterStatus"];
        v.pending_launches = counts(&cs["autoscalerReport"]["pendingLaunches"]);
        v.active_nodes = counts(&cs["autoscalerReport"]["activeNodes"]);
        v.resource_demand = cs["loadMetricsReport"]["resourceDemand"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|d| Some((d[0].clone(), d[1].as_u64()?)))
                    .collect()
            })
            .unwrap_or_default();
    }
    v
}

#[tokio::test]
#[cfg_attr(
    not(fairshare_ray),
    ignore = "no Ray: set FAIRSHARE_RAY_BIN (scripts/test does)"
)]
async fn a_job_straight_into_ray_on_a_zero_cpu_autoscaling_head_brings_a_worker_that_goes_when_idle(
) {
    let _one = ONE_HEAD_AT_A_TIME.lock().await;
    let head = RayHead::spawn_autoscaling(&ray_bin(), 0, &cpu2_workers(1));
    head.wait_ready().await;
    assert_eq!(view(&head).await.alive_workers, 0, "min_workers is 0");
    let r = head
        .client()
        .post(format!("{}/api/jobs/", head.dashboard))
        .json(
            &json!({"entrypoint": "sleep 2", "submission_id": "straight",
                      "entrypoint_num_cpus": 1}),
        )
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    // Ray sees the job as demand and asks for a node of the one type that fits.
    eventually(30, "a cpu-2 launch (or the worker already up)", || async {
        let v = view(&head).await;
        (v.pending_launches.get("cpu-2").is_some_and(|n| *n >= 1) || v.alive_workers == 1)
            .then_some(())
    })
    .await;
    eventually(90, "the job SUCCEEDED on the new worker", || async {
        head.jobs()
            .await
            .iter()
            .any(|(id, s)| id == "straight" && s == "SUCCEEDED")
            .then_some(())
    })
    .await;
    assert!(view(&head).await.alive_workers <= 1, "max_workers is 1");
    // Idle timeout 12 s, autoscaler update 1 s: gone well within 40 s.
    let idle_since = Instant::now();
    eventually(40, "the idle worker removed", || async {
        (view(&head).await.alive_workers == 0).then_some(())
    })
    .await;
    assert!(
        idle_since.elapsed() > Duration::from_secs(5),
        "a worker went before its idle timeout"
    );
}
