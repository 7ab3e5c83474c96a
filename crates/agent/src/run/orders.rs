//! The role orders this agent accepted from the operator (`bulwark_contract::order`): checked
//! against the cluster's order key and this pod's name, never older than the last one, and kept
//! on the data volume so that an agent restart with a stale labels file cannot undo them.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use bulwark_contract::order::{OrderError, RoleOrder, Standing, ORDER_KEY};

use crate::run::files::{self, read_secret};
use crate::run::http::Readiness;
use crate::run::http::Response;

use bulwark_contract::order::ORDER_WAIT;

/// What the order endpoint returns for one request.
pub type Answer = Pin<Box<dyn Future<Output = Response> + Send>>;

/// The `POST /role` handler: the order is checked and kept, the agent's next pass starts at
/// once, and the answer waits (up to [`ORDER_WAIT`]) for a pass that acted on the order's
/// epoch and found nothing left to do: 200 with the member's report then (`/status`'s line),
/// 202 if the agent is still at it, 4xx/5xx with the cause when refused.
pub(crate) fn handler(
    orders: Arc<Orders>,
    credentials_dir: PathBuf,
    wake: Arc<tokio::sync::Notify>,
    passes: tokio::sync::watch::Receiver<()>,
    readiness: Arc<Mutex<Readiness>>,
) -> impl Fn(Bytes) -> Answer + Clone + Send + Sync + 'static {
    move |body: Bytes| {
        let orders = orders.clone();
        let key_file = credentials_dir.join(ORDER_KEY);
        let wake = wake.clone();
        let mut passes = passes.clone();
        let readiness = readiness.clone();
        Box::pin(async move {
            let key = match read_secret(&key_file) {
                Ok(Some(k)) if !k.is_empty() => k,
                Ok(_) => {
                    return refused(&Refusal::NoKey(format!(
                        "{} is missing or empty",
                        key_file.display()
                    )))
                }
                Err(e) => return refused(&Refusal::NoKey(bulwark_engine::error::chain(&e))),
            };
            passes.mark_unchanged();
            let epoch = match orders.accept(&String::from_utf8_lossy(&body), key.as_bytes()) {
                Ok((epoch, _)) => epoch,
                Err(r) => return refused(&r),
            };
            let accepted = std::time::Instant::now();
            wake.notify_one();
            let deadline = tokio::time::Instant::now() + ORDER_WAIT;
            loop {
                {
                    let r = readiness.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(m) = r.member.as_ref().filter(|m| r.settled && m.epoch >= epoch) {
                        let mut m = m.clone();
                        m.age_ms = u64::try_from(r.at.elapsed().as_millis()).unwrap_or(u64::MAX);
                        return Response::new(200, m.to_line());
                    }
                    if r.member.is_none() && r.started >= accepted {
                        // The server is down: the order is kept and acted on once it is up;
                        // waiting longer would only hold the operator's pass.
                        return Response::new(
                            202,
                            format!("order kept, the server is down: {}", r.reason),
                        );
                    }
                }
                if !matches!(
                    tokio::time::timeout_at(deadline, passes.changed()).await,
                    Ok(Ok(()))
                ) {
                    break;
                }
            }
            let reason = readiness
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .reason
                .clone();
            Response::new(
                202,
                format!("order accepted, not carried out yet: {reason}"),
            )
        })
    }
}

fn refused(r: &Refusal) -> Response {
    tracing::warn!(reason = %r, "role order refused");
    Response::new(r.status(), format!("order refused: {r}"))
}

