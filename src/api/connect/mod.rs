//! Fundament's own Connect contracts (`proto/`, types in [`crate::proto`]):
//! `organization.v1.PluginService` on the worker, per organization, and on the server
//! `catalog.v1.CatalogService`, `registry.v1.PublicationService` (publishers) and
//! `admin.v1.ReviewService` (reviewers).
//!
//! connectrpc does the protocol (binary protobuf and proto3 JSON, Connect's error body
//! and status mapping); the services here translate between the contracts' messages and
//! our domains. Domain errors keep their one mapping to [`HttpError`] and are drawn as a
//! Connect error by [`to_connect`], so a refusal means the same on every surface.
//!
//! Layering: HTTP only, like the rest of `api`.

pub mod catalog;
mod definition;
pub mod organization;
pub mod publication;
pub mod review;

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use connectrpc::{ConnectError, ConnectRpcService, ErrorCode};

use super::error::HttpError;
use super::layers::Limits;

/// Connect requests carry at most one definition (1 MiB; JSON spells bytes in base64,
/// a third more) and a few short strings.
pub const LIMITS: Limits = Limits {
    body_bytes: 2 * 1024 * 1024,
    timeout: Duration::from_secs(30),
};

/// The Connect code a refusal of ours stands for, from its HTTP status: the same table
/// Connect uses the other way round, with 409 as `failed_precondition` (a version that
/// exists with other bytes, a name publishers clash over) and 422 (an invalid
/// definition) as `invalid_argument`.
pub fn to_connect(e: HttpError) -> ConnectError {
    let code = match e.status {
        // Connect has its own code for a duplicate, which a 409 otherwise is not.
        StatusCode::CONFLICT if e.code == super::error::ErrorCode::AlreadyExists => {
            ErrorCode::AlreadyExists
        }
        StatusCode::NOT_IMPLEMENTED => ErrorCode::Unimplemented,
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => ErrorCode::InvalidArgument,
        StatusCode::UNAUTHORIZED => ErrorCode::Unauthenticated,
        StatusCode::FORBIDDEN => ErrorCode::PermissionDenied,
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::CONFLICT => ErrorCode::FailedPrecondition,
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::TOO_MANY_REQUESTS => {
            ErrorCode::ResourceExhausted
        }
        StatusCode::SERVICE_UNAVAILABLE => ErrorCode::Unavailable,
        StatusCode::GATEWAY_TIMEOUT | StatusCode::REQUEST_TIMEOUT => ErrorCode::DeadlineExceeded,
        _ => ErrorCode::Internal,
    };
    let detail = e.details.as_ref().and_then(field_violations);
    let error = ConnectError::new(code, e.message);
    match detail {
        Some(detail) => error.with_detail(detail),
        None => error,
    }
}

/// A refused definition's problems (`details.problems` on the JSON surfaces) as the
/// standard `google.rpc.BadRequest` detail, each field with its line:column and reason,
/// so a Connect client shows what is wrong without reparsing the message; `debug`
/// carries the same list as JSON for clients that do not know the type.
fn field_violations(details: &serde_json::Value) -> Option<connectrpc::ErrorDetail> {
    use crate::proto::google::rpc::{BadRequest, bad_request::FieldViolation};
    let problems = details.get("problems")?.as_array()?;
    let violations = problems
        .iter()
        .map(|p| {
            let text = |k: &str| p.get(k).and_then(|v| v.as_str()).unwrap_or_default();
            let at = match (p.get("line"), p.get("column")) {
                (Some(l), Some(c)) => format!("{l}:{c}: "),
                _ => String::new(),
            };
            FieldViolation {
                field: text("path").to_owned(),
                description: format!("{at}{}", text("message")),
                ..Default::default()
            }
        })
        .collect();
    let message = BadRequest {
        field_violations: violations,
        ..Default::default()
    };
    let mut detail = connectrpc::ErrorDetail::from_message("google.rpc.BadRequest", &message);
    detail.debug = Some(serde_json::json!({ "problems": problems }));
    Some(detail)
}

/// How the surface's limits (body size, timeout) draw their refusals: Connect's body,
/// with the limit's own HTTP status (413 rather than the 429 of Connect's table for
/// `resource_exhausted`), since no handler ran; clients read the code from the body.
pub fn render(e: HttpError) -> Response {
    let status = e.status;
    to_connect(e).with_http_status(status).into_response()
}

/// A Connect service over `router` held to its surface's `limits`. The surface's body
/// limit (applied by `Limits::apply`) counts bytes on the wire; a compressed body
/// (`Content-Encoding`, `Connect-Content-Encoding`, a gRPC envelope's flag) inflates
/// past it, so the same number bounds each message after decompression, which
/// connectrpc enforces while inflating (a gzip bomb never allocates more).
pub fn service(router: connectrpc::Router, limits: Limits) -> ConnectRpcService {
    ConnectRpcService::new(router).with_limits(
        connectrpc::Limits::default()
            .with_max_request_body_size(limits.body_bytes)
            .with_max_message_size(limits.body_bytes),
    )
}

