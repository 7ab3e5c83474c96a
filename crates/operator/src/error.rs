//! Errors of the controllers, each named for the API call that failed and classified into a
//! short static category (event reason and metric label).

/// A failed step of a reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading an object failed.
    #[error("failed to read {kind} {name}")]
    Read {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Listing objects failed.
    #[error("failed to list {kind}")]
    List {
        kind: &'static str,
        #[source]
        source: kube::Error,
    },
    /// Server-side apply of an object failed.
    #[error("failed to apply {kind} {name}")]
    Apply {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Creating an object failed.
    #[error("failed to create {kind} {name}")]
    Create {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Deleting an object failed.
    #[error("failed to delete {kind} {name}")]
    Delete {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Writing an object's status failed.
    #[error("failed to update status of {kind} {name}")]
    UpdateStatus {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Adding or removing a finalizer failed.
    #[error("failed to update finalizers of {kind} {name}")]
    UpdateFinalizers {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// An object the operator built could not be serialized.
    #[error("failed to serialize {kind}")]
    Serialize {
        kind: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// Short static category: the event reason suffix and the `category` metric label.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Read { .. } => "read",
            Error::List { .. } => "list",
            Error::Apply { .. } => "apply",
            Error::Create { .. } => "create",
            Error::Delete { .. } => "delete",
            Error::UpdateStatus { .. } => "status",
            Error::UpdateFinalizers { .. } => "finalizers",
            Error::Serialize { .. } => "serialize",
        }
    }

    /// Whether retrying can help: API errors other than rejections of what we sent.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Serialize { .. } => false,
            Error::Read { source, .. }
            | Error::List { source, .. }
            | Error::Apply { source, .. }
            | Error::Create { source, .. }
            | Error::Delete { source, .. }
            | Error::UpdateStatus { source, .. }
            | Error::UpdateFinalizers { source, .. } => !matches!(
                source,
                kube::Error::Api(resp) if matches!(resp.code, 400 | 403 | 422)
            ),
        }
    }

    /// Whether a status write was refused because it was decided from a stale copy: not a
    /// failure, the reconcile just runs again on fresh data.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::UpdateStatus { source, .. } if is_conflict(source))
    }
}

/// The message of an error and its sources, joined by ": ".
pub fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![err.to_string()];
    let mut cur = err.source();
    while let Some(e) = cur {
        parts.push(e.to_string());
        cur = e.source();
    }
    parts.join(": ")
}

/// Whether a kube error is a 404.
pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(resp) if resp.code == 404)
}

/// Whether a kube error is a 409 AlreadyExists.
pub fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(resp) if resp.code == 409)
}

/// Result of a reconcile step.
pub type Result<T, E = Error> = std::result::Result<T, E>;
