//! `admin.v1.ReviewService` on the server: the marketplace's reviewers list
//! submissions and approve, request changes or reject them, under
//! `/admin.v1.ReviewService/`, with a reviewer's bearer token (`marketplace reviewer
//! add`). A submission is a version under review: its id is the version's.
//!
//! Layering: HTTP only; the rules come from `review`.

use std::sync::Arc;

use buffa::EnumValue;
use connectrpc::{ConnectError, RequestContext, ServiceRequest, ServiceResult};

use super::{caller, maybe_timestamp, review_refused, submission_status, timestamp};
use crate::api::AppState;
use crate::api::auth::Role;
use crate::catalog::rbac;
use crate::definition::{Definition, PolicyRule};
use crate::ids;
use crate::proto::admin::v1 as pb;
use crate::proto::admin::v1::ReviewServiceExt;
use crate::proto::marketplace::v1 as shared;
use crate::review::{self, Action, Actor, Decision, RejectionReason, Status};
use crate::store::ReviewVersionRow;

pub fn router(state: &AppState) -> axum::Router<AppState> {
    let service = Arc::new(Reviews {
        state: state.clone(),
    });
    super::mount(
        "/admin.v1.ReviewService/{method}",
        service.register(connectrpc::Router::new()),
        super::LIMITS,
    )
}

struct Reviews {
    state: AppState,
}

impl Reviews {
    async fn reviewer(&self, ctx: &RequestContext) -> Result<Actor, ConnectError> {
        Ok(Actor::Reviewer(
            caller(&self.state, ctx, Role::Reviewer).await?,
        ))
    }

    async fn decide(
        &self,
        ctx: &RequestContext,
        id: &str,
        action: Action,
        decision: Decision,
    ) -> Result<pb::Submission, ConnectError> {
        let me = self.reviewer(ctx).await?;
        let row = review::act(
            &self.state.store,
            &me,
            id,
            action,
            Some(decision),
            crate::clock::now(),
        )
        .await
        .map_err(review_refused)?;
        tracing::info!(reviewer = ?me, publisher = %row.publisher, plugin = %row.name, version = %row.version, hash = %row.hash, status = %row.status, "review decision");
        Ok(submission(row))
    }
}

fn reason(r: RejectionReason) -> EnumValue<pb::RejectionReason> {
    use pb::RejectionReason as R;
    EnumValue::Known(match r {
        RejectionReason::IncompleteMetadata => R::REJECTION_REASON_INCOMPLETE_METADATA,
        RejectionReason::Duplicate => R::REJECTION_REASON_DUPLICATE,
        RejectionReason::SecurityConcerns => R::REJECTION_REASON_SECURITY_CONCERNS,
        RejectionReason::NamingGuidelines => R::REJECTION_REASON_NAMING_GUIDELINES,
        RejectionReason::OutOfScope => R::REJECTION_REASON_OUT_OF_SCOPE,
        RejectionReason::Other => R::REJECTION_REASON_OTHER,
    })
}

fn parse_reason(r: EnumValue<pb::RejectionReason>) -> Result<RejectionReason, ConnectError> {
    use pb::RejectionReason as R;
    Ok(match r {
        EnumValue::Known(R::REJECTION_REASON_INCOMPLETE_METADATA) => {
            RejectionReason::IncompleteMetadata
        }
        EnumValue::Known(R::REJECTION_REASON_DUPLICATE) => RejectionReason::Duplicate,
        EnumValue::Known(R::REJECTION_REASON_SECURITY_CONCERNS) => {
            RejectionReason::SecurityConcerns
        }
        EnumValue::Known(R::REJECTION_REASON_NAMING_GUIDELINES) => {
            RejectionReason::NamingGuidelines
        }
        EnumValue::Known(R::REJECTION_REASON_OUT_OF_SCOPE) => RejectionReason::OutOfScope,
        EnumValue::Known(R::REJECTION_REASON_OTHER) => RejectionReason::Other,
        EnumValue::Known(R::REJECTION_REASON_UNSPECIFIED) => {
            return Err(ConnectError::invalid_argument(
                "reason: a rejection needs a reason (REJECTION_REASON_INCOMPLETE_METADATA to REJECTION_REASON_OTHER)",
            ));
        }
        EnumValue::Unknown(n) => {
            return Err(ConnectError::invalid_argument(format!(
                "reason: {n} is not a RejectionReason (1 to 6)"
            )));
        }
    })
}

