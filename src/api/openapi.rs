//! The OpenAPI 3 document, generated from the handlers' annotations with utoipa.
//! No Swagger UI: utoipa-swagger-ui downloads its assets at build time.

use actix_web::HttpResponse;
use serde_json::json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{console, error, groups, jobs, shapes, submit, system, users, what_if};

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The API document.
#[derive(OpenApi)]
#[openapi(
    info(title = "fairshare", description = "A fair-share job scheduler in front of Ray clusters."),
    paths(
        jobs::submit, jobs::list, jobs::get, jobs::cancel, jobs::logs,
        super::admission::started, super::admission::finished, super::admission::release,
        super::admission::heartbeat,
        users::list, users::get, users::put, users::pause, users::resume,
        groups::list, groups::get, groups::put, groups::delete, groups::pause, groups::resume,
        super::events::stream,
        system::scheduler, what_if::what_if, system::metrics, system::healthz, system::readyz, document,
        console::job_events, console::shares, console::whoami, super::hints::hint,
        super::usage::usage,
    ),
    components(schemas(
        error::ErrorBody, error::ErrorDetail, submit::SubmitRequest, submit::ResourcesIn, crate::views::Amounts,
        jobs::JobView, jobs::JobPage, jobs::LogsView, users::UserView, users::UserUpdate, shapes::ResourceLimit,
        shapes::Empty, groups::GroupView, groups::GroupUpdate, jobs::JobStatusName, system::Health, crate::views::SchedulerView,
        what_if::WhatIfRequest, what_if::WhatIfView,
        console::JobEventsView, console::ShareHistoryView, console::WhoAmI,
        super::hints::HintAnswer,
        super::admission::ReportBody, super::admission::FinishedBody, super::admission::RunnerOutcome,
        super::usage::UsageReport, super::usage::UsageRowView, super::usage::ActualUse, super::usage::EndedJobs, super::usage::Waits,
        super::usage::UsageByName, super::usage::UsageStepName,
    )),
    modifiers(&BearerAuth),
)]
pub struct ApiDoc;

