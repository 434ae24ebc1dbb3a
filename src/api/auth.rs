//! Bearer-token auth (DESIGN §4): tokens from config with role `submitter` or `admin`.
//!
//! Tokens are compared in constant time and never logged. With no token configured the
//! API is open (the config refuses that on a non-loopback bind), and a change asked
//! for by a browser page of another origin is refused ([`cross_origin`]): a bearer
//! token is never sent by a browser on its own, but an open API on loopback is
//! reachable from any page a browser on that machine shows (DESIGN §4, "Requests
//! from browsers").

use actix_web::HttpRequest;
use subtle::ConstantTimeEq;

use super::error::ApiError;
use crate::config::{Network, Role, TokenSettings};

/// The configured tokens.
#[derive(Clone, Default)]
pub struct Auth {
    tokens: Vec<TokenSettings>,
    /// `auth.trusted_networks`, and the role their header-less requests act with.
    trusted: Vec<Network>,
    trusted_role: Option<Role>,
}

impl Auth {
    /// Auth over `tokens`; empty = open.
    pub fn new(tokens: Vec<TokenSettings>) -> Self {
        Auth {
            tokens,
            trusted: Vec::new(),
            trusted_role: None,
        }
    }

    /// With trusted access (`auth.trusted_networks`, DESIGN §4): a request without an
    /// `Authorization` header whose TCP peer is in `networks` acts with `role` and no
    /// user. The peer address only: no forwarded-for header is believed.
    #[must_use]
    pub fn with_trusted(mut self, networks: Vec<Network>, role: Role) -> Self {
        self.trusted_role = (!networks.is_empty()).then_some(role);
        self.trusted = networks;
        self
    }

    /// Checks that the request's bearer token grants at least `needed`.
    ///
    /// Errors: 401 without a known token, 403 when its role is too low. `action` names
    /// what was refused, e.g. "change users".
    pub fn require(
        &self,
        req: &HttpRequest,
        needed: Role,
        action: &'static str,
    ) -> Result<Role, ApiError> {
        self.identify(req, needed, action).map(|id| id.role)
    }

    /// [`Auth::require`], also telling the token's `user` (config `auth.tokens[].user`;
    /// `None` for a token that acts for many users, and with no token configured).
    pub fn identify(
        &self,
        req: &HttpRequest,
        needed: Role,
        action: &'static str,
    ) -> Result<Identity, ApiError> {
        if self.tokens.is_empty() {
            if !req.method().is_safe() && cross_origin(req) {
                return Err(ApiError::CrossOrigin(action));
            }
            return Ok(Identity {
                role: Role::Admin,
                user: None,
                pool: None,
            });
        }
        let header = req.headers().get(actix_web::http::header::AUTHORIZATION);
        if header.is_none() {
            if let (Some(role), Some(peer)) = (self.trusted_role, req.peer_addr()) {
                if self.trusted.iter().any(|n| n.contains(peer.ip())) {
                    // Let in without a token, as an open service lets everyone in: a
                    // browser page of another origin must not use that (a fresh
                    // tester's finding: a cross-site, body-less POST cancelled a job).
                    if !req.method().is_safe() && cross_origin(req) {
                        return Err(ApiError::CrossOrigin(action));
                    }
                    return if role >= needed {
                        Ok(Identity {
                            role,
                            user: None,
                            pool: None,
                        })
                    } else {
                        Err(ApiError::Forbidden(action))
                    };
                }
            }
        }
        let presented = header
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, rest) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
            })
            .ok_or(ApiError::Unauthorized)?;
        // Check every token, without stopping early, so timing does not tell which matched.
        let mut found = None;
        for t in &self.tokens {
            if bool::from(t.token.as_bytes().ct_eq(presented.as_bytes())) {
                found = Some(t);
            }
        }
        let token = found.ok_or(ApiError::Unauthorized)?;
        if token.role >= needed {
            Ok(Identity {
                role: token.role,
                user: token.user.clone(),
                pool: token.pool.clone(),
            })
        } else {
            Err(ApiError::Forbidden(action))
        }
    }
}

