//! One namespace per test, with a unique name. When the test panics, dropping the guard prints
//! the namespace name and the tails of the control-plane logs.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::error::{Error, Result};

/// Label put on every namespace created by the test environment.
pub const TEST_NAMESPACE_LABEL: &str = "bulwark.dev/testenv";

/// A namespace created for one test.
pub struct TestNamespace {
    client: Client,
    name: String,
}

impl TestNamespace {
    /// Creates a namespace named `<prefix>-<unique suffix>`. `prefix` should be short and made
    /// of lowercase letters, digits and dashes.
    pub async fn create(client: &Client, prefix: &str) -> Result<Self> {
        let name = unique_name(prefix);
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([(TEST_NAMESPACE_LABEL.to_owned(), "true".to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .map_err(|source| Error::Api {
                action: format!("create namespace {name}"),
                source: Box::new(source),
            })?;
        Ok(Self {
            client: client.clone(),
            name,
        })
    }

    /// Name of the namespace.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Deletes the namespace (its objects are removed by the namespace controller).
    pub async fn delete(self) -> Result<()> {
        Api::<Namespace>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await
            .map_err(|source| Error::Api {
                action: format!("delete namespace {}", self.name),
                source: Box::new(source),
            })?;
        Ok(())
    }
}

impl std::fmt::Debug for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNamespace")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = crate::SHARED_OWNER
                .lock()
                .map(|owner| owner.as_ref().map(crate::ControlPlane::log_tails))
                .ok()
                .flatten()
                .unwrap_or_default();
            eprintln!(
                "bulwark-testenv: test using namespace {} failed\n{logs}",
                self.name
            );
        }
    }
}

/// `<prefix>-<pid base36><counter base36><time base36>`, at most 63 characters.
fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let suffix = format!(
        "{}{}{}",
        base36(u64::from(std::process::id())),
        base36(u64::from(count)),
        base36(u64::from(nanos))
    );
    let prefix: String = prefix
        .trim_matches('-')
        .chars()
        .take(63 - 1 - suffix.len())
        .collect();
    format!("{prefix}-{suffix}")
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ASCII digits")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_valid() {
        let a = unique_name("restore-test");
        let b = unique_name("restore-test");
        assert_ne!(a, b);
        for name in [&a, &b] {
            assert!(name.starts_with("restore-test-"), "{name}");
            assert!(name.len() <= 63, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{name}"
            );
        }
        let long = unique_name(&"x".repeat(100));
        assert!(long.len() <= 63, "{long}");
    }

    #[test]
    fn base36_encodes() {
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "z");
        assert_eq!(base36(36), "10");
    }
}
