//! The operator as a whole against a real control plane: metrics, the binary as the chart runs
//! it, status writes from stale copies, and its identity's limits (RBAC, admission policy,
//! namespaced installs).

mod common;

use common::*;

#[tokio::test]
async fn metrics_are_served_in_the_prometheus_text_format() {
    let metrics = Arc::new(Metrics::default());
    metrics.reconciled("cluster", 0.01);
    let listener = bulwark_operator::http::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    tokio::spawn(bulwark_operator::http::serve(
        listener,
        metrics,
        ready.clone(),
    ));
    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }
    let m = get(addr, "/metrics").await;
    assert!(m.starts_with("HTTP/1.1 200"), "{m}");
    assert!(
        m.contains("bulwark_reconciles_total{controller=\"cluster\"} 1"),
        "{m}"
    );
    assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 503"));
    ready.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
    assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
    assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
}

/// The binary as the chart runs it: `mysql-operator run` configured through the chart's
/// environment variables, against the control plane, serving its probes and metrics.
#[tokio::test]
async fn the_binary_runs_with_the_charts_settings_and_stops_on_sigterm() {
    let shared = bulwark_testenv::shared().await.expect("control plane");
    // Watching a namespace of its own: the controllers of this test binary act everywhere
    // else, and two operators must not share objects.
    let (_client, ns) = setup("binary").await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mysql-operator"))
        .arg("run")
        .env("KUBECONFIG", shared.kubeconfig_path())
        .env("MYSQL_OPERATOR_LISTEN", format!("127.0.0.1:{port}"))
        .env("MYSQL_OPERATOR_BACKUP_IMAGE", BACKUP_IMAGE)
        .env("MYSQL_OPERATOR_EXPORTER_IMAGE", EXPORTER_IMAGE)
        .env("MYSQL_OPERATOR_LOG_FORMAT", "json")
        .env("MYSQL_OPERATOR_LOG", "info")
        .env("MYSQL_OPERATOR_NAMESPACES", ns.name())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start mysql-operator");
    // Drained from the start: an operator watching a busy control plane logs more than a pipe
    // holds, and a child blocked writing its logs cannot act on SIGTERM.
    let mut pipe = child.stderr.take().expect("stderr piped");
    let stderr = tokio::spawn(async move {
        let mut out = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut pipe, &mut out).await;
        out
    });
    async fn get(port: u16, path: &str) -> Result<String, String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| e.to_string())?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut out = String::new();
        s.read_to_string(&mut out)
            .await
            .map_err(|e| e.to_string())?;
        Ok(out)
    }
    wait_for("/readyz of the binary", WAIT, || async move {
        let r = get(port, "/readyz").await?;
        if r.starts_with("HTTP/1.1 200") {
            Ok(())
        } else {
            Err(r)
        }
    })
    .await;
    let metrics = get(port, "/metrics").await.unwrap();
    assert!(
        metrics.starts_with("HTTP/1.1 200")
            && metrics.contains("content-type: application/openmetrics-text; version=1.0.0")
            && metrics.ends_with("# EOF\n"),
        "{metrics}"
    );
    // SIGTERM (what the kubelet sends) stops it cleanly.
    let pid = child.id().expect("pid") as i32;
    // SAFETY: sends a signal to our own child process.
    unsafe { libc_kill(pid) };
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("stops on SIGTERM")
        .unwrap();
    let stderr = stderr.await.expect("stderr drained");
    assert!(status.success(), "exit {status:?}; stderr:\n{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("\"message\":\"controllers started\"")
                && l.contains(&format!("\"namespaces\":\"[\\\"{}\\\"]\"", ns.name()))),
        "JSON logs: {stderr}"
    );
    ns.delete().await.expect("delete namespace");
}

unsafe fn libc_kill(pid: i32) {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: plain syscall wrapper; 15 is SIGTERM.
    unsafe {
        kill(pid, 15);
    }
}

/// The cause of a status race seen on a loaded machine: a reconcile working from a stale copy
/// merged that copy's status into its write, and server-side apply dropped every field the
/// newer write of the same manager had recorded (a backup's `sourcePod` vanished). Status writes
/// now carry the version they were decided from, so such a write is refused and nothing drops.
#[tokio::test]
async fn a_status_write_from_a_stale_copy_is_refused_and_drops_nothing() {
    let (client, ns) = setup("stale").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    // A pod no controller looks after, so that only this test writes its status.
    let stale = apply_yaml(
        &pods,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: stale-copy}\nspec: {containers: [{name: c, image: i}]}\n",
    )
    .await;
    let manager = bulwark_operator::apply::BACKUP_MANAGER;
    bulwark_operator::apply::apply_status(
        &pods,
        &stale,
        json!({"reason": "First", "message": "recorded by the first write"}),
        manager,
    )
    .await
    .expect("a write over the current version is applied");
    let err =
        bulwark_operator::apply::apply_status(&pods, &stale, json!({"reason": "Second"}), manager)
            .await
            .expect_err("a write decided from a stale copy is refused");
    assert!(err.is_conflict(), "{err:?}");
    let now = pods.get("stale-copy").await.unwrap().status.unwrap();
    assert_eq!(
        (now.reason.as_deref(), now.message.as_deref()),
        (Some("First"), Some("recorded by the first write"))
    );
}