/// Why an order was refused, with the HTTP status it is answered with.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("{0}")]
    Invalid(#[from] OrderError),
    #[error("the order key cannot be read: {0}")]
    NoKey(String),
    #[error("this agent was started without --pod-name and accepts no orders")]
    NoPodName,
    #[error("the order is for {0}, not this pod")]
    OtherMember(String),
    #[error("epoch {got} is older than the accepted epoch {have}")]
    Stale { got: u64, have: u64 },
    #[error("epoch {epoch} was already given as {have}, not {got}")]
    Conflicting {
        epoch: u64,
        have: String,
        got: String,
    },
    #[error("failed to keep the order in {path}: {source}")]
    Persist {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl Refusal {
    /// The HTTP status of the answer.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Invalid(OrderError::Unreadable(_)) => 400,
            Refusal::Invalid(OrderError::BadSignature) | Refusal::OtherMember(_) => 403,
            Refusal::Stale { .. } | Refusal::Conflicting { .. } => 409,
            Refusal::NoKey(_) | Refusal::NoPodName | Refusal::Persist { .. } => 500,
        }
    }
}

/// The accepted orders.
pub struct Orders {
    pod_name: Option<String>,
    file: Option<PathBuf>,
    current: Mutex<Kept>,
}

struct Kept {
    order: Option<RoleOrder>,
    /// The order was accepted by this agent, not loaded from the file.
    fresh: bool,
    /// Why the kept order could not be read at start, until another is accepted.
    unreadable: Option<String>,
}

impl Orders {
    /// Orders for `pod_name`, kept in `file`; the order already there is loaded. An unreadable
    /// file leaves the role unknown until the next order: it may hold a demotion that the labels
    /// do not show yet.
    pub fn load(pod_name: Option<String>, file: Option<PathBuf>) -> Orders {
        let mut unreadable = None;
        let current = file.as_deref().and_then(|path| match read(path) {
            Ok(order) => order,
            Err(e) => {
                let why = format!(
                    "role unknown: the kept role order {} cannot be read ({e}); waiting for the \
                     operator's next order",
                    path.display()
                );
                tracing::error!(reason = %why, "kept role order unreadable");
                unreadable = Some(why);
                None
            }
        });
        if let Some(o) = &current {
            tracing::info!(role = %o.role, epoch = o.epoch, "kept role order loaded");
        }
        Orders {
            pod_name,
            file,
            current: Mutex::new(Kept {
                order: current,
                fresh: false,
                unreadable,
            }),
        }
    }

    /// The role and epoch of the last accepted order; an error while the kept one is
    /// unreadable. An order kept from before a restart counts only when it demotes: the
    /// operator makes a restarted server primary again only after comparing its data, so a
    /// kept `primary` gives way to the labels.
    pub fn standing(&self) -> Result<Option<Standing>, String> {
        let kept = self.lock();
        match &kept.unreadable {
            Some(why) => Err(why.clone()),
            None => Ok(kept
                .order
                .as_ref()
                .filter(|o| kept.fresh || o.role == bulwark_contract::Role::Replica)
                .map(RoleOrder::standing)),
        }
    }

