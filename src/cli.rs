//! The command line of the `fairshare` binary: `serve`, `migrate`, `simulate`, `replay`,
//! `trace`, `usage`.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::{store, telemetry, Application, Settings};
use clap::{Parser, Subcommand};

/// `eprintln!` without its panic when standard error cannot be written (a tester's
/// `2>/dev/full` ended `simulate` with exit 101 before its table): a message that
/// cannot be shown is dropped, and the exit code still says how the command went.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

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
    /// Replay an SWF trace in virtual time through the fair-share policy and baselines.
    Simulate(Box<SimulateCli>),
    /// Post an SWF trace's jobs to a running service at their scaled times and report.
    Replay(ReplayCli),
    /// Write a seeded synthetic SWF trace of a chosen shape (for simulate and replay).
    Trace(TraceCli),
    /// Ask a running service what was held per user, group, cluster or size
    /// (`GET /v1/usage`) and print it as a table, CSV or JSON.
    Usage(UsageCli),
}

/// `fairshare usage`.
#[derive(clap::Args)]
struct UsageCli {
    /// Base URL of the service, e.g. http://127.0.0.1:8080.
    #[arg(
        long,
        env = "FAIRSHARE_SERVER",
        default_value = "http://127.0.0.1:8080"
    )]
    server: String,
    /// Bearer token (or FAIRSHARE_TOKEN).
    #[arg(long, env = "FAIRSHARE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Start of the range, RFC 3339 (default: 30 days before --to).
    #[arg(long)]
    from: Option<String>,
    /// End of the range, RFC 3339, exclusive (default: now).
    #[arg(long)]
    to: Option<String>,
    /// user, group, cluster or size.
    #[arg(long, default_value = "user")]
    by: String,
    /// hour, day or month.
    #[arg(long, default_value = "day")]
    step: String,
    /// Only this user.
    #[arg(long)]
    user: Option<String>,
    /// table, csv or json.
    #[arg(long, default_value = "table")]
    format: String,
}

/// `fairshare trace`.
#[derive(clap::Args)]
// A negative value reaches its parser, which names the flag and the bound, instead
// of clap's "unexpected argument '-1'" (a tester's finding); flags that take words
// or non-integers (`-5m`, `-inf`), and integers (`-inf` is not a number to clap),
// allow hyphen values themselves.
#[command(allow_negative_numbers = true)]
struct TraceCli {
    /// zipf, heavy, equal, wide, bursty, mixed or weighted (see `sim::synth`).
    #[arg(long, default_value = "zipf")]
    shape: crate::sim::synth::Shape,
    /// Number of jobs.
    #[arg(long, allow_hyphen_values = true, value_parser = clap::value_parser!(u64).range(1..))]
    jobs: u64,
    /// Number of users, the population each batch's user is drawn from by the shape's
    /// activity: with few batches some draw no job (the trace's header and this
    /// command's message then say how many it has), so it may exceed --jobs.
    #[arg(long, allow_hyphen_values = true, value_parser = clap::value_parser!(u32).range(1..))]
    users: u32,
    /// Cores of the cluster the trace is made for (its MaxProcs).
    #[arg(long, allow_hyphen_values = true, value_parser = clap::value_parser!(u32).range(1..))]
    cores: u32,
    /// Offered load: core-seconds asked for / (cores × span).
    #[arg(long, allow_hyphen_values = true, default_value_t = crate::sim::synth::DEFAULT_LOAD)]
    load: f64,
    /// Seed of the random stream.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1)]
    seed: u64,
    /// Where to write the trace (.swf, or .swf.gz for gzip).
    #[arg(long)]
    out: PathBuf,
    /// Where to write the users' weights as JSON for `simulate --weights` (the
    /// weighted shape; default: beside the trace, NAME.weights.json).
    #[arg(long)]
    weights_out: Option<PathBuf>,
}

