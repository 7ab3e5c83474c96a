//! Which server images a cluster may run. `spec.image` runs in a pod that mounts the root
//! password and the cluster's data, so whoever may edit a `MySQLCluster` may choose it only
//! among the repositories the operator's administrator allows (the official images by
//! default); an image is compared by its repository, whatever its tag or digest.

use std::collections::BTreeSet;

use bulwark_api::MySQLCluster;

/// The official images' repositories: what a cluster may name unless the operator is told
/// otherwise.
pub const DEFAULT_REPOSITORIES: &str = "docker.io/library/mariadb,docker.io/library/mysql";

/// The server images the operator lets a cluster name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerImages {
    /// Any image (`*`).
    Any,
    /// Images of these repositories (normalized, [`repository`]).
    Repositories(BTreeSet<String>),
}

impl Default for ServerImages {
    fn default() -> Self {
        ServerImages::parse(DEFAULT_REPOSITORIES).expect("the defaults parse")
    }
}

impl ServerImages {
    /// A comma-separated list of repositories (`registry/path`, no tag or digest), or `*`.
    pub fn parse(list: &str) -> Result<ServerImages, String> {
        let entries: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        if entries == ["*"] {
            return Ok(ServerImages::Any);
        }
        if entries.contains(&"*") {
            return Err("server image repository * allows any image: give it alone".into());
        }
        let mut repositories = BTreeSet::new();
        for e in entries {
            if e.contains('@') || e.rsplit('/').next().is_some_and(|last| last.contains(':')) {
                return Err(format!(
                    "server image repository {e:?} has a tag or digest: name the repository only, e.g. docker.io/library/mariadb"
                ));
            }
            repositories.insert(repository(e));
        }
        if repositories.is_empty() {
            return Err("no server image repository is allowed: name at least one, or *".into());
        }
        Ok(ServerImages::Repositories(repositories))
    }

    /// Why `cluster` may not run its `spec.image`, if it may not: an unset one runs the
    /// official image, always allowed, and so is the image the cluster's server already runs
    /// (`running`, as the operator last set it), so that a cluster made before the operator
    /// allowed less keeps being managed (failover, backups) until its image is changed.
    pub fn check(&self, cluster: &MySQLCluster, running: Option<&str>) -> Option<String> {
        let image = cluster.spec.image.as_deref()?;
        if running.is_some_and(|r| r == image || r == qualified(image)) {
            return None;
        }
        match self {
            ServerImages::Any => None,
            ServerImages::Repositories(allowed) => {
                let repo = repository(image);
                (!allowed.contains(&repo)).then(|| {
                    format!(
                        "spec.image {image} is of repository {repo}, which the operator does not allow (it allows {}): ask its administrator to allow it (the chart's serverImageRepositories), or leave spec.image unset for the official image",
                        allowed.iter().cloned().collect::<Vec<_>>().join(", ")
                    )
                })
            }
        }
    }
}

/// The repository of image reference `image`, as Docker Hub's conventions resolve it: without
/// tag or digest, on `docker.io` when no registry is named (`index.docker.io` and
/// `registry-1.docker.io` are its other names), under `library/` for a name of one part.
pub fn repository(image: &str) -> String {
    split(image).0
}

/// `image` fully qualified ([`repository`], then its tag and digest as given): what the pod
/// runs, so that no runtime resolves a short name through search registries of its own.
pub fn qualified(image: &str) -> String {
    let (repository, suffix) = split(image);
    format!("{repository}{suffix}")
}

