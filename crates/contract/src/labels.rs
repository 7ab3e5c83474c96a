//! The pod label that carries a server's role: the operator sets it, the Services select on it
//! and the agent reads it from the downward-API labels file.

use std::fmt;

/// Label on server pods: `primary` or `replica`.
pub const ROLE: &str = "mysql.bulwark.dev/role";

/// A server's role in its cluster.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Takes writes.
    Primary,
    /// Replicates from the primary, read-only.
    Replica,
}

impl Role {
    /// Every role, for tables and tests.
    pub const ALL: [Role; 2] = [Role::Primary, Role::Replica];

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Replica => "replica",
        }
    }

    /// The role a label value names.
    pub fn from_label(value: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == value)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_round_trip() {
        for r in Role::ALL {
            assert_eq!(Role::from_label(r.as_str()), Some(r));
        }
        assert_eq!(Role::from_label("Primary"), None);
        assert_eq!(Role::from_label(""), None);
    }
}
