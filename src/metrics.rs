//! Prometheus metrics (DESIGN §8): names prefixed `fairshare_`, base units (seconds,
//! bytes, cores), counters end in `_total`.
//!
//! The metrics live in one process-wide [`prometheus::Registry`] built on first use,
//! as Prometheus client libraries conventionally do: they are write-only counters and
//! gauges, not scheduler state. `GET /metrics` renders [`render`].

use std::sync::LazyLock;

use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Label value under which users past `telemetry.per_user_metrics_max` are aggregated.
pub const OTHER_USERS: &str = "_other";

/// Why a dispatch did not reach Ray: the `reason` label of
/// `fairshare_dispatch_failures_total`, whose HELP lists every value with its meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DispatchFailure {
    /// Ray refused the job with a 4xx about the job itself; the job is FAILED.
    Rejected,
    /// The cluster did not take the job (its dashboard not ready, the retry budget
    /// spent on timeouts or 5xx, or the job's packages could not be sent); the job is
    /// back in its queue.
    NotReady,
}

impl DispatchFailure {
    /// Every reason, in the order the HELP text lists them.
    pub const ALL: [DispatchFailure; 2] = [DispatchFailure::Rejected, DispatchFailure::NotReady];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            DispatchFailure::Rejected => "rejected",
            DispatchFailure::NotReady => "not_ready",
        }
    }

    fn meaning(self) -> &'static str {
        match self {
            DispatchFailure::Rejected => "Ray refused the job, which is FAILED",
            DispatchFailure::NotReady => {
                "the cluster did not take it (not ready, retries spent, or packages not sent), \
                 so it is back in its queue"
            }
        }
    }

    fn help() -> String {
        let reasons: Vec<String> = Self::ALL
            .iter()
            .map(|r| format!("{}: {}", r.label(), r.meaning()))
            .collect();
        format!(
            "Dispatches that did not reach Ray, by reason ({}).",
            reasons.join("; ")
        )
    }
}