/// The normalized repository of `image`, and its tag and digest (`:tag`, `@digest`, both, or
/// nothing) as given.
fn split(image: &str) -> (String, &str) {
    let image = image.trim();
    let digest_at = image.find('@').unwrap_or(image.len());
    let name = &image[..digest_at];
    let tag_at = match name.rfind(':') {
        Some(at) if !name[at..].contains('/') => at,
        _ => name.len(),
    };
    let repo = &name[..tag_at];
    let suffix = &image[tag_at..];
    let (first, rest) = match repo.split_once('/') {
        Some((first, rest)) => (first, Some(rest)),
        None => (repo, None),
    };
    // Only a first part followed by more names a registry (`my.image:1` is an image on
    // Docker Hub, as every runtime reads it).
    let is_registry =
        rest.is_some() && (first.contains('.') || first.contains(':') || first == "localhost");
    let registry = if is_registry {
        match first.to_ascii_lowercase().as_str() {
            "index.docker.io" | "registry-1.docker.io" => "docker.io".to_owned(),
            other => other.to_owned(),
        }
    } else {
        "docker.io".to_owned()
    };
    let path = match (is_registry, rest) {
        (true, Some(rest)) => rest,
        _ => repo,
    };
    let path = if registry == "docker.io" && !path.contains('/') {
        format!("library/{path}")
    } else {
        path.to_owned()
    };
    (format!("{registry}/{path}"), suffix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_known_by_their_repository() {
        let cases = [
            ("mariadb:11.4", "docker.io/library/mariadb"),
            ("mariadb", "docker.io/library/mariadb"),
            (
                "docker.io/library/mariadb:10.11",
                "docker.io/library/mariadb",
            ),
            (
                "docker.io/library/mariadb@sha256:0123abcd",
                "docker.io/library/mariadb",
            ),
            ("bitnami/mariadb:11", "docker.io/bitnami/mariadb"),
            (
                "registry.test:5000/db/mariadb:11.4",
                "registry.test:5000/db/mariadb",
            ),
            ("localhost/mariadb", "localhost/mariadb"),
            ("my.image:1", "docker.io/library/my.image"),
            ("localhost", "docker.io/library/localhost"),
            ("docker.io/mariadb:11", "docker.io/library/mariadb"),
            (
                "index.docker.io/library/mariadb:11",
                "docker.io/library/mariadb",
            ),
            ("registry-1.docker.io/mariadb", "docker.io/library/mariadb"),
            ("Registry.Test/db/mariadb", "registry.test/db/mariadb"),
            (
                "docker.io/library/mariadb:11.4@sha256:00",
                "docker.io/library/mariadb",
            ),
            // Names that only begin like an allowed one are other repositories.
            (
                "docker.io/library/mariadb-evil:1",
                "docker.io/library/mariadb-evil",
            ),
        ];
        for (image, want) in cases {
            assert_eq!(repository(image), want, "{image}");
        }
        for (image, want) in [
            ("mariadb:11.4", "docker.io/library/mariadb:11.4"),
            ("mariadb@sha256:00", "docker.io/library/mariadb@sha256:00"),
            (
                "mariadb:11.4@sha256:00",
                "docker.io/library/mariadb:11.4@sha256:00",
            ),
            (
                "registry.test:5000/db/mariadb",
                "registry.test:5000/db/mariadb",
            ),
            ("docker.io/library/mysql:8.4", "docker.io/library/mysql:8.4"),
        ] {
            assert_eq!(qualified(image), want, "{image}");
        }
    }

    #[test]
    fn a_cluster_names_only_an_allowed_image() {
        let with_image = |image: Option<&str>| {
            let mut c: MySQLCluster = serde_yaml::from_str(
                "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLCluster\nmetadata: {name: quay}\nspec: {engine: mariadb, version: \"11.4\", storage: {size: 1Gi}}\n",
            )
            .unwrap();
            c.spec.image = image.map(str::to_owned);
            c
        };
        let defaults = ServerImages::default();
        let mirror = ServerImages::parse("registry.test/mirror/mariadb").unwrap();
        // (what, allowed, image, refused)
        let cases = [
            ("unset", &defaults, None, false),
            ("official, short", &defaults, Some("mariadb:11.4"), false),
            (
                "official, by digest",
                &defaults,
                Some("docker.io/library/mysql@sha256:00"),
                false,
            ),
            (
                "another repository",
                &defaults,
                Some("evil.test/shell:1"),
                true,
            ),
            (
                "a look-alike",
                &defaults,
                Some("docker.io/library/mariadb-x:1"),
                true,
            ),
            (
                "the mirror",
                &mirror,
                Some("registry.test/mirror/mariadb:11.4"),
                false,
            ),
            (
                "official, not allowed there",
                &mirror,
                Some("mariadb:11.4"),
                true,
            ),
            (
                "anything",
                &ServerImages::Any,
                Some("evil.test/shell:1"),
                false,
            ),
        ];
        for (what, allowed, image, refused) in cases {
            let got = allowed.check(&with_image(image), None);
            assert_eq!(got.is_some(), refused, "{what}: {got:?}");
        }
        // What a cluster runs already stays allowed; a change to another is refused.
        let running = Some("registry.old/mariadb:10.11");
        assert_eq!(
            defaults.check(&with_image(Some("registry.old/mariadb:10.11")), running),
            None
        );
        assert!(defaults
            .check(&with_image(Some("registry.old/mariadb:11.4")), running)
            .is_some());
        let message = defaults
            .check(&with_image(Some("evil.test/shell:1")), None)
            .unwrap();
        assert!(
            message.starts_with("spec.image evil.test/shell:1 is of repository evil.test/shell, which the operator does not allow (it allows docker.io/library/mariadb, docker.io/library/mysql)"),
            "{message}"
        );
        for bad in [
            "",
            " , ",
            "mariadb:11.4",
            "docker.io/library/mariadb@sha256:00",
            "*,docker.io/library/mariadb",
        ] {
            assert!(ServerImages::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(ServerImages::parse(" * "), Ok(ServerImages::Any));
    }
}