fn status_filter(s: EnumValue<shared::SubmissionStatus>) -> Result<Option<Status>, ConnectError> {
    use shared::SubmissionStatus as S;
    Ok(Some(match s {
        EnumValue::Known(S::SUBMISSION_STATUS_UNSPECIFIED) => return Ok(None),
        EnumValue::Known(S::SUBMISSION_STATUS_DRAFT) => Status::Draft,
        EnumValue::Known(S::SUBMISSION_STATUS_PENDING) => Status::Pending,
        EnumValue::Known(S::SUBMISSION_STATUS_CHANGES_REQUESTED) => Status::ChangesRequested,
        EnumValue::Known(S::SUBMISSION_STATUS_APPROVED) => Status::Approved,
        EnumValue::Known(S::SUBMISSION_STATUS_REJECTED) => Status::Rejected,
        EnumValue::Known(S::SUBMISSION_STATUS_WITHDRAWN) => Status::Withdrawn,
        EnumValue::Unknown(n) => {
            return Err(ConnectError::invalid_argument(format!(
                "status: {n} is not a SubmissionStatus (0 to 6)"
            )));
        }
    }))
}

fn submission(r: ReviewVersionRow) -> pb::Submission {
    let status = Status::parse(&r.status).unwrap_or(Status::Draft);
    pb::Submission {
        plugin_version_id: r.id.clone(),
        organization_id: ids::publisher(&r.publisher),
        // A publisher's tokens carry no user: the organization submits.
        submitter_user_id: ids::publisher(&r.publisher),
        status: submission_status(status),
        submitted: maybe_timestamp(r.submitted_at),
        reviewed: maybe_timestamp(r.reviewed_at),
        reviewer_user_id: r.reviewer.as_deref().map(ids::reviewer).unwrap_or_default(),
        rejection_reason: r
            .rejection_reason
            .as_deref()
            .and_then(RejectionReason::parse)
            .map(reason)
            .unwrap_or_default(),
        feedback: r.feedback,
        id: r.id,
        plugin_id: r.listing_id,
        ..Default::default()
    }
}

/// A version with what its definition asks for: capabilities as written, RBAC as the
/// catalog states it (resource and verbs).
fn version(v: review::VersionView, definition: Option<&Definition>) -> pb::PluginVersion {
    let status = v.status();
    let r = v.row;
    let (capabilities, permissions) = match definition {
        Some(d) => {
            let rules: Vec<&PolicyRule> = d
                .manifest
                .spec
                .permissions
                .rbac
                .iter()
                .map(|r| &r.value)
                .collect();
            (
                d.manifest
                    .spec
                    .permissions
                    .capabilities
                    .iter()
                    .map(|c| c.value.clone())
                    .collect(),
                rbac::verbs_by_resource(&rules)
                    .into_iter()
                    .map(|p| shared::PluginPermission {
                        resource: p.resource,
                        access: p.verbs.join(", "),
                        ..Default::default()
                    })
                    .collect(),
            )
        }
        None => (Vec::new(), Vec::new()),
    };
    pb::PluginVersion {
        status: submission_status(status),
        capabilities,
        permissions,
        created: timestamp(r.created_at),
        submitted: maybe_timestamp(r.submitted_at),
        published: maybe_timestamp(r.published_at),
        id: r.id,
        plugin_id: r.listing_id,
        version: r.version,
        image: r.image,
        definition_hash: r.hash,
        release_notes: r.release_notes,
        ..Default::default()
    }
}

fn plugin(l: review::Listing) -> pb::Plugin {
    let r = l.row;
    pb::Plugin {
        organization_id: ids::publisher(&r.publisher),
        created: timestamp(r.created_at),
        updated: timestamp(r.updated_at),
        id: r.id,
        name: r.name,
        display_name: r.display_name,
        description_short: r.description_short,
        description: r.description,
        image: r.image,
        category_ids: r.category_ids,
        tags: r.tags,
        ..Default::default()
    }
}

#[allow(refining_impl_trait)]
impl pb::ReviewService for Reviews {
    async fn list_submissions(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::ListSubmissionsRequest>,
    ) -> ServiceResult<pb::ListSubmissionsResponse> {
        self.reviewer(&ctx).await?;
        let status = status_filter(request.status)?;
        let rows = review::submissions(&self.state.store, status)
            .await
            .map_err(review_refused)?;
        connectrpc::Response::ok(pb::ListSubmissionsResponse {
            submissions: rows.into_iter().map(submission).collect(),
            ..Default::default()
        })
    }