/// Every metric of the service.
pub struct Metrics {
    pub registry: Registry,
    pub jobs_submitted: IntCounter,
    pub jobs_dispatched: IntCounterVec,
    pub jobs_finished: IntCounterVec,
    pub dispatch_failures: IntCounterVec,
    pub queued_jobs: IntGaugeVec,
    pub running_jobs: IntGaugeVec,
    pub user_dominant_share: GaugeVec,
    pub user_weight: GaugeVec,
    pub user_fair_share: GaugeVec,
    /// Per user and resource (`cpu` cores, `gpu`, `memory_bytes`): what its outstanding
    /// jobs are charged (`charged="actual"`, what Ray's State API says they hold when
    /// `scheduler.charge = "actual"`) and what they declared (`charged="declared"`).
    pub user_allocation: GaugeVec,
    pub users_paused: IntGauge,
    /// Per group (DESIGN §2 "Groups"), under the same cap as the per-user gauges.
    pub group_dominant_share: GaugeVec,
    pub group_fair_share: GaugeVec,
    pub group_queued_jobs: IntGaugeVec,
    pub group_running_jobs: IntGaugeVec,
    pub queue_wait: Histogram,
    pub dispatch_latency: Histogram,
    pub cycle_duration: Histogram,
    pub cycles: IntCounter,
    pub grants: IntCounter,
    pub last_cycle: Gauge,
    pub cluster_capacity: GaugeVec,
    pub cluster_used: GaugeVec,
    pub cluster_free: GaugeVec,
    /// Per cluster and resource: what no job of this service holds (other tenants).
    pub cluster_used_by_others: GaugeVec,
    pub cluster_healthy: IntGaugeVec,
    pub ray_requests: IntCounterVec,
    /// Every HTTP request sent to a Ray dashboard (polls, submits, stops, lookups).
    pub ray_dashboard_requests: IntCounter,
    /// Notifications from attempts' watchers, by kind and what came of them.
    pub hints: IntCounterVec,
    /// Per cluster, attempts whose notifications arrived or were missed (issue 49).
    pub notifications: IntCounterVec,
    /// Per cluster, whether its notifications are known to arrive (1) or not (0).
    pub notifications_arriving: IntGaugeVec,
    pub db_errors: IntCounter,
    pub start_time: Gauge,
    pub build_info: IntGaugeVec,
    pub http_requests: HistogramVec,
    /// Jobs Ray kept PENDING past `monitor.pending_timeout`, stopped and queued again.
    pub pending_timeouts: IntCounter,
    /// Preemptions carried out (the stop sent), per preempted job's user (under
    /// `telemetry.per_user_metrics_max`, else `_other`).
    pub preemptions: IntCounterVec,
    /// Core-seconds the preempted jobs had run (cores × seconds since they started:
    /// the work lost), per user as `preemptions`.
    pub preempted_core_seconds: prometheus::CounterVec,
    /// Usage (issue 48): what jobs held, declared, counted when each hold ends (the
    /// job ends or goes back to the queue), per user (`resource` = `cpu` core-seconds,
    /// `gpu` GPU-seconds, `memory` byte-seconds, or a custom resource's name), users
    /// past `telemetry.per_user_metrics_max` as `_other`.
    pub user_usage: prometheus::CounterVec,
    /// The same per group path (`""` the root), under the same cap.
    pub group_usage: prometheus::CounterVec,
    /// Our jobs that Ray lists as PENDING now, per cluster.
    pub ray_pending_jobs: IntGaugeVec,
    /// Submissions committed per intake transaction (group commit).
    pub intake_batch_size: Histogram,
    /// Seconds from an intake transaction's first statement to its commit.
    pub intake_commit_seconds: Histogram,
    /// Intake transactions committed, by round trips to the database (label
    /// `round_trips`: "1" for a PostgreSQL batch committed in one message, "2"
    /// otherwise).
    pub intake_batches: IntCounterVec,
    /// From the monitor seeing a job finish to the POST of the next job the freed
    /// capacity went to, seconds.
    pub finish_to_dispatch: Histogram,
    /// 1 on the replica that leads (DESIGN §10), 0 on followers; labelled with the
    /// leader's replica id as this replica last read it.
    pub leader: IntGaugeVec,
    /// The fencing term of the current leadership, as this replica last read it.
    pub lease_term: IntGauge,
    /// Unix time (seconds) at which the current leader took the lease.
    pub leader_since: Gauge,
    /// Times this replica became leader.
    pub leader_takeovers: IntCounter,
    /// Writes `store::apply` refused because the writer's term was stale.
    pub fenced_writes: IntCounter,
    /// Webhook deliveries a receiver took (2xx), per webhook.
    pub webhook_deliveries: IntCounterVec,
    /// Webhook delivery attempts that failed (no answer, timeout, non-2xx), per webhook.
    pub webhook_failures: IntCounterVec,
    /// Events after a webhook's cursor, not yet settled (its outbox), per webhook.
    pub webhook_outbox_depth: IntGaugeVec,
}

