//! Which member a new member's seed copies from.

use super::*;

/// The address of the `i`th member's agent.
fn at(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, i], 9081))
}

/// `members`, each at its place's address.
fn addressed(members: impl IntoIterator<Item = MemberStatus>) -> Vec<(SocketAddr, MemberStatus)> {
    members
        .into_iter()
        .enumerate()
        .map(|(i, m)| (at(i as u8), m))
        .collect()
}

/// The rules of a seed in pod `me`, with `unproven` addresses.
fn rules<'a>(me: &'a str, unproven: &'a [std::net::IpAddr]) -> DonorRules<'a> {
    DonorRules {
        me,
        unproven,
        restored_by_first: false,
    }
}

fn member(role: Role, ready: bool, gtid: &str, clone_port: u16) -> MemberStatus {
    MemberStatus {
        role: Some(role),
        epoch: 1,
        ready,
        reason: String::new(),
        engine: Engine::MariaDb,
        read_only: role != Role::Primary,
        super_read_only: false,
        gtid_executed: gtid.into(),
        gtid_history: String::new(),
        semi_sync_wait: false,
        semi_sync_clients: 0,
        replication: None,
        writes_held: false,
        handover_pending: false,
        clone_port,
        age_ms: 0,
        takes_follows: false,
        followed_ms: None,
    }
}

#[test]
fn donors() {
    // (name, members, whether the first member restored the data, the donor)
    let cases: Vec<(&str, Vec<MemberStatus>, bool, Option<usize>)> = vec![
        (
            "a new cluster: nobody has data",
            vec![
                member(Role::Primary, true, "", 9082),
                member(Role::Replica, true, "", 9082),
            ],
            false,
            None,
        ),
        (
            "the first member restored a backup without GTIDs: its primary is the donor",
            vec![
                member(Role::Primary, true, "", 9082),
                member(Role::Replica, true, "", 9082),
            ],
            true,
            Some(0),
        ),
        (
            "the first member restored, but is not ready yet: nobody",
            vec![member(Role::Primary, false, "", 9082)],
            true,
            None,
        ),
        (
            "the replica with the most, before the primary",
            vec![
                member(Role::Primary, true, "0-100-90", 9082),
                member(Role::Replica, true, "0-100-80", 9082),
                member(Role::Replica, true, "0-100-85", 9082),
            ],
            false,
            Some(2),
        ),
        (
            "a replica that is not ready is no donor; the primary is",
            vec![
                member(Role::Primary, true, "0-100-90", 9082),
                member(Role::Replica, false, "0-100-85", 9082),
            ],
            false,
            Some(0),
        ),
        (
            "an agent that serves no copies is no donor",
            vec![
                member(Role::Primary, true, "0-100-90", 0),
                member(Role::Replica, true, "0-100-85", 0),
            ],
            false,
            None,
        ),
        (
            "a ready replica while no primary reports: nobody (it could not vouch for it)",
            vec![
                member(Role::Replica, true, "0-100-90", 9082),
                member(Role::Replica, false, "0-100-80", 9082),
            ],
            false,
            None,
        ),
        (
            "diverging replicas and no primary: nobody",
            vec![
                member(Role::Replica, true, "0-100-90,1-7-3", 9082),
                member(Role::Replica, true, "0-100-95", 9082),
            ],
            false,
            None,
        ),
        (
            "a replica with a transaction the primary lacks is no donor",
            vec![
                member(Role::Primary, true, "0-100-90", 9082),
                member(Role::Replica, true, "0-100-90,1-7-3", 9082),
                member(Role::Replica, true, "0-100-80", 9082),
            ],
            false,
            Some(2),
        ),
        (
            "replicas ahead of the primary, which is not ready: nobody",
            vec![
                member(Role::Primary, false, "0-100-90", 9082),
                member(Role::Replica, true, "0-100-95", 9082),
            ],
            false,
            None,
        ),
    ];
    for (name, members, restored_by_first, want) in cases {
        let rules = DonorRules {
            restored_by_first,
            ..rules("quay-9", &[])
        };
        assert_eq!(choose_donor(&addressed(members), &rules), want, "{name}");
    }
}

#[test]
fn unproven_addresses_give_no_copy_but_their_primary_vouches() {
    // A primary among them still vouches (an older agent's), a proven one first.
    let members = addressed([
        member(Role::Primary, true, "0-100-90", 9082),
        member(Role::Replica, true, "0-100-90", 9082),
        member(Role::Replica, true, "0-100-80", 9082),
    ]);
    let ip = |i: u8| at(i).ip();
    let unproven_cases: [(&str, Vec<std::net::IpAddr>, Option<usize>); 4] = [
        ("all proven: the replica with the most", vec![], Some(1)),
        ("that replica unproven: the other one", vec![ip(1)], Some(2)),
        (
            "the primary unproven: it still vouches for the replicas",
            vec![ip(0), ip(1)],
            Some(2),
        ),
        ("nobody proven: nobody", vec![ip(0), ip(1), ip(2)], None),
    ];
    for (name, unproven, want) in unproven_cases {
        assert_eq!(
            choose_donor(&members, &rules("quay-9", &unproven)),
            want,
            "{name}"
        );
    }
    let rogue_first = addressed([
        member(Role::Primary, true, "0-100-10", 9082),
        member(Role::Primary, true, "0-100-90", 9082),
        member(Role::Replica, true, "0-100-90", 9082),
    ]);
    assert_eq!(
        choose_donor(&rogue_first, &rules("quay-9", &[ip(0)])),
        Some(2),
        "a proven primary vouches before an unproven one"
    );
}

#[test]
fn with_no_primary_answering_only_this_pods_own_replicas_give_it_a_copy() {
    // This pod is the primary, its volume lost: its replicas give it a copy, the one with the
    // most; another pod's replicas do not.
    let from = |source: &str, gtid: &str| {
        let mut m = member(Role::Replica, true, gtid, 9082);
        m.replication = Some(bulwark_contract::member::MemberReplication {
            source_host: format!("{source}.quay-members"),
            source_port: 3306,
            io: bulwark_contract::member::IoState::Connecting,
            sql_running: true,
            relay_applied: true,
            sql_caught_up: true,
            io_errno: 0,
            sql_errno: 0,
            lag_seconds: None,
            received: String::new(),
            source_unreachable_seconds: Some(30),
            source_heard_ms: None,
        });
        m
    };
    let orphans = addressed([from("quay-0", "0-100-80"), from("quay-0", "0-100-85")]);
    for (me, want) in [("quay-0", Some(1)), ("quay-2", None), ("quay", None)] {
        assert_eq!(choose_donor(&orphans, &rules(me, &[])), want, "{me}");
    }
}