/// The served document: [`ApiDoc`] plus the constraints utoipa's attributes cannot
/// state (a rule across two fields, map keys), so that every request the document
/// calls valid is accepted and every one it calls invalid is refused (schemathesis
/// checks both in CI).
///
/// `sizes`: the configured `[[sizes]]`: `size` on a submission takes exactly their
/// names (none configured: no value is valid), and never with `resources`.
pub fn document_json_for(sizes: &[crate::config::SizeSettings]) -> serde_json::Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    let schemas = &mut doc["components"]["schemas"];
    // A job needs cpu > 0, gpu > 0 or a custom resource; an absent or null cpu means 1.
    schemas["ResourcesIn"]["anyOf"] = json!([
        {"not": {"required": ["cpu"]}},
        {"properties": {"cpu": {"type": ["number", "null"], "exclusiveMinimum": 0}}},
        {"required": ["gpu"], "properties": {"gpu": {"type": "number", "exclusiveMinimum": 0}}},
        {"required": ["custom"], "properties": {"custom": {"type": "object", "minProperties": 1}}},
    ]);
    // Custom resources: at most 8, named as Ray names resources (not its built-in
    // ones nor a node's), amounts > 0 (`api::validate::validate_custom`).
    schemas["ResourcesIn"]["properties"]["custom"]["maxProperties"] =
        json!(crate::policy::custom::MAX_CUSTOM);
    schemas["ResourcesIn"]["properties"]["custom"]["propertyNames"] = json!({
        "type": "string",
        "pattern": "^[A-Za-z_][A-Za-z0-9_.:/-]{0,63}$",
        "not": {"anyOf": [
            {"enum": ["CPU", "GPU", "memory", "object_store_memory"]},
            {"pattern": "^node:"},
        ]},
    });
    schemas["ResourcesIn"]["properties"]["custom"]["additionalProperties"] = json!({
        "type": "number", "exclusiveMinimum": 0, "maximum": 1000000.0, "multipleOf": 0.0001,
    });
    // Metadata: at most 64 entries, keys 1–128 characters, values at most 4096; no NUL anywhere.
    let metadata = &mut schemas["SubmitRequest"]["properties"]["metadata"];
    metadata["maxProperties"] = json!(64);
    metadata["propertyNames"] =
        json!({"type": "string", "minLength": 1, "maxLength": 128, "pattern": NO_NUL});
    metadata["additionalProperties"] =
        json!({"type": "string", "maxLength": 4096, "pattern": NO_NUL});
    // Map keys of the what-if change: user ids (their limits: a key that cannot be a
    // user id is 422) and cluster names (never with NUL).
    schemas["WhatIfRequest"]["properties"]["users"]["propertyNames"] = json!({
        "type": "string", "minLength": 1, "maxLength": 128, "pattern": user_id_pattern(),
    });
    schemas["WhatIfRequest"]["properties"]["clusters"]["propertyNames"] =
        json!({"type": "string", "pattern": NO_NUL});
    // runtime_env: any JSON object, but no NUL in any key or string at any depth.
    schemas["JsonNoNul"] = json!({
        "description": "Any JSON value without a NUL character in a string or key.",
        "anyOf": [
            {"type": ["null", "boolean", "number"]},
            {"type": "string", "pattern": NO_NUL},
            {"type": "array", "items": {"$ref": "#/components/schemas/JsonNoNul"}},
            {"type": "object", "propertyNames": {"pattern": NO_NUL},
             "additionalProperties": {"$ref": "#/components/schemas/JsonNoNul"}},
        ],
    });
    let env = &mut schemas["SubmitRequest"]["properties"]["runtime_env"];
    env["propertyNames"] = json!({"type": "string", "pattern": NO_NUL});
    env["additionalProperties"] = json!({"$ref": "#/components/schemas/JsonNoNul"});
    // env_vars: an object of strings, as Ray takes it (422 otherwise).
    env["properties"] = json!({"env_vars": {"type": "object",
        "propertyNames": {"type": "string", "pattern": NO_NUL},
        "additionalProperties": {"type": "string", "pattern": NO_NUL}}});
    schemas["SubmitRequest"]["properties"]["user"]["pattern"] = json!(user_id_pattern());
    // A named size: one of the configured names (none configured: no value is
    // valid), and not together with `resources` (`api::submit::SubmitRequest::with_size`).
    // `null` is no size (a fresh tester's finding: the document refused `"size": null`
    // and `resources: {}` beside a size, which the service takes).
    let mut names: Vec<serde_json::Value> = sizes.iter().map(|z| json!(z.name)).collect();
    names.push(serde_json::Value::Null);
    let size = &mut schemas["SubmitRequest"]["properties"]["size"];
    size["enum"] = json!(names);
    // Refused: a size (a string) beside resources that name any resource (an amount, or
    // a custom name); an empty `resources`, or one of nulls, goes with a size.
    let named =
        |k: &str, schema: serde_json::Value| json!({"required": [k], "properties": {(k): schema}});
    schemas["SubmitRequest"]["not"] = json!({
        "required": ["size", "resources"],
        "properties": {
            "size": {"type": "string"},
            "resources": {"anyOf": [
                named("cpu", json!({"type": "number"})),
                named("gpu", json!({"type": "number"})),
                named("memory_bytes", json!({"type": "integer"})),
                named("custom", json!({"type": "object", "minProperties": 1})),
            ]},
        },
    });
    schemas["UserUpdate"]["properties"]["display_name"]["pattern"] =
        json!(super::user_id::display_name_pattern());
    schemas["UserUpdate"]["properties"]["group"]["pattern"] = json!(GROUP_PATH_PATTERN);
    // What-if: a user's group and the groups' keys are group paths too.
    schemas["UserChangeIn"]["properties"]["group"]["pattern"] = json!(GROUP_PATH_PATTERN);
    schemas["WhatIfRequest"]["properties"]["groups"]["propertyNames"] =
        json!({"type": "string", "pattern": GROUP_PATH_PATTERN});
    // User ids in parameters (the `user` filters, `/v1/users/{id}`), and 414 on every
    // operation: `api::line_limit` answers a request line of 64 KiB or more with 414
    // before any route runs, whatever the path.
    let uri_too_long = json!({
        "description": "the request line is 64 KiB or longer (uri_too_long); the connection is closed",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    });
    if let Some(paths) = doc["paths"].as_object_mut() {
        for (path, item) in paths.iter_mut() {
            let Some(item) = item.as_object_mut() else {
                continue;
            };
            let methods = ["get", "put", "post", "delete", "patch", "head", "options"];
            for (_, op) in item
                .iter_mut()
                .filter(|(m, _)| methods.contains(&m.as_str()))
            {
                // `get_mut`: indexing would insert `"parameters": null` where there are
                // none, which is no valid document.
                if let Some(params) = op.get_mut("parameters").and_then(|p| p.as_array_mut()) {
                    for p in params.iter_mut().filter(|p| is_user_id_parameter(path, p)) {
                        p["schema"]["pattern"] = json!(user_id_pattern());
                    }
                    for p in params
                        .iter_mut()
                        .filter(|p| p["in"] == "path" && p["name"] == "path")
                    {
                        p["schema"]["pattern"] = json!(GROUP_PATH_PATTERN);
                    }
                }
                op["responses"]["414"] = uri_too_long.clone();
            }
        }
    }
    // Every query parameter of the job list is optional (utoipa marks a parameter
    // with an explicit `value_type` required).
    for path in ["/v1/jobs", "/v1/usage"] {
        if let Some(params) = doc["paths"][path]["get"]["parameters"].as_array_mut() {
            for p in params {
                p["required"] = json!(false);
            }
        }
    }
    // Optional bodies: nothing, or the object (not JSON `null`, which is refused).
    for (path, schema) in [
        ("/v1/users/{id}/pause", "Empty"),
        ("/v1/users/{id}/resume", "Empty"),
        ("/v1/groups/{path}/pause", "Empty"),
        ("/v1/groups/{path}/resume", "Empty"),
        ("/v1/scheduler/what-if", "WhatIfRequest"),
        ("/v1/jobs/{id}/started", "ReportBody"),
        ("/v1/jobs/{id}/heartbeat", "ReportBody"),
        ("/v1/jobs/{id}/release", "ReportBody"),
    ] {
        let body = &mut doc["paths"][path]["post"]["requestBody"];
        body["required"] = json!(false);
        body["content"]["application/json"]["schema"] =
            json!({"$ref": format!("#/components/schemas/{schema}")});
    }
    doc
}