    /// The primary a replica order names to replicate from, with the order's epoch.
    pub fn source(&self) -> Option<(u64, String)> {
        let kept = self.lock();
        let o = kept.order.as_ref()?;
        Some((o.epoch, o.source.clone()?))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Checks a signed order with `key` and keeps it. Returns its epoch and whether it changed
    /// anything.
    pub fn accept(&self, line: &str, key: &[u8]) -> Result<(u64, bool), Refusal> {
        let order = RoleOrder::verify(line, key)?;
        let me = self.pod_name.as_deref().ok_or(Refusal::NoPodName)?;
        if order.member != me {
            return Err(Refusal::OtherMember(order.member));
        }
        let mut kept = self.lock();
        if let Some(have) = kept.order.as_ref() {
            if order.epoch < have.epoch {
                return Err(Refusal::Stale {
                    got: order.epoch,
                    have: have.epoch,
                });
            }
            if order.epoch == have.epoch {
                if order.role != have.role {
                    return Err(Refusal::Conflicting {
                        epoch: order.epoch,
                        have: have.role.to_string(),
                        got: order.role.to_string(),
                    });
                }
                return Ok((order.epoch, false));
            }
        }
        if let Some(path) = &self.file {
            write(path, &order).map_err(|source| Refusal::Persist {
                path: path.display().to_string(),
                source,
            })?;
        }
        tracing::info!(role = %order.role, epoch = order.epoch, "role order accepted");
        let epoch = order.epoch;
        kept.order = Some(order);
        kept.fresh = true;
        kept.unreadable = None;
        Ok((epoch, true))
    }
}

fn read(path: &Path) -> std::io::Result<Option<RoleOrder>> {
    let invalid = |e| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    files::read_if_present(path)?
        .map(|text| serde_json::from_str(&text).map_err(invalid))
        .transpose()
}

/// Written whole or not at all (`files::replace`); an order that does not serialize is an
/// error, never an empty file.
fn write(path: &Path, order: &RoleOrder) -> std::io::Result<()> {
    let text = serde_json::to_vec(order).map_err(std::io::Error::other)?;
    files::replace(path, &text, 0o600).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bulwark_contract::Role;

    fn signed(member: &str, role: Role, epoch: u64) -> String {
        RoleOrder {
            member: member.into(),
            role,
            epoch,
            source: None,
        }
        .sign(b"k")
    }

    #[test]
    fn orders_are_checked_kept_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("role-order");
        let orders = Orders::load(Some("quay-1".into()), Some(file.clone()));
        assert_eq!(orders.standing(), Ok(None));
        let refusals = [
            (
                signed("quay-1", Role::Primary, 2).replace("\"mac\":\"", "\"mac\":\"0"),
                403,
            ),
            (signed("quay-2", Role::Primary, 2), 403),
            ("{".to_owned(), 400),
        ];
        for (line, status) in &refusals {
            assert_eq!(
                orders.accept(line, b"k").unwrap_err().status(),
                *status,
                "{line}"
            );
        }
        assert_eq!(
            orders
                .accept(&signed("quay-1", Role::Primary, 2), b"k")
                .unwrap(),
            (2, true)
        );
        assert_eq!(
            orders
                .accept(&signed("quay-1", Role::Primary, 2), b"k")
                .unwrap(),
            (2, false)
        );
        for (line, status) in [
            (signed("quay-1", Role::Replica, 1), 409),
            (signed("quay-1", Role::Replica, 2), 409),
        ] {
            assert_eq!(orders.accept(&line, b"k").unwrap_err().status(), status);
        }
        assert!(
            orders
                .accept(&signed("quay-1", Role::Replica, 3), b"k")
                .unwrap()
                .1
        );
        let want = Ok(Some(Standing {
            role: Role::Replica,
            epoch: 3,
        }));
        assert_eq!(orders.standing(), want);
        assert_eq!(
            Orders::load(Some("quay-1".into()), Some(file.clone())).standing(),
            want
        );
        // A kept promotion does not survive a restart; a kept demotion does.
        assert!(
            orders
                .accept(&signed("quay-1", Role::Primary, 4), b"k")
                .unwrap()
                .1
        );
        assert_eq!(orders.standing().unwrap().unwrap().role, Role::Primary);
        let restarted = Orders::load(Some("quay-1".into()), Some(file.clone()));
        assert_eq!(restarted.standing(), Ok(None));
        // Nor does it let an older order through.
        assert_eq!(
            restarted
                .accept(&signed("quay-1", Role::Replica, 3), b"k")
                .unwrap_err()
                .status(),
            409
        );
        // Without a pod name nothing is accepted.
        let nameless = Orders::load(None, None);
        assert_eq!(
            nameless
                .accept(&signed("quay-1", Role::Primary, 9), b"k")
                .unwrap_err()
                .status(),
            500
        );
        // A damaged file leaves the role unknown until the next order.
        std::fs::write(&file, "garbage").unwrap();
        let damaged = Orders::load(Some("quay-1".into()), Some(file));
        assert!(damaged.standing().unwrap_err().contains("cannot be read"));
        assert!(
            damaged
                .accept(&signed("quay-1", Role::Replica, 1), b"k")
                .unwrap()
                .1
        );
        assert_eq!(damaged.standing().unwrap().unwrap().epoch, 1);
    }
}
