//! Request body and query parsing with errors that name the field at fault.
//!
//! A body that is not JSON at all is 400; JSON of the wrong shape is 422 with the
//! dotted path of the field (`resources.cpu`); over `server.max_body_bytes` is 413.

use actix_web::web;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// Reads the whole body, refusing more than `limit` bytes.
pub async fn read_body(payload: web::Payload, limit: usize) -> Result<web::Bytes, ApiError> {
    match payload.to_bytes_limited(limit).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => Err(ApiError::BadJson(format!("cannot read body: {e}"))),
        Err(_) => Err(ApiError::PayloadTooLarge { limit }),
    }
}

/// Parses `bytes` as JSON into `T`. An empty body parses as `{}` when `empty_ok`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8], empty_ok: bool) -> Result<T, ApiError> {
    let value: serde_json::Value = if empty_ok && bytes.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Object(Default::default())
    } else {
        serde_json::from_slice(bytes).map_err(|e| ApiError::BadJson(e.to_string()))?
    };
    if !value.is_object() {
        return Err(ApiError::invalid("(body)", "must be a JSON object"));
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let reason = e.inner().to_string();
        let path = e.path().to_string();
        let field = if path == "." {
            // serde reports missing and unknown fields at the parent: take the name from
            // the message, e.g. "missing field `user`".
            reason
                .split('`')
                .nth(1)
                .map(str::to_string)
                .unwrap_or_else(|| "(body)".to_string())
        } else {
            path
        };
        ApiError::invalid(field, reason)
    })
}

/// Parses a query string into `T`, naming the parameter at fault (422).
pub fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let pairs: Vec<(String, String)> = web::Query::<Vec<(String, String)>>::from_query(query)
        .map_err(|e| ApiError::invalid("(query)", e.to_string()))?
        .into_inner();
    let mut map = serde_json::Map::new();
    for (k, v) in pairs {
        if map
            .insert(k.clone(), serde_json::Value::String(v))
            .is_some()
        {
            return Err(ApiError::invalid(k, "given more than once"));
        }
    }
    serde_path_to_error::deserialize(serde_json::Value::Object(map)).map_err(|e| {
        let reason = e.inner().to_string();
        let path = e.path().to_string();
        let field = if path == "." {
            reason.split('`').nth(1).unwrap_or("(query)").to_string()
        } else {
            path
        };
        ApiError::invalid(field, reason)
    })
}
