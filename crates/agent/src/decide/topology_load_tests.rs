//! Whether a pass looks for a bootstrap's partial-load mark.

use super::*;

#[test]
fn only_a_primary_done_promoting_with_nothing_to_load_looks_for_a_partial_load() {
    let running = || Some(status(IoState::Stopped, true));
    let cases = [
        (
            "a primary, promotion over",
            Ok(Role::Primary),
            None,
            LoadState::Nothing,
            true,
        ),
        (
            "a primary still applying its relay log (a promotion)",
            Ok(Role::Primary),
            running(),
            LoadState::Nothing,
            false,
        ),
        (
            "a primary loading already",
            Ok(Role::Primary),
            None,
            LoadState::Loading("b".into()),
            false,
        ),
        (
            "a replica",
            Ok(Role::Replica),
            running(),
            LoadState::Nothing,
            false,
        ),
        (
            "a replica without replication yet",
            Ok(Role::Replica),
            None,
            LoadState::Nothing,
            false,
        ),
        (
            "no role",
            Err("no label".into()),
            None,
            LoadState::Nothing,
            false,
        ),
    ];
    for (name, role, replication, load, want) in cases {
        let o = observed(Engine::MariaDb, false, replication);
        assert_eq!(looks_for_partial_load(&role, &o, &load), want, "{name}");
    }
}
