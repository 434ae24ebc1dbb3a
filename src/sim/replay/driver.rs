//! The replay's driver: submitting on schedule, following the jobs, the summary.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use anyhow::{bail, Context as _};
use chrono::{DateTime, Utc};
use indicatif::{ProgressBar, ProgressStyle};
use tokio::task::JoinSet;
use tokio::time::Instant;
use uuid::Uuid;

use super::*;
use crate::sim::swf::read_trace;

/// Counts shown by the progress bar.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Progress {
    pub(super) queued: usize,
    pub(super) starting: usize,
    pub(super) running: usize,
    pub(super) finished: usize,
    pub(super) not_ok: usize,
}

/// The replay's view of its jobs.
#[derive(Default)]
pub(super) struct Tracker {
    pub(super) jobs: HashMap<Uuid, JobRecord>,
}

impl Tracker {
    pub(super) fn track(&mut self, job: JobRecord) {
        // A poll may already have seen a newer state of it.
        let newer = match self.jobs.get(&job.id) {
            Some(old) => old.is_terminal() && !job.is_terminal(),
            None => false,
        };
        if !newer {
            self.jobs.insert(job.id, job);
        }
    }

    pub(super) fn update(&mut self, job: JobRecord) -> bool {
        match self.jobs.get_mut(&job.id) {
            Some(slot) => {
                if !slot.is_terminal() {
                    *slot = job;
                }
                true
            }
            None => false,
        }
    }

    pub(super) fn oldest_open(&self) -> Option<DateTime<Utc>> {
        self.jobs
            .values()
            .filter(|j| !j.is_terminal())
            .map(|j| j.submitted_at)
            .min()
    }

    pub(super) fn open_ids(&self) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = self
            .jobs
            .values()
            .filter(|j| !j.is_terminal())
            .map(|j| j.id)
            .collect();
        ids.sort();
        ids
    }

    pub(super) fn progress(&self) -> Progress {
        let mut p = Progress::default();
        for job in self.jobs.values() {
            match job.status.as_str() {
                "QUEUED" => p.queued += 1,
                "DISPATCHING" | "PENDING" => p.starting += 1,
                "RUNNING" => p.running += 1,
                "SUCCEEDED" => p.finished += 1,
                _ if job.is_terminal() => {
                    p.finished += 1;
                    p.not_ok += 1;
                }
                _ => {}
            }
        }
        p
    }

    /// Brings the open jobs up to date: pages through `GET /v1/jobs` (newest first)
    /// down to the oldest open job, then fetches open jobs missing from it one by one.
    /// Returns the number of requests made.
    pub(super) async fn poll(&mut self, api: &Api, tuning: &Tuning) -> anyhow::Result<usize> {
        let Some(oldest) = self.oldest_open() else {
            return Ok(0);
        };
        let mut requests = 0;
        let mut seen: HashSet<Uuid> = HashSet::new();
        let mut after: Option<Uuid> = None;
        loop {
            let path = match after {
                Some(a) => format!("/v1/jobs?limit={POLL_PAGE}&after={a}"),
                None => format!("/v1/jobs?limit={POLL_PAGE}"),
            };
            requests += 1;
            let page: JobPage = match api.get_json(&path).await? {
                Ok(page) => page,
                Err(status) => bail!("GET {path}: {status}"),
            };
            let last = page.jobs.last().map(|j| j.submitted_at);
            for job in page.jobs {
                let id = job.id;
                if self.update(job) {
                    seen.insert(id);
                }
            }
            match (page.next_after, last) {
                (Some(next), Some(last)) if last >= oldest => after = Some(next),
                _ => break,
            }
        }
        let missing: Vec<Uuid> = self
            .open_ids()
            .into_iter()
            .filter(|id| !seen.contains(id))
            .take(tuning.max_single_gets)
            .collect();
        for id in missing {
            requests += 1;
            match api.get_json::<JobRecord>(&format!("/v1/jobs/{id}")).await? {
                Ok(job) => {
                    self.update(job);
                }
                Err(404) => {
                    if let Some(job) = self.jobs.get_mut(&id) {
                        job.status = "LOST".to_string();
                        job.message = Some("the service no longer knows this job".into());
                    }
                }
                Err(_) => {}
            }
        }
        Ok(requests)
    }
}

/// Replays the trace described by `args` against the service and waits for its jobs.
///
/// Errors: invalid arguments, an unreadable trace, a service that refuses the token or
/// is not a fairshare service (401/403/404/405), or one that stays unreachable for
/// 2 minutes. Jobs that fail, are rejected or do not finish in time are counted in the
/// summary, not errors.
pub async fn replay(args: &ReplayArgs) -> anyhow::Result<ReplaySummary> {
    replay_tuned(args, &Tuning::default()).await
}