/// The server's routes for one Connect service (`path`:
/// `/package.Service/{method}`), held to `limits` and drawing their refusals in
/// Connect's body.
pub fn mount(
    path: &str,
    router: connectrpc::Router,
    limits: Limits,
) -> axum::Router<super::AppState> {
    let routes = axum::Router::new().route_service(path, service(router, limits));
    limits.apply(routes, render)
}

/// A Unix time as the contracts' `google.protobuf.Timestamp`.
pub(crate) fn timestamp(
    unix_seconds: i64,
) -> buffa::MessageField<
    buffa_types::google::protobuf::Timestamp,
    buffa::Inline<buffa_types::google::protobuf::Timestamp>,
> {
    buffa_types::google::protobuf::Timestamp::from_unix_secs(unix_seconds).into()
}

/// An optional time: unset (absent on the wire) when `None`.
pub(crate) fn maybe_timestamp(
    unix_seconds: Option<i64>,
) -> buffa::MessageField<
    buffa_types::google::protobuf::Timestamp,
    buffa::Inline<buffa_types::google::protobuf::Timestamp>,
> {
    unix_seconds.map(timestamp).unwrap_or_default()
}

/// A review status as `marketplace.v1.SubmissionStatus`.
pub(crate) fn submission_status(
    status: crate::review::Status,
) -> buffa::EnumValue<crate::proto::marketplace::v1::SubmissionStatus> {
    use crate::proto::marketplace::v1::SubmissionStatus as S;
    use crate::review::Status;
    buffa::EnumValue::Known(match status {
        Status::Draft => S::SUBMISSION_STATUS_DRAFT,
        Status::Pending => S::SUBMISSION_STATUS_PENDING,
        Status::ChangesRequested => S::SUBMISSION_STATUS_CHANGES_REQUESTED,
        Status::Approved => S::SUBMISSION_STATUS_APPROVED,
        Status::Rejected => S::SUBMISSION_STATUS_REJECTED,
        Status::Withdrawn => S::SUBMISSION_STATUS_WITHDRAWN,
    })
}

/// The bearer token's publisher or reviewer (per `role`), for a Connect handler.
pub(crate) async fn caller(
    state: &super::AppState,
    ctx: &connectrpc::RequestContext,
    role: super::auth::Role,
) -> Result<String, ConnectError> {
    let client =
        super::extract::client_addr(state.trust_forwarded_for, ctx.headers(), ctx.extensions());
    super::auth::authenticate(state, client, ctx.headers(), role, None)
        .await
        .map_err(to_connect)
}

/// A review error as a Connect error, through its one HTTP mapping.
pub(crate) fn review_refused(e: crate::review::ReviewError) -> ConnectError {
    to_connect(e.into())
}

/// `text` cut to at most `max` characters at a word boundary, with an ellipsis when cut:
/// the short descriptions listings show. The first sentence of the first paragraph when
/// it is short enough; a description written as a YAML literal block (`|`) keeps its
/// author's line breaks, so lines are read on across them.
pub fn short(text: &str, max: usize) -> String {
    let paragraph = text.trim().split("\n\n").next().unwrap_or_default();
    let joined = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
    let sentence = match joined.find(". ") {
        Some(end) => &joined[..=end],
        None => joined.as_str(),
    };
    if sentence.chars().count() <= max {
        return sentence.to_owned();
    }
    let cut: String = sentence.chars().take(max.saturating_sub(1)).collect();
    let at_word = match cut.rfind(' ') {
        Some(space) if space > cut.len() / 2 => &cut[..space],
        _ => &cut,
    };
    format!("{}…", at_word.trim_end_matches([' ', ',', ';', ':']))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_descriptions_keep_the_first_sentence_and_cut_at_words() {
        assert_eq!(
            short("Automated TLS certificates. Issues and renews them.", 160),
            "Automated TLS certificates."
        );
        assert_eq!(
            short("One line\nread on. Then\n\nanother paragraph", 160),
            "One line read on."
        );
        assert_eq!(short("First paragraph\n\nSecond.", 160), "First paragraph");
        assert_eq!(short("alpha beta gamma delta", 12), "alpha beta…");
        assert!(short(&"x".repeat(500), 160).chars().count() <= 160);
        assert_eq!(short("", 160), "");
    }

    #[test]
    fn refusals_keep_their_meaning_as_connect_codes() {
        use super::super::error::ErrorCode as Ours;
        for (status, code) in [
            (StatusCode::BAD_REQUEST, "invalid_argument"),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_argument"),
            (StatusCode::UNAUTHORIZED, "unauthenticated"),
            (StatusCode::FORBIDDEN, "permission_denied"),
            (StatusCode::NOT_FOUND, "not_found"),
            (StatusCode::CONFLICT, "failed_precondition"),
            (StatusCode::PAYLOAD_TOO_LARGE, "resource_exhausted"),
            (StatusCode::NOT_IMPLEMENTED, "unimplemented"),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        ] {
            let e = to_connect(HttpError::new(status, Ours::Internal, "why"));
            assert_eq!(e.code.as_str(), code, "{status}");
        }
        let duplicate = HttpError::new(StatusCode::CONFLICT, Ours::AlreadyExists, "why");
        assert_eq!(to_connect(duplicate).code.as_str(), "already_exists");
    }
}
