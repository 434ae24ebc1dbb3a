//! Webhook delivery (DESIGN §4, "Events"): every job transition is POSTed to each
//! `[[webhooks]]` receiver at least once, in event order (so in order per job).
//!
//! The outbox is `job_events` itself: each webhook has a cursor in `webhook_cursors`
//! (the last event it settled), created at start at the newest event. One task per
//! webhook, running only while this replica leads (so two replicas never deliver at
//! once), reads the events after the cursor (`events::Reader`), POSTs each one its
//! filter wants, retrying with exponential backoff until the receiver answers 2xx, and
//! moves the cursor past it (written once per batch read, at least every second). A restart, a failover or a receiver down for an hour
//! therefore loses nothing: delivery resumes at the cursor. An event delivered but not
//! yet recorded when the process dies is sent again, under the same delivery id.
//!
//! A request: `POST <url>`, `Content-Type: application/json`, the body a
//! [`JobEvent`], and headers `X-Fairshare-Delivery: <event id>` (the same on every
//! retry: receivers deduplicate by it), `X-Fairshare-Event: <to status>`,
//! `X-Fairshare-Webhook: <name>` and `X-Fairshare-Signature: t=<unix seconds>,v1=<hex>`
//! where the hex is HMAC-SHA256 with the webhook's secret of `"<t>.<body>"` (Stripe's
//! scheme; a receiver recomputes it and rejects old `t` to stop replays).

use std::time::Duration;

use backon::BackoffBuilder;
use sea_orm::DbErr;

use crate::config::{EventSettings, WebhookSettings};
use crate::events::Reader;
use crate::leadership::Leadership;
use crate::store::{self, Db, JobEvent};

/// The signature header.
pub const SIGNATURE_HEADER: &str = "X-Fairshare-Signature";
/// The delivery id header (the event id).
pub const DELIVERY_HEADER: &str = "X-Fairshare-Delivery";

/// `t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
pub fn signature(secret: &[u8], unix_seconds: i64, body: &[u8]) -> String {
    let t = unix_seconds.to_string();
    let mac = crate::mac::hmac_sha256(secret, &[t.as_bytes(), b".", body]);
    format!("t={t},v1={}", crate::mac::hex(&mac))
}

/// Starts one delivery task per configured webhook (each idles while this replica does
/// not lead).
pub fn start(db: Db, settings: &crate::Settings, leadership: Leadership) {
    for hook in &settings.webhooks {
        let w = Webhook {
            db: db.clone(),
            hook: hook.clone(),
            events: settings.events.clone(),
            leadership: leadership.clone(),
            http: reqwest::Client::builder()
                .timeout(settings.events.webhook_timeout)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default(),
        };
        actix_web::rt::spawn(w.run());
    }
}

struct Webhook {
    db: Db,
    hook: WebhookSettings,
    events: EventSettings,
    leadership: Leadership,
    http: reqwest::Client,
}

/// Why delivery paused.
#[derive(Debug, thiserror::Error)]
enum Paused {
    #[error("this replica no longer leads")]
    NotLeading,
    #[error("database error")]
    Db(#[from] DbErr),
}

impl Webhook {
    fn leading(&self) -> bool {
        self.leadership.scheduler().is_some()
    }

    async fn run(self) {
        loop {
            if !self.leading() {
                tokio::time::sleep(self.events.poll_interval).await;
                continue;
            }
            match self.deliver_while_leading().await {
                Ok(()) | Err(Paused::NotLeading) => {
                    // Only the leader's figure means anything (summing over pods).
                    crate::metrics::get()
                        .webhook_outbox_depth
                        .with_label_values(&[self.hook.name.as_str()])
                        .set(0);
                }
                Err(e) => {
                    tracing::warn!(webhook = %self.hook.name, error = %crate::error_chain(&e), "webhook delivery paused; resuming from its cursor");
                    tokio::time::sleep(self.events.webhook_retry_initial_backoff).await;
                }
            }
        }
    }

    /// Delivers from the stored cursor on, until this replica stops leading or the
    /// database fails.
    async fn deliver_while_leading(&self) -> Result<(), Paused> {
        let name = self.hook.name.as_str();
        let mut cursor = match store::webhook_cursor(&self.db, name).await? {
            Some(c) => c,
            None => {
                store::init_webhook_cursors(&self.db, std::slice::from_ref(&self.hook.name))
                    .await?;
                store::webhook_cursor(&self.db, name).await?.unwrap_or(0)
            }
        };
        let mut reader = Reader::new(self.db.clone(), cursor, &self.events);
        let depth = crate::metrics::get()
            .webhook_outbox_depth
            .with_label_values(&[name]);
        depth.set(store::count_events_after(&self.db, cursor).await? as i64);
        // `settled`: the last event delivered or skipped; written to the database
        // (`cursor`) before the reader waits for more and at least every second, not
        // after every event: one write per batch. A crash in between re-sends the
        // events since the last write, under the same delivery ids (at least once).
        let mut settled = cursor;
        let mut written_at = tokio::time::Instant::now();
        loop {
            if !self.leading() {
                return Err(Paused::NotLeading);
            }
            if settled > cursor
                && (reader.buffered() == 0 || written_at.elapsed() >= Duration::from_secs(1))
            {
                store::set_webhook_cursor(&self.db, name, settled).await?;
                cursor = settled;
                written_at = tokio::time::Instant::now();
                depth.set(store::count_events_after(&self.db, cursor).await? as i64);
            }
            let Some(event) = reader.next(Duration::from_secs(5)).await? else {
                depth.set(store::count_events_after(&self.db, cursor).await? as i64);
                continue;
            };
            if self
                .hook
                .events
                .as_ref()
                .is_none_or(|only| only.contains(&event.to))
            {
                self.deliver(&event, &depth, cursor).await?;
            }
            settled = event.id;
        }
    }