#[tokio::test]
async fn the_operators_identity_is_refused_what_the_chart_does_not_grant() {
    let shared = bulwark_testenv::shared().await.expect("control plane");
    let admin = shared.client().await.expect("admin client");
    let operator = bound_client(&admin, shared.kubeconfig(), None).await;
    let (_, ns) = setup("identity").await;
    let n = ns.name();
    let clusters: Api<MySQLCluster> = Api::all(operator.clone());
    clusters
        .list(&ListParams::default().limit(1))
        .await
        .expect("granted: list clusters");
    let forbidden = |r: Result<(), kube::Error>, what: &str| match r {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{what}: expected 403, got {other:?}"),
    };
    let secrets: Api<Secret> = Api::namespaced(operator.clone(), n);
    forbidden(
        secrets.list(&ListParams::default()).await.map(drop),
        "list secrets",
    );
    forbidden(
        secrets
            .delete("anything", &DeleteParams::default())
            .await
            .map(drop),
        "delete secrets",
    );
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(operator.clone());
    forbidden(
        nodes.list(&ListParams::default()).await.map(drop),
        "list nodes",
    );
    ns.delete().await.expect("delete namespace");
}

/// The admission policy narrows RBAC's pod patch to the role label, its pod deletes to server
/// pods and its secret writes to Secrets the operator labels as its own.
#[tokio::test]
async fn the_operator_may_change_only_role_labels_and_its_own_secrets() {
    let shared = bulwark_testenv::shared().await.expect("control plane");
    let admin = shared.client().await.expect("admin client");
    let operator = bound_client(&admin, shared.kubeconfig(), None).await;
    let (_, ns) = setup("admission").await;
    let n = ns.name();
    let pp = PatchParams::apply("admission-test").force();
    let admin_pods: Api<Pod> = Api::namespaced(admin.clone(), n);
    apply_yaml(
        &admin_pods,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: db-0, labels: {app: db}}\n\
         spec: {containers: [{name: mysqld, image: registry.test/mariadb:11.4}]}\n",
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(operator.clone(), n);
    let refused = |r: Result<(), kube::Error>, what: &str, cause: &str| match r {
        Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains(cause) => Ok(()),
        other => Err(format!(
            "{what}: expected 403 naming {cause:?}, got {other:?}"
        )),
    };
    let secrets: Api<Secret> = Api::namespaced(operator.clone(), n);
    let write = |name: &str, labelled: bool| {
        let labels = if labelled {
            json!({"app.kubernetes.io/managed-by": "bulwark-operator"})
        } else {
            json!({})
        };
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "labels": labels}, "stringData": {"password": "new"}})
    };
    // The policy takes effect once the API server has loaded it; a refused write changes nothing,
    // so probing with one is harmless.
    wait_for("an unlabelled Secret to be refused", WAIT, || {
        let secrets = secrets.clone();
        let body = write("unlabelled", false);
        let pp = pp.clone();
        async move {
            let r = secrets
                .patch("unlabelled", &pp, &Patch::Apply(&body))
                .await
                .map(drop);
            refused(r, "create an unlabelled Secret", "only Secrets labelled")
        }
    })
    .await;
    let image = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db-0"},
        "spec": {"containers": [{"name": "mysqld", "image": "evil.test/shell:1"}]}});
    refused(
        pods.patch("db-0", &pp, &Patch::Apply(&image))
            .await
            .map(drop),
        "change a pod's image",
        "may not change a pod's spec",
    )
    .unwrap();
    let other_label = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "labels": {"app": "web"}}});
    refused(
        pods.patch("db-0", &pp, &Patch::Apply(&other_label))
            .await
            .map(drop),
        "change another label",
        "only the mysql.bulwark.dev/role and",
    )
    .unwrap();
    let annotation = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "annotations": {"x": "y"}}});
    refused(
        pods.patch("db-0", &pp, &Patch::Apply(&annotation))
            .await
            .map(drop),
        "annotate a pod",
        "only the mysql.bulwark.dev/role and",
    )
    .unwrap();
    let role = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "labels": {"mysql.bulwark.dev/role": "primary"}}});
    pods.patch("db-0", &pp, &Patch::Apply(&role))
        .await
        .expect("the role label may change");
    let pod = admin_pods.get("db-0").await.expect("pod");
    assert_eq!(pod.labels()["app"], "db");
    assert_eq!(pod.labels()["mysql.bulwark.dev/role"], "primary");

    // Deletes (a rolling change restarts server pods) reach only the clusters' server pods.
    refused(
        pods.delete("db-0", &Default::default()).await.map(drop),
        "delete a user's pod",
        "may delete only the server pods",
    )
    .unwrap();
    apply_yaml(
        &admin_pods,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: quay-0, labels: {app.kubernetes.io/managed-by: \
         bulwark-operator, app.kubernetes.io/component: database}}\n\
         spec: {containers: [{name: mysqld, image: registry.test/mariadb:11.4}]}\n",
    )
    .await;
    pods.delete("quay-0", &Default::default())
        .await
        .expect("a server pod may be deleted");

    let admin_secrets: Api<Secret> = Api::namespaced(admin.clone(), n);
    apply_yaml(
        &admin_secrets,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: users-own}\nstringData: {password: kept}\n",
    )
    .await;
    refused(
        secrets
            .patch("users-own", &pp, &Patch::Apply(&write("users-own", false)))
            .await
            .map(drop),
        "overwrite a user's Secret",
        "only Secrets labelled",
    )
    .unwrap();
    refused(
        secrets
            .patch("users-own", &pp, &Patch::Apply(&write("users-own", true)))
            .await
            .map(drop),
        "label a user's Secret as its own",
        "may not take over a Secret",
    )
    .unwrap();
    secrets
        .patch("generated", &pp, &Patch::Apply(&write("generated", true)))
        .await
        .expect("a Secret of its own may be created");
    secrets
        .patch("generated", &pp, &Patch::Apply(&write("generated", true)))
        .await
        .expect("and written again");
    let kept = admin_secrets.get("users-own").await.expect("secret");
    assert_eq!(
        kept.data.unwrap_or_default()["password"].0,
        b"kept".to_vec()
    );
    ns.delete().await.expect("delete namespace");
}

