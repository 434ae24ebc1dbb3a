//! The settings' tests: loading `config/default.toml`, files and environment overrides,
//! and every check of `validate` naming its key.

use super::*;

/// The environment variable of `secrets.runtime_env_keys` and a key for it (required
/// with tokens).
const KEYS: &str = "FAIRSHARE__SECRETS__RUNTIME_ENV_KEYS";
const KEY: &str = "KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=";

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn defaults_load_without_any_file() {
    let s = Settings::load_with_env(None, env(&[])).unwrap();
    assert_eq!(s.server.bind.to_string(), "127.0.0.1:8080");
    assert_eq!(s.scheduler.usage_half_life, Duration::from_secs(86_400));
    assert_eq!(s.monitor.poll_interval, Duration::from_millis(500));
    assert_eq!(s.clusters.len(), 1);
}

#[test]
fn environment_overrides_defaults() {
    let s = Settings::load_with_env(
        None,
        env(&[
            ("FAIRSHARE__SCHEDULER__BACKFILL", "false"),
            ("FAIRSHARE__SCHEDULER__USAGE_HALF_LIFE", "0s"),
            ("FAIRSHARE__DATABASE__URL", "postgres://x@127.0.0.1/db"),
        ]),
    )
    .unwrap();
    assert!(!s.scheduler.backfill);
    assert!(s.scheduler.usage_half_life.is_zero());
    assert_eq!(s.database.url, "postgres://x@127.0.0.1/db");
}

#[test]
fn bad_duration_names_the_key() {
    let err = Settings::load_with_env(
        None,
        env(&[("FAIRSHARE__SCHEDULER__STARVATION_GUARD", "soon")]),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("scheduler.starvation_guard"), "{err}");
}

