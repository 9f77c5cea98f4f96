//! The one HTTP error type at the edge. Every domain error converts into it through an
//! exhaustive `From` (each variant decides its status and code; no catch-all arms), so
//! a new domain variant fails to compile until someone decides what clients see.
//!
//! [`HttpError`] is data; how it is drawn is the surface's choice: `IntoResponse` writes
//! the JSON body `{"error": {"code", "message", "details"?}}` (plus `Retry-After` on
//! 429), pages draw HTML (`pages::PageError`), and a surface with its own wire format
//! (the OCI registry's `{"errors": [...]}`) renders the same fields its own way.

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::catalog::CatalogError;
use crate::ratelimit::Limited;
use crate::store::StoreError;
use crate::trust::TrustError;
use crate::trust::server::accept::AcceptError;
use crate::trust::verify::PublishError;

/// The machine-readable `code` of an error body. Clients branch on it, so a code keeps
/// its meaning once published; the message is for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is malformed (body not the documented JSON, a bad header).
    BadRequest,
    /// A path or query parameter is not acceptable.
    BadParameter,
    Unauthorized,
    Forbidden,
    NotFound,
    /// A publisher role has no version yet (the first one is 1).
    NoRole,
    /// The signed index is not initialized.
    NotInitialized,
    /// The publisher is suspended by the operator.
    Suspended,
    InvalidDefinition,
    InvalidMetadata,
    BadSignature,
    /// The upload was built on an older state; fetch and sign again.
    Stale,
    /// A role's lifetime is outside what the server accepts.
    Lifetime,
    /// An upload breaks a rule of the signed index other than the ones above.
    Rejected,
    /// The request conflicts with the current state (for example: already initialized).
    Conflict,
    VersionExists,
    TooMany,
    NotInstallable,
    Ambiguous,
    RateLimited,
    PayloadTooLarge,
    HeadersTooLarge,
    /// The request took longer than its surface allows.
    Timeout,
    /// The database did not answer (down, restarting, unreachable, pool exhausted): a
    /// retry may succeed, here or on another replica.
    Unavailable,
    Internal,
    // The OCI registry's own codes (`/v2/`), drawn there as the distribution spec's
    // uppercase codes.
    NameInvalid,
    NameUnknown,
    ManifestUnknown,
    BlobUnknown,
    DigestInvalid,
    /// A length or range that does not fit the content (`SIZE_INVALID`).
    SizeInvalid,
    /// An operation this server does not offer (the registry is read-only).
    Unsupported,
    // Publishing with review.
    /// A field of a Connect request breaks a rule; the message names the field.
    InvalidArgument,
    /// What the request would create exists already.
    AlreadyExists,
    /// A version's review status does not allow the action.
    WrongStatus,
    /// With review required: a new target whose exact bytes are not approved.
    NotApproved,
    /// Something this marketplace does not offer yet.
    Unimplemented,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::BadParameter => "bad_parameter",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::NoRole => "no_role",
            ErrorCode::NotInitialized => "not_initialized",
            ErrorCode::Suspended => "suspended",
            ErrorCode::InvalidDefinition => "invalid_definition",
            ErrorCode::InvalidMetadata => "invalid_metadata",
            ErrorCode::BadSignature => "bad_signature",
            ErrorCode::Stale => "stale",
            ErrorCode::Lifetime => "lifetime",
            ErrorCode::Rejected => "rejected",
            ErrorCode::Conflict => "conflict",
            ErrorCode::VersionExists => "version_exists",
            ErrorCode::TooMany => "too_many",
            ErrorCode::NotInstallable => "not_installable",
            ErrorCode::Ambiguous => "ambiguous",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::HeadersTooLarge => "headers_too_large",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
            ErrorCode::NameInvalid => "name_invalid",
            ErrorCode::NameUnknown => "name_unknown",
            ErrorCode::ManifestUnknown => "manifest_unknown",
            ErrorCode::BlobUnknown => "blob_unknown",
            ErrorCode::DigestInvalid => "digest_invalid",
            ErrorCode::SizeInvalid => "size_invalid",
            ErrorCode::Unsupported => "unsupported",
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::WrongStatus => "wrong_status",
            ErrorCode::NotApproved => "not_approved",
            ErrorCode::Unimplemented => "unimplemented",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone)]