/// Whether `req` comes from a browser page of another origin than this service:
/// `Sec-Fetch-Site` (sent by browsers since 2020–2023) other than `same-origin` or
/// `none` (typed in, a bookmark); without it, an `Origin` whose host and port are not
/// the request's `Host` (`Origin: null` included). A request with neither header
/// is not a browser's cross-origin request (curl, the Python client, Ray's client).
pub fn cross_origin(req: &HttpRequest) -> bool {
    let header = |name| {
        req.headers().get(name).map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .trim()
                .to_ascii_lowercase()
        })
    };
    if let Some(site) = header("sec-fetch-site") {
        return !matches!(site.as_str(), "same-origin" | "none");
    }
    let Some(origin) = header("origin") else {
        return false;
    };
    let authority = origin
        .split_once("://")
        .map(|(_, rest)| rest.trim_end_matches('/'));
    match (authority, header("host")) {
        (Some(authority), Some(host)) => authority != host,
        _ => true,
    }
}

/// Who a request comes from: the token's role, and the user it acts as if it names one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub role: Role,
    /// The token's own user; `None` when it acts for many users (or none is configured).
    pub user: Option<String>,
    /// The pool the token is confined to (a pool's runner, issue 30); `None`: any.
    pub pool: Option<String>,
}

impl Identity {
    /// Whether this identity may see and act on `user`'s jobs, on `/v1` as on `/api/`:
    /// a token with a user only its own; a token without one (a gateway, an admin)
    /// every user's.
    pub fn may_access(&self, user: &str) -> bool {
        self.user.as_deref().is_none_or(|own| own == user)
    }

    /// Whether this identity may see and act on job `j`: its user ([`Self::may_access`])
    /// and, for a token confined to a pool, that pool's jobs only.
    pub fn may_access_job(&self, j: &entity::job::Model) -> bool {
        self.may_access(&j.user_id)
            && self
                .pool
                .as_deref()
                .is_none_or(|own| j.pool.as_deref() == Some(own))
    }

    /// The pool a submission of this identity may name: 422 on `pool` when the token
    /// is confined to another (or the job names none).
    pub fn check_pool(&self, pool: Option<&str>) -> Result<(), ApiError> {
        match &self.pool {
            Some(own) if pool != Some(own.as_str()) => Err(ApiError::invalid(
                "pool",
                format!("this token acts only for pool {own:?}"),
            )),
            _ => Ok(()),
        }
    }

    /// The namespace of the packages this identity uploads and its jobs use (Ray's
    /// Jobs API, `ray_packages.owner`): its own user, or `""`, the one namespace that
    /// every token without a user (a gateway acting for many users, an admin) and an
    /// open service share. A package in one namespace is invisible to every other.
    pub fn package_owner(&self) -> &str {
        self.user.as_deref().unwrap_or("")
    }

    /// Checks a user a request names (a body's `user`, a `user=` filter): 422 naming
    /// `field` when this token has another user.
    pub fn check_user(&self, field: &str, user: &str) -> Result<(), ApiError> {
        match &self.user {
            Some(own) if own != user => Err(ApiError::invalid(
                field,
                format!("this token acts only for user {own:?}"),
            )),
            _ => Ok(()),
        }
    }

    /// The user filter a read gets: the user it names (422 on `field` when this token
    /// has another), or, for a token with a user, that user even when none is named.
    pub fn user_filter(
        &self,
        field: &str,
        named: Option<String>,
    ) -> Result<Option<String>, ApiError> {
        if let Some(u) = &named {
            self.check_user(field, u)?;
        }
        Ok(self.user.clone().or(named))
    }

    /// The pool filter a read gets (`pool=` on `GET /v1/jobs` and `/v1/events`): the
    /// pool it names, 1–64 characters (422 on `field` otherwise, or when this token is
    /// confined to another pool), or, for a token confined to a pool, that pool even
    /// when none is named.
    pub fn pool_filter(
        &self,
        field: &str,
        named: Option<String>,
    ) -> Result<Option<String>, ApiError> {
        if let Some(p) = &named {
            if p.is_empty() || p.len() > 64 {
                return Err(ApiError::invalid(field, "must be 1 to 64 characters"));
            }
        }
        match (&self.pool, named) {
            (Some(own), Some(p)) if &p != own => Err(ApiError::invalid(
                field,
                format!("this token acts only for pool {own:?}"),
            )),
            (Some(own), _) => Ok(Some(own.clone())),
            (None, named) => Ok(named),
        }
    }
}
