//! Who a job on Ray's Jobs API belongs to, and its group, from what the client already
//! sends (DESIGN §4, "Who a job belongs to"; issue 31): a token with a user always
//! submits as that user; otherwise `ray_compat.user_rules` are tried in order (a
//! metadata key, a `runtime_env.env_vars` variable as written or as a keyed hash, a
//! default user), and none matching is 422. `ray_compat.group_rules` give the group
//! the same way (none matching: no group).
//!
//! The keyed hash (`env_var_hash`) is `u-` + the first 32 hex digits (128 bits) of
//! HMAC-SHA-256(secret, value): users whose only distinct mark is a secret (the
//! qiskit-serverless gateway's `QISKIT_IBM_TOKEN`) get distinct, stable ids, and
//! neither the secret nor anything it can be read back from is stored.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

use crate::api::auth::Identity;
use crate::api::ApiError;
use crate::config::IdentityRule;

/// The metadata key under which a job's group is kept (and shown).
pub const GROUP_KEY: &str = "fairshare.group";

/// The metadata key naming the user in the default rules.
pub const USER_KEY: &str = "fairshare.user";

/// Whether the default user has been logged (once per process).
static DEFAULT_USER_SAID: AtomicBool = AtomicBool::new(false);

/// `u-` + 32 hex digits of HMAC-SHA-256(`secret`, `value`).
pub fn keyed_id(secret: &str, value: &str) -> String {
    let mac = crate::mac::hmac_sha256(secret.as_bytes(), &[value.as_bytes()]);
    format!("u-{}", crate::mac::hex(&mac[..16]))
}

