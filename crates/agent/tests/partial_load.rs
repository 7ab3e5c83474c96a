//! A logical bootstrap's load against real MariaDB: a primary whose data holds part of a load
//! (what a member copied from a replica mid-load gets, once the loading member's volume was
//! lost) is never served with it; the agent loads the backup its mark names again, over it.

mod common;

use common::*;

/// What a replica of the loading primary holds mid-load, as a copy of it brings it to a new
/// member: the mark the load began with, and part of the data.
fn hold_part_of_a_load(db: &MariaDb, mark: &str) {
    db.sql(
        "CREATE DATABASE bulwark_bootstrap; \
         CREATE DATABASE shop; CREATE TABLE shop.orders (id INT PRIMARY KEY); \
         INSERT INTO shop.orders VALUES (1), (2); \
         CREATE DATABASE leftover; CREATE TABLE leftover.t (id INT)",
    )
    .unwrap();
    db.sql(&format!(
        "CREATE TABLE bulwark_bootstrap.partial_load (id INT PRIMARY KEY) COMMENT='{mark}'"
    ))
    .unwrap();
}

#[test]
fn a_primary_holding_part_of_a_load_loads_the_backup_again() {
    let Scenario { work, source, repo } = Scenario::new(200);
    let w = work.path();
    let key = key_file(w, "key");
    let key = key.to_str().unwrap();
    let before = snapshot(&source).unwrap();
    let b = backup(
        &repo,
        &source,
        &["--method", "logical", "--encryption-key-file", key],
        &[],
    );
    let id = b["id"].as_str().unwrap().to_string();
    drop(source);

    // The copy: no pending file (it was on the lost volume), the mark and part of the data.
    let target = MariaDb::start().unwrap();
    hold_part_of_a_load(&target, &format!("{{\"backupId\":\"{id}\"}}"));
    let pending = w.join("volume/bulwark-pending-logical-restore");
    std::fs::create_dir_all(pending.parent().unwrap()).unwrap();
    let agent = loading_primary("primary", w, &target, &pending, &repo, key);
    wait_status(&agent, &[], "/readyz", 200, "primary: writable");
    assert!(
        agent.logs().contains("holds part of a bootstrap load"),
        "{}",
        agent.logs()
    );
    assert!(!pending.exists(), "the pending file is removed once loaded");
    // The backup whole, nothing of the partial copy left, the mark gone.
    assert_same(&before, &snapshot(&target).unwrap());
    let schemas = target.query("SHOW DATABASES").unwrap();
    let names: Vec<&str> = schemas.iter().map(|r| r[0].as_str()).collect();
    for gone in ["bulwark_bootstrap", "leftover"] {
        assert!(!names.contains(&gone), "{names:?}");
    }
    // The load went through the binary log, the mark first and its removal last: replicas
    // (and copies of them) see the load as begun until it is whole.
    let binlog = target
        .query("SHOW BINLOG EVENTS")
        .unwrap()
        .into_iter()
        .map(|r| r.join(" "))
        .collect::<Vec<_>>()
        .join("\n");
    // The copy's mark stays through the start over: the partial data goes while it is there.
    let position = |needle: &str| {
        binlog
            .find(needle)
            .unwrap_or_else(|| panic!("{needle} not in {binlog}"))
    };
    let start_over = position("DROP DATABASE `leftover`");
    let unmark = position("DROP DATABASE IF EXISTS bulwark_bootstrap");
    assert!(start_over < unmark, "{binlog}");
    assert!(
        !binlog.contains("DROP DATABASE `bulwark_bootstrap`"),
        "{binlog}"
    );

    // A mark naming no load: never served, and says why.
    let broken = MariaDb::start().unwrap();
    hold_part_of_a_load(&broken, "not a load");
    let w2 = w.join("second");
    std::fs::create_dir_all(w2.join("volume")).unwrap();
    let agent = loading_primary(
        "broken",
        &w2,
        &broken,
        &w2.join("volume/pending"),
        &repo,
        key,
    );
    wait_status(
        &agent,
        &[],
        "/readyz",
        503,
        "whose mark this agent cannot read",
    );
    drop(agent);

    // A copy taken between the mark's two statements: its schema alone, nothing loaded yet.
    let started = MariaDb::start().unwrap();
    started.sql("CREATE DATABASE bulwark_bootstrap").unwrap();
    let w3 = w.join("third");
    std::fs::create_dir_all(w3.join("volume")).unwrap();
    let agent = loading_primary(
        "started",
        &w3,
        &started,
        &w3.join("volume/pending"),
        &repo,
        key,
    );
    wait_status(
        &agent,
        &[],
        "/readyz",
        503,
        "holds the start of a bootstrap load",
    );
}