/// `fairshare replay`.
#[derive(clap::Args)]
// Negative values reach their parsers, as in `TraceCli`.
#[command(allow_negative_numbers = true)]
struct ReplayCli {
    /// SWF trace, plain or gzip (a name ending in .gz must be gzip).
    #[arg(long)]
    trace: PathBuf,
    /// Base URL of the service, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    server: String,
    /// Bearer token (or FAIRSHARE_TOKEN).
    #[arg(long, env = "FAIRSHARE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Trace seconds per real second (e.g. 1000).
    #[arg(long, allow_hyphen_values = true, default_value_t = 1.0)]
    time_scale: f64,
    /// Cores per trace processor (e.g. 0.01).
    #[arg(long, allow_hyphen_values = true, default_value_t = 1.0)]
    cpu_scale: f64,
    /// Replay at most N jobs.
    #[arg(long, allow_hyphen_values = true)]
    limit: Option<usize>,
    /// Skip the first N jobs.
    #[arg(long, allow_hyphen_values = true, default_value_t = 0)]
    skip: usize,
    /// Floor on a job's cores.
    #[arg(long, allow_hyphen_values = true, default_value_t = crate::sim::replay::DEFAULT_MIN_CPU)]
    min_cpu: f64,
    /// Cap on a job's cores (e.g. the cluster's size).
    #[arg(long, allow_hyphen_values = true)]
    max_cpu: Option<f64>,
    /// Floor on a job's scaled run time, seconds.
    #[arg(long, allow_hyphen_values = true, default_value_t = crate::sim::replay::DEFAULT_MIN_RUNTIME_S)]
    min_runtime: f64,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// `fairshare simulate`.
#[derive(clap::Args)]
// Negative values reach their parsers, as in `TraceCli`.
#[command(allow_negative_numbers = true)]
struct SimulateCli {
    /// SWF trace, plain or gzip (a name ending in .gz must be gzip).
    #[arg(long)]
    trace: PathBuf,
    /// Capacity in cores, at least 1 (default: the trace header's MaxProcs).
    #[arg(long, allow_hyphen_values = true, value_parser = clap::value_parser!(u32).range(1..))]
    cpus: Option<u32>,
    /// fairshare, fifo, gateway-loop, or an anchor: slurm, slurm-fairtree, kueue-afs,
    /// kueue-fair, armada, yunikorn (default: compare all nine).
    #[arg(long)]
    policy: Option<crate::sim::SimPolicy>,
    /// Half-life of decayed usage (fairshare policy; the anchors use their projects'
    /// own), e.g. "1h"; "0s" turns history off (default: the service's
    /// scheduler.usage_half_life).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::config::parse_bounded)]
    half_life: Option<std::time::Duration>,
    /// Starvation guard (fairshare policy), e.g. "5m"; "off" (or "none", "inf")
    /// disables it (no reservation) (default: the service's scheduler.starvation_guard).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::sim::run::parse_seconds_or_off)]
    starvation_guard: Option<f64>,
    /// Typical run times (geometric mean of recent jobs' run times) a head may wait
    /// before it gets the reservation, when shorter than the guard (fairshare policy);
    /// 0 turns this rule off, leaving the guard alone (default: the service's
    /// scheduler.starvation_runs).
    #[arg(long, allow_hyphen_values = true)]
    starvation_runs: Option<f64>,
    /// Strict fair-share order (fairshare policy): stop at the first head that does not
    /// fit.
    #[arg(long)]
    no_backfill: bool,
    /// Weight of the age term (fairshare policy), in dominant-share units (default:
    /// the service's scheduler.age_weight).
    #[arg(long, allow_hyphen_values = true)]
    age_weight: Option<f64>,
    /// Age at which the age term saturates (fairshare policy), e.g. "1day"; "0s" turns
    /// the age term off, as --age-weight 0 does and as scheduler.max_age = "0s" does in
    /// the service (default: the service's scheduler.max_age).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::config::parse_bounded)]
    max_age: Option<std::time::Duration>,
    /// Cap on each user's running jobs (fairshare policy), at least 1.
    #[arg(long, allow_hyphen_values = true, value_parser = clap::value_parser!(u32).range(1..))]
    max_running_jobs: Option<u32>,
    /// A JSON file holding an object of user -> weight, 1e-6 to 1e6 as in the service,
    /// each user once, e.g. {"u62": 2}.
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Only the first N jobs.
    #[arg(long, allow_hyphen_values = true)]
    limit: Option<usize>,
    /// Seed of the gateway-loop's arbitrary order and of the choice of preemptible
    /// jobs.
    #[arg(long, allow_hyphen_values = true, default_value_t = 42)]
    seed: u64,
    /// Which jobs may be preempted (fairshare, kueue-fair and armada): all, none, or
    /// a fraction such as 0.5 (a seeded choice of jobs).
    #[arg(long, allow_hyphen_values = true, default_value = "none")]
    preemptible: crate::sim::simulate::Preemptible,
    /// Groups of users: none, or swf (the trace's group field, 13; each group
    /// weight 1). Fairshare's order and every policy's fair shares (the measure)
    /// become hierarchical; the anchors' order stays flat (their hierarchies are not
    /// modelled).
    #[arg(long, default_value = "none")]
    groups: crate::sim::simulate::SimGroups,
    /// A head may preempt once it has waited this long (fairshare policy; kueue-fair and
    /// armada preempt by their own rules), e.g. "10m"; "off" (or "none", "inf") turns
    /// fairshare's preemption off (default: the service's preemption.after).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::sim::run::parse_seconds_or_off)]
    preempt_after: Option<f64>,
    /// Jobs that have run less than this are never preempted by fairshare, e.g. "2m"
    /// (default: the service's preemption.min_runtime).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::config::parse_bounded)]
    preempt_min_runtime: Option<std::time::Duration>,
    /// A job is preempted at most this many times by fairshare (default: the service's
    /// preemption.max_per_job).
    #[arg(long, allow_hyphen_values = true)]
    preempt_max_per_job: Option<u32>,
    /// At most this fraction of the capacity is preempted by fairshare per interval, 0 to 1; one
    /// head's victims may exceed it when nothing was preempted within the interval
    /// (so 0 does not turn its preemption off; --preempt-after off does) (default: the
    /// service's preemption.budget).
    #[arg(long, allow_hyphen_values = true)]
    preempt_budget: Option<f64>,
    /// The window of fairshare's preemption budget, e.g. "5m" (default: the service's
    /// preemption.interval).
    #[arg(long, allow_hyphen_values = true, value_parser = crate::config::parse_bounded)]
    preempt_interval: Option<std::time::Duration>,
    /// fairshare also preempts under the shortfall rule: true or false (default: the
    /// service's preemption.shortfall).
    #[arg(long)]
    preempt_shortfall: Option<bool>,
    /// Simulate an autoscaling Ray cluster instead of a fixed one (needs --node-type;
    /// not with --cpus): every policy fits jobs against the cluster's potential (head +
    /// each type's max × cores), a granted job starts only when a node that is up has
    /// room for it, the autoscaler launches the smallest type that holds each job that
    /// has none (up after --start-delay, up to the type's max), and a worker idle for
    /// --idle-timeout is removed (never below its min). Utilization is then of the
    /// cores alive.
    #[arg(long, requires = "node_type", conflicts_with = "cpus")]
    autoscale: bool,
    /// A worker node type of the autoscaling cluster, repeatable: "cpus=N,max=M" with
    /// optional "min=K" (default 0) and "name=TEXT" (default cpu-N), each key once, e.g.
    /// "cpus=32,min=1,max=54,name=worker" (KubeRay: a workerGroupSpecs item's num-cpus,
    /// minReplicas, maxReplicas).
    #[arg(long = "node-type", value_name = "SPEC", requires = "autoscale")]
    node_type: Vec<crate::sim::simulate::NodeType>,
    /// Cores of the autoscaling cluster's head, always up (default 0: KubeRay's
    /// recommended head that takes no work).
    #[arg(long, allow_hyphen_values = true, requires = "autoscale")]
    head_cpus: Option<u32>,
    /// Time from a node's launch to its being usable, e.g. "5m" (default 60s).
    #[arg(long, allow_hyphen_values = true, requires = "autoscale", value_parser = crate::config::parse_bounded)]
    start_delay: Option<std::time::Duration>,
    /// A worker with nothing on it this long is removed, never below its type's min,
    /// e.g. "10m" (default 60s, KubeRay's idleTimeoutSeconds).
    #[arg(long, allow_hyphen_values = true, requires = "autoscale", value_parser = crate::config::parse_bounded)]
    idle_timeout: Option<std::time::Duration>,
    /// Write every run's report as JSON.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Write an SVG of actual vs fair share over time.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// Writes `text` and a newline to standard output. A reader that has gone (`| head`)
/// is not an error: what it wanted was written, and the report file, if any, is
/// whole; any other failure (a full disk) is exit code 1 with the cause. `println!`
/// panicked in both cases (a tester's finding).
fn print_out(command: &str, text: &str) -> Result<(), ExitCode> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            say!("{command}: cannot write to standard output: {e}");
            Err(ExitCode::FAILURE)
        }
        _ => Ok(()),
    }
}