/// What one rule reads, with the field it comes from (for errors): `None` when the
/// request does not carry it.
fn apply(
    rule: &IdentityRule,
    metadata: Option<&BTreeMap<String, String>>,
    runtime_env: Option<&Value>,
) -> Option<(String, String)> {
    let env_var = |name: &str| {
        runtime_env?
            .get("env_vars")?
            .get(name)?
            .as_str()
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    match rule {
        IdentityRule::Metadata { key } => metadata?
            .get(key)
            .map(|v| (v.clone(), format!("metadata.{key}"))),
        IdentityRule::EnvVar { name } => {
            env_var(name).map(|v| (v, format!("runtime_env.env_vars.{name}")))
        }
        IdentityRule::EnvVarHash { name, secret } => {
            env_var(name).map(|v| (keyed_id(secret, &v), format!("runtime_env.env_vars.{name}")))
        }
        IdentityRule::Default { value } => Some((value.clone(), "ray_compat.user_rules".into())),
    }
}

/// `runtime_env.env_vars`, when present, is what Ray takes: an object of strings.
/// Both submit routes check it before anything reads it (on Ray's API before the
/// rules, so that none passes over a mistyped variable to the next: a fresh tester's
/// finding, `"QISKIT_IBM_TOKEN": 123` put the job in the default user's queue).
/// Errors: 422 naming `runtime_env.env_vars` (not an object) or the variable (not a
/// string).
pub(crate) fn check_env_vars(runtime_env: Option<&Value>) -> Result<(), ApiError> {
    let Some(vars) = runtime_env.and_then(|e| e.get("env_vars")) else {
        return Ok(());
    };
    let Some(vars) = vars.as_object() else {
        return Err(ApiError::invalid(
            "runtime_env.env_vars",
            "must be an object of strings (variable name to value)",
        ));
    };
    match vars.iter().find(|(_, v)| !v.is_string()) {
        Some((name, _)) => Err(ApiError::invalid(
            format!("runtime_env.env_vars.{name}"),
            "must be a string",
        )),
        None => Ok(()),
    }
}

/// The first of `rules` that names an id, checked as a user id (422 naming the field
/// it came from otherwise). `runtime_env.env_vars` is checked already
/// ([`check_env_vars`]).
fn first(
    rules: &[IdentityRule],
    metadata: Option<&BTreeMap<String, String>>,
    runtime_env: Option<&Value>,
) -> Result<Option<(String, String, bool)>, ApiError> {
    for rule in rules {
        if let Some((id, field)) = apply(rule, metadata, runtime_env) {
            if let Some(why) = crate::user_id::problem(&id) {
                return Err(ApiError::invalid(field, why));
            }
            return Ok(Some((
                id,
                field,
                matches!(rule, IdentityRule::Default { .. }),
            )));
        }
    }
    Ok(None)
}

/// The user a submit acts for. A token with a user: that user (a metadata rule's key
/// may repeat it but not name another). Otherwise the first of `rules` that names one.
///
/// Errors: 422 when no rule names a user (naming the first rule's field), when a rule's
/// value is not a user id, or when a confined token's metadata names another user.
pub fn user_of(
    rules: &[IdentityRule],
    who: &Identity,
    metadata: Option<&BTreeMap<String, String>>,
    runtime_env: Option<&Value>,
) -> Result<String, ApiError> {
    if let Some(own) = &who.user {
        for rule in rules {
            if let IdentityRule::Metadata { key } = rule {
                if let Some(named) = metadata.and_then(|m| m.get(key)) {
                    if named != own {
                        return Err(ApiError::invalid(
                            format!("metadata.{key}"),
                            format!(
                                "this token submits as user {own:?}; it cannot submit for {named:?}"
                            ),
                        ));
                    }
                }
            }
        }
        return Ok(own.clone());
    }
    match first(rules, metadata, runtime_env)? {
        Some((user, _, is_default)) => {
            if is_default && !DEFAULT_USER_SAID.swap(true, Ordering::Relaxed) {
                tracing::info!(
                    user = %user,
                    "a Ray-API job names no user its rules find: it goes to the default user, \
                     whose one queue every such job shares (ray_compat.user_rules; said once)"
                );
            }
            Ok(user)
        }
        None => {
            let field = match rules.first() {
                Some(IdentityRule::Metadata { key }) => format!("metadata.{key}"),
                Some(IdentityRule::EnvVar { name } | IdentityRule::EnvVarHash { name, .. }) => {
                    format!("runtime_env.env_vars.{name}")
                }
                _ => format!("metadata.{USER_KEY}"),
            };
            Err(ApiError::invalid(
                field,
                format!(
                    "no user: this token acts for many users, and none of the rules that name \
                     a job's user ({}) finds one in this job (configure ray_compat.user_rules, \
                     or the token with a user)",
                    rules
                        .iter()
                        .map(|r| format!("{r:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ))
        }
    }
}

/// The group of a submit: the first of `rules` that names one (`None` if none does).
///
/// Errors: 422 naming the field when the value is not an id (the user id rule).
pub fn group_of(
    rules: &[IdentityRule],
    metadata: Option<&BTreeMap<String, String>>,
    runtime_env: Option<&Value>,
) -> Result<Option<String>, ApiError> {
    Ok(first(rules, metadata, runtime_env)?.map(|(g, _, _)| g))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Role;
    use serde_json::json;

    fn who(user: Option<&str>) -> Identity {
        Identity {
            role: Role::Submitter,
            user: user.map(str::to_string),
            pool: None,
        }
    }

    fn md(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn rules() -> Vec<IdentityRule> {
        vec![
            IdentityRule::Metadata {
                key: USER_KEY.into(),
            },
            IdentityRule::EnvVarHash {
                name: "QISKIT_IBM_TOKEN".into(),
                secret: "0123456789abcdef".into(),
            },
            IdentityRule::Default {
                value: "shared".into(),
            },
        ]
    }

    #[test]
    fn rules_are_tried_in_order_and_a_confined_token_always_wins() {
        let env = |t: &str| json!({"env_vars": {"QISKIT_IBM_TOKEN": t}});
        let r = rules();
        assert_eq!(
            user_of(
                &r,
                &who(None),
                Some(&md(&[(USER_KEY, "bob")])),
                Some(&env("a"))
            )
            .unwrap(),
            "bob"
        );
        let a = user_of(&r, &who(None), None, Some(&env("token-of-a"))).unwrap();
        let b = user_of(&r, &who(None), None, Some(&env("token-of-b"))).unwrap();
        assert_ne!(a, b, "two secrets, two users");
        assert_eq!(a, keyed_id("0123456789abcdef", "token-of-a"));
        assert!(
            a.starts_with("u-") && a.len() == 34 && !a.contains("token"),
            "{a}"
        );
        assert_eq!(user_of(&r, &who(None), None, None).unwrap(), "shared");
        assert_eq!(
            user_of(&r, &who(Some("alice")), None, Some(&env("x"))).unwrap(),
            "alice"
        );
        let other = user_of(
            &r,
            &who(Some("alice")),
            Some(&md(&[(USER_KEY, "bob")])),
            None,
        )
        .unwrap_err();
        assert!(
            matches!(other, ApiError::Invalid { ref field, .. } if field == "metadata.fairshare.user")
        );
    }

    #[test]
    fn no_matching_rule_is_422_naming_the_first_rules_field_and_bad_values_name_theirs() {
        let r = vec![IdentityRule::EnvVar {
            name: "GATEWAY_USER".into(),
        }];
        let none = user_of(&r, &who(None), None, Some(&json!({"env_vars": {}}))).unwrap_err();
        assert!(
            matches!(none, ApiError::Invalid { ref field, .. } if field == "runtime_env.env_vars.GATEWAY_USER")
        );
        let bad = user_of(
            &r,
            &who(None),
            None,
            Some(&json!({"env_vars": {"GATEWAY_USER": "two words"}})),
        )
        .unwrap_err();
        assert!(
            matches!(bad, ApiError::Invalid { ref field, .. } if field == "runtime_env.env_vars.GATEWAY_USER")
        );
    }

    #[test]
    fn a_group_comes_from_its_own_rules_or_is_none() {
        let r = vec![IdentityRule::EnvVar {
            name: "QISKIT_IBM_INSTANCE".into(),
        }];
        let env = json!({"env_vars": {"QISKIT_IBM_INSTANCE": "hub/group/project"}});
        assert_eq!(
            group_of(&r, None, Some(&env)).unwrap().as_deref(),
            Some("hub/group/project")
        );
        assert_eq!(group_of(&r, None, None).unwrap(), None);
        assert_eq!(group_of(&[], None, Some(&env)).unwrap(), None);
    }
}
