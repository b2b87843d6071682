//! MongoDB credentials the server rejects: reported at once, not retried as
//! if the server were still starting, as a rejection (exit 4, as a rejected
//! Meilisearch key), and without the password.

mod support;

use mongodb::bson::doc;
use support::cli::Target;

/// `uri` (credentials it has dropped) with `user:password@` and `authSource`.
fn with_credentials(uri: &str, user: &str, password: &str, auth_db: &str) -> String {
    let (scheme, rest) = uri.split_once("://").expect("a URI with a scheme");
    let before_options = rest.split('?').next().unwrap_or("");
    let rest = match before_options.rfind('@') {
        Some(at) => &rest[at + 1..],
        None => rest,
    };
    let separator = if rest.contains('?') { '&' } else { '?' };
    format!("{scheme}://{user}:{password}@{rest}{separator}authSource={auth_db}")
}

#[tokio::test(flavor = "multi_thread")]
async fn rejected_mongodb_credentials_are_reported_at_once_without_the_password() {
    let target = Target::new("mongo_auth");
    let db = target.db().await;
    let user = format!("u_{}", target.database);
    db.run_command(doc! {
        "createUser": &user,
        "pwd": "right-pass-1234",
        "roles": [{ "role": "readWrite", "db": &target.database }],
    })
    .await
    .expect("createUser");

    // The server checks passwords: the right one gets in, the wrong one not.
    let right = with_credentials(
        &target.mongo_uri,
        &user,
        "right-pass-1234",
        &target.database,
    );
    let client = mongodb::Client::with_uri_str(&right).await.unwrap();
    client
        .database(&target.database)
        .run_command(doc! { "ping": 1 })
        .await
        .expect("the right password is accepted");
    let wrong = with_credentials(
        &target.mongo_uri,
        &user,
        "wrong-pass-do-not-print",
        &target.database,
    );

    // `once` retries an unreachable server five times, logging each retry;
    // rejected credentials it reports after the first attempt.
    let out = target.clone().with_mongo(&wrong).run("auth", &["once"]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Before asserting: the user outlives its database.
    db.run_command(doc! { "dropUser": &user })
        .await
        .expect("dropUser");
    target.cleanup().await;

    assert_eq!(out.status.code(), Some(4), "{all}");
    assert_eq!(
        all.matches("not reachable yet").count(),
        0,
        "rejected credentials are not retried: {all}"
    );
    assert!(all.contains("credentials were rejected"), "{all}");
    assert!(all.contains("authentication failed"), "{all}");
    assert!(all.contains("MONGO_URI"), "{all}");
    assert!(!all.contains("do-not-print"), "{all}");
}
