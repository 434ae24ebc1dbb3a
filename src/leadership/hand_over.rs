//! The followers' hand-over (DESIGN §10): a follower's `NOTIFY` (a job submitted or
//! cancelled, a user changed) reaches the leader's `LISTEN` here and is handed to its
//! scheduler.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use super::{Inner, Leadership};
use crate::actors::Scheduler;
use crate::store::{self, Db};

/// `LISTEN`s for followers' changes and hands them to the local scheduler while this
/// replica leads. The `LISTEN` connection lives on a thread of its own (with its own
/// runtime, which must outlive it), forwarding payloads here; it reconnects after a
/// failure (notifications sent meanwhile are the catch-up's).
pub(super) async fn listen(me: Leadership) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let url = me.inner.settings.database.url.clone();
    let inner = me.inner.clone();
    let spawned = std::thread::Builder::new()
        .name("fairshare-listen".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(listen_thread(url, inner, tx));
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the LISTEN thread; the catch-up alone hands work over");
        return;
    }
    while let Some(payload) = rx.recv().await {
        if let Some(s) = me.scheduler() {
            handle_notification(&me.inner.db, &s, &payload).await;
        }
    }
}

async fn listen_thread(
    url: String,
    inner: Arc<Inner>,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
) {
    use sea_orm::sqlx::postgres::PgListener;
    while !inner.stopped.load(Ordering::SeqCst) && !tx.is_closed() {
        let mut listener = match PgListener::connect(&url).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(error = %e, "LISTEN: cannot connect; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if let Err(e) = listener.listen(store::NOTIFY_CHANNEL).await {
            tracing::debug!(error = %e, "LISTEN failed; retrying");
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        loop {
            if inner.stopped.load(Ordering::SeqCst) || tx.is_closed() {
                return;
            }
            let n = match tokio::time::timeout(Duration::from_secs(1), listener.try_recv()).await {
                Err(_) => continue,
                Ok(Ok(Some(n))) => n,
                Ok(Ok(None)) => {
                    tracing::debug!("LISTEN connection lost; reconnected");
                    continue;
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "LISTEN connection failed");
                    break;
                }
            };
            if tx.send(n.payload().to_string()).is_err() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn handle_notification(db: &Db, s: &Scheduler, payload: &str) {
    if let Some(id) = payload.strip_prefix("job:") {
        let Ok(id) = Uuid::parse_str(id) else {
            return;
        };
        match store::get_job(db, id).await {
            Ok(Some(j)) => s.remote_change(&j, true),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, job_id = %id, "cannot read a notified job"),
        }
    } else if let Some(hint) = payload.strip_prefix("hint:") {
        // A follower's `POST /v1/attempts/{sid}/{kind}`: checked here, with this
        // replica's key.
        let mut parts = hint.splitn(3, ':');
        let (Some(kind), Some(sid), Some(sig)) = (parts.next(), parts.next(), parts.next()) else {
            return;
        };
        let (Some(kind), Some((job_id, attempt))) = (
            crate::ray::notify::HintKind::parse(kind),
            crate::lifecycle::parse_submission_id(sid),
        ) else {
            return;
        };
        if s.hints().is_some_and(|h| h.verify(sid, kind, sig)) {
            s.hint(job_id, attempt, kind);
        } else {
            crate::metrics::get().hint(kind.as_str(), "forged");
        }
    } else if payload == "groups" {
        match store::list_groups(db).await {
            Ok(groups) => s.groups_changed(groups).await,
            Err(e) => tracing::warn!(error = %e, "cannot read the notified groups"),
        }
    } else if let Some(user) = payload.strip_prefix("user:") {
        match store::get_user(db, user).await {
            Ok(Some(u)) => s.user_changed(&u).await,
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, user, "cannot read a notified user"),
        }
    }
}
