//! Logging and spans with `tracing`: one subscriber, set up once, JSON for production
//! or pretty for a terminal (`telemetry.log_format`).

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
            .try_init(),
        LogFormat::Pretty => builder.compact().try_init(),
    };
}
