//! Authenticated manifests, case by case: MACs, repository ids, key checks.
use super::*;

fn key(byte: u8) -> MasterKey {
    MasterKey::from_bytes(&[byte; 32]).unwrap()
}

#[test]
fn hmac_matches_rfc_4231() {
    let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
    assert_eq!(
        hex::encode(mac),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    let long_key = [0xaa; 131];
    let mac = hmac_sha256(
        &long_key,
        b"Test Using Larger Than Block-Size Key - Hash Key First",
    );
    assert_eq!(
        hex::encode(mac),
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    );
}

#[test]
fn canonical_json_ignores_field_order_and_whitespace() {
    let a: Value = serde_json::from_str(r#"{"b": [1, {"y": 2, "x": "é"}], "a": null}"#).unwrap();
    let b: Value = serde_json::from_str(r#"{"a":null,"b":[1,{"x":"é","y":2}]}"#).unwrap();
    assert_eq!(canonical(&a), canonical(&b));
    assert_eq!(
        String::from_utf8(canonical(&a)).unwrap(),
        r#"{"a":null,"b":[1,{"x":"é","y":2}]}"#
    );
}

#[test]
fn a_signed_manifest_refuses_every_edit() {
    let k = key(7);
    let manifest = serde_json::json!({
        "id": "20261126T100000Z-abcdef",
        "through": "0-1-8",
        "replaces": ["a"],
        "encryption": {"key_id": k.id()},
        "stored_bytes": 920u64,
    });
    let signed = manifest_bytes(&manifest, Some(&k));
    assert_eq!(check_manifest(&signed, Some(&k)), Ok(()));
    assert_eq!(
        check_manifest(&signed, None),
        Ok(()),
        "nothing to check without a key"
    );
    let edit = |f: &dyn Fn(&mut Value)| {
        let mut v: Value = serde_json::from_slice(&signed).unwrap();
        f(&mut v);
        serde_json::to_vec(&v).unwrap()
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "a field changed",
            edit(&|v| v["through"] = "0-1-9".into()),
            "does not match",
        ),
        (
            "a field added",
            edit(&|v| v["after"] = "0-1-1".into()),
            "does not match",
        ),
        (
            "a list changed",
            edit(&|v| v["replaces"][0] = "b".into()),
            "does not match",
        ),
        (
            "the MAC dropped",
            edit(&|v| {
                v.as_object_mut().unwrap().remove(MAC_FIELD);
            }),
            "carries no MAC",
        ),
        (
            "encryption dropped and signed by no one",
            edit(&|v| v["encryption"] = Value::Null),
            "does not match",
        ),
        ("another key", signed.clone(), "another key"),
    ];
    for (case, raw, want) in cases {
        let under = if case == "another key" {
            key(8)
        } else {
            k.clone()
        };
        let err = check_manifest(&raw, Some(&under)).unwrap_err().to_string();
        assert!(err.contains(want), "{case}: {err}");
    }
    // Signed, but unencrypted: refused under a key all the same.
    let plain = manifest_bytes(
        &serde_json::json!({"id": "x", "encryption": null}),
        Some(&k),
    );
    let err = check_manifest(&plain, Some(&k)).unwrap_err().to_string();
    assert!(err.contains("not encrypted"), "{err}");
}

fn bound(byte: u8, repository: &str, accepts_unbound: bool) -> MasterKey {
    key(byte).bound(Some(Binding {
        repository: repository.into(),
        accepts_unbound,
    }))
}

#[test]
fn a_manifest_verifies_only_in_the_repository_it_was_signed_for() {
    let manifest = serde_json::json!({"id": "x", "encryption": {"key_id": key(7).id()}});
    let in_a = manifest_bytes(&manifest, Some(&bound(7, "aaaa", false)));
    let unbound = manifest_bytes(&manifest, Some(&key(7)));
    assert_eq!(named_repository(&in_a, &key(7)), Some(Some("aaaa".into())));
    assert_eq!(named_repository(&unbound, &key(7)), Some(None));
    assert_eq!(named_repository(&in_a, &key(8)), None, "not authentic");
    // Renaming the repository in a manifest is an edit like any other.
    let mut renamed: Value = serde_json::from_slice(&in_a).unwrap();
    renamed[REPOSITORY_FIELD] = "bbbb".into();
    let renamed = serde_json::to_vec(&renamed).unwrap();
    // (case, stored manifest, key read under, refusal wanted)
    type Case<'a> = (&'a str, &'a [u8], MasterKey, Result<(), &'a str>);
    let cases: Vec<Case> = vec![
        ("its own repository", &in_a, bound(7, "aaaa", false), Ok(())),
        (
            "its own repository while it still accepts unbound ones",
            &in_a,
            bound(7, "aaaa", true),
            Ok(()),
        ),
        (
            "copied into another repository under the same key",
            &in_a,
            bound(7, "bbbb", true),
            Err("written for repository aaaa, not this one (bbbb)"),
        ),
        (
            "renamed to the other repository",
            &renamed,
            bound(7, "bbbb", true),
            Err("does not match"),
        ),
        (
            "copied into a repository whose key check names no repository",
            &in_a,
            key(7),
            Err("key check names none"),
        ),
        (
            "unbound, in a repository that still accepts those",
            &unbound,
            bound(7, "aaaa", true),
            Ok(()),
        ),
        (
            "unbound, in a repository that no longer accepts those",
            &unbound,
            bound(7, "aaaa", false),
            Err("names no repository, and this one (aaaa) accepts only"),
        ),
        (
            "unbound, in a repository not bound yet",
            &unbound,
            key(7),
            Ok(()),
        ),
        (
            "unbound under another key, in a bound repository",
            &unbound,
            bound(8, "aaaa", false),
            Err("does not match under key"),
        ),
    ];
    for (case, raw, under, want) in cases {
        let got = check_manifest(raw, Some(&under)).map_err(|e| e.to_string());
        match (want, got) {
            (Ok(()), Ok(())) => {}
            (Err(want), Err(got)) => assert!(got.contains(want), "{case}: {got}"),
            (want, got) => panic!("{case}: wanted {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn manifests_without_a_key_check_say_which_repository_they_are() {
    let manifest = serde_json::json!({"id": "x", "encryption": {"key_id": key(7).id()}});
    let named = |id: &str| manifest_bytes(&manifest, Some(&bound(7, id, false)));
    let unnamed = manifest_bytes(&manifest, Some(&key(7)));
    let unsigned = manifest_bytes(&manifest, None);
    let foreign = manifest_bytes(&manifest, Some(&bound(8, "cccc", false)));
    let binding = |raws: &[(&str, &Vec<u8>)]| {
        binding_named_by(raws.iter().map(|(id, r)| (*id, &r[..])), &[&key(7)])
            .map(|b| b.map(|b| (b.repository, b.accepts_unbound)))
            .map_err(|e| e.to_string())
    };
    let (a, b) = (named("aaaa"), named("bbbb"));
    assert_eq!(binding(&[]), Ok(None), "nothing to go by");
    assert_eq!(
        binding(&[("f", &foreign)]),
        Ok(None),
        "not authentic: ignored"
    );
    assert_eq!(
        binding(&[("a1", &a), ("a2", &a), ("f", &foreign)]),
        Ok(Some(("aaaa".into(), false)))
    );
    for planted in [&unnamed, &unsigned] {
        assert_eq!(
            binding(&[("a1", &a), ("p", planted)]),
            Ok(Some(("aaaa".into(), false))),
            "once one names it, one naming none is planted"
        );
        let fresh = binding(&[("p", planted)]).unwrap().unwrap();
        assert_eq!(
            (fresh.0.len(), fresh.1),
            (32, true),
            "all from before ids: a new id, accepting them"
        );
    }
    let plain = manifest_bytes(&serde_json::json!({"id": "x", "encryption": null}), None);
    let other = manifest_bytes(
        &serde_json::json!({"id": "x", "encryption": {"key_id": key(8).id()}}),
        None,
    );
    assert_eq!(
        binding(&[("p", &plain), ("o", &other)]),
        Ok(None),
        "unencrypted, or under another key: no evidence"
    );
    let err = binding(&[("a1", &a), ("b1", &b), ("a2", &a)]).unwrap_err();
    assert!(
        err.contains("name several (repository aaaa by a1, a2; bbbb by b1)"),
        "{err}"
    );
}

#[test]
fn the_newest_manifest_says_whose_the_repository_is() {
    let under = |k: u8| {
        serde_json::to_vec(&serde_json::json!({"encryption": {"key_id": key(k).id()}})).unwrap()
    };
    let plain = serde_json::to_vec(&serde_json::json!({"encryption": null})).unwrap();
    let (old, new) = (under(7), under(8));
    let newest = |m: &[(&str, &Vec<u8>)]| newest_key_id(m.iter().map(|(at, raw)| (*at, &raw[..])));
    // A rotation left an old segment on the old key; the newest backup is on the new one.
    let rotated = [
        ("binlogs/default/20261120T000000Z-aaaaaa", &old),
        ("backups/20261126T000000Z-bbbbbb", &new),
        ("backups/20261127T000000Z-cccccc", &plain),
    ];
    assert_eq!(
        newest(&rotated),
        Some((
            key(8).id().to_owned(),
            "backups/20261126T000000Z-bbbbbb".into()
        ))
    );
    // Segments count: an archive newer than every backup.
    let archived = [
        ("backups/20261126T000000Z-bbbbbb", &new),
        ("binlogs/quay-1/20261127T000000Z-dddddd", &old),
    ];
    assert_eq!(
        newest(&archived).map(|(k, _)| k),
        Some(key(7).id().to_owned())
    );
    assert_eq!(newest(&[("backups/20261127T000000Z-cccccc", &plain)]), None);
}

async fn fs_store() -> (tempfile::TempDir, Arc<dyn Store>) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(crate::store::FsStore::open(dir.path()).await.unwrap());
    (dir, store)
}

#[tokio::test]
async fn the_first_writer_names_the_repository_and_the_next_reads_its_name() {
    let (_dir, store) = fs_store().await;
    let first = ensure_key_check(&store, &key(7), None).await.unwrap();
    let binding = first.binding.clone().expect("a new repository is bound");
    assert_eq!(binding.repository.len(), 32);
    assert!(!binding.accepts_unbound);
    let second = ensure_key_check(&store, &key(7), None).await.unwrap();
    assert_eq!(
        second, first,
        "the second writer signs for the same repository"
    );
    let err = ensure_key_check(&store, &key(8), None).await.unwrap_err();
    assert!(matches!(err, KeyCheckError::OtherKey { .. }), "{err}");
    // A writer that began before the key check existed signs for it at its commit.
    let signing = signing_key(&store, &key(7)).await;
    assert_eq!(signing.binding(), Some(&binding));
    // One whose key is no longer the repository's (a rotation since) keeps its own.
    assert_eq!(signing_key(&store, &key(8)).await.binding(), None);
    // A racing creator whose write comes second creates nothing and reads the first's.
    let other = key_check_bytes(
        &key(7),
        chrono::Utc::now(),
        Some(&Binding {
            repository: new_repository_id(),
            accepts_unbound: false,
        }),
    );
    assert!(!store
        .put_new(KEY_CHECK_NAME, Bytes::from(other))
        .await
        .unwrap());
    assert_eq!(
        read_key_check(&store, Some(&key(7))).await.unwrap(),
        Some(first)
    );
}

#[tokio::test]
async fn a_key_check_before_binding_binds_nothing_and_an_edited_id_is_refused() {
    let (_dir, store) = fs_store().await;
    let since = chrono::DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    write_key_check(&store, &key(7), since, None).await.unwrap();
    let check = read_key_check(&store, Some(&key(7)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(check.binding, None);
    assert_eq!(check.bind(&key(7)).binding(), None);
    let binding = Binding {
        repository: "aaaa".into(),
        accepts_unbound: true,
    };
    write_key_check(&store, &key(7), since, Some(&binding))
        .await
        .unwrap();
    let check = read_key_check(&store, Some(&key(7)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(check.binding.as_ref(), Some(&binding));
    assert_eq!(check.since, Some(since));
    let raw = store.get(KEY_CHECK_NAME).await.unwrap();
    let mut edited: Value = serde_json::from_slice(&raw).unwrap();
    edited["repository"] = "bbbb".into();
    store
        .put(
            KEY_CHECK_NAME,
            Bytes::from(serde_json::to_vec(&edited).unwrap()),
        )
        .await
        .unwrap();
    let err = read_key_check(&store, Some(&key(7))).await.unwrap_err();
    assert!(err.to_string().contains("does not match"), "{err}");
}
