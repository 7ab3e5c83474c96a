//! A restored backup's GTID position in the agent's decision: adopted first (after the role
//! and the accounts), never over what the server logged since, and again harmlessly.

use super::*;

#[test]
fn restored_position_decisions() {
    use Action::*;
    use Engine::{MariaDb, MySql};
    let primary = || Ok(Role::Primary);
    let replica = || Ok(Role::Replica);
    let running = || Some(status(IoState::Running, true));
    let restored = |g: &str| RestoredGtid {
        backup_id: "B1".into(),
        gtid_set: g.into(),
        gtid_history: String::new(),
    };
    let waiting = |g: &str| GtidAdoption::Waiting(restored(g));
    let mut adopted = observed(MariaDb, true, None);
    adopted.gtid_logged = "0-1-500".into();
    let mut logged_more = observed(MariaDb, true, None);
    logged_more.gtid_logged = "0-100-501".into();
    let cases = vec![
        Case {
            restored_gtid: waiting("0-1-500"),
            ..case(
                "restored primary adopts the backup's position first",
                primary(),
                observed(MariaDb, true, None),
            )
        }
        .then(
            Some(AdoptRestoredGtid {
                restored: restored("0-1-500"),
                stop_replication: false,
            }),
            false,
            "adopting the GTID position 0-1-500 of restored backup B1",
        ),
        Case {
            restored_gtid: waiting("0-1-500"),
            ..case(
                "restored replica adopts it before replicating",
                replica(),
                observed(MariaDb, true, None),
            )
        }
        .then(
            Some(AdoptRestoredGtid {
                restored: restored("0-1-500"),
                stop_replication: false,
            }),
            false,
            "adopting",
        ),
        Case {
            restored_gtid: waiting(""),
            ..case(
                "replication that came with the backup is removed",
                primary(),
                observed(MySql, true, running()),
            )
        }
        .then(
            Some(AdoptRestoredGtid {
                restored: restored(""),
                stop_replication: true,
            }),
            false,
            "adopting the GTID position (none)",
        ),
        Case {
            restored_gtid: waiting("0-1-500"),
            ..case(
                "adopted once already: again, harmlessly",
                primary(),
                adopted.clone(),
            )
        }
        .then(
            Some(AdoptRestoredGtid {
                restored: restored("0-1-500"),
                stop_replication: false,
            }),
            false,
            "adopting",
        ),
        Case {
            restored_gtid: waiting("0-1-500"),
            ..case(
                "a server that logged more is never reset",
                primary(),
                logged_more,
            )
        }
        .then(None, false, "has logged 0-100-501 since"),
        Case {
            restored_gtid: waiting("0-1-500"),
            ..case(
                "the role comes first",
                Err("role unknown: no label".into()),
                observed(MariaDb, true, None),
            )
        }
        .then(None, false, "role unknown"),
        Case {
            accounts: false,
            restored_gtid: waiting("0-1-500"),
            ..case(
                "accounts before the position",
                primary(),
                observed(MariaDb, true, None),
            )
        }
        .then(Some(EnsureAccounts), false, "accounts"),
        Case {
            restored_gtid: GtidAdoption::Failed("cannot remove".into()),
            ..case("an unfinished adoption waits", primary(), adopted)
        }
        .then(None, false, "restored GTID position: cannot remove"),
    ];
    check(cases);
}