    async fn get_submission(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::GetSubmissionRequest>,
    ) -> ServiceResult<pb::GetSubmissionResponse> {
        let me = self.reviewer(&ctx).await?;
        let id = crate::review::listing::uuid("submission_id", request.submission_id)
            .map_err(review_refused)?;
        let v = review::version(&self.state.store, &me, &id)
            .await
            .map_err(review_refused)?;
        if !v.reviewed {
            return Err(ConnectError::not_found(format!(
                "submission {id} not found (that version was published without review)"
            )));
        }
        connectrpc::Response::ok(pb::GetSubmissionResponse {
            submission: submission(v.row).into(),
            ..Default::default()
        })
    }

    async fn approve_submission(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::ApproveSubmissionRequest>,
    ) -> ServiceResult<pb::ApproveSubmissionResponse> {
        let decision = Decision::Approve {
            feedback: request.feedback.to_owned(),
        };
        let s = self
            .decide(&ctx, request.submission_id, Action::Approve, decision)
            .await?;
        connectrpc::Response::ok(pb::ApproveSubmissionResponse {
            submission: s.into(),
            ..Default::default()
        })
    }

    async fn request_changes(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::RequestChangesRequest>,
    ) -> ServiceResult<pb::RequestChangesResponse> {
        let decision = Decision::RequestChanges {
            feedback: request.feedback.to_owned(),
        };
        let s = self
            .decide(
                &ctx,
                request.submission_id,
                Action::RequestChanges,
                decision,
            )
            .await?;
        connectrpc::Response::ok(pb::RequestChangesResponse {
            submission: s.into(),
            ..Default::default()
        })
    }

    async fn reject_submission(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::RejectSubmissionRequest>,
    ) -> ServiceResult<pb::RejectSubmissionResponse> {
        let decision = Decision::Reject {
            reason: parse_reason(request.reason)?,
            feedback: request.feedback.to_owned(),
        };
        let s = self
            .decide(&ctx, request.submission_id, Action::Reject, decision)
            .await?;
        connectrpc::Response::ok(pb::RejectSubmissionResponse {
            submission: s.into(),
            ..Default::default()
        })
    }

    async fn list_plugins(
        &self,
        ctx: RequestContext,
        _request: ServiceRequest<'_, pb::ListPluginsRequest>,
    ) -> ServiceResult<pb::ListPluginsResponse> {
        let me = self.reviewer(&ctx).await?;
        let listings = review::listings(&self.state.store, &me)
            .await
            .map_err(review_refused)?;
        connectrpc::Response::ok(pb::ListPluginsResponse {
            plugins: listings.into_iter().map(plugin).collect(),
            ..Default::default()
        })
    }

    async fn get_plugin(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::GetPluginRequest>,
    ) -> ServiceResult<pb::GetPluginResponse> {
        let me = self.reviewer(&ctx).await?;
        let l = review::listing(&self.state.store, &me, request.plugin_id)
            .await
            .map_err(review_refused)?;
        connectrpc::Response::ok(pb::GetPluginResponse {
            plugin: plugin(l).into(),
            ..Default::default()
        })
    }

    async fn get_plugin_version(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, pb::GetPluginVersionRequest>,
    ) -> ServiceResult<pb::GetPluginVersionResponse> {
        let me = self.reviewer(&ctx).await?;
        let store = &self.state.store;
        let v = review::version(store, &me, request.plugin_version_id)
            .await
            .map_err(review_refused)?;
        let bytes = review::manifest(store, &v).await.map_err(review_refused)?;
        // Published bytes of the older design still say what they ask for.
        let definition = Definition::parse_published(&bytes).ok();
        connectrpc::Response::ok(pb::GetPluginVersionResponse {
            version: version(v, definition.as_ref()).into(),
            ..Default::default()
        })
    }

    async fn list_categories(
        &self,
        ctx: RequestContext,
        _request: ServiceRequest<'_, pb::ListCategoriesRequest>,
    ) -> ServiceResult<pb::ListCategoriesResponse> {
        self.reviewer(&ctx).await?;
        connectrpc::Response::ok(pb::ListCategoriesResponse {
            categories: super::publication::categories(&self.state),
            ..Default::default()
        })
    }

    async fn list_publishers(
        &self,
        ctx: RequestContext,
        _request: ServiceRequest<'_, pb::ListPublishersRequest>,
    ) -> ServiceResult<pb::ListPublishersResponse> {
        self.reviewer(&ctx).await?;
        let publishers = self
            .state
            .store
            .publisher_list()
            .await
            .map_err(|e| super::to_connect(e.into()))?;
        connectrpc::Response::ok(pb::ListPublishersResponse {
            publishers: publishers
                .into_iter()
                .map(|p| shared::Publisher {
                    id: ids::publisher(&p.name),
                    display_name: p.name.clone(),
                    name: p.name,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
    }
}