    /// POSTs `event` until the receiver answers 2xx (backing off between tries) or
    /// this replica stops leading.
    async fn deliver(
        &self,
        event: &JobEvent,
        depth: &prometheus::IntGauge,
        cursor: i64,
    ) -> Result<(), Paused> {
        let name = self.hook.name.as_str();
        let m = crate::metrics::get();
        let body = serde_json::to_vec(event).unwrap_or_default();
        let mut backoff = backon::ExponentialBuilder::default()
            .with_min_delay(self.events.webhook_retry_initial_backoff)
            .with_max_delay(self.events.webhook_retry_max_backoff)
            .with_jitter()
            .without_max_times()
            .build();
        let mut failures = 0u32;
        loop {
            match self.post(event, &body).await {
                Ok(()) => {
                    m.webhook_deliveries.with_label_values(&[name]).inc();
                    if failures > 0 {
                        tracing::info!(
                            webhook = name,
                            event_id = event.id,
                            failures,
                            "webhook receiver took the event after failures"
                        );
                    }
                    return Ok(());
                }
                Err(reason) => {
                    m.webhook_failures.with_label_values(&[name]).inc();
                    failures += 1;
                    let wait = backoff
                        .next()
                        .unwrap_or(self.events.webhook_retry_max_backoff);
                    tracing::warn!(webhook = name, url = %self.hook.url, event_id = event.id, failures, retry_in = ?wait, reason, "webhook delivery failed; retrying");
                    depth.set(store::count_events_after(&self.db, cursor).await? as i64);
                    tokio::time::sleep(wait).await;
                    if !self.leading() {
                        return Err(Paused::NotLeading);
                    }
                }
            }
        }
    }

    /// One POST; `Err` says why it did not count as delivered.
    async fn post(&self, event: &JobEvent, body: &[u8]) -> Result<(), String> {
        let t = chrono::Utc::now().timestamp();
        let res = self
            .http
            .post(&self.hook.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(DELIVERY_HEADER, event.id.to_string())
            .header("X-Fairshare-Event", event_name(event))
            .header("X-Fairshare-Webhook", self.hook.name.as_str())
            .header(
                SIGNATURE_HEADER,
                signature(self.hook.secret.as_bytes(), t, body),
            )
            .body(body.to_vec())
            .send()
            .await
            .map_err(|e| crate::error_chain(&e))?;
        if res.status().is_success() {
            Ok(())
        } else {
            Err(format!("receiver answered {}", res.status()))
        }
    }
}

fn event_name(e: &JobEvent) -> &'static str {
    use entity::JobStatus as S;
    if e.is_preemption() {
        return "job.preempted";
    }
    if e.is_stop_request() {
        return "job.stop_requested";
    }
    match e.to {
        S::Queued => "QUEUED",
        S::Admitted => "ADMITTED",
        S::Dispatching => "DISPATCHING",
        S::Pending => "PENDING",
        S::Running => "RUNNING",
        S::Succeeded => "SUCCEEDED",
        S::Failed => "FAILED",
        S::Stopped => "STOPPED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_hmac_sha256_of_timestamp_dot_body_in_hex() {
        // python3 -c 'import hmac,hashlib;print(hmac.new(b"0123456789abcdef",b"1700000000.{\"id\":1}",hashlib.sha256).hexdigest())'
        assert_eq!(
            signature(b"0123456789abcdef", 1_700_000_000, br#"{"id":1}"#),
            "t=1700000000,v1=4bcaced68dfea90a68df035b89cb7fb26692d899d32a1ccb1b0616cf48e4d1ed"
        );
    }

    /// A preemption's row (its detail starts as the lifecycle writes it) is
    /// `job.preempted`; every other row is named by its status.
    #[test]
    fn a_preemptions_row_is_named_job_preempted() {
        let mut e = JobEvent {
            id: 1,
            job_id: uuid::Uuid::nil(),
            user: "a".into(),
            external_id: None,
            from: Some(entity::JobStatus::Running),
            to: entity::JobStatus::Running,
            at: chrono::Utc::now(),
            message: Some(format!(
                "{} (core-seconds lost: 3)",
                crate::lifecycle::preempted_for(uuid::Uuid::nil(), "b")
            )),
            pool: None,
        };
        assert_eq!(event_name(&e), "job.preempted");
        e.message = Some("cancel requested; stop sent to Ray".into());
        assert_eq!(event_name(&e), "RUNNING");
    }
}
