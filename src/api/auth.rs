//! Bearer-token auth (DESIGN §4): tokens from config with role `submitter` or `admin`.
//!
//! Tokens are compared in constant time and never logged. With no token configured the
//! API is open (the config refuses that on a non-loopback bind).

use actix_web::HttpRequest;
use subtle::ConstantTimeEq;

use super::error::ApiError;
use crate::config::{Role, TokenSettings};

/// The configured tokens.
#[derive(Clone, Default)]
pub struct Auth {
    tokens: Vec<TokenSettings>,
}

impl Auth {
    /// Auth over `tokens`; empty = open.
    pub fn new(tokens: Vec<TokenSettings>) -> Self {
        Auth { tokens }
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
        if self.tokens.is_empty() {
            return Ok(Role::Admin);
        }
        let presented = req
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, rest) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
            })
            .ok_or(ApiError::Unauthorized)?;
        // Check every token, without stopping early, so timing does not tell which matched.
        let mut role = None;
        for t in &self.tokens {
            if bool::from(t.token.as_bytes().ct_eq(presented.as_bytes())) {
                role = Some(t.role);
            }
        }
        let role = role.ok_or(ApiError::Unauthorized)?;
        if role >= needed {
            Ok(role)
        } else {
            Err(ApiError::Forbidden(action))
        }
    }
}