pub struct HttpError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub message: String,
    /// Structured detail, such as the problems of an invalid definition.
    pub details: Option<serde_json::Value>,
    /// Seconds for a `Retry-After` header (429).
    pub retry_after: Option<u64>,
}

impl HttpError {
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        HttpError {
            status,
            code,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// 429 `rate_limited` with `Retry-After: retry_after_secs`.
    pub fn rate_limited(message: impl Into<String>, retry_after_secs: u64) -> Self {
        HttpError {
            retry_after: Some(retry_after_secs),
            ..HttpError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::RateLimited,
                message,
            )
        }
    }

    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn unauthorized(message: &str) -> Self {
        HttpError::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        HttpError::new(StatusCode::FORBIDDEN, ErrorCode::Forbidden, message)
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        HttpError::new(StatusCode::NOT_FOUND, ErrorCode::NotFound, what)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        HttpError::new(StatusCode::BAD_REQUEST, ErrorCode::BadRequest, message)
    }

    pub fn bad_parameter(message: impl Into<String>) -> Self {
        HttpError::new(StatusCode::BAD_REQUEST, ErrorCode::BadParameter, message)
    }

    pub fn unprocessable(code: ErrorCode, message: impl Into<String>) -> Self {
        HttpError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    /// A failure of ours, not the client's: logged here, where it is handled, and
    /// answered without internals. `log` says which part failed, for the log line.
    pub fn internal(log: &str, error: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %error, "{log}");
        HttpError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            "internal error; the operator can find details in the log",
        )
    }
}

impl HttpError {
    /// 503 `unavailable` with `Retry-After: 1`: the database did not answer
    /// ([`crate::db::unreachable`]). Not the client's fault and not a bug here, so a
    /// balancer can try another replica and a client can retry; logged like
    /// [`HttpError::internal`], and answered without internals.
    pub fn unavailable(log: &str, error: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %error, "{log}");
        HttpError {
            retry_after: Some(1),
            ..HttpError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Unavailable,
                "the database is not reachable; try again shortly",
            )
        }
    }
}

/// 429 with `Retry-After`, on every surface that checks tokens.
impl From<Limited> for HttpError {
    fn from(limited: Limited) -> Self {
        // Whole seconds, rounded up: a client retrying on time is never refused again.
        let wait = limited.retry_after();
        let secs = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1);
        let message = match limited {
            Limited::Address { .. } => format!(
                "too many failed token authentications from this address; retry in {secs} s"
            ),
            Limited::Publisher { publisher, .. } => format!(
                "too many failed token authentications for publisher {publisher} from new addresses; retry in {secs} s"
            ),
        };
        HttpError::rate_limited(message, secs)
    }
}

impl From<StoreError> for HttpError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::Database(db) if crate::db::unreachable(db) => {
                HttpError::unavailable("store unreachable", &e)
            }
            // The refusals (an existing version, publisher or metadata version, an
            // unknown publisher) are the callers' to map where they mean something to
            // the client; one that reaches the edge unmapped is a failure of ours.
            StoreError::Database(_)
            | StoreError::Migrate(_)
            | StoreError::TooNew(_)
            | StoreError::VersionExists { .. }
            | StoreError::PublisherExists(_)
            | StoreError::NoSuchPublisher(_)
            | StoreError::ReviewerExists(_)
            | StoreError::OperatorExists(_)
            | StoreError::MetadataExists { .. }
            | StoreError::Corrupt(..) => HttpError::internal("store failure", &e),
        }
    }
}

