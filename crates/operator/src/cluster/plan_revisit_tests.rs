//! A failover's choice looked at again in the cluster pass, until it takes writes.

use super::*;

/// `status` after a failover from `from` to `to` that raised the roles to `epoch`.
fn failed_over(from: &str, to: &str, epoch: i64) -> MySQLClusterStatus {
    MySQLClusterStatus {
        last_failover: Some(bulwark_api::cluster::FailoverRecord {
            from: from.into(),
            to: to.into(),
            time: ago(5),
            reason: "lost".into(),
            request: Some("quay-1@1".into()),
            epoch: Some(epoch),
        }),
        ..serving(to, epoch)
    }
}

#[test]
fn a_failovers_choice_is_looked_at_again_until_it_takes_writes() {
    use Outcome::*;
    // quay-1 was chosen at epoch 2 holding 0-1-12; quay-2 now reports what quay-1 lacks.
    let ahead = || {
        vec![
            silent("quay-0"),
            orphaned("quay-1", "0-1-12"),
            orphaned("quay-2", "0-1-14"),
        ]
    };
    let cases = [
        case(
            "a replica silent at the choice reports more: it is chosen instead",
            failed_over("quay-0", "quay-1", 2),
            ahead(),
            FailoverTo("quay-2".into()),
        ),
        case(
            "the choice holds everything the replicas do: it stays",
            failed_over("quay-0", "quay-1", 2),
            primary_gone(),
            Steady,
        ),
        case(
            "the lost primary back with a commit nobody received is not compared",
            failed_over("quay-0", "quay-1", 2),
            vec![
                orphaned("quay-0", "0-1-20"),
                orphaned("quay-1", "0-1-12"),
                orphaned("quay-2", "0-1-11"),
            ],
            Steady,
        ),
        case(
            "the choice took writes already: it stays",
            failed_over("quay-0", "quay-1", 2),
            vec![
                silent("quay-0"),
                primary("quay-1", 2),
                orphaned("quay-2", "0-1-14"),
            ],
            Steady,
        ),
        case(
            "a failover of an older epoch is not looked at again",
            MySQLClusterStatus {
                epoch: Some(3),
                ..failed_over("quay-0", "quay-1", 2)
            },
            ahead(),
            Steady,
        ),
    ];
    for c in &cases {
        assert_eq!(outcome(&c.plan()), c.expect, "{}", c.name);
    }
    let again = cases[0].plan();
    assert_eq!((again.primary.as_str(), again.epoch), ("quay-2", 3));
    let Transition::Failover {
        from,
        reason,
        request,
        ..
    } = &again.transition
    else {
        panic!("{again:?}")
    };
    // The failed primary stays the one replaced, and a forced request stays taken.
    assert_eq!(from, "quay-0");
    assert_eq!(request.as_deref(), Some("quay-1@1"));
    assert_eq!(
        reason,
        "quay-0 was lost and quay-1 was chosen, but before it took writes quay-2 reported \
         transactions it lacks (0-1-14); quay-2 has every transaction the replicas received \
         (0-1-14)"
    );
}