fn build() -> Result<Metrics, prometheus::Error> {
    let registry = Registry::new();
    macro_rules! reg {
        ($m:expr) => {{
            let m = $m;
            registry.register(Box::new(m.clone()))?;
            m
        }};
    }
    let wait_buckets = vec![
        0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
        21600.0, 86400.0,
    ];
    let m = Metrics {
        jobs_submitted: reg!(IntCounter::new(
            "fairshare_jobs_submitted_total",
            "Jobs accepted by POST /v1/jobs (idempotent retries not counted)."
        )?),
        jobs_dispatched: reg!(IntCounterVec::new(
            Opts::new(
                "fairshare_jobs_dispatched_total",
                "Jobs accepted by a Ray cluster."
            ),
            &["cluster"]
        )?),
        jobs_finished: reg!(IntCounterVec::new(
            Opts::new(
                "fairshare_jobs_finished_total",
                "Jobs that reached a terminal status."
            ),
            &["status"]
        )?),
        dispatch_failures: reg!(IntCounterVec::new(
            Opts::new(
                "fairshare_dispatch_failures_total",
                DispatchFailure::help()
            ),
            &["cluster", "reason"]
        )?),
        queued_jobs: reg!(IntGaugeVec::new(
            Opts::new("fairshare_queued_jobs", "QUEUED jobs per user."),
            &["user"]
        )?),
        running_jobs: reg!(IntGaugeVec::new(
            Opts::new(
                "fairshare_running_jobs",
                "Outstanding (DISPATCHING, PENDING, RUNNING) jobs per user."
            ),
            &["user"]
        )?),
        user_dominant_share: reg!(GaugeVec::new(
            Opts::new(
                "fairshare_user_dominant_share",
                "Dominant share of the user's allocation (0..1)."
            ),
            &["user"]
        )?),
        user_weight: reg!(GaugeVec::new(
            Opts::new("fairshare_user_weight", "Fair-share weight of the user."),
            &["user"]
        )?),
        user_fair_share: reg!(GaugeVec::new(
            Opts::new(
                "fairshare_user_fair_share",
                "Weighted fair share of the user (0..1): its weight over the summed weights of the users with work; with groups, its group's fair share divided among the group's users and subgroups by weight."
            ),
            &["user"]
        )?),
        group_dominant_share: reg!(GaugeVec::new(
            Opts::new(
                "fairshare_group_dominant_share",
                "Dominant share of the summed allocation of the users under the group, subgroups included (0..1); groups past telemetry.per_user_metrics_max in path order are not shown."
            ),
            &["group"]
        )?),
        group_fair_share: reg!(GaugeVec::new(
            Opts::new(
                "fairshare_group_fair_share",
                "Weighted fair share of the group (0..1): the capacity divided by weight among the root's groups and users with work, and each group's part among its children the same way."
            ),
            &["group"]
        )?),
        group_queued_jobs: reg!(IntGaugeVec::new(
            Opts::new(
                "fairshare_group_queued_jobs",
                "QUEUED jobs of the users under the group, subgroups included (groups past telemetry.per_user_metrics_max in path order summed as _other)."
            ),
            &["group"]
        )?),
        group_running_jobs: reg!(IntGaugeVec::new(
            Opts::new(
                "fairshare_group_running_jobs",
                "Outstanding (DISPATCHING, PENDING, RUNNING) jobs of the users under the group, subgroups included (groups past telemetry.per_user_metrics_max in path order summed as _other)."
            ),
            &["group"]
        )?),
        user_allocation: reg!(GaugeVec::new(
            Opts::new(
                "fairshare_user_allocation",
                "What the user's outstanding jobs hold per resource (cores, GPUs, bytes): charged=\"actual\" is what fair share charges (Ray's State API with scheduler.charge = actual), charged=\"declared\" what the jobs declared."
            ),
            &["user", "resource", "charged"]
        )?),
        users_paused: reg!(IntGauge::new(
            "fairshare_users_paused",
            "Users currently paused."
        )?),
        queue_wait: reg!(Histogram::with_opts(
            HistogramOpts::new("fairshare_queue_wait_seconds", "Time from submit to grant.")
                .buckets(wait_buckets)
        )?),
        dispatch_latency: reg!(Histogram::with_opts(
            HistogramOpts::new(
                "fairshare_dispatch_latency_seconds",
                "Time from grant to Ray's answer to the submit."
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0
            ])
        )?),
        cycle_duration: reg!(Histogram::with_opts(
            HistogramOpts::new(
                "fairshare_cycle_duration_seconds",
                "Duration of one scheduling cycle."
            )
            .buckets(vec![
                0.00001, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0
            ])
        )?),
        cycles: reg!(IntCounter::new(
            "fairshare_cycles_total",
            "Scheduling cycles run."
        )?),
        grants: reg!(IntCounter::new(
            "fairshare_grants_total",
            "Jobs granted by scheduling cycles."
        )?),
        last_cycle: reg!(Gauge::new(
            "fairshare_last_cycle_timestamp_seconds",
            "Unix time of the last scheduling cycle."
        )?),
        cluster_capacity: reg!(GaugeVec::new(
            Opts::new(
                "fairshare_cluster_capacity",
                "Total capacity per resource (cores, GPUs, bytes)."
            ),
            &["cluster", "resource"]
        )?),
        cluster_used: reg!(GaugeVec::new(
            Opts::new(
                "fairshare_cluster_used",
                "Used capacity per resource (cores, GPUs, bytes): Ray's report plus this service's jobs it does not show yet, at least what this service's outstanding jobs hold."
            ),
            &["cluster", "resource"]
        )?),
        cluster_free: reg!(GaugeVec::new(
            Opts::new("fairshare_cluster_free", "Free capacity per resource."),
            &["cluster", "resource"]
        )?),
        cluster_used_by_others: reg!(GaugeVec::new(
            Opts::new(
                "fairshare_cluster_used_by_others",
                "Capacity per resource (cores, GPUs, bytes) that no job of this service holds: other tenants."
            ),
            &["cluster", "resource"]
        )?),
        cluster_healthy: reg!(IntGaugeVec::new(
            Opts::new(
                "fairshare_cluster_healthy",
                "1 when the cluster answers, else 0."
            ),
            &["cluster"]
        )?),
        ray_requests: reg!(IntCounterVec::new(
            Opts::new(
                "fairshare_ray_requests_total",
                "Requests to Ray by endpoint and outcome."
            ),
            &["cluster", "endpoint", "outcome"]
        )?),
        ray_dashboard_requests: reg!(IntCounter::new(
            "fairshare_ray_dashboard_requests_total",
            "HTTP requests sent to Ray dashboards, every endpoint (polls, submits, stops, lookups)."
        )?),
        hints: reg!(IntCounterVec::new(
            Opts::new(
                "fairshare_attempt_hints_total",
                "Notifications from attempts' watchers by kind (started, ended) and outcome \
                 (checked: Ray was asked at once; ignored: not an attempt followed now; \
                 forged: a bad signature; forwarded: sent on to the leader; deferred: \
                 arrived while a check of the same attempt ran, checked after it; missing: \
                 an attempt Ray ran for 500 ms, or ended, announced nothing, so it is \
                 polled at poll_interval)."
            ),
            &["kind", "outcome"]
        )?),
        notifications: reg!(IntCounterVec::new(
            Opts::new(
                "fairshare_notifications_total",
                "Attempts dispatched behind a watcher, per cluster, by whether the \
                 watcher's notification reached this service in time (received), the \
                 poll found the attempt running for 500 ms or ended without one \
                 (missed), or it arrived after that (late; each attempt counts once). \
                 After a miss a cluster is polled at monitor.poll_interval until 3 \
                 attempts in a row are received."
            ),
            &["cluster", "outcome"]
        )?),
        notifications_arriving: reg!(IntGaugeVec::new(
            Opts::new(
                "fairshare_notifications_arriving",
                "1 while the end-of-job notifications of a cluster's attempts are known \
                 to arrive (its poll may run at monitor.idle_poll_interval), 0 while none \
                 has arrived yet or the last was missed (polled at poll_interval)."
            ),
            &["cluster"]
        )?),
        db_errors: reg!(IntCounter::new(
            "fairshare_db_errors_total",
            "Database errors."
        )?),
        start_time: reg!(Gauge::new(
            "fairshare_start_time_seconds",
            "Unix time at which the process started."
        )?),
        build_info: reg!(IntGaugeVec::new(
            Opts::new(
                "fairshare_build_info",
                "Always 1; labels carry the version."
            ),
            &["version"]
        )?),
        http_requests: reg!(HistogramVec::new(
            HistogramOpts::new(
                "fairshare_http_request_duration_seconds",
                "HTTP request durations (method: a standard method or `other`; route: the matched route pattern or `unmatched`)."
            )
            .buckets(vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0]),
            &["method", "route", "status"]
        )?),
        preemptions: reg!(IntCounterVec::new(
            Opts::new(
                "fairshare_preemptions_total",
                "Running jobs preempted (stopped in Ray and queued again at their place for a user below its fair share), per user of the preempted job (users past telemetry.per_user_metrics_max as _other)."
            ),
            &["user"]
        )?),
        preempted_core_seconds: reg!(prometheus::CounterVec::new(
            Opts::new(
                "fairshare_preempted_core_seconds_total",
                "Core-seconds preempted jobs had run when stopped (cores x seconds since they started: the work lost), per user as fairshare_preemptions_total."
            ),
            &["user"]
        )?),
        user_usage: reg!(prometheus::CounterVec::new(
            Opts::new(
                "fairshare_user_usage_total",
                "Resource-seconds the user's jobs held as declared (resource: cpu core-seconds, gpu GPU-seconds, memory byte-seconds, or a custom resource's name), counted when each hold ends (the job ends or goes back to the queue); users past telemetry.per_user_metrics_max as _other. GET /v1/usage has every range."
            ),
            &["user", "resource"]
        )?),
        group_usage: reg!(prometheus::CounterVec::new(
            Opts::new(
                "fairshare_group_usage_total",
                "fairshare_user_usage_total per group path (\"\" the root), groups past telemetry.per_user_metrics_max as _other."
            ),
            &["group", "resource"]
        )?),
        pending_timeouts: reg!(IntCounter::new(
            "fairshare_pending_timeouts_total",
            "Jobs Ray kept PENDING longer than monitor.pending_timeout; stopped there and queued again."
        )?),
        finish_to_dispatch: reg!(Histogram::with_opts(
            HistogramOpts::new(
                "fairshare_finish_to_dispatch_seconds",
                "From the monitor seeing a job finish to the POST to Ray of the next job its capacity went to."
            )
            .buckets(vec![0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0])
        )?),
        intake_batch_size: reg!(Histogram::with_opts(
            HistogramOpts::new(
                "fairshare_intake_batch_size",
                "Submissions committed per intake transaction (group commit)."
            )
            .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0])
        )?),
        intake_commit_seconds: reg!(Histogram::with_opts(
            HistogramOpts::new(
                "fairshare_intake_commit_seconds",
                "From an intake transaction's first statement to its commit (group commit)."
            )
            .buckets(vec![0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0])
        )?),
        intake_batches: reg!(IntCounterVec::new(
            Opts::new(
                "fairshare_intake_batches_total",
                "Intake transactions committed, by round trips to the database (1: a PostgreSQL batch with no stored key, no new user and room in every queue, sent as one message)."
            ),
            &["round_trips"]
        )?),
        ray_pending_jobs: reg!(IntGaugeVec::new(
            Opts::new(
                "fairshare_ray_pending_jobs",
                "This service's jobs that Ray lists as PENDING (accepted, waiting for resources)."
            ),
            &["cluster"]
        )?),
        leader: reg!(IntGaugeVec::new(
            Opts::new(
                "fairshare_leader",
                "1 if this replica leads (runs the arbiter, dispatcher and monitor), else 0; label: the leader's replica id."
            ),
            &["leader"]
        )?),
        lease_term: reg!(IntGauge::new(
            "fairshare_lease_term",
            "Fencing term of the current leadership (increments on every takeover)."
        )?),
        leader_since: reg!(Gauge::new(
            "fairshare_leader_since_seconds",
            "Unix time at which the current leader took the lease."
        )?),
        leader_takeovers: reg!(IntCounter::new(
            "fairshare_leader_takeovers_total",
            "Times this replica took the lease and ran recovery."
        )?),
        fenced_writes: reg!(IntCounter::new(
            "fairshare_fenced_writes_total",
            "Job status writes refused because the writer no longer held the lease term."
        )?),
        webhook_deliveries: reg!(IntCounterVec::new(
            Opts::new(
                "fairshare_webhook_deliveries_total",
                "Job events a webhook receiver accepted (2xx)."
            ),
            &["webhook"]
        )?),
        webhook_failures: reg!(IntCounterVec::new(
            Opts::new(
                "fairshare_webhook_failures_total",
                "Webhook delivery attempts that failed (unreachable, timeout, non-2xx); each is retried."
            ),
            &["webhook"]
        )?),
        webhook_outbox_depth: reg!(IntGaugeVec::new(
            Opts::new(
                "fairshare_webhook_outbox_depth",
                "Job events after a webhook's cursor not yet delivered or skipped by its filter."
            ),
            &["webhook"]
        )?),
        registry,
    };
    m.build_info
        .with_label_values(&[env!("CARGO_PKG_VERSION")])
        .set(1);
    m.start_time
        .set(chrono::Utc::now().timestamp_millis() as f64 / 1000.0);
    Ok(m)
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| match build() {
    Ok(m) => m,
    // Only reachable by a programming error (a duplicate or malformed name), which
    // the unit test below catches.
    Err(e) => panic!("metric definitions are invalid: {e}"),
});

