//! The body shapes that more than one route reads or writes, in one home: a resource
//! cap ([`ResourceLimit`], users' and groups' `max_resources`, and the what-if's),
//! resources as shown ([`ResourcesOut`]) and the empty body of the pause and resume
//! actions ([`Empty`]).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::body::whole;

/// Resources as stored and shown: cores, GPUs, whole bytes.
pub use crate::views::Amounts as ResourcesOut;

/// A cap on a user's allocation; an absent resource is not capped.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ResourceLimit {
    /// Cores: 0 to 1e6, at most 4 decimal places.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0.0, maximum = 1000000.0, multiple_of = 0.0001)]
    pub cpu: Option<f64>,
    /// GPUs: 0 to 1e6, at most 4 decimal places.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0.0, maximum = 1000000.0, multiple_of = 0.0001)]
    pub gpu: Option<f64>,
    /// Bytes, a whole number from 0 to 2^53.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole::opt"
    )]
    #[schema(minimum = 0, maximum = 9007199254740992_u64)]
    pub memory_bytes: Option<u64>,
}

/// `POST /v1/users/{id}/pause|resume` body: nothing, or `{}`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Empty {}
