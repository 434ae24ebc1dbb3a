//! The checks [`Settings::load`] runs once the sources are merged: values that would
//! only fail later (a zero interval, a backoff range upside down, a webhook without
//! a usable URL or secret, a token's user that no request could name, an open API on
//! a public address) are refused here, naming their key.

use super::{ConfigError, Settings};
use crate::resources_check::{check_amount, check_custom, check_memory_bytes, Refusal};

impl Settings {
    /// Every check, in order; the first that fails names its key.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, reason: &str| {
            Err(ConfigError::Invalid {
                key: key.to_string(),
                reason: reason.to_string(),
            })
        };
        self.preemption.validate()?;
        for (key, d) in [
            ("estimates.refresh", self.estimates.refresh),
            ("estimates.default_runtime", self.estimates.default_runtime),
            ("estimates.horizon", self.estimates.horizon),
        ] {
            if d < std::time::Duration::from_secs(1) {
                return invalid(key, "must be at least 1s");
            }
        }
        if self.estimates.max_jobs == 0 {
            return invalid("estimates.max_jobs", "must be at least 1");
        }
        self.validate_licenses()?;
        self.validate_pools()?;
        self.validate_usage()?;
        if self.server.body_idle_timeout.is_zero() {
            return invalid("server.body_idle_timeout", "must be more than 0");
        }
        if self.server.keep_alive.is_zero() {
            return invalid("server.keep_alive", "must be more than 0");
        }
        if self.server.max_body_bytes == 0 {
            return invalid("server.max_body_bytes", "must be at least 1");
        }
        if !(self.database.url.starts_with("sqlite:") || self.database.url.starts_with("postgres"))
        {
            return invalid("database.url", "must start with sqlite: or postgres://");
        }
        for (i, h) in self.server.allowed_hosts.iter().enumerate() {
            let name = h.strip_prefix("*.").unwrap_or(h);
            let ok = h == "*"
                || (!name.is_empty()
                    && name.len() <= 253
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)));
            // A wildcard over a top-level domain (`*.com`) answers names anyone can
            // register, as "*" answers every name: DNS rebinding is back. Neither is
            // allowed without tokens (the API is then open to whatever reaches it).
            let too_wide = h == "*" || (h.starts_with("*.") && !name.contains('.'));
            if ok && too_wide && self.auth.tokens.is_empty() {
                return invalid(
                    &format!("server.allowed_hosts[{i}]"),
                    "answers hosts anyone can name (DNS rebinding: any web page could use the open API); \
                     list the names the service is reached by, or configure auth.tokens",
                );
            }
            if ok && h.starts_with("*.") && !name.contains('.') {
                return invalid(
                    &format!("server.allowed_hosts[{i}]"),
                    "a wildcard must name a domain below the top level, e.g. *.svc.cluster.local",
                );
            }
            if !ok {
                return invalid(
                    &format!("server.allowed_hosts[{i}]"),
                    "must be a host name without scheme or port (letters, digits, '-', '.', '_'), \
                     optionally starting with '*.', or \"*\" for every host",
                );
            }
        }
        if self.server.workers > 512 {
            return invalid("server.workers", "must be at most 512 (0 = one per core)");
        }
        let level_ok = matches!(
            self.telemetry.level.trim(),
            "trace" | "debug" | "info" | "warn" | "error" | "off"
        ) || (self.telemetry.level.contains('=')
            && tracing_subscriber::EnvFilter::try_new(&self.telemetry.level).is_ok());
        if !level_ok {
            return invalid(
                "telemetry.level",
                "must be a level (trace, debug, info, warn, error, off) or filter directives like \"fairshare=debug,info\"",
            );
        }
        let l = &self.leadership;
        if l.renew_every.is_zero() || l.lease < l.renew_every * 2 {
            return invalid(
                "leadership.lease",
                "must be at least twice leadership.renew_every (and renew_every above 0)",
            );
        }
        let idle = self.database.idle_in_transaction_timeout;
        if idle.is_zero() || idle >= l.lease {
            return invalid(
                "database.idle_in_transaction_timeout",
                "must be above 0 and below leadership.lease",
            );
        }
        if l.catch_up_every.is_zero() {
            return invalid("leadership.catch_up_every", "must be above 0");
        }
        if self.database.max_connections == 0 {
            return invalid("database.max_connections", "must be at least 1");
        }
        if !(1..=8).contains(&self.database.intake_pipeline) {
            return invalid("database.intake_pipeline", "must be between 1 and 8");
        }
        let runs = self.scheduler.starvation_runs;
        if !(runs.is_finite() && runs >= 0.0) {
            return invalid("scheduler.starvation_runs", "must be a finite number ≥ 0");
        }
        if !(self.scheduler.age_weight.is_finite() && self.scheduler.age_weight >= 0.0) {
            return invalid("scheduler.age_weight", "must be a finite number ≥ 0");
        }
        if self.scheduler.queue_window == 0 {
            return invalid("scheduler.queue_window", "must be at least 1");
        }
        if self.scheduler.default_max_running_jobs == 0 {
            return invalid("scheduler.default_max_running_jobs", "must be at least 1");
        }
        if self.scheduler.default_max_queued_jobs == 0 {
            // A user's limit of 0 is refused by the API (PUT /v1/users); as a default it
            // would answer every submission of a user without a limit of its own with 429.
            return invalid(
                "scheduler.default_max_queued_jobs",
                "must be at least 1 (0 would refuse every submission with 429)",
            );
        }
        if self.scheduler.tick.is_zero() {
            return invalid("scheduler.tick", "must be longer than 0s");
        }
        if self.monitor.poll_interval.is_zero() {
            return invalid("monitor.poll_interval", "must be longer than 0s");
        }
        if self.monitor.idle_poll_interval.is_zero() {
            return invalid("monitor.idle_poll_interval", "must be longer than 0s");
        }
        if self.monitor.scale_up_timeout < std::time::Duration::from_secs(1) {
            return invalid(
                "monitor.scale_up_timeout",
                "must be at least 1s (Ray adds a node in tens of seconds: a shorter wait sends \
                 every job that waits for one back to the queue)",
            );
        }
        if self.monitor.scale_up_batch > std::time::Duration::from_secs(60) {
            return invalid(
                "monitor.scale_up_batch",
                "must be at most 60s (every job that waits for a node waits this long first)",
            );
        }
        if self.monitor.failure_threshold == 0 {
            return invalid("monitor.failure_threshold", "must be at least 1");
        }
        if self.dispatcher.retry_attempts == 0 {
            return invalid("dispatcher.retry_attempts", "must be at least 1");
        }
        if self.dispatcher.request_timeout.is_zero() {
            return invalid("dispatcher.request_timeout", "must be longer than 0s");
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, c) in self.clusters.iter().enumerate() {
            if c.name.trim().is_empty() {
                return invalid(&format!("clusters[{i}].name"), "must not be empty");
            }
            if !names.insert(c.name.as_str()) {
                return invalid(&format!("clusters[{i}].name"), "duplicate cluster name");
            }
            if !(c.address.starts_with("http://") || c.address.starts_with("https://")) {
                return invalid(
                    &format!("clusters[{i}].address"),
                    "must be an http:// or https:// URL of the Ray dashboard",
                );
            }
            if reqwest::Url::parse(&c.address)
                .is_ok_and(|u| !u.username().is_empty() || u.password().is_some())
            {
                return invalid(
                    &format!("clusters[{i}].address"),
                    "must not carry a user or password (it is logged and shown); use auth_token_file for Ray's token",
                );
            }
            if let Some(path) = &c.ca_file {
                let certs = std::fs::read(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))
                    .and_then(|pem| {
                        reqwest::Certificate::from_pem_bundle(&pem)
                            .map_err(|e| format!("{}: {e}", path.display()))
                    });
                match certs {
                    Ok(certs) if !certs.is_empty() => {}
                    Ok(_) => {
                        return invalid(
                            &format!("clusters[{i}].ca_file"),
                            &format!("{} holds no PEM certificate", path.display()),
                        )
                    }
                    Err(why) => return invalid(&format!("clusters[{i}].ca_file"), &why),
                }
            }
            validate_growth(i, c)?;
            if c.auth_token_file
                .as_ref()
                .is_some_and(|p| p.as_os_str().is_empty())
            {
                return invalid(
                    &format!("clusters[{i}].auth_token_file"),
                    "must be a file's path (or left out)",
                );
            }
        }
        self.validate_events()?;
        self.validate_notify()?;
        let mut seen = std::collections::BTreeSet::new();
        for (i, t) in self.auth.tokens.iter().enumerate() {
            if !t.token.bytes().all(|b| b.is_ascii_graphic()) {
                return invalid(
                    &format!("auth.tokens[{i}].token"),
                    "must be visible ASCII characters only (it travels in an HTTP header)",
                );
            }
            if !seen.insert(t.token.as_str()) {
                return invalid(
                    &format!("auth.tokens[{i}].token"),
                    "the same token is configured twice",
                );
            }
            if t.token.len() < 8 {
                return invalid(
                    &format!("auth.tokens[{i}].token"),
                    "must be at least 8 characters",
                );
            }
            if let Some(pool) = &t.pool {
                if self.pool(pool).is_none() {
                    return invalid(
                        &format!("auth.tokens[{i}].pool"),
                        "must name a [[pools]] entry",
                    );
                }
            }
            if let Some(user) = &t.user {
                // The API's rule for user ids: a token could otherwise submit as a user
                // that no request can name.
                if let Some(why) = crate::user_id::problem(user) {
                    return invalid(
                        &format!("auth.tokens[{i}].user"),
                        &format!("must be a user id: {why}"),
                    );
                }
            }
        }
        for (i, n) in self.auth.trusted_networks.iter().enumerate() {
            let key = format!("auth.trusted_networks[{i}]");
            match super::Network::parse(n) {
                Err(why) => return invalid(&key, &why),
                Ok(net) if net.prefix == 0 => {
                    return invalid(
                        &key,
                        "covers every address: that opens the service to anyone who can \
                         reach it; list the gateway's own networks",
                    )
                }
                Ok(_) => {}
            }
        }
        let nets: Vec<super::Network> = self
            .auth
            .trusted_networks
            .iter()
            .filter_map(|n| super::Network::parse(n).ok())
            .collect();
        if super::Network::cover_everything(&nets) {
            return invalid(
                "auth.trusted_networks",
                "together these networks cover every address (as 0.0.0.0/0 or ::/0 \
                 would): that opens the service to anyone who can reach it; list the \
                 gateway's own networks",
            );
        }
        if self.ray_compat.max_package_bytes == 0 {
            return invalid("ray_compat.max_package_bytes", "must be at least 1");
        }
        self.validate_ray_compat()?;
        self.validate_secrets()?;
        if self.auth.tokens.is_empty() && !self.server.bind.ip().is_loopback() {
            return invalid(
                "auth.tokens",
                "no token configured: the API would be open to the network; \
                 configure [[auth.tokens]] or bind to a loopback address",
            );
        }
        Ok(())
    }

    /// `secrets.runtime_env_keys` is required once tokens are configured: a service
    /// with tokens guards users' jobs, and their runtime_envs hold those users' API
    /// tokens. (Each key's form is checked as it is read: `secrets::KeyList`.) Also
    /// run by `Application::build`, for settings changed after loading.
    pub fn validate_secrets(&self) -> Result<(), ConfigError> {
        if !self.auth.tokens.is_empty() && self.secrets.runtime_env_keys.0.is_empty() {
            return Err(ConfigError::Invalid {
                key: "secrets.runtime_env_keys".into(),
                reason: "no key configured, but auth.tokens are: runtime_envs (users' API \
                         tokens in env_vars) would be stored in plain text; add a key \
                         (`openssl rand -base64 32`), kept as long as the jobs it seals"
                    .into(),
            });
        }
        Ok(())
    }

    /// The checks of `ray_compat`'s identity rules and default resources.
    fn validate_ray_compat(&self) -> Result<(), ConfigError> {
        use super::IdentityRule;
        let invalid = |key: String, reason: String| Err(ConfigError::Invalid { key, reason });
        let r = &self.ray_compat;
        if r.user_rules.is_empty() {
            return invalid(
                "ray_compat.user_rules".into(),
                "must have at least one rule (the default is [{from = \"metadata\", key = \"fairshare.user\"}])".into(),
            );
        }
        for (list, rules) in [
            ("user_rules", &r.user_rules),
            ("group_rules", &r.group_rules),
        ] {
            for (i, rule) in rules.iter().enumerate() {
                let key = |k: &str| format!("ray_compat.{list}[{i}].{k}");
                match rule {
                    IdentityRule::Metadata { key: k } if k.trim().is_empty() => {
                        return invalid(key("key"), "must not be empty".into())
                    }
                    IdentityRule::EnvVar { name } | IdentityRule::EnvVarHash { name, .. }
                        if name.trim().is_empty() =>
                    {
                        return invalid(key("name"), "must not be empty".into())
                    }
                    IdentityRule::EnvVarHash { secret, .. } if secret.len() < 16 => {
                        return invalid(
                            key("secret"),
                            "must be at least 16 bytes (it keys the HMAC-SHA-256 of the variable)"
                                .into(),
                        )
                    }
                    IdentityRule::EnvVarHash { secret, .. }
                        if secret.chars().all(|c| secret.starts_with(c)) =>
                    {
                        // Sixteen spaces passed the length (a fresh tester's finding):
                        // one character repeated keys nothing a guess cannot find.
                        return invalid(
                            key("secret"),
                            "must be a random secret, not one character repeated \
                             (`openssl rand -hex 32`)"
                                .into(),
                        );
                    }
                    IdentityRule::Default { value } => {
                        if let Some(why) = crate::user_id::problem(value) {
                            return invalid(key("value"), format!("must be an id: {why}"));
                        }
                    }
                    _ => {}
                }
                if i + 1 < rules.len() && matches!(rule, IdentityRule::Default { .. }) {
                    return invalid(
                        key("from"),
                        "a default rule must be the last (the rules after it would never be tried)"
                            .into(),
                    );
                }
            }
        }
        let d = &r.default_resources;
        for (k, v) in [("cpu", d.cpu), ("gpu", d.gpu)] {
            let ok = v.is_finite()
                && (0.0..=1e6).contains(&v)
                && format!("{v}")
                    .split('.')
                    .nth(1)
                    .is_none_or(|f| f.len() <= 4);
            if !ok {
                return invalid(
                    format!("ray_compat.default_resources.{k}"),
                    "must be 0 to 1e6 with at most 4 decimal places".into(),
                );
            }
        }
        if d.cpu <= 0.0 && d.gpu <= 0.0 {
            return invalid(
                "ray_compat.default_resources.cpu".into(),
                "cpu or gpu must be above 0 (fair share cannot count a job that asks for nothing)"
                    .into(),
            );
        }
        if d.memory_bytes > 1 << 53 {
            return invalid(
                "ray_compat.default_resources.memory_bytes".into(),
                "must be at most 2^53".into(),
            );
        }
        Ok(())
    }

    /// The checks of `[notify]`.
    fn validate_notify(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, reason: &str| {
            Err(ConfigError::Invalid {
                key: key.to_string(),
                reason: reason.to_string(),
            })
        };
        let n = &self.notify;
        if !n.url.is_empty() {
            let ok = reqwest::Url::parse(&n.url).is_ok_and(|u| {
                matches!(u.scheme(), "http" | "https")
                    && u.host().is_some()
                    && u.query().is_none()
                    && u.fragment().is_none()
            });
            if !ok {
                return invalid(
                    "notify.url",
                    "must be an http:// or https:// URL without query or fragment, e.g. http://fairshare:8080",
                );
            }
            // The URL goes into every job's shell command (single-quoted) and to the
            // watcher's urllib, which takes no credentials: only characters that need
            // no quoting, and no user or password (they would be shown to every job
            // and in GET /v1/scheduler, and never work).
            if reqwest::Url::parse(&n.url)
                .is_ok_and(|u| !u.username().is_empty() || u.password().is_some())
            {
                return invalid(
                    "notify.url",
                    "must not carry a user or password (the watcher cannot send them, and every job's command would show them)",
                );
            }
            if !n
                .url
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b":/._-~%[]".contains(&b))
            {
                return invalid(
                    "notify.url",
                    "may hold only letters, digits and : / . _ - ~ % [ ] (it is put into every job's shell command); no spaces or quotes",
                );
            }
        }
        if !n.key.is_empty() && n.key.len() < 16 {
            return invalid(
                "notify.key",
                "must be at least 16 bytes (or empty: a random key)",
            );
        }
        Ok(())
    }

    /// The checks of `[[licenses]]`; registers each name as a custom resource.
    fn validate_licenses(&self) -> Result<(), ConfigError> {
        let invalid = |key: String, reason: String| Err(ConfigError::Invalid { key, reason });
        for (i, l) in self.licenses.iter().enumerate() {
            if let Err(e) = crate::policy::custom::check_name(&l.name) {
                return invalid(format!("licenses[{i}].name"), e.to_string());
            }
            if self.licenses[..i].iter().any(|o| o.name == l.name) {
                return invalid(
                    format!("licenses[{i}].name"),
                    "duplicate license name".into(),
                );
            }
            if !(l.count.is_finite() && l.count > 0.0 && l.count <= 1.0e6) {
                return invalid(
                    format!("licenses[{i}].count"),
                    format!(
                        "must be above 0 and at most 1e6 (as a job's request), not {}",
                        l.count
                    ),
                );
            }
            if let Err(e) = crate::policy::custom::slot(&l.name) {
                return invalid(format!("licenses[{i}].name"), e.to_string());
            }
        }
        Ok(())
    }

    /// The checks of `[[pools]]` and `[admission]`: names unique and not a cluster's,
    /// capacities above 0 in known or registrable resources (custom names are
    /// registered here, like licenses').
    fn validate_pools(&self) -> Result<(), ConfigError> {
        let invalid = |key: String, reason: String| Err(ConfigError::Invalid { key, reason });
        if self.admission.lease < std::time::Duration::from_secs(1) {
            return invalid("admission.lease".into(), "must be at least 1s".into());
        }
        if self.pools.len() > 1000 {
            return invalid("pools".into(), "at most 1000 pools".into());
        }
        for (i, p) in self.pools.iter().enumerate() {
            let ok_char = |c: char| c.is_ascii_alphanumeric() || "_.-".contains(c);
            if p.name.is_empty() || p.name.len() > 64 || !p.name.chars().all(ok_char) {
                return invalid(
                    format!("pools[{i}].name"),
                    "must be 1 to 64 characters from A-Z a-z 0-9 _ . -".into(),
                );
            }
            if self.pools[..i].iter().any(|o| o.name == p.name) {
                return invalid(format!("pools[{i}].name"), "duplicate pool name".into());
            }
            if self.clusters.iter().any(|c| c.name == p.name) {
                return invalid(
                    format!("pools[{i}].name"),
                    format!("{:?} is the name of a [[clusters]] entry", p.name),
                );
            }
            if p.capacity.is_empty() {
                return invalid(
                    format!("pools[{i}].capacity"),
                    "must name at least one resource, e.g. { clusters = 20 }".into(),
                );
            }
            for (name, &amount) in &p.capacity {
                let key = format!("pools[{i}].capacity.{name}");
                if !(amount.is_finite() && amount > 0.0) {
                    return invalid(
                        key,
                        format!("must be a finite number above 0, not {amount}"),
                    );
                }
                if matches!(name.as_str(), "cpu" | "gpu" | "memory_bytes") {
                    continue;
                }
                if let Err(e) = crate::policy::custom::slot(name) {
                    return invalid(key, e.to_string());
                }
            }
        }
        Ok(())
    }

    /// The checks of `[usage]` and `[[sizes]]` (issue 48): retentions of at least a
    /// day (hourly rows no longer than daily ones); sizes named as pools are, unique,
    /// asking for something (cpu > 0, gpu > 0 or a custom resource), amounts finite
    /// and not negative, custom names registrable.
    fn validate_usage(&self) -> Result<(), ConfigError> {
        let invalid = |key: String, reason: String| Err(ConfigError::Invalid { key, reason });
        let u = &self.usage;
        let day = std::time::Duration::from_secs(86_400);
        if u.retention < day {
            return invalid("usage.retention".into(), "must be at least 1day".into());
        }
        if u.hourly_retention < day {
            return invalid(
                "usage.hourly_retention".into(),
                "must be at least 1day".into(),
            );
        }
        if u.hourly_retention > u.retention {
            return invalid(
                "usage.hourly_retention".into(),
                "must not be longer than usage.retention".into(),
            );
        }
        if u.prune_interval < std::time::Duration::from_secs(1) {
            return invalid("usage.prune_interval".into(), "must be at least 1s".into());
        }
        if self.sizes.len() > 1000 {
            return invalid("sizes".into(), "at most 1000 sizes".into());
        }
        for (i, z) in self.sizes.iter().enumerate() {
            let ok_char = |c: char| c.is_ascii_alphanumeric() || "_.-".contains(c);
            if z.name.is_empty() || z.name.len() > 64 || !z.name.chars().all(ok_char) {
                return invalid(
                    format!("sizes[{i}].name"),
                    "must be 1 to 64 characters from A-Z a-z 0-9 _ . -".into(),
                );
            }
            if self.sizes[..i].iter().any(|o| o.name == z.name) {
                return invalid(format!("sizes[{i}].name"), "duplicate size name".into());
            }
            // The rules of a job's own resources (`POST /v1/jobs`): a size no job
            // may ask for would refuse every submission naming it (a fresh tester's
            // finding: 0.00001 CPU, 2,000,000 CPU and 9000 TiB were taken at start).
            let as_size = |r: Refusal| ConfigError::Invalid {
                key: r.field,
                reason: r.reason,
            };
            let key = |k: &str| format!("sizes[{i}].{k}");
            check_amount(&key("cpu"), z.cpu).map_err(as_size)?;
            check_amount(&key("gpu"), z.gpu).map_err(as_size)?;
            check_memory_bytes(&key("memory_bytes"), z.memory_bytes).map_err(as_size)?;
            check_custom(&key("custom"), z.custom.clone()).map_err(as_size)?;
            if z.cpu <= 0.0 && z.gpu <= 0.0 && z.custom.is_empty() {
                return invalid(
                    format!("sizes[{i}]"),
                    "must ask for cpu > 0, gpu > 0 or a custom resource".into(),
                );
            }
        }
        Ok(())
    }

    /// The checks of `[events]` and `[[webhooks]]`.
    fn validate_events(&self) -> Result<(), ConfigError> {
        let invalid = |key: String, reason: &str| {
            Err(ConfigError::Invalid {
                key,
                reason: reason.to_string(),
            })
        };
        let e = &self.events;
        for (key, d) in [
            ("events.poll_interval", e.poll_interval),
            ("events.keep_alive", e.keep_alive),
            ("events.webhook_timeout", e.webhook_timeout),
            (
                "events.webhook_retry_initial_backoff",
                e.webhook_retry_initial_backoff,
            ),
        ] {
            if d.is_zero() {
                return invalid(key.to_string(), "must be longer than 0s");
            }
        }
        if e.webhook_retry_max_backoff < e.webhook_retry_initial_backoff {
            return invalid(
                "events.webhook_retry_max_backoff".into(),
                "must be at least events.webhook_retry_initial_backoff",
            );
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, w) in self.webhooks.iter().enumerate() {
            if w.name.trim().is_empty() || w.name.chars().count() > 128 {
                return invalid(format!("webhooks[{i}].name"), "must be 1 to 128 characters");
            }
            if !names.insert(w.name.as_str()) {
                return invalid(format!("webhooks[{i}].name"), "duplicate webhook name");
            }
            if reqwest::Url::parse(&w.url)
                .map(|u| !matches!(u.scheme(), "http" | "https"))
                .unwrap_or(true)
            {
                return invalid(
                    format!("webhooks[{i}].url"),
                    "must be an http:// or https:// URL",
                );
            }
            if w.events.as_ref().is_some_and(Vec::is_empty) {
                return invalid(
                    format!("webhooks[{i}].events"),
                    "must name at least one status; leave it out for every transition",
                );
            }
            if w.secret.len() < 16 {
                return invalid(
                    format!("webhooks[{i}].secret"),
                    "must be at least 16 bytes (it keys the HMAC-SHA256 signature)",
                );
            }
        }
        Ok(())
    }
}