/// The metrics.
pub fn get() -> &'static Metrics {
    &METRICS
}

/// Clears the gauges only the leader's actors keep up to date (queues, users, clusters,
/// last cycle), so a replica that stopped leading does not report stale state next to
/// the leader's (DESIGN §10).
pub fn clear_leader_gauges() {
    let m = get();
    m.queued_jobs.reset();
    m.running_jobs.reset();
    m.notifications_arriving.reset();
    m.user_dominant_share.reset();
    m.user_weight.reset();
    m.user_fair_share.reset();
    m.user_allocation.reset();
    m.users_paused.set(0);
    m.group_dominant_share.reset();
    m.group_fair_share.reset();
    m.group_queued_jobs.reset();
    m.group_running_jobs.reset();
    m.cluster_capacity.reset();
    m.cluster_used.reset();
    m.cluster_free.reset();
    m.cluster_used_by_others.reset();
    m.cluster_healthy.reset();
    m.ray_pending_jobs.reset();
    m.last_cycle.set(0.0);
}

/// Counts a database error.
pub fn db_error() {
    get().db_errors.inc();
}

impl Metrics {
    /// Counts what a lifecycle step names ([`crate::lifecycle::Metric`]); `cluster`
    /// labels dispatch counters.
    pub fn count(&self, metric: crate::lifecycle::Metric, cluster: Option<&str>) {
        use crate::lifecycle::Metric;
        let cluster = cluster.unwrap_or("");
        match metric {
            Metric::Dispatched => self.jobs_dispatched.with_label_values(&[cluster]).inc(),
            Metric::Finished(status) => self
                .jobs_finished
                .with_label_values(&[status.as_str()])
                .inc(),
            Metric::Requeued => self.dispatch_failed(cluster, DispatchFailure::NotReady),
            Metric::PendingTimeout => self.pending_timeouts.inc(),
        }
    }

