//! What the admin API refuses, each with one status and one stable code, in the OpenAI
//! envelope like every other error (`ApiError::Control`). Here, beside `ApiError`, so the
//! operator side (the `admin` module) builds on the edge and the edge never reaches back into it.

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("{0}")]
    ReadOnly(String),
    #[error("{section} {id:?} already exists{where_}")]
    Exists {
        section: String,
        id: String,
        where_: &'static str,
    },
    #[error("no {section} entry is named {id:?}")]
    Missing { section: String, id: String },
    #[error("this admin may only read (role viewer)")]
    Forbidden,
    #[error("a console write needs the session's CSRF token in x-csrf-token")]
    Csrf,
    #[error("{0}")]
    OutOfScope(String),
    #[error("too many failed admin attempts from this address; try again in {0} s")]
    RateLimited(u64),
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error(
        "store.master_key (or SWITCHYARD_MASTER_KEY) is not set: upstream keys and gateway keys cannot be kept without it"
    )]
    NoMasterKey,
    #[error("{0}")]
    InUse(String),
    #[error("the store failed: {0}")]
    Store(String),
    #[error("the store kept changing while this change was checked; send it again")]
    Busy,
    #[error("this Idempotency-Key was used for another request")]
    KeyReused,
}

impl ControlError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ControlError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            ControlError::ReadOnly(_)
            | ControlError::Exists { .. }
            | ControlError::InUse(_)
            | ControlError::Busy => 409,
            ControlError::KeyReused => 422,
            ControlError::Missing { .. } => 404,
            ControlError::Forbidden | ControlError::Csrf | ControlError::OutOfScope(_) => 403,
            ControlError::RateLimited(_) => 429,
            ControlError::Invalid { .. } | ControlError::NoMasterKey => 400,
            ControlError::Store(_) => 503,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ControlError::ReadOnly(_) => "read_only",
            ControlError::Exists { .. } => "already_exists",
            ControlError::Missing { .. } => "not_found",
            ControlError::Forbidden => "forbidden",
            ControlError::Csrf => "csrf_failed",
            ControlError::OutOfScope(_) => "out_of_scope",
            ControlError::RateLimited(_) => "too_many_attempts",
            ControlError::Invalid { .. } => "invalid_value",
            ControlError::NoMasterKey => "master_key_missing",
            ControlError::InUse(_) => "in_use",
            ControlError::Store(_) => "store_unavailable",
            ControlError::Busy => "write_conflict",
            ControlError::KeyReused => "idempotency_key_reused",
        }
    }

    pub fn param(&self) -> Option<&str> {
        match self {
            ControlError::Invalid { field, .. } => Some(field),
            ControlError::NoMasterKey => Some("store.master_key"),
            _ => None,
        }
    }

    pub fn retry_after(&self) -> Option<u64> {
        match self {
            ControlError::RateLimited(s) => Some(*s),
            _ => None,
        }
    }
}