/// The checks of an autoscaling cluster's `head` and `node_types` (issue 44): resource
/// names and amounts as a pool's (finite, above 0; custom names registered), a name per
/// type, unique, `max_count ≥ max(min_count, 1)`.
fn validate_growth(i: usize, c: &super::ClusterSettings) -> Result<(), ConfigError> {
    let invalid = |key: String, reason: String| Err(ConfigError::Invalid { key, reason });
    // Per node: at most a million cores, GPUs or units of a custom resource (what a job
    // may ask on the API) and 2^53 bytes (exact in the f64 the policy counts in; 8 PiB),
    // bytes whole. The head may offer 0 of something (`{ cpu = 0 }`: it takes no work).
    let check_map = |prefix: String,
                     map: &std::collections::BTreeMap<String, f64>,
                     zero_ok: bool|
     -> Result<(), ConfigError> {
        for (name, &amount) in map {
            let key = format!("{prefix}.{name}");
            // The name first: `memory = 8e9` is a misspelt memory_bytes, not too many
            // units of a custom resource (a fresh tester's finding).
            if !matches!(name.as_str(), "cpu" | "gpu" | "memory_bytes") {
                // A near miss of a built-in name (`cpus`, `num_gpus`, `mem`) is a typo,
                // not a custom resource no job asks for (a fresh tester's finding).
                if let Some(meant) = built_in_meant(name) {
                    return invalid(
                        key,
                        format!("is a misspelt {meant}: use cpu, gpu or memory_bytes (cores, GPUs, bytes)"),
                    );
                }
                if let Err(e) = crate::policy::custom::slot(name) {
                    return invalid(key, e.to_string());
                }
            }
            let floor_ok = if zero_ok { amount >= 0.0 } else { amount > 0.0 };
            if !(amount.is_finite() && floor_ok) {
                let least = if zero_ok { "0 or more" } else { "above 0" };
                return invalid(
                    key,
                    format!("must be a finite number {least}, not {amount}"),
                );
            }
            if name == "memory_bytes" {
                if amount > 9_007_199_254_740_992.0 || amount.fract() != 0.0 {
                    return invalid(
                        key,
                        format!("must be a whole number of bytes up to 2^53, not {amount}"),
                    );
                }
                continue;
            }
            if amount > 1e6 {
                return invalid(
                    key,
                    format!("must be at most 1000000 per node, not {amount}"),
                );
            }
        }
        Ok(())
    };
    if !c.head.is_empty() && c.node_types.is_empty() {
        return invalid(
            format!("clusters[{i}].head"),
            "is read only for an autoscaling cluster: set [[clusters.node_types]] too, or \
             leave head out (a fixed cluster is as large as Ray reports it)"
                .into(),
        );
    }
    check_map(format!("clusters[{i}].head"), &c.head, true)?;
    for (j, t) in c.node_types.iter().enumerate() {
        let at = format!("clusters[{i}].node_types[{j}]");
        if t.name.trim().is_empty() {
            return invalid(format!("{at}.name"), "must not be empty".into());
        }
        if t.name == "head" {
            return invalid(
                format!("{at}.name"),
                "\"head\" names the head node (clusters.head); give the type another name".into(),
            );
        }
        if t.max_count > 100_000 {
            return invalid(
                format!("{at}.max_count"),
                format!("must be at most 100000, not {}", t.max_count),
            );
        }
        if c.node_types[..j].iter().any(|o| o.name == t.name) {
            return invalid(
                format!("{at}.name"),
                format!("duplicate node type {:?}", t.name),
            );
        }
        if t.resources.is_empty() {
            return invalid(
                format!("{at}.resources"),
                "must name at least one resource, e.g. { cpu = 4, memory_bytes = 16e9 }".into(),
            );
        }
        check_map(format!("{at}.resources"), &t.resources, false)?;
        if t.max_count == 0 {
            return invalid(format!("{at}.max_count"), "must be at least 1".into());
        }
        if t.max_count < t.min_count {
            return invalid(
                format!("{at}.max_count"),
                format!("must be at least min_count ({})", t.min_count),
            );
        }
    }
    Ok(())
}

/// The built-in resource a node type's resource name misspells, if it does: `cpus`,
/// `CPU`, `num_cpus`, `num-cpus` → `cpu`; the same for GPUs; `mem`, `memory` →
/// `memory_bytes` (Ray's `memory` is a custom-looking name for bytes). `None` for any
/// other name (a custom resource).
fn built_in_meant(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase().replace('-', "_");
    let bare = lower.strip_prefix("num_").unwrap_or(&lower);
    match bare {
        "cpu" | "cpus" | "cores" => Some("cpu"),
        "gpu" | "gpus" => Some("gpu"),
        "mem" | "memory" | "memory_byte" | "memorybytes" => Some("memory_bytes"),
        _ => None,
    }
}