    /// Counts a preemption of a job of user `label` (already bounded by the caller)
    /// that had run `core_seconds`.
    pub fn preempted(&self, label: &str, core_seconds: f64) {
        self.preemptions.with_label_values(&[label]).inc();
        self.preempted_core_seconds
            .with_label_values(&[label])
            .inc_by(core_seconds.max(0.0));
    }

    /// Counts a notification of `kind` with `outcome` (`fairshare_attempt_hints_total`).
    pub fn hint(&self, kind: &str, outcome: &str) {
        self.hints.with_label_values(&[kind, outcome]).inc();
    }

    /// Counts a dispatch to `cluster` that did not reach Ray.
    pub fn dispatch_failed(&self, cluster: &str, reason: DispatchFailure) {
        self.dispatch_failures
            .with_label_values(&[cluster, reason.label()])
            .inc();
    }

    /// The Prometheus text exposition of this registry.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let families = self.registry.gather();
        if let Err(e) = TextEncoder::new().encode(&families, &mut buf) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// How many distinct users (and groups) get a label of their own on the usage
/// counters: `telemetry.per_user_metrics_max`, set at start ([`set_usage_label_cap`]).
static USAGE_LABEL_CAP: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(100);

/// The users and groups that have a label of their own, first come first served.
static USAGE_LABELS: LazyLock<
    std::sync::Mutex<(
        std::collections::HashSet<String>,
        std::collections::HashSet<String>,
    )>,
> = LazyLock::new(Default::default);

/// Sets how many users and groups get their own label on the usage counters.
pub fn set_usage_label_cap(cap: usize) {
    USAGE_LABEL_CAP.store(cap, std::sync::atomic::Ordering::Relaxed);
}

fn bounded(set: &mut std::collections::HashSet<String>, id: &str) -> String {
    if set.contains(id) || set.len() < USAGE_LABEL_CAP.load(std::sync::atomic::Ordering::Relaxed) {
        set.insert(id.to_string());
        id.to_string()
    } else {
        OTHER_USERS.to_string()
    }
}

/// Counts committed usage (`fairshare_user_usage_total`, `fairshare_group_usage_total`).
pub(crate) fn usage(deltas: &crate::store::UsageDeltas) {
    let m = get();
    let Ok(mut labels) = USAGE_LABELS.lock() else {
        return;
    };
    for (key, sums) in deltas.hourly() {
        let user = bounded(&mut labels.0, &key.user);
        let group = bounded(&mut labels.1, &key.group);
        let add = |resource: &str, v: f64| {
            if v > 0.0 {
                m.user_usage.with_label_values(&[&user, resource]).inc_by(v);
                m.group_usage
                    .with_label_values(&[&group, resource])
                    .inc_by(v);
            }
        };
        add("cpu", sums.cpu_ms as f64 / 1000.0);
        add("gpu", sums.gpu_ms as f64 / 1000.0);
        add("memory", sums.memory_bs as f64);
        for (name, v) in &sums.custom {
            add(name, *v as f64 / 1000.0);
        }
    }
}

/// Counts what a lifecycle step names, in the process's registry.
pub fn count(metric: crate::lifecycle::Metric, cluster: Option<&str>) {
    get().count(metric, cluster);
}

/// The Prometheus text exposition of every metric of the process.
pub fn render() -> String {
    get().render()
}

#[cfg(test)]
mod tests {
    use entity::JobStatus;