impl From<crate::review::ReviewError> for HttpError {
    fn from(e: crate::review::ReviewError) -> Self {
        use crate::review::ReviewError as R;
        let message = e.to_string();
        match e {
            R::Store(e) => e.into(),
            R::Invalid { .. } => {
                HttpError::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidArgument, message)
            }
            R::Definition(invalid) => {
                HttpError::unprocessable(ErrorCode::InvalidDefinition, message)
                    .with_details(serde_json::json!({ "problems": invalid.problems }))
            }
            R::NotFound(_) => HttpError::not_found(message),
            R::AlreadyExists(_) => {
                HttpError::new(StatusCode::CONFLICT, ErrorCode::AlreadyExists, message)
            }
            R::WrongStatus { .. } => {
                HttpError::new(StatusCode::CONFLICT, ErrorCode::WrongStatus, message)
            }
            R::Published(_) => {
                HttpError::new(StatusCode::CONFLICT, ErrorCode::VersionExists, message)
            }
            R::NotApproved(_) => HttpError::unprocessable(ErrorCode::NotApproved, message),
            R::Unimplemented(_) => HttpError::new(
                StatusCode::NOT_IMPLEMENTED,
                ErrorCode::Unimplemented,
                message,
            ),
        }
    }
}

impl From<TrustError> for HttpError {
    fn from(e: TrustError) -> Self {
        let message = e.to_string();
        match e {
            TrustError::Store(e) => e.into(),
            TrustError::NotInitialized => HttpError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::NotInitialized,
                message,
            ),
            TrustError::AlreadyInitialized => {
                HttpError::new(StatusCode::CONFLICT, ErrorCode::Conflict, message)
            }
            TrustError::Threshold { .. } => HttpError::unprocessable(ErrorCode::Rejected, message),
            TrustError::PublisherName(..) => HttpError::bad_parameter(message),
            // The server's own keys, files and stored metadata: never the client's fault.
            TrustError::Key(_)
            | TrustError::Sign(_)
            | TrustError::Io(..)
            | TrustError::Corrupt(_) => HttpError::internal("signed index failure", &message),
        }
    }
}

impl From<AcceptError> for HttpError {
    fn from(e: AcceptError) -> Self {
        use AcceptError as A;
        let message = e.to_string();
        match e {
            A::NotInitialized => HttpError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::NotInitialized,
                message,
            ),
            A::UnknownPublisher(_) | A::NothingPublished(_) => HttpError::not_found(message),
            A::Suspended(_) => HttpError::new(StatusCode::FORBIDDEN, ErrorCode::Suspended, message),
            A::Followed(..) => HttpError::new(StatusCode::FORBIDDEN, ErrorCode::Forbidden, message),
            // Every problem with its field and line, as `validate` and the sideload API
            // give them, so the publisher's tool can show them all.
            A::Invalid(invalid) => HttpError::unprocessable(ErrorCode::InvalidDefinition, message)
                .with_details(serde_json::json!({ "problems": invalid.problems })),
            A::InvalidInBatch(n, invalid) => {
                HttpError::unprocessable(ErrorCode::InvalidDefinition, message).with_details(
                    serde_json::json!({ "definition": n, "problems": invalid.problems }),
                )
            }
            A::Conflict => HttpError::new(StatusCode::CONFLICT, ErrorCode::Stale, message),
            A::Refused(e) => e.into(),
            A::Trust(e) => e.into(),
        }
    }
}

impl From<PublishError> for HttpError {
    fn from(e: PublishError) -> Self {
        use PublishError as P;
        let message = e.to_string();
        match e {
            P::Signature { .. } => {
                HttpError::new(StatusCode::FORBIDDEN, ErrorCode::BadSignature, message)
            }
            // Built on an older state: the uploader fetches, signs again and retries.
            P::Stale { .. } | P::VersionGap { .. } | P::NotABin { .. } => {
                HttpError::new(StatusCode::CONFLICT, ErrorCode::Stale, message)
            }
            P::Metadata { .. } => HttpError::unprocessable(ErrorCode::InvalidMetadata, message),
            P::Lifetime { .. } => HttpError::unprocessable(ErrorCode::Lifetime, message),
            P::NoRole
            | P::FirstRoleMissing { .. }
            | P::AlreadyPublished { .. }
            | P::NoDefinition
            | P::ResignAddsTargets
            | P::YankChangesTargets
            | P::NothingYanked
            | P::OutsidePath { .. }
            | P::Immutable { .. }
            | P::WrongTargets { .. }
            | P::BytesMismatch { .. }
            | P::Custom { .. }
            | P::Expiry { .. }
            | P::NestedDelegation
            | P::BadBins { .. } => HttpError::unprocessable(ErrorCode::Rejected, message),
        }
    }
}