/// JSON Schema pattern of a group path (`api::validate::check_path`): 1 to 8 segments of
/// 1–64 characters `A-Z a-z 0-9 _ . -` joined by `/`, none of them `.`, `..`,
/// `pause` or `resume`.
pub const GROUP_PATH_PATTERN: &str =
    r"^(?!(.*/)?(\.\.?|pause|resume)(/|$))[A-Za-z0-9_.-]{1,64}(/[A-Za-z0-9_.-]{1,64}){0,7}$";

/// JSON Schema pattern of a string without NUL characters (PostgreSQL text cannot
/// hold them; the API refuses them in every string).
const NO_NUL: &str = r"^[^\x00]*$";

/// A user id's pattern, as on every route that takes one (`api::validate::validate_user_id`):
/// built from the rule itself (`crate::user_id`), so that the two cannot drift.
fn user_id_pattern() -> &'static str {
    super::user_id::pattern()
}

/// Whether an operation's parameter is a user id: the `user` filters and the path id of
/// `/v1/users/{id}…`.
fn is_user_id_parameter(path: &str, p: &serde_json::Value) -> bool {
    (p["in"] == "query" && p["name"] == "user")
        || (p["in"] == "path" && p["name"] == "id" && path.starts_with("/v1/users/"))
}

/// `GET /openapi.json`.
#[utoipa::path(get, path = "/openapi.json", tag = "system", operation_id = "openapi",
    responses((status = 200, description = "this document", content_type = "application/json")))]
pub async fn document(state: actix_web::web::Data<super::AppState>) -> HttpResponse {
    HttpResponse::Ok().json(document_json_for(&state.settings.sizes))
}
