//! The OpenAPI document says exactly what the service does (issue 14 §4). Each test
//! here keeps a finding of schemathesis (scripts/schemathesis, in CI) or a rule the
//! issue lists, so that it cannot come back unnoticed.

use serde_json::{json, Value};

use crate::helpers::{assert_error, spawn_app, Db, TestApp, ADMIN, SUBMITTER};

async fn document(app: &TestApp) -> Value {
    app.client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            out.push((method.clone(), path.clone(), op.clone()));
        }
    }
    out
}

#[actix_web::test]
async fn every_operation_has_its_own_id_and_lists_every_status_it_can_answer() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let doc = document(&app).await;
    let ops = operations(&doc);
    let mut ids: Vec<&str> = ops
        .iter()
        .map(|(_, _, op)| op["operationId"].as_str().unwrap())
        .collect();
    ids.sort();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "operationIds repeat: {ids:?}");
    let admin = [
        ("put", "/v1/users/{id}"),
        ("post", "/v1/users/{id}/pause"),
        ("post", "/v1/users/{id}/resume"),
        ("post", "/v1/scheduler/what-if"),
    ];
    // Routes that touch neither the database nor the scheduler: the share history is
    // kept in memory (no 503); whoami is open and always 200.
    let no_503 = ["/v1/shares", "/v1/whoami"];
    // whoami is open; a watcher's notification carries its own signature instead.
    let open = ["/v1/whoami", "/v1/attempts/{submission_id}/{kind}"];
    for (method, path, op) in &ops {
        let statuses = &op["responses"];
        if path.starts_with("/v1/") {
            // Every other /v1 route reads or writes the database or asks the scheduler.
            if !open.contains(&path.as_str()) {
                assert!(
                    statuses["401"].is_object(),
                    "{method} {path} does not list 401"
                );
            }
            if !no_503.contains(&path.as_str()) {
                assert!(
                    statuses["503"].is_object(),
                    "{method} {path} does not list 503"
                );
            }
        }
        // 403: a token's role too low (admin routes), or, with no token configured,
        // a browser page of another origin asking for a change (every other route
        // that changes something).
        let is_admin = admin.contains(&(method.as_str(), path.as_str()));
        let changes = method != "get";
        if path.starts_with("/v1/") {
            assert_eq!(
                statuses["403"].is_object(),
                is_admin || changes,
                "{method} {path}: 403 is listed exactly on admin routes and on changes"
            );
        }
        if op["requestBody"].is_object() {
            for s in ["400", "413", "415", "422"] {
                assert!(statuses[s].is_object(), "{method} {path} does not list {s}");
            }
        }
        // api::line_limit answers a request line of 64 KiB or more with 414 on every
        // route, before any route runs (a fresh tester: no operation listed it).
        assert!(
            statuses["414"].is_object(),
            "{method} {path} does not list 414"
        );
    }
    for path in ["/v1/users/{id}/pause", "/v1/users/{id}/resume"] {
        assert!(doc["paths"][path]["post"]["responses"]["404"].is_object());
    }
}

#[actix_web::test]
async fn the_documented_limits_are_the_ones_the_service_enforces() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let doc = document(&app).await;
    let s = &doc["components"]["schemas"];
    let user = &s["SubmitRequest"]["properties"]["user"];
    assert_eq!(
        (user["minLength"].as_u64(), user["maxLength"].as_u64()),
        (Some(1), Some(128))
    );
    let ext = &s["SubmitRequest"]["properties"]["external_id"];
    assert_eq!(
        (ext["minLength"].as_u64(), ext["maxLength"].as_u64()),
        (Some(1), Some(256))
    );
    assert_eq!(s["UserUpdate"]["properties"]["weight"]["minimum"], 1e-6);
    assert_eq!(s["UserUpdate"]["properties"]["weight"]["maximum"], 1e6);
    let params = doc["paths"]["/v1/jobs"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let param = |name: &str| params.iter().find(|p| p["name"] == name).unwrap().clone();
    for p in params {
        assert_eq!(p["required"], false, "{p}");
    }
    let limit = param("limit");
    assert_eq!(limit["schema"]["type"], "integer");
    assert_eq!(
        (
            limit["schema"]["minimum"].as_u64(),
            limit["schema"]["maximum"].as_u64()
        ),
        (Some(1), Some(1000))
    );
    let status = param("status");
    let r = status["schema"]["$ref"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        s[&r]["enum"],
        json!([
            "QUEUED",
            "ADMITTED",
            "DISPATCHING",
            "PENDING",
            "RUNNING",
            "SUCCEEDED",
            "FAILED",
            "STOPPED"
        ])
    );
    assert_eq!(param("user")["schema"]["maxLength"], 128);
    let id = &doc["paths"]["/v1/users/{id}"]["get"]["parameters"][0]["schema"];
    assert_eq!(
        (id["minLength"].as_u64(), id["maxLength"].as_u64()),
        (Some(1), Some(128))
    );
    // One pattern for every user id, built from the service's rule (api::user_id,
    // whose unit tests hold it to the rule for every code point): it refuses a space,
    // a zero-width space, and (a later finding) the variation selectors and U+180E.
    let pattern = id["pattern"].as_str().unwrap();
    for refused in [
        r"\u0000-\u0020",
        r"\u2000-\u200f",
        r"\ufe00-\ufe0f",
        r"\u180b-\u180f",
    ] {
        assert!(pattern.contains(refused), "{refused} not in {pattern}");
    }
    // Beyond the BMP as the characters themselves: tags and variation selectors 17–256.
    assert!(pattern.contains("\u{E0000}-\u{E0FFF}"), "{pattern}");
    assert_eq!(user["pattern"], pattern);
    assert_eq!(param("user")["schema"]["pattern"], pattern);
    assert_eq!(
        s["WhatIfRequest"]["properties"]["users"]["propertyNames"]["pattern"],
        pattern
    );
    let mut ids = 0;
    for (method, path, op) in operations(&doc) {
        // Where there are none, no `"parameters": null` (schemathesis refuses it).
        assert!(
            op.get("parameters").is_none_or(Value::is_array),
            "{method} {path}: {}",
            op["parameters"]
        );
        for p in op["parameters"].as_array().into_iter().flatten() {
            let user_id = (p["in"] == "query" && p["name"] == "user")
                || (p["in"] == "path" && path.starts_with("/v1/users/"));
            if user_id {
                assert_eq!(p["schema"]["pattern"], pattern, "{method} {path} {p}");
                ids += 1;
            }
        }
    }
    // /v1/jobs, /v1/events and /v1/usage filters; get, put, pause, resume of
    // /v1/users/{id}.
    assert_eq!(ids, 7);
}

