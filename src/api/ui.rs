//! The admin console (`/ui/`): four static files from `ui/`, compiled into the binary
//! (no second server, no CDN; works air-gapped). The page reads and acts through the
//! same `/v1` API with the token the operator types (kept in the tab's
//! `sessionStorage`), so it can do exactly what that token can.
//!
//! Every answer carries a strict Content-Security-Policy: scripts, styles and
//! connections from this origin only, no inline script or style, no frames, no forms
//! posting elsewhere.

use actix_web::http::header;
use actix_web::{web, HttpResponse};

use super::error::ApiError;

/// The policy sent with every console file.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

/// The console's files: name under `/ui/`, content type, bytes.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../../ui/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../ui/app.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../../ui/style.css"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("../../ui/favicon.svg"),
    ),
];

fn asset(name: &str) -> Result<HttpResponse, ApiError> {
    let (_, content_type, body) = ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .ok_or_else(|| ApiError::NotFound(format!("no console file {name:?}")))?;
    Ok(HttpResponse::Ok()
        .content_type(*content_type)
        .insert_header((header::CONTENT_SECURITY_POLICY, CSP))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        // The files change with the binary; revalidating costs little.
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(*body))
}

/// `GET /ui`: to `/ui/` (relative asset paths need the slash).
pub async fn redirect() -> HttpResponse {
    HttpResponse::PermanentRedirect()
        .insert_header((header::LOCATION, "/ui/"))
        .finish()
}

/// `GET /`: the service's root is no API route; a browser is sent to the console
/// (`/ui/`), and the body says where the console and the API's description are for a
/// client that does not follow redirects (issue 43 §8: a bare 404 pointed nowhere).
pub async fn root() -> HttpResponse {
    HttpResponse::Found()
        .insert_header((header::LOCATION, "/ui/"))
        .json(serde_json::json!({
            "message": "fairshare: the console is at /ui/, the API's description at /openapi.json (its routes are under /v1/)",
            "console": "/ui/",
            "openapi": "/openapi.json",
        }))
}

/// `GET /ui/`: the page.
pub async fn index() -> Result<HttpResponse, ApiError> {
    asset("index.html")
}

/// `GET /ui/{file}`: `app.js`, `style.css`, `favicon.svg`; anything else is 404.
pub async fn file(name: web::Path<String>) -> Result<HttpResponse, ApiError> {
    asset(&name)
}

/// Registers `/` (to the console), `/ui`, `/ui/` and `/ui/{file}` (GET and HEAD;
/// other methods are 405).
pub fn routes(cfg: &mut web::ServiceConfig) {
    let resource = |path: &str| {
        web::resource(path.to_string()).default_service(web::to(|| async {
            Err::<HttpResponse, _>(ApiError::MethodNotAllowed { allow: "GET, HEAD" })
        }))
    };
    cfg.service(
        resource("/")
            .route(web::get().to(root))
            .route(web::head().to(root)),
    )
    .service(
        resource("/ui")
            .route(web::get().to(redirect))
            .route(web::head().to(redirect)),
    )
    .service(
        resource("/ui/")
            .route(web::get().to(index))
            .route(web::head().to(index)),
    )
    .service(
        resource("/ui/{file}")
            .route(web::get().to(file))
            .route(web::head().to(file)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_no_inline_script_and_nothing_from_another_origin() {
        let html = ASSETS[0].2;
        assert!(html.contains(r#"<script src="app.js" defer></script>"#));
        assert!(!html.contains("<script>"), "inline script");
        assert!(!html.contains("style=\""), "inline style");
        for bad in [r#"src="http"#, r#"href="http"#, "url(http", "@import"] {
            assert!(
                ASSETS.iter().all(|(_, _, body)| !body.contains(bad)),
                "{bad}"
            );
        }
    }
}
