//! The `fairshare` binary: parses the command line and hands over to the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fairshare::{store, telemetry, Application, Settings};

#[derive(Parser)]
#[command(
    name = "fairshare",
    version,
    about = "A fair-share job scheduler in front of Ray clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service (runs pending migrations first).
    Serve {
        /// A TOML file layered over the built-in defaults.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Run pending database migrations and exit.
    Migrate {
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

fn load(config: Option<&PathBuf>) -> Result<Settings, ExitCode> {
    Settings::load(config.map(|p| p.as_path())).map_err(|e| {
        eprintln!("fairshare: {e}");
        ExitCode::from(2)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config } => {
            let settings = match load(config.as_ref()) {
                Ok(s) => s,
                Err(code) => return code,
            };
            telemetry::init(&settings.telemetry);
            let result = actix_web::rt::System::new().block_on(async move {
                let app = Application::build(settings).await?;
                app.run_until_stopped().await?;
                anyhow::Ok(())
            });
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "fairshare stopped");
                    eprintln!("fairshare: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Migrate { config } => {
            let settings = match load(config.as_ref()) {
                Ok(s) => s,
                Err(code) => return code,
            };
            telemetry::init(&settings.telemetry);
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("fairshare: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match rt.block_on(async {
                let db = store::connect(&settings.database).await?;
                store::migrate(&db).await
            }) {
                Ok(()) => {
                    eprintln!("fairshare: migrations applied");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("fairshare: migration failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