    use crate::lifecycle::Metric;

    /// A registry of its own, so that the counts below are exact whatever other
    /// tests in this process do.
    #[test]
    fn lifecycle_metrics_count_exactly_what_the_steps_name() {
        let m = super::build().expect("valid metric definitions");
        m.count(Metric::Dispatched, Some("a"));
        m.count(Metric::Dispatched, Some("a"));
        m.count(Metric::Finished(JobStatus::Stopped), None);
        m.count(Metric::PendingTimeout, None);
        m.count(Metric::Requeued, Some("b"));
        let text = m.render();
        for line in [
            "fairshare_jobs_dispatched_total{cluster=\"a\"} 2",
            "fairshare_jobs_finished_total{status=\"STOPPED\"} 1",
            "fairshare_pending_timeouts_total 1",
            "fairshare_dispatch_failures_total{cluster=\"b\",reason=\"not_ready\"} 1",
            "fairshare_build_info{version=\"0.1.0\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
    }

    /// The HELP of `fairshare_dispatch_failures_total` names every `reason` the
    /// service emits (it once listed `gave_up`, never emitted, and not `not_ready`).
    #[test]
    fn dispatch_failure_help_lists_every_reason_emitted() {
        let m = super::build().expect("valid metric definitions");
        m.count(Metric::Requeued, Some("a"));
        m.dispatch_failed("a", super::DispatchFailure::Rejected);
        let text = m.render();
        let help = text
            .lines()
            .find(|l| l.starts_with("# HELP fairshare_dispatch_failures_total "))
            .expect("HELP line");
        let emitted: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("fairshare_dispatch_failures_total{"))
            .filter_map(|l| l.split("reason=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(emitted.len(), 2, "{text}");
        for reason in emitted {
            assert!(
                help.contains(&format!("{reason}: ")),
                "{reason} not in {help}"
            );
        }
        assert!(!help.contains("gave_up"), "{help}");
    }
}