#[test]
fn unknown_key_names_the_key() {
    let err = Settings::load_with_env(None, env(&[("FAIRSHARE__SERVER__BINDD", "x")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("bindd"), "{err}");
}

#[test]
fn open_api_on_a_public_address_is_refused() {
    let err = Settings::load_with_env(None, env(&[("FAIRSHARE__SERVER__BIND", "0.0.0.0:8080")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("auth.tokens"), "{err}");
}

#[test]
fn values_that_would_fail_later_are_refused_at_load() {
    for (key, value, named) in [
        ("FAIRSHARE__SERVER__WORKERS", "100000", "server.workers"),
        ("FAIRSHARE__TELEMETRY__LEVEL", "[[[", "telemetry.level"),
        ("FAIRSHARE__TELEMETRY__LEVEL", "verbose", "telemetry.level"),
    ] {
        let err = Settings::load_with_env(None, env(&[(key, value)]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(named), "{key}={value}: {err}");
    }
    let ok = Settings::load_with_env(
        None,
        env(&[("FAIRSHARE__TELEMETRY__LEVEL", "fairshare=debug,info")]),
    );
    assert!(ok.is_ok());
}

#[test]
fn zero_per_user_defaults_are_refused_naming_the_key() {
    for key in [
        "scheduler.default_max_running_jobs",
        "scheduler.default_max_queued_jobs",
    ] {
        let var = format!("FAIRSHARE__{}", key.replace('.', "__").to_uppercase());
        let err = Settings::load_with_env(None, env(&[(var.as_str(), "0")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{key} = 0: {err}");
        assert!(err.contains("at least 1"), "{key} = 0: {err}");
        let ok = Settings::load_with_env(None, env(&[(var.as_str(), "1")]));
        assert!(ok.is_ok(), "{key} = 1: {:?}", ok.err());
    }
}

#[test]
fn webhooks_load_from_a_file_and_bad_ones_name_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hooks.toml");
    let hook = |name: &str, url: &str, secret: &str| {
        format!("[[webhooks]]\nname = \"{name}\"\nurl = \"{url}\"\nsecret = \"{secret}\"\nevents = [\"SUCCEEDED\", \"FAILED\"]\n")
    };
    let good = hook("gw", "http://127.0.0.1:9/hook", "0123456789abcdef");
    std::fs::write(&path, &good).unwrap();
    let s = Settings::load_with_env(Some(&path), env(&[])).unwrap();
    assert_eq!(s.webhooks.len(), 1);
    assert_eq!(
        s.webhooks[0].events,
        Some(vec![
            entity::JobStatus::Succeeded,
            entity::JobStatus::Failed
        ])
    );
    assert!(!format!("{:?}", s.webhooks[0]).contains("0123456789abcdef"));
    for (text, key) in [
        (
            hook("gw", "ftp://x/", "0123456789abcdef"),
            "webhooks[0].url",
        ),
        (hook("gw", "http://x/", "short"), "webhooks[0].secret"),
        (format!("{good}{good}"), "webhooks[1].name"),
        (good.replace("FAILED", "DONE"), "webhooks[0].events"),
        (
            good.replace("events = [\"SUCCEEDED\", \"FAILED\"]", "events = []"),
            "webhooks[0].events",
        ),
    ] {
        std::fs::write(&path, &text).unwrap();
        let err = Settings::load_with_env(Some(&path), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{text}: {err}");
    }
}

#[test]
fn duplicate_or_non_ascii_tokens_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let token = |name: &str, token: &str, role: &str| {
        format!("[[auth.tokens]]\nname = \"{name}\"\ntoken = \"{token}\"\nrole = \"{role}\"\n")
    };
    for file in [
        token("a", "0123456789", "submitter") + &token("b", "0123456789", "admin"),
        token("a", "t\u{f6}kenUnicode", "admin"),
        token("a", "        ", "admin"),
    ] {
        let path = dir.path().join("c.toml");
        std::fs::write(&path, file).unwrap();
        let err = Settings::load_with_env(Some(&path), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("auth.tokens[") && err.contains("].token"),
            "{err}"
        );
    }
}

/// A token's user follows the API's rule for user ids (api::user_id): it checked
/// only for whitespace, so a token could submit as an id no request can name.
#[test]
fn a_tokens_user_is_a_valid_user_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let file = |user: &str| {
        format!(
            "[[auth.tokens]]\nname = \"a\"\ntoken = \"0123456789\"\nrole = \"submitter\"\nuser = \"{user}\"\n"
        )
    };
    for user in [
        "",
        " ",
        "a b",
        "a\u{200b}b",
        "a\u{fe0f}b",
        "a\u{180e}b",
        "..",
        "x\u{ad}",
    ] {
        std::fs::write(&path, file(user)).unwrap();
        let err = Settings::load_with_env(Some(&path), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("auth.tokens[0].user"), "{user:?}: {err}");
    }
    std::fs::write(&path, file("alice")).unwrap();
    let s = Settings::load_with_env(Some(&path), env(&[(KEYS, KEY)])).unwrap();
    assert_eq!(s.auth.tokens[0].user.as_deref(), Some("alice"));
}

#[test]
fn a_file_overrides_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "[server]\nbind = \"0.0.0.0:9000\"\n[secrets]\nruntime_env_keys = [\"KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=\"]\n[[auth.tokens]]\nname = \"a\"\ntoken = \"0123456789\"\nrole = \"admin\"\n",
    )
    .unwrap();
    let s = Settings::load_with_env(Some(&path), env(&[])).unwrap();
    assert_eq!(s.server.bind.port(), 9000);
    assert_eq!(s.auth.tokens[0].role, Role::Admin);
}

/// Loads `toml` as a `--config` file over the defaults.
fn load_toml(toml: &str) -> Result<Settings, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, toml).unwrap();
    Settings::load_with_env(Some(&path), env(&[]))
}

#[test]
fn identity_rules_load_and_bad_ones_stop_the_service_naming_their_key() {
    let s = load_toml(
        "[ray_compat]\nuser_rules = [{from = \"metadata\", key = \"fairshare.user\"}, \
         {from = \"env_var_hash\", name = \"QISKIT_IBM_TOKEN\", secret = \"0123456789abcdef\"}, \
         {from = \"default\", value = \"shared\"}]\n\
         group_rules = [{from = \"env_var\", name = \"QISKIT_IBM_INSTANCE\"}]\n",
    )
    .unwrap();
    assert_eq!(s.ray_compat.user_rules.len(), 3);
    let dbg = format!("{:?}", s.ray_compat);
    assert!(
        !dbg.contains("0123456789abcdef"),
        "secrets stay out of Debug: {dbg}"
    );
    for (toml, key) in [
        (
            "user_rules = [{from = \"env_var_hash\", name = \"T\", secret = \"short\"}]",
            "ray_compat.user_rules[0].secret",
        ),
        (
            "user_rules = [{from = \"env_var_hash\", name = \"T\", secret = \"                \"}]",
            "ray_compat.user_rules[0].secret",
        ),
        (
            "user_rules = [{from = \"default\", value = \"two words\"}]",
            "ray_compat.user_rules[0].value",
        ),
        (
            "user_rules = [{from = \"default\", value = \"x\"}, {from = \"metadata\", key = \"k\"}]",
            "ray_compat.user_rules[0].from",
        ),
        ("user_rules = []", "ray_compat.user_rules"),
        (
            "group_rules = [{from = \"env_var\", name = \"\"}]",
            "ray_compat.group_rules[0].name",
        ),
        (
            "user_rules = [{from = \"metadata\", key = \"k\", name = \"x\"}]",
            "ray_compat.user_rules",
        ),
        (
            "user_rules = [{from = \"the_moon\"}]",
            "ray_compat.user_rules",
        ),
        (
            "default_resources = {cpu = 0, gpu = 0}",
            "ray_compat.default_resources.cpu",
        ),
        (
            "default_resources = {cpu = 0.12345}",
            "ray_compat.default_resources.cpu",
        ),
    ] {
        let err = load_toml(&format!("[ray_compat]\n{toml}\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{toml}: {err}");
    }
}

#[test]
fn preemption_defaults_off_and_bad_values_name_the_key() {
    let s = Settings::load_with_env(None, env(&[])).unwrap();
    let p = &s.preemption;
    assert_eq!(p.after, Some(Duration::from_secs(600)));
    assert_eq!(p.min_runtime, Duration::from_secs(120));
    assert_eq!(p.max_per_job, 5);
    assert_eq!(p.budget, 0.02);
    assert_eq!(p.interval, Duration::from_secs(6 * 3600));
    assert_eq!(p.grace, Duration::from_secs(30));
    assert!(!p.shortfall);
    // The simulator's defaults are the service's.
    assert_eq!(p.policy(), crate::policy::PreemptionConfig::default());
    assert!(p.enabled());
    // The words the simulator's --preempt-after takes, in any case (a tester found
    // the two accepting different ones).
    for word in ["off", "OFF", " none ", "nOnE"] {
        let off =
            Settings::load_with_env(None, env(&[("FAIRSHARE__PREEMPTION__AFTER", word)])).unwrap();
        assert!(!off.preemption.enabled(), "{word:?}");
        assert!(off.preemption.policy().after.is_infinite());
        let sim = crate::sim::run::parse_seconds_or_off(word).unwrap();
        assert!(sim.is_infinite(), "{word:?}");
    }
    assert_eq!(crate::sim::run::parse_seconds_or_off("10m"), Ok(600.0));
    assert!(crate::sim::run::parse_seconds_or_off("Inf")
        .unwrap()
        .is_infinite());
    // In a file `inf` is a word like the others; in the environment it is a number,
    // refused naming the key and saying why.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.toml");
    std::fs::write(&file, "[preemption]\nafter = \"Inf\"\n").unwrap();
    let s = Settings::load_with_env(Some(&file), env(&[])).unwrap();
    assert!(!s.preemption.enabled());
    let err = Settings::load_with_env(None, env(&[("FAIRSHARE__PREEMPTION__AFTER", "inf")]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("preemption.after") && err.contains("write e.g. 10m, or off"),
        "{err}"
    );
    assert!(crate::sim::run::parse_seconds_or_off("300000000000y").is_err());
    for (var, value, key) in [
        ("FAIRSHARE__PREEMPTION__AFTER", "soon", "preemption.after"),
        (
            "FAIRSHARE__PREEMPTION__MIN_RUNTIME",
            "-1s",
            "preemption.min_runtime",
        ),
        (
            "FAIRSHARE__PREEMPTION__MAX_PER_JOB",
            "-1",
            "preemption.max_per_job",
        ),
        ("FAIRSHARE__PREEMPTION__BUDGET", "1.5", "preemption.budget"),
        ("FAIRSHARE__PREEMPTION__BUDGET", "-0.1", "preemption.budget"),
        (
            "FAIRSHARE__PREEMPTION__INTERVAL",
            "0s",
            "preemption.interval",
        ),
        ("FAIRSHARE__PREEMPTION__GRACE", "0s", "preemption.grace"),
        ("FAIRSHARE__PREEMPTION__GRACE", "later", "preemption.grace"),
    ] {
        let err = Settings::load_with_env(None, env(&[(var, value)]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{var}={value}: {err}");
    }
}

#[test]
fn licenses_load_from_a_file_reach_the_policy_and_bad_ones_name_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("licenses.toml");
    let license =
        |name: &str, count: &str| format!("[[licenses]]\nname = \"{name}\"\ncount = {count}\n");
    std::fs::write(&path, license("qpu_session", "4")).unwrap();
    let s = Settings::load_with_env(Some(&path), env(&[])).unwrap();
    let slot = crate::policy::custom::lookup("qpu_session").expect("registered at load");
    assert_eq!(s.policy().licenses.get(slot), 4.0);
    assert!(Settings::defaults().policy().licenses.is_empty());
    for (text, key, says) in [
        (license("qpu session", "4"), "licenses[0].name", "name"),
        (license("CPU", "4"), "licenses[0].name", "CPU"),
        (license("node:1.2.3.4", "1"), "licenses[0].name", "node:"),
        (license("seat", "-1"), "licenses[0].count", "above 0"),
        (license("seat", "0"), "licenses[0].count", "above 0"),
        (license("seat", "1e300"), "licenses[0].count", "at most 1e6"),
        (
            license("seat", "9223372036854775807"),
            "licenses[0].count",
            "at most 1e6",
        ),
        (license("seat", "nan"), "licenses[0].count", "finite"),
        (license("seat", "inf"), "licenses[0].count", "finite"),
        (
            format!("{}{}", license("seat", "1"), license("seat", "2")),
            "licenses[1].name",
            "duplicate",
        ),
    ] {
        std::fs::write(&path, &text).unwrap();
        let err = Settings::load_with_env(Some(&path), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{text}: {err}");
        assert!(err.contains(says), "{text}: {err}");
    }
    // A count that is not a number names the key too (the parser's error).
    std::fs::write(&path, license("seat", "\"four\"")).unwrap();
    let err = Settings::load_with_env(Some(&path), env(&[]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("count"), "{err}");
}

/// NaN, infinity and 1e400 in the environment name the key and say a finite number
/// is wanted (they reach the settings as JSON null; a tester of issue 28 found
/// "invalid type: null, expected f64" for `preemption.budget = nan`).
#[test]
fn a_number_that_is_not_finite_names_the_key_and_says_so() {
    for v in ["nan", "inf", "-inf", "1e400"] {
        let err = Settings::load_with_env(None, env(&[("FAIRSHARE__PREEMPTION__BUDGET", v)]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("preemption.budget"), "{v}: {err}");
        assert!(err.contains("finite number"), "{v}: {err}");
    }
}

/// A file that is not valid TOML (here a number past f64) says the line and shows
/// the key, where the parser's own message named only the file (a tester's nit from
/// issue 28).
#[test]
fn a_bad_file_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[preemption]\nafter = \"10m\"\nbudget = 1e400\n").unwrap();
    let err = Settings::load_with_env(Some(&path), env(&[]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 3"), "{err}");
    assert!(err.contains("preemption.budget"), "{err}");
    std::fs::write(
        &path,
        "[[licenses]]\nname = \"seat\"\ncount = 99999999999999999999\n",
    )
    .unwrap();
    let err = Settings::load_with_env(Some(&path), env(&[]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("`licenses[0].count` (line 3)"), "{err}");
    std::fs::write(&path, "[server\nbind = 1\n").unwrap();
    let err = Settings::load_with_env(Some(&path), env(&[]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 1, column 8"), "{err}");
}

#[test]
fn pools_load_from_a_file_with_their_capacity_and_bad_ones_name_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pools.toml");
    let pool = |name: &str, capacity: &str| {
        format!("[[pools]]\nname = \"{name}\"\ncapacity = {{ {capacity} }}\n")
    };
    std::fs::write(
        &path,
        pool("gateway", "clusters = 20, gpu = 8, memory_bytes = 1e9"),
    )
    .unwrap();
    let s = Settings::load_with_env(Some(&path), env(&[])).unwrap();
    let gw = s.pool("gateway").expect("the pool is loaded");
    let total = gw.total();
    let slot = crate::policy::custom::lookup("clusters").expect("registered at load");
    assert_eq!(total.custom.get(slot), 20.0);
    assert_eq!(total.gpu, 8.0);
    assert_eq!(total.memory_bytes, 1e9);
    assert_eq!(
        total.cpu, 0.0,
        "a resource the pool does not name it has none of"
    );
    assert!(Settings::defaults().pools.is_empty());
    assert_eq!(s.admission.lease, Duration::from_secs(60));
    assert_eq!(s.admission.on_lease_lapse, OnLeaseLapse::Requeue);
    for (text, key, says) in [
        (
            pool("local", "clusters = 1"),
            "pools[0].name",
            "[[clusters]]",
        ),
        (pool("a b", "clusters = 1"), "pools[0].name", "characters"),
        (pool("", "clusters = 1"), "pools[0].name", "characters"),
        (pool("gw", ""), "pools[0].capacity", "at least one"),
        (
            pool("gw", "clusters = 0"),
            "pools[0].capacity.clusters",
            "above 0",
        ),
        (pool("gw", "gpu = -2"), "pools[0].capacity.gpu", "above 0"),
        (pool("gw", "CPU = 2"), "pools[0].capacity.CPU", "CPU"),
        (
            pool("gw", "\"node:1.2.3.4\" = 1"),
            "pools[0].capacity.node:1.2.3.4",
            "node:",
        ),
        (
            format!(
                "{}{}",
                pool("gw", "clusters = 1"),
                pool("gw", "clusters = 2")
            ),
            "pools[1].name",
            "duplicate",
        ),
    ] {
        std::fs::write(&path, &text).unwrap();
        let err = Settings::load_with_env(Some(&path), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{text}: {err}");
        assert!(err.contains(says), "{text}: {err}");
    }
    for (var, value, key) in [
        ("FAIRSHARE__ADMISSION__LEASE", "500ms", "admission.lease"),
        (
            "FAIRSHARE__ADMISSION__ON_LEASE_LAPSE",
            "retry",
            "on_lease_lapse",
        ),
    ] {
        let err = Settings::load_with_env(None, env(&[(var, value)]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{var}={value}: {err}");
    }
    // A token confined to a pool names a configured one.
    std::fs::write(
        &path,
        format!(
            "{}[[auth.tokens]]\nname = \"r\"\ntoken = \"runner-token\"\nrole = \"submitter\"\npool = \"elsewhere\"\n",
            pool("gw", "clusters = 1")
        ),
    )
    .unwrap();
    let err = Settings::load_with_env(Some(&path), env(&[(KEYS, KEY)]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("auth.tokens[0].pool"), "{err}");
    let fail = Settings::load_with_env(
        None,
        env(&[
            ("FAIRSHARE__ADMISSION__ON_LEASE_LAPSE", "fail"),
            ("FAIRSHARE__ADMISSION__LEASE", "2s"),
        ]),
    )
    .unwrap();
    assert_eq!(fail.admission.on_lease_lapse, OnLeaseLapse::Fail);
    assert_eq!(
        fail.admission.check_interval(),
        Duration::from_millis(500),
        "a quarter of the lease"
    );
}

/// Every duration of the default configuration, set far beyond 100 years, is refused
/// naming its key: the service adds durations to the clock (a `preemption.grace` of
/// 293,000,000,000 years once made `serve` panic at start). Found by walking
/// `config/default.toml` for values humantime parses, so a new duration key is
/// covered without being listed here.
#[test]
fn durations_beyond_a_hundred_years_are_refused_naming_their_key() {
    // `key = "value"` lines under `[section]` headers (arrays of tables skipped).
    let mut keys = Vec::new();
    let mut section: Option<&str> = None;
    for line in DEFAULT_TOML.lines().map(str::trim) {
        if line.starts_with("[[") {
            section = None;
        } else if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name);
        } else if let (Some(section), Some((key, value))) = (section, line.split_once(" = ")) {
            let value = value.split('#').next().unwrap_or("").trim();
            let quoted = value.len() >= 2 && value.starts_with('"') && value.ends_with('"');
            if quoted && humantime::parse_duration(value.trim_matches('"')).is_ok() {
                keys.push(format!("{section}.{}", key.trim()));
            }
        }
    }
    assert!(keys.len() >= 20, "{keys:?}");
    for key in &keys {
        let var = format!("FAIRSHARE__{}", key.to_uppercase().replace('.', "__"));
        let err = Settings::load_with_env(None, env(&[(var.as_str(), "300000000000y")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(key.as_str()) && err.contains("too long"),
            "{key}: {err}"
        );
    }
}

#[test]
fn allowed_hosts_take_names_and_wildcards_and_name_a_bad_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hosts.toml");
    let load = |hosts: &str| {
        std::fs::write(&path, format!("[server]\nallowed_hosts = {hosts}\n")).unwrap();
        Settings::load_with_env(Some(path.as_path()), env(&[]))
    };
    let s = load(r#"["fairshare.example.org", "*.svc.cluster.local"]"#).unwrap();
    assert_eq!(s.server.allowed_hosts.len(), 2);
    for bad in [
        r#"["http://x"]"#,
        r#"["x:8080"]"#,
        r#"[""]"#,
        r#"["*."]"#,
        r#"["a b"]"#,
    ] {
        let err = load(&format!(r#"["ok.example", {}]"#, &bad[1..bad.len() - 1]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("server.allowed_hosts[1]"), "{bad}: {err}");
    }
}

/// A fresh tester's findings on issue 49: a `notify.url` with a user and password (it
/// never works and was shown to every job), with a quote (it went unescaped into every
/// job's shell command: `'$(touch …)'` ran), or with spaces is refused naming the key.
#[test]
fn a_notify_url_that_cannot_work_or_would_break_the_shell_is_refused() {
    for bad in [
        "http://svc:hunter2pass@127.0.0.1:18999",
        "http://svc@127.0.0.1:18999",
        "http://127.0.0.1:18081/x'$(touch${IFS}/tmp/t49)'",
        " http://127.0.0.1:18081 ",
        "http://127.0.0.1:18081/a b",
        "http://127.0.0.1:18081/\"x\"",
    ] {
        let err = Settings::load_with_env(None, env(&[("FAIRSHARE__NOTIFY__URL", bad)]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("notify.url"), "{bad:?}: {err}");
    }
    for good in [
        "http://fairshare.ns.svc.cluster.local:8080",
        "https://fairshare.example.org/prefix",
        "http://[::1]:8080",
        "http://10.0.0.5:8080/a%20b",
    ] {
        let ok = Settings::load_with_env(None, env(&[("FAIRSHARE__NOTIFY__URL", good)]));
        assert!(ok.is_ok(), "{good}: {:?}", ok.err());
    }
}

#[test]
fn a_clusters_ca_file_must_hold_a_certificate_and_is_named_when_it_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let bad = dir.path().join("bad.pem");
    std::fs::write(&bad, "not a certificate").unwrap();
    for (ca, named) in [
        (bad.display().to_string(), "clusters[0].ca_file"),
        ("/nonexistent/ca.pem".to_string(), "clusters[0].ca_file"),
    ] {
        std::fs::write(
            &path,
            format!("[[clusters]]\nname = \"r\"\naddress = \"https://ray.example.org\"\nca_file = \"{ca}\"\n"),
        )
        .unwrap();
        let err = Settings::load_with_env(Some(path.as_path()), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(named), "{ca}: {err}");
    }
    std::fs::write(
        &path,
        "[[clusters]]\nname = \"r\"\naddress = \"http://127.0.0.1:8265\"\nauth_token_file = \"/var/run/ray-auth/token\"\n",
    )
    .unwrap();
    let s = Settings::load_with_env(Some(path.as_path()), env(&[])).unwrap();
    assert_eq!(
        s.clusters[0].auth_token_file.as_deref(),
        Some(std::path::Path::new("/var/run/ray-auth/token")),
        "a token file need not exist at start (a Secret mounted later): the cluster is unhealthy until it does"
    );
}

/// Fresh testers' findings: "*" (or a wildcard over a top-level domain) would let DNS
/// rebinding back into an open service; a cluster address with a user and password
/// is logged in full. Both are refused naming the key.
#[test]
fn wide_allowed_hosts_without_tokens_and_credentials_in_a_cluster_address_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let load = |text: &str| {
        std::fs::write(&path, text).unwrap();
        Settings::load_with_env(Some(path.as_path()), env(&[]))
    };
    for hosts in [r#"["*"]"#, r#"["*.com"]"#] {
        let err = load(&format!("[server]\nallowed_hosts = {hosts}\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("server.allowed_hosts[0]"), "{hosts}: {err}");
    }
    let tokens =
        "[secrets]\nruntime_env_keys = [\"KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=\"]\n\
                  [[auth.tokens]]\nname = \"a\"\ntoken = \"admin-token-1\"\nrole = \"admin\"\n";
    let ok = load(&format!("[server]\nallowed_hosts = [\"*\"]\n{tokens}"));
    assert!(ok.is_ok(), "{:?}", ok.err());
    let err = load(&format!("[server]\nallowed_hosts = [\"*.com\"]\n{tokens}"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("below the top level"), "{err}");
    let err = load("[[clusters]]\nname = \"r\"\naddress = \"http://user:pw@127.0.0.1:1\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("clusters[0].address"), "{err}");
    assert!(!err.contains("pw@"), "the password is not repeated: {err}");
}

/// Issue 44: an autoscaling cluster's node types load with their potential, and bad
/// ones are a start-up error naming the key.
#[test]
fn node_types_load_with_their_potential_and_bad_ones_name_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("autoscaling.toml");
    let cluster = |extra: &str| {
        format!("[[clusters]]\nname = \"kuberay\"\naddress = \"http://127.0.0.1:8265\"\n{extra}")
    };
    let node = |name: &str, resources: &str, min: u32, max: u32| {
        format!(
            "[[clusters.node_types]]\nname = \"{name}\"\nresources = {{ {resources} }}\n\
             min_count = {min}\nmax_count = {max}\n"
        )
    };
    std::fs::write(
        &path,
        cluster(&format!(
            "head = {{ cpu = 1 }}\n{}{}",
            node("cpu-2", "cpu = 2, memory_bytes = 8e9", 0, 3),
            node("gpu", "cpu = 8, gpu = 1", 1, 2)
        )),
    )
    .unwrap();
    let s = Settings::load_with_env(Some(&path), env(&[])).unwrap();
    let c = &s.clusters[0];
    assert!(c.autoscales());
    let p = c.potential().unwrap();
    assert_eq!(
        (p.cpu, p.gpu, p.memory_bytes),
        (1.0 + 6.0 + 16.0, 2.0, 24e9)
    );
    let shapes: Vec<String> = c.node_shapes().into_iter().map(|(n, _)| n).collect();
    assert_eq!(shapes, ["head", "cpu-2", "gpu"]);
    assert_eq!(s.monitor.scale_up_timeout, Duration::from_secs(600));
    // docs/ray.md's KubeRay example: a head that offers 0 cores, said explicitly.
    std::fs::write(
        &path,
        cluster(&format!(
            "head = {{ cpu = 0, gpu = 0 }}\n{}",
            node("a", "cpu = 2", 0, 1)
        )),
    )
    .unwrap();
    let zero = Settings::load_with_env(Some(&path), env(&[])).unwrap();
    assert_eq!(zero.clusters[0].potential().unwrap().cpu, 2.0);
    assert_eq!(
        zero.clusters[0].node_shapes().len(),
        1,
        "a head of nothing holds no job"
    );
    assert!(!Settings::defaults().clusters.iter().any(|c| c.autoscales()));
    for (text, key, says) in [
        (
            cluster(&node("a", "cpu = 0", 0, 1)),
            "clusters[0].node_types[0].resources.cpu",
            "above 0",
        ),
        (
            cluster(&node("a", "cpu = -2", 0, 1)),
            "clusters[0].node_types[0].resources.cpu",
            "above 0",
        ),
        (
            cluster(&node("a", "", 0, 1)),
            "clusters[0].node_types[0].resources",
            "at least one",
        ),
        // `memory` is Ray's name; the key is memory_bytes, and the error says so
        // whatever the amount (a fresh tester's finding).
        (
            cluster(&node("a", "cpu = 2, memory = 8e9", 0, 1)),
            "clusters[0].node_types[0].resources.memory",
            "use cpu, gpu or memory_bytes",
        ),
        (
            cluster(&node("a", "cpu = 2", 3, 2)),
            "clusters[0].node_types[0].max_count",
            "min_count",
        ),
        (
            cluster(&node("a", "cpu = 2", 0, 0)),
            "clusters[0].node_types[0].max_count",
            "at least 1",
        ),
        (
            cluster(&node("", "cpu = 2", 0, 1)),
            "clusters[0].node_types[0].name",
            "empty",
        ),
        (
            cluster(&format!(
                "{}{}",
                node("a", "cpu = 2", 0, 1),
                node("a", "cpu = 4", 0, 1)
            )),
            "clusters[0].node_types[1].name",
            "duplicate",
        ),
        (
            cluster("head = { cpu = 1 }\n"),
            "clusters[0].head",
            "node_types",
        ),
        // A fresh tester's findings: numbers no node has, and the head's name.
        (
            cluster(&node("a", "cpu = 1e308", 0, 2)),
            "clusters[0].node_types[0].resources.cpu",
            "at most",
        ),
        (
            cluster(&node("a", "cpu = 1, memory_bytes = 5e18", 0, 2)),
            "clusters[0].node_types[0].resources.memory_bytes",
            "2^53",
        ),
        (
            cluster(&node("a", "cpu = 1, memory_bytes = 1.5", 0, 2)),
            "clusters[0].node_types[0].resources.memory_bytes",
            "whole",
        ),
        (
            cluster(&node("a", "cpu = 1", 0, 4294967295)),
            "clusters[0].node_types[0].max_count",
            "at most",
        ),
        (
            cluster(&node("head", "cpu = 1", 0, 1)),
            "clusters[0].node_types[0].name",
            "head",
        ),
        (
            cluster(&format!(
                "head = {{ cpu = -1 }}\n{}",
                node("a", "cpu = 2", 0, 1)
            )),
            "clusters[0].head.cpu",
            "0 or more",
        ),
        (
            cluster(&format!(
                "head = {{ CPU = 1 }}\n{}",
                node("a", "cpu = 2", 0, 1)
            )),
            "clusters[0].head.CPU",
            "misspelt cpu",
        ),
        // A typo of a built-in name is not a custom resource (a fresh tester's finding).
        (
            cluster(&node("a", "cpus = 2", 0, 1)),
            "clusters[0].node_types[0].resources.cpus",
            "misspelt cpu",
        ),
        (
            cluster(&node("a", "cpu = 2, num_gpus = 1", 0, 1)),
            "clusters[0].node_types[0].resources.num_gpus",
            "misspelt gpu",
        ),
        (
            cluster(&node("a", "cpu = 2, mem = 8e9", 0, 1)),
            "clusters[0].node_types[0].resources.mem",
            "misspelt memory_bytes",
        ),
    ] {
        std::fs::write(&path, &text).unwrap();
        let err = Settings::load_with_env(Some(&path), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{text}: {err}");
        assert!(err.contains(says), "{text}: {err}");
    }
    for short in ["0s", "1ms", "999ms"] {
        let err = Settings::load_with_env(
            None,
            env(&[("FAIRSHARE__MONITOR__SCALE_UP_TIMEOUT", short)]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("monitor.scale_up_timeout"), "{short}: {err}");
        assert!(err.contains("at least 1s"), "{short}: {err}");
    }
    let s = Settings::load_with_env(None, env(&[("FAIRSHARE__MONITOR__SCALE_UP_TIMEOUT", "1s")]))
        .unwrap();
    assert_eq!(s.monitor.scale_up_timeout, Duration::from_secs(1));
}

/// `[usage]` and `[[sizes]]` (issue 48): the defaults, a size with memory written
/// with a unit, and every bad value refused naming its key.
#[test]
fn usage_retention_and_sizes_load_and_bad_ones_name_their_key() {
    let s = Settings::defaults();
    assert_eq!(s.usage.hourly_retention, Duration::from_secs(35 * 86_400));
    assert_eq!(s.usage.retention, Duration::from_secs(400 * 86_400));
    assert!(s.sizes.is_empty());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sizes.toml");
    let size = |body: &str| format!("[[sizes]]\n{body}\n");
    std::fs::write(
        &path,
        size("name = \"m\"\ncpu = 4\nmemory_bytes = \"16 GiB\"\ncustom = { QPU = 1 }")
            + &size("name = \"s\"\ncpu = 1\nmemory_bytes = 1000"),
    )
    .unwrap();
    let s = Settings::load_with_env(Some(&path), env(&[])).unwrap();
    assert_eq!(s.sizes[0].memory_bytes, 16 << 30);
    assert_eq!(s.sizes[0].custom["QPU"], 1.0);
    assert_eq!(s.sizes[1].memory_bytes, 1000);
    for (text, key, says) in [
        (
            size("name = \"a b\"\ncpu = 1"),
            "sizes[0].name",
            "characters",
        ),
        (
            size("name = \"m\"\ncpu = 1") + &size("name = \"m\"\ncpu = 2"),
            "sizes[1].name",
            "duplicate",
        ),
        (size("name = \"m\"\ncpu = -1"), "sizes[0].cpu", ">= 0"),
        // As a job's own resources would be refused (a fresh tester's findings).
        (
            size("name = \"m\"\ncpu = 0.00001"),
            "sizes[0].cpu",
            "4 decimal places",
        ),
        (
            size("name = \"m\"\ncpu = 2000000"),
            "sizes[0].cpu",
            "at most 1000000",
        ),
        (
            size("name = \"m\"\ncpu = 1\ngpu = 0.5\nmemory_bytes = \"9000 TiB\""),
            "sizes[0].memory_bytes",
            "9007199254740992",
        ),
        (
            size("name = \"m\"\ncpu = 1\ncustom = { QPU = 0.123456 }"),
            "sizes[0].custom.QPU",
            "4 decimal places",
        ),
        (
            size("name = \"m\"\ncpu = 1\nmemory_bytes = -1"),
            "memory_bytes",
            "a whole number of bytes",
        ),
        (
            size("name = \"m\"\ncpu = 1\nmemory_bytes = 1.5"),
            "memory_bytes",
            "a whole number of bytes",
        ),
        (
            size("name = \"m\"\ncpu = 1\nmemory_bytes = true"),
            "memory_bytes",
            "a whole number of bytes",
        ),
        (size("name = \"m\""), "sizes[0]", "cpu > 0"),
        (
            size("name = \"m\"\ncpu = 1\nmemory_bytes = \"16 GB2\""),
            "sizes",
            "unit",
        ),
        (
            size("name = \"m\"\ncpu = 1\ncustom = { CPU = 1 }"),
            "sizes[0].custom.CPU",
            "CPU",
        ),
        // fairshare's own resource as a custom one: no job could use the size (a
        // fresh tester's finding: it passed the start-up checks).
        (
            size("name = \"m\"\ncpu = 1\ncustom = { cpu = 2 }"),
            "sizes[0].custom.cpu",
            "fairshare's own resources",
        ),
        (
            "[usage]\nhourly_retention = \"500days\"\n".to_string(),
            "usage.hourly_retention",
            "retention",
        ),
        (
            "[usage]\nretention = \"1h\"\n".to_string(),
            "usage.retention",
            "1day",
        ),
    ] {
        std::fs::write(&path, &text).unwrap();
        let err = Settings::load_with_env(Some(&path), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{text}: {err}");
        assert!(err.contains(says), "{text}: {err}");
    }
    assert_eq!(parse_bytes("512 MiB"), Ok(512 << 20));
    assert_eq!(parse_bytes("2TB"), Ok(2_000_000_000_000));
    assert!(parse_bytes("lots").is_err());
    // Exactly, or refused (a fresh tester's finding: truncated before).
    assert_eq!(parse_bytes("1.5 GiB"), Ok(3 << 29));
    assert_eq!(parse_bytes("0.5KB"), Ok(500));
    assert_eq!(parse_bytes("1024"), Ok(1024));
    assert_eq!(parse_bytes(".5 GB"), Ok(500_000_000));
    for bad in [
        "0.3 B",
        "1.0000001 KiB",
        "1.2.3 GB",
        ". GB",
        "99999999999 TiB",
    ] {
        assert!(parse_bytes(bad).is_err(), "{bad}");
    }
}

/// `estimates.max_jobs` (issue 43 §7): 20,000 by default, 0 refused naming it.
#[test]
fn estimates_max_jobs_defaults_and_zero_is_refused() {
    assert_eq!(Settings::defaults().estimates.max_jobs, 20_000);
    let err = Settings::load_with_env(None, env(&[("FAIRSHARE__ESTIMATES__MAX_JOBS", "0")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("estimates.max_jobs"), "{err}");
}
