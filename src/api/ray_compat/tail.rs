//! `GET /api/jobs/{id}/logs/tail`: the websocket Ray's `tail_job_logs` (and `ray job
//! submit` without `--no-wait`, `ray job logs --follow`) reads. As Ray does, the
//! server sends text frames of new log output and closes the socket normally once the
//! job has ended and its last output is sent.
//!
//! While the job waits here nothing is sent; once Ray has it, the job's log is fetched
//! from its cluster every [`POLL`] and what is new is sent. A job that goes back to
//! the queue and runs again as a new Ray attempt continues with that attempt's log.

use std::time::Duration;

use actix_web::{web, HttpRequest, HttpResponse};
use actix_ws::{CloseCode, CloseReason, Message};
use futures_util::StreamExt;
use uuid::Uuid;

use super::jobs::{find, ray_logs};
use crate::api::{ApiError, AppState};
use crate::config::Role;

/// How often the job's log is fetched from Ray while the socket is open. Ray's own
/// tail follows the file; 500 ms keeps a human watching and costs one request.
pub const POLL: Duration = Duration::from_millis(500);

/// Upgrades to a websocket and follows the job's log (module docs).
///
/// Errors (before the upgrade): 401/403, 404 no such job.
pub async fn tail(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
    body: web::Payload,
) -> Result<HttpResponse, super::pyjson::RayError> {
    let who = state.auth.identify(&req, Role::Submitter, "read logs")?;
    let j = find(&state, &who, &id).await?;
    let (response, session, stream) = actix_ws::handle(&req, body)
        .map_err(|e| ApiError::invalid("(headers)", format!("not a websocket request: {e}")))?;
    let state = state.into_inner();
    // Answers pings and notices the client going away.
    let mut pong = session.clone();
    let (gone_tx, gone_rx) = tokio::sync::oneshot::channel::<()>();
    actix_web::rt::spawn(async move {
        let mut stream = stream.max_frame_size(64 * 1024);
        while let Some(Ok(msg)) = stream.next().await {
            match msg {
                Message::Ping(bytes) if pong.pong(&bytes).await.is_err() => break,
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = gone_tx.send(());
    });
    actix_web::rt::spawn(follow(state, j.id, session, gone_rx));
    Ok(response)
}

/// Sends the job's new log output until the job ends (then closes normally), the job
/// is deleted, or the client goes away.
async fn follow(
    state: std::sync::Arc<AppState>,
    id: Uuid,
    mut session: actix_ws::Session,
    mut gone: tokio::sync::oneshot::Receiver<()>,
) {
    // (Ray submission id, bytes of its log already sent).
    let mut sent: Option<(String, usize)> = None;
    let reason = loop {
        let j = match crate::store::get_job(&state.db, id).await {
            Ok(Some(j)) => j,
            Ok(None) => break "the job was deleted".to_string(),
            Err(e) => {
                tracing::warn!(job_id = %id, error = %e, "log tail: cannot read the job; retrying");
                if wait(&mut gone).await {
                    return;
                }
                continue;
            }
        };
        // Read before fetching: once it is terminal, this fetch has the last output.
        let ended = j.status.is_terminal();
        match ray_logs(&state, &j).await {
            Ok(logs) if !logs.is_empty() => {
                let sid = crate::lifecycle::current_submission_id(&j);
                let from = match &sent {
                    Some((s, n)) if *s == sid && logs.len() >= *n && logs.is_char_boundary(*n) => {
                        *n
                    }
                    _ => 0,
                };
                if logs.len() > from && session.text(logs[from..].to_string()).await.is_err() {
                    return;
                }
                sent = Some((sid, logs.len()));
            }
            Ok(_) => {}
            Err(e) if ended => break format!("the job ended; its last logs are unavailable: {e}"),
            Err(_) => {}
        }
        if ended {
            break format!("the job ended {}", j.status);
        }
        if wait(&mut gone).await {
            return;
        }
    };
    let close = CloseReason {
        code: CloseCode::Normal,
        description: Some(reason.chars().take(120).collect()),
    };
    let _ = session.close(Some(close)).await;
}

/// Waits one [`POLL`]; `true` when the client went away meanwhile.
async fn wait(gone: &mut tokio::sync::oneshot::Receiver<()>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(POLL) => false,
        _ = gone => true,
    }
}
