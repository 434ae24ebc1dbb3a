//! The OpenAPI 3 document, generated from the handlers' annotations with utoipa.
//! No Swagger UI: utoipa-swagger-ui downloads its assets at build time.

use actix_web::HttpResponse;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{error, jobs, system, users};

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
        users::list, users::get, users::put, users::pause, users::resume,
        super::events::stream,
        system::scheduler, system::metrics, system::healthz, system::readyz, document,
    ),
    components(schemas(
        error::ErrorBody, error::ErrorDetail, jobs::SubmitRequest, jobs::ResourcesIn, crate::views::Amounts,
        jobs::JobView, jobs::JobPage, jobs::LogsView, users::UserView, users::UserUpdate, users::ResourceLimit,
        users::Empty, system::Health, crate::views::SchedulerView,
    )),
    modifiers(&BearerAuth),
)]
pub struct ApiDoc;

/// `GET /openapi.json`.
#[utoipa::path(get, path = "/openapi.json", tag = "system",
    responses((status = 200, description = "this document", content_type = "application/json")))]
pub async fn document() -> HttpResponse {
    HttpResponse::Ok().json(ApiDoc::openapi())
}