/// [`replay`], then prints the report to stdout and returns it.
pub async fn run_replay(args: &ReplayArgs) -> anyhow::Result<String> {
    let summary = replay(args).await?;
    print!("{}", summary.table);
    Ok(summary.table)
}

pub(super) fn new_bar(args: &ReplayArgs, total: usize) -> ProgressBar {
    if !args.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total as u64);
    // The message first and a bar that takes what is left: one line in 80 columns.
    let style = ProgressStyle::with_template(
        "{elapsed_precise} {pos}/{len} done, {msg} [{wide_bar:.cyan/blue}]",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar
}

pub(super) fn describe(p: &Progress, submitted: usize, planned: usize) -> String {
    let mut text = format!(
        "sent {submitted}/{planned}, queued {}, starting {}, running {}",
        p.queued, p.starting, p.running
    );
    if p.not_ok > 0 {
        let _ = write!(text, ", {} not succeeded", p.not_ok);
    }
    text
}

pub(super) async fn replay_tuned(
    args: &ReplayArgs,
    tuning: &Tuning,
) -> anyhow::Result<ReplaySummary> {
    args.validate()?;
    let api = Api::new(&args.server, args.token.clone(), tuning)?;
    let trace = read_trace(&args.trace)?;
    let stem = trace_stem(&args.trace);
    let plan = plan(&trace, &stem, args);
    let too_long = |j: &&PlannedJob| {
        let end = j.at_s + j.sleep_s;
        !end.is_finite() || end > MAX_REPLAY_S
    };
    if let Some(job) = plan.iter().find(too_long) {
        bail!(
            "--time-scale {} is too small: trace job {} would be submitted after {:.0} s and \
             sleep {:.0} s (at most {MAX_REPLAY_S} s in all)",
            args.time_scale,
            job.number,
            job.at_s,
            job.sleep_s
        );
    }
    if plan.is_empty() {
        bail!(
            "nothing to replay: the trace {} has {} jobs and --skip is {}",
            args.trace.display(),
            trace.jobs.len(),
            args.skip
        );
    }
    api.preflight().await?;
    let timeout = overall_timeout(&plan, args.max_cpu);
    let bar = new_bar(args, plan.len());
    let quiet_progress = args.progress && bar.is_hidden();

    let started = Instant::now();
    // A year past the longest accepted replay if the timeout is out of range.
    let deadline = started
        .checked_add(timeout)
        .unwrap_or(started + Duration::from_secs_f64(2.0 * MAX_REPLAY_S));
    let mut tracker = Tracker::default();
    let mut next = 0usize;
    let mut inflight: JoinSet<anyhow::Result<(usize, Submitted)>> = JoinSet::new();
    let mut summary = ReplaySummary::default();
    let mut rejections: Vec<String> = Vec::new();
    let mut max_lag_s: f64 = 0.0;
    let mut next_poll = started + tuning.poll_interval;
    let mut last_good_poll = started;
    let mut last_line = started;
    let mut timed_out = false;

    loop {
        let submit_at = plan
            .get(next)
            .filter(|_| inflight.len() < MAX_IN_FLIGHT_SUBMITS)
            .map(|j| started + Duration::from_secs_f64(j.at_s));
        tokio::select! {
            biased;
            Some(joined) = inflight.join_next(), if !inflight.is_empty() => {
                let (index, outcome) = joined.context("a submission task failed")??;
                let job = &plan[index];
                match outcome {
                    Submitted::Created(record) => tracker.track(record),
                    Submitted::Existing(record) => {
                        summary.already_submitted += 1;
                        tracker.track(record);
                    }
                    Submitted::Rejected { status, message } => {
                        summary.rejected += 1;
                        if rejections.len() < QUOTED_REJECTIONS {
                            rejections.push(format!(
                                "{} (trace job {}, user {}, {} cores): {status} {message}",
                                job.external_id, job.number, job.user, job.cpu
                            ));
                        }
                    }
                    Submitted::GaveUp(message) => {
                        summary.unsubmitted += 1;
                        bar.println(format!(
                            "replay: gave up submitting {}: {message}",
                            job.external_id
                        ));
                    }
                }
            }
            _ = tokio::time::sleep_until(submit_at.unwrap_or(next_poll)), if submit_at.is_some() => {
                let index = next;
                next += 1;
                let job = &plan[index];
                max_lag_s = max_lag_s.max(
                    Instant::now().duration_since(started).as_secs_f64() - job.at_s,
                );
                let body = serde_json::to_value(SubmitBody {
                    user: &job.user,
                    entrypoint: job.entrypoint(),
                    resources: Resources { cpu: job.cpu },
                    external_id: &job.external_id,
                    metadata: BTreeMap::from([
                        ("trace", stem.clone()),
                        ("trace_job", job.number.to_string()),
                    ]),
                })?;
                let api = api.clone();
                let tuning = tuning.clone();
                inflight.spawn(async move {
                    let outcome = api.submit(body, &tuning).await?;
                    Ok((index, outcome))
                });
            }
            _ = tokio::time::sleep_until(next_poll) => {
                let now = Instant::now();
                match tracker.poll(&api, tuning).await {
                    Ok(requests) => {
                        last_good_poll = Instant::now();
                        // About POLL_PAGE jobs per request: keep to ~4 requests a second.
                        let pause = tuning
                            .poll_interval
                            .max(Duration::from_millis(250) * requests as u32);
                        next_poll = Instant::now() + pause;
                    }
                    Err(e) => {
                        if now.duration_since(last_good_poll) > tuning.unreachable_after {
                            bar.abandon();
                            return Err(e.context(format!(
                                "the service at {} did not answer for {} s",
                                args.server,
                                tuning.unreachable_after.as_secs()
                            )));
                        }
                        bar.println(format!("replay: poll failed (will retry): {e:#}"));
                        next_poll = Instant::now() + tuning.poll_interval;
                    }
                }
                let progress = tracker.progress();
                bar.set_position(progress.finished as u64);
                bar.set_message(describe(&progress, next, plan.len()));
                if quiet_progress && now.duration_since(last_line) >= Duration::from_secs(10) {
                    last_line = now;
                    // Not `eprintln!`, which panics when stderr cannot be written.
                    let _ = writeln!(
                        std::io::stderr(),
                        "replay: {:.0} s: {}/{} done, {}",
                        now.duration_since(started).as_secs_f64(),
                        progress.finished,
                        plan.len(),
                        describe(&progress, next, plan.len())
                    );
                }
                if Instant::now() >= deadline {
                    timed_out = true;
                }
            }
        }
        let all_sent = next == plan.len() && inflight.is_empty();
        if (all_sent && tracker.oldest_open().is_none()) || timed_out {
            break;
        }
    }
    bar.finish_and_clear();
    inflight.abort_all();

    let records: Vec<JobRecord> = tracker.jobs.into_values().collect();
    summary.jobs = records.len();
    for job in &records {
        match job.status.as_str() {
            "SUCCEEDED" => summary.succeeded += 1,
            "FAILED" => summary.failed += 1,
            "STOPPED" => summary.stopped += 1,
            _ => summary.unfinished += 1,
        }
    }
    summary.unsubmitted += plan.len().saturating_sub(next);
    summary.wall_s = started.elapsed().as_secs_f64();

    let mut text = String::new();
    let _ = writeln!(
        text,
        "replay of {} jobs [{}, {}): time scale {} trace s per real s, cpu scale {} cores \
         per processor",
        args.trace.display(),
        args.skip,
        args.skip + plan.len(),
        args.time_scale,
        args.cpu_scale,
    );
    let _ = writeln!(
        text,
        "{} jobs followed ({} submitted by an earlier run), {} rejected, {} not submitted; \
         wall time {:.1} s; submissions at most {:.1} s behind schedule",
        summary.jobs,
        summary.already_submitted,
        summary.rejected,
        summary.unsubmitted,
        summary.wall_s,
        max_lag_s.max(0.0),
    );
    for r in &rejections {
        let _ = writeln!(text, "  rejected: {r}");
    }
    if summary.rejected > rejections.len() {
        let _ = writeln!(
            text,
            "  ... and {} more rejected",
            summary.rejected - rejections.len()
        );
    }
    if timed_out {
        let _ = writeln!(
            text,
            "timed out after {:.0} s with {} jobs unfinished",
            timeout.as_secs_f64(),
            summary.unfinished
        );
    }
    text.push_str(&render_table(&records));
    match api.share_context().await {
        Some(context) if context.capacity_cpu > 0.0 => {
            text.push_str(&render_share_table(&records, &context));
            text.push_str(&render_alternatives(&records, &context));
        }
        _ => {
            let _ = writeln!(
                text,
                "(no share table: GET /v1/scheduler gave no healthy cluster capacity)"
            );
        }
    }
    let _ = writeln!(
        text,
        "(times are real seconds; × {} for trace seconds)",
        args.time_scale
    );
    summary.table = text;
    Ok(summary)
}