fn load(config: Option<&PathBuf>) -> Result<Settings, ExitCode> {
    Settings::load(config.map(|p| p.as_path())).map_err(|e| {
        say!("fairshare: {e}");
        ExitCode::from(2)
    })
}

/// `fairshare usage`: the report from the service, printed as asked; exit 1 when the
/// service refuses or cannot be reached (its message on standard error), 2 for a bad
/// `--format`.
fn usage_command(a: UsageCli) -> ExitCode {
    use std::io::Write as _;
    if !["table", "csv", "json"].contains(&a.format.as_str()) {
        say!("usage: --format must be table, csv or json");
        return ExitCode::from(2);
    }
    let Some(rt) = runtime("usage") else {
        return ExitCode::FAILURE;
    };
    let result: Result<String, String> = rt.block_on(async {
        let mut q: Vec<(&str, String)> = vec![("by", a.by.clone()), ("step", a.step.clone())];
        for (k, v) in [("from", &a.from), ("to", &a.to), ("user", &a.user)] {
            if let Some(v) = v {
                q.push((k, v.clone()));
            }
        }
        let url = format!("{}/v1/usage", a.server.trim_end_matches('/'));
        let mut req = reqwest::Client::new().get(&url).query(&q).header(
            "accept",
            if a.format == "csv" {
                "text/csv"
            } else {
                "application/json"
            },
        );
        if let Some(t) = &a.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.map_err(|e| format!("{url}: {e}"))?;
        let status = resp.status();
        let body = resp.text().await.map_err(|e| format!("{url}: {e}"))?;
        if !status.is_success() {
            return Err(format!("{url}: {status}: {body}"));
        }
        if a.format != "table" {
            return Ok(body);
        }
        let report: crate::api::usage::UsageReport =
            serde_json::from_str(&body).map_err(|e| format!("{url}: not a usage report: {e}"))?;
        Ok(usage_table(&report))
    });
    match result {
        Ok(text) => {
            let mut out = std::io::stdout();
            if out.write_all(text.as_bytes()).is_err() {
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            say!("usage: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A report as an aligned text table: core-hours, GPU-hours, GiB-hours held as
/// declared, core-hours actually held (Ray's State API), jobs ended
/// (succeeded/failed/stopped), the median and p90 wait, and last each custom
/// resource's hours held (`QPU=1.500`, in name order; `-` for none).
fn usage_table(r: &crate::api::usage::UsageReport) -> String {
    let mut lines = vec![format!(
        "# {} to {}, by {} per {}",
        r.from.to_rfc3339(),
        r.to.to_rfc3339(),
        r.by,
        r.step
    )];
    lines.push(
        format!(
            "{:<20} {:<24} {:>12} {:>10} {:>12} {:>12} {:>14} {:>9} {:>9}",
            "start",
            r.by,
            "core_hours",
            "gpu_hours",
            "GiB_hours",
            "actual_core_h",
            "ok/failed/stop",
            "wait_p50",
            "wait_p90",
        ) + " custom_hours",
    );
    let opt = |v: Option<i64>| v.map(|x| format!("{x}s")).unwrap_or_else(|| "-".into());
    for x in &r.rows {
        let key = if x.key.is_empty() {
            "(none)"
        } else {
            x.key.as_str()
        };
        lines.push(
            format!(
                "{:<20} {:<24} {:>12} {:>10} {:>12} {:>12} {:>14} {:>9} {:>9}",
                x.start.format("%Y-%m-%dT%H:%MZ"),
                key,
                hours(x.core_seconds),
                hours(x.gpu_seconds),
                hours(x.memory_byte_seconds / 1_073_741_824.0),
                hours(x.actual.core_seconds),
                format!("{}/{}/{}", x.jobs.succeeded, x.jobs.failed, x.jobs.stopped),
                opt(x.wait_seconds.p50),
                opt(x.wait_seconds.p90),
            ) + " "
                + &custom_hours(&x.custom_seconds),
        );
    }
    lines.join("\n") + "\n"
}

/// Seconds of something held as hours with three decimals; an amount above 0 that
/// would show as `0.000` (under about 1.8 s) shows as `<0.001`, so that a short job's use
/// is not read as none (a tester's finding: a 1-s job showed 0.000 core-hours).
fn hours(seconds: f64) -> String {
    let h = seconds / 3600.0;
    let shown = format!("{h:.3}");
    if h > 0.0 && shown == "0.000" {
        "<0.001".into()
    } else {
        shown
    }
}

/// Custom resource-seconds as hours, `name=hours` in name order, `-` for none.
fn custom_hours(seconds: &std::collections::BTreeMap<String, f64>) -> String {
    if seconds.is_empty() {
        return "-".into();
    }
    seconds
        .iter()
        .map(|(name, s)| format!("{name}={}", hours(*s)))
        .collect::<Vec<_>>()
        .join(",")
}

/// A single-threaded tokio runtime for the commands that need no actix System.
fn runtime(command: &str) -> Option<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| say!("{command}: {e}"))
        .ok()
}

/// Parses the command line and runs the command; the process's exit code.
pub fn run() -> ExitCode {
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
                    say!("fairshare: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Simulate(a) => {
            let mut args = crate::sim::SimulateArgs::new(a.trace);
            args.cpus = a.cpus;
            args.policy = a.policy;
            // Unset options keep the service's defaults (SimulateArgs::new).
            if let Some(h) = a.half_life {
                args.half_life_s = h.as_secs_f64();
            }
            if let Some(g) = a.starvation_guard {
                args.starvation_guard_s = g;
            }
            if let Some(r) = a.starvation_runs {
                args.starvation_runs = r;
            }
            args.backfill = !a.no_backfill;
            if let Some(w) = a.age_weight {
                args.age_weight = w;
            }
            if let Some(m) = a.max_age {
                args.max_age_s = m.as_secs_f64();
            }
            args.max_running_jobs = a.max_running_jobs;
            args.weights = a.weights;
            args.limit = a.limit;
            args.seed = a.seed;
            args.preemptible = a.preemptible;
            args.groups = a.groups;
            if let Some(v) = a.preempt_after {
                args.preemption.after = v;
            }
            if let Some(v) = a.preempt_min_runtime {
                args.preemption.min_runtime = v.as_secs_f64();
            }
            if let Some(v) = a.preempt_max_per_job {
                args.preemption.max_per_job = v;
            }
            if let Some(v) = a.preempt_budget {
                args.preemption.budget = v;
            }
            if let Some(v) = a.preempt_interval {
                args.preemption.interval = v.as_secs_f64();
            }
            if let Some(v) = a.preempt_shortfall {
                args.preemption.shortfall = v;
            }
            let fairshare_flags: Vec<&str> = [
                ("--half-life", a.half_life.is_some()),
                ("--starvation-guard", a.starvation_guard.is_some()),
                ("--starvation-runs", a.starvation_runs.is_some()),
                ("--no-backfill", a.no_backfill),
                ("--age-weight", a.age_weight.is_some()),
                ("--max-age", a.max_age.is_some()),
                ("--max-running-jobs", a.max_running_jobs.is_some()),
                ("--preempt-after", a.preempt_after.is_some()),
                ("--preempt-min-runtime", a.preempt_min_runtime.is_some()),
                ("--preempt-max-per-job", a.preempt_max_per_job.is_some()),
                ("--preempt-budget", a.preempt_budget.is_some()),
                ("--preempt-interval", a.preempt_interval.is_some()),
                ("--preempt-shortfall", a.preempt_shortfall.is_some()),
            ]
            .into_iter()
            .filter_map(|(flag, given)| given.then_some(flag))
            .collect();
            for note in crate::sim::run::ineffective(&args, &fairshare_flags) {
                say!("fairshare simulate: note: {note}");
            }
            if a.autoscale {
                use crate::sim::simulate::autoscale::{
                    DEFAULT_IDLE_TIMEOUT_S, DEFAULT_START_DELAY_S,
                };
                args.autoscale = Some(crate::sim::simulate::Autoscale {
                    head_cpus: a.head_cpus.unwrap_or(0),
                    node_types: a.node_type,
                    start_delay_s: a
                        .start_delay
                        .map_or(DEFAULT_START_DELAY_S, |d| d.as_secs_f64()),
                    idle_timeout_s: a
                        .idle_timeout
                        .map_or(DEFAULT_IDLE_TIMEOUT_S, |d| d.as_secs_f64()),
                });
            }
            args.report = a.report;
            args.plot = a.plot;
            let started = std::time::Instant::now();
            match crate::sim::run_simulate(&args) {
                Ok(text) => {
                    let printed = print_out("fairshare simulate", &text);
                    say!("simulated in {:.2} s", started.elapsed().as_secs_f64());
                    printed.map_or_else(|c| c, |()| ExitCode::SUCCESS)
                }
                Err(e) => {
                    say!("fairshare simulate: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Replay(a) => {
            let mut args = crate::sim::replay::ReplayArgs::new(a.trace, a.server);
            args.token = a.token;
            args.time_scale = a.time_scale;
            args.cpu_scale = a.cpu_scale;
            args.limit = a.limit;
            args.skip = a.skip;
            args.min_cpu = a.min_cpu;
            args.max_cpu = a.max_cpu;
            args.min_runtime_s = a.min_runtime;
            args.progress = !a.quiet;
            let Some(rt) = runtime("fairshare replay") else {
                return ExitCode::FAILURE;
            };
            match rt.block_on(crate::sim::replay::replay(&args)) {
                Ok(summary) => {
                    if let Err(code) = print_out("fairshare replay", &summary.table) {
                        code
                    } else if summary.all_succeeded() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    say!("fairshare replay: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Usage(a) => usage_command(a),
        Command::Trace(a) => match write_trace(&a) {
            Ok(text) => {
                say!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                say!("fairshare trace: {e}");
                ExitCode::from(2)
            }
        },
        Command::Migrate { config } => {
            let settings = match load(config.as_ref()) {
                Ok(s) => s,
                Err(code) => return code,
            };
            telemetry::init(&settings.telemetry);
            let Some(rt) = runtime("fairshare") else {
                return ExitCode::FAILURE;
            };
            match rt.block_on(async {
                let db = store::connect(&settings.database).await?;
                store::migrate(&db).await
            }) {
                Ok(()) => {
                    say!("fairshare: migrations applied");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    say!("fairshare: migration failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// `fairshare trace`: generates the trace and writes it (and its weights, if any);
/// what was written.
fn write_trace(a: &TraceCli) -> anyhow::Result<String> {
    use crate::sim::synth::{generate, write_swf_file, SynthSpec};
    let spec = SynthSpec {
        load: a.load,
        ..SynthSpec::new(a.shape, a.jobs as usize, a.users, a.cores, a.seed)
    };
    let trace = generate(&spec)?;
    let weights_path = (!trace.weights.is_empty()).then(|| {
        a.weights_out.clone().unwrap_or_else(|| {
            let name = crate::sim::run::trace_name(&a.out);
            a.out.with_file_name(format!("{name}.weights.json"))
        })
    });
    if weights_path
        .as_ref()
        .is_some_and(|w| crate::sim::run::same_file(w, &a.out))
    {
        anyhow::bail!(
            "--weights-out and --out name the same file, {}: the weights would overwrite the trace",
            a.out.display()
        );
    }
    write_swf_file(&trace, &a.out)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", a.out.display()))?;
    let users: std::collections::BTreeSet<&str> =
        trace.jobs.iter().map(|j| j.user.as_str()).collect();
    let mut text = format!(
        "{} jobs by {} users for {} cores written to {}",
        trace.jobs.len(),
        users.len(),
        a.cores,
        a.out.display()
    );
    if users.len() < a.users as usize {
        text.push_str(&format!(
            " ({} users asked for; the others drew no job)",
            a.users
        ));
    }
    if weights_path.is_none() && a.weights_out.is_some() {
        text.push_str(&format!(
            "; no weights file: only the weighted shape has weights (--weights-out ignored for {})",
            a.shape
        ));
    }
    if let Some(path) = weights_path {
        let json = serde_json::to_string_pretty(&trace.weights)?;
        std::fs::write(&path, json + "\n")
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        text.push_str(&format!("; weights written to {}", path.display()));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::Parser;

    /// The `usage` table shows each custom resource's hours (a fresh tester found them
    /// left out): `QPU=1.500` for 5,400 QPU-seconds, `-` for a row with none.
    #[test]
    fn the_usage_table_shows_custom_resource_hours() {
        let report: crate::api::usage::UsageReport = serde_json::from_value(serde_json::json!({
            "from": "2026-12-01T00:00:00Z", "to": "2026-12-02T00:00:00Z", "step": "day",
            "by": "user", "now": "2026-12-06T00:00:00Z",
            "rows": [
                {"start": "2026-12-01T00:00:00Z", "key": "ann", "core_seconds": 7200.0,
                 "gpu_seconds": 0.0, "memory_byte_seconds": 0.0,
                 "custom_seconds": {"QPU": 5400.0, "A": 36.0},
                 "actual": {"core_seconds": 0.0, "gpu_seconds": 0.0, "memory_byte_seconds": 0.0},
                 "jobs": {"succeeded": 1, "failed": 0, "stopped": 0},
                 "wait_seconds": {"count": 1, "p50": 3, "p90": 3, "p99": 3}},
                {"start": "2026-12-01T00:00:00Z", "key": "bob", "core_seconds": 3600.0,
                 "gpu_seconds": 0.0, "memory_byte_seconds": 0.0, "custom_seconds": {},
                 "actual": {"core_seconds": 0.0, "gpu_seconds": 0.0, "memory_byte_seconds": 0.0},
                 "jobs": {"succeeded": 1, "failed": 0, "stopped": 0},
                 "wait_seconds": {"count": 1, "p50": 3, "p90": 3, "p99": 3}}
            ]
        }))
        .unwrap();
        let table = super::usage_table(&report);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[1].ends_with(" custom_hours"), "{table}");
        assert!(lines[2].ends_with(" A=0.010,QPU=1.500"), "{table}");
        assert!(lines[3].ends_with(" -"), "{table}");
    }

    /// Hours with three decimals; what is above 0 never shows as none.
    #[test]
    fn hours_above_zero_never_show_as_zero() {
        assert_eq!(super::hours(0.0), "0.000");
        assert_eq!(super::hours(1.0), "<0.001");
        assert_eq!(super::hours(1.79), "<0.001");
        assert_eq!(super::hours(1.81), "0.001");
        assert_eq!(super::hours(5400.0), "1.500");
        for s in [1e-9, 0.5, 1.0, 1.7, 1.8, 2.0, 3.6, 36.0] {
            assert!(super::hours(s) != "0.000", "{s} s");
        }
    }

    /// The error clap gives for `args` after `fairshare simulate --trace t.swf`.
    fn simulate_error(args: &[&str]) -> String {
        let mut argv = vec!["fairshare", "simulate", "--trace", "t.swf"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    /// A tester's finding: `--preempt-after -5m` got clap's "unexpected argument
    /// '-5m'", which names neither the flag nor what is wrong.
    #[test]
    fn a_negative_duration_is_refused_naming_its_flag() {
        for flag in [
            "--half-life",
            "--starvation-guard",
            "--max-age",
            "--preempt-after",
            "--preempt-min-runtime",
            "--preempt-interval",
        ] {
            let error = simulate_error(&[flag, "-5m"]);
            assert!(
                error.contains(flag) && error.contains("negative"),
                "{flag}: {error}"
            );
        }
    }

    /// `--autoscale` and its flags go together, not with `--cpus`, and a bad node type
    /// is refused naming the flag and the key.
    #[test]
    fn autoscale_flags_are_checked_by_the_command_line() {
        let ok = ["--autoscale", "--node-type", "cpus=2,max=2"];
        assert_eq!(simulate_error(&ok), "");
        let mut all = ok.to_vec();
        all.extend([
            "--node-type",
            "cpus=8,min=1,max=3,name=big",
            "--head-cpus",
            "0",
            "--start-delay",
            "5m",
            "--idle-timeout",
            "1m",
        ]);
        assert_eq!(simulate_error(&all), "");
        let needs = simulate_error(&["--autoscale"]);
        assert!(needs.contains("--node-type"), "{needs}");
        for flag in [
            ["--node-type", "cpus=2,max=2"],
            ["--head-cpus", "1"],
            ["--start-delay", "1m"],
            ["--idle-timeout", "1m"],
        ] {
            let error = simulate_error(&flag);
            assert!(error.contains("--autoscale"), "{flag:?}: {error}");
        }
        let mut with_cpus = ok.to_vec();
        with_cpus.extend(["--cpus", "8"]);
        let error = simulate_error(&with_cpus);
        assert!(
            error.contains("--cpus") && error.contains("cannot be used"),
            "{error}"
        );
        let error = simulate_error(&["--autoscale", "--node-type", "cpus=2,min=3,max=2"]);
        assert!(
            error.contains("--node-type") && error.contains("min 3 is above max 2"),
            "{error}"
        );
        let error = simulate_error(&[
            "--autoscale",
            "--node-type",
            "cpus=2,max=2",
            "--start-delay",
            "-1s",
        ]);
        assert!(
            error.contains("--start-delay") && error.contains("negative"),
            "{error}"
        );
    }

    /// A key given twice in one `--node-type` value is refused naming the flag and
    /// the key (the last one won).
    #[test]
    fn a_node_type_key_given_twice_is_refused_naming_the_flag_and_key() {
        let error = simulate_error(&["--autoscale", "--node-type", "cpus=4,cpus=8,max=2"]);
        assert!(
            error.contains("--node-type") && error.contains("cpus is given twice"),
            "{error}"
        );
    }

    /// A duration flag given no value before the next flag names both (it said the
    /// flag was a negative duration).
    #[test]
    fn a_duration_flag_followed_by_a_flag_says_its_value_is_missing() {
        let error = simulate_error(&["--half-life", "--no-backfill"]);
        assert!(
            error.contains("--half-life")
                && error.contains("missing (found the flag --no-backfill)"),
            "{error}"
        );
    }

    /// `--weights-out` naming the trace itself is refused before anything is
    /// written (it overwrote the trace with the weights).
    #[test]
    fn trace_refuses_to_write_its_weights_over_the_trace() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("w.swf");
        let same = dir.path().join(".").join("w.swf");
        let argv = [
            "fairshare",
            "trace",
            "--shape",
            "weighted",
            "--jobs",
            "20",
            "--users",
            "4",
            "--cores",
            "8",
        ];
        let Ok(Cli {
            command: super::Command::Trace(a),
        }) = Cli::try_parse_from(argv.iter().copied().chain([
            "--out",
            out.to_str().unwrap(),
            "--weights-out",
            same.to_str().unwrap(),
        ]))
        else {
            panic!("the arguments parse");
        };
        let error = super::write_trace(&a).unwrap_err().to_string();
        assert!(error.contains("same file"), "{error}");
        assert!(!out.exists(), "nothing written");
    }

    /// `trace` with more users than jobs writes the trace and says how many users it
    /// has, as it does for fewer users drawn when jobs ≥ users (a tester found the
    /// first refused "every user has at least one job", which the second disproved).
    #[test]
    fn trace_says_how_many_users_drew_a_job_and_allows_more_users_than_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("t.swf");
        let argv = ["fairshare", "trace", "--jobs", "1", "--users", "5"];
        let Ok(Cli {
            command: super::Command::Trace(a),
        }) = Cli::try_parse_from(argv.iter().copied().chain([
            "--cores",
            "8",
            "--out",
            out.to_str().unwrap(),
        ]))
        else {
            panic!("the arguments parse");
        };
        let text = super::write_trace(&a).unwrap();
        assert!(
            text.starts_with("1 jobs by 1 users")
                && text.contains("(5 users asked for; the others drew no job)"),
            "{text}"
        );
        let written = std::fs::read_to_string(&out).unwrap();
        assert!(
            written.contains("; Note: 1 of the 5 users asked for drew a job"),
            "{written}"
        );
    }

    /// Negative numbers reach the flag's own check (which names the flag and its
    /// range) instead of clap's "unexpected argument '-1'".
    #[test]
    fn a_negative_number_reaches_the_flags_own_check() {
        assert_eq!(simulate_error(&["--preempt-budget", "-1"]), "");
        assert_eq!(simulate_error(&["--age-weight", "-0.5"]), "");
        let argv = ["fairshare", "trace", "--jobs", "1", "--users", "1"];
        let trace = Cli::try_parse_from(
            argv.iter()
                .chain(&["--cores", "1", "--load", "-1", "--out", "t.swf"]),
        );
        assert!(trace.is_ok());
    }
}