/// The namespaced install: an operator watching one namespace, allowed there by a Role and
/// nowhere else, builds a cluster, reports its status, schedules and starts backups. On a control
/// plane of its own, where no cluster-wide operator runs.
#[tokio::test]
async fn a_namespaced_operator_works_with_a_role_in_its_namespace_only() {
    let plane = bulwark_testenv::ControlPlane::start(bulwark_testenv::Options::default())
        .await
        .expect("a control plane of its own");
    let admin = plane.client().await.expect("admin client");
    let ns = TestNamespace::create(&admin, "scoped")
        .await
        .expect("namespace");
    let n = ns.name().to_owned();
    let operator = bound_client(&admin, plane.kubeconfig(), Some(&n)).await;
    let config = Config {
        backup_images: BackupImages::parse(BACKUP_IMAGE, "mariadb-11.4", "").unwrap(),
        exporter_image: EXPORTER_IMAGE.to_owned(),
        server_images: Default::default(),
        namespaces: vec![n.clone()],
    };
    let metrics = Arc::new(Metrics::default());
    let ctx = Context::new(operator, config, metrics.clone());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(bulwark_operator::run::controllers(ctx, async move {
        let _ = stop_rx.await;
    }));

    backup_prerequisites(&admin, &n).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(admin.clone(), &n);
    let scheduled = format!(
        "{BACKUP_CLUSTER}    deletionPolicy: Delete\n    schedules:\n      - {{name: nightly, schedule: '@daily', storage: nas}}\n"
    );
    apply_yaml(&clusters, &scheduled).await;
    let sets: Api<StatefulSet> = Api::namespaced(admin.clone(), &n);
    wait_get(&sets, "vault").await;
    wait_for("cluster status with its schedule", WAIT, || {
        let clusters = clusters.clone();
        async move {
            let c = clusters.get("vault").await.map_err(|e| e.to_string())?;
            let st = c.status.clone().unwrap_or_default();
            let scheduled = st.schedules.iter().any(|s| s.next_schedule_time.is_some());
            (condition(&c, "Ready").is_some() && scheduled)
                .then_some(())
                .ok_or_else(|| format!("{st:?}"))
        }
    })
    .await;
    let backups: Api<MySQLBackup> = Api::namespaced(admin.clone(), &n);
    apply_yaml(&backups, "apiVersion: mysql.bulwark.dev/v1alpha1\nkind: MySQLBackup\nmetadata: {name: scoped}\nspec: {clusterRef: {name: vault}, storage: nas, method: logical}\n").await;
    let pending = backup_status(&backups, "scoped", BackupPhase::Pending).await;
    assert!(
        pending
            .finalizers()
            .contains(&"mysql.bulwark.dev/backup-data".to_owned()),
        "{:?}",
        pending.finalizers()
    );
    // Events are recorded (events.k8s.io, in the namespace).
    wait_for("an event about the cluster", WAIT, || {
        let admin = admin.clone();
        let n = n.clone();
        async move {
            let ev = events_for(&admin, &n, "vault").await;
            (!ev.is_empty())
                .then_some(())
                .ok_or("no event yet".to_owned())
        }
    })
    .await;

    // Not one reconcile failed for want of a permission.
    let text = metrics.render();
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("bulwark_reconcile_errors_total{")),
        "{text}"
    );
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(WAIT, running).await;
}