#[actix_web::test]
async fn an_empty_query_parameter_is_invalid_like_any_other_bad_value() {
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    app.submit("a", json!({})).await;
    // One rule: `status=` is not "no filter", it is a status that does not exist.
    for name in ["user", "status", "limit", "after"] {
        assert_error(
            app.get(&format!("/v1/jobs?{name}="), SUBMITTER).await,
            422,
            "invalid_field",
            Some(name),
        )
        .await;
    }
    // A user filter is a user id: the same limits as everywhere.
    for bad in ["a%20b", &"x".repeat(129)] {
        assert_error(
            app.get(&format!("/v1/jobs?user={bad}"), SUBMITTER).await,
            422,
            "invalid_field",
            Some("user"),
        )
        .await;
    }
    let ok = app
        .get("/v1/jobs?user=a&status=queued&limit=1", SUBMITTER)
        .await;
    assert_eq!(ok.status(), 200);
}

#[actix_web::test]
async fn an_object_written_as_an_array_is_refused() {
    // serde takes a struct as an array of its fields; the document does not.
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let submit = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "a", "entrypoint": "echo", "resources": [null, null]}),
        )
        .await;
    assert_error(submit, 422, "invalid_field", Some("resources")).await;
    let put = app
        .put("/v1/users/a", ADMIN, json!({"max_resources": [1, 2]}))
        .await;
    assert_error(put, 422, "invalid_field", Some("max_resources")).await;
    // Errors inside an object still name the nested field.
    let nested = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "a", "entrypoint": "echo", "resources": {"cpu": "x"}}),
        )
        .await;
    assert_error(nested, 422, "invalid_field", Some("resources.cpu")).await;
    let what_if = app
        .post(
            "/v1/scheduler/what-if",
            ADMIN,
            json!({"users": {"a": [2.0]}}),
        )
        .await;
    assert_error(what_if, 422, "invalid_field", Some("users.a")).await;
}

#[actix_web::test]
async fn a_nul_character_in_a_map_key_is_refused_and_the_document_says_so() {
    // schemathesis, seed 7: a cluster name with NUL in a what-if change was refused
    // (422) while the document allowed any key.
    let Some(app) = spawn_app(Db::Sqlite).await else {
        return;
    };
    let resp = app
        .post(
            "/v1/scheduler/what-if",
            ADMIN,
            json!({"clusters": {"a\u{0}b": {}}}),
        )
        .await;
    assert_error(resp, 422, "invalid_field", None).await;
    let resp = app
        .post(
            "/v1/jobs",
            SUBMITTER,
            json!({"user": "a", "entrypoint": "echo", "runtime_env": {"env_vars": {"X": "a\u{0}"}}}),
        )
        .await;
    assert_error(resp, 422, "invalid_field", Some("runtime_env.env_vars.X")).await;
    let doc = document(&app).await;
    let s = &doc["components"]["schemas"];
    for map in ["users", "clusters"] {
        assert!(
            s["WhatIfRequest"]["properties"][map]["propertyNames"]["pattern"].is_string(),
            "{map}"
        );
    }
    assert_eq!(
        s["SubmitRequest"]["properties"]["runtime_env"]["additionalProperties"]["$ref"],
        "#/components/schemas/JsonNoNul"
    );
}