impl From<CatalogError> for HttpError {
    fn from(e: CatalogError) -> Self {
        match e {
            CatalogError::BadParameter { .. } | CatalogError::InvalidArgument(_) => {
                HttpError::bad_parameter(e.to_string())
            }
            CatalogError::NotFound(what) => HttpError::not_found(format!("{what} not found")),
            CatalogError::Store(e) => e.into(),
        }
    }
}

/// Every refusal and failure of the JSON surfaces: `{"error": {"code", "message",
/// "details"?}}`.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = ErrorBody)]
pub(super) struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = ErrorDetail)]
struct Inner<'a> {
    code: ErrorCode,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<&'a serde_json::Value>,
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let body = Body {
            error: Inner {
                code: self.code,
                message: &self.message,
                details: self.details.as_ref(),
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, secs.into());
        }
        response
    }
}

impl From<crate::admin::AdminError> for HttpError {
    fn from(e: crate::admin::AdminError) -> Self {
        use crate::admin::AdminError as A;
        use crate::trust::server::suspend::SuspendError as S;
        let message = e.to_string();
        let conflict = |m: String| HttpError::new(StatusCode::CONFLICT, ErrorCode::Conflict, m);
        match e {
            A::UnknownPublisher(_) | A::UnknownOperator(_) | A::UnknownReviewer(_) => {
                HttpError::not_found(message)
            }
            A::PublisherExists(_) | A::OperatorExists(_) | A::ReviewerExists(_) => {
                HttpError::new(StatusCode::CONFLICT, ErrorCode::AlreadyExists, message)
            }
            A::Followed { .. } => HttpError::forbidden(message),
            A::Invalid { .. } => HttpError::bad_parameter(message),
            A::NotInitialized => HttpError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::NotInitialized,
                message,
            ),
            A::Suspend(s) => match s {
                S::UnknownPublisher(_) => HttpError::not_found(message),
                S::AlreadySuspended(_)
                | S::NotSuspended(_)
                | S::DroppedUpstream(..)
                | S::NotDelegated(_)
                | S::Builtin
                | S::Conflict => conflict(message),
                S::Trust(t) => t.into(),
            },
            A::Trust(t) => t.into(),
            A::Store(s) => s.into(),
        }
    }
}

impl From<crate::catalog::curation::CurationError> for HttpError {
    fn from(e: crate::catalog::curation::CurationError) -> Self {
        use crate::catalog::curation::CurationError as C;
        let message = e.to_string();
        match e {
            // The operator's file on the server: the request was fine, the file is not.
            C::Read(..) | C::TooLarge(_) | C::Invalid { .. } => {
                HttpError::unprocessable(ErrorCode::Rejected, message)
            }
            C::NoFile => HttpError::new(StatusCode::CONFLICT, ErrorCode::Conflict, message),
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::{ErrorCode, HttpError};
    use crate::trust::TrustError;

    #[test]
    fn trust_errors_that_are_not_ours_are_not_500() {
        let e = HttpError::from(TrustError::Threshold {
            threshold: 3,
            keys: 1,
        });
        assert_eq!(
            (e.status, e.code),
            (StatusCode::UNPROCESSABLE_ENTITY, ErrorCode::Rejected)
        );
        let e = HttpError::from(TrustError::NotInitialized);
        assert_eq!(
            (e.status, e.code),
            (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::NotInitialized)
        );
        let e = HttpError::from(TrustError::Corrupt("root v2 is missing".into()));
        assert_eq!(
            (e.status, e.code),
            (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal)
        );
        // Internals stay in the log.
        assert!(!e.message.contains("root v2"), "{}", e.message);
    }

    #[test]
    fn codes_serialize_as_their_wire_names() {
        for code in [
            ErrorCode::BadRequest,
            ErrorCode::NotInitialized,
            ErrorCode::PayloadTooLarge,
            ErrorCode::Internal,
        ] {
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::Value::from(code.as_str())
            );
        }
    }
}
