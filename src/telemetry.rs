//! Logging and spans with `tracing`: one subscriber, set up once, JSON for production
//! or pretty for a terminal (`telemetry.log_format`).

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, EnvFilter};

use crate::config::{LogFormat, TelemetrySettings};

/// Installs the global subscriber. `RUST_LOG` wins over `telemetry.level`. sqlx's
/// per-statement logs are capped at WARN. Calling it twice is harmless (tests).
pub fn init(settings: &TelemetrySettings) {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| EnvFilter::try_new(v).ok())
        .or_else(|| EnvFilter::try_new(format!("{},sqlx=warn,sea_orm=warn", settings.level)).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match settings.log_format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .finish()
            .with(ClientFaults)
            .try_init(),
        LogFormat::Pretty => builder.compact().finish().with(ClientFaults).try_init(),
    };
}

/// The target under which [`ClientFaults`] logs what a client got wrong.
pub const CLIENT_FAULT_TARGET: &str = "fairshare::http::client";

/// actix-http logs every connection that ends in an error at ERROR ("stream error:
/// ..."), including requests a client malformed (bad headers, a URI too long, a reset
/// connection), so anyone could flood the error log. This layer turns those into a
/// `debug` event under [`CLIENT_FAULT_TARGET`] and drops the original; actix's errors
/// about the service's own faults (service, body, internal errors) stay ERROR.
pub struct ClientFaults;

impl<S: Subscriber> Layer<S> for ClientFaults {
    fn event_enabled(&self, event: &Event<'_>, _ctx: Context<'_, S>) -> bool {
        let meta = event.metadata();
        if *meta.level() != Level::ERROR || !meta.target().starts_with("actix_http::") {
            return true;
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        if !is_client_fault(&message.0) {
            return true;
        }
        tracing::debug!(target: CLIENT_FAULT_TARGET, fault = %message.0, "request refused: the client's fault");
        false
    }
}

/// Whether an actix-http error message is about the client's request or connection
/// (`DispatchError`'s parse, I/O and timeout variants).
pub fn is_client_fault(message: &str) -> bool {
    const CLIENT: [&str; 5] = [
        "request parse error",
        "I/O error",
        "request did not complete within the specified timeout",
        "connection shutdown timeout",
        "handler dropped payload before reading EOF",
    ];
    message
        .strip_prefix("stream error: ")
        .is_some_and(|m| CLIENT.iter().any(|c| m.starts_with(c)))
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_string();
        }
    }
}
