//! The admission policy that narrows what the operator's RBAC grants: on pods it may change the
//! role and epoch labels only and delete only server pods (a rolling change restarts them), and
//! it writes only Secrets it labels as its own. The Helm chart installs
//! exactly this policy (a test compares them); the controller tests run under it.
//!
//! RBAC cannot express these limits: `patch` on pods covers their images and commands, `delete`
//! covers every pod of a namespace, and `create`/`patch` on secrets cannot be restricted to
//! names that are only known at run time.

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The username a service account's requests carry.
pub fn service_account_user(namespace: &str, account: &str) -> String {
    format!("system:serviceaccount:{namespace}:{account}")
}

/// CEL: the labels of the new and the old object, empty when absent (or no old object).
const VARIABLES: &[(&str, &str)] = &[
    ("labels", "object.metadata.?labels.orValue({})"),
    (
        "oldLabels",
        "oldObject == null ? {} : oldObject.metadata.?labels.orValue({})",
    ),
];

/// A CEL check and the message of a request it refuses.
struct Check {
    expression: &'static str,
    message: &'static str,
}

const CHECKS: &[Check] = &[
    Check {
        expression: "request.resource.resource != 'pods' || request.operation == 'DELETE' || \
            object.spec == oldObject.spec",
        message: "the MySQL operator may not change a pod's spec",
    },
    Check {
        expression: "request.resource.resource != 'pods' || request.operation == 'DELETE' || \
            (object.metadata.?annotations == oldObject.metadata.?annotations && \
            object.metadata.?finalizers == oldObject.metadata.?finalizers && \
            object.metadata.?ownerReferences == oldObject.metadata.?ownerReferences && \
            variables.labels.all(k, k in ['mysql.bulwark.dev/role', 'mysql.bulwark.dev/epoch'] || \
            (k in variables.oldLabels && variables.oldLabels[k] == variables.labels[k])) && \
            variables.oldLabels.all(k, k in ['mysql.bulwark.dev/role', 'mysql.bulwark.dev/epoch'] || \
            k in variables.labels))",
        message: "the MySQL operator may change only the mysql.bulwark.dev/role and \
            mysql.bulwark.dev/epoch labels of a pod",
    },
    Check {
        expression: "request.resource.resource != 'pods' || request.operation != 'DELETE' || \
            (variables.oldLabels[?'app.kubernetes.io/managed-by'] == optional.of('bulwark-operator') && \
            variables.oldLabels[?'app.kubernetes.io/component'] == optional.of('database'))",
        message: "the MySQL operator may delete only the server pods of its clusters",
    },
    Check {
        expression: "request.resource.resource != 'secrets' || \
            variables.labels[?'app.kubernetes.io/managed-by'] == optional.of('bulwark-operator')",
        message: "the MySQL operator may write only Secrets labelled \
            app.kubernetes.io/managed-by=bulwark-operator",
    },
    Check {
        expression:
            "request.resource.resource != 'secrets' || request.operation == 'CREATE' || \
            variables.oldLabels[?'app.kubernetes.io/managed-by'] == optional.of('bulwark-operator')",
        message: "the MySQL operator may not take over a Secret it did not create",
    },
];

/// The policy (and its binding) for the operator that runs as `user`, named `name`.
pub fn policy(
    name: &str,
    user: &str,
) -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let rule = |resource: &str, operations: &[&str]| NamedRuleWithOperations {
        api_groups: Some(vec![String::new()]),
        api_versions: Some(vec!["v1".to_owned()]),
        operations: Some(operations.iter().map(|o| (*o).to_owned()).collect()),
        resources: Some(vec![resource.to_owned()]),
        ..NamedRuleWithOperations::default()
    };
    let spec = ValidatingAdmissionPolicySpec {
        failure_policy: Some("Fail".to_owned()),
        match_constraints: Some(MatchResources {
            resource_rules: Some(vec![
                rule("pods", &["UPDATE", "DELETE"]),
                rule("secrets", &["CREATE", "UPDATE"]),
            ]),
            ..MatchResources::default()
        }),
        match_conditions: Some(vec![MatchCondition {
            name: "operator".to_owned(),
            expression: format!("request.userInfo.username == '{user}'"),
        }]),
        variables: Some(
            VARIABLES
                .iter()
                .map(|(name, expression)| Variable {
                    name: (*name).to_owned(),
                    expression: (*expression).to_owned(),
                })
                .collect(),
        ),
        validations: Some(
            CHECKS
                .iter()
                .map(|c| Validation {
                    expression: c.expression.to_owned(),
                    message: Some(c.message.to_owned()),
                    reason: Some("Forbidden".to_owned()),
                    ..Validation::default()
                })
                .collect(),
        ),
        ..ValidatingAdmissionPolicySpec::default()
    };
    let meta = ObjectMeta {
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: meta.clone(),
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(name.to_owned()),
            validation_actions: Some(vec!["Deny".to_owned()]),
            ..ValidatingAdmissionPolicyBindingSpec::default()
        }),
    };
    (
        ValidatingAdmissionPolicy {
            metadata: meta,
            spec: Some(spec),
            status: None,
        },
        binding,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names;

    #[test]
    fn the_checks_name_the_labels_the_operator_sets() {
        // The CEL text spells the label keys out; they must stay those the operator writes.
        let text: String = CHECKS.iter().map(|c| c.expression).collect();
        assert!(text.contains(&format!("'{}'", names::ROLE_LABEL)));
        assert!(text.contains(&format!("'{}'", names::EPOCH_LABEL)));
        assert!(text.contains(&format!("'{}'", names::MANAGED_BY_LABEL)));
        assert!(text.contains(&format!("'{}'", names::MANAGED_BY)));
    }

    #[test]
    fn the_policy_matches_the_operators_user_only() {
        let (policy, binding) = policy("ops-limits", &service_account_user("ops", "op"));
        let spec = policy.spec.unwrap();
        assert_eq!(
            spec.match_conditions.unwrap()[0].expression,
            "request.userInfo.username == 'system:serviceaccount:ops:op'"
        );
        assert_eq!(
            binding.spec.unwrap().policy_name.as_deref(),
            Some("ops-limits")
        );
    }
}
